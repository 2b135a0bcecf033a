/* tests/unit/test_config.c - the YAML tree, every typed accessor and the shape of every
 * error message (file, key path, line), secrets, unknown keys and canonical JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"

/* Parses text as "demo.yaml"; fails the test on error. */
static struct ferry_cfg *parse(const char *text)
{
    struct ferry_cfg *root = NULL;
    struct ferry_error err = {0};
    int rc = ferry_cfg_parse_string(text, strlen(text), "demo.yaml", &root, &err);
    if (rc != FERRY_OK) fail_msg("parse failed: %s", err.message);
    assert_non_null(root);
    return root;
}

/* Parses text that must be refused; returns the message. */
static void parse_fails(const char *text, const char *message)
{
    struct ferry_cfg *root = NULL;
    struct ferry_error err = {0};
    int rc = ferry_cfg_parse_string(text, strlen(text), "demo.yaml", &root, &err);
    assert_int_equal(rc, FERRY_ECONFIG);
    assert_int_equal(err.code, FERRY_ECONFIG);
    assert_null(root);
    if (strstr(err.message, message) == NULL)
        fail_msg("message \"%s\" does not contain \"%s\"", err.message, message);
}

#define assert_message(err, expected_text) assert_string_equal((err).message, expected_text)

/* ---- tree ---------------------------------------------------------------------------- */

static void test_tree_paths_lines_columns(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("version: 1\n"
                                   "source:\n"
                                   "  type: sample\n"
                                   "  resources:\n"
                                   "    - table: orders\n"
                                   "      cursor: [updated_at, id]\n"
                                   "    - table: 'users'\n"
                                   "  empty:\n"
                                   "  tilde: ~\n"
                                   "  quoted_null: \"null\"\n");
    assert_int_equal(root->kind, FERRY_CFG_MAP);
    assert_string_equal(root->path, "");
    assert_null(root->key);
    assert_string_equal(root->file, "demo.yaml");
    assert_int_equal(root->n_children, 2);

    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    assert_non_null(src);
    assert_true(src->used);
    assert_int_equal(src->kind, FERRY_CFG_MAP);
    assert_string_equal(src->path, "source");
    assert_string_equal(src->key, "source");
    assert_int_equal(src->line, 3); /* a block map starts at its first key */
    assert_ptr_equal(src->file, root->file);

    struct ferry_cfg *res = ferry_cfg_get(src, "resources");
    assert_int_equal(res->kind, FERRY_CFG_LIST);
    assert_int_equal(res->n_children, 2);
    struct ferry_cfg *r0 = res->children[0];
    assert_string_equal(r0->path, "source.resources[0]");
    assert_null(r0->key);
    struct ferry_cfg *table = ferry_cfg_get(r0, "table");
    assert_string_equal(table->path, "source.resources[0].table");
    assert_string_equal(table->scalar, "orders");
    assert_int_equal(table->line, 5);
    assert_int_equal(table->column, 14);
    assert_false(table->quoted);
    struct ferry_cfg *cursor = ferry_cfg_get(r0, "cursor");
    assert_int_equal(cursor->kind, FERRY_CFG_LIST);
    assert_string_equal(cursor->children[1]->path, "source.resources[0].cursor[1]");
    assert_string_equal(cursor->children[1]->scalar, "id");
    assert_int_equal(cursor->children[1]->line, 6);

    struct ferry_cfg *users = ferry_cfg_get(res->children[1], "table");
    assert_string_equal(users->scalar, "users");
    assert_true(users->quoted);

    assert_int_equal(ferry_cfg_get(src, "empty")->kind, FERRY_CFG_NULL);
    assert_int_equal(ferry_cfg_get(src, "tilde")->kind, FERRY_CFG_NULL);
    struct ferry_cfg *qn = ferry_cfg_get(src, "quoted_null");
    assert_int_equal(qn->kind, FERRY_CFG_SCALAR);
    assert_string_equal(qn->scalar, "null");

    assert_null(ferry_cfg_get(src, "missing"));
    assert_null(ferry_cfg_get(table, "x")); /* not a map */
    assert_null(ferry_cfg_get(NULL, "x"));
    ferry_cfg_free(root);
    ferry_cfg_free(NULL);
}

static void test_tree_flow_style_and_str_tag(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("batch: {rows: 10, bytes: 4MiB}\nn: !!str 12\n");
    struct ferry_cfg *batch = ferry_cfg_get(root, "batch");
    assert_int_equal(batch->kind, FERRY_CFG_MAP);
    assert_string_equal(ferry_cfg_get(batch, "bytes")->path, "batch.bytes");
    struct ferry_cfg *n = ferry_cfg_get(root, "n");
    assert_true(n->quoted);
    assert_string_equal(n->scalar, "12");
    ferry_cfg_free(root);
}

static void test_empty_document_is_a_null_root(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("");
    assert_int_equal(root->kind, FERRY_CFG_NULL);
    assert_string_equal(root->file, "demo.yaml");
    ferry_cfg_free(root);
    root = parse("# only a comment\n");
    assert_int_equal(root->kind, FERRY_CFG_NULL);
    ferry_cfg_free(root);
}

static void test_duplicate_keys_refused(void **state)
{
    (void)state;
    parse_fails("name: a\nversion: 1\nname: b\n", "demo.yaml: name (line 3): duplicate key (first at line 1)");
    parse_fails("batch:\n  rows: 1\n  bytes: 2\n  rows: 3\n",
                "demo.yaml: batch.rows (line 4): duplicate key (first at line 2)");
    parse_fails("a: [{x: 1, x: 2}]\n", "demo.yaml: a[0].x (line 1): duplicate key (first at line 1)");
}

static void test_anchors_aliases_tags_refused(void **state)
{
    (void)state;
    parse_fails("base: &b {rows: 1}\nbatch: *b\n", "demo.yaml: base (line 1): anchors (&b) are not supported");
    parse_fails("a: &x 1\n", "anchors (&x) are not supported");
    parse_fails("a: [1, &y 2]\n", "demo.yaml: a[1] (line 1): anchors (&y)");
    /* An alias cannot be written without an anchor, so libyaml refuses it first or we do. */
    struct ferry_cfg *root = NULL;
    struct ferry_error err = {0};
    const char *text = "a: *nowhere\n";
    assert_int_equal(ferry_cfg_parse_string(text, strlen(text), "demo.yaml", &root, &err),
                     FERRY_ECONFIG);
    assert_null(root);
    assert_non_null(strstr(err.message, "demo.yaml"));
    parse_fails("a: !!int 5\n", "demo.yaml: a (line 1): tags (tag:yaml.org,2002:int) are not supported");
    parse_fails("a: !custom {b: 1}\n", "tags (!custom) are not supported");
}

static void test_several_documents_refused(void **state)
{
    (void)state;
    parse_fails("a: 1\n---\nb: 2\n",
                "demo.yaml: line 2: a second YAML document starts here; a file holds one pipeline");
    parse_fails("---\na: 1\n...\n---\nb: 2\n", "a second YAML document");
}

static void test_non_string_keys_refused(void **state)
{
    (void)state;
    parse_fails("? [a, b]\n: 1\n", "demo.yaml: line 1: keys must be strings, not lists");
    parse_fails("? {a: 1}\n: 1\n", "keys must be strings, not maps");
    parse_fails("source:\n  ~: x\n", "demo.yaml: source (line 2): keys must be strings, got an empty key");
    parse_fails("source:\n  : x\n", "demo.yaml: line 2, column 3: YAML syntax");
}

/* `null: ""` as docs/connectors.md writes it for the files source: the plain key null is the
 * word null, its empty quoted value a string. */
static void test_null_word_is_a_key(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("source:\n  null: \"\"\n  NULL: x\n");
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    assert_non_null(src);
    struct ferry_cfg *n = ferry_cfg_get(src, "null");
    assert_non_null(n);
    assert_int_equal(n->kind, FERRY_CFG_SCALAR);
    assert_string_equal(n->scalar, "");
    assert_non_null(ferry_cfg_get(src, "NULL"));
    ferry_cfg_free(root);
}

static void test_syntax_errors_name_line(void **state)
{
    (void)state;
    parse_fails("a: 1\nb: [1, 2\n", "demo.yaml: line ");
    parse_fails("a: 1\n b: 2\nc\n", "YAML syntax");
    parse_fails("a:\n  - x\n  b: 1\n", "demo.yaml: line 3, column");
    parse_fails("a: \"\\0\"\n", "demo.yaml: a (line 1): a value contains a NUL character");
}

static void test_depth_limited(void **state)
{
    (void)state;
    char text[1024];
    size_t o = 0;
    for (int i = 0; i < 100; i++) text[o++] = '[';
    for (int i = 0; i < 100; i++) text[o++] = ']';
    text[o] = '\0';
    parse_fails(text, "nested more than 64 levels deep");
}

static void test_parse_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ferry_test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "version: 1\nbatch:\n  rows: 7\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct ferry_cfg *root = NULL;
    struct ferry_error err = {0};
    assert_int_equal(ferry_cfg_parse_file(path, &root, &err), FERRY_OK);
    assert_string_equal(root->file, path);
    int64_t rows = 0;
    assert_int_equal(ferry_cfg_int(ferry_cfg_get(root, "batch"), "rows", true, 1, 10, &rows, &err),
                     FERRY_OK);
    assert_int_equal(rows, 7);
    ferry_cfg_free(root);
    unlink(path);

    root = NULL;
    assert_int_equal(ferry_cfg_parse_file(path, &root, &err), FERRY_ECONFIG);
    assert_null(root);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "cannot open pipeline file"));
}

/* ---- errors -------------------------------------------------------------------------- */

static void test_error_shapes(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("a:\n  b: x\n");
    struct ferry_error err = {0};
    assert_int_equal(ferry_cfg_error(&err, ferry_cfg_get(ferry_cfg_get(root, "a"), "b"),
                                     "bad %s", "thing"),
                     FERRY_ECONFIG);
    assert_message(err, "demo.yaml: a.b (line 2): bad thing");
    assert_string_equal(err.origin, "config");
    ferry_cfg_error(&err, root, "top");
    assert_message(err, "demo.yaml: line 1: top");
    ferry_cfg_error(&err, NULL, "no node");
    assert_message(err, "no node");
    assert_int_equal(ferry_cfg_error(NULL, root, "x"), FERRY_ECONFIG);
    ferry_cfg_free(root);
}

/* ---- accessors ----------------------------------------------------------------------- */

static void test_str(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("source:\n  url: env:X\n  port: 5432\n  m: {a: 1}\n  n: ~\n");
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    struct ferry_error err = {0};
    const char *s = NULL;
    assert_int_equal(ferry_cfg_str(src, "url", true, &s, &err), FERRY_OK);
    assert_string_equal(s, "env:X");
    assert_int_equal(ferry_cfg_str(src, "port", true, &s, &err), FERRY_OK);
    assert_string_equal(s, "5432");

    s = "default";
    assert_int_equal(ferry_cfg_str(src, "absent", false, &s, &err), FERRY_OK);
    assert_string_equal(s, "default");
    assert_int_equal(ferry_cfg_str(src, "n", false, &s, &err), FERRY_OK);
    assert_string_equal(s, "default");

    assert_int_equal(ferry_cfg_str(src, "type", true, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.type: required (line 2)");
    assert_int_equal(ferry_cfg_str(root, "name", true, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: name: required (line 1)");
    assert_int_equal(ferry_cfg_str(src, "n", true, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.n (line 5): a value is required");
    assert_int_equal(ferry_cfg_str(src, "m", true, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.m (line 4): expected a string, got a map");
    /* A scalar is not a map. */
    assert_int_equal(ferry_cfg_str(ferry_cfg_get(src, "url"), "x", true, &s, &err),
                     FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.url (line 2): expected a map, got \"env:X\"");
    ferry_cfg_free(root);
}

static void test_int(void **state)
{
    (void)state;
    /* The brief's example, line for line. */
    struct ferry_cfg *root = parse("version: 1\n"
                                   "name: demo\n"
                                   "source:\n"
                                   "  type: sample\n"
                                   "  resources:\n"
                                   "    - table: orders\n"
                                   "sink:\n"
                                   "  type: sqlite\n"
                                   "batch:\n"
                                   "  rows: lots\n"
                                   "  queue: 0\n"
                                   "  quoted: \"12\"\n"
                                   "  big: 99999999999999999999\n"
                                   "  under: 1_000_000\n"
                                   "  neg: -5\n"
                                   "  list: [1]\n");
    struct ferry_cfg *b = ferry_cfg_get(root, "batch");
    struct ferry_error err = {0};
    int64_t v = 77;
    assert_int_equal(ferry_cfg_int(b, "rows", false, 1, 10, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: batch.rows (line 10): expected an integer, got \"lots\"");
    assert_int_equal(v, 77);
    assert_int_equal(ferry_cfg_int(b, "queue", false, 1, 1024, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: batch.queue (line 11): must be between 1 and 1024, got 0");
    /* quotes do not make a number text: the saved JSON request has every scalar quoted */
    assert_int_equal(ferry_cfg_int(b, "quoted", false, 0, 100, &v, &err), FERRY_OK);
    assert_int_equal(v, 12);
    assert_int_equal(ferry_cfg_int(b, "big", false, INT64_MIN, INT64_MAX, &v, &err),
                     FERRY_ECONFIG);
    assert_message(err, "demo.yaml: batch.big (line 13): expected an integer that fits in 64 "
                        "bits, got \"99999999999999999999\"");
    assert_int_equal(ferry_cfg_int(b, "under", false, 0, INT64_MAX, &v, &err), FERRY_OK);
    assert_int_equal(v, 1000000);
    assert_int_equal(ferry_cfg_int(b, "neg", false, -10, 10, &v, &err), FERRY_OK);
    assert_int_equal(v, -5);
    assert_int_equal(ferry_cfg_int(b, "list", false, 0, 1, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: batch.list (line 16): expected an integer, got a list");
    v = 3;
    assert_int_equal(ferry_cfg_int(b, "absent", false, 0, 1, &v, &err), FERRY_OK);
    assert_int_equal(v, 3);
    assert_int_equal(ferry_cfg_int(b, "absent", true, 0, 1, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: batch.absent: required (line 10)");
    ferry_cfg_free(root);

    root = parse("a: 9223372036854775807\nb: -9223372036854775808\nc: 9223372036854775808\n");
    assert_int_equal(ferry_cfg_int(root, "a", true, INT64_MIN, INT64_MAX, &v, &err), FERRY_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(ferry_cfg_int(root, "b", true, INT64_MIN, INT64_MAX, &v, &err), FERRY_OK);
    assert_true(v == INT64_MIN);
    assert_int_equal(ferry_cfg_int(root, "c", true, INT64_MIN, INT64_MAX, &v, &err),
                     FERRY_ECONFIG);
    ferry_cfg_free(root);
}

static void test_bool(void **state)
{
    (void)state;
    struct ferry_cfg *root =
        parse("a: true\nb: false\nc: yes\nd: off\ne: maybe\nf: \"true\"\ng: True\n");
    struct ferry_error err = {0};
    bool v = false;
    static const struct {
        const char *key;
        bool want;
    } ok[] = {{"a", true}, {"b", false}, {"c", true}, {"d", false}, {"g", true}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        v = !ok[i].want;
        assert_int_equal(ferry_cfg_bool(root, ok[i].key, true, &v, &err), FERRY_OK);
        if (v != ok[i].want) fail_msg("%s: read as %d", ok[i].key, v);
    }
    assert_int_equal(ferry_cfg_bool(root, "e", true, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: e (line 5): expected true or false, got \"maybe\"");
    v = false;
    assert_int_equal(ferry_cfg_bool(root, "f", true, &v, &err), FERRY_OK);
    assert_true(v);
    v = true;
    assert_int_equal(ferry_cfg_bool(root, "absent", false, &v, &err), FERRY_OK);
    assert_true(v);
    ferry_cfg_free(root);
}

/* A reader of one integer setting: ferry_cfg_size, ferry_cfg_duration_ms. */
typedef int (*int_reader)(struct ferry_cfg *map, const char *key, bool required, int64_t *out,
                          struct ferry_error *err);
struct text_value {
    const char *text;
    int64_t value;
};

/* Each text, as the value of `key` in a document of its own, reads as its value. */
static void assert_reads(int_reader read, const char *key, const struct text_value *ok, size_t n)
{
    struct ferry_error err = {0};
    for (size_t i = 0; i < n; i++) {
        char text[64];
        snprintf(text, sizeof text, "%s: %s\n", key, ok[i].text);
        struct ferry_cfg *root = parse(text);
        int64_t v = -1;
        if (read(root, key, true, &v, &err) != FERRY_OK) fail_msg("%s: %s", ok[i].text, err.message);
        if (v != ok[i].value) fail_msg("%s: %lld", ok[i].text, (long long)v);
        ferry_cfg_free(root);
    }
}

static void test_size(void **state)
{
    (void)state;
    static const struct text_value ok[] = {
        {"4MiB", 4194304},
        {"512KiB", 524288},
        {"4MB", 4000000},
        {"1k", 1024},
        {"1K", 1024},
        {"64kb", 64000},
        {"1000000", 1000000},
        {"\"1000000\"", 1000000},
        {"1GiB", 1073741824},
        {"1.5GiB", 1610612736},
        {"0.5k", 512},
        {"64 KiB", 65536},
        {"100B", 100},
        {"2TiB", (int64_t)2 << 40},
        {"1_000", 1000},
        {"0", 0},
    };
    assert_reads(ferry_cfg_size, "bytes", ok, sizeof ok / sizeof ok[0]);
    struct ferry_error err = {0};
    static const char *const bad[] = {"lots", "4XB", "MiB", "1.k", "4 MiB B", "", "[1]",
                                      "99999999999999TiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64];
        snprintf(text, sizeof text, "x: 1\nbytes: %s\n", bad[i]);
        struct ferry_cfg *root = parse(text);
        int64_t v = 123;
        int rc = ferry_cfg_size(root, "bytes", true, &v, &err);
        assert_int_equal(rc, FERRY_ECONFIG);
        assert_int_equal(v, 123);
        if (strncmp(err.message, "demo.yaml: bytes (line 2): ", 27) != 0)
            fail_msg("%s: %s", bad[i], err.message);
        ferry_cfg_free(root);
    }
    struct ferry_cfg *root = parse("bytes: lots\nneg: -4MiB\n");
    int64_t v;
    ferry_cfg_size(root, "bytes", true, &v, &err);
    assert_message(err, "demo.yaml: bytes (line 1): expected a size like 4MiB, 512KiB, 4MB, 64k "
                        "or a number of bytes, got \"lots\"");
    assert_int_equal(ferry_cfg_size(root, "neg", true, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: neg (line 2): a size cannot be negative");
    v = 9;
    assert_int_equal(ferry_cfg_size(root, "absent", false, &v, &err), FERRY_OK);
    assert_int_equal(v, 9);
    ferry_cfg_free(root);
}

static void test_duration(void **state)
{
    (void)state;
    static const struct text_value ok[] = {
        {"250ms", 250}, {"1s", 1000},       {"5m", 300000},   {"2h", 7200000},
        {"1d", 86400000}, {"1h30m", 5400000}, {"1.5s", 1500}, {"0", 0},
        {"\"10ms\"", 10}, {"0s", 0},
    };
    assert_reads(ferry_cfg_duration_ms, "d", ok, sizeof ok / sizeof ok[0]);
    struct ferry_error err = {0};
    struct ferry_cfg *root = parse("a: soon\nb: 5\nc: 1w\nd: -1s\ne: 1s2\nf: 99999999999999999d\n");
    int64_t v = 42;
    assert_int_equal(ferry_cfg_duration_ms(root, "a", true, &v, &err), FERRY_ECONFIG);
    assert_message(err,
                   "demo.yaml: a (line 1): expected a duration like 250ms, 1s, 5m, 2h or 1d, got \"soon\"");
    assert_int_equal(ferry_cfg_duration_ms(root, "b", true, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: b (line 2): expected a duration with a unit (ms, s, m, h, d) "
                        "like 250ms or 1s, got \"5\"");
    assert_int_equal(ferry_cfg_duration_ms(root, "c", true, &v, &err), FERRY_ECONFIG);
    assert_int_equal(ferry_cfg_duration_ms(root, "d", true, &v, &err), FERRY_ECONFIG);
    assert_int_equal(ferry_cfg_duration_ms(root, "e", true, &v, &err), FERRY_ECONFIG);
    assert_int_equal(ferry_cfg_duration_ms(root, "f", true, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: f (line 6): expected a duration like 250ms, 1s, 5m, 2h or "
                        "1d, got \"99999999999999999d\"");
    assert_int_equal(v, 42);
    assert_int_equal(ferry_cfg_duration_ms(root, "absent", false, &v, &err), FERRY_OK);
    assert_int_equal(v, 42);
    ferry_cfg_free(root);
}

static void test_enum(void **state)
{
    (void)state;
    static const char *const modes[] = {"full", "incremental", "cdc", NULL};
    struct ferry_cfg *root = parse("a: incremental\nb: fulll\nc: [full]\nd: 'cdc'\n");
    struct ferry_error err = {0};
    int v = -1;
    assert_int_equal(ferry_cfg_enum(root, "a", true, modes, &v, &err), FERRY_OK);
    assert_int_equal(v, 1);
    assert_int_equal(ferry_cfg_enum(root, "d", true, modes, &v, &err), FERRY_OK);
    assert_int_equal(v, 2);
    assert_int_equal(ferry_cfg_enum(root, "b", true, modes, &v, &err), FERRY_ECONFIG);
    assert_message(err,
                   "demo.yaml: b (line 2): expected one of full, incremental, cdc, got \"fulll\"");
    assert_int_equal(ferry_cfg_enum(root, "c", true, modes, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: c (line 3): expected one of full, incremental, cdc, got a list");
    v = 0;
    assert_int_equal(ferry_cfg_enum(root, "absent", false, modes, &v, &err), FERRY_OK);
    assert_int_equal(v, 0);
    assert_int_equal(ferry_cfg_enum(root, "absent", true, modes, &v, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: absent: required (line 1)");
    ferry_cfg_free(root);
}

static void test_strv(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("one: id\n"
                                   "many: [id, 'name', 42]\n"
                                   "empty: []\n"
                                   "bad:\n"
                                   "  - id\n"
                                   "  - {x: 1}\n"
                                   "map: {a: b}\n");
    struct ferry_error err = {0};
    char **v = NULL;
    int n = -1;
    assert_int_equal(ferry_cfg_strv(root, "one", true, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(v[0], "id");
    assert_null(v[1]);
    ferry_cfg_strv_free(v);
    assert_int_equal(ferry_cfg_strv(root, "many", true, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(v[0], "id");
    assert_string_equal(v[1], "name");
    assert_string_equal(v[2], "42");
    assert_null(v[3]);
    ferry_cfg_strv_free(v);
    assert_int_equal(ferry_cfg_strv(root, "empty", true, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    assert_null(v[0]);
    ferry_cfg_strv_free(v);

    v = NULL;
    n = 5;
    assert_int_equal(ferry_cfg_strv(root, "bad", true, &v, &n, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: bad[1] (line 6): expected a string, got a map");
    assert_null(v);
    assert_int_equal(n, 5);
    assert_int_equal(ferry_cfg_strv(root, "map", true, &v, &n, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: map (line 7): expected a string or a list of strings, got a map");
    assert_int_equal(ferry_cfg_strv(root, "absent", false, &v, &n, &err), FERRY_OK);
    assert_null(v);
    assert_int_equal(ferry_cfg_strv(root, "absent", true, &v, &n, &err), FERRY_ECONFIG);
    ferry_cfg_strv_free(NULL);
    ferry_cfg_free(root);
}

/* ---- secrets ------------------------------------------------------------------------- */

#define CANARY "c4n4ry-s3cr3t-9f1d"

static void test_secret_env(void **state)
{
    (void)state;
    setenv("FERRY_TEST_PASSWORD", CANARY, 1);
    unsetenv("FERRY_TEST_MISSING");
    struct ferry_cfg *root = parse("source:\n"
                                   "  password: env:FERRY_TEST_PASSWORD\n"
                                   "  missing: env:FERRY_TEST_MISSING\n"
                                   "  badname: env:1X\n"
                                   "  noname: 'env:'\n");
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    struct ferry_error err = {0};
    char *s = NULL;
    assert_int_equal(ferry_cfg_secret(src, "password", true, false, &s, &err), FERRY_OK);
    assert_string_equal(s, CANARY);
    ferry_secret_free(s);

    s = NULL;
    assert_int_equal(ferry_cfg_secret(src, "missing", true, false, &s, &err), FERRY_ECONFIG);
    assert_null(s);
    assert_message(err, "demo.yaml: source.missing (line 3): environment variable "
                        "FERRY_TEST_MISSING is not set");
    assert_int_equal(ferry_cfg_secret(src, "badname", true, false, &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "source.badname (line 4): env: needs a variable name"));
    assert_int_equal(ferry_cfg_secret(src, "noname", true, false, &s, &err), FERRY_ECONFIG);
    assert_int_equal(ferry_cfg_secret(src, "absent", true, false, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.absent: required (line 2)");
    assert_int_equal(ferry_cfg_secret(src, "absent", false, false, &s, &err), FERRY_OK);
    assert_null(s);
    ferry_cfg_free(root);
    unsetenv("FERRY_TEST_PASSWORD");
}

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_secret_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/ferry_test_secret_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p_nl[128], p_crlf[128], p_raw[128], p_two[128], p_nul[128], p_missing[128];
    snprintf(p_nl, sizeof p_nl, "%s/nl", dir);
    snprintf(p_crlf, sizeof p_crlf, "%s/crlf", dir);
    snprintf(p_raw, sizeof p_raw, "%s/raw", dir);
    snprintf(p_two, sizeof p_two, "%s/two", dir);
    snprintf(p_nul, sizeof p_nul, "%s/nul", dir);
    snprintf(p_missing, sizeof p_missing, "%s/missing", dir);
    write_file(p_nl, CANARY "\n", strlen(CANARY) + 1);
    write_file(p_crlf, CANARY "\r\n", strlen(CANARY) + 2);
    write_file(p_raw, CANARY, strlen(CANARY));
    write_file(p_two, "a\n\n", 3);
    write_file(p_nul, "a\0b", 3);

    char text[1024];
    snprintf(text, sizeof text,
             "sink:\n  nl: file:%s\n  crlf: file:%s\n  raw: file:%s\n  two: file:%s\n"
             "  nul: file:%s\n  missing: file:%s\n",
             p_nl, p_crlf, p_raw, p_two, p_nul, p_missing);
    struct ferry_cfg *root = parse(text);
    struct ferry_cfg *sink = ferry_cfg_get(root, "sink");
    struct ferry_error err = {0};
    char *s = NULL;
    assert_int_equal(ferry_cfg_secret(sink, "nl", true, false, &s, &err), FERRY_OK);
    assert_string_equal(s, CANARY);
    ferry_secret_free(s);
    assert_int_equal(ferry_cfg_secret(sink, "crlf", true, false, &s, &err), FERRY_OK);
    assert_string_equal(s, CANARY);
    ferry_secret_free(s);
    assert_int_equal(ferry_cfg_secret(sink, "raw", true, false, &s, &err), FERRY_OK);
    assert_string_equal(s, CANARY);
    ferry_secret_free(s);
    assert_int_equal(ferry_cfg_secret(sink, "two", true, false, &s, &err), FERRY_OK);
    assert_string_equal(s, "a\n"); /* only one trailing newline goes */
    ferry_secret_free(s);

    s = NULL;
    assert_int_equal(ferry_cfg_secret(sink, "nul", true, false, &s, &err), FERRY_ECONFIG);
    assert_null(s);
    assert_non_null(strstr(err.message, "contains a NUL byte"));
    assert_int_equal(ferry_cfg_secret(sink, "missing", true, false, &s, &err), FERRY_ECONFIG);
    assert_null(s);
    char expect[512];
    snprintf(expect, sizeof expect,
             "demo.yaml: sink.missing (line 7): cannot read secret file %s: No such file or "
             "directory",
             p_missing);
    assert_message(err, expect);
    ferry_cfg_free(root);

    /* A big secret file (several buffer growths). */
    char big_path[128];
    snprintf(big_path, sizeof big_path, "%s/big", dir);
    size_t big_len = 100000;
    char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++) big[i] = (char)('a' + i % 26);
    write_file(big_path, big, big_len);
    char ref[160];
    snprintf(ref, sizeof ref, "file:%s", big_path);
    assert_int_equal(ferry_secret_resolve(ref, "x", &s, &err), FERRY_OK);
    assert_int_equal(strlen(s), big_len);
    assert_memory_equal(s, big, big_len);
    ferry_secret_free(s);
    free(big);

    /* Too big. */
    FILE *f = fopen(big_path, "wb");
    assert_non_null(f);
    for (int i = 0; i < (1 << 20) + 10; i++) fputc('x', f);
    fclose(f);
    s = NULL;
    assert_int_equal(ferry_secret_resolve(ref, "sink.key", &s, &err), FERRY_ECONFIG);
    assert_null(s);
    assert_non_null(strstr(err.message, "sink.key: secret file"));
    assert_non_null(strstr(err.message, "is larger than 1024 KiB"));

    assert_int_equal(ferry_secret_resolve("file:", "k", &s, &err), FERRY_ECONFIG);
    assert_message(err, "k: file: needs a path");
    /* A directory is not readable as a file. */
    snprintf(ref, sizeof ref, "file:%s", dir);
    assert_int_equal(ferry_secret_resolve(ref, "k", &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "cannot read secret file"));

    unlink(p_nl);
    unlink(p_crlf);
    unlink(p_raw);
    unlink(p_two);
    unlink(p_nul);
    unlink(big_path);
    rmdir(dir);
}

static void test_secret_plain_never_echoed(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("source:\n  password: " CANARY "\n  m: {a: 1}\n");
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    struct ferry_error err = {0};
    char *s = NULL;
    assert_int_equal(ferry_cfg_secret(src, "password", true, false, &s, &err), FERRY_ECONFIG);
    assert_null(s);
    assert_null(strstr(err.message, CANARY));
    assert_null(strstr(err.message, "c4n4ry"));
    assert_message(err, "demo.yaml: source.password (line 2): expected a secret reference "
                        "env:NAME or file:PATH; a plain value is not allowed here (it would be "
                        "saved with the run)");
    assert_int_equal(ferry_cfg_secret(src, "password", true, true, &s, &err), FERRY_OK);
    assert_string_equal(s, CANARY);
    ferry_secret_free(s);
    assert_int_equal(ferry_cfg_secret(src, "m", true, true, &s, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.m (line 3): expected a secret reference env:NAME or "
                        "file:PATH, got a map");

    assert_int_equal(ferry_secret_resolve(CANARY, "source.password", &s, &err), FERRY_ECONFIG);
    assert_null(strstr(err.message, CANARY));
    assert_message(err, "source.password: expected a secret reference env:NAME, file:PATH or "
                        "secret:NAME");
    assert_int_equal(ferry_secret_resolve(NULL, NULL, &s, &err), FERRY_EINVAL);
    ferry_secret_free(NULL);
    ferry_cfg_free(root);
}

static void test_secret_values_never_in_errors(void **state)
{
    (void)state;
    /* A resolved value must not leak into any later error about the same key either:
     * accessors echo the node text, which is the reference, never the value. */
    setenv("FERRY_TEST_PASSWORD", CANARY, 1);
    struct ferry_cfg *root = parse("source:\n  password: env:FERRY_TEST_PASSWORD\n");
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    struct ferry_error err = {0};
    char *s = NULL;
    assert_int_equal(ferry_cfg_secret(src, "password", true, false, &s, &err), FERRY_OK);
    ferry_secret_free(s);
    int64_t v;
    assert_int_equal(ferry_cfg_int(src, "password", true, 0, 1, &v, &err), FERRY_ECONFIG);
    assert_null(strstr(err.message, CANARY));
    assert_non_null(strstr(err.message, "env:FERRY_TEST_PASSWORD"));
    char *json = ferry_cfg_to_json(root, NULL);
    assert_null(strstr(json, CANARY));
    ferry_free(json);
    ferry_cfg_free(root);
    unsetenv("FERRY_TEST_PASSWORD");
}

/* ---- unknown keys, marking, JSON ----------------------------------------------------- */

static void test_check_unused(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("version: 1\n"
                                   "source:\n"
                                   "  type: sample\n"
                                   "  resources:\n"
                                   "    - table: orders\n"
                                   "      where: x > 1\n"
                                   "  rowz: 7\n"
                                   "sink: {type: null}\n");
    struct ferry_error err = {0};
    int64_t v;
    const char *s;
    assert_int_equal(ferry_cfg_check_unused(root, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: version (line 1): unknown key");
    ferry_cfg_int(root, "version", true, 1, 1, &v, &err);
    struct ferry_cfg *src = ferry_cfg_get(root, "source");
    ferry_cfg_str(src, "type", true, &s, &err);
    struct ferry_cfg *res = ferry_cfg_get(src, "resources");
    ferry_cfg_str(res->children[0], "table", true, &s, &err);
    ferry_cfg_mark_used(ferry_cfg_get(root, "sink"));
    assert_int_equal(ferry_cfg_check_unused(root, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.resources[0].where (line 6): unknown key");
    ferry_cfg_str(res->children[0], "where", true, &s, &err);
    assert_int_equal(ferry_cfg_check_unused(root, &err), FERRY_ECONFIG);
    assert_message(err, "demo.yaml: source.rowz (line 7): unknown key");
    /* Checking a section only looks inside it. */
    assert_int_equal(ferry_cfg_check_unused(ferry_cfg_get(root, "sink"), &err), FERRY_OK);
    ferry_cfg_int(src, "rowz", true, 0, 10, &v, &err);
    assert_int_equal(ferry_cfg_check_unused(root, &err), FERRY_OK);
    assert_int_equal(ferry_cfg_check_unused(NULL, &err), FERRY_OK);
    ferry_cfg_free(root);

    root = parse("a: {b: {c: 1}}\n");
    ferry_cfg_mark_used(root);
    assert_int_equal(ferry_cfg_check_unused(root, &err), FERRY_OK);
    ferry_cfg_mark_used(NULL);
    ferry_cfg_free(root);
}

static void test_to_json(void **state)
{
    (void)state;
    struct ferry_cfg *root = parse("zeta: 1\n"
                                   "alpha:\n"
                                   "  y: [b, a, ~]\n"
                                   "  x: \"q\\\"uote\\\\ \\t\"\n"
                                   "beta: ~\n"
                                   "gamma: {}\n"
                                   "delta: []\n"
                                   "Upper: true\n");
    char *json = ferry_cfg_to_json(root, NULL);
    assert_string_equal(json, "{\"Upper\":\"true\",\"alpha\":{\"x\":\"q\\\"uote\\\\ \\u0009\","
                              "\"y\":[\"b\",\"a\",null]},\"beta\":null,\"delta\":[],"
                              "\"gamma\":{},\"zeta\":\"1\"}");
    ferry_free(json);
    static const char *const skip[] = {"alpha", "zeta", NULL};
    json = ferry_cfg_to_json(root, skip);
    assert_string_equal(json, "{\"Upper\":\"true\",\"beta\":null,\"delta\":[],\"gamma\":{}}");
    ferry_free(json);
    /* skip applies to direct children only */
    static const char *const skip_x[] = {"x", NULL};
    json = ferry_cfg_to_json(root, skip_x);
    assert_non_null(strstr(json, "\"x\":"));
    ferry_free(json);
    json = ferry_cfg_to_json(NULL, NULL);
    assert_string_equal(json, "null");
    ferry_free(json);
    ferry_cfg_free(root);

    /* The same content written differently gives the same JSON. */
    struct ferry_cfg *a = parse("b: 1\na: {d: [x, y], c: z}\n");
    struct ferry_cfg *b = parse("a:\n  c: 'z'\n  d:\n    - x\n    - \"y\"\nb: \"1\"\n");
    char *ja = ferry_cfg_to_json(a, NULL), *jb = ferry_cfg_to_json(b, NULL);
    assert_string_equal(ja, jb);
    ferry_free(ja);
    ferry_free(jb);
    ferry_cfg_free(a);
    ferry_cfg_free(b);
}

/* Every allocation failure while parsing is reported as ENOMEM and leaks nothing
 * (the ASan build checks the leaks). */
static void test_out_of_memory(void **state)
{
    (void)state;
    const char *text = "version: 1\nname: demo\nsource:\n  type: sample\n  resources:\n"
                       "    - {table: orders, cursor: [a, b]}\nsink: {type: sqlite, path: x}\n";
    int ok_at = -1;
    for (long n = 0; n < 500; n++) {
        struct ferry_cfg *root = NULL;
        struct ferry_error err = {0};
        ferry_mem_fail_after(n);
        int rc = ferry_cfg_parse_string(text, strlen(text), "demo.yaml", &root, &err);
        char *json = rc == FERRY_OK ? ferry_cfg_to_json(root, NULL) : NULL;
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_non_null(root);
            ferry_free(json);
            ferry_cfg_free(root);
            if (json != NULL) {
                ok_at = (int)n;
                break;
            }
        } else {
            assert_int_equal(rc, FERRY_ENOMEM);
            assert_null(root);
            assert_non_null(strstr(err.message, "demo.yaml"));
        }
    }
    assert_true(ok_at > 10); /* it took many allocations, each of them failed once */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_paths_lines_columns),
        cmocka_unit_test(test_tree_flow_style_and_str_tag),
        cmocka_unit_test(test_empty_document_is_a_null_root),
        cmocka_unit_test(test_duplicate_keys_refused),
        cmocka_unit_test(test_anchors_aliases_tags_refused),
        cmocka_unit_test(test_several_documents_refused),
        cmocka_unit_test(test_non_string_keys_refused),
        cmocka_unit_test(test_null_word_is_a_key),
        cmocka_unit_test(test_syntax_errors_name_line),
        cmocka_unit_test(test_depth_limited),
        cmocka_unit_test(test_parse_file),
        cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_str),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_enum),
        cmocka_unit_test(test_strv),
        cmocka_unit_test(test_secret_env),
        cmocka_unit_test(test_secret_file),
        cmocka_unit_test(test_secret_plain_never_echoed),
        cmocka_unit_test(test_secret_values_never_in_errors),
        cmocka_unit_test(test_check_unused),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
