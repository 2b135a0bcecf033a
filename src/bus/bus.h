/* bus/bus.h - the event bus interface (DESIGN §4).
 *
 * publish -> sequence; fetch from a sequence for a durable consumer; ack. Delivery is
 * at-least-once. Implementations: in-process with its log in the state store's database
 * (bus/inproc.c, the embedded default), PostgreSQL (bus/pg_bus.c) and NATS JetStream
 * (bus/nats_bus.c). Every implementation hands out sequences that only become visible in
 * increasing order, so a consumer reading "seq > after" never skips one.
 * A bus instance is thread-safe: publishers and one consumer per name may share it. */
#ifndef FERRY_BUS_H
#define FERRY_BUS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"
#include "ferry/event.h"

struct ferry_store;
struct ferry_bus;

struct ferry_bus_vtable {
    const char *name;
    /* Stores the event and sets ev->seq. When this returns the event survives a crash of
     * the process; the in-process bus reaches the disk with the next FULL commit of the
     * state file (the tracker's), which is what makes checkpoints durable. */
    int (*publish)(struct ferry_bus *bus, struct ferry_event *ev, struct ferry_error *err);
    /* Stores evs[0..n) in that order and sets each seq; the in-process and PostgreSQL buses
     * in one transaction: all or none (on failure every seq is 0), seqs consecutive. NATS has
     * no atomic publish of several messages: it publishes them in turn and stops at the
     * first failure (those before it are stored, seq set). NULL: publish one by one. */
    int (*publish_n)(struct ferry_bus *bus, struct ferry_event *evs, int n,
                     struct ferry_error *err);
    /* Up to max events with seq > after (all runs when run_id == 0), waiting up to
     * timeout_ms for the first. *evs is freed with ferry_events_free. */
    int (*fetch)(struct ferry_bus *bus, int64_t after, int64_t run_id, int max, int timeout_ms,
                 struct ferry_event **evs, int *n, struct ferry_error *err);
    /* Wakes every fetch waiter (close, shutdown). */
    void (*wake)(struct ferry_bus *bus);
    void (*close)(struct ferry_bus *bus);
};

struct ferry_bus {
    const struct ferry_bus_vtable *vt;
    void *ctx;
    /* Names this bus's sequence space: "" for the in-process bus, an id created with the
     * external bus's table or stream otherwise. A consumer keeps its mark per tag, so a
     * state file that moves to another bus (or to a recreated stream, whose sequences start
     * again at 1) starts that bus from its beginning instead of skipping up to an old mark. */
    char mark_tag[64];
};

/* In-process bus over the SQLite state file at `state_path` (it opens its own
 * connections). */
int ferry_bus_inproc_open(const char *state_path, struct ferry_bus **out, struct ferry_error *err);

/* PostgreSQL bus (bus/pg_bus.c): `url` is a libpq URL or conninfo, optionally with the
 * ferry-only query parameter bus_schema=NAME (default ferry_bus). Events are scoped by
 * `scope` (the state store's instance id), so state files sharing a database stay apart. */
int ferry_bus_pg_open(const char *url, const char *scope, struct ferry_bus **out,
                      struct ferry_error *err);
/* NATS JetStream bus (bus/nats_bus.c): `url` nats://[user:pass@]host:port[?stream=NAME]. */
int ferry_bus_nats_open(const char *url, const char *scope, struct ferry_bus **out,
                        struct ferry_error *err);
/* Picks the bus from a URL: NULL, "" or "inproc" -> in-process over `state_path`;
 * postgres:// or postgresql:// -> PostgreSQL; nats:// -> NATS JetStream; env:NAME or
 * file:PATH -> one of those, resolved (the URL may hold a password: never logged). The
 * external buses are scoped by the instance id of the state store at `state_path`. */
int ferry_bus_open(const char *url, const char *state_path, struct ferry_bus **out,
                   struct ferry_error *err);
/* bus/observe.c: replaces *bus with a wrapper that calls fn(ctx, ev) on the publishing
 * thread after each event it stored (seq set); everything else goes to the wrapped bus,
 * which the wrapper owns. On failure closes *bus and sets it to NULL. */
typedef void (*ferry_bus_observer_fn)(void *ctx, const struct ferry_event *ev);
int ferry_bus_observe(struct ferry_bus **bus, ferry_bus_observer_fn fn, void *ctx,
                      struct ferry_error *err);
/* Fault tests (bus/chaos.c): when FERRY_CHAOS_BUS is set, replaces *bus with a wrapper
 * whose fetch redelivers (rewinds, repeats); otherwise leaves it. Takes *bus; on failure
 * closes it and sets *bus = NULL. ferry_bus_open applies it to the external buses,
 * ferry_bus_inproc_open to the in-process bus. */
int ferry__bus_chaos_wrap(struct ferry_bus **bus, struct ferry_error *err);

/* What a waiting fetch of the in-process and NATS buses sleeps on (bus/bus.c): counts of
 * the publishes seen and of wake() calls, each bump broadcast on cond (CLOCK_MONOTONIC). */
struct ferry__bus_signal {
    pthread_mutex_t lock; /* guards the fields below; cond signals their changes */
    pthread_cond_t cond;
    uint64_t published;
    uint64_t wakes;
    bool closed;
};
void ferry__bus_signal_init(struct ferry__bus_signal *s);
void ferry__bus_signal_destroy(struct ferry__bus_signal *s);
void ferry__bus_signal_published(struct ferry__bus_signal *s);
void ferry__bus_signal_wake(struct ferry__bus_signal *s);
void ferry__bus_signal_close(struct ferry__bus_signal *s);

/* Reads up to max events with seq > after (run_id 0: all runs) without waiting; sets *n = 0
 * when there are none. */
typedef int (*ferry__bus_read_fn)(void *ctx, int64_t after, int64_t run_id, int max,
                                  struct ferry_event **evs, int *n, struct ferry_error *err);
/* The fetch contract over a read that does not wait: read; when nothing is there, sleep on
 * `s` until a publish, a wake, close or poll_us (events of other processes are only seen by
 * reading again), until timeout_ms has passed. max <= 0 means 1000. */
int ferry__bus_fetch_wait(struct ferry__bus_signal *s, int64_t poll_us, ferry__bus_read_fn read_fn,
                          void *ctx, int64_t after, int64_t run_id, int max, int timeout_ms,
                          struct ferry_event **evs, int *n, struct ferry_error *err);

static inline int ferry_bus_publish(struct ferry_bus *b, struct ferry_event *ev,
                                    struct ferry_error *err)
{
    return b->vt->publish(b, ev, err);
}
/* A batch's events in one call (vtable publish_n; one by one when the bus has none). */
static inline int ferry_bus_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                                      struct ferry_error *err)
{
    if (b->vt->publish_n) return b->vt->publish_n(b, evs, n, err);
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        rc = b->vt->publish(b, &evs[i], err);
    return rc;
}
static inline int ferry_bus_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max,
                                  int timeout_ms, struct ferry_event **evs, int *n,
                                  struct ferry_error *err)
{
    return b->vt->fetch(b, after, run_id, max, timeout_ms, evs, n, err);
}
static inline void ferry_bus_close(struct ferry_bus *b)
{
    if (b) b->vt->close(b);
}

/* Helper: publish an event built from parts (payload copied). */
int ferry_bus_emit(struct ferry_bus *b, int64_t run_id, int attempt, const char *resource,
                   const char *type, const char *payload_json, struct ferry_error *err);
/* Fills *ev from parts, time now; the payload is borrowed, not copied (NULL means "{}"):
 * never ferry_event_clear such an event. FERRY_EINVAL naming the type when a part does not
 * fit. For ferry_bus_publish_n of events whose payloads the caller keeps. */
int ferry_bus_event_init(struct ferry_event *ev, int64_t run_id, int attempt, const char *resource,
                         const char *type, char *payload_json, struct ferry_error *err);

#endif
