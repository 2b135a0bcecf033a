/* connectors/sqlite/sqlite_common.c - types, quoting and text forms of the sqlite connector.
 *
 * Owns the declared-type mapping both directions (docs/connectors.md lists it) and the
 * canonical text forms. Calls SQLite, core and the batch text forms. Called by
 * sqlite_source.c and sqlite_sink.c only. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/sqlite/sqlite_common.h"

#define US_PER_DAY INT64_C(86400000000)

struct decl_name {
    const char *name;
    enum ferry_type type;
};

/* Exact base names (upper case, single spaces). DECIMAL/NUMERIC/DECIMAL_TEXT are handled
 * apart because their parameters decide the type. */
static const struct decl_name decl_names[] = {
    {"BOOLEAN", FERRY_TYPE_BOOL},
    {"BOOL", FERRY_TYPE_BOOL},
    {"TINYINT", FERRY_TYPE_INT8},
    {"INT1", FERRY_TYPE_INT8},
    {"SMALLINT", FERRY_TYPE_INT16},
    {"INT2", FERRY_TYPE_INT16},
    {"MEDIUMINT", FERRY_TYPE_INT32},
    {"INT4", FERRY_TYPE_INT32},
    {"INT", FERRY_TYPE_INT64},
    {"INTEGER", FERRY_TYPE_INT64},
    {"BIGINT", FERRY_TYPE_INT64},
    {"INT8", FERRY_TYPE_INT64},
    {"UNSIGNED BIG INT", FERRY_TYPE_INT64},
    {"FLOAT4", FERRY_TYPE_FLOAT32},
    {"REAL4", FERRY_TYPE_FLOAT32},
    {"REAL", FERRY_TYPE_FLOAT64},
    {"DOUBLE", FERRY_TYPE_FLOAT64},
    {"DOUBLE PRECISION", FERRY_TYPE_FLOAT64},
    {"FLOAT", FERRY_TYPE_FLOAT64},
    {"FLOAT8", FERRY_TYPE_FLOAT64},
    {"TEXT", FERRY_TYPE_UTF8},
    {"VARCHAR", FERRY_TYPE_UTF8},
    {"CHAR", FERRY_TYPE_UTF8},
    {"CHARACTER", FERRY_TYPE_UTF8},
    {"NCHAR", FERRY_TYPE_UTF8},
    {"NVARCHAR", FERRY_TYPE_UTF8},
    {"VARYING CHARACTER", FERRY_TYPE_UTF8},
    {"NATIVE CHARACTER", FERRY_TYPE_UTF8},
    {"CLOB", FERRY_TYPE_UTF8},
    {"STRING", FERRY_TYPE_UTF8},
    {"BLOB", FERRY_TYPE_BINARY},
    {"BYTEA", FERRY_TYPE_BINARY},
    {"BINARY", FERRY_TYPE_BINARY},
    {"VARBINARY", FERRY_TYPE_BINARY},
    {"DATE", FERRY_TYPE_DATE32},
    {"TIME", FERRY_TYPE_TIME64_US},
    {"TIMESTAMP", FERRY_TYPE_TIMESTAMP_US},
    {"DATETIME", FERRY_TYPE_TIMESTAMP_US},
    {"TIMESTAMP WITHOUT TIME ZONE", FERRY_TYPE_TIMESTAMP_US},
    {"TIMESTAMPTZ", FERRY_TYPE_TIMESTAMPTZ_US},
    {"TIMESTAMP WITH TIME ZONE", FERRY_TYPE_TIMESTAMPTZ_US},
    {"UUID", FERRY_TYPE_UUID},
    {"JSON", FERRY_TYPE_JSON},
    {"JSONB", FERRY_TYPE_JSON},
    {"JSON_TEXT", FERRY_TYPE_JSON},
};

/* Parses "(p)" or "(p,s)" at s; false when absent or malformed. */
static bool parse_params(const char *s, int *p, int *sc, int *count)
{
    *count = 0;
    while (*s == ' ')
        s++;
    if (*s != '(') return false;
    s++;
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s) return false;
    *p = (int)(a > 1000 ? 1000 : a < -1000 ? -1000 : a);
    *count = 1;
    s = end;
    while (*s == ' ')
        s++;
    if (*s == ',') {
        s++;
        long b = strtol(s, &end, 10);
        if (end == s) return false;
        *sc = (int)(b > 1000 ? 1000 : b < -1000 ? -1000 : b);
        *count = 2;
        s = end;
        while (*s == ' ')
            s++;
    }
    return *s == ')';
}

void ferry__sqlite_type_from_decl(const char *decl, enum ferry_type *type, int *precision,
                                  int *scale)
{
    /* Upper-case base name with runs of blanks collapsed, up to '('. */
    char base[64];
    size_t n = 0;
    const char *s = decl ? decl : "";
    while (*s && isspace((unsigned char)*s))
        s++;
    while (*s && *s != '(' && n + 1 < sizeof base) {
        if (isspace((unsigned char)*s)) {
            while (isspace((unsigned char)s[1]))
                s++;
            if (s[1] != '(' && s[1] != '\0') base[n++] = ' ';
        } else {
            base[n++] = (char)toupper((unsigned char)*s);
        }
        s++;
    }
    base[n] = '\0';
    *precision = 0;
    *scale = 0;

    if (!strcmp(base, "DECIMAL") || !strcmp(base, "NUMERIC") || !strcmp(base, "DECIMAL_TEXT")) {
        int p = 0, sc = 0, count = 0;
        if (parse_params(s, &p, &sc, &count) && p >= 1 && p <= 38 && sc >= -p && sc <= p) {
            *type = FERRY_TYPE_DECIMAL128;
            *precision = p;
            *scale = count == 2 ? sc : 0;
        } else {
            *type = FERRY_TYPE_DECIMAL_TEXT;
        }
        return;
    }
    for (size_t i = 0; i < sizeof decl_names / sizeof decl_names[0]; i++)
        if (!strcmp(base, decl_names[i].name)) {
            *type = decl_names[i].type;
            return;
        }
    /* SQLite's own affinity rules for the names nobody lists. */
    if (strstr(base, "INT"))
        *type = FERRY_TYPE_INT64;
    else if (strstr(base, "BLOB"))
        *type = FERRY_TYPE_BINARY;
    else if (strstr(base, "REAL") || strstr(base, "FLOA") || strstr(base, "DOUB"))
        *type = FERRY_TYPE_FLOAT64;
    else
        *type = FERRY_TYPE_UTF8;
}

void ferry__sqlite_decl_for(const struct ferry_field *f, char *buf, size_t len)
{
    const char *d = "TEXT";
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        d = "BOOLEAN";
        break;
    case FERRY_TYPE_INT8:
        d = "TINYINT";
        break;
    case FERRY_TYPE_INT16:
        d = "SMALLINT";
        break;
    case FERRY_TYPE_INT32:
        d = "INT4";
        break;
    /* INTEGER: a single-column INTEGER PRIMARY KEY is the rowid itself, the fastest key. */
    case FERRY_TYPE_INT64:
        d = "INTEGER";
        break;
    case FERRY_TYPE_FLOAT32:
        d = "FLOAT4";
        break;
    case FERRY_TYPE_FLOAT64:
        d = "DOUBLE";
        break;
    case FERRY_TYPE_DECIMAL128:
        /* TEXT affinity (the name contains TEXT): "12.50" keeps its trailing zero and
         * 38-digit values keep every digit. */
        snprintf(buf, len, "DECIMAL_TEXT(%d,%d)", f->precision, f->scale);
        return;
    case FERRY_TYPE_DECIMAL_TEXT:
        d = "DECIMAL_TEXT";
        break;
    case FERRY_TYPE_UTF8:
        d = "TEXT";
        break;
    case FERRY_TYPE_BINARY:
        d = "BLOB";
        break;
    case FERRY_TYPE_DATE32:
        d = "DATE";
        break;
    case FERRY_TYPE_TIME64_US:
        d = "TIME";
        break;
    case FERRY_TYPE_TIMESTAMP_US:
        d = "TIMESTAMP";
        break;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        d = "TIMESTAMPTZ";
        break;
    case FERRY_TYPE_UUID:
        d = "UUID";
        break;
    /* Not "JSON": its NUMERIC affinity would turn the document `1e2` into 100.0. */
    case FERRY_TYPE_JSON:
        d = "JSON_TEXT";
        break;
    case FERRY_TYPE_MAX:
        break;
    }
    snprintf(buf, len, "%s", d);
}

int ferry__sqlite_quote(struct ferry_buf *b, const char *ident)
{
    int rc = ferry_buf_append(b, "\"", 1);
    for (const char *p = ident; rc == FERRY_OK && *p; p++) {
        rc = ferry_buf_append(b, p, 1);
        if (rc == FERRY_OK && *p == '"') rc = ferry_buf_append(b, "\"", 1);
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(b, "\"", 1);
    return rc;
}

static inline void put2(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

/* hh:mm:ss and `digits` fraction digits (truncated), for 0 <= us <= 24h. */
static int put_time(int64_t us, int digits, char *p)
{
    int64_t secs = us / 1000000;
    unsigned frac = (unsigned)(us % 1000000);
    put2(p, (unsigned)(secs / 3600));
    p[2] = ':';
    put2(p + 3, (unsigned)(secs / 60 % 60));
    p[5] = ':';
    put2(p + 6, (unsigned)(secs % 60));
    if (digits <= 0) return 8;
    char f[6];
    for (int i = 5; i >= 0; i--) {
        f[i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    p[8] = '.';
    memcpy(p + 9, f, (size_t)digits);
    return 9 + digits;
}

int ferry__sqlite_date_text(int32_t days, char *buf)
{
    return ferry_date32_to_text(days, buf, 40);
}

int ferry__sqlite_time_text_style(int64_t us, int digits, char *buf)
{
    if (us < 0 || us > US_PER_DAY || digits < 0 || digits > 6) return -1;
    int n = put_time(us, digits, buf);
    buf[n] = '\0';
    return n;
}

int ferry__sqlite_time_text(int64_t us, char *buf)
{
    return ferry__sqlite_time_text_style(us, 6, buf);
}

int ferry__sqlite_ts_text_style(int64_t us, char sep, int digits, const char *suffix, char *buf)
{
    int64_t days = us / US_PER_DAY;
    if (us % US_PER_DAY < 0) days--;
    size_t sl = strlen(suffix);
    if (days < INT32_MIN || days > INT32_MAX || digits < 0 || digits > 6 || sl > 8) return -1;
    int n = ferry_date32_to_text((int32_t)days, buf, 40);
    if (n < 0) return -1;
    buf[n++] = sep;
    n += put_time(us - days * US_PER_DAY, digits, buf + n);
    memcpy(buf + n, suffix, sl);
    n += (int)sl;
    buf[n] = '\0';
    return n;
}

int ferry__sqlite_ts_text(int64_t us, bool tz, char *buf)
{
    return ferry__sqlite_ts_text_style(us, ' ', 6, tz ? "+00:00" : "", buf);
}

int ferry__sqlite_error(struct ferry_error *err, int code, sqlite3 *db, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *msg = db ? sqlite3_errmsg(db) : "out of memory";
    int ext = db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM;
    if (ext == SQLITE_FULL) code = FERRY_ENOSPC;
    return ferry_error_set(err, code, "sqlite", "%s: %s", what, msg);
}

int ferry__sqlite_exec(sqlite3 *db, const char *sql, const char *what, struct ferry_error *err)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESINK, db, "%s", what);
    return FERRY_OK;
}
