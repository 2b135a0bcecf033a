/* tests/unit/test_parquet.c - the Parquet writer, checked by readers ferry did not write.
 *
 * Files covering every ferry type (nulls in every column, extremes, NaN/±Inf, empty and
 * unicode strings, pre-1970 times, decimal(38,10) max) are written with every codec,
 * dictionary on and off, several row groups and pages, then read back by DuckDB
 * (@duckdb/node-api) and hyparquet through tests/tools/read_parquet.mjs, and every value
 * and type is compared exactly with what was written. Column statistics are read back
 * through DuckDB's parquet_metadata(). Node and tests/tools/node_modules are required
 * (scripts/install-deps.sh installs them): the test fails when they are missing. */
#include "unit.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "batch/builder.h"
#include "formats/parquet_writer.h"
#include "ferry/core.h"

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

enum { C_ID, C_FLAG, C_TINY, C_SMALL, C_MEDIUM, C_BIG, C_F32, C_F64, C_DEC38, C_DEC9, C_DEC18,
       C_EXACT, C_NAME, C_BLOB, C_DAY, C_CLOCK, C_AT, C_ATZ, C_UID, C_DOC, C_DEC20, C_DEC28, NCOLS };

static const struct {
    const char *name;
    enum ferry_type type;
    int precision, scale;
    const char *duck; /* DuckDB's type name */
    const char *hyp;  /* hyparquet's view of the footer */
} cols[NCOLS] = {
    {"id", FERRY_TYPE_INT64, 0, 0, "BIGINT", "INT64/INTEGER(64,true)"},
    {"flag", FERRY_TYPE_BOOL, 0, 0, "BOOLEAN", "BOOLEAN/"},
    {"tiny", FERRY_TYPE_INT8, 0, 0, "TINYINT", "INT32/INTEGER(8,true)"},
    {"small", FERRY_TYPE_INT16, 0, 0, "SMALLINT", "INT32/INTEGER(16,true)"},
    {"medium", FERRY_TYPE_INT32, 0, 0, "INTEGER", "INT32/INTEGER(32,true)"},
    {"big", FERRY_TYPE_INT64, 0, 0, "BIGINT", "INT64/INTEGER(64,true)"},
    {"f32", FERRY_TYPE_FLOAT32, 0, 0, "FLOAT", "FLOAT/"},
    {"f64", FERRY_TYPE_FLOAT64, 0, 0, "DOUBLE", "DOUBLE/"},
    {"dec38", FERRY_TYPE_DECIMAL128, 38, 10, "DECIMAL(38,10)", "FIXED_LEN_BYTE_ARRAY(16)/DECIMAL(38,10)"},
    {"dec9", FERRY_TYPE_DECIMAL128, 9, 2, "DECIMAL(9,2)", "INT32/DECIMAL(9,2)"},
    {"dec18", FERRY_TYPE_DECIMAL128, 18, 4, "DECIMAL(18,4)", "INT64/DECIMAL(18,4)"},
    {"exact", FERRY_TYPE_DECIMAL_TEXT, 0, 0, "VARCHAR", "BYTE_ARRAY/STRING"},
    {"name \"q\" é", FERRY_TYPE_UTF8, 0, 0, "VARCHAR", "BYTE_ARRAY/STRING"},
    {"blob", FERRY_TYPE_BINARY, 0, 0, "BLOB", "BYTE_ARRAY/"},
    {"day", FERRY_TYPE_DATE32, 0, 0, "DATE", "INT32/DATE"},
    {"clock", FERRY_TYPE_TIME64_US, 0, 0, "TIME", "INT64/TIME(MICROS,false)"},
    {"at", FERRY_TYPE_TIMESTAMP_US, 0, 0, "TIMESTAMP", "INT64/TIMESTAMP(MICROS,false)"},
    {"atz", FERRY_TYPE_TIMESTAMPTZ_US, 0, 0, "TIMESTAMP WITH TIME ZONE", "INT64/TIMESTAMP(MICROS,true)"},
    {"uid", FERRY_TYPE_UUID, 0, 0, "UUID", "FIXED_LEN_BYTE_ARRAY(16)/UUID"},
    {"doc", FERRY_TYPE_JSON, 0, 0, "VARCHAR", "BYTE_ARRAY/JSON"},
    /* the minimum width for the precision (Iceberg spec; issue 23): 9 and 12 bytes, not 16 */
    {"dec20", FERRY_TYPE_DECIMAL128, 20, 2, "DECIMAL(20,2)", "FIXED_LEN_BYTE_ARRAY(9)/DECIMAL(20,2)"},
    {"dec28", FERRY_TYPE_DECIMAL128, 28, 6, "DECIMAL(28,6)", "FIXED_LEN_BYTE_ARRAY(12)/DECIMAL(28,6)"},
};

struct cell {
    bool null;
    bool b;
    int64_t i;
    double f;
    i128 d;
    uint8_t fixed[16];
    char bytes[64];
    size_t len;
};

static i128 pow10_128(int n)
{
    i128 v = 1;
    while (n-- > 0)
        v *= 10;
    return v;
}

/* Row r, column c. Rows 0..7 are never null and carry the extremes; later rows have a
 * null in every column every 5 rows, at a different row per column. */
static void cell_of(int64_t r, int c, struct cell *o)
{
    memset(o, 0, sizeof(*o));
    o->null = c > 0 && r >= 8 && (r * 7 + c * 3) % 5 == 0;
    if (o->null)
        return;
    int64_t sign = r % 2 ? -1 : 1;
    switch (c) {
    case C_ID: o->i = r; break;
    case C_FLAG: o->b = (r + c) % 3 == 0; break;
    case C_TINY: o->i = r == 1 ? INT8_MIN : r == 2 ? INT8_MAX : (r * 37) % 256 - 128; break;
    case C_SMALL: o->i = r == 1 ? INT16_MIN : r == 2 ? INT16_MAX : (r * 1009) % 65536 - 32768; break;
    case C_MEDIUM: o->i = r == 1 ? INT32_MIN : r == 2 ? INT32_MAX : r * 100003 - 500000000; break;
    case C_BIG: o->i = r == 1 ? INT64_MIN : r == 2 ? INT64_MAX : sign * r * 1000000000007LL; break;
    case C_F32:
        o->f = r == 1 ? -INFINITY : r == 2 ? INFINITY : r == 3 ? NAN : r == 4 ? -0.0
                                                                 : (double)r / 4.0 - 3.0;
        break;
    case C_F64:
        o->f = r == 1 ? -INFINITY : r == 2 ? INFINITY : r == 3 ? NAN : r == 4 ? -0.0
               : r == 5 ? 1.7976931348623157e308 : r == 6 ? 4.9e-324 : (double)r * 1.1 - 0.25;
        break;
    case C_DEC38:
        o->d = r == 1 ? -(pow10_128(38) - 1) : r == 2 ? pow10_128(38) - 1
                                                      : (i128)sign * (r * 12345 + 1) * pow10_128(r % 20);
        break;
    case C_DEC20:
        o->d = r == 1 ? -(pow10_128(20) - 1) : r == 2 ? pow10_128(20) - 1
                                                      : (i128)sign * (r * 12345 + 1) * pow10_128(r % 12);
        break;
    case C_DEC28:
        o->d = r == 1 ? -(pow10_128(28) - 1) : r == 2 ? pow10_128(28) - 1
                                                      : (i128)sign * (r * 12345 + 1) * pow10_128(r % 20);
        break;
    case C_DEC9: o->d = r == 1 ? -999999999 : r == 2 ? 999999999 : sign * ((r * 12345 + 1) % 1000000000); break;
    case C_DEC18:
        o->d = r == 1 ? -999999999999999999LL : r == 2 ? 999999999999999999LL : sign * r * 1000003LL;
        break;
    case C_EXACT:
        o->len = r == 3 ? (size_t)snprintf(o->bytes, sizeof o->bytes, "NaN")
                        : (size_t)snprintf(o->bytes, sizeof o->bytes, "%s%lld.%02lld",
                                           sign < 0 ? "-" : "", (long long)r, (long long)(r % 100));
        break;
    case C_NAME:
        if (r == 0 || r % 11 == 0)
            o->len = 0; /* empty string, not null */
        else if (r == 2)
            o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "\xf4\x8f\xbf\xbf"); /* U+10FFFF */
        else if (r < 1000) /* 97 values repeated: the dictionary has work to do */
            o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "row-%lld-%.*s😀名",
                                      (long long)(r % 97), (int)(r % 97 % 5) * 2, "ééééé");
        else /* then distinct values: a dictionary overflows, or is not worth it */
            o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "row-%lld-😀", (long long)r);
        break;
    case C_BLOB:
        o->len = (size_t)(r % 7);
        for (size_t k = 0; k < o->len; k++)
            o->bytes[k] = (char)(k == 0 ? 0 : k == 1 ? 0xff : (r + (int64_t)k * 51) & 0xff);
        break;
    case C_DAY: o->i = r == 1 ? -719162 : r == 2 ? 2932896 : 19000 + r - 30000; break;
    case C_CLOCK: o->i = r == 1 ? 0 : r == 2 ? 86399999999LL : (r * 1000003) % 86400000000LL; break;
    case C_AT:
        o->i = r == 1 ? -62135596800000000LL : r == 2 ? 253402300799999999LL : -(r * 7919000001LL) + r;
        break;
    case C_ATZ: o->i = r == 3 ? -1 : 1600000000000000LL - r * 999999937LL; break;
    case C_UID:
        for (int k = 0; k < 16; k++)
            o->fixed[k] = r == 1 ? 0 : r == 2 ? 0xff : (uint8_t)(r * 16 + k);
        break;
    case C_DOC:
        o->len = (size_t)snprintf(o->bytes, sizeof o->bytes, "{\"r\":%lld,\"s\":\"é\"}", (long long)r);
        break;
    }
}

static struct ferry_schema *make_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    for (int c = 0; c < NCOLS; c++) {
        assert_int_equal(ferry_schema_add_field(s, cols[c].name, cols[c].type, c > 0, NULL), FERRY_OK);
        s->fields[c].precision = cols[c].precision ? cols[c].precision : s->fields[c].precision;
        s->fields[c].scale = cols[c].scale;
    }
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static int take(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct ferry_batch **slot = ctx;
    assert_null(*slot);
    *slot = b;
    return FERRY_OK;
}

static struct ferry_batch *make_batch(struct ferry_schema *s, int64_t first, int64_t n)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = n + 1, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, take, &out);
    assert_non_null(rw);
    for (int64_t r = first; r < first + n; r++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int c = 0; c < NCOLS; c++) {
            struct cell v;
            cell_of(r, c, &v);
            if (v.null) {
                ferry_rw_null(rw);
                continue;
            }
            switch (cols[c].type) {
            case FERRY_TYPE_BOOL: ferry_rw_bool(rw, v.b); break;
            case FERRY_TYPE_FLOAT32:
            case FERRY_TYPE_FLOAT64: ferry_rw_float(rw, v.f); break;
            case FERRY_TYPE_DECIMAL128: {
                struct ferry_decimal128 d = {(uint64_t)v.d, (int64_t)(v.d >> 64)};
                ferry_rw_dec128(rw, d);
                break;
            }
            case FERRY_TYPE_UUID: ferry_rw_fixed(rw, v.fixed, 16); break;
            case FERRY_TYPE_DECIMAL_TEXT:
            case FERRY_TYPE_UTF8:
            case FERRY_TYPE_BINARY:
            case FERRY_TYPE_JSON: ferry_rw_text(rw, v.bytes, v.len); break;
            default: ferry_rw_int(rw, v.i); break;
            }
        }
        struct ferry_error err;
        if (ferry_rw_end(rw, &err) != FERRY_OK)
            fail_msg("row %lld: %s", (long long)r, err.message);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(out);
    return out;
}

/* ---- files and the node reader ------------------------------------------------------- */

static char tmpdir[256];

static int file_write(void *ctx, const void *p, size_t n)
{
    return fwrite(p, 1, n, ctx) == n ? FERRY_OK : FERRY_EIO;
}

static const char *repo_root(void)
{
    static char root[1024];
    const char *env = getenv("FERRY_SRC");
    if (env != NULL)
        return env;
    snprintf(root, sizeof root, "%s", __FILE__);
    char *p = strstr(root, "/tests/unit/test_parquet.c");
    assert_non_null(p);
    *p = 0;
    return root;
}

/* Runs the reader; returns the output lines as parsed JSON (array of lines). */
static json_t *read_back(const char *path, const char *reader, const char *sql)
{
    char out[512], cmd[4096];
    snprintf(out, sizeof out, "%s/read.jsonl", tmpdir);
    /* the query travels in the environment: it holds both kinds of quotes */
    snprintf(cmd, sizeof cmd, "node '%s/tests/tools/read_parquet.mjs' %s%s '%s' > '%s'",
             repo_root(), strcmp(reader, "stats") == 0 ? "--" : "--reader=", reader, path, out);
    if (sql != NULL)
        setenv("FERRY_READ_SQL", sql, 1);
    int rc = system(cmd);
    unsetenv("FERRY_READ_SQL");
    if (rc != 0)
        fail_msg("%s reader failed (exit %d) on %s: node and tests/tools packages are required "
                 "(run scripts/install-deps.sh or `npm ci --prefix tests/tools`)",
                 reader, rc, path);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    json_t *lines = json_array();
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *j = json_loads(line, JSON_ALLOW_NUL, &je);
        if (j == NULL)
            fail_msg("bad reader output: %s", je.text);
        json_array_append_new(lines, j);
    }
    free(line);
    fclose(f);
    return lines;
}

static void expect_text(const char *got, int64_t r, int c, const char *want)
{
    if (got == NULL || strcmp(got, want) != 0)
        fail_msg("row %lld column %s: got %s, want %s", (long long)r, cols[c].name,
                 got ? got : "null", want);
}

static void i128_text(i128 v, char *buf)
{
    char tmp[64];
    int n = 0;
    bool neg = v < 0;
    u128 u = neg ? (u128)0 - (u128)v : (u128)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u > 0);
    int k = 0;
    if (neg)
        buf[k++] = '-';
    while (n > 0)
        buf[k++] = tmp[--n];
    buf[k] = 0;
}

static void hex_text(const uint8_t *p, size_t n, char *buf)
{
    for (size_t k = 0; k < n; k++)
        sprintf(buf + 2 * k, "%02x", p[k]);
    buf[2 * n] = 0;
}

static void check_value(json_t *jv, int64_t r, int c, bool hyparquet)
{
    struct cell v;
    cell_of(r, c, &v);
    if (v.null) {
        if (!json_is_null(jv))
            fail_msg("row %lld column %s: want null", (long long)r, cols[c].name);
        return;
    }
    const char *got = json_string_value(jv);
    if (got == NULL)
        fail_msg("row %lld column %s: unexpected null", (long long)r, cols[c].name);
    char want[256];
    switch (cols[c].type) {
    case FERRY_TYPE_BOOL: expect_text(got, r, c, v.b ? "true" : "false"); return;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: {
        double d = strtod(got, NULL);
        bool ok = isnan(v.f) ? isnan(d)
                  : cols[c].type == FERRY_TYPE_FLOAT32 ? (float)d == (float)v.f
                                                       : d == v.f;
        if (!ok)
            fail_msg("row %lld column %s: got %s, want %.17g", (long long)r, cols[c].name, got, v.f);
        return;
    }
    case FERRY_TYPE_DECIMAL128:
        if (hyparquet) { /* hyparquet hands decimals out as doubles: compare as one */
            double want_d = (double)v.d / pow(10, cols[c].scale), d = strtod(got, NULL);
            if (fabs(d - want_d) > fabs(want_d) * 1e-15)
                fail_msg("row %lld column %s: got %s, want %.17g", (long long)r, cols[c].name, got,
                         want_d);
            return;
        }
        i128_text(v.d, want);
        break;
    case FERRY_TYPE_UUID:
        hex_text(v.fixed, 16, want);
        memmove(want + 24, want + 20, 13);
        want[23] = '-';
        memmove(want + 19, want + 16, 4);
        want[18] = '-';
        memmove(want + 14, want + 12, 4);
        want[13] = '-';
        memmove(want + 9, want + 8, 4);
        want[8] = '-';
        want[36] = 0;
        break;
    case FERRY_TYPE_BINARY: hex_text((const uint8_t *)v.bytes, v.len, want); break;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_DECIMAL_TEXT:
        if (json_string_length(jv) != v.len || memcmp(got, v.bytes, v.len) != 0)
            fail_msg("row %lld column %s: got \"%s\", want \"%.*s\"", (long long)r, cols[c].name,
                     got, (int)v.len, v.bytes);
        return;
    default: snprintf(want, sizeof want, "%lld", (long long)v.i); break;
    }
    expect_text(got, r, c, want);
}

/* Reads the file with both readers and checks rows [0, n) in order. */
static void verify_file(const char *path, int64_t n)
{
    const char *readers[] = {"duckdb", "hyparquet"};
    for (int k = 0; k < 2; k++) {
        bool hyp = k == 1;
        json_t *lines = read_back(path, readers[k], NULL);
        json_t *head = json_array_get(lines, 0);
        assert_non_null(head);
        json_t *jc = json_object_get(head, "columns");
        assert_int_equal(json_array_size(jc), NCOLS);
        for (int c = 0; c < NCOLS; c++) {
            json_t *col = json_array_get(jc, (size_t)c);
            const char *name = json_string_value(json_object_get(col, "name"));
            const char *type = json_string_value(json_object_get(col, "type"));
            assert_string_equal(name, cols[c].name);
            if (strcmp(type, hyp ? cols[c].hyp : cols[c].duck) != 0)
                fail_msg("%s: column %s has type %s, want %s", readers[k], cols[c].name, type,
                         hyp ? cols[c].hyp : cols[c].duck);
        }
        assert_int_equal(json_array_size(lines), (size_t)n + 1);
        for (int64_t r = 0; r < n; r++) {
            json_t *row = json_array_get(lines, (size_t)r + 1);
            /* DuckDB keeps file order for a plain scan of one file */
            for (int c = 0; c < NCOLS; c++)
                check_value(json_array_get(row, (size_t)c), r, c, hyp);
        }
        json_decref(lines);
    }
}

/* Writes rows [0, n) in batches of `step` (every other one a slice with an offset). */
static void write_file(const char *path, const struct ferry_parquet_options *o, int64_t n, int64_t step)
{
    struct ferry_schema *s = make_schema();
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    struct ferry_parquet_writer *w = NULL;
    struct ferry_error err;
    if (ferry__parquet_open(s, o, file_write, f, &w, &err) != FERRY_OK)
        fail_msg("open: %s", err.message);
    for (int64_t r = 0; r < n; r += step) {
        int64_t m = r + step <= n ? step : n - r;
        if ((r / step) % 2 == 1) {
            struct ferry_batch *b = make_batch(s, r - 3, m + 5);
            struct ferry_batch *sl = ferry_batch_slice(b, 3, m);
            if (ferry__parquet_write_batch(w, sl, &err) != FERRY_OK)
                fail_msg("write: %s", err.message);
            ferry_batch_unref(sl);
            ferry_batch_unref(b);
        } else {
            struct ferry_batch *b = make_batch(s, r, m);
            if (ferry__parquet_write_batch(w, b, &err) != FERRY_OK)
                fail_msg("write: %s", err.message);
            ferry_batch_unref(b);
        }
    }
    assert_int_equal(ferry__parquet_rows(w), n);
    int64_t bytes = 0;
    if (ferry__parquet_close(w, &bytes, &err) != FERRY_OK)
        fail_msg("close: %s", err.message);
    assert_int_equal(bytes, ftell(f));
    ferry__parquet_free(w);
    fclose(f);
    ferry_schema_unref(s);
}

static int64_t duck_int(const char *path, const char *sql)
{
    json_t *lines = read_back(path, "duckdb", sql);
    const char *v = json_string_value(json_array_get(json_array_get(lines, 1), 0));
    assert_non_null(v);
    int64_t x = strtoll(v, NULL, 10);
    json_decref(lines);
    return x;
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_every_codec_and_encoding(void **state)
{
    (void)state;
    const enum ferry_parquet_codec codecs[] = {FERRY_PARQUET_ZSTD, FERRY_PARQUET_SNAPPY,
                                               FERRY_PARQUET_GZIP, FERRY_PARQUET_NONE};
    const char *codec_names[] = {"ZSTD", "SNAPPY", "GZIP", "UNCOMPRESSED"};
    for (int k = 0; k < 4; k++) {
        for (int dict = 0; dict < 2; dict++) {
            struct ferry_parquet_options o;
            ferry__parquet_options_default(&o);
            o.codec = codecs[k];
            o.dictionary = dict;
            o.row_group_bytes = 96 * 1024; /* several row groups */
            o.page_bytes = 8 * 1024;       /* several pages per chunk */
            char path[512];
            snprintf(path, sizeof path, "%s/t_%d_%d.parquet", tmpdir, k, dict);
            write_file(path, &o, 3000, 700);
            verify_file(path, 3000);
            char sql[512];
            snprintf(sql, sizeof sql,
                     "SELECT count(DISTINCT row_group_id) FROM parquet_metadata($1)");
            int64_t groups = duck_int(path, sql);
            if (groups < 3)
                fail_msg("%s: %lld row groups, want several", path, (long long)groups);
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM parquet_metadata($1) WHERE compression <> '%s'",
                     codec_names[k]);
            assert_int_equal(duck_int(path, sql), 0);
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM parquet_metadata($1) WHERE path_in_schema = 'name \"q\" é' "
                     "AND encodings LIKE '%%RLE_DICTIONARY%%'");
            int64_t dict_chunks = duck_int(path, sql);
            /* Row groups of rows < 1000 repeat 97 names (dictionary), later ones are all
             * distinct (PLAIN: the chunk's first page decides). */
            if (dict ? dict_chunks < 1 || dict_chunks == groups : dict_chunks != 0)
                fail_msg("%s: %lld dictionary chunks of %lld", path, (long long)dict_chunks,
                         (long long)groups);
        }
    }
}

static void test_dictionary_fallback(void **state)
{
    (void)state;
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    o.dictionary_bytes = 4000; /* 97 repeated names fit; the distinct ones after row 1000 pass it */
    char path[512];
    snprintf(path, sizeof path, "%s/fallback.parquet", tmpdir);
    write_file(path, &o, 2000, 2000);
    verify_file(path, 2000);
    assert_int_equal(duck_int(path, "SELECT count(*) FROM parquet_metadata($1) WHERE "
                                    "path_in_schema = 'name \"q\" é' AND encodings LIKE '%PLAIN%' "
                                    "AND encodings LIKE '%RLE_DICTIONARY%'"),
                     1);
}

static void test_statistics(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/stats.parquet", tmpdir);
    write_file(path, NULL, 100, 100); /* one row group */
    json_t *lines = read_back(path, "duckdb",
                              "SELECT path_in_schema, stats_min_value, stats_max_value, "
                              "stats_null_count::VARCHAR FROM parquet_metadata($1) ORDER BY column_id");
    assert_int_equal(json_array_size(lines), NCOLS + 1);
    static const char *want[NCOLS][2] = {
        [C_ID] = {"0", "99"},
        [C_TINY] = {"-128", "127"},
        [C_MEDIUM] = {"-2147483648", "2147483647"},
        [C_BIG] = {"-9223372036854775808", "9223372036854775807"},
        [C_DEC38] = {"-9999999999999999999999999999.9999999999", "9999999999999999999999999999.9999999999"},
        [C_DEC9] = {"-9999999.99", "9999999.99"},
        [C_DEC20] = {"-999999999999999999.99", "999999999999999999.99"},
        [C_DEC28] = {"-9999999999999999999999.999999", "9999999999999999999999.999999"},
        [C_NAME] = {"", "\xf4\x8f\xbf\xbf"},
        [C_DAY] = {"0001-01-01", "9999-12-31"},
        [C_AT] = {"0001-01-01 00:00:00", "9999-12-31 23:59:59.999999"},
    };
    for (int c = 0; c < NCOLS; c++) {
        json_t *row = json_array_get(lines, (size_t)c + 1);
        const char *mn = json_string_value(json_array_get(row, 1));
        const char *mx = json_string_value(json_array_get(row, 2));
        const char *nulls = json_string_value(json_array_get(row, 3));
        int64_t want_nulls = 0;
        for (int64_t r = 0; r < 100; r++) {
            struct cell v;
            cell_of(r, c, &v);
            want_nulls += v.null;
        }
        if (nulls == NULL || strtoll(nulls, NULL, 10) != want_nulls)
            fail_msg("column %s: null_count %s, want %lld", cols[c].name, nulls ? nulls : "null",
                     (long long)want_nulls);
        if (c > 0)
            assert_true(want_nulls > 0);
        if (want[c][0] == NULL)
            continue;
        if (mn == NULL || mx == NULL || strcmp(mn, want[c][0]) != 0 || strcmp(mx, want[c][1]) != 0)
            fail_msg("column %s: stats [%s, %s], want [%s, %s]", cols[c].name, mn ? mn : "null",
                     mx ? mx : "null", want[c][0], want[c][1]);
    }
    json_decref(lines);
    /* DuckDB leaves float statistics out (NaN is not in them); hyparquet decodes them */
    lines = read_back(path, "stats", NULL);
    int seen = 0;
    for (size_t i = 1; i < json_array_size(lines); i++) {
        json_t *row = json_array_get(lines, i);
        const char *col = json_string_value(json_array_get(row, 1));
        if (strcmp(col, "f32") == 0 || strcmp(col, "f64") == 0) {
            assert_string_equal(json_string_value(json_array_get(row, 2)), "-Infinity");
            assert_string_equal(json_string_value(json_array_get(row, 3)), "Infinity");
            seen++;
        }
        if (strcmp(col, "big") == 0) {
            assert_string_equal(json_string_value(json_array_get(row, 2)), "-9223372036854775808");
            seen++;
        }
    }
    assert_int_equal(seen, 3);
    json_decref(lines);
    /* the statistics let DuckDB answer from the footer and prune: the same bounds again */
    lines = read_back(path, "duckdb",
                      "SELECT min(big)::VARCHAR, max(big)::VARCHAR, min(\"name \"\"q\"\" é\"), "
                      "count(*) FILTER (WHERE f64 > 1e308)::VARCHAR FROM read_parquet($1)");
    json_t *row = json_array_get(lines, 1);
    assert_string_equal(json_string_value(json_array_get(row, 0)), "-9223372036854775808");
    assert_string_equal(json_string_value(json_array_get(row, 1)), "9223372036854775807");
    assert_string_equal(json_string_value(json_array_get(row, 2)), "");
    /* max double, +inf, and NaN, which DuckDB orders above every number */
    assert_string_equal(json_string_value(json_array_get(row, 3)), "3");
    json_decref(lines);
}

static void test_empty_file(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/empty.parquet", tmpdir);
    write_file(path, NULL, 0, 1);
    verify_file(path, 0);
}

static int failing_write(void *ctx, const void *p, size_t n)
{
    (void)p;
    size_t *left = ctx;
    if (n > *left)
        return FERRY_ENOSPC;
    *left -= n;
    return FERRY_OK;
}

static void test_errors(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_parquet_writer *w = NULL;
    size_t left = SIZE_MAX;

    struct ferry_schema *neg = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(neg, "amount", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    neg->fields[0].precision = 10;
    neg->fields[0].scale = -2;
    assert_int_equal(ferry_schema_finish(neg, NULL), FERRY_OK);
    assert_int_equal(ferry__parquet_open(neg, NULL, failing_write, &left, &w, &err), FERRY_EUNSUPPORTED);
    assert_null(w);
    assert_non_null(strstr(err.message, "column amount"));
    ferry_schema_unref(neg);

    enum ferry_parquet_codec codec;
    assert_int_equal(ferry__parquet_codec_from_name("snappy", &codec, &err), FERRY_OK);
    assert_int_equal(codec, FERRY_PARQUET_SNAPPY);
    assert_int_equal(ferry__parquet_codec_from_name("lzo", &codec, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "lzo"));

    /* a null in a non-nullable column */
    struct ferry_schema *s = make_schema();
    struct ferry_schema *strict = ferry_schema_new();
    for (int c = 0; c < NCOLS; c++) {
        assert_int_equal(ferry_schema_add_field(strict, cols[c].name, cols[c].type, c != C_NAME, NULL),
                         FERRY_OK);
        strict->fields[c].precision = s->fields[c].precision;
        strict->fields[c].scale = s->fields[c].scale;
    }
    assert_int_equal(ferry_schema_finish(strict, NULL), FERRY_OK);
    assert_int_equal(ferry__parquet_open(strict, NULL, failing_write, &left, &w, &err), FERRY_OK);
    struct ferry_batch *b = make_batch(s, 0, 200); /* has nulls in every nullable column */
    struct ferry_batch *nn = make_batch(s, 0, 5);  /* rows 0..7 are never null */
    assert_int_equal(ferry__parquet_write_batch(w, nn, &err), FERRY_OK);
    assert_int_equal(ferry__parquet_write_batch(w, b, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column name \"q\" é"));
    ferry__parquet_free(w);

    /* the write callback fails: the code comes back, the writer refuses more */
    left = 1000;
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    o.row_group_bytes = 4096;
    assert_int_equal(ferry__parquet_open(s, &o, failing_write, &left, &w, &err), FERRY_OK);
    assert_int_equal(ferry__parquet_write_batch(w, b, &err), FERRY_ENOSPC);
    assert_non_null(strstr(err.message, "failed"));
    assert_int_not_equal(ferry__parquet_close(w, NULL, &err), FERRY_OK);
    ferry__parquet_free(w);
    ferry__parquet_free(NULL);

    /* a batch of another schema */
    assert_int_equal(ferry__parquet_open(strict, NULL, failing_write, &(size_t){SIZE_MAX}, &w, &err),
                     FERRY_OK);
    struct ferry_schema *other = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(other, "x", FERRY_TYPE_INT64, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(other, NULL), FERRY_OK);
    struct ferry_batch *ob = ferry_batch_new(other, "t");
    assert_int_equal(ferry__parquet_write_batch(w, ob, &err), FERRY_EINVAL);
    ferry_batch_unref(ob);
    ferry_schema_unref(other);
    ferry__parquet_free(w);

    ferry_batch_unref(b);
    ferry_batch_unref(nn);
    ferry_schema_unref(strict);
    ferry_schema_unref(s);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ferry_parquet_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    if (getenv("FERRY_KEEP_TMP")) return 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_statistics),
        cmocka_unit_test(test_dictionary_fallback),
        cmocka_unit_test(test_every_codec_and_encoding),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
