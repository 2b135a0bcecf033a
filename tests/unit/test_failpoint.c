/* tests/unit/test_failpoint.c - FERRY_FAILPOINTS parsing, every action, @N, the crash
 * exit status (in a forked child), and hit counting across threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"

static int load(const char *spec, struct ferry_error *err)
{
    if (spec == NULL)
        unsetenv("FERRY_FAILPOINTS");
    else
        setenv("FERRY_FAILPOINTS", spec, 1);
    ferry_error_clear(err);
    return ferry_failpoints_init(err);
}

static int teardown(void **state)
{
    (void)state;
    struct ferry_error err;
    load(NULL, &err);
    return 0;
}

static void test_unset_costs_nothing(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_int_equal(load(NULL, &err), FERRY_OK);
    assert_false(ferry__failpoints_on);
    assert_int_equal(FERRY_FAILPOINT("before_sink_apply"), FERRY_FP_NONE);
    assert_int_equal(ferry_failpoint_check("before_sink_apply", &err), FERRY_OK);
    assert_int_equal(load("  ", &err), FERRY_OK);
    assert_false(ferry__failpoints_on);
}

static void test_error_enospc_bitflip(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_int_equal(load("before_sink_apply=error, after_sink_apply=enospc ,"
                          "before_sink_commit=bitflip",
                          &err),
                     FERRY_OK);
    assert_true(ferry__failpoints_on);
    assert_int_equal(FERRY_FAILPOINT("before_sink_apply"), FERRY_FP_ERROR);
    assert_int_equal(FERRY_FAILPOINT("after_sink_apply"), FERRY_FP_ENOSPC);
    assert_int_equal(FERRY_FAILPOINT("before_sink_commit"), FERRY_FP_BITFLIP);
    assert_int_equal(FERRY_FAILPOINT("after_sink_commit"), FERRY_FP_NONE);
    assert_int_equal(FERRY_FAILPOINT("before_sink"), FERRY_FP_NONE); /* no prefix match */

    ferry_error_clear(&err);
    assert_int_equal(ferry_failpoint_check("before_sink_apply", &err), FERRY_EFAILPOINT);
    assert_int_equal(err.code, FERRY_EFAILPOINT);
    assert_non_null(strstr(err.message, "before_sink_apply"));
    ferry_error_clear(&err);
    assert_int_equal(ferry_failpoint_check("after_sink_apply", &err), FERRY_ENOSPC);
    assert_non_null(strstr(err.message, "No space left on device"));
    assert_non_null(strstr(err.message, "after_sink_apply"));
    /* bitflip is the caller's job: check() reports nothing for it. */
    assert_int_equal(ferry_failpoint_check("before_sink_commit", &err), FERRY_OK);
    /* Every hit fires without @N. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(FERRY_FAILPOINT("before_sink_apply"), FERRY_FP_ERROR);
}

static void test_nth_hit_only(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_int_equal(load("p=error@3", &err), FERRY_OK);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_NONE);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_NONE);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_ERROR);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_NONE);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_NONE);
    /* Re-init resets the counters. */
    assert_int_equal(load("p=enospc@1", &err), FERRY_OK);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_ENOSPC);
    assert_int_equal(FERRY_FAILPOINT("p"), FERRY_FP_NONE);
    /* Two entries for one name, each with its own hit number. */
    assert_int_equal(load("q=error@1,q=bitflip@3", &err), FERRY_OK);
    assert_int_equal(FERRY_FAILPOINT("q"), FERRY_FP_ERROR);
    assert_int_equal(FERRY_FAILPOINT("q"), FERRY_FP_NONE);
    assert_int_equal(FERRY_FAILPOINT("q"), FERRY_FP_BITFLIP);
    assert_int_equal(FERRY_FAILPOINT("q"), FERRY_FP_NONE);
    /* @N+: from the Nth hit on, every hit (a disk that stays broken). */
    assert_int_equal(load("r=error@2+", &err), FERRY_OK);
    assert_int_equal(FERRY_FAILPOINT("r"), FERRY_FP_NONE);
    for (int i = 0; i < 4; i++)
        assert_int_equal(FERRY_FAILPOINT("r"), FERRY_FP_ERROR);
    assert_int_equal(load("r=error@+", &err), FERRY_ECONFIG);
    assert_int_equal(load("r=error@2++", &err), FERRY_ECONFIG);
}

static void test_sleep(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_int_equal(load("slow=sleep(120)", &err), FERRY_OK);
    int64_t t0 = ferry_now_mono_us();
    assert_int_equal(FERRY_FAILPOINT("slow"), FERRY_FP_NONE);
    int64_t dt = ferry_now_mono_us() - t0;
    assert_true(dt >= 120000);
    assert_true(dt < 5000000);
    t0 = ferry_now_mono_us();
    assert_int_equal(FERRY_FAILPOINT("other"), FERRY_FP_NONE);
    assert_true(ferry_now_mono_us() - t0 < 100000);
}

/* Runs `hits` evaluations of `name` in a child and returns its wait status. */
static int child_status(const char *spec, const char *name, int hits)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct ferry_error err;
        if (load(spec, &err) != FERRY_OK) _exit(3);
        for (int i = 0; i < hits; i++) (void)FERRY_FAILPOINT(name);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_crash_exits_137(void **state)
{
    (void)state;
    int st = child_status("after_sink_commit=crash", "after_sink_commit", 1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 137);
    /* @3: two hits survive, the third dies. */
    st = child_status("after_sink_commit=crash@3", "after_sink_commit", 2);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    st = child_status("after_sink_commit=crash@3", "after_sink_commit", 3);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 137);
    /* Another name never crashes. */
    st = child_status("after_sink_commit=crash", "before_sink_commit", 5);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_malformed_names_the_bad_part(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *named; /* must appear in the message */
    } cases[] = {
        {"before_sink_apply", "before_sink_apply"},
        {"a=crash,b=explode", "b=explode"},
        {"a=crash,,b=error", "empty entry"},
        {"a=crash,", "empty entry"},
        {"=crash", "=crash"},
        {"a b=crash", "a b=crash"},
        {"x=sleep(abc)", "x=sleep(abc)"},
        {"x=sleep(10", "x=sleep(10"},
        {"x=sleep()", "x=sleep()"},
        {"x=sleep(99999999)", "x=sleep(99999999)"},
        {"x=crash@0", "x=crash@0"},
        {"x=crash@", "x=crash@"},
        {"x=crash@-2", "x=crash@-2"},
        {"x=crash@2@3", "x=crash@2@3"},
        {"x=Crash", "x=Crash"},
        {"x=", "x="},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ferry_error err;
        int rc = load(cases[i].spec, &err);
        if (rc != FERRY_ECONFIG) fail_msg("spec \"%s\" accepted (rc %d)", cases[i].spec, rc);
        assert_int_equal(err.code, FERRY_ECONFIG);
        if (strstr(err.message, cases[i].named) == NULL)
            fail_msg("message for \"%s\" does not name \"%s\": %s", cases[i].spec,
                     cases[i].named, err.message);
        assert_non_null(strstr(err.message, "FERRY_FAILPOINTS"));
        /* A bad spec arms nothing, not even its good entries. */
        assert_false(ferry__failpoints_on);
        assert_int_equal(FERRY_FAILPOINT("a"), FERRY_FP_NONE);
    }
    /* Too many entries. */
    char spec[2048] = "";
    for (int i = 0; i < 33; i++) {
        char e[32];
        snprintf(e, sizeof e, "%sfp%d=error", i ? "," : "", i);
        strcat(spec, e);
    }
    struct ferry_error err;
    assert_int_equal(load(spec, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "more than"));
}

struct hit_arg {
    int errors;
};

static void *hammer(void *p)
{
    struct hit_arg *a = p;
    for (int i = 0; i < 20000; i++)
        if (FERRY_FAILPOINT("hot") == FERRY_FP_ERROR) a->errors++;
    return NULL;
}

/* 4 threads x 20000 hits: the 50000th hit fires exactly once, whoever makes it. */
static void test_counter_is_thread_safe(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_int_equal(load("hot=error@50000", &err), FERRY_OK);
    pthread_t t[4];
    struct hit_arg args[4] = {{0}, {0}, {0}, {0}};
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, hammer, &args[i]), 0);
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        total += args[i].errors;
    }
    assert_int_equal(total, 1);
    /* And it does not fire again after 80000 hits. */
    assert_int_equal(FERRY_FAILPOINT("hot"), FERRY_FP_NONE);
}

int main(void)
{
    ferry_log_set_level(FERRY_LOG_ERROR); /* fired failpoints log warnings: keep output clean */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_unset_costs_nothing, teardown),
        cmocka_unit_test_teardown(test_error_enospc_bitflip, teardown),
        cmocka_unit_test_teardown(test_nth_hit_only, teardown),
        cmocka_unit_test_teardown(test_sleep, teardown),
        cmocka_unit_test_teardown(test_crash_exits_137, teardown),
        cmocka_unit_test_teardown(test_malformed_names_the_bad_part, teardown),
        cmocka_unit_test_teardown(test_counter_is_thread_safe, teardown),
    };
    return cmocka_run_group_tests_name("failpoint", tests, NULL, NULL);
}
