/* tests/unit/test_pg_slot.c - the pipeline's shared slot of the postgres source (pg_slot.c),
 * the parts that need no server: the source keys (slot, publication, on_slot_lost) and
 * their refusals, the derived names (ferry_<pipeline>, folded, at most 63 bytes), which
 * resources share the slot (not one with `slot:` of its own), and the acknowledgement rule:
 * nothing is acknowledged until every sharing table's saved position is known, and a
 * table's recorded position never moves back. (Against a server: e2e/cdc_one_slot.) */
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_slot.h"
#include "ferry/config.h"

static struct ferry_cfg *parse(const char *yaml)
{
    struct ferry_cfg *root = NULL;
    struct ferry_error err;
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "t.yaml", &root, &err), FERRY_OK);
    return root;
}

static void test_source_keys(void **state)
{
    (void)state;
    struct ferry_pg_slot sl;
    struct ferry_error err;
    struct ferry_cfg *root =
        parse("slot: dwh_one\npublication: \"Pub\"\non_slot_lost: resnapshot\n");
    assert_int_equal(ferry__pg_slot_config(&sl, root, &err), FERRY_OK);
    assert_string_equal(sl.slot_key, "dwh_one");
    assert_string_equal(sl.pub_key, "Pub");
    assert_int_equal(sl.lost_key, 1);
    ferry__pg_slot_release(&sl);
    ferry_cfg_free(root);

    root = parse("url: x\n");
    assert_int_equal(ferry__pg_slot_config(&sl, root, &err), FERRY_OK);
    assert_null(sl.slot_key);
    assert_int_equal(sl.lost_key, -1);
    ferry_cfg_free(root);

    const char *bad[] = {
        "slot: Big-Slot\n",
        "slot: \"\"\n",
        "on_slot_lost: sometimes\n",
        "publication: \"\"\n",
        "slot: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
        NULL};
    for (int i = 0; bad[i]; i++) {
        root = parse(bad[i]);
        assert_int_equal(ferry__pg_slot_config(&sl, root, &err), FERRY_ECONFIG);
        assert_non_null(strstr(err.message, "line 1"));
        ferry_cfg_free(root);
    }
}

struct res {
    struct ferry_resource_spec spec;
    struct ferry_read_context run;
    struct ferry_cfg *node;
};

static void res_init(struct res *r, const char *pipeline, const char *table, const char *route,
                     const char *yaml)
{
    memset(r, 0, sizeof *r);
    r->spec.table = (char *)table;
    r->run.pipeline = pipeline;
    r->run.route = route;
    r->spec.run = &r->run;
    if (yaml != NULL) r->node = parse(yaml);
    r->spec.node = r->node;
}

static void test_register_names(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_cfg *src = parse("url: x\n");
    struct ferry_pg_slot sl;
    assert_int_equal(ferry__pg_slot_config(&sl, src, &err), FERRY_OK);
    struct res a, b, own, pub;
    res_init(&a, "My Pipeline", "orders", "orders -> pg:orders", NULL);
    res_init(&b, "My Pipeline", "sales.items", "sales.items -> pg:items", NULL);
    res_init(&own, "My Pipeline", "users", "users -> pg:users", "table: users\nslot: keep_me\n");
    res_init(&pub, "My Pipeline", "t", "t -> pg:t", "table: t\npublication: theirs\n");
    assert_int_equal(
        ferry__pg_slot_register(&sl, &a.spec, "public", "orders", "\"public\".\"orders\"", &err),
        FERRY_OK);
    assert_int_equal(
        ferry__pg_slot_register(&sl, &b.spec, "sales", "items", "\"sales\".\"items\"", &err),
        FERRY_OK);
    assert_int_equal(
        ferry__pg_slot_register(&sl, &own.spec, "public", "users", "\"public\".\"users\"", &err),
        FERRY_OK);
    assert_int_equal(
        ferry__pg_slot_register(&sl, &pub.spec, "public", "t", "\"public\".\"t\"", &err), FERRY_OK);
    /* registered twice (discover of a later run on the same instance): once */
    assert_int_equal(
        ferry__pg_slot_register(&sl, &a.spec, "public", "orders", "\"public\".\"orders\"", &err),
        FERRY_OK);
    assert_int_equal(sl.n_tabs, 3); /* `users` keeps a slot of its own */
    assert_string_equal(sl.slot, "ferry_my_pipeline");
    assert_string_equal(sl.tabs[0].publication, "ferry_my_pipeline");
    assert_false(sl.tabs[0].pub_given);
    assert_string_equal(sl.tabs[0].legacy_slot, "ferry_my_pipeline_orders");
    assert_string_equal(sl.tabs[1].legacy_slot, "ferry_my_pipeline_sales_items");
    assert_string_equal(sl.tabs[2].publication, "theirs");
    assert_true(sl.tabs[2].pub_given);
    ferry__pg_slot_release(&sl);
    ferry_cfg_free(src);

    /* A long pipeline name: 63 bytes of a-z0-9_, names of two pipelines differ. */
    char p1[120], p2[120];
    memset(p1, 'x', 100);
    p1[100] = '\0';
    memcpy(p2, p1, 101);
    p2[99] = 'y';
    char n1[64], n2[64];
    ferry__pg_cdc_fold_name(p1, NULL, p1, n1);
    ferry__pg_cdc_fold_name(p2, NULL, p2, n2);
    assert_int_equal(strlen(n1), 63);
    assert_string_not_equal(n1, n2);
    for (const char *p = n1; *p; p++)
        assert_true((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_');
    ferry_cfg_free(a.node);
    ferry_cfg_free(own.node);
    ferry_cfg_free(pub.node);
}

static void test_ack_waits_for_every_table(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_cfg *src = parse("slot: s1\n");
    struct ferry_pg_slot sl;
    assert_int_equal(ferry__pg_slot_config(&sl, src, &err), FERRY_OK);
    struct res r[3];
    const char *tables[3] = {"a", "b", "c"}, *routes[3] = {"a -> x", "b -> x", "c -> x"};
    for (int i = 0; i < 3; i++) {
        res_init(&r[i], "p", tables[i], routes[i], NULL);
        assert_int_equal(
            ferry__pg_slot_register(&sl, &r[i].spec, "public", tables[i], tables[i], &err),
            FERRY_OK);
    }
    const char *plan = "{\"mode\":\"cdc\",\"shared\":true,\"slot\":\"s1\",\"end\":\"0/500\"}";
    bool caught_up = false;
    /* Two of three known: nothing is acknowledged, so no connection is needed (NULL). */
    assert_int_equal(ferry__pg_slot_ack(&sl, NULL, "peer", &r[0].spec, plan,
                                        "{\"shard\":0,\"n\":1280}", &caught_up, &err),
                     FERRY_OK);
    assert_true(caught_up); /* 0x500 */
    assert_int_equal(ferry__pg_slot_ack(&sl, NULL, "peer", &r[1].spec, plan,
                                        "{\"shard\":0,\"n\":1000}", &caught_up, &err),
                     FERRY_OK);
    assert_false(caught_up);
    /* An older position never lowers what was recorded; a reset position records nothing. */
    assert_int_equal(ferry__pg_slot_ack(&sl, NULL, "peer", &r[0].spec, plan,
                                        "{\"shard\":0,\"n\":900}", &caught_up, &err),
                     FERRY_OK);
    assert_int_equal(ferry__pg_slot_ack(&sl, NULL, "peer", &r[2].spec, plan,
                                        "{\"shard\":0,\"reset\":true}", &caught_up, &err),
                     FERRY_OK);
    assert_int_equal((int)sl.tabs[0].acked, 1280);
    assert_int_equal((int)sl.tabs[1].acked, 1000);
    assert_false(sl.tabs[2].has_ack);
    ferry__pg_slot_release(&sl);
    ferry_cfg_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_source_keys),
                                       cmocka_unit_test(test_register_names),
                                       cmocka_unit_test(test_ack_waits_for_every_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
