/* connectors/mysql/my_hub.c - the binary log connection a run's cdc streams share (contract
 * in my_hub.h). Owns the registry of hubs (one process-wide mutex, taken before a hub's),
 * each hub's dump connection, its reader thread and the subscribers' bounded queues. Calls
 * libmariadb (fetch; the connection is opened by a subscriber's callback) and my_binlog.c
 * (header, ROTATE, TABLE_MAP names, rows table id). Called by my_source.c's stream. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "connectors/mysql/my_binlog.h"
#include "connectors/mysql/my_hub.h"
#include "ferry/core.h"

#define BL_POS(seq, off) ((int64_t)(((uint64_t)(seq) << 32) | (uint32_t)(off)))
#define BL_SEQ(pos) ((uint32_t)((uint64_t)(pos) >> 32))
#define BIG_SLOT ((size_t)1 << 20) /* a slot buffer grown past this is freed after use */

struct slot {
    uint8_t *p;
    size_t n, cap;
};

enum hub_state { GATHER, OPENING, RUNNING, FAILED };

struct ferry_my_hub_sub {
    struct ferry_my_hub *hub;
    char db[260], table[260];
    int64_t start;
    uint64_t table_id;
    bool have_id, left, holding;
    ferry_my_hub_open_fn open;
    void *open_ctx;
    struct slot q[FERRY_MY_HUB_SLOTS];
    int head, count;
    pthread_cond_t ready; /* an event was queued, or the hub failed */
};

struct ferry_my_hub {
    struct ferry_my_hub *next;
    char *key, peer[256];
    pthread_mutex_t lock;
    pthread_cond_t cond; /* answers, state changes, queue space */
    int expected, answered, active, n_subs;
    struct ferry_my_hub_sub **subs; /* up to `expected`, freed with the hub */
    bool closed, stopping, thread_started, crc;
    enum hub_state state;
    MYSQL *m;
    MARIADB_RPL *rpl;
    int tm_phl;
    uint32_t seq; /* the binlog file the reader is in */
    pthread_t thread;
    char err_msg[700];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_my_hub *registry;

static struct timespec deadline_in(int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

static struct ferry_my_hub *hub_new(const char *key, const char *peer, int expected)
{
    struct ferry_my_hub *h = ferry_calloc(1, sizeof *h);
    if (h == NULL) return NULL;
    h->key = ferry_strdup(key);
    h->subs = ferry_calloc((size_t)expected + 1, sizeof *h->subs);
    if (h->key == NULL || h->subs == NULL) {
        ferry_free(h->key);
        ferry_free(h->subs);
        ferry_free(h);
        return NULL;
    }
    snprintf(h->peer, sizeof h->peer, "%s", peer);
    h->expected = expected;
    h->tm_phl = 8;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    return h;
}

static struct ferry_my_hub_sub *sub_new(struct ferry_my_hub *h, const char *db, const char *table,
                                        int64_t start, ferry_my_hub_open_fn open, void *ctx)
{
    struct ferry_my_hub_sub *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->hub = h;
    snprintf(s->db, sizeof s->db, "%s", db);
    snprintf(s->table, sizeof s->table, "%s", table);
    s->start = start;
    s->open = open;
    s->open_ctx = ctx;
    pthread_cond_init(&s->ready, NULL);
    h->subs[h->n_subs++] = s;
    h->active++;
    return s;
}

static void free_slots(struct ferry_my_hub_sub *s)
{
    for (int i = 0; i < FERRY_MY_HUB_SLOTS; i++) {
        ferry_free(s->q[i].p);
        s->q[i] = (struct slot){0};
    }
    s->count = 0;
}

/* Stops the reader and frees everything (the hub is out of the registry, nobody holds it). */
static void hub_destroy(struct ferry_my_hub *h)
{
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    if (h->thread_started) {
        if (h->m) shutdown(mysql_get_socket(h->m), SHUT_RDWR); /* wakes a waiting fetch */
        pthread_join(h->thread, NULL);
    }
    if (h->rpl) mariadb_rpl_close(h->rpl);
    if (h->m) mysql_close(h->m);
    for (int i = 0; i < h->n_subs; i++) {
        free_slots(h->subs[i]);
        pthread_cond_destroy(&h->subs[i]->ready);
        ferry_free(h->subs[i]);
    }
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    ferry_free(h->subs);
    ferry_free(h->key);
    ferry_free(h);
}

/* With registry_lock and h->lock held: true, and h out of the registry, when every answer
 * is in (or the wait ended) and no subscriber is left. The caller that saw it destroys h
 * after unlocking: deciding under the registry lock, in the same section as the caller's own
 * leave or answer, makes that caller the only one (two members leaving at once both saw
 * active == 0 when each decided after its own unlock, and both freed h). */
static void sub_leave_locked(struct ferry_my_hub_sub *s);

static bool hub_unlink_if_gone(struct ferry_my_hub *h)
{
    if (!(h->closed && h->active == 0 && h->state != OPENING)) return false;
    for (struct ferry_my_hub **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    return true;
}

/* s leaves its hub; the last one out frees it. */
static void sub_leave(struct ferry_my_hub_sub *s)
{
    struct ferry_my_hub *h = s->hub;
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_lock(&h->lock);
    sub_leave_locked(s);
    bool gone = hub_unlink_if_gone(h);
    pthread_mutex_unlock(&h->lock);
    pthread_mutex_unlock(&registry_lock);
    if (gone) hub_destroy(h);
}

/* ---- the reader ---- */

static void hub_fail(struct ferry_my_hub *h, const char *why)
{
    pthread_mutex_lock(&h->lock);
    if (!h->stopping && h->state == RUNNING) {
        h->state = FAILED;
        snprintf(h->err_msg, sizeof h->err_msg,
                 "mysql source: %s: reading the binary log (the pipeline's shared stream): %s",
                 h->peer, why);
        for (int i = 0; i < h->n_subs; i++)
            pthread_cond_signal(&h->subs[i]->ready);
    }
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

/* Copies one event into s's queue, waiting for space; false: out of memory. */
static bool deliver(struct ferry_my_hub *h, struct ferry_my_hub_sub *s, const uint8_t *p,
                    size_t n)
{
    pthread_mutex_lock(&h->lock);
    while (!s->left && !h->stopping && s->count == FERRY_MY_HUB_SLOTS)
        pthread_cond_wait(&h->cond, &h->lock);
    bool ok = true;
    if (!s->left && !h->stopping) {
        struct slot *sl = &s->q[(s->head + s->count) % FERRY_MY_HUB_SLOTS];
        if (sl->cap < n) {
            void *v = ferry_realloc(sl->p, n);
            if (v != NULL) sl->p = v, sl->cap = n;
        }
        ok = sl->cap >= n;
        if (ok) {
            memcpy(sl->p, p, n);
            sl->n = n;
            s->count++;
            pthread_cond_signal(&s->ready);
        }
    }
    pthread_mutex_unlock(&h->lock);
    return ok;
}

static bool is_rows(uint8_t type)
{
    return (type >= FERRY_MY_BL_WRITE_ROWS_V1 && type <= FERRY_MY_BL_DELETE_ROWS_V1) ||
           (type >= FERRY_MY_BL_WRITE_ROWS_V2 && type <= FERRY_MY_BL_DELETE_ROWS_V2);
}

/* Which subscribers an event goes to (see my_hub.h); pos: where it ends. */
static bool wanted(struct ferry_my_hub_sub *s, const struct ferry_my_bl_header *hd, int64_t pos,
                   uint64_t id, const char *db, const char *table)
{
    if (s->left) return false;
    if (is_rows(hd->type)) return s->have_id && s->table_id == id && pos > s->start;
    switch (hd->type) {
    case FERRY_MY_BL_TABLE_MAP:
        if (strcmp(s->db, db) != 0 || strcmp(s->table, table) != 0) return false;
        s->table_id = id;
        s->have_id = true;
        return pos > s->start;
    case FERRY_MY_BL_HEARTBEAT:
        return pos >= s->start;
    default:
        return pos > s->start;
    }
}

/* Routes one event; the reader's position follows ROTATE. */
static int route(struct ferry_my_hub *h, const uint8_t *raw, size_t n, struct ferry_error *err)
{
    struct ferry_my_bl_header hd;
    int rc = ferry__my_bl_header(raw, n, &hd, err);
    if (rc != FERRY_OK) return rc;
    if (hd.event_size < FERRY_MY_BL_HEADER || hd.event_size > n)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", "truncated binlog event");
    size_t body_n = hd.event_size - FERRY_MY_BL_HEADER;
    if (h->crc && body_n >= 4) body_n -= 4;
    const uint8_t *body = raw + FERRY_MY_BL_HEADER;
    int64_t pos = BL_POS(h->seq, hd.log_pos);
    uint64_t id = 0, rpos = 0;
    char db[260] = "", table[260] = "", file[512];
    if (hd.type == FERRY_MY_BL_FORMAT_DESCRIPTION) return FERRY_OK;
    if (hd.type == FERRY_MY_BL_ROTATE) {
        rc = ferry__my_bl_rotate(body, body_n, &rpos, file, sizeof file, err);
        const char *dot = rc == FERRY_OK ? strrchr(file, '.') : NULL;
        if (rc != FERRY_OK || dot == NULL) return rc != FERRY_OK ? rc : FERRY_EINVAL;
        if (hd.log_pos == 0) { /* the dump's first (artificial) ROTATE */
            h->seq = (uint32_t)strtoul(dot + 1, NULL, 10);
            return FERRY_OK;
        }
        id = strtoul(dot + 1, NULL, 10);
    } else if (hd.type == FERRY_MY_BL_TABLE_MAP) {
        rc = ferry__my_bl_table_names(body, body_n, h->tm_phl, &id, db, sizeof db, table,
                                      sizeof table, err);
    } else if (is_rows(hd.type)) {
        rc = ferry__my_bl_rows_table_id(body, body_n, &id, err);
    }
    for (int i = 0; rc == FERRY_OK && i < h->n_subs; i++) {
        pthread_mutex_lock(&h->lock);
        bool w = wanted(h->subs[i], &hd, pos, id, db, table);
        pthread_mutex_unlock(&h->lock);
        if (w && !deliver(h, h->subs[i], raw, n))
            rc = ferry_error_set(err, FERRY_ENOMEM, "mysql", "out of memory");
    }
    if (hd.type == FERRY_MY_BL_ROTATE) h->seq = (uint32_t)id;
    return rc;
}

static bool stopping(struct ferry_my_hub *h)
{
    pthread_mutex_lock(&h->lock);
    bool stop = h->stopping;
    pthread_mutex_unlock(&h->lock);
    return stop;
}

static void *hub_main(void *arg)
{
    struct ferry_my_hub *h = arg;
    MARIADB_RPL_EVENT *ev = NULL;
    while (!stopping(h)) {
        ev = mariadb_rpl_fetch(h->rpl, ev);
        if (ev == NULL) {
            char why[512];
            snprintf(why, sizeof why, "%s (error %u)", mysql_error(h->m), mysql_errno(h->m));
            hub_fail(h, why);
            break;
        }
        if (ev->raw_data == NULL) continue;
        const uint8_t *raw = ev->raw_data;
        size_t n = ev->raw_data_size;
        if (n == (size_t)ev->event_length + 1) raw++, n--; /* the packet's OK byte */
        pthread_mutex_lock(&h->lock);
        h->tm_phl = h->rpl->post_header_len[TABLE_MAP_EVENT - 1] == 6 ? 6 : 8;
        pthread_mutex_unlock(&h->lock);
        struct ferry_error e;
        ferry_error_clear(&e);
        if (route(h, raw, n, &e) != FERRY_OK) {
            hub_fail(h, e.message[0] ? e.message : "a bad event");
            break;
        }
    }
    if (ev != NULL) mariadb_free_rpl_event(ev);
    return NULL;
}

/* ---- subscribers ---- */

/* The subscriber with the least start opens the dump (on its own thread); the others wait. */
static int hub_start(struct ferry_my_hub *h, struct ferry_my_hub_sub *me, struct ferry_error *err)
{
    struct ferry_my_hub_sub *first = NULL;
    for (int i = 0; i < h->n_subs; i++)
        if (!h->subs[i]->left && (first == NULL || h->subs[i]->start < first->start))
            first = h->subs[i];
    int rc = FERRY_OK;
    if (h->state == GATHER && first == me) {
        h->state = OPENING;
        pthread_mutex_unlock(&h->lock);
        MYSQL *m = NULL;
        MARIADB_RPL *rpl = NULL;
        bool crc = false;
        rc = me->open(me->open_ctx, me->start, &m, &rpl, &crc, err);
        pthread_mutex_lock(&h->lock);
        h->m = m, h->rpl = rpl, h->crc = crc;
        h->seq = BL_SEQ(me->start);
        h->state = rc == FERRY_OK ? RUNNING : FAILED;
        if (rc == FERRY_OK && pthread_create(&h->thread, NULL, hub_main, h) != 0) {
            h->state = FAILED;
            rc = ferry_error_set(err, FERRY_ENOMEM, "mysql", "cannot start a thread");
        }
        h->thread_started = h->state == RUNNING;
        pthread_cond_broadcast(&h->cond);
    }
    while (h->state == GATHER || h->state == OPENING)
        pthread_cond_wait(&h->cond, &h->lock);
    return rc;
}

static void sub_leave_locked(struct ferry_my_hub_sub *s)
{
    if (s->left) return;
    s->left = true;
    s->hub->active--;
    free_slots(s);
    pthread_cond_broadcast(&s->hub->cond);
}

int ferry__my_hub_join(const char *key, const char *peer, int expected, bool want, const char *db,
                       const char *table, int64_t start, ferry_my_hub_open_fn open,
                       void *open_ctx, struct ferry_my_hub_sub **sub, bool *crc,
                       struct ferry_error *err)
{
    *sub = NULL;
    pthread_mutex_lock(&registry_lock);
    struct ferry_my_hub *h = registry;
    while (h != NULL && strcmp(h->key, key) != 0)
        h = h->next;
    if (h == NULL && (h = hub_new(key, peer, expected)) != NULL) {
        h->next = registry;
        registry = h;
    }
    struct ferry_my_hub_sub *me = NULL;
    bool gone = false;
    if (h != NULL) {
        pthread_mutex_lock(&h->lock);
        h->answered++;
        if (want && !h->closed && h->state == GATHER)
            me = sub_new(h, db, table, start, open, open_ctx);
        if (h->answered >= h->expected) h->closed = true;
        if (me == NULL) gone = hub_unlink_if_gone(h); /* an answer without a subscriber */
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_unlock(&registry_lock);
    if (h == NULL) return FERRY_OK; /* out of memory: the stream goes alone */
    if (me == NULL) {
        if (gone) hub_destroy(h);
        return FERRY_OK;
    }
    pthread_mutex_lock(&h->lock);
    struct timespec until = deadline_in(FERRY_MY_HUB_WAIT_MS);
    int seen = h->answered;
    while (!h->closed) {
        if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT) {
            h->closed = true; /* a sibling that never answers does not hold the others */
            pthread_cond_broadcast(&h->cond);
        } else if (h->answered != seen) { /* siblings still answering: wait on */
            seen = h->answered;
            until = deadline_in(FERRY_MY_HUB_WAIT_MS);
        }
    }
    int rc = hub_start(h, me, err);
    bool running = h->state == RUNNING;
    if (running) {
        *sub = me;
        *crc = h->crc;
    }
    pthread_mutex_unlock(&h->lock);
    if (!running) sub_leave(me);
    return rc;
}

int ferry__my_hub_next(struct ferry_my_hub_sub *s, const uint8_t **p, size_t *n, int *tm_phl,
                       int wait_ms, struct ferry_error *err)
{
    struct ferry_my_hub *h = s->hub;
    *p = NULL;
    *n = 0;
    pthread_mutex_lock(&h->lock);
    if (s->holding) {
        struct slot *sl = &s->q[s->head];
        if (sl->cap > BIG_SLOT) {
            ferry_free(sl->p);
            *sl = (struct slot){0};
        }
        s->head = (s->head + 1) % FERRY_MY_HUB_SLOTS;
        s->count--;
        s->holding = false;
        pthread_cond_broadcast(&h->cond);
    }
    struct timespec until = deadline_in(wait_ms);
    while (s->count == 0 && h->state == RUNNING)
        if (pthread_cond_timedwait(&s->ready, &h->lock, &until) == ETIMEDOUT) break;
    int rc = FERRY_OK;
    if (s->count > 0) {
        *p = s->q[s->head].p;
        *n = s->q[s->head].n;
        *tm_phl = h->tm_phl;
        s->holding = true;
    } else if (h->state == FAILED) {
        rc = ferry_error_set(err, FERRY_EIO, "mysql", "%s", h->err_msg);
    }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

void ferry__my_hub_leave(struct ferry_my_hub_sub *s)
{
    if (s != NULL) sub_leave(s);
}
