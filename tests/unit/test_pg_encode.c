/* tests/unit/test_pg_encode.c - the postgres sink's COPY binary encoder against byte strings
 * worked out by hand from PostgreSQL's binary formats (no server needed). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "batch/builder.h"
#include "connectors/postgres/pg_encode.h"
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/connector.h"

/* "0001 ffff" -> bytes appended to b (spaces ignored). */
static void hex(struct ferry_buf *b, const char *s)
{
    while (*s) {
        if (*s == ' ') {
            s++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(s, "%2x", &v), 1);
        uint8_t c = (uint8_t)v;
        assert_int_equal(ferry_buf_append(b, &c, 1), FERRY_OK);
        s += 2;
    }
}

static void dump_diff(const struct ferry_buf *got, const struct ferry_buf *want)
{
    size_t n = got->len < want->len ? got->len : want->len, i = 0;
    while (i < n && got->data[i] == want->data[i])
        i++;
    fprintf(stderr, "lengths %zu / %zu, first difference at byte %zu\n", got->len, want->len, i);
    for (size_t k = i; k < i + 16 && k < got->len; k++)
        fprintf(stderr, "%02x", (uint8_t)got->data[k]);
    fprintf(stderr, " (got)\n");
    for (size_t k = i; k < i + 16 && k < want->len; k++)
        fprintf(stderr, "%02x", (uint8_t)want->data[k]);
    fprintf(stderr, " (want)\n");
}

static void assert_bytes(const struct ferry_buf *got, const char *want_hex)
{
    struct ferry_buf want;
    ferry_buf_init(&want, 0);
    hex(&want, want_hex);
    bool same = got->len == want.len && memcmp(got->data, want.data, want.len) == 0;
    if (!same) dump_diff(got, &want);
    ferry_buf_release(&want);
    assert_true(same);
}

static void numeric_is(const char *text, const char *want_hex)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__pg_numeric_from_text(&b, text, strlen(text));
    if (rc != FERRY_OK) fprintf(stderr, "numeric \"%s\": code %d\n", text, rc);
    assert_int_equal(rc, FERRY_OK);
    if (b.len == 0) ferry_buf_append(&b, "", 0);
    assert_bytes(&b, want_hex);
    ferry_buf_release(&b);
}

static void numeric_refused(const char *text)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_numeric_from_text(&b, text, strlen(text)), FERRY_EINVAL);
    ferry_buf_release(&b);
}

/* ndigits, weight, sign, dscale, then base-10000 digits. */
static void test_numeric(void **state)
{
    (void)state;
    numeric_is("12.3400", "0002 0000 0000 0004 000c 0d48");          /* [12, 3400] */
    numeric_is("-1234567.89", "0003 0001 4000 0002 007b 11d7 22c4"); /* [123, 4567, 8900] */
    numeric_is("0.0001", "0001 ffff 0000 0004 0001");                /* weight -1 */
    numeric_is("0.00", "0000 0000 0000 0002");                       /* zero keeps its scale */
    numeric_is("-0", "0000 0000 0000 0000");                         /* no negative zero */
    numeric_is("1e5", "0001 0001 0000 0000 000a");                   /* 10 * 10000^1 */
    numeric_is("12300", "0002 0001 0000 0000 0001 08fc"); /* [1, 2300], trailing 0s cut */
    numeric_is("1.5e-3", "0001 ffff 0000 0004 000f");     /* 0.0015 = 15 * 10000^-1 */
    numeric_is("+7", "0001 0000 0000 0000 0007");
    numeric_is("NaN", "0000 0000 c000 0000");
    numeric_is("Infinity", "0000 0000 d000 0000");
    numeric_is("-Infinity", "0000 0000 f000 0000");
    /* 40 digits: 1234567890123456789012345678901234567890 = groups of 4 from the right. */
    numeric_is("1234567890123456789012345678901234567890",
               "000a 0009 0000 0000 04d2 162e 2334 0d80 1ed2 04d2 162e 2334 0d80 1ed2");
    numeric_refused("");
    numeric_refused("-");
    numeric_refused("1.2.3");
    numeric_refused("1e");
    numeric_refused("abc");
    numeric_refused("12 ");
}

static void test_wire_for(void **state)
{
    (void)state;
    struct ferry_field f = {.name = "c", .type = FERRY_TYPE_INT32};
    assert_int_equal(ferry__pg_wire_for(&f, 23, -1), FERRY_PG_WIRE_INT4);
    assert_int_equal(ferry__pg_wire_for(&f, 20, -1), FERRY_PG_WIRE_INT8); /* widening */
    assert_int_equal(ferry__pg_wire_for(&f, 21, -1), FERRY_PG_WIRE_NONE); /* narrowing */
    assert_int_equal(ferry__pg_wire_for(&f, 25, -1), FERRY_PG_WIRE_NONE);
    f.type = FERRY_TYPE_INT8;
    assert_int_equal(ferry__pg_wire_for(&f, 21, -1), FERRY_PG_WIRE_INT2);
    f.type = FERRY_TYPE_DECIMAL128;
    f.precision = 12;
    f.scale = 2;
    int32_t n12_2 = ((12 << 16) | 2) + 4, n12_3 = ((12 << 16) | 3) + 4,
            n11_2 = ((11 << 16) | 2) + 4;
    assert_int_equal(ferry__pg_wire_for(&f, 1700, n12_2), FERRY_PG_WIRE_NUMERIC);
    assert_int_equal(ferry__pg_wire_for(&f, 1700, -1), FERRY_PG_WIRE_NUMERIC);
    assert_int_equal(ferry__pg_wire_for(&f, 1700, n12_3), FERRY_PG_WIRE_NONE); /* 9 int digits */
    assert_int_equal(ferry__pg_wire_for(&f, 1700, n11_2), FERRY_PG_WIRE_NONE);
    f.type = FERRY_TYPE_DECIMAL_TEXT;
    assert_int_equal(ferry__pg_wire_for(&f, 1700, -1), FERRY_PG_WIRE_NUMERIC);
    assert_int_equal(ferry__pg_wire_for(&f, 1700, n12_2), FERRY_PG_WIRE_NONE);
    f.type = FERRY_TYPE_JSON;
    assert_int_equal(ferry__pg_wire_for(&f, 3802, -1), FERRY_PG_WIRE_JSONB);
    assert_int_equal(ferry__pg_wire_for(&f, 114, -1), FERRY_PG_WIRE_TEXT);
    f.type = FERRY_TYPE_UTF8;
    assert_int_equal(ferry__pg_wire_for(&f, 1043, -1), FERRY_PG_WIRE_TEXT);
    assert_int_equal(ferry__pg_wire_for(&f, 1043, 14), FERRY_PG_WIRE_NONE); /* varchar(10) */
    f.type = FERRY_TYPE_TIMESTAMPTZ_US;
    assert_int_equal(ferry__pg_wire_for(&f, 1184, -1), FERRY_PG_WIRE_TIMESTAMP);
    assert_int_equal(ferry__pg_wire_for(&f, 1114, -1), FERRY_PG_WIRE_NONE);
    assert_int_equal(ferry__pg_wire_for(&f, 1184, 3), FERRY_PG_WIRE_NONE); /* timestamptz(3) */
    f.type = FERRY_TYPE_FLOAT32;
    assert_int_equal(ferry__pg_wire_for(&f, 701, -1), FERRY_PG_WIRE_FLOAT8);
}

/* ---- whole rows -------------------------------------------------------------------------- */

static const struct {
    const char *name;
    enum ferry_type type;
} cols[] = {
    {"id", FERRY_TYPE_INT64},           {"flag", FERRY_TYPE_BOOL},
    {"small", FERRY_TYPE_INT16},        {"f32", FERRY_TYPE_FLOAT32},
    {"f64", FERRY_TYPE_FLOAT64},        {"price", FERRY_TYPE_DECIMAL128},
    {"exact", FERRY_TYPE_DECIMAL_TEXT}, {"name", FERRY_TYPE_UTF8},
    {"blob", FERRY_TYPE_BINARY},        {"day", FERRY_TYPE_DATE32},
    {"clock", FERRY_TYPE_TIME64_US},    {"at", FERRY_TYPE_TIMESTAMPTZ_US},
    {"uid", FERRY_TYPE_UUID},           {"doc", FERRY_TYPE_JSON},
};
#define NC ((int)(sizeof cols / sizeof cols[0]))

static int take(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct ferry_batch **slot = ctx;
    ferry_batch_unref(*slot);
    *slot = b;
    return FERRY_OK;
}

static struct ferry_batch *make_batch(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    for (int c = 0; c < NC; c++)
        assert_int_equal(ferry_schema_add_field(s, cols[c].name, cols[c].type, c > 0, NULL),
                         FERRY_OK);
    s->fields[5].precision = 12;
    s->fields[5].scale = 2;
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &out);
    assert_non_null(rw);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 1);
    ferry_rw_bool(rw, true);
    ferry_rw_int(rw, -2);
    ferry_rw_float(rw, 1.5);
    ferry_rw_float(rw, -0.25);
    struct ferry_decimal128 d = {.lo = 12345, .hi = 0};
    uint8_t dec[16];
    for (int k = 0; k < 8; k++) {
        dec[k] = (uint8_t)(d.lo >> (8 * k));
        dec[8 + k] = 0;
    }
    ferry_rw_fixed(rw, dec, 16);
    ferry_rw_text(rw, "-0.5", 4);
    ferry_rw_text(rw, "\xc3\xa9", 2);
    ferry_rw_text(rw, "\x00\xff", 2);
    ferry_rw_int(rw, 10958);                    /* 2000-01-02 */
    ferry_rw_int(rw, 1);                        /* 00:00:00.000001 */
    ferry_rw_int(rw, INT64_C(946684800000001)); /* 2000-01-01 00:00:00.000001Z */
    uint8_t uid[16];
    for (int k = 0; k < 16; k++)
        uid[k] = (uint8_t)k;
    ferry_rw_fixed(rw, uid, 16);
    ferry_rw_text(rw, "{\"a\":1}", 7);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    /* Row 2: everything but the key NULL, and a delete. */
    ferry_rw_begin(rw, FERRY_OP_DELETE);
    ferry_rw_int(rw, 2);
    for (int c = 1; c < NC; c++)
        ferry_rw_null(rw);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    /* Row 3: a timestamp just before the PostgreSQL epoch, an empty text. */
    ferry_rw_begin(rw, FERRY_OP_UPDATE);
    ferry_rw_int(rw, 3);
    for (int c = 1; c < NC; c++) {
        if (c == 7)
            ferry_rw_text(rw, "", 0);
        else if (c == 11)
            ferry_rw_int(rw, INT64_C(946684799999999));
        else
            ferry_rw_null(rw);
    }
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    assert_non_null(out);
    assert_int_equal(out->length, 3);
    return out;
}

static const enum ferry_pg_wire wires[NC] = {
    FERRY_PG_WIRE_INT8,   FERRY_PG_WIRE_BOOL,    FERRY_PG_WIRE_INT2,    FERRY_PG_WIRE_FLOAT4,
    FERRY_PG_WIRE_FLOAT8, FERRY_PG_WIRE_NUMERIC, FERRY_PG_WIRE_NUMERIC, FERRY_PG_WIRE_TEXT,
    FERRY_PG_WIRE_BYTEA,  FERRY_PG_WIRE_DATE,    FERRY_PG_WIRE_TIME,    FERRY_PG_WIRE_TIMESTAMP,
    FERRY_PG_WIRE_UUID,   FERRY_PG_WIRE_JSONB,
};

#define NULLS13                                                                                    \
    "ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff "                     \
    "ffffffff ffffffff ffffffff ffffffff ffffffff"

static const char *const expected =
    /* header: signature, flags, extension length */
    "5047434f50590aff0d0a00 00000000 00000000 "
    /* row 1: 14 fields */
    "000e "
    "00000008 0000000000000001 "              /* id int8 */
    "00000001 01 "                            /* bool */
    "00000002 fffe "                          /* int2 -2 */
    "00000004 3fc00000 "                      /* float4 1.5 */
    "00000008 bfd0000000000000 "              /* float8 -0.25 */
    "0000000c 0002 0000 0000 0002 007b 1194 " /* 123.45 = [123, 4500] */
    "0000000a 0001 ffff 4000 0001 1388 "      /* -0.5 = -[5000] weight -1 */
    "00000002 c3a9 "                          /* é */
    "00000002 00ff "                          /* bytea */
    "00000004 00000001 "                      /* 2000-01-02 */
    "00000008 0000000000000001 "              /* time 1 us */
    "00000008 0000000000000001 "              /* 2000-01-01 + 1 us */
    "00000010 000102030405060708090a0b0c0d0e0f "
    "00000008 01 7b2261223a317d " /* jsonb: version 1 + text */
    /* row 2 */
    "000e 00000008 0000000000000002 " NULLS13 " "
    /* row 3: 6 nulls, empty text, 3 nulls, timestamp -1 us, 2 nulls */
    "000e 00000008 0000000000000003 "
    "ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff 00000000 ffffffff ffffffff ffffffff "
    "00000008 ffffffffffffffff ffffffff ffffffff "
    /* trailer */
    "ffff";

static void encode_all(const struct ferry_batch *b, const struct ferry_pg_wire_col *wc, int n,
                       size_t flush_at, struct ferry_buf *out)
{
    struct ferry_error err;
    struct ferry_buf chunk;
    ferry_buf_init(&chunk, 0);
    assert_int_equal(ferry__pg_copy_header(&chunk), FERRY_OK);
    int64_t row = 0;
    int chunks = 0;
    while (row < b->length) {
        assert_int_equal(ferry__pg_copy_rows(&chunk, b, wc, n, &row, flush_at, &err), FERRY_OK);
        ferry_buf_append(out, chunk.data, chunk.len);
        ferry_buf_reset(&chunk);
        chunks++;
    }
    assert_int_equal(ferry__pg_copy_trailer(&chunk), FERRY_OK);
    ferry_buf_append(out, chunk.data, chunk.len);
    ferry_buf_release(&chunk);
    if (flush_at == 1) assert_int_equal(chunks, b->length); /* one row per chunk */
}

static void test_rows(void **state)
{
    (void)state;
    struct ferry_batch *b = make_batch();
    struct ferry_pg_wire_col wc[NC];
    for (int c = 0; c < NC; c++)
        wc[c] = (struct ferry_pg_wire_col){c, wires[c], 0, false};
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    encode_all(b, wc, NC, SIZE_MAX, &out);
    assert_bytes(&out, expected);
    /* Sent in one-row chunks, the stream is the same bytes. */
    ferry_buf_reset(&out);
    encode_all(b, wc, NC, 1, &out);
    assert_bytes(&out, expected);
    ferry_buf_release(&out);
    ferry_batch_unref(b);
}

/* The staging columns: key, row number, operation; json into a json column is plain text. */
static void test_staging_columns(void **state)
{
    (void)state;
    struct ferry_batch *b = make_batch();
    struct ferry_batch *s = ferry_batch_slice(b, 1, 2); /* rows 2 and 3 */
    struct ferry_pg_wire_col wc[] = {{0, FERRY_PG_WIRE_INT8, 0, false},
                                     {13, FERRY_PG_WIRE_TEXT, 0, false},
                                     {FERRY_PG_COL_ROWNUM, FERRY_PG_WIRE_INT8, 0, false},
                                     {FERRY_PG_COL_OP, FERRY_PG_WIRE_INT2, 0, false}};
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    encode_all(s, wc, 4, SIZE_MAX, &out);
    assert_bytes(&out, "5047434f50590aff0d0a00 00000000 00000000 "
                       "0004 00000008 0000000000000002 ffffffff 00000008 0000000000000000 "
                       "00000002 0002 "
                       "0004 00000008 0000000000000003 ffffffff 00000008 0000000000000001 "
                       "00000002 0001 ffff");
    /* json as text: no version byte. */
    struct ferry_pg_wire_col doc[] = {{13, FERRY_PG_WIRE_TEXT, 0, false}};
    ferry_buf_reset(&out);
    int64_t row = 0;
    struct ferry_batch *first = ferry_batch_slice(b, 0, 1);
    struct ferry_error err;
    assert_int_equal(ferry__pg_copy_rows(&out, first, doc, 1, &row, SIZE_MAX, &err), FERRY_OK);
    assert_bytes(&out, "0001 00000007 7b2261223a317d");
    ferry_buf_release(&out);
    ferry_batch_unref(first);
    ferry_batch_unref(s);
    ferry_batch_unref(b);
}

/* A decimal text that is not a number is refused naming the column and the row. */
static void test_bad_value(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "big", FERRY_TYPE_DECIMAL_TEXT, true, NULL),
                     FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = 10, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &b);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_text(rw, "12", 2);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_text(rw, "12abc", 5);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    struct ferry_pg_wire_col wc[] = {{0, FERRY_PG_WIRE_NUMERIC, 0, false}};
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    int64_t row = 0;
    assert_int_equal(ferry__pg_copy_rows(&out, b, wc, 1, &row, SIZE_MAX, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column \"big\""));
    assert_non_null(strstr(err.message, "row 1"));
    ferry_buf_release(&out);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

/* ---- decimal128 -> numeric without text: byte-identical to the text path ------------------ */

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint64_t next64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static struct ferry_decimal128 dec(int64_t hi, uint64_t lo)
{
    return (struct ferry_decimal128){.lo = lo, .hi = hi};
}

/* 10^k as a decimal128 (k <= 38). */
static struct ferry_decimal128 pow10_dec(int k)
{
    u128 u = 1;
    for (int i = 0; i < k; i++)
        u *= 10;
    return dec((int64_t)(uint64_t)(u >> 64), (uint64_t)u);
}

static struct ferry_decimal128 add_dec(struct ferry_decimal128 a, int64_t k)
{
    u128 u = ((u128)(uint64_t)a.hi << 64) | a.lo;
    u += (u128)(i128)k;
    return dec((int64_t)(uint64_t)(u >> 64), (uint64_t)u);
}

static struct ferry_decimal128 neg_dec(struct ferry_decimal128 a)
{
    uint64_t lo = ~a.lo + 1;
    return dec((int64_t)(~(uint64_t)a.hi + (lo == 0)), lo);
}

/* Both paths must agree byte for byte; returns false (after printing the case) if not. */
static bool same_as_text(struct ferry_decimal128 v, int scale)
{
    char txt[128];
    int n = ferry_decimal128_to_text(v, scale, txt, sizeof txt);
    assert_true(n > 0);
    struct ferry_buf a, b;
    ferry_buf_init(&a, 0);
    ferry_buf_init(&b, 0);
    int ra = ferry__pg_numeric_from_text(&a, txt, (size_t)n);
    int rb = ferry__pg_numeric_from_dec128(&b, v, scale);
    bool same =
        ra == FERRY_OK && rb == FERRY_OK && a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
    if (!same) {
        fprintf(stderr, "decimal128 %s (hi %" PRId64 " lo %" PRIu64 ", scale %d): codes %d/%d\n",
                txt, v.hi, v.lo, scale, ra, rb);
        if (ra == FERRY_OK && rb == FERRY_OK) dump_diff(&b, &a);
    }
    ferry_buf_release(&a);
    ferry_buf_release(&b);
    return same;
}

static void dec_numeric_is(struct ferry_decimal128 v, int scale, const char *want_hex)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_numeric_from_dec128(&b, v, scale), FERRY_OK);
    assert_bytes(&b, want_hex);
    ferry_buf_release(&b);
}

static void test_numeric_dec128_known(void **state)
{
    (void)state;
    dec_numeric_is(dec(0, 12345), 2, "0002 0000 0000 0002 007b 1194"); /* [123, 4500] */
    dec_numeric_is(dec(-1, (uint64_t)-12345), 2, "0002 0000 4000 0002 007b 1194");
    dec_numeric_is(dec(0, 1), 4, "0001 ffff 0000 0004 0001"); /* 0.0001 */
    dec_numeric_is(dec(0, 1), 5, "0001 fffe 0000 0005 03e8"); /* 0.00001 */
    dec_numeric_is(dec(0, 0), 2, "0000 0000 0000 0002");      /* zero keeps scale */
    dec_numeric_is(dec(0, 0), -3, "0000 0000 0000 0000");
    dec_numeric_is(dec(0, 7), -5, "0001 0001 0000 0000 0046");         /* 700000 = [70, 0] */
    dec_numeric_is(dec(0, 12300), 0, "0002 0001 0000 0000 0001 08fc"); /* [1, 2300] */
    dec_numeric_is(dec(0, 100000000), 0, "0001 0002 0000 0000 0001");  /* 10^8 */
    /* the most negative decimal128: -170141183460469231731687303715884105728 */
    dec_numeric_is(dec(INT64_MIN, 0), 0,
                   "000a 0009 4000 0000 00aa 0583 209a 01d5 090d 0c60 1c87 1bf6 20da 1660");
    /* a scale beyond numeric's display scale is refused, not truncated */
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_numeric_from_dec128(&b, dec(0, 1), 0x4000), FERRY_EINVAL);
    assert_int_equal(b.len, 0);
    ferry_buf_release(&b);
}

static void test_numeric_dec128_edges(void **state)
{
    (void)state;
    int bad = 0;
    struct ferry_decimal128 fixed[] = {
        dec(0, 0),
        dec(0, 1),
        dec(-1, UINT64_MAX),
        dec(0, UINT64_MAX),
        dec(1, 0),
        dec(-1, 0),
        dec(INT64_MAX, UINT64_MAX),
        dec(INT64_MIN, 0),
        dec(INT64_MIN, 1),
        dec(0, 10000),
        dec(0, 9999),
        dec(0, 99990000),
    };
    for (int scale = -5; scale <= 38; scale++) {
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            bad += !same_as_text(fixed[i], scale);
        /* 10^k - 1, 10^k, 10^k + 1 and their negatives: every digit count and group edge,
         * up to the largest 38-digit values */
        for (int k = 0; k <= 38; k++) {
            struct ferry_decimal128 p = pow10_dec(k);
            for (int d = -1; d <= 1; d++) {
                struct ferry_decimal128 v = add_dec(p, d);
                bad += !same_as_text(v, scale);
                bad += !same_as_text(neg_dec(v), scale);
            }
        }
    }
    assert_int_equal(bad, 0);
}

static void test_numeric_dec128_random(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < 200000 && bad < 10; i++) {
        int scale = -5 + (int)(next64() % 44); /* -5 .. 38 */
        struct ferry_decimal128 v;
        uint64_t kind = next64() % 4;
        if (kind == 0) { /* any 128-bit pattern (mostly 38-39 digits) */
            v = dec((int64_t)next64(), next64());
        } else if (kind == 1) { /* a small value, typical of numeric(12,2) */
            v = dec(0, next64() % 1000000000000u);
        } else { /* a uniform digit count 1..38, then trailing zeros to exercise trimming */
            int digits = 1 + (int)(next64() % 38);
            u128 u = 0;
            for (int d = 0; d < digits; d++)
                u = u * 10 + next64() % 10;
            if (kind == 3) {
                int zeros = (int)(next64() % 9);
                for (int z = 0; z < zeros && digits + z < 38; z++)
                    u *= 10;
            }
            v = dec((int64_t)(uint64_t)(u >> 64), (uint64_t)u);
        }
        if (next64() & 1) v = neg_dec(v);
        bad += !same_as_text(v, scale);
    }
    assert_int_equal(bad, 0);
}

/* Special values (connector.h) of fields from a postgres source become PostgreSQL's own
 * +-infinity and NaN; without the flag the same numbers are ordinary values (a date
 * INT32_MAX from a file is a date past PostgreSQL's range, refused by the server). */
static void test_special_values(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "d", FERRY_TYPE_DATE32, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "ts", FERRY_TYPE_TIMESTAMP_US, true, NULL),
                     FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "n", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    s->fields[2].precision = 20;
    s->fields[2].scale = 2;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &b);
    struct ferry_error err;
    const struct ferry_decimal128 nan = {.lo = FERRY_SPECIAL_DEC_NAN_LO,
                                         .hi = FERRY_SPECIAL_DEC_NAN_HI};
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, FERRY_SPECIAL_DATE_PINF);
    ferry_rw_int(rw, FERRY_SPECIAL_TS_NINF);
    ferry_rw_dec128(rw, nan);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, FERRY_SPECIAL_DATE_NINF);
    ferry_rw_int(rw, FERRY_SPECIAL_TS_PINF);
    ferry_rw_dec128(rw, (struct ferry_decimal128){.lo = 150, .hi = 0});
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    struct ferry_pg_wire_col wc[] = {{0, FERRY_PG_WIRE_DATE, 0, true},
                                     {1, FERRY_PG_WIRE_TIMESTAMP, 0, true},
                                     {2, FERRY_PG_WIRE_NUMERIC, 0, true}};
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    encode_all(b, wc, 3, SIZE_MAX, &out);
    assert_bytes(&out, "5047434f50590aff0d0a00 00000000 00000000 "
                       "0003 00000004 7fffffff 00000008 8000000000000000 "
                       "00000008 0000 0000 c000 0000 "
                       "0003 00000004 80000000 00000008 7fffffffffffffff "
                       "0000000c 0002 0000 0000 0002 0001 1388 ffff");
    /* Not from a postgres source: the date is an ordinary number of days. */
    struct ferry_pg_wire_col plain[] = {{0, FERRY_PG_WIRE_DATE, 0, false}};
    struct ferry_batch *first = ferry_batch_slice(b, 0, 1);
    ferry_buf_reset(&out);
    int64_t row = 0;
    assert_int_equal(ferry__pg_copy_rows(&out, first, plain, 1, &row, SIZE_MAX, &err), FERRY_OK);
    assert_bytes(&out, "0001 00000004 7fffd532"); /* INT32_MAX - 10957 */
    ferry_batch_unref(first);
    /* (and -infinity's number is before PostgreSQL's dates: refused naming the column) */
    row = 1;
    ferry_buf_reset(&out);
    assert_int_not_equal(ferry__pg_copy_rows(&out, b, plain, 1, &row, SIZE_MAX, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "column \"d\""));
    /* and a NaN pattern of a decimal not from postgres is not a number numeric holds */
    struct ferry_pg_wire_col plain_n[] = {{2, FERRY_PG_WIRE_NUMERIC, 0, false}};
    ferry_buf_reset(&out);
    row = 0;
    assert_int_not_equal(ferry__pg_copy_rows(&out, b, plain_n, 1, &row, SIZE_MAX, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "column \"n\""));
    ferry_buf_release(&out);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

/* decimal128 and integer columns through the row encoder: each value as the text path
 * would have written it, length word included. */
static void test_numeric_rows(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "amount", FERRY_TYPE_DECIMAL128, true, NULL),
                     FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "n", FERRY_TYPE_INT64, true, NULL), FERRY_OK);
    s->fields[0].precision = 38;
    s->fields[0].scale = 3;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &b);
    struct ferry_error err;
    const int64_t ints[] = {INT64_MIN, -10000, -1, 0, 1, 9999, 10000, INT64_MAX};
    const int nr = (int)(sizeof ints / sizeof ints[0]);
    struct ferry_decimal128 decs[sizeof ints / sizeof ints[0]];
    for (int i = 0; i < nr; i++) {
        /* within decimal128(38,3): the 38-digit extremes, zero, and random 1..37 digits */
        if (i == 0 || i == nr - 1) {
            decs[i] = add_dec(pow10_dec(38), -1);
            if (i == 0) decs[i] = neg_dec(decs[i]);
        } else if (i == 3) {
            decs[i] = dec(0, 0);
        } else {
            u128 u = 0;
            for (int d = (int)(next64() % 37); d >= 0; d--)
                u = u * 10 + next64() % 10;
            decs[i] = dec((int64_t)(uint64_t)(u >> 64), (uint64_t)u);
            if (i % 2) decs[i] = neg_dec(decs[i]);
        }
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_dec128(rw, decs[i]);
        ferry_rw_int(rw, ints[i]);
        int rc = ferry_rw_end(rw, &err);
        if (rc != FERRY_OK) fprintf(stderr, "row %d: %s\n", i, err.message);
        assert_int_equal(rc, FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(b);
    assert_int_equal(b->length, nr);

    struct ferry_buf got, want;
    ferry_buf_init(&got, 0);
    ferry_buf_init(&want, 0);
    struct ferry_pg_wire_col wc[] = {{0, FERRY_PG_WIRE_NUMERIC, 0, false},
                                     {1, FERRY_PG_WIRE_NUMERIC, 0, false}};
    int64_t row = 0;
    assert_int_equal(ferry__pg_copy_rows(&got, b, wc, 2, &row, SIZE_MAX, &err), FERRY_OK);
    assert_int_equal(row, nr);
    for (int i = 0; i < nr; i++) {
        char txt[128];
        uint8_t fc[2] = {0, 2};
        ferry_buf_append(&want, fc, 2);
        for (int c = 0; c < 2; c++) {
            int n = c == 0 ? ferry_decimal128_to_text(decs[i], 3, txt, sizeof txt)
                           : snprintf(txt, sizeof txt, "%" PRId64, ints[i]);
            size_t at = want.len;
            uint8_t len[4] = {0};
            ferry_buf_append(&want, len, 4);
            assert_int_equal(ferry__pg_numeric_from_text(&want, txt, (size_t)n), FERRY_OK);
            size_t vl = want.len - at - 4;
            uint8_t *p = (uint8_t *)want.data + at;
            p[0] = (uint8_t)(vl >> 24);
            p[1] = (uint8_t)(vl >> 16);
            p[2] = (uint8_t)(vl >> 8);
            p[3] = (uint8_t)vl;
        }
    }
    bool same = got.len == want.len && memcmp(got.data, want.data, got.len) == 0;
    if (!same) dump_diff(&got, &want);
    assert_true(same);
    ferry_buf_release(&got);
    ferry_buf_release(&want);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

/* ---- the fast path with slow values in the same rows -------------------------------------
 * A row mixes values the fast path writes itself (int32 widened to int8, bool, date, text,
 * decimal128) with values it hands to encode_value (decimal text, float32 into float8), nulls
 * and 70 KB texts that outgrow the row's first reservation. The expected stream is built value
 * by value with the public numeric encoders and explicit byte layouts, and must come out the
 * same whole and in small chunks. A date PostgreSQL cannot hold still fails naming the
 * column. */
static void be(struct ferry_buf *b, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        assert_int_equal(ferry_buf_append(b, &c, 1), FERRY_OK);
    }
}

/* A numeric value with its length prefix, from an encoder writing into b. */
static void numeric_field(struct ferry_buf *b, const char *txt, const struct ferry_decimal128 *d,
                          int scale)
{
    size_t at = b->len;
    be(b, 0, 4);
    if (txt != NULL)
        assert_int_equal(ferry__pg_numeric_from_text(b, txt, strlen(txt)), FERRY_OK);
    else
        assert_int_equal(ferry__pg_numeric_from_dec128(b, *d, scale), FERRY_OK);
    size_t n = b->len - at - 4;
    uint8_t *p = (uint8_t *)b->data + at;
    p[0] = (uint8_t)(n >> 24);
    p[1] = (uint8_t)(n >> 16);
    p[2] = (uint8_t)(n >> 8);
    p[3] = (uint8_t)n;
}

static void test_fast_mixed(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "i", FERRY_TYPE_INT32, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "t", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "big", FERRY_TYPE_DECIMAL_TEXT, true, NULL),
                     FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "f", FERRY_TYPE_FLOAT32, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "d", FERRY_TYPE_DATE32, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "ok", FERRY_TYPE_BOOL, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "amt", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    s->fields[6].precision = 10;
    s->fields[6].scale = 2;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    enum { NR = 300 };
    static char big[70000];
    memset(big, 'x', sizeof big);
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = NR, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &b);
    struct ferry_error err;
    char bigtxt[64];
    for (int r = 0; r < NR; r++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, r * 7919 - 1000000);
        if (r % 5 == 0)
            ferry_rw_null(rw);
        else if (r % 7 == 0)
            ferry_rw_text(rw, big, sizeof big - (size_t)r);
        else
            ferry_rw_text(rw, big, (size_t)(r % 3));
        if (r % 4 == 0) {
            ferry_rw_null(rw);
        } else {
            int n = snprintf(bigtxt, sizeof bigtxt, "-%d123456789012345678901234567890.5%d", r, r);
            ferry_rw_text(rw, bigtxt, (size_t)n);
        }
        if (r % 6 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_float(rw, (double)((float)r / 8.0f));
        if (r % 9 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_int(rw, 11000 + r);
        ferry_rw_bool(rw, r % 2 == 0);
        if (r % 11 == 0) {
            ferry_rw_null(rw);
        } else {
            int64_t u = (r % 2 ? -1 : 1) * (int64_t)r * 12345;
            struct ferry_decimal128 d = {.lo = (uint64_t)u, .hi = u < 0 ? -1 : 0};
            ferry_rw_dec128(rw, d);
        }
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(b);
    assert_int_equal(b->length, NR);

    struct ferry_buf want;
    ferry_buf_init(&want, 0);
    assert_int_equal(ferry__pg_copy_header(&want), FERRY_OK);
    for (int r = 0; r < NR; r++) {
        be(&want, 7, 2);
        be(&want, 8, 4);
        be(&want, (uint64_t)(int64_t)(r * 7919 - 1000000), 8);
        if (r % 5 == 0) {
            be(&want, 0xFFFFFFFFu, 4);
        } else {
            size_t n = r % 7 == 0 ? sizeof big - (size_t)r : (size_t)(r % 3);
            be(&want, n, 4);
            ferry_buf_append(&want, big, n);
        }
        if (r % 4 == 0) {
            be(&want, 0xFFFFFFFFu, 4);
        } else {
            snprintf(bigtxt, sizeof bigtxt, "-%d123456789012345678901234567890.5%d", r, r);
            numeric_field(&want, bigtxt, NULL, 0);
        }
        if (r % 6 == 0) {
            be(&want, 0xFFFFFFFFu, 4);
        } else {
            double dv = (double)((float)r / 8.0f);
            uint64_t bits;
            memcpy(&bits, &dv, 8);
            be(&want, 8, 4);
            be(&want, bits, 8);
        }
        if (r % 9 == 0) {
            be(&want, 0xFFFFFFFFu, 4);
        } else {
            be(&want, 4, 4);
            be(&want, (uint32_t)(11000 + r - 10957), 4);
        }
        be(&want, 1, 4);
        be(&want, r % 2 == 0, 1);
        if (r % 11 == 0) {
            be(&want, 0xFFFFFFFFu, 4);
        } else {
            int64_t u = (r % 2 ? -1 : 1) * (int64_t)r * 12345;
            struct ferry_decimal128 d = {.lo = (uint64_t)u, .hi = u < 0 ? -1 : 0};
            numeric_field(&want, NULL, &d, 2);
        }
    }
    assert_int_equal(ferry__pg_copy_trailer(&want), FERRY_OK);

    struct ferry_pg_wire_col wc[] = {
        {0, FERRY_PG_WIRE_INT8, 0, false},    {1, FERRY_PG_WIRE_TEXT, 0, false},
        {2, FERRY_PG_WIRE_NUMERIC, 0, false}, {3, FERRY_PG_WIRE_FLOAT8, 0, false},
        {4, FERRY_PG_WIRE_DATE, 0, false},    {5, FERRY_PG_WIRE_BOOL, 0, false},
        {6, FERRY_PG_WIRE_NUMERIC, 0, false},
    };
    size_t flushes[] = {SIZE_MAX, 1, 100, 65536};
    for (size_t k = 0; k < sizeof flushes / sizeof flushes[0]; k++) {
        struct ferry_buf got;
        ferry_buf_init(&got, 0);
        encode_all(b, wc, 7, flushes[k], &got);
        bool same = got.len == want.len && memcmp(got.data, want.data, got.len) == 0;
        if (!same) dump_diff(&got, &want);
        assert_true(same);
        ferry_buf_release(&got);
    }
    ferry_buf_release(&want);

    /* the fast path leaves a date PostgreSQL cannot hold to the general code's message */
    int32_t *days = (int32_t *)b->columns[4].values;
    days[b->offset + 13] = INT32_MIN;
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    int64_t row = 0;
    assert_int_equal(ferry__pg_copy_rows(&out, b, wc, 7, &row, SIZE_MAX, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column \"d\""));
    assert_non_null(strstr(err.message, "date out of range"));
    ferry_buf_release(&out);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numeric),
        cmocka_unit_test(test_wire_for),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_staging_columns),
        cmocka_unit_test(test_bad_value),
        cmocka_unit_test(test_numeric_dec128_known),
        cmocka_unit_test(test_numeric_dec128_edges),
        cmocka_unit_test(test_numeric_dec128_random),
        cmocka_unit_test(test_numeric_rows),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_fast_mixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
