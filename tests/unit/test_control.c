/* tests/unit/test_control.c - the control plane's pieces on a real SQLite state file: cron
 * parsing and next times in time zones (DST days included), the scheduler's overlap
 * policies and idempotent firings, the reaper (lease, fencing, retry policy), and the
 * store functions ferry serve added (pipeline heads and versions, idempotency keys,
 * requeue). */
#include "unit.h"
#include <sqlite3.h>
#include <string.h>
#include <time.h>
#include "bus/bus.h"
#include "control/control.h"
#include "ferry/core.h"
#include "state_fixture.h"
#include "store/store.h"

static int64_t utc(int y, int mo, int d, int h, int mi)
{
    struct tm tm = {
        .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
    return (int64_t)timegm(&tm) * 1000000;
}

static int64_t next_of(const char *expr, const char *tz, int64_t after)
{
    struct ferry_cron *c = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_cron_parse(expr, &c, &e), FERRY_OK);
    int64_t next = 0;
    assert_int_equal(ferry_cron_next(c, tz, after, &next, &e), FERRY_OK);
    ferry_cron_free(c);
    return next;
}

static void test_cron_parse_errors(void **state)
{
    (void)state;
    struct ferry_cron *c = NULL;
    struct ferry_error e;
    const char *bad[] = {"",          "* * * *",      "* * * * * *", "60 * * * *",  "* 24 * * *",
                         "* * 0 * *", "* * * 13 *",   "* * * * 8",   "*/0 * * * *", "5-1 * * * *",
                         "a * * * *", "1,,2 * * * *", "1- * * * *"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ferry_cron_parse(bad[i], &c, &e), FERRY_EINVAL);
        assert_null(c);
    }
    assert_int_equal(ferry_cron_parse("61 * * * *", &c, &e), FERRY_EINVAL);
    assert_non_null(strstr(e.message, "minute"));
    assert_int_equal(ferry_cron_parse("* * * * 9", &c, &e), FERRY_EINVAL);
    assert_non_null(strstr(e.message, "day of week"));
}

static void test_cron_next_utc(void **state)
{
    (void)state;
    int64_t t = utc(2026, 3, 10, 12, 7);
    assert_int_equal(next_of("* * * * *", "UTC", t), utc(2026, 3, 10, 12, 8));
    assert_int_equal(next_of("*/15 * * * *", "UTC", t), utc(2026, 3, 10, 12, 15));
    assert_int_equal(next_of("0 0 * * *", "UTC", t), utc(2026, 3, 11, 0, 0));
    assert_int_equal(next_of("30 6 1 * *", "UTC", t), utc(2026, 4, 1, 6, 30));
    /* 2026-03-10 is a Tuesday: next Sunday (0 and 7) is the 15th. */
    assert_int_equal(next_of("0 9 * * 0", "UTC", t), utc(2026, 3, 15, 9, 0));
    assert_int_equal(next_of("0 9 * * 7", "UTC", t), utc(2026, 3, 15, 9, 0));
    /* Both day fields restricted: either matches (the 13th, a Friday, comes first). */
    assert_int_equal(next_of("0 0 20 * 5", "UTC", t), utc(2026, 3, 13, 0, 0));
    assert_int_equal(next_of("5-10/5 1,3 * * *", "UTC", t), utc(2026, 3, 11, 1, 5));
    assert_int_equal(next_of("0 0 29 2 *", "UTC", t), utc(2028, 2, 29, 0, 0));
    /* Strictly after: at a matching minute, the next one. */
    assert_int_equal(next_of("0 0 * * *", "UTC", utc(2026, 3, 11, 0, 0)), utc(2026, 3, 12, 0, 0));
    /* Impossible dates have no next time. */
    struct ferry_cron *c = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_cron_parse("0 0 31 2 *", &c, &e), FERRY_OK);
    int64_t next = 0;
    assert_int_equal(ferry_cron_next(c, "UTC", t, &next, &e), FERRY_ENOTFOUND);
    ferry_cron_free(c);
}

static void test_cron_next_time_zones(void **state)
{
    (void)state;
    /* 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer. */
    assert_int_equal(next_of("0 9 * * *", "Europe/Paris", utc(2026, 1, 15, 12, 0)),
                     utc(2026, 1, 16, 8, 0));
    assert_int_equal(next_of("0 9 * * *", "Europe/Paris", utc(2026, 7, 15, 12, 0)),
                     utc(2026, 7, 16, 7, 0));
    /* The spring-forward day (2026-03-29: 02:00 -> 03:00 in Paris): 02:30 does not exist
     * that day; the next firing is the following day's 02:30 (00:30 UTC). */
    assert_int_equal(next_of("30 2 * * *", "Europe/Paris", utc(2026, 3, 28, 23, 0)),
                     utc(2026, 3, 30, 0, 30));
    /* New York: 18:00 local = 23:00 UTC in winter. */
    assert_int_equal(next_of("0 18 * * *", "America/New_York", utc(2026, 1, 5, 0, 0)),
                     utc(2026, 1, 5, 23, 0));
    assert_true(ferry_timezone_valid("Europe/Paris"));
    assert_true(ferry_timezone_valid("UTC"));
    assert_false(ferry_timezone_valid("Mars/Olympus"));
    assert_false(ferry_timezone_valid("../../etc/passwd"));
    struct ferry_cron *c = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_cron_parse("* * * * *", &c, &e), FERRY_OK);
    int64_t next = 0;
    assert_int_equal(ferry_cron_next(c, "Nowhere/City", 0, &next, &e), FERRY_EINVAL);
    ferry_cron_free(c);
    /* The process's own TZ is left as it was. */
    assert_null(getenv("TZ"));
}

struct fx {
    struct state_dir sd;
    struct ferry_store *st;
    struct ferry_bus *bus;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    state_dir_make(&f->sd);
    struct ferry_error e;
    assert_int_equal(ferry_store_open(f->sd.url, &f->st, &e), FERRY_OK);
    assert_int_equal(ferry_bus_inproc_open(f->sd.url, &f->bus, &e), FERRY_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    ferry_bus_close(f->bus);
    ferry_store_close(f->st);
    state_dir_remove(&f->sd);
    free(f);
    return 0;
}

static void test_pipeline_heads(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    bool added = false;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{\"a\":1}", 2, &added, &e),
                     FERRY_OK);
    assert_true(added);
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{\"a\":1}", 2, &added, &e),
                     FERRY_OK);
    assert_false(added);
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v2", "{\"a\":2}", 1, &added, &e),
                     FERRY_OK);
    assert_true(added);
    /* Back to v1: not new, but current again. */
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{\"a\":1}", 1, &added, &e),
                     FERRY_OK);
    assert_false(added);
    struct ferry_pipeline_info pi;
    assert_int_equal(ferry_store_pipeline_get(f->st, "p", &pi, &e), FERRY_OK);
    assert_string_equal(pi.version, "v1");
    assert_string_equal(pi.spec, "{\"a\":1}");
    assert_int_equal(pi.n_versions, 2);
    assert_int_equal(pi.retries, 1);
    ferry_pipeline_info_clear(&pi);
    struct ferry_pipeline_version *v = NULL;
    int n = 0;
    assert_int_equal(ferry_store_pipeline_versions(f->st, "p", &v, &n, &e), FERRY_OK);
    assert_int_equal(n, 2);
    ferry_free(v);
    char *spec = NULL;
    assert_int_equal(ferry_store_pipeline_version_spec(f->st, "p", "v2", &spec, &e), FERRY_OK);
    assert_string_equal(spec, "{\"a\":2}");
    ferry_free(spec);
    assert_int_equal(ferry_store_pipeline_version_spec(f->st, "p", "v9", &spec, &e),
                     FERRY_ENOTFOUND);
    assert_int_equal(ferry_store_pipeline_delete(f->st, "p", &e), FERRY_OK);
    assert_int_equal(ferry_store_pipeline_get(f->st, "p", &pi, &e), FERRY_ENOTFOUND);
    assert_non_null(strstr(e.message, "pipeline p"));
    assert_int_equal(ferry_store_pipeline_delete(f->st, "p", &e), FERRY_ENOTFOUND);
    struct ferry_pipeline_info *list = NULL;
    assert_int_equal(ferry_store_pipeline_list(f->st, &list, &n, &e), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_pipeline_infos_free(list, n);
    /* Applying again undeletes. */
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v2", "{\"a\":2}", 0, &added, &e),
                     FERRY_OK);
    assert_int_equal(ferry_store_pipeline_list(f->st, &list, &n, &e), FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].version, "v2");
    ferry_pipeline_infos_free(list, n);
}

static void test_idempotent_requests(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{}", 0, NULL, &e), FERRY_OK);
    int64_t a = 0, b = 0, c = 0;
    bool existed = true;
    assert_int_equal(ferry_control_request_run(f->st, f->bus, "p", "api", "k", &a, &existed, &e),
                     FERRY_OK);
    assert_false(existed);
    assert_int_equal(ferry_control_request_run(f->st, f->bus, "p", "api", "k", &b, &existed, &e),
                     FERRY_OK);
    assert_true(existed);
    assert_int_equal(a, b);
    assert_int_equal(ferry_control_request_run(f->st, f->bus, "p", "api", NULL, &c, &existed, &e),
                     FERRY_OK);
    assert_false(existed);
    assert_true(c != a);
    assert_int_equal(ferry_control_request_run(f->st, f->bus, "nope", "api", "k", &c, &existed, &e),
                     FERRY_ENOTFOUND);
    /* One run.requested per created run. */
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(f->st, 0, 0, 100, &evs, &n, &e), FERRY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(evs[0].type, "run.requested");
    ferry_events_free(evs, n);
    struct ferry_run_info *runs = NULL;
    assert_int_equal(
        ferry_store_run_list_filtered(f->st, "p", FERRY_RUN_REQUESTED, 0, 0, &runs, &n, &e),
        FERRY_OK);
    assert_int_equal(n, 2);
    ferry_run_infos_free(runs, n);
    assert_int_equal(ferry_store_run_list_filtered(f->st, NULL, -1, c, 0, &runs, &n, &e), FERRY_OK);
    assert_int_equal(n, 1); /* before c */
    ferry_run_infos_free(runs, n);
}

/* Sets a run's heartbeat into the past, as a silent worker would leave it. */
static void age_heartbeat(struct fx *f, int64_t run_id, int64_t ms)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "UPDATE \"runs\" SET \"heartbeat_us\" = \"heartbeat_us\" - %lld WHERE \"id\" = %lld",
             (long long)ms * 1000, (long long)run_id);
    if (state_is_pg()) {
        char q[400];
        snprintf(q, sizeof q, "SET search_path = \"%s\"; %s", f->sd.schema, sql);
        assert_int_equal(state_pg_exec(q, NULL, 0), 0);
        return;
    }
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->sd.path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static void test_reaper(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "once", "v1", "{}", 0, NULL, &e), FERRY_OK);
    assert_int_equal(ferry_store_pipeline_apply(f->st, "retry", "v1", "{}", 1, NULL, &e), FERRY_OK);
    int64_t r1, r2;
    bool existed;
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "once", "api", NULL, &r1, &existed, &e), FERRY_OK);
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "retry", "api", NULL, &r2, &existed, &e),
        FERRY_OK);
    int a1, a2;
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r1, 1234, &a1, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r2, 1235, &a2, &e), FERRY_OK);
    /* Within the lease: nothing. */
    int lost = 0, retried = 0;
    age_heartbeat(f, r1, 2000);
    assert_int_equal(ferry_reaper_sweep(f->st, f->bus, 5000, NULL, NULL, &lost, &retried, &e), FERRY_OK);
    assert_int_equal(lost, 0);
    /* Past it: both lost; "retry" is requested again, "once" stays failed. */
    age_heartbeat(f, r1, 5000);
    age_heartbeat(f, r2, 8000);
    assert_int_equal(ferry_reaper_sweep(f->st, f->bus, 5000, NULL, NULL, &lost, &retried, &e), FERRY_OK);
    assert_int_equal(lost, 2);
    assert_int_equal(retried, 1);
    struct ferry_run_info run;
    assert_int_equal(ferry_store_run_get(f->st, r1, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_FAILED);
    assert_int_equal(run.attempt, a1 + 1);
    assert_non_null(strstr(run.error, "worker lost"));
    ferry_run_info_clear(&run);
    assert_int_equal(ferry_store_run_get(f->st, r2, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_REQUESTED);
    ferry_run_info_clear(&run);
    int retries = 0;
    assert_int_equal(ferry_store_run_retries(f->st, r2, &retries, &e), FERRY_OK);
    assert_int_equal(retries, 1);
    /* The lost attempt is fenced: its checkpoint and heartbeat are refused. */
    assert_int_equal(ferry_store_run_checkpoint_save(f->st, r1, a1, "t", 0, "{\"key\":[1]}", &e),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_run_heartbeat(f->st, r1, a1, &e), FERRY_EFENCED);
    /* Reaping again (a second control process) finds nothing to do. */
    int fenced = 0;
    assert_int_equal(ferry_store_run_reap(f->st, r1, a1, 0, "again", &fenced, &e), FERRY_EFENCED);
    /* A worker that beat after the sweep looked is not reaped. */
    int64_t r3;
    int a3;
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "once", "api", NULL, &r3, &existed, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r3, 1237, &a3, &e), FERRY_OK);
    assert_int_equal(
        ferry_store_run_reap(f->st, r3, a3, ferry_now_wall_us() - 5000000, "late", &fenced, &e),
        FERRY_ECONFLICT);
    assert_int_equal(ferry_store_run_heartbeat(f->st, r3, a3, &e), FERRY_OK);
    /* The retry's second loss exhausts the policy. */
    assert_int_equal(ferry_store_run_begin_attempt(f->st, r2, 1236, &a2, &e), FERRY_OK);
    age_heartbeat(f, r2, 9000);
    assert_int_equal(ferry_reaper_sweep(f->st, f->bus, 5000, NULL, NULL, &lost, &retried, &e), FERRY_OK);
    assert_int_equal(lost, 1);
    assert_int_equal(retried, 0);
    assert_int_equal(ferry_store_run_get(f->st, r2, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_FAILED);
    ferry_run_info_clear(&run);
    /* worker.lost and run.failed carry the fencing attempt. */
    struct ferry_event *evs = NULL;
    int n = 0, lost_events = 0;
    assert_int_equal(ferry_store_event_read(f->st, 0, r1, 100, &evs, &n, &e), FERRY_OK);
    for (int i = 0; i < n; i++)
        if (!strcmp(evs[i].type, "worker.lost")) {
            lost_events++;
            assert_int_equal(evs[i].attempt, a1 + 1);
        }
    assert_int_equal(lost_events, 1);
    ferry_events_free(evs, n);
    /* requeue: only paused or failed runs. */
    assert_int_equal(ferry_store_run_requeue(f->st, r1, false, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_requeue(f->st, r1, false, &e), FERRY_ECONFLICT);
}

static void test_scheduler_overlap(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{}", 0, NULL, &e), FERRY_OK);
    struct ferry_schedule s = {.enabled = true};
    snprintf(s.pipeline, sizeof s.pipeline, "p");
    snprintf(s.cron, sizeof s.cron, "* * * * *");
    snprintf(s.timezone, sizeof s.timezone, "UTC");
    snprintf(s.overlap, sizeof s.overlap, "skip");
    int64_t now = utc(2026, 5, 1, 10, 0);
    s.next_us = now;
    assert_int_equal(ferry_store_schedule_put(f->st, &s, &e), FERRY_OK);
    int fired = 0;
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, now, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 1);
    struct ferry_schedule got;
    assert_int_equal(ferry_store_schedule_get(f->st, s.id, &got, &e), FERRY_OK);
    assert_int_equal(got.next_us, utc(2026, 5, 1, 10, 1));
    assert_true(got.last_run > 0);
    /* Not due yet: nothing. */
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, now + 1000000, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 0);
    /* Due while the first run is unfinished: skip records the firing, starts nothing. */
    int64_t later = utc(2026, 5, 1, 10, 1);
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, later, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 0);
    assert_int_equal(ferry_store_schedule_get(f->st, s.id, &got, &e), FERRY_OK);
    assert_int_equal(got.next_us, utc(2026, 5, 1, 10, 2));
    /* queue: stays due until the run is done. */
    snprintf(got.overlap, sizeof got.overlap, "queue");
    assert_int_equal(ferry_store_schedule_put(f->st, &got, &e), FERRY_OK);
    int64_t t2 = utc(2026, 5, 1, 10, 2);
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, t2, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 0);
    assert_int_equal(ferry_store_schedule_get(f->st, s.id, &got, &e), FERRY_OK);
    assert_int_equal(got.next_us, t2);
    /* allow: another run even though one is unfinished. */
    snprintf(got.overlap, sizeof got.overlap, "allow");
    assert_int_equal(ferry_store_schedule_put(f->st, &got, &e), FERRY_OK);
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, t2, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 1);
    /* The same firing twice (two schedulers): one run (idempotency key). */
    got.next_us = t2;
    assert_int_equal(ferry_store_schedule_put(f->st, &got, &e), FERRY_OK);
    assert_int_equal(ferry_scheduler_tick(f->st, f->bus, t2, &fired, &e), FERRY_OK);
    assert_int_equal(fired, 0);
    struct ferry_run_info *runs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_run_list_filtered(f->st, "p", -1, 0, 0, &runs, &n, &e), FERRY_OK);
    assert_int_equal(n, 2);
    ferry_run_infos_free(runs, n);
    assert_int_equal(ferry_store_schedule_delete(f->st, s.id, &e), FERRY_OK);
    assert_int_equal(ferry_store_schedule_delete(f->st, s.id, &e), FERRY_ENOTFOUND);
}

static void test_resume_marks(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{}", 0, NULL, &e), FERRY_OK);
    int64_t paused, failed, other;
    bool existed;
    int a;
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "p", "api", "1", &paused, &existed, &e), FERRY_OK);
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "p", "api", "2", &failed, &existed, &e), FERRY_OK);
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "p", "api", "3", &other, &existed, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, paused, 1, &a, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(f->st, paused, a, FERRY_RUN_PAUSED, NULL, &e),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, failed, 2, &a, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(f->st, failed, a, FERRY_RUN_FAILED, "x", &e),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, other, 3, &a, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(f->st, other, a, FERRY_RUN_PAUSED, NULL, &e),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_mark_resume_on_start(f->st, paused, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_mark_resume_on_start(f->st, failed, &e), FERRY_OK);
    int64_t *ids = NULL;
    int n = 0;
    assert_int_equal(ferry_store_run_requeue_marked(f->st, &ids, &n, &e), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], paused);
    ferry_free(ids);
    struct ferry_run_info run;
    assert_int_equal(ferry_store_run_get(f->st, paused, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_REQUESTED);
    ferry_run_info_clear(&run);
    assert_int_equal(ferry_store_run_get(f->st, failed, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_FAILED);
    ferry_run_info_clear(&run);
    assert_int_equal(ferry_store_run_get(f->st, other, &run, &e), FERRY_OK);
    assert_int_equal(run.state, FERRY_RUN_PAUSED); /* paused by a user: stays */
    ferry_run_info_clear(&run);
    /* Marks are cleared: a second start requeues nothing. */
    assert_int_equal(ferry_store_run_requeue_marked(f->st, &ids, &n, &e), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_free(ids);
}

/* A local worker that dies before it begins an attempt fails its run, a resumed run's too
 * (before, a resumed run stayed `requested` with no worker, for good). /bin/false stands in
 * for a worker that exits at once. */
static void test_worker_dies_before_start(void **state)
{
    struct fx *f = *state;
    struct ferry_error e;
    assert_int_equal(ferry_store_pipeline_apply(f->st, "p", "v1", "{}", 0, NULL, &e), FERRY_OK);
    int64_t first, resumed;
    bool existed;
    int a;
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "p", "api", "1", &first, &existed, &e), FERRY_OK);
    assert_int_equal(
        ferry_control_request_run(f->st, f->bus, "p", "api", "2", &resumed, &existed, &e),
        FERRY_OK);
    assert_int_equal(ferry_store_run_begin_attempt(f->st, resumed, 1, &a, &e), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(f->st, resumed, a, FERRY_RUN_PAUSED, NULL, &e),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_requeue(f->st, resumed, false, &e), FERRY_OK);
    struct ferry_control_options o = {.state_path = f->sd.url,
                                      .worker_bin = "/bin/false",
                                      .log_dir = f->sd.dir,
                                      .max_workers = 2,
                                      .lease_ms = 5000,
                                      .sweep_ms = 200};
    struct ferry_control *c = NULL;
    assert_int_equal(ferry_control_start(&o, f->bus, &c, &e), FERRY_OK);
    int64_t ids[2] = {first, resumed};
    for (int i = 0; i < 2; i++) {
        struct ferry_run_info run = {0};
        for (int tries = 0; tries < 600; tries++) {
            ferry_run_info_clear(&run);
            assert_int_equal(ferry_store_run_get(f->st, ids[i], &run, &e), FERRY_OK);
            if (run.state == FERRY_RUN_FAILED) break;
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(run.state, FERRY_RUN_FAILED);
        assert_non_null(strstr(run.error, "exited with status 1 before starting the run"));
        ferry_run_info_clear(&run);
    }
    ferry_control_stop(c, 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cron_parse_errors),
        cmocka_unit_test(test_cron_next_utc),
        cmocka_unit_test(test_cron_next_time_zones),
        cmocka_unit_test_setup_teardown(test_pipeline_heads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reaper, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scheduler_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_dies_before_start, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
