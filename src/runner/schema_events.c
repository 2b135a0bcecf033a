/* runner/schema_events.c - the source schema changes a resource's stream noted while it ran
 * (pipeline/schema_change.h), said on the run's events as `schema.changed`, one per change,
 * in the order they were seen. Called by schedule.c when a resource's flow ends, whatever
 * its outcome (a `schema_changes: fail` stop is said before resource.failed). */
#include "ferry/event.h"
#include "pipeline/schema_change.h"
#include "runner/run.h"

void ferry__run_emit_schema_changes(struct run *r, const struct resource_run *rr)
{
    if (rr->route == NULL) return;
    int n = 0;
    char **v = ferry_schema_change_take(rr->route, &n);
    for (int i = 0; i < n; i++) {
        struct ferry_error e;
        if (ferry__run_emit(r, rr->spec->table, FERRY_EV_SCHEMA_CHANGED, v[i], NULL, &e) !=
            FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "resource %s: schema.changed not said: %s", rr->spec->table,
                      e.message);
        ferry_free(v[i]);
    }
    ferry_free(v);
}
