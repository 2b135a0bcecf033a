/* tests/unit/test_digest.c - the batch digest: pinned canonical form, what changes it, and
 * everything that must not (slices, buffer offsets, spare capacity, padding bits, bitmap
 * presence, garbage in null slots).
 *
 * Batches are built by hand here, field by field, so that the test controls exactly how
 * rows sit in memory: rows are identified by an id, and each cell's value and nullness is
 * a function of (id, column), so two batches holding the same ids hold the same rows no
 * matter how they were laid out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "testrows.h"
#include "ferry/batch.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"

/* ---- a deterministic row model ---------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t garbage_state = 12345;
static uint8_t garbage(void)
{
    garbage_state = mix(garbage_state);
    return (uint8_t)garbage_state;
}

static bool cell_null(int64_t id, int col)
{
    return mix((uint64_t)id * 131 + (uint64_t)col) % 5 == 0;
}

static uint64_t cell_bits(int64_t id, int col)
{
    return mix((uint64_t)id * 977 + (uint64_t)col * 7 + 1);
}

static int width_of(enum ferry_type t)
{
    switch (t) {
    case FERRY_TYPE_INT8: return 1;
    case FERRY_TYPE_INT16: return 2;
    case FERRY_TYPE_INT32: case FERRY_TYPE_FLOAT32: case FERRY_TYPE_DATE32: return 4;
    case FERRY_TYPE_INT64: case FERRY_TYPE_FLOAT64: case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US: case FERRY_TYPE_TIMESTAMPTZ_US: return 8;
    case FERRY_TYPE_DECIMAL128: case FERRY_TYPE_UUID: return 16;
    default: return 0;
    }
}

static bool varwidth(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_BINARY || t == FERRY_TYPE_JSON ||
           t == FERRY_TYPE_DECIMAL_TEXT;
}

/* Var-width cell: 0..12 bytes. */
static size_t cell_text(int64_t id, int col, char out[16])
{
    uint64_t h = cell_bits(id, col);
    size_t n = (size_t)(h % 13);
    for (size_t i = 0; i < n; i++) out[i] = (char)('a' + (h >> (4 + 2 * i)) % 26);
    return n;
}

/* ---- hand-built batches ------------------------------------------------------------ */

struct layout {
    int64_t lead;        /* rows of garbage before the batch's rows (batch offset) */
    int64_t slack;       /* rows of garbage capacity after them */
    bool garbage;        /* bits and bytes outside the rows are random, not zero */
    bool garbage_nulls;  /* null slots of fixed-width and bool columns hold random bytes */
    bool force_bitmap;   /* validity bitmap present even when no row is null */
    int32_t data_base;   /* var-width: offsets of the first row start here */
};

static void set_bit(uint8_t *bm, int64_t i, bool v)
{
    if (v)
        bm[i >> 3] |= (uint8_t)(1u << (i & 7));
    else
        bm[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

static void fill(uint8_t *p, size_t n, bool random)
{
    for (size_t i = 0; i < n; i++) p[i] = random ? garbage() : 0;
}

/* Rows `ids[0..n)` with operations ops[0..n) (NULL: pattern from id) in the given layout. */
static struct ferry_batch *build(struct ferry_schema *schema, const int64_t *ids,
                                 const uint8_t *ops, int64_t n, struct layout L)
{
    struct ferry_batch *b = calloc(1, sizeof *b);
    assert_non_null(b);
    int64_t total = L.lead + n + L.slack;
    b->schema = schema;
    b->length = n;
    b->offset = L.lead;
    b->columns = calloc((size_t)schema->n_fields, sizeof *b->columns);
    b->ops = malloc((size_t)total + (total == 0));
    assert_non_null(b->columns);
    assert_non_null(b->ops);
    for (int64_t i = 0; i < total; i++) b->ops[i] = L.garbage ? garbage() % 3 : 0;
    for (int64_t r = 0; r < n; r++)
        b->ops[L.lead + r] = ops ? ops[r] : (uint8_t)(mix((uint64_t)ids[r]) % 3);

    /* Exact sizes, so that a read past the rows' bytes is an ASan report. */
    size_t bm_bytes = (size_t)(total + 7) / 8;
    for (int c = 0; c < schema->n_fields; c++) {
        struct ferry_column *col = &b->columns[c];
        enum ferry_type t = schema->fields[c].type;
        col->type = t;
        /* validity: lead/slack rows random when garbage, else valid */
        uint8_t *validity = malloc(bm_bytes + (bm_bytes == 0));
        assert_non_null(validity);
        if (L.garbage)
            fill(validity, bm_bytes, true);
        else
            memset(validity, 0xFF, bm_bytes);
        bool any_null = false;
        for (int64_t r = 0; r < n; r++) {
            bool is_null = cell_null(ids[r], c);
            set_bit(validity, L.lead + r, !is_null);
            if (is_null) col->null_count++;
        }
        for (int64_t i = 0; i < total; i++)
            if (!(validity[i >> 3] & (1u << (i & 7)))) any_null = true;
        if (!any_null && !L.force_bitmap) {
            free(validity);
            validity = NULL;
        }
        col->validity = validity;

        if (varwidth(t)) {
            col->offsets = malloc((size_t)(total + 1) * sizeof(int32_t));
            size_t cap = (size_t)L.data_base + (size_t)total * 16 + 1; /* trimmed below */
            col->data = malloc(cap);
            assert_non_null(col->offsets);
            assert_non_null(col->data);
            fill(col->data, cap, L.garbage);
            int32_t at = L.data_base;
            for (int64_t i = 0; i < total; i++) {
                col->offsets[i] = at;
                int64_t r = i - L.lead;
                if (r >= 0 && r < n) {
                    if (cell_null(ids[r], c)) continue; /* nulls are empty */
                    char text[16];
                    size_t len = cell_text(ids[r], c, text);
                    memcpy(col->data + at, text, len);
                    at += (int32_t)len;
                } else {
                    at += L.garbage ? garbage() % 9 : 0;
                }
            }
            col->offsets[total] = at;
            col->data = realloc(col->data, (size_t)at + (at == 0));
        } else if (t == FERRY_TYPE_BOOL) {
            col->values = malloc(bm_bytes + (bm_bytes == 0));
            assert_non_null(col->values);
            fill(col->values, bm_bytes, L.garbage);
            for (int64_t r = 0; r < n; r++) {
                bool v = cell_bits(ids[r], c) & 1;
                if (cell_null(ids[r], c)) v = L.garbage_nulls ? garbage() & 1 : false;
                set_bit(col->values, L.lead + r, v);
            }
        } else {
            int w = width_of(t);
            col->values = malloc((size_t)(total * w) + (total == 0));
            assert_non_null(col->values);
            fill(col->values, (size_t)(total * w), L.garbage);
            for (int64_t r = 0; r < n; r++) {
                uint8_t *slot = col->values + (L.lead + r) * w;
                if (cell_null(ids[r], c)) {
                    fill(slot, (size_t)w, L.garbage_nulls);
                } else {
                    uint64_t h = cell_bits(ids[r], c), h2 = mix(h);
                    memcpy(slot, &h, w < 8 ? (size_t)w : 8);
                    if (w == 16) memcpy(slot + 8, &h2, 8);
                }
            }
        }
    }
    return b;
}

static void destroy(struct ferry_batch *b)
{
    if (b == NULL) return;
    for (int c = 0; c < b->schema->n_fields; c++) {
        free(b->columns[c].validity);
        free(b->columns[c].values);
        free(b->columns[c].offsets);
        free(b->columns[c].data);
    }
    free(b->columns);
    free(b->ops);
    free(b);
}

/* A slice as ferry_batch_slice makes it: same buffers, offset moved, fewer rows. */
static struct ferry_batch slice_of(const struct ferry_batch *b, int64_t off, int64_t len)
{
    struct ferry_batch s = *b;
    s.offset = b->offset + off;
    s.length = len;
    return s;
}

static const enum ferry_type all_types[] = {
    FERRY_TYPE_BOOL,        FERRY_TYPE_INT8,          FERRY_TYPE_INT16,
    FERRY_TYPE_INT32,       FERRY_TYPE_INT64,         FERRY_TYPE_FLOAT32,
    FERRY_TYPE_FLOAT64,     FERRY_TYPE_DECIMAL128,    FERRY_TYPE_DECIMAL_TEXT,
    FERRY_TYPE_UTF8,        FERRY_TYPE_BINARY,        FERRY_TYPE_DATE32,
    FERRY_TYPE_TIME64_US,   FERRY_TYPE_TIMESTAMP_US,  FERRY_TYPE_TIMESTAMPTZ_US,
    FERRY_TYPE_UUID,        FERRY_TYPE_JSON};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

static struct ferry_schema *schema_of(const enum ferry_type *types, int n)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        assert_int_equal(ferry_schema_add_field(s, name, types[i], true, NULL), FERRY_OK);
        if (types[i] == FERRY_TYPE_DECIMAL128) {
            s->fields[i].precision = 38;
            s->fields[i].scale = 4;
        }
    }
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static void ids_range(int64_t *ids, int64_t from, int64_t n)
{
    for (int64_t i = 0; i < n; i++) ids[i] = from + i;
}

static const struct layout plain = {0, 0, false, false, false, 0};

/* ---- the canonical form, written out by hand from digest.h ------------------------ */

struct bytes {
    uint8_t p[512];
    size_t n;
};
static void b_u8(struct bytes *b, uint8_t v) { b->p[b->n++] = v; }
static void b_u64(struct bytes *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b_u8(b, (uint8_t)(v >> (8 * i)));
}
static void b_i32(struct bytes *b, int32_t v)
{
    for (int i = 0; i < 4; i++) b_u8(b, (uint8_t)((uint32_t)v >> (8 * i)));
}
static void b_mem(struct bytes *b, const void *p, size_t n)
{
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* Three rows at buffer offset 5, with garbage around them:
 *   int32 [7, null, -2]  utf8 ["ab", "", "xyz"]  bool [true, false, null]
 *   ops   [insert, delete, update] */
static void test_canonical_form_pinned(void **state)
{
    (void)state;
    enum ferry_type types[3] = {FERRY_TYPE_INT32, FERRY_TYPE_UTF8, FERRY_TYPE_BOOL};
    struct ferry_schema *s = schema_of(types, 3);
    struct ferry_batch *b = build(s, (int64_t[]){0}, (uint8_t[]){0}, 1,
                                  (struct layout){5, 11, true, false, false, 0});
    /* Overwrite rows 5..7 with the exact values above (buffers are large enough). */
    b->length = 3;
    struct ferry_column *ci = &b->columns[0], *cu = &b->columns[1], *cb = &b->columns[2];
    int32_t iv[3] = {7, 0x5A5A5A5A, -2}; /* the null slot holds garbage */
    memcpy(ci->values + 5 * 4, iv, sizeof iv);
    if (ci->validity == NULL) ci->validity = calloc(4, 1);
    set_bit(ci->validity, 5, true);
    set_bit(ci->validity, 6, false);
    set_bit(ci->validity, 7, true);
    free(cu->offsets);
    cu->offsets = malloc(16 * sizeof(int32_t));
    int32_t uo[4] = {100, 102, 102, 105};
    memcpy(cu->offsets + 5, uo, sizeof uo);
    free(cu->data);
    cu->data = calloc(200, 1);
    memcpy(cu->data + 100, "abxyz", 5);
    if (cu->validity) memset(cu->validity, 0xFF, 3);
    set_bit(cb->values, 5, true);
    set_bit(cb->values, 6, false);
    set_bit(cb->values, 7, true); /* under a null: must digest as 0 */
    if (cb->validity == NULL) cb->validity = calloc(4, 1);
    set_bit(cb->validity, 5, true);
    set_bit(cb->validity, 6, true);
    set_bit(cb->validity, 7, false);
    b->ops[5] = FERRY_OP_INSERT;
    b->ops[6] = FERRY_OP_DELETE;
    b->ops[7] = FERRY_OP_UPDATE;

    struct bytes e = {.n = 0};
    b_u64(&e, 3);
    b_u64(&e, 3);
    /* int32 */
    b_u8(&e, FERRY_TYPE_INT32);
    b_u64(&e, 1);
    b_u8(&e, 0x05); /* rows 0 and 2 valid */
    b_u64(&e, 12);
    b_i32(&e, 7);
    b_i32(&e, 0);
    b_i32(&e, -2);
    /* utf8: no null, so an empty validity */
    b_u8(&e, FERRY_TYPE_UTF8);
    b_u64(&e, 0);
    b_u64(&e, 16);
    b_i32(&e, 0);
    b_i32(&e, 2);
    b_i32(&e, 2);
    b_i32(&e, 5);
    b_u64(&e, 5);
    b_mem(&e, "abxyz", 5);
    /* bool */
    b_u8(&e, FERRY_TYPE_BOOL);
    b_u64(&e, 1);
    b_u8(&e, 0x03);
    b_u64(&e, 1);
    b_u8(&e, 0x01);
    /* ops */
    b_u8(&e, 0);
    b_u8(&e, 2);
    b_u8(&e, 1);

    assert_int_equal(ferry_batch_digest(b), ferry_crc32c(e.p, e.n));
    destroy(b);
    ferry_schema_unref(s);
}

/* ---- what must not change the digest ----------------------------------------------- */

static void test_layout_does_not_matter(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 77 };
    int64_t ids[N];
    ids_range(ids, 1000, N);
    struct ferry_batch *ref = build(s, ids, NULL, N, plain);
    uint32_t want = ferry_batch_digest(ref);
    int checked = 0;
    static const int64_t leads[] = {0, 1, 3, 8, 13};
    for (size_t li = 0; li < sizeof leads / sizeof leads[0]; li++)
        for (int mask = 0; mask < 32; mask++) {
            struct layout L = {
                .lead = leads[li],
                .slack = (mask & 1) ? 29 : 0,
                .garbage = (mask & 2) != 0,
                .garbage_nulls = (mask & 4) != 0,
                .force_bitmap = (mask & 8) != 0,
                .data_base = (mask & 16) ? 1001 : 0,
            };
            struct ferry_batch *b = build(s, ids, NULL, N, L);
            uint32_t got = ferry_batch_digest(b);
            if (got != want)
                fail_msg("layout lead=%lld mask=%d: %08x != %08x", (long long)L.lead, mask, got,
                         want);
            destroy(b);
            checked++;
        }
    assert_int_equal(checked, 5 * 32);
    destroy(ref);
    ferry_schema_unref(s);
}

/* A slice at every offset 0..17 of a larger batch equals a fresh batch of the same rows;
 * short slices often hold no null of a column whose parent has nulls (bitmap present but
 * all valid over the slice, versus no bitmap at all in the fresh batch). */
static void test_slices_equal_fresh_batches(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 120 };
    int64_t ids[N];
    ids_range(ids, 50, N);
    struct ferry_batch *big = build(s, ids, NULL, N, (struct layout){3, 9, true, true, false, 77});
    static const int64_t lens[] = {0, 1, 2, 3, 7, 8, 9, 16, 31, 64, 100};
    for (int64_t off = 0; off <= 17; off++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t len = lens[li];
            struct ferry_batch sl = slice_of(big, off, len);
            struct ferry_batch *fresh =
                build(s, ids + off, big->ops + big->offset + off, len, plain);
            uint32_t a = ferry_batch_digest(&sl), b = ferry_batch_digest(fresh);
            if (a != b)
                fail_msg("slice off %lld len %lld: %08x != fresh %08x", (long long)off,
                         (long long)len, a, b);
            destroy(fresh);
        }
    /* Neighbouring slices of the same length hold different rows: different digests. */
    for (int64_t off = 0; off < 17; off++) {
        struct ferry_batch a = slice_of(big, off, 9), b = slice_of(big, off + 1, 9);
        assert_int_not_equal(ferry_batch_digest(&a), ferry_batch_digest(&b));
    }
    destroy(big);
    ferry_schema_unref(s);
}

/* The same with real batches: the row writer builds them, ferry_batch_slice() slices them
 * (dropping the bitmap of a range without nulls), ferry_batch_copy() makes them canonical. */
static void test_builder_slices_equal_fresh_batches(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    assert_non_null(s);
    struct ferry_batch *big = tr_batch(s, 0, 120);
    assert_non_null(big);
    static const int64_t lens[] = {0, 1, 2, 3, 7, 8, 9, 16, 31, 64, 100};
    for (int64_t off = 0; off <= 17; off++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            struct ferry_batch *sl = ferry_batch_slice(big, off, lens[li]);
            struct ferry_batch *fresh = tr_batch(s, off, lens[li]);
            assert_non_null(sl);
            assert_non_null(fresh);
            struct ferry_batch *copy = ferry_batch_copy(sl);
            assert_non_null(copy);
            uint32_t d = ferry_batch_digest(fresh);
            if (ferry_batch_digest(sl) != d)
                fail_msg("builder slice off %lld len %lld differs", (long long)off,
                         (long long)lens[li]);
            assert_int_equal(ferry_batch_digest(copy), d);
            ferry_batch_unref(copy);
            ferry_batch_unref(fresh);
            ferry_batch_unref(sl);
        }
    ferry_batch_unref(big);
    ferry_schema_unref(s);
}

/* Bigger than the digest's stack buffer at unaligned offsets: every chunked path. */
static void test_large_unaligned_slice(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 40000 };
    int64_t *ids = malloc(N * sizeof *ids);
    assert_non_null(ids);
    ids_range(ids, 7, N);
    struct ferry_batch *big = build(s, ids, NULL, N, (struct layout){5, 3, true, true, false, 9});
    struct ferry_batch sl = slice_of(big, 3, N - 10);
    struct ferry_batch *fresh = build(s, ids + 3, big->ops + big->offset + 3, N - 10, plain);
    assert_int_equal(ferry_batch_digest(&sl), ferry_batch_digest(fresh));
    destroy(fresh);
    destroy(big);
    free(ids);
    ferry_schema_unref(s);
}

static void test_empty_batch(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    struct ferry_batch *a = build(s, NULL, NULL, 0, plain);
    struct ferry_batch *b = build(s, NULL, NULL, 0, (struct layout){9, 4, true, true, true, 40});
    assert_int_equal(ferry_batch_digest(a), ferry_batch_digest(b));
    /* An empty batch whose buffers were never allocated digests the same. */
    struct ferry_batch bare = *a;
    struct ferry_column cols[N_TYPES];
    memset(cols, 0, sizeof cols);
    for (int c = 0; c < N_TYPES; c++) cols[c].type = all_types[c];
    bare.columns = cols;
    bare.ops = NULL;
    assert_int_equal(ferry_batch_digest(&bare), ferry_batch_digest(a));
    int64_t one = 1;
    struct ferry_batch *c1 = build(s, &one, NULL, 1, plain);
    assert_int_not_equal(ferry_batch_digest(c1), ferry_batch_digest(a));
    destroy(a);
    destroy(b);
    destroy(c1);
    ferry_schema_unref(s);
}

/* ---- what must change the digest --------------------------------------------------- */

static void test_row_order_matters(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 20 };
    int64_t ids[N];
    ids_range(ids, 0, N);
    uint8_t ops[N] = {0};
    struct ferry_batch *a = build(s, ids, ops, N, plain);
    for (int i = 0; i + 1 < N; i++) {
        int64_t sw[N];
        memcpy(sw, ids, sizeof sw);
        sw[i] = ids[i + 1];
        sw[i + 1] = ids[i];
        struct ferry_batch *b = build(s, sw, ops, N, plain);
        assert_int_not_equal(ferry_batch_digest(a), ferry_batch_digest(b));
        destroy(b);
    }
    destroy(a);
    ferry_schema_unref(s);
}

static void test_column_order_matters(void **state)
{
    (void)state;
    /* Different types swapped, and two columns of the same type swapped. */
    enum ferry_type t1[3] = {FERRY_TYPE_INT64, FERRY_TYPE_UTF8, FERRY_TYPE_INT64};
    enum ferry_type t2[3] = {FERRY_TYPE_UTF8, FERRY_TYPE_INT64, FERRY_TYPE_INT64};
    struct ferry_schema *s1 = schema_of(t1, 3), *s2 = schema_of(t2, 3);
    int64_t ids[10];
    ids_range(ids, 0, 10);
    struct ferry_batch *a = build(s1, ids, NULL, 10, plain);
    struct ferry_batch *b = build(s1, ids, NULL, 10, plain);
    uint32_t da = ferry_batch_digest(a);
    assert_int_equal(da, ferry_batch_digest(b));
    /* b: columns 0 and 2 (both int64) swapped */
    struct ferry_column tmp = b->columns[0];
    b->columns[0] = b->columns[2];
    b->columns[2] = tmp;
    assert_int_not_equal(da, ferry_batch_digest(b));
    /* c: same column buffers as a, utf8 first */
    struct ferry_batch *c = build(s2, ids, NULL, 10, plain);
    struct ferry_column saved[3];
    memcpy(saved, c->columns, sizeof saved);
    c->columns[0] = a->columns[1];
    c->columns[1] = a->columns[0];
    c->columns[2] = a->columns[2];
    assert_int_not_equal(da, ferry_batch_digest(c));
    memcpy(c->columns, saved, sizeof saved);
    destroy(a);
    destroy(b);
    destroy(c);
    ferry_schema_unref(s1);
    ferry_schema_unref(s2);
}

/* For every column type: one more null, one changed value, each changes the digest. */
static void test_one_null_or_value_matters(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 40 };
    int64_t ids[N];
    ids_range(ids, 300, N);
    for (int c = 0; c < N_TYPES; c++) {
        struct ferry_batch *base = build(s, ids, NULL, N, plain);
        uint32_t want = ferry_batch_digest(base);
        /* a row that is not null in column c and (var-width) not empty */
        int64_t r = -1;
        for (int64_t i = 0; i < N && r < 0; i++) {
            char t[16];
            if (!cell_null(ids[i], c) && (!varwidth(all_types[c]) || cell_text(ids[i], c, t) > 0))
                r = i;
        }
        assert_true(r >= 0);

        /* one null */
        struct ferry_batch *b = build(s, ids, NULL, N, plain);
        struct ferry_column *col = &b->columns[c];
        if (col->validity == NULL) {
            col->validity = malloc((N + 7) / 8 + 1);
            memset(col->validity, 0xFF, (N + 7) / 8 + 1);
        }
        set_bit(col->validity, r, false);
        col->null_count++;
        if (ferry_batch_digest(b) == want) fail_msg("one null in column %d not seen", c);
        destroy(b);

        /* one value */
        b = build(s, ids, NULL, N, plain);
        col = &b->columns[c];
        if (varwidth(all_types[c]))
            col->data[col->offsets[r]] ^= 0x01;
        else if (all_types[c] == FERRY_TYPE_BOOL)
            col->values[r >> 3] ^= (uint8_t)(1u << (r & 7));
        else
            col->values[r * width_of(all_types[c]) + width_of(all_types[c]) - 1] ^= 0x80;
        if (ferry_batch_digest(b) == want) fail_msg("one value in column %d not seen", c);
        destroy(b);

        /* var-width: one byte moved from one value to the next (same total data) */
        if (varwidth(all_types[c]) && r + 1 < N) {
            b = build(s, ids, NULL, N, plain);
            b->columns[c].offsets[r + 1] -= 1;
            if (ferry_batch_digest(b) == want) fail_msg("moved boundary in column %d not seen", c);
            destroy(b);
        }
        destroy(base);
    }
    ferry_schema_unref(s);
}

static void test_one_operation_matters(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of(all_types, N_TYPES);
    enum { N = 25 };
    int64_t ids[N];
    ids_range(ids, 0, N);
    uint8_t ops[N];
    memset(ops, FERRY_OP_INSERT, sizeof ops);
    struct ferry_batch *a = build(s, ids, ops, N, plain);
    uint32_t want = ferry_batch_digest(a);
    for (int r = 0; r < N; r++)
        for (uint8_t op = FERRY_OP_UPDATE; op <= FERRY_OP_DELETE; op++) {
            a->ops[r] = op;
            assert_int_not_equal(ferry_batch_digest(a), want);
            a->ops[r] = FERRY_OP_INSERT;
        }
    assert_int_equal(ferry_batch_digest(a), want);
    destroy(a);
    ferry_schema_unref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canonical_form_pinned),
        cmocka_unit_test(test_layout_does_not_matter),
        cmocka_unit_test(test_slices_equal_fresh_batches),
        cmocka_unit_test(test_builder_slices_equal_fresh_batches),
        cmocka_unit_test(test_large_unaligned_slice),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_row_order_matters),
        cmocka_unit_test(test_column_order_matters),
        cmocka_unit_test(test_one_null_or_value_matters),
        cmocka_unit_test(test_one_operation_matters),
    };
    return cmocka_run_group_tests_name("digest", tests, NULL, NULL);
}
