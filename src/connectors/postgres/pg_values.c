/* connectors/postgres/pg_values.c - special values in pgoutput's text, and change errors
 * naming the row's key (pg_values.h). Calls the row writer and core only. */
#include <stdio.h>
#include <string.h>
#include "connectors/postgres/pg_values.h"
#include "ferry/connector.h"
#include "ferry/core.h"

static bool is(const uint8_t *p, size_t n, const char *word)
{
    return n == strlen(word) && memcmp(p, word, n) == 0;
}

int ferry__pg_text_special(const struct ferry_field *f, const uint8_t *p, size_t n,
                           bool specials, struct ferry_row_writer *rw, const char **cls)
{
    bool pinf = is(p, n, "infinity"), ninf = is(p, n, "-infinity");
    switch (f->type) {
    case FERRY_TYPE_DATE32:
        if (!pinf && !ninf) return 0;
        *cls = pinf ? "date infinity" : "date -infinity";
        if (!specials) return -1;
        ferry_rw_int(rw, pinf ? FERRY_SPECIAL_DATE_PINF : FERRY_SPECIAL_DATE_NINF);
        return 1;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (!pinf && !ninf) return 0;
        *cls = pinf ? "timestamp infinity" : "timestamp -infinity";
        if (!specials) return -1;
        ferry_rw_int(rw, pinf ? FERRY_SPECIAL_TS_PINF : FERRY_SPECIAL_TS_NINF);
        return 1;
    case FERRY_TYPE_DECIMAL128:
        if (!is(p, n, "NaN")) return 0;
        *cls = "numeric NaN";
        if (!specials) return -1;
        ferry_rw_dec128(rw, (struct ferry_decimal128){.hi = FERRY_SPECIAL_DEC_NAN_HI,
                                                      .lo = FERRY_SPECIAL_DEC_NAN_LO});
        return 1;
    default: return 0;
    }
}

/* The key as `(col)=(text)` pairs, like PostgreSQL's own key messages; each text cut at 60
 * bytes. */
static void key_text(const struct ferry_schema *sc, const int *map,
                     const struct ferry_pg_repl_tuple *tp, struct ferry_buf *b)
{
    for (int k = 0; k < sc->n_key; k++) {
        int f = sc->key[k];
        int idx = map ? map[f] : -1;
        const struct ferry_pg_repl_value *v = idx >= 0 && idx < tp->n ? &tp->values[idx] : NULL;
        ferry_buf_printf(b, "%s%s=", k ? ", " : "", sc->fields[f].name);
        if (v == NULL || v->kind != 't')
            ferry_buf_append(b, v && v->kind == 'n' ? "NULL" : "?", v && v->kind == 'n' ? 4 : 1);
        else
            ferry_buf_printf(b, "%.*s%s", (int)(v->len > 60 ? 60 : v->len),
                             (const char *)v->data, v->len > 60 ? "..." : "");
    }
}

int ferry__pg_change_value_error(const char *what, const char *from, const struct ferry_schema *sc,
                                 const int *map, const struct ferry_pg_repl_tuple *tp, int col,
                                 const char *why, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (sc->n_key > 0)
        key_text(sc, map, tp, &b);
    else
        ferry_buf_printf(&b, "(no key)");
    int rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                             "%s: table %s: column \"%s\", the row with key %s: %s", what, from,
                             sc->fields[col].name, b.data ? b.data : "?", why);
    ferry_buf_release(&b);
    return rc;
}

/* ---- dates and timestamps beyond years 0001..9999 ---- */

/* Days from 1970-01-01 to the proleptic Gregorian y-m-d (y astronomical: 1 BC is 0), by
 * counting 400-year eras of 146097 days from 0000-03-01. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static bool digits(const char *s, size_t n, size_t *i, int min, int max, int64_t *v)
{
    int k = 0;
    *v = 0;
    while (*i < n && k < max && s[*i] >= '0' && s[*i] <= '9') {
        *v = *v * 10 + (s[*i] - '0');
        (*i)++;
        k++;
    }
    return k >= min;
}

/* "Y...Y-MM-DD" at s[*i]: *days (BC applied later by the caller through *y). */
static bool civil_date(const char *s, size_t n, size_t *i, int64_t *y, int *m, int *d)
{
    int64_t yy, mm, dd;
    if (!digits(s, n, i, 4, 9, &yy) || *i >= n || s[(*i)++] != '-' ||
        !digits(s, n, i, 2, 2, &mm) || *i >= n || s[(*i)++] != '-' || !digits(s, n, i, 2, 2, &dd))
        return false;
    *y = yy;
    *m = (int)mm;
    *d = (int)dd;
    return yy >= 1 && mm >= 1 && mm <= 12 && dd >= 1;
}

static bool day_ok(int64_t y, int m, int d)
{
    static const int len[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return d <= len[m - 1] + (m == 2 && leap(y));
}

static bool bc_suffix(const char *s, size_t n, size_t *i)
{
    if (n - *i == 3 && !memcmp(s + *i, " BC", 3)) {
        *i = n;
        return true;
    }
    return false;
}

int ferry__pg_date_text(const char *s, size_t n, int32_t *out)
{
    size_t i = 0;
    int64_t y;
    int m, d;
    if (!civil_date(s, n, &i, &y, &m, &d)) return FERRY_EINVAL;
    if (bc_suffix(s, n, &i)) y = 1 - y;
    if (i != n || !day_ok(y, m, d)) return FERRY_EINVAL;
    int64_t days = days_from_civil(y, m, d);
    /* INT32_MIN/MAX are the special ±infinity */
    if (days <= INT32_MIN || days >= INT32_MAX) return FERRY_EUNSUPPORTED;
    *out = (int32_t)days;
    return FERRY_OK;
}

/* " HH:MM:SS[.ffffff]" at s[*i] into microseconds of the day */
static bool time_of_day(const char *s, size_t n, size_t *i, int64_t *us)
{
    int64_t h, mi, se, f = 0;
    if (*i >= n || s[(*i)++] != ' ' || !digits(s, n, i, 2, 2, &h) || *i >= n ||
        s[(*i)++] != ':' || !digits(s, n, i, 2, 2, &mi) || *i >= n || s[(*i)++] != ':' ||
        !digits(s, n, i, 2, 2, &se))
        return false;
    if (*i < n && s[*i] == '.') {
        (*i)++;
        size_t at = *i;
        if (!digits(s, n, i, 1, 6, &f)) return false;
        for (size_t k = *i - at; k < 6; k++)
            f *= 10;
    }
    if (h > 24 || mi > 59 || se > 60) return false;
    *us = ((h * 60 + mi) * 60 + se) * 1000000 + f;
    return true;
}

/* "+HH[:MM[:SS]]" or "-..." at s[*i] into seconds east of UTC */
static bool offset(const char *s, size_t n, size_t *i, int64_t *secs)
{
    *secs = 0;
    if (*i >= n || (s[*i] != '+' && s[*i] != '-')) return true;
    int sign = s[(*i)++] == '-' ? -1 : 1;
    int64_t h, m = 0, se = 0;
    if (!digits(s, n, i, 2, 2, &h)) return false;
    if (*i < n && s[*i] == ':') {
        (*i)++;
        if (!digits(s, n, i, 2, 2, &m)) return false;
        if (*i < n && s[*i] == ':') {
            (*i)++;
            if (!digits(s, n, i, 2, 2, &se)) return false;
        }
    }
    *secs = sign * ((h * 60 + m) * 60 + se);
    return true;
}

int ferry__pg_timestamp_text(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int64_t y, tod, off;
    int m, d;
    if (!civil_date(s, n, &i, &y, &m, &d) || !time_of_day(s, n, &i, &tod) ||
        !offset(s, n, &i, &off))
        return FERRY_EINVAL;
    if (bc_suffix(s, n, &i)) y = 1 - y;
    if (i != n || !day_ok(y, m, d)) return FERRY_EINVAL;
    int64_t day_us, us;
    /* past about ±292277 years microseconds overflow; INT64_MIN/MAX are ±infinity */
    if (__builtin_mul_overflow(days_from_civil(y, m, d), INT64_C(86400000000), &day_us) ||
        __builtin_add_overflow(day_us, tod - off * 1000000, &us) || us == INT64_MAX ||
        us == INT64_MIN)
        return FERRY_EUNSUPPORTED;
    *out = us;
    return FERRY_OK;
}
