/* net/http.c - the engine's HTTP client on libcurl (contract in net/http.h).
 *
 * Owns one easy handle per client and the policy around it: timeouts, the retry loop for
 * idempotent requests, the response body cap and the cancel flag (checked by curl's
 * progress callback while a transfer runs and between retries). Calls libcurl and core.
 * Called by the S3 client, the Iceberg REST catalog, the Kubernetes dispatcher and the
 * CLI's --server client. */
#include "net/http.h"
#include "net/pins.h"
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MAX_MS 10000
#define BODY_CAP_DEFAULT ((size_t)64 << 20)

struct ferry__http {
    struct ferry__http_opts o;
    char *what, *origin, *ca_file, *user_agent;
    CURL *curl;
    atomic_bool canceled;
    uint64_t jitter; /* xorshift state for the backoff jitter */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;
static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int nomem(const char *origin, const char *what, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, origin, "%s: out of memory", what);
}

int ferry__http_open(const struct ferry__http_opts *o, struct ferry__http **out,
                     struct ferry_error *err)
{
    *out = NULL;
    const char *what = o->what ? o->what : "http";
    const char *origin = o->origin ? o->origin : "http";
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return ferry_error_set(err, FERRY_EIO, origin, "%s: libcurl failed to start: %s", what,
                               curl_easy_strerror(global_rc));
    struct ferry__http *h = ferry_calloc(1, sizeof *h);
    if (h == NULL) return nomem(origin, what, err);
    h->o = *o;
    h->what = ferry_strdup(what);
    h->origin = ferry_strdup(origin);
    h->user_agent = ferry_strdup(o->user_agent ? o->user_agent : "ferry");
    h->ca_file = o->ca_file ? ferry_strdup(o->ca_file) : NULL;
    if (h->what == NULL || h->origin == NULL || h->user_agent == NULL ||
        (o->ca_file && h->ca_file == NULL)) {
        ferry__http_close(h);
        return nomem(origin, what, err);
    }
    h->curl = curl_easy_init();
    if (h->curl == NULL) {
        ferry__http_close(h);
        return ferry_error_set(err, FERRY_EIO, origin, "%s: libcurl: no handle", what);
    }
    atomic_init(&h->canceled, false);
    h->jitter = (uint64_t)ferry_now_mono_us() ^ (uint64_t)(uintptr_t)h ^ 0x9e3779b97f4a7c15u;
    if (h->jitter == 0) h->jitter = 1;
    *out = h;
    return FERRY_OK;
}

void ferry__http_close(struct ferry__http *h)
{
    if (h == NULL) return;
    if (h->curl) curl_easy_cleanup(h->curl);
    ferry_free(h->what);
    ferry_free(h->origin);
    ferry_free(h->ca_file);
    ferry_free(h->user_agent);
    ferry_free(h);
}

void ferry__http_cancel(struct ferry__http *h)
{
    if (h) atomic_store(&h->canceled, true);
}

/* ---- one transfer ---------------------------------------------------------------------- */

struct sink {
    struct ferry_buf *body;
    size_t cap;
    bool over_cap, nomem, stopped;
    const struct ferry__http_req *q;
    CURL *curl;
};

static size_t on_write(char *src, size_t size, size_t n, void *ctx)
{
    struct sink *s = ctx;
    size_t len = size * n;
    if (s->q->on_data) {
        long st = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &st);
        if (s->q->on_data(s->q->arg, st, src, len)) return len;
        s->stopped = true;
        return 0;
    }
    if (s->body->len + len > s->cap) {
        s->over_cap = true;
        return 0;
    }
    if (ferry_buf_append(s->body, src, len) != FERRY_OK) {
        s->nomem = true;
        return 0;
    }
    return len;
}

struct source {
    const char *p;
    size_t len, off;
};

static size_t on_read(char *dst, size_t size, size_t n, void *ctx)
{
    struct source *b = ctx;
    size_t want = size * n, left = b->len - b->off;
    if (want > left) want = left;
    if (want) memcpy(dst, b->p + b->off, want);
    b->off += want;
    return want;
}

/* curl rewinds the body when it sends the request again on a fresh connection (the reused
 * one was closed after the body went out). */
static int on_seek(void *ctx, curl_off_t offset, int origin)
{
    struct source *b = ctx;
    if (origin != SEEK_SET || offset < 0 || (size_t)offset > b->len) return CURL_SEEKFUNC_FAIL;
    b->off = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct ferry__http *h = ctx;
    return atomic_load(&h->canceled) ? 1 : 0;
}

static void set_method(CURL *c, const struct ferry__http_req *q, struct source *src)
{
    const char *m = q->method;
    if (strcmp(m, "PUT") == 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, src);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, src);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->len);
    } else if (strcmp(m, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (q->body != NULL || strcmp(m, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body ? (const char *)q->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
        if (strcmp(m, "POST") != 0) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
    } else if (strcmp(m, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
    }
}

static void set_policy(struct ferry__http *h, CURL *c)
{
    const struct ferry__http_opts *o = &h->o;
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000L);
    if (o->total_timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, o->total_timeout_ms);
    if (o->low_speed_time_s > 0) {
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s);
    }
    if (h->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
    /* never file://, ftp:// or any other scheme libcurl knows: a URL comes from config */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, o->https_only ? "https" : "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, h->user_agent);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
}

/* One try. FERRY_OK with *cc the transfer's outcome and *status the HTTP status (0 when
 * no answer came); FERRY_ENOMEM when the header list cannot be built. */
static int attempt(struct ferry__http *h, const struct ferry__http_req *q, struct sink *sk,
                   long *status, CURLcode *cc)
{
    struct curl_slist *hl = NULL;
    for (const char *const *l = q->headers; l && *l; l++) {
        struct curl_slist *n = curl_slist_append(hl, *l);
        if (n == NULL) {
            curl_slist_free_all(hl);
            return FERRY_ENOMEM;
        }
        hl = n;
    }
    struct curl_slist *n = curl_slist_append(hl, "Expect:");
    if (n == NULL) {
        curl_slist_free_all(hl);
        return FERRY_ENOMEM;
    }
    hl = n;
    CURL *c = h->curl;
    curl_easy_reset(c);
    struct source src = {q->body, q->len, 0};
    if (sk->body) ferry_buf_reset(sk->body);
    sk->over_cap = sk->nomem = sk->stopped = false;
    sk->q = q;
    sk->curl = c;
    set_policy(h, c);
    /* The addresses the worker's policy check approved (net/pins.h): never resolved again. */
    struct curl_slist *pins = NULL;
    char line[400];
    for (int i = 0; ferry_pins_curl_line(i, line, sizeof line); i++) {
        struct curl_slist *p = curl_slist_append(pins, line);
        if (p == NULL) break;
        pins = p;
    }
    if (pins) curl_easy_setopt(c, CURLOPT_RESOLVE, pins);
    curl_easy_setopt(c, CURLOPT_URL, q->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sk);
    set_method(c, q, &src);
    *cc = curl_easy_perform(c);
    *status = 0;
    if (*cc == CURLE_WRITE_ERROR && sk->stopped) *cc = CURLE_OK;
    if (*cc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    /* The handle keeps pointers to the header list and the body (which may hold a secret):
     * drop them now. */
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(c, CURLOPT_RESOLVE, NULL);
    curl_slist_free_all(hl);
    curl_slist_free_all(pins);
    return FERRY_OK;
}

static bool retryable_status(long st)
{
    return st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

static bool retryable_curl(CURLcode c)
{
    return c == CURLE_COULDNT_CONNECT || c == CURLE_OPERATION_TIMEDOUT || c == CURLE_SEND_ERROR ||
           c == CURLE_RECV_ERROR || c == CURLE_GOT_NOTHING || c == CURLE_PARTIAL_FILE ||
           c == CURLE_COULDNT_RESOLVE_HOST;
}

/* Waits ms milliseconds in slices, returning early (false) when canceled. */
static bool backoff_sleep(struct ferry__http *h, int64_t ms)
{
    while (ms > 0) {
        if (atomic_load(&h->canceled)) return false;
        int64_t slice = ms < 100 ? ms : 100;
        struct timespec ts = {(time_t)(slice / 1000), (long)(slice % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
        ms -= slice;
    }
    return !atomic_load(&h->canceled);
}

static int64_t jittered(struct ferry__http *h, int64_t delay)
{
    uint64_t x = h->jitter;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    h->jitter = x;
    return delay + (int64_t)(x % (uint64_t)(delay / 2 + 1));
}

void ferry__http_redact(const char *url, char *out, size_t cap)
{
    if (cap == 0) return;
    const char *p = url ? url : "";
    const char *scheme_end = strstr(p, "://");
    const char *host = scheme_end ? scheme_end + 3 : p;
    size_t hostlen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hostlen);
    const char *rest = host + hostlen;
    size_t restlen = strcspn(rest, "?#");
    if (at) {
        hostlen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    snprintf(out, cap, "%.*s%.*s%.*s", scheme_end ? (int)(scheme_end + 3 - p) : 0, p,
             (int)hostlen, host, (int)restlen, rest);
}

static int transfer_error(struct ferry__http *h, const struct ferry__http_req *q,
                          const struct sink *sk, CURLcode cc, struct ferry_error *err)
{
    char where[512];
    if (q->name)
        snprintf(where, sizeof where, "%s", q->name);
    else
        ferry__http_redact(q->url, where, sizeof where);
    if (cc == CURLE_ABORTED_BY_CALLBACK || atomic_load(&h->canceled))
        return ferry_error_set(err, FERRY_ECANCELED, h->origin, "%s: %s %s: canceled", h->what,
                               q->method, where);
    if (sk->nomem) return nomem(h->origin, h->what, err);
    if (sk->over_cap)
        return ferry_error_set(err, FERRY_EIO, h->origin,
                               "%s: %s %s: the response is larger than %zu bytes", h->what,
                               q->method, where, sk->cap);
    int code = ferry_error_set(err, cc == CURLE_OPERATION_TIMEDOUT ? FERRY_ETIMEOUT : FERRY_EIO,
                               h->origin, "%s: %s %s: %s", h->what, q->method, where,
                               curl_easy_strerror(cc));
    /* A connection refused, reset or cut, or a timeout: the run may be retried later
     * (docs/operations.md, retries); other transfer errors are permanent. */
    bool transient = cc == CURLE_COULDNT_CONNECT || cc == CURLE_OPERATION_TIMEDOUT ||
                     cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING ||
                     cc == CURLE_PARTIAL_FILE || cc == CURLE_COULDNT_RESOLVE_HOST;
    if (transient) ferry_error_set_transient(err);
    return code;
}

int ferry__http_do(struct ferry__http *h, const struct ferry__http_req *q, struct ferry_buf *body,
                   long *status, struct ferry_error *err)
{
    struct sink sk = {.body = body, .cap = h->o.body_cap ? h->o.body_cap : BODY_CAP_DEFAULT};
    int tries = q->idempotent && h->o.max_attempts > 1 ? h->o.max_attempts : 1;
    int64_t delay = h->o.backoff_ms > 0 ? h->o.backoff_ms : 200;
    long st = 0;
    CURLcode cc = CURLE_OK;
    *status = 0;
    for (int a = 1;; a++) {
        if (atomic_load(&h->canceled)) {
            cc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        if (attempt(h, q, &sk, &st, &cc) != FERRY_OK) return nomem(h->origin, h->what, err);
        bool again = cc != CURLE_OK ? retryable_curl(cc) : retryable_status(st);
        if (!again || a >= tries) break;
        int64_t d = jittered(h, delay);
        char where[512];
        if (q->name)
            snprintf(where, sizeof where, "%s", q->name);
        else
            ferry__http_redact(q->url, where, sizeof where);
        ferry_log(FERRY_LOG_INFO, "%s: %s %s: %s%ld, retry %d in %" PRId64 " ms", h->what,
                  q->method, where, cc != CURLE_OK ? curl_easy_strerror(cc) : "HTTP ",
                  cc != CURLE_OK ? 0L : st, a, d);
        if (!backoff_sleep(h, d)) {
            cc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
    }
    if (cc != CURLE_OK) return transfer_error(h, q, &sk, cc, err);
    *status = st;
    return FERRY_OK;
}

bool ferry__http_header(struct ferry__http *h, const char *name, char *out, size_t cap)
{
    struct curl_header *hd = NULL;
    if (cap == 0 || curl_easy_header(h->curl, name, 0, CURLH_HEADER, -1, &hd) != CURLHE_OK)
        return false;
    snprintf(out, cap, "%s", hd->value);
    return true;
}

char *ferry__http_escape(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = ferry_malloc(n * 3 + 1);
    if (out == NULL) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            out[j++] = (char)c;
        } else {
            out[j++] = '%';
            out[j++] = hex[c >> 4];
            out[j++] = hex[c & 15];
        }
    }
    out[j] = '\0';
    return out;
}
