/* control/reaper.c - fails runs whose worker went silent (control/control.h).
 *
 * A worker records a heartbeat in the run's row every 2 s (runner control thread) and a
 * run.heartbeat event with CPU and memory every 10 s. A run still `running` whose heartbeat
 * is older than the lease has lost its worker: the reaper fences the attempt in the store
 * (attempt + 1, state failed) in one transaction, so the worker, should it come back,
 * finds its attempt stale at its next heartbeat or store write and stops; the tracker
 * ignores every event it still publishes. Then `worker.lost` and `run.failed` are published
 * under the fencing attempt, and the run is requested again when the pipeline's retry
 * policy allows (the new attempt resumes from the durable checkpoints). Calls the store and
 * the bus. Called by the dispatcher (a child that exited while still `running`) and by the
 * reaper thread of ferry_control_start. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "bus/bus.h"
#include "control/control.h"
#include "ferry/core.h"
#include "store/store.h"

int ferry_control_lose(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id, int attempt,
                       int64_t silent_before_us, const char *why, int lease_ms, bool *retried,
                       struct ferry_error *err)
{
    *retried = false;
    char msg[512];
    snprintf(msg, sizeof msg, "worker lost (attempt %d): %s", attempt, why);
    int fenced = 0;
    int rc = ferry_store_run_reap(st, run_id, attempt, silent_before_us, msg, &fenced, err);
    if (rc != FERRY_OK) return rc;
    ferry_log(FERRY_LOG_WARN, "run %" PRId64 ": %s", run_id, msg);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b, "{\"lease_ms\":%d,\"lost_attempt\":%d,\"reason\":", lease_ms, attempt);
    ferry_buf_json_string(&b, why, strlen(why));
    ferry_buf_append(&b, "}", 1);
    rc = ferry_bus_emit(bus, run_id, fenced, "", FERRY_EV_WORKER_LOST, b.data, err);
    ferry_buf_reset(&b);
    ferry_buf_printf(&b, "{\"code\":\"worker_lost\",\"message\":");
    ferry_buf_json_string(&b, msg, strlen(msg));
    ferry_buf_append(&b, "}", 1);
    if (rc == FERRY_OK)
        rc = ferry_bus_emit(bus, run_id, fenced, "", FERRY_EV_RUN_FAILED, b.data, err);
    ferry_buf_release(&b);
    if (rc != FERRY_OK) return rc;

    /* Retry policy: the registered pipeline's `retries`; runs of pipelines that were never
     * registered with the server (plain `ferry run`) are not retried. */
    struct ferry_run_info run;
    struct ferry_pipeline_info pi;
    memset(&run, 0, sizeof run);
    memset(&pi, 0, sizeof pi);
    int done = 0;
    if (ferry_store_run_get(st, run_id, &run, NULL) == FERRY_OK &&
        ferry_store_pipeline_get(st, run.pipeline, &pi, NULL) == FERRY_OK &&
        strcmp(pi.version, run.version) == 0 &&
        ferry_store_run_retries(st, run_id, &done, NULL) == FERRY_OK && done < pi.retries) {
        rc = ferry_store_run_requeue(st, run_id, true, err);
        if (rc == FERRY_OK) {
            char payload[128];
            snprintf(payload, sizeof payload, "{\"retry\":%d}", done + 1);
            rc = ferry_bus_emit(bus, run_id, fenced, "", FERRY_EV_RUN_REQUESTED, payload, err);
            *retried = rc == FERRY_OK;
            ferry_log(FERRY_LOG_INFO, "run %" PRId64 ": retry %d of %d requested", run_id, done + 1,
                      pi.retries);
        }
    }
    ferry_pipeline_info_clear(&pi);
    ferry_run_info_clear(&run);
    return rc;
}

int ferry_reaper_sweep(struct ferry_store *st, struct ferry_bus *bus, int lease_ms,
                       void (*stuck)(void *arg, int64_t run_id), void *arg, int *lost,
                       int *retried, struct ferry_error *err)
{
    *lost = 0;
    *retried = 0;
    struct ferry_run_info *v = NULL;
    int n = 0;
    int rc = ferry_store_run_list_filtered(st, NULL, FERRY_RUN_RUNNING, 0, 0, &v, &n, err);
    if (rc != FERRY_OK) return rc;
    int64_t now = ferry_now_wall_us();
    for (int i = 0; i < n; i++) {
        int64_t silent_ms = (now - v[i].heartbeat_us) / 1000;
        if (silent_ms <= lease_ms) continue;
        char why[160];
        snprintf(why, sizeof why, "no heartbeat for %" PRId64 " ms (lease %d ms, pid %d)",
                 silent_ms, lease_ms, v[i].pid);
        bool again = false;
        struct ferry_error e;
        int lrc = ferry_control_lose(st, bus, v[i].id, v[i].attempt, now - (int64_t)lease_ms * 1000,
                                     why, lease_ms, &again, &e);
        if (lrc == FERRY_OK) {
            (*lost)++;
            if (again) (*retried)++;
        } else if (lrc != FERRY_EFENCED && lrc != FERRY_ECONFLICT) {
            ferry_log(FERRY_LOG_ERROR, "reaper: run %" PRId64 ": %s", v[i].id, e.message);
            if (lrc == FERRY_ETIMEOUT && stuck) stuck(arg, v[i].id);
        }
    }
    ferry_run_infos_free(v, n);
    return FERRY_OK;
}
