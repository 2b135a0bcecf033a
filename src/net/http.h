/* net/http.h - the engine's one HTTP client, on libcurl (docs/internals/net.md).
 *
 * A client is one libcurl easy handle (connections reused between requests) plus its
 * policy: connect and total timeouts (or a low-speed limit for long uploads), retries with
 * exponential backoff and jitter for idempotent requests, a cap on response bodies, and
 * cancellation. curl_global_init runs once per process (pthread_once) before the first
 * handle. Errors name the client (`what`), the method and the URL without its user info and
 * query string, never a header: credentials travel only in headers and request bodies, so
 * nothing secret reaches an error or a log line.
 *
 * Used by objstore/s3_client.c, connectors/iceberg/rest.c, control/k8s.c, cli/client.c and
 * notify/ (webhooks, OTLP export). Only http:// and https:// URLs are followed.
 * Not thread-safe: one thread uses a client; only ferry__http_cancel may be called from
 * another thread. */
#ifndef FERRY_NET_HTTP_H
#define FERRY_NET_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

struct ferry__http_opts {
    const char *what;        /* names the client in errors and logs ("s3 sink", "kubernetes") */
    const char *origin;      /* the error origin ("s3", "iceberg", "k8s", "cli") */
    long connect_timeout_ms; /* 0: 10 s */
    long total_timeout_ms;   /* 0: none (then low_speed_time_s bounds a stalled transfer) */
    long low_speed_time_s;   /* abort when under 1 byte/s for this long; 0: off */
    int max_attempts;        /* tries of an idempotent request; 0: 1 (no retry) */
    int64_t backoff_ms;      /* first wait before a retry; 0: 200 ms; doubled, capped at 10 s */
    size_t body_cap;         /* largest response body kept; 0: 64 MiB */
    const char *ca_file;     /* CA bundle to trust instead of the system's; NULL: system */
    bool https_only;         /* refuse any other protocol */
    const char *user_agent;  /* NULL: "ferry" */
};

struct ferry__http_req {
    const char *method;          /* GET, HEAD, PUT, POST, DELETE, PATCH */
    const char *url;
    const char *const *headers;  /* "Name: value" lines, NULL-terminated; NULL for none */
    const void *body;            /* request body (borrowed), or NULL */
    size_t len;
    bool idempotent;             /* may be sent again on a transport error, 429 or 5xx */
    const char *name;            /* names the target in errors and logs; NULL: the URL */
    /* Streaming answers (an event stream): when set, the body is handed over piece by piece
     * with the answer's status instead of being collected (`body` stays empty and the cap
     * does not apply); returning false ends the transfer, which is then no error. */
    bool (*on_data)(void *arg, long status, const char *p, size_t n);
    void *arg;
};

struct ferry__http;

/* A new client. FERRY_ENOMEM, or FERRY_EIO when libcurl cannot start. */
FERRY_MUST_CHECK int ferry__http_open(const struct ferry__http_opts *o, struct ferry__http **out,
                                      struct ferry_error *err);
void ferry__http_close(struct ferry__http *h);

/* Sends one request and waits for its answer. FERRY_OK when an HTTP answer came, whatever
 * its status (*status; the body in `body`, reset first, at most body_cap bytes): the caller
 * judges the status. An idempotent request is sent again, after a jittered exponential
 * backoff, on a transport error, 429 and 500/502/503/504 until max_attempts; the last
 * answer is returned. Errors: FERRY_ETIMEOUT (a timeout), FERRY_ECANCELED (canceled),
 * FERRY_EIO (transport, body over the cap), FERRY_ENOMEM. */
FERRY_MUST_CHECK int ferry__http_do(struct ferry__http *h, const struct ferry__http_req *q,
                                    struct ferry_buf *body, long *status,
                                    struct ferry_error *err);

/* Stops the request in flight (and every later one) with FERRY_ECANCELED. Thread-safe. */
void ferry__http_cancel(struct ferry__http *h);

/* A header of the last answer (first value), copied into out; false when absent. */
bool ferry__http_header(struct ferry__http *h, const char *name, char *out, size_t cap);

/* The URL-encoded form of s[0..n) (RFC 3986 unreserved kept); caller frees with ferry_free.
 * NULL when out of memory. */
char *ferry__http_escape(const char *s, size_t n);

/* `url` without user info and query string, for messages: "https://host:port/path". */
void ferry__http_redact(const char *url, char *out, size_t cap);

#endif
