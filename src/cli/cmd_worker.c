/* cli/cmd_worker.c - `ferry worker --run ID --state PATH`: runs one requested run in this
 * process, as a child of `ferry serve` (control/dispatcher.c starts it). `ferry worker
 * --pull`: a long-lived worker on any host sharing the store that takes work itself, with
 * a lease: a shard task of a running distributed run first (it works that shard only),
 * else a run requested for pull dispatch (it becomes that run's worker, and its
 * coordinator when the run is distributed). See docs/internals/server.md.
 *
 * Loads the request saved with the run and goes through the embedded runner's resume path
 * (runner/runner.c: a new attempt, heartbeats with CPU and memory, pause/cancel signals
 * read from the run's row, fencing). SIGTERM or SIGINT: pause (drain, commit); twice:
 * cancel. When the run cannot even start (bad request, unreachable source), the worker
 * records the failure on the run itself, so it does not stay `requested`. Exit status as
 * for `ferry run`. Calls the runner, the store and the bus. Called by main.c. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "cli/commands.h"
#include "ferry/core.h"
#include "runner/retry.h"
#include "runner/runner.h"
#include "store/store.h"
#include "store/secrets.h"

static volatile sig_atomic_t g_quit;

static void on_signal(int sig)
{
    (void)sig;
    g_quit = 1;
    ferry_runner_signal();
}

/* The run never got an attempt: say why on the run. */
static void record_early_failure(const char *state, const char *bus_url, int64_t run_id,
                                 int claimed, const struct ferry_error *e)
{
    struct ferry_store *st = NULL;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (ferry_store_open(state, &st, NULL) != FERRY_OK) return;
    /* A pull worker's claim already made the run running under its attempt. */
    if (ferry_store_run_get(st, run_id, &run, NULL) == FERRY_OK &&
        (run.state == FERRY_RUN_REQUESTED ||
         (claimed > 0 && run.state == FERRY_RUN_RUNNING && run.attempt == claimed)) &&
        ferry_store_run_set_state(st, run_id, run.attempt, FERRY_RUN_FAILED, e->message, NULL) ==
            FERRY_OK) {
        struct ferry_bus *bus = NULL;
        if (ferry_bus_open(bus_url, state, &bus, NULL) == FERRY_OK) {
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            ferry_buf_printf(&b, "{\"code\":\"%s\",\"message\":", ferry_code_name(e->code));
            ferry_buf_json_string(&b, e->message, strlen(e->message));
            ferry_buf_append(&b, "}", 1);
            ferry_bus_emit(bus, run_id, run.attempt, "", FERRY_EV_RUN_FAILED, b.data, NULL);
            ferry_buf_release(&b);
            ferry_bus_close(bus);
        }
    }
    ferry_run_info_clear(&run);
    ferry_store_close(st);
}

/* A retried run that could not start is failed meanwhile, not left `requested` (where a
 * dispatcher could start it a second time). */
struct early_ctx {
    const char *state, *bus;
    int64_t run_id;
    int claimed; /* a pull worker's claimed attempt of the first try */
};

static void early_failed(void *ctx, const struct ferry_run_result *res, const struct ferry_error *e)
{
    const struct early_ctx *ec = ctx;
    if (res->attempt == 0) record_early_failure(ec->state, ec->bus, ec->run_id, ec->claimed, e);
}

/* ---- ferry worker --pull ---- */

struct pull_opts {
    const char *state, *bus;
    int64_t run_id;   /* 0: any run */
    char owner[160];
    int lease_ms;
    bool once;
    int poll_ms;
};

static void print_result(int64_t run_id, const char *what, const struct ferry_run_result *res,
                         int rc, const struct ferry_error *err)
{
    fprintf(stdout, "run %" PRId64 " %s %s: %" PRId64 " rows, %" PRId64 " batches, %.2f s\n",
            run_id, what, res->state ? res->state : "failed", res->rows, res->batches,
            res->seconds);
    if (rc != FERRY_OK && rc != FERRY_EPAUSED) fprintf(stdout, "  %s\n", err->message);
    fflush(stdout);
}

/* One unit of work: *worked says whether there was any; *ended (--run) that the run is
 * final and none of its tasks is left. */
static int pull_once(const struct pull_opts *po, struct ferry_store *st, bool *worked,
                     bool *ended, struct ferry_error *err)
{
    *worked = false;
    *ended = false;
    struct ferry_shard_task t;
    bool found = false;
    int rc = ferry_store_shard_claim(st, po->run_id, po->owner, po->lease_ms, &t, &found, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_run_options o = {
        .state_path = po->state,
        .bus_url = po->bus,
        .out = stdout,
        .owner = po->owner,
        .lease_ms = po->lease_ms,
    };
    struct ferry_run_result res;
    struct ferry_error e;
    ferry_error_clear(&e);
    if (found) {
        *worked = true;
        o.resume_run_id = t.run_id;
        o.shard_resource = t.resource;
        o.shard = t.shard;
        o.shard_token = t.token;
        fprintf(stdout, "worker %s: run %" PRId64 " %s shard %d leased (token %" PRId64 ")\n",
                po->owner, t.run_id, t.resource, t.shard, t.token);
        fflush(stdout);
        rc = ferry_runner_run(&o, &res, &e);
        char what[320];
        snprintf(what, sizeof what, "%s shard %d", t.resource, t.shard);
        print_result(t.run_id, what, &res, rc, &e);
        if (rc == FERRY_ECONFLICT || rc == FERRY_EFENCED) {
            /* The run moved on (ended, another attempt): give the task back at once. */
            ferry_store_shard_renew(st, t.run_id, t.resource, t.shard, t.token, 1, NULL);
            return FERRY_OK;
        }
        if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED) *err = e;
        return rc == FERRY_ECANCELED ? FERRY_OK : rc;
    }
    if (po->run_id > 0) {
        /* --run (an Indexed Job's pods): that run's shards; the run itself while it waits
         * for a worker; exit once it is final. */
        struct ferry_run_info run;
        memset(&run, 0, sizeof run);
        rc = ferry_store_run_get(st, po->run_id, &run, err);
        if (rc != FERRY_OK) return rc;
        bool requested = run.state == FERRY_RUN_REQUESTED;
        *ended = ferry_run_state_is_final(run.state);
        ferry_run_info_clear(&run);
        char dispatch[32] = "";
        if (!requested || ferry_store_run_get_dispatch(st, po->run_id, dispatch, sizeof dispatch,
                                                       NULL) != FERRY_OK ||
            strcmp(dispatch, "pull") != 0)
            return FERRY_OK;
        /* run_claim takes the oldest pull run: an older one waiting is as much this
         * worker's work, and this run then goes to the next claimer. */
    }
    int64_t run_id = 0;
    int attempt = 0;
    rc = ferry_store_run_claim(st, po->owner, (int)getpid(), &run_id, &attempt, &found, err);
    if (rc != FERRY_OK || !found) return rc;
    *worked = true;
    fprintf(stdout, "worker %s: run %" PRId64 " claimed (attempt %d)\n", po->owner, run_id,
            attempt);
    fflush(stdout);
    o.resume_run_id = run_id;
    o.claimed_attempt = attempt;
    /* a run this worker claimed is server-managed: retried on transient errors (retry.h) */
    struct early_ctx ec = {po->state, po->bus, run_id, attempt};
    struct ferry_retry_options ro = {.default_max = 3, .override_max = -1, .stop = &g_quit,
                                     .on_failed_attempt = early_failed, .ctx = &ec};
    rc = ferry_runner_run_retrying(&o, &ro, &res, &e);
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && res.attempt == 0)
        record_early_failure(po->state, po->bus, run_id, attempt, &e);
    print_result(run_id, "as its worker", &res, rc, &e);
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED) *err = e;
    /* The run's own failure is recorded on the run; the worker goes on. */
    return rc == FERRY_EPAUSED || rc == FERRY_ECANCELED ? rc : FERRY_OK;
}

static int pull_loop(struct pull_opts *po)
{
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_store *st = NULL;
    int rc = ferry_store_open(po->state, &st, &err);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: worker: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    fprintf(stdout, "worker %s: pulling work from %s (lease %d ms%s)\n", po->owner,
            ferry_store_path(st), po->lease_ms, po->once ? ", once" : "");
    fflush(stdout);
    int status = 0;
    while (!g_quit) {
        bool worked = false, ended = false;
        rc = pull_once(po, st, &worked, &ended, &err);
        if (rc == FERRY_EPAUSED) break; /* SIGTERM: paused what it held, released it */
        if (rc != FERRY_OK) {
            fprintf(stderr, "ferry: worker: %s\n", err.message);
            status = ferry_code_exit_status(rc);
            if (po->once) break;
        }
        if (worked && po->once) break;
        if (ended && !worked) break; /* --run: the run is over */
        if (!worked)
            for (int waited = 0; waited < po->poll_ms && !g_quit; waited += 50)
                usleep(50000);
    }
    ferry_store_close(st);
    fprintf(stdout, "worker %s: stopped\n", po->owner);
    return status;
}

int ferry_cli_worker(int argc, char **argv)
{
    const char *state = ferry_store_default_url();
    const char *bus = getenv("FERRY_BUS"), *owner = NULL;
    const char *dispatch = NULL;
    int64_t run_id = 0;
    bool pull = false, once = false;
    int lease_ms = 15000;
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"state", required_argument, NULL, 's'},
                                         {"store", required_argument, NULL, 's'},
                                         {"bus", required_argument, NULL, 'b'},
                                         {"pull", no_argument, NULL, 'p'},
                                         {"dispatch", required_argument, NULL, 'D'},
                                         {"owner", required_argument, NULL, 'o'},
                                         {"lease-ms", required_argument, NULL, 'l'},
                                         {"once", no_argument, NULL, '1'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'r':
            run_id = strtoll(optarg, NULL, 10);
            break;
        case 's':
            state = optarg;
            break;
        case 'b':
            bus = optarg;
            break;
        case 'p':
            pull = true;
            break;
        case 'D':
            dispatch = optarg;
            break;
        case 'o':
            owner = optarg;
            break;
        case 'l':
            lease_ms = (int)strtol(optarg, NULL, 10);
            if (lease_ms < 500) {
                fprintf(stderr, "ferry: worker: --lease-ms must be at least 500\n");
                return 2;
            }
            break;
        case '1':
            once = true;
            break;
        case 'h':
            printf("usage: ferry worker --run ID [--state PATH]\n"
                   "       ferry worker --pull [--run ID] [--owner NAME] [--lease-ms N] [--once]\n"
                   "       (--dispatch pull is --pull; $FERRY_DISPATCH=pull too, without --run)\n"
                   "                    [--state PATH|--store URL] [--bus URL]\n\n"
                   "Runs one requested run (started by `ferry serve`; not for everyday use), or,\n"
                   "with --pull, takes work from the store until SIGTERM: shard tasks of running\n"
                   "distributed runs (--run: of that run only), then runs requested with\n"
                   "`ferry serve --dispatch pull`. --once: one piece of work, then exit.\n");
            return 0;
        default:
            return 2;
        }
    }
    /* --dispatch as on `ferry serve`: pull is --pull; local (and kubernetes: a Job's
     * worker) run the one run --run names. $FERRY_DISPATCH=pull makes a worker without
     * --run pull. */
    if (dispatch == NULL && run_id <= 0 && getenv("FERRY_DISPATCH") &&
        !strcmp(getenv("FERRY_DISPATCH"), "pull"))
        dispatch = "pull";
    if (dispatch && !strcmp(dispatch, "pull")) {
        pull = true;
    } else if (dispatch && strcmp(dispatch, "local") && strcmp(dispatch, "kubernetes")) {
        fprintf(stderr, "ferry: worker: --dispatch: \"%s\" is not local, pull or kubernetes\n",
                dispatch);
        return 2;
    }
    if (run_id <= 0 && !pull) {
        fprintf(stderr, "ferry: worker needs --run ID or --pull\n");
        return 2;
    }
    /* secret:NAME: the store's secrets, with the key ferry serve put in FERRY_STORE_KEY. */
    struct ferry_error herr;
    ferry_error_clear(&herr);
    if (ferry_secrets_hook_install(state, &herr) != FERRY_OK) {
        fprintf(stderr, "ferry: worker: %s\n", herr.message);
        return ferry_code_exit_status(herr.code);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (pull) {
        struct pull_opts po = {.state = state, .bus = bus, .run_id = run_id,
                               .lease_ms = lease_ms, .once = once, .poll_ms = 500};
        ferry__lease_owner(owner, po.owner, sizeof po.owner);
        return pull_loop(&po);
    }
    struct ferry_run_options o = {
        .state_path = state,
        .bus_url = bus,
        .resume_run_id = run_id,
        .out = stdout,
    };
    struct ferry_run_result res;
    struct ferry_error err;
    ferry_error_clear(&err);
    fprintf(stdout, "worker pid %d: run %" PRId64 "\n", (int)getpid(), run_id);
    fflush(stdout);
    /* Runs the server manages are retried on transient errors: 3 times unless the pipeline
     * says otherwise (retries:), in this process, from the run's checkpoints. */
    struct early_ctx ec = {state, bus, run_id, 0};
    struct ferry_retry_options ro = {.default_max = 3, .override_max = -1,
                                     .stop = &g_quit, .on_failed_attempt = early_failed,
                                     .ctx = &ec};
    int rc = ferry_runner_run_retrying(&o, &ro, &res, &err);
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && res.attempt == 0)
        record_early_failure(state, bus, run_id, 0, &err);
    fprintf(stdout, "run %" PRId64 " %s: %" PRId64 " rows, %" PRId64 " batches, %.2f s\n", run_id,
            res.state ? res.state : "failed", res.rows, res.batches, res.seconds);
    if (rc != FERRY_OK) fprintf(stderr, "ferry: %s\n", err.message);
    return ferry_code_exit_status(rc);
}
