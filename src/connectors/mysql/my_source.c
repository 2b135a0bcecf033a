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
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "connectors/mysql/my_common.h"
#include "ferry/connector.h"

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
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "mysql", WHAT ": out of memory");
}

/* ---- open / close / cancel ----------------------------------------------------------- */

static void src_close(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    if (s->c) mysql_close(s->c);
    ferry__my_conn_free(&s->conn);
    ferry_free(s->snapshot_id);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    s->shard_rows = 1000000;
    static const char *const zero_words[] = {"null", "error", NULL};
    int zd = ZERO_NULL;
    int rc = ferry_cfg_int(cfg, "shard_rows", false, 1, INT64_C(1) << 40, &s->shard_rows, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "zero_dates", false, zero_words, &zd, err);
    if (rc == FERRY_OK) rc = ferry__my_read_conn_config(cfg, WHAT, &s->conn, err);
    if (rc == FERRY_OK) rc = ferry__my_connect(&s->conn, WHAT, &s->c, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    s->zero_dates = (enum zero_policy)zd;
    atomic_store(&s->thread_id, mysql_thread_id(s->c));
    *ctx = s;
    return FERRY_OK;
}

/* Interrupts the running statement: KILL QUERY from a short connection of its own. */
static void src_cancel(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    atomic_store(&s->canceled, 1);
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
    }
    ferry_free(r->cols);
    ferry_free(r->db);
    ferry_free(r->table);
    ferry_free(r->from);
    memset(r, 0, sizeof *r);
}

static int query(struct src *s, const char *sql, MYSQL_RES **res, const char *table,
                 struct ferry_error *err)
{
    *res = NULL;
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
                               "REPLACE(c.COLUMN_NAME, '`', '``'), '`)')) "
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
        if (c->name == NULL || c->data_type == NULL) {
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
    int rc = ferry__my_connect(&s->conn, WHAT, &s->c, err);
    if (rc == FERRY_OK) atomic_store(&s->thread_id, mysql_thread_id(s->c));
    return rc;
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
    if (rc == FERRY_OK && spec->key != NULL) {
        for (int k = 0; k < spec->n_key && rc == FERRY_OK; k++) {
            int f = ferry_schema_find(sc, spec->key[k]);
            if (f < 0)
                rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                     WHAT ": table %s: key column \"%s\" is not among the "
                                          "selected columns",
                                     r.from, spec->key[k]);
            else
                sc->fields[f].key_pos = k + 1;
        }
    } else if (rc == FERRY_OK) {
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
    if (rc == FERRY_OK && spec->mode == FERRY_READ_CDC)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                             WHAT ": table %s: mode cdc (the binary log) is not implemented yet; "
                                  "use mode full or incremental",
                             r.from);
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
        json_t *root = json_loads(route_checkpoint, 0, NULL);
        json_t *key = json_object_get(root, "key");
        if (!json_is_object(root) || (key != NULL && !json_is_array(key))) {
            json_decref(root);
            return ferry_error_set(err, FERRY_EINVAL, "mysql",
                                   WHAT ": table %s: the saved position is not a position object",
                                   r->from);
        }
        if (key != NULL) {
            if ((int)json_array_size(key) != n) {
                json_decref(root);
                return ferry_error_set(err, FERRY_EINVAL, "mysql",
                                       WHAT
                                       ": table %s: the saved position has %zu values, the "
                                       "cursor and key have %d (did the cursor or key change?)",
                                       r->from, json_array_size(key), n);
            }
            lo = json_incref(key);
        }
        json_decref(root);
    }
    if (!json_is_null(lo) && spec->lookback_ms > 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                               WHAT ": table %s: `lookback` is not implemented for mysql yet",
                               r->from);
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

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const char *route_checkpoint, char **plan_json,
                    struct ferry_error *err)
{
    struct src *s = ctx;
    *plan_json = NULL;
    if (spec->mode == FERRY_READ_CDC)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                               WHAT ": table %s: mode cdc is not implemented yet", spec->table);
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
    if (incremental)
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
    end_snapshot(s);
    rc = begin_snapshot(s, err);
    if (rc != FERRY_OK) return rc;
    ferry_free(s->snapshot_id);
    s->snapshot_id = snapshot_coordinates(s);
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

/* The SELECT list: every field as its column, FLOAT widened to double, spatial as WKB. */
static int select_list(struct ferry_buf *b, const struct ferry_schema *sc, const struct rel *r,
                       struct ferry_error *err)
{
    int rc = ferry_buf_printf(b, "SELECT ");
    for (int f = 0; f < sc->n_fields && rc == FERRY_OK; f++) {
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
    if (rw != NULL && d.zero_count > 0) {
        struct ferry_buf j;
        ferry_buf_init(&j, 0);
        ferry_buf_printf(&j, "[{\"at\":");
        ferry_buf_json_string(&j, r->from, strlen(r->from));
        ferry_buf_printf(&j, ",\"reason\":\"zero or invalid dates read as NULL (zero_dates: "
                             "null); the rows were kept\"}]");
        ferry_rw_report_skipped(rw, d.zero_count, j.data ? j.data : "[]");
        ferry_buf_release(&j);
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": table %s: %" PRId64
                       " zero or invalid dates read as NULL (zero_dates: null)",
                  r->from, d.zero_count);
    }
    return rc;
}

static int resume_key_of(const char *resume, const char *table, json_t **key, bool *done,
                         struct ferry_error *err)
{
    *key = NULL;
    *done = false;
    if (resume == NULL) return FERRY_OK;
    json_t *root = json_loads(resume, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": table %s: the resume position is not a JSON object", table);
    }
    *done = json_is_true(json_object_get(root, "done"));
    json_t *k = json_object_get(root, "key");
    if (json_is_array(k)) *key = json_incref(k);
    json_decref(root);
    return FERRY_OK;
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

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *sc, const char *plan_json, int shard,
                       const char *resume, struct ferry_row_writer *rw, struct ferry_error *err)
{
    struct src *s = ctx;
    json_t *resume_key = NULL;
    bool done = false;
    int rc = resume_key_of(resume, spec->table, &resume_key, &done, err);
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
    struct rel r;
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int ord[MAX_ORDER], n_ord = 0;
    rc = resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) {
        json_decref(plan);
        json_decref(resume_key);
        return rc;
    }
    rc = select_list(&sql, sc, &r, err);
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

const struct ferry_source_vtable ferry__mysql_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "mysql",
    .tuning_keys = source_tuning_keys,
    .supports_incremental = true,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = src_cancel,
    .snapshot = src_snapshot,
    .use_snapshot = src_use_snapshot,
};
