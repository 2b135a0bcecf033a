/* cli/main.c - the `ferry` command: argument parsing, output (human or --json), exit
 * statuses. Data and results go to stdout, diagnostics and progress to stderr.
 * Calls: the runner (run, check, resume) and the state store (runs, show, events,
 * checkpoints, pause, cancel). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "cli/commands.h"
#include "control/attempts.h"
#include "server/server.h"
#include "ferry/core.h"
#include "ferry/connector.h"
#include "runner/retry.h"
#include "runner/runner.h"
#include "store/store.h"
#include "store/secrets.h"

#define FERRY_VERSION_STRING "0.1.0"

struct cli {
    const char *state;
    const char *bus; /* --bus or $FERRY_BUS: event bus URL (bus/bus.h ferry_bus_open) */
    bool json;
    bool fresh;
    bool follow;
    int64_t epoch_ms; /* run --follow: one bounded cdc run per epoch (cmd_cdc.c) */
    int64_t epoch_rows; /* run --follow --epoch-rows: or after this many changes */
    bool quiet;
    const char *pipeline;
    int limit;
    int64_t after;
    int retries; /* run --retries N (-1: the pipeline's retries.max, else 0) */
};

static const char *usage_main =
    "ferry - move tables between databases and files, checked and resumable\n"
    "\n"
    "usage: ferry COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run FILE          run a pipeline (resumes its unfinished run unless --fresh)\n"
    "  check FILE        validate a pipeline file and print its plan; moves nothing\n"
    "  copy SRC DEST     copy tables in one line (--tables P, --follow); writes the pipeline\n"
    "  resume RUN [FILE] continue a paused, failed or interrupted run\n"
    "  pause RUN         ask a running run to drain, commit and pause\n"
    "  cancel RUN        ask a running run to stop and abort\n"
    "  runs              list runs, newest first\n"
    "  show RUN          one run: state, counts, integrity, resources, checkpoints\n"
    "  events RUN        the run's events (--follow to keep watching)\n"
    "  checkpoints       route checkpoints carried from run to run\n"
    "  verify FILE       compare destinations with their sources; --repair fixes them\n"
    "  cdc drop FILE     drop the replication slots and publications of a cdc pipeline\n"
    "  secrets put|list|rm|rotate-key  the encrypted secrets store (values on stdin)\n"
    "  iceberg expire TABLE  expire old snapshots of an Iceberg table, delete unreachable files\n"
    "  connectors        available sources and sinks\n"
    "  serve             HTTP API, web UI and control plane (see `ferry serve --help`)\n"
    "  worker            run one requested run (started by `ferry serve`), or --pull work\n"
    "  pipelines apply FILE   register a pipeline (with a server: --server URL or $FERRY_SERVER)\n"
    "  runs start PIPELINE    request a run of a registered pipeline\n"
    "  runs watch RUN         follow a run's events until it ends\n"
    "  runs retry RUN         a failed run again, from its checkpoints\n"
    "  schedules add|list|rm  cron schedules of registered pipelines (with a server)\n"
    "  version           print the version\n"
    "\n"
    "common options:\n"
    "  --state PATH      state database (default ./.ferry/state.db, or $FERRY_STATE)\n"
    "  --store URL       the same, as a URL: postgres://USER@HOST/DB[?schema=S], env:NAME,\n"
    "                    file:PATH, or a SQLite path ($FERRY_STORE)\n"
    "  --bus URL         event bus: inproc (default), postgres://..., nats://..., env:NAME,\n"
    "                    file:PATH (or $FERRY_BUS); run, resume, events, pause, cancel\n"
    "  --json            machine-readable output on stdout\n"
    "  -h, --help        help for a command: ferry run --help\n"
    "\n"
    "exit status: 0 ok, 1 failed, 2 usage or configuration error, 3 refused by policy,\n"
    "4 integrity divergence, 5 paused, 6 canceled, 7 not found, 8 verify found differences.\n";

static void command_help(const char *cmd)
{
    if (!strcmp(cmd, "run"))
        printf("usage: ferry run FILE [--state PATH] [--bus URL] [--fresh] [--json] [--quiet]\n"
               "                      [--follow [--epoch 10s] [--epoch-rows N]] [--retries N]\n\n"
               "Runs the pipeline FILE. When the newest run of the same pipeline version did not\n"
               "complete (crash, kill, pause, failure), it is resumed from its last durable\n"
               "checkpoint; --fresh starts a new run instead. Ctrl-C (SIGINT) or SIGTERM once: drain what was\n"
               "read, commit and pause; twice: stop at once and abort the session.\n"
               "Progress goes to stderr (a live line on a terminal); the summary to stdout.\n"
               "cdc pipelines: --follow repeats bounded runs, one per --epoch (default 10s),\n"
               "each committing and acknowledging the replication slot, until a signal;\n"
               "--epoch-rows N also ends an epoch after N changes (the next starts at once).\n"
               "--bus URL (or $FERRY_BUS): where the run's events go: inproc (default, the state\n"
               "file), postgres://... or nats://... (docs/operations.md, choosing a bus).\n"
               "--retries N: an attempt failing on a transient error (connection refused or\n"
               "reset, server restart, timeout, HTTP 5xx/429) is retried up to N times from the\n"
               "run's checkpoints, with the pipeline's retries: backoff (default 0 retries).\n");
    else if (!strcmp(cmd, "check"))
        printf("usage: ferry check FILE [--state PATH]\n\n"
               "Loads FILE, connects to source and sink, discovers the resources, applies the\n"
               "policy and prints the plan. Nothing is written and no run is recorded.\n");
    else if (!strcmp(cmd, "resume"))
        printf("usage: ferry resume RUN [FILE] [--state PATH] [--json]\n\n"
               "Continues run RUN from its checkpoints. Without FILE the pipeline saved with\n"
               "the run is used; a FILE must have the same pipeline version.\n");
    else if (!strcmp(cmd, "pause") || !strcmp(cmd, "cancel"))
        printf("usage: ferry %s RUN [--state PATH]\n\n"
               "Asks the process running RUN to %s (it checks every half second).\n", cmd,
               !strcmp(cmd, "pause") ? "drain, commit and pause" : "stop and abort");
    else if (!strcmp(cmd, "runs"))
        printf("usage: ferry runs [--pipeline NAME] [--limit N] [--state PATH] [--json]\n");
    else if (!strcmp(cmd, "show"))
        printf("usage: ferry show RUN [--state PATH] [--json]\n");
    else if (!strcmp(cmd, "events"))
        printf("usage: ferry events RUN [--after SEQ] [--follow] [--state PATH] [--json]\n\n"
               "Prints the run's events in order; --follow waits for new ones until the run ends.\n");
    else if (!strcmp(cmd, "checkpoints"))
        printf("usage: ferry checkpoints [--pipeline NAME] [--state PATH] [--json]\n\n"
               "Route checkpoints: where the next incremental run of each route starts.\n");
    else
        fputs(usage_main, stdout);
}

static void on_signal(int sig)
{
    (void)sig;
    static int count;
    count++;
    const char *m1 = "\nferry: pausing: draining and committing what was read "
                     "(press Ctrl-C again to cancel)\n";
    const char *m2 = "\nferry: canceling\n";
    const char *m = count == 1 ? m1 : m2;
    ssize_t w = write(STDERR_FILENO, m, strlen(m));
    (void)w;
    ferry_cli_signaled = 1;
    ferry_runner_signal();
}

static int fail(const struct cli *c, const struct ferry_error *e)
{
    if (c->json) {
        json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", ferry_code_name(e->code),
                              "message", e->message);
        char *s = json_dumps(j, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(j);
    }
    fprintf(stderr, "ferry: error: %s\n", e->message);
    return ferry_code_exit_status(e->code);
}

static int parse_run_id(const char *s, int64_t *out, struct ferry_error *err)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0)
        return ferry_error_set(err, FERRY_ECONFIG, "cli", "\"%s\" is not a run number", s);
    *out = v;
    return FERRY_OK;
}

static int report_run(struct cli *c, int rc, const struct ferry_run_result *r,
                      const struct ferry_error *e);

static int cmd_run(struct cli *c, const char *file, int64_t resume_id, bool check)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct ferry_run_options o = {
        .pipeline_path = file,
        .state_path = c->state,
        .fresh = c->fresh,
        .resume_run_id = resume_id,
        .progress_tty = !c->json && !c->quiet && isatty(STDERR_FILENO),
        .quiet = c->json || c->quiet,
        .plan_only = check,
        .out = c->json ? NULL : stdout,
        .cdc_epoch_rows = c->follow ? c->epoch_rows : 0,
        .cdc_follow = c->follow,
        .bus_url = c->bus,
    };
    if (check) o.quiet = false, o.out = stdout;
    struct ferry_run_result res;
    struct ferry_error err;
    ferry_error_clear(&err);
    int64_t started = ferry_now_mono_us();
    /* failed attempts with a transient error: again, from the run's checkpoints */
    struct ferry_retry_options ro = {.default_max = 0, .override_max = c->retries,
                                     .stop = &ferry_cli_signaled};
    int rc = check ? ferry_runner_run(&o, &res, &err) : ferry_runner_run_retrying(&o, &ro, &res, &err);
    if (check) return rc == FERRY_OK ? (printf("ok: %s\n", file), 0) : fail(c, &err);
    int status = report_run(c, rc, &res, &err);
    /* cdc: a stream that stopped at a schema change goes on at once in a new run; --follow
     * repeats bounded runs, one per epoch, until a signal (docs/cli.md). */
    int again = 0; /* runs in a row that stopped early: a schema change each, never endless */
    while (status == 0 && resume_id == 0 && (res.cdc_more || c->follow)) {
        /* Row-count epochs end runs early by design: only schema-change stops count. */
        again = res.cdc_more && o.cdc_epoch_rows == 0 ? again + 1 : 0;
        if (again > 20) {
            fprintf(stderr, "ferry: 20 runs in a row stopped at a source schema change; stopping\n");
            return 1;
        }
        if (!ferry_cli_cdc_next_epoch(res.cdc_more, started, c->epoch_ms)) break;
        started = ferry_now_mono_us();
        o.fresh = false;
        ferry_error_clear(&err);
        rc = ferry_runner_run(&o, &res, &err);
        status = report_run(c, rc, &res, &err);
    }
    return status;
}

static int report_run(struct cli *c, int rc, const struct ferry_run_result *r,
                      const struct ferry_error *e)
{
    struct ferry_run_result res = *r;
    struct ferry_error err = *e;
    if (c->json) {
        json_t *j = json_pack("{s:I,s:i,s:b,s:s,s:I,s:I,s:I,s:f,s:I}", "run_id",
                              (json_int_t)res.run_id, "attempt", res.attempt, "resumed",
                              res.resumed, "state", res.state, "rows", (json_int_t)res.rows,
                              "bytes", (json_int_t)res.bytes, "batches", (json_int_t)res.batches,
                              "seconds", res.seconds, "peak_rss_bytes", (json_int_t)res.peak_rss);
        json_object_set_new(j, "converted", json_integer((json_int_t)res.converted));
        if (rc != FERRY_OK)
            json_object_set_new(j, "error", json_pack("{s:s,s:s}", "code", ferry_code_name(rc),
                                                      "message", err.message));
        char *s = json_dumps(j, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(j);
        if (rc != FERRY_OK) fprintf(stderr, "ferry: %s: %s\n", rc == FERRY_EPAUSED ? "paused" : "error", err.message);
        if (rc == FERRY_OK && res.partial)
            fprintf(stderr, "ferry: run %" PRId64 " partial: %s\n", res.run_id, res.partial_message);
        return rc == FERRY_OK && res.partial ? 1 : ferry_code_exit_status(rc);
    }
    if (res.run_id > 0 && !c->quiet) {
        double secs = res.seconds > 0 ? res.seconds : 1e-9;
        printf("run %" PRId64 " %s: %" PRId64 " rows, %.1f MB, %" PRId64
               " batches verified, %.2f s (%.0f rows/s, %.1f MB/s), peak memory %.1f MiB\n",
               res.run_id, res.state, res.rows, (double)res.bytes / 1e6, res.batches, res.seconds,
               (double)res.rows / secs, (double)res.bytes / secs / 1e6,
               (double)res.peak_rss / (1024.0 * 1024.0));
        if (res.converted > 0)
            printf("run %" PRId64 ": %" PRId64 " value(s) converted (on_unrepresentable; ferry show "
                   "%" PRId64 " lists them per column)\n",
                   res.run_id, res.converted, res.run_id);
    }
    if (rc == FERRY_EPAUSED) {
        fprintf(stderr, "ferry: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    if (rc != FERRY_OK) return fail(c, &err);
    /* on_resource_error: continue - committed, but not everything moved: exit 1 */
    if (res.partial) {
        fprintf(stderr, "ferry: run %" PRId64 " partial: %s\n", res.run_id, res.partial_message);
        return 1;
    }
    return 0;
}

static void print_run_line(const struct ferry_run_info *r)
{
    char created[40];
    ferry_format_time_us(r->created_us, created, sizeof created);
    printf("%6" PRId64 "  %-20.20s  %-9s  %3d  %12" PRId64 "  %s%s%s\n", r->id, r->pipeline,
           ferry_run_state_name(r->state), r->attempt, r->rows, created,
           r->error[0] ? "  " : "", r->error);
}

static json_t *run_json(const struct ferry_run_info *r)
{
    return json_pack("{s:I,s:s,s:s,s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s}", "id",
                     (json_int_t)r->id, "pipeline", r->pipeline, "version", r->version, "state",
                     ferry_run_state_name(r->state), "attempt", r->attempt, "created_us",
                     (json_int_t)r->created_us, "started_us", (json_int_t)r->started_us,
                     "ended_us", (json_int_t)r->ended_us, "rows", (json_int_t)r->rows, "bytes",
                     (json_int_t)r->bytes, "batches", (json_int_t)r->batches, "verified",
                     (json_int_t)r->verified, "diverged", (json_int_t)r->diverged, "error",
                     r->error);
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(j);
}

static int cmd_runs(struct cli *c)
{
    struct ferry_store *st;
    struct ferry_error err;
    if (ferry_store_open(c->state, &st, &err) != FERRY_OK) return fail(c, &err);
    struct ferry_run_info *v = NULL;
    int n = 0;
    int rc = ferry_store_run_list(st, c->pipeline, c->limit, &v, &n, &err);
    if (rc == FERRY_OK) {
        if (c->json) {
            json_t *a = json_array();
            for (int i = 0; i < n; i++) json_array_append_new(a, run_json(&v[i]));
            print_json(a);
        } else {
            printf("%6s  %-20s  %-9s  %3s  %12s  %s\n", "RUN", "PIPELINE", "STATE", "ATT", "ROWS",
                   "CREATED");
            for (int i = 0; i < n; i++) print_run_line(&v[i]);
        }
    }
    ferry_run_infos_free(v, n);
    ferry_store_close(st);
    return rc == FERRY_OK ? 0 : fail(c, &err);
}

/* on_error: skip: the count and the first samples (where and why, never a value). */
static void show_skips(const struct cli *c, struct ferry_store *st, int64_t id,
                       const char *resource, int64_t skipped, json_t *jr)
{
    char *text = NULL;
    ferry_store_resource_skips_get(st, id, resource, &text, NULL);
    json_t *sk = text ? json_loads(text, 0, NULL) : NULL;
    ferry_free(text);
    json_t *samples = json_object_get(sk, "samples");
    if (!c->json) {
        printf("    skipped %" PRId64 " bad record%s (on_error: skip)%s\n", skipped,
               skipped == 1 ? "" : "s", json_array_size(samples) ? "; first:" : "");
        size_t i;
        json_t *v;
        json_array_foreach(samples, i, v) {
            const char *at = json_string_value(json_object_get(v, "at"));
            const char *why = json_string_value(json_object_get(v, "reason"));
            printf("      %s: %s\n", at ? at : "?", why ? why : "?");
        }
    }
    json_object_set_new(jr, "skipped_samples", json_is_array(samples) ? json_incref(samples)
                                                                       : json_array());
    json_decref(sk);
}

/* on_unrepresentable: null | clamp: the values converted, per column. */
static void show_converted(const struct cli *c, struct ferry_store *st, int64_t id,
                           const char *resource, json_t *jr)
{
    char *text = NULL;
    ferry_store_resource_converted_get(st, id, resource, &text, NULL);
    json_t *cv = text ? json_loads(text, 0, NULL) : NULL;
    ferry_free(text);
    if (!json_is_object(cv)) {
        json_decref(cv);
        cv = json_object();
    }
    const char *col;
    json_t *v;
    json_object_foreach(cv, col, v)
    {
        if (c->json) continue;
        json_int_t n = json_integer_value(json_object_get(v, "null"));
        json_int_t m = json_integer_value(json_object_get(v, "clamp"));
        printf("    converted column %s: %lld to NULL, %lld clamped (on_unrepresentable)\n", col,
               (long long)n, (long long)m);
    }
    json_object_set_new(jr, "converted", cv);
}

/* The attempt history (control/attempts.c) into j.attempts, and printed. */
static void show_attempts(struct cli *c, struct ferry_store *st, int64_t id, json_t *j)
{
    struct ferry_bus *bus = NULL;
    if (c->bus && c->bus[0] && strcmp(c->bus, "inproc") != 0 &&
        ferry_bus_open(c->bus, c->state, &bus, NULL) != FERRY_OK)
        return;
    json_t *att = ferry_control_attempts(st, bus, id, NULL);
    ferry_bus_close(bus);
    if (att == NULL) return;
    size_t i;
    json_t *a;
    if (!c->json && json_array_size(att) > 0) printf("attempts:\n");
    json_array_foreach(att, i, a) {
        if (c->json) break;
        char t[40] = "-";
        json_t *started = json_object_get(a, "started_us");
        if (json_is_integer(started)) ferry_format_time_us(json_integer_value(started), t, sizeof t);
        const char *e = json_string_value(json_object_get(a, "error"));
        printf("  #%-3d %-10s started %s%s%s%s\n", (int)json_integer_value(json_object_get(a, "attempt")),
               json_string_value(json_object_get(a, "state")), t,
               json_is_true(json_object_get(a, "retry_scheduled")) ? "  retried" : "",
               e ? "  " : "", e ? e : "");
    }
    json_object_set_new(j, "attempts", att);
}

static int cmd_show(struct cli *c, int64_t id)
{
    struct ferry_store *st;
    struct ferry_error err;
    if (ferry_store_open(c->state, &st, &err) != FERRY_OK) return fail(c, &err);
    struct ferry_run_info r;
    memset(&r, 0, sizeof r);
    struct ferry_resource_state *rs = NULL;
    int nrs = 0;
    int rc = ferry_store_run_get(st, id, &r, &err);
    if (rc == FERRY_OK) rc = ferry_store_resource_list(st, id, &rs, &nrs, &err);
    if (rc == FERRY_OK) {
        json_t *j = run_json(&r);
        json_t *ja = json_array();
        if (!c->json) {
            printf("run %" PRId64 "  pipeline %s  version %.12s\n", r.id, r.pipeline, r.version);
            printf("state      %s (attempt %d)\n", ferry_run_state_name(r.state), r.attempt);
            char t[40];
            ferry_format_time_us(r.created_us, t, sizeof t);
            printf("created    %s\n", t);
            if (r.started_us) ferry_format_time_us(r.started_us, t, sizeof t), printf("started    %s\n", t);
            if (r.ended_us) ferry_format_time_us(r.ended_us, t, sizeof t), printf("ended      %s\n", t);
            printf("moved      %" PRId64 " rows, %.1f MB, %" PRId64 " batches\n", r.rows,
                   (double)r.bytes / 1e6, r.batches);
            printf("integrity  %" PRId64 " batches verified, %" PRId64 " diverged\n", r.verified,
                   r.diverged);
            if (r.error[0]) printf("error      %s\n", r.error);
            printf("resources:\n");
        }
        for (int i = 0; i < nrs; i++) {
            struct ferry_checkpoint *cps = NULL;
            int ncp = 0;
            ferry_store_run_checkpoints(st, id, rs[i].resource, &cps, &ncp, NULL);
            json_t *jr = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:s}", "resource",
                                   rs[i].resource, "mode", rs[i].mode, "write", rs[i].write,
                                   "state", rs[i].state, "rows", (json_int_t)rs[i].rows, "bytes",
                                   (json_int_t)rs[i].bytes, "batches", (json_int_t)rs[i].batches,
                                   "verified", (json_int_t)rs[i].verified, "diverged",
                                   (json_int_t)rs[i].diverged, "error", rs[i].error);
            json_t *jc = json_array();
            /* progress against the plan's estimate while running; which side held it back
             * once completed */
            char extra[96] = "";
            if (!strcmp(rs[i].state, "running") && rs[i].rows_estimate > 0 &&
                rs[i].rows < rs[i].rows_estimate)
                snprintf(extra, sizeof extra, "  %d%% of ~%" PRId64 " rows",
                         (int)(rs[i].rows * 100 / rs[i].rows_estimate), rs[i].rows_estimate);
            else if (!strcmp(rs[i].bound, "sink") || !strcmp(rs[i].bound, "source"))
                snprintf(extra, sizeof extra, "  %s-bound", rs[i].bound);
            if (!c->json)
                printf("  %-24s %-11s %-8s %-10s %12" PRId64 " rows  %" PRId64 " verified  %" PRId64
                       " diverged%s%s%s\n", rs[i].resource, rs[i].mode, rs[i].write, rs[i].state,
                       rs[i].rows, rs[i].verified, rs[i].diverged, extra, rs[i].error[0] ? "  " : "",
                       rs[i].error);
            json_object_set_new(jr, "skipped", json_integer((json_int_t)rs[i].skipped));
            json_object_set_new(jr, "rows_estimate", rs[i].rows_estimate > 0
                                                         ? json_integer((json_int_t)rs[i].rows_estimate)
                                                         : json_null());
            json_object_set_new(jr, "bound", rs[i].bound[0] ? json_string(rs[i].bound) : json_null());
            if (rs[i].skipped > 0) show_skips(c, st, id, rs[i].resource, rs[i].skipped, jr);
            show_converted(c, st, id, rs[i].resource, jr);
            ferry_cli_verify_show(st, id, rs[i].resource, c->json, jr);
            if (!strcmp(rs[i].mode, "cdc")) ferry_cli_cdc_show(st, id, rs[i].resource, c->json, jr);
            for (int k = 0; k < ncp; k++) {
                if (!c->json) printf("    checkpoint shard %d: %s\n", cps[k].shard, cps[k].position);
                json_array_append_new(jc, json_pack("{s:i,s:s}", "shard", cps[k].shard,
                                                    "position", cps[k].position));
            }
            json_object_set_new(jr, "checkpoints", jc);
            json_array_append_new(ja, jr);
            ferry_checkpoints_free(cps, ncp);
        }
        json_object_set_new(j, "resources", ja);
        show_attempts(c, st, id, j);
        if (c->json)
            print_json(j);
        else
            json_decref(j);
    }
    ferry_free(rs);
    ferry_run_info_clear(&r);
    ferry_store_close(st);
    return rc == FERRY_OK ? 0 : fail(c, &err);
}

static int cmd_events(struct cli *c, int64_t id)
{
    struct ferry_store *st;
    struct ferry_error err;
    if (ferry_store_open(c->state, &st, &err) != FERRY_OK) return fail(c, &err);
    struct ferry_run_info r;
    memset(&r, 0, sizeof r);
    int rc = ferry_store_run_get(st, id, &r, &err);
    int64_t after = c->after;
    /* With an external bus the events live there, not in the state file. */
    struct ferry_bus *bus = NULL;
    if (rc == FERRY_OK && c->bus && c->bus[0] && strcmp(c->bus, "inproc") != 0)
        rc = ferry_bus_open(c->bus, c->state, &bus, &err);
    while (rc == FERRY_OK) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (bus)
            rc = ferry_bus_fetch(bus, after, id, 500, c->follow ? 1000 : 0, &evs, &n, &err);
        else
            rc = ferry_store_event_read(st, after, id, 500, &evs, &n, &err);
        if (rc != FERRY_OK) break;
        bool ended = false;
        for (int i = 0; i < n; i++) {
            const struct ferry_event *e = &evs[i];
            if (c->json) {
                json_t *p = json_loads(e->payload ? e->payload : "{}", 0, NULL);
                json_t *j = json_pack("{s:I,s:I,s:I,s:i,s:s,s:s,s:o}", "seq", (json_int_t)e->seq,
                                      "time_us", (json_int_t)e->time_us, "run_id",
                                      (json_int_t)e->run_id, "attempt", e->attempt, "resource",
                                      e->resource, "type", e->type, "payload",
                                      p ? p : json_object());
                print_json(j);
            } else {
                char t[40];
                ferry_format_time_us(e->time_us, t, sizeof t);
                printf("%8" PRId64 "  %s  #%d  %-34s %-16s %s\n", e->seq, t, e->attempt, e->type,
                       e->resource, e->payload ? e->payload : "");
            }
            after = e->seq;
            if (!strcmp(e->type, FERRY_EV_RUN_COMPLETED) || !strcmp(e->type, FERRY_EV_RUN_FAILED) ||
                !strcmp(e->type, FERRY_EV_RUN_CANCELED) || !strcmp(e->type, FERRY_EV_RUN_PAUSED))
                ended = true;
        }
        fflush(stdout);
        ferry_events_free(evs, n);
        if (n < 500 && (!c->follow || ended)) break; /* pages of 500 until the last one */
        if (n == 0 && bus == NULL) usleep(200000);
    }
    ferry_bus_close(bus);
    ferry_run_info_clear(&r);
    ferry_store_close(st);
    return rc == FERRY_OK ? 0 : fail(c, &err);
}

static int cmd_checkpoints(struct cli *c)
{
    struct ferry_store *st;
    struct ferry_error err;
    if (ferry_store_open(c->state, &st, &err) != FERRY_OK) return fail(c, &err);
    struct ferry_checkpoint *v = NULL;
    char **pipes = NULL;
    int n = 0;
    int rc = ferry_store_route_checkpoint_list(st, c->pipeline, &v, &pipes, &n, &err);
    if (rc == FERRY_OK) {
        json_t *a = json_array();
        if (!c->json) printf("%-20s  %-40s  %5s  %6s  %s\n", "PIPELINE", "ROUTE", "SHARD", "RUN", "POSITION");
        for (int i = 0; i < n; i++) {
            if (c->json)
                json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:I,s:s,s:I}", "pipeline",
                                                   pipes[i], "route", v[i].resource, "shard",
                                                   v[i].shard, "run_id", (json_int_t)v[i].run_id,
                                                   "position", v[i].position, "updated_us",
                                                   (json_int_t)v[i].updated_us));
            else
                printf("%-20.20s  %-40.40s  %5d  %6" PRId64 "  %s\n", pipes[i], v[i].resource,
                       v[i].shard, v[i].run_id, v[i].position);
        }
        if (c->json)
            print_json(a);
        else
            json_decref(a);
    }
    for (int i = 0; pipes && i < n; i++) ferry_free(pipes[i]);
    ferry_free(pipes);
    ferry_checkpoints_free(v, n);
    ferry_store_close(st);
    return rc == FERRY_OK ? 0 : fail(c, &err);
}

static int cmd_signal(struct cli *c, int64_t id, const char *sig)
{
    struct ferry_store *st;
    struct ferry_error err;
    if (ferry_store_open(c->state, &st, &err) != FERRY_OK) return fail(c, &err);
    struct ferry_run_info r;
    memset(&r, 0, sizeof r);
    int rc = ferry_store_run_get(st, id, &r, &err);
    if (rc == FERRY_OK && r.state != FERRY_RUN_RUNNING)
        rc = ferry_error_set(&err, FERRY_ECONFLICT, "cli", "run %" PRId64 " is %s, not running",
                             id, ferry_run_state_name(r.state));
    if (rc == FERRY_OK) rc = ferry_store_run_request(st, id, sig, &err);
    ferry_store_close(st);
    if (rc == FERRY_OK) {
        struct ferry_bus *bus;
        if (ferry_bus_open(c->bus, c->state, &bus, &err) == FERRY_OK) {
            ferry_bus_emit(bus, id, r.attempt, "",
                           !strcmp(sig, "pause") ? "run.pause_requested" : "run.cancel_requested",
                           "{}", NULL);
            ferry_bus_close(bus);
        }
        printf("%s requested for run %" PRId64 "\n", sig, id);
    }
    ferry_run_info_clear(&r);
    return rc == FERRY_OK ? 0 : fail(c, &err);
}

static int cmd_connectors(struct cli *c)
{
    json_t *a = json_array();
    if (!c->json) printf("sources:\n");
    for (const struct ferry_source_vtable *const *s = ferry_sources(); *s; s++) {
        if (!c->json)
            printf("  %-10s full%s%s\n", (*s)->name, (*s)->supports_incremental ? ", incremental" : "",
                   (*s)->supports_cdc ? ", cdc" : "");
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:b}", "kind", "source", "name",
                                           (*s)->name, "incremental",
                                           (*s)->supports_incremental, "cdc", (*s)->supports_cdc));
    }
    if (!c->json) printf("sinks:\n");
    for (const struct ferry_sink_vtable *const *s = ferry_sinks(); *s; s++) {
        if (!c->json) printf("  %s\n", (*s)->name);
        json_array_append_new(a, json_pack("{s:s,s:s}", "kind", "sink", "name", (*s)->name));
    }
    if (c->json)
        print_json(a);
    else
        json_decref(a);
    return 0;
}

int main(int argc, char **argv)
{
    struct cli c = {.state = ferry_store_default_url(), .limit = 50, .retries = -1};
    c.bus = getenv("FERRY_BUS");
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        if (argc >= 3 && !strcmp(argv[1], "help")) {
            command_help(argv[2]);
            return 0;
        }
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "verify")) return ferry_cli_verify(argc, argv);
    if (!strcmp(cmd, "serve")) return ferry_cli_serve(argc, argv);
    if (!strcmp(cmd, "__discover")) return ferry_server_discover_child(); /* serve's child */
    if (!strcmp(cmd, "worker")) return ferry_cli_worker(argc, argv);
    if (!strcmp(cmd, "cdc")) return ferry_cli_cdc(argc, argv);
    if (!strcmp(cmd, "copy")) return ferry_cli_copy(argc, argv);
    if (!strcmp(cmd, "iceberg")) return ferry_cli_iceberg(argc, argv);
    if (!strcmp(cmd, "secrets")) return ferry_cli_secrets(argc, argv);
    if (!strcmp(cmd, "pipelines")) return ferry_cli_pipelines(argc, argv);
    if (!strcmp(cmd, "schedules")) return ferry_cli_schedules(argc, argv);
    if (!strcmp(cmd, "runs") && argc > 2 && !strcmp(argv[2], "retry")) return ferry_cli_runs_retry(argc, argv);
    if (!strcmp(cmd, "runs") && argc > 2 && (!strcmp(argv[2], "start") || !strcmp(argv[2], "watch")))
        return ferry_cli_runs_remote(argc, argv);
    static const struct option opts[] = {
        {"state", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"store", required_argument, NULL, 's'},
        {"fresh", no_argument, NULL, 'f'},       {"follow", no_argument, NULL, 'F'},
        {"quiet", no_argument, NULL, 'q'},       {"pipeline", required_argument, NULL, 'p'},
        {"limit", required_argument, NULL, 'l'}, {"after", required_argument, NULL, 'a'},
        {"epoch", required_argument, NULL, 'E'}, {"epoch-rows", required_argument, NULL, 'R'},
        {"bus", required_argument, NULL, 'B'},   {"help", no_argument, NULL, 'h'},
        {"retries", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': c.state = optarg; break;
        case 'B': c.bus = optarg; break;
        case 'j': c.json = true; break;
        case 'f': c.fresh = true; break;
        case 'F': c.follow = true; break;
        case 'E':
            if (ferry_cli_parse_duration_ms(optarg, &c.epoch_ms) != 0) {
                fprintf(stderr, "ferry: --epoch takes a duration (10s, 500ms, 1m)\n");
                return 2;
            }
            break;
        case 'R':
            c.epoch_rows = atoll(optarg);
            if (c.epoch_rows <= 0) {
                fprintf(stderr, "ferry: --epoch-rows takes a positive number of changes\n");
                return 2;
            }
            break;
        case 'r': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 0 || v > 100) {
                fprintf(stderr, "ferry: --retries takes a number from 0 to 100\n");
                return 2;
            }
            c.retries = (int)v;
            break;
        }
        case 'q': c.quiet = true; break;
        case 'p': c.pipeline = optarg; break;
        case 'l': c.limit = (int)strtol(optarg, NULL, 10) > 0 ? (int)strtol(optarg, NULL, 10) : 50; break;
        case 'a': c.after = atoll(optarg); break;
        case 'h': command_help(cmd); return 0;
        default: fprintf(stderr, "ferry: see `ferry %s --help`\n", cmd); return 2;
        }
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    struct ferry_error err;
    ferry_error_clear(&err);
    int64_t id = 0;
    /* secret:NAME in a pipeline run here: the state's secrets store, key in FERRY_STORE_KEY. */
    if (ferry_secrets_hook_install(c.state, &err) != FERRY_OK) return fail(&c, &err);

    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("ferry %s\n", FERRY_VERSION_STRING);
        return 0;
    }
    if (!strcmp(cmd, "connectors")) return cmd_connectors(&c);
    if (!strcmp(cmd, "runs")) return cmd_runs(&c);
    if (!strcmp(cmd, "checkpoints")) return cmd_checkpoints(&c);
    if (!strcmp(cmd, "run") || !strcmp(cmd, "check")) {
        if (nargs != 1) {
            fprintf(stderr, "ferry: %s needs exactly one pipeline file (see `ferry %s --help`)\n", cmd, cmd);
            return 2;
        }
        return cmd_run(&c, args[0], 0, !strcmp(cmd, "check"));
    }
    if (!strcmp(cmd, "resume") || !strcmp(cmd, "show") || !strcmp(cmd, "events") ||
        !strcmp(cmd, "pause") || !strcmp(cmd, "cancel")) {
        if (nargs < 1 || parse_run_id(args[0], &id, &err) != FERRY_OK) {
            if (nargs >= 1) return fail(&c, &err);
            fprintf(stderr, "ferry: %s needs a run number (see `ferry %s --help`)\n", cmd, cmd);
            return 2;
        }
        if (!strcmp(cmd, "show")) return cmd_show(&c, id);
        if (!strcmp(cmd, "events")) return cmd_events(&c, id);
        if (!strcmp(cmd, "pause")) return cmd_signal(&c, id, "pause");
        if (!strcmp(cmd, "cancel")) return cmd_signal(&c, id, "cancel");
        return cmd_run(&c, nargs >= 2 ? args[1] : NULL, id, false);
    }
    fprintf(stderr, "ferry: unknown command \"%s\"\n\n%s", cmd, usage_main);
    return 2;
}
