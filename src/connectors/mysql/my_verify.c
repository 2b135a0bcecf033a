/* connectors/mysql/my_verify.c - the mysql connector's verify_open slot: one side of a
 * verification on MySQL/MariaDB whose chunk digests are computed by the server, so that
 * only counts and sums cross the network.
 *
 * MySQL's SQL cannot compute verify's lookup3 row hash, so a pair with a MySQL side uses
 * the second canonical form (verify.h, `text_md5`; docs/internals/verify.md): the row hash
 * is the first 64 bits of MD5 over the row's canonical text, one piece per compared column
 * ('N' for NULL, else 'V' <byte length> ':' <text>), the text by the type the pipeline
 * writes (decimal integers, decimals with their scale, dates 'YYYY-MM-DD', timestamps
 * 'YYYY-MM-DD HH:MM:SS.ffffff' in UTC, times 'HH:MM:SS.ffffff', lowercase uuid and hex,
 * UTF-8 text). The chunk digest is count(*) and the SUM of the BIGINT UNSIGNED row hashes
 * (exact DECIMAL), reduced mod 2^64 in C. pg_verify.c computes the same form on PostgreSQL.
 * verify.c picks the form and falls back to reading the side through ferry for what it
 * does not cover (floats, json into jsonb, hashed columns, --repair).
 *
 * Reads inside one START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY until refresh().
 * Not thread-safe; one side per verification. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/mysql/my_common.h"
#include "ferry/connector.h"
#include "verify/verify.h"

struct myside {
    struct ferry_vside base;
    MYSQL *c;
    struct ferry_my_conn conn;
    char *db, *table, *from; /* from: `db`.`table` */
    char **data_type;        /* information_schema DATA_TYPE of each compared column */
    int *bits;               /* NUMERIC_PRECISION of BIT columns */
    char *hash_expr;
    char *key_text;  /* the key columns' canonical text */
    char *key_named; /* the same, named `_ferry_k0`, ... */
    char *key_tuple; /* (k1, k2) or k1, byte order where asked */
    char *key_order; /* k1, k2: the same for ORDER BY */
    struct ferry_buf sql;
    int64_t count;
    uint64_t sum;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

static const char *colname(const struct ferry_vtable *t, int i)
{
    return t->source ? t->cols[i].src : t->cols[i].dst;
}

static int code_of(const struct myside *s)
{
    return s->base.t->source ? FERRY_ESOURCE : FERRY_ESINK;
}

static bool is(const char *a, const char *b)
{
    return a && strcmp(a, b) == 0;
}

static bool is_temporal(const char *d)
{
    return is(d, "date") || is(d, "datetime") || is(d, "timestamp");
}

/* The canonical text of column i (NULL when the value is, or is a zero date, which the
 * source reads as NULL), x its quoted name. */
/* float32/float64: the 16 lowercase hex digits of the IEEE 754 double's bits, big-endian
 * (PostgreSQL: encode(float8send(x), 'hex'); a float widens to a double exactly, on both).
 * MySQL has no bit cast, so the bits are computed in double arithmetic, every step exact:
 * a = |x|; the exponent e from FLOOR(LOG2(a)), which may be one off near a power of two,
 * clamped to [-1022, 1023] and corrected by comparing a with POW(2, e) and POW(2, e + 1)
 * (never a / 2, which rounds below 2^-1021); the 52-bit fraction (a / 2^e - 1) * 2^52 (a
 * subnormal's: a * 2^1022 * 2^52, exponent field 0); the sign from x < 0, or for a zero from
 * ATAN2(x, -1) < 0 (-0: -pi; MariaDB stores -0 as 0, MySQL 8 may keep it). No NaN or
 * infinity exists in MySQL. Checked bit for bit against PostgreSQL on 3,000 values
 * (powers of two and their neighbours from 2^-1074 to 2^1023, random bit patterns). */
static int float_bits_expr(struct ferry_buf *b, const char *col)
{
    struct ferry_buf a, e0, e;
    ferry_buf_init(&a, 0);
    ferry_buf_init(&e0, 0);
    ferry_buf_init(&e, 0);
    ferry_buf_printf(&a, "ABS(%s * 1e0)", col);
    ferry_buf_printf(&e0, "LEAST(GREATEST(FLOOR(LOG2(%s)), -1022), 1023)", a.data);
    ferry_buf_printf(&e,
                     "(%s - (%s < POW(2, %s)) + (%s >= POW(2, LEAST(%s + 1, 1023)) AND %s < 1023))",
                     e0.data, a.data, e0.data, a.data, e0.data, e0.data);
    int rc =
        ferry_buf_failed(&a) || ferry_buf_failed(&e0) || ferry_buf_failed(&e)
            ? FERRY_ENOMEM
            : ferry_buf_printf(
                  b,
                  "IF(%s IS NULL, NULL, LOWER(CONCAT("
                  "LPAD(HEX(CAST(IF(%s < 0 OR (%s = 0 AND ATAN2(%s * 1e0, -1) < 0), 2048, 0)"
                  " + CASE WHEN %s < POW(2, -1022) THEN 0 ELSE %s + 1023 END AS UNSIGNED)), 3, "
                  "'0'),"
                  " LPAD(HEX(CAST(CASE WHEN %s < POW(2, -1022) THEN %s * POW(2, 1022) * POW(2, 52)"
                  " ELSE (%s / POW(2, %s) - 1) * POW(2, 52) END AS UNSIGNED)), 13, '0'))))",
                  col, col, col, col, a.data, e.data, a.data, a.data, a.data, e.data);
    ferry_buf_release(&a);
    ferry_buf_release(&e0);
    ferry_buf_release(&e);
    return rc;
}

static int text_expr(struct ferry_buf *b, const struct myside *s, int i, const char *x)
{
    const struct ferry_vcol *c = &s->base.t->cols[i];
    const char *d = s->data_type[i];
    /* zero dates (month or day 0) are NULL, as zero_dates: null reads them */
    char zero[600] = "";
    if (is_temporal(d)) snprintf(zero, sizeof zero, "MONTH(%s) = 0 OR DAYOFMONTH(%s) = 0", x, x);
    switch (c->type) {
    case FERRY_TYPE_BOOL:
        return ferry_buf_printf(b, "IF(%s IS NULL, NULL, IF(%s + 0 <> 0, '1', '0'))", x, x);
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_DECIMAL128:
    case FERRY_TYPE_DECIMAL_TEXT:
        if (is(d, "bit")) return ferry_buf_printf(b, "CAST(%s + 0 AS CHAR)", x);
        return ferry_buf_printf(b, "CAST(%s AS CHAR)", x);
    case FERRY_TYPE_DATE32:
        return ferry_buf_printf(b, "IF(%s, NULL, DATE_FORMAT(%s, '%%Y-%%m-%%d'))",
                                zero[0] ? zero : "FALSE", x);
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: /* the session's time_zone is +00:00 */
        return ferry_buf_printf(b, "IF(%s, NULL, DATE_FORMAT(%s, '%%Y-%%m-%%d %%H:%%i:%%s.%%f'))",
                                zero[0] ? zero : "FALSE", x);
    case FERRY_TYPE_TIME64_US:
        return ferry_buf_printf(b, "TIME_FORMAT(%s, '%%H:%%i:%%s.%%f')", x);
    case FERRY_TYPE_UUID:
        return ferry_buf_printf(b, "LOWER(CONVERT(%s USING utf8mb4))", x);
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        return float_bits_expr(b, x);
    case FERRY_TYPE_BINARY:
        if (is(d, "bit"))
            return ferry_buf_printf(b, "LPAD(LOWER(HEX(%s + 0)), %d, '0')", x,
                                    2 * ((s->bits[i] + 7) / 8));
        if (is(d, "geometry") || is(d, "point") || is(d, "linestring") || is(d, "polygon") ||
            is(d, "multipoint") || is(d, "multilinestring") || is(d, "multipolygon") ||
            is(d, "geometrycollection") || is(d, "geomcollection"))
            return ferry_buf_printf(b, "LOWER(HEX(ST_AsBinary(%s)))", x);
        return ferry_buf_printf(b, "LOWER(HEX(%s))", x);
    default: /* text, json, enum, set, time as text: the UTF-8 text */
        return ferry_buf_printf(b, "CONVERT(%s USING utf8mb4)", x);
    }
}

static int quoted(struct ferry_buf *q, const char *name, struct ferry_error *err)
{
    ferry_buf_reset(q);
    int rc = ferry__my_quote_ident(q, name, err);
    if (rc == FERRY_OK && ferry_buf_append(q, "", 1) != FERRY_OK) rc = oom(err);
    return rc;
}

static bool text_key(enum ferry_type ty)
{
    return ty == FERRY_TYPE_UTF8 || ty == FERRY_TYPE_JSON;
}

static int build_keys(struct myside *s, struct ferry_buf *q, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    struct ferry_buf kt, kn, tu;
    ferry_buf_init(&kt, 0);
    ferry_buf_init(&kn, 0);
    ferry_buf_init(&tu, 0);
    int rc = FERRY_OK;
    for (int k = 0; k < t->n_key && rc == FERRY_OK; k++) {
        int i = t->key[k];
        const char *sep = k > 0 ? ", " : "";
        rc = quoted(q, colname(t, i), err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&kt, "%s", sep);
        if (rc == FERRY_OK) rc = text_expr(&kt, s, i, q->data);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&kn, "%s", sep);
        if (rc == FERRY_OK) rc = text_expr(&kn, s, i, q->data);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&kn, " AS `_ferry_k%d`", k);
        /* keys compared byte for byte (UTF-8) when the other side orders them so */
        if (rc == FERRY_OK && t->byte_order_text && text_key(t->cols[i].type))
            rc = ferry_buf_printf(&tu, "%sCAST(CONVERT(%s USING utf8mb4) AS BINARY)", sep, q->data);
        else if (rc == FERRY_OK)
            rc = ferry_buf_printf(&tu, "%s%s", sep, q->data);
    }
    if (rc == FERRY_OK) {
        s->key_text = ferry_buf_take(&kt);
        s->key_named = ferry_buf_take(&kn);
        s->key_order = ferry_buf_take(&tu);
        s->key_tuple = s->key_order && t->n_key > 1 ? ferry_asprintf("(%s)", s->key_order)
                                                    : ferry_strdup(s->key_order);
        if (!s->key_text || !s->key_named || !s->key_order || !s->key_tuple) rc = oom(err);
    }
    ferry_buf_release(&kt);
    ferry_buf_release(&kn);
    ferry_buf_release(&tu);
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

/* CAST(CONV(LEFT(MD5(CONCAT(piece, ...)), 16), 16, 10) AS UNSIGNED) */
static int build_exprs(struct myside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    struct ferry_buf b, q;
    ferry_buf_init(&b, 0);
    ferry_buf_init(&q, 0);
    int rc = ferry_buf_printf(&b, "CAST(CONV(LEFT(MD5(CONCAT(");
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++) {
        rc = quoted(&q, colname(t, i), err);
        if (rc != FERRY_OK) break;
        struct ferry_buf tx;
        ferry_buf_init(&tx, 0);
        rc = text_expr(&tx, s, i, q.data);
        enum ferry_type ty = t->cols[i].type;
        if (rc == FERRY_OK && (ty == FERRY_TYPE_FLOAT32 || ty == FERRY_TYPE_FLOAT64))
            rc = ferry_buf_printf(&b, "%sCOALESCE(CONCAT('V16:', %s), 'N')", i > 0 ? ", " : "",
                                  tx.data); /* always 16 hex digits: the expression once */
        else if (rc == FERRY_OK)
            rc = ferry_buf_printf(&b, "%sCOALESCE(CONCAT('V', LENGTH(%s), ':', %s), 'N')",
                                  i > 0 ? ", " : "", tx.data, tx.data);
        ferry_buf_release(&tx);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ")), 16), 16, 10) AS UNSIGNED)");
    if (rc == FERRY_OK && (s->hash_expr = ferry_buf_take(&b)) == NULL) rc = oom(err);
    if (rc == FERRY_OK) rc = build_keys(s, &q, err);
    ferry_buf_release(&b);
    ferry_buf_release(&q);
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

/* A key text as a literal of its column: numbers bare (a quoted number compared with a
 * DECIMAL column would be compared as a double), text escaped by the connection. */
static int literal(struct myside *s, int i, const char *v, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    enum ferry_type ty = t->cols[i].type;
    struct ferry_buf *b = &s->sql;
    bool num = ty == FERRY_TYPE_INT8 || ty == FERRY_TYPE_INT16 || ty == FERRY_TYPE_INT32 ||
               ty == FERRY_TYPE_INT64 || ty == FERRY_TYPE_DECIMAL128 ||
               ty == FERRY_TYPE_DECIMAL_TEXT;
    if (num && v[0] && strspn(v, "-0123456789.") == strlen(v) && strchr(v + 1, '-') == NULL)
        return ferry_buf_printf(b, "%s", v) == FERRY_OK ? FERRY_OK : oom(err);
    bool bin = t->byte_order_text && text_key(ty);
    if (bin && ferry_buf_printf(b, "CAST(") != FERRY_OK) return oom(err);
    if (ferry__my_quote_text(s->c, b, v, strlen(v)) != FERRY_OK) return oom(err);
    if (bin && ferry_buf_printf(b, " AS BINARY)") != FERRY_OK) return oom(err);
    return FERRY_OK;
}

static int tuple_lit(struct myside *s, const int *cols, char *const *vals, int n,
                     struct ferry_error *err)
{
    int rc = ferry_buf_printf(&s->sql, n > 1 ? "(" : "");
    for (int k = 0; k < n && rc == FERRY_OK; k++) {
        if (k > 0) rc = ferry_buf_printf(&s->sql, ", ");
        if (rc == FERRY_OK) rc = literal(s, cols[k], vals[k], err);
    }
    if (rc == FERRY_OK && n > 1) rc = ferry_buf_printf(&s->sql, ")");
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

/* " WHERE key > lo AND key <= hi" (and the --until-checkpoint bound) */
static int range_cond(struct myside *s, const struct ferry_vrange *r, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK;
    bool where = false;
    const struct ferry_vkey *ks[2] = {r->lo, r->hi};
    const char *ops[2] = {r->lo_incl ? ">=" : ">", "<="};
    for (int e = 0; e < 2 && rc == FERRY_OK; e++) {
        if (ks[e] == NULL) continue;
        rc = ferry_buf_printf(&s->sql, "%s%s %s ", where ? " AND " : " WHERE ", s->key_tuple,
                              ops[e]);
        where = true;
        if (rc == FERRY_OK) rc = tuple_lit(s, t->key, ks[e]->part, t->n_key, err);
    }
    if (rc == FERRY_OK && t->n_until > 0) {
        struct ferry_buf q;
        ferry_buf_init(&q, 0);
        rc = ferry_buf_printf(&s->sql, "%s(", where ? " AND " : " WHERE ");
        for (int i = 0; i < t->n_until && rc == FERRY_OK; i++) {
            rc = quoted(&q, colname(t, t->until_col[i]), err);
            if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, "%s%s", i > 0 ? ", " : "", q.data);
        }
        ferry_buf_release(&q);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, ") <= ");
        if (rc == FERRY_OK) rc = tuple_lit(s, t->until_col, t->until, t->n_until, err);
    }
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

/* Runs s->sql and stores its (small) result. */
static int run(struct myside *s, MYSQL_RES **out, struct ferry_error *err)
{
    s->base.bytes += (int64_t)s->sql.len;
    s->base.queries++;
    if (mysql_real_query(s->c, s->sql.data, s->sql.len) != 0 ||
        (*out = mysql_store_result(s->c)) == NULL)
        return ferry__my_error(err, code_of(s), s->c, "verify: %s table %s", s->base.what,
                               s->base.name);
    return FERRY_OK;
}

static void count_row(struct myside *s, MYSQL_RES *res)
{
    unsigned long *len = mysql_fetch_lengths(res);
    s->base.bytes += 7;
    for (unsigned i = 0; i < mysql_num_fields(res); i++)
        s->base.bytes += 4 + (int64_t)len[i];
}

static int my_digest_send(struct ferry_vside *base, const struct ferry_vrange *r,
                          struct ferry_error *err)
{
    struct myside *s = (struct myside *)base;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT COUNT(*), COALESCE(SUM(%s), 0) FROM %s",
                              s->hash_expr, s->from);
    if (rc != FERRY_OK) return oom(err);
    rc = range_cond(s, r, err);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_OK) rc = run(s, &res, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row == NULL || row[0] == NULL || row[1] == NULL) {
        mysql_free_result(res);
        return ferry_error_set(err, FERRY_EIO, "mysql", "verify: %s table %s: no digest returned",
                               base->what, base->name);
    }
    count_row(s, res);
    s->count = strtoll(row[0], NULL, 10);
    s->sum = ferry__vcanon_sum_text(row[1]);
    mysql_free_result(res);
    return FERRY_OK;
}

static int my_digest_recv(struct ferry_vside *base, int64_t *count, uint64_t *sum,
                          struct ferry_error *err)
{
    (void)err;
    struct myside *s = (struct myside *)base;
    *count = s->count;
    *sum = s->sum;
    return FERRY_OK;
}

/* One fetched row's cells (ferry__vrows_push_cells). */
struct my_cells {
    MYSQL_ROW row;
    unsigned long *len;
};

static const char *my_cell(void *ctx, int k, size_t *len)
{
    const struct my_cells *c = ctx;
    *len = c->row[k] ? (size_t)c->len[k] : 0;
    return c->row[k];
}

/* Rows of a result: the first n_key columns are key texts, normalized; then the hash. */
static int collect(struct myside *s, MYSQL_RES *res, bool with_hash, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK;
    struct my_cells c;
    while (rc == FERRY_OK && (c.row = mysql_fetch_row(res)) != NULL) {
        count_row(s, res);
        c.len = mysql_fetch_lengths(res);
        int64_t h = with_hash && c.row[t->n_key] ? (int64_t)strtoull(c.row[t->n_key], NULL, 10) : 0;
        rc = ferry__vrows_push_cells(out, t, my_cell, &c, h, err);
    }
    return rc;
}

static int my_bounds(struct ferry_vside *base, const struct ferry_vrange *r, int64_t step,
                     struct ferry_vrows *out, struct ferry_error *err)
{
    struct myside *s = (struct myside *)base;
    const struct ferry_vtable *t = base->t;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT ");
    for (int k = 0; k < t->n_key && rc == FERRY_OK; k++)
        rc = ferry_buf_printf(&s->sql, "%s`_ferry_k%d`", k > 0 ? ", " : "", k);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, " FROM (SELECT ");
    /* the canonical key texts, named, and their rank in the key's order */
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql, "%s, ROW_NUMBER() OVER (ORDER BY %s) AS `_ferry_rn` FROM %s",
                              s->key_named, s->key_order, s->from);
    if (rc != FERRY_OK) return oom(err);
    rc = range_cond(s, r, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql,
                              ") q WHERE `_ferry_rn` %% %" PRId64 " = 0 ORDER BY `_ferry_rn`",
                              step) == FERRY_OK
                 ? FERRY_OK
                 : oom(err);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_OK) rc = run(s, &res, err);
    if (rc != FERRY_OK) return rc;
    rc = collect(s, res, false, out, err);
    mysql_free_result(res);
    return rc;
}

static int my_key_span(struct ferry_vside *base, const struct ferry_vrange *r, char **min,
                       char **max, struct ferry_error *err)
{
    struct myside *s = (struct myside *)base;
    *min = *max = NULL;
    ferry_buf_reset(&s->sql);
    if (ferry_buf_printf(&s->sql, "SELECT CAST(MIN(%s) AS CHAR), CAST(MAX(%s) AS CHAR) FROM %s",
                         s->key_tuple, s->key_tuple, s->from) != FERRY_OK)
        return oom(err);
    int rc = range_cond(s, r, err);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_OK) rc = run(s, &res, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row != NULL && row[0] != NULL && row[1] != NULL) {
        count_row(s, res);
        *min = ferry_strdup(row[0]);
        *max = ferry_strdup(row[1]);
        if (*min == NULL || *max == NULL) rc = oom(err);
    }
    mysql_free_result(res);
    return rc;
}

static int my_rows(struct ferry_vside *base, const struct ferry_vrange *r, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    struct myside *s = (struct myside *)base;
    ferry_buf_reset(&s->sql);
    if (ferry_buf_printf(&s->sql, "SELECT %s, %s FROM %s", s->key_text, s->hash_expr, s->from) !=
        FERRY_OK)
        return oom(err);
    int rc = range_cond(s, r, err);
    MYSQL_RES *res = NULL;
    if (rc == FERRY_OK) rc = run(s, &res, err);
    if (rc != FERRY_OK) return rc;
    rc = collect(s, res, true, out, err);
    mysql_free_result(res);
    return rc;
}

/* verify.c reads a mysql side through ferry for --repair (this side never fetches). */
static int my_fetch(struct ferry_vside *base, const struct ferry_vkey *k,
                    const struct ferry_schema *sc, struct ferry_row_writer *rw, bool *found,
                    struct ferry_error *err)
{
    (void)k, (void)sc, (void)rw;
    *found = false;
    return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                           "verify: %s table %s: rows are fetched for --repair through the "
                           "mysql source, not this side",
                           base->what, base->name);
}

static int begin_snapshot(struct myside *s, struct ferry_error *err)
{
    return ferry__my_exec(s->c, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", code_of(s),
                          "verify", err);
}

static int my_refresh(struct ferry_vside *base, struct ferry_error *err)
{
    struct myside *s = (struct myside *)base;
    int rc = ferry__my_exec(s->c, "COMMIT", code_of(s), "verify", err);
    return rc == FERRY_OK ? begin_snapshot(s, err) : rc;
}

static void my_close(struct ferry_vside *base)
{
    struct myside *s = (struct myside *)base;
    if (s == NULL) return;
    if (s->c) mysql_close(s->c);
    ferry__my_conn_free(&s->conn);
    if (s->data_type)
        for (int i = 0; i < s->base.t->n_cols; i++)
            ferry_free(s->data_type[i]);
    ferry_free(s->data_type);
    ferry_free(s->bits);
    ferry_free(s->db);
    ferry_free(s->table);
    ferry_free(s->from);
    ferry_free(s->hash_expr);
    ferry_free(s->key_text);
    ferry_free(s->key_named);
    ferry_free(s->key_tuple);
    ferry_free(s->key_order);
    ferry_buf_release(&s->sql);
    ferry_free(s);
}

/* The table must exist and hold every compared column; their DATA_TYPE picks a few
 * expressions (BIT, spatial, zero dates). */
static int read_catalog(struct myside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql,
                              "SELECT COLUMN_NAME, DATA_TYPE, COALESCE(NUMERIC_PRECISION, 0) FROM "
                              "information_schema.COLUMNS WHERE TABLE_SCHEMA = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &s->sql, s->db, strlen(s->db));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, " AND TABLE_NAME = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &s->sql, s->table, strlen(s->table));
    if (rc != FERRY_OK) return oom(err);
    s->data_type = ferry_calloc((size_t)t->n_cols + 1, sizeof *s->data_type);
    s->bits = ferry_calloc((size_t)t->n_cols + 1, sizeof *s->bits);
    if (s->data_type == NULL || s->bits == NULL) return oom(err);
    MYSQL_RES *res = NULL;
    rc = run(s, &res, err);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row;
    int n = 0;
    while (rc == FERRY_OK && (row = mysql_fetch_row(res)) != NULL) {
        count_row(s, res);
        n++;
        for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++)
            if (row[0] && strcmp(row[0], colname(t, i)) == 0 && s->data_type[i] == NULL) {
                if ((s->data_type[i] = ferry_strdup(row[1] ? row[1] : "")) == NULL) rc = oom(err);
                s->bits[i] = row[2] ? (int)strtol(row[2], NULL, 10) : 0;
            }
    }
    mysql_free_result(res);
    if (rc == FERRY_OK && n == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify",
                             "verify: %s table %s not found (or not visible to this user)",
                             s->base.what, s->base.name);
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++)
        if (s->data_type[i] == NULL)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify",
                                 "verify: %s table %s has no column `%s`", s->base.what,
                                 s->base.name, colname(t, i));
    return rc;
}

static const struct ferry_vside_ops my_ops = {
    .digest_send = my_digest_send,
    .digest_recv = my_digest_recv,
    .bounds = my_bounds,
    .rows = my_rows,
    .key_span = my_key_span,
    .fetch = my_fetch,
    .refresh = my_refresh,
    .close = my_close,
};

/* The table: a source resource's `db.table` (the URL's database when absent), a
 * destination's whole target name in the URL's database (as the sink writes it). */
static int name_table(struct myside *s, bool source, const struct ferry_resource_spec *r,
                      struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (source) {
        rc = ferry__my_split_name(r->table, &s->db, &s->table, err);
    } else if ((s->table = ferry_strdup(ferry_resource_target(r))) == NULL) {
        rc = oom(err);
    }
    if (rc == FERRY_OK && s->db == NULL && (s->db = ferry_strdup(s->conn.db)) == NULL)
        rc = oom(err);
    struct ferry_buf f;
    ferry_buf_init(&f, 0);
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&f, s->db, err);
    if (rc == FERRY_OK && ferry_buf_append(&f, ".", 1) != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&f, s->table, err);
    if (rc == FERRY_OK && (s->from = ferry_buf_take(&f)) == NULL) rc = oom(err);
    ferry_buf_release(&f);
    if (rc == FERRY_OK) snprintf(s->base.name, sizeof s->base.name, "%s.%s", s->db, s->table);
    return rc;
}

int ferry__my_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err)
{
    *out = NULL;
    struct myside *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    s->base.ops = &my_ops;
    s->base.what = what;
    s->base.t = t;
    ferry_buf_init(&s->sql, 0);
    char whatbuf[64];
    snprintf(whatbuf, sizeof whatbuf, "verify: mysql %s", what);
    int rc = ferry__my_read_conn_config(cfg, whatbuf, &s->conn, err);
    if (rc == FERRY_OK) rc = name_table(s, source, r, err);
    if (rc == FERRY_OK) rc = ferry__my_connect(&s->conn, whatbuf, &s->c, err);
    if (rc == FERRY_OK) rc = read_catalog(s, err);
    if (rc == FERRY_OK) rc = build_exprs(s, err);
    if (rc == FERRY_OK)
        rc = ferry__my_exec(s->c, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                            code_of(s), whatbuf, err);
    if (rc == FERRY_OK) rc = begin_snapshot(s, err);
    if (rc == FERRY_OK && (*table_out = ferry_asprintf("mysql %s", s->base.name)) == NULL)
        rc = oom(err);
    if (rc != FERRY_OK) {
        my_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return FERRY_OK;
}
