/* tests/unit/test_pull.c - the pieces of pull workers and distributed runs that need no
 * connector: which resources may be distributed, the task token in batch.written payloads
 * (tagged by the forwarding bus, read back from the state's event log), task summaries,
 * lease owners, and the tracker's token fencing on a real state file: a batch of a task
 * whose lease moved to another worker neither counts nor moves the shard's checkpoint. */
#include "state_fixture.h"

#include <jansson.h>
#include "unit.h"
#include "bus/bus.h"
#include "control/tracker.h"
#include "ferry/core.h"
#include "runner/runner.h"
#include "store/store.h"

static void test_distributable(void **state)
{
    (void)state;
    struct ferry_error e;
    assert_int_equal(ferry__shard_distributable("t", "full", "append", true, false, &e), FERRY_OK);
    assert_int_equal(ferry__shard_distributable("t", "full", "upsert", true, true, &e), FERRY_OK);
    assert_int_equal(ferry__shard_distributable("t", "incremental", "append", true, false, &e),
                     FERRY_EPOLICY);
    assert_non_null(strstr(e.message, "resource t"));
    assert_int_equal(ferry__shard_distributable("t", "cdc", "merge", true, false, &e),
                     FERRY_EPOLICY);
    assert_int_equal(ferry__shard_distributable("t", "full", "replace", true, true, &e),
                     FERRY_EPOLICY);
    assert_int_equal(ferry__shard_distributable("orders", "full", "append", false, false, &e),
                     FERRY_EPOLICY);
    assert_non_null(strstr(e.message, "per_apply"));
    assert_non_null(strstr(e.message, "orders"));
}

static void test_tag_payload(void **state)
{
    (void)state;
    char *t = ferry__shard_tag_payload("{\"seq\":3,\"shard\":2}", 7);
    assert_non_null(t);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "token")), 7);
    assert_int_equal(json_integer_value(json_object_get(j, "seq")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "shard")), 2);
    json_decref(j);
    assert_int_equal(ferry__shard_payload_token(t), 7);
    ferry_free(t);
    t = ferry__shard_tag_payload(" { }", 12);
    assert_string_equal(t, "{\"token\":12}");
    ferry_free(t);
    t = ferry__shard_tag_payload(NULL, 1);
    assert_string_equal(t, "{\"token\":1}");
    ferry_free(t);
    assert_null(ferry__shard_tag_payload("[1,2]", 1));
    assert_int_equal(ferry__shard_payload_token("{\"seq\":1}"), 0);
    assert_int_equal(ferry__shard_payload_token("{\"token\":-4}"), 0);
    assert_int_equal(ferry__shard_payload_token("not json"), 0);
}

static void test_summary_and_owner(void **state)
{
    (void)state;
    struct ferry_shard_task v[3];
    memset(v, 0, sizeof v);
    snprintf(v[0].state, sizeof v[0].state, "done");
    snprintf(v[1].state, sizeof v[1].state, "leased");
    snprintf(v[2].state, sizeof v[2].state, "open");
    int done = -1, leased = -1;
    bool all = true;
    ferry__shard_tasks_summary(v, 3, &done, &leased, &all);
    assert_int_equal(done, 1);
    assert_int_equal(leased, 1);
    assert_false(all);
    snprintf(v[1].state, sizeof v[1].state, "done");
    snprintf(v[2].state, sizeof v[2].state, "done");
    ferry__shard_tasks_summary(v, 3, &done, &leased, &all);
    assert_true(all);
    ferry__shard_tasks_summary(v, 0, &done, &leased, &all);
    assert_false(all); /* no tasks yet is not "finished" */
    char owner[160];
    ferry__lease_owner("w1", owner, sizeof owner);
    assert_string_equal(owner, "w1");
    ferry__lease_owner(NULL, owner, sizeof owner);
    char pid[32];
    snprintf(pid, sizeof pid, ":%d", (int)getpid());
    assert_non_null(strstr(owner, pid));
}

/* ---- on a real state file ---- */

struct fx {
    struct state_dir sd;
    struct ferry_store *st;
    struct ferry_tracker *tr;
    struct ferry_bus *bus, *tag;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (state_store_open(&f->sd, &f->st) != 0) return -1;
    struct ferry_error err = {0};
    if (ferry_bus_open(NULL, f->sd.url, &f->bus, &err) != FERRY_OK ||
        ferry__shard_bus_open(f->bus, &f->tag, &err) != FERRY_OK ||
        ferry_tracker_open(f->sd.url, f->bus, &f->tr, &err) != FERRY_OK) {
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
    ferry_bus_close(f->tag);
    ferry_bus_close(f->bus);
    state_store_close(&f->sd, f->st);
    free(f);
    return 0;
}

/* A batch.written of shard `shard` through the tagging bus with `token`. */
static int64_t written(struct fx *f, int64_t run, int attempt, int shard, int64_t token, int key)
{
    char payload[256];
    snprintf(payload, sizeof payload,
             "{\"seq\":%d,\"rows\":10,\"bytes\":100,\"shard\":%d,\"durable\":true,\"crc\":0,"
             "\"position\":{\"shard\":%d,\"key\":[%d]},\"uri\":\"\"}",
             key, shard, shard, key);
    ferry__shard_bus_set_token(f->tag, token);
    struct ferry_error err = {0};
    if (ferry_bus_emit(f->tag, run, attempt, "items", FERRY_EV_BATCH_WRITTEN, payload, &err) !=
        FERRY_OK)
        fail_msg("emit: %s", err.message);
    return ferry__shard_bus_last_seq(f->tag);
}

static int checkpoint_key(struct fx *f, int64_t run, int shard)
{
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_checkpoints(f->st, run, "items", &cps, &n, &err), FERRY_OK);
    int key = -1;
    for (int i = 0; i < n; i++) {
        if (cps[i].shard != shard) continue;
        json_t *j = json_loads(cps[i].position, 0, NULL);
        key = (int)json_integer_value(json_array_get(json_object_get(j, "key"), 0));
        json_decref(j);
    }
    ferry_checkpoints_free(cps, n);
    return key;
}

static void test_token_fencing(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t run = 0;
    int attempt = 0;
    assert_int_equal(ferry_store_run_create(f->st, "p", "v1", "{}", &run, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, run, 1, &attempt, &err), FERRY_OK);
    assert_int_equal(ferry_store_shard_tasks_put(f->st, run, "items", 2, &err), FERRY_OK);
    struct ferry_shard_task a, b;
    bool found = false;
    /* A lease of 1 ms: expired at once, so a second claimer takes the same shard. */
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w1", 1, &a, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(a.shard, 0);
    assert_int_equal(a.token, 1);
    int64_t seq = written(f, run, attempt, 0, a.token, 100);
    assert_true(seq > 0);
    /* The event log holds the token the bus added. */
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, seq - 1, run, 10, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ferry__shard_payload_token(evs[0].payload), 1);
    ferry_events_free(evs, n);
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_OK);
    assert_int_equal(checkpoint_key(f, run, 0), 100);

    /* Shard 1 is open: it goes first; then the expired shard 0 is leased again. */
    usleep(5000);
    struct ferry_shard_task other;
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w2", 60000, &other, &found, &err),
                     FERRY_OK);
    assert_true(found);
    assert_int_equal(other.shard, 1);
    assert_int_equal(ferry_store_shard_claim(f->st, run, "w2", 60000, &b, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(b.shard, 0);
    assert_int_equal(b.token, 2);
    /* The first worker, not yet aware, writes on: fenced, counted nowhere. */
    written(f, run, attempt, 0, a.token, 200);
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_OK);
    assert_int_equal(checkpoint_key(f, run, 0), 100);
    struct ferry_run_info info;
    assert_int_equal(ferry_store_run_get(f->st, run, &info, &err), FERRY_OK);
    assert_int_equal(info.rows, 10);
    ferry_run_info_clear(&info);
    assert_int_equal(ferry_store_shard_renew(f->st, run, "items", 0, a.token, 1000, &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_shard_done(f->st, run, "items", 0, a.token, &err), FERRY_EFENCED);
    /* The new holder's batches move it. */
    written(f, run, attempt, 0, b.token, 150);
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_OK);
    assert_int_equal(checkpoint_key(f, run, 0), 150);
    assert_int_equal(ferry_store_run_get(f->st, run, &info, &err), FERRY_OK);
    assert_int_equal(info.rows, 20);
    ferry_run_info_clear(&info);
    assert_int_equal(ferry_store_shard_done(f->st, run, "items", 0, b.token, &err), FERRY_OK);
    assert_int_equal(ferry_store_shard_done(f->st, run, "items", 1, other.token, &err), FERRY_OK);
    struct ferry_shard_task *v = NULL;
    assert_int_equal(ferry_store_shard_list(f->st, run, NULL, &v, &n, &err), FERRY_OK);
    bool all = false;
    ferry__shard_tasks_summary(v, n, NULL, NULL, &all);
    assert_true(all);
    ferry_free(v);
    /* Untagged events (a run that is not distributed) keep the attempt rules. */
    written(f, run, attempt, 1, 0, 7);
    assert_int_equal(ferry_tracker_fold_available(f->tr, &err), FERRY_OK);
    assert_int_equal(checkpoint_key(f, run, 1), 7);
}

/* publish_n through the tagging bus: only batch.written carries the token, the caller's
 * payloads are given back untouched, the events stay one transaction (consecutive seqs) and
 * the last seq is the highest of them. */
static void test_tag_publish_n(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    char w[] = "{\"seq\":1,\"rows\":1,\"bytes\":1,\"shard\":0,\"durable\":true,\"position\":null}";
    char v[] = "{\"seq\":1,\"crc\":9}";
    struct ferry_event evs[2];
    assert_int_equal(ferry_bus_event_init(&evs[0], 3, 1, "items", FERRY_EV_BATCH_WRITTEN, w, &err),
                     FERRY_OK);
    assert_int_equal(ferry_bus_event_init(&evs[1], 3, 1, "items", FERRY_EV_BATCH_VERIFIED, v, &err),
                     FERRY_OK);
    ferry__shard_bus_set_token(f->tag, 5);
    assert_int_equal(ferry_bus_publish_n(f->tag, evs, 2, &err), FERRY_OK);
    assert_ptr_equal(evs[0].payload, w);
    assert_ptr_equal(evs[1].payload, v);
    assert_int_equal(evs[1].seq, evs[0].seq + 1);
    assert_int_equal(ferry__shard_bus_last_seq(f->tag), evs[1].seq);
    struct ferry_event *got = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, evs[0].seq - 1, 3, 10, &got, &n, &err),
                     FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ferry__shard_payload_token(got[0].payload), 5);
    assert_int_equal(ferry__shard_payload_token(got[1].payload), 0);
    assert_string_equal(got[1].payload, v);
    ferry_events_free(got, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distributable),
        cmocka_unit_test(test_tag_payload),
        cmocka_unit_test(test_summary_and_owner),
        cmocka_unit_test_setup_teardown(test_token_fencing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tag_publish_n, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
