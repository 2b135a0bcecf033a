/* control/control.h - the control plane of `ferry serve` (DESIGN §1 steps 2-3, §4, §7):
 * the dispatcher, the reaper and the scheduler. The tracker (control/tracker.h) runs beside
 * them and folds what the workers publish.
 *
 * Dispatcher (dispatcher.c): consumes `run.requested` from the bus (durable consumer
 * "dispatcher") and starts one child process `ferry worker --run ID --state PATH` per run,
 * at most `max_workers` at a time; the others wait in FIFO order. A run is started only
 * while the store says it is `requested`, so a redelivered event starts nothing. It reaps
 * its children: a worker that exits while the store still says its attempt is running
 * (it died before its final event) is lost at once, through the reaper's path.
 * Reaper (reaper.c): every `sweep_ms`, a running run whose heartbeat is older than
 * `lease_ms` is lost: its attempt is fenced (ferry_store_run_reap), `worker.lost` and
 * `run.failed` are published, and when the pipeline's retry policy allows, the run is
 * requested again (it resumes from its durable checkpoints).
 * Scheduler (scheduler.c): cron schedules (five fields, an IANA time zone, an overlap
 * policy) request runs when due.
 *
 * Threads: ferry_control_start runs one thread per component; each opens its own store
 * handle. The stats are read under a lock, from any thread. */
#ifndef FERRY_CONTROL_H
#define FERRY_CONTROL_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"

struct ferry_bus;
struct ferry_store;

struct ferry_control_options {
    const char *state_path;
    const char *worker_bin; /* the ferry executable started as `worker` */
    const char *log_dir;    /* worker output: LOG_DIR/run-ID.log */
    int max_workers;        /* concurrency limit, >= 1 */
    int lease_ms;           /* a worker silent for longer is lost */
    int sweep_ms;           /* how often the reaper looks */
    bool scheduler;         /* run the scheduler thread */
    /* How requested runs are started: "local" (NULL too: child processes), "pull" (`ferry
     * worker --pull` processes claim them) or "kubernetes" (one Job per run, control/k8s.h). */
    const char *dispatch;
    const char *image;      /* kubernetes: the worker image (--image, FERRY_IMAGE) */
};

struct ferry_control_stats {
    int workers_running;
    int runs_queued;
    int64_t workers_started, workers_lost, runs_retried, schedules_fired;
    bool leader;            /* this replica holds the lease "control" */
    int64_t leader_token;   /* the lease's token (grows at every change of leader) */
};

struct ferry_control;

int ferry_control_start(const struct ferry_control_options *o, struct ferry_bus *bus,
                        struct ferry_control **out, struct ferry_error *err);
/* Stops the threads. Workers still running are asked to pause (SIGTERM: drain, commit,
 * pause) and waited for up to wait_ms, then left alone. */
void ferry_control_stop(struct ferry_control *c, int wait_ms);
void ferry_control_stats(struct ferry_control *c, struct ferry_control_stats *out);
/* Where the local workers' output goes (run-ID.log in it); NULL when c is NULL. */
const char *ferry_control_log_dir(const struct ferry_control *c);

/* reaper.c: the worker of (run_id, attempt) is lost. Fences the attempt, publishes
 * worker.lost and run.failed, and requests the run again when the pipeline's retries allow.
 * *retried tells whether it did. silent_before_us > 0: only if the run's heartbeat is not
 * newer (the reaper's lease check, repeated inside the fencing transaction). FERRY_EFENCED /
 * FERRY_ECONFLICT when the run moved on meanwhile (nothing to do). */
int ferry_control_lose(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id, int attempt,
                       int64_t silent_before_us, const char *why, int lease_ms, bool *retried,
                       struct ferry_error *err);
/* One sweep over the running runs; *lost counts the runs it failed. stuck (may be NULL) is
 * told of a silent run the sweep could not fence because the store stayed locked. */
int ferry_reaper_sweep(struct ferry_store *st, struct ferry_bus *bus, int lease_ms,
                       void (*stuck)(void *arg, int64_t run_id), void *arg, int *lost,
                       int *retried, struct ferry_error *err);

/* scheduler.c */
struct ferry_cron;
/* Parses "m h dom mon dow" (numbers, *, lists a,b, ranges a-b, steps (every n: "*" or a-b, then
 * "/n"); day and month names not accepted). FERRY_EINVAL naming the field. */
int ferry_cron_parse(const char *expr, struct ferry_cron **out, struct ferry_error *err);
void ferry_cron_free(struct ferry_cron *c);
/* The first minute strictly after after_us (wall clock, µs) that matches, evaluated in the
 * IANA time zone tz ("UTC" when NULL or empty). FERRY_ENOTFOUND when none within 5 years. */
int ferry_cron_next(const struct ferry_cron *c, const char *tz, int64_t after_us, int64_t *next_us,
                    struct ferry_error *err);
/* Whether tz names a zone this machine knows (tzdata). */
bool ferry_timezone_valid(const char *tz);
/* Requests a run of `pipeline` (its current version) on behalf of an API call or a
 * schedule: creates the run (idempotent with key), publishes run.requested. Shared by the
 * server and the scheduler. */
int ferry_control_request_run(struct ferry_store *st, struct ferry_bus *bus, const char *pipeline,
                              const char *trigger, const char *key, int64_t *run_id, bool *existed,
                              struct ferry_error *err);
/* One scheduler pass at now_us; *fired counts the runs it requested. */
int ferry_scheduler_tick(struct ferry_store *st, struct ferry_bus *bus, int64_t now_us, int *fired,
                         struct ferry_error *err);

#endif
