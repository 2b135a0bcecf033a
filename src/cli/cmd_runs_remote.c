/* cli/cmd_runs_remote.c - `ferry runs start PIPELINE` and `ferry runs watch RUN`. With a
 * server (--server URL / FERRY_SERVER): POST /v1/pipelines/NAME/runs and the run's event
 * stream. Without one: the run is requested in the local state file and run in this process
 * (the worker's path), and watch follows the local event log. Exit status of watch (and of
 * start --watch): as `ferry run` for the run's final state (0 completed, 1 failed,
 * 6 canceled). Calls cli/client, the runner, control (requests), the store. Called by
 * main.c (plain `ferry runs` stays the local listing in main.c). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "control/control.h"
#include "ferry/core.h"
#include "net/http.h"
#include "runner/runner.h"
#include "store/store.h"

static const char *usage =
    "usage: ferry runs start PIPELINE [--idempotency-key KEY] [--watch] [--server URL]\n"
    "                                 [--token env:NAME|file:PATH] [--state PATH] [--json]\n"
    "       ferry runs watch RUN [--after SEQ] [--server URL] [--token REF] [--state PATH] "
    "[--json]\n\n"
    "start: requests a run of a registered pipeline (`ferry pipelines apply`); with a server it\n"
    "is dispatched to a worker there, without one it runs in this process. The same\n"
    "idempotency key gives the same run. watch: prints the run's events until it ends.\n";

struct watch {
    bool json;
    char final[16];
};

static void on_signal(int sig)
{
    (void)sig;
    ferry_runner_signal();
}

static const char *final_state(const char *type)
{
    if (!strcmp(type, FERRY_EV_RUN_COMPLETED)) return "completed";
    if (!strcmp(type, FERRY_EV_RUN_FAILED)) return "failed";
    if (!strcmp(type, FERRY_EV_RUN_CANCELED)) return "canceled";
    return NULL;
}

static void print_event(struct watch *w, int64_t seq, int64_t time_us, int attempt,
                        const char *type, const char *resource, const char *payload)
{
    if (w->json) {
        printf("{\"seq\":%" PRId64 ",\"time_us\":%" PRId64
               ",\"attempt\":%d,\"type\":\"%s\",\"resource\":",
               seq, time_us, attempt, type);
        json_t *r = json_string(resource);
        char *rs = json_dumps(r, JSON_ENCODE_ANY);
        printf("%s,\"payload\":%s}\n", rs ? rs : "\"\"", payload);
        free(rs);
        json_decref(r);
    } else {
        char t[40];
        ferry_format_time_us(time_us, t, sizeof t);
        printf("%8" PRId64 "  %s  #%d  %-34s %-16s %s\n", seq, t, attempt, type, resource, payload);
    }
    fflush(stdout);
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static bool on_remote_event(void *arg, const char *data)
{
    struct watch *w = arg;
    json_t *j = json_loads(data, 0, NULL);
    if (j == NULL) return true;
    const char *type = json_string_value(json_object_get(j, "type"));
    char *payload = json_dumps(json_object_get(j, "payload"), JSON_COMPACT | JSON_ENCODE_ANY);
    print_event(w, json_integer_value(json_object_get(j, "seq")),
                json_integer_value(json_object_get(j, "time_us")),
                (int)json_integer_value(json_object_get(j, "attempt")), type ? type : "",
                str_or_empty(json_string_value(json_object_get(j, "resource"))),
                payload ? payload : "{}");
    const char *f = type ? final_state(type) : NULL;
    if (f) snprintf(w->final, sizeof w->final, "%s", f);
    free(payload);
    json_decref(j);
    return true;
}

static int exit_for(const char *state)
{
    if (!strcmp(state, "completed")) return 0;
    if (!strcmp(state, "canceled")) return ferry_code_exit_status(FERRY_ECANCELED);
    if (!strcmp(state, "paused")) return ferry_code_exit_status(FERRY_EPAUSED);
    return 1;
}

static int watch_remote(struct ferry_client *cl, int64_t run, int64_t after, struct watch *w,
                        struct ferry_error *err)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%" PRId64 "/events?after=%" PRId64, run, after);
    long status = 0;
    int rc = ferry_client_events(cl, path, on_remote_event, w, &status, err);
    if (rc != FERRY_OK) return rc;
    if (w->final[0] == '\0')
        return ferry_error_set(err, FERRY_EIO, "cli",
                               "run %" PRId64 ": the event stream ended"
                               " before the run did",
                               run);
    return FERRY_OK;
}

static int watch_local(const char *state, int64_t run, int64_t after, struct watch *w,
                       struct ferry_error *err)
{
    struct ferry_store *st = NULL;
    struct ferry_run_info info;
    int rc = ferry_store_open(state, &st, err);
    if (rc == FERRY_OK) rc = ferry_store_run_get(st, run, &info, err);
    if (rc == FERRY_OK) ferry_run_info_clear(&info);
    while (rc == FERRY_OK && w->final[0] == '\0') {
        bool was_final = ferry_store_run_get(st, run, &info, NULL) == FERRY_OK &&
                         ferry_run_state_is_final(info.state);
        if (was_final) snprintf(w->final, sizeof w->final, "%s", ferry_run_state_name(info.state));
        ferry_run_info_clear(&info);
        struct ferry_event *evs = NULL;
        int n = 0;
        rc = ferry_store_event_read(st, after, run, 500, &evs, &n, err);
        for (int i = 0; rc == FERRY_OK && i < n; i++) {
            print_event(w, evs[i].seq, evs[i].time_us, evs[i].attempt, evs[i].type, evs[i].resource,
                        evs[i].payload ? evs[i].payload : "{}");
            after = evs[i].seq;
        }
        ferry_events_free(evs, n);
        if (n == 500)
            w->final[0] = '\0'; /* more to print first */
        else if (!was_final)
            usleep(200000);
    }
    ferry_store_close(st);
    return rc;
}

/* A key of the CLI's own for a start without --idempotency-key, so that a retry after a
 * lost answer finds the run the server started instead of starting another. false: no
 * randomness (the request then goes without a key). */
static bool auto_key(char *out, size_t len)
{
    unsigned char rnd[12];
    FILE *ur = fopen("/dev/urandom", "rb");
    bool got = ur && fread(rnd, 1, sizeof rnd, ur) == sizeof rnd;
    if (ur) fclose(ur);
    if (!got) return false;
    int o = snprintf(out, len, "cli-");
    for (size_t i = 0; i < sizeof rnd; i++)
        o += snprintf(out + o, len - (size_t)o, "%02x", rnd[i]);
    return true;
}

/* `ferry runs start NAME --server URL`: POST /v1/pipelines/NAME/runs; *run: its id. */
static int start_remote(struct ferry_client *cl, const char *arg, const char *key, bool json,
                        int64_t *run, struct ferry_error *err)
{
    char path[512];
    char *enc = ferry__http_escape(arg, strlen(arg));
    snprintf(path, sizeof path, "/v1/pipelines/%s/runs", enc ? enc : arg);
    ferry_free(enc);
    json_t *b = key ? json_pack("{s:s}", "idempotency_key", key) : json_object();
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    char own_key[40];
    const char *send_key = key ? key : auto_key(own_key, sizeof own_key) ? own_key : NULL;
    struct ferry_buf out;
    ferry_buf_init(&out, 0);
    long status = 0;
    int attempts = 1;
    int rc = send_key ? ferry_client_post_keyed(cl, path, send_key, body, strlen(body), &status,
                                                &out, &attempts, err)
                      : ferry_client_request(cl, "POST", path, "application/json", body,
                                             strlen(body), &status, &out, err);
    free(body);
    if (rc == FERRY_EIO && send_key) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        ferry_error_set(err, rc, "cli",
                        "pipeline %s: %s (%d attempt%s); the run may have been requested:"
                        " `ferry runs start %s --idempotency-key %s` gives that run, or"
                        " requests it",
                        arg, why, attempts, attempts == 1 ? "" : "s", arg, send_key);
    }
    if (rc == FERRY_OK && status != 200 && status != 201) {
        char msg[768];
        ferry_client_error_message(status, &out, msg, sizeof msg);
        rc = ferry_error_set(err, status == 404 ? FERRY_ENOTFOUND : FERRY_EIO, "http",
                             "pipeline %s: %s", arg, msg);
    }
    if (rc == FERRY_OK) {
        json_t *j = json_loadb(out.data, out.len, 0, NULL);
        *run = json_integer_value(json_object_get(j, "id"));
        bool existed = json_is_true(json_object_get(j, "existed"));
        if (json)
            printf("%s\n", out.data);
        else
            printf("run %" PRId64 " of pipeline %s %s\n", *run, arg,
                   !existed ? "requested"
                   : key    ? "already requested with this key"
                            : "requested (by an earlier attempt whose answer was lost)");
        fflush(stdout);
        json_decref(j);
    }
    ferry_buf_release(&out);
    return rc;
}

/* No server: request the run in the local state and run it here (or, when the key names a
 * run already requested, watch it with --watch). */
static int start_local(const struct ferry_client_opts *co, const char *arg, const char *key,
                       bool watch, int64_t *run, struct watch *w, struct ferry_error *err)
{
    struct ferry_store *st = NULL;
    struct ferry_bus *bus = NULL;
    bool existed = false;
    int rc = ferry_store_open(co->state, &st, err);
    if (rc == FERRY_OK) rc = ferry_bus_inproc_open(co->state, &bus, err);
    if (rc == FERRY_OK)
        rc = ferry_control_request_run(st, bus, arg, "cli", key, run, &existed, err);
    ferry_bus_close(bus);
    ferry_store_close(st);
    if (rc != FERRY_OK) return rc;
    printf("run %" PRId64 " of pipeline %s %s\n", *run, arg,
           existed ? "already requested with this key" : "requested");
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct ferry_run_options o = {.state_path = co->state,
                                  .resume_run_id = *run,
                                  .out = co->json ? NULL : stdout,
                                  .quiet = co->json};
    struct ferry_run_result res;
    if (!existed) {
        rc = ferry_runner_run(&o, &res, err);
        snprintf(w->final, sizeof w->final, "%s", res.state ? res.state : "failed");
        if (rc == FERRY_EPAUSED || rc == FERRY_ECANCELED) rc = FERRY_OK;
    } else if (watch) {
        rc = watch_local(co->state, *run, 0, w, err);
    }
    return rc;
}

int ferry_cli_runs_remote(int argc, char **argv)
{
    struct ferry_client_opts co;
    ferry_client_opts_init(&co);
    const char *key = NULL;
    bool watch = false;
    int64_t after = 0;
    static const struct option opts[] = {{"server", required_argument, NULL, 'S'},
                                         {"token", required_argument, NULL, 't'},
                                         {"state", required_argument, NULL, 's'},
                                         {"idempotency-key", required_argument, NULL, 'k'},
                                         {"watch", no_argument, NULL, 'w'},
                                         {"after", required_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 3;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ferry_client_opts_take(&co, ch, optarg)) continue;
        switch (ch) {
        case 'k':
            key = optarg;
            break;
        case 'w':
            watch = true;
            break;
        case 'a':
            after = atoll(optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    bool start = !strcmp(argv[2], "start");
    if (argc - optind != 1) {
        fputs(usage, stderr);
        return 2;
    }
    const char *arg = argv[optind];
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_client cl;
    bool remote = false;
    struct watch w = {.json = co.json};
    int64_t run = 0;
    int rc = ferry_client_init(&cl, co.server, co.token, &remote, &err);
    if (rc == FERRY_OK && !start) {
        char *end;
        run = strtoll(arg, &end, 10);
        if (*end != '\0' || run <= 0)
            rc = ferry_error_set(&err, FERRY_ECONFIG, "cli", "\"%s\" is not a run number", arg);
        if (rc == FERRY_OK)
            rc = remote ? watch_remote(&cl, run, after, &w, &err)
                        : watch_local(co.state, run, after, &w, &err);
    } else if (rc == FERRY_OK && remote) {
        rc = start_remote(&cl, arg, key, co.json, &run, &err);
        if (rc == FERRY_OK && watch) rc = watch_remote(&cl, run, 0, &w, &err);
    } else if (rc == FERRY_OK) {
        rc = start_local(&co, arg, key, watch, &run, &w, &err);
    }
    ferry_client_release(&cl);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: error: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    if (w.final[0]) {
        if (!co.json) printf("run %" PRId64 " %s\n", run, w.final);
        return exit_for(w.final);
    }
    return 0;
}
