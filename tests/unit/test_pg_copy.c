/* tests/unit/test_pg_copy.c - the postgres source's COPY BINARY decoder on hand-made bytes:
 * header, NULLs, every native wire form, numeric edge cases (text and decimal128), split
 * chunks, and malformed streams. Also the name splitting and type mapping of pg_common. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "batch/builder.h"
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_copy.h"

/* ---- byte builders ---- */

struct bytes {
    uint8_t b[8192];
    size_t n;
};

static void put(struct bytes *x, const void *p, size_t n)
{
    assert_true(x->n + n <= sizeof x->b);
    memcpy(x->b + x->n, p, n);
    x->n += n;
}
static void p16(struct bytes *x, int v)
{
    uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    put(x, b, 2);
}
static void p32(struct bytes *x, int64_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(x, b, 4);
}
static void p64(struct bytes *x, uint64_t v)
{
    p32(x, (int64_t)(v >> 32));
    p32(x, (int64_t)(v & 0xffffffffu));
}
static void header(struct bytes *x)
{
    static const uint8_t sig[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0};
    put(x, sig, 11);
    p32(x, 0);
    p32(x, 4); /* an extension area the decoder must skip */
    p32(x, 0x7777);
}

/* numeric binary: sign, weight, dscale, digits */
static size_t numeric(uint8_t *out, int sign, int weight, int dscale, const int *digits, int n)
{
    struct bytes x = {.n = 0};
    p16(&x, n);
    p16(&x, weight);
    p16(&x, sign);
    p16(&x, dscale);
    for (int i = 0; i < n; i++)
        p16(&x, digits[i]);
    memcpy(out, x.b, x.n);
    return x.n;
}

static void num_text_is(const uint8_t *p, size_t n, const char *want)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_numeric_text(p, n, &b), FERRY_OK);
    assert_string_equal(b.data, want);
    ferry_buf_release(&b);
}

static void test_numeric_text(void **state)
{
    (void)state;
    uint8_t v[256];
    size_t n;
    int d1[] = {12, 3400};
    n = numeric(v, 0x4000, 0, 4, d1, 2);
    num_text_is(v, n, "-12.3400");
    n = numeric(v, 0, 0, 0, NULL, 0);
    num_text_is(v, n, "0");
    n = numeric(v, 0, 0, 3, NULL, 0);
    num_text_is(v, n, "0.000");
    n = numeric(v, 0x4000, 0, 2, NULL, 0); /* negative zero prints without sign */
    num_text_is(v, n, "0.00");
    n = numeric(v, 0xC000, 0, 0, NULL, 0);
    num_text_is(v, n, "NaN");
    n = numeric(v, 0xD000, 0, 0, NULL, 0);
    num_text_is(v, n, "Infinity");
    n = numeric(v, 0xF000, 0, 0, NULL, 0);
    num_text_is(v, n, "-Infinity");
    /* 123456789012345678901234567890.123456789: 30 integer digits */
    int d2[] = {12, 3456, 7890, 1234, 5678, 9012, 3456, 7890, 1234, 5678, 9000};
    n = numeric(v, 0, 7, 9, d2, 11);
    num_text_is(v, n, "123456789012345678901234567890.123456789");
    /* 0.000000000000000000000000000000001 (weight -9: eight zero groups after the point) */
    int d3[] = {1000};
    n = numeric(v, 0x4000, -9, 33, d3, 1);
    num_text_is(v, n, "-0.000000000000000000000000000000001");
    /* 1e20 with trailing zero groups stripped by PostgreSQL */
    int d4[] = {1};
    n = numeric(v, 0, 5, 0, d4, 1);
    num_text_is(v, n, "100000000000000000000");
    /* dscale shorter than the digits sent (rounded values keep their dscale) */
    int d5[] = {1, 5000};
    n = numeric(v, 0, 0, 1, d5, 2);
    num_text_is(v, n, "1.5");

    /* malformed: bad length, digit >= 10000, unknown sign */
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    n = numeric(v, 0, 0, 0, d1, 2);
    assert_int_equal(ferry__pg_numeric_text(v, n - 1, &b), FERRY_EINVAL);
    int bad[] = {10000};
    n = numeric(v, 0, 0, 0, bad, 1);
    assert_int_equal(ferry__pg_numeric_text(v, n, &b), FERRY_EINVAL);
    n = numeric(v, 0x1234, 0, 0, NULL, 0);
    assert_int_equal(ferry__pg_numeric_text(v, n, &b), FERRY_EINVAL);
    assert_int_equal(ferry__pg_numeric_text(v, 3, &b), FERRY_EINVAL);
    ferry_buf_release(&b);
}

static void dec_is(const uint8_t *p, size_t n, int prec, int scale, const char *want)
{
    struct ferry_decimal128 d;
    assert_int_equal(ferry__pg_numeric_dec128(p, n, prec, scale, &d), FERRY_OK);
    char buf[64];
    ferry_decimal128_to_text(d, scale, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void test_numeric_dec128(void **state)
{
    (void)state;
    uint8_t v[256];
    size_t n;
    int d1[] = {12, 3400};
    n = numeric(v, 0x4000, 0, 2, d1, 2);
    dec_is(v, n, 12, 2, "-12.34");
    /* more fractional digits than the scale (non-zero): not exact */
    int d2[] = {12, 3456};
    n = numeric(v, 0, 0, 4, d2, 2);
    struct ferry_decimal128 d;
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    dec_is(v, n, 12, 4, "12.3456");
    /* 38 digits with scale 2: the last group carries 2 fraction digits + 2 zeros */
    int d3[] = {9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9900};
    n = numeric(v, 0, 8, 2, d3, 10); /* 36 nines . 99 */
    dec_is(v, n, 38, 2, "999999999999999999999999999999999999.99");
    /* one digit too many for the precision */
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 37, 2, &d), FERRY_EINVAL);
    /* negative scale: 12300 at scale -2 is 123 units of 100 */
    int d4[] = {1, 2300};
    n = numeric(v, 0, 1, 0, d4, 2);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 5, -2, &d), FERRY_OK);
    assert_int_equal((int64_t)d.lo, 123);
    assert_int_equal(d.hi, 0);
    /* NaN and infinities have no decimal128 value */
    n = numeric(v, 0xC000, 0, 0, NULL, 0);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 10, 2, &d), FERRY_EINVAL);
    n = numeric(v, 0xD000, 0, 0, NULL, 0);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 10, 2, &d), FERRY_EINVAL);
    /* zero */
    n = numeric(v, 0, 0, 2, NULL, 0);
    dec_is(v, n, 12, 2, "0.00");
}

/* The 64-bit fast path of ferry__pg_numeric_dec128 against an oracle worked from the value's
 * text (ferry__pg_numeric_text, a separate code path): random binary numerics with 0..6
 * groups, weights -5..6, zero groups, both signs, every (precision, scale) the fast path takes
 * and some it leaves to the general code (precision 19 and 38, negative scale, scale above
 * 18). The oracle: the exact value at `scale` must be an integer of at most `precision`
 * digits, else FERRY_EINVAL. */
__extension__ typedef __int128 i128_t;
__extension__ typedef unsigned __int128 u128_t;

static uint64_t num_rng = 0x243F6A8885A308D3u;

static uint64_t num_next(void)
{
    num_rng ^= num_rng << 13;
    num_rng ^= num_rng >> 7;
    num_rng ^= num_rng << 17;
    return num_rng;
}

/* "-12.3400" at `scale` -> unscaled value; false when inexact or wider than precision. */
static bool oracle(const char *t, int precision, int scale, i128_t *out)
{
    bool neg = *t == '-';
    if (neg) t++;
    const char *dot = strchr(t, '.');
    size_t int_len = dot ? (size_t)(dot - t) : strlen(t);
    const char *frac = dot ? dot + 1 : "";
    /* digits of the value at 10^-scale: integer digits, then `scale` fraction digits */
    char dig[200];
    size_t n = 0;
    for (size_t i = 0; i < int_len; i++)
        dig[n++] = t[i];
    size_t flen = strlen(frac);
    if (scale >= 0) {
        for (int i = 0; i < scale; i++)
            dig[n++] = (size_t)i < flen ? frac[i] : '0';
        for (size_t i = (size_t)scale; i < flen; i++)
            if (frac[i] != '0') return false; /* digits below the scale */
    } else {
        for (size_t i = 0; i < flen; i++)
            if (frac[i] != '0') return false;
        for (int i = 0; i < -scale; i++) { /* the last -scale integer digits must be 0 */
            if ((size_t)i >= n) break;
            if (dig[n - 1 - (size_t)i] != '0') return false;
        }
        n = n > (size_t)-scale ? n - (size_t)-scale : 0;
    }
    size_t first = 0;
    while (first < n && dig[first] == '0')
        first++;
    if (n - first > (size_t)precision) return false;
    i128_t v = 0;
    for (size_t i = first; i < n; i++)
        v = v * 10 + (dig[i] - '0');
    *out = neg ? -v : v;
    return true;
}

static void test_numeric_dec128_oracle(void **state)
{
    (void)state;
    static const int ps[][2] = {{12, 2}, {18, 0}, {18, 18}, {18, 4}, {1, 0}, {5, 5},
                                {10, 3}, {19, 2}, {38, 10}, {15, -2}, {30, 20}, {9, 1}};
    struct ferry_buf text;
    ferry_buf_init(&text, 0);
    int fits = 0, refused = 0;
    for (int it = 0; it < 200000; it++) {
        int nd = (int)(num_next() % 7);
        int dg[8];
        for (int i = 0; i < nd; i++) {
            uint64_t r = num_next();
            dg[i] = r % 4 == 0 ? 0 : r % 4 == 1 ? (int)(r % 10) * 1000 : (int)(r % 10000);
        }
        int weight = (int)(num_next() % 12) - 5;
        int sign = num_next() % 2 ? 0x4000 : 0;
        int dscale = (int)(num_next() % 24);
        /* PostgreSQL's dscale always covers the digits sent (the text oracle relies on it) */
        if (dscale < 4 * (nd - 1 - weight)) dscale = 4 * (nd - 1 - weight);
        uint8_t v[64];
        size_t n = numeric(v, sign, weight, dscale, dg, nd);
        int k = (int)(num_next() % (sizeof ps / sizeof ps[0]));
        int prec = ps[k][0], scale = ps[k][1];
        ferry_buf_reset(&text);
        assert_int_equal(ferry__pg_numeric_text(v, n, &text), FERRY_OK);
        i128_t want;
        bool ok = oracle(text.data, prec, scale, &want);
        struct ferry_decimal128 d = {0, 0};
        int rc = ferry__pg_numeric_dec128(v, n, prec, scale, &d);
        if (rc != (ok ? FERRY_OK : FERRY_EINVAL))
            fprintf(stderr, "numeric %s as decimal128(%d,%d): code %d\n", text.data, prec, scale,
                    rc);
        assert_int_equal(rc, ok ? FERRY_OK : FERRY_EINVAL);
        if (ok) {
            i128_t got = (i128_t)(((u128_t)(uint64_t)d.hi << 64) | d.lo);
            assert_true(got == want);
            fits++;
        } else {
            refused++;
        }
    }
    /* both outcomes were exercised */
    assert_true(fits > 10000);
    assert_true(refused > 10000);
    ferry_buf_release(&text);
}

/* Malformed input the fast path must not accept: a group of 10000, a length that does not
 * match ndigits, an unknown sign word, a dscale above 0x3FFF. */
static void test_numeric_dec128_malformed(void **state)
{
    (void)state;
    uint8_t v[64];
    struct ferry_decimal128 d;
    int big[] = {10000};
    size_t n = numeric(v, 0, 0, 0, big, 1);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    int one[] = {1, 2};
    n = numeric(v, 0, 0, 0, one, 2);
    assert_int_equal(ferry__pg_numeric_dec128(v, n - 2, 12, 2, &d), FERRY_EINVAL);
    assert_int_equal(ferry__pg_numeric_dec128(v, n + 2, 12, 2, &d), FERRY_EINVAL);
    n = numeric(v, 0x1234, 0, 0, one, 1);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    n = numeric(v, 0, 0, 0x4000, one, 1);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    /* NaN, +-Infinity */
    n = numeric(v, 0xC000, 0, 0, NULL, 0);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    n = numeric(v, 0xF000, 0, 0, NULL, 0);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_EINVAL);
    /* negative zero is zero */
    n = numeric(v, 0x4000, 0, 2, NULL, 0);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 12, 2, &d), FERRY_OK);
    assert_true(d.lo == 0 && d.hi == 0);
    /* 40 digits: not decimal128 at any precision */
    int wide[] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    n = numeric(v, 0, 10, 0, wide, 11);
    assert_int_equal(ferry__pg_numeric_dec128(v, n, 38, 0, &d), FERRY_EINVAL);
}

/* ---- decoding into a row writer ---- */

struct sink {
    struct ferry_batch *b[8];
    int n;
};

static int capture(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct sink *s = ctx;
    assert_true(s->n < 8);
    s->b[s->n++] = b;
    return FERRY_OK;
}

static struct ferry_schema *schema_of(const struct ferry_pg_copy_col *cols, int n)
{
    struct ferry_schema *s = ferry_schema_new();
    for (int i = 0; i < n; i++) {
        assert_int_equal(ferry_schema_add_field(s, cols[i].name, cols[i].type, true, NULL),
                         FERRY_OK);
        s->fields[i].precision = cols[i].precision;
        s->fields[i].scale = cols[i].scale;
    }
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static const struct ferry_pg_copy_col all_cols[] = {
    {"b", FERRY_PG_W_BOOL, FERRY_TYPE_BOOL, 0, 0},
    {"i2", FERRY_PG_W_INT2, FERRY_TYPE_INT16, 0, 0},
    {"i4", FERRY_PG_W_INT4, FERRY_TYPE_INT32, 0, 0},
    {"i8", FERRY_PG_W_INT8, FERRY_TYPE_INT64, 0, 0},
    {"f4", FERRY_PG_W_FLOAT4, FERRY_TYPE_FLOAT32, 0, 0},
    {"f8", FERRY_PG_W_FLOAT8, FERRY_TYPE_FLOAT64, 0, 0},
    {"n", FERRY_PG_W_NUMERIC, FERRY_TYPE_DECIMAL_TEXT, 0, 0},
    {"n2", FERRY_PG_W_NUMERIC, FERRY_TYPE_DECIMAL128, 12, 2},
    {"t", FERRY_PG_W_TEXT, FERRY_TYPE_UTF8, 0, 0},
    {"by", FERRY_PG_W_BYTEA, FERRY_TYPE_BINARY, 0, 0},
    {"d", FERRY_PG_W_DATE, FERRY_TYPE_DATE32, 0, 0},
    {"tm", FERRY_PG_W_TIME, FERRY_TYPE_TIME64_US, 0, 0},
    {"ts", FERRY_PG_W_TIMESTAMP, FERRY_TYPE_TIMESTAMP_US, 0, 0},
    {"tz", FERRY_PG_W_TIMESTAMPTZ, FERRY_TYPE_TIMESTAMPTZ_US, 0, 0},
    {"u", FERRY_PG_W_UUID, FERRY_TYPE_UUID, 0, 0},
    {"jb", FERRY_PG_W_JSONB, FERRY_TYPE_JSON, 0, 0},
};
#define NALL ((int)(sizeof all_cols / sizeof all_cols[0]))

static void field(struct bytes *x, const void *p, int n)
{
    p32(x, n);
    if (n > 0) put(x, p, (size_t)n);
}

/* Row 1: every value set; row 2: all NULL. */
static void two_rows(struct bytes *x)
{
    header(x);
    p16(x, NALL);
    uint8_t t = 1;
    field(x, &t, 1);
    struct bytes v = {.n = 0};
    p16(&v, 0x8000); /* -32768 */
    field(x, v.b, 2);
    v.n = 0;
    p32(&v, 0x7fffffff);
    field(x, v.b, 4);
    v.n = 0;
    p64(&v, (uint64_t)INT64_MIN);
    field(x, v.b, 8);
    float nanf_ = NAN;
    uint32_t fb;
    memcpy(&fb, &nanf_, 4);
    v.n = 0;
    p32(&v, fb);
    field(x, v.b, 4);
    double inf = -INFINITY;
    uint64_t db;
    memcpy(&db, &inf, 8);
    v.n = 0;
    p64(&v, db);
    field(x, v.b, 8);
    uint8_t num[64];
    int dg[] = {12, 3400};
    size_t nn = numeric(num, 0x4000, 0, 4, dg, 2);
    field(x, num, (int)nn);
    nn = numeric(num, 0, 0, 2, dg, 2);
    field(x, num, (int)nn); /* 12.34 */
    field(x, "h\xc3\xa9\"\n", 5);
    field(x, "\x00\xff", 2);
    v.n = 0;
    p32(&v, -10957); /* 1970-01-01 */
    field(x, v.b, 4);
    v.n = 0;
    p64(&v, 86399999999u);
    field(x, v.b, 8);
    v.n = 0;
    p64(&v, (uint64_t)(int64_t)-FERRY_PG_EPOCH_US - 1); /* 1969-12-31 23:59:59.999999 */
    field(x, v.b, 8);
    v.n = 0;
    p64(&v, 0); /* 2000-01-01 */
    field(x, v.b, 8);
    field(x, "0123456789abcdef", 16);
    field(x, "\x01{\"a\": 1}", 9);
    p16(x, NALL);
    for (int i = 0; i < NALL; i++)
        p32(x, -1);
    p16(x, -1);
}

static void check_rows(struct ferry_batch *b)
{
    assert_int_equal(b->length, 2);
    assert_true(ferry_col_bool(b, 0, 0));
    assert_int_equal(ferry_col_int(b, 1, 0), -32768);
    assert_int_equal(ferry_col_int(b, 2, 0), 2147483647);
    assert_true(ferry_col_int(b, 3, 0) == INT64_MIN);
    assert_true(isnan(ferry_col_float(b, 4, 0)));
    assert_true(isinf(ferry_col_float(b, 5, 0)) && ferry_col_float(b, 5, 0) < 0);
    size_t n;
    const uint8_t *p = ferry_col_bytes(b, 6, 0, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(p, "-12.3400", 8);
    char buf[64];
    ferry_decimal128_to_text(ferry_col_dec128(b, 7, 0), 2, buf, sizeof buf);
    assert_string_equal(buf, "12.34");
    p = ferry_col_bytes(b, 8, 0, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(p, "h\xc3\xa9\"\n", 5);
    p = ferry_col_bytes(b, 9, 0, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(p, "\x00\xff", 2);
    assert_int_equal(ferry_col_int(b, 10, 0), 0);
    assert_int_equal(ferry_col_int(b, 11, 0), 86399999999);
    assert_int_equal(ferry_col_int(b, 12, 0), -1);
    assert_int_equal(ferry_col_int(b, 13, 0), FERRY_PG_EPOCH_US);
    assert_memory_equal(ferry_col_fixed(b, 14, 0), "0123456789abcdef", 16);
    p = ferry_col_bytes(b, 15, 0, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(p, "{\"a\": 1}", 8);
    for (int c = 0; c < NALL; c++) {
        assert_false(ferry_col_is_null(b, c, 0));
        assert_true(ferry_col_is_null(b, c, 1));
    }
}

static bool g_specials; /* decode_chunks: the run allows special values */

static int decode_chunks(const struct bytes *x, size_t chunk, struct sink *sk,
                         struct ferry_error *err)
{
    struct ferry_schema *s = schema_of(all_cols, NALL);
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, capture, sk);
    struct ferry_pg_copy d;
    ferry__pg_copy_init(&d, all_cols, NALL, "test");
    d.specials = g_specials;
    int rc = FERRY_OK;
    for (size_t at = 0; at < x->n && rc == FERRY_OK; at += chunk) {
        size_t len = x->n - at < chunk ? x->n - at : chunk;
        rc = ferry__pg_copy_feed(&d, x->b + at, len, rw, err);
    }
    if (rc == FERRY_OK) rc = ferry__pg_copy_finish(&d, err);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, err);
    ferry__pg_copy_release(&d);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    return rc;
}

static void free_sink(struct sink *sk)
{
    for (int i = 0; i < sk->n; i++)
        ferry_batch_unref(sk->b[i]);
    sk->n = 0;
}

static void test_decode_all_types(void **state)
{
    (void)state;
    struct bytes x = {.n = 0};
    two_rows(&x);
    /* one chunk, then every split size down to single bytes */
    size_t sizes[] = {x.n, 1, 2, 3, 7, 19, 20, 64};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct sink sk = {.n = 0};
        struct ferry_error err = {0};
        assert_int_equal(decode_chunks(&x, sizes[i], &sk, &err), FERRY_OK);
        assert_int_equal(sk.n, 1);
        check_rows(sk.b[0]);
        free_sink(&sk);
    }
}

static void expect_error(struct bytes *x, const char *needle)
{
    struct sink sk = {.n = 0};
    struct ferry_error err = {0};
    assert_int_not_equal(decode_chunks(x, x->n, &sk, &err), FERRY_OK);
    if (strstr(err.message, needle) == NULL) fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
    free_sink(&sk);
}

static void test_decode_errors(void **state)
{
    (void)state;
    struct bytes x = {.n = 0};
    /* bad signature */
    put(&x, "PGCOPZ\n\xff\r\n\0", 11);
    p32(&x, 0);
    p32(&x, 0);
    expect_error(&x, "signature");
    /* OIDs flag */
    x.n = 0;
    header(&x);
    x.b[11 + 1] = 1; /* bit 16 */
    expect_error(&x, "flags");
    /* wrong field count */
    x.n = 0;
    header(&x);
    p16(&x, 3);
    expect_error(&x, "has 3 fields");
    /* truncated stream */
    x.n = 0;
    two_rows(&x);
    x.n -= 2;
    expect_error(&x, "ended early");
    /* bytes after the trailer */
    x.n = 0;
    two_rows(&x);
    p16(&x, 0);
    expect_error(&x, "after the COPY trailer");
    /* a wrong length for an int4 names the column and row */
    x.n = 0;
    header(&x);
    p16(&x, NALL);
    p32(&x, -1);
    p32(&x, -1);
    p32(&x, 2); /* i4 with 2 bytes */
    p16(&x, 0);
    for (int i = 3; i < NALL; i++)
        p32(&x, -1);
    p16(&x, -1);
    expect_error(&x, "column \"i4\", row 1");
    /* timestamp infinity and jsonb version */
    x.n = 0;
    header(&x);
    p16(&x, NALL);
    for (int i = 0; i < NALL; i++) {
        if (i == 12) {
            p32(&x, 8);
            p64(&x, (uint64_t)INT64_MAX);
        } else {
            p32(&x, -1);
        }
    }
    p16(&x, -1);
    expect_error(&x, "infinity");
    x.n = 0;
    header(&x);
    p16(&x, NALL);
    for (int i = 0; i < NALL; i++) {
        if (i == 15)
            field(&x, "\x02{}", 3);
        else
            p32(&x, -1);
    }
    p16(&x, -1);
    expect_error(&x, "jsonb version");
    /* NaN in a decimal128 column */
    x.n = 0;
    header(&x);
    p16(&x, NALL);
    for (int i = 0; i < NALL; i++) {
        if (i == 7) {
            uint8_t num[16];
            size_t nn = numeric(num, 0xC000, 0, 0, NULL, 0);
            field(&x, num, (int)nn);
        } else {
            p32(&x, -1);
        }
    }
    p16(&x, -1);
    expect_error(&x, "NaN does not fit decimal128(12,2)");
}

/* One row: NULL everywhere but column `at` (n bytes of v); for the special-values test. */
static void one_value_row(struct bytes *x, int at, const void *v, int n)
{
    x->n = 0;
    header(x);
    p16(x, NALL);
    for (int i = 0; i < NALL; i++) {
        if (i == at)
            field(x, v, n);
        else
            p32(x, -1);
    }
    p16(x, -1);
}

/* With the run's special_values: PostgreSQL's +-infinity and numeric(p,s) NaN become
 * ferry's special values (connector.h); a finite timestamp that would equal +infinity's
 * number is still refused. */
static void test_decode_specials(void **state)
{
    (void)state;
    struct bytes x = {.n = 0};
    uint8_t v[16];
    struct {
        int col;
        int64_t pg; /* PostgreSQL's value (8 bytes for timestamps, 4 for dates) */
        int64_t want;
    } cases[] = {{10, INT32_MAX, FERRY_SPECIAL_DATE_PINF},
                 {10, INT32_MIN, FERRY_SPECIAL_DATE_NINF},
                 {12, INT64_MAX, FERRY_SPECIAL_TS_PINF},
                 {13, INT64_MIN, FERRY_SPECIAL_TS_NINF}};
    g_specials = true;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int n = cases[k].col == 10 ? 4 : 8;
        for (int i = 0; i < n; i++)
            v[i] = (uint8_t)((uint64_t)cases[k].pg >> (8 * (n - 1 - i)));
        one_value_row(&x, cases[k].col, v, n);
        struct sink sk = {.n = 0};
        struct ferry_error err = {0};
        assert_int_equal(decode_chunks(&x, x.n, &sk, &err), FERRY_OK);
        assert_int_equal(ferry_col_int(sk.b[0], cases[k].col, 0), cases[k].want);
        free_sink(&sk);
    }
    size_t nn = numeric(v, 0xC000, 0, 0, NULL, 0);
    one_value_row(&x, 7, v, (int)nn);
    struct sink sk = {.n = 0};
    struct ferry_error err = {0};
    assert_int_equal(decode_chunks(&x, x.n, &sk, &err), FERRY_OK);
    struct ferry_decimal128 d = ferry_col_dec128(sk.b[0], 7, 0);
    assert_true(d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO);
    free_sink(&sk);
    /* 294247-01-10 04:00:54.775807 (PostgreSQL has it): ferry's +infinity number, refused */
    int64_t us = INT64_MAX - FERRY_PG_EPOCH_US;
    for (int i = 0; i < 8; i++)
        v[i] = (uint8_t)((uint64_t)us >> (8 * (7 - i)));
    one_value_row(&x, 12, v, 8);
    expect_error(&x, "out of range");
    g_specials = false;
    /* without it, the same infinity is refused as before */
    one_value_row(&x, 10, "\x7f\xff\xff\xff", 4);
    expect_error(&x, "date infinity has no value in this sink");
}

/* ---- pg_common ---- */

static void split_is(const char *in, const char *schema, const char *table)
{
    char *s = NULL, *t = NULL;
    struct ferry_error err;
    assert_int_equal(ferry__pg_split_name(in, &s, &t, &err), FERRY_OK);
    assert_string_equal(s, schema);
    assert_string_equal(t, table);
    ferry_free(s);
    ferry_free(t);
}

static void test_names(void **state)
{
    (void)state;
    split_is("orders", "public", "orders");
    split_is("sales.Orders", "sales", "Orders");
    split_is("\"my schema\".\"t.x\"", "my schema", "t.x");
    split_is("\"a\"\"b\"", "public", "a\"b");
    char *s = NULL, *t = NULL;
    struct ferry_error err;
    assert_int_equal(ferry__pg_split_name("a.b.c", &s, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__pg_split_name("\"open", &s, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__pg_split_name("a.", &s, &t, &err), FERRY_ECONFIG);
    assert_null(s);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_quote_ident(&b, "we\"ird; DROP", &err), FERRY_OK);
    assert_string_equal(b.data, "\"we\"\"ird; DROP\"");
    char name[65];
    memset(name, 'x', 64);
    name[64] = '\0';
    assert_int_equal(ferry__pg_quote_ident(&b, name, &err), FERRY_ECONFIG);
    name[63] = '\0';
    ferry_buf_reset(&b);
    assert_int_equal(ferry__pg_quote_ident(&b, name, &err), FERRY_OK);
    assert_int_equal(b.len, 65);
    ferry_buf_release(&b);
}

static void test_type_map(void **state)
{
    (void)state;
    enum ferry_type t;
    int p, s;
    ferry__pg_map_type(FERRY_PG_OID_NUMERIC, ((12 << 16) | 2) + 4, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_DECIMAL128);
    assert_int_equal(p, 12);
    assert_int_equal(s, 2);
    ferry__pg_map_type(FERRY_PG_OID_NUMERIC, ((5 << 16) | (-2 & 0x7ff)) + 4, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_DECIMAL128);
    assert_int_equal(s, -2);
    ferry__pg_map_type(FERRY_PG_OID_NUMERIC, -1, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_DECIMAL_TEXT);
    ferry__pg_map_type(FERRY_PG_OID_NUMERIC, ((50 << 16) | 2) + 4, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_DECIMAL_TEXT);
    ferry__pg_map_type(FERRY_PG_OID_JSONB, -1, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_JSON);
    ferry__pg_map_type(1007 /* int4[] */, -1, &t, &p, &s);
    assert_int_equal(t, FERRY_TYPE_UTF8);
    assert_false(ferry__pg_type_is_native(1007));
    enum ferry_pg_wire w;
    assert_false(ferry__pg_wire_of(1007, &w));
    assert_true(ferry__pg_wire_of(FERRY_PG_OID_TIMESTAMPTZ, &w));
    assert_int_equal(w, FERRY_PG_W_TIMESTAMPTZ);
    struct ferry_field f = {.type = FERRY_TYPE_DECIMAL128, .precision = 12, .scale = 2};
    char buf[64];
    ferry__pg_sql_type(&f, buf, sizeof buf);
    assert_string_equal(buf, "numeric(12,2)");
    assert_int_equal(ferry__pg_type_oid(&f), FERRY_PG_OID_NUMERIC);
}

/* The source's own type: stored as origin_type, compared with a destination column's. */
static void test_origin_types(void **state)
{
    (void)state;
    assert_string_equal(ferry__pg_unqualified("src.mood[]"), "mood[]");
    assert_string_equal(ferry__pg_unqualified("\"a.b\".\"T x\""), "\"T x\"");
    assert_string_equal(ferry__pg_unqualified("numeric(20,2)"), "numeric(20,2)");
    assert_string_equal(ferry__pg_unqualified("timestamp(3) without time zone"),
                        "timestamp(3) without time zone");
    assert_true(ferry__pg_same_type("integer[]", "integer[]"));
    assert_true(ferry__pg_same_type("src.mood", "pre.mood"));
    assert_true(ferry__pg_same_type("src.mood[]", "pre.mood[]"));
    assert_false(ferry__pg_same_type("src.mood", "pre.mood[]"));
    assert_false(ferry__pg_same_type("text", "interval"));
    assert_false(ferry__pg_same_type("bit(3)", "bit(4)"));
    assert_false(ferry__pg_same_type("interval", "public.\"interval\""));
    assert_false(ferry__pg_same_type(NULL, "text"));
    struct ferry_schema *sc = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(sc, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    assert_null(ferry__pg_origin(&sc->fields[0]));
    assert_int_equal(ferry__pg_set_origin(sc, 0, "int4range", NULL), FERRY_OK);
    assert_string_equal(sc->fields[0].origin_type, "postgres:int4range");
    assert_string_equal(ferry__pg_origin(&sc->fields[0]), "int4range");
    assert_int_equal(ferry_schema_set_origin(sc, 0, "mysql:set('a')", NULL), FERRY_OK);
    assert_null(ferry__pg_origin(&sc->fields[0])); /* another source's type */
    ferry_schema_unref(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numeric_text),
        cmocka_unit_test(test_numeric_dec128),
        cmocka_unit_test(test_numeric_dec128_oracle),
        cmocka_unit_test(test_numeric_dec128_malformed),
        cmocka_unit_test(test_decode_all_types),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_specials),
        cmocka_unit_test(test_origin_types),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_type_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
