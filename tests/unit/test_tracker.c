/* tests/unit/test_tracker.c - the tracker folding scripted event logs into a real SQLite
 * state file: exact counts, checkpoint rules, dedup under redelivery, fencing, restarts. */
#include "state_fixture.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>
#include "unit.h"
#include "bus/bus.h"
#include "control/tracker.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "store/store.h"

struct fx {
    struct state_dir sd;
    struct ferry_store *st; /* the test's own handle: sets runs up, appends, checks */
    struct ferry_tracker *tr;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    state_dir_make(&f->sd);
    struct ferry_error err = {0};
    if (ferry_store_open(f->sd.url, &f->st, &err) != FERRY_OK ||
        ferry_tracker_open(f->sd.url, NULL, &f->tr, &err) != FERRY_OK) {
        fprintf(stderr, "open: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    ferry_tracker_close(f->tr);
    ferry_store_close(f->st);
    state_dir_remove(&f->sd);
    free(f);
    return 0;
}

static int64_t start_run(struct ferry_store *st, const char *pipeline, int *attempt)
{
    struct ferry_error err = {0};
    int64_t id = 0;
    assert_int_equal(ferry_store_run_create(st, pipeline, "v1", "{}", &id, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 1, attempt, &err), FERRY_OK);
    return id;
}

static int64_t ev(struct ferry_store *st, int64_t run, int attempt, const char *resource,
                  const char *type, const char *payload)
{
    struct ferry_event e = {.run_id = run, .attempt = attempt, .payload = (char *)payload};
    snprintf(e.resource, sizeof e.resource, "%s", resource ? resource : "");
    snprintf(e.type, sizeof e.type, "%s", type);
    struct ferry_error err = {0};
    if (ferry_store_event_append(st, &e, &err) != FERRY_OK) fail_msg("append: %s", err.message);
    return e.seq;
}

static void fold(struct fx *f)
{
    struct ferry_error err = {0};
    if (ferry_tracker_fold_available(f->tr, &err) != FERRY_OK) fail_msg("fold: %s", err.message);
}

static struct ferry_run_info get_run(struct ferry_store *st, int64_t id)
{
    struct ferry_run_info r;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_get(st, id, &r, &err), FERRY_OK);
    ferry_run_info_clear(&r);
    return r;
}

/* The position of (run, resource, shard), "" when none; into buf. */
static const char *run_cp(struct ferry_store *st, int64_t run, const char *resource, int shard,
                          char *buf, size_t len)
{
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_checkpoints(st, run, resource, &cps, &n, &err), FERRY_OK);
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        if (cps[i].shard == shard) snprintf(buf, len, "%s", cps[i].position);
    ferry_checkpoints_free(cps, n);
    return buf;
}

static const char *route_cp(struct ferry_store *st, const char *pipeline, const char *route,
                            char *buf, size_t len, int64_t *run)
{
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_route_checkpoints(st, pipeline, "v1", route, &cps, &n, &err),
                     FERRY_OK);
    assert_true(n <= 1);
    buf[0] = '\0';
    if (n == 1) {
        snprintf(buf, len, "%s", cps[0].position);
        if (run) *run = cps[0].run_id;
    }
    ferry_checkpoints_free(cps, n);
    return buf;
}

static int route_count(struct ferry_store *st)
{
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_route_checkpoint_list(st, NULL, &cps, NULL, &n, &err), FERRY_OK);
    ferry_checkpoints_free(cps, n);
    return n;
}

#define ORDERS_ROUTE "orders -> sqlite:orders"

/* A whole successful run: the scripted log and what it must fold into. */
static int64_t script_run(struct fx *f, int64_t *last)
{
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    ev(f->st, r, 0, NULL, "run.requested", "{\"pipeline\":\"p\",\"version\":\"v1\"}");
    ev(f->st, r, a, NULL, "run.started", "{\"pid\":1}");
    ev(f->st, r, a, "orders", "resource.started",
       "{\"mode\":\"incremental\",\"write\":\"upsert\",\"shards\":1,\"route\":\"" ORDERS_ROUTE
       "\"}");
    ev(f->st, r, a, "users", "resource.started",
       "{\"mode\":\"full\",\"write\":\"append\",\"rows_estimate\":12,"
       "\"route\":\"users -> sqlite:users\"}");
    ev(f->st, r, a, "orders", "batch.buffered", "{\"seq\":1,\"rows\":100,\"bytes\":1000}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"seq\":1,\"rows\":100,\"bytes\":1000,\"shard\":0,\"position\":{\"key\":[100]},"
       "\"durable\":"
       "true}");
    ev(f->st, r, a, "orders", "batch.integrity_verified", "{\"seq\":1,\"crc\":1}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"seq\":2,\"rows\":50,\"bytes\":500,\"shard\":0,\"position\":{\"key\":[150]},\"durable\":"
       "true}");
    ev(f->st, r, a, "orders", "batch.integrity_verified", "{\"seq\":2,\"crc\":2}");
    ev(f->st, r, a, "users", "batch.written",
       "{\"seq\":3,\"rows\":10,\"bytes\":99,\"shard\":0,\"position\":{\"id\":10},\"durable\":"
       "true}");
    ev(f->st, r, a, "users", "batch.chunk_divergence", "{\"seq\":3,\"expected\":1,\"got\":2}");
    ev(f->st, r, a, NULL, "run.heartbeat", "{\"rss_bytes\":1}");
    ev(f->st, r, a, "orders", "resource.completed",
       "{\"rows\":150,\"ms\":9,\"wait_source_ms\":1,\"wait_sink_ms\":7,\"bound\":\"sink\"}");
    ev(f->st, r, a, "users", "resource.failed", "{\"code\":\"integrity\",\"message\":\"bad\"}");
    *last = ev(f->st, r, a, NULL, "run.completed", "{\"rows\":160,\"bytes\":1599,\"batches\":3}");
    return r;
}

static void check_script_run(struct fx *f, int64_t r)
{
    char buf[256];
    struct ferry_run_info ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_COMPLETED);
    assert_int_equal(ri.rows, 160);
    assert_int_equal(ri.bytes, 1599);
    assert_int_equal(ri.batches, 3);
    assert_int_equal(ri.verified, 2);
    assert_int_equal(ri.diverged, 1);
    assert_true(ri.ended_us > 0);
    assert_true(ri.heartbeat_us > 0);

    struct ferry_resource_state *rs = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_resource_list(f->st, r, &rs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(rs[0].resource, "orders");
    assert_string_equal(rs[0].state, "completed");
    assert_string_equal(rs[0].mode, "incremental");
    assert_string_equal(rs[0].write, "upsert");
    assert_string_equal(rs[0].route, ORDERS_ROUTE);
    assert_int_equal(rs[0].rows, 150);
    assert_int_equal(rs[0].bytes, 1500);
    assert_int_equal(rs[0].batches, 2);
    assert_int_equal(rs[0].verified, 2);
    assert_string_equal(rs[0].bound, "sink");
    assert_int_equal(rs[0].rows_estimate, 0); /* none in its resource.started */
    assert_string_equal(rs[1].resource, "users");
    assert_int_equal(rs[1].rows_estimate, 12);
    assert_string_equal(rs[1].bound, ""); /* failed: no verdict */
    assert_string_equal(rs[1].state, "failed");
    assert_string_equal(rs[1].error, "bad");
    assert_int_equal(rs[1].rows, 10);
    assert_int_equal(rs[1].diverged, 1);
    ferry_free(rs);

    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "{\"key\":[150]}");
    assert_string_equal(run_cp(f->st, r, "users", 0, buf, sizeof buf), "{\"id\":10}");
    int64_t by = 0;
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, &by),
                        "{\"key\":[150]}");
    assert_int_equal(by, r);
    /* full mode never becomes a route checkpoint */
    assert_string_equal(route_cp(f->st, "p", "users -> sqlite:users", buf, sizeof buf, NULL), "");
    assert_int_equal(route_count(f->st), 1);
}

static void test_scripted_fold(void **state)
{
    struct fx *f = *state;
    int64_t last = 0;
    int64_t r = script_run(f, &last);
    fold(f);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), last);
    int64_t mark = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &mark, &err), FERRY_OK);
    assert_int_equal(mark, last);
    check_script_run(f, r);

    /* folding again, and redelivering the whole log, change nothing */
    fold(f);
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, 0, 0, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(ferry__tracker_fold_events(f->tr, evs, n, &err), FERRY_OK);
    assert_int_equal(ferry__tracker_fold_events(f->tr, evs, n, &err), FERRY_OK);
    ferry_events_free(evs, n);
    check_script_run(f, r);
}

static void test_at_commit_pending(void **state)
{
    struct fx *f = *state;
    char buf[256];
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    ev(f->st, r, a, "orders", "resource.started",
       "{\"mode\":\"incremental\",\"route\":\"" ORDERS_ROUTE "\"}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"rows\":1,\"bytes\":1,\"shard\":0,\"position\":{\"key\":[1]},\"durable\":false}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"rows\":1,\"bytes\":1,\"shard\":0,\"position\":{\"key\":[2]}}");
    fold(f);
    /* counted, but not durable yet */
    assert_int_equal(get_run(f->st, r).rows, 2);
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "");
    ev(f->st, r, a, NULL, "sink.committed", "{}");
    fold(f);
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "{\"key\":[2]}");
    /* accepted after the commit, then the run fails: never promoted */
    ev(f->st, r, a, "orders", "batch.written",
       "{\"rows\":1,\"bytes\":1,\"shard\":0,\"position\":{\"key\":[3]},\"durable\":false}");
    ev(f->st, r, a, NULL, "run.failed", "{\"code\":\"sink\",\"message\":\"commit failed\"}");
    fold(f);
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "{\"key\":[2]}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "");
    struct ferry_run_info ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_FAILED);
    assert_string_equal(ri.error, "commit failed");
    /* the batch after the commit was rolled back with the run: taken back from the counters */
    assert_int_equal(ri.rows, 2);
    assert_int_equal(ri.batches, 2);
}

/* An attempt that died with at_commit batches counted: the next attempt takes them back
 * (its transaction was rolled back), or keeps them when the destination shows that it
 * committed (runner/plan.c decides which); either way they are settled once. */
static void test_uncommitted_of_dead_attempt(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    for (int keep = 0; keep <= 1; keep++) {
        int a = 0;
        int64_t r = start_run(f->st, "p", &a);
        ev(f->st, r, a, "orders", "resource.started", "{\"mode\":\"full\"}");
        ev(f->st, r, a, "orders", "batch.written",
           "{\"rows\":5,\"bytes\":50,\"shard\":0,\"position\":null,\"durable\":false}");
        ev(f->st, r, a, "orders", "batch.written",
           "{\"rows\":7,\"bytes\":70,\"shard\":1,\"position\":null,\"durable\":false}");
        fold(f);
        assert_int_equal(get_run(f->st, r).rows, 12); /* live progress */
        /* the process dies; a new attempt begins */
        int a2 = 0;
        assert_int_equal(ferry_store_run_begin_attempt(f->st, r, 2, &a2, &err), FERRY_OK);
        assert_int_equal(ferry_store_uncommitted_settle(f->st, r, a2, true, !keep, &err), FERRY_OK);
        struct ferry_run_info ri = get_run(f->st, r);
        assert_int_equal(ri.rows, keep ? 12 : 0);
        assert_int_equal(ri.bytes, keep ? 120 : 0);
        assert_int_equal(ri.batches, keep ? 2 : 0);
        struct ferry_resource_state *rs = NULL;
        int n = 0;
        assert_int_equal(ferry_store_resource_list(f->st, r, &rs, &n, &err), FERRY_OK);
        assert_int_equal(n, 1);
        assert_int_equal(rs[0].rows, keep ? 12 : 0);
        assert_int_equal(rs[0].batches, keep ? 2 : 0);
        ferry_free(rs);
        /* settled once: the new attempt's own batch and commit leave the old ones alone */
        ev(f->st, r, a2, "orders", "batch.written",
           "{\"rows\":3,\"bytes\":30,\"shard\":0,\"position\":null,\"durable\":false}");
        ev(f->st, r, a2, NULL, "sink.committed", "{}");
        ev(f->st, r, a2, NULL, "run.completed", "{}");
        fold(f);
        assert_int_equal(ferry_store_uncommitted_settle(f->st, r, a2 + 1, true, true, &err),
                         FERRY_OK);
        ri = get_run(f->st, r);
        assert_int_equal(ri.rows, keep ? 15 : 3);
        assert_int_equal(ri.batches, keep ? 3 : 1);
    }
}

/* A worker the reaper declared lost: its at_commit counts are taken back although the run
 * is already failed in the store when run.failed is folded. */
static void test_uncommitted_of_lost_worker(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    ev(f->st, r, a, "orders", "resource.started", "{\"mode\":\"full\"}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"rows\":5,\"bytes\":50,\"shard\":0,\"position\":null,\"durable\":false}");
    ev(f->st, r, a, "orders", "batch.written",
       "{\"rows\":4,\"bytes\":40,\"shard\":0,\"position\":null,\"durable\":true}");
    fold(f);
    assert_int_equal(get_run(f->st, r).rows, 9);
    int fenced = 0;
    assert_int_equal(ferry_store_run_reap(f->st, r, a, 0, "worker lost", &fenced, &err), FERRY_OK);
    ev(f->st, r, fenced, NULL, "worker.lost", "{\"lost_attempt\":1,\"reason\":\"test\"}");
    ev(f->st, r, fenced, NULL, "run.failed", "{\"code\":\"worker_lost\",\"message\":\"x\"}");
    fold(f);
    struct ferry_run_info ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_FAILED);
    assert_int_equal(ri.rows, 4); /* the durable batch stays */
    assert_int_equal(ri.bytes, 40);
    assert_int_equal(ri.batches, 1);
    struct ferry_resource_state *rs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_resource_list(f->st, r, &rs, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rs[0].rows, 4);
    ferry_free(rs);
}

/* One incremental run per end event: only a committed end moves the route. */
static int64_t route_run(struct fx *f, int w, const char *end_type, const char *end_payload)
{
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    char pos[160];
    ev(f->st, r, a, "orders", "resource.started",
       "{\"mode\":\"cdc\",\"route\":\"" ORDERS_ROUTE "\"}");
    snprintf(pos, sizeof pos,
             "{\"rows\":1,\"bytes\":1,\"shard\":0,\"position\":{\"key\":[%d]},\"durable\":true}",
             w);
    ev(f->st, r, a, "orders", "batch.written", pos);
    ev(f->st, r, a, NULL, end_type, end_payload);
    fold(f);
    return r;
}

static void test_route_checkpoint_rules(void **state)
{
    struct fx *f = *state;
    char buf[256];
    int64_t by = 0;
    int64_t r1 = route_run(f, 1, "run.completed", "{}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, &by), "{\"key\":[1]}");
    assert_int_equal(by, r1);
    int64_t r2 = route_run(f, 2, "run.failed", "{\"message\":\"x\"}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "{\"key\":[1]}");
    assert_int_equal(get_run(f->st, r2).state, FERRY_RUN_FAILED);
    int64_t r3 = route_run(f, 3, "run.paused", "{\"committed\":false}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "{\"key\":[1]}");
    assert_int_equal(get_run(f->st, r3).state, FERRY_RUN_PAUSED);
    int64_t r4 = route_run(f, 4, "run.paused", "{\"committed\":true}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, &by), "{\"key\":[4]}");
    assert_int_equal(by, r4);
    assert_int_equal(get_run(f->st, r4).state, FERRY_RUN_PAUSED);
    int64_t r5 = route_run(f, 5, "run.canceled", "{}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "{\"key\":[4]}");
    assert_int_equal(get_run(f->st, r5).state, FERRY_RUN_CANCELED);
    /* a late run.completed after a final state changes nothing */
    ev(f->st, r2, 1, NULL, "run.completed", "{}");
    fold(f);
    assert_int_equal(get_run(f->st, r2).state, FERRY_RUN_FAILED);
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "{\"key\":[4]}");
    /* the route comes from resource.started, the resource name when absent */
    int a = 0;
    int64_t r6 = start_run(f->st, "p", &a);
    ev(f->st, r6, a, "events", "resource.started", "{\"mode\":\"incremental\"}");
    ev(f->st, r6, a, "events", "batch.written",
       "{\"rows\":1,\"bytes\":1,\"position\":{\"key\":[6]},\"durable\":true}");
    ev(f->st, r6, a, NULL, "run.completed", "{}");
    fold(f);
    assert_string_equal(route_cp(f->st, "p", "events", buf, sizeof buf, NULL), "{\"key\":[6]}");
}

/* A run that read nothing new ends its shard with a position that only says "done": that is
 * its run checkpoint, but the route checkpoint stays where the last progress left it. */
static void test_keyless_position_keeps_route(void **state)
{
    struct fx *f = *state;
    char buf[256];
    int64_t by = 0;
    int64_t r1 = route_run(f, 7, "run.completed", "{}");
    int a = 0;
    int64_t r2 = start_run(f->st, "p", &a);
    ev(f->st, r2, a, "orders", "resource.started",
       "{\"mode\":\"incremental\",\"route\":\"" ORDERS_ROUTE "\"}");
    ev(f->st, r2, a, "orders", "batch.written",
       "{\"rows\":0,\"bytes\":0,\"shard\":0,\"position\":{\"shard\":0,\"done\":true},"
       "\"durable\":true}");
    ev(f->st, r2, a, NULL, "run.completed", "{}");
    fold(f);
    assert_int_equal(get_run(f->st, r2).state, FERRY_RUN_COMPLETED);
    assert_string_equal(run_cp(f->st, r2, "orders", 0, buf, sizeof buf),
                        "{\"shard\":0,\"done\":true}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, &by), "{\"key\":[7]}");
    assert_int_equal(by, r1);
}

static void test_stale_attempt_ignored(void **state)
{
    struct fx *f = *state;
    char buf[256];
    struct ferry_error err = {0};
    int a1 = 0, a2 = 0;
    int64_t r = start_run(f->st, "p", &a1);
    ev(f->st, r, a1, "orders", "resource.started",
       "{\"mode\":\"incremental\",\"route\":\"" ORDERS_ROUTE "\"}");
    ev(f->st, r, a1, "orders", "batch.written",
       "{\"rows\":10,\"bytes\":10,\"shard\":0,\"position\":{\"key\":[10]},\"durable\":true}");
    fold(f);
    /* reaped; a new attempt takes over while the zombie keeps publishing */
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r, 2, &a2, &err), FERRY_OK);
    ev(f->st, r, a1, "orders", "batch.written",
       "{\"rows\":999,\"bytes\":999,\"shard\":0,\"position\":{\"key\":[999]},\"durable\":true}");
    ev(f->st, r, a1, "orders", "batch.written",
       "{\"rows\":1,\"bytes\":1,\"shard\":0,\"position\":{\"key\":[998]},\"durable\":false}");
    ev(f->st, r, a1, NULL, "sink.committed", "{}");
    ev(f->st, r, a1, "orders", "batch.integrity_verified", "{}");
    ev(f->st, r, a1, NULL, "run.completed", "{}");
    fold(f);
    struct ferry_run_info ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_RUNNING);
    assert_int_equal(ri.rows, 10);
    assert_int_equal(ri.verified, 0);
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "{\"key\":[10]}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL), "");

    ev(f->st, r, a2, "orders", "batch.written",
       "{\"rows\":5,\"bytes\":5,\"shard\":0,\"position\":{\"key\":[15]},\"durable\":true}");
    ev(f->st, r, a1, NULL, "run.failed", "{\"message\":\"zombie\"}");
    ev(f->st, r, a2, NULL, "run.completed", "{}");
    fold(f);
    ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_COMPLETED);
    assert_int_equal(ri.rows, 15);
    assert_string_equal(ri.error, "");
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "{\"key\":[15]}");
    assert_string_equal(route_cp(f->st, "p", ORDERS_ROUTE, buf, sizeof buf, NULL),
                        "{\"key\":[15]}");
}

/* Events the tracker cannot use are skipped, never retried forever. */
static void test_poison_skipped(void **state)
{
    struct fx *f = *state;
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    ev(f->st, 4242, 1, "orders", "batch.written", "{\"rows\":1}");
    ev(f->st, 0, 0, NULL, "worker.lost", "{\"lease_ms\":1}");
    ev(f->st, r, a, NULL, "batch.written",
       "{\"rows\":7,\"position\":{\"key\":[1]},\"durable\":true}");
    ev(f->st, r, a, "orders", "no.such.type", "{}");
    int64_t last = ev(f->st, r, a, "orders", "batch.written", "{\"rows\":1,\"bytes\":2}");
    fold(f);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), last);
    assert_int_equal(get_run(f->st, r).rows, 8);
    assert_int_equal(get_run(f->st, r).batches, 2);
}

/* resource.rows_skipped: a shard's later report replaces its earlier one (a resumed shard
 * counts from its start), shards add up, samples are ordered by shard and bounded. */
static void test_rows_skipped(void **state)
{
    struct fx *f = *state;
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    ev(f->st, r, a, "t", "resource.rows_skipped",
       "{\"shard\":1,\"count\":2,\"samples\":[{\"at\":\"b.csv:3:1\",\"reason\":\"x\"},"
       "{\"at\":\"b.csv:9:2\",\"reason\":\"y\"}]}");
    ev(f->st, r, a, "t", "resource.rows_skipped",
       "{\"shard\":0,\"count\":1,\"samples\":[{\"at\":\"a.csv:2:5\",\"reason\":\"z\"}]}");
    /* shard 1 again (a resumed attempt counted the whole file): replaces, never adds */
    ev(f->st, r, a, "t", "resource.rows_skipped",
       "{\"shard\":1,\"count\":3,\"samples\":[{\"at\":\"b.csv:3:1\",\"reason\":\"x\"},"
       "{\"at\":\"b.csv:9:2\",\"reason\":\"y\"},{\"at\":\"b.csv:12:1\",\"reason\":\"w\"}]}");
    char big[1200];
    memset(big, 'r', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char payload[1400];
    snprintf(payload, sizeof payload,
             "{\"shard\":2,\"count\":40,\"samples\":[{\"at\":\"c.csv:1:1\",\"reason\":\"%s\"}]}",
             big);
    ev(f->st, r, a, "t", "resource.rows_skipped", payload);
    fold(f);
    struct ferry_resource_state *rs = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_resource_list(f->st, r, &rs, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rs[0].skipped, 44);
    ferry_free(rs);
    char *text = NULL;
    assert_int_equal(ferry_store_resource_skips_get(f->st, r, "t", &text, &err), FERRY_OK);
    json_t *j = json_loads(text, 0, NULL);
    ferry_free(text);
    json_t *samples = json_object_get(j, "samples");
    assert_int_equal(json_array_size(samples), 5);
    const char *want[] = {"a.csv:2:5", "b.csv:3:1", "b.csv:9:2", "b.csv:12:1", "c.csv:1:1"};
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(samples, i), "at")),
                            want[i]);
    /* a sample's text is bounded */
    assert_true(strlen(json_string_value(json_object_get(json_array_get(samples, 4), "reason"))) <= 300);
    json_decref(j);
    /* redelivered: nothing changes */
    fold(f);
    assert_int_equal(ferry_store_resource_list(f->st, r, &rs, &n, &err), FERRY_OK);
    assert_int_equal(rs[0].skipped, 44);
    ferry_free(rs);
}

/* batch.written's "converted" (on_unrepresentable): summed per column and kind across
 * batches, a fenced attempt's batches never count, a redelivery changes nothing. */
static void test_converted(void **state)
{
    struct fx *f = *state;
    int a1 = 0, a2 = 0;
    struct ferry_error err = {0};
    int64_t r = start_run(f->st, "p", &a1);
    ev(f->st, r, a1, "t", "batch.written",
       "{\"rows\":4,\"bytes\":4,\"shard\":0,\"converted\":{\"d\":{\"null\":2,\"clamp\":0}}}");
    ev(f->st, r, a1, "t", "batch.written", "{\"rows\":4,\"bytes\":4,\"shard\":0}");
    ev(f->st, r, a1, "t", "batch.written",
       "{\"rows\":4,\"bytes\":4,\"shard\":0,\"converted\":{\"d\":{\"null\":1,\"clamp\":3},"
       "\"f\":{\"null\":0,\"clamp\":1}}}");
    fold(f);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r, 2, &a2, &err), FERRY_OK);
    ev(f->st, r, a1, "t", "batch.written",
       "{\"rows\":4,\"bytes\":4,\"shard\":0,\"converted\":{\"d\":{\"null\":50,\"clamp\":0}}}");
    ev(f->st, r, a2, "t", "batch.written",
       "{\"rows\":4,\"bytes\":4,\"shard\":0,\"converted\":{\"f\":{\"null\":0,\"clamp\":2}}}");
    fold(f);
    fold(f);
    char *text = NULL;
    assert_int_equal(ferry_store_resource_converted_get(f->st, r, "t", &text, &err), FERRY_OK);
    assert_non_null(text);
    json_t *j = json_loads(text, 0, NULL);
    ferry_free(text);
    json_t *want = json_loads("{\"d\":{\"null\":3,\"clamp\":3},\"f\":{\"null\":0,\"clamp\":3}}",
                              0, NULL);
    assert_true(json_equal(j, want));
    json_decref(j);
    json_decref(want);
    /* a resource that converted nothing has none */
    assert_int_equal(ferry_store_resource_converted_get(f->st, r, "other", &text, &err), FERRY_OK);
    assert_null(text);
}

/* An at_commit attempt's converted values go with its rows: taken back when its transaction
 * is rolled back (run.failed here; a new attempt's settle alike), kept when it committed. */
static void test_converted_uncommitted(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    for (int commit = 0; commit <= 1; commit++) {
        int a = 0;
        int64_t r = start_run(f->st, "p", &a);
        ev(f->st, r, a, "t", "batch.written",
           "{\"rows\":4,\"bytes\":4,\"shard\":0,\"durable\":true,"
           "\"converted\":{\"d\":{\"null\":2,\"clamp\":0}}}");
        ev(f->st, r, a, "t", "batch.written",
           "{\"rows\":4,\"bytes\":4,\"shard\":0,\"durable\":false,"
           "\"converted\":{\"d\":{\"null\":1,\"clamp\":3},\"f\":{\"null\":0,\"clamp\":1}}}");
        ev(f->st, r, a, "t", "batch.written",
           "{\"rows\":4,\"bytes\":4,\"shard\":0,\"durable\":false,"
           "\"converted\":{\"f\":{\"null\":0,\"clamp\":4}}}");
        if (commit) ev(f->st, r, a, NULL, "sink.committed", "{}");
        ev(f->st, r, a, NULL, commit ? "run.completed" : "run.failed",
           commit ? "{}" : "{\"code\":\"x\",\"message\":\"x\"}");
        fold(f);
        char *text = NULL;
        assert_int_equal(ferry_store_resource_converted_get(f->st, r, "t", &text, &err), FERRY_OK);
        assert_non_null(text);
        json_t *j = json_loads(text, 0, NULL);
        ferry_free(text);
        json_t *want = json_loads(commit ? "{\"d\":{\"null\":3,\"clamp\":3},"
                                           "\"f\":{\"null\":0,\"clamp\":5}}"
                                         : "{\"d\":{\"null\":2,\"clamp\":0}}",
                                  0, NULL);
        assert_true(json_equal(j, want));
        json_decref(j);
        json_decref(want);
        assert_int_equal(get_run(f->st, r).rows, commit ? 12 : 4);
    }
}

/* A tracker restarted mid-log resumes from its mark and counts each event once. */
static void test_restart_resumes_from_mark(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    for (int i = 0; i < 10; i++)
        ev(f->st, r, a, "orders", "batch.written", "{\"rows\":1,\"bytes\":10}");
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, 0, 0, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 10);
    assert_int_equal(ferry__tracker_fold_events(f->tr, evs, 4, &err), FERRY_OK);
    assert_int_equal(get_run(f->st, r).rows, 4);

    ferry_tracker_close(f->tr);
    f->tr = NULL;
    assert_int_equal(ferry_tracker_open(f->sd.url, NULL, &f->tr, &err), FERRY_OK);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), evs[3].seq);
    /* the first events delivered again, then the rest */
    assert_int_equal(ferry__tracker_fold_events(f->tr, evs, 6, &err), FERRY_OK);
    assert_int_equal(get_run(f->st, r).rows, 6);
    fold(f);
    assert_int_equal(get_run(f->st, r).rows, 10);
    assert_int_equal(get_run(f->st, r).bytes, 100);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), evs[9].seq);
    ferry_events_free(evs, n);
}

static void set_failpoints(const char *spec)
{
    if (spec)
        setenv("FERRY_FAILPOINTS", spec, 1);
    else
        unsetenv("FERRY_FAILPOINTS");
    struct ferry_error err = {0};
    assert_int_equal(ferry_failpoints_init(&err), FERRY_OK);
}

static void assert_nothing_folded(struct fx *f, int64_t r)
{
    char buf[256];
    int64_t mark = -1;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &mark, &err), FERRY_OK);
    assert_int_equal(mark, 0);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), 0);
    struct ferry_run_info ri = get_run(f->st, r);
    assert_int_equal(ri.state, FERRY_RUN_RUNNING);
    assert_int_equal(ri.rows, 0);
    assert_string_equal(run_cp(f->st, r, "orders", 0, buf, sizeof buf), "");
    assert_int_equal(route_count(f->st), 0);
}

/* A group whose commit fails leaves nothing behind, and folds exactly once later. */
static void test_failed_commit_is_atomic(void **state)
{
    struct fx *f = *state;
    int64_t last = 0;
    int64_t r = script_run(f, &last);
    struct ferry_error err = {0};
    set_failpoints("before_checkpoint_save=error");
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_EFAILPOINT);
    assert_nothing_folded(f, r);
    set_failpoints("before_store_commit=enospc");
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_ENOSPC);
    assert_nothing_folded(f, r);
    set_failpoints(NULL);
    fold(f);
    check_script_run(f, r);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), last);
}

/* The folding thread retries after an error and reports the first one at stop. */
static void test_thread_retries_after_error(void **state)
{
    struct fx *f = *state;
    int64_t last = 0;
    int64_t r = script_run(f, &last);
    struct ferry_error err = {0};
    set_failpoints("before_store_commit=error@1");
    assert_int_equal(ferry_tracker_start(f->tr, &err), FERRY_OK);
    assert_int_equal(ferry_tracker_wait(f->tr, last, 10000, &err), FERRY_OK);
    assert_int_equal(ferry_tracker_stop(f->tr, &err), FERRY_EFAILPOINT);
    assert_non_null(strstr(err.message, "before_store_commit"));
    set_failpoints(NULL);
    check_script_run(f, r);
}

/* The child of test_crash_while_saving: folds with failpoints armed, and crashes. */
static int fold_child(const char *path)
{
    struct ferry_error err = {0};
    struct ferry_tracker *tr = NULL;
    if (ferry_failpoints_init(&err) != FERRY_OK ||
        ferry_tracker_open(path, NULL, &tr, &err) != FERRY_OK) {
        fprintf(stderr, "fold child: %s\n", err.message);
        return 2;
    }
    ferry_tracker_fold_available(tr, &err);
    ferry_tracker_close(tr);
    return 0;
}

static int run_child(const char *path, const char *failpoints)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a fresh process image: SQLite connections must not cross a fork */
        setenv("FERRY_FAILPOINTS", failpoints, 1);
        execl("/proc/self/exe", "test_tracker", "--fold", path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A process killed before or after its fold commits: the state is the previous or the new
 * one, and a restarted tracker folds every event exactly once. */
static void test_crash_while_saving(void **state)
{
    struct fx *f = *state;
    int64_t last = 0;
    int64_t r = script_run(f, &last);
    assert_int_equal(run_child(f->sd.url, "before_store_commit=crash"), 137);
    ferry_tracker_close(f->tr);
    struct ferry_error err = {0};
    assert_int_equal(ferry_tracker_open(f->sd.url, NULL, &f->tr, &err), FERRY_OK);
    assert_nothing_folded(f, r);

    assert_int_equal(run_child(f->sd.url, "after_checkpoint_save=crash"), 137);
    ferry_tracker_close(f->tr);
    assert_int_equal(ferry_tracker_open(f->sd.url, NULL, &f->tr, &err), FERRY_OK);
    assert_int_equal(ferry_tracker_folded_seq(f->tr), last);
    check_script_run(f, r);
    fold(f);
    check_script_run(f, r);
}

/* ---- chaos: random logs, each event delivered 1-3 times, rewinds, restarts ---- */

struct expect {
    int64_t rows, bytes, batches, verified, diverged;
    int last_pos[2]; /* per shard, durable positions */
};

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

static void chaos_round(struct fx *f, unsigned seed)
{
    struct ferry_error err = {0};
    int a = 0;
    int64_t r[2];
    struct expect ex[2];
    memset(ex, 0, sizeof ex);
    for (int k = 0; k < 2; k++) {
        r[k] = start_run(f->st, "chaos", &a);
        ev(f->st, r[k], a, "t", "resource.started", "{\"mode\":\"full\"}");
        ex[k].last_pos[0] = ex[k].last_pos[1] = -1;
    }
    int64_t first = 0;
    for (int i = 0; i < 600; i++) {
        int k = (int)(next_rand(&seed) % 2);
        unsigned kind = next_rand(&seed) % 4;
        char p[200];
        int64_t seq;
        if (kind <= 1) {
            int rows = (int)(next_rand(&seed) % 1000) + 1, shard = (int)(next_rand(&seed) % 2);
            snprintf(
                p, sizeof p,
                "{\"rows\":%d,\"bytes\":%d,\"shard\":%d,\"position\":{\"n\":%d},\"durable\":true}",
                rows, rows * 3, shard, i);
            seq = ev(f->st, r[k], 1, "t", "batch.written", p);
            ex[k].rows += rows;
            ex[k].bytes += rows * 3;
            ex[k].batches++;
            ex[k].last_pos[shard] = i;
        } else if (kind == 2) {
            seq = ev(f->st, r[k], 1, "t", "batch.integrity_verified", "{}");
            ex[k].verified++;
        } else {
            seq = ev(f->st, r[k], 1, "t", "batch.chunk_divergence", "{}");
            ex[k].diverged++;
        }
        if (first == 0) first = seq;
    }
    struct ferry_event *log = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, 0, 0, 100000, &log, &n, &err), FERRY_OK);

    /* A delivery stream: each event 1-3 times, sometimes a rewind to an earlier point. */
    int cap = n * 12, m = 0;
    struct ferry_event *d = calloc((size_t)cap, sizeof *d);
    for (int i = 0; i < n; i++) {
        int times = 1 + (int)(next_rand(&seed) % 3);
        for (int t = 0; t < times && m < cap; t++)
            d[m++] = log[i];
        if (next_rand(&seed) % 10 == 0) {
            int back = (int)(next_rand(&seed) % 20);
            for (int j = i - back < 0 ? 0 : i - back; j <= i && m < cap; j++)
                d[m++] = log[j];
        }
    }
    for (int i = 0; i < m;) {
        int chunk = 1 + (int)(next_rand(&seed) % 300);
        if (chunk > m - i) chunk = m - i;
        assert_int_equal(ferry__tracker_fold_events(f->tr, d + i, chunk, &err), FERRY_OK);
        i += chunk;
        if (next_rand(&seed) % 8 == 0) { /* restart */
            ferry_tracker_close(f->tr);
            f->tr = NULL;
            assert_int_equal(ferry_tracker_open(f->sd.url, NULL, &f->tr, &err), FERRY_OK);
        }
    }
    free(d);
    ferry_events_free(log, n);

    for (int k = 0; k < 2; k++) {
        struct ferry_run_info ri = get_run(f->st, r[k]);
        assert_int_equal(ri.rows, ex[k].rows);
        assert_int_equal(ri.bytes, ex[k].bytes);
        assert_int_equal(ri.batches, ex[k].batches);
        assert_int_equal(ri.verified, ex[k].verified);
        assert_int_equal(ri.diverged, ex[k].diverged);
        struct ferry_resource_state *rs = NULL;
        int nr = 0;
        assert_int_equal(ferry_store_resource_list(f->st, r[k], &rs, &nr, &err), FERRY_OK);
        assert_int_equal(nr, 1);
        assert_int_equal(rs[0].rows, ex[k].rows);
        assert_int_equal(rs[0].verified, ex[k].verified);
        ferry_free(rs);
        for (int s = 0; s < 2; s++) {
            char want[64], buf[256];
            if (ex[k].last_pos[s] < 0)
                snprintf(want, sizeof want, "%s", "");
            else
                snprintf(want, sizeof want, "{\"n\":%d}", ex[k].last_pos[s]);
            assert_string_equal(run_cp(f->st, r[k], "t", s, buf, sizeof buf), want);
        }
    }
}

static void test_chaos_redelivery(void **state)
{
    struct fx *f = *state;
    chaos_round(f, 1u);
    chaos_round(f, 0xfeedu);
    chaos_round(f, 20261130u);
}

/* ---- the folding thread over the in-process bus ---- */

static void test_thread_and_wait(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    struct ferry_bus *bus = NULL;
    assert_int_equal(ferry_bus_inproc_open(f->sd.url, &bus, &err), FERRY_OK);
    ferry_tracker_close(f->tr);
    assert_int_equal(ferry_tracker_open(f->sd.url, bus, &f->tr, &err), FERRY_OK);
    assert_int_equal(ferry_tracker_start(f->tr, &err), FERRY_OK);

    int a = 0;
    int64_t r = start_run(f->st, "p", &a);
    struct ferry_event e = {.run_id = r, .attempt = a};
    snprintf(e.type, sizeof e.type, "batch.written");
    snprintf(e.resource, sizeof e.resource, "orders");
    for (int i = 0; i < 50; i++) {
        e.payload = ferry_strdup("{\"rows\":2,\"bytes\":4}");
        assert_int_equal(ferry_bus_publish(bus, &e, &err), FERRY_OK);
        ferry_event_clear(&e);
    }
    assert_int_equal(ferry_tracker_wait(f->tr, e.seq, 10000, &err), FERRY_OK);
    assert_true(ferry_tracker_folded_seq(f->tr) >= e.seq);
    assert_int_equal(get_run(f->st, r).rows, 100);

    /* an event appended by another handle (another process's bus) is folded by polling */
    int64_t other = ev(f->st, r, a, "orders", "batch.written", "{\"rows\":1}");
    assert_int_equal(ferry_tracker_wait(f->tr, other, 10000, &err), FERRY_OK);
    assert_int_equal(get_run(f->st, r).rows, 101);

    int64_t t0 = ferry_now_mono_us();
    assert_int_equal(ferry_tracker_wait(f->tr, other + 1000, 300, &err), FERRY_ETIMEOUT);
    assert_true(ferry_now_mono_us() - t0 >= 290000);
    assert_non_null(strstr(err.message, "not folded"));

    assert_int_equal(ferry_tracker_stop(f->tr, &err), FERRY_OK);
    /* published after stop: folded by the next fold, not by the stopped thread */
    int64_t late = ferry_bus_emit(bus, r, a, "orders", "batch.written", "{\"rows\":1}", &err);
    assert_int_equal(late, FERRY_OK);
    usleep(300 * 1000);
    assert_int_equal(get_run(f->st, r).rows, 101);
    assert_int_equal(ferry_tracker_wait(f->tr, other + 1, 5000, &err), FERRY_OK); /* folds inline */
    assert_int_equal(get_run(f->st, r).rows, 102);
    ferry_tracker_close(f->tr);
    f->tr = NULL;
    ferry_bus_close(bus);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--fold") == 0) return fold_child(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scripted_fold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_at_commit_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_of_dead_attempt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_of_lost_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_checkpoint_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keyless_position_keeps_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_attempt_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poison_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_converted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_converted_uncommitted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_resumes_from_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_commit_is_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_retries_after_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_while_saving, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chaos_redelivery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_and_wait, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
