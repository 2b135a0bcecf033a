/* server/internal.h - what http.c (transport, auth, routing, streams) and api.c (the
 * route handlers) share. Not for use outside src/server/. */
#ifndef FERRY_SERVER_INTERNAL_H
#define FERRY_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "server/server.h"

struct ferry_store;

#define POOL_SIZE 4
#define MAX_PARAMS 3
#define PENDING_SLOTS 4096
#define LAT_BUCKETS 12
#define DEPTH_SLOTS 256
#define RING_SIZE 8192
#define MAX_TOKENS 64
#define IDLE_TIMEOUT_S 60  /* a connection silent this long (headers, body, a stalled reader) is closed */
#define BODY_DEADLINE_S 30 /* a request body must arrive within this many seconds */
#define HEADER_DEADLINE_S 10 /* a request's headers must be complete within this many seconds */

struct conn_watch;

struct ferry_server {
    struct ferry_server_options o;
    char **tokens;
    struct MHD_Daemon *mhd;
    int port;
    atomic_int stopping;
    /* store handles shared by the handlers */
    pthread_mutex_t pool_lock;
    pthread_cond_t pool_cond;
    struct ferry_store *pool[POOL_SIZE];
    bool pool_busy[POOL_SIZE];
    /* event hub: the newest sequence seen; streams wait on hub_cond for it to move */
    pthread_mutex_t hub_lock;
    pthread_cond_t hub_cond;
    int64_t hub_seq;
    /* The newest events of every run, in order: the ring holds every event with
     * ring_base < seq <= hub_seq, so live streams read memory, not the database. */
    struct ferry_event *ring;
    size_t ring_head, ring_len;
    int64_t ring_base;
    pthread_t hub_thread;
    bool hub_started;
    /* counters for /metrics */
    atomic_llong requests, unauthorized, streams_open, streams_total;
    /* batch latency (batch.buffered -> batch.written, seen by the hub) and the queue depth
     * of running runs (from their heartbeats), under stats_lock */
    pthread_mutex_t stats_lock;
    struct pending_batch {
        int64_t run_id, seq, time_us;
        uint32_t resource_hash;
    } pending[PENDING_SLOTS];
    uint64_t lat_counts[LAT_BUCKETS + 1];
    uint64_t lat_n;
    double lat_sum;
    struct run_depth {
        int64_t run_id, depth;
    } depth[DEPTH_SLOTS];
    int n_depth;
    /* replication lag of cdc resources (cursor.watermark_advanced lag_bytes, lag_seconds) */
    struct run_lag {
        int64_t run_id, bytes;
        double seconds;
        char resource[128];
    } lag[DEPTH_SLOTS];
    int n_lag;
    /* every open connection and the deadline of the request part it waits for (http.c) */
    pthread_mutex_t watch_lock;
    pthread_cond_t watch_cond;
    struct conn_watch *watch;
    pthread_t watch_thread;
    bool watch_started;
    /* open event streams, in total and per token (under stats_lock) */
    int streams_total_open;
    int streams_by_token[MAX_TOKENS];
};

extern const double ferry__srv_lat_bounds[LAT_BUCKETS];

struct req {
    struct ferry_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url;
    char *params[MAX_PARAMS];
    const char *body;
    size_t body_len;
    int token; /* index of the caller's token (-1 on public routes without one) */
};

bool ferry__srv_utf8_ok(const char *s, size_t n);
/* The id of token index t for messages and audit events ("token-N" or its --tokens id). */
void ferry__srv_token_id(const struct ferry_server *s, int t, char *out, size_t len);
/* discover.c: answers a discover of the pipeline text from a child process with limits. */
enum MHD_Result ferry__srv_discover(struct req *rq, const char *text, size_t len);

/* Replies; each returns what the access handler returns. json is consumed. */
enum MHD_Result ferry__srv_json(struct req *rq, unsigned status, json_t *json);
enum MHD_Result ferry__srv_error(struct req *rq, unsigned status, const char *code, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));
/* A ferry error: the status follows the code; internal failures are logged and answered
 * with a generic message (no paths, SQL or library text reaches the client). */
enum MHD_Result ferry__srv_ferror(struct req *rq, const struct ferry_error *e);
enum MHD_Result ferry__srv_text(struct req *rq, unsigned status, const char *ctype,
                                const void *data, size_t len);
/* A UI file: also a strict Content-Security-Policy and no framing. */
enum MHD_Result ferry__srv_static(struct req *rq, const char *ctype, const void *data, size_t len);
enum MHD_Result ferry__srv_stream_events(struct req *rq, int64_t run_id, int64_t after,
                                         bool follow);
const char *ferry__srv_query(struct req *rq, const char *name);

struct ferry_store *ferry__srv_store(struct ferry_server *s);
void ferry__srv_store_put(struct ferry_server *s, struct ferry_store *st);

struct ferry_pipeline_spec;
/* A credential written in clear anywhere in the pipeline: FERRY_EINVAL naming the key. */
int ferry__api_plain_secrets(const struct ferry_pipeline_spec *p, struct ferry_error *e);

/* api.c: handlers, each for one route of the table in http.c */
typedef enum MHD_Result (*ferry__handler)(struct req *rq);
enum MHD_Result ferry__api_livez(struct req *rq);
enum MHD_Result ferry__api_readyz(struct req *rq);
enum MHD_Result ferry__api_metrics(struct req *rq);
enum MHD_Result ferry__api_connectors(struct req *rq);
enum MHD_Result ferry__api_validate(struct req *rq);
enum MHD_Result ferry__api_discover(struct req *rq);
enum MHD_Result ferry__api_secrets(struct req *rq);
enum MHD_Result ferry__api_secret_put(struct req *rq);
enum MHD_Result ferry__api_secret_delete(struct req *rq);
enum MHD_Result ferry__api_pipelines_list(struct req *rq);
enum MHD_Result ferry__api_pipelines_apply(struct req *rq);
enum MHD_Result ferry__api_pipeline_get(struct req *rq);
enum MHD_Result ferry__api_pipeline_delete(struct req *rq);
enum MHD_Result ferry__api_pipeline_versions(struct req *rq);
enum MHD_Result ferry__api_pipeline_version(struct req *rq);
enum MHD_Result ferry__api_runs_create(struct req *rq);
enum MHD_Result ferry__api_runs_list(struct req *rq);
enum MHD_Result ferry__api_run_get(struct req *rq);
enum MHD_Result ferry__api_run_events(struct req *rq);
enum MHD_Result ferry__api_run_pause(struct req *rq);
enum MHD_Result ferry__api_run_resume(struct req *rq);
enum MHD_Result ferry__api_run_cancel(struct req *rq);
enum MHD_Result ferry__api_schedules_list(struct req *rq);
enum MHD_Result ferry__api_schedules_create(struct req *rq);
enum MHD_Result ferry__api_schedule_get(struct req *rq);
enum MHD_Result ferry__api_schedule_delete(struct req *rq);
enum MHD_Result ferry__api_schedule_update(struct req *rq);
enum MHD_Result ferry__api_ui(struct req *rq);
enum MHD_Result ferry__api_run_retry(struct req *rq);     /* api_ops.c */
enum MHD_Result ferry__api_notifications(struct req *rq); /* api_ops.c */
enum MHD_Result ferry__api_run_log(struct req *rq);       /* api_ops.c */
/* A W3C `traceparent` header on the request that created run_id: recorded as the run's
 * `run.trace_context` event, so its spans become children of the caller's (api_ops.c). */
void ferry__api_trace_context(struct req *rq, int64_t run_id);

#endif
