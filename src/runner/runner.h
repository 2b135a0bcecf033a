/* runner/runner.h - one run of a pipeline, embedded: plan, prepare, extract, write,
 * commit or abort, with the tracker folding events on its own thread (DESIGN §1).
 *
 * The runner owns the run's connectors and its sink session. It never moves a checkpoint
 * itself: it publishes events; the tracker folds them into the state store. */
#ifndef FERRY_RUNNER_H
#define FERRY_RUNNER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ferry/connector.h"
#include "ferry/error.h"
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
};

struct ferry_run_result {
    int64_t run_id;
    int attempt;
    bool resumed;
    const char *state;       /* completed | paused | failed | canceled */
    int64_t rows, bytes, batches;
    double seconds;
    int64_t peak_rss;
    bool cdc_more;           /* a cdc stream stopped before its frozen end (a schema change):
                              * another run continues it */
};

int ferry_runner_run(const struct ferry_run_options *o, struct ferry_run_result *res,
                     struct ferry_error *err);

/* Async-signal-safe: first call pauses cleanly, a second one cancels. */
void ferry_runner_signal(void);

/* policy.c: refuses, before any data moves, what cannot be correct. */
int ferry_policy_check(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                       const struct ferry_schema *schema, const struct ferry_sink_caps *caps,
                       struct ferry_error *err);

#endif
