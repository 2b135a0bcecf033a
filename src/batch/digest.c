/* batch/digest.c - the batch integrity digest: CRC32-C over a canonical form (digest.h).
 *
 * Owns ferry_batch_digest(). Calls only ferry_crc32c_update(). Called by the pipeline's
 * writer just before sink apply and by sinks at their last in-memory step.
 *
 * The canonical form must not depend on how the rows happen to sit in memory, only on what
 * they say. Buffers that are already canonical (values of a column without nulls, byte-
 * aligned bitmaps, var-width data, ops) are hashed in place; everything that needs
 * rebasing (bitmaps at an unaligned offset, offsets not starting at zero) or cleaning
 * (padding bits, null slots) is streamed through one small stack buffer, so the digest
 * allocates nothing and reads each byte once. Numbers in the canonical form are little-
 * endian; fixed-width values are hashed in host order, which is little-endian on every
 * platform ferry builds for (checked below). */
#include <string.h>
#include "ferry/crc32c.h"
#include "ferry/digest.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the batch digest hashes fixed-width values in host order: little-endian hosts only"
#endif

#define CHUNK 4096

static uint32_t put_u64(uint32_t crc, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    return ferry_crc32c_update(crc, b, sizeof b);
}

static int value_width(enum ferry_type t)
{
    switch (t) {
    case FERRY_TYPE_INT8: return 1;
    case FERRY_TYPE_INT16: return 2;
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_DATE32: return 4;
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_FLOAT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: return 8;
    case FERRY_TYPE_DECIMAL128:
    case FERRY_TYPE_UUID: return 16;
    default: return 0; /* bool (bits) and var-width */
    }
}

static bool is_varwidth(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_BINARY || t == FERRY_TYPE_JSON ||
           t == FERRY_TYPE_DECIMAL_TEXT;
}

/* Eight bits of bm starting at bit `bit`, of which only `avail` (1..8) are meaningful;
 * never reads a byte that holds none of them. */
static inline uint8_t bits_at(const uint8_t *bm, int64_t bit, int64_t avail)
{
    int64_t i = bit >> 3;
    int s = (int)(bit & 7);
    unsigned v = bm[i] >> s;
    if (s != 0 && avail > 8 - s) v |= (unsigned)bm[i + 1] << (8 - s);
    if (avail < 8) v &= (1u << avail) - 1;
    return (uint8_t)v;
}

static bool has_null(const uint8_t *validity, int64_t off, int64_t n)
{
    if (validity == NULL) return false;
    int64_t i = 0;
    while (i < n && ((off + i) & 7) != 0) {
        if (!(validity[(off + i) >> 3] & (1u << ((off + i) & 7)))) return true;
        i++;
    }
    for (; i + 8 <= n; i += 8)
        if (validity[(off + i) >> 3] != 0xFF) return true;
    for (; i < n; i++)
        if (!(validity[(off + i) >> 3] & (1u << ((off + i) & 7)))) return true;
    return false;
}

/* ceil(n/8) bytes: bits [off, off+n) of bm, ANDed with the same bits of mask when given,
 * rebased to bit 0 with the padding bits of the last byte zero. */
static uint32_t put_bitmap(uint32_t crc, const uint8_t *bm, const uint8_t *mask, int64_t off,
                           int64_t n)
{
    int64_t nbytes = (n + 7) / 8;
    if (mask == NULL && (off & 7) == 0) {
        /* Already aligned: only the last byte may need its padding cleared. */
        int64_t full = n / 8;
        crc = ferry_crc32c_update(crc, bm + (off >> 3), (size_t)full);
        if (full < nbytes) {
            uint8_t last = bits_at(bm, off + full * 8, n - full * 8);
            crc = ferry_crc32c_update(crc, &last, 1);
        }
        return crc;
    }
    uint8_t buf[CHUNK];
    int64_t j = 0;
    while (j < nbytes) {
        int64_t k = nbytes - j < CHUNK ? nbytes - j : CHUNK;
        for (int64_t x = 0; x < k; x++) {
            int64_t bit = (j + x) * 8;
            int64_t avail = n - bit < 8 ? n - bit : 8;
            uint8_t v = bits_at(bm, off + bit, avail);
            if (mask != NULL) v &= bits_at(mask, off + bit, avail);
            buf[x] = v;
        }
        crc = ferry_crc32c_update(crc, buf, (size_t)k);
        j += k;
    }
    return crc;
}

static inline void zero_slot(uint8_t *p, int width)
{
    switch (width) { /* constant sizes: plain stores instead of a memset call */
    case 1: memset(p, 0, 1); break;
    case 2: memset(p, 0, 2); break;
    case 4: memset(p, 0, 4); break;
    case 8: memset(p, 0, 8); break;
    default: memset(p, 0, 16); break;
    }
}

/* n values of `width` bytes starting at row off, null slots as zeros. `validity` is NULL
 * when these rows hold no null. */
static uint32_t put_values(uint32_t crc, const uint8_t *values, int width,
                           const uint8_t *validity, int64_t off, int64_t n)
{
    if (validity == NULL)
        return ferry_crc32c_update(crc, values + off * width, (size_t)(n * width));
    uint8_t buf[CHUNK];
    int64_t rows_per_chunk = CHUNK / width;
    for (int64_t r = 0; r < n; r += rows_per_chunk) {
        int64_t k = n - r < rows_per_chunk ? n - r : rows_per_chunk;
        memcpy(buf, values + (off + r) * width, (size_t)(k * width));
        /* Eight rows per validity window; only the null ones are touched. */
        for (int64_t x = 0; x < k; x += 8) {
            int64_t avail = k - x < 8 ? k - x : 8;
            unsigned nulls = (uint8_t)~bits_at(validity, off + r + x, avail);
            if (avail < 8) nulls &= (1u << avail) - 1;
            while (nulls != 0) {
                int j = __builtin_ctz(nulls);
                zero_slot(buf + (x + j) * width, width);
                nulls &= nulls - 1;
            }
        }
        crc = ferry_crc32c_update(crc, buf, (size_t)(k * width));
    }
    return crc;
}

/* n+1 offsets from off, rebased to start at zero, as int32le. */
static uint32_t put_offsets(uint32_t crc, const int32_t *offsets, int64_t off, int64_t n)
{
    if (n == 0) {
        static const uint8_t zero[4] = {0, 0, 0, 0};
        return ferry_crc32c_update(crc, zero, sizeof zero); /* the buffer may not exist */
    }
    int32_t base = offsets[off];
    if (base == 0) return ferry_crc32c_update(crc, offsets + off, (size_t)(n + 1) * 4);
    int32_t buf[CHUNK / 4];
    for (int64_t r = 0; r <= n; r += CHUNK / 4) {
        int64_t k = n + 1 - r < CHUNK / 4 ? n + 1 - r : CHUNK / 4;
        for (int64_t x = 0; x < k; x++)
            buf[x] = (int32_t)((uint32_t)offsets[off + r + x] - (uint32_t)base);
        crc = ferry_crc32c_update(crc, buf, (size_t)k * 4);
    }
    return crc;
}

static uint32_t put_column(uint32_t crc, const struct ferry_column *c, int64_t off, int64_t n)
{
    uint8_t type = (uint8_t)c->type;
    crc = ferry_crc32c_update(crc, &type, 1);

    bool nulls = has_null(c->validity, off, n);
    int64_t bitmap_bytes = (n + 7) / 8;
    crc = put_u64(crc, nulls ? (uint64_t)bitmap_bytes : 0);
    if (nulls) crc = put_bitmap(crc, c->validity, NULL, off, n);

    if (is_varwidth(c->type)) {
        crc = put_u64(crc, (uint64_t)(n + 1) * 4);
        crc = put_offsets(crc, c->offsets, off, n);
        int64_t first = n > 0 ? c->offsets[off] : 0;
        int64_t used = n > 0 ? (int64_t)c->offsets[off + n] - first : 0;
        crc = put_u64(crc, (uint64_t)used);
        if (used > 0) crc = ferry_crc32c_update(crc, c->data + first, (size_t)used);
    } else if (c->type == FERRY_TYPE_BOOL) {
        crc = put_u64(crc, (uint64_t)bitmap_bytes);
        if (n > 0) crc = put_bitmap(crc, c->values, nulls ? c->validity : NULL, off, n);
    } else {
        int width = value_width(c->type);
        crc = put_u64(crc, (uint64_t)(n * width));
        if (n > 0) crc = put_values(crc, c->values, width, nulls ? c->validity : NULL, off, n);
    }
    return crc;
}

uint32_t ferry_batch_digest(const struct ferry_batch *b)
{
#ifdef FERRY_NO_DIGEST
    /* Benchmark builds only (cmake -DFERRY_NO_DIGEST=ON): measures what integrity costs. */
    (void)b;
    return 0;
#endif
    int64_t n = b->length, off = b->offset;
    int ncols = b->schema->n_fields;
    uint32_t crc = put_u64(0, (uint64_t)n);
    crc = put_u64(crc, (uint64_t)ncols);
    for (int i = 0; i < ncols; i++) crc = put_column(crc, &b->columns[i], off, n);
    if (n > 0) crc = ferry_crc32c_update(crc, b->ops + off, (size_t)n);
    return crc;
}
