/* verify/canon.c - value and row hashes, the C side of what PostgreSQL computes in SQL
 * with its own hash functions (connectors/postgres/pg_verify.c: hashint8extended, hashtextextended,
 * uuid_hash_extended, timestamp_hash_extended...).
 *
 * Owns lookup3 as PostgreSQL runs it, the per-type value hash, the row hash, the mod-2^64
 * reading of PostgreSQL's sum() and the normal text of key values. Calls the batch text
 * forms. Called by the verify backends and verify.c. Allocates only in
 * ferry__vcanon_key_text (and the scratch buffer of binary values). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify/verify.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "float hashes follow PostgreSQL's in-memory byte order: little-endian hosts only"
#endif

/* PostgreSQL's epoch, 2000-01-01, in days and microseconds since 1970: its hash functions
 * see dates and timestamps counted from there. */
#define PG_EPOCH_DAYS 10957
#define PG_EPOCH_US INT64_C(946684800000000)

/* Bob Jenkins' lookup3 (public domain, 2006) as PostgreSQL's hash_bytes_extended and
 * hash_bytes_uint32_extended use it (src/common/hashfn.c): three 32-bit lanes started at
 * 0x9e3779b9 + length + 3923095, a non-zero 64-bit seed folded in with one mix, 12-byte
 * blocks read little-endian, the tail bytes added into their lane positions, and the
 * result (b << 32) | c. Written from the algorithm's description; checked against a live
 * server by tests/unit/test_verify.c. */
/* clang-format off */
static inline uint32_t rot(uint32_t x, int k)
{
    return (x << k) | (x >> (32 - k));
}

#define MIX(a, b, c)                                                                         \
    do {                                                                                     \
        a -= c; a ^= rot(c, 4); c += b;                                                      \
        b -= a; b ^= rot(a, 6); a += c;                                                      \
        c -= b; c ^= rot(b, 8); b += a;                                                      \
        a -= c; a ^= rot(c, 16); c += b;                                                     \
        b -= a; b ^= rot(a, 19); a += c;                                                     \
        c -= b; c ^= rot(b, 4); b += a;                                                      \
    } while (0)

#define FINAL(a, b, c)                                                                       \
    do {                                                                                     \
        c ^= b; c -= rot(b, 14);                                                             \
        a ^= c; a -= rot(c, 11);                                                             \
        b ^= a; b -= rot(a, 25);                                                             \
        c ^= b; c -= rot(b, 16);                                                             \
        a ^= c; a -= rot(c, 4);                                                              \
        b ^= a; b -= rot(a, 14);                                                             \
        c ^= b; c -= rot(b, 24);                                                             \
    } while (0)

/* clang-format on */

static inline uint32_t le32(const uint8_t *k)
{
    return (uint32_t)k[0] | (uint32_t)k[1] << 8 | (uint32_t)k[2] << 16 | (uint32_t)k[3] << 24;
}

uint64_t ferry__vcanon_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const uint8_t *k = p;
    uint32_t len = (uint32_t)n;
    uint32_t a, b, c;
    a = b = c = 0x9e3779b9u + len + 3923095u;
    if (seed != 0) {
        a += (uint32_t)(seed >> 32);
        b += (uint32_t)seed;
        MIX(a, b, c);
    }
    while (len >= 12) {
        a += le32(k);
        b += le32(k + 4);
        c += le32(k + 8);
        MIX(a, b, c);
        k += 12;
        len -= 12;
    }
    switch (len) { /* the low byte of c is left for the length, as in lookup3 */
    case 11:
        c += (uint32_t)k[10] << 24; /* fall through */
    case 10:
        c += (uint32_t)k[9] << 16; /* fall through */
    case 9:
        c += (uint32_t)k[8] << 8; /* fall through */
    case 8:
        b += (uint32_t)k[7] << 24; /* fall through */
    case 7:
        b += (uint32_t)k[6] << 16; /* fall through */
    case 6:
        b += (uint32_t)k[5] << 8; /* fall through */
    case 5:
        b += k[4]; /* fall through */
    case 4:
        a += (uint32_t)k[3] << 24; /* fall through */
    case 3:
        a += (uint32_t)k[2] << 16; /* fall through */
    case 2:
        a += (uint32_t)k[1] << 8; /* fall through */
    case 1:
        a += k[0];
        break;
    default:
        break;
    }
    FINAL(a, b, c);
    return (uint64_t)b << 32 | c;
}

static uint64_t hash_u32(uint32_t k, uint64_t seed)
{
    uint32_t a, b, c;
    a = b = c = 0x9e3779b9u + 4u + 3923095u;
    if (seed != 0) {
        a += (uint32_t)(seed >> 32);
        b += (uint32_t)seed;
        MIX(a, b, c);
    }
    a += k;
    FINAL(a, b, c);
    return (uint64_t)b << 32 | c;
}

/* hashint8extended: values that fit 32 bits hash like int4 (PostgreSQL's cross-type rule). */
uint64_t ferry__vcanon_hash_int8(int64_t v, uint64_t seed)
{
    uint32_t lo = (uint32_t)v, hi = (uint32_t)((uint64_t)v >> 32);
    lo ^= v >= 0 ? hi : ~hi;
    return hash_u32(lo, seed);
}

/* hashfloat8extended, with -0 told apart from 0 (seed ^ 1): PostgreSQL returns the seed for
 * both zeros, the SQL side adds the same CASE. float4 values hash as their float8. */
static uint64_t hash_float(double f, uint64_t seed)
{
    if (f == 0) return signbit(f) ? seed ^ 1 : seed;
    /* PostgreSQL hashes the double's bytes in host order (little-endian on every platform
     * ferry builds for), every NaN as its canonical one */
    static const uint8_t nan_bytes[8] = {0, 0, 0, 0, 0, 0, 0xf8, 0x7f};
    uint8_t b[8];
    if (isnan(f))
        memcpy(b, nan_bytes, 8);
    else
        memcpy(b, &f, 8);
    return ferry__vcanon_hash_bytes(b, 8, seed);
}

int64_t ferry__vcanon_null_hash(int pos)
{
    /* a constant per column, as the SQL side writes it */
    return (int64_t)(UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)pos);
}

int64_t ferry__vcanon_row_hash(int64_t x)
{
    return (int64_t)ferry__vcanon_hash_int8(x, 0);
}

int64_t ferry__vcanon_value_hash(enum ferry_type t, int pos, const struct ferry_vvalue *v,
                                 struct ferry_buf *scratch)
{
    if (v->null) return ferry__vcanon_null_hash(pos);
    uint64_t seed = (uint64_t)pos;
    switch (t) {
    case FERRY_TYPE_BOOL:
        return (int64_t)ferry__vcanon_hash_int8(v->i != 0, seed);
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
        return (int64_t)ferry__vcanon_hash_int8(v->i, seed);
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return (int64_t)ferry__vcanon_hash_int8(v->i - PG_EPOCH_US, seed);
    case FERRY_TYPE_DATE32:
        return (int64_t)ferry__vcanon_hash_int8(v->i - PG_EPOCH_DAYS, seed);
    case FERRY_TYPE_FLOAT32:
        return (int64_t)hash_float((double)(float)v->f, seed);
    case FERRY_TYPE_FLOAT64:
        return (int64_t)hash_float(v->f, seed);
    case FERRY_TYPE_UUID:
        return (int64_t)ferry__vcanon_hash_bytes(v->u, 16, seed);
    case FERRY_TYPE_BINARY: {
        static const char hex[] = "0123456789abcdef";
        ferry_buf_reset(scratch);
        if (ferry_buf_reserve(scratch, 2 * v->n + 1) != FERRY_OK) return 0;
        for (size_t i = 0; i < v->n; i++) {
            scratch->data[2 * i] = hex[v->p[i] >> 4];
            scratch->data[2 * i + 1] = hex[v->p[i] & 15];
        }
        return (int64_t)ferry__vcanon_hash_bytes(scratch->data, 2 * v->n, seed);
    }
    default:
        return (int64_t)ferry__vcanon_hash_bytes(v->p, v->n, seed);
    }
}

uint64_t ferry__vcanon_sum_text(const char *s)
{
    bool neg = false;
    if (*s == '-' || *s == '+') neg = *s++ == '-';
    uint64_t v = 0;
    /* Unsigned arithmetic wraps mod 2^64, and reduction mod 2^64 commutes with + and *. */
    for (; *s >= '0' && *s <= '9'; s++)
        v = v * 10 + (uint64_t)(*s - '0');
    return neg ? (uint64_t)0 - v : v;
}

static bool is_int_type(enum ferry_type t)
{
    return t == FERRY_TYPE_INT8 || t == FERRY_TYPE_INT16 || t == FERRY_TYPE_INT32 ||
           t == FERRY_TYPE_INT64;
}

bool ferry__vcanon_key_orderable(enum ferry_type t)
{
    return is_int_type(t) || t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_UUID ||
           t == FERRY_TYPE_DATE32 || t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIME64_US;
}

int ferry__vcanon_key_value(enum ferry_type t, const char *s, struct ferry_vvalue *v)
{
    memset(v, 0, sizeof *v);
    size_t n = strlen(s);
    int32_t d;
    char *end;
    switch (t) {
    case FERRY_TYPE_BOOL:
        v->i = (s[0] == 't' || s[0] == '1');
        return FERRY_OK;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        v->i = strtoll(s, &end, 10);
        return end != s && *end == '\0' ? FERRY_OK : FERRY_EINVAL;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        v->f = strtod(s, &end);
        return end != s ? FERRY_OK : FERRY_EINVAL;
    case FERRY_TYPE_DATE32:
        if (ferry_date32_from_text(s, n, &d) != FERRY_OK) return FERRY_EINVAL;
        v->i = d;
        return FERRY_OK;
    case FERRY_TYPE_TIME64_US:
        return ferry_time64_from_text(s, n, &v->i);
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return ferry_timestamp_from_text(s, n, &v->i);
    case FERRY_TYPE_UUID:
        return ferry_uuid_from_text(s, n, v->u);
    default:
        v->p = (const uint8_t *)s;
        v->n = n;
        return FERRY_OK;
    }
}

int ferry__vcanon_key_text(enum ferry_type t, const char *s, size_t n, char **out,
                           struct ferry_error *err)
{
    *out = NULL;
    char buf[80];
    int k = -1;
    if (t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT ||
        t == FERRY_TYPE_DECIMAL128 || t == FERRY_TYPE_BINARY || t == FERRY_TYPE_BOOL ||
        t == FERRY_TYPE_FLOAT32 || t == FERRY_TYPE_FLOAT64) {
        *out = ferry_strndup(s, n);
        return *out ? FERRY_OK : ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
    }
    char *z = ferry_strndup(s, n);
    if (z == NULL) return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
    struct ferry_vvalue v;
    int rc = ferry__vcanon_key_value(t, z, &v);
    ferry_free(z);
    if (rc == FERRY_OK) {
        if (is_int_type(t))
            k = snprintf(buf, sizeof buf, "%lld", (long long)v.i);
        else if (t == FERRY_TYPE_DATE32)
            k = ferry_date32_to_text((int32_t)v.i, buf, sizeof buf);
        else if (t == FERRY_TYPE_TIME64_US)
            k = ferry_time64_to_text(v.i, buf, sizeof buf);
        else if (t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIMESTAMPTZ_US)
            k = ferry_timestamp_to_text(v.i, t == FERRY_TYPE_TIMESTAMPTZ_US, buf, sizeof buf);
        else if (t == FERRY_TYPE_UUID)
            k = ferry_uuid_to_text(v.u, buf, sizeof buf);
    }
    if (k < 0)
        return ferry_error_set(err, FERRY_EINVAL, "verify", "key value \"%.*s\" is not a valid %s",
                               (int)(n > 64 ? 64 : n), s, ferry_type_name(t));
    *out = ferry_strndup(buf, (size_t)k);
    return *out ? FERRY_OK : ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

void ferry__vkey_free(struct ferry_vkey *k, int n_key)
{
    if (k == NULL || k->part == NULL) return;
    for (int i = 0; i < n_key; i++)
        ferry_free(k->part[i]);
    ferry_free(k->part);
    k->part = NULL;
}

void ferry__vrows_clear(struct ferry_vrows *r, int n_key)
{
    for (int64_t i = 0; i < r->n; i++)
        ferry__vkey_free(&r->v[i].key, n_key);
    ferry_free(r->v);
    memset(r, 0, sizeof *r);
}

int ferry__vrows_push_cells(struct ferry_vrows *r, const struct ferry_vtable *t,
                            ferry_vcell_fn cell, void *ctx, int64_t hash, struct ferry_error *err)
{
    char **parts = ferry_calloc((size_t)(t->n_key > 0 ? t->n_key : 1), sizeof *parts);
    if (parts == NULL) return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
    int rc = FERRY_OK;
    for (int k = 0; k < t->n_key && rc == FERRY_OK; k++) {
        size_t len = 0;
        const char *text = cell(ctx, k, &len);
        if (text != NULL)
            rc = ferry__vcanon_key_text(t->cols[t->key[k]].type, text, len, &parts[k], err);
    }
    if (rc == FERRY_OK) rc = ferry__vrows_push(r, parts, hash, err);
    if (rc != FERRY_OK) {
        struct ferry_vkey key = {parts};
        ferry__vkey_free(&key, t->n_key);
    }
    return rc;
}

int ferry__vrows_push(struct ferry_vrows *r, char **parts, int64_t hash, struct ferry_error *err)
{
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 64;
        struct ferry_vrow *v = ferry_realloc(r->v, sizeof *v * (size_t)cap);
        if (v == NULL) return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n].key.part = parts;
    r->v[r->n].hash = hash;
    r->n++;
    return FERRY_OK;
}
