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
/* Fault tests (bus/chaos.c): when FERRY_CHAOS_BUS is set, replaces *bus with a wrapper
 * whose fetch redelivers (rewinds, repeats); otherwise leaves it. Takes *bus; on failure
 * closes it and sets *bus = NULL. ferry_bus_open applies it to the external buses. */
int ferry__bus_chaos_wrap(struct ferry_bus **bus, struct ferry_error *err);

static inline int ferry_bus_publish(struct ferry_bus *b, struct ferry_event *ev,
                                    struct ferry_error *err)
{
    return b->vt->publish(b, ev, err);
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

#endif
