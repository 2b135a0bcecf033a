/* tests/unit/test_budget.c - the run's memory budget (runner/budget.c) and the top-level
 * `concurrency:` and `memory:` keys (config/pipeline.c): the formula's numbers, queues that
 * shrink as concurrency grows, batch bytes that shrink before the queue goes below one, a
 * budget too small for one batch per flow refused naming `memory`, the keys' validation,
 * and that neither key is part of the pipeline version (a resume may change them). */
#include <string.h>
#include "unit.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "runner/runner.h"

#define MiB ((int64_t)1 << 20)
#define KiB ((int64_t)1 << 10)

static const struct ferry_batch_opts defaults = {
    .rows = 50000, .bytes = 4 * MiB, .flush_after_ms = 1000, .queue = 4};

static void test_default_budget_keeps_the_file_settings(void **state)
{
    (void)state;
    struct ferry_batch_opts o;
    struct ferry_error e;
    /* 256 MiB / 4 flows = 64 MiB each: 16 batches of 4 MiB; one reader holds (16-2)/2 = 7
     * > 4: the file's queue stays. */
    assert_int_equal(ferry__budget_compute(256 * MiB, 4, 1, &defaults, &o, &e), FERRY_OK);
    assert_int_equal(o.bytes, 4 * MiB);
    assert_int_equal(o.queue, 4);
    assert_int_equal(o.rows, 50000);
    assert_true(ferry__budget_in_flight(&o, 4, 1) <= 256 * MiB);
}

static void test_queues_shrink_as_concurrency_grows(void **state)
{
    (void)state;
    struct ferry_batch_opts o;
    struct ferry_error e;
    int64_t last = 1024;
    for (int flows = 1; flows <= 64; flows *= 2) {
        assert_int_equal(ferry__budget_compute(256 * MiB, flows, 2, &defaults, &o, &e), FERRY_OK);
        assert_true(o.queue <= last);
        assert_true(o.queue >= 1);
        last = o.queue;
        /* never more than the budget in flight */
        assert_true(ferry__budget_in_flight(&o, flows, 2) <= 256 * MiB);
    }
    /* 16 flows: 16 MiB each = 4 batches of 4 MiB; 2 readers + 1 writing leave 1: queue 1 */
    assert_int_equal(ferry__budget_compute(256 * MiB, 16, 2, &defaults, &o, &e), FERRY_OK);
    assert_int_equal(o.queue, 1);
    assert_true(o.bytes <= 16 * MiB / 5);
}

static void test_batch_bytes_shrink_before_the_queue_is_gone(void **state)
{
    (void)state;
    struct ferry_batch_opts o;
    struct ferry_error e;
    /* 8 MiB for 4 flows of 4 readers: 2 MiB each, 7 batches at least: ~292 KiB batches */
    assert_int_equal(ferry__budget_compute(8 * MiB, 4, 4, &defaults, &o, &e), FERRY_OK);
    assert_int_equal(o.queue, 1);
    assert_int_equal(o.bytes, 2 * MiB / 7);
    assert_true(ferry__budget_in_flight(&o, 4, 4) <= 8 * MiB);
}

static void test_too_small_a_budget_is_refused(void **state)
{
    (void)state;
    struct ferry_batch_opts o;
    struct ferry_error e;
    /* 1 MiB for 4 flows of 4 readers: 256 KiB each cannot hold 7 batches of 64 KiB */
    assert_int_equal(ferry__budget_compute(1 * MiB, 4, 4, &defaults, &o, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "memory"));
    assert_non_null(strstr(e.message, "concurrency"));
    /* exactly enough: 7 batches of 64 KiB per flow */
    assert_int_equal(ferry__budget_compute(4 * 7 * 64 * KiB, 4, 4, &defaults, &o, &e), FERRY_OK);
    assert_int_equal(o.bytes, 64 * KiB);
    assert_int_equal(o.queue, 1);
}

static const char *base = "version: 1\n"
                          "name: demo\n"
                          "source:\n"
                          "  type: sample\n"
                          "  resources:\n"
                          "    - table: orders\n"
                          "sink:\n"
                          "  type: null\n";

static int load(const char *tail, struct ferry_pipeline_spec **p, struct ferry_error *e)
{
    char *text = ferry_asprintf("%s%s", base, tail);
    int rc = ferry_pipeline_load_string(text, strlen(text), "demo.yaml", p, e);
    ferry_free(text);
    return rc;
}

static void test_keys(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error e;
    assert_int_equal(load("", &p, &e), FERRY_OK);
    assert_int_equal(p->concurrency, 4);
    assert_int_equal(p->memory, 256 * MiB);
    char version[65];
    memcpy(version, p->version, sizeof version);
    ferry_pipeline_free(p);
    assert_int_equal(load("concurrency: 16\nmemory: 1GiB\n", &p, &e), FERRY_OK);
    assert_int_equal(p->concurrency, 16);
    assert_int_equal(p->memory, 1024 * MiB);
    assert_string_equal(p->version, version); /* tuning: not part of the version */
    ferry_pipeline_free(p);
    assert_int_equal(load("memory: 512MiB\n", &p, &e), FERRY_OK);
    assert_int_equal(p->memory, 512 * MiB);
    ferry_pipeline_free(p);
    static const char *const bad[] = {"concurrency: 0\n",    "concurrency: 65\n",
                                      "concurrency: many\n", "memory: 12 apples\n",
                                      "memory: 512k\n",      NULL};
    static const char *const key[] = {"concurrency", "concurrency", "concurrency", "memory",
                                      "memory"};
    for (int i = 0; bad[i]; i++) {
        p = NULL;
        assert_int_equal(load(bad[i], &p, &e), FERRY_ECONFIG);
        assert_null(p);
        if (strstr(e.message, key[i]) == NULL) fail_msg("%s: %s", bad[i], e.message);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_budget_keeps_the_file_settings),
        cmocka_unit_test(test_queues_shrink_as_concurrency_grows),
        cmocka_unit_test(test_batch_bytes_shrink_before_the_queue_is_gone),
        cmocka_unit_test(test_too_small_a_budget_is_refused),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
