/* connectors/postgres/pg_encode.c - COPY binary encoding of batches for the postgres sink.
 *
 * Owns the byte layout of COPY ... FROM STDIN (FORMAT binary) and of each value's binary
 * send format (PostgreSQL's protocol documentation, "COPY file formats" and the *_send
 * functions' formats): big-endian integers, IEEE floats as their bit patterns, numeric as
 * base-10000 digit groups, dates and timestamps relative to 2000-01-01, jsonb with a leading
 * version byte. Calls only the batch readers and ferry_buf. Called by pg_sink.c and
 * tests/unit/test_pg_encode.c.
 *
 * Hot path (ferry__pg_copy_rows): columns resolved once per call into buffer pointers, one
 * reserve per row, values read straight from the column buffers, nothing allocated per row
 * (docs/internals/postgres.md). decimal128 and integers become base-10000 groups
 * arithmetically; only decimal text goes through ferry__pg_numeric_from_text. */
#include "connectors/postgres/pg_encode.h"
#include "ferry/connector.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* pg_type OIDs of the built-in types (fixed since PostgreSQL 7.x, listed in pg_type.dat). */
enum {
    OID_BOOL = 16,
    OID_BYTEA = 17,
    OID_INT8 = 20,
    OID_INT2 = 21,
    OID_INT4 = 23,
    OID_TEXT = 25,
    OID_JSON = 114,
    OID_FLOAT4 = 700,
    OID_FLOAT8 = 701,
    OID_VARCHAR = 1043,
    OID_DATE = 1082,
    OID_TIME = 1083,
    OID_TIMESTAMP = 1114,
    OID_TIMESTAMPTZ = 1184,
    OID_NUMERIC = 1700,
    OID_UUID = 2950,
    OID_JSONB = 3802,
};

#define PG_EPOCH_DAYS 10957                  /* 2000-01-01 - 1970-01-01 in days */
#define PG_EPOCH_US INT64_C(946684800000000) /* the same in microseconds */

#define NUMERIC_POS 0x0000
#define NUMERIC_NEG 0x4000
#define NUMERIC_NAN 0xC000
#define NUMERIC_PINF 0xD000
#define NUMERIC_NINF 0xF000
#define NUMERIC_DSCALE_MAX 0x3FFF

static const char signature[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};

/* ---- type compatibility ------------------------------------------------------------------- */

static int int_digits(enum ferry_type t)
{
    switch (t) {
    case FERRY_TYPE_INT8:
        return 3;
    case FERRY_TYPE_INT16:
        return 5;
    case FERRY_TYPE_INT32:
        return 10;
    case FERRY_TYPE_INT64:
        return 19;
    default:
        return 0;
    }
}

/* numeric(P,S) from its typmod; false for unconstrained numeric. PostgreSQL 15 stores the
 * scale as a signed 11-bit field (negative scales). */
static bool numeric_typmod(int32_t typmod, int *p, int *s)
{
    if (typmod < 4) return false;
    int32_t t = typmod - 4;
    *p = (t >> 16) & 0xffff;
    *s = ((t & 0x7ff) ^ 1024) - 1024;
    return true;
}

/* Time types keep microseconds only without a precision or with precision 6. */
static bool full_precision(int32_t typmod)
{
    return typmod < 0 || typmod >= 6;
}

enum ferry_pg_wire ferry__pg_wire_for(const struct ferry_field *f, uint32_t oid, int32_t typmod)
{
    int p, s, d = int_digits(f->type);
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        return oid == OID_BOOL ? FERRY_PG_WIRE_BOOL : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        if (oid == OID_INT2 && d <= 5) return FERRY_PG_WIRE_INT2;
        if (oid == OID_INT4 && d <= 10) return FERRY_PG_WIRE_INT4;
        if (oid == OID_INT8) return FERRY_PG_WIRE_INT8;
        if (oid == OID_NUMERIC && (!numeric_typmod(typmod, &p, &s) || (s >= 0 && p - s >= d)))
            return FERRY_PG_WIRE_NUMERIC;
        return FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_FLOAT32:
        if (oid == OID_FLOAT4) return FERRY_PG_WIRE_FLOAT4;
        return oid == OID_FLOAT8 ? FERRY_PG_WIRE_FLOAT8 : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_FLOAT64:
        return oid == OID_FLOAT8 ? FERRY_PG_WIRE_FLOAT8 : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_DECIMAL128:
        if (oid != OID_NUMERIC) return FERRY_PG_WIRE_NONE;
        if (!numeric_typmod(typmod, &p, &s)) return FERRY_PG_WIRE_NUMERIC;
        return s >= f->scale && p - s >= f->precision - f->scale ? FERRY_PG_WIRE_NUMERIC
                                                                 : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_DECIMAL_TEXT:
        return oid == OID_NUMERIC && !numeric_typmod(typmod, &p, &s) ? FERRY_PG_WIRE_NUMERIC
                                                                     : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_UTF8:
        return oid == OID_TEXT || (oid == OID_VARCHAR && typmod < 0) ? FERRY_PG_WIRE_TEXT
                                                                     : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_JSON:
        if (oid == OID_JSONB) return FERRY_PG_WIRE_JSONB;
        return oid == OID_JSON || oid == OID_TEXT ? FERRY_PG_WIRE_TEXT : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_BINARY:
        return oid == OID_BYTEA ? FERRY_PG_WIRE_BYTEA : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_DATE32:
        return oid == OID_DATE ? FERRY_PG_WIRE_DATE : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_TIME64_US:
        return oid == OID_TIME && full_precision(typmod) ? FERRY_PG_WIRE_TIME : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_TIMESTAMP_US:
        return oid == OID_TIMESTAMP && full_precision(typmod) ? FERRY_PG_WIRE_TIMESTAMP
                                                              : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return oid == OID_TIMESTAMPTZ && full_precision(typmod) ? FERRY_PG_WIRE_TIMESTAMP
                                                                : FERRY_PG_WIRE_NONE;
    case FERRY_TYPE_UUID:
        return oid == OID_UUID ? FERRY_PG_WIRE_UUID : FERRY_PG_WIRE_NONE;
    default:
        return FERRY_PG_WIRE_NONE;
    }
}

/* ---- big-endian writers (the caller reserved the room) ------------------------------------ */

static inline void put16(struct ferry_buf *o, uint16_t v)
{
    uint8_t *p = (uint8_t *)o->data + o->len;
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    o->len += 2;
}

static inline void put32(struct ferry_buf *o, uint32_t v)
{
    uint8_t *p = (uint8_t *)o->data + o->len;
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    o->len += 4;
}

static inline void put64(struct ferry_buf *o, uint64_t v)
{
    put32(o, (uint32_t)(v >> 32));
    put32(o, (uint32_t)v);
}

static inline void put_bytes(struct ferry_buf *o, const void *p, size_t n)
{
    if (n) memcpy(o->data + o->len, p, n);
    o->len += n;
}

int ferry__pg_copy_header(struct ferry_buf *out)
{
    if (ferry_buf_reserve(out, 19) != FERRY_OK) return FERRY_ENOMEM;
    put_bytes(out, signature, sizeof signature);
    put32(out, 0); /* flags: no OIDs */
    put32(out, 0); /* header extension length */
    return FERRY_OK;
}

int ferry__pg_copy_trailer(struct ferry_buf *out)
{
    if (ferry_buf_reserve(out, 2) != FERRY_OK) return FERRY_ENOMEM;
    put16(out, 0xFFFF);
    return FERRY_OK;
}

/* ---- numeric ------------------------------------------------------------------------------ */

static bool word_is(const char *s, size_t n, const char *w)
{
    size_t k = strlen(w);
    if (n != k) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != w[i]) return false;
    }
    return true;
}

static int special(struct ferry_buf *out, uint16_t sign)
{
    if (ferry_buf_reserve(out, 8) != FERRY_OK) return FERRY_ENOMEM;
    put16(out, 0);
    put16(out, 0);
    put16(out, sign);
    put16(out, 0);
    return FERRY_OK;
}

static inline long floordiv4(long x)
{
    return x >= 0 ? x / 4 : -((-x + 3) / 4);
}

int ferry__pg_numeric_from_text(struct ferry_buf *out, const char *s, size_t n)
{
    if (word_is(s, n, "nan")) return special(out, NUMERIC_NAN);
    if (word_is(s, n, "infinity") || word_is(s, n, "+infinity") || word_is(s, n, "inf") ||
        word_is(s, n, "+inf"))
        return special(out, NUMERIC_PINF);
    if (word_is(s, n, "-infinity") || word_is(s, n, "-inf")) return special(out, NUMERIC_NINF);

    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    size_t int_start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    size_t int_len = i - int_start, frac_start = i, frac_len = 0;
    if (i < n && s[i] == '.') {
        frac_start = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        frac_len = i - frac_start;
    }
    if (int_len + frac_len == 0) return FERRY_EINVAL;
    long exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool eneg = false;
        if (i < n && (s[i] == '-' || s[i] == '+')) eneg = s[i++] == '-';
        size_t e0 = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (exp > 1000000) return FERRY_EINVAL;
            exp = exp * 10 + (s[i++] - '0');
        }
        if (i == e0) return FERRY_EINVAL;
        if (eneg) exp = -exp;
    }
    if (i != n) return FERRY_EINVAL;

    /* C = integer digits then fraction digits; the point sits after `point` of them. */
    long total = (long)(int_len + frac_len);
    long point = (long)int_len + exp;
    long dscale = (long)frac_len - exp;
    if (dscale < 0) dscale = 0;
    if (dscale > NUMERIC_DSCALE_MAX) return FERRY_EINVAL;
#define DIGIT(k)                                                                                   \
    ((k) < (long)int_len ? s[int_start + (size_t)(k)] - '0'                                        \
                         : s[frac_start + (size_t)((k) - (long)int_len)] - '0')
    long a = 0, z = total - 1;
    while (a < total && DIGIT(a) == 0)
        a++;
    if (a == total) { /* zero keeps its display scale */
        if (ferry_buf_reserve(out, 8) != FERRY_OK) return FERRY_ENOMEM;
        put16(out, 0);
        put16(out, 0);
        put16(out, NUMERIC_POS);
        put16(out, (uint16_t)dscale);
        return FERRY_OK;
    }
    while (DIGIT(z) == 0)
        z--;
    /* Digit k stands for 10^(point-1-k); group g holds 10^(4g) .. 10^(4g+3). */
    long weight = floordiv4(point - 1 - a);
    long last = floordiv4(point - 1 - z);
    long ndigits = weight - last + 1;
    if (weight > 32767 || last < -32768 || ndigits > 32767) return FERRY_EINVAL;
    if (ferry_buf_reserve(out, 8 + 2 * (size_t)ndigits) != FERRY_OK) return FERRY_ENOMEM;
    put16(out, (uint16_t)ndigits);
    put16(out, (uint16_t)(int16_t)weight);
    put16(out, neg ? NUMERIC_NEG : NUMERIC_POS);
    put16(out, (uint16_t)dscale);
    static const int pow10[4] = {1, 10, 100, 1000};
    long g = weight;
    int group = 0;
    for (long k = a; k <= z; k++) {
        long x = point - 1 - k;
        long gk = floordiv4(x);
        if (gk != g) { /* consecutive digits move at most one group down */
            put16(out, (uint16_t)group);
            group = 0;
            g = gk;
        }
        group += DIGIT(k) * pow10[x - 4 * gk];
    }
    put16(out, (uint16_t)group);
#undef DIGIT
    return FERRY_OK;
}

/* The 128-bit magnitude as 32-bit limbs (most significant first), so that dividing it by a
 * small constant is four 64-by-constant divisions the compiler turns into multiplications
 * (an unsigned __int128 division would call the slow generic __udivti3). */
struct mag {
    uint32_t l[4];
};

#define MAG_DIVMOD(m, d, rem)                                                                      \
    do {                                                                                           \
        uint64_t r_ = 0;                                                                           \
        for (int i_ = 0; i_ < 4; i_++) {                                                           \
            uint64_t cur_ = r_ << 32 | (m)->l[i_];                                                 \
            (m)->l[i_] = (uint32_t)(cur_ / (d));                                                   \
            r_ = cur_ % (d);                                                                       \
        }                                                                                          \
        (rem) = (uint32_t)r_;                                                                      \
    } while (0)

static inline bool mag_fits64(const struct mag *m)
{
    return (m->l[0] | m->l[1]) == 0;
}

static inline uint64_t mag_low64(const struct mag *m)
{
    return (uint64_t)m->l[2] << 32 | m->l[3];
}

/* Base-10000 groups of a magnitude, least significant first, until it is zero. */
static int mag_groups(struct mag *m, uint16_t *g, int n)
{
    uint32_t r;
    while (!mag_fits64(m)) {
        MAG_DIVMOD(m, 10000u, r);
        g[n++] = (uint16_t)r;
    }
    for (uint64_t x = mag_low64(m); x != 0; x /= 10000)
        g[n++] = (uint16_t)(x % 10000);
    return n;
}

/* A decimal128's numeric header and its groups g[first .. first+ndigits), least significant
 * first (the order they are computed in; the writer reverses them). */
struct dec_numeric {
    int ndigits, weight, dscale, first;
    uint16_t sign;
    uint16_t g[12]; /* 39 digits + 3 of alignment = at most 11 groups */
};

static int dec_numeric(struct ferry_decimal128 v, int scale, struct dec_numeric *d)
{
    bool neg = v.hi < 0;
    uint64_t lo = v.lo, hi = (uint64_t)v.hi;
    if (neg) { /* two's complement magnitude; also right for the most negative value */
        lo = ~lo + 1;
        hi = ~hi + (lo == 0);
    }
    d->dscale = scale > 0 ? scale : 0;
    if (d->dscale > NUMERIC_DSCALE_MAX) return FERRY_EINVAL;
    if ((lo | hi) == 0) { /* zero keeps its display scale, never negative */
        d->ndigits = 0;
        d->first = 0;
        d->weight = 0;
        d->sign = NUMERIC_POS;
        return FERRY_OK;
    }
    /* The unscaled integer's units are 10^e. PostgreSQL's groups sit at multiples of 4
     * decimal places, so when e is not a multiple of 4 the lowest 4 - (e mod 4) digits form a group
     * of their own, shifted up to its top: 123.45 (e = -2) is [123, 4500] and 7e5 (e = 5) is [70]
     * at weight 1. The shift is applied to that remainder, not to the magnitude, which could then
     * overflow 128 bits. */
    long e = -(long)scale;
    long low = floordiv4(e); /* weight of the lowest group */
    uint16_t *g = d->g;
    int n = 0;
    if (hi == 0) { /* most values: one 64-bit word, no limb arithmetic at all */
        uint64_t x = lo;
        switch (e - 4 * low) {
        case 1:
            g[n++] = (uint16_t)(x % 1000 * 10);
            x /= 1000;
            break;
        case 2:
            g[n++] = (uint16_t)(x % 100 * 100);
            x /= 100;
            break;
        case 3:
            g[n++] = (uint16_t)(x % 10 * 1000);
            x /= 10;
            break;
        default:
            break;
        }
        for (; x != 0; x /= 10000)
            g[n++] = (uint16_t)(x % 10000);
    } else {
        struct mag m = {{(uint32_t)(hi >> 32), (uint32_t)hi, (uint32_t)(lo >> 32), (uint32_t)lo}};
        uint32_t r;
        switch (e - 4 * low) {
        case 1:
            MAG_DIVMOD(&m, 1000u, r);
            g[n++] = (uint16_t)(r * 10);
            break;
        case 2:
            MAG_DIVMOD(&m, 100u, r);
            g[n++] = (uint16_t)(r * 100);
            break;
        case 3:
            MAG_DIVMOD(&m, 10u, r);
            g[n++] = (uint16_t)(r * 1000);
            break;
        default:
            break;
        }
        n = mag_groups(&m, g, n);
    }
    int first = 0; /* trailing zero groups are not sent */
    while (g[first] == 0)
        first++;
    long weight = low + n - 1; /* g[n-1] is nonzero: mag_groups stops at zero */
    if (weight > 32767 || low + first < -32768) return FERRY_EINVAL;
    d->ndigits = n - first;
    d->first = first;
    d->weight = (int)weight;
    d->sign = neg ? NUMERIC_NEG : NUMERIC_POS;
    return FERRY_OK;
}

/* Through a local pointer: stores via out->data could alias out->len. */
static inline void put_dec_numeric(struct ferry_buf *out, const struct dec_numeric *d)
{
    uint8_t *p = (uint8_t *)out->data + out->len;
    uint16_t h[4] = {(uint16_t)d->ndigits, (uint16_t)(int16_t)d->weight, d->sign,
                     (uint16_t)d->dscale};
    for (int i = 0; i < 4; i++, p += 2) {
        p[0] = (uint8_t)(h[i] >> 8);
        p[1] = (uint8_t)h[i];
    }
    for (int i = d->first + d->ndigits - 1; i >= d->first; i--, p += 2) {
        p[0] = (uint8_t)(d->g[i] >> 8);
        p[1] = (uint8_t)d->g[i];
    }
    out->len += 8 + 2 * (size_t)d->ndigits;
}

int ferry__pg_numeric_from_dec128(struct ferry_buf *out, struct ferry_decimal128 v, int scale)
{
    struct dec_numeric d;
    int rc = dec_numeric(v, scale, &d);
    if (rc != FERRY_OK) return rc;
    if (ferry_buf_reserve(out, 8 + 2 * (size_t)d.ndigits) != FERRY_OK) return FERRY_ENOMEM;
    put_dec_numeric(out, &d);
    return FERRY_OK;
}

/* ---- rows --------------------------------------------------------------------------------- */

static int value_error(struct ferry_error *err, const struct ferry_batch *b, int col, int64_t row,
                       const char *why)
{
    return ferry_error_set(err, FERRY_EINVAL, "postgres",
                           "column \"%s\", batch %" PRIu64 " row %" PRId64 ": %s",
                           b->schema->fields[col].name, b->seq, row, why);
}

/* A numeric field: 4-byte length, then the value (length patched once known). */
static int put_numeric(struct ferry_buf *out, const char *txt, size_t n)
{
    if (ferry_buf_reserve(out, 4) != FERRY_OK) return FERRY_ENOMEM;
    size_t at = out->len;
    out->len += 4;
    int rc = ferry__pg_numeric_from_text(out, txt, n);
    if (rc != FERRY_OK) {
        out->len = at;
        return rc;
    }
    size_t end = out->len;
    out->len = at;
    put32(out, (uint32_t)(end - at - 4));
    out->len = end;
    return FERRY_OK;
}

/* The same for a decimal128 (or an integer at scale 0): the length is known up front. */
static inline int put_numeric_dec128(struct ferry_buf *out, struct ferry_decimal128 v, int scale)
{
    struct dec_numeric d;
    int rc = dec_numeric(v, scale, &d);
    if (rc != FERRY_OK) return rc;
    size_t len = 8 + 2 * (size_t)d.ndigits;
    if (ferry_buf_reserve(out, 4 + len) != FERRY_OK) return FERRY_ENOMEM;
    put32(out, (uint32_t)len);
    put_dec_numeric(out, &d);
    return FERRY_OK;
}

static int encode_value(struct ferry_buf *out, const struct ferry_batch *b,
                        const struct ferry_pg_wire_col *c, int64_t r, struct ferry_error *err)
{
    const int col = c->col;
    enum ferry_pg_wire wire = c->wire;
    const struct ferry_field *f = &b->schema->fields[col];
    size_t len;
    const uint8_t *bytes;
    int n;
    int64_t v;
    switch (wire) {
    case FERRY_PG_WIRE_BOOL:
        if (ferry_buf_reserve(out, 5) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 1);
        out->data[out->len++] = ferry_col_bool(b, col, r) ? 1 : 0;
        return FERRY_OK;
    case FERRY_PG_WIRE_INT2:
        if (ferry_buf_reserve(out, 6) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 2);
        put16(out, (uint16_t)(int16_t)ferry_col_int(b, col, r));
        return FERRY_OK;
    case FERRY_PG_WIRE_INT4:
    case FERRY_PG_WIRE_DATE:
        v = ferry_col_int(b, col, r);
        /* PostgreSQL's date infinities are the special values themselves */
        if (wire == FERRY_PG_WIRE_DATE &&
            !(c->specials && (v == FERRY_SPECIAL_DATE_PINF || v == FERRY_SPECIAL_DATE_NINF))) {
            if (v < INT32_MIN + PG_EPOCH_DAYS)
                return value_error(err, b, col, r, "date out of range");
            v -= PG_EPOCH_DAYS;
        }
        if (ferry_buf_reserve(out, 8) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 4);
        put32(out, (uint32_t)(int32_t)v);
        return FERRY_OK;
    case FERRY_PG_WIRE_INT8:
    case FERRY_PG_WIRE_TIME:
    case FERRY_PG_WIRE_TIMESTAMP:
        v = ferry_col_int(b, col, r);
        /* and so are its timestamp infinities */
        if (wire == FERRY_PG_WIRE_TIMESTAMP &&
            !(c->specials && (v == FERRY_SPECIAL_TS_PINF || v == FERRY_SPECIAL_TS_NINF))) {
            if (v < INT64_MIN + PG_EPOCH_US)
                return value_error(err, b, col, r, "timestamp out of range");
            v -= PG_EPOCH_US;
        }
        if (ferry_buf_reserve(out, 12) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 8);
        put64(out, (uint64_t)v);
        return FERRY_OK;
    case FERRY_PG_WIRE_FLOAT4: {
        float fv = (float)ferry_col_float(b, col, r);
        uint32_t bits;
        memcpy(&bits, &fv, 4);
        if (ferry_buf_reserve(out, 8) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 4);
        put32(out, bits);
        return FERRY_OK;
    }
    case FERRY_PG_WIRE_FLOAT8: {
        double dv = ferry_col_float(b, col, r);
        uint64_t bits;
        memcpy(&bits, &dv, 8);
        if (ferry_buf_reserve(out, 12) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 8);
        put64(out, bits);
        return FERRY_OK;
    }
    case FERRY_PG_WIRE_NUMERIC:
        if (f->type == FERRY_TYPE_DECIMAL_TEXT) {
            bytes = ferry_col_bytes(b, col, r, &len);
            n = put_numeric(out, bytes ? (const char *)bytes : "", bytes ? len : 0);
        } else if (f->type == FERRY_TYPE_DECIMAL128) {
            struct ferry_decimal128 dv = ferry_col_dec128(b, col, r);
            bool nan = dv.hi == FERRY_SPECIAL_DEC_NAN_HI && dv.lo == FERRY_SPECIAL_DEC_NAN_LO;
            if (nan && !c->specials)
                return value_error(err, b, col, r,
                                   "decimal NaN from a source that is not postgres");
            if (nan) {
                if (ferry_buf_reserve(out, 4) != FERRY_OK) return FERRY_ENOMEM;
                put32(out, 8);
                return special(out, 0xC000); /* NaN */
            }
            n = put_numeric_dec128(out, dv, f->scale);
        } else {
            v = ferry_col_int(b, col, r);
            struct ferry_decimal128 iv = {.lo = (uint64_t)v, .hi = v < 0 ? -1 : 0};
            n = put_numeric_dec128(out, iv, 0);
        }
        if (n == FERRY_EINVAL) return value_error(err, b, col, r, "not a number numeric can hold");
        return n;
    case FERRY_PG_WIRE_OID:
        v = ferry_col_int(b, col, r);
        if (v < 0 || v > INT64_C(4294967295))
            return value_error(err, b, col, r, "integer outside oid's 0..4294967295");
        if (ferry_buf_reserve(out, 8) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 4);
        put32(out, (uint32_t)v);
        return FERRY_OK;
    case FERRY_PG_WIRE_TEXT_CHARS: {
        bytes = ferry_col_bytes(b, col, r, &len);
        int64_t chars = 0;
        for (size_t k = 0; k < len; k++)
            chars += (bytes[k] & 0xC0) != 0x80;
        if (c->chars > 0 ? chars > c->chars : chars != -(int64_t)c->chars) {
            char why[120];
            snprintf(why, sizeof why,
                     "text of %" PRId64 " characters where the column holds %s %d (it would be "
                     "cut or padded)",
                     chars, c->chars > 0 ? "at most" : "exactly",
                     c->chars > 0 ? c->chars : -c->chars);
            return value_error(err, b, col, r, why);
        }
        wire = FERRY_PG_WIRE_TEXT;
    }
        /* fall through */
    case FERRY_PG_WIRE_TEXT:
    case FERRY_PG_WIRE_JSONB:
    case FERRY_PG_WIRE_BYTEA: {
        bytes = ferry_col_bytes(b, col, r, &len);
        size_t ver = wire == FERRY_PG_WIRE_JSONB ? 1 : 0;
        if (len + ver > INT32_MAX) return value_error(err, b, col, r, "value larger than 2 GiB");
        if (ferry_buf_reserve(out, 4 + ver + len) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, (uint32_t)(len + ver));
        if (ver) out->data[out->len++] = 1; /* jsonb binary format version */
        put_bytes(out, bytes, len);
        return FERRY_OK;
    }
    case FERRY_PG_WIRE_UUID:
        if (ferry_buf_reserve(out, 20) != FERRY_OK) return FERRY_ENOMEM;
        put32(out, 16);
        put_bytes(out, ferry_col_fixed(b, col, r), 16);
        return FERRY_OK;
    default:
        return value_error(err, b, col, r, "no binary format for this column");
    }
}

/* One row the general way (every value through encode_value): rows the fast path below does
 * not take, and the rows where it found a value it must report. */
static int copy_row_slow(struct ferry_buf *out, const struct ferry_batch *b,
                         const struct ferry_pg_wire_col *cols, int n_cols, int64_t r,
                         struct ferry_error *err)
{
    if (ferry_buf_reserve(out, 2) != FERRY_OK) return FERRY_ENOMEM;
    put16(out, (uint16_t)n_cols);
    for (int i = 0; i < n_cols; i++) {
        const struct ferry_pg_wire_col *c = &cols[i];
        if (c->col == FERRY_PG_COL_ROWNUM) {
            if (ferry_buf_reserve(out, 12) != FERRY_OK) return FERRY_ENOMEM;
            put32(out, 8);
            put64(out, (uint64_t)r);
            continue;
        }
        if (c->col == FERRY_PG_COL_OP) {
            if (ferry_buf_reserve(out, 6) != FERRY_OK) return FERRY_ENOMEM;
            put32(out, 2);
            put16(out, (uint16_t)ferry_batch_op(b, r));
            continue;
        }
        if (ferry_col_is_null(b, c->col, r)) {
            if (ferry_buf_reserve(out, 4) != FERRY_OK) return FERRY_ENOMEM;
            put32(out, 0xFFFFFFFFu);
            continue;
        }
        int rc = encode_value(out, b, c, r, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

/* ---- the fast path ------------------------------------------------------------------------
 * Profiles of PG -> PG copies showed the per-value accessor calls (ferry_col_int, _dec128,
 * _bytes, _is_null) and a reserve per value as the largest part of the encoder. The fast path
 * resolves each column once per call into raw buffer pointers and a kind, reserves once per
 * row, and writes through a local pointer. Any value it would have to reject (a date or
 * timestamp PostgreSQL cannot hold, a numeric scale beyond numeric's) sends the whole row
 * back to copy_row_slow, which writes the same bytes or reports the error. */

enum fast_kind {
    FK_SLOW = 0, /* encode_value for this value */
    FK_ROWNUM,
    FK_OP,
    FK_BOOL,
    FK_INT,    /* integer source of width w -> INT2/INT4/INT8 */
    FK_DATE,   /* int32 days since 1970 -> int32 days since 2000 */
    FK_TS,     /* int64 us since 1970 -> us since 2000 */
    FK_TIME,   /* int64 us, as is */
    FK_FLOAT8, /* double -> float8 */
    FK_FLOAT4, /* float -> float4 */
    FK_DEC128, /* decimal128 -> numeric */
    FK_VAR,    /* text, json, bytea: the bytes */
    FK_JSONB,  /* version byte + the text */
    FK_UUID,
};

struct fast_col {
    enum fast_kind kind;
    int w; /* source width (FK_INT), wire width (FK_INT: 2, 4, 8) in ww */
    int ww;
    int scale; /* FK_DEC128 */
    const uint8_t *validity, *values, *data;
    const int32_t *offsets;
};

#define FAST_MAX_COLS 256
#define FAST_FIXED_MAX 34 /* 4 + numeric of a decimal128: 8 + 2 * 11 groups, rounded up */

static inline uint8_t *w16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static inline uint8_t *w32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *w64(uint8_t *p, uint64_t v)
{
    return w32(w32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static enum fast_kind fast_kind_of(const struct ferry_field *f, enum ferry_pg_wire wire, int *w,
                                   int *ww)
{
    *w = ferry_type_width(f->type);
    *ww = 0;
    switch (wire) {
    case FERRY_PG_WIRE_BOOL:
        return f->type == FERRY_TYPE_BOOL ? FK_BOOL : FK_SLOW;
    case FERRY_PG_WIRE_INT2:
    case FERRY_PG_WIRE_INT4:
    case FERRY_PG_WIRE_INT8:
        if (f->type != FERRY_TYPE_INT8 && f->type != FERRY_TYPE_INT16 &&
            f->type != FERRY_TYPE_INT32 && f->type != FERRY_TYPE_INT64)
            return FK_SLOW;
        *ww = wire == FERRY_PG_WIRE_INT2 ? 2 : wire == FERRY_PG_WIRE_INT4 ? 4 : 8;
        return FK_INT;
    case FERRY_PG_WIRE_DATE:
        return f->type == FERRY_TYPE_DATE32 ? FK_DATE : FK_SLOW;
    case FERRY_PG_WIRE_TIMESTAMP:
        return f->type == FERRY_TYPE_TIMESTAMP_US || f->type == FERRY_TYPE_TIMESTAMPTZ_US ? FK_TS
                                                                                          : FK_SLOW;
    case FERRY_PG_WIRE_TIME:
        return f->type == FERRY_TYPE_TIME64_US ? FK_TIME : FK_SLOW;
    case FERRY_PG_WIRE_FLOAT8:
        return f->type == FERRY_TYPE_FLOAT64 ? FK_FLOAT8 : FK_SLOW;
    case FERRY_PG_WIRE_FLOAT4:
        return f->type == FERRY_TYPE_FLOAT32 ? FK_FLOAT4 : FK_SLOW;
    case FERRY_PG_WIRE_NUMERIC:
        return f->type == FERRY_TYPE_DECIMAL128 ? FK_DEC128 : FK_SLOW;
    case FERRY_PG_WIRE_TEXT:
    case FERRY_PG_WIRE_BYTEA:
        return ferry_type_is_varwidth(f->type) ? FK_VAR : FK_SLOW;
    case FERRY_PG_WIRE_JSONB:
        return ferry_type_is_varwidth(f->type) ? FK_JSONB : FK_SLOW;
    case FERRY_PG_WIRE_UUID:
        return f->type == FERRY_TYPE_UUID ? FK_UUID : FK_SLOW;
    default:
        return FK_SLOW;
    }
}

/* Encodes row r (absolute index i = r + b->offset) at p, which has room for the row; returns
 * the end, or NULL when a value needs the slow path (*rc stays FERRY_OK) or failed (*rc).
 * FK_SLOW values are written by encode_value through out (synchronised around the call). */
static inline uint8_t *fast_row(struct ferry_buf *out, uint8_t *p, const struct ferry_batch *b,
                                const struct fast_col *fc, const struct ferry_pg_wire_col *cols,
                                int n_cols, int64_t r, size_t need, struct ferry_error *err,
                                int *rc)
{
    int64_t i = r + b->offset;
    p = w16(p, (uint16_t)n_cols);
    for (int k = 0; k < n_cols; k++) {
        const struct fast_col *c = &fc[k];
        if (c->validity != NULL && !(c->validity[i >> 3] & (1u << (i & 7)))) {
            p = w32(p, 0xFFFFFFFFu);
            continue;
        }
        switch (c->kind) {
        case FK_ROWNUM:
            p = w64(w32(p, 8), (uint64_t)r);
            break;
        case FK_OP:
            p = w16(w32(p, 2), (uint16_t)b->ops[i]);
            break;
        case FK_BOOL:
            p = w32(p, 1);
            *p++ = (c->values[i >> 3] >> (i & 7)) & 1;
            break;
        case FK_INT: {
            int64_t v;
            switch (c->w) {
            case 1:
                v = ((const int8_t *)c->values)[i];
                break;
            case 2:
                v = ((const int16_t *)c->values)[i];
                break;
            case 4:
                v = ((const int32_t *)c->values)[i];
                break;
            default:
                v = ((const int64_t *)c->values)[i];
                break;
            }
            if (c->ww == 2)
                p = w16(w32(p, 2), (uint16_t)(int16_t)v);
            else if (c->ww == 4)
                p = w32(w32(p, 4), (uint32_t)(int32_t)v);
            else
                p = w64(w32(p, 8), (uint64_t)v);
            break;
        }
        case FK_DATE: {
            int64_t v = ((const int32_t *)c->values)[i];
            if (v == INT32_MAX || v < INT32_MIN + PG_EPOCH_DAYS) return NULL; /* encode_value */
            p = w32(w32(p, 4), (uint32_t)(int32_t)(v - PG_EPOCH_DAYS));
            break;
        }
        case FK_TS: {
            int64_t v = ((const int64_t *)c->values)[i];
            if (v == INT64_MAX || v < INT64_MIN + PG_EPOCH_US) return NULL; /* encode_value */
            p = w64(w32(p, 8), (uint64_t)(v - PG_EPOCH_US));
            break;
        }
        case FK_TIME:
            p = w64(w32(p, 8), (uint64_t)((const int64_t *)c->values)[i]);
            break;
        case FK_FLOAT8: {
            uint64_t bits;
            memcpy(&bits, c->values + (size_t)i * 8, 8);
            p = w64(w32(p, 8), bits);
            break;
        }
        case FK_FLOAT4: {
            uint32_t bits;
            memcpy(&bits, c->values + (size_t)i * 4, 4);
            p = w32(w32(p, 4), bits);
            break;
        }
        case FK_DEC128: {
            const uint8_t *q = c->values + (size_t)i * 16;
            struct ferry_decimal128 v = {.lo = le64(q), .hi = (int64_t)le64(q + 8)};
            if (v.hi == FERRY_SPECIAL_DEC_NAN_HI && v.lo == FERRY_SPECIAL_DEC_NAN_LO) return NULL;
            struct dec_numeric d;
            if (dec_numeric(v, c->scale, &d) != FERRY_OK) return NULL;
            uint16_t h[4] = {(uint16_t)d.ndigits, (uint16_t)(int16_t)d.weight, d.sign,
                             (uint16_t)d.dscale};
            p = w32(p, 8 + 2 * (uint32_t)d.ndigits);
            for (int j = 0; j < 4; j++)
                p = w16(p, h[j]);
            for (int j = d.first + d.ndigits - 1; j >= d.first; j--)
                p = w16(p, d.g[j]);
            break;
        }
        case FK_VAR:
        case FK_JSONB: {
            size_t len = (size_t)(c->offsets[i + 1] - c->offsets[i]);
            size_t ver = c->kind == FK_JSONB;
            p = w32(p, (uint32_t)(len + ver));
            if (ver) *p++ = 1; /* jsonb binary format version */
            if (len) memcpy(p, c->data + c->offsets[i], len);
            p += len;
            break;
        }
        case FK_UUID:
            memcpy(w32(p, 16), c->values + (size_t)i * 16, 16);
            p += 20;
            break;
        default: {
            out->len = (size_t)(p - (uint8_t *)out->data);
            *rc = encode_value(out, b, &cols[k], r, err);
            /* The row's room was reserved without this value: reserve it again after it. */
            if (*rc == FERRY_OK && ferry_buf_reserve(out, need) != FERRY_OK) *rc = FERRY_ENOMEM;
            if (*rc != FERRY_OK) return NULL;
            p = (uint8_t *)out->data + out->len;
            break;
        }
        }
    }
    return p;
}

int ferry__pg_copy_rows(struct ferry_buf *out, const struct ferry_batch *b,
                        const struct ferry_pg_wire_col *cols, int n_cols, int64_t *row,
                        size_t flush_at, struct ferry_error *err)
{
    struct fast_col fc[FAST_MAX_COLS];
    bool fast = n_cols <= FAST_MAX_COLS;
    size_t fixed = 2; /* the row's bytes besides var-width values and slow values */
    int n_var = 0;
    for (int k = 0; fast && k < n_cols; k++) {
        struct fast_col *c = &fc[k];
        memset(c, 0, sizeof *c);
        if (cols[k].col == FERRY_PG_COL_ROWNUM || cols[k].col == FERRY_PG_COL_OP) {
            c->kind = cols[k].col == FERRY_PG_COL_ROWNUM ? FK_ROWNUM : FK_OP;
            fixed += 12;
            continue;
        }
        const struct ferry_column *col = &b->columns[cols[k].col];
        const struct ferry_field *f = &b->schema->fields[cols[k].col];
        c->kind = fast_kind_of(f, cols[k].wire, &c->w, &c->ww);
        c->scale = f->scale;
        c->validity = col->null_count > 0 ? col->validity : NULL;
        c->values = col->values;
        c->offsets = col->offsets;
        c->data = col->data;
        if (c->kind == FK_VAR || c->kind == FK_JSONB) {
            n_var++;
            fixed += 5;
        } else if (c->kind == FK_SLOW) {
            fixed += 4; /* a null; a value reserves itself */
        } else {
            fixed += FAST_FIXED_MAX;
        }
    }
    for (int64_t r = *row; r < b->length; r++) {
        size_t at = out->len;
        int rc = FERRY_OK;
        if (fast) {
            size_t need = fixed;
            if (n_var > 0) {
                int64_t i = r + b->offset;
                for (int k = 0; k < n_cols; k++)
                    if (fc[k].kind == FK_VAR || fc[k].kind == FK_JSONB) {
                        size_t len = (size_t)(fc[k].offsets[i + 1] - fc[k].offsets[i]);
                        if (len > INT32_MAX - 1) goto slow; /* reported there */
                        need += len;
                    }
            }
            if (ferry_buf_reserve(out, need) != FERRY_OK) goto nomem;
            uint8_t *end =
                fast_row(out, (uint8_t *)out->data + at, b, fc, cols, n_cols, r, need, err, &rc);
            if (rc == FERRY_ENOMEM) goto nomem;
            if (rc != FERRY_OK) return rc;
            if (end != NULL) {
                out->len = (size_t)(end - (uint8_t *)out->data);
                goto done;
            }
        }
    slow:
        out->len = at;
        rc = copy_row_slow(out, b, cols, n_cols, r, err);
        if (rc == FERRY_ENOMEM) goto nomem;
        if (rc != FERRY_OK) {
            out->len = at;
            return rc;
        }
    done:
        if (out->len >= flush_at) {
            *row = r + 1;
            return FERRY_OK;
        }
    }
    *row = b->length;
    return FERRY_OK;
nomem:
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", "COPY buffer: out of memory");
}
