/* connectors/postgres/pg_guard.c - the io_timeout watchdog (see pg_guard.h).
 *
 * Owns one process-wide watchdog thread (started on the first armed guard, never stopped: it
 * holds no memory) and the list of armed guards. Calls libpq (PQsocket), the kernel's TCP_INFO
 * and shutdown(2). Called by pg_sink.c and pg_source.c around their blocking work. */
#include <errno.h>
#include <linux/tcp.h> /* not netinet/tcp.h: its tcp_info lacks the byte counters */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "connectors/postgres/pg_common.h"
#include "connectors/postgres/pg_guard.h"

#define TICK_MS 100

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_pg_guard *armed; /* guarded by lock */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool thread_ok;

static bool progress(int fd, uint64_t *acked, uint64_t *received)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return false;
    *acked = ti.tcpi_bytes_acked;
    *received = ti.tcpi_bytes_received;
    return true;
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, TICK_MS * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        int64_t now = ferry_now_mono_us();
        pthread_mutex_lock(&lock);
        for (struct ferry_pg_guard *g = armed; g != NULL; g = g->next) {
            if (g->cut) continue;
            uint64_t a = 0, r = 0;
            if (g->tcp && progress(g->fd, &a, &r) && (a != g->acked || r != g->received)) {
                g->acked = a;
                g->received = r;
                g->last_us = now;
                continue;
            }
            if (now - g->last_us >= g->timeout_us) {
                /* The blocked poll() in libpq wakes up with EOF/an error on this socket. */
                shutdown(g->fd, SHUT_RDWR);
                g->cut = true;
                g->fired = true;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void start(void)
{
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    thread_ok = pthread_create(&t, &at, watchdog, NULL) == 0;
    pthread_attr_destroy(&at);
    if (!thread_ok) ferry_log(FERRY_LOG_WARN, "postgres: cannot start the io_timeout watchdog");
}

/* Starts watching c's socket (none: nothing to watch, nothing can block on it). */
static void watch(struct ferry_pg_guard *g, PGconn *c)
{
    int fd = c ? PQsocket(c) : -1;
    if (fd < 0) return;
    g->fd = fd;
    g->cut = false;
    g->last_us = ferry_now_mono_us();
    g->tcp = progress(fd, &g->acked, &g->received);
    pthread_mutex_lock(&lock);
    g->prev = NULL;
    g->next = armed;
    if (armed) armed->prev = g;
    armed = g;
    pthread_mutex_unlock(&lock);
}

static void unwatch(struct ferry_pg_guard *g)
{
    if (g->fd < 0) return;
    pthread_mutex_lock(&lock);
    if (g->prev) g->prev->next = g->next;
    else armed = g->next;
    if (g->next) g->next->prev = g->prev;
    pthread_mutex_unlock(&lock);
    g->fd = -1;
}

void ferry__pg_guard_begin(struct ferry_pg_guard *g, PGconn *c, int64_t timeout_ms)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    if (timeout_ms <= 0 || c == NULL) return;
    pthread_once(&once, start);
    if (!thread_ok) return;
    g->timeout_us = timeout_ms * 1000;
    watch(g, c);
}

void ferry__pg_guard_move(struct ferry_pg_guard *g, PGconn *c)
{
    if (g == NULL || g->timeout_us <= 0) return;
    unwatch(g);
    watch(g, c);
}

bool ferry__pg_guard_end(struct ferry_pg_guard *g)
{
    unwatch(g);
    return g->fired; /* the watchdog writes it under the lock unwatch took */
}

int ferry__pg_guard_result(struct ferry_pg_guard *g, int rc, PGconn *c, const char *what,
                           int64_t timeout_ms, struct ferry_error *err)
{
    if (!ferry__pg_guard_end(g)) return rc;
    char peer[256], cause[sizeof err->message / 2];
    ferry__pg_describe(c, peer, sizeof peer);
    snprintf(cause, sizeof cause, "%s", err && rc != FERRY_OK ? err->message : "");
    return ferry_error_set(err, FERRY_ETIMEOUT, "libpq",
                           "%s: %s made no progress for %lld ms (io_timeout); the connection was "
                           "closed%s%s",
                           what, peer, (long long)timeout_ms, cause[0] ? ": " : "", cause);
}
