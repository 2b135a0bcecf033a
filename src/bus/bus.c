/* bus/bus.c - what every bus implementation shares: ferry_bus_emit, which builds an event
 * from parts and publishes it (ferry_bus_event_init: the same without copying the payload,
 * for ferry_bus_publish_n), and ferry_bus_open, which picks an implementation from a URL
 * (and, for fault tests only, wraps an external bus in chaos delivery when FERRY_CHAOS_BUS
 * is set, bus/chaos.c), and the fetch wait loop of the in-process and NATS buses
 * (ferry__bus_fetch_wait). The event free functions live below the store, in core/event.c.
 *
 * Calls core, config (secret references), the store (instance id) and the bus
 * implementations. Called by the runner, the CLI, the control plane and the tests. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "bus/bus.h"
#include "core/mono.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "store/store.h"

int ferry_bus_event_init(struct ferry_event *ev, int64_t run_id, int attempt, const char *resource,
                         const char *type, char *payload_json, struct ferry_error *err)
{
    memset(ev, 0, sizeof *ev);
    if (type == NULL || type[0] == '\0' || strlen(type) >= sizeof ev->type)
        return ferry_error_set(err, FERRY_EINVAL, "bus", "event type '%s' is empty or too long",
                               type ? type : "(null)");
    if (resource != NULL && strlen(resource) >= sizeof ev->resource)
        return ferry_error_set(err, FERRY_EINVAL, "bus",
                               "event %s: resource name longer than %zu bytes: %.64s...", type,
                               sizeof ev->resource - 1, resource);
    ev->time_us = ferry_now_wall_us();
    ev->run_id = run_id;
    ev->attempt = attempt;
    snprintf(ev->resource, sizeof ev->resource, "%s", resource ? resource : "");
    snprintf(ev->type, sizeof ev->type, "%s", type);
    ev->payload = payload_json;
    return FERRY_OK;
}

int ferry_bus_emit(struct ferry_bus *b, int64_t run_id, int attempt, const char *resource,
                   const char *type, const char *payload_json, struct ferry_error *err)
{
    struct ferry_event ev;
    int rc = ferry_bus_event_init(&ev, run_id, attempt, resource, type, NULL, err);
    if (rc != FERRY_OK) return rc;
    ev.payload = ferry_strdup(payload_json ? payload_json : "{}");
    if (ev.payload == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "event %s: out of memory", type);
    rc = ferry_bus_publish(b, &ev, err);
    ferry_event_clear(&ev);
    return rc;
}

void ferry__bus_signal_init(struct ferry__bus_signal *s)
{
    memset(s, 0, sizeof *s);
    ferry__cond_init_mono(&s->cond);
    pthread_mutex_init(&s->lock, NULL);
}

void ferry__bus_signal_destroy(struct ferry__bus_signal *s)
{
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
}

void ferry__bus_signal_published(struct ferry__bus_signal *s)
{
    pthread_mutex_lock(&s->lock);
    s->published++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void ferry__bus_signal_wake(struct ferry__bus_signal *s)
{
    pthread_mutex_lock(&s->lock);
    s->wakes++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void ferry__bus_signal_close(struct ferry__bus_signal *s)
{
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int ferry__bus_fetch_wait(struct ferry__bus_signal *s, int64_t poll_us, ferry__bus_read_fn read_fn,
                          void *ctx, int64_t after, int64_t run_id, int max, int timeout_ms,
                          struct ferry_event **evs, int *n, struct ferry_error *err)
{
    *evs = NULL;
    *n = 0;
    if (max <= 0) max = 1000;
    int64_t deadline = ferry_now_mono_us() + (timeout_ms > 0 ? (int64_t)timeout_ms * 1000 : 0);
    /* Read the counters before the events: a publish that lands between the read and the
     * wait changes `published`, so the wait below cannot miss it. */
    pthread_mutex_lock(&s->lock);
    uint64_t seen_pub = s->published, seen_wake = s->wakes;
    pthread_mutex_unlock(&s->lock);
    for (;;) {
        int rc = read_fn(ctx, after, run_id, max, evs, n, err);
        if (rc != FERRY_OK) {
            ferry_error_prefix(err, "fetching events");
            return rc;
        }
        if (*n > 0) return FERRY_OK;
        int64_t now = ferry_now_mono_us();
        if (now >= deadline) return FERRY_OK;
        int64_t until = now + poll_us < deadline ? now + poll_us : deadline;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000),
                              .tv_nsec = (long)(until % 1000000) * 1000};
        pthread_mutex_lock(&s->lock);
        while (s->published == seen_pub && s->wakes == seen_wake && !s->closed) {
            if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT) break;
        }
        bool woken = s->wakes != seen_wake || s->closed;
        seen_pub = s->published;
        pthread_mutex_unlock(&s->lock);
        if (woken) return FERRY_OK;
    }
}

static bool has_scheme(const char *url, const char *scheme)
{
    size_t n = strlen(scheme);
    return strncmp(url, scheme, n) == 0 && strncmp(url + n, "://", 3) == 0;
}

static int open_resolved(const char *url, const char *state_path, struct ferry_bus **out,
                         struct ferry_error *err)
{
    bool pg = has_scheme(url, "postgres") || has_scheme(url, "postgresql");
    bool nats = has_scheme(url, "nats");
    if (!pg && !nats) {
        /* Only the scheme: the rest may hold a password. */
        const char *colon = strchr(url, ':');
        int len = colon ? (int)(colon - url) : (int)strlen(url);
        if (len > 20) len = 20;
        return ferry_error_set(err, FERRY_ECONFIG, "bus",
                               "bus URL scheme '%.*s' is not one of inproc, postgres://,"
                               " postgresql://, nats://",
                               len, url);
    }
    /* The external buses keep the events of every state file that shares them apart. */
    struct ferry_store *st = NULL;
    char scope[40];
    int rc = ferry_store_open(state_path, &st, err);
    if (rc == FERRY_OK) rc = ferry_store_instance_id(st, scope, sizeof scope, err);
    ferry_store_close(st);
    if (rc != FERRY_OK) return rc;
    rc = pg ? ferry_bus_pg_open(url, scope, out, err) : ferry_bus_nats_open(url, scope, out, err);
    if (rc == FERRY_OK) rc = ferry__bus_chaos_wrap(out, err);
    return rc;
}

int ferry_bus_open(const char *url, const char *state_path, struct ferry_bus **out,
                   struct ferry_error *err)
{
    *out = NULL;
    if (url == NULL || url[0] == '\0' || strcmp(url, "inproc") == 0)
        return ferry_bus_inproc_open(state_path, out, err);
    if (strncmp(url, "env:", 4) != 0 && strncmp(url, "file:", 5) != 0)
        return open_resolved(url, state_path, out, err);
    char *resolved = NULL;
    int rc = ferry_secret_resolve(url, "bus URL", &resolved, err);
    if (rc != FERRY_OK) return rc;
    /* trailing newline of a file: reference */
    size_t n = strlen(resolved);
    while (n > 0 && (resolved[n - 1] == '\n' || resolved[n - 1] == '\r' || resolved[n - 1] == ' '))
        resolved[--n] = '\0';
    if (strcmp(resolved, "inproc") == 0 || resolved[0] == '\0')
        rc = ferry_bus_inproc_open(state_path, out, err);
    else
        rc = open_resolved(resolved, state_path, out, err);
    ferry_secret_free(resolved);
    return rc;
}
