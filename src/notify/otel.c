/* notify/otel.c - OTLP/HTTP JSON export of a run attempt's spans (notify/otel.h).
 *
 * Spans are built after the attempt from its events (the runner is not instrumented):
 * run.started .. the run's end event is the run span; resource.started .. resource.completed
 * or resource.failed a resource span; each batch.written a batch span from the resource's
 * previous event to it. Ids are random (/dev/urandom); one trace per attempt. Times are
 * the events' wall clock. The same pass collects the attempt's metrics (rows, bytes and
 * batches per resource, the run's duration, the newest cdc lag), exported to the OTLP
 * metrics endpoint beside the trace. Calls the bus, the store, the HTTP client (net/http.h),
 * jansson. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "net/http.h"
#include "notify/otel.h"
#include "store/store.h"

#define MAX_RES 256

struct res_span {
    char name[256];
    char id[17];
    int64_t start_us, end_us, last_us;
    int64_t rows, bytes, batches;
    bool failed;
    char error[300];
    bool lag_seen; /* a cdc.watermark_advanced: the newest lag below */
    int64_t lag_bytes, lag_us;
    double lag_seconds;
};

static void random_hex(char *out, int bytes)
{
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, (size_t)bytes, f) : 0;
    if (f) fclose(f);
    if (got != (size_t)bytes) /* never all zero: an invalid id */
        for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(rand() | 1);
    for (int i = 0; i < bytes; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static json_t *attr_str(const char *k, const char *v)
{
    return json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v);
}

static json_t *attr_int(const char *k, int64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRId64, v);
    return json_pack("{s:s,s:{s:s}}", "key", k, "value", "intValue", s);
}

static json_t *span(const char *trace, const char *id, const char *parent, const char *name,
                    int64_t start_us, int64_t end_us, bool error, const char *msg)
{
    char st[32], en[32];
    snprintf(st, sizeof st, "%" PRId64 "000", start_us);
    snprintf(en, sizeof en, "%" PRId64 "000", end_us > start_us ? end_us : start_us);
    json_t *s = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:[],s:{s:i}}", "traceId", trace, "spanId",
                          id, "parentSpanId", parent ? parent : "", "name", name, "kind", 1,
                          "startTimeUnixNano", st, "endTimeUnixNano", en, "attributes", "status",
                          "code", error ? 2 : 1);
    if (error && msg) json_object_set_new(json_object_get(s, "status"), "message", json_string(msg));
    return s;
}

static int64_t jint(json_t *p, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(p, k));
}

static struct res_span *find_res(struct res_span *v, int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(v[i].name, name)) return &v[i];
    if (*n >= MAX_RES) return NULL;
    struct res_span *r = &v[(*n)++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    random_hex(r->id, 8);
    return r;
}

/* The signal's endpoint: OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT, else
 * OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/<signal>; NULL when neither is set. */
static const char *endpoint(const char *signal, char *buf, size_t len)
{
    char var[64], up[16];
    size_t i = 0;
    for (; signal[i] && i < sizeof up - 1; i++)
        up[i] = (char)(signal[i] - 'a' + 'A');
    up[i] = '\0';
    snprintf(var, sizeof var, "OTEL_EXPORTER_OTLP_%s_ENDPOINT", up);
    const char *t = getenv(var);
    if (t && t[0]) return t;
    const char *b = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (b == NULL || b[0] == '\0') return NULL;
    size_t n = strlen(b);
    snprintf(buf, len, "%.*s/v1/%s", (int)(n && b[n - 1] == '/' ? n - 1 : n), b, signal);
    return buf;
}

/* One POST through the engine's HTTP client (net/http.h): 5 s to connect, 15 s in all, no
 * retry (the next attempt's export follows), an answer body of at most 1 MiB (discarded). */
static int post(const char *url, const char *body, struct ferry_error *err)
{
    struct ferry__http_opts o = {.what = "OTLP export", .origin = "otel",
                                 .connect_timeout_ms = 5000, .total_timeout_ms = 15000,
                                 .body_cap = (size_t)1 << 20};
    struct ferry__http *h = NULL;
    int rc = ferry__http_open(&o, &h, err);
    if (rc != FERRY_OK) return rc;
    static const char *const headers[] = {"Content-Type: application/json", NULL};
    struct ferry__http_req q = {.method = "POST", .url = url, .headers = headers,
                                .body = body, .len = strlen(body)};
    struct ferry_buf answer;
    ferry_buf_init(&answer, 0);
    long st = 0;
    rc = ferry__http_do(h, &q, &answer, &st, err);
    ferry_buf_release(&answer);
    ferry__http_close(h);
    if (rc == FERRY_OK && (st < 200 || st > 299))
        rc = ferry_error_set(err, FERRY_EIO, "otel", "OTLP export: HTTP %ld", st);
    return rc;
}

/* ---- metrics (OTLP/HTTP JSON, one export per attempt) ----
 * Per resource, delta sums of the attempt: ferry.rows, ferry.bytes, ferry.batches; the
 * newest replication lag a cdc resource reported: gauges ferry.cdc.lag (seconds) and
 * ferry.cdc.lag_bytes; per attempt, ferry.run.duration (seconds, a histogram of one). */

struct attempt_sum {
    const char *pipeline, *state;
    int64_t start_us, end_us;
};

static const double duration_bounds[] = {1, 5, 15, 60, 300, 900, 3600, 14400};
#define N_BOUNDS (sizeof duration_bounds / sizeof duration_bounds[0])

static void lag_seen(struct res_span *r, json_t *p, int64_t time_us)
{
    json_t *ls = json_object_get(p, "lag_seconds");
    if (!json_is_number(ls)) return;
    r->lag_seen = true;
    r->lag_seconds = json_number_value(ls);
    r->lag_bytes = jint(p, "lag_bytes");
    r->lag_us = time_us;
}

static json_t *nanos(int64_t us)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRId64 "000", us);
    return json_string(s);
}

static json_t *point_attrs(const char *pipeline, const char *rk, const char *rv)
{
    return json_pack("[o,o]", attr_str("ferry.pipeline", pipeline), attr_str(rk, rv));
}

/* A metric {name, unit, <kind>: {...points}}; sums are monotonic deltas. */
static json_t *metric(json_t *all, const char *name, const char *unit, const char *kind)
{
    json_t *m = json_pack("{s:s,s:s,s:{s:[]}}", "name", name, "unit", unit, kind, "dataPoints");
    json_t *k = json_object_get(m, kind);
    if (!strcmp(kind, "sum")) {
        json_object_set_new(k, "aggregationTemporality", json_integer(1));
        json_object_set_new(k, "isMonotonic", json_true());
    } else if (!strcmp(kind, "histogram")) {
        json_object_set_new(k, "aggregationTemporality", json_integer(1));
    }
    json_array_append_new(all, m);
    return json_object_get(k, "dataPoints");
}

static void int_point(json_t *points, json_t *attrs, int64_t start_us, int64_t end_us, int64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRId64, v);
    json_array_append_new(points, json_pack("{s:o,s:o,s:o,s:s}", "attributes", attrs,
                                            "startTimeUnixNano", nanos(start_us),
                                            "timeUnixNano", nanos(end_us), "asInt", s));
}

static json_t *duration_point(const struct attempt_sum *a)
{
    double secs = (double)(a->end_us > a->start_us ? a->end_us - a->start_us : 0) / 1e6;
    json_t *counts = json_array(), *bounds = json_array();
    size_t b = 0;
    while (b < N_BOUNDS && secs > duration_bounds[b])
        b++;
    for (size_t i = 0; i <= N_BOUNDS; i++) {
        json_array_append_new(counts, json_string(i == b ? "1" : "0"));
        if (i < N_BOUNDS) json_array_append_new(bounds, json_real(duration_bounds[i]));
    }
    return json_pack("{s:o,s:o,s:o,s:s,s:f,s:o,s:o}", "attributes",
                     point_attrs(a->pipeline, "ferry.state", a->state), "startTimeUnixNano",
                     nanos(a->start_us), "timeUnixNano", nanos(a->end_us), "count", "1", "sum",
                     secs, "bucketCounts", counts, "explicitBounds", bounds);
}

static int export_metrics(const char *url, const struct attempt_sum *a, const struct res_span *res,
                          int n_res, struct ferry_error *err)
{
    json_t *all = json_array();
    json_t *rows = metric(all, "ferry.rows", "{row}", "sum");
    json_t *bytes = metric(all, "ferry.bytes", "By", "sum");
    json_t *batches = metric(all, "ferry.batches", "{batch}", "sum");
    json_t *lag = NULL, *lag_bytes = NULL;
    for (int i = 0; i < n_res; i++) {
        const struct res_span *r = &res[i];
        int64_t end = r->end_us ? r->end_us : a->end_us;
        int_point(rows, point_attrs(a->pipeline, "ferry.resource", r->name), a->start_us, end,
                  r->rows);
        int_point(bytes, point_attrs(a->pipeline, "ferry.resource", r->name), a->start_us, end,
                  r->bytes);
        int_point(batches, point_attrs(a->pipeline, "ferry.resource", r->name), a->start_us, end,
                  r->batches);
        if (!r->lag_seen) continue;
        if (lag == NULL) lag = metric(all, "ferry.cdc.lag", "s", "gauge");
        if (lag_bytes == NULL) lag_bytes = metric(all, "ferry.cdc.lag_bytes", "By", "gauge");
        json_array_append_new(lag, json_pack("{s:o,s:o,s:f}", "attributes",
                                             point_attrs(a->pipeline, "ferry.resource", r->name),
                                             "timeUnixNano", nanos(r->lag_us), "asDouble",
                                             r->lag_seconds));
        int_point(lag_bytes, point_attrs(a->pipeline, "ferry.resource", r->name), r->lag_us,
                  r->lag_us, r->lag_bytes);
    }
    json_array_append_new(metric(all, "ferry.run.duration", "s", "histogram"), duration_point(a));
    const char *svc = getenv("OTEL_SERVICE_NAME");
    json_t *doc = json_pack("{s:[{s:{s:[o]},s:[{s:{s:s,s:s},s:o}]}]}", "resourceMetrics",
                            "resource", "attributes",
                            attr_str("service.name", svc && svc[0] ? svc : "ferry"),
                            "scopeMetrics", "scope", "name", "ferry", "version", "0.1.0",
                            "metrics", all);
    char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    int rc = body ? post(url, body, err) : ferry_error_set(err, FERRY_ENOMEM, "otel", "out of memory");
    free(body);
    return rc;
}

int ferry_otel_export_attempt(const char *state_path, const char *bus_url, int64_t run_id,
                              int attempt, struct ferry_error *err)
{
    char buf[1024], mbuf[1024];
    const char *url = endpoint("traces", buf, sizeof buf);
    const char *murl = endpoint("metrics", mbuf, sizeof mbuf);
    if ((url == NULL && murl == NULL) || run_id <= 0 || attempt <= 0) return FERRY_OK;
    struct ferry_store *st = NULL;
    struct ferry_bus *bus = NULL;
    int rc = ferry_store_open(state_path, &st, err);
    if (rc == FERRY_OK) rc = ferry_bus_open(bus_url, state_path, &bus, err);
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    if (rc == FERRY_OK) rc = ferry_store_run_get(st, run_id, &run, err);
    char trace[33], run_span[17], parent[17] = "";
    random_hex(trace, 16);
    random_hex(run_span, 8);
    struct res_span *res = ferry_calloc(MAX_RES, sizeof *res);
    int n_res = 0;
    json_t *spans = json_array();
    int64_t run_start = 0, run_end = 0, rows = 0, bytes = 0;
    bool run_failed = false;
    char run_error[300] = "", run_state[24] = "running";
    if (res == NULL && rc == FERRY_OK) rc = ferry_error_set(err, FERRY_ENOMEM, "otel", "out of memory");
    int64_t after = 0;
    while (rc == FERRY_OK) {
        struct ferry_event *evs = NULL;
        int n = 0;
        rc = ferry_bus_fetch(bus, after, run_id, 1000, 0, &evs, &n, err);
        for (int i = 0; rc == FERRY_OK && i < n; i++) {
            const struct ferry_event *e = &evs[i];
            after = e->seq;
            json_t *p = json_loads(e->payload ? e->payload : "{}", 0, NULL);
            const char *t = e->type;
            if (!strcmp(t, FERRY_EV_RUN_TRACE_CONTEXT)) {
                /* the API request that created the run is the run span's parent */
                const char *tp = json_string_value(json_object_get(p, "traceparent"));
                if (tp && strlen(tp) == 55) {
                    snprintf(trace, sizeof trace, "%.32s", tp + 3);
                    snprintf(parent, sizeof parent, "%.16s", tp + 36);
                }
            } else if (e->attempt != attempt) {
                /* another attempt's */
            } else if (!strcmp(t, FERRY_EV_RUN_STARTED)) {
                run_start = e->time_us;
            } else if (!strcmp(t, FERRY_EV_RUN_COMPLETED) || !strcmp(t, FERRY_EV_RUN_FAILED) ||
                       !strcmp(t, FERRY_EV_RUN_PAUSED) || !strcmp(t, FERRY_EV_RUN_CANCELED)) {
                run_end = e->time_us;
                run_failed = strcmp(t, FERRY_EV_RUN_FAILED) == 0;
                snprintf(run_state, sizeof run_state, "%s", t + 4); /* run.X */
                const char *m = json_string_value(json_object_get(p, "message"));
                if (m) snprintf(run_error, sizeof run_error, "%s", m);
            } else if (e->resource[0] && (!strcmp(t, FERRY_EV_RESOURCE_STARTED) ||
                                          !strcmp(t, FERRY_EV_RESOURCE_COMPLETED) ||
                                          !strcmp(t, FERRY_EV_RESOURCE_FAILED) ||
                                          !strcmp(t, FERRY_EV_WATERMARK_ADVANCED) ||
                                          !strcmp(t, FERRY_EV_BATCH_WRITTEN))) {
                struct res_span *r = find_res(res, &n_res, e->resource);
                if (r && !strcmp(t, FERRY_EV_RESOURCE_STARTED)) {
                    r->start_us = r->last_us = e->time_us;
                } else if (r && !strcmp(t, FERRY_EV_BATCH_WRITTEN)) {
                    char id[17], name[300];
                    random_hex(id, 8);
                    snprintf(name, sizeof name, "batch %" PRId64, jint(p, "seq"));
                    json_t *s = span(trace, id, r->id, name, r->last_us ? r->last_us : e->time_us,
                                     e->time_us, false, NULL);
                    json_t *a = json_object_get(s, "attributes");
                    json_array_append_new(a, attr_str("ferry.resource", e->resource));
                    json_array_append_new(a, attr_int("ferry.batch.seq", jint(p, "seq")));
                    json_array_append_new(a, attr_int("ferry.batch.rows", jint(p, "rows")));
                    json_array_append_new(a, attr_int("ferry.batch.bytes", jint(p, "bytes")));
                    json_array_append_new(a, attr_int("ferry.batch.crc32c", jint(p, "crc")));
                    json_array_append_new(a, attr_int("ferry.batch.shard", jint(p, "shard")));
                    json_array_append_new(spans, s);
                    r->rows += jint(p, "rows");
                    r->bytes += jint(p, "bytes");
                    r->batches++;
                    r->last_us = e->time_us;
                    if (!r->start_us) r->start_us = e->time_us;
                } else if (r && !strcmp(t, FERRY_EV_WATERMARK_ADVANCED)) {
                    lag_seen(r, p, e->time_us);
                } else if (r) {
                    r->end_us = e->time_us;
                    r->failed = !strcmp(t, FERRY_EV_RESOURCE_FAILED);
                    const char *m = json_string_value(json_object_get(p, "message"));
                    if (m) snprintf(r->error, sizeof r->error, "%s", m);
                }
            }
            json_decref(p);
        }
        ferry_events_free(evs, n);
        if (n < 1000) break;
    }
    if (rc == FERRY_OK && run_start > 0) {
        if (run_end == 0) run_end = ferry_now_wall_us();
        for (int i = 0; i < n_res; i++) {
            struct res_span *r = &res[i];
            char name[300];
            snprintf(name, sizeof name, "resource %s", r->name);
            json_t *s = span(trace, r->id, run_span, name, r->start_us ? r->start_us : run_start,
                             r->end_us ? r->end_us : r->last_us, r->failed, r->error);
            json_t *a = json_object_get(s, "attributes");
            json_array_append_new(a, attr_str("ferry.resource", r->name));
            json_array_append_new(a, attr_int("ferry.rows", r->rows));
            json_array_append_new(a, attr_int("ferry.bytes", r->bytes));
            json_array_append_new(a, attr_int("ferry.batches", r->batches));
            json_array_append_new(spans, s);
            rows += r->rows;
            bytes += r->bytes;
        }
        char name[300];
        snprintf(name, sizeof name, "run %s", run.pipeline);
        json_t *s = span(trace, run_span, parent, name, run_start, run_end, run_failed, run_error);
        json_t *a = json_object_get(s, "attributes");
        json_array_append_new(a, attr_str("ferry.pipeline", run.pipeline));
        json_array_append_new(a, attr_int("ferry.run_id", run_id));
        json_array_append_new(a, attr_int("ferry.attempt", attempt));
        json_array_append_new(a, attr_int("ferry.rows", rows));
        json_array_append_new(a, attr_int("ferry.bytes", bytes));
        json_array_append_new(spans, s);
        /* the trace id may have come from a trace_context event read after some spans */
        size_t k;
        json_t *sp;
        json_array_foreach(spans, k, sp) json_object_set_new(sp, "traceId", json_string(trace));
        const char *svc = getenv("OTEL_SERVICE_NAME");
        json_t *doc = json_pack(
            "{s:[{s:{s:[o]},s:[{s:{s:s,s:s},s:o}]}]}", "resourceSpans", "resource", "attributes",
            attr_str("service.name", svc && svc[0] ? svc : "ferry"), "scopeSpans", "scope", "name",
            "ferry", "version", "0.1.0", "spans", spans);
        spans = NULL;
        char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        json_decref(doc);
        rc = body == NULL ? ferry_error_set(err, FERRY_ENOMEM, "otel", "out of memory")
             : url        ? post(url, body, err)
                          : FERRY_OK;
        free(body);
        struct attempt_sum sum = {run.pipeline, run_state, run_start, run_end};
        if (rc == FERRY_OK && murl) rc = export_metrics(murl, &sum, res, n_res, err);
    }
    json_decref(spans);
    ferry_free(res);
    ferry_run_info_clear(&run);
    ferry_bus_close(bus);
    ferry_store_close(st);
    return rc;
}
