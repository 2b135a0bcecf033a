/* tests/unit/test_bus.c - the in-process bus over a real SQLite state file. */
#include "state_fixture.h"

#include <pthread.h>
#include <sys/wait.h>
#include "unit.h"
#include "bus/bus.h"
#include "ferry/core.h"
#include "store/store.h"

struct fx {
    struct state_dir sd;
    struct ferry_bus *bus;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    state_dir_make(&f->sd);
    struct ferry_error err = {0};
    if (ferry_bus_inproc_open(f->sd.path, &f->bus, &err) != FERRY_OK) {
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
    assert_non_null(strstr(err.message, f->sd.path));

    /* durable when publish returns: another handle, then a reopened bus, sees it */
    struct ferry_store *st = NULL;
    assert_int_equal(ferry_store_open(f->sd.path, &st, &err), FERRY_OK);
    struct ferry_event *evs = NULL;
    int n = 0;
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
    assert_int_equal(ferry_bus_inproc_open(f->sd.path, &f->bus, &err), FERRY_OK);
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 10, 0, &evs, &n, &err), FERRY_OK);
    assert_int_equal(n, 2);
    ferry_events_free(evs, n);
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
    assert_true(ms_since(t0) < 100);
    t0 = ferry_now_mono_us();
    assert_int_equal(ferry_bus_fetch(f->bus, 0, 0, 10, 450, &evs, &n, &err), FERRY_OK);
    int64_t took = ms_since(t0);
    assert_int_equal(n, 0);
    assert_null(evs);
    assert_true(took >= 440);
    assert_true(took < 2000);
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
};

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
    return NULL;
}

static void test_fetch_wakes_on_publish(void **state)
{
    struct fx *f = *state;
    struct fetcher ft = {.bus = f->bus, .timeout_ms = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &ft), 0);
    usleep(150 * 1000);
    int64_t seq = emit(f->bus, 1, "run.started", "{}");
    pthread_join(t, NULL);
    assert_int_equal(ft.rc, FERRY_OK);
    assert_int_equal(ft.n, 1);
    assert_int_equal(ft.first_seq, seq);
    assert_true(ft.took_ms >= 100);
    assert_true(ft.took_ms < 3000);
}

static void test_wake_ends_waits(void **state)
{
    struct fx *f = *state;
    struct fetcher ft[2] = {{.bus = f->bus, .timeout_ms = 20000},
                            {.bus = f->bus, .timeout_ms = 20000}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fetch_thread, &ft[i]), 0);
    usleep(200 * 1000);
    f->bus->vt->wake(f->bus);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(ft[i].rc, FERRY_OK);
        assert_int_equal(ft[i].n, 0);
        assert_true(ft[i].took_ms < 5000);
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
        execl("/proc/self/exe", "test_bus", "--publish-one", f->sd.path, (char *)NULL);
        _exit(127);
    }
    struct fetcher ft = {.bus = f->bus, .timeout_ms = 10000};
    fetch_thread(&ft);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(ft.rc, FERRY_OK);
    assert_int_equal(ft.n, 1);
    assert_true(ft.took_ms < 3000);
}

#define PER_PUBLISHER 200

struct publisher {
    struct ferry_bus *bus;
    int id;
    int rc;
};

static void *publish_thread(void *p)
{
    struct publisher *pb = p;
    struct ferry_error err = {0};
    char payload[64];
    for (int i = 0; pb->rc == FERRY_OK && i < PER_PUBLISHER; i++) {
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

static void test_open_error_names_path(void **state)
{
    struct fx *f = *state;
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
static int publish_one(const char *path)
{
    usleep(300 * 1000);
    struct ferry_bus *b = NULL;
    struct ferry_error err = {0};
    int rc = ferry_bus_inproc_open(path, &b, &err);
    if (rc == FERRY_OK) rc = ferry_bus_emit(b, 9, 1, "x", "run.started", "{\"pid\":1}", &err);
    if (rc != FERRY_OK) fprintf(stderr, "publish-one: %s\n", err.message);
    ferry_bus_close(b);
    return rc == FERRY_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--publish-one") == 0) return publish_one(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_fetch_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_emit_and_durability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_wakes_on_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_ends_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_publishers_one_consumer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_error_names_path, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
