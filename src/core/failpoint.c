/* core/failpoint.c - named failure injection for fault tests (FERRY_FAILPOINTS).
 *
 * Owns the parsed failpoint table and its hit counters. Calls libc and ferry_log. Called
 * by the CLI at start (ferry_failpoints_init) and by engine code at the places named in
 * ferry/failpoint.h (through FERRY_FAILPOINT / ferry_failpoint_check).
 *
 * The table is a fixed array filled once by init, then only read, so evaluation takes no
 * lock; each entry's hit counter is atomic so "@N" means the Nth hit across all threads.
 * Several entries may name the same failpoint ("p=error@1,p=crash@3"): every matching
 * entry counts the hit, and the first one that fires decides the action. */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ferry/core.h"
#include "ferry/failpoint.h"

#define MAX_FAILPOINTS 32
#define MAX_NAME 64
#define MAX_SLEEP_MS 3600000L

enum kind { KIND_CRASH, KIND_ERROR, KIND_SLEEP, KIND_ENOSPC, KIND_BITFLIP };

struct failpoint {
    char name[MAX_NAME];
    enum kind kind;
    long sleep_ms;
    long nth;         /* 0: every hit */
    bool from_nth;    /* "@N+": every hit from the Nth on (a disk that stays broken) */
    atomic_long hits;
};

bool ferry__failpoints_on = false;
static struct failpoint table[MAX_FAILPOINTS];
static int n_table;

static const char *kind_name(enum kind k)
{
    switch (k) {
    case KIND_CRASH: return "crash";
    case KIND_ERROR: return "error";
    case KIND_SLEEP: return "sleep";
    case KIND_ENOSPC: return "enospc";
    case KIND_BITFLIP: return "bitflip";
    }
    return "?";
}

/* Decimal digits only, no sign, value in [min, max]. */
static bool parse_number(const char *s, size_t n, long min, long max, long *out)
{
    if (n == 0 || n > 10) return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max) return false;
    *out = v;
    return true;
}

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

static int bad(struct ferry_error *err, const char *entry, size_t n, const char *why)
{
    return ferry_error_set(err, FERRY_ECONFIG, "config", "FERRY_FAILPOINTS: bad entry \"%.*s\": %s",
                           (int)n, entry, why);
}

/* Parses one "name=action[@N]" (already trimmed) into *fp. */
static int parse_entry(const char *e, size_t n, struct failpoint *fp, struct ferry_error *err)
{
    const char *eq = memchr(e, '=', n);
    if (eq == NULL) return bad(err, e, n, "expected name=action");
    size_t name_len = (size_t)(eq - e);
    if (name_len == 0) return bad(err, e, n, "empty failpoint name");
    if (name_len >= MAX_NAME) return bad(err, e, n, "failpoint name longer than 63 bytes");
    for (size_t i = 0; i < name_len; i++)
        if (!name_char(e[i]))
            return bad(err, e, n, "failpoint name may hold only letters, digits, '_', '.', '-'");
    const char *act = eq + 1;
    size_t act_len = n - name_len - 1;

    fp->nth = 0;
    fp->from_nth = false;
    const char *at = memchr(act, '@', act_len);
    if (at != NULL) {
        size_t num_len = act_len - (size_t)(at - act) - 1;
        if (num_len > 0 && at[num_len] == '+') {
            fp->from_nth = true;
            num_len--;
        }
        if (!parse_number(at + 1, num_len, 1, 1000000000L, &fp->nth))
            return bad(err, e, n, "@N (or @N+) needs a hit number from 1 to 1000000000");
        act_len = (size_t)(at - act);
    }

    fp->sleep_ms = 0;
    if (act_len == 5 && memcmp(act, "crash", 5) == 0) {
        fp->kind = KIND_CRASH;
    } else if (act_len == 5 && memcmp(act, "error", 5) == 0) {
        fp->kind = KIND_ERROR;
    } else if (act_len == 6 && memcmp(act, "enospc", 6) == 0) {
        fp->kind = KIND_ENOSPC;
    } else if (act_len == 7 && memcmp(act, "bitflip", 7) == 0) {
        fp->kind = KIND_BITFLIP;
    } else if (act_len > 7 && memcmp(act, "sleep(", 6) == 0 && act[act_len - 1] == ')') {
        fp->kind = KIND_SLEEP;
        if (!parse_number(act + 6, act_len - 7, 0, MAX_SLEEP_MS, &fp->sleep_ms))
            return bad(err, e, n, "sleep(MS) needs milliseconds from 0 to 3600000");
    } else {
        return bad(err, e, n,
                   "unknown action (expected crash, error, sleep(MS), enospc or bitflip)");
    }
    memcpy(fp->name, e, name_len);
    fp->name[name_len] = '\0';
    atomic_init(&fp->hits, 0);
    return FERRY_OK;
}

int ferry_failpoints_init(struct ferry_error *err)
{
    ferry__failpoints_on = false;
    n_table = 0;
    const char *spec = getenv("FERRY_FAILPOINTS");
    if (spec == NULL) return FERRY_OK;

    struct failpoint parsed[MAX_FAILPOINTS];
    int n = 0;
    const char *p = spec;
    bool only_space = true;
    for (const char *q = spec; *q; q++)
        if (!isspace((unsigned char)*q)) only_space = false;
    if (only_space) return FERRY_OK; /* set but empty: same as unset */

    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        while (len > 0 && isspace((unsigned char)*s)) s++, len--;
        while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
        if (len == 0)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "FERRY_FAILPOINTS: empty entry in \"%s\"", spec);
        if (n == MAX_FAILPOINTS)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "FERRY_FAILPOINTS: more than %d entries", MAX_FAILPOINTS);
        int rc = parse_entry(s, len, &parsed[n], err);
        if (rc != FERRY_OK) return rc;
        n++;
        if (end == NULL) break;
        p = end + 1;
    }

    for (int i = 0; i < n; i++) {
        memcpy(table[i].name, parsed[i].name, sizeof table[i].name);
        table[i].kind = parsed[i].kind;
        table[i].sleep_ms = parsed[i].sleep_ms;
        table[i].nth = parsed[i].nth;
        table[i].from_nth = parsed[i].from_nth;
        atomic_init(&table[i].hits, 0);
    }
    n_table = n;
    ferry__failpoints_on = n > 0;
    return FERRY_OK;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

enum ferry_fp_action ferry__failpoint_eval(const char *name)
{
    const struct failpoint *fired = NULL;
    long fired_hit = 0;
    for (int i = 0; i < n_table; i++) {
        struct failpoint *fp = &table[i];
        if (strcmp(fp->name, name) != 0) continue;
        long hit = atomic_fetch_add(&fp->hits, 1) + 1;
        bool due = fp->nth == 0 || fp->nth == hit || (fp->from_nth && hit > fp->nth);
        if (fired == NULL && due) {
            fired = fp;
            fired_hit = hit;
        }
    }
    if (fired == NULL) return FERRY_FP_NONE;

    if (fired_hit == fired->nth || !fired->from_nth) /* "@N+" says so once */
        ferry_log(FERRY_LOG_WARN, "failpoint %s fired: %s (hit %ld%s)", name,
                  kind_name(fired->kind), fired_hit, fired->from_nth ? " and every later hit" : "");
    switch (fired->kind) {
    case KIND_CRASH: _exit(137);
    case KIND_SLEEP: sleep_ms(fired->sleep_ms); return FERRY_FP_NONE;
    case KIND_ERROR: return FERRY_FP_ERROR;
    case KIND_ENOSPC: return FERRY_FP_ENOSPC;
    case KIND_BITFLIP: return FERRY_FP_BITFLIP;
    }
    return FERRY_FP_NONE;
}

bool ferry_failpoint_armed(const char *name)
{
    for (int i = 0; i < n_table; i++)
        if (strcmp(table[i].name, name) == 0) return true;
    return false;
}

int ferry_failpoint_check(const char *name, struct ferry_error *err)
{
    switch (FERRY_FAILPOINT(name)) {
    case FERRY_FP_ERROR:
        return ferry_error_set(err, FERRY_EFAILPOINT, "failpoint",
                               "failpoint %s: injected error", name);
    case FERRY_FP_ENOSPC:
        return ferry_error_set(err, FERRY_ENOSPC, "failpoint",
                               "failpoint %s: No space left on device", name);
    default:
        return FERRY_OK;
    }
}
