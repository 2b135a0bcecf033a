/* tests/unit/test_files.c - the files connector: CSV and JSON Lines readers and writers,
 * compressed inputs, the sink's parts and manifest, the source's resume inside a file.
 * Everything on real files in a mkdtemp folder. */
#include <ftw.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include "unit.h"
#include "connector_harness.h"
#include "formats/text.h"
#include "ferry/crc32c.h"

static char dir[256];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ferry-files-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!getenv("KEEP")) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static char *path_of(const char *name)
{
    static char p[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put_file(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put_text(const char *name, const char *text)
{
    put_file(name, text, strlen(text));
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    b[len] = '\0';
    fclose(f);
    if (n) *n = (size_t)len;
    return b;
}

/* ---- reading records ------------------------------------------------------------------------ */

struct rd {
    struct ferry__files_input *in;
    struct ferry__files_reader *r;
};

static struct rd open_rd(const char *name, enum ferry__files_fmt fmt,
                         const struct ferry__files_csv_opts *o)
{
    struct rd d;
    struct ferry_error err;
    ASSERT_OK(ferry__files_input_open(path_of(name), &d.in, &err), err);
    d.r = ferry__files_reader_new(fmt, o, d.in, name);
    assert_non_null(d.r);
    return d;
}

static void close_rd(struct rd *d)
{
    ferry__files_reader_free(d->r);
    ferry__files_input_close(d->in);
}

/* The record as "a|b|<null>" text; returns the reader's code. */
static int next_text(struct rd *d, char *out, size_t len, bool *eof, struct ferry_error *err)
{
    int rc = ferry__files_reader_next(d->r, eof, err);
    out[0] = '\0';
    if (rc != FERRY_OK || *eof) return rc;
    size_t k = 0;
    for (int i = 0; i < ferry__files_reader_nfields(d->r); i++) {
        const struct ferry__files_field *f = ferry__files_reader_field(d->r, i);
        const char *t = f->kind == FILES_KIND_NULL ? "<null>" : ferry__files_reader_text(d->r, f);
        k += (size_t)snprintf(out + k, len - k, "%s%s", i ? "|" : "", t);
    }
    return rc;
}

static const struct ferry__files_csv_opts csv_default = {',', '"', 0, ""};

static void expect_records(const char *name, enum ferry__files_fmt fmt,
                           const struct ferry__files_csv_opts *o, const char *const *want, int n)
{
    struct rd d = open_rd(name, fmt, o);
    char got[1024];
    bool eof;
    struct ferry_error err;
    for (int i = 0; i < n; i++) {
        int rc = next_text(&d, got, sizeof got, &eof, &err);
        if (rc != FERRY_OK) fprintf(stderr, "record %d: %s\n", i, err.message);
        assert_int_equal(rc, FERRY_OK);
        assert_false(eof);
        assert_string_equal(got, want[i]);
    }
    assert_int_equal(next_text(&d, got, sizeof got, &eof, &err), FERRY_OK);
    assert_true(eof);
    close_rd(&d);
}

static void test_csv_quotes_newlines_crlf_bom(void **state)
{
    (void)state;
    const char text[] = "\xEF\xBB\xBF"
                        "id,name,note\r\n"
                        "1,\"Smith, John\",\"say \"\"hi\"\"\"\r\n"
                        "2,\"line one\nline two\",\r\n"
                        "3,\"\",plain\r\n"
                        "4,caf\xC3\xA9,\"a\r\nb\"\n"
                        "5,last,no newline";
    put_file("q.csv", text, sizeof text - 1);
    const char *want[] = {"id|name|note", "1|Smith, John|say \"hi\"", "2|line one\nline two|<null>",
                          "3||plain",     "4|caf\xC3\xA9|a\r\nb",     "5|last|no newline"};
    expect_records("q.csv", FILES_FMT_CSV, &csv_default, want, 6);

    /* The empty string is quoted, NULL is not; a null marker makes "" a value too. */
    struct rd d = open_rd("q.csv", FILES_FMT_CSV, &csv_default);
    bool eof;
    struct ferry_error err;
    char got[256];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_int_equal(ferry__files_reader_field(d.r, 1)->kind, FILES_KIND_STRING);
    assert_true(ferry__files_reader_field(d.r, 1)->quoted);
    assert_int_equal(ferry__files_reader_line(d.r), 5); /* record 3 starts on line 5 */
    close_rd(&d);

    const char t2[] = "a;b\nNULL;\"NULL\"\n;x\n";
    put_file("n.csv", t2, sizeof t2 - 1);
    struct ferry__files_csv_opts o = {';', '"', 0, "NULL"};
    const char *want2[] = {"a|b", "<null>|NULL", "|x"};
    expect_records("n.csv", FILES_FMT_CSV, &o, want2, 3);

    /* An escape character instead of doubled quotes. */
    const char t3[] = "a,b\n\"x\\\"y\",\"back\\\\slash\"\n";
    put_file("e.csv", t3, sizeof t3 - 1);
    struct ferry__files_csv_opts oe = {',', '"', '\\', ""};
    const char *want3[] = {"a|b", "x\"y|back\\slash"};
    expect_records("e.csv", FILES_FMT_CSV, &oe, want3, 2);
}

static void expect_error_then(const char *name, enum ferry__files_fmt fmt, int skip_records,
                              const char *where, const char *next)
{
    struct rd d = open_rd(name, fmt, &csv_default);
    char got[512];
    bool eof;
    struct ferry_error err;
    for (int i = 0; i < skip_records; i++)
        ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    int rc = next_text(&d, got, sizeof got, &eof, &err);
    assert_int_equal(rc, FERRY_EINVAL);
    if (strstr(err.message, where) == NULL) fprintf(stderr, "message: %s\n", err.message);
    assert_non_null(strstr(err.message, where));
    /* The reader stands at the next record. */
    rc = next_text(&d, got, sizeof got, &eof, &err);
    if (next) {
        ASSERT_OK(rc, err);
        assert_string_equal(got, next);
    } else {
        assert_true(eof);
    }
    close_rd(&d);
}

static void test_csv_errors_name_line_and_column(void **state)
{
    (void)state;
    /* Invalid UTF-8 (a lone continuation byte) in line 3, character column 7 ("ü" counts 1). */
    const char t1[] = "a,b\n1,ok\n2,\xC3\xBCxx\x80y\n3,next\n";
    put_file("u.csv", t1, sizeof t1 - 1);
    expect_error_then("u.csv", FILES_FMT_CSV, 2, "u.csv:3:6: invalid UTF-8", "3|next");
    /* An overlong encoding is invalid too. */
    const char t1b[] = "a\n\xC0\xAF\nz\n";
    put_file("o.csv", t1b, sizeof t1b - 1);
    expect_error_then("o.csv", FILES_FMT_CSV, 1, "o.csv:2:1: invalid UTF-8", "z");
    /* A quote inside an unquoted field. */
    const char t2[] = "a,b\nx,ab\"c\ny,z\n";
    put_file("m.csv", t2, sizeof t2 - 1);
    expect_error_then("m.csv", FILES_FMT_CSV, 1, "m.csv:2:5: a quote inside an unquoted field",
                      "y|z");
    /* Text after a closing quote. */
    const char t3[] = "a,b\n\"x\"y,1\nq,r\n";
    put_file("c.csv", t3, sizeof t3 - 1);
    expect_error_then("c.csv", FILES_FMT_CSV, 1, "c.csv:2:4: unexpected character after a closing",
                      "q|r");
    /* A quoted field never closed runs to the end of the file. */
    const char t4[] = "a\n\"open\nmore\n";
    put_file("t.csv", t4, sizeof t4 - 1);
    expect_error_then("t.csv", FILES_FMT_CSV, 1, "t.csv:2:1: a quoted field is not closed", NULL);
}

static void test_jsonl_records(void **state)
{
    (void)state;
    const char text[] =
        "{\"id\": 1, \"name\": \"a\\\"b\\u00e9\\ud83d\\ude9a\", \"x\": [1, {\"y\": null}]}\n"
        "\n"
        "{\"name\":null,\"id\":-2.5e3,\"ok\":true,\"extra\":\"ignored\"}\r\n"
        "  {\"id\":3}";
    put_file("a.jsonl", text, sizeof text - 1);
    static const char *const keys[] = {"id", "name", "ok", "x"};
    struct rd d = open_rd("a.jsonl", FILES_FMT_JSONL, NULL);
    ferry__files_reader_set_keys(d.r, keys, 4);
    char got[512];
    bool eof;
    struct ferry_error err;
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_string_equal(got, "1|a\"b\xC3\xA9\xF0\x9F\x9A\x9A|<null>|[1, {\"y\": null}]");
    assert_int_equal(ferry__files_reader_field(d.r, 0)->kind, FILES_KIND_NUMBER);
    assert_int_equal(ferry__files_reader_field(d.r, 3)->kind, FILES_KIND_NESTED);
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_string_equal(got, "-2.5e3|<null>|true|<null>");
    assert_int_equal(ferry__files_reader_line(d.r), 3);
    assert_int_equal(ferry__files_reader_field(d.r, 2)->kind, FILES_KIND_BOOL);
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_string_equal(got, "3|<null>|<null>|<null>");
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_true(eof);
    close_rd(&d);

    /* Errors: file:line:column, then the next line reads. */
    const char bad[] =
        "{\"id\":1}\n{\"id\": tru}\n{\"id\":\"\xE2\x82\"}\n{\"id\":01}\n{\"id\":4} x\n"
        "{\"id\":5}\n";
    put_file("b.jsonl", bad, sizeof bad - 1);
    d = open_rd("b.jsonl", FILES_FMT_JSONL, NULL);
    ferry__files_reader_set_keys(d.r, keys, 1);
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_int_equal(next_text(&d, got, sizeof got, &eof, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "b.jsonl:2:8: an invalid value"));
    assert_int_equal(next_text(&d, got, sizeof got, &eof, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "b.jsonl:3:8: invalid UTF-8"));
    assert_int_equal(next_text(&d, got, sizeof got, &eof, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "b.jsonl:4:8: a ',' or '}' is missing"));
    assert_int_equal(next_text(&d, got, sizeof got, &eof, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "b.jsonl:5:10: text after the object"));
    ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
    assert_string_equal(got, "5");
    close_rd(&d);
}

/* ---- compressed inputs ------------------------------------------------------------------------
 */

static void test_compressed_inputs(void **state)
{
    (void)state;
    /* Long enough to cross the reader's 64 KiB window and the input's chunks. */
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry_buf_printf(&b, "id,text\n"), FERRY_OK);
    for (int i = 0; i < 20000; i++)
        assert_int_equal(ferry_buf_printf(&b, "%d,\"row %d, \"\"quoted\"\"\nsecond line\"\n", i, i),
                         FERRY_OK);
    put_file("plain.csv", b.data, b.len);
    /* gzip in two members (cat a.gz b.gz), as gzip itself reads them. */
    gzFile g = gzopen(path_of("two.csv.gz"), "wb");
    assert_non_null(g);
    size_t half = b.len / 2;
    assert_int_equal(gzwrite(g, b.data, (unsigned)half), (int)half);
    gzclose(g);
    g = gzopen(path_of("two.csv.gz"), "ab");
    assert_int_equal(gzwrite(g, b.data + half, (unsigned)(b.len - half)), (int)(b.len - half));
    gzclose(g);
    size_t cap = ZSTD_compressBound(b.len);
    void *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, b.data, b.len, 3);
    assert_false(ZSTD_isError(zn));
    put_file("data.csv.zst", z, zn);
    free(z);

    const char *names[] = {"plain.csv", "two.csv.gz", "data.csv.zst"};
    const char *kinds[] = {"plain", "gzip", "zstd"};
    for (int k = 0; k < 3; k++) {
        struct rd d = open_rd(names[k], FILES_FMT_CSV, &csv_default);
        assert_string_equal(ferry__files_input_kind(d.in), kinds[k]);
        char got[256], want[256];
        bool eof;
        struct ferry_error err;
        ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
        int n = 0;
        for (;;) {
            ASSERT_OK(next_text(&d, got, sizeof got, &eof, &err), err);
            if (eof) break;
            snprintf(want, sizeof want, "%d|row %d, \"quoted\"\nsecond line", n, n);
            assert_string_equal(got, want);
            n++;
        }
        assert_int_equal(n, 20000);
        assert_int_equal(ferry__files_reader_offset(d.r), (int64_t)b.len);
        close_rd(&d);
    }
    /* A truncated gzip file is an error, not a short read. */
    size_t gl;
    char *gz = slurp(path_of("two.csv.gz"), &gl);
    put_file("cut.csv.gz", gz, gl / 3);
    free(gz);
    struct rd d = open_rd("cut.csv.gz", FILES_FMT_CSV, &csv_default);
    char got[256];
    bool eof = false;
    struct ferry_error err;
    int rc = FERRY_OK;
    while (rc == FERRY_OK && !eof)
        rc = next_text(&d, got, sizeof got, &eof, &err);
    assert_int_not_equal(rc, FERRY_OK);
    assert_non_null(strstr(err.message, "truncated gzip"));
    close_rd(&d);
    ferry_buf_release(&b);
}

/* ---- writers ----------------------------------------------------------------------------------
 */

static struct ferry_schema *typed_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    struct ferry_error err;
    ASSERT_OK(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, &err), err);
    ASSERT_OK(ferry_schema_add_field(s, "name", FERRY_TYPE_UTF8, true, &err), err);
    ASSERT_OK(ferry_schema_add_field(s, "f", FERRY_TYPE_FLOAT64, true, &err), err);
    ASSERT_OK(ferry_schema_add_field(s, "ok", FERRY_TYPE_BOOL, true, &err), err);
    ASSERT_OK(ferry_schema_add_field(s, "amount", FERRY_TYPE_DECIMAL128, true, &err), err);
    s->fields[4].precision = 10;
    s->fields[4].scale = 2;
    ASSERT_OK(ferry_schema_add_field(s, "at", FERRY_TYPE_TIMESTAMPTZ_US, true, &err), err);
    ASSERT_OK(ferry_schema_add_field(s, "bin", FERRY_TYPE_BINARY, true, &err), err);
    s->fields[0].key_pos = 1;
    ASSERT_OK(ferry_schema_finish(s, &err), err);
    return s;
}

/* Three rows: quoting, NULL vs empty, floats, binary. */
static struct ferry_batch *typed_batch(struct ferry_schema *s)
{
    struct collect c = {0};
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_C(1) << 30};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, collect_emit, &c);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 1);
    ferry_rw_text(rw, "a,\"b\"\nc", 7);
    ferry_rw_float(rw, 0.1);
    ferry_rw_bool(rw, true);
    ferry_rw_dec128(rw, (struct ferry_decimal128){12345, 0});
    ferry_rw_int(rw, INT64_C(1700000000123456));
    ferry_rw_text(rw, "\x00\xff\x10", 3);
    ASSERT_OK(ferry_rw_end(rw, &err), err);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, -2);
    ferry_rw_text(rw, "", 0);
    ferry_rw_float(rw, 1.0 / 3.0);
    ferry_rw_bool(rw, false);
    ferry_rw_null(rw);
    ferry_rw_null(rw);
    ferry_rw_text(rw, "", 0);
    ASSERT_OK(ferry_rw_end(rw, &err), err);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 3);
    ferry_rw_null(rw);
    ferry_rw_float(rw, NAN);
    ferry_rw_null(rw);
    ferry_rw_dec128(rw, (struct ferry_decimal128){(uint64_t)-5, -1});
    ferry_rw_null(rw);
    ferry_rw_null(rw);
    ASSERT_OK(ferry_rw_end(rw, &err), err);
    ASSERT_OK(ferry_rw_flush(rw, false, &err), err);
    ferry__rw_free(rw);
    assert_int_equal(c.n, 1);
    struct ferry_batch *b = c.b[0];
    free(c.b);
    return b;
}

static int buf_out(void *ctx, const void *p, size_t n, struct ferry_error *err)
{
    (void)err;
    return ferry_buf_append(ctx, p, n);
}

static void encode(const struct ferry__files_format *fmt, const struct ferry__files_format_opts *o,
                   struct ferry_buf *out)
{
    struct ferry_schema *s = typed_schema();
    struct ferry_batch *b = typed_batch(s);
    void *st = NULL;
    struct ferry_error err;
    struct ferry__files_out w = {buf_out, out};
    ASSERT_OK(fmt->open_part(o, s, w, &st, &err), err);
    ASSERT_OK(fmt->write_batch(st, b, &err), err);
    int64_t bytes = 0;
    ASSERT_OK(fmt->finish_part(st, &bytes, &err), err);
    assert_int_equal(bytes, (int64_t)out->len);
    fmt->free(st);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

static void test_csv_writer(void **state)
{
    (void)state;
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    struct ferry__files_format_opts o = {
        .delimiter = ',', .null_marker = "", .header = true, .crlf = true};
    encode(&ferry__files_csv, &o, &out);
    const char *want =
        "id,name,f,ok,amount,at,bin\r\n"
        "1,\"a,\"\"b\"\"\nc\",0.1,true,123.45,2023-11-14T22:13:20.123456+00,\\x00ff10\r\n"
        "-2,\"\",0.3333333333333333,false,,,\\x\r\n"
        "3,,NaN,,-0.05,,\r\n";
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    /* The reader takes back exactly those fields. */
    put_file("w.csv", out.data, out.len);
    const char *rec[] = {"id|name|f|ok|amount|at|bin",
                         "1|a,\"b\"\nc|0.1|true|123.45|2023-11-14T22:13:20.123456+00|\\x00ff10",
                         "-2||0.3333333333333333|false|<null>|<null>|\\x",
                         "3|<null>|NaN|<null>|-0.05|<null>|<null>"};
    expect_records("w.csv", FILES_FMT_CSV, &csv_default, rec, 4);

    /* Another delimiter and null marker: a value equal to the marker is quoted. */
    ferry_buf_reset(&out);
    struct ferry__files_format_opts o2 = {
        .delimiter = '\t', .null_marker = "\\N", .header = false, .crlf = false};
    encode(&ferry__files_csv, &o2, &out);
    assert_non_null(strstr(out.data, "-2\t\"\"\t0.3333333333333333\tfalse\t\\N\t\\N\t\\x\n"));
    ferry_buf_release(&out);

    char f[32];
    ferry__files_float_text(0.1 + 0.2, false, f, sizeof f);
    assert_string_equal(f, "0.30000000000000004");
    ferry__files_float_text(1e300, false, f, sizeof f);
    assert_string_equal(f, "1e+300");
    ferry__files_float_text((double)0.1f, true, f, sizeof f);
    assert_string_equal(f, "0.1");
}

static void test_jsonl_writer(void **state)
{
    (void)state;
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    struct ferry__files_format_opts o = {0};
    encode(&ferry__files_jsonl, &o, &out);
    const char *want =
        "{\"id\":1,\"name\":\"a,\\\"b\\\"\\nc\",\"f\":0.1,\"ok\":true,\"amount\":\"123.45\","
        "\"at\":\"2023-11-14T22:13:20.123456+00\",\"bin\":\"AP8Q\"}\n"
        "{\"id\":-2,\"name\":\"\",\"f\":0.3333333333333333,\"ok\":false,\"amount\":null,"
        "\"at\":null,\"bin\":\"\"}\n"
        "{\"id\":3,\"name\":null,\"f\":\"NaN\",\"ok\":null,\"amount\":\"-0.05\",\"at\":null,"
        "\"bin\":null}\n";
    assert_string_equal(out.data, want);
    /* Every line is one object jansson (a reader we did not write) accepts. */
    char *line = out.data;
    for (int i = 0; i < 3; i++) {
        char *nl = strchr(line, '\n');
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)(nl - line), 0, &je);
        assert_non_null(j);
        assert_int_equal(json_object_size(j), 7);
        json_decref(j);
        line = nl + 1;
    }
    ferry_buf_release(&out);
}

/* ---- the sink -----------------------------------------------------------------------------------
 */

static int count_entries(const char *d, const char *prefix)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "ls -a '%s' 2>/dev/null | grep -c '^%s' || true", d, prefix);
    FILE *p = popen(cmd, "r");
    int n = 0;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static void *sink_with(const char *yaml, struct ferry_cfg **cfg)
{
    const struct ferry_sink_vtable *vt = ferry_sink_find("files");
    assert_non_null(vt);
    *cfg = cfg_of(yaml);
    void *ctx = NULL;
    struct ferry_error err;
    ASSERT_OK(vt->open(*cfg, &ctx, &err), err);
    return ctx;
}

static void test_sink_parts_manifest_abort(void **state)
{
    (void)state;
    const struct ferry_sink_vtable *vt = ferry_sink_find("files");
    char yaml[700];
    snprintf(yaml, sizeof yaml, "path: %s/out/\nformat: csv\npart_rows: 5\n", dir);
    struct ferry_cfg *cfg;
    void *ctx = sink_with(yaml, &cfg);
    struct ferry_error err;
    struct ferry_sink_caps caps;
    vt->capabilities(ctx, FERRY_WRITE_REPLACE, &caps);
    assert_int_equal(caps.write_modes, (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE));
    assert_true(caps.atomic_replace);
    assert_int_equal(caps.durability, FERRY_DURABLE_AT_COMMIT);
    assert_true(caps.encoded_integrity);

    struct ferry_schema *s = typed_schema();
    struct ferry_target t = {
        .index = 0, .resource = "t", .table = "t", .schema = s, .mode = FERRY_WRITE_APPEND};
    ASSERT_OK(vt->prepare(ctx, &t, &err), err);
    struct ferry_session_info si = {.pipeline = "p", .version = "v", .run_id = 7, .attempt = 1};
    ASSERT_OK(vt->begin(ctx, &si, &err), err);
    char tdir[600];
    snprintf(tdir, sizeof tdir, "%s/out/t", dir);
    uint32_t crc_all = 0;
    for (int i = 0; i < 4; i++) { /* 12 rows: parts of 6, 6 (part_rows 5, whole batches) */
        struct ferry_batch *b = typed_batch(s);
        b->digest = ferry_batch_digest(b);
        struct ferry_receipt r;
        ASSERT_OK(vt->apply(ctx, &t, b, &r, &err), err);
        assert_int_equal(r.rows, 3);
        assert_true(r.has_encoded_crc);
        assert_int_equal(r.write_crc, b->digest);
        assert_true(r.bytes > 0);
        (void)crc_all;
        ferry_batch_unref(b);
    }
    /* Before commit: only temporary files, no part, no manifest. */
    assert_int_equal(count_entries(tdir, "part-"), 0);
    assert_int_equal(count_entries(tdir, ".tmp-7-1-"), 2);
    /* A batch whose digest differs is not written. */
    struct ferry_batch *bad = typed_batch(s);
    bad->digest = ferry_batch_digest(bad) ^ 1;
    struct ferry_receipt r;
    ASSERT_OK(vt->apply(ctx, &t, bad, &r, &err), err);
    assert_int_not_equal(r.write_crc, bad->digest);
    ferry_batch_unref(bad);
    ASSERT_OK(vt->commit(ctx, &err), err);
    assert_int_equal(count_entries(tdir, ".tmp-"), 0);
    assert_int_equal(count_entries(tdir, "part-7-1-"), 2);
    /* The manifest lists both parts with the CRC32-C and size of the bytes on disk. */
    char mpath[700];
    snprintf(mpath, sizeof mpath, "%s/out/_runs/7/_manifest.json", dir);
    json_error_t je;
    json_t *m = json_load_file(mpath, 0, &je);
    assert_non_null(m);
    json_t *files = json_object_get(m, "files");
    assert_int_equal(json_array_size(files), 2);
    int64_t rows = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *f = json_array_get(files, i);
        char fp[800];
        snprintf(fp, sizeof fp, "%s/out/%s", dir, json_string_value(json_object_get(f, "path")));
        size_t n;
        char *data = slurp(fp, &n);
        assert_int_equal(json_integer_value(json_object_get(f, "bytes")), (json_int_t)n);
        assert_int_equal(json_integer_value(json_object_get(f, "crc32c")),
                         (json_int_t)ferry_crc32c(data, n));
        rows += json_integer_value(json_object_get(f, "rows"));
        free(data);
    }
    assert_int_equal(rows, 12);
    assert_int_equal(json_integer_value(json_object_get(m, "rows")), 12);
    json_decref(m);

    /* A second session that aborts leaves nothing behind. */
    struct ferry_session_info si2 = {.pipeline = "p", .version = "v", .run_id = 8, .attempt = 1};
    ASSERT_OK(vt->begin(ctx, &si2, &err), err);
    struct ferry_batch *b = typed_batch(s);
    b->digest = ferry_batch_digest(b);
    ASSERT_OK(vt->apply(ctx, &t, b, &r, &err), err);
    ferry_batch_unref(b);
    assert_int_equal(count_entries(tdir, ".tmp-8-"), 1);
    vt->abort(ctx);
    vt->abort(ctx);
    assert_int_equal(count_entries(tdir, ".tmp-8-"), 0);
    assert_int_equal(count_entries(tdir, "part-8-"), 0);
    vt->close(ctx);
    ferry_cfg_free(cfg);

    /* A crash between the renames and the manifest: the next attempt removes the parts no
     * manifest lists (simulated by a part file of run 9 with no manifest). */
    ctx = sink_with(yaml, &cfg);
    char orphan[700];
    snprintf(orphan, sizeof orphan, "%s/out/t/part-9-1-0.csv", dir);
    FILE *fo = fopen(orphan, "w");
    fputs("x\n", fo);
    fclose(fo);
    ASSERT_OK(vt->prepare(ctx, &t, &err), err);
    struct ferry_session_info si3 = {
        .pipeline = "p", .version = "v", .run_id = 9, .attempt = 2, .resuming = true};
    ASSERT_OK(vt->begin(ctx, &si3, &err), err);
    assert_int_equal(access(orphan, F_OK), -1);
    assert_int_equal(count_entries(tdir, "part-7-1-"), 2); /* other runs untouched */
    vt->close(ctx);
    ferry_cfg_free(cfg);
    ferry_schema_unref(s);

    /* Refused configuration. */
    struct ferry_cfg *bad_cfg = cfg_of("path: x\nformat: xml\n");
    void *c2 = NULL;
    assert_int_equal(vt->open(bad_cfg, &c2, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "xml"));
    ferry_cfg_free(bad_cfg);
}

/* ---- the source
 * ---------------------------------------------------------------------------------- */

static struct ferry_cfg *src_cfg(const char *extra)
{
    char yaml[1200];
    snprintf(yaml, sizeof yaml, "path: %s/in/*.csv\n%s", dir, extra);
    return cfg_of(yaml);
}

/* s has exactly the field types want[0..n), in order. */
static void assert_types(const struct ferry_schema *s, const enum ferry_type *want, int n)
{
    assert_int_equal(s->n_fields, n);
    for (int i = 0; i < n; i++)
        if (s->fields[i].type != want[i])
            fail_msg("field %d (%s): type %d, want %d", i, s->fields[i].name, (int)s->fields[i].type,
                     (int)want[i]);
}

static void test_source_infer_resume_skip(void **state)
{
    (void)state;
    char d[600];
    snprintf(d, sizeof d, "%s/in", dir);
    mkdir(d, 0777);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry_buf_printf(&b, "id,price,ok,at,day,name\n"), FERRY_OK);
    for (int i = 1; i <= 3000; i++)
        assert_int_equal(
            ferry_buf_printf(&b, "%d,%d.5,%s,2024-01-02T03:04:%02dZ,2024-02-%02d,\"n,%d\"\n", i, i,
                             i % 2 ? "true" : "FALSE", i % 60, 1 + i % 28, i),
            FERRY_OK);
    put_file("in/a.csv", b.data, b.len);
    put_text("in/b.csv", "id,price,ok,at,day,name\n9001,1,true,,,\n");
    ferry_buf_release(&b);

    const struct ferry_source_vtable *vt = ferry_source_find("files");
    assert_non_null(vt);
    struct ferry_cfg *cfg = src_cfg("");
    void *ctx = NULL;
    struct ferry_error err;
    ASSERT_OK(vt->open(cfg, &ctx, &err), err);
    struct ferry_resource_spec spec = spec_of("things", FERRY_READ_FULL);
    struct ferry_schema *s = NULL;
    ASSERT_OK(vt->discover(ctx, &spec, &s, &err), err);
    assert_types(s,
                 (const enum ferry_type[]){FERRY_TYPE_INT64, FERRY_TYPE_FLOAT64, FERRY_TYPE_BOOL,
                                           FERRY_TYPE_TIMESTAMPTZ_US, FERRY_TYPE_DATE32,
                                           FERRY_TYPE_UTF8},
                 6);
    char *plan = NULL;
    ASSERT_OK(vt->plan(ctx, &spec, s, NULL, &plan, &err), err);
    assert_int_equal(plan_shards(plan), 2);

    /* Whole shard 0, in batches of 1000. */
    struct collect all = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, NULL, 1000, &all, &err), err);
    assert_int_equal(collect_rows(&all), 3000);
    /* Resume after the first batch: the rest, exactly. */
    struct collect rest = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, all.b[0]->position, 1000, &rest, &err), err);
    assert_int_equal(collect_rows(&rest), 2000);
    assert_int_equal(ferry_col_int(rest.b[0], 0, 0), 1001);
    assert_true(ferry_col_bool(rest.b[0], 2, 0));
    size_t len;
    const uint8_t *nm = ferry_col_bytes(rest.b[0], 5, 0, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(nm, "n,1001", 6);
    /* A finished shard reads nothing. */
    struct collect none = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, all.b[all.n - 1]->position, 1000, &none, &err),
              err);
    assert_int_equal(collect_rows(&none), 0);
    /* Shard 1: empty fields are NULL. */
    struct collect one = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 1, NULL, 1000, &one, &err), err);
    assert_int_equal(collect_rows(&one), 1);
    assert_true(ferry_col_is_null(one.b[0], 3, 0));
    collect_free(&all);
    collect_free(&rest);
    collect_free(&none);
    collect_free(&one);

    /* A file changed since the plan is refused. */
    put_text("in/b.csv", "id,price,ok,at,day,name\n9001,1,true,,,\n9002,1,true,,,\n");
    struct collect ch = {0};
    assert_int_equal(read_shard(vt, ctx, &spec, s, plan, 1, NULL, 1000, &ch, &err), FERRY_ESOURCE);
    assert_non_null(strstr(err.message, "changed since the run was planned"));
    collect_free(&ch);
    ferry_free(plan);
    /* Incremental: every file planned, with the next route checkpoint; cdc refused. */
    struct ferry_resource_spec inc = spec_of("things", FERRY_READ_INCREMENTAL);
    ASSERT_OK(vt->plan(ctx, &inc, s, NULL, &plan, &err), err);
    assert_non_null(strstr(plan, "\"route_checkpoint\":{\"files\":{"));
    ferry_free(plan);
    struct ferry_resource_spec cdc = spec_of("things", FERRY_READ_CDC);
    assert_int_equal(vt->plan(ctx, &cdc, s, NULL, &plan, &err), FERRY_EUNSUPPORTED);
    assert_non_null(strstr(err.message, "full or incremental"));
    ferry_schema_unref(s);
    vt->close(ctx);
    ferry_cfg_free(cfg);

    /* Bad values: an error naming file:line:column, or skipped and counted. */
    put_text("in/b.csv",
             "id,price,ok,at,day,name\n1,2,true,,,\nx,2,true,,,\n3,2,maybe,,,\n4,2\n5,2,true,,,\n");
    unlink(path_of("in/a.csv"));
    for (int skip = 0; skip < 2; skip++) {
        cfg = src_cfg(skip ? "on_error: skip\n" : "");
        ASSERT_OK(vt->open(cfg, &ctx, &err), err);
        struct ferry_cfg *res = cfg_of("schema: {id: int64, price: float64, ok: bool, at: "
                                       "timestamptz, day: date32, name: utf8}\n");
        spec.node = res;
        ASSERT_OK(vt->discover(ctx, &spec, &s, &err), err);
        ASSERT_OK(vt->plan(ctx, &spec, s, NULL, &plan, &err), err);
        struct collect c = {0};
        int rc = read_shard(vt, ctx, &spec, s, plan, 0, NULL, 1000, &c, &err);
        if (!skip) {
            assert_int_equal(rc, FERRY_EINVAL);
            assert_non_null(strstr(err.message, "b.csv:3:1: column \"id\": \"x\" is not a int64"));
        } else {
            ASSERT_OK(rc, err);
            assert_int_equal(collect_rows(&c), 2); /* ids 1 and 5 */
            int64_t n;
            int64_t *ids = collect_ints(&c, 0, &n);
            assert_int_equal(ids[0], 1);
            assert_int_equal(ids[1], 5);
            free(ids);
        }
        collect_free(&c);
        ferry_free(plan);
        ferry_schema_unref(s);
        vt->close(ctx);
        ferry_cfg_free(cfg);
        ferry_cfg_free(res);
        spec.node = NULL;
    }
}

static void test_source_headerless(void **state)
{
    (void)state;
    char d[600];
    snprintf(d, sizeof d, "%s/h", dir);
    mkdir(d, 0777);
    put_text("h/a.tsv", "1\tx\t2.5\n2\t\t\n");
    char yaml[700];
    snprintf(yaml, sizeof yaml, "path: %s/h/*.tsv\nheader: false\ndelimiter: \"\\t\"\n", dir);
    const struct ferry_source_vtable *vt = ferry_source_find("files");
    struct ferry_error err;
    for (int declared = 0; declared < 2; declared++) {
        struct ferry_cfg *cfg = cfg_of(yaml);
        void *ctx = NULL;
        ASSERT_OK(vt->open(cfg, &ctx, &err), err);
        struct ferry_cfg *res = cfg_of("schema: {id: int64, name: utf8, v: float64}\n");
        char *cols[] = {declared ? "v" : "c3", declared ? "id" : "c1", NULL};
        struct ferry_resource_spec spec = spec_of("h", FERRY_READ_FULL);
        spec.node = declared ? res : NULL;
        spec.columns = cols;
        spec.n_columns = 2;
        struct ferry_schema *s = NULL;
        ASSERT_OK(vt->discover(ctx, &spec, &s, &err), err);
        assert_types(s, (const enum ferry_type[]){FERRY_TYPE_FLOAT64, FERRY_TYPE_INT64}, 2);
        char *plan = NULL;
        ASSERT_OK(vt->plan(ctx, &spec, s, NULL, &plan, &err), err);
        struct collect c = {0};
        ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, NULL, 10, &c, &err), err);
        assert_int_equal(collect_rows(&c), 2);
        assert_true(ferry_col_float(c.b[0], 0, 0) == 2.5);
        assert_int_equal(ferry_col_int(c.b[0], 1, 1), 2);
        assert_true(ferry_col_is_null(c.b[0], 0, 1));
        collect_free(&c);
        ferry_free(plan);
        ferry_schema_unref(s);
        vt->close(ctx);
        ferry_cfg_free(cfg);
        ferry_cfg_free(res);
    }
}

/* ferry__files_input_open_fn (the s3 source's object stream): the same bytes as the file
 * path, whatever sizes the callback hands out (1 to 7 bytes here), and its errors. */
struct mem_src {
    const char *p;
    size_t n, at;
    int calls;
};

static int mem_read(void *ctx, void *p, size_t cap, size_t *n, struct ferry_error *err)
{
    (void)err;
    struct mem_src *m = ctx;
    size_t k = (size_t)(m->calls++ % 7) + 1;
    if (k > cap) k = cap;
    if (k > m->n - m->at) k = m->n - m->at;
    memcpy(p, m->p + m->at, k);
    m->at += k;
    *n = k;
    return FERRY_OK;
}

static void test_input_callback(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(ferry_buf_printf(&b, "%d,row %d\n", i, i), FERRY_OK);
    gzFile g = gzopen(path_of("cb.csv.gz"), "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, b.data, (unsigned)b.len), (int)b.len);
    gzclose(g);
    size_t gl;
    char *gz = slurp(path_of("cb.csv.gz"), &gl);
    size_t cap = ZSTD_compressBound(b.len);
    char *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, b.data, b.len, 3);
    assert_false(ZSTD_isError(zn));
    const char *srcs[] = {b.data, gz, z, gz};
    size_t lens[] = {b.len, gl, zn, gl / 2};
    const char *kinds[] = {"plain", "gzip", "zstd", "gzip"};
    for (int k = 0; k < 4; k++) {
        struct mem_src m = {.p = srcs[k], .n = lens[k]};
        struct ferry__files_input *in = NULL;
        struct ferry_error err;
        ASSERT_OK(ferry__files_input_open_fn("s3://b/obj", mem_read, &m, &in, &err), err);
        assert_string_equal(ferry__files_input_kind(in), kinds[k]);
        struct ferry_buf out;
        ferry_buf_init(&out, 0);
        int rc = FERRY_OK;
        for (;;) {
            char piece[1000];
            size_t n = 0;
            rc = ferry__files_input_read(in, piece, sizeof piece, &n, &err);
            if (rc != FERRY_OK || n == 0) break;
            assert_int_equal(ferry_buf_append(&out, piece, n), FERRY_OK);
        }
        if (k < 3) {
            ASSERT_OK(rc, err);
            assert_int_equal(out.len, b.len);
            assert_memory_equal(out.data, b.data, b.len);
        } else { /* a truncated gzip object: an error naming it */
            assert_int_not_equal(rc, FERRY_OK);
            assert_non_null(strstr(err.message, "s3 source: s3://b/obj: truncated gzip"));
        }
        ferry_buf_release(&out);
        ferry__files_input_close(in);
    }
    free(z);
    free(gz);
    ferry_buf_release(&b);
}

static void test_source_jsonl_compressed(void **state)
{
    (void)state;
    char d[600];
    snprintf(d, sizeof d, "%s/j", dir);
    mkdir(d, 0777);
    gzFile g = gzopen(path_of("j/a.jsonl.gz"), "wb");
    for (int i = 0; i < 100; i++)
        gzprintf(g, "{\"id\":%d,\"v\":%d.25,\"tags\":[%d],\"s\":\"x\\ty\",\"b\":%s}\n", i, i, i,
                 i % 3 ? "true" : "false");
    gzclose(g);
    char yaml[700];
    snprintf(yaml, sizeof yaml, "path: %s/j/*.jsonl.gz\n", dir);
    struct ferry_cfg *cfg = cfg_of(yaml);
    const struct ferry_source_vtable *vt = ferry_source_find("files");
    void *ctx = NULL;
    struct ferry_error err;
    ASSERT_OK(vt->open(cfg, &ctx, &err), err);
    struct ferry_resource_spec spec = spec_of("j", FERRY_READ_FULL);
    struct ferry_schema *s = NULL;
    ASSERT_OK(vt->discover(ctx, &spec, &s, &err), err);
    assert_types(s,
                 (const enum ferry_type[]){FERRY_TYPE_INT64, FERRY_TYPE_FLOAT64, FERRY_TYPE_JSON,
                                           FERRY_TYPE_UTF8, FERRY_TYPE_BOOL},
                 5);
    char *plan = NULL;
    ASSERT_OK(vt->plan(ctx, &spec, s, NULL, &plan, &err), err);
    struct collect c = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, NULL, 30, &c, &err), err);
    assert_int_equal(collect_rows(&c), 100);
    /* Resume inside the compressed file at the second batch's position. */
    struct collect r = {0};
    ASSERT_OK(read_shard(vt, ctx, &spec, s, plan, 0, c.b[1]->position, 30, &r, &err), err);
    assert_int_equal(collect_rows(&r), 40);
    assert_int_equal(ferry_col_int(r.b[0], 0, 0), 60);
    size_t len;
    const uint8_t *t = ferry_col_bytes(r.b[0], 3, 0, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(t, "x\ty", 3);
    collect_free(&c);
    collect_free(&r);
    ferry_free(plan);
    ferry_schema_unref(s);
    vt->close(ctx);
    ferry_cfg_free(cfg);
}

/* Reads every record of `glob` (with `extra` keys) into *c after discovering the schema into
 * *s; returns the extract's code (err filled). */
static int read_glob(const char *glob, const char *extra, struct ferry_schema **s,
                     struct collect *c, struct ferry_error *err)
{
    char yaml[900];
    snprintf(yaml, sizeof yaml, "path: %s/%s\n%s", dir, glob, extra);
    struct ferry_cfg *cfg = cfg_of(yaml);
    const struct ferry_source_vtable *vt = ferry_source_find("files");
    void *ctx = NULL;
    ASSERT_OK(vt->open(cfg, &ctx, err), *err);
    struct ferry_resource_spec spec = spec_of("t", FERRY_READ_FULL);
    int rc = vt->discover(ctx, &spec, s, err);
    if (rc == FERRY_OK) {
        char *plan = NULL;
        ASSERT_OK(vt->plan(ctx, &spec, *s, NULL, &plan, err), *err);
        rc = read_shard(vt, ctx, &spec, *s, plan, 0, NULL, 100, c, err);
        ferry_free(plan);
    }
    vt->close(ctx);
    ferry_cfg_free(cfg);
    return rc;
}

static void assert_text(const struct collect *c, int col, int64_t row, const char *want, size_t n)
{
    size_t len;
    const uint8_t *t = ferry_col_bytes(c->b[0], col, row, &len);
    assert_int_equal(len, n);
    assert_memory_equal(t, want, n);
}

/* Issue 23: blank lines are CSV records; inference never changes a value's text; a NUL in a
 * JSON key is refused naming file:line:column, in a string carried exactly. */
static void test_source_fidelity(void **state)
{
    (void)state;
    char d[600];
    snprintf(d, sizeof d, "%s/fi", dir);
    mkdir(d, 0777);
    struct ferry_error err;
    struct ferry_schema *s = NULL;
    struct collect c = {0};

    /* One column: 7 records, the two blank lines NULL (the default null marker is ""). */
    put_text("fi/one.csv", "v\na\nb\n\n\nc\nd\ne\n");
    ASSERT_OK(read_glob("fi/one.csv", "", &s, &c, &err), err);
    assert_int_equal(collect_rows(&c), 7);
    assert_true(ferry_col_is_null(c.b[0], 0, 2) && ferry_col_is_null(c.b[0], 0, 3));
    assert_text(&c, 0, 4, "c", 1);
    collect_free(&c);
    ferry_schema_unref(s);
    ASSERT_OK(read_glob("fi/one.csv", "skip_blank_lines: true\n", &s, &c, &err), err);
    assert_int_equal(collect_rows(&c), 5);
    collect_free(&c);
    ferry_schema_unref(s);
    unlink(path_of("fi/one.csv"));
    /* Several columns: a blank line is a record with too few fields, refused naming it. */
    put_text("fi/two.csv", "a,b\n1,2\n\n3,4\n");
    s = NULL;
    assert_int_equal(read_glob("fi/two.csv", "", &s, &c, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "two.csv:3:1: 1 fields where the file has 2 columns (a "
                                        "blank line; skip_blank_lines: true skips them)"));
    collect_free(&c);
    ferry_schema_unref(s);
    ASSERT_OK(read_glob("fi/two.csv", "skip_blank_lines: true\n", &s, &c, &err), err);
    assert_int_equal(collect_rows(&c), 2);
    collect_free(&c);
    ferry_schema_unref(s);
    unlink(path_of("fi/two.csv"));

    /* Inference: leading zeros, a leading '+' and exponents beyond a double stay text; big
     * integers are exact decimals; floats only where a double gives the same value back. */
    put_text("fi/n.csv", "zip,plus,big,huge,expo,f,i,neg0,sub\n"
                         "08123,+5,123456789012345678901234,1e400,1.5e3,2.5,7,-0,4e-320\n"
                         "00001,+6,-1.0000000000000000000001,2,2e1,-0.0,-8,1,1\n");
    ASSERT_OK(read_glob("fi/n.csv", "", &s, &c, &err), err);
    assert_types(s,
                 (const enum ferry_type[]){FERRY_TYPE_UTF8, FERRY_TYPE_UTF8,
                                           FERRY_TYPE_DECIMAL_TEXT, FERRY_TYPE_UTF8,
                                           FERRY_TYPE_FLOAT64, FERRY_TYPE_FLOAT64, FERRY_TYPE_INT64,
                                           FERRY_TYPE_FLOAT64, FERRY_TYPE_UTF8},
                 9);
    assert_text(&c, 0, 0, "08123", 5);
    assert_text(&c, 1, 0, "+5", 2);
    assert_text(&c, 2, 0, "123456789012345678901234", 24);
    assert_text(&c, 2, 1, "-1.0000000000000000000001", 25);
    assert_text(&c, 3, 0, "1e400", 5);
    assert_true(ferry_col_float(c.b[0], 4, 0) == 1500.0);
    assert_true(signbit(ferry_col_float(c.b[0], 5, 1)));
    assert_true(signbit(ferry_col_float(c.b[0], 7, 0)));
    collect_free(&c);
    ferry_schema_unref(s);
    unlink(path_of("fi/n.csv"));

    /* JSON Lines: numbers beyond a double or int64 keep their text; NUL in a string is kept. */
    put_text("fi/a.jsonl",
             "{\"big\": 123456789012345678901234, \"huge\": 1e400, \"s\": \"a\\u0000b\"}\n"
             "{\"big\": 1, \"huge\": 1, \"s\": \"\\udbff\\udfff\"}\n");
    ASSERT_OK(read_glob("fi/a.jsonl", "", &s, &c, &err), err);
    assert_types(
        s, (const enum ferry_type[]){FERRY_TYPE_DECIMAL_TEXT, FERRY_TYPE_UTF8, FERRY_TYPE_UTF8}, 3);
    assert_text(&c, 0, 0, "123456789012345678901234", 24);
    assert_text(&c, 1, 0, "1e400", 5);
    assert_text(&c, 2, 0, "a\0b", 3);
    assert_text(&c, 2, 1, "\xf4\x8f\xbf\xbf", 4);
    collect_free(&c);
    ferry_schema_unref(s);
    unlink(path_of("fi/a.jsonl"));
    /* A NUL in a key cannot name a column: refused at its place, never cut to "foo". */
    put_text("fi/k.jsonl", "{\"ok\": 1}\n{\"ok\": 2, \"foo\\u0000bar\": 42}\n");
    s = NULL;
    int rc = read_glob("fi/k.jsonl", "", &s, &c, &err);
    assert_int_equal(rc, FERRY_EINVAL);
    assert_non_null(strstr(err.message, "k.jsonl:2:11"));
    assert_non_null(strstr(err.message, "\\u0000"));
    collect_free(&c);
    ferry_schema_unref(s);
    unlink(path_of("fi/k.jsonl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_quotes_newlines_crlf_bom),
        cmocka_unit_test(test_csv_errors_name_line_and_column),
        cmocka_unit_test(test_jsonl_records),
        cmocka_unit_test(test_compressed_inputs),
        cmocka_unit_test(test_csv_writer),
        cmocka_unit_test(test_jsonl_writer),
        cmocka_unit_test(test_sink_parts_manifest_abort),
        cmocka_unit_test(test_source_infer_resume_skip),
        cmocka_unit_test(test_source_headerless),
        cmocka_unit_test(test_input_callback),
        cmocka_unit_test(test_source_jsonl_compressed),
        cmocka_unit_test(test_source_fidelity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Harness helpers this program does not need. */
static void unused_harness(void) __attribute__((unused));
static void unused_harness(void)
{
    (void)read_all;
    (void)last_keyed_position;
}
