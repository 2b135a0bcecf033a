/* connectors/postgres/pg_common.c - what the postgres source and sink share.
 *
 * Owns connecting through libpq (secret url, timeouts, keepalives, a pinned search_path),
 * error formatting that never shows the url or the password, identifier quoting and name
 * splitting, and the type mapping both ways (docs/connectors.md lists it). Calls libpq,
 * config and core. Called by pg_source.c and pg_sink.c only. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/postgres/pg_common.h"
#include "net/pins.h"

#define NAMEDATALEN_MAX 63

/* ---- configuration and connection -------------------------------------------------- */

int ferry__pg_read_conn_config(struct ferry_cfg *cfg, const char *what, char **url_out,
                               struct ferry_pg_conn_opts *opts, struct ferry_error *err)
{
    opts->connect_timeout_ms = 10000;
    opts->statement_timeout_ms = 0;
    opts->idle_timeout_ms = 0;
    opts->keepalives_idle_ms = 30000;
    opts->io_timeout_ms = 600000;
    *url_out = NULL;
    int rc = ferry_cfg_duration_ms(cfg, "connect_timeout", false, &opts->connect_timeout_ms, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_duration_ms(cfg, "statement_timeout", false, &opts->statement_timeout_ms,
                                   err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_duration_ms(cfg, "idle_timeout", false, &opts->idle_timeout_ms, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_duration_ms(cfg, "keepalives_idle", false, &opts->keepalives_idle_ms, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_duration_ms(cfg, "io_timeout", false, &opts->io_timeout_ms, err);
    if (rc != FERRY_OK) return rc;
    if (opts->connect_timeout_ms < 0 || opts->statement_timeout_ms < 0 ||
        opts->idle_timeout_ms < 0 || opts->keepalives_idle_ms < 0 || opts->io_timeout_ms < 0)
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: timeouts must not be negative",
                               what);

    struct ferry_cfg *node = ferry_cfg_get(cfg, "url");
    bool plain = node != NULL && node->kind == FERRY_CFG_SCALAR && node->scalar != NULL &&
                 strncmp(node->scalar, "env:", 4) != 0 && strncmp(node->scalar, "file:", 5) != 0 &&
                 strncmp(node->scalar, "secret:", 7) != 0;
    char *url = NULL;
    rc = ferry_cfg_secret(cfg, "url", true, true, &url, err);
    if (rc != FERRY_OK) return rc;

    char *perr = NULL;
    PQconninfoOption *info = PQconninfoParse(url, &perr);
    /* libpq's parse message may quote part of the string (the password): never show it. */
    PQfreemem(perr);
    if (info == NULL) {
        ferry_secret_free(url);
        return ferry_cfg_error(err, node,
                               "%s: not a valid PostgreSQL connection URL or keyword string "
                               "(value not shown)",
                               what);
    }
    bool has_password = false;
    for (PQconninfoOption *o = info; o->keyword != NULL; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0] != '\0')
            has_password = true;
    PQconninfoFree(info);
    if (plain && has_password) {
        ferry_secret_free(url);
        return ferry_cfg_error(err, node,
                               "%s: a plain url must not hold a password (it would be saved with "
                               "the run); use env:NAME or file:PATH, or PGPASSWORD/.pgpass",
                               what);
    }
    *url_out = url;
    return FERRY_OK;
}

void ferry__pg_describe(PGconn *c, char *buf, size_t len)
{
    const char *host = c ? PQhost(c) : NULL;
    const char *port = c ? PQport(c) : NULL;
    const char *db = c ? PQdb(c) : NULL;
    if (host == NULL || host[0] == '\0') host = "localhost";
    /* A unix socket directory is a path; still a fine name for the peer. */
    snprintf(buf, len, "%s:%s/%s", host, port && port[0] ? port : "5432", db ? db : "?");
}

/* The password this url carries (for redaction), or NULL. Caller frees. */
static char *url_password(const char *url)
{
    PQconninfoOption *info = PQconninfoParse(url, NULL);
    if (info == NULL) return NULL;
    char *pw = NULL;
    for (PQconninfoOption *o = info; o->keyword != NULL; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0] != '\0')
            pw = ferry_strdup(o->val);
    PQconninfoFree(info);
    return pw;
}

/* Replaces every occurrence of `secret` in s (in place) with "***". */
static void redact(char *s, const char *secret)
{
    if (secret == NULL || secret[0] == '\0') return;
    size_t n = strlen(secret);
    char *p;
    while ((p = strstr(s, secret)) != NULL) {
        size_t rest = strlen(p + n);
        if (n >= 3) {
            memcpy(p, "***", 3);
            memmove(p + 3, p + n, rest + 1);
        } else {
            memset(p, '*', n);
        }
    }
}

static void trim_newlines(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
}

static void ms_to_secs(int64_t ms, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRId64, (ms + 999) / 1000);
}

/* A connection refused, reset or cut, or a server starting up, shutting down or full:
 * trying again later may succeed. Authentication, a missing database or role, TLS and
 * pg_hba refusals are permanent (retrying a wrong password only locks the account). */
static bool connect_transient(const char *msg)
{
    static const char *const permanent[] = {"authentication", "password", "does not exist",
                                            "pg_hba.conf", "SSL", "permission denied",
                                            "could not translate host name", NULL};
    static const char *const transient[] = {"Connection refused", "Connection reset",
                                            "could not connect", "server closed the connection",
                                            "starting up", "shutting down", "in recovery",
                                            "too many clients", "timeout", "timed out",
                                            "No such file or directory", NULL};
    for (int i = 0; permanent[i]; i++)
        if (strstr(msg, permanent[i])) return false;
    for (int i = 0; transient[i]; i++)
        if (strstr(msg, transient[i])) return true;
    return false;
}

/* SQLSTATEs of work that may succeed when tried again: connection exceptions (class 08),
 * serialization failures and deadlocks (40001, 40P01), a server shutting down or starting
 * (57P01..57P03), too many connections (53300). */
static bool sqlstate_transient(const char *state)
{
    return strncmp(state, "08", 2) == 0 || !strcmp(state, "40001") || !strcmp(state, "40P01") ||
           !strcmp(state, "57P01") || !strcmp(state, "57P02") || !strcmp(state, "57P03") ||
           !strcmp(state, "53300");
}

int ferry__pg_connect(const char *url, const struct ferry_pg_conn_opts *opts, const char *what,
                      PGconn **out, struct ferry_error *err)
{
    return ferry__pg_connect_ex(url, opts, NULL, what, out, err);
}

/* The approved address of the url's one host, when the worker's policy check pinned it:
 * libpq then connects there (hostaddr) and keeps the name for TLS and authentication. */
static bool pinned_hostaddr(const char *url, char *addr, size_t len)
{
    PQconninfoOption *info = PQconninfoParse(url, NULL);
    if (info == NULL) return false;
    const char *host = NULL, *port = NULL, *hostaddr = NULL;
    for (PQconninfoOption *o = info; o->keyword; o++) {
        if (!strcmp(o->keyword, "host")) host = o->val;
        else if (!strcmp(o->keyword, "port")) port = o->val;
        else if (!strcmp(o->keyword, "hostaddr")) hostaddr = o->val;
    }
    bool ok = host && host[0] && host[0] != '/' && !strchr(host, ',') &&
              !(hostaddr && hostaddr[0]) && !(port && strchr(port, ',')) &&
              ferry_pins_find(host, port && port[0] ? (int)strtol(port, NULL, 10) : 5432, addr,
                              len);
    PQconninfoFree(info);
    return ok;
}

int ferry__pg_connect_ex(const char *url, const struct ferry_pg_conn_opts *opts,
                         const char *replication, const char *what, PGconn **out,
                         struct ferry_error *err)
{
    *out = NULL;
    char connect_timeout[32], keep_idle[32], keep_interval[32], user_timeout[32];
    /* libpq treats 1 as 2 and 0 as forever; keep "forever" only when asked. */
    ms_to_secs(opts->connect_timeout_ms, connect_timeout, sizeof connect_timeout);
    int64_t idle = opts->keepalives_idle_ms > 0 ? opts->keepalives_idle_ms : 30000;
    ms_to_secs(idle, keep_idle, sizeof keep_idle);
    ms_to_secs(idle / 3 > 1000 ? idle / 3 : 1000, keep_interval, sizeof keep_interval);
    /* Unacknowledged data older than this drops the connection: a peer that vanished while
     * we were sending is noticed as fast as an idle one. */
    snprintf(user_timeout, sizeof user_timeout, "%" PRId64, idle * 2);
    /* expand_dbname: the url is expanded where "dbname" stands, and the keywords after it
     * override what it says; fallback_application_name lets a url choose its own name. */
    const char *keys[12] = {"dbname",          "connect_timeout",     "fallback_application_name",
                            "keepalives",      "keepalives_idle",     "keepalives_interval",
                            "keepalives_count", "tcp_user_timeout",   "client_encoding"};
    const char *vals[12] = {url,  connect_timeout, "ferry",      "1",  keep_idle,
                            keep_interval, "3",    user_timeout, "UTF8"};
    int nk = 9;
    if (replication) keys[nk] = "replication", vals[nk++] = replication;
    char pin[64]; /* the address the worker's policy check approved (net/pins.h) */
    if (pinned_hostaddr(url, pin, sizeof pin)) keys[nk] = "hostaddr", vals[nk++] = pin;
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c == NULL) return ferry_error_set(err, FERRY_ENOMEM, "libpq", "%s: out of memory", what);
    if (PQstatus(c) != CONNECTION_OK) {
        char peer[256], msg[700];
        ferry__pg_describe(c, peer, sizeof peer);
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        trim_newlines(msg);
        char *pw = url_password(url);
        redact(msg, pw);
        ferry_secret_free(pw);
        redact(msg, url);
        int code = strstr(msg, "timeout") || strstr(msg, "timed out") ? FERRY_ETIMEOUT : FERRY_EIO;
        PQfinish(c);
        ferry_error_set(err, code, "libpq", "%s: cannot connect to %s: %s", what, peer, msg);
        return connect_transient(msg) ? ferry_error_set_transient(err) : code;
    }
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET search_path = pg_catalog; SET statement_timeout = %" PRId64
             "; SET idle_in_transaction_session_timeout = %" PRId64 "; SET DateStyle = ISO"
             "; SET IntervalStyle = postgres; SET extra_float_digits = 3",
             opts->statement_timeout_ms, opts->idle_timeout_ms);
    int rc = ferry__pg_exec(c, sql, FERRY_EIO, what, err);
    if (rc != FERRY_OK) {
        PQfinish(c);
        return rc;
    }
    *out = c;
    return FERRY_OK;
}

int ferry__pg_error(struct ferry_error *err, int code, PGconn *c, PGresult *r, const char *fmt,
                    ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char primary[512] = "", extra[400] = "";
    const char *state = NULL;
    if (r != NULL && PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) != NULL) {
        snprintf(primary, sizeof primary, "%s", PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
        const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
        const char *hint = PQresultErrorField(r, PG_DIAG_MESSAGE_HINT);
        state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        size_t n = 0;
        if (detail) n += (size_t)snprintf(extra + n, sizeof extra - n, " (detail: %s)", detail);
        if (hint && n < sizeof extra)
            n += (size_t)snprintf(extra + n, sizeof extra - n, " (hint: %s)", hint);
        /* Where a value was refused: COPY's context names the row and the column ("COPY t,
         * line 3, column j"); its first line only, without the value's text (data stays out
         * of errors). */
        const char *ctx = PQresultErrorField(r, PG_DIAG_CONTEXT);
        while (ctx && strncmp(ctx, "COPY ", 5) != 0) {
            ctx = strchr(ctx, '\n');
            if (ctx) ctx++;
        }
        if (ctx && n < sizeof extra) {
            size_t k = strcspn(ctx, "\n");
            const char *q = memchr(ctx, ':', k);
            if (q != NULL) k = (size_t)(q - ctx);
            snprintf(extra + n, sizeof extra - n, " (at %.*s)", (int)k, ctx);
        }
    } else if (c != NULL) {
        snprintf(primary, sizeof primary, "%s", PQerrorMessage(c));
    }
    trim_newlines(primary);
    trim_newlines(extra);
    if (primary[0] == '\0') snprintf(primary, sizeof primary, "unknown libpq error");
    /* A lost connection: say which server it was (the statement's own words do not). */
    if (state == NULL && c != NULL && PQstatus(c) == CONNECTION_BAD) {
        char peer[256];
        ferry__pg_describe(c, peer, sizeof peer);
        size_t n = strlen(extra);
        snprintf(extra + n, sizeof extra - n, " (connection to %s lost)", peer);
    }
    /* Timeouts and cancellations keep their own codes so that callers can tell them. */
    if (state && strcmp(state, "57014") == 0 && strstr(primary, "statement timeout"))
        code = FERRY_ETIMEOUT;
    if (state) {
        ferry_error_set(err, code, "libpq", "%s: %s%s [SQLSTATE %s]", what, primary, extra, state);
        return sqlstate_transient(state) ? ferry_error_set_transient(err) : code;
    }
    ferry_error_set(err, code, "libpq", "%s: %s%s", what, primary, extra);
    /* no SQLSTATE: the connection itself failed (cut, reset, server gone) */
    bool lost = c != NULL && PQstatus(c) == CONNECTION_BAD;
    return lost || code == FERRY_ETIMEOUT ? ferry_error_set_transient(err) : code;
}

int ferry__pg_exec(PGconn *c, const char *sql, int code, const char *what,
                   struct ferry_error *err)
{
    PGresult *r = PQexec(c, sql);
    int rc = FERRY_OK;
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        rc = ferry__pg_error(err, code, c, r, "%s", what);
    PQclear(r);
    return rc;
}

/* ---- names ------------------------------------------------------------------------- */

int ferry__pg_quote_ident(struct ferry_buf *b, const char *name, struct ferry_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "postgres", "an empty name is not allowed");
    if (n > NAMEDATALEN_MAX) {
        /* Shown up to 80 bytes, cut on a character boundary so the message stays UTF-8. */
        int shown = n > 80 ? 80 : (int)n;
        while (shown > 0 && shown < (int)n && ((unsigned char)name[shown] & 0xC0) == 0x80)
            shown--;
        return ferry_error_set(err, FERRY_ECONFIG, "postgres",
                               "name \"%.*s%s\" is %zu bytes; PostgreSQL allows 63 and would "
                               "truncate it",
                               shown, name, (size_t)shown < n ? "..." : "", n);
    }
    int rc = ferry_buf_reserve(b, n * 2 + 3);
    if (rc != FERRY_OK) return ferry_error_set(err, rc, "postgres", "out of memory");
    char *p = b->data + b->len;
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '"') *p++ = '"';
        *p++ = name[i];
    }
    *p++ = '"';
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0';
    return FERRY_OK;
}

/* One part of a dotted name starting at *s: "quoted ""part""" or bare up to '.'. */
static int take_part(const char **s, char **out, const char *whole, struct ferry_error *err)
{
    const char *p = *s;
    struct ferry_buf b;
    ferry_buf_init(&b, 4096);
    int rc = FERRY_OK;
    if (*p == '"') {
        p++;
        for (;;) {
            if (*p == '\0') {
                rc = ferry_error_set(err, FERRY_ECONFIG, "postgres",
                                     "table name %s: unterminated quote", whole);
                break;
            }
            if (*p == '"') {
                if (p[1] == '"') {
                    rc = ferry_buf_append(&b, "\"", 1);
                    p += 2;
                    continue;
                }
                p++;
                break;
            }
            rc = ferry_buf_append(&b, p++, 1);
            if (rc != FERRY_OK) break;
        }
        if (rc == FERRY_OK && *p != '\0' && *p != '.')
            rc = ferry_error_set(err, FERRY_ECONFIG, "postgres",
                                 "table name %s: unexpected text after a quoted part", whole);
    } else {
        const char *start = p;
        while (*p && *p != '.')
            p++;
        if (memchr(start, '"', (size_t)(p - start)) != NULL)
            rc = ferry_error_set(err, FERRY_ECONFIG, "postgres",
                                 "table name %s: a quote inside an unquoted part", whole);
        else
            rc = ferry_buf_append(&b, start, (size_t)(p - start));
    }
    if (rc == FERRY_OK && b.len == 0)
        rc = ferry_error_set(err, FERRY_ECONFIG, "postgres", "table name %s: empty part", whole);
    if (rc == FERRY_OK) {
        *out = ferry_buf_take(&b);
        if (*out == NULL) rc = ferry_error_set(err, FERRY_ENOMEM, "postgres", "out of memory");
    }
    ferry_buf_release(&b);
    *s = p;
    return rc;
}

int ferry__pg_split_name(const char *qualified, char **schema, char **table,
                         struct ferry_error *err)
{
    *schema = NULL;
    *table = NULL;
    if (qualified == NULL || qualified[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "postgres", "empty table name");
    const char *p = qualified;
    char *first = NULL, *second = NULL;
    int rc = take_part(&p, &first, qualified, err);
    if (rc == FERRY_OK && *p == '.') {
        p++;
        rc = take_part(&p, &second, qualified, err);
        if (rc == FERRY_OK && *p != '\0')
            rc = ferry_error_set(err, FERRY_ECONFIG, "postgres",
                                 "table name %s: expected schema.table (quote a name that holds "
                                 "a dot)",
                                 qualified);
    }
    if (rc != FERRY_OK) {
        ferry_free(first);
        ferry_free(second);
        return rc;
    }
    if (second == NULL) {
        second = first;
        first = ferry_strdup("public");
        if (first == NULL) {
            ferry_free(second);
            return ferry_error_set(err, FERRY_ENOMEM, "postgres", "out of memory");
        }
    }
    *schema = first;
    *table = second;
    return FERRY_OK;
}

/* ---- types ------------------------------------------------------------------------- */

int ferry__pg_map_type(uint32_t type_oid, int32_t typmod, enum ferry_type *type, int *precision,
                       int *scale)
{
    *precision = 0;
    *scale = 0;
    switch (type_oid) {
    case FERRY_PG_OID_BOOL:
        *type = FERRY_TYPE_BOOL;
        break;
    case FERRY_PG_OID_BYTEA:
        *type = FERRY_TYPE_BINARY;
        break;
    case FERRY_PG_OID_INT2:
        *type = FERRY_TYPE_INT16;
        break;
    case FERRY_PG_OID_INT4:
        *type = FERRY_TYPE_INT32;
        break;
    case FERRY_PG_OID_INT8:
    case FERRY_PG_OID_OID:
        *type = FERRY_TYPE_INT64;
        break;
    case FERRY_PG_OID_FLOAT4:
        *type = FERRY_TYPE_FLOAT32;
        break;
    case FERRY_PG_OID_FLOAT8:
        *type = FERRY_TYPE_FLOAT64;
        break;
    case FERRY_PG_OID_NUMERIC:
        *type = FERRY_TYPE_DECIMAL_TEXT;
        if (typmod >= 4) {
            /* typmod = ((precision << 16) | (scale & 0x7ff)) + VARHDRSZ; the scale is an
             * 11-bit two's complement number (PostgreSQL 15 allows negative scales). */
            int32_t t = typmod - 4;
            int p = (t >> 16) & 0xffff;
            int s = ((t & 0x7ff) ^ 1024) - 1024;
            if (p >= 1 && p <= 38 && s >= -p && s <= p) {
                *type = FERRY_TYPE_DECIMAL128;
                *precision = p;
                *scale = s;
            }
        }
        break;
    case FERRY_PG_OID_DATE:
        *type = FERRY_TYPE_DATE32;
        break;
    case FERRY_PG_OID_TIME:
        *type = FERRY_TYPE_TIME64_US;
        break;
    case FERRY_PG_OID_TIMESTAMP:
        *type = FERRY_TYPE_TIMESTAMP_US;
        break;
    case FERRY_PG_OID_TIMESTAMPTZ:
        *type = FERRY_TYPE_TIMESTAMPTZ_US;
        break;
    case FERRY_PG_OID_UUID:
        *type = FERRY_TYPE_UUID;
        break;
    case FERRY_PG_OID_JSONB:
        *type = FERRY_TYPE_JSON;
        break;
    case FERRY_PG_OID_JSON:
        /* json keeps its text as written (key order, duplicate keys, spaces); ferry's json
         * type lands in jsonb, which would normalise it: carried as text (issue 23). */
        *type = FERRY_TYPE_UTF8;
        break;
    default:
        /* text, varchar, bpchar, name, and every type without a ferry twin (arrays, enums,
         * ranges, intervals, network and geometric types...): their text output. */
        *type = FERRY_TYPE_UTF8;
        break;
    }
    return FERRY_OK;
}

bool ferry__pg_type_is_native(uint32_t type_oid)
{
    switch (type_oid) {
    case FERRY_PG_OID_BOOL:
    case FERRY_PG_OID_BYTEA:
    case FERRY_PG_OID_NAME:
    case FERRY_PG_OID_INT8:
    case FERRY_PG_OID_INT2:
    case FERRY_PG_OID_INT4:
    case FERRY_PG_OID_TEXT:
    case FERRY_PG_OID_OID:
    case FERRY_PG_OID_JSON:
    case FERRY_PG_OID_FLOAT4:
    case FERRY_PG_OID_FLOAT8:
    case FERRY_PG_OID_BPCHAR:
    case FERRY_PG_OID_VARCHAR:
    case FERRY_PG_OID_DATE:
    case FERRY_PG_OID_TIME:
    case FERRY_PG_OID_TIMESTAMP:
    case FERRY_PG_OID_TIMESTAMPTZ:
    case FERRY_PG_OID_NUMERIC:
    case FERRY_PG_OID_UUID:
    case FERRY_PG_OID_JSONB:
        return true;
    default:
        return false;
    }
}

void ferry__pg_sql_type(const struct ferry_field *f, char *buf, size_t len)
{
    const char *t = "text";
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        t = "boolean";
        break;
    case FERRY_TYPE_INT8: /* PostgreSQL has no one-byte integer */
    case FERRY_TYPE_INT16:
        t = "smallint";
        break;
    case FERRY_TYPE_INT32:
        t = "integer";
        break;
    case FERRY_TYPE_INT64:
        t = "bigint";
        break;
    case FERRY_TYPE_FLOAT32:
        t = "real";
        break;
    case FERRY_TYPE_FLOAT64:
        t = "double precision";
        break;
    case FERRY_TYPE_DECIMAL128:
        snprintf(buf, len, "numeric(%d,%d)", f->precision, f->scale);
        return;
    case FERRY_TYPE_DECIMAL_TEXT:
        t = "numeric";
        break;
    case FERRY_TYPE_UTF8:
        t = "text";
        break;
    case FERRY_TYPE_BINARY:
        t = "bytea";
        break;
    case FERRY_TYPE_DATE32:
        t = "date";
        break;
    case FERRY_TYPE_TIME64_US:
        t = "time";
        break;
    case FERRY_TYPE_TIMESTAMP_US:
        t = "timestamp";
        break;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        t = "timestamptz";
        break;
    case FERRY_TYPE_UUID:
        t = "uuid";
        break;
    case FERRY_TYPE_JSON:
        t = "jsonb";
        break;
    case FERRY_TYPE_MAX:
        break;
    }
    snprintf(buf, len, "%s", t);
}

uint32_t ferry__pg_type_oid(const struct ferry_field *f)
{
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        return FERRY_PG_OID_BOOL;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
        return FERRY_PG_OID_INT2;
    case FERRY_TYPE_INT32:
        return FERRY_PG_OID_INT4;
    case FERRY_TYPE_INT64:
        return FERRY_PG_OID_INT8;
    case FERRY_TYPE_FLOAT32:
        return FERRY_PG_OID_FLOAT4;
    case FERRY_TYPE_FLOAT64:
        return FERRY_PG_OID_FLOAT8;
    case FERRY_TYPE_DECIMAL128:
    case FERRY_TYPE_DECIMAL_TEXT:
        return FERRY_PG_OID_NUMERIC;
    case FERRY_TYPE_BINARY:
        return FERRY_PG_OID_BYTEA;
    case FERRY_TYPE_DATE32:
        return FERRY_PG_OID_DATE;
    case FERRY_TYPE_TIME64_US:
        return FERRY_PG_OID_TIME;
    case FERRY_TYPE_TIMESTAMP_US:
        return FERRY_PG_OID_TIMESTAMP;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return FERRY_PG_OID_TIMESTAMPTZ;
    case FERRY_TYPE_UUID:
        return FERRY_PG_OID_UUID;
    case FERRY_TYPE_JSON:
        return FERRY_PG_OID_JSONB;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_MAX:
        break;
    }
    return FERRY_PG_OID_TEXT;
}

/* ---- the source's own types (origin_type "postgres:<format_type>") ---------------------- */

#define ORIGIN_PREFIX "postgres:"

int ferry__pg_set_origin(struct ferry_schema *sc, int i, const char *sql_type,
                         struct ferry_error *err)
{
    if (sql_type == NULL || sql_type[0] == '\0') return ferry_schema_set_origin(sc, i, NULL, err);
    char *o = ferry_asprintf(ORIGIN_PREFIX "%s", sql_type);
    if (o == NULL) return ferry_error_set(err, FERRY_ENOMEM, "postgres", "out of memory");
    int rc = ferry_schema_set_origin(sc, i, o, err);
    ferry_free(o);
    return rc;
}

const char *ferry__pg_origin(const struct ferry_field *f)
{
    size_t n = sizeof ORIGIN_PREFIX - 1;
    if (f->origin_type == NULL || strncmp(f->origin_type, ORIGIN_PREFIX, n) != 0) return NULL;
    return f->origin_type[n] ? f->origin_type + n : NULL;
}

const char *ferry__pg_unqualified(const char *type)
{
    bool quoted = false;
    for (const char *p = type; *p; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (!quoted && (*p == '(' || *p == '[' || *p == ' '))
            return type;
        else if (!quoted && *p == '.')
            return p + 1;
    }
    return type;
}

bool ferry__pg_same_type(const char *origin, const char *dest)
{
    if (origin == NULL || dest == NULL) return false;
    return strcmp(origin, dest) == 0 ||
           strcmp(ferry__pg_unqualified(origin), ferry__pg_unqualified(dest)) == 0;
}

const char *ferry__pg_string_at(const void *v, int i)
{
    return ((const char *const *)v)[i];
}

void ferry__pg_text_array(struct ferry_buf *b, const void *v, int n, ferry__pg_text_at_fn at)
{
    ferry_buf_append(b, "{", 1);
    for (int i = 0; i < n; i++) {
        ferry_buf_append(b, i ? ",\"" : "\"", i ? 2 : 1);
        for (const char *p = at(v, i); *p; p++) {
            if (*p == '"' || *p == '\\') ferry_buf_append(b, "\\", 1);
            ferry_buf_append(b, p, 1);
        }
        ferry_buf_append(b, "\"", 1);
    }
    ferry_buf_append(b, "}", 1);
}
