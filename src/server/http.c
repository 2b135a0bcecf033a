/* server/http.c - the HTTP transport of `ferry serve` (server/server.h): the libmicrohttpd
 * daemon, the route table, bearer-token checks, the request-body limit, JSON and error
 * replies, the store-handle pool and the Server-Sent Events streams.
 *
 * Every request goes: headers complete within HEADER_DEADLINE_S (a watchdog cuts a client
 * that trickles them) -> first call (headers only) -> route lookup (404/405) -> token check
 * (401) -> declared length check (413) -> body accumulated up to the limit (413 when a
 * chunked body outgrows it) -> handler (api.c). Tokens are compared in constant time and
 * never logged. Event streams (GET /v1/runs/{id}/events) are produced by a content-reader
 * callback on the connection's own thread: it reads the run's events after the client's
 * sequence, and when there are none, waits on the hub (one thread that watches the event
 * log's newest sequence) instead of polling the database per client. A stream ends after
 * the run's final event, at shutdown, or when the client goes away. Calls the store, the
 * bus and api.c. Called by cli/cmd_serve.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "bus/bus.h"
#include "core/mono.h"
#include "ferry/core.h"
#include "server/internal.h"
#include "store/store.h"

/* ---- the route table (docs/api/openapi.json lists the same routes; a test checks) ---- */

struct route {
    const char *method;
    const char *path; /* {x} matches one segment */
    ferry__handler fn;
    bool public_route;
    int role; /* the least role allowed: VIEWER, OPERATOR or ADMIN (0 on public routes) */
};

#define VIEWER FERRY_ROLE_VIEWER
#define OPERATOR FERRY_ROLE_OPERATOR
#define ADMIN FERRY_ROLE_ADMIN

static const struct route routes[] = {
    {"GET", "/livez", ferry__api_livez, true, 0},
    {"GET", "/readyz", ferry__api_readyz, true, 0},
    {"GET", "/metrics", ferry__api_metrics, false, VIEWER},
    {"GET", "/v1/connectors", ferry__api_connectors, false, VIEWER},
    {"POST", "/v1/connectors/validate", ferry__api_validate, false, VIEWER},
    {"POST", "/v1/connectors/discover", ferry__api_discover, false, ADMIN},
    {"GET", "/v1/secrets", ferry__api_secrets, false, VIEWER},
    {"PUT", "/v1/secrets/{name}", ferry__api_secret_put, false, ADMIN},
    {"DELETE", "/v1/secrets/{name}", ferry__api_secret_delete, false, ADMIN},
    {"GET", "/v1/pipelines", ferry__api_pipelines_list, false, VIEWER},
    {"POST", "/v1/pipelines", ferry__api_pipelines_apply, false, ADMIN},
    {"GET", "/v1/pipelines/{name}", ferry__api_pipeline_get, false, VIEWER},
    {"DELETE", "/v1/pipelines/{name}", ferry__api_pipeline_delete, false, ADMIN},
    {"GET", "/v1/pipelines/{name}/versions", ferry__api_pipeline_versions, false, VIEWER},
    {"GET", "/v1/pipelines/{name}/versions/{version}", ferry__api_pipeline_version, false, VIEWER},
    {"POST", "/v1/pipelines/{name}/runs", ferry__api_runs_create, false, OPERATOR},
    {"GET", "/v1/runs", ferry__api_runs_list, false, VIEWER},
    {"GET", "/v1/runs/{id}", ferry__api_run_get, false, VIEWER},
    {"GET", "/v1/runs/{id}/events", ferry__api_run_events, false, VIEWER},
    {"POST", "/v1/runs/{id}/pause", ferry__api_run_pause, false, OPERATOR},
    {"POST", "/v1/runs/{id}/resume", ferry__api_run_resume, false, OPERATOR},
    {"POST", "/v1/runs/{id}/cancel", ferry__api_run_cancel, false, OPERATOR},
    {"GET", "/v1/schedules", ferry__api_schedules_list, false, VIEWER},
    {"POST", "/v1/schedules", ferry__api_schedules_create, false, ADMIN},
    {"GET", "/v1/schedules/{id}", ferry__api_schedule_get, false, VIEWER},
    {"DELETE", "/v1/schedules/{id}", ferry__api_schedule_delete, false, ADMIN},
    {"PATCH", "/v1/schedules/{id}", ferry__api_schedule_update, false, ADMIN},
    {"POST", "/v1/runs/{id}/retry", ferry__api_run_retry, false, OPERATOR},  /* api_ops.c */
    {"GET", "/v1/notifications", ferry__api_notifications, false, VIEWER}, /* api_ops.c */
    {"GET", "/v1/runs/{id}/log", ferry__api_run_log, false, VIEWER},       /* api_ops.c */
    /* The UI shell: static files with no data in them; the page asks for a token and sends
     * it with every API call. */
    {"GET", "/", ferry__api_ui, true, 0},
    {"GET", "/ui/{file}", ferry__api_ui, true, 0},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

static const char *role_name(int role)
{
    return role == VIEWER ? "viewer" : role == OPERATOR ? "operator" : "admin";
}

/* A route's least role (a 0 on a protected route counts as admin). */
static int route_role(const struct route *r)
{
    return r->role ? r->role : FERRY_ROLE_ADMIN;
}

void ferry_server_print_routes(void)
{
    for (size_t i = 0; i < N_ROUTES; i++)
        printf("%s %s %s\n", routes[i].method, routes[i].path,
               routes[i].public_route ? "public" : role_name(route_role(&routes[i])));
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes one path segment into a new string; NULL when malformed. */
static char *decode_segment(const char *s, size_t n)
{
    char *out = ferry_malloc(n + 1);
    if (out == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n) {
                ferry_free(out);
                return NULL;
            }
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0 || (h == 0 && l == 0)) {
                ferry_free(out);
                return NULL;
            }
            out[k++] = (char)(h * 16 + l);
            i += 2;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = '\0';
    return out;
}

/* 1: matched (params filled), 0: no match. */
static int match(const char *pattern, const char *url, char **params)
{
    const char *p = pattern, *u = url;
    int np = 0;
    while (*p && *u) {
        if (*p != '/' || *u != '/') return 0;
        p++, u++;
        const char *pe = strchr(p, '/'), *ue = strchr(u, '/');
        size_t pl = pe ? (size_t)(pe - p) : strlen(p), ul = ue ? (size_t)(ue - u) : strlen(u);
        if (pl > 0 && p[0] == '{') {
            if (ul == 0 || np == MAX_PARAMS) goto no;
            params[np] = decode_segment(u, ul);
            if (params[np] == NULL) goto no;
            np++;
        } else if (pl != ul || strncmp(p, u, pl) != 0) {
            goto no;
        }
        p += pl, u += ul;
    }
    if (*p == '\0' && *u == '\0') return 1;
no:
    for (int i = 0; i < np; i++) {
        ferry_free(params[i]);
        params[i] = NULL;
    }
    return 0;
}

/* ---- replies ---- */

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status, const char *ctype,
                             const void *data, size_t len, const char *extra_header,
                             const char *extra_value)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (r == NULL) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (extra_header) MHD_add_response_header(r, extra_header, extra_value);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result ferry__srv_text(struct req *rq, unsigned status, const char *ctype,
                                const void *data, size_t len)
{
    return queue(rq->conn, status, ctype, data, len, NULL, NULL);
}

enum MHD_Result ferry__srv_static(struct req *rq, const char *ctype, const void *data, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    if (r == NULL) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(
        r, "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    enum MHD_Result ret = MHD_queue_response(rq->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result ferry__srv_json(struct req *rq, unsigned status, json_t *json)
{
    char *s = json ? json_dumps(json, JSON_COMPACT) : NULL;
    json_decref(json);
    if (s == NULL) return ferry__srv_error(rq, 500, "internal", "out of memory");
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps' terminator becomes a final newline */
    enum MHD_Result r = queue(rq->conn, status, "application/json", s, n + 1, NULL, NULL);
    free(s);
    return r;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool ferry__srv_utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (len == 0 || end - p < len) return false;
        for (int i = 1; i < len; i++)
            if ((p[i] & 0xc0) != 0x80) return false;
        if (c == 0xe0 && p[1] < 0xa0) return false; /* overlong */
        if (c == 0xed && p[1] >= 0xa0) return false; /* surrogate */
        if (c == 0xf0 && p[1] < 0x90) return false;  /* overlong */
        if (c == 0xf4 && p[1] >= 0x90) return false; /* > U+10FFFF */
        p += len;
    }
    return true;
}

static enum MHD_Result error_reply(struct MHD_Connection *conn, unsigned status, const char *code,
                                   const char *msg, const char *hdr, const char *val)
{
    json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s == NULL) {
        /* A message that is not valid UTF-8 (it quoted the client): answer without it. */
        static const char fallback[] =
            "{\"error\":{\"code\":\"invalid_request\",\"message\":\"the request could not be "
            "answered with its own text (not UTF-8)\"}}";
        return queue(conn, status, "application/json", fallback, sizeof fallback - 1, hdr, val);
    }
    enum MHD_Result r = queue(conn, status, "application/json", s, strlen(s), hdr, val);
    free(s);
    return r;
}

enum MHD_Result ferry__srv_error(struct req *rq, unsigned status, const char *code, const char *fmt,
                                 ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return error_reply(rq->conn, status, code, msg, NULL, NULL);
}

enum MHD_Result ferry__srv_ferror(struct req *rq, const struct ferry_error *e)
{
    unsigned status;
    switch (e->code) {
    case FERRY_EINVAL:
    case FERRY_ECONFIG:
    case FERRY_EPOLICY:
        status = 400;
        break;
    case FERRY_ENOTFOUND:
        status = 404;
        break;
    case FERRY_ECONFLICT:
    case FERRY_EFENCED:
        status = 409;
        break;
    case FERRY_EUNSUPPORTED:
        status = 501;
        break;
    case FERRY_ETIMEOUT:
        status = 503;
        break;
    default:
        status = 500;
        break;
    }
    if (status >= 500) {
        /* The detail (paths, library messages) stays in the server's log. */
        ferry_log(FERRY_LOG_ERROR, "%s %s: %s", rq->method, rq->url, e->message);
        return ferry__srv_error(rq, status, ferry_code_name(e->code),
                                "the server could not complete the request; see its log");
    }
    if (e->code == FERRY_ENOTFOUND || e->code == FERRY_ECONFLICT) {
        /* Store messages start with "state PATH: "; the path is none of the client's business. */
        const char *m = e->message;
        if (strncmp(m, "state ", 6) == 0 && strstr(m, ": ")) m = strstr(m, ": ") + 2;
        return ferry__srv_error(rq, status, ferry_code_name(e->code), "%s", m);
    }
    return ferry__srv_error(rq, status, ferry_code_name(e->code), "%s", e->message);
}

const char *ferry__srv_query(struct req *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* ---- store pool ---- */

struct ferry_store *ferry__srv_store(struct ferry_server *s)
{
    pthread_mutex_lock(&s->pool_lock);
    for (;;) {
        for (int i = 0; i < POOL_SIZE; i++)
            if (!s->pool_busy[i]) {
                s->pool_busy[i] = true;
                pthread_mutex_unlock(&s->pool_lock);
                return s->pool[i];
            }
        pthread_cond_wait(&s->pool_cond, &s->pool_lock);
    }
}

void ferry__srv_store_put(struct ferry_server *s, struct ferry_store *st)
{
    pthread_mutex_lock(&s->pool_lock);
    for (int i = 0; i < POOL_SIZE; i++)
        if (s->pool[i] == st) s->pool_busy[i] = false;
    pthread_cond_signal(&s->pool_cond);
    pthread_mutex_unlock(&s->pool_lock);
}

/* ---- event hub and streams ---- */

static bool final_event(const char *type)
{
    return !strcmp(type, FERRY_EV_RUN_COMPLETED) || !strcmp(type, FERRY_EV_RUN_FAILED) ||
           !strcmp(type, FERRY_EV_RUN_CANCELED);
}

static bool final_or_paused(const char *type)
{
    return final_event(type) || !strcmp(type, FERRY_EV_RUN_PAUSED);
}

const double ferry__srv_lat_bounds[LAT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1,    2.5,   5,    10,  30};

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void drop_depth(struct ferry_server *s, int64_t run_id)
{
    for (int i = 0; i < s->n_depth; i++)
        if (s->depth[i].run_id == run_id) s->depth[i--] = s->depth[--s->n_depth];
    for (int i = 0; i < s->n_lag; i++)
        if (s->lag[i].run_id == run_id) s->lag[i--] = s->lag[--s->n_lag];
}

static void set_lag(struct ferry_server *s, const struct ferry_event *e, json_t *p)
{
    json_t *b = json_object_get(p, "lag_bytes"), *sec = json_object_get(p, "lag_seconds");
    if (!json_is_number(b) && !json_is_number(sec)) return;
    int i = 0;
    while (i < s->n_lag &&
           !(s->lag[i].run_id == e->run_id && !strcmp(s->lag[i].resource, e->resource)))
        i++;
    if (i == s->n_lag) {
        if (s->n_lag == DEPTH_SLOTS) return;
        s->n_lag++;
        s->lag[i].run_id = e->run_id;
        snprintf(s->lag[i].resource, sizeof s->lag[i].resource, "%s", e->resource);
    }
    s->lag[i].bytes = (int64_t)json_number_value(b);
    s->lag[i].seconds = json_number_value(sec);
}

/* Metrics from the event flow: a batch's latency is the time from batch.buffered (closed
 * by the batcher) to batch.written (made durable by the sink), by event time. Pending
 * batches live in a fixed table (a collision forgets the older batch: latency is a sample,
 * never a count). */
static void observe(struct ferry_server *s, const struct ferry_event *e)
{
    bool buffered = !strcmp(e->type, FERRY_EV_BATCH_BUFFERED),
         written = !strcmp(e->type, FERRY_EV_BATCH_WRITTEN);
    bool beat = !strcmp(e->type, FERRY_EV_RUN_HEARTBEAT);
    bool end = final_or_paused(e->type);
    bool mark = !strcmp(e->type, FERRY_EV_WATERMARK_ADVANCED);
    if (!buffered && !written && !beat && !end && !mark) return;
    json_t *p = json_loads(e->payload ? e->payload : "{}", 0, NULL);
    int64_t seq = json_integer_value(json_object_get(p, "seq"));
    json_t *qd = json_object_get(p, "queue_depth");
    uint32_t rh = hash_str(e->resource);
    size_t slot = (size_t)(((uint64_t)e->run_id * 1000003u) ^ (uint64_t)seq ^ rh) % PENDING_SLOTS;
    pthread_mutex_lock(&s->stats_lock);
    struct pending_batch *pb = &s->pending[slot];
    if (buffered) {
        *pb = (struct pending_batch){
            .run_id = e->run_id, .seq = seq, .time_us = e->time_us, .resource_hash = rh};
    } else if (written && pb->run_id == e->run_id && pb->seq == seq && pb->resource_hash == rh) {
        double secs = (double)(e->time_us - pb->time_us) / 1e6;
        if (secs < 0) secs = 0;
        int b = 0;
        while (b < LAT_BUCKETS && secs > ferry__srv_lat_bounds[b])
            b++;
        s->lat_counts[b]++;
        s->lat_n++;
        s->lat_sum += secs;
        memset(pb, 0, sizeof *pb);
    } else if (beat && json_is_integer(qd)) {
        int i = 0;
        while (i < s->n_depth && s->depth[i].run_id != e->run_id)
            i++;
        if (i == s->n_depth && s->n_depth < DEPTH_SLOTS) s->n_depth++;
        if (i < s->n_depth)
            s->depth[i] = (struct run_depth){.run_id = e->run_id, .depth = json_integer_value(qd)};
    } else if (mark) {
        set_lag(s, e, p);
    } else if (end) {
        drop_depth(s, e->run_id);
    }
    pthread_mutex_unlock(&s->stats_lock);
    json_decref(p);
}

static void *hub_main(void *arg)
{
    struct ferry_server *s = arg;
    pthread_mutex_lock(&s->hub_lock);
    int64_t last = s->hub_seq;
    pthread_mutex_unlock(&s->hub_lock);
    while (!atomic_load(&s->stopping)) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (ferry_bus_fetch(s->o.bus, last, 0, 1000, 500, &evs, &n, NULL) != FERRY_OK) {
            usleep(200000);
            continue;
        }
        for (int i = 0; i < n; i++)
            observe(s, &evs[i]);
        if (n > 0) {
            last = evs[n - 1].seq;
            pthread_mutex_lock(&s->hub_lock);
            for (int i = 0; i < n; i++) {
                if (s->ring_len == RING_SIZE) { /* evict the oldest */
                    struct ferry_event *old = &s->ring[s->ring_head];
                    s->ring_base = old->seq;
                    ferry_event_clear(old);
                    s->ring_head = (s->ring_head + 1) % RING_SIZE;
                    s->ring_len--;
                }
                s->ring[(s->ring_head + s->ring_len) % RING_SIZE] = evs[i];
                evs[i].payload = NULL; /* moved into the ring */
                s->ring_len++;
            }
            s->hub_seq = last;
            pthread_cond_broadcast(&s->hub_cond);
            pthread_mutex_unlock(&s->hub_lock);
        }
        ferry_events_free(evs, n);
    }
    pthread_mutex_lock(&s->hub_lock);
    pthread_cond_broadcast(&s->hub_cond);
    pthread_mutex_unlock(&s->hub_lock);
    return NULL;
}

struct stream {
    struct ferry_server *srv;
    int64_t run_id, after;
    int64_t scanned; /* every event <= scanned was looked at (primed streams) */
    bool follow, ended, primed;
    bool saw_final;  /* a final event went out while the run's state was not final yet */
    int token;       /* the stream slot it holds (stream_slot_take) */
    struct ferry_buf out;
    size_t off;
};

static void format_event(struct ferry_buf *b, const struct ferry_event *e)
{
    ferry_buf_printf(b,
                     "id: %" PRId64 "\nevent: %s\ndata: {\"seq\":%" PRId64 ",\"time_us\":%" PRId64
                     ",\"run_id\":%" PRId64 ",\"attempt\":%d,\"type\":\"%s\",\"resource\":",
                     e->seq, e->type, e->seq, e->time_us, e->run_id, e->attempt, e->type);
    ferry_buf_json_string(b, e->resource, strlen(e->resource));
    ferry_buf_printf(b, ",\"payload\":%s}\n\n", e->payload && e->payload[0] ? e->payload : "{}");
}

/* Live part of a stream: the run's events in the hub's ring after what was scanned. Returns
 * -1 when the ring no longer reaches back that far (read the database), else the number of
 * events formatted. Under hub_lock. */
static int ring_scan(struct stream *st)
{
    struct ferry_server *s = st->srv;
    if (!st->primed || st->scanned < s->ring_base) return -1;
    int n = 0;
    for (size_t i = 0; i < s->ring_len; i++) {
        const struct ferry_event *e = &s->ring[(s->ring_head + i) % RING_SIZE];
        if (e->seq <= st->scanned || e->seq <= st->after || e->run_id != st->run_id) continue;
        format_event(&st->out, e);
        st->after = e->seq;
        n++;
        if (final_event(e->type)) st->ended = true;
    }
    st->scanned = s->hub_seq;
    return n;
}

/* Fills st->out with what to send next; false when the stream is over. The first fill (the
 * replay) reads the bus's log; later ones read the ring while it reaches back far enough. */
static bool stream_fill(struct stream *st)
{
    struct ferry_server *s = st->srv;
    int64_t deadline = ferry_now_mono_us() + 15000000;
    while (!atomic_load(&s->stopping)) {
        pthread_mutex_lock(&s->hub_lock);
        int64_t seen = s->hub_seq;
        int from_ring = ring_scan(st);
        pthread_mutex_unlock(&s->hub_lock);
        if (from_ring > 0) return true;
        if (from_ring == 0) {
            if (st->ended) return false;
            goto wait;
        }
        struct ferry_store *db = ferry__srv_store(s);
        struct ferry_run_info run;
        /* The state before the events: a final state read first means its final event is
         * already in the log, so an empty read after it really is the end. */
        bool final = ferry_store_run_get(db, st->run_id, &run, NULL) == FERRY_OK &&
                     ferry_run_state_is_final(run.state);
        ferry_run_info_clear(&run);
        struct ferry_event *evs = NULL;
        int n = 0;
        ferry__srv_store_put(s, db);
        /* From the bus, not the store: with an external bus the events live there. */
        int rc = ferry_bus_fetch(s->o.bus, st->after, st->run_id, 500, 0, &evs, &n, NULL);
        if (rc != FERRY_OK) return false;
        for (int i = 0; i < n; i++) {
            format_event(&st->out, &evs[i]);
            st->after = evs[i].seq;
            if (final_event(evs[i].type)) {
                if (final) st->ended = true;
                else st->saw_final = true;
            }
        }
        ferry_events_free(evs, n);
        /* A read short of its limit saw every event of the run up to `seen`. */
        if (n < 500) {
            st->primed = true;
            st->scanned = seen;
        }
        if (n > 0) return true;
        if (final || !st->follow) return false;
    wait:
        if (!st->follow) return false;
        /* With an external bus the final event can arrive before the tracker makes the
         * run's state final (a retried run goes back to requested instead): end once the
         * state agrees. */
        if (st->saw_final && !st->ended) {
            struct ferry_store *db2 = ferry__srv_store(s);
            struct ferry_run_info r2;
            bool now_final = ferry_store_run_get(db2, st->run_id, &r2, NULL) == FERRY_OK &&
                             ferry_run_state_is_final(r2.state);
            ferry_run_info_clear(&r2);
            ferry__srv_store_put(s, db2);
            if (now_final) return false;
        }
        if (ferry_now_mono_us() >= deadline) {
            ferry_buf_printf(&st->out, ": keep-alive\n\n");
            return true;
        }
        /* Wait for the log to move (or a second, for other processes' events). */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        pthread_mutex_lock(&s->hub_lock);
        while (s->hub_seq == seen && !atomic_load(&s->stopping))
            if (pthread_cond_timedwait(&s->hub_cond, &s->hub_lock, &ts) == ETIMEDOUT) break;
        pthread_mutex_unlock(&s->hub_lock);
    }
    return false;
}

static void stream_slot_give(struct ferry_server *s, int token);

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    if (st->off >= st->out.len) {
        ferry_buf_reset(&st->out);
        st->off = 0;
        if (st->ended || !stream_fill(st)) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->out.len - st->off;
    if (n > max) n = max;
    memcpy(buf, st->out.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct stream *st = cls;
    atomic_fetch_sub(&st->srv->streams_open, 1);
    stream_slot_give(st->srv, st->token);
    ferry_buf_release(&st->out);
    ferry_free(st);
}

/* Takes a stream slot for the caller's token; false when its cap or the total is reached. */
static bool stream_slot_take(struct ferry_server *s, int token)
{
    int per = s->o.max_streams > 0 ? s->o.max_streams : 16;
    pthread_mutex_lock(&s->stats_lock);
    bool ok = s->streams_total_open < per * 4 && (token < 0 || s->streams_by_token[token] < per);
    if (ok) {
        s->streams_total_open++;
        if (token >= 0) s->streams_by_token[token]++;
    }
    pthread_mutex_unlock(&s->stats_lock);
    return ok;
}

static void stream_slot_give(struct ferry_server *s, int token)
{
    pthread_mutex_lock(&s->stats_lock);
    s->streams_total_open--;
    if (token >= 0) s->streams_by_token[token]--;
    pthread_mutex_unlock(&s->stats_lock);
}

enum MHD_Result ferry__srv_stream_events(struct req *rq, int64_t run_id, int64_t after, bool follow)
{
    if (!stream_slot_take(rq->srv, rq->token))
        return error_reply(rq->conn, 503, "too_many_streams",
                           "too many open event streams for this token or this server; retry later",
                           "Retry-After", "5");
    struct stream *st = ferry_calloc(1, sizeof *st);
    if (st == NULL) {
        stream_slot_give(rq->srv, rq->token);
        return ferry__srv_error(rq, 500, "internal", "out of memory");
    }
    st->token = rq->token;
    st->srv = rq->srv;
    st->run_id = run_id;
    st->after = after;
    st->follow = follow;
    ferry_buf_init(&st->out, 0);
    atomic_fetch_add(&rq->srv->streams_open, 1);
    atomic_fetch_add(&rq->srv->streams_total, 1);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (r == NULL) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(rq->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- the access handler ---- */

struct conn_state {
    const struct route *route;
    char *params[MAX_PARAMS];
    struct ferry_buf body;
    bool too_big, answered;
    int token;          /* index of the caller's token, -1: none */
    int64_t started_us; /* headers complete: the body's deadline counts from here */
};

/* The index of the request's token, or -1. */
static int token_index(struct ferry_server *s, struct MHD_Connection *conn)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) return -1;
    const char *t = h + 7;
    size_t tl = strlen(t);
    int found = -1;
    unsigned char digest[32];
    struct ferry_sha256 sh;
    ferry_sha256_init(&sh);
    ferry_sha256_update(&sh, t, tl);
    ferry_sha256_final(&sh, digest);
    for (int i = 0; i < s->o.n_hashed; i++) {
        unsigned char diff = 0;
        for (int j = 0; j < 32; j++)
            diff |= (unsigned char)(digest[j] ^ s->o.hashed[i].sha256[j]);
        if (diff == 0 && found < 0) found = s->o.n_tokens + i;
    }
    for (int i = 0; i < s->o.n_tokens; i++) {
        const char *k = s->tokens[i];
        size_t kl = strlen(k);
        /* Constant time in the token's content. */
        unsigned char diff = (unsigned char)(kl != tl);
        for (size_t j = 0; j < kl; j++)
            diff |= (unsigned char)(k[j] ^ (j < tl ? t[j] : 0));
        if (diff == 0 && found < 0) found = i;
    }
    return found;
}

/* The role and id of token index t (plain tokens are admins "token-N"). */
static int token_role(const struct ferry_server *s, int t)
{
    return t < s->o.n_tokens ? FERRY_ROLE_ADMIN : (int)s->o.hashed[t - s->o.n_tokens].role;
}

void ferry__srv_token_id(const struct ferry_server *s, int t, char *out, size_t len)
{
    if (t < 0)
        snprintf(out, len, "-");
    else if (t < s->o.n_tokens)
        snprintf(out, len, "token-%d", t + 1);
    else
        snprintf(out, len, "%s", s->o.hashed[t - s->o.n_tokens].id);
}

/* audit.request (or audit.denied): who called which mutating route; never the token. */
static void audit(struct ferry_server *s, int t, const char *type, const char *method,
                  const char *url)
{
    char id[64];
    ferry__srv_token_id(s, t, id, sizeof id);
    json_t *j = json_pack("{s:s,s:s,s:s}", "token", id, "method", method, "path", url);
    char *p = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (p && s->o.bus) ferry_bus_emit(s->o.bus, 0, 0, "", type, p, NULL);
    free(p);
}

static enum MHD_Result utf8_kv(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    bool *bad = cls;
    if (!ferry__srv_utf8_ok(key, strlen(key)) || (value && !ferry__srv_utf8_ok(value, strlen(value))))
        *bad = true;
    return *bad ? MHD_NO : MHD_YES;
}

/* Every byte the handlers may echo must be UTF-8: the path, the query and the headers. */
static bool request_utf8_ok(struct MHD_Connection *conn, const char *url)
{
    if (!ferry__srv_utf8_ok(url, strlen(url))) return false;
    bool bad = false;
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND | MHD_HEADER_KIND, utf8_kv, &bad);
    return !bad;
}

/* ---- request deadlines ----
 * libmicrohttpd's connection timeout is an idle timeout: a client sending one header byte
 * every few seconds would hold a thread for ever. So every connection is watched from
 * accept: its headers must be complete HEADER_DEADLINE_S after it opened (or after its
 * previous request ended), its body BODY_DEADLINE_S after the headers. Past that, the
 * watchdog thread shuts the socket down and libmicrohttpd's thread, reading nothing more,
 * closes the connection. A request being answered (a handler, an event stream) has no
 * deadline here. libmicrohttpd tells a connection's end (NOTIFY_CLOSED) before it closes
 * the socket, so the watchdog never touches a descriptor that was reused. */

enum { WATCH_HEADERS, WATCH_BODY, WATCH_ANSWER };

struct conn_watch {
    MHD_socket fd;
    int phase;
    int64_t since_us;
    struct conn_watch *prev, *next;
};

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct ferry_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn_watch *w = ci ? ferry_calloc(1, sizeof *w) : NULL;
        *socket_context = w;
        if (w == NULL) return;
        w->fd = ci->connect_fd;
        w->phase = WATCH_HEADERS;
        w->since_us = ferry_now_mono_us();
        pthread_mutex_lock(&s->watch_lock);
        w->next = s->watch;
        if (s->watch) s->watch->prev = w;
        s->watch = w;
        pthread_mutex_unlock(&s->watch_lock);
        return;
    }
    struct conn_watch *w = *socket_context;
    if (w == NULL) return;
    pthread_mutex_lock(&s->watch_lock);
    if (w->prev) w->prev->next = w->next;
    else s->watch = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&s->watch_lock);
    ferry_free(w);
    *socket_context = NULL;
}

/* The connection now waits for (or answers) the given part of a request. */
static void watch_phase(struct ferry_server *s, struct MHD_Connection *conn, int phase)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_watch *w = ci ? ci->socket_context : NULL;
    if (w == NULL) return;
    pthread_mutex_lock(&s->watch_lock);
    w->phase = phase;
    w->since_us = ferry_now_mono_us();
    pthread_mutex_unlock(&s->watch_lock);
}

static void *watch_main(void *arg)
{
    struct ferry_server *s = arg;
    pthread_mutex_lock(&s->watch_lock);
    while (!atomic_load(&s->stopping)) {
        int64_t now = ferry_now_mono_us();
        for (struct conn_watch *w = s->watch; w; w = w->next) {
            int64_t limit = w->phase == WATCH_HEADERS ? HEADER_DEADLINE_S
                            : w->phase == WATCH_BODY  ? BODY_DEADLINE_S
                                                      : 0;
            if (limit == 0 || now - w->since_us <= limit * 1000000) continue;
            shutdown(w->fd, SHUT_RDWR);
            w->phase = WATCH_ANSWER; /* cut once */
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 250000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s->watch_cond, &s->watch_lock, &ts);
    }
    pthread_mutex_unlock(&s->watch_lock);
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct ferry_server *s = cls;
    struct conn_state *cs = *con_cls;
    if (cs == NULL) {
        cs = ferry_calloc(1, sizeof *cs);
        if (cs == NULL) return MHD_NO;
        ferry_buf_init(&cs->body, s->o.max_body + 1);
        cs->token = -1;
        cs->started_us = ferry_now_mono_us();
        *con_cls = cs;
        watch_phase(s, conn, WATCH_BODY);
        atomic_fetch_add(&s->requests, 1);
        if (!request_utf8_ok(conn, url)) {
            cs->answered = true;
            return error_reply(conn, 400, "invalid_utf8",
                               "the request's path, query or headers are not valid UTF-8", NULL,
                               NULL);
        }
        bool path_known = false;
        for (size_t i = 0; i < N_ROUTES && cs->route == NULL; i++) {
            char *params[MAX_PARAMS] = {0};
            if (!match(routes[i].path, url, params)) continue;
            path_known = true;
            if (strcmp(routes[i].method, method) == 0) {
                cs->route = &routes[i];
                memcpy(cs->params, params, sizeof params);
            } else {
                for (int k = 0; k < MAX_PARAMS; k++)
                    ferry_free(params[k]);
            }
        }
        /* Unknown paths answer 401 too without a token: nothing about the API is told to a
         * client that cannot prove who it is. */
        bool public_route = cs->route && cs->route->public_route;
        cs->token = token_index(s, conn);
        if (!public_route && cs->token < 0) {
            atomic_fetch_add(&s->unauthorized, 1);
            cs->answered = true;
            return error_reply(conn, 401, "unauthorized",
                               "a valid bearer token is required (Authorization: Bearer TOKEN)",
                               "WWW-Authenticate", "Bearer");
        }
        for (int k = 0; cs->route && k < MAX_PARAMS; k++)
            if (cs->params[k] && !ferry__srv_utf8_ok(cs->params[k], strlen(cs->params[k]))) {
                cs->answered = true;
                return error_reply(conn, 400, "invalid_utf8",
                                   "the request's path is not valid UTF-8", NULL, NULL);
            }
        if (cs->route && !public_route && token_role(s, cs->token) < route_role(cs->route)) {
            cs->answered = true;
            char id[64], msg[256];
            ferry__srv_token_id(s, cs->token, id, sizeof id);
            snprintf(msg, sizeof msg, "token %s (role %s) may not call %s %s: it needs %s", id,
                     role_name(token_role(s, cs->token)), method, cs->route->path,
                     role_name(route_role(cs->route)));
            audit(s, cs->token, "audit.denied", method, cs->route->path);
            return error_reply(conn, 403, "forbidden", msg, NULL, NULL);
        }
        if (cs->route == NULL) {
            cs->answered = true;
            return error_reply(conn, path_known ? 405 : 404, path_known ? "method" : "not_found",
                               path_known ? "this method is not allowed on this path"
                                          : "no such route",
                               NULL, NULL);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            cs->answered = true;
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes",
                     s->o.max_body);
            return error_reply(conn, 413, "too_large", msg, "Connection", "close");
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* A body trickled in slower than the deadline: the connection is dropped. */
        if (ferry_now_mono_us() - cs->started_us > (int64_t)BODY_DEADLINE_S * 1000000) return MHD_NO;
        if (!cs->answered && !cs->too_big &&
            ferry_buf_append(&cs->body, upload_data, *upload_data_size) != FERRY_OK)
            cs->too_big = true;
        if (cs->body.len > s->o.max_body) cs->too_big = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cs->answered) return MHD_YES;
    cs->answered = true;
    if (cs->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes",
                 s->o.max_body);
        return error_reply(conn, 413, "too_large", msg, "Connection", "close");
    }
    if (!ferry__srv_utf8_ok(cs->body.data ? cs->body.data : "", cs->body.len))
        return error_reply(conn, 400, "invalid_utf8", "body: not valid UTF-8", NULL, NULL);
    struct req rq = {.srv = s,
                     .conn = conn,
                     .method = method,
                     .url = url,
                     .body = cs->body.data ? cs->body.data : "",
                     .body_len = cs->body.len,
                     .token = cs->token};
    memcpy(rq.params, cs->params, sizeof rq.params);
    if (strcmp(method, "GET") != 0 && !cs->route->public_route)
        audit(s, cs->token, "audit.request", method, cs->route->path);
    watch_phase(s, conn, WATCH_ANSWER);
    return cs->route->fn(&rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    struct conn_state *cs = *con_cls;
    if (cs == NULL) return;
    watch_phase(cls, conn, WATCH_HEADERS); /* a kept-alive connection's next request */
    for (int i = 0; i < MAX_PARAMS; i++)
        ferry_free(cs->params[i]);
    /* a body may be a secret's value (PUT /v1/secrets/{name}) */
    if (cs->body.data) explicit_bzero(cs->body.data, cs->body.len);
    ferry_buf_release(&cs->body);
    ferry_free(cs);
    *con_cls = NULL;
}

/* ---- lifecycle ---- */

int ferry_server_start(const struct ferry_server_options *o, struct ferry_server **out,
                       struct ferry_error *err)
{
    *out = NULL;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)o->port);
    const char *host = o->host && o->host[0] ? o->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return ferry_error_set(err, FERRY_ECONFIG, "server",
                               "--listen: \"%s\" is not a numeric IPv4 address", host);
    if (o->n_tokens + o->n_hashed > MAX_TOKENS)
        return ferry_error_set(err, FERRY_ECONFIG, "server", "at most %d API tokens", MAX_TOKENS);
    if (o->n_tokens + o->n_hashed < 1)
        return ferry_error_set(
            err, FERRY_ECONFIG, "server",
            "no API token: set FERRY_API_TOKEN or pass --token env:NAME|file:PATH");
    struct ferry_server *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "server", "out of memory");
    s->o = *o;
    s->tokens = o->tokens;
    pthread_mutex_init(&s->pool_lock, NULL);
    pthread_cond_init(&s->pool_cond, NULL);
    pthread_mutex_init(&s->hub_lock, NULL);
    pthread_mutex_init(&s->stats_lock, NULL);
    pthread_mutex_init(&s->watch_lock, NULL);
    ferry__cond_init_mono(&s->hub_cond);
    ferry__cond_init_mono(&s->watch_cond);
    int rc = FERRY_OK;
    for (int i = 0; i < POOL_SIZE && rc == FERRY_OK; i++)
        rc = ferry_store_open(o->state_path, &s->pool[i], err);
    s->ring = ferry_calloc(RING_SIZE, sizeof *s->ring);
    if (s->ring == NULL) rc = ferry_error_set(err, FERRY_ENOMEM, "server", "out of memory");
    if (rc == FERRY_OK) {
        s->hub_seq = ferry_store_event_last_seq(s->pool[0]);
        s->ring_base = s->hub_seq;
        s->hub_started = pthread_create(&s->hub_thread, NULL, hub_main, s) == 0;
        s->watch_started = pthread_create(&s->watch_thread, NULL, watch_main, s) == 0;
        if (!s->watch_started)
            rc = ferry_error_set(err, FERRY_EIO, "server", "cannot start the deadline watchdog");
    }
    if (rc == FERRY_OK) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG;
        s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                  (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                                  s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)2000,
                                  MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                  (unsigned)(o->max_per_address ? o->max_per_address : 32),
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                                  MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
        if (s->mhd == NULL)
            rc = ferry_error_set(err, FERRY_EIO, "server", "cannot listen on %s:%d: %s", host,
                                 o->port, strerror(errno ? errno : EADDRINUSE));
    }
    if (rc != FERRY_OK) {
        ferry_server_stop(s);
        return rc;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    *out = s;
    return FERRY_OK;
}

int ferry_server_port(const struct ferry_server *s)
{
    return s->port;
}

void ferry_server_stop(struct ferry_server *s)
{
    if (s == NULL) return;
    atomic_store(&s->stopping, 1);
    if (s->o.bus && s->o.bus->vt->wake) s->o.bus->vt->wake(s->o.bus);
    pthread_mutex_lock(&s->hub_lock);
    pthread_cond_broadcast(&s->hub_cond);
    pthread_mutex_unlock(&s->hub_lock);
    pthread_mutex_lock(&s->watch_lock);
    pthread_cond_broadcast(&s->watch_cond);
    pthread_mutex_unlock(&s->watch_lock);
    if (s->watch_started) pthread_join(s->watch_thread, NULL);
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->hub_started) pthread_join(s->hub_thread, NULL);
    for (int i = 0; i < POOL_SIZE; i++)
        ferry_store_close(s->pool[i]);
    for (size_t i = 0; s->ring && i < s->ring_len; i++)
        ferry_event_clear(&s->ring[(s->ring_head + i) % RING_SIZE]);
    ferry_free(s->ring);
    pthread_cond_destroy(&s->hub_cond);
    pthread_mutex_destroy(&s->hub_lock);
    pthread_mutex_destroy(&s->stats_lock);
    pthread_cond_destroy(&s->watch_cond);
    pthread_mutex_destroy(&s->watch_lock);
    pthread_cond_destroy(&s->pool_cond);
    pthread_mutex_destroy(&s->pool_lock);
    ferry_free(s);
}

/* ---- the tokens file ---- */

int ferry_server_tokens_load(const char *path, struct ferry_token_hash **out, int *n,
                             struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "server", "--tokens %s: %s", path,
                               strerror(errno));
    struct ferry_token_hash *v = ferry_calloc(MAX_TOKENS, sizeof *v);
    if (v == NULL) {
        fclose(f);
        return ferry_error_set(err, FERRY_ENOMEM, "server", "out of memory");
    }
    char line[512];
    int ln = 0, rc = FERRY_OK;
    while (rc == FERRY_OK && fgets(line, sizeof line, f)) {
        ln++;
        char id[128], role[32], hash[128], extra[8];
        char *hashp = strchr(line, '#');
        if (hashp) *hashp = '\0';
        int k = sscanf(line, "%127s %31s %127s %7s", id, role, hash, extra);
        if (k <= 0) continue;
        enum ferry_role r = !strcmp(role, "viewer") ? FERRY_ROLE_VIEWER
                            : !strcmp(role, "operator") ? FERRY_ROLE_OPERATOR
                            : !strcmp(role, "admin") ? FERRY_ROLE_ADMIN : 0;
        bool hex_ok = k == 3 && strncmp(hash, "sha256:", 7) == 0 && strlen(hash) == 71;
        for (int i = 7; hex_ok && i < 71; i++)
            hex_ok = hexval(hash[i]) >= 0;
        if (k != 3 || r == 0 || !hex_ok || strlen(id) >= sizeof v[0].id) {
            rc = ferry_error_set(err, FERRY_ECONFIG, "server",
                                 "--tokens %s: line %d: expected ID viewer|operator|admin "
                                 "sha256:HEX (64 hex digits)",
                                 path, ln);
            break;
        }
        if (*n == MAX_TOKENS) {
            rc = ferry_error_set(err, FERRY_ECONFIG, "server", "--tokens %s: more than %d tokens",
                                 path, MAX_TOKENS);
            break;
        }
        snprintf(v[*n].id, sizeof v[*n].id, "%s", id);
        v[*n].role = r;
        for (int i = 0; i < 32; i++)
            v[*n].sha256[i] = (unsigned char)(hexval(hash[7 + 2 * i]) * 16 + hexval(hash[8 + 2 * i]));
        (*n)++;
    }
    fclose(f);
    if (rc != FERRY_OK) {
        ferry_free(v);
        *n = 0;
        return rc;
    }
    *out = v;
    return FERRY_OK;
}
