/* verify/backend_stream.c - one side of a verification read through ferry itself: the
 * pipeline's source connector (files: CSV and JSON Lines, the sample source, any source
 * without a pushdown backend) extracts the resource, the pipeline's transforms run on each
 * batch, and every row's hash is computed in C from the batch values (canon.c), exactly
 * as the destination should hold them.
 *
 * The whole resource is read once, at open, into a list of (key, row hash) sorted in the
 * order the database sides use (integer key parts by value, the others by their normal
 * text's bytes) with prefix sums of the hashes, in bounded memory (vsorted.c: spilled to a
 * temporary file above a quarter of `memory:`): such a side answers any key range - digest,
 * split points, bucket digests, listing - by binary search, so the walk narrows a
 * difference chunk by chunk as with two databases, and the other side lists only the rows
 * of the differing chunks. Keys of a type whose order differs between engines (decimal,
 * float, timestamptz, ...) leave the side whole_only: the walk then compares the full
 * listing of both sides when the digests differ. A files-sink Parquet destination is read
 * the same way through the Parquet reader (ferry__vside_parquet_open). For --repair, fetch
 * reads the source once more, untransformed, and keeps it indexed by key until the side
 * closes (not bounded). Calls the source vtable, the row writer, the transform chain, the
 * Parquet reader, vsorted.c and canon.c. Called by verify.c and repair.c (fetch). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "formats/parquet_reader.h"
#include "pipeline/transform.h"
#include "verify/verify.h"

struct stside {
    struct ferry_vside base;
    struct ferry_vsorted *vs; /* (key, hash) of every row, sorted by key (vsorted.c) */
    bool *kint;               /* per key part: an integer, ordered by value */
    bool orderable;           /* every key part ordered alike by every engine */
    int64_t dcount;           /* the last digest asked (digest_send) */
    uint64_t dsum;
    int64_t *bcnt; /* the last bucket digests asked (buckets_send) */
    uint64_t *bsum;
    int64_t nb;
    int *bcol; /* column of the transformed batch for each compared column */
    struct ferry_transform_chain *chain;
    struct ferry_buf scratch;
    int rc; /* first error of the emit callback */
    struct ferry_error err;
    /* --repair (fetch): the source read again, untransformed, on the first fetch; every
     * row indexed by its key texts (source columns). NULL p: the side cannot fetch. */
    const struct ferry_pipeline_spec *p;
    const struct ferry_resource_spec *r;
    bool fetched;
    /* fetch_only: the keys repair will ask (sorted); the read keeps only their rows, copied
     * into one compact batch (crw), so memory follows the differing keys, not the source. */
    const struct ferry_vkey **want;
    int64_t n_want, n_read;
    bool want_set;
    struct ferry_row_writer *crw;
    struct ferry_batch **fb;
    int n_fb, cap_fb;
    struct frow *fr;
    int64_t n_fr, cap_fr;
    int *kcol; /* source batch column of each key part */
};

struct frow {
    struct ferry_vkey key;
    int b;       /* index into fb */
    int64_t row; /* row of that batch */
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

static int key_cmp(const struct ferry_vkey *a, const struct ferry_vkey *b, int n)
{
    for (int i = 0; i < n; i++) {
        const char *x = a->part[i], *y = b->part[i];
        if (x == NULL || y == NULL) {
            if (x != y) return x == NULL ? -1 : 1;
            continue;
        }
        int c = strcmp(x, y);
        if (c != 0) return c;
    }
    return 0;
}

static _Thread_local int sort_nkey;
/* Row r of column c as a hash input; decimal128 becomes its text in dec[]. */
static void batch_value(const struct ferry_batch *b, int c, int64_t r, int scale,
                        struct ferry_vvalue *v, char *dec, size_t cap)
{
    memset(v, 0, sizeof *v);
    if (ferry_col_is_null(b, c, r)) {
        v->null = true;
        return;
    }
    switch (b->columns[c].type) {
    case FERRY_TYPE_BOOL:
        v->i = ferry_col_bool(b, c, r);
        break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        v->f = ferry_col_float(b, c, r);
        break;
    case FERRY_TYPE_UUID:
        memcpy(v->u, ferry_col_fixed(b, c, r), 16);
        break;
    case FERRY_TYPE_DECIMAL128: {
        int k = ferry_decimal128_to_text(ferry_col_dec128(b, c, r), scale, dec, cap);
        v->p = (const uint8_t *)dec;
        v->n = k > 0 ? (size_t)k : 0;
        break;
    }
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT:
        v->p = ferry_col_bytes(b, c, r, &v->n);
        break;
    default:
        v->i = ferry_col_int(b, c, r);
        break;
    }
}

/* A destination read back through a source that has no such type (mysql: a uuid column is
 * CHAR(36), a time64 one TIME(6), read as text): the text parsed into the compared type. A
 * text that does not parse keeps a zero value, so it differs instead of failing. */
static void text_as(enum ferry_type have, enum ferry_type want, struct ferry_vvalue *v)
{
    if (v->null || have != FERRY_TYPE_UTF8 || have == want) return;
    const char *p = v->p ? (const char *)v->p : "";
    if (want == FERRY_TYPE_UUID && ferry_uuid_from_text(p, v->n, v->u) != FERRY_OK)
        memset(v->u, 0, sizeof v->u);
    if (want == FERRY_TYPE_TIME64_US && ferry_time64_from_text(p, v->n, &v->i) != FERRY_OK)
        v->i = 0;
}

/* The key's normal text, as ferry__vcanon_key_text writes it for the other side. */
static char *key_text(enum ferry_type t, const struct ferry_vvalue *v)
{
    char buf[80];
    int k = -1;
    if (v->null) return NULL;
    switch (t) {
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        k = snprintf(buf, sizeof buf, "%lld", (long long)v->i);
        break;
    case FERRY_TYPE_DATE32:
        k = ferry_date32_to_text((int32_t)v->i, buf, sizeof buf);
        break;
    case FERRY_TYPE_TIME64_US:
        k = ferry_time64_to_text(v->i, buf, sizeof buf);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        k = ferry_timestamp_to_text(v->i, t == FERRY_TYPE_TIMESTAMPTZ_US, buf, sizeof buf);
        break;
    case FERRY_TYPE_UUID:
        k = ferry_uuid_to_text(v->u, buf, sizeof buf);
        break;
    case FERRY_TYPE_BOOL:
        k = snprintf(buf, sizeof buf, "%s", v->i ? "true" : "false");
        break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        k = snprintf(buf, sizeof buf, "%.17g", v->f);
        break;
    default:
        return ferry_strndup(v->p ? (const char *)v->p : "", v->n);
    }
    return k >= 0 ? ferry_strndup(buf, (size_t)k) : ferry_strdup("?");
}

static int hash_batch(struct stside *s, struct ferry_batch *b, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    if (s->bcol == NULL) {
        s->bcol = ferry_calloc((size_t)t->n_cols + 1, sizeof *s->bcol);
        if (s->bcol == NULL) return oom(err);
        for (int i = 0; i < t->n_cols; i++) {
            s->bcol[i] = ferry_schema_find(b->schema, t->cols[i].dst);
            if (s->bcol[i] < 0)
                return ferry_error_set(err, FERRY_EINVAL, "verify",
                                       "verify: %s %s: no column %s after the transforms",
                                       s->base.what, s->base.name, t->cols[i].dst);
        }
    }
    char dec[64];
    for (int64_t r = 0; r < b->length; r++) {
        if (ferry_batch_op(b, r) == FERRY_OP_DELETE) continue;
        int64_t x = 0;
        char **parts = ferry_calloc((size_t)t->n_key + 1, sizeof *parts);
        if (parts == NULL) return oom(err);
        for (int i = 0; i < t->n_cols; i++) {
            struct ferry_vvalue v;
            batch_value(b, s->bcol[i], r, t->cols[i].scale, &v, dec, sizeof dec);
            text_as(b->columns[s->bcol[i]].type, t->cols[i].type, &v);
            x ^= ferry__vcanon_value_hash(t->cols[i].type, i + 1, &v, &s->scratch);
            if (t->cols[i].key_pos > 0 && t->cols[i].key_pos <= t->n_key)
                parts[t->cols[i].key_pos - 1] = key_text(t->cols[i].type, &v);
        }
        int rc = ferry__vsorted_add(s->vs, parts, ferry__vcanon_row_hash(x), err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

static int emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct stside *s = ctx;
    s->base.bytes += (int64_t)b->bytes; /* what the source read, approximately */
    struct ferry_batch *out = b;
    int rc = FERRY_OK;
    if (s->chain) {
        out = NULL;
        rc = ferry_transforms_apply(s->chain, b, &out, err); /* consumes b */
    }
    if (rc == FERRY_OK) rc = hash_batch(s, out, err);
    ferry_batch_unref(out);
    return rc;
}

/* The rows [*i, *j) of the sorted list in range r: (lo, hi], [lo, hi] when lo_incl. */
static int range_rows(struct stside *s, const struct ferry_vrange *r, int64_t *i, int64_t *j,
                      struct ferry_error *err)
{
    *j = ferry__vsorted_count(s->vs);
    int rc = ferry__vsorted_after(s->vs, r->lo, r->lo_incl, i, err);
    if (rc == FERRY_OK && r->hi) rc = ferry__vsorted_after(s->vs, r->hi, false, j, err);
    if (*j < *i) *j = *i;
    return rc;
}

/* Sum of the hashes of rows [i, j). */
static int range_sum(struct stside *s, int64_t i, int64_t j, uint64_t *sum,
                     struct ferry_error *err)
{
    uint64_t a = 0, b = 0;
    int rc = ferry__vsorted_prefix(s->vs, i, &a, err);
    if (rc == FERRY_OK) rc = ferry__vsorted_prefix(s->vs, j, &b, err);
    *sum = b - a;
    return rc;
}

static int whole_only_error(struct ferry_vside *base, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                           "verify: %s %s is read whole, not by key range", base->what, base->name);
}

static int st_digest_send(struct ferry_vside *base, const struct ferry_vrange *r,
                          struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    if (base->whole_only && (r->lo != NULL || r->hi != NULL)) return whole_only_error(base, err);
    int64_t i, j;
    int rc = range_rows(s, r, &i, &j, err);
    s->dcount = j - i;
    if (rc == FERRY_OK) rc = range_sum(s, i, j, &s->dsum, err);
    base->queries++;
    return rc;
}

static int st_digest_recv(struct ferry_vside *base, int64_t *count, uint64_t *sum,
                          struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    (void)err;
    *count = s->dcount;
    *sum = s->dsum;
    return FERRY_OK;
}

static int copy_row(struct stside *s, const struct ferry_vrow *row, struct ferry_vrows *out,
                    struct ferry_error *err)
{
    int n = s->base.t->n_key;
    char **parts = ferry_calloc((size_t)n + 1, sizeof *parts);
    if (parts == NULL) return oom(err);
    for (int i = 0; i < n; i++)
        if (row->key.part[i] && (parts[i] = ferry_strdup(row->key.part[i])) == NULL) {
            struct ferry_vkey k = {parts};
            ferry__vkey_free(&k, n);
            return oom(err);
        }
    int rc = ferry__vrows_push(out, parts, row->hash, err);
    if (rc != FERRY_OK) {
        struct ferry_vkey k = {parts};
        ferry__vkey_free(&k, n);
    }
    return rc;
}

/* Split points: the key of every step-th row of the range, each larger than the last. */
static int st_bounds(struct ferry_vside *base, const struct ferry_vrange *r, int64_t step,
                     struct ferry_vrows *out, struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    if (base->whole_only) return FERRY_OK; /* no split points: the walk lists rows */
    int64_t i, j, n0 = out->n;
    int rc = range_rows(s, r, &i, &j, err);
    for (int64_t k = i + step - 1; rc == FERRY_OK && step > 0 && k < j - 1; k += step) {
        const struct ferry_vrow *row;
        rc = ferry__vsorted_row(s->vs, k, &row, err);
        if (rc != FERRY_OK) break;
        const struct ferry_vkey *last = out->n > n0 ? &out->v[out->n - 1].key : NULL;
        if (last && ferry__vkey_order(last, &row->key, base->t->n_key, s->kint) == 0) continue;
        rc = copy_row(s, row, out, err);
    }
    base->queries++;
    return rc;
}

/* Single integer key: the smallest and largest key of the range. */
static int st_key_span(struct ferry_vside *base, const struct ferry_vrange *r, char **min,
                       char **max, struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    *min = *max = NULL;
    int64_t i, j;
    const struct ferry_vrow *row = NULL;
    int rc = range_rows(s, r, &i, &j, err);
    base->queries++;
    if (rc == FERRY_OK && j > i) rc = ferry__vsorted_row(s->vs, i, &row, err);
    if (rc != FERRY_OK || j == i || row->key.part[0] == NULL) return rc;
    *min = ferry_strdup(row->key.part[0]);
    if ((rc = ferry__vsorted_row(s->vs, j - 1, &row, err)) != FERRY_OK) {
        ferry_free(*min);
        *min = NULL;
        return rc;
    }
    *max = ferry_strdup(row->key.part[0]);
    if (*min == NULL || *max == NULL) {
        ferry_free(*min);
        ferry_free(*max);
        *min = *max = NULL;
        return oom(err);
    }
    return FERRY_OK;
}

/* Single integer key: the digests of (lo, c1], (c1, c2], ..., (cn, hi] of r. */
static int st_buckets_send(struct ferry_vside *base, const struct ferry_vrange *r,
                           const struct ferry_vrows *cuts, struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    int64_t nb = cuts->n + 1;
    ferry_free(s->bcnt);
    ferry_free(s->bsum);
    s->bcnt = ferry_calloc((size_t)nb, sizeof *s->bcnt);
    s->bsum = ferry_calloc((size_t)nb, sizeof *s->bsum);
    s->nb = nb;
    if (s->bcnt == NULL || s->bsum == NULL) return oom(err);
    int64_t i, j;
    int rc = range_rows(s, r, &i, &j, err);
    for (int64_t b = 0; b < nb && rc == FERRY_OK; b++) {
        int64_t e = j;
        if (b < cuts->n) rc = ferry__vsorted_after(s->vs, &cuts->v[b].key, false, &e, err);
        if (e > j) e = j;
        if (e < i) e = i;
        s->bcnt[b] = e - i;
        if (rc == FERRY_OK) rc = range_sum(s, i, e, &s->bsum[b], err);
        i = e;
    }
    base->queries++;
    return rc;
}

static int st_buckets_recv(struct ferry_vside *base, int64_t *counts, uint64_t *sums, int64_t n,
                           struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    (void)err;
    for (int64_t b = 0; b < n; b++) {
        counts[b] = b < s->nb ? s->bcnt[b] : 0;
        sums[b] = b < s->nb ? s->bsum[b] : 0;
    }
    return FERRY_OK;
}

static int st_rows(struct ferry_vside *base, const struct ferry_vrange *r, struct ferry_vrows *out,
                   struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    int n = base->t->n_key;
    bool one_key =
        r->lo != NULL && r->hi != NULL && r->lo_incl &&
        ferry__vkey_order(r->lo, r->hi, n, s->kint) == 0;
    if (base->whole_only && !one_key && (r->lo != NULL || r->hi != NULL))
        return whole_only_error(base, err);
    int64_t i, j;
    int rc = range_rows(s, r, &i, &j, err);
    for (; i < j && rc == FERRY_OK; i++) {
        const struct ferry_vrow *row;
        rc = ferry__vsorted_row(s->vs, i, &row, err);
        if (rc == FERRY_OK) rc = copy_row(s, row, out, err);
    }
    base->queries++;
    return rc;
}

/* Before the read: the sorted list (budget: ferry__vsorted_budget), which key parts are
 * integers, and whether key ranges can be answered (every key part orderable alike on every
 * engine: ferry__vcanon_key_orderable). */
static int sorted_new(struct stside *s, struct ferry_error *err)
{
    const struct ferry_vtable *t = s->base.t;
    s->kint = ferry_calloc((size_t)t->n_key + 1, sizeof *s->kint);
    if (s->kint == NULL) return oom(err);
    bool orderable = t->n_key > 0;
    for (int i = 0; i < t->n_key; i++) {
        enum ferry_type ty = t->cols[t->key[i]].type;
        s->kint[i] = ty == FERRY_TYPE_INT8 || ty == FERRY_TYPE_INT16 || ty == FERRY_TYPE_INT32 ||
                     ty == FERRY_TYPE_INT64;
        orderable &= ferry__vcanon_key_orderable(ty);
    }
    s->orderable = orderable;
    return ferry__vsorted_new(t->n_key, s->kint, ferry__vsorted_budget(), s->base.name, &s->vs,
                              err);
}

/* After the read: the list sorted (runs merged), ranges answerable when orderable. */
static int sorted_finish(struct stside *s, struct ferry_error *err)
{
    int rc = ferry__vsorted_finish(s->vs, err);
    s->base.sort_runs = ferry__vsorted_runs(s->vs);
    s->base.whole_only = !s->orderable;
    s->base.read_whole = true;
    return rc;
}

static int frow_cmp(const void *a, const void *b)
{
    return key_cmp(&((const struct frow *)a)->key, &((const struct frow *)b)->key, sort_nkey);
}

static int want_cmp(const void *a, const void *b)
{
    return key_cmp(*(const struct ferry_vkey *const *)a, *(const struct ferry_vkey *const *)b,
                   sort_nkey);
}

static bool wanted(const struct stside *s, const struct ferry_vkey *k)
{
    int64_t lo = 0, hi = s->n_want;
    int n = s->base.t->n_key;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = key_cmp(s->want[mid], k, n);
        if (c == 0) return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int fb_push(struct stside *s, struct ferry_batch *b, struct ferry_error *err)
{
    if (s->n_fb == s->cap_fb) {
        int cap = s->cap_fb ? s->cap_fb * 2 : 16;
        struct ferry_batch **v = ferry_realloc(s->fb, sizeof *v * (size_t)cap);
        if (v == NULL) {
            ferry_batch_unref(b);
            return oom(err);
        }
        s->fb = v;
        s->cap_fb = cap;
    }
    s->fb[s->n_fb++] = b;
    return FERRY_OK;
}

/* Emit callback of the compact writer: the one batch of the wanted rows. */
static int keep_compact(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    return fb_push(ctx, b, err);
}

/* Row `row` of b, every column, appended to the compact writer. */
static int keep_row(struct stside *s, const struct ferry_batch *b, int64_t row,
                    struct ferry_error *err)
{
    if (s->crw == NULL) {
        struct ferry_rw_limits lim = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
        s->crw = ferry__rw_new(b->schema, s->r->table, lim, keep_compact, s);
        if (s->crw == NULL) return oom(err);
    }
    char dec[64];
    ferry_rw_begin(s->crw, FERRY_OP_INSERT);
    for (int c = 0; c < b->schema->n_fields; c++) {
        struct ferry_vvalue v;
        batch_value(b, c, row, b->schema->fields[c].scale, &v, dec, sizeof dec);
        int rc = ferry__vrepair_put(s->crw, &b->schema->fields[c], &v, err);
        if (rc != FERRY_OK) {
            ferry_rw_cancel_row(s->crw);
            return rc;
        }
    }
    return ferry_rw_end(s->crw, err);
}

/* Emit callback of the fetch read: indexes the rows by key and keeps the untransformed
 * batch (the callback owns it), or, when the wanted keys are known, copies only their rows
 * and drops the batch. */
static int keep(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct stside *s = ctx;
    const struct ferry_vtable *t = s->base.t;
    int rc = FERRY_OK;
    if (!s->want_set && (rc = fb_push(s, b, err)) != FERRY_OK) return rc;
    if (s->kcol == NULL) {
        s->kcol = ferry_calloc((size_t)t->n_key + 1, sizeof *s->kcol);
        if (s->kcol == NULL) return oom(err);
        for (int i = 0; i < t->n_key; i++) {
            const struct ferry_vcol *c = &t->cols[t->key[i]];
            if ((s->kcol[i] = ferry_schema_find(b->schema, c->src)) < 0)
                rc = ferry_error_set(err, FERRY_EINVAL, "verify",
                                     "verify --repair: source %s has no key column %s",
                                     s->base.name, c->src);
        }
    }
    char dec[64];
    for (int64_t row = 0; row < b->length && rc == FERRY_OK; row++) {
        if (ferry_batch_op(b, row) == FERRY_OP_DELETE) continue;
        s->n_read++;
        if (s->n_fr == s->cap_fr) {
            int64_t cap = s->cap_fr ? s->cap_fr * 2 : 1024;
            struct frow *v = ferry_realloc(s->fr, sizeof *v * (size_t)cap);
            if (v == NULL) {
                rc = oom(err);
                break;
            }
            s->fr = v;
            s->cap_fr = cap;
        }
        char **parts = ferry_calloc((size_t)t->n_key + 1, sizeof *parts);
        if (parts == NULL) {
            rc = oom(err);
            break;
        }
        for (int i = 0; i < t->n_key; i++) {
            const struct ferry_vcol *c = &t->cols[t->key[i]];
            struct ferry_vvalue v;
            batch_value(b, s->kcol[i], row, c->scale, &v, dec, sizeof dec);
            parts[i] = key_text(c->src_type, &v);
        }
        struct ferry_vkey k = {parts};
        if (!s->want_set) {
            s->fr[s->n_fr++] = (struct frow){k, s->n_fb - 1, row};
        } else if (!wanted(s, &k)) {
            ferry__vkey_free(&k, t->n_key);
        } else {
            int64_t at = s->n_fr; /* the compact batch's row: one per kept row */
            s->fr[s->n_fr++] = (struct frow){k, 0, at};
            rc = keep_row(s, b, row, err);
        }
    }
    if (s->want_set) ferry_batch_unref(b);
    return rc;
}

static int fetch_load(struct stside *s, struct ferry_error *err)
{
    const struct ferry_pipeline_spec *p = s->p;
    const struct ferry_resource_spec *r = s->r;
    void *ctx = NULL;
    struct ferry_schema *schema = NULL;
    char *plan = NULL;
    struct ferry_row_writer *rw = NULL;
    int shards = 0;
    int rc = p->source_vt->open(p->source, &ctx, err);
    if (rc == FERRY_OK) rc = p->source_vt->discover(ctx, r, &schema, err);
    if (rc == FERRY_OK) rc = p->source_vt->plan(ctx, r, schema, NULL, &plan, err);
    if (rc == FERRY_OK) {
        json_t *j = json_loads(plan, 0, NULL);
        shards = (int)json_array_size(json_object_get(j, "shards"));
        json_decref(j);
        struct ferry_rw_limits lim = {50000, INT64_C(4) << 20, 0};
        rw = ferry__rw_new(schema, r->table, lim, keep, s);
        if (rw == NULL) rc = oom(err);
    }
    for (int sh = 0; sh < shards && rc == FERRY_OK; sh++) {
        rc = p->source_vt->extract(ctx, r, schema, plan, sh, NULL, rw, err);
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    }
    if (rc == FERRY_OK && s->crw != NULL) rc = ferry_rw_flush(s->crw, false, err);
    if (rc == FERRY_OK && s->want_set)
        ferry_log(FERRY_LOG_INFO,
                  "verify --repair: source %s read again: %" PRId64 " rows, %" PRId64
                  " kept for %" PRId64 " keys to fetch",
                  s->base.name, s->n_read, s->n_fr, s->n_want);
    ferry__rw_free(rw);
    ferry_free(plan);
    ferry_schema_unref(schema);
    if (ctx) p->source_vt->close(ctx);
    if (rc == FERRY_OK) {
        sort_nkey = s->base.t->n_key;
        if (s->n_fr > 1) qsort(s->fr, (size_t)s->n_fr, sizeof *s->fr, frow_cmp);
        s->fetched = true;
    }
    return rc;
}

/* Repair: the source row of key k, untransformed, every field of sc by name. The first
 * call reads the whole source again and keeps it in memory until the side closes. */
static int st_fetch(struct ferry_vside *base, const struct ferry_vkey *k,
                    const struct ferry_schema *sc, struct ferry_row_writer *rw, bool *found,
                    struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    *found = false;
    if (s->p == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                               "verify --repair: %s %s cannot fetch rows by key", base->what,
                               base->name);
    if (!s->fetched) {
        int rc = fetch_load(s, err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "verify --repair: source %s", base->name);
    }
    int n = base->t->n_key;
    int64_t lo = 0, hi = s->n_fr;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (key_cmp(&s->fr[mid].key, k, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= s->n_fr || key_cmp(&s->fr[lo].key, k, n) != 0) return FERRY_OK;
    const struct ferry_batch *b = s->fb[s->fr[lo].b];
    int64_t row = s->fr[lo].row;
    char dec[64];
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int i = 0; i < sc->n_fields; i++) {
        const struct ferry_field *f = &sc->fields[i];
        int c = ferry_schema_find(b->schema, f->name);
        struct ferry_vvalue v;
        memset(&v, 0, sizeof v);
        v.null = true;
        if (c >= 0) batch_value(b, c, row, b->schema->fields[c].scale, &v, dec, sizeof dec);
        int rc = ferry__vrepair_put(rw, f, &v, err);
        if (rc != FERRY_OK) {
            ferry_rw_cancel_row(rw);
            return rc;
        }
    }
    *found = true;
    return ferry_rw_end(rw, err);
}

/* Repair, before the first fetch: only these keys will be asked (the array is copied; the
 * keys must outlive the side's fetches). */
static int st_fetch_only(struct ferry_vside *base, const struct ferry_vkey *const *keys, int64_t n,
                         struct ferry_error *err)
{
    struct stside *s = (struct stside *)base;
    if (s->fetched) return FERRY_OK; /* too late: everything is kept already */
    ferry_free(s->want);
    s->want = n ? ferry_malloc(sizeof *s->want * (size_t)n) : NULL;
    if (n && s->want == NULL) return oom(err);
    if (n) memcpy(s->want, keys, sizeof *s->want * (size_t)n);
    s->n_want = n;
    sort_nkey = base->t->n_key;
    if (n > 1) qsort(s->want, (size_t)n, sizeof *s->want, want_cmp);
    s->want_set = true;
    return FERRY_OK;
}

static int st_refresh(struct ferry_vside *base, struct ferry_error *err)
{
    (void)base, (void)err;
    return FERRY_OK;
}

static void st_close(struct ferry_vside *base)
{
    struct stside *s = (struct stside *)base;
    if (s == NULL) return;
    ferry__vsorted_free(s->vs);
    for (int64_t i = 0; i < s->n_fr; i++) ferry__vkey_free(&s->fr[i].key, base->t->n_key);
    ferry_free(s->fr);
    for (int i = 0; i < s->n_fb; i++) ferry_batch_unref(s->fb[i]);
    ferry_free(s->fb);
    ferry__rw_free(s->crw);
    ferry_free(s->want);
    ferry_free(s->kcol);
    ferry_free(s->bcol);
    ferry_free(s->kint);
    ferry_free(s->bcnt);
    ferry_free(s->bsum);
    ferry_transforms_free(s->chain);
    ferry_buf_release(&s->scratch);
    ferry_free(s);
}

static const struct ferry_vside_ops st_ops = {
    .digest_send = st_digest_send,
    .digest_recv = st_digest_recv,
    .bounds = st_bounds,
    .key_span = st_key_span,
    .buckets_send = st_buckets_send,
    .buckets_recv = st_buckets_recv,
    .rows = st_rows,
    .fetch = st_fetch,
    .fetch_only = st_fetch_only,
    .refresh = st_refresh,
    .close = st_close,
};

int ferry__vside_stream_open(const struct ferry_pipeline_spec *p,
                             const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                             const char *what, struct ferry_vside **out, struct ferry_error *err)
{
    *out = NULL;
    struct stside *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    s->base.ops = &st_ops;
    s->base.what = what;
    s->base.t = t;
    s->base.whole_only = true; /* until sorted_finish */
    snprintf(s->base.name, sizeof s->base.name, "%s", r->table);
    ferry_buf_init(&s->scratch, 0);
    if (t->source) { /* a destination read as a source (files sink output) never fetches */
        s->p = p;
        s->r = r;
    }
    void *ctx = NULL;
    struct ferry_schema *schema = NULL, *outs = NULL;
    char *plan = NULL;
    struct ferry_row_writer *rw = NULL;
    int rc = sorted_new(s, err);
    if (rc == FERRY_OK) rc = p->source_vt->open(p->source, &ctx, err);
    if (rc == FERRY_OK) rc = p->source_vt->discover(ctx, r, &schema, err);
    if (rc == FERRY_OK) rc = ferry_transforms_compile(p, r->table, schema, &s->chain, &outs, err);
    ferry_transforms_set_run(s->chain, 0);
    if (rc == FERRY_OK) rc = p->source_vt->plan(ctx, r, schema, NULL, &plan, err);
    int shards = 0;
    if (rc == FERRY_OK) {
        json_t *j = json_loads(plan, 0, NULL);
        shards = (int)json_array_size(json_object_get(j, "shards"));
        json_decref(j);
    }
    if (rc == FERRY_OK) {
        struct ferry_rw_limits lim = {50000, INT64_C(4) << 20, 0};
        rw = ferry__rw_new(schema, r->table, lim, emit, s);
        if (rw == NULL) rc = oom(err);
    }
    for (int sh = 0; sh < shards && rc == FERRY_OK; sh++) {
        rc = p->source_vt->extract(ctx, r, schema, plan, sh, NULL, rw, err);
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    }
    ferry__rw_free(rw);
    ferry_free(plan);
    ferry_schema_unref(schema);
    ferry_schema_unref(outs);
    if (ctx) p->source_vt->close(ctx);
    if (rc == FERRY_OK) rc = sorted_finish(s, err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "verify: %s %s", what, r->table);
        st_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return FERRY_OK;
}

/* A files-sink Parquet destination: the files `paths` (the data set's parts of the table,
 * from the manifests) are decoded by ferry's Parquet reader and hashed like the batches of
 * a source (no transforms: the files hold what the sink wrote). Columns are matched by
 * name in each file, so parts written by different schema versions still line up. */
int ferry__vside_parquet_open(char *const *paths, int n_paths, const char *name,
                              const struct ferry_vtable *t, const char *what,
                              struct ferry_vside **out, struct ferry_error *err)
{
    *out = NULL;
    struct stside *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    s->base.ops = &st_ops;
    s->base.what = what;
    s->base.t = t;
    s->base.whole_only = true; /* until sorted_finish */
    snprintf(s->base.name, sizeof s->base.name, "%s", name);
    ferry_buf_init(&s->scratch, 0);
    int rc = sorted_new(s, err);
    for (int i = 0; i < n_paths && rc == FERRY_OK; i++) {
        struct ferry_parquet_reader *pr = NULL;
        rc = ferry__parquet_reader_open_file(paths[i], &pr, err);
        if (rc != FERRY_OK) break;
        ferry_free(s->bcol); /* columns are found again in each file */
        s->bcol = NULL;
        struct ferry_rw_limits lim = {50000, INT64_C(4) << 20, 0};
        struct ferry_schema *sc = (struct ferry_schema *)ferry__parquet_reader_schema(pr);
        struct ferry_row_writer *rw = ferry__rw_new(sc, name, lim, emit, s);
        if (rw == NULL) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__parquet_reader_read(pr, rw, err);
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
        ferry__rw_free(rw);
        ferry__parquet_reader_free(pr);
    }
    if (rc == FERRY_OK) rc = sorted_finish(s, err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "verify: %s %s", what, name);
        st_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return FERRY_OK;
}
