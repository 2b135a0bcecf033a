/* bus/inproc.c - the in-process event bus, its log kept in the state store's "events"
 * table (the embedded default, DESIGN §4).
 *
 * publish appends through a store handle of its own (guarded by a mutex) and returns once
 * the append has committed, so a published event is durable; then it signals a condition
 * variable. publish_n appends several events in one transaction (one commit per batch).
 * fetch reads through a second handle, so readers never queue behind a publisher, and when
 * nothing is there waits on the condition variable up to its timeout, re-reading the table
 * every 200 ms so that events published by other processes on the same state file are seen
 * too (the wait loop is bus.c's ferry__bus_fetch_wait). FERRY_CHAOS_BUS=1 (fault tests,
 * docs/internals/faults.md) wraps the bus in bus/chaos.c's redelivering fetch, as for the
 * external buses. Calls the store and core. Called through bus/bus.h by the runner, the
 * tracker and the control plane. */
#include <pthread.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "store/store.h"

#define POLL_US 200000 /* how soon another process's events are seen by a waiting fetch */

struct inproc {
    struct ferry_bus bus;
    pthread_mutex_t pub_lock; /* guards pub */
    struct ferry_store *pub;
    pthread_mutex_t read_lock; /* guards rd */
    struct ferry_store *rd;
    struct ferry__bus_signal sig; /* publishes so far in this process, wake() calls */
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
    ferry__bus_signal_published(&ip->sig);
    /* The event is stored: a crash here loses nothing, an error makes the caller retry
     * (at-least-once). */
    return ferry_failpoint_check("after_bus_publish", err);
}

/* One transaction for all n (store: ferry_store_event_append_n), one wake-up of the
 * readers; the failpoint once, after the commit. */
static int inproc_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                            struct ferry_error *err)
{
    struct inproc *ip = ctx_of(b);
    if (n <= 0) return FERRY_OK;
    pthread_mutex_lock(&ip->pub_lock);
    int rc = ferry_store_event_append_n(ip->pub, evs, n, err);
    pthread_mutex_unlock(&ip->pub_lock);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "publishing %d events from %s (none stored)", n, evs[0].type);
        return rc;
    }
    ferry__bus_signal_published(&ip->sig);
    return ferry_failpoint_check("after_bus_publish", err);
}

static int read_events(void *ctx, int64_t after, int64_t run_id, int max,
                       struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct inproc *ip = ctx;
    pthread_mutex_lock(&ip->read_lock);
    int rc = ferry_store_event_read(ip->rd, after, run_id, max, evs, n, err);
    pthread_mutex_unlock(&ip->read_lock);
    return rc;
}

static int inproc_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                        struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct inproc *ip = ctx_of(b);
    return ferry__bus_fetch_wait(&ip->sig, POLL_US, read_events, ip, after, run_id, max,
                                 timeout_ms, evs, n, err);
}

static void inproc_wake(struct ferry_bus *b)
{
    ferry__bus_signal_wake(&ctx_of(b)->sig);
}

/* The caller guarantees no publish or fetch is still running (wake them first). */
static void inproc_close(struct ferry_bus *b)
{
    struct inproc *ip = ctx_of(b);
    ferry_store_close(ip->pub);
    ferry_store_close(ip->rd);
    ferry__bus_signal_destroy(&ip->sig);
    pthread_mutex_destroy(&ip->pub_lock);
    pthread_mutex_destroy(&ip->read_lock);
    ferry_free(ip);
}

static const struct ferry_bus_vtable inproc_vtable = {
    .name = "inproc",
    .publish = inproc_publish,
    .publish_n = inproc_publish_n,
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
    ferry__bus_signal_init(&ip->sig);
    pthread_mutex_init(&ip->pub_lock, NULL);
    pthread_mutex_init(&ip->read_lock, NULL);
    ip->bus.vt = &inproc_vtable;
    ip->bus.ctx = ip;
    int rc = ferry_store_open(state_path, &ip->pub, err);
    if (rc == FERRY_OK) rc = ferry_store_set_sync_full(ip->pub, false, err);
    if (rc == FERRY_OK) rc = ferry_store_open(state_path, &ip->rd, err);
    if (rc != FERRY_OK) {
        inproc_close(&ip->bus);
        ferry_error_prefix(err, "in-process bus");
        return rc;
    }
    *out = &ip->bus;
    return ferry__bus_chaos_wrap(out, err);
}
