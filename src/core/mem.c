/* core/mem.c - the allocation choke point, growable buffers, time and logging.
 *
 * Every engine allocation passes here so that a test can fail the Nth one
 * (ferry_mem_fail_after) and so that memory policy lives in one place. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/check.h"
#include "ferry/core.h"
#include "ferry/error.h"

static atomic_long fail_countdown = -1;

void ferry_mem_fail_after(long n)
{
    atomic_store(&fail_countdown, n);
}

static int should_fail(void)
{
    long v = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (v < 0) return 0;
    return atomic_fetch_sub(&fail_countdown, 1) == 0;
}

void *ferry_malloc(size_t n)
{
    if (should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *ferry_calloc(size_t count, size_t size)
{
    if (should_fail()) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *ferry_realloc(void *p, size_t n)
{
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void ferry_free(void *p)
{
    free(p);
}

char *ferry_strndup(const char *s, size_t n)
{
    if (s == NULL) return NULL;
    char *d = ferry_malloc(n + 1);
    if (d == NULL) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ferry_strdup(const char *s)
{
    return s ? ferry_strndup(s, strlen(s)) : NULL;
}

char *ferry_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = ferry_malloc((size_t)n + 1);
    if (s == NULL) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- buffers ---- */

void ferry_buf_init(struct ferry_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max ? max : ((size_t)1 << 30);
    b->failed = FERRY_OK;
}

static int buf_fail(struct ferry_buf *b)
{
    b->failed = FERRY_ENOMEM;
    return FERRY_ENOMEM;
}

int ferry_buf_failed(const struct ferry_buf *b)
{
    return b->failed;
}

int ferry_buf_reserve(struct ferry_buf *b, size_t extra)
{
    if (b->failed != FERRY_OK) return b->failed;
    if (b->len + extra + 1 <= b->cap) return FERRY_OK;
    size_t need = b->len + extra + 1;
    if (need < b->len || need > b->max) return buf_fail(b);
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    if (cap > b->max) cap = b->max;
    char *d = ferry_realloc(b->data, cap);
    if (d == NULL) return buf_fail(b);
    b->data = d;
    b->cap = cap;
    return FERRY_OK;
}

int ferry_buf_append(struct ferry_buf *b, const void *p, size_t n)
{
    if (ferry_buf_reserve(b, n) != FERRY_OK) return FERRY_ENOMEM;
    FERRY_ASSERT(b->data != NULL && b->len + n < b->cap);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return FERRY_OK;
}

int ferry_buf_printf(struct ferry_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->failed != FERRY_OK) return b->failed;
    if (n < 0) return buf_fail(b);
    if (ferry_buf_reserve(b, (size_t)n) != FERRY_OK) return FERRY_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return FERRY_OK;
}

int ferry_buf_json_string(struct ferry_buf *b, const char *s, size_t n)
{
    if (ferry_buf_reserve(b, n + 2) != FERRY_OK) return FERRY_ENOMEM;
    b->data[b->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            if (ferry_buf_reserve(b, 2) != FERRY_OK) return FERRY_ENOMEM;
            b->data[b->len++] = '\\';
            b->data[b->len++] = (char)c;
        } else if (c < 0x20) {
            if (ferry_buf_printf(b, "\\u%04x", c) != FERRY_OK) return FERRY_ENOMEM;
        } else {
            if (ferry_buf_reserve(b, 1) != FERRY_OK) return FERRY_ENOMEM;
            b->data[b->len++] = (char)c;
        }
    }
    if (ferry_buf_reserve(b, 1) != FERRY_OK) return FERRY_ENOMEM;
    b->data[b->len++] = '"';
    b->data[b->len] = '\0';
    return FERRY_OK;
}

void ferry_buf_reset(struct ferry_buf *b)
{
    b->len = 0;
    b->failed = FERRY_OK;
    if (b->data) b->data[0] = '\0';
}

void ferry_buf_release(struct ferry_buf *b)
{
    ferry_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = FERRY_OK;
}

char *ferry_buf_take(struct ferry_buf *b)
{
    char *d = b->data;
    if (b->failed != FERRY_OK) {
        ferry_free(d);
        d = NULL;
    } else if (d == NULL) {
        d = ferry_strdup("");
    }
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = FERRY_OK;
    return d;
}

/* ---- time ---- */

int64_t ferry_now_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ferry_now_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void ferry_format_time_us(int64_t us, char *buf, size_t len)
{
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
}

/* ---- logging ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1;

static int current_level(void)
{
    if (log_level >= 0) return log_level;
    const char *e = getenv("FERRY_LOG");
    int l = FERRY_LOG_WARN;
    if (e) {
        if (!strcmp(e, "debug")) l = FERRY_LOG_DEBUG;
        else if (!strcmp(e, "info")) l = FERRY_LOG_INFO;
        else if (!strcmp(e, "error")) l = FERRY_LOG_ERROR;
    }
    log_level = l;
    return l;
}

void ferry_log_set_level(enum ferry_log_level level)
{
    log_level = (int)level;
}

bool ferry_log_enabled(enum ferry_log_level level)
{
    return (int)level >= current_level();
}

void ferry_log(enum ferry_log_level level, const char *fmt, ...)
{
    if (!ferry_log_enabled(level)) return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    char ts[40];
    ferry_format_time_us(ferry_now_wall_us(), ts, sizeof ts);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s ferry %s: ", ts, names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}
