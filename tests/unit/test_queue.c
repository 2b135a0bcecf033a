/* tests/unit/test_queue.c - the bounded batch queue between pipeline stages: FIFO order,
 * blocking push and pop across threads, close with and without an error, discard (the
 * sanitizer build proves discarded and freed batches are unref'd), the high water mark. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/batch.h"
#include "ferry/core.h"
#include "pipeline/queue.h"

static struct ferry_schema *one_column(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static struct ferry_batch *batch(uint64_t seq)
{
    struct ferry_schema *s = one_column();
    struct ferry_batch *b = ferry_batch_new(s, "queue.test");
    ferry_schema_unref(s);
    assert_non_null(b);
    b->seq = seq;
    return b;
}

static int refs(struct ferry_batch *b)
{
    return atomic_load(&b->refcount);
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

static void test_fifo_order(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(8);
    assert_non_null(q);
    for (uint64_t i = 1; i <= 8; i++)
        assert_int_equal(ferry_queue_push(q, batch(i)), FERRY_OK);
    assert_int_equal(ferry_queue_length(q), 8);
    /* Interleave pops and pushes so the ring wraps around. */
    uint64_t next_in = 9, next_out = 1;
    for (int round = 0; round < 20; round++) {
        for (int k = 0; k < 3; k++) {
            struct ferry_batch *b = ferry_queue_pop(q);
            assert_non_null(b);
            assert_int_equal(b->seq, next_out++);
            ferry_batch_unref(b);
        }
        for (int k = 0; k < 3; k++)
            assert_int_equal(ferry_queue_push(q, batch(next_in++)), FERRY_OK);
        assert_int_equal(ferry_queue_length(q), 8);
    }
    ferry_queue_close(q, FERRY_OK);
    struct ferry_batch *b;
    while ((b = ferry_queue_pop(q)) != NULL) {
        assert_int_equal(b->seq, next_out++);
        ferry_batch_unref(b);
    }
    assert_int_equal(next_out, next_in);
    ferry_queue_free(q);
}

static void test_capacity_below_one_is_one(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(0);
    assert_non_null(q);
    assert_int_equal(ferry_queue_push(q, batch(1)), FERRY_OK);
    assert_int_equal(ferry_queue_length(q), 1);
    ferry_queue_free(q); /* unrefs the queued batch */
}

/* ---- blocking ---- */

struct pusher {
    struct ferry_queue *q;
    struct ferry_batch *b;
    atomic_int done;
    int rc;
};

static void *push_main(void *arg)
{
    struct pusher *p = arg;
    p->rc = ferry_queue_push(p->q, p->b);
    atomic_store(&p->done, 1);
    return NULL;
}

struct popper {
    struct ferry_queue *q;
    atomic_int done;
    struct ferry_batch *got;
};

static void *pop_main(void *arg)
{
    struct popper *p = arg;
    p->got = ferry_queue_pop(p->q);
    atomic_store(&p->done, 1);
    return NULL;
}

static void test_push_blocks_when_full_until_a_pop(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(2);
    assert_int_equal(ferry_queue_push(q, batch(1)), FERRY_OK);
    assert_int_equal(ferry_queue_push(q, batch(2)), FERRY_OK);

    struct pusher p = {.q = q, .b = batch(3)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_main, &p), 0);
    sleep_ms(150);
    assert_int_equal(atomic_load(&p.done), 0); /* still waiting: the queue is full */
    assert_int_equal(ferry_queue_length(q), 2);

    struct ferry_batch *b = ferry_queue_pop(q);
    assert_int_equal(b->seq, 1);
    ferry_batch_unref(b);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&p.done), 1);
    assert_int_equal(p.rc, FERRY_OK);
    assert_int_equal(ferry_queue_length(q), 2);
    assert_int_equal(ferry_queue_high_water(q), 2); /* never more than the capacity */
    int64_t push_wait = 0, pop_wait = 0;
    ferry_queue_waits(q, &push_wait, &pop_wait);
    assert_true(push_wait > 0); /* the blocked push, counted */
    assert_int_equal(pop_wait, 0);     /* no pop had to wait */

    for (uint64_t want = 2; want <= 3; want++) {
        b = ferry_queue_pop(q);
        assert_non_null(b);
        assert_int_equal(b->seq, want);
        ferry_batch_unref(b);
    }
    ferry_queue_free(q);
}

static void test_pop_blocks_when_empty_until_a_push(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(2);
    struct popper p = {.q = q};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pop_main, &p), 0);
    sleep_ms(150);
    assert_int_equal(atomic_load(&p.done), 0);
    assert_int_equal(ferry_queue_push(q, batch(7)), FERRY_OK);
    pthread_join(t, NULL);
    assert_non_null(p.got);
    assert_int_equal(p.got->seq, 7);
    int64_t push_wait = 0, pop_wait = 0;
    ferry_queue_waits(q, &push_wait, &pop_wait);
    assert_true(pop_wait > 0); /* the blocked pop, counted */
    assert_int_equal(push_wait, 0);
    ferry_batch_unref(p.got);
    ferry_queue_free(q);
}

/* ---- close ---- */

static void test_close_ok_drains_then_null(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(4);
    assert_int_equal(ferry_queue_push(q, batch(1)), FERRY_OK);
    assert_int_equal(ferry_queue_push(q, batch(2)), FERRY_OK);
    ferry_queue_close(q, FERRY_OK);

    /* A push after a normal close fails (the batch stays the caller's). */
    struct ferry_batch *late = batch(3);
    int rc = ferry_queue_push(q, late);
    assert_int_not_equal(rc, FERRY_OK);
    assert_int_equal(refs(late), 1);
    ferry_batch_unref(late);

    for (uint64_t want = 1; want <= 2; want++) {
        struct ferry_batch *b = ferry_queue_pop(q);
        assert_non_null(b);
        assert_int_equal(b->seq, want);
        ferry_batch_unref(b);
    }
    assert_null(ferry_queue_pop(q));
    assert_null(ferry_queue_pop(q)); /* and again: closed stays closed */
    ferry_queue_free(q);
}

static void test_close_wakes_a_waiting_pop(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(2);
    struct popper p = {.q = q};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pop_main, &p), 0);
    sleep_ms(100);
    assert_int_equal(atomic_load(&p.done), 0);
    ferry_queue_close(q, FERRY_OK);
    pthread_join(t, NULL);
    assert_null(p.got);
    ferry_queue_free(q);
}

static void test_close_error_fails_push_without_taking_the_batch(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(1);
    assert_int_equal(ferry_queue_push(q, batch(1)), FERRY_OK);

    /* A pusher waiting on a full queue is woken by the close and gets its code. */
    struct pusher p = {.q = q, .b = batch(2)};
    ferry_batch_ref(p.b); /* ours, to check the queue did not keep or drop it */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_main, &p), 0);
    sleep_ms(100);
    assert_int_equal(atomic_load(&p.done), 0);
    ferry_queue_close(q, FERRY_ESINK);
    pthread_join(t, NULL);
    assert_int_equal(p.rc, FERRY_ESINK);
    assert_int_equal(refs(p.b), 2); /* not taken, not unref'd */

    /* Later pushes fail the same way; a second close does not change the code. */
    ferry_queue_close(q, FERRY_EIO);
    assert_int_equal(ferry_queue_push(q, p.b), FERRY_ESINK);
    assert_int_equal(refs(p.b), 2);
    ferry_batch_unref(p.b);
    ferry_batch_unref(p.b);

    /* Pops still drain what was accepted before the close, and never the refused batch. */
    struct ferry_batch *b = ferry_queue_pop(q);
    assert_non_null(b);
    assert_int_equal(b->seq, 1);
    ferry_batch_unref(b);
    assert_null(ferry_queue_pop(q));
    assert_int_equal(ferry_queue_length(q), 0);
    ferry_queue_free(q);
}

/* ---- discard, free ---- */

static void test_discard_unrefs_queued_batches(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(4);
    struct ferry_batch *watched = batch(2);
    ferry_batch_ref(watched);
    assert_int_equal(ferry_queue_push(q, batch(1)), FERRY_OK);
    assert_int_equal(ferry_queue_push(q, watched), FERRY_OK);
    assert_int_equal(ferry_queue_push(q, batch(3)), FERRY_OK);
    assert_int_equal(refs(watched), 2);

    ferry_queue_discard(q);
    assert_int_equal(ferry_queue_length(q), 0);
    assert_int_equal(refs(watched), 1); /* the queue's reference was dropped */
    ferry_batch_unref(watched);

    /* Discard wakes a pusher blocked on a full queue: there is room again. */
    struct ferry_queue *q1 = ferry_queue_new(1);
    assert_int_equal(ferry_queue_push(q1, batch(10)), FERRY_OK);
    struct pusher p = {.q = q1, .b = batch(11)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_main, &p), 0);
    sleep_ms(100);
    assert_int_equal(atomic_load(&p.done), 0);
    ferry_queue_discard(q1);
    pthread_join(t, NULL);
    assert_int_equal(p.rc, FERRY_OK);
    struct ferry_batch *b = ferry_queue_pop(q1);
    assert_int_equal(b->seq, 11);
    ferry_batch_unref(b);

    /* The queue is still usable after a discard. */
    assert_int_equal(ferry_queue_push(q, batch(4)), FERRY_OK);
    b = ferry_queue_pop(q);
    assert_int_equal(b->seq, 4);
    ferry_batch_unref(b);

    /* free unrefs what is still queued (leaks would show in the sanitizer build). */
    assert_int_equal(ferry_queue_push(q, batch(5)), FERRY_OK);
    assert_int_equal(ferry_queue_push(q, batch(6)), FERRY_OK);
    ferry_queue_free(q);
    ferry_queue_free(q1);
    ferry_queue_free(NULL);
}

static void test_high_water_mark(void **state)
{
    (void)state;
    struct ferry_queue *q = ferry_queue_new(8);
    assert_int_equal(ferry_queue_high_water(q), 0);
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(ferry_queue_push(q, batch(i)), FERRY_OK);
    assert_int_equal(ferry_queue_high_water(q), 3);
    for (int i = 0; i < 2; i++)
        ferry_batch_unref(ferry_queue_pop(q));
    assert_int_equal(ferry_queue_length(q), 1);
    assert_int_equal(ferry_queue_high_water(q), 3); /* a mark, not the length */
    assert_int_equal(ferry_queue_push(q, batch(4)), FERRY_OK);
    assert_int_equal(ferry_queue_high_water(q), 3);
    for (uint64_t i = 5; i <= 7; i++)
        assert_int_equal(ferry_queue_push(q, batch(i)), FERRY_OK);
    assert_int_equal(ferry_queue_length(q), 5);
    assert_int_equal(ferry_queue_high_water(q), 5);
    ferry_queue_discard(q);
    assert_int_equal(ferry_queue_high_water(q), 5);
    ferry_queue_free(q);
}

/* Many producers and one consumer: nothing lost, nothing duplicated, each producer's
 * batches in its own order. */
struct producer {
    struct ferry_queue *q;
    int id;
    int n;
};

static void *produce_main(void *arg)
{
    struct producer *p = arg;
    for (int i = 0; i < p->n; i++) {
        struct ferry_batch *b = batch((uint64_t)p->id * 1000000 + (uint64_t)i);
        if (ferry_queue_push(p->q, b) != FERRY_OK) ferry_batch_unref(b);
    }
    return NULL;
}

static void test_producers_and_consumer(void **state)
{
    (void)state;
    enum { NP = 3, N = 2000 };
    struct ferry_queue *q = ferry_queue_new(3);
    struct producer pr[NP];
    pthread_t t[NP];
    for (int i = 0; i < NP; i++) {
        pr[i] = (struct producer){.q = q, .id = i, .n = N};
        assert_int_equal(pthread_create(&t[i], NULL, produce_main, &pr[i]), 0);
    }
    int next[NP] = {0};
    for (int k = 0; k < NP * N; k++) {
        struct ferry_batch *b = ferry_queue_pop(q);
        assert_non_null(b);
        int id = (int)(b->seq / 1000000), i = (int)(b->seq % 1000000);
        assert_in_range(id, 0, NP - 1);
        assert_int_equal(i, next[id]);
        next[id]++;
        ferry_batch_unref(b);
    }
    for (int i = 0; i < NP; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(ferry_queue_length(q), 0);
    assert_true(ferry_queue_high_water(q) <= 3);
    ferry_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_capacity_below_one_is_one),
        cmocka_unit_test(test_push_blocks_when_full_until_a_pop),
        cmocka_unit_test(test_pop_blocks_when_empty_until_a_push),
        cmocka_unit_test(test_close_ok_drains_then_null),
        cmocka_unit_test(test_close_wakes_a_waiting_pop),
        cmocka_unit_test(test_close_error_fails_push_without_taking_the_batch),
        cmocka_unit_test(test_discard_unrefs_queued_batches),
        cmocka_unit_test(test_high_water_mark),
        cmocka_unit_test(test_producers_and_consumer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
