/* store/store.h - the state store interface (DESIGN §5).
 *
 * Holds pipelines and their immutable versions, runs and their per-resource state,
 * frozen checkpoint plans, run-scoped and route checkpoints, the event log of the
 * in-process bus and the tracker's dedup marks. Schema changes go through numbered
 * migrations applied at open. The logic is written once (store/store_sql.c) over a thin SQL
 * driver (store/sdb.h): SQLite (store/sqlite_store.c, one file, WAL mode, synchronous=FULL so
 * a saved checkpoint survives power loss) or PostgreSQL (store/pg_store.c, tables in one
 * schema, a small connection pool). Both behave the same for every function below.
 *
 * A store handle is used by one thread at a time; threads open their own handles on the
 * same path or URL (SQLite serialises writers with a busy timeout; PostgreSQL locks rows).
 *
 * Fencing: functions that take (run_id, attempt) refuse with FERRY_EFENCED when the run's
 * current attempt is not `attempt`: a worker that lost its lease cannot move state. */
#ifndef FERRY_STORE_H
#define FERRY_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"
#include "ferry/event.h"

enum ferry_run_state {
    FERRY_RUN_REQUESTED = 0,
    FERRY_RUN_RUNNING,
    FERRY_RUN_PAUSED,
    FERRY_RUN_COMPLETED,
    FERRY_RUN_FAILED,
    FERRY_RUN_CANCELED,
    FERRY_RUN_PARTIAL, /* on_resource_error: continue - committed, some resources failed */
    FERRY_RUN_STATE_MAX
};
const char *ferry_run_state_name(enum ferry_run_state s);
int ferry_run_state_from_name(const char *s, enum ferry_run_state *out);
static inline int ferry_run_state_is_final(enum ferry_run_state s)
{
    return s == FERRY_RUN_COMPLETED || s == FERRY_RUN_FAILED || s == FERRY_RUN_CANCELED ||
           s == FERRY_RUN_PARTIAL;
}

struct ferry_run_info {
    int64_t id;
    char pipeline[256];
    char version[65];
    enum ferry_run_state state;
    int attempt;
    int pid;                /* process of the current attempt, 0 when none */
    int64_t created_us, started_us, ended_us, heartbeat_us;
    int64_t rows, bytes, batches;
    int64_t verified, diverged; /* batches whose integrity was checked / diverged */
    char error[1024];       /* last error message, "" when none */
    char *request;          /* the saved request (pipeline spec JSON, secrets as refs) */
};
void ferry_run_info_clear(struct ferry_run_info *r); /* frees request */

struct ferry_resource_state {
    char resource[256];
    char mode[16];          /* full | incremental | cdc */
    char write[16];
    char state[16];         /* pending | running | completed | failed */
    int64_t rows, bytes, batches, verified, diverged;
    char error[1024];
    char route[512];        /* route key (resource.started "route"), "" when unknown */
    int64_t skipped;        /* records the source skipped (on_error: skip), see skips_get */
    int64_t rows_estimate;  /* the plan's estimate of the rows to read, 0: none (upsert keeps
                             * the row's when this is 0: a resumed attempt has none) */
    char bound[16];         /* "sink" | "source" | "balanced" once completed, else "" */
};

struct ferry_checkpoint {
    char resource[256];
    int shard;
    int64_t run_id;         /* run that produced it */
    char *position;         /* JSON */
    int64_t updated_us;
    char version[65];       /* route checkpoints: pipeline version; "" for run checkpoints */
};
void ferry_checkpoints_free(struct ferry_checkpoint *v, int n);
/* Frees an array of n strings and the strings (NULL accepted). */
void ferry_store_strings_free(char **v, int n);

struct ferry_store;

/* Opens (creating and migrating) the state store. `url` is a file path or "sqlite:PATH"
 * (the parent folder is created), or "postgres://USER:PW@HOST:PORT/DB[?schema=NAME]" (the
 * schema, default "ferry", is created), or an env:NAME / file:PATH reference holding one. */
int ferry_store_open(const char *url, struct ferry_store **out, struct ferry_error *err);
/* The SQLite VFS name for fault tests (store/fault_vfs.c: failpoints store_fsync, store_write)
 * when FERRY_FAILPOINTS names one of them, else NULL (the default VFS). Thread-safe. */
const char *ferry__store_fault_vfs(void);
void ferry_store_close(struct ferry_store *st);
/* The store a command uses when not told: $FERRY_STORE, else $FERRY_STATE, else
 * ".ferry/state.db". */
const char *ferry_store_default_url(void);
/* The path, or for PostgreSQL "postgres://USER@HOST:PORT/DB?schema=NAME" (never the
 * password): what messages about the store name. */
const char *ferry_store_path(const struct ferry_store *st);
/* A random hex id of this state (made by a migration, never changes). */
int ferry_store_instance_id(struct ferry_store *st, char *out, size_t len, struct ferry_error *err);
/* synchronous=FULL (the default: a commit is on disk when it returns) or NORMAL (a commit
 * survives a process crash, and reaches the disk with the next FULL commit of any handle).
 * The bus publisher and the heartbeat use NORMAL; the tracker, which saves checkpoints, FULL.
 * A no-op on PostgreSQL, whose durability is the server's (synchronous_commit). */
int ferry_store_set_sync_full(struct ferry_store *st, bool full, struct ferry_error *err);
int ferry_store_schema_version(struct ferry_store *st);

/* Secrets (migration 11): names, times and sealed values (store/secretbox.h); the store
 * never sees a plain value. put inserts or replaces (updated_us moves, created_us stays);
 * delete of an unknown name is FERRY_ENOTFOUND. */
struct ferry_secret_info {
    char name[128];
    int64_t created_us, updated_us;
};
int ferry_store_secret_put(struct ferry_store *st, const char *name, const char *sealed,
                           struct ferry_error *err);
int ferry_store_secret_get(struct ferry_store *st, const char *name, char **sealed,
                           bool *found, struct ferry_error *err);
int ferry_store_secret_list(struct ferry_store *st, struct ferry_secret_info **out, int *n,
                            struct ferry_error *err);
int ferry_store_secret_delete(struct ferry_store *st, const char *name, struct ferry_error *err);

/* Explicit transactions (nesting is not supported). Everything between begin and commit
 * is atomic; functions below may be called inside one. */
int ferry_store_begin(struct ferry_store *st, struct ferry_error *err);
int ferry_store_commit(struct ferry_store *st, struct ferry_error *err);
void ferry_store_rollback(struct ferry_store *st);

/* ---- pipelines ---- */
/* Records the version if new (idempotent); spec_json has secrets as references only. */
int ferry_store_pipeline_put(struct ferry_store *st, const char *name, const char *version,
                             const char *spec_json, struct ferry_error *err);

/* ---- runs ---- */
int ferry_store_run_create(struct ferry_store *st, const char *pipeline, const char *version,
                           const char *request_json, int64_t *run_id, struct ferry_error *err);
int ferry_store_run_get(struct ferry_store *st, int64_t run_id, struct ferry_run_info *out,
                        struct ferry_error *err); /* FERRY_ENOTFOUND naming the run */
/* Newest runs first; pipeline NULL = all. *out freed with ferry_run_infos_free. */
int ferry_store_run_list(struct ferry_store *st, const char *pipeline, int limit,
                         struct ferry_run_info **out, int *n, struct ferry_error *err);
void ferry_run_infos_free(struct ferry_run_info *v, int n);
/* The newest run of (pipeline, version) not in a final state, if any. */
int ferry_store_run_find_unfinished(struct ferry_store *st, const char *pipeline,
                                    const char *version, struct ferry_run_info *out,
                                    bool *found, struct ferry_error *err);
/* Starts a new attempt: attempt+1, state running, pid, heartbeat now; clears ended time,
 * error and any pause/cancel signal (they belonged to the previous attempt). Returns the new
 * attempt number. */
int ferry_store_run_begin_attempt(struct ferry_store *st, int64_t run_id, int pid, int *attempt,
                                  struct ferry_error *err);
/* Fenced state change; error_message NULL keeps the stored message. A final state sets the
 * ended time. */
int ferry_store_run_set_state(struct ferry_store *st, int64_t run_id, int attempt,
                              enum ferry_run_state state, const char *error_message,
                              struct ferry_error *err);
/* The source snapshot a run reads from: a distributed run's coordinator exports it
 * (fenced by its attempt), its shard workers import it. get: *snapshot NULL when none
 * (ferry_free), *attempt the attempt that saved it; FERRY_ENOTFOUND for an unknown run. */
int ferry_store_run_snapshot_set(struct ferry_store *st, int64_t run_id, int attempt,
                                 const char *snapshot, struct ferry_error *err);
int ferry_store_run_snapshot_get(struct ferry_store *st, int64_t run_id, char **snapshot,
                                 int *attempt, struct ferry_error *err);
int ferry_store_run_heartbeat(struct ferry_store *st, int64_t run_id, int attempt,
                              struct ferry_error *err);
/* Adds to the run's counters (tracker). */
int ferry_store_run_add_counts(struct ferry_store *st, int64_t run_id, int64_t rows,
                               int64_t bytes, int64_t batches, int64_t verified,
                               int64_t diverged, struct ferry_error *err);
/* Counts of at_commit batches (batch.written with durable false) that an attempt added to
 * the counters before its sink committed them, per resource (tracker: add), with their
 * converted values (a "converted" object as resource_converted's, NULL or "" for none).
 * settle ends them: of `attempt`, or with `older` of every attempt before it; with `undo`
 * they are taken back from the run's and resources' counters and converted values first
 * (the attempt's transaction was rolled back: it failed, was canceled or died), else only
 * forgotten (it committed). One store transaction each. */
int ferry_store_uncommitted_add(struct ferry_store *st, int64_t run_id, int attempt,
                                const char *resource, int64_t rows, int64_t bytes,
                                int64_t batches, const char *converted_json,
                                struct ferry_error *err);
int ferry_store_uncommitted_settle(struct ferry_store *st, int64_t run_id, int attempt,
                                   bool older, bool undo, struct ferry_error *err);
/* Control signals for a running run (pause|cancel), read by the runner. */
int ferry_store_run_request(struct ferry_store *st, int64_t run_id, const char *signal,
                            struct ferry_error *err);
int ferry_store_run_requested(struct ferry_store *st, int64_t run_id, char *signal, size_t len,
                              struct ferry_error *err); /* "" when none */

/* ---- per-resource state ----
 * upsert creates the row with every field of rs; on an existing row it replaces mode,
 * write, state and route when they are non-empty and replaces error, but never touches the
 * counters (they move only through add_counts, so a resumed attempt keeps the totals).
 * add_counts and set_state create a missing row (state "running"); FERRY_ENOTFOUND when
 * the run does not exist. */
int ferry_store_resource_upsert(struct ferry_store *st, int64_t run_id,
                                const struct ferry_resource_state *rs, struct ferry_error *err);
int ferry_store_resource_add_counts(struct ferry_store *st, int64_t run_id, const char *resource,
                                    int64_t rows, int64_t bytes, int64_t batches,
                                    int64_t verified, int64_t diverged, struct ferry_error *err);
int ferry_store_resource_set_state(struct ferry_store *st, int64_t run_id, const char *resource,
                                   const char *state, const char *error_message,
                                   struct ferry_error *err);
/* resource.completed's "bound" (creates a missing row). */
int ferry_store_resource_set_bound(struct ferry_store *st, int64_t run_id, const char *resource,
                                   const char *bound, struct ferry_error *err);
int ferry_store_resource_list(struct ferry_store *st, int64_t run_id,
                              struct ferry_resource_state **out, int *n,
                              struct ferry_error *err); /* free with ferry_free */
/* Records a source skipped (on_error: skip), folded by the tracker: the total and a JSON
 * object {"shards":{"S":count},"samples":[{"shard","at","reason"}...]} (bounded by the
 * tracker). put replaces both (creating a missing row); get returns NULL when none
 * (*skips_json freed with ferry_free). */
int ferry_store_resource_skips_put(struct ferry_store *st, int64_t run_id, const char *resource,
                                   int64_t skipped, const char *skips_json,
                                   struct ferry_error *err);
/* on_unrepresentable: the values converted per column of a resource, a JSON object
 * {"COL": {"null": N, "clamp": M}} (the tracker sums batch.written's "converted");
 * *converted_json NULL when none (freed with ferry_free). */
int ferry_store_resource_converted_put(struct ferry_store *st, int64_t run_id,
                                       const char *resource, const char *converted_json,
                                       struct ferry_error *err);
/* Adds a "converted" object to the resource's (summed per column; creates a missing row). */
int ferry_store_resource_converted_add(struct ferry_store *st, int64_t run_id,
                                       const char *resource, const char *converted_json,
                                       struct ferry_error *err);
int ferry_store_resource_converted_get(struct ferry_store *st, int64_t run_id,
                                       const char *resource, char **converted_json,
                                       struct ferry_error *err);
int ferry_store_resource_skips_get(struct ferry_store *st, int64_t run_id, const char *resource,
                                   char **skips_json, struct ferry_error *err);

/* ---- checkpoint plans: frozen once per (run, resource) ----
 * A second put on the same (run, resource) is refused with FERRY_ECONFLICT, even with the
 * same text: a resumed attempt must plan_get the saved plan, never plan again. */
int ferry_store_plan_get(struct ferry_store *st, int64_t run_id, const char *resource,
                         char **plan_json, struct ferry_error *err); /* NULL when none */
int ferry_store_plan_put(struct ferry_store *st, int64_t run_id, const char *resource,
                         const char *plan_json, struct ferry_error *err);

/* ---- checkpoints ---- */
/* Positions must be JSON texts (FERRY_EINVAL otherwise).
 * Run-scoped: the last durable position per (run, resource, shard). Fenced by attempt.
 * ferry_store_run_checkpoints: resource NULL = every resource of the run. */
int ferry_store_run_checkpoint_save(struct ferry_store *st, int64_t run_id, int attempt,
                                    const char *resource, int shard, const char *position,
                                    struct ferry_error *err);
int ferry_store_run_checkpoints(struct ferry_store *st, int64_t run_id, const char *resource,
                                struct ferry_checkpoint **out, int *n, struct ferry_error *err);
/* Pending: accepted by an at_commit sink, not yet durable. Promoted to run checkpoints by
 * ferry_store_pending_promote() when the sink commits. */
int ferry_store_pending_checkpoint_save(struct ferry_store *st, int64_t run_id, int attempt,
                                        const char *resource, int shard, const char *position,
                                        struct ferry_error *err);
int ferry_store_pending_promote(struct ferry_store *st, int64_t run_id, int attempt,
                                struct ferry_error *err);
/* Route checkpoints: keyed by (pipeline, version, route, shard); advanced only at a
 * committed completion or pause of run_id. */
int ferry_store_route_checkpoint_save(struct ferry_store *st, const char *pipeline,
                                      const char *version, const char *route, int shard,
                                      const char *position, int64_t run_id,
                                      struct ferry_error *err);
int ferry_store_route_checkpoints(struct ferry_store *st, const char *pipeline,
                                  const char *version, const char *route,
                                  struct ferry_checkpoint **out, int *n, struct ferry_error *err);
/* All route checkpoints (pipeline NULL = every pipeline), for `ferry checkpoints`. The
 * resource field holds the route, version the pipeline version; (*pipelines)[i] names the
 * pipeline of (*out)[i] (pipelines may be NULL; free with ferry_store_strings_free). */
int ferry_store_route_checkpoint_list(struct ferry_store *st, const char *pipeline,
                                      struct ferry_checkpoint **out, char ***pipelines,
                                      int *n, struct ferry_error *err);

/* ---- event log (in-process bus) ----
 * append: payload must be a JSON object (NULL = "{}"); time_us 0 = now; sets ev->seq.
 * Sequences are assigned in commit order and never reused. read: max <= 0 means 1000;
 * run_id 0 = every run. */
int ferry_store_event_append(struct ferry_store *st, struct ferry_event *ev,
                             struct ferry_error *err); /* sets ev->seq */
/* evs[0..n) in one transaction (a savepoint inside an explicit one): all appended in order
 * with consecutive seqs, or none (every payload is checked first; on failure each seq is 0).
 * The bus's publish_n: one commit for a batch's events instead of one each. */
int ferry_store_event_append_n(struct ferry_store *st, struct ferry_event *evs, int n,
                               struct ferry_error *err);
int ferry_store_event_read(struct ferry_store *st, int64_t after, int64_t run_id, int max,
                           struct ferry_event **out, int *n, struct ferry_error *err);
int64_t ferry_store_event_last_seq(struct ferry_store *st);

/* ---- dedup marks (tracker) ---- */
int ferry_store_mark_get(struct ferry_store *st, const char *consumer, int64_t *seq,
                         struct ferry_error *err);
int ferry_store_mark_set(struct ferry_store *st, const char *consumer, int64_t seq,
                         struct ferry_error *err);

/* ---- ferry serve (migrations 3 and 4): registered pipelines, idempotent run requests,
 * reaping, schedules ---- */
struct ferry_pipeline_info {
    char name[256];
    char version[65];       /* the current version */
    int retries;            /* how many times the reaper may re-dispatch a lost run */
    int n_versions;
    int64_t created_us, updated_us;
    char *spec;             /* spec JSON of the current version (pipeline_get only) */
};
void ferry_pipeline_infos_free(struct ferry_pipeline_info *v, int n);
void ferry_pipeline_info_clear(struct ferry_pipeline_info *p); /* frees spec */
struct ferry_pipeline_version {
    char version[65];
    int64_t created_us;
};
/* Records the version (if new) and makes it the pipeline's current one, undeleting a
 * deleted pipeline. *new_version: the version was not recorded before (may be NULL). */
int ferry_store_pipeline_apply(struct ferry_store *st, const char *name, const char *version,
                               const char *spec_json, int retries, bool *new_version,
                               struct ferry_error *err);
/* Registered pipelines that are not deleted, by name. */
int ferry_store_pipeline_list(struct ferry_store *st, struct ferry_pipeline_info **out, int *n,
                              struct ferry_error *err);
/* FERRY_ENOTFOUND naming the pipeline when unknown or deleted. */
int ferry_store_pipeline_get(struct ferry_store *st, const char *name,
                             struct ferry_pipeline_info *out, struct ferry_error *err);
/* Versions of a pipeline, newest first (free with ferry_free). */
int ferry_store_pipeline_versions(struct ferry_store *st, const char *name,
                                  struct ferry_pipeline_version **out, int *n,
                                  struct ferry_error *err);
int ferry_store_pipeline_version_spec(struct ferry_store *st, const char *name,
                                      const char *version, char **spec,
                                      struct ferry_error *err); /* ferry_free */
/* Marks the pipeline deleted (its versions and runs stay). */
int ferry_store_pipeline_delete(struct ferry_store *st, const char *name, struct ferry_error *err);

/* Creates a run in state requested, unless `key` (NULL = none) was already used for this
 * pipeline: then *run_id is that run and *existed is true. Atomic. */
int ferry_store_run_create_keyed(struct ferry_store *st, const char *pipeline,
                                 const char *version, const char *request_json,
                                 const char *trigger, const char *key, int64_t *run_id,
                                 bool *existed, struct ferry_error *err);
/* Newest first; pipeline NULL = all, state < 0 = any, before_id > 0 = only ids below it. */
int ferry_store_run_list_filtered(struct ferry_store *st, const char *pipeline, int state,
                                  int64_t before_id, int limit, struct ferry_run_info **out,
                                  int *n, struct ferry_error *err);
/* The reaper: the worker of `attempt` is lost. Fences it (attempt + 1), sets the run failed
 * with `message`, pid 0 and the end time; *new_attempt is the fencing attempt. Refused with
 * FERRY_EFENCED when the attempt already moved, FERRY_ECONFLICT when the run is not running
 * or, silent_before_us > 0, when its heartbeat is newer than that (it beat meanwhile). */
int ferry_store_run_reap(struct ferry_store *st, int64_t run_id, int attempt,
                         int64_t silent_before_us, const char *message, int *new_attempt,
                         struct ferry_error *err);
/* A paused or failed run becomes requested again (resume, retry); `retry` counts one retry.
 * FERRY_ECONFLICT naming the state otherwise. */
int ferry_store_run_requeue(struct ferry_store *st, int64_t run_id, bool retry,
                            struct ferry_error *err);
int ferry_store_run_retries(struct ferry_store *st, int64_t run_id, int *retries,
                            struct ferry_error *err);
/* The dispatcher records how a run's worker process ended: its exit status, or minus the
 * signal that killed it; only while the run names that pid (or none). */
int ferry_store_run_worker_exited(struct ferry_store *st, int64_t run_id, int pid, int status,
                                  struct ferry_error *err);
int ferry_store_run_worker_status(struct ferry_store *st, int64_t run_id, bool *known, int *status,
                                  struct ferry_error *err);
/* A stopping control plane marks the runs whose workers it asks to pause; at its next start
 * requeue_marked makes the marked runs that did pause `requested` again (their ids in *ids,
 * ferry_free) and clears every mark. */
int ferry_store_run_mark_resume_on_start(struct ferry_store *st, int64_t run_id,
                                         struct ferry_error *err);
int ferry_store_run_requeue_marked(struct ferry_store *st, int64_t **ids, int *n,
                                   struct ferry_error *err);
/* Totals for /metrics: runs per state, and the sums of every run's counters. */
struct ferry_store_totals {
    int64_t runs[FERRY_RUN_STATE_MAX];
    int64_t rows, bytes, batches, verified, diverged;
};
int ferry_store_totals(struct ferry_store *st, struct ferry_store_totals *out,
                       struct ferry_error *err);

struct ferry_schedule {
    int64_t id;
    char pipeline[256];
    char cron[128];         /* five fields: minute hour day-of-month month day-of-week */
    char timezone[64];      /* IANA name, "UTC" by default */
    char overlap[16];       /* skip | queue | allow */
    bool enabled;
    int64_t next_us, last_us, last_run, created_us;
};
/* id 0 creates (sets s->id); otherwise replaces. */
int ferry_store_schedule_put(struct ferry_store *st, struct ferry_schedule *s,
                             struct ferry_error *err);
/* pipeline NULL = every pipeline; free with ferry_free. */
int ferry_store_schedule_list(struct ferry_store *st, const char *pipeline,
                              struct ferry_schedule **out, int *n, struct ferry_error *err);
int ferry_store_schedule_get(struct ferry_store *st, int64_t id, struct ferry_schedule *out,
                             struct ferry_error *err);
int ferry_store_schedule_delete(struct ferry_store *st, int64_t id, struct ferry_error *err);
/* Records a firing: next time, last time and the run it started (0 = skipped). */
int ferry_store_schedule_fired(struct ferry_store *st, int64_t id, int64_t next_us,
                               int64_t last_us, int64_t last_run, struct ferry_error *err);

/* ---- pull workers, shard leases, leader leases (migration 6) ----
 * A `ferry worker --pull` process, on any host sharing the store, claims work itself
 * instead of being started by the dispatcher. Owners are free-form names
 * ("host:pid"); lease deadlines are computed with the store's clock (the database's, for
 * PostgreSQL) so hosts with skewed clocks still agree. Tokens only grow: a holder whose
 * token moved lost its lease and is refused with FERRY_EFENCED. */

/* Claims the oldest run that is `requested` and marked for pull dispatch
 * (run_set_dispatch): atomically requested -> running with a new attempt (as
 * run_begin_attempt), pid, heartbeat now and owner. Two claimers never get the same run.
 * *found is false when there is none. */
int ferry_store_run_claim(struct ferry_store *st, const char *owner, int pid, int64_t *run_id,
                          int *attempt, bool *found, struct ferry_error *err);
/* How a requested run is dispatched: "local" (default: the control plane starts a child),
 * "pull" (a `ferry worker --pull` claims it) or "kubernetes". */
int ferry_store_run_set_dispatch(struct ferry_store *st, int64_t run_id, const char *dispatch,
                                 struct ferry_error *err);
int ferry_store_run_get_dispatch(struct ferry_store *st, int64_t run_id, char *dispatch,
                                 size_t len, struct ferry_error *err);

struct ferry_shard_task {
    int64_t run_id;
    char resource[256];
    int shard;
    char state[16];         /* open | leased | done */
    char owner[128];        /* "" when never leased */
    int64_t token;          /* grows at every lease */
    int64_t lease_until_us; /* store clock */
};
/* Creates the tasks (shards 0..n_shards-1, state open) of a resource of a run, once:
 * existing tasks are kept as they are (a resumed coordinator calls it again). */
int ferry_store_shard_tasks_put(struct ferry_store *st, int64_t run_id, const char *resource,
                                int n_shards, struct ferry_error *err);
/* Leases one task of a running run (run_id 0 = any run): an open one first, else a leased
 * one whose lease expired. Sets owner, state leased, lease_until = now + lease_ms and
 * token + 1 (copied into *out). *found false when none. */
int ferry_store_shard_claim(struct ferry_store *st, int64_t run_id, const char *owner,
                            int lease_ms, struct ferry_shard_task *out, bool *found,
                            struct ferry_error *err);
/* Extends the lease; FERRY_EFENCED when the token moved (someone else holds it now). */
int ferry_store_shard_renew(struct ferry_store *st, int64_t run_id, const char *resource,
                            int shard, int64_t token, int lease_ms, struct ferry_error *err);
/* Marks the task done; FERRY_EFENCED when the token moved. */
int ferry_store_shard_done(struct ferry_store *st, int64_t run_id, const char *resource,
                           int shard, int64_t token, struct ferry_error *err);
/* Every task of the run (resource NULL = all resources), by resource then shard; free
 * with ferry_free. */
int ferry_store_shard_list(struct ferry_store *st, int64_t run_id, const char *resource,
                           struct ferry_shard_task **out, int *n, struct ferry_error *err);
/* Fenced run-scoped checkpoint of a shard task: saved only while `token` is the task's
 * current token (FERRY_EFENCED otherwise). Same row as ferry_store_run_checkpoint_save. */
int ferry_store_shard_checkpoint_save(struct ferry_store *st, int64_t run_id, const char *resource,
                                      int shard, int64_t token, const char *position,
                                      struct ferry_error *err);

/* Named leader lease (e.g. "control"): acquired when free, expired, or already held by
 * `owner` (then renewed). *held tells whether owner holds it after the call, *token the
 * lease's token (grows at every change of holder; a new leader fences the old one). */
int ferry_store_lease_acquire(struct ferry_store *st, const char *name, const char *owner,
                              int ttl_ms, bool *held, int64_t *token, struct ferry_error *err);
/* Gives the lease up if owner holds it (a clean stop: the next leader need not wait). */
int ferry_store_lease_release(struct ferry_store *st, const char *name, const char *owner,
                              struct ferry_error *err);
/* The current holder ("" when none or expired). */
int ferry_store_lease_holder(struct ferry_store *st, const char *name, char *owner, size_t len,
                             int64_t *token, struct ferry_error *err);

/* ---- notifications (notify/notify.c, migration 9) ----
 * One row per (run, event, webhook target): pending until delivered, or dead after the
 * last attempt. secret_ref is the reference (env:NAME, file:PATH), never the secret. */
struct ferry_notification {
    int64_t id, run_id, event_seq;
    char event[48];
    char pipeline[256];
    char target[512];
    char secret_ref[256];
    char format[16];   /* json | slack */
    char *body;        /* owned */
    char state[16];    /* pending | delivered | dead */
    int attempts;
    int64_t next_us, created_us, delivered_us;
    char last_error[512];
};
void ferry_notifications_free(struct ferry_notification *v, int n);
/* Records a pending one (next_us: when first due); a duplicate (run, event_seq, target) is
 * ignored (*added false). */
int ferry_store_notification_add(struct ferry_store *st, const struct ferry_notification *n,
                                 bool *added, struct ferry_error *err);
/* state NULL: any; due_before_us 0: any time. Oldest first, at most limit. */
int ferry_store_notification_list(struct ferry_store *st, const char *state, int64_t due_before_us,
                                  int limit, struct ferry_notification **out, int *n,
                                  struct ferry_error *err);
/* Moves next_us from seen_next_us to until_us when still pending: one deliverer at a time. */
int ferry_store_notification_claim(struct ferry_store *st, int64_t id, int64_t seen_next_us,
                                   int64_t until_us, bool *claimed, struct ferry_error *err);
int ferry_store_notification_result(struct ferry_store *st, int64_t id, const char *state,
                                    int attempts, int64_t next_us, const char *last_error,
                                    struct ferry_error *err);

#endif
