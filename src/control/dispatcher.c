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
#include "control/k8s.h"
#include "core/mono.h"
#include "ferry/core.h"
#include "store/store.h"

extern char **environ;

#define QUEUE_MAX 100000

struct child {
    pid_t pid;
    int64_t run_id;
    int64_t spawned_us; /* wall clock */
    int attempt;        /* the run's attempt when it was started: still so, the worker never
                         * began one */
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
    struct ferry_k8s *k8s; /* --dispatch kubernetes: Jobs instead of children */
    /* Leader election (lease "control"): only the holder dispatches, reaps and schedules.
     * leader_epoch grows at every takeover, so the dispatcher refills its queue then. */
    atomic_int leader, leader_epoch, lease_stop;
    pthread_t lease_thread;
    bool lease_started;
    char owner[160];
    int64_t k8s_watched_us;
};

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
    if (c->q_len > 0 && c->n_children + ferry_k8s_active(c->k8s) < c->o.max_workers) {
        id = c->queue[c->q_head];
        c->q_head = (c->q_head + 1) % c->q_cap;
        c->q_len--;
    }
    c->stats.runs_queued = c->q_len;
    pthread_mutex_unlock(&c->lock);
    return id;
}

/* environ with FERRY_STORE=store instead of any FERRY_STORE/FERRY_STATE of ours; NULL when
 * out of memory. *entry is the allocated entry (free both with ferry_free). */
static char **env_with_store(const char *store, char **entry)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = ferry_calloc(n + 2, sizeof *env);
    *entry = ferry_asprintf("FERRY_STORE=%s", store);
    if (env == NULL || *entry == NULL) {
        ferry_free(env);
        ferry_free(*entry);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "FERRY_STORE=", 12) != 0 &&
            strncmp(environ[i], "FERRY_STATE=", 12) != 0)
            env[k++] = environ[i];
    env[k++] = *entry;
    env[k] = NULL;
    return env;
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
    /* A store URL may hold a password: it goes to the worker in FERRY_STORE, never on its
     * command line (anyone on the host can read /proc/PID/cmdline). */
    char **envp = environ, *entry = NULL;
    if (strstr(c->state_path, "://") != NULL) {
        argv[4] = NULL;
        envp = env_with_store(c->state_path, &entry);
    }
    int e = envp ? posix_spawn(pid, c->worker_bin, &fa, NULL, argv, envp) : ENOMEM;
    if (envp != environ) {
        ferry_free(envp);
        ferry_free(entry);
    }
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
        int attempt = run.attempt;
        ferry_run_info_clear(&run);
        if (!wanted) continue; /* canceled while queued, or a redelivered request */
        if (!atomic_load(&c->leader)) {
            enqueue(c, run_id); /* a replica that lost the lease starts nothing */
            return;
        }
        if (c->o.dispatch && !strcmp(c->o.dispatch, "pull")) {
            /* `ferry worker --pull` processes claim it (run_claim: requested -> running). */
            if (ferry_store_run_set_dispatch(st, run_id, "pull", &e) != FERRY_OK)
                ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
            else
                ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 " offered to pull workers",
                          run_id);
            continue;
        }
        if (c->k8s) {
            bool later = false;
            if (ferry_k8s_dispatch(c->k8s, st, c->bus, run_id, &later, &e) != FERRY_OK) {
                ferry_log(later ? FERRY_LOG_WARN : FERRY_LOG_ERROR,
                          "dispatcher: run %" PRId64 ": %s", run_id, e.message);
                if (later) {
                    enqueue(c, run_id); /* the API is unreachable: again at the next pass */
                    return;
                }
            }
            continue;
        }
        pid_t pid = 0;
        if (spawn_worker(c, run_id, &pid, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_ERROR, "dispatcher: %s", e.message);
            ferry_store_run_set_state(st, run_id, attempt, FERRY_RUN_FAILED, e.message, NULL);
            continue;
        }
        pthread_mutex_lock(&c->lock);
        struct child *nv = ferry_realloc(c->children, (size_t)(c->n_children + 1) * sizeof *nv);
        if (nv) {
            c->children = nv;
            c->children[c->n_children++] =
                (struct child){.pid = pid,
                               .run_id = run_id,
                               .spawned_us = ferry_now_wall_us(),
                               .attempt = attempt};
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
 * when it died before starting an attempt, that the run is requested at the attempt it was
 * started for (a first run's 0, a resumed run's last). A run requested at another attempt
 * was requested again after this worker began (a pause resumed at once, a retry): not its. */
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
    } else if (run.state == FERRY_RUN_REQUESTED && run.attempt == ch.attempt) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s before starting the run (its output: %s/run-%" PRId64 ".log)",
                 why, c->log_dir, run.id);
        if (ferry_store_run_set_state(st, run.id, run.attempt, FERRY_RUN_FAILED, msg, &e) ==
            FERRY_OK) {
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            ferry_buf_printf(&b, "{\"code\":\"worker\",\"message\":");
            ferry_buf_json_string(&b, msg, strlen(msg));
            ferry_buf_append(&b, "}", 1);
            ferry_bus_emit(c->bus, run.id, run.attempt, "", FERRY_EV_RUN_FAILED, b.data, NULL);
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

/* At start and at every takeover: runs a previous control plane paused when it stopped
 * continue first, then every `requested` run is queued (oldest first); the bus is consumed
 * from the sequence read just before that scan. A run is started only while the store says
 * it is requested, so a run queued twice (here and by its event) starts once. */
static int64_t refill(struct ferry_control *c, struct ferry_store *st)
{
    struct ferry_error e;
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
    return after;
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
    int epoch = 0;
    int64_t after = 0;
    int n = 0;
    while (!atomic_load(&c->stop)) {
        if (!atomic_load(&c->leader)) {
            /* Another replica leads: its queue is the one that counts. */
            pthread_mutex_lock(&c->lock);
            c->q_len = 0;
            c->stats.runs_queued = 0;
            pthread_mutex_unlock(&c->lock);
            reap_children(c, st);
            nap(c, 100);
            continue;
        }
        if (atomic_load(&c->leader_epoch) != epoch) {
            epoch = atomic_load(&c->leader_epoch);
            after = refill(c, st);
            ferry_k8s_relist(c->k8s); /* the previous leader's Jobs are ours to watch now */
        }
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
        if (c->k8s && ferry_now_mono_us() - c->k8s_watched_us >= (int64_t)c->o.sweep_ms * 1000) {
            int lost = 0, retried = 0;
            ferry_k8s_watch(c->k8s, st, c->bus, c->o.lease_ms, &lost, &retried);
            c->k8s_watched_us = ferry_now_mono_us();
            pthread_mutex_lock(&c->lock);
            c->stats.workers_lost += lost;
            c->stats.runs_retried += retried;
            c->stats.workers_running = c->n_children + ferry_k8s_active(c->k8s);
            pthread_mutex_unlock(&c->lock);
        }
    }
    ferry_store_close(st);
    return NULL;
}

/* A local worker whose run stays silent is killed by its parent: after three leases (stopped
 * or hung: it holds memory, connections and perhaps the state file's lock), or after one
 * lease when the reaper could not fence it because the state file stayed locked (only_run:
 * the likeliest holder is the silent worker itself; past its lease it is lost anyway).
 * A fenced worker that never exits is killed the same way (its run's retry waits for that).
 * Remote workers (kubernetes, pull) can only be fenced. Reads the store only. */
static void kill_silent_children(struct ferry_control *c, struct ferry_store *st, int64_t only_run)
{
    pthread_mutex_lock(&c->lock);
    int n = c->n_children;
    struct child *v = n ? ferry_malloc((size_t)n * sizeof *v) : NULL;
    if (v) memcpy(v, c->children, (size_t)n * sizeof *v);
    pthread_mutex_unlock(&c->lock);
    if (v == NULL) return;
    int64_t now = ferry_now_wall_us();
    for (int i = 0; i < n; i++) {
        if (only_run && v[i].run_id != only_run) continue;
        struct ferry_run_info run;
        if (ferry_store_run_get(st, v[i].run_id, &run, NULL) != FERRY_OK) continue;
        int64_t silent_ms = (now - run.heartbeat_us) / 1000;
        int64_t limit_ms = (int64_t)c->o.lease_ms * (only_run ? 1 : 3);
        /* The run's row names this worker, or none since a reap fenced it (its heartbeat is
         * then still the worker's last: a retry's worker waits for this one's exit). A worker
         * started after the row's heartbeat has not begun its attempt yet: never killed. */
        bool ours = run.pid == (int)v[i].pid ||
                    (run.pid == 0 && v[i].spawned_us < run.heartbeat_us);
        if (ours && run.heartbeat_us > 0 && silent_ms > limit_ms && kill(v[i].pid, SIGKILL) == 0)
            ferry_log(FERRY_LOG_WARN,
                      "run %" PRId64 ": worker pid %d silent for %" PRId64 " ms (lease %d ms)%s;"
                      " killed",
                      run.id, (int)v[i].pid, silent_ms, c->o.lease_ms,
                      only_run ? " and the state file stays locked" : "");
        ferry_run_info_clear(&run);
    }
    ferry_free(v);
}

struct stuck_ctx {
    struct ferry_control *c;
    struct ferry_store *st;
};

static void on_stuck(void *arg, int64_t run_id)
{
    struct stuck_ctx *x = arg;
    kill_silent_children(x->c, x->st, run_id);
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
        kill_silent_children(c, st, 0); /* leader or not: they are this process's children */
        if (!atomic_load(&c->leader)) continue;
        int lost = 0, retried = 0;
        struct stuck_ctx x = {c, st};
        if (ferry_reaper_sweep(st, c->bus, c->o.lease_ms, on_stuck, &x, &lost, &retried, &e) !=
            FERRY_OK)
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
        if (!atomic_load(&c->leader)) {
            nap(c, 200);
            continue;
        }
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

/* The lease "control": held by one replica at a time, renewed every sweep, lost after
 * 3 sweeps without renewal (the time a replica needs to take over from a dead leader). A
 * replica that cannot renew steps down at once: it cannot tell whether another took over. */
static void *lease_main(void *arg)
{
    struct ferry_control *c = arg;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    int ttl = 3 * c->o.sweep_ms;
    while (st == NULL && !atomic_load(&c->lease_stop)) {
        if (ferry_store_open(c->state_path, &st, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_ERROR, "control lease: %s", e.message);
            usleep(200000);
        }
    }
    while (!atomic_load(&c->lease_stop)) {
        bool held = false;
        int64_t token = 0;
        if (ferry_store_lease_acquire(st, "control", c->owner, ttl, &held, &token, &e) != FERRY_OK) {
            ferry_log(FERRY_LOG_ERROR, "control lease: %s", e.message);
            held = false;
        }
        bool was = atomic_load(&c->leader);
        if (held && !was) {
            atomic_fetch_add(&c->leader_epoch, 1);
            atomic_store(&c->leader, 1);
            ferry_log(FERRY_LOG_INFO, "control plane: %s leads (lease token %" PRId64 ")",
                      c->owner, token);
            printf("ferry serve: control leader %s (token %" PRId64 ")\n", c->owner, token);
            fflush(stdout);
        } else if (!held && was) {
            atomic_store(&c->leader, 0);
            ferry_log(FERRY_LOG_WARN, "control plane: %s lost the lease; standing by", c->owner);
        }
        pthread_mutex_lock(&c->lock);
        c->stats.leader = held;
        c->stats.leader_token = token;
        pthread_mutex_unlock(&c->lock);
        for (int waited = 0; waited < c->o.sweep_ms && !atomic_load(&c->lease_stop); waited += 20)
            usleep(20000);
    }
    /* A clean stop: the next replica need not wait for the lease to run out. */
    if (st && atomic_load(&c->leader) &&
        ferry_store_lease_release(st, "control", c->owner, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "control lease: %s", e.message);
    atomic_store(&c->leader, 0);
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
    ferry__cond_init_mono(&c->cond);
    *out = c;
    if (!c->state_path || !c->worker_bin || !c->log_dir)
        return ferry_error_set(err, FERRY_ENOMEM, "control", "out of memory");
    if (o->dispatch && !strcmp(o->dispatch, "kubernetes")) {
        struct ferry_k8s_settings ks;
        int krc = ferry_k8s_settings_load(o->image, &ks, err);
        if (krc == FERRY_OK) krc = ferry_k8s_open(&ks, &c->k8s, err);
        if (krc != FERRY_OK) return krc;
    }
    if (mkdir(c->log_dir, 0755) != 0 && errno != EEXIST)
        return ferry_error_set(err, FERRY_EIO, "control",
                               "worker logs: cannot create folder %s: %s", c->log_dir,
                               strerror(errno));
    {
        char host[64];
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        snprintf(c->owner, sizeof c->owner, "%s:%d", host, (int)getpid());
    }
    c->lease_started = pthread_create(&c->lease_thread, NULL, lease_main, c) == 0;
    c->dispatch_started = pthread_create(&c->dispatch_thread, NULL, dispatch_main, c) == 0;
    c->reaper_started = pthread_create(&c->reaper_thread, NULL, reaper_main, c) == 0;
    if (o->scheduler)
        c->scheduler_started = pthread_create(&c->scheduler_thread, NULL, scheduler_main, c) == 0;
    if (!c->lease_started || !c->dispatch_started || !c->reaper_started ||
        (o->scheduler && !c->scheduler_started))
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
    /* Released only now: a replica taking over re-queues the runs this one paused, which
     * it can only see once they did pause. */
    atomic_store(&c->lease_stop, 1);
    if (c->lease_started) pthread_join(c->lease_thread, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    ferry_free(c->queue);
    ferry_free(c->children);
    ferry_k8s_close(c->k8s);
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

const char *ferry_control_log_dir(const struct ferry_control *c)
{
    return c ? c->log_dir : NULL;
}
