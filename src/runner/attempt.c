/* runner/attempt.c - which logical run this process works on, and under which attempt:
 * `--resume RUN`, else the newest unfinished run of this pipeline version (unless
 * `--fresh`), else a new run; then a new attempt, which fences every older one. A run of the
 * same pipeline and state file going on in another thread of this process refuses it
 * (run.c's list: the pid check cannot tell that run from a dead one). A shard
 * worker joins the coordinator's running attempt instead. Calls: run.c, store. Called by
 * runner.c. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "ferry/core.h"
#include "runner/run.h"

/* Whether the process of a run's attempt still works on it: the process exists and its
 * heartbeat (every 2 s) is recent. A reused pid with a stale heartbeat is not the run's. */
static bool run_alive(const struct ferry_run_info *info)
{
    int pid = info->pid;
    if (pid <= 0 || pid == getpid()) return false;
    if (!(kill(pid, 0) == 0 || errno == EPERM)) return false;
    return ferry_now_wall_us() - info->heartbeat_us < INT64_C(30000000);
}

static int pick_run(struct run *r, struct ferry_error *err)
{
    const struct ferry_run_options *o = r->o;
    struct ferry_pipeline_spec *p = r->p;
    int rc;
    if (o->resume_run_id > 0) {
        rc = ferry_store_run_get(r->st, o->resume_run_id, &r->info, err);
        if (rc != FERRY_OK) return rc;
        if (strcmp(r->info.pipeline, p->name) != 0)
            return ferry_error_set(err, FERRY_ECONFIG, "runner",
                                   "run %" PRId64 " belongs to pipeline %s, not %s",
                                   o->resume_run_id, r->info.pipeline, p->name);
        if (strcmp(r->info.version, p->version) != 0)
            return ferry_error_set(err, FERRY_ECONFIG, "runner",
                                   "the pipeline file changed since run %" PRId64 " was planned "
                                   "(version %.12s, now %.12s): its checkpoints do not apply; "
                                   "start a new run with `ferry run --fresh`",
                                   o->resume_run_id, r->info.version, p->version);
        if (r->info.state == FERRY_RUN_COMPLETED || r->info.state == FERRY_RUN_CANCELED ||
            r->info.state == FERRY_RUN_PARTIAL)
            return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                                   "run %" PRId64 " is %s and cannot be resumed", r->info.id,
                                   ferry_run_state_name(r->info.state));
        if (r->info.state == FERRY_RUN_RUNNING && run_alive(&r->info))
            return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                                   "run %" PRId64 " is running (pid %d)", r->info.id, r->info.pid);
        r->run_id = r->info.id;
        /* A run requested through `ferry serve` and never started is not a resumption. */
        r->resumed = r->info.attempt > 0;
        return FERRY_OK;
    }
    /* The newest run of this pipeline is continued when it has the same version and did not
     * finish: interrupted (its process is gone), paused, or failed. */
    struct ferry_run_info *newest = NULL;
    int n = 0;
    rc = ferry_store_run_list(r->st, p->name, 1, &newest, &n, err);
    if (rc != FERRY_OK) return rc;
    bool found = n == 1 && !strcmp(newest[0].version, p->version) &&
                 newest[0].state != FERRY_RUN_COMPLETED && newest[0].state != FERRY_RUN_CANCELED &&
                 newest[0].state != FERRY_RUN_PARTIAL;
    if (found) {
        r->info = newest[0];
        memset(&newest[0], 0, sizeof newest[0]);
    }
    ferry_run_infos_free(newest, n);
    if (found && r->info.state == FERRY_RUN_RUNNING && run_alive(&r->info))
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "pipeline %s already has run %" PRId64 " in progress (pid %d); "
                               "wait for it, or `ferry pause %" PRId64 "`",
                               p->name, r->info.id, r->info.pid, r->info.id);
    if (found && !o->fresh) {
        r->run_id = r->info.id;
        r->resumed = true;
        return FERRY_OK;
    }
    if (found) {
        /* --fresh: an unfinished run is closed so it is never resumed. */
        if (!ferry_run_state_is_final(r->info.state)) {
            rc = ferry_store_run_set_state(r->st, r->info.id, r->info.attempt, FERRY_RUN_FAILED,
                                           "superseded by a --fresh run", err);
            if (rc != FERRY_OK) return rc;
        }
        ferry_run_info_clear(&r->info);
        memset(&r->info, 0, sizeof r->info);
    }
    rc = ferry_store_run_create(r->st, p->name, p->version, p->request_json, &r->run_id, err);
    if (rc != FERRY_OK) return rc;
    return ferry_store_run_get(r->st, r->run_id, &r->info, err);
}

/* Shard mode: the run's current attempt is the coordinator's; a shard worker works under
 * it and never starts one (that would fence the coordinator). */
static int join_running(struct run *r, struct ferry_error *err)
{
    const struct ferry_run_options *o = r->o;
    int rc = ferry_store_run_get(r->st, o->resume_run_id, &r->info, err);
    if (rc != FERRY_OK) return rc;
    r->run_id = r->info.id;
    r->attempt = r->info.attempt;
    r->resumed = true;
    if (r->info.state != FERRY_RUN_RUNNING)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "run %" PRId64 " is %s: its shard %s/%d is not worked", r->run_id,
                               ferry_run_state_name(r->info.state), o->shard_resource, o->shard);
    return FERRY_OK;
}

int64_t ferry__run_peek(struct run *r)
{
    const struct ferry_run_options *o = r->o;
    if (o->resume_run_id > 0) return o->resume_run_id;
    if (o->fresh) return 0;
    struct ferry_run_info *newest = NULL;
    int n = 0;
    if (ferry_store_run_list(r->st, r->p->name, 1, &newest, &n, NULL) != FERRY_OK) return 0;
    int64_t id = n == 1 && !strcmp(newest[0].version, r->p->version) &&
                         newest[0].state != FERRY_RUN_COMPLETED &&
                         newest[0].state != FERRY_RUN_CANCELED &&
                         newest[0].state != FERRY_RUN_PARTIAL
                     ? newest[0].id
                     : 0;
    ferry_run_infos_free(newest, n);
    return id;
}

int ferry__run_attach(struct run *r, struct ferry_error *err)
{
    if (r->shard_mode) return join_running(r, err);
    int rc = ferry__run_live_enter(r, err);
    if (rc == FERRY_OK) rc = pick_run(r, err);
    if (rc != FERRY_OK) return rc;
    if (r->o->claimed_attempt > 0) {
        /* run_claim began the attempt (requested -> running) atomically. */
        r->attempt = r->o->claimed_attempt;
        r->resumed = r->o->claimed_attempt > 1;
        return FERRY_OK;
    }
    return ferry_store_run_begin_attempt(r->st, r->run_id, (int)getpid(), &r->attempt, err);
}
