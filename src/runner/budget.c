/* runner/budget.c - one memory budget for every batch in flight in a run (`memory:`),
 * shared by the `concurrency` flows that run at once (docs/pipeline-file.md, "memory").
 *
 * A flow with R readers holds at most R batches being built, Q in its ready queue, Q in its
 * write queue (when it has transforms; counted always) and one being written: R + 2Q + 1
 * batches of about batch.bytes each (pipeline/flow.h). With F flows at once, each gets
 * memory / F; batch.bytes shrinks until that share holds R + 3 batches (Q = 1), then Q is
 * the largest depth that fits, never above batch.queue. A share that cannot hold R + 3
 * batches of 64 KiB (the smallest batch.bytes) is a configuration error naming `memory`.
 * Pure: no I/O, tested in tests/unit/test_budget.c. Called by schedule.c. */
#include <inttypes.h>
#include "ferry/core.h"
#include "runner/runner.h"

#define MIN_BATCH_BYTES ((int64_t)64 << 10)

int ferry__budget_compute(int64_t memory, int flows, int readers, const struct ferry_batch_opts *in,
                          struct ferry_batch_opts *out, struct ferry_error *err)
{
    *out = *in;
    if (flows < 1) flows = 1;
    if (readers < 1) readers = 1;
    int64_t share = memory / flows;
    int64_t least = readers + 3; /* batches in flight per flow at queue depth 1 */
    int64_t bytes = in->bytes < share / least ? in->bytes : share / least;
    if (bytes < MIN_BATCH_BYTES)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "memory: %" PRId64 " bytes cannot hold one batch per flow: %d "
                               "table(s) at once (concurrency) with %d reader(s) each need at "
                               "least %" PRId64 " batches of 64KiB per table (%" PRId64
                               " bytes in all); raise memory, or lower concurrency or "
                               "source.parallelism",
                               memory, flows, readers, least, least * MIN_BATCH_BYTES * flows);
    int64_t q = (share / bytes - readers - 1) / 2;
    if (q > in->queue) q = in->queue;
    if (q < 1) q = 1;
    out->bytes = bytes;
    out->queue = q;
    return FERRY_OK;
}

int64_t ferry__budget_in_flight(const struct ferry_batch_opts *b, int flows, int readers)
{
    return (int64_t)flows * (readers + 2 * b->queue + 1) * b->bytes;
}
