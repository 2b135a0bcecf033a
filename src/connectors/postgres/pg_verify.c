/* connectors/postgres/pg_verify.c - the postgres connector's verify_open slot: one side of a verification on PostgreSQL: chunk digests computed
 * by the server in SQL, so that only counts and sums cross the network.
 *
 * Owns the SQL that computes verify's row hash (canon.c) from the columns with the
 * server's own hash functions: per column hashint8extended / hashfloat8extended /
 * timestamp_hash_extended / uuid_hash_extended / hashtextextended seeded with the column's
 * position (a constant for NULL), XORed, then hashint8extended(x, 0); and the chunk digest
 * count(*), sum(hash) (numeric, reduced mod 2^64 in C). Few function calls per value and
 * no text or bytea built per row: that is what makes it cheaper than hashing row text. Reads inside
 * one REPEATABLE READ READ ONLY transaction until refresh(). Calls libpq through
 * connectors/postgres/pg_common (connect, quoting, errors). Called by verify.c through the
 * verify_open slot of the postgres source and sink. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/postgres/pg_common.h"
#include "verify/verify.h"

struct pgside {
    struct ferry_vside base;
    PGconn *c;
    char *from;      /* "schema"."table" */
    char *hash_expr; /* the row hash over every compared column */
    char *key_text;  /* k1::text, k2::text */
    char *key_order; /* k1, k2 (COLLATE "C" where asked) */
    char *key_tuple; /* (k1, k2) or k1, with the same collations */
    struct ferry_buf sql;
    bool pending;
    uint32_t *oid; /* catalog type of each compared column */
    bool *notnull; /* NOT NULL columns need no NULL branch */
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

static const char *colname(const struct ferry_vtable *t, int i)
{
    return t->source ? t->cols[i].src : t->cols[i].dst;
}

static bool text_key(enum ferry_type ty)
{
    return ty == FERRY_TYPE_UTF8 || ty == FERRY_TYPE_JSON || ty == FERRY_TYPE_DECIMAL_TEXT;
}

/* The hash of one column (canon.c, ferry__vcanon_value_hash) as an int8 expression that is
 * NULL when the value is. */
static int value_expr(struct ferry_buf *b, const struct ferry_vtable *t, int i, uint32_t oid,
                      struct ferry_error *err)
{
    const struct ferry_vcol *c = &t->cols[i];
    int pos = i + 1;
    struct ferry_buf q;
    ferry_buf_init(&q, 0);
    int rc = ferry__pg_quote_ident(&q, colname(t, i), err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&q);
        return rc;
    }
    const char *x = q.data;
    if (t->source && c->how == FERRY_VHOW_SHA256) {
        if (c->src_type == FERRY_TYPE_BINARY)
            rc = ferry_buf_printf(b, "hashtextextended(encode(sha256(%s), 'hex'), %d)", x, pos);
        else
            rc = ferry_buf_printf(b,
                                  "hashtextextended(encode(sha256(convert_to(%s::text, 'UTF8')), "
                                  "'hex'), %d)",
                                  x, pos);
        ferry_buf_release(&q);
        return rc;
    }
    switch (c->type) {
    case FERRY_TYPE_BOOL:
        rc = ferry_buf_printf(b, "hashint8extended(%s::int4::int8, %d)", x, pos);
        break;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        rc = ferry_buf_printf(b, "hashint8extended(%s::int8, %d)", x, pos);
        break;
    case FERRY_TYPE_FLOAT32:
        /* -0 = 0 for PostgreSQL's hash; told apart as in canon.c */
        rc = ferry_buf_printf(b,
                              "CASE WHEN %s = 0 AND float4send(%s::float4) <> '\\x00000000'::bytea "
                              "THEN %d ELSE hashfloat4extended(%s::float4, %d) END",
                              x, x, pos ^ 1, x, pos);
        break;
    case FERRY_TYPE_FLOAT64:
        rc = ferry_buf_printf(b,
                              "CASE WHEN %s = 0 AND float8send(%s::float8) <> "
                              "'\\x0000000000000000'::bytea THEN %d ELSE "
                              "hashfloat8extended(%s::float8, %d) END",
                              x, x, pos ^ 1, x, pos);
        break;
    case FERRY_TYPE_DATE32: /* +-infinity (special values, connector.h) as the int32 ends;
                             * NULL stays NULL (the caller's coalesce hashes it as null) */
        rc = ferry_buf_printf(b,
                              "hashint8extended(CASE WHEN %s IS NULL OR isfinite(%s::date) THEN "
                              "(%s::date - '2000-01-01'::date)::int8 WHEN %s::date > "
                              "'2000-01-01'::date THEN 2147483647 ELSE -2147483648 END, %d)",
                              x, x, x, x, pos);
        break;
    case FERRY_TYPE_TIME64_US:
        rc = ferry_buf_printf(b, "time_hash_extended(%s::time, %d)", x, pos);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
        rc = ferry_buf_printf(b, "timestamp_hash_extended(%s::timestamp, %d)", x, pos);
        break;
    case FERRY_TYPE_TIMESTAMPTZ_US: /* the session's TimeZone is UTC: same microseconds */
        rc = ferry_buf_printf(b, "timestamp_hash_extended(%s::timestamptz::timestamp, %d)", x, pos);
        break;
    case FERRY_TYPE_UUID:
        rc = ferry_buf_printf(b, "uuid_hash_extended(%s::uuid, %d)", x, pos);
        break;
    case FERRY_TYPE_BINARY:
        rc = ferry_buf_printf(b, "hashtextextended(encode(%s::bytea, 'hex'), %d)", x, pos);
        break;
    default: { /* text, json, decimals: the UTF-8 text, hashed byte for byte */
        char tx[700];
        if (oid == FERRY_PG_OID_BPCHAR) /* the source reads char(n) with its padding */
            snprintf(tx, sizeof tx, "convert_from(bpcharsend(%s), 'UTF8')", x);
        else if (c->type == FERRY_TYPE_JSON && t->json_normalize)
            snprintf(tx, sizeof tx, "%s::jsonb::text", x);
        else
            snprintf(tx, sizeof tx, "%s::text", x);
        /* COLLATE "C": a deterministic collation hashes the bytes */
        rc = ferry_buf_printf(b, "hashtextextended(%s COLLATE \"C\", %d)", tx, pos);
        break;
    }
    }
    ferry_buf_release(&q);
    return rc;
}

/* verify.h's text_md5 form (pairs with a MySQL side, connectors/mysql/my_verify.c): the
 * canonical text of column i, NULL when the value is. */
static int md5_text_expr(struct ferry_buf *b, const struct ferry_vtable *t, int i, uint32_t oid,
                         const char *x)
{
    switch (t->cols[i].type) {
    case FERRY_TYPE_BOOL:
        return ferry_buf_printf(b, "%s::int4::text", x);
    case FERRY_TYPE_DATE32:
        return ferry_buf_printf(b, "to_char(%s::date, 'YYYY-MM-DD')", x);
    case FERRY_TYPE_TIMESTAMP_US:
        return ferry_buf_printf(b, "to_char(%s::timestamp, 'YYYY-MM-DD HH24:MI:SS.US')", x);
    case FERRY_TYPE_TIMESTAMPTZ_US: /* the session's TimeZone is UTC */
        return ferry_buf_printf(
            b, "to_char(%s::timestamptz::timestamp, 'YYYY-MM-DD HH24:MI:SS.US')", x);
    case FERRY_TYPE_TIME64_US:
        return ferry_buf_printf(b, "to_char(%s::time, 'HH24:MI:SS.US')", x);
    case FERRY_TYPE_BINARY:
        return ferry_buf_printf(b, "encode(%s::bytea, 'hex')", x);
    case FERRY_TYPE_FLOAT32: /* the double's bits in hex (a float4 widens exactly), NaN one */
    case FERRY_TYPE_FLOAT64:
        return ferry_buf_printf(b,
                                "CASE WHEN %s::float8 = 'NaN' THEN '7ff8000000000000' "
                                "ELSE encode(float8send(%s::float8), 'hex') END",
                                x, x);
    default: /* ints, decimals, uuid, text, json: the text output */
        if (oid == FERRY_PG_OID_BPCHAR)
            return ferry_buf_printf(b, "convert_from(bpcharsend(%s), 'UTF8')", x);
        return ferry_buf_printf(b, "%s::text", x);
    }
}

/* ('x' || left(md5(piece || ...), 16))::bit(64)::int8, piece = 'N' for NULL, else
 * 'V' || octet_length(text) || ':' || text */
static int md5_row_expr(struct pgside *s, struct ferry_buf *b, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    struct ferry_buf q, tx;
    ferry_buf_init(&q, 0);
    ferry_buf_init(&tx, 0);
    int rc = ferry_buf_printf(b, "('x' || left(md5(");
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++) {
        ferry_buf_reset(&q);
        ferry_buf_reset(&tx);
        rc = ferry__pg_quote_ident(&q, colname(t, i), err);
        if (rc == FERRY_OK) rc = ferry_buf_append(&q, "", 1);
        if (rc == FERRY_OK) rc = md5_text_expr(&tx, t, i, s->oid[i], q.data);
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(b, "%scoalesce('V' || octet_length(%s)::text || ':' || %s, 'N')",
                                  i > 0 ? " || " : "", tx.data, tx.data);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, "), 16))::bit(64)::int8");
    ferry_buf_release(&q);
    ferry_buf_release(&tx);
    return rc;
}

static int key_exprs(struct pgside *s, struct ferry_error *err);

static int build_exprs(struct pgside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (t->text_md5) {
        int rc = md5_row_expr(s, &b, err);
        if (rc == FERRY_OK && (s->hash_expr = ferry_buf_take(&b)) == NULL) rc = oom(err);
        ferry_buf_release(&b);
        return rc == FERRY_OK ? key_exprs(s, err) : rc;
    }
    int rc = ferry_buf_printf(&b, "hashint8extended(");
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&b, " # ");
        bool nn = s->notnull[i];
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, nn ? "(" : "coalesce(");
        if (rc == FERRY_OK) rc = value_expr(&b, t, i, s->oid[i], err);
        if (rc == FERRY_OK && nn) rc = ferry_buf_printf(&b, ")");
        if (rc == FERRY_OK && !nn)
            rc = ferry_buf_printf(&b, ", '%" PRId64 "'::int8)", ferry__vcanon_null_hash(i + 1));
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ", 0)");
    if (rc == FERRY_OK && (s->hash_expr = ferry_buf_take(&b)) == NULL) rc = oom(err);
    ferry_buf_release(&b);
    return rc == FERRY_OK ? key_exprs(s, err) : rc;
}

static int key_exprs(struct pgside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK;
    struct ferry_buf kt, ko, tu;
    ferry_buf_init(&kt, 0);
    ferry_buf_init(&ko, 0);
    ferry_buf_init(&tu, 0);
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&tu, "(");
    for (int k = 0; k < t->n_key && rc == FERRY_OK; k++) {
        int i = t->key[k];
        const char *sep = k > 0 ? ", " : "";
        bool collate = t->byte_order_text && text_key(t->cols[i].type);
        rc = ferry_buf_printf(&kt, "%s", sep);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&kt, colname(t, i), err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&kt, "::text");
        if (rc == FERRY_OK) rc = ferry_buf_printf(&ko, "%s", sep);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&ko, colname(t, i), err);
        if (rc == FERRY_OK && collate) rc = ferry_buf_printf(&ko, " COLLATE \"C\"");
        if (rc == FERRY_OK) rc = ferry_buf_printf(&tu, "%s", sep);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&tu, colname(t, i), err);
        if (rc == FERRY_OK && collate) rc = ferry_buf_printf(&tu, " COLLATE \"C\"");
    }
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&tu, ")");
    if (rc == FERRY_OK) {
        s->key_text = ferry_buf_take(&kt);
        s->key_order = ferry_buf_take(&ko);
        s->key_tuple = ferry_buf_take(&tu);
        if (!s->key_text || !s->key_order || !s->key_tuple) rc = oom(err);
    }
    ferry_buf_release(&kt);
    ferry_buf_release(&ko);
    ferry_buf_release(&tu);
    return rc;
}

/* " WHERE key > $1 AND key <= $2" with the parameters appended to vals. */
static int range_cond(struct pgside *s, const struct ferry_vrange *r, const char **vals, int *np,
                      struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    struct ferry_buf *b = &s->sql;
    int rc = FERRY_OK;
    bool where = false;
    const struct ferry_vkey *ks[2] = {r->lo, r->hi};
    const char *ops[2] = {r->lo_incl ? ">=" : ">", "<="};
    for (int e = 0; e < 2 && rc == FERRY_OK; e++) {
        if (ks[e] == NULL) continue;
        rc = ferry_buf_printf(b, "%s%s %s ", where ? " AND " : " WHERE ", s->key_tuple, ops[e]);
        where = true;
        if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(b, "(");
        for (int k = 0; k < t->n_key && rc == FERRY_OK; k++) {
            vals[*np] = ks[e]->part[k];
            (*np)++;
            rc = ferry_buf_printf(b, "%s$%d", k > 0 ? ", " : "", *np);
        }
        if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(b, ")");
    }
    if (rc == FERRY_OK && t->n_until > 0) {
        /* the saved route position: (cursor..., key...) <= (...) */
        rc = ferry_buf_printf(b, "%s(", where ? " AND " : " WHERE ");
        for (int i = 0; i < t->n_until && rc == FERRY_OK; i++) {
            if (i > 0) rc = ferry_buf_printf(b, ", ");
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, colname(t, t->until_col[i]), err);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ") <= (");
        for (int i = 0; i < t->n_until && rc == FERRY_OK; i++) {
            vals[*np] = t->until[i];
            (*np)++;
            rc = ferry_buf_printf(b, "%s$%d", i > 0 ? ", " : "", *np);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")");
    }
    return rc;
}

static void count_bytes(struct pgside *s, PGresult *res)
{
    int64_t n = 0;
    int rows = PQntuples(res), cols = PQnfields(res);
    for (int r = 0; r < rows; r++) {
        n += 7; /* DataRow header */
        for (int c = 0; c < cols; c++)
            n += 4 + (PQgetisnull(res, r, c) ? 0 : PQgetlength(res, r, c));
    }
    s->base.bytes += n;
    s->base.queries++;
}

static int run(struct pgside *s, int np, const char *const *vals, PGresult **out,
               struct ferry_error *err)
{
    s->base.bytes += (int64_t)s->sql.len;
    PGresult *res = PQexecParams(s->c, s->sql.data, np, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, s->base.t->source ? FERRY_ESOURCE : FERRY_ESINK, s->c, res,
                                 "verify: %s table %s", s->base.what, s->base.name);
        PQclear(res);
        return rc;
    }
    count_bytes(s, res);
    *out = res;
    return FERRY_OK;
}

#define MAX_PARAMS 64

static int pg_digest_send(struct ferry_vside *base, const struct ferry_vrange *r,
                          struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const char *vals[MAX_PARAMS];
    int np = 0;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT count(*), coalesce(sum(%s), 0)::text FROM %s",
                              s->hash_expr, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r, vals, &np, err);
    if (rc != FERRY_OK) return rc == FERRY_ENOMEM ? oom(err) : rc;
    s->base.bytes += (int64_t)s->sql.len;
    if (!PQsendQueryParams(s->c, s->sql.data, np, NULL, vals, NULL, NULL, 0))
        return ferry__pg_error(err, FERRY_EIO, s->c, NULL, "verify: %s table %s", base->what,
                               base->name);
    s->pending = true;
    return FERRY_OK;
}

static int pg_buckets_send(struct ferry_vside *base, const struct ferry_vrange *r,
                           const struct ferry_vrows *cuts, struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const char *vals[MAX_PARAMS];
    int np = 0;
    /* width_bucket counts thresholds as inclusive lower bounds: (c_j, c_j+1] of an integer
     * key is [c_j + 1, c_j+1 + 1) */
    struct ferry_buf th;
    ferry_buf_init(&th, 0);
    int rc = ferry_buf_printf(&th, "{");
    for (int64_t i = 0; i < cuts->n && rc == FERRY_OK; i++)
        rc = ferry_buf_printf(&th, "%s%lld", i > 0 ? "," : "",
                              strtoll(cuts->v[i].key.part[0], NULL, 10) + 1);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&th, "}");
    ferry_buf_reset(&s->sql);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql,
                              "SELECT width_bucket(%s::int8, $1::int8[]), count(*), "
                              "coalesce(sum(%s), 0)::text FROM %s",
                              s->key_tuple, s->hash_expr, s->from);
    vals[np++] = th.data;
    if (rc == FERRY_OK) rc = range_cond(s, r, vals, &np, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, " GROUP BY 1");
    if (rc != FERRY_OK) {
        ferry_buf_release(&th);
        return rc == FERRY_ENOMEM ? oom(err) : rc;
    }
    s->base.bytes += (int64_t)s->sql.len + (int64_t)th.len;
    int ok = PQsendQueryParams(s->c, s->sql.data, np, NULL, vals, NULL, NULL, 0);
    ferry_buf_release(&th);
    if (!ok)
        return ferry__pg_error(err, FERRY_EIO, s->c, NULL, "verify: %s table %s", base->what,
                               base->name);
    return FERRY_OK;
}

static int pg_buckets_recv(struct ferry_vside *base, int64_t *counts, uint64_t *sums, int64_t n,
                           struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    int rc = FERRY_OK;
    PGresult *res;
    for (int64_t i = 0; i < n; i++) {
        counts[i] = 0;
        sums[i] = 0;
    }
    while ((res = PQgetResult(s->c)) != NULL) {
        if (rc == FERRY_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
            rc = ferry__pg_error(err, base->t->source ? FERRY_ESOURCE : FERRY_ESINK, s->c, res,
                                 "verify: %s table %s", base->what, base->name);
        } else if (rc == FERRY_OK) {
            count_bytes(s, res);
            for (int i = 0; i < PQntuples(res); i++) {
                int64_t b = strtoll(PQgetvalue(res, i, 0), NULL, 10);
                if (b < 0 || b >= n) continue; /* outside the range: cannot happen */
                counts[b] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
                sums[b] = ferry__vcanon_sum_text(PQgetvalue(res, i, 2));
            }
        }
        PQclear(res);
    }
    return rc;
}

static int pg_digest_recv(struct ferry_vside *base, int64_t *count, uint64_t *sum,
                          struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    int rc = FERRY_OK;
    PGresult *res;
    bool got = false;
    while ((res = PQgetResult(s->c)) != NULL) {
        if (rc == FERRY_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
            rc = ferry__pg_error(err, base->t->source ? FERRY_ESOURCE : FERRY_ESINK, s->c, res,
                                 "verify: %s table %s", base->what, base->name);
        } else if (rc == FERRY_OK && PQntuples(res) == 1) {
            count_bytes(s, res);
            *count = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            *sum = ferry__vcanon_sum_text(PQgetvalue(res, 0, 1));
            got = true;
        }
        PQclear(res);
    }
    s->pending = false;
    if (rc == FERRY_OK && !got)
        rc = ferry_error_set(err, FERRY_EIO, "libpq", "verify: %s table %s: no digest returned",
                             base->what, base->name);
    return rc;
}

/* One result row's cells (ferry__vrows_push_cells). */
struct pg_cells {
    PGresult *res;
    int row;
};

static const char *pg_cell(void *ctx, int k, size_t *len)
{
    const struct pg_cells *c = ctx;
    *len = 0;
    if (PQgetisnull(c->res, c->row, k)) return NULL;
    *len = (size_t)PQgetlength(c->res, c->row, k);
    return PQgetvalue(c->res, c->row, k);
}

/* Rows of a result: the first n_key columns are key texts, normalized; then the hash. */
static int collect(struct pgside *s, PGresult *res, bool with_hash, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int rows = PQntuples(res);
    int rc = FERRY_OK;
    for (int r = 0; r < rows && rc == FERRY_OK; r++) {
        struct pg_cells c = {res, r};
        int64_t h = with_hash ? strtoll(PQgetvalue(res, r, t->n_key), NULL, 10) : 0;
        rc = ferry__vrows_push_cells(out, t, pg_cell, &c, h, err);
    }
    return rc;
}

static int pg_bounds(struct ferry_vside *base, const struct ferry_vrange *r, int64_t step,
                     struct ferry_vrows *out, struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const char *vals[MAX_PARAMS];
    int np = 0;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql,
                              "SELECT %s FROM (SELECT %s, row_number() OVER (ORDER BY %s) AS "
                              "\"_ferry_rn\" FROM %s",
                              s->key_text, s->key_order, s->key_order, s->from);
    /* the inner select lists key columns (maybe with COLLATE): re-quote plain names */
    if (rc == FERRY_OK) rc = range_cond(s, r, vals, &np, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(
            &s->sql, ") q WHERE \"_ferry_rn\" %% %" PRId64 " = 0 ORDER BY \"_ferry_rn\"", step);
    if (rc != FERRY_OK) return rc == FERRY_ENOMEM ? oom(err) : rc;
    PGresult *res;
    rc = run(s, np, vals, &res, err);
    if (rc != FERRY_OK) return rc;
    rc = collect(s, res, false, out, err);
    PQclear(res);
    return rc;
}

static int pg_key_span(struct ferry_vside *base, const struct ferry_vrange *r, char **min,
                       char **max, struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const char *vals[MAX_PARAMS];
    int np = 0;
    *min = *max = NULL;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT min(%s)::text, max(%s)::text FROM %s", s->key_order,
                              s->key_order, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r, vals, &np, err);
    if (rc != FERRY_OK) return rc == FERRY_ENOMEM ? oom(err) : rc;
    PGresult *res;
    rc = run(s, np, vals, &res, err);
    if (rc != FERRY_OK) return rc;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) && !PQgetisnull(res, 0, 1)) {
        *min = ferry_strdup(PQgetvalue(res, 0, 0));
        *max = ferry_strdup(PQgetvalue(res, 0, 1));
        if (*min == NULL || *max == NULL) rc = oom(err);
    }
    PQclear(res);
    return rc;
}

static int pg_rows(struct ferry_vside *base, const struct ferry_vrange *r, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const char *vals[MAX_PARAMS];
    int np = 0;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT %s, %s FROM %s", s->key_text, s->hash_expr, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r, vals, &np, err);
    if (rc != FERRY_OK) return rc == FERRY_ENOMEM ? oom(err) : rc;
    PGresult *res;
    rc = run(s, np, vals, &res, err);
    if (rc != FERRY_OK) return rc;
    rc = collect(s, res, true, out, err);
    PQclear(res);
    return rc;
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* A value in PostgreSQL's text output as a canonical value of the field's type. */
static int text_value(const struct ferry_field *f, const char *s, size_t n, struct ferry_vvalue *v,
                      struct ferry_buf *scratch)
{
    memset(v, 0, sizeof *v);
    int32_t d;
    char *end;
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        v->i = s[0] == 't';
        return FERRY_OK;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        v->i = strtoll(s, &end, 10);
        return end != s ? FERRY_OK : FERRY_EINVAL;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        v->f = strtod(s, &end);
        return end != s ? FERRY_OK : FERRY_EINVAL;
    case FERRY_TYPE_DATE32:
        if (ferry_date32_from_text(s, n, &d) != FERRY_OK) return FERRY_EINVAL;
        v->i = d;
        return FERRY_OK;
    case FERRY_TYPE_TIME64_US:
        return ferry_time64_from_text(s, n, &v->i);
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return ferry_timestamp_from_text(s, n, &v->i);
    case FERRY_TYPE_UUID:
        return ferry_uuid_from_text(s, n, v->u);
    case FERRY_TYPE_BINARY:
        if (n < 2 || s[0] != '\\' || s[1] != 'x' || n % 2 != 0) return FERRY_EINVAL;
        ferry_buf_reset(scratch);
        if (ferry_buf_reserve(scratch, n / 2) != FERRY_OK) return FERRY_ENOMEM;
        for (size_t i = 2; i + 1 < n; i += 2) {
            int hi = hexval(s[i]), lo = hexval(s[i + 1]);
            if (hi < 0 || lo < 0) return FERRY_EINVAL;
            scratch->data[scratch->len++] = (char)(hi << 4 | lo);
        }
        v->p = (const uint8_t *)scratch->data;
        v->n = scratch->len;
        return FERRY_OK;
    default:
        v->p = (const uint8_t *)s;
        v->n = n;
        return FERRY_OK;
    }
}

static int pg_fetch(struct ferry_vside *base, const struct ferry_vkey *k,
                    const struct ferry_schema *sc, struct ferry_row_writer *rw, bool *found,
                    struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    const struct ferry_vtable *t = base->t;
    *found = false;
    const char *vals[MAX_PARAMS];
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT ");
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&s->sql, ", ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&s->sql, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql, " FROM %s WHERE %s = %s", s->from, s->key_tuple,
                              t->n_key > 1 ? "(" : "");
    for (int i = 0; i < t->n_key && rc == FERRY_OK; i++) {
        vals[i] = k->part[i];
        rc = ferry_buf_printf(&s->sql, "%s$%d", i > 0 ? ", " : "", i + 1);
    }
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&s->sql, ")");
    if (rc != FERRY_OK) return rc;
    PGresult *res;
    rc = run(s, t->n_key, vals, &res, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf scratch;
    ferry_buf_init(&scratch, 0);
    if (PQntuples(res) > 0) {
        *found = true;
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
            struct ferry_vvalue v;
            if (PQgetisnull(res, 0, i)) {
                memset(&v, 0, sizeof v);
                v.null = true;
            } else if (text_value(&sc->fields[i], PQgetvalue(res, 0, i),
                                  (size_t)PQgetlength(res, 0, i), &v, &scratch) != FERRY_OK) {
                rc = ferry_error_set(err, FERRY_ESOURCE, "verify",
                                     "verify --repair: %s table %s: column %s: a value ferry "
                                     "cannot read as %s",
                                     base->what, base->name, sc->fields[i].name,
                                     ferry_type_name(sc->fields[i].type));
                break;
            }
            rc = ferry__vrepair_put(rw, &sc->fields[i], &v, err);
        }
        if (rc == FERRY_OK)
            rc = ferry_rw_end(rw, err);
        else
            ferry_rw_cancel_row(rw);
    }
    ferry_buf_release(&scratch);
    PQclear(res);
    return rc;
}

static int pg_refresh(struct ferry_vside *base, struct ferry_error *err)
{
    struct pgside *s = (struct pgside *)base;
    int code = base->t->source ? FERRY_ESOURCE : FERRY_ESINK;
    int rc = ferry__pg_exec(s->c, "COMMIT", code, "verify", err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(s->c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", code, "verify",
                            err);
    return rc;
}

static void pg_close(struct ferry_vside *base)
{
    struct pgside *s = (struct pgside *)base;
    if (s == NULL) return;
    if (s->c) PQfinish(s->c);
    ferry_free(s->from);
    ferry_free(s->hash_expr);
    ferry_free(s->key_text);
    ferry_free(s->key_order);
    ferry_free(s->key_tuple);
    ferry_free(s->oid);
    ferry_free(s->notnull);
    ferry_buf_release(&s->sql);
    ferry_free(s);
}

/* The table must exist and hold every compared column; their types pick a few
 * expressions (char(n) keeps its padding). */
static int read_catalog(struct pgside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int code = t->source ? FERRY_ESOURCE : FERRY_ESINK;
    const char *vals[1] = {s->from};
    PGresult *res =
        PQexecParams(s->c,
                     "SELECT a.attname, a.atttypid, a.attnotnull FROM pg_attribute a WHERE "
                     "a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT "
                     "a.attisdropped",
                     1, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, code, s->c, res, "verify: %s table %s", s->base.what,
                                 s->base.name);
        PQclear(res);
        return rc;
    }
    int rc = FERRY_OK;
    if (PQntuples(res) == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify", "verify: %s table %s not found",
                             s->base.what, s->base.name);
    s->oid = ferry_calloc((size_t)t->n_cols + 1, sizeof *s->oid);
    s->notnull = ferry_calloc((size_t)t->n_cols + 1, sizeof *s->notnull);
    if (rc == FERRY_OK && (s->oid == NULL || s->notnull == NULL)) rc = oom(err);
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++) {
        bool found = false;
        for (int r = 0; r < PQntuples(res) && !found; r++)
            if (!strcmp(PQgetvalue(res, r, 0), colname(t, i))) {
                s->oid[i] = (uint32_t)strtoul(PQgetvalue(res, r, 1), NULL, 10);
                s->notnull[i] = PQgetvalue(res, r, 2)[0] == 't';
                found = true;
            }
        if (!found)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify",
                                 "verify: %s table %s has no column \"%s\"", s->base.what,
                                 s->base.name, colname(t, i));
    }
    PQclear(res);
    return rc;
}

static const struct ferry_vside_ops pg_ops = {
    .digest_send = pg_digest_send,
    .digest_recv = pg_digest_recv,
    .bounds = pg_bounds,
    .buckets_send = pg_buckets_send,
    .buckets_recv = pg_buckets_recv,
    .rows = pg_rows,
    .key_span = pg_key_span,
    .fetch = pg_fetch,
    .refresh = pg_refresh,
    .close = pg_close,
};

int ferry__vside_pg_open(struct ferry_cfg *cfg, const char *schema, const char *table,
                         const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                         struct ferry_error *err)
{
    *out = NULL;
    if (t->n_key * 2 + t->n_until > MAX_PARAMS)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify", "verify: table %s: key too wide",
                               table);
    struct pgside *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    s->base.ops = &pg_ops;
    s->base.what = what;
    s->base.t = t;
    snprintf(s->base.name, sizeof s->base.name, "%s.%s", schema, table);
    ferry_buf_init(&s->sql, 0);
    char *url = NULL;
    struct ferry_pg_conn_opts opts = {0};
    char whatbuf[64];
    snprintf(whatbuf, sizeof whatbuf, "verify: postgres %s", what);
    int rc = ferry__pg_read_conn_config(cfg, whatbuf, &url, &opts, err);
    struct ferry_buf f;
    ferry_buf_init(&f, 0);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&f, schema, err);
    if (rc == FERRY_OK) rc = ferry_buf_append(&f, ".", 1);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&f, table, err);
    if (rc == FERRY_OK && (s->from = ferry_buf_take(&f)) == NULL) rc = oom(err);
    ferry_buf_release(&f);
    if (rc == FERRY_OK) rc = ferry__pg_connect(url, &opts, whatbuf, &s->c, err);
    ferry_secret_free(url);
    if (rc == FERRY_OK) rc = read_catalog(s, err);
    if (rc == FERRY_OK) rc = build_exprs(s, err);
    int code = t->source ? FERRY_ESOURCE : FERRY_ESINK;
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(s->c, "SET TimeZone = 'UTC'; SET extra_float_digits = 3", code, whatbuf,
                            err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(s->c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", code, whatbuf,
                            err);
    if (rc != FERRY_OK) {
        pg_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return FERRY_OK;
}

int ferry__pg_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err)
{
    char *schema = NULL, *name = NULL;
    int rc;
    if (source) {
        rc = ferry__pg_split_name(r->table, &schema, &name, err);
    } else {
        const char *sch = "public";
        rc = ferry_cfg_str(cfg, "schema", false, &sch, err);
        if (rc == FERRY_OK) {
            schema = ferry_strdup(sch);
            name = ferry_strdup(ferry_resource_target(r));
            if (!schema || !name)
                rc = ferry_error_set(err, FERRY_ENOMEM, "verify", "verify: out of memory");
        }
    }
    if (rc == FERRY_OK) rc = ferry__vside_pg_open(cfg, schema, name, t, what, out, err);
    if (rc == FERRY_OK && (*table_out = ferry_asprintf("%s.%s", schema, name)) == NULL) {
        (*out)->ops->close(*out);
        *out = NULL;
        rc = ferry_error_set(err, FERRY_ENOMEM, "verify", "verify: out of memory");
    }
    ferry_free(schema);
    ferry_free(name);
    return rc;
}
