/* runner/run.h - the shared state of one run and its event emitter (private to src/runner).
 *
 * Every other file of the runner includes this one and nothing of each other's but through
 * the declarations below, grouped by the file that defines them. Calls go one way only:
 *
 *   runner.c (driver) -> attempt.c, plan.c, session.c, readers.c, schedule.c,
 *                        coordinator.c, control.c, saved.c
 *   coordinator.c     -> schedule.c (a task is a flow like any other)
 *   control.c         -> progress.c, saved.c
 *   schedule.c        -> progress.c
 *   every file        -> run.c (this header: state, stop flag, emitter)
 *
 * No file lower in that list calls one above it (docs/internals/runner.md). */
#ifndef FERRY_RUNNER_RUN_H
#define FERRY_RUNNER_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/connector.h"
#include "ferry/error.h"
#include "ferry/pipeline.h"
#include "runner/runner.h"
#include "store/store.h"

struct ferry_flow;
struct ferry_transform_chain;
struct ferry_tracker;

/* One resource of the run: what planning decided, and its flow while it runs. */
struct resource_run {
    struct ferry_resource_spec *spec;
    struct ferry_read_context read;  /* handed to the source with spec (connector.h) */
    struct ferry_schema *schema;     /* source schema */
    struct ferry_schema *out_schema; /* after transforms: what the sink writes */
    struct ferry_transform_chain *chain;
    struct ferry_sink_caps caps;
    struct ferry_target target;
    char *route;
    char *plan_json;
    int n_shards;
    char **resume;
    bool resumed_any;
    bool commit_once;        /* the frozen plan's "commit_once" (connector.h) */
    int64_t rows_estimate;   /* the plan's "rows_estimate" (connector.h), -1: none */
    struct ferry_flow *flow; /* owned; the last flow that ran for this resource */
    /* The flow while it runs (the control thread reads it: flush ticks, progress, lag);
     * NULL before and after. One per resource so that resources may run side by side. */
    _Atomic(struct ferry_flow *) active;
    uint64_t seq_base; /* distributed: batch seqs continue across tasks */
    char **saved_seen; /* per shard: the last position reported saved (saved.c) */
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
    atomic_int control_stop;
    pthread_t control;
    bool control_started;
    int64_t t0;
    int64_t peak_rss;
    /* totals of finished resources (and tasks) */
    int64_t rows, bytes, batches;
    struct ferry_buf failed_res; /* on_resource_error: continue - "a: why; b: why" */
    int n_failed_res;
    /* Distributed runs (docs/internals/server.md): the coordinator (distribute: true) and
     * shard mode (one leased task of another process's run). Flows stop on flow_stop, which
     * the control thread keeps equal to the run's stop flag unless the task's lease is lost
     * (fenced). */
    bool distributed, shard_mode;
    char owner[160];
    int lease_ms;
    struct ferry_bus *tbus; /* tags batch.written with the task token */
    atomic_int flow_stop;
    atomic_int task_fenced;
    pthread_mutex_t task_lock; /* guards task */
    bool task_lock_init;
    struct ferry_shard_task task; /* token 0: none */
    void *own_reader;             /* shard mode: readers[0], not src_ctx */
    int64_t committed_seq;        /* seq of this attempt's sink.committed (0: none) */
};

/* ---- run.c: the stop flag, the emitter, small shared helpers ---- */

/* The process-wide stop request (0, FERRY_EPAUSED or FERRY_ECANCELED): set by signals,
 * by the control thread (requests in the store, a fenced heartbeat), read by every flow. */
extern atomic_int ferry__run_stop;
/* Publishes one event of this run's attempt on its bus; *seq (optional) gets its seq. */
int ferry__run_emit(struct run *r, const char *resource, const char *type, const char *payload,
                    int64_t *seq, struct ferry_error *err);
/* Publishes `type` with {"code":..,"message":..} for a failure rc with message msg. */
int ferry__run_emit_failure(struct run *r, const char *resource, const char *type, int rc,
                            const char *msg, int64_t *seq, struct ferry_error *err);
int ferry__run_oom(struct ferry_error *err);
/* Whether a stored position says its shard is done ({"done":true}). */
bool ferry__run_position_done(const char *pos);
struct resource_run *ferry__run_find_resource(struct run *r, const char *name);
/* The route checkpoint of shard 0 of rr (owned, NULL when none) and the run that saved it. */
int ferry__run_route_position(struct run *r, const struct resource_run *rr, char **pos,
                              int64_t *run_id, struct ferry_error *err);

/* ---- attempt.c: which logical run, which attempt ---- */

/* Picks or creates the logical run and begins its attempt (or, in shard mode, joins the
 * running attempt of resume_run_id). */
int ferry__run_attach(struct run *r, struct ferry_error *err);

/* ---- plan.c: planning, shared by `ferry run` and `ferry check` ---- */

/* Opens source and sink; discovers, compiles transforms, applies the policy and refuses
 * unknown keys: everything that can refuse the pipeline, before a run exists. */
int ferry__plan_prepare(struct run *r, struct ferry_error *err);
/* Frozen plans and resume positions of the chosen run (planned and frozen when new). */
int ferry__plan_freeze(struct run *r, struct ferry_error *err);
/* `ferry check`: plans from the saved route checkpoints, printed, not frozen. */
int ferry__plan_check(struct run *r, struct ferry_error *err);

/* ---- session.c: the destination session ---- */

/* prepare every target, then begin the session. */
int ferry__session_begin(struct run *r, struct ferry_error *err);
/* Whether a run that ended with rc commits what its session holds. */
bool ferry__session_should_commit(const struct run *r, int rc);
/* failpoints, heartbeat (fencing), commit, sink.committed. */
int ferry__session_commit(struct run *r, struct ferry_error *err);
/* Aborts an open session and closes the sink (idempotent). */
void ferry__session_close(struct run *r);

/* ---- readers.c: reader instances and the shared snapshot ---- */

int ferry__readers_open(struct run *r, struct ferry_error *err);
void ferry__readers_close(struct run *r);

/* ---- progress.c: what a person and the events see of a running flow ---- */

int64_t ferry__run_peak_rss(void);
int64_t ferry__run_cpu_ms(void);
const char *ferry__run_bound(int64_t wait_source_us, int64_t wait_sink_us, int64_t elapsed_us);
const char *ferry__run_bound_label(const char *bound);
void ferry__run_print_progress(struct run *r, struct ferry_flow *f, int64_t start_us, bool final);
void ferry__run_emit_cdc_lag(struct run *r, struct ferry_flow *f, int64_t *last_position);
/* The source schema changes rr's stream noted (pipeline/schema_change.h), each as a
 * `schema.changed` event of rr (schema_events.c). */
void ferry__run_emit_schema_changes(struct run *r, const struct resource_run *rr);
/* `create: like_source` (clone.c): the destination schema before the data, its constraints,
 * indexes and sequence values after the run's commit. No-ops without the key. */
int ferry__clone_before(struct run *r, struct ferry_error *err);
int ferry__clone_after(struct run *r, struct ferry_error *err);

/* ---- saved.c: cursor.checkpoint_saved ---- */

/* Publishes cursor.checkpoint_saved for every run checkpoint in st not reported yet. */
void ferry__run_report_saved(struct run *r, struct ferry_store *st);
void ferry__run_saved_free(struct resource_run *rr);

/* ---- control.c: the control thread ---- */

void ferry__control_start(struct run *r);
/* After this no heartbeat or lag event of the attempt is left to come. */
void ferry__control_stop(struct run *r);

/* ---- schedule.c: resources and their flows ---- */

/* A flow over rr that resumes from `resume`, reports to `bus` and stops on `stop`. */
void ferry__schedule_flow_init(struct run *r, struct resource_run *rr, struct ferry_flow *f,
                               char **resume, struct ferry_bus *bus, atomic_int *stop);
int ferry__schedule_emit_started(struct run *r, struct resource_run *rr, bool distributed,
                                 struct ferry_error *err);
/* Runs every resource of the run in this process. */
int ferry__schedule_run(struct run *r, struct ferry_error *err);
/* After the end is folded: cdc sources release their log up to the saved route position. */
void ferry__schedule_ack_cdc(struct run *r, struct ferry_run_result *res);

/* ---- coordinator.c: distributed runs ---- */

/* distribute: true: create the tasks, work them like any worker, wait for the others. */
int ferry__coord_run(struct run *r, struct ferry_error *err);
/* Shard mode: works the one leased task of the options. */
int ferry__coord_work_shard(struct run *r, struct ferry_error *err);

#endif
