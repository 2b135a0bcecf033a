/* connectors/postgres/pg_demux.c - one replication session per slot, demultiplexed into the
 * queue of every table that streams from it (contract in pg_demux.h; docs/internals/cdc.md).
 * Also the sessions parked between `--follow` runs. Calls libpq, pg_common.c, pg_repl.c.
 * Called by pg_cdc.c (the per-table stream loop, acknowledging a parked session).
 *
 * Locking: one process-wide mutex (mu) guards the registry of demultiplexers, their state
 * and their members' queues; the reader thread holds it only to hand frames over and never
 * while it waits for the socket. Each member waits on its own condition (frames), the reader
 * on its demultiplexer's (room, members leaving), joiners on the registry's.
 *
 * Hand-over in bursts, not per frame: the reader hands every frame libpq already holds (up to
 * BURST_FRAMES) under one lock; it wakes a member waiting for frames once WAKE_FRAMES (or
 * WAKE_BYTES) wait for it, or when the socket has been quiet for WAKE_IDLE_MS (wake); a
 * member moves up to TAKE_FRAMES queued frames into its own cache under one lock and reads
 * them without it, and wakes a reader waiting for room only once its queue is half empty.
 * Per frame (a lock each, a wake-up each) the two threads spent more time in the kernel than
 * on the frames. A member's frames in memory: its queue (QUEUE_BYTES) and its cache
 * (TAKE_BYTES), each at least one frame.
 *
 * Streamed transactions (protocol 2, PostgreSQL 14+): a stream block's messages go to the
 * transaction's spool (pg_spool.h), not to the tables; at its Stream Commit the transaction
 * is dispatched from the spool as version 1 sends one (Begin, messages, Commit), so the
 * tables' streams only ever read version 1. */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "connectors/postgres/pg_demux.h"
#include "connectors/postgres/pg_repl.h"
#include "connectors/postgres/pg_spool.h"
#include "core/bytes.h"
#include "ferry/batch.h"
#include "ferry/core.h"

#define WHAT "postgres source"
#define QUEUE_FRAMES 1024                 /* per table: frames waiting to be read */
#define QUEUE_BYTES ((size_t)4 << 20)     /* and their bytes (one frame always fits) */
#define BURST_FRAMES 256                  /* the reader hands over at most this many per lock */
#define TAKE_FRAMES 256                   /* a member takes at most this many per lock, */
#define TAKE_BYTES ((size_t)256 << 10)    /* and this many bytes (at least one frame) */
#define WAKE_FRAMES 256                   /* a waiting member is woken once this many */
#define WAKE_BYTES ((size_t)256 << 10)    /* or this many bytes wait for it, */
#define WAKE_IDLE_MS 1                    /* or the socket was quiet this long */
/* A read that handed over less than this while the stream flows: the reader lets the socket
 * fill COALESCE_US before the next one (libpq reads at most 16 kB at a time; a read per few
 * frames was most of the reader's time in the kernel). */
#define COALESCE_BYTES 8192
#define COALESCE_US 500
#define GATHER_US INT64_C(3000000)        /* wait this long after the last join for others */
/* A commit group's session waits for every table it expects (a late one would stream in a
 * session of its own, its transactions split from the others'), this long at most, and no
 * longer once a table that joined is asked to stop. */
#define GATHER_GROUP_US INT64_C(120000000)
#define STATUS_EVERY_US INT64_C(10000000) /* standby status even when idle */
#define PROBE_EVERY_US INT64_C(100000)    /* ask for a keepalive (server position) when idle */
#define PARK_MAX_US INT64_C(20000000)     /* below the default wal_sender_timeout (60 s) */
#define MAX_PARKED 32
/* Commit groups: a cut after a commit once this long or this many changes passed since the
 * last one, or when the stream is idle this long after a commit. */
#define CUT_US INT64_C(500000)
#define CUT_CHANGES 50000
#define CUT_IDLE_US INT64_C(20000)

/* ---- frames and queues ----------------------------------------------------------------- */

enum { F_LIBPQ, F_SHARED, F_OWN };

/* A frame handed to several tables: freed by the last one. */
struct shared {
    atomic_int refs;
    char *buf; /* libpq's */
};

struct qent {
    char *buf;
    int n;
    int kind;
    bool epoch;      /* a Commit that ends the table's run (row-count epoch) */
    bool cut;        /* no bytes: a commit-group cut (between transactions) */
    uint64_t commit; /* cut: the end of the session's last commit */
    int64_t commit_time; /* cut: its commit time (pgoutput's, microseconds since 2000) */
    struct shared *sh;
};

static void qent_release(struct qent *e)
{
    if (e->kind == F_SHARED) {
        if (atomic_fetch_sub(&e->sh->refs, 1) == 1) {
            PQfreemem(e->sh->buf);
            ferry_free(e->sh);
        }
    } else if (e->kind == F_OWN) {
        ferry_free(e->buf);
    } else {
        PQfreemem(e->buf);
    }
    memset(e, 0, sizeof *e);
}

struct relframe {
    uint32_t relid;
    char *buf; /* the whole XLogData frame of the Relation message */
    int n;
};

struct rels {
    struct relframe *v;
    int n;
};

static void rels_free(struct rels *r)
{
    for (int i = 0; i < r->n; i++)
        ferry_free(r->v[i].buf);
    ferry_free(r->v);
    memset(r, 0, sizeof *r);
}

static int rels_put(struct rels *r, uint32_t relid, const char *p, int n)
{
    char *copy = ferry_malloc((size_t)n);
    if (copy == NULL) return FERRY_ENOMEM;
    memcpy(copy, p, (size_t)n);
    for (int i = 0; i < r->n; i++)
        if (r->v[i].relid == relid) {
            ferry_free(r->v[i].buf);
            r->v[i].buf = copy;
            r->v[i].n = n;
            return FERRY_OK;
        }
    struct relframe *v = ferry_realloc(r->v, (size_t)(r->n + 1) * sizeof *v);
    if (v == NULL) {
        ferry_free(copy);
        return FERRY_ENOMEM;
    }
    r->v = v;
    r->v[r->n++] = (struct relframe){.relid = relid, .buf = copy, .n = n};
    return FERRY_OK;
}

/* ---- state ------------------------------------------------------------------------------ */

enum dstate { D_GATHERING, D_RUNNING, D_ENDED };

struct ferry_pg_demux_member {
    struct demux *d;
    struct ferry_pg_demux_join j; /* strings borrowed: valid until leave */
    struct qent *q;
    int head, count;
    size_t bytes; /* of the frames in q */
    pthread_cond_t cv;
    bool waiting; /* for frames, on cv (ferry__pg_demux_next) */
    /* the reader waits for room for a frame of room_need bytes in q (wait_room) */
    bool room_wait;
    int room_need;
    /* frames taken from q, read without the lock (the member's own thread only) */
    struct qent take[TAKE_FRAMES];
    int take_head, take_count;
    bool left, clean, finished;
    uint64_t pos;
    uint32_t relid;
    bool has_rel;
    bool got_begin; /* the open transaction's Begin went to this table (send_begin) */
};

struct demux {
    char slot[64], pub[64];
    char *url, *peer; /* copies: the first table's instance may close before the session */
    struct ferry_pg_conn_opts opts;
    bool stream_large_txns; /* pgoutput protocol 2, streaming on (pg_spool.h) */
    enum dstate state;
    int expected;
    int n_declined; /* tables of the run with nothing to stream: they never join */
    int64_t last_join;
    struct ferry_pg_demux_member **m;
    int n_m, n_left;
    pthread_cond_t cv; /* room in a queue, a member left, a member joined */
    pthread_t thread;
    bool thread_started;
    /* the session (reader thread only) */
    PGconn *c;
    bool streaming, continued, stopped_reading;
    bool in_txn;
    uint64_t received, last_commit, start;
    uint64_t txn_final; /* the open transaction's commit LSN (Begin) */
    int64_t epoch_rows; /* --epoch-rows: the session's tables end at the first commit after */
    int64_t routed;     /* changes handed to tables so far */
    /* commit groups (a member's row writer is grouped): cuts between transactions */
    bool group, uncut;
    int64_t last_cut, routed_at_cut;
    /* the open transaction's Begin (one reference kept until its Commit): a table gets it
     * with its first frame of the transaction, and the Commit only when it got the Begin */
    struct shared *begin;
    int begin_n;
    int64_t last_commit_time; /* of last_commit */
    int64_t last_status, last_probe, last_data, heard;
    struct ferry_pg_repl_decoder dec;
    struct rels rels;
    /* streamed in-progress transactions (protocol 2), until their Stream Commit or Abort */
    struct ferry_pg_spools spools;
    char spools_what[96];
    bool wake_due; /* a waiting member has frames it was not woken for (wake) */
    bool coalesce; /* the last read handed over little (COALESCE_BYTES) */
    /* a failure every member reports */
    bool failed;
    struct ferry_error err;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
static struct demux *reg[64];

/* Declines that came before their slot's session was made (its first table may join a
 * moment later); older than a gather they count for nothing. */
static struct {
    char slot[64];
    int n;
    int64_t at;
} declined[16];

static void timed_wait(pthread_cond_t *cv, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, &mu, &ts);
}

/* mu held. */
static struct demux *reg_find(const char *slot)
{
    for (size_t i = 0; i < sizeof reg / sizeof reg[0]; i++)
        if (reg[i] != NULL && !strcmp(reg[i]->slot, slot)) return reg[i];
    return NULL;
}

static void reg_remove(struct demux *d)
{
    for (size_t i = 0; i < sizeof reg / sizeof reg[0]; i++)
        if (reg[i] == d) reg[i] = NULL;
    pthread_cond_broadcast(&reg_cv);
}

static bool reg_add(struct demux *d)
{
    for (size_t i = 0; i < sizeof reg / sizeof reg[0]; i++)
        if (reg[i] == NULL) {
            reg[i] = d;
            return true;
        }
    return false;
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

/* mu held: members that still read. */
static int active_members(const struct demux *d)
{
    return d->n_m - d->n_left;
}

/* ---- handing frames to members (reader thread, mu held) --------------------------------- */

static int send_status(struct demux *d, bool reply);

/* Wakes the members waiting for frames that have enough of them (all: any), not one per
 * frame pushed; wake_due says whether one with fewer was left waiting. */
static void wake(struct demux *d, bool all)
{
    d->wake_due = false;
    for (int i = 0; i < d->n_m; i++) {
        struct ferry_pg_demux_member *m = d->m[i];
        if (!m->waiting || m->count == 0) continue;
        if (all || m->count >= WAKE_FRAMES || m->bytes >= WAKE_BYTES) {
            m->waiting = false;
            pthread_cond_signal(&m->cv);
        } else {
            d->wake_due = true;
        }
    }
}

/* Waits for room for n bytes in m's queue (answering the server meanwhile); false when m
 * left. */
static bool wait_room(struct demux *d, struct ferry_pg_demux_member *m, int n)
{
    while ((m->count == QUEUE_FRAMES || (m->count > 0 && m->bytes + (size_t)n > QUEUE_BYTES)) &&
           !m->left) {
        if (ferry_now_mono_us() - d->last_status >= STATUS_EVERY_US) (void)send_status(d, false);
        wake(d, true); /* every frame queued may be read while we wait */
        m->room_wait = true; /* the member wakes us once its queue is half empty (take) */
        m->room_need = n;
        timed_wait(&d->cv, 100);
    }
    m->room_wait = false;
    d->heard = ferry_now_mono_us(); /* a full queue is backpressure, not silence */
    return !m->left;
}

/* mu held, after m's queue shrank: whether the reader waiting for room in it may go on
 * (hysteresis: not at every frame taken, which woke it once per frame). */
static bool room_enough(const struct ferry_pg_demux_member *m)
{
    return m->room_wait && (m->count == 0 || (m->count <= QUEUE_FRAMES / 2 &&
                                              m->bytes + (size_t)m->room_need <= QUEUE_BYTES / 2));
}

static void push(struct demux *d, struct ferry_pg_demux_member *m, struct qent *e)
{
    if (!wait_room(d, m, e->n)) {
        qent_release(e);
        return;
    }
    m->q[(m->head + m->count) % QUEUE_FRAMES] = *e;
    m->count++;
    m->bytes += (size_t)e->n;
    if (m->waiting) d->wake_due = true; /* woken by wake(), not per frame */
}

/* Whether m takes a Commit ending at commit_end (0: not a Commit, every member takes it): a
 * table that had a part in the transaction, or whose run ends there (its end, a row-count
 * epoch). The others learn the position from the next cut (broadcast_cut): waking each of
 * them for every transaction of the slot was most of a many-table stream's cost. */
static bool takes(const struct ferry_pg_demux_member *m, uint64_t commit_end, bool epoch)
{
    return !m->left && (commit_end == 0 || m->got_begin || epoch || commit_end >= m->j.end);
}

/* buf (libpq's) to every member that still reads and takes it (a member that leaves
 * meanwhile releases its reference). */
static int broadcast(struct demux *d, char *buf, int n, bool epoch, uint64_t commit_end,
                     struct ferry_error *err)
{
    int k = 0;
    for (int i = 0; i < d->n_m; i++) k += takes(d->m[i], commit_end, epoch);
    if (k == 0) {
        PQfreemem(buf);
        return FERRY_OK;
    }
    struct shared *sh = k > 1 ? ferry_malloc(sizeof *sh) : NULL;
    if (k > 1 && sh == NULL) {
        PQfreemem(buf);
        return nomem(err);
    }
    if (sh != NULL) {
        atomic_init(&sh->refs, k);
        sh->buf = buf;
    }
    int given = 0;
    for (int i = 0; i < d->n_m && given < k; i++) {
        if (!takes(d->m[i], commit_end, epoch)) continue;
        struct qent e = {
            .buf = buf, .n = n, .kind = sh ? F_SHARED : F_LIBPQ, .sh = sh, .epoch = epoch};
        given++;
        push(d, d->m[i], &e); /* may wait, releasing mu: later members may leave meanwhile */
    }
    for (; given < k; given++) { /* the references of members that left before their turn */
        struct qent e = {.buf = buf, .n = n, .kind = sh ? F_SHARED : F_LIBPQ, .sh = sh};
        qent_release(&e);
    }
    return FERRY_OK;
}

/* mu held: the demux's own reference to the open transaction's Begin dropped. */
static void begin_drop(struct demux *d)
{
    if (d->begin == NULL) return;
    struct qent e = {.kind = F_SHARED, .sh = d->begin};
    qent_release(&e);
    d->begin = NULL;
}

/* mu held: the Begin just read becomes the open transaction's (the previous one's freed). */
static int begin_keep(struct demux *d, char *buf, int n, struct ferry_error *err)
{
    begin_drop(d);
    struct shared *sh = ferry_malloc(sizeof *sh);
    if (sh == NULL) {
        PQfreemem(buf);
        return nomem(err);
    }
    atomic_init(&sh->refs, 1);
    sh->buf = buf;
    d->begin = sh;
    d->begin_n = n;
    for (int i = 0; i < d->n_m; i++) d->m[i]->got_begin = false;
    return FERRY_OK;
}

/* mu held: m's copy of the open transaction's Begin, before its first frame of it. */
static void send_begin(struct demux *d, struct ferry_pg_demux_member *m)
{
    if (m->got_begin || d->begin == NULL || m->left) return;
    atomic_fetch_add(&d->begin->refs, 1);
    struct qent e = {.buf = d->begin->buf, .n = d->begin_n, .kind = F_SHARED, .sh = d->begin};
    m->got_begin = true;
    push(d, m, &e); /* may wait, releasing mu */
}

/* mu held: a commit-group cut to every member still reading, between two transactions:
 * each closes its batch there and the destination commits them together
 * (pipeline/commit_group.h). */
static void broadcast_cut(struct demux *d)
{
    for (int i = 0; i < d->n_m; i++) {
        if (d->m[i]->left) continue;
        struct qent e = {.kind = F_OWN,
                         .cut = true,
                         .commit = d->last_commit,
                         .commit_time = d->last_commit_time};
        push(d, d->m[i], &e); /* may wait, releasing mu */
    }
    wake(d, true); /* every table's commit waits for the slowest to reach the cut */
    d->uncut = false;
    d->last_cut = ferry_now_mono_us();
    d->routed_at_cut = d->routed;
}

/* mu held, after a Commit went to every member: a cut when enough time or changes passed. */
static void maybe_cut(struct demux *d)
{
    if (!d->group || d->stopped_reading) return;
    d->uncut = true;
    if (d->routed - d->routed_at_cut >= CUT_CHANGES || ferry_now_mono_us() - d->last_cut >= CUT_US)
        broadcast_cut(d);
}

/* A Relation message: which member's table it describes (its changes go there). */
static int route_relation(struct demux *d, const uint8_t *msg, size_t n, char *frame, int fn,
                          struct ferry_error *err)
{
    struct ferry_pg_repl_msg m;
    int rc = ferry_pg_repl_decode(&d->dec, msg, n, &m, err);
    if (rc != FERRY_OK) return rc;
    const char *nsp = m.nspname[0] ? m.nspname : "pg_catalog";
    for (int i = 0; i < d->n_m; i++) {
        struct ferry_pg_demux_member *mb = d->m[i];
        if (mb->left) continue; /* its strings are gone with its stream */
        if (!strcmp(nsp, mb->j.schema_name) && !strcmp(m.relname, mb->j.table)) {
            mb->relid = m.relid;
            mb->has_rel = true;
        }
    }
    return rels_put(&d->rels, m.relid, frame, fn) == FERRY_OK ? FERRY_OK : nomem(err);
}

/* mu held: whether every member that still reads has reached its end at this frame (a
 * commit that ends a row-count epoch ends every table's run). */
static bool all_finished(struct demux *d, char kind, uint64_t lsn, bool epoch)
{
    bool all = true;
    for (int i = 0; i < d->n_m; i++) {
        struct ferry_pg_demux_member *mb = d->m[i];
        if (mb->left || mb->finished) continue;
        if ((lsn >= mb->j.end || epoch) && (kind == 'C' || !d->in_txn)) mb->finished = true;
        if (!mb->finished) all = false;
    }
    return all;
}

static int dispatch(struct demux *d, char *buf, int n, struct ferry_error *err);

/* mu held: a Begin or Commit frame in version 1's form, with the header of the Stream Commit
 * frame `hdr` (its first `at` bytes), handed to dispatch. */
static int replay_mark(struct demux *d, const uint8_t *hdr, size_t at,
                       const struct ferry_pg_repl_msg *c, char kind, struct ferry_error *err)
{
    size_t body = kind == 'B' ? 21 : 26;
    uint8_t *p = ferry_malloc(at + body);
    if (p == NULL) return nomem(err);
    memcpy(p, hdr, at);
    uint8_t *q = p + at;
    *q++ = (uint8_t)kind;
    uint64_t v[3] = {c->commit_lsn, (uint64_t)c->time, 0};
    if (kind == 'C') {
        *q++ = c->flags;
        v[1] = c->end_lsn;
        v[2] = (uint64_t)c->time;
    }
    for (int k = 0; k < (kind == 'B' ? 2 : 3); k++)
        for (int b = 0; b < 8; b++)
            *q++ = (uint8_t)(v[k] >> (56 - 8 * b));
    if (kind == 'B')
        for (int b = 0; b < 4; b++)
            *q++ = (uint8_t)(c->xid >> (24 - 8 * b));
    /* freed like libpq's frames: PQfreemem is free(), ferry_malloc is malloc (core/mem.c) */
    return dispatch(d, (char *)p, (int)(at + body), err);
}

/* mu held: the transaction xid read back from its spool at its Stream Commit `c`, as
 * version 1 sends a transaction: Begin, its messages, Commit. */
static int replay_txn(struct demux *d, const uint8_t *hdr, size_t at,
                      const struct ferry_pg_repl_msg *c, struct ferry_error *err)
{
    int rc = ferry__pg_spool_replay(&d->spools, c->xid, err);
    if (rc == FERRY_OK) rc = replay_mark(d, hdr, at, c, 'B', err);
    char *frame = NULL;
    int n;
    while (rc == FERRY_OK && (rc = ferry__pg_spool_next(&d->spools, &frame, &n, err)) == FERRY_OK &&
           frame != NULL)
        rc = dispatch(d, frame, n, err);
    return rc == FERRY_OK ? replay_mark(d, hdr, at, c, 'C', err) : rc;
}

/* mu held: a frame of protocol 2's streaming (a stream block's control message, or a
 * message inside a block, spooled); buf is libpq's, handed over (pg_spool.h). */
static int stream_frame(struct demux *d, char *buf, int n, const struct ferry_pg_repl_frame *f,
                        struct ferry_error *err)
{
    char kind = (char)f->data[0];
    size_t at = (size_t)(f->data - (const uint8_t *)buf);
    int rc = FERRY_OK;
    if (kind == 'S' || kind == 'E' || kind == 'c' || kind == 'A') {
        struct ferry_pg_repl_msg m;
        rc = ferry_pg_repl_decode(&d->dec, f->data, f->len, &m, err);
        if (rc == FERRY_OK && kind == 'S')
            rc = ferry__pg_spool_start(&d->spools, m.xid, m.first_segment, err);
        if (rc == FERRY_OK && kind == 'E') ferry__pg_spool_stop(&d->spools);
        if (rc == FERRY_OK && kind == 'A')
            rc = ferry__pg_spool_abort(&d->spools, m.xid, m.subxid, err);
        if (rc == FERRY_OK && kind == 'c') rc = replay_txn(d, (const uint8_t *)buf, at, &m, err);
    } else if (kind != 'O') { /* an Origin carries no xid; ferry reads none */
        rc = ferry__pg_spool_put(&d->spools, (const uint8_t *)buf, (size_t)n, at, err);
    }
    PQfreemem(buf);
    return rc;
}

/* One CopyData frame of the server (buf is libpq's, handed over). mu held. */
static int dispatch(struct demux *d, char *buf, int n, struct ferry_error *err)
{
    struct ferry_pg_repl_frame f;
    int rc = ferry_pg_repl_parse_frame((const uint8_t *)buf, (size_t)n, &f, err);
    if (rc != FERRY_OK) {
        PQfreemem(buf);
        return rc;
    }
    if (f.kind == 'k') {
        if (f.wal_end > d->received) d->received = f.wal_end;
        if (f.reply_requested && send_status(d, false) != FERRY_OK)
            rc =
                ferry__pg_error(err, FERRY_EIO, d->c, NULL,
                                WHAT ": %s: slot \"%s\": sending standby status", d->peer, d->slot);
        int brc = broadcast(d, buf, n, false, 0, err);
        if (rc == FERRY_OK) rc = brc;
        if (rc != FERRY_OK) return rc;
        d->stopped_reading = all_finished(d, 'k', f.wal_end, false);
        return FERRY_OK;
    }
    d->last_data = ferry_now_mono_us();
    if (f.wal_start > d->received) d->received = f.wal_start;
    char kind = f.len > 0 ? (char)f.data[0] : 0;
    if (kind == 'S' || kind == 'E' || kind == 'c' || kind == 'A' || d->spools.open != NULL)
        return stream_frame(d, buf, n, &f, err);
    if ((kind == 'I' || kind == 'U' || kind == 'D') && f.len >= 5) {
        uint32_t relid = ferry__be32(f.data + 1);
        for (int i = 0; i < d->n_m; i++) {
            struct ferry_pg_demux_member *mb = d->m[i];
            if (!mb->left && mb->has_rel && mb->relid == relid) {
                if (d->txn_final >= mb->j.start) d->routed++; /* not a transaction it drops */
                send_begin(d, mb);
                struct qent e = {.buf = buf, .n = n, .kind = F_LIBPQ};
                push(d, mb, &e);
                return FERRY_OK;
            }
        }
        PQfreemem(buf); /* a table of the publication that no member follows */
        return FERRY_OK;
    }
    uint64_t commit_end = 0;
    if (kind == 'R') rc = route_relation(d, f.data, f.len, buf, n, err);
    if (kind == 'B' || kind == 'C') {
        struct ferry_pg_repl_msg m;
        rc = ferry_pg_repl_decode(&d->dec, f.data, f.len, &m, err);
        d->in_txn = kind == 'B';
        if (kind == 'B') d->txn_final = m.final_lsn;
        if (kind == 'C') commit_end = m.end_lsn;
        if (rc == FERRY_OK && kind == 'C' && m.end_lsn > d->last_commit) {
            d->last_commit = m.end_lsn;
            d->last_commit_time = m.time;
        }
    }
    if (rc != FERRY_OK) {
        PQfreemem(buf);
        return rc;
    }
    if (kind == 'B') return begin_keep(d, buf, n, err); /* sent with a table's first frame */
    /* inside a transaction: the Relation's table, and for a Truncate every table, first get
     * the Begin (a table takes the transaction's Commit only when it got its Begin) */
    if (d->in_txn && (kind == 'R' || kind == 'T') && f.len >= 5) {
        uint32_t relid = ferry__be32(f.data + 1);
        for (int i = 0; i < d->n_m; i++)
            if (kind == 'T' || (d->m[i]->has_rel && d->m[i]->relid == relid))
                send_begin(d, d->m[i]);
    }
    bool epoch = kind == 'C' && d->epoch_rows > 0 && d->routed >= d->epoch_rows;
    rc = broadcast(d, buf, n, epoch, commit_end, err);
    if (kind == 'C') begin_drop(d);
    if (rc == FERRY_OK && kind == 'C') d->stopped_reading = all_finished(d, 'C', commit_end, epoch);
    if (rc == FERRY_OK && kind == 'C') maybe_cut(d);
    return rc;
}

/* ---- the session -------------------------------------------------------------------------- */

static int status_raw(PGconn *c, uint64_t write, uint64_t flush)
{
    uint8_t msg[34];
    int64_t now = ferry_now_wall_us() - FERRY_PG_REPL_EPOCH_US;
    ferry_pg_repl_status_update(msg, write > flush ? write : flush, flush, flush, now, false);
    return PQputCopyData(c, (const char *)msg, sizeof msg) == 1 && PQflush(c) == 0 ? FERRY_OK
                                                                                   : FERRY_EIO;
}

/* mu held (members' flush): flush = the least of every member's. */
static uint64_t least_flush(const struct demux *d)
{
    uint64_t f = UINT64_MAX;
    for (int i = 0; i < d->n_m; i++)
        if (d->m[i]->j.flush < f) f = d->m[i]->j.flush;
    return f == UINT64_MAX ? 0 : f;
}

static int send_status(struct demux *d, bool reply)
{
    uint8_t msg[34];
    int64_t now = ferry_now_wall_us() - FERRY_PG_REPL_EPOCH_US;
    uint64_t flush = least_flush(d);
    uint64_t write = d->received > d->last_commit ? d->received : d->last_commit;
    if (write < flush) write = flush;
    ferry_pg_repl_status_update(msg, write, flush, flush, now, reply);
    d->last_status = ferry_now_mono_us();
    return PQputCopyData(d->c, (const char *)msg, sizeof msg) == 1 && PQflush(d->c) == 0
               ? FERRY_OK
               : FERRY_EIO;
}

/* CopyDone, then drain until the server ends the command (so the slot is released before
 * anyone acknowledges it), at most a few seconds. */
static void end_stream(PGconn *c)
{
    if (PQputCopyEnd(c, NULL) == 1) PQflush(c);
    int64_t deadline = ferry_now_mono_us() + 5000000;
    for (;;) {
        char *buf = NULL;
        int n = PQgetCopyData(c, &buf, 1);
        if (n > 0) {
            PQfreemem(buf);
            continue;
        }
        if (n < 0 || ferry_now_mono_us() > deadline) break;
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        poll(&pfd, 1, 100);
        if (!PQconsumeInput(c)) break;
    }
    PGresult *res;
    while (PQstatus(c) == CONNECTION_OK && (res = PQgetResult(c)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        PQclear(res);
        if (st == PGRES_COPY_BOTH || st == PGRES_COPY_OUT) break;
    }
}

static int start_sql(struct demux *d, struct ferry_buf *sql, struct ferry_error *err)
{
    char at[32];
    ferry_pg_lsn_format(d->start, at, sizeof at);
    /* publication_names is a list of identifiers inside a string literal. */
    struct ferry_buf names;
    ferry_buf_init(&names, 0);
    int rc = ferry__pg_quote_ident(&names, d->pub, err);
    char *lit = rc == FERRY_OK ? PQescapeLiteral(d->c, names.data, names.len) : NULL;
    if (rc == FERRY_OK && lit == NULL) rc = nomem(err);
    bool v14 = PQserverVersion(d->c) >= 140000;
    bool stream = v14 && d->stream_large_txns;
    if (rc == FERRY_OK) rc = ferry_buf_printf(sql, "START_REPLICATION SLOT ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(sql, d->slot, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(
            sql, " LOGICAL %s (\"proto_version\" '%s', \"publication_names\" %s%s)", at,
            /* stream_large_transactions (14+): transactions above logical_decoding_work_mem
             * streamed as they are decoded (pg_spool.h), not written to the server's disk */
            stream ? "2', \"streaming\" 'on" : "1", lit,
            /* logical messages: the watermarks of tables read in chunks */
            v14 ? ", \"messages\" 'true'" : "");
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (lit) PQfreemem(lit);
    ferry_buf_release(&names);
    return rc;
}

static int start_replication(struct demux *d, struct ferry_error *err)
{
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    int rc = start_sql(d, &sql, err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&sql);
        return rc;
    }
    /* A walsender that streamed the slot a moment ago may still be releasing it. */
    int64_t deadline = ferry_now_mono_us() + 10000000;
    PGresult *res = PQexec(d->c, sql.data);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    while (PQresultStatus(res) != PGRES_COPY_BOTH && state != NULL && !strcmp(state, "55006") &&
           ferry_now_mono_us() < deadline) {
        PQclear(res);
        usleep(100000);
        res = PQexec(d->c, sql.data);
        state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    }
    char at[32];
    ferry_pg_lsn_format(d->start, at, sizeof at);
    if (PQresultStatus(res) != PGRES_COPY_BOTH && state != NULL && !strcmp(state, "42704"))
        rc = ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                             WHAT ": %s: replication slot \"%s\" does not exist any more; changes "
                                  "may have been lost, so resnapshot required: run `ferry cdc "
                                  "drop` on the pipeline file and run it again (a new snapshot is "
                                  "copied), or set `on_slot_lost: resnapshot`",
                             d->peer, d->slot);
    else if (PQresultStatus(res) != PGRES_COPY_BOTH)
        rc = ferry__pg_error(err, FERRY_ESOURCE, d->c, res,
                             WHAT ": %s: starting replication from slot \"%s\" at %s", d->peer,
                             d->slot, at);
    PQclear(res);
    ferry_buf_release(&sql);
    return rc;
}

static int open_session(struct demux *d, struct ferry_error *err)
{
    int rc = ferry__pg_connect_ex(d->url, &d->opts, "database", WHAT " (replication)", &d->c, err);
    /* Values arrive as the walsender's text output: pin the forms the parsers read. */
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(d->c,
                            "SET TimeZone = 'UTC'; SET bytea_output = 'hex'; "
                            "SET extra_float_digits = 3; SET IntervalStyle = 'postgres'",
                            FERRY_ESOURCE, WHAT ": replication session", err);
    if (rc == FERRY_OK) rc = start_replication(d, err);
    d->streaming = rc == FERRY_OK;
    return rc;
}

/* ---- sessions parked between --follow runs ----------------------------------------------- */

struct parked {
    PGconn *c;
    char slot[64], pub[64];
    uint64_t pos;      /* where every table of the session stopped */
    uint64_t received; /* furthest WAL position the server reported */
    uint64_t flush;    /* last flush reported to the server */
    int64_t since;     /* parked at, monotonic us */
    struct rels rels;  /* the session's Relation messages (sent once per session) */
    struct ferry_pg_spools spools; /* its streamed transactions not yet committed */
};

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static struct parked parked[MAX_PARKED];
static bool park_atexit_set;

/* park_lock held. Reports the last flush, ends the copy, closes. */
static void parked_close(struct parked *p)
{
    if (p->c != NULL) {
        if (PQstatus(p->c) == CONNECTION_OK && status_raw(p->c, p->received, p->flush) == FERRY_OK)
            end_stream(p->c);
        PQfinish(p->c);
    }
    rels_free(&p->rels);
    ferry__pg_spools_release(&p->spools);
    memset(p, 0, sizeof *p);
}

static void park_exit(void)
{
    pthread_mutex_lock(&park_lock);
    for (int i = 0; i < MAX_PARKED; i++)
        if (parked[i].c != NULL) parked_close(&parked[i]);
    pthread_mutex_unlock(&park_lock);
}

/* park_lock held. */
static struct parked *park_find(const char *slot)
{
    for (int i = 0; i < MAX_PARKED; i++)
        if (parked[i].c != NULL && !strcmp(parked[i].slot, slot)) return &parked[i];
    return NULL;
}

/* Takes the parked session of the slot when it stopped exactly at `pos`; any other parked
 * session of the slot is closed (it holds the slot). */
static bool park_take(const char *slot, const char *pub, uint64_t pos, bool want,
                      struct parked *out)
{
    bool ok = false;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL) {
        if (want && p->pos == pos && !strcmp(p->pub, pub) && PQstatus(p->c) == CONNECTION_OK &&
            ferry_now_mono_us() - p->since < PARK_MAX_US) {
            *out = *p;
            memset(p, 0, sizeof *p);
            ok = true;
        } else {
            parked_close(p);
        }
    }
    pthread_mutex_unlock(&park_lock);
    return ok;
}

static bool park_put(struct demux *d, uint64_t pos, uint64_t flush)
{
    bool ok = false;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(d->slot);
    if (p != NULL) parked_close(p);
    for (int i = 0; p == NULL && i < MAX_PARKED; i++)
        if (parked[i].c == NULL) p = &parked[i];
    if (p != NULL && !park_atexit_set) park_atexit_set = atexit(park_exit) == 0;
    /* Without the exit hook a parked session could be left unclosed: keep none. */
    if (p != NULL && park_atexit_set) {
        *p = (struct parked){.c = d->c,
                             .pos = pos,
                             .received = d->received,
                             .flush = flush,
                             .since = ferry_now_mono_us(),
                             .rels = d->rels,
                             .spools = d->spools};
        snprintf(p->slot, sizeof p->slot, "%s", d->slot);
        snprintf(p->pub, sizeof p->pub, "%s", d->pub);
        memset(&d->rels, 0, sizeof d->rels);
        p->spools.what = WHAT ": a parked session"; /* d's string goes with d */
        ferry__pg_spools_init(&d->spools, d->spools_what);
        d->c = NULL;
        ok = true;
    }
    pthread_mutex_unlock(&park_lock);
    return ok;
}

int ferry__pg_demux_park_ack(const char *slot, uint64_t lsn)
{
    int rc = FERRY_ENOTFOUND;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL && p->pos == lsn && status_raw(p->c, p->received, lsn) == FERRY_OK) {
        p->flush = lsn;
        rc = FERRY_OK;
    } else if (p != NULL) {
        parked_close(p);
    }
    pthread_mutex_unlock(&park_lock);
    return rc;
}

/* ---- the reader thread ----------------------------------------------------------------- */

/* mu held: whether a member that joined was asked to stop (pause, cancel). */
static bool stop_asked(const struct demux *d)
{
    for (int i = 0; i < d->n_m; i++)
        if (!d->m[i]->left && d->m[i]->j.rw != NULL && ferry_rw_stop_requested(d->m[i]->j.rw))
            return true;
    return false;
}

/* Until `expected` members joined, or none joined for GATHER_US (a commit group's:
 * GATHER_GROUP_US, or a stop request), or every one left. */
static void gather(struct demux *d)
{
    pthread_mutex_lock(&mu);
    while (d->n_m + d->n_declined < d->expected && active_members(d) > 0 &&
           ferry_now_mono_us() - d->last_join < (d->group ? GATHER_GROUP_US : GATHER_US) &&
           !(d->group && stop_asked(d)))
        timed_wait(&d->cv, 50);
    bool partial = d->n_m + d->n_declined < d->expected && active_members(d) > 0;
    if (d->group && partial && stop_asked(d)) {
        /* Paused or canceled while tables were still joining: not one frame is read. A
         * group of the tables that joined would commit their part of source transactions
         * whose other part belongs to tables not there yet (a reader saw half of them until
         * the next run); each member ends where it started (ferry__pg_demux_next). */
        d->stopped_reading = true;
    } else if (d->group && partial)
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": slot %s: %d of %d table(s) joined its session: a table that joins "
                       "later streams in a session of its own, its source transactions not "
                       "applied together with the others' in this run",
                  d->slot, d->n_m, d->expected);
    d->state = D_RUNNING;
    d->start = UINT64_MAX;
    for (int i = 0; i < d->n_m; i++)
        if (!d->m[i]->left && d->m[i]->j.start < d->start) d->start = d->m[i]->j.start;
    pthread_mutex_unlock(&mu);
}

/* mu held. Whether a parked session can serve every member: all start where it stopped. */
static bool continuable(const struct demux *d, uint64_t *pos)
{
    bool ok = d->n_m > 0;
    *pos = 0;
    for (int i = 0; i < d->n_m && ok; i++) {
        const struct ferry_pg_demux_member *mb = d->m[i];
        if (mb->left) continue;
        if (*pos == 0) *pos = mb->j.start;
        ok = mb->j.keep_session && mb->j.can_continue && mb->j.start == *pos;
    }
    return ok && *pos != 0;
}

/* mu held: the kept Relation frames into every member's queue (a continued session sends
 * them no more), routing each. */
static int replay_rels(struct demux *d, struct ferry_error *err)
{
    for (int r = 0; r < d->rels.n; r++) {
        struct ferry_pg_repl_frame f;
        const struct relframe *rf = &d->rels.v[r];
        int rc = ferry_pg_repl_parse_frame((const uint8_t *)rf->buf, (size_t)rf->n, &f, err);
        struct ferry_pg_repl_msg m;
        if (rc == FERRY_OK) rc = ferry_pg_repl_decode(&d->dec, f.data, f.len, &m, err);
        if (rc != FERRY_OK) return rc;
        for (int i = 0; i < d->n_m; i++) {
            struct ferry_pg_demux_member *mb = d->m[i];
            if (mb->left) continue; /* its strings are gone with its stream */
            const char *nsp = m.nspname[0] ? m.nspname : "pg_catalog";
            if (!strcmp(nsp, mb->j.schema_name) && !strcmp(m.relname, mb->j.table)) {
                mb->relid = m.relid;
                mb->has_rel = true;
            }
            struct qent e = {.buf = ferry_malloc((size_t)rf->n), .n = rf->n, .kind = F_OWN};
            if (e.buf == NULL) return nomem(err);
            memcpy(e.buf, rf->buf, (size_t)rf->n);
            push(d, mb, &e);
        }
    }
    return FERRY_OK;
}

/* A parked session continued, or a new one at the least start of the members. */
static int begin_session(struct demux *d, struct ferry_error *err)
{
    pthread_mutex_lock(&mu);
    uint64_t pos = 0;
    bool want = continuable(d, &pos);
    pthread_mutex_unlock(&mu);
    struct parked pk;
    if (park_take(d->slot, d->pub, pos, want, &pk)) {
        d->c = pk.c;
        d->received = pk.received;
        d->rels = pk.rels;
        d->spools = pk.spools; /* the continued stream goes on with their next blocks */
        d->spools.what = d->spools_what;
        d->streaming = d->continued = true;
        pthread_mutex_lock(&mu);
        int rc = replay_rels(d, err);
        pthread_mutex_unlock(&mu);
        return rc;
    }
    return open_session(d, err);
}

static void log_members(struct demux *d)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < d->n_m; i++)
        if (!d->m[i]->left)
            ferry_log(FERRY_LOG_DEBUG,
                      WHAT ": table %s: streaming from slot %s (%s session), %d "
                           "table(s) read it",
                      d->m[i]->j.from, d->slot, d->continued ? "continued" : "new", d->n_m);
    pthread_mutex_unlock(&mu);
}

/* One pass of the read loop: the frames libpq holds handed over, or a wait of up to 100 ms. */
static int read_once(struct demux *d, struct ferry_error *err)
{
    char *buf = NULL;
    int n = PQgetCopyData(d->c, &buf, 1);
    if (n > 0) {
        d->heard = ferry_now_mono_us();
        pthread_mutex_lock(&mu);
        size_t bytes = (size_t)n;
        int rc = dispatch(d, buf, n, err);
        /* The frames libpq already holds follow under the same lock, each only while a table
         * still reads (keep_reading): a frame taken from libpq and not dispatched would be
         * missing from the session when it is parked and continued. */
        for (int k = 1; rc == FERRY_OK && k < BURST_FRAMES && active_members(d) > 0 &&
                        !d->stopped_reading;
             k++) {
            buf = NULL;
            n = PQgetCopyData(d->c, &buf, 1);
            if (n <= 0) break;
            bytes += (size_t)n;
            rc = dispatch(d, buf, n, err);
        }
        d->coalesce = n == 0 && bytes < COALESCE_BYTES;
        if (d->wake_due) wake(d, false);
        pthread_mutex_unlock(&mu);
        if (rc != FERRY_OK || n >= 0) return rc;
    }
    if (n == -1) {
        PGresult *res = PQgetResult(d->c);
        int rc = ferry__pg_error(err, FERRY_ESOURCE, d->c, res,
                                 WHAT ": %s: slot \"%s\": the server ended the replication stream",
                                 d->peer, d->slot);
        PQclear(res);
        d->streaming = false;
        return rc;
    }
    if (n == -2) {
        d->streaming = false;
        return ferry__pg_error(err, FERRY_EIO, d->c, NULL,
                               WHAT ": %s: slot \"%s\": reading the replication stream", d->peer,
                               d->slot);
    }
    int64_t now = ferry_now_mono_us();
    int rc = FERRY_OK;
    pthread_mutex_lock(&mu);
    if (now - d->last_status >= STATUS_EVERY_US) {
        rc = send_status(d, false);
    } else if (now - d->last_probe >= PROBE_EVERY_US && now - d->last_data >= 20000) {
        /* Idle: ask where the server's decoding is, so that tables notice they caught up. */
        d->last_probe = now;
        rc = send_status(d, true);
    }
    /* idle after a commit: the commit group need not wait for more */
    if (rc == FERRY_OK && d->group && d->uncut && !d->in_txn && !d->stopped_reading &&
        now - d->last_data >= CUT_IDLE_US)
        broadcast_cut(d);
    bool due = d->wake_due;
    pthread_mutex_unlock(&mu);
    if (rc != FERRY_OK)
        return ferry__pg_error(err, FERRY_EIO, d->c, NULL,
                               WHAT ": %s: slot \"%s\": sending standby status", d->peer, d->slot);
    if (d->opts.io_timeout_ms > 0 && now - d->heard > d->opts.io_timeout_ms * 1000) {
        d->streaming = false;
        return ferry_error_set(err, FERRY_ETIMEOUT, "postgres",
                               WHAT ": %s: slot \"%s\": the replication stream sent nothing for "
                                    "%lld ms although asked (io_timeout); the server or the "
                                    "network stopped answering",
                               d->peer, d->slot, (long long)d->opts.io_timeout_ms);
    }
    if (d->coalesce) {
        d->coalesce = false;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = COALESCE_US * 1000L};
        nanosleep(&ts, NULL);
    }
    struct pollfd pfd = {.fd = PQsocket(d->c), .events = POLLIN};
    /* Frames a member waits for: handed over once the socket stays quiet a moment (more
     * usually follow at once, and are woken for together). */
    if (!due || poll(&pfd, 1, WAKE_IDLE_MS) == 0) {
        if (due) {
            pthread_mutex_lock(&mu);
            wake(d, true);
            pthread_mutex_unlock(&mu);
        }
        poll(&pfd, 1, 100);
    }
    if (!PQconsumeInput(d->c)) {
        d->streaming = false;
        return ferry__pg_error(err, FERRY_EIO, d->c, NULL,
                               WHAT ": %s: slot \"%s\": reading the replication stream", d->peer,
                               d->slot);
    }
    return FERRY_OK;
}

static bool keep_reading(struct demux *d)
{
    pthread_mutex_lock(&mu);
    bool more = active_members(d) > 0 && !d->stopped_reading;
    pthread_mutex_unlock(&mu);
    return more;
}

static void fail(struct demux *d, const struct ferry_error *e)
{
    pthread_mutex_lock(&mu);
    d->failed = true;
    d->err = *e;
    for (int i = 0; i < d->n_m; i++)
        pthread_cond_signal(&d->m[i]->cv);
    pthread_mutex_unlock(&mu);
}

/* Waits until every member left; whether the session may be parked, and where. */
static bool wait_all_left(struct demux *d, uint64_t *pos, uint64_t *flush)
{
    pthread_mutex_lock(&mu);
    d->stopped_reading = true;
    for (int i = 0; i < d->n_m; i++)
        pthread_cond_signal(&d->m[i]->cv);
    while (active_members(d) > 0)
        timed_wait(&d->cv, 100);
    bool park = d->streaming && !d->in_txn && !d->failed && d->n_m > 0;
    *pos = 0;
    for (int i = 0; i < d->n_m && park; i++) {
        const struct ferry_pg_demux_member *mb = d->m[i];
        if (*pos == 0) *pos = mb->pos;
        park = mb->clean && mb->j.keep_session && mb->pos == *pos;
    }
    /* nothing read past the position the tables saved */
    park = park && *pos != 0 && d->last_commit <= *pos;
    *flush = least_flush(d);
    pthread_mutex_unlock(&mu);
    return park;
}

static void *reader_main(void *arg)
{
    struct demux *d = arg;
    struct ferry_error e;
    ferry_error_clear(&e);
    gather(d);
    int rc = keep_reading(d) ? begin_session(d, &e) : FERRY_OK;
    if (rc == FERRY_OK && d->c != NULL) log_members(d);
    int64_t now = ferry_now_mono_us();
    d->last_status = d->last_probe = d->last_data = d->heard = now;
    while (rc == FERRY_OK && d->c != NULL && keep_reading(d))
        rc = read_once(d, &e);
    if (rc != FERRY_OK) fail(d, &e);
    uint64_t pos = 0, flush = 0;
    bool park = wait_all_left(d, &pos, &flush);
    int spooled = d->spools.n;
    if (park && park_put(d, pos, flush))
        ferry_log(FERRY_LOG_DEBUG,
                  WHAT ": slot %s: session kept at the end of the run (%d streamed "
                       "transaction(s) in progress)",
                  d->slot, spooled);
    if (d->c != NULL) {
        if (d->streaming) end_stream(d->c);
        PQfinish(d->c);
        d->c = NULL;
    }
    pthread_mutex_lock(&mu);
    d->state = D_ENDED;
    reg_remove(d);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* ---- members --------------------------------------------------------------------------- */

static void demux_free(struct demux *d)
{
    for (int i = 0; i < d->n_m; i++) {
        pthread_cond_destroy(&d->m[i]->cv);
        ferry_free(d->m[i]->q);
        ferry_free(d->m[i]);
    }
    ferry_free(d->m);
    begin_drop(d);
    rels_free(&d->rels);
    ferry__pg_spools_release(&d->spools);
    ferry_pg_repl_decoder_release(&d->dec);
    pthread_cond_destroy(&d->cv);
    ferry_secret_free(d->url); /* it may hold a password */
    ferry_free(d->peer);
    ferry_free(d);
}

static struct demux *demux_new(const struct ferry_pg_demux_join *j)
{
    struct demux *d = ferry_calloc(1, sizeof *d);
    if (d == NULL) return NULL;
    snprintf(d->slot, sizeof d->slot, "%s", j->slot);
    snprintf(d->pub, sizeof d->pub, "%s", j->pub);
    d->url = ferry_strdup(j->url);
    d->peer = ferry_strdup(j->peer ? j->peer : "");
    if (d->url == NULL || d->peer == NULL) {
        ferry_secret_free(d->url);
        ferry_free(d->peer);
        ferry_free(d);
        return NULL;
    }
    d->opts = *j->opts;
    d->stream_large_txns = j->stream_large_txns;
    d->expected = j->expected > 0 ? j->expected : 1;
    d->epoch_rows = j->epoch_rows;
    pthread_cond_init(&d->cv, NULL);
    ferry_pg_repl_decoder_init(&d->dec);
    snprintf(d->spools_what, sizeof d->spools_what, WHAT ": slot %s", d->slot);
    ferry__pg_spools_init(&d->spools, d->spools_what);
    return d;
}

/* mu held: m joins d. */
static int add_member(struct demux *d, const struct ferry_pg_demux_join *j,
                      struct ferry_pg_demux_member **out)
{
    struct ferry_pg_demux_member *m = ferry_calloc(1, sizeof *m);
    struct ferry_pg_demux_member **v = ferry_realloc(d->m, (size_t)(d->n_m + 1) * sizeof *v);
    if (v != NULL) d->m = v;
    if (m != NULL) m->q = ferry_calloc(QUEUE_FRAMES, sizeof *m->q);
    if (m == NULL || v == NULL || m->q == NULL) {
        if (m) ferry_free(m->q);
        ferry_free(m);
        return FERRY_ENOMEM;
    }
    m->d = d;
    m->j = *j;
    m->finished = j->start >= j->end;
    /* counted in its commit group before the session can read anything of it */
    if (j->rw != NULL && ferry_rw_grouped(j->rw)) {
        d->group = true;
        ferry_rw_group_enter(j->rw);
    }
    pthread_cond_init(&m->cv, NULL);
    d->m[d->n_m++] = m;
    d->last_join = ferry_now_mono_us();
    pthread_cond_broadcast(&d->cv);
    *out = m;
    return FERRY_OK;
}

/* mu held: the declines of slot that came before its session was made. */
static int take_declined(const char *slot)
{
    int n = 0;
    for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++)
        if (declined[i].n > 0 && !strcmp(declined[i].slot, slot)) {
            if (ferry_now_mono_us() - declined[i].at < GATHER_US) n = declined[i].n;
            declined[i].n = 0;
        }
    return n;
}

void ferry__pg_demux_decline(const char *slot)
{
    pthread_mutex_lock(&mu);
    struct demux *d = reg_find(slot);
    if (d != NULL && d->state == D_GATHERING) {
        d->n_declined++;
        pthread_cond_broadcast(&d->cv);
    } else if (d == NULL) {
        size_t k = 0;
        for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
            if (!strcmp(declined[i].slot, slot)) {
                k = i;
                break;
            }
            if (declined[i].n == 0) k = i;
        }
        int64_t now = ferry_now_mono_us();
        if (strcmp(declined[k].slot, slot) != 0 || now - declined[k].at >= GATHER_US)
            declined[k].n = 0; /* another slot's, or of an earlier run */
        snprintf(declined[k].slot, sizeof declined[k].slot, "%s", slot);
        declined[k].n++;
        declined[k].at = now;
    }
    pthread_mutex_unlock(&mu);
}

/* mu held: a new demultiplexer for j's slot with m its first member, its reader started. */
static int create(const struct ferry_pg_demux_join *j, struct ferry_pg_demux_member **out,
                  struct ferry_error *err)
{
    struct demux *d = demux_new(j);
    if (d != NULL) d->n_declined = take_declined(j->slot);
    if (d == NULL || add_member(d, j, out) != FERRY_OK || !reg_add(d)) {
        if (d) demux_free(d);
        return d ? ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                                   WHAT ": too many replication slots streamed at once")
                 : nomem(err);
    }
    if (pthread_create(&d->thread, NULL, reader_main, d) != 0) {
        reg_remove(d);
        demux_free(d);
        return ferry_error_set(err, FERRY_ENOMEM, "postgres",
                               WHAT ": slot %s: cannot start the replication reader", j->slot);
    }
    d->thread_started = true;
    return FERRY_OK;
}

int ferry__pg_demux_join(const struct ferry_pg_demux_join *j, struct ferry_pg_demux_member **out,
                         struct ferry_error *err)
{
    *out = NULL;
    pthread_mutex_lock(&mu);
    int rc = FERRY_OK;
    for (;;) {
        struct demux *d = reg_find(j->slot);
        if (d == NULL) {
            rc = create(j, out, err);
            break;
        }
        if (d->state == D_GATHERING && active_members(d) > 0) {
            rc = add_member(d, j, out) == FERRY_OK ? FERRY_OK : nomem(err);
            break;
        }
        /* Its session started without this table: wait for it to end. */
        int stop = ferry_rw_stop_requested(j->rw);
        if (stop != 0) {
            rc = stop == FERRY_ECANCELED ? FERRY_ECANCELED : FERRY_EPAUSED;
            ferry_error_set(err, rc, "postgres", WHAT ": table %s: stream stopped", j->from);
            break;
        }
        timed_wait(&reg_cv, 100);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* mu held: up to TAKE_FRAMES queued frames (TAKE_BYTES, at least one) moved into m's own
 * cache, in order; the reader waiting for room is woken once there is enough. */
static void take(struct demux *d, struct ferry_pg_demux_member *m)
{
    size_t bytes = 0;
    while (m->count > 0 && m->take_count < TAKE_FRAMES &&
           (m->take_count == 0 || bytes + (size_t)m->q[m->head].n <= TAKE_BYTES)) {
        struct qent *e = &m->q[m->head];
        bytes += (size_t)e->n;
        m->bytes -= (size_t)e->n;
        m->take[(m->take_head + m->take_count) % TAKE_FRAMES] = *e;
        m->take_count++;
        memset(e, 0, sizeof *e);
        m->head = (m->head + 1) % QUEUE_FRAMES;
        m->count--;
    }
    if (room_enough(m)) pthread_cond_signal(&d->cv);
}

int ferry__pg_demux_next(struct ferry_pg_demux_member *m, int wait_ms,
                         struct ferry_pg_demux_frame *f, struct ferry_error *err)
{
    memset(f, 0, sizeof *f);
    struct demux *d = m->d;
    int rc = FERRY_OK;
    if (m->take_count == 0) {
        pthread_mutex_lock(&mu);
        if (m->count == 0 && !d->failed && !d->stopped_reading) {
            m->waiting = true; /* wake() signals, at most wait_ms later a look anyway */
            timed_wait(&m->cv, wait_ms);
            m->waiting = false;
        }
        if (m->count > 0) {
            take(d, m);
        } else if (d->failed) {
            if (err) *err = d->err;
            rc = d->err.code;
        } else if (d->stopped_reading && ferry_rw_stop_requested(m->j.rw) != 0) {
            /* the session stopped for a pause or cancel (gather): this stream stops too */
            rc = ferry_rw_stop_requested(m->j.rw) == FERRY_ECANCELED ? FERRY_ECANCELED
                                                                     : FERRY_EPAUSED;
            ferry_error_set(err, rc, "postgres", WHAT ": table %s: stream stopped", m->j.from);
        } else if (d->stopped_reading) {
            rc = ferry_error_set(err, FERRY_EIO, "postgres",
                                 WHAT ": slot \"%s\": the replication session ended before the "
                                      "table reached its end",
                                 d->slot);
        }
        pthread_mutex_unlock(&mu);
    }
    if (rc != FERRY_OK || m->take_count == 0) return rc;
    struct qent *e = &m->take[m->take_head];
    f->p = (const uint8_t *)e->buf;
    f->n = (size_t)e->n;
    f->epoch_end = e->epoch;
    f->cut = e->cut;
    f->cut_commit = e->commit;
    f->cut_commit_time = e->commit_time;
    f->buf_ = e->buf;
    f->kind_ = e->kind;
    f->shared_ = e->sh;
    memset(e, 0, sizeof *e);
    m->take_head = (m->take_head + 1) % TAKE_FRAMES;
    m->take_count--;
    return FERRY_OK;
}

void ferry__pg_demux_frame_release(struct ferry_pg_demux_frame *f)
{
    if (f->buf_ != NULL) {
        struct qent e = {.buf = f->buf_, .n = (int)f->n, .kind = f->kind_, .sh = f->shared_};
        qent_release(&e);
    }
    memset(f, 0, sizeof *f);
}

void ferry__pg_demux_leave(struct ferry_pg_demux_member *m, bool clean, uint64_t pos)
{
    if (m == NULL) return;
    struct demux *d = m->d;
    pthread_mutex_lock(&mu);
    m->left = true;
    m->clean = clean;
    m->pos = pos;
    while (m->take_count > 0) {
        qent_release(&m->take[m->take_head]);
        m->take_head = (m->take_head + 1) % TAKE_FRAMES;
        m->take_count--;
    }
    while (m->count > 0) {
        m->bytes -= (size_t)m->q[m->head].n;
        qent_release(&m->q[m->head]);
        m->head = (m->head + 1) % QUEUE_FRAMES;
        m->count--;
    }
    d->n_left++;
    bool last = active_members(d) == 0;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&mu);
    if (!last) return;
    /* The last one: the session is closed or parked before the run acknowledges the slot. */
    if (d->thread_started) pthread_join(d->thread, NULL);
    demux_free(d);
}
