/* ferry/event.h - small typed facts about runs, with a JSON payload, in an envelope.
 *
 * Catalog (payload keys in brackets):
 *   run.requested          [pipeline, version]
 *   run.started            [pid]
 *   run.heartbeat          [rss_bytes, cpu_ms, queue_depth]
 *   run.pause_requested, run.cancel_requested
 *   run.paused             [committed: bool]
 *   run.completed          [rows, bytes, batches]
 *   run.failed             [code, message]
 *   run.canceled
 *   resource.started       [mode, write, shards, route; rows_estimate, row_groups_skipped
 *                          (Parquet cursor reads: row groups the statistics ruled out)
 *                          when the plan says]
 *   resource.completed     [rows]
 *   resource.failed        [code, message]
 *   resource.rows_skipped  [shard, count, samples: [{at, reason}]]  (on_error: skip; the
 *                          shard's count from its start: a later one replaces an earlier one)
 *   batch.buffered         [seq, rows, bytes]
 *   batch.written          [seq, rows, bytes, shard, position, durable, uri, crc]
 *   batch.integrity_verified          [seq, crc]
 *   batch.encoded_integrity_verified  [seq, encoded_crc]
 *   batch.chunk_divergence            [seq, expected, got]
 *   sink.committed         []  (what at_commit sinks held is now durable)
 *   cursor.watermark_advanced [shard, position]
 *   cursor.checkpoint_saved   [shard, position]
 *   worker.lost            [lease_ms, lost_attempt, reason]  (under the fencing attempt)
 *   verify.chunk_mismatch  [depth, source_rows, dest_rows, after, through]  (ferry verify,
 *                          verify: after_run; at most 200 per resource)
 *   verify.completed       [source_rows, dest_rows, missing, extra, different,
 *                          changed_during_check, chunks, chunks_mismatched, source_bytes,
 *                          dest_bytes, repaired, equal] or [error]
 * Delivery is at-least-once; consumers deduplicate by `seq`. */
#ifndef FERRY_EVENT_H
#define FERRY_EVENT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_EV_RUN_REQUESTED "run.requested"
#define FERRY_EV_RUN_STARTED "run.started"
#define FERRY_EV_RUN_HEARTBEAT "run.heartbeat"
#define FERRY_EV_RUN_PAUSE_REQUESTED "run.pause_requested"
#define FERRY_EV_RUN_CANCEL_REQUESTED "run.cancel_requested"
#define FERRY_EV_RUN_PAUSED "run.paused"
#define FERRY_EV_RUN_COMPLETED "run.completed"
#define FERRY_EV_RUN_FAILED "run.failed"
#define FERRY_EV_SCHEMA_CHANGED "schema.changed" /* a source column changed while followed
                                                 * (one per change: table, column, change,
                                                 * old_type, new_type, policy, action), or a
                                                 * cdc stream stopped at it ({reason}) */
#define FERRY_EV_RUN_TRACE_CONTEXT "run.trace_context" /* the W3C traceparent of the API
                                                         * request that created the run */
#define FERRY_EV_RUN_RETRY_SCHEDULED "run.retry_scheduled" /* a transient failure: the run
                                                         * goes on after a backoff */
#define FERRY_EV_RUN_CANCELED "run.canceled"
#define FERRY_EV_RESOURCE_STARTED "resource.started"
#define FERRY_EV_RESOURCE_COMPLETED "resource.completed"
#define FERRY_EV_RESOURCE_FAILED "resource.failed"
#define FERRY_EV_RESOURCE_ROWS_SKIPPED "resource.rows_skipped"
#define FERRY_EV_BATCH_BUFFERED "batch.buffered"
#define FERRY_EV_BATCH_WRITTEN "batch.written"
#define FERRY_EV_BATCH_VERIFIED "batch.integrity_verified"
#define FERRY_EV_BATCH_ENCODED_VERIFIED "batch.encoded_integrity_verified"
#define FERRY_EV_BATCH_DIVERGENCE "batch.chunk_divergence"
#define FERRY_EV_SINK_COMMITTED "sink.committed"
#define FERRY_EV_WATERMARK_ADVANCED "cursor.watermark_advanced"
#define FERRY_EV_CHECKPOINT_SAVED "cursor.checkpoint_saved"
#define FERRY_EV_WORKER_LOST "worker.lost"
#define FERRY_EV_VERIFY_CHUNK_MISMATCH "verify.chunk_mismatch"
#define FERRY_EV_VERIFY_COMPLETED "verify.completed"

struct ferry_event {
    int64_t seq;        /* assigned by the bus on publish */
    int64_t time_us;    /* wall clock, microseconds since 1970 */
    int64_t run_id;
    int attempt;
    char resource[256]; /* "" when not about one resource */
    char type[48];
    char *payload;      /* JSON object text, owned by the event */
};

void ferry_event_clear(struct ferry_event *ev); /* frees payload */
void ferry_events_free(struct ferry_event *evs, int n);

#ifdef __cplusplus
}
#endif
#endif
