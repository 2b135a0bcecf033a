/* connectors/postgres/pg_chunk.h - a table that joins a running slot read in key-ordered
 * chunks between watermarks of the WAL (DBLog; private to this folder; docs/internals/cdc.md
 * "Tables that join while streaming").
 *
 * The stream (pg_cdc.c) owns one chunker and drives it from its thread, between source
 * transactions: start() writes a low watermark, reads the next chunk (held in memory) and
 * writes a high watermark, both pg_logical_emit_message(false, 'ferry', ...) with a nonce of
 * this chunker; the stream hands every logical message to message(), which says when our
 * high watermark arrived; between our low and high watermark it notes the key of every
 * change of the table (note(), truncated()); at the high watermark it writes the chunk's
 * rows that dropped() says were not changed in that window, then calls next().
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
    bool truncated;         /* a TRUNCATE inside the window: the chunk is dropped */
    struct ferry_buf after; /* the last written key, serialised (empty: from the start) */
    struct ferry_buf keys;  /* keys seen in the window, serialised, one after another */
    uint32_t *slots;        /* open addressing over keys: offset + 1, 0 empty */
    uint32_t n_slots, n_keys;
    struct ferry_buf scratch;
};

/* Connects (the walsender's text settings pinned) and resumes after `tag` (a position tag
 * of an earlier run: "c<hex>", or NULL/"" from the start; "d" is done). */
int ferry__pg_chunk_open(struct ferry_pg_chunk *ch, const char *url,
                         const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, int n_user, const char *tag,
                         struct ferry_error *err);
void ferry__pg_chunk_close(struct ferry_pg_chunk *ch);
/* Low watermark, the chunk read, high watermark (phase CHUNK_WAIT_LW); an empty chunk
 * ends the snapshot at once (CHUNK_DONE). */
int ferry__pg_chunk_start(struct ferry_pg_chunk *ch, struct ferry_error *err);
/* A logical message of the stream: true when it is our high watermark (write the rows). */
bool ferry__pg_chunk_message(struct ferry_pg_chunk *ch, const char *prefix, const uint8_t *p,
                             size_t n);
/* A change of the table in the stream: its key (from tuple tp through map) is noted. */
int ferry__pg_chunk_note(struct ferry_pg_chunk *ch, const struct ferry_pg_repl_tuple *tp,
                         const int *map, struct ferry_error *err);
void ferry__pg_chunk_truncated(struct ferry_pg_chunk *ch);
/* Rows of the chunk (none after a TRUNCATE in the window); whether row r was changed in
 * the window. */
int ferry__pg_chunk_rows(const struct ferry_pg_chunk *ch);
bool ferry__pg_chunk_dropped(struct ferry_pg_chunk *ch, int r);
/* Row r becomes the last written: its tag ("c<hex>") in *tag and *n (valid until the next call). */
int ferry__pg_chunk_written(struct ferry_pg_chunk *ch, int r, const char **tag, size_t *n,
                            struct ferry_error *err);
/* The chunk is written: the next starts at the next start() (or the snapshot is done). */
void ferry__pg_chunk_next(struct ferry_pg_chunk *ch);

#endif
