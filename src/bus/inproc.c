/* bus/inproc.c - the in-process event bus, its log kept in the state store's "events"
 * table (the embedded default, DESIGN §4).
 *
 * publish appends through a store handle of its own (guarded by a mutex) and returns once
 * the append has committed, so a published event is durable; then it signals a condition
 * variable. fetch reads through a second handle, so readers never queue behind a publisher,
 * and when nothing is there waits on the condition variable up to its timeout, re-reading
 * the table every 200 ms so that events published by other processes on the same state file
 * are seen too. FERRY_CHAOS_BUS=1 (fault tests, docs/internals/faults.md) makes fetch
 * deliver events 1-3 times with rewinds. Calls the store and core. Called through bus/bus.h by
 * the runner, the tracker and the control plane. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "store/store.h"

#define POLL_US 200000 /* how soon another process's events are seen by a waiting fetch */
#define FETCH_DEFAULT 1000

struct inproc {
    struct ferry_bus bus;
    pthread_mutex_t pub_lock; /* guards pub */
    struct ferry_store *pub;
    pthread_mutex_t read_lock; /* guards rd */
    struct ferry_store *rd;
    pthread_mutex_t lock; /* guards the fields below; cond signals their changes */
    pthread_cond_t cond;
    uint64_t published; /* publishes so far, in this process */
    uint64_t wakes;     /* wake() calls so far */
    bool closed;
    /* FERRY_CHAOS_BUS (fault tests only): fetch delivers every event 1-3 times and sometimes
     * rewinds to events already delivered. Read once at open; unset costs one branch. */
    bool chaos;
    unsigned chaos_state; /* xorshift32, guarded by read_lock */
};

static struct inproc *ctx_of(struct ferry_bus *b)
{
    return (struct inproc *)b->ctx;
}

static int inproc_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    struct inproc *ip = ctx_of(b);
    pthread_mutex_lock(&ip->pub_lock);
    int rc = ferry_store_event_append(ip->pub, ev, err);
    pthread_mutex_unlock(&ip->pub_lock);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "publishing %s", ev->type);
        return rc;
    }
    pthread_mutex_lock(&ip->lock);
    ip->published++;
    pthread_cond_broadcast(&ip->cond);
    pthread_mutex_unlock(&ip->lock);
    /* The event is stored: a crash here loses nothing, an error makes the caller retry
     * (at-least-once). */
    return ferry_failpoint_check("after_bus_publish", err);
}

static struct timespec mono_deadline(int64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    return ts;
}

static unsigned chaos_next(struct inproc *ip)
{
    unsigned x = ip->chaos_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    ip->chaos_state = x;
    return x;
}

/* Chaos delivery (read_lock held): each event of *evs repeated 1-3 times, in order. A
 * consumer that folds each seq once must end exactly where a normal delivery leads. */
static int chaos_repeat(struct inproc *ip, struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct ferry_event *out = ferry_calloc((size_t)*n * 3, sizeof *out);
    if (out == NULL) return ferry_error_set(err, FERRY_ENOMEM, "bus", "chaos bus: out of memory");
    int m = 0;
    for (int i = 0; i < *n; i++) {
        int times = 1 + (int)(chaos_next(ip) % 3);
        for (int k = 0; k < times; k++) {
            out[m] = (*evs)[i];
            out[m].payload = k == 0 ? (*evs)[i].payload : ferry_strdup((*evs)[i].payload);
            if (k > 0 && out[m].payload == NULL) {
                ferry_events_free(out, m);
                for (int j = i + 1; j < *n; j++) ferry_free((*evs)[j].payload);
                ferry_free(*evs);
                *evs = NULL;
                *n = 0;
                return ferry_error_set(err, FERRY_ENOMEM, "bus", "chaos bus: out of memory");
            }
            m++;
        }
    }
    ferry_free(*evs); /* payloads moved to out */
    *evs = out;
    *n = m;
    return FERRY_OK;
}

static int inproc_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                        struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct inproc *ip = ctx_of(b);
    *evs = NULL;
    *n = 0;
    if (max <= 0) max = FETCH_DEFAULT;
    int64_t deadline = ferry_now_mono_us() + (timeout_ms > 0 ? (int64_t)timeout_ms * 1000 : 0);
    /* Read the counters before the table: a publish that lands between the read and the
     * wait changes `published`, so the wait below cannot miss it. */
    pthread_mutex_lock(&ip->lock);
    uint64_t seen_pub = ip->published, seen_wake = ip->wakes;
    pthread_mutex_unlock(&ip->lock);
    for (;;) {
        pthread_mutex_lock(&ip->read_lock);
        int64_t from = after;
        /* chaos: one fetch in four starts up to 8 events back (a redelivery) */
        if (ip->chaos && after > 0 && chaos_next(ip) % 4 == 0) {
            from = after - 1 - (int64_t)(chaos_next(ip) % 8);
            if (from < 0) from = 0;
        }
        int rc = ferry_store_event_read(ip->rd, from, run_id, max, evs, n, err);
        if (rc == FERRY_OK && ip->chaos && *n > 0) rc = chaos_repeat(ip, evs, n, err);
        pthread_mutex_unlock(&ip->read_lock);
        if (rc != FERRY_OK) {
            ferry_error_prefix(err, "fetching events");
            return rc;
        }
        if (*n > 0) return FERRY_OK;
        int64_t now = ferry_now_mono_us();
        if (now >= deadline) return FERRY_OK;
        int64_t until = now + POLL_US < deadline ? now + POLL_US : deadline;
        struct timespec ts = mono_deadline(until);
        pthread_mutex_lock(&ip->lock);
        while (ip->published == seen_pub && ip->wakes == seen_wake && !ip->closed) {
            if (pthread_cond_timedwait(&ip->cond, &ip->lock, &ts) == ETIMEDOUT) break;
        }
        bool woken = ip->wakes != seen_wake || ip->closed;
        seen_pub = ip->published;
        pthread_mutex_unlock(&ip->lock);
        if (woken) return FERRY_OK;
    }
}

static void inproc_wake(struct ferry_bus *b)
{
    struct inproc *ip = ctx_of(b);
    pthread_mutex_lock(&ip->lock);
    ip->wakes++;
    pthread_cond_broadcast(&ip->cond);
    pthread_mutex_unlock(&ip->lock);
}

/* The caller guarantees no publish or fetch is still running (wake them first). */
static void inproc_close(struct ferry_bus *b)
{
    struct inproc *ip = ctx_of(b);
    ferry_store_close(ip->pub);
    ferry_store_close(ip->rd);
    pthread_cond_destroy(&ip->cond);
    pthread_mutex_destroy(&ip->lock);
    pthread_mutex_destroy(&ip->pub_lock);
    pthread_mutex_destroy(&ip->read_lock);
    ferry_free(ip);
}

static const struct ferry_bus_vtable inproc_vtable = {
    .name = "inproc",
    .publish = inproc_publish,
    .fetch = inproc_fetch,
    .wake = inproc_wake,
    .close = inproc_close,
};

int ferry_bus_inproc_open(const char *state_path, struct ferry_bus **out, struct ferry_error *err)
{
    *out = NULL;
    struct inproc *ip = ferry_calloc(1, sizeof *ip);
    if (ip == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "in-process bus: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ip->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&ip->lock, NULL);
    pthread_mutex_init(&ip->pub_lock, NULL);
    pthread_mutex_init(&ip->read_lock, NULL);
    ip->bus.vt = &inproc_vtable;
    ip->bus.ctx = ip;
    const char *chaos = getenv("FERRY_CHAOS_BUS");
    if (chaos != NULL && chaos[0] != '\0' && strcmp(chaos, "0") != 0) {
        const char *seed = getenv("FERRY_SEED");
        ip->chaos = true;
        ip->chaos_state = seed ? (unsigned)strtoul(seed, NULL, 10) : (unsigned)ferry_now_mono_us();
        if (ip->chaos_state == 0) ip->chaos_state = 0x9e3779b9u;
        ferry_log(FERRY_LOG_WARN, "chaos bus: events delivered 1-3 times, rewinds (seed %u)",
                  ip->chaos_state);
    }
    int rc = ferry_store_open(state_path, &ip->pub, err);
    if (rc == FERRY_OK) rc = ferry_store_set_sync_full(ip->pub, false, err);
    if (rc == FERRY_OK) rc = ferry_store_open(state_path, &ip->rd, err);
    if (rc != FERRY_OK) {
        inproc_close(&ip->bus);
        ferry_error_prefix(err, "in-process bus");
        return rc;
    }
    *out = &ip->bus;
    return FERRY_OK;
}
