/* connectors/mysql/my_source.c - the `mysql` source: tables of one MySQL or MariaDB
 * database.
 *
 * Owns one Connector/C connection, the discovery of a table from information_schema
 * (columns in ordinal order mapped to ferry types below, nullability, primary key), frozen
 * read plans and the streamed SELECTs that execute them (mysql_use_result: rows arrive one
 * at a time from the socket, never buffered whole). Calls libmariadb, my_common.c, the row
 * writer, the batch text forms and jansson. Registered in connectors/registry.c; driven by
 * the runner on one thread; `cancel` may come from any thread (KILL QUERY from a
 * connection of its own).
 *
 * Reads (docs/connectors.md, "mysql source").
 *   full, single-column signed integer key: [min, max] at plan time split into
 *     ceil(rows / shard_rows) ranges (rows: information_schema's estimate), each read
 *     `WHERE k >= lo AND k <= hi ORDER BY k` and resumed with `k > last`.
 *   full, other keys: one shard ordered by the key, resumed with `(k1, k2) > (v1, v2)`.
 *   full, no key: one shard read whole, no resume point.
 *   incremental: ORDER BY cursor..., key... with `(c..., k...) > saved` and `<= newest at
 *     plan time`, frozen in the plan; rows whose cursor is NULL are never read.
 * Snapshot: snapshot() opens START TRANSACTION WITH CONSISTENT SNAPSHOT on this instance's
 * connection and records MariaDB's binlog_snapshot_file/_position taken atomically with it
 * (the id is "file:position"); every extract of the attempt then reads in that one
 * transaction. MySQL and MariaDB cannot share a snapshot between connections: a second
 * reader (parallelism > 1) refuses use_snapshot with a message saying so. Without a
 * snapshot call each extract reads in a consistent snapshot of its own.
 *
 * Values arrive in the text protocol and are parsed exactly: unsigned BIGINT as
 * decimal128(20,0), DECIMAL(p<=38) as decimal128, wider as decimal text, FLOAT selected as
 * `col + 0e0` (the server prints a double's shortest exact form; a FLOAT's 6 digits would
 * lose bits), spatial types through ST_AsBinary (WKB), TIMESTAMP in UTC (session time zone
 * +00:00). Zero and invalid dates (month or day 0) follow `zero_dates`. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "checkpoint/position.h"
#include "connectors/mysql/my_binlog.h"
#include "connectors/mysql/my_charset.h"
#include "connectors/mysql/my_common.h" /* (mysql.h, which mariadb_rpl.h needs first) */
#include "connectors/mysql/my_gtid.h"
#include "connectors/mysql/my_json.h"
#include "connectors/mysql/my_hub.h"
#include "pipeline/cdc_columns.h"
#include "pipeline/schema_change.h"
#include <mariadb_rpl.h>
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/failpoint.h"

__extension__ typedef __int128 i128;

static const char *const source_tuning_keys[] = {"parallelism", "shard_rows", "connect_timeout",
                                                 "io_timeout", NULL};

#define WHAT "mysql source"
#define MAX_ORDER 32

enum zero_policy { ZERO_NULL = 0, ZERO_ERROR };

struct src {
    MYSQL *c;
    struct ferry_my_conn conn;
    int64_t shard_rows;
    enum zero_policy zero_dates;
    atomic_ulong thread_id; /* of s->c, for cancel's KILL QUERY */
    atomic_int canceled;
    bool in_snapshot;  /* s->c holds the attempt's consistent-snapshot transaction */
    char *snapshot_id; /* "binlog-file:position" of that transaction, or "" */
    char *snapshot_gtid; /* MySQL with gtid_mode ON: gtid_executed there (snapshot_with_lock) */
    bool cdc_snapshot; /* that transaction was taken by a cdc plan: the copy shards read it */
    int64_t server_id; /* the source's `server_id:`: the shared stream's (0: derived) */
    struct {
        char *route;
        int64_t id;
    } * ids; /* the server_id of each cdc route planned here (duplicates are refused) */
    int n_ids;
    bool lazy;  /* a stream's instance (src_open_stream): c only while it needs the catalog */
    bool brief; /* it holds one of the brief connections (brief_take) */
    /* the stream running on this instance, for src_cdc_progress (any thread) */
    struct {
        _Atomic long long position, lag_bytes, lag_us;
        atomic_int active, final_pending; /* final: ended, its last report not read yet */
    } progress;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "mysql", WHAT ": out of memory");
}

/* ---- open / close / cancel ----------------------------------------------------------- */

/* A stream instance's (src_open_stream) brief connections: at most this many of a
 * process's streams hold one at a time, so that any number of streams start at once on a
 * server with few connections (max_connections). */
#define BRIEF_CONNECTIONS 4
static pthread_mutex_t brief_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t brief_free = PTHREAD_COND_INITIALIZER;
static int brief_held;

static void brief_take(struct src *s)
{
    if (!s->lazy || s->brief) return;
    pthread_mutex_lock(&brief_lock);
    while (brief_held >= BRIEF_CONNECTIONS)
        pthread_cond_wait(&brief_free, &brief_lock);
    brief_held++;
    pthread_mutex_unlock(&brief_lock);
    s->brief = true;
}

static void brief_give(struct src *s)
{
    if (!s->brief) return;
    pthread_mutex_lock(&brief_lock);
    brief_held--;
    pthread_cond_signal(&brief_free);
    pthread_mutex_unlock(&brief_lock);
    s->brief = false;
}

static void src_close(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    if (s->c) mysql_close(s->c);
    brief_give(s);
    ferry__my_conn_free(&s->conn);
    ferry_free(s->snapshot_id);
    ferry_free(s->snapshot_gtid);
    for (int i = 0; i < s->n_ids; i++)
        ferry_free(s->ids[i].route);
    ferry_free(s->ids);
    ferry_free(s);
}

/* The instance with its keys read; connected unless lazy. */
static int src_new(struct ferry_cfg *cfg, bool lazy, void **ctx, struct ferry_error *err)
{
    struct src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    s->lazy = lazy;
    s->shard_rows = 1000000;
    static const char *const zero_words[] = {"null", "error", NULL};
    int zd = ZERO_NULL;
    int rc = ferry_cfg_int(cfg, "shard_rows", false, 1, INT64_C(1) << 40, &s->shard_rows, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "zero_dates", false, zero_words, &zd, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_int(cfg, "server_id", false, 1, UINT32_MAX, &s->server_id, err);
    if (rc == FERRY_OK) rc = ferry__my_read_conn_config(cfg, WHAT, &s->conn, err);
    if (rc == FERRY_OK && !lazy) rc = ferry__my_connect(&s->conn, WHAT, &s->c, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    s->zero_dates = (enum zero_policy)zd;
    if (s->c) atomic_store(&s->thread_id, mysql_thread_id(s->c));
    *ctx = s;
    return FERRY_OK;
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    return src_new(cfg, false, ctx, err);
}

/* A stream's instance (connector.h open_stream): it connects only while it reads the
 * catalog (its extract's start, a DDL or character set met in the log), so that any number
 * of streams share the pipeline's one binlog connection (my_hub.c). */
static int src_open_stream(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    return src_new(cfg, true, ctx, err);
}

/* Interrupts the running statement: KILL QUERY from a short connection of its own. */
static void src_cancel(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    atomic_store(&s->canceled, 1);
    if (atomic_load(&s->thread_id) == 0) return; /* a stream's instance between connections */
    MYSQL *k = NULL;
    struct ferry_error e;
    if (ferry__my_connect(&s->conn, WHAT, &k, &e) != FERRY_OK) return;
    char sql[64];
    snprintf(sql, sizeof sql, "KILL QUERY %lu", atomic_load(&s->thread_id));
    ferry__my_exec(k, sql, FERRY_ESOURCE, WHAT, &e);
    mysql_close(k);
}

/* ---- the table ------------------------------------------------------------------------ */

enum kind { K_PLAIN = 0, K_FLOAT, K_SPATIAL, K_BIT };

struct col {
    char *name;
    char *data_type; /* information_schema DATA_TYPE, lower case */
    char *charset;   /* CHARACTER_SET_NAME, lower case, "" for non-text columns */
    char *column_type; /* COLUMN_TYPE: enum('a','b') and set(...) labels for cdc */
    bool is_unsigned;
    bool notnull;
    bool is_json;
    bool is_binary; /* character set binary (BINARY, VARBINARY, BLOB) */
    int precision, scale, bits;
    int key_pos;
    enum kind kind;
};

struct rel {
    char *db, *table;
    char *from; /* `db`.`table` */
    struct col *cols;
    int n_cols;
};

static void rel_free(struct rel *r)
{
    for (int i = 0; i < r->n_cols; i++) {
        ferry_free(r->cols[i].name);
        ferry_free(r->cols[i].data_type);
        ferry_free(r->cols[i].charset);
        ferry_free(r->cols[i].column_type);
    }
    ferry_free(r->cols);
    ferry_free(r->db);
    ferry_free(r->table);
    ferry_free(r->from);
    memset(r, 0, sizeof *r);
}

static int ensure_conn(struct src *s, struct ferry_error *err);

static int query(struct src *s, const char *sql, MYSQL_RES **res, const char *table,
                 struct ferry_error *err)
{
    *res = NULL;
    int rc = ensure_conn(s, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", table);
    if (mysql_real_query(s->c, sql, strlen(sql)) != 0 || (*res = mysql_store_result(s->c)) == NULL)
        return ferry__my_error(err, FERRY_ESOURCE, s->c, WHAT ": %s: table %s", s->conn.peer,
                               table);
    return FERRY_OK;
}

static int load_columns(struct src *s, struct rel *r, struct ferry_error *err)
{
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    /* MariaDB's JSON is LONGTEXT with a json_valid() check named after the column. */
    int rc =
        ferry_buf_printf(&sql, "SELECT c.COLUMN_NAME, LOWER(c.DATA_TYPE), c.COLUMN_TYPE LIKE "
                               "'%% unsigned%%', c.IS_NULLABLE = 'NO', "
                               "COALESCE(c.NUMERIC_PRECISION, 0), COALESCE(c.NUMERIC_SCALE, 0), "
                               "COALESCE(c.CHARACTER_SET_NAME = 'binary' OR (c.CHARACTER_SET_NAME "
                               "IS NULL AND c.DATA_TYPE IN ('binary','varbinary','tinyblob','blob',"
                               "'mediumblob','longblob')), 0), "
                               "COALESCE((SELECT k.SEQ_IN_INDEX FROM information_schema.STATISTICS "
                               "k WHERE k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = "
                               "c.TABLE_NAME AND k.INDEX_NAME = 'PRIMARY' AND k.COLUMN_NAME = "
                               "c.COLUMN_NAME), 0), "
                               "LOWER(c.DATA_TYPE) = 'json' OR EXISTS (SELECT 1 FROM "
                               "information_schema.CHECK_CONSTRAINTS x WHERE "
                               "x.CONSTRAINT_SCHEMA = c.TABLE_SCHEMA AND x.TABLE_NAME = "
                               "c.TABLE_NAME AND x.CHECK_CLAUSE = CONCAT('json_valid(`', "
                               "REPLACE(c.COLUMN_NAME, '`', '``'), '`)')), "
                               "LOWER(COALESCE(c.CHARACTER_SET_NAME, '')), c.COLUMN_TYPE "
                               "FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &sql, r->db, strlen(r->db));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " AND c.TABLE_NAME = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &sql, r->table, strlen(r->table));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " ORDER BY c.ORDINAL_POSITION");
    MYSQL_RES *res = NULL;
    if (rc != FERRY_OK)
        rc = nomem(err);
    else
        rc = query(s, sql.data, &res, r->from, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    int n = (int)mysql_num_rows(res);
    if (n > 0) {
        r->cols = ferry_calloc((size_t)n, sizeof *r->cols);
        if (r->cols == NULL) rc = nomem(err);
    }
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        MYSQL_ROW row = mysql_fetch_row(res);
        struct col *c = &r->cols[i];
        r->n_cols = i + 1;
        c->name = ferry_strdup(row[0]);
        c->data_type = ferry_strdup(row[1]);
        c->charset = ferry_strdup(row[9] ? row[9] : "");
        c->column_type = ferry_strdup(row[10] ? row[10] : "");
        if (c->name == NULL || c->data_type == NULL || c->charset == NULL ||
            c->column_type == NULL) {
            rc = nomem(err);
            break;
        }
        c->is_unsigned = row[2][0] == '1';
        c->notnull = row[3][0] == '1';
        c->precision = (int)strtol(row[4], NULL, 10);
        c->scale = (int)strtol(row[5], NULL, 10);
        c->is_binary = row[6] != NULL && row[6][0] == '1';
        c->key_pos = (int)strtol(row[7], NULL, 10);
        c->is_json = row[8] != NULL && row[8][0] == '1';
    }
    mysql_free_result(res);
    return rc;
}

/* A read left early (pause, cancel, error) drops its connection rather than draining the
 * rest of the result off the socket; the next call connects again. */
static int ensure_conn(struct src *s, struct ferry_error *err)
{
    if (s->c != NULL) return FERRY_OK;
    brief_take(s);
    int rc = ferry__my_connect(&s->conn, WHAT, &s->c, err);
    if (rc == FERRY_OK) atomic_store(&s->thread_id, mysql_thread_id(s->c));
    if (rc != FERRY_OK) brief_give(s);
    return rc;
}

/* A stream's instance lets its catalog connection go once it has what it needs. */
static void lazy_release(struct src *s)
{
    if (!s->lazy) return;
    atomic_store(&s->thread_id, 0);
    if (s->c != NULL) mysql_close(s->c);
    s->c = NULL;
    brief_give(s);
}

static void drop_conn(struct src *s)
{
    mariadb_cancel(s->c); /* shuts the socket: mysql_free_result then reads nothing more */
    s->in_snapshot = false;
}

static int resolve(struct src *s, const char *name, struct rel *r, struct ferry_error *err)
{
    memset(r, 0, sizeof *r);
    int rc = ensure_conn(s, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry__my_split_name(name, &r->db, &r->table, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT);
    if (r->db == NULL && (r->db = ferry_strdup(s->conn.db)) == NULL) rc = nomem(err);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, r->db, err);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ".", 1) == FERRY_OK ? FERRY_OK : nomem(err);
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, r->table, err);
    if (rc == FERRY_OK && (r->from = ferry_buf_take(&b)) == NULL) rc = nomem(err);
    ferry_buf_release(&b);
    if (rc == FERRY_OK) rc = load_columns(s, r, err);
    if (rc == FERRY_OK && r->n_cols == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "mysql",
                             WHAT ": table %s not found on %s (or not visible to this user)",
                             r->from, s->conn.peer);
    if (rc != FERRY_OK) rel_free(r);
    return rc;
}

static int col_index(const struct rel *r, const char *name)
{
    for (int i = 0; i < r->n_cols; i++)
        if (strcmp(r->cols[i].name, name) == 0) return i;
    return -1;
}

/* ---- types ---------------------------------------------------------------------------- */

static bool is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

static bool is_date_type(const char *t)
{
    return is(t, "date") || is(t, "datetime") || is(t, "timestamp");
}

/* MySQL column -> ferry type (docs/connectors.md, "mysql source" types table). */
static void map_type(struct col *c, enum ferry_type *t, int *p, int *sc)
{
    const char *d = c->data_type;
    *p = *sc = 0;
    c->kind = K_PLAIN;
    if (is(d, "tinyint"))
        *t = c->is_unsigned ? FERRY_TYPE_INT16 : FERRY_TYPE_INT8;
    else if (is(d, "smallint"))
        *t = c->is_unsigned ? FERRY_TYPE_INT32 : FERRY_TYPE_INT16;
    else if (is(d, "mediumint"))
        *t = FERRY_TYPE_INT32;
    else if (is(d, "int") || is(d, "integer"))
        *t = c->is_unsigned ? FERRY_TYPE_INT64 : FERRY_TYPE_INT32;
    else if (is(d, "bigint")) {
        if (c->is_unsigned) {
            *t = FERRY_TYPE_DECIMAL128;
            *p = 20;
        } else {
            *t = FERRY_TYPE_INT64;
        }
    } else if (is(d, "decimal") || is(d, "numeric")) {
        if (c->precision >= 1 && c->precision <= 38) {
            *t = FERRY_TYPE_DECIMAL128;
            *p = c->precision;
            *sc = c->scale;
        } else {
            *t = FERRY_TYPE_DECIMAL_TEXT;
        }
    } else if (is(d, "float")) {
        *t = FERRY_TYPE_FLOAT32;
        c->kind = K_FLOAT;
    } else if (is(d, "double") || is(d, "real")) {
        *t = FERRY_TYPE_FLOAT64;
    } else if (is(d, "bit")) {
        c->bits = c->precision;
        c->kind = K_BIT;
        *t = c->bits == 1 ? FERRY_TYPE_BOOL : FERRY_TYPE_BINARY;
    } else if (is(d, "date")) {
        *t = FERRY_TYPE_DATE32;
    } else if (is(d, "datetime")) {
        *t = FERRY_TYPE_TIMESTAMP_US;
    } else if (is(d, "timestamp")) {
        *t = FERRY_TYPE_TIMESTAMPTZ_US;
    } else if (is(d, "year")) {
        *t = FERRY_TYPE_INT16;
    } else if (is(d, "json") || c->is_json) {
        *t = FERRY_TYPE_JSON;
    } else if (is(d, "geometry") || is(d, "point") || is(d, "linestring") || is(d, "polygon") ||
               is(d, "multipoint") || is(d, "multilinestring") || is(d, "multipolygon") ||
               is(d, "geometrycollection") || is(d, "geomcollection")) {
        *t = FERRY_TYPE_BINARY;
        c->kind = K_SPATIAL;
    } else if (c->is_binary) {
        *t = FERRY_TYPE_BINARY;
    } else {
        /* char, varchar, *text, enum, set, time (its range, -838:59:59 .. 838:59:59, is no
         * time of day: carried as the server's text), inet6, uuid... */
        *t = FERRY_TYPE_UTF8;
    }
}

static int add_field(struct src *s, struct ferry_schema *sc, struct col *c, struct ferry_error *err)
{
    enum ferry_type t;
    int p, scale;
    map_type(c, &t, &p, &scale);
    /* zero_dates: null turns a zero date into NULL, so such a column is nullable. */
    bool nullable = (!c->notnull || (s->zero_dates == ZERO_NULL && is_date_type(c->data_type))) &&
                    c->key_pos == 0;
    int rc = ferry_schema_add_field(sc, c->name, t, nullable, err);
    if (rc != FERRY_OK) return rc;
    sc->fields[sc->n_fields - 1].precision = p;
    sc->fields[sc->n_fields - 1].scale = scale;
    return FERRY_OK;
}

/* ---- discover ------------------------------------------------------------------------ */

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct src *s = ctx;
    *out = NULL;
    struct rel r;
    int rc = resolve(s, spec->table, &r, err);
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
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "mysql",
                                 WHAT ": table %s has no column \"%s\"", r.from, spec->columns[f]);
        else
            rc = add_field(s, sc, &r.cols[c], err);
    }
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
            rc = ferry_error_set(
                err, FERRY_ECONFIG, "config", WHAT ": table %s: cursor column \"%s\" %s", r.from,
                spec->cursor[k],
                col_index(&r, spec->cursor[k]) < 0 ? "does not exist"
                                                   : "must be among the selected columns");
    /* a change log's or soft_delete's columns after the table's (a delete carries the whole
     * row: binlog_row_image = FULL, so the table's columns keep their NOT NULL) */
    if (rc == FERRY_OK && spec->mode == FERRY_READ_CDC)
        rc = ferry_cdc_add_columns(sc, ferry_read_context_of(spec), WHAT, spec->table, err);
    if (rc == FERRY_OK && spec->mode == FERRY_READ_CDC && spec->node != NULL) {
        /* the cdc resource keys (read again at plan time): checked here, with the file */
        static const char *const lost_words[] = {"error", "resnapshot", NULL};
        int lost = 0;
        int64_t id = 0;
        rc = ferry_cfg_enum(spec->node, "on_position_lost", false, lost_words, &lost, err);
        if (rc == FERRY_OK)
            rc = ferry_cfg_int(spec->node, "server_id", false, 1, UINT32_MAX, &id, err);
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    rel_free(&r);
    if (rc != FERRY_OK) {
        ferry_schema_unref(sc);
        return rc;
    }
    *out = sc;
    return FERRY_OK;
}

/* ---- positions <-> SQL literals ------------------------------------------------------ */

/* A position value (the row writer's JSON form, batch/builder.h) as a MySQL literal for a
 * column of ferry type t: numbers bare (a quoted number would compare as a double),
 * temporal values and text quoted, binary as X'..'. */
static int position_literal(struct src *s, const json_t *v, enum ferry_type t,
                            struct ferry_buf *out)
{
    char tmp[64];
    int n = -1;
    switch (t) {
    case FERRY_TYPE_BOOL:
        if (!json_is_boolean(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%s", json_is_true(v) ? "b'1'" : "b'0'");
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        if (!json_is_integer(v)) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%" PRId64, (int64_t)json_integer_value(v));
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        if (json_is_integer(v))
            return ferry_buf_printf(out, "%" PRId64 "e0", (int64_t)json_integer_value(v));
        if (!json_is_real(v)) return FERRY_EINVAL;
        n = snprintf(tmp, sizeof tmp, "%.17g", json_real_value(v));
        if (strchr(tmp, 'e') == NULL) n += snprintf(tmp + n, sizeof tmp - (size_t)n, "e0");
        return ferry_buf_append(out, tmp, (size_t)n);
    case FERRY_TYPE_DECIMAL128:
    case FERRY_TYPE_DECIMAL_TEXT: {
        if (!json_is_string(v)) return FERRY_EINVAL;
        const char *d = json_string_value(v);
        for (const char *p = d; *p; p++)
            if (!((*p >= '0' && *p <= '9') || *p == '.' || *p == '-')) return FERRY_EINVAL;
        return ferry_buf_printf(out, "%s", d);
    }
    case FERRY_TYPE_DATE32:
        if (json_is_integer(v))
            n = ferry_date32_to_text((int32_t)json_integer_value(v), tmp, sizeof tmp);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (json_is_integer(v))
            n = ferry_timestamp_to_text(json_integer_value(v), false, tmp, sizeof tmp);
        break;
    case FERRY_TYPE_BINARY: {
        if (!json_is_string(v)) return FERRY_EINVAL;
        const char *h = json_string_value(v);
        for (const char *p = h; *p; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return FERRY_EINVAL;
        return ferry_buf_printf(out, "X'%s'", h);
    }
    default: /* text, json, time */
        if (!json_is_string(v)) return FERRY_EINVAL;
        return ferry__my_quote_text(s->c, out, json_string_value(v), json_string_length(v));
    }
    if (n < 0) return FERRY_EINVAL;
    if (ferry_buf_append(out, "'", 1) != FERRY_OK) return FERRY_ENOMEM;
    if (ferry_buf_append(out, tmp, (size_t)n) != FERRY_OK) return FERRY_ENOMEM;
    return ferry_buf_append(out, "'", 1);
}

/* The columns a position is made of: the key (full) or cursor + key (incremental). */
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

/* (`a`, `b`) */
static int tuple_names(struct ferry_buf *b, const struct ferry_schema *sc, const int *ord, int n,
                       struct ferry_error *err)
{
    int rc = ferry_buf_append(b, "(", 1);
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_append(b, ", ", 2);
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(b, sc->fields[ord[i]].name, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(b, ")", 1);
    return rc == FERRY_ENOMEM ? nomem(err) : rc;
}

/* (`a`, `b`) OP (lit, lit) from JSON position values. */
static int tuple_cond(struct src *s, struct ferry_buf *b, const struct ferry_schema *sc,
                      const int *ord, int n, const char *op, const json_t *vals, const char *table,
                      struct ferry_error *err)
{
    if (!json_is_array(vals) || (int)json_array_size(vals) != n)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": table %s: a position has %zu values, the read needs %d "
                                    "(did the cursor or key change?)",
                               table, json_is_array(vals) ? json_array_size(vals) : 0, n);
    int rc = tuple_names(b, sc, ord, n, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " %s (", op) == FERRY_OK ? FERRY_OK : nomem(err);
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0 && ferry_buf_append(b, ", ", 2) != FERRY_OK) return nomem(err);
        const struct ferry_field *f = &sc->fields[ord[i]];
        rc = position_literal(s, json_array_get(vals, (size_t)i), f->type, b);
        if (rc == FERRY_EINVAL)
            return ferry_error_set(err, FERRY_EINVAL, "mysql",
                                   WHAT ": table %s: a position's value for \"%s\" does not fit "
                                        "its type %s",
                                   table, f->name, ferry_type_name(f->type));
        if (rc != FERRY_OK) return nomem(err);
    }
    if (rc == FERRY_OK && ferry_buf_append(b, ")", 1) != FERRY_OK) rc = nomem(err);
    return rc;
}

/* ---- plan ----------------------------------------------------------------------------- */

static bool is_signed_int(const struct ferry_field *f)
{
    return f->type == FERRY_TYPE_INT8 || f->type == FERRY_TYPE_INT16 ||
           f->type == FERRY_TYPE_INT32 || f->type == FERRY_TYPE_INT64;
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
    if (sc->n_key != 1 || !is_signed_int(kf)) {
        json_object_set_new(plan, "keyset", json_string("tuple"));
        json_array_append_new(shards, json_object());
        return FERRY_OK;
    }
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int rc = ferry_buf_printf(&sql, "SELECT MIN(");
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&sql, kf->name, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, "), MAX(");
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&sql, kf->name, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&sql, "), (SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                                    "TABLE_SCHEMA = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &sql, r->db, strlen(r->db));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " AND TABLE_NAME = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &sql, r->table, strlen(r->table));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, ") FROM %s", r->from);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (rc == FERRY_OK) rc = query(s, sql.data, &res, r->from, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    json_object_set_new(plan, "keyset", json_string("range"));
    if (row == NULL || row[0] == NULL) { /* empty table: one shard, nothing to read */
        mysql_free_result(res);
        json_object_set_new(plan, "rows_estimate", json_integer(0));
        json_array_append_new(shards, json_pack("{s:n,s:n}", "lo", "hi"));
        return FERRY_OK;
    }
    int64_t lo = strtoll(row[0], NULL, 10), hi = strtoll(row[1], NULL, 10);
    int64_t count = row[2] ? strtoll(row[2], NULL, 10) : 0;
    mysql_free_result(res);
    json_object_set_new(plan, "rows_estimate", json_integer(count < 0 ? 0 : count));
    i128 span = (i128)hi - lo + 1;
    int64_t n = (count + s->shard_rows - 1) / s->shard_rows;
    if (n < 1) n = 1;
    if (n > 100000) n = 100000;
    if ((i128)n > span) n = (int64_t)span;
    for (int64_t i = 0; i < n; i++) {
        int64_t a = (int64_t)(lo + span * i / n);
        int64_t b = (int64_t)(lo + span * (i + 1) / n - 1);
        if (json_array_append_new(
                shards, json_pack("{s:I,s:I}", "lo", (json_int_t)a, "hi", (json_int_t)b)) != 0)
            return nomem(err);
    }
    return FERRY_OK;
}

struct reader;
static int read_rows(struct src *s, const char *sql, const struct ferry_schema *sc,
                     const struct rel *r, struct ferry_row_writer *rw, json_t **last_key,
                     const int *ord, int n_ord, struct ferry_error *err);

/* `lookback`: the plan's "lookback_from", the saved first cursor value minus the lookback
 * in the position form (microseconds, or days rounded down); a run that starts from the
 * saved position then reads every row whose first cursor column is at or after it, whatever
 * its key (as postgres and sqlite do), and converges under upsert. */
static int plan_lookback(const struct ferry_resource_spec *spec, const struct ferry_schema *sc,
                         const struct rel *r, int f0, const json_t *saved, json_t *plan,
                         struct ferry_error *err)
{
    const struct ferry_field *f = &sc->fields[f0];
    bool ts = f->type == FERRY_TYPE_TIMESTAMP_US || f->type == FERRY_TYPE_TIMESTAMPTZ_US;
    if (!ts && f->type != FERRY_TYPE_DATE32)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               WHAT ": table %s: lookback needs a date or timestamp first cursor "
                                    "column; \"%s\" is %s",
                               r->from, f->name, ferry_type_name(f->type));
    if (!json_is_integer(saved))
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": table %s: the saved position's value for \"%s\" does not "
                                    "fit its type %s",
                               r->from, f->name, ferry_type_name(f->type));
    int64_t v = json_integer_value(saved), from;
    if (ts) {
        from = v - spec->lookback_ms * 1000;
    } else {
        int64_t ms = v * INT64_C(86400000) - spec->lookback_ms;
        from = ms >= 0 ? ms / INT64_C(86400000) : -((-ms + INT64_C(86399999)) / INT64_C(86400000));
    }
    json_object_set_new(plan, "lookback_from", json_integer(from));
    return FERRY_OK;
}

/* The key of a saved route position (checkpoint codec): *lo is a new jansson array of n
 * values, or stays as it was when the position has no key. */
static int saved_key(const char *text, const char *table, int n, json_t **lo,
                     struct ferry_error *err)
{
    struct ferry_position p;
    int rc = ferry_position_decode(text, strlen(text), &p, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, WHAT ": table %s: the saved position", table);
    if (p.has_key && p.n_key != n)
        rc = ferry_error_set(err, FERRY_EINVAL, "mysql",
                             WHAT ": table %s: the saved position has %d values, the cursor and "
                                  "key have %d (did the cursor or key change?)",
                             table, p.n_key, n);
    json_t *key = rc == FERRY_OK && p.has_key ? ferry_position_key_json(&p) : NULL;
    if (rc == FERRY_OK && p.has_key && key == NULL) rc = nomem(err);
    ferry_position_clear(&p);
    if (key != NULL) {
        json_decref(*lo);
        *lo = key;
    }
    return rc;
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
    /* The saved lower bound, in the position form. */
    json_t *lo = json_null();
    if (route_checkpoint != NULL) {
        int rc = saved_key(route_checkpoint, r->from, n, &lo, err);
        if (rc != FERRY_OK) return rc;
    }
    if (!json_is_null(lo) && spec->lookback_ms > 0) {
        int rc = plan_lookback(spec, sc, r, ord[0], json_array_get(lo, 0), plan, err);
        if (rc != FERRY_OK) {
            json_decref(lo);
            return rc;
        }
    }
    json_object_set_new(plan, "lo", lo);
    /* The newest (cursor..., key...) now: the frozen upper bound, read through the same
     * decoder as the rows so that it is in the position form. */
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int rc = ferry_buf_printf(&sql, "SELECT ");
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, ", ");
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&sql, sc->fields[ord[i]].name, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " FROM %s WHERE ", r->from);
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, " AND ");
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&sql, sc->fields[ord[i]].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " IS NOT NULL");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " ORDER BY ");
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&sql, ", ");
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&sql, sc->fields[ord[i]].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " DESC");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " LIMIT 1");
    json_t *hi = NULL;
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (rc == FERRY_OK) rc = read_rows(s, sql.data, sc, r, NULL, &hi, ord, n, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "hi", hi ? hi : json_null());
    json_t *shards = json_array();
    json_array_append_new(shards, json_object());
    json_object_set_new(plan, "shards", shards);
    return FERRY_OK;
}

static int plan_cdc(struct src *s, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const struct rel *r,
                    const char *route_checkpoint, json_t *plan, struct ferry_error *err);

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const char *route_checkpoint, char **plan_json,
                    struct ferry_error *err)
{
    struct src *s = ctx;
    *plan_json = NULL;
    struct rel r;
    int rc = resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) return rc;
    json_t *plan = json_object();
    if (plan == NULL) {
        rel_free(&r);
        return nomem(err);
    }
    bool incremental = spec->mode == FERRY_READ_INCREMENTAL;
    json_object_set_new(plan, "mode", json_string(incremental ? "incremental" : "full"));
    if (spec->mode == FERRY_READ_CDC)
        rc = plan_cdc(s, spec, sc, &r, route_checkpoint, plan, err);
    else if (incremental)
        rc = plan_incremental(s, spec, sc, &r, route_checkpoint, plan, err);
    else
        rc = plan_full(s, sc, &r, plan, err);
    if (rc == FERRY_OK) {
        char *text = json_dumps(plan, JSON_COMPACT | JSON_SORT_KEYS);
        *plan_json = text ? ferry_strdup(text) : NULL;
        free(text);
        if (*plan_json == NULL) rc = nomem(err);
    }
    json_decref(plan);
    rel_free(&r);
    return rc;
}

/* ---- snapshot ------------------------------------------------------------------------ */

static int begin_snapshot(struct src *s, struct ferry_error *err)
{
    int rc = ferry__my_exec(s->c, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                            FERRY_ESOURCE, WHAT ": snapshot", err);
    if (rc == FERRY_OK)
        rc = ferry__my_exec(s->c, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
                            FERRY_ESOURCE, WHAT ": snapshot", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->conn.peer);
    s->in_snapshot = true;
    return FERRY_OK;
}

static void end_snapshot(struct src *s)
{
    struct ferry_error e;
    if (s->in_snapshot && s->c != NULL) ferry__my_exec(s->c, "ROLLBACK", FERRY_ESOURCE, WHAT, &e);
    s->in_snapshot = false;
}

/* The binary log coordinates of the open snapshot (MariaDB's binlog_snapshot_file and
 * _position are taken with START TRANSACTION WITH CONSISTENT SNAPSHOT); "" without a
 * binary log or on MySQL. */
static char *snapshot_coordinates(struct src *s)
{
    MYSQL_RES *res = NULL;
    struct ferry_error e;
    char *id = NULL;
    if (query(s,
              "SHOW STATUS WHERE Variable_name IN ('binlog_snapshot_file', "
              "'binlog_snapshot_position')",
              &res, "(status)", &e) == FERRY_OK) {
        const char *file = "", *pos = "";
        MYSQL_ROW row;
        while ((row = mysql_fetch_row(res)) != NULL) {
            if (row[1] == NULL) continue;
            if (strcasecmp(row[0], "binlog_snapshot_file") == 0)
                file = row[1];
            else
                pos = row[1];
        }
        id = file[0] ? ferry_asprintf("%s:%s", file, pos) : ferry_strdup("");
        mysql_free_result(res);
    }
    return id;
}

static int src_snapshot(void *ctx, char **snapshot_id, struct ferry_error *err)
{
    struct src *s = ctx;
    *snapshot_id = NULL;
    int rc = ensure_conn(s, err);
    if (rc != FERRY_OK) return rc;
    bool keep = s->cdc_snapshot && s->in_snapshot && s->snapshot_id != NULL;
    s->cdc_snapshot = false; /* kept for this attempt only (the next plans afresh) */
    if (!keep) {
        /* (a cdc plan's snapshot is kept: its binlog position is the stream's start) */
        end_snapshot(s);
        rc = begin_snapshot(s, err);
        if (rc != FERRY_OK) return rc;
        ferry_free(s->snapshot_id);
        s->snapshot_id = snapshot_coordinates(s);
    }
    char *id = s->snapshot_id
                   ? ferry_asprintf("mysql:%lu:%s", atomic_load(&s->thread_id), s->snapshot_id)
                   : NULL;
    if (id == NULL) {
        end_snapshot(s);
        return nomem(err);
    }
    ferry_log(FERRY_LOG_INFO, WHAT ": %s: consistent snapshot at binlog %s", s->conn.peer,
              s->snapshot_id[0] ? s->snapshot_id : "(no binary log)");
    *snapshot_id = id;
    return FERRY_OK;
}

static int src_use_snapshot(void *ctx, const char *snapshot_id, struct ferry_error *err)
{
    struct src *s = ctx;
    char mine[64];
    snprintf(mine, sizeof mine, "mysql:%lu:", atomic_load(&s->thread_id));
    if (s->in_snapshot && strncmp(snapshot_id, mine, strlen(mine)) == 0) return FERRY_OK;
    return ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                           WHAT ": %s: MySQL and MariaDB cannot share one consistent snapshot "
                                "between connections; read with `parallelism: 1`",
                           s->conn.peer);
}

/* ---- extract --------------------------------------------------------------------------- */

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* "YYYY-MM-DD[ HH:MM:SS[.ffffff]]" -> days or microseconds. 1: zero/invalid date (month or
 * day 0), 0: ok, -1: not this form. */
static int parse_datetime(const char *p, size_t n, bool with_time, int64_t *out)
{
    if (n < 10 || p[4] != '-' || p[7] != '-') return -1;
    int y = digits(p, 4), mo = digits(p + 5, 2), d = digits(p + 8, 2);
    if (y < 0 || mo < 0 || d < 0 || mo > 12 || d > 31) return -1;
    if (mo == 0 || d == 0) return 1;
    int64_t days = days_from_civil(y, mo, d);
    if (!with_time) {
        if (n != 10) return -1;
        *out = days;
        return 0;
    }
    if (n < 19 || p[10] != ' ' || p[13] != ':' || p[16] != ':') return -1;
    int h = digits(p + 11, 2), mi = digits(p + 14, 2), se = digits(p + 17, 2);
    if (h < 0 || mi < 0 || se < 0 || h > 23 || mi > 59 || se > 59) return -1;
    int64_t us = 0;
    if (n > 19) {
        if (p[19] != '.' || n > 26 || n == 20) return -1;
        int fd = (int)n - 20, f = digits(p + 20, fd);
        if (f < 0) return -1;
        us = f;
        for (int i = fd; i < 6; i++)
            us *= 10;
    }
    *out = ((days * 24 + h) * 60 + mi) * INT64_C(60000000) + se * INT64_C(1000000) + us;
    return 0;
}

struct decoder {
    struct src *s;
    const struct ferry_schema *sc;
    const struct rel *r;
    int64_t zero_count;
};

static int bad_value(struct decoder *d, int f, int64_t row, const char *why,
                     struct ferry_error *err)
{
    const struct ferry_field *fld = &d->sc->fields[f];
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": table %s, column \"%s\" (%s), row %" PRId64 " of this read: %s",
                           d->r->from, fld->name, ferry_type_name(fld->type), row, why);
}

/* One text-protocol value into the writer (or, for plan bounds, into a JSON array). */
static int decode(struct decoder *d, int f, const char *v, size_t n, int64_t row,
                  struct ferry_row_writer *rw, struct ferry_error *err)
{
    const struct ferry_field *fld = &d->sc->fields[f];
    char tmp[128];
    if (v == NULL) {
        ferry_rw_null(rw);
        return FERRY_OK;
    }
    switch (fld->type) {
    case FERRY_TYPE_BOOL: /* BIT(1): one byte, 0 or 1 */
        if (n != 1) return bad_value(d, f, row, "BIT(1) value is not one byte", err);
        ferry_rw_bool(rw, v[0] != 0);
        return FERRY_OK;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64: {
        if (n == 0 || n >= sizeof tmp) return bad_value(d, f, row, "not an integer", err);
        memcpy(tmp, v, n);
        tmp[n] = '\0';
        char *e = NULL;
        errno = 0;
        long long x = strtoll(tmp, &e, 10);
        if (*e != '\0' || errno != 0) return bad_value(d, f, row, "not an integer", err);
        ferry_rw_int(rw, x);
        return FERRY_OK;
    }
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: {
        if (n == 0 || n >= sizeof tmp) return bad_value(d, f, row, "not a number", err);
        memcpy(tmp, v, n);
        tmp[n] = '\0';
        char *e = NULL;
        double x = strtod(tmp, &e);
        if (*e != '\0') return bad_value(d, f, row, "not a number", err);
        ferry_rw_float(rw, x);
        return FERRY_OK;
    }
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 x;
        if (ferry_decimal128_from_text(v, n, fld->precision, fld->scale, &x) != FERRY_OK)
            return bad_value(d, f, row, "decimal does not fit its precision and scale", err);
        ferry_rw_dec128(rw, x);
        return FERRY_OK;
    }
    case FERRY_TYPE_DATE32:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: {
        int64_t x = 0;
        int k = parse_datetime(v, n, fld->type != FERRY_TYPE_DATE32, &x);
        if (k < 0) return bad_value(d, f, row, "not a date or datetime the server printed", err);
        if (k == 1) {
            if (d->s->zero_dates == ZERO_ERROR)
                return bad_value(d, f, row,
                                 "zero or invalid date (month or day 0); `zero_dates: null` "
                                 "reads it as NULL",
                                 err);
            d->zero_count++;
            ferry_rw_null(rw);
            return FERRY_OK;
        }
        ferry_rw_int(rw, x);
        return FERRY_OK;
    }
    default: /* utf8, json, decimal text, binary (BIT(n), spatial WKB, blobs) */
        ferry_rw_text(rw, v, n);
        return FERRY_OK;
    }
}

/* A cdc snapshot row's value of field f, one of the columns appended after the table's
 * (pipeline/cdc_columns.h): an insert at `start` - 1 (every change that follows the snapshot
 * ends later in the log), sequence 0, no commit time; soft_delete's mark NULL. */
static int snapshot_literal(struct ferry_buf *b, bool change_log, const struct ferry_field *fld,
                            int64_t start)
{
    switch (ferry_cdc_snapshot_value(change_log, fld)) {
    case FERRY_CDC_SNAP_INSERT:
        return ferry_buf_printf(b, "'insert'");
    case FERRY_CDC_SNAP_LSN:
        return ferry_buf_printf(b, "%" PRId64, start > 0 ? start - 1 : 0);
    case FERRY_CDC_SNAP_ZERO:
        return ferry_buf_printf(b, "0");
    default:
        return ferry_buf_printf(b, "NULL");
    }
}

/* The SELECT list: every field as its column, FLOAT widened to double, spatial as WKB; the
 * fields from n_user on (a cdc read's appended columns) as the snapshot's literals. */
static int select_list(struct ferry_buf *b, const struct ferry_schema *sc, int n_user,
                       bool change_log, int64_t start, const struct rel *r, struct ferry_error *err)
{
    int rc = ferry_buf_printf(b, "SELECT ");
    for (int f = 0; f < sc->n_fields && rc == FERRY_OK; f++) {
        if (f >= n_user) {
            rc = ferry_buf_printf(b, ", ");
            if (rc == FERRY_OK) rc = snapshot_literal(b, change_log, &sc->fields[f], start);
            continue;
        }
        int c = col_index(r, sc->fields[f].name);
        if (c < 0)
            return ferry_error_set(err, FERRY_ENOTFOUND, "mysql",
                                   WHAT ": table %s has no column \"%s\" any more", r->from,
                                   sc->fields[f].name);
        enum ferry_type t;
        int p, scale;
        map_type(&r->cols[c], &t, &p, &scale);
        if (t != sc->fields[f].type)
            return ferry_error_set(err, FERRY_ECONFLICT, "mysql",
                                   WHAT ": table %s: column \"%s\" changed type since discovery",
                                   r->from, sc->fields[f].name);
        if (f > 0) rc = ferry_buf_printf(b, ", ");
        const char *pre = r->cols[c].kind == K_SPATIAL ? "ST_AsBinary(" : "";
        const char *post = r->cols[c].kind == K_SPATIAL ? ")"
                           : r->cols[c].kind == K_FLOAT ? " + 0e0"
                                                        : "";
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, "%s", pre);
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(b, sc->fields[f].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, "%s", post);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " FROM %s", r->from);
    return rc == FERRY_ENOMEM ? nomem(err) : rc;
}

/* Builds the JSON position form of one row's order columns (plan bounds). */
struct key_sink {
    json_t *vals;
};

/* zero_dates: null is never silent: the count goes to resource.rows_skipped and the log. */
static void report_zero_dates(const struct decoder *d, struct ferry_row_writer *rw)
{
    if (d->zero_count == 0) return;
    struct ferry_buf j;
    ferry_buf_init(&j, 0);
    ferry_buf_printf(&j, "[{\"at\":");
    ferry_buf_json_string(&j, d->r->from, strlen(d->r->from));
    ferry_buf_printf(&j, ",\"reason\":\"zero or invalid dates read as NULL (zero_dates: "
                         "null); the rows were kept\"}]");
    ferry_rw_report_skipped(rw, d->zero_count, j.data ? j.data : "[]");
    ferry_buf_release(&j);
    ferry_log(FERRY_LOG_WARN,
              WHAT ": table %s: %" PRId64 " zero or invalid dates read as NULL (zero_dates: null)",
              d->r->from, d->zero_count);
}

/* Runs sql and streams its rows into rw (or, with rw NULL, the first row's order columns
 * into *last_key in the position form: the plan's frozen bound). */
static int read_rows(struct src *s, const char *sql, const struct ferry_schema *sc,
                     const struct rel *r, struct ferry_row_writer *rw, json_t **last_key,
                     const int *ord, int n_ord, struct ferry_error *err)
{
    if (mysql_real_query(s->c, sql, strlen(sql)) != 0)
        return ferry__my_error(err, FERRY_ESOURCE, s->c, WHAT ": %s: reading table %s",
                               s->conn.peer, r->from);
    MYSQL_RES *res = mysql_use_result(s->c);
    if (res == NULL)
        return ferry__my_error(err, FERRY_ESOURCE, s->c, WHAT ": %s: reading table %s",
                               s->conn.peer, r->from);
    struct decoder d = {.s = s, .sc = sc, .r = r};
    int rc = FERRY_OK;
    int64_t row_no = 0;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(res);
        row_no++;
        if (rw == NULL) { /* plan bound: the order columns only (the SELECT lists them) */
            json_t *a = json_array();
            for (int i = 0; i < n_ord && a; i++) {
                const struct ferry_field *f = &sc->fields[ord[i]];
                json_t *v = NULL;
                if (row[i] == NULL) {
                    v = json_null();
                } else if (is_signed_int(f)) {
                    v = json_integer(strtoll(row[i], NULL, 10));
                } else if (f->type == FERRY_TYPE_DATE32 || f->type == FERRY_TYPE_TIMESTAMP_US ||
                           f->type == FERRY_TYPE_TIMESTAMPTZ_US) {
                    int64_t x = 0;
                    if (parse_datetime(row[i], len[i], f->type != FERRY_TYPE_DATE32, &x) != 0) {
                        rc = bad_value(&d, ord[i], row_no,
                                       "a cursor or key value that is no "
                                       "valid date",
                                       err);
                        break;
                    }
                    v = json_integer(x);
                } else if (f->type == FERRY_TYPE_FLOAT32 || f->type == FERRY_TYPE_FLOAT64) {
                    v = json_real(strtod(row[i], NULL));
                } else if (f->type == FERRY_TYPE_BINARY || f->type == FERRY_TYPE_BOOL) {
                    rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                                         WHAT ": table %s: column \"%s\" (%s) cannot be an "
                                              "incremental cursor",
                                         r->from, f->name, ferry_type_name(f->type));
                    break;
                } else {
                    v = json_stringn(row[i], len[i]);
                }
                json_array_append_new(a, v);
            }
            if (rc == FERRY_OK)
                *last_key = a;
            else
                json_decref(a);
            break;
        }
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int f = 0; f < sc->n_fields && rc == FERRY_OK; f++)
            rc = decode(&d, f, row[f], len[f], row_no, rw, err);
        if (rc != FERRY_OK) {
            ferry_rw_cancel_row(rw);
            break;
        }
        rc = ferry_rw_end(rw, err);
        if (rc != FERRY_OK) break;
    }
    if (rc == FERRY_OK && mysql_errno(s->c) != 0)
        rc = atomic_load(&s->canceled)
                 ? ferry_error_set(err, FERRY_ECANCELED, "mysql",
                                   WHAT ": read of table %s canceled", r->from)
                 : ferry__my_error(err, FERRY_ESOURCE, s->c, WHAT ": %s: reading table %s",
                                   s->conn.peer, r->from);
    /* Leaving a streamed result early: drop the connection instead of reading the rest of
     * the shard off the socket (mysql_free_result would drain it). */
    bool early = row != NULL && rw != NULL;
    if (early) drop_conn(s);
    mysql_free_result(res);
    if (early) {
        mysql_close(s->c);
        s->c = NULL;
    }
    if (rw != NULL) report_zero_dates(&d, rw);
    return rc;
}

/* The resume position's key as a jansson array (NULL when it has none) and whether its
 * shard is done. */
static int resume_key_of(const struct ferry_position *resume, json_t **key, bool *done,
                         struct ferry_error *err)
{
    *key = NULL;
    *done = resume != NULL && resume->done;
    if (resume == NULL || *done || !resume->has_key) return FERRY_OK;
    *key = ferry_position_key_json(resume);
    return *key ? FERRY_OK : nomem(err);
}

/* WHERE + ORDER BY of one shard of a frozen plan. */
static int build_where(struct src *s, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *sc, const struct rel *r, json_t *plan, json_t *sh,
                       json_t *resume_key, struct ferry_buf *b, int *ord, int *n_ord,
                       struct ferry_error *err)
{
    const char *mode = json_string_value(json_object_get(plan, "mode"));
    bool incremental = mode && strcmp(mode, "incremental") == 0;
    int n = order_fields(spec, sc, incremental, ord, MAX_ORDER);
    *n_ord = 0;
    int rc = FERRY_OK;
    if (incremental) {
        json_t *lo = json_object_get(plan, "lo"), *hi = json_object_get(plan, "hi");
        if (hi == NULL || json_is_null(hi))
            return ferry_buf_printf(b, " WHERE 0") == FERRY_OK ? FERRY_OK : nomem(err);
        *n_ord = n;
        rc = ferry_buf_printf(b, " WHERE ") == FERRY_OK ? FERRY_OK : nomem(err);
        for (int k = 0; k < spec->n_cursor && rc == FERRY_OK; k++) {
            rc = ferry__my_quote_ident(b, sc->fields[ord[k]].name, err);
            if (rc == FERRY_OK && ferry_buf_printf(b, " IS NOT NULL AND ") != FERRY_OK)
                rc = nomem(err);
        }
        json_t *from = resume_key ? resume_key : (json_is_null(lo) ? NULL : lo);
        json_t *lookback = json_object_get(plan, "lookback_from");
        if (rc == FERRY_OK && resume_key == NULL && json_is_integer(lookback)) {
            /* re-read from the lookback on: the first cursor column alone, inclusive */
            rc = ferry__my_quote_ident(b, sc->fields[ord[0]].name, err);
            if (rc == FERRY_OK)
                rc = ferry_buf_printf(b, " >= ") == FERRY_OK ? FERRY_OK : nomem(err);
            if (rc == FERRY_OK &&
                position_literal(s, lookback, sc->fields[ord[0]].type, b) != FERRY_OK)
                rc = ferry_error_set(err, FERRY_EINVAL, "mysql",
                                     WHAT ": table %s: bad lookback bound in the frozen plan",
                                     r->from);
            if (rc == FERRY_OK && ferry_buf_printf(b, " AND ") != FERRY_OK) rc = nomem(err);
            from = NULL;
        }
        if (rc == FERRY_OK && from) {
            rc = tuple_cond(s, b, sc, ord, n, ">", from, r->from, err);
            if (rc == FERRY_OK && ferry_buf_printf(b, " AND ") != FERRY_OK) rc = nomem(err);
        }
        if (rc == FERRY_OK) rc = tuple_cond(s, b, sc, ord, n, "<=", hi, r->from, err);
    } else {
        const char *keyset = json_string_value(json_object_get(plan, "keyset"));
        if (keyset == NULL) keyset = "none";
        if (strcmp(keyset, "range") == 0) {
            json_t *lo = json_object_get(sh, "lo"), *hi = json_object_get(sh, "hi");
            if (json_is_null(lo))
                return ferry_buf_printf(b, " WHERE 0") == FERRY_OK ? FERRY_OK : nomem(err);
            if (!json_is_integer(lo) || !json_is_integer(hi) || sc->n_key != 1)
                return ferry_error_set(err, FERRY_EINVAL, "mysql",
                                       WHAT ": table %s: bad shard in the frozen plan", r->from);
            json_t *from = resume_key ? json_array_get(resume_key, 0) : lo;
            if (!json_is_integer(from))
                return ferry_error_set(err, FERRY_EINVAL, "mysql",
                                       WHAT ": table %s: the resume position's key is not an "
                                            "integer",
                                       r->from);
            *n_ord = 1;
            rc = ferry_buf_printf(b, " WHERE ");
            if (rc == FERRY_OK) rc = ferry__my_quote_ident(b, sc->fields[ord[0]].name, err);
            if (rc == FERRY_OK)
                rc = ferry_buf_printf(b, " %s %" PRId64 " AND ",
                                      resume_key ? ">" : ">=", (int64_t)json_integer_value(from));
            if (rc == FERRY_OK) rc = ferry__my_quote_ident(b, sc->fields[ord[0]].name, err);
            if (rc == FERRY_OK)
                rc = ferry_buf_printf(b, " <= %" PRId64, (int64_t)json_integer_value(hi));
        } else if (strcmp(keyset, "tuple") == 0) {
            *n_ord = n;
            if (resume_key) {
                rc = ferry_buf_printf(b, " WHERE ");
                if (rc == FERRY_OK)
                    rc = tuple_cond(s, b, sc, ord, n, ">", resume_key, r->from, err);
            }
        } else {
            return FERRY_OK; /* no key: no order, no resume point */
        }
    }
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (rc == FERRY_OK && *n_ord > 0) {
        rc = ferry_buf_printf(b, " ORDER BY ") == FERRY_OK ? FERRY_OK : nomem(err);
        for (int i = 0; i < *n_ord && rc == FERRY_OK; i++) {
            if (i > 0 && ferry_buf_printf(b, ", ") != FERRY_OK) rc = nomem(err);
            if (rc == FERRY_OK) rc = ferry__my_quote_ident(b, sc->fields[ord[i]].name, err);
        }
    }
    return rc;
}

/* ---- cdc: the binary log (docs/internals/mysql.md, "CDC") ---------------------------- */

/* A binlog position as one integer: the file's sequence number (binlog.000012 -> 12) in the
 * high 32 bits, the byte offset in the low ones; it only grows along the log. */
#define BL_POS(seq, off) ((int64_t)(((uint64_t)(seq) << 32) | (uint32_t)(off)))
#define BL_SEQ(pos) ((uint32_t)((uint64_t)(pos) >> 32))
#define BL_OFF(pos) ((uint32_t)((uint64_t)(pos) & 0xffffffffu))

/* "binlog.000012" -> base "binlog", seq 12 */
static int split_binlog_name(const char *name, char *base, size_t cap, uint32_t *seq)
{
    const char *dot = strrchr(name, '.');
    if (dot == NULL || dot[1] == '\0' || (size_t)(dot - name) >= cap) return -1;
    char *e = NULL;
    errno = 0;
    unsigned long long v = strtoull(dot + 1, &e, 10);
    if (*e != '\0' || errno != 0 || v > UINT32_MAX) return -1;
    memcpy(base, name, (size_t)(dot - name));
    base[dot - name] = '\0';
    *seq = (uint32_t)v;
    return 0;
}

static int cdc_setting_error(struct ferry_error *err, const char *table, const char *peer,
                             const char *setting, const char *value, const char *want)
{
    return ferry_error_set(err, FERRY_ECONFIG, "mysql",
                           WHAT ": table %s: mode cdc needs the server setting %s = %s, but %s has "
                                "%s = %s (set it in the server's configuration, or SET GLOBAL %s "
                                "where it is dynamic, then plan again)",
                           table, setting, want, peer, setting, value ? value : "NULL", setting);
}

/* Plan time: rows events the decoder reads. MariaDB's log_bin_compress writes compressed
 * QUERY and rows events (types 165..171), MySQL's binlog_row_value_options = PARTIAL_JSON
 * partial JSON updates (type 39); the stream refuses both (on_event), so the plan does
 * first. A server without the setting (the other flavor) passes. */
static int cdc_check_events(struct src *s, const char *table, struct ferry_error *err)
{
    MYSQL_RES *res = NULL;
    int rc = query(s,
                   "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin_compress', "
                   "'binlog_row_value_options')",
                   &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row;
    while (rc == FERRY_OK && (row = mysql_fetch_row(res)) != NULL) {
        if (row[0] == NULL || row[1] == NULL) continue;
        if (!strcmp(row[0], "log_bin_compress") && strcasecmp(row[1], "OFF") != 0)
            rc = cdc_setting_error(err, table, s->conn.peer, "log_bin_compress", row[1], "OFF");
        else if (!strcmp(row[0], "binlog_row_value_options") && row[1][0] != '\0')
            rc = cdc_setting_error(err, table, s->conn.peer, "binlog_row_value_options", row[1],
                                   "''");
    }
    mysql_free_result(res);
    return rc;
}

/* Plan time: the binary log on, in ROW format with FULL row images. */
static int cdc_check_server(struct src *s, const char *table, struct ferry_error *err)
{
    MYSQL_RES *res = NULL;
    int rc = query(s, "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image",
                   &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row == NULL)
        rc = ferry_error_set(err, FERRY_ESOURCE, "mysql", WHAT ": %s: no server settings",
                             s->conn.peer);
    else if (row[0] == NULL || strcmp(row[0], "1") != 0)
        rc = cdc_setting_error(err, table, s->conn.peer, "log_bin", "OFF", "ON");
    else if (row[1] == NULL || strcasecmp(row[1], "ROW") != 0)
        rc = cdc_setting_error(err, table, s->conn.peer, "binlog_format", row[1], "ROW");
    else if (row[2] == NULL || strcasecmp(row[2], "FULL") != 0)
        rc = cdc_setting_error(err, table, s->conn.peer, "binlog_row_image", row[2], "FULL");
    mysql_free_result(res);
    return rc == FERRY_OK ? cdc_check_events(s, table, err) : rc;
}

/* SHOW MASTER STATUS, or SHOW BINARY LOG STATUS where MySQL 8.4 refuses the first
 * (ferry__my_log_status_sql): the log's end now, as a result. */
static int log_status(struct src *s, MYSQL_RES **res, const char *table, struct ferry_error *err)
{
    const char *sql = ferry__my_log_status_sql(NULL, 0);
    int rc = query(s, sql, res, table, err);
    const char *next = rc != FERRY_OK && s->c ? ferry__my_log_status_sql(sql, mysql_errno(s->c)) : NULL;
    return next != NULL ? query(s, next, res, table, err) : rc;
}

/* The end of the log now (log_status). */
static int cdc_log_end(struct src *s, const char *table, char *base, size_t cap, int64_t *pos,
                       struct ferry_error *err)
{
    MYSQL_RES *res = NULL;
    int rc = log_status(s, &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    uint32_t seq = 0;
    if (row == NULL || row[0] == NULL || row[1] == NULL ||
        split_binlog_name(row[0], base, cap, &seq) != 0)
        rc = ferry_error_set(err, FERRY_ESOURCE, "mysql",
                             WHAT ": %s: table %s: SHOW MASTER STATUS gave no binary log position",
                             s->conn.peer, table);
    else
        *pos = BL_POS(seq, strtoull(row[1], NULL, 10));
    mysql_free_result(res);
    return rc;
}

/* Whether the server still has binary log file number seq (SHOW BINARY LOGS). */
static int cdc_log_exists(struct src *s, const char *table, uint32_t seq, bool *exists,
                          struct ferry_error *err)
{
    MYSQL_RES *res = NULL;
    *exists = false;
    int rc = query(s, "SHOW BINARY LOGS", &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row;
    char base[256];
    uint32_t k;
    while ((row = mysql_fetch_row(res)) != NULL)
        if (row[0] && split_binlog_name(row[0], base, sizeof base, &k) == 0 && k == seq)
            *exists = true;
    mysql_free_result(res);
    return FERRY_OK;
}

/* A cdc position: n (file << 32 | offset), k (rows of the open transaction already
 * written) and g (the GTID set at n, or NULL: older positions, or a server without GTIDs). */
static int cdc_position(const struct ferry_position *p, int64_t *n, int64_t *k, char **g,
                        struct ferry_error *err)
{
    *n = p != NULL && p->has_n ? p->n : 0;
    *k = p != NULL ? p->k : 0;
    if (g) *g = NULL;
    if (p != NULL && p->tag != NULL && g && (*g = ferry_strdup(p->tag)) == NULL) return nomem(err);
    return FERRY_OK;
}

/* cdc_position of stored position text (a route checkpoint; NULL: none). */
static int cdc_saved_position(const char *text, int64_t *n, int64_t *k, char **g,
                              struct ferry_error *err)
{
    if (text == NULL) return cdc_position(NULL, n, k, g, err);
    struct ferry_position p;
    struct ferry_error e;
    if (ferry_position_decode(text, strlen(text), &p, &e) != FERRY_OK) {
        cdc_position(NULL, n, k, NULL, err);
        if (g) *g = NULL;
        if (e.code == FERRY_ENOMEM) return nomem(err);
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": the saved cdc position is not a binary log position (%s)",
                               e.message);
    }
    int rc = cdc_position(&p, n, k, g, err);
    ferry_position_clear(&p);
    return rc;
}

/* The resource's server_id (unique among the server's replicas): `server_id:` or one
 * derived from the pipeline and route, in 2^30 .. 2^31-1 (away from small hand-set ids). */
static int cdc_server_id(const struct ferry_resource_spec *spec, int64_t *id,
                         struct ferry_error *err)
{
    *id = 0;
    if (spec->node != NULL) {
        int rc = ferry_cfg_int(spec->node, "server_id", false, 1, UINT32_MAX, id, err);
        if (rc != FERRY_OK) return rc;
    }
    if (*id == 0) {
        char key[512];
        const struct ferry_read_context *run = ferry_read_context_of(spec);
        snprintf(key, sizeof key, "%s\n%s", run->pipeline ? run->pipeline : "",
                 run->route ? run->route : spec->table);
        *id = (int64_t)((1u << 30) | (ferry_crc32c(key, strlen(key)) & 0x3fffffffu));
    }
    return FERRY_OK;
}

/* The server_id of the pipeline's shared stream (one binlog connection for all its cdc
 * tables when they stream together): the source's `server_id:`, or one derived from the
 * pipeline name in 2^30 .. 2^31-1. */
static int64_t cdc_stream_server_id(const struct src *s, const struct ferry_resource_spec *spec)
{
    if (s->server_id > 0) return s->server_id;
    char key[512];
    const char *pipeline = ferry_read_context_of(spec)->pipeline;
    snprintf(key, sizeof key, "%s\n(binlog stream)", pipeline ? pipeline : "");
    return (int64_t)((1u << 30) | (ferry_crc32c(key, strlen(key)) & 0x3fffffffu));
}

#define SHARED_ROUTE "(binlog stream)"
static bool shared(const char *route)
{
    return strcmp(route, SHARED_ROUTE) == 0;
}

/* server_id must differ from the source server's own, from every replica the server lists
 * (SHOW SLAVE HOSTS, where the user may run it: REPLICATION MASTER ADMIN on MariaDB; else
 * skipped) and from the other cdc resources this instance planned (another route). */
static int cdc_check_server_id(struct src *s, const char *route, const char *table, int64_t id,
                               struct ferry_error *err)
{
    MYSQL_RES *res = NULL;
    int rc = query(s, "SELECT @@global.server_id", &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    bool own = row && row[0] && strtoll(row[0], NULL, 10) == id;
    mysql_free_result(res);
    if (own)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               WHAT ": table %s: server_id %" PRId64 " is the source server's own "
                                    "(%s): choose another `server_id:`",
                               table, id, s->conn.peer);
    if (mysql_query(s->c, "SHOW SLAVE HOSTS") == 0 && (res = mysql_store_result(s->c)) != NULL) {
        char other[300] = "";
        while ((row = mysql_fetch_row(res)) != NULL)
            if (row[0] && strtoll(row[0], NULL, 10) == id)
                snprintf(other, sizeof other, "%s:%s", row[1] ? row[1] : "?",
                         row[2] ? row[2] : "?");
        mysql_free_result(res);
        if (other[0])
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   WHAT ": table %s: server_id %" PRId64 " is used by the replica "
                                        "%s of %s: choose another `server_id:`",
                                   table, id, other, s->conn.peer);
    }
    for (int i = 0; i < s->n_ids; i++)
        if (s->ids[i].id == id && strcmp(s->ids[i].route, route) != 0)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   WHAT ": table %s: server_id %" PRId64
                                        " is also the server_id of %s%s%s (a cdc resource that "
                                        "streams alone has a connection of its own, and the "
                                        "server drops a second one with the same id)",
                                   table, id, shared(s->ids[i].route) ? "" : "route \"",
                                   shared(s->ids[i].route) ? "the pipeline's shared binlog stream "
                                                             "(the source's `server_id:`)"
                                                           : s->ids[i].route,
                                   shared(s->ids[i].route) ? "" : "\"");
    for (int i = 0; i < s->n_ids; i++)
        if (strcmp(s->ids[i].route, route) == 0) {
            s->ids[i].id = id;
            return FERRY_OK;
        }
    void *v = ferry_realloc(s->ids, (size_t)(s->n_ids + 1) * sizeof *s->ids);
    if (v == NULL) return nomem(err);
    s->ids = v;
    if ((s->ids[s->n_ids].route = ferry_strdup(route)) == NULL) return nomem(err);
    s->ids[s->n_ids++].id = id;
    return FERRY_OK;
}

/* The GTID state at binlog file:offset (MariaDB's BINLOG_GTID_POS, "" when the log has no
 * transaction yet); *gtid NULL where the server gives none (MySQL). */
static int cdc_gtid_at(struct src *s, const char *table, const char *file, uint32_t off,
                       char **gtid, struct ferry_error *err)
{
    *gtid = NULL;
    if (!mariadb_connection(s->c)) return FERRY_OK;
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int rc = ferry_buf_printf(&sql, "SELECT BINLOG_GTID_POS(");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &sql, file, strlen(file));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, ", %" PRIu32 ")", off);
    MYSQL_RES *res = NULL;
    rc = rc != FERRY_OK ? nomem(err) : query(s, sql.data, &res, table, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row && row[0] && (*gtid = ferry_strdup(row[0])) == NULL) rc = nomem(err);
    mysql_free_result(res);
    return rc;
}

/* Whether MariaDB can still send every transaction after GTID position g: its oldest binary
 * log begins with a Gtid_list event (the last GTID of each domain before that file); g must
 * hold each of those domains at or past it. */
static int cdc_gtid_servable(struct src *s, const char *table, const char *g, bool *ok,
                             struct ferry_error *err)
{
    *ok = false;
    MYSQL_RES *res = NULL;
    int rc = query(s, "SHOW BINARY LOGS", &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    rc = ferry_buf_printf(&sql, "SHOW BINLOG EVENTS IN ");
    if (rc == FERRY_OK && row && row[0])
        rc = ferry__my_quote_text(s->c, &sql, row[0], strlen(row[0]));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " LIMIT 8");
    bool have = row && row[0];
    mysql_free_result(res);
    res = NULL;
    rc = rc != FERRY_OK ? nomem(err) : have ? query(s, sql.data, &res, table, err) : FERRY_OK;
    ferry_buf_release(&sql);
    if (rc != FERRY_OK || !have) return rc;
    struct ferry_my_gtid_set saved, before;
    ferry__my_gtid_init(&saved);
    ferry__my_gtid_init(&before);
    rc = ferry__my_gtid_parse(&saved, g, err);
    bool found = false;
    while (rc == FERRY_OK && !found && (row = mysql_fetch_row(res)) != NULL) {
        if (row[2] == NULL || strcasecmp(row[2], "Gtid_list") != 0 || row[5] == NULL) continue;
        char list[1024];
        snprintf(list, sizeof list, "%s", row[5] + (row[5][0] == '['));
        list[strcspn(list, "]")] = '\0';
        rc = ferry__my_gtid_parse(&before, list, err);
        found = true;
    }
    if (rc == FERRY_OK && found && saved.flavor == FERRY_MY_GTID_MARIADB) {
        *ok = true;
        for (int i = 0; i < before.n_dom; i++) {
            int j = 0;
            while (j < saved.n_dom && saved.dom[j].domain != before.dom[i].domain)
                j++;
            if (j == saved.n_dom || saved.dom[j].seq < before.dom[i].seq) *ok = false;
        }
    }
    mysql_free_result(res);
    ferry__my_gtid_release(&saved);
    ferry__my_gtid_release(&before);
    return rc;
}

/* Whether MySQL can still send every transaction after GTID set g: gtid_mode ON and
 * gtid_purged (what the binary logs no longer hold) within g. The check the server makes
 * for COM_BINLOG_DUMP_GTID, made at plan time so the message names the setting. */
static int cdc_gtid_servable_mysql(struct src *s, const char *table, const char *g, bool *ok,
                                   struct ferry_error *err)
{
    *ok = false;
    MYSQL_RES *res = NULL;
    int rc = query(s, "SELECT @@global.gtid_mode, @@global.gtid_purged", &res, table, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    struct ferry_my_gtid_set saved, purged;
    ferry__my_gtid_init(&saved);
    ferry__my_gtid_init(&purged);
    struct ferry_error e;
    if (row && row[0] && row[1] && strcasecmp(row[0], "ON") == 0 &&
        ferry__my_gtid_parse(&saved, g, &e) == FERRY_OK && saved.flavor != FERRY_MY_GTID_MARIADB &&
        ferry__my_gtid_parse(&purged, row[1], &e) == FERRY_OK)
        *ok = ferry__my_gtid_subset(&purged, &saved);
    mysql_free_result(res);
    ferry__my_gtid_release(&saved);
    ferry__my_gtid_release(&purged);
    return FERRY_OK;
}

/* Whether text a and b are the same GTID set (canonical forms compared); unparsable: no. */
static bool same_gtids(const char *a, const char *b)
{
    struct ferry_my_gtid_set x, y;
    struct ferry_buf fx, fy;
    ferry__my_gtid_init(&x);
    ferry__my_gtid_init(&y);
    ferry_buf_init(&fx, 0);
    ferry_buf_init(&fy, 0);
    struct ferry_error e;
    bool same = ferry__my_gtid_parse(&x, a, &e) == FERRY_OK &&
                ferry__my_gtid_parse(&y, b, &e) == FERRY_OK &&
                ferry__my_gtid_format(&x, &fx) == FERRY_OK &&
                ferry__my_gtid_format(&y, &fy) == FERRY_OK && fx.len == fy.len &&
                (fx.len == 0 || memcmp(fx.data, fy.data, fx.len) == 0);
    ferry__my_gtid_release(&x);
    ferry__my_gtid_release(&y);
    ferry_buf_release(&fx);
    ferry_buf_release(&fy);
    return same;
}

/* A saved file:offset names a file this server has; with a saved GTID set, it must also be
 * this server's log (after a failover another server's files may carry the same numbers):
 * MariaDB's BINLOG_GTID_POS there must equal the saved set, else *ours = false and the
 * position is treated as gone (resume by GTID). Costs one read of the file up to the offset
 * on the server. */
static int cdc_same_log(struct src *s, const char *table, const char *base, int64_t start,
                        const char *gtid, bool *ours, struct ferry_error *err)
{
    *ours = true;
    if (!mariadb_connection(s->c)) return FERRY_OK;
    char file[300], *here = NULL;
    snprintf(file, sizeof file, "%s.%06" PRIu32, base, BL_SEQ(start));
    int rc = cdc_gtid_at(s, table, file, BL_OFF(start), &here, err);
    if (rc == FERRY_OK && (here == NULL || !same_gtids(here, gtid))) {
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": %s: table %s: %s:%" PRIu32 " is at GTID position %s on this server, "
                       "the saved position at %s: another server's log (a failover?)",
                  s->conn.peer, table, file, BL_OFF(start), here ? here : "(none)", gtid);
        *ours = false;
    }
    ferry_free(here);
    return rc;
}

/* A later run whose saved file is gone: resume by GTID when the server still has every
 * transaction after the saved GTID set; else "resnapshot required", or with
 * `on_position_lost: resnapshot` *first = true (plan as a first run). */
static int cdc_position_lost(struct src *s, const struct rel *r, uint32_t seq, const char *g,
                             int lost, bool *by_gtid, bool *first, struct ferry_error *err)
{
    *by_gtid = false;
    int rc = FERRY_OK;
    if (g != NULL && g[0] != '\0' && mariadb_connection(s->c))
        rc = cdc_gtid_servable(s, r->from, g, by_gtid, err);
    else if (g != NULL && !mariadb_connection(s->c)) /* ("" is MySQL's empty set) */
        rc = cdc_gtid_servable_mysql(s, r->from, g, by_gtid, err);
    if (rc != FERRY_OK) return rc;
    if (*by_gtid) {
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": %s: table %s: binary log file number %" PRIu32 " is gone; resuming "
                       "from GTID position %s",
                  s->conn.peer, r->from, seq, g);
        return FERRY_OK;
    }
    if (lost == 0)
        return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                               WHAT ": %s: table %s: resnapshot required: the binary log file "
                                    "number %" PRIu32 " holding the saved position was purged "
                                    "from the server%s (raise binlog_expire_logs_seconds or set "
                                    "`on_position_lost: resnapshot`)",
                               s->conn.peer, r->from, seq,
                               g && g[0] ? ", and so were transactions after its GTID position"
                                         : "");
    ferry_log(FERRY_LOG_WARN,
              WHAT ": %s: table %s: the saved binlog position was purged; "
                   "on_position_lost: resnapshot reads the table again",
              s->conn.peer, r->from);
    *first = true;
    return FERRY_OK;
}

/* A first run: the consistent snapshot the copy shards read (kept by src_snapshot, which
 * the runner calls after planning), the binlog position it was taken at, and its GTIDs. */
/* Under the global read lock on MySQL: with gtid_mode ON, gtid_executed is the GTID set at
 * the log position read with it (MySQL has no BINLOG_GTID_POS); any other mode keeps no set
 * (anonymous transactions would make it incomplete). MariaDB (the failpoint): nothing. */
static int snapshot_gtid_locked(struct src *s, const struct rel *r, struct ferry_error *err)
{
    ferry_free(s->snapshot_gtid);
    s->snapshot_gtid = NULL;
    if (mariadb_connection(s->c)) return FERRY_OK;
    MYSQL_RES *res = NULL;
    int rc = query(s, "SELECT @@global.gtid_mode, @@global.gtid_executed", &res, r->from, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row && row[0] && row[1] && strcasecmp(row[0], "ON") == 0 &&
        (s->snapshot_gtid = ferry_strdup(row[1])) == NULL)
        rc = nomem(err);
    mysql_free_result(res);
    return rc;
}

/* MySQL has no binlog_snapshot_file: the snapshot starts under a brief global read lock
 * (FLUSH TABLES WITH READ LOCK, the RELOAD privilege), the log's end is read while no
 * commit can happen, then the lock is released; the snapshot stays. Failpoint
 * my_snapshot_lock (error) takes this path on MariaDB too (tests). */
static int snapshot_with_lock(struct src *s, const struct rel *r, struct ferry_error *err)
{
    end_snapshot(s);
    int rc = ferry__my_exec(s->c, "FLUSH TABLES WITH READ LOCK", FERRY_ESOURCE, WHAT, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err,
                                  "%s: table %s: the server gives no binlog_snapshot_file, so the "
                                  "snapshot's binary log position needs a brief global read "
                                  "lock (grant RELOAD)",
                                  s->conn.peer, r->from);
    rc = begin_snapshot(s, err);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_OK) rc = log_status(s, &res, r->from, err);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    ferry_free(s->snapshot_id);
    s->snapshot_id =
        row && row[0] && row[1] ? ferry_asprintf("%s:%s", row[0], row[1]) : ferry_strdup("");
    if (res) mysql_free_result(res);
    if (rc == FERRY_OK) rc = snapshot_gtid_locked(s, r, err);
    struct ferry_error e;
    int urc = ferry__my_exec(s->c, "UNLOCK TABLES", FERRY_ESOURCE, WHAT, &e);
    if (rc == FERRY_OK && urc != FERRY_OK) {
        *err = e;
        rc = urc;
    }
    if (rc == FERRY_OK && s->snapshot_id == NULL) rc = nomem(err);
    return rc;
}

static int cdc_first_start(struct src *s, const struct rel *r, char *base, size_t cap,
                           int64_t *start, char **gtid, struct ferry_error *err)
{
    if (!s->cdc_snapshot) {
        end_snapshot(s);
        ferry_free(s->snapshot_gtid);
        s->snapshot_gtid = NULL;
        int rc = begin_snapshot(s, err);
        if (rc != FERRY_OK) return rc;
        ferry_free(s->snapshot_id);
        s->snapshot_id = snapshot_coordinates(s);
        if (s->snapshot_id == NULL) return nomem(err);
        if (s->snapshot_id[0] == '\0' || FERRY_FAILPOINT("my_snapshot_lock") == FERRY_FP_ERROR)
            rc = snapshot_with_lock(s, r, err);
        if (rc != FERRY_OK) return rc;
        s->cdc_snapshot = true;
    }
    char *colon = strrchr(s->snapshot_id, ':');
    uint32_t seq = 0;
    if (colon == NULL)
        return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                               WHAT ": %s: table %s: the snapshot has no binary log position "
                                    "(binlog_snapshot_file)",
                               s->conn.peer, r->from);
    *colon = '\0';
    int bad = split_binlog_name(s->snapshot_id, base, cap, &seq);
    uint32_t off = (uint32_t)strtoul(colon + 1, NULL, 10);
    int rc = bad ? FERRY_OK : cdc_gtid_at(s, r->from, s->snapshot_id, off, gtid, err);
    if (rc == FERRY_OK && *gtid == NULL && s->snapshot_gtid != NULL &&
        (*gtid = ferry_strdup(s->snapshot_gtid)) == NULL)
        rc = nomem(err);
    *colon = ':';
    if (bad)
        return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                               WHAT ": %s: bad binlog snapshot position %s", s->conn.peer,
                               s->snapshot_id);
    *start = BL_POS(seq, off);
    return rc;
}

/* The table's columns as planned ("columns" of a cdc plan): the stream decodes with them,
 * not with the catalog it finds when it starts (a DDL between discover and the stream start
 * is met in the log, where the schema_changes policy handles it). */
static json_t *columns_json(const struct rel *r)
{
    json_t *a = json_array();
    for (int i = 0; i < r->n_cols; i++) {
        const struct col *c = &r->cols[i];
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:s,s:s,s:b,s:b,s:b,s:b,s:i,s:i,s:i}", "name", c->name,
                         "data_type", c->data_type, "charset", c->charset, "column_type",
                         c->column_type, "unsigned", c->is_unsigned, "notnull", c->notnull,
                         "json", c->is_json, "binary", c->is_binary, "precision", c->precision,
                         "scale", c->scale, "key_pos", c->key_pos));
    }
    return a;
}

static int columns_from_plan(struct rel *r, const json_t *a, struct ferry_error *err)
{
    size_t n = json_array_size(a);
    struct col *cols = ferry_calloc(n + 1, sizeof *cols);
    if (cols == NULL) return nomem(err);
    int rc = FERRY_OK;
    for (size_t i = 0; i < n && rc == FERRY_OK; i++) {
        const json_t *j = json_array_get(a, i);
        struct col *c = &cols[i];
        const char *name = json_string_value(json_object_get(j, "name"));
        const char *dt = json_string_value(json_object_get(j, "data_type"));
        const char *cs = json_string_value(json_object_get(j, "charset"));
        const char *ct = json_string_value(json_object_get(j, "column_type"));
        if (!name || !dt || !cs || !ct) {
            rc = ferry_error_set(err, FERRY_EINVAL, "mysql",
                                 WHAT ": table %s: the frozen plan's columns are malformed",
                                 r->from);
            break;
        }
        c->name = ferry_strdup(name), c->data_type = ferry_strdup(dt);
        c->charset = ferry_strdup(cs), c->column_type = ferry_strdup(ct);
        if (!c->name || !c->data_type || !c->charset || !c->column_type) rc = nomem(err);
        c->is_unsigned = json_is_true(json_object_get(j, "unsigned"));
        c->notnull = json_is_true(json_object_get(j, "notnull"));
        c->is_json = json_is_true(json_object_get(j, "json"));
        c->is_binary = json_is_true(json_object_get(j, "binary"));
        c->precision = (int)json_integer_value(json_object_get(j, "precision"));
        c->scale = (int)json_integer_value(json_object_get(j, "scale"));
        c->key_pos = (int)json_integer_value(json_object_get(j, "key_pos"));
    }
    struct rel old = *r;
    old.db = old.table = old.from = NULL;
    r->cols = cols;
    r->n_cols = (int)n;
    rel_free(&old);
    return rc;
}

static int plan_cdc(struct src *s, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const struct rel *r,
                    const char *route_checkpoint, json_t *plan, struct ferry_error *err)
{
    static const char *const lost_words[] = {"error", "resnapshot", NULL};
    int lost = 0;
    int64_t server_id = 0, start = 0, skip = 0, end = 0;
    char *gtid = NULL, base[256] = "";
    bool by_gtid = false;
    int rc = cdc_check_server(s, r->from, err);
    if (rc == FERRY_OK && spec->node != NULL)
        rc = ferry_cfg_enum(spec->node, "on_position_lost", false, lost_words, &lost, err);
    if (rc == FERRY_OK) rc = cdc_server_id(spec, &server_id, err);
    const char *route = ferry_read_context_of(spec)->route;
    int64_t stream_id = cdc_stream_server_id(s, spec);
    if (rc == FERRY_OK)
        rc = cdc_check_server_id(s, route ? route : spec->table, r->from, server_id, err);
    if (rc == FERRY_OK) rc = cdc_check_server_id(s, SHARED_ROUTE, r->from, stream_id, err);
    if (rc == FERRY_OK) rc = cdc_saved_position(route_checkpoint, &start, &skip, &gtid, err);
    /* Tests change the source here: after discover, before the end a run streams to. */
    if (rc == FERRY_OK) rc = ferry_failpoint_check("cdc_before_end", err);
    if (rc == FERRY_OK) rc = cdc_log_end(s, r->from, base, sizeof base, &end, err);
    bool first = start == 0, exists = true;
    if (rc == FERRY_OK && !first) rc = cdc_log_exists(s, r->from, BL_SEQ(start), &exists, err);
    if (rc == FERRY_OK && !first && exists && gtid != NULL)
        rc = cdc_same_log(s, r->from, base, start, gtid, &exists, err);
    if (rc == FERRY_OK && !exists)
        rc = cdc_position_lost(s, r, BL_SEQ(start), gtid, lost, &by_gtid, &first, err);
    if (rc == FERRY_OK && first) {
        ferry_free(gtid);
        gtid = NULL;
        skip = 0;
        rc = cdc_first_start(s, r, base, sizeof base, &start, &gtid, err);
        if (rc == FERRY_OK) rc = plan_full(s, sc, r, plan, err);
    } else if (rc == FERRY_OK) {
        if (gtid == NULL && exists) { /* a position saved before GTIDs were kept */
            char file[300];
            snprintf(file, sizeof file, "%s.%06" PRIu32, base, BL_SEQ(start));
            rc = cdc_gtid_at(s, r->from, file, BL_OFF(start), &gtid, err);
        }
        json_object_set_new(plan, "shards", json_array());
    }
    if (rc != FERRY_OK) {
        ferry_free(gtid);
        return rc;
    }
    json_t *old = json_object_get(plan, "shards");
    json_t *shards = json_array();
    json_t *stream = json_object();
    json_object_set_new(stream, "stream", json_true());
    json_array_append_new(shards, stream);
    for (size_t i = 0; i < json_array_size(old); i++)
        json_array_append(shards, json_array_get(old, i));
    json_object_set_new(plan, "shards", shards);
    json_object_set_new(plan, "mode", json_string("cdc"));
    json_object_set_new(plan, "base", json_string(base));
    json_object_set_new(plan, "start", json_integer(start));
    json_object_set_new(plan, "skip", json_integer(skip));
    json_object_set_new(plan, "end", json_integer(end > start || by_gtid ? end : start));
    json_object_set_new(plan, "first", json_boolean(first));
    json_object_set_new(plan, "server_id", json_integer(server_id));
    json_object_set_new(plan, "stream_server_id", json_integer(stream_id));
    json_object_set_new(plan, "columns", columns_json(r));
    if (gtid != NULL) json_object_set_new(plan, "gtid", json_string(gtid));
    if (by_gtid) json_object_set_new(plan, "by_gtid", json_true());
    ferry_free(gtid);
    return FERRY_OK;
}

/* ---- cdc: the stream ---- */

struct stream {
    struct src *s;
    const struct ferry_resource_spec *spec;
    const struct ferry_schema *sc;
    const struct rel *r;
    struct ferry_row_writer *rw;
    struct decoder d;
    int *fmap;                     /* schema field -> table column */
    struct ferry_my_bl_table *tm;  /* our table's last TABLE_MAP */
    bool have_tm, in_txn, done, epoch_stop;
    struct ferry_my_bl_value *img[2]; /* before, after: one value per table column */
    uint8_t op;                    /* the rows event's type */
    const char *base;              /* the binlog files' base name */
    bool crc;                      /* events end with a 4-byte checksum */
    uint32_t seq;                  /* the binlog file being read */
    int64_t pos, end, last_commit, txn_rows, skip, changes;
    /* a change log's or soft_delete's columns (pipeline/cdc_columns.h) follow the first
     * n_user fields: `_ferry_lsn` is the position where the transaction's first rows event
     * of the table ends (ev_pos then; the log holds whole transactions in commit order), its
     * time the header timestamp of the event that opened the transaction (GTID or BEGIN);
     * floor: the position the stream started after, which every change must pass (a log
     * reset or another server's numbering would put changes before earlier ones) */
    int n_user;
    int64_t ev_pos, txn_lsn, txn_time_us, floor;
    uint32_t open_time;
    struct ferry_buf text;         /* one value's text form (reused) */
    /* GTIDs: the set at last_commit when known (the plan's or the resume position's; not on
     * MySQL first runs), the transaction in progress's GTID until its commit */
    struct ferry_my_gtid_set gtid;
    bool gtid_known;
    int pending; /* 0, or the flavor of the pending GTID */
    uint32_t p_domain, p_server;
    uint64_t p_seq;
    uint8_t p_uuid[16];
    struct ferry_buf gtid_text;
    char base_buf[256]; /* the base name after a ROTATE (another server's after a failover) */
    /* false while a dump started by GTID may still skip transactions already seen: the
     * events it sends then (the first file's Gtid_list, ...) are behind the GTID position,
     * so no position is taken from them; the first GTID event or heartbeat syncs */
    bool synced;
    int64_t stream_server_id; /* the shared stream's (my_hub.c) */
    /* schema changes (on_ddl): the stream ends after a change `evolve` applies at the next
     * run; under `freeze` the table's columns are read again and mapped by name (`now`) */
    bool schema_stop;
    struct rel now;
    /* columns the table gained after the plan read its catalog, as DDLs met in the stream
     * found them (NUL-separated): a table map may name them; any other name it has that the
     * plan's columns lack was dropped before the plan read the catalog (map_columns) */
    struct ferry_buf added;
    /* table column -> column of the rows events' images (-1: not in them: NULL), from the
     * last TABLE_MAP: by name when it carries names (binlog_row_metadata = FULL), else by
     * position; img holds img_cap values per image */
    int *bmap;
    int bmap_cap, img_cap;
    struct cs_map *cs_maps; /* character sets met in the stream (cs_map_of) */
    /* lag (progress_report): the header timestamp (unix seconds) of the last event with one,
     * of the last commit, and the furthest log position seen (a heartbeat's: the log's end) */
    uint32_t event_time, commit_time;
    int64_t seen;
};

static int on_bl_value(void *ctx, enum ferry_my_bl_image img, uint32_t col,
                       const struct ferry_my_bl_value *v, struct ferry_error *err)
{
    (void)err;
    struct stream *st = ctx;
    st->img[img][col] = *v;
    return FERRY_OK;
}

/* latin1 in MySQL is Windows-1252: 0x80..0x9f are printable there. */
static const uint16_t cp1252[32] = {
    0x20ac, 0xfffd, 0x201a, 0x0192, 0x201e, 0x2026, 0x2020, 0x2021, 0x02c6, 0x2030, 0x0160,
    0x2039, 0x0152, 0xfffd, 0x017d, 0xfffd, 0xfffd, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022,
    0x2013, 0x2014, 0x02dc, 0x2122, 0x0161, 0x203a, 0x0153, 0xfffd, 0x017e, 0x0178};

/* The n-th (1-based) label of enum('a','b''c',...) / set(...) into b; false when absent. */
static bool nth_label(const char *column_type, uint64_t n, struct ferry_buf *b)
{
    const char *p = strchr(column_type, '(');
    uint64_t i = 0;
    while (p != NULL && *p != '\0' && *p != ')') {
        p++; /* ( or , */
        if (*p != '\'') return false;
        p++;
        i++;
        for (; *p != '\0'; p++) {
            if (*p == '\'' && p[1] == '\'') {
                if (i == n) ferry_buf_append(b, "'", 1);
                p++;
            } else if (*p == '\'') {
                p++;
                break;
            } else if (*p == '\\' && p[1] != '\0') {
                p++;
                if (i == n) ferry_buf_append(b, p, 1);
            } else if (i == n) {
                ferry_buf_append(b, p, 1);
            }
        }
        if (i == n) return true;
    }
    return false;
}

/* A character set's bytes in UTF-8, as the server itself converts them (my_charset.h): the
 * tables are read once per set and stream from the server (its single-byte tables differ
 * from iconv's in greek, hebrew, koi8u, cp866, cp1256, macroman; its multi-byte ones have
 * their own vendor extensions); a sequence the set does not define (the server would print
 * '?') is refused by the stream rather than guessed. */
struct cs_map {
    struct cs_map *next;
    char name[64];
    bool usable; /* false: not readable (a failed query, no memory): values refused */
    struct ferry_my_cs cs;
};

/* Reads part of m's table: one query of the server's conversion of each entry's bytes
 * (entries numbered by a recursive CTE: no Sequence engine needed, MySQL 8 has none). */
static int cs_part_read(struct src *s, struct cs_map *m, enum ferry_my_cs_part part)
{
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    ferry_buf_printf(&sql,
                     "WITH RECURSIVE b(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM b WHERE n < "
                     "255) SELECT i, HEX(CONVERT(CONVERT(%s USING %s) USING utf8mb4)) FROM "
                     "(SELECT hi.n * 256 + lo.n AS i FROM b hi, b lo) x WHERE i < %" PRIu32,
                     ferry__my_cs_bytes_sql(part), m->name, ferry__my_cs_count(part));
    MYSQL_RES *res = NULL;
    struct ferry_error e;
    int rc = ferry_buf_failed(&sql) ? FERRY_ENOMEM : ensure_conn(s, &e);
    if (rc == FERRY_OK) rc = query(s, sql.data, &res, m->name, &e);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row;
    uint8_t u[8];
    while ((row = mysql_fetch_row(res)) != NULL) {
        const char *h = row[1] ? row[1] : "";
        size_t n = strlen(h) / 2;
        for (size_t k = 0; k < n && k < sizeof u; k++)
            u[k] = (uint8_t)strtoul((char[3]){h[2 * k], h[2 * k + 1], 0}, NULL, 16);
        ferry__my_cs_set(&m->cs, part, (uint32_t)strtoul(row[0], NULL, 10), u,
                         n > sizeof u ? 0 : n);
    }
    mysql_free_result(res);
    return FERRY_OK;
}

static int cs_map_read(struct src *s, struct cs_map *m)
{
    enum ferry_my_cs_kind kind = ferry__my_cs_kind(m->name);
    int maxlen = 1;
    if (kind == FERRY_MY_CS_TABLE) {
        char sql[160];
        MYSQL_RES *res = NULL;
        struct ferry_error e;
        snprintf(sql, sizeof sql,
                 "SELECT MAXLEN FROM information_schema.CHARACTER_SETS WHERE "
                 "CHARACTER_SET_NAME = '%s'", m->name);
        int rc = ensure_conn(s, &e);
        if (rc == FERRY_OK) rc = query(s, sql, &res, m->name, &e);
        if (rc != FERRY_OK) return rc;
        MYSQL_ROW row = mysql_fetch_row(res);
        maxlen = row != NULL && row[0] != NULL ? (int)strtol(row[0], NULL, 10) : 0;
        mysql_free_result(res);
        if (maxlen < 1) return FERRY_ENOTFOUND;
    }
    int rc = ferry__my_cs_init(&m->cs, m->name, kind, maxlen);
    for (int part = FERRY_MY_CS_ONE; rc == FERRY_OK && part <= FERRY_MY_CS_FOUR; part++)
        if (ferry__my_cs_needs(&m->cs, (enum ferry_my_cs_part)part))
            rc = cs_part_read(s, m, (enum ferry_my_cs_part)part);
    m->usable = rc == FERRY_OK;
    return rc;
}

/* The map of character set `name` (found, or read from the server on first use); NULL when
 * it cannot be used (an odd name, no memory, a failed query). */
static const struct cs_map *cs_map_of(struct stream *st, const char *name)
{
    for (struct cs_map *m = st->cs_maps; m != NULL; m = m->next)
        if (strcmp(m->name, name) == 0) return m->usable ? m : NULL;
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof st->cs_maps->name ||
        strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
        return NULL;
    struct cs_map *m = ferry_calloc(1, sizeof *m);
    if (m == NULL) return NULL;
    memcpy(m->name, name, n + 1);
    if (cs_map_read(st->s, m) != FERRY_OK) m->usable = false;
    m->next = st->cs_maps;
    st->cs_maps = m;
    return m->usable ? m : NULL;
}

/* One binlog value in the text form the full read's decode() takes (the server's text
 * protocol form), so both paths apply the same type rules. *null: a NULL. */
static int bl_text(struct stream *st, int c, const struct ferry_my_bl_value *v, bool *null,
                   const char *why[1])
{
    const struct col *col = &st->r->cols[c];
    struct ferry_buf *b = &st->text;
    b->len = 0;
    *null = false;
    switch (v->kind) {
    case FERRY_MY_BL_NULL:
        *null = true;
        return 0;
    case FERRY_MY_BL_INT: {
        uint64_t u = v->u;
        if (!col->is_unsigned && v->width < 8 && (u >> (8 * v->width - 1)) & 1)
            u |= ~UINT64_C(0) << (8 * v->width); /* sign-extend */
        if (col->is_unsigned)
            ferry_buf_printf(b, "%" PRIu64, u);
        else
            ferry_buf_printf(b, "%" PRId64, (int64_t)u);
        return 0;
    }
    case FERRY_MY_BL_FLOAT:
        ferry_buf_printf(b, "%.17g", v->d);
        return 0;
    case FERRY_MY_BL_DECIMAL:
        ferry_buf_printf(b, "%s", v->text);
        return 0;
    case FERRY_MY_BL_DATE:
        ferry_buf_printf(b, "%04d-%02d-%02d", v->year, v->month, v->day);
        return 0;
    case FERRY_MY_BL_DATETIME:
        ferry_buf_printf(b, "%04d-%02d-%02d %02d:%02d:%02d.%06d", v->year, v->month, v->day,
                         v->hour, v->minute, v->second, v->micro);
        return 0;
    case FERRY_MY_BL_TIMESTAMP: {
        if (v->u == 0 && v->micro == 0) { /* the zero timestamp */
            ferry_buf_printf(b, "0000-00-00 00:00:00");
            return 0;
        }
        int64_t days = (int64_t)(v->u / 86400), sec = (int64_t)(v->u % 86400);
        /* civil from days (UTC, the session's time zone in the full read) */
        int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
        int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
        int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
        int64_t y = yoe + era * 400 + (m <= 2);
        ferry_buf_printf(b, "%04" PRId64 "-%02" PRId64 "-%02" PRId64 " %02d:%02d:%02d.%06d", y,
                         m, d, (int)(sec / 3600), (int)(sec / 60 % 60), (int)(sec % 60),
                         v->micro);
        return 0;
    }
    case FERRY_MY_BL_TIME: { /* as the server prints TIME(fsp) */
        int fsp = st->tm->types[c] == 19 ? st->tm->meta[c] : 0;
        ferry_buf_printf(b, "%s%02d:%02d:%02d", v->negative ? "-" : "", v->hour, v->minute,
                         v->second);
        if (fsp > 0) {
            char f[8];
            snprintf(f, sizeof f, "%06d", v->micro);
            ferry_buf_printf(b, ".%.*s", fsp, f);
        }
        return 0;
    }
    case FERRY_MY_BL_YEAR:
        ferry_buf_printf(b, "%04d", v->year);
        return 0;
    case FERRY_MY_BL_BIT: {
        int nb = (col->precision + 7) / 8;
        for (int i = nb - 1; i >= 0; i--) {
            char ch = (char)((v->u >> (8 * i)) & 0xff);
            ferry_buf_append(b, &ch, 1);
        }
        return 0;
    }
    case FERRY_MY_BL_ENUM:
        if (v->u == 0) return 0; /* the empty error value */
        if (!nth_label(col->column_type, v->u, b)) {
            *why = "enum index outside the column's labels";
            return -1;
        }
        return 0;
    case FERRY_MY_BL_SET: {
        bool any = false;
        for (uint64_t i = 0; i < 64; i++) {
            if (!((v->u >> i) & 1)) continue;
            if (any) ferry_buf_append(b, ",", 1);
            any = true;
            if (!nth_label(col->column_type, i + 1, b)) {
                *why = "set member outside the column's labels";
                return -1;
            }
        }
        return 0;
    }
    case FERRY_MY_BL_BYTES: {
        if (v->mysql_json && !is(col->data_type, "json")) {
            *why = "binary JSON (type 245) logged for a column that is not MySQL's JSON";
            return -1;
        }
        if (v->mysql_json) { /* MySQL 8: binary JSON, printed as MySQL prints it */
            struct ferry_error jerr;
            if (ferry__my_json_to_text(v->p, v->n, b, &jerr) != FERRY_OK) {
                *why = "MySQL binary JSON that does not decode";
                return -1;
            }
            return 0;
        }
        const uint8_t *p = v->p;
        size_t n = v->n;
        if (col->kind == K_SPATIAL) { /* storage form: 4-byte SRID, then WKB */
            if (n < 4) {
                *why = "spatial value shorter than its SRID";
                return -1;
            }
            p += 4;
            n -= 4;
        }
        const char *cs = col->charset;
        if (cs[0] == '\0' || strcmp(cs, "binary") == 0 || strncmp(cs, "utf8", 4) == 0 ||
            strcmp(cs, "ascii") == 0) {
            if (col->is_binary && is(col->data_type, "binary")) {
                /* BINARY(n) is logged without its trailing zero bytes */
                ferry_buf_append(b, p, n);
                unsigned m = st->tm->meta[c], b0 = m >> 8, b1 = m & 0xff;
                size_t max = (b0 & 0x30) != 0x30 ? ((((b0 & 0x30) ^ 0x30) << 4) | b1) : b1;
                for (size_t i = n; i < max; i++) ferry_buf_append(b, "", 1);
                return 0;
            }
            ferry_buf_append(b, p, n);
            return 0;
        }
        if (strcmp(cs, "latin1") == 0) {
            for (size_t i = 0; i < n; i++)
                ferry__my_put_utf8(b, p[i] >= 0x80 && p[i] < 0xa0 ? cp1252[p[i] - 0x80] : p[i]);
            return 0;
        }
        const struct cs_map *m = cs_map_of(st, cs);
        size_t bad = 0;
        if (m != NULL && ferry__my_cs_to_utf8(&m->cs, p, n, b, &bad) == FERRY_EINVAL) {
            *why = "a byte its character set does not define (a sequence the server "
                   "converts to '?')";
            return -1;
        }
        if (m != NULL) return 0;
        *why = "character set not converted from the binary log (its conversion table could "
               "not be read from the server)";
        return -1;
    }
    }
    *why = "unknown value";
    return -1;
}

/* The first change of a transaction: its position and time (struct stream). A change log
 * refuses a position at or before the one it started after. */
static int open_txn(struct stream *st, struct ferry_error *err)
{
    st->txn_lsn = st->ev_pos;
    st->txn_time_us = (int64_t)(st->open_time ? st->open_time : st->event_time) * 1000000;
    if (!ferry_read_context_of(st->spec)->change_log || st->txn_lsn > st->floor) return FERRY_OK;
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": %s: table %s: a change at binlog %s.%06" PRIu32 ":%" PRIu32
                                " comes before the position the change log reached (%06" PRIu32
                                ":%" PRIu32 "): the binary log was reset, or this is another "
                                "server (a failover) whose positions would not order the log "
                                "(`_ferry_lsn`); start a new change log (`ferry cdc drop`, "
                                "empty the destination, run)",
                           st->s->conn.peer, st->r->from, st->base, BL_SEQ(st->txn_lsn),
                           BL_OFF(st->txn_lsn), BL_SEQ(st->floor), BL_OFF(st->floor));
}

static int write_image(struct stream *st, enum ferry_op op, const struct ferry_my_bl_value *vals,
                       struct ferry_error *err)
{
    struct ferry_row_writer *rw = st->rw;
    if (st->txn_rows++ == 0) {
        int rc = open_txn(st, err);
        if (rc != FERRY_OK) return rc;
    }
    if (st->skip > 0) { /* written before an interruption inside this transaction */
        st->skip--;
        return FERRY_OK;
    }
    st->changes++;
    ferry_rw_set_suboffset(rw, st->txn_rows);
    ferry_rw_begin(rw, ferry_read_context_of(st->spec)->change_log ? FERRY_OP_INSERT : op);
    for (int f = 0; f < st->n_user; f++) {
        int c = st->fmap[f];
        int b = c >= 0 ? st->bmap[c] : -1;
        bool null = b < 0; /* a column dropped (freeze), or added after these changes */
        const char *why = NULL;
        if (!null && bl_text(st, c, &vals[b], &null, &why) != 0) {
            ferry_rw_cancel_row(rw);
            return bad_value(&st->d, f, st->changes, why, err);
        }
        if (null) {
            ferry_rw_null(rw);
            continue;
        }
        int rc = decode(&st->d, f, st->text.data ? st->text.data : "", st->text.len, st->changes,
                        rw, err);
        if (rc != FERRY_OK) {
            ferry_rw_cancel_row(rw);
            return rc;
        }
    }
    const struct ferry_read_context *ctx = ferry_read_context_of(st->spec);
    ferry_cdc_put_change(rw, ctx->change_log, ctx->soft_delete != NULL, op, st->txn_lsn,
                         st->txn_time_us, st->txn_rows);
    return ferry_rw_end(rw, err);
}

static bool key_changed(const struct stream *st)
{
    for (int c = 0; c < st->r->n_cols; c++) {
        if (st->r->cols[c].key_pos == 0 || st->bmap[c] < 0) continue;
        const struct ferry_my_bl_value *a = &st->img[0][st->bmap[c]], *b = &st->img[1][st->bmap[c]];
        if (a->kind != b->kind || a->u != b->u || a->n != b->n ||
            strcmp(a->text, b->text) != 0 || (a->n && memcmp(a->p, b->p, a->n) != 0) ||
            a->year != b->year || a->month != b->month || a->day != b->day ||
            a->hour != b->hour || a->minute != b->minute || a->second != b->second ||
            a->micro != b->micro || a->negative != b->negative || a->d != b->d)
            return true;
    }
    return false;
}

static int on_bl_row_end(void *ctx, struct ferry_error *err)
{
    struct stream *st = ctx;
    switch (st->op) {
    case FERRY_MY_BL_WRITE_ROWS_V1:
    case FERRY_MY_BL_WRITE_ROWS_V2:
        return write_image(st, FERRY_OP_INSERT, st->img[1], err);
    case FERRY_MY_BL_DELETE_ROWS_V1:
    case FERRY_MY_BL_DELETE_ROWS_V2:
        return write_image(st, FERRY_OP_DELETE, st->img[1], err);
    default: { /* an update; one that changes the key is a delete and an insert (a change
                * log too: merged by key, the old key must go) */
        if (!key_changed(st)) return write_image(st, FERRY_OP_UPDATE, st->img[1], err);
        int rc = write_image(st, FERRY_OP_DELETE, st->img[0], err);
        return rc == FERRY_OK ? write_image(st, FERRY_OP_INSERT, st->img[1], err) : rc;
    }
    }
}

static void cdc_commit(struct stream *st, int64_t pos);

/* A commit: the pending GTID joins the set, which becomes the position's "g". A set that
 * cannot be kept (out of memory, mixed flavors) is dropped: positions then carry file:offset
 * only, never a wrong set. */
static void gtid_commit(struct stream *st)
{
    int pending = st->pending;
    st->pending = 0;
    if (!st->gtid_known || pending == 0) return;
    struct ferry_error e;
    int rc = pending == FERRY_MY_GTID_MARIADB
                 ? ferry__my_gtid_add_mariadb(&st->gtid, st->p_domain, st->p_server, st->p_seq, &e)
                 : ferry__my_gtid_add_mysql(&st->gtid, st->p_uuid, st->p_seq, &e);
    ferry_buf_reset(&st->gtid_text);
    if (rc == FERRY_OK) rc = ferry__my_gtid_format(&st->gtid, &st->gtid_text);
    if (rc != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, WHAT ": table %s: GTIDs no longer tracked (%s)", st->r->from,
                  rc == FERRY_ENOMEM ? "out of memory" : e.message);
        st->gtid_known = false;
        ferry_buf_reset(&st->gtid_text);
    }
    ferry_rw_set_offset_tag(st->rw, st->gtid_text.data ? st->gtid_text.data : "",
                            st->gtid_text.len);
}

/* A transaction without a GTID (MySQL with gtid_mode other than ON): a tracked set would
 * miss it and claim a resume by GTID from there had seen everything, so the set is dropped
 * (positions carry file:offset only from here on). */
static void gtid_forget(struct stream *st)
{
    if (!st->gtid_known) return;
    ferry_log(FERRY_LOG_WARN,
              WHAT ": table %s: a transaction without a GTID in the binary log (gtid_mode is "
                   "not ON): GTIDs no longer tracked",
              st->r->from);
    st->gtid_known = false;
    st->pending = 0;
    ferry_buf_reset(&st->gtid_text);
    ferry_rw_set_offset_tag(st->rw, "", 0);
}

/* GTID events open a transaction: its id is applied at the commit. */
static int on_gtid(struct stream *st, const struct ferry_my_bl_header *h, const uint8_t *body,
                   size_t n, struct ferry_error *err)
{
    if (h->type == FERRY_MY_BL_MARIADB_GTID) {
        uint8_t flags2 = 0;
        int rc = ferry__my_gtid_event_mariadb(body, n, &st->p_seq, &st->p_domain, &flags2, err);
        if (rc != FERRY_OK) return rc;
        st->p_server = h->server_id;
        st->open_time = h->timestamp;
        st->pending = FERRY_MY_GTID_MARIADB;
        st->synced = true;
        /* flags2 bit 0 (FL_STANDALONE): a statement without BEGIN/COMMIT (DDL) */
        if (!(flags2 & 1)) st->in_txn = true;
        return FERRY_OK;
    }
    int rc = ferry__my_gtid_event_mysql(body, n, st->p_uuid, &st->p_seq, err);
    if (rc == FERRY_OK) st->pending = FERRY_MY_GTID_MYSQL, st->synced = true;
    if (rc == FERRY_OK) st->open_time = h->timestamp;
    return rc;
}

/* A heartbeat (sent only while the server waits for new events) at or past the frozen end,
 * outside a transaction: everything up to there was sent, so the run is done there (a
 * stream resumed by GTID has no commit of its own to see when nothing is new). */
static void on_heartbeat(struct stream *st, const struct ferry_my_bl_header *h, const uint8_t *body,
                         size_t n)
{
    char file[300];
    int k = snprintf(file, sizeof file, "%s.%06" PRIu32, st->base, st->seq);
    if (st->in_txn || h->log_pos == 0 || k <= 0 || (size_t)k > n ||
        memcmp(body, file, (size_t)k) != 0)
        return;
    int64_t pos = BL_POS(st->seq, h->log_pos);
    if (pos >= st->end && pos >= st->last_commit) {
        st->synced = true;
        cdc_commit(st, pos);
    }
}

/* The stream's position and lag for src_cdc_progress: bytes from the last commit to the
 * log's end as far as known (the plan's end, or a later position seen): exact within one
 * file; when the end is in a later file, the end's offset in it (the files between are not
 * counted: a lower bound); seconds since the last commit's event was logged (its header
 * timestamp; 0 once caught up). */
static void progress_report(struct stream *st)
{
    int64_t pos = st->last_commit, ahead = st->seen > st->end ? st->seen : st->end;
    long long bytes = 0, us = 0;
    if (!st->done && ahead > pos)
        bytes = BL_SEQ(ahead) == BL_SEQ(pos) ? (long long)BL_OFF(ahead) - BL_OFF(pos)
                                             : (long long)BL_OFF(ahead);
    if (!st->done && st->commit_time > 0) {
        us = (long long)(ferry_now_wall_us() - (int64_t)st->commit_time * 1000000);
        if (us < 0) us = 0;
    }
    atomic_store(&st->s->progress.position, (long long)pos);
    atomic_store(&st->s->progress.lag_bytes, bytes);
    atomic_store(&st->s->progress.lag_us, us);
}

static void cdc_commit(struct stream *st, int64_t pos)
{
    if (!st->synced) return;
    if (st->event_time > 0) st->commit_time = st->event_time;
    gtid_commit(st);
    st->in_txn = false;
    st->txn_rows = 0;
    st->open_time = 0;
    st->skip = 0;
    ferry_rw_set_suboffset(st->rw, 0);
    if (pos > st->last_commit) {
        st->last_commit = pos;
        ferry_rw_set_offset(st->rw, pos);
    }
    if (pos >= st->end) st->done = true;
    progress_report(st);
    int64_t epoch_rows = ferry_read_context_of(st->spec)->cdc_epoch_rows;
    if (!st->done && epoch_rows > 0 && st->changes >= epoch_rows)
        st->epoch_stop = true;
}

/* Case-insensitive: whether statement mentions name as a word (DDL detection). */
static bool mentions(const char *stmt, size_t n, const char *name)
{
    size_t k = strlen(name);
    for (size_t i = 0; k > 0 && i + k <= n; i++) {
        if (strncasecmp(stmt + i, name, k) != 0) continue;
        char before = i > 0 ? stmt[i - 1] : ' ', after = i + k < n ? stmt[i + k] : ' ';
        bool wb = !(isalnum((unsigned char)before) || before == '_' || before == '$');
        bool wa = !(isalnum((unsigned char)after) || after == '_' || after == '$');
        if (wb && wa) return true;
    }
    return false;
}

/* ---- cdc: schema changes (`schema_changes:`, pipeline/schema_change.h) ---- */

/* The routes whose stream stopped after a schema change in this process (the stream may
 * run on another instance than the planning one, which cdc_ack is called on). */
static pthread_mutex_t stops_lock = PTHREAD_MUTEX_INITIALIZER;
static char **stops;
static int n_stops;

/* Records route (add), or says whether it is recorded and forgets it (!add). */
static bool schema_stopped(const char *route, bool take)
{
    bool found = false;
    pthread_mutex_lock(&stops_lock);
    for (int i = 0; i < n_stops && !found; i++)
        if (strcmp(stops[i], route) == 0) {
            found = true;
            if (take) {
                ferry_free(stops[i]);
                stops[i] = stops[--n_stops];
            }
        }
    if (!take && !found) {
        void *v = ferry_realloc(stops, (size_t)(n_stops + 1) * sizeof *stops);
        char *copy = ferry_strdup(route);
        if (v != NULL) stops = v;
        if (v != NULL && copy != NULL)
            stops[n_stops++] = copy;
        else
            ferry_free(copy); /* out of memory: the next run (cron, --follow) goes on */
    }
    pthread_mutex_unlock(&stops_lock);
    return found;
}

static int ddl_error(struct stream *st, const struct ferry_my_bl_header *h, const char *q,
                     size_t n, const char *why, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": table %s: a schema change (DDL) in the binary log at "
                           "%s.%06" PRIu32 ":%" PRIu32 " touches the table: \"%.*s\"; %s; the "
                           "stream stops here (positions up to the last commit are kept)",
                           st->r->from, st->base, st->seq, h->log_pos, (int)(n > 200 ? 200 : n),
                           q, why);
}

struct ddl_diff {
    int stop, error; /* changes whose action is stop / error */
    char column[200], change[300];
};

static void ddl_note(struct stream *st, struct ddl_diff *d, const char *column,
                     enum ferry_schema_change_kind k, const char *old_t, const char *new_t)
{
    enum ferry_schema_changes p = ferry_read_context_of(st->spec)->schema_changes;
    enum ferry_schema_action a = ferry_schema_change_decide(p, k);
    const char *route = ferry_read_context_of(st->spec)->route;
    ferry_schema_change_note(route ? route : st->spec->table, st->r->from, column, k, old_t, new_t,
                             p, a);
    if (a == FERRY_SC_STOP) d->stop++;
    if (a == FERRY_SC_ERROR && d->error++ == 0) {
        snprintf(d->column, sizeof d->column, "%s", column);
        snprintf(d->change, sizeof d->change, "column \"%s\" %s (%s -> %s) under schema_changes: %s",
                 column, ferry_schema_change_kind_name(k), old_t ? old_t : "-",
                 new_t ? new_t : "-", ferry_schema_changes_name(p));
    }
}

/* The run's schema against the table's columns now: each difference noted and decided. */
static void ddl_compare(struct stream *st, const struct rel *now, struct ddl_diff *d)
{
    const struct ferry_schema *sc = st->sc;
    for (int f = 0; f < st->n_user; f++) {
        const struct ferry_field *fld = &sc->fields[f];
        int c = col_index(now, fld->name);
        char was[64], is[64];
        ferry_field_type_text(fld, was, sizeof was);
        if (c < 0) {
            ddl_note(st, d, fld->name, FERRY_SC_DROPPED, was, NULL);
            continue;
        }
        struct ferry_field nf = *fld;
        map_type(&now->cols[c], &nf.type, &nf.precision, &nf.scale);
        if (nf.type == fld->type && nf.precision == fld->precision && nf.scale == fld->scale)
            continue;
        ferry_field_type_text(&nf, is, sizeof is);
        ddl_note(st, d, fld->name, ferry_type_widens(fld, &nf) ? FERRY_SC_WIDENED : FERRY_SC_RETYPED,
                 was, is);
    }
    for (int c = 0; c < now->n_cols; c++) {
        if (ferry_schema_find(sc, now->cols[c].name) >= 0) continue;
        struct ferry_field nf = {0};
        char is[64];
        map_type(&now->cols[c], &nf.type, &nf.precision, &nf.scale);
        ferry_field_type_text(&nf, is, sizeof is);
        ddl_note(st, d, now->cols[c].name, FERRY_SC_ADDED, NULL, is);
    }
}

/* `freeze`: the stream goes on with the table's columns now, mapped by name (fields without
 * a column are NULL from now on); the next TABLE_MAP must match them. */
static int ddl_remap(struct stream *st, struct rel *now, struct ferry_error *err)
{
    (void)err;
    for (int f = 0; f < st->sc->n_fields; f++)
        st->fmap[f] = col_index(now, st->sc->fields[f].name);
    rel_free(&st->now);
    st->now = *now;
    st->r = &st->now;
    st->d.r = &st->now;
    st->have_tm = false;
    return FERRY_OK;
}

/* Whether a DDL met in the stream found column `name` added after the plan. */
static bool was_added(const struct stream *st, const char *name)
{
    for (size_t i = 0; i < st->added.len; i += strlen(st->added.data + i) + 1)
        if (strcmp(st->added.data + i, name) == 0) return true;
    return false;
}

/* The columns of `now` (a DDL's re-read) that the plan's lack join st->added. */
static int note_added(struct stream *st, const struct rel *now)
{
    for (int c = 0; c < now->n_cols; c++) {
        const char *name = now->cols[c].name;
        if (col_index(st->r, name) >= 0 || was_added(st, name)) continue;
        if (ferry_buf_append(&st->added, name, strlen(name) + 1) != FERRY_OK) return FERRY_ENOMEM;
    }
    return FERRY_OK;
}

/* Whether the table maps carry column names (binlog_row_metadata = FULL). */
static bool names_logged(struct stream *st)
{
    if (st->have_tm) return st->tm->has_names;
    MYSQL_RES *res = NULL;
    struct ferry_error e;
    if (query(st->s, "SELECT @@global.binlog_row_metadata", &res, st->r->from, &e) != FERRY_OK)
        return false;
    MYSQL_ROW row = mysql_fetch_row(res);
    bool full = row && row[0] && strcasecmp(row[0], "FULL") == 0;
    mysql_free_result(res);
    return full;
}

/* A DDL statement that names the table: the columns are read again and compared with the
 * run's schema; `fail` stops at any DDL; each difference follows the policy: error, stop
 * after the DDL (evolve: the next run's discover and sink take the change in), or go on
 * (freeze, or nothing changed for ferry). */
static int on_ddl(struct stream *st, const struct ferry_my_bl_header *h, const char *q, size_t n,
                  struct ferry_error *err)
{
    enum ferry_schema_changes p = ferry_read_context_of(st->spec)->schema_changes;
    int64_t pos = BL_POS(st->seq, h->log_pos);
    if (p == FERRY_SCHEMA_FAIL) return ddl_error(st, h, q, n, "schema_changes: fail", err);
    if (st->in_txn) return ddl_error(st, h, q, n, "a DDL inside a transaction", err);
    struct rel now;
    struct ferry_error e;
    if (resolve(st->s, st->spec->table, &now, &e) != FERRY_OK)
        return ddl_error(st, h, q, n, e.message, err);
    if (note_added(st, &now) != FERRY_OK) {
        rel_free(&now);
        return nomem(err);
    }
    struct ddl_diff d = {0};
    ddl_compare(st, &now, &d);
    if (d.error > 0) {
        rel_free(&now);
        return ddl_error(st, h, q, n, d.change, err);
    }
    if (d.stop > 0) {
        rel_free(&now);
        cdc_commit(st, pos);
        st->schema_stop = true;
        const char *route = ferry_read_context_of(st->spec)->route;
        schema_stopped(route ? route : st->spec->table, false);
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": table %s: schema change at %s.%06" PRIu32 ":%" PRIu32 "; the stream "
                       "stops after it and the next run takes it in (schema_changes: evolve)",
                  st->r->from, st->base, st->seq, h->log_pos);
        return FERRY_OK;
    }
    /* go on: with column names in the log, the table maps say which columns each change
     * has (a dropped one is NULL from its DROP on); without, positions follow the catalog */
    int rc = FERRY_OK;
    if (names_logged(st))
        rel_free(&now);
    else
        rc = ddl_remap(st, &now, err);
    if (rc == FERRY_OK) cdc_commit(st, pos);
    return rc;
}

/* Skips blanks and C-style comments at q[*i..n); false when a comment does not end. */
static bool skip_blank(const char *q, size_t n, size_t *i)
{
    for (;;) {
        while (*i < n && isspace((unsigned char)q[*i]))
            (*i)++;
        if (*i + 1 >= n || q[*i] != '/' || q[*i + 1] != '*') return true;
        const char *end = NULL;
        for (size_t k = *i + 2; k + 1 < n && end == NULL; k++)
            if (q[k] == '*' && q[k + 1] == '/') end = q + k;
        if (end == NULL) return false;
        *i = (size_t)(end - q) + 2;
    }
}

/* Skips blanks and one identifier (`quoted`, `` doubled, or plain) at q[*i..n) into out
 * (unquoted, NUL-terminated); false when there is none or it does not fit. */
static bool ident_at(const char *q, size_t n, size_t *i, char *out, size_t cap)
{
    size_t k = 0, j = *i;
    if (!skip_blank(q, n, &j)) return false;
    bool quoted = j < n && q[j] == '`';
    for (j += quoted; j < n && k + 1 < cap; j++) {
        if (quoted && q[j] == '`' && j + 1 < n && q[j + 1] == '`') {
            out[k++] = q[j++];
        } else if (quoted && q[j] == '`') {
            j++;
            break;
        } else if (!quoted && !(isalnum((unsigned char)q[j]) || q[j] == '_' || q[j] == '$' ||
                                (unsigned char)q[j] >= 0x80)) {
            break;
        } else {
            out[k++] = q[j];
        }
    }
    out[k] = '\0';
    *i = j;
    return k > 0 && k + 1 < cap;
}

/* `TRUNCATE [TABLE] [db.]name`: 1 when it empties the stream's table (db: the statement's
 * default database), 0 when it is no TRUNCATE, -1 when it truncates another table, 2 when
 * its table cannot be read from it (a comment inside, ...). */
static int truncate_of(const struct stream *st, const char *q, size_t n, const char *db,
                       size_t dbn)
{
    size_t i = 0;
    char a[200], b[200];
    while (i < n && isspace((unsigned char)q[i]))
        i++;
    if (n - i < 9 || strncasecmp(q + i, "TRUNCATE", 8) != 0 ||
        !(isspace((unsigned char)q[i + 8]) || q[i + 8] == '`' || q[i + 8] == '/'))
        return 0;
    i += 8;
    size_t at = i;
    if (ident_at(q, n, &i, a, sizeof a) && strcasecmp(a, "TABLE") == 0 && q[i - 1] != '`')
        at = i; /* TABLE is optional: a table named `table` needs quotes anyway */
    i = at;
    if (!ident_at(q, n, &i, a, sizeof a)) return 2;
    const char *table = a;
    bool in_db = dbn == strlen(st->r->db) && strncmp(db, st->r->db, dbn) == 0;
    if (i < n && q[i] == '.') {
        i++;
        if (!ident_at(q, n, &i, b, sizeof b)) return 2;
        in_db = strcmp(a, st->r->db) == 0;
        table = b;
    }
    bool end = skip_blank(q, n, &i);
    if (end && i < n && q[i] == ';') {
        i++;
        end = skip_blank(q, n, &i);
    }
    if (!end || i < n) return 2; /* more after the name */
    return in_db && strcmp(table, st->r->table) == 0 ? 1 : -1;
}

/* A placeholder for key (or NOT NULL) field f of a truncate row: the sink ignores it. */
static void truncate_placeholder(struct ferry_row_writer *rw, const struct ferry_field *f)
{
    static const uint8_t zero[16];
    switch (f->type) {
    case FERRY_TYPE_BOOL: ferry_rw_bool(rw, false); return;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: ferry_rw_float(rw, 0); return;
    case FERRY_TYPE_DECIMAL128: ferry_rw_dec128(rw, (struct ferry_decimal128){0, 0}); return;
    case FERRY_TYPE_UUID: ferry_rw_fixed(rw, zero, 16); return;
    case FERRY_TYPE_DECIMAL_TEXT: ferry_rw_text(rw, "0", 1); return;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_JSON: ferry_rw_text(rw, "", 0); return;
    default: ferry_rw_int(rw, 0); return; /* integers, dates, times, timestamps */
    }
}

/* A TRUNCATE of the table (its own transaction in the log, which holds no rows for it):
 * under evolve/freeze, into a sink that applies truncates (ferry_read_context.truncates),
 * one FERRY_OP_TRUNCATE row in stream order (as the postgres source sends it); otherwise the
 * stream stops naming the table and the statement. */
static int on_truncate(struct stream *st, const struct ferry_my_bl_header *h, const char *q,
                       size_t n, struct ferry_error *err)
{
    const struct ferry_read_context *ctx = ferry_read_context_of(st->spec);
    enum ferry_schema_action a = ferry_schema_change_decide(ctx->schema_changes, FERRY_SC_TRUNCATED);
    if (a == FERRY_SC_APPLY && !ctx->truncates) a = FERRY_SC_ERROR;
    ferry_schema_change_note(ctx->route ? ctx->route : st->spec->table, st->r->from, NULL,
                             FERRY_SC_TRUNCATED, NULL, NULL, ctx->schema_changes, a);
    if (a != FERRY_SC_APPLY)
        return ddl_error(st, h, q, n,
                         ctx->schema_changes == FERRY_SCHEMA_FAIL
                             ? "schema_changes: fail; resnapshot the resource (`ferry cdc drop`, "
                               "empty the destination, run)"
                             : "a truncate is applied only by write: upsert or merge without "
                               "soft_delete into a postgres or sqlite sink; resnapshot the "
                               "resource (`ferry cdc drop`, empty the destination, run)",
                         err);
    st->txn_rows++;
    if (st->skip > 0) { /* written before an interruption */
        st->skip--;
    } else {
        ferry_rw_set_suboffset(st->rw, st->txn_rows);
        ferry_rw_begin(st->rw, FERRY_OP_TRUNCATE);
        for (int f = 0; f < st->sc->n_fields; f++) {
            const struct ferry_field *fld = &st->sc->fields[f];
            if (fld->key_pos > 0 || !fld->nullable)
                truncate_placeholder(st->rw, fld);
            else
                ferry_rw_null(st->rw);
        }
        st->changes++;
        int rc = ferry_rw_end(st->rw, err);
        if (rc != FERRY_OK) return rc;
    }
    ferry_log(FERRY_LOG_INFO, WHAT ": table %s was truncated at the source (%s.%06" PRIu32
                                   ":%" PRIu32 "); applied in stream order",
              st->r->from, st->base, st->seq, h->log_pos);
    cdc_commit(st, BL_POS(st->seq, h->log_pos));
    return FERRY_OK;
}

static int on_query(struct stream *st, const struct ferry_my_bl_header *h, const uint8_t *body,
                    size_t body_n, struct ferry_error *err)
{
    const char *q = NULL, *db = NULL;
    size_t n = 0, dbn = 0;
    int qrc = ferry__my_bl_query(body, body_n, &db, &dbn, &q, &n, err);
    if (qrc != FERRY_OK) return qrc;
    if (n == 5 && strncasecmp(q, "BEGIN", 5) == 0) {
        st->in_txn = true;
        if (st->open_time == 0) st->open_time = h->timestamp; /* no GTID event before it */
        return FERRY_OK;
    }
    if ((n == 6 && strncasecmp(q, "COMMIT", 6) == 0) ||
        (n == 8 && strncasecmp(q, "ROLLBACK", 8) == 0)) {
        cdc_commit(st, BL_POS(st->seq, h->log_pos));
        return FERRY_OK;
    }
    bool our_db = (dbn == strlen(st->r->db) && strncmp(db, st->r->db, dbn) == 0) ||
                  mentions(q, n, st->r->db);
    int trunc = truncate_of(st, q, n, db, dbn);
    if (trunc == 1) return on_truncate(st, h, q, n, err);
    if (trunc == 2 && our_db && mentions(q, n, st->r->table))
        return ddl_error(st, h, q, n, "a TRUNCATE whose table ferry cannot read from it", err);
    if (trunc == 0 && our_db && mentions(q, n, st->r->table)) return on_ddl(st, h, q, n, err);
    if (!st->in_txn) cdc_commit(st, BL_POS(st->seq, h->log_pos)); /* DDL: its own transaction */
    return FERRY_OK;
}

/* Whether a TABLE_MAP's column type can be the column's (information_schema DATA_TYPE): a
 * guard against positional row images of another shape (a later DDL). Unknown: yes. */
static bool bl_type_fits(const struct col *c, uint8_t t)
{
    static const struct {
        const char *name;
        uint8_t types[4];
    } map[] = {
        {"tinyint", {1}}, {"smallint", {2}}, {"mediumint", {9}}, {"int", {3}},
        {"bigint", {8}}, {"float", {4}}, {"double", {5}}, {"decimal", {246, 0}},
        {"date", {10, 14}}, {"datetime", {12, 18}}, {"timestamp", {7, 17}},
        {"time", {11, 19}}, {"year", {13}}, {"bit", {16}}, {"char", {254, 15, 253}},
        {"varchar", {15, 253, 254}}, {"binary", {254, 15, 253}}, {"varbinary", {15, 253, 254}},
        {"enum", {254, 247}}, {"set", {254, 248}}, {"tinytext", {252}}, {"text", {252}},
        {"mediumtext", {252}}, {"longtext", {252, 245}}, {"tinyblob", {252}}, {"blob", {252}},
        {"mediumblob", {252}}, {"longblob", {252}}, {"json", {245, 252}},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(map[i].name, c->data_type) != 0) continue;
        for (int k = 0; k < 4 && map[i].types[k]; k++)
            if (map[i].types[k] == t) return true;
        return false;
    }
    return true;
}

static int grow(void **p, int *cap, int want, size_t size)
{
    if (want <= *cap) return FERRY_OK;
    void *v = ferry_realloc(*p, (size_t)want * size);
    if (v == NULL) return FERRY_ENOMEM;
    *p = v;
    *cap = want;
    return FERRY_OK;
}

/* A column of a table map (with names) that neither the plan's columns nor a DDL met in
 * the stream know: the table lost it (DROP COLUMN, a rename) before the plan read its
 * catalog, after the changes being read were logged. Its values cannot be written anywhere:
 * the stream stops rather than drop them. */
static int unknown_column(struct stream *st, const char *name, uint32_t log_pos,
                          struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": table %s: column \"%s\" is in the binary log's table map at "
                                "%s.%06" PRIu32 ":%" PRIu32 " but not among the table's columns "
                                "this run read: a schema change (DROP or RENAME COLUMN) was "
                                "executed before the run read them, after changes still to be "
                                "streamed were logged; their \"%s\" values would be lost, so the "
                                "stream stops here (positions up to the last commit are kept; "
                                "a new snapshot of the table, e.g. another pipeline name, reads "
                                "it as it is now)",
                           st->r->from, name, st->base, st->seq, log_pos, name);
}

/* The table's columns found in the last TABLE_MAP (st->bmap): by name when it has names,
 * else by position, which needs the same count and fitting types (a later DDL would make
 * positions lie). */
static int map_columns(struct stream *st, uint32_t log_pos, struct ferry_error *err)
{
    const struct ferry_my_bl_table *t = st->tm;
    int n = (int)t->n_cols;
    if (n > st->img_cap) {
        int cap0 = st->img_cap, cap1 = st->img_cap;
        if (grow((void **)&st->img[0], &cap0, n, sizeof *st->img[0]) != FERRY_OK ||
            grow((void **)&st->img[1], &cap1, n, sizeof *st->img[1]) != FERRY_OK)
            return nomem(err);
        st->img_cap = n;
    }
    if (grow((void **)&st->bmap, &st->bmap_cap, st->r->n_cols, sizeof *st->bmap) != FERRY_OK)
        return nomem(err);
    for (int c = 0; c < st->r->n_cols; c++) {
        st->bmap[c] = -1;
        for (int b = 0; t->has_names && b < n; b++)
            if (strcmp(t->names + t->name_off[b], st->r->cols[c].name) == 0) st->bmap[c] = b;
    }
    for (int b = 0; t->has_names && b < n; b++) {
        const char *name = t->names + t->name_off[b];
        if (col_index(st->r, name) < 0 && !was_added(st, name))
            return unknown_column(st, name, log_pos, err);
    }
    if (t->has_names) return FERRY_OK;
    if (n != st->r->n_cols)
        return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                               WHAT ": table %s: the binary log has %d columns, the table has %d: "
                               "a schema change; the stream stops here (with the server's "
                               "binlog_row_metadata = FULL the stream maps columns by name "
                               "across schema changes)",
                               st->r->from, n, st->r->n_cols);
    for (int c = 0; c < n; c++) {
        if (!bl_type_fits(&st->r->cols[c], t->types[c]))
            return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                                   WHAT ": table %s: column %d (\"%s\", %s) is binlog type %u in "
                                   "the binary log: the table changed since these changes were "
                                   "logged; the stream stops here (binlog_row_metadata = FULL "
                                   "maps columns by name)",
                                   st->r->from, c + 1, st->r->cols[c].name,
                                   st->r->cols[c].data_type, t->types[c]);
        st->bmap[c] = c;
    }
    return FERRY_OK;
}

/* An event the decoder does not read (partial JSON updates, compressed events): skipping
 * it could lose rows or a DDL, so the stream stops naming the server setting (the plan
 * checks them too: cdc_check_events). */
static int undecoded_event(struct stream *st, uint8_t type, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": table %s: binary log event type %u is not decoded (%s); the "
                                "stream stops here",
                           st->r->from, type,
                           type == 39 ? "a partial JSON update: set binlog_row_value_options = ''"
                                      : "a compressed event: set log_bin_compress = OFF");
}

/* One event (raw: header, body, the CRC trailer when st->crc); tm_phl: the TABLE_MAP
 * post-header length the format description gave. */
static int on_event(struct stream *st, const uint8_t *raw, size_t n, int tm_phl,
                    struct ferry_error *err)
{
    struct ferry_my_bl_header h;
    int rc = ferry__my_bl_header(raw, n, &h, err);
    if (rc != FERRY_OK) return rc;
    size_t body_n = h.event_size - FERRY_MY_BL_HEADER;
    if (st->crc && body_n >= 4) body_n -= 4; /* the CRC32 trailer, checked: */
    if (st->crc && h.event_size <= n && !ferry__my_bl_checksum_ok(raw, h.event_size))
        return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                               WHAT ": %s: table %s: the binlog event of type %u ending at "
                                    "%s.%06" PRIu32 ":%" PRIu32 " fails its CRC32 checksum (a "
                                    "damaged binary log?); nothing after the last commit was "
                                    "taken",
                               st->s->conn.peer, st->r->from, (unsigned)h.type, st->base, st->seq,
                               h.log_pos);
    if (body_n > n - FERRY_MY_BL_HEADER)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": truncated binlog event");
    const uint8_t *body = raw + FERRY_MY_BL_HEADER;
    if (h.timestamp > 0) st->event_time = h.timestamp;
    if (h.log_pos > 0 && BL_POS(st->seq, h.log_pos) > st->seen) st->seen = BL_POS(st->seq, h.log_pos);
    switch (h.type) {
    case FERRY_MY_BL_ROTATE: {
        char file[512], base[256];
        uint64_t rpos = 0;
        uint32_t seq = 0;
        rc = ferry__my_bl_rotate(body, body_n, &rpos, file, sizeof file, err);
        if (rc != FERRY_OK) return rc;
        if (h.log_pos != 0 && !st->in_txn) cdc_commit(st, BL_POS(st->seq, h.log_pos));
        if (split_binlog_name(file, base, sizeof base, &seq) != 0)
            return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": binlog file name %s",
                                   file);
        st->seq = seq;
        snprintf(st->base_buf, sizeof st->base_buf, "%s", base);
        st->base = st->base_buf;
        return FERRY_OK;
    }
    case FERRY_MY_BL_TABLE_MAP: {
        char db[260], table[260];
        /* names first: a table map of another table is not decoded further */
        size_t off = 8;
        if (body_n < off + 1 || body_n < off + 2 + body[off]) return FERRY_OK;
        snprintf(db, sizeof db, "%.*s", body[off], (const char *)body + off + 1);
        off += 2u + body[off];
        if (body_n < off + 1 || body_n < off + 1 + body[off]) return FERRY_OK;
        snprintf(table, sizeof table, "%.*s", body[off], (const char *)body + off + 1);
        if (strcmp(db, st->r->db) != 0 || strcmp(table, st->r->table) != 0) return FERRY_OK;
        rc = ferry__my_bl_table_map(body, body_n, tm_phl, st->tm, err);
        if (rc == FERRY_OK) rc = map_columns(st, h.log_pos, err);
        if (rc != FERRY_OK) return rc;
        st->have_tm = true;
        return FERRY_OK;
    }
    case FERRY_MY_BL_WRITE_ROWS_V1: case FERRY_MY_BL_UPDATE_ROWS_V1:
    case FERRY_MY_BL_DELETE_ROWS_V1: case FERRY_MY_BL_WRITE_ROWS_V2:
    case FERRY_MY_BL_UPDATE_ROWS_V2: case FERRY_MY_BL_DELETE_ROWS_V2: {
        uint64_t id = 0;
        rc = ferry__my_bl_rows_table_id(body, body_n, &id, err);
        if (rc != FERRY_OK || !st->have_tm || id != st->tm->table_id) return rc;
        st->op = h.type;
        st->ev_pos = BL_POS(st->seq, h.log_pos);
        struct ferry_my_bl_rows_cb cb = {st, on_bl_value, on_bl_row_end};
        return ferry__my_bl_rows(h.type, body, body_n, st->tm, &cb, err);
    }
    case FERRY_MY_BL_XID:
        cdc_commit(st, BL_POS(st->seq, h.log_pos));
        return FERRY_OK;
    case FERRY_MY_BL_QUERY:
        return on_query(st, &h, body, body_n, err);
    case FERRY_MY_BL_MARIADB_GTID:
    case FERRY_MY_BL_MYSQL_GTID:
        return on_gtid(st, &h, body, body_n, err);
    case FERRY_MY_BL_HEARTBEAT:
        on_heartbeat(st, &h, body, body_n);
        return FERRY_OK;
    case 39:  /* MySQL: PARTIAL_UPDATE_ROWS_EVENT */
    case 165: /* MariaDB log_bin_compress: QUERY_COMPRESSED_EVENT, compressed rows events */
    case 166:
    case 167:
    case 168:
    case 169:
    case 170:
    case 171:
        return undecoded_event(st, h.type, err);
    case 34: /* MySQL: ANONYMOUS_GTID_LOG_EVENT, a transaction without a GTID */
        gtid_forget(st);
        /* fall through */
    default:
        if (!st->in_txn && h.log_pos != 0 && h.type != FERRY_MY_BL_HEARTBEAT &&
            h.type != FERRY_MY_BL_FORMAT_DESCRIPTION)
            cdc_commit(st, BL_POS(st->seq, h.log_pos));
        return FERRY_OK;
    }
}

/* The schema's fields mapped to the table's columns, their types checked again. */
static int stream_prepare(struct stream *st, struct ferry_error *err)
{
    const struct ferry_schema *sc = st->sc;
    const struct rel *r = st->r;
    st->fmap = ferry_calloc((size_t)sc->n_fields + 1, sizeof *st->fmap);
    st->tm = ferry_calloc(1, sizeof *st->tm);
    st->img[0] = ferry_calloc((size_t)r->n_cols, sizeof *st->img[0]);
    st->img[1] = ferry_calloc((size_t)r->n_cols, sizeof *st->img[1]);
    st->img_cap = r->n_cols;
    if (!st->fmap || !st->tm || !st->img[0] || !st->img[1]) return nomem(err);
    /* The columns are the plan's (the log's shape where the stream starts); a field that
     * discover saw and the plan did not (a DDL between a failed attempt's plan and this
     * attempt's discover) is NULL until the DDL is met in the log, where the policy
     * decides; a field's type may widen the plan's column's. */
    for (int f = 0; f < sc->n_fields; f++) {
        const struct ferry_field *fld = &sc->fields[f];
        if ((st->fmap[f] = col_index(r, fld->name)) < 0) continue;
        struct ferry_field pf = *fld;
        map_type(&r->cols[st->fmap[f]], &pf.type, &pf.precision, &pf.scale); /* (sets kind) */
        if (!ferry_type_widens(&pf, fld))
            return ferry_error_set(err, FERRY_ECONFLICT, "mysql",
                                   WHAT ": table %s: column \"%s\" changed type since discovery",
                                   r->from, fld->name);
    }
    return FERRY_OK;
}

/* The session a binlog dump needs: checksums as the server writes them (libmariadb strips
 * nothing), a heartbeat every second (a quiet log is told from a dead connection:
 * io_timeout), MariaDB's GTID capability, and with `gtid` MariaDB's GTID position to start
 * after (@slave_connect_state: the server then ignores file and offset). The @source_
 * names are MySQL 8.0.26's for the @master_ ones (spec only: no MySQL server in the tests);
 * user variables a server does not read are harmless. */
static int stream_session(struct stream *st, MYSQL *m, const char *gtid, struct ferry_error *err)
{
    int rc = ferry__my_exec(m,
                            "SET @master_binlog_checksum = @@global.binlog_checksum, "
                            "@source_binlog_checksum = @@global.binlog_checksum, "
                            "@master_heartbeat_period = 1000000000, "
                            "@source_heartbeat_period = 1000000000, "
                            "@mariadb_slave_capability = 4",
                            FERRY_ESOURCE, WHAT ": binlog stream", err);
    if (rc == FERRY_OK && gtid != NULL) {
        struct ferry_buf sql;
        ferry_buf_init(&sql, 0);
        rc = ferry_buf_printf(&sql, "SET @slave_connect_state = ");
        if (rc == FERRY_OK) rc = ferry__my_quote_text(m, &sql, gtid, strlen(gtid));
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(&sql, ", @slave_gtid_strict_mode = 0, "
                                        "@slave_gtid_ignore_duplicates = 0");
        rc = rc != FERRY_OK
                 ? nomem(err)
                 : ferry__my_exec(m, sql.data, FERRY_ESOURCE, WHAT ": binlog stream", err);
        ferry_buf_release(&sql);
    }
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    if (rc == FERRY_OK &&
        (mysql_query(m, "SELECT @@global.binlog_checksum") != 0 ||
         (res = mysql_store_result(m)) == NULL || (row = mysql_fetch_row(res)) == NULL))
        rc = ferry__my_error(err, FERRY_ESOURCE, m, WHAT ": %s: binlog_checksum", st->s->conn.peer);
    else if (rc == FERRY_OK)
        st->crc = row[0] != NULL && strcasecmp(row[0], "NONE") != 0;
    if (res) mysql_free_result(res);
    return rc;
}

static int position_gone(struct stream *st, MYSQL *m, const char *from, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESOURCE, "mysql",
                           WHAT ": %s: table %s: resnapshot required: the server cannot send the "
                                "binary log from %s (%s)",
                           st->s->conn.peer, st->r->from, from, mysql_error(m));
}

/* MySQL's dump after GTID set `gtid`: COM_BINLOG_DUMP_GTID (libmariadb's rpl_open sends
 * only COM_BINLOG_DUMP), sent through the connection's command method; the events then come
 * through mariadb_rpl_fetch as for any dump. The server starts at the first file holding a
 * transaction outside the set and skips those inside it; a set missing purged transactions
 * is error 1236 (cdc_gtid_servable_mysql checked it at plan time). */
static int dump_mysql_gtid(MYSQL *m, uint32_t server_id, const char *gtid, struct ferry_error *err)
{
    struct ferry_my_gtid_set g;
    struct ferry_buf pkt;
    ferry__my_gtid_init(&g);
    ferry_buf_init(&pkt, 0);
    int rc = ferry__my_gtid_parse(&g, gtid, err);
    if (rc == FERRY_OK) rc = ferry__my_gtid_dump_packet(server_id, &g, &pkt, err);
    if (rc == FERRY_OK &&
        m->methods->db_command(m, (enum enum_server_command)(unsigned char)pkt.data[0],
                               pkt.data + 1, pkt.len - 1, 1, NULL) != 0)
        rc = FERRY_EIO; /* the caller names it from mysql_errno */
    ferry__my_gtid_release(&g);
    ferry_buf_release(&pkt);
    return rc;
}

/* Opens the dump at file:offset, or after the GTID position `gtid` (file and offset unused)
 * in the dialect `kind` (ferry__my_gtid_dump_kind). */
static int stream_open(struct stream *st, MYSQL *m, MARIADB_RPL **out, int64_t start,
                       int64_t server_id, const char *gtid, enum ferry_my_dump_kind kind,
                       struct ferry_error *err)
{
    char file[300], from[400];
    snprintf(file, sizeof file, "%s.%06" PRIu32, st->base, BL_SEQ(start));
    unsigned long spos = gtid ? 4 : BL_OFF(start);
    if (gtid)
        snprintf(from, sizeof from, "GTID position %.300s", gtid);
    else
        snprintf(from, sizeof from, "%s:%lu", file, spos);
    MARIADB_RPL *rpl = mariadb_rpl_init(m);
    if (rpl == NULL) return nomem(err);
    *out = rpl;
    unsigned int sid = (unsigned int)server_id;
    if (kind == FERRY_MY_DUMP_MYSQL_GTID) {
        int rc = dump_mysql_gtid(m, sid, gtid, err);
        if (rc != FERRY_EIO) return rc;
    } else if (mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, gtid ? "" : file,
                                    gtid ? 0 : strlen(file)) == 0 &&
               mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, spos) == 0 &&
               mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, sid) == 0 &&
               mariadb_rpl_open(rpl) == 0)
        return FERRY_OK;
    if (mysql_errno(m) == 1236) /* ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or no such file */
        return position_gone(st, m, from, err);
    return ferry__my_error(err, FERRY_ESOURCE, m,
                           WHAT ": %s: table %s: opening the binary log at %s", st->s->conn.peer,
                           st->r->from, from);
}

static int stopped(struct stream *st, int stop, struct ferry_error *err)
{
    return ferry_error_set(err, stop == FERRY_ECANCELED ? FERRY_ECANCELED : FERRY_EPAUSED, "mysql",
                           WHAT ": table %s: stream stopped", st->r->from);
}

/* Events until the frozen end, a row-count epoch, an error or a stop request. */
static int stream_loop(struct stream *st, MYSQL *m, MARIADB_RPL *rpl, bool by_gtid,
                       const char *gtid, struct ferry_error *err)
{
    MARIADB_RPL_EVENT *ev = NULL;
    int rc = FERRY_OK;
    while (rc == FERRY_OK && !st->done && !st->epoch_stop && !st->schema_stop) {
        int stop = ferry_rw_stop_requested(st->rw);
        if (stop != 0) {
            rc = stopped(st, stop, err);
            break;
        }
        ev = mariadb_rpl_fetch(rpl, ev);
        if (ev == NULL) {
            char from[400];
            snprintf(from, sizeof from, "GTID position %.300s", gtid ? gtid : "");
            if (by_gtid && mysql_errno(m) == 1236 && st->last_commit == 0)
                rc = position_gone(st, m, from, err); /* the first read answers a GTID start */
            else
                rc = ferry__my_error(err, FERRY_EIO, m,
                                     WHAT
                                     ": %s: table %s: reading the binary log (after %s.%06" PRIu32
                                     ":%" PRIu32 ")",
                                     st->s->conn.peer, st->r->from, st->base,
                                     BL_SEQ(st->last_commit), BL_OFF(st->last_commit));
            break;
        }
        if (ev->raw_data == NULL) continue;
        const uint8_t *raw = ev->raw_data;
        size_t n = ev->raw_data_size;
        if (n == (size_t)ev->event_length + 1) raw++, n--; /* the packet's OK byte */
        rc = on_event(st, raw, n, rpl->post_header_len[TABLE_MAP_EVENT - 1] == 6 ? 6 : 8, err);
        if (st->s->c != NULL) lazy_release(st->s);
    }
    if (ev != NULL) mariadb_free_rpl_event(ev);
    return rc;
}

/* ---- cdc: the pipeline's shared stream (my_hub.c) ---- */

/* The hub's dump, opened by the subscriber with the least start for all of them. */
static int hub_open(void *ctx, int64_t start, MYSQL **m, MARIADB_RPL **rpl, bool *crc,
                    struct ferry_error *err)
{
    struct stream *st = ctx;
    int64_t id = st->stream_server_id;
    int rc = ferry__my_connect(&st->s->conn, WHAT, m, err);
    if (rc == FERRY_OK) rc = stream_session(st, *m, NULL, err);
    if (rc == FERRY_OK) rc = stream_open(st, *m, rpl, start, id, NULL, FERRY_MY_DUMP_FILE, err);
    *crc = st->crc;
    if (rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": %s: one binlog connection (server_id %" PRId64 ") for the pipeline's "
                       "cdc tables, from %s.%06" PRIu32 ":%" PRIu32,
                  st->s->conn.peer, id, st->base, BL_SEQ(start), BL_OFF(start));
    return rc;
}

/* The hub of this run's streams: pipeline, server, server_id. */
static void hub_key(const struct src *s, const struct ferry_resource_spec *spec, int64_t id,
                    char *key, size_t cap)
{
    const char *pipeline = ferry_read_context_of(spec)->pipeline;
    snprintf(key, cap, "%s\n%s\n%" PRId64, pipeline ? pipeline : "", s->conn.peer, id);
}

/* Answers the hub when streams run together: *sub a subscription (or NULL: alone). */
static int hub_join(struct stream *st, bool want, int64_t start, struct ferry_my_hub_sub **sub,
                    struct ferry_error *err)
{
    *sub = NULL;
    int together = ferry_read_context_of(st->spec)->cdc_streams_together;
    if (together < 2) return FERRY_OK;
    char key[700];
    hub_key(st->s, st->spec, st->stream_server_id, key, sizeof key);
    int rc = ferry__my_hub_join(key, st->s->conn.peer, together, want, st->r->db, st->r->table,
                                start, hub_open, st, sub, &st->crc, err);
    if (want && rc == FERRY_OK && *sub == NULL)
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": table %s: streams on a binlog connection of its own (the shared one "
                       "had started)",
                  st->r->from);
    return rc;
}

/* A stream that fails before it could answer the hub answers "alone". */
static void hub_decline(struct src *s, const struct ferry_resource_spec *spec, json_t *plan)
{
    int together = ferry_read_context_of(spec)->cdc_streams_together;
    if (together < 2) return;
    int64_t id = json_integer_value(json_object_get(plan, "stream_server_id"));
    char key[700];
    hub_key(s, spec, id > 0 ? id : cdc_stream_server_id(s, spec), key, sizeof key);
    struct ferry_my_hub_sub *sub = NULL;
    bool crc = false;
    ferry__my_hub_join(key, s->conn.peer, together, false, "", "", 0, NULL, NULL, &sub, &crc, NULL);
}

/* Events from the shared stream until the frozen end, an epoch, an error or a stop. */
static int hub_loop(struct stream *st, struct ferry_my_hub_sub *sub, struct ferry_error *err)
{
    int rc = FERRY_OK;
    while (rc == FERRY_OK && !st->done && !st->epoch_stop && !st->schema_stop) {
        int stop = ferry_rw_stop_requested(st->rw);
        if (stop != 0) return stopped(st, stop, err);
        const uint8_t *p = NULL;
        size_t n = 0;
        int tm_phl = 8;
        rc = ferry__my_hub_next(sub, &p, &n, &tm_phl, 200, err);
        if (rc == FERRY_OK && p != NULL) rc = on_event(st, p, n, tm_phl, err);
        if (st->s->c != NULL) lazy_release(st->s); /* (a DDL's or character set's catalog read) */
    }
    if (rc == FERRY_EIO) ferry_error_prefix(err, "table %s", st->r->from);
    return rc;
}

/* The stream alone: its own connection at start (or after the GTID position gtid). */
static int stream_alone(struct stream *st, int64_t start, int64_t server_id, bool by_gtid,
                        const char *gtid, struct ferry_error *err)
{
    MYSQL *m = NULL;
    MARIADB_RPL *rpl = NULL;
    enum ferry_my_dump_kind kind = FERRY_MY_DUMP_FILE;
    int rc = ferry__my_connect(&st->s->conn, WHAT, &m, err);
    if (rc == FERRY_OK)
        rc = ferry__my_gtid_dump_kind(mariadb_connection(m), by_gtid ? gtid : NULL, &kind, err);
    if (rc == FERRY_EINVAL) ferry_error_prefix(err, "%s: table %s", st->s->conn.peer, st->r->from);
    if (rc == FERRY_OK)
        rc = stream_session(st, m, kind == FERRY_MY_DUMP_MARIADB_GTID ? gtid : NULL, err);
    if (rc == FERRY_OK)
        rc = stream_open(st, m, &rpl, start, server_id, by_gtid ? gtid : NULL, kind, err);
    if (rc == FERRY_OK) rc = stream_loop(st, m, rpl, by_gtid, gtid, err);
    if (rpl != NULL) mariadb_rpl_close(rpl);
    if (m != NULL) mysql_close(m);
    return rc;
}

static int stream_cdc(struct src *s, const struct ferry_resource_spec *spec,
                      const struct ferry_schema *sc, struct rel *r, json_t *plan,
                      const struct ferry_position *resume, struct ferry_row_writer *rw,
                      struct ferry_error *err)
{
    struct stream st;
    memset(&st, 0, sizeof st);
    st.s = s, st.spec = spec, st.sc = sc, st.r = r, st.rw = rw;
    const struct ferry_read_context *run = ferry_read_context_of(spec);
    st.n_user = sc->n_fields - ferry_cdc_extra_cols(run->change_log, run->soft_delete != NULL);
    st.d.s = s, st.d.sc = sc, st.d.r = r;
    ferry_buf_init(&st.text, 0);
    ferry_buf_init(&st.gtid_text, 0);
    ferry_buf_init(&st.added, 0);
    ferry__my_gtid_init(&st.gtid);
    int64_t start = json_integer_value(json_object_get(plan, "start"));
    st.end = json_integer_value(json_object_get(plan, "end"));
    st.skip = json_integer_value(json_object_get(plan, "skip"));
    st.base = json_string_value(json_object_get(plan, "base"));
    int64_t server_id = json_integer_value(json_object_get(plan, "server_id"));
    st.stream_server_id = json_integer_value(json_object_get(plan, "stream_server_id"));
    if (st.stream_server_id <= 0) st.stream_server_id = cdc_stream_server_id(s, spec);
    bool by_gtid = json_is_true(json_object_get(plan, "by_gtid"));
    const char *gtid = json_string_value(json_object_get(plan, "gtid"));
    int64_t rn = 0, rk = 0;
    char *rg = NULL;
    int rc = cdc_position(resume, &rn, &rk, &rg, err);
    if (rc == FERRY_OK && (st.base == NULL || start <= 0 || server_id <= 0))
        rc = ferry_error_set(err, FERRY_EINVAL, "mysql",
                             WHAT ": table %s: the frozen cdc plan has no binlog start", r->from);
    /* a resumed attempt: from its saved position (by GTID: its n may be another server's
     * numbering, its g is what counts) */
    if (rc == FERRY_OK && rn > 0 && (by_gtid ? rg != NULL : rn >= start)) {
        start = rn;
        st.skip = rk;
        gtid = rg;
    }
    if (rc == FERRY_OK && by_gtid && gtid == NULL)
        rc = ferry_error_set(err, FERRY_EINVAL, "mysql",
                             WHAT ": table %s: a GTID resume without a GTID position", r->from);
    /* An attempt resumed on another server (a failover between attempts): its file:offset
     * is not this server's log; by GTID, up to this server's log end (its numbering). */
    bool switched = false;
    if (rc == FERRY_OK && !by_gtid && gtid != NULL) {
        bool exists = true, ours = true;
        rc = cdc_log_exists(s, r->from, BL_SEQ(start), &exists, err);
        if (rc == FERRY_OK && exists)
            rc = cdc_same_log(s, r->from, st.base, start, gtid, &ours, err);
        switched = rc == FERRY_OK && (!exists || !ours);
        if (switched) {
            by_gtid = true;
            ferry_log(FERRY_LOG_INFO,
                      WHAT ": %s: table %s: the saved binlog position is not on this server; "
                           "resuming from GTID position %s",
                      s->conn.peer, r->from, gtid);
        }
    }
    st.synced = !by_gtid;
    /* A first run's copy may have read a later snapshot than `start` (a resumed attempt reads
     * a fresh one): the stream then goes at least to the log's end now (merge converges). */
    if (rc == FERRY_OK && (switched || json_is_true(json_object_get(plan, "first")))) {
        char b2[256];
        int64_t now = 0;
        rc = cdc_log_end(s, r->from, b2, sizeof b2, &now, err);
        if (rc == FERRY_OK && (now > st.end || switched)) st.end = now;
    }
    if (rc == FERRY_OK && gtid != NULL) {
        rc = ferry__my_gtid_parse(&st.gtid, gtid, err);
        st.gtid_known = rc == FERRY_OK;
        ferry_buf_printf(&st.gtid_text, "%s", gtid);
    }
    st.last_commit = by_gtid ? 0 : start;
    st.floor = start; /* the saved position (by GTID too: the numbering changes go checked) */
    st.pos = start;
    st.seq = BL_SEQ(start);
    ferry_rw_set_shard(rw, 0);
    ferry_rw_set_offset(rw, start);
    if (st.gtid_known) ferry_rw_set_offset_tag(rw, st.gtid_text.data, st.gtid_text.len);
    bool work = rc == FERRY_OK && (by_gtid || start < st.end); /* else: nothing up to the end */
    atomic_store(&s->progress.active, 1);
    atomic_store(&s->progress.final_pending, 0);
    progress_report(&st);
    if (work) rc = stream_prepare(&st, err);
    lazy_release(s); /* a stream's instance: the catalog is read */
    /* streams run together share one connection (by file:offset only; a GTID start alone) */
    struct ferry_my_hub_sub *sub = NULL;
    int hrc = hub_join(&st, work && rc == FERRY_OK && !by_gtid, start, &sub, err);
    if (rc == FERRY_OK) rc = hrc;
    if (work && rc == FERRY_OK)
        rc = sub ? hub_loop(&st, sub, err) : stream_alone(&st, start, server_id, by_gtid, gtid, err);
    ferry__my_hub_leave(sub);
    if (work && rc == FERRY_OK && st.done && st.last_commit < st.end) {
        ferry_rw_set_offset(rw, st.end);
        st.last_commit = st.end;
    }
    if (rc == FERRY_OK && !work) st.done = true; /* nothing to stream: caught up */
    progress_report(&st);
    atomic_store(&s->progress.final_pending, 1);
    atomic_store(&s->progress.active, 0);
    if (work) report_zero_dates(&st.d, rw);
    if (work && rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, WHAT ": table %s: %" PRId64 " changes streamed%s", r->from,
                  st.changes, st.epoch_stop ? " (row-count epoch: the next run goes on)" : "");
    ferry_free(rg);
    ferry_free(st.fmap);
    ferry_free(st.tm);
    ferry_free(st.img[0]);
    ferry_free(st.img[1]);
    ferry_free(st.bmap);
    while (st.cs_maps != NULL) {
        struct cs_map *next = st.cs_maps->next;
        ferry__my_cs_release(&st.cs_maps->cs);
        ferry_free(st.cs_maps);
        st.cs_maps = next;
    }
    rel_free(&st.now);
    ferry_buf_release(&st.text);
    ferry_buf_release(&st.gtid_text);
    ferry_buf_release(&st.added);
    ferry__my_gtid_release(&st.gtid);
    return rc;
}

static int extract_shard(struct src *s, const struct ferry_resource_spec *spec,
                         const struct ferry_schema *sc, const char *plan_json, int shard,
                         const struct ferry_position *resume, struct ferry_row_writer *rw,
                         struct ferry_error *err)
{
    json_t *resume_key = NULL;
    bool done = false;
    int rc = resume_key_of(resume, &resume_key, &done, err);
    if (rc != FERRY_OK || done) return rc;
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *sh = json_array_get(json_object_get(plan, "shards"), (size_t)shard);
    if (!json_is_object(sh) || shard < 0) {
        json_decref(plan);
        json_decref(resume_key);
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": table %s: shard %d is not in the frozen plan", spec->table,
                               shard);
    }
    bool stream = spec->mode == FERRY_READ_CDC && json_is_true(json_object_get(sh, "stream"));
    if (s->lazy && !stream) { /* open_stream's contract: stream shards only */
        json_decref(plan);
        json_decref(resume_key);
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": table %s: a stream instance reads streams only",
                               spec->table);
    }
    struct rel r;
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int ord[MAX_ORDER], n_ord = 0;
    rc = resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK && stream) hub_decline(s, spec, plan); /* the others need not wait */
    if (rc != FERRY_OK) {
        json_decref(plan);
        json_decref(resume_key);
        return rc;
    }
    if (stream) {
        json_t *cols = json_object_get(plan, "columns");
        if (json_is_array(cols)) rc = columns_from_plan(&r, cols, err);
        if (rc == FERRY_OK) rc = stream_cdc(s, spec, sc, &r, plan, resume, rw, err);
        rel_free(&r);
        json_decref(plan);
        json_decref(resume_key);
        return rc;
    }
    const struct ferry_read_context *run = ferry_read_context_of(spec);
    bool cdc = spec->mode == FERRY_READ_CDC;
    int n_user =
        sc->n_fields - (cdc ? ferry_cdc_extra_cols(run->change_log, run->soft_delete != NULL) : 0);
    rc = select_list(&sql, sc, n_user, cdc && run->change_log,
                     json_integer_value(json_object_get(plan, "start")), &r, err);
    if (rc == FERRY_OK)
        rc = build_where(s, spec, sc, &r, plan, sh, resume_key, &sql, ord, &n_ord, err);
    bool own_tx = !s->in_snapshot;
    if (rc == FERRY_OK && own_tx) rc = begin_snapshot(s, err);
    if (rc == FERRY_OK) {
        ferry_rw_set_shard(rw, shard);
        if (n_ord > 0) ferry_rw_set_position_columns(rw, n_ord, ord);
        rc = read_rows(s, sql.data, sc, &r, rw, NULL, ord, n_ord, err);
    }
    if (s->c == NULL)
        s->in_snapshot = false; /* dropped after an early stop */
    else if (own_tx)
        end_snapshot(s);
    else if (rc != FERRY_OK && mysql_errno(s->c) != 0)
        s->in_snapshot = false;
    ferry_buf_release(&sql);
    rel_free(&r);
    json_decref(plan);
    json_decref(resume_key);
    return rc;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *sc, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    int rc = extract_shard(ctx, spec, sc, plan_json, shard, resume, rw, err);
    lazy_release(ctx); /* (a stream's instance) */
    return rc;
}

/* Nothing to release on the server (it keeps no replica state for ferry); *caught_up is
 * false for a stream that stopped after a schema change (the runner starts the next run at
 * once, whose discover and sink take the change in). */
/* The stream running on this instance (any thread): position and lag (progress_report); a
 * stream that ended is reported once more, with its final position. */
static int src_cdc_progress(void *ctx, int64_t *position, int64_t *lag_bytes, int64_t *lag_us)
{
    struct src *s = ctx;
    if (s == NULL) return FERRY_ENOTFOUND;
    if (!atomic_load(&s->progress.active) && !atomic_exchange(&s->progress.final_pending, 0))
        return FERRY_ENOTFOUND;
    *position = atomic_load(&s->progress.position);
    *lag_bytes = atomic_load(&s->progress.lag_bytes);
    *lag_us = atomic_load(&s->progress.lag_us);
    return FERRY_OK;
}

static int src_cdc_ack(void *ctx, const struct ferry_resource_spec *spec, const char *plan_json,
                       const char *position, bool *caught_up, struct ferry_error *err)
{
    (void)ctx;
    (void)plan_json;
    (void)position;
    (void)err;
    const char *route = ferry_read_context_of(spec)->route;
    *caught_up = !schema_stopped(route ? route : spec->table, true);
    return FERRY_OK;
}

/* `tables:` patterns: the schema part is the database; a one-part pattern means the URL's. */
static int src_list_tables(void *ctx, struct ferry_table_info **out, int *n, char **def,
                           struct ferry_error *err)
{
    struct src *s = ctx;
    int rc = ensure_conn(s, err);
    return rc != FERRY_OK ? rc : ferry__my_list_tables(s->c, s->conn.db, out, n, def, err);
}

const struct ferry_source_vtable ferry__mysql_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "mysql",
    .tuning_keys = source_tuning_keys,
    .supports_incremental = true,
    .supports_cdc = true,
    .snapshot_one_connection = true,
    .cdc_one_stream = true,
    .open = src_open,
    .open_stream = src_open_stream,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = src_cancel,
    .snapshot = src_snapshot,
    .use_snapshot = src_use_snapshot,
    .list_tables = src_list_tables,
    .cdc_ack = src_cdc_ack,
    .cdc_progress = src_cdc_progress,
    .verify_open = ferry__my_verify_open,
};
