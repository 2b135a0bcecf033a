/* runner/runner.c - the driver of one run of a pipeline in this process (the embedded
 * shape, DESIGN §7). Called by the CLI (`ferry run`, `ferry resume`, `ferry check`) and by
 * pull workers; calls every other file of src/runner (run.h shows who calls whom).
 *
 * Order of a run: load the file -> open the state -> fold what earlier attempts left in the
 * log -> plan.c: open the connectors, per resource discover, transforms, policy ->
 * attempt.c: pick or create the logical run, new attempt (fences older ones) -> plan.c:
 * frozen plans, resume positions -> control thread -> session.c: prepare targets, begin ->
 * readers.c: extra readers sharing one snapshot -> schedule.c (or coordinator.c): the copy
 * phase's lanes (lanes.c), then the streams ->
 * session.c: commit or abort -> final event -> wait for the tracker to fold it -> cdc
 * acknowledgements. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "control/tracker.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "pipeline/flow.h"
#include "pipeline/schema_change.h"
#include "pipeline/convert.h"
#include "pipeline/transform.h"
#include "config/access.h"
#include "runner/run.h"
#include "verify/verify.h"

static void verify_event(void *ctx, const char *resource, const char *type, const char *payload)
{
    struct ferry_error e;
    ferry__run_emit(ctx, resource, type, payload, NULL, &e);
}

/* The pipeline (from its file, or for `ferry resume RUN` without one the request saved
 * with the run) and the state store. */
static int load_pipeline(struct run *r, struct ferry_error *err)
{
    const struct ferry_run_options *o = r->o;
    if (o->pipeline_text) {
        int rc = ferry_pipeline_load_string(o->pipeline_text, o->pipeline_len, o->pipeline_name,
                                            &r->p, err);
        if (rc != FERRY_OK) return rc;
    } else if (o->pipeline_path) {
        int rc = ferry_pipeline_load(o->pipeline_path, &r->p, err);
        if (rc != FERRY_OK) return rc;
    }
    int rc = ferry_store_open(o->state_path, &r->st, err);
    if (rc != FERRY_OK || r->p != NULL) return rc;
    struct ferry_run_info info;
    memset(&info, 0, sizeof info);
    rc = ferry_store_run_get(r->st, o->resume_run_id, &info, err);
    if (rc == FERRY_OK) {
        char name[64];
        snprintf(name, sizeof name, "run %" PRId64, o->resume_run_id);
        rc = ferry_pipeline_load_string(info.request, strlen(info.request), name, &r->p, err);
        /* A worker of `ferry serve`: the server's policy again, after name resolution. */
        if (rc == FERRY_OK) rc = ferry_access_check_from_env(r->p, err);
        /* between the check and the connectors' connect (tests of DNS pinning) */
        if (rc == FERRY_OK) (void)FERRY_FAILPOINT("after_policy_check");
    }
    ferry_run_info_clear(&info);
    return rc;
}

/* Pipeline, store, bus and tracker; what earlier attempts left unfolded is folded. */
static int open_run(struct run *r, struct ferry_error *err)
{
    const struct ferry_run_options *o = r->o;
    int rc = load_pipeline(r, err);
    if (rc == FERRY_OK && r->p->sink != NULL) r->p->sink->host = o->sink_host;
    /* distribute: true (docs/operations.md, scale-out): this process coordinates, unless it
     * works one task of another process's run (shard mode). */
    bool distribute = false;
    if (rc == FERRY_OK) rc = ferry_cfg_bool(r->p->root, "distribute", false, &distribute, err);
    r->shard_mode = o->shard_resource != NULL;
    r->distributed = distribute && !r->shard_mode && !o->plan_only;
    r->lease_ms = o->lease_ms > 0 ? o->lease_ms : 15000;
    ferry__lease_owner(o->owner, r->owner, sizeof r->owner);
    r->task_lock_init = pthread_mutex_init(&r->task_lock, NULL) == 0;
    if (rc == FERRY_OK) rc = ferry_bus_open(o->bus_url, o->state_path, &r->bus, err);
    if (rc == FERRY_OK && o->on_event)
        rc = ferry_bus_observe(&r->bus, o->on_event, o->event_ctx, err);
    if (rc == FERRY_OK && (r->distributed || r->shard_mode))
        rc = ferry__shard_bus_open(r->bus, &r->tbus, err);
    if (rc == FERRY_OK) rc = ferry_tracker_open(o->state_path, r->bus, &r->tracker, err);
    /* Earlier attempts may have died before their last events were folded. */
    if (rc == FERRY_OK) rc = ferry_tracker_fold_available(r->tracker, err);
    char instance[40];
    if (rc == FERRY_OK) rc = ferry_store_instance_id(r->st, instance, sizeof instance, err);
    if (rc == FERRY_OK) snprintf(r->dest_key, sizeof r->dest_key, "%s@%s", r->p->name, instance);
    return rc;
}

/* Connect, discover and check everything before a run is created, so that a bad file, an
 * unreachable destination or a refused policy leaves no trace. */
static int check_pipeline(struct run *r, struct ferry_error *err)
{
    int rc = ferry__plan_prepare(r, err);
    for (int i = 0; rc == FERRY_OK && r->distributed && i < r->n_res; i++)
        rc = ferry__shard_distributable(r->res[i].spec->table,
                                        ferry_read_mode_name(r->res[i].spec->mode),
                                        ferry_write_mode_name(r->p->write),
                                        r->res[i].caps.durability == FERRY_DURABLE_PER_APPLY,
                                        r->res[i].caps.replace_commits_once, err);
    /* Saved only once the connectors accepted it (a refused file may hold a plain secret),
     * and never by `ferry check`. */
    if (rc == FERRY_OK && !r->o->plan_only)
        rc = ferry_store_pipeline_put(r->st, r->p->name, r->p->version, r->p->request_json, err);
    return rc;
}

static void say_started(struct run *r)
{
    FILE *out = r->o->out;
    if (out == NULL || r->o->quiet || r->shard_mode) return;
    if (r->resumed)
        fprintf(out, "resuming run %" PRId64 " of pipeline %s (attempt %d)\n", r->run_id,
                r->p->name, r->attempt);
    else
        fprintf(out, "run %" PRId64 " of pipeline %s started\n", r->run_id, r->p->name);
    fflush(out);
}

/* run.started, the tracker and control threads. *tracking: the tracker thread runs. */
static int start_threads(struct run *r, bool *tracking, struct ferry_error *err)
{
    char payload[256];
    snprintf(payload, sizeof payload, "{\"pid\":%d,\"resumed\":%s}", (int)getpid(),
             r->resumed ? "true" : "false");
    int rc = FERRY_OK;
    if (!r->shard_mode) rc = ferry__run_emit(r, NULL, FERRY_EV_RUN_STARTED, payload, NULL, err);
    if (rc == FERRY_OK) rc = ferry_tracker_start(r->tracker, err);
    *tracking = rc == FERRY_OK;
    if (rc == FERRY_OK) ferry__control_start(r);
    return rc;
}

/* The commit failed after some resources had failed already (their failure isolated):
 * often the same cause (a lost destination connection), so theirs is said first. */
static int commit_failed(struct run *r, int crc, struct ferry_error *err)
{
    if (r->n_failed_res == 0 || err == NULL) return crc;
    char commit_msg[FERRY_ERROR_MESSAGE_MAX];
    snprintf(commit_msg, sizeof commit_msg, "%s", err->message);
    int rc = ferry_error_set(err, r->first_failed_rc, "runner",
                             "%d of %d resource(s) failed: %s; then the commit failed: %s",
                             r->n_failed_res, r->n_res, r->failed_res.data, commit_msg);
    err->transient = r->failed_transient;
    return rc;
}

/* The session, the readers and the flows; commit or abort. *committed: the session was
 * committed (a completion, or a pause that commits). */
static int move_data(struct run *r, bool *committed, struct ferry_error *err)
{
    int rc = ferry__lanes_assign(r, err);
    if (rc == FERRY_OK) rc = ferry__clone_before(r, err);
    if (rc == FERRY_OK) rc = ferry__session_begin(r, err);
    if (rc == FERRY_OK) rc = ferry__readers_open(r, err);
    if (rc == FERRY_OK)
        rc = r->shard_mode    ? ferry__coord_work_shard(r, err)
             : r->distributed ? ferry__coord_run(r, err)
                              : ferry__schedule_run(r, err);
    *committed = ferry__session_should_commit(r, rc);
    if (*committed) {
        int crc = ferry__session_commit(r, err);
        if (crc != FERRY_OK) rc = commit_failed(r, crc, err);
        /* keys, indexes and foreign keys of a clone: only once every table is whole */
        if (rc == FERRY_OK && r->n_failed_res == 0) rc = ferry__clone_after(r, err);
    }
    ferry__session_close(r);
    /* Some resources failed, the others completed and were committed: the run failed
     * (a resume redoes only what did not finish); on_resource_error: continue makes it
     * partial instead (end_run). */
    if (rc == FERRY_OK && r->n_failed_res > 0 && !r->p->on_resource_error_continue) {
        rc = ferry_error_set(err, r->first_failed_rc, "runner", "%d of %d resource(s) failed: %s",
                             r->n_failed_res, r->n_res, r->failed_res.data);
        if (err != NULL) err->transient = r->failed_transient;
    }
    return rc;
}

/* Shard mode: a task's end is its shard_done (coordinator.c); only a failure concerns the
 * run. Returns the event's seq (0: none). */
static int64_t end_shard(struct run *r, int rc, struct ferry_run_result *res,
                         struct ferry_error *err)
{
    int64_t seq = 0;
    struct ferry_error fe;
    res->state = rc == FERRY_OK                                 ? "completed"
                 : rc == FERRY_EPAUSED                          ? "paused"
                 : rc == FERRY_EFENCED || rc == FERRY_ECANCELED ? "canceled"
                                                                : "failed";
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED && rc != FERRY_EFENCED &&
        r->attempt > 0) {
        ferry__run_emit_failure(r, r->o->shard_resource, FERRY_EV_RESOURCE_FAILED, rc, err->message,
                                NULL, NULL);
        ferry__run_emit_failure(r, NULL, FERRY_EV_RUN_FAILED, rc, err->message, &seq, &fe);
    }
    return seq;
}

/* on_resource_error: continue and some resources failed: run.completed with "partial". */
static int end_partial(struct run *r, struct ferry_run_result *res, int64_t *seq,
                       struct ferry_error *err)
{
    struct ferry_buf fb;
    ferry_buf_init(&fb, 0);
    ferry_buf_printf(&fb, "{\"rows\":%" PRId64 ",\"bytes\":%" PRId64 ",\"batches\":%" PRId64
                     ",\"partial\":true,\"failed_resources\":%d,\"message\":", r->rows, r->bytes,
                     r->batches, r->n_failed_res);
    char msg[900];
    snprintf(msg, sizeof msg, "%d resource(s) failed: %s", r->n_failed_res,
             r->failed_res.data ? r->failed_res.data : "");
    ferry_buf_json_string(&fb, msg, strlen(msg));
    ferry_buf_append(&fb, "}", 1);
    int rc = fb.data ? ferry__run_emit(r, NULL, FERRY_EV_RUN_COMPLETED, fb.data, seq, err)
                     : ferry__run_oom(err);
    ferry_buf_release(&fb);
    if (rc == FERRY_OK) {
        res->state = "partial";
        res->partial = true;
        snprintf(res->partial_message, sizeof res->partial_message, "%s", msg);
    }
    return rc;
}

/* The run's final event (completed, paused, canceled or failed) and res->state; the event's
 * seq through *seq. Returns rc, or the emitter's failure for a completion. */
static int end_run(struct run *r, int rc, bool committed, struct ferry_run_result *res,
                   int64_t *seq, struct ferry_error *err)
{
    struct ferry_error fe;
    ferry_error_clear(&fe);
    if (r->shard_mode) {
        *seq = end_shard(r, rc, res, err);
    } else if (rc == FERRY_OK && r->n_failed_res > 0) {
        rc = end_partial(r, res, seq, err);
    } else if (rc == FERRY_OK) {
        char payload[256];
        snprintf(payload, sizeof payload,
                 "{\"rows\":%" PRId64 ",\"bytes\":%" PRId64 ",\"batches\":%" PRId64 "}", r->rows,
                 r->bytes, r->batches);
        rc = ferry__run_emit(r, NULL, FERRY_EV_RUN_COMPLETED, payload, seq, err);
        if (rc == FERRY_OK) res->state = "completed";
    } else if (rc == FERRY_EPAUSED) {
        ferry__run_emit(r, NULL, FERRY_EV_RUN_PAUSED,
                        committed ? "{\"committed\":true}" : "{\"committed\":false}", seq, &fe);
        res->state = "paused";
        ferry_error_set(err, FERRY_EPAUSED, "runner",
                        "run %" PRId64
                        " paused after draining; resume it with `ferry resume %" PRId64
                        "` or by running the same file again",
                        r->run_id, r->run_id);
    } else if (rc == FERRY_ECANCELED) {
        ferry__run_emit(r, NULL, FERRY_EV_RUN_CANCELED, "{}", seq, &fe);
        res->state = "canceled";
    } else {
        ferry__run_emit_failure(r, NULL, FERRY_EV_RUN_FAILED, rc, err->message, seq, &fe);
        res->state = "failed";
    }
    return rc;
}

/* After the final event: wait until the tracker folded it (so `ferry show` is exact the
 * moment `ferry run` returns), then let cdc sources release their log. */
static void after_end(struct run *r, int rc, bool committed, bool tracking, int64_t seq,
                      struct ferry_run_result *res)
{
    if (seq <= 0) return;
    struct ferry_error fe;
    ferry_error_clear(&fe);
    int wrc = tracking ? ferry_tracker_wait(r->tracker, seq, 60000, &fe)
                       : ferry_tracker_fold_available(r->tracker, &fe);
    if (wrc != FERRY_OK) ferry_log(FERRY_LOG_WARN, "tracker: %s", fe.message);
    /* Only once the tracker has folded the end (the route checkpoints are saved). */
    if (wrc == FERRY_OK && (rc == FERRY_OK || (rc == FERRY_EPAUSED && committed)))
        ferry__schedule_ack_cdc(r, res);
}

/* The positions the commit made durable, reported before the final event. */
static void report_saved_at_end(struct run *r, bool tracking)
{
    if (!tracking || r->committed_seq <= 0) return;
    struct ferry_error e;
    if (ferry_tracker_wait(r->tracker, r->committed_seq, 60000, &e) == FERRY_OK)
        ferry__run_report_saved(r, r->st);
}

static void cleanup(struct run *r)
{
    ferry__control_stop(r);
    ferry__session_close(r);
    ferry__readers_close(r);
    if (r->src_ctx) r->p->source_vt->close(r->src_ctx);
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        ferry_schema_unref(rr->schema);
        ferry_schema_unref(rr->out_schema);
        ferry_transforms_free(rr->chain);
        ferry_convert_free(rr->convert);
        ferry_free(rr->route);
        ferry_free(rr->plan_json);
        for (int s = 0; rr->resume && s < rr->n_shards; s++)
            ferry_free(rr->resume[s]);
        ferry_free(rr->resume);
        ferry_free(rr->flow);
        ferry_free(rr->gone);
        ferry__run_saved_free(rr);
    }
    ferry_free(r->res);
    ferry_free(r->tables_json);
    if (r->tracker) {
        ferry_tracker_stop(r->tracker, NULL);
        ferry_tracker_close(r->tracker);
    }
    ferry_bus_close(r->tbus);
    ferry_bus_close(r->bus);
    ferry_store_close(r->st);
    ferry_run_info_clear(&r->info);
    if (r->task_lock_init) pthread_mutex_destroy(&r->task_lock);
    if (r->p) ferry_pipeline_free(r->p);
}

/* Everything after the pipeline was checked: attempt, plans, data, the end. */
static int run_attempt(struct run *r, struct ferry_run_result *res, struct ferry_error *err)
{
    int rc = ferry__run_attach(r, err);
    if (rc != FERRY_OK) return rc;
    res->run_id = r->run_id;
    res->attempt = r->attempt;
    res->resumed = r->resumed;
    rc = ferry__plan_freeze(r, err);
    if (rc == FERRY_OK) say_started(r);
    bool tracking = false, committed = false;
    if (rc == FERRY_OK) rc = start_threads(r, &tracking, err);
    if (rc == FERRY_OK)
        rc = move_data(r, &committed, err);
    else
        ferry__session_close(r);
    /* verify: after_run - the data is committed; its events go on this run's bus. */
    if (rc == FERRY_OK && !r->shard_mode && r->p->verify != NULL &&
        !strcmp(r->p->verify, "after_run"))
        ferry_verify_after_run(r->p, verify_event, r);
    /* The final event: the tracker folds it into the run's state. It is the attempt's last
     * event (an event stream that ends at it misses nothing), so the control thread, which
     * emits heartbeats and lag, stops first. */
    ferry__control_stop(r);
    report_saved_at_end(r, tracking);
    int64_t seq = 0;
    rc = end_run(r, rc, committed, res, &seq, err);
    after_end(r, rc, committed, tracking, seq, res);
    return rc;
}

/* The runs going on in this process. FERRY_FAILPOINTS is read again when a run starts
 * alone (so that runs one after another each count hits from 1, as before), never while
 * another run evaluates the table (failpoint.c fills it without a lock). */
static pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;
static int runs_active;

static int runs_enter(struct ferry_error *err)
{
    pthread_mutex_lock(&runs_lock);
    int rc = runs_active == 0 ? ferry_failpoints_init(err) : FERRY_OK;
    if (rc == FERRY_OK) runs_active++;
    pthread_mutex_unlock(&runs_lock);
    return rc;
}

static void runs_leave(void)
{
    pthread_mutex_lock(&runs_lock);
    runs_active--;
    pthread_mutex_unlock(&runs_lock);
}

int ferry_runner_run(const struct ferry_run_options *o, struct ferry_run_result *res,
                     struct ferry_error *err)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    ferry_buf_init(&r.failed_res, 16384);
    r.lock_init = pthread_mutex_init(&r.lock, NULL) == 0;
    memset(res, 0, sizeof *res);
    res->state = "failed";
    ferry__run_stop_init(&r);
    /* this thread's schema-change notes are this run's (pipeline/schema_change.h) */
    const void *outer_tag = ferry_schema_change_tag();
    ferry_schema_change_tag_set(&r);
    r.t0 = ferry_now_mono_us();
    int rc = runs_enter(err);
    if (rc != FERRY_OK) {
        if (r.lock_init) pthread_mutex_destroy(&r.lock);
        ferry_buf_release(&r.failed_res);
        ferry_schema_change_tag_set(outer_tag);
        return rc;
    }
    rc = open_run(&r, err);
    if (rc == FERRY_OK) rc = check_pipeline(&r, err);
    if (rc == FERRY_OK && o->plan_only) {
        /* `ferry check`: plans computed from the saved route checkpoints, printed, not
         * frozen; no run is created. */
        rc = ferry__plan_check(&r, err);
        if (rc == FERRY_OK) res->state = "checked";
    } else if (rc == FERRY_OK) {
        rc = run_attempt(&r, res, err);
    }
    res->rows = r.rows;
    res->bytes = r.bytes;
    res->batches = r.batches;
    res->converted = r.converted;
    res->seconds = (double)(ferry_now_mono_us() - r.t0) / 1e6;
    res->peak_rss = ferry__run_peak_rss();
    ferry_buf_release(&r.failed_res);
    cleanup(&r);
    ferry__run_live_leave(&r);
    if (r.lock_init) pthread_mutex_destroy(&r.lock);
    runs_leave();
    ferry_schema_change_tag_set(outer_tag);
    return rc;
}
