/* connectors/postgres/pg_copy.c - decodes COPY BINARY tuples into the row writer.
 *
 * Owns the stream state machine (header, tuples, trailer), the per-type binary forms and
 * numeric's base-10000 form (pg_copy.h describes them). Calls the row writer and core only.
 * Called by pg_source.c for every CopyData chunk, and by its unit test.
 *
 * Values that ferry cannot represent fail with a message naming the column and the row
 * instead of being altered: date/timestamp ±infinity, timestamps past year 294247 (after
 * moving to the 1970 epoch), NaN in a decimal128 column. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_copy.h"
#include "core/bytes.h"

__extension__ typedef __int128 i128;

#define NUMERIC_POS 0x0000
#define NUMERIC_NEG 0x4000
#define NUMERIC_NAN 0xC000
#define NUMERIC_PINF 0xD000
#define NUMERIC_NINF 0xF000
#define NBASE 10000

static const uint8_t signature[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0};

bool ferry__pg_wire_of(uint32_t oid, enum ferry_pg_wire *wire)
{
    enum ferry_pg_wire w;
    switch (oid) {
    case FERRY_PG_OID_BOOL:
        w = FERRY_PG_W_BOOL;
        break;
    case FERRY_PG_OID_INT2:
        w = FERRY_PG_W_INT2;
        break;
    case FERRY_PG_OID_INT4:
        w = FERRY_PG_W_INT4;
        break;
    case FERRY_PG_OID_INT8:
        w = FERRY_PG_W_INT8;
        break;
    case FERRY_PG_OID_OID:
        w = FERRY_PG_W_OID;
        break;
    case FERRY_PG_OID_FLOAT4:
        w = FERRY_PG_W_FLOAT4;
        break;
    case FERRY_PG_OID_FLOAT8:
        w = FERRY_PG_W_FLOAT8;
        break;
    case FERRY_PG_OID_NUMERIC:
        w = FERRY_PG_W_NUMERIC;
        break;
    case FERRY_PG_OID_TEXT:
    case FERRY_PG_OID_VARCHAR:
    case FERRY_PG_OID_BPCHAR:
    case FERRY_PG_OID_NAME:
    case FERRY_PG_OID_JSON:
        w = FERRY_PG_W_TEXT;
        break;
    case FERRY_PG_OID_BYTEA:
        w = FERRY_PG_W_BYTEA;
        break;
    case FERRY_PG_OID_DATE:
        w = FERRY_PG_W_DATE;
        break;
    case FERRY_PG_OID_TIME:
        w = FERRY_PG_W_TIME;
        break;
    case FERRY_PG_OID_TIMESTAMP:
        w = FERRY_PG_W_TIMESTAMP;
        break;
    case FERRY_PG_OID_TIMESTAMPTZ:
        w = FERRY_PG_W_TIMESTAMPTZ;
        break;
    case FERRY_PG_OID_UUID:
        w = FERRY_PG_W_UUID;
        break;
    case FERRY_PG_OID_JSONB:
        w = FERRY_PG_W_JSONB;
        break;
    default:
        return false;
    }
    *wire = w;
    return true;
}

void ferry__pg_copy_init(struct ferry_pg_copy *d, const struct ferry_pg_copy_col *cols, int n,
                         const char *what)
{
    memset(d, 0, sizeof *d);
    d->cols = cols;
    d->n_cols = n;
    d->what = what ? what : "postgres source";
    ferry_buf_init(&d->carry, 0);
    ferry_buf_init(&d->text, 0);
}

void ferry__pg_copy_release(struct ferry_pg_copy *d)
{
    if (d == NULL) return;
    ferry_buf_release(&d->carry);
    ferry_buf_release(&d->text);
}

/* ---- numeric ------------------------------------------------------------------------- */

struct numeric_hdr {
    int ndigits, weight, dscale;
    unsigned sign;
    const uint8_t *digits;
};

static bool numeric_parse(const uint8_t *p, size_t n, struct numeric_hdr *h)
{
    if (n < 8) return false;
    h->ndigits = (int16_t)ferry__be16(p);
    h->weight = (int16_t)ferry__be16(p + 2);
    h->sign = ferry__be16(p + 4);
    h->dscale = ferry__be16(p + 6);
    h->digits = p + 8;
    if (h->ndigits < 0 || n != 8 + 2 * (size_t)h->ndigits) return false;
    if (h->sign != NUMERIC_POS && h->sign != NUMERIC_NEG && h->sign != NUMERIC_NAN &&
        h->sign != NUMERIC_PINF && h->sign != NUMERIC_NINF)
        return false;
    if (h->dscale > 0x3fff) return false;
    for (int i = 0; i < h->ndigits; i++)
        if (ferry__be16(h->digits + 2 * i) >= NBASE) return false;
    return true;
}

static inline int digit_at(const struct numeric_hdr *h, int i)
{
    return i >= 0 && i < h->ndigits ? ferry__be16(h->digits + 2 * i) : 0;
}

int ferry__pg_numeric_text(const uint8_t *p, size_t n, struct ferry_buf *out)
{
    struct numeric_hdr h;
    if (!numeric_parse(p, n, &h)) return FERRY_EINVAL;
    if (h.sign == NUMERIC_NAN) return ferry_buf_append(out, "NaN", 3);
    if (h.sign == NUMERIC_PINF) return ferry_buf_append(out, "Infinity", 8);
    if (h.sign == NUMERIC_NINF) return ferry_buf_append(out, "-Infinity", 9);
    /* sign + integer groups (4 digits each) + '.' + dscale digits */
    size_t int_groups = h.weight >= 0 ? (size_t)h.weight + 1 : 1;
    int rc = ferry_buf_reserve(out, 2 + int_groups * 4 + 1 + (size_t)h.dscale + 4);
    if (rc != FERRY_OK) return rc;
    char *s = out->data + out->len;
    char *q = s;
    bool zero = true;
    for (int i = 0; i < h.ndigits; i++)
        if (digit_at(&h, i) != 0) zero = false;
    if (h.sign == NUMERIC_NEG && !zero) *q++ = '-';
    if (h.weight < 0) {
        *q++ = '0';
    } else {
        for (int i = 0; i <= h.weight; i++) {
            int dg = digit_at(&h, i);
            char g[4] = {(char)('0' + dg / 1000), (char)('0' + dg / 100 % 10),
                         (char)('0' + dg / 10 % 10), (char)('0' + dg % 10)};
            if (i == 0) {
                int skip = 0;
                while (skip < 3 && g[skip] == '0')
                    skip++;
                memcpy(q, g + skip, (size_t)(4 - skip));
                q += 4 - skip;
            } else {
                memcpy(q, g, 4);
                q += 4;
            }
        }
    }
    if (h.dscale > 0) {
        *q++ = '.';
        int written = 0;
        for (int i = h.weight + 1; written < h.dscale; i++) {
            int dg = digit_at(&h, i);
            int div = 1000;
            for (int k = 0; k < 4 && written < h.dscale; k++, written++) {
                *q++ = (char)('0' + dg / div % 10);
                div /= 10;
            }
        }
    }
    out->len += (size_t)(q - s);
    out->data[out->len] = '\0';
    return FERRY_OK;
}

/* 10^0 .. 10^38, constant so that threads never race on a lazy table. */
static const i128 p10[39] = {
    (i128)1ULL,
    (i128)10ULL,
    (i128)100ULL,
    (i128)1000ULL,
    (i128)10000ULL,
    (i128)100000ULL,
    (i128)1000000ULL,
    (i128)10000000ULL,
    (i128)100000000ULL,
    (i128)1000000000ULL,
    (i128)10000000000ULL,
    (i128)100000000000ULL,
    (i128)1000000000000ULL,
    (i128)10000000000000ULL,
    (i128)100000000000000ULL,
    (i128)1000000000000000ULL,
    (i128)10000000000000000ULL,
    (i128)100000000000000000ULL,
    (i128)1000000000000000000ULL,
    (i128)10000000000000000000ULL,
    (i128)10000000000000000000ULL * 10ULL,
    (i128)10000000000000000000ULL * 100ULL,
    (i128)10000000000000000000ULL * 1000ULL,
    (i128)10000000000000000000ULL * 10000ULL,
    (i128)10000000000000000000ULL * 100000ULL,
    (i128)10000000000000000000ULL * 1000000ULL,
    (i128)10000000000000000000ULL * 10000000ULL,
    (i128)10000000000000000000ULL * 100000000ULL,
    (i128)10000000000000000000ULL * 1000000000ULL,
    (i128)10000000000000000000ULL * 10000000000ULL,
    (i128)10000000000000000000ULL * 100000000000ULL,
    (i128)10000000000000000000ULL * 1000000000000ULL,
    (i128)10000000000000000000ULL * 10000000000000ULL,
    (i128)10000000000000000000ULL * 100000000000000ULL,
    (i128)10000000000000000000ULL * 1000000000000000ULL,
    (i128)10000000000000000000ULL * 10000000000000000ULL,
    (i128)10000000000000000000ULL * 100000000000000000ULL,
    (i128)10000000000000000000ULL * 1000000000000000000ULL,
    (i128)10000000000000000000ULL * 10000000000000000000ULL,
};

/* The common case of ferry__pg_numeric_dec128 in 64-bit arithmetic: at most 4 groups, a
 * precision and scale of at most 18, every digit group landing within 10^14 units. False when
 * anything is outside that (the general code then decides, errors included). */
static inline bool numeric_dec64(const uint8_t *p, size_t n, int precision, int scale,
                                 struct ferry_decimal128 *out)
{
    static const uint64_t p10_64[19] = {1ULL,
                                        10ULL,
                                        100ULL,
                                        1000ULL,
                                        10000ULL,
                                        100000ULL,
                                        1000000ULL,
                                        10000000ULL,
                                        100000000ULL,
                                        1000000000ULL,
                                        10000000000ULL,
                                        100000000000ULL,
                                        1000000000000ULL,
                                        10000000000000ULL,
                                        100000000000000ULL,
                                        1000000000000000ULL,
                                        10000000000000000ULL,
                                        100000000000000000ULL,
                                        1000000000000000000ULL};
    if (n < 8 || precision < 1 || precision > 18 || scale < 0 || scale > 18) return false;
    int ndigits = (int16_t)ferry__be16(p), weight = (int16_t)ferry__be16(p + 2);
    unsigned sign = ferry__be16(p + 4), dscale = ferry__be16(p + 6);
    if (ndigits < 0 || ndigits > 4 || n != 8 + 2 * (size_t)ndigits || dscale > 0x3fff ||
        (sign != NUMERIC_POS && sign != NUMERIC_NEG))
        return false;
    uint64_t v = 0;
    for (int i = 0; i < ndigits; i++) {
        uint64_t dg = ferry__be16(p + 8 + 2 * i);
        if (dg >= NBASE) return false;
        int e = 4 * (weight - i) + scale; /* this group's weight in units of 10^-scale */
        if (e >= 0) {
            if (e > 14) return false;
            v += dg * p10_64[e]; /* < 10^18 per group, 4 groups: no overflow */
            continue;
        }
        switch (e) { /* constant divisors: no division instruction */
        case -1:
            if (dg % 10) return false;
            v += dg / 10;
            break;
        case -2:
            if (dg % 100) return false;
            v += dg / 100;
            break;
        case -3:
            if (dg % 1000) return false;
            v += dg / 1000;
            break;
        default:
            if (dg) return false;
            break;
        }
    }
    if (v >= p10_64[precision]) return false;
    int64_t x = sign == NUMERIC_NEG ? -(int64_t)v : (int64_t)v;
    out->lo = (uint64_t)x;
    out->hi = x < 0 ? -1 : 0;
    return true;
}

int ferry__pg_numeric_dec128(const uint8_t *p, size_t n, int precision, int scale,
                             struct ferry_decimal128 *out)
{
    if (numeric_dec64(p, n, precision, scale, out)) return FERRY_OK;
    struct numeric_hdr h;
    if (!numeric_parse(p, n, &h) || h.sign == NUMERIC_NAN || h.sign == NUMERIC_PINF ||
        h.sign == NUMERIC_NINF || precision < 1 || precision > 38)
        return FERRY_EINVAL;
    i128 limit = p10[precision];
    i128 v = 0;
    for (int i = 0; i < h.ndigits; i++) {
        int dg = digit_at(&h, i);
        if (dg == 0) continue;
        /* This digit's weight in units of 10^-scale. */
        int e = 4 * (h.weight - i) + scale;
        i128 add;
        if (e >= 0) {
            /* dg * 10^e could overflow 128 bits before the limit check (fuzz_pg_copy) */
            if (e > 38 || p10[e] > limit / dg) return FERRY_EINVAL;
            add = (i128)dg * p10[e];
        } else {
            if (e <= -4) return FERRY_EINVAL;
            int d = (int)p10[-e];
            if (dg % d != 0) return FERRY_EINVAL;
            add = dg / d;
        }
        if (add >= limit || v >= limit - add) return FERRY_EINVAL;
        v += add;
    }
    if (h.sign == NUMERIC_NEG) v = -v;
    out->lo = (uint64_t)v;
    out->hi = (int64_t)(v >> 64);
    return FERRY_OK;
}

/* ---- tuples ---------------------------------------------------------------------------- */

static int bad(struct ferry_pg_copy *d, int col, struct ferry_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int bad(struct ferry_pg_copy *d, int col, struct ferry_error *err, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return ferry_error_set(err, FERRY_EINVAL, "postgres", "%s: column \"%s\", row %" PRId64 ": %s",
                           d->what, d->cols[col].name ? d->cols[col].name : "?", d->rows + 1, why);
}

static int bad_len(struct ferry_pg_copy *d, int col, int32_t len, struct ferry_error *err)
{
    return bad(d, col, err, "unexpected value length %" PRId32 " in the COPY stream", len);
}

/* The days/microseconds PostgreSQL uses for ±infinity. */
#define PG_DATE_NOBEGIN INT32_MIN
#define PG_DATE_NOEND INT32_MAX
#define PG_NUMERIC_NAN 0xC000 /* numeric sign word of NaN */

static int decode_value(struct ferry_pg_copy *d, int col, const uint8_t *v, int32_t len,
                        struct ferry_row_writer *rw, struct ferry_error *err)
{
    const struct ferry_pg_copy_col *c = &d->cols[col];
    switch (c->wire) {
    case FERRY_PG_W_BOOL:
        if (len != 1) return bad_len(d, col, len, err);
        ferry_rw_bool(rw, v[0] != 0);
        return FERRY_OK;
    case FERRY_PG_W_INT2:
        if (len != 2) return bad_len(d, col, len, err);
        ferry_rw_int(rw, (int16_t)ferry__be16(v));
        return FERRY_OK;
    case FERRY_PG_W_INT4:
        if (len != 4) return bad_len(d, col, len, err);
        ferry_rw_int(rw, (int32_t)ferry__be32(v));
        return FERRY_OK;
    case FERRY_PG_W_OID:
        if (len != 4) return bad_len(d, col, len, err);
        ferry_rw_int(rw, (int64_t)ferry__be32(v));
        return FERRY_OK;
    case FERRY_PG_W_INT8:
        if (len != 8) return bad_len(d, col, len, err);
        ferry_rw_int(rw, (int64_t)ferry__be64(v));
        return FERRY_OK;
    case FERRY_PG_W_FLOAT4: {
        if (len != 4) return bad_len(d, col, len, err);
        uint32_t bits = ferry__be32(v);
        float f;
        memcpy(&f, &bits, 4);
        ferry_rw_float(rw, (double)f);
        return FERRY_OK;
    }
    case FERRY_PG_W_FLOAT8: {
        if (len != 8) return bad_len(d, col, len, err);
        uint64_t bits = ferry__be64(v);
        double f;
        memcpy(&f, &bits, 8);
        ferry_rw_float(rw, f);
        return FERRY_OK;
    }
    case FERRY_PG_W_NUMERIC:
        if (c->type == FERRY_TYPE_DECIMAL128) {
            struct ferry_decimal128 x;
            if (d->specials && len >= 8 && ferry__be16(v + 4) == PG_NUMERIC_NAN) {
                x.hi = FERRY_SPECIAL_DEC_NAN_HI;
                x.lo = FERRY_SPECIAL_DEC_NAN_LO;
                ferry_rw_dec128(rw, x);
                return FERRY_OK;
            }
            if (ferry__pg_numeric_dec128(v, (size_t)len, c->precision, c->scale, &x) !=
                FERRY_OK) {
                ferry_buf_reset(&d->text);
                if (ferry__pg_numeric_text(v, (size_t)len, &d->text) != FERRY_OK)
                    return bad(d, col, err, "malformed numeric value (%" PRId32 " bytes)", len);
                return bad(d, col, err, "numeric %.60s does not fit decimal128(%d,%d)",
                           d->text.data, c->precision, c->scale);
            }
            ferry_rw_dec128(rw, x);
            return FERRY_OK;
        }
        ferry_buf_reset(&d->text);
        if (ferry__pg_numeric_text(v, (size_t)len, &d->text) != FERRY_OK)
            return bad(d, col, err, "malformed numeric value (%" PRId32 " bytes)", len);
        ferry_rw_text(rw, d->text.data, d->text.len);
        return FERRY_OK;
    case FERRY_PG_W_TEXT:
    case FERRY_PG_W_BYTEA:
        ferry_rw_text(rw, v, (size_t)len);
        return FERRY_OK;
    case FERRY_PG_W_JSONB:
        if (len < 1 || v[0] != 1)
            return bad(d, col, err, "jsonb version byte %d is not 1", len < 1 ? -1 : v[0]);
        ferry_rw_text(rw, v + 1, (size_t)len - 1);
        return FERRY_OK;
    case FERRY_PG_W_DATE: {
        if (len != 4) return bad_len(d, col, len, err);
        int32_t days = (int32_t)ferry__be32(v);
        if ((days == PG_DATE_NOBEGIN || days == PG_DATE_NOEND) && d->specials) {
            ferry_rw_int(rw, days == PG_DATE_NOBEGIN ? FERRY_SPECIAL_DATE_NINF
                                                     : FERRY_SPECIAL_DATE_PINF);
            return FERRY_OK;
        }
        if (days == PG_DATE_NOBEGIN || days == PG_DATE_NOEND)
            return bad(d, col, err,
                       "date %sinfinity has no value in this sink (filter it out, cast it in a "
                       "view, or convert it with on_unrepresentable: null | clamp)",
                       days == PG_DATE_NOBEGIN ? "-" : "");
        ferry_rw_int(rw, (int64_t)days + FERRY_PG_EPOCH_DAYS);
        return FERRY_OK;
    }
    case FERRY_PG_W_TIME:
        if (len != 8) return bad_len(d, col, len, err);
        ferry_rw_int(rw, (int64_t)ferry__be64(v));
        return FERRY_OK;
    case FERRY_PG_W_TIMESTAMP:
    case FERRY_PG_W_TIMESTAMPTZ: {
        if (len != 8) return bad_len(d, col, len, err);
        int64_t us = (int64_t)ferry__be64(v), out;
        if ((us == INT64_MIN || us == INT64_MAX) && d->specials) {
            ferry_rw_int(rw, us == INT64_MIN ? FERRY_SPECIAL_TS_NINF : FERRY_SPECIAL_TS_PINF);
            return FERRY_OK;
        }
        if (us == INT64_MIN || us == INT64_MAX)
            return bad(d, col, err,
                       "timestamp %sinfinity has no value in this sink (filter it out, cast it "
                       "in a view, or convert it with on_unrepresentable: null | clamp)",
                       us == INT64_MIN ? "-" : "");
        /* (INT64_MAX itself is the +infinity of special values) */
        if (__builtin_add_overflow(us, FERRY_PG_EPOCH_US, &out) || out == INT64_MAX)
            return bad(d, col, err,
                       "timestamp %" PRId64 " (us since 2000) is out of range (ferry's "
                       "timestamps end in year 294247)",
                       us);
        ferry_rw_int(rw, out);
        return FERRY_OK;
    }
    case FERRY_PG_W_UUID:
        if (len != 16) return bad_len(d, col, len, err);
        ferry_rw_fixed(rw, v, 16);
        return FERRY_OK;
    }
    return bad(d, col, err, "no decoder for wire form %d", (int)c->wire);
}

/* Decodes complete tuples from p[0..n); *used gets the bytes consumed (the rest is an
 * incomplete tuple or header). */
static int decode(struct ferry_pg_copy *d, const uint8_t *p, size_t n, size_t *used,
                  struct ferry_row_writer *rw, struct ferry_error *err)
{
    size_t at = 0;
    int rc = FERRY_OK;
    *used = 0;
    if (d->state == 0) {
        if (n < 19) return FERRY_OK;
        if (memcmp(p, signature, sizeof signature) != 0)
            return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                   "%s: the COPY stream does not start with the binary signature",
                                   d->what);
        uint32_t flags = ferry__be32(p + 11);
        uint32_t ext = ferry__be32(p + 15);
        /* Bit 16 (OIDs) and any other critical bit 16..31 change the tuple layout. */
        if (flags & 0xffff0000u)
            return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                   "%s: COPY binary header flags 0x%08x are not supported",
                                   d->what, flags);
        if (ext > (1u << 30))
            return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                   "%s: COPY binary header extension of %u bytes", d->what, ext);
        if (n - 19 < ext) return FERRY_OK;
        at = 19 + ext;
        d->state = 1;
    }
    const int ncols = d->n_cols;
    while (d->state == 1 && n - at >= 2) {
        int16_t count = (int16_t)ferry__be16(p + at);
        if (count == -1) {
            d->state = 2;
            at += 2;
            break;
        }
        if (count != ncols) {
            rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                                 "%s: row %" PRId64 " has %d fields, %d were selected", d->what,
                                 d->rows + 1, count, ncols);
            break;
        }
        /* One pass: values go to the writer as they are read. PostgreSQL sends one tuple per
         * CopyData message, so a tuple cut by the end of the chunk is rare: that row is
         * cancelled and decoded again once the chunk that completes it arrives. */
        size_t q = at + 2;
        bool complete = true;
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int f = 0; f < ncols; f++) {
            if (n - q < 4) {
                complete = false;
                break;
            }
            int32_t len = (int32_t)ferry__be32(p + q);
            q += 4;
            if (len == -1) {
                ferry_rw_null(rw);
                continue;
            }
            if (len < 0) {
                ferry_rw_cancel_row(rw);
                *used = at;
                return bad_len(d, f, len, err);
            }
            if (n - q < (size_t)len) {
                complete = false;
                break;
            }
            rc = decode_value(d, f, p + q, len, rw, err);
            if (rc != FERRY_OK) {
                ferry_rw_cancel_row(rw);
                *used = at;
                return rc;
            }
            q += (size_t)len;
        }
        if (!complete) {
            ferry_rw_cancel_row(rw);
            break;
        }
        at = q;
        d->rows++;
        rc = ferry_rw_end(rw, err);
        if (rc != FERRY_OK) break;
    }
    if (rc == FERRY_OK && d->state == 2 && at < n)
        rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                             "%s: %zu bytes after the COPY trailer", d->what, n - at);
    *used = at;
    return rc;
}

int ferry__pg_copy_feed(struct ferry_pg_copy *d, const uint8_t *p, size_t n,
                        struct ferry_row_writer *rw, struct ferry_error *err)
{
    size_t used = 0;
    int rc;
    if (d->carry.len == 0) {
        rc = decode(d, p, n, &used, rw, err);
        if (rc == FERRY_OK && used < n) {
            rc = ferry_buf_append(&d->carry, p + used, n - used);
            if (rc != FERRY_OK)
                rc = ferry_error_set(err, rc, "postgres", "%s: a COPY row is too large", d->what);
        }
        return rc;
    }
    rc = ferry_buf_append(&d->carry, p, n);
    if (rc != FERRY_OK)
        return ferry_error_set(err, rc, "postgres", "%s: a COPY row is too large", d->what);
    rc = decode(d, (const uint8_t *)d->carry.data, d->carry.len, &used, rw, err);
    if (used > 0) {
        memmove(d->carry.data, d->carry.data + used, d->carry.len - used);
        d->carry.len -= used;
    }
    return rc;
}

int ferry__pg_copy_finish(struct ferry_pg_copy *d, struct ferry_error *err)
{
    if (d->state != 2 || d->carry.len != 0)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               "%s: the COPY stream ended early (after %" PRId64 " rows%s)",
                               d->what, d->rows, d->carry.len ? ", inside a row" : "");
    return FERRY_OK;
}
