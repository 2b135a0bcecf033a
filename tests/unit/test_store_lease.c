/* tests/unit/test_store_lease.c - migration 6 of the state store: pull dispatch and run
 * claims (two handles racing), shard task leases (expiry, re-lease with token + 1, fenced
 * renew/done/checkpoint) and named leader leases. Runs on a real SQLite file, or on a fresh
 * schema of the PostgreSQL store when FERRY_TEST_STORE is set (state_fixture.h). */
#include "state_fixture.h"

#include <pthread.h>
#include <time.h>
#include "unit.h"
#include "ferry/core.h"
#include "store/store.h"

struct fx {
    struct state_dir sd;
    struct ferry_store *st;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    *state = f;
    return state_store_open(&f->sd, &f->st);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    state_store_close(&f->sd, f->st);
    free(f);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int64_t new_run(struct ferry_store *st, const char *dispatch)
{
    int64_t id = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_create(st, "p", "v1", "{}", &id, &err), FERRY_OK);
    if (dispatch) assert_int_equal(ferry_store_run_set_dispatch(st, id, dispatch, &err), FERRY_OK);
    return id;
}

/* A running run with one resource of n shard tasks. */
static int64_t sharded_run(struct ferry_store *st, int n)
{
    struct ferry_error err = {0};
    int64_t id = new_run(st, NULL);
    int attempt = 0;
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 1, &attempt, &err), FERRY_OK);
    assert_int_equal(ferry_store_shard_tasks_put(st, id, "orders", n, &err), FERRY_OK);
    return id;
}

static void test_dispatch(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t id = new_run(f->st, NULL);
    char d[32];
    assert_int_equal(ferry_store_run_get_dispatch(f->st, id, d, sizeof d, &err), FERRY_OK);
    assert_string_equal(d, "local");
    assert_int_equal(ferry_store_run_set_dispatch(f->st, id, "kubernetes", &err), FERRY_OK);
    assert_int_equal(ferry_store_run_get_dispatch(f->st, id, d, sizeof d, &err), FERRY_OK);
    assert_string_equal(d, "kubernetes");
    assert_int_equal(ferry_store_run_set_dispatch(f->st, id, "carrier-pigeon", &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "carrier-pigeon"));
    assert_int_equal(ferry_store_run_set_dispatch(f->st, id + 100, "pull", &err), FERRY_ENOTFOUND);
    assert_int_equal(ferry_store_run_get_dispatch(f->st, id + 100, d, sizeof d, &err),
                     FERRY_ENOTFOUND);
}

static void test_claim_only_requested_pull_runs(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t local = new_run(f->st, NULL);
    int64_t kube = new_run(f->st, "kubernetes");
    int64_t a = new_run(f->st, "pull");
    int64_t b = new_run(f->st, "pull");
    /* A pull run already running is not claimable. */
    int attempt = 0;
    assert_int_equal(ferry_store_run_begin_attempt(f->st, a, 7, &attempt, &err), FERRY_OK);

    int64_t got = 0;
    bool found = false;
    assert_int_equal(ferry_store_run_claim(f->st, "host:1", 42, &got, &attempt, &found, &err),
                     FERRY_OK);
    assert_true(found);
    assert_int_equal(got, b);
    assert_int_equal(attempt, 1);
    struct ferry_run_info r;
    assert_int_equal(ferry_store_run_get(f->st, b, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_RUNNING);
    assert_int_equal(r.pid, 42);
    assert_int_equal(r.attempt, 1);
    assert_true(r.heartbeat_us > 0 && r.started_us > 0);
    ferry_run_info_clear(&r);

    assert_int_equal(ferry_store_run_claim(f->st, "host:1", 42, &got, &attempt, &found, &err),
                     FERRY_OK);
    assert_false(found);
    assert_int_equal(ferry_store_run_get(f->st, local, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_REQUESTED);
    ferry_run_info_clear(&r);
    assert_int_equal(ferry_store_run_get(f->st, kube, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_REQUESTED);
    ferry_run_info_clear(&r);

    /* A requeued (failed -> requested) pull run is claimable again with the next attempt. */
    assert_int_equal(ferry_store_run_set_state(f->st, b, 1, FERRY_RUN_FAILED, "x", &err), FERRY_OK);
    assert_int_equal(ferry_store_run_requeue(f->st, b, true, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_claim(f->st, "host:2", 43, &got, &attempt, &found, &err),
                     FERRY_OK);
    assert_true(found);
    assert_int_equal(got, b);
    assert_int_equal(attempt, 2);
    /* The claimer of attempt 1 is fenced. */
    assert_int_equal(ferry_store_run_heartbeat(f->st, b, 1, &err), FERRY_EFENCED);
    assert_int_equal(ferry_store_run_heartbeat(f->st, b, 2, &err), FERRY_OK);
}

#define RACE_RUNS 40

struct claimer {
    const char *url;
    const char *owner;
    int64_t got[RACE_RUNS];
    int n;
    int rc;
};

static void *claim_all(void *arg)
{
    struct claimer *c = arg;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    c->rc = ferry_store_open(c->url, &st, &err);
    while (c->rc == FERRY_OK) {
        int64_t id = 0;
        int attempt = 0;
        bool found = false;
        c->rc = ferry_store_run_claim(st, c->owner, 1, &id, &attempt, &found, &err);
        if (c->rc != FERRY_OK) fprintf(stderr, "claim: %s\n", err.message);
        if (c->rc != FERRY_OK || !found) break;
        if (attempt != 1 || c->n >= RACE_RUNS) {
            c->rc = -1;
            break;
        }
        c->got[c->n++] = id;
    }
    ferry_store_close(st);
    return NULL;
}

static void test_two_handles_race_claims(void **state)
{
    struct fx *f = *state;
    int64_t ids[RACE_RUNS];
    for (int i = 0; i < RACE_RUNS; i++)
        ids[i] = new_run(f->st, "pull");
    struct claimer a = {.url = f->sd.url, .owner = "a:1"}, b = {.url = f->sd.url, .owner = "b:2"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, claim_all, &a);
    pthread_create(&tb, NULL, claim_all, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.rc, FERRY_OK);
    assert_int_equal(b.rc, FERRY_OK);
    /* Every run claimed exactly once between the two. */
    assert_int_equal(a.n + b.n, RACE_RUNS);
    for (int i = 0; i < RACE_RUNS; i++) {
        int seen = 0;
        for (int j = 0; j < a.n; j++)
            seen += a.got[j] == ids[i];
        for (int j = 0; j < b.n; j++)
            seen += b.got[j] == ids[i];
        assert_int_equal(seen, 1);
    }
}

static void test_shard_tasks_put_once_and_list(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t run = sharded_run(f->st, 3);
    assert_int_equal(ferry_store_shard_tasks_put(f->st, run, "users", 2, &err), FERRY_OK);
    struct ferry_shard_task t;
    bool found = false;
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w:1", 60000, &t, &found, &err), FERRY_OK);
    assert_true(found);
    /* A second put (a resumed coordinator) keeps the tasks as they are. */
    assert_int_equal(ferry_store_shard_tasks_put(f->st, run, "orders", 3, &err), FERRY_OK);
    assert_int_equal(ferry_store_shard_tasks_put(f->st, run, "orders", 0, &err), FERRY_EINVAL);
    assert_int_equal(ferry_store_shard_tasks_put(f->st, run + 100, "orders", 2, &err),
                     FERRY_ENOTFOUND);

    struct ferry_shard_task *v = NULL;
    int n = 0;
    assert_int_equal(ferry_store_shard_list(f->st, run, NULL, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 5);
    assert_string_equal(v[0].resource, "orders");
    assert_int_equal(v[0].shard, 0);
    assert_int_equal(v[2].shard, 2);
    assert_string_equal(v[3].resource, "users");
    int leased = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i].state, "leased") == 0) {
            leased++;
            assert_string_equal(v[i].owner, "w:1");
            assert_int_equal(v[i].token, 1);
            assert_string_equal(v[i].resource, t.resource);
            assert_int_equal(v[i].shard, t.shard);
        } else {
            assert_string_equal(v[i].state, "open");
            assert_string_equal(v[i].owner, "");
            assert_int_equal(v[i].token, 0);
        }
    }
    assert_int_equal(leased, 1);
    ferry_free(v);
    assert_int_equal(ferry_store_shard_list(f->st, run, "users", &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    ferry_free(v);
}

static void test_shard_claims_and_lease_expiry(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    /* A run that is not running offers nothing. */
    int64_t idle = new_run(f->st, NULL);
    assert_int_equal(ferry_store_shard_tasks_put(f->st, idle, "orders", 2, &err), FERRY_OK);
    struct ferry_shard_task t;
    bool found = true;
    assert_int_equal(ferry_store_shard_claim(f->st, idle, "w:1", 60000, &t, &found, &err),
                     FERRY_OK);
    assert_false(found);

    int64_t run = sharded_run(f->st, 2);
    struct ferry_shard_task a, b;
    assert_int_equal(ferry_store_shard_claim(f->st, 0, "w:a", 60000, &a, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(a.run_id, run);
    assert_int_equal(a.token, 1);
    assert_string_equal(a.owner, "w:a");
    assert_string_equal(a.state, "leased");
    assert_true(a.lease_until_us > 0);
    /* b gets the other open task, then nothing is left (a's lease is long). */
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w:b", 1, &b, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_not_equal(b.shard, a.shard);
    assert_int_equal(b.token, 1);

    /* b's 1 ms lease expires; c re-leases that task with token + 1. */
    sleep_ms(30);
    struct ferry_shard_task c;
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w:c", 60000, &c, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(c.shard, b.shard);
    assert_int_equal(c.token, 2);
    assert_string_equal(c.owner, "w:c");
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w:d", 60000, &t, &found, &err), FERRY_OK);
    assert_false(found);

    /* The old holder b is fenced everywhere; c is not. */
    assert_int_equal(ferry_store_shard_renew(f->st, run, "orders", b.shard, b.token, 60000, &err),
                     FERRY_EFENCED);
    assert_non_null(strstr(err.message, "orders"));
    assert_int_equal(ferry_store_shard_checkpoint_save(f->st, run, "orders", b.shard, b.token,
                                                       "{\"k\":1}", &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_shard_done(f->st, run, "orders", b.shard, b.token, &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_shard_renew(f->st, run, "orders", c.shard, c.token, 60000, &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_shard_checkpoint_save(f->st, run, "orders", c.shard, c.token,
                                                       "{\"k\":2}", &err),
                     FERRY_OK);
    assert_int_equal(
        ferry_store_shard_checkpoint_save(f->st, run, "orders", c.shard, c.token, "not json", &err),
        FERRY_EINVAL);
    assert_int_equal(ferry_store_shard_renew(f->st, run, "orders", 9, 1, 60000, &err),
                     FERRY_ENOTFOUND);

    /* The fenced save left nothing; c's save is the run checkpoint of that shard. */
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    assert_int_equal(ferry_store_run_checkpoints(f->st, run, "orders", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(cps[0].shard, c.shard);
    assert_string_equal(cps[0].position, "{\"k\":2}");
    ferry_checkpoints_free(cps, n);

    assert_int_equal(ferry_store_shard_done(f->st, run, "orders", c.shard, c.token, &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_shard_renew(f->st, run, "orders", c.shard, c.token, 60000, &err),
                     FERRY_ECONFLICT);
    assert_int_equal(ferry_store_shard_done(f->st, run, "orders", a.shard, a.token, &err),
                     FERRY_OK);
    struct ferry_shard_task *v = NULL;
    assert_int_equal(ferry_store_shard_list(f->st, run, "orders", &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    for (int i = 0; i < n; i++)
        assert_string_equal(v[i].state, "done");
    assert_string_equal(v[c.shard].owner, "w:c");
    ferry_free(v);
    /* Done tasks are never leased again, even once their lease time has passed. */
    sleep_ms(5);
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w:e", 1, &t, &found, &err), FERRY_OK);
    assert_false(found);
}

/* Asks for lease `name` as `owner`; checks whether it is held and the token it shows
 * (want_tok < 0: any). */
static void acquire(struct ferry_store *st, const char *name, const char *owner, int64_t ttl_ms,
                    bool want_held, int64_t want_tok)
{
    struct ferry_error err = {0};
    bool held = !want_held;
    int64_t tok = 0;
    assert_int_equal(ferry_store_lease_acquire(st, name, owner, ttl_ms, &held, &tok, &err),
                     FERRY_OK);
    assert_int_equal(held, want_held);
    if (want_tok >= 0) assert_int_equal(tok, want_tok);
}

static void holder_is(struct ferry_store *st, const char *name, const char *want)
{
    struct ferry_error err = {0};
    char who[64];
    int64_t tok = 0;
    assert_int_equal(ferry_store_lease_holder(st, name, who, sizeof who, &tok, &err), FERRY_OK);
    assert_string_equal(who, want);
}

static void test_leader_lease(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    holder_is(f->st, "control", "");

    acquire(f->st, "control", "a", 60000, true, 1);
    acquire(f->st, "control", "b", 60000, false, 1);
    /* Renewing keeps the token: the holder did not change. */
    acquire(f->st, "control", "a", 60000, true, 1);
    holder_is(f->st, "control", "a");
    /* Another name is another lease. */
    acquire(f->st, "other", "b", 60000, true, -1);

    /* Expiry: a's short lease lapses, b takes over with a new token, a is refused. */
    acquire(f->st, "control", "a", 1, true, -1);
    sleep_ms(30);
    holder_is(f->st, "control", "");
    acquire(f->st, "control", "b", 60000, true, 2);
    acquire(f->st, "control", "a", 60000, false, 2);

    /* Release by a non-holder does nothing; by the holder frees it at once. */
    assert_int_equal(ferry_store_lease_release(f->st, "control", "a", &err), FERRY_OK);
    holder_is(f->st, "control", "b");
    assert_int_equal(ferry_store_lease_release(f->st, "control", "b", &err), FERRY_OK);
    holder_is(f->st, "control", "");
    acquire(f->st, "control", "a", 60000, true, 3);
    bool held = false;
    int64_t tok = 0;
    assert_int_equal(ferry_store_lease_acquire(f->st, "control", "", 60000, &held, &tok, &err),
                     FERRY_EINVAL);
}

struct contender {
    const char *url;
    const char *owner;
    int wins;
    int rc;
};

static void *contend(void *arg)
{
    struct contender *c = arg;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    c->rc = ferry_store_open(c->url, &st, &err);
    for (int i = 0; c->rc == FERRY_OK && i < 20; i++) {
        bool held = false;
        int64_t tok = 0;
        c->rc = ferry_store_lease_acquire(st, "race", c->owner, 60000, &held, &tok, &err);
        c->wins += held;
    }
    ferry_store_close(st);
    return NULL;
}

static void test_leader_lease_race(void **state)
{
    struct fx *f = *state;
    struct contender a = {.url = f->sd.url, .owner = "a"}, b = {.url = f->sd.url, .owner = "b"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, contend, &a);
    pthread_create(&tb, NULL, contend, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.rc, FERRY_OK);
    assert_int_equal(b.rc, FERRY_OK);
    /* One of them held it every time it asked, the other never. */
    assert_true((a.wins == 20 && b.wins == 0) || (a.wins == 0 && b.wins == 20));
    struct ferry_error err = {0};
    char who[16];
    int64_t tok = 0;
    assert_int_equal(ferry_store_lease_holder(f->st, "race", who, sizeof who, &tok, &err),
                     FERRY_OK);
    assert_string_equal(who, a.wins ? "a" : "b");
    assert_int_equal(tok, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dispatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_only_requested_pull_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_handles_race_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_tasks_put_once_and_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_claims_and_lease_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leader_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leader_lease_race, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
