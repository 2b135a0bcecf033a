/* batch/builder.c - the row writer: typed columnar builders a source appends rows into.
 *
 * Owns struct ferry_row_writer, the buffers of the batch being built, its position JSON
 * and its sticky error. Calls core (memory, buffers, errors), batch.c (ferry_batch_new),
 * text.c (position keys) and the emit callback it was given. Called by sources (through
 * the ferry_rw_* calls of ferry/batch.h, on the source thread) and by the pipeline
 * (ferry__rw_* of batch/builder.h); only the tick/stop signals cross threads.
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
 *   - A closed batch hands its buffers to the emitted batch; the next batch gets new
 *     buffers sized to the closed batch's final sizes, so identical batches grow nothing.
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
#include "ferry/core.h"

__extension__ typedef unsigned __int128 u128;

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define DEFAULT_ROWS 50000
#define DEFAULT_BYTES (INT64_C(4) << 20)
#define DEFAULT_MAX_VALUE (INT64_C(64) << 20)
#define DATA_MAX ((size_t)INT32_MAX)     /* int32 offsets address at most this much */
#define BUF_MAX ((size_t)1 << 31)        /* hard cap of any fixed-width buffer */
#define FIRST_ROWS 256                   /* rows of the first batch before it grows */
#define MIN_ROWS 64                      /* floor of a reused row capacity */
#define MIN_DATA 256                     /* floor of a reused data capacity */
#define US_PER_DAY INT64_C(86400000000)

struct bcol {
    enum ferry_type type;
    int width;     /* bytes per value: fixed width only */
    bool var;      /* offsets + data */
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
};

/* Buffers allocated for the next batch before the current one is handed over. */
struct next_bufs {
    uint8_t *validity, *values, *data;
    int32_t *offsets;
    size_t validity_cap, values_cap, offsets_cap, data_cap;
};

struct ferry_row_writer {
    /* hot: the row being written */
    struct bcol *cols;
    int cursor;      /* values appended to the current row */
    int write_cols;  /* ncols while a row is open and has room, else 0 */
    int64_t row;     /* complete rows in the batch being built */
    int64_t row_cap;
    uint8_t *ops;
    int64_t data_bytes;   /* var-width bytes in the batch */
    int64_t max_value;
    int ncols;
    bool in_row;
    int n_validity;       /* columns of this batch with at least one null */

    /* batch limits and size accounting */
    struct ferry_rw_limits limits;
    int64_t row_bytes;    /* fixed bytes per row: widths + 4 per offset + 1 op */
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
    int *pos_cols;
    int n_pos;
    struct ferry_buf pos;
    struct next_bufs *next;

    /* sticky error: the first one wins */
    int code;
    struct ferry_error error;
};

/* ---- errors (cold) ---- */

__attribute__((cold, format(printf, 3, 4))) static void fail(struct ferry_row_writer *rw,
                                                              int code, const char *fmt, ...)
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

__attribute__((cold)) static void reject_int(struct ferry_row_writer *rw, struct bcol *c,
                                             int64_t v)
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

