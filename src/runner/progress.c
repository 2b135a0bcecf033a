/* runner/progress.c - what a person and the event stream see of a running flow: the live
 * progress line (one resource's, or the run's over several: tables done of total, rows, rate,
 * ETA), which side held a resource back, a cdc stream's lag, resource usage.
 * Calls: run.c (emitter). Called by control.c and schedule.c. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include "ferry/core.h"
#include "pipeline/flow.h"
#include "runner/run.h"

int64_t ferry__run_peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss * 1024;
}

int64_t ferry__run_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static void human_rate(double v, char *buf, size_t len)
{
    if (v >= 1e6)
        snprintf(buf, len, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
}

/* Which side held a resource back over elapsed_us: the readers waited on a full queue for
 * at least half of it and longer than the writer waited (the destination, "sink"), the writer
 * on an empty queue (the source or the transforms, "source"), or neither ("balanced"). */
const char *ferry__run_bound(int64_t wait_source_us, int64_t wait_sink_us, int64_t elapsed_us)
{
    if (elapsed_us > 0 && wait_sink_us * 2 >= elapsed_us && wait_sink_us > wait_source_us)
        return "sink";
    if (elapsed_us > 0 && wait_source_us * 2 >= elapsed_us && wait_source_us > wait_sink_us)
        return "source";
    return "balanced";
}

/* How the progress and summary lines say it: "sink-bound", "source-bound", or nothing. */
const char *ferry__run_bound_label(const char *bound)
{
    return !strcmp(bound, "sink") ? "sink-bound" : !strcmp(bound, "source") ? "source-bound" : "";
}

/* "1h02m", "3m05s", "42s" */
static void human_secs(double s, char *buf, size_t len)
{
    long long n = s < 0 ? 0 : (long long)(s + 0.5);
    if (n >= 3600)
        snprintf(buf, len, "%lldh%02lldm", n / 3600, n % 3600 / 60);
    else if (n >= 60)
        snprintf(buf, len, "%lldm%02llds", n / 60, n % 60);
    else
        snprintf(buf, len, "%llds", n);
}

void ferry__run_print_progress(struct run *r, struct ferry_flow *f, int64_t start_us, bool final)
{
    if (r->o->quiet || !r->o->progress_tty || f == NULL) return;
    int64_t elapsed = ferry_now_mono_us() - start_us;
    double secs = (double)elapsed / 1e6;
    if (secs <= 0) secs = 1e-6;
    long long rows = atomic_load(&f->rows_written);
    long long bytes = atomic_load(&f->bytes_written);
    char rps[32], eta[48] = "";
    human_rate((double)rows / secs, rps, sizeof rps);
    /* percent and time left from the plan's estimate (a row count the planner guessed:
     * shown while the copy is below it) */
    if (f->rows_expected > 0 && rows < f->rows_expected && rows > 0 && !final) {
        char left[24];
        human_secs((double)(f->rows_expected - rows) * secs / (double)rows, left, sizeof left);
        snprintf(eta, sizeof eta, "  %3d%%  ETA %-6s", (int)(rows * 100 / f->rows_expected), left);
    }
    const char *label = ferry__run_bound_label(
        ferry__run_bound(atomic_load(&f->wait_source_us), atomic_load(&f->wait_sink_us), elapsed));
    fprintf(
        stderr, "\r\033[K  %-24s %12lld rows%s  %8s rows/s  %7.1f MB/s  queue %d/%" PRId64 "%s%s%s",
        f->spec->table, rows, eta, rps, (double)bytes / secs / 1e6, atomic_load(&f->queue_depth),
        r->opts.queue, label[0] ? "  " : "", label, final ? "\n" : "");
    fflush(stderr);
}

/* A cdc stream's position and lag (cursor.watermark_advanced), when it moved. */
void ferry__run_emit_cdc_lag(struct run *r, struct ferry_flow *f, int64_t *last_position)
{
    const struct ferry_source_vtable *vt = r->p->source_vt;
    if (f->spec->mode != FERRY_READ_CDC || vt->cdc_progress == NULL) return;
    int64_t pos = 0, lag_bytes = 0, lag_us = 0;
    /* The instance that streams: the flow's own (streams side by side), else the run's. The
     * lock keeps a side-by-side stream's instance open while it is read (schedule.c clears
     * f->src_ctx under it before closing the instance). */
    pthread_mutex_lock(&r->lock);
    void *src = f->src_ctx ? f->src_ctx : r->src_ctx;
    int prc = vt->cdc_progress(src, &pos, &lag_bytes, &lag_us);
    pthread_mutex_unlock(&r->lock);
    if (prc != FERRY_OK) return;
    if (pos == *last_position) return;
    *last_position = pos;
    char payload[256];
    /* The source's plan may warn that the slot is about to lose WAL (cdc wal_status). */
    json_t *plan = json_loads(f->plan_json ? f->plan_json : "", 0, NULL);
    const char *ws = json_string_value(json_object_get(plan, "wal_status"));
    char extra[64] = "";
    if (ws != NULL && strlen(ws) < 32) snprintf(extra, sizeof extra, ",\"wal_status\":\"%s\"", ws);
    json_decref(plan);
    snprintf(payload, sizeof payload,
             "{\"shard\":0,\"position\":{\"shard\":0,\"n\":%" PRId64 "},\"lag_bytes\":%" PRId64
             ",\"lag_seconds\":%.3f%s}",
             pos, lag_bytes, (double)lag_us / 1e6, extra);
    ferry__run_emit(r, f->spec->table, FERRY_EV_WATERMARK_ADVANCED, payload, NULL, NULL);
}

/* Rows written so far (finished resources and the flows running now) and the rows the
 * plans expect in all (-1: some resource has no estimate, or was resumed). */
static void run_rows(struct run *r, int64_t *rows, int64_t *expected, int *active)
{
    pthread_mutex_lock(&r->lock);
    int64_t n = r->rows;
    pthread_mutex_unlock(&r->lock);
    int64_t want = 0;
    *active = 0;
    for (int i = 0; i < r->n_res; i++) {
        struct ferry_flow *f = atomic_load(&r->res[i].active);
        if (f) {
            n += atomic_load(&f->rows_written);
            (*active)++;
        }
        const struct resource_run *rr = &r->res[i];
        if (want >= 0)
            want = rr->rows_estimate >= 0 && !rr->resumed_any ? want + rr->rows_estimate : -1;
    }
    *rows = n;
    *expected = want;
}

void ferry__run_print_run_progress(struct run *r, bool final)
{
    if (r->o->quiet || !r->o->progress_tty) return;
    double secs = (double)(ferry_now_mono_us() - r->t0) / 1e6;
    if (secs <= 0) secs = 1e-6;
    int64_t rows = 0, expected = -1;
    int active = 0;
    run_rows(r, &rows, &expected, &active);
    char rps[32], eta[48] = "";
    human_rate((double)rows / secs, rps, sizeof rps);
    if (expected > 0 && rows > 0 && rows < expected && !final) {
        char left[24];
        human_secs((double)(expected - rows) * secs / (double)rows, left, sizeof left);
        snprintf(eta, sizeof eta, "  %3d%%  ETA %-6s", (int)(rows * 100 / expected), left);
    }
    fprintf(stderr, "\r\033[K  tables %d/%d  %12lld rows%s  %8s rows/s  %d at once%s",
            atomic_load(&r->res_done), r->n_res, (long long)rows, eta, rps, active,
            final ? "\n" : "");
    fflush(stderr);
}
