/* connectors/sqlite/sqlite_verify.c - the sqlite connector's verify_open slot: one side of a verification on a SQLite file: chunk digests
 * computed inside SQLite by two C functions registered on the connection.
 *
 * ferry_vhash(c1, ..., cn) computes verify's row hash (canon.c) from the stored values;
 * ferry_vsum(h) sums hashes mod 2^64. Values are read the way ferry's SQLite sink stores them
 * (docs/connectors.md): booleans as 0/1, dates, times, timestamps and uuids as text, decimals as
 * text; text that does not parse is hashed as text, so it differs from the other side instead of
 * failing the check. Reads inside one read transaction (one snapshot in WAL mode) until refresh().
 * Calls SQLite, canon.c and the sqlite connector's text forms. Called by verify.c through
 * the verify_open slot of the sqlite source and sink. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/sqlite/sqlite_common.h"
#include "verify/verify.h"

struct sqside {
    struct ferry_vside base;
    sqlite3 *db;
    char *from;
    char *hash_args; /* "c1", "c2"... */
    char *key_cols;  /* "k1", "k2" */
    char *key_tuple; /* ("k1", "k2") or "k1" */
    struct ferry_buf sql;
    struct ferry_buf row; /* scratch for binary values' hex, reused */
    int64_t count;
    uint64_t sum;
    bool failed;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

static const char *colname(const struct ferry_vtable *t, int i)
{
    return t->source ? t->cols[i].src : t->cols[i].dst;
}

/* One stored value as a canonical value of type ty; *as_text when it had to fall back to
 * hashing the stored text (which then cannot equal the other side's typed value). */
static void stored_value(sqlite3_value *a, const struct ferry_vcol *c, struct ferry_vvalue *v,
                         char *scratch, size_t scap, bool *as_text)
{
    memset(v, 0, sizeof *v);
    *as_text = false;
    int kind = sqlite3_value_type(a);
    if (kind == SQLITE_NULL) {
        v->null = true;
        return;
    }
    const char *s = NULL;
    size_t n = 0;
    if (kind == SQLITE_TEXT) {
        s = (const char *)sqlite3_value_text(a);
        n = (size_t)sqlite3_value_bytes(a);
    }
    switch (c->type) {
    case FERRY_TYPE_BOOL:
        if (kind == SQLITE_TEXT)
            v->i = n > 0 && strchr("tTyY1", s[0]) != NULL;
        else
            v->i = sqlite3_value_int64(a) != 0;
        return;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        v->i = sqlite3_value_int64(a);
        return;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        v->f = sqlite3_value_double(a);
        return;
    case FERRY_TYPE_DATE32: {
        int32_t d;
        if (s && ferry_date32_from_text(s, n, &d) == FERRY_OK) {
            v->i = d;
            return;
        }
        break;
    }
    case FERRY_TYPE_TIME64_US:
        if (s && ferry_time64_from_text(s, n, &v->i) == FERRY_OK) return;
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (s && ferry_timestamp_from_text(s, n, &v->i) == FERRY_OK) return;
        break;
    case FERRY_TYPE_UUID:
        if (s && ferry_uuid_from_text(s, n, v->u) == FERRY_OK) return;
        if (kind == SQLITE_BLOB && sqlite3_value_bytes(a) == 16) {
            memcpy(v->u, sqlite3_value_blob(a), 16);
            return;
        }
        break;
    case FERRY_TYPE_DECIMAL128: {
        /* Stored as text with `scale` digits by the sink; anything else is normalized. */
        if (s == NULL) {
            s = (const char *)sqlite3_value_text(a);
            n = (size_t)sqlite3_value_bytes(a);
        }
        struct ferry_decimal128 d;
        if (s && ferry_decimal128_from_text(s, n, c->precision, c->scale, &d) == FERRY_OK) {
            int k = ferry_decimal128_to_text(d, c->scale, scratch, scap);
            if (k >= 0) {
                v->p = (const uint8_t *)scratch;
                v->n = (size_t)k;
                return;
            }
        }
        break;
    }
    case FERRY_TYPE_BINARY:
        v->p = sqlite3_value_blob(a);
        v->n = (size_t)sqlite3_value_bytes(a);
        return;
    default:
        break;
    }
    /* text-like types, or a value that did not parse: its text */
    v->p = sqlite3_value_text(a);
    v->n = (size_t)sqlite3_value_bytes(a);
    *as_text = c->type != FERRY_TYPE_UTF8 && c->type != FERRY_TYPE_JSON &&
               c->type != FERRY_TYPE_DECIMAL_TEXT && c->type != FERRY_TYPE_DECIMAL128;
}

static void fn_vhash(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct sqside *s = sqlite3_user_data(ctx);
    const struct ferry_vtable *t = s->base.t;
    if (argc != t->n_cols) {
        sqlite3_result_error(ctx, "ferry_vhash: wrong number of columns", -1);
        return;
    }
    char scratch[64];
    int64_t x = 0;
    for (int i = 0; i < argc; i++) {
        struct ferry_vvalue v;
        bool as_text;
        stored_value(argv[i], &t->cols[i], &v, scratch, sizeof scratch, &as_text);
        /* a value that did not parse hashes as text under another seed: it differs */
        if (as_text)
            x ^= ferry__vcanon_value_hash(FERRY_TYPE_UTF8, i + 1 + 0x10000, &v, &s->row);
        else
            x ^= ferry__vcanon_value_hash(t->cols[i].type, i + 1, &v, &s->row);
    }
    sqlite3_result_int64(ctx, ferry__vcanon_row_hash(x));
}

static void fn_vsum_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    uint64_t *acc = sqlite3_aggregate_context(ctx, sizeof *acc);
    if (acc == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (sqlite3_value_type(argv[0]) != SQLITE_NULL) *acc += (uint64_t)sqlite3_value_int64(argv[0]);
}

static void fn_vsum_final(sqlite3_context *ctx)
{
    uint64_t *acc = sqlite3_aggregate_context(ctx, 0);
    sqlite3_result_int64(ctx, acc ? (int64_t)*acc : 0);
}

/* Binds a normal key text of column `col` in the form the sink stores. */
static int bind_col(struct sqside *s, sqlite3_stmt *st, int p, int col, const char *text)
{
    const struct ferry_vcol *c = &s->base.t->cols[col];
    if (text == NULL) return sqlite3_bind_null(st, p);
    struct ferry_vvalue v;
    char buf[64];
    int n = -1;
    if (ferry__vcanon_key_value(c->type, text, &v) != FERRY_OK)
        return sqlite3_bind_text(st, p, text, -1, SQLITE_TRANSIENT);
    switch (c->type) {
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_BOOL:
        return sqlite3_bind_int64(st, p, v.i);
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        return sqlite3_bind_double(st, p, v.f);
    case FERRY_TYPE_DATE32:
        n = ferry__sqlite_date_text((int32_t)v.i, buf);
        break;
    case FERRY_TYPE_TIME64_US:
        n = ferry__sqlite_time_text(v.i, buf);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
        n = ferry__sqlite_ts_text(v.i, false, buf);
        break;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        n = ferry__sqlite_ts_text(v.i, true, buf);
        break;
    default:
        return sqlite3_bind_text(st, p, text, -1, SQLITE_TRANSIENT);
    }
    if (n < 0) return sqlite3_bind_text(st, p, text, -1, SQLITE_TRANSIENT);
    return sqlite3_bind_text(st, p, buf, n, SQLITE_TRANSIENT);
}

static int bind_key(struct sqside *s, sqlite3_stmt *st, int p, int k, const char *text)
{
    return bind_col(s, st, p, s->base.t->key[k], text);
}

static int range_cond(struct sqside *s, const struct ferry_vrange *r)
{
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK;
    bool where = false;
    const struct ferry_vkey *ks[2] = {r->lo, r->hi};
    const char *ops[2] = {r->lo_incl ? ">=" : ">", "<="};
    int np = 0;
    for (int e = 0; e < 2 && rc == FERRY_OK; e++) {
        if (ks[e] == NULL) continue;
        rc = ferry_buf_printf(&s->sql, "%s%s %s %s", where ? " AND " : " WHERE ", s->key_tuple,
                              ops[e], t->n_key > 1 ? "(" : "");
        where = true;
        for (int k = 0; k < t->n_key && rc == FERRY_OK; k++)
            rc = ferry_buf_printf(&s->sql, "%s?%d", k > 0 ? ", " : "", ++np);
        if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&s->sql, ")");
    }
    if (rc == FERRY_OK && t->n_until > 0) {
        rc = ferry_buf_printf(&s->sql, "%s(", where ? " AND " : " WHERE ");
        for (int i = 0; i < t->n_until && rc == FERRY_OK; i++) {
            if (i > 0) rc = ferry_buf_printf(&s->sql, ", ");
            if (rc == FERRY_OK) rc = ferry__sqlite_quote(&s->sql, colname(t, t->until_col[i]));
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, ") <= (");
        for (int i = 0; i < t->n_until && rc == FERRY_OK; i++)
            rc = ferry_buf_printf(&s->sql, "%s?%d", i > 0 ? ", " : "", ++np);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, ")");
    }
    return rc;
}

static int prepare(struct sqside *s, const struct ferry_vrange *r, sqlite3_stmt **st,
                   struct ferry_error *err)
{
    s->base.queries++;
    if (sqlite3_prepare_v2(s->db, s->sql.data, (int)s->sql.len, st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, s->base.t->source ? FERRY_ESOURCE : FERRY_ESINK, s->db,
                                   "verify: %s table %s", s->base.what, s->base.name);
    const struct ferry_vkey *ks[2] = {r->lo, r->hi};
    int p = 0;
    for (int e = 0; e < 2; e++) {
        if (ks[e] == NULL) continue;
        for (int k = 0; k < s->base.t->n_key; k++)
            bind_key(s, *st, ++p, k, ks[e]->part[k]);
    }
    for (int i = 0; i < s->base.t->n_until; i++)
        bind_col(s, *st, ++p, s->base.t->until_col[i], s->base.t->until[i]);
    return FERRY_OK;
}

static int step_error(struct sqside *s, sqlite3_stmt *st, struct ferry_error *err)
{
    int rc = ferry__sqlite_error(err, s->base.t->source ? FERRY_ESOURCE : FERRY_ESINK, s->db,
                                 "verify: %s table %s", s->base.what, s->base.name);
    sqlite3_finalize(st);
    return rc;
}

static int sq_digest_send(struct ferry_vside *base, const struct ferry_vrange *r,
                          struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT count(*), ferry_vsum(ferry_vhash(%s)) FROM %s",
                              s->hash_args, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r);
    if (rc != FERRY_OK) return oom(err);
    sqlite3_stmt *st;
    if ((rc = prepare(s, r, &st, err)) != FERRY_OK) return rc;
    if (sqlite3_step(st) != SQLITE_ROW) return step_error(s, st, err);
    s->count = sqlite3_column_int64(st, 0);
    s->sum = (uint64_t)sqlite3_column_int64(st, 1);
    base->bytes += 16;
    sqlite3_finalize(st);
    return FERRY_OK;
}

static int sq_digest_recv(struct ferry_vside *base, int64_t *count, uint64_t *sum,
                          struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    (void)err;
    *count = s->count;
    *sum = s->sum;
    return FERRY_OK;
}

/* One stepped row's cells (ferry__vrows_push_cells), counting the bytes read. */
struct sq_cells {
    struct sqside *s;
    sqlite3_stmt *st;
};

static const char *sq_cell(void *ctx, int k, size_t *len)
{
    struct sq_cells *c = ctx;
    *len = 0;
    if (sqlite3_column_type(c->st, k) == SQLITE_NULL) return NULL;
    const char *v = (const char *)sqlite3_column_text(c->st, k);
    *len = (size_t)sqlite3_column_bytes(c->st, k);
    c->s->base.bytes += (int64_t)*len + 4;
    return v ? v : "";
}

static int collect(struct sqside *s, sqlite3_stmt *st, bool with_hash, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK, src;
    struct sq_cells c = {s, st};
    while (rc == FERRY_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t h = with_hash ? sqlite3_column_int64(st, t->n_key) : 0;
        if (with_hash) s->base.bytes += 8;
        rc = ferry__vrows_push_cells(out, t, sq_cell, &c, h, err);
    }
    if (rc == FERRY_OK && src != SQLITE_DONE) return step_error(s, st, err);
    sqlite3_finalize(st);
    return rc;
}

static int sq_bounds(struct ferry_vside *base, const struct ferry_vrange *r, int64_t step,
                     struct ferry_vrows *out, struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql,
                              "SELECT %s FROM (SELECT %s, row_number() OVER (ORDER BY %s) AS "
                              "\"_ferry_rn\" FROM %s",
                              s->key_cols, s->key_cols, s->key_cols, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql, ") WHERE \"_ferry_rn\" %% %lld = 0 ORDER BY \"_ferry_rn\"",
                              (long long)step);
    if (rc != FERRY_OK) return oom(err);
    sqlite3_stmt *st;
    if ((rc = prepare(s, r, &st, err)) != FERRY_OK) return rc;
    return collect(s, st, false, out, err);
}

static int sq_rows(struct ferry_vside *base, const struct ferry_vrange *r, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT %s, ferry_vhash(%s) FROM %s", s->key_cols,
                              s->hash_args, s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r);
    if (rc != FERRY_OK) return oom(err);
    sqlite3_stmt *st;
    if ((rc = prepare(s, r, &st, err)) != FERRY_OK) return rc;
    return collect(s, st, true, out, err);
}

static int sq_fetch(struct ferry_vside *base, const struct ferry_vkey *k,
                    const struct ferry_schema *sc, struct ferry_row_writer *rw, bool *found,
                    struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    const struct ferry_vtable *t = base->t;
    *found = false;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT ");
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&s->sql, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(&s->sql, sc->fields[i].name);
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql, " FROM %s WHERE %s = %s", s->from, s->key_tuple,
                              t->n_key > 1 ? "(" : "");
    for (int i = 0; i < t->n_key && rc == FERRY_OK; i++)
        rc = ferry_buf_printf(&s->sql, "%s?%d", i > 0 ? ", " : "", i + 1);
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&s->sql, ")");
    if (rc != FERRY_OK) return oom(err);
    sqlite3_stmt *st;
    s->base.queries++;
    if (sqlite3_prepare_v2(s->db, s->sql.data, (int)s->sql.len, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "verify: %s table %s", base->what,
                                   base->name);
    for (int i = 0; i < t->n_key; i++)
        bind_key(s, st, i + 1, i, k->part[i]);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        *found = true;
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        char scratch[64];
        for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
            const struct ferry_field *f = &sc->fields[i];
            struct ferry_vcol c = {0};
            c.type = f->type;
            c.precision = f->precision;
            c.scale = f->scale;
            struct ferry_vvalue v;
            bool as_text;
            stored_value(sqlite3_column_value(st, i), &c, &v, scratch, sizeof scratch, &as_text);
            if (as_text)
                rc = ferry_error_set(err, FERRY_ESOURCE, "verify",
                                     "verify --repair: %s table %s: column %s: a value ferry "
                                     "cannot read as %s",
                                     base->what, base->name, f->name, ferry_type_name(f->type));
            else
                rc = ferry__vrepair_put(rw, f, &v, err);
        }
        if (rc == FERRY_OK)
            rc = ferry_rw_end(rw, err);
        else
            ferry_rw_cancel_row(rw);
    } else if (src != SQLITE_DONE) {
        return step_error(s, st, err);
    }
    sqlite3_finalize(st);
    return rc;
}

static int sq_key_span(struct ferry_vside *base, const struct ferry_vrange *r, char **min,
                       char **max, struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    *min = *max = NULL;
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "SELECT min(%s), max(%s) FROM %s", s->key_cols, s->key_cols,
                              s->from);
    if (rc == FERRY_OK) rc = range_cond(s, r);
    if (rc != FERRY_OK) return oom(err);
    sqlite3_stmt *st;
    if ((rc = prepare(s, r, &st, err)) != FERRY_OK) return rc;
    if (sqlite3_step(st) != SQLITE_ROW) return step_error(s, st, err);
    if (sqlite3_column_type(st, 0) != SQLITE_NULL && sqlite3_column_type(st, 1) != SQLITE_NULL) {
        *min = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        *max = ferry_strdup((const char *)sqlite3_column_text(st, 1));
        if (*min == NULL || *max == NULL) rc = oom(err);
    }
    sqlite3_finalize(st);
    return rc;
}

static int sq_refresh(struct ferry_vside *base, struct ferry_error *err)
{
    struct sqside *s = (struct sqside *)base;
    int rc = ferry__sqlite_exec(s->db, "COMMIT", "verify", err);
    if (rc == FERRY_OK) rc = ferry__sqlite_exec(s->db, "BEGIN", "verify", err);
    return rc;
}

static void sq_close(struct ferry_vside *base)
{
    struct sqside *s = (struct sqside *)base;
    if (s == NULL) return;
    if (s->db) sqlite3_close_v2(s->db);
    ferry_free(s->from);
    ferry_free(s->hash_args);
    ferry_free(s->key_cols);
    ferry_free(s->key_tuple);
    ferry_buf_release(&s->sql);
    ferry_buf_release(&s->row);
    ferry_free(s);
}

static const struct ferry_vside_ops sq_ops = {
    .digest_send = sq_digest_send,
    .digest_recv = sq_digest_recv,
    .bounds = sq_bounds,
    .rows = sq_rows,
    .key_span = sq_key_span,
    .fetch = sq_fetch,
    .refresh = sq_refresh,
    .close = sq_close,
};

/* The table must exist and hold every compared column: a clear "not found" now rather
 * than an SQL error later. */
static int check_table(struct sqside *s, const char *table, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT name FROM pragma_table_info(?1)", -1, &st, NULL) !=
        SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_EIO, s->db, "verify: %s table %s", s->base.what,
                                   table);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    bool *seen = ferry_calloc((size_t)t->n_cols + 1, sizeof *seen);
    if (seen == NULL) {
        sqlite3_finalize(st);
        return oom(err);
    }
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        rows++;
        for (int i = 0; name && i < t->n_cols; i++)
            if (!strcmp(name, colname(t, i))) seen[i] = true;
    }
    sqlite3_finalize(st);
    int rc = FERRY_OK;
    if (rows == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite", "verify: %s table %s not found",
                             s->base.what, table);
    for (int i = 0; rc == FERRY_OK && i < t->n_cols; i++)
        if (!seen[i])
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                                 "verify: %s table %s has no column \"%s\"", s->base.what, table,
                                 colname(t, i));
    ferry_free(seen);
    return rc;
}

int ferry__vside_sqlite_open(const char *path, const char *table, const struct ferry_vtable *t,
                             const char *what, struct ferry_vside **out, struct ferry_error *err)
{
    *out = NULL;
    struct sqside *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    s->base.ops = &sq_ops;
    s->base.what = what;
    s->base.t = t;
    snprintf(s->base.name, sizeof s->base.name, "%s", table);
    ferry_buf_init(&s->sql, 0);
    ferry_buf_init(&s->row, 0);
    struct ferry_buf f, a, k, tu;
    ferry_buf_init(&f, 0);
    ferry_buf_init(&a, 0);
    ferry_buf_init(&k, 0);
    ferry_buf_init(&tu, 0);
    int rc = ferry__sqlite_quote(&f, table);
    for (int i = 0; i < t->n_cols && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&a, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(&a, colname(t, i));
    }
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&tu, "(");
    for (int i = 0; i < t->n_key && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_printf(&k, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(&k, colname(t, t->key[i]));
        if (rc == FERRY_OK && i > 0) rc = ferry_buf_printf(&tu, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(&tu, colname(t, t->key[i]));
    }
    if (rc == FERRY_OK && t->n_key > 1) rc = ferry_buf_printf(&tu, ")");
    if (rc == FERRY_OK) {
        s->from = ferry_buf_take(&f);
        s->hash_args = ferry_buf_take(&a);
        s->key_cols = ferry_buf_take(&k);
        s->key_tuple = ferry_buf_take(&tu);
        if (!s->from || !s->hash_args || !s->key_cols || !s->key_tuple) rc = oom(err);
    } else {
        rc = oom(err);
    }
    ferry_buf_release(&f);
    ferry_buf_release(&a);
    ferry_buf_release(&k);
    ferry_buf_release(&tu);
    int code = t->source ? FERRY_ESOURCE : FERRY_ESINK;
    if (rc == FERRY_OK) {
        int orc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY, NULL);
        if (orc == SQLITE_CANTOPEN)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                                 "verify: %s database %s cannot be opened (missing?)", what, path);
        else if (orc != SQLITE_OK)
            rc = ferry__sqlite_error(err, code, s->db, "verify: %s database %s", what, path);
    }
    if (rc == FERRY_OK) sqlite3_busy_timeout(s->db, 10000);
    if (rc == FERRY_OK && (sqlite3_create_function(s->db, "ferry_vhash", t->n_cols,
                                                   SQLITE_UTF8 | SQLITE_DETERMINISTIC, s, fn_vhash,
                                                   NULL, NULL) != SQLITE_OK ||
                           sqlite3_create_function(s->db, "ferry_vsum", 1, SQLITE_UTF8, NULL, NULL,
                                                   fn_vsum_step, fn_vsum_final) != SQLITE_OK))
        rc = ferry__sqlite_error(err, code, s->db, "verify: %s database %s", what, path);
    if (rc == FERRY_OK) rc = check_table(s, table, err);
    if (rc == FERRY_OK) rc = ferry__sqlite_exec(s->db, "BEGIN", "verify", err);
    if (rc != FERRY_OK) {
        sq_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return FERRY_OK;
}

int ferry__sqlite_verify_open(struct ferry_cfg *cfg, bool source,
                              const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                              const char *what, struct ferry_vside **out, char **table_out,
                              struct ferry_error *err)
{
    const char *path = NULL, *prefix = "";
    int rc = ferry_cfg_str(cfg, "path", true, &path, err);
    if (rc == FERRY_OK && !source) rc = ferry_cfg_str(cfg, "table_prefix", false, &prefix, err);
    if (rc != FERRY_OK) return rc;
    char *table = source ? ferry_strdup(r->table)
                         : ferry_asprintf("%s%s", prefix ? prefix : "", ferry_resource_target(r));
    if (table == NULL) return ferry_error_set(err, FERRY_ENOMEM, "verify", "verify: out of memory");
    rc = ferry__vside_sqlite_open(path, table, t, what, out, err);
    if (rc == FERRY_OK)
        *table_out = table;
    else
        ferry_free(table);
    return rc;
}
