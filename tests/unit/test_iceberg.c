/* tests/unit/test_iceberg.c - the iceberg sink's codecs, against the specifications' own
 * vectors: Murmur3 / bucket hashes of Iceberg's Appendix B, the single-value serialization
 * of Appendix D (bounds), the Avro binary encoding (hand-computed bytes from the Avro
 * specification's examples: zigzag longs, strings, unions, arrays, maps) and a container
 * file round trip through the reader, a deflate container built by hand as Java writers
 * make them, partition transforms (day/hour floors before 1970), both catalogs' commit and
 * conflict, and merge (deletes, same-commit updates, partitioned) through the sink's vtable
 * read back by icebird. */
#include "unit.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>
#include "batch/builder.h"
#include "formats/parquet_writer.h"
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"

static void test_murmur3_spec_vectors(void **state)
{
    (void)state;
    assert_int_equal(ferry__iceberg_hash_long(34), 2017239379);
    /* ints hash as longs */
    assert_int_equal(ferry__iceberg_hash_long((int32_t)34), 2017239379);
    /* date 2017-11-16 = 17486 days */
    assert_int_equal(ferry__iceberg_hash_long(17486), -653330422);
    /* time 22:31:08 in microseconds */
    assert_int_equal(ferry__iceberg_hash_long(INT64_C(81068000000)), -662762989);
    /* timestamp 2017-11-16T22:31:08 (and the same instant with a zone) */
    assert_int_equal(ferry__iceberg_hash_long(INT64_C(1510871468000000)), -2047944441);
    assert_int_equal(ferry__iceberg_hash_bytes("iceberg", 7), 1210000089);
    const uint8_t bin[4] = {0, 1, 2, 3};
    assert_int_equal(ferry__iceberg_hash_bytes(bin, 4), -188683207);
    uint8_t uuid[16];
    assert_int_equal(ferry_uuid_from_text("f79c3e09-677c-4bbd-a479-3f349cb785e7", 36, uuid), FERRY_OK);
    assert_int_equal(ferry__iceberg_hash_bytes(uuid, 16), 1488055340);
    /* decimal 14.20: unscaled 1420 -> 0x058c */
    struct ferry_decimal128 d = {.lo = 1420, .hi = 0};
    uint8_t db[16];
    size_t n = ferry__iceberg_decimal_bytes(d, db);
    assert_int_equal(n, 2);
    assert_int_equal(db[0], 0x05);
    assert_int_equal(db[1], 0x8c);
    assert_int_equal(ferry__iceberg_hash_bytes(db, n), -500754589);
    /* bucket: (hash & INT_MAX) % N */
    assert_int_equal(ferry__iceberg_bucket(2017239379, 16), 3);
    assert_int_equal(ferry__iceberg_bucket(-653330422, 10), (int)((uint32_t)(-653330422) & 0x7fffffff) % 10);
}

static void test_decimal_minimal_bytes(void **state)
{
    (void)state;
    uint8_t b[16];
    struct ferry_decimal128 v = {.lo = 0, .hi = 0};
    assert_int_equal(ferry__iceberg_decimal_bytes(v, b), 1);
    assert_int_equal(b[0], 0);
    v = (struct ferry_decimal128){.lo = UINT64_MAX, .hi = -1}; /* -1 */
    assert_int_equal(ferry__iceberg_decimal_bytes(v, b), 1);
    assert_int_equal(b[0], 0xff);
    v = (struct ferry_decimal128){.lo = 128, .hi = 0}; /* needs a sign byte: 00 80 */
    assert_int_equal(ferry__iceberg_decimal_bytes(v, b), 2);
    assert_int_equal(b[0], 0x00);
    assert_int_equal(b[1], 0x80);
    v = (struct ferry_decimal128){.lo = (uint64_t)-129, .hi = -1}; /* -129 = ff 7f */
    assert_int_equal(ferry__iceberg_decimal_bytes(v, b), 2);
    assert_int_equal(b[0], 0xff);
    assert_int_equal(b[1], 0x7f);
}

/* A batch of one column built through the row writer. */
static struct ferry_batch *g_batch;
static int keep(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    (void)err;
    g_batch = b;
    return FERRY_OK;
}

static struct ferry_batch *one_column(enum ferry_type t, void (*fill)(struct ferry_row_writer *))
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "c", t, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, keep, NULL);
    g_batch = NULL;
    fill(rw);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    assert_non_null(g_batch);
    return g_batch;
}

static void fill_longs(struct ferry_row_writer *rw)
{
    const int64_t v[] = {5, -7, 1234567890123, 0};
    for (int i = 0; i < 4; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, v[i]);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_null(rw);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
}

static void fill_strings(struct ferry_row_writer *rw)
{
    const char *v[] = {"pear", "apple", "zebra", "\xc3\xa9t\xc3\xa9"};
    for (int i = 0; i < 4; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_text(rw, v[i], strlen(v[i]));
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
}

static void fill_long_strings(struct ferry_row_writer *rw)
{
    char big[100];
    memset(big, 'b', sizeof big);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_text(rw, big, sizeof big);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_text(rw, "c", 1);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
}

static void fill_doubles(struct ferry_row_writer *rw)
{
    const double v[] = {2.5, 0.0 / 0.0, -1.25};
    for (int i = 0; i < 3; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_float(rw, v[i]);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
}


/* ---- manifest statistics: the data file's Parquet writer vs a per-row reference ---------
 *
 * The sink takes a data file's manifest statistics from its Parquet writer
 * (ferry__parquet_column_stats). ref_stats_add is the per-row pass the sink used before,
 * kept here as the reference those statistics must agree with. */
static int ref_bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c != 0) return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

static int ref_dec_cmp(struct ferry_decimal128 a, struct ferry_decimal128 b)
{
    if (a.hi != b.hi) return a.hi < b.hi ? -1 : 1;
    if (a.lo != b.lo) return a.lo < b.lo ? -1 : 1;
    return 0;
}

static size_t ref_cut(const uint8_t *p, size_t n, bool text)
{
    if (n <= 64) return n;
    size_t k = 64;
    if (text)
        while (k > 0 && (p[k] & 0xc0) == 0x80) k--;
    return k;
}

static void ref_set(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    b->len = 0;
    assert_int_equal(ferry_buf_append(b, p, n), FERRY_OK);
}

static void ref_stats_add(struct ferry__iceberg_stats *s, const struct ferry_batch *b, int col)
{
    const struct ferry_column *c = &b->columns[col];
    s->values += b->length;
    s->nulls += c->null_count;
    enum ferry_type t = s->type;
    if (t == FERRY_TYPE_UUID) return;
    bool text = t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT;
    for (int64_t r = 0; r < b->length; r++) {
        if (ferry_col_is_null(b, col, r)) continue;
        if (t == FERRY_TYPE_FLOAT32 || t == FERRY_TYPE_FLOAT64) {
            double v = ferry_col_float(b, col, r);
            if (isnan(v)) {
                s->nans++;
            } else if (!s->has_minmax) {
                s->min_f = s->max_f = v;
                s->has_minmax = true;
            } else {
                if (v < s->min_f) s->min_f = v;
                if (v > s->max_f) s->max_f = v;
            }
        } else if (t == FERRY_TYPE_DECIMAL128) {
            struct ferry_decimal128 v = ferry_col_dec128(b, col, r);
            if (!s->has_minmax) {
                s->min_d = s->max_d = v;
                s->has_minmax = true;
            } else {
                if (ref_dec_cmp(v, s->min_d) < 0) s->min_d = v;
                if (ref_dec_cmp(v, s->max_d) > 0) s->max_d = v;
            }
        } else if (ferry_type_is_varwidth(t)) {
            size_t n;
            const uint8_t *p = ferry_col_bytes(b, col, r, &n);
            if (!s->has_minmax) {
                size_t k = ref_cut(p, n, text);
                ref_set(&s->min_b, p, k);
                s->lower_cut = k < n;
                s->no_upper = n > 64;
                ref_set(&s->max_b, p, k);
                s->has_minmax = true;
                continue;
            }
            if (ref_bytes_cmp(p, n, (const uint8_t *)s->min_b.data, s->min_b.len) < 0)
                ref_set(&s->min_b, p, ref_cut(p, n, text));
            const uint8_t *mp = (const uint8_t *)s->max_b.data;
            size_t mn = s->max_b.len;
            if (ref_bytes_cmp(p, n, mp, mn) > 0 &&
                !(s->no_upper && n >= mn && memcmp(p, mp, mn) == 0)) {
                s->no_upper = n > 64;
                ref_set(&s->max_b, p, s->no_upper ? ref_cut(p, n, text) : n);
            }
        } else {
            int64_t v = t == FERRY_TYPE_BOOL ? (int64_t)ferry_col_bool(b, col, r)
                                             : ferry_col_int(b, col, r);
            if (!s->has_minmax) {
                s->min_i = s->max_i = v;
                s->has_minmax = true;
            } else {
                if (v < s->min_i) s->min_i = v;
                if (v > s->max_i) s->max_i = v;
            }
        }
    }
}

static int mem_write(void *ctx, const void *p, size_t n)
{
    return ferry_buf_append(ctx, p, n);
}

/* Writes batches[0..nb) as one Parquet file (tiny row groups: one per batch, so the
 * statistics are merged across chunks) and takes column col's statistics from the writer. */
static void writer_stats(struct ferry__iceberg_stats *st, struct ferry_batch **batches, int nb, int col)
{
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    o.row_group_bytes = 1;
    struct ferry_buf file;
    ferry_buf_init(&file, 0);
    struct ferry_parquet_writer *w = NULL;
    assert_int_equal(ferry__parquet_open(batches[0]->schema, &o, mem_write, &file, &w, NULL), FERRY_OK);
    for (int i = 0; i < nb; i++)
        assert_int_equal(ferry__parquet_write_batch(w, batches[i], NULL), FERRY_OK);
    int64_t bytes = 0;
    assert_int_equal(ferry__parquet_close(w, &bytes, NULL), FERRY_OK);
    assert_true(bytes == (int64_t)file.len);
    struct ferry__files_column_stats cs;
    assert_int_equal(ferry__parquet_column_stats(w, col, &cs), FERRY_OK);
    assert_true(cs.bytes > 0 && cs.bytes < bytes);
    assert_int_equal(ferry__iceberg_stats_from_file(st, &cs), FERRY_OK);
    ferry__parquet_free(w);
    ferry_buf_release(&file);
}

static void one_writer_stats(struct ferry__iceberg_stats *st, struct ferry_batch *b)
{
    writer_stats(st, &b, 1, 0);
}

static void test_single_value_bounds(void **state)
{
    (void)state;
    uint8_t out[128];
    struct ferry__iceberg_stats st;

    struct ferry_batch *b = one_column(FERRY_TYPE_INT64, fill_longs);
    ferry__iceberg_stats_init(&st, FERRY_TYPE_INT64);
    one_writer_stats(&st, b);
    assert_int_equal(st.values, 5);
    assert_int_equal(st.nulls, 1);
    assert_int_equal(ferry__iceberg_stats_bound(&st, false, out, sizeof out), 8);
    const uint8_t minus7[8] = {0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_memory_equal(out, minus7, 8); /* little-endian two's complement */
    assert_int_equal(ferry__iceberg_stats_bound(&st, true, out, sizeof out), 8);
    int64_t mx = 0;
    for (int i = 7; i >= 0; i--) mx = (mx << 8) | out[i];
    assert_true(mx == 1234567890123);
    ferry__iceberg_stats_release(&st);
    ferry_batch_unref(b);

    b = one_column(FERRY_TYPE_UTF8, fill_strings);
    ferry__iceberg_stats_init(&st, FERRY_TYPE_UTF8);
    one_writer_stats(&st, b);
    long n = ferry__iceberg_stats_bound(&st, false, out, sizeof out);
    assert_int_equal(n, 5);
    assert_memory_equal(out, "apple", 5); /* UTF-8 bytes, no length prefix */
    n = ferry__iceberg_stats_bound(&st, true, out, sizeof out);
    assert_int_equal(n, 5);
    assert_memory_equal(out, "\xc3\xa9t\xc3\xa9", 5); /* byte order: 0xc3 > 'z' */
    ferry__iceberg_stats_release(&st);
    ferry_batch_unref(b);

    /* a long maximum is left out; a long minimum is cut to a prefix */
    b = one_column(FERRY_TYPE_UTF8, fill_long_strings);
    ferry__iceberg_stats_init(&st, FERRY_TYPE_UTF8);
    one_writer_stats(&st, b);
    n = ferry__iceberg_stats_bound(&st, false, out, sizeof out);
    assert_int_equal(n, 64);
    assert_int_equal(out[0], 'b');
    assert_int_equal(ferry__iceberg_stats_bound(&st, true, out, sizeof out), 1);
    assert_int_equal(out[0], 'c');
    ferry__iceberg_stats_release(&st);
    ferry_batch_unref(b);

    /* doubles: NaN counted apart, bounds 8 bytes little-endian IEEE 754 */
    b = one_column(FERRY_TYPE_FLOAT64, fill_doubles);
    ferry__iceberg_stats_init(&st, FERRY_TYPE_FLOAT64);
    one_writer_stats(&st, b);
    assert_int_equal(st.nans, 1);
    assert_int_equal(ferry__iceberg_stats_bound(&st, false, out, sizeof out), 8);
    const uint8_t m125[8] = {0, 0, 0, 0, 0, 0, 0xf4, 0xbf}; /* -1.25 */
    assert_memory_equal(out, m125, 8);
    ferry__iceberg_stats_release(&st);
    ferry_batch_unref(b);
}

/* One batch of every bound-carrying type with nulls, NaN, negatives, -0.0, unicode and
 * long strings; kind selects the values so that three batches give three row groups. */
static void fill_mixed(struct ferry_row_writer *rw, int kind)
{
    static const char *texts[] = {"z\xc3\xa9ro", "\xe6\x97\xa5\xe6\x9c\xac", "Zebra", "", "\xf0\x9f\x98\x80 smile", "apple"};
    for (int i = 0; i < 40; i++) {
        int k = i + 40 * kind;
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        if (k % 7 == 3) ferry_rw_null(rw); else ferry_rw_int(rw, (int64_t)(k * 37 % 101) - 50 - kind * 1000); /* i32 */
        if (k % 5 == 1) ferry_rw_null(rw); else ferry_rw_int(rw, (int64_t)(k % 13 - 6) * INT64_C(99999999999)); /* i64 */
        if (k % 9 == 2) ferry_rw_float(rw, NAN); else if (k % 11 == 4) ferry_rw_null(rw);
        else ferry_rw_float(rw, k == 17 ? -0.0 : (double)(k % 17 - 8) * 0.75 * (kind + 1)); /* f64 */
        if (k % 6 == 0) ferry_rw_float(rw, NAN); else ferry_rw_float(rw, (double)(k % 10 - 5) / 4); /* f32 */
        if (k % 4 == 2) ferry_rw_null(rw);
        else if (k % 23 == 5) { /* longer than the 64-byte bound: the lower bound is a cut prefix */
            char big[90];
            for (int j = 0; j < 88; j += 2) memcpy(big + j, "\xc3\xa9", 2);
            big[88] = 'x';
            big[89] = (char)('a' + kind);
            ferry_rw_text(rw, big, sizeof big);
        } else {
            const char *t = texts[k % 6];
            ferry_rw_text(rw, t, strlen(t)); /* utf8 */
        }
        if (k % 8 == 7) ferry_rw_null(rw);
        else ferry_rw_dec128(rw, (struct ferry_decimal128){.lo = (uint64_t)(int64_t)(k * 1013 % 4099 - 2000), .hi = k * 1013 % 4099 - 2000 < 0 ? -1 : 0}); /* dec(10,2) */
        if (k % 8 == 1) ferry_rw_null(rw);
        else ferry_rw_dec128(rw, (struct ferry_decimal128){.lo = (uint64_t)k * 77, .hi = k % 3 == 0 ? -5 : 3}); /* dec(38,4) */
        ferry_rw_bool(rw, k % 3 == 1);
        if (k % 10 == 9) ferry_rw_null(rw); else ferry_rw_int(rw, -3000 + k * 41); /* date */
        ferry_rw_int(rw, (int64_t)(k - 60) * INT64_C(3600000000)); /* timestamptz */
        uint8_t u[16];
        memset(u, (uint8_t)k, sizeof u);
        ferry_rw_fixed(rw, u, 16); /* uuid: no bounds either way */
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
}

static void test_writer_stats_match_per_row(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    const struct { const char *name; enum ferry_type t; } cols[] = {
        {"i32", FERRY_TYPE_INT32}, {"i64", FERRY_TYPE_INT64}, {"f64", FERRY_TYPE_FLOAT64},
        {"f32", FERRY_TYPE_FLOAT32}, {"txt", FERRY_TYPE_UTF8}, {"d10", FERRY_TYPE_DECIMAL128},
        {"d38", FERRY_TYPE_DECIMAL128}, {"flag", FERRY_TYPE_BOOL}, {"day", FERRY_TYPE_DATE32},
        {"ts", FERRY_TYPE_TIMESTAMPTZ_US}, {"u", FERRY_TYPE_UUID}};
    int nc = (int)(sizeof cols / sizeof cols[0]);
    for (int i = 0; i < nc; i++)
        assert_int_equal(ferry_schema_add_field(s, cols[i].name, cols[i].t, true, NULL), FERRY_OK);
    s->fields[5].precision = 10;
    s->fields[5].scale = 2;
    s->fields[6].precision = 38;
    s->fields[6].scale = 4;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *bs[3];
    for (int kind = 0; kind < 3; kind++) {
        struct ferry_rw_limits lim = {.rows = 1000, .bytes = 1 << 20};
        struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, keep, NULL);
        g_batch = NULL;
        fill_mixed(rw, kind);
        assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
        ferry__rw_free(rw);
        assert_non_null(g_batch);
        bs[kind] = g_batch;
    }
    for (int c = 0; c < nc; c++) {
        struct ferry__iceberg_stats ref, got;
        ferry__iceberg_stats_init(&ref, cols[c].t);
        ferry__iceberg_stats_init(&got, cols[c].t);
        for (int kind = 0; kind < 3; kind++) ref_stats_add(&ref, bs[kind], c);
        writer_stats(&got, bs, 3, c);
        print_message("column %s: values %lld nulls %lld nans %lld bounds %d\n", cols[c].name,
                      (long long)got.values, (long long)got.nulls, (long long)got.nans, got.has_minmax);
        assert_int_equal(got.values, ref.values);
        assert_int_equal(got.values, 120);
        assert_int_equal(got.nulls, ref.nulls);
        assert_int_equal(got.nans, ref.nans);
        assert_int_equal(got.has_minmax, ref.has_minmax);
        assert_int_equal(got.has_minmax, cols[c].t != FERRY_TYPE_UUID);
        for (int upper = 0; upper < 2; upper++) {
            uint8_t a[128], b[128];
            long na = ferry__iceberg_stats_bound(&ref, upper, a, sizeof a);
            long nb = ferry__iceberg_stats_bound(&got, upper, b, sizeof b);
            assert_int_equal(nb, na);
            if (na > 0) assert_memory_equal(b, a, (size_t)na);
        }
        ferry__iceberg_stats_release(&ref);
        ferry__iceberg_stats_release(&got);
    }
    /* the text column's lower bound is the cut 64-byte prefix of the long value ("é"*32,
     * which sorts above "Zebra" and below the 4-byte emoji...), the upper the emoji text */
    struct ferry__iceberg_stats t;
    ferry__iceberg_stats_init(&t, FERRY_TYPE_UTF8);
    writer_stats(&t, bs, 3, 4);
    uint8_t out[128];
    assert_int_equal(ferry__iceberg_stats_bound(&t, false, out, sizeof out), 0); /* "" */
    long n = ferry__iceberg_stats_bound(&t, true, out, sizeof out);
    assert_int_equal(n, (long)strlen("\xf0\x9f\x98\x80 smile"));
    assert_memory_equal(out, "\xf0\x9f\x98\x80 smile", (size_t)n);
    ferry__iceberg_stats_release(&t);
    for (int kind = 0; kind < 3; kind++) ferry_batch_unref(bs[kind]);
    ferry_schema_unref(s);
}

static void test_avro_binary_encoding(void **state)
{
    (void)state;
    /* record {a: long, b: string, c: ["null","int"], d: array<long>, e: map<long>} */
    json_error_t je;
    json_t *schema = json_loads(
        "{\"type\":\"record\",\"name\":\"r\",\"fields\":["
        "{\"name\":\"a\",\"type\":\"long\"},{\"name\":\"b\",\"type\":\"string\"},"
        "{\"name\":\"c\",\"type\":[\"null\",\"int\"]},"
        "{\"name\":\"d\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
        "{\"name\":\"e\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
        "{\"name\":\"f\",\"type\":\"bytes\"},{\"name\":\"g\",\"type\":\"boolean\"}]}",
        0, &je);
    assert_non_null(schema);
    json_t *recs = json_loads("[{\"a\":-64,\"b\":\"foo\",\"c\":null,\"d\":[3,27],\"e\":{\"k\":1},"
                              "\"f\":\"00ff\",\"g\":true},"
                              "{\"a\":64,\"b\":\"\",\"c\":2,\"d\":[],\"e\":{},\"f\":\"\",\"g\":false}]",
                              0, &je);
    json_t *meta = json_pack("{s:s}", "format-version", "2");
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__avro_write(&b, schema, meta, recs, NULL), FERRY_OK);
    assert_memory_equal(b.data, "Obj\x01", 4);
    /* the block: count 2 (04), its size, then the records' bytes, then the sync marker.
     * Record 1: -64 -> 7f; "foo" -> 06 66 6f 6f; null branch 0 -> 00; array [3,27] ->
     * 04 06 36 00; map {k:1} -> 02 02 6b 02 00; bytes 00ff -> 04 00 ff; true -> 01.
     * Record 2: 64 -> 80 01; "" -> 00; branch 1, 2 -> 02 04; [] -> 00; {} -> 00; "" -> 00;
     * false -> 00. */
    static const uint8_t want[] = {0x7f, 0x06, 'f', 'o', 'o', 0x00, 0x04, 0x06, 0x36, 0x00,
                                   0x02, 0x02, 'k', 0x02, 0x00, 0x04, 0x00, 0xff, 0x01,
                                   0x80, 0x01, 0x00, 0x02, 0x04, 0x00, 0x00, 0x00, 0x00};
    size_t body = sizeof want;
    /* the header ends with the 16-byte sync marker, then 04 (2 records), size, body, sync */
    const uint8_t *end = (const uint8_t *)b.data + b.len;
    assert_memory_equal(end - 16 - body, want, body);
    assert_memory_equal(end - 16, end - 16 - body - 2 - 16, 16); /* same sync marker */
    assert_int_equal(*(end - 16 - body - 1), (uint8_t)(body * 2)); /* zigzag size */
    assert_int_equal(*(end - 16 - body - 2), 0x04);

    json_t *m2 = NULL, *r2 = NULL;
    assert_int_equal(ferry__avro_read((const uint8_t *)b.data, b.len, &m2, &r2, NULL), FERRY_OK);
    assert_true(json_equal(r2, recs));
    assert_string_equal(json_string_value(json_object_get(m2, "format-version")), "2");
    assert_string_equal(json_string_value(json_object_get(m2, "avro.codec")), "null");

    /* a value that fits no branch is refused naming the field */
    json_t *badrec = json_loads("[{\"a\":1,\"b\":\"x\",\"c\":\"no\",\"d\":[],\"e\":{},\"f\":\"\","
                                "\"g\":true}]",
                                0, &je);
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_buf b2;
    ferry_buf_init(&b2, 0);
    assert_int_equal(ferry__avro_write(&b2, schema, meta, badrec, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "field c"));
    /* truncated files are refused, never read past their end */
    for (size_t cut = 0; cut < b.len; cut += 7) {
        json_t *m3 = NULL, *r3 = NULL;
        int rc = ferry__avro_read((const uint8_t *)b.data, cut, &m3, &r3, NULL);
        if (rc == FERRY_OK) {
            json_decref(m3);
            json_decref(r3);
        }
    }
    ferry_buf_release(&b2);
    json_decref(badrec);
    json_decref(m2);
    json_decref(r2);
    ferry_buf_release(&b);
    json_decref(meta);
    json_decref(recs);
    json_decref(schema);
}

/* A container as Java writers make them (codec deflate: raw RFC 1951 blocks), built here
 * byte by byte from the Avro specification, two blocks, a named type referenced again. */
static void put_zz(struct ferry_buf *b, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        uint8_t c = (uint8_t)(z | 0x80);
        ferry_buf_append(b, &c, 1);
        z >>= 7;
    }
    uint8_t c = (uint8_t)z;
    ferry_buf_append(b, &c, 1);
}

static void put_str(struct ferry_buf *b, const char *s)
{
    put_zz(b, (int64_t)strlen(s));
    ferry_buf_append(b, s, strlen(s));
}

static void put_deflated(struct ferry_buf *out, const struct ferry_buf *raw, int64_t count,
                         const uint8_t *sync)
{
    uint8_t z[1024];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (Bytef *)raw->data;
    zs.avail_in = (uInt)raw->len;
    zs.next_out = z;
    zs.avail_out = sizeof z;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    size_t zn = sizeof z - zs.avail_out;
    deflateEnd(&zs);
    put_zz(out, count);
    put_zz(out, (int64_t)zn);
    ferry_buf_append(out, z, zn);
    ferry_buf_append(out, sync, 16);
}

static void test_avro_read_deflate(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\":\"record\",\"name\":\"e\",\"fields\":[{\"name\":\"a\",\"type\":{\"type\":"
        "\"record\",\"name\":\"pt\",\"fields\":[{\"name\":\"x\",\"type\":\"long\"}]}},"
        "{\"name\":\"b\",\"type\":[\"null\",\"pt\"]},{\"name\":\"s\",\"type\":\"string\"}]}";
    const uint8_t sync[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    struct ferry_buf f, raw;
    ferry_buf_init(&f, 0);
    ferry_buf_init(&raw, 0);
    ferry_buf_append(&f, "Obj\x01", 4);
    put_zz(&f, 2);
    put_str(&f, "avro.schema");
    put_str(&f, schema);
    put_str(&f, "avro.codec");
    put_str(&f, "deflate");
    put_zz(&f, 0);
    ferry_buf_append(&f, sync, 16);
    /* block 1: {a:{x:7}, b:null, s:"hi"}, {a:{x:-1}, b:{x:300}, s:""} */
    put_zz(&raw, 7);
    put_zz(&raw, 0);
    put_str(&raw, "hi");
    put_zz(&raw, -1);
    put_zz(&raw, 1);
    put_zz(&raw, 300);
    put_str(&raw, "");
    put_deflated(&f, &raw, 2, sync);
    /* block 2: {a:{x:42}, b:null, s:"snowman \u2603"} */
    raw.len = 0;
    put_zz(&raw, 42);
    put_zz(&raw, 0);
    put_str(&raw, "snowman \xe2\x98\x83");
    put_deflated(&f, &raw, 1, sync);
    json_t *meta = NULL, *recs = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    int rc = ferry__avro_read((const uint8_t *)f.data, f.len, &meta, &recs, &err);
    if (rc != FERRY_OK) fail_msg("%s", err.message);
    json_error_t je;
    json_t *want = json_loads("[{\"a\":{\"x\":7},\"b\":null,\"s\":\"hi\"},"
                              "{\"a\":{\"x\":-1},\"b\":{\"x\":300},\"s\":\"\"},"
                              "{\"a\":{\"x\":42},\"b\":null,\"s\":\"snowman \\u2603\"}]",
                              0, &je);
    assert_true(json_equal(recs, want));
    /* a wrong sync marker after a block is refused */
    ((uint8_t *)f.data)[f.len - 1] ^= 0xff;
    json_t *m2 = NULL, *r2 = NULL;
    assert_int_equal(ferry__avro_read((const uint8_t *)f.data, f.len, &m2, &r2, NULL), FERRY_EINVAL);
    json_decref(want);
    json_decref(meta);
    json_decref(recs);
    ferry_buf_release(&f);
    ferry_buf_release(&raw);
}

static void fill_times(struct ferry_row_writer *rw)
{
    /* 1969-12-31T23:30:00Z (-1800 s) and 2017-11-16T22:31:08Z */
    const int64_t v[] = {-INT64_C(1800000000), INT64_C(1510871468000000)};
    for (int i = 0; i < 2; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, v[i]);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
}

static void test_partition_transforms(void **state)
{
    (void)state;
    struct ferry_batch *b = one_column(FERRY_TYPE_TIMESTAMPTZ_US, fill_times);
    struct ferry__iceberg_pfield day, hour, bucket;
    assert_int_equal(ferry__iceberg_pfield_parse("day(c)", b->schema, &day, NULL), FERRY_OK);
    assert_int_equal(ferry__iceberg_pfield_parse("hour( c )", b->schema, &hour, NULL), FERRY_OK);
    assert_int_equal(ferry__iceberg_pfield_parse("bucket(16, c)", b->schema, &bucket, NULL), FERRY_OK);
    assert_string_equal(bucket.text, "bucket[16]");
    assert_string_equal(day.name, "c_day");
    struct ferry__iceberg_pvalue v;
    ferry__iceberg_pvalue(&day, b, 0, &v);
    assert_int_equal(v.i, -1); /* floor, not truncation toward zero */
    ferry__iceberg_pvalue(&hour, b, 0, &v);
    assert_int_equal(v.i, -1);
    struct ferry_buf p;
    ferry_buf_init(&p, 0);
    assert_int_equal(ferry__iceberg_pvalue_path(&hour, FERRY_TYPE_TIMESTAMPTZ_US, &v, &p), FERRY_OK);
    assert_int_equal(ferry_buf_append(&p, "", 1), FERRY_OK);
    assert_string_equal(p.data, "c_hour=1969-12-31-23");
    ferry__iceberg_pvalue(&day, b, 1, &v);
    assert_int_equal(v.i, 17486);
    ferry__iceberg_pvalue(&bucket, b, 1, &v);
    assert_int_equal(v.i, ferry__iceberg_bucket(-2047944441, 16));
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry__iceberg_pfield bad;
    assert_int_equal(ferry__iceberg_pfield_parse("month(c)", b->schema, &bad, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "month"));
    assert_int_equal(ferry__iceberg_pfield_parse("day(nope)", b->schema, &bad, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "nope"));
    assert_int_equal(ferry__iceberg_pfield_parse("bucket(c)", b->schema, &bad, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__iceberg_pfield_parse("bucket[8](c)", b->schema, &bad, NULL), FERRY_OK);
    assert_int_equal(bad.buckets, 8);
    assert_string_equal(bad.text, "bucket[8]");
    ferry__iceberg_pfield_release(&bad);
    assert_int_equal(ferry__iceberg_pfield_parse("bucket[0](c)", b->schema, &bad, &err), FERRY_ECONFIG);
    ferry_buf_release(&p);
    ferry__iceberg_pfield_release(&day);
    ferry__iceberg_pfield_release(&hour);
    ferry__iceberg_pfield_release(&bucket);
    ferry_batch_unref(b);
}

/* Both catalogs: create, load, commit on top, and a commit from a stale version is a
 * conflict that changes nothing. */
static void catalog_round(enum ferry__iceberg_catalog_kind kind)
{
    char dir[] = "/tmp/ferry-iceberg-unit.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *sql = ferry_asprintf("%s/cat.db", dir);
    struct ferry__iceberg_catalog *c = NULL;
    assert_int_equal(ferry__iceberg_catalog_open(kind, dir, "ns",
                                                 kind == ICEBERG_CATALOG_SQL ? sql : NULL, "cat",
                                                 &c, NULL),
                     FERRY_OK);
    json_t *meta = NULL;
    char *loc = NULL;
    int version = -1;
    assert_int_equal(ferry__iceberg_catalog_load(c, "t", &meta, &loc, &version, NULL), FERRY_OK);
    assert_null(meta);
    json_t *m1 = json_pack("{s:i}", "n", 1), *m2 = json_pack("{s:i}", "n", 2),
           *m3 = json_pack("{s:i}", "n", 3);
    char *l1 = NULL, *l2 = NULL;
    assert_int_equal(ferry__iceberg_catalog_commit(c, "t", NULL, 1, m1, &l1, NULL), FERRY_OK);
    assert_int_equal(ferry__iceberg_catalog_load(c, "t", &meta, &loc, &version, NULL), FERRY_OK);
    assert_int_equal(version, 1);
    assert_string_equal(loc, l1);
    assert_int_equal(json_integer_value(json_object_get(meta, "n")), 1);
    json_decref(meta);
    ferry_free(loc);
    assert_int_equal(ferry__iceberg_catalog_commit(c, "t", l1, 2, m2, &l2, NULL), FERRY_OK);
    /* a writer that still believes version 1 is current */
    struct ferry_error err;
    ferry_error_clear(&err);
    assert_int_equal(ferry__iceberg_catalog_commit(c, "t", l1, 2, m3, NULL, &err), FERRY_ECONFLICT);
    assert_int_equal(ferry__iceberg_catalog_load(c, "t", &meta, &loc, &version, NULL), FERRY_OK);
    assert_int_equal(json_integer_value(json_object_get(meta, "n")), 2);
    assert_string_equal(loc, l2);
    /* creating a table that exists is a conflict too */
    assert_int_equal(ferry__iceberg_catalog_commit(c, "t", NULL, 1, m3, NULL, &err), FERRY_ECONFLICT);
    char **names = NULL;
    assert_int_equal(ferry__iceberg_catalog_list(c, &names, NULL), FERRY_OK);
    assert_non_null(names[0]);
    assert_string_equal(names[0], "t");
    assert_null(names[1]);
    ferry_cfg_strv_free(names);
    json_decref(meta);
    ferry_free(loc);
    ferry_free(l1);
    ferry_free(l2);
    json_decref(m1);
    json_decref(m2);
    json_decref(m3);
    ferry__iceberg_catalog_close(c);
    char *cmd = ferry_asprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    ferry_free(cmd);
    ferry_free(sql);
}

static void test_catalog_filesystem(void **state)
{
    (void)state;
    catalog_round(ICEBERG_CATALOG_FILESYSTEM);
}

static void test_catalog_sql(void **state)
{
    (void)state;
    catalog_round(ICEBERG_CATALOG_SQL);
}

/* expire: files are looked for only under the table's location, in its data/ and metadata/
 * folders; a location this process cannot reach gets its snapshots expired all the same,
 * nothing deleted, and says why. */
static void expire_case(const char *dir, const char *location, struct ferry__iceberg_expire_result *res)
{
    struct ferry__iceberg_catalog *c = NULL;
    assert_int_equal(ferry__iceberg_catalog_open(ICEBERG_CATALOG_FILESYSTEM, dir, "ns", NULL, "cat", &c, NULL),
                     FERRY_OK);
    /* two old snapshots without files; the second is current */
    json_t *m = json_pack("{s:i,s:s,s:s,s:I,s:[{s:I,s:I},{s:I,s:I}],s:{s:{s:I,s:s}},s:[],s:[]}",
                          "format-version", 2, "table-uuid", "0e5c4a4e-7b0d-4c1e-9a53-2f4b1f7e0a11",
                          "location", location, "current-snapshot-id", (json_int_t)22,
                          "snapshots", "snapshot-id", (json_int_t)11, "timestamp-ms", (json_int_t)1000,
                          "snapshot-id", (json_int_t)22, "timestamp-ms", (json_int_t)2000, "refs",
                          "main", "snapshot-id", (json_int_t)22, "type", "branch", "snapshot-log",
                          "metadata-log");
    assert_non_null(m);
    assert_int_equal(ferry__iceberg_catalog_commit(c, "t", NULL, 1, m, NULL, NULL), FERRY_OK);
    json_decref(m);
    memset(res, 0, sizeof *res);
    struct ferry_error err;
    ferry_error_clear(&err);
    assert_int_equal(ferry__iceberg_expire(c, "t", 0, 1, false, res, &err), FERRY_OK);
    json_t *meta = NULL;
    char *loc = NULL;
    int version = 0;
    assert_int_equal(ferry__iceberg_catalog_load(c, "t", &meta, &loc, &version, NULL), FERRY_OK);
    assert_int_equal(version, 2);
    assert_int_equal(json_array_size(json_object_get(meta, "snapshots")), 1);
    json_decref(meta);
    ferry_free(loc);
    ferry__iceberg_catalog_close(c);
}

static void touch_old(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
    struct timeval tv[2] = {{1000, 0}, {1000, 0}}; /* 1970: older than any cutoff */
    assert_int_equal(utimes(path, tv), 0);
}

static void test_expire_location_scope(void **state)
{
    (void)state;
    char dir[] = "/tmp/ferry-iceberg-unit.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *tdir = ferry_asprintf("%s/ns/t", dir);
    char *cmd = ferry_asprintf("mkdir -p '%s/data' '%s/other'", tdir, tdir);
    assert_int_equal(system(cmd), 0);
    ferry_free(cmd);
    char *in_data = ferry_asprintf("%s/data/orphan.parquet", tdir);
    char *in_other = ferry_asprintf("%s/other/keep.parquet", tdir);
    touch_old(in_data);
    touch_old(in_other);

    struct ferry__iceberg_expire_result res;
    /* unreachable: nothing is looked at, the snapshot still goes */
    expire_case(dir, "gs://elsewhere/ns/t", &res);
    assert_int_equal(res.snapshots_expired, 1);
    assert_int_equal(res.files_deleted, 0);
    assert_non_null(strstr(res.unreachable, "gs://elsewhere/ns/t"));
    assert_int_equal(access(in_data, F_OK), 0);
    assert_int_equal(access(in_other, F_OK), 0);

    /* reachable (a fresh table at the same place): the orphan under data/ goes, a file
     * outside the table's data/ and metadata/ stays */
    cmd = ferry_asprintf("rm -rf '%s/metadata'", tdir);
    assert_int_equal(system(cmd), 0);
    ferry_free(cmd);
    char *uri = ferry_asprintf("file://%s", tdir);
    expire_case(dir, uri, &res);
    assert_int_equal(res.snapshots_expired, 1);
    assert_string_equal(res.unreachable, "");
    assert_int_equal(res.files_deleted, 1);
    assert_int_equal(access(in_data, F_OK), -1);
    assert_int_equal(access(in_other, F_OK), 0);

    ferry_free(uri);
    ferry_free(in_data);
    ferry_free(in_other);
    ferry_free(tdir);
    cmd = ferry_asprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    ferry_free(cmd);
}

/* ---- merge through the sink's vtable, read back by icebird -------------------------------- */

extern const struct ferry_sink_vtable ferry__iceberg_sink;

static const char *repo_root(void)
{
    static char root[1024];
    const char *env = getenv("FERRY_SRC");
    if (env != NULL) return env;
    snprintf(root, sizeof root, "%s", __FILE__);
    char *p = strstr(root, "/tests/unit/test_iceberg.c");
    assert_non_null(p);
    *p = 0;
    return root;
}

struct op_row {
    enum ferry_op op;
    int64_t id;
    const char *v;
};

static struct ferry_batch *ops_batch(struct ferry_schema *s, const struct op_row *rows, int n)
{
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "u", lim, keep, NULL);
    g_batch = NULL;
    for (int i = 0; i < n; i++) {
        ferry_rw_begin(rw, rows[i].op);
        ferry_rw_int(rw, rows[i].id);
        if (rows[i].v)
            ferry_rw_text(rw, rows[i].v, strlen(rows[i].v));
        else
            ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(g_batch);
    g_batch->digest = ferry_batch_digest(g_batch);
    return g_batch;
}

static void session(void *ctx, const struct ferry_target *tg, int64_t run, const struct op_row *rows,
                    int n)
{
    const struct ferry_sink_vtable *vt = &ferry__iceberg_sink;
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_session_info si = {.pipeline = "unit@x", .version = "v", .run_id = run, .attempt = 1};
    if (vt->begin(ctx, &si, &err) != FERRY_OK) fail_msg("begin: %s", err.message);
    struct ferry_batch *b = ops_batch(tg->schema, rows, n);
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    if (vt->apply(ctx, tg, b, &rc, &err) != FERRY_OK) fail_msg("apply: %s", err.message);
    assert_int_equal(rc.write_crc, b->digest);
    ferry_batch_unref(b);
    if (vt->commit(ctx, &err) != FERRY_OK) fail_msg("commit: %s", err.message);
}

/* partition: extra YAML of the sink section ("" for none). */
static void merge_round(const char *partition)
{
    char dir[] = "/tmp/ferry-iceberg-merge.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char yaml[512];
    snprintf(yaml, sizeof yaml, "warehouse: %s\nnamespace: db\n%s", dir, partition);
    struct ferry_cfg *cfg = NULL;
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "t", &cfg, NULL), FERRY_OK);
    const struct ferry_sink_vtable *vt = &ferry__iceberg_sink;
    void *ctx = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    if (vt->open(cfg, &ctx, &err) != FERRY_OK) fail_msg("open: %s", err.message);
    struct ferry_sink_caps caps;
    vt->capabilities(ctx, FERRY_WRITE_MERGE, &caps);
    assert_true(caps.deletes);
    assert_true(caps.write_modes & (1u << FERRY_WRITE_MERGE));
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_target tg = {.index = 0, .resource = "u", .table = "u", .schema = s,
                              .mode = FERRY_WRITE_MERGE, .read_mode = FERRY_READ_CDC};
    if (vt->prepare(ctx, &tg, &err) != FERRY_OK) fail_msg("prepare: %s", err.message);
    /* commit 1: three rows; commit 2, in one session: an update of 2, a delete of 3, an
     * insert of 4 then its update, an insert of 5 then its delete, an insert of 3 again
     * after its delete */
    const struct op_row s1[] = {{FERRY_OP_INSERT, 1, "a"}, {FERRY_OP_INSERT, 2, "b"},
                                {FERRY_OP_INSERT, 3, "c"}};
    session(ctx, &tg, 1, s1, 3);
    const struct op_row s2[] = {{FERRY_OP_UPDATE, 2, "b2"}, {FERRY_OP_DELETE, 3, NULL},
                                {FERRY_OP_INSERT, 4, "d"},  {FERRY_OP_UPDATE, 4, "d2"},
                                {FERRY_OP_INSERT, 5, "e"},  {FERRY_OP_DELETE, 5, NULL},
                                {FERRY_OP_INSERT, 6, "f"},  {FERRY_OP_DELETE, 1, NULL},
                                {FERRY_OP_INSERT, 1, "a3"}};
    session(ctx, &tg, 1, s2, 9);
    vt->close(ctx);
    ferry_cfg_free(cfg);
    ferry_schema_unref(s);

    char cmd[2048], out[600];
    snprintf(out, sizeof out, "%s/rows.txt", dir);
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/tools/read_iceberg.mjs' '%s' db u | jq -r '\"\\(.id)=\\(.v)\"' | sort > '%s'",
             repo_root(), dir, out);
    if (system(cmd) != 0) fail_msg("icebird could not read the merged table (node, jq needed)");
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char got[256] = "";
    size_t n = fread(got, 1, sizeof got - 1, f);
    got[n] = '\0';
    fclose(f);
    assert_string_equal(got, "1=a3\n2=b2\n4=d2\n6=f\n");
    /* the second snapshot carries an equality delete file and a position delete file */
    snprintf(cmd, sizeof cmd,
             "jq -e '.snapshots[1].summary | (.\"added-delete-files\" | tonumber) >= 2 and "
             ".\"added-equality-deletes\" == \"6\" and .\"added-position-deletes\" == \"2\"' "
             "'%s/db/u/metadata/v3.metadata.json' > /dev/null",
             dir);
    assert_int_equal(system(cmd), 0);
    if (partition[0] != '\0') { /* delete files sit in their partitions' folders */
        snprintf(cmd, sizeof cmd,
                 "test $(find '%s/db/u/data' -path '*id_bucket=*' -name '*.parquet' | wc -l) -ge 4",
                 dir);
        assert_int_equal(system(cmd), 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_merge_deletes(void **state)
{
    (void)state;
    merge_round("");
}

static void test_merge_deletes_partitioned(void **state)
{
    (void)state;
    merge_round("partition: {u: ['bucket(2, id)']}\n");
}

/* A partition column outside the key: a delete (its key only) could not find its partition. */
static void test_merge_partition_not_key(void **state)
{
    (void)state;
    char dir[] = "/tmp/ferry-iceberg-mergep.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char yaml[512];
    snprintf(yaml, sizeof yaml, "warehouse: %s\nnamespace: db\npartition: {u: [v]}\n", dir);
    struct ferry_cfg *cfg = NULL;
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "t", &cfg, NULL), FERRY_OK);
    void *ctx = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    assert_int_equal(ferry__iceberg_sink.open(cfg, &ctx, &err), FERRY_OK);
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_target tg = {.index = 0, .resource = "u", .table = "u", .schema = s,
                              .mode = FERRY_WRITE_UPSERT, .read_mode = FERRY_READ_FULL};
    assert_int_equal(ferry__iceberg_sink.prepare(ctx, &tg, &err), FERRY_EUNSUPPORTED);
    assert_non_null(strstr(err.message, "v is not"));
    ferry__iceberg_sink.close(ctx);
    ferry_cfg_free(cfg);
    ferry_schema_unref(s);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The metadata log: appended, trimmed to write.metadata.previous-versions-max (oldest off
 * first, reported in dropped), default 100; metadata file numbers by name. */
static void test_metadata_log(void **state)
{
    (void)state;
    json_t *m = json_pack("{s:{s:s},s:[]}", "properties", "write.metadata.previous-versions-max",
                          "2", "metadata-log");
    json_t *dropped = json_array();
    assert_int_equal(ferry__iceberg_meta_log(m, "file:///w/metadata/v1.metadata.json", 10, dropped), FERRY_OK);
    assert_int_equal(ferry__iceberg_meta_log(m, "file:///w/metadata/v2.metadata.json", 20, dropped), FERRY_OK);
    assert_int_equal(json_array_size(dropped), 0);
    assert_int_equal(ferry__iceberg_meta_log(m, "file:///w/metadata/v3.metadata.json", 30, dropped), FERRY_OK);
    json_t *log = json_object_get(m, "metadata-log");
    assert_int_equal(json_array_size(log), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(log, 0), "metadata-file")),
                        "file:///w/metadata/v2.metadata.json");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(log, 1), "timestamp-ms")), 30);
    assert_int_equal(json_array_size(dropped), 1);
    assert_string_equal(json_string_value(json_array_get(dropped, 0)), "file:///w/metadata/v1.metadata.json");
    assert_false(ferry__iceberg_meta_delete_after_commit(m));
    json_object_set_new(json_object_get(m, "properties"), "write.metadata.delete-after-commit.enabled",
                        json_string("TRUE"));
    assert_true(ferry__iceberg_meta_delete_after_commit(m));
    /* no properties, no log yet: created, default of 100 */
    json_t *n = json_object();
    for (int i = 0; i < 105; i++) assert_int_equal(ferry__iceberg_meta_log(n, "v.metadata.json", i, NULL), FERRY_OK);
    assert_int_equal(json_array_size(json_object_get(n, "metadata-log")), 100);
    /* a property that is no number: the default */
    json_object_set_new(n, "properties", json_pack("{s:s}", "write.metadata.previous-versions-max", "x"));
    assert_int_equal(ferry__iceberg_meta_log(n, "v.metadata.json", 0, NULL), FERRY_OK);
    assert_int_equal(json_array_size(json_object_get(n, "metadata-log")), 100);
    assert_int_equal(ferry__iceberg_meta_version("s3://b/t/metadata/v12.metadata.json"), 12);
    assert_int_equal(ferry__iceberg_meta_version("00007-5b1e8c3a-1f2d-4e5f-8a9b-0c1d2e3f4a5b.metadata.json"), 7);
    assert_int_equal(ferry__iceberg_meta_version("/w/metadata/version-hint.text"), -1);
    assert_int_equal(ferry__iceberg_meta_version("snap-1-uuid.avro"), -1);
    assert_int_equal(ferry__iceberg_meta_version("vx.metadata.json"), -1);
    assert_int_equal(ferry__iceberg_meta_version("v3x.metadata.json"), -1);
    assert_int_equal(ferry__iceberg_meta_version(".metadata.json"), -1);
    json_decref(dropped);
    json_decref(m);
    json_decref(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_log),
        cmocka_unit_test(test_murmur3_spec_vectors),
        cmocka_unit_test(test_decimal_minimal_bytes),
        cmocka_unit_test(test_single_value_bounds),
        cmocka_unit_test(test_writer_stats_match_per_row),
        cmocka_unit_test(test_avro_binary_encoding),
        cmocka_unit_test(test_avro_read_deflate),
        cmocka_unit_test(test_partition_transforms),
        cmocka_unit_test(test_catalog_filesystem),
        cmocka_unit_test(test_catalog_sql),
        cmocka_unit_test(test_expire_location_scope),
        cmocka_unit_test(test_merge_deletes),
        cmocka_unit_test(test_merge_deletes_partitioned),
        cmocka_unit_test(test_merge_partition_not_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
