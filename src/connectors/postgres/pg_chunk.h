/* connectors/postgres/pg_chunk.h - a table that joins a running slot read in key-ordered
 * chunks between watermarks of the WAL (DBLog; private to this folder; docs/internals/cdc.md
 * "Tables that join while streaming").
 *
 * The stream (pg_cdc.c) owns one chunker and drives it from its thread, between source
 * transactions: start() writes a low watermark, reads the next chunk (held in memory) in a
 * REPEATABLE READ transaction whose snapshot (pg_current_snapshot()) it keeps, and writes a
 * high watermark, both pg_logical_emit_message(false, 'ferry', ...) with a nonce of this
 * chunker; the stream hands every logical message to message(), which says when our high
 * watermark arrived; it notes the key and transaction id of every change of the table
 * (note(), truncated()) until the snapshot is done. At the high watermark, at_hw() drops
 * from the chunk every key changed inside the window (between our low and high watermark)
 * or by a transaction the chunk's snapshot does not see (it committed before our low
 * watermark, yet after the snapshot: the stream applied a newer value); the stream writes
 * the other rows, then calls next(). Noted transactions are kept until a chunk's snapshot
 * sees them. The first chunk waits for the table's writers that may predate its joining
 * the publication (their earlier changes are never published: a snapshot must see them).
 * Progress is a position tag: "c<hex of the last written row's key texts>", "d" once the
 * snapshot is done. Not thread-safe. */
#ifndef FERRY_PG_CHUNK_H
#define FERRY_PG_CHUNK_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include "connectors/postgres/pg_cdc.h"
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_repl.h"
#include "ferry/core.h"

#define FERRY_PG_CHUNK_ROWS 4096

enum ferry_pg_chunk_phase { CHUNK_IDLE, CHUNK_WAIT_LW, CHUNK_WINDOW, CHUNK_DONE };

/* A snapshot as pg_current_snapshot() gives it ("xmin:xmax:xip,..."), transaction ids cut to
 * the 32 bits pgoutput's Begin carries and compared modulo 2^32 (as the server does). */
struct ferry_pg_snap {
    uint32_t xmin, xmax;
    uint32_t *xip; /* transactions running at the snapshot, sorted */
    uint32_t n_xip, cap_xip;
};

/* Parses the text of a pg_snapshot into *s (its xip array reused). */
int ferry__pg_snap_parse(struct ferry_pg_snap *s, const char *text, struct ferry_error *err);
/* Whether the snapshot sees committed transaction xid (pg_visible_in_snapshot). */
bool ferry__pg_snap_visible(const struct ferry_pg_snap *s, uint32_t xid);
void ferry__pg_snap_release(struct ferry_pg_snap *s);

struct ferry_pg_chunk {
    PGconn *c;
    const char *peer;
    const struct ferry_pg_cdc_target *t;
    int n_user;
    char nonce[40];
    int64_t no; /* the current chunk */
    enum ferry_pg_chunk_phase phase;
    PGresult *rows;         /* the current chunk: the user fields as text, in schema order */
    bool last;              /* fewer rows than asked: the snapshot ends with this chunk */
    bool truncated;         /* a TRUNCATE in the window or unseen: the chunk is dropped */
    struct ferry_buf after; /* the last written key, serialised (empty: from the start) */
    struct ferry_buf keys;  /* keys the chunk drops, serialised, one after another */
    uint32_t *slots;        /* open addressing over keys: offset + 1, 0 empty */
    uint32_t n_slots, n_keys;
    struct ferry_buf held;     /* changes no chunk's snapshot saw yet: xid, key length, key */
    struct ferry_pg_snap snap; /* the current chunk's snapshot */
    struct ferry_buf scratch;
    /* Before the first chunk: the transactions that wrote to the table before it joined the
     * publication, still open (their virtual ids as a text array), waited for. */
    bool writers_done;
    struct ferry_buf writers;
    int64_t writers_poll_us, writers_log_us; /* monotonic: the next look, the next log line */
};

/* Connects (the walsender's text settings pinned) and resumes after `tag` (a position tag
 * of an earlier run: "c<hex>", or NULL/"" from the start; "d" is done). */
int ferry__pg_chunk_open(struct ferry_pg_chunk *ch, const char *url,
                         const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, int n_user, const char *tag,
                         struct ferry_error *err);
void ferry__pg_chunk_close(struct ferry_pg_chunk *ch);
/* Low watermark, the chunk read, high watermark (phase CHUNK_WAIT_LW); an empty chunk
 * ends the snapshot at once (CHUNK_DONE). Before a run's first chunk from the table's start,
 * the transactions that hold the table's RowExclusiveLock (they wrote to it, perhaps before
 * the table joined the publication: pgoutput never publishes those changes) must end first:
 * until they did, start() looks again every 100 ms and leaves the phase CHUNK_IDLE. */
int ferry__pg_chunk_start(struct ferry_pg_chunk *ch, struct ferry_error *err);
/* A logical message of the stream: true when it is our high watermark (write the rows). */
bool ferry__pg_chunk_message(struct ferry_pg_chunk *ch, const char *prefix, const uint8_t *p,
                             size_t n);
/* A change of the table in the stream by transaction xid: its key (from tuple tp through
 * map) is noted. */
int ferry__pg_chunk_note(struct ferry_pg_chunk *ch, uint32_t xid,
                         const struct ferry_pg_repl_tuple *tp, const int *map,
                         struct ferry_error *err);
/* A TRUNCATE of the table by transaction xid. */
int ferry__pg_chunk_truncated(struct ferry_pg_chunk *ch, uint32_t xid, struct ferry_error *err);
/* Our high watermark arrived: the keys of noted transactions the chunk's snapshot does not
 * see join the keys the chunk drops (a TRUNCATE among them drops the chunk); only those
 * stay noted. */
int ferry__pg_chunk_at_hw(struct ferry_pg_chunk *ch, struct ferry_error *err);
/* Rows of the chunk (none after a TRUNCATE it does not see); whether row r is dropped
 * (changed in the window or by a transaction the chunk's snapshot does not see). */
int ferry__pg_chunk_rows(const struct ferry_pg_chunk *ch);
bool ferry__pg_chunk_dropped(struct ferry_pg_chunk *ch, int r);
/* Row r becomes the last written: its tag ("c<hex>") in *tag and *n (valid until the next call). */
int ferry__pg_chunk_written(struct ferry_pg_chunk *ch, int r, const char **tag, size_t *n,
                            struct ferry_error *err);
/* The chunk is written: the next starts at the next start() (or the snapshot is done). */
void ferry__pg_chunk_next(struct ferry_pg_chunk *ch);

#endif
