/* tests/unit/test_bus.c - every bus implementation against the same cases: the in-process
 * bus over a real SQLite state file always; the PostgreSQL bus when FERRY_TEST_PG_URL is set
 * and the NATS JetStream bus when FERRY_TEST_NATS_URL is set (tests/e2e/bus_backends.sh
 * starts both servers and sets them). Each case gets a fresh state file, hence a fresh
 * instance id, hence its own scope on a shared server. */
#include "state_fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>
#include "unit.h"
#include "bus/bus.h"
#include "ferry/core.h"
#include "store/store.h"

struct backend {
    const char *name;
    const char *url_env; /* NULL: in-process */
    const char *url;     /* its value; "" for in-process */
    const char *bad_url; /* nothing listens there; holds a password that must not leak */
    const char *where;   /* what error messages name */
};

static struct backend backends[] = {
    {"inproc", NULL, "", NULL, NULL},
    {"postgres", "FERRY_TEST_PG_URL", NULL,
     "postgresql://ferry:sekret-pw@127.0.0.1:1/nodb?connect_timeout=3", "PostgreSQL bus at"},
    {"nats", "FERRY_TEST_NATS_URL", NULL, "nats://ferry:sekret-pw@127.0.0.1:1", "NATS bus at"},
};
static const struct backend *be; /* the one the running group tests */

static bool is_inproc(void)
{
    return be->url_env == NULL;
}

struct fx {
    struct state_dir sd;
    struct ferry_bus *bus;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    state_dir_make(&f->sd);
    struct ferry_error err = {0};
    if (ferry_bus_open(be->url, f->sd.url, &f->bus, &err) != FERRY_OK) {
        fprintf(stderr, "open: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    ferry_bus_close(f->bus);
    state_dir_remove(&f->sd);
    free(f);
    return 0;
}

static int64_t emit(struct ferry_bus *bus, int64_t run, const char *type, const char *payload)
{
    struct ferry_event ev = {.run_id = run, .attempt = 1};
    snprintf(ev.type, sizeof ev.type, "%s", type);
    snprintf(ev.resource, sizeof ev.resource, "orders");
    ev.payload = ferry_strdup(payload);
    struct ferry_error err = {0};
    int rc = ferry_bus_publish(bus, &ev, &err);
    if (rc != FERRY_OK) fail_msg("publish: %s", err.message);
    ferry_event_clear(&ev);
    return ev.seq;
}

static int64_t ms_since(int64_t t0)
{
    return (ferry_now_mono_us() - t0) / 1000;
}

static void test_publish_fetch_order(void **state)
{
    struct fx *f = *state;
    int64_t seq[10];
    char p[64];
    for (int i = 0; i < 10; i++) {
        snprintf(p, sizeof p, "{\"i\":%d}", i);
        seq[i] = emit(f->bus, 1 + i % 2, "batch.buffered", p);
        if (i) assert_true(seq[i] > seq[i - 1]);
    }
    struct ferry_event *evs = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 100, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 10);
    for (int i = 0; i < 10; i++) {
        snprintf(p, sizeof p, "{\"i\":%d}", i);
        assert_int_equal(evs[i].seq, seq[i]);
        assert_string_equal(evs[i].payload, p);
        assert_string_equal(evs[i].type, "batch.buffered");
        assert_string_equal(evs[i].resource, "orders");
        assert_int_equal(evs[i].attempt, 1);
        assert_true(evs[i].time_us > 0);
    }
    ferry_events_free(evs, n);

    assert_int_equal(ferry_bus_fetch(f->bus, seq[6], 0, 100, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(evs[0].seq, seq[7]);
    ferry_events_free(evs, n);
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 4, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 4);
    assert_int_equal(evs[3].seq, seq[3]);
    ferry_events_free(evs, n);
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 2, 100, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(evs[i].seq, seq[2 * i + 1]);
    ferry_events_free(evs, n);
}

static void test_emit_and_durability(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    assert_int_equal(ferry_bus_emit(f->bus, 7, 2, "users", "run.started", NULL, &err), FERRY_OK);
    assert_int_equal(ferry_bus_emit(f->bus, 7, 2, NULL, "batch.written", "{\"rows\":3}", &err),
                     FERRY_OK);
    char longtype[80];
    memset(longtype, 'x', sizeof longtype - 1);
    longtype[sizeof longtype - 1] = '\0';
    assert_int_equal(ferry_bus_emit(f->bus, 7, 2, NULL, longtype, "{}", &err), FERRY_EINVAL);
    assert_int_equal(ferry_bus_emit(f->bus, 7, 2, NULL, "run.failed", "{\"code\":", &err),
                     FERRY_EINVAL);
    assert_non_null(strstr(err.message, "run.failed"));
    assert_non_null(strstr(err.message, !is_inproc()    ? be->where
                                        : state_is_pg() ? f->sd.schema
                                                        : f->sd.path));

    struct ferry_event *evs = NULL;
    int n = 0;
    if (!is_inproc()) {
        /* durable when publish returns: a bus opened anew (through an env: reference)
         * sees both */
        /* the sequence space keeps its name across opens (the tracker's mark is keyed by it) */
        char tag[sizeof f->bus->mark_tag];
        snprintf(tag, sizeof tag, "%s", f->bus->mark_tag);
        assert_true(strlen(tag) > 5);
        ferry_bus_close(f->bus);
        char ref[64];
        snprintf(ref, sizeof ref, "env:%s", be->url_env);
        assert_int_equal(ferry_bus_open(ref, f->sd.url, &f->bus, &err), FERRY_OK);
        assert_string_equal(f->bus->mark_tag, tag);
        assert_int_equal(ferry_bus_fetch(f->bus, 0, 7, 10, 0, &evs, &n, &err), FERRY_OK);
        assert_int_equal(n, 2);
        assert_string_equal(evs[0].type, "run.started");
        assert_string_equal(evs[0].resource, "users");
        assert_string_equal(evs[0].payload, "{}");
        assert_int_equal(evs[0].attempt, 2);
        assert_int_equal(evs[0].run_id, 7);
        assert_string_equal(evs[1].payload, "{\"rows\":3}");
        assert_string_equal(evs[1].resource, "");
        ferry_events_free(evs, n);
        return;
    }

    assert_string_equal(f->bus->mark_tag, ""); /* the tracker's mark stays "tracker" */
    /* durable when publish returns: another handle, then a reopened bus, sees it */
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(f->sd.url, &st, &err), FERRY_OK);
    assert_int_equal(ferry_store_event_read(st, 0, 7, 10, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(evs[0].type, "run.started");
    assert_string_equal(evs[0].resource, "users");
    assert_string_equal(evs[0].payload, "{}");
    assert_int_equal(evs[0].attempt, 2);
    assert_string_equal(evs[1].payload, "{\"rows\":3}");
    assert_string_equal(evs[1].resource, "");
    ferry_events_free(evs, n);
    ferry_store_close(st);

    ferry_bus_close(f->bus);
    assert_int_equal(ferry_bus_inproc_open(f->sd.url, &f->bus, &err), FERRY_OK);
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 10, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    ferry_events_free(evs, n);
}

/* n events of run `run`, payload {"k":K,"i":I}, except "{not json" at index `bad`. The
 * payloads are the caller's to free (free_payloads). */
static void make_events(struct ferry_event *evs, int n, int64_t run, int k, int bad)
{
    static const char *const types[] = {"batch.written", "batch.integrity_verified",
                                        "batch.encoded_integrity_verified"};
    struct ferry_error err = {0};
    for (int i = 0; i < n; i++) {
        char p[64];
        if (i == bad)
            snprintf(p, sizeof p, "{not json");
        else
            snprintf(p, sizeof p, "{\"k\":%d,\"i\":%d}", k, i);
        assert_int_equal(ferry_bus_event_init(&evs[i], run, 1, "orders", types[i % 3],
                                              ferry_strdup(p), &err),
                         FERRY_OK);
    }
}

static void free_payloads(struct ferry_event *evs, int n)
{
    for (int i = 0; i < n; i++)
        ferry_event_clear(&evs[i]);
}

/* publish_n: the events of one call are stored in order with consecutive seqs (NATS:
 * increasing) and read back whole; a call with a payload that is not JSON stores none of
 * them on the in-process and PostgreSQL buses (on PostgreSQL the bad one fails inside the
 * transaction, after the first was inserted) and every seq stays 0; NATS publishes in turn
 * and stops at it. */
static void test_publish_n(void **state)
{
    struct fx *f = *state;
    struct ferry_error err = {0};
    int64_t before = emit(f->bus, 5, "run.started", "{}");
    struct ferry_event evs[3];
    make_events(evs, 3, 5, 1, -1);
    assert_int_equal(ferry_bus_publish_n(f->bus, evs, 3, &err), FERRY_OK);
    assert_true(evs[0].seq > before);
    for (int i = 1; i < 3; i++) {
        if (strcmp(be->name, "nats") == 0)
            assert_true(evs[i].seq > evs[i - 1].seq);
        else
            assert_int_equal(evs[i].seq, evs[i - 1].seq + 1);
    }
    int64_t last = evs[2].seq;
    free_payloads(evs, 3);

    make_events(evs, 3, 5, 2, 1); /* the second is not JSON */
    assert_int_equal(ferry_bus_publish_n(f->bus, evs, 3, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "batch.integrity_verified")); /* the bad one */
    bool loop = strcmp(be->name, "nats") == 0;
    assert_true(loop ? evs[0].seq > last : evs[0].seq == 0);
    assert_int_equal(evs[1].seq, 0);
    assert_int_equal(evs[2].seq, 0);
    free_payloads(evs, 3);

    struct ferry_event *got = NULL;
    int n = 0;
    assert_int_equal(ferry_bus_fetch(f->bus, before, 5, 100, 0, &got, &n, &err), FERRY_OK);
    assert_int_equal(n, loop ? 4 : 3);
    const char *want[] = {"{\"k\":1,\"i\":0}", "{\"k\":1,\"i\":1}", "{\"k\":1,\"i\":2}",
                          "{\"k\":2,\"i\":0}"};
    const char *types[] = {"batch.written", "batch.integrity_verified",
                           "batch.encoded_integrity_verified", "batch.written"};
    for (int i = 0; i < n; i++) {
        assert_string_equal(got[i].payload, want[i]);
        assert_string_equal(got[i].type, types[i]);
        assert_string_equal(got[i].resource, "orders");
        assert_int_equal(got[i].run_id, 5);
        assert_int_equal(got[i].attempt, 1);
    }
    assert_int_equal(got[2].seq, last);
    ferry_events_free(got, n);
}

struct nwriter {
    struct ferry_bus *bus;
    int k;
    int64_t seqs[40][3];
    int rc;
};

static void *publish_n_thread(void *arg)
{
    struct nwriter *w = arg;
    struct ferry_error err = {0};
    for (int j = 0; j < 40 && w->rc == FERRY_OK; j++) {
        struct ferry_event evs[3];
        make_events(evs, 3, 6, w->k * 100 + j, -1);
        w->rc = j % 4 == 3 ? ferry_bus_emit(w->bus, 6, 1, "orders", "batch.buffered", "{}", &err)
                           : ferry_bus_publish_n(w->bus, evs, 3, &err);
        for (int i = 0; i < 3; i++)
            w->seqs[j][i] = j % 4 == 3 ? 0 : evs[i].seq;
        free_payloads(evs, 3);
    }
    if (w->rc != FERRY_OK) fprintf(stderr, "publish_n: %s\n", err.message);
    return NULL;
}

/* Four threads publishing batches of three (and single events between them): no other
 * event lands inside a batch (in-process, PostgreSQL) and the reader sees every event once,
 * in seq order. */
static void test_publish_n_concurrent(void **state)
{
    struct fx *f = *state;
    struct nwriter w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].bus = f->bus;
        w[i].k = i + 1;
        assert_int_equal(pthread_create(&t[i], NULL, publish_n_thread, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].rc, FERRY_OK);
    }
    bool loop = strcmp(be->name, "nats") == 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 40; j++) {
            if (j % 4 == 3) continue;
            for (int k = 1; k < 3; k++) {
                if (loop)
                    assert_true(w[i].seqs[j][k] > w[i].seqs[j][k - 1]);
                else
                    assert_int_equal(w[i].seqs[j][k], w[i].seqs[j][k - 1] + 1);
            }
        }
    struct ferry_error err = {0};
    struct ferry_event *got = NULL;
    int n = 0;
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 6, 1000, 0, &got, &n, &err), FERRY_OK);
    assert_int_equal(n, 4 * (30 * 3 + 10));
    for (int i = 1; i < n; i++)
        assert_true(got[i].seq > got[i - 1].seq);
    ferry_events_free(got, n);
}

static void test_fetch_timeout(void **state)
{
    struct fx *f = *state;
    struct ferry_event *evs = NULL;
    int n = -1;
    struct ferry_error err = {0};
    int64_t t0 = ferry_now_mono_us();
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 10, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
    assert_true(ms_since(t0) < 30000); /* did not wait for long (a loaded machine: generous) */
    t0 = ferry_now_mono_us();
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 10, 450, &evs, &n, &err), FERRY_OK);
    int64_t took = ms_since(t0);
    assert_int_equal(n, 0);
    assert_null(evs);
    assert_true(took >= 440);
    assert_true(took < 30000);
    /* events of another run do not end a filtered wait */
    int64_t s = emit(f->bus, 1, "run.started", "{}");
    assert_int_equal(ferry_bus_fetch(f->bus, s - 1, 2, 10, 300, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
}

struct fetcher {
    struct ferry_bus *bus;
    int64_t after;
    int timeout_ms;
    int n;
    int64_t first_seq;
    int64_t took_ms;
    int rc;
    _Atomic bool finished;
};

static bool done(struct fetcher *ft) { return atomic_load(&ft->finished); }

static void *fetch_thread(void *p)
{
    struct fetcher *ft = p;
    struct ferry_event *evs = NULL;
    struct ferry_error err = {0};
    int64_t t0 = ferry_now_mono_us();
    ft->rc = ferry_bus_fetch(ft->bus, ft->after, 0, 100, ft->timeout_ms, &evs, &ft->n, &err);
    ft->took_ms = ms_since(t0);
    ft->first_seq = ft->n > 0 ? evs[0].seq : 0;
    ferry_events_free(evs, ft->n);
    atomic_store(&ft->finished, true);
    return NULL;
}

static void test_fetch_wakes_on_publish(void **state)
{
    struct fx *f = *state;
    struct fetcher ft = {.bus = f->bus, .timeout_ms = 120000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &ft), 0);
    usleep(150 * 1000);
    int64_t seq = emit(f->bus, 1, "run.started", "{}");
    pthread_join(t, NULL);
    assert_int_equal(ft.rc, FERRY_OK);
    assert_int_equal(ft.n, 1);
    assert_int_equal(ft.first_seq, seq);
    /* woken by the publish, not by the 120 s timeout (no lower bound: under load the
     * fetcher may start only after the publish and find the event at once) */
    assert_true(ft.took_ms < 100000);
}

static void test_wake_ends_waits(void **state)
{
    struct fx *f = *state;
    struct fetcher ft[2] = {{.bus = f->bus, .timeout_ms = 120000},
                            {.bus = f->bus, .timeout_ms = 120000}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fetch_thread, &ft[i]), 0);
    /* A fetcher that starts only after a wake (a loaded machine) would wait for the next
     * one: wake every 100 ms until both returned, each well before its 120 s timeout. */
    for (int tries = 0; tries < 900 && !(done(&ft[0]) && done(&ft[1])); tries++) {
        usleep(100 * 1000);
        f->bus->vt->wake(f->bus);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(ft[i].rc, FERRY_OK);
        assert_int_equal(ft[i].n, 0);
        assert_true(ft[i].took_ms < 100000);
    }
}

/* Another process publishing on the same state file is seen by a waiting fetch. */
static void test_other_process(void **state)
{
    struct fx *f = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a fresh process image: SQLite connections must not cross a fork */
        execl("/proc/self/exe", "test_bus", "--publish-one", f->sd.url, be->name, (char *)NULL);
        _exit(127);
    }
    struct fetcher ft = {.bus = f->bus, .timeout_ms = 120000};
    fetch_thread(&ft);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(ft.rc, FERRY_OK);
    assert_int_equal(ft.n, 1);
    assert_true(ft.took_ms < 100000); /* woken by the other process, not the timeout */
}

#define PER_PUBLISHER 200

struct publisher {
    struct ferry_bus *bus;
    int id;
    int count; /* 0: PER_PUBLISHER */
    int rc;
};

static void *publish_thread(void *p)
{
    struct publisher *pb = p;
    struct ferry_error err = {0};
    char payload[64];
    int count = pb->count ? pb->count : PER_PUBLISHER;
    for (int i = 0; pb->rc == FERRY_OK && i < count; i++) {
        snprintf(payload, sizeof payload, "{\"i\":%d}", i);
        pb->rc = ferry_bus_emit(pb->bus, pb->id, 1, NULL, "batch.buffered", payload, &err);
    }
    return NULL;
}

static void test_two_publishers_one_consumer(void **state)
{
    struct fx *f = *state;
    struct publisher pb[2] = {{.bus = f->bus, .id = 1}, {.bus = f->bus, .id = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, publish_thread, &pb[i]), 0);
    int next[3] = {0, 0, 0};
    int64_t after = 0;
    int got = 0;
    int64_t t0 = ferry_now_mono_us();
    struct ferry_error err = {0};
    while (got < 2 * PER_PUBLISHER && ms_since(t0) < 20000) {
        struct ferry_event *evs = NULL;
        int n = 0;
        assert_int_equal(ferry_bus_fetch(f->bus, after, 0, 37, 1000, &evs, &n, &err), FERRY_OK);
        for (int i = 0; i < n; i++) {
            assert_true(evs[i].seq > after);
            after = evs[i].seq;
            int id = (int)evs[i].run_id;
            assert_true(id == 1 || id == 2);
            char want[64];
            snprintf(want, sizeof want, "{\"i\":%d}", next[id]++);
            assert_string_equal(evs[i].payload, want);
        }
        got += n;
        ferry_events_free(evs, n);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(pb[i].rc, FERRY_OK);
    }
    assert_int_equal(got, 2 * PER_PUBLISHER);
    assert_int_equal(next[1], PER_PUBLISHER);
    assert_int_equal(next[2], PER_PUBLISHER);
}

/* Many publishers at once and one consumer reading "seq > after": every event is seen
 * exactly once. On PostgreSQL this is what the counter row buys: with a plain sequence a
 * seq could commit after a larger one and be skipped. */
#define MANY 8
#define PER_MANY 150

static void test_many_publishers_no_skip(void **state)
{
    struct fx *f = *state;
    struct publisher pb[MANY];
    pthread_t t[MANY];
    for (int i = 0; i < MANY; i++) {
        pb[i] = (struct publisher){.bus = f->bus, .id = 100 + i, .count = PER_MANY};
        assert_int_equal(pthread_create(&t[i], NULL, publish_thread, &pb[i]), 0);
    }
    int next[MANY] = {0};
    int64_t after = 0;
    int got = 0;
    int64_t t0 = ferry_now_mono_us();
    struct ferry_error err = {0};
    while (got < MANY * PER_MANY && ms_since(t0) < 60000) {
        struct ferry_event *evs = NULL;
        int n = 0;
        assert_int_equal(ferry_bus_fetch(f->bus, after, 0, 50, 1000, &evs, &n, &err), FERRY_OK);
        for (int i = 0; i < n; i++) {
            assert_true(evs[i].seq > after);
            after = evs[i].seq;
            int id = (int)evs[i].run_id - 100;
            assert_true(id >= 0 && id < MANY);
            /* each publisher's events arrive in its order, none missing, none twice */
            char want[64];
            snprintf(want, sizeof want, "{\"i\":%d}", next[id]++);
            assert_string_equal(evs[i].payload, want);
        }
        got += n;
        ferry_events_free(evs, n);
    }
    for (int i = 0; i < MANY; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(pb[i].rc, FERRY_OK);
    }
    assert_int_equal(got, MANY * PER_MANY);
    for (int i = 0; i < MANY; i++)
        assert_int_equal(next[i], PER_MANY);
    /* and nothing after the last one */
    struct ferry_event *evs = NULL;
    int n = 0;
    assert_int_equal(ferry_bus_fetch(f->bus, after, 0, 50, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 0);
}

/* First starts racing: several processes' buses creating the same fresh schema / stream at
 * once all succeed and agree on the sequence space. */
#define OPENERS 4

struct opener {
    char url[1200];
    const char *state_path;
    struct ferry_bus *bus;
    int rc;
    struct ferry_error err;
};

static void *open_thread(void *p)
{
    struct opener *o = p;
    o->rc = ferry_bus_open(o->url, o->state_path, &o->bus, &o->err);
    return NULL;
}

static void test_concurrent_first_open(void **state)
{
    struct fx *f = *state;
    if (is_inproc()) skip();
    char fresh[64];
    snprintf(fresh, sizeof fresh, "%s%ld%d",
             strcmp(be->name, "nats") == 0 ? "stream=RACE" : "bus_schema=race_", (long)getpid(),
             (int)(ferry_now_mono_us() % 100000));
    struct opener o[OPENERS];
    pthread_t t[OPENERS];
    for (int i = 0; i < OPENERS; i++) {
        memset(&o[i], 0, sizeof o[i]);
        snprintf(o[i].url, sizeof o[i].url, "%s%c%s", be->url, strchr(be->url, '?') ? '&' : '?',
                 fresh);
        o[i].state_path = f->sd.url;
        assert_int_equal(pthread_create(&t[i], NULL, open_thread, &o[i]), 0);
    }
    for (int i = 0; i < OPENERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < OPENERS; i++) {
        if (o[i].rc != FERRY_OK) fail_msg("open %d: %s", i, o[i].err.message);
        assert_string_equal(o[i].bus->mark_tag, o[0].bus->mark_tag);
    }
    /* one of them publishes, another sees it */
    int64_t seq = emit(o[1].bus, 3, "run.started", "{}");
    struct ferry_event *evs = NULL;
    int n = 0;
    struct ferry_error err = {0};
    assert_int_equal(ferry_bus_fetch(o[2].bus, 0, 0, 10, 2000, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(evs[0].seq, seq);
    ferry_events_free(evs, n);
    for (int i = 0; i < OPENERS; i++)
        ferry_bus_close(o[i].bus);
}

static void test_open_error_names_path(void **state)
{
    struct fx *f = *state;
    if (!is_inproc()) {
        /* nothing listens: the error names the host and port, never the password */
        struct ferry_bus *b = NULL;
        struct ferry_error err = {0};
        assert_int_not_equal(ferry_bus_open(be->bad_url, f->sd.url, &b, &err), FERRY_OK);
        assert_null(b);
        assert_non_null(strstr(err.message, "127.0.0.1:1"));
        assert_non_null(strstr(err.message, be->where));
        assert_null(strstr(err.message, "sekret"));
        /* an unknown scheme names only the scheme */
        assert_int_equal(ferry_bus_open("kafka://u:sekret@h:1", f->sd.url, &b, &err),
                         FERRY_ECONFIG);
        assert_non_null(strstr(err.message, "kafka"));
        assert_null(strstr(err.message, "sekret"));
        return;
    }
    if (state_is_pg()) return; /* a junk file is a SQLite matter */
    char path[400];
    snprintf(path, sizeof path, "%s/junk.db", f->sd.dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("this is not a database, just some text that is long enough to have a header..........."
          "......................................................................",
          fp);
    fclose(fp);
    struct ferry_bus *b = NULL;
    struct ferry_error err = {0};
    assert_int_not_equal(ferry_bus_inproc_open(path, &b, &err), FERRY_OK);
    assert_null(b);
    assert_non_null(strstr(err.message, path));
}

/* The other process of test_other_process. */
static int publish_one(const char *path, const char *backend)
{
    usleep(300 * 1000);
    const char *url = "";
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].name, backend) == 0 && backends[i].url_env)
            url = getenv(backends[i].url_env);
    struct ferry_bus *b = NULL;
    struct ferry_error err = {0};
    int rc = ferry_bus_open(url, path, &b, &err);
    if (rc == FERRY_OK) rc = ferry_bus_emit(b, 9, 1, "x", "run.started", "{\"pid\":1}", &err);
    if (rc != FERRY_OK) fprintf(stderr, "publish-one: %s\n", err.message);
    ferry_bus_close(b);
    return rc == FERRY_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--publish-one") == 0) return publish_one(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_fetch_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_emit_and_durability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_n, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_n_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_wakes_on_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_ends_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_publishers_one_consumer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_publishers_no_skip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_first_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_error_names_path, setup, teardown),
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        be = &backends[i];
        if (be->url_env) {
            const char *u = getenv(be->url_env);
            if (u == NULL || u[0] == '\0') {
                printf("[ SKIPPED  ] %s bus: %s is not set\n", be->name, be->url_env);
                continue;
            }
            backends[i].url = u;
        }
        failed += cmocka_run_group_tests_name(be->name, tests, NULL, NULL);
    }
    return failed;
}
