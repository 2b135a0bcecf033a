/* formats/parquet_reader.c - decodes Parquet files with flat schemas into rows
 * (parquet_reader.h). Written from the Apache Parquet specification (parquet.thrift,
 * Encodings.md) and the Thrift compact protocol specification.
 *
 * Owns: a bounds-checked Thrift compact decoder (reads only what the footer and page
 * headers need, skips the rest), the type mapping back to ferry types, page decoding and
 * decompression (zstd, snappy, zlib). Calls the row writer (ferry/batch.h). Called by
 * verify's Parquet side (src/verify/backend_stream.c) and tests/unit/test_parquet_reader.c.
 *
 * A row group is decoded column by column into one slot array per column (8 bytes per
 * value, 16 for 16-byte types; var-width values as offset+length into a per-column byte
 * store), then written row by row: memory is one row group, not the file. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <snappy-c.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include "batch/builder.h"
#include "formats/parquet_reader.h"
#include "formats/text.h"
#include "ferry/core.h"

enum { PT_BOOLEAN = 0, PT_INT32, PT_INT64, PT_INT96, PT_FLOAT, PT_DOUBLE, PT_BYTE_ARRAY, PT_FLBA };
enum {
    ENC_PLAIN = 0,
    ENC_PLAIN_DICT = 2,
    ENC_RLE = 3,
    ENC_DELTA_BP = 5,
    ENC_DELTA_LBA = 6,
    ENC_DELTA_BA = 7,
    ENC_RLE_DICT = 8,
    ENC_BSS = 9
};
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };
enum { CODEC_NONE = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };
/* converted types */
enum {
    CT_UTF8 = 0,
    CT_ENUM = 4,
    CT_DECIMAL = 5,
    CT_DATE = 6,
    CT_TIME_MILLIS = 7,
    CT_TIME_MICROS = 8,
    CT_TS_MILLIS = 9,
    CT_TS_MICROS = 10,
    CT_UINT_8 = 11,
    CT_UINT_16 = 12,
    CT_UINT_32 = 13,
    CT_UINT_64 = 14,
    CT_INT_8 = 15,
    CT_INT_16 = 16,
    CT_INT_32 = 17,
    CT_INT_64 = 18,
    CT_JSON = 19,
    CT_INTERVAL = 21
};

#define MAX_PAGE (INT64_C(1) << 31) /* larger pages are refused, not allocated */
#define MAX_GROUP_ROWS (INT64_C(1) << 26)

struct pcol {
    char *name;
    int ptype, type_length, repetition;
    int converted;  /* -1: none */
    int lt;         /* logical type union field id, 0: none */
    int lt_bits;    /* INTEGER bitWidth */
    bool lt_signed; /* INTEGER isSigned */
    bool lt_utc;    /* TIME/TIMESTAMP isAdjustedToUTC */
    int lt_unit;    /* TIME/TIMESTAMP: 1 millis, 2 micros, 3 nanos */
    int precision, scale;
    bool u64; /* an unsigned 64-bit integer, carried as decimal128(20,0) */
    enum ferry_type ft;
    int max_def, max_rep; /* levels of the leaf (flat: max_def 0 or 1, max_rep 0) */
    int32_t field_id;     /* SchemaElement.field_id (Iceberg's), -1: none */
    bool nested;          /* under a nested top-level field: levels kept per value */
};

/* A schema element (the footer's preorder list), for nested fields. */
enum { NK_LEAF, NK_STRUCT, NK_LIST, NK_MAP };
enum { ELEM_SELF, ELEM_CHILD, ELEM_MAP };
struct pnode {
    char *name;
    int repetition; /* 0 REQUIRED, 1 OPTIONAL, 2 REPEATED */
    int kind;       /* NK_* */
    int elem;       /* NK_LIST: ELEM_CHILD (3-level list) or ELEM_SELF (legacy 2-level) */
    int def, rep;   /* definition / repetition level of the node itself */
    int end;        /* index of the element after its subtree */
    int first_leaf, nleaves;
    int32_t field_id; /* -1: none */
};
#define MAX_DEPTH 64

struct pchunk {
    int codec;
    int64_t num_values, data_off, dict_off, size;
    uint8_t max[8]; /* Statistics.max_value of a 4- or 8-byte column, PLAIN */
    int max_len;    /* 0: none, or not exact (is_max_value_exact false) */
    uint8_t min[8]; /* Statistics.min_value, the same way */
    int min_len;    /* 0: none, or not exact (is_min_value_exact false) */
};

struct prg {
    int64_t num_rows;
    struct pchunk *cols;
};

/* One decoded column of a row group. */
struct pvals {
    uint8_t *slot; /* width 8 or 16 per row */
    uint8_t *isnull;
    uint8_t *def, *rep; /* nested columns: each value's levels */
    int64_t n;          /* values (level entries) decoded: rows for a flat column */
    struct ferry_buf data; /* var-width bytes */
    struct ferry_buf dict; /* dictionary: slots (plain decoded), then dict_data */
    struct ferry_buf dict_data;
    int64_t dict_n;
    int64_t cap; /* rows slot and isnull have room for */
    /* a flat column read in windows (read_windows): its chunk and next page */
    const uint8_t *cp; /* the chunk's bytes, cp[0] being byte s_start of the file */
    size_t s_start, s_pos, s_end;
    int64_t s_row; /* rows decoded from the chunk so far */
};

struct ferry_parquet_reader {
    char *name;
    const uint8_t *p; /* the whole file, or NULL: read by ranges through read_at */
    size_t n;         /* the file's size */
    uint8_t *owned;
    ferry_parquet_read_at read_at;
    void *read_ctx;
    int fd;                 /* open_file: the file, read by ranges; else -1 */
    struct ferry_buf chunk; /* ranged: the column chunk being decoded */
    struct ferry_buf grp;   /* ranged: the selected chunks of the group being read, */
    size_t grp_off;         /* fetched in one request from grp_off (grp.len bytes) */
    bool grp_valid;
    int *sel;               /* the top-level fields read (index into tops), in order */
    int nsel;
    struct pvals *vals; /* per file column, allocated at the first group read */
    int ncols;
    struct pcol *cols; /* the leaf columns */
    int nnodes;
    struct pnode *nodes; /* the schema tree in preorder, nodes[0] the root */
    int ntops;
    int *tops;           /* the root's children: one ferry field each */
    int64_t *cur;        /* nested rows: each column's next value */
    struct ferry_buf json, key; /* one nested value being assembled, a map key */
    int floor_sel;              /* -1, or the selected field whose value must be > floor */
    int64_t offset_base;        /* added to every row offset (set_offset_base) */
    int64_t floor;
    int nrg;
    struct prg *rgs;
    int64_t num_rows;
    struct ferry_schema *schema;
    struct ferry_buf page, page2; /* decompressed page, scratch */
    struct ferry_buf lens, lens2; /* delta byte arrays: lengths, prefix lengths */
    struct ferry_buf tmp;         /* read_windows: the var-width bytes kept for the next window */
    uint32_t *idx;                /* read_windows: level and index scratch */
    ZSTD_DCtx *zstd;              /* made at the first zstd page, kept for every other */
    int64_t *rowvar;              /* write_bulk: var-width bytes per row of a chunk */
    struct ferry_error *err;
};

/* Parquet's fixed-width numbers are little-endian (PLAIN values, length prefixes, the
 * footer length): read byte by byte, whatever the host's order or the pointer's alignment. */
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* The low `width` bytes of v, little-endian. */
static void put_le(uint8_t *o, uint64_t v, int width)
{
    for (int k = 0; k < width; k++)
        o[k] = (uint8_t)(v >> (8 * k));
}

static int bad(struct ferry_parquet_reader *r, size_t off, const char *what)
{
    return ferry_error_set(r->err, FERRY_EINVAL, "parquet",
                           "parquet: %s: malformed file at byte %zu: %s", r->name, off, what);
}

static int oom(struct ferry_parquet_reader *r)
{
    return ferry_error_set(r->err, FERRY_ENOMEM, "parquet", "parquet: %s: out of memory", r->name);
}

/* ---- Thrift compact decoding --------------------------------------------------------- */

struct tc {
    const uint8_t *p, *end, *base; /* base: offset 0 of the file, for messages */
    size_t base_off;
    bool bad;
    const char *why;
};

static size_t tc_off(const struct tc *t)
{
    return t->base_off + (size_t)(t->p - t->base);
}

static void tc_fail(struct tc *t, const char *why)
{
    if (!t->bad) t->why = why;
    t->bad = true;
    t->p = t->end;
}

static uint8_t tc_byte(struct tc *t)
{
    if (t->p >= t->end) {
        tc_fail(t, "truncated thrift data");
        return 0;
    }
    return *t->p++;
}

static uint64_t tc_varint(struct tc *t)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b = tc_byte(t);
        if (t->bad) return 0;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    tc_fail(t, "varint longer than 10 bytes");
    return 0;
}

static int64_t tc_zz(struct tc *t)
{
    uint64_t v = tc_varint(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static const uint8_t *tc_binary(struct tc *t, size_t *n)
{
    uint64_t len = tc_varint(t);
    if (t->bad || len > (uint64_t)(t->end - t->p)) {
        tc_fail(t, "string runs past its end");
        *n = 0;
        return NULL;
    }
    const uint8_t *p = t->p;
    t->p += len;
    *n = (size_t)len;
    return p;
}

/* Field header: returns the type (0 at the struct's stop), *id the field id. */
static int tc_field(struct tc *t, int16_t *last, int16_t *id)
{
    uint8_t b = tc_byte(t);
    if (t->bad || b == 0) return 0;
    int type = b & 0x0f, delta = b >> 4;
    if (delta)
        *id = (int16_t)(*last + delta);
    else
        *id = (int16_t)tc_zz(t);
    *last = *id;
    if (type == 0) tc_fail(t, "bad field type");
    return t->bad ? 0 : type;
}

static int64_t tc_list(struct tc *t, int *elem)
{
    uint8_t b = tc_byte(t);
    *elem = b & 0x0f;
    uint64_t n = b >> 4;
    if (n == 15) n = tc_varint(t);
    /* every element takes at least one byte (except bools packed in field headers) */
    if (!t->bad && n > (uint64_t)(t->end - t->p)) tc_fail(t, "list longer than its data");
    return t->bad ? 0 : (int64_t)n;
}

static void tc_skip(struct tc *t, int type, int depth);

static void tc_skip_struct(struct tc *t, int depth)
{
    int16_t last = 0, id;
    int type;
    while ((type = tc_field(t, &last, &id)) != 0)
        tc_skip(t, type, depth + 1);
}

static void tc_skip(struct tc *t, int type, int depth)
{
    if (depth > 32) {
        tc_fail(t, "thrift nesting too deep");
        return;
    }
    size_t n;
    switch (type) {
    case 1:
    case 2:
        return; /* bool in the field header */
    case 3:
        tc_byte(t);
        return;
    case 4:
    case 5:
    case 6:
        tc_varint(t);
        return;
    case 7:
        if (t->end - t->p < 8)
            tc_fail(t, "truncated double");
        else
            t->p += 8;
        return;
    case 8:
        tc_binary(t, &n);
        return;
    case 9:
    case 10: {
        int elem;
        int64_t k = tc_list(t, &elem);
        for (int64_t i = 0; i < k && !t->bad; i++) {
            if (elem == 1 || elem == 2)
                tc_byte(t);
            else
                tc_skip(t, elem, depth + 1);
        }
        return;
    }
    case 11: {
        uint64_t k = tc_varint(t);
        if (k == 0) return;
        uint8_t kv = tc_byte(t);
        if (k > (uint64_t)(t->end - t->p)) {
            tc_fail(t, "map longer than its data");
            return;
        }
        for (uint64_t i = 0; i < k && !t->bad; i++) {
            tc_skip(t, kv >> 4, depth + 1);
            tc_skip(t, kv & 0x0f, depth + 1);
        }
        return;
    }
    case 12:
        tc_skip_struct(t, depth);
        return;
    default:
        tc_fail(t, "unknown thrift type");
    }
}

static int32_t tc_i32(struct tc *t, int type)
{
    if (type != 3 && type != 4 && type != 5) {
        tc_fail(t, "expected an integer field");
        return 0;
    }
    if (type == 3) return (int8_t)tc_byte(t);
    int64_t v = tc_zz(t);
    if (v < INT32_MIN || v > INT32_MAX) tc_fail(t, "i32 out of range");
    return (int32_t)v;
}

static int64_t tc_i64(struct tc *t, int type)
{
    if (type == 3) return (int8_t)tc_byte(t);
    if (type != 4 && type != 5 && type != 6) {
        tc_fail(t, "expected an integer field");
        return 0;
    }
    return tc_zz(t);
}

/* ---- footer -------------------------------------------------------------------------- */

static void parse_time_unit(struct tc *t, int *unit)
{
    int16_t last = 0, id;
    int type;
    while ((type = tc_field(t, &last, &id)) != 0) {
        if (type == 12 && id >= 1 && id <= 3) *unit = id;
        tc_skip(t, type, 1);
    }
}

static void parse_logical(struct tc *t, struct pcol *c)
{
    int16_t last = 0, id;
    int type;
    while ((type = tc_field(t, &last, &id)) != 0) {
        if (type != 12) {
            tc_skip(t, type, 1);
            continue;
        }
        c->lt = id;
        int16_t l2 = 0, id2;
        int t2;
        while ((t2 = tc_field(t, &l2, &id2)) != 0) {
            if (id == 5 && id2 == 1)
                c->scale = tc_i32(t, t2);
            else if (id == 5 && id2 == 2)
                c->precision = tc_i32(t, t2);
            else if ((id == 7 || id == 8) && id2 == 1)
                c->lt_utc = t2 == 1;
            else if ((id == 7 || id == 8) && id2 == 2 && t2 == 12)
                parse_time_unit(t, &c->lt_unit);
            else if (id == 10 && id2 == 1)
                c->lt_bits = tc_i32(t, t2);
            else if (id == 10 && id2 == 2)
                c->lt_signed = t2 == 1;
            else
                tc_skip(t, t2, 2);
        }
    }
}

static void parse_schema_elem(struct tc *t, struct pcol *c, int *children, struct ferry_buf *nm)
{
    int16_t last = 0, id;
    int type;
    c->ptype = -1;
    c->converted = -1;
    c->repetition = 0;
    c->field_id = -1;
    *children = 0;
    while ((type = tc_field(t, &last, &id)) != 0) {
        switch (id) {
        case 1:
            c->ptype = tc_i32(t, type);
            break;
        case 2:
            c->type_length = tc_i32(t, type);
            break;
        case 3:
            c->repetition = tc_i32(t, type);
            break;
        case 4: {
            size_t n;
            const uint8_t *s = type == 8 ? tc_binary(t, &n) : NULL;
            if (s == NULL) {
                tc_fail(t, "schema element without a name");
                break;
            }
            ferry_buf_reset(nm);
            if (ferry_buf_append(nm, s, n) || ferry_buf_append(nm, "", 1)) tc_fail(t, "oom");
            break;
        }
        case 5:
            *children = tc_i32(t, type);
            break;
        case 6:
            c->converted = tc_i32(t, type);
            break;
        case 7: { /* scale, precision: a logical type read before them wins */
            int32_t v = tc_i32(t, type);
            if (!c->lt) c->scale = v;
            break;
        }
        case 8: {
            int32_t v = tc_i32(t, type);
            if (!c->lt) c->precision = v;
            break;
        }
        case 9:
            c->field_id = tc_i32(t, type);
            break;
        case 10:
            if (type == 12) {
                c->scale = c->precision = 0;
                parse_logical(t, c);
            } else {
                tc_skip(t, type, 1);
            }
            break;
        default:
            tc_skip(t, type, 1);
        }
    }
}

/* Statistics: only max_value (5) and min_value (6) of 4- or 8-byte values are kept, each
 * dropped when is_max_value_exact (7) / is_min_value_exact (8) says it is not exact. The
 * deprecated max (1) and min (2) are not used: their sort order was undefined for some
 * types. */
static void parse_stats(struct tc *t, struct pchunk *k)
{
    int16_t last = 0, id;
    int type;
    bool exact = true, min_exact = true;
    while ((type = tc_field(t, &last, &id)) != 0) {
        if ((id == 5 || id == 6) && type == 8) {
            size_t n;
            const uint8_t *v = tc_binary(t, &n);
            if (v && (n == 4 || n == 8)) {
                memcpy(id == 5 ? k->max : k->min, v, n);
                *(id == 5 ? &k->max_len : &k->min_len) = (int)n;
            }
        } else if ((id == 7 || id == 8) && (type == 1 || type == 2)) {
            *(id == 7 ? &exact : &min_exact) = type == 1;
        } else {
            tc_skip(t, type, 3);
        }
    }
    if (!exact) k->max_len = 0;
    if (!min_exact) k->min_len = 0;
}

static void parse_col_meta(struct tc *t, struct pchunk *k, int *ptype)
{
    int16_t last = 0, id;
    int type;
    while ((type = tc_field(t, &last, &id)) != 0) {
        switch (id) {
        case 1:
            *ptype = tc_i32(t, type);
            break;
        case 4:
            k->codec = tc_i32(t, type);
            break;
        case 5:
            k->num_values = tc_i64(t, type);
            break;
        case 7:
            k->size = tc_i64(t, type);
            break;
        case 9:
            k->data_off = tc_i64(t, type);
            break;
        case 11:
            k->dict_off = tc_i64(t, type);
            break;
        case 12:
            if (type == 12)
                parse_stats(t, k);
            else
                tc_skip(t, type, 2);
            break;
        default:
            tc_skip(t, type, 2);
        }
    }
}

static int parse_row_group(struct ferry_parquet_reader *r, struct tc *t, struct prg *g)
{
    int16_t last = 0, id;
    int type;
    int seen = 0;
    g->num_rows = -1;
    g->cols = ferry_calloc((size_t)r->ncols + 1, sizeof *g->cols);
    if (g->cols == NULL) return oom(r);
    while ((type = tc_field(t, &last, &id)) != 0) {
        if (id == 3) {
            g->num_rows = tc_i64(t, type);
        } else if (id == 1 && type == 9) {
            int elem;
            int64_t n = tc_list(t, &elem);
            if (!t->bad && (elem != 12 || n != r->ncols)) {
                tc_fail(t, "row group column count differs from the schema");
                break;
            }
            for (int64_t i = 0; i < n && !t->bad; i++) {
                struct pchunk *k = &g->cols[i];
                k->dict_off = -1;
                k->data_off = -1;
                int ptype = -1;
                int16_t l2 = 0, id2;
                int t2;
                while ((t2 = tc_field(t, &l2, &id2)) != 0) {
                    if (id2 == 1 && t2 == 8)
                        tc_fail(t, "column chunk in another file");
                    else if (id2 == 3 && t2 == 12)
                        parse_col_meta(t, k, &ptype), seen++;
                    else
                        tc_skip(t, t2, 2);
                }
                if (!t->bad && ptype != r->cols[i].ptype)
                    tc_fail(t, "column chunk type differs from the schema");
            }
        } else {
            tc_skip(t, type, 1);
        }
    }
    if (!t->bad && (seen != r->ncols || g->num_rows < 0))
        tc_fail(t, "row group without its columns or row count");
    return FERRY_OK;
}

static enum ferry_type map_type(const struct pcol *c)
{
    int ct = c->converted;
    bool dec = c->lt == 5 || (c->lt == 0 && ct == CT_DECIMAL);
    switch (c->ptype) {
    case PT_BOOLEAN:
        return FERRY_TYPE_BOOL;
    case PT_INT32:
        if (dec) return FERRY_TYPE_DECIMAL128;
        if (c->lt == 6 || ct == CT_DATE) return FERRY_TYPE_DATE32;
        if (c->lt == 7 || ct == CT_TIME_MILLIS) return FERRY_TYPE_TIME64_US;
        if (c->lt == 10) {
            if (c->lt_bits == 8 && c->lt_signed) return FERRY_TYPE_INT8;
            if (c->lt_bits <= 16 && c->lt_signed) return FERRY_TYPE_INT16;
            if (c->lt_bits <= 8) return FERRY_TYPE_INT16;
            if (c->lt_bits <= 16) return FERRY_TYPE_INT32;
            return c->lt_signed ? FERRY_TYPE_INT32 : FERRY_TYPE_INT64;
        }
        if (ct == CT_INT_8) return FERRY_TYPE_INT8;
        if (ct == CT_INT_16 || ct == CT_UINT_8) return FERRY_TYPE_INT16;
        if (ct == CT_UINT_16) return FERRY_TYPE_INT32;
        if (ct == CT_UINT_32) return FERRY_TYPE_INT64;
        return FERRY_TYPE_INT32;
    case PT_INT64:
        if (dec) return FERRY_TYPE_DECIMAL128;
        if (c->lt == 7 || ct == CT_TIME_MICROS) return FERRY_TYPE_TIME64_US;
        if (c->lt == 8) return c->lt_utc ? FERRY_TYPE_TIMESTAMPTZ_US : FERRY_TYPE_TIMESTAMP_US;
        if (ct == CT_TS_MICROS || ct == CT_TS_MILLIS) return FERRY_TYPE_TIMESTAMPTZ_US;
        /* unsigned 64-bit: above 2^63 it fits no int64, so decimal128(20,0) */
        if ((c->lt == 10 && !c->lt_signed) || (c->lt == 0 && ct == CT_UINT_64))
            return FERRY_TYPE_DECIMAL128;
        return FERRY_TYPE_INT64;
    case PT_INT96:
        return FERRY_TYPE_TIMESTAMPTZ_US;
    case PT_FLOAT:
        return FERRY_TYPE_FLOAT32;
    case PT_DOUBLE:
        return FERRY_TYPE_FLOAT64;
    case PT_BYTE_ARRAY:
        if (dec) return FERRY_TYPE_DECIMAL128;
        if (c->lt == 12 || (c->lt == 0 && ct == CT_JSON)) return FERRY_TYPE_JSON;
        if (c->lt == 1 || c->lt == 4 || (c->lt == 0 && (ct == CT_UTF8 || ct == CT_ENUM)))
            return FERRY_TYPE_UTF8;
        return FERRY_TYPE_BINARY;
    case PT_FLBA:
        if (dec) return FERRY_TYPE_DECIMAL128;
        if (c->lt == 14 && c->type_length == 16) return FERRY_TYPE_UUID;
        return FERRY_TYPE_BINARY;
    default:
        return (enum ferry_type)0;
    }
}

/* n bytes at off: a pointer into the file, or (ranged) read into buf. NULL on error. */
static const uint8_t *range(struct ferry_parquet_reader *r, size_t off, size_t n,
                            struct ferry_buf *buf)
{
    if (off > r->n || n > r->n - off) {
        bad(r, off, "range outside the file");
        return NULL;
    }
    if (r->p != NULL) return r->p + off;
    if (r->grp_valid && off >= r->grp_off && n <= r->grp.len - (off - r->grp_off) &&
        off - r->grp_off <= r->grp.len)
        return (const uint8_t *)r->grp.data + (off - r->grp_off);
    ferry_buf_reset(buf);
    if (ferry_buf_reserve(buf, n + 1)) {
        oom(r);
        return NULL;
    }
    if (n > 0 && r->read_at(r->read_ctx, (uint64_t)off, n, buf->data, r->err) != FERRY_OK)
        return NULL;
    buf->len = n;
    return (const uint8_t *)buf->data;
}

/* A top-level field read as JSON text: a group, or a REPEATED leaf. */
static bool top_nested(const struct pnode *nd)
{
    return nd->kind != NK_LEAF || nd->repetition == 2;
}

/* The checks and type mapping of leaf column c (a flat column or a nested field's leaf). */
static void leaf_check(struct tc *t, struct pcol *c)
{
    c->ft = map_type(c);
    if (c->ptype == PT_INT64 && c->ft == FERRY_TYPE_DECIMAL128 && c->lt != 5 &&
        !(c->lt == 0 && c->converted == CT_DECIMAL)) {
        c->u64 = true;
        c->precision = 20;
        c->scale = 0;
    }
    if (c->ft == 0)
        tc_fail(t, "unknown physical type");
    else if (c->converted == CT_INTERVAL || c->lt == 15)
        tc_fail(t, "INTERVAL and FLOAT16 columns are not supported");
    else if (c->ft == FERRY_TYPE_DECIMAL128 &&
             (c->precision < 1 || c->precision > 38 || c->scale < 0 || c->scale > c->precision))
        tc_fail(t, "decimal precision or scale out of range");
    else if (c->ptype == PT_FLBA && (c->type_length < 1 || c->type_length > 1 << 20))
        tc_fail(t, "bad FIXED_LEN_BYTE_ARRAY length");
    else if (c->ft == FERRY_TYPE_DECIMAL128 && c->ptype == PT_FLBA && c->type_length > 16)
        tc_fail(t, "decimal wider than 16 bytes");
}

/* How a group's JSON value is built: LIST and MAP annotations with the shape the spec
 * gives them (one REPEATED child; a map's holding a key and maybe a value), else a struct. */
static void classify(struct ferry_parquet_reader *r, const struct pcol *el, const int *kids, int i)
{
    struct pnode *nd = &r->nodes[i];
    const struct pnode *rc = &r->nodes[i + 1];
    bool one_rep = kids[i] == 1 && rc->repetition == 2;
    nd->kind = NK_STRUCT;
    if (one_rep && (el[i].lt == 3 || (el[i].lt == 0 && el[i].converted == 3))) {
        nd->kind = NK_LIST;
        /* backward-compatibility rules of LogicalTypes.md: a repeated group with one child is
         * the 3-level list's middle level unless named "array" or "<list>_tuple" */
        char tuple[300];
        snprintf(tuple, sizeof tuple, "%s_tuple", nd->name);
        bool legacy = rc->kind == NK_LEAF || kids[i + 1] != 1 || !strcmp(rc->name, "array") ||
                      !strcmp(rc->name, tuple);
        nd->elem = legacy ? ELEM_SELF : ELEM_CHILD;
    } else if (one_rep && rc->kind != NK_LEAF && (kids[i + 1] == 1 || kids[i + 1] == 2) &&
               (el[i].lt == 2 || (el[i].lt == 0 && (el[i].converted == 1 || el[i].converted == 2)))) {
        nd->kind = NK_MAP;
    }
}

/* Builds node i's subtree (elements i.. in preorder) with its levels; leaves become columns.
 * Returns the index after the subtree, or -1 (t failed or out of memory: *rc). */
static int build_node(struct ferry_parquet_reader *r, struct tc *t, struct pcol *el,
                      const int *kids, int n, int i, int depth, const char *path, int *rc)
{
    struct pnode *nd = &r->nodes[i];
    nd->name = el[i].name;
    nd->field_id = el[i].field_id;
    el[i].name = NULL;
    nd->repetition = i == 0 ? 0 : el[i].repetition;
    if (depth > MAX_DEPTH || nd->repetition < 0 || nd->repetition > 2) {
        tc_fail(t, depth > MAX_DEPTH ? "schema nested too deep" : "bad repetition type");
        return -1;
    }
    nd->first_leaf = r->ncols;
    if (i > 0 && kids[i] == 0) { /* a leaf: a column */
        if (el[i].ptype < 0) {
            tc_fail(t, "schema element without a type or children");
            return -1;
        }
        struct pcol *c = &r->cols[r->ncols];
        *c = el[i];
        c->name = depth > 1 ? ferry_asprintf("%s.%s", path, nd->name) : ferry_strdup(nd->name);
        if (c->name == NULL) {
            *rc = oom(r);
            return -1;
        }
        c->max_def = nd->def;
        c->max_rep = nd->rep;
        c->nested = depth > 1 || nd->repetition == 2;
        leaf_check(t, c);
        r->ncols++;
        nd->kind = NK_LEAF;
        nd->nleaves = 1;
        nd->end = i + 1;
        return t->bad ? -1 : i + 1;
    }
    nd->kind = NK_STRUCT; /* until classified */
    char *sub = i == 0 ? NULL : depth > 1 ? ferry_asprintf("%s.%s", path, nd->name)
                                          : ferry_strdup(nd->name);
    if (i > 0 && sub == NULL) {
        *rc = oom(r);
        return -1;
    }
    int j = i + 1;
    for (int k = 0; k < kids[i] && j >= 0; k++) {
        if (j >= n) {
            tc_fail(t, "schema children run past the schema list");
            j = -1;
            break;
        }
        struct pnode *ch = &r->nodes[j];
        int rep = el[j].repetition;
        ch->def = nd->def + (rep != 0);
        ch->rep = nd->rep + (rep == 2);
        j = build_node(r, t, el, kids, n, j, depth + 1, sub, rc);
    }
    ferry_free(sub);
    if (j < 0) return -1;
    nd->end = j;
    nd->nleaves = r->ncols - nd->first_leaf;
    if (i > 0) classify(r, el, kids, i);
    return j;
}

/* The footer's schema list of n elements: the tree, its leaf columns, the top-level
 * fields (a leaf that is not REPEATED reads as its own type, anything else as JSON). */
static int parse_schema(struct ferry_parquet_reader *r, struct tc *t, int n, struct ferry_buf *nm)
{
    struct pcol *el = ferry_calloc((size_t)n, sizeof *el);
    int *kids = ferry_calloc((size_t)n, sizeof *kids);
    r->nodes = ferry_calloc((size_t)n, sizeof *r->nodes);
    r->cols = ferry_calloc((size_t)n, sizeof *r->cols);
    r->tops = ferry_calloc((size_t)n, sizeof *r->tops);
    int rc = el && kids && r->nodes && r->cols && r->tops ? FERRY_OK : oom(r);
    int got = 0;
    for (; rc == FERRY_OK && got < n && !t->bad; got++) {
        ferry_buf_reset(nm);
        parse_schema_elem(t, &el[got], &kids[got], nm);
        if (!t->bad && kids[got] < 0) tc_fail(t, "negative child count");
        if (!t->bad && nm->len == 0) tc_fail(t, "schema element without a name");
        if (!t->bad && (el[got].name = ferry_strdup(nm->data)) == NULL) rc = oom(r);
    }
    if (rc == FERRY_OK && !t->bad) {
        r->nnodes = n;
        int end = build_node(r, t, el, kids, n, 0, 0, NULL, &rc);
        if (end >= 0 && end != n) tc_fail(t, "schema list longer than its tree");
    }
    for (int i = 0; el && i < got; i++)
        ferry_free(el[i].name);
    ferry_free(el);
    ferry_free(kids);
    if (rc != FERRY_OK || t->bad) return rc;
    for (int j = 1; j < n; j = r->nodes[j].end)
        r->tops[r->ntops++] = j;
    return FERRY_OK;
}

#define TAIL_READ ((size_t)64 << 10)

static int parse_footer(struct ferry_parquet_reader *r)
{
    if (r->n < 12) return bad(r, 0, "not a Parquet file (shorter than its magic and footer)");
    /* Ranged (an object store): the last TAIL_READ bytes in one read, which hold the footer
     * of most files, so opening costs one request. The leading magic is checked in memory,
     * in a local file, or when those bytes hold it (the whole object); a larger object is
     * judged by its trailing magic and its footer, as Arrow's readers do, without a second
     * request. */
    bool remote = r->p == NULL && r->fd < 0;
    const uint8_t *head = remote ? NULL : range(r, 0, 4, &r->chunk);
    if (!remote && head == NULL) return r->err->code;
    if (head != NULL && memcmp(head, "PAR1", 4))
        return bad(r, 0, "not a Parquet file (no PAR1 magic at its start)");
    size_t tn = r->p == NULL ? (r->n < TAIL_READ ? r->n : TAIL_READ) : 8;
    const uint8_t *tail = range(r, r->n - tn, tn, &r->chunk);
    if (tail == NULL) return r->err->code;
    if (remote && tn == r->n && memcmp(tail, "PAR1", 4))
        return bad(r, 0, "not a Parquet file (no PAR1 magic at its start)");
    tail += tn - 8;
    if (memcmp(tail + 4, "PAR1", 4))
        return bad(r, r->n - 4, "not a Parquet file (no PAR1 magic at its end: truncated?)");
    uint32_t flen = le32(tail);
    if (flen > r->n - 12) return bad(r, r->n - 8, "footer length larger than the file");
    size_t foff = r->n - 8 - flen;
    const uint8_t *fp = flen + 8 <= tn ? tail - flen : range(r, foff, flen, &r->chunk);
    if (fp == NULL) return r->err->code;
    struct tc t = {fp, fp + flen, fp, foff, false, NULL};
    struct ferry_buf nm;
    ferry_buf_init(&nm, 0);
    int16_t last = 0, id;
    int type, rc = FERRY_OK;
    bool have_schema = false;
    while (rc == FERRY_OK && (type = tc_field(&t, &last, &id)) != 0) {
        if (id == 2 && type == 9) {
            int elem;
            int64_t n = tc_list(&t, &elem);
            if (t.bad) break;
            if (elem != 12 || n < 1 || n > INT32_MAX / 2 || have_schema) {
                tc_fail(&t, "bad schema list");
                break;
            }
            have_schema = true;
            rc = parse_schema(r, &t, (int)n, &nm);
        } else if (id == 3) {
            r->num_rows = tc_i64(&t, type);
        } else if (id == 4 && type == 9) {
            int elem;
            int64_t n = tc_list(&t, &elem);
            if (t.bad) break;
            if (!have_schema || elem != 12) {
                tc_fail(&t, "row groups before the schema");
                break;
            }
            r->rgs = ferry_calloc((size_t)n + 1, sizeof *r->rgs);
            if (r->rgs == NULL) {
                rc = oom(r);
                break;
            }
            for (int64_t i = 0; i < n && !t.bad && rc == FERRY_OK; i++) {
                rc = parse_row_group(r, &t, &r->rgs[i]);
                r->nrg++;
            }
        } else {
            tc_skip(&t, type, 0);
        }
    }
    ferry_buf_release(&nm);
    if (rc != FERRY_OK) return rc;
    if (t.bad) return bad(r, tc_off(&t), t.why);
    if (!have_schema || r->ncols == 0) return bad(r, foff, "footer has no columns");
    int64_t total = 0;
    for (int i = 0; i < r->nrg; i++)
        total += r->rgs[i].num_rows;
    /* parquet-rs 0.3 wrote num_rows 0 whatever its row groups held; each group's count is
     * checked against its column chunks when read, so the groups' sum is used */
    if (r->num_rows == 0 && total > 0) r->num_rows = total;
    if (total != r->num_rows) return bad(r, foff, "row groups do not add up to num_rows");
    /* a footer that lies about where its chunks are fails here, before any row is read */
    for (int g = 0; g < r->nrg; g++)
        for (int i = 0; i < r->ncols; i++) {
            const struct pchunk *k = &r->rgs[g].cols[i];
            int64_t start =
                k->dict_off >= 4 && k->dict_off < k->data_off ? k->dict_off : k->data_off;
            if (start < 4 || k->size < 0 || (uint64_t)start > r->n - 8 ||
                (uint64_t)k->size > r->n - 8 - (uint64_t)start ||
                (uint64_t)start + (uint64_t)k->size > foff)
                return bad(r, foff, "a column chunk lies outside the file's data");
        }
    r->schema = ferry_schema_new();
    if (r->schema == NULL) return oom(r);
    for (int i = 0; i < r->ntops && rc == FERRY_OK; i++) {
        const struct pnode *nd = &r->nodes[r->tops[i]];
        if (top_nested(nd)) {
            rc = ferry_schema_add_field(r->schema, nd->name, FERRY_TYPE_JSON, nd->repetition == 1,
                                        r->err);
            continue;
        }
        const struct pcol *c = &r->cols[nd->first_leaf];
        rc = ferry_schema_add_field(r->schema, c->name, c->ft, c->repetition != 0, r->err);
        if (rc == FERRY_OK && c->ft == FERRY_TYPE_DECIMAL128) {
            r->schema->fields[i].precision = c->precision;
            r->schema->fields[i].scale = c->scale;
        }
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(r->schema, r->err);
    if (rc != FERRY_OK && rc != FERRY_ENOMEM)
        ferry_error_prefix(r->err, "parquet: %s: schema at byte %zu", r->name, foff);
    return rc;
}

/* ---- pages ------------------------------------------------------------------------------ */

static int decompress(struct ferry_parquet_reader *r, int codec, const uint8_t *in, size_t n,
                      size_t want, size_t off, struct ferry_buf *out)
{
    ferry_buf_reset(out);
    /* sizes are checked against what the input can hold before anything is allocated */
    if (codec == CODEC_NONE && n != want)
        return bad(r, off, "uncompressed page size differs from its length");
    if (codec == CODEC_SNAPPY) {
        size_t len = 0;
        if (snappy_uncompressed_length((const char *)in, n, &len) != SNAPPY_OK || len != want)
            return bad(r, off, "snappy page size differs from the header");
    }
    if (codec == CODEC_GZIP && want / 1032 > n + 64)
        return bad(r, off, "gzip page size larger than deflate can expand to");
    if (codec == CODEC_ZSTD) {
        unsigned long long fs = ZSTD_getFrameContentSize(in, n);
        if (fs == ZSTD_CONTENTSIZE_ERROR || (fs != ZSTD_CONTENTSIZE_UNKNOWN && fs != want))
            return bad(r, off, "zstd page size differs from the header");
        if (fs == ZSTD_CONTENTSIZE_UNKNOWN && want / 4096 > n + 64)
            return bad(r, off, "zstd page size implausible for its length");
    }
    if (ferry_buf_reserve(out, want + 1)) return oom(r);
    switch (codec) {
    case CODEC_NONE:
        if (n) memcpy(out->data, in, n);
        break;
    case CODEC_SNAPPY: {
        size_t len = want;
        if (snappy_uncompress((const char *)in, n, out->data, &len) != SNAPPY_OK || len != want)
            return bad(r, off, "corrupt snappy page");
        break;
    }
    case CODEC_GZIP: {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 15 + 32) != Z_OK) return oom(r);
        zs.next_in = (Bytef *)(uintptr_t)in;
        zs.avail_in = (uInt)n;
        zs.next_out = (Bytef *)out->data;
        zs.avail_out = (uInt)want;
        int z = inflate(&zs, Z_FINISH);
        size_t got = want - zs.avail_out;
        inflateEnd(&zs);
        if (z != Z_STREAM_END || got != want) return bad(r, off, "corrupt gzip page");
        break;
    }
    case CODEC_ZSTD: {
        /* one context per reader: ZSTD_decompress() would make (and free) one per page */
        if (r->zstd == NULL && (r->zstd = ZSTD_createDCtx()) == NULL) return oom(r);
        size_t got = ZSTD_decompressDCtx(r->zstd, out->data, want, in, n);
        if (ZSTD_isError(got) || got != want) return bad(r, off, "corrupt zstd page");
        break;
    }
    default:
        return bad(r, off, "unsupported compression codec");
    }
    out->len = want;
    return FERRY_OK;
}

/* RLE/bit-packed hybrid: decodes `count` values of `width` bits from [p, end) into out
 * (uint32). FERRY_OK or bad(). */
static int hybrid(struct ferry_parquet_reader *r, const uint8_t *p, const uint8_t *end, int width,
                  uint32_t *out, int64_t count, size_t off)
{
    if (width < 0 || width > 32) return bad(r, off, "bit width above 32");
    int64_t got = 0;
    struct tc t = {p, end, p, off, false, NULL};
    while (got < count) {
        uint64_t h = tc_varint(&t);
        if (t.bad) return bad(r, tc_off(&t), "truncated level or index run");
        if ((h & 1) && width == 0) { /* zero-width values are all 0 */
            uint64_t k = (h >> 1) * 8;
            for (; k > 0 && got < count; k--)
                out[got++] = 0;
        } else if (h & 1) { /* bit-packed: (h >> 1) groups of 8 */
            uint64_t groups = h >> 1;
            if (groups == 0 || groups > (uint64_t)(t.end - t.p) / (width ? (uint64_t)width : 1) + 1)
                return bad(r, tc_off(&t), "bit-packed run longer than its data");
            size_t bytes = (size_t)groups * (size_t)width;
            if (bytes > (size_t)(t.end - t.p))
                return bad(r, tc_off(&t), "bit-packed run truncated");
            uint64_t acc = 0;
            int bits = 0;
            const uint8_t *q = t.p;
            if ((size_t)(t.end - t.p) >= bytes + 8) { /* room to load 8 bytes at any value */
                uint64_t take = groups * 8, mask = (UINT64_C(1) << width) - 1;
                if (take > (uint64_t)(count - got)) take = (uint64_t)(count - got);
                for (uint64_t i = 0; i < take; i++) {
                    uint64_t bit = i * (uint64_t)width;
                    out[got++] = (uint32_t)((le64(q + (bit >> 3)) >> (bit & 7)) & mask);
                }
                t.p += bytes;
                continue;
            }
            for (uint64_t i = 0; i < groups * 8; i++) {
                while (bits < width) {
                    acc |= (uint64_t)*q++ << bits;
                    bits += 8;
                }
                uint32_t v =
                    width == 32 ? (uint32_t)acc : (uint32_t)(acc & ((UINT64_C(1) << width) - 1));
                acc >>= width;
                bits -= width;
                if (got < count) out[got++] = v;
            }
            t.p += bytes;
        } else {
            uint64_t run = h >> 1;
            int nb = (width + 7) / 8;
            if (nb > t.end - t.p) return bad(r, tc_off(&t), "RLE run truncated");
            uint32_t v = 0;
            for (int i = 0; i < nb; i++)
                v |= (uint32_t)t.p[i] << (8 * i);
            t.p += nb;
            if (run == 0) return bad(r, tc_off(&t), "empty RLE run");
            for (uint64_t i = 0; i < run && got < count; i++)
                out[got++] = v;
        }
    }
    return FERRY_OK;
}

static int slot_width(enum ferry_type t)
{
    return t == FERRY_TYPE_DECIMAL128 || t == FERRY_TYPE_UUID ? 16 : 8;
}

/* A var-width slot: length << 32 | offset into the column's data, or into its dictionary's
 * bytes (dict_data) when SLOT_DICT is set (a dictionary-encoded value is not copied). */
#define SLOT_DICT (UINT64_C(1) << 63)

static const char *slot_bytes(const struct pvals *v, uint64_t u, size_t *len)
{
    *len = (size_t)((u & ~SLOT_DICT) >> 32);
    return (u & SLOT_DICT ? v->dict_data.data : v->data.data) + (u & UINT32_MAX);
}

static void put_dec(uint8_t *slot, int64_t lo_signed)
{
    struct ferry_decimal128 d = {(uint64_t)lo_signed, lo_signed < 0 ? -1 : 0};
    memcpy(slot, &d, 16);
}

static int put_be_dec(struct ferry_parquet_reader *r, uint8_t *slot, const uint8_t *p, size_t n,
                      size_t off)
{
    if (n > 16) return bad(r, off, "decimal wider than 16 bytes");
    uint8_t b[16];
    memset(b, n && (p[0] & 0x80) ? 0xff : 0, 16);
    memcpy(b + 16 - n, p, n);
    struct ferry_decimal128 d = {0, 0};
    uint64_t hi = 0;
    for (int i = 0; i < 8; i++)
        hi = hi << 8 | b[i];
    for (int i = 8; i < 16; i++)
        d.lo = d.lo << 8 | b[i];
    d.hi = (int64_t)hi;
    memcpy(slot, &d, 16);
    return FERRY_OK;
}

/* Whether the 8-byte values of column c go to their slots unchanged (doubles, int64,
 * microsecond times and timestamps). */
static bool as_is64(const struct pcol *c)
{
    if (c->ft == FERRY_TYPE_DECIMAL128) return false;
    if (c->ft != FERRY_TYPE_TIME64_US && c->ft != FERRY_TYPE_TIMESTAMP_US &&
        c->ft != FERRY_TYPE_TIMESTAMPTZ_US)
        return true;
    return (c->lt ? c->lt_unit : (c->converted == CT_TS_MILLIS ? 1 : 2)) == 2;
}

/* Decodes n PLAIN values of column c from [p, end) into slots (width w), var-width bytes
 * into data. *used gets the bytes consumed. */
static int plain(struct ferry_parquet_reader *r, const struct pcol *c, const uint8_t *p,
                 const uint8_t *end, int64_t n, uint8_t *slots, struct ferry_buf *data, size_t off)
{
    int w = slot_width(c->ft);
    size_t avail = (size_t)(end - p);
    switch (c->ptype) {
    case PT_BOOLEAN:
        if ((uint64_t)n > (uint64_t)avail * 8) return bad(r, off, "too few boolean values");
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (p[i / 8] >> (i % 8)) & 1;
            memcpy(slots + i * w, &v, 8);
        }
        return FERRY_OK;
    case PT_INT32:
    case PT_FLOAT:
        if ((uint64_t)n > avail / 4) return bad(r, off, "too few 4-byte values");
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = le32(p + 4 * i);
            uint8_t *s = slots + i * w;
            if (c->ptype == PT_FLOAT) {
                float f;
                memcpy(&f, &u, 4);
                double d = f;
                memcpy(s, &d, 8);
            } else if (c->ft == FERRY_TYPE_DECIMAL128) {
                put_dec(s, (int32_t)u);
            } else {
                int64_t v = (int32_t)u;
                if (c->ft == FERRY_TYPE_TIME64_US)
                    v *= 1000;
                else if (c->ft == FERRY_TYPE_INT64)
                    v = (int64_t)u; /* UINT_32 */
                else if (c->ft == FERRY_TYPE_INT32 &&
                         (c->converted == CT_UINT_16 || (c->lt == 10 && !c->lt_signed)))
                    v = (int64_t)(u & 0xffff);
                else if (c->ft == FERRY_TYPE_INT16 &&
                         (c->converted == CT_UINT_8 || (c->lt == 10 && !c->lt_signed)))
                    v = (int64_t)(u & 0xff);
                memcpy(s, &v, 8);
            }
        }
        return FERRY_OK;
    case PT_INT64:
    case PT_DOUBLE:
        if ((uint64_t)n > avail / 8) return bad(r, off, "too few 8-byte values");
        if (as_is64(c)) { /* the common case in a loop of its own: a load and a store */
            for (int64_t i = 0; i < n; i++) {
                uint64_t u = le64(p + 8 * i);
                memcpy(slots + i * 8, &u, 8);
            }
            return FERRY_OK;
        }
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = le64(p + 8 * i);
            uint8_t *s = slots + i * w;
            if (c->ft == FERRY_TYPE_DECIMAL128) {
                if (c->u64) {
                    struct ferry_decimal128 d = {u, 0};
                    memcpy(s, &d, 16);
                } else {
                    put_dec(s, (int64_t)u);
                }
                continue;
            }
            int64_t v = (int64_t)u;
            int unit = c->lt ? c->lt_unit : (c->converted == CT_TS_MILLIS ? 1 : 2);
            if ((c->ft == FERRY_TYPE_TIME64_US || c->ft == FERRY_TYPE_TIMESTAMP_US ||
                 c->ft == FERRY_TYPE_TIMESTAMPTZ_US)) {
                if (unit == 1) {
                    v *= 1000;
                } else if (unit == 3) {
                    if (v % 1000 != 0)
                        return ferry_error_set(
                            r->err, FERRY_EINVAL, "parquet",
                            "parquet: %s: column %s: the nanosecond value %" PRId64
                            " is not a whole microsecond (ferry carries "
                            "microseconds)",
                            r->name, c->name, v);
                    v /= 1000;
                }
            }
            if (c->ptype == PT_DOUBLE)
                memcpy(s, &u, 8);
            else
                memcpy(s, &v, 8);
        }
        return FERRY_OK;
    case PT_INT96:
        if ((uint64_t)n > avail / 12) return bad(r, off, "too few INT96 values");
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *q = p + 12 * i;
            uint64_t ns = le64(q);
            int64_t jd = (int32_t)le32(q + 8);
            /* julian days beyond +-100000 years would overflow microseconds */
            if (jd < -34000000 || jd > 39000000 || ns >= UINT64_C(86400000000000))
                return bad(r, off, "INT96 timestamp beyond +-100000 years");
            int64_t v = (jd - 2440588) * INT64_C(86400000000) + (int64_t)(ns / 1000);
            memcpy(slots + i * w, &v, 8);
        }
        return FERRY_OK;
    case PT_BYTE_ARRAY:
    case PT_FLBA: {
        const uint8_t *q = p;
        /* the values' bytes are at most the page's: room for all of them at once */
        bool var = c->ft != FERRY_TYPE_DECIMAL128 && c->ft != FERRY_TYPE_UUID;
        if (var && ferry_buf_reserve(data, avail + 1)) return oom(r);
        for (int64_t i = 0; i < n; i++) {
            size_t len;
            if (c->ptype == PT_FLBA) {
                len = (size_t)c->type_length;
            } else {
                if (end - q < 4) return bad(r, off + (size_t)(q - p), "truncated byte array");
                len = le32(q);
                q += 4;
            }
            if (len > (size_t)(end - q))
                return bad(r, off + (size_t)(q - p), "byte array runs past the page");
            uint8_t *s = slots + i * w;
            if (c->ft == FERRY_TYPE_DECIMAL128) {
                int rc = put_be_dec(r, s, q, len, off + (size_t)(q - p));
                if (rc) return rc;
            } else if (c->ft == FERRY_TYPE_UUID) {
                memcpy(s, q, 16);
            } else {
                /* a slot packs length << 32 | offset into the column's byte store */
                if (len > INT32_MAX || data->len > UINT32_MAX)
                    return ferry_error_set(r->err, FERRY_EUNSUPPORTED, "parquet",
                                           "parquet: %s: column %s holds more than 4 GiB of "
                                           "values in one row group",
                                           r->name, c->name);
                uint64_t packed = (uint64_t)len << 32 | (uint64_t)data->len;
                memcpy(data->data + data->len, q, len); /* reserved above */
                data->len += len;
                memcpy(s, &packed, 8);
            }
            q += len;
        }
        return FERRY_OK;
    }
    default:
        return bad(r, off, "unknown physical type");
    }
}

/* DELTA_BINARY_PACKED (INT32/INT64 columns): decodes n values from [p, end) and writes
 * them PLAIN (4 or 8 bytes little-endian, by the physical type) into out, so that the
 * PLAIN decoder applies the column's conversions. Arithmetic wraps as the spec says. */
static int delta_to_plain(struct ferry_parquet_reader *r, int width, const uint8_t *p,
                          const uint8_t *end, int64_t n, struct ferry_buf *out, size_t *used,
                          size_t off)
{
    ferry_buf_reset(out);
    if (n < 0 || (uint64_t)n > MAX_GROUP_ROWS) return bad(r, off, "delta value count out of range");
    if (ferry_buf_reserve(out, (size_t)n * (size_t)width + 1)) return oom(r);
    struct tc t = {p, end, p, off, false, NULL};
    uint64_t block = tc_varint(&t), minis = tc_varint(&t), total = tc_varint(&t);
    uint64_t cur = (uint64_t)tc_zz(&t);
    if (t.bad) return bad(r, tc_off(&t), "truncated delta header");
    if (block == 0 || block % 128 || minis == 0 || block % minis || (block / minis) % 32 ||
        block > 1u << 20 || total < (uint64_t)n)
        return bad(r, off, "bad delta header");
    uint64_t per = block / minis;
    int64_t got = 0;
    uint8_t *o = (uint8_t *)out->data;
    if (n > 0) put_le(o, cur, width); /* the header's first value, once */
    got = n > 0;
    while (got < n) {
        uint64_t min = (uint64_t)tc_zz(&t);
        if (t.bad || (uint64_t)(t.end - t.p) < minis)
            return bad(r, tc_off(&t), "truncated delta block");
        const uint8_t *bw = t.p;
        t.p += minis;
        for (uint64_t m = 0; m < minis && got < n; m++) {
            int bits = bw[m];
            if (bits > 64) return bad(r, tc_off(&t), "delta bit width above 64");
            size_t bytes = (size_t)(per * (uint64_t)bits / 8);
            if (bytes > (size_t)(t.end - t.p))
                return bad(r, tc_off(&t), "truncated delta miniblock");
            const uint8_t *q = t.p;
            uint64_t bitpos = 0;
            for (uint64_t i = 0; i < per && got < n; i++) {
                uint64_t v = 0;
                for (int b = 0; b < bits; b++, bitpos++)
                    v |= (uint64_t)((q[bitpos / 8] >> (bitpos % 8)) & 1) << b;
                cur += min + v;
                put_le(o + got * width, cur, width);
                got++;
            }
            t.p += bytes;
        }
    }
    out->len = (size_t)n * (size_t)width;
    if (used) *used = (size_t)(t.p - p);
    return FERRY_OK;
}

/* DELTA_LENGTH_BYTE_ARRAY (prefixed false) and DELTA_BYTE_ARRAY (true: prefix lengths,
 * then suffixes as DELTA_LENGTH_BYTE_ARRAY; each value is the previous value's prefix plus
 * its suffix): n values from [p, end), written PLAIN into r->page2 (4-byte lengths for
 * BYTE_ARRAY, bare for FIXED_LEN_BYTE_ARRAY) for the PLAIN decoder. */
static int delta_strings(struct ferry_parquet_reader *r, const struct pcol *c, const uint8_t *p,
                         const uint8_t *end, int64_t n, bool prefixed, size_t off)
{
    size_t used = 0;
    int rc;
    if (prefixed) {
        if ((rc = delta_to_plain(r, 4, p, end, n, &r->lens2, &used, off))) return rc;
        p += used;
        off += used;
    }
    if ((rc = delta_to_plain(r, 4, p, end, n, &r->lens, &used, off))) return rc;
    p += used;
    off += used;
    bool fixed = c->ptype == PT_FLBA;
    ferry_buf_reset(&r->page2);
    size_t prev_off = 0, prev_len = 0;
    const uint8_t *q = p;
    for (int64_t i = 0; i < n; i++) {
        int32_t pl = prefixed ? (int32_t)le32((const uint8_t *)r->lens2.data + 4 * i) : 0;
        int32_t sl = (int32_t)le32((const uint8_t *)r->lens.data + 4 * i);
        if (pl < 0 || sl < 0 || (size_t)pl > prev_len)
            return bad(r, off, "delta byte array prefix or length out of range");
        if ((size_t)sl > (size_t)(end - q)) return bad(r, off, "delta byte array past the page");
        size_t total = (size_t)pl + (size_t)sl;
        if (fixed && total != (size_t)c->type_length)
            return bad(r, off, "delta byte array value of the wrong fixed length");
        if (ferry_buf_reserve(&r->page2, total + 4)) return oom(r);
        uint8_t *o = (uint8_t *)r->page2.data;
        if (!fixed) {
            put_le(o + r->page2.len, total, 4);
            r->page2.len += 4;
        }
        size_t cur = r->page2.len;
        if (pl) memcpy(o + cur, o + prev_off, (size_t)pl);
        if (sl) memcpy(o + cur + (size_t)pl, q, (size_t)sl);
        q += sl;
        r->page2.len = cur + total;
        prev_off = cur;
        prev_len = total;
    }
    return FERRY_OK;
}

/* Parses one page header at *pos (within [chunk start, chunk end)). */
struct phdr {
    int type;
    int64_t usize, csize;
    int64_t num_values;
    int encoding;
    /* v2 */
    int64_t num_nulls, def_len, rep_len;
    bool v2_compressed;
};

static int page_header(struct ferry_parquet_reader *r, const uint8_t *at, size_t pos, size_t end,
                       struct phdr *h, size_t *body)
{
    struct tc t = {at, at + (end - pos), at, pos, false, NULL};
    int16_t last = 0, id;
    int type;
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->usize = h->csize = -1;
    h->v2_compressed = true;
    while ((type = tc_field(&t, &last, &id)) != 0) {
        if (id == 1)
            h->type = tc_i32(&t, type);
        else if (id == 2)
            h->usize = tc_i32(&t, type);
        else if (id == 3)
            h->csize = tc_i32(&t, type);
        else if ((id == 5 || id == 7 || id == 8) && type == 12) {
            int16_t l2 = 0, id2;
            int t2;
            while ((t2 = tc_field(&t, &l2, &id2)) != 0) {
                if (id2 == 1)
                    h->num_values = tc_i32(&t, t2);
                else if (id2 == 2 && id != 8)
                    h->encoding = tc_i32(&t, t2);
                else if (id == 8 && id2 == 2)
                    h->num_nulls = tc_i32(&t, t2);
                else if (id == 8 && id2 == 4)
                    h->encoding = tc_i32(&t, t2);
                else if (id == 8 && id2 == 5)
                    h->def_len = tc_i32(&t, t2);
                else if (id == 8 && id2 == 6)
                    h->rep_len = tc_i32(&t, t2);
                else if (id == 8 && id2 == 7)
                    h->v2_compressed = t2 == 1;
                else
                    tc_skip(&t, t2, 2);
            }
        } else {
            tc_skip(&t, type, 1);
        }
    }
    if (t.bad) return bad(r, tc_off(&t), t.why);
    *body = tc_off(&t);
    if (h->usize < 0 || h->csize < 0 || h->usize > MAX_PAGE || h->csize > (int64_t)(end - *body))
        return bad(r, pos, "page sizes out of range");
    if (h->num_values < 0) return bad(r, pos, "negative value count");
    return FERRY_OK;
}

/* Room for `rows` values (and their levels when `lv`); grows as pages arrive so that a
 * footer's claimed row count allocates nothing by itself. */
static int grow(struct ferry_parquet_reader *r, struct pvals *v, int64_t rows, int w, bool lv)
{
    if (rows <= v->cap && v->slot != NULL && (!lv || v->def != NULL)) return FERRY_OK;
    if (rows > MAX_GROUP_ROWS)
        return ferry_error_set(r->err, FERRY_EUNSUPPORTED, "parquet",
                               "parquet: %s: a row group of more than %lld values in a column",
                               r->name, (long long)MAX_GROUP_ROWS);
    int64_t cap = v->cap ? v->cap : 1024;
    while (cap < rows)
        cap *= 2;
    if (cap > MAX_GROUP_ROWS) cap = MAX_GROUP_ROWS;
    uint8_t *s = ferry_realloc(v->slot, (size_t)cap * (size_t)w);
    if (s == NULL) return oom(r);
    v->slot = s;
    uint8_t *nl = ferry_realloc(v->isnull, (size_t)cap);
    if (nl == NULL) return oom(r);
    v->isnull = nl;
    if (lv) {
        if ((nl = ferry_realloc(v->def, (size_t)cap)) == NULL) return oom(r);
        v->def = nl;
        if ((nl = ferry_realloc(v->rep, (size_t)cap)) == NULL) return oom(r);
        v->rep = nl;
    }
    v->cap = cap;
    return FERRY_OK;
}

/* idx holds at least n + 1 entries (the level and index scratch of read_chunk). */
static int idx_room(struct ferry_parquet_reader *r, uint32_t **idx, int64_t n)
{
    uint32_t *lv = ferry_realloc(*idx, (size_t)(n + 1) * sizeof *lv);
    if (lv == NULL) return oom(r);
    *idx = lv;
    return FERRY_OK;
}

/* A dictionary page: decoded PLAIN into v->dict (slots) and v->dict_data. */
static int dict_page(struct ferry_parquet_reader *r, const struct pcol *c, const struct pchunk *k,
                     const struct phdr *h, const uint8_t *in, size_t body, size_t pos, int64_t row,
                     struct pvals *v)
{
    int w = slot_width(c->ft);
    if (v->dict_n >= 0 || row > 0) return bad(r, pos, "dictionary page after data");
    if (h->encoding != ENC_PLAIN && h->encoding != ENC_PLAIN_DICT)
        return bad(r, pos, "dictionary page not PLAIN");
    int rc = decompress(r, k->codec, in, (size_t)h->csize, (size_t)h->usize, body, &r->page);
    if (rc) return rc;
    if ((uint64_t)h->num_values > r->page.len * 8 + 1)
        return bad(r, pos, "dictionary larger than its page");
    if (c->ptype != PT_BOOLEAN && (uint64_t)h->num_values > r->page.len)
        return bad(r, pos, "dictionary holds more entries than bytes");
    ferry_buf_reset(&v->dict);
    ferry_buf_reset(&v->dict_data);
    if (ferry_buf_reserve(&v->dict, (size_t)h->num_values * (size_t)w + 1)) return oom(r);
    rc = plain(r, c, (const uint8_t *)r->page.data, (const uint8_t *)r->page.data + r->page.len,
               h->num_values, (uint8_t *)v->dict.data, &v->dict_data, body);
    v->dict_n = h->num_values;
    if (rc == FERRY_OK && ferry_type_is_varwidth(c->ft))
        for (int64_t i = 0; i < v->dict_n; i++) {
            uint64_t pk;
            memcpy(&pk, v->dict.data + i * 8, 8);
            pk |= SLOT_DICT;
            memcpy(v->dict.data + i * 8, &pk, 8);
        }
    return rc;
}

/* A data page's parts, once decompressed: values [vp, ve), repetition levels [rp, re) and
 * definition levels [dp, de) (NULL when the column has none). */
struct pparts {
    const uint8_t *vp, *ve, *rp, *re, *dp, *de;
};

/* v1 levels: a 4-byte length, then the hybrid runs; advances *at. */
static int v1_levels(struct ferry_parquet_reader *r, const uint8_t **at, const uint8_t *end,
                     const uint8_t **lp, const uint8_t **le, size_t body)
{
    if (end - *at < 4) return bad(r, body, "levels truncated");
    size_t dl = le32(*at);
    if (dl > (size_t)(end - *at - 4)) return bad(r, body, "levels longer than the page");
    *lp = *at + 4;
    *le = *lp + dl;
    *at = *le;
    return FERRY_OK;
}

/* Where a data page's values and levels are (v1: all compressed together, each level run
 * after a 4-byte length, repetition first; v2: levels uncompressed before the values). */
static int page_parts(struct ferry_parquet_reader *r, const struct pcol *c, const struct pchunk *k,
                      const struct phdr *h, const uint8_t *in, size_t body, size_t pos,
                      struct pparts *pp)
{
    memset(pp, 0, sizeof *pp);
    int rc;
    if (h->type == PAGE_DATA) {
        if ((rc = decompress(r, k->codec, in, (size_t)h->csize, (size_t)h->usize, body, &r->page)))
            return rc;
        pp->vp = (const uint8_t *)r->page.data;
        pp->ve = pp->vp + r->page.len;
        if (c->max_rep > 0 && (rc = v1_levels(r, &pp->vp, pp->ve, &pp->rp, &pp->re, body)))
            return rc;
        if (c->max_def > 0 && (rc = v1_levels(r, &pp->vp, pp->ve, &pp->dp, &pp->de, body)))
            return rc;
        return FERRY_OK;
    }
    if (h->def_len < 0 || h->rep_len < 0 || h->def_len + h->rep_len > h->csize ||
        h->def_len + h->rep_len > h->usize)
        return bad(r, pos, "v2 level lengths out of range");
    size_t lv = (size_t)(h->rep_len + h->def_len);
    if (c->max_rep > 0) {
        pp->rp = in;
        pp->re = in + h->rep_len;
    }
    if (c->max_def > 0) {
        pp->dp = in + h->rep_len;
        pp->de = pp->dp + h->def_len;
    }
    if (h->v2_compressed)
        rc = decompress(r, k->codec, in + lv, (size_t)h->csize - lv,
                        (size_t)(h->usize - (int64_t)lv), body + lv, &r->page);
    else
        rc = decompress(r, CODEC_NONE, in + lv, (size_t)h->csize - lv, (size_t)h->csize - lv,
                        body + lv, &r->page);
    if (rc) return rc;
    pp->vp = (const uint8_t *)r->page.data;
    pp->ve = pp->vp + r->page.len;
    return FERRY_OK;
}

static int level_width(int max)
{
    int w = 0;
    while (w < 31 && (1 << w) <= max)
        w++;
    return w;
}

/* hybrid() for levels (width <= 8) into bytes: an RLE run (a page without nulls is one)
 * is a memset. */
static int hybrid8(struct ferry_parquet_reader *r, const uint8_t *p, const uint8_t *end, int width,
                   uint8_t *out, int64_t count, size_t off)
{
    int64_t got = 0;
    struct tc t = {p, end, p, off, false, NULL};
    while (got < count) {
        uint64_t h = tc_varint(&t);
        if (t.bad) return bad(r, tc_off(&t), "truncated level or index run");
        uint64_t run = (h & 1) ? (h >> 1) * 8 : h >> 1;
        int64_t k = run < (uint64_t)(count - got) ? (int64_t)run : count - got;
        if (!(h & 1) || width == 0) {
            int nb = (width + 7) / 8;
            if (nb > t.end - t.p) return bad(r, tc_off(&t), "RLE run truncated");
            if (run == 0) return bad(r, tc_off(&t), "empty RLE run");
            memset(out + got, (h & 1) || nb == 0 ? 0 : t.p[0], (size_t)k);
            t.p += (h & 1) ? 0 : nb;
            got += k;
            continue;
        }
        size_t bytes = (size_t)(h >> 1) * (size_t)width;
        if (h >> 1 == 0 || (h >> 1) > (uint64_t)(t.end - t.p) || bytes > (size_t)(t.end - t.p))
            return bad(r, tc_off(&t), "bit-packed run truncated");
        uint64_t mask = (UINT64_C(1) << width) - 1;
        for (int64_t i = 0; i < k; i++) {
            uint64_t bit = (uint64_t)i * (uint64_t)width, x = 0;
            size_t at = (size_t)(bit >> 3);
            for (size_t b = 0; b < 2 && at + b < bytes; b++) /* a value spans at most 2 bytes */
                x |= (uint64_t)t.p[at + b] << (8 * b);
            out[got++] = (uint8_t)((x >> (bit & 7)) & mask);
        }
        t.p += bytes;
    }
    return FERRY_OK;
}

/* How many of the n levels equal max; *over when one is above it. Counted in blocks of at
 * most 255 into a byte counter, so the loop runs on vector registers (this and the next
 * loop took 7 % of a flat Parquet read as one scalar loop). */
static int64_t count_levels(const uint8_t *lv, int64_t n, uint8_t max, bool *over)
{
    int64_t present = 0;
    uint8_t above = 0;
    for (int64_t i = 0; i < n;) {
        int64_t k = n - i < 255 ? n - i : 255;
        uint8_t cnt = 0;
        for (int64_t j = 0; j < k; j++) {
            uint8_t l = lv[i + j];
            above |= (uint8_t)(l > max);
            cnt = (uint8_t)(cnt + (l == max));
        }
        present += cnt;
        i += k;
    }
    *over = above != 0;
    return present;
}

/* Levels decoded in place into the null flags: p[i] = p[i] < max. */
static void nul_in_place(uint8_t *p, int64_t n, uint8_t max)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (uint8_t)(p[i] < max);
}

/* n levels of at most max from [lp, le) into out (uint8, may be NULL). With nul (definition
 * levels): nul[i] = level < max, *nn = how many values are present. */
static int levels(struct ferry_parquet_reader *r, const uint8_t *lp, const uint8_t *le, int max,
                  int64_t n, uint8_t *out, uint8_t *nul, int64_t *nn, size_t body)
{
    uint8_t *lv = out ? out : nul; /* decoded in place into nul when the levels are not kept */
    if (lv == NULL) return FERRY_OK;
    int rc = hybrid8(r, lp, le, level_width(max), lv, n, body);
    if (rc) return rc;
    bool over = false;
    int64_t present = count_levels(lv, n, (uint8_t)max, &over);
    if (over) return bad(r, body, "level above the column's maximum");
    if (nul == lv)
        nul_in_place(nul, n, (uint8_t)max);
    else if (nul)
        for (int64_t i = 0; i < n; i++)
            nul[i] = lv[i] < max;
    if (nn) *nn = present;
    return FERRY_OK;
}

/* BYTE_STREAM_SPLIT: byte k of value i is at k * nn + i; reassembled PLAIN. */
static int decode_bss(struct ferry_parquet_reader *r, const struct pcol *c, const uint8_t *vp,
                      const uint8_t *ve, int64_t nn, uint8_t *dst, struct pvals *v, size_t body)
{
    size_t kw = c->ptype == PT_INT32 || c->ptype == PT_FLOAT ? 4
                : c->ptype == PT_FLBA                        ? (size_t)c->type_length
                                                             : 8;
    if ((uint64_t)nn > (uint64_t)(ve - vp) / kw)
        return bad(r, body, "byte stream split page too short");
    ferry_buf_reset(&r->page2);
    if (ferry_buf_reserve(&r->page2, (size_t)nn * kw + 1)) return oom(r);
    uint8_t *o = (uint8_t *)r->page2.data;
    for (int64_t i = 0; i < nn; i++)
        for (size_t j = 0; j < kw; j++)
            o[(size_t)i * kw + j] = vp[j * (size_t)nn + (size_t)i];
    r->page2.len = (size_t)nn * kw;
    return plain(r, c, o, o + r->page2.len, nn, dst, &v->data, body);
}

/* Booleans as a 4-byte-prefixed hybrid run of width 1 (v2 writers). */
static int decode_rle_bool(struct ferry_parquet_reader *r, const uint8_t *vp, const uint8_t *ve,
                           int64_t nn, uint8_t *dst, int w, uint32_t **idx, size_t body)
{
    if (ve - vp < 4) return bad(r, body, "boolean run length missing");
    size_t bl = le32(vp);
    if (bl > (size_t)(ve - vp) - 4) return bad(r, body, "boolean run length past the page");
    int rc = idx_room(r, idx, nn);
    if (rc == FERRY_OK) rc = hybrid(r, vp + 4, vp + 4 + bl, 1, *idx, nn, body);
    if (rc) return rc;
    for (int64_t i = 0; i < nn; i++) {
        int64_t x = (*idx)[i] != 0;
        memcpy(dst + i * w, &x, 8);
    }
    return FERRY_OK;
}

/* Dictionary indexes into slots; variable-width entries point into dict_data (SLOT_DICT),
 * where they stay: the dictionary lives as long as the chunk's values. */
static int decode_dict(struct ferry_parquet_reader *r, const struct pcol *c, const uint8_t *vp,
                       const uint8_t *ve, int64_t nn, uint8_t *dst, struct pvals *v, uint32_t **idx,
                       size_t body, size_t pos)
{
    int w = slot_width(c->ft);
    if (v->dict_n < 0) return bad(r, pos, "dictionary-encoded page without a dictionary");
    if (nn > 0 && ve <= vp) return bad(r, body, "dictionary indexes missing");
    int rc = idx_room(r, idx, nn);
    if (rc == FERRY_OK && nn > 0) rc = hybrid(r, vp + 1, ve, vp[0], *idx, nn, body);
    if (rc) return rc;
    const uint32_t *ix = *idx;
    uint32_t top = 0; /* the largest index, checked before any is used */
    for (int64_t i = 0; i < nn; i++)
        top = ix[i] > top ? ix[i] : top;
    if (nn > 0 && (int64_t)top >= v->dict_n) return bad(r, body, "dictionary index out of range");
    const uint8_t *d = (const uint8_t *)v->dict.data;
    if (w == 8) /* a fixed-size copy: no memcpy call per value */
        for (int64_t i = 0; i < nn; i++)
            memcpy(dst + i * 8, d + (size_t)ix[i] * 8, 8);
    else
        for (int64_t i = 0; i < nn; i++)
            memcpy(dst + i * 16, d + (size_t)ix[i] * 16, 16);
    return FERRY_OK;
}

/* nn values of a data page, in its encoding, into dst. */
static int decode_values(struct ferry_parquet_reader *r, const struct pcol *c, const struct phdr *h,
                         const uint8_t *vp, const uint8_t *ve, int64_t nn, uint8_t *dst,
                         struct pvals *v, uint32_t **idx, size_t body, size_t pos)
{
    int rc;
    int e = h->encoding;
    if (e == ENC_PLAIN) return plain(r, c, vp, ve, nn, dst, &v->data, body);
    if (e == ENC_DELTA_BP && (c->ptype == PT_INT32 || c->ptype == PT_INT64)) {
        rc = delta_to_plain(r, c->ptype == PT_INT32 ? 4 : 8, vp, ve, nn, &r->page2, NULL, body);
        return rc ? rc
                  : plain(r, c, (const uint8_t *)r->page2.data,
                          (const uint8_t *)r->page2.data + r->page2.len, nn, dst, &v->data, body);
    }
    if ((e == ENC_DELTA_LBA && c->ptype == PT_BYTE_ARRAY) ||
        (e == ENC_DELTA_BA && (c->ptype == PT_BYTE_ARRAY || c->ptype == PT_FLBA))) {
        rc = delta_strings(r, c, vp, ve, nn, e == ENC_DELTA_BA, body);
        return rc ? rc
                  : plain(r, c, (const uint8_t *)r->page2.data,
                          (const uint8_t *)r->page2.data + r->page2.len, nn, dst, &v->data, body);
    }
    if (e == ENC_BSS && c->ptype != PT_BOOLEAN && c->ptype != PT_BYTE_ARRAY && c->ptype != PT_INT96)
        return decode_bss(r, c, vp, ve, nn, dst, v, body);
    if (e == ENC_RLE && c->ptype == PT_BOOLEAN)
        return decode_rle_bool(r, vp, ve, nn, dst, slot_width(c->ft), idx, body);
    if (e == ENC_RLE_DICT || e == ENC_PLAIN_DICT)
        return decode_dict(r, c, vp, ve, nn, dst, v, idx, body, pos);
    char why[96];
    snprintf(why, sizeof why, "value encoding %d of column %.40s is not supported", e, c->name);
    return bad(r, pos, why);
}

/* Spread forward: value j sits at slot n - nn + j >= its row, so every move goes to a lower
 * (or the same) slot and never overwrites a value still to move. */
static void spread(uint8_t *slots, const uint8_t *dst, const uint8_t *nul, int64_t n, int w)
{
    int64_t j = 0;
    if (w == 8) { /* a fixed-size copy: no memmove call per value */
        for (int64_t i = 0; i < n; i++) {
            uint64_t x = 0;
            if (!nul[i]) memcpy(&x, dst + 8 * j++, 8);
            memcpy(slots + 8 * i, &x, 8);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (nul[i]) {
            memset(slots + i * w, 0, (size_t)w);
        } else {
            memmove(slots + i * w, dst + j * w, (size_t)w);
            j++;
        }
    }
}

/* One data page (v1 or v2) of a chunk: its values from entry `row` on into v (an entry is
 * a row of a flat column, a level entry of a nested one; `total` of them in the chunk). */
static int data_page(struct ferry_parquet_reader *r, const struct pcol *c, const struct pchunk *k,
                     const struct phdr *h, const uint8_t *in, size_t body, size_t pos, int64_t row,
                     int64_t total, struct pvals *v, uint32_t **idx)
{
    if (h->type != PAGE_DATA && h->type != PAGE_DATA_V2) return bad(r, pos, "unknown page type");
    if (h->num_values > total - row)
        return bad(r, pos, "page holds more values than the row group");
    int w = slot_width(c->ft);
    struct pparts pp;
    int rc = page_parts(r, c, k, h, in, body, pos, &pp);
    int64_t n = h->num_values, nn = n;
    if (rc == FERRY_OK) rc = grow(r, v, row + n, w, c->nested);
    if (rc) return rc;
    uint8_t *nul = v->isnull + row;
    memset(nul, 0, (size_t)n);
    if (pp.rp && (rc = levels(r, pp.rp, pp.re, c->max_rep, n, v->rep + row, NULL, NULL, body)))
        return rc;
    if (pp.dp && (rc = levels(r, pp.dp, pp.de, c->max_def, n, c->nested ? v->def + row : NULL, nul,
                              &nn, body)))
        return rc;
    if (c->nested && !pp.dp) memset(v->def + row, 0, (size_t)n);
    if (c->nested && !pp.rp) memset(v->rep + row, 0, (size_t)n);
    /* decode nn values into the tail of the page's slots, then spread over non-nulls */
    uint8_t *slots = v->slot + row * w;
    uint8_t *dst = slots + (n - nn) * w;
    rc = decode_values(r, c, h, pp.vp, pp.ve, nn, dst, v, idx, body, pos);
    if (rc == FERRY_OK && nn < n) spread(slots, dst, nul, n, w);
    return rc;
}

/* A nested column's entries must make up the group's rows: the first starts a row
 * (repetition level 0) and nrows of them do. */
static int count_rows(struct ferry_parquet_reader *r, const struct pcol *c, const struct pvals *v,
                      int64_t nrows, size_t pos)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < v->n; i++)
        rows += v->rep[i] == 0;
    if (rows != nrows || (v->n > 0 && v->rep[0] != 0)) {
        char why[160];
        snprintf(why, sizeof why, "column %.80s holds %" PRId64 " rows, its row group %" PRId64,
                 c->name, rows, nrows);
        return bad(r, pos, why);
    }
    return FERRY_OK;
}

static int read_chunk(struct ferry_parquet_reader *r, int ci, const struct pchunk *k, int64_t nrows,
                      struct pvals *v)
{
    const struct pcol *c = &r->cols[ci];
    /* some writers put 0 in dictionary_page_offset for "none": only an offset past the
     * magic and before the first data page counts */
    int64_t start = k->dict_off >= 4 && k->dict_off < k->data_off ? k->dict_off : k->data_off;
    if (start < 4 || k->size < 0 || (uint64_t)start > r->n - 8 ||
        (uint64_t)k->size > r->n - 8 - (uint64_t)start)
        return bad(r, (size_t)(start < 0 ? 0 : start), "column chunk outside the file");
    /* a nested column holds one entry per value or empty/null level, at least one a row */
    int64_t total = c->nested ? k->num_values : nrows;
    if (c->nested ? k->num_values < nrows : k->num_values != nrows)
        return bad(r, (size_t)start, "column chunk value count differs from the row group");
    size_t pos = (size_t)start, end = (size_t)(start + k->size);
    const uint8_t *cp = range(r, pos, (size_t)k->size, &r->chunk); /* cp[0] is byte `start` */
    if (cp == NULL) return r->err->code;
    int64_t row = 0;
    v->dict_n = -1;
    v->n = 0;
    uint32_t *idx = NULL;
    int rc = FERRY_OK;
    while (rc == FERRY_OK && row < total) {
        if (pos >= end) {
            rc = bad(r, pos, "column chunk ends before all its values");
            break;
        }
        struct phdr h;
        size_t body = 0;
        if ((rc = page_header(r, cp + (pos - (size_t)start), pos, end, &h, &body))) break;
        const uint8_t *in = cp + (body - (size_t)start);
        if (h.type == PAGE_DICT) {
            rc = dict_page(r, c, k, &h, in, body, pos, row, v);
        } else if (h.type != PAGE_INDEX) {
            rc = data_page(r, c, k, &h, in, body, pos, row, total, v, &idx);
            row += h.num_values;
        }
        pos = body + (size_t)h.csize;
    }
    ferry_free(idx);
    v->n = row;
    if (rc == FERRY_OK && c->nested) rc = count_rows(r, c, v, nrows, (size_t)start);
    return rc;
}

/* ---- nested fields as JSON ------------------------------------------------------------
 *
 * Record assembly from the levels (the Dremel scheme the spec describes): each column of a
 * nested field has a cursor at its next entry; a node's presence is read from the
 * definition level of its first column, a repeated node's next instance from that column's
 * repetition level. A node that is null or an empty list holds exactly one entry in each
 * of its columns; a present one consumes all entries of its instance. Every cursor is
 * checked against its column's entry count, so inconsistent levels are an error, never a
 * read outside the arrays. */

static int lvl_bad(struct ferry_parquet_reader *r, int leaf)
{
    return ferry_error_set(r->err, FERRY_EINVAL, "parquet",
                           "column %s: repetition and definition levels do not match the schema",
                           r->cols[leaf].name);
}

/* The current entry of the node's first column, or -1 past its end. */
static int64_t at(struct ferry_parquet_reader *r, const struct pnode *nd)
{
    int l = nd->first_leaf;
    if (nd->nleaves < 1 || r->cur[l] >= r->vals[l].n) return -1;
    return r->cur[l];
}

static int skip_node(struct ferry_parquet_reader *r, const struct pnode *nd)
{
    for (int l = nd->first_leaf; l < nd->first_leaf + nd->nleaves; l++) {
        if (r->cur[l] >= r->vals[l].n) return lvl_bad(r, l);
        r->cur[l]++;
    }
    return FERRY_OK;
}

/* A leaf's value as JSON: numbers, true/false, strings; dates, times and timestamps as
 * their ISO text, binary as "\\x" hex, NaN and infinities as strings. */
static int json_leaf(struct ferry_parquet_reader *r, int leaf)
{
    const struct pcol *c = &r->cols[leaf];
    const struct pvals *v = &r->vals[leaf];
    int64_t i = r->cur[leaf]++;
    struct ferry_buf *b = &r->json;
    const uint8_t *s = v->slot + i * slot_width(c->ft);
    char t[64];
    int64_t x;
    uint64_t u;
    size_t len;
    double d;
    struct ferry_decimal128 dec;
    int n = -1;
    memcpy(&x, s, 8);
    switch (c->ft) {
    case FERRY_TYPE_BOOL:
        return ferry_buf_printf(b, "%s", x ? "true" : "false");
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        memcpy(&d, s, 8);
        n = ferry__files_float_text(d, c->ft == FERRY_TYPE_FLOAT32, t, sizeof t);
        if (isnan(d) || isinf(d)) return ferry_buf_json_string(b, t, (size_t)n);
        return ferry_buf_append(b, t, (size_t)n);
    case FERRY_TYPE_DECIMAL128:
        memcpy(&dec, s, 16);
        n = ferry_decimal128_to_text(dec, c->scale, t, sizeof t);
        return n < 0 ? lvl_bad(r, leaf) : ferry_buf_append(b, t, (size_t)n);
    case FERRY_TYPE_UUID:
        n = ferry_uuid_to_text(s, t, sizeof t);
        break;
    case FERRY_TYPE_DATE32:
        n = ferry_date32_to_text((int32_t)x, t, sizeof t);
        break;
    case FERRY_TYPE_TIME64_US:
        n = ferry_time64_to_text(x, t, sizeof t);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        n = ferry_timestamp_to_text(x, c->ft == FERRY_TYPE_TIMESTAMPTZ_US, t, sizeof t);
        break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON: {
        memcpy(&u, s, 8);
        const char *q = slot_bytes(v, u, &len);
        return ferry_buf_json_string(b, q, len);
    }
    case FERRY_TYPE_BINARY: {
        memcpy(&u, s, 8);
        const uint8_t *p = (const uint8_t *)slot_bytes(v, u, &len);
        ferry_buf_append(b, "\"\\\\x", 4);
        for (size_t k = 0; k < len; k++)
            ferry_buf_printf(b, "%02x", p[k]);
        return ferry_buf_append(b, "\"", 1);
    }
    default:
        return ferry_buf_printf(b, "%" PRId64, x);
    }
    if (n < 0)
        return ferry_error_set(r->err, FERRY_EINVAL, "parquet",
                               "column %s: a value out of its type's range", c->name);
    return ferry_buf_json_string(b, t, (size_t)n);
}

static int json_value(struct ferry_parquet_reader *r, int i);
static int json_child(struct ferry_parquet_reader *r, int i);

/* A REQUIRED or OPTIONAL node of a present parent: null, or its value. */
static int json_field(struct ferry_parquet_reader *r, int i)
{
    const struct pnode *nd = &r->nodes[i];
    int64_t e = at(r, nd);
    if (e < 0) return lvl_bad(r, nd->first_leaf);
    if (nd->repetition == 1 && r->vals[nd->first_leaf].def[e] < nd->def) {
        ferry_buf_append(&r->json, "null", 4);
        return skip_node(r, nd);
    }
    return json_value(r, i);
}

/* A map entry's key as a JSON object key: a string as it is, anything else as its text. */
static int json_key(struct ferry_parquet_reader *r, int i)
{
    size_t from = r->json.len;
    int rc = json_field(r, i);
    if (rc || r->json.len == from || r->json.data[from] == '"') return rc;
    ferry_buf_reset(&r->key);
    ferry_buf_append(&r->key, r->json.data + from, r->json.len - from);
    if (ferry_buf_failed(&r->key)) return oom(r);
    r->json.len = from;
    return ferry_buf_json_string(&r->json, r->key.data, r->key.len);
}

/* The instances of REPEATED node i, as an array of `mode` elements (ELEM_SELF: the node's
 * own value; ELEM_CHILD: its only child's) or an object of map entries (ELEM_MAP). */
static int json_repeated(struct ferry_parquet_reader *r, int i, int mode)
{
    const struct pnode *nd = &r->nodes[i];
    int64_t e = at(r, nd);
    if (e < 0) return lvl_bad(r, nd->first_leaf);
    const struct pvals *v = &r->vals[nd->first_leaf];
    bool map = mode == ELEM_MAP;
    ferry_buf_append(&r->json, map ? "{" : "[", 1);
    if (v->def[e] < nd->def) { /* empty */
        ferry_buf_append(&r->json, map ? "}" : "]", 1);
        return skip_node(r, nd);
    }
    int rc = FERRY_OK;
    for (bool first = true; rc == FERRY_OK; first = false) {
        if (!first) ferry_buf_append(&r->json, ",", 1);
        if (mode == ELEM_SELF) {
            rc = json_value(r, i);
        } else if (mode == ELEM_CHILD) {
            rc = json_child(r, i + 1);
        } else {
            int k = i + 1, val = r->nodes[k].end;
            rc = json_key(r, k);
            ferry_buf_append(&r->json, ":", 1);
            if (rc == FERRY_OK && val < nd->end)
                rc = json_child(r, val);
            else if (rc == FERRY_OK)
                ferry_buf_append(&r->json, "null", 4);
        }
        e = at(r, nd);
        if (e < 0 || v->rep[e] != nd->rep) break;
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(&r->json, map ? "}" : "]", 1);
    return rc;
}

static int json_child(struct ferry_parquet_reader *r, int i)
{
    if (r->nodes[i].repetition == 2) return json_repeated(r, i, ELEM_SELF);
    return json_field(r, i);
}

/* Node i, present: a leaf's value, a list, a map or a struct's object. */
static int json_value(struct ferry_parquet_reader *r, int i)
{
    const struct pnode *nd = &r->nodes[i];
    if (nd->kind == NK_LEAF) {
        int64_t e = at(r, nd);
        if (e < 0 || r->vals[nd->first_leaf].isnull[e]) return lvl_bad(r, nd->first_leaf);
        return json_leaf(r, nd->first_leaf);
    }
    if (nd->kind == NK_LIST) return json_repeated(r, i + 1, nd->elem);
    if (nd->kind == NK_MAP) return json_repeated(r, i + 1, ELEM_MAP);
    int rc = ferry_buf_append(&r->json, "{", 1);
    for (int k = i + 1; k < nd->end && rc == FERRY_OK; k = r->nodes[k].end) {
        if (k > i + 1) ferry_buf_append(&r->json, ",", 1);
        ferry_buf_json_string(&r->json, r->nodes[k].name, strlen(r->nodes[k].name));
        ferry_buf_append(&r->json, ":", 1);
        rc = json_child(r, k);
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(&r->json, "}", 1);
    return rc;
}

/* Whether every column of top-level node i sits at a row's start (or at its end). */
static int row_boundary(struct ferry_parquet_reader *r, const struct pnode *nd, bool end_ok)
{
    for (int l = nd->first_leaf; l < nd->first_leaf + nd->nleaves; l++) {
        const struct pvals *v = &r->vals[l];
        int64_t e = r->cur[l];
        if (e > v->n || (e == v->n && !end_ok) || (e < v->n && v->rep[e] != 0))
            return lvl_bad(r, l);
    }
    return FERRY_OK;
}

/* Writes one row's value of nested top-level node i (JSON text, or null); skip: only
 * moves the cursors past the row. */
static int json_row(struct ferry_parquet_reader *r, int i, bool skip, struct ferry_row_writer *rw)
{
    const struct pnode *nd = &r->nodes[i];
    int rc = row_boundary(r, nd, false);
    if (rc) return rc;
    if (skip) {
        for (int l = nd->first_leaf; l < nd->first_leaf + nd->nleaves; l++)
            do
                r->cur[l]++;
            while (r->cur[l] < r->vals[l].n && r->vals[l].rep[r->cur[l]] != 0);
        return FERRY_OK;
    }
    ferry_buf_reset(&r->json);
    bool null = nd->repetition == 1 && r->vals[nd->first_leaf].def[at(r, nd)] < nd->def;
    if (null)
        rc = skip_node(r, nd);
    else if (nd->repetition == 2)
        rc = json_repeated(r, i, ELEM_SELF);
    else
        rc = json_value(r, i);
    if (rc == FERRY_OK) rc = row_boundary(r, nd, true);
    if (rc == FERRY_OK && ferry_buf_failed(&r->json)) rc = oom(r);
    if (rc) return rc;
    if (null)
        ferry_rw_null(rw);
    else
        ferry_rw_text(rw, r->json.data, r->json.len);
    return FERRY_OK;
}

/* ---- rows ------------------------------------------------------------------------------- */

/* One row's value of flat column c into rw. */
static void flat_value(const struct pcol *c, const struct pvals *v, int64_t row,
                       struct ferry_row_writer *rw)
{
    const uint8_t *s = v->slot + row * slot_width(c->ft);
    if (v->isnull[row]) {
        ferry_rw_null(rw);
        return;
    }
    int64_t x;
    uint64_t u;
    double d;
    struct ferry_decimal128 dec;
    switch (c->ft) {
    case FERRY_TYPE_BOOL:
        memcpy(&x, s, 8);
        ferry_rw_bool(rw, x != 0);
        break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        memcpy(&d, s, 8);
        ferry_rw_float(rw, d);
        break;
    case FERRY_TYPE_DECIMAL128:
        memcpy(&dec, s, 16);
        ferry_rw_dec128(rw, dec);
        break;
    case FERRY_TYPE_UUID:
        ferry_rw_fixed(rw, s, 16);
        break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT: {
        memcpy(&u, s, 8);
        size_t len;
        const char *q = slot_bytes(v, u, &len);
        ferry_rw_text(rw, q, len);
        break;
    }
    default:
        memcpy(&x, s, 8);
        ferry_rw_int(rw, x);
        break;
    }
}

/* Without a floor every row; else whether the row's floor field is present and above it. */
static bool above_floor(const struct ferry_parquet_reader *r, int64_t row)
{
    if (r->floor_sel < 0) return true;
    int leaf = r->nodes[r->tops[r->sel[r->floor_sel]]].first_leaf;
    const struct pvals *v = &r->vals[leaf];
    int64_t x;
    if (v->isnull[row]) return false;
    memcpy(&x, v->slot + row * 8, 8);
    return x > r->floor;
}

static int alloc_vals(struct ferry_parquet_reader *r)
{
    if (r->vals != NULL) return FERRY_OK;
    r->vals = ferry_calloc((size_t)r->ncols, sizeof *r->vals);
    if (r->vals == NULL) return oom(r);
    for (int i = 0; i < r->ncols; i++) {
        ferry_buf_init(&r->vals[i].data, 0);
        ferry_buf_init(&r->vals[i].dict, 0);
        ferry_buf_init(&r->vals[i].dict_data, 0);
    }
    return FERRY_OK;
}

/* Decodes the columns of the selected fields of group g, then writes its rows from `skip`
 * on. With offsets, each row's position is its 1-based index in the group. */
#define GROUP_FETCH_MAX ((int64_t)64 << 20)

/* Ranged: the byte span of group g's selected column chunks, fetched in one request when it
 * is at most GROUP_FETCH_MAX and at most twice what those chunks hold (unselected columns
 * between them are fetched too), so a group costs one request, not one per column (range()
 * serves the chunks from it). Any doubt (a chunk outside the file): false, and read_chunk
 * reads and reports each chunk alone. */
static bool group_span(const struct ferry_parquet_reader *r, const struct prg *pg, int64_t *off,
                       int64_t *len)
{
    int64_t lo = INT64_MAX, hi = 0, sum = 0;
    for (int j = 0; j < r->nsel; j++) {
        const struct pnode *nd = &r->nodes[r->tops[r->sel[j]]];
        for (int i = nd->first_leaf; i < nd->first_leaf + nd->nleaves; i++) {
            const struct pchunk *k = &pg->cols[i];
            int64_t start = k->dict_off >= 4 && k->dict_off < k->data_off ? k->dict_off
                                                                           : k->data_off;
            if (start < 4 || k->size < 0 || (uint64_t)start > r->n - 8 ||
                (uint64_t)k->size > r->n - 8 - (uint64_t)start)
                return false;
            lo = start < lo ? start : lo;
            hi = start + k->size > hi ? start + k->size : hi;
            sum += k->size;
        }
    }
    if (lo >= hi || hi - lo > GROUP_FETCH_MAX || hi - lo > 2 * sum) return false;
    *off = lo;
    *len = hi - lo;
    return true;
}

static int fetch_group(struct ferry_parquet_reader *r, const struct prg *pg)
{
    r->grp_valid = false;
    int64_t lo, len;
    if (r->p != NULL || !group_span(r, pg, &lo, &len)) return FERRY_OK;
    size_t n = (size_t)len;
    ferry_buf_reset(&r->grp);
    if (ferry_buf_reserve(&r->grp, n + 1)) return oom(r);
    if (r->read_at(r->read_ctx, (uint64_t)lo, n, r->grp.data, r->err) != FERRY_OK)
        return r->err->code;
    r->grp.len = n;
    r->grp_off = (size_t)lo;
    r->grp_valid = true;
    return FERRY_OK;
}

bool ferry__parquet_reader_group_span(const struct ferry_parquet_reader *r, int g, uint64_t *off,
                                      size_t *n)
{
    int64_t lo, len;
    if (r == NULL || r->p != NULL || g < 0 || g >= r->nrg || !group_span(r, &r->rgs[g], &lo, &len))
        return false;
    *off = (uint64_t)lo;
    *n = (size_t)len;
    return true;
}

/* Writes rows [from, to) of group g one at a time; a flat column's values of row `row` sit
 * at slot row - base (read_windows), a nested field's at its cursors. */
static int write_each(struct ferry_parquet_reader *r, int g, int64_t from, int64_t to,
                      int64_t base, int64_t skip, bool offsets, struct ferry_row_writer *rw,
                      struct ferry_error *err)
{
    int rc = FERRY_OK;
    struct pvals *vals = r->vals;
    for (int64_t row = from; row < to && rc == FERRY_OK; row++) {
        bool write = row >= skip && above_floor(r, row - base);
        if (write) ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int j = 0; j < r->nsel && rc == FERRY_OK; j++) {
            int top = r->tops[r->sel[j]];
            const struct pnode *nd = &r->nodes[top];
            if (top_nested(nd))
                rc = json_row(r, top, !write, rw);
            else if (write)
                flat_value(&r->cols[nd->first_leaf], &vals[nd->first_leaf], row - base, rw);
        }
        if (rc != FERRY_OK) {
            ferry_error_prefix(err, "parquet: %s: row group %d row %" PRId64, r->name, g, row);
            break;
        }
        if (!write) continue;
        if (offsets) ferry_rw_set_offset(rw, r->offset_base + row + 1);
        rc = ferry_rw_end(rw, err);
        /* a value the row writer refuses (an INT32 out of an INTEGER(8)'s range) */
        if (rc == FERRY_EINVAL)
            ferry_error_prefix(err, "parquet: %s: row group %d row %" PRId64, r->name, g, row);
    }
    return rc;
}

/* ---- flat rows column by column --------------------------------------------------------
 *
 * Flat columns go to the builder a column at a time (builder.h, ferry__rw_bulk_*): BULK_ROWS
 * rows per call instead of a function call per value, var-width values copied once, from
 * the page's bytes or the dictionary straight into the batch. A chunk the builder refuses
 * (a value that does not fit its column) is written again row by row, whose error names
 * the column and the row. */
#define BULK_ROWS ((int64_t)4096)

static bool bulk_column(const struct pcol *c, const struct pvals *v, int64_t at, int64_t n,
                        struct ferry_row_writer *rw)
{
    const uint8_t *s = v->slot + at * slot_width(c->ft);
    const uint8_t *nul = v->isnull + at;
    switch (c->ft) {
    case FERRY_TYPE_BOOL:
        return ferry__rw_bulk_bool(rw, (const int64_t *)(const void *)s, nul, n);
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        return ferry__rw_bulk_float(rw, (const double *)(const void *)s, nul, n);
    case FERRY_TYPE_DECIMAL128:
    case FERRY_TYPE_UUID:
        return ferry__rw_bulk_fixed16(rw, s, nul, n);
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT: {
        const char *const bases[2] = {v->data.data, v->dict_data.data};
        return ferry__rw_bulk_text(rw, (const uint64_t *)(const void *)s, bases, nul, n);
    }
    default:
        return ferry__rw_bulk_int(rw, (const int64_t *)(const void *)s, nul, n);
    }
}

/* The var-width bytes of each of rows [at, at + n) of the selected columns into r->rowvar;
 * false when no selected column is var-width. */
static bool row_var_bytes(struct ferry_parquet_reader *r, int64_t at, int64_t n)
{
    bool any = false;
    for (int j = 0; j < r->nsel; j++) {
        int i = r->nodes[r->tops[r->sel[j]]].first_leaf;
        if (!ferry_type_is_varwidth(r->cols[i].ft)) continue;
        if (!any) memset(r->rowvar, 0, (size_t)n * sizeof *r->rowvar);
        any = true;
        const uint8_t *s = r->vals[i].slot + at * 8;
        for (int64_t k = 0; k < n; k++) {
            uint64_t u;
            memcpy(&u, s + k * 8, 8);
            r->rowvar[k] += (int64_t)((u & ~SLOT_DICT) >> 32);
        }
    }
    return any;
}

/* write_each's work for flat columns without a floor, BULK_ROWS rows at a time. */
static int write_bulk(struct ferry_parquet_reader *r, int g, int64_t from, int64_t to,
                      int64_t base, bool offsets, struct ferry_row_writer *rw,
                      struct ferry_error *err)
{
    if (r->rowvar == NULL && (r->rowvar = ferry_malloc(BULK_ROWS * sizeof *r->rowvar)) == NULL)
        return oom(r);
    int rc = FERRY_OK;
    for (int64_t row = from; row < to && rc == FERRY_OK;) {
        int64_t want = to - row < BULK_ROWS ? to - row : BULK_ROWS;
        bool var = row_var_bytes(r, row - base, want);
        int64_t n = ferry__rw_bulk_begin(rw, want, var ? r->rowvar : NULL);
        bool ok = n > 0;
        for (int j = 0; j < r->nsel && ok; j++) {
            int i = r->nodes[r->tops[r->sel[j]]].first_leaf;
            ok = bulk_column(&r->cols[i], &r->vals[i], row - base, n, rw);
        }
        if (!ok) {
            if (n > 0) ferry__rw_bulk_cancel(rw, n);
            n = n > 0 ? n : want;
            rc = write_each(r, g, row, row + n, base, 0, offsets, rw, err);
        } else {
            if (offsets) ferry_rw_set_offset(rw, r->offset_base + row + n);
            rc = ferry__rw_bulk_end(rw, n, err);
        }
        row += n;
    }
    return rc;
}

/* Rows [from, to) of group g from row `skip` on (see write_each). */
static int write_rows(struct ferry_parquet_reader *r, int g, int64_t from, int64_t to,
                      int64_t base, int64_t skip, bool offsets, struct ferry_row_writer *rw,
                      struct ferry_error *err)
{
    bool flat = r->floor_sel < 0;
    for (int j = 0; j < r->nsel && flat; j++)
        flat = !top_nested(&r->nodes[r->tops[r->sel[j]]]);
    if (!flat) return write_each(r, g, from, to, base, skip, offsets, rw, err);
    from = from > skip ? from : skip;
    return from < to ? write_bulk(r, g, from, to, base, offsets, rw, err) : FERRY_OK;
}

/* ---- flat row groups in windows ----------------------------------------------------------
 *
 * When every selected field is flat and the group's chunks are in memory (the whole file,
 * or fetch_group's span), the columns are decoded page by page, WINDOW_ROWS rows at a time:
 * memory is a window plus one page per column, not the group (an Iceberg data file of one
 * 2M-row group decoded whole took 200+ MiB). */
#define WINDOW_ROWS ((int64_t)65536)

static bool windowed(const struct ferry_parquet_reader *r)
{
    if (r->p == NULL && !r->grp_valid) return false;
    for (int j = 0; j < r->nsel; j++)
        if (top_nested(&r->nodes[r->tops[r->sel[j]]])) return false;
    return true;
}

/* Column ci's chunk k (of a group of nrows rows) ready to be decoded from its first page. */
static int window_open(struct ferry_parquet_reader *r, int ci, const struct pchunk *k,
                       int64_t nrows, struct pvals *v)
{
    int64_t start = k->dict_off >= 4 && k->dict_off < k->data_off ? k->dict_off : k->data_off;
    if (start < 4 || k->size < 0 || (uint64_t)start > r->n - 8 ||
        (uint64_t)k->size > r->n - 8 - (uint64_t)start)
        return bad(r, (size_t)(start < 0 ? 0 : start), "column chunk outside the file");
    if (k->num_values != nrows)
        return bad(r, (size_t)start, "column chunk value count differs from the row group");
    v->s_start = v->s_pos = (size_t)start;
    v->s_end = (size_t)(start + k->size);
    v->cp = range(r, v->s_pos, (size_t)k->size, &r->chunk);
    if (v->cp == NULL) return r->err->code;
    /* every window's column reads its own chunk at once: never the shared `chunk` buffer */
    if (v->cp == (const uint8_t *)r->chunk.data && k->size > 0)
        return bad(r, (size_t)start, "column chunk outside its row group's span");
    v->s_row = 0;
    v->dict_n = -1;
    v->n = 0;
    ferry_buf_reset(&v->data);
    return FERRY_OK;
}

/* Decodes pages of column ci until rows [base, target) are in its slots (from slot 0). */
static int window_fill(struct ferry_parquet_reader *r, int ci, const struct pchunk *k,
                       int64_t nrows, int64_t base, int64_t target, struct pvals *v)
{
    const struct pcol *c = &r->cols[ci];
    int rc = FERRY_OK;
    while (rc == FERRY_OK && v->s_row < target) {
        if (v->s_pos >= v->s_end) return bad(r, v->s_pos, "column chunk ends before all its values");
        struct phdr h;
        size_t body = 0;
        rc = page_header(r, v->cp + (v->s_pos - v->s_start), v->s_pos, v->s_end, &h, &body);
        if (rc) break;
        const uint8_t *in = v->cp + (body - v->s_start);
        if (h.type == PAGE_DICT) {
            rc = dict_page(r, c, k, &h, in, body, v->s_pos, v->s_row, v);
        } else if (h.type != PAGE_INDEX) {
            rc = data_page(r, c, k, &h, in, body, v->s_pos, v->s_row - base, nrows - base, v,
                           &r->idx);
            v->s_row += h.num_values;
        }
        v->s_pos = body + (size_t)h.csize;
    }
    v->n = v->s_row - base;
    return rc;
}

/* Moves the decoded rows past the window (slots from `used` on) to slot 0, and their
 * var-width bytes to a fresh data buffer. */
static int window_shift(struct ferry_parquet_reader *r, int ci, struct pvals *v, int64_t used)
{
    const struct pcol *c = &r->cols[ci];
    int w = slot_width(c->ft);
    int64_t k = v->n - used;
    memmove(v->slot, v->slot + used * w, (size_t)(k * w));
    memmove(v->isnull, v->isnull + used, (size_t)k);
    v->n = k;
    if (!ferry_type_is_varwidth(c->ft)) {
        ferry_buf_reset(&v->data);
        return FERRY_OK;
    }
    ferry_buf_reset(&r->tmp);
    for (int64_t i = 0; i < k; i++) {
        if (v->isnull[i]) continue;
        uint64_t pk;
        memcpy(&pk, v->slot + i * w, 8);
        if (pk & SLOT_DICT) continue; /* the dictionary stays for the whole chunk */
        uint64_t no = r->tmp.len;
        if (ferry_buf_append(&r->tmp, v->data.data + (pk & UINT32_MAX), (size_t)(pk >> 32)))
            return oom(r);
        pk = (pk >> 32) << 32 | no;
        memcpy(v->slot + i * w, &pk, 8);
    }
    struct ferry_buf t = v->data;
    v->data = r->tmp;
    r->tmp = t;
    return FERRY_OK;
}

static int read_windows(struct ferry_parquet_reader *r, const struct prg *pg, int g,
                        int64_t skip, bool offsets, struct ferry_row_writer *rw,
                        struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int j = 0; j < r->nsel && rc == FERRY_OK; j++) {
        int i = r->nodes[r->tops[r->sel[j]]].first_leaf;
        rc = window_open(r, i, &pg->cols[i], pg->num_rows, &r->vals[i]);
    }
    for (int64_t base = 0; base < pg->num_rows && rc == FERRY_OK;) {
        int64_t to = pg->num_rows - base < WINDOW_ROWS ? pg->num_rows : base + WINDOW_ROWS;
        for (int j = 0; j < r->nsel && rc == FERRY_OK; j++) {
            int i = r->nodes[r->tops[r->sel[j]]].first_leaf;
            rc = window_fill(r, i, &pg->cols[i], pg->num_rows, base, to, &r->vals[i]);
        }
        if (rc == FERRY_OK) rc = write_rows(r, g, base, to, base, skip, offsets, rw, err);
        for (int j = 0; j < r->nsel && rc == FERRY_OK; j++) {
            int i = r->nodes[r->tops[r->sel[j]]].first_leaf;
            rc = window_shift(r, i, &r->vals[i], to - base);
        }
        base = to;
    }
    return rc;
}

static int read_group(struct ferry_parquet_reader *r, int g, int64_t skip, bool offsets,
                      struct ferry_row_writer *rw, struct ferry_error *err)
{
    r->err = err;
    const struct ferry_schema *ws = ferry_rw_schema(rw);
    if (ws == NULL || ws->n_fields != r->nsel)
        return ferry_error_set(err, FERRY_EINVAL, "parquet",
                               "parquet: %s: the row writer's schema does not match the file",
                               r->name);
    if (g < 0 || g >= r->nrg)
        return ferry_error_set(err, FERRY_EINVAL, "parquet", "parquet: %s: no row group %d",
                               r->name, g);
    int rc = alloc_vals(r);
    const struct prg *pg = &r->rgs[g];
    struct pvals *vals = r->vals;
    if (rc == FERRY_OK) rc = fetch_group(r, pg);
    skip = skip < 0 ? 0 : skip;
    if (rc == FERRY_OK && windowed(r)) {
        rc = read_windows(r, pg, g, skip, offsets, rw, err);
        r->grp_valid = false;
        return rc;
    }
    for (int j = 0; j < r->nsel && rc == FERRY_OK; j++) {
        const struct pnode *nd = &r->nodes[r->tops[r->sel[j]]];
        for (int i = nd->first_leaf; i < nd->first_leaf + nd->nleaves && rc == FERRY_OK; i++) {
            ferry_buf_reset(&vals[i].data);
            r->cur[i] = 0;
            rc = read_chunk(r, i, &pg->cols[i], pg->num_rows, &vals[i]);
        }
    }
    r->grp_valid = false; /* decoded: the chunks are in vals now */
    if (rc == FERRY_OK) rc = write_rows(r, g, 0, pg->num_rows, 0, skip, offsets, rw, err);
    return rc;
}

int ferry__parquet_reader_read(struct ferry_parquet_reader *r, struct ferry_row_writer *rw,
                               struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int g = 0; g < r->nrg && rc == FERRY_OK; g++)
        rc = read_group(r, g, 0, false, rw, err);
    return rc;
}

void ferry__parquet_reader_set_offset_base(struct ferry_parquet_reader *r, int64_t base)
{
    r->offset_base = base;
}

int ferry__parquet_reader_read_group(struct ferry_parquet_reader *r, int g, int64_t skip,
                                     struct ferry_row_writer *rw, struct ferry_error *err)
{
    return read_group(r, g, skip, true, rw, err);
}

int ferry__parquet_reader_find_id(const struct ferry_parquet_reader *r, int32_t id, bool *any)
{
    int found = -1;
    *any = false;
    for (int i = 0; r && i < r->ntops; i++) {
        int32_t fid = r->nodes[r->tops[i]].field_id;
        *any = *any || fid >= 0;
        if (fid >= 0 && fid == id && found < 0) found = i;
    }
    return found;
}

/* A flat top-level field whose values are ordered as signed integers in ferry and in the
 * file's statistics (signed INTEGER/DATE/TIMESTAMP on INT32/INT64), or NULL. */
static const struct pcol *ordered_int(const struct ferry_parquet_reader *r, const char *field,
                                      int *top)
{
    *top = ferry_schema_find(r->schema, field);
    if (*top < 0) return NULL;
    const struct pnode *nd = &r->nodes[r->tops[*top]];
    if (top_nested(nd)) return NULL;
    const struct pcol *c = &r->cols[nd->first_leaf];
    bool unsigned_int = (c->lt == 10 && !c->lt_signed) ||
                        (c->lt == 0 && c->converted >= CT_UINT_8 && c->converted <= CT_UINT_64);
    bool kind = c->ft == FERRY_TYPE_INT8 || c->ft == FERRY_TYPE_INT16 ||
                c->ft == FERRY_TYPE_INT32 || c->ft == FERRY_TYPE_INT64 ||
                c->ft == FERRY_TYPE_DATE32 || c->ft == FERRY_TYPE_TIMESTAMP_US ||
                c->ft == FERRY_TYPE_TIMESTAMPTZ_US;
    if (!kind || unsigned_int || (c->ptype != PT_INT32 && c->ptype != PT_INT64)) return NULL;
    return c;
}

/* One statistics value (max or min) of column c as ferry's int64 value. */
static bool stat_value(struct ferry_parquet_reader *r, const struct pcol *c, const uint8_t *b,
                       int len, int64_t *out)
{
    if (len != (c->ptype == PT_INT32 ? 4 : 8)) return false;
    uint8_t slot[16];
    struct ferry_error e = {0};
    struct ferry_error *keep = r->err;
    r->err = &e; /* a value plain() refuses (a nanosecond remainder) is just not usable */
    int rc = plain(r, c, b, b + len, 1, slot, NULL, 0);
    r->err = keep;
    if (rc != FERRY_OK) return false;
    memcpy(out, slot, 8);
    return true;
}

bool ferry__parquet_reader_group_max(struct ferry_parquet_reader *r, int g, const char *field,
                                     int64_t *max)
{
    int top;
    const struct pcol *c = r && g >= 0 && g < r->nrg ? ordered_int(r, field, &top) : NULL;
    if (c == NULL) return false;
    const struct pchunk *k = &r->rgs[g].cols[c - r->cols];
    return stat_value(r, c, k->max, k->max_len, max);
}

bool ferry__parquet_reader_group_min(struct ferry_parquet_reader *r, int g, const char *field,
                                     int64_t *min)
{
    int top;
    const struct pcol *c = r && g >= 0 && g < r->nrg ? ordered_int(r, field, &top) : NULL;
    if (c == NULL) return false;
    const struct pchunk *k = &r->rgs[g].cols[c - r->cols];
    return stat_value(r, c, k->min, k->min_len, min);
}

int ferry__parquet_reader_set_floor(struct ferry_parquet_reader *r, const char *field,
                                    int64_t floor, struct ferry_error *err)
{
    int top = ferry_schema_find(r->schema, field);
    const struct pcol *c = NULL;
    if (top >= 0 && !top_nested(&r->nodes[r->tops[top]])) {
        c = &r->cols[r->nodes[r->tops[top]].first_leaf];
        enum ferry_type t = c->ft;
        if (t != FERRY_TYPE_INT8 && t != FERRY_TYPE_INT16 && t != FERRY_TYPE_INT32 &&
            t != FERRY_TYPE_INT64 && t != FERRY_TYPE_DATE32 && t != FERRY_TYPE_TIMESTAMP_US &&
            t != FERRY_TYPE_TIMESTAMPTZ_US)
            c = NULL;
    }
    int j = 0;
    while (c && j < r->nsel && r->sel[j] != top)
        j++;
    if (c == NULL || j == r->nsel)
        return ferry_error_set(err, FERRY_EINVAL, "parquet",
                               "parquet: %s: column \"%s\" is not a selected integer, date or "
                               "timestamp column (a cursor)",
                               r->name, field);
    r->floor_sel = j;
    r->floor = floor;
    return FERRY_OK;
}

int ferry__parquet_reader_num_groups(const struct ferry_parquet_reader *r)
{
    return r ? r->nrg : 0;
}

int64_t ferry__parquet_reader_group_rows(const struct ferry_parquet_reader *r, int g)
{
    return r && g >= 0 && g < r->nrg ? r->rgs[g].num_rows : 0;
}

int ferry__parquet_reader_select(struct ferry_parquet_reader *r, const char *const *names, int n,
                                 struct ferry_error *err)
{
    if (n > r->ntops)
        return ferry_error_set(err, FERRY_EINVAL, "parquet", "parquet: %s: %d columns selected of %d",
                               r->name, n, r->ntops);
    for (int j = 0; j < n; j++) {
        int f = ferry_schema_find(r->schema, names[j]);
        if (f < 0)
            return ferry_error_set(err, FERRY_ENOTFOUND, "parquet",
                                   "parquet: %s has no column \"%s\"", r->name, names[j]);
        r->sel[j] = f;
    }
    r->nsel = n;
    r->floor_sel = -1;
    return FERRY_OK;
}

/* ---- open / free ------------------------------------------------------------------------ */

static int open_common(struct ferry_parquet_reader *r, const char *name,
                       struct ferry_parquet_reader **out, struct ferry_error *err)
{
    r->err = err;
    ferry_buf_init(&r->page, 0);
    ferry_buf_init(&r->page2, 0);
    ferry_buf_init(&r->lens, 0);
    ferry_buf_init(&r->lens2, 0);
    ferry_buf_init(&r->chunk, 0);
    ferry_buf_init(&r->grp, 0);
    ferry_buf_init(&r->tmp, 0);
    ferry_buf_init(&r->json, 0);
    ferry_buf_init(&r->key, 0);
    if ((r->name = ferry_strdup(name ? name : "(memory)")) == NULL) {
        ferry__parquet_reader_free(r);
        return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    }
    int rc = parse_footer(r);
    if (rc == FERRY_OK && ((r->sel = ferry_calloc((size_t)r->ntops, sizeof *r->sel)) == NULL ||
                           (r->cur = ferry_calloc((size_t)r->ncols, sizeof *r->cur)) == NULL))
        rc = oom(r);
    if (rc != FERRY_OK) {
        ferry__parquet_reader_free(r);
        return rc;
    }
    for (int i = 0; i < r->ntops; i++)
        r->sel[i] = i;
    r->nsel = r->ntops;
    r->floor_sel = -1;
    *out = r;
    return FERRY_OK;
}

int ferry__parquet_reader_open_mem(const uint8_t *p, size_t n, const char *name,
                                   struct ferry_parquet_reader **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_parquet_reader *r = ferry_calloc(1, sizeof *r);
    if (r == NULL) return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    r->fd = -1;
    r->p = p;
    r->n = n;
    return open_common(r, name, out, err);
}

int ferry__parquet_reader_open_ranged(uint64_t size, ferry_parquet_read_at read_at, void *ctx,
                                      const char *name, struct ferry_parquet_reader **out,
                                      struct ferry_error *err)
{
    *out = NULL;
    struct ferry_parquet_reader *r = ferry_calloc(1, sizeof *r);
    if (r == NULL) return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    r->fd = -1;
    r->n = (size_t)size;
    r->read_at = read_at;
    r->read_ctx = ctx;
    return open_common(r, name, out, err);
}

static int file_read_at(void *ctx, uint64_t off, size_t n, void *p, struct ferry_error *err)
{
    struct ferry_parquet_reader *r = ctx;
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(r->fd, (char *)p + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return ferry_error_set(err, FERRY_EIO, "parquet",
                                   "parquet: reading %s at byte %" PRIu64 ": %s", r->name,
                                   off + got, k < 0 ? strerror(errno) : "file shorter than before");
        got += (size_t)k;
    }
    return FERRY_OK;
}

int ferry__parquet_reader_open_file(const char *path, struct ferry_parquet_reader **out,
                                    struct ferry_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ferry_error_set(err, FERRY_EIO, "parquet", "parquet: cannot open %s: %s", path,
                               strerror(e));
    }
    struct ferry_parquet_reader *r = ferry_calloc(1, sizeof *r);
    if (r == NULL) {
        close(fd);
        return ferry_error_set(err, FERRY_ENOMEM, "parquet", "out of memory");
    }
    r->fd = fd;
    r->n = (size_t)st.st_size;
    r->read_at = file_read_at;
    r->read_ctx = r;
    return open_common(r, path, out, err);
}

const struct ferry_schema *ferry__parquet_reader_schema(const struct ferry_parquet_reader *r)
{
    return r ? r->schema : NULL;
}

int64_t ferry__parquet_reader_num_rows(const struct ferry_parquet_reader *r)
{
    return r ? r->num_rows : 0;
}

void ferry__parquet_reader_free(struct ferry_parquet_reader *r)
{
    if (r == NULL) return;
    for (int i = 0; i < r->ncols; i++)
        ferry_free(r->cols[i].name);
    ferry_free(r->cols);
    for (int i = 0; i < r->nnodes; i++)
        ferry_free(r->nodes[i].name);
    ferry_free(r->nodes);
    ferry_free(r->tops);
    ferry_free(r->cur);
    ferry_buf_release(&r->json);
    ferry_buf_release(&r->key);
    for (int i = 0; i < r->nrg; i++)
        ferry_free(r->rgs[i].cols);
    ferry_free(r->rgs);
    ferry_schema_unref(r->schema);
    ferry_buf_release(&r->page);
    ferry_buf_release(&r->page2);
    ferry_buf_release(&r->lens);
    ferry_buf_release(&r->lens2);
    ferry_buf_release(&r->chunk);
    ferry_buf_release(&r->grp);
    ferry_buf_release(&r->tmp);
    ferry_free(r->idx);
    ZSTD_freeDCtx(r->zstd);
    ferry_free(r->rowvar);
    for (int i = 0; r->vals && i < r->ncols; i++) {
        ferry_free(r->vals[i].slot);
        ferry_free(r->vals[i].isnull);
        ferry_free(r->vals[i].def);
        ferry_free(r->vals[i].rep);
        ferry_buf_release(&r->vals[i].data);
        ferry_buf_release(&r->vals[i].dict);
        ferry_buf_release(&r->vals[i].dict_data);
    }
    ferry_free(r->vals);
    ferry_free(r->sel);
    if (r->fd >= 0) close(r->fd);
    ferry_free(r->owned);
    ferry_free(r->name);
    ferry_free(r);
}
