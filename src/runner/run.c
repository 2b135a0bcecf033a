/* runner/run.c - the run's stop flag, its event emitter and small helpers every other file
 * of the runner shares (run.h). Calls: bus, store. Called by every file of src/runner.
 *
 * Stop requests are per run (several runs may go at once in one process, embedded). The one
 * process-wide input is a signal: ferry_runner_signal only counts (async-signal-safe), and
 * each run folds the count since its start into its own flag when it reads it (the control
 * thread does every 20 ms, so a flow sees a signal within that). */
#include <string.h>
#include "bus/bus.h"
#include "checkpoint/position.h"
#include "ferry/core.h"
#include "runner/run.h"

/* How many times ferry_runner_signal was called in this process. */
static atomic_int signals;

void ferry_runner_signal(void)
{
    atomic_fetch_add(&signals, 1);
}

void ferry__run_stop_init(struct run *r)
{
    atomic_init(&r->own_stop, 0);
    r->stop = r->o->stop ? r->o->stop : &r->own_stop;
    atomic_init(&r->signals_seen, atomic_load(&signals));
}

void ferry__run_stop_set(struct run *r, int code)
{
    if (code == FERRY_ECANCELED) {
        atomic_store(r->stop, FERRY_ECANCELED);
        return;
    }
    int expected = 0;
    atomic_compare_exchange_strong(r->stop, &expected, code);
}

int ferry__run_stop_get(struct run *r)
{
    /* Each new signal, claimed by one reading thread only: a pause when nothing was asked
     * yet, else a cancel. */
    int now = atomic_load(&signals);
    int seen = atomic_load(&r->signals_seen);
    while (seen < now) {
        if (!atomic_compare_exchange_weak(&r->signals_seen, &seen, seen + 1)) continue;
        seen++;
        int expected = 0;
        if (!atomic_compare_exchange_strong(r->stop, &expected, FERRY_EPAUSED))
            atomic_store(r->stop, FERRY_ECANCELED);
    }
    return atomic_load(r->stop);
}

/* The runs in progress in this process (a list through run.live_next). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct run *live_head;

int ferry__run_live_enter(struct run *r, struct ferry_error *err)
{
    pthread_mutex_lock(&live_lock);
    const struct run *x = live_head;
    while (x && strcmp(x->dest_key, r->dest_key) != 0)
        x = x->live_next;
    if (x == NULL) {
        r->live_next = live_head;
        live_head = r;
        r->live = true;
    }
    pthread_mutex_unlock(&live_lock);
    if (x == NULL) return FERRY_OK;
    return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                           "pipeline %s already has a run in progress in this process (another "
                           "thread): wait for it, or pause or cancel it",
                           r->p->name);
}

void ferry__run_live_leave(struct run *r)
{
    if (!r->live) return;
    pthread_mutex_lock(&live_lock);
    struct run **pp = &live_head;
    while (*pp && *pp != r)
        pp = &(*pp)->live_next;
    if (*pp) *pp = r->live_next;
    r->live = false;
    pthread_mutex_unlock(&live_lock);
}

void ferry__run_emit_hold(struct run *r)
{
    r->holder = pthread_self();
    atomic_store(&r->holding, true);
}

static bool held_here(struct run *r)
{
    return atomic_load(&r->holding) && pthread_equal(r->holder, pthread_self());
}

int ferry__run_emit_release(struct run *r, struct ferry_error *err)
{
    if (!held_here(r)) return FERRY_OK;
    atomic_store(&r->holding, false);
    int rc = r->n_held > 0 ? ferry_bus_publish_n(r->bus, r->held, r->n_held, err) : FERRY_OK;
    ferry_events_free(r->held, r->n_held);
    r->held = NULL;
    r->n_held = r->cap_held = 0;
    return rc;
}

/* Keeps a copy of ev (payload copied) for the release; false when out of memory. */
static bool hold_event(struct run *r, const struct ferry_event *ev)
{
    if (r->n_held == r->cap_held) {
        int cap = r->cap_held ? 2 * r->cap_held : 64;
        struct ferry_event *v = ferry_realloc(r->held, sizeof *v * (size_t)cap);
        if (v == NULL) return false;
        r->held = v;
        r->cap_held = cap;
    }
    char *payload = ferry_strdup(ev->payload);
    if (payload == NULL) return false;
    r->held[r->n_held] = *ev;
    r->held[r->n_held++].payload = payload;
    return true;
}

int ferry__run_emit(struct run *r, const char *resource, const char *type, const char *payload,
                    int64_t *seq, struct ferry_error *err)
{
    struct ferry_event ev;
    memset(&ev, 0, sizeof ev);
    ev.run_id = r->run_id;
    ev.attempt = r->attempt;
    ev.time_us = ferry_now_wall_us();
    snprintf(ev.resource, sizeof ev.resource, "%s", resource ? resource : "");
    snprintf(ev.type, sizeof ev.type, "%s", type);
    ev.payload = (char *)(payload ? payload : "{}");
    if (held_here(r) && seq == NULL && hold_event(r, &ev)) return FERRY_OK;
    if (held_here(r)) { /* its seq is wanted (or no memory to hold it): the held ones first */
        int hrc = ferry__run_emit_release(r, err);
        if (hrc != FERRY_OK) return hrc;
        ferry__run_emit_hold(r);
    }
    int rc = ferry_bus_publish(r->bus, &ev, err);
    if (rc == FERRY_OK && seq) *seq = ev.seq;
    return rc;
}

int ferry__run_emit_failure(struct run *r, const char *resource, const char *type, int rc,
                            const char *msg, int64_t *seq, struct ferry_error *err)
{
    struct ferry_buf fb;
    ferry_buf_init(&fb, 0);
    ferry_buf_printf(&fb, "{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
    ferry_buf_json_string(&fb, msg, strlen(msg));
    ferry_buf_append(&fb, "}", 1);
    int erc = ferry__run_emit(r, resource, type, fb.data, seq, err);
    ferry_buf_release(&fb);
    return erc;
}

int ferry__run_oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "runner", "out of memory");
}

bool ferry__run_position_done(const char *pos)
{
    return ferry_position_text_done(pos);
}

struct resource_run *ferry__run_find_resource(struct run *r, const char *name)
{
    for (int i = 0; i < r->n_res; i++)
        if (strcmp(r->res[i].spec->table, name) == 0) return &r->res[i];
    return NULL;
}

int ferry__run_route_position(struct run *r, const struct resource_run *rr, char **pos,
                              int64_t *run_id, struct ferry_error *err)
{
    *pos = NULL;
    if (run_id) *run_id = 0;
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    int rc =
        ferry_store_route_checkpoints(r->st, r->p->name, r->p->version, rr->route, &cps, &n, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        if (cps[i].shard == 0) {
            ferry_free(*pos);
            *pos = ferry_strdup(cps[i].position);
            if (run_id) *run_id = cps[i].run_id;
        }
    ferry_checkpoints_free(cps, n);
    return rc;
}
