/* connectors/postgres/pg_repl.h - the pgoutput logical replication protocol, decoded from
 * bytes (private to this folder; exposed for its unit test and fuzzing).
 *
 * No I/O: the functions take a byte buffer and fill a struct whose strings and values point
 * into that buffer (valid while the buffer is). Every length is checked against the buffer:
 * truncated, oversized or garbage input is FERRY_EINVAL with a message naming the message
 * kind and the field, never a read past the end. Protocol versions 1 and 2, the format of
 * PostgreSQL's "Logical Replication Message Formats". Version 2 adds streamed in-progress
 * transactions: Stream Start, Stop, Commit and Abort, and inside a stream block every data
 * message carries the (sub)transaction's xid after its kind byte; the session's reader spools
 * those blocks (pg_spool.h) and hands each transaction on at its commit in version 1's form,
 * so the decoder of a table's changes only ever sees version 1.
 *
 * Two layers:
 *   - the CopyData frames of START_REPLICATION: XLogData ('w': start, end, send time,
 *     payload) and primary keepalive ('k': server WAL end, send time, reply requested);
 *     and the client's standby status update ('r'), built into 34 bytes;
 *   - the pgoutput messages inside XLogData: Begin, Commit, Origin, Relation, Type, Insert,
 *     Update, Delete, Truncate, Message, and version 2's Stream Start ('S'), Stop ('E'),
 *     Commit ('c') and Abort ('A').
 *
 * Ownership: a decoder holds scratch arrays for tuple values and relation columns that grow
 * (ferry_realloc, capped at FERRY_PG_REPL_MAX_COLS) and are reused: steady state allocates
 * nothing per message. Not thread-safe; one decoder per stream. */
#ifndef FERRY_PG_REPL_H
#define FERRY_PG_REPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

#define FERRY_PG_REPL_MAX_COLS 1664 /* MaxTupleAttributeNumber */

/* PostgreSQL timestamps (and LSN clocks) count microseconds from 2000-01-01. */
#define FERRY_PG_REPL_EPOCH_US INT64_C(946684800000000)

struct ferry_pg_repl_frame {
    char kind;            /* 'w' XLogData, 'k' keepalive */
    uint64_t wal_start;   /* 'w' */
    uint64_t wal_end;     /* 'w' and 'k': the server's position */
    int64_t send_time;    /* microseconds since 2000-01-01 */
    bool reply_requested; /* 'k' */
    const uint8_t *data;  /* 'w': the pgoutput message */
    size_t len;
};

/* Parses one CopyData payload of a replication stream. Other kinds are FERRY_EINVAL. */
int ferry_pg_repl_parse_frame(const uint8_t *p, size_t n, struct ferry_pg_repl_frame *out,
                              struct ferry_error *err);

/* The standby status update ('r'): write, flush and apply positions, the client clock in
 * microseconds since 2000-01-01, and whether the server should answer with a keepalive.
 * Fills out[34]; returns 34. */
size_t ferry_pg_repl_status_update(uint8_t out[34], uint64_t write, uint64_t flush, uint64_t apply,
                                   int64_t clock_us, bool reply);

/* One column value of a TupleData. */
struct ferry_pg_repl_value {
    char kind;           /* 'n' null, 'u' unchanged TOAST value (not sent), 't' text, 'b' binary */
    const uint8_t *data; /* 't'/'b': the bytes (text is NOT NUL-terminated) */
    uint32_t len;
};

struct ferry_pg_repl_tuple {
    int n;                              /* columns sent */
    struct ferry_pg_repl_value *values; /* n entries, decoder scratch */
};

struct ferry_pg_repl_column {
    bool key;         /* flags bit 1: part of the replica identity */
    const char *name; /* NUL-terminated, inside the message */
    uint32_t type_oid;
    int32_t typmod;
};

struct ferry_pg_repl_msg {
    char kind; /* 'B','C','O','R','Y','I','U','D','T','M', streams: 'S','E','c','A' */
    /* Begin: final_lsn, time, xid. Commit: flags, commit_lsn, end_lsn, time. Stream Start:
     * xid, first_segment. Stream Commit: xid, flags, commit_lsn, end_lsn, time. Stream
     * Abort: xid, subxid (equal to xid when the whole transaction aborted). */
    uint64_t final_lsn;
    uint64_t commit_lsn;
    uint64_t end_lsn;
    int64_t time; /* commit time, microseconds since 2000-01-01 */
    uint32_t xid;
    uint32_t subxid;
    bool first_segment;
    uint8_t flags;
    /* Relation, Insert, Update, Delete: the relation id. */
    uint32_t relid;
    /* Relation */
    const char *nspname; /* "" means pg_catalog */
    const char *relname;
    char replident; /* 'd' default, 'n' nothing, 'f' full, 'i' index */
    int n_cols;
    struct ferry_pg_repl_column *cols; /* decoder scratch */
    /* Type */
    uint32_t type_oid;
    const char *type_nsp;
    const char *type_name;
    /* Update/Delete: old image kind 'K' (key columns), 'O' (whole old row) or 0 (none). */
    char old_kind;
    struct ferry_pg_repl_tuple old_tuple;
    struct ferry_pg_repl_tuple new_tuple; /* Insert, Update */
    /* Truncate: n_rels relation ids, read with ferry_pg_repl_truncate_relid(). */
    int n_rels;
    uint8_t truncate_options; /* 1 cascade, 2 restart identity */
    const uint8_t *relids;
    /* Origin: origin_lsn + name. Message: lsn (in commit_lsn), prefix, content. */
    uint64_t origin_lsn;
    const char *origin_name;
    const char *prefix;
    const uint8_t *content;
    uint32_t content_len;
};

struct ferry_pg_repl_decoder {
    struct ferry_pg_repl_value *old_vals, *new_vals;
    int old_cap, new_cap;
    struct ferry_pg_repl_column *cols;
    int cols_cap;
};

void ferry_pg_repl_decoder_init(struct ferry_pg_repl_decoder *d);
void ferry_pg_repl_decoder_release(struct ferry_pg_repl_decoder *d);
/* Decodes one pgoutput message (an XLogData payload) into *out. */
int ferry_pg_repl_decode(struct ferry_pg_repl_decoder *d, const uint8_t *p, size_t n,
                         struct ferry_pg_repl_msg *out, struct ferry_error *err);
uint32_t ferry_pg_repl_truncate_relid(const struct ferry_pg_repl_msg *m, int i);

/* "16/B374D848" <-> 64-bit LSN. parse returns FERRY_EINVAL on anything else. */
int ferry_pg_lsn_parse(const char *s, uint64_t *out);
void ferry_pg_lsn_format(uint64_t lsn, char *buf, size_t len);

#endif
