/* control/request.c - asking for a run: ferry_control_request_run (control/control.h).
 *
 * Creates the run row (keyed, so a repeated request finds the first one) and publishes
 * run.requested. Its own file so that its callers (the HTTP API, the scheduler, the
 * dispatcher's users) do not depend on each other: scheduler.c calls this, dispatcher.c
 * calls the scheduler, and neither calls back. Calls the store and the bus. */
#include <string.h>
#include "bus/bus.h"
#include "control/control.h"
#include "ferry/core.h"
#include "store/store.h"

int ferry_control_request_run(struct ferry_store *st, struct ferry_bus *bus, const char *pipeline,
                              const char *trigger, const char *key, int64_t *run_id, bool *existed,
                              struct ferry_error *err)
{
    struct ferry_pipeline_info pi;
    int rc = ferry_store_pipeline_get(st, pipeline, &pi, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry_store_run_create_keyed(st, pi.name, pi.version, pi.spec, trigger, key, run_id,
                                      existed, err);
    if (rc == FERRY_OK && !*existed) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        /* ferry_buf failures are sticky: the last call reports any earlier one */
        (void)ferry_buf_printf(&b, "{\"pipeline\":");
        (void)ferry_buf_json_string(&b, pi.name, strlen(pi.name));
        (void)ferry_buf_printf(&b, ",\"version\":\"%s\",\"trigger\":", pi.version);
        (void)ferry_buf_json_string(&b, trigger ? trigger : "", trigger ? strlen(trigger) : 0);
        if (ferry_buf_append(&b, "}", 1) != FERRY_OK)
            rc = ferry_error_set(err, FERRY_ENOMEM, "control", "run.requested: out of memory");
        else
            rc = ferry_bus_emit(bus, *run_id, 0, "", FERRY_EV_RUN_REQUESTED, b.data, err);
        ferry_buf_release(&b);
    }
    ferry_pipeline_info_clear(&pi);
    return rc;
}
