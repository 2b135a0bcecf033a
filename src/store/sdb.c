/* store/sdb.c - what both SQL drivers of the state store share: the per-dialect expansion
 * of SQL texts, the per-connection statement cache and error formatting (store/sdb.h).
 *
 * Calls core and the driver's vtable. Called by store/store_sql.c and the drivers. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "ferry/core.h"
#include "store/sdb.h"

/* Appends n bytes to the growing output. */
struct out {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->oom) return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (o->len + n + 1 > cap)
            cap *= 2;
        char *np = ferry_realloc(o->p, cap);
        if (np == NULL) {
            o->oom = true;
            return;
        }
        o->p = np;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
}

char *ferry__sdb_expand(const char *sql, enum sdb_dialect d, int *n_params)
{
    struct out o = {0};
    int next = 0, max = 0;
    const char *p = sql;
    put(&o, "", 0);
    while (*p) {
        if (*p == '\'' || *p == '"') { /* literal or quoted identifier: copied as is */
            char q = *p;
            const char *e = p + 1;
            while (*e && !(*e == q && e[1] != q))
                e += (*e == q) ? 2 : 1;
            if (*e) e++;
            put(&o, p, (size_t)(e - p));
            p = e;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            const char *stop = end ? end : p + strlen(p);
            bool pg = strncmp(p + 2, "pg:", 3) == 0, lite = strncmp(p + 2, "sqlite:", 7) == 0;
            if (pg || lite) {
                const char *body = p + 2 + (pg ? 3 : 7);
                if ((pg && d == SDB_PG) || (lite && d == SDB_SQLITE)) {
                    /* The kept text may hold placeholders: expand it too. */
                    char *inner = ferry_strndup(body, (size_t)(stop - body));
                    int n = 0;
                    char *x = inner ? ferry__sdb_expand(inner, d, &n) : NULL;
                    if (x == NULL)
                        o.oom = true;
                    else
                        put(&o, x, strlen(x));
                    if (n > max) max = n;
                    ferry_free(inner);
                    ferry_free(x);
                }
            } else {
                put(&o, p, (size_t)(stop - p) + (end ? 2 : 0));
            }
            p = end ? end + 2 : stop;
        } else if (*p == '?') {
            int num = 0;
            const char *e = p + 1;
            while (*e >= '0' && *e <= '9')
                num = num * 10 + (*e++ - '0');
            if (e == p + 1) num = ++next;
            if (num > max) max = num;
            if (d == SDB_PG) {
                char b[16];
                int n = snprintf(b, sizeof b, "$%d", num);
                put(&o, b, (size_t)n);
            } else {
                put(&o, p, (size_t)(e - p));
            }
            p = e;
        } else {
            put(&o, p, 1);
            p++;
        }
    }
    if (o.oom) {
        ferry_free(o.p);
        return NULL;
    }
    if (n_params) *n_params = max;
    return o.p;
}

static size_t slot_of(const char *sql)
{
    uintptr_t h = (uintptr_t)sql;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 40) % SDB_CACHE_SLOTS;
}

struct sdb_stmt *ferry__sdb_stmt(struct sdb *db, const char *sql, struct ferry_error *err)
{
    size_t i = slot_of(sql);
    for (size_t k = 0; k < SDB_CACHE_SLOTS; k++, i = (i + 1) % SDB_CACHE_SLOTS) {
        if (db->cache[i].sql == sql) {
            db->drv->reset(db->cache[i].stmt);
            return db->cache[i].stmt;
        }
        if (db->cache[i].sql != NULL) continue;
        int n = 0;
        char *x = ferry__sdb_expand(sql, db->drv->dialect, &n);
        if (x == NULL) {
            ferry__sdb_fail(db, FERRY_ENOMEM, "store", err, "preparing a statement: out of memory");
            return NULL;
        }
        struct sdb_stmt *s = NULL;
        int rc = db->drv->prepare(db, x, n, &s, err);
        ferry_free(x);
        if (rc != FERRY_OK) return NULL;
        db->cache[i].sql = sql;
        db->cache[i].stmt = s;
        return s;
    }
    ferry__sdb_fail(db, FERRY_ESTORE, "store", err, "the statement cache is full (%d)",
                    SDB_CACHE_SLOTS);
    return NULL;
}

void ferry__sdb_close(struct sdb *db, struct ferry_error *why)
{
    if (db == NULL) return;
    for (size_t i = 0; i < SDB_CACHE_SLOTS; i++) {
        if (db->cache[i].stmt) db->drv->finalize(db->cache[i].stmt);
        db->cache[i].sql = NULL;
        db->cache[i].stmt = NULL;
    }
    db->drv->close(db, why);
}

int ferry__sdb_fail(struct sdb *db, int code, const char *origin, struct ferry_error *err,
                    const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ferry_error_set(err, code, origin, "state %s: %s", db && db->label ? db->label : "",
                           msg);
}
