/* batch/builder.c - the row writer: typed columnar builders a source appends rows into.
 *
 * Owns struct ferry_row_writer, the buffers of the batch being built, its typed position
 * (checkpoint/position.h, encoded once per batch by the codec into the batch's stored form)
 * and its sticky error. Calls core (memory, buffers, errors), batch.c (ferry_batch_new),
 * text.c (position keys), the checkpoint codec and the emit callback it was given. Called
 * by sources (through the ferry_rw_* calls of ferry/batch.h, on the source thread) and by
 * the pipeline (ferry__rw_* of batch/builder.h); only the tick/stop signals cross threads.
 *
 * Why it is fast (docs/internals/batch.md has the long form):
 *   - Row capacity is checked once per row, in ferry_rw_begin(): every fixed-width
 *     buffer, bitmap, offsets array and the ops array is sized in rows (row_cap), so a
 *     fixed-width append is "switch on the type, range check, store". Only var-width data
 *     is checked per value, since its size is not known in advance.
 *   - A column cursor advances with each append: no lookup, no function pointer.
 *   - Validity bitmaps exist only from a column's first null; they are filled with 1s when
 *     allocated and on growth, so a non-null append never touches them.
 *   - The approximate size is arithmetic on counters kept anyway (rows, data bytes).
 *   - A closed batch hands its buffers to the emitted batch; the next batch gets buffers
 *     sized to the closed batch's final sizes, so identical batches grow nothing, taken
 *     from the pool of released batches' buffers (batch/pool.h) when it has them.
 *   - Errors never branch the caller: they are recorded once (sticky) and reported by
 *     ferry_rw_end(), which then discards the row.
 *
 * Rows are committed by ferry_rw_end(): `row` counts complete rows; the row being written
 * sits at index `row` in every buffer and is rolled back by resetting counters. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "batch/pool.h"
#include "checkpoint/position.h"
#include "ferry/core.h"

__extension__ typedef unsigned __int128 u128;

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define DEFAULT_ROWS 50000
#define DEFAULT_BYTES (INT64_C(4) << 20)
#define DEFAULT_MAX_VALUE (INT64_C(64) << 20)
#define DATA_MAX ((size_t)INT32_MAX) /* int32 offsets address at most this much */
#define BUF_MAX ((size_t)1 << 31)    /* hard cap of any fixed-width buffer */
#define FIRST_ROWS 256               /* rows of the first batch before it grows */
#define MIN_ROWS 64                  /* floor of a reused row capacity */
#define MIN_DATA 256                 /* floor of a reused data capacity */
#define US_PER_DAY INT64_C(86400000000)

struct bcol {
    enum ferry_type type;
    int width; /* bytes per value: fixed width only */
    bool var;  /* offsets + data */
    bool nullable;
    const char *name;
    u128 dec_bound; /* decimal128: 10^precision, the first magnitude that does not fit */
    int scale;
    int64_t null_count;
    uint8_t *validity;
    uint8_t *values; /* fixed-width values or the bool bitmap */
    int32_t *offsets;
    uint8_t *data;
    size_t validity_cap, values_cap, offsets_cap, data_cap;
    size_t peak_data; /* the most data bytes a batch held (at most limits.bytes) */
};

/* Buffers allocated for the next batch before the current one is handed over. */
/* Per column, what the closed batch needed, for the next one's buffers (alloc_next). */
struct next_bufs {
    size_t data_cap;     /* var-width data bytes */
    size_t validity_cap; /* 1: it had nulls (a bitmap from the start) */
};

struct ferry_row_writer {
    /* hot: the row being written */
    struct bcol *cols;
    int cursor;     /* values appended to the current row */
    int write_cols; /* ncols while a row is open and has room, else 0 */
    int64_t row;    /* complete rows in the batch being built */
    int64_t row_cap;
    int64_t peak_rows; /* the most rows a closed batch held */
    uint8_t *ops;
    size_t ops_cap;
    int64_t data_bytes; /* var-width bytes in the batch */
    int64_t max_value;
    int ncols;
    bool in_row;
    int n_validity; /* columns of this batch with at least one null */

    /* batch limits and size accounting */
    struct ferry_rw_limits limits;
    int64_t row_bytes; /* fixed bytes per row: widths + 4 per offset + 1 op */
    int n_bool, n_var;
    atomic_int *tick, *stop;

    /* identity and positions */
    struct ferry_schema *schema;
    char *resource;
    ferry_emit_fn emit;
    void *emit_ctx;
    uint64_t seq;
    int64_t total_rows;
    int shard;
    bool has_n;
    int64_t n;
    int64_t k; /* ferry_rw_set_suboffset(): "k" in positions when > 0 */
    struct ferry_buf tag; /* ferry_rw_set_offset_tag(): "g" in positions when not empty */
    int *pos_cols;
    int n_pos;
    /* The shard's position, typed: its key is the shard's last emitted row's (kept for an
     * empty final batch, which still says where the shard got); key values borrow their
     * text from key_text (one buffer per position column), never cleared by the codec. */
    struct ferry_position position;
    struct ferry_buf *key_text;
    struct ferry_buf pos; /* the position's stored form, encoded once per batch */
    struct next_bufs *next;
    ferry_skip_fn skip_fn;
    void *skip_ctx;
    void (*group_enter)(void *ctx); /* ferry__rw_set_group */
    void *group_ctx;
    bool cut_next; /* the batch close_batch makes ends at a commit-group cut */

    /* sticky error: the first one wins */
    int code;
    struct ferry_error error;
};

/* ---- errors (cold) ---- */

__attribute__((cold, format(printf, 3, 4))) static void fail(struct ferry_row_writer *rw, int code,
                                                             const char *fmt, ...)
{
    if (rw->code != FERRY_OK) return;
    rw->code = code;
    struct ferry_error *e = &rw->error;
    e->code = code;
    snprintf(e->origin, sizeof e->origin, "batch");
    int k = snprintf(e->message, sizeof e->message, "resource %s: ", rw->resource);
    if (k < 0 || (size_t)k >= sizeof e->message) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message + k, sizeof e->message - (size_t)k, fmt, ap);
    va_end(ap);
}

static int report(const struct ferry_row_writer *rw, struct ferry_error *err)
{
    if (err) *err = rw->error;
    return rw->code;
}

/* A rejected value still occupies its slot so that the row can be rolled back exactly. */
static void placeholder(struct ferry_row_writer *rw, struct bcol *c)
{
    if (c->var) c->offsets[rw->row + 1] = c->offsets[rw->row];
}

__attribute__((cold)) static void reject_type(struct ferry_row_writer *rw, struct bcol *c,
                                              const char *call)
{
    placeholder(rw, c);
    fail(rw, FERRY_EINVAL, "column %s (%s): %s cannot write this type (row %" PRId64 ")", c->name,
         ferry_type_name(c->type), call, rw->total_rows + 1);
}

__attribute__((cold)) static void reject_int(struct ferry_row_writer *rw, struct bcol *c, int64_t v)
{
    fail(rw, FERRY_EINVAL, "column %s (%s): value %" PRId64 " is out of range (row %" PRId64 ")",
         c->name, ferry_type_name(c->type), v, rw->total_rows + 1);
}

__attribute__((cold)) static void extra_value(struct ferry_row_writer *rw)
{
    rw->cursor++;
    if (!rw->in_row)
        fail(rw, FERRY_EINVAL, "a value was appended outside ferry_rw_begin()/ferry_rw_end()");
}

/* ---- buffers ---- */

static size_t bitmap_bytes(int64_t rows)
{
    return (size_t)(rows + 7) / 8;
}

static size_t values_bytes(const struct bcol *c, int64_t rows)
{
    if (c->var) return 0;
    return c->type == FERRY_TYPE_BOOL ? bitmap_bytes(rows) : (size_t)c->width * (size_t)rows;
}

/* realloc `*p` to `need` bytes when it is smaller; `fill` >= 0 initialises new bytes. */
static bool reserve(void **p, size_t *cap, size_t need, int fill)
{
    if (need <= *cap) return true;
    uint8_t *q = ferry_realloc(*p, need);
    if (q == NULL) return false;
    if (fill >= 0) memset(q + *cap, fill, need - *cap);
    *p = q;
    *cap = need;
    return true;
}

/* Grows every row-sized buffer geometrically (never past limits.rows, where the batch
 * closes anyway). A buffer that grew before a later one failed keeps its size:
 * capacities are tracked per buffer. */
static bool grow_rows(struct ferry_row_writer *rw)
{
    int64_t cap = rw->row_cap * 2;
    if (cap > rw->limits.rows) cap = rw->limits.rows;
    if (cap <= rw->row) cap = rw->row + 1;
    if ((size_t)cap > BUF_MAX / 16) {
        fail(rw, FERRY_ENOMEM, "a buffer of the batch would exceed 2 GiB at %" PRId64 " rows", cap);
        return false;
    }
    bool ok = reserve((void **)&rw->ops, &rw->ops_cap, (size_t)cap, -1);
    for (int j = 0; ok && j < rw->ncols; j++) {
        struct bcol *c = &rw->cols[j];
        if (c->var) {
            bool fresh = c->offsets_cap == 0; /* no buffers since a failed alloc_next */
            ok = reserve((void **)&c->offsets, &c->offsets_cap, sizeof(int32_t) * (size_t)(cap + 1),
                         -1);
            if (ok && fresh) c->offsets[0] = 0;
        } else
            ok = reserve((void **)&c->values, &c->values_cap, values_bytes(c, cap), -1);
        if (ok && c->validity != NULL)
            ok = reserve((void **)&c->validity, &c->validity_cap, bitmap_bytes(cap), 0xff);
    }
    if (!ok) {
        fail(rw, FERRY_ENOMEM, "out of memory growing the batch to %" PRId64 " rows", cap);
        return false;
    }
    rw->row_cap = cap;
    return true;
}

__attribute__((noinline)) static bool grow_data(struct ferry_row_writer *rw, struct bcol *c,
                                                size_t need)
{
    if (need > DATA_MAX) {
        fail(rw, FERRY_ENOMEM,
             "column %s (%s): the batch's data would exceed 2 GiB (row %" PRId64 ")", c->name,
             ferry_type_name(c->type), rw->total_rows + 1);
        return false;
    }
    size_t cap = c->data_cap * 2;
    if (cap < need) cap = need;
    if (cap > DATA_MAX) cap = DATA_MAX;
    if (!reserve((void **)&c->data, &c->data_cap, cap, -1)) {
        fail(rw, FERRY_ENOMEM, "column %s (%s): out of memory (row %" PRId64 ")", c->name,
             ferry_type_name(c->type), rw->total_rows + 1);
        return false;
    }
    return true;
}

/* First null of a column in this batch: a bitmap of 1s over the whole row capacity, so
 * earlier rows read as valid and later non-null appends need not touch it. */
__attribute__((noinline)) static bool alloc_validity(struct ferry_row_writer *rw, struct bcol *c)
{
    size_t need = bitmap_bytes(rw->row_cap);
    c->validity = ferry_malloc(need);
    if (c->validity == NULL) {
        fail(rw, FERRY_ENOMEM, "column %s: out of memory", c->name);
        return false;
    }
    memset(c->validity, 0xff, need);
    c->validity_cap = need;
    return true;
}

/* ---- the typed position ---- */

/* A TEXT key value holding a copy of s (n bytes) in t. */
static int key_text(struct ferry_key_value *v, struct ferry_buf *t, const char *s, size_t n)
{
    ferry_buf_reset(t);
    if (ferry_buf_reserve(t, n + 1) != FERRY_OK) return FERRY_ENOMEM;
    if (n > 0) memcpy(t->data, s, n);
    t->len = n;
    t->data[n] = '\0';
    v->kind = FERRY_KEY_TEXT;
    v->text = t->data;
    v->len = n;
    return FERRY_OK;
}

/* A float key value: NaN and infinities are text ("NaN", "Infinity", "-Infinity"). */
static int key_real(struct ferry_key_value *v, struct ferry_buf *t, double x, bool single)
{
    if (isnan(x)) return key_text(v, t, "NaN", 3);
    if (isinf(x)) return x > 0 ? key_text(v, t, "Infinity", 8) : key_text(v, t, "-Infinity", 9);
    v->kind = FERRY_KEY_REAL;
    v->real = x;
    v->single = single;
    return FERRY_OK;
}

static int key_hex(struct ferry_key_value *v, struct ferry_buf *t, const uint8_t *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    ferry_buf_reset(t);
    if (ferry_buf_reserve(t, 2 * n + 1) != FERRY_OK) return FERRY_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        t->data[2 * i] = hex[p[i] >> 4];
        t->data[2 * i + 1] = hex[p[i] & 15];
    }
    t->len = 2 * n;
    t->data[2 * n] = '\0';
    v->kind = FERRY_KEY_TEXT;
    v->text = t->data;
    v->len = 2 * n;
    return FERRY_OK;
}

/* Key value i of the position: column c at row r, typed as the position stores it (a date
 * is days, a time or timestamp microseconds, decimal and uuid their text, binary hex). */
static int key_value(struct ferry_row_writer *rw, int i, const struct bcol *c, int64_t r)
{
    struct ferry_key_value *v = &rw->position.key[i];
    struct ferry_buf *t = &rw->key_text[i];
    memset(v, 0, sizeof *v);
    char tmp[128];
    if (c->validity != NULL && !(c->validity[r >> 3] & (1u << (r & 7)))) return FERRY_OK;
    v->kind = FERRY_KEY_INT;
    switch (c->type) {
    case FERRY_TYPE_BOOL:
        v->kind = FERRY_KEY_BOOL;
        v->b = (c->values[r >> 3] >> (r & 7)) & 1u;
        return FERRY_OK;
    case FERRY_TYPE_INT8:
        v->i = ((const int8_t *)c->values)[r];
        return FERRY_OK;
    case FERRY_TYPE_INT16:
        v->i = ((const int16_t *)c->values)[r];
        return FERRY_OK;
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32:
        v->i = ((const int32_t *)c->values)[r];
        return FERRY_OK;
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        v->i = ((const int64_t *)c->values)[r];
        return FERRY_OK;
    case FERRY_TYPE_FLOAT32:
        return key_real(v, t, ((const float *)c->values)[r], true);
    case FERRY_TYPE_FLOAT64:
        return key_real(v, t, ((const double *)c->values)[r], false);
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 d;
        memcpy(&d.lo, c->values + r * 16, 8);
        memcpy(&d.hi, c->values + r * 16 + 8, 8);
        int n = ferry_decimal128_to_text(d, c->scale, tmp, sizeof tmp);
        return n < 0 ? FERRY_EINVAL : key_text(v, t, tmp, (size_t)n);
    }
    case FERRY_TYPE_UUID:
        return key_text(v, t, tmp, (size_t)ferry_uuid_to_text(c->values + r * 16, tmp, sizeof tmp));
    case FERRY_TYPE_BINARY:
        return key_hex(v, t, c->data + c->offsets[r], (size_t)(c->offsets[r + 1] - c->offsets[r]));
    default: /* utf8, json, decimal text */
        return key_text(v, t, (const char *)c->data + c->offsets[r],
                        (size_t)(c->offsets[r + 1] - c->offsets[r]));
    }
}

/* The batch's position (its last row's key, the offset, done), encoded by the codec into
 * rw->pos: {"shard":S,"key":[...],"n":N,"k":K,"g":"..","done":true} (builder.h). */
static int build_position(struct ferry_row_writer *rw, bool done)
{
    struct ferry_position *p = &rw->position;
    int rc = FERRY_OK;
    if (rw->row > 0 && rw->n_pos > 0) {
        for (int k = 0; rc == FERRY_OK && k < rw->n_pos; k++)
            rc = key_value(rw, k, &rw->cols[rw->pos_cols[k]], rw->row - 1);
        p->has_key = rc == FERRY_OK;
        p->n_key = p->has_key ? rw->n_pos : 0;
        if (rc != FERRY_OK) return rc;
    }
    p->shard = rw->shard;
    p->has_n = rw->has_n;
    p->n = rw->n;
    p->k = rw->has_n ? rw->k : 0;
    p->tag = rw->has_n && rw->tag.len > 0 ? rw->tag.data : NULL;
    p->done = done;
    ferry_buf_reset(&rw->pos);
    return ferry_position_encode(p, &rw->pos, NULL);
}

/* ---- closing a batch ---- */

static int64_t approx_bytes(const struct ferry_row_writer *rw)
{
    return rw->row * rw->row_bytes + rw->data_bytes + 4 * (int64_t)rw->n_var +
           (int64_t)bitmap_bytes(rw->row) * (rw->n_bool + rw->n_validity);
}

/* Zero-row batch of a finished shard: minimal buffers of its own (offsets {0}), so the
 * builder keeps its buffers for the next shard. */
static bool fill_empty(struct ferry_batch *b)
{
    b->ops = ferry_malloc(1);
    if (b->ops == NULL) return false;
    for (int j = 0; j < b->schema->n_fields; j++) {
        struct ferry_column *col = &b->columns[j];
        if (ferry_type_is_varwidth(col->type)) {
            col->offsets = ferry_calloc(1, sizeof(int32_t));
            col->data = ferry_malloc(1);
            if (col->offsets == NULL || col->data == NULL) return false;
            col->offsets_cap = sizeof(int32_t);
            col->data_cap = 1;
        } else {
            col->values = ferry_calloc(1, 1);
            if (col->values == NULL) return false;
            col->values_cap = 1;
        }
    }
    return true;
}

/* The next batch's buffers, allocated once the closed batch was emitted (so that a source
 * waiting on a full queue holds no second set), at the largest sizes a closed batch had
 * (rows, and per column var-width bytes up to limits.bytes; with small floors; close_batch
 * noted the data bytes and which columns had nulls in rw->next), so that a batch cut short
 * (a shard's end, a tick) does not make the next full one grow again. Released batches'
 * buffers come back from the pool (batch/pool.h): a steady copy allocates nothing per batch. */
static bool alloc_next(struct ferry_row_writer *rw, int64_t rows)
{
    rw->ops = ferry__pool_get((size_t)rows, &rw->ops_cap);
    if (rw->ops == NULL) return false;
    for (int j = 0; j < rw->ncols; j++) {
        struct bcol *c = &rw->cols[j];
        struct next_bufs *nb = &rw->next[j];
        if (c->var) {
            c->offsets = ferry__pool_get(sizeof(int32_t) * (size_t)(rows + 1), &c->offsets_cap);
            c->data = ferry__pool_get(nb->data_cap, &c->data_cap);
            if (c->offsets == NULL || c->data == NULL) return false;
            c->offsets[0] = 0;
        } else {
            c->values = ferry__pool_get(values_bytes(c, rows), &c->values_cap);
            if (c->values == NULL) return false;
        }
        if (nb->validity_cap > 0) {
            c->validity = ferry__pool_get(bitmap_bytes(rows), &c->validity_cap);
            if (c->validity == NULL) return false;
            memset(c->validity, 0xff, c->validity_cap);
        }
        memset(nb, 0, sizeof *nb);
    }
    rw->row_cap = rows;
    return true;
}

/* After a failed alloc_next: no buffers and no row capacity, so the next row grows them
 * from nothing (grow_rows) and the sticky error stops the writer meanwhile. */
static void drop_bufs(struct ferry_row_writer *rw)
{
    ferry_free(rw->ops);
    rw->ops = NULL;
    rw->ops_cap = 0;
    for (int j = 0; j < rw->ncols; j++) {
        struct bcol *c = &rw->cols[j];
        ferry_free(c->validity);
        ferry_free(c->values);
        ferry_free(c->offsets);
        ferry_free(c->data);
        c->validity = c->values = c->data = NULL;
        c->offsets = NULL;
        c->validity_cap = c->values_cap = c->offsets_cap = c->data_cap = 0;
    }
    rw->row_cap = 0;
}

static void mask_padding(uint8_t *bits, int64_t rows)
{
    if (bits != NULL && (rows & 7)) bits[rows >> 3] &= (uint8_t)((1u << (rows & 7)) - 1);
}

/* Moves the built rows' buffers into b; the writer keeps none (alloc_next gives it the
 * next ones after the emit), only their sizes in rw->next. */
static void hand_over(struct ferry_row_writer *rw, struct ferry_batch *b, int64_t rows)
{
    b->length = rows;
    b->bytes = (size_t)approx_bytes(rw);
    b->ops = rw->ops;
    rw->ops = NULL;
    rw->ops_cap = 0;
    for (int j = 0; j < rw->ncols; j++) {
        struct bcol *c = &rw->cols[j];
        struct next_bufs *nb = &rw->next[j];
        struct ferry_column *col = &b->columns[j];
        if (c->var) {
            size_t used = (size_t)c->offsets[rows];
            size_t bound = rw->limits.bytes > 0 ? (size_t)rw->limits.bytes : used;
            if (used > c->peak_data) c->peak_data = used < bound ? used : bound;
            nb->data_cap = c->peak_data > MIN_DATA ? c->peak_data : MIN_DATA;
        }
        nb->validity_cap = c->null_count > 0;
        col->null_count = c->null_count;
        if (c->null_count > 0) {
            mask_padding(c->validity, rows);
            col->validity = c->validity;
            col->validity_cap = c->validity_cap;
        } else {
            ferry_free(c->validity); /* allocated for a null that was rolled back */
        }
        if (c->type == FERRY_TYPE_BOOL) mask_padding(c->values, rows);
        col->values = c->values;
        col->values_cap = c->values_cap;
        col->offsets = c->offsets;
        col->offsets_cap = c->offsets_cap;
        col->data = c->data;
        col->data_cap = c->data_cap;
        c->validity = c->values = c->data = NULL;
        c->offsets = NULL;
        c->validity_cap = c->values_cap = c->offsets_cap = c->data_cap = 0;
        c->null_count = 0;
    }
    rw->row_cap = 0;
    rw->row = 0;
    rw->data_bytes = 0;
    rw->n_validity = 0;
}

/* Closes the batch being built (rows > 0, or done) and hands it to emit. */
static int close_batch(struct ferry_row_writer *rw, bool done)
{
    if (rw->code != FERRY_OK) return rw->code;
    if (rw->tick) atomic_store_explicit(rw->tick, 0, memory_order_relaxed);
    int64_t rows = rw->row;
    struct ferry_batch *b = NULL;
    if (build_position(rw, done) != FERRY_OK) goto nomem;
    b = ferry_batch_new(rw->schema, rw->resource);
    if (b == NULL || ferry_batch_set_position(b, rw->pos.data) != FERRY_OK) goto nomem;
    b->seq = rw->seq + 1;
    b->shard = rw->shard;
    b->group_cut = rw->cut_next;
    rw->cut_next = false;
    int64_t next_rows = 0;
    if (rows == 0) {
        if (!fill_empty(b)) goto nomem;
    } else {
        if (rows > rw->peak_rows) rw->peak_rows = rows;
        next_rows = rw->peak_rows > MIN_ROWS ? rw->peak_rows : MIN_ROWS;
        if (next_rows > rw->limits.rows) next_rows = rw->limits.rows;
        hand_over(rw, b, rows);
    }
    rw->seq++;
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = rw->emit(rw->emit_ctx, b, &e);
    if (rc != FERRY_OK) {
        rw->code = rc;
        rw->error = e;
        rw->error.code = rc;
        if (e.message[0] == '\0')
            snprintf(rw->error.message, sizeof rw->error.message,
                     "resource %s: batch %" PRIu64 " was not accepted (%s)", rw->resource, rw->seq,
                     ferry_code_name(rc));
    }
    if (next_rows > 0 && !alloc_next(rw, next_rows)) {
        drop_bufs(rw);
        fail(rw, FERRY_ENOMEM, "out of memory after batch %" PRIu64, rw->seq);
    }
    return rw->code;
nomem:
    ferry_batch_unref(b);
    fail(rw, FERRY_ENOMEM, "out of memory closing batch %" PRIu64, rw->seq + 1);
    return rw->code;
}

/* ---- engine side ---- */

static u128 pow10_u128(int p)
{
    u128 v = 1;
    while (p-- > 0)
        v *= 10;
    return v;
}

struct ferry_row_writer *ferry__rw_new(struct ferry_schema *schema, const char *resource,
                                       struct ferry_rw_limits limits, ferry_emit_fn emit,
                                       void *emit_ctx)
{
    if (schema == NULL || emit == NULL) return NULL;
    struct ferry_row_writer *rw = ferry_calloc(1, sizeof *rw);
    if (rw == NULL) return NULL;
    rw->schema = ferry_schema_ref(schema);
    rw->resource = ferry_strdup(resource ? resource : "");
    rw->emit = emit;
    rw->emit_ctx = emit_ctx;
    ferry_buf_init(&rw->pos, 0);
    ferry_buf_init(&rw->tag, 0);
    ferry_position_init(&rw->position);
    if (limits.rows <= 0) limits.rows = DEFAULT_ROWS;
    if (limits.bytes <= 0) limits.bytes = DEFAULT_BYTES;
    if (limits.max_value_bytes <= 0) limits.max_value_bytes = DEFAULT_MAX_VALUE;
    if (limits.max_value_bytes > (int64_t)DATA_MAX) limits.max_value_bytes = (int64_t)DATA_MAX;
    rw->limits = limits;
    rw->max_value = limits.max_value_bytes;
    int n = schema->n_fields;
    rw->ncols = n;
    size_t ncap = (size_t)(n > 0 ? n : 1);
    rw->cols = ferry_calloc(ncap, sizeof *rw->cols);
    rw->next = ferry_calloc(ncap, sizeof *rw->next);
    rw->pos_cols = ferry_calloc(ncap, sizeof *rw->pos_cols);
    rw->position.key = ferry_calloc(ncap, sizeof *rw->position.key);
    rw->key_text = ferry_calloc(ncap, sizeof *rw->key_text);
    if (rw->resource == NULL || rw->cols == NULL || rw->next == NULL || rw->pos_cols == NULL ||
        rw->position.key == NULL || rw->key_text == NULL)
        goto fail;
    for (size_t k = 0; k < ncap; k++)
        ferry_buf_init(&rw->key_text[k], 0);

    rw->row_bytes = 1;
    for (int j = 0; j < n; j++) {
        const struct ferry_field *f = &schema->fields[j];
        struct bcol *c = &rw->cols[j];
        c->type = f->type;
        c->name = f->name;
        c->nullable = f->nullable;
        c->var = ferry_type_is_varwidth(f->type);
        c->width = ferry_type_width(f->type);
        c->scale = f->scale;
        if (f->type == FERRY_TYPE_DECIMAL128)
            c->dec_bound = pow10_u128(f->precision >= 1 && f->precision <= 38 ? f->precision : 38);
        if (c->var) {
            rw->n_var++;
            rw->row_bytes += 4;
        } else if (f->type == FERRY_TYPE_BOOL) {
            rw->n_bool++;
        } else {
            rw->row_bytes += c->width;
        }
    }

    rw->row_cap = limits.rows < FIRST_ROWS ? limits.rows : FIRST_ROWS;
    rw->ops = ferry_malloc((size_t)rw->row_cap);
    if (rw->ops == NULL) goto fail;
    rw->ops_cap = (size_t)rw->row_cap;
    for (int j = 0; j < n; j++) {
        struct bcol *c = &rw->cols[j];
        if (c->var) {
            c->offsets_cap = sizeof(int32_t) * (size_t)(rw->row_cap + 1);
            c->offsets = ferry_malloc(c->offsets_cap);
            c->data_cap = MIN_DATA;
            c->data = ferry_malloc(c->data_cap);
            if (c->offsets == NULL || c->data == NULL) goto fail;
            c->offsets[0] = 0;
        } else {
            c->values_cap = values_bytes(c, rw->row_cap);
            c->values = ferry_malloc(c->values_cap);
            if (c->values == NULL) goto fail;
        }
    }
    return rw;
fail:
    ferry__rw_free(rw);
    return NULL;
}

void ferry__rw_free(struct ferry_row_writer *rw)
{
    if (rw == NULL) return;
    if (rw->cols != NULL) {
        for (int j = 0; j < rw->ncols; j++) {
            struct bcol *c = &rw->cols[j];
            ferry_free(c->validity);
            ferry_free(c->values);
            ferry_free(c->offsets);
            ferry_free(c->data);
        }
    }
    ferry_free(rw->next);
    ferry_free(rw->cols);
    ferry_free(rw->ops);
    ferry_free(rw->pos_cols);
    for (int k = 0; rw->key_text != NULL && k < (rw->ncols > 0 ? rw->ncols : 1); k++)
        ferry_buf_release(&rw->key_text[k]);
    ferry_free(rw->key_text);
    ferry_free(rw->position.key); /* its text is key_text's: not ferry_position_clear */
    ferry_buf_release(&rw->pos);
    ferry_buf_release(&rw->tag);
    ferry_free(rw->resource);
    ferry_schema_unref(rw->schema);
    ferry_free(rw);
}

void ferry__rw_set_signals(struct ferry_row_writer *rw, atomic_int *tick, atomic_int *stop)
{
    rw->tick = tick;
    rw->stop = stop;
}

int64_t ferry__rw_rows(const struct ferry_row_writer *rw)
{
    return rw->total_rows;
}

void ferry__rw_set_skip_report(struct ferry_row_writer *rw, ferry_skip_fn fn, void *ctx)
{
    rw->skip_fn = fn;
    rw->skip_ctx = ctx;
}

void ferry_rw_report_skipped(struct ferry_row_writer *rw, int64_t count, const char *samples_json)
{
    if (rw->skip_fn != NULL) rw->skip_fn(rw->skip_ctx, rw->shard, count, samples_json);
}

/* ---- rows ---- */

/* Undoes the values written to the open row. */
static void rollback(struct ferry_row_writer *rw)
{
    int written = rw->cursor < rw->write_cols ? rw->cursor : rw->write_cols;
    int64_t r = rw->row;
    for (int j = 0; j < written; j++) {
        struct bcol *c = &rw->cols[j];
        if (c->validity != NULL && !(c->validity[r >> 3] & (1u << (r & 7)))) {
            c->validity[r >> 3] |= (uint8_t)(1u << (r & 7));
            if (--c->null_count == 0) rw->n_validity--;
        }
        if (c->var) rw->data_bytes -= c->offsets[r + 1] - c->offsets[r];
    }
    rw->in_row = false;
    rw->cursor = 0;
    rw->write_cols = 0;
}

void ferry_rw_begin(struct ferry_row_writer *rw, enum ferry_op op)
{
    if (UNLIKELY(rw->in_row)) {
        rollback(rw);
        fail(rw, FERRY_EINVAL, "ferry_rw_begin() inside a row: the previous row was not ended");
    }
    rw->in_row = true;
    rw->cursor = 0;
    rw->write_cols = 0;
    if (UNLIKELY(rw->row >= rw->row_cap) && !grow_rows(rw)) return;
    if (UNLIKELY((unsigned)op > FERRY_OP_TRUNCATE))
        fail(rw, FERRY_EINVAL, "row %" PRId64 ": unknown operation %d", rw->total_rows + 1,
             (int)op);
    rw->ops[rw->row] = (uint8_t)op;
    rw->write_cols = rw->ncols;
}

void ferry_rw_cancel_row(struct ferry_row_writer *rw)
{
    if (rw->in_row) rollback(rw);
}

__attribute__((noinline)) static int end_slow(struct ferry_row_writer *rw, struct ferry_error *err)
{
    if (!rw->in_row) {
        fail(rw, FERRY_EINVAL, "ferry_rw_end() without ferry_rw_begin()");
    } else {
        if (rw->cursor != rw->ncols)
            fail(rw, FERRY_EINVAL, "row has %d values, schema has %d columns", rw->cursor,
                 rw->ncols);
        rollback(rw);
    }
    rw->cursor = 0;
    return report(rw, err);
}

__attribute__((noinline)) static int stopped(struct ferry_row_writer *rw, int code,
                                             struct ferry_error *err)
{
    return ferry_error_set(err, code, "pipeline", "resource %s: run %s", rw->resource,
                           code == FERRY_EPAUSED ? "paused" : "canceled");
}

int ferry_rw_end(struct ferry_row_writer *rw, struct ferry_error *err)
{
    if (UNLIKELY(rw->cursor != rw->ncols || !rw->in_row || rw->code != FERRY_OK))
        return end_slow(rw, err);
    rw->in_row = false;
    rw->write_cols = 0;
    rw->row++;
    rw->total_rows++;
    if (UNLIKELY(rw->row >= rw->limits.rows || approx_bytes(rw) >= rw->limits.bytes ||
                 (rw->tick != NULL && atomic_load_explicit(rw->tick, memory_order_relaxed)))) {
        if (close_batch(rw, false) != FERRY_OK) return report(rw, err);
    }
    if (rw->stop != NULL) {
        int s = atomic_load_explicit(rw->stop, memory_order_relaxed);
        if (UNLIKELY(s != 0)) return stopped(rw, s, err);
    }
    return FERRY_OK;
}

/* ---- values ---- */

void ferry_rw_null(struct ferry_row_writer *rw)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    int64_t r = rw->row;
    if (UNLIKELY(!c->nullable)) {
        placeholder(rw, c);
        fail(rw, FERRY_EINVAL, "column %s (%s) is not nullable but got a null (row %" PRId64 ")",
             c->name, ferry_type_name(c->type), rw->total_rows + 1);
        return;
    }
    if (UNLIKELY(c->validity == NULL) && !alloc_validity(rw, c)) {
        placeholder(rw, c);
        return;
    }
    c->validity[r >> 3] &= (uint8_t) ~(1u << (r & 7));
    if (c->null_count++ == 0) rw->n_validity++;
    if (c->var) {
        c->offsets[r + 1] = c->offsets[r];
    } else if (c->type == FERRY_TYPE_BOOL) {
        c->values[r >> 3] &= (uint8_t) ~(1u << (r & 7));
    } else {
        memset(c->values + (size_t)r * (size_t)c->width, 0, (size_t)c->width);
    }
}

void ferry_rw_bool(struct ferry_row_writer *rw, bool v)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    int64_t r = rw->row;
    if (UNLIKELY(c->type != FERRY_TYPE_BOOL)) {
        reject_type(rw, c, "ferry_rw_bool()");
        return;
    }
    uint8_t m = (uint8_t)(1u << (r & 7));
    if (v)
        c->values[r >> 3] |= m;
    else
        c->values[r >> 3] &= (uint8_t)~m;
}

void ferry_rw_int(struct ferry_row_writer *rw, int64_t v)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    int64_t r = rw->row;
    switch (c->type) {
    case FERRY_TYPE_INT8:
        if (UNLIKELY(v < INT8_MIN || v > INT8_MAX)) break;
        ((int8_t *)c->values)[r] = (int8_t)v;
        return;
    case FERRY_TYPE_INT16:
        if (UNLIKELY(v < INT16_MIN || v > INT16_MAX)) break;
        ((int16_t *)c->values)[r] = (int16_t)v;
        return;
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32:
        if (UNLIKELY(v < INT32_MIN || v > INT32_MAX)) break;
        ((int32_t *)c->values)[r] = (int32_t)v;
        return;
    case FERRY_TYPE_TIME64_US:
        if (UNLIKELY(v < 0 || v > US_PER_DAY)) break;
        ((int64_t *)c->values)[r] = v;
        return;
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        ((int64_t *)c->values)[r] = v;
        return;
    default:
        reject_type(rw, c, "ferry_rw_int()");
        return;
    }
    reject_int(rw, c, v);
}

void ferry_rw_float(struct ferry_row_writer *rw, double v)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    int64_t r = rw->row;
    if (LIKELY(c->type == FERRY_TYPE_FLOAT64)) {
        ((double *)c->values)[r] = v;
    } else if (c->type == FERRY_TYPE_FLOAT32) {
        if (UNLIKELY(isfinite(v) && fabs(v) > FLT_MAX)) {
            fail(rw, FERRY_EINVAL,
                 "column %s (float32): value %g is out of range (row %" PRId64 ")", c->name, v,
                 rw->total_rows + 1);
            return;
        }
        ((float *)c->values)[r] = (float)v;
    } else {
        reject_type(rw, c, "ferry_rw_float()");
    }
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_dec128(struct ferry_row_writer *rw, struct bcol *c, uint64_t lo, int64_t hi)
{
    u128 u = ((u128)(uint64_t)hi << 64) | lo;
    u128 mag = hi < 0 ? -u : u;
    /* (2^127 - 1 is the NaN of special values, connector.h: only read for sinks storing it) */
    if (UNLIKELY(mag >= c->dec_bound) && !(hi == INT64_MAX && lo == UINT64_MAX)) {
        char text[64];
        struct ferry_decimal128 v = {lo, hi};
        ferry_decimal128_to_text(v, 0, text, sizeof text);
        fail(rw, FERRY_EINVAL,
             "column %s (decimal128): unscaled value %s has more digits than the precision "
             "allows (row %" PRId64 ")",
             c->name, text, rw->total_rows + 1);
        return;
    }
    uint8_t *p = c->values + (size_t)rw->row * 16;
    store_le64(p, lo);
    store_le64(p + 8, (uint64_t)hi);
}

void ferry_rw_dec128(struct ferry_row_writer *rw, struct ferry_decimal128 v)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    if (UNLIKELY(c->type != FERRY_TYPE_DECIMAL128)) {
        reject_type(rw, c, "ferry_rw_dec128()");
        return;
    }
    put_dec128(rw, c, v.lo, v.hi);
}

void ferry_rw_fixed(struct ferry_row_writer *rw, const uint8_t *p, size_t n)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    if (UNLIKELY(c->type != FERRY_TYPE_UUID && c->type != FERRY_TYPE_DECIMAL128)) {
        reject_type(rw, c, "ferry_rw_fixed()");
        return;
    }
    if (UNLIKELY(n != 16)) {
        fail(rw, FERRY_EINVAL, "column %s (%s): got %zu bytes, expected 16 (row %" PRId64 ")",
             c->name, ferry_type_name(c->type), n, rw->total_rows + 1);
        return;
    }
    if (c->type == FERRY_TYPE_DECIMAL128) {
        uint64_t lo = 0, hi = 0;
        for (int i = 7; i >= 0; i--) {
            lo = (lo << 8) | p[i];
            hi = (hi << 8) | p[8 + i];
        }
        put_dec128(rw, c, lo, (int64_t)hi);
        return;
    }
    memcpy(c->values + (size_t)rw->row * 16, p, 16);
}

void ferry_rw_copy_value(struct ferry_row_writer *rw, const struct ferry_batch *b, int c, int64_t r)
{
    if (ferry_col_is_null(b, c, r)) {
        ferry_rw_null(rw);
        return;
    }
    switch (b->schema->fields[c].type) {
    case FERRY_TYPE_BOOL: ferry_rw_bool(rw, ferry_col_bool(b, c, r)); break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: ferry_rw_float(rw, ferry_col_float(b, c, r)); break;
    case FERRY_TYPE_DECIMAL128: ferry_rw_dec128(rw, ferry_col_dec128(b, c, r)); break;
    case FERRY_TYPE_UUID: ferry_rw_fixed(rw, ferry_col_fixed(b, c, r), 16); break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t n;
        const uint8_t *p = ferry_col_bytes(b, c, r, &n);
        ferry_rw_text(rw, p, n);
        break;
    }
    default: ferry_rw_int(rw, ferry_col_int(b, c, r)); break;
    }
}

void ferry_rw_text(struct ferry_row_writer *rw, const void *p, size_t n)
{
    if (UNLIKELY(rw->cursor >= rw->write_cols)) {
        extra_value(rw);
        return;
    }
    struct bcol *c = &rw->cols[rw->cursor++];
    int64_t r = rw->row;
    if (UNLIKELY(!c->var)) {
        reject_type(rw, c, "ferry_rw_text()");
        return;
    }
    if (UNLIKELY(n > (size_t)rw->max_value)) {
        placeholder(rw, c);
        fail(rw, FERRY_EINVAL,
             "column %s (%s): a value of %zu bytes exceeds the %" PRId64
             "-byte limit for one value (row %" PRId64 ")",
             c->name, ferry_type_name(c->type), n, rw->max_value, rw->total_rows + 1);
        return;
    }
    size_t off = (size_t)c->offsets[r];
    size_t end = off + n;
    if (UNLIKELY(end > c->data_cap) && !grow_data(rw, c, end)) {
        placeholder(rw, c);
        return;
    }
    if (n) memcpy(c->data + off, p, n);
    c->offsets[r + 1] = (int32_t)end;
    rw->data_bytes += (int64_t)n;
}

/* ---- shards, positions, flush ---- */

void ferry_rw_set_shard(struct ferry_row_writer *rw, int shard)
{
    if (shard == rw->shard) return;
    if (rw->in_row) {
        fail(rw, FERRY_EINVAL, "ferry_rw_set_shard() inside a row");
        return;
    }
    /* A batch holds the rows of one shard: its position belongs to that shard. */
    if (rw->row > 0 && close_batch(rw, false) != FERRY_OK) return;
    rw->shard = shard;
    rw->has_n = false;
    rw->k = 0;
    rw->position.has_key = false;
    rw->position.n_key = 0;
    ferry_buf_reset(&rw->tag);
}

void ferry_rw_set_offset(struct ferry_row_writer *rw, int64_t n)
{
    rw->has_n = true;
    rw->n = n;
}

void ferry_rw_set_suboffset(struct ferry_row_writer *rw, int64_t k)
{
    rw->k = k;
}

void ferry_rw_set_offset_tag(struct ferry_row_writer *rw, const char *tag, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tag[i] == '"' || tag[i] == '\\' || (unsigned char)tag[i] < 0x20) {
            fail(rw, FERRY_EINVAL, "an offset tag holds a quote, backslash or control character");
            return;
        }
    ferry_buf_reset(&rw->tag);
    if (n > 0 && ferry_buf_append(&rw->tag, tag, n) != FERRY_OK)
        fail(rw, FERRY_ENOMEM, "out of memory for an offset tag");
}

void ferry_rw_set_position_columns(struct ferry_row_writer *rw, int n, const int *cols)
{
    if (n < 0 || n > rw->ncols || (n > 0 && cols == NULL)) {
        fail(rw, FERRY_EINVAL, "%d position columns for a schema of %d columns", n, rw->ncols);
        return;
    }
    for (int k = 0; k < n; k++) {
        if (cols[k] < 0 || cols[k] >= rw->ncols) {
            fail(rw, FERRY_EINVAL, "position column index %d is not in 0..%d", cols[k],
                 rw->ncols - 1);
            return;
        }
    }
    if (n > 0) memcpy(rw->pos_cols, cols, sizeof *cols * (size_t)n);
    rw->n_pos = n;
}

int ferry_rw_flush(struct ferry_row_writer *rw, bool shard_done, struct ferry_error *err)
{
    if (rw->code != FERRY_OK) return report(rw, err);
    if (rw->in_row) {
        fail(rw, FERRY_EINVAL, "ferry_rw_flush() inside a row");
        return report(rw, err);
    }
    if ((rw->row > 0 || shard_done) && close_batch(rw, shard_done) != FERRY_OK)
        return report(rw, err);
    return FERRY_OK;
}

void ferry__rw_set_group(struct ferry_row_writer *rw, void (*enter)(void *ctx), void *ctx)
{
    rw->group_enter = enter;
    rw->group_ctx = ctx;
}

bool ferry_rw_grouped(const struct ferry_row_writer *rw)
{
    return rw->group_enter != NULL;
}

void ferry_rw_group_enter(struct ferry_row_writer *rw)
{
    if (rw->group_enter != NULL) rw->group_enter(rw->group_ctx);
}

int ferry_rw_close_group(struct ferry_row_writer *rw, struct ferry_error *err)
{
    if (rw->code != FERRY_OK) return report(rw, err);
    if (rw->in_row) {
        fail(rw, FERRY_EINVAL, "ferry_rw_close_group() inside a row");
        return report(rw, err);
    }
    rw->cut_next = true;
    if (close_batch(rw, false) != FERRY_OK) return report(rw, err);
    return FERRY_OK;
}

const struct ferry_schema *ferry_rw_schema(const struct ferry_row_writer *rw)
{
    return rw->schema;
}

int ferry_rw_stop_requested(const struct ferry_row_writer *rw)
{
    return rw->stop != NULL ? atomic_load_explicit(rw->stop, memory_order_relaxed) : 0;
}

/* ---- column-at-a-time appends (builder.h, ferry__rw_bulk_*) ----
 *
 * Rows [row, row + n) are written column by column into the same buffers the row appends
 * use, then committed by bulk_end as n ferry_rw_end() calls would. A column call that meets
 * a value the row path would refuse writes no accounting (validity, null counts, data
 * bytes) and returns false; bulk_cancel undoes the columns already written, and the caller
 * writes the rows again one at a time, so the error names the column and row as usual. */

int64_t ferry__rw_bulk_begin(struct ferry_row_writer *rw, int64_t want, const int64_t *row_var)
{
    if (rw->in_row || rw->code != FERRY_OK || want <= 0) return 0;
    int64_t n = rw->limits.rows - rw->row;
    if (n > want) n = want;
    /* the row whose bytes reach the limit closes the batch, as in ferry_rw_end() */
    int64_t left = rw->limits.bytes - approx_bytes(rw);
    int64_t k = 0;
    while (k < n && left > 0) {
        left -= rw->row_bytes + (row_var ? row_var[k] : 0);
        k++;
    }
    if (k == 0) k = 1;
    /* grown for the rows written only: a batch closed by bytes keeps its capacity */
    while (rw->row + k > rw->row_cap)
        if (!grow_rows(rw)) return 0;
    rw->cursor = 0;
    return k;
}

/* How many of isnull[0, n) are set; false when column c may hold none of them. */
static bool bulk_null_count(const struct bcol *c, const uint8_t *isnull, int64_t n, int64_t *cnt)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += isnull[i] != 0;
    *cnt = k;
    return k == 0 || c->nullable;
}

/* Clears the validity bits of the null rows (their values were stored as zeros). */
static bool bulk_nulls(struct ferry_row_writer *rw, struct bcol *c, const uint8_t *isnull,
                       int64_t n, int64_t cnt)
{
    if (cnt == 0) return true;
    if (c->validity == NULL && !alloc_validity(rw, c)) return false;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rw->row + i;
        if (isnull[i]) c->validity[r >> 3] &= (uint8_t) ~(1u << (r & 7));
    }
    if (c->null_count == 0) rw->n_validity++;
    c->null_count += cnt;
    return true;
}

/* The next column of the bulk write, when it has type class `want` (0 fixed, 1 var). */
static struct bcol *bulk_col(struct ferry_row_writer *rw, bool var)
{
    if (rw->cursor >= rw->ncols || rw->in_row) return NULL;
    struct bcol *c = &rw->cols[rw->cursor];
    return c->var == var ? c : NULL;
}

bool ferry__rw_bulk_int(struct ferry_row_writer *rw, const int64_t *v, const uint8_t *isnull,
                        int64_t n)
{
    struct bcol *c = bulk_col(rw, false);
    int64_t cnt;
    if (c == NULL || !bulk_null_count(c, isnull, n, &cnt)) return false;
    int64_t r = rw->row;
    bool ok = true;
    switch (c->type) {
    case FERRY_TYPE_INT8:
        for (int64_t i = 0; i < n; i++) {
            ok &= v[i] >= INT8_MIN && v[i] <= INT8_MAX;
            ((int8_t *)c->values)[r + i] = (int8_t)v[i];
        }
        break;
    case FERRY_TYPE_INT16:
        for (int64_t i = 0; i < n; i++) {
            ok &= v[i] >= INT16_MIN && v[i] <= INT16_MAX;
            ((int16_t *)c->values)[r + i] = (int16_t)v[i];
        }
        break;
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32:
        for (int64_t i = 0; i < n; i++) {
            ok &= v[i] >= INT32_MIN && v[i] <= INT32_MAX;
            ((int32_t *)c->values)[r + i] = (int32_t)v[i];
        }
        break;
    case FERRY_TYPE_TIME64_US:
        for (int64_t i = 0; i < n; i++)
            ok &= v[i] >= 0 && v[i] <= US_PER_DAY;
        /* fall through */
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        memcpy((int64_t *)c->values + r, v, (size_t)n * sizeof *v);
        break;
    default:
        return false;
    }
    if (!ok || !bulk_nulls(rw, c, isnull, n, cnt)) return false;
    rw->cursor++;
    return true;
}

bool ferry__rw_bulk_float(struct ferry_row_writer *rw, const double *v, const uint8_t *isnull,
                          int64_t n)
{
    struct bcol *c = bulk_col(rw, false);
    int64_t cnt;
    if (c == NULL || !bulk_null_count(c, isnull, n, &cnt)) return false;
    if (c->type == FERRY_TYPE_FLOAT64) {
        memcpy((double *)c->values + rw->row, v, (size_t)n * sizeof *v);
    } else if (c->type == FERRY_TYPE_FLOAT32) {
        bool ok = true;
        for (int64_t i = 0; i < n; i++) {
            ok &= !(isfinite(v[i]) && fabs(v[i]) > FLT_MAX);
            ((float *)c->values)[rw->row + i] = ok ? (float)v[i] : 0;
        }
        if (!ok) return false;
    } else {
        return false;
    }
    if (!bulk_nulls(rw, c, isnull, n, cnt)) return false;
    rw->cursor++;
    return true;
}

bool ferry__rw_bulk_bool(struct ferry_row_writer *rw, const int64_t *v, const uint8_t *isnull,
                         int64_t n)
{
    struct bcol *c = bulk_col(rw, false);
    int64_t cnt;
    if (c == NULL || c->type != FERRY_TYPE_BOOL || !bulk_null_count(c, isnull, n, &cnt))
        return false;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rw->row + i;
        uint8_t m = (uint8_t)(1u << (r & 7));
        if (v[i])
            c->values[r >> 3] |= m;
        else
            c->values[r >> 3] &= (uint8_t)~m;
    }
    if (!bulk_nulls(rw, c, isnull, n, cnt)) return false;
    rw->cursor++;
    return true;
}

/* Whether every one of n decimals (struct ferry_decimal128 each, 16 bytes at v) fits column
 * c's precision, as put_dec128 checks one (the NaN marker INT64_MAX:UINT64_MAX passes). No
 * branch per value: precision <= 19 (a bound below 2^64, the common case) compares 64-bit
 * halves only. */
static bool dec_block_fits(const struct bcol *c, const uint8_t *v, int64_t n)
{
    bool ok = true;
    if (c->dec_bound <= UINT64_MAX) {
        uint64_t b = (uint64_t)c->dec_bound;
        for (int64_t i = 0; i < n; i++) {
            uint64_t lo, hi;
            memcpy(&lo, v + i * 16, 8);
            memcpy(&hi, v + i * 16 + 8, 8);
            /* hi 0: lo < b; hi all ones: a negative -lo below b (lo 0 would be -2^64) */
            ok &= (hi == 0 && lo < b) | (hi == UINT64_MAX && (0 - lo) - 1 < b - 1) |
                  (hi == (uint64_t)INT64_MAX && lo == UINT64_MAX);
        }
        return ok;
    }
    for (int64_t i = 0; i < n; i++) {
        struct ferry_decimal128 d;
        memcpy(&d, v + i * 16, 16);
        u128 u = ((u128)(uint64_t)d.hi << 64) | d.lo;
        u128 mag = d.hi < 0 ? -u : u;
        ok &= (mag < c->dec_bound) | (d.hi == INT64_MAX && d.lo == UINT64_MAX);
    }
    return ok;
}

bool ferry__rw_bulk_fixed16(struct ferry_row_writer *rw, const uint8_t *v, const uint8_t *isnull,
                            int64_t n)
{
    struct bcol *c = bulk_col(rw, false);
    int64_t cnt;
    if (c == NULL || !bulk_null_count(c, isnull, n, &cnt)) return false;
    if (c->type == FERRY_TYPE_UUID) {
        memcpy(c->values + (size_t)rw->row * 16, v, (size_t)n * 16);
    } else if (c->type == FERRY_TYPE_DECIMAL128) {
        if (!dec_block_fits(c, v, n)) return false;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(c->values + (size_t)rw->row * 16, v, (size_t)n * 16); /* lo, hi: already LE */
#else
        for (int64_t i = 0; i < n; i++) {
            struct ferry_decimal128 d;
            memcpy(&d, v + i * 16, 16);
            uint8_t *p = c->values + (size_t)(rw->row + i) * 16;
            store_le64(p, d.lo);
            store_le64(p + 8, (uint64_t)d.hi);
        }
#endif
    } else {
        return false;
    }
    if (!bulk_nulls(rw, c, isnull, n, cnt)) return false;
    rw->cursor++;
    return true;
}

#define SPAN_HI (UINT64_C(1) << 63)

/* The bytes of n spans, one after another, into out: spans that follow each other in their
 * source (values of a PLAIN page do) are copied in one memcpy. */
static void copy_spans(uint8_t *out, const uint64_t *spans, const char *const bases[2], int64_t n)
{
    const char *run = NULL;
    size_t run_len = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t s = spans[i];
        size_t len = (size_t)((s & ~SPAN_HI) >> 32);
        if (len == 0) continue;
        const char *p = bases[s >> 63] + (s & UINT32_MAX);
        if (run_len > 0 && run + run_len == p) {
            run_len += len;
            continue;
        }
        if (run_len > 0) memcpy(out, run, run_len);
        out += run_len;
        run = p;
        run_len = len;
    }
    if (run_len > 0) memcpy(out, run, run_len);
}

bool ferry__rw_bulk_text(struct ferry_row_writer *rw, const uint64_t *spans,
                         const char *const bases[2], const uint8_t *isnull, int64_t n)
{
    struct bcol *c = bulk_col(rw, true);
    int64_t cnt;
    if (c == NULL || !bulk_null_count(c, isnull, n, &cnt)) return false;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len = (size_t)((spans[i] & ~SPAN_HI) >> 32);
        if (len > (size_t)rw->max_value) return false;
        total += len;
    }
    int64_t r = rw->row;
    size_t off = (size_t)c->offsets[r];
    if (off + total > c->data_cap && !grow_data(rw, c, off + total)) return false;
    for (int64_t i = 0; i < n; i++) {
        off += (size_t)((spans[i] & ~SPAN_HI) >> 32);
        c->offsets[r + i + 1] = (int32_t)off;
    }
    copy_spans(c->data + (size_t)c->offsets[r], spans, bases, n);
    if (!bulk_nulls(rw, c, isnull, n, cnt)) return false;
    rw->data_bytes += (int64_t)total;
    rw->cursor++;
    return true;
}

void ferry__rw_bulk_cancel(struct ferry_row_writer *rw, int64_t n)
{
    int64_t r0 = rw->row;
    for (int j = 0; j < rw->cursor && j < rw->ncols; j++) {
        struct bcol *c = &rw->cols[j];
        for (int64_t r = r0; c->validity != NULL && c->null_count > 0 && r < r0 + n; r++)
            if (!(c->validity[r >> 3] & (1u << (r & 7)))) {
                c->validity[r >> 3] |= (uint8_t)(1u << (r & 7));
                if (--c->null_count == 0) rw->n_validity--;
            }
        if (c->var) rw->data_bytes -= c->offsets[r0 + n] - c->offsets[r0];
    }
    rw->cursor = 0;
}

int ferry__rw_bulk_end(struct ferry_row_writer *rw, int64_t n, struct ferry_error *err)
{
    if (rw->code != FERRY_OK || rw->cursor != rw->ncols || rw->in_row) {
        int written = rw->cursor;
        ferry__rw_bulk_cancel(rw, n);
        if (rw->code == FERRY_OK)
            fail(rw, FERRY_EINVAL, "a bulk write of %d columns, schema has %d", written,
                 rw->ncols);
        return report(rw, err);
    }
    memset(rw->ops + rw->row, FERRY_OP_INSERT, (size_t)n);
    rw->cursor = 0;
    rw->row += n;
    rw->total_rows += n;
    if (rw->row >= rw->limits.rows || approx_bytes(rw) >= rw->limits.bytes ||
        (rw->tick != NULL && atomic_load_explicit(rw->tick, memory_order_relaxed))) {
        if (close_batch(rw, false) != FERRY_OK) return report(rw, err);
    }
    if (rw->stop != NULL) {
        int s = atomic_load_explicit(rw->stop, memory_order_relaxed);
        if (s != 0) return stopped(rw, s, err);
    }
    return FERRY_OK;
}
