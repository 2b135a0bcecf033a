/* control/scheduler.c - cron schedules of pipelines (control/control.h).
 *
 * Owns the cron parser (five fields, numbers, lists, ranges, steps), the search for the
 * next matching minute in a time zone, and the scheduler pass. Time zones come from the
 * system's tzdata through TZ + localtime_r/mktime; TZ is process-wide, so every use here
 * holds one lock and puts the previous value back (the rest of ferry formats times in UTC).
 * A firing requests a run with the idempotency key "schedule-ID-TIME", so two schedulers on
 * one state file, or a crash between the request and the record of the firing, never start
 * the same firing twice. Missed firings (server down) are not caught up: the next one is
 * computed from now. Overlap policy when the pipeline already has an unfinished run: skip
 * (record the firing, start nothing), queue (wait, fire as soon as it is done) or allow
 * (start another). Calls the store and the dispatcher's ferry_control_request_run. Called by
 * the scheduler thread (dispatcher.c) and the server (validation, next time). */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "control/control.h"
#include "core/bytes.h"
#include "ferry/core.h"
#include "store/store.h"

struct ferry_cron {
    uint64_t minute; /* bit n: minute n matches */
    uint32_t hour;
    uint32_t dom;   /* bits 1..31 */
    uint16_t month; /* bits 1..12 */
    uint8_t dow;    /* bits 0..6, Sunday 0 (7 accepted as Sunday) */
    bool dom_any, dow_any;
};

static const char *const field_names[] = {"minute", "hour", "day of month", "month", "day of week"};
static const int field_lo[] = {0, 0, 1, 1, 0};
static const int field_hi[] = {59, 23, 31, 12, 7};

static int parse_num(const char **p, int *out)
{
    if (!isdigit((unsigned char)**p)) return -1;
    int v = 0;
    while (isdigit((unsigned char)**p)) {
        v = v * 10 + (**p - '0');
        if (v > 1000) return -1;
        (*p)++;
    }
    *out = v;
    return 0;
}

static int parse_field(const char *text, int f, uint64_t *bits, bool *any, struct ferry_error *err)
{
    *bits = 0;
    *any = strcmp(text, "*") == 0;
    const char *p = text;
    int lo = field_lo[f], hi = field_hi[f];
    for (;;) {
        int a, b, step = 1;
        if (*p == '*') {
            a = lo;
            b = hi;
            p++;
        } else {
            if (parse_num(&p, &a) != 0) goto bad;
            b = a;
            if (*p == '-') {
                p++;
                if (parse_num(&p, &b) != 0) goto bad;
            }
        }
        if (*p == '/') {
            p++;
            if (parse_num(&p, &step) != 0 || step < 1) goto bad;
            if (b == a && text[0] != '*') b = hi; /* "5/15" means 5-59/15 */
        }
        if (a < lo || b > hi || a > b) goto bad;
        for (int v = a; v <= b; v += step)
            *bits |= UINT64_C(1) << v;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '\0') break;
        goto bad;
    }
    return FERRY_OK;
bad:
    return ferry_error_set(err, FERRY_EINVAL, "cron",
                           "cron: %s field \"%s\" is not valid (numbers %d-%d, *, a-b, a,b, */n)",
                           field_names[f], text, lo, hi);
}

int ferry_cron_parse(const char *expr, struct ferry_cron **out, struct ferry_error *err)
{
    *out = NULL;
    char buf[128];
    if (expr == NULL || strlen(expr) >= sizeof buf)
        return ferry_error_set(err, FERRY_EINVAL, "cron", "cron: expression missing or too long");
    snprintf(buf, sizeof buf, "%s", expr);
    char *fields[6];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (n == 5)
            return ferry_error_set(err, FERRY_EINVAL, "cron",
                                   "cron: \"%s\" has more than five fields", expr);
        fields[n++] = t;
    }
    if (n != 5)
        return ferry_error_set(err, FERRY_EINVAL, "cron",
                               "cron: \"%s\" needs five fields (minute hour day-of-month month"
                               " day-of-week)",
                               expr);
    struct ferry_cron *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) return ferry_error_set(err, FERRY_ENOMEM, "cron", "out of memory");
    uint64_t bits[5];
    bool any[5];
    for (int i = 0; i < 5; i++) {
        int rc = parse_field(fields[i], i, &bits[i], &any[i], err);
        if (rc != FERRY_OK) {
            ferry_free(c);
            return rc;
        }
    }
    c->minute = bits[0];
    c->hour = (uint32_t)bits[1];
    c->dom = (uint32_t)bits[2];
    c->month = (uint16_t)bits[3];
    c->dow = (uint8_t)((bits[4] & 0x7f) | ((bits[4] >> 7) & 1)); /* 7 is Sunday too */
    c->dom_any = any[2];
    c->dow_any = any[4];
    *out = c;
    return FERRY_OK;
}

void ferry_cron_free(struct ferry_cron *c)
{
    ferry_free(c);
}

bool ferry_timezone_valid(const char *tz)
{
    if (tz == NULL || tz[0] == '\0' || strcmp(tz, "UTC") == 0) return true;
    if (tz[0] == '/' || strstr(tz, "..") || strlen(tz) > 60) return false;
    for (const char *p = tz; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("/_-+", *p)) return false;
    char path[128];
    snprintf(path, sizeof path, "/usr/share/zoneinfo/%s", tz);
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---- time zones without TZ ----
 * The process's environment is never edited after start (other threads read it): a zone's
 * offsets come from its TZif file (RFC 8536, the 64-bit part of version 2+), read per call.
 * Debian's files are "fat" (transitions written out to 2037); past the last transition the
 * last offset holds. */

struct zone {
    int64_t *at;      /* transition times (UTC seconds) */
    unsigned char *type;
    int32_t *utoff;   /* per local time type */
    uint32_t n_at, n_types;
};

static void zone_free(struct zone *z)
{
    ferry_free(z->at);
    ferry_free(z->type);
    ferry_free(z->utoff);
    memset(z, 0, sizeof *z);
}

/* UTC (tz "" or "UTC") is a zone with no transitions and offset 0. */
static int zone_load(const char *tz, struct zone *z)
{
    memset(z, 0, sizeof *z);
    if (tz == NULL || tz[0] == '\0' || !strcmp(tz, "UTC")) {
        z->utoff = ferry_calloc(1, sizeof *z->utoff);
        z->n_types = 1;
        return z->utoff ? 0 : -1;
    }
    char path[128];
    snprintf(path, sizeof path, "/usr/share/zoneinfo/%s", tz);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    unsigned char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* header: "TZif", version, 15 reserved, six counts */
    if (len < 44 || memcmp(buf, "TZif", 4) != 0) return -1;
    size_t off = 0;
    int tsize = 4;
    for (int pass = 0; pass < 2; pass++) {
        if (off + 44 > len) return -1;
        const unsigned char *h = buf + off;
        uint32_t isut = ferry__be32(h + 20), isstd = ferry__be32(h + 24),
                 leap = ferry__be32(h + 28), timecnt = ferry__be32(h + 32),
                 typecnt = ferry__be32(h + 36), charcnt = ferry__be32(h + 40);
        size_t body = (size_t)timecnt * (size_t)tsize + timecnt + (size_t)typecnt * 6 + charcnt +
                      (size_t)leap * (size_t)(tsize + 4) + isstd + isut;
        if (typecnt == 0 || off + 44 + body > len) return -1;
        if (pass == 0 && h[4] >= '2') { /* skip the 32-bit part: read the 64-bit one */
            off += 44 + body;
            tsize = 8;
            continue;
        }
        const unsigned char *p = h + 44;
        z->at = ferry_calloc(timecnt ? timecnt : 1, sizeof *z->at);
        z->type = ferry_calloc(timecnt ? timecnt : 1, 1);
        z->utoff = ferry_calloc(typecnt, sizeof *z->utoff);
        if (!z->at || !z->type || !z->utoff) {
            zone_free(z);
            return -1;
        }
        for (uint32_t i = 0; i < timecnt; i++, p += tsize)
            z->at[i] = tsize == 8 ? (int64_t)((uint64_t)ferry__be32(p) << 32 | ferry__be32(p + 4))
                                  : (int64_t)(int32_t)ferry__be32(p);
        for (uint32_t i = 0; i < timecnt; i++, p++)
            z->type[i] = *p < typecnt ? *p : 0;
        for (uint32_t i = 0; i < typecnt; i++, p += 6)
            z->utoff[i] = (int32_t)ferry__be32(p);
        z->n_at = timecnt;
        z->n_types = typecnt;
        return 0;
    }
    return -1;
}

/* The UTC offset in force at UTC time t. */
static int32_t zone_offset(const struct zone *z, int64_t t)
{
    if (z->n_at == 0 || t < z->at[0]) return z->utoff[0];
    uint32_t lo = 0, hi = z->n_at; /* last transition <= t */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t) lo = mid;
        else hi = mid;
    }
    return z->utoff[z->type[lo]];
}

static void zone_localtime(const struct zone *z, time_t t, struct tm *tm)
{
    time_t l = t + zone_offset(z, t);
    gmtime_r(&l, tm);
}

/* mktime in the zone: normalizes tm's fields, returns the UTC time of that local time (in a
 * DST gap, a time near it; the caller only moves forward). */
static time_t zone_mktime(const struct zone *z, struct tm *tm)
{
    time_t l = timegm(tm);
    time_t t = l - zone_offset(z, l);
    if (t + zone_offset(z, t) != l) t = l - zone_offset(z, t);
    return t;
}

static bool day_matches(const struct ferry_cron *c, const struct tm *tm)
{
    bool dom = (c->dom >> tm->tm_mday) & 1, dow = (c->dow >> tm->tm_wday) & 1;
    if (c->dom_any || c->dow_any) return dom && dow;
    return dom || dow; /* both restricted: either one (as cron does) */
}

int ferry_cron_next(const struct ferry_cron *c, const char *tz, int64_t after_us, int64_t *next_us,
                    struct ferry_error *err)
{
    struct zone z;
    if (!ferry_timezone_valid(tz) || zone_load(tz, &z) != 0)
        return ferry_error_set(err, FERRY_EINVAL, "cron", "time zone \"%s\" is not known here",
                               tz ? tz : "");
    time_t t = (time_t)(after_us / 1000000);
    t = t - t % 60 + 60; /* strictly after, on a minute */
    time_t limit = t + (time_t)5 * 366 * 86400;
    bool found = false;
    while (t < limit) {
        struct tm tm;
        zone_localtime(&z, t, &tm);
        if (!((c->month >> (tm.tm_mon + 1)) & 1)) {
            tm.tm_mon++, tm.tm_mday = 1, tm.tm_hour = 0, tm.tm_min = 0, tm.tm_sec = 0;
        } else if (!day_matches(c, &tm)) {
            tm.tm_mday++, tm.tm_hour = 0, tm.tm_min = 0, tm.tm_sec = 0;
        } else if (!((c->hour >> tm.tm_hour) & 1)) {
            tm.tm_hour++, tm.tm_min = 0, tm.tm_sec = 0;
        } else if (!((c->minute >> tm.tm_min) & 1)) {
            tm.tm_min++, tm.tm_sec = 0;
        } else {
            found = true;
            break;
        }
        time_t nt = zone_mktime(&z, &tm);
        /* A DST gap can map a local time back onto the past: always move forward. */
        t = nt > t ? nt : t + 60;
    }
    zone_free(&z);
    if (!found)
        return ferry_error_set(err, FERRY_ENOTFOUND, "cron",
                               "cron: no matching time within five years");
    *next_us = (int64_t)t * 1000000;
    return FERRY_OK;
}

/* ---- the scheduler pass ---- */

static bool pipeline_busy(struct ferry_store *st, const char *pipeline)
{
    struct ferry_run_info *v = NULL;
    int n = 0;
    bool busy = false;
    if (ferry_store_run_list_filtered(st, pipeline, -1, 0, 20, &v, &n, NULL) == FERRY_OK)
        for (int i = 0; i < n; i++)
            if (!ferry_run_state_is_final(v[i].state)) busy = true;
    ferry_run_infos_free(v, n);
    return busy;
}

static int next_after(const struct ferry_schedule *s, int64_t after, int64_t *next,
                      struct ferry_error *err)
{
    struct ferry_cron *c = NULL;
    int rc = ferry_cron_parse(s->cron, &c, err);
    if (rc == FERRY_OK) rc = ferry_cron_next(c, s->timezone, after, next, err);
    ferry_cron_free(c);
    return rc;
}

int ferry_scheduler_tick(struct ferry_store *st, struct ferry_bus *bus, int64_t now_us, int *fired,
                         struct ferry_error *err)
{
    *fired = 0;
    struct ferry_schedule *v = NULL;
    int n = 0;
    int rc = ferry_store_schedule_list(st, NULL, &v, &n, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < n; i++) {
        struct ferry_schedule *s = &v[i];
        struct ferry_error e;
        int64_t next = 0;
        if (!s->enabled) continue;
        if (s->next_us == 0) {
            if (next_after(s, now_us, &next, &e) == FERRY_OK)
                ferry_store_schedule_fired(st, s->id, next, s->last_us, 0, NULL);
            continue;
        }
        if (s->next_us > now_us) continue;
        bool busy = strcmp(s->overlap, "allow") != 0 && pipeline_busy(st, s->pipeline);
        if (busy && strcmp(s->overlap, "queue") == 0) continue; /* due; fires once free */
        int64_t run_id = 0;
        if (!busy) {
            char key[96], trigger[48];
            snprintf(key, sizeof key, "schedule-%" PRId64 "-%" PRId64, s->id, s->next_us);
            snprintf(trigger, sizeof trigger, "schedule:%" PRId64, s->id);
            bool existed = false;
            if (ferry_control_request_run(st, bus, s->pipeline, trigger, key, &run_id, &existed,
                                          &e) != FERRY_OK) {
                ferry_log(FERRY_LOG_WARN, "schedule %" PRId64 ": %s", s->id, e.message);
                run_id = 0;
            } else if (!existed) {
                (*fired)++;
            }
        } else {
            ferry_log(FERRY_LOG_INFO,
                      "schedule %" PRId64 ": pipeline %s still has a run in"
                      " progress; this firing is skipped (overlap: skip)",
                      s->id, s->pipeline);
        }
        if (next_after(s, now_us, &next, &e) != FERRY_OK) next = INT64_MAX;
        ferry_store_schedule_fired(st, s->id, next, now_us, run_id, NULL);
    }
    ferry_free(v);
    return FERRY_OK;
}
