/* tests/unit/test_pool.c - the pool of released batch buffers (batch/pool.h): small buffers
 * are never pooled, a pooled buffer serves a request it fits (at most twice its size), the
 * slot and byte bounds hold and evict the oldest, a row writer's batch reuses a released
 * batch's buffers (and its values are its own), and gets and puts from two threads at once
 * (the TSan build checks the locking). */
#include <pthread.h>
#include <string.h>
#include "unit.h"
#include "batch/builder.h"
#include "batch/pool.h"
#include "ferry/batch.h"
#include "ferry/core.h"

static void reset(void **state)
{
    (void)state;
    ferry__pool_drain();
}

static int pooled(size_t *bytes)
{
    int n = 0;
    size_t b = 0;
    ferry__pool_stats(&n, &b);
    if (bytes) *bytes = b;
    return n;
}

static void test_small_buffers_are_not_pooled(void **state)
{
    reset(state);
    size_t cap = 0;
    void *p = ferry__pool_get(100, &cap);
    assert_non_null(p);
    assert_int_equal(cap, 100);
    ferry__pool_put(p);
    ferry__pool_put(NULL);
    assert_int_equal(pooled(NULL), 0);
}

static void test_a_pooled_buffer_serves_what_it_fits(void **state)
{
    reset(state);
    size_t cap = 0, bytes = 0;
    void *p = ferry__pool_get(64 << 10, &cap);
    assert_non_null(p);
    memset(p, 1, cap);
    ferry__pool_put(p);
    assert_int_equal(pooled(&bytes), 1);
    assert_true(bytes >= (64u << 10));
    /* a quarter of its size: a new buffer, the big one stays pooled */
    void *q = ferry__pool_get(16 << 10, &cap);
    assert_ptr_not_equal(q, p);
    assert_int_equal(cap, 16 << 10);
    assert_int_equal(pooled(NULL), 1);
    /* 40 KiB fits the 64 KiB one: that buffer, with its real size */
    void *r = ferry__pool_get(40 << 10, &cap);
    assert_ptr_equal(r, p);
    assert_true(cap >= (64u << 10));
    memset(r, 2, cap);
    assert_int_equal(pooled(NULL), 0);
    ferry_free(q);
    ferry_free(r);
}

static void test_bounds_hold(void **state)
{
    reset(state);
    size_t cap = 0, bytes = 0;
    void *held[2 * FERRY_POOL_SLOTS];
    for (int i = 0; i < 2 * FERRY_POOL_SLOTS; i++) held[i] = ferry__pool_get(32 << 10, &cap);
    for (int i = 0; i < 2 * FERRY_POOL_SLOTS; i++) ferry__pool_put(held[i]);
    assert_int_equal(pooled(NULL), FERRY_POOL_SLOTS);
    ferry__pool_drain();
    for (int i = 0; i < 8; i++) held[i] = ferry__pool_get(3 << 20, &cap);
    for (int i = 0; i < 8; i++) ferry__pool_put(held[i]);
    assert_int_equal(pooled(&bytes), 2);
    assert_true(bytes <= FERRY_POOL_BYTES);
    /* the oldest went: what is left are the last two put */
    void *left = ferry__pool_get(3 << 20, &cap);
    assert_true(left == held[6] || left == held[7]);
    ferry__pool_put(left);
    ferry__pool_put(ferry__pool_get(FERRY_POOL_BYTES + 1, &cap)); /* over the bound: freed */
    assert_int_equal(pooled(NULL), 2);
    ferry__pool_drain();
    assert_int_equal(pooled(&bytes), 0);
    assert_int_equal(bytes, 0);
}

/* While flows have reserved less than FERRY_POOL_BYTES, that is the bound; a buffer larger
 * than it is freed; when they return their shares the full bound is back. */
static void test_flows_reservation_bounds_the_pool(void **state)
{
    reset(state);
    size_t cap = 0, bytes = 0;
    void *held[8];
    ferry__pool_reserve(1 << 20);
    for (int i = 0; i < 8; i++) held[i] = ferry__pool_get(256 << 10, &cap);
    for (int i = 0; i < 8; i++) ferry__pool_put(held[i]);
    int n = pooled(&bytes); /* 256 KiB each, plus the allocator's rounding */
    assert_true(n >= 3 && n <= 4);
    assert_true(bytes <= (size_t)1 << 20);
    ferry__pool_put(ferry__pool_get((1 << 20) + (64 << 10), &cap)); /* over the share: freed */
    assert_int_equal(pooled(NULL), n);
    ferry__pool_reserve(-(1 << 20));
    for (int i = 0; i < 8; i++) held[i] = ferry__pool_get(256 << 10, &cap);
    for (int i = 0; i < 8; i++) ferry__pool_put(held[i]);
    assert_int_equal(pooled(&bytes), 8);
    ferry__pool_drain();
}

struct kept {
    struct ferry_batch *b[8];
    int n;
};

static int keep(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct kept *k = ctx;
    assert_true(k->n < 8);
    k->b[k->n++] = b;
    return FERRY_OK;
}

/* The first batch grows from the writer's first buffers; from the second on, buffers come
 * through the pool at size-class sizes: the fourth batch gets the second's once it is
 * released (the third's were taken when the second was emitted). */
static void test_the_next_batch_reuses_a_released_one(void **state)
{
    reset(state);
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "name", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct kept k = {0};
    struct ferry_rw_limits lim = {.rows = 5000};
    struct ferry_row_writer *rw = ferry__rw_new(s, "pool.test", lim, keep, &k);
    assert_non_null(rw);
    struct ferry_error err;
    void *second_values = NULL;
    for (int64_t i = 0; i < 20000; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        if (i % 3) ferry_rw_text(rw, "a name of some length", 21);
        else ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
        if (k.n == 2 && second_values == NULL) {
            second_values = k.b[1]->columns[0].values;
            ferry_batch_unref(k.b[1]); /* the sink is done with it: its buffers are pooled */
            k.b[1] = NULL;
            assert_true(pooled(NULL) > 0);
        }
    }
    assert_int_equal(ferry_rw_flush(rw, true, &err), FERRY_OK);
    assert_true(k.n >= 4);
    assert_ptr_equal(k.b[3]->columns[0].values, second_values);
    assert_int_equal(k.b[3]->length, 5000);
    for (int64_t r = 0; r < k.b[3]->length; r++) {
        assert_int_equal(ferry_col_int(k.b[3], 0, r), 15000 + r);
        assert_int_equal(ferry_col_is_null(k.b[3], 1, r), (15000 + r) % 3 == 0);
    }
    for (int i = 0; i < k.n; i++) ferry_batch_unref(k.b[i]);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    ferry__pool_drain();
}

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        size_t cap = 0;
        void *p = ferry__pool_get((size_t)(20 + i % 40) << 10, &cap);
        if (p == NULL) return NULL;
        memset(p, i & 0xff, cap);
        ferry__pool_put(p);
    }
    return arg;
}

static void test_two_threads(void **state)
{
    reset(state);
    pthread_t t;
    int tag = 1;
    assert_int_equal(pthread_create(&t, NULL, churn, &tag), 0);
    void *mine = churn(&tag);
    void *theirs = NULL;
    pthread_join(t, &theirs);
    assert_ptr_equal(mine, &tag);
    assert_ptr_equal(theirs, &tag);
    size_t bytes = 0;
    assert_true(pooled(&bytes) <= FERRY_POOL_SLOTS);
    assert_true(bytes <= FERRY_POOL_BYTES);
    ferry__pool_drain();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_buffers_are_not_pooled),
        cmocka_unit_test(test_a_pooled_buffer_serves_what_it_fits),
        cmocka_unit_test(test_bounds_hold),
        cmocka_unit_test(test_flows_reservation_bounds_the_pool),
        cmocka_unit_test(test_the_next_batch_reuses_a_released_one),
        cmocka_unit_test(test_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
