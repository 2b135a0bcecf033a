/* bus/bus.c - what every bus implementation shares: the event free functions
 * (ferry/event.h) and ferry_bus_emit, which builds an event from parts and publishes it.
 *
 * Calls core and the bus vtable. Called by the runner, the control plane and the tests. */
#include <stdio.h>
#include <string.h>
#include "bus/bus.h"
#include "ferry/core.h"

void ferry_event_clear(struct ferry_event *ev)
{
    if (ev == NULL) return;
    ferry_free(ev->payload);
    ev->payload = NULL;
}

void ferry_events_free(struct ferry_event *evs, int n)
{
    if (evs == NULL) return;
    for (int i = 0; i < n; i++)
        ferry_free(evs[i].payload);
    ferry_free(evs);
}

int ferry_bus_emit(struct ferry_bus *b, int64_t run_id, int attempt, const char *resource,
                   const char *type, const char *payload_json, struct ferry_error *err)
{
    struct ferry_event ev;
    memset(&ev, 0, sizeof ev);
    if (type == NULL || type[0] == '\0' || strlen(type) >= sizeof ev.type)
        return ferry_error_set(err, FERRY_EINVAL, "bus", "event type '%s' is empty or too long",
                               type ? type : "(null)");
    if (resource != NULL && strlen(resource) >= sizeof ev.resource)
        return ferry_error_set(err, FERRY_EINVAL, "bus",
                               "event %s: resource name longer than %zu bytes: %.64s...", type,
                               sizeof ev.resource - 1, resource);
    ev.time_us = ferry_now_wall_us();
    ev.run_id = run_id;
    ev.attempt = attempt;
    snprintf(ev.resource, sizeof ev.resource, "%s", resource ? resource : "");
    snprintf(ev.type, sizeof ev.type, "%s", type);
    ev.payload = ferry_strdup(payload_json ? payload_json : "{}");
    if (ev.payload == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "event %s: out of memory", type);
    int rc = ferry_bus_publish(b, &ev, err);
    ferry_event_clear(&ev);
    return rc;
}
