/* tests/unit/test_parquet_reader.c - the Parquet reader (formats/parquet_reader.c)
 * on files ferry's writer produces: every ferry type, nulls in every column, extremes,
 * dictionary pages on and off, each codec, several pages and row groups, an empty file;
 * then on hostile input: every truncation of a file and a flipped byte at every offset
 * must give a clean error (or rows), never a crash, leak or sanitizer report; and a
 * footer edited to claim a nested schema or an unknown codec is refused with the file
 * name and a byte offset in the message. */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "batch/builder.h"
#include "formats/parquet_reader.h"
#include "formats/parquet_writer.h"
#include "ferry/core.h"

enum {
    C_ID,
    C_FLAG,
    C_I8,
    C_I16,
    C_I32,
    C_I64,
    C_F32,
    C_F64,
    C_D9,
    C_D18,
    C_D38,
    C_DTXT,
    C_TXT,
    C_BIN,
    C_DAY,
    C_TIME,
    C_TS,
    C_TSZ,
    C_UUID,
    C_JSON,
    NCOLS
};

static const struct {
    const char *name;
    enum ferry_type type, back; /* written, read back */
    int precision, scale;
} cols[NCOLS] = {
    {"id", FERRY_TYPE_INT64, FERRY_TYPE_INT64, 0, 0},
    {"flag", FERRY_TYPE_BOOL, FERRY_TYPE_BOOL, 0, 0},
    {"i8", FERRY_TYPE_INT8, FERRY_TYPE_INT8, 0, 0},
    {"i16", FERRY_TYPE_INT16, FERRY_TYPE_INT16, 0, 0},
    {"i32", FERRY_TYPE_INT32, FERRY_TYPE_INT32, 0, 0},
    {"i64", FERRY_TYPE_INT64, FERRY_TYPE_INT64, 0, 0},
    {"f32", FERRY_TYPE_FLOAT32, FERRY_TYPE_FLOAT32, 0, 0},
    {"f64", FERRY_TYPE_FLOAT64, FERRY_TYPE_FLOAT64, 0, 0},
    {"d9", FERRY_TYPE_DECIMAL128, FERRY_TYPE_DECIMAL128, 9, 2},
    {"d18", FERRY_TYPE_DECIMAL128, FERRY_TYPE_DECIMAL128, 18, 4},
    {"d38", FERRY_TYPE_DECIMAL128, FERRY_TYPE_DECIMAL128, 38, 10},
    {"dtxt", FERRY_TYPE_DECIMAL_TEXT, FERRY_TYPE_UTF8, 0, 0}, /* written as STRING */
    {"t \"x\" é", FERRY_TYPE_UTF8, FERRY_TYPE_UTF8, 0, 0},
    {"bin", FERRY_TYPE_BINARY, FERRY_TYPE_BINARY, 0, 0},
    {"day", FERRY_TYPE_DATE32, FERRY_TYPE_DATE32, 0, 0},
    {"clock", FERRY_TYPE_TIME64_US, FERRY_TYPE_TIME64_US, 0, 0},
    {"ts", FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_TIMESTAMP_US, 0, 0},
    {"tsz", FERRY_TYPE_TIMESTAMPTZ_US, FERRY_TYPE_TIMESTAMPTZ_US, 0, 0},
    {"uid", FERRY_TYPE_UUID, FERRY_TYPE_UUID, 0, 0},
    {"doc", FERRY_TYPE_JSON, FERRY_TYPE_JSON, 0, 0},
};

struct cell {
    bool null;
    int64_t i;
    double f;
    struct ferry_decimal128 d;
    uint8_t fixed[16];
    char bytes[64];
    size_t len;
};

/* Row r, column c: extremes in the first rows, repeats (dictionaries) below row 2000,
 * distinct values above, a null in every column but id every 4 rows at a shifting row. */
static void cell_of(int64_t r, int c, struct cell *o)
{
    memset(o, 0, sizeof *o);
    o->null = c > 0 && r >= 4 && (r + c) % 4 == 0;
    if (o->null) return;
    /* repeats early (dictionaries), then distinct, then (test_windows' rows) in range again */
    int64_t v = r < 2000 ? r % 37 : r < 30000 ? r : 2000 + r % 28000;
    int64_t sign = r % 2 ? -1 : 1;
    switch (c) {
    case C_ID:
        o->i = r;
        break;
    case C_FLAG:
        o->i = r % 3 == 0;
        break;
    case C_I8:
        o->i = r == 1 ? INT8_MIN : r == 2 ? INT8_MAX : v % 100 * sign;
        break;
    case C_I16:
        o->i = r == 1 ? INT16_MIN : r == 2 ? INT16_MAX : v * sign;
        break;
    case C_I32:
        o->i = r == 1 ? INT32_MIN : r == 2 ? INT32_MAX : v * 1000 * sign;
        break;
    case C_I64:
        o->i = r == 1 ? INT64_MIN : r == 2 ? INT64_MAX : v * 1000000007 * sign;
        break;
    case C_F32:
        o->f = r == 1 ? -INFINITY : r == 3 ? -0.0 : (double)v / 4 * (double)sign;
        break;
    case C_F64:
        o->f = r == 1 ? NAN : r == 2 ? 1.7976931348623157e308 : (double)v * 1.1 * (double)sign;
        break;
    case C_D9:
    case C_D18: {
        int64_t x = c == C_D9 ? (r == 1 ? -999999999 : v * 101 * sign)
                              : (r == 1 ? 999999999999999999 : v * 1000003 * sign);
        o->d.lo = (uint64_t)x;
        o->d.hi = x < 0 ? -1 : 0;
        break;
    }
    case C_D38:
        o->d.lo = (uint64_t)(v * 977 * sign);
        o->d.hi = r == 2 ? INT64_MAX / 4 : sign < 0 ? -1 : 0;
        break;
    case C_DTXT:
        o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "%lld.%02d", (long long)(v * sign),
                                  (int)(r % 100));
        break;
    case C_TXT:
        o->len = r == 0 ? 0 : (size_t)snprintf(o->bytes, sizeof o->bytes, "v%lld-é😀", (long long)v);
        break;
    case C_BIN:
        o->len = (size_t)(r % 9);
        for (size_t k = 0; k < o->len; k++)
            o->bytes[k] = (char)((v + (int64_t)k * 77) & 0xff);
        break;
    case C_DAY:
        o->i = r == 1 ? -719162 : r == 2 ? 2932896 : 19000 + v * sign;
        break;
    case C_TIME:
        o->i = r == 2 ? 86399999999LL : v * 1000001;
        break;
    case C_TS:
        o->i = r == 1 ? -62135596800000000LL : v * 86400000001LL * sign;
        break;
    case C_TSZ:
        o->i = 1600000000000000LL + v * 999999937LL * sign;
        break;
    case C_UUID:
        for (int k = 0; k < 16; k++)
            o->fixed[k] = (uint8_t)(r == 2 ? 0xff : v * 16 + k);
        break;
    case C_JSON:
        o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "{\"r\":%lld}", (long long)v);
        break;
    }
}

static struct ferry_schema *make_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    for (int c = 0; c < NCOLS; c++) {
        assert_int_equal(ferry_schema_add_field(s, cols[c].name, cols[c].type, c > 0, NULL),
                         FERRY_OK);
        if (cols[c].precision) {
            s->fields[c].precision = cols[c].precision;
            s->fields[c].scale = cols[c].scale;
        }
    }
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

/* Collected batches of one read. */
struct got {
    struct ferry_batch **b;
    int n;
};

static int collect(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct got *g = ctx;
    struct ferry_batch **nb = ferry_realloc(g->b, (size_t)(g->n + 1) * sizeof *nb);
    assert_non_null(nb);
    g->b = nb;
    g->b[g->n++] = b;
    return FERRY_OK;
}

static void got_free(struct got *g)
{
    for (int i = 0; i < g->n; i++)
        ferry_batch_unref(g->b[i]);
    ferry_free(g->b);
    memset(g, 0, sizeof *g);
}

static void write_rows(struct ferry_row_writer *rw, int64_t first, int64_t n)
{
    for (int64_t r = first; r < first + n; r++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int c = 0; c < NCOLS; c++) {
            struct cell v;
            cell_of(r, c, &v);
            if (v.null) {
                ferry_rw_null(rw);
                continue;
            }
            switch (cols[c].type) {
            case FERRY_TYPE_BOOL:
                ferry_rw_bool(rw, v.i != 0);
                break;
            case FERRY_TYPE_FLOAT32:
            case FERRY_TYPE_FLOAT64:
                ferry_rw_float(rw, v.f);
                break;
            case FERRY_TYPE_DECIMAL128:
                ferry_rw_dec128(rw, v.d);
                break;
            case FERRY_TYPE_UUID:
                ferry_rw_fixed(rw, v.fixed, 16);
                break;
            case FERRY_TYPE_DECIMAL_TEXT:
            case FERRY_TYPE_UTF8:
            case FERRY_TYPE_BINARY:
            case FERRY_TYPE_JSON:
                ferry_rw_text(rw, v.bytes, v.len);
                break;
            default:
                ferry_rw_int(rw, v.i);
                break;
            }
        }
        struct ferry_error err = {0};
        if (ferry_rw_end(rw, &err) != FERRY_OK) fail_msg("row %lld: %s", (long long)r, err.message);
    }
}

static int to_buf(void *ctx, const void *p, size_t n)
{
    return ferry_buf_append(ctx, p, n);
}

/* A file of n rows, written in batches of `step` rows, into out. */
static void make_file(struct ferry_buf *out, const struct ferry_parquet_options *o, int64_t n,
                      int64_t step)
{
    struct ferry_schema *s = make_schema();
    struct ferry_parquet_writer *w = NULL;
    struct ferry_error err = {0};
    ferry_buf_init(out, 0);
    assert_int_equal(ferry__parquet_open(s, o, to_buf, out, &w, &err), FERRY_OK);
    struct got g = {0};
    struct ferry_rw_limits lim = {.rows = step, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect, &g);
    assert_non_null(rw);
    write_rows(rw, 0, n);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    for (int i = 0; i < g.n; i++)
        if (ferry__parquet_write_batch(w, g.b[i], &err) != FERRY_OK) fail_msg("%s", err.message);
    if (ferry__parquet_close(w, NULL, &err) != FERRY_OK) fail_msg("%s", err.message);
    ferry__parquet_free(w);
    got_free(&g);
    ferry_schema_unref(s);
}

/* Reads a buffer; returns the reader's code, batches in g. */
static int read_buf(const struct ferry_buf *f, struct got *g, struct ferry_error *err)
{
    struct ferry_parquet_reader *r = NULL;
    int rc =
        ferry__parquet_reader_open_mem((const uint8_t *)f->data, f->len, "mem.parquet", &r, err);
    if (rc != FERRY_OK) {
        assert_null(r);
        return rc;
    }
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_schema *s =
        ferry_schema_ref((struct ferry_schema *)ferry__parquet_reader_schema(r));
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect, g);
    assert_non_null(rw);
    rc = ferry__parquet_reader_read(r, rw, err);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    return rc;
}

static void check_rows(const struct got *g, int64_t n)
{
    int64_t r = 0;
    for (int bi = 0; bi < g->n; bi++) {
        const struct ferry_batch *b = g->b[bi];
        if (r == 0) {
            assert_int_equal(b->schema->n_fields, NCOLS);
            for (int c = 0; c < NCOLS; c++) {
                assert_string_equal(b->schema->fields[c].name, cols[c].name);
                assert_int_equal(b->schema->fields[c].type, cols[c].back);
                assert_int_equal(b->schema->fields[c].nullable, c > 0);
                if (cols[c].precision) {
                    assert_int_equal(b->schema->fields[c].precision, cols[c].precision);
                    assert_int_equal(b->schema->fields[c].scale, cols[c].scale);
                }
            }
        }
        for (int64_t i = 0; i < b->length; i++, r++) {
            for (int c = 0; c < NCOLS; c++) {
                struct cell v;
                cell_of(r, c, &v);
                if (v.null != ferry_col_is_null(b, c, i))
                    fail_msg("row %lld column %s: null %d, read %d", (long long)r, cols[c].name,
                             v.null, !v.null);
                if (v.null) continue;
                switch (cols[c].type) {
                case FERRY_TYPE_BOOL:
                    assert_int_equal(ferry_col_bool(b, c, i), v.i != 0);
                    break;
                case FERRY_TYPE_FLOAT32:
                case FERRY_TYPE_FLOAT64: {
                    double f = ferry_col_float(b, c, i);
                    double want = cols[c].type == FERRY_TYPE_FLOAT32 ? (double)(float)v.f : v.f;
                    if (isnan(want) ? !isnan(f) : (f != want || signbit(f) != signbit(want)))
                        fail_msg("row %lld %s: %g, want %g", (long long)r, cols[c].name, f, want);
                    break;
                }
                case FERRY_TYPE_DECIMAL128: {
                    struct ferry_decimal128 d = ferry_col_dec128(b, c, i);
                    if (d.lo != v.d.lo || d.hi != v.d.hi)
                        fail_msg("row %lld %s: decimal differs", (long long)r, cols[c].name);
                    break;
                }
                case FERRY_TYPE_UUID:
                    assert_memory_equal(ferry_col_fixed(b, c, i), v.fixed, 16);
                    break;
                case FERRY_TYPE_DECIMAL_TEXT:
                case FERRY_TYPE_UTF8:
                case FERRY_TYPE_BINARY:
                case FERRY_TYPE_JSON: {
                    size_t len;
                    const uint8_t *p = ferry_col_bytes(b, c, i, &len);
                    if (len != v.len || (len && memcmp(p, v.bytes, len)))
                        fail_msg("row %lld %s: bytes differ", (long long)r, cols[c].name);
                    break;
                }
                default:
                    if (ferry_col_int(b, c, i) != v.i)
                        fail_msg("row %lld %s: %lld, want %lld", (long long)r, cols[c].name,
                                 (long long)ferry_col_int(b, c, i), (long long)v.i);
                }
            }
        }
    }
    assert_int_equal(r, n);
}

static void round_trip(const struct ferry_parquet_options *o, int64_t n, int64_t step)
{
    struct ferry_buf f;
    make_file(&f, o, n, step);
    struct got g = {0};
    struct ferry_error err = {0};
    if (read_buf(&f, &g, &err) != FERRY_OK) fail_msg("%s", err.message);
    check_rows(&g, n);
    got_free(&g);
    ferry_buf_release(&f);
}

static void test_round_trip_every_codec(void **state)
{
    (void)state;
    static const enum ferry_parquet_codec codecs[] = {FERRY_PARQUET_NONE, FERRY_PARQUET_SNAPPY,
                                                      FERRY_PARQUET_GZIP, FERRY_PARQUET_ZSTD};
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
        for (int dict = 0; dict < 2; dict++) {
            struct ferry_parquet_options o;
            ferry__parquet_options_default(&o);
            o.codec = codecs[i];
            o.dictionary = dict;
            o.page_bytes = 4096;       /* many pages */
            o.row_group_bytes = 65536; /* several row groups */
            round_trip(&o, 6000, 1500);
        }
    }
}

static void test_defaults_and_empty(void **state)
{
    (void)state;
    round_trip(NULL, 3000, 3000);
    round_trip(NULL, 0, 1);
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    o.dictionary_bytes = 512; /* dictionaries overflow: dictionary then PLAIN pages */
    o.page_bytes = 2048;
    round_trip(&o, 4000, 700);
}

/* A row group larger than the reader's window (65536 rows): decoded page by page in windows,
 * the rows past a window (the rest of a page, var-width bytes included) carried into the
 * next; every value compared. Pages of 4 KiB never end on a window edge. */
static void test_windows(void **state)
{
    (void)state;
    for (int dict = 0; dict < 2; dict++) {
        struct ferry_parquet_options o;
        ferry__parquet_options_default(&o);
        o.dictionary = dict;
        o.page_bytes = 4096;
        o.codec = dict ? FERRY_PARQUET_ZSTD : FERRY_PARQUET_SNAPPY;
        struct ferry_buf f;
        make_file(&f, &o, 70001, 10000);
        struct ferry_parquet_reader *r = NULL;
        struct ferry_error err = {0};
        assert_int_equal(ferry__parquet_reader_open_mem((const uint8_t *)f.data, f.len, "w.parquet",
                                                        &r, &err),
                         FERRY_OK);
        assert_int_equal(ferry__parquet_reader_num_groups(r), 1); /* one group, two windows */
        ferry__parquet_reader_free(r);
        struct got g = {0};
        if (read_buf(&f, &g, &err) != FERRY_OK) fail_msg("%s", err.message);
        check_rows(&g, 70001);
        got_free(&g);
        ferry_buf_release(&f);
    }
}

/* A value the row writer refuses (the file's INT16 column read into an int8 column): the
 * column-at-a-time write hands the chunk back and the row path names file, row and column;
 * nothing of the refused chunk reaches a batch. */
static void test_refused_value(void **state)
{
    (void)state;
    struct ferry_buf f;
    make_file(&f, NULL, 3000, 3000);
    struct ferry_parquet_reader *r = NULL;
    struct ferry_error err = {0};
    assert_int_equal(
        ferry__parquet_reader_open_mem((const uint8_t *)f.data, f.len, "n.parquet", &r, &err),
        FERRY_OK);
    const char *const names[] = {"id", "i16"};
    assert_int_equal(ferry__parquet_reader_select(r, names, 2, &err), FERRY_OK);
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "i16", FERRY_TYPE_INT8, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct got g = {0};
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect, &g);
    assert_non_null(rw);
    assert_int_equal(ferry__parquet_reader_read(r, rw, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "parquet: n.parquet: row group 0 row 1"));
    assert_non_null(strstr(err.message, "column i16 (int8): value -32768 is out of range (row 2)"));
    assert_int_equal(g.n, 0);
    ferry__rw_free(rw);
    got_free(&g);
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    ferry_buf_release(&f);
}

static int hostile(const struct ferry_buf *f)
{
    struct got g = {0};
    struct ferry_error err = {0};
    int rc = read_buf(f, &g, &err);
    got_free(&g);
    if (rc == FERRY_EINVAL && strstr(err.message, "mem.parquet") == NULL)
        fail_msg("error without the file name: %s", err.message);
    if (rc != FERRY_OK && rc != FERRY_EINVAL && rc != FERRY_EUNSUPPORTED)
        fail_msg("rc %d: %s", rc, err.message);
    return rc;
}

static void test_truncated_and_garbage(void **state)
{
    (void)state;
    static const enum ferry_parquet_codec codecs[] = {FERRY_PARQUET_NONE, FERRY_PARQUET_SNAPPY,
                                                      FERRY_PARQUET_GZIP, FERRY_PARQUET_ZSTD};
    for (size_t ci = 0; ci < 4; ci++) {
        struct ferry_parquet_options o;
        ferry__parquet_options_default(&o);
        o.codec = codecs[ci];
        o.page_bytes = 1024;
        struct ferry_buf f;
        make_file(&f, &o, 120, 50);
        struct ferry_buf t;
        ferry_buf_init(&t, 0);
        /* every truncation: the footer is gone or cut, always an error */
        for (size_t n = 0; n < f.len; n += ci == 0 ? 1 : 7) {
            ferry_buf_reset(&t);
            assert_int_equal(ferry_buf_append(&t, f.data, n), FERRY_OK);
            assert_int_not_equal(hostile(&t), FERRY_OK);
        }
        /* a changed byte at every offset (one of three patterns, rotating by offset and
         * codec): error or rows, nothing else */
        int errors = 0;
        for (size_t k = 0; k < f.len; k++) {
            for (int pat = (int)((k + ci) % 3); pat == (int)((k + ci) % 3); pat = 3) {
                ferry_buf_reset(&t);
                assert_int_equal(ferry_buf_append(&t, f.data, f.len), FERRY_OK);
                t.data[k] = (char)(pat == 0 ? t.data[k] ^ 0xff : pat == 1 ? 0x7f : 0x00);
                errors += hostile(&t) != FERRY_OK;
            }
        }
        assert_true(errors > 0);
        ferry_buf_release(&t);
        ferry_buf_release(&f);
    }
    /* garbage with the magic at both ends */
    struct ferry_buf g;
    ferry_buf_init(&g, 0);
    uint32_t x = 12345;
    assert_int_equal(ferry_buf_append(&g, "PAR1", 4), FERRY_OK);
    for (int i = 0; i < 4000; i++) {
        x = x * 1103515245u + 12345u;
        char c = (char)(x >> 16);
        assert_int_equal(ferry_buf_append(&g, &c, 1), FERRY_OK);
    }
    uint8_t tail[8] = {200, 0, 0, 0, 'P', 'A', 'R', '1'};
    assert_int_equal(ferry_buf_append(&g, tail, 8), FERRY_OK);
    assert_int_equal(hostile(&g), FERRY_EINVAL);
    ferry_buf_release(&g);
}

static void test_errors_name_file_and_offset(void **state)
{
    (void)state;
    struct ferry_buf f;
    ferry_buf_init(&f, 0);
    assert_int_equal(ferry_buf_append(&f, "PAR1xxxxPAR1", 12), FERRY_OK);
    struct ferry_parquet_reader *r = NULL;
    struct ferry_error err = {0};
    assert_int_equal(
        ferry__parquet_reader_open_mem((const uint8_t *)f.data, f.len, "d/x.parquet", &r, &err),
        FERRY_EINVAL);
    assert_null(r);
    assert_non_null(strstr(err.message, "d/x.parquet"));
    assert_non_null(strstr(err.message, "at byte"));
    ferry_buf_release(&f);
    assert_int_equal(ferry__parquet_reader_open_file("/nonexistent/x.parquet", &r, &err),
                     FERRY_EIO);
    assert_non_null(strstr(err.message, "/nonexistent/x.parquet"));
    ferry__parquet_reader_free(NULL);
}

/* Files written by DuckDB (tests/tools, @duckdb/node-api): another writer's choices of
 * page versions, encodings and statistics. Values are computed from the row number. */
/* An object read by ranges: counts what was asked for. */
struct ranged {
    const struct ferry_buf *f;
    int64_t bytes, calls;
};

static int ranged_read(void *ctx, uint64_t off, size_t n, void *p, struct ferry_error *err)
{
    struct ranged *o = ctx;
    if (off > o->f->len || n > o->f->len - off)
        return ferry_error_set(err, FERRY_EIO, "test", "range %llu+%zu past the object",
                               (unsigned long long)off, n);
    memcpy(p, o->f->data + off, n);
    o->bytes += (int64_t)n;
    o->calls++;
    return FERRY_OK;
}

/* open_ranged + select + read_group: only the selected columns' chunks are fetched (far
 * fewer bytes than the file), groups read one by one with a skip, values in place. */
static void test_ranged_selected_groups(void **state)
{
    (void)state;
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    o.row_group_bytes = 65536;
    struct ferry_buf f;
    make_file(&f, &o, 6000, 1500);
    struct ranged obj = {&f, 0, 0};
    struct ferry_parquet_reader *r = NULL;
    struct ferry_error err = {0};
    assert_int_equal(
        ferry__parquet_reader_open_ranged(f.len, ranged_read, &obj, "obj.parquet", &r, &err),
        FERRY_OK);
    assert_int_equal(obj.calls, 1); /* the last 64 KiB holding the footer, nothing more */
    int64_t open_bytes = obj.bytes;
    int ng = ferry__parquet_reader_num_groups(r);
    assert_true(ng >= 2);
    const char *names[] = {cols[C_TXT].name, cols[C_ID].name};
    assert_int_equal(ferry__parquet_reader_select(r, names, 2, &err), FERRY_OK);
    const char *missing[] = {"nope"};
    assert_int_equal(ferry__parquet_reader_select(r, missing, 1, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "nope"));
    assert_int_equal(ferry__parquet_reader_select(r, names, 2, &err), FERRY_OK);
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, names[0], FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, names[1], FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct got g = {0};
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect, &g);
    int64_t want_rows = 0;
    for (int k = 0; k < ng; k++) {
        int64_t skip = k == 1 ? 10 : 0;
        assert_int_equal(ferry__parquet_reader_read_group(r, k, skip, rw, &err), FERRY_OK);
        want_rows += ferry__parquet_reader_group_rows(r, k) - skip;
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_not_equal(ferry__parquet_reader_read_group(r, ng, 0, rw, &err), FERRY_OK);
    /* ids in order, group 1's first 10 rows skipped */
    int64_t got_rows = 0, g0 = ferry__parquet_reader_group_rows(r, 0);
    for (int bi = 0; bi < g.n; bi++)
        for (int64_t i = 0; i < g.b[bi]->length; i++, got_rows++) {
            int64_t id = ferry_col_int(g.b[bi], 1, i);
            int64_t want = got_rows < g0 ? got_rows : got_rows + 10;
            if (id != want)
                fail_msg("row %lld: id %lld, want %lld", (long long)got_rows, (long long)id,
                         (long long)want);
            struct cell v;
            cell_of(id, C_TXT, &v);
            assert_int_equal(ferry_col_is_null(g.b[bi], 0, i), v.null);
        }
    assert_int_equal(got_rows, want_rows);
    /* two of NCOLS columns: far less than the file was fetched */
    assert_true(obj.bytes - open_bytes < (int64_t)f.len / 3);
    /* at most one request per selected chunk (one per group when they lie close together) */
    assert_true(obj.calls - 1 <= 2 * (ng + 1));
    ferry__rw_free(rw);
    got_free(&g);
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    /* one column: each group costs exactly one request */
    struct ranged one = {&f, 0, 0};
    assert_int_equal(
        ferry__parquet_reader_open_ranged(f.len, ranged_read, &one, "obj.parquet", &r, &err),
        FERRY_OK);
    assert_int_equal(ferry__parquet_reader_select(r, &names[1], 1, &err), FERRY_OK);
    s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, names[1], FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct got g1 = {0};
    rw = ferry__rw_new(s, "t", lim, collect, &g1);
    for (int k = 0; k < ng; k++)
        assert_int_equal(ferry__parquet_reader_read_group(r, k, 0, rw, &err), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(one.calls, 1 + ng);
    ferry__rw_free(rw);
    got_free(&g1);
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    ferry_buf_release(&f);
    /* an object within the one tail read: its leading magic is checked from those bytes */
    make_file(&f, &o, 50, 50);
    assert_true(f.len < 65536);
    f.data[1] = 'X';
    struct ranged small = {&f, 0, 0};
    assert_int_not_equal(
        ferry__parquet_reader_open_ranged(f.len, ranged_read, &small, "s.parquet", &r, &err),
        FERRY_OK);
    assert_non_null(strstr(err.message, "no PAR1 magic at its start"));
    assert_int_equal(small.calls, 1);
    ferry_buf_release(&f);
}

static void test_duckdb_files(void **state)
{
    (void)state;
    const char *src = getenv("FERRY_SRC");
    char root[1024];
    snprintf(root, sizeof root, "%s", src ? src : __FILE__);
    char *cut = src ? NULL : strstr(root, "/tests/unit/test_parquet_reader.c");
    if (cut) *cut = '\0';
    static const char *const versions[] = {"V1", "V2"};
    for (int vi = 0; vi < 2; vi++) {
        char path[512], cmd[4096];
        snprintf(path, sizeof path, "/tmp/ferry-test-duck-%d-%s.parquet", (int)getpid(),
                 versions[vi]);
        snprintf(
            cmd, sizeof cmd,
            "node '%s/tests/tools/duckdb_exec.mjs' \"COPY (SELECT i::BIGINT AS id, "
            "(i %% 3 = 0) AS b, CASE WHEN i %% 5 = 0 THEN NULL ELSE 'v' || (i %% 17) END AS s, "
            "(i * 1.5)::DOUBLE AS f, ((i %% 100) * 0.25)::DECIMAL(9,2) AS d, "
            "DATE '2024-01-01' + (i %% 30)::INT AS dt, "
            "TIMESTAMP '2024-01-01' + to_seconds(i::BIGINT) AS ts, i::INTEGER AS n "
            "FROM range(0, 5000) t(i)) TO '%s' (FORMAT parquet, PARQUET_VERSION %s, "
            "COMPRESSION %s, ROW_GROUP_SIZE 2048)\" > /dev/null",
            root, path, versions[vi], vi ? "snappy" : "zstd");
        if (system(cmd) != 0) fail_msg("DuckDB did not write %s: %s", path, cmd);
        struct ferry_parquet_reader *r = NULL;
        struct ferry_error err = {0};
        if (ferry__parquet_reader_open_file(path, &r, &err) != FERRY_OK)
            fail_msg("%s", err.message);
        const struct ferry_schema *sc = ferry__parquet_reader_schema(r);
        static const enum ferry_type want[] = {
            FERRY_TYPE_INT64,      FERRY_TYPE_BOOL,   FERRY_TYPE_UTF8,         FERRY_TYPE_FLOAT64,
            FERRY_TYPE_DECIMAL128, FERRY_TYPE_DATE32, FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_INT32};
        assert_int_equal(sc->n_fields, 8);
        for (int c = 0; c < 8; c++)
            assert_int_equal(sc->fields[c].type, want[c]);
        assert_int_equal(sc->fields[4].precision, 9);
        assert_int_equal(sc->fields[4].scale, 2);
        struct got g = {0};
        struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
        struct ferry_schema *rs = ferry_schema_ref((struct ferry_schema *)sc);
        struct ferry_row_writer *rw = ferry__rw_new(rs, "t", lim, collect, &g);
        int rc = ferry__parquet_reader_read(r, rw, &err);
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, &err);
        ferry__rw_free(rw);
        ferry_schema_unref(rs);
        ferry__parquet_reader_free(r);
        /* the other writer's encodings (delta, byte stream split, v2 pages) hostile too */
        struct ferry_buf f, t;
        ferry_buf_init(&f, 0);
        ferry_buf_init(&t, 0);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        char chunk[4096];
        size_t nr;
        while ((nr = fread(chunk, 1, sizeof chunk, fp)) > 0)
            assert_int_equal(ferry_buf_append(&f, chunk, nr), FERRY_OK);
        fclose(fp);
        for (size_t k = 0; vi == 1 && k < f.len; k += 3) {
            ferry_buf_reset(&t);
            assert_int_equal(ferry_buf_append(&t, f.data, f.len), FERRY_OK);
            t.data[k] = (char)(k % 4 ? t.data[k] ^ 0x5a : 0xff);
            hostile(&t);
        }
        ferry_buf_release(&f);
        ferry_buf_release(&t);
        unlink(path);
        if (rc != FERRY_OK) fail_msg("DuckDB %s file: %s", versions[vi], err.message);
        int64_t i = 0;
        for (int bi = 0; bi < g.n; bi++) {
            const struct ferry_batch *b = g.b[bi];
            for (int64_t k = 0; k < b->length; k++, i++) {
                assert_int_equal(ferry_col_int(b, 0, k), i);
                assert_int_equal(ferry_col_bool(b, 1, k), i % 3 == 0);
                assert_int_equal(ferry_col_is_null(b, 2, k), i % 5 == 0);
                if (i % 5) {
                    char txt[16];
                    size_t len;
                    int n = snprintf(txt, sizeof txt, "v%lld", (long long)(i % 17));
                    const uint8_t *p = ferry_col_bytes(b, 2, k, &len);
                    assert_int_equal(len, (size_t)n);
                    assert_memory_equal(p, txt, len);
                }
                assert_true(ferry_col_float(b, 3, k) == (double)i * 1.5);
                assert_int_equal(ferry_col_dec128(b, 4, k).lo, (uint64_t)(i % 100 * 25));
                assert_int_equal(ferry_col_int(b, 5, k), 19723 + i % 30);
                assert_int_equal(ferry_col_int(b, 6, k), INT64_C(1704067200000000) + i * 1000000);
                assert_int_equal(ferry_col_int(b, 7, k), i);
            }
        }
        assert_int_equal(i, 5000);
        got_free(&g);
    }
}

/* A fixture of tests/fixtures/parquet-testing into f. */
static void read_fixture(const char *name, struct ferry_buf *f)
{
    const char *src = getenv("FERRY_SRC");
    char root[1024], path[1400];
    snprintf(root, sizeof root, "%s", src ? src : __FILE__);
    char *cut = src ? NULL : strstr(root, "/tests/unit/test_parquet_reader.c");
    if (cut) *cut = '\0';
    snprintf(path, sizeof path, "%s/tests/fixtures/parquet-testing/%s", root, name);
    ferry_buf_init(f, 0);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) fail_msg("cannot open %s", path);
    char chunk[4096];
    size_t nr;
    while ((nr = fread(chunk, 1, sizeof chunk, fp)) > 0)
        assert_int_equal(ferry_buf_append(f, chunk, nr), FERRY_OK);
    fclose(fp);
}

/* Column c of every collected row as text ("NULL" for null), one per line. */
static void column_text(const struct got *g, int c, struct ferry_buf *out)
{
    ferry_buf_init(out, 0);
    for (int bi = 0; bi < g->n; bi++)
        for (int64_t k = 0; k < g->b[bi]->length; k++) {
            size_t len = 4;
            const uint8_t *p = (const uint8_t *)"NULL";
            if (!ferry_col_is_null(g->b[bi], c, k)) p = ferry_col_bytes(g->b[bi], c, k, &len);
            assert_int_equal(ferry_buf_append(out, p, len), FERRY_OK);
            assert_int_equal(ferry_buf_append(out, "\n", 1), FERRY_OK);
        }
}

/* Nested fields as JSON (the e2e test parquet_nested compares whole files with DuckDB):
 * the exact text of the mapping, a resumed group (skip) giving the same tail, and a changed
 * byte at every offset of nested files from three writers: error or rows, never a crash. */
static void test_nested_json(void **state)
{
    (void)state;
    static const char *const want =
        "[[[\"a\",\"b\"],[\"c\"]],[null,[\"d\"]]]\n"
        "[[[\"a\",\"b\"],[\"c\",\"d\"]],[null,[\"e\"]]]\n"
        "[[[\"a\",\"b\"],[\"c\",\"d\"],[\"e\"]],[null,[\"f\"]]]\n";
    struct ferry_buf f, txt;
    read_fixture("nested_lists.snappy.parquet", &f);
    struct got g = {0};
    struct ferry_error err = {0};
    assert_int_equal(read_buf(&f, &g, &err), FERRY_OK);
    column_text(&g, 0, &txt);
    assert_int_equal(txt.len, strlen(want));
    assert_memory_equal(txt.data, want, txt.len);
    ferry_buf_release(&txt);
    got_free(&g);
    /* resumed after the first row: the cursors skip it, the rest is the same text */
    struct ferry_parquet_reader *r = NULL;
    assert_int_equal(ferry__parquet_reader_open_mem((const uint8_t *)f.data, f.len, "n.parquet",
                                                    &r, &err),
                     FERRY_OK);
    assert_int_equal(ferry__parquet_reader_schema(r)->fields[0].type, FERRY_TYPE_JSON);
    struct ferry_schema *s = ferry_schema_ref((struct ferry_schema *)ferry__parquet_reader_schema(r));
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect, &g);
    assert_int_equal(ferry__parquet_reader_read_group(r, 0, 1, rw, &err), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    column_text(&g, 0, &txt);
    const char *tail = strchr(want, '\n') + 1;
    assert_int_equal(txt.len, strlen(tail));
    assert_memory_equal(txt.data, tail, txt.len);
    ferry_buf_release(&txt);
    got_free(&g);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    ferry_buf_release(&f);
    /* hostile nested files: Impala (legacy lists, maps), parquet-mr (maps), parquet-rs */
    static const char *const files[] = {"nullable.impala.parquet", "nested_maps.snappy.parquet",
                                        "nested_lists.snappy.parquet", "map_no_value.parquet",
                                        "repeated_no_annotation.parquet"};
    for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
        read_fixture(files[fi], &f);
        assert_int_equal(hostile(&f), FERRY_OK);
        struct ferry_buf t;
        ferry_buf_init(&t, 0);
        int errors = 0;
        /* every byte of the small files, every third of the larger */
        for (size_t k = 0; k < f.len; k += f.len > 2000 ? 3 : 1) {
            ferry_buf_reset(&t);
            assert_int_equal(ferry_buf_append(&t, f.data, f.len), FERRY_OK);
            size_t pat = (k / (f.len > 2000 ? 3 : 1)) % 3; /* rotating: flip, 0x7f, 0x01 */
            t.data[k] = (char)(pat == 0 ? t.data[k] ^ 0xff : pat == 1 ? 0x7f : 0x01);
            errors += hostile(&t) != FERRY_OK;
        }
        assert_true(errors > 0);
        ferry_buf_release(&t);
        ferry_buf_release(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_codec),
        cmocka_unit_test(test_defaults_and_empty),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_refused_value),
        cmocka_unit_test(test_truncated_and_garbage),
        cmocka_unit_test(test_errors_name_file_and_offset),
        cmocka_unit_test(test_duckdb_files),
        cmocka_unit_test(test_ranged_selected_groups),
        cmocka_unit_test(test_nested_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
