/* cli/cmd_cdc.c - `ferry cdc drop FILE`, and the epoch wait of `ferry run --follow`.
 *
 * cdc drop: for every `mode: cdc` resource of the pipeline, the source drops what it made
 * (the replication slot, and the publication when ferry named it), then the route's saved
 * position is replaced by a reset marker, so that the next run takes a new snapshot instead
 * of refusing with "resnapshot required". Calls config/pipeline, the source vtable's
 * cdc_drop and the state store. Called by main.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/commands.h"
#include "ferry/tables.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "ferry/event.h"
#include "store/store.h"

volatile sig_atomic_t ferry_cli_signaled;

static const char usage[] =
    "usage: ferry cdc drop FILE [--state PATH]\n\n"
    "Drops the replication slot of every `mode: cdc` resource of FILE (and the publication,\n"
    "unless the resource names its own with `publication:`), and forgets the saved log\n"
    "position, so that the next run copies a new snapshot. The PostgreSQL role needs the\n"
    "REPLICATION attribute (and ownership of a publication ferry created).\n";

int ferry_cli_parse_duration_ms(const char *s, int64_t *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double mult = 1000;
    if (!strcmp(end, "ms"))
        mult = 1;
    else if (!strcmp(end, "s") || *end == '\0')
        mult = 1000;
    else if (!strcmp(end, "m"))
        mult = 60000;
    else if (!strcmp(end, "h"))
        mult = 3600000;
    else
        return -1;
    *out = (int64_t)(v * mult);
    return 0;
}

bool ferry_cli_cdc_next_epoch(bool at_once, int64_t started_mono_us, int64_t epoch_ms)
{
    if (ferry_cli_signaled) return false;
    if (at_once) return true;
    if (epoch_ms <= 0) epoch_ms = 10000;
    int64_t until = started_mono_us + epoch_ms * 1000;
    /* to the microsecond (the next run starts at its epoch, not up to a poll later), in steps
     * of at most 200 ms so that a signal is heard soon */
    for (int64_t left; !ferry_cli_signaled && (left = until - ferry_now_mono_us()) > 0;) {
        if (left > 200000) left = 200000;
        struct timespec ts = {(time_t)(left / 1000000), (long)(left % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return !ferry_cli_signaled;
}

int ferry_cli_cdc(int argc, char **argv)
{
    static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *state = ferry_store_default_url();
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            state = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "drop") != 0) {
        fputs(usage, stderr);
        return 2;
    }
    const char *file = argv[optind + 1];
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_store *st = NULL;
    void *ctx = NULL;
    int rc = ferry_pipeline_load(file, &p, &err);
    if (rc == FERRY_OK && p->source_vt->cdc_drop == NULL)
        rc = ferry_error_set(&err, FERRY_EUNSUPPORTED, "cli", "the %s source has no cdc",
                             p->source_type);
    if (rc == FERRY_OK) rc = ferry_store_open(state, &st, &err);
    if (rc == FERRY_OK) rc = p->source_vt->open(p->source, &ctx, &err);
    if (rc == FERRY_OK) rc = ferry_tables_expand_source(p, ctx, &err);
    int dropped = 0;
    for (int i = 0; rc == FERRY_OK && i < p->n_resources; i++) {
        struct ferry_resource_spec *r = &p->resources[i];
        if (r->mode != FERRY_READ_CDC) continue;
        char *route = ferry_pipeline_route(p, r);
        if (route == NULL) {
            rc = ferry_error_set(&err, FERRY_ENOMEM, "cli", "out of memory");
            break;
        }
        struct ferry_read_context run = {.pipeline = p->name, .route = route};
        r->run = &run;
        rc = p->source_vt->cdc_drop(ctx, r, &err);
        /* The saved position meant "continue the slot"; without the slot the next run starts
         * over (a position without "n" reads as no position). */
        if (rc == FERRY_OK)
            rc = ferry_store_route_checkpoint_save(st, p->name, p->version, route, 0,
                                                   "{\"shard\":0,\"reset\":true}", 0, &err);
        if (rc == FERRY_OK) {
            printf("%s: replication slot and publication dropped; the next run takes a new "
                   "snapshot\n",
                   r->table);
            dropped++;
        } else {
            ferry_error_prefix(&err, "resource %s", r->table);
        }
        r->run = NULL;
        ferry_free(route);
    }
    /* An unfinished run of the pipeline froze a plan around the dropped slot: it must not
     * be resumed (the next run is a new one, with a new snapshot). */
    struct ferry_run_info *newest = NULL;
    int nr = 0;
    if (rc == FERRY_OK && dropped > 0 &&
        ferry_store_run_list(st, p->name, 1, &newest, &nr, &err) == FERRY_OK && nr == 1 &&
        !strcmp(newest[0].version, p->version) && newest[0].state != FERRY_RUN_COMPLETED &&
        newest[0].state != FERRY_RUN_CANCELED) {
        rc = ferry_store_run_set_state(st, newest[0].id, newest[0].attempt, FERRY_RUN_CANCELED,
                                       "canceled by `ferry cdc drop`", &err);
        if (rc == FERRY_OK) printf("run %" PRId64 " (unfinished) canceled\n", newest[0].id);
    }
    ferry_run_infos_free(newest, nr);
    if (ctx) p->source_vt->close(ctx);
    ferry_store_close(st);
    if (rc == FERRY_OK && dropped == 0) printf("no `mode: cdc` resource in %s\n", file);
    ferry_pipeline_free(p);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: error: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    return 0;
}

void ferry_cli_cdc_show(struct ferry_store *st, int64_t run_id, const char *resource, bool json,
                        json_t *jr)
{
    int64_t after = 0;
    json_t *last = NULL;
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (ferry_store_event_read(st, after, run_id, 1000, &evs, &n, NULL) != FERRY_OK) break;
        for (int i = 0; i < n; i++) {
            after = evs[i].seq;
            if (strcmp(evs[i].type, FERRY_EV_WATERMARK_ADVANCED) != 0 ||
                strcmp(evs[i].resource, resource) != 0)
                continue;
            json_t *p = json_loads(evs[i].payload ? evs[i].payload : "{}", 0, NULL);
            if (json_is_object(p)) {
                json_decref(last);
                last = p;
            } else {
                json_decref(p);
            }
        }
        ferry_events_free(evs, n);
        if (n < 1000) break;
    }
    if (last == NULL) return;
    json_t *pos = json_object_get(json_object_get(last, "position"), "n");
    json_int_t lsn = json_is_integer(pos) ? json_integer_value(pos) : 0;
    json_int_t lag_bytes = json_integer_value(json_object_get(last, "lag_bytes"));
    double lag_s = json_number_value(json_object_get(last, "lag_seconds"));
    const char *ws = json_string_value(json_object_get(last, "wal_status"));
    if (json) {
        json_t *c = json_pack("{s:I,s:I,s:f}", "lsn", lsn, "lag_bytes", lag_bytes, "lag_seconds",
                              lag_s);
        if (c != NULL && ws != NULL) json_object_set_new(c, "wal_status", json_string(ws));
        json_object_set_new(jr, "cdc", c);
    } else {
        printf("    cdc position %X/%X, lag %" PRId64 " bytes, %.1f s (last report)%s%s\n",
               (unsigned)((uint64_t)lsn >> 32), (unsigned)(uint64_t)lsn, (int64_t)lag_bytes, lag_s,
               ws ? "; slot wal_status " : "", ws ? ws : "");
    }
    json_decref(last);
}
