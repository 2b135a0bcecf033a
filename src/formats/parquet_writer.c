/* formats/parquet_writer.c - Parquet encoder: pages, row groups, footer.
 *
 * Owns one file's encoding state: per column the page being filled, the finished
 * (compressed) pages of the current row group, a dictionary and the chunk statistics;
 * and the serialized RowGroup metadata of the row groups already written. Calls core,
 * the batch readers, thrift_compact.c, libzstd, snappy and zlib. Called by the `files`
 * sink (format: parquet) and the unit tests. Written from the Apache Parquet format
 * specification (parquet.thrift, Encodings.md); see docs/internals/parquet.md.
 *
 * Each column chunk is: [dictionary page] data page v1 ... Data pages are PLAIN or
 * RLE_DICTIONARY; definition levels (nullable columns only, max level 1) use the
 * RLE/bit-packed hybrid with a 4-byte length prefix as data page v1 requires. Column
 * chunks must be contiguous in the file, so a row group is kept in memory until it is
 * complete: that is what bounds memory (see parquet_writer.h). */
#include <math.h>
#include <snappy-c.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include "formats/parquet_writer.h"
#include "formats/thrift_compact.h"
#include "ferry/core.h"

#define MIB ((size_t)1 << 20)
#define STEP_ROWS 4096
#define STEP_VAR_BYTES MIB
#define PAGE_SLACK (STEP_ROWS * 16) /* a page's fill past page_bytes: one fixed-width step */
/* Binary statistics longer than this are left out rather than truncated: an exact
 * min/max of a huge value would bloat the footer, and a truncated one needs care. */
#define STATS_MAX_BYTES 256

/* parquet.thrift enums */
enum { PT_BOOLEAN = 0, PT_INT32 = 1, PT_INT64 = 2, PT_FLOAT = 4, PT_DOUBLE = 5,
       PT_BYTE_ARRAY = 6, PT_FLBA = 7 };
enum { CT_UTF8 = 0, CT_DECIMAL = 5, CT_DATE = 6, CT_TIMESTAMP_MICROS = 10, CT_INT_8 = 15,
       CT_INT_16 = 16, CT_INT_32 = 17, CT_INT_64 = 18, CT_JSON = 19 };
enum { ENC_PLAIN = 0, ENC_RLE = 3, ENC_RLE_DICTIONARY = 8 };
enum { PAGE_DATA = 0, PAGE_DICTIONARY = 2 };
enum { CODEC_UNCOMPRESSED = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };

/* A column chunk's finished pages: a chain of fixed-size blocks, filled in order and kept
 * for the next row groups. Unlike one growing buffer it is never copied by a realloc and
 * holds at most one partly filled block per column: the row group's pages take the memory
 * they need, not up to twice that plus the holes the copies left (parquet_writer.h). */
#define BLOCK_BYTES ((size_t)128 * 1024)
struct block {
    struct block *next;
    size_t len;
    unsigned char data[];
};
struct pages {
    struct block *head, *cur; /* cur: the block being filled; the ones after it are spare */
    size_t len;               /* bytes in the chain */
};

/* How a column's values are compared for min/max (parquet "type defined order"). */
enum order { ORD_BOOL, ORD_INT, ORD_FLOAT, ORD_DEC128, ORD_BYTES };

struct column {
    const struct ferry_field *field; /* in w->schema */
    int ptype;
    int type_length; /* FIXED_LEN_BYTE_ARRAY only */
    int32_t field_id; /* > 0: written as SchemaElement.field_id */
    enum order order;
    bool varwidth;
    bool dict_enabled; /* by option and type */
    bool dict_active;  /* in the current chunk: false once the dictionary overflowed */
    int fixed_dict;    /* INT32/INT64/FLOAT/DOUBLE: the value width (4, 8) when they may be
                          dictionary-encoded (decided per chunk, see fixed_dict_page), else 0 */
    bool dict_decided; /* fixed: the chunk's first page chose dictionary (else inactive) */

    /* the page being filled */
    struct ferry_buf values; /* PLAIN values (all pages not dictionary-encoded) */
    uint32_t *idx;           /* dictionary indexes of the non-null values */
    size_t idx_n, idx_cap;
    uint8_t *def;            /* one definition level per value (nullable columns) */
    size_t def_n, def_cap;
    int64_t page_values;     /* values in the page, nulls included */
    int64_t page_bools;      /* BOOLEAN: bits used in `values` */

    /* the current chunk */
    struct pages chunk;      /* finished data pages, headers included */
    int64_t chunk_values, chunk_nulls;
    int64_t chunk_uncompressed; /* page headers + uncompressed page bodies */
    bool used_plain, used_dict;

    /* the dictionary of the current chunk: `dict` holds the PLAIN entries (4-byte length +
     * bytes), dict_off[i] where entry i starts; slots is an open-addressing table of
     * entry index + 1 */
    struct ferry_buf dict;
    uint32_t *dict_off;
    size_t dict_n, dict_off_cap;
    uint32_t *slots;
    size_t slot_cap; /* power of two */

    /* statistics of the current chunk */
    bool has_minmax;
    int64_t min_i, max_i;
    double min_f, max_f;
    struct ferry_decimal128 min_d, max_d;
    struct ferry_buf min_b, max_b;
    bool stats_too_long;
    int64_t chunk_nans;

    /* statistics of the whole file: each chunk's merged in at its row group's flush, so
     * callers that describe the file (iceberg manifests) need no pass of their own */
    int64_t file_values, file_nulls, file_nans, file_bytes;
    bool file_minmax, file_too_long;
    int64_t fmin_i, fmax_i;
    double fmin_f, fmax_f;
    struct ferry_decimal128 fmin_d, fmax_d;
    struct ferry_buf fmin_b, fmax_b;
};

struct ferry_parquet_writer {
    struct ferry_schema *schema;
    struct ferry_parquet_options opt;
    ferry_parquet_write_fn write;
    void *ctx;
    struct column *cols;
    int n_cols;
    int64_t offset;       /* bytes written so far */
    int64_t rows;         /* rows in finished row groups + the open one */
    int64_t group_rows;   /* rows in the open row group */
    int n_groups;
    struct ferry_buf groups; /* serialized RowGroup structs, for the footer's list */
    struct ferry_buf body;   /* scratch: one page body before compression */
    struct ferry_buf packed; /* scratch: one compressed page */
    struct ferry_buf head;   /* scratch: one page header */
    ZSTD_CCtx *zstd;
    bool failed;
};

/* ---- options ------------------------------------------------------------------------- */

void ferry__parquet_options_default(struct ferry_parquet_options *o)
{
    memset(o, 0, sizeof(*o));
    o->codec = FERRY_PARQUET_ZSTD;
    o->row_group_bytes = 32 * MIB;
    o->page_bytes = MIB;
    o->dictionary = true;
    o->dictionary_bytes = 4 * MIB;
}

int ferry__parquet_codec_from_name(const char *name, enum ferry_parquet_codec *out,
                                   struct ferry_error *err)
{
    static const struct {
        const char *name;
        enum ferry_parquet_codec codec;
    } names[] = {{"zstd", FERRY_PARQUET_ZSTD},
                 {"snappy", FERRY_PARQUET_SNAPPY},
                 {"gzip", FERRY_PARQUET_GZIP},
                 {"none", FERRY_PARQUET_NONE},
                 {"uncompressed", FERRY_PARQUET_NONE}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (name != NULL && strcmp(name, names[i].name) == 0) {
            *out = names[i].codec;
            return FERRY_OK;
        }
    }
    return ferry_error_set(err, FERRY_ECONFIG, "config",
                           "compression: unknown parquet codec \"%s\" (zstd, snappy, gzip, none)",
                           name ? name : "");
}

static int codec_id(enum ferry_parquet_codec c)
{
    switch (c) {
    case FERRY_PARQUET_SNAPPY: return CODEC_SNAPPY;
    case FERRY_PARQUET_GZIP: return CODEC_GZIP;
    case FERRY_PARQUET_NONE: return CODEC_UNCOMPRESSED;
    case FERRY_PARQUET_ZSTD: break;
    }
    return CODEC_ZSTD;
}

/* ---- small helpers ------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return FERRY_OK;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *q = ferry_realloc(*p, n * elem);
    if (q == NULL)
        return FERRY_ENOMEM;
    *p = q;
    *cap = n;
    return FERRY_OK;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void dec_to_be(struct ferry_decimal128 d, uint8_t out[16])
{
    uint64_t hi = (uint64_t)d.hi;
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(hi >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(d.lo >> (56 - 8 * i));
    }
}

/* The fewest bytes whose two's complement holds every unscaled value of `precision` digits:
 * what the Iceberg spec requires for decimal(P,S) and the Parquet spec recommends
 * (decimal(20,2): 9 bytes, decimal(28,6): 12, decimal(38,x): 16). */
static int dec_flba_width(int precision)
{
    static const int digits[17] = {0, 2, 4, 6, 9, 11, 14, 16, 18, 21, 23, 26, 28, 31, 33, 35, 38};
    int n = 1;
    while (n < 16 && digits[n] < precision)
        n++;
    return n;
}

/* The last `len` of the 16 big-endian bytes of d (the dropped ones only repeat the sign). */
static void dec_to_be_n(struct ferry_decimal128 d, uint8_t *out, int len)
{
    uint8_t be[16];
    dec_to_be(d, be);
    memcpy(out, be + 16 - len, (size_t)len);
}

static int dec_cmp(struct ferry_decimal128 a, struct ferry_decimal128 b)
{
    if (a.hi != b.hi)
        return a.hi < b.hi ? -1 : 1;
    if (a.lo != b.lo)
        return a.lo < b.lo ? -1 : 1;
    return 0;
}

static int bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

static int fail(struct ferry_parquet_writer *w, struct ferry_error *err, int code,
                const char *fmt, const char *name)
{
    w->failed = true;
    return ferry_error_set(err, code, "parquet", fmt, name);
}

/* ---- RLE / bit-packed hybrid (Encodings.md) ------------------------------------------ */

/* Values come either as bytes (definition levels) or as uint32 (dictionary indexes). */
struct levels {
    const uint8_t *u8;
    const uint32_t *u32;
};

static inline uint32_t lv(struct levels v, size_t i)
{
    return v.u8 ? v.u8[i] : v.u32[i];
}

static bool run_of_8(struct levels v, size_t i, size_t n)
{
    if (i + 8 > n)
        return false;
    uint32_t x = lv(v, i);
    for (size_t k = 1; k < 8; k++)
        if (lv(v, i + k) != x)
            return false;
    return true;
}

static int put_uvarint(struct ferry_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    return ferry_buf_append(b, tmp, n);
}

/* Runs of 8 or more equal values become RLE runs; everything else goes into bit-packed
 * runs of whole groups of 8 (the last group of the page is zero-padded, which readers
 * ignore because they know the value count). */
static int rle_hybrid(struct ferry_buf *out, struct levels v, size_t n, int bw)
{
    size_t i = 0;
    int rc = FERRY_OK;
    int vbytes = (bw + 7) / 8;
    while (i < n && rc == FERRY_OK) {
        if (run_of_8(v, i, n)) {
            uint32_t x = lv(v, i);
            size_t j = i + 8;
            while (j < n && lv(v, j) == x)
                j++;
            rc = put_uvarint(out, (uint64_t)(j - i) << 1);
            uint8_t vb[4];
            put_le32(vb, x);
            if (rc == FERRY_OK)
                rc = ferry_buf_append(out, vb, (size_t)vbytes);
            i = j;
            continue;
        }
        size_t end = i;
        do {
            end += 8;
        } while (end < n && !run_of_8(v, end, n));
        size_t groups = (end - i) / 8;
        rc = put_uvarint(out, ((uint64_t)groups << 1) | 1);
        if (rc == FERRY_OK)
            rc = ferry_buf_reserve(out, groups * (size_t)bw);
        if (rc != FERRY_OK)
            break;
        uint64_t acc = 0;
        int nbits = 0;
        uint8_t *p = (uint8_t *)out->data + out->len;
        for (size_t k = i; k < end; k++) {
            acc |= (uint64_t)(k < n ? lv(v, k) : 0) << nbits;
            nbits += bw;
            while (nbits >= 8) {
                *p++ = (uint8_t)acc;
                acc >>= 8;
                nbits -= 8;
            }
        }
        out->len += groups * (size_t)bw;
        i = end;
    }
    return rc;
}

static int bit_width(size_t max_value)
{
    int bw = 0;
    while (max_value > 0) {
        bw++;
        max_value >>= 1;
    }
    return bw;
}

/* ---- compression and page output ----------------------------------------------------- */

static int compress_into(struct ferry_parquet_writer *w, const void *in, size_t n,
                         struct ferry_buf *out)
{
    out->len = 0;
    switch (w->opt.codec) {
    case FERRY_PARQUET_NONE:
        return ferry_buf_append(out, in, n);
    case FERRY_PARQUET_SNAPPY: {
        size_t cap = snappy_max_compressed_length(n);
        if (ferry_buf_reserve(out, cap) != FERRY_OK)
            return FERRY_ENOMEM;
        size_t got = cap;
        if (snappy_compress(in, n, out->data, &got) != SNAPPY_OK)
            return FERRY_EIO;
        out->len = got;
        return FERRY_OK;
    }
    case FERRY_PARQUET_GZIP: {
        z_stream zs;
        memset(&zs, 0, sizeof(zs));
        int level = w->opt.level ? w->opt.level : 6;
        /* windowBits 15 + 16: a gzip (RFC 1952) wrapper, which is what parquet's GZIP is */
        if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return FERRY_ENOMEM;
        size_t cap = deflateBound(&zs, (uLong)n) + 32;
        if (ferry_buf_reserve(out, cap) != FERRY_OK) {
            deflateEnd(&zs);
            return FERRY_ENOMEM;
        }
        zs.next_in = (Bytef *)(uintptr_t)in;
        zs.avail_in = (uInt)n;
        zs.next_out = (Bytef *)out->data;
        zs.avail_out = (uInt)cap;
        int zrc = deflate(&zs, Z_FINISH);
        out->len = cap - zs.avail_out;
        deflateEnd(&zs);
        return zrc == Z_STREAM_END ? FERRY_OK : FERRY_EIO;
    }
    case FERRY_PARQUET_ZSTD: {
        size_t cap = ZSTD_compressBound(n);
        if (ferry_buf_reserve(out, cap) != FERRY_OK)
            return FERRY_ENOMEM;
        size_t got = ZSTD_compressCCtx(w->zstd, out->data, cap, in, n,
                                       w->opt.level ? w->opt.level : 3);
        if (ZSTD_isError(got))
            return FERRY_EIO;
        out->len = got;
        return FERRY_OK;
    }
    }
    return FERRY_EINVAL;
}

static int emit(struct ferry_parquet_writer *w, const void *p, size_t n, struct ferry_error *err)
{
    if (n == 0)
        return FERRY_OK;
    int rc = w->write(w->ctx, p, n);
    if (rc != FERRY_OK) {
        w->failed = true;
        return ferry_error_set(err, rc, "parquet", "writing %zu bytes at offset %lld failed", n,
                               (long long)w->offset);
    }
    w->offset += (int64_t)n;
    return FERRY_OK;
}

static int pages_append(struct pages *pg, const void *p, size_t n)
{
    const unsigned char *q = p;
    while (n > 0) {
        if (pg->cur == NULL || pg->cur->len == BLOCK_BYTES) {
            struct block *next = pg->cur ? pg->cur->next : pg->head;
            if (next == NULL) {
                next = ferry_malloc(sizeof *next + BLOCK_BYTES);
                if (next == NULL)
                    return FERRY_ENOMEM;
                next->next = NULL;
                next->len = 0;
                if (pg->cur)
                    pg->cur->next = next;
                else
                    pg->head = next;
            }
            pg->cur = next;
        }
        size_t k = BLOCK_BYTES - pg->cur->len < n ? BLOCK_BYTES - pg->cur->len : n;
        memcpy(pg->cur->data + pg->cur->len, q, k);
        pg->cur->len += k;
        pg->len += k;
        q += k;
        n -= k;
    }
    return FERRY_OK;
}

/* Empties the chain, keeping its blocks. */
static void pages_reset(struct pages *pg)
{
    for (struct block *b = pg->head; b != NULL && b->len > 0; b = b->next)
        b->len = 0;
    pg->cur = NULL;
    pg->len = 0;
}

static void pages_free(struct pages *pg)
{
    while (pg->head != NULL) {
        struct block *b = pg->head;
        pg->head = b->next;
        ferry_free(b);
    }
    pg->cur = NULL;
    pg->len = 0;
}

static int emit_pages(struct ferry_parquet_writer *w, const struct pages *pg,
                      struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (const struct block *b = pg->head; b != NULL && b->len > 0 && rc == FERRY_OK; b = b->next)
        rc = emit(w, b->data, b->len, err);
    return rc;
}

/* Serializes a PageHeader for a body already compressed into w->packed. */
static int page_header(struct ferry_parquet_writer *w, int type, size_t raw, size_t packed,
                       int32_t num_values, int encoding)
{
    struct ferry_thrift t;
    w->head.len = 0;
    ferry__thrift_init(&t, &w->head);
    ferry__thrift_i32(&t, 1, type);
    ferry__thrift_i32(&t, 2, (int32_t)raw);
    ferry__thrift_i32(&t, 3, (int32_t)packed);
    if (type == PAGE_DATA) {
        ferry__thrift_struct_begin(&t, 5); /* DataPageHeader */
        ferry__thrift_i32(&t, 1, num_values);
        ferry__thrift_i32(&t, 2, encoding);
        ferry__thrift_i32(&t, 3, ENC_RLE); /* definition levels */
        ferry__thrift_i32(&t, 4, ENC_RLE); /* repetition levels (none: flat schema) */
        ferry__thrift_struct_end(&t);
    } else {
        ferry__thrift_struct_begin(&t, 7); /* DictionaryPageHeader */
        ferry__thrift_i32(&t, 1, num_values);
        ferry__thrift_i32(&t, 2, ENC_PLAIN);
        ferry__thrift_struct_end(&t);
    }
    ferry__thrift_end(&t);
    return ferry__thrift_status(&t);
}

static int dict_rehash(struct column *c);

/* A dictionary trial that failed gives its memory back (dictionary, offsets, hash table,
 * indexes), or every distinct-valued column would keep them for the rest of the file. */
static void dict_release(struct column *c)
{
    ferry_buf_release(&c->dict);
    ferry_free(c->slots);
    c->slots = NULL;
    c->slot_cap = 0;
    ferry_free(c->dict_off);
    c->dict_off = NULL;
    c->dict_off_cap = 0;
    ferry_free(c->idx);
    c->idx = NULL;
    c->idx_cap = 0;
}

static uint64_t fixed_key(const uint8_t *p, int width)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)width);
    return v;
}

static size_t fixed_hash(uint64_t v, size_t cap)
{
    v ^= v >> 33;
    v *= UINT64_C(0xff51afd7ed558ccd);
    v ^= v >> 33;
    return (size_t)v & (cap - 1);
}

/* The chunk's first `m` values, now in the dictionary: does dictionary + bit-packed indexes
 * take under half of their PLAIN bytes? */
static bool dict_pays(const struct column *c, size_t m, int width)
{
    size_t bits = (size_t)bit_width(c->dict_n > 1 ? c->dict_n - 1 : 1);
    return (c->dict.len + m * bits / 8) * 2 < m * (size_t)width;
}

/* Values a fixed-width chunk's dictionary trial looks at before deciding: enough to see
 * that a few thousand distinct values repeat, few enough that a column of distinct values
 * (ids, timestamps) gives up after a small hash table. */
#define FIXED_DICT_TRIAL 32768

/* Fixed-width columns keep PLAIN values while a page fills (the hot loop stays a store);
 * when the page closes and the chunk's dictionary is active, its values are looked up in
 * the dictionary (`dict` then holds raw PLAIN values, width bytes each). The chunk's first
 * FIXED_DICT_TRIAL values decide: a dictionary is kept only when dictionary + bit-packed
 * indexes take less than half of their PLAIN bytes (few distinct values: codes, quantities,
 * prices on a grid); else, or once the dictionary would pass dictionary_bytes, the rest of
 * the chunk is PLAIN and this page too (its PLAIN values are still there). */
static int fixed_dict_page(struct ferry_parquet_writer *w, struct column *c)
{
    const int width = c->fixed_dict;
    const size_t n = c->values.len / (size_t)width;
    const size_t n0 = c->dict_n, len0 = c->dict.len;
    if (grow((void **)&c->idx, &c->idx_cap, n ? n : 1, sizeof(uint32_t)) != FERRY_OK)
        return FERRY_ENOMEM;
    const uint8_t *v = (const uint8_t *)c->values.data;
    bool fits = true;
    for (size_t i = 0; i < n && fits; i++) {
        if (!c->dict_decided && i == FIXED_DICT_TRIAL) {
            fits = dict_pays(c, i, width);
            c->dict_decided = true;
            if (!fits) break;
        }
        if ((c->dict_n + 1) * 2 > c->slot_cap && dict_rehash(c) != FERRY_OK) return FERRY_ENOMEM;
        uint64_t key = fixed_key(v + i * (size_t)width, width);
        size_t h = fixed_hash(key, c->slot_cap);
        uint32_t found = UINT32_MAX;
        while (c->slots[h] != 0) {
            uint32_t e = c->slots[h] - 1;
            if (fixed_key((const uint8_t *)c->dict.data + (size_t)e * (size_t)width, width) == key) {
                found = e;
                break;
            }
            h = (h + 1) & (c->slot_cap - 1);
        }
        if (found == UINT32_MAX) {
            if (c->dict.len + (size_t)width > w->opt.dictionary_bytes) {
                fits = false;
                break;
            }
            if (ferry_buf_append(&c->dict, v + i * (size_t)width, (size_t)width) != FERRY_OK)
                return FERRY_ENOMEM;
            found = (uint32_t)c->dict_n++;
            c->slots[h] = found + 1;
        }
        c->idx[i] = found;
    }
    if (fits && !c->dict_decided) {
        fits = dict_pays(c, n, width);
        c->dict_decided = true;
    }
    if (!fits) {
        /* The pages written so far keep the dictionary as it was before this page. */
        c->dict_active = false;
        c->dict_n = c->used_dict ? n0 : 0;
        c->dict.len = c->used_dict ? len0 : 0;
        c->idx_n = 0;
        if (!c->used_dict) dict_release(c);
        return FERRY_OK;
    }
    c->idx_n = n;
    return FERRY_OK;
}

static const uint8_t *dict_entry(const struct column *c, uint32_t i, size_t *n);

/* Byte arrays: the chunk's first values decide as for fixed widths (the first page, or
 * earlier once the trial's bounds below are reached). Mostly distinct values (ids, free
 * text) gain nothing from a dictionary but pay for its indexes: the page's values are then
 * written back as PLAIN (dictionary entries are PLAIN-encoded already), the trial's memory
 * is given back and the rest of the chunk is PLAIN. */
static int bytes_dict_decide(struct column *c)
{
    c->dict_decided = true;
    size_t plain = 0;
    for (size_t i = 0; i < c->idx_n; i++) {
        size_t n;
        dict_entry(c, c->idx[i], &n);
        plain += 4 + n;
    }
    size_t bits = (size_t)bit_width(c->dict_n > 1 ? c->dict_n - 1 : 1);
    if ((c->dict.len + c->idx_n * bits / 8) * 2 < plain) return FERRY_OK;
    if (ferry_buf_reserve(&c->values, plain) != FERRY_OK) return FERRY_ENOMEM;
    for (size_t i = 0; i < c->idx_n; i++) {
        size_t n;
        const uint8_t *e = dict_entry(c, c->idx[i], &n);
        memcpy(c->values.data + c->values.len, e - 4, 4 + n);
        c->values.len += 4 + n;
    }
    c->idx_n = 0;
    c->dict_n = 0;
    c->dict_active = false;
    dict_release(c);
    return FERRY_OK;
}

/* Encodes, compresses and appends the column's pending page to its chunk. */
static int finish_page(struct ferry_parquet_writer *w, struct column *c, struct ferry_error *err)
{
    if (c->page_values == 0)
        return FERRY_OK;
    if (c->page_values > INT32_MAX)
        return fail(w, err, FERRY_EINVAL, "column %s: page has too many values", c->field->name);
    struct ferry_buf *body = &w->body;
    body->len = 0;
    int rc = FERRY_OK;
    if (c->fixed_dict && c->dict_active && c->values.len > 0 && fixed_dict_page(w, c) != FERRY_OK)
        return fail(w, err, FERRY_ENOMEM, "column %s: dictionary allocation failed",
                    c->field->name);
    if (!c->fixed_dict && c->dict_active && !c->dict_decided && c->idx_n > 0 &&
        c->values.len == 0 && bytes_dict_decide(c) != FERRY_OK)
        return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
    if (c->field->nullable) {
        rc = ferry_buf_append(body, "\0\0\0\0", 4);
        if (rc == FERRY_OK) {
            struct levels v = {.u8 = c->def};
            rc = rle_hybrid(body, v, c->def_n, 1);
        }
        if (rc == FERRY_OK)
            put_le32((uint8_t *)body->data, (uint32_t)(body->len - 4));
    }
    /* A page whose values are all null is PLAIN with no values: no dictionary needed. */
    bool dict_page = c->dict_active && c->dict_n > 0;
    if (rc == FERRY_OK && dict_page) {
        int bw = bit_width(c->dict_n - 1);
        if (bw == 0)
            bw = 1;
        uint8_t b = (uint8_t)bw;
        rc = ferry_buf_append(body, &b, 1);
        if (rc == FERRY_OK) {
            struct levels v = {.u32 = c->idx};
            rc = rle_hybrid(body, v, c->idx_n, bw);
        }
    } else if (rc == FERRY_OK) {
        rc = ferry_buf_append(body, c->values.data, c->values.len);
    }
    if (rc == FERRY_OK)
        rc = compress_into(w, body->data, body->len, &w->packed);
    if (rc == FERRY_OK)
        rc = page_header(w, PAGE_DATA, body->len, w->packed.len, (int32_t)c->page_values,
                         dict_page ? ENC_RLE_DICTIONARY : ENC_PLAIN);
    if (rc == FERRY_OK)
        rc = pages_append(&c->chunk, w->head.data, w->head.len);
    if (rc == FERRY_OK)
        rc = pages_append(&c->chunk, w->packed.data, w->packed.len);
    if (rc != FERRY_OK)
        return fail(w, err, rc, "column %s: encoding a data page failed", c->field->name);
    c->chunk_uncompressed += (int64_t)(w->head.len + body->len);
    if (dict_page)
        c->used_dict = true;
    else
        c->used_plain = true;
    c->values.len = 0;
    /* A page grown past its reserved size (a dictionary trial written back as PLAIN, a huge
     * value) gives the extra back: the next page reserves page_bytes again. */
    if (c->values.cap > 2 * (w->opt.page_bytes + PAGE_SLACK)) ferry_buf_release(&c->values);
    c->idx_n = 0;
    c->def_n = 0;
    c->page_values = 0;
    c->page_bools = 0;
    return FERRY_OK;
}

/* Bytes the column holds for the open row group (uncompressed, encoded). */
static size_t column_bytes(const struct column *c)
{
    return (size_t)c->chunk_uncompressed + c->values.len + c->idx_n * 4 + c->def_n + c->dict.len;
}

static size_t page_fill(const struct column *c)
{
    return c->values.len + c->idx_n * 4 + c->def_n;
}

/* ---- statistics ---------------------------------------------------------------------- */

static void stat_int(struct column *c, int64_t v)
{
    if (!c->has_minmax) {
        c->min_i = c->max_i = v;
        c->has_minmax = true;
    } else if (v < c->min_i) {
        c->min_i = v;
    } else if (v > c->max_i) {
        c->max_i = v;
    }
}

static void stat_float(struct column *c, double v)
{
    if (isnan(v)) {
        c->chunk_nans++;
        return; /* NaN has no place in the order: readers must not prune on it */
    }
    if (!c->has_minmax) {
        c->min_f = c->max_f = v;
        c->has_minmax = true;
    } else if (v < c->min_f) {
        c->min_f = v;
    } else if (v > c->max_f) {
        c->max_f = v;
    }
}

static void stat_dec(struct column *c, struct ferry_decimal128 v)
{
    if (!c->has_minmax) {
        c->min_d = c->max_d = v;
        c->has_minmax = true;
    } else if (dec_cmp(v, c->min_d) < 0) {
        c->min_d = v;
    } else if (dec_cmp(v, c->max_d) > 0) {
        c->max_d = v;
    }
}

static int set_buf(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    b->len = 0;
    return ferry_buf_append(b, p, n);
}

static int stat_bytes(struct column *c, const uint8_t *p, size_t n)
{
    if (c->stats_too_long)
        return FERRY_OK;
    if (n > STATS_MAX_BYTES) {
        c->stats_too_long = true;
        return FERRY_OK;
    }
    int rc = FERRY_OK;
    if (!c->has_minmax) {
        rc = set_buf(&c->min_b, p, n);
        if (rc == FERRY_OK)
            rc = set_buf(&c->max_b, p, n);
        c->has_minmax = true;
    } else if (bytes_cmp(p, n, (const uint8_t *)c->min_b.data, c->min_b.len) < 0) {
        rc = set_buf(&c->min_b, p, n);
    } else if (bytes_cmp(p, n, (const uint8_t *)c->max_b.data, c->max_b.len) > 0) {
        rc = set_buf(&c->max_b, p, n);
    }
    return rc;
}

/* Writes Statistics (min_value/max_value in PLAIN form, null_count) into t. */
static void write_stats(struct ferry_thrift *t, const struct column *c)
{
    ferry__thrift_struct_begin(t, 12);
    ferry__thrift_i64(t, 3, c->chunk_nulls);
    if (c->has_minmax && !c->stats_too_long) {
        uint8_t mn[16], mx[16];
        const void *pmin = mn, *pmax = mx;
        size_t n = 0, nmax = 0;
        switch (c->order) {
        case ORD_BOOL:
            mn[0] = (uint8_t)c->min_i;
            mx[0] = (uint8_t)c->max_i;
            n = nmax = 1;
            break;
        case ORD_INT:
            if (c->ptype == PT_INT32) {
                put_le32(mn, (uint32_t)c->min_i);
                put_le32(mx, (uint32_t)c->max_i);
                n = nmax = 4;
            } else {
                put_le64(mn, (uint64_t)c->min_i);
                put_le64(mx, (uint64_t)c->max_i);
                n = nmax = 8;
            }
            break;
        case ORD_FLOAT: {
            /* the spec asks for -0.0 as a zero min and +0.0 as a zero max */
            double lo = c->min_f == 0 ? -0.0 : c->min_f;
            double hi = c->max_f == 0 ? 0.0 : c->max_f;
            if (c->ptype == PT_FLOAT) {
                float flo = (float)lo, fhi = (float)hi;
                uint32_t a, b;
                memcpy(&a, &flo, 4);
                memcpy(&b, &fhi, 4);
                put_le32(mn, a);
                put_le32(mx, b);
                n = nmax = 4;
            } else {
                uint64_t a, b;
                memcpy(&a, &lo, 8);
                memcpy(&b, &hi, 8);
                put_le64(mn, a);
                put_le64(mx, b);
                n = nmax = 8;
            }
            break;
        }
        case ORD_DEC128:
            dec_to_be_n(c->min_d, mn, c->type_length);
            dec_to_be_n(c->max_d, mx, c->type_length);
            n = nmax = (size_t)c->type_length;
            break;
        case ORD_BYTES:
            pmin = c->min_b.data;
            pmax = c->max_b.data;
            n = c->min_b.len;
            nmax = c->max_b.len;
            break;
        }
        ferry__thrift_binary(t, 5, pmax, nmax);
        ferry__thrift_binary(t, 6, pmin, n);
    }
    ferry__thrift_struct_end(t);
}

/* ---- dictionary ---------------------------------------------------------------------- */

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    /* FNV-1a: dictionary keys are short strings; quality is enough for linear probing */
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h ^ (h >> 29);
}

static const uint8_t *dict_entry(const struct column *c, uint32_t i, size_t *n)
{
    const uint8_t *e = (const uint8_t *)c->dict.data + c->dict_off[i];
    *n = (size_t)e[0] | (size_t)e[1] << 8 | (size_t)e[2] << 16 | (size_t)e[3] << 24;
    return e + 4;
}

static int dict_rehash(struct column *c)
{
    size_t cap = c->slot_cap ? c->slot_cap * 2 : 1024;
    uint32_t *s = ferry_calloc(cap, sizeof(*s));
    if (s == NULL)
        return FERRY_ENOMEM;
    for (uint32_t i = 0; i < c->dict_n; i++) {
        size_t h;
        if (c->fixed_dict) {
            const uint8_t *p = (const uint8_t *)c->dict.data + (size_t)i * (size_t)c->fixed_dict;
            h = fixed_hash(fixed_key(p, c->fixed_dict), cap);
        } else {
            size_t n;
            const uint8_t *p = dict_entry(c, i, &n);
            h = (size_t)hash_bytes(p, n) & (cap - 1);
        }
        while (s[h] != 0)
            h = (h + 1) & (cap - 1);
        s[h] = i + 1;
    }
    ferry_free(c->slots);
    c->slots = s;
    c->slot_cap = cap;
    return FERRY_OK;
}

/* Finds or adds p in the dictionary. *idx = UINT32_MAX when adding would pass the
 * dictionary limit (the caller falls back to PLAIN). */
static int dict_lookup(struct ferry_parquet_writer *w, struct column *c, const uint8_t *p, size_t n,
                       uint32_t *idx)
{
    if ((c->dict_n + 1) * 2 > c->slot_cap && dict_rehash(c) != FERRY_OK)
        return FERRY_ENOMEM;
    size_t h = (size_t)hash_bytes(p, n) & (c->slot_cap - 1);
    while (c->slots[h] != 0) {
        size_t en;
        const uint8_t *e = dict_entry(c, c->slots[h] - 1, &en);
        if (en == n && memcmp(e, p, n) == 0) {
            *idx = c->slots[h] - 1;
            return FERRY_OK;
        }
        h = (h + 1) & (c->slot_cap - 1);
    }
    if (c->dict.len + 4 + n > w->opt.dictionary_bytes) {
        *idx = UINT32_MAX;
        return FERRY_OK;
    }
    if (grow((void **)&c->dict_off, &c->dict_off_cap, c->dict_n + 1, sizeof(uint32_t)) != FERRY_OK)
        return FERRY_ENOMEM;
    uint8_t len[4];
    put_le32(len, (uint32_t)n);
    c->dict_off[c->dict_n] = (uint32_t)c->dict.len;
    if (ferry_buf_append(&c->dict, len, 4) != FERRY_OK || ferry_buf_append(&c->dict, p, n) != FERRY_OK)
        return FERRY_ENOMEM;
    c->slots[h] = (uint32_t)c->dict_n + 1;
    *idx = (uint32_t)c->dict_n++;
    /* a value already in the dictionary cannot move min/max: stats only on new entries */
    return stat_bytes(c, p, n);
}

/* ---- appending rows ------------------------------------------------------------------ */

/* Whether a byte-array chunk's dictionary trial has seen enough: FIXED_DICT_TRIAL values
 * (or the end of the first page, or a full dictionary: finish_page). Bounded by the page
 * alone, a page of distinct short texts (4 + 1 bytes of index and level each: ~200,000
 * values in 1 MiB) filled the dictionary up to dictionary_bytes, its hash table and
 * offsets, then a PLAIN copy of that size, before the page closed and found that the
 * dictionary did not pay; those buffers stayed allocated for the rest of the file. */
static bool bytes_trial_done(const struct column *c)
{
    return c->idx_n >= FIXED_DICT_TRIAL;
}

static int append_bytes(struct ferry_parquet_writer *w, struct column *c, const uint8_t *p,
                        size_t n, struct ferry_error *err)
{
    int rc;
    if (c->dict_active) {
        uint32_t idx;
        rc = dict_lookup(w, c, p, n, &idx);
        if (rc != FERRY_OK)
            return fail(w, err, rc, "column %s: dictionary allocation failed", c->field->name);
        if (idx != UINT32_MAX) {
            if (grow((void **)&c->idx, &c->idx_cap, c->idx_n + 1, sizeof(uint32_t)) != FERRY_OK)
                return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
            c->idx[c->idx_n++] = idx;
            if (!c->dict_decided && bytes_trial_done(c) && bytes_dict_decide(c) != FERRY_OK)
                return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
            return FERRY_OK;
        }
        /* The dictionary is full: the pages so far keep it, the rest of the chunk is
         * PLAIN. The caller already counted this value in the page; it moves to the next
         * page, which is the first PLAIN one. */
        c->page_values--;
        if (c->field->nullable)
            c->def_n--;
        rc = finish_page(w, c, err);
        if (rc != FERRY_OK)
            return rc;
        c->dict_active = false;
        c->page_values = 1;
        if (c->field->nullable)
            c->def[c->def_n++] = 1;
    }
    uint8_t len[4];
    put_le32(len, (uint32_t)n);
    rc = c->values.cap == 0 ? ferry_buf_reserve(&c->values, w->opt.page_bytes + PAGE_SLACK)
                            : FERRY_OK;
    if (rc == FERRY_OK)
        rc = ferry_buf_append(&c->values, len, 4);
    if (rc == FERRY_OK)
        rc = ferry_buf_append(&c->values, p, n);
    if (rc == FERRY_OK)
        rc = stat_bytes(c, p, n);
    if (rc != FERRY_OK)
        return fail(w, err, rc, "column %s: out of memory", c->field->name);
    return FERRY_OK;
}

/* Appends rows [r0, r1) of column `ci` of b to its page(s). */
static int append_column(struct ferry_parquet_writer *w, struct column *c, const struct ferry_batch *b,
                         int ci, int64_t r0, int64_t r1, struct ferry_error *err)
{
    const struct ferry_column *col = &b->columns[ci];
    int64_t n = r1 - r0;
    bool nullable = c->field->nullable;
    if (!nullable && col->validity != NULL) {
        for (int64_t r = r0; r < r1; r++)
            if (ferry_col_is_null(b, ci, r))
                return fail(w, err, FERRY_EINVAL, "column %s: null in a non-nullable column",
                            c->field->name);
    }
    int width = ferry_type_width(c->field->type);
    /* A page's buffer at its full size at once: grown by doubling it would be copied up to
     * page_bytes and leave the copies' holes in the heap. */
    if (c->values.cap == 0 && ferry_buf_reserve(&c->values, w->opt.page_bytes + PAGE_SLACK) != FERRY_OK)
        return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
    if (!c->varwidth && c->field->type != FERRY_TYPE_BOOL) {
        /* fixed width: reserve the page space once for the whole step */
        size_t out_w = c->ptype == PT_INT32 || c->ptype == PT_FLOAT ? 4
                       : c->ptype == PT_FLBA                       ? 16
                                                                   : 8;
        if (ferry_buf_reserve(&c->values, (size_t)n * out_w) != FERRY_OK)
            return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
    }
    if (nullable && grow((void **)&c->def, &c->def_cap, c->def_n + (size_t)n, 1) != FERRY_OK)
        return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);

    for (int64_t r = r0; r < r1; r++) {
        int64_t i = r + b->offset;
        bool null = col->validity != NULL && !(col->validity[i >> 3] & (1u << (i & 7)));
        c->page_values++;
        c->chunk_values++;
        if (nullable)
            c->def[c->def_n++] = null ? 0 : 1;
        if (null) {
            c->chunk_nulls++;
            continue;
        }
        /* fixed width: the space was reserved above */
        uint8_t *out = c->varwidth || c->ptype == PT_BOOLEAN
                           ? NULL
                           : (uint8_t *)c->values.data + c->values.len;
        switch (c->field->type) {
        case FERRY_TYPE_BOOL: {
            bool v = (col->values[i >> 3] >> (i & 7)) & 1;
            if (c->page_bools % 8 == 0) {
                if (ferry_buf_append(&c->values, "", 1) != FERRY_OK)
                    return fail(w, err, FERRY_ENOMEM, "column %s: out of memory", c->field->name);
            }
            if (v)
                c->values.data[c->values.len - 1] |= (char)(1u << (c->page_bools % 8));
            c->page_bools++;
            stat_int(c, v);
            break;
        }
        case FERRY_TYPE_INT8:
        case FERRY_TYPE_INT16:
        case FERRY_TYPE_INT32:
        case FERRY_TYPE_DATE32: {
            int64_t v = width == 1 ? ((const int8_t *)col->values)[i]
                        : width == 2 ? ((const int16_t *)col->values)[i]
                                     : ((const int32_t *)col->values)[i];
            put_le32(out, (uint32_t)v);
            c->values.len += 4;
            stat_int(c, v);
            break;
        }
        case FERRY_TYPE_INT64:
        case FERRY_TYPE_TIME64_US:
        case FERRY_TYPE_TIMESTAMP_US:
        case FERRY_TYPE_TIMESTAMPTZ_US: {
            int64_t v = ((const int64_t *)col->values)[i];
            put_le64(out, (uint64_t)v);
            c->values.len += 8;
            stat_int(c, v);
            break;
        }
        case FERRY_TYPE_FLOAT32: {
            float v;
            memcpy(&v, col->values + 4 * i, 4);
            uint32_t u;
            memcpy(&u, &v, 4);
            put_le32(out, u);
            c->values.len += 4;
            stat_float(c, v);
            break;
        }
        case FERRY_TYPE_FLOAT64: {
            double v;
            memcpy(&v, col->values + 8 * i, 8);
            uint64_t u;
            memcpy(&u, &v, 8);
            put_le64(out, u);
            c->values.len += 8;
            stat_float(c, v);
            break;
        }
        case FERRY_TYPE_DECIMAL128: {
            struct ferry_decimal128 d;
            const uint8_t *p = col->values + 16 * i;
            d.lo = 0;
            uint64_t hi = 0;
            for (int k = 7; k >= 0; k--) {
                d.lo = d.lo << 8 | p[k];
                hi = hi << 8 | p[8 + k];
            }
            d.hi = (int64_t)hi;
            if (c->ptype == PT_FLBA) {
                dec_to_be_n(d, out, c->type_length);
                c->values.len += (size_t)c->type_length;
                stat_dec(c, d);
            } else if (c->ptype == PT_INT64) {
                put_le64(out, d.lo);
                c->values.len += 8;
                stat_int(c, (int64_t)d.lo);
            } else {
                put_le32(out, (uint32_t)d.lo);
                c->values.len += 4;
                stat_int(c, (int32_t)(uint32_t)d.lo);
            }
            break;
        }
        case FERRY_TYPE_UUID: {
            const uint8_t *p = col->values + 16 * i;
            memcpy(out, p, 16);
            c->values.len += 16;
            int rc = stat_bytes(c, p, 16);
            if (rc != FERRY_OK)
                return fail(w, err, rc, "column %s: out of memory", c->field->name);
            break;
        }
        default: { /* var-width: utf8, binary, json, decimal text */
            int32_t o0 = col->offsets[i], o1 = col->offsets[i + 1];
            int rc = append_bytes(w, c, col->data + o0, (size_t)(o1 - o0), err);
            if (rc != FERRY_OK)
                return rc;
            if (page_fill(c) >= w->opt.page_bytes) {
                rc = finish_page(w, c, err);
                if (rc != FERRY_OK)
                    return rc;
            }
            break;
        }
        }
    }
    if (page_fill(c) >= w->opt.page_bytes)
        return finish_page(w, c, err);
    return FERRY_OK;
}

/* ---- row groups ---------------------------------------------------------------------- */

static void reset_chunk(struct ferry_parquet_writer *w, struct column *c)
{
    pages_reset(&c->chunk);
    c->chunk_values = c->chunk_nulls = c->chunk_uncompressed = 0;
    c->used_plain = c->used_dict = false;
    c->dict.len = 0;
    c->dict_n = 0;
    if (c->slots != NULL)
        memset(c->slots, 0, c->slot_cap * sizeof(*c->slots));
    c->dict_active = c->dict_enabled;
    c->dict_decided = false;
    c->has_minmax = false;
    c->stats_too_long = false;
    c->chunk_nans = 0;
    c->min_b.len = c->max_b.len = 0;
    (void)w;
}

/* Folds the chunk's statistics into the file's (before reset_chunk). */
static int merge_file_stats(struct column *c, int64_t packed)
{
    c->file_values += c->chunk_values;
    c->file_nulls += c->chunk_nulls;
    c->file_nans += c->chunk_nans;
    c->file_bytes += packed;
    if (c->stats_too_long)
        c->file_too_long = true;
    if (!c->has_minmax || c->file_too_long)
        return FERRY_OK;
    bool first = !c->file_minmax;
    c->file_minmax = true;
    switch (c->order) {
    case ORD_BOOL:
    case ORD_INT:
        if (first || c->min_i < c->fmin_i)
            c->fmin_i = c->min_i;
        if (first || c->max_i > c->fmax_i)
            c->fmax_i = c->max_i;
        break;
    case ORD_FLOAT:
        if (first || c->min_f < c->fmin_f)
            c->fmin_f = c->min_f;
        if (first || c->max_f > c->fmax_f)
            c->fmax_f = c->max_f;
        break;
    case ORD_DEC128:
        if (first || dec_cmp(c->min_d, c->fmin_d) < 0)
            c->fmin_d = c->min_d;
        if (first || dec_cmp(c->max_d, c->fmax_d) > 0)
            c->fmax_d = c->max_d;
        break;
    case ORD_BYTES: {
        int rc = FERRY_OK;
        if (first || bytes_cmp((const uint8_t *)c->min_b.data, c->min_b.len,
                               (const uint8_t *)c->fmin_b.data, c->fmin_b.len) < 0)
            rc = set_buf(&c->fmin_b, (const uint8_t *)c->min_b.data, c->min_b.len);
        if (rc == FERRY_OK &&
            (first || bytes_cmp((const uint8_t *)c->max_b.data, c->max_b.len,
                                (const uint8_t *)c->fmax_b.data, c->fmax_b.len) > 0))
            rc = set_buf(&c->fmax_b, (const uint8_t *)c->max_b.data, c->max_b.len);
        return rc;
    }
    }
    return FERRY_OK;
}

static void write_column_meta(struct ferry_thrift *t, const struct column *c, int64_t start,
                              int64_t dict_off, int64_t data_off, int64_t raw, int64_t packed,
                              int codec)
{
    ferry__thrift_elem_struct_begin(t); /* ColumnChunk */
    ferry__thrift_i64(t, 2, start);
    ferry__thrift_struct_begin(t, 3); /* ColumnMetaData */
    ferry__thrift_i32(t, 1, c->ptype);
    /* RLE is listed for the levels; PLAIN also covers the dictionary page itself */
    bool plain = c->used_plain || c->used_dict;
    size_t n_enc = 1 + (plain ? 1 : 0) + (c->used_dict ? 1 : 0);
    ferry__thrift_list_begin(t, 2, FERRY_THRIFT_I32, n_enc);
    if (plain)
        ferry__thrift_i32_elem(t, ENC_PLAIN);
    ferry__thrift_i32_elem(t, ENC_RLE);
    if (c->used_dict)
        ferry__thrift_i32_elem(t, ENC_RLE_DICTIONARY);
    ferry__thrift_list_begin(t, 3, FERRY_THRIFT_BINARY, 1);
    ferry__thrift_binary_elem(t, c->field->name, strlen(c->field->name));
    ferry__thrift_i32(t, 4, codec);
    ferry__thrift_i64(t, 5, c->chunk_values);
    ferry__thrift_i64(t, 6, raw);
    ferry__thrift_i64(t, 7, packed);
    ferry__thrift_i64(t, 9, data_off);
    if (dict_off >= 0)
        ferry__thrift_i64(t, 11, dict_off);
    write_stats(t, c);
    ferry__thrift_struct_end(t); /* ColumnMetaData */
    ferry__thrift_struct_end(t); /* ColumnChunk */
}

static int flush_group(struct ferry_parquet_writer *w, struct ferry_error *err)
{
    if (w->group_rows == 0)
        return FERRY_OK;
    int rc;
    for (int i = 0; i < w->n_cols; i++) {
        rc = finish_page(w, &w->cols[i], err);
        if (rc != FERRY_OK)
            return rc;
    }
    struct ferry_buf rg;
    ferry_buf_init(&rg, 0);
    struct ferry_thrift t;
    ferry__thrift_init(&t, &rg);
    ferry__thrift_list_begin(&t, 1, FERRY_THRIFT_STRUCT, (size_t)w->n_cols);
    int64_t group_start = w->offset, total_raw = 0;
    for (int i = 0; i < w->n_cols; i++) {
        struct column *c = &w->cols[i];
        int64_t start = w->offset, dict_off = -1;
        int64_t raw = c->chunk_uncompressed, packed = (int64_t)c->chunk.len;
        if (c->used_dict) {
            rc = compress_into(w, c->dict.data, c->dict.len, &w->packed);
            if (rc == FERRY_OK)
                rc = page_header(w, PAGE_DICTIONARY, c->dict.len, w->packed.len,
                                 (int32_t)c->dict_n, ENC_PLAIN);
            if (rc != FERRY_OK) {
                ferry_buf_release(&rg);
                return fail(w, err, rc, "column %s: encoding the dictionary page failed",
                            c->field->name);
            }
            dict_off = w->offset;
            raw += (int64_t)(w->head.len + c->dict.len);
            packed += (int64_t)(w->head.len + w->packed.len);
            rc = emit(w, w->head.data, w->head.len, err);
            if (rc == FERRY_OK)
                rc = emit(w, w->packed.data, w->packed.len, err);
            if (rc != FERRY_OK) {
                ferry_buf_release(&rg);
                return ferry_error_prefix(err, "column %s", c->field->name);
            }
        }
        int64_t data_off = w->offset;
        rc = emit_pages(w, &c->chunk, err);
        if (rc != FERRY_OK) {
            ferry_buf_release(&rg);
            return ferry_error_prefix(err, "column %s", c->field->name);
        }
        total_raw += raw;
        write_column_meta(&t, c, start, dict_off, data_off, raw, packed, codec_id(w->opt.codec));
        rc = merge_file_stats(c, w->offset - start);
        if (rc != FERRY_OK) {
            ferry_buf_release(&rg);
            return fail(w, err, rc, "column %s: out of memory", c->field->name);
        }
        reset_chunk(w, c);
    }
    ferry__thrift_i64(&t, 2, total_raw);
    ferry__thrift_i64(&t, 3, w->group_rows);
    ferry__thrift_i64(&t, 5, group_start);
    ferry__thrift_i64(&t, 6, w->offset - group_start);
    ferry__thrift_struct_end(&t);
    rc = ferry__thrift_status(&t);
    if (rc == FERRY_OK)
        rc = ferry_buf_append(&w->groups, rg.data, rg.len);
    ferry_buf_release(&rg);
    if (rc != FERRY_OK)
        return fail(w, err, rc, "%s: serializing row group metadata failed", "parquet");
    w->n_groups++;
    w->group_rows = 0;
    return FERRY_OK;
}

/* ---- schema -------------------------------------------------------------------------- */

static int map_column(struct column *c, const struct ferry_field *f, bool dictionary)
{
    c->field = f;
    c->order = ORD_INT;
    c->varwidth = ferry_type_is_varwidth(f->type);
    switch (f->type) {
    case FERRY_TYPE_BOOL: c->ptype = PT_BOOLEAN; c->order = ORD_BOOL; break;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32: c->ptype = PT_INT32; break;
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: c->ptype = PT_INT64; break;
    case FERRY_TYPE_FLOAT32: c->ptype = PT_FLOAT; c->order = ORD_FLOAT; break;
    case FERRY_TYPE_FLOAT64: c->ptype = PT_DOUBLE; c->order = ORD_FLOAT; break;
    case FERRY_TYPE_DECIMAL128:
        if (f->scale < 0)
            return FERRY_EUNSUPPORTED;
        if (f->precision <= 9) {
            c->ptype = PT_INT32;
        } else if (f->precision <= 18) {
            c->ptype = PT_INT64;
        } else {
            c->ptype = PT_FLBA;
            c->type_length = dec_flba_width(f->precision);
            c->order = ORD_DEC128;
        }
        break;
    case FERRY_TYPE_UUID:
        c->ptype = PT_FLBA;
        c->type_length = 16;
        c->order = ORD_BYTES;
        break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_DECIMAL_TEXT:
        c->ptype = PT_BYTE_ARRAY;
        c->order = ORD_BYTES;
        c->dict_enabled = dictionary;
        break;
    default: return FERRY_EUNSUPPORTED;
    }
    if (c->ptype == PT_INT32 || c->ptype == PT_FLOAT || c->ptype == PT_INT64 ||
        c->ptype == PT_DOUBLE) {
        c->fixed_dict = c->ptype == PT_INT32 || c->ptype == PT_FLOAT ? 4 : 8;
        c->dict_enabled = dictionary;
    }
    c->dict_active = c->dict_enabled;
    return FERRY_OK;
}

static void write_logical(struct ferry_thrift *t, const struct column *c)
{
    const struct ferry_field *f = c->field;
    int converted = -1;
    int bits = 0;
    switch (f->type) {
    case FERRY_TYPE_INT8: converted = CT_INT_8; bits = 8; break;
    case FERRY_TYPE_INT16: converted = CT_INT_16; bits = 16; break;
    case FERRY_TYPE_INT32: converted = CT_INT_32; bits = 32; break;
    case FERRY_TYPE_INT64: converted = CT_INT_64; bits = 64; break;
    case FERRY_TYPE_DECIMAL128: converted = CT_DECIMAL; break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_DECIMAL_TEXT: converted = CT_UTF8; break;
    case FERRY_TYPE_JSON: converted = CT_JSON; break;
    case FERRY_TYPE_DATE32: converted = CT_DATE; break;
    /* TIME_MICROS / TIMESTAMP_MICROS converted types mean "adjusted to UTC": only the
     * timestamptz column may carry one. */
    case FERRY_TYPE_TIMESTAMPTZ_US: converted = CT_TIMESTAMP_MICROS; break;
    default: break;
    }
    if (converted >= 0)
        ferry__thrift_i32(t, 6, converted);
    if (f->type == FERRY_TYPE_DECIMAL128) {
        ferry__thrift_i32(t, 7, f->scale);
        ferry__thrift_i32(t, 8, f->precision);
    }
    if (c->field_id > 0) /* field 9 sits between precision (8) and logicalType (10) */
        ferry__thrift_i32(t, 9, c->field_id);
    if (f->type == FERRY_TYPE_BOOL || f->type == FERRY_TYPE_FLOAT32 ||
        f->type == FERRY_TYPE_FLOAT64 || f->type == FERRY_TYPE_BINARY)
        return; /* physical type says it all */
    ferry__thrift_struct_begin(t, 10); /* LogicalType (a union: exactly one field) */
    switch (f->type) {
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_DECIMAL_TEXT:
        ferry__thrift_struct_begin(t, 1); /* STRING */
        ferry__thrift_struct_end(t);
        break;
    case FERRY_TYPE_DECIMAL128:
        ferry__thrift_struct_begin(t, 5);
        ferry__thrift_i32(t, 1, f->scale);
        ferry__thrift_i32(t, 2, f->precision);
        ferry__thrift_struct_end(t);
        break;
    case FERRY_TYPE_DATE32:
        ferry__thrift_struct_begin(t, 6);
        ferry__thrift_struct_end(t);
        break;
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        ferry__thrift_struct_begin(t, f->type == FERRY_TYPE_TIME64_US ? 7 : 8);
        ferry__thrift_bool(t, 1, f->type == FERRY_TYPE_TIMESTAMPTZ_US);
        ferry__thrift_struct_begin(t, 2); /* TimeUnit */
        ferry__thrift_struct_begin(t, 2); /* MICROS */
        ferry__thrift_struct_end(t);
        ferry__thrift_struct_end(t);
        ferry__thrift_struct_end(t);
        break;
    case FERRY_TYPE_JSON:
        ferry__thrift_struct_begin(t, 12);
        ferry__thrift_struct_end(t);
        break;
    case FERRY_TYPE_UUID:
        ferry__thrift_struct_begin(t, 14);
        ferry__thrift_struct_end(t);
        break;
    default: /* integers */
        ferry__thrift_struct_begin(t, 10);
        ferry__thrift_i8(t, 1, (int8_t)bits);
        ferry__thrift_bool(t, 2, true);
        ferry__thrift_struct_end(t);
        break;
    }
    ferry__thrift_struct_end(t);
}

/* ---- public -------------------------------------------------------------------------- */

int ferry__parquet_open(const struct ferry_schema *schema, const struct ferry_parquet_options *o,
                        ferry_parquet_write_fn write, void *ctx, struct ferry_parquet_writer **out,
                        struct ferry_error *err)
{
    *out = NULL;
    if (schema == NULL || schema->n_fields == 0 || write == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "parquet",
                               "a parquet file needs a schema with at least one column");
    struct ferry_parquet_writer *w = ferry_calloc(1, sizeof(*w));
    if (w == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    ferry__parquet_options_default(&w->opt);
    if (o != NULL) {
        w->opt = *o;
        if (w->opt.row_group_bytes == 0)
            w->opt.row_group_bytes = 32 * MIB;
        if (w->opt.page_bytes == 0)
            w->opt.page_bytes = MIB;
        if (w->opt.dictionary_bytes == 0)
            w->opt.dictionary_bytes = 4 * MIB;
    }
    w->schema = ferry_schema_ref((struct ferry_schema *)schema);
    w->write = write;
    w->ctx = ctx;
    ferry_buf_init(&w->groups, 0);
    ferry_buf_init(&w->body, 0);
    ferry_buf_init(&w->packed, 0);
    ferry_buf_init(&w->head, 0);
    w->cols = ferry_calloc((size_t)schema->n_fields, sizeof(*w->cols));
    if (w->cols == NULL) {
        ferry__parquet_free(w);
        return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    }
    w->n_cols = schema->n_fields;
    for (int i = 0; i < w->n_cols; i++) {
        struct column *c = &w->cols[i];
        ferry_buf_init(&c->values, 0);
        ferry_buf_init(&c->dict, 0);
        ferry_buf_init(&c->min_b, 0);
        ferry_buf_init(&c->max_b, 0);
        ferry_buf_init(&c->fmin_b, 0);
        ferry_buf_init(&c->fmax_b, 0);
        const struct ferry_field *f = &w->schema->fields[i];
        if (map_column(c, f, w->opt.dictionary) != FERRY_OK) {
            int rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "parquet",
                                     "column %s: type %s (precision %d, scale %d) has no parquet "
                                     "mapping (parquet decimals need a scale >= 0)",
                                     f->name, ferry_type_name(f->type), f->precision, f->scale);
            ferry__parquet_free(w);
            return rc;
        }
        if (w->opt.field_ids != NULL) c->field_id = w->opt.field_ids[i];
    }
    w->opt.field_ids = NULL; /* borrowed for open() only */
    if (w->opt.codec == FERRY_PARQUET_ZSTD) {
        w->zstd = ZSTD_createCCtx();
        if (w->zstd == NULL) {
            ferry__parquet_free(w);
            return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory (zstd)");
        }
    }
    int rc = emit(w, "PAR1", 4, err);
    if (rc != FERRY_OK) {
        ferry__parquet_free(w);
        return rc;
    }
    *out = w;
    return FERRY_OK;
}

static int check_batch(struct ferry_parquet_writer *w, const struct ferry_batch *b,
                       struct ferry_error *err)
{
    if (w->failed)
        return ferry_error_set(err, FERRY_EINVAL, "parquet", "writer already failed");
    const struct ferry_schema *s = b->schema;
    if (s == w->schema)
        return FERRY_OK;
    if (s->n_fields != w->n_cols)
        return ferry_error_set(err, FERRY_EINVAL, "parquet",
                               "batch has %d columns, the parquet file %d", s->n_fields, w->n_cols);
    for (int i = 0; i < w->n_cols; i++) {
        const struct ferry_field *a = &s->fields[i], *f = w->cols[i].field;
        if (a->type != f->type || strcmp(a->name, f->name) != 0 ||
            (a->type == FERRY_TYPE_DECIMAL128 &&
             (a->precision != f->precision || a->scale != f->scale)))
            return ferry_error_set(err, FERRY_EINVAL, "parquet",
                                   "column %s: batch column %s %s does not match the file's schema",
                                   f->name, a->name, ferry_type_name(a->type));
    }
    return FERRY_OK;
}

int ferry__parquet_write_batch(struct ferry_parquet_writer *w, const struct ferry_batch *b,
                               struct ferry_error *err)
{
    int rc = check_batch(w, b, err);
    if (rc != FERRY_OK)
        return rc;
    int64_t r0 = 0;
    while (r0 < b->length) {
        int64_t r1 = r0 + STEP_ROWS < b->length ? r0 + STEP_ROWS : b->length;
        /* keep one step's var-width data near STEP_VAR_BYTES so a row group overshoots its
         * bound by little even with huge values */
        for (;;) {
            int64_t var = 0;
            for (int i = 0; i < w->n_cols; i++) {
                if (!w->cols[i].varwidth)
                    continue;
                const int32_t *off = b->columns[i].offsets;
                var += off[r1 + b->offset] - off[r0 + b->offset];
            }
            if (var <= (int64_t)STEP_VAR_BYTES || r1 - r0 == 1)
                break;
            r1 = r0 + (r1 - r0) / 2;
        }
        size_t total = 0;
        for (int i = 0; i < w->n_cols; i++) {
            rc = append_column(w, &w->cols[i], b, i, r0, r1, err);
            if (rc != FERRY_OK)
                return rc;
            total += column_bytes(&w->cols[i]);
        }
        w->group_rows += r1 - r0;
        w->rows += r1 - r0;
        if (total >= w->opt.row_group_bytes) {
            rc = flush_group(w, err);
            if (rc != FERRY_OK)
                return rc;
        }
        r0 = r1;
    }
    return FERRY_OK;
}

static void write_schema(struct ferry_thrift *t, const struct ferry_parquet_writer *w)
{
    ferry__thrift_list_begin(t, 2, FERRY_THRIFT_STRUCT, (size_t)w->n_cols + 1);
    ferry__thrift_elem_struct_begin(t); /* the root group */
    ferry__thrift_string(t, 4, "schema");
    ferry__thrift_i32(t, 5, w->n_cols);
    ferry__thrift_struct_end(t);
    for (int i = 0; i < w->n_cols; i++) {
        const struct column *c = &w->cols[i];
        ferry__thrift_elem_struct_begin(t);
        ferry__thrift_i32(t, 1, c->ptype);
        if (c->ptype == PT_FLBA)
            ferry__thrift_i32(t, 2, c->type_length);
        ferry__thrift_i32(t, 3, c->field->nullable ? 1 : 0); /* OPTIONAL : REQUIRED */
        ferry__thrift_string(t, 4, c->field->name);
        write_logical(t, c);
        ferry__thrift_struct_end(t);
    }
}

int ferry__parquet_close(struct ferry_parquet_writer *w, int64_t *bytes, struct ferry_error *err)
{
    if (w->failed)
        return ferry_error_set(err, FERRY_EINVAL, "parquet", "writer already failed");
    int rc = flush_group(w, err);
    if (rc != FERRY_OK)
        return rc;
    struct ferry_buf meta;
    ferry_buf_init(&meta, 0);
    struct ferry_thrift t;
    ferry__thrift_init(&t, &meta);
    ferry__thrift_i32(&t, 1, 2); /* format version: logical types and min_value/max_value */
    write_schema(&t, w);
    ferry__thrift_i64(&t, 3, w->rows);
    ferry__thrift_list_begin(&t, 4, FERRY_THRIFT_STRUCT, (size_t)w->n_groups);
    ferry__thrift_raw(&t, w->groups.data, w->groups.len);
    ferry__thrift_string(&t, 6, "ferry version 0.1.0 (parquet writer)");
    /* TypeDefinedOrder for every column: tells readers min_value/max_value are valid */
    ferry__thrift_list_begin(&t, 7, FERRY_THRIFT_STRUCT, (size_t)w->n_cols);
    for (int i = 0; i < w->n_cols; i++) {
        ferry__thrift_elem_struct_begin(&t);
        ferry__thrift_struct_begin(&t, 1);
        ferry__thrift_struct_end(&t);
        ferry__thrift_struct_end(&t);
    }
    ferry__thrift_end(&t);
    rc = ferry__thrift_status(&t);
    uint8_t tail[8];
    put_le32(tail, (uint32_t)meta.len);
    memcpy(tail + 4, "PAR1", 4);
    if (rc != FERRY_OK) {
        ferry_buf_release(&meta);
        return fail(w, err, rc, "%s: serializing the footer failed", "parquet");
    }
    rc = emit(w, meta.data, meta.len, err);
    if (rc == FERRY_OK)
        rc = emit(w, tail, 8, err);
    ferry_buf_release(&meta);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "footer");
    w->failed = true; /* closed: nothing more may be written */
    if (bytes != NULL)
        *bytes = w->offset;
    return FERRY_OK;
}

int64_t ferry__parquet_rows(const struct ferry_parquet_writer *w)
{
    return w->rows;
}

int64_t ferry__parquet_bytes_written(const struct ferry_parquet_writer *w)
{
    return w->offset;
}

int ferry__parquet_column_stats(const struct ferry_parquet_writer *w, int col,
                                struct ferry__files_column_stats *out)
{
    memset(out, 0, sizeof *out);
    if (col < 0 || col >= w->n_cols)
        return FERRY_EINVAL;
    const struct column *c = &w->cols[col];
    out->values = c->file_values;
    out->nulls = c->file_nulls;
    out->nans = c->file_nans;
    out->bytes = c->file_bytes;
    out->has_minmax = c->file_minmax && !c->file_too_long;
    if (!out->has_minmax)
        return FERRY_OK;
    switch (c->order) {
    case ORD_BOOL:
    case ORD_INT:
        out->min_i = c->fmin_i;
        out->max_i = c->fmax_i;
        if (c->field->type == FERRY_TYPE_DECIMAL128) { /* INT32/INT64-backed decimals */
            out->min_d.lo = (uint64_t)c->fmin_i;
            out->min_d.hi = c->fmin_i < 0 ? -1 : 0;
            out->max_d.lo = (uint64_t)c->fmax_i;
            out->max_d.hi = c->fmax_i < 0 ? -1 : 0;
        }
        break;
    case ORD_FLOAT:
        out->min_f = c->fmin_f;
        out->max_f = c->fmax_f;
        break;
    case ORD_DEC128:
        out->min_d = c->fmin_d;
        out->max_d = c->fmax_d;
        break;
    case ORD_BYTES:
        out->min_b = (const uint8_t *)c->fmin_b.data;
        out->min_n = c->fmin_b.len;
        out->max_b = (const uint8_t *)c->fmax_b.data;
        out->max_n = c->fmax_b.len;
        break;
    }
    return FERRY_OK;
}

void ferry__parquet_free(struct ferry_parquet_writer *w)
{
    if (w == NULL)
        return;
    for (int i = 0; w->cols != NULL && i < w->n_cols; i++) {
        struct column *c = &w->cols[i];
        ferry_buf_release(&c->values);
        pages_free(&c->chunk);
        ferry_buf_release(&c->dict);
        ferry_buf_release(&c->min_b);
        ferry_buf_release(&c->max_b);
        ferry_buf_release(&c->fmin_b);
        ferry_buf_release(&c->fmax_b);
        ferry_free(c->idx);
        ferry_free(c->def);
        ferry_free(c->dict_off);
        ferry_free(c->slots);
    }
    ferry_free(w->cols);
    ferry_buf_release(&w->groups);
    ferry_buf_release(&w->body);
    ferry_buf_release(&w->packed);
    ferry_buf_release(&w->head);
    ZSTD_freeCCtx(w->zstd);
    ferry_schema_unref(w->schema);
    ferry_free(w);
}
