/* runner/runner.h - one run of a pipeline, embedded: plan, prepare, extract, write,
 * commit or abort, with the tracker folding events on its own thread (DESIGN §1).
 * The pieces are described in docs/internals/runner.md; run.h is their shared state.
 *
 * The runner owns the run's connectors and its sink session. Checkpoints move mostly
 * through its events, which the tracker folds into the state store; the runner writes a
 * run checkpoint itself only to record what a transactional destination committed beyond
 * the store (plan.c, by the rules of checkpoint/promote.h); a distributed run's exported
 * snapshot id is a field of the run
 * (readers.c, ferry_store_run_snapshot_set). */
#ifndef FERRY_RUNNER_H
#define FERRY_RUNNER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ferry/connector.h"
#include "ferry/error.h"
#include "ferry/event.h"
#include "ferry/pipeline.h"

struct ferry_run_options {
    const char *pipeline_path;
    const char *state_path;
    bool fresh;              /* never resume an unfinished run */
    int64_t resume_run_id;   /* ferry resume RUN: continue this run (0 = decide) */
    bool progress_tty;       /* live progress line on stderr */
    bool quiet;              /* no progress at all */
    bool plan_only;          /* ferry check: plan, print, move nothing */
    FILE *out;               /* human output (stdout) */
    int64_t cdc_epoch_rows;  /* cdc streams end the run after this many changes (0: no) */
    bool cdc_follow;         /* ferry run --follow: runs follow each other in this process */
    const char *bus_url;     /* event bus (ferry_bus_open): NULL or "" = in-process */
    /* Pull workers and distributed runs (runner/shard.c, docs/internals/server.md). */
    int claimed_attempt;     /* > 0: run_claim began this attempt of resume_run_id already */
    const char *owner;       /* shard lease owner ("host:pid"); NULL = this host and pid */
    int lease_ms;            /* shard lease length (0 = 15000) */
    /* Shard mode: work only this leased task of the running run resume_run_id, under the
     * run's current attempt (no new attempt, no run events). */
    const char *shard_resource;
    int shard;
    int64_t shard_token;
    /* Embedding (src/embed/): the pipeline as YAML text instead of pipeline_path (named
     * pipeline_name in messages), and an observer of every event the run publishes (on the
     * publishing thread; bus/observe.c). */
    const char *pipeline_text;
    size_t pipeline_len;
    const char *pipeline_name;
    void (*on_event)(void *ctx, const struct ferry_event *ev);
    void *event_ctx;
    /* The run's stop flag (0, FERRY_EPAUSED or FERRY_ECANCELED), owned by the caller, who
     * may set it from any thread to stop this run and no other (a cancel replaces a pause,
     * never the other way round); the runner sets it too (store requests, signals) and
     * never clears it. NULL: the run's own, starting at 0. */
    atomic_int *stop;
    /* What the program that embeds ferry hands the sink's connector (the `callback` sink:
     * a struct ferry_callback_binding, connectors/callback/callback.h); NULL otherwise. */
    void *sink_host;
};

struct ferry_run_result {
    int64_t run_id;
    int attempt;
    bool resumed;
    const char *state;       /* completed | partial | paused | failed | canceled */
    bool partial;            /* on_resource_error: continue and resources failed */
    char partial_message[900];
    int64_t rows, bytes, batches;
    int64_t converted;       /* values on_unrepresentable converted (per column: the events) */
    double seconds;
    int64_t peak_rss;
    bool cdc_more;           /* a cdc stream stopped before its frozen end (a schema change):
                              * another run continues it */
};

int ferry_runner_run(const struct ferry_run_options *o, struct ferry_run_result *res,
                     struct ferry_error *err);

/* shard.c: the pure parts of distributed runs (tested in tests/unit/test_pull.c). */
/* Whether a resource may be spread across workers; FERRY_EPOLICY naming it otherwise. */
int ferry__shard_distributable(const char *resource, const char *mode, const char *write,
                               bool per_apply, bool replace_commits_once,
                               struct ferry_error *err);
/* batch.written payload `{...}` -> `{"token":N,...}` (ferry_free); NULL on OOM or when the
 * payload is not an object. */
char *ferry__shard_tag_payload(const char *payload, int64_t token);
/* Reads the "token" of a payload that carries one (0 = none). */
int64_t ferry__shard_payload_token(const char *payload);
/* Summary of a run's tasks: how many are done, and whether every one is. */
struct ferry_shard_task;
void ferry__shard_tasks_summary(const struct ferry_shard_task *v, int n, int *done, int *leased,
                                bool *all_done);
/* "host:pid" (or `name` when given), for lease owners. */
void ferry__lease_owner(const char *name, char *out, size_t len);
/* A bus that forwards to `inner` (not owned: close frees only the wrapper), adds the
 * current task token to batch.written payloads (so the tracker saves their checkpoints
 * fenced by it) and remembers the highest sequence it published. */
struct ferry_bus;
int ferry__shard_bus_open(struct ferry_bus *inner, struct ferry_bus **out, struct ferry_error *err);
void ferry__shard_bus_set_token(struct ferry_bus *b, int64_t token);
int64_t ferry__shard_bus_last_seq(struct ferry_bus *b);

/* budget.c: the batch size and queue depth of each of `flows` flows with `readers` readers
 * under one budget of `memory` bytes (in: the file's batch settings, their upper bounds);
 * FERRY_ECONFIG naming `memory` when even one batch per flow does not fit. */
int ferry__budget_compute(int64_t memory, int flows, int readers, const struct ferry_batch_opts *in,
                          struct ferry_batch_opts *out, struct ferry_error *err);
/* The most bytes of batches `flows` such flows may hold at once (the formula's bound). */
int64_t ferry__budget_in_flight(const struct ferry_batch_opts *b, int flows, int readers);

/* Async-signal-safe, for the CLI's SIGINT/SIGTERM: every run of this process going on now
 * takes it, the first call since a run started pausing it cleanly, the next one canceling
 * it; a run that starts later does not (run.c). One run alone: ferry_run_options.stop. */
void ferry_runner_signal(void);

/* policy.c: refuses, before any data moves, what cannot be correct. */
int ferry_policy_check(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                       const struct ferry_schema *schema, const struct ferry_sink_caps *caps,
                       struct ferry_error *err);

#endif
