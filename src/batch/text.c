/* batch/text.c - the text forms of values: decimal128, date32, time64, timestamps, uuid.
 *
 * Owns nothing; allocates nothing. Calls only libc. Called by sources that read text
 * (CSV, JSONL, SQLite), sinks that write text (COPY, CSV, SQL literals), transforms that
 * hash values, the row writer (position keys) and the CLI. Every function is pure and
 * thread-safe.
 *
 * Forms (what *_to_text writes and *_from_text accepts at least):
 *   decimal128  -12.3400 (exactly `scale` fraction digits; negative scale appends zeros)
 *   date32      2024-01-31           proleptic Gregorian, years 0001..9999
 *   time64      13:45:00[.123456]    fraction only when non-zero, trailing zeros trimmed
 *   timestamp   2024-01-31T13:45:00[.5][+00]   "+00" for timestamptz (values are UTC)
 *   uuid        123e4567-e89b-12d3-a456-426614174000 (lowercase)
 * Parsing also accepts: decimals with '+', a leading '.', an exponent ("1.5e3");
 * timestamps with ' ' instead of 'T', no seconds, a date alone, a fraction of 1..6
 * digits, and a 'Z', +HH, +HHMM or +HH:MM offset (converted to UTC); uuids without
 * hyphens, in upper case or in braces. A value outside what the form covers (a year
 * outside 1..9999, a decimal wider than its precision) is FERRY_EINVAL when parsing and
 * -1 when formatting; so is a buffer too small. The date arithmetic is the closed-form
 * conversion between civil dates and day numbers over 400-year eras (146097 days). */
#include <string.h>
#include "ferry/batch.h"

__extension__ typedef unsigned __int128 u128;

#define US_PER_SEC INT64_C(1000000)
#define US_PER_DAY INT64_C(86400000000)
#define MIN_DAY INT64_C(-719162) /* 0001-01-01 */
#define MAX_DAY INT64_C(2932896) /* 9999-12-31 */

/* ---- small helpers ---- */

static inline bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Exactly n digits at s into *out. */
static bool read_digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static inline void put2(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

static inline void put4(char *p, unsigned v)
{
    put2(p, v / 100);
    put2(p + 2, v % 100);
}

static inline int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* ---- calendar ---- */

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;                                   /* 0..399 */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* 0..365, from March */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* 0..146096 */
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static int days_in_month(int y, int m)
{
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return dm[m - 1];
}

/* ---- decimal128 ---- */

static u128 dec_to_u128(struct ferry_decimal128 v)
{
    return ((u128)(uint64_t)v.hi << 64) | v.lo;
}

static struct ferry_decimal128 dec_from_u128(u128 u)
{
    struct ferry_decimal128 v = {(uint64_t)u, (int64_t)(uint64_t)(u >> 64)};
    return v;
}

/* Decimal digits of u, most significant first, into d (>= 39 bytes); returns the count
 * (0 for zero). Splits into base-10^19 chunks so that most divisions are 64-bit. */
static int u128_digits(u128 u, char *d)
{
    const uint64_t e19 = UINT64_C(10000000000000000000);
    uint64_t chunk[3];
    int nc = 0;
    while (u != 0) {
        chunk[nc++] = (uint64_t)(u % e19);
        u /= e19;
    }
    int n = 0;
    for (int c = nc - 1; c >= 0; c--) {
        char tmp[20];
        int k = 0;
        uint64_t x = chunk[c];
        do {
            tmp[k++] = (char)('0' + x % 10);
            x /= 10;
        } while (x != 0);
        if (c != nc - 1)
            while (k < 19)
                tmp[k++] = '0';
        while (k > 0)
            d[n++] = tmp[--k];
    }
    return n;
}

int ferry_decimal128_to_text(struct ferry_decimal128 v, int scale, char *buf, size_t len)
{
    bool neg = v.hi < 0;
    u128 u = dec_to_u128(v);
    if (neg) u = -u; /* two's complement magnitude; also right for the most negative value */
    char d[40];
    int nd = u128_digits(u, d);
    if (nd == 0) {
        d[0] = '0';
        nd = 1;
        neg = false;
    }
    size_t need;
    if (scale <= 0)
        need = (size_t)neg + (size_t)nd + (u != 0 ? (size_t)-scale : 0);
    else
        need = (size_t)neg + (size_t)(nd > scale ? nd : scale + 1) + 1;
    if (buf == NULL || need + 1 > len) {
        if (buf != NULL && len > 0) buf[0] = '\0';
        return -1;
    }
    char *p = buf;
    if (neg) *p++ = '-';
    if (scale <= 0) {
        memcpy(p, d, (size_t)nd);
        p += nd;
        if (u != 0)
            for (int i = 0; i < -scale; i++)
                *p++ = '0';
    } else if (nd > scale) {
        memcpy(p, d, (size_t)(nd - scale));
        p += nd - scale;
        *p++ = '.';
        memcpy(p, d + nd - scale, (size_t)scale);
        p += scale;
    } else {
        *p++ = '0';
        *p++ = '.';
        for (int i = 0; i < scale - nd; i++)
            *p++ = '0';
        memcpy(p, d, (size_t)nd);
        p += nd;
    }
    *p = '\0';
    return (int)(p - buf);
}

int ferry_decimal128_from_text(const char *s, size_t n, int precision, int scale,
                               struct ferry_decimal128 *out)
{
    if (s == NULL || precision < 1 || precision > 38 || scale < -precision || scale > precision)
        return FERRY_EINVAL;
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    size_t int_start = i;
    while (i < n && is_digit(s[i]))
        i++;
    size_t int_end = i, frac_start = i, frac_end = i;
    if (i < n && s[i] == '.') {
        frac_start = ++i;
        while (i < n && is_digit(s[i]))
            i++;
        frac_end = i;
    }
    size_t n_int = int_end - int_start, n_frac = frac_end - frac_start;
    if (n_int + n_frac == 0) return FERRY_EINVAL;
    int64_t exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool eneg = false;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
        if (i >= n || !is_digit(s[i])) return FERRY_EINVAL;
        while (i < n && is_digit(s[i])) {
            exp = exp * 10 + (s[i++] - '0');
            if (exp > 100000) return FERRY_EINVAL;
        }
        if (eneg) exp = -exp;
    }
    if (i != n) return FERRY_EINVAL;

    /* The digits of int||frac read as one integer D; value = D * 10^(exp - n_frac), and
     * the unscaled integer we store is value * 10^scale = D * 10^k. */
    size_t nd = n_int + n_frac;
#define DIGIT(j) ((j) < n_int ? s[int_start + (j)] : s[frac_start + (j)-n_int])
    size_t first = 0;
    while (first < nd && DIGIT(first) == '0')
        first++;
    int64_t k = exp - (int64_t)n_frac + scale;
    size_t last = nd; /* digits [first, last) make the unscaled integer before * 10^k */
    if (k < 0) {
        /* The lowest -k digits fall below the scale: they must be zeros (no rounding). */
        for (int64_t z = 0; z < -k; z++) {
            if (last <= first) break;
            if (DIGIT(last - 1) != '0') return FERRY_EINVAL;
            last--;
        }
        k = 0;
    }
    if (last <= first) {
        out->lo = 0;
        out->hi = 0;
        return FERRY_OK;
    }
    if ((int64_t)(last - first) + k > precision) return FERRY_EINVAL;
    u128 u = 0;
    for (size_t j = first; j < last; j++)
        u = u * 10 + (unsigned)(DIGIT(j) - '0');
    for (int64_t z = 0; z < k; z++)
        u *= 10;
#undef DIGIT
    if (neg) u = -u;
    *out = dec_from_u128(u);
    return FERRY_OK;
}

/* ---- date32 / time64 / timestamps ---- */

static int format_date(int64_t days, char *p)
{
    int y, m, d;
    civil_from_days(days, &y, &m, &d);
    put4(p, (unsigned)y);
    p[4] = '-';
    put2(p + 5, (unsigned)m);
    p[7] = '-';
    put2(p + 8, (unsigned)d);
    return 10;
}

/* hh:mm:ss[.ffffff trimmed] for 0 <= us <= 24h. */
static int format_time(int64_t us, char *p)
{
    int64_t secs = us / US_PER_SEC;
    int frac = (int)(us % US_PER_SEC);
    put2(p, (unsigned)(secs / 3600));
    p[2] = ':';
    put2(p + 3, (unsigned)(secs / 60 % 60));
    p[5] = ':';
    put2(p + 6, (unsigned)(secs % 60));
    int n = 8;
    if (frac != 0) {
        p[n++] = '.';
        int div = 100000;
        while (frac != 0) {
            p[n++] = (char)('0' + frac / div);
            frac %= div;
            div /= 10;
        }
    }
    return n;
}

int ferry_date32_to_text(int32_t days, char *buf, size_t len)
{
    if (buf == NULL || len < 11 || days < MIN_DAY || days > MAX_DAY) {
        if (buf != NULL && len > 0) buf[0] = '\0';
        return -1;
    }
    int n = format_date(days, buf);
    buf[n] = '\0';
    return n;
}

int ferry_time64_to_text(int64_t us, char *buf, size_t len)
{
    if (buf == NULL || len < 16 || us < 0 || us > US_PER_DAY) {
        if (buf != NULL && len > 0) buf[0] = '\0';
        return -1;
    }
    int n = format_time(us, buf);
    buf[n] = '\0';
    return n;
}

int ferry_timestamp_to_text(int64_t us, bool tz, char *buf, size_t len)
{
    int64_t days = floor_div(us, US_PER_DAY);
    if (buf == NULL || len < 30 || days < MIN_DAY || days > MAX_DAY) {
        if (buf != NULL && len > 0) buf[0] = '\0';
        return -1;
    }
    int n = format_date(days, buf);
    buf[n++] = 'T';
    n += format_time(us - days * US_PER_DAY, buf + n);
    if (tz) {
        memcpy(buf + n, "+00", 3);
        n += 3;
    }
    buf[n] = '\0';
    return n;
}

/* YYYY-MM-DD at s (10 chars) into a day number. */
static bool parse_date(const char *s, size_t n, int64_t *days)
{
    int y, m, d;
    if (n < 10 || s[4] != '-' || s[7] != '-') return false;
    if (!read_digits(s, 4, &y) || !read_digits(s + 5, 2, &m) || !read_digits(s + 8, 2, &d))
        return false;
    if (y < 1 || m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return false;
    *days = days_from_civil(y, m, d);
    return true;
}

/* hh:mm[:ss[.f{1,6}]] at s; *used is how many chars it took. 24:00:00 is the end of the
 * day; a leap second 60 rolls into the next minute. */
static bool parse_time(const char *s, size_t n, int64_t *us, size_t *used)
{
    int h, mi, sec = 0;
    int64_t frac = 0;
    if (n < 5 || s[2] != ':' || !read_digits(s, 2, &h) || !read_digits(s + 3, 2, &mi)) return false;
    size_t i = 5;
    if (i < n && s[i] == ':') {
        if (n < i + 3 || !read_digits(s + i + 1, 2, &sec)) return false;
        i += 3;
        if (i < n && (s[i] == '.' || s[i] == ',')) {
            size_t f0 = ++i;
            while (i < n && is_digit(s[i])) {
                if (i - f0 >= 6) return false;
                frac = frac * 10 + (s[i++] - '0');
            }
            if (i == f0) return false;
            for (size_t k = i - f0; k < 6; k++)
                frac *= 10;
        }
    }
    if (mi > 59 || sec > 60) return false;
    if (h > 24 || (h == 24 && (mi != 0 || sec != 0 || frac != 0))) return false;
    *us = ((int64_t)h * 3600 + mi * 60 + sec) * US_PER_SEC + frac;
    *used = i;
    return true;
}

int ferry_date32_from_text(const char *s, size_t n, int32_t *out)
{
    int64_t days;
    if (s == NULL || n != 10 || !parse_date(s, n, &days)) return FERRY_EINVAL;
    *out = (int32_t)days;
    return FERRY_OK;
}

int ferry_time64_from_text(const char *s, size_t n, int64_t *out)
{
    int64_t us;
    size_t used;
    if (s == NULL || !parse_time(s, n, &us, &used) || used != n) return FERRY_EINVAL;
    *out = us;
    return FERRY_OK;
}

int ferry_timestamp_from_text(const char *s, size_t n, int64_t *out)
{
    int64_t days, tod = 0, offset = 0;
    if (s == NULL || !parse_date(s, n, &days)) return FERRY_EINVAL;
    size_t i = 10;
    if (i < n) {
        if (s[i] != 'T' && s[i] != 't' && s[i] != ' ') return FERRY_EINVAL;
        size_t used;
        if (!parse_time(s + i + 1, n - i - 1, &tod, &used)) return FERRY_EINVAL;
        i += 1 + used;
    }
    if (i < n) {
        if ((s[i] == 'Z' || s[i] == 'z') && i + 1 == n) {
            i++;
        } else if (s[i] == '+' || s[i] == '-') {
            int sign = s[i] == '-' ? -1 : 1, oh, om = 0;
            i++;
            if (n - i < 2 || !read_digits(s + i, 2, &oh)) return FERRY_EINVAL;
            i += 2;
            bool colon = i < n && s[i] == ':';
            if (colon) i++;
            if (i < n || colon) {
                if (n - i != 2 || !read_digits(s + i, 2, &om)) return FERRY_EINVAL;
                i += 2;
            }
            if (oh > 18 || om > 59) return FERRY_EINVAL;
            offset = sign * ((int64_t)oh * 3600 + om * 60) * US_PER_SEC;
        } else {
            return FERRY_EINVAL;
        }
    }
    if (i != n) return FERRY_EINVAL;
    /* Local time minus its offset is UTC. */
    *out = days * US_PER_DAY + tod - offset;
    return FERRY_OK;
}

/* ---- uuid ---- */

int ferry_uuid_to_text(const uint8_t b[16], char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (buf == NULL || len < 37) {
        if (buf != NULL && len > 0) buf[0] = '\0';
        return -1;
    }
    char *p = buf;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 15];
    }
    *p = '\0';
    return 36;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int ferry_uuid_from_text(const char *s, size_t n, uint8_t out[16])
{
    if (s == NULL) return FERRY_EINVAL;
    if (n == 38 && s[0] == '{' && s[37] == '}') {
        s++;
        n -= 2;
    }
    bool hyphens;
    if (n == 36)
        hyphens = true;
    else if (n == 32)
        hyphens = false;
    else
        return FERRY_EINVAL;
    uint8_t tmp[16];
    size_t i = 0;
    for (int k = 0; k < 16; k++) {
        if (hyphens && (k == 4 || k == 6 || k == 8 || k == 10)) {
            if (s[i++] != '-') return FERRY_EINVAL;
        }
        int a = hex_value(s[i]), b = hex_value(s[i + 1]);
        if (a < 0 || b < 0) return FERRY_EINVAL;
        tmp[k] = (uint8_t)(a << 4 | b);
        i += 2;
    }
    memcpy(out, tmp, 16);
    return FERRY_OK;
}
