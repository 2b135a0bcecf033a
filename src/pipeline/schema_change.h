/* pipeline/schema_change.h - what happens when a source's columns change while it is
 * followed (`schema_changes: evolve | freeze | fail`), shared by every cdc source.
 *
 * A source compares each description of a table it receives (pgoutput Relation message,
 * binlog table map) with the schema discovered when the run began, classifies each
 * difference (ferry_schema_change_kind), asks ferry_schema_change_decide() what to do, and
 * notes the change (ferry_schema_change_note) so that the runner says it on the run's
 * events as `schema.changed` {table, column, change, old_type, new_type, policy, action}.
 * The destination side (adding a column, widening a type, letting go of NOT NULL) is done
 * by the sink when the next run prepares it, from ferry_target.schema_changes.
 * Thread-safe: the notes are kept under a lock (sources run on their own threads), each
 * with the tag of the run whose thread made it (ferry_schema_change_tag_set). */
#ifndef FERRY_PIPELINE_SCHEMA_CHANGE_H
#define FERRY_PIPELINE_SCHEMA_CHANGE_H

#include <stdbool.h>
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/core.h"

enum ferry_schema_change_kind {
    FERRY_SC_ADDED,    /* a column the run's schema lacks, still in the source's catalog */
    FERRY_SC_GONE,     /* a column the changes carry that the source has dropped since */
    FERRY_SC_DROPPED,  /* a column of the run's schema the source no longer has */
    FERRY_SC_WIDENED,  /* a type that holds every value of the old one (int4 -> int8) */
    FERRY_SC_RETYPED,  /* any other type change (narrower, another kind) */
    FERRY_SC_TRUNCATED /* TRUNCATE of the table */
};

enum ferry_schema_action {
    FERRY_SC_CONTINUE, /* go on: the column's values are ignored, or NULL from now on */
    FERRY_SC_STOP,     /* end the run before the change; the next run's discover and sink
                        * prepare take it in (the next run starts at once) */
    FERRY_SC_APPLY,    /* applied in stream order (a truncate) */
    FERRY_SC_ERROR     /* the run fails naming table and column */
};

/* Whether every value of `from` is a value of `to` exactly (smallint -> integer -> bigint,
 * real -> double precision, numeric(p,s) -> numeric with as many digits on both sides of
 * the point, numeric(p,s) -> unconstrained numeric). Equal types widen. */
bool ferry_type_widens(const struct ferry_field *from, const struct ferry_field *to);

/* What policy p does with a change of kind k. */
enum ferry_schema_action ferry_schema_change_decide(enum ferry_schema_changes p,
                                                    enum ferry_schema_change_kind k);

const char *ferry_schema_change_kind_name(enum ferry_schema_change_kind k);
const char *ferry_schema_action_name(enum ferry_schema_action a);

/* "int64", "decimal128(12,4)": the field's type as events and messages say it. */
void ferry_field_type_text(const struct ferry_field *f, char *buf, size_t len);

/* Notes a change of table's column (NULL for a truncate) for the resource whose route is
 * `route`; old_type/new_type may be NULL. Never fails the caller (a note that cannot be
 * kept for lack of memory is logged). */
void ferry_schema_change_note(const char *route, const char *table, const char *column,
                              enum ferry_schema_change_kind k, const char *old_type,
                              const char *new_type, enum ferry_schema_changes p,
                              enum ferry_schema_action a);

/* Takes the notes of `route` made for the calling thread's run (below), in the order they
 * were made, as JSON objects (caller frees each and the array with ferry_free); *n = 0 and
 * NULL when there are none. */
char **ferry_schema_change_take(const char *route, int *n);

/* The run the calling thread works for: an opaque tag (NULL: none), which each note keeps
 * and ferry_schema_change_take matches, so that two runs going on at once in one process
 * with the same route key each get their own notes. The runner tags its threads and the
 * lanes'; a flow hands its caller's tag on to its reader threads. Untagged notes or
 * takers match any. */
void ferry_schema_change_tag_set(const void *tag);
const void *ferry_schema_change_tag(void);

#endif
