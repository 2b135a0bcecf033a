/* connectors/postgres/pg_sink.c - the `postgres` sink: tables in one PostgreSQL database.
 *
 * Owns the destination connection, the schema and tables it creates (every identifier
 * quoted), the staging tables of `replace` and `upsert`/`merge`, and ferry's checkpoint
 * table "_ferry"."checkpoints", written in the same transaction as the data. Calls libpq
 * through pg_common (connection, quoting, type names), the COPY encoder (pg_encode.c), the
 * batch digest and CRC32-C. Registered in connectors/registry.c; driven by the runner on
 * one thread.
 *
 * Writing. Every mode moves rows with COPY ... FROM STDIN (FORMAT binary), encoded from the
 * column buffers into one reused chunk buffer; CRC32-C over exactly the bytes sent is the
 * receipt's encoded_crc. append copies into the table; replace into "<table>__ferry_staging"
 * (no key while loading), swapped in at commit; upsert and merge copy into a session-local
 * temporary table that also carries each row's batch position and operation, then one
 * statement keeps the last row of each key: on PostgreSQL 15+ a MERGE (which also deletes
 * the keys of a merge whose last operation is a delete), before 15 an INSERT ... SELECT ...
 * ON CONFLICT DO UPDATE (merge first deletes those keys); so a batch is applied as if its
 * rows ran in order. A batch of inserts only first tries INSERT ... ON CONFLICT of every
 * staged row as it is (apply_upsert); one whose keys increase is staged in a second
 * temporary table of the fields alone, which that statement reads without projecting each
 * row (write_lean).
 *
 * Transactions. per_apply: every apply() is one transaction (rows + checkpoint), so what
 * apply returned is committed; append batches can overlap their commits (`overlap_commits`,
 * by default where the first batches' commits were slow, struct overlap_probe;
 * apply_overlapped: what apply returned is committed once the next apply, settle or commit
 * returns). at_commit: one transaction from begin() to commit(). replace
 * reports at_commit durability: at commit, one transaction adds the key to the staging
 * table, drops the old table and renames the staging one, so readers see the old table or
 * the new one, and a failed run keeps the old one.
 *
 * Exactly-once. The checkpoint row (pipeline, resource, shard) holds the position of the
 * last batch committed with it; the runner reads them through `checkpoints` and resumes
 * after them, so a resumed run writes no row twice, even in append mode. The row also sums
 * what its run committed through it (run_rows, run_bytes, run_batches), so that a crash
 * between this commit and the store's does not leave the run's counters short. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_encode.h"
#include "pipeline/schema_change.h"
#include "connectors/postgres/pg_guard.h"
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"
#include "ferry/failpoint.h"

#define WHAT "postgres sink"
/* COPY bytes handed to libpq at once. PQputCopyData copies them into its own buffer; with
 * 64 KiB or 256 KiB pieces that copy took 12-14 % of the client's CPU on the PG -> PG
 * benchmark, with 32 KiB about 4 % (the piece, its CRC and libpq's copy stay in the fast
 * caches), for the same number of bytes on the wire (docs/internals/postgres.md). */
#define CHUNK (32 * 1024)
#define SEQ_COL "__ferry_seq"
#define OP_COL "__ferry_op"

static const char *const sink_tuning_keys[] = {
    "durability", "connect_timeout", "statement_timeout", "idle_timeout", "keepalives_idle",
    "io_timeout", "overlap_commits", NULL};
static const char *const durability_words[] = {"per_apply", "at_commit", NULL};

struct target {
    bool used;
    char *resource;
    char *table;
    char *staging; /* replace: "<table>__ferry_staging" */
    char *temp;    /* upsert/merge: the temporary staging table */
    char *qtable;  /* "schema"."table", quoted */
    struct ferry_schema *schema;
    enum ferry_write_mode mode;
    enum ferry_schema_changes schema_changes;
    const char *route; /* borrowed from the runner: the key of schema.changed notes */
    int *orig;         /* freeze: per written field, its column in the batches; else NULL */
    struct ferry_pg_wire_col *wire; /* COPY columns (staging: + row number, operation) */
    int n_wire;
    char *copy_sql;
    char *upsert_sql;      /* upsert/merge: the last row of each key (ordered) */
    char *upsert_fast_sql; /* upsert/merge: every staged row (batches of inserts only) */
    char *delete_sql; /* merge; with soft_col >= 0 it marks rows instead */
    /* Columns carried as the source type's text into a destination column of that type:
     * per field the type the staging table's text is cast to, else NULL;
     * insert_sql moves an append/replace batch from the staging table (see plan_casts). */
    char **cast;
    char *insert_sql;
    int soft_col; /* merge: the target's soft_delete field, else -1 */
    bool merge;   /* upsert_sql is a MERGE statement (build_merge) */
    bool has_rules; /* the table has rules (pg_class.relhasrules), as ensure_table read it */
    bool row_hooks; /* ... or triggers (a foreign key's checks are triggers) or row-level
                     * security (relhastriggers, relrowsecurity): copy_direct never */
    /* upsert/merge: COPY straight into the table (no staging columns), for batches of
     * inserts only while no key was found there already (copy_direct); NULL when the
     * table's rules, triggers, casts or a soft delete column rule it out */
    char *direct_sql;
    bool direct_off; /* a batch met a key already in the table: the rest of the run stages */
    /* upsert/merge: a second temporary table of the fields alone, its COPY and its upsert,
     * for batches of inserts whose keys increase (keys_increase): the statement then reads
     * a table shaped exactly like its target, and the server copies each row as it is
     * instead of projecting away the staging columns (write_lean); NULL with casts */
    char *lean;
    char *lean_copy_sql;
    char *lean_upsert_sql;
    char uri[512];
};

/* overlap_commits: auto (the default). The first PROBE_BATCHES batches that could overlap
 * their commits commit one at a time instead, timed from BEGIN to the COMMIT sent (`copy_us`:
 * rows and checkpoint row) and the COMMIT's answer (`commit_us`: the WAL flush). When the
 * commits took at least 1/PROBE_SHARE of the batches' time, the rest of the sink's batches
 * overlap (apply_overlapped), else they keep one connection. Overlapping only hides the
 * commits' wait, and the second backend costs the server its own first touches of shared
 * memory and contention with the first (docs/internals/postgres.md), so where commits are
 * quick one connection is faster, and where they wait on a slow disk the overlap halves a
 * copy. The choice is made once per sink and said in the log (debug). */
enum { OVERLAP_AUTO, OVERLAP_ON, OVERLAP_OFF };
#define PROBE_BATCHES 4
#define PROBE_SHARE 5
struct overlap_probe {
    int n;
    int64_t copy_us, commit_us;
};

struct sink {
    PGconn *conn;
    char *url;
    struct ferry_pg_conn_opts opts;
    char *schema;
    bool at_commit;
    struct target *t;
    int n_t;
    char *pipeline;
    int64_t run_id;
    bool session; /* begin() done, neither committed nor aborted */
    bool in_tx;   /* the at_commit transaction is open */
    struct ferry_buf out;
    /* at_commit append/replace: the target whose COPY stays open across batches (-1: none),
     * and the checkpoints its batches carried, written at the commit (nothing else can run
     * on the connection while a COPY is open). */
    int streaming;
    struct pending_checkpoint *pending;
    int n_pending, cap_pending;
    /* Overlapped commits (apply_overlapped): `spare` is the second connection. While
     * `committing`, the COMMIT sent on it is not answered yet (of a batch into `lag_table`);
     * `lag_rc` is the last answer's outcome. `swapped`: conn is the second connection, not
     * the one begin() set up (with the session's temporary tables). `overlap`: batches
     * overlap now (`overlap_commits: true`, or `auto` once the probe chose it). */
    int overlap_mode; /* OVERLAP_* */
    bool overlap;
    struct overlap_probe probe;
    /* "_ferry"."checkpoints" has the run_* count columns (an older table that could not be
     * altered has not: its rows are written without counts) */
    bool ckpt_counts;
    PGconn *spare;
    bool committing, swapped;
    int lag_rc;
    char lag_table[160];
    struct ferry_pg_guard *guard; /* the guarded_* call's io_timeout guard, follows `conn` */
    char *schema_seen; /* the schema ensure_schema last found or made: not asked again */
    struct ahead *ahead; /* prepare_ahead: tables' columns read together, each taken once */
    int n_ahead;
};

struct pending_checkpoint {
    char *resource;
    int shard;
    char *position;
    int64_t rows, bytes, batches; /* of the batches held since the last write */
};

/* What one batch adds to its checkpoint row's run counts (the receipt's rows and bytes). */
struct ckpt_add {
    int64_t rows, bytes, batches;
};

static struct ckpt_add ckpt_add_of(const struct ferry_batch *b)
{
    return (struct ckpt_add){b->length, (int64_t)b->bytes, 1};
}

static void ahead_free(struct sink *s);

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

/* ---- open / close ------------------------------------------------------------------------ */

static void free_target(struct target *t)
{
    ferry_free(t->resource);
    ferry_free(t->table);
    ferry_free(t->staging);
    ferry_free(t->temp);
    ferry_free(t->qtable);
    ferry_free(t->wire);
    ferry_free(t->orig);
    ferry_free(t->copy_sql);
    ferry_free(t->upsert_sql);
    ferry_free(t->upsert_fast_sql);
    ferry_free(t->direct_sql);
    ferry_free(t->lean);
    ferry_free(t->lean_copy_sql);
    ferry_free(t->lean_upsert_sql);
    ferry_free(t->delete_sql);
    ferry_free(t->insert_sql);
    for (int i = 0; t->cast && t->schema && i < t->schema->n_fields; i++)
        ferry_free(t->cast[i]);
    ferry_free(t->cast);
    ferry_schema_unref(t->schema);
}

static void drop_pending(struct sink *s)
{
    for (int i = 0; i < s->n_pending; i++) {
        ferry_free(s->pending[i].resource);
        ferry_free(s->pending[i].position);
    }
    s->n_pending = 0;
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    drop_pending(s);
    ferry_free(s->pending);
    if (s->conn) PQfinish(s->conn);
    if (s->spare) PQfinish(s->spare);
    for (int i = 0; i < s->n_t; i++)
        free_target(&s->t[i]);
    ferry_free(s->t);
    ferry_secret_free(s->url);
    ferry_free(s->schema);
    ferry_free(s->schema_seen);
    ahead_free(s);
    ferry_free(s->pipeline);
    ferry_buf_release(&s->out);
    ferry_free(s);
}

/* overlap_commits: auto (absent too), or a boolean. */
static int read_overlap(struct ferry_cfg *cfg, int *mode, struct ferry_error *err)
{
    static const char *const words[] = {"auto", "true", "false", NULL};
    struct ferry_cfg *n = ferry_cfg_get(cfg, "overlap_commits");
    *mode = OVERLAP_AUTO;
    if (n == NULL || n->kind == FERRY_CFG_NULL ||
        (n->kind == FERRY_CFG_SCALAR && strcmp(n->scalar, "auto") == 0))
        return FERRY_OK;
    bool on = false;
    if (ferry_cfg_bool(cfg, "overlap_commits", false, &on, err) != FERRY_OK) {
        int word = 0; /* refused again, to name all three words */
        return ferry_cfg_enum(cfg, "overlap_commits", false, words, &word, err);
    }
    *mode = on ? OVERLAP_ON : OVERLAP_OFF;
    return FERRY_OK;
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    ferry_buf_init(&s->out, 0);
    s->streaming = -1;
    const char *schema = "public";
    int durability = 0;
    int rc = ferry__pg_read_conn_config(cfg, WHAT, &s->url, &s->opts, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "schema", false, &schema, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "durability", false, durability_words, &durability, err);
    /* create: like_source is done by the runner around the run (runner/clone.c) */
    static const char *const create_words[] = {"like_source", NULL};
    int create = 0;
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "create", false, create_words, &create, err);
    if (rc == FERRY_OK) rc = read_overlap(cfg, &s->overlap_mode, err);
    s->overlap = s->overlap_mode == OVERLAP_ON;
    if (rc == FERRY_OK && schema[0] == '\0')
        rc = ferry_cfg_error(err, ferry_cfg_get(cfg, "schema"), "schema: must not be empty");
    if (rc == FERRY_OK) {
        /* Refuse an over-long name now, before anything connects. */
        struct ferry_buf q;
        ferry_buf_init(&q, 0);
        rc = ferry__pg_quote_ident(&q, schema, err);
        ferry_buf_release(&q);
        if (rc != FERRY_OK) ferry_error_prefix(err, WHAT ": schema");
    }
    if (rc == FERRY_OK && (s->schema = ferry_strdup(schema)) == NULL) rc = oom(err);
    if (rc != FERRY_OK) {
        sink_close(s);
        return rc;
    }
    s->at_commit = durability == 1;
    *ctx = s;
    return FERRY_OK;
}

/* Server notices ("schema ... does not exist, skipping") go to the debug log, not stderr. */
static void notice(void *arg, const char *message)
{
    (void)arg;
    ferry_log(FERRY_LOG_DEBUG, WHAT ": server notice: %s", message);
}

/* Connects on first use: a pipeline refused at plan time touches no database. */
static int connect_db(struct sink *s, struct ferry_error *err)
{
    if (s->conn != NULL) {
        if (PQstatus(s->conn) == CONNECTION_OK) return FERRY_OK;
        PQfinish(s->conn);
        s->conn = NULL;
    }
    int rc = ferry__pg_connect(s->url, &s->opts, WHAT, &s->conn, err);
    if (rc == FERRY_OK) PQsetNoticeProcessor(s->conn, notice, NULL);
    return rc;
}

static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    struct sink *s = ctx;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) |
                        (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    caps->durability = (s->at_commit || mode == FERRY_WRITE_REPLACE) ? FERRY_DURABLE_AT_COMMIT
                                                                     : FERRY_DURABLE_PER_APPLY;
    caps->encoded_integrity = true;
    caps->transactional_checkpoint = true;
    caps->atomic_replace = true;
    caps->special_values = true; /* +-infinity, numeric NaN (of fields from a postgres source) */
    /* The swap at commit publishes the staging table whole: a paused replace must not. */
    caps->replace_commits_once = true;
    caps->deletes = true;
    caps->soft_deletes = mode == FERRY_WRITE_MERGE;
    caps->truncates = mode == FERRY_WRITE_UPSERT || mode == FERRY_WRITE_MERGE;
    caps->concurrent_sessions = true; /* its own connections per instance */
    caps->durable_after_next =
        s->overlap_mode != OVERLAP_OFF && !s->at_commit && mode == FERRY_WRITE_APPEND;
}

/* ---- SQL helpers --------------------------------------------------------------------------- */

static int exec(struct sink *s, const char *sql, const char *what, struct ferry_error *err)
{
    return ferry__pg_exec(s->conn, sql, FERRY_ESINK, what, err);
}

/* "schema"."name" */
static int qualified(struct ferry_buf *b, const char *schema, const char *name,
                     struct ferry_error *err)
{
    int rc = ferry__pg_quote_ident(b, schema, err);
    if (rc == FERRY_OK && ferry_buf_append(b, ".", 1) != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, name, err);
    return rc;
}

/* Runs the SQL in b (then released); the message names `what`. */
static int exec_buf(struct sink *s, struct ferry_buf *b, int built, const char *what,
                    struct ferry_error *err)
{
    int rc = built;
    if (rc == FERRY_OK) rc = exec(s, b->data, what, err);
    ferry_buf_release(b);
    return rc;
}

/* A query with text parameters; *res is the result on success (caller clears). */
static int query(struct sink *s, const char *sql, int n, const char *const *params, PGresult **res,
                 const char *what, struct ferry_error *err)
{
    PGresult *r = PQexecParams(s->conn, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        int rc = ferry__pg_error(err, FERRY_ESINK, s->conn, r, "%s", what);
        PQclear(r);
        return rc;
    }
    *res = r;
    return FERRY_OK;
}

static int ensure_schema(struct sink *s, const char *schema, struct ferry_error *err)
{
    /* Look first: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
     * schema is there, and a least-privilege role may only have USAGE on a pre-made one.
     * Once per schema and instance: a schema dropped since fails the statement that needs
     * it, naming it. */
    if (s->schema_seen && !strcmp(s->schema_seen, schema)) return FERRY_OK;
    PGresult *r = NULL;
    const char *p[1] = {schema};
    char what[160];
    snprintf(what, sizeof what, WHAT ": schema \"%s\"", schema);
    int rc =
        query(s, "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1", 1, p, &r, what, err);
    if (rc != FERRY_OK) return rc;
    bool exists = PQntuples(r) > 0;
    PQclear(r);
    if (!exists) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "CREATE SCHEMA IF NOT EXISTS ") == FERRY_OK ? FERRY_OK
                                                                              : oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, schema, err);
        snprintf(what, sizeof what, WHAT ": creating schema \"%s\"", schema);
        rc = exec_buf(s, &b, rc, what, err);
    }
    if (rc == FERRY_OK) {
        ferry_free(s->schema_seen);
        s->schema_seen = ferry_strdup(schema); /* NULL: asked again next time */
    }
    return rc;
}

/* ---- tables ------------------------------------------------------------------------------- */

struct dest_col {
    char *name;
    uint32_t oid;
    int32_t typmod;
    char *type; /* format_type() */
    bool pk;
    /* The type values are written in: a domain's base type (domains over domains followed
     * down), else the column's own; and how that type receives binary values. */
    uint32_t base_oid;
    int32_t base_typmod;
    char recv[32]; /* pg_type.typreceive, e.g. "enum_recv" */
    bool not_null, has_default;
};

static void dest_cols_free(struct dest_col *c, int n)
{
    for (int i = 0; i < n; i++) {
        ferry_free(c[i].name);
        ferry_free(c[i].type);
    }
    ferry_free(c);
}

/* A table's columns as prepare_ahead read them, for its first dest_columns. */
struct ahead {
    char *table;
    bool exists, rules, row_hooks;
    struct dest_col *cols;
    int n;
};

static void ahead_free(struct sink *s)
{
    for (int i = 0; i < s->n_ahead; i++) {
        ferry_free(s->ahead[i].table);
        dest_cols_free(s->ahead[i].cols, s->ahead[i].n);
    }
    ferry_free(s->ahead);
    s->ahead = NULL;
    s->n_ahead = 0;
}

/* Moves what prepare_ahead read about `table` into the outputs; false when it read nothing. */
static bool ahead_take(struct sink *s, const char *table, bool *exists, bool rel[2],
                       struct dest_col **out, int *n)
{
    for (int i = 0; i < s->n_ahead; i++) {
        struct ahead *a = &s->ahead[i];
        if (strcmp(a->table, table) != 0) continue;
        *exists = a->exists;
        rel[0] = a->rules;
        rel[1] = a->row_hooks;
        *out = a->cols;
        *n = a->n;
        ferry_free(a->table);
        s->ahead[i] = s->ahead[--s->n_ahead];
        return true;
    }
    return false;
}

/* Fills c from row i of a dest_columns result whose columns start at `off`; false when out
 * of memory (c's strings then freed by the caller's dest_cols_free). */
static bool dest_col_fill(struct dest_col *c, PGresult *r, int i, int off)
{
    c->name = ferry_strdup(PQgetvalue(r, i, off + 0));
    c->oid = (uint32_t)strtoul(PQgetvalue(r, i, off + 1), NULL, 10);
    c->typmod = (int32_t)strtol(PQgetvalue(r, i, off + 2), NULL, 10);
    c->type = ferry_strdup(PQgetvalue(r, i, off + 3));
    c->pk = PQgetvalue(r, i, off + 4)[0] == 't';
    c->base_oid = (uint32_t)strtoul(PQgetvalue(r, i, off + 5), NULL, 10);
    c->base_typmod = (int32_t)strtol(PQgetvalue(r, i, off + 6), NULL, 10);
    snprintf(c->recv, sizeof c->recv, "%s", PQgetvalue(r, i, off + 7));
    c->not_null = PQgetvalue(r, i, off + 8)[0] == 't';
    c->has_default = PQgetvalue(r, i, off + 9)[0] == 't';
    if (c->base_oid == 0) {
        c->base_oid = c->oid;
        c->base_typmod = c->typmod;
    }
    return c->name != NULL && c->type != NULL;
}

/* The columns of the tables $2 (text[]) of schema $1, each row led by its table: domains
 * resolved to their base type, primary key, rules. dest_columns and prepare_ahead. */
static const char dest_columns_many_sql[] =
    "WITH RECURSIVE d(rel, col, oid, typmod, depth) AS ("
    "SELECT c.oid, a.attnum, a.atttypid, a.atttypmod, 0 FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace "
    "WHERE ns.nspname = $1 AND c.relname = ANY ($2::text[]) AND a.attnum > 0 "
    "UNION ALL SELECT d.rel, d.col, t.typbasetype, t.typtypmod, d.depth + 1 "
    "FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid "
    "WHERE t.typtype = 'd' AND d.depth < 32) "
    "SELECT c.relname, a.attname, a.atttypid, a.atttypmod, "
    "pg_catalog.format_type(a.atttypid, a.atttypmod), "
    "EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid "
    "AND i.indisprimary AND a.attnum = ANY (i.indkey)), "
    "b.oid, b.typmod, bt.typreceive::text, a.attnotnull, a.atthasdef, c.relhasrules, "
    "c.relhastriggers OR c.relrowsecurity "
    "FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace "
    "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped "
    "LEFT JOIN LATERAL (SELECT d.oid, d.typmod FROM d WHERE d.rel = c.oid AND d.col = a.attnum "
    "ORDER BY d.depth DESC LIMIT 1) b ON true "
    "LEFT JOIN pg_catalog.pg_type bt ON bt.oid = b.oid "
    "WHERE ns.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relkind IN ('r', 'p') "
    "ORDER BY c.relname, a.attnum";

/* Columns of schema.table; *exists false when there is no such table; rel[0] whether it
 * has rules (MERGE refuses those: choose_merge), rel[1] triggers or row-level security
 * (copy_direct). */
static int dest_columns(struct sink *s, const char *table, bool *exists, bool rel[2],
                        struct dest_col **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    *exists = false;
    rel[0] = rel[1] = false;
    if (ahead_take(s, table, exists, rel, out, n)) return FERRY_OK;
    char what[200];
    snprintf(what, sizeof what, WHAT ": table \"%s\".\"%s\"", s->schema, table);
    struct ferry_buf arr;
    ferry_buf_init(&arr, 0);
    ferry__pg_text_array(&arr, &table, 1, ferry__pg_string_at);
    const char *p[2] = {s->schema, arr.data};
    PGresult *r = NULL;
    int rc = arr.data ? query(s, dest_columns_many_sql, 2, p, &r, what, err) : oom(err);
    ferry_buf_release(&arr);
    if (rc != FERRY_OK) return rc;
    int rows = PQntuples(r);
    *exists = rows > 0;
    rel[0] = rows > 0 && PQgetvalue(r, 0, 11)[0] == 't';
    rel[1] = rows > 0 && PQgetvalue(r, 0, 12)[0] == 't';
    struct dest_col *c = ferry_calloc((size_t)(rows ? rows : 1), sizeof *c);
    if (c == NULL) {
        PQclear(r);
        return oom(err);
    }
    int k = 0;
    for (int i = 0; i < rows; i++) {
        if (PQgetisnull(r, i, 1)) continue; /* a table without columns */
        if (!dest_col_fill(&c[k++], r, i, 1)) {
            PQclear(r);
            dest_cols_free(c, k);
            return oom(err);
        }
    }
    PQclear(r);
    *out = c;
    *n = k;
    return FERRY_OK;
}

static void field_type_text(const struct ferry_field *f, char *buf, size_t len)
{
    if (f->type == FERRY_TYPE_DECIMAL128)
        snprintf(buf, len, "decimal128(%d,%d)", f->precision, f->scale);
    else
        snprintf(buf, len, "%s", ferry_type_name(f->type));
}

/* Whether the destination knows type `type` (a format_type text); false also when asking
 * failed (the caller then uses ferry's own mapping). */
static bool type_known(struct sink *s, const char *type)
{
    const char *p[1] = {type};
    PGresult *r = PQexecParams(s->conn, "SELECT pg_catalog.to_regtype($1) IS NOT NULL", 1, NULL, p,
                               NULL, NULL, 0);
    bool known =
        PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return known;
}

/* The type of a column ferry creates: the source's own type (from a postgres source) when
 * the destination has it, as named or as a user type of that name in the sink's schema;
 * else ferry's mapping (ferry__pg_sql_type). *out is owned by the caller. */
static int creation_type(struct sink *s, const struct ferry_field *f, char **out,
                         struct ferry_error *err)
{
    const char *origin = ferry__pg_origin(f);
    /* A length or precision ferry's own type already covers (varchar(n), char(n), time(0),
     * timestamp(3)...) is not copied: a source that widens it later must still fit (the
     * values are exact either way). numeric(p,s) maps to itself. */
    if (origin && strchr(origin, '(') &&
        (f->type != FERRY_TYPE_UTF8 || !strncmp(origin, "character", 9)))
        origin = NULL;
    char mapped[64];
    *out = NULL;
    if (origin != NULL && type_known(s, origin)) {
        *out = ferry_strdup(origin);
    } else if (origin != NULL && ferry__pg_unqualified(origin) != origin) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        int rc = ferry__pg_quote_ident(&b, s->schema, err);
        if (rc == FERRY_OK &&
            ferry_buf_printf(&b, ".%s", ferry__pg_unqualified(origin)) != FERRY_OK)
            rc = oom(err);
        if (rc == FERRY_OK && type_known(s, b.data)) *out = ferry_buf_take(&b);
        ferry_buf_release(&b);
        if (rc != FERRY_OK) return rc;
    }
    if (*out == NULL) {
        ferry__pg_sql_type(f, mapped, sizeof mapped);
        *out = ferry_strdup(mapped);
    }
    return *out ? FERRY_OK : oom(err);
}

static int column_def(struct sink *s, struct ferry_buf *b, const struct ferry_field *f,
                      bool not_null, struct ferry_error *err)
{
    char *type = NULL;
    int rc = creation_type(s, f, &type, err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, f->name, err);
    if (rc == FERRY_OK &&
        ferry_buf_printf(b, " %s%s", type, not_null ? " NOT NULL" : "") != FERRY_OK)
        rc = oom(err);
    ferry_free(type);
    return rc;
}

static int key_list(struct ferry_buf *b, const struct ferry_schema *sc, const char *alias,
                    struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        if (ferry_buf_printf(b, "%s%s%s", k ? ", " : "", alias ? alias : "", alias ? "." : "") !=
            FERRY_OK)
            return oom(err);
        rc = ferry__pg_quote_ident(b, sc->fields[sc->key[k]].name, err);
    }
    return rc;
}

/* Append tables and replace staging tables get no PRIMARY KEY while loading: an append
 * target is a log that may hold a key more than once (repeated full runs, change logs). */
static int create_table(struct sink *s, const char *table, const struct ferry_schema *sc,
                        bool declare_key, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "CREATE TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, table, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " (") != FERRY_OK) rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(&b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK)
            rc = column_def(s, &b, &sc->fields[i],
                            !sc->fields[i].nullable || sc->fields[i].key_pos > 0, err);
    }
    if (declare_key && sc->n_key > 0 && rc == FERRY_OK) {
        rc = ferry_buf_printf(&b, ", PRIMARY KEY (") == FERRY_OK ? FERRY_OK : oom(err);
        if (rc == FERRY_OK) rc = key_list(&b, sc, NULL, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, ")") != FERRY_OK) rc = oom(err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, ")") != FERRY_OK) rc = oom(err);
    char what[200];
    snprintf(what, sizeof what, WHAT ": creating table \"%s\".\"%s\"", s->schema, table);
    return exec_buf(s, &b, rc, what, err);
}

static int add_column(struct sink *s, const char *table, const struct ferry_field *f,
                      struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "ALTER TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, table, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " ADD COLUMN ") != FERRY_OK) rc = oom(err);
    /* Nullable: the rows already there have no value for it. */
    if (rc == FERRY_OK) rc = column_def(s, &b, f, false, err);
    char what[240];
    snprintf(what, sizeof what, WHAT ": adding column \"%s\" to table \"%s\".\"%s\"", f->name,
             s->schema, table);
    return exec_buf(s, &b, rc, what, err);
}

/* How data of f goes into destination column d: by d's type, or by its domain's base type
 * (a domain's binary input is its base type's, then its constraints are checked); text into
 * a type whose binary input is its text (enum labels, json, xml, name, varchar(n), char(n): their
 * lengths are checked so nothing is cut or padded); integers into oid (range checked). */
static struct ferry_pg_wire_col wire_for_dest(const struct ferry_field *f, int col,
                                              const struct dest_col *d)
{
    struct ferry_pg_wire_col w = {col, ferry__pg_wire_for(f, d->base_oid, d->base_typmod), 0,
                                  false};
    if (w.wire != FERRY_PG_WIRE_NONE) return w;
    if (d->base_oid == 26 /* oid */ &&
        (f->type == FERRY_TYPE_INT8 || f->type == FERRY_TYPE_INT16 || f->type == FERRY_TYPE_INT32 ||
         f->type == FERRY_TYPE_INT64)) {
        w.wire = FERRY_PG_WIRE_OID; /* range checked per value */
        return w;
    }
    if (f->type != FERRY_TYPE_UTF8) return w;
    if (!strcmp(d->recv, "enum_recv") || !strcmp(d->recv, "xml_recv") ||
        !strcmp(d->recv, "json_recv") || !strcmp(d->recv, "namerecv") ||
        !strcmp(d->recv, "textrecv")) {
        w.wire = FERRY_PG_WIRE_TEXT;
    } else if (!strcmp(d->recv, "varcharrecv") || !strcmp(d->recv, "bpcharrecv")) {
        /* typmod: characters + 4; -1 without a length */
        int32_t n = d->base_typmod >= 4 ? d->base_typmod - 4 : 0;
        w.wire = n > 0 ? FERRY_PG_WIRE_TEXT_CHARS : FERRY_PG_WIRE_TEXT;
        w.chars = !strcmp(d->recv, "bpcharrecv") ? -n : n;
    }
    return w;
}

/* A column of the source's own type (the field's origin_type names the destination column's
 * type): values a native format refused only for the column's typmod (a time(0) source
 * gives what time(0) holds), and the text of types ferry has no twin for (arrays, ranges,
 * interval, inet, geometric types...), which the destination casts from the staging table
 * (plan_casts): the type's own output read back by its own input. */
static int origin_wire(struct target *t, int i, const struct dest_col *d, struct ferry_error *err)
{
    const struct ferry_field *f = &t->schema->fields[i];
    if (!ferry__pg_same_type(ferry__pg_origin(f), d->type)) return FERRY_OK;
    if (f->type != FERRY_TYPE_UTF8) {
        t->wire[i].wire = ferry__pg_wire_for(f, d->base_oid, -1);
        return FERRY_OK;
    }
    /* the full type (bit(3), not bit): the values came from this very type */
    t->cast[i] = ferry_strdup(d->type);
    if (t->cast[i] == NULL) return oom(err);
    t->wire[i].wire = FERRY_PG_WIRE_TEXT;
    t->wire[i].chars = 0;
    return FERRY_OK;
}

/* Column i of the staging table as the destination takes it: `alias."name"`, cast to the
 * destination's type when it is carried as text. */
static int staged_col(struct ferry_buf *b, const struct target *t, int i, const char *alias,
                      struct ferry_error *err)
{
    if (alias && ferry_buf_printf(b, "%s.", alias) != FERRY_OK) return oom(err);
    int rc = ferry__pg_quote_ident(b, t->schema->fields[i].name, err);
    if (rc == FERRY_OK && t->cast && t->cast[i] &&
        ferry_buf_printf(b, "::%s", t->cast[i]) != FERRY_OK)
        rc = oom(err);
    return rc;
}

/* With columns carried as text (origin_wire), batches go through the session's staging
 * table (COPY cannot cast): an upsert/merge already stages; an append/replace gets one and
 * insert_sql, which moves each batch into `into` in batch order. */
static int plan_casts(struct sink *s, struct target *t, const char *into, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    bool any = false;
    for (int i = 0; i < sc->n_fields; i++)
        any = any || t->cast[i] != NULL;
    ferry_free(t->insert_sql);
    t->insert_sql = NULL;
    if (!any) return FERRY_OK;
    if (t->temp == NULL) {
        t->temp = ferry_asprintf("ferry_stage_%d", (int)(t - s->t));
        if (t->temp == NULL) return oom(err);
        t->wire[sc->n_fields] =
            (struct ferry_pg_wire_col){FERRY_PG_COL_ROWNUM, FERRY_PG_WIRE_INT8, 0, false};
        t->wire[sc->n_fields + 1] =
            (struct ferry_pg_wire_col){FERRY_PG_COL_OP, FERRY_PG_WIRE_INT2, 0, false};
        t->n_wire = sc->n_fields + 2;
    }
    if (t->mode == FERRY_WRITE_UPSERT || t->mode == FERRY_WRITE_MERGE) return FERRY_OK;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "INSERT INTO ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, into, err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (ferry_buf_printf(&b, i ? ", " : " (") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, ") SELECT ") != FERRY_OK) rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(&b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(&b, t, i, NULL, err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, " FROM pg_temp.") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, t->temp, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " ORDER BY \"" SEQ_COL "\"") != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK && (t->insert_sql = ferry_buf_take(&b)) == NULL) rc = oom(err);
    ferry_buf_release(&b);
    return rc;
}

/* The refusal of a column that cannot hold the data: before any row is written. */
static int refuse_column(struct sink *s, const char *table, const struct ferry_field *f,
                         const struct dest_col *d, struct ferry_error *err)
{
    char want[64];
    field_type_text(f, want, sizeof want);
    const char *origin = ferry__pg_origin(f);
    return ferry_error_set(err, FERRY_ESINK, "postgres",
                           WHAT ": table \"%s\".\"%s\" column \"%s\" is %s but the data is %s%s%s, "
                                "which it cannot hold exactly; ferry adds columns, it does not "
                                "change their types",
                           s->schema, table, f->name, d->type, want,
                           origin ? " from a source column of type " : "", origin ? origin : "");
}

/* Field i's format into destination column d (t->wire[i], t->cast[i]), or the refusal. */
static int choose_wire(struct sink *s, struct target *t, const char *table, int i,
                       const struct dest_col *d, struct ferry_error *err)
{
    const struct ferry_field *f = &t->schema->fields[i];
    const char *origin = ferry__pg_origin(f);
    int rc = FERRY_OK;
    ferry_free(t->cast[i]);
    t->cast[i] = NULL;
    t->wire[i] = wire_for_dest(f, t->orig ? t->orig[i] : i, d); /* (the batch's column) */
    if (t->wire[i].wire == FERRY_PG_WIRE_NONE) rc = origin_wire(t, i, d, err);
    if (rc == FERRY_OK && t->wire[i].wire == FERRY_PG_WIRE_NONE)
        return refuse_column(s, table, f, d, err);
    /* values of this very varchar(n)/char(n) type fit it: no per-value length check */
    if (t->wire[i].wire == FERRY_PG_WIRE_TEXT_CHARS && origin && !strcmp(origin, d->type)) {
        t->wire[i].wire = FERRY_PG_WIRE_TEXT;
        t->wire[i].chars = 0;
    }
    /* special values only come from a postgres source, whose infinities they are */
    t->wire[i].specials = origin != NULL;
    return rc;
}

/* A change made to an existing table, for the run's schema.changed events. */
static void note(const struct sink *s, const struct target *t, const char *table,
                 const char *column, enum ferry_schema_change_kind k, const char *old_type,
                 const char *new_type, int rc)
{
    if (rc != FERRY_OK || t->route == NULL) return;
    char name[300];
    snprintf(name, sizeof name, "\"%s\".\"%s\" (destination)", s->schema, table);
    ferry_schema_change_note(t->route, name, column, k, old_type, new_type, t->schema_changes,
                             FERRY_SC_APPLY);
}

/* ALTER TABLE t ALTER COLUMN "c" <clause>, clause built by the caller into `tail`. */
static int alter_column(struct sink *s, const char *table, const char *column, const char *tail,
                        const char *doing, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "ALTER TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, table, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " ALTER COLUMN ") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, column, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " %s", tail) != FERRY_OK) rc = oom(err);
    char what[300];
    snprintf(what, sizeof what, WHAT ": %s column \"%s\" of table \"%s\".\"%s\"", doing, column,
             s->schema, table);
    ferry_log(FERRY_LOG_INFO, "%s (schema_changes: evolve)", what);
    return exec_buf(s, &b, rc, what, err);
}

/* schema_changes: evolve, on a table that exists: a column whose type the data's widens
 * (smallint -> integer -> bigint, real -> double precision, numeric(p,s) -> wider numeric)
 * gets the data's type; a column the data no longer has (dropped at the source) lets go of
 * NOT NULL, so that it is NULL from now on. *changed when anything was altered. */
static int evolve_table(struct sink *s, const struct target *t, const char *table,
                        const struct dest_col *dc, int n_dc, bool *changed,
                        struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    int rc = FERRY_OK;
    for (int j = 0; j < n_dc && rc == FERRY_OK; j++) {
        int i = ferry_schema_find(sc, dc[j].name);
        if (i < 0) {
            if (dc[j].not_null && !dc[j].has_default && !dc[j].pk) {
                rc = alter_column(s, table, dc[j].name, "DROP NOT NULL",
                                  "letting go of NOT NULL on (dropped at the source)", err);
                note(s, t, table, dc[j].name, FERRY_SC_DROPPED, dc[j].type, NULL, rc);
                *changed = true;
            }
            continue;
        }
        const struct ferry_field *f = &sc->fields[i];
        struct ferry_field d = {0};
        if (dc[j].oid != dc[j].base_oid) continue; /* a domain: the user's choice */
        ferry__pg_map_type(dc[j].oid, dc[j].typmod, &d.type, &d.precision, &d.scale);
        bool same = d.type == f->type && (d.type != FERRY_TYPE_DECIMAL128 ||
                                          (d.precision == f->precision && d.scale == f->scale));
        if (same || !ferry__pg_type_is_native(dc[j].oid) || !ferry_type_widens(&d, f)) continue;
        char type[64], tail[100];
        ferry__pg_sql_type(f, type, sizeof type);
        snprintf(tail, sizeof tail, "TYPE %s", type);
        rc = alter_column(s, table, f->name, tail, "widening", err);
        note(s, t, table, f->name, FERRY_SC_WIDENED, dc[j].type, type, rc);
        *changed = true;
    }
    return rc;
}

/* schema_changes: freeze, on a table that exists: the fields it lacks are not written (the
 * destination's columns never change). t->schema becomes the fields written, t->orig maps
 * them to the batches' columns, and the staging tail of t->wire moves down. A key field the
 * table lacks is an error. */
static int freeze_narrow(struct sink *s, struct target *t, const char *table,
                         const struct dest_col *dc, int n_dc, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_schema *n = ferry_schema_new();
    t->orig = ferry_calloc((size_t)(sc->n_fields ? sc->n_fields : 1), sizeof *t->orig);
    if (n == NULL || t->orig == NULL) {
        ferry_schema_unref(n);
        return oom(err);
    }
    int k = 0, rc = FERRY_OK, soft = -1;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[i];
        int j = 0;
        while (j < n_dc && strcmp(dc[j].name, f->name) != 0)
            j++;
        if (j == n_dc && (f->key_pos > 0 || i == t->soft_col)) {
            rc = ferry_error_set(err, FERRY_ESINK, "postgres",
                                 WHAT ": table \"%s\".\"%s\" has no column \"%s\", which ferry "
                                      "needs (key or soft_delete) and schema_changes: freeze "
                                      "does not add",
                                 s->schema, table, f->name);
            break;
        }
        if (j == n_dc) {
            ferry_log(FERRY_LOG_INFO,
                      WHAT ": table \"%s\".\"%s\" has no column \"%s\": not written "
                           "(schema_changes: freeze)",
                      s->schema, table, f->name);
            continue;
        }
        rc = ferry_schema_add_field(n, f->name, f->type, f->nullable, err);
        if (rc != FERRY_OK) break;
        n->fields[k].precision = f->precision;
        n->fields[k].scale = f->scale;
        n->fields[k].key_pos = f->key_pos;
        rc = ferry_schema_set_origin(n, k, f->origin_type, err);
        if (rc != FERRY_OK) break;
        if (i == t->soft_col) soft = k;
        t->orig[k++] = i;
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(n, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(n);
        return rc;
    }
    n->soft_delete = soft >= 0 ? soft + 1 : 0;
    t->soft_col = soft;
    if (t->n_wire > sc->n_fields) { /* keyed: row number and operation follow the fields */
        t->wire[k] = t->wire[sc->n_fields];
        t->wire[k + 1] = t->wire[sc->n_fields + 1];
        t->n_wire = k + 2;
    } else {
        t->n_wire = k;
    }
    ferry_schema_unref(t->schema);
    t->schema = n;
    return FERRY_OK;
}

/* The ahead entry of rows [first, first + n) of the many-tables result (one table). */
static bool ahead_add(struct sink *s, PGresult *r, int first, int n)
{
    struct ahead *a = &s->ahead[s->n_ahead];
    memset(a, 0, sizeof *a);
    a->table = ferry_strdup(PQgetvalue(r, first, 0));
    a->exists = true;
    a->rules = PQgetvalue(r, first, 11)[0] == 't';
    a->row_hooks = PQgetvalue(r, first, 12)[0] == 't';
    a->cols = ferry_calloc((size_t)n, sizeof *a->cols);
    bool ok = a->table != NULL && a->cols != NULL;
    for (int i = 0; ok && i < n; i++) {
        if (PQgetisnull(r, first + i, 1)) continue; /* a table without columns */
        ok = dest_col_fill(&a->cols[a->n++], r, first + i, 1);
    }
    if (!ok) {
        ferry_free(a->table);
        dest_cols_free(a->cols, a->n);
        return false;
    }
    s->n_ahead++;
    return true;
}

/* prepare_ahead (connector.h): the columns of every table named, in one query; a table the
 * query does not return is remembered as missing. Nothing is kept on any error. */
static void sink_prepare_ahead(void *ctx, const char *const *tables, int n)
{
    struct sink *s = ctx;
    ahead_free(s);
    struct ferry_error e;
    if (n < 2 || connect_db(s, &e) != FERRY_OK) return;
    struct ferry_buf arr;
    ferry_buf_init(&arr, 0);
    ferry__pg_text_array(&arr, tables, n, ferry__pg_string_at);
    PGresult *r = NULL;
    const char *p[2] = {s->schema, arr.data};
    bool ok = arr.data != NULL &&
              query(s, dest_columns_many_sql, 2, p, &r, WHAT ": columns", &e) == FERRY_OK;
    ferry_buf_release(&arr);
    int rows = ok ? PQntuples(r) : 0;
    s->ahead = ok ? ferry_calloc((size_t)n + (size_t)rows + 1, sizeof *s->ahead) : NULL;
    ok = ok && s->ahead != NULL;
    for (int i = 0; ok && i < rows;) {
        int j = i + 1;
        while (j < rows && !strcmp(PQgetvalue(r, j, 0), PQgetvalue(r, i, 0)))
            j++;
        ok = ahead_add(s, r, i, j - i);
        i = j;
    }
    /* the tables not returned do not exist (yet) */
    for (int i = 0; ok && i < n; i++) {
        bool have = false;
        for (int k = 0; k < s->n_ahead && !have; k++)
            have = !strcmp(s->ahead[k].table, tables[i]);
        if (have) continue;
        struct ahead *a = &s->ahead[s->n_ahead];
        memset(a, 0, sizeof *a);
        a->table = ferry_strdup(tables[i]);
        ok = a->table != NULL;
        if (ok) s->n_ahead++;
    }
    if (r) PQclear(r);
    if (!ok) ahead_free(s);
}

/* Creates the table or checks it (adding missing columns), then chooses each column's
 * binary format from the destination's actual column types. */
static int ensure_table(struct sink *s, struct target *t, const char *table, bool need_key,
                        bool declare_key, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct dest_col *dc = NULL;
    int n_dc = 0;
    bool exists, rel[2];
    int rc = dest_columns(s, table, &exists, rel, &dc, &n_dc, err);
    if (rc != FERRY_OK) return rc;
    bool changed = false;
    if (!exists) {
        rc = create_table(s, table, sc, declare_key, err);
        changed = true;
    } else if (t->schema_changes == FERRY_SCHEMA_FREEZE && table == t->table && t->orig == NULL) {
        rc = freeze_narrow(s, t, table, dc, n_dc, err);
        sc = t->schema;
    } else {
        for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
            int j = 0;
            while (j < n_dc && strcmp(dc[j].name, sc->fields[i].name) != 0)
                j++;
            if (j == n_dc) {
                rc = add_column(s, table, &sc->fields[i], err);
                char type[64];
                ferry__pg_sql_type(&sc->fields[i], type, sizeof type);
                note(s, t, table, sc->fields[i].name, FERRY_SC_ADDED, NULL, type, rc);
                changed = true;
            }
        }
        if (rc == FERRY_OK && t->schema_changes == FERRY_SCHEMA_EVOLVE)
            rc = evolve_table(s, t, table, dc, n_dc, &changed, err);
    }
    if (rc == FERRY_OK && changed) {
        dest_cols_free(dc, n_dc);
        rc = dest_columns(s, table, &exists, rel, &dc, &n_dc, err);
    }
    if (table == t->table) {
        t->has_rules = rel[0];
        t->row_hooks = rel[1];
    }
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[i];
        int j = 0;
        while (j < n_dc && strcmp(dc[j].name, f->name) != 0)
            j++;
        if (j == n_dc) {
            rc = ferry_error_set(err, FERRY_ESINK, "postgres",
                                 WHAT ": table \"%s\".\"%s\" has no column \"%s\" after adding it",
                                 s->schema, table, f->name);
            break;
        }
        rc = choose_wire(s, t, table, i, &dc[j], err);
    }
    if (rc == FERRY_OK) rc = plan_casts(s, t, table, err);
    if (rc == FERRY_OK && need_key) {
        int n_pk = 0;
        bool same = true;
        for (int j = 0; j < n_dc; j++) {
            if (!dc[j].pk) continue;
            n_pk++;
            if (ferry_schema_find(sc, dc[j].name) < 0 ||
                sc->fields[ferry_schema_find(sc, dc[j].name)].key_pos == 0)
                same = false;
        }
        if (!same || n_pk != sc->n_key)
            rc = ferry_error_set(err, FERRY_ESINK, "postgres",
                                 WHAT ": table \"%s\".\"%s\" exists with a primary key that is "
                                      "not the data's key, so %s cannot match rows by key",
                                 s->schema, table, ferry_write_mode_name(t->mode));
    }
    dest_cols_free(dc, n_dc);
    return rc;
}

static int drop_table(struct sink *s, const char *table, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "DROP TABLE IF EXISTS ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, table, err);
    char what[200];
    snprintf(what, sizeof what, WHAT ": dropping table \"%s\".\"%s\"", s->schema, table);
    return exec_buf(s, &b, rc, what, err);
}

/* ---- prepare ------------------------------------------------------------------------------ */

/* Where a batch's COPY goes: t's temporary table (with row number and operation) or else
 * its replace staging table or the table itself (INTO_STAGE), the lean temporary table
 * (INTO_LEAN, fields only), or straight into the table (INTO_TABLE, fields only). */
enum copy_into { INTO_STAGE, INTO_LEAN, INTO_TABLE };

static int copy_sql_of(struct sink *s, const struct target *t, enum copy_into to, char **out,
                       struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    bool staged = t->temp && to == INTO_STAGE;
    const char *temp = to == INTO_LEAN ? t->lean : staged ? t->temp : NULL;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "COPY ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) {
        if (temp) {
            if (ferry_buf_printf(&b, "pg_temp.") != FERRY_OK) rc = oom(err);
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, temp, err);
        } else {
            rc = qualified(&b, s->schema, t->staging ? t->staging : t->table, err);
        }
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, " (") != FERRY_OK) rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(&b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK && staged &&
        ferry_buf_printf(&b, ", \"" SEQ_COL "\", \"" OP_COL "\"") != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, ") FROM STDIN (FORMAT binary)") != FERRY_OK)
        rc = oom(err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    ferry_free(*out);
    *out = ferry_buf_take(&b);
    return *out ? FERRY_OK : oom(err);
}

static int build_copy_sql(struct sink *s, struct target *t, struct ferry_error *err)
{
    return copy_sql_of(s, t, INTO_STAGE, &t->copy_sql, err);
}

/* The rows of the temporary table that count: the last one of each key (of the rows that
 * are not deletes, when live_only). */
static int last_per_key(struct ferry_buf *b, const struct target *t, const char *cols,
                        bool live_only, struct ferry_error *err)
{
    int rc = ferry_buf_printf(b, "(SELECT DISTINCT ON (") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = key_list(b, t->schema, NULL, err);
    if (rc == FERRY_OK && ferry_buf_printf(b, ") %s FROM pg_temp.", cols) != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, t->temp, err);
    if (rc == FERRY_OK && live_only &&
        ferry_buf_printf(b, " WHERE \"" OP_COL "\" <> %d", FERRY_OP_DELETE) != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK && ferry_buf_printf(b, " ORDER BY ") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = key_list(b, t->schema, NULL, err);
    if (rc == FERRY_OK && ferry_buf_printf(b, ", \"" SEQ_COL "\" DESC) AS l") != FERRY_OK)
        rc = oom(err);
    return rc;
}

/* INSERT ... SELECT ... ON CONFLICT (key) DO UPDATE from the temporary table. `ordered`
 * reads the last row of each key (DISTINCT ON, a sort of the batch) and, for a hard-delete
 * merge, only the keys not deleted last; otherwise every row of the temporary table `from`
 * as it is, which needs a batch of inserts only, each key once (a key twice fails the
 * statement with SQLSTATE 21000, and the batch then takes the ordered one: apply_upsert). */
static int build_upsert(struct target *t, bool ordered, const char *from, char **out,
                        struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "INSERT INTO %s (", t->qtable) == FERRY_OK ? FERRY_OK : oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(&b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
    }
    /* The source's values win over a GENERATED ALWAYS identity (a no-op without one): a
     * table made like the source (create: like_source) has them. */
    if (rc == FERRY_OK && ferry_buf_printf(&b, ") OVERRIDING SYSTEM VALUE SELECT ") != FERRY_OK)
        rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(&b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(&b, t, i, "l", err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, " FROM ") != FERRY_OK) rc = oom(err);
    /* Soft deletes: the last live image of each key is written even when a delete follows
     * it in the batch (the delete then marks that row: build_delete_sql). */
    bool soft = t->mode == FERRY_WRITE_MERGE && t->soft_col >= 0;
    if (!ordered) {
        if (rc == FERRY_OK && ferry_buf_printf(&b, "pg_temp.") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, from, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " AS l") != FERRY_OK) rc = oom(err);
    } else {
        if (rc == FERRY_OK) rc = last_per_key(&b, t, "*", soft, err);
        if (rc == FERRY_OK && t->mode == FERRY_WRITE_MERGE && !soft &&
            ferry_buf_printf(&b, " WHERE l.\"" OP_COL "\" <> %d", FERRY_OP_DELETE) != FERRY_OK)
            rc = oom(err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(&b, " ON CONFLICT (") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = key_list(&b, sc, NULL, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, ") DO ") != FERRY_OK) rc = oom(err);
    int n_set = 0;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (sc->fields[i].key_pos > 0) continue;
        if (ferry_buf_printf(&b, n_set++ ? ", " : "UPDATE SET ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " = EXCLUDED.") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK && n_set == 0 && ferry_buf_printf(&b, "NOTHING") != FERRY_OK) rc = oom(err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    *out = ferry_buf_take(&b);
    return *out ? FERRY_OK : oom(err);
}

/* `WHEN NOT MATCHED [AND l.op <> delete] THEN INSERT (...) OVERRIDING SYSTEM VALUE VALUES (l...)`,
 * the tail of build_merge. */
static int merge_insert(struct ferry_buf *b, const struct target *t, bool hard,
                        struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    int rc = ferry_buf_printf(b, " WHEN NOT MATCHED") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK && hard &&
        ferry_buf_printf(b, " AND l.\"" OP_COL "\" <> %d", FERRY_OP_DELETE) != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK && ferry_buf_printf(b, " THEN INSERT (") != FERRY_OK) rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(b, ") OVERRIDING SYSTEM VALUE VALUES (") != FERRY_OK)
        rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i && ferry_buf_printf(b, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(b, t, i, "l", err);
    }
    if (rc == FERRY_OK && ferry_buf_printf(b, ")") != FERRY_OK) rc = oom(err);
    return rc;
}

/* The ordered move of build_upsert as one MERGE (PostgreSQL 15) from the last row of each
 * key: the rows matched by key are updated, the others inserted; a hard-delete merge also
 * deletes, in the same statement, the keys whose last row is a delete (so it runs no
 * separate delete_sql). Unlike ON CONFLICT, a key another session inserts meanwhile fails it
 * with 23505: ferry is the only writer of its keys (docs/internals/postgres.md). */
static int build_merge(struct target *t, char **out, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    bool soft = t->mode == FERRY_WRITE_MERGE && t->soft_col >= 0;
    bool hard = t->mode == FERRY_WRITE_MERGE && !soft;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "MERGE INTO %s AS d USING ", t->qtable) == FERRY_OK ? FERRY_OK
                                                                                      : oom(err);
    if (rc == FERRY_OK) rc = last_per_key(&b, t, "*", soft, err);
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        if (ferry_buf_printf(&b, k ? " AND d." : " ON d.") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[sc->key[k]].name, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " = ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(&b, t, sc->key[k], "l", err);
    }
    if (rc == FERRY_OK && hard &&
        ferry_buf_printf(&b, " WHEN MATCHED AND l.\"" OP_COL "\" = %d THEN DELETE",
                         FERRY_OP_DELETE) != FERRY_OK)
        rc = oom(err);
    int n_set = 0;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (sc->fields[i].key_pos > 0) continue;
        if (ferry_buf_printf(&b, n_set++ ? ", " : " WHEN MATCHED THEN UPDATE SET ") != FERRY_OK)
            rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " = ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(&b, t, i, "l", err);
    }
    if (rc == FERRY_OK) rc = merge_insert(&b, t, hard, err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    *out = ferry_buf_take(&b);
    return *out ? FERRY_OK : oom(err);
}

/* Whether the target's batches move with MERGE: the server has it (15+), the table has no
 * rules (MERGE refuses those), and FERRY_PG_NO_MERGE is not set (tests run both paths on one
 * server with it; docs/internals/postgres.md). */
static void choose_merge(struct sink *s, struct target *t)
{
    const char *off = getenv("FERRY_PG_NO_MERGE");
    t->merge = PQserverVersion(s->conn) >= 150000 && !(off && off[0] && strcmp(off, "0")) &&
               !t->has_rules; /* as ensure_table read the table */
}

/* The lean table's name, COPY and upsert (struct target), or none where a column is cast from
 * staged text (the statement then projects anyway). */
static int build_lean_sql(struct sink *s, struct target *t, bool cast, struct ferry_error *err)
{
    ferry_free(t->lean_copy_sql);
    ferry_free(t->lean_upsert_sql);
    t->lean_copy_sql = t->lean_upsert_sql = NULL;
    if (cast) return FERRY_OK;
    if (t->lean == NULL && (t->lean = ferry_asprintf("%s_lean", t->temp)) == NULL) return oom(err);
    int rc = copy_sql_of(s, t, INTO_LEAN, &t->lean_copy_sql, err);
    return rc == FERRY_OK ? build_upsert(t, false, t->lean, &t->lean_upsert_sql, err) : rc;
}

/* The ordered statement is a MERGE where the server has it (measured faster, and a merge's
 * deletes need no second sort); the plain one stays INSERT ... ON CONFLICT: a MERGE from the
 * whole staged batch is planned as a hash join over a sequential scan of the destination,
 * per batch, several times slower into a large table (docs/internals/postgres.md). */
static int build_upsert_sql(struct sink *s, struct target *t, struct ferry_error *err)
{
    choose_merge(s, t);
    int rc = t->merge ? build_merge(t, &t->upsert_sql, err)
                      : build_upsert(t, true, NULL, &t->upsert_sql, err);
    if (rc == FERRY_OK) rc = build_upsert(t, false, t->temp, &t->upsert_fast_sql, err);
    /* The direct COPY writes what the plain statement would for keys not in the table yet,
     * as long as nothing else acts on the rows: no rule (COPY ignores them), no trigger
     * (ON CONFLICT DO UPDATE also fires UPDATE statement triggers), no row-level security
     * (COPY FROM refuses it where it applies), no column cast from staged text, no soft
     * delete mark. */
    bool cast = false;
    for (int i = 0; i < t->schema->n_fields; i++)
        cast |= t->cast[i] != NULL;
    ferry_free(t->direct_sql);
    t->direct_sql = NULL;
    t->direct_off = false;
    if (rc == FERRY_OK && !cast && !t->has_rules && !t->row_hooks && t->soft_col < 0 &&
        t->insert_sql == NULL)
        rc = copy_sql_of(s, t, INTO_TABLE, &t->direct_sql, err);
    return rc == FERRY_OK ? build_lean_sql(s, t, cast, err) : rc;
}

static int build_delete_sql(struct target *t, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b, cols;
    ferry_buf_init(&b, 0);
    ferry_buf_init(&cols, 0);
    int rc = key_list(&cols, sc, NULL, err);
    if (rc == FERRY_OK && ferry_buf_printf(&cols, ", \"" SEQ_COL "\", \"" OP_COL "\"") != FERRY_OK)
        rc = oom(err);
    if (t->soft_col < 0) {
        if (rc == FERRY_OK &&
            ferry_buf_printf(&b, "DELETE FROM %s AS d USING ", t->qtable) != FERRY_OK)
            rc = oom(err);
    } else {
        /* soft_delete: the key's last change is a delete -> set the mark, keep the row. */
        const char *mark = sc->fields[t->soft_col].name;
        if (rc == FERRY_OK && ferry_buf_printf(&cols, ", ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&cols, mark, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, "UPDATE %s AS d SET ", t->qtable) != FERRY_OK)
            rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, mark, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " = l.") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, mark, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " FROM ") != FERRY_OK) rc = oom(err);
    }
    if (rc == FERRY_OK) rc = last_per_key(&b, t, cols.data, false, err);
    if (rc == FERRY_OK &&
        ferry_buf_printf(&b, " WHERE l.\"" OP_COL "\" = %d", FERRY_OP_DELETE) != FERRY_OK)
        rc = oom(err);
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        const char *name = sc->fields[sc->key[k]].name;
        if (ferry_buf_printf(&b, " AND d.") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, name, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " = ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = staged_col(&b, t, sc->key[k], "l", err);
    }
    ferry_buf_release(&cols);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    t->delete_sql = ferry_buf_take(&b);
    return t->delete_sql ? FERRY_OK : oom(err);
}

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (target->index < 0)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", WHAT ": bad target index %d",
                               target->index);
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return oom(err);
        memset(nt + s->n_t, 0, sizeof *nt * (size_t)(target->index + 1 - s->n_t));
        s->t = nt;
        s->n_t = target->index + 1;
    }
    struct target *t = &s->t[target->index];
    if (t->used)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", WHAT ": target %d prepared twice",
                               target->index);
    const struct ferry_schema *sc = target->schema;
    bool keyed = target->mode == FERRY_WRITE_UPSERT || target->mode == FERRY_WRITE_MERGE;
    if (keyed && sc->n_key == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "postgres",
                               WHAT ": table \"%s\": write %s needs a key and resource %s has "
                                    "none",
                               target->table, ferry_write_mode_name(target->mode),
                               target->resource);
    if (keyed && (ferry_schema_find(sc, SEQ_COL) >= 0 || ferry_schema_find(sc, OP_COL) >= 0))
        return ferry_error_set(err, FERRY_ECONFIG, "postgres",
                               WHAT ": table \"%s\": the column names " SEQ_COL " and " OP_COL
                                    " are reserved for ferry's staging table",
                               target->table);
    /* A merge that marks deleted rows (cdc soft_delete) instead of deleting them. */
    t->soft_col = target->mode == FERRY_WRITE_MERGE && sc->soft_delete > 0 &&
                          sc->soft_delete <= sc->n_fields && sc->fields[sc->soft_delete - 1].key_pos == 0
                      ? sc->soft_delete - 1
                      : -1;
    t->used = true;
    t->mode = target->mode;
    t->schema_changes = target->schema_changes;
    t->route = target->route;
    t->schema = ferry_schema_ref(target->schema);
    t->resource = ferry_strdup(target->resource ? target->resource : "");
    t->table = ferry_strdup(target->table);
    t->wire = ferry_calloc((size_t)sc->n_fields + 2, sizeof *t->wire);
    t->cast = ferry_calloc((size_t)sc->n_fields + 1, sizeof *t->cast);
    if (!t->resource || !t->table || !t->wire || !t->cast) return oom(err);
    if (t->mode == FERRY_WRITE_REPLACE) {
        t->staging = ferry_asprintf("%s__ferry_staging", t->table);
        if (t->staging == NULL) return oom(err);
    }
    if (keyed) {
        t->temp = ferry_asprintf("ferry_stage_%d", target->index);
        if (t->temp == NULL) return oom(err);
    }
    struct ferry_buf q;
    ferry_buf_init(&q, 0);
    /* Every column name is checked before anything connects: a name PostgreSQL would
     * truncate (onto another column, perhaps) must not leave a created schema behind. */
    for (int i = 0; i < sc->n_fields; i++) {
        int frc = ferry__pg_quote_ident(&q, sc->fields[i].name, err);
        ferry_buf_reset(&q);
        if (frc != FERRY_OK) {
            ferry_buf_release(&q);
            return ferry_error_prefix(err, WHAT ": table \"%s\": column", target->table);
        }
    }
    int rc = qualified(&q, s->schema, t->table, err);
    /* The staging name must fit too, and not be truncated onto another table. */
    if (rc == FERRY_OK && t->staging) {
        struct ferry_buf q2;
        ferry_buf_init(&q2, 0);
        rc = ferry__pg_quote_ident(&q2, t->staging, err);
        ferry_buf_release(&q2);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, WHAT ": table \"%s\": its replace staging table", t->table);
    }
    if (rc != FERRY_OK) {
        ferry_buf_release(&q);
        return ferry_error_prefix(err, WHAT ": table");
    }
    t->qtable = ferry_buf_take(&q);
    if (t->qtable == NULL) return oom(err);
    snprintf(t->uri, sizeof t->uri, "postgres:%s.%s", s->schema, t->table);
    t->n_wire = sc->n_fields;
    if (keyed) {
        t->wire[sc->n_fields] =
            (struct ferry_pg_wire_col){FERRY_PG_COL_ROWNUM, FERRY_PG_WIRE_INT8, 0, false};
        t->wire[sc->n_fields + 1] =
            (struct ferry_pg_wire_col){FERRY_PG_COL_OP, FERRY_PG_WIRE_INT2, 0, false};
        t->n_wire += 2;
    }
    rc = connect_db(s, err);
    if (rc == FERRY_OK) rc = ensure_schema(s, s->schema, err);
    if (rc != FERRY_OK) return rc;
    if (t->mode == FERRY_WRITE_REPLACE) return build_copy_sql(s, t, err); /* staging: begin() */
    rc = ensure_table(s, t, t->table, keyed, t->mode != FERRY_WRITE_APPEND, err);
    if (rc == FERRY_OK) rc = build_copy_sql(s, t, err);
    if (rc == FERRY_OK && keyed) rc = build_upsert_sql(s, t, err);
    if (rc == FERRY_OK && t->mode == FERRY_WRITE_MERGE) rc = build_delete_sql(t, err);
    return rc;
}

/* ---- begin -------------------------------------------------------------------------------- */

/* Whether "_ferry"."checkpoints" exists, and has the run_* count columns (added in
 * session 26; a table made before has not). */
static int checkpoint_table_shape(struct sink *s, bool *exists, bool *counts, const char *what,
                                  struct ferry_error *err)
{
    PGresult *r = NULL;
    int rc = query(s,
                   "SELECT c.oid IS NOT NULL, EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a "
                   "WHERE a.attrelid = c.oid AND a.attname = 'run_batches' AND NOT "
                   "a.attisdropped) FROM (SELECT "
                   "pg_catalog.to_regclass('\"_ferry\".\"checkpoints\"') AS oid) c",
                   0, NULL, &r, what, err);
    if (rc != FERRY_OK) return rc;
    *exists = PQgetvalue(r, 0, 0)[0] == 't';
    *counts = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    return FERRY_OK;
}

/* The run_* columns are nullable: NULL is "not counted" (rows an older ferry wrote). A role
 * that may write the table but not alter it keeps it as it is, without counts. */
static int ensure_checkpoint_table(struct sink *s, struct ferry_error *err)
{
    int rc = ensure_schema(s, "_ferry", err);
    bool exists = false, counts = false;
    if (rc == FERRY_OK)
        rc = checkpoint_table_shape(s, &exists, &counts, WHAT ": _ferry.checkpoints", err);
    if (rc != FERRY_OK) return rc;
    s->ckpt_counts = true;
    if (!exists)
        return exec(s,
                    "CREATE TABLE IF NOT EXISTS \"_ferry\".\"checkpoints\" ("
                    "pipeline text NOT NULL, resource text NOT NULL, shard integer NOT NULL, "
                    "run_id bigint NOT NULL, position text, "
                    "updated_at timestamptz NOT NULL DEFAULT now(), "
                    "run_rows bigint, run_bytes bigint, run_batches bigint, "
                    "PRIMARY KEY (pipeline, resource, shard))",
                    WHAT ": creating table \"_ferry\".\"checkpoints\"", err);
    if (counts) return FERRY_OK;
    struct ferry_error e;
    if (exec(s,
             "ALTER TABLE \"_ferry\".\"checkpoints\" ADD COLUMN IF NOT EXISTS run_rows bigint, "
             "ADD COLUMN IF NOT EXISTS run_bytes bigint, "
             "ADD COLUMN IF NOT EXISTS run_batches bigint",
             WHAT ": adding the run counts to \"_ferry\".\"checkpoints\"", &e) != FERRY_OK) {
        s->ckpt_counts = false;
        ferry_log(FERRY_LOG_WARN,
                  "%s; checkpoints are written without them: after a crash, the run's "
                  "counters may miss the batches committed just before it",
                  e.message);
    }
    return FERRY_OK;
}

/* A session's temporary table `name`: the destination's column types (so the COPY formats
 * are the destination's), plus, when `staged`, the row's batch position and operation. */
static int create_temp_table(struct sink *s, struct target *t, const char *name, bool staged,
                             struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc =
        ferry_buf_printf(&b, "DROP TABLE IF EXISTS pg_temp.") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, name, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, "; CREATE TEMPORARY TABLE ") != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, name, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " AS SELECT ") != FERRY_OK) rc = oom(err);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        /* a column carried as text (plan_casts) stays text until the move casts it */
        if (ferry_buf_printf(&b, "%s%s", i ? ", " : "", t->cast[i] ? "NULL::text AS " : "") !=
            FERRY_OK)
            rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK && staged &&
        ferry_buf_printf(&b, "%s0::bigint AS \"" SEQ_COL "\", 0::smallint AS \"" OP_COL "\"",
                         sc->n_fields ? ", " : "") != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " FROM ") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, t->staging ? t->staging : t->table, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " WITH NO DATA") != FERRY_OK) rc = oom(err);
    char what[200];
    snprintf(what, sizeof what, WHAT ": staging table for \"%s\".\"%s\"", s->schema, t->table);
    return exec_buf(s, &b, rc, what, err);
}

/* The target's temporary tables: the staging one and, where it has its SQL, the lean one. */
static int create_temp(struct sink *s, struct target *t, struct ferry_error *err)
{
    int rc = create_temp_table(s, t, t->temp, true, err);
    if (rc == FERRY_OK && t->lean_upsert_sql) rc = create_temp_table(s, t, t->lean, false, err);
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (s->session)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", WHAT ": session already open");
    ferry_free(s->pipeline);
    s->pipeline = ferry_strdup(run && run->pipeline ? run->pipeline : "");
    if (s->pipeline == NULL) return oom(err);
    s->run_id = run ? run->run_id : 0;
    int rc = connect_db(s, err);
    if (rc == FERRY_OK) rc = ensure_checkpoint_table(s, err);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++) {
        struct target *t = &s->t[i];
        if (!t->used) continue;
        if (t->mode == FERRY_WRITE_REPLACE) {
            /* A later attempt of the same run keeps the rows its checkpoints account for. */
            if (!(run && run->resuming)) rc = drop_table(s, t->staging, err);
            if (rc == FERRY_OK) rc = ensure_table(s, t, t->staging, false, false, err);
            if (rc == FERRY_OK) rc = build_copy_sql(s, t, err); /* plan_casts may stage it */
        }
        if (rc == FERRY_OK && t->temp) rc = create_temp(s, t, err);
    }
    if (rc == FERRY_OK && s->at_commit) {
        rc = exec(s, "BEGIN", WHAT ": begin", err);
        if (rc == FERRY_OK) s->in_tx = true;
    }
    if (rc != FERRY_OK) return rc;
    s->session = true;
    s->streaming = -1;
    s->lag_rc = FERRY_OK;
    drop_pending(s);
    return FERRY_OK;
}

/* ---- apply -------------------------------------------------------------------------------- */

static int send_chunk(struct sink *s, uint32_t *crc, struct ferry_error *err)
{
    if (s->out.len == 0) return FERRY_OK;
    *crc = ferry_crc32c_update(*crc, s->out.data, s->out.len);
    if (PQputCopyData(s->conn, s->out.data, (int)s->out.len) != 1)
        return ferry__pg_error(err, FERRY_ESINK, s->conn, NULL, WHAT ": sending COPY data");
    ferry_buf_reset(&s->out);
    return FERRY_OK;
}

/* Ends the COPY (aborting it with `why`) and collects its result. */
/* Ends the COPY in progress (why: abandon it with that message). With dup non-NULL, a
 * unique violation (23505) is no error: *dup says it happened. */
static int end_copy_dup(struct sink *s, const char *why, const char *table, bool *dup,
                        struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (PQputCopyEnd(s->conn, why) != 1)
        rc = ferry__pg_error(err, FERRY_ESINK, s->conn, NULL, WHAT ": ending COPY into %s", table);
    PGresult *r = NULL;
    while ((r = PQgetResult(s->conn)) != NULL) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (rc == FERRY_OK && why == NULL && PQresultStatus(r) != PGRES_COMMAND_OK) {
            if (dup != NULL && state != NULL && !strcmp(state, "23505"))
                *dup = true;
            else
                rc = ferry__pg_error(err, FERRY_ESINK, s->conn, r, WHAT ": COPY into %s", table);
        }
        PQclear(r);
    }
    return rc;
}

static int end_copy(struct sink *s, const char *why, const char *table, struct ferry_error *err)
{
    return end_copy_dup(s, why, table, NULL, err);
}

/* Ends the COPY kept open across batches: the trailer, then the server's verdict on every
 * row streamed since it began (an error in any of those batches surfaces here). */
static int close_stream(struct sink *s, struct ferry_error *err)
{
    if (s->streaming < 0) return FERRY_OK;
    struct target *t = &s->t[s->streaming];
    s->streaming = -1;
    const char *into = t->staging ? t->staging : t->table;
    uint32_t crc = 0;
    ferry_buf_reset(&s->out);
    int rc = ferry__pg_copy_trailer(&s->out) == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = send_chunk(s, &crc, err);
    if (rc != FERRY_OK) {
        end_copy(s, "ferry: the COPY could not be finished", into, NULL);
        return rc;
    }
    return end_copy(s, NULL, into, err);
}

/* One batch's COPY, where `to` says (enum copy_into). With `keep_open` (at_commit
 * append/replace) the COPY is not ended after the batch: the next batch of the same target
 * continues it, so the server neither sets a COPY up per batch (a few ms each) nor waits
 * idle between batches; close_stream ends it. dup: as end_copy_dup. */
static int copy_rows(struct sink *s, int ti, const struct ferry_batch *b, enum copy_into to,
                     bool keep_open, uint32_t *crc, bool *dup, struct ferry_error *err)
{
    struct target *t = &s->t[ti];
    bool staged = t->temp && to == INTO_STAGE;
    bool temp = staged || to == INTO_LEAN;
    const char *into = to == INTO_LEAN ? t->lean
                       : staged        ? t->temp
                       : t->staging    ? t->staging
                                       : t->table;
    int n_wire = staged || !t->temp ? t->n_wire : t->n_wire - 2; /* the fields lead the wire */
    const char *sql = to == INTO_TABLE  ? t->direct_sql
                      : to == INTO_LEAN ? t->lean_copy_sql
                                        : t->copy_sql;
    bool continuing = keep_open && s->streaming == ti;
    int rc = FERRY_OK;
    if (!continuing) {
        rc = close_stream(s, err);
        if (rc != FERRY_OK) return rc;
        PGresult *r = PQexec(s->conn, sql);
        if (PQresultStatus(r) != PGRES_COPY_IN) {
            rc = ferry__pg_error(err, FERRY_ESINK, s->conn, r, WHAT ": COPY into \"%s\".\"%s\"",
                                 temp ? "pg_temp" : s->schema, into);
            PQclear(r);
            return rc;
        }
        PQclear(r);
    }
    ferry_buf_reset(&s->out);
    if (!continuing && ferry__pg_copy_header(&s->out) != FERRY_OK) rc = oom(err);
    int64_t row = 0;
    while (rc == FERRY_OK && row < b->length) {
        rc = ferry__pg_copy_rows(&s->out, b, t->wire, n_wire, &row, CHUNK, err);
        if (rc == FERRY_OK) rc = send_chunk(s, crc, err);
    }
    if (rc == FERRY_OK && !keep_open && ferry__pg_copy_trailer(&s->out) != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = send_chunk(s, crc, err);
    if (rc != FERRY_OK) {
        s->streaming = -1;
        ferry_error_prefix(err, WHAT ": table \"%s\".\"%s\"", s->schema, t->table);
        end_copy(s, "ferry: the batch could not be encoded or sent", into, NULL);
        return rc;
    }
    if (keep_open) {
        s->streaming = ti;
        return FERRY_OK;
    }
    return end_copy_dup(s, NULL, into, dup, err);
}

static int copy_batch(struct sink *s, int ti, const struct ferry_batch *b, bool keep_open,
                      uint32_t *crc, struct ferry_error *err)
{
    return copy_rows(s, ti, b, INTO_STAGE, keep_open, crc, NULL, err);
}

static int exec_step(struct sink *s, struct target *t, const char *sql, const char *step,
                     struct ferry_error *err)
{
    char what[200];
    snprintf(what, sizeof what, WHAT ": %s \"%s\".\"%s\"", step, s->schema, t->table);
    return exec(s, sql, what, err);
}

/* A failed move or upsert of a target with text-carried columns: the destination's cast
 * error does not say which column, so the error names those columns. */
static int name_cast_columns(const struct target *t, int rc, struct ferry_error *err)
{
    char cols[256] = "";
    size_t n = 0;
    for (int i = 0; rc != FERRY_OK && i < t->schema->n_fields && n < sizeof cols - 1; i++)
        if (t->cast[i])
            n += (size_t)snprintf(cols + n, sizeof cols - n, "%s\"%s\"", n ? ", " : "",
                                  t->schema->fields[i].name);
    if (n > 0) ferry_error_prefix(err, "column(s) %s, cast from the source type's text", cols);
    return rc;
}

/* The operations a batch holds, one bit per enum ferry_op (a pass over its ops bytes). */
static unsigned batch_ops(const struct ferry_batch *b)
{
    unsigned ops = 0;
    for (int64_t r = 0; r < b->length; r++)
        ops |= 1u << (ferry_batch_op(b, r) & 7);
    return ops;
}

/* A source TRUNCATE in the staged batch (cdc, upsert/merge): the table is emptied and the
 * staged rows up to the last truncate are dropped; the rows after it are merged as usual. */
static int apply_truncate(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct ferry_buf q, tmp;
    ferry_buf_init(&q, 0);
    ferry_buf_init(&tmp, 0);
    int rc = ferry_buf_printf(&tmp, "pg_temp.") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&tmp, t->temp, err);
    if (rc == FERRY_OK &&
        ferry_buf_printf(&q,
                         "TRUNCATE %s; DELETE FROM %s WHERE \"" SEQ_COL "\" <= (SELECT max(\""
                         SEQ_COL "\") FROM %s WHERE \"" OP_COL "\" = %d)",
                         t->qtable, tmp.data, tmp.data, FERRY_OP_TRUNCATE) != FERRY_OK)
        rc = oom(err);
    if (rc == FERRY_OK) rc = exec_step(s, t, q.data, "applying a source truncate to", err);
    ferry_buf_release(&q);
    ferry_buf_release(&tmp);
    return rc;
}

/* Whether b holds no key twice, as far as one pass can tell: a single integer key whose
 * values strictly increase from row to row (every batch of a full read in key order). */
static bool keys_increase(const struct target *t, const struct ferry_batch *b)
{
    const struct ferry_schema *sc = t->schema;
    if (sc->n_key != 1 || (t->cast && t->cast[sc->key[0]] != NULL)) return false;
    int col = t->orig ? t->orig[sc->key[0]] : sc->key[0];
    enum ferry_type ty = b->schema->fields[col].type;
    if (ty != FERRY_TYPE_INT8 && ty != FERRY_TYPE_INT16 && ty != FERRY_TYPE_INT32 &&
        ty != FERRY_TYPE_INT64)
        return false;
    int64_t prev = 0;
    for (int64_t i = 0; i < b->length; i++) {
        if (ferry_col_is_null(b, col, i)) return false;
        int64_t v = ferry_col_int(b, col, i);
        if (i > 0 && v <= prev) return false;
        prev = v;
    }
    return true;
}

/* The upsert of the staged batch. A batch of inserts only (`plain`) runs every staged row as
 * it is: no sort, the statement a hand-written staging load runs. Unless its keys are known
 * apart (keys_increase), it runs under a savepoint: a key staged twice makes the statement
 * fail with cardinality_violation (21000) before anything is visible; the savepoint is
 * rolled back and the batch takes the ordered statement (the last row of each key), as
 * every other batch does. */
static int apply_upsert(struct sink *s, struct target *t, const struct ferry_batch *b, bool plain,
                        struct ferry_error *err)
{
    if (!plain) return exec_step(s, t, t->upsert_sql, "upsert into", err);
    if (keys_increase(t, b)) return exec_step(s, t, t->upsert_fast_sql, "upsert into", err);
    int rc = exec_step(s, t, "SAVEPOINT ferry_upsert", "upsert into", err);
    if (rc != FERRY_OK) return rc;
    PGresult *r = PQexec(s->conn, t->upsert_fast_sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    const char *state = ok ? NULL : PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (!ok && !(state && !strcmp(state, "21000")))
        rc = ferry__pg_error(err, FERRY_ESINK, s->conn, r, WHAT ": upsert into \"%s\".\"%s\"",
                             s->schema, t->table);
    PQclear(r);
    if (rc != FERRY_OK) return rc;
    if (ok) return exec_step(s, t, "RELEASE SAVEPOINT ferry_upsert", "upsert into", err);
    rc = exec_step(s, t, "ROLLBACK TO SAVEPOINT ferry_upsert; RELEASE SAVEPOINT ferry_upsert",
                   "upsert into", err);
    return rc == FERRY_OK ? exec_step(s, t, t->upsert_sql, "upsert into", err) : rc;
}

/* A batch of inserts only COPYed straight into the table under a savepoint: what the
 * plain upsert writes while none of its keys is there, without staging it and moving it
 * again. A key already there (or twice in the batch) ends the COPY with a unique violation:
 * the savepoint is rolled back (nothing of the batch stays), *dup says so, the caller stages
 * the batch, and the target stages its later batches too (direct_off: one wasted COPY per
 * run where keys exist). The encoded CRC is then of the staged COPY alone. */
static int copy_direct(struct sink *s, int ti, const struct ferry_batch *b, uint32_t *crc,
                       bool *dup, struct ferry_error *err)
{
    struct target *t = &s->t[ti];
    uint32_t crc0 = *crc;
    *dup = false;
    int rc = exec_step(s, t, "SAVEPOINT ferry_direct", "copying into", err);
    if (rc == FERRY_OK) rc = copy_rows(s, ti, b, INTO_TABLE, false, crc, dup, err);
    if (rc != FERRY_OK) return rc;
    if (!*dup) return exec_step(s, t, "RELEASE SAVEPOINT ferry_direct", "copying into", err);
    t->direct_off = true;
    *crc = crc0;
    return exec_step(s, t, "ROLLBACK TO SAVEPOINT ferry_direct; RELEASE SAVEPOINT ferry_direct",
                     "copying into", err);
}

/* Empties the session's temporary table `name` before a batch is staged in it. */
static int empty_temp(struct sink *s, struct target *t, const char *name, struct ferry_error *err)
{
    struct ferry_buf q;
    ferry_buf_init(&q, 0);
    int rc = ferry_buf_printf(&q, "TRUNCATE pg_temp.") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&q, name, err);
    if (rc == FERRY_OK) rc = exec_step(s, t, q.data, "clearing the staging table of", err);
    ferry_buf_release(&q);
    return rc;
}

/* A batch of inserts whose keys increase, through the lean table: emptied, filled by COPY
 * with the fields alone, and upserted as it is (the plain statement: each key is there once,
 * so no savepoint and no ordered fallback is needed). */
static int write_lean(struct sink *s, int ti, const struct ferry_batch *b, uint32_t *crc,
                      struct ferry_error *err)
{
    struct target *t = &s->t[ti];
    int rc = empty_temp(s, t, t->lean, err);
    if (rc == FERRY_OK) rc = copy_rows(s, ti, b, INTO_LEAN, false, crc, NULL, err);
    return rc == FERRY_OK ? exec_step(s, t, t->lean_upsert_sql, "upsert into", err) : rc;
}

static int write_rows(struct sink *s, int ti, const struct ferry_batch *b, bool keep_open,
                      uint32_t *crc, struct ferry_error *err)
{
    struct target *t = &s->t[ti];
    unsigned ops = t->temp ? batch_ops(b) : 0;
    if (t->direct_sql && !t->direct_off && !keep_open && ops == 1u << FERRY_OP_INSERT) {
        bool dup = false;
        int drc = copy_direct(s, ti, b, crc, &dup, err);
        if (drc != FERRY_OK || !dup) return drc;
    }
    if (t->lean_upsert_sql && !keep_open && ops == 1u << FERRY_OP_INSERT && keys_increase(t, b))
        return write_lean(s, ti, b, crc, err);
    int rc = t->temp ? empty_temp(s, t, t->temp, err) : FERRY_OK;
    if (rc == FERRY_OK) rc = copy_batch(s, ti, b, keep_open, crc, err);
    if (rc == FERRY_OK && t->insert_sql)
        rc = name_cast_columns(t, exec_step(s, t, t->insert_sql, "moving a staged batch into", err),
                               err);
    if (rc == FERRY_OK && (ops & (1u << FERRY_OP_TRUNCATE))) rc = apply_truncate(s, t, err);
    if (rc != FERRY_OK || !t->upsert_sql) return rc;
    /* Hard deletes go first (a key's last change is either written or deleted), or, with
     * MERGE, in the upsert's own statement; soft ones mark what the upsert just wrote (a
     * row inserted then deleted in one batch is kept). A batch without deletes has none to
     * apply. */
    bool soft = t->soft_col >= 0;
    bool deletes = t->delete_sql && (ops & (1u << FERRY_OP_DELETE | 1u << FERRY_OP_TRUNCATE));
    if (rc == FERRY_OK && deletes && !soft && !t->merge)
        rc = exec_step(s, t, t->delete_sql, "merge deletes in", err);
    /* Inserts only (every batch of a full or incremental read) try the plain statement; a
     * change stream's batch, where one key often changes twice, goes straight to the
     * ordered one. */
    bool plain = ops == 1u << FERRY_OP_INSERT;
    if (rc == FERRY_OK) rc = name_cast_columns(t, apply_upsert(s, t, b, plain, err), err);
    if (rc == FERRY_OK && deletes && soft)
        rc = exec_step(s, t, t->delete_sql, "marking soft deletes in", err);
    return rc;
}

/* The run counts of a checkpoint row: the run's sums go on while the row's run_id is the
 * run's, and start again at a row of another run. */
#define CKPT_COUNTS_SET                                                                      \
    ", run_rows = CASE WHEN c.run_id = EXCLUDED.run_id THEN c.run_rows + EXCLUDED.run_rows "  \
    "ELSE EXCLUDED.run_rows END, "                                                           \
    "run_bytes = CASE WHEN c.run_id = EXCLUDED.run_id THEN c.run_bytes + EXCLUDED.run_bytes " \
    "ELSE EXCLUDED.run_bytes END, "                                                          \
    "run_batches = CASE WHEN c.run_id = EXCLUDED.run_id THEN c.run_batches + "               \
    "EXCLUDED.run_batches ELSE EXCLUDED.run_batches END"

static int put_checkpoint(struct sink *s, const char *resource, int shard_no,
                          const char *position, struct ckpt_add add, struct ferry_error *err)
{
    char shard[16], run_id[24], rows[24], bytes[24], batches[24];
    snprintf(shard, sizeof shard, "%d", shard_no);
    snprintf(run_id, sizeof run_id, "%" PRId64, s->run_id);
    snprintf(rows, sizeof rows, "%" PRId64, add.rows);
    snprintf(bytes, sizeof bytes, "%" PRId64, add.bytes);
    snprintf(batches, sizeof batches, "%" PRId64, add.batches);
    const char *p[8] = {s->pipeline, resource ? resource : "", shard, run_id, position,
                        rows, bytes, batches};
    PGresult *r = NULL;
    char what[200];
    snprintf(what, sizeof what, WHAT ": saving the checkpoint of resource %s",
             resource ? resource : "");
    int rc = s->ckpt_counts
                 ? query(s,
                         "INSERT INTO \"_ferry\".\"checkpoints\" AS c (pipeline, resource, "
                         "shard, run_id, position, updated_at, run_rows, run_bytes, run_batches) "
                         "VALUES ($1, $2, $3::integer, $4::bigint, $5, now(), $6::bigint, "
                         "$7::bigint, $8::bigint) ON CONFLICT (pipeline, resource, shard) DO "
                         "UPDATE SET run_id = EXCLUDED.run_id, position = EXCLUDED.position, "
                         "updated_at = EXCLUDED.updated_at" CKPT_COUNTS_SET,
                         8, p, &r, what, err)
                 : query(s,
                         "INSERT INTO \"_ferry\".\"checkpoints\" (pipeline, resource, shard, "
                         "run_id, position, updated_at) VALUES ($1, $2, $3::integer, "
                         "$4::bigint, $5, now()) ON CONFLICT (pipeline, resource, shard) DO "
                         "UPDATE SET run_id = EXCLUDED.run_id, position = EXCLUDED.position, "
                         "updated_at = EXCLUDED.updated_at",
                         5, p, &r, what, err);
    if (rc == FERRY_OK) PQclear(r);
    return rc;
}

/* The checkpoint of a batch applied inside the session's transaction (a COPY kept open,
 * at_commit, a commit group): the latest per (resource, shard), written by flush_pending in
 * that transaction before it commits (after the COPY ended). */
static int hold_checkpoint(struct sink *s, const struct ferry_batch *b, struct ferry_error *err)
{
    const char *res = b->resource ? b->resource : "";
    for (int i = 0; i < s->n_pending; i++) {
        struct pending_checkpoint *c = &s->pending[i];
        if (c->shard == b->shard && !strcmp(c->resource, res)) {
            char *pos = ferry_strdup(b->position);
            if (pos == NULL) return oom(err);
            ferry_free(c->position);
            c->position = pos;
            c->rows += b->length;
            c->bytes += (int64_t)b->bytes;
            c->batches++;
            return FERRY_OK;
        }
    }
    if (s->n_pending == s->cap_pending) {
        int cap = s->cap_pending ? 2 * s->cap_pending : 8;
        void *m = ferry_realloc(s->pending, (size_t)cap * sizeof *s->pending);
        if (m == NULL) return oom(err);
        s->pending = m;
        s->cap_pending = cap;
    }
    struct pending_checkpoint *c = &s->pending[s->n_pending];
    c->resource = ferry_strdup(res);
    c->position = ferry_strdup(b->position);
    c->shard = b->shard;
    c->rows = b->length;
    c->bytes = (int64_t)b->bytes;
    c->batches = 1;
    if (c->resource == NULL || c->position == NULL) {
        ferry_free(c->resource);
        ferry_free(c->position);
        return oom(err);
    }
    s->n_pending++;
    return FERRY_OK;
}

static const char *pending_resource(const void *v, int i)
{
    return ((const struct pending_checkpoint *)v)[i].resource;
}

static const char *pending_position(const void *v, int i)
{
    return ((const struct pending_checkpoint *)v)[i].position;
}

/* An integer array literal of the held checkpoints' shards or counts (field: 0 shard,
 * 1 rows, 2 bytes, 3 batches). */
static void pending_ints(struct ferry_buf *b, const struct sink *s, int field)
{
    ferry_buf_append(b, "{", 1);
    for (int i = 0; i < s->n_pending; i++) {
        const struct pending_checkpoint *c = &s->pending[i];
        int64_t v = field == 0 ? c->shard : field == 1 ? c->rows : field == 2 ? c->bytes : c->batches;
        ferry_buf_printf(b, "%s%" PRId64, i ? "," : "", v);
    }
    ferry_buf_append(b, "}", 1);
}

/* Several held checkpoints in one statement (one per (resource, shard): the rows differ). */
static int put_checkpoints(struct sink *s, struct ferry_error *err)
{
    struct ferry_buf res, pos, ints[4];
    ferry_buf_init(&res, 0);
    ferry_buf_init(&pos, 0);
    ferry__pg_text_array(&res, s->pending, s->n_pending, pending_resource);
    ferry__pg_text_array(&pos, s->pending, s->n_pending, pending_position);
    bool ok = res.data && pos.data;
    for (int f = 0; f < 4; f++) {
        ferry_buf_init(&ints[f], 0);
        pending_ints(&ints[f], s, f);
        ok = ok && ints[f].data;
    }
    char run_id[24];
    snprintf(run_id, sizeof run_id, "%" PRId64, s->run_id);
    const char *p[8] = {s->pipeline, res.data, ints[0].data, run_id, pos.data,
                        ints[1].data, ints[2].data, ints[3].data};
    int rc = ok ? FERRY_OK : oom(err);
    PGresult *r = NULL;
    if (rc == FERRY_OK && s->ckpt_counts)
        rc = query(s,
                   "INSERT INTO \"_ferry\".\"checkpoints\" AS c (pipeline, resource, shard, "
                   "run_id, position, updated_at, run_rows, run_bytes, run_batches) SELECT $1, "
                   "v.r, v.s, $4::bigint, v.p, now(), v.n, v.b, v.k "
                   "FROM ROWS FROM (pg_catalog.unnest($2::text[]), "
                   "pg_catalog.unnest($3::integer[]), pg_catalog.unnest($5::text[]), "
                   "pg_catalog.unnest($6::bigint[]), pg_catalog.unnest($7::bigint[]), "
                   "pg_catalog.unnest($8::bigint[])) AS v(r, s, p, n, b, k) "
                   "ON CONFLICT (pipeline, resource, shard) DO UPDATE SET "
                   "run_id = EXCLUDED.run_id, position = EXCLUDED.position, "
                   "updated_at = EXCLUDED.updated_at" CKPT_COUNTS_SET,
                   8, p, &r, WHAT ": saving the checkpoints of the commit", err);
    else if (rc == FERRY_OK)
        rc = query(s,
                   "INSERT INTO \"_ferry\".\"checkpoints\" (pipeline, resource, shard, run_id, "
                   "position, updated_at) SELECT $1, c.r, c.s, $4::bigint, c.p, now() "
                   "FROM ROWS FROM (pg_catalog.unnest($2::text[]), "
                   "pg_catalog.unnest($3::integer[]), pg_catalog.unnest($5::text[])) AS c(r, s, p) "
                   "ON CONFLICT (pipeline, resource, shard) DO UPDATE SET "
                   "run_id = EXCLUDED.run_id, position = EXCLUDED.position, "
                   "updated_at = EXCLUDED.updated_at",
                   5, p, &r, WHAT ": saving the checkpoints of the commit", err);
    if (rc == FERRY_OK) PQclear(r);
    ferry_buf_release(&res);
    ferry_buf_release(&pos);
    for (int f = 0; f < 4; f++)
        ferry_buf_release(&ints[f]);
    return rc;
}

static int flush_pending(struct sink *s, struct ferry_error *err)
{
    int rc = close_stream(s, err);
    const struct pending_checkpoint *c = s->pending;
    if (rc == FERRY_OK && s->n_pending == 1)
        rc = put_checkpoint(s, c->resource, c->shard, c->position,
                            (struct ckpt_add){c->rows, c->bytes, c->batches}, err);
    else if (rc == FERRY_OK && s->n_pending > 1)
        rc = put_checkpoints(s, err);
    drop_pending(s);
    return rc;
}

/* ---- overlapped commits (per_apply append) -------------------------------------------------
 *
 * A per_apply batch waits for its COMMIT, which waits for the WAL flush; meanwhile the
 * destination backend is idle. Here batch N's COMMIT is sent without waiting and apply
 * returns; batch N+1 is copied on the other connection meanwhile. Order and durability:
 * N+1's checkpoint row is the same row as N's (same shard), so writing it waits for N's row
 * lock, which the server releases only after N's commit record is flushed; and N+1's COMMIT
 * is sent only after N's was answered OK (settle), else N+1 is rolled back. So the stored
 * checkpoints become durable in apply order, a checkpoint is never durable before the rows
 * it accounts for, and a crash loses at most the batches the runner never recorded as
 * durable (caps.durable_after_next: the flow records N only when the next apply, settle or
 * commit returned). Only the connection begin() set up holds the session's temporary
 * tables: every other path goes back to it first (go_home). */

/* The two connections trade places; the io_timeout guard of the call in progress follows the
 * current one (the work after the swap, e.g. abort's rollback, waits on it). */
static void swap_conns(struct sink *s)
{
    PGconn *c = s->conn;
    s->conn = s->spare;
    s->spare = c;
    s->swapped = !s->swapped;
    ferry__pg_guard_move(s->guard, s->conn);
}

/* Collects the answer of the COMMIT in flight on the spare connection. */
static int settle(struct sink *s, struct ferry_error *err)
{
    if (!s->committing) return s->lag_rc;
    s->committing = false;
    struct ferry_error scratch; /* abort passes none; an error code must not read as OK */
    if (err == NULL) err = &scratch;
    struct ferry_pg_guard g;
    ferry__pg_guard_begin(&g, s->spare, s->opts.io_timeout_ms);
    int rc = FERRY_OK;
    PGresult *r = NULL;
    while ((r = PQgetResult(s->spare)) != NULL) {
        if (rc == FERRY_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
            rc = ferry__pg_error(err, FERRY_ESINK, s->spare, r,
                                 WHAT ": committing a batch into %s", s->lag_table);
        PQclear(r);
    }
    if (rc == FERRY_OK && PQstatus(s->spare) != CONNECTION_OK)
        rc = ferry__pg_error(err, FERRY_ESINK, s->spare, NULL,
                             WHAT ": committing a batch into %s", s->lag_table);
    s->lag_rc = ferry__pg_guard_result(&g, rc, s->spare, WHAT, s->opts.io_timeout_ms, err);
    return s->lag_rc;
}

/* Settles, then makes the connection begin() set up the current one again. */
static int go_home(struct sink *s, struct ferry_error *err)
{
    int rc = settle(s, err);
    if (s->swapped) swap_conns(s);
    return rc;
}

/* A batch into t could overlap its commit: append, per_apply, not staged. */
static bool may_overlap(const struct sink *s, const struct target *t)
{
    return !s->in_tx && t->mode == FERRY_WRITE_APPEND && !t->temp && !t->insert_sql &&
           !t->upsert_sql && !t->delete_sql;
}

static bool overlapped(const struct sink *s, const struct target *t)
{
    return s->overlap && may_overlap(s, t);
}

/* This batch is one of overlap_commits: auto's timed ones (struct overlap_probe). */
static bool probing(const struct sink *s, const struct target *t, const struct ferry_batch *b)
{
    return s->overlap_mode == OVERLAP_AUTO && s->probe.n < PROBE_BATCHES && b->length > 0 &&
           may_overlap(s, t);
}

/* Counts one timed batch; after the last, chooses. */
static void probe_add(struct sink *s, int64_t copy_us, int64_t commit_us)
{
    struct overlap_probe *p = &s->probe;
    p->copy_us += copy_us;
    p->commit_us += commit_us;
    if (++p->n < PROBE_BATCHES) return;
    s->overlap = p->commit_us * PROBE_SHARE >= p->copy_us + p->commit_us;
    ferry_log(FERRY_LOG_DEBUG,
              WHAT ": overlap_commits auto: %d batches took %.1f ms copying and %.1f ms"
                   " committing each; commits %s",
              p->n, (double)p->copy_us / p->n / 1000.0, (double)p->commit_us / p->n / 1000.0,
              s->overlap ? "overlap from now on" : "stay on one connection");
}

static int apply_overlapped(struct sink *s, int ti, const struct ferry_batch *b, uint32_t *crc,
                            struct ferry_error *err)
{
    struct target *t = &s->t[ti];
    int rc = FERRY_OK;
    if (s->spare == NULL || PQstatus(s->spare) != CONNECTION_OK) {
        rc = settle(s, err); /* a broken spare's answer, before it is replaced */
        if (s->spare) PQfinish(s->spare);
        s->spare = NULL;
        if (rc == FERRY_OK) rc = ferry__pg_connect(s->url, &s->opts, WHAT, &s->spare, err);
        if (rc != FERRY_OK) return rc;
        PQsetNoticeProcessor(s->spare, notice, NULL);
    }
    rc = exec(s, "BEGIN", WHAT ": begin", err);
    if (rc != FERRY_OK) return rc;
    if (b->length > 0) rc = write_rows(s, ti, b, false, crc, err);
    if (rc == FERRY_OK && b->position != NULL)
        rc = put_checkpoint(s, b->resource, b->shard, b->position, ckpt_add_of(b), err);
    /* Between the two commits: the previous batch's COMMIT in flight, this one's rows sent. */
    if (rc == FERRY_OK) rc = ferry_failpoint_check("pg_sink_between_commits", err);
    if (rc == FERRY_OK) rc = settle(s, err); /* the previous batch is durable */
    if (rc == FERRY_OK && PQsendQuery(s->conn, "COMMIT") != 1)
        rc = ferry__pg_error(err, FERRY_ESINK, s->conn, NULL,
                             WHAT ": committing a batch into \"%s\".\"%s\"", s->schema, t->table);
    if (rc != FERRY_OK) {
        PQclear(PQexec(s->conn, "ROLLBACK"));
        return rc;
    }
    snprintf(s->lag_table, sizeof s->lag_table, "\"%s\".\"%s\"", s->schema, t->table);
    swap_conns(s);
    s->committing = true;
    (void)FERRY_FAILPOINT("pg_sink_commit_sent"); /* crash: the COMMIT was sent, unanswered */
    return FERRY_OK;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    /* The digest of exactly the batch the encoder reads below. */
    receipt->write_crc = ferry_batch_digest(b);
    receipt->rows = b->length;
    receipt->bytes = (int64_t)b->bytes;
    receipt->has_encoded_crc = false;
    receipt->encoded_crc = 0;
    snprintf(receipt->uri, sizeof receipt->uri, "%s", t->uri);
    if (receipt->write_crc != b->digest) return FERRY_OK; /* the pipeline reports divergence */

    uint32_t crc = 0;
    int rc = FERRY_OK;
    receipt->durable_now = false;
    if (overlapped(s, t)) {
        rc = apply_overlapped(s, target->index, b, &crc, err);
        receipt->encoded_crc = crc;
        receipt->has_encoded_crc = rc == FERRY_OK;
        return rc;
    }
    bool timed = probing(s, t, b);
    int64_t t0 = timed ? ferry_now_mono_us() : 0, t1 = 0;
    rc = go_home(s, err);
    if (rc == FERRY_OK && !s->in_tx) rc = exec(s, "BEGIN", WHAT ": begin", err);
    if (rc != FERRY_OK) return rc;
    bool keep_open = s->in_tx && !t->temp && !t->upsert_sql && !t->delete_sql;
    if (!keep_open) rc = close_stream(s, err);
    if (rc == FERRY_OK && b->length > 0) rc = write_rows(s, target->index, b, keep_open, &crc, err);
    /* Inside a transaction (at_commit, a commit group) the checkpoint is held and written
     * with the others of the commit (flush_pending: one statement), else at once. */
    if (rc == FERRY_OK && b->position != NULL)
        rc = s->in_tx ? hold_checkpoint(s, b, err)
                      : put_checkpoint(s, b->resource, b->shard, b->position, ckpt_add_of(b),
                                       err);
    if (!s->in_tx) {
        if (timed) t1 = ferry_now_mono_us();
        if (rc == FERRY_OK) rc = exec_step(s, t, "COMMIT", "committing a batch into", err);
        if (rc != FERRY_OK) PQclear(PQexec(s->conn, "ROLLBACK"));
    }
    if (rc != FERRY_OK) return rc;
    if (timed) probe_add(s, t1 - t0, ferry_now_mono_us() - t1);
    receipt->encoded_crc = crc;
    receipt->has_encoded_crc = true;
    /* committed here, after go_home settled any overlapped commit before it */
    receipt->durable_now = !s->in_tx;
    return FERRY_OK;
}

/* ---- commit / abort ----------------------------------------------------------------------- */

/* In the commit transaction: the staging table gets the key, the old table goes, the staging
 * table takes its name, and its key constraint the usual "<table>_pkey" name. */
static int swap_staging(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct ferry_buf b;
    char what[240];
    int rc = FERRY_OK;
    snprintf(what, sizeof what, WHAT ": replacing table \"%s\".\"%s\"", s->schema, t->table);
    if (t->schema->n_key > 0) {
        ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "ALTER TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
        if (rc == FERRY_OK) rc = qualified(&b, s->schema, t->staging, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " ADD PRIMARY KEY (") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = key_list(&b, t->schema, NULL, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, ")") != FERRY_OK) rc = oom(err);
        rc = exec_buf(s, &b, rc, what, err);
    }
    if (rc == FERRY_OK) rc = drop_table(s, t->table, err);
    if (rc != FERRY_OK) return rc;
    ferry_buf_init(&b, 0);
    rc = ferry_buf_printf(&b, "ALTER TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = qualified(&b, s->schema, t->staging, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " RENAME TO ") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, t->table, err);
    rc = exec_buf(s, &b, rc, what, err);
    if (rc != FERRY_OK || t->schema->n_key == 0 || strlen(t->table) + 5 > 63) return rc;
    /* Rename the key constraint (and its index) so the next staging table can use the name. */
    PGresult *r = NULL;
    const char *p[1] = {t->qtable};
    rc = query(s,
               "SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = $1::regclass "
               "AND contype = 'p'",
               1, p, &r, what, err);
    if (rc != FERRY_OK) return rc;
    char *want = ferry_asprintf("%s_pkey", t->table);
    if (want == NULL) rc = oom(err);
    if (rc == FERRY_OK && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), want) != 0) {
        ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "ALTER TABLE %s RENAME CONSTRAINT ", t->qtable) == FERRY_OK
                 ? FERRY_OK
                 : oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, PQgetvalue(r, 0, 0), err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " TO ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, want, err);
        rc = exec_buf(s, &b, rc, what, err);
    }
    ferry_free(want);
    PQclear(r);
    return rc;
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", WHAT ": commit without a session");
    int rc = go_home(s, err);
    if (rc == FERRY_OK && !s->in_tx) {
        rc = exec(s, "BEGIN", WHAT ": begin", err);
        if (rc != FERRY_OK) return rc;
        s->in_tx = true;
    }
    if (rc == FERRY_OK) rc = flush_pending(s, err);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used && s->t[i].mode == FERRY_WRITE_REPLACE)
            rc = swap_staging(s, &s->t[i], err);
    if (rc == FERRY_OK) rc = exec(s, "COMMIT", WHAT ": commit", err);
    /* On failure the transaction is still marked open: abort() rolls it back and drops the
     * staging tables. */
    if (rc != FERRY_OK) return rc;
    s->in_tx = false;
    s->session = false;
    return FERRY_OK;
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL || s->conn == NULL) return;
    go_home(s, NULL); /* the batch in flight commits or not: its checkpoint goes with it */
    s->streaming = -1;
    drop_pending(s);
    if (PQtransactionStatus(s->conn) == PQTRANS_ACTIVE) {
        /* A COPY may still be open after a failure mid-stream. */
        PQputCopyEnd(s->conn, "ferry: aborted");
        PGresult *r = NULL;
        while ((r = PQgetResult(s->conn)) != NULL)
            PQclear(r);
    }
    if (s->in_tx || PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
        PQclear(PQexec(s->conn, "ROLLBACK"));
        s->in_tx = false;
    }
    if (!s->session) return;
    s->session = false;
    /* Staging rows and the checkpoints that account for them go together. */
    PQclear(PQexec(s->conn, "BEGIN"));
    bool ok = true;
    for (int i = 0; i < s->n_t && ok; i++) {
        struct target *t = &s->t[i];
        if (!t->used || t->mode != FERRY_WRITE_REPLACE) continue;
        ok = drop_table(s, t->staging, NULL) == FERRY_OK;
        const char *p[2] = {s->pipeline, t->resource};
        PGresult *r = NULL;
        if (ok)
            ok = query(s,
                       "DELETE FROM \"_ferry\".\"checkpoints\" WHERE pipeline = $1 AND "
                       "resource = $2",
                       2, p, &r, WHAT, NULL) == FERRY_OK;
        PQclear(r);
    }
    PQclear(PQexec(s->conn, ok ? "COMMIT" : "ROLLBACK"));
}

/* ---- commit groups (cdc streams of one source log, pipeline/commit_group.h) --------------- */

/* A transaction the following applies join (per_apply sessions only). */
static int sink_group_begin(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || s->at_commit || s->in_tx)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": a commit group needs a per_apply session, no transaction open");
    int rc = go_home(s, err); /* an overlapped commit still in flight (copies before) */
    if (rc == FERRY_OK) rc = exec(s, "BEGIN", WHAT ": begin (commit group)", err);
    if (rc == FERRY_OK) s->in_tx = true;
    return rc;
}

/* The group's data and every checkpoint its applies carried, in one commit. */
static int sink_group_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    int rc = flush_pending(s, err);
    if (rc == FERRY_OK) rc = exec(s, "COMMIT", WHAT ": commit (commit group)", err);
    if (rc != FERRY_OK && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
        PQclear(PQexec(s->conn, "ROLLBACK"));
    s->in_tx = false;
    return rc;
}

static void sink_group_abort(void *ctx)
{
    struct sink *s = ctx;
    s->streaming = -1;
    drop_pending(s);
    if (s->conn != NULL && PQtransactionStatus(s->conn) == PQTRANS_ACTIVE) {
        PQputCopyEnd(s->conn, "ferry: commit group rolled back");
        PGresult *r = NULL;
        while ((r = PQgetResult(s->conn)) != NULL)
            PQclear(r);
    }
    if (s->conn != NULL && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
        PQclear(PQexec(s->conn, "ROLLBACK"));
    s->in_tx = false;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

static int sink_checkpoints(void *ctx, const char *pipeline, struct ferry_sink_checkpoint **out,
                            int *n, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    *n = 0;
    int rc = connect_db(s, err);
    if (rc != FERRY_OK) return rc;
    PGresult *r = NULL;
    bool exists = false, counts = false;
    rc = checkpoint_table_shape(s, &exists, &counts, WHAT ": reading checkpoints", err);
    if (rc != FERRY_OK || !exists) return rc; /* none: nothing was ever committed here */
    const char *p[1] = {pipeline ? pipeline : ""};
    rc = query(s,
               counts ? "SELECT resource, shard, run_id, position, run_rows, run_bytes, "
                        "run_batches FROM \"_ferry\".\"checkpoints\" WHERE pipeline = $1 "
                        "ORDER BY resource, shard"
                      : "SELECT resource, shard, run_id, position, NULL, NULL, NULL FROM "
                        "\"_ferry\".\"checkpoints\" WHERE pipeline = $1 ORDER BY resource, "
                        "shard",
               1, p, &r, WHAT ": reading checkpoints", err);
    if (rc != FERRY_OK) return rc;
    int rows = PQntuples(r);
    struct ferry_sink_checkpoint *v = ferry_calloc((size_t)(rows ? rows : 1), sizeof *v);
    if (v == NULL) {
        PQclear(r);
        return oom(err);
    }
    for (int i = 0; i < rows; i++) {
        v[i].resource = ferry_strdup(PQgetvalue(r, i, 0));
        v[i].shard = (int)strtol(PQgetvalue(r, i, 1), NULL, 10);
        v[i].run_id = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        v[i].position = PQgetisnull(r, i, 3) ? NULL : ferry_strdup(PQgetvalue(r, i, 3));
        v[i].has_counts = !PQgetisnull(r, i, 4) && !PQgetisnull(r, i, 5) && !PQgetisnull(r, i, 6);
        if (v[i].has_counts) {
            v[i].rows = strtoll(PQgetvalue(r, i, 4), NULL, 10);
            v[i].bytes = strtoll(PQgetvalue(r, i, 5), NULL, 10);
            v[i].batches = strtoll(PQgetvalue(r, i, 6), NULL, 10);
        }
        if (v[i].resource == NULL || (!PQgetisnull(r, i, 3) && v[i].position == NULL)) {
            PQclear(r);
            ferry_sink_checkpoints_free(v, i + 1);
            return oom(err);
        }
    }
    PQclear(r);
    *out = v;
    *n = rows;
    return FERRY_OK;
}

/* The session's work under the io_timeout guard (pg_guard.h): a server that stops answering
 * while its kernel still acknowledges fails the call instead of hanging the run. The guard
 * watches the current connection, also after an overlapped commit swapped it (swap_conns). */
static void arm(struct sink *s, struct ferry_pg_guard *g)
{
    ferry__pg_guard_begin(g, s->conn, s->opts.io_timeout_ms);
    s->guard = g;
}

static int disarm(struct sink *s, struct ferry_pg_guard *g, int rc, struct ferry_error *err)
{
    s->guard = NULL;
    return ferry__pg_guard_result(g, rc, s->conn, WHAT, s->opts.io_timeout_ms, err);
}

static int guarded_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_prepare(ctx, target, err);
    return disarm(s, &g, rc, err);
}

static int guarded_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_begin(ctx, run, err);
    return disarm(s, &g, rc, err);
}

static int guarded_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                         struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_apply(ctx, target, b, receipt, err);
    return disarm(s, &g, rc, err);
}

static int guarded_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_commit(ctx, err);
    return disarm(s, &g, rc, err);
}

static int guarded_group_begin(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_group_begin(ctx, err);
    return disarm(s, &g, rc, err);
}

static int guarded_group_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    int rc = sink_group_commit(ctx, err);
    return disarm(s, &g, rc, err);
}

static void guarded_group_abort(void *ctx)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    sink_group_abort(ctx);
    s->guard = NULL;
    ferry__pg_guard_end(&g);
}

static void guarded_prepare_ahead(void *ctx, const char *const *tables, int n)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    sink_prepare_ahead(ctx, tables, n);
    s->guard = NULL;
    ferry__pg_guard_end(&g);
}

static int sink_settle(void *ctx, struct ferry_error *err)
{
    return settle(ctx, err);
}

static void guarded_abort(void *ctx)
{
    struct sink *s = ctx;
    struct ferry_pg_guard g;
    arm(s, &g);
    sink_abort(ctx);
    s->guard = NULL;
    ferry__pg_guard_end(&g);
}

const struct ferry_sink_vtable ferry__postgres_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "postgres",
    .tuning_keys = sink_tuning_keys,
    .open = sink_open,
    .capabilities = sink_capabilities,
    .prepare = guarded_prepare,
    .begin = guarded_begin,
    .apply = guarded_apply,
    .commit = guarded_commit,
    .abort = guarded_abort,
    .close = sink_close,
    .checkpoints = sink_checkpoints,
    .verify_open = ferry__pg_verify_open,
    .group_begin = guarded_group_begin,
    .group_commit = guarded_group_commit,
    .group_abort = guarded_group_abort,
    .settle = sink_settle,
    .prepare_ahead = guarded_prepare_ahead,
};
