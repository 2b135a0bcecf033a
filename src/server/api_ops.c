/* server/api_ops.c - routes for running in production (issue 21): the notification
 * deliveries and their dead letters, and the manual retry of a failed run. Kept apart from
 * api.c; same conventions (ferry__srv_* replies, a store handle per request). */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "bus/bus.h"
#include "control/control.h"
#include "ferry/core.h"
#include "server/internal.h"
#include "store/store.h"

/* GET /v1/notifications?state=pending|delivered|dead&limit=N: oldest first. The target is
 * shown as written in the pipeline (a reference stays a reference); bodies are not shown. */
enum MHD_Result ferry__api_notifications(struct req *rq)
{
    const char *state = ferry__srv_query(rq, "state"), *ls = ferry__srv_query(rq, "limit");
    if (state && strcmp(state, "pending") && strcmp(state, "delivered") && strcmp(state, "dead"))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "state: must be pending, delivered or dead");
    char *end = NULL;
    long limit = ls ? strtol(ls, &end, 10) : 100;
    if (ls && (*ls == '\0' || *end != '\0' || limit < 1 || limit > 1000))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "limit: must be an integer from 1 to 1000");
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_notification *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_notification_list(st, state, 0, (int)limit, &v, &n, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:I,s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:s,s:I,s:I}", "id",
                           (json_int_t)v[i].id, "run_id", (json_int_t)v[i].run_id, "event_seq",
                           (json_int_t)v[i].event_seq, "event", v[i].event, "pipeline",
                           v[i].pipeline, "target", v[i].target, "format", v[i].format, "state",
                           v[i].state, "attempts", v[i].attempts, "next_us",
                           (json_int_t)v[i].next_us, "last_error", v[i].last_error,
                           "created_us", (json_int_t)v[i].created_us, "delivered_us",
                           (json_int_t)v[i].delivered_us));
    ferry_notifications_free(v, n);
    return ferry__srv_json(rq, 200, json_pack("{s:o}", "notifications", arr));
}

/* POST /v1/runs/{id}/retry: a failed run is requested again (a new attempt resumes from its
 * checkpoints; it counts as a retry). 409 naming the state otherwise. */
enum MHD_Result ferry__api_run_retry(struct req *rq)
{
    char *end = NULL;
    long long id = strtoll(rq->params[0], &end, 10);
    if (*rq->params[0] == '\0' || *end != '\0' || id <= 0)
        return ferry__srv_error(rq, 404, "not_found", "run \"%s\" not found (run ids are numbers)",
                                rq->params[0]);
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    struct ferry_error e;
    int rc = ferry_store_run_get(st, id, &run, &e);
    if (rc == FERRY_OK && run.state != FERRY_RUN_FAILED)
        rc = ferry_error_set(&e, FERRY_ECONFLICT, "server",
                             "run %lld is %s; only a failed run can be retried", id,
                             ferry_run_state_name(run.state));
    if (rc == FERRY_OK) rc = ferry_store_run_requeue(st, id, true, &e);
    if (rc == FERRY_OK)
        ferry_bus_emit(rq->srv->o.bus, id, run.attempt, "", FERRY_EV_RUN_REQUESTED,
                       "{\"retry\":\"api\"}", NULL);
    ferry_run_info_clear(&run);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 202, json_pack("{s:I,s:s}", "id", (json_int_t)id, "state", "requested"));
}

static bool lower_hex(const char *s, size_t n)
{
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

void ferry__api_trace_context(struct req *rq, int64_t run_id)
{
    const char *tp = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "traceparent");
    /* version 00: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>; anything else is
     * ignored, as the W3C Trace Context spec asks */
    if (tp == NULL || strlen(tp) != 55 || strncmp(tp, "00-", 3) || tp[35] != '-' || tp[52] != '-' ||
        !lower_hex(tp + 3, 32) || !lower_hex(tp + 36, 16))
        return;
    char payload[128];
    snprintf(payload, sizeof payload, "{\"traceparent\":\"%.55s\"}", tp);
    ferry_bus_emit(rq->srv->o.bus, run_id, 0, "", FERRY_EV_RUN_TRACE_CONTEXT, payload, NULL);
}

/* A run without a worker log file: one requested here whose worker has not started yet
 * has an empty log (200, "started": false); a run that is not here, or that never ran on
 * this server, has none (404). */
static enum MHD_Result no_log(struct req *rq, long long id, bool local)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry_store_run_get(st, id, &run, &e);
    bool waiting = rc == FERRY_OK && local && run.state == FERRY_RUN_REQUESTED;
    ferry_run_info_clear(&run);
    ferry__srv_store_put(rq->srv, st);
    if (rc == FERRY_ENOTFOUND || (rc == FERRY_OK && !waiting))
        return ferry__srv_error(rq, 404, "not_found", "run %lld has no worker log here", id);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, json_pack("{s:I,s:[],s:b,s:b}", "id", (json_int_t)id, "lines",
                                              "truncated", false, "started", false));
}

/* GET /v1/runs/{id}/log?lines=N (default 200, at most 2000): the last lines of the run's
 * worker output (logs/run-ID.log of a local worker; ferry never logs a secret). 404 when
 * there is none (a run never dispatched here, a Kubernetes pod's log). */
enum MHD_Result ferry__api_run_log(struct req *rq)
{
    char *end = NULL;
    long long id = strtoll(rq->params[0], &end, 10);
    if (*rq->params[0] == '\0' || *end != '\0' || id <= 0)
        return ferry__srv_error(rq, 404, "not_found", "run \"%s\" not found (run ids are numbers)",
                                rq->params[0]);
    const char *ls = ferry__srv_query(rq, "lines");
    long want = ls ? strtol(ls, &end, 10) : 200;
    if (ls && (*ls == '\0' || *end != '\0' || want < 1 || want > 2000))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "lines: must be an integer from 1 to 2000");
    const char *dir = ferry_control_log_dir(rq->srv->o.control);
    char path[4200];
    snprintf(path, sizeof path, "%s/run-%lld.log", dir ? dir : "", id);
    FILE *f = dir ? fopen(path, "rb") : NULL;
    if (f == NULL) return no_log(rq, id, dir != NULL);
    /* the tail: at most the last 256 KiB, then the last `want` lines of it */
    enum { TAIL_MAX = 256 * 1024 };
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > TAIL_MAX ? size - TAIL_MAX : 0;
    fseek(f, from, SEEK_SET);
    char *buf = ferry_malloc(TAIL_MAX + 1);
    size_t n = buf ? fread(buf, 1, TAIL_MAX, f) : 0;
    fclose(f);
    if (buf == NULL) return ferry__srv_error(rq, 500, "internal", "out of memory");
    buf[n] = '\0';
    /* split into lines; a partial first line of a cut tail is dropped */
    char *p = buf;
    if (from > 0) {
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : buf + n;
    }
    json_t *all = json_array();
    char *save = NULL;
    for (char *l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    {
        json_t *v = json_string(l);
        json_array_append_new(all, v ? v : json_string("(a line that is not UTF-8)"));
    }
    size_t total = json_array_size(all);
    size_t skip = total > (size_t)want ? total - (size_t)want : 0;
    bool truncated = skip > 0 || from > 0;
    json_t *arr = json_array();
    for (size_t i = skip; i < total; i++) json_array_append(arr, json_array_get(all, i));
    json_decref(all);
    ferry_free(buf);
    return ferry__srv_json(rq, 200, json_pack("{s:I,s:o,s:b}", "id", (json_int_t)id, "lines", arr,
                                              "truncated", truncated));
}
