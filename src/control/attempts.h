/* control/attempts.h - a run's attempt history, read from its events (run.started,
 * run.retry_scheduled, worker.lost and the run's ends), for `ferry show` and the API. */
#ifndef FERRY_CONTROL_ATTEMPTS_H
#define FERRY_CONTROL_ATTEMPTS_H

#include <jansson.h>
#include <stdint.h>
#include "bus/bus.h"
#include "store/store.h"

/* A new JSON array, oldest attempt first: [{attempt, started_us, ended_us, state, error,
 * retry_scheduled, retry_at_us, reason}] (absent values null). Events come from `bus` when
 * not NULL (an external bus), else from the store's event log. NULL on error. */
json_t *ferry_control_attempts(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id,
                               struct ferry_error *err);

#endif
