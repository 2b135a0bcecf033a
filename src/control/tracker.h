/* control/tracker.h - folds events into run state (DESIGN §4).
 *
 * The tracker reads the bus from its mark (the last folded sequence, consumer name
 * "tracker"), folds a group of events and moves the mark in ONE store transaction, so a
 * redelivered event changes nothing. Folding many events per transaction is what makes
 * "save safe progress every N batches or T seconds" cheap.
 *
 * Fold rules:
 *   run.started            run state running (if not final)
 *   run.heartbeat          heartbeat time
 *   resource.started       resource row: mode, write, state running
 *   batch.written          run + resource counters (rows, bytes, batches); when the
 *                          payload says durable:true the position becomes the run-scoped
 *                          checkpoint of (run, resource, shard), else a pending checkpoint.
 *                          A payload with "token" (a shard task of a distributed run) is
 *                          saved with ferry_store_shard_checkpoint_save, fenced by that
 *                          token: refused -> the event is ignored whole (no counts)
 *   batch.integrity_verified  verified += 1; batch.chunk_divergence  diverged += 1
 *   sink.committed         pending checkpoints of (run, attempt) become run checkpoints
 *   resource.completed/failed  resource state (failed: message)
 *                          "converted" (on_unrepresentable) adds to the resource's
 *                          per-column counts (ferry_store_resource_converted_*)
 *   resource.rows_skipped  the shard's skip count and samples replace its earlier ones;
 *                          the resource's total is the sum over shards, samples are kept
 *                          for the lowest shards, at most 20 (ferry_store_resource_skips_*)
 *   run.completed          run completed, ended time; for every resource whose mode is
 *                          incremental or cdc, its run checkpoints become the route
 *                          checkpoints of (pipeline, version, route) with this run id
 *   run.paused             when payload committed:true: route checkpoints as for
 *                          completed; run state paused
 *   run.failed/canceled    run state and error message; route checkpoints untouched
 * Events whose attempt is older than the run's current attempt never move checkpoints
 * (fencing); they are ignored whole, counters and states included, because a fenced
 * attempt's batches are replayed by the current one and would otherwise count twice.
 * Events of a run the store does not know, or with a payload that is not a JSON object, are
 * skipped with a warning (never retried forever). Once a run is final, later state events
 * of it are ignored. The route of a resource comes from resource.started's payload "route"
 * (the resource name when absent). */
#ifndef FERRY_TRACKER_H
#define FERRY_TRACKER_H

#include <stdint.h>
#include "ferry/error.h"
#include "ferry/event.h"

struct ferry_bus;
struct ferry_tracker;

/* Opens its own store handle on state_path. */
int ferry_tracker_open(const char *state_path, struct ferry_bus *bus, struct ferry_tracker **out,
                       struct ferry_error *err);
/* Folds everything the log holds now (used at start-up, before planning, and by tests). */
int ferry_tracker_fold_available(struct ferry_tracker *tr, struct ferry_error *err);
/* Starts a thread that keeps folding (wakes on publish, or every 200 ms). */
int ferry_tracker_start(struct ferry_tracker *tr, struct ferry_error *err);
/* Waits until every event with seq <= `seq` is folded; FERRY_ETIMEOUT after timeout_ms. */
int ferry_tracker_wait(struct ferry_tracker *tr, int64_t seq, int timeout_ms,
                       struct ferry_error *err);
/* Stops the thread after a final fold; returns the first fold error it met, if any. */
int ferry_tracker_stop(struct ferry_tracker *tr, struct ferry_error *err);
void ferry_tracker_close(struct ferry_tracker *tr);
int64_t ferry_tracker_folded_seq(struct ferry_tracker *tr);

/* Internal, for tests: folds evs[0..n) in delivery order (a redelivery may repeat earlier
 * events), in groups of up to 256 per store transaction with the mark; events with
 * seq <= the mark are skipped. */
int ferry__tracker_fold_events(struct ferry_tracker *tr, const struct ferry_event *evs, int n,
                               struct ferry_error *err);

#endif
