/* tests/unit/test_tables.c - table patterns: parsing, matching (globs, quoted parts, the
 * default schema), expansion of a pipeline's pattern entries (largest first, exclusions,
 * explicit entries winning, no match, two tables into one target) and the allocation-failure
 * loop over expansion. */
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "ferry/tables.h"

static void test_match(void **state)
{
    (void)state;
    assert_true(ferry_table_pattern_match("public.*", "public", "public", "orders"));
    assert_false(ferry_table_pattern_match("public.*", "public", "sales", "orders"));
    assert_true(ferry_table_pattern_match("orders", "public", "public", "orders"));
    assert_false(ferry_table_pattern_match("orders", "public", "sales", "orders"));
    assert_true(ferry_table_pattern_match("*.ord?rs", "public", "sales", "orders"));
    assert_false(ferry_table_pattern_match("*.ord?rs", "public", "sales", "ordrs"));
    assert_true(ferry_table_pattern_match("PUBLIC.Orders*", "public", "public", "orders_2024"));
    assert_true(ferry_table_pattern_match("s.*a*b*c", NULL, "s", "xaxxbxxc"));
    assert_false(ferry_table_pattern_match("s.*a*b*c", NULL, "s", "xaxxbxxcd"));
    /* quoted parts match exactly, stars included */
    assert_true(ferry_table_pattern_match("\"My Schema\".\"T*\"", NULL, "My Schema", "T*"));
    assert_false(ferry_table_pattern_match("\"My Schema\".\"T*\"", NULL, "My Schema", "Tx"));
    assert_false(ferry_table_pattern_match("\"my schema\".*", NULL, "My Schema", "t"));
    assert_true(ferry_table_pattern_match("s.\"a.b\"\"c\"", NULL, "s", "a.b\"c"));
}

static void test_malformed(void **state)
{
    (void)state;
    const char *bad[] = {"", ".", "a.", ".b", "a.b.c", "\"open", "\"\".x", "a\"b\"", "s.\"x\"y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct ferry_error e = {0};
        assert_int_equal(ferry_table_pattern_check(bad[i], &e), FERRY_ECONFIG);
        assert_non_null(strstr(e.message, "malformed"));
    }
    struct ferry_error e = {0};
    assert_int_equal(ferry_table_pattern_check("\"a\"\"b\".*", &e), FERRY_OK);
}

static void test_qualified(void **state)
{
    (void)state;
    char *q = ferry_table_qualified("public", "orders");
    assert_string_equal(q, "public.orders");
    ferry_free(q);
    q = ferry_table_qualified("My Schema", "a\"b");
    assert_string_equal(q, "\"My Schema\".\"a\"\"b\"");
    ferry_free(q);
    q = ferry_table_qualified("", "Orders");
    assert_string_equal(q, "\"Orders\"");
    ferry_free(q);
}

static struct ferry_pipeline_spec *load(const char *text)
{
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err = {0};
    if (ferry_pipeline_load_string(text, strlen(text), "t.yaml", &p, &err) != FERRY_OK)
        fail_msg("load: %s", err.message);
    return p;
}

static const char *PIPE =
    "version: 1\n"
    "name: t\n"
    "source:\n"
    "  type: sqlite\n"
    "  path: x.db\n"
    "  resources:\n"
    "    - table: small\n"
    "      mode: full\n"
    "    - tables: [\"*\"]\n"
    "      exclude: [\"tmp_*\"]\n"
    "      key: [id]\n"
    "sink: {type: null}\n";

static struct ferry_table_info TABLES[] = {
    {"main", "small", 10}, {"main", "big", 1000}, {"main", "tmp_x", 5000},
    {"main", "mid", 100},  {"main", "Odd Name", 50},
};

static void test_expand(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = load(PIPE);
    assert_true(ferry_tables_pending(p));
    struct ferry_error err = {0};
    assert_int_equal(ferry_tables_expand(p, TABLES, 5, "main", &err), FERRY_OK);
    assert_false(ferry_tables_pending(p));
    assert_int_equal(p->n_resources, 4);
    assert_string_equal(p->resources[0].table, "small"); /* explicit, kept first */
    assert_false(p->resources[0].expanded);
    assert_string_equal(p->resources[1].table, "big"); /* largest first, default schema bare */
    assert_string_equal(p->resources[2].table, "mid");
    assert_string_equal(p->resources[3].table, "\"Odd Name\"");
    assert_string_equal(ferry_resource_target(&p->resources[3]), "Odd Name");
    assert_true(p->resources[1].expanded);
    assert_int_equal(p->resources[1].n_key, 1);
    assert_string_equal(p->resources[1].key[0], "id");
    ferry_pipeline_free(p);
}

static void test_expand_errors(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = load(
        "version: 1\nname: t\nsource:\n  type: sqlite\n  path: x.db\n  resources:\n"
        "    - tables: [\"big\", \"nothing_*\"]\nsink: {type: null}\n");
    struct ferry_error err = {0};
    assert_int_equal(ferry_tables_expand(p, TABLES, 5, "main", &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "'nothing_*' matches no table"));
    assert_true(ferry_tables_pending(p)); /* unchanged */
    ferry_pipeline_free(p);

    p = load("version: 1\nname: t\nsource:\n  type: sqlite\n  path: x.db\n  resources:\n"
             "    - tables: [\"*.orders\"]\nsink: {type: null}\n");
    struct ferry_table_info two[] = {{"a", "orders", 1}, {"b", "orders", 2}};
    assert_int_equal(ferry_tables_expand(p, two, 2, "main", &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "would both write to orders"));
    ferry_pipeline_free(p);

    /* config errors at load */
    const char *bad[] = {
        "version: 1\nname: t\nsource: {type: sqlite, path: x.db, resources: [{tables: [\"a.b.c\"]}]}\nsink: {type: null}\n",
        "version: 1\nname: t\nsource: {type: sqlite, path: x.db, resources: [{table: a, tables: [b]}]}\nsink: {type: null}\n",
        "version: 1\nname: t\nsource: {type: sqlite, path: x.db, resources: [{table: a, exclude: [b]}]}\nsink: {type: null}\n",
        "version: 1\nname: t\nsource: {type: sqlite, path: x.db, resources: [{tables: [a], target: x}]}\nsink: {type: null}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct ferry_pipeline_spec *q = NULL;
        assert_int_equal(ferry_pipeline_load_string(bad[i], strlen(bad[i]), "t.yaml", &q, &err),
                         FERRY_ECONFIG);
        assert_null(q);
    }
}

/* Fail the Nth allocation of an expansion, N = 1, 2, ... until it succeeds: every failure
 * is a clean ENOMEM with the pipeline unchanged, and nothing leaks (ASan). */
static void test_expand_alloc_failures(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        struct ferry_pipeline_spec *p = load(PIPE);
        struct ferry_error err = {0};
        ferry_mem_fail_after(n);
        int rc = ferry_tables_expand(p, TABLES, 5, "main", &err);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_int_equal(p->n_resources, 4);
            ferry_pipeline_free(p);
            break;
        }
        assert_int_equal(rc, FERRY_ENOMEM);
        assert_true(ferry_tables_pending(p));
        assert_int_equal(p->n_resources, 2);
        ferry_pipeline_free(p);
        assert_true(n < 1000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_qualified),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_expand_errors),
        cmocka_unit_test(test_expand_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
