/* tests/unit/test_pipeline.c - loading pipeline files: the demo file, every rule of the
 * file format and its error message, the version hash (what changes it and what does
 * not), the saved request, route names. Uses the real connector registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/error.h"
#include "ferry/pipeline.h"

static const char demo[] = "version: 1\n"
                           "name: demo\n"
                           "source:\n"
                           "  type: sample\n"
                           "  rows: 1000000\n"
                           "  seed: 42\n"
                           "  resources:\n"
                           "    - table: orders\n"
                           "      mode: full\n"
                           "sink:\n"
                           "  type: sqlite\n"
                           "  path: out/demo.db\n"
                           "  write: append\n";

static struct ferry_pipeline_spec *load(const char *text)
{
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err = {0};
    if (ferry_pipeline_load_string(text, strlen(text), "demo.yaml", &p, &err) != FERRY_OK)
        fail_msg("load failed: %s", err.message);
    assert_non_null(p);
    return p;
}

/* Loading must fail with FERRY_ECONFIG and a message equal to `expected` (or, when it
 * starts with '~', containing the rest). */
static void load_fails(const char *text, const char *expected)
{
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err = {0};
    int rc = ferry_pipeline_load_string(text, strlen(text), "demo.yaml", &p, &err);
    if (rc != FERRY_ECONFIG) fail_msg("rc %d (%s) for:\n%s", rc, err.message, text);
    assert_null(p);
    if (expected[0] == '~') {
        if (strstr(err.message, expected + 1) == NULL)
            fail_msg("message \"%s\" does not contain \"%s\"", err.message, expected + 1);
    } else if (strcmp(err.message, expected) != 0) {
        fail_msg("message \"%s\"\n   expected \"%s\"", err.message, expected);
    }
}

/* Builds a pipeline file from the demo's first lines and extra text. */
static char *with(const char *source_extra, const char *resource_extra, const char *sink_extra,
                  const char *tail)
{
    char *s = ferry_asprintf("version: 1\n"
                             "name: demo\n"
                             "source:\n"
                             "  type: sample\n"
                             "  rows: 1000000\n"
                             "  seed: 42\n"
                             "%s"
                             "  resources:\n"
                             "    - table: orders\n"
                             "%s"
                             "sink:\n"
                             "  type: sqlite\n"
                             "  path: out/demo.db\n"
                             "%s"
                             "%s",
                             source_extra, resource_extra, sink_extra, tail);
    assert_non_null(s);
    return s;
}

static void version_of(const char *text, char out[65])
{
    struct ferry_pipeline_spec *p = load(text);
    memcpy(out, p->version, 65);
    ferry_pipeline_free(p);
}

/* ---- the demo file ------------------------------------------------------------------- */

static void test_demo_loads(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = load(demo);
    assert_string_equal(p->file, "demo.yaml");
    assert_string_equal(p->name, "demo");
    assert_string_equal(p->source_type, "sample");
    assert_ptr_equal(p->source_vt, ferry_source_find("sample"));
    assert_string_equal(p->sink_type, "sqlite");
    assert_ptr_equal(p->sink_vt, ferry_sink_find("sqlite"));
    assert_int_equal(p->write, FERRY_WRITE_APPEND);
    assert_int_equal(p->n_resources, 1);
    const struct ferry_resource_spec *r = &p->resources[0];
    assert_string_equal(r->table, "orders");
    assert_int_equal(r->mode, FERRY_READ_FULL);
    assert_null(r->cursor);
    assert_null(r->columns);
    assert_null(r->key);
    assert_int_equal(r->lookback_ms, 0);
    assert_non_null(r->node);
    assert_string_equal(r->node->path, "source.resources[0]");
    assert_int_equal(p->n_transforms, 0);
    assert_null(p->transforms);
    assert_int_equal(p->batch.rows, 50000);
    assert_int_equal(p->batch.bytes, 2 << 20);
    assert_int_equal(p->batch.flush_after_ms, 1000);
    assert_int_equal(p->batch.queue, 2);
    assert_null(p->verify);
    assert_int_equal(strlen(p->version), 64);
    for (int i = 0; i < 64; i++) assert_non_null(strchr("0123456789abcdef", p->version[i]));
    assert_string_equal(p->source->path, "source");
    assert_string_equal(p->sink->path, "sink");
    assert_ptr_equal(p->root->children[0], ferry_cfg_get(p->root, "version"));

    char *route = ferry_pipeline_route(p, r);
    assert_string_equal(route, "orders -> sqlite:orders");
    ferry_free(route);
    assert_string_equal(ferry_resource_target(r), "orders");

    assert_string_equal(p->request_json,
                        "{\"name\":\"demo\",\"sink\":{\"path\":\"out/demo.db\",\"type\":\"sqlite\","
                        "\"write\":\"append\"},\"source\":{\"resources\":[{\"mode\":\"full\","
                        "\"table\":\"orders\"}],\"rows\":\"1000000\",\"seed\":\"42\","
                        "\"type\":\"sample\"},\"version\":\"1\"}");
    ferry_pipeline_free(p);
    ferry_pipeline_free(NULL);
}

/* The loader reads its own keys and leaves the connectors' keys unread, so that the
 * runner's unknown-key check after the connectors opened names a stray key exactly. */
static void test_loader_leaves_connector_keys_unread(void **state)
{
    (void)state;
    char *text = with("", "      where: x\n", "", "");
    struct ferry_pipeline_spec *p = load(text);
    struct ferry_error err = {0};
    assert_int_equal(ferry_cfg_check_unused(p->root, &err), FERRY_ECONFIG);
    assert_string_equal(err.message, "demo.yaml: source.rows (line 5): unknown key");
    ferry_cfg_get(p->source, "rows");
    ferry_cfg_get(p->source, "seed");
    assert_int_equal(ferry_cfg_check_unused(p->root, &err), FERRY_ECONFIG);
    assert_string_equal(err.message, "demo.yaml: source.resources[0].where (line 9): unknown key");
    ferry_cfg_get(p->resources[0].node, "where");
    assert_int_equal(ferry_cfg_check_unused(p->root, &err), FERRY_ECONFIG);
    assert_string_equal(err.message, "demo.yaml: sink.path (line 12): unknown key");
    ferry_cfg_get(p->sink, "path");
    assert_int_equal(ferry_cfg_check_unused(p->root, &err), FERRY_OK);
    /* resources, type and write were read by the loader: the connectors never see them */
    assert_true(ferry_cfg_get(p->source, "resources")->used);
    ferry_pipeline_free(p);
    ferry_free(text);
}

static void test_real_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ferry_test_pipeline_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, demo, strlen(demo)), (ssize_t)strlen(demo));
    close(fd);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err = {0};
    assert_int_equal(ferry_pipeline_load(path, &p, &err), FERRY_OK);
    assert_string_equal(p->file, path);
    assert_string_equal(p->root->file, path);
    assert_string_equal(p->name, "demo");
    char v[65];
    version_of(demo, v);
    assert_string_equal(p->version, v); /* the file's name is not part of the version */
    ferry_pipeline_free(p);

    /* Errors name the file as given. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("version: 1\nname: demo\nsource: []\n", f);
    fclose(f);
    assert_int_equal(ferry_pipeline_load(path, &p, &err), FERRY_ECONFIG);
    assert_null(p);
    char expect[256];
    snprintf(expect, sizeof expect, "%s: source (line 3): expected a map, got a list", path);
    assert_string_equal(err.message, expect);
    unlink(path);

    assert_int_equal(ferry_pipeline_load(path, &p, &err), FERRY_ECONFIG);
    assert_null(p);
    assert_non_null(strstr(err.message, path));
}

/* ---- top level ----------------------------------------------------------------------- */

static void test_top_level_rules(void **state)
{
    (void)state;
    load_fails("", "demo.yaml: the file is empty; a pipeline file starts with version: 1");
    load_fails("- a\n", "demo.yaml: line 1: expected a map of keys (version, name, source, sink)");
    load_fails("version: 1\nname: demo\nsorce: {}\n",
               "demo.yaml: sorce (line 3): unknown key; did you mean source? (the top level "
               "takes version, name, source, sink, transforms, batch, verify, worker, "
               "distribute, retries, notify, on_resource_error, schema_changes, concurrency, "
               "memory, on_unrepresentable)");
    load_fails("version: 1\nname: demo\nwhatever: 1\n",
               "demo.yaml: whatever (line 3): unknown key (the top level takes version, name, "
               "source, sink, transforms, batch, verify, worker, distribute, retries, notify, "
               "on_resource_error, schema_changes, concurrency, memory, on_unrepresentable)");
    load_fails("name: demo\n", "demo.yaml: version: required (line 1)");
    load_fails("version: 2\nname: demo\n",
               "demo.yaml: version (line 1): unsupported version 2; this ferry reads version 1");
    load_fails("version: \"2\"\nname: demo\n",
               "demo.yaml: version (line 1): unsupported version 2; this ferry reads version 1");
    load_fails("version: one\n", "demo.yaml: version (line 1): expected an integer, got \"one\"");
    load_fails("version: 1\n", "demo.yaml: name: required (line 1)");
    load_fails("version: 1\nname: my demo\n",
               "demo.yaml: name (line 2): expected 1 to 128 letters, digits, '_', '.' or '-', "
               "got \"my demo\"");
    load_fails("version: 1\nname: ''\n", "~name (line 2): expected 1 to 128 letters");
    load_fails("version: 1\nname: [a]\n",
               "demo.yaml: name (line 2): expected a string, got a list");
    load_fails("version: 1\nname: d\xc3\xa9mo\n", "~name (line 2): expected 1 to 128");
    load_fails("version: 1\nname: demo\n", "demo.yaml: source: required (line 1)");
    load_fails("version: 1\nname: demo\nsource: sample\n",
               "demo.yaml: source (line 3): expected a map, got a single value");
    load_fails("version: 1\nname: demo\nsource:\n",
               "demo.yaml: source (line 3): expected a map, got nothing (null)");
    /* YAML-level refusals come through with the file name */
    load_fails("version: 1\nversion: 1\n",
               "demo.yaml: version (line 2): duplicate key (first at line 1)");

    /* 128 characters is the longest name */
    char name[200];
    memset(name, 'n', 128);
    name[128] = '\0';
    char *text = ferry_asprintf("version: 1\nname: %s.x-Y_9\n%s", "a", strstr(demo, "source:"));
    struct ferry_pipeline_spec *p = load(text);
    assert_string_equal(p->name, "a.x-Y_9");
    ferry_pipeline_free(p);
    ferry_free(text);
    text = ferry_asprintf("version: 1\nname: %s\n%s", name, strstr(demo, "source:"));
    p = load(text);
    assert_int_equal(strlen(p->name), 128);
    ferry_pipeline_free(p);
    ferry_free(text);
    name[128] = 'n';
    name[129] = '\0';
    text = ferry_asprintf("version: 1\nname: %s\n%s", name, strstr(demo, "source:"));
    load_fails(text, "~name (line 2): expected 1 to 128 letters");
    ferry_free(text);
}

static void test_connector_types(void **state)
{
    (void)state;
    char known_sources[256] = "", known_sinks[256] = "";
    for (const struct ferry_source_vtable *const *s = ferry_sources(); *s; s++)
        snprintf(known_sources + strlen(known_sources), sizeof known_sources - strlen(known_sources),
                 "%s%s", s == ferry_sources() ? "" : ", ", (*s)->name);
    for (const struct ferry_sink_vtable *const *s = ferry_sinks(); *s; s++)
        snprintf(known_sinks + strlen(known_sinks), sizeof known_sinks - strlen(known_sinks),
                 "%s%s", s == ferry_sinks() ? "" : ", ", (*s)->name);
    assert_non_null(strstr(known_sources, "sample"));
    assert_non_null(strstr(known_sinks, "sqlite"));

    char expect[512];
    snprintf(expect, sizeof expect,
             "demo.yaml: source.type (line 4): unknown source type \"postgress\"; known types: %s",
             known_sources);
    load_fails("version: 1\nname: demo\nsource:\n  type: postgress\n", expect);
    load_fails("version: 1\nname: demo\nsource:\n  seed: 1\n",
               "demo.yaml: source.type: required (line 4)");
    load_fails("version: 1\nname: demo\nsource:\n  type: {a: 1}\n",
               "demo.yaml: source.type (line 4): expected a string, got a map");

    char *text = ferry_asprintf("%.*s", (int)(strstr(demo, "sink:") - demo), demo);
    load_fails(text, "demo.yaml: sink: required (line 1)");
    ferry_free(text);
    text = ferry_asprintf("%.*ssink:\n  type: s3x\n", (int)(strstr(demo, "sink:") - demo), demo);
    snprintf(expect, sizeof expect,
             "demo.yaml: sink.type (line 11): unknown sink type \"s3x\"; known types: %s",
             known_sinks);
    load_fails(text, expect);
    ferry_free(text);
    text = ferry_asprintf("%.*ssink:\n  path: x\n", (int)(strstr(demo, "sink:") - demo), demo);
    load_fails(text, "demo.yaml: sink.type: required (line 11)");
    ferry_free(text);
    /* An empty type names nothing (never the null sink: that would discard data). */
    text = ferry_asprintf("%.*ssink:\n  type:\n", (int)(strstr(demo, "sink:") - demo), demo);
    load_fails(text, "demo.yaml: sink.type (line 11): a value is required");
    ferry_free(text);
    text = ferry_asprintf("%.*ssink:\n  type: ~\n", (int)(strstr(demo, "sink:") - demo), demo);
    load_fails(text, "demo.yaml: sink.type (line 11): a value is required");
    ferry_free(text);
    /* `null`, quoted or not (unquoted it is YAML's null word), is the null sink. */
    static const char *const null_types[] = {"'null'", "null", "\"null\""};
    char first_version[65] = "";
    for (size_t i = 0; i < 3; i++) {
        text = ferry_asprintf("%.*ssink: {type: %s}\n", (int)(strstr(demo, "sink:") - demo), demo,
                              null_types[i]);
        struct ferry_pipeline_spec *p = load(text);
        assert_string_equal(p->sink_type, "null");
        assert_ptr_equal(p->sink_vt, ferry_sink_find("null"));
        if (i == 0) memcpy(first_version, p->version, 65);
        assert_string_equal(p->version, first_version);
        ferry_pipeline_free(p);
        ferry_free(text);
    }
}

static void test_write_modes(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        enum ferry_write_mode mode;
    } modes[] = {{"append", FERRY_WRITE_APPEND},
                 {"replace", FERRY_WRITE_REPLACE},
                 {"upsert", FERRY_WRITE_UPSERT},
                 {"merge", FERRY_WRITE_MERGE}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "  write: %s\n", modes[i].word);
        char *text = with("", "", line, "");
        struct ferry_pipeline_spec *p = load(text);
        assert_int_equal(p->write, modes[i].mode);
        assert_true(ferry_cfg_get(p->sink, "write")->used);
        ferry_pipeline_free(p);
        ferry_free(text);
    }
    char *text = with("", "", "", "");
    struct ferry_pipeline_spec *p = load(text);
    assert_int_equal(p->write, FERRY_WRITE_APPEND);
    ferry_pipeline_free(p);
    ferry_free(text);
    text = with("", "", "  write: upsertt\n", "");
    load_fails(text, "demo.yaml: sink.write (line 12): expected one of append, replace, upsert, "
                     "merge, got \"upsertt\"");
    ferry_free(text);
}

/* ---- resources ----------------------------------------------------------------------- */

static void test_resources(void **state)
{
    (void)state;
    const char *head = "version: 1\nname: demo\nsource:\n  type: sample\n";
    const char *sink = "sink: {type: sqlite, path: x.db}\n";
    struct {
        const char *resources;
        const char *message;
    } bad[] = {
        {"  seed: 1\n", "demo.yaml: source.resources: required (line 4)"},
        {"  resources: {table: orders}\n",
         "demo.yaml: source.resources (line 5): expected a list, got a map"},
        {"  resources: []\n",
         "demo.yaml: source.resources (line 5): lists no resource; add at least one {table: ...}"},
        {"  resources: [orders]\n",
         "demo.yaml: source.resources[0] (line 5): expected a map like {table: orders, mode: full}"},
        {"  resources:\n    - mode: full\n", "demo.yaml: source.resources[0].table: required (line 6)"},
        {"  resources:\n    - table: ''\n",
         "demo.yaml: source.resources[0].table (line 6): must not be empty"},
        {"  resources:\n    - table: orders\n      mode: fll\n",
         "demo.yaml: source.resources[0].mode (line 7): expected one of full, incremental, cdc, "
         "got \"fll\""},
        {"  resources:\n    - table: orders\n      cursor: updated_at\n",
         "demo.yaml: source.resources[0].cursor (line 7): a cursor is only read with mode: "
         "incremental (this resource reads mode: full)"},
        {"  resources:\n    - table: orders\n      mode: incremental\n",
         "demo.yaml: source.resources[0].cursor: required with mode: incremental (line 6)"},
        {"  resources:\n    - table: orders\n      mode: incremental\n      cursor: []\n",
         "demo.yaml: source.resources[0].cursor (line 8): must name at least one column"},
        {"  resources:\n    - {table: orders, columns: [id, id]}\n",
         "demo.yaml: source.resources[0].columns (line 6): column id is listed twice"},
        {"  resources:\n    - {table: orders, columns: [id, '']}\n",
         "demo.yaml: source.resources[0].columns (line 6): a column name is empty"},
        {"  resources:\n    - {table: orders, key: [{a: 1}]}\n",
         "demo.yaml: source.resources[0].key[0] (line 6): expected a string, got a map"},
        {"  resources:\n    - {table: orders, lookback: 5m}\n",
         "demo.yaml: source.resources[0].lookback (line 6): lookback is only read with mode: "
         "incremental"},
        {"  resources:\n    - {table: orders, mode: incremental, cursor: updated_at, lookback: 5}\n",
         "demo.yaml: source.resources[0].lookback (line 6): expected a duration with a unit (ms, "
         "s, m, h, d) like 250ms or 1s, got \"5\""},
        {"  resources:\n    - {table: orders, target: ''}\n",
         "demo.yaml: source.resources[0].target (line 6): must not be empty"},
        {"  resources:\n    - table: orders\n    - table: users\n    - table: orders\n",
         "demo.yaml: source.resources[2].table (line 8): table orders is listed twice (first at "
         "line 6)"},
        {"  resources:\n    - table: public.orders\n    - table: sales.orders\n",
         "demo.yaml: source.resources[1] (line 7): public.orders and sales.orders would both "
         "write to orders; set target: on one of them"},
        {"  resources:\n    - table: orders\n    - {table: users, target: orders}\n",
         "demo.yaml: source.resources[1] (line 7): orders and users would both write to orders; "
         "set target: on one of them"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *text = ferry_asprintf("%s%s%s", head, bad[i].resources, sink);
        load_fails(text, bad[i].message);
        ferry_free(text);
    }

    char *text = ferry_asprintf("%s%s%s", head,
                                "  resources:\n"
                                "    - table: public.orders\n"
                                "      mode: incremental\n"
                                "      cursor: [updated_at, id]\n"
                                "      columns: [id, status, updated_at]\n"
                                "      key: id\n"
                                "      lookback: 5m\n"
                                "    - table: users\n"
                                "      target: people\n"
                                "      columns: email\n",
                                sink);
    struct ferry_pipeline_spec *p = load(text);
    assert_int_equal(p->n_resources, 2);
    const struct ferry_resource_spec *r = &p->resources[0];
    assert_string_equal(r->table, "public.orders");
    assert_int_equal(r->mode, FERRY_READ_INCREMENTAL);
    assert_int_equal(r->n_cursor, 2);
    assert_string_equal(r->cursor[0], "updated_at");
    assert_string_equal(r->cursor[1], "id");
    assert_null(r->cursor[2]);
    assert_int_equal(r->n_columns, 3);
    assert_string_equal(r->columns[2], "updated_at");
    assert_int_equal(r->n_key, 1);
    assert_string_equal(r->key[0], "id");
    assert_int_equal(r->lookback_ms, 5 * 60 * 1000);
    assert_string_equal(ferry_resource_target(r), "orders");
    char *route = ferry_pipeline_route(p, r);
    assert_string_equal(route, "public.orders -> sqlite:orders");
    ferry_free(route);
    r = &p->resources[1];
    assert_int_equal(r->mode, FERRY_READ_FULL);
    assert_int_equal(r->n_columns, 1);
    assert_string_equal(r->columns[0], "email");
    assert_string_equal(ferry_resource_target(r), "people");
    route = ferry_pipeline_route(p, r);
    assert_string_equal(route, "users -> sqlite:people");
    ferry_free(route);
    struct ferry_error err = {0};
    /* every key of a resource the loader owns is marked read; the connector sees none */
    assert_int_equal(ferry_cfg_check_unused(p->source, &err), FERRY_OK);
    ferry_pipeline_free(p);
    ferry_free(text);
}

static void test_cdc_needs_a_cdc_source(void **state)
{
    (void)state;
    const struct ferry_source_vtable *vt = ferry_source_find("sample");
    assert_non_null(vt);
    char *text = ferry_asprintf("version: 1\nname: demo\nsource:\n  type: sample\n  resources:\n"
                                "    - {table: orders, mode: cdc}\nsink: {type: sqlite}\n");
    if (vt->supports_cdc) {
        struct ferry_pipeline_spec *p = load(text);
        assert_int_equal(p->resources[0].mode, FERRY_READ_CDC);
        ferry_pipeline_free(p);
    } else {
        load_fails(text, "demo.yaml: source.resources[0].mode (line 6): source sample cannot "
                         "capture changes (cdc); use mode: full");
    }
    ferry_free(text);
}

/* A quoted resource name writes, by default, to its last part unquoted, never to a table
 * whose name keeps the quotes. */
static void test_resource_target_quoted(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p =
        load("version: 1\nname: demo\nsource:\n  type: sample\n  resources:\n"
             "    - table: '\"sch \"\"q\"\"\".\"tab le \"\"\u00fc\"\" ;--\"'\n"
             "    - table: '\"a.b\"'\n"
             "    - table: '\"x\".plain'\n"
             "    - table: '\"s\".\"Q\"\"\"'\n"
             "      target: given\n"
             "sink: {type: sqlite, path: out/demo.db}\n");
    assert_int_equal(p->n_resources, 4);
    assert_string_equal(ferry_resource_target(&p->resources[0]), "tab le \"\u00fc\" ;--");
    assert_string_equal(ferry_resource_target(&p->resources[1]), "a.b");
    assert_string_equal(ferry_resource_target(&p->resources[2]), "plain");
    assert_string_equal(ferry_resource_target(&p->resources[3]), "given");
    ferry_pipeline_free(p);
}

static void test_resource_target_without_node(void **state)
{
    (void)state;
    struct ferry_resource_spec r = {.table = "public.orders"};
    assert_string_equal(ferry_resource_target(&r), "orders");
    r.table = "orders";
    assert_string_equal(ferry_resource_target(&r), "orders");
    r.table = "odd.";
    assert_string_equal(ferry_resource_target(&r), "odd.");
    r.table = "a.b.c";
    assert_string_equal(ferry_resource_target(&r), "c");
    assert_null(ferry_resource_target(NULL));
}

/* ---- transforms ---------------------------------------------------------------------- */

static void test_transforms(void **state)
{
    (void)state;
    char *text = with("", "", "",
                      "transforms:\n"                                            /* 12 */
                      "  - {resource: orders, column: note, hash: sha256}\n"     /* 13 */
                      "  - drop: [discount]\n"                                   /* 14 */
                      "  - resource: orders\n"                                   /* 15 */
                      "    rename: {status: state}\n");                          /* 16 */
    struct ferry_pipeline_spec *p = load(text);
    assert_int_equal(p->n_transforms, 3);
    assert_string_equal(p->transforms[0].kind, "hash");
    assert_string_equal(p->transforms[0].resource, "orders");
    assert_string_equal(p->transforms[0].node->path, "transforms[0]");
    assert_int_equal(p->transforms[0].node->line, 13);
    assert_string_equal(p->transforms[1].kind, "drop");
    assert_null(p->transforms[1].resource);
    assert_string_equal(p->transforms[2].kind, "rename");
    assert_int_equal(p->transforms[2].node->line, 15);
    ferry_pipeline_free(p);
    ferry_free(text);

    /* the transform stage reads the details: `column` is still unread, the kind is read */
    text = with("", "", "", "transforms:\n  - {resource: orders, column: note, hash: sha256}\n");
    struct ferry_pipeline_spec *q = load(text);
    struct ferry_cfg *t = q->transforms[0].node;
    bool column_used = false;
    for (int i = 0; i < t->n_children; i++)
        if (!strcmp(t->children[i]->key, "column")) column_used = t->children[i]->used;
    assert_false(column_used);
    bool hash_used = false;
    for (int i = 0; i < t->n_children; i++)
        if (!strcmp(t->children[i]->key, "hash")) hash_used = t->children[i]->used;
    assert_true(hash_used);
    ferry_pipeline_free(q);
    ferry_free(text);

    static const struct {
        const char *tail;
        const char *message;
    } bad[] = {
        {"transforms:\n  - {resource: orders}\n",
         "demo.yaml: transforms[0] (line 13): transform 0 has no kind; use exactly one of drop, "
         "rename, hash, mask, select, add, filter, cast"},
        {"transforms:\n  - drop: [a]\n  - column: note\n    hash: sha256\n    mask: '*'\n",
         "demo.yaml: transforms[1] (line 14): transform 1 has several kinds (hash and mask); use "
         "exactly one per list item"},
        {"transforms:\n  - {resource: orderz, drop: [a]}\n",
         "demo.yaml: transforms[0].resource (line 13): no resource orderz in source.resources"},
        {"transforms:\n  - hash\n",
         "demo.yaml: transforms[0] (line 13): expected a map with one of drop, rename, hash, "
         "mask, select, add, filter, cast"},
        {"transforms: {drop: [a]}\n", "demo.yaml: transforms (line 12): expected a list, got a map"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        text = with("", "", "", bad[i].tail);
        load_fails(text, bad[i].message);
        ferry_free(text);
    }
    text = with("", "", "", "transforms: []\n");
    p = load(text);
    assert_int_equal(p->n_transforms, 0);
    ferry_pipeline_free(p);
    ferry_free(text);
}

/* ---- batch, verify ------------------------------------------------------------------- */

static void test_batch(void **state)
{
    (void)state;
    char *text = with("", "", "", "batch: {rows: 1000, bytes: 64KiB, flush_after: 250ms, queue: 16}\n");
    struct ferry_pipeline_spec *p = load(text);
    assert_int_equal(p->batch.rows, 1000);
    assert_int_equal(p->batch.bytes, 65536);
    assert_int_equal(p->batch.flush_after_ms, 250);
    assert_int_equal(p->batch.queue, 16);
    ferry_pipeline_free(p);
    ferry_free(text);

    text = with("", "", "", "batch:\n  rows: 10000000\n  bytes: 1GiB\n  flush_after: 1h\n  queue: 1024\n");
    p = load(text);
    assert_int_equal(p->batch.rows, 10000000);
    assert_int_equal(p->batch.bytes, 1 << 30);
    assert_int_equal(p->batch.flush_after_ms, 3600000);
    assert_int_equal(p->batch.queue, 1024);
    ferry_pipeline_free(p);
    ferry_free(text);

    text = with("", "", "", "batch: {rows: 7}\n");
    p = load(text);
    assert_int_equal(p->batch.rows, 7);
    assert_int_equal(p->batch.bytes, 2 << 20);
    assert_int_equal(p->batch.flush_after_ms, 1000);
    assert_int_equal(p->batch.queue, 2);
    ferry_pipeline_free(p);
    ferry_free(text);

    static const struct {
        const char *tail;
        const char *message;
    } bad[] = {
        {"batch: {rows: 0}\n",
         "demo.yaml: batch.rows (line 12): must be between 1 and 10000000, got 0"},
        {"batch: {rows: 10000001}\n",
         "demo.yaml: batch.rows (line 12): must be between 1 and 10000000, got 10000001"},
        {"batch:\n  rows: lots\n", "demo.yaml: batch.rows (line 13): expected an integer, got \"lots\""},
        {"batch: {bytes: 1k}\n", "demo.yaml: batch.bytes (line 12): must be between 64KiB and 1GiB, got 1k"},
        {"batch: {bytes: 2GiB}\n", "demo.yaml: batch.bytes (line 12): must be between 64KiB and 1GiB, got 2GiB"},
        {"batch: {bytes: much}\n",
         "demo.yaml: batch.bytes (line 12): expected a size like 4MiB, 512KiB, 4MB, 64k or a "
         "number of bytes, got \"much\""},
        {"batch: {flush_after: 5ms}\n",
         "demo.yaml: batch.flush_after (line 12): must be between 10ms and 1h, got 5ms"},
        {"batch: {flush_after: 2h}\n",
         "demo.yaml: batch.flush_after (line 12): must be between 10ms and 1h, got 2h"},
        {"batch: {queue: 0}\n", "demo.yaml: batch.queue (line 12): must be between 1 and 1024, got 0"},
        {"batch: {queue: 1025}\n", "demo.yaml: batch.queue (line 12): must be between 1 and 1024, got 1025"},
        {"batch: {rowz: 5}\n",
         "demo.yaml: batch.rowz (line 12): unknown key; did you mean rows? (batch takes rows, "
         "bytes, flush_after, queue)"},
        {"batch: 5\n", "demo.yaml: batch (line 12): expected a map, got a single value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        text = with("", "", "", bad[i].tail);
        load_fails(text, bad[i].message);
        ferry_free(text);
    }
}

static void test_verify(void **state)
{
    (void)state;
    char *text = with("", "", "", "verify: after_run\n");
    struct ferry_pipeline_spec *p = load(text);
    assert_string_equal(p->verify, "after_run");
    ferry_pipeline_free(p);
    ferry_free(text);
    text = with("", "", "", "verify: none\n");
    p = load(text);
    assert_string_equal(p->verify, "none");
    ferry_pipeline_free(p);
    ferry_free(text);
    text = with("", "", "", "verify: always\n");
    load_fails(text, "demo.yaml: verify (line 12): expected one of after_run, none, got \"always\"");
    ferry_free(text);
}

/* ---- version hash -------------------------------------------------------------------- */

static void assert_same_version(const char *a, const char *b)
{
    char va[65], vb[65];
    version_of(a, va);
    version_of(b, vb);
    if (strcmp(va, vb) != 0) fail_msg("versions differ:\n%s\n---\n%s", a, b);
}

static void assert_other_version(const char *a, const char *b)
{
    char va[65], vb[65];
    version_of(a, va);
    version_of(b, vb);
    if (strcmp(va, vb) == 0) fail_msg("versions equal:\n%s\n---\n%s", a, b);
}

/* Pins the hashed text: changing it changes every user's version and so resets their
 * route checkpoints. Only do that on purpose. */
static void test_version_is_sha256_of_route_definition(void **state)
{
    (void)state;
    const char *json =
        "{\"name\":\"demo\",\"resources\":[{\"columns\":null,\"cursor\":null,\"key\":null,"
        "\"mode\":\"full\",\"table\":\"orders\",\"target\":\"orders\"}],"
        "\"sink\":{\"path\":\"out/demo.db\"},\"sink_type\":\"sqlite\","
        "\"source\":{\"seed\":\"42\"},\"source_type\":\"sample\","
        "\"transforms\":[],\"write\":\"append\"}";
    char expect[65];
    ferry_sha256_hex(json, strlen(json), expect);
    char v[65];
    version_of(demo, v);
    assert_string_equal(v, expect);
}

static void test_version_ignores_tuning(void **state)
{
    (void)state;
    char *base = with("", "", "", "");
    /* batch settings */
    char *t = with("", "", "", "batch: {rows: 10, bytes: 8MiB, flush_after: 5s, queue: 9}\n");
    assert_same_version(base, t);
    ferry_free(t);
    /* the source's tuning keys (sample: rows, clock, shards) */
    const struct ferry_source_vtable *vt = ferry_source_find("sample");
    assert_non_null(vt->tuning_keys);
    assert_non_null(vt->tuning_keys[0]);
    char *rows5 = ferry_asprintf("%.*s  rows: 5\n%s", (int)(strstr(base, "  rows:") - base), base,
                                 strstr(base, "  seed:"));
    assert_same_version(base, rows5);
    ferry_free(rows5);
    for (int i = 0; vt->tuning_keys[i]; i++) {
        if (!strcmp(vt->tuning_keys[i], "rows")) continue;
        char extra[64];
        snprintf(extra, sizeof extra, "  %s: 3\n", vt->tuning_keys[i]);
        t = with(extra, "", "", "");
        assert_same_version(base, t);
        ferry_free(t);
    }
    /* the sink's tuning keys */
    const struct ferry_sink_vtable *svt = ferry_sink_find("sqlite");
    for (int i = 0; svt->tuning_keys && svt->tuning_keys[i]; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "  %s: whatever\n", svt->tuning_keys[i]);
        t = with("", "", extra, "");
        assert_same_version(base, t);
        ferry_free(t);
    }
    /* ... while any other sink key is part of the route */
    t = with("", "", "  not_a_tuning_key: whatever\n", "");
    assert_other_version(base, t);
    ferry_free(t);
    /* lookback tunes how much is re-read, not what lands where */
    char *inc = with("", "      mode: incremental\n      cursor: updated_at\n", "", "");
    t = with("", "      mode: incremental\n      cursor: updated_at\n      lookback: 10m\n", "", "");
    assert_same_version(inc, t);
    ferry_free(t);
    ferry_free(inc);
    /* defaults written out, layout, comments, quotes */
    t = with("", "      mode: full\n", "  write: append\n", "");
    assert_same_version(base, t);
    ferry_free(t);
    assert_same_version(base, "# the demo\nsink: {path: \"out/demo.db\", type: sqlite}\n"
                              "source:\n  resources: [{table: 'orders'}]\n  seed: 42\n"
                              "  type: sample\n  rows: 1\nname: demo\nversion: 1\n");
    /* the order resources are listed in */
    char *two = ferry_asprintf("version: 1\nname: demo\nsource:\n  type: sample\n  resources:\n"
                               "    - table: orders\n    - table: users\nsink: {type: sqlite}\n");
    char *owt = ferry_asprintf("version: 1\nname: demo\nsource:\n  type: sample\n  resources:\n"
                               "    - table: users\n    - table: orders\nsink: {type: sqlite}\n");
    assert_same_version(two, owt);
    ferry_free(two);
    ferry_free(owt);
    /* the verify setting */
    t = with("", "", "", "verify: after_run\n");
    assert_same_version(base, t);
    ferry_free(t);
    ferry_free(base);
}

static void test_version_follows_the_route(void **state)
{
    (void)state;
    char *inc = with("", "      mode: incremental\n      cursor: updated_at\n", "", "");
    char *t;
    /* cursor */
    t = with("", "      mode: incremental\n      cursor: [updated_at, id]\n", "", "");
    assert_other_version(inc, t);
    ferry_free(t);
    /* mode */
    assert_other_version(demo, inc);
    ferry_free(inc);
    char *base = with("", "", "", "");
    static const char *const resource_changes[] = {
        "      columns: [id, status]\n", "      key: [id]\n", "      target: orders_copy\n",
    };
    for (size_t i = 0; i < sizeof resource_changes / sizeof resource_changes[0]; i++) {
        t = with("", resource_changes[i], "", "");
        assert_other_version(base, t);
        ferry_free(t);
    }
    /* columns: a different selection */
    char *cols = with("", "      columns: [id, status]\n", "", "");
    t = with("", "      columns: [id, note]\n", "", "");
    assert_other_version(cols, t);
    ferry_free(t);
    ferry_free(cols);
    /* the sink's path */
    t = ferry_asprintf("%.*s  path: out/other.db\n", (int)(strstr(base, "  path:") - base), base);
    assert_other_version(base, t);
    ferry_free(t);
    /* write mode */
    t = with("", "", "  write: upsert\n", "");
    assert_other_version(base, t);
    ferry_free(t);
    /* a connector key that is not tuning: the sample seed */
    char *seed = ferry_asprintf("%.*s  seed: 43\n%s", (int)(strstr(base, "  seed:") - base), base,
                                strstr(base, "  resources:"));
    assert_other_version(base, seed);
    ferry_free(seed);
    /* name, table, sink type, transforms */
    t = ferry_asprintf("version: 1\nname: demo2\n%s", strstr(base, "source:"));
    assert_other_version(base, t);
    ferry_free(t);
    t = ferry_asprintf("%.*s    - table: users\n%s", (int)(strstr(base, "    - table:") - base), base,
                       strstr(base, "sink:"));
    assert_other_version(base, t);
    ferry_free(t);
    t = ferry_asprintf("%.*ssink:\n  type: 'null'\n  path: out/demo.db\n",
                       (int)(strstr(base, "sink:") - base), base);
    assert_other_version(base, t);
    ferry_free(t);
    char *tr1 = with("", "", "", "transforms:\n  - {column: note, hash: sha256}\n");
    char *tr2 = with("", "", "", "transforms:\n  - {column: note, hash: hmac}\n");
    assert_other_version(base, tr1);
    assert_other_version(tr1, tr2);
    ferry_free(tr1);
    ferry_free(tr2);
    ferry_free(base);
}

/* ---- saved request ------------------------------------------------------------------- */

static void test_request_json_keeps_secret_references(void **state)
{
    (void)state;
    setenv("FERRY_TEST_URL", "c4n4ry-url-secret", 1);
    char *text = with("  token: env:FERRY_TEST_URL\n", "", "  password: file:/run/secrets/pw\n",
                      "batch: {rows: 10}\n");
    struct ferry_pipeline_spec *p = load(text);
    assert_non_null(strstr(p->request_json, "\"token\":\"env:FERRY_TEST_URL\""));
    assert_non_null(strstr(p->request_json, "\"password\":\"file:/run/secrets/pw\""));
    assert_non_null(strstr(p->request_json, "\"batch\":{\"rows\":\"10\"}"));
    assert_null(strstr(p->request_json, "c4n4ry"));
    /* the saved request loads back to the same pipeline (JSON is YAML) */
    struct ferry_pipeline_spec *q = NULL;
    struct ferry_error err = {0};
    assert_int_equal(ferry_pipeline_load_string(p->request_json, strlen(p->request_json),
                                                "request", &q, &err),
                     FERRY_OK);
    assert_string_equal(q->version, p->version);
    assert_string_equal(q->request_json, p->request_json);
    assert_int_equal(q->batch.rows, 10);
    ferry_pipeline_free(q);
    ferry_pipeline_free(p);
    ferry_free(text);
    unsetenv("FERRY_TEST_URL");
}

/* Every allocation failure while loading gives ENOMEM and leaks nothing (ASan build). */
static void test_out_of_memory(void **state)
{
    (void)state;
    char *text = with("", "      columns: [id, status]\n", "",
                      "transforms:\n  - {column: note, hash: sha256}\nbatch: {rows: 10}\n");
    bool loaded = false;
    for (long n = 0; n < 2000 && !loaded; n++) {
        struct ferry_pipeline_spec *p = NULL;
        struct ferry_error err = {0};
        ferry_mem_fail_after(n);
        int rc = ferry_pipeline_load_string(text, strlen(text), "demo.yaml", &p, &err);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_non_null(p);
            loaded = true;
            ferry_pipeline_free(p);
        } else {
            if (rc != FERRY_ENOMEM) fail_msg("at %ld: %d %s", n, rc, err.message);
            assert_null(p);
        }
    }
    assert_true(loaded);
    ferry_free(text);
}

/* on_unrepresentable: fail by default; `null` unquoted (YAML's null) is the word; clamp; a
 * resource's own setting is checked at load; anything else is refused naming the key. */
static void test_on_unrepresentable(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = load(demo);
    assert_int_equal(p->on_unrepresentable, FERRY_UNREP_FAIL);
    ferry_pipeline_free(p);
    const char *const words[] = {"null", "\"null\"", "clamp", "fail"};
    const enum ferry_unrepresentable want[] = {FERRY_UNREP_NULL, FERRY_UNREP_NULL,
                                               FERRY_UNREP_CLAMP, FERRY_UNREP_FAIL};
    for (int i = 0; i < 4; i++) {
        char tail[64];
        snprintf(tail, sizeof tail, "on_unrepresentable: %s\n", words[i]);
        char *text = with("", "", "", tail);
        p = load(text);
        assert_int_equal(p->on_unrepresentable, want[i]);
        ferry_pipeline_free(p);
        ferry_free(text);
    }
    char *text = with("", "", "", "on_unrepresentable: round\n");
    load_fails(text, "~on_unrepresentable (line 12): expected one of fail, null, clamp");
    ferry_free(text);
    text = with("", "", "", "on_unrepresentable: ~\n");
    load_fails(text, "~on_unrepresentable (line 12): expected one of fail, null, clamp");
    ferry_free(text);
    text = with("", "      on_unrepresentable: nul\n", "", "");
    load_fails(text, "~source.resources[0].on_unrepresentable (line");
    ferry_free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_loads),
        cmocka_unit_test(test_loader_leaves_connector_keys_unread),
        cmocka_unit_test(test_real_file),
        cmocka_unit_test(test_top_level_rules),
        cmocka_unit_test(test_connector_types),
        cmocka_unit_test(test_write_modes),
        cmocka_unit_test(test_resources),
        cmocka_unit_test(test_cdc_needs_a_cdc_source),
        cmocka_unit_test(test_resource_target_without_node),
        cmocka_unit_test(test_resource_target_quoted),
        cmocka_unit_test(test_transforms),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_version_is_sha256_of_route_definition),
        cmocka_unit_test(test_version_ignores_tuning),
        cmocka_unit_test(test_version_follows_the_route),
        cmocka_unit_test(test_request_json_keeps_secret_references),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_on_unrepresentable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
