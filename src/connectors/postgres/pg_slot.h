/* connectors/postgres/pg_slot.h - one publication and one replication slot for all the
 * `mode: cdc` resources of a pipeline (private to this folder; docs/internals/cdc.md).
 *
 * The source section's `slot:` and `publication:` name them (default "ferry_<pipeline>",
 * folded to [a-z0-9_], at most 63 bytes); `on_slot_lost:` there is every resource's
 * default. A resource with its own `slot:` keeps a slot of its own (pg_cdc.c as before).
 *
 * Lifecycle, per source instance (the planning one): discover registers each sharing
 * table; the first plan of a run makes sure the publication holds every registered table
 * and that the slot exists (made now, with an exported snapshot, when it does not); each
 * table then keeps its own position (an LSN) in its route checkpoint and streams from it
 * (the server skips transactions that end before it). Tables copied in this run read ONE
 * snapshot: the new slot's exported one, or, when the slot already serves other tables,
 * one exported after the new tables joined the publication (their stream then starts at the
 * slot's confirmed position and replays changes the copy already holds: merge converges).
 * The slot is acknowledged to the MINIMUM of every registered table's saved position, and
 * only once every one of them is known. Not thread-safe: the source instance's thread. */
#ifndef FERRY_PG_SLOT_H
#define FERRY_PG_SLOT_H

#include "connectors/postgres/pg_cdc.h"

struct ferry_pg_slot_table {
    char *route;
    char *from;        /* quoted, for messages and SQL */
    char *schema_name; /* as in the catalog */
    char *table;
    char publication[64];
    bool pub_given;
    char legacy_slot[64]; /* the slot this table had before one slot per pipeline */
    uint64_t acked;       /* the largest saved position handed to ack */
    bool has_ack;
};

struct ferry_pg_slot {
    const char *slot_key, *pub_key; /* source section keys (borrowed from the config) */
    int lost_key;                   /* -1 unset, 0 error, 1 resnapshot */
    char slot[64];                  /* resolved at the first register/plan/drop */
    struct ferry_pg_slot_table *tabs;
    int n_tabs;
    /* the planning of this instance's run */
    bool prepared;
    bool fresh;    /* the slot was made now: its snapshot and start serve every copy */
    char why[256]; /* why it was made (it was lost); empty: there was none */
    char snapshot[256];
    uint64_t start;     /* fresh: the consistent point */
    uint64_t confirmed; /* the slot's confirmed position when planned (fresh: start) */
    uint64_t end;       /* the run's one end for every table (a commit boundary for all) */
    bool unreserved;
    PGconn *keep;            /* the exporting connection (replication, or a plain one), idle */
    struct ferry_buf joined; /* the tables this planning added to the publication (text[]) */
};

/* Reads slot, publication and on_slot_lost of the source section. */
int ferry__pg_slot_config(struct ferry_pg_slot *sl, struct ferry_cfg *cfg, struct ferry_error *err);
/* A discovered cdc resource that shares the slot. */
int ferry__pg_slot_register(struct ferry_pg_slot *sl, const struct ferry_resource_spec *spec,
                            const char *schema_name, const char *table, const char *from,
                            struct ferry_error *err);
/* ferry__pg_cdc_plan for a sharing resource (same arguments and outputs; the exporting
 * connection stays in sl, *copy says whether copy shards follow). */
int ferry__pg_slot_plan(struct ferry_pg_slot *sl, PGconn *c, const char *url,
                        const struct ferry_pg_conn_opts *opts, const char *peer,
                        const struct ferry_resource_spec *spec, const struct ferry_pg_cdc_target *t,
                        const char *route_checkpoint, json_t *plan, bool *copy,
                        struct ferry_error *err);
/* Records the resource's saved position and, once every registered table's is known,
 * acknowledges the slot up to their minimum. */
int ferry__pg_slot_ack(struct ferry_pg_slot *sl, PGconn *c, const char *peer,
                       const struct ferry_resource_spec *spec, const char *plan_json,
                       const char *position, bool *caught_up, struct ferry_error *err);
/* `ferry cdc drop`: the shared slot, ferry's publication, and the resource's slot and
 * publication of before one slot per pipeline (migration). */
int ferry__pg_slot_drop(struct ferry_pg_slot *sl, PGconn *c, const char *peer,
                        const struct ferry_resource_spec *spec, struct ferry_error *err);
void ferry__pg_slot_release(struct ferry_pg_slot *sl);

#endif
