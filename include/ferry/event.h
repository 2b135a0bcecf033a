/* ferry/event.h - small typed facts about runs, with a JSON payload, in an envelope.
 *
 * Catalog (payload keys in brackets):
 *   run.requested          [pipeline, version]
 *   run.started            [pid]
 *   run.heartbeat          [rss_bytes, cpu_ms]
 *   run.pause_requested, run.cancel_requested
 *   run.paused             [committed: bool]
 *   run.completed          [rows, bytes, batches]
 *   run.failed             [code, message]
 *   run.canceled
 *   resource.started       [mode, write, shards, route]
 *   resource.completed     [rows]
 *   resource.failed        [code, message]
 *   batch.buffered         [seq, rows, bytes]
 *   batch.written          [seq, rows, bytes, shard, position, durable, uri, crc]
 *   batch.integrity_verified          [seq, crc]
 *   batch.encoded_integrity_verified  [seq, encoded_crc]
 *   batch.chunk_divergence            [seq, expected, got]
 *   sink.committed         []  (what at_commit sinks held is now durable)
 *   cursor.watermark_advanced [shard, position]
 *   cursor.checkpoint_saved   [shard, position]
 *   worker.lost            [lease_ms]
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
#define FERRY_EV_RUN_CANCELED "run.canceled"
#define FERRY_EV_RESOURCE_STARTED "resource.started"
#define FERRY_EV_RESOURCE_COMPLETED "resource.completed"
#define FERRY_EV_RESOURCE_FAILED "resource.failed"
#define FERRY_EV_BATCH_BUFFERED "batch.buffered"
#define FERRY_EV_BATCH_WRITTEN "batch.written"
#define FERRY_EV_BATCH_VERIFIED "batch.integrity_verified"
#define FERRY_EV_BATCH_ENCODED_VERIFIED "batch.encoded_integrity_verified"
#define FERRY_EV_BATCH_DIVERGENCE "batch.chunk_divergence"
#define FERRY_EV_SINK_COMMITTED "sink.committed"
#define FERRY_EV_WATERMARK_ADVANCED "cursor.watermark_advanced"
#define FERRY_EV_CHECKPOINT_SAVED "cursor.checkpoint_saved"
#define FERRY_EV_WORKER_LOST "worker.lost"

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
