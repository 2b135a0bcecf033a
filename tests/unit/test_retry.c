/* tests/unit/test_retry.c - retry classification and backoff: which errors are transient
 * (a mark set where the error is made, timeouts, HTTP 5xx/429 origins) and which never are
 * whatever the mark says (config, integrity, policy...); the retries: key of a pipeline
 * file with its bounds; the backoff doubling, its cap and its jitter range. */
#include "unit.h"

#include <string.h>
#include "ferry/error.h"
#include "ferry/pipeline.h"
#include "runner/retry.h"

static void test_classification(void **state)
{
    (void)state;
    struct ferry_error e;
    ferry_error_set(&e, FERRY_ESOURCE, "libpq", "connection lost");
    assert_false(ferry_error_is_transient(&e));
    assert_int_equal(ferry_error_set_transient(&e), FERRY_ESOURCE);
    assert_true(ferry_error_is_transient(&e));
    ferry_error_prefix(&e, "resource orders");
    assert_true(ferry_error_is_transient(&e)); /* context keeps the class */
    ferry_error_set(&e, FERRY_ESOURCE, "libpq", "again"); /* a new error clears it */
    assert_false(ferry_error_is_transient(&e));
    ferry_error_set(&e, FERRY_ETIMEOUT, "libpq", "statement timeout");
    assert_true(ferry_error_is_transient(&e));
    ferry_error_set(&e, FERRY_ESINK, "http 503", "catalog unavailable");
    assert_true(ferry_error_is_transient(&e));
    ferry_error_set(&e, FERRY_ESINK, "http 429", "slow down");
    assert_true(ferry_error_is_transient(&e));
    ferry_error_set(&e, FERRY_ESINK, "http 403", "forbidden");
    assert_false(ferry_error_is_transient(&e));
    static const int permanent[] = {FERRY_ECONFIG, FERRY_EINTEGRITY, FERRY_EPOLICY, FERRY_ENOTFOUND,
                                    FERRY_ECANCELED, FERRY_EPAUSED, FERRY_EFENCED};
    for (size_t i = 0; i < sizeof permanent / sizeof permanent[0]; i++) {
        ferry_error_set(&e, permanent[i], "x", "permanent");
        ferry_error_set_transient(&e);
        assert_false(ferry_error_is_transient(&e));
    }
    ferry_error_clear(&e);
    assert_false(ferry_error_is_transient(&e));
    assert_false(ferry_error_is_transient(NULL));
}

static const char *base = "version: 1\nname: r\nsource: {type: sample, rows: 1, resources: "
                          "[{table: orders, mode: full}]}\nsink: {type: null}\n";

static int load(const char *extra, struct ferry_pipeline_spec **p, struct ferry_error *e)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", base, extra);
    return ferry_pipeline_load_string(text, strlen(text), "r.yaml", p, e);
}

static void test_pipeline_key(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error e;
    assert_int_equal(load("", &p, &e), FERRY_OK);
    assert_int_equal(p->retries.max, -1);
    assert_int_equal(p->retries.backoff_ms, 10000);
    assert_int_equal(p->retries.max_backoff_ms, 600000);
    ferry_pipeline_free(p);
    assert_int_equal(load("retries: {max: 5, backoff: 2s, max_backoff: 1m}\n", &p, &e), FERRY_OK);
    assert_int_equal(p->retries.max, 5);
    assert_int_equal(p->retries.backoff_ms, 2000);
    assert_int_equal(p->retries.max_backoff_ms, 60000);
    ferry_pipeline_free(p);
    assert_int_equal(load("retries: 2\n", &p, &e), FERRY_OK);
    assert_int_equal(p->retries.max, 2);
    ferry_pipeline_free(p);
    assert_int_equal(load("retries: {max: 5, backof: 2s}\n", &p, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "backof"));
    assert_int_equal(load("retries: {max: 101}\n", &p, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "retries.max"));
    assert_int_equal(load("retries: {max: 1, backoff: 1m, max_backoff: 10s}\n", &p, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "max_backoff"));
    assert_int_equal(load("retries: [1]\n", &p, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "retries"));
}

static void test_backoff(void **state)
{
    (void)state;
    struct ferry_retry_policy p = {.max = 10, .backoff_ms = 1000, .max_backoff_ms = 10000};
    /* rnd 0 is the low end (half), a huge rnd stays within the full delay */
    assert_int_equal(ferry_retry_delay_ms(&p, 1, 0), 500);
    assert_int_equal(ferry_retry_delay_ms(&p, 2, 0), 1000);
    assert_int_equal(ferry_retry_delay_ms(&p, 3, 0), 2000);
    assert_int_equal(ferry_retry_delay_ms(&p, 5, 0), 5000);  /* 16 s capped at 10 s */
    assert_int_equal(ferry_retry_delay_ms(&p, 60, 0), 5000); /* no overflow */
    for (uint64_t r = 0; r < 5000; r += 7) {
        int64_t d = ferry_retry_delay_ms(&p, 2, r * 2654435761u);
        assert_true(d >= 1000 && d <= 2000);
    }
    assert_int_equal(ferry_retry_delay_ms(&p, 1, 500), 1000); /* the top of the range */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classification),
        cmocka_unit_test(test_pipeline_key),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
