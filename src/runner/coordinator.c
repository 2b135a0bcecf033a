/* runner/coordinator.c - distributed runs (docs/internals/server.md): with `distribute:
 * true` this process coordinates (creates the shard tasks once, leases and works them like
 * any pull worker, waits for those other workers hold); in shard mode it works the one task
 * it was given. A task is a flow over one shard of a resource, reporting through a bus that
 * tags batch.written with the task's token, stopped by flow_stop (which follows the run's
 * stop flag, or cancels a task whose lease was lost). Calls: run.c, schedule.c (flows),
 * tracker, store, the sink (checkpoints), the checkpoint rules (checkpoint/promote.h).
 * Called by runner.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "checkpoint/promote.h"
#include "control/tracker.h"
#include "ferry/core.h"
#include "pipeline/flow.h"
#include "runner/run.h"

/* Where a task resumes: the run checkpoint of its shard, or what a transactional
 * destination committed for this run (never behind the store), read now: the task may have
 * moved in another process since this one planned. */
static int task_resume(struct run *r, struct resource_run *rr, int shard, char **pos,
                       struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    *pos = NULL;
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    int rc = ferry_store_run_checkpoints(r->st, r->run_id, rr->spec->table, &cps, &n, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < n; i++)
        if (cps[i].shard == shard && cps[i].position) *pos = ferry_strdup(cps[i].position);
    ferry_checkpoints_free(cps, n);
    if (!rr->caps.transactional_checkpoint || p->sink_vt->checkpoints == NULL) return FERRY_OK;
    struct ferry_sink_checkpoint *scp = NULL;
    int n_scp = 0;
    rc = p->sink_vt->checkpoints(r->sink_ctx, r->dest_key, &scp, &n_scp, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "%s sink: reading checkpoints", p->sink_type);
    for (int i = 0; i < n_scp && rc == FERRY_OK; i++) {
        struct ferry_sink_checkpoint *c = &scp[i];
        if (c->shard != shard || strcmp(c->resource, rr->spec->table) != 0) continue;
        struct ferry_held_checkpoint held = {c->run_id, c->position};
        bool record = false;
        const char *use = ferry_checkpoint_resume_of(*pos, &held, r->run_id, &record);
        if (record) {
            char *copy = ferry_strdup(use);
            if (copy == NULL) rc = ferry__run_oom(err);
            ferry_free(*pos);
            *pos = copy;
        }
    }
    ferry_sink_checkpoints_free(scp, n_scp);
    return rc;
}

static void set_task(struct run *r, const struct ferry_shard_task *t)
{
    pthread_mutex_lock(&r->task_lock);
    if (t)
        r->task = *t;
    else
        memset(&r->task, 0, sizeof r->task);
    pthread_mutex_unlock(&r->task_lock);
    ferry__shard_bus_set_token(r->tbus, t ? t->token : 0);
}

/* What this process published is folded (the task's checkpoints are saved) before the
 * task is marked done or given back. */
static int wait_folded(struct run *r, struct ferry_error *err)
{
    int64_t seq = ferry__shard_bus_last_seq(r->tbus);
    if (seq <= 0) return FERRY_OK;
    return ferry_tracker_wait(r->tracker, seq, 60000, err);
}

/* The flow of one task: every other shard of the resource is marked done for it. */
static int run_task_flow(struct run *r, struct resource_run *rr, const struct ferry_shard_task *t,
                         char *pos, struct ferry_error *err)
{
    static char done[] = "{\"done\":true}";
    char **resume = ferry_calloc((size_t)rr->n_shards, sizeof *resume);
    struct ferry_flow *f = ferry_calloc(1, sizeof *f);
    if (resume == NULL || f == NULL) {
        ferry_free(resume);
        ferry_free(f);
        return ferry__run_oom(err);
    }
    for (int s = 0; s < rr->n_shards; s++)
        resume[s] = s == t->shard ? pos : done;
    ferry__schedule_flow_init(r, rr, f, resume, r->tbus, &r->flow_stop);
    f->rows_expected = -1; /* the estimate is the resource's, not this shard's */
    f->seq_base = rr->seq_base;
    atomic_store(&rr->active, f);
    int rc = ferry__run_position_done(pos) ? FERRY_OK : ferry_flow_run(f, err);
    atomic_store(&rr->active, NULL);
    rr->seq_base = f->seq_base;
    r->rows += atomic_load(&f->rows_written);
    r->bytes += atomic_load(&f->bytes_written);
    r->batches += atomic_load(&f->batches_written);
    ferry_free(f);
    ferry_free(resume);
    return rc;
}

/* Works one leased task, then marks it done. FERRY_EFENCED when the lease was lost
 * meanwhile (someone else works it now); FERRY_EPAUSED after a drained pause (the lease is
 * given back at once). */
static int work_task(struct run *r, const struct ferry_shard_task *t, struct ferry_error *err)
{
    struct resource_run *rr = ferry__run_find_resource(r, t->resource);
    if (rr == NULL || t->shard < 0 || t->shard >= rr->n_shards)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "run %" PRId64 ": task %s shard %d is not in the pipeline's plan",
                               r->run_id, t->resource, t->shard);
    char *pos = NULL;
    int rc = task_resume(r, rr, t->shard, &pos, err);
    if (rc != FERRY_OK) return rc;
    atomic_store(&r->task_fenced, 0);
    atomic_store(&r->flow_stop, ferry__run_stop_get(r));
    set_task(r, t);
    if (r->o->out && !r->o->quiet) {
        fprintf(r->o->out, "run %" PRId64 ": %s shard %d (token %" PRId64 ")%s\n", r->run_id,
                t->resource, t->shard, t->token, pos ? ", resuming" : "");
        fflush(r->o->out);
    }
    rc = run_task_flow(r, rr, t, pos, err);
    ferry_free(pos);
    struct ferry_error e;
    if (atomic_load(&r->task_fenced)) {
        rc = ferry_error_set(err, FERRY_EFENCED, "runner",
                             "run %" PRId64 " resource %s shard %d: the lease (token %" PRId64
                             ") was lost; another worker continues the shard",
                             r->run_id, t->resource, t->shard, t->token);
    } else if (rc == FERRY_OK) {
        rc = wait_folded(r, err);
        if (rc == FERRY_OK)
            rc = ferry_store_shard_done(r->st, t->run_id, t->resource, t->shard, t->token, err);
    } else if (rc == FERRY_EPAUSED) {
        /* Drained: what it wrote is durable (per_apply); the next worker need not wait for
         * the lease to run out. */
        if (wait_folded(r, &e) == FERRY_OK)
            ferry_store_shard_renew(r->st, t->run_id, t->resource, t->shard, t->token, 1, &e);
    }
    set_task(r, NULL);
    return rc;
}

static int create_tasks(struct run *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        rc = ferry__schedule_emit_started(r, rr, true, err);
        if (rc == FERRY_OK)
            rc = ferry_store_shard_tasks_put(r->st, r->run_id, rr->spec->table, rr->n_shards, err);
    }
    if (rc == FERRY_OK && r->o->out && !r->o->quiet) {
        fprintf(r->o->out, "run %" PRId64 ": distributed; shards are handed out to pull workers\n",
                r->run_id);
        fflush(r->o->out);
    }
    return rc;
}

/* No task to lease now: whether every task is done (*all), else whether the run still
 * runs under this attempt (a shard worker that failed fails the run: stop here too). */
static int check_tasks(struct run *r, bool *all, int64_t *last_report, struct ferry_error *err)
{
    struct ferry_shard_task *v = NULL;
    int n = 0, n_done = 0, n_leased = 0;
    int rc = ferry_store_shard_list(r->st, r->run_id, NULL, &v, &n, err);
    if (rc == FERRY_OK) ferry__shard_tasks_summary(v, n, &n_done, &n_leased, all);
    ferry_free(v);
    if (rc != FERRY_OK || *all) return rc;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    rc = ferry_store_run_get(r->st, r->run_id, &run, err);
    if (rc == FERRY_OK && (run.attempt != r->attempt || run.state != FERRY_RUN_RUNNING))
        rc = ferry_error_set(err, run.attempt != r->attempt ? FERRY_EFENCED : FERRY_ECONFLICT,
                             "runner", "run %" PRId64 " is %s (attempt %d)%s%s", r->run_id,
                             ferry_run_state_name(run.state), run.attempt, run.error[0] ? ": " : "",
                             run.error);
    ferry_run_info_clear(&run);
    int64_t now = ferry_now_mono_us();
    if (rc == FERRY_OK && r->o->out && !r->o->quiet && now - *last_report > 10000000) {
        *last_report = now;
        fprintf(r->o->out, "run %" PRId64 ": %d of %d shards done, %d leased by workers\n",
                r->run_id, n_done, n, n_leased);
        fflush(r->o->out);
    }
    return rc;
}

/* resource.completed of every resource, and the run's totals as the tracker counted every
 * worker's rows. */
static int finish_distributed(struct run *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++)
        rc = ferry__run_emit(r, r->res[i].spec->table, FERRY_EV_RESOURCE_COMPLETED,
                             "{\"distributed\":true}", NULL, err);
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (rc == FERRY_OK && wait_folded(r, NULL) == FERRY_OK &&
        ferry_store_run_get(r->st, r->run_id, &run, NULL) == FERRY_OK) {
        r->rows = run.rows;
        r->bytes = run.bytes;
        r->batches = run.batches;
    }
    ferry_run_info_clear(&run);
    return rc;
}

int ferry__coord_run(struct run *r, struct ferry_error *err)
{
    int rc = create_tasks(r, err);
    int64_t last_report = 0;
    while (rc == FERRY_OK) {
        int stop = ferry__run_stop_get(r);
        if (stop != 0) return stop;
        struct ferry_shard_task t;
        bool found = false, all = false;
        rc = ferry_store_shard_claim(r->st, r->run_id, r->owner, r->lease_ms, &t, &found, err);
        if (rc != FERRY_OK) break;
        if (found) {
            rc = work_task(r, &t, err);
            if (rc == FERRY_EFENCED) {
                ferry_log(FERRY_LOG_WARN, "%s", err->message);
                rc = FERRY_OK;
            }
            continue;
        }
        rc = check_tasks(r, &all, &last_report, err);
        if (rc != FERRY_OK || all) break;
        usleep(100000);
    }
    return rc == FERRY_OK ? finish_distributed(r, err) : rc;
}

int ferry__coord_work_shard(struct run *r, struct ferry_error *err)
{
    struct ferry_shard_task t;
    memset(&t, 0, sizeof t);
    t.run_id = r->run_id;
    snprintf(t.resource, sizeof t.resource, "%s", r->o->shard_resource);
    t.shard = r->o->shard;
    t.token = r->o->shard_token;
    snprintf(t.owner, sizeof t.owner, "%s", r->owner);
    return work_task(r, &t, err);
}
