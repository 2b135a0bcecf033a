/* tests/unit/testrows.h - deterministic rows of every ferry type, written through the real
 * row writer, for tests that need realistic batches (digest, Arrow export, benchmarks).
 *
 * Row r, column c has a value (and nullness) that depends only on (r, c), so two batches
 * built from the same row numbers hold the same rows however they were laid out. Column 0
 * is a non-nullable int64 "id"; columns 1..17 are one per type, nullable. */
#ifndef FERRY_TESTS_TESTROWS_H
#define FERRY_TESTS_TESTROWS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/batch.h"

#define TR_NCOLS 18

static const enum ferry_type tr_types[TR_NCOLS] = {
    FERRY_TYPE_INT64,        FERRY_TYPE_BOOL,         FERRY_TYPE_INT8,
    FERRY_TYPE_INT16,        FERRY_TYPE_INT32,        FERRY_TYPE_INT64,
    FERRY_TYPE_FLOAT32,      FERRY_TYPE_FLOAT64,      FERRY_TYPE_DECIMAL128,
    FERRY_TYPE_DECIMAL_TEXT, FERRY_TYPE_UTF8,         FERRY_TYPE_BINARY,
    FERRY_TYPE_DATE32,       FERRY_TYPE_TIME64_US,    FERRY_TYPE_TIMESTAMP_US,
    FERRY_TYPE_TIMESTAMPTZ_US, FERRY_TYPE_UUID,       FERRY_TYPE_JSON};

static const char *const tr_names[TR_NCOLS] = {
    "id", "flag", "tiny", "small", "medium", "big", "f32", "f64", "price", "exact",
    "name", "blob", "day", "clock", "at", "at \"utc\"", "uid", "doc"};

struct tr_cell {
    bool null;
    bool b;
    int64_t i;
    double f;
    uint8_t fixed[16]; /* decimal128 (little-endian) and uuid */
    char bytes[48];
    size_t len;
};

static inline enum ferry_op tr_op(int64_t r)
{
    return (enum ferry_op)((r * 7 + 3) % 3);
}

static inline void tr_cell(int64_t r, int c, struct tr_cell *out)
{
    memset(out, 0, sizeof *out);
    out->null = c > 0 && (r * 7 + c * 3) % 5 == 0;
    if (out->null) return;
    switch (tr_types[c]) {
    case FERRY_TYPE_BOOL: out->b = (r + c) % 3 == 0; break;
    case FERRY_TYPE_INT8: out->i = (r * 37) % 256 - 128; break;
    case FERRY_TYPE_INT16: out->i = (r * 1009) % 65536 - 32768; break;
    case FERRY_TYPE_INT32: out->i = r * 100003 - 500000000; break;
    case FERRY_TYPE_INT64: out->i = c == 0 ? r : r * 1000000000007LL - 7; break;
    case FERRY_TYPE_FLOAT32: out->f = (double)r / 4.0 - 3.0; break;
    case FERRY_TYPE_FLOAT64: out->f = (double)r * 1.5 - 0.25; break;
    case FERRY_TYPE_DECIMAL128: {
        int64_t v = (r % 2 ? -1 : 1) * (r * 12345 + 1);
        uint64_t lo = (uint64_t)v, hi = v < 0 ? UINT64_MAX : 0;
        for (int k = 0; k < 8; k++) {
            out->fixed[k] = (uint8_t)(lo >> (8 * k));
            out->fixed[8 + k] = (uint8_t)(hi >> (8 * k));
        }
        break;
    }
    case FERRY_TYPE_DECIMAL_TEXT:
        out->len = (size_t)snprintf(out->bytes, sizeof out->bytes, "%s%lld.%02lld",
                                    r % 3 ? "" : "-", (long long)r, (long long)(r % 100));
        break;
    case FERRY_TYPE_UTF8:
        out->len = r % 11 == 0 ? 0 : (size_t)snprintf(out->bytes, sizeof out->bytes,
                                                       "row-%lld-%.*s", (long long)r,
                                                       (int)(r % 5) * 2, "ééééé");
        break;
    case FERRY_TYPE_BINARY:
        out->len = (size_t)(r % 7);
        for (size_t k = 0; k < out->len; k++) out->bytes[k] = (char)((r + (int64_t)k * 51) & 0xff);
        break;
    case FERRY_TYPE_DATE32: out->i = 19000 + r; break;
    case FERRY_TYPE_TIME64_US: out->i = (r * 1000003) % 86400000000LL; break;
    case FERRY_TYPE_TIMESTAMP_US: out->i = 1700000000000000LL + r * 1000001; break;
    case FERRY_TYPE_TIMESTAMPTZ_US: out->i = 1600000000000000LL - r * 999; break;
    case FERRY_TYPE_UUID:
        for (int k = 0; k < 16; k++) out->fixed[k] = (uint8_t)(r * 16 + k);
        break;
    case FERRY_TYPE_JSON:
        out->len = (size_t)snprintf(out->bytes, sizeof out->bytes, "{\"r\":%lld}", (long long)r);
        break;
    default: break;
    }
}

static inline struct ferry_schema *tr_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    if (s == NULL) return NULL;
    for (int c = 0; c < TR_NCOLS; c++)
        if (ferry_schema_add_field(s, tr_names[c], tr_types[c], c > 0, NULL) != FERRY_OK) {
            ferry_schema_unref(s);
            return NULL;
        }
    s->fields[8].precision = 20;
    s->fields[8].scale = 3;
    s->fields[0].key_pos = 1;
    if (ferry_schema_finish(s, NULL) != FERRY_OK) {
        ferry_schema_unref(s);
        return NULL;
    }
    return s;
}

static inline void tr_write_row(struct ferry_row_writer *rw, int64_t r)
{
    ferry_rw_begin(rw, tr_op(r));
    for (int c = 0; c < TR_NCOLS; c++) {
        struct tr_cell v;
        tr_cell(r, c, &v);
        if (v.null) {
            ferry_rw_null(rw);
            continue;
        }
        switch (tr_types[c]) {
        case FERRY_TYPE_BOOL: ferry_rw_bool(rw, v.b); break;
        case FERRY_TYPE_FLOAT32:
        case FERRY_TYPE_FLOAT64: ferry_rw_float(rw, v.f); break;
        case FERRY_TYPE_DECIMAL128:
        case FERRY_TYPE_UUID: ferry_rw_fixed(rw, v.fixed, 16); break;
        case FERRY_TYPE_DECIMAL_TEXT:
        case FERRY_TYPE_UTF8:
        case FERRY_TYPE_BINARY:
        case FERRY_TYPE_JSON: ferry_rw_text(rw, v.bytes, v.len); break;
        default: ferry_rw_int(rw, v.i); break;
        }
    }
}

static inline int tr_take(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct ferry_batch **slot = ctx;
    if (*slot != NULL) ferry_batch_unref(*slot);
    *slot = b;
    return FERRY_OK;
}

/* One batch holding rows first..first+n-1, built by the row writer; NULL on failure. */
static inline struct ferry_batch *tr_batch(struct ferry_schema *s, int64_t first, int64_t n)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = n + 1, .bytes = INT64_MAX, .max_value_bytes = 0};
    struct ferry_row_writer *rw = ferry__rw_new(s, "test.rows", lim, tr_take, &out);
    if (rw == NULL) return NULL;
    struct ferry_error err;
    for (int64_t r = first; r < first + n; r++) {
        tr_write_row(rw, r);
        if (ferry_rw_end(rw, &err) != FERRY_OK) {
            fprintf(stderr, "tr_batch: row %lld: %s\n", (long long)r, err.message);
            ferry__rw_free(rw);
            ferry_batch_unref(out);
            return NULL;
        }
    }
    if (ferry_rw_flush(rw, n == 0, &err) != FERRY_OK) {
        fprintf(stderr, "tr_batch: flush: %s\n", err.message);
        ferry_batch_unref(out);
        out = NULL;
    }
    ferry__rw_free(rw);
    return out;
}

#endif
