/* control/dispatcher.c - starts a worker process per requested run, under a concurrency
 * limit, and runs the control plane's threads (control/control.h).
 *
 * Owns: the dispatch queue (run ids in request order), the table of worker children, and
 * three threads: dispatch (consumes run.requested, starts and reaps children), reaper
 * (sweeps leases, reaper.c) and scheduler (scheduler.c). Each thread has its own store
 * handle. Calls the store, the bus, posix_spawn. Called by `ferry serve` (cli/cmd_serve.c).
 *
 * At start the queue is filled from the runs the store says are `requested` (oldest
 * first), then the bus is consumed from the sequence read just before that scan, so a
 * request is never missed and a redelivered one finds the run no longer `requested`. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bus/bus.h"
#include "control/control.h"
#include "ferry/core.h"
#include "store/store.h"

extern char **environ;

#define QUEUE_MAX 100000

struct child {
    pid_t pid;
    int64_t run_id;
};

struct ferry_control {
    struct ferry_control_options o;
    char *state_path, *worker_bin, *log_dir;
    struct ferry_bus *bus;
    atomic_int stop;
    pthread_t dispatch_thread, reaper_thread, scheduler_thread;
    bool dispatch_started, reaper_started, scheduler_started;
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t cond;  /* stop */
    int64_t *queue;       /* ring of run ids */
    int q_head, q_len, q_cap;
    struct child *children;
    int n_children;
    struct ferry_control_stats stats;
};

/* ---- requests ---- */

int ferry_control_request_run(struct ferry_store *st, struct ferry_bus *bus, const char *pipeline,
                              const char *trigger, const char *key, int64_t *run_id, bool *existed,
                              struct ferry_error *err)
{
    struct ferry_pipeline_info pi;
    int rc = ferry_store_pipeline_get(st, pipeline, &pi, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry_store_run_create_keyed(st, pi.name, pi.version, pi.spec, trigger, key, run_id,
                                      existed, err);
    if (rc == FERRY_OK && !*existed) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        ferry_buf_printf(&b, "{\"pipeline\":");
        ferry_buf_json_string(&b, pi.name, strlen(pi.name));
        ferry_buf_printf(&b, ",\"version\":\"%s\",\"trigger\":", pi.version);
        ferry_buf_json_string(&b, trigger ? trigger : "", trigger ? strlen(trigger) : 0);
        ferry_buf_append(&b, "}", 1);
        rc = ferry_bus_emit(bus, *run_id, 0, "", FERRY_EV_RUN_REQUESTED, b.data, err);
        ferry_buf_release(&b);
    }
    ferry_pipeline_info_clear(&pi);
    return rc;
}

/* ---- queue and children (under c->lock) ---- */

static bool queued(struct ferry_control *c, int64_t run_id)
{
    for (int i = 0; i < c->q_len; i++)
        if (c->queue[(c->q_head + i) % c->q_cap] == run_id) return true;
    return false;
}

/* A worker of this run still exiting (a paused run resumed at once). */
static bool has_child(struct ferry_control *c, int64_t run_id)
{
    pthread_mutex_lock(&c->lock);
    bool found = false;
    for (int i = 0; i < c->n_children; i++)
        if (c->children[i].run_id == run_id) found = true;
    pthread_mutex_unlock(&c->lock);
    return found;
}

static void enqueue(struct ferry_control *c, int64_t run_id)
{
    pthread_mutex_lock(&c->lock);
    if (!queued(c, run_id)) {
        if (c->q_len == c->q_cap && c->q_cap < QUEUE_MAX) {
            int ncap = c->q_cap ? c->q_cap * 2 : 64;
            int64_t *nq = ferry_malloc((size_t)ncap * sizeof *nq);
            if (nq) {
                for (int i = 0; i < c->q_len; i++)
                    nq[i] = c->queue[(c->q_head + i) % c->q_cap];
                ferry_free(c->queue);
                c->queue = nq;
                c->q_head = 0;
                c->q_cap = ncap;
            }
        }
        if (c->q_len < c->q_cap) {
            c->queue[(c->q_head + c->q_len) % c->q_cap] = run_id;
            c->q_len++;
        } else {
            ferry_log(FERRY_LOG_ERROR,
                      "dispatcher: queue full; run %" PRId64 " waits for a restart", run_id);
        }
    }
    c->stats.runs_queued = c->q_len;
    pthread_mutex_unlock(&c->lock);
}

static int64_t dequeue(struct ferry_control *c)
{
    int64_t id = 0;
    pthread_mutex_lock(&c->lock);
    if (c->q_len > 0 && c->n_children < c->o.max_workers) {
        id = c->queue[c->q_head];
        c->q_head = (c->q_head + 1) % c->q_cap;
        c->q_len--;
    }
    c->stats.runs_queued = c->q_len;
    pthread_mutex_unlock(&c->lock);
    return id;
}

static int spawn_worker(struct ferry_control *c, int64_t run_id, pid_t *pid,
                        struct ferry_error *err)
{
    char id[32], log[4096];
    snprintf(id, sizeof id, "%" PRId64, run_id);
    snprintf(log, sizeof log, "%s/run-%" PRId64 ".log", c->log_dir, run_id);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    char *argv[] = {c->worker_bin, "worker", "--run", id, "--state", c->state_path, NULL};
    int e = posix_spawn(pid, c->worker_bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0)
        return ferry_error_set(err, FERRY_EIO, "dispatcher", "run %" PRId64 ": cannot start %s: %s",
                               run_id, c->worker_bin, strerror(e));
    return FERRY_OK;
}

static void launch(struct ferry_control *c, struct ferry_store *st)
{
    for (;;) {
        int64_t run_id = dequeue(c);
        if (run_id == 0) return;
        if (has_child(c, run_id)) {
            enqueue(c, run_id); /* after its previous worker is reaped */
            return;
        }
        struct ferry_run_info run;
        struct ferry_error e;
        if (ferry_store_run_get(st, run_id, &run, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_WARN, "dispatcher: %s", e.message);
            continue;
        }
        bool wanted = run.state == FERRY_RUN_REQUESTED;
        ferry_run_info_clear(&run);
        if (!wanted) continue; /* canceled while queued, or a redelivered request */
        pid_t pid = 0;
        if (spawn_worker(c, run_id, &pid, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
            ferry_store_run_set_state(st, run_id, 0, FERRY_RUN_FAILED, e.message, NULL);
            continue;
        }
        pthread_mutex_lock(&c->lock);
        struct child *nv = ferry_realloc(c->children, (size_t)(c->n_children + 1) * sizeof *nv);
        if (nv) {
            c->children = nv;
            c->children[c->n_children++] = (struct child){.pid = pid, .run_id = run_id};
        }
        c->stats.workers_running = c->n_children;
        c->stats.workers_started++;
        pthread_mutex_unlock(&c->lock);
        ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 ": worker pid %d started", run_id,
                  (int)pid);
    }
}

/* A worker that exits has published its final event and waited for it to be folded, unless
 * it died: then the store still says its attempt runs (lost now, not a lease later), or,
 * when it died before starting an attempt, that the run is requested. */
static void child_exited(struct ferry_control *c, struct ferry_store *st, struct child ch,
                         int status)
{
    char why[160];
    if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "worker pid %d killed by signal %d", (int)ch.pid,
                 WTERMSIG(status));
    else
        snprintf(why, sizeof why, "worker pid %d exited with status %d", (int)ch.pid,
                 WEXITSTATUS(status));
    struct ferry_run_info run;
    if (ferry_store_run_get(st, ch.run_id, &run, NULL) != FERRY_OK) return;
    struct ferry_error e;
    int code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
    if (ferry_store_run_worker_exited(st, run.id, (int)ch.pid, code, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "dispatcher: %s", e.message);
    ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 ": %s", run.id, why);
    if (run.state == FERRY_RUN_RUNNING && run.pid == (int)ch.pid) {
        bool again = false;
        if (ferry_control_lose(st, c->bus, run.id, run.attempt, 0, why, c->o.lease_ms, &again,
                               &e) == FERRY_OK) {
            pthread_mutex_lock(&c->lock);
            c->stats.workers_lost++;
            if (again) c->stats.runs_retried++;
            pthread_mutex_unlock(&c->lock);
        }
    } else if (run.state == FERRY_RUN_REQUESTED && run.attempt == 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s before starting the run (its output: %s/run-%" PRId64 ".log)",
                 why, c->log_dir, run.id);
        if (ferry_store_run_set_state(st, run.id, 0, FERRY_RUN_FAILED, msg, &e) == FERRY_OK) {
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            ferry_buf_printf(&b, "{\"code\":\"worker\",\"message\":");
            ferry_buf_json_string(&b, msg, strlen(msg));
            ferry_buf_append(&b, "}", 1);
            ferry_bus_emit(c->bus, run.id, 0, "", FERRY_EV_RUN_FAILED, b.data, NULL);
            ferry_buf_release(&b);
        }
    }
    ferry_run_info_clear(&run);
}

static void reap_children(struct ferry_control *c, struct ferry_store *st)
{
    for (;;) {
        struct child gone = {0};
        int status = 0;
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < c->n_children; i++) {
            if (waitpid(c->children[i].pid, &status, WNOHANG) == c->children[i].pid) {
                gone = c->children[i];
                c->children[i] = c->children[--c->n_children];
                break;
            }
        }
        c->stats.workers_running = c->n_children;
        pthread_mutex_unlock(&c->lock);
        if (gone.pid == 0) return;
        child_exited(c, st, gone, status);
    }
}

/* ---- threads ---- */

static void nap(struct ferry_control *c, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&c->lock);
    while (!atomic_load(&c->stop))
        if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&c->lock);
}

static void *dispatch_main(void *arg)
{
    struct ferry_control *c = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    if (ferry_store_open(c->state_path, &st, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
        return NULL;
    }
    /* Runs a previous control plane paused when it stopped continue first. */
    int64_t *again = NULL;
    int n_again = 0;
    if (ferry_store_run_requeue_marked(st, &again, &n_again, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
    for (int i = 0; i < n_again; i++) {
        ferry_log(FERRY_LOG_INFO,
                  "dispatcher: run %" PRId64 " was paused by the last stop; resuming", again[i]);
        ferry_bus_emit(c->bus, again[i], 0, "", FERRY_EV_RUN_REQUESTED, "{\"resume\":\"restart\"}",
                       NULL);
    }
    ferry_free(again);
    int64_t after = ferry_store_event_last_seq(st);
    struct ferry_run_info *v = NULL;
    int n = 0;
    if (ferry_store_run_list_filtered(st, NULL, FERRY_RUN_REQUESTED, 0, 0, &v, &n, &e) == FERRY_OK)
        for (int i = n - 1; i >= 0; i--)
            enqueue(c, v[i].id);
    else
        ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
    ferry_run_infos_free(v, n);
    while (!atomic_load(&c->stop)) {
        struct ferry_event *evs = NULL;
        n = 0;
        if (ferry_bus_fetch(c->bus, after, 0, 256, 200, &evs, &n, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
            nap(c, 200);
        }
        for (int i = 0; i < n; i++) {
            if (strcmp(evs[i].type, FERRY_EV_RUN_REQUESTED) == 0 && evs[i].run_id > 0)
                enqueue(c, evs[i].run_id);
            after = evs[i].seq;
        }
        ferry_events_free(evs, n);
        if (n > 0) ferry_store_mark_set(st, "dispatcher", after, NULL);
        reap_children(c, st);
        launch(c, st);
    }
    ferry_store_close(st);
    return NULL;
}

static void *reaper_main(void *arg)
{
    struct ferry_control *c = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    if (ferry_store_open(c->state_path, &st, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_ERROR, "reaper: %s", e.message);
        return NULL;
    }
    while (!atomic_load(&c->stop)) {
        nap(c, c->o.sweep_ms);
        if (atomic_load(&c->stop)) break;
        int lost = 0, retried = 0;
        if (ferry_reaper_sweep(st, c->bus, c->o.lease_ms, &lost, &retried, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_ERROR, "reaper: %s", e.message);
        if (lost) {
            pthread_mutex_lock(&c->lock);
            c->stats.workers_lost += lost;
            c->stats.runs_retried += retried;
            pthread_mutex_unlock(&c->lock);
        }
    }
    ferry_store_close(st);
    return NULL;
}

static void *scheduler_main(void *arg)
{
    struct ferry_control *c = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    if (ferry_store_open(c->state_path, &st, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_ERROR, "scheduler: %s", e.message);
        return NULL;
    }
    while (!atomic_load(&c->stop)) {
        int fired = 0;
        if (ferry_scheduler_tick(st, c->bus, ferry_now_wall_us(), &fired, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_ERROR, "scheduler: %s", e.message);
        if (fired) {
            pthread_mutex_lock(&c->lock);
            c->stats.schedules_fired += fired;
            pthread_mutex_unlock(&c->lock);
        }
        nap(c, 1000);
    }
    ferry_store_close(st);
    return NULL;
}

/* ---- lifecycle ---- */

int ferry_control_start(const struct ferry_control_options *o, struct ferry_bus *bus,
                        struct ferry_control **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_control *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) return ferry_error_set(err, FERRY_ENOMEM, "control", "out of memory");
    c->o = *o;
    if (c->o.max_workers < 1) c->o.max_workers = 1;
    if (c->o.sweep_ms < 50) c->o.sweep_ms = 50;
    c->bus = bus;
    c->state_path = ferry_strdup(o->state_path);
    c->worker_bin = ferry_strdup(o->worker_bin);
    c->log_dir = ferry_strdup(o->log_dir);
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = c;
    if (!c->state_path || !c->worker_bin || !c->log_dir)
        return ferry_error_set(err, FERRY_ENOMEM, "control", "out of memory");
    if (mkdir(c->log_dir, 0755) != 0 && errno != EEXIST)
        return ferry_error_set(err, FERRY_EIO, "control",
                               "worker logs: cannot create folder %s: %s", c->log_dir,
                               strerror(errno));
    c->dispatch_started = pthread_create(&c->dispatch_thread, NULL, dispatch_main, c) == 0;
    c->reaper_started = pthread_create(&c->reaper_thread, NULL, reaper_main, c) == 0;
    if (o->scheduler)
        c->scheduler_started = pthread_create(&c->scheduler_thread, NULL, scheduler_main, c) == 0;
    if (!c->dispatch_started || !c->reaper_started || (o->scheduler && !c->scheduler_started))
        return ferry_error_set(err, FERRY_ENOMEM, "control", "cannot start the control threads");
    return FERRY_OK;
}

void ferry_control_stop(struct ferry_control *c, int wait_ms)
{
    if (c == NULL) return;
    atomic_store(&c->stop, 1);
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (c->bus && c->bus->vt->wake) c->bus->vt->wake(c->bus);
    if (c->dispatch_started) pthread_join(c->dispatch_thread, NULL);
    if (c->reaper_started) pthread_join(c->reaper_thread, NULL);
    if (c->scheduler_started) pthread_join(c->scheduler_thread, NULL);
    /* Workers pause (drain, commit); the next start of a control plane continues them. */
    struct ferry_store *st = NULL;
    if (c->n_children > 0 && ferry_store_open(c->state_path, &st, NULL) == FERRY_OK)
        for (int i = 0; i < c->n_children; i++)
            ferry_store_run_mark_resume_on_start(st, c->children[i].run_id, NULL);
    ferry_store_close(st);
    for (int i = 0; i < c->n_children; i++)
        kill(c->children[i].pid, SIGTERM);
    int64_t deadline = ferry_now_mono_us() + (int64_t)wait_ms * 1000;
    while (c->n_children > 0 && ferry_now_mono_us() < deadline) {
        for (int i = 0; i < c->n_children; i++) {
            int status;
            if (waitpid(c->children[i].pid, &status, WNOHANG) == c->children[i].pid)
                c->children[i--] = c->children[--c->n_children];
        }
        usleep(20000);
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    ferry_free(c->queue);
    ferry_free(c->children);
    ferry_free(c->state_path);
    ferry_free(c->worker_bin);
    ferry_free(c->log_dir);
    ferry_free(c);
}

void ferry_control_stats(struct ferry_control *c, struct ferry_control_stats *out)
{
    memset(out, 0, sizeof *out);
    if (c == NULL) return;
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}
