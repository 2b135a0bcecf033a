/* runner/schedule.c - runs the resources of a run in this process and reports each one's
 * start and end: first the copy phase, where up to `concurrency` lanes (lanes.c) each copy
 * their resources one after another on a thread of their own, then the stream phase, where
 * cdc resources run one after another on lane 0 (a cdc resource with copy shards: two flows,
 * copy first, then its stream). After the run's end is folded, cdc sources release their log.
 *
 * run_resource does everything one resource needs and touches the run through three
 * things: the lane it is given (sink instance, readers), the run's totals (add_totals,
 * under r->lock) and the emitter. A failed resource does not stop the others when
 * r->isolate_failures (lanes.c): it is counted in failed_res and the run ends failed (or
 * partial with on_resource_error: continue); a pause, a cancel, a store or fencing failure
 * concerns the whole run: no lane starts another resource. Calls: run.c, lanes.c,
 * progress.c, flow, store, the source (cdc_ack). Called by runner.c and coordinator.c.
 * A source whose cdc streams share one log connection (cdc_one_stream) has its streams run
 * side by side instead ("the stream phase side by side" below). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "checkpoint/position.h"
#include "core/mono.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "pipeline/commit_group.h"
#include "pipeline/flow.h"
#include "pipeline/convert.h"
#include "pipeline/transform.h"
#include "runner/run.h"

/* The flow over rr on a lane: its readers and sink instance (NULL: the run's own). */
static void flow_init(struct run *r, struct resource_run *rr, struct ferry_flow *f,
                      const struct lane *ln, char **resume, struct ferry_bus *bus, atomic_int *stop)
{
    struct ferry_pipeline_spec *p = r->p;
    f->src_vt = p->source_vt;
    f->src_ctx = ln && ln->index > 0 ? ln->readers[0] : r->src_ctx;
    f->readers = ln && ln->index > 0 ? ln->readers : r->readers;
    f->n_readers = ln && ln->index > 0 ? ln->n_readers : r->n_readers;
    f->spec = rr->spec;
    f->schema = rr->schema;
    f->plan_json = rr->plan_json;
    f->n_shards = rr->n_shards;
    f->resume = resume;
    f->chain = rr->chain;
    f->convert = rr->convert;
    ferry_transforms_set_run(rr->chain, r->run_id); /* add: value: run_id */
    f->sink_vt = p->sink_vt;
    f->sink_ctx = ln && ln->index > 0 ? ln->sink_ctx : r->sink_ctx;
    f->caps = rr->caps;
    f->target = &rr->target;
    f->bus = bus;
    f->run_id = r->run_id;
    f->attempt = r->attempt;
    f->opts = r->opts; /* the file's batch settings within the memory budget */
    f->stop = stop;
    /* rows of earlier attempts are not counted again: no estimate for a resumed resource */
    f->rows_expected = rr->resumed_any ? -1 : rr->rows_estimate;
}

void ferry__schedule_flow_init(struct run *r, struct resource_run *rr, struct ferry_flow *f,
                               char **resume, struct ferry_bus *bus, atomic_int *stop)
{
    flow_init(r, rr, f, NULL, resume, bus, stop);
}

/* resource.started of rr; `distributed` marks the coordinator's (its shards become tasks). */
int ferry__schedule_emit_started(struct run *r, struct resource_run *rr, bool distributed,
                                 struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b, "{\"mode\":\"%s\",\"write\":\"%s\",\"shards\":%d,\"resumed\":%s,%s",
                     ferry_read_mode_name(rr->spec->mode), ferry_write_mode_name(r->p->write),
                     rr->n_shards, rr->resumed_any ? "true" : "false",
                     distributed ? "\"distributed\":true," : "");
    if (rr->rows_estimate >= 0)
        ferry_buf_printf(&b, "\"rows_estimate\":%" PRId64 ",", rr->rows_estimate);
    if (rr->row_groups_skipped >= 0)
        ferry_buf_printf(&b, "\"row_groups_skipped\":%" PRId64 ",", rr->row_groups_skipped);
    ferry_buf_printf(&b, "\"route\":");
    ferry_buf_json_string(&b, rr->route, strlen(rr->route));
    ferry_buf_append(&b, "}", 1);
    int rc = ferry__run_emit(r, rr->spec->table, FERRY_EV_RESOURCE_STARTED, b.data, NULL, err);
    ferry_buf_release(&b);
    return rc;
}

/* A cdc resource's shard 0 streams changes that must land after every row of its copy
 * shards: the copy runs as one flow (any number of readers), then the stream as a second
 * one. Other resources: one flow. run_phase runs one of the two (copy: shards 1..n). */
static int run_phase(struct resource_run *rr, struct ferry_flow *f, bool copy,
                     struct ferry_error *err)
{
    static char done[] = "{\"done\":true}";
    char **phase = ferry_calloc((size_t)rr->n_shards, sizeof *phase);
    if (phase == NULL) return ferry__run_oom(err);
    for (int s = 0; s < rr->n_shards; s++)
        phase[s] = (s == 0) == copy ? done : rr->resume[s];
    f->resume = phase;
    int rc = ferry_flow_run(f, err);
    f->resume = rr->resume;
    ferry_free(phase);
    return rc;
}

/* Whether rr's flow applies as a commit group of one: a sink with group transactions,
 * durable per apply, the flow alone on its sink instance, and either a cdc stream run alone
 * from a source that marks cuts (lane 0's sink instance), or a full read without resume
 * points (no_resume_point: a table without a key; after a crash its shard is read again from
 * its first row, so batches committed one by one before the crash would be written twice). */
static bool alone_groupable(const struct run *r, const struct resource_run *rr,
                            const struct ferry_flow *f)
{
    const struct ferry_sink_vtable *vt = r->p->sink_vt;
    bool cdc = rr->spec->mode == FERRY_READ_CDC && r->p->source_vt->cdc_commit_groups &&
               f->sink_ctx == r->sink_ctx;
    return (cdc || rr->no_resume_point) && vt->group_begin != NULL &&
           vt->group_commit != NULL && vt->group_abort != NULL &&
           rr->caps.durability == FERRY_DURABLE_PER_APPLY && f->sink_lock == NULL &&
           f->group == NULL && !r->distributed && !r->shard_mode;
}

/* The flow of a resource run alone, in a commit group of one when alone_groupable: a cdc
 * stream's destination transactions end only at cuts between source transactions, so a
 * source transaction larger than a batch is never seen in parts (docs/internals/cdc.md); a
 * full read without resume points commits all its batches, with their checkpoints, in one
 * destination transaction at its end (docs/guarantees.md): all or nothing. phased: the
 * stream phase of a cdc plan with copy shards. */
static int run_alone(struct run *r, struct resource_run *rr, struct ferry_flow *f, bool phased,
                     struct ferry_error *err)
{
    pthread_mutex_t lock;
    pthread_mutex_init(&lock, NULL);
    struct ferry_commit_group *g = NULL;
    if (alone_groupable(r, rr, f)) {
        g = ferry_commit_group_new(r->p->sink_vt, f->sink_ctx, &lock);
        f->group = g ? ferry_commit_group_member(g, rr->spec->table) : NULL;
        if (f->group == NULL) {
            ferry_commit_group_free(g);
            g = NULL;
            ferry_log(FERRY_LOG_WARN, "out of memory for the commit group: %s commits per batch",
                      rr->spec->table);
        }
    }
    if (g != NULL) f->sink_lock = &lock;
    int rc = phased ? run_phase(rr, f, false, err) : ferry_flow_run(f, err);
    if (g != NULL) {
        f->group = NULL;
        f->sink_lock = NULL;
        ferry_log(FERRY_LOG_INFO, "commit group: %ld destination transaction(s) for %s",
                  ferry_commit_group_commits(g), rr->spec->table);
        ferry_commit_group_free(g);
    }
    pthread_mutex_destroy(&lock);
    return rc;
}

static int run_flow(struct run *r, struct resource_run *rr, struct ferry_flow *f,
                    struct ferry_error *err)
{
    if (rr->spec->mode != FERRY_READ_CDC)
        return rr->no_resume_point ? run_alone(r, rr, f, false, err) : ferry_flow_run(f, err);
    if (rr->n_shards < 2) return run_alone(r, rr, f, false, err);
    int rc = run_phase(rr, f, true, err);
    return rc == FERRY_OK ? run_alone(r, rr, f, true, err) : rc;
}

/* The run's totals, added by every lane. */
static void add_totals(struct run *r, struct ferry_flow *f)
{
    pthread_mutex_lock(&r->lock);
    r->rows += atomic_load(&f->rows_written);
    r->bytes += atomic_load(&f->bytes_written);
    r->batches += atomic_load(&f->batches_written);
    pthread_mutex_unlock(&r->lock);
    atomic_fetch_add(&r->res_done, 1);
}

/* resource.completed of rr, and its summary line when there is no live progress line. */
static int report_completed(struct run *r, struct resource_run *rr, struct ferry_flow *f,
                            int64_t elapsed, struct ferry_error *err)
{
    struct ferry_buf pb;
    ferry_buf_init(&pb, 0);
    int64_t rows = atomic_load(&f->rows_written), bytes = atomic_load(&f->bytes_written);
    int64_t wsrc = atomic_load(&f->wait_source_us), wsink = atomic_load(&f->wait_sink_us);
    const char *bound = ferry__run_bound(wsrc, wsink, elapsed);
    ferry_buf_printf(&pb,
                     "{\"rows\":%" PRId64 ",\"bytes\":%" PRId64 ",\"ms\":%" PRId64
                     ",\"wait_source_ms\":%" PRId64 ",\"wait_sink_ms\":%" PRId64
                     ",\"bound\":\"%s\"",
                     rows, bytes, elapsed / 1000, wsrc / 1000, wsink / 1000, bound);
    /* on_unrepresentable: what this attempt converted, per column */
    ferry_convert_json(rr->convert, true, &pb);
    ferry_buf_append(&pb, "}", 1);
    int rc = ferry__run_emit(r, rr->spec->table, FERRY_EV_RESOURCE_COMPLETED,
                             pb.data ? pb.data : "{}", NULL, err);
    ferry_buf_release(&pb);
    pthread_mutex_lock(&r->lock);
    r->converted += ferry_convert_total(rr->convert);
    pthread_mutex_unlock(&r->lock);
    if (r->o->out && !r->o->quiet && ferry_convert_total(rr->convert) > 0)
        fprintf(r->o->out,
                "%s: %" PRId64 " value(s) the sink cannot hold converted "
                "(on_unrepresentable: %s; ferry show RUN lists them per column)\n",
                rr->spec->table, ferry_convert_total(rr->convert),
                ferry_unrepresentable_name(rr->read.on_unrepresentable));
    if (r->o->out && !r->o->quiet && !r->o->progress_tty) {
        double secs = (double)elapsed / 1e6;
        const char *label = ferry__run_bound_label(bound);
        fprintf(r->o->out, "%s: %" PRId64 " rows, %.1f MB in %.2f s (%.0f rows/s%s%s)\n",
                rr->spec->table, rows, (double)bytes / 1e6, secs,
                secs > 0 ? (double)rows / secs : 0.0, label[0] ? ", " : "", label);
    }
    return rc;
}

/* A table of the frozen list the source no longer has: started, then failed naming it. */
static int resource_gone(struct run *r, struct resource_run *rr, struct ferry_error *err)
{
    int rc = ferry__schedule_emit_started(r, rr, false, err);
    if (rc != FERRY_OK) return rc;
    atomic_fetch_add(&r->res_done, 1);
    /* copied whole by an earlier attempt: nothing is missing */
    bool done = rr->n_shards > 0;
    for (int s = 0; s < rr->n_shards; s++)
        done = done && ferry__run_position_done(rr->resume[s]);
    if (done)
        return ferry__run_emit(r, rr->spec->table, FERRY_EV_RESOURCE_COMPLETED,
                               "{\"rows\":0,\"bytes\":0,\"ms\":0}", NULL, err);
    rc = ferry_error_set(err, FERRY_ENOTFOUND, "runner", "%s", rr->gone);
    ferry__run_emit_failure(r, rr->spec->table, FERRY_EV_RESOURCE_FAILED, rc, err->message, NULL,
                            NULL);
    return rc;
}

/* resource.started, and the resource's flow on lane ln (not yet run). */
static int resource_begin(struct run *r, struct resource_run *rr, struct lane *ln,
                          struct ferry_flow **out, struct ferry_error *err)
{
    int rc = ferry__schedule_emit_started(r, rr, false, err);
    if (rc != FERRY_OK) return rc;
    if (rr->resumed_any && r->o->out && !r->o->quiet)
        fprintf(r->o->out, "%s: resuming from its last durable checkpoint\n", rr->spec->table);
    struct ferry_flow *f = ferry_calloc(1, sizeof *f);
    if (f == NULL) return ferry__run_oom(err);
    rr->flow = f;
    /* one lane: the run's own stop flag, as before; several: the lane's (lanes.c) */
    atomic_int *stop = r->n_lanes > 1 ? (atomic_int *)&ln->stop : r->stop;
    flow_init(r, rr, f, ln, rr->resume, r->bus, stop);
    *out = f;
    return FERRY_OK;
}

/* After the resource's flow(s) ended with rc: lag, schema events, totals, completed or
 * failed. Returns rc (err kept) or the completion's emit result. */
static int resource_end(struct run *r, struct resource_run *rr, struct ferry_flow *f, int64_t t_res,
                        int rc, bool progress, struct ferry_error *err)
{
    int64_t last_lag = -1;
    ferry__run_emit_cdc_lag(r, f, &last_lag); /* a cdc stream's final position and lag */
    ferry__run_emit_schema_changes(r, rr);
    if (progress) ferry__run_print_progress(r, f, t_res, true);
    add_totals(r, f);
    if (rc == FERRY_OK) return report_completed(r, rr, f, ferry_now_mono_us() - t_res, err);
    if (rc != FERRY_EPAUSED && rc != FERRY_ECANCELED)
        ferry__run_emit_failure(r, rr->spec->table, FERRY_EV_RESOURCE_FAILED, rc, err->message,
                                NULL, NULL);
    return rc;
}

/* Everything one resource needs: started, its flow(s), completed or failed. */
static int run_resource(struct run *r, struct resource_run *rr, struct lane *ln,
                        struct ferry_error *err)
{
    if (rr->gone) return resource_gone(r, rr, err);
    struct ferry_flow *f = NULL;
    int rc = resource_begin(r, rr, ln, &f, err);
    if (rc != FERRY_OK) return rc;
    int64_t t_res = ferry_now_mono_us();
    atomic_store(&rr->active, f);
    rc = run_flow(r, rr, f, err);
    atomic_store(&rr->active, NULL);
    return resource_end(r, rr, f, t_res, rc, r->n_lanes <= 1, err);
}

/* Whether a failure of one resource stops the run (else the others go on). */
static bool stops_run(const struct run *r, int rc)
{
    return !r->isolate_failures || rc == FERRY_EPAUSED || rc == FERRY_ECANCELED ||
           rc == FERRY_ESTORE || rc == FERRY_EFENCED || rc == FERRY_ENOMEM;
}

/* Records a resource's failure: the run's first stopping failure (no lane starts another
 * resource after it), or one more failed resource. */
static void record_failure(struct run *r, struct resource_run *rr, int rc, struct ferry_error *e)
{
    pthread_mutex_lock(&r->lock);
    if (stops_run(r, rc)) {
        if (r->fatal_rc == FERRY_OK) {
            r->fatal_rc = rc;
            r->fatal_err = *e;
        }
    } else {
        ferry_buf_printf(&r->failed_res, "%s%s: %s", r->n_failed_res ? "; " : "", rr->spec->table,
                         e->message);
        if (r->n_failed_res++ == 0) r->first_failed_rc = rc;
        /* the run is worth retrying while every failure is (retry.c) */
        r->failed_transient =
            (r->n_failed_res == 1 || r->failed_transient) && ferry_error_is_transient(e);
    }
    pthread_mutex_unlock(&r->lock);
}

static bool run_stopping(struct run *r)
{
    pthread_mutex_lock(&r->lock);
    bool stop = r->fatal_rc != FERRY_OK;
    pthread_mutex_unlock(&r->lock);
    return stop || ferry__run_stop_get(r) != 0;
}

/* A pause or cancel that arrived before a resource started: the run stops with it (a run
 * that skipped a resource never reads as completed, and a replace never publishes less). */
static void record_unstarted(struct run *r, struct resource_run *rr)
{
    int stop = ferry__run_stop_get(r);
    if (stop != FERRY_EPAUSED && stop != FERRY_ECANCELED) return;
    struct ferry_error e;
    ferry_error_clear(&e);
    ferry_error_set(&e, stop, "runner", "resource %s: %s before it started", rr->spec->table,
                    stop == FERRY_EPAUSED ? "paused" : "canceled");
    record_failure(r, rr, stop, &e);
}

/* The resources of one lane in one phase (copy: copy_phase resources; else the streams). */
static void run_lane(struct lane *ln, bool copy)
{
    struct run *r = ln->r;
    for (int k = 0; k < ln->n_res; k++) {
        struct resource_run *rr = &r->res[ln->res[k]];
        if (rr->copy_phase != copy) continue;
        if (run_stopping(r)) {
            record_unstarted(r, rr);
            break;
        }
        struct ferry_error e;
        ferry_error_clear(&e);
        int rc = run_resource(r, rr, ln, &e);
        if (rc != FERRY_OK) record_failure(r, rr, rc, &e);
    }
}

static void *lane_main(void *arg)
{
    struct lane *ln = arg;
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry__lanes_open(ln->r, ln, &e);
    if (rc == FERRY_OK) {
        run_lane(ln, true);
    } else {
        /* a lane that cannot open stops the run: its resources would never be copied */
        pthread_mutex_lock(&ln->r->lock);
        if (ln->r->fatal_rc == FERRY_OK) {
            ln->r->fatal_rc = rc;
            ln->r->fatal_err = e;
        }
        pthread_mutex_unlock(&ln->r->lock);
    }
    return NULL;
}

/* The copy phase: one thread per lane (this one when there is a single lane). */
static int copy_phase(struct run *r, struct ferry_error *err)
{
    if (r->n_lanes <= 1) {
        run_lane(&r->lanes[0], true);
        return FERRY_OK;
    }
    int rc = ferry__lanes_open(r, &r->lanes[0], err);
    for (int l = 0; l < r->n_lanes && rc == FERRY_OK; l++) {
        struct lane *ln = &r->lanes[l];
        if (pthread_create(&ln->thread, NULL, lane_main, ln) != 0) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "runner", "lane %d: cannot start a thread", l);
            ferry__run_stop_set(r, FERRY_ECANCELED);
        } else {
            ln->started = true;
        }
    }
    for (int l = 0; l < r->n_lanes; l++)
        if (r->lanes[l].started) pthread_join(r->lanes[l].thread, NULL);
    return rc;
}

/* ---- the stream phase side by side (a source with cdc_one_stream) ----
 * The copies of the cdc resources run first, one after another on lane 0 (they read the
 * planning connection's snapshot); then every stream that copied runs at once, each on a
 * thread with a source instance of its own, so the source can serve them all from one log
 * connection; their applies go to lane 0's sink one at a time (flow.sink_lock). Each stream
 * has its own stop flag (a failed table stops only its own readers), into which the waiting
 * thread copies the run's stop requests. */
struct stream_run {
    struct wave_sync *sync;
    struct run *r;
    struct resource_run *rr;
    struct ferry_flow *f;
    void *src; /* the stream's own source instance */
    atomic_int stop;
    atomic_bool finished;
    pthread_t thread;
    bool ready, started;
    int rc;
    int64_t t0;
    struct ferry_error err;
};

/* A wave's streams tell its waiter when one ends (streams_wait). */
struct wave_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static bool streams_together(const struct run *r)
{
    if (!r->p->source_vt->cdc_one_stream || r->distributed || r->shard_mode) return false;
    int n = 0;
    for (int k = 0; k < r->lanes[0].n_res; k++) {
        const struct resource_run *rr = &r->res[r->lanes[0].res[k]];
        if (!rr->copy_phase && rr->spec->mode == FERRY_READ_CDC && !rr->gone) n++;
    }
    return n > 1;
}

/* started, the copy flow, a source instance: ready to stream (else reported and recorded). */
static void stream_prepare(struct stream_run *sr)
{
    struct run *r = sr->r;
    struct resource_run *rr = sr->rr;
    struct ferry_error *e = &sr->err;
    ferry_error_clear(e);
    /* a stream of the wave that cannot start (tests: error), or a pause meanwhile (sleep) */
    if (FERRY_FAILPOINT("before_stream_prepare") == FERRY_FP_ERROR) {
        sr->rc = ferry_error_set(e, FERRY_EFAILPOINT, "failpoint",
                                 "resource %s: failpoint before_stream_prepare", rr->spec->table);
        record_failure(r, rr, sr->rc, e);
        return;
    }
    if (run_stopping(r)) {
        record_unstarted(r, rr);
        sr->rc = ferry__run_stop_get(r) != 0 ? ferry__run_stop_get(r) : FERRY_ECANCELED;
        return;
    }
    int rc = rr->gone ? resource_gone(r, rr, e) : resource_begin(r, rr, &r->lanes[0], &sr->f, e);
    if (rc != FERRY_OK || rr->gone) {
        if (rc != FERRY_OK) record_failure(r, rr, rc, e);
        sr->rc = rc;
        return;
    }
    sr->t0 = ferry_now_mono_us();
    if (rr->n_shards > 1) {
        atomic_store(&rr->active, sr->f);
        rc = run_phase(rr, sr->f, true, e);
        atomic_store(&rr->active, NULL);
    }
    if (rc == FERRY_OK) {
        const struct ferry_source_vtable *vt = r->p->source_vt;
        rc = (vt->open_stream ? vt->open_stream : vt->open)(r->p->source, &sr->src, e);
        if (rc != FERRY_OK)
            ferry_error_prefix(e, "%s source: stream of %s", r->p->source_type, rr->spec->table);
    }
    if (rc != FERRY_OK) {
        resource_end(r, rr, sr->f, sr->t0, rc, false, e);
        record_failure(r, rr, rc, e);
        sr->rc = rc;
        return;
    }
    sr->ready = true;
}

static void *stream_main(void *arg)
{
    struct stream_run *sr = arg;
    ferry_error_clear(&sr->err);
    if (sr->rr->n_shards > 1)
        sr->rc = run_phase(sr->rr, sr->f, false, &sr->err);
    else
        sr->rc = ferry_flow_run(sr->f, &sr->err);
    pthread_mutex_lock(&sr->sync->mu);
    atomic_store(&sr->finished, true);
    pthread_cond_signal(&sr->sync->cv);
    pthread_mutex_unlock(&sr->sync->mu);
    return NULL;
}

/* Whether a ready stream's saved position says it is done (it finished in the interrupted
 * attempt this one resumes): the flow never starts it, so it is not counted among the
 * streams that start together (their source would wait for it). */
static bool stream_done(const struct stream_run *sr)
{
    const char *text = sr->f != NULL && sr->f->resume != NULL ? sr->f->resume[0] : NULL;
    if (text == NULL) return false;
    struct ferry_position pos;
    struct ferry_error e;
    ferry_position_init(&pos);
    bool done = ferry_position_decode(text, strlen(text), &pos, &e) == FERRY_OK && pos.done;
    ferry_position_clear(&pos);
    return done;
}

/* Starts the ready streams (n_ready of them) on threads sharing lane 0's sink. */
static void streams_start(struct stream_run *sr, int n, int n_ready, pthread_mutex_t *lock)
{
    for (int i = 0; i < n; i++) {
        if (!sr[i].ready) continue;
        struct ferry_flow *f = sr[i].f;
        sr[i].rr->read.cdc_streams_together = n_ready;
        f->src_ctx = sr[i].src;
        f->readers = &sr[i].src;
        f->n_readers = 1;
        f->stop = &sr[i].stop;
        f->sink_lock = lock;
        atomic_store(&sr[i].rr->active, f);
        if (pthread_create(&sr[i].thread, NULL, stream_main, &sr[i]) == 0) {
            sr[i].started = true;
        } else {
            sr[i].rc = ferry_error_set(&sr[i].err, FERRY_ENOMEM, "runner",
                                       "resource %s: cannot start a thread", sr[i].rr->spec->table);
            atomic_store(&sr[i].finished, true);
        }
    }
}

static void wave_sync_init(struct wave_sync *w)
{
    ferry__cond_init_mono(&w->cv);
    pthread_mutex_init(&w->mu, NULL);
}

static void wave_sync_destroy(struct wave_sync *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* Until a stream ends (it signals under the lock, held here), or 50 ms for stop requests. */
static void wave_sync_wait(struct wave_sync *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 50L * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* Waits for every stream, copying the run's stop requests into their flags. The last stream
 * to end wakes it at once (an epoch of `--follow` is not 50 ms longer for a poll). */
static void streams_wait(struct run *r, struct stream_run *sr, int n, struct wave_sync *w)
{
    pthread_mutex_lock(&w->mu);
    for (;;) {
        bool all = true;
        int want = ferry__run_stop_get(r);
        for (int i = 0; i < n; i++) {
            if (!sr[i].ready) continue;
            if (!atomic_load(&sr[i].finished)) all = false;
            int expected = 0;
            if (want != 0) atomic_compare_exchange_strong(&sr[i].stop, &expected, want);
            if (want == FERRY_ECANCELED) atomic_store(&sr[i].stop, want);
        }
        if (all) break;
        wave_sync_wait(w);
    }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < n; i++)
        if (sr[i].started) pthread_join(sr[i].thread, NULL);
}

/* Each stream's end (lag, schema changes, completed or failed), their events published
 * together: one state-file transaction for the wave, not two or three per table. */
static void streams_finish(struct run *r, struct stream_run *sr, int n)
{
    ferry__run_emit_hold(r);
    for (int i = 0; i < n; i++) {
        if (!sr[i].ready) continue;
        struct resource_run *rr = sr[i].rr;
        atomic_store(&rr->active, NULL);
        rr->read.cdc_streams_together = 0;
        sr[i].f->sink_lock = NULL;
        sr[i].f->readers = NULL;
        /* the final lag comes from the stream's own instance, still open */
        int rc = resource_end(sr[i].r, rr, sr[i].f, sr[i].t0, sr[i].rc, false, &sr[i].err);
        pthread_mutex_lock(&sr[i].r->lock); /* progress.c reads src_ctx under it */
        sr[i].f->src_ctx = NULL;
        pthread_mutex_unlock(&sr[i].r->lock);
        sr[i].r->p->source_vt->close(sr[i].src);
        if (rc != FERRY_OK) record_failure(sr[i].r, rr, rc, &sr[i].err);
    }
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry__run_emit_release(r, &e);
    if (rc == FERRY_OK) return;
    /* every table's end is lost, not one: the run stops on it (as on a store failure) */
    pthread_mutex_lock(&r->lock);
    if (r->fatal_rc == FERRY_OK) {
        r->fatal_rc = rc;
        r->fatal_err = e;
    }
    pthread_mutex_unlock(&r->lock);
}

/* Whether the wave's streams apply as one commit group (pipeline/commit_group.h): a source
 * that marks cuts, a sink with group transactions, every stream durable per apply into lane
 * 0's instance. */
static bool wave_groupable(const struct run *r, const struct stream_run *sr, int n)
{
    const struct ferry_sink_vtable *vt = r->p->sink_vt;
    if (!r->p->source_vt->cdc_commit_groups) return false;
    if (vt->group_begin == NULL || vt->group_commit == NULL || vt->group_abort == NULL)
        return false;
    int ready = 0;
    for (int i = 0; i < n; i++) {
        if (!sr[i].ready) continue;
        if (sr[i].rr->caps.durability != FERRY_DURABLE_PER_APPLY) return false;
        ready++;
    }
    return ready > 0;
}

/* A commit group must hold every table of its log session: when a table of the wave could
 * not start (a pause or cancel that arrived while the wave was prepared, or a failure), the
 * others do not stream either. Else their group would commit their part of source
 * transactions that touched it, and a reader would see half of them until a later run caught
 * it up (e2e/pg_txn_atomic fails one table's preparation: failpoint before_stream_prepare).
 * (A pause that arrived before the ready ones started stops them before they read.) A dropped
 * table (gone) has nothing to stream and holds no one back. Each ready stream ends unstarted
 * with the stop's code, or the failed table's code naming it. */
static void hold_partial_wave(struct run *r, struct stream_run *sr, int n)
{
    int missing = -1;
    for (int i = 0; i < n && missing < 0; i++)
        if (!sr[i].ready && !sr[i].rr->gone) missing = i;
    if (missing < 0) return;
    int stop = ferry__run_stop_get(r);
    for (int i = 0; i < n; i++) {
        if (!sr[i].ready) continue;
        struct stream_run *s = &sr[i];
        ferry_error_clear(&s->err);
        if (stop == FERRY_EPAUSED || stop == FERRY_ECANCELED) {
            s->rc = ferry_error_set(&s->err, stop, "runner", "resource %s: %s before it started",
                                    s->rr->spec->table,
                                    stop == FERRY_EPAUSED ? "paused" : "canceled");
        } else {
            int code = sr[missing].rc != FERRY_OK ? sr[missing].rc : FERRY_ECANCELED;
            s->rc = ferry_error_set(&s->err, code, "runner",
                                    "resource %s: not streamed: resource %s of the same "
                                    "replication session could not start, and the changes of "
                                    "one source transaction are applied together or not at all",
                                    s->rr->spec->table, sr[missing].rr->spec->table);
        }
        s->ready = false;
        resource_end(r, s->rr, s->f, s->t0, s->rc, false, &s->err);
        r->p->source_vt->close(s->src);
        s->src = NULL;
        record_failure(r, s->rr, s->rc, &s->err);
    }
}

/* The wave's commit group, each ready stream a member; NULL: none (not groupable, or out of
 * memory: logged, the streams then commit per batch as before). */
static struct ferry_commit_group *wave_group(struct run *r, struct stream_run *sr, int n,
                                             pthread_mutex_t *lock)
{
    if (!wave_groupable(r, sr, n)) return NULL;
    struct ferry_commit_group *g = ferry_commit_group_new(r->p->sink_vt, r->sink_ctx, lock);
    for (int i = 0; g != NULL && i < n; i++) {
        if (!sr[i].ready) continue;
        sr[i].f->group = ferry_commit_group_member(g, sr[i].rr->spec->table);
        if (sr[i].f->group == NULL) {
            for (int k = 0; k < n; k++)
                if (sr[k].ready) sr[k].f->group = NULL;
            ferry_commit_group_free(g);
            g = NULL;
        }
    }
    if (g == NULL)
        ferry_log(FERRY_LOG_WARN, "out of memory for the commit group: the cdc streams commit "
                                  "per batch");
    return g;
}

static void wave_group_end(struct ferry_commit_group *g, struct stream_run *sr, int n)
{
    if (g == NULL) return;
    for (int i = 0; i < n; i++)
        if (sr[i].ready) sr[i].f->group = NULL;
    ferry_log(FERRY_LOG_INFO, "commit group: %ld destination transaction(s) for %d stream(s)",
              ferry_commit_group_commits(g), n);
    ferry_commit_group_free(g);
}

/* Streams side by side at most when each holds a source connection of its own (a source
 * without open_stream): a wave's connections may still count on the server while the next
 * wave's open (200 tables stream from a server with the default 100 connections); more go
 * in waves, one after another, each reading the shared log once. A source with open_stream
 * streams every table in one wave: one session, one commit group. */
#define MAX_SIDE_BY_SIDE 16

static int wave_limit(const struct run *r)
{
    return r->p->source_vt->open_stream != NULL ? r->lanes[0].n_res : MAX_SIDE_BY_SIDE;
}

/* One wave: the next streams of lane 0 from *k on, at most wave_limit(); false when none
 * was left. */
static bool streams_wave(struct run *r, int *k, pthread_mutex_t *lock)
{
    struct lane *ln = &r->lanes[0];
    int limit = wave_limit(r);
    struct stream_run *sr = ferry_calloc((size_t)limit, sizeof *sr);
    if (sr == NULL) { /* stops the run (stops_run) */
        struct ferry_error e;
        ferry_error_clear(&e);
        record_failure(r, &r->res[ln->res[*k]], ferry__run_oom(&e), &e);
        return false;
    }
    int n = 0, n_ready = 0;
    for (; *k < ln->n_res && n < limit; (*k)++) {
        struct resource_run *rr = &r->res[ln->res[*k]];
        if (rr->copy_phase) continue;
        sr[n].r = r;
        sr[n].rr = rr;
        stream_prepare(&sr[n]);
        n_ready += sr[n].ready && !stream_done(&sr[n]);
        n++;
    }
    if (wave_groupable(r, sr, n)) hold_partial_wave(r, sr, n);
    struct ferry_commit_group *g = wave_group(r, sr, n, lock);
    struct wave_sync sync;
    wave_sync_init(&sync);
    for (int i = 0; i < n; i++)
        sr[i].sync = &sync;
    streams_start(sr, n, n_ready, lock);
    streams_wait(r, sr, n, &sync);
    wave_sync_destroy(&sync);
    wave_group_end(g, sr, n);
    streams_finish(r, sr, n);
    ferry_free(sr);
    return n > 0;
}

static void streams_side_by_side(struct run *r)
{
    pthread_mutex_t lock;
    pthread_mutex_init(&lock, NULL);
    int k = 0;
    while (k < r->lanes[0].n_res && streams_wave(r, &k, &lock)) {
    }
    pthread_mutex_destroy(&lock);
}

int ferry__schedule_run(struct run *r, struct ferry_error *err)
{
    if (r->lanes == NULL) return ferry_error_set(err, FERRY_EINVAL, "runner", "no lanes planned");
    if (r->n_res > 1 && r->o->out && !r->o->quiet) {
        fprintf(r->o->out,
                "%d resources, %d at once (batches of up to %" PRId64 " rows / %" PRId64
                " bytes, queue %" PRId64 ", within memory %" PRId64 " bytes)\n",
                r->n_res, r->n_lanes, r->opts.rows, r->opts.bytes, r->opts.queue, r->p->memory);
        fflush(r->o->out);
    }
    (void)FERRY_FAILPOINT("before_copy_phase"); /* a pause before any resource starts */
    int rc = copy_phase(r, err);
    /* The stream phase: cdc resources, on lane 0, after every copy of the run. */
    if (rc == FERRY_OK && streams_together(r))
        streams_side_by_side(r);
    else if (rc == FERRY_OK)
        run_lane(&r->lanes[0], false);
    if (r->n_res > 1) ferry__run_print_run_progress(r, true);
    if (rc == FERRY_OK && r->fatal_rc != FERRY_OK) {
        rc = r->fatal_rc;
        *err = r->fatal_err;
    }
    return rc;
}

/* After the route checkpoints of a completed (or paused and committed) run are saved:
 * each cdc resource's source may release its log up to its saved position, never further.
 * A failed acknowledgement only keeps the log longer (the next run acknowledges again). */
void ferry__schedule_ack_cdc(struct run *r, struct ferry_run_result *res)
{
    struct ferry_pipeline_spec *p = r->p;
    if (p->source_vt->cdc_ack == NULL) return;
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        if (rr->spec->mode != FERRY_READ_CDC || rr->plan_json == NULL) continue;
        struct ferry_error e;
        ferry_error_clear(&e);
        char *pos = NULL;
        int64_t saved_by = 0;
        int rc = ferry__run_route_position(r, rr, &pos, &saved_by, &e);
        /* A position an earlier run saved is acknowledged too (a log shared by several
         * resources moves to the least of them, so it needs every one), but only this
         * run's say whether it reached its end. */
        bool caught_up = true;
        if (rc == FERRY_OK && pos != NULL)
            rc = p->source_vt->cdc_ack(r->src_ctx, rr->spec, rr->plan_json, pos, &caught_up, &e);
        if (rc != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "resource %s: the log was not released: %s", rr->spec->table,
                      e.message);
        if (rc == FERRY_OK && pos != NULL && saved_by == r->run_id && !caught_up)
            res->cdc_more = true;
        ferry_free(pos);
    }
}
