/* tests/unit/test_promote.c - the checkpoint rules (src/checkpoint/promote.h): where a
 * written position goes, which run positions move a route, and the reconciliation of a
 * destination's checkpoint with the store's for a shard's resume and a plan's lower bound. */
#include "checkpoint/plan_cache.h"
#include "unit.h"

#include <string.h>
#include "checkpoint/promote.h"

static void test_written_scope(void **state)
{
    (void)state;
    assert_int_equal(ferry_checkpoint_written_scope(true), FERRY_CHECKPOINT_RUN);
    assert_int_equal(ferry_checkpoint_written_scope(false), FERRY_CHECKPOINT_PENDING);
}

static void test_route_rules(void **state)
{
    (void)state;
    assert_true(ferry_checkpoint_mode_has_route("incremental"));
    assert_true(ferry_checkpoint_mode_has_route("cdc"));
    assert_false(ferry_checkpoint_mode_has_route("full"));
    assert_false(ferry_checkpoint_mode_has_route(""));
    assert_false(ferry_checkpoint_mode_has_route(NULL));
    /* a plan's route_checkpoint: only a completed run with the resource completed */
    assert_true(ferry_checkpoint_plan_route_due(true, "completed"));
    assert_false(ferry_checkpoint_plan_route_due(false, "completed")); /* paused */
    assert_false(ferry_checkpoint_plan_route_due(true, "failed"));
    assert_false(ferry_checkpoint_plan_route_due(true, "running"));
    assert_false(ferry_checkpoint_plan_route_due(true, NULL));
    /* progress: a key or an offset; "done" alone keeps the route where it was */
    assert_true(ferry_checkpoint_carries_progress("{\"shard\":0,\"key\":[5]}"));
    assert_true(ferry_checkpoint_carries_progress("{\"shard\":0,\"key\":[]}"));
    assert_true(ferry_checkpoint_carries_progress("{\"shard\":0,\"n\":0,\"done\":true}"));
    assert_true(ferry_checkpoint_carries_progress("{\"shard\":0,\"n\":9,\"g\":\"u:1-2\"}"));
    assert_false(ferry_checkpoint_carries_progress("{\"shard\":0,\"done\":true}"));
    assert_false(ferry_checkpoint_carries_progress("{\"shard\":0,\"reset\":true}"));
    assert_false(ferry_checkpoint_carries_progress(NULL));
    assert_false(ferry_checkpoint_carries_progress("not json"));
    assert_false(ferry_checkpoint_carries_progress("{\"shard\":0,\"cursor\":5}"));
}

static void test_resume_of(void **state)
{
    (void)state;
    const char *stored = "{\"shard\":1,\"key\":[10]}";
    bool record = true;
    /* nothing held: the store's, nothing to record */
    assert_ptr_equal(ferry_checkpoint_resume_of(stored, NULL, 7, &record), stored);
    assert_false(record);
    /* held by another run: the store's */
    struct ferry_held_checkpoint other = {6, "{\"shard\":1,\"key\":[99]}"};
    assert_ptr_equal(ferry_checkpoint_resume_of(stored, &other, 7, &record), stored);
    assert_false(record);
    /* held by this run, ahead of the store: the destination's, and the store is told */
    struct ferry_held_checkpoint ahead = {7, "{\"shard\":1,\"key\":[20]}"};
    assert_ptr_equal(ferry_checkpoint_resume_of(stored, &ahead, 7, &record), ahead.position);
    assert_true(record);
    /* the store knows nothing of this run yet */
    assert_ptr_equal(ferry_checkpoint_resume_of(NULL, &ahead, 7, &record), ahead.position);
    assert_true(record);
    /* the same position: used, nothing to record */
    struct ferry_held_checkpoint same = {7, "{\"shard\":1,\"key\":[10]}"};
    const char *got = ferry_checkpoint_resume_of(stored, &same, 7, &record);
    assert_string_equal(got, stored);
    assert_false(record);
    /* held with no position: the store's */
    struct ferry_held_checkpoint empty = {7, NULL};
    assert_ptr_equal(ferry_checkpoint_resume_of(stored, &empty, 7, &record), stored);
    assert_false(record);
    assert_null(ferry_checkpoint_resume_of(NULL, NULL, 7, &record));
    assert_false(record);
}

struct versions {
    int64_t same_run; /* the one run of this pipeline version */
    int asked;
};

static bool same_version(void *ctx, int64_t run_id)
{
    struct versions *v = ctx;
    v->asked++;
    return run_id == v->same_run;
}

static void test_lower_from_held(void **state)
{
    (void)state;
    struct versions v = {5, 0};
    struct ferry_held_checkpoint later = {5, "{\"shard\":0,\"key\":[\"2024-01-02\",7]}"};
    assert_true(ferry_checkpoint_lower_from_held(4, &later, same_version, &v));
    assert_true(ferry_checkpoint_lower_from_held(0, &later, same_version, &v));
    assert_int_equal(v.asked, 2);
    /* not later than the route's run: the route's, the version is not even asked */
    v.asked = 0;
    assert_false(ferry_checkpoint_lower_from_held(5, &later, same_version, &v));
    assert_false(ferry_checkpoint_lower_from_held(6, &later, same_version, &v));
    /* no key (a log position, only done, not a position): the route's */
    struct ferry_held_checkpoint log = {5, "{\"shard\":0,\"n\":77}"};
    struct ferry_held_checkpoint done = {5, "{\"shard\":0,\"done\":true}"};
    struct ferry_held_checkpoint junk = {5, "{\"key\":"};
    struct ferry_held_checkpoint none = {5, NULL};
    assert_false(ferry_checkpoint_lower_from_held(4, &log, same_version, &v));
    assert_false(ferry_checkpoint_lower_from_held(4, &done, same_version, &v));
    assert_false(ferry_checkpoint_lower_from_held(4, &junk, same_version, &v));
    assert_false(ferry_checkpoint_lower_from_held(4, &none, same_version, &v));
    assert_false(ferry_checkpoint_lower_from_held(4, NULL, same_version, &v));
    assert_int_equal(v.asked, 0);
    /* a later run of another pipeline version: the route's */
    struct ferry_held_checkpoint other = {6, "{\"shard\":0,\"key\":[1]}"};
    assert_false(ferry_checkpoint_lower_from_held(4, &other, same_version, &v));
    assert_int_equal(v.asked, 1);
}

/* The plan cache: the same text gives the same parse (no second parse), another text a
 * new one, NULL or broken JSON none. */
static void test_plan_cache(void **state)
{
    (void)state;
    struct ferry_plan_cache c = {NULL, NULL};
    char a[] = "{\"shards\":[{\"key\":\"a\"},{\"key\":\"b\"}]}";
    json_t *r1 = ferry_plan_cache_get(&c, a);
    assert_non_null(r1);
    assert_int_equal(json_array_size(json_object_get(r1, "shards")), 2);
    char copy[sizeof a];
    memcpy(copy, a, sizeof a);
    assert_ptr_equal(ferry_plan_cache_get(&c, copy), r1);
    copy[sizeof a - 6] = 'c'; /* another text of the same length: parsed again */
    json_t *r2 = ferry_plan_cache_get(&c, copy);
    assert_non_null(r2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(r2, "shards"), 1), "key")),
                        "c");
    assert_null(ferry_plan_cache_get(&c, "{not json"));
    assert_null(ferry_plan_cache_get(&c, NULL));
    assert_non_null(ferry_plan_cache_get(&c, a));
    ferry_plan_cache_clear(&c);
    assert_null(c.text);
    assert_null(c.root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_written_scope),
        cmocka_unit_test(test_route_rules),
        cmocka_unit_test(test_resume_of),
        cmocka_unit_test(test_lower_from_held),
        cmocka_unit_test(test_plan_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
