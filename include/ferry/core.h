/* ferry/core.h - memory, time and logging shared by every module.
 *
 * All engine allocations go through ferry_malloc/ferry_calloc/ferry_realloc/ferry_free:
 * one choke point, so a test can make the Nth allocation fail
 * (ferry_mem_fail_after()). Free functions accept NULL. */
#ifndef FERRY_CORE_H
#define FERRY_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

#ifdef __cplusplus
extern "C" {
#endif

void *ferry_malloc(size_t n);
void *ferry_calloc(size_t count, size_t size);
void *ferry_realloc(void *p, size_t n);
void ferry_free(void *p);
char *ferry_strdup(const char *s);
char *ferry_strndup(const char *s, size_t n);
/* printf into a fresh allocation; NULL on failure. */
char *ferry_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Test hook: the allocation after `n` more allocations fails (n < 0: never). */
void ferry_mem_fail_after(long n);

/* Monotonic clock in microseconds, and wall clock in microseconds since 1970. */
int64_t ferry_now_mono_us(void);
int64_t ferry_now_wall_us(void);
/* "2026-11-30T05:09:36.123456Z" into buf (at least 32 bytes). */
void ferry_format_time_us(int64_t us, char *buf, size_t len);

enum ferry_log_level { FERRY_LOG_DEBUG, FERRY_LOG_INFO, FERRY_LOG_WARN, FERRY_LOG_ERROR };

/* Diagnostics go to stderr; data goes to stdout. Level from FERRY_LOG (debug|info|warn|
 * error), default warn. Thread-safe. */
void ferry_log(enum ferry_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ferry_log_set_level(enum ferry_log_level level);
bool ferry_log_enabled(enum ferry_log_level level);

/* Growable byte buffer with a hard cap (0 = 1 GiB).
 *
 * A failed append (out of memory, or the cap reached) is sticky, as curl's dynbuf: the
 * buffer keeps the code and every later reserve/append/printf/json_string returns it
 * without writing, so a caller that checks only the last call of a sequence still learns
 * that a piece is missing. ferry_buf_reset, ferry_buf_release and ferry_buf_init start
 * over; ferry_buf_take of a failed buffer returns NULL. */
struct ferry_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
    int failed; /* FERRY_OK, or the code of the first failed call */
};
void ferry_buf_init(struct ferry_buf *b, size_t max);
FERRY_MUST_CHECK int ferry_buf_reserve(struct ferry_buf *b, size_t extra); /* FERRY_OK or FERRY_ENOMEM */
int ferry_buf_append(struct ferry_buf *b, const void *p, size_t n);
int ferry_buf_printf(struct ferry_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included. */
int ferry_buf_json_string(struct ferry_buf *b, const char *s, size_t n);
/* FERRY_OK, or the code of the call that failed since the last init/reset/release. */
int ferry_buf_failed(const struct ferry_buf *b);
void ferry_buf_reset(struct ferry_buf *b);   /* len = 0, keeps memory, clears a failure */
void ferry_buf_release(struct ferry_buf *b); /* frees; b may be reused after init */
/* Hands the NUL-terminated contents over to the caller; the buffer is left empty. NULL when
 * out of memory or when the buffer failed. */
char *ferry_buf_take(struct ferry_buf *b);

/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), used by version hashes and transforms. */
struct ferry_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t block[64];
    size_t fill;
};
void ferry_sha256_init(struct ferry_sha256 *s);
void ferry_sha256_update(struct ferry_sha256 *s, const void *p, size_t n);
void ferry_sha256_final(struct ferry_sha256 *s, uint8_t out[32]);
void ferry_sha256_hex(const void *p, size_t n, char out[65]);
void ferry_hmac_sha256(const void *key, size_t klen, const void *p, size_t n, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
