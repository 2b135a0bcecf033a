/* tests/unit/test_contracts.c - contracts that cannot be misused (issue 16): a failed
 * ferry_buf append is sticky, ferry_error_prefix never turns a failure into a success, and
 * an allocation failure at any point of the batch builder (with the digest of what it
 * built) and of the pipeline-file loader gives a clean error, no crash and no leak (run
 * under the asan preset to check the leaks). */
#include "unit.h"
#include <stdio.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/digest.h"
#include "ferry/error.h"
#include "ferry/pipeline.h"

/* ---- sticky buffer ---- */

static void test_buf_sticky_cap(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 16);
    assert_int_equal(ferry_buf_append(&b, "0123456789", 10), FERRY_OK);
    assert_int_equal(ferry_buf_failed(&b), FERRY_OK);
    /* over the cap: fails, and so does every later call, even one that would fit */
    assert_int_equal(ferry_buf_append(&b, "0123456789", 10), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_failed(&b), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_append(&b, "x", 1), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_printf(&b, "%d", 1), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_json_string(&b, "a", 1), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_reserve(&b, 0), FERRY_ENOMEM);
    assert_int_equal(b.len, 10); /* nothing was written after the failure */
    /* a failed buffer hands nothing over */
    assert_null(ferry_buf_take(&b));
    assert_int_equal(ferry_buf_failed(&b), FERRY_OK);
    ferry_buf_release(&b);
}

static void test_buf_sticky_oom_and_reset(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_mem_fail_after(0);
    int rc = ferry_buf_append(&b, "abc", 3);
    ferry_mem_fail_after(-1);
    assert_int_equal(rc, FERRY_ENOMEM);
    /* memory is back, the buffer still reports the lost piece */
    assert_int_equal(ferry_buf_append(&b, "def", 3), FERRY_ENOMEM);
    assert_int_equal(ferry_buf_failed(&b), FERRY_ENOMEM);
    /* reset starts over */
    ferry_buf_reset(&b);
    assert_int_equal(ferry_buf_append(&b, "ghi", 3), FERRY_OK);
    assert_string_equal(b.data, "ghi");
    ferry_buf_release(&b);
}

/* ---- ferry_error_prefix ---- */

static void test_error_prefix_never_ok(void **state)
{
    (void)state;
    assert_int_not_equal(ferry_error_prefix(NULL, "resource %s", "orders"), FERRY_OK);
    struct ferry_error e = {0};
    assert_int_not_equal(ferry_error_prefix(&e, "resource %s", "orders"), FERRY_OK);
    assert_int_not_equal(e.code, FERRY_OK);
    ferry_error_set(&e, FERRY_EIO, "test", "disk gone");
    assert_int_equal(ferry_error_prefix(&e, "resource %s", "orders"), FERRY_EIO);
    assert_string_equal(e.message, "resource orders: disk gone");
}

/* ---- allocation-failure loops ---- */

struct got {
    struct ferry_batch *b;
};

static int keep(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct got *g = ctx;
    ferry_batch_unref(g->b);
    g->b = b;
    return FERRY_OK;
}

static struct ferry_schema *test_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    if (s == NULL) return NULL;
    if (ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL) != FERRY_OK ||
        ferry_schema_add_field(s, "name", FERRY_TYPE_UTF8, true, NULL) != FERRY_OK ||
        ferry_schema_finish(s, NULL) != FERRY_OK) {
        ferry_schema_unref(s);
        return NULL;
    }
    return s;
}

/* Builds 50 rows into one batch and digests it. FERRY_OK with *digest set, or the error. */
static int build_and_digest(uint32_t *digest, struct ferry_error *err)
{
    struct ferry_schema *s = test_schema();
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "test", "schema: out of memory");
    struct got g = {0};
    struct ferry_rw_limits lim = {.rows = 1000};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, keep, &g);
    ferry_schema_unref(s);
    if (rw == NULL) return ferry_error_set(err, FERRY_ENOMEM, "test", "writer: out of memory");
    int rc = FERRY_OK;
    for (int i = 0; i < 50 && rc == FERRY_OK; i++) {
        char name[32];
        int n = snprintf(name, sizeof name, "name-%d", i);
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        if (i % 7 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_text(rw, name, (size_t)n);
        rc = ferry_rw_end(rw, err);
    }
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, err);
    if (rc == FERRY_OK && g.b == NULL)
        rc = ferry_error_set(err, FERRY_EINVAL, "test", "no batch came out");
    if (rc == FERRY_OK) *digest = ferry_batch_digest(g.b);
    ferry__rw_free(rw);
    ferry_batch_unref(g.b);
    return rc;
}

static void test_oom_builder_and_digest(void **state)
{
    (void)state;
    uint32_t want = 0;
    struct ferry_error e = {0};
    assert_int_equal(build_and_digest(&want, &e), FERRY_OK);
    int failures = 0;
    for (long n = 0; n < 10000; n++) {
        uint32_t got = 0;
        memset(&e, 0, sizeof e);
        ferry_mem_fail_after(n);
        int rc = build_and_digest(&got, &e);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_int_equal(got, want);
            break;
        }
        assert_int_equal(rc, FERRY_ENOMEM);
        assert_true(e.message[0] != '\0');
        failures++;
    }
    assert_true(failures > 0);
}

static const char pipeline_text[] = "version: 1\n"
                                    "name: demo\n"
                                    "source:\n"
                                    "  type: sample\n"
                                    "  rows: 10\n"
                                    "  resources:\n"
                                    "    - table: orders\n"
                                    "      mode: full\n"
                                    "sink:\n"
                                    "  type: sqlite\n"
                                    "  path: out/demo.db\n"
                                    "  write: append\n";

static void test_oom_pipeline_loader(void **state)
{
    (void)state;
    int failures = 0;
    for (long n = 0; n < 100000; n++) {
        struct ferry_pipeline_spec *p = NULL;
        struct ferry_error e = {0};
        ferry_mem_fail_after(n);
        int rc = ferry_pipeline_load_string(pipeline_text, strlen(pipeline_text), "demo.yaml",
                                            &p, &e);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_non_null(p);
            assert_string_equal(p->name, "demo");
            ferry_pipeline_free(p);
            break;
        }
        assert_null(p);
        assert_int_not_equal(e.code, FERRY_OK);
        assert_true(e.message[0] != '\0');
        failures++;
    }
    assert_true(failures > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_sticky_cap),
        cmocka_unit_test(test_buf_sticky_oom_and_reset),
        cmocka_unit_test(test_error_prefix_never_ok),
        cmocka_unit_test(test_oom_builder_and_digest),
        cmocka_unit_test(test_oom_pipeline_loader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
