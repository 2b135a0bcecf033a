/* cli/cmd_ops.c - `ferry schedules add|list|rm` and `ferry runs retry RUN` (issue 21).
 * schedules talk to `ferry serve` (--server URL or FERRY_SERVER): its scheduler computes
 * the firings and owns the cron rules (POST/GET/DELETE /v1/schedules). runs retry: with a
 * server, POST /v1/runs/RUN/retry (the run is dispatched again); without one, the failed
 * run is resumed in this process from its checkpoints, as its own worker would. Calls
 * cli/client, the runner (retry.h), the store. Called by main.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "ferry/core.h"
#include "net/http.h"
#include "runner/retry.h"
#include "store/store.h"

static const char *usage_schedules =
    "usage: ferry schedules add PIPELINE --cron \"MIN HOUR DOM MON DOW\" [--timezone TZ]\n"
    "                           [--overlap skip|queue|allow] [--disabled]\n"
    "       ferry schedules list [--pipeline NAME]\n"
    "       ferry schedules rm ID\n"
    "common: [--server URL] [--token env:NAME|file:PATH] [--json]\n\n"
    "Schedules live in `ferry serve` (--server URL or $FERRY_SERVER), whose scheduler fires\n"
    "them: each firing requests a run of the registered pipeline.\n";

static const char *usage_retry =
    "usage: ferry runs retry RUN [--server URL] [--token REF] [--state PATH] [--json]\n\n"
    "A failed run again: with a server it is requested (a worker resumes it from its\n"
    "checkpoints); without one it is resumed in this process.\n";

/* One request; *out holds the JSON reply. Non-2xx becomes an error with the API's message. */
static int call(struct ferry_client *cl, const char *method, const char *path, const char *body,
                json_t **out, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    long status = 0;
    int rc = ferry_client_request(cl, method, path, body ? "application/json" : NULL, body,
                                  body ? strlen(body) : 0, &status, &b, err);
    if (rc == FERRY_OK && (status < 200 || status > 299)) {
        char msg[768];
        ferry_client_error_message(status, &b, msg, sizeof msg);
        rc = ferry_error_set(err, status == 404 ? FERRY_ENOTFOUND
                                  : status == 409 ? FERRY_ECONFLICT
                                  : status == 400 ? FERRY_ECONFIG
                                                  : FERRY_EIO,
                             "http", "%s", msg);
    }
    *out = rc == FERRY_OK && b.data ? json_loadb(b.data, b.len, 0, NULL) : NULL;
    ferry_buf_release(&b);
    return rc;
}

static void print_schedule(json_t *s)
{
    printf("%-6" JSON_INTEGER_FORMAT " %-24s %-20s %-16s %-6s %s\n",
           json_integer_value(json_object_get(s, "id")),
           json_string_value(json_object_get(s, "pipeline")),
           json_string_value(json_object_get(s, "cron")),
           json_string_value(json_object_get(s, "timezone")),
           json_string_value(json_object_get(s, "overlap")),
           json_is_false(json_object_get(s, "enabled")) ? "disabled" : "enabled");
}

static int finish(int rc, const struct ferry_error *err)
{
    if (rc == FERRY_OK) return 0;
    fprintf(stderr, "ferry: error: %s\n", err->message);
    return ferry_code_exit_status(rc);
}

int ferry_cli_schedules(int argc, char **argv)
{
    struct ferry_client_opts co;
    ferry_client_opts_init(&co);
    const char *cron = NULL, *tz = NULL, *overlap = NULL, *pipeline = NULL;
    bool disabled = false;
    static const struct option opts[] = {{"server", required_argument, NULL, 'S'},
                                         {"token", required_argument, NULL, 't'},
                                         {"state", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"cron", required_argument, NULL, 'c'},
                                         {"timezone", required_argument, NULL, 'z'},
                                         {"overlap", required_argument, NULL, 'o'},
                                         {"pipeline", required_argument, NULL, 'p'},
                                         {"disabled", no_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 3;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ferry_client_opts_take(&co, ch, optarg)) continue;
        switch (ch) {
        case 'c': cron = optarg; break;
        case 'z': tz = optarg; break;
        case 'o': overlap = optarg; break;
        case 'p': pipeline = optarg; break;
        case 'd': disabled = true; break;
        case 'h': fputs(usage_schedules, stdout); return 0;
        default: fputs(usage_schedules, stderr); return 2;
        }
    }
    const char *verb = argc > 2 ? argv[2] : "";
    int nargs = argc - optind;
    bool add = !strcmp(verb, "add"), list = !strcmp(verb, "list"), rm = !strcmp(verb, "rm");
    if ((!add && !list && !rm) || (add && (nargs != 1 || cron == NULL)) || (rm && nargs != 1) ||
        (list && nargs != 0)) {
        fputs(usage_schedules, stderr);
        return 2;
    }
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_client cl;
    bool remote = false;
    int rc = ferry_client_init(&cl, co.server, co.token, &remote, &err);
    if (rc == FERRY_OK && !remote)
        rc = ferry_error_set(&err, FERRY_ECONFIG, "cli",
                             "ferry schedules needs a server: --server URL or FERRY_SERVER "
                             "(schedules are fired by `ferry serve`)");
    json_t *reply = NULL;
    if (rc == FERRY_OK && add) {
        json_t *b = json_pack("{s:s,s:s,s:b}", "pipeline", argv[optind], "cron", cron, "enabled",
                              !disabled);
        if (tz) json_object_set_new(b, "timezone", json_string(tz));
        if (overlap) json_object_set_new(b, "overlap", json_string(overlap));
        char *body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        rc = call(&cl, "POST", "/v1/schedules", body, &reply, &err);
        free(body);
        if (rc == FERRY_OK && !co.json) print_schedule(reply);
    } else if (rc == FERRY_OK && list) {
        char path[600] = "/v1/schedules";
        if (pipeline) {
            char *q = ferry__http_escape(pipeline, strlen(pipeline));
            snprintf(path, sizeof path, "/v1/schedules?pipeline=%s", q ? q : "");
            ferry_free(q);
        }
        rc = call(&cl, "GET", path, NULL, &reply, &err);
        size_t i;
        json_t *s;
        if (rc == FERRY_OK && !co.json)
            json_array_foreach(json_object_get(reply, "schedules"), i, s) print_schedule(s);
    } else if (rc == FERRY_OK && rm) {
        char *end;
        long long id = strtoll(argv[optind], &end, 10);
        if (*argv[optind] == '\0' || *end != '\0' || id <= 0) {
            rc = ferry_error_set(&err, FERRY_ECONFIG, "cli", "\"%s\" is not a schedule id",
                                 argv[optind]);
        } else {
            char path[64];
            snprintf(path, sizeof path, "/v1/schedules/%lld", id);
            rc = call(&cl, "DELETE", path, NULL, &reply, &err);
            if (rc == FERRY_OK && !co.json) printf("schedule %lld removed\n", id);
        }
    }
    if (rc == FERRY_OK && co.json) {
        char *s = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
        printf("%s\n", s ? s : "{}");
        free(s);
    }
    json_decref(reply);
    ferry_client_release(&cl);
    return finish(rc, &err);
}

int ferry_cli_runs_retry(int argc, char **argv)
{
    struct ferry_client_opts co;
    ferry_client_opts_init(&co);
    static const struct option opts[] = {{"server", required_argument, NULL, 'S'},
                                         {"token", required_argument, NULL, 't'},
                                         {"state", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 3;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ferry_client_opts_take(&co, ch, optarg)) continue;
        if (ch == 'h') return fputs(usage_retry, stdout), 0;
        fputs(usage_retry, stderr);
        return 2;
    }
    char *end = NULL;
    long long id = optind < argc ? strtoll(argv[optind], &end, 10) : 0;
    if (argc - optind != 1 || *argv[optind] == '\0' || *end != '\0' || id <= 0) {
        fputs(usage_retry, stderr);
        return 2;
    }
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_client cl;
    bool remote = false;
    int rc = ferry_client_init(&cl, co.server, co.token, &remote, &err);
    if (rc == FERRY_OK && remote) {
        char path[64];
        snprintf(path, sizeof path, "/v1/runs/%lld/retry", id);
        json_t *reply = NULL;
        rc = call(&cl, "POST", path, "{}", &reply, &err);
        if (rc == FERRY_OK) {
            if (co.json) printf("{\"id\":%lld,\"state\":\"requested\"}\n", id);
            else printf("run %lld requested again\n", id);
        }
        json_decref(reply);
    } else if (rc == FERRY_OK) {
        /* local: only a failed run; resumed here, with the transient-error retries of a
         * served run's worker */
        struct ferry_store *st = NULL;
        struct ferry_run_info run;
        memset(&run, 0, sizeof run);
        rc = ferry_store_open(co.state, &st, &err);
        if (rc == FERRY_OK) rc = ferry_store_run_get(st, id, &run, &err);
        if (rc == FERRY_OK && run.state != FERRY_RUN_FAILED)
            rc = ferry_error_set(&err, FERRY_ECONFLICT, "cli",
                                 "run %lld is %s; only a failed run can be retried", id,
                                 ferry_run_state_name(run.state));
        ferry_run_info_clear(&run);
        ferry_store_close(st);
        if (rc == FERRY_OK) {
            struct ferry_run_options o = {.state_path = co.state, .resume_run_id = id,
                                          .quiet = co.json, .out = co.json ? NULL : stdout};
            struct ferry_retry_options ro = {.default_max = 0, .override_max = -1,
                                             .stop = &ferry_cli_signaled};
            struct ferry_run_result res;
            rc = ferry_runner_run_retrying(&o, &ro, &res, &err);
            if (co.json)
                printf("{\"id\":%lld,\"state\":\"%s\",\"attempt\":%d}\n", id,
                       res.state ? res.state : "failed", res.attempt);
            else
                printf("run %lld %s (attempt %d)\n", id, res.state ? res.state : "failed",
                       res.attempt);
        }
    }
    ferry_client_release(&cl);
    return finish(rc, &err);
}
