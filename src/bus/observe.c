/* bus/observe.c - a bus that shows every event it publishes to an observer.
 *
 * Owns a wrapper around another bus (which it takes: close closes both): publish goes to
 * the wrapped bus and, once stored (its seq set), the event is passed to the observer on
 * the publishing thread; fetch, wake and the mark tag are the wrapped bus's. The observer
 * must not publish on this bus. Calls the wrapped bus's vtable. Called by the runner for a
 * run with an event observer (embedding, src/embed/). */
#include <stdio.h>
#include "bus/bus.h"
#include "ferry/core.h"

struct observe_bus {
    struct ferry_bus bus;
    struct ferry_bus *inner;
    ferry_bus_observer_fn fn;
    void *fn_ctx;
};

static int observe_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    struct observe_bus *o = b->ctx;
    int rc = ferry_bus_publish(o->inner, ev, err);
    if (rc == FERRY_OK) o->fn(o->fn_ctx, ev);
    return rc;
}

/* The observer sees every event the wrapped bus stored (seq set), in order. */
static int observe_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                             struct ferry_error *err)
{
    struct observe_bus *o = b->ctx;
    int rc = ferry_bus_publish_n(o->inner, evs, n, err);
    for (int i = 0; i < n; i++)
        if (rc == FERRY_OK || evs[i].seq > 0) o->fn(o->fn_ctx, &evs[i]);
    return rc;
}

static int observe_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max,
                         int timeout_ms, struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct observe_bus *o = b->ctx;
    return ferry_bus_fetch(o->inner, after, run_id, max, timeout_ms, evs, n, err);
}

static void observe_wake(struct ferry_bus *b)
{
    struct observe_bus *o = b->ctx;
    if (o->inner->vt->wake) o->inner->vt->wake(o->inner);
}

static void observe_close(struct ferry_bus *b)
{
    struct observe_bus *o = b->ctx;
    ferry_bus_close(o->inner);
    ferry_free(o);
}

static const struct ferry_bus_vtable observe_vt = {
    .name = "observed",
    .publish = observe_publish,
    .publish_n = observe_publish_n,
    .fetch = observe_fetch,
    .wake = observe_wake,
    .close = observe_close,
};

int ferry_bus_observe(struct ferry_bus **bus, ferry_bus_observer_fn fn, void *ctx,
                      struct ferry_error *err)
{
    struct observe_bus *o = ferry_calloc(1, sizeof *o);
    if (o == NULL) {
        ferry_bus_close(*bus);
        *bus = NULL;
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "event observer: out of memory");
    }
    o->inner = *bus;
    o->fn = fn;
    o->fn_ctx = ctx;
    o->bus.vt = &observe_vt;
    o->bus.ctx = o;
    snprintf(o->bus.mark_tag, sizeof o->bus.mark_tag, "%s", o->inner->mark_tag);
    *bus = &o->bus;
    return FERRY_OK;
}
