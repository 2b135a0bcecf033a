/* core/error.c - the one error type: set, prefix with context, map to exit statuses. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/check.h"
#include "ferry/error.h"

int ferry_error_set(struct ferry_error *err, int code, const char *origin, const char *fmt, ...)
{
    if (err == NULL) return code;
    err->code = code;
    err->transient = false;
    snprintf(err->origin, sizeof err->origin, "%s", origin ? origin : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

int ferry_error_prefix(struct ferry_error *err, const char *fmt, ...)
{
    /* Called on a failure path: never turn it into a success, even without an error
     * struct to read the code from. */
    if (err == NULL) return FERRY_EINVAL;
    if (err->code == FERRY_OK) err->code = FERRY_EINVAL;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[FERRY_ERROR_MESSAGE_MAX];
    memcpy(old, err->message, sizeof old);
    snprintf(err->message, sizeof err->message, "%s: %s", prefix, old);
    return err->code;
}

_Noreturn void ferry__assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "ferry: internal invariant broken: %s (%s:%d, %s)\n", expr, file, line, func);
    fflush(stderr);
    abort();
}

void ferry_error_clear(struct ferry_error *err)
{
    if (err == NULL) return;
    err->code = FERRY_OK;
    err->origin[0] = '\0';
    err->message[0] = '\0';
    err->transient = false;
}

int ferry_error_set_transient(struct ferry_error *err)
{
    if (err == NULL) return FERRY_OK;
    err->transient = true;
    return err->code;
}

static bool permanent_code(int code)
{
    switch (code) {
    case FERRY_OK:
    case FERRY_EINVAL:
    case FERRY_ECONFIG:
    case FERRY_ENOTFOUND:
    case FERRY_EPOLICY:
    case FERRY_EINTEGRITY:
    case FERRY_ECANCELED:
    case FERRY_EPAUSED:
    case FERRY_EFENCED:
    case FERRY_EUNSUPPORTED:
        return true;
    default:
        return false;
    }
}

bool ferry_error_is_transient(const struct ferry_error *err)
{
    if (err == NULL || permanent_code(err->code)) return false;
    if (err->transient || err->code == FERRY_ETIMEOUT) return true;
    /* "http 503", "http 429": origins that carry a status */
    if (strncmp(err->origin, "http ", 5) == 0) {
        long st = strtol(err->origin + 5, NULL, 10);
        return st == 429 || (st >= 500 && st <= 599);
    }
    return false;
}

static const char *const code_names[FERRY_CODE_MAX] = {
    [FERRY_OK] = "ok",
    [FERRY_EINVAL] = "invalid",
    [FERRY_ENOMEM] = "out_of_memory",
    [FERRY_EIO] = "io",
    [FERRY_ECONFIG] = "config",
    [FERRY_ENOTFOUND] = "not_found",
    [FERRY_EPOLICY] = "policy",
    [FERRY_EINTEGRITY] = "integrity",
    [FERRY_ECANCELED] = "canceled",
    [FERRY_EPAUSED] = "paused",
    [FERRY_ESOURCE] = "source",
    [FERRY_ESINK] = "sink",
    [FERRY_ESTORE] = "store",
    [FERRY_EFENCED] = "fenced",
    [FERRY_EFAILPOINT] = "failpoint",
    [FERRY_ETIMEOUT] = "timeout",
    [FERRY_EUNSUPPORTED] = "unsupported",
    [FERRY_ECONFLICT] = "conflict",
    [FERRY_ENOSPC] = "no_space",
};

const char *ferry_code_name(int code)
{
    if (code < 0 || code >= FERRY_CODE_MAX || code_names[code] == NULL) return "unknown";
    return code_names[code];
}

/* Exit statuses (docs/cli.md): 0 ok, 1 failure, 2 usage/config, 3 policy refusal,
 * 4 integrity divergence, 5 paused, 6 canceled, 7 not found. */
int ferry_code_exit_status(int code)
{
    switch (code) {
    case FERRY_OK: return 0;
    case FERRY_ECONFIG: return 2;
    case FERRY_EPOLICY: return 3;
    case FERRY_EINTEGRITY: return 4;
    case FERRY_EPAUSED: return 5;
    case FERRY_ECANCELED: return 6;
    case FERRY_ENOTFOUND: return 7;
    default: return 1;
    }
}
