/* pipeline/commit_group.h - one destination transaction for the cdc streams of one source log
 * that share a sink instance (docs/internals/cdc.md, "One destination transaction per source
 * transaction").
 *
 * Members are flows. The source counts a member in (ferry_commit_group_enter, through its row
 * writer) when it joined the shared log session, so that every member of a session is counted
 * before the first cut of it can be reached. Every apply goes through the group: the first one
 * after a commit opens the destination transaction (sink group_begin), all later ones join it.
 * A batch with group_cut set makes its member wait at the cut (ferry_commit_group_arrive) until
 * every counted member waits at a cut or has finished; the last one commits the transaction
 * (sink group_commit: data and every checkpoint the applies carried) and wakes the others.
 * Members of one session reach the same cuts in the same order (the source marks a cut at a
 * commit boundary for every table of it), so each commit holds whole source transactions.
 *
 * A member that ends cleanly finishes (ferry_commit_group_finish): it waits like at a cut, and
 * is no longer counted after that commit. A counted member that ends otherwise (error, pause,
 * cancel) breaks the group: the open transaction is rolled back and every later call fails with
 * its code, the message naming it. Until a commit returned FERRY_OK nothing of the member's
 * applies since the previous one may be reported durable (the flow holds its batch events).
 * Thread-safe; the lock is the one apply runs under (the flows' sink_lock). */
#ifndef FERRY_PIPELINE_COMMIT_GROUP_H
#define FERRY_PIPELINE_COMMIT_GROUP_H

#include <pthread.h>
#include <stdbool.h>
#include "ferry/connector.h"

struct ferry_commit_group;
struct ferry_commit_member;

/* lock: borrowed, outlives the group. NULL when out of memory. */
struct ferry_commit_group *ferry_commit_group_new(const struct ferry_sink_vtable *vt,
                                                  void *sink_ctx, pthread_mutex_t *lock);
/* Rolls back a transaction still open (a bug elsewhere: logged) and frees every member. */
void ferry_commit_group_free(struct ferry_commit_group *g);
/* A member named `who` (copied); not counted until it enters. NULL when out of memory. */
struct ferry_commit_member *ferry_commit_group_member(struct ferry_commit_group *g,
                                                      const char *who);
/* From now on m is counted: no commit happens until it waits at a cut or finished. */
void ferry_commit_group_enter(void *member);
/* sink apply of b into the group's transaction (opened when none is). */
int ferry_commit_group_apply(struct ferry_commit_member *m, const struct ferry_target *target,
                             struct ferry_batch *b, struct ferry_receipt *receipt,
                             struct ferry_error *err);
/* Waits at a cut until the transaction holding m's applies committed: FERRY_OK, or the
 * group's failure. */
int ferry_commit_group_arrive(struct ferry_commit_member *m, struct ferry_error *err);
/* m's flow ended with rc: FERRY_OK waits for the commit of what it applied (its result is
 * returned); any other rc breaks the group (returns rc, err untouched). */
int ferry_commit_group_finish(struct ferry_commit_member *m, int rc, const char *why,
                              struct ferry_error *err);
/* Commits made so far (tests, logs). */
long ferry_commit_group_commits(const struct ferry_commit_group *g);

#endif
