/* bus/chaos.c - chaos delivery for the external buses (FERRY_CHAOS_BUS=1, fault tests only).
 *
 * Owns a wrapper bus around a PostgreSQL or NATS JetStream bus whose fetch, like the
 * in-process bus's own chaos mode (bus/inproc.c), starts up to 8 events back one fetch in
 * four (a redelivery of events already handed out) and repeats every event it returns 1-3
 * times, so the consumer's "fold each seq once" rule is exercised against a real server's
 * delivery. Publish, wake and close go straight to the wrapped bus; the mark tag is the
 * wrapped bus's, so marks are unchanged. FERRY_SEED seeds the xorshift32 draw.
 * Calls core and the wrapped bus's vtable. Called by ferry_bus_open (bus/bus.c) when
 * FERRY_CHAOS_BUS is set; nothing is wrapped otherwise. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "bus/bus.h"
#include "ferry/core.h"

struct chaos_bus {
    struct ferry_bus bus;
    struct ferry_bus *inner;
    pthread_mutex_t lock; /* guards state */
    unsigned state;       /* xorshift32 */
};

static unsigned draw(struct chaos_bus *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned x = c->state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c->state = x;
    pthread_mutex_unlock(&c->lock);
    return x;
}

static int chaos_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    struct chaos_bus *c = b->ctx;
    return ferry_bus_publish(c->inner, ev, err);
}

static int chaos_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                           struct ferry_error *err)
{
    struct chaos_bus *c = b->ctx;
    return ferry_bus_publish_n(c->inner, evs, n, err);
}

/* Each event of *evs repeated 1-3 times, in order; the copies own their payloads. */
static int repeat(struct chaos_bus *c, struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct ferry_event *out = ferry_calloc((size_t)*n * 3, sizeof *out);
    int m = 0;
    for (int i = 0; out != NULL && i < *n; i++) {
        int times = 1 + (int)(draw(c) % 3);
        for (int k = 0; k < times; k++) {
            out[m] = (*evs)[i];
            out[m].payload = k == 0 ? (*evs)[i].payload : ferry_strdup((*evs)[i].payload);
            if (k > 0 && out[m].payload == NULL) {
                /* out[0..m) own their payloads, *evs still owns those from i+1 on */
                ferry_events_free(out, m);
                out = NULL;
                for (int j = i + 1; j < *n; j++) ferry_free((*evs)[j].payload);
                break;
            }
            m++;
        }
    }
    if (out == NULL) {
        if (m == 0) { /* the first calloc failed: *evs still owns everything */
            ferry_events_free(*evs, *n);
        } else {
            ferry_free(*evs);
        }
        *evs = NULL;
        *n = 0;
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "chaos bus: out of memory");
    }
    ferry_free(*evs); /* payloads moved to out */
    *evs = out;
    *n = m;
    return FERRY_OK;
}

static int chaos_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                       struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct chaos_bus *c = b->ctx;
    int64_t from = after;
    if (after > 0 && draw(c) % 4 == 0) {
        from = after - 1 - (int64_t)(draw(c) % 8);
        if (from < 0) from = 0;
    }
    int rc = ferry_bus_fetch(c->inner, from, run_id, max, timeout_ms, evs, n, err);
    if (rc == FERRY_OK && *n > 0) rc = repeat(c, evs, n, err);
    return rc;
}

static void chaos_wake(struct ferry_bus *b)
{
    struct chaos_bus *c = b->ctx;
    if (c->inner->vt->wake) c->inner->vt->wake(c->inner);
}

static void chaos_close(struct ferry_bus *b)
{
    struct chaos_bus *c = b->ctx;
    ferry_bus_close(c->inner);
    pthread_mutex_destroy(&c->lock);
    ferry_free(c);
}

static const struct ferry_bus_vtable chaos_vtable = {
    .name = "chaos",
    .publish = chaos_publish,
    .publish_n = chaos_publish_n,
    .fetch = chaos_fetch,
    .wake = chaos_wake,
    .close = chaos_close,
};

int ferry__bus_chaos_wrap(struct ferry_bus **bus, struct ferry_error *err)
{
    const char *on = getenv("FERRY_CHAOS_BUS");
    if (on == NULL || on[0] == '\0' || strcmp(on, "0") == 0) return FERRY_OK;
    struct chaos_bus *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) {
        ferry_bus_close(*bus);
        *bus = NULL;
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "chaos bus: out of memory");
    }
    const char *seed = getenv("FERRY_SEED");
    c->state = seed ? (unsigned)strtoul(seed, NULL, 10) : (unsigned)ferry_now_mono_us();
    if (c->state == 0) c->state = 0x9e3779b9u;
    ferry_log(FERRY_LOG_WARN, "chaos bus: %s events delivered 1-3 times, rewinds (seed %u)",
              (*bus)->vt->name, c->state);
    pthread_mutex_init(&c->lock, NULL);
    c->inner = *bus;
    c->bus.vt = &chaos_vtable;
    c->bus.ctx = c;
    memcpy(c->bus.mark_tag, c->inner->mark_tag, sizeof c->bus.mark_tag);
    *bus = &c->bus;
    return FERRY_OK;
}
