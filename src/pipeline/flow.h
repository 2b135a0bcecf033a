/* pipeline/flow.h - moves one resource from a source to a sink session.
 *
 *   reader threads:   (1..n_readers) each takes the next unread shard from a shared
 *                     counter and extracts it, with its own source instance and row writer,
 *                     into the one ready queue
 *   transform thread: (only when the resource has transforms) ready -> write queue
 *   caller's thread:  the writer: digest, sink apply, receipt check, events
 *
 * The caller's thread owns the sink; reader i owns readers[i] while the flow runs. A shard
 * is read by exactly one reader, in order, so batches of one shard reach the sink in order;
 * batches of different shards interleave. Batch seq is assigned flow-wide as batches enter
 * the ready queue: unique and increasing in the order the sink sees them. Memory is bounded:
 * at most queue batches wait in each queue, one is being built per reader and one written,
 * each closed at about batch.bytes.
 *
 * Stop: *stop set to FERRY_EPAUSED makes every reader return after its current row; every
 * batch already accepted is still written (drain) and ferry_flow_run returns FERRY_EPAUSED.
 * FERRY_ECANCELED stops as fast as possible and discards queued batches. On a write error,
 * or a reader's error when there are several readers, the flow stops the readers through
 * *stop and their cancel slot, and restores *stop to 0 before returning; the first error
 * wins. The ready queue is closed when the last reader finishes. */
#ifndef FERRY_PIPELINE_FLOW_H
#define FERRY_PIPELINE_FLOW_H

#include <pthread.h>
#include <stdatomic.h>
#include "ferry/connector.h"
#include "ferry/pipeline.h"
#include "pipeline/convert.h"
#include "pipeline/transform.h"

struct ferry_bus;

struct ferry_flow {
    /* source side */
    const struct ferry_source_vtable *src_vt;
    void *src_ctx;
    /* Up to n_readers reader threads; reader i extracts with readers[i] (readers[0] is
     * normally src_ctx). NULL or n_readers <= 1: one reader on src_ctx. The flow runs
     * min(n_readers, shards left to read) of them. */
    void *const *readers;
    int n_readers;
    const struct ferry_resource_spec *spec;
    struct ferry_schema *schema;   /* as the source writes rows */
    const char *plan_json;
    int n_shards;
    char **resume;                 /* per shard: position to resume after, or NULL */
    struct ferry_transform_chain *chain; /* may be NULL */
    struct ferry_convert *convert; /* on_unrepresentable (convert.h), may be NULL */
    /* sink side */
    const struct ferry_sink_vtable *sink_vt;
    void *sink_ctx;
    struct ferry_sink_caps caps;
    const struct ferry_target *target;
    /* Flows that share one sink instance (streams run side by side): apply is called under
     * this lock. NULL: the flow has the instance to itself. */
    pthread_mutex_t *sink_lock;
    /* cdc streams of one source log committing together (pipeline/commit_group.h): applies
     * go through the group (under its lock, which is sink_lock), a batch with group_cut waits
     * for the group's commit, and the batch events wait for the commit that made the batch
     * durable (a broken group drops them). NULL: none. */
    struct ferry_commit_member *group;
    /* run */
    struct ferry_bus *bus;
    int64_t run_id;
    int attempt;
    struct ferry_batch_opts opts;
    atomic_int *stop;              /* 0, FERRY_EPAUSED or FERRY_ECANCELED */
    atomic_int tick;               /* set by the runner's timer every flush_after */
    /* Batch seqs continue after this one (a resource read in several flows, e.g. a cdc
     * copy then its stream, keeps unique seqs); updated to the last seq handed out. */
    uint64_t seq_base;
    /* progress, readable from other threads */
    atomic_llong rows_read, rows_written, bytes_written, batches_written;
    atomic_int queue_depth;
    /* Where the flow waits (µs so far): the writer on an empty queue (wait_source: the
     * source, or the transforms, were slower) and the readers on a full one (wait_sink: the
     * destination was slower; readers push one at a time, so this is wall time). */
    atomic_llong wait_source_us, wait_sink_us;
    int64_t rows_expected; /* the plan's estimate of the rows to read, -1 unknown (progress) */
};

int ferry_flow_run(struct ferry_flow *f, struct ferry_error *err);

#endif
