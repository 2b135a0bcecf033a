/* runner/lanes.c - the lanes of a run's copy phase (`concurrency: N`, docs/internals/runner.md).
 *
 * A lane is one sink instance with its own session plus one set of reader instances, owned
 * by one thread, copying its resources one after another; up to N lanes run at once. Lane 0
 * is the run's own sink (session.c) and readers (readers.c); lanes 1..N-1 open their own,
 * and their readers import the attempt's one exported snapshot, so every table of the run
 * is read as of one moment. Resources are dealt to lanes largest first, each to the lane
 * with the least work so far (a lane's sink prepares its targets before its session
 * begins: connector.h). cdc resources stay on lane 0 and run after the copy phase.
 *
 * More than one lane only when every resource's sink writes are durable per apply and the
 * sink allows several sessions at once (caps.concurrent_sessions): each lane's commit is
 * then a formality and a failed table costs nothing of the others. Otherwise one lane:
 * resources one after another, as before. Calls: budget.c, run.c, the source and the sink.
 * Called by plan.c (lanes_plan), runner.c and schedule.c (assign, open), session.c
 * (commit, close). */
#include <inttypes.h>
#include <string.h>
#include "ferry/core.h"
#include "pipeline/schema_change.h"
#include "runner/run.h"

static bool lanes_allowed(const struct run *r)
{
    if (r->p->concurrency < 2 || r->distributed || r->shard_mode) return false;
    if (r->p->source_vt->snapshot_one_connection) return false; /* one moment, one connection */
    for (int i = 0; i < r->n_res; i++)
        if (r->res[i].caps.durability != FERRY_DURABLE_PER_APPLY ||
            !r->res[i].caps.concurrent_sessions)
            return false;
    return true;
}

int ferry__lanes_plan(struct run *r, struct ferry_error *err)
{
    int n_copy = 0;
    for (int i = 0; i < r->n_res; i++) {
        r->res[i].copy_phase = r->res[i].spec->mode != FERRY_READ_CDC;
        if (r->res[i].copy_phase) n_copy++;
    }
    bool allowed = lanes_allowed(r);
    r->n_lanes = allowed ? (int)(r->p->concurrency < n_copy ? r->p->concurrency : n_copy) : 1;
    if (r->n_lanes < 1) r->n_lanes = 1;
    /* One failed table stops the run only where the others' writes would share its fate:
     * a sink durable at its commit (one session, aborted as a whole). */
    bool per_apply = r->n_res > 0;
    for (int i = 0; i < r->n_res; i++)
        if (r->res[i].caps.durability != FERRY_DURABLE_PER_APPLY) per_apply = false;
    r->isolate_failures =
        r->p->on_resource_error_continue || (per_apply && !r->distributed && !r->shard_mode);
    int readers = r->distributed || r->shard_mode ? 1 : (int)r->parallelism;
    return ferry__budget_compute(r->p->memory, r->n_lanes, readers, &r->p->batch, &r->opts, err);
}

/* Rows the resource still has to copy, as far as its plan knows (weight for dealing). */
static int64_t weight(const struct resource_run *rr)
{
    return (rr->rows_estimate > 0 && !rr->resumed_any ? rr->rows_estimate : 0) + 1;
}

static int deal(struct run *r, int *order, int n_order)
{
    int64_t *load = ferry_calloc((size_t)r->n_lanes, sizeof *load);
    if (load == NULL) return FERRY_ENOMEM;
    for (int k = 0; k < n_order; k++) {
        struct resource_run *rr = &r->res[order[k]];
        int best = 0;
        if (rr->copy_phase)
            for (int l = 1; l < r->n_lanes; l++)
                if (load[l] < load[best]) best = l;
        rr->lane = best;
        if (rr->copy_phase) load[best] += weight(rr);
        struct lane *ln = &r->lanes[best];
        ln->res[ln->n_res++] = order[k];
    }
    ferry_free(load);
    return FERRY_OK;
}

/* Largest first (stable: the plan's order for equal or unknown sizes). */
static void sort_by_weight(struct run *r, int *order, int n)
{
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;
        while (j > 0 && weight(&r->res[order[j - 1]]) < weight(&r->res[v])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

/* After the plans are frozen (their rows_estimate): which lane copies which resource. */
int ferry__lanes_assign(struct run *r, struct ferry_error *err)
{
    if (r->n_lanes < 1) r->n_lanes = 1;
    struct lane *lanes = ferry_calloc((size_t)r->n_lanes, sizeof *lanes);
    pthread_mutex_lock(&r->lock); /* the control thread reads r->lanes */
    r->lanes = lanes;
    pthread_mutex_unlock(&r->lock);
    int *order = ferry_calloc((size_t)r->n_res + 1, sizeof *order);
    if (r->lanes == NULL || order == NULL) {
        ferry_free(order);
        return ferry__run_oom(err);
    }
    for (int l = 0; l < r->n_lanes; l++) {
        r->lanes[l].r = r;
        r->lanes[l].index = l;
        r->lanes[l].res = ferry_calloc((size_t)r->n_res + 1, sizeof *r->lanes[l].res);
        if (r->lanes[l].res == NULL) {
            ferry_free(order);
            return ferry__run_oom(err);
        }
    }
    for (int i = 0; i < r->n_res; i++)
        order[i] = i;
    if (r->n_lanes > 1) sort_by_weight(r, order, r->n_res);
    int rc = deal(r, order, r->n_res);
    ferry_free(order);
    return rc == FERRY_OK ? FERRY_OK : ferry__run_oom(err);
}

static int open_lane_sink(struct run *r, struct lane *ln, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = p->sink_vt->open(p->sink, &ln->sink_ctx, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: lane %d", p->sink_type, ln->index);
    ferry__plan_prepare_ahead(r, ln->sink_ctx, ln->index);
    for (int k = 0; k < ln->n_res && rc == FERRY_OK; k++) {
        struct resource_run *rr = &r->res[ln->res[k]];
        if (rr->gone) continue;
        rc = p->sink_vt->prepare(ln->sink_ctx, &rr->target, err);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, "%s sink: prepare %s", p->sink_type, rr->target.table);
    }
    if (rc != FERRY_OK) return rc;
    struct ferry_session_info si = {.pipeline = r->dest_key,
                                    .version = p->version,
                                    .run_id = r->run_id,
                                    .attempt = r->attempt,
                                    .resuming = r->resumed};
    rc = p->sink_vt->begin(ln->sink_ctx, &si, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: open session", p->sink_type);
    ln->session_open = true;
    return FERRY_OK;
}

static int open_lane_readers(struct run *r, struct lane *ln, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    ln->readers = ferry_calloc((size_t)r->n_readers, sizeof *ln->readers);
    if (ln->readers == NULL) return ferry__run_oom(err);
    int rc = FERRY_OK;
    while (ln->n_readers < r->n_readers && rc == FERRY_OK) {
        rc = p->source_vt->open(p->source, &ln->readers[ln->n_readers], err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "%s source: lane %d reader %d", p->source_type,
                                      ln->index, ln->n_readers + 1);
        void *inst = ln->readers[ln->n_readers++];
        if (r->snapshot_id != NULL) {
            rc = p->source_vt->use_snapshot(inst, r->snapshot_id, err);
            if (rc != FERRY_OK)
                ferry_error_prefix(err, "%s source: lane %d: using snapshot %s", p->source_type,
                                   ln->index, r->snapshot_id);
        }
    }
    return rc;
}

int ferry__lanes_open(struct run *r, struct lane *ln, struct ferry_error *err)
{
    /* on the lane's thread: its schema-change notes are this run's (as runner.c's) */
    ferry_schema_change_tag_set(r);
    if (ln->index == 0) {
        ln->sink_ctx = r->sink_ctx;
        ln->readers = r->readers;
        ln->n_readers = r->n_readers;
        return FERRY_OK;
    }
    int rc = open_lane_sink(r, ln, err);
    return rc == FERRY_OK ? open_lane_readers(r, ln, err) : rc;
}

void ferry__lanes_forward_stop(struct run *r)
{
    int want = ferry__run_stop_get(r);
    if (want == 0) return;
    pthread_mutex_lock(&r->lock);
    for (int l = 0; r->lanes && l < r->n_lanes; l++) {
        int expected = 0;
        atomic_compare_exchange_strong(&r->lanes[l].stop, &expected, want);
        if (want == FERRY_ECANCELED) atomic_store(&r->lanes[l].stop, want);
    }
    pthread_mutex_unlock(&r->lock);
}

int ferry__lanes_commit(struct run *r, struct ferry_error *err)
{
    for (int l = 1; r->lanes && l < r->n_lanes; l++) {
        struct lane *ln = &r->lanes[l];
        if (!ln->session_open) continue;
        int rc = r->p->sink_vt->commit(ln->sink_ctx, err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "%s sink: lane %d: commit", r->p->sink_type, l);
        ln->session_open = false;
    }
    return FERRY_OK;
}

void ferry__lanes_close(struct run *r)
{
    if (r->lanes == NULL) return;
    for (int l = 0; l < r->n_lanes; l++) {
        struct lane *ln = &r->lanes[l];
        if (l > 0) {
            if (ln->session_open) r->p->sink_vt->abort(ln->sink_ctx);
            if (ln->sink_ctx) r->p->sink_vt->close(ln->sink_ctx);
            for (int i = 0; i < ln->n_readers; i++)
                r->p->source_vt->close(ln->readers[i]);
            ferry_free(ln->readers);
        }
        ferry_free(ln->res);
    }
    pthread_mutex_lock(&r->lock);
    struct lane *lanes = r->lanes;
    r->lanes = NULL;
    pthread_mutex_unlock(&r->lock);
    ferry_free(lanes);
}
