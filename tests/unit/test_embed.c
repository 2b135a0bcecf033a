/* tests/unit/test_embed.c - the embedding API (include/ferry/ferry.h) as a program uses it:
 * runs of the sample source into the callback sink in a temporary state file, and what the
 * API refuses. The end-to-end test of the installed library is tests/e2e/embed.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sqlite3.h>
#include "unit.h"
#include "ferry/core.h"
#include "ferry/ferry.h"

static char dir[64];
static char state[128];

static const char *sample_yaml(int rows, const char *sink)
{
    static char text[512];
    snprintf(text, sizeof text,
             "version: 1\nname: emb\nsource:\n  type: sample\n  rows: %d\n  seed: 3\n"
             "  resources:\n    - table: orders\nsink:\n  type: %s\nbatch:\n  rows: 100\n",
             rows, sink);
    return text;
}

struct got {
    int64_t rows, batches, id_sum;
    int events, completed_events;
    int fail_at;             /* on_batch returns 7 at this batch (0: never) */
    struct ferry_job *other; /* run from another thread during the first batch */
    int other_rc;
    char other_code[24];
};

static void *run_other(void *arg)
{
    struct got *g = arg;
    struct ferry_job_options o = {.state_path = state, .on_batch = NULL};
    struct ferry_status st;
    g->other_rc = ferry_job_run(g->other, &o, NULL, &st);
    snprintf(g->other_code, sizeof g->other_code, "%s", st.code_name);
    return NULL;
}

static int on_batch(void *ctx, const struct ferry_batch_info *b, struct ArrowSchema *schema,
                    struct ArrowArray *array)
{
    struct got *g = ctx;
    assert_string_equal(schema->format, "+s");
    assert_string_equal(schema->children[0]->name, "id");
    assert_string_equal(schema->children[0]->format, "l");
    assert_int_equal(array->length, b->rows);
    assert_string_equal(b->resource, "orders");
    assert_string_equal(b->table, "orders");
    const struct ArrowArray *ids = array->children[0];
    const int64_t *v = ids->buffers[1];
    for (int64_t i = 0; i < array->length; i++)
        g->id_sum += v[ids->offset + i];
    g->rows += array->length;
    g->batches++;
    schema->release(schema);
    array->release(array);
    if (g->other != NULL && g->batches == 1) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, run_other, g), 0);
        pthread_join(t, NULL);
    }
    return g->batches == g->fail_at ? 7 : 0;
}

static void on_event(void *ctx, const struct ferry_event_info *ev)
{
    struct got *g = ctx;
    g->events++;
    if (strcmp(ev->type, "run.completed") == 0) g->completed_events++;
}

static struct ferry_job *load(const char *yaml)
{
    struct ferry_job *job = NULL;
    struct ferry_status st;
    int rc = ferry_job_load(yaml, strlen(yaml), "emb.yaml", &job, &st);
    if (rc != 0) fail_msg("load: %s", st.message);
    return job;
}

static void test_run_delivers_every_row(void **unused)
{
    struct ferry_job *job = load(sample_yaml(1000, "callback"));
    assert_string_equal(ferry_job_name(job), "emb");
    assert_int_equal(strlen(ferry_job_version(job)), 64);
    struct got g = {0};
    struct ferry_job_options o = {
        .state_path = state, .on_event = on_event, .on_batch = on_batch, .ctx = &g};
    struct ferry_job_result res;
    struct ferry_status st;
    int rc = ferry_job_run(job, &o, &res, &st);
    if (rc != 0) fail_msg("run: %s", st.message);
    assert_string_equal(res.state, "completed");
    assert_int_equal(res.rows, 1000);
    assert_int_equal(g.rows, 1000);
    assert_int_equal(g.id_sum, 1000 * 1001 / 2);
    assert_true(g.batches >= 10);
    assert_int_equal(g.completed_events, 1);
    assert_string_equal(st.code_name, "ok");
    assert_int_equal(res.converted, 0);
    const struct ferry_converted *conv = (const void *)1;
    assert_int_equal(ferry_job_converted(job, &conv), 0);
    assert_null(conv);
    ferry_job_free(job);
}

static int64_t sql_count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* on_unrepresentable: null into SQLite (which has no -0): the run's result counts the
 * converted values, ferry_job_converted lists them per column, and the destination holds
 * NULL exactly there (NaN is kept as the text NaN, not converted). */
static void test_converted_counts(void **unused)
{
    char path[192], db_path[192], yaml[1024];
    snprintf(path, sizeof path, "%s/edges.csv", dir);
    snprintf(db_path, sizeof db_path, "%s/conv.db", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("id,a,b\n1,-0,-0\n2,1.5,2\n3,-0,NaN\n4,-0,-1e-300\n5,0,3\n", f);
    fclose(f);
    snprintf(yaml, sizeof yaml,
             "version: 1\nname: conv\nsource:\n  type: files\n  path: %s\n  resources:\n"
             "    - {table: edges, schema: {id: int64, a: float64, b: float64}}\n"
             "sink:\n  type: sqlite\n  path: %s\non_unrepresentable: null\n",
             path, db_path);
    struct ferry_job *job = load(yaml);
    struct ferry_job_options o = {.state_path = state};
    struct ferry_job_result res;
    struct ferry_status st;
    int rc = ferry_job_run(job, &o, &res, &st);
    if (rc != 0) fail_msg("run: %s", st.message);
    assert_string_equal(res.state, "completed");
    assert_int_equal(res.rows, 5);
    assert_int_equal(res.converted, 4);
    const struct ferry_converted *c = NULL;
    assert_int_equal(ferry_job_converted(job, &c), 2);
    assert_string_equal(c[0].resource, "edges");
    assert_string_equal(c[0].column, "a");
    assert_int_equal(c[0].to_null, 3);
    assert_int_equal(c[0].clamped, 0);
    assert_string_equal(c[1].resource, "edges");
    assert_string_equal(c[1].column, "b");
    assert_int_equal(c[1].to_null, 1);
    assert_int_equal(c[1].clamped, 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(db_path, &db), SQLITE_OK);
    assert_int_equal(sql_count(db, "SELECT count(*) FROM edges WHERE a IS NULL AND id IN (1,3,4)"), 3);
    assert_int_equal(sql_count(db, "SELECT count(*) FROM edges WHERE b IS NULL AND id = 1"), 1);
    assert_int_equal(sql_count(db, "SELECT count(*) FROM edges WHERE a IS NULL OR b IS NULL"), 3);
    assert_int_equal(sql_count(db, "SELECT count(*) FROM edges WHERE b = 'NaN' AND id = 3"), 1);
    assert_int_equal(sql_count(db, "SELECT count(*) FROM edges WHERE b = -1e-300 AND id = 4"), 1);
    sqlite3_close(db);
    /* the counts are the last run's: a run converting nothing lists nothing */
    ferry_job_free(job);
    job = load(sample_yaml(10, "\"null\""));
    rc = ferry_job_run(job, &o, &res, &st);
    if (rc != 0) fail_msg("run: %s", st.message);
    assert_int_equal(res.converted, 0);
    assert_int_equal(ferry_job_converted(job, &c), 0);
    ferry_job_free(job);
}

static void test_refusals(void **unused)
{
    struct ferry_job *job = NULL;
    struct ferry_status st;
    assert_int_not_equal(ferry_job_load("source: [", 9, "bad.yaml", &job, &st), 0);
    assert_null(job);
    assert_string_equal(st.code_name, "config");
    assert_non_null(strstr(st.message, "bad.yaml"));
    assert_int_not_equal(ferry_job_load(NULL, 0, NULL, &job, &st), 0);

    job = load(sample_yaml(10, "callback"));
    struct got g = {0};
    struct ferry_job_options o = {.state_path = NULL, .on_batch = on_batch, .ctx = &g};
    assert_int_not_equal(ferry_job_run(job, &o, NULL, &st), 0);
    assert_non_null(strstr(st.message, "state_path is required"));
    o.state_path = state;
    o.on_batch = NULL;
    assert_int_not_equal(ferry_job_run(job, &o, NULL, &st), 0);
    assert_string_equal(st.code_name, "config");
    assert_non_null(strstr(st.message, "sink type callback needs options.on_batch"));
    ferry_job_free(job);
    /* on_batch refusing a batch fails the run, naming the resource and the batch */
    job = load(sample_yaml(500, "callback"));
    o.on_batch = on_batch;
    g.fail_at = 2;
    struct ferry_job_result res;
    assert_int_not_equal(ferry_job_run(job, &o, &res, &st), 0);
    assert_string_equal(res.state, "failed");
    assert_string_equal(st.code_name, "sink");
    assert_non_null(strstr(st.message, "refused batch 2 of resource orders"));
    ferry_job_free(job);
}

static void test_cancel_before_run_and_conflict(void **unused)
{
    struct ferry_job *job = load(sample_yaml(500, "callback"));
    struct got g = {0};
    /* fresh: not the resume of test_refusals's failed run of the same pipeline */
    struct ferry_job_options o = {
        .state_path = state, .fresh = true, .on_batch = on_batch, .ctx = &g};
    struct ferry_job_result res;
    struct ferry_status st;
    ferry_job_cancel(job);
    assert_int_not_equal(ferry_job_run(job, &o, &res, &st), 0);
    assert_string_equal(res.state, "canceled");
    assert_string_equal(st.code_name, "canceled");
    assert_int_equal(g.rows, 0);
    /* the request was consumed; a run from another thread meanwhile is refused */
    g.other = load(sample_yaml(5, "null"));
    int rc = ferry_job_run(job, &o, &res, &st);
    if (rc != 0) fail_msg("run: %s", st.message);
    assert_int_equal(g.rows, 500);
    assert_int_not_equal(g.other_rc, 0);
    assert_string_equal(g.other_code, "conflict");
    ferry_job_free(g.other);
    ferry_job_free(job);
}

/* ---- two runs at once, one paused ----------------------------------------------------- */

#define PAIR_ROWS 50000

/* One of the two jobs: the ids it received (a count per id), what its callbacks saw. */
struct side {
    const char *name;
    struct ferry_job *job;
    unsigned char seen[PAIR_ROWS + 1];
    int64_t rows, stray; /* stray: ids outside 1..PAIR_ROWS, or a batch that was not "orders" */
    int paused_events, batches;
    int rc;
    struct ferry_job_result res;
    struct ferry_status st;
};

struct pair {
    struct side a, b; /* a is paused at its first batch, b runs to its end */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool b_started, a_done;
    bool timed_out;
};

static struct pair *the_pair;

/* Waits (under p->lock) until *flag, at most two minutes: a hang fails the test. */
static void pair_wait(struct pair *p, const bool *flag)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    while (!*flag && !p->timed_out)
        if (pthread_cond_timedwait(&p->cond, &p->lock, &until) != 0) p->timed_out = true;
}

static void pair_set(struct pair *p, bool *flag)
{
    pthread_mutex_lock(&p->lock);
    *flag = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void take_ids(struct side *s, const struct ferry_batch_info *b, struct ArrowArray *array)
{
    if (strcmp(b->resource, "orders") != 0) s->stray++;
    const struct ArrowArray *ids = array->children[0];
    const int64_t *v = ids->buffers[1];
    for (int64_t i = 0; i < array->length; i++) {
        int64_t id = v[ids->offset + i];
        if (id < 1 || id > PAIR_ROWS)
            s->stray++;
        else if (s->seen[id] < 255)
            s->seen[id]++;
    }
    s->rows += array->length;
}

/* a: once b has a batch in hand, pauses its own job (from its callback, as allowed). b: says
 * it started, then holds its first batch until a's run has ended paused. */
static int pair_batch(void *ctx, const struct ferry_batch_info *b, struct ArrowSchema *schema,
                      struct ArrowArray *array)
{
    struct side *s = ctx;
    struct pair *p = the_pair;
    take_ids(s, b, array);
    schema->release(schema);
    array->release(array);
    if (s->batches++ != 0) return 0;
    if (s == &p->a) {
        pthread_mutex_lock(&p->lock);
        pair_wait(p, &p->b_started);
        pthread_mutex_unlock(&p->lock);
        ferry_job_pause(s->job);
    } else if (s == &p->b) {
        pair_set(p, &p->b_started);
        pthread_mutex_lock(&p->lock);
        pair_wait(p, &p->a_done);
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

static void pair_event(void *ctx, const struct ferry_event_info *ev)
{
    struct side *s = ctx;
    if (strcmp(ev->type, "run.paused") == 0) s->paused_events++;
}

static void side_run(struct side *s)
{
    struct ferry_job_options o = {
        .state_path = state, .on_event = pair_event, .on_batch = pair_batch, .ctx = s};
    s->rc = ferry_job_run(s->job, &o, &s->res, &s->st);
}

static void *side_main(void *arg)
{
    struct side *s = arg;
    side_run(s);
    if (s == &the_pair->a) pair_set(the_pair, &the_pair->a_done);
    return NULL;
}

/* Every id of 1..PAIR_ROWS arrived, and nothing else. */
static void assert_exact(const struct side *s)
{
    assert_int_equal(s->stray, 0);
    for (int64_t id = 1; id <= PAIR_ROWS; id++)
        if (s->seen[id] == 0) fail_msg("%s: id %lld never arrived", s->name, (long long)id);
}

static void test_two_runs_at_once_pause_one(void **unused)
{
    static struct pair p; /* two 50 kB tables: not on the stack */
    memset(&p, 0, sizeof p);
    the_pair = &p;
    assert_int_equal(pthread_mutex_init(&p.lock, NULL), 0);
    assert_int_equal(pthread_cond_init(&p.cond, NULL), 0);
    static char text_a[512], text_b[512];
    snprintf(text_a, sizeof text_a, "%s", sample_yaml(PAIR_ROWS, "callback"));
    snprintf(text_b, sizeof text_b, "%s", sample_yaml(PAIR_ROWS, "callback"));
    /* two pipelines (their own runs and checkpoints) in one state file */
    memcpy(strstr(text_a, "name: emb"), "name: pa1", 9);
    memcpy(strstr(text_b, "name: emb"), "name: pb1", 9);
    p.a.name = "a";
    p.b.name = "b";
    p.a.job = load(text_a);
    p.b.job = load(text_b);
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, side_main, &p.a), 0);
    assert_int_equal(pthread_create(&tb, NULL, side_main, &p.b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_false(p.timed_out);
    /* a: paused, resumable; b: neither paused nor stopped short */
    assert_int_not_equal(p.a.rc, 0);
    assert_string_equal(p.a.st.code_name, "paused");
    assert_string_equal(p.a.res.state, "paused");
    assert_int_equal(p.a.paused_events, 1);
    assert_true(p.a.rows < PAIR_ROWS);
    if (p.b.rc != 0) fail_msg("b: %s", p.b.st.message);
    assert_string_equal(p.b.res.state, "completed");
    assert_int_equal(p.b.paused_events, 0);
    assert_int_equal(p.b.res.rows, PAIR_ROWS);
    assert_int_equal(p.b.rows, PAIR_ROWS);
    assert_exact(&p.b);
    /* a's next run resumes it: together they delivered every row */
    side_run(&p.a);
    if (p.a.rc != 0) fail_msg("a resumed: %s", p.a.st.message);
    assert_true(p.a.res.resumed);
    assert_string_equal(p.a.res.state, "completed");
    assert_exact(&p.a);
    ferry_job_free(p.a.job);
    ferry_job_free(p.b.job);
    pthread_cond_destroy(&p.cond);
    pthread_mutex_destroy(&p.lock);
}

/* Fails the Nth allocation of ferry_job_load, N = 0, 1, ... until it succeeds. */
static void test_load_allocation_failures(void **unused)
{
    const char *text = sample_yaml(10, "callback");
    bool loaded = false;
    for (long n = 0; n < 3000 && !loaded; n++) {
        struct ferry_job *job = NULL;
        struct ferry_status st;
        ferry_mem_fail_after(n);
        int rc = ferry_job_load(text, strlen(text), "emb.yaml", &job, &st);
        ferry_mem_fail_after(-1);
        if (rc == 0) {
            loaded = true;
            ferry_job_free(job);
        } else {
            assert_null(job);
            if (strcmp(st.code_name, "out_of_memory") != 0)
                fail_msg("at %ld: %s %s", n, st.code_name, st.message);
        }
    }
    assert_true(loaded);
}

static int setup(void **unused)
{
    snprintf(dir, sizeof dir, "%s/ferry-embed-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(state, sizeof state, "%s/state.db", dir);
    return 0;
}

static int teardown(void **unused)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_delivers_every_row),
        cmocka_unit_test(test_converted_counts),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cancel_before_run_and_conflict),
        cmocka_unit_test(test_two_runs_at_once_pause_one),
        cmocka_unit_test(test_load_allocation_failures),
    };
    return cmocka_run_group_tests_name("embed", tests, setup, teardown);
}
