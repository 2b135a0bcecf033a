/* runner/retry.h - runs a pipeline again after a failed attempt whose error is transient
 * (docs/operations.md, retries), around ferry_runner_run: the same logical run resumes
 * from its durable checkpoints, after a jittered exponential backoff, announced by a
 * `run.retry_scheduled` event carrying the reason. Used by `ferry run --retries N` and by
 * the workers `ferry serve` starts (cli/main.c, cli/cmd_worker.c). */
#ifndef FERRY_RUNNER_RETRY_H
#define FERRY_RUNNER_RETRY_H

#include <signal.h>
#include <stdint.h>
#include "ferry/pipeline.h"
#include "runner/runner.h"

struct ferry_retry_options {
    int default_max;  /* when the pipeline has no retries: key (serve: 3, ferry run: 0) */
    int override_max; /* >= 0: --retries N, whatever the pipeline says; -1: none */
    volatile sig_atomic_t *stop; /* set by a signal: no further attempt (may be NULL) */
    /* Called once an attempt failed and before the next (for the caller's own records,
     * e.g. a worker marking a run that never started as failed). May be NULL. */
    void (*on_failed_attempt)(void *ctx, const struct ferry_run_result *res,
                              const struct ferry_error *err);
    void *ctx;
};

/* ferry_runner_run, then again while the attempt failed on a transient error and retries
 * remain. o->resume_run_id is set to the run being retried (o is modified). Returns the
 * last attempt's code, *res and *err. */
int ferry_runner_run_retrying(struct ferry_run_options *o, const struct ferry_retry_options *ro,
                              struct ferry_run_result *res, struct ferry_error *err);

/* Delay before retry number `retry` (1-based): backoff * 2^(retry-1) capped at max_backoff,
 * then jittered into [d/2, d] with `rnd`. */
int64_t ferry_retry_delay_ms(const struct ferry_retry_policy *p, int retry, uint64_t rnd);

#endif
