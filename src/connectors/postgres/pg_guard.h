/* connectors/postgres/pg_guard.h - the client-side I/O deadline of PostgreSQL connections
 * (`io_timeout`), private to this folder.
 *
 * libpq's synchronous calls wait in poll() without a limit. TCP keepalives and
 * tcp_user_timeout notice a peer whose kernel stopped answering, but not a server (or a proxy,
 * or a load balancer) whose kernel still acknowledges while nothing comes back. A guard is
 * armed around a stretch of work in which the connection should make progress (a sink's
 * apply or commit, a source's wait for COPY data); one watchdog thread for the process checks
 * every armed guard's socket (TCP_INFO: bytes acknowledged by the peer, bytes received) and,
 * when neither moved for the guard's timeout, shuts the socket down, so the blocked libpq call
 * returns with a connection error. The caller then learns from ferry__pg_guard_end that the
 * deadline fired and reports it as FERRY_ETIMEOUT.
 *
 * A guard lives on the caller's stack between begin and end, in the thread that uses the
 * connection; the watchdog touches the socket only while the guard is armed (under its lock),
 * so it never acts on a closed or reused descriptor. Sockets without TCP_INFO (unix sockets)
 * get a plain deadline from the last begin. timeout_ms <= 0 or a NULL connection: no guard. */
#ifndef FERRY_PG_GUARD_H
#define FERRY_PG_GUARD_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"

struct ferry_pg_guard {
    int fd;             /* -1: not armed */
    int64_t timeout_us;
    int64_t last_us;    /* last progress (monotonic) */
    uint64_t acked, received;
    bool tcp;           /* TCP_INFO available */
    bool cut;           /* the watchdog shut this fd down */
    bool fired;         /* it did so to any connection since begin */
    struct ferry_pg_guard *prev, *next;
};

void ferry__pg_guard_begin(struct ferry_pg_guard *g, PGconn *c, int64_t timeout_ms);
/* The work of the armed stretch goes on on another connection (a sink swapping its two):
 * the guard watches c from now on, with a fresh deadline. No-op on an unarmed guard. */
void ferry__pg_guard_move(struct ferry_pg_guard *g, PGconn *c);
/* Disarms; true when the watchdog cut the connection while the guard was armed. */
bool ferry__pg_guard_end(struct ferry_pg_guard *g);
/* When the guard fired: replaces *err (code FERRY_ETIMEOUT) with a message naming the peer and
 * the timeout, keeping libpq's own message as the cause; returns FERRY_ETIMEOUT. Otherwise
 * returns rc unchanged. */
int ferry__pg_guard_result(struct ferry_pg_guard *g, int rc, PGconn *c, const char *what,
                           int64_t timeout_ms, struct ferry_error *err);

#endif
