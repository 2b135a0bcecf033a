/* ferry/connector.h - the source and sink contracts (DESIGN §2).
 *
 * A connector is a `const struct` vtable with an ABI version, required and optional
 * slots, registered in one static table (src/connectors/registry.c). Registration checks
 * the required slots and names the missing one. One thread owns each connector instance;
 * only `cancel` may be called from another thread. Every blocking network call has a
 * timeout and honours cancellation. A connector never includes another connector.
 *
 * Instances are `void *ctx` values made by `open` and freed by `close`. */
#ifndef FERRY_CONNECTOR_H
#define FERRY_CONNECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/config.h"
#include "ferry/error.h"

struct ferry_position; /* checkpoint/position.h */

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_CONNECTOR_ABI 1

struct ferry_table_info; /* ferry/tables.h */

enum ferry_read_mode { FERRY_READ_FULL = 0, FERRY_READ_INCREMENTAL, FERRY_READ_CDC };
enum ferry_write_mode {
    FERRY_WRITE_APPEND = 0,
    FERRY_WRITE_REPLACE,
    FERRY_WRITE_UPSERT,
    FERRY_WRITE_MERGE
};
const char *ferry_read_mode_name(enum ferry_read_mode m);
const char *ferry_write_mode_name(enum ferry_write_mode m);
/* `schema_changes:` (pipeline-level, overridable per resource): what a cdc stream and the
 * sink do when the source's columns change while it is followed (src/pipeline/schema_change.h). */
enum ferry_schema_changes { FERRY_SCHEMA_EVOLVE = 0, FERRY_SCHEMA_FREEZE, FERRY_SCHEMA_FAIL };
const char *ferry_schema_changes_name(enum ferry_schema_changes p);

/* `on_unrepresentable:` (pipeline-level, overridable per resource): what happens to a value
 * the sink cannot hold (its caps.values): fail stops the run naming resource, column and
 * row; null and clamp convert it just before the sink and count it (pipeline/convert.h). */
enum ferry_unrepresentable { FERRY_UNREP_FAIL = 0, FERRY_UNREP_NULL, FERRY_UNREP_CLAMP };
const char *ferry_unrepresentable_name(enum ferry_unrepresentable u);

/* What the engine decides about one resource for one run and hands to the source with
 * its spec (spec->run). None of it comes from the resource's own map: the runner derives
 * it from the pipeline, the sink's capabilities and the command line. */
struct ferry_read_context {
    /* The pipeline's name and this resource's route key, for names a source derives from
     * them (cdc replication slots). */
    const char *pipeline;
    const char *route;
    /* A cdc resource written as a change log (`write: append`): its schema then ends with
     * _ferry_op, _ferry_lsn, _ferry_commit_time. */
    bool change_log;
    /* `soft_delete: COLUMN` of a cdc resource written with merge: the source appends
     * COLUMN (timestamptz, NULL while the row lives) and a delete carries its commit time
     * there; the sink then marks the row instead of deleting it (the target schema's
     * soft_delete). NULL: deletes delete. */
    const char *soft_delete;
    /* `ferry run --follow --epoch-rows N`: a cdc stream may end its run after N changes,
     * at a transaction's commit (the next run goes on at once). 0: it streams to the end
     * frozen in its plan. */
    int64_t cdc_epoch_rows;
    /* `ferry run --follow`: more runs of this process follow, so a source may keep its log
     * session open between them. */
    bool cdc_follow;
    /* The positions this run reads become durable only at the run's one sink commit, at
     * its end (the sink is durable at_commit; a crash before that commit leaves every shard
     * pending, so it is read again from its start). A source may then plan a full read
     * that needs no key order and say so in the plan with "commit_once": true; the runner
     * then never commits such a run early (a pause discards the session, as for
     * replace_commits_once) and refuses to resume it into a sink durable per apply. false:
     * positions may become durable mid-shard (per_apply, distributed runs). */
    bool positions_at_end;
    /* `schema_changes:` of this resource (else the pipeline's; default evolve). */
    enum ferry_schema_changes schema_changes;
    /* The sink applies FERRY_OP_TRUNCATE rows for this resource (keyed write, no change
     * log, no soft delete): a cdc source may then send a source TRUNCATE in stream order. */
    bool truncates;
    /* The pipeline writes with `write: merge`: delete operations a source emits are applied
     * (other write modes would take a delete row for a row: a source that would emit deletes
     * refuses instead). Added for the iceberg source's incremental reads. */
    bool applies_deletes;
    /* The sink stores the special values below exactly (its caps.special_values) and no
     * transform reads them as text (cast, hash): a source may emit them. false: a source
     * refuses such values naming column and row. Set by the runner once the sink is open. */
    bool special_values;
    /* How many cdc streams of this run start at once with this one, this one included (the
     * runner runs a source's streams side by side when it sets cdc_one_stream, so that they
     * can share one log connection); 0: the stream runs alone. Valid during extract. */
    int cdc_streams_together;
    /* `on_unrepresentable:` of this resource (else the pipeline's; default fail). */
    enum ferry_unrepresentable on_unrepresentable;
    /* The resource's `filter` transforms a source may use to skip data its statistics prove
     * holds no passing row (Parquet row groups, Iceberg data files): never to drop rows
     * itself, the transform still runs on what is read. Borrowed from the transform chain
     * (ferry_transforms_pushdown), set by the runner before plan; NULL/0: none. */
    const struct ferry_read_filter *filters;
    int n_filters;
};

/* A filter a source can check against value statistics: a source column of an integer,
 * date or timestamp type, with its constants in ferry's int64 form of that type (days for
 * date32, microseconds since 1970 UTC for timestamps). A row passes when its value is not
 * NULL and equals / is in / is greater than / is less than the constants. */
enum ferry_read_filter_op {
    FERRY_READ_FILTER_EQUALS = 0,
    FERRY_READ_FILTER_IN,
    FERRY_READ_FILTER_GREATER,
    FERRY_READ_FILTER_LESS
};

struct ferry_read_filter {
    const char *column;
    enum ferry_type type;
    enum ferry_read_filter_op op;
    const int64_t *values;
    int n_values;
};

/* Special values, only in batches read with ferry_read_context.special_values: +-infinity
 * of a date32 column (INT32_MAX / INT32_MIN), of a timestamp column (INT64_MAX / INT64_MIN),
 * and NaN of a decimal128 column ({hi INT64_MAX, lo UINT64_MAX}, beyond 38 digits). A sink
 * declaring caps.special_values writes them as such (PostgreSQL: 'infinity', 'NaN') for
 * fields whose origin_type says they came from a source of its own kind. */
#define FERRY_SPECIAL_DATE_PINF INT32_MAX
#define FERRY_SPECIAL_DATE_NINF INT32_MIN
#define FERRY_SPECIAL_TS_PINF INT64_MAX
#define FERRY_SPECIAL_TS_NINF INT64_MIN
#define FERRY_SPECIAL_DEC_NAN_HI INT64_MAX
#define FERRY_SPECIAL_DEC_NAN_LO UINT64_MAX

/* One resource of the pipeline file, as the source sees it. */
struct ferry_resource_spec {
    char *table;          /* as written: "orders", "public.orders" */
    enum ferry_read_mode mode;
    char **cursor;        /* incremental: cursor columns (NULL-terminated), else NULL */
    int n_cursor;
    char **columns;       /* selected columns in order, NULL = all */
    int n_columns;
    char **key;           /* declared key, NULL = discover the primary key */
    int n_key;
    int64_t lookback_ms;  /* incremental: re-read this much before the saved cursor */
    struct ferry_cfg *node; /* the resource's map: connectors read their own extra keys */
    /* `tables: [PATTERN...]` / `exclude: [PATTERN...]` (NULL-terminated) instead of `table:`:
     * a pattern entry, replaced by one resource per matching table when the run is planned
     * (ferry_tables_expand, ferry/tables.h); `table` then holds a display name. `expanded`:
     * this resource came from such an entry. */
    char **patterns;
    int n_patterns;
    char **exclude;
    int n_exclude;
    bool expanded;
    /* What the engine decided about this resource for the run being read (borrowed, set
     * by the runner before discover; NULL outside a run, e.g. `ferry verify`): read it
     * through ferry_read_context_of(), which gives the defaults for NULL. */
    const struct ferry_read_context *run;
    /* Default destination name, owned, set by the pipeline loader when it differs from a
     * suffix of `table` (a quoted name: `public."My Tab"` -> My Tab). NULL elsewhere;
     * read through ferry_resource_target(). */
    char *target_default;
};

/* spec->run, or every field at its default (no names, no change log, no soft delete, no
 * epochs, positions durable mid-shard) when the spec is read outside a run. */
static inline const struct ferry_read_context *
ferry_read_context_of(const struct ferry_resource_spec *spec)
{
    static const struct ferry_read_context none;
    return spec->run ? spec->run : &none;
}

/* ---- Source ------------------------------------------------------------------------ */

/* ---- Verify (an optional slot of sources and sinks) ---------------------------------- */

struct ferry_vtable; /* what `ferry verify` compares (engine-internal: src/verify/verify.h) */
struct ferry_vside;  /* one side of a comparison (engine-internal) */

/* Opens one side of a `ferry verify` comparison on the database the connector reaches: the
 * database computes the digests of key-range chunks (a chunk-digest query) and hands out a
 * chunk's rows. cfg: the connector's section; source: the pipeline's source side (r->table
 * as the source reads it), else the destination (ferry_resource_target(r)); what: "source"
 * or "destination"; *table_out: the table's name for the report (caller frees). A
 * connector without it is read through ferry when it is the source and cannot be verified
 * as a destination. */
typedef int (*ferry_verify_open_fn)(struct ferry_cfg *cfg, bool source,
                                    const struct ferry_resource_spec *r,
                                    const struct ferry_vtable *t, const char *what,
                                    struct ferry_vside **out, char **table_out,
                                    struct ferry_error *err);

struct ferry_source_vtable {
    int abi;              /* FERRY_CONNECTOR_ABI */
    const char *name;     /* "sample", "sqlite"... the pipeline file's source.type */
    /* Keys of the source section that tune and do not define the data's route; they are
     * left out of the pipeline version hash. NULL-terminated, may be NULL. */
    const char *const *tuning_keys;
    bool supports_incremental;
    bool supports_cdc;
    /* Incremental reads that need no `cursor:` (the source keeps its own position: the
     * iceberg source's snapshot id, the objects the s3 and files sources read); a cursor
     * given is refused. Such a source's plan may carry "route_checkpoint": {...}; when the
     * run completes, the tracker saves that object as the route's position (shard 0), and
     * the next plan gets it as route_checkpoint. */
    bool incremental_without_cursor;
    /* Its snapshot lives on one connection and cannot be imported by another (MySQL and
     * MariaDB): `concurrency:` then copies tables one after another on that connection, so
     * the run still reads one moment. */
    bool snapshot_one_connection;
    /* Its cdc streams can share one log connection when they run at once: the runner then
     * runs the cdc resources' streams side by side (after their copies, one after another),
     * each with a source instance of its own, and tells each how many started together
     * (ferry_read_context.cdc_streams_together). */
    bool cdc_one_stream;
    /* With cdc_one_stream: its streams mark commit-group cuts between source transactions
     * (ferry_rw_grouped, ferry_rw_group_enter, ferry_rw_close_group in ferry/batch.h), so the
     * runner applies them in one destination transaction per cut into a sink with group
     * transactions (docs/internals/cdc.md). */
    bool cdc_commit_groups;

    /* required */
    /* Reads its keys from the source section (cfg) and connects. Unknown keys are
     * reported by the caller afterwards. With `parallelism: N` the runner opens N-1 more
     * instances on the same section, one per extra reader thread: extract must depend on
     * its arguments only (not on state discover or plan left in the instance). */
    int (*open)(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err);
    /* Columns, types, nullability, key of one resource (honouring spec->columns and
     * spec->key). A missing table is FERRY_ENOTFOUND naming it. */
    int (*discover)(void *ctx, const struct ferry_resource_spec *spec,
                    struct ferry_schema **schema, struct ferry_error *err);
    /* Freezes how the resource will be read as a JSON object that has at least
     * {"shards": [ ... ]} (one element per shard, content connector-specific). For
     * incremental reads `route_checkpoint` is the saved position (or NULL) and the plan
     * records the lower and the frozen upper bound. Optional "rows_estimate": N, the rows
     * the plan expects to read (a guess, e.g. the planner's), shown as progress and ETA.
     * A full read whose shards have no resume point (a table without a key, a view: a
     * crash reads the shard again from its first row) says "keyset": "none"; the runner
     * then makes its batches durable together, never one by one (runner/schedule.c). */
    int (*plan)(void *ctx, const struct ferry_resource_spec *spec,
                const struct ferry_schema *schema, const char *route_checkpoint,
                char **plan_json, struct ferry_error *err);
    /* Reads one shard of a frozen plan into rw, starting after `resume` (a position this
     * source produced earlier for this shard, decoded by the caller with the checkpoint
     * codec, checkpoint/position.h: a source never parses position text; NULL for the
     * beginning; borrowed for the call). Returns FERRY_OK at the end of the shard, or the
     * code ferry_rw_end() returned (pause, cancel). The caller flushes the shard. */
    int (*extract)(void *ctx, const struct ferry_resource_spec *spec,
                   const struct ferry_schema *schema, const char *plan_json, int shard,
                   const struct ferry_position *resume, struct ferry_row_writer *rw,
                   struct ferry_error *err);
    void (*close)(void *ctx);

    /* optional */
    void (*cancel)(void *ctx); /* any thread: interrupt a blocking call */

    /* optional, together: one consistent view shared by several instances. Appended to
     * ABI 1 (a vtable that leaves them NULL reads as before). The runner, after planning
     * and before the first extract of an attempt, calls snapshot() on the instance that
     * planned and use_snapshot() with the id on every instance that will extract (that one
     * included); every extract of those instances in this attempt, across shards and
     * resources, then reads as of that one moment. The exported snapshot stays valid while
     * the exporting instance is open (until close). *snapshot_id is freed by the caller
     * with ferry_free. A later attempt exports a new one: consistency holds within an
     * attempt; resumed shards continue from their durable positions. */
    int (*snapshot)(void *ctx, char **snapshot_id, struct ferry_error *err);
    int (*use_snapshot)(void *ctx, const char *snapshot_id, struct ferry_error *err);

    /* optional, log sources (supports_cdc). Appended to ABI 1. cdc_ack: the runner calls it
     * on the planning instance after a cdc resource's route checkpoint `position` was SAVED
     * (run completed or paused-and-committed, and folded by the tracker), also when an
     * earlier run saved it: the source may release its log up to there (and never further;
     * a log shared by several resources, up to the least of their positions). *caught_up says whether the position
     * reached the end frozen in `plan_json` (false: the stream stopped early, e.g. at a
     * schema change, and another run continues it). cdc_drop: removes what the source
     * created for the resource (slot, publication), for `ferry cdc drop`. */
    int (*cdc_ack)(void *ctx, const struct ferry_resource_spec *spec, const char *plan_json,
                   const char *position, bool *caught_up, struct ferry_error *err);
    int (*cdc_drop)(void *ctx, const struct ferry_resource_spec *spec, struct ferry_error *err);
    /* Any thread, no blocking: the stream running on this instance, if any (FERRY_OK; else
     * FERRY_ENOTFOUND): its position and its lag in log bytes and in microseconds. */
    int (*cdc_progress)(void *ctx, int64_t *position, int64_t *lag_bytes, int64_t *lag_us);

    /* optional, database sources (appended to ABI 1): every table a `tables:` pattern may
     * select (ferry/tables.h): tables and partitioned tables, never a partition (a
     * partitioned table is read once, through its parent), a system table or ferry's own,
     * each with a size estimate; and the schema a one-part pattern means
     * (*default_schema, owned by the caller). Caller frees the list with
     * ferry_table_list_free. */
    int (*list_tables)(void *ctx, struct ferry_table_info **out, int *n, char **default_schema,
                       struct ferry_error *err);
    /* optional (`ferry verify`), appended to ABI 1 */
    ferry_verify_open_fn verify_open;
    /* Appended to ABI 1. With incremental_without_cursor: a `cursor:` is accepted too, and
     * the source then reads by it instead of its own position (the files source's Parquet
     * files). */
    bool incremental_cursor_optional;
    /* Appended to ABI 1. With cdc_one_stream: opens an instance for one stream run side by
     * side (its extract of a stream shard, cdc_progress, cancel, close; nothing else), which
     * holds no connection of its own while it streams (it may connect briefly when its
     * extract starts): the runner then starts every stream of a run at once. NULL: open(),
     * and the runner starts at most 16 at once (each stream holding a connection). */
    int (*open_stream)(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err);
    /* Appended to ABI 1, optional: the tables discover() will be asked about next (resource
     * names as written), so that a database source may read their catalog in one query
     * instead of one per table. A hint: whatever goes wrong is ignored here, and discover
     * then asks table by table and reports what it finds. */
    void (*discover_ahead)(void *ctx, const char *const *tables, int n);
};

/* ---- Sink -------------------------------------------------------------------------- */

enum ferry_durability {
    FERRY_DURABLE_PER_APPLY = 0, /* data survives once apply() returns */
    FERRY_DURABLE_AT_COMMIT      /* data survives only after commit() */
};

struct ferry_sink_caps {
    unsigned write_modes;          /* bit (1u << enum ferry_write_mode) */
    enum ferry_durability durability;
    bool encoded_integrity;        /* returns receipt.encoded_crc from every apply */
    bool transactional_checkpoint; /* stores ferry's checkpoint in its own commit */
    bool atomic_replace;           /* replace swaps at commit, never half a table */
    /* replace: every commit publishes the whole table, so only a run's last commit may be
     * made; a pause of such a run aborts the session instead (the resumed run reads its
     * sources again from the start). false: a pause commits what the session holds. */
    bool replace_commits_once;
    bool deletes;                  /* can apply delete operations (merge) */
    bool soft_deletes;             /* merge with schema->soft_delete: marks instead (cdc) */
    bool truncates;                /* upsert/merge: applies FERRY_OP_TRUNCATE rows in order */
    /* Several instances of this sink may hold sessions on the same destination at once,
     * each writing its own targets (`concurrency:` copies tables through one instance per
     * lane when every resource is durable per apply). false: one instance writes them all. */
    bool concurrent_sessions;
    bool special_values;           /* stores the special values (ferry_read_context) */
    /* Values the sink cannot hold, converted under `on_unrepresentable: null | clamp`
     * (with fail, the sink refuses them itself, naming table, column and row). */
    struct ferry_value_limits {
        bool calendar;         /* dates and timestamps only in years 0001..9999 */
        bool no_nan;           /* no float NaN */
        bool no_infinity;      /* no float +-Infinity */
        bool no_negative_zero; /* no float -0 (it would read back as 0) */
        /* decimal text: at most this many integer and fraction digits, no NaN or
         * Infinity (0: any text) */
        int decimal_int_digits, decimal_frac_digits;
    } values;
    /* Appended to ABI 1. per_apply durability with overlapped commits: when apply(N)
     * returns, every batch applied before N is durable, and N becomes durable when the next
     * apply(), settle() or commit() returns FERRY_OK (they report its failure). The flow
     * records N as durable only then. Requires the settle slot. */
    bool durable_after_next;
};

/* What the sink will write for one resource. */
struct ferry_target {
    int index;               /* 0..n_targets-1, passed back to apply() */
    const char *resource;    /* source resource name */
    const char *table;       /* destination name (default: resource without schema) */
    struct ferry_schema *schema; /* borrowed for the session's life */
    enum ferry_write_mode mode;
    enum ferry_read_mode read_mode;
    /* `schema_changes:` of the resource: evolve widens destination columns and lets go of
     * NOT NULL on a column the source dropped; freeze never changes an existing table
     * (fields it lacks are not written); fail and evolve add missing columns. */
    enum ferry_schema_changes schema_changes;
    /* The resource's route (NULL outside a run): the key under which a sink notes the
     * changes it makes to an existing table (pipeline/schema_change.h). */
    const char *route;
};

/* The run a session belongs to. */
struct ferry_session_info {
    const char *pipeline;
    const char *version;     /* pipeline version hash */
    int64_t run_id;
    int attempt;
    bool resuming;           /* a later attempt of the same logical run */
};

struct ferry_receipt {
    int64_t rows;
    int64_t bytes;
    uint32_t write_crc;      /* ferry_batch_digest() of what the sink holds before encoding */
    uint32_t encoded_crc;    /* CRC32-C of the exact bytes handed to the transport */
    bool has_encoded_crc;
    char uri[512];           /* where the data went (file, object, table), may be empty */
    /* Appended to ABI 1, meaningful with caps.durable_after_next: this apply made its batch
     * durable before returning (it committed on its own, after every batch before it was
     * durable), so the flow records it at once instead of after the next apply. A sink
     * that does not set it (the caller zeroes the receipt) keeps the caps' rule. */
    bool durable_now;
};

/* A checkpoint the destination stored in its own transaction, with what run_id's batches
 * that carried a checkpoint of this (resource, shard) added up to in the destination: rows
 * and bytes as their receipts said, one batch each (the counters the store folds from
 * batch.written). has_counts false: unknown (a row an older ferry wrote). */
struct ferry_sink_checkpoint {
    char *resource;
    int shard;
    int64_t run_id;
    char *position;
    bool has_counts;
    int64_t rows, bytes, batches;
};

struct ferry_sink_vtable {
    int abi;
    const char *name;
    const char *const *tuning_keys;

    /* required */
    int (*open)(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err);
    /* What this sink can do for `mode` (it may choose the durability per mode). */
    void (*capabilities)(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps);
    /* Creates what the target needs (table, staging table) before the first row. Called
     * for every target before begin(). */
    int (*prepare)(void *ctx, const struct ferry_target *target, struct ferry_error *err);
    /* Opens the write session ("open(run)" in DESIGN). */
    int (*begin)(void *ctx, const struct ferry_session_info *run, struct ferry_error *err);
    /* Writes one batch. `b` is borrowed (take a reference to keep it). b->digest holds the
     * pipeline's digest: a sink whose apply makes data durable must compute its own
     * digest first and, when they differ, make nothing durable and still return its
     * receipt (the pipeline reports the divergence). Zero-row batches carry only a
     * position (a shard finished): transactional sinks record it. */
    int (*apply)(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                 struct ferry_receipt *receipt, struct ferry_error *err);
    /* Makes the session durable (swap staging tables, commit the transaction). */
    int (*commit)(void *ctx, struct ferry_error *err);
    /* Discards what the session may discard; never fails the caller; idempotent. */
    void (*abort)(void *ctx);
    void (*close)(void *ctx);

    /* optional (required when caps.transactional_checkpoint) */
    /* Every checkpoint the destination holds for this pipeline; caller frees with
     * ferry_sink_checkpoints_free. */
    int (*checkpoints)(void *ctx, const char *pipeline, struct ferry_sink_checkpoint **out,
                       int *n, struct ferry_error *err);

    /* optional (`ferry verify`), appended to ABI 1 */
    ferry_verify_open_fn verify_open;

    /* optional (commit groups: cdc streams of one source log applied in one destination
     * transaction per source transaction, docs/internals/cdc.md), appended to ABI 1. In a
     * session of durability per_apply: group_begin opens a transaction that the following
     * applies join (they neither begin nor commit one of their own), group_commit makes it
     * durable with every checkpoint its applies carried, group_abort rolls it back (never
     * fails). All three or none. */
    int (*group_begin)(void *ctx, struct ferry_error *err);
    int (*group_commit)(void *ctx, struct ferry_error *err);
    void (*group_abort)(void *ctx);
    /* optional (required with caps.durable_after_next), appended to ABI 1: waits until every
     * batch whose apply() returned is durable; FERRY_OK when they are. After a failed apply
     * it still tells whether the batches before it are. */
    int (*settle)(void *ctx, struct ferry_error *err);
    /* Appended to ABI 1, optional: the target tables prepare() will be called for next, so
     * that a database sink may read their columns in one query. A hint, as the source's
     * discover_ahead: errors are left to prepare(). */
    void (*prepare_ahead)(void *ctx, const char *const *tables, int n);
};

void ferry_sink_checkpoints_free(struct ferry_sink_checkpoint *v, int n);

/* For sinks that encode what they write (files, s3, iceberg): resets the receipt to "nothing
 * written yet" with the sink's own digest of b and an encoded CRC to come. False when that
 * digest differs from the pipeline's: the sink then writes nothing and returns FERRY_OK
 * (the pipeline reports the divergence). */
bool ferry_receipt_start(struct ferry_receipt *receipt, const struct ferry_batch *b);

/* Registry (src/connectors/registry.c). */
const struct ferry_source_vtable *ferry_source_find(const char *name);
const struct ferry_sink_vtable *ferry_sink_find(const char *name);
/* NULL-terminated lists, for `ferry connectors` and error hints. */
const struct ferry_source_vtable *const *ferry_sources(void);
const struct ferry_sink_vtable *const *ferry_sinks(void);
/* Validates a vtable's required slots; the message names the first missing one. */
int ferry_source_vtable_check(const struct ferry_source_vtable *vt, struct ferry_error *err);
int ferry_sink_vtable_check(const struct ferry_sink_vtable *vt, struct ferry_error *err);

#ifdef __cplusplus
}
#endif
#endif
