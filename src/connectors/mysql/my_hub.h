/* connectors/mysql/my_hub.h - one binary log connection shared by the cdc streams of a run
 * (docs/internals/mysql.md, "One stream per pipeline").
 *
 * The runner runs a pipeline's cdc streams side by side and tells each how many started
 * together (`expected`). Each stream answers ferry__my_hub_join once, with `want` (it can
 * be served: a file:offset start) or not (it streams alone: a GTID start, nothing to do, an
 * error). The hub of a key (pipeline, server, server_id) gathers the answers; when all came
 * (or when none came for FERRY_MY_HUB_WAIT_MS, so a sibling that never answers cannot hold
 * the others, while many siblings starting one after another are all waited for),
 * the subscriber with the least start opens the dump there (its `open` callback) and a
 * reader thread reads each event once and copies it into the bounded queue
 * (FERRY_MY_HUB_SLOTS events) of the streams it concerns: a TABLE_MAP of a subscriber's table
 * and the rows events of that table id to that subscriber, every other event (GTID, XID,
 * QUERY, ROTATE, heartbeat, ...) to all; a subscriber receives only events that end after
 * its own start (heartbeats: at or after), so each table skips what it already has. A full
 * queue stalls the reader (and so every table): memory stays bounded. A stream that joins
 * after the hub started, or whose hub failed to open, gets no subscription and streams
 * alone. Positions and acknowledgements stay each stream's own business.
 *
 * Thread-safety: every function may be called from any thread; one subscription belongs to
 * one thread. Lifetime: the hub is freed when every subscriber left (the reader stopped and
 * joined, the connection closed). */
#ifndef FERRY_MY_HUB_H
#define FERRY_MY_HUB_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "connectors/mysql/my_common.h" /* (mysql.h, which mariadb_rpl.h needs first) */
#include <mariadb_rpl.h>
#include "ferry/error.h"

#define FERRY_MY_HUB_SLOTS 64
#define FERRY_MY_HUB_WAIT_MS 10000

struct ferry_my_hub_sub;

/* Opens the dump at `start` (binlog file number << 32 | offset): the connection, its session
 * (checksum, heartbeat) and the MARIADB_RPL handle; *crc: events end with a CRC32. */
typedef int (*ferry_my_hub_open_fn)(void *ctx, int64_t start, MYSQL **m, MARIADB_RPL **rpl,
                                    bool *crc, struct ferry_error *err);

/* Answers the hub of `key` (peer: the server, for messages). With want: waits for the other answers, then *sub is the
 * subscription (and *crc the server's checksum setting) or NULL (stream alone). The
 * subscriber that opens the hub returns its open error, if any. Without want: *sub NULL. */
int ferry__my_hub_join(const char *key, const char *peer, int expected, bool want, const char *db,
                       const char *table, int64_t start, ferry_my_hub_open_fn open,
                       void *open_ctx, struct ferry_my_hub_sub **sub, bool *crc,
                       struct ferry_error *err);

/* The next event for sub, waiting up to wait_ms: *p and *n the raw event (header, body, CRC
 * trailer; valid until the next call), *tm_phl the TABLE_MAP post-header length; *p NULL
 * when nothing came in time. The reader's failure (the connection lost) is returned once
 * the queue is drained, as FERRY_EIO naming the server. */
int ferry__my_hub_next(struct ferry_my_hub_sub *sub, const uint8_t **p, size_t *n, int *tm_phl,
                       int wait_ms, struct ferry_error *err);

/* Ends the subscription (NULL: nothing). The last one stops the reader and frees the hub. */
void ferry__my_hub_leave(struct ferry_my_hub_sub *sub);

#endif
