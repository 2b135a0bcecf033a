/* tests/unit/test_store.c - the state store on real SQLite files in a fresh folder, or, with
 * FERRY_TEST_STORE set, on a fresh schema of a real PostgreSQL (the tests that look inside
 * the SQLite file skip themselves there; test_pg_* run only there). */
#include "state_fixture.h"

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "unit.h"
#include "ferry/core.h"
#include "store/store.h"

struct fx {
    struct state_dir sd;
    struct ferry_store *st;
};

static const char *cur_schema; /* the test's PostgreSQL schema, for raw_int/raw_exec */

#define SQLITE_ONLY()                                                                              \
    do {                                                                                           \
        if (state_is_pg()) skip();                                                                 \
    } while (0)

/* What an error about this state names: the file, or (PostgreSQL) the schema. */
static const char *label_part(const struct fx *f)
{
    return state_is_pg() ? f->sd.schema : f->sd.path;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    *state = f;
    cur_schema = f->sd.schema;
    return state_store_open(&f->sd, &f->st);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    state_store_close(&f->sd, f->st);
    free(f);
    return 0;
}

/* A raw query on the file (or the test's schema), independent of the store's code. */
static long long raw_int(const char *path, const char *sql)
{
    if (state_is_pg()) {
        char q[1024], out[64];
        snprintf(q, sizeof q, "SET search_path = \"%s\"; %s", cur_schema, sql);
        assert_int_equal(state_pg_exec(q, out, sizeof out), 0);
        return out[0] ? atoll(out) : -1;
    }
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    long long v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void raw_exec(const char *path, const char *sql)
{
    if (state_is_pg()) {
        char q[1024];
        snprintf(q, sizeof q, "SET search_path = \"%s\"; %s", cur_schema, sql);
        assert_int_equal(state_pg_exec(q, NULL, 0), 0);
        return;
    }
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) fprintf(stderr, "raw_exec: %s\n", msg);
    sqlite3_free(msg);
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_close(db);
}

static int64_t new_run(struct ferry_store *st, const char *pipeline, const char *version)
{
    int64_t id = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_create(st, pipeline, version, "{\"name\":\"x\"}", &id, &err),
                     FERRY_OK);
    assert_true(id > 0);
    return id;
}

static void assert_names_path(const struct ferry_error *err, const char *path)
{
    if (strstr(err->message, path) == NULL)
        fail_msg("message does not name %s: %s", path, err->message);
}

/* ---- open, migrations, schema ---- */

static void test_open_creates_folders_and_migrates(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    struct stat sb;
    assert_int_equal(stat(f->sd.path, &sb), 0);
    int v = ferry_store_schema_version(f->st);
    assert_true(v >= 1);
    assert_string_equal(ferry_store_path(f->st), f->sd.path);
    ferry_store_close(f->st);
    f->st = NULL;

    /* Reopening (also through the sqlite: form) applies nothing twice. */
    char url[400];
    snprintf(url, sizeof url, "sqlite:%s", f->sd.path);
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_open(url, &f->st, &err), FERRY_OK);
    assert_int_equal(ferry_store_schema_version(f->st), v);
    assert_int_equal(raw_int(f->sd.path, "SELECT count(*) FROM \"schema_migrations\""), v);
    assert_int_equal(raw_int(f->sd.path, "SELECT max(\"version\") FROM \"schema_migrations\""), v);
    assert_true(raw_int(f->sd.path, "SELECT min(\"applied_at\") FROM \"schema_migrations\"") > 0);
    assert_int_equal(raw_int(f->sd.path, "SELECT count(*) FROM \"sqlite_master\" WHERE \"name\""
                                         " = 'events'"),
                     1);

    /* The pragmas that make commits durable and the log readable while written. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->sd.path, &db), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    sqlite3_close(db);
}

static void test_newer_schema_refused(void **state)
{
    struct fx *f = *state;
    ferry_store_close(f->st);
    f->st = NULL;
    raw_exec(f->sd.path, "INSERT INTO \"schema_migrations\" VALUES (999, 1)");
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(f->sd.url, &st, &err), FERRY_EUNSUPPORTED);
    assert_null(st);
    assert_names_path(&err, label_part(f));
    assert_non_null(strstr(err.message, "999"));
}

static void test_foreign_database_refused(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    char path[400];
    snprintf(path, sizeof path, "%s/data.db", f->sd.dir);
    raw_exec(path, "CREATE TABLE \"orders\" (\"id\" INTEGER)");
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(path, &st, &err), FERRY_ESTORE);
    assert_names_path(&err, path);
    /* and it was left alone */
    assert_int_equal(raw_int(path, "SELECT count(*) FROM \"sqlite_master\""), 1);
}

static void test_parent_is_a_file(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    char file[400], path[500];
    snprintf(file, sizeof file, "%s/plain", f->sd.dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/sub/state.db", file);
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_not_equal(ferry_store_open(path, &st, &err), FERRY_OK);
    assert_names_path(&err, path);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static void test_garbage_file(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    char path[400];
    snprintf(path, sizeof path, "%s/garbage.db", f->sd.dir);
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 7 + 3);
    write_file(path, junk, sizeof junk);
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(path, &st, &err), FERRY_ESTORE);
    assert_null(st);
    assert_names_path(&err, path);
    assert_non_null(strstr(err.message, "not a SQLite database"));

    write_file(path, "hello", 5); /* shorter than any header */
    assert_int_equal(ferry_store_open(path, &st, &err), FERRY_ESTORE);
    assert_names_path(&err, path);
}

static void fill_events(struct ferry_store *st, int n)
{
    char payload[300];
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    for (int i = 0; i < n; i++) {
        snprintf(payload, sizeof payload, "{\"i\":%d,\"pad\":\"%0200d\"}", i, i);
        struct ferry_event ev = {.run_id = 1, .payload = payload};
        snprintf(ev.type, sizeof ev.type, "batch.buffered");
        assert_int_equal(ferry_store_event_append(st, &ev, &err), FERRY_OK);
    }
    assert_int_equal(ferry_store_commit(st, &err), FERRY_OK);
}

static void test_truncated_file(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    fill_events(f->st, 2000);
    ferry_store_close(f->st); /* checkpoints the WAL into the file and removes it */
    f->st = NULL;
    struct stat sb;
    assert_int_equal(stat(f->sd.path, &sb), 0);
    assert_true(sb.st_size > 100000);
    assert_int_equal(truncate(f->sd.path, sb.st_size / 2), 0);
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(f->sd.path, &st, &err), FERRY_ESTORE);
    assert_null(st);
    assert_names_path(&err, f->sd.path);
    assert_non_null(strstr(err.message, "truncated"));
}

/* A page overwritten in the middle of the file: open may succeed, but reading or writing
 * the damaged table gives a clear error naming the file, never a crash. */
static void test_corrupt_page(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    fill_events(f->st, 2000);
    ferry_store_close(f->st);
    f->st = NULL;
    struct stat sb;
    assert_int_equal(stat(f->sd.path, &sb), 0);
    int fd = open(f->sd.path, O_WRONLY);
    assert_true(fd >= 0);
    char junk[4096 * 8];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(pwrite(fd, junk, sizeof junk, (sb.st_size / 2) & ~4095L),
                     (ssize_t)sizeof junk);
    close(fd);

    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    int rc = ferry_store_open(f->sd.path, &st, &err);
    if (rc == FERRY_OK) {
        struct ferry_event *evs = NULL;
        int n = 0;
        rc = ferry_store_event_read(st, 0, 0, 100000, &evs, &n, &err);
        ferry_events_free(evs, n);
        ferry_store_close(st);
    }
    assert_int_equal(rc, FERRY_ESTORE);
    assert_names_path(&err, f->sd.path);
    assert_non_null(strstr(err.message, "corrupt"));
}

/* ---- runs ---- */

static void test_run_lifecycle(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_pipeline_put(st, "demo", "v1", "{\"a\":1}", &err), FERRY_OK);
    assert_int_equal(ferry_store_pipeline_put(st, "demo", "v1", "{\"a\":1}", &err), FERRY_OK);
    assert_int_equal(raw_int(f->sd.path, "SELECT count(*) FROM \"pipelines\""), 1);

    int64_t id = new_run(st, "demo", "v1");
    struct ferry_run_info r;
    assert_int_equal(ferry_store_run_get(st, id, &r, &err), FERRY_OK);
    assert_int_equal(r.id, id);
    assert_string_equal(r.pipeline, "demo");
    assert_string_equal(r.version, "v1");
    assert_int_equal(r.state, FERRY_RUN_REQUESTED);
    assert_int_equal(r.attempt, 0);
    assert_true(r.created_us > 0);
    assert_int_equal(r.started_us, 0);
    assert_string_equal(r.request, "{\"name\":\"x\"}");
    ferry_run_info_clear(&r);

    int attempt = 0;
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 4242, &attempt, &err), FERRY_OK);
    assert_int_equal(attempt, 1);
    assert_int_equal(ferry_store_run_heartbeat(st, id, 1, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_add_counts(st, id, 10, 100, 1, 1, 0, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_add_counts(st, id, 5, 50, 1, 0, 1, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_get(st, id, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_RUNNING);
    assert_int_equal(r.pid, 4242);
    assert_true(r.started_us > 0 && r.heartbeat_us >= r.started_us);
    assert_int_equal(r.rows, 15);
    assert_int_equal(r.bytes, 150);
    assert_int_equal(r.batches, 2);
    assert_int_equal(r.verified, 1);
    assert_int_equal(r.diverged, 1);
    assert_int_equal(r.ended_us, 0);
    ferry_run_info_clear(&r);

    /* signals */
    char sig[16];
    assert_int_equal(ferry_store_run_requested(st, id, sig, sizeof sig, &err), FERRY_OK);
    assert_string_equal(sig, "");
    assert_int_equal(ferry_store_run_request(st, id, "pause", &err), FERRY_OK);
    assert_int_equal(ferry_store_run_requested(st, id, sig, sizeof sig, &err), FERRY_OK);
    assert_string_equal(sig, "pause");
    assert_int_equal(ferry_store_run_request(st, id, "explode", &err), FERRY_EINVAL);

    assert_int_equal(ferry_store_run_set_state(st, id, 1, FERRY_RUN_PAUSED, NULL, &err), FERRY_OK);
    /* a new attempt clears what belonged to the previous one */
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 99, &attempt, &err), FERRY_OK);
    assert_int_equal(attempt, 2);
    assert_int_equal(ferry_store_run_requested(st, id, sig, sizeof sig, &err), FERRY_OK);
    assert_string_equal(sig, "");

    assert_int_equal(ferry_store_run_set_state(st, id, 2, FERRY_RUN_FAILED, "sink said no", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_get(st, id, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_FAILED);
    assert_string_equal(r.error, "sink said no");
    assert_true(r.ended_us > 0);
    assert_int_equal(r.rows, 15); /* counters survive attempts */
    ferry_run_info_clear(&r);

    /* missing runs are named */
    assert_int_equal(ferry_store_run_get(st, 777, &r, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "777"));
    assert_names_path(&err, ferry_store_path(f->st));
    assert_null(r.request);
    assert_int_equal(ferry_store_run_add_counts(st, 777, 1, 1, 1, 0, 0, &err), FERRY_ENOTFOUND);
    assert_int_equal(ferry_store_run_begin_attempt(st, 777, 1, &attempt, &err), FERRY_ENOTFOUND);
    assert_int_equal(ferry_store_run_request(st, 777, "cancel", &err), FERRY_ENOTFOUND);
}

static void test_run_list(void **state)
{
    struct fx *f = *state;
    int64_t a = new_run(f->st, "p1", "v1");
    int64_t b = new_run(f->st, "p2", "v1");
    int64_t c = new_run(f->st, "p1", "v2");
    struct ferry_run_info *v = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_run_list(f->st, NULL, 0, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(v[0].id, c);
    assert_int_equal(v[1].id, b);
    assert_int_equal(v[2].id, a);
    assert_string_equal(v[1].request, "{\"name\":\"x\"}");
    ferry_run_infos_free(v, n);
    assert_int_equal(ferry_store_run_list(f->st, "p1", 0, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].id, c);
    assert_int_equal(v[1].id, a);
    ferry_run_infos_free(v, n);
    assert_int_equal(ferry_store_run_list(f->st, NULL, 1, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].id, c);
    ferry_run_infos_free(v, n);
    assert_int_equal(ferry_store_run_list(f->st, "nope", 0, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_run_infos_free(v, n);
}

static void test_find_unfinished(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    struct ferry_run_info r;
    bool found = true;
    assert_int_equal(ferry_store_run_find_unfinished(st, "p", "v1", &r, &found, &err), FERRY_OK);
    assert_false(found);

    int attempt = 0;
    int64_t done = new_run(st, "p", "v1");
    assert_int_equal(ferry_store_run_begin_attempt(st, done, 1, &attempt, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(st, done, 1, FERRY_RUN_COMPLETED, NULL, &err),
                     FERRY_OK);
    int64_t paused = new_run(st, "p", "v1");
    assert_int_equal(ferry_store_run_begin_attempt(st, paused, 1, &attempt, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(st, paused, 1, FERRY_RUN_PAUSED, NULL, &err),
                     FERRY_OK);
    int64_t failed = new_run(st, "p", "v1");
    assert_int_equal(ferry_store_run_begin_attempt(st, failed, 1, &attempt, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_set_state(st, failed, 1, FERRY_RUN_FAILED, "x", &err),
                     FERRY_OK);
    new_run(st, "p", "v2");
    new_run(st, "q", "v1");

    assert_int_equal(ferry_store_run_find_unfinished(st, "p", "v1", &r, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(r.id, paused);
    assert_int_equal(r.state, FERRY_RUN_PAUSED);
    ferry_run_info_clear(&r);

    int64_t requested = new_run(st, "p", "v1");
    assert_int_equal(ferry_store_run_find_unfinished(st, "p", "v1", &r, &found, &err), FERRY_OK);
    assert_true(found);
    assert_int_equal(r.id, requested);
    ferry_run_info_clear(&r);
    assert_int_equal(ferry_store_run_find_unfinished(st, "p", "v3", &r, &found, &err), FERRY_OK);
    assert_false(found);
}

/* ---- fencing ---- */

/* The snapshot a run reads from: a field of the run, saved fenced by the attempt. */
static void test_run_snapshot(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t id = new_run(st, "p", "v");
    int a1 = 0, a2 = 0, saved_by = -1;
    char *snap = (char *)"x";
    assert_int_equal(ferry_store_run_snapshot_get(st, id, &snap, &saved_by, &err), FERRY_OK);
    assert_null(snap);
    assert_int_equal(saved_by, 0);
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 1, &a1, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_snapshot_set(st, id, a1, "00000003-0000001B-1", &err), FERRY_OK);
    assert_int_equal(ferry_store_run_snapshot_get(st, id, &snap, &saved_by, &err), FERRY_OK);
    assert_string_equal(snap, "00000003-0000001B-1");
    assert_int_equal(saved_by, a1);
    ferry_free(snap);
    /* a fenced attempt cannot replace it */
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 2, &a2, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_snapshot_set(st, id, a1, "stale", &err), FERRY_EFENCED);
    assert_int_equal(ferry_store_run_snapshot_get(st, id, &snap, &saved_by, &err), FERRY_OK);
    assert_string_equal(snap, "00000003-0000001B-1");
    ferry_free(snap);
    /* it is no checkpoint of any resource */
    struct ferry_checkpoint *cps = NULL;
    int n = -1;
    assert_int_equal(ferry_store_run_checkpoints(st, id, NULL, &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_checkpoints_free(cps, n);
    assert_int_equal(ferry_store_run_snapshot_get(st, id + 1000, &snap, NULL, &err),
                     FERRY_ENOTFOUND);
    assert_null(snap);
}

static void test_fencing(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t id = new_run(st, "p", "v");
    int a1 = 0, a2 = 0;
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 1, &a1, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a1, "t", 0, "{\"k\":1}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_pending_checkpoint_save(st, id, a1, "t", 1, "{\"k\":10}", &err),
                     FERRY_OK);
    /* the reaper fails attempt 1, a new worker takes over */
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 2, &a2, &err), FERRY_OK);
    assert_int_equal(a2, a1 + 1);

    assert_int_equal(ferry_store_run_set_state(st, id, a1, FERRY_RUN_COMPLETED, NULL, &err),
                     FERRY_EFENCED);
    char needle[64];
    snprintf(needle, sizeof needle, "run %lld", (long long)id);
    assert_non_null(strstr(err.message, needle));
    snprintf(needle, sizeof needle, "attempt %d", a1);
    assert_non_null(strstr(err.message, needle));
    snprintf(needle, sizeof needle, "attempt is %d", a2);
    assert_non_null(strstr(err.message, needle));
    assert_names_path(&err, ferry_store_path(f->st));

    assert_int_equal(ferry_store_run_heartbeat(st, id, a1, &err), FERRY_EFENCED);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a1, "t", 0, "{\"k\":99}", &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_pending_checkpoint_save(st, id, a1, "t", 0, "{\"k\":99}", &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_pending_promote(st, id, a1, &err), FERRY_EFENCED);

    /* nothing the stale attempt tried moved anything */
    struct ferry_run_info r;
    assert_int_equal(ferry_store_run_get(st, id, &r, &err), FERRY_OK);
    assert_int_equal(r.state, FERRY_RUN_RUNNING);
    assert_int_equal(r.attempt, a2);
    ferry_run_info_clear(&r);
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    assert_int_equal(ferry_store_run_checkpoints(st, id, "t", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(cps[0].position, "{\"k\":1}");
    ferry_checkpoints_free(cps, n);

    /* fenced inside an explicit transaction too, and the transaction stays usable */
    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a1, "t", 0, "{\"k\":98}", &err),
                     FERRY_EFENCED);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a2, "t", 0, "{\"k\":2}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_commit(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoints(st, id, "t", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(cps[0].position, "{\"k\":2}");
    ferry_checkpoints_free(cps, n);

    /* the current attempt can, and a stale attempt's pending rows are never promoted */
    assert_int_equal(ferry_store_pending_promote(st, id, a2, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoints(st, id, "t", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    ferry_checkpoints_free(cps, n);
    assert_int_equal(ferry_store_run_set_state(st, id, a2, FERRY_RUN_COMPLETED, NULL, &err),
                     FERRY_OK);

    assert_int_equal(ferry_store_run_set_state(st, 4040, 1, FERRY_RUN_COMPLETED, NULL, &err),
                     FERRY_ENOTFOUND);
}

/* ---- resources, plans, checkpoints ---- */

static void test_resources(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t id = new_run(st, "p", "v");
    struct ferry_resource_state rs = {.rows = 3};
    snprintf(rs.resource, sizeof rs.resource, "public.orders");
    snprintf(rs.mode, sizeof rs.mode, "incremental");
    snprintf(rs.write, sizeof rs.write, "upsert");
    snprintf(rs.route, sizeof rs.route, "public.orders -> sqlite:orders");
    assert_int_equal(ferry_store_resource_upsert(st, id, &rs, &err), FERRY_OK);
    assert_int_equal(
        ferry_store_resource_add_counts(st, id, "public.orders", 10, 100, 1, 1, 0, &err), FERRY_OK);
    /* a second upsert (resumed attempt) keeps counters and the known route */
    struct ferry_resource_state again = {0};
    snprintf(again.resource, sizeof again.resource, "public.orders");
    snprintf(again.state, sizeof again.state, "running");
    assert_int_equal(ferry_store_resource_upsert(st, id, &again, &err), FERRY_OK);
    /* add_counts and set_state create a row they do not find */
    assert_int_equal(ferry_store_resource_add_counts(st, id, "users", 1, 2, 1, 0, 1, &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_resource_set_state(st, id, "users", "failed", "boom", &err),
                     FERRY_OK);
    assert_int_equal(
        ferry_store_resource_set_state(st, id, "public.orders", "completed", NULL, &err), FERRY_OK);

    struct ferry_resource_state *v = NULL;
    int n = 0;
    assert_int_equal(ferry_store_resource_list(st, id, &v, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].resource, "public.orders");
    assert_string_equal(v[0].mode, "incremental");
    assert_string_equal(v[0].write, "upsert");
    assert_string_equal(v[0].route, "public.orders -> sqlite:orders");
    assert_string_equal(v[0].state, "completed");
    assert_int_equal(v[0].rows, 13);
    assert_int_equal(v[0].bytes, 100);
    assert_int_equal(v[0].verified, 1);
    assert_string_equal(v[1].resource, "users");
    assert_string_equal(v[1].state, "failed");
    assert_string_equal(v[1].error, "boom");
    assert_int_equal(v[1].diverged, 1);
    ferry_free(v);

    assert_int_equal(ferry_store_resource_add_counts(st, 999, "x", 1, 1, 1, 0, 0, &err),
                     FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "run 999"));
    assert_int_equal(ferry_store_resource_upsert(st, 999, &rs, &err), FERRY_ENOTFOUND);
}

static void test_plans_frozen(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t id = new_run(st, "p", "v");
    char *plan = (char *)"sentinel";
    assert_int_equal(ferry_store_plan_get(st, id, "orders", &plan, &err), FERRY_OK);
    assert_null(plan);
    assert_int_equal(ferry_store_plan_put(st, id, "orders", "{\"shards\":[1,2]}", &err), FERRY_OK);
    assert_int_equal(ferry_store_plan_put(st, id, "orders", "{\"shards\":[1,2]}", &err),
                     FERRY_ECONFLICT);
    assert_non_null(strstr(err.message, "orders"));
    assert_int_equal(ferry_store_plan_put(st, id, "orders", "{\"shards\":[9]}", &err),
                     FERRY_ECONFLICT);
    assert_int_equal(ferry_store_plan_get(st, id, "orders", &plan, &err), FERRY_OK);
    assert_string_equal(plan, "{\"shards\":[1,2]}");
    ferry_free(plan);
    assert_int_equal(ferry_store_plan_put(st, id, "users", "{not json", &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "users"));
    assert_int_equal(ferry_store_plan_put(st, 31337, "users", "{}", &err), FERRY_ENOTFOUND);
}

static void test_checkpoints(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t id = new_run(st, "p", "v");
    int a = 0;
    assert_int_equal(ferry_store_run_begin_attempt(st, id, 1, &a, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a, "b", 0, "{\"k\":1}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a, "a", 1, "{\"k\":2}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a, "a", 0, "{\"k\":3}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a, "a", 0, "{\"k\":4}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoint_save(st, id, a, "a", 0, "not json", &err),
                     FERRY_EINVAL);
    assert_non_null(strstr(err.message, "shard 0"));

    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    assert_int_equal(ferry_store_run_checkpoints(st, id, "a", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cps[0].shard, 0);
    assert_string_equal(cps[0].position, "{\"k\":4}");
    assert_int_equal(cps[0].run_id, id);
    assert_int_equal(cps[1].shard, 1);
    ferry_checkpoints_free(cps, n);
    assert_int_equal(ferry_store_run_checkpoints(st, id, NULL, &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(cps[2].resource, "b");
    ferry_checkpoints_free(cps, n);

    /* pending: invisible until promoted, then gone from pending */
    assert_int_equal(ferry_store_pending_checkpoint_save(st, id, a, "a", 0, "{\"k\":5}", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_pending_checkpoint_save(st, id, a, "c", 0, "\"0/16B3748\"", &err),
                     FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoints(st, id, "a", &cps, &n, &err), FERRY_OK);
    assert_string_equal(cps[0].position, "{\"k\":4}");
    ferry_checkpoints_free(cps, n);
    assert_int_equal(ferry_store_pending_promote(st, id, a, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_checkpoints(st, id, "a", &cps, &n, &err), FERRY_OK);
    assert_string_equal(cps[0].position, "{\"k\":5}");
    ferry_checkpoints_free(cps, n);
    assert_int_equal(ferry_store_run_checkpoints(st, id, "c", &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(cps[0].position, "\"0/16B3748\"");
    ferry_checkpoints_free(cps, n);
    assert_int_equal(raw_int(f->sd.path, "SELECT count(*) FROM \"pending_checkpoints\""), 0);

    /* route checkpoints */
    assert_int_equal(
        ferry_store_route_checkpoint_save(st, "p", "v", "a -> sqlite:a", 0, "{\"w\":1}", id, &err),
        FERRY_OK);
    assert_int_equal(
        ferry_store_route_checkpoint_save(st, "p", "v", "a -> sqlite:a", 0, "{\"w\":2}", id, &err),
        FERRY_OK);
    assert_int_equal(
        ferry_store_route_checkpoint_save(st, "p", "v2", "a -> sqlite:a", 0, "{\"w\":7}", id, &err),
        FERRY_OK);
    assert_int_equal(
        ferry_store_route_checkpoint_save(st, "q", "v", "z -> files:z", 3, "{}", id, &err),
        FERRY_OK);
    assert_int_equal(ferry_store_route_checkpoints(st, "p", "v", "a -> sqlite:a", &cps, &n, &err),
                     FERRY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(cps[0].position, "{\"w\":2}");
    assert_string_equal(cps[0].resource, "a -> sqlite:a");
    assert_string_equal(cps[0].version, "v");
    ferry_checkpoints_free(cps, n);
    char **pipes = NULL;
    assert_int_equal(ferry_store_route_checkpoint_list(st, NULL, &cps, &pipes, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_string_equal(pipes[0], "p");
    assert_string_equal(cps[0].version, "v");
    assert_string_equal(pipes[1], "p");
    assert_string_equal(cps[1].version, "v2");
    assert_string_equal(pipes[2], "q");
    assert_int_equal(cps[2].shard, 3);
    ferry_checkpoints_free(cps, n);
    ferry_store_strings_free(pipes, n);
    assert_int_equal(ferry_store_route_checkpoint_list(st, "q", &cps, NULL, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    ferry_checkpoints_free(cps, n);
}

/* ---- events and marks ---- */

static void append(struct ferry_store *st, int64_t run, const char *type, const char *payload,
                   int64_t *seq)
{
    struct ferry_event ev = {.run_id = run, .attempt = 1, .payload = (char *)payload};
    snprintf(ev.type, sizeof ev.type, "%s", type);
    snprintf(ev.resource, sizeof ev.resource, "orders");
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_event_append(st, &ev, &err), FERRY_OK);
    assert_true(ev.time_us > 0);
    *seq = ev.seq;
}

static void test_events(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_event_last_seq(st), 0);
    int64_t s[6];
    append(st, 1, "run.started", "{\"pid\":1}", &s[0]);
    append(st, 2, "run.started", NULL, &s[1]);
    append(st, 1, "batch.written", "{\"rows\":5}", &s[2]);
    append(st, 2, "batch.written", "{\"rows\":6}", &s[3]);
    append(st, 1, "run.completed", "{}", &s[4]);
    for (int i = 1; i < 5; i++)
        assert_true(s[i] > s[i - 1]);
    assert_int_equal(ferry_store_event_last_seq(st), s[4]);

    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(st, 0, 0, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 5);
    assert_int_equal(evs[1].seq, s[1]);
    assert_string_equal(evs[1].payload, "{}");
    assert_string_equal(evs[2].type, "batch.written");
    assert_string_equal(evs[2].resource, "orders");
    assert_string_equal(evs[2].payload, "{\"rows\":5}");
    assert_int_equal(evs[2].attempt, 1);
    ferry_events_free(evs, n);

    assert_int_equal(ferry_store_event_read(st, s[1], 0, 2, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(evs[0].seq, s[2]);
    assert_int_equal(evs[1].seq, s[3]);
    ferry_events_free(evs, n);

    assert_int_equal(ferry_store_event_read(st, 0, 2, 100, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(evs[0].seq, s[1]);
    assert_int_equal(evs[1].seq, s[3]);
    ferry_events_free(evs, n);

    assert_int_equal(ferry_store_event_read(st, s[4], 0, 100, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_events_free(evs, n);

    struct ferry_event bad = {.run_id = 1, .payload = (char *)"[1,2]"};
    snprintf(bad.type, sizeof bad.type, "run.started");
    assert_int_equal(ferry_store_event_append(st, &bad, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "run.started"));
    bad.payload = (char *)"{\"a\":";
    assert_int_equal(ferry_store_event_append(st, &bad, &err), FERRY_EINVAL);
    assert_int_equal(ferry_store_event_last_seq(st), s[4]);

    /* sequences are never reused, even after the log is pruned */
    raw_exec(f->sd.path, "DELETE FROM \"events\"");
    append(st, 1, "run.started", "{}", &s[5]);
    assert_true(s[5] > s[4]);
}

/* append_n: in order, consecutive seqs, one transaction; a bad payload anywhere appends
 * none (seqs 0); inside an explicit transaction it is a savepoint, and the caller's rollback
 * takes the events back with the rest. */
static void test_events_append_n(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    int64_t first = 0;
    append(st, 1, "run.started", "{}", &first);
    struct ferry_event evs[3];
    const char *payloads[3] = {"{\"rows\":5}", "{\"seq\":1}", "{\"seq\":1,\"encoded_crc\":2}"};
    const char *types[3] = {"batch.written", "batch.integrity_verified",
                            "batch.encoded_integrity_verified"};
    memset(evs, 0, sizeof evs);
    for (int i = 0; i < 3; i++) {
        evs[i].run_id = 1;
        evs[i].attempt = 1;
        snprintf(evs[i].type, sizeof evs[i].type, "%s", types[i]);
        evs[i].payload = (char *)payloads[i];
    }
    assert_int_equal(ferry_store_event_append_n(st, evs, 3, &err), FERRY_OK);
    assert_int_equal(evs[0].seq, first + 1);
    assert_int_equal(evs[1].seq, first + 2);
    assert_int_equal(evs[2].seq, first + 3);
    assert_true(evs[2].time_us > 0);
    struct ferry_event *got = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(st, first, 0, 0, &got, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(got[i].type, types[i]);
        assert_string_equal(got[i].payload, payloads[i]);
    }
    ferry_events_free(got, n);

    /* the last one is not an object: none of the three */
    for (int i = 0; i < 3; i++)
        evs[i].seq = evs[i].time_us = 0;
    evs[2].payload = (char *)"[1]";
    assert_int_equal(ferry_store_event_append_n(st, evs, 3, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "batch.encoded_integrity_verified"));
    for (int i = 0; i < 3; i++)
        assert_int_equal(evs[i].seq, 0);
    assert_int_equal(ferry_store_event_last_seq(st), first + 3);

    /* inside the caller's transaction: a savepoint, rolled back with it */
    evs[2].payload = (char *)payloads[2];
    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_event_append_n(st, evs, 3, &err), FERRY_OK);
    assert_int_equal(evs[2].seq, evs[0].seq + 2);
    ferry_store_rollback(st);
    assert_int_equal(ferry_store_event_read(st, first + 3, 0, 0, &got, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    ferry_events_free(got, n);
    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_event_append_n(st, evs, 2, &err), FERRY_OK);
    assert_int_equal(ferry_store_commit(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_event_read(st, first + 3, 0, 0, &got, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(got[1].seq, got[0].seq + 1);
    ferry_events_free(got, n);
}

static void test_marks(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t seq = 99;
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 0);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 41, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 42, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_set(f->st, "other", 7, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 42);
    assert_int_equal(ferry_store_mark_get(f->st, "other", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 7);
}

static void test_transactions(void **state)
{
    struct fx *f = *state;
    struct ferry_store *st = f->st;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_begin(st, &err), FERRY_EINVAL);
    int64_t gone = new_run(st, "p", "v");
    assert_int_equal(ferry_store_mark_set(st, "tracker", 5, &err), FERRY_OK);
    ferry_store_rollback(st);
    struct ferry_run_info r;
    assert_int_equal(ferry_store_run_get(st, gone, &r, &err), FERRY_ENOTFOUND);
    int64_t seq = -1;
    assert_int_equal(ferry_store_mark_get(st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 0);

    assert_int_equal(ferry_store_begin(st, &err), FERRY_OK);
    int64_t kept = new_run(st, "p", "v");
    assert_int_equal(ferry_store_commit(st, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_get(st, kept, &r, &err), FERRY_OK);
    ferry_run_info_clear(&r);
    assert_int_equal(ferry_store_commit(st, &err), FERRY_EINVAL);
}

/* ---- two handles, two threads, one file ---- */

struct writer_arg {
    const char *path;
    int id;
    int rc;
    char msg[FERRY_ERROR_MESSAGE_MAX];
};

#define WRITES 150

static void *writer(void *p)
{
    struct writer_arg *w = p;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    w->rc = ferry_store_open(w->path, &st, &err);
    for (int i = 0; w->rc == FERRY_OK && i < WRITES; i++) {
        char payload[64];
        snprintf(payload, sizeof payload, "{\"writer\":%d,\"i\":%d}", w->id, i);
        struct ferry_event ev = {.run_id = w->id, .payload = payload};
        snprintf(ev.type, sizeof ev.type, "batch.buffered");
        if (i % 3 == 0) {
            /* an explicit multi-statement transaction, like the tracker's */
            int64_t run = 0;
            w->rc = ferry_store_begin(st, &err);
            if (w->rc == FERRY_OK) w->rc = ferry_store_run_create(st, "p", "v", NULL, &run, &err);
            if (w->rc == FERRY_OK) w->rc = ferry_store_event_append(st, &ev, &err);
            if (w->rc == FERRY_OK) w->rc = ferry_store_commit(st, &err);
        } else {
            w->rc = ferry_store_event_append(st, &ev, &err);
        }
    }
    if (w->rc != FERRY_OK) snprintf(w->msg, sizeof w->msg, "%s", err.message);
    ferry_store_close(st);
    return NULL;
}

static void test_two_handles_concurrently(void **state)
{
    struct fx *f = *state;
    struct writer_arg w[2] = {{.path = f->sd.url, .id = 1}, {.path = f->sd.url, .id = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
        if (w[i].rc != FERRY_OK) fail_msg("writer %d: %s", i + 1, w[i].msg);
    struct ferry_event *evs = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_event_read(f->st, 0, 0, 10000, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2 * WRITES);
    int next[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        if (i > 0) assert_true(evs[i].seq > evs[i - 1].seq);
        /* each writer's events appear in its own order */
        char want[64];
        int wid = (int)evs[i].run_id;
        snprintf(want, sizeof want, "{\"writer\":%d,\"i\":%d}", wid, next[wid]++);
        assert_string_equal(evs[i].payload, want);
    }
    ferry_events_free(evs, n);
    assert_int_equal(raw_int(f->sd.path, "SELECT count(*) FROM \"runs\""), 2 * (WRITES / 3));
}

/* Explicit transactions read-modify-write a mark from two handles at once (as two trackers
 * fold): they must run one at a time, so no increment is lost. */
struct counter_arg {
    const char *url;
    int rc;
    char msg[FERRY_ERROR_MESSAGE_MAX];
};

#define INCREMENTS 40

static void *increment(void *p)
{
    struct counter_arg *a = p;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    a->rc = ferry_store_open(a->url, &st, &err);
    for (int i = 0; a->rc == FERRY_OK && i < INCREMENTS; i++) {
        int64_t seq = 0;
        a->rc = ferry_store_begin(st, &err);
        if (a->rc == FERRY_OK) a->rc = ferry_store_mark_get(st, "tracker", &seq, &err);
        usleep(1000); /* widen the window between the read and the write */
        if (a->rc == FERRY_OK) a->rc = ferry_store_mark_set(st, "tracker", seq + 1, &err);
        if (a->rc == FERRY_OK)
            a->rc = ferry_store_commit(st, &err);
        else
            ferry_store_rollback(st);
    }
    if (a->rc != FERRY_OK) snprintf(a->msg, sizeof a->msg, "%s", err.message);
    ferry_store_close(st);
    return NULL;
}

static void test_explicit_transactions_serialise(void **state)
{
    struct fx *f = *state;
    struct counter_arg a[2] = {{.url = f->sd.url}, {.url = f->sd.url}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, increment, &a[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
        if (a[i].rc != FERRY_OK) fail_msg("incrementer %d: %s", i + 1, a[i].msg);
    int64_t seq = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 2 * INCREMENTS);
}

/* Appenders on their own handles while a reader follows `seq > after`: a sequence must
 * never become visible after a larger one, or the reader moves past it and misses it. */
#define APPENDERS 4
#define PER_APPENDER 150

struct appender_arg {
    const char *url;
    int id, rc;
};

static void *appender(void *p)
{
    struct appender_arg *a = p;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    a->rc = ferry_store_open(a->url, &st, &err);
    for (int i = 0; a->rc == FERRY_OK && i < PER_APPENDER; i++) {
        char payload[64];
        snprintf(payload, sizeof payload, "{\"i\":%d}", i);
        struct ferry_event ev = {.run_id = a->id, .payload = payload};
        snprintf(ev.type, sizeof ev.type, "batch.buffered");
        a->rc = ferry_store_event_append(st, &ev, &err);
    }
    ferry_store_close(st);
    return NULL;
}

static void test_concurrent_appends_never_skipped(void **state)
{
    struct fx *f = *state;
    struct appender_arg a[APPENDERS];
    pthread_t t[APPENDERS];
    for (int i = 0; i < APPENDERS; i++) {
        a[i] = (struct appender_arg){.url = f->sd.url, .id = i + 1};
        assert_int_equal(pthread_create(&t[i], NULL, appender, &a[i]), 0);
    }
    int next[APPENDERS + 1] = {0}, got = 0;
    int64_t after = 0, t0 = ferry_now_mono_us();
    struct ferry_error err = {0};
    while (got < APPENDERS * PER_APPENDER && ferry_now_mono_us() - t0 < 60000000) {
        struct ferry_event *evs = NULL;
        int n = 0;
        assert_int_equal(ferry_store_event_read(f->st, after, 0, 7, &evs, &n, &err), FERRY_OK);
        for (int i = 0; i < n; i++) {
            after = evs[i].seq;
            int id = (int)evs[i].run_id;
            char want[64];
            snprintf(want, sizeof want, "{\"i\":%d}", next[id]++);
            assert_string_equal(evs[i].payload, want); /* none skipped, none twice */
        }
        got += n;
        ferry_events_free(evs, n);
    }
    for (int i = 0; i < APPENDERS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, FERRY_OK);
    }
    assert_int_equal(got, APPENDERS * PER_APPENDER);
}

/* The other process of test_other_process_keeps_our_wal: appends one event, exits. */
static int append_one(const char *path)
{
    struct ferry_store *st = NULL;
    struct ferry_error err = {0};
    int rc = ferry_store_open(path, &st, &err);
    struct ferry_event ev = {.run_id = 2, .payload = (char *)"{\"from\":\"child\"}"};
    snprintf(ev.type, sizeof ev.type, "run.pause_requested");
    if (rc == FERRY_OK) rc = ferry_store_event_append(st, &ev, &err);
    if (rc != FERRY_OK) fprintf(stderr, "append-one: %s\n", err.message);
    ferry_store_close(st);
    return rc == FERRY_OK ? 0 : 1;
}

/* Regression: opening a second handle must not disturb the first one's locks. (A raw
 * open()/close() of the database file drops every POSIX lock the process holds on it; a
 * process that then closes its own connection believes it is the last user, checkpoints and
 * deletes the WAL under us, and commits are lost.) */
static void test_other_process_keeps_our_wal(void **state)
{
    SQLITE_ONLY();
    struct fx *f = *state;
    int64_t s1 = 0, s3 = 0;
    struct ferry_event e1 = {.run_id = 1, .payload = (char *)"{\"n\":1}"};
    snprintf(e1.type, sizeof e1.type, "batch.buffered");
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_event_append(f->st, &e1, &err), FERRY_OK);
    s1 = e1.seq;
    struct ferry_store *second = NULL;
    assert_int_equal(ferry_store_open(f->sd.path, &second, &err), FERRY_OK);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a fresh process image: SQLite connections must not cross a fork */
        execl("/proc/self/exe", "test_store", "--append-one", f->sd.path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char wal[400];
    snprintf(wal, sizeof wal, "%s-wal", f->sd.path);
    struct stat sb;
    assert_int_equal(stat(wal, &sb), 0); /* still ours: the child was not the last user */

    struct ferry_event e3 = {.run_id = 1, .payload = (char *)"{\"n\":3}"};
    snprintf(e3.type, sizeof e3.type, "batch.buffered");
    assert_int_equal(ferry_store_event_append(f->st, &e3, &err), FERRY_OK);
    s3 = e3.seq;
    ferry_store_close(second);

    struct ferry_store *fresh = NULL;
    assert_int_equal(ferry_store_open(f->sd.path, &fresh, &err), FERRY_OK);
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_store_event_read(fresh, 0, 0, 100, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(evs[0].seq, s1);
    assert_string_equal(evs[1].payload, "{\"from\":\"child\"}");
    assert_int_equal(evs[2].seq, s3);
    ferry_events_free(evs, n);
    ferry_store_close(fresh);
}

static void test_state_names(void **state)
{
    (void)state;
    enum ferry_run_state s;
    for (int i = 0; i < FERRY_RUN_STATE_MAX; i++) {
        assert_int_equal(ferry_run_state_from_name(ferry_run_state_name(i), &s), FERRY_OK);
        assert_int_equal((int)s, i);
    }
    assert_string_equal(ferry_run_state_name(FERRY_RUN_CANCELED), "canceled");
    assert_int_equal(ferry_run_state_from_name("exploded", &s), FERRY_EINVAL);
    assert_int_equal(ferry_run_state_from_name(NULL, &s), FERRY_EINVAL);
    assert_true(ferry_run_state_is_final(FERRY_RUN_FAILED));
    assert_false(ferry_run_state_is_final(FERRY_RUN_PAUSED));
}

/* ---- PostgreSQL only ---- */

#define PG_ONLY()                                                                                  \
    do {                                                                                           \
        if (!state_is_pg()) skip();                                                                \
    } while (0)

/* The label never holds the password; reopening (pooled connection) applies nothing twice;
 * the schema was created with every table. */
static void test_pg_label_and_reopen(void **state)
{
    PG_ONLY();
    struct fx *f = *state;
    char label[512];
    snprintf(label, sizeof label, "%s", ferry_store_path(f->st));
    assert_non_null(strstr(label, f->sd.schema));
    assert_non_null(strstr(label, "postgres://"));
    const char *pw = getenv("PGPASSWORD");
    if (pw && pw[0]) assert_null(strstr(label, pw));
    int v = ferry_store_schema_version(f->st);
    assert_true(v >= 6);
    for (int i = 0; i < 3; i++) {
        ferry_store_close(f->st);
        f->st = NULL;
        struct ferry_error err = {0};
        assert_int_equal(ferry_store_open(f->sd.url, &f->st, &err), FERRY_OK);
        assert_int_equal(ferry_store_schema_version(f->st), v);
        /* The pooled session is pinned to this schema again. */
        assert_int_equal(ferry_store_pipeline_put(f->st, "p", "v1", "{}", &err), FERRY_OK);
    }
    assert_int_equal(raw_int(NULL, "SELECT count(*) FROM \"schema_migrations\""), v);
    assert_int_equal(raw_int(NULL, "SELECT count(*) FROM \"pipelines\""), 1);
    char id1[64], id2[64];
    struct ferry_error err = {0};
    assert_int_equal(ferry_store_instance_id(f->st, id1, sizeof id1, &err), FERRY_OK);
    assert_int_equal(strlen(id1), 16);
    assert_int_equal(ferry_store_instance_id(f->st, id2, sizeof id2, &err), FERRY_OK);
    assert_string_equal(id1, id2);
    assert_int_equal(ferry_store_set_sync_full(f->st, false, &err), FERRY_OK);

    /* The URL through env: and file: references (kept off command lines). */
    setenv("FERRY_TEST_STORE_REF", f->sd.url, 1);
    struct ferry_store *ref = NULL;
    assert_int_equal(ferry_store_open("env:FERRY_TEST_STORE_REF", &ref, &err), FERRY_OK);
    assert_string_equal(ferry_store_path(ref), label);
    assert_int_equal(ferry_store_instance_id(ref, id2, sizeof id2, &err), FERRY_OK);
    assert_string_equal(id1, id2);
    ferry_store_close(ref);
    char file[400];
    snprintf(file, sizeof file, "%s/store-url", f->sd.dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fprintf(fp, "%s\n", f->sd.url);
    fclose(fp);
    char fref[420];
    snprintf(fref, sizeof fref, "file:%s", file);
    assert_int_equal(ferry_store_open(fref, &ref, &err), FERRY_OK);
    assert_int_equal(ferry_store_instance_id(ref, id2, sizeof id2, &err), FERRY_OK);
    assert_string_equal(id1, id2);
    ferry_store_close(ref);
    unsetenv("FERRY_TEST_STORE_REF");
    assert_int_equal(ferry_store_open("env:FERRY_TEST_STORE_REF", &ref, &err), FERRY_ECONFIG);
    assert_null(ref);
}

/* A schema with tables ferry did not create is refused and left alone. */
static void test_pg_foreign_schema_refused(void **state)
{
    PG_ONLY();
    struct fx *f = *state;
    char sql[512], url[1200];
    snprintf(sql, sizeof sql,
             "SET client_min_messages = warning; DROP SCHEMA IF EXISTS \"%s_x\" CASCADE;"
             " CREATE SCHEMA \"%s_x\"; CREATE TABLE \"%s_x\".\"orders\" (\"id\" int)",
             f->sd.schema, f->sd.schema, f->sd.schema);
    assert_int_equal(state_pg_exec(sql, NULL, 0), 0);
    snprintf(url, sizeof url, "%s_x", f->sd.url);
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(url, &st, &err), FERRY_ESTORE);
    assert_null(st);
    assert_non_null(strstr(err.message, "did not create"));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_tables WHERE schemaname = '%s_x'",
             f->sd.schema);
    char out[32];
    assert_int_equal(state_pg_exec(sql, out, sizeof out), 0);
    assert_string_equal(out, "1");
    snprintf(sql, sizeof sql, "SET client_min_messages = warning; DROP SCHEMA \"%s_x\" CASCADE",
             f->sd.schema);
    state_pg_exec(sql, NULL, 0);
}

struct opener {
    const char *url;
    int rc, version;
};

static void *open_fresh(void *p)
{
    struct opener *o = p;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    o->rc = ferry_store_open(o->url, &st, &err);
    if (o->rc != FERRY_OK) fprintf(stderr, "open: %s\n", err.message);
    o->version = st ? ferry_store_schema_version(st) : 0;
    ferry_store_close(st);
    return NULL;
}

/* Three processes' worth of handles opening a fresh schema at once: the advisory lock lets
 * one migrate, the others find it done. */
static void test_pg_concurrent_first_open(void **state)
{
    PG_ONLY();
    struct fx *f = *state;
    char url[1200];
    snprintf(url, sizeof url, "%s_c", f->sd.url);
    struct opener o[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        o[i] = (struct opener){.url = url};
        pthread_create(&t[i], NULL, open_fresh, &o[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o[i].rc, FERRY_OK);
        assert_int_equal(o[i].version, ferry_store_schema_version(f->st));
    }
    char sql[256], out[32];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s_c\".\"schema_migrations\"", f->sd.schema);
    assert_int_equal(state_pg_exec(sql, out, sizeof out), 0);
    assert_int_equal(atoi(out), ferry_store_schema_version(f->st));
    snprintf(sql, sizeof sql, "SET client_min_messages = warning; DROP SCHEMA \"%s_c\" CASCADE",
             f->sd.schema);
    state_pg_exec(sql, NULL, 0);
}

/* Unreachable server and wrong password: one clear error naming host, port and database,
 * never the password. */
static void test_pg_connection_errors(void **state)
{
    PG_ONLY();
    (void)state;
    struct ferry_error err = {0};
    struct ferry_store *st = NULL;
    assert_int_equal(
        ferry_store_open("postgres://someone:s3cret-canary@127.0.0.1:1/nodb", &st, &err),
        FERRY_EIO);
    assert_null(st);
    assert_null(strstr(err.message, "s3cret-canary"));
    assert_non_null(strstr(err.message, "127.0.0.1"));
    assert_non_null(strstr(err.message, "port 1"));
    assert_non_null(strstr(err.message, "nodb"));

    const char *host = getenv("PGHOST"), *port = getenv("PGPORT");
    if (host == NULL || port == NULL) return;
    char url[256];
    snprintf(url, sizeof url, "postgres://ferry_admin:wrong-canary@%s:%s/ferry", host, port);
    assert_int_equal(ferry_store_open(url, &st, &err), FERRY_EIO);
    assert_null(strstr(err.message, "wrong-canary"));
    assert_non_null(strstr(err.message, port));
    assert_non_null(strstr(err.message, "ferry"));
}

/* A statement that fails inside an explicit transaction spoils it on PostgreSQL: commit
 * must say so rather than report success. Refusals the store decides itself (fencing, a
 * frozen plan) are not statement failures and leave the transaction usable, as on SQLite. */
static void test_pg_failed_statement_spoils_transaction(void **state)
{
    PG_ONLY();
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t run = new_run(f->st, "p", "v");
    assert_int_equal(ferry_store_begin(f->st, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 9, &err), FERRY_OK);
    assert_int_equal(ferry_store_resource_add_counts(f->st, run + 1000, "x", 1, 1, 1, 0, 0, &err),
                     FERRY_ENOTFOUND);
    assert_int_not_equal(ferry_store_commit(f->st, &err), FERRY_OK);
    int64_t seq = -1;
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 0);
    /* A fenced check inside the transaction (a savepoint) leaves it usable. */
    assert_int_equal(ferry_store_begin(f->st, &err), FERRY_OK);
    assert_int_equal(ferry_store_run_heartbeat(f->st, run, 5, &err), FERRY_EFENCED);
    assert_int_equal(ferry_store_plan_put(f->st, run, "r", "{}", &err), FERRY_OK);
    assert_int_equal(ferry_store_plan_put(f->st, run, "r", "{}", &err), FERRY_ECONFLICT);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 10, &err), FERRY_OK);
    assert_int_equal(ferry_store_commit(f->st, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 10);
}

/* Ends every store session of the database (as a server restart would). */
static void kill_store_sessions(void)
{
    /* With a timeout, pg_terminate_backend returns once the sessions are gone. */
    assert_int_equal(state_pg_exec("SELECT count(pg_terminate_backend(pid, 10000)) FROM"
                                   " pg_stat_activity WHERE application_name = 'ferry-state'",
                                   NULL, 0),
                     0);
}

/* The server drops the connection: the statement that meets it fails naming the loss, the
 * next one reconnects (session pinned to the schema, statements prepared again); inside a
 * transaction nothing reconnects until the caller rolls back. Pooled idle connections the
 * server dropped are replaced at open. */
static void test_pg_reconnects(void **state)
{
    PG_ONLY();
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t run = new_run(f->st, "p", "v");
    kill_store_sessions();
    struct ferry_run_info r;
    assert_int_equal(ferry_store_run_get(f->st, run, &r, &err), FERRY_EIO);
    assert_non_null(strstr(err.message, "lost the connection"));
    assert_int_equal(ferry_store_run_get(f->st, run, &r, &err), FERRY_OK);
    ferry_run_info_clear(&r);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 3, &err), FERRY_OK);

    assert_int_equal(ferry_store_begin(f->st, &err), FERRY_OK);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 4, &err), FERRY_OK);
    kill_store_sessions();
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 5, &err), FERRY_EIO);
    assert_int_equal(ferry_store_mark_set(f->st, "tracker", 6, &err), FERRY_EIO);
    assert_null(strstr(err.message, getenv("PGPASSWORD") ? getenv("PGPASSWORD") : "\x01"));
    assert_non_null(strstr(err.message, "inside a transaction"));
    assert_int_not_equal(ferry_store_commit(f->st, &err), FERRY_OK);
    int64_t seq = 0;
    assert_int_equal(ferry_store_mark_get(f->st, "tracker", &seq, &err), FERRY_OK);
    assert_int_equal(seq, 3);

    /* Closed handles went to the pool; the server drops those too; opening still works. */
    struct ferry_store *more[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        assert_int_equal(ferry_store_open(f->sd.url, &more[i], &err), FERRY_OK);
    for (int i = 0; i < 3; i++)
        ferry_store_close(more[i]);
    kill_store_sessions();
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ferry_store_open(f->sd.url, &more[i], &err), FERRY_OK);
        assert_int_equal(ferry_store_mark_get(more[i], "tracker", &seq, &err), FERRY_OK);
        assert_int_equal(seq, 3);
    }
    for (int i = 0; i < 3; i++)
        ferry_store_close(more[i]);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--append-one") == 0) return append_one(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_creates_folders_and_migrates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_database_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parent_is_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_page, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_unfinished, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fencing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plans_frozen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_append_n, setup, teardown),
        cmocka_unit_test_setup_teardown(test_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_handles_concurrently, setup, teardown),
        cmocka_unit_test_setup_teardown(test_explicit_transactions_serialise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_appends_never_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_process_keeps_our_wal, setup, teardown),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test_setup_teardown(test_pg_label_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_foreign_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_concurrent_first_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_connection_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_failed_statement_spoils_transaction, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pg_reconnects, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
