/* pipeline/flow.h - moves one resource from a source to a sink session.
 *
 *   source thread:    extract shard by shard into a row writer -> ready queue
 *   transform thread: (only when the resource has transforms) ready -> write queue
 *   caller's thread:  the writer: digest, sink apply, receipt check, events
 *
 * The caller's thread owns the sink; the source thread owns the source while the flow
 * runs. Memory is bounded: at most queue batches wait in each queue, one is being built
 * and one written, each closed at about batch.bytes.
 *
 * Stop: *stop set to FERRY_EPAUSED makes the source return after its current row; every
 * batch already accepted is still written (drain) and ferry_flow_run returns FERRY_EPAUSED.
 * FERRY_ECANCELED stops as fast as possible and discards queued batches. On a write error
 * the flow stops its source through *stop and restores *stop to 0 before returning. */
#ifndef FERRY_PIPELINE_FLOW_H
#define FERRY_PIPELINE_FLOW_H

#include <stdatomic.h>
#include "ferry/connector.h"
#include "ferry/pipeline.h"
#include "pipeline/transform.h"

struct ferry_bus;

struct ferry_flow {
    /* source side */
    const struct ferry_source_vtable *src_vt;
    void *src_ctx;
    const struct ferry_resource_spec *spec;
    struct ferry_schema *schema;   /* as the source writes rows */
    const char *plan_json;
    int n_shards;
    char **resume;                 /* per shard: position to resume after, or NULL */
    struct ferry_transform_chain *chain; /* may be NULL */
    /* sink side */
    const struct ferry_sink_vtable *sink_vt;
    void *sink_ctx;
    struct ferry_sink_caps caps;
    const struct ferry_target *target;
    /* run */
    struct ferry_bus *bus;
    int64_t run_id;
    int attempt;
    struct ferry_batch_opts opts;
    atomic_int *stop;              /* 0, FERRY_EPAUSED or FERRY_ECANCELED */
    atomic_int tick;               /* set by the runner's timer every flush_after */
    /* progress, readable from other threads */
    atomic_llong rows_read, rows_written, bytes_written, batches_written;
    atomic_int queue_depth;
};

int ferry_flow_run(struct ferry_flow *f, struct ferry_error *err);

#endif
