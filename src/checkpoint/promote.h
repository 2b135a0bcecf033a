/* checkpoint/promote.h - the rules that move a checkpoint, apart from the code that
 * stores it (docs/internals/checkpoint.md).
 *
 * A batch's position is saved run-scoped when the sink made it durable with the batch,
 * else pending until the sink's next commit (sink.committed promotes the run's pending
 * positions to run-scoped). When a run completes (or pauses after a commit), the run
 * positions of its incremental and cdc resources become the routes' positions: a plan's
 * own "route_checkpoint" stands for the whole plan and moves the route only when the run
 * and the resource completed; a shard position moves the route only when it carries
 * progress (a key or an offset; one that only says "done" keeps the route where it was).
 *
 * Reconciliation with a checkpoint a transactional destination keeps in its own commit:
 * for a shard of this very run it wins over the store's (the destination is never behind
 * the store; a crash between its commit and the fold of sink.committed leaves the store
 * behind), and the store is told; for a new plan's lower bound, a key position of a later
 * run of the same pipeline version than the route's wins (rows committed the store never
 * heard of).
 *
 * Pure functions: no store, no I/O, no global state; positions are read with the codec
 * (position.h). Called by the tracker (control/tracker.c) and the runner (runner/plan.c,
 * runner/coordinator.c), which do the saving. */
#ifndef FERRY_CHECKPOINT_PROMOTE_H
#define FERRY_CHECKPOINT_PROMOTE_H

#include <stdbool.h>
#include <stdint.h>

enum ferry_checkpoint_scope {
    FERRY_CHECKPOINT_RUN,     /* durable: the run resumes from it */
    FERRY_CHECKPOINT_PENDING, /* written, not yet committed by the sink */
};

/* Where a batch.written position goes: durable says the sink made the batch durable. */
enum ferry_checkpoint_scope ferry_checkpoint_written_scope(bool durable);

/* Whether a resource read in mode ("full", "incremental", "cdc") keeps a route position. */
bool ferry_checkpoint_mode_has_route(const char *mode);

/* Whether a plan's "route_checkpoint" becomes the route's position now: the run completed
 * (not a pause) and so did the resource (resource_state "completed"). */
bool ferry_checkpoint_plan_route_due(bool run_completed, const char *resource_state);

/* Whether a run position moves the route: it has a key or an offset "n". False for NULL
 * and for text that is no position. */
bool ferry_checkpoint_carries_progress(const char *position);

/* A checkpoint a destination holds for one resource and shard (borrowed). */
struct ferry_held_checkpoint {
    int64_t run_id;
    const char *position; /* NULL: none */
};

/* Whether a new plan starts from the destination's checkpoint rather than the route's
 * (written by route_run, 0 for none): it is a key position of a later run than route_run,
 * and same_version(ctx, held->run_id) says that run had this pipeline version (asked
 * last, only when the rest holds). */
bool ferry_checkpoint_lower_from_held(int64_t route_run, const struct ferry_held_checkpoint *held,
                                      bool (*same_version)(void *ctx, int64_t run_id),
                                      void *ctx);

/* A shard's resume position for run run_id: held's when the destination holds one of
 * this run, else stored (either may be NULL). *record: held's differs from stored, which
 * the store must then save as the run's checkpoint. Returns a borrowed pointer. */
const char *ferry_checkpoint_resume_of(const char *stored, const struct ferry_held_checkpoint *held,
                                       int64_t run_id, bool *record);

#endif
