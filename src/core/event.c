/* core/event.c - the free functions of struct ferry_event (ferry/event.h).
 *
 * They sit in core, below the store and the bus, so that the store (which keeps the event
 * log) and every bus can free events without calling into each other: the store no longer
 * calls into bus/, which closed a circle store -> bus -> store. Calls ferry_free only. */
#include "ferry/core.h"
#include "ferry/event.h"

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
