/* ferry/error.h - the one error type of the engine.
 *
 * Every fallible function returns an int that is FERRY_OK (0) or one of the codes
 * below, and takes an optional `struct ferry_error *err` last. The message names the
 * resource, batch, file, host or config key involved. Context is added on the way up
 * with ferry_error_prefix(); only the layer that handles an error logs it, once.
 * Messages never contain secrets: code that formats a connection string or a value
 * read through env:/file: must redact it first. */
#ifndef FERRY_ERROR_H
#define FERRY_ERROR_H

#include <stdbool.h>
#include <stddef.h>

/* On a fallible function: the compiler warns when its result is ignored. */
#if defined(__GNUC__) || defined(__clang__)
#define FERRY_MUST_CHECK __attribute__((warn_unused_result))
#else
#define FERRY_MUST_CHECK
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_code {
    FERRY_OK = 0,
    FERRY_EINVAL,      /* bad argument or bad data */
    FERRY_ENOMEM,      /* allocation failed or a buffer reached its hard cap */
    FERRY_EIO,         /* file system or network I/O */
    FERRY_ECONFIG,     /* pipeline file or flag */
    FERRY_ENOTFOUND,   /* table, file, run, pipeline missing */
    FERRY_EPOLICY,     /* read mode and sink capabilities cannot be combined correctly */
    FERRY_EINTEGRITY,  /* digest mismatch */
    FERRY_ECANCELED,   /* the run was canceled */
    FERRY_EPAUSED,     /* the run was paused: stop extracting, drain, commit */
    FERRY_ESOURCE,     /* the source failed */
    FERRY_ESINK,       /* the sink failed */
    FERRY_ESTORE,      /* the state store failed */
    FERRY_EFENCED,     /* this attempt lost its lease: its writes are refused */
    FERRY_EFAILPOINT,  /* a failpoint injected an error */
    FERRY_ETIMEOUT,
    FERRY_EUNSUPPORTED,
    FERRY_ECONFLICT,   /* someone else changed it first */
    FERRY_ENOSPC,      /* no space left on a device */
    FERRY_CODE_MAX
};

#define FERRY_ERROR_MESSAGE_MAX 1024

struct ferry_error {
    int code;                               /* enum ferry_code */
    char origin[24];                        /* "sqlite", "libpq", "http 503", "config"... */
    char message[FERRY_ERROR_MESSAGE_MAX];
    bool transient;                         /* set where the error is made: retrying the
                                             * same work may succeed (ferry_error_is_transient) */
};

/* Sets *err (when err is not NULL) and returns code. printf-style message. */
int ferry_error_set(struct ferry_error *err, int code, const char *origin, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Adds context in front of the current message: "resource orders: <old message>".
 * Called on a failure path only, and never returns FERRY_OK: it returns err->code, or
 * FERRY_EINVAL when err is NULL or holds no failure (which it then records). Callers that
 * know the code should return it rather than this value. */
int ferry_error_prefix(struct ferry_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void ferry_error_clear(struct ferry_error *err);

/* Classification for retries (docs/operations.md, retries). The layer that makes an error
 * knows whether trying again may help: a refused or reset connection, a server restarting,
 * a timeout, a serialization failure, HTTP 5xx or 429. It says so with
 * ferry_error_set_transient() right after ferry_error_set() (which clears the mark).
 * Returns err->code (FERRY_OK when err is NULL). */
int ferry_error_set_transient(struct ferry_error *err);

/* Whether a failed attempt may be retried: marked transient, or a timeout, or an HTTP
 * origin with status 5xx or 429 - and never a permanent code (config, policy, integrity,
 * not found, unsupported, paused, canceled, fenced), whatever the mark says. */
bool ferry_error_is_transient(const struct ferry_error *err);

/* Stable lower-case name of a code ("config", "integrity"...), used in JSON and exit. */
const char *ferry_code_name(int code);

/* Process exit status for a code (documented in docs/cli.md). */
int ferry_code_exit_status(int code);

#ifdef __cplusplus
}
#endif
#endif
