/* connectors/postgres/pg_demux.h - one replication session per slot in this process, read
 * by one thread that hands each frame to the bounded queue of every table streaming from the
 * slot (private to this folder; docs/internals/cdc.md "Decoding once").
 *
 * The tables of a slot join (ferry__pg_demux_join) from their own threads; the first join
 * makes the slot's demultiplexer, which waits until `expected` tables joined (or no table
 * joined for a moment), then opens ONE session (START_REPLICATION at the least start of
 * the tables; a session parked by an earlier --follow run when every table starts exactly
 * where it stopped) and reads it: Begin, Commit, Relation, Truncate and keepalives go to
 * every table, an Insert/Update/Delete only to the table of its relation, and nothing to a
 * table that left. A table joining while the session runs waits for it to end, then
 * streams in a session of its own. The reader never waits for a table that left; it waits
 * for room in a full queue (backpressure), answering the server meanwhile. It stops
 * reading once every table reached its end; the session then ends, or, when every table
 * ended cleanly at one position and kept its session (--follow), it is parked for the next
 * run (acknowledged meanwhile through ferry__pg_demux_park_ack). A row-count epoch
 * (--epoch-rows N) is the session's: at the first commit after N changes were handed to
 * its tables, every table's run ends (one commit boundary for all, and the session can be
 * parked there).
 *
 * The standby status reports `flush` = the least flush of the tables (never what was
 * merely received). Thread-safe: every call may come from any thread; a member is used by
 * the one thread that joined it. */
#ifndef FERRY_PG_DEMUX_H
#define FERRY_PG_DEMUX_H

#include "connectors/postgres/pg_common.h"

struct ferry_row_writer;
struct ferry_pg_demux_member;

struct ferry_pg_demux_join {
    const char *url;
    const struct ferry_pg_conn_opts *opts;
    const char *peer;
    const char *slot, *pub;
    const char *schema_name, *table; /* as in the catalog: routes its changes */
    const char *from;                /* quoted, for messages */
    uint64_t start, end;             /* this table's range */
    uint64_t flush;                  /* the standby flush this table allows */
    int expected;                    /* tables that will join the session (>= 1) */
    bool keep_session;               /* --follow: the session may be parked at the end */
    bool can_continue;               /* no rows to skip: a parked session may serve it */
    int64_t epoch_rows;              /* --epoch-rows (the same for every table of a run) */
    bool stream_large_txns;          /* the source's key (the same for every table) */
    struct ferry_row_writer *rw;     /* its stop request ends a wait; grouped (ferry_rw_grouped):
                                        the session marks commit-group cuts, and the table
                                        enters its group when it joins the session */
};

/* A frame handed to a table: release it with ferry__pg_demux_frame_release. */
struct ferry_pg_demux_frame {
    const uint8_t *p;
    size_t n;
    bool epoch_end; /* a Commit at which the table's run ends (row-count epoch) */
    bool cut;       /* n == 0: a commit-group cut, between two transactions */
    /* cut: the end of the session's last commit; a table that had no part in the
     * transactions since its last frame moves its position there */
    uint64_t cut_commit;
    int64_t cut_commit_time; /* its commit time, pgoutput's (microseconds since 2000) */
    /* private: who frees the bytes */
    char *buf_;
    int kind_;
    void *shared_;
};

/* Joins the session of j->slot (waiting while a session of it runs that started without
 * this table). FERRY_EPAUSED/FERRY_ECANCELED when the row writer asks to stop meanwhile. */
int ferry__pg_demux_join(const struct ferry_pg_demux_join *j, struct ferry_pg_demux_member **out,
                         struct ferry_error *err);
/* The next frame of the table, waiting up to wait_ms (f->n == 0: none yet). An error when
 * the session failed (the message names the slot) or ended before the table's end. */
int ferry__pg_demux_next(struct ferry_pg_demux_member *m, int wait_ms,
                         struct ferry_pg_demux_frame *f, struct ferry_error *err);
void ferry__pg_demux_frame_release(struct ferry_pg_demux_frame *f);
/* The table stops reading. clean: it ended at a commit boundary at position `pos` (then the
 * session may be parked at pos when every table of it did). The last table to leave waits
 * until the session is closed or parked. m is freed. */
void ferry__pg_demux_leave(struct ferry_pg_demux_member *m, bool clean, uint64_t pos);
/* A table of the run that will not join the slot's session (nothing to stream up to its
 * end): the session waits for one table less. */
void ferry__pg_demux_decline(const char *slot);
/* Acknowledges slot through its parked session (a standby status with flush = lsn) when
 * one is parked exactly at lsn: FERRY_OK; else FERRY_ENOTFOUND, after closing a parked
 * session of the slot at another position (it holds the slot). */
int ferry__pg_demux_park_ack(const char *slot, uint64_t lsn);

#endif
