/* connectors/postgres/pg_spool.h - the streamed in-progress transactions of one replication
 * session (pgoutput protocol 2), held on local disk until they commit or abort (private to
 * this folder; docs/internals/cdc.md, "Streamed transactions").
 *
 * Why: a transaction larger than the server's logical_decoding_work_mem is otherwise written
 * to the server's disk by the walsender and read back before its first change is sent. With
 * `streaming` on, the walsender sends it in blocks as it decodes it; nothing of it may be
 * applied before its commit (it may still abort, in whole or in part), so the reader keeps
 * the blocks here and hands the transaction on at its Stream Commit.
 *
 * A spool per transaction: an unlinked temporary file under $TMPDIR (else /tmp) of records
 * [uint32 length][frame], each frame the XLogData frame as it arrived with the 4-byte xid
 * after the message kind removed: version 1's form, which the rest of the stream reads.
 * Where the records of each new (larger) subtransaction xid begin is remembered; a Stream
 * Abort of subtransaction X cuts the file at the first record of an xid from X on: every
 * record made since X began is of X or of a subtransaction nested in it (xids from X on:
 * given at the first change, a parent's before its child's), every earlier one of an older
 * xid. The cut keeps the Relation and Type messages after it (pgoutput sends a table's
 * description with its first change in the transaction, tagged with that change's
 * subtransaction).
 *
 * Ownership: the spools belong to the session's reader thread; no locking. Memory: 64 kB of
 * stdio buffer per transaction being streamed, and 16 bytes per subtransaction with changes
 * (not rolled back); the changes live in the files. */
#ifndef FERRY_PG_SPOOL_H
#define FERRY_PG_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "ferry/error.h"

struct ferry_pg_spool;

struct ferry_pg_spools {
    struct ferry_pg_spool **v;
    int n, cap;
    struct ferry_pg_spool *open;      /* the stream block being read, or NULL */
    struct ferry_pg_spool *replaying; /* the transaction being read back, or NULL */
    const char *what;                 /* names the session in errors: "postgres source: slot s" */
};

void ferry__pg_spools_init(struct ferry_pg_spools *s, const char *what);
/* Closes (and so deletes) every spool. */
void ferry__pg_spools_release(struct ferry_pg_spools *s);

/* Stream Start of xid: its spool becomes the open one (made on the first segment; a first
 * segment of a transaction already spooled starts it over). A later segment of a
 * transaction never started is FERRY_EINVAL. */
int ferry__pg_spool_start(struct ferry_pg_spools *s, uint32_t xid, bool first,
                          struct ferry_error *err);
/* Stream Stop. */
void ferry__pg_spool_stop(struct ferry_pg_spools *s);
/* A data message of the open stream block: frame[0 .. n), its message at `at` (kind byte,
 * then the xid of the (sub)transaction that made it). Spooled without the xid. */
int ferry__pg_spool_put(struct ferry_pg_spools *s, const uint8_t *frame, size_t n, size_t at,
                        struct ferry_error *err);
/* Stream Abort: the whole transaction (subxid == xid) or a subtransaction's records from
 * its first one on. An xid never spooled is nothing to undo. */
int ferry__pg_spool_abort(struct ferry_pg_spools *s, uint32_t xid, uint32_t subxid,
                          struct ferry_error *err);

/* Stream Commit: reads the transaction back. Each call to next gives its next frame in a
 * fresh ferry_malloc'd buffer (*frame, *n; the caller frees it), or *frame = NULL at the end
 * (the spool is then gone). A transaction never spooled has no frames. */
int ferry__pg_spool_replay(struct ferry_pg_spools *s, uint32_t xid, struct ferry_error *err);
int ferry__pg_spool_next(struct ferry_pg_spools *s, char **frame, int *n, struct ferry_error *err);

#endif
