/* connectors/postgres/pg_source.c - the `postgres` source: tables and views of one database.
 *
 * Owns one libpq connection, the discovery of a relation from the catalog (columns in
 * attnum order, types through ferry__pg_map_type with domains resolved to their base type,
 * nullability, primary key from pg_index), frozen read plans and the COPY BINARY reads
 * that execute them (decoded by pg_copy.c). Calls libpq, pg_common.c, pg_copy.c, the row
 * writer, the batch text forms, jansson (plans) and the position codec (saved and resume
 * positions: checkpoint/position.h, never parsed here). Registered in connectors/registry.c; driven by
 * the runner on one thread; `cancel` may come from any thread (PQcancel).
 *
 * Reads (docs/connectors.md, "postgres source").
 *   full, single-column integer key: [min, max] at plan time split into
 *     ceil(count / shard_rows) ranges (count: reltuples of an analyzed table, else
 *     count(*)), each read `WHERE k >= lo AND k <= hi ORDER BY k` and resumed with
 *     `k > last`.
 *   full, other keys: one shard ordered by the key, resumed with `(k1, k2) > (v1, v2)`.
 *   full, no key: one shard read whole, no resume point (a crash re-reads the table).
 *   full, positions durable only at the run's end (read context positions_at_end, an at_commit
 *     sink): no key order at all ("ordered": false, "commit_once": true in the plan). One
 *     reader: one unfiltered read, `COPY table (cols) TO` when the relation is a table whose
 *     columns all have native decoders (the server's cheapest path). Several: heap page
 *     ranges read by TID Range Scans (pg_source.h; PostgreSQL >= 14, tables and
 *     materialized views), else key ranges without ORDER BY. Nothing is resumed mid-shard:
 *     the runner never commits such a run before its end (connector.h).
 *   incremental: ORDER BY cursor..., key... with `(c..., k...) > saved` (minus `lookback` on
 *     a date/timestamp first cursor) and `<= newest at plan time`, frozen in the plan.
 *     Rows whose cursor is NULL are never read incrementally (a row comparison with NULL is
 *     not true); a non-monotonic cursor (a row updated to an older value, or committed
 *     after a later one was read) is missed unless `lookback` covers it.
 * Snapshot (the optional snapshot/use_snapshot slots). The runner has the planning instance
 * export one: a dedicated second connection opens REPEATABLE READ READ ONLY, runs
 * pg_export_snapshot() and stays idle in that transaction until close, which keeps the id
 * importable. Every reader instance (the planning one included) then reads all its shards
 * in ONE transaction that imported it (SET TRANSACTION SNAPSHOT), kept open between
 * shards: every shard of every resource of the attempt sees the same data, whichever
 * reader reads it. A transaction lost to an error is begun again on the same id. Without
 * a snapshot (no runner call) each extract runs in its own REPEATABLE READ READ ONLY
 * transaction. The id is per attempt and not frozen: "snapshot" stays null in the plan. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "checkpoint/position.h"
#include "connectors/postgres/pg_cdc.h"
#include "connectors/postgres/pg_slot.h"
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_demux.h"
#include "connectors/postgres/pg_copy.h"
#include "connectors/postgres/pg_guard.h"
#include "connectors/postgres/pg_repl.h"
#include "connectors/postgres/pg_source.h"
#include "ferry/connector.h"

__extension__ typedef __int128 i128;

static const char *const source_tuning_keys[] = {
    "parallelism",  "shard_rows",      "connect_timeout", "statement_timeout",
    "idle_timeout", "keepalives_idle", "io_timeout",      "stream_large_transactions",
    NULL};

#define WHAT "postgres source"

struct src {
    PGconn *c;
    PGcancel *cancel;
    atomic_int canceled;
    int64_t parallelism;
    int64_t shard_rows;
    char peer[256];
    char *url; /* resolved secret, for the export connection; wiped at close */
    struct ferry_pg_conn_opts opts;
    bool stream_large_txns; /* key stream_large_transactions (cdc; pg_spool.h) */
    PGconn *snap;           /* the exporting transaction, open until close */
    char *snapshot_id;      /* imported: reads run in a transaction that uses it */
    /* cdc: replication connections that created a slot this attempt, kept idle so that the
     * slot's exported snapshot stays importable for the copy shards (pg_cdc.h). */
    PGconn **keep;
    int n_keep;
    struct ferry_pg_cdc_progress progress; /* the stream running on this instance */
    struct ferry_pg_slot slot; /* the pipeline's shared slot (pg_slot.h) */
    bool lazy; /* a stream's instance: c only while its extract starts (src_open_stream) */
    /* The relations discover read, each kept for this instance's plan of the same table
     * (taken there): planning describes a table once, and plans what discover saw. */
    struct rel *seen;
    int n_seen;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

/* ---- open / close / cancel ----------------------------------------------------------- */

static void brief_stream_opened(void);
static void brief_stream_closed(void);
static void seen_free(struct src *s);

static void src_close(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    if (s->lazy) brief_stream_closed();
    if (s->cancel) PQfreeCancel(s->cancel);
    if (s->c) PQfinish(s->c);
    if (s->snap) PQfinish(s->snap);
    for (int i = 0; i < s->n_keep; i++) PQfinish(s->keep[i]);
    ferry_free(s->keep);
    ferry__pg_slot_release(&s->slot);
    seen_free(s);
    ferry_free(s->snapshot_id);
    ferry_secret_free(s->url);
    ferry_free(s);
}

/* The instance with its keys read, not connected yet. */
static int src_new(struct ferry_cfg *cfg, struct src **out, struct ferry_error *err)
{
    char *url = NULL;
    struct ferry_pg_conn_opts opts;
    int64_t parallelism = 1, shard_rows = 1000000;
    bool stream_large_txns = false;
    int rc = ferry_cfg_int(cfg, "parallelism", false, 1, 64, &parallelism, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_int(cfg, "shard_rows", false, 1, INT64_C(1) << 40, &shard_rows, err);
    if (rc == FERRY_OK) rc = ferry__pg_read_conn_config(cfg, WHAT, &url, &opts, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_bool(cfg, "stream_large_transactions", false, &stream_large_txns, err);
    if (rc != FERRY_OK) {
        ferry_secret_free(url);
        return rc;
    }
    struct src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) {
        ferry_secret_free(url);
        return nomem(err);
    }
    s->parallelism = parallelism;
    s->shard_rows = shard_rows;
    s->opts = opts;
    s->stream_large_txns = stream_large_txns;
    s->url = url;
    rc = ferry__pg_slot_config(&s->slot, cfg, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    *out = s;
    return FERRY_OK;
}

/* s->c and its cancel handle. */
static int src_connect(struct src *s, struct ferry_error *err)
{
    int rc = ferry__pg_connect(s->url, &s->opts, WHAT, &s->c, err);
    if (rc != FERRY_OK) return rc;
    ferry__pg_describe(s->c, s->peer, sizeof s->peer);
    s->cancel = PQgetCancel(s->c);
    return s->cancel == NULL ? nomem(err) : FERRY_OK;
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct src *s = NULL;
    int rc = src_new(cfg, &s, err);
    if (rc == FERRY_OK) rc = src_connect(s, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    *ctx = s;
    return FERRY_OK;
}

/* A stream's instance (connector.h open_stream): connects only while its extract starts
 * (extract_stream), so that any number of streams share the one replication session. */
static int src_open_stream(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct src *s = NULL;
    int rc = src_new(cfg, &s, err);
    if (rc != FERRY_OK) return rc;
    s->lazy = true;
    brief_stream_opened();
    *ctx = s;
    return FERRY_OK;
}

static void src_cancel(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL || s->cancel == NULL) return;
    atomic_store(&s->canceled, 1);
    char buf[256];
    PQcancel(s->cancel, buf, sizeof buf);
}

/* ---- the relation -------------------------------------------------------------------- */

struct col {
    char *name;
    char *sql_type; /* format_type(): the cast for literals compared with this column */
    uint32_t oid;   /* base type (domains resolved) */
    int32_t typmod;
    bool notnull;
    int key_pos; /* 1.. in the primary key, 0 otherwise */
};

struct rel {
    char *schema_name;
    char *table;
    char *from; /* "schema"."table" */
    char relkind; /* pg_class.relkind: 'r' table, 'v' view, 'm', 'p', 'f' */
    struct col *cols;
    int n_cols;
    char *key_name; /* kept by discover (seen_keep): the resource name it was asked for */
};

static void rel_free(struct rel *r)
{
    for (int i = 0; i < r->n_cols; i++) {
        ferry_free(r->cols[i].name);
        ferry_free(r->cols[i].sql_type);
    }
    ferry_free(r->cols);
    ferry_free(r->schema_name);
    ferry_free(r->table);
    ferry_free(r->from);
    ferry_free(r->key_name);
    memset(r, 0, sizeof *r);
}

static void seen_free(struct src *s)
{
    for (int i = 0; i < s->n_seen; i++) rel_free(&s->seen[i]);
    ferry_free(s->seen);
    s->seen = NULL;
    s->n_seen = 0;
}

/* Keeps r (moved: *r is emptied) for the plan of `name`; nothing kept when out of memory
 * (the plan then reads the catalog again). */
static void seen_keep(struct src *s, const char *name, struct rel *r)
{
    struct rel *v = ferry_realloc(s->seen, sizeof *v * (size_t)(s->n_seen + 1));
    char *key = ferry_strdup(name);
    if (v != NULL) s->seen = v;
    if (v == NULL || key == NULL) {
        ferry_free(key);
        rel_free(r);
        return;
    }
    /* the name asked for is the key: resolve may have folded it to lower case */
    ferry_free(r->key_name);
    r->key_name = key;
    s->seen[s->n_seen++] = *r;
    memset(r, 0, sizeof *r);
}

/* The relation discover kept for `name`, moved into *r; false when there is none. */
static bool seen_take(struct src *s, const char *name, struct rel *r)
{
    for (int i = 0; i < s->n_seen; i++) {
        if (strcmp(s->seen[i].key_name, name) != 0) continue;
        *r = s->seen[i];
        s->seen[i] = s->seen[--s->n_seen];
        ferry_free(r->key_name);
        r->key_name = NULL;
        return true;
    }
    return false;
}

/* The columns of the tables named by $1 (schemas) and $2 (names), text[] of equal length,
 * each row led by schema and table: base types of domains, NOT NULL, the declared type,
 * the position in the primary key, relkind. query_columns and discover_ahead. */
static const char catalog_many_sql[] =
    "SELECT n.nspname, c.relname, a.attname, "
    "CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, "
    "CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, "
    "a.attnotnull, pg_catalog.format_type(a.atttypid, a.atttypmod), "
    "COALESCE((SELECT k.ord FROM pg_catalog.pg_index i, "
    "pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
    "WHERE i.indrelid = c.oid AND i.indisprimary AND k.attnum = a.attnum), 0), c.relkind "
    "FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS w(s, r) "
    "JOIN pg_catalog.pg_namespace n ON n.nspname = w.s "
    "JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = w.r "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
    "ORDER BY n.nspname, c.relname, a.attnum";

/* r's columns from rows [first, first + n) of a catalog_many_sql result whose columns start at
 * column `off` (the batch query puts schema and table first). */
static int fill_columns(struct rel *r, PGresult *res, int first, int n, int off,
                        struct ferry_error *err)
{
    r->cols = ferry_calloc((size_t)n, sizeof *r->cols);
    if (r->cols == NULL) return nomem(err);
    r->n_cols = n;
    r->relkind = PQgetvalue(res, first, off + 6)[0];
    for (int i = 0; i < n; i++) {
        struct col *c = &r->cols[i];
        int row = first + i;
        c->name = ferry_strdup(PQgetvalue(res, row, off + 0));
        c->oid = (uint32_t)strtoul(PQgetvalue(res, row, off + 1), NULL, 10);
        c->typmod = (int32_t)strtol(PQgetvalue(res, row, off + 2), NULL, 10);
        c->notnull = PQgetvalue(res, row, off + 3)[0] == 't';
        c->sql_type = ferry_strdup(PQgetvalue(res, row, off + 4));
        c->key_pos = (int)strtol(PQgetvalue(res, row, off + 5), NULL, 10);
        if (c->name == NULL || c->sql_type == NULL) return nomem(err);
    }
    return FERRY_OK;
}

static int query_columns(struct src *s, struct rel *r, const char *schema_name,
                         const char *table, bool *found, struct ferry_error *err)
{
    struct ferry_buf bs, bt;
    ferry_buf_init(&bs, 0);
    ferry_buf_init(&bt, 0);
    ferry__pg_text_array(&bs, &schema_name, 1, ferry__pg_string_at);
    ferry__pg_text_array(&bt, &table, 1, ferry__pg_string_at);
    *found = false;
    if (bs.data == NULL || bt.data == NULL) {
        ferry_buf_release(&bs);
        ferry_buf_release(&bt);
        return nomem(err);
    }
    const char *params[2] = {bs.data, bt.data};
    PGresult *res = PQexecParams(s->c, catalog_many_sql, 2, NULL, params, NULL, NULL, 0);
    ferry_buf_release(&bs);
    ferry_buf_release(&bt);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, res,
                                 WHAT ": %s: reading the catalog for table \"%s\".\"%s\"",
                                 s->peer, schema_name, table);
        PQclear(res);
        return rc;
    }
    int n = PQntuples(res);
    int rc = n > 0 ? fill_columns(r, res, 0, n, 2, err) : FERRY_OK;
    PQclear(res);
    *found = n > 0 && rc == FERRY_OK;
    return rc;
}

static bool has_upper(const char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z') return true;
    return false;
}

static char *lowered(const char *s)
{
    char *l = ferry_strdup(s);
    if (l == NULL) return NULL;
    for (char *p = l; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    return l;
}

/* r->from: "schema"."table", quoted. */
static int rel_from(struct rel *r, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__pg_quote_ident(&b, r->schema_name, err);
    if (rc == FERRY_OK && ferry_buf_append(&b, ".", 1) != FERRY_OK) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, r->table, err);
    if (rc == FERRY_OK) {
        r->from = ferry_buf_take(&b);
        if (r->from == NULL) rc = nomem(err);
    }
    ferry_buf_release(&b);
    return rc;
}

/* Finds the relation: names as written first; when that fails and a name has capitals,
 * PostgreSQL's folding of unquoted names (public.Orders is public.orders). */
static int resolve(struct src *s, const char *name, struct rel *r, struct ferry_error *err)
{
    memset(r, 0, sizeof *r);
    int rc = ferry__pg_split_name(name, &r->schema_name, &r->table, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT);
    bool found = false;
    rc = query_columns(s, r, r->schema_name, r->table, &found, err);
    if (rc == FERRY_OK && !found && (has_upper(r->schema_name) || has_upper(r->table))) {
        char *ls = lowered(r->schema_name), *lt = lowered(r->table);
        if (ls == NULL || lt == NULL) {
            rc = nomem(err);
        } else {
            rc = query_columns(s, r, ls, lt, &found, err);
            if (rc == FERRY_OK && found) {
                ferry_free(r->schema_name);
                ferry_free(r->table);
                r->schema_name = ls;
                r->table = lt;
                ls = lt = NULL;
            }
        }
        ferry_free(ls);
        ferry_free(lt);
    }
    if (rc == FERRY_OK && !found)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "postgres",
                             WHAT ": table \"%s\".\"%s\" not found on %s (or not visible to "
                             "this user)",
                             r->schema_name, r->table, s->peer);
    if (rc == FERRY_OK) rc = rel_from(r, err);
    if (rc != FERRY_OK) rel_free(r);
    return rc;
}

/* ---- the catalog of many tables in one query (discover_ahead) ---- */

/* Keeps the relations of rows [first, first + n) for every asked name naming them exactly. */
static void keep_many(struct src *s, PGresult *res, int first, int n, char *const *sch,
                      char *const *tab, const char *const *names, int n_names)
{
    const char *sn = PQgetvalue(res, first, 0), *tn = PQgetvalue(res, first, 1);
    for (int k = 0; k < n_names; k++) {
        if (sch[k] == NULL || strcmp(sch[k], sn) != 0 || strcmp(tab[k], tn) != 0) continue;
        struct ferry_error e;
        struct rel r;
        memset(&r, 0, sizeof r);
        r.schema_name = ferry_strdup(sn);
        r.table = ferry_strdup(tn);
        int rc = r.schema_name && r.table ? fill_columns(&r, res, first, n, 2, &e) : FERRY_ENOMEM;
        if (rc == FERRY_OK) rc = rel_from(&r, &e);
        if (rc == FERRY_OK)
            seen_keep(s, names[k], &r);
        else
            rel_free(&r);
    }
}

/* The asked names split into schema and table; a name that does not split stays NULL
 * (discover reports it). */
static void split_all(const char *const *names, int n, char **sch, char **tab)
{
    for (int i = 0; i < n; i++) {
        struct ferry_error e;
        if (ferry__pg_split_name(names[i], &sch[i], &tab[i], &e) != FERRY_OK)
            sch[i] = tab[i] = NULL;
    }
}

/* The schema and table text arrays (bs, bt) of the names that split; false when none did or
 * out of memory. */
static bool name_arrays(char *const *sch, char *const *tab, int n, struct ferry_buf *bs,
                        struct ferry_buf *bt)
{
    const char **vs = ferry_calloc((size_t)n, sizeof *vs);
    const char **vt = ferry_calloc((size_t)n, sizeof *vt);
    int m = 0;
    for (int i = 0; vs && vt && i < n; i++)
        if (sch[i]) {
            vs[m] = sch[i];
            vt[m++] = tab[i];
        }
    if (m > 0) {
        ferry__pg_text_array(bs, vs, m, ferry__pg_string_at);
        ferry__pg_text_array(bt, vt, m, ferry__pg_string_at);
    }
    ferry_free(vs);
    ferry_free(vt);
    return m > 0 && bs->data && bt->data;
}

/* One catalog query for all of them; its rows come ordered by schema and table, each
 * relation's run kept for the names naming it. */
static void query_many(struct src *s, char *const *sch, char *const *tab,
                       const char *const *names, int n, const struct ferry_buf *bs,
                       const struct ferry_buf *bt)
{
    const char *params[2] = {bs->data, bt->data};
    PGresult *res = PQexecParams(s->c, catalog_many_sql, 2, NULL, params, NULL, NULL, 0);
    int rows = PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res) : 0;
    for (int i = 0; i < rows;) {
        int j = i + 1;
        while (j < rows && !strcmp(PQgetvalue(res, j, 0), PQgetvalue(res, i, 0)) &&
               !strcmp(PQgetvalue(res, j, 1), PQgetvalue(res, i, 1)))
            j++;
        keep_many(s, res, i, j - i, sch, tab, names, n);
        i = j;
    }
    PQclear(res);
}

/* discover_ahead: the columns of many tables in one query, kept for their discover calls; a
 * failure here is silent (each discover then asks for its own table and reports). */
static void src_discover_ahead(void *ctx, const char *const *names, int n)
{
    struct src *s = ctx;
    if (s == NULL || s->c == NULL || s->lazy || n < 2) return;
    char **sch = ferry_calloc((size_t)n, sizeof *sch), **tab = ferry_calloc((size_t)n, sizeof *tab);
    struct ferry_buf bs, bt;
    ferry_buf_init(&bs, 0);
    ferry_buf_init(&bt, 0);
    if (sch && tab) split_all(names, n, sch, tab);
    if (sch && tab && name_arrays(sch, tab, n, &bs, &bt))
        query_many(s, sch, tab, names, n, &bs, &bt);
    for (int i = 0; sch && tab && i < n; i++) {
        ferry_free(sch[i]);
        ferry_free(tab[i]);
    }
    ferry_free(sch);
    ferry_free(tab);
    ferry_buf_release(&bs);
    ferry_buf_release(&bt);
}

static int col_index(const struct rel *r, const char *name)
{
    for (int i = 0; i < r->n_cols; i++)
        if (strcmp(r->cols[i].name, name) == 0) return i;
    return -1;
}

/* ---- discover ------------------------------------------------------------------------ */

static int add_field(struct ferry_schema *sc, const struct col *c, struct ferry_error *err)
{
    enum ferry_type t;
    int p, scale;
    ferry__pg_map_type(c->oid, c->typmod, &t, &p, &scale);
    int rc = ferry_schema_add_field(sc, c->name, t, !c->notnull && c->key_pos == 0, err);
    if (rc != FERRY_OK) return rc;
    sc->fields[sc->n_fields - 1].precision = p;
    sc->fields[sc->n_fields - 1].scale = scale;
    return ferry__pg_set_origin(sc, sc->n_fields - 1, c->sql_type, err);
}

/* A cdc resource: its keys are read now (so that unknown ones are refused before a run),
 * columns outside the key become nullable (a delete carries only the key), and a change
 * log gets its operation, LSN, commit time and sequence columns. */
static int cdc_schema(struct src *s, const struct ferry_resource_spec *spec, const struct rel *r,
                      struct ferry_schema *sc, struct ferry_error *err)
{
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    /* A resource without a slot of its own shares the pipeline's (pg_slot.h). */
    if (rc == FERRY_OK)
        rc = ferry__pg_slot_register(&s->slot, spec, r->schema_name, r->table, r->from, err);
    if (rc != FERRY_OK) return rc;
    for (int f = 0; f < sc->n_fields; f++)
        if (sc->fields[f].key_pos == 0) sc->fields[f].nullable = true;
    return ferry_cdc_add_columns(sc, ferry_read_context_of(spec), WHAT, spec->table, err);
}

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct src *s = ctx;
    *out = NULL;
    struct rel r;
    int rc = seen_take(s, spec->table, &r) ? FERRY_OK : resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_schema *sc = ferry_schema_new();
    if (sc == NULL) {
        rel_free(&r);
        return nomem(err);
    }
    int n = spec->columns ? spec->n_columns : r.n_cols;
    for (int f = 0; f < n && rc == FERRY_OK; f++) {
        int c = spec->columns ? col_index(&r, spec->columns[f]) : f;
        if (c < 0)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "postgres",
                                 WHAT ": table %s has no column \"%s\"", r.from, spec->columns[f]);
        else
            rc = add_field(sc, &r.cols[c], err);
    }
    /* The declared key, else the primary key. Its columns must be selected: positions are
     * read from the rows. */
    int missing = rc == FERRY_OK && spec->key ? ferry_schema_mark_key(sc, spec->key, spec->n_key) : -1;
    if (rc == FERRY_OK && missing >= 0) {
        rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                             WHAT ": table %s: key column \"%s\" is not among the selected columns",
                             r.from, spec->key[missing]);
    } else if (rc == FERRY_OK && spec->key == NULL) {
        for (int c = 0; c < r.n_cols && rc == FERRY_OK; c++) {
            if (r.cols[c].key_pos == 0) continue;
            int f = ferry_schema_find(sc, r.cols[c].name);
            if (f < 0)
                rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                     WHAT ": table %s: primary key column \"%s\" must be among "
                                     "the selected columns",
                                     r.from, r.cols[c].name);
            else
                sc->fields[f].key_pos = r.cols[c].key_pos;
        }
    }
    for (int k = 0; rc == FERRY_OK && k < spec->n_cursor; k++)
        if (ferry_schema_find(sc, spec->cursor[k]) < 0)
            rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 WHAT ": table %s: cursor column \"%s\" %s", r.from,
                                 spec->cursor[k],
                                 col_index(&r, spec->cursor[k]) < 0
                                     ? "does not exist"
                                     : "must be among the selected columns");
    if (rc == FERRY_OK && spec->mode == FERRY_READ_CDC) rc = cdc_schema(s, spec, &r, sc, err);
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    if (rc == FERRY_OK && !s->lazy)
        seen_keep(s, spec->table, &r);
    else
        rel_free(&r);
    if (rc != FERRY_OK) {
        ferry_schema_unref(sc);
        return rc;
    }
    *out = sc;
    return FERRY_OK;
}

/* ---- values between JSON positions, plans and SQL ----------------------------------- */

/* A position value (the row writer's JSON form, batch/builder.h) as PostgreSQL input text
 * for a column of ferry type t. */
static int position_text(const json_t *v, enum ferry_type t, struct ferry_buf *out)
{
    char tmp[64];
    int n = -1;
    ferry_buf_reset(out);
    switch (t) {
    case FERRY_TYPE_BOOL:
        if (!json_is_boolean(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%s", json_is_true(v) ? "true" : "false");
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        if (!json_is_integer(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%" PRId64, (int64_t)json_integer_value(v));
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        if (json_is_string(v)) return ferry_buf_printf(out, "%s", json_string_value(v));
        if (json_is_integer(v))
            return ferry_buf_printf(out, "%" PRId64, (int64_t)json_integer_value(v));
        if (!json_is_real(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%.17g", json_real_value(v));
    case FERRY_TYPE_DATE32:
        if (json_is_integer(v)) n = ferry_date32_to_text((int32_t)json_integer_value(v), tmp,
                                                         sizeof tmp);
        break;
    case FERRY_TYPE_TIME64_US:
        if (json_is_integer(v)) n = ferry_time64_to_text(json_integer_value(v), tmp, sizeof tmp);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (json_is_integer(v))
            n = ferry_timestamp_to_text(json_integer_value(v), t == FERRY_TYPE_TIMESTAMPTZ_US, tmp,
                                        sizeof tmp);
        break;
    case FERRY_TYPE_BINARY:
        if (!json_is_string(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "\\x%s", json_string_value(v));
    default: /* decimals, text, json, uuid: their text */
        if (!json_is_string(v)) return FERRY_EINVAL;
        return ferry_buf_append(out, json_string_value(v), json_string_length(v));
    }
    if (n < 0) return FERRY_EINVAL;
    return ferry_buf_append(out, tmp, (size_t)n);
}

/* Appends `'text'::type` (escaped by libpq for this connection). */
static int append_literal(struct src *s, struct ferry_buf *sql, const char *text, size_t n,
                          const char *sql_type, struct ferry_error *err)
{
    char *lit = PQescapeLiteral(s->c, text, n);
    if (lit == NULL)
        return ferry__pg_error(err, FERRY_ESOURCE, s->c, NULL, WHAT ": %s: escaping a literal",
                               s->peer);
    int rc = ferry_buf_printf(sql, "%s::%s", lit, sql_type);
    PQfreemem(lit);
    return rc == FERRY_OK ? FERRY_OK : nomem(err);
}

/* The columns a position is made of, in order: the key (full) or cursor + key
 * (incremental); field indexes into the schema. */
static int order_fields(const struct ferry_resource_spec *spec, const struct ferry_schema *sc,
                        bool incremental, int *out, int max)
{
    int n = 0;
    if (incremental)
        for (int k = 0; k < spec->n_cursor && n < max; k++) {
            int f = ferry_schema_find(sc, spec->cursor[k]);
            if (f >= 0) out[n++] = f;
        }
    for (int k = 0; k < sc->n_key && n < max; k++) {
        bool dup = false;
        for (int j = 0; j < n; j++)
            if (out[j] == sc->key[k]) dup = true;
        if (!dup) out[n++] = sc->key[k];
    }
    return n;
}

#define MAX_ORDER 32

/* Runs a query expected to return at most one row; *res is kept for the caller. */
static int query_one(struct src *s, const char *sql, PGresult **res, const char *table,
                     struct ferry_error *err)
{
    *res = PQexec(s->c, sql);
    if (PQresultStatus(*res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, *res, WHAT ": %s: table %s", s->peer,
                                 table);
        PQclear(*res);
        *res = NULL;
        return rc;
    }
    return FERRY_OK;
}

static bool is_int_oid(uint32_t oid)
{
    return oid == FERRY_PG_OID_INT2 || oid == FERRY_PG_OID_INT4 || oid == FERRY_PG_OID_INT8;
}

static int plan_full(struct src *s, const struct ferry_schema *sc, const struct rel *r,
                     json_t *plan, struct ferry_error *err)
{
    json_t *shards = json_array();
    if (shards == NULL || json_object_set_new(plan, "shards", shards) != 0) return nomem(err);
    if (sc->n_key == 0) {
        json_object_set_new(plan, "keyset", json_string("none"));
        json_array_append_new(shards, json_object());
        return FERRY_OK;
    }
    const struct ferry_field *kf = &sc->fields[sc->key[0]];
    int kc = col_index(r, kf->name);
    if (sc->n_key != 1 || kc < 0 || !is_int_oid(r->cols[kc].oid)) {
        json_object_set_new(plan, "keyset", json_string("tuple"));
        json_array_append_new(shards, json_object());
        return FERRY_OK;
    }
    /* min and max each from the key's index; the row count from the planner's estimate
     * of an analyzed table (it only sizes the shards), else count(*), a whole scan that
     * would cost the server as much as a good part of the copy. */
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    char *lit = PQescapeLiteral(s->c, r->from, strlen(r->from));
    int rc = lit != NULL ? FERRY_OK : nomem(err);
    for (int m = 0; m < 2 && rc == FERRY_OK; m++) {
        rc = ferry_buf_printf(&sql, "%s(SELECT pg_catalog.%s(", m == 0 ? "SELECT " : ", ",
                              m == 0 ? "min" : "max");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, kf->name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, ") FROM %s)::pg_catalog.int8", r->from);
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&sql,
                              ", (SELECT CASE WHEN c.relkind IN ('r', 'm') AND c.reltuples > 0 "
                              "THEN c.reltuples::pg_catalog.int8 END FROM pg_catalog.pg_class c "
                              "WHERE c.oid = %s::pg_catalog.regclass)",
                              lit);
    PQfreemem(lit);
    PGresult *res = NULL;
    if (rc == FERRY_OK) rc = query_one(s, sql.data, &res, r->from, err);
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&sql);
        return rc;
    }
    json_object_set_new(plan, "keyset", json_string("range"));
    /* The first and the last shard are open-ended ("first", "last"): what the run's snapshot
     * holds below the smallest or above the largest key seen now (rows inserted between plan
     * and snapshot) is read too, so that every table of the attempt shows one moment. */
    if (PQgetisnull(res, 0, 0)) { /* empty table now: one shard, open at both ends */
        ferry_buf_release(&sql);
        json_object_set_new(plan, "rows_estimate", json_integer(0));
        json_array_append_new(shards, json_pack("{s:n,s:n,s:b,s:b}", "lo", "hi", "first", 1,
                                                "last", 1));
        PQclear(res);
        return FERRY_OK;
    }
    int64_t lo = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    int64_t hi = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    bool estimated = !PQgetisnull(res, 0, 2);
    int64_t count = estimated ? strtoll(PQgetvalue(res, 0, 2), NULL, 10) : 0;
    PQclear(res);
    if (!estimated) {
        ferry_buf_reset(&sql);
        rc = ferry_buf_printf(&sql, "SELECT pg_catalog.count(*) FROM %s", r->from);
        if (rc == FERRY_OK) rc = query_one(s, sql.data, &res, r->from, err);
        else rc = nomem(err);
        if (rc == FERRY_OK) count = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
    }
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "rows_estimate", json_integer(count < 0 ? 0 : count));
    i128 span = (i128)hi - lo + 1;
    int64_t n = (count + s->shard_rows - 1) / s->shard_rows;
    if (n < 1) n = 1;
    if (n > 100000) n = 100000; /* a plan stays a few MiB at most */
    if ((i128)n > span) n = (int64_t)span;
    for (int64_t i = 0; i < n; i++) {
        int64_t a = (int64_t)(lo + span * i / n);
        int64_t b = (int64_t)(lo + span * (i + 1) / n - 1);
        json_t *sh = json_pack("{s:I,s:I}", "lo", (json_int_t)a, "hi", (json_int_t)b);
        if (sh != NULL && i == 0) json_object_set_new(sh, "first", json_true());
        if (sh != NULL && i == n - 1) json_object_set_new(sh, "last", json_true());
        if (json_array_append_new(shards, sh) != 0) return nomem(err);
    }
    return FERRY_OK;
}

/* ---- unordered full reads (pg_source.h) ---------------------------------------------- */

int ferry__pg_page_shards(int64_t pages, int64_t est_rows, int64_t shard_rows,
                          int64_t parallelism)
{
    if (parallelism <= 1 || pages < 2) return 1;
    int64_t per = 1; /* shards per reader */
    if (est_rows > 0 && shard_rows > 0) {
        int64_t k = est_rows / shard_rows + (est_rows % shard_rows != 0);
        per = (k + parallelism - 1) / parallelism;
        if (per < 1) per = 1;
    }
    int64_t n = per > 100000 / parallelism ? 100000 : per * parallelism;
    if (n > pages) n = pages;
    return (int)(n < 1 ? 1 : n);
}

int64_t ferry__pg_page_bound(int64_t pages, int i, int n)
{
    if (i <= 0 || n <= 1) return 0;
    return (int64_t)((i128)pages * i / n);
}

int ferry__pg_page_range_sql(struct ferry_buf *sql, const char *where, int64_t lo, int64_t hi)
{
    /* '(p,0)' sorts before every tuple of page p (line pointers start at 1). */
    int rc = FERRY_OK;
    if (lo > 0) {
        rc = ferry_buf_printf(sql, "%sctid >= '(%" PRId64 ",0)'::pg_catalog.tid", where, lo);
        where = " AND ";
    }
    if (rc == FERRY_OK && hi >= 0)
        rc = ferry_buf_printf(sql, "%sctid < '(%" PRId64 ",0)'::pg_catalog.tid", where, hi);
    return rc == FERRY_OK ? FERRY_OK : FERRY_ENOMEM;
}

/* A full read for a run that commits once at its end: no key order (file comment). */
static int plan_unordered(struct src *s, const struct ferry_schema *sc, const struct rel *r,
                          json_t *plan, struct ferry_error *err)
{
    json_object_set_new(plan, "ordered", json_false());
    json_object_set_new(plan, "commit_once", json_true());
    bool heap = r->relkind == 'r' || r->relkind == 'm';
    if (s->parallelism > 1 && !(heap && PQserverVersion(s->c) >= 140000)) {
        /* No TID Range Scan here: key ranges, read without ORDER BY. */
        return plan_full(s, sc, r, plan, err);
    }
    int64_t pages = 0, est = -1;
    if (s->parallelism > 1) {
        struct ferry_buf sql;
        ferry_buf_init(&sql, 0);
        char *lit = PQescapeLiteral(s->c, r->from, strlen(r->from));
        int rc = lit == NULL ? nomem(err)
                 : ferry_buf_printf(&sql,
                                    "SELECT pg_catalog.pg_relation_size(c.oid) / "
                                    "pg_catalog.current_setting('block_size')::pg_catalog.int8, "
                                    "c.reltuples::pg_catalog.int8 FROM pg_catalog.pg_class c "
                                    "WHERE c.oid = %s::pg_catalog.regclass",
                                    lit) == FERRY_OK
                     ? FERRY_OK
                     : nomem(err);
        PQfreemem(lit);
        PGresult *res = NULL;
        if (rc == FERRY_OK) rc = query_one(s, sql.data, &res, r->from, err);
        ferry_buf_release(&sql);
        if (rc != FERRY_OK) return rc;
        if (PQntuples(res) == 1) {
            pages = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            est = strtoll(PQgetvalue(res, 0, 1), NULL, 10); /* -1: never analyzed */
        }
        PQclear(res);
    }
    int n = ferry__pg_page_shards(pages, est, s->shard_rows, s->parallelism);
    json_t *shards = json_array();
    if (shards == NULL || json_object_set_new(plan, "shards", shards) != 0) return nomem(err);
    json_object_set_new(plan, "keyset", json_string("pages"));
    if (est >= 0) json_object_set_new(plan, "rows_estimate", json_integer(est));
    for (int i = 0; i < n; i++) {
        json_t *sh = json_pack("{s:I}", "page_lo", (json_int_t)ferry__pg_page_bound(pages, i, n));
        /* The last range is open-ended: pages added after the plan are read too. */
        if (sh != NULL && i + 1 < n)
            json_object_set_new(sh, "page_hi", json_integer(ferry__pg_page_bound(pages, i + 1, n)));
        if (sh == NULL || json_array_append_new(shards, sh) != 0) return nomem(err);
    }
    return FERRY_OK;
}

/* The key of a saved route position, decoded by the codec (NULL when it has none): n values,
 * one per cursor and key column. */
static int saved_key(const char *text, const char *from, int n, json_t **key,
                     struct ferry_error *err)
{
    *key = NULL;
    struct ferry_position p;
    int rc = ferry_position_decode(text, strlen(text), &p, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, WHAT ": table %s: the saved position", from);
    if (p.has_key && p.n_key != n)
        rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                             WHAT ": table %s: the saved position has %d values, the cursor "
                             "and key have %d (did the cursor or key change?)",
                             from, p.n_key, n);
    else if (p.has_key && (*key = ferry_position_key_json(&p)) == NULL)
        rc = nomem(err);
    ferry_position_clear(&p);
    return rc;
}

/* The saved route position's key as PostgreSQL text values (lookback applied to the first),
 * or a JSON null when there is none. */
static int plan_lower(struct src *s, const struct ferry_resource_spec *spec,
                      const struct ferry_schema *sc, const struct rel *r, const int *ord, int n,
                      const char *route_checkpoint, json_t **lo, struct ferry_error *err)
{
    *lo = json_null();
    if (route_checkpoint == NULL) return FERRY_OK;
    json_t *key = NULL;
    int rc = saved_key(route_checkpoint, r->from, n, &key, err);
    if (rc != FERRY_OK || key == NULL) return rc;
    json_t *arr = json_array();
    struct ferry_buf t;
    ferry_buf_init(&t, 0);
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[ord[i]];
        if (position_text(json_array_get(key, (size_t)i), f->type, &t) != FERRY_OK) {
            rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                                 WHAT ": table %s: the saved position's value for \"%s\" does "
                                 "not fit its type %s",
                                 r->from, f->name, ferry_type_name(f->type));
            break;
        }
        json_array_append_new(arr, json_stringn(t.data, t.len));
    }
    if (rc == FERRY_OK && spec->lookback_ms > 0) {
        const struct ferry_field *f = &sc->fields[ord[0]];
        int c = col_index(r, f->name);
        if (f->type != FERRY_TYPE_TIMESTAMP_US && f->type != FERRY_TYPE_TIMESTAMPTZ_US &&
            f->type != FERRY_TYPE_DATE32) {
            rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 WHAT ": table %s: lookback needs a date or timestamp first "
                                 "cursor column; \"%s\" is %s",
                                 r->from, f->name, ferry_type_name(f->type));
        } else {
            struct ferry_buf sql;
            ferry_buf_init(&sql, 0);
            const char *v = json_string_value(json_array_get(arr, 0));
            rc = ferry_buf_printf(&sql, "SELECT (");
            if (rc == FERRY_OK)
                rc = append_literal(s, &sql, v, strlen(v), r->cols[c].sql_type, err);
            if (rc == FERRY_OK)
                rc = ferry_buf_printf(&sql,
                                      " - pg_catalog.make_interval(secs => %" PRId64
                                      ".%03d))::%s::pg_catalog.text",
                                      spec->lookback_ms / 1000, (int)(spec->lookback_ms % 1000),
                                      r->cols[c].sql_type);
            PGresult *res = NULL;
            if (rc == FERRY_OK) rc = query_one(s, sql.data, &res, r->from, err);
            if (rc == FERRY_OK) json_array_set_new(arr, 0, json_string(PQgetvalue(res, 0, 0)));
            PQclear(res);
            ferry_buf_release(&sql);
        }
    }
    ferry_buf_release(&t);
    json_decref(key);
    if (rc != FERRY_OK) {
        json_decref(arr);
        return rc;
    }
    *lo = arr;
    return FERRY_OK;
}

static int plan_incremental(struct src *s, const struct ferry_resource_spec *spec,
                            const struct ferry_schema *sc, const struct rel *r,
                            const char *route_checkpoint, json_t *plan, struct ferry_error *err)
{
    if (spec->n_cursor == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               WHAT ": table %s: incremental reads need `cursor:`", r->from);
    if (sc->n_key == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               WHAT ": table %s has no primary key: incremental reads need one "
                               "as the cursor's tie-breaker (declare `key:`)",
                               r->from);
    int ord[MAX_ORDER];
    int n = order_fields(spec, sc, true, ord, MAX_ORDER);
    json_t *names = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(names, json_string(sc->fields[ord[i]].name));
    json_object_set_new(plan, "order", names);

    /* The newest (cursor..., key...) now: the frozen upper bound. */
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int rc = ferry_buf_printf(&sql, "SELECT ");
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, ", ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, sc->fields[ord[i]].name, err);
        /* Aliased: an output column named like a table column would win in ORDER BY and
         * sort as text. */
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, "::pg_catalog.text AS _ferry_%d", i);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " FROM %s WHERE ", r->from);
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, " AND ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, sc->fields[ord[i]].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " IS NOT NULL");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " ORDER BY ");
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, ", ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, sc->fields[ord[i]].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " DESC");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " LIMIT 1");
    PGresult *res = NULL;
    if (rc == FERRY_OK) rc = query_one(s, sql.data, &res, r->from, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    json_t *hi = json_null();
    if (PQntuples(res) == 1) {
        hi = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(hi, json_string(PQgetvalue(res, 0, i)));
    }
    PQclear(res);
    json_object_set_new(plan, "hi", hi);
    json_t *lo = NULL;
    rc = plan_lower(s, spec, sc, r, ord, n, route_checkpoint, &lo, err);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "lo", lo);
    json_t *shards = json_array();
    json_array_append_new(shards, json_object());
    json_object_set_new(plan, "shards", shards);
    return FERRY_OK;
}

/* cdc: shard 0 streams the slot; on a first run the copy shards of a full read follow,
 * read under the slot's exported snapshot (pg_cdc.h). */
static int plan_cdc(struct src *s, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const struct rel *r,
                    const char *route_checkpoint, json_t *plan, struct ferry_error *err)
{
    struct ferry_pg_cdc_target t = {.schema_name = r->schema_name, .table = r->table,
                                    .from = r->from, .sc = sc};
    bool copy = false;
    PGconn *keep = NULL;
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc == FERRY_OK && o.own_slot)
        rc = ferry__pg_cdc_plan(s->c, s->url, &s->opts, s->peer, spec, &t, route_checkpoint, plan,
                                &copy, &keep, err);
    else if (rc == FERRY_OK)
        rc = ferry__pg_slot_plan(&s->slot, s->c, s->url, &s->opts, s->peer, spec, &t,
                                 route_checkpoint, plan, &copy, err);
    if (rc != FERRY_OK) return rc;
    if (keep != NULL) {
        PGconn **k = ferry_realloc(s->keep, (size_t)(s->n_keep + 1) * sizeof *k);
        if (k == NULL) {
            PQfinish(keep);
            return nomem(err);
        }
        s->keep = k;
        s->keep[s->n_keep++] = keep;
    }
    if (copy) {
        rc = plan_full(s, sc, r, plan, err);
    } else {
        json_object_set_new(plan, "keyset", json_string("none"));
        rc = json_object_set_new(plan, "shards", json_array()) == 0 ? FERRY_OK : nomem(err);
    }
    json_t *shards = json_object_get(plan, "shards");
    if (rc == FERRY_OK && json_array_insert_new(shards, 0, json_pack("{s:b}", "stream", 1)) != 0)
        rc = nomem(err);
    return rc;
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    struct src *s = ctx;
    *plan_json = NULL;
    struct rel r;
    int rc = seen_take(s, spec->table, &r) ? FERRY_OK : resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) return rc;
    json_t *plan = json_object();
    if (plan == NULL) {
        rel_free(&r);
        return nomem(err);
    }
    bool incremental = spec->mode == FERRY_READ_INCREMENTAL;
    json_object_set_new(plan, "mode", json_string(incremental ? "incremental" : "full"));
    json_object_set_new(plan, "snapshot", json_null());
    json_object_set_new(plan, "parallelism", json_integer(s->parallelism));
    if (spec->mode == FERRY_READ_CDC)
        rc = plan_cdc(s, spec, sc, &r, route_checkpoint, plan, err);
    else if (incremental)
        rc = plan_incremental(s, spec, sc, &r, route_checkpoint, plan, err);
    else if (ferry_read_context_of(spec)->positions_at_end)
        rc = plan_unordered(s, sc, &r, plan, err);
    else
        rc = plan_full(s, sc, &r, plan, err);
    if (rc == FERRY_OK) {
        *plan_json = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
        if (*plan_json == NULL) rc = nomem(err);
    }
    json_decref(plan);
    rel_free(&r);
    /* jansson allocates with malloc; the caller frees with ferry_free: hand over a copy. */
    if (rc == FERRY_OK) {
        char *copy = ferry_strdup(*plan_json);
        free(*plan_json);
        *plan_json = copy;
        if (copy == NULL) rc = nomem(err);
    }
    return rc;
}

/* ---- snapshot ------------------------------------------------------------------------ */

/* Exports a snapshot from a connection of its own, left idle in the exporting
 * transaction: the id can be imported for as long as that transaction lives. */
static int src_snapshot(void *ctx, char **snapshot_id, struct ferry_error *err)
{
    struct src *s = ctx;
    *snapshot_id = NULL;
    int rc = FERRY_OK;
    if (s->snap == NULL) {
        rc = ferry__pg_connect(s->url, &s->opts, WHAT, &s->snap, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "exporting a snapshot");
        /* Idle in transaction by design until close: idle_timeout must not end it. */
        rc = ferry__pg_exec(s->snap, "SET idle_in_transaction_session_timeout = 0",
                            FERRY_ESOURCE, WHAT ": exporting a snapshot", err);
    } else if (PQtransactionStatus(s->snap) != PQTRANS_IDLE) {
        rc = ferry__pg_exec(s->snap, "ROLLBACK", FERRY_ESOURCE, WHAT ": exporting a snapshot",
                            err);
    }
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(s->snap, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                            FERRY_ESOURCE, WHAT ": exporting a snapshot", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->peer);
    PGresult *res = PQexec(s->snap, "SELECT pg_catalog.pg_export_snapshot()");
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        rc = ferry__pg_error(err, FERRY_ESOURCE, s->snap, res, WHAT ": %s: exporting a snapshot",
                             s->peer);
        PQclear(res);
        PGresult *rb = PQexec(s->snap, "ROLLBACK");
        PQclear(rb);
        return rc;
    }
    *snapshot_id = ferry_strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return *snapshot_id != NULL ? FERRY_OK : nomem(err);
}

/* Makes sure the reading connection is in a transaction that imported s->snapshot_id:
 * begins one when there is none (first shard, or after an error rolled it back). */
static int begin_snapshot(struct src *s, struct ferry_error *err)
{
    PGTransactionStatusType ts = PQtransactionStatus(s->c);
    if (ts == PQTRANS_INTRANS) return FERRY_OK;
    if (ts != PQTRANS_IDLE) {
        PGresult *rb = PQexec(s->c, "ROLLBACK");
        PQclear(rb);
    }
    int rc = ferry__pg_exec(s->c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                            FERRY_ESOURCE, WHAT ": begin", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->peer);
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    char *lit = PQescapeLiteral(s->c, s->snapshot_id, strlen(s->snapshot_id));
    if (lit == NULL) {
        rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, NULL, WHAT ": %s: escaping a literal",
                             s->peer);
    } else {
        rc = ferry_buf_printf(&sql, "SET TRANSACTION SNAPSHOT %s", lit) == FERRY_OK
                 ? FERRY_OK
                 : nomem(err);
        PQfreemem(lit);
    }
    char what[128];
    snprintf(what, sizeof what, WHAT ": importing snapshot %.64s", s->snapshot_id);
    if (rc == FERRY_OK) rc = ferry__pg_exec(s->c, sql.data, FERRY_ESOURCE, what, err);
    /* Idle between shards by design (while the pipeline drains): not an abandoned session. */
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(s->c, "SET LOCAL idle_in_transaction_session_timeout = 0",
                            FERRY_ESOURCE, what, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) {
        PGresult *rb = PQexec(s->c, "ROLLBACK");
        PQclear(rb);
        return ferry_error_prefix(err, "%s", s->peer);
    }
    return FERRY_OK;
}

static int src_use_snapshot(void *ctx, const char *snapshot_id, struct ferry_error *err)
{
    struct src *s = ctx;
    char *id = ferry_strdup(snapshot_id);
    if (id == NULL) return nomem(err);
    ferry_free(s->snapshot_id);
    s->snapshot_id = id;
    /* A transaction of an earlier snapshot ends; the new one is imported now, so that a
     * snapshot that cannot be imported fails before any row moves. */
    if (PQtransactionStatus(s->c) != PQTRANS_IDLE) {
        PGresult *rb = PQexec(s->c, "ROLLBACK");
        PQclear(rb);
    }
    return begin_snapshot(s, err);
}

/* ---- extract ------------------------------------------------------------------------- */

struct reader {
    struct src *s;
    struct rel r;
    const struct ferry_schema *sc;
    struct ferry_pg_copy_col *cols; /* per schema field */
    int *rel_col;                   /* per schema field: index into r.cols */
    int ord[MAX_ORDER];
    int n_ord;
    bool ordered; /* false: a commit_once plan, read in no particular order, no positions */
    struct ferry_buf sql;
    struct ferry_buf tmp;
    char *piece; /* COPY data, PIECE bytes (run_copy) */
    char what[400];
    int n_real; /* fields read from the table; a cdc change log's own columns follow */
    bool change_log; /* those are a change log's (else soft_delete's mark) */
    bool specials; /* the run's read context allows special values (connector.h) */
};

static void reader_free(struct reader *rd)
{
    ferry_free(rd->cols);
    ferry_free(rd->rel_col);
    ferry_free(rd->piece);
    ferry_buf_release(&rd->sql);
    ferry_buf_release(&rd->tmp);
    rel_free(&rd->r);
}

/* Binds schema fields to the relation's columns and chooses each one's wire form. */
static int bind_columns(struct reader *rd, struct ferry_error *err)
{
    const struct ferry_schema *sc = rd->sc;
    rd->cols = ferry_calloc((size_t)sc->n_fields, sizeof *rd->cols);
    rd->rel_col = ferry_calloc((size_t)sc->n_fields, sizeof *rd->rel_col);
    if (rd->cols == NULL || rd->rel_col == NULL) return nomem(err);
    for (int f = 0; f < sc->n_fields; f++) {
        const struct ferry_field *fd = &sc->fields[f];
        if (f >= rd->n_real) {
            /* A change log's operation, LSN, commit time and sequence: constants of the
             * snapshot. */
            rd->rel_col[f] = -1;
            struct ferry_pg_copy_col *pc = &rd->cols[f];
            pc->name = fd->name;
            pc->type = fd->type;
            pc->wire = fd->type == FERRY_TYPE_UTF8    ? FERRY_PG_W_TEXT
                       : fd->type == FERRY_TYPE_INT64 ? FERRY_PG_W_INT8
                                                      : FERRY_PG_W_TIMESTAMPTZ;
            continue;
        }
        int c = col_index(&rd->r, fd->name);
        if (c < 0)
            return ferry_error_set(err, FERRY_ENOTFOUND, "postgres",
                                   WHAT ": table %s has no column \"%s\" any more", rd->r.from,
                                   fd->name);
        rd->rel_col[f] = c;
        struct ferry_pg_copy_col *pc = &rd->cols[f];
        pc->name = fd->name;
        pc->type = fd->type;
        pc->precision = fd->precision;
        pc->scale = fd->scale;
        enum ferry_type t;
        int p, scale;
        ferry__pg_map_type(rd->r.cols[c].oid, rd->r.cols[c].typmod, &t, &p, &scale);
        if (t != fd->type || (t == FERRY_TYPE_DECIMAL128 && (p != fd->precision ||
                                                             scale != fd->scale)))
            return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                                   WHAT ": table %s: column \"%s\" changed type since the plan "
                                   "(now %s, planned %s)",
                                   rd->r.from, fd->name, ferry_type_name(t),
                                   ferry_type_name(fd->type));
        if (!ferry__pg_wire_of(rd->r.cols[c].oid, &pc->wire)) pc->wire = FERRY_PG_W_TEXT;
    }
    return FERRY_OK;
}

/* `(a, b) op (lit, lit)` over the order columns from `vals` (PostgreSQL text values). */
static int tuple_cond(struct reader *rd, const char *op, json_t *vals, bool from_position,
                      struct ferry_error *err)
{
    struct ferry_buf *sql = &rd->sql;
    int rc = ferry_buf_printf(sql, "(");
    for (int i = 0; i < rd->n_ord && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(sql, ", ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(sql, rd->sc->fields[rd->ord[i]].name, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(sql, ") %s (", op);
    for (int i = 0; i < rd->n_ord && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &rd->sc->fields[rd->ord[i]];
        json_t *v = json_array_get(vals, (size_t)i);
        if (i > 0) rc = ferry_buf_printf(sql, ", ");
        if (rc != FERRY_OK) break;
        if (from_position) {
            if (position_text(v, f->type, &rd->tmp) != FERRY_OK)
                return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                       WHAT ": table %s: the resume position's value for \"%s\" "
                                       "does not fit its type %s",
                                       rd->r.from, f->name, ferry_type_name(f->type));
        } else {
            if (!json_is_string(v))
                return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                       WHAT ": table %s: malformed bound in the frozen plan",
                                       rd->r.from);
            ferry_buf_reset(&rd->tmp);
            rc = ferry_buf_append(&rd->tmp, json_string_value(v), json_string_length(v));
            if (rc != FERRY_OK) return nomem(err);
        }
        rc = append_literal(rd->s, sql, rd->tmp.data, rd->tmp.len,
                            rd->r.cols[rd->rel_col[rd->ord[i]]].sql_type, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(sql, ")");
    return rc;
}

/* A whole table whose columns all arrive natively: `COPY table (cols) TO`, which scans
 * the heap without the executor (what a plain COPY pipe costs the server). */
static bool whole_table_copy(const struct reader *rd, json_t *sh)
{
    if (rd->r.relkind != 'r' || json_integer_value(json_object_get(sh, "page_lo")) > 0 ||
        json_object_get(sh, "page_hi") != NULL)
        return false;
    enum ferry_pg_wire w;
    for (int f = 0; f < rd->sc->n_fields; f++)
        if (rd->rel_col[f] < 0 || !ferry__pg_wire_of(rd->r.cols[rd->rel_col[f]].oid, &w))
            return false;
    return true;
}

static int build_sql(struct reader *rd, json_t *plan, json_t *sh, json_t *resume_key,
                     bool *empty, struct ferry_error *err)
{
    struct ferry_buf *sql = &rd->sql;
    *empty = false;
    const char *keyset = json_string_value(json_object_get(plan, "keyset"));
    bool pages = !rd->ordered && keyset != NULL && !strcmp(keyset, "pages");
    if (pages && whole_table_copy(rd, sh)) {
        int rc = ferry_buf_printf(sql, "COPY %s (", rd->r.from);
        for (int f = 0; f < rd->sc->n_fields && rc == FERRY_OK; f++) {
            if (f > 0) rc = ferry_buf_printf(sql, ", ");
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(sql, rd->sc->fields[f].name, err);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(sql, ") TO STDOUT (FORMAT binary)");
        return rc;
    }
    int rc = ferry_buf_printf(sql, "COPY (SELECT ");
    for (int f = 0; f < rd->sc->n_fields && rc == FERRY_OK; f++) {
        if (f > 0) rc = ferry_buf_printf(sql, ", ");
        if (rc != FERRY_OK) break;
        if (rd->rel_col[f] < 0) {
            /* Change-log columns of a snapshot row: an insert just before the slot's start
             * (the stream's first commit may begin at the start: pg_cdc.h), sequence 0 */
            const char *start = json_string_value(json_object_get(plan, "start"));
            uint64_t lsn = 0;
            if (start != NULL) ferry_pg_lsn_parse(start, &lsn);
            if (lsn > 0) lsn--;
            switch (ferry_cdc_snapshot_value(rd->change_log, &rd->sc->fields[f])) {
            case FERRY_CDC_SNAP_INSERT:
                rc = ferry_buf_printf(sql, "'insert'::pg_catalog.text");
                break;
            case FERRY_CDC_SNAP_LSN:
                rc = ferry_buf_printf(sql, "%" PRIu64 "::pg_catalog.int8", lsn);
                break;
            case FERRY_CDC_SNAP_ZERO:
                rc = ferry_buf_printf(sql, "0::pg_catalog.int8");
                break;
            default:
                rc = ferry_buf_printf(sql, "NULL::pg_catalog.timestamptz");
                break;
            }
            continue;
        }
        /* Types without a native decoder arrive as their text output: the type's output
         * function (format's %s), not a cast to text, which differs for some (inet '::1'
         * casts to '::1/128'); num_nulls keeps NULL apart from a composite of NULLs. */
        enum ferry_pg_wire w;
        bool as_text = !ferry__pg_wire_of(rd->r.cols[rd->rel_col[f]].oid, &w);
        if (as_text) rc = ferry_buf_printf(sql, "CASE WHEN pg_catalog.num_nulls(");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(sql, rd->sc->fields[f].name, err);
        if (rc == FERRY_OK && as_text)
            rc = ferry_buf_printf(sql, ") = 0 THEN pg_catalog.format('%%s', ");
        if (rc == FERRY_OK && as_text) rc = ferry__pg_quote_ident(sql, rd->sc->fields[f].name, err);
        if (rc == FERRY_OK && as_text)
            rc = ferry_buf_printf(sql, ") END AS _ferry_%d", f); /* ORDER BY stays on the column */
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(sql, " FROM %s", rd->r.from);
    if (rc != FERRY_OK) return rc;
    const char *mode = json_string_value(json_object_get(plan, "mode"));
    bool where = false;
#define AND() (rc = ferry_buf_printf(sql, where ? " AND " : " WHERE "), where = true, rc)
    if (mode && !strcmp(mode, "incremental")) {
        json_t *lo = json_object_get(plan, "lo"), *hi = json_object_get(plan, "hi");
        if (!json_is_array(hi)) {
            *empty = true;
            return FERRY_OK;
        }
        if (json_array_size(hi) != (size_t)rd->n_ord)
            return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                   WHAT ": table %s: the frozen plan's bounds do not match the "
                                   "cursor and key",
                                   rd->r.from);
        if (AND() == FERRY_OK) rc = tuple_cond(rd, "<=", hi, false, err);
        if (rc == FERRY_OK && json_is_array(lo) && resume_key == NULL && AND() == FERRY_OK)
            rc = tuple_cond(rd, ">", lo, false, err);
        if (rc == FERRY_OK && resume_key != NULL && AND() == FERRY_OK)
            rc = tuple_cond(rd, ">", resume_key, true, err);
    } else if (keyset && !strcmp(keyset, "range")) {
        json_t *lo = json_object_get(sh, "lo"), *hi = json_object_get(sh, "hi");
        bool first = json_is_true(json_object_get(sh, "first"));
        bool last = json_is_true(json_object_get(sh, "last"));
        if ((!json_is_integer(lo) || !json_is_integer(hi)) && !(first && last)) {
            *empty = true; /* the table was empty at plan time (a plan of an older ferry) */
            return FERRY_OK;
        }
        const char *k = rd->sc->fields[rd->ord[0]].name;
        json_int_t from = json_integer_value(lo);
        bool after = false;
        if (resume_key != NULL) {
            json_t *v = json_array_get(resume_key, 0);
            if (!json_is_integer(v))
                return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                       WHAT ": table %s: the resume position's key is not an "
                                       "integer",
                                       rd->r.from);
            from = json_integer_value(v);
            after = true;
        }
        if ((after || !first) && AND() == FERRY_OK) rc = ferry__pg_quote_ident(sql, k, err);
        if (rc == FERRY_OK && (after || !first))
            rc = ferry_buf_printf(sql, " %s %" PRId64, after ? ">" : ">=", (int64_t)from);
        if (rc == FERRY_OK && !last && AND() == FERRY_OK) rc = ferry__pg_quote_ident(sql, k, err);
        if (rc == FERRY_OK && !last)
            rc = ferry_buf_printf(sql, " <= %" PRId64, (int64_t)json_integer_value(hi));
    } else if (keyset && !strcmp(keyset, "tuple")) {
        if (resume_key != NULL && AND() == FERRY_OK)
            rc = tuple_cond(rd, ">", resume_key, true, err);
    } else if (pages) {
        json_t *hi = json_object_get(sh, "page_hi");
        rc = ferry__pg_page_range_sql(sql, " WHERE ",
                                      json_integer_value(json_object_get(sh, "page_lo")),
                                      json_is_integer(hi) ? json_integer_value(hi) : -1);
    }
#undef AND
    if (rc == FERRY_OK && rd->ordered && rd->n_ord > 0) {
        rc = ferry_buf_printf(sql, " ORDER BY ");
        for (int i = 0; i < rd->n_ord && rc == FERRY_OK; i++) {
            if (i > 0) rc = ferry_buf_printf(sql, ", ");
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(sql, rd->sc->fields[rd->ord[i]].name, err);
        }
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(sql, ") TO STDOUT (FORMAT binary)");
    return rc;
}

static int get_copy_piece(struct src *s, char *piece, int cap);

/* After a failed or abandoned COPY: cancel it, drain what is left, end the transaction. */
static void abandon(struct src *s, bool copying)
{
    if (copying) {
        char buf[8192];
        PQcancel(s->cancel, buf, 256);
        /* Drained through the same call as the reads: a message half returned by
         * PQgetlineAsync is finished by it, so the next COPY starts clean. */
        while (get_copy_piece(s, buf, (int)sizeof buf) > 0)
            ;
    }
    PGresult *res;
    while ((res = PQgetResult(s->c)) != NULL)
        PQclear(res);
    res = PQexec(s->c, "ROLLBACK");
    PQclear(res);
}

/* The next piece of the COPY stream, up to `cap` bytes: as many whole or partial CopyData
 * messages as libpq holds, copied into `piece` by PQgetlineAsync (binary-safe: it returns
 * byte counts and continues a message that did not fit on the next call), so no row gets
 * an allocation of its own as with PQgetCopyData. Waits in its own poll(), at most
 * io_timeout without a byte from the server (a server or proxy that stops sending while its
 * kernel still acknowledges would otherwise block the reader forever). Returns the bytes
 * stored (> 0), -1 at the end of the COPY (or an error PQgetResult then reports), -2 when
 * the connection failed, -3 past the deadline. */
static int get_copy_piece(struct src *s, char *piece, int cap)
{
    int used = 0;
    for (;;) {
        int n = PQgetlineAsync(s->c, piece + used, cap - used);
        if (n > 0) {
            used += n;
            if (used == cap) return used;
            continue;
        }
        if (used > 0) return used; /* the end (or a wait) comes with the next call */
        if (n < 0) return -1;
        struct pollfd pfd = {.fd = PQsocket(s->c), .events = POLLIN};
        int64_t ms = s->opts.io_timeout_ms;
        int pr = poll(&pfd, 1, ms <= 0 ? -1 : ms > 86400000 ? 86400000 : (int)ms);
        if (pr == 0) return -3;
        if (pr < 0 && errno != EINTR) return -2;
        if (pr > 0 && PQconsumeInput(s->c) == 0) return -2;
    }
}

#define PIECE (64 * 1024)

static int run_copy(struct reader *rd, struct ferry_row_writer *rw, struct ferry_error *err)
{
    struct src *s = rd->s;
    /* With a shared snapshot the transaction is already open (src_extract) and stays so. */
    bool shared = s->snapshot_id != NULL;
    int rc = shared ? begin_snapshot(s, err)
                    : ferry__pg_exec(s->c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                                     FERRY_ESOURCE, WHAT ": begin", err);
    if (rc != FERRY_OK) return shared ? rc : ferry_error_prefix(err, "%s", s->peer);
    struct ferry_pg_guard g;
    ferry__pg_guard_begin(&g, s->c, s->opts.io_timeout_ms);
    PGresult *res = PQexec(s->c, rd->sql.data);
    bool stalled = ferry__pg_guard_end(&g);
    if (PQresultStatus(res) != PGRES_COPY_OUT) {
        rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, res, "%s", rd->what);
        if (stalled)
            rc = ferry_error_set(err, FERRY_ETIMEOUT, "libpq",
                                 "%s: %s made no progress for %lld ms (io_timeout); the "
                                 "connection was closed",
                                 rd->what, s->peer, (long long)s->opts.io_timeout_ms);
        PQclear(res);
        abandon(s, false);
        return rc;
    }
    PQclear(res);
    struct ferry_pg_copy d;
    ferry__pg_copy_init(&d, rd->cols, rd->sc->n_fields, rd->what);
    d.specials = rd->specials;
    if (rd->piece == NULL && (rd->piece = ferry_malloc(PIECE)) == NULL) {
        ferry__pg_copy_release(&d);
        abandon(s, true);
        return nomem(err);
    }
    int n;
    while ((n = get_copy_piece(s, rd->piece, PIECE)) > 0) {
        rc = ferry__pg_copy_feed(&d, (const uint8_t *)rd->piece, (size_t)n, rw, err);
        if (rc != FERRY_OK) break;
    }
    if (rc != FERRY_OK) {
        ferry__pg_copy_release(&d);
        abandon(s, true);
        return rc;
    }
    if (n == -3) {
        /* The connection is given up: the cleanup below must not wait on it either. */
        shutdown(PQsocket(s->c), SHUT_RDWR);
        PQconsumeInput(s->c); /* reads the EOF: libpq marks the connection bad */
        rc = ferry_error_set(err, FERRY_ETIMEOUT, "libpq",
                             "%s: %s sent nothing for %lld ms (io_timeout)", rd->what, s->peer,
                             (long long)s->opts.io_timeout_ms);
    } else if (n == -2) {
        rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, NULL, "%s", rd->what);
    } else {
        res = PQgetResult(s->c);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            if (atomic_load(&s->canceled) && state && !strcmp(state, "57014"))
                rc = ferry_error_set(err, FERRY_ECANCELED, "postgres", "%s: read canceled",
                                     rd->what);
            else
                rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, res, "%s", rd->what);
        }
        PQclear(res);
        if (rc == FERRY_OK) rc = ferry__pg_copy_finish(&d, err);
    }
    ferry__pg_copy_release(&d);
    if (rc != FERRY_OK) {
        abandon(s, false);
        return rc;
    }
    while ((res = PQgetResult(s->c)) != NULL)
        PQclear(res);
    if (shared) return FERRY_OK;
    return ferry__pg_exec(s->c, "COMMIT", FERRY_ESOURCE, rd->what, err);
}

/* A stream instance's (src_open_stream) brief connections: at most this many of a
 * process's streams hold one at a time, so that any number of streams start at once on a
 * server with few connections. A brief connection is kept, idle, for the next stream of the
 * same source (url and options) while any stream instance of the process is open, and
 * closed with the last one: a --follow epoch starts every table's stream together, and
 * connecting anew for each cost a SCRAM exchange per table per epoch (29 % of the client's
 * CPU, and the server's as much, on a 50-table pipeline with 1 s epochs). */
#define BRIEF_CONNECTIONS 4
static pthread_mutex_t brief_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t brief_free = PTHREAD_COND_INITIALIZER;
static int brief_held;
static int streams_open; /* stream instances alive */
static struct brief_idle {
    PGconn *c;
    char *url;
    struct ferry_pg_conn_opts opts;
} brief_idle[BRIEF_CONNECTIONS];
static int n_brief_idle;

/* Under brief_lock: an idle connection to the same source, taken out of the list, or NULL. */
static PGconn *brief_take(const char *url, const struct ferry_pg_conn_opts *opts)
{
    for (int i = 0; i < n_brief_idle; i++) {
        struct brief_idle *b = &brief_idle[i];
        if (strcmp(b->url, url) != 0 || memcmp(&b->opts, opts, sizeof *opts) != 0) continue;
        PGconn *c = b->c;
        ferry_secret_free(b->url);
        brief_idle[i] = brief_idle[--n_brief_idle];
        return c;
    }
    return NULL;
}

/* Under brief_lock: c kept for the next stream if it is healthy, outside a transaction and
 * the list has room; else returned to be closed (outside the lock). */
static PGconn *brief_keep(PGconn *c, const char *url, const struct ferry_pg_conn_opts *opts)
{
    if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE ||
        n_brief_idle == BRIEF_CONNECTIONS || streams_open == 0)
        return c;
    char *copy = ferry_strdup(url);
    if (copy == NULL) return c;
    brief_idle[n_brief_idle++] = (struct brief_idle){c, copy, *opts};
    return NULL;
}

static void brief_stream_opened(void)
{
    pthread_mutex_lock(&brief_lock);
    streams_open++;
    pthread_mutex_unlock(&brief_lock);
}

/* The last stream instance closes every idle brief connection. */
static void brief_stream_closed(void)
{
    PGconn *close[BRIEF_CONNECTIONS];
    int n = 0;
    pthread_mutex_lock(&brief_lock);
    if (--streams_open == 0) {
        for (int i = 0; i < n_brief_idle; i++) {
            close[n++] = brief_idle[i].c;
            ferry_secret_free(brief_idle[i].url);
        }
        n_brief_idle = 0;
    }
    pthread_mutex_unlock(&brief_lock);
    for (int i = 0; i < n; i++) PQfinish(close[i]);
}

/* The table of a stream shard. A stream's own instance (lazy) takes a brief connection (a
 * kept one, else a new one) for the catalog and, on a run that copied the table, raises the
 * plan's end (ferry__pg_cdc_extend_end), then lets the connection go: the stream itself
 * needs only the slot's replication session (pg_demux.c). No cancel handle is made for that
 * connection (cancel may read s->cancel from any thread); connect_timeout and
 * statement_timeout bound it. A kept connection that fails is replaced by a new one once. */
static int stream_resolve(struct src *s, const char *table, json_t *plan, struct rel *r,
                          struct ferry_error *err)
{
    if (!s->lazy) return resolve(s, table, r, err);
    pthread_mutex_lock(&brief_lock);
    while (brief_held >= BRIEF_CONNECTIONS)
        pthread_cond_wait(&brief_free, &brief_lock);
    brief_held++;
    s->c = brief_take(s->url, &s->opts);
    pthread_mutex_unlock(&brief_lock);
    bool kept = s->c != NULL;
    int rc = kept ? FERRY_OK : ferry__pg_connect(s->url, &s->opts, WHAT, &s->c, err);
    if (rc == FERRY_OK) {
        ferry__pg_describe(s->c, s->peer, sizeof s->peer);
        rc = resolve(s, table, r, err);
        if (rc != FERRY_OK && kept && PQstatus(s->c) != CONNECTION_OK) {
            PQfinish(s->c);
            s->c = NULL;
            ferry_error_clear(err);
            rc = ferry__pg_connect(s->url, &s->opts, WHAT, &s->c, err);
            if (rc == FERRY_OK) rc = resolve(s, table, r, err);
        }
        if (rc == FERRY_OK && json_is_string(json_object_get(plan, "snapshot"))) {
            rc = ferry__pg_cdc_extend_end(s->url, &s->opts, s->peer, plan, err);
            if (rc != FERRY_OK) rel_free(r);
        }
    }
    pthread_mutex_lock(&brief_lock);
    PGconn *done = s->c ? brief_keep(s->c, s->url, &s->opts) : NULL;
    s->c = NULL;
    brief_held--;
    pthread_cond_signal(&brief_free);
    pthread_mutex_unlock(&brief_lock);
    if (done) PQfinish(done);
    return rc;
}

/* Shard 0 of a cdc plan: the replication stream (pg_cdc.c). */
static int extract_stream(struct src *s, const struct ferry_resource_spec *spec,
                          const struct ferry_schema *sc, json_t *plan, int shard,
                          const struct ferry_position *resume, struct ferry_row_writer *rw,
                          struct ferry_error *err)
{
    struct rel r;
    const struct ferry_read_context *run = ferry_read_context_of(spec);
    const char *slot = json_string_value(json_object_get(plan, "slot"));
    int rc = stream_resolve(s, spec->table, plan, &r, err);
    if (rc != FERRY_OK) {
        /* its slot's session need not wait for a table that will not join */
        if (run->cdc_streams_together > 1 && slot != NULL) ferry__pg_demux_decline(slot);
        return rc;
    }
    struct ferry_pg_cdc_target t = {.schema_name = r.schema_name,
                                    .table = r.table,
                                    .from = r.from,
                                    .sc = sc,
                                    .change_log = run->change_log,
                                    .soft_delete = !run->change_log && run->soft_delete != NULL,
                                    .all_columns = spec->columns == NULL,
                                    .epoch_rows = run->cdc_epoch_rows,
                                    .keep_session = run->cdc_follow,
                                    .policy = run->schema_changes,
                                    .route = run->route,
                                    .truncates = run->truncates,
                                    .specials = run->special_values,
                                    .streams = run->cdc_streams_together,
                                    .stream_large_txns = s->stream_large_txns};
    ferry_rw_set_shard(rw, shard);
    if (!s->lazy && json_is_string(json_object_get(plan, "snapshot")))
        rc = ferry__pg_cdc_extend_end(s->url, &s->opts, s->peer, plan, err);
    if (rc != FERRY_OK && run->cdc_streams_together > 1 && slot != NULL)
        ferry__pg_demux_decline(slot);
    if (rc == FERRY_OK)
        rc = ferry__pg_cdc_stream(s->url, &s->opts, s->peer, &t, plan, resume, rw, &s->progress,
                                  err);
    rel_free(&r);
    return rc;
}

/* A connection of its own for a cdc copy shard, in a transaction that imported the slot's
 * exported snapshot. On a resumed attempt that snapshot is gone (its replication
 * connection closed with the earlier process): the shard then reads a fresh snapshot,
 * which is later than the slot's start, and the stream from the start replays every change
 * after it, so the destination converges under merge (docs/internals/cdc.md). */
static int cdc_copy_connection(struct src *s, json_t *plan, struct src *own,
                               struct ferry_error *err)
{
    memset(own, 0, sizeof *own);
    own->parallelism = s->parallelism;
    own->shard_rows = s->shard_rows;
    own->url = s->url;
    own->opts = s->opts;
    memcpy(own->peer, s->peer, sizeof own->peer);
    int rc = ferry__pg_connect(s->url, &s->opts, WHAT, &own->c, err);
    if (rc != FERRY_OK) return rc;
    own->cancel = PQgetCancel(own->c);
    if (own->cancel == NULL) {
        PQfinish(own->c);
        return nomem(err);
    }
    const char *snap = json_string_value(json_object_get(plan, "snapshot"));
    if (snap == NULL) return FERRY_OK;
    own->snapshot_id = ferry_strdup(snap);
    if (own->snapshot_id == NULL) {
        PQfreeCancel(own->cancel);
        PQfinish(own->c);
        return nomem(err);
    }
    struct ferry_error e;
    if (begin_snapshot(own, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_INFO, "%s (the slot's snapshot is gone; reading a fresh one)",
                  e.message);
        ferry_free(own->snapshot_id);
        own->snapshot_id = NULL;
    }
    return FERRY_OK;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *sc, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    struct src *s = ctx;
    json_t *resume_key = NULL;
    if (resume != NULL) {
        if (resume->done) return FERRY_OK;
        if (resume->has_key && (resume_key = ferry_position_key_json(resume)) == NULL)
            return nomem(err);
    }
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *sh = json_array_get(json_object_get(plan, "shards"), (size_t)shard);
    if (!json_is_object(sh) || shard < 0) {
        json_decref(plan);
        json_decref(resume_key);
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": table \"%s\": shard %d is not in the frozen plan",
                               spec->table, shard);
    }
    const char *mode = json_string_value(json_object_get(plan, "mode"));
    bool incremental = mode != NULL && !strcmp(mode, "incremental");
    bool cdc = mode != NULL && !strcmp(mode, "cdc");
    if (cdc && json_is_true(json_object_get(sh, "stream"))) {
        int src = extract_stream(s, spec, sc, plan, shard, resume, rw, err);
        json_decref(plan);
        json_decref(resume_key);
        return src;
    }
    if (s->lazy && !cdc) { /* open_stream's contract: stream shards only */
        json_decref(plan);
        json_decref(resume_key);
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": table \"%s\": a stream instance reads streams only",
                               spec->table);
    }
    /* A cdc copy shard reads on a connection of its own, under the slot's snapshot. */
    struct src own;
    if (cdc) {
        int orc = cdc_copy_connection(s, plan, &own, err);
        if (orc != FERRY_OK) {
            json_decref(plan);
            json_decref(resume_key);
            return orc;
        }
        s = &own;
    }
    struct reader rd;
    memset(&rd, 0, sizeof rd);
    rd.s = s;
    rd.sc = sc;
    const struct ferry_read_context *run = ferry_read_context_of(spec);
    rd.change_log = cdc && run->change_log;
    rd.n_real =
        sc->n_fields - (cdc ? ferry_cdc_extra_cols(run->change_log, run->soft_delete != NULL) : 0);
    rd.specials = ferry_read_context_of(spec)->special_values;
    ferry_buf_init(&rd.sql, 0);
    ferry_buf_init(&rd.tmp, 0);
    /* The catalog, too, is read as of the shared snapshot. */
    int rc = s->snapshot_id != NULL ? begin_snapshot(s, err) : FERRY_OK;
    if (rc == FERRY_OK) rc = resolve(s, spec->table, &rd.r, err);
    if (rc == FERRY_OK) {
        snprintf(rd.what, sizeof rd.what, WHAT ": %s: table %s, shard %d", s->peer, rd.r.from,
                 shard);
        rc = bind_columns(&rd, err);
    }
    if (rc == FERRY_OK) {
        rd.n_ord = order_fields(spec, sc, incremental, rd.ord, MAX_ORDER);
        /* A commit_once plan reads in no order (its shards are resumed from their start
         * only), and a table without a key has no resume point: a resumed shard starts
         * over. */
        rd.ordered = incremental || !json_is_false(json_object_get(plan, "ordered"));
        if ((!rd.ordered || rd.n_ord == 0) && resume_key != NULL) {
            json_decref(resume_key);
            resume_key = NULL;
        }
        if (resume_key != NULL && (int)json_array_size(resume_key) != rd.n_ord)
            rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                                 "%s: the resume position has %zu values, the read needs %d",
                                 rd.what, json_array_size(resume_key), rd.n_ord);
    }
    bool empty = false;
    if (rc == FERRY_OK) {
        rc = build_sql(&rd, plan, sh, resume_key, &empty, err);
        if (rc == FERRY_ENOMEM) rc = nomem(err); /* a buffer append: err not set yet */
    }
    if (rc == FERRY_OK) {
        ferry_rw_set_shard(rw, shard);
        if (rd.ordered && rd.n_ord > 0) ferry_rw_set_position_columns(rw, rd.n_ord, rd.ord);
        if (!empty) {
            ferry_log(FERRY_LOG_DEBUG, "%s: %s", rd.what, rd.sql.data);
            rc = run_copy(&rd, rw, err);
        }
    }
    reader_free(&rd);
    json_decref(plan);
    json_decref(resume_key);
    if (cdc) {
        PQfreeCancel(own.cancel);
        PQfinish(own.c);
        ferry_free(own.snapshot_id);
    }
    return rc;
}

static int src_cdc_ack(void *ctx, const struct ferry_resource_spec *spec, const char *plan_json,
                       const char *position, bool *caught_up, struct ferry_error *err)
{
    struct src *s = ctx;
    /* The acknowledgement is a query on the source's session: a server or network that
     * stopped answering must not hang the run that waits for it (io_timeout). */
    struct ferry_pg_guard g;
    ferry__pg_guard_begin(&g, s->c, s->opts.io_timeout_ms);
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    bool shared = json_is_true(json_object_get(plan, "shared"));
    json_decref(plan);
    int rc = shared ? ferry__pg_slot_ack(&s->slot, s->c, s->peer, spec, plan_json, position,
                                         caught_up, err)
                    : ferry__pg_cdc_ack(s->c, s->peer, plan_json, position, caught_up, err);
    rc = ferry__pg_guard_result(&g, rc, s->c, WHAT ": acknowledging the replication slot",
                                s->opts.io_timeout_ms, err);
    return rc == FERRY_OK ? rc : ferry_error_prefix(err, "table \"%s\"", spec->table);
}

static int src_cdc_progress(void *ctx, int64_t *position, int64_t *lag_bytes, int64_t *lag_us)
{
    struct src *s = ctx;
    if (s == NULL) return FERRY_ENOTFOUND;
    /* A stream that ended is reported once more (its final position and lag). */
    if (!atomic_load(&s->progress.active) && !atomic_exchange(&s->progress.final_pending, 0))
        return FERRY_ENOTFOUND;
    *position = atomic_load(&s->progress.position);
    *lag_bytes = atomic_load(&s->progress.lag_bytes);
    *lag_us = atomic_load(&s->progress.lag_us);
    return FERRY_OK;
}

static int src_cdc_drop(void *ctx, const struct ferry_resource_spec *spec, struct ferry_error *err)
{
    struct src *s = ctx;
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc != FERRY_OK) return rc;
    return o.own_slot ? ferry__pg_cdc_drop(s->c, s->peer, spec, err)
                      : ferry__pg_slot_drop(&s->slot, s->c, s->peer, spec, err);
}

static int src_list_tables(void *ctx, struct ferry_table_info **out, int *n, char **def,
                           struct ferry_error *err)
{
    struct src *s = ctx;
    return ferry__pg_list_tables(s->c, out, n, def, err);
}

const struct ferry_source_vtable ferry__postgres_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "postgres",
    .tuning_keys = source_tuning_keys,
    .supports_incremental = true,
    .supports_cdc = true,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = src_cancel,
    .snapshot = src_snapshot,
    .use_snapshot = src_use_snapshot,
    .cdc_ack = src_cdc_ack,
    .cdc_drop = src_cdc_drop,
    .cdc_progress = src_cdc_progress,
    /* the streams of a pipeline's slot read one replication session (pg_demux.c) */
    .cdc_one_stream = true,
    .cdc_commit_groups = true,
    .open_stream = src_open_stream,
    .list_tables = src_list_tables,
    .verify_open = ferry__pg_verify_open,
    .discover_ahead = src_discover_ahead,
};
