/* tests/unit/test_notify.c - notification pieces that need no receiver: the signature
 * header against RFC 4231's HMAC-SHA256 test case 2, the JSON and Slack bodies, and the
 * check of `notify:` targets (each mistake named with its key and line). */
#include "unit.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "notify/notify.h"

static void test_signature(void **state)
{
    (void)state;
    char sig[72];
    const char *msg = "what do ya want for nothing?";
    ferry_notify_signature("Jefe", msg, strlen(msg), sig);
    assert_string_equal(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_bodies(void **state)
{
    (void)state;
    char *b = ferry_notify_body("json", "run.failed", 7, "orders", 2, "", 1700000000000000LL,
                                "{\"code\":\"source\",\"message\":\"connection lost\"}", 42);
    json_t *j = json_loads(b, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "run.failed");
    assert_string_equal(json_string_value(json_object_get(j, "id")), "7-42");
    assert_int_equal(json_integer_value(json_object_get(j, "run_id")), 7);
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 2);
    assert_string_equal(json_string_value(json_object_get(j, "pipeline")), "orders");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "data"), "message")),
                        "connection lost");
    json_decref(j);
    ferry_free(b);
    b = ferry_notify_body("slack", "run.failed", 7, "orders", 2, "", 0, "{\"message\":\"boom\"}", 1);
    j = json_loads(b, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "text")),
                        "ferry: run.failed - run 7 of pipeline orders (attempt 2): boom");
    assert_int_equal(json_object_size(j), 1);
    json_decref(j);
    ferry_free(b);
}

static int load(const char *notify, struct ferry_error *e)
{
    char text[1024];
    snprintf(text, sizeof text,
             "version: 1\nname: n\nsource: {type: sample, rows: 1, resources: [{table: orders, "
             "mode: full}]}\nsink: {type: null}\nnotify: %s\n", notify);
    struct ferry_pipeline_spec *p = NULL;
    int rc = ferry_pipeline_load_string(text, strlen(text), "n.yaml", &p, e);
    ferry_pipeline_free(p);
    return rc;
}

static void test_check(void **state)
{
    (void)state;
    struct ferry_error e;
    assert_int_equal(load("[{webhook: \"https://h/x\", secret: env:S, on: [run.failed, cdc.lag], "
                          "lag_threshold: 30s, format: slack}]", &e), FERRY_OK);
    assert_int_equal(load("[{webhook: env:HOOK_URL}]", &e), FERRY_OK);
    assert_int_equal(load("[{webhook: \"ftp://h/x\"}]", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "notify[0].webhook"));
    assert_int_equal(load("[{webhook: \"https://h\", secret: plain-secret-value}]", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "notify[0].secret"));
    assert_null(strstr(e.message, "plain-secret-value"));
    assert_int_equal(load("[{webhook: \"https://h\", on: [run.exploded]}]", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "run.exploded"));
    assert_int_equal(load("[{webhook: \"https://h\", retries: 3}]", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "retries"));
    assert_int_equal(load("{webhook: \"https://h\"}", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "notify"));
    assert_int_equal(load("[{webhook: \"https://h\", format: xml}]", &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "format"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_bodies),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
