/* ferry/failpoint.h - named places where tests make ferry fail on purpose.
 *
 * FERRY_FAILPOINTS="name=action[,name=action]" with action one of
 *   crash        _exit(137) at once, no cleanup (like a SIGKILL at that instruction)
 *   error        the call returns FERRY_EFAILPOINT
 *   sleep(MS)    sleep MS milliseconds, then go on
 *   enospc       the call returns FERRY_ENOSPC ("No space left on device")
 *   bitflip      the caller flips one bit of the data it is about to hand over
 * An action may be limited to the Nth hit: "after_sink_apply=crash@3", or start there and
 * fire on every later hit too: "store_fsync=error@5+".
 * When FERRY_FAILPOINTS is unset, FERRY_FAILPOINT() costs one predictable branch.
 *
 * Names used by the engine: before_sink_apply, after_sink_apply, before_sink_commit,
 * after_sink_commit, before_checkpoint_save, after_checkpoint_save, after_bus_publish,
 * before_store_commit, before_slot_ack, after_policy_check (a served run's worker, between
 * its policy check and its connectors' connect; sleep only); by connectors: cdc_before_end (postgres and mysql cdc,
 * before the WAL / binlog position a run streams to is taken), cdc_chunk (postgres cdc, before
 * each watermark chunk of a table that joins a running slot), cdc_chunk_snapshot_first
 * (postgres cdc, sleep: the chunk's snapshot is taken before its low watermark, the sleep
 * between them), cdc_join_by_copy (postgres cdc, armed by any action: a table that joins a
 * running slot is copied from an exported snapshot, an older server's way, instead of read in
 * chunks), my_snapshot_lock (mysql cdc, error:
 * the first run's snapshot takes MySQL's FLUSH TABLES WITH READ LOCK path on MariaDB too;
 * tests/e2e/mysql_snapshot_lock.sh), files_sink_write, files_before_manifest,
 * files_fsync (error: the fsync fails with EIO), s3_upload_part, s3_before_manifest,
 * pg_sink_between_commits (overlapped commits: the previous batch's COMMIT in flight, the
 * next batch's rows sent), pg_sink_commit_sent (a batch's COMMIT sent, unanswered),
 * files_after_switch, s3_after_switch (write: replace, after the data set manifest),
 * iceberg_upload_part (after each part of a multipart data file upload); by the
 * state store's SQLite VFS shim (store/fault_vfs.c, only registered when named here):
 * store_fsync (error: xSync fails, EIO; enospc: SQLITE_FULL), store_write (error: EIO;
 * enospc: SQLITE_FULL), hit by every state handle of the process; by
 * ferry verify: verify_between_passes (after the first pass, before the re-check).
 * Tests: tests/fault/README.md maps each to the test that uses it. */
#ifndef FERRY_FAILPOINT_H
#define FERRY_FAILPOINT_H

#include <stdbool.h>
#include "ferry/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_fp_action { FERRY_FP_NONE = 0, FERRY_FP_ERROR, FERRY_FP_ENOSPC, FERRY_FP_BITFLIP };

extern bool ferry__failpoints_on;

/* Loads FERRY_FAILPOINTS; returns FERRY_ECONFIG on a malformed value. Call once at start. */
int ferry_failpoints_init(struct ferry_error *err);

/* Evaluates failpoint `name`: crashes or sleeps itself; returns the action the caller must
 * carry out (ERROR, ENOSPC, BITFLIP) or NONE. */
enum ferry_fp_action ferry__failpoint_eval(const char *name);

#define FERRY_FAILPOINT(name) (ferry__failpoints_on ? ferry__failpoint_eval(name) : FERRY_FP_NONE)

/* Whether FERRY_FAILPOINTS names `name` (without evaluating it: no hit counted): for a
 * failpoint that also changes the order of what surrounds it. */
bool ferry_failpoint_armed(const char *name);

/* Convenience: evaluate; on ERROR/ENOSPC set err and return the code; else FERRY_OK. */
int ferry_failpoint_check(const char *name, struct ferry_error *err);

#ifdef __cplusplus
}
#endif
#endif
