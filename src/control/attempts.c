/* control/attempts.c - a run's attempt history folded from its events (control/attempts.h).
 *
 * Attempts are not a table of their own: every attempt begins with run.started and ends
 * with one of run.completed, run.failed, run.paused, run.canceled or worker.lost, and a
 * retry is announced by run.retry_scheduled (runner/retry.c), all carrying the attempt.
 * Reads the run's events in pages; only run-level events are kept. */
#include <string.h>
#include "control/attempts.h"
#include "ferry/core.h"

static json_t *entry(json_t *list, int attempt)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
        if (json_integer_value(json_object_get(e, "attempt")) == attempt) return e;
    e = json_pack("{s:i,s:n,s:n,s:s,s:n,s:b,s:n,s:n}", "attempt", attempt, "started_us",
                  "ended_us", "state", "running", "error", "retry_scheduled", 0, "retry_at_us",
                  "reason");
    json_array_append_new(list, e);
    return e;
}

static void fold(json_t *list, const struct ferry_event *ev)
{
    const char *t = ev->type;
    const char *end = !strcmp(t, FERRY_EV_RUN_COMPLETED) ? "completed"
                      : !strcmp(t, FERRY_EV_RUN_FAILED)  ? "failed"
                      : !strcmp(t, FERRY_EV_RUN_PAUSED)  ? "paused"
                      : !strcmp(t, FERRY_EV_RUN_CANCELED) ? "canceled"
                      : !strcmp(t, FERRY_EV_WORKER_LOST) ? "lost"
                                                          : NULL;
    bool started = !strcmp(t, FERRY_EV_RUN_STARTED);
    bool retry = !strcmp(t, FERRY_EV_RUN_RETRY_SCHEDULED);
    if (!end && !started && !retry) return;
    json_t *p = json_loads(ev->payload ? ev->payload : "{}", 0, NULL);
    int attempt = ev->attempt;
    /* worker.lost is emitted under the fencing attempt; the lost one is in the payload */
    json_t *lost = json_object_get(p, "lost_attempt");
    if (json_is_integer(lost)) attempt = (int)json_integer_value(lost);
    json_t *e = entry(list, attempt);
    if (started) {
        json_object_set_new(e, "started_us", json_integer(ev->time_us));
    } else if (retry) {
        json_object_set_new(e, "retry_scheduled", json_true());
        json_object_set(e, "retry_at_us", json_object_get(p, "retry_at_us"));
        json_object_set(e, "reason", json_object_get(p, "reason"));
    } else if (strcmp(json_string_value(json_object_get(e, "state")), "lost") != 0) {
        json_object_set_new(e, "state", json_string(end));
        json_object_set_new(e, "ended_us", json_integer(ev->time_us));
        json_t *m = json_object_get(p, "message");
        if (json_is_string(m)) json_object_set(e, "error", m);
    }
    json_decref(p);
}

json_t *ferry_control_attempts(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id,
                               struct ferry_error *err)
{
    json_t *list = json_array();
    if (list == NULL) {
        ferry_error_set(err, FERRY_ENOMEM, "attempts", "out of memory");
        return NULL;
    }
    int64_t after = 0;
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        int rc = bus ? ferry_bus_fetch(bus, after, run_id, 1000, 0, &evs, &n, err)
                     : ferry_store_event_read(st, after, run_id, 1000, &evs, &n, err);
        if (rc != FERRY_OK) {
            json_decref(list);
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            fold(list, &evs[i]);
            after = evs[i].seq;
        }
        ferry_events_free(evs, n);
        if (n < 1000) break;
    }
    return list;
}
