/* runner/control.c - the control thread of a run: flush timer, heartbeat, pause/cancel
 * requests from the store, the progress line, a cdc stream's lag, the checkpoints saved
 * (saved.c) and the leases of a distributed run's tasks. It reads the resources' active flows
 * (resource_run.active) and never changes the run's plan. Calls: run.c, progress.c, saved.c, store.
 * Called by runner.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "core/mono.h"
#include "ferry/core.h"
#include "pipeline/flow.h"
#include "runner/run.h"

/* Keeps the current task's lease (a lost one fences the task), and in shard mode follows
 * the run: another attempt fences this worker, a pause or an end stops it. */
static void renew_task(struct run *r, struct ferry_store *st)
{
    struct ferry_shard_task t;
    pthread_mutex_lock(&r->task_lock);
    t = r->task;
    pthread_mutex_unlock(&r->task_lock);
    struct ferry_error e;
    if (t.token > 0 && ferry_store_shard_renew(st, t.run_id, t.resource, t.shard, t.token,
                                               r->lease_ms, &e) == FERRY_EFENCED) {
        ferry_log(FERRY_LOG_WARN,
                  "run %" PRId64 " resource %s shard %d: lease lost (token %" PRId64 "): %s",
                  t.run_id, t.resource, t.shard, t.token, e.message);
        atomic_store(&r->task_fenced, 1);
        atomic_store(&r->flow_stop, FERRY_ECANCELED);
    }
    if (!r->shard_mode) return;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (ferry_store_run_get(st, r->run_id, &run, &e) != FERRY_OK) return;
    if (run.attempt != r->attempt || ferry_run_state_is_final(run.state)) {
        ferry_log(FERRY_LOG_WARN, "run %" PRId64 " is %s (attempt %d, this worker's %d): stopping",
                  r->run_id, ferry_run_state_name(run.state), run.attempt, r->attempt);
        if (run.attempt != r->attempt) atomic_store(&r->task_fenced, 1);
        ferry__run_stop_set(r, FERRY_ECANCELED);
        atomic_store(&r->flow_stop, FERRY_ECANCELED);
    } else if (run.state == FERRY_RUN_PAUSED) {
        ferry__run_stop_set(r, FERRY_EPAUSED);
    }
    ferry_run_info_clear(&run);
}

/* The first resource's flow that runs now (what the progress line and the heartbeat show). */
static struct ferry_flow *first_active(struct run *r)
{
    for (int i = 0; i < r->n_res; i++) {
        struct ferry_flow *f = atomic_load(&r->res[i].active);
        if (f) return f;
    }
    return NULL;
}

static void tick_flows(struct run *r)
{
    for (int i = 0; i < r->n_res; i++) {
        struct ferry_flow *f = atomic_load(&r->res[i].active);
        if (f) atomic_store(&f->tick, 1);
    }
}

static void heartbeat_event(struct run *r, struct ferry_flow *f)
{
    char payload[128];
    int64_t rss = ferry__run_peak_rss();
    if (rss > r->peak_rss) r->peak_rss = rss;
    /* queue_depth: ready batches of the resource being copied (ferry serve's metrics). */
    snprintf(payload, sizeof payload,
             "{\"rss_bytes\":%" PRId64 ",\"cpu_ms\":%" PRId64 ",\"queue_depth\":%d}", rss,
             ferry__run_cpu_ms(), f ? atomic_load(&f->queue_depth) : 0);
    ferry__run_emit(r, NULL, FERRY_EV_RUN_HEARTBEAT, payload, NULL, NULL);
}

/* `ferry pause` / `ferry cancel` (or the API) asked for it in the store. */
static void poll_requests(struct run *r, struct ferry_store *st)
{
    char sig[16] = "";
    if (ferry_store_run_requested(st, r->run_id, sig, sizeof sig, NULL) != FERRY_OK) return;
    if (!strcmp(sig, "pause")) {
        ferry__run_stop_set(r, FERRY_EPAUSED);
    } else if (!strcmp(sig, "cancel")) {
        ferry__run_stop_set(r, FERRY_ECANCELED);
    }
}

/* Sleeps 20 ms, or less when ferry__control_stop asks the thread to end. */
static void control_sleep(struct run *r)
{
    struct timespec ts = ferry__mono_after_us(20000);
    pthread_mutex_lock(&r->control_mu);
    while (!atomic_load(&r->control_stop))
        if (pthread_cond_timedwait(&r->control_cv, &r->control_mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&r->control_mu);
}

static void *control_main(void *arg)
{
    struct run *r = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    if (ferry_store_open(r->o->state_path, &st, &e) != FERRY_OK ||
        ferry_store_set_sync_full(st, false, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "control thread: %s", e.message);
    int64_t last_tick = ferry_now_mono_us(), last_beat = 0, last_event = 0, last_poll = 0;
    int64_t last_progress = 0, last_lag = 0, last_lag_position = -1, last_renew = 0;
    int64_t flush_us = r->p->batch.flush_after_ms * 1000;
    while (!atomic_load(&r->control_stop)) {
        control_sleep(r);
        if (atomic_load(&r->control_stop)) break;
        int64_t now = ferry_now_mono_us();
        struct ferry_flow *f = first_active(r);
        (void)ferry__run_stop_get(r); /* the process's signals into the run's flag */
        if (f && now - last_tick >= flush_us) {
            tick_flows(r);
            last_tick = now;
        }
        if (r->n_lanes > 1) ferry__lanes_forward_stop(r);
        if (r->distributed || r->shard_mode) {
            int want = ferry__run_stop_get(r), have = atomic_load(&r->flow_stop);
            if (want != 0 && have == 0) atomic_store(&r->flow_stop, want);
            if (st && now - last_renew >= (int64_t)r->lease_ms * 1000 / 3) {
                last_renew = now;
                renew_task(r, st);
            }
        }
        if (st && !r->shard_mode && now - last_beat >= 2000000) {
            last_beat = now;
            if (ferry_store_run_heartbeat(st, r->run_id, r->attempt, &e) == FERRY_EFENCED) {
                ferry_log(FERRY_LOG_ERROR, "%s", e.message);
                ferry__run_stop_set(r, FERRY_ECANCELED);
            }
        }
        if (now - last_event >= 10000000) {
            last_event = now;
            heartbeat_event(r, f);
        }
        if (st && now - last_poll >= 500000) {
            last_poll = now;
            poll_requests(r, st);
        }
        if (f && now - last_progress >= 250000) {
            last_progress = now;
            if (r->n_res > 1)
                ferry__run_print_run_progress(r, false);
            else
                ferry__run_print_progress(r, f, r->t0, false);
        }
        if (now - last_lag >= 1000000) {
            last_lag = now;
            if (f) ferry__run_emit_cdc_lag(r, f, &last_lag_position);
            ferry__run_report_saved(r, st);
        }
    }
    ferry_store_close(st);
    return NULL;
}

void ferry__control_start(struct run *r)
{
    ferry__cond_init_mono(&r->control_cv);
    pthread_mutex_init(&r->control_mu, NULL);
    if (pthread_create(&r->control, NULL, control_main, r) == 0) {
        r->control_started = true;
        return;
    }
    pthread_cond_destroy(&r->control_cv);
    pthread_mutex_destroy(&r->control_mu);
}

void ferry__control_stop(struct run *r)
{
    if (r->control_started) {
        pthread_mutex_lock(&r->control_mu);
        atomic_store(&r->control_stop, 1);
        pthread_cond_broadcast(&r->control_cv);
        pthread_mutex_unlock(&r->control_mu);
        pthread_join(r->control, NULL);
        r->control_started = false;
        pthread_cond_destroy(&r->control_cv);
        pthread_mutex_destroy(&r->control_mu);
    }
}
