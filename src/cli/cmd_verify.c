/* cli/cmd_verify.c - `ferry verify FILE`: compare each resource's destination with its
 * source and print what differs (docs/cli.md). Exit 0 when equal, 8 when differences were
 * found, the usual statuses on errors. Calls verify/ and the pipeline loader. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "ferry/tables.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "ferry/event.h"
#include "ferry/failpoint.h"
#include "store/store.h"
#include "verify/verify.h"

#define EXIT_DIFFERENCES 8

static const char *usage =
    "usage: ferry verify FILE [--resource R] [--repair] [--until-checkpoint] [--json]\n"
    "                         [--chunk-rows N] [--state PATH]\n\n"
    "Compares each resource's destination with its source, chunk by chunk: both sides\n"
    "compute a row count and a sum of row hashes per key range inside the database, ranges\n"
    "that differ are split until they are small and then compared key by key. Prints the\n"
    "missing (in the source, not in the destination), extra and different keys. Rows that\n"
    "changed while the check ran are reported apart (\"changed during check\").\n"
    "--until-checkpoint: incremental resources are compared only up to the position their\n"
    "last committed run saved (the state file: --state, $FERRY_STATE, .ferry/state.db).\n"
    "exit status: 0 equal, 8 differences found, otherwise as for `ferry run`.\n";

static void human_bytes(int64_t n, char *buf, size_t len)
{
    if (n < 1024)
        snprintf(buf, len, "%" PRId64 " B", n);
    else if (n < 1024 * 1024)
        snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else
        snprintf(buf, len, "%.1f MiB", (double)n / (1024.0 * 1024));
}

static void print_human(const struct ferry_verify_report *r)
{
    static const char *const names[FERRY_VDIFF_KINDS] = {"missing", "extra", "different",
                                                         "changed during check"};
    for (int i = 0; i < r->n_res; i++) {
        const struct ferry_verify_resource *x = &r->res[i];
        bool diff = x->count[0] + x->count[1] + x->count[2] + x->count[3] > 0;
        printf("%s: %s\n", x->resource, diff ? "DIFFERENT" : "equal");
        printf("  source      %s: %" PRId64 " rows\n", x->source_table ? x->source_table : "?",
               x->source_rows);
        printf("  destination %s: %" PRId64 " rows\n", x->dest_table ? x->dest_table : "?",
               x->dest_rows);
        for (int k = 0; k < FERRY_VDIFF_KINDS; k++) {
            if (x->count[k] == 0) continue;
            printf("  %s: %" PRId64, names[k], x->count[k]);
            for (int j = 0; j < x->n_listed[k]; j++)
                printf("%s%s", j ? ", " : " (", x->listed[k][j]);
            if (x->n_listed[k] > 0) printf("%s)", x->count[k] > x->n_listed[k] ? ", ..." : "");
            printf("\n");
        }
        for (int j = 0; j < x->n_not_compared; j++)
            printf("  not compared: %s\n", x->not_compared[j]);
        if (x->repaired > 0 || x->repair_clean)
            printf("  repaired: %" PRId64 " rows%s\n", x->repaired,
                   x->repair_clean ? ", re-verified equal" : "");
        char sb[32], db[32];
        human_bytes(x->source_bytes, sb, sizeof sb);
        human_bytes(x->dest_bytes, db, sizeof db);
        printf("  chunks: %" PRId64 " compared, %" PRId64 " differed; read %s from the source, "
               "%s from the destination; %.2f s\n",
               x->chunks, x->chunks_mismatched, sb, db, x->seconds);
    }
}

int ferry_cli_verify(int argc, char **argv)
{
    static const struct option opts[] = {
        {"resource", required_argument, NULL, 'r'}, {"repair", no_argument, NULL, 'R'},
        {"json", no_argument, NULL, 'j'},           {"chunk-rows", required_argument, NULL, 'c'},
        {"state", required_argument, NULL, 's'},    {"until-checkpoint", no_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    struct ferry_verify_opts o = {0};
    bool json = false;
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'r':
            o.resource = optarg;
            break;
        case 'R':
            o.repair = true;
            break;
        case 'j':
            json = true;
            break;
        case 'c':
            o.chunk_rows = atoll(optarg);
            break;
        case 's':
            o.state_path = optarg;
            break;
        case 'u':
            o.until_checkpoint = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fputs(usage, stderr);
        return 2;
    }
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_verify_report *rep = NULL;
    int rc = ferry_failpoints_init(&err);
    if (rc == FERRY_OK) rc = ferry_pipeline_load(argv[optind], &p, &err);
    if (rc == FERRY_OK && ferry_tables_pending(p)) { /* tables: patterns, as a run plans them */
        void *src = NULL;
        rc = p->source_vt->open(p->source, &src, &err);
        if (rc == FERRY_OK) rc = ferry_tables_expand_source(p, src, &err);
        if (src) p->source_vt->close(src);
    }
    if (rc == FERRY_OK) rc = ferry_verify_run(p, &o, NULL, NULL, &rep, &err);
    ferry_pipeline_free(p);
    if (rc != FERRY_OK) {
        if (json) {
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            ferry_buf_printf(&b, "{\"error\":{\"code\":\"%s\",\"message\":", ferry_code_name(rc));
            ferry_buf_json_string(&b, err.message, strlen(err.message));
            ferry_buf_printf(&b, "}}");
            if (b.data) printf("%s\n", b.data);
            ferry_buf_release(&b);
        }
        fprintf(stderr, "ferry: error: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    if (json) {
        char *j = ferry_verify_report_json(rep);
        if (j) printf("%s\n", j);
        ferry_free(j);
    } else {
        print_human(rep);
    }
    bool differs = ferry_verify_differs(rep);
    ferry_verify_report_free(rep);
    return differs ? EXIT_DIFFERENCES : 0;
}

void ferry_cli_verify_show(struct ferry_store *st, long long run, const char *resource, int json,
                           struct json_t *jr)
{
    json_t *last = NULL;
    int64_t after = 0;
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (ferry_store_event_read(st, after, run, 500, &evs, &n, NULL) != FERRY_OK) break;
        for (int i = 0; i < n; i++) {
            after = evs[i].seq;
            if (strcmp(evs[i].type, FERRY_EV_VERIFY_COMPLETED) != 0) continue;
            if (evs[i].resource[0] && strcmp(evs[i].resource, resource) != 0) continue;
            json_decref(last);
            last = json_loads(evs[i].payload ? evs[i].payload : "{}", 0, NULL);
        }
        ferry_events_free(evs, n);
        if (n < 500) break;
    }
    if (last == NULL) return;
    if (!json) {
        const char *e = json_string_value(json_object_get(last, "error"));
        if (e)
            printf("    verify after run: failed: %s\n", e);
        else if (json_is_true(json_object_get(last, "equal")))
            printf("    verify after run: equal (%" JSON_INTEGER_FORMAT " rows)\n",
                   json_integer_value(json_object_get(last, "source_rows")));
        else
            printf("    verify after run: DIFFERENT: %" JSON_INTEGER_FORMAT
                   " missing, %" JSON_INTEGER_FORMAT " extra, %" JSON_INTEGER_FORMAT " different\n",
                   json_integer_value(json_object_get(last, "missing")),
                   json_integer_value(json_object_get(last, "extra")),
                   json_integer_value(json_object_get(last, "different")));
    }
    json_object_set_new(jr, "verify", last);
}
