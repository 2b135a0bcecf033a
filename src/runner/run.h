/* runner/run.h - the shared state of one run and its event emitter (private to src/runner).
 *
 * Every other file of the runner includes this one and nothing of each other's but through
 * the declarations below, grouped by the file that defines them. Calls go one way only:
 *
 *   runner.c (driver) -> attempt.c, plan.c, session.c, readers.c, schedule.c,
 *                        coordinator.c, control.c, saved.c
 *   plan.c, session.c -> lanes.c
 *   schedule.c        -> lanes.c
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
struct ferry_convert;
struct ferry_tracker;

/* One resource of the run: what planning decided, and its flow while it runs. */
struct resource_run {
    struct ferry_resource_spec *spec;
    struct ferry_read_context read;  /* handed to the source with spec (connector.h) */
    struct ferry_schema *schema;     /* source schema */
    struct ferry_schema *out_schema; /* after transforms: what the sink writes */
    struct ferry_transform_chain *chain;
    struct ferry_convert *convert;   /* on_unrepresentable: null | clamp, else NULL */
    struct ferry_sink_caps caps;
    struct ferry_target target;
    char *route;
    char *plan_json;
    int n_shards;
    char **resume;
    bool resumed_any;
    bool commit_once;        /* the frozen plan's "commit_once" (connector.h) */
    bool no_resume_point;    /* a full read whose plan says "keyset": "none" (connector.h) */
    int64_t rows_estimate;   /* the plan's "rows_estimate" (connector.h), -1: none */
    int64_t row_groups_skipped; /* the plan's "row_groups_skipped" (Parquet cursor reads), -1 */
    struct ferry_flow *flow; /* owned; the last flow that ran for this resource */
    /* The flow while it runs (the control thread reads it: flush ticks, progress, lag);
     * NULL before and after. One per resource so that resources may run side by side. */
    _Atomic(struct ferry_flow *) active;
    uint64_t seq_base; /* distributed: batch seqs continue across tasks */
    int lane;          /* which lane (sink instance and readers) copies it (lanes.c) */
    bool copy_phase;   /* runs in the concurrent copy phase (not a cdc resource) */
    /* A table of the frozen list that the source no longer has (dropped after the first
     * attempt planned it): the resource fails with this message, the others go on. */
    char *gone;
    char **saved_seen; /* per shard: the last position reported saved (saved.c) */
};

/* One lane of the copy phase: a sink instance with its own session and a set of reader
 * instances, owned by one thread, copying its resources one after another (lanes.c). Lane 0
 * is the run's own sink (sink_ctx) and readers. */
struct lane {
    struct run *r;
    int index;
    void *sink_ctx;
    bool session_open;
    void **readers;
    int n_readers;
    int *res; /* indices into run.res, largest first */
    int n_res;
    pthread_t thread;
    bool started;
    /* The stop flag of this lane's flows: a flow raises its own on a failure to stop its
     * readers (pipeline/flow.h), which must not stop the other lanes; the control thread
     * copies the run's stop request (run.stop) into it. */
    atomic_int stop;
};

struct run {
    const struct ferry_run_options *o;
    /* The run's stop request (0, FERRY_EPAUSED or FERRY_ECANCELED), read by its flows: the
     * caller's (ferry_run_options.stop, an embedded job's) or own_stop. Set through
     * ferry__run_stop_set (a cancel wins over a pause); ferry__run_stop_get also folds in
     * the process's signals that came after the run started (run.c). */
    atomic_int *stop;
    atomic_int own_stop;
    atomic_int signals_seen; /* ferry_runner_signal calls folded into *stop (run.c) */
    bool live;              /* in the process's list of runs in progress (run.c) */
    struct run *live_next;
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
    pthread_mutex_t control_mu; /* with control_cv: the control thread's 20 ms sleep, which */
    pthread_cond_t control_cv;  /* ferry__control_stop cuts short (monotonic clock) */
    pthread_t control;
    bool control_started;
    int64_t t0;
    int64_t peak_rss;
    /* totals of finished resources (and tasks) */
    int64_t rows, bytes, batches;
    int64_t converted; /* on_unrepresentable, every resource (under lock) */
    struct ferry_buf failed_res; /* failed resources - "a: why; b: why" */
    int n_failed_res;
    int first_failed_rc; /* the code of the first of them */
    bool failed_transient; /* every one of them failed on a transient error */
    /* A failed resource does not stop the others (lanes.c decides): on_resource_error:
     * continue, or a sink whose writes are durable per apply. */
    bool isolate_failures;
    /* The copy phase: `concurrency` lanes under one memory budget (lanes.c, budget.c). */
    struct lane *lanes;
    int n_lanes;
    struct ferry_batch_opts opts; /* the file's batch settings within the budget */
    char *snapshot_id;            /* the attempt's exported snapshot, for lanes' readers */
    pthread_mutex_t lock;         /* guards the totals, failed_res and fatal_rc */
    bool lock_init;
    int fatal_rc;                 /* a lane's failure that stops the run (pause, store...) */
    struct ferry_error fatal_err;
    atomic_int res_done;          /* resources finished (completed or failed), progress */
    /* `tables:` patterns: the table list the expansion used (plan.c), as JSON, and the run
     * whose first attempt froze it (0: listed by this attempt, frozen with its run). */
    char *tables_json;
    int64_t tables_run;
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
    /* ferry__run_emit_hold: the holding thread and what it holds (touched by it alone) */
    atomic_bool holding;
    pthread_t holder;
    struct ferry_event *held;
    int n_held, cap_held;
};

/* ---- run.c: the stop flag, the emitter, small shared helpers ---- */

/* Points r->stop at the caller's flag or the run's own, and notes the signals so far. */
void ferry__run_stop_init(struct run *r);
/* The run's stop request after folding in the signals the process received since the run
 * started (the first pauses, the next cancels, as ferry_runner_signal says). */
int ferry__run_stop_get(struct run *r);
/* Asks the run to stop: FERRY_ECANCELED always wins, FERRY_EPAUSED only over no request
 * (by the control thread: requests in the store, a fenced heartbeat; by a failed thread). */
void ferry__run_stop_set(struct run *r, int code);
/* Enters r (its dest_key: pipeline and state file) in the process's runs in progress;
 * FERRY_ECONFLICT when a run of the same pipeline and state file is in progress in this
 * process (another thread: its pid is this one, so attempt.c cannot tell it apart from a
 * run this process left behind). Released by ferry__run_live_leave (idempotent). */
int ferry__run_live_enter(struct run *r, struct ferry_error *err);
void ferry__run_live_leave(struct run *r);
/* Publishes one event of this run's attempt on its bus; *seq (optional) gets its seq. */
int ferry__run_emit(struct run *r, const char *resource, const char *type, const char *payload,
                    int64_t *seq, struct ferry_error *err);
/* Holding: from ferry__run_emit_hold until ferry__run_emit_release, the calling thread's
 * events of r (those whose seq nobody asks for) are kept in order and then published
 * together (ferry_bus_publish_n: one transaction of the state file instead of one per event,
 * e.g. the ends of a wave of many tables). Other threads publish as usual meanwhile. An
 * event that asks for its seq releases the held ones first. Release publishes and stops
 * holding; its error is the publish's (every held event then lost, as a crash would). */
void ferry__run_emit_hold(struct run *r);
int ferry__run_emit_release(struct run *r, struct ferry_error *err);
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
/* The run attach would continue, as far as the store tells now (0: a new one); nothing is
 * changed. Planning reads that run's frozen table list (plan.c). */
int64_t ferry__run_peek(struct run *r);

/* ---- plan.c: planning, shared by `ferry run` and `ferry check` ---- */

/* Opens source and sink; discovers, compiles transforms, applies the policy and refuses
 * unknown keys: everything that can refuse the pipeline, before a run exists. */
int ferry__plan_prepare(struct run *r, struct ferry_error *err);
/* The sink's prepare_ahead (connector.h) with the target tables of lane's resources. */
void ferry__plan_prepare_ahead(struct run *r, void *sink_ctx, int lane);
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
/* The run's line: tables done of total, rows, rate, ETA (several flows at once). */
void ferry__run_print_run_progress(struct run *r, bool final);
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

/* ---- lanes.c: the copy phase's lanes ---- */

/* After planning: how many lanes, which resource each copies, the batch settings within
 * the memory budget (FERRY_ECONFIG naming `memory` when it is too small). */
int ferry__lanes_plan(struct run *r, struct ferry_error *err);
/* After the plans are frozen: which lane copies which resource (largest first). */
int ferry__lanes_assign(struct run *r, struct ferry_error *err);
/* A lane other than 0: sink instance, its targets prepared, session begun, readers on the
 * snapshot (on the lane's own thread, so that lanes prepare their targets side by side).
 * Lane 0: the run's sink and readers. */
int ferry__lanes_open(struct run *r, struct lane *ln, struct ferry_error *err);
/* Control thread: the run's stop request into every lane's stop flag. */
void ferry__lanes_forward_stop(struct run *r);
/* Commits the sessions of lanes 1..n-1 (lane 0 is the run's session, session.c). */
int ferry__lanes_commit(struct run *r, struct ferry_error *err);
/* Aborts what is open and closes lanes 1..n-1 (idempotent). */
void ferry__lanes_close(struct run *r);

/* ---- schedule.c: resources and their flows ---- */

/* A flow over rr that resumes from `resume`, reports to `bus` and stops on `stop`, with the
 * run's own sink and readers (lane 0). */
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
