/* tests/unit/test_pg_cdc.c - the cdc resource options of the postgres source (pg_cdc.c):
 * derived slot and publication names (folded to a-z0-9_, at most 63 bytes, long names made
 * unique by a hash of the route), configured names, refused slot names and on_slot_lost. */
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_cdc.h"
#include "ferry/config.h"

static struct ferry_cfg *parse(const char *yaml)
{
    struct ferry_cfg *root = NULL;
    struct ferry_error err;
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "t.yaml", &root, &err), FERRY_OK);
    return root;
}

static void test_derived_names(void **state)
{
    (void)state;
    struct ferry_resource_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.table = "Sales.Orders-2024";
    struct ferry_read_context run = {.pipeline = "My Pipeline",
                                     .route = "Sales.Orders-2024 -> postgres:orders"};
    spec.run = &run;
    struct ferry_pg_cdc_opts o;
    struct ferry_error err;
    assert_int_equal(ferry__pg_cdc_opts(&spec, &o, &err), FERRY_OK);
    assert_string_equal(o.slot, "ferry_my_pipeline_sales_orders_2024");
    assert_string_equal(o.publication, o.slot);
    assert_false(o.publication_given);
    assert_false(o.resnapshot);

    /* Long names: 63 bytes, and two routes that share the first 54 characters differ. */
    char longt[200];
    memset(longt, 'a', 150);
    longt[150] = '\0';
    spec.table = longt;
    run.route = "r1";
    struct ferry_pg_cdc_opts a, b;
    assert_int_equal(ferry__pg_cdc_opts(&spec, &a, &err), FERRY_OK);
    run.route = "r2";
    assert_int_equal(ferry__pg_cdc_opts(&spec, &b, &err), FERRY_OK);
    assert_int_equal(strlen(a.slot), 63);
    assert_int_equal(strlen(b.slot), 63);
    assert_string_not_equal(a.slot, b.slot);
    for (const char *p = a.slot; *p; p++)
        assert_true((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_');
}

static void test_configured(void **state)
{
    (void)state;
    struct ferry_cfg *root =
        parse("table: t\nslot: my_slot_1\npublication: \"Pub One\"\non_slot_lost: resnapshot\n");
    struct ferry_resource_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.table = "t";
    spec.node = root;
    struct ferry_pg_cdc_opts o;
    struct ferry_error err;
    assert_int_equal(ferry__pg_cdc_opts(&spec, &o, &err), FERRY_OK);
    assert_string_equal(o.slot, "my_slot_1");
    assert_string_equal(o.publication, "Pub One");
    assert_true(o.publication_given);
    assert_true(o.resnapshot);
    ferry_cfg_free(root);

    const char *bad[] = {
        "slot: My-Slot\n", "slot: \"\"\n", "on_slot_lost: maybe\n",
        "slot: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", NULL};
    for (int i = 0; bad[i]; i++) {
        root = parse(bad[i]);
        spec.node = root;
        assert_int_equal(ferry__pg_cdc_opts(&spec, &o, &err), FERRY_ECONFIG);
        assert_non_null(strstr(err.message, "line 1"));
        ferry_cfg_free(root);
    }
}

/* The text[] literal of table names the writers' look passes: quotes and backslashes of a
 * quoted identifier escaped, elements appended one by one. */
static void test_array_literal(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__pg_cdc_array_add(&b, "\"public\".\"t1\""), FERRY_OK);
    assert_string_equal(b.data, "{\"\\\"public\\\".\\\"t1\\\"\"}");
    assert_int_equal(ferry__pg_cdc_array_add(&b, "\"s\".\"a\\b,c\"\"d\""), FERRY_OK);
    assert_string_equal(b.data,
                        "{\"\\\"public\\\".\\\"t1\\\"\",\"\\\"s\\\".\\\"a\\\\b,c\\\"\\\"d\\\"\"}");
    ferry_buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_derived_names),
                                       cmocka_unit_test(test_configured),
                                       cmocka_unit_test(test_array_literal)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
