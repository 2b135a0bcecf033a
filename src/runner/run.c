/* runner/run.c - the run's stop flag, its event emitter and small helpers every other file
 * of the runner shares (run.h). Calls: bus, store. Called by every file of src/runner. */
#include <string.h>
#include "bus/bus.h"
#include "checkpoint/position.h"
#include "ferry/core.h"
#include "runner/run.h"

atomic_int ferry__run_stop;

void ferry_runner_signal(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&ferry__run_stop, &expected, FERRY_EPAUSED))
        atomic_store(&ferry__run_stop, FERRY_ECANCELED);
}

void ferry_runner_request_stop(int code)
{
    if (code == FERRY_ECANCELED) {
        atomic_store(&ferry__run_stop, FERRY_ECANCELED);
        return;
    }
    int expected = 0;
    atomic_compare_exchange_strong(&ferry__run_stop, &expected, code);
}

int ferry__run_emit(struct run *r, const char *resource, const char *type, const char *payload,
                    int64_t *seq, struct ferry_error *err)
{
    struct ferry_event ev;
    memset(&ev, 0, sizeof ev);
    ev.run_id = r->run_id;
    ev.attempt = r->attempt;
    ev.time_us = ferry_now_wall_us();
    snprintf(ev.resource, sizeof ev.resource, "%s", resource ? resource : "");
    snprintf(ev.type, sizeof ev.type, "%s", type);
    ev.payload = (char *)(payload ? payload : "{}");
    int rc = ferry_bus_publish(r->bus, &ev, err);
    if (rc == FERRY_OK && seq) *seq = ev.seq;
    return rc;
}

int ferry__run_emit_failure(struct run *r, const char *resource, const char *type, int rc,
                            const char *msg, int64_t *seq, struct ferry_error *err)
{
    struct ferry_buf fb;
    ferry_buf_init(&fb, 0);
    ferry_buf_printf(&fb, "{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
    ferry_buf_json_string(&fb, msg, strlen(msg));
    ferry_buf_append(&fb, "}", 1);
    int erc = ferry__run_emit(r, resource, type, fb.data, seq, err);
    ferry_buf_release(&fb);
    return erc;
}

int ferry__run_oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
}

bool ferry__run_position_done(const char *pos)
{
    return ferry_position_text_done(pos);
}

struct resource_run *ferry__run_find_resource(struct run *r, const char *name)
{
    for (int i = 0; i < r->n_res; i++)
        if (strcmp(r->res[i].spec->table, name) == 0) return &r->res[i];
    return NULL;
}

int ferry__run_route_position(struct run *r, const struct resource_run *rr, char **pos,
                              int64_t *run_id, struct ferry_error *err)
{
    *pos = NULL;
    if (run_id) *run_id = 0;
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    int rc =
        ferry_store_route_checkpoints(r->st, r->p->name, r->p->version, rr->route, &cps, &n, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        if (cps[i].shard == 0) {
            ferry_free(*pos);
            *pos = ferry_strdup(cps[i].position);
            if (run_id) *run_id = cps[i].run_id;
        }
    ferry_checkpoints_free(cps, n);
    return rc;
}
