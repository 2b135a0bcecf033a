/* connectors/postgres/pg_cdc.h - change data capture of the postgres source (private to
 * this folder): publication and replication slot management, the logical replication
 * stream (pgoutput decoded by pg_repl.c) written into a row writer, and acknowledging the
 * slot. docs/internals/cdc.md describes the design.
 *
 * A cdc resource is planned as {"mode":"cdc","slot","publication","start","end",
 * "snapshot","shards":[{"stream":true}, copy shards...]}: shard 0 streams the slot from
 * `start` (an LSN, "X/Y") until it has caught up with `end` (frozen at plan time); the
 * other shards (first run only) copy the table under `snapshot`, the slot's exported
 * snapshot. The stream's positions are {"shard":0,"n":LSN}: the end LSN of the last
 * transaction received completely (a resumed stream restarts there). */
#ifndef FERRY_PG_CDC_H
#define FERRY_PG_CDC_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include "connectors/postgres/pg_common.h"
#include "ferry/connector.h"
#include "pipeline/cdc_columns.h"

/* The resource keys of a cdc resource: slot, publication, on_slot_lost (error|resnapshot).
 * Read (and so marked used) at discover time. Names are derived when not configured:
 * "ferry_<pipeline>_<table>" lower-cased, [a-z0-9_] only, at most 63 bytes (a hash of the
 * route replaces the tail of a longer name). */
struct ferry_pg_cdc_opts {
    char slot[64];
    char publication[64];
    bool publication_given;
    bool resnapshot;
    bool lost_given; /* on_slot_lost set on the resource */
    /* `slot:` set on the resource: the resource keeps a slot of its own (as before one slot
     * per pipeline); else it shares the pipeline's slot (pg_slot.h). */
    bool own_slot;
};
int ferry__pg_cdc_opts(const struct ferry_resource_spec *spec, struct ferry_pg_cdc_opts *o,
                       struct ferry_error *err);

/* The change-log columns (pipeline/cdc_columns.h) of a postgres source: a change's
 * `_ferry_lsn` is its commit record's start (Begin's final LSN), shared by the transaction's
 * changes; its `_ferry_seq` is the stream's row count in that transaction (the count a resume
 * inside a transaction skips by, so a replayed change gets the same). A snapshot row's
 * `_ferry_lsn` is one less than the position it was read at (the slot's start, a chunk's high
 * watermark: pgoutput gives a message's end), since the next commit may begin exactly there
 * and an equal value would leave the two unordered; its `_ferry_seq` is 0. */

/* Plans a cdc read into `plan` (mode, slot, publication, start, end, snapshot). With a
 * saved route position (its "n"), checks the slot is still the one ferry acknowledged
 * (present, not lost, confirmed position not past the saved one) and streams from there;
 * else (first run, or a lost slot with on_slot_lost: resnapshot) makes sure the
 * publication exists, (re)creates the slot with an exported snapshot and sets *copy: the
 * caller adds the copy shards. The replication connection that exported the snapshot must
 * stay open and idle until the copy is read: it is handed over in *keep. */
struct ferry_pg_cdc_target;
int ferry__pg_cdc_plan(PGconn *c, const char *url, const struct ferry_pg_conn_opts *opts,
                       const char *peer, const struct ferry_resource_spec *spec,
                       const struct ferry_pg_cdc_target *t, const char *route_checkpoint,
                       json_t *plan, bool *copy, PGconn **keep, struct ferry_error *err);

/* The relation a stream writes: its names as in the catalog and the schema rows follow. */
struct ferry_pg_cdc_target {
    const char *schema_name;
    const char *table;
    const char *from; /* quoted, for messages */
    const struct ferry_schema *sc;
    bool change_log;
    bool soft_delete; /* the schema ends with the deleted-at column (commit time of deletes) */
    bool all_columns; /* no `columns:` list: a new source column is a schema change */
    int64_t epoch_rows; /* > 0: end after this many changes, at a commit (before `end`) */
    bool keep_session;  /* --follow: park the replication session for the next run */
    enum ferry_schema_changes policy; /* `schema_changes:` (pg_schema_change.c) */
    const char *route;  /* the resource's route: the key of its schema.changed notes */
    bool truncates;     /* the sink applies truncate rows (ferry_read_context.truncates) */
    bool specials;      /* ±infinity / NaN as special values (ferry_read_context) */
    int streams; /* cdc streams that start at once (ferry_read_context.cdc_streams_together) */
    /* source key stream_large_transactions: the session asks for pgoutput's streaming of
     * in-progress transactions (protocol 2, PostgreSQL 14+; pg_spool.h) */
    bool stream_large_txns;
};

/* Where a stream reads the catalog from when its table's columns change. */
struct ferry_pg_schema_source {
    const char *url;
    const struct ferry_pg_conn_opts *opts;
    const char *peer;
};

struct ferry_pg_repl_msg;
/* A Relation message m of t's table against t's schema (pg_schema_change.c): fills map
 * (per user field, the message's column, -1 for none: NULL); *stop when the run must end
 * before the change (evolve); an error naming table and column when the policy refuses
 * the change or it is not a widening. Notes every change for schema.changed. */
int ferry__pg_schema_relation(const struct ferry_pg_schema_source *src,
                              const struct ferry_pg_cdc_target *t, int n_user,
                              const struct ferry_pg_repl_msg *m, int *map, bool *stop,
                              struct ferry_error *err);
/* A TRUNCATE of t's table in the stream: noted; FERRY_OK when it is to be written as a
 * truncate row (evolve or freeze, into a sink that applies them), else an error naming the
 * table and why. */
int ferry__pg_schema_truncate(const struct ferry_pg_cdc_target *t, struct ferry_error *err);

/* Progress of a stream, read by other threads (the runner's lag events): the position
 * (end LSN of the last complete transaction), the WAL bytes between it and the further of
 * the server's reported decoding position and the run's end, and the age of the last
 * received commit in microseconds (0 when caught up). active: a stream is running. */
struct ferry_pg_cdc_progress {
    _Atomic long long position, lag_bytes, lag_us;
    _Atomic int active;
    _Atomic int final_pending; /* the stream ended; its last report not read yet */
};

/* Streams shard 0 of a cdc plan into rw (see above). Returns FERRY_OK once caught up (or
 * stopped at a schema change, leaving the position before it), the row writer's stop
 * code, or an error naming the table. */
int ferry__pg_cdc_stream(const char *url, const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, json_t *plan,
                         const struct ferry_position *resume, struct ferry_row_writer *rw,
                         struct ferry_pg_cdc_progress *progress, struct ferry_error *err);

/* First runs: the copy shards of a resumed attempt read a snapshot later than the slot's
 * (the exported one died with the earlier process), so the stream must reach at least a
 * position taken after them for the run to end consistent: raises the plan's "end" (in
 * memory) to a WAL position taken now. Called before streaming shard 0, which runs after
 * every copy shard. */
int ferry__pg_cdc_extend_end(const char *url, const struct ferry_pg_conn_opts *opts,
                             const char *peer, json_t *plan, struct ferry_error *err);

/* Advances the slot of a cdc plan to the saved position's LSN (never back, never past it);
 * *caught_up = position >= the plan's end. */
int ferry__pg_cdc_ack(PGconn *c, const char *peer, const char *plan_json, const char *position,
                      bool *caught_up, struct ferry_error *err);

/* Drops the resource's slot, and its publication when ferry named it. */
int ferry__pg_cdc_drop(PGconn *c, const char *peer, const struct ferry_resource_spec *spec,
                       struct ferry_error *err);

/* ---- helpers shared with pg_slot.c (the pipeline's shared slot) ---------------------- */

struct ferry_pg_slot_info {
    bool exists;
    bool lost;
    bool unreserved; /* the WAL it needs goes at the next checkpoint (max_slot_wal_keep_size) */
    bool active;
    bool pgoutput;
    bool this_db;
    uint64_t confirmed;
    uint64_t restart; /* restart_lsn: where a new session (or an advance) starts decoding */
};
int ferry__pg_cdc_slot_info(PGconn *c, const char *peer, const char *slot,
                            struct ferry_pg_slot_info *si, struct ferry_error *err);
/* A saved position whose tag says a snapshot in chunks is unfinished ("c<key>", pg_chunk.h):
 * "chunked" and "chunk_after" into the plan. */
int ferry__pg_cdc_plan_chunks(json_t *plan, const char *position, struct ferry_error *err);
/* A parameterised query that returns rows; *res is the caller's to clear. */
int ferry__pg_cdc_query(PGconn *c, const char *sql, int np, const char *const *params,
                        PGresult **res, const char *peer, const char *what,
                        struct ferry_error *err);
/* The publication publishes inserts, updates, deletes and truncates (one left out would be
 * skipped by the server's decoder, silently): else ECONFIG naming it and the ALTER that
 * fixes it. */
int ferry__pg_cdc_check_publish(PGconn *c, const char *peer, const char *pub,
                                struct ferry_error *err);
/* The table has a replica identity (else updates and deletes could not be captured). */
int ferry__pg_cdc_check_identity(PGconn *c, const char *peer, const char *from,
                                 struct ferry_error *err);
/* Appends `elem` to *b, a text[] literal ("{...}", empty: none yet). */
int ferry__pg_cdc_array_add(struct ferry_buf *b, const char *elem);
/* The open writers of `tables` (a text[] literal of qualified names; a partitioned table's
 * partitions count): the transactions holding one's RowExclusiveLock (every INSERT, UPDATE,
 * DELETE, MERGE and COPY takes it until its transaction ends). With *list empty, those now;
 * else those of *list (virtual transaction ids, the last look's) still holding it. *n of
 * them; *list becomes theirs; *pids names their backends ("1, 2"; "prepared" for a
 * prepared transaction). Why: pgoutput never publishes a change made to a table before the
 * table joined the publication, even when its transaction commits later, so a table's first
 * snapshot must see those writers ended. */
int ferry__pg_cdc_writers(PGconn *c, const char *peer, const char *tables, struct ferry_buf *list,
                          int *n, struct ferry_buf *pids, struct ferry_error *err);
/* A WAL position written now (a logical message): the end a bounded run streams to. */
int ferry__pg_cdc_end_position(PGconn *c, const char *peer, uint64_t *end, struct ferry_error *err);
/* A saved position's "n" (0 when absent) and "k" (k may be NULL). */
int ferry__pg_cdc_position(const char *position, uint64_t *lsn, int64_t *k,
                           struct ferry_error *err);
void ferry__pg_cdc_set_lsn(json_t *plan, const char *key, uint64_t lsn);
int ferry__pg_cdc_plan_lsn(json_t *plan, const char *key, uint64_t *out, struct ferry_error *err);
/* Creates `slot` with an exported snapshot (plan "snapshot" and "start"); *keep: the
 * replication connection, idle in the exporting transaction, the caller's to close. */
int ferry__pg_cdc_create_slot(const char *url, const struct ferry_pg_conn_opts *opts,
                              const char *peer, const char *slot, json_t *plan, PGconn **keep,
                              struct ferry_error *err);
/* Moves the slot's confirmed position to lsn (never back); then, when the slot is free and
 * its restart_lsn trails its confirmed position by RESTART_PULL_BYTES or more, advances it
 * once more to its confirmed position, which moves restart_lsn up to the last
 * running-transactions record before it (docs/internals/cdc.md, "restart_lsn"). */
int ferry__pg_cdc_advance(PGconn *c, const char *peer, const char *slot, uint64_t lsn,
                          struct ferry_error *err);
/* Drops `slot` when it exists (an error when a session holds it), then publication `pub`
 * (NULL: none, it is not ferry's). */
int ferry__pg_cdc_drop_names(PGconn *c, const char *peer, const char *slot, const char *pub,
                             struct ferry_error *err);
/* "ferry_<a>[_<b>]" folded to [a-z0-9_], at most 63 bytes (a hash of `id` replaces the tail
 * of a longer one). */
void ferry__pg_cdc_fold_name(const char *a, const char *b, const char *id, char out[64]);

#endif
