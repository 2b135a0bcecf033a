/* runner/runner.c - runs one pipeline in this process (the embedded shape, DESIGN §7).
 *
 * Owns: the run's source and sink instances, the sink session, the flows (one per
 * resource), a control thread (flush timer, heartbeat, pause/cancel requests, progress),
 * and the tracker thread. Calls: config/pipeline, connectors, policy, transforms, flow,
 * bus, store, tracker. Called by the CLI (`ferry run`, `ferry resume`, `ferry check`).
 *
 * Order of a run: load the file -> open the state -> fold what earlier attempts left in the
 * log -> pick or create the logical run -> new attempt (fences older ones) -> open the
 * connectors -> per resource: discover, transforms, policy, frozen checkpoint plan,
 * resume positions -> prepare targets -> begin the session -> open the extra readers
 * (`parallelism`) and share one source snapshot among them -> flows -> commit (or abort)
 * -> final event -> wait for the tracker to fold it. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "bus/bus.h"
#include "control/tracker.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "pipeline/flow.h"
#include "pipeline/transform.h"
#include "config/access.h"
#include "runner/runner.h"
#include "verify/verify.h"
#include "store/store.h"

static atomic_int g_stop;

void ferry_runner_signal(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_stop, &expected, FERRY_EPAUSED))
        atomic_store(&g_stop, FERRY_ECANCELED);
}

struct resource_run {
    struct ferry_resource_spec *spec;
    struct ferry_schema *schema;      /* source schema */
    struct ferry_schema *out_schema;  /* after transforms: what the sink writes */
    struct ferry_transform_chain *chain;
    struct ferry_sink_caps caps;
    struct ferry_target target;
    char *route;
    char *plan_json;
    int n_shards;
    char **resume;
    bool resumed_any;
    bool commit_once;                 /* the frozen plan's "commit_once" (connector.h) */
    int64_t rows_estimate;            /* the plan's "rows_estimate" (connector.h), -1: none */
    struct ferry_flow *flow;
    uint64_t seq_base;                /* distributed: batch seqs continue across tasks */
};

struct run {
    const struct ferry_run_options *o;
    struct ferry_pipeline_spec *p;
    struct ferry_store *st;
    struct ferry_bus *bus;
    struct ferry_tracker *tracker;
    void *src_ctx, *sink_ctx;
    /* Reader instances of the source (readers[0] == src_ctx); the others are opened for
     * `parallelism` after planning and closed at the end. */
    void **readers;
    int n_readers;
    int64_t parallelism;
    bool session_open;
    struct ferry_run_info info;
    int64_t run_id;
    int attempt;
    bool resumed;
    /* "<pipeline>@<state instance id>": how destinations key ferry's checkpoints, so that
     * another state file (whose run ids also start at 1) never reads them as its own. */
    char dest_key[320];
    struct resource_run *res;
    int n_res;
    _Atomic(struct ferry_flow *) current;
    atomic_int control_stop;
    pthread_t control;
    bool control_started;
    int64_t t0;
    int64_t peak_rss;
    /* totals of finished resources */
    int64_t rows, bytes, batches;
    /* Distributed runs (docs/internals/server.md): the coordinator (distribute: true) and
     * shard mode (one leased task of another process's run). Flows stop on flow_stop, which
     * the control thread keeps equal to g_stop unless the task's lease is lost (fenced). */
    bool distributed, shard_mode;
    char owner[160];
    int lease_ms;
    struct ferry_bus *tbus;           /* tags batch.written with the task token */
    atomic_int flow_stop;
    atomic_int task_fenced;
    pthread_mutex_t task_lock;        /* guards task */
    bool task_lock_init;
    struct ferry_shard_task task;     /* token 0: none */
    void *own_reader;                 /* shard mode: readers[0], not src_ctx */
};

static int64_t peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss * 1024;
}

static int64_t cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static int emit(struct run *r, const char *resource, const char *type, const char *payload,
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

static void verify_event(void *ctx, const char *resource, const char *type, const char *payload)
{
    struct ferry_error e;
    emit(ctx, resource, type, payload, NULL, &e);
}

/* ---- control thread: flush timer, heartbeat, requested signals, progress ---- */

static void human_rate(double v, char *buf, size_t len)
{
    if (v >= 1e6)
        snprintf(buf, len, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
}

/* Which side held a resource back over elapsed_us: the readers waited on a full queue for
 * at least half of it and longer than the writer waited (the destination, "sink"), the writer
 * on an empty queue (the source or the transforms, "source"), or neither ("balanced"). */
static const char *bound_of(int64_t wait_source_us, int64_t wait_sink_us, int64_t elapsed_us)
{
    if (elapsed_us > 0 && wait_sink_us * 2 >= elapsed_us && wait_sink_us > wait_source_us)
        return "sink";
    if (elapsed_us > 0 && wait_source_us * 2 >= elapsed_us && wait_source_us > wait_sink_us)
        return "source";
    return "balanced";
}

/* How the progress and summary lines say it: "sink-bound", "source-bound", or nothing. */
static const char *bound_label(const char *bound)
{
    return !strcmp(bound, "sink") ? "sink-bound" : !strcmp(bound, "source") ? "source-bound" : "";
}

/* "1h02m", "3m05s", "42s" */
static void human_secs(double s, char *buf, size_t len)
{
    long long n = s < 0 ? 0 : (long long)(s + 0.5);
    if (n >= 3600)
        snprintf(buf, len, "%lldh%02lldm", n / 3600, n % 3600 / 60);
    else if (n >= 60)
        snprintf(buf, len, "%lldm%02llds", n / 60, n % 60);
    else
        snprintf(buf, len, "%llds", n);
}

static void print_progress(struct run *r, struct ferry_flow *f, int64_t start_us, bool final)
{
    if (r->o->quiet || !r->o->progress_tty || f == NULL) return;
    int64_t elapsed = ferry_now_mono_us() - start_us;
    double secs = (double)elapsed / 1e6;
    if (secs <= 0) secs = 1e-6;
    long long rows = atomic_load(&f->rows_written);
    long long bytes = atomic_load(&f->bytes_written);
    char rps[32], eta[48] = "";
    human_rate((double)rows / secs, rps, sizeof rps);
    /* percent and time left from the plan's estimate (a row count the planner guessed:
     * shown while the copy is below it) */
    if (f->rows_expected > 0 && rows < f->rows_expected && rows > 0 && !final) {
        char left[24];
        human_secs((double)(f->rows_expected - rows) * secs / (double)rows, left, sizeof left);
        snprintf(eta, sizeof eta, "  %3d%%  ETA %-6s", (int)(rows * 100 / f->rows_expected), left);
    }
    const char *label = bound_label(
        bound_of(atomic_load(&f->wait_source_us), atomic_load(&f->wait_sink_us), elapsed));
    fprintf(stderr,
            "\r\033[K  %-24s %12lld rows%s  %8s rows/s  %7.1f MB/s  queue %d/%" PRId64 "%s%s%s",
            f->spec->table, rows, eta, rps, (double)bytes / secs / 1e6,
            atomic_load(&f->queue_depth), r->p->batch.queue, label[0] ? "  " : "", label,
            final ? "\n" : "");
    fflush(stderr);
}

/* A cdc stream's position and lag (cursor.watermark_advanced), when it moved. */
static void emit_cdc_lag(struct run *r, struct ferry_flow *f, int64_t *last_position)
{
    const struct ferry_source_vtable *vt = r->p->source_vt;
    if (f->spec->mode != FERRY_READ_CDC || vt->cdc_progress == NULL) return;
    int64_t pos = 0, lag_bytes = 0, lag_us = 0;
    if (vt->cdc_progress(r->src_ctx, &pos, &lag_bytes, &lag_us) != FERRY_OK) return;
    if (pos == *last_position) return;
    *last_position = pos;
    char payload[256];
    /* The source's plan may warn that the slot is about to lose WAL (cdc wal_status). */
    json_t *plan = json_loads(f->plan_json ? f->plan_json : "", 0, NULL);
    const char *ws = json_string_value(json_object_get(plan, "wal_status"));
    char extra[64] = "";
    if (ws != NULL && strlen(ws) < 32) snprintf(extra, sizeof extra, ",\"wal_status\":\"%s\"", ws);
    json_decref(plan);
    snprintf(payload, sizeof payload,
             "{\"shard\":0,\"position\":{\"shard\":0,\"n\":%" PRId64 "},\"lag_bytes\":%" PRId64
             ",\"lag_seconds\":%.3f%s}",
             pos, lag_bytes, (double)lag_us / 1e6, extra);
    emit(r, f->spec->table, FERRY_EV_WATERMARK_ADVANCED, payload, NULL, NULL);
}

/* Keeps the current task's lease (a lost one fences the task), and in shard mode follows
 * the run: another attempt fences this worker, a pause or an end stops it. */
static void renew_task(struct run *r, struct ferry_store *st)
{
    struct ferry_shard_task t;
    pthread_mutex_lock(&r->task_lock);
    t = r->task;
    pthread_mutex_unlock(&r->task_lock);
    struct ferry_error e;
    if (t.token > 0 &&
        ferry_store_shard_renew(st, t.run_id, t.resource, t.shard, t.token, r->lease_ms, &e) ==
            FERRY_EFENCED) {
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 " resource %s shard %d: lease lost (token %" PRId64
                  "): %s", t.run_id, t.resource, t.shard, t.token, e.message);
        atomic_store(&r->task_fenced, 1);
        atomic_store(&r->flow_stop, FERRY_ECANCELED);
    }
    if (!r->shard_mode) return;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (ferry_store_run_get(st, r->run_id, &run, &e) != FERRY_OK) return;
    if (run.attempt != r->attempt || ferry_run_state_is_final(run.state)) {
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 " is %s (attempt %d, this worker's %d): stopping",
                  r->run_id, ferry_run_state_name(run.state), run.attempt, r->attempt);
        if (run.attempt != r->attempt) atomic_store(&r->task_fenced, 1);
        atomic_store(&g_stop, FERRY_ECANCELED);
        atomic_store(&r->flow_stop, FERRY_ECANCELED);
    } else if (run.state == FERRY_RUN_PAUSED) {
        int expected = 0;
        atomic_compare_exchange_strong(&g_stop, &expected, FERRY_EPAUSED);
    }
    ferry_run_info_clear(&run);
}

static void *control_main(void *arg)
{
    struct run *r = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    if (ferry_store_open(r->o->state_path, &st, &e) != FERRY_OK ||
        ferry_store_set_sync_full(st, false, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "control thread: %s", e.message);
    int64_t last_tick = ferry_now_mono_us(), last_beat = 0, last_event = 0, last_poll = 0;
    int64_t last_progress = 0, last_lag = 0, last_lag_position = -1, last_renew = 0;
    int64_t flush_us = r->p->batch.flush_after_ms * 1000;
    while (!atomic_load(&r->control_stop)) {
        usleep(20000);
        int64_t now = ferry_now_mono_us();
        struct ferry_flow *f = atomic_load(&r->current);
        if (f && now - last_tick >= flush_us) {
            atomic_store(&f->tick, 1);
            last_tick = now;
        }
        if (r->distributed || r->shard_mode) {
            int want = atomic_load(&g_stop), have = atomic_load(&r->flow_stop);
            if (want != 0 && have == 0) atomic_store(&r->flow_stop, want);
            if (st && now - last_renew >= (int64_t)r->lease_ms * 1000 / 3) {
                last_renew = now;
                renew_task(r, st);
            }
        }
        if (st && !r->shard_mode && now - last_beat >= 2000000) {
            last_beat = now;
            if (ferry_store_run_heartbeat(st, r->run_id, r->attempt, &e) == FERRY_EFENCED) {
                ferry_log(FERRY_LOG_ERROR, "%s", e.message);
                atomic_store(&g_stop, FERRY_ECANCELED);
            }
        }
        if (now - last_event >= 10000000) {
            last_event = now;
            char payload[128];
            int64_t rss = peak_rss_bytes();
            if (rss > r->peak_rss) r->peak_rss = rss;
            /* queue_depth: ready batches of the resource being copied (ferry serve's metrics). */
            snprintf(payload, sizeof payload,
                     "{\"rss_bytes\":%" PRId64 ",\"cpu_ms\":%" PRId64 ",\"queue_depth\":%d}", rss,
                     cpu_ms(), f ? atomic_load(&f->queue_depth) : 0);
            emit(r, NULL, FERRY_EV_RUN_HEARTBEAT, payload, NULL, NULL);
        }
        if (st && now - last_poll >= 500000) {
            last_poll = now;
            char sig[16] = "";
            if (ferry_store_run_requested(st, r->run_id, sig, sizeof sig, NULL) == FERRY_OK) {
                if (!strcmp(sig, "pause")) {
                    int expected = 0;
                    atomic_compare_exchange_strong(&g_stop, &expected, FERRY_EPAUSED);
                } else if (!strcmp(sig, "cancel")) {
                    atomic_store(&g_stop, FERRY_ECANCELED);
                }
            }
        }
        if (f && now - last_progress >= 250000) {
            last_progress = now;
            print_progress(r, f, r->t0, false);
        }
        if (f && now - last_lag >= 1000000) {
            last_lag = now;
            emit_cdc_lag(r, f, &last_lag_position);
        }
    }
    ferry_store_close(st);
    return NULL;
}

/* ---- choosing the logical run ---- */

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
        if (r->info.state == FERRY_RUN_COMPLETED || r->info.state == FERRY_RUN_CANCELED)
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
                 newest[0].state != FERRY_RUN_COMPLETED && newest[0].state != FERRY_RUN_CANCELED;
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

/* ---- planning ---- */

static struct ferry_sink_checkpoint *sink_checkpoint(struct ferry_sink_checkpoint *v, int n,
                                                     const char *resource, int shard)
{
    for (int i = 0; i < n; i++)
        if (v[i].shard == shard && !strcmp(v[i].resource, resource)) return &v[i];
    return NULL;
}

/* Whether run_id ran this pipeline version: a destination checkpoint written by another
 * version (another cursor, another mode) has another shape and must not be used. */
static bool run_has_version(struct ferry_store *st, int64_t run_id, const char *version)
{
    struct ferry_run_info info;
    memset(&info, 0, sizeof info);
    bool same = ferry_store_run_get(st, run_id, &info, NULL) == FERRY_OK &&
                strcmp(info.version, version) == 0;
    ferry_run_info_clear(&info);
    return same;
}

static int plan_resource(struct run *r, struct resource_run *rr, struct ferry_sink_checkpoint *scp,
                         int n_scp, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    const char *res = rr->spec->table;
    int rc = ferry_store_plan_get(r->st, r->run_id, res, &rr->plan_json, err);
    if (rc != FERRY_OK) return rc;
    if (rr->plan_json == NULL && r->shard_mode)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "run %" PRId64 " resource %s: no frozen plan: its coordinator "
                               "plans before it hands out shards", r->run_id, res);
    if (rr->plan_json == NULL) {
        /* Not planned yet: freeze the plan now, from the route checkpoint for incremental
         * reads (or the destination's own, when it stored a later one in its commit). */
        char *lower = NULL;
        if (rr->spec->mode != FERRY_READ_FULL) {
            struct ferry_checkpoint *cps = NULL;
            int n = 0;
            rc = ferry_store_route_checkpoints(r->st, p->name, p->version, rr->route, &cps, &n, err);
            if (rc != FERRY_OK) return rc;
            int64_t route_run = 0;
            for (int i = 0; i < n; i++)
                if (cps[i].shard == 0) {
                    lower = ferry_strdup(cps[i].position);
                    route_run = cps[i].run_id;
                }
            ferry_checkpoints_free(cps, n);
            struct ferry_sink_checkpoint *s = sink_checkpoint(scp, n_scp, res, 0);
            if (s && s->run_id > route_run && s->position && strstr(s->position, "\"key\"") &&
                run_has_version(r->st, s->run_id, p->version)) {
                ferry_free(lower);
                lower = ferry_strdup(s->position);
                if (r->o->out && !r->o->quiet)
                    fprintf(r->o->out, "%s: the destination holds rows of run %" PRId64
                            " that were never recorded here; continuing after them\n", res,
                            s->run_id);
            }
        }
        rc = p->source_vt->plan(r->src_ctx, rr->spec, rr->schema, lower, &rr->plan_json, err);
        ferry_free(lower);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "resource %s: plan", res);
        rc = ferry_store_plan_put(r->st, r->run_id, res, rr->plan_json, err);
        if (rc != FERRY_OK) return rc;
    }
    json_t *pj = json_loads(rr->plan_json, 0, NULL);
    json_t *shards = pj ? json_object_get(pj, "shards") : NULL;
    if (!json_is_array(shards) || json_array_size(shards) == 0) {
        json_decref(pj);
        return ferry_error_set(err, FERRY_ESOURCE, "runner",
                               "resource %s: the %s source produced a plan without shards", res,
                               p->source_type);
    }
    rr->n_shards = (int)json_array_size(shards);
    rr->commit_once = json_is_true(json_object_get(pj, "commit_once"));
    json_t *est = json_object_get(pj, "rows_estimate");
    rr->rows_estimate = json_is_integer(est) && json_integer_value(est) >= 0 ? json_integer_value(est) : -1;
    json_decref(pj);
    /* Such a plan's unfinished shards have no resume point: only a run whose positions
     * become durable at its end may read it (durability is a tuning key: it may change
     * between attempts). */
    if (rr->commit_once && !rr->spec->positions_at_end)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "resource %s: run %" PRId64 " was planned for a sink durable at "
                               "its commit (read without key order, resumable only from the "
                               "start); this attempt would make batches durable one by one "
                               "(durability per_apply, or distributed): resume it with "
                               "`durability: at_commit`, or start over with --fresh",
                               res, r->run_id);
    rr->resume = ferry_calloc((size_t)rr->n_shards, sizeof *rr->resume);
    if (rr->resume == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");

    /* Resume positions: what the store saved as durable for this run, overridden by what
     * a transactional destination committed for this very run (never behind the store). */
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    rc = ferry_store_run_checkpoints(r->st, r->run_id, res, &cps, &n, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < n; i++)
        if (cps[i].shard >= 0 && cps[i].shard < rr->n_shards && cps[i].position) {
            ferry_free(rr->resume[cps[i].shard]);
            rr->resume[cps[i].shard] = ferry_strdup(cps[i].position);
        }
    ferry_checkpoints_free(cps, n);
    for (int s = 0; s < rr->n_shards && rc == FERRY_OK; s++) {
        struct ferry_sink_checkpoint *c = sink_checkpoint(scp, n_scp, res, s);
        if (c && c->run_id == r->run_id && c->position &&
            (rr->resume[s] == NULL || strcmp(rr->resume[s], c->position) != 0)) {
            ferry_free(rr->resume[s]);
            rr->resume[s] = ferry_strdup(c->position);
            /* The destination made it durable, the store never heard (a crash between the
             * sink's commit and the fold of sink.committed): record it, else this attempt
             * may read nothing more and complete without moving the route, and the next
             * run would write those changes again (cdc). A pull worker leaves it to the
             * task it leases (task_resume). */
            if (!r->shard_mode)
                rc = ferry_store_run_checkpoint_save(r->st, r->run_id, r->attempt, res, s,
                                                     c->position, err);
        }
        if (rr->resume[s]) rr->resumed_any = true;
    }
    return rc;
}

/* Discover, transforms, capabilities, policy, unknown keys: everything that can refuse the
 * pipeline, done before a run exists. */
static int prepare_resources(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    r->n_res = p->n_resources;
    r->res = ferry_calloc((size_t)r->n_res, sizeof *r->res);
    if (r->res == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    int rc = p->source_vt->open(p->source, &r->src_ctx, err);
    if (rc != FERRY_OK) return rc; /* connectors name themselves in their messages */
    /* An engine key of the source section (each connector lists it as tuning). */
    r->parallelism = 1;
    rc = ferry_cfg_int(p->source, "parallelism", false, 1, 64, &r->parallelism, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        rr->spec = &p->resources[i];
        /* Names a source derives per route (cdc slots), and whether cdc keeps a change log. */
        rr->spec->pipeline = p->name;
        rr->route = ferry_pipeline_route(p, rr->spec);
        if (rr->route == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
        rr->spec->route = rr->route;
        rr->spec->change_log = rr->spec->mode == FERRY_READ_CDC && p->write == FERRY_WRITE_APPEND;
        rr->spec->soft_delete = NULL; /* a cdc resource's `soft_delete: COLUMN` (policy checks) */
        rr->spec->cdc_epoch_rows = r->o->cdc_epoch_rows;
        rr->spec->cdc_follow = r->o->cdc_follow;
        if (rr->spec->node != NULL) {
            rc = ferry_cfg_str(rr->spec->node, "soft_delete", false, &rr->spec->soft_delete, err);
            if (rc != FERRY_OK) return rc;
        }
        rc = p->source_vt->discover(r->src_ctx, rr->spec, &rr->schema, err);
        if (rc != FERRY_OK) return rc;
        rc = ferry_transforms_compile(p, rr->spec->table, rr->schema, &rr->chain, &rr->out_schema,
                                      err);
        if (rc != FERRY_OK) return rc;
    }
    /* The source section and the transforms are fully read: refuse unknown keys there before
     * the sink is even opened. */
    rc = ferry_cfg_check_unused(p->source, err);
    for (int i = 0; rc == FERRY_OK && i < p->n_transforms; i++)
        rc = ferry_cfg_check_unused(p->transforms[i].node, err);
    if (rc != FERRY_OK) return rc;
    rc = p->sink_vt->open(p->sink, &r->sink_ctx, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        p->sink_vt->capabilities(r->sink_ctx, p->write, &rr->caps);
        rc = ferry_policy_check(p, rr->spec, rr->out_schema, &rr->caps, err);
        if (rc != FERRY_OK) return rc;
        /* The one commit of a run is at its end, unless runs are spread over workers. */
        rr->spec->positions_at_end = rr->caps.durability == FERRY_DURABLE_AT_COMMIT &&
                                     !r->distributed && !r->shard_mode;
        rr->target.index = i;
        rr->target.resource = rr->spec->table;
        rr->target.table = ferry_resource_target(rr->spec);
        rr->target.schema = rr->out_schema;
        rr->target.mode = p->write;
        rr->target.read_mode = rr->spec->mode;
        if (rr->spec->soft_delete != NULL) /* checked by the policy: a field outside the key */
            rr->out_schema->soft_delete = 1 + ferry_schema_find(rr->out_schema, rr->spec->soft_delete);
    }
    /* Every key of the file must have been read by now: unknown keys are errors. */
    return ferry_cfg_check_unused(p->root, err);
}

/* Frozen checkpoint plans and resume positions of the chosen run. */
static int plan_resources(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc;
    struct ferry_sink_checkpoint *scp = NULL;
    int n_scp = 0;
    if (r->res[0].caps.transactional_checkpoint && p->sink_vt->checkpoints) {
        rc = p->sink_vt->checkpoints(r->sink_ctx, r->dest_key, &scp, &n_scp, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: reading checkpoints", p->sink_type);
    }
    rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) rc = plan_resource(r, &r->res[i], scp, n_scp, err);
    ferry_sink_checkpoints_free(scp, n_scp);
    return rc;
}

static void print_plan(struct run *r)
{
    FILE *out = r->o->out;
    if (out == NULL) return;
    fprintf(out, "pipeline %s (version %.12s)\n", r->p->name, r->p->version);
    fprintf(out, "  source %s -> sink %s, write %s, batch %" PRId64 " rows / %" PRId64
            " bytes, queue %" PRId64 "\n", r->p->source_type, r->p->sink_type,
            ferry_write_mode_name(r->p->write), r->p->batch.rows, r->p->batch.bytes,
            r->p->batch.queue);
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        const struct ferry_sink_caps *c = &rr->caps;
        fprintf(out, "  %s: mode %s, %d shard%s, durability %s%s, route \"%s\"\n", rr->spec->table,
                ferry_read_mode_name(rr->spec->mode), rr->n_shards, rr->n_shards == 1 ? "" : "s",
                c->durability == FERRY_DURABLE_PER_APPLY ? "per_apply" : "at_commit",
                c->transactional_checkpoint ? " (checkpoint stored with the data: exactly-once)"
                                            : "", rr->route);
        fprintf(out, "    columns:");
        for (int j = 0; j < rr->out_schema->n_fields; j++) {
            const struct ferry_field *f = &rr->out_schema->fields[j];
            char ty[48];
            if (f->type == FERRY_TYPE_DECIMAL128)
                snprintf(ty, sizeof ty, "decimal128(%d,%d)", f->precision, f->scale);
            else
                snprintf(ty, sizeof ty, "%s", ferry_type_name(f->type));
            fprintf(out, " %s %s%s%s%s", f->name, ty, f->nullable ? "" : " not null",
                    f->key_pos ? " key" : "", j + 1 < rr->out_schema->n_fields ? "," : "");
        }
        fprintf(out, "\n    plan: %s\n", rr->plan_json);
    }
}

/* ---- readers and the shared snapshot ---- */

static bool position_done(const char *pos)
{
    if (pos == NULL) return false;
    json_t *j = json_loads(pos, 0, NULL);
    bool done = j && json_is_true(json_object_get(j, "done"));
    json_decref(j);
    return done;
}

/* The coordinator's exported snapshot, saved as a run checkpoint of this pseudo resource
 * (no resource has this name: resource names are table names). */
#define SNAPSHOT_KEY "~snapshot"

/* Shard mode: a reader instance of its own that imports the coordinator's snapshot; when
 * that fails (the coordinator is gone, and its snapshot with it) the shard reads a snapshot
 * of its own, as a resumed attempt does. */
static int open_shard_reader(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    r->readers = ferry_calloc(1, sizeof *r->readers);
    if (r->readers == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    int rc = p->source_vt->open(p->source, &r->own_reader, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s source: shard reader", p->source_type);
    r->readers[0] = r->own_reader;
    r->n_readers = 1;
    if (p->source_vt->use_snapshot == NULL) return FERRY_OK;
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    char *id = NULL;
    if (ferry_store_run_checkpoints(r->st, r->run_id, SNAPSHOT_KEY, &cps, &n, NULL) == FERRY_OK &&
        n > 0 && cps[0].position) {
        json_t *j = json_loads(cps[0].position, 0, NULL);
        const char *v = json_string_value(json_object_get(j, "snapshot"));
        if (v) id = ferry_strdup(v);
        json_decref(j);
    }
    ferry_checkpoints_free(cps, n);
    if (id == NULL) return FERRY_OK;
    struct ferry_error e;
    if (p->source_vt->use_snapshot(r->own_reader, id, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN,
                  "run %" PRId64 ": the coordinator's snapshot %s cannot be imported (%s); this "
                  "shard reads a newer snapshot", r->run_id, id, e.message);
        p->source_vt->close(r->own_reader);
        r->own_reader = NULL;
        r->readers[0] = NULL;
        rc = p->source_vt->open(p->source, &r->own_reader, err);
        if (rc == FERRY_OK) r->readers[0] = r->own_reader;
    }
    ferry_free(id);
    return rc;
}

/* Opens the extra source instances `parallelism` asks for (no more than the shards left
 * to read in any resource), then, when the source can, exports one snapshot from the
 * planning instance and has every reader use it, so that all shards of all resources of
 * this attempt read the same moment. */
static int open_readers(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int want = 1;
    for (int i = 0; i < r->n_res; i++) {
        int left = 0;
        for (int s = 0; s < r->res[i].n_shards; s++)
            if (!position_done(r->res[i].resume[s])) left++;
        if (left > want) want = left;
    }
    if (want > r->parallelism) want = (int)r->parallelism;
    /* A distributed run's process works one task (one shard) at a time. */
    if (r->distributed || r->shard_mode) want = 1;
    if (r->shard_mode) return open_shard_reader(r, err);
    r->readers = ferry_calloc((size_t)want, sizeof *r->readers);
    if (r->readers == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    r->readers[0] = r->src_ctx;
    r->n_readers = 1;
    int rc = FERRY_OK;
    while (r->n_readers < want) {
        rc = p->source_vt->open(p->source, &r->readers[r->n_readers], err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "%s source: reader %d of %d", p->source_type,
                                      r->n_readers + 1, want);
        r->n_readers++;
    }
    if (p->source_vt->snapshot == NULL || p->source_vt->use_snapshot == NULL) return FERRY_OK;
    char *id = NULL;
    rc = p->source_vt->snapshot(r->src_ctx, &id, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s source: snapshot", p->source_type);
    for (int i = 0; i < r->n_readers && rc == FERRY_OK; i++) {
        rc = p->source_vt->use_snapshot(r->readers[i], id, err);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, "%s source: reader %d: using snapshot %s", p->source_type,
                               i + 1, id);
    }
    /* Shard workers of other processes import it while this process keeps it open. */
    if (rc == FERRY_OK && r->distributed) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        ferry_buf_printf(&b, "{\"attempt\":%d,\"snapshot\":", r->attempt);
        ferry_buf_json_string(&b, id, strlen(id));
        ferry_buf_append(&b, "}", 1);
        rc = ferry_store_run_checkpoint_save(r->st, r->run_id, r->attempt, SNAPSHOT_KEY, 0,
                                             b.data, err);
        ferry_buf_release(&b);
    }
    ferry_free(id);
    return rc;
}

/* ---- the run ---- */

/* A cdc resource's shard 0 streams changes that must land after every row of its copy
 * shards: the copy runs as one flow (any number of readers), then the stream as a second
 * one. Other resources: one flow. */
static int run_flow(struct resource_run *rr, struct ferry_flow *f, struct ferry_error *err)
{
    if (rr->spec->mode != FERRY_READ_CDC || rr->n_shards < 2) return ferry_flow_run(f, err);
    static char done[] = "{\"done\":true}";
    char **phase = ferry_calloc((size_t)rr->n_shards, sizeof *phase);
    if (phase == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    for (int s = 0; s < rr->n_shards; s++) phase[s] = s == 0 ? done : rr->resume[s];
    f->resume = phase;
    int rc = ferry_flow_run(f, err);
    if (rc == FERRY_OK) {
        for (int s = 0; s < rr->n_shards; s++) phase[s] = s == 0 ? rr->resume[0] : done;
        rc = ferry_flow_run(f, err);
    }
    f->resume = rr->resume;
    ferry_free(phase);
    return rc;
}

/* After the route checkpoints of a completed (or paused and committed) run are saved:
 * each cdc resource's source may release its log up to its saved position, never further.
 * A failed acknowledgement only keeps the log longer (the next run acknowledges again). */
static void ack_cdc(struct run *r, struct ferry_run_result *res)
{
    struct ferry_pipeline_spec *p = r->p;
    if (p->source_vt->cdc_ack == NULL) return;
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        if (rr->spec->mode != FERRY_READ_CDC || rr->plan_json == NULL) continue;
        struct ferry_checkpoint *cps = NULL;
        int n = 0;
        struct ferry_error e;
        ferry_error_clear(&e);
        int rc = ferry_store_route_checkpoints(r->st, p->name, p->version, rr->route, &cps, &n, &e);
        const char *pos = NULL;
        for (int k = 0; rc == FERRY_OK && k < n; k++)
            if (cps[k].shard == 0 && cps[k].run_id == r->run_id) pos = cps[k].position;
        bool caught_up = true;
        if (rc == FERRY_OK && pos != NULL)
            rc = p->source_vt->cdc_ack(r->src_ctx, rr->spec, rr->plan_json, pos, &caught_up, &e);
        if (rc != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "resource %s: the log was not released: %s", rr->spec->table,
                      e.message);
        if (rc == FERRY_OK && pos != NULL && !caught_up) res->cdc_more = true;
        ferry_checkpoints_free(cps, n);
    }
}

/* resource.started of rr; `distributed` marks the coordinator's (its shards become tasks). */
static int emit_started(struct run *r, struct resource_run *rr, bool distributed,
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
    ferry_buf_printf(&b, "\"route\":");
    ferry_buf_json_string(&b, rr->route, strlen(rr->route));
    ferry_buf_append(&b, "}", 1);
    int rc = emit(r, rr->spec->table, FERRY_EV_RESOURCE_STARTED, b.data, NULL, err);
    ferry_buf_release(&b);
    return rc;
}

/* A flow over resource rr, the same for a whole-resource run and a leased task but for
 * where it resumes, which bus it reports to and which flag stops it. */
static void flow_init(struct run *r, struct resource_run *rr, struct ferry_flow *f, char **resume,
                      struct ferry_bus *bus, atomic_int *stop)
{
    struct ferry_pipeline_spec *p = r->p;
    f->src_vt = p->source_vt;
    f->src_ctx = r->src_ctx;
    f->readers = r->readers;
    f->n_readers = r->n_readers;
    f->spec = rr->spec;
    f->schema = rr->schema;
    f->plan_json = rr->plan_json;
    f->n_shards = rr->n_shards;
    f->resume = resume;
    f->chain = rr->chain;
    ferry_transforms_set_run(rr->chain, r->run_id); /* add: value: run_id */
    f->sink_vt = p->sink_vt;
    f->sink_ctx = r->sink_ctx;
    f->caps = rr->caps;
    f->target = &rr->target;
    f->bus = bus;
    f->run_id = r->run_id;
    f->attempt = r->attempt;
    f->opts = p->batch;
    f->stop = stop;
    /* rows of earlier attempts are not counted again: no estimate for a resumed resource */
    f->rows_expected = rr->resumed_any ? -1 : rr->rows_estimate;
}

static int run_resources(struct run *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        char payload[1024];
        rc = emit_started(r, rr, false, err);
        if (rc != FERRY_OK) break;
        if (rr->resumed_any && r->o->out && !r->o->quiet)
            fprintf(r->o->out, "%s: resuming from its last durable checkpoint\n", rr->spec->table);

        struct ferry_flow *f = ferry_calloc(1, sizeof *f);
        if (f == NULL) return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
        rr->flow = f;
        flow_init(r, rr, f, rr->resume, r->bus, &g_stop);
        int64_t t_res = ferry_now_mono_us();
        atomic_store(&r->current, f);
        rc = run_flow(rr, f, err);
        atomic_store(&r->current, NULL);
        int64_t last_lag = -1;
        emit_cdc_lag(r, f, &last_lag); /* a cdc stream's final position and lag */
        print_progress(r, f, t_res, true);
        int64_t rows = atomic_load(&f->rows_written), bytes = atomic_load(&f->bytes_written);
        r->rows += rows;
        r->bytes += bytes;
        r->batches += atomic_load(&f->batches_written);
        if (rc == FERRY_OK) {
            int64_t elapsed = ferry_now_mono_us() - t_res;
            int64_t wsrc = atomic_load(&f->wait_source_us), wsink = atomic_load(&f->wait_sink_us);
            const char *bound = bound_of(wsrc, wsink, elapsed);
            snprintf(payload, sizeof payload,
                     "{\"rows\":%" PRId64 ",\"bytes\":%" PRId64 ",\"ms\":%" PRId64
                     ",\"wait_source_ms\":%" PRId64 ",\"wait_sink_ms\":%" PRId64 ",\"bound\":\"%s\"}",
                     rows, bytes, elapsed / 1000, wsrc / 1000, wsink / 1000, bound);
            rc = emit(r, rr->spec->table, FERRY_EV_RESOURCE_COMPLETED, payload, NULL, err);
            if (r->o->out && !r->o->quiet && !r->o->progress_tty) {
                double secs = (double)elapsed / 1e6;
                const char *label = bound_label(bound);
                fprintf(r->o->out, "%s: %" PRId64 " rows, %.1f MB in %.2f s (%.0f rows/s%s%s)\n",
                        rr->spec->table, rows, (double)bytes / 1e6, secs,
                        secs > 0 ? (double)rows / secs : 0.0, label[0] ? ", " : "", label);
            }
        } else if (rc != FERRY_EPAUSED && rc != FERRY_ECANCELED) {
            struct ferry_buf fb;
            ferry_buf_init(&fb, 0);
            ferry_buf_printf(&fb, "{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
            ferry_buf_json_string(&fb, err->message, strlen(err->message));
            ferry_buf_append(&fb, "}", 1);
            emit(r, rr->spec->table, FERRY_EV_RESOURCE_FAILED, fb.data, NULL, NULL);
            ferry_buf_release(&fb);
        }
    }
    return rc;
}

/* ---- distributed runs: tasks ---- */

static struct resource_run *find_resource(struct run *r, const char *name)
{
    for (int i = 0; i < r->n_res; i++)
        if (strcmp(r->res[i].spec->table, name) == 0) return &r->res[i];
    return NULL;
}

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
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: reading checkpoints", p->sink_type);
    struct ferry_sink_checkpoint *c = sink_checkpoint(scp, n_scp, rr->spec->table, shard);
    if (c && c->run_id == r->run_id && c->position) {
        ferry_free(*pos);
        *pos = ferry_strdup(c->position);
    }
    ferry_sink_checkpoints_free(scp, n_scp);
    return FERRY_OK;
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

/* Works one leased task: one flow over that shard only (every other shard of the resource
 * is marked done for this flow), then marks it done. FERRY_EFENCED when the lease was lost
 * meanwhile (someone else works it now); FERRY_EPAUSED after a drained pause (the lease is
 * given back at once). */
static int work_task(struct run *r, const struct ferry_shard_task *t, struct ferry_error *err)
{
    static char done[] = "{\"done\":true}";
    struct resource_run *rr = find_resource(r, t->resource);
    if (rr == NULL || t->shard < 0 || t->shard >= rr->n_shards)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "run %" PRId64 ": task %s shard %d is not in the pipeline's plan",
                               r->run_id, t->resource, t->shard);
    char *pos = NULL;
    int rc = task_resume(r, rr, t->shard, &pos, err);
    if (rc != FERRY_OK) return rc;
    char **resume = ferry_calloc((size_t)rr->n_shards, sizeof *resume);
    struct ferry_flow *f = ferry_calloc(1, sizeof *f);
    if (resume == NULL || f == NULL) {
        ferry_free(resume);
        ferry_free(f);
        ferry_free(pos);
        return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
    }
    for (int s = 0; s < rr->n_shards; s++) resume[s] = s == t->shard ? pos : done;
    atomic_store(&r->task_fenced, 0);
    atomic_store(&r->flow_stop, atomic_load(&g_stop));
    set_task(r, t);
    if (r->o->out && !r->o->quiet) {
        fprintf(r->o->out, "run %" PRId64 ": %s shard %d (token %" PRId64 ")%s\n", r->run_id,
                t->resource, t->shard, t->token, pos ? ", resuming" : "");
        fflush(r->o->out);
    }
    flow_init(r, rr, f, resume, r->tbus, &r->flow_stop);
    f->rows_expected = -1; /* the estimate is the resource's, not this shard's */
    f->seq_base = rr->seq_base;
    atomic_store(&r->current, f);
    rc = position_done(pos) ? FERRY_OK : ferry_flow_run(f, err);
    atomic_store(&r->current, NULL);
    rr->seq_base = f->seq_base;
    r->rows += atomic_load(&f->rows_written);
    r->bytes += atomic_load(&f->bytes_written);
    r->batches += atomic_load(&f->batches_written);
    ferry_free(f);
    ferry_free(resume);
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

/* The coordinator: creates the tasks once, works them like any worker, and waits for the
 * ones other workers hold; done when every task of every resource is. */
static int run_distributed(struct run *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        rc = emit_started(r, rr, true, err);
        if (rc == FERRY_OK)
            rc = ferry_store_shard_tasks_put(r->st, r->run_id, rr->spec->table, rr->n_shards, err);
    }
    if (rc == FERRY_OK && r->o->out && !r->o->quiet) {
        fprintf(r->o->out, "run %" PRId64 ": distributed; shards are handed out to pull workers\n",
                r->run_id);
        fflush(r->o->out);
    }
    int64_t last_report = 0;
    while (rc == FERRY_OK) {
        int stop = atomic_load(&g_stop);
        if (stop != 0) return stop;
        struct ferry_shard_task t;
        bool found = false;
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
        struct ferry_shard_task *v = NULL;
        int n = 0, n_done = 0, n_leased = 0;
        bool all = false;
        rc = ferry_store_shard_list(r->st, r->run_id, NULL, &v, &n, err);
        if (rc == FERRY_OK) ferry__shard_tasks_summary(v, n, &n_done, &n_leased, &all);
        ferry_free(v);
        if (rc != FERRY_OK || all) break;
        /* A shard worker that failed fails the run: stop here too. */
        struct ferry_run_info run;
        memset(&run, 0, sizeof run);
        rc = ferry_store_run_get(r->st, r->run_id, &run, err);
        if (rc == FERRY_OK && (run.attempt != r->attempt || run.state != FERRY_RUN_RUNNING))
            rc = ferry_error_set(err, run.attempt != r->attempt ? FERRY_EFENCED : FERRY_ECONFLICT,
                                 "runner", "run %" PRId64 " is %s (attempt %d)%s%s", r->run_id,
                                 ferry_run_state_name(run.state), run.attempt,
                                 run.error[0] ? ": " : "", run.error);
        ferry_run_info_clear(&run);
        int64_t now = ferry_now_mono_us();
        if (rc == FERRY_OK && r->o->out && !r->o->quiet && now - last_report > 10000000) {
            last_report = now;
            fprintf(r->o->out, "run %" PRId64 ": %d of %d shards done, %d leased by workers\n",
                    r->run_id, n_done, n, n_leased);
            fflush(r->o->out);
        }
        if (rc == FERRY_OK) usleep(100000);
    }
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        char payload[160];
        snprintf(payload, sizeof payload, "{\"distributed\":true}");
        rc = emit(r, rr->spec->table, FERRY_EV_RESOURCE_COMPLETED, payload, NULL, err);
    }
    /* Every worker's rows, as the tracker counted them. */
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

static int commit_session(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = ferry_failpoint_check("before_sink_commit", err);
    if (rc != FERRY_OK) return rc;
    /* A worker reaped while it was stopped must not commit: its attempt is fenced. A shard
     * worker never beats for the run (its coordinator does); its tasks were fenced by token. */
    if (!r->shard_mode) rc = ferry_store_run_heartbeat(r->st, r->run_id, r->attempt, err);
    if (rc != FERRY_OK) return rc;
    rc = p->sink_vt->commit(r->sink_ctx, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: commit", p->sink_type);
    r->session_open = false;
    rc = ferry_failpoint_check("after_sink_commit", err);
    if (rc != FERRY_OK) return rc;
    return emit(r, NULL, FERRY_EV_SINK_COMMITTED, "{}", NULL, err);
}

/* Stops the control thread: after this no heartbeat or lag event of the attempt is left to
 * come, so the run's final event is its last one. */
static void stop_control(struct run *r)
{
    if (r->control_started) {
        atomic_store(&r->control_stop, 1);
        pthread_join(r->control, NULL);
        r->control_started = false;
    }
}

static void cleanup(struct run *r)
{
    stop_control(r);
    if (r->session_open) r->p->sink_vt->abort(r->sink_ctx);
    if (r->sink_ctx) r->p->sink_vt->close(r->sink_ctx);
    for (int i = 1; i < r->n_readers; i++)
        r->p->source_vt->close(r->readers[i]);
    if (r->own_reader) r->p->source_vt->close(r->own_reader);
    ferry_free(r->readers);
    if (r->src_ctx) r->p->source_vt->close(r->src_ctx);
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        ferry_schema_unref(rr->schema);
        ferry_schema_unref(rr->out_schema);
        ferry_transforms_free(rr->chain);
        ferry_free(rr->route);
        ferry_free(rr->plan_json);
        for (int s = 0; rr->resume && s < rr->n_shards; s++) ferry_free(rr->resume[s]);
        ferry_free(rr->resume);
        ferry_free(rr->flow);
    }
    ferry_free(r->res);
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

int ferry_runner_run(const struct ferry_run_options *o, struct ferry_run_result *res,
                     struct ferry_error *err)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    memset(res, 0, sizeof *res);
    res->state = "failed";
    atomic_store(&g_stop, 0);
    r.t0 = ferry_now_mono_us();

    int rc = ferry_failpoints_init(err);
    if (rc != FERRY_OK) return rc;
    if (o->pipeline_path) {
        rc = ferry_pipeline_load(o->pipeline_path, &r.p, err);
        if (rc != FERRY_OK) return rc;
    }
    rc = ferry_store_open(o->state_path, &r.st, err);
    if (rc == FERRY_OK && r.p == NULL) {
        /* `ferry resume RUN` without a file: the pipeline saved with the run. */
        rc = ferry_store_run_get(r.st, o->resume_run_id, &r.info, err);
        if (rc == FERRY_OK) {
            char name[64];
            snprintf(name, sizeof name, "run %" PRId64, o->resume_run_id);
            rc = ferry_pipeline_load_string(r.info.request, strlen(r.info.request), name, &r.p, err);
            /* A worker of `ferry serve`: the server's policy again, after name resolution. */
            if (rc == FERRY_OK) rc = ferry_access_check_from_env(r.p, err);
        }
        ferry_run_info_clear(&r.info);
        memset(&r.info, 0, sizeof r.info);
    }
    /* distribute: true (docs/operations.md, scale-out): this process coordinates, unless it
     * works one task of another process's run (shard mode). */
    bool distribute = false;
    if (rc == FERRY_OK) rc = ferry_cfg_bool(r.p->root, "distribute", false, &distribute, err);
    r.shard_mode = o->shard_resource != NULL;
    r.distributed = distribute && !r.shard_mode && !o->plan_only;
    r.lease_ms = o->lease_ms > 0 ? o->lease_ms : 15000;
    ferry__lease_owner(o->owner, r.owner, sizeof r.owner);
    r.task_lock_init = pthread_mutex_init(&r.task_lock, NULL) == 0;
    if (rc == FERRY_OK) rc = ferry_bus_open(o->bus_url, o->state_path, &r.bus, err);
    if (rc == FERRY_OK && (r.distributed || r.shard_mode))
        rc = ferry__shard_bus_open(r.bus, &r.tbus, err);
    if (rc == FERRY_OK) rc = ferry_tracker_open(o->state_path, r.bus, &r.tracker, err);
    /* Earlier attempts may have died before their last events were folded. */
    if (rc == FERRY_OK) rc = ferry_tracker_fold_available(r.tracker, err);
    if (rc != FERRY_OK) goto out;

    char instance[40];
    rc = ferry_store_instance_id(r.st, instance, sizeof instance, err);
    if (rc != FERRY_OK) goto out;
    snprintf(r.dest_key, sizeof r.dest_key, "%s@%s", r.p->name, instance);

    /* Connect, discover and check everything before a run is created, so that a bad file,
     * an unreachable destination or a refused policy leaves no trace. */
    rc = prepare_resources(&r, err);
    for (int i = 0; rc == FERRY_OK && r.distributed && i < r.n_res; i++)
        rc = ferry__shard_distributable(
            r.res[i].spec->table, ferry_read_mode_name(r.res[i].spec->mode),
            ferry_write_mode_name(r.p->write), r.res[i].caps.durability == FERRY_DURABLE_PER_APPLY,
            r.res[i].caps.replace_commits_once, err);
    /* Saved only once the connectors accepted it (a refused file may hold a plain secret),
     * and never by `ferry check`. */
    if (rc == FERRY_OK && !o->plan_only)
        rc = ferry_store_pipeline_put(r.st, r.p->name, r.p->version, r.p->request_json, err);
    if (rc != FERRY_OK) goto out;
    if (o->plan_only) {
        /* `ferry check`: plans computed from the saved route checkpoints, printed, not
         * frozen; no run is created. */
        for (int i = 0; i < r.n_res && rc == FERRY_OK; i++) {
            struct resource_run *rr = &r.res[i];
            char *lower = NULL;
            if (rr->spec->mode == FERRY_READ_CDC) {
                /* Planning cdc creates a publication and a slot: `check` only says so. */
                rr->plan_json = ferry_strdup("{\"mode\":\"cdc\",\"shards\":[{\"stream\":true}],"
                                             "\"note\":\"slot and snapshot are made by the run\"}");
                rr->n_shards = 1;
                continue;
            }
            if (rr->spec->mode != FERRY_READ_FULL) {
                struct ferry_checkpoint *cps = NULL;
                int n = 0;
                if (ferry_store_route_checkpoints(r.st, r.p->name, r.p->version, rr->route, &cps,
                                                  &n, NULL) == FERRY_OK)
                    for (int k = 0; k < n; k++)
                        if (cps[k].shard == 0) lower = ferry_strdup(cps[k].position);
                ferry_checkpoints_free(cps, n);
            }
            rc = r.p->source_vt->plan(r.src_ctx, rr->spec, rr->schema, lower, &rr->plan_json, err);
            ferry_free(lower);
            if (rc != FERRY_OK) break;
            json_t *pj = json_loads(rr->plan_json, 0, NULL);
            rr->n_shards = (int)json_array_size(json_object_get(pj, "shards"));
            json_decref(pj);
        }
        if (rc == FERRY_OK) {
            print_plan(&r);
            res->state = "checked";
        }
        goto out;
    }
    if (r.shard_mode) {
        /* The run's current attempt is the coordinator's: a shard worker works under it and
         * never starts one (that would fence the coordinator). */
        rc = ferry_store_run_get(r.st, o->resume_run_id, &r.info, err);
        if (rc != FERRY_OK) goto out;
        r.run_id = r.info.id;
        r.attempt = r.info.attempt;
        r.resumed = true;
        if (r.info.state != FERRY_RUN_RUNNING) {
            rc = ferry_error_set(err, FERRY_ECONFLICT, "runner",
                                 "run %" PRId64 " is %s: its shard %s/%d is not worked",
                                 r.run_id, ferry_run_state_name(r.info.state), o->shard_resource,
                                 o->shard);
            goto out;
        }
    } else {
        rc = pick_run(&r, err);
        if (rc != FERRY_OK) goto out;
        if (o->claimed_attempt > 0) {
            /* run_claim began the attempt (requested -> running) atomically. */
            r.attempt = o->claimed_attempt;
            r.resumed = o->claimed_attempt > 1;
        } else {
            rc = ferry_store_run_begin_attempt(r.st, r.run_id, (int)getpid(), &r.attempt, err);
        }
        if (rc != FERRY_OK) goto out;
    }
    res->run_id = r.run_id;
    res->attempt = r.attempt;
    res->resumed = r.resumed;

    rc = plan_resources(&r, err);
    if (rc == FERRY_OK && o->out && !o->quiet && !r.shard_mode) {
        if (r.resumed)
            fprintf(o->out, "resuming run %" PRId64 " of pipeline %s (attempt %d)\n", r.run_id,
                    r.p->name, r.attempt);
        else
            fprintf(o->out, "run %" PRId64 " of pipeline %s started\n", r.run_id, r.p->name);
        fflush(o->out);
    }
    char payload[256];
    snprintf(payload, sizeof payload, "{\"pid\":%d,\"resumed\":%s}", (int)getpid(),
             r.resumed ? "true" : "false");
    int64_t seq = 0;
    if (rc == FERRY_OK && !r.shard_mode)
        rc = emit(&r, NULL, FERRY_EV_RUN_STARTED, payload, NULL, err);
    bool tracking = false;
    if (rc == FERRY_OK) {
        rc = ferry_tracker_start(r.tracker, err);
        tracking = rc == FERRY_OK;
    }
    if (rc == FERRY_OK) {
        if (pthread_create(&r.control, NULL, control_main, &r) == 0) r.control_started = true;
    }
    for (int i = 0; i < r.n_res && rc == FERRY_OK; i++) {
        rc = r.p->sink_vt->prepare(r.sink_ctx, &r.res[i].target, err);
        if (rc != FERRY_OK) ferry_error_prefix(err, "%s sink: prepare %s", r.p->sink_type,
                                               r.res[i].target.table);
    }
    if (rc == FERRY_OK) {
        struct ferry_session_info si = {.pipeline = r.dest_key,
                                        .version = r.p->version,
                                        .run_id = r.run_id,
                                        .attempt = r.attempt,
                                        .resuming = r.resumed || r.shard_mode};
        rc = r.p->sink_vt->begin(r.sink_ctx, &si, err);
        if (rc == FERRY_OK)
            r.session_open = true;
        else
            ferry_error_prefix(err, "%s sink: open session", r.p->sink_type);
    }
    if (rc == FERRY_OK) rc = open_readers(&r, err);
    if (rc == FERRY_OK && r.shard_mode) {
        struct ferry_shard_task t;
        memset(&t, 0, sizeof t);
        t.run_id = r.run_id;
        snprintf(t.resource, sizeof t.resource, "%s", o->shard_resource);
        t.shard = o->shard;
        t.token = o->shard_token;
        snprintf(t.owner, sizeof t.owner, "%s", r.owner);
        rc = work_task(&r, &t, err);
    } else if (rc == FERRY_OK) {
        rc = r.distributed ? run_distributed(&r, err) : run_resources(&r, err);
    }
    bool paused = rc == FERRY_EPAUSED;
    /* A pause of `replace` into a sink whose every commit publishes the whole table commits
     * nothing (it would publish half a table): the session is aborted and the resumed run
     * reads again from the start. */
    bool pause_commits = paused && !(r.p->write == FERRY_WRITE_REPLACE && r.n_res > 0 &&
                                     r.res[0].caps.replace_commits_once);
    /* Likewise a run whose plan read shards without key order (commit_once): a commit now
     * would make half-read shards durable with no point to resume them from. */
    for (int i = 0; pause_commits && i < r.n_res; i++)
        if (r.res[i].commit_once) pause_commits = false;
    if (rc == FERRY_OK || pause_commits) {
        int crc = commit_session(&r, err);
        if (crc != FERRY_OK) rc = crc;
    }
    if (r.session_open) {
        r.p->sink_vt->abort(r.sink_ctx);
        r.session_open = false;
    }
    /* The destination is released before the run's final event: whoever sees the run
     * completed (runs watch, the API) finds no ferry connection or lock left on it. */
    if (r.sink_ctx) {
        r.p->sink_vt->close(r.sink_ctx);
        r.sink_ctx = NULL;
    }

    /* verify: after_run - the data is committed; its events go on this run's bus. */
    if (rc == FERRY_OK && !r.shard_mode && r.p->verify != NULL &&
        !strcmp(r.p->verify, "after_run"))
        ferry_verify_after_run(r.p, verify_event, &r);
    /* The final event: the tracker folds it into the run's state. It is the attempt's last
     * event (an event stream that ends at it misses nothing), so the control thread, which
     * emits heartbeats and lag, stops first. */
    stop_control(&r);
    struct ferry_error fe;
    ferry_error_clear(&fe);
    if (r.shard_mode) {
        /* A task's end is its shard_done (work_task); only a failure concerns the run. */
        res->state = rc == FERRY_OK        ? "completed"
                     : rc == FERRY_EPAUSED ? "paused"
                     : rc == FERRY_EFENCED || rc == FERRY_ECANCELED ? "canceled"
                                                                      : "failed";
        if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED && rc != FERRY_EFENCED &&
            r.attempt > 0) {
            struct ferry_buf fb;
            ferry_buf_init(&fb, 0);
            ferry_buf_printf(&fb, "{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
            ferry_buf_json_string(&fb, err->message, strlen(err->message));
            ferry_buf_append(&fb, "}", 1);
            emit(&r, o->shard_resource, FERRY_EV_RESOURCE_FAILED, fb.data, NULL, NULL);
            emit(&r, NULL, FERRY_EV_RUN_FAILED, fb.data, &seq, &fe);
            ferry_buf_release(&fb);
        }
    } else if (rc == FERRY_OK) {
        snprintf(payload, sizeof payload,
                 "{\"rows\":%" PRId64 ",\"bytes\":%" PRId64 ",\"batches\":%" PRId64 "}", r.rows,
                 r.bytes, r.batches);
        rc = emit(&r, NULL, FERRY_EV_RUN_COMPLETED, payload, &seq, err);
        if (rc == FERRY_OK) res->state = "completed";
    } else if (paused && rc == FERRY_EPAUSED) {
        emit(&r, NULL, FERRY_EV_RUN_PAUSED,
             pause_commits ? "{\"committed\":true}" : "{\"committed\":false}", &seq, &fe);
        res->state = "paused";
        ferry_error_set(err, FERRY_EPAUSED, "runner",
                        "run %" PRId64 " paused after draining; resume it with `ferry resume %"
                        PRId64 "` or by running the same file again", r.run_id, r.run_id);
    } else if (rc == FERRY_ECANCELED) {
        emit(&r, NULL, FERRY_EV_RUN_CANCELED, "{}", &seq, &fe);
        res->state = "canceled";
    } else {
        struct ferry_buf fb;
        ferry_buf_init(&fb, 0);
        ferry_buf_printf(&fb, "{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
        ferry_buf_json_string(&fb, err->message, strlen(err->message));
        ferry_buf_append(&fb, "}", 1);
        emit(&r, NULL, FERRY_EV_RUN_FAILED, fb.data, &seq, &fe);
        ferry_buf_release(&fb);
        res->state = "failed";
    }
    if (seq > 0) {
        int wrc = tracking ? ferry_tracker_wait(r.tracker, seq, 60000, &fe)
                           : ferry_tracker_fold_available(r.tracker, &fe);
        if (wrc != FERRY_OK) ferry_log(FERRY_LOG_WARN, "tracker: %s", fe.message);
        /* Only once the tracker has folded the end (the route checkpoints are saved). */
        if (wrc == FERRY_OK && (rc == FERRY_OK || (rc == FERRY_EPAUSED && pause_commits))) ack_cdc(&r, res);
    }
out:
    res->rows = r.rows;
    res->bytes = r.bytes;
    res->batches = r.batches;
    res->seconds = (double)(ferry_now_mono_us() - r.t0) / 1e6;
    res->peak_rss = peak_rss_bytes();
    cleanup(&r);
    return rc;
}
