/* tests/unit/test_commit_group.c - the commit group of cdc streams sharing a sink
 * (pipeline/commit_group.h), over a recording sink: no commit until every counted member
 * waits at a cut; a member that never entered does not hold the others; a finished member
 * is no longer counted; a member that stops otherwise, or an apply that fails, rolls the
 * open transaction back and fails every later call, naming it. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/batch.h"
#include "ferry/core.h"
#include "pipeline/commit_group.h"

/* The recording sink: one letter per call (B begin, A apply, C commit, R rollback). */
static char calls[256];
static int n_calls;
static int fail_apply; /* the next apply fails with this code */

static void note(char c)
{
    if (n_calls < (int)sizeof calls - 1) calls[n_calls++] = c;
    calls[n_calls] = '\0';
}

static int rec_begin(void *ctx, struct ferry_error *err)
{
    (void)ctx, (void)err;
    note('B');
    return FERRY_OK;
}

static int rec_apply(void *ctx, const struct ferry_target *t, struct ferry_batch *b,
                     struct ferry_receipt *r, struct ferry_error *err)
{
    (void)ctx, (void)t, (void)b, (void)r;
    note('A');
    if (fail_apply == 0) return FERRY_OK;
    int rc = fail_apply;
    fail_apply = 0;
    return ferry_error_set(err, rc, "test", "apply refused");
}

static int rec_commit(void *ctx, struct ferry_error *err)
{
    (void)ctx, (void)err;
    note('C');
    return FERRY_OK;
}

static void rec_abort(void *ctx)
{
    (void)ctx;
    note('R');
}

static const struct ferry_sink_vtable rec_sink = {.name = "rec",
                                                  .apply = rec_apply,
                                                  .group_begin = rec_begin,
                                                  .group_commit = rec_commit,
                                                  .group_abort = rec_abort};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct ferry_batch *batch(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *b = ferry_batch_new(s, "t");
    ferry_schema_unref(s);
    assert_non_null(b);
    return b;
}

static int apply(struct ferry_commit_member *m)
{
    struct ferry_batch *b = batch();
    struct ferry_receipt r;
    memset(&r, 0, sizeof r);
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry_commit_group_apply(m, NULL, b, &r, &e);
    ferry_batch_unref(b);
    return rc;
}

struct waiter {
    struct ferry_commit_member *m;
    bool finish;
    int finish_rc;
    int rc;
    struct ferry_error err;
    atomic_bool returned;
    pthread_t thread;
};

static void *wait_main(void *arg)
{
    struct waiter *w = arg;
    ferry_error_clear(&w->err);
    w->rc = w->finish ? ferry_commit_group_finish(w->m, w->finish_rc, "test", &w->err)
                      : ferry_commit_group_arrive(w->m, &w->err);
    atomic_store(&w->returned, true);
    return NULL;
}

static void start(struct waiter *w, struct ferry_commit_member *m, bool finish)
{
    memset(w, 0, sizeof *w);
    w->m = m;
    w->finish = finish;
    assert_int_equal(pthread_create(&w->thread, NULL, wait_main, w), 0);
    usleep(50000); /* it would have committed by now if it were going to */
}

static void reset(void)
{
    n_calls = 0;
    calls[0] = '\0';
    fail_apply = 0;
}

static void waits_for_every_counted_member(void **state)
{
    (void)state;
    reset();
    struct ferry_commit_group *g = ferry_commit_group_new(&rec_sink, NULL, &lock);
    struct ferry_commit_member *a = ferry_commit_group_member(g, "a");
    struct ferry_commit_member *b = ferry_commit_group_member(g, "b");
    struct ferry_commit_member *never = ferry_commit_group_member(g, "never");
    assert_non_null(never);
    ferry_commit_group_enter(a);
    ferry_commit_group_enter(b);
    assert_int_equal(apply(a), FERRY_OK);
    struct waiter wa;
    start(&wa, a, false);
    assert_false(atomic_load(&wa.returned)); /* b has not reached the cut */
    assert_string_equal(calls, "BA");
    assert_int_equal(apply(b), FERRY_OK);
    assert_int_equal(ferry_commit_group_arrive(b, NULL), FERRY_OK);
    pthread_join(wa.thread, NULL);
    assert_int_equal(wa.rc, FERRY_OK);
    assert_string_equal(calls, "BAAC"); /* one transaction, both applies, one commit */
    assert_int_equal(ferry_commit_group_commits(g), 1);
    /* a finished member no longer counts: b alone commits its next cut */
    struct waiter fa;
    start(&fa, a, true);
    assert_false(atomic_load(&fa.returned));
    assert_int_equal(apply(b), FERRY_OK);
    assert_int_equal(ferry_commit_group_arrive(b, NULL), FERRY_OK);
    pthread_join(fa.thread, NULL);
    assert_int_equal(fa.rc, FERRY_OK);
    assert_int_equal(apply(b), FERRY_OK);
    assert_int_equal(ferry_commit_group_arrive(b, NULL), FERRY_OK);
    assert_string_equal(calls, "BAACBACBAC");
    assert_int_equal(ferry_commit_group_finish(b, FERRY_OK, "", NULL), FERRY_OK);
    assert_int_equal(ferry_commit_group_finish(never, FERRY_OK, "", NULL), FERRY_OK);
    ferry_commit_group_free(g);
}

static void a_stop_rolls_back_and_fails_the_others(void **state)
{
    (void)state;
    reset();
    struct ferry_commit_group *g = ferry_commit_group_new(&rec_sink, NULL, &lock);
    struct ferry_commit_member *a = ferry_commit_group_member(g, "acct_a");
    struct ferry_commit_member *b = ferry_commit_group_member(g, "acct_b");
    ferry_commit_group_enter(a);
    ferry_commit_group_enter(b);
    assert_int_equal(apply(a), FERRY_OK);
    struct waiter wa;
    start(&wa, a, false);
    assert_int_equal(ferry_commit_group_finish(b, FERRY_EPAUSED, "paused", NULL), FERRY_EPAUSED);
    pthread_join(wa.thread, NULL);
    assert_int_equal(wa.rc, FERRY_EPAUSED);
    assert_non_null(strstr(wa.err.message, "acct_b"));
    assert_string_equal(calls, "BAR"); /* rolled back, never committed */
    struct ferry_error e;
    ferry_error_clear(&e);
    assert_int_equal(ferry_commit_group_finish(a, FERRY_OK, "", &e), FERRY_EPAUSED);
    ferry_commit_group_free(g);
}

static void a_failed_apply_breaks_the_group(void **state)
{
    (void)state;
    reset();
    struct ferry_commit_group *g = ferry_commit_group_new(&rec_sink, NULL, &lock);
    struct ferry_commit_member *a = ferry_commit_group_member(g, "acct_a");
    struct ferry_commit_member *b = ferry_commit_group_member(g, "acct_b");
    assert_int_equal(apply(b), FERRY_OK); /* an apply counts its member in */
    fail_apply = FERRY_ESINK;
    assert_int_equal(apply(a), FERRY_ESINK);
    assert_string_equal(calls, "BAAR");
    struct ferry_error e;
    ferry_error_clear(&e);
    assert_int_equal(ferry_commit_group_arrive(b, &e), FERRY_ESINK);
    assert_non_null(strstr(e.message, "acct_a"));
    assert_int_equal(apply(b), FERRY_ESINK); /* nothing more is applied */
    assert_string_equal(calls, "BAAR");
    ferry_commit_group_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(waits_for_every_counted_member),
        cmocka_unit_test(a_stop_rolls_back_and_fails_the_others),
        cmocka_unit_test(a_failed_apply_breaks_the_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
