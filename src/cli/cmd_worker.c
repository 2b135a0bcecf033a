/* cli/cmd_worker.c - `ferry worker --run ID --state PATH`: runs one requested run in this
 * process, as a child of `ferry serve` (control/dispatcher.c starts it).
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
#include "runner/runner.h"
#include "store/store.h"

static void on_signal(int sig)
{
    (void)sig;
    ferry_runner_signal();
}

/* The run never got an attempt: say why on the run. */
static void record_early_failure(const char *state, int64_t run_id, const struct ferry_error *e)
{
    struct ferry_store *st = NULL;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (ferry_store_open(state, &st, NULL) != FERRY_OK) return;
    if (ferry_store_run_get(st, run_id, &run, NULL) == FERRY_OK &&
        run.state == FERRY_RUN_REQUESTED &&
        ferry_store_run_set_state(st, run_id, run.attempt, FERRY_RUN_FAILED, e->message, NULL) ==
            FERRY_OK) {
        struct ferry_bus *bus = NULL;
        if (ferry_bus_inproc_open(state, &bus, NULL) == FERRY_OK) {
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

int ferry_cli_worker(int argc, char **argv)
{
    const char *state = getenv("FERRY_STATE");
    if (state == NULL || state[0] == '\0') state = ".ferry/state.db";
    int64_t run_id = 0;
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"state", required_argument, NULL, 's'},
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
        case 'h':
            printf("usage: ferry worker --run ID [--state PATH]\n\n"
                   "Runs one requested run (started by `ferry serve`; not for everyday use).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (run_id <= 0) {
        fprintf(stderr, "ferry: worker needs --run ID\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct ferry_run_options o = {
        .state_path = state,
        .resume_run_id = run_id,
        .out = stdout,
    };
    struct ferry_run_result res;
    struct ferry_error err;
    ferry_error_clear(&err);
    fprintf(stdout, "worker pid %d: run %" PRId64 "\n", (int)getpid(), run_id);
    fflush(stdout);
    int rc = ferry_runner_run(&o, &res, &err);
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && res.attempt == 0)
        record_early_failure(state, run_id, &err);
    fprintf(stdout, "run %" PRId64 " %s: %" PRId64 " rows, %" PRId64 " batches, %.2f s\n", run_id,
            res.state ? res.state : "failed", res.rows, res.batches, res.seconds);
    if (rc != FERRY_OK) fprintf(stderr, "ferry: %s\n", err.message);
    return ferry_code_exit_status(rc);
}
