/* connectors/mysql/my_gtid.c - GTID sets of MariaDB and MySQL (my_gtid.h). Pure: no I/O.
 * Called by the mysql source's cdc stream and by tests/unit/test_my_gtid.c. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/mysql/my_gtid.h"

void ferry__my_gtid_init(struct ferry_my_gtid_set *g)
{
    memset(g, 0, sizeof *g);
}

void ferry__my_gtid_release(struct ferry_my_gtid_set *g)
{
    if (g == NULL) return;
    for (int i = 0; i < g->n_src; i++)
        ferry_free(g->src[i].iv);
    ferry_free(g->src);
    ferry_free(g->dom);
    memset(g, 0, sizeof *g);
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "mysql", "mysql gtid: out of memory");
}

static bool grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap) return true;
    int c = *cap ? *cap * 2 : 4;
    while (c < need)
        c *= 2;
    void *q = ferry_realloc(*p, (size_t)c * size);
    if (q == NULL) return false;
    *p = q;
    *cap = c;
    return true;
}

static int flavor(struct ferry_my_gtid_set *g, enum ferry_my_gtid_flavor f, struct ferry_error *err)
{
    if (g->flavor == FERRY_MY_GTID_NONE) g->flavor = f;
    if (g->flavor == f) return FERRY_OK;
    return ferry_error_set(err, FERRY_EINVAL, "mysql",
                           "mysql gtid: a %s transaction id in a %s position (a saved position "
                           "from another kind of server?)",
                           f == FERRY_MY_GTID_MYSQL ? "MySQL" : "MariaDB",
                           g->flavor == FERRY_MY_GTID_MYSQL ? "MySQL" : "MariaDB");
}

int ferry__my_gtid_add_mariadb(struct ferry_my_gtid_set *g, uint32_t domain, uint32_t server,
                               uint64_t seq, struct ferry_error *err)
{
    int rc = flavor(g, FERRY_MY_GTID_MARIADB, err);
    if (rc != FERRY_OK) return rc;
    int i = 0;
    while (i < g->n_dom && g->dom[i].domain < domain)
        i++;
    if (i == g->n_dom || g->dom[i].domain != domain) {
        if (!grow((void **)&g->dom, &g->cap_dom, g->n_dom + 1, sizeof *g->dom)) return nomem(err);
        memmove(&g->dom[i + 1], &g->dom[i], (size_t)(g->n_dom - i) * sizeof *g->dom);
        g->n_dom++;
    }
    g->dom[i] = (struct ferry_my_gtid_domain){domain, server, seq};
    return FERRY_OK;
}

static struct ferry_my_gtid_source *source_of(struct ferry_my_gtid_set *g, const uint8_t uuid[16])
{
    int i = 0, c = 1;
    while (i < g->n_src && (c = memcmp(g->src[i].uuid, uuid, 16)) < 0)
        i++;
    if (i < g->n_src && c == 0) return &g->src[i];
    if (!grow((void **)&g->src, &g->cap_src, g->n_src + 1, sizeof *g->src)) return NULL;
    memmove(&g->src[i + 1], &g->src[i], (size_t)(g->n_src - i) * sizeof *g->src);
    g->n_src++;
    memset(&g->src[i], 0, sizeof g->src[i]);
    memcpy(g->src[i].uuid, uuid, 16);
    return &g->src[i];
}

/* [lo, hi] into a source's sorted intervals, merging overlapping and adjacent ones. */
static int add_interval(struct ferry_my_gtid_source *s, uint64_t lo, uint64_t hi)
{
    int i = 0;
    while (i < s->n && s->iv[i].hi + 1 < lo)
        i++; /* the first that touches or follows */
    int j = i;
    while (j < s->n && s->iv[j].lo <= hi + 1) { /* every one that touches [lo, hi] */
        if (s->iv[j].lo < lo) lo = s->iv[j].lo;
        if (s->iv[j].hi > hi) hi = s->iv[j].hi;
        j++;
    }
    if (j == i) { /* none touches: insert */
        if (!grow((void **)&s->iv, &s->cap, s->n + 1, sizeof *s->iv)) return FERRY_ENOMEM;
        memmove(&s->iv[i + 1], &s->iv[i], (size_t)(s->n - i) * sizeof *s->iv);
        s->n++;
    } else { /* i..j-1 become one */
        memmove(&s->iv[i + 1], &s->iv[j], (size_t)(s->n - j) * sizeof *s->iv);
        s->n -= j - i - 1;
    }
    s->iv[i] = (struct ferry_my_gtid_interval){lo, hi};
    return FERRY_OK;
}

int ferry__my_gtid_add_mysql(struct ferry_my_gtid_set *g, const uint8_t uuid[16], uint64_t gno,
                             struct ferry_error *err)
{
    int rc = flavor(g, FERRY_MY_GTID_MYSQL, err);
    if (rc != FERRY_OK) return rc;
    if (gno == 0 || gno == UINT64_MAX)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "mysql gtid: transaction number %" PRIu64, gno);
    struct ferry_my_gtid_source *s = source_of(g, uuid);
    if (s == NULL || add_interval(s, gno, gno) != FERRY_OK) return nomem(err);
    return FERRY_OK;
}

/* ---- text ---- */

static bool number(const char **p, uint64_t *v)
{
    if (!isdigit((unsigned char)**p)) return false;
    errno = 0;
    char *e = NULL;
    unsigned long long x = strtoull(*p, &e, 10);
    if (errno != 0) return false;
    *v = x;
    *p = e;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 8-4-4-4-12 hex digits */
static bool uuid_of(const char **p, uint8_t out[16])
{
    const char *s = *p;
    int k = 0;
    for (int i = 0; i < 36; i++, s++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash) {
            if (*s != '-') return false;
            continue;
        }
        int h = hexval(*s), l = h < 0 ? -1 : hexval(s[1]);
        if (h < 0 || l < 0) return false;
        out[k++] = (uint8_t)(h << 4 | l);
        s++, i++;
    }
    *p = s;
    return true;
}

static int parse_mariadb(struct ferry_my_gtid_set *g, const char *p, struct ferry_error *err)
{
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        uint64_t d, s, q;
        if (!number(&p, &d) || *p++ != '-' || !number(&p, &s) || *p++ != '-' || !number(&p, &q) ||
            d > UINT32_MAX || s > UINT32_MAX)
            return FERRY_EINVAL;
        int rc = ferry__my_gtid_add_mariadb(g, (uint32_t)d, (uint32_t)s, q, err);
        if (rc != FERRY_OK) return rc;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0') return FERRY_OK;
        if (*p++ != ',') return FERRY_EINVAL;
    }
}

static int parse_mysql(struct ferry_my_gtid_set *g, const char *p, struct ferry_error *err)
{
    g->flavor = FERRY_MY_GTID_MYSQL;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        uint8_t uuid[16];
        if (!uuid_of(&p, uuid) || *p != ':') return FERRY_EINVAL;
        struct ferry_my_gtid_source *s = source_of(g, uuid);
        if (s == NULL) return nomem(err);
        while (*p == ':') {
            p++;
            uint64_t lo, hi;
            if (!number(&p, &lo)) return FERRY_EINVAL; /* (a tag is not a number) */
            hi = lo;
            if (*p == '-' && (p++, !number(&p, &hi))) return FERRY_EINVAL;
            if (lo == 0 || hi < lo || hi == UINT64_MAX) return FERRY_EINVAL;
            if (add_interval(s, lo, hi) != FERRY_OK) return nomem(err);
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0') return FERRY_OK;
        if (*p++ != ',') return FERRY_EINVAL;
    }
}

int ferry__my_gtid_parse(struct ferry_my_gtid_set *g, const char *text, struct ferry_error *err)
{
    ferry__my_gtid_release(g);
    if (text == NULL) return FERRY_OK;
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0') return FERRY_OK;
    int rc = strchr(p, ':') ? parse_mysql(g, p, err) : parse_mariadb(g, p, err);
    if (rc == FERRY_OK) return FERRY_OK;
    ferry__my_gtid_release(g);
    if (rc != FERRY_EINVAL) return rc;
    return ferry_error_set(err, FERRY_EINVAL, "mysql",
                           "mysql gtid: \"%.100s\" is neither a MariaDB GTID position "
                           "(domain-server-seq, ...) nor a MySQL GTID set (uuid:a-b:c, ...)",
                           text);
}

int ferry__my_gtid_format(const struct ferry_my_gtid_set *g, struct ferry_buf *out)
{
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < g->n_dom; i++)
        rc = ferry_buf_printf(out, "%s%" PRIu32 "-%" PRIu32 "-%" PRIu64, i ? "," : "",
                              g->dom[i].domain, g->dom[i].server, g->dom[i].seq);
    for (int i = 0; rc == FERRY_OK && i < g->n_src; i++) {
        const uint8_t *u = g->src[i].uuid;
        if (i > 0) rc = ferry_buf_append(out, ",", 1);
        for (int k = 0; rc == FERRY_OK && k < 16; k++)
            rc = ferry_buf_printf(out, "%s%02x", k == 4 || k == 6 || k == 8 || k == 10 ? "-" : "",
                                  u[k]);
        for (int k = 0; rc == FERRY_OK && k < g->src[i].n; k++) {
            const struct ferry_my_gtid_interval *v = &g->src[i].iv[k];
            rc = v->lo == v->hi ? ferry_buf_printf(out, ":%" PRIu64, v->lo)
                                : ferry_buf_printf(out, ":%" PRIu64 "-%" PRIu64, v->lo, v->hi);
        }
    }
    return rc;
}

/* ---- events ---- */

static uint64_t le(const uint8_t *p, int k)
{
    uint64_t v = 0;
    for (int i = 0; i < k; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int ferry__my_gtid_event_mariadb(const uint8_t *body, size_t n, uint64_t *seq, uint32_t *domain,
                                 uint8_t *flags2, struct ferry_error *err)
{
    if (body == NULL || n < 13)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "binlog GTID event: truncated (%zu bytes, 13 needed)", n);
    *seq = le(body, 8);
    *domain = (uint32_t)le(body + 8, 4);
    *flags2 = body[12];
    return FERRY_OK;
}

int ferry__my_gtid_event_mysql(const uint8_t *body, size_t n, uint8_t uuid[16], uint64_t *gno,
                               struct ferry_error *err)
{
    if (body == NULL || n < 25)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "binlog GTID_LOG event: truncated (%zu bytes, 25 needed)", n);
    memcpy(uuid, body + 1, 16);
    *gno = le(body + 17, 8);
    return FERRY_OK;
}

/* ---- subset, MySQL's binary set, the dump's dialect ---- */

static bool interval_in(const struct ferry_my_gtid_source *b, uint64_t lo, uint64_t hi)
{
    for (int i = 0; i < b->n; i++)
        if (b->iv[i].lo <= lo && hi <= b->iv[i].hi) return true;
    return false;
}

static const struct ferry_my_gtid_source *find_source(const struct ferry_my_gtid_set *g,
                                                      const uint8_t uuid[16])
{
    for (int i = 0; i < g->n_src; i++)
        if (memcmp(g->src[i].uuid, uuid, 16) == 0) return &g->src[i];
    return NULL;
}

bool ferry__my_gtid_subset(const struct ferry_my_gtid_set *a, const struct ferry_my_gtid_set *b)
{
    if (a->n_dom == 0 && a->n_src == 0) return true;
    if (a->flavor != b->flavor) return false;
    for (int i = 0; i < a->n_dom; i++) {
        int j = 0;
        while (j < b->n_dom && b->dom[j].domain != a->dom[i].domain)
            j++;
        if (j == b->n_dom || b->dom[j].seq < a->dom[i].seq) return false;
    }
    for (int i = 0; i < a->n_src; i++) {
        const struct ferry_my_gtid_source *s = find_source(b, a->src[i].uuid);
        for (int k = 0; k < a->src[i].n; k++)
            if (s == NULL || !interval_in(s, a->src[i].iv[k].lo, a->src[i].iv[k].hi)) return false;
    }
    return true;
}

static void put_le(struct ferry_buf *out, uint64_t v, int k)
{
    uint8_t b[8];
    for (int i = 0; i < k; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    ferry_buf_append(out, b, (size_t)k); /* a failure sticks to the buffer */
}

int ferry__my_gtid_encode(const struct ferry_my_gtid_set *g, struct ferry_buf *out,
                          struct ferry_error *err)
{
    if (g->flavor == FERRY_MY_GTID_MARIADB)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "mysql gtid: a MariaDB GTID position has no MySQL binary form");
    put_le(out, (uint64_t)g->n_src, 8);
    for (int i = 0; i < g->n_src; i++) {
        ferry_buf_append(out, g->src[i].uuid, 16);
        put_le(out, (uint64_t)g->src[i].n, 8);
        for (int k = 0; k < g->src[i].n; k++) {
            put_le(out, g->src[i].iv[k].lo, 8);
            put_le(out, g->src[i].iv[k].hi + 1, 8); /* exclusive (hi < UINT64_MAX: add/parse) */
        }
    }
    return ferry_buf_failed(out) ? nomem(err) : FERRY_OK;
}

static int bad_binary(struct ferry_my_gtid_set *g, const char *why, size_t at,
                      struct ferry_error *err)
{
    ferry__my_gtid_release(g);
    return ferry_error_set(err, FERRY_EINVAL, "mysql", "mysql gtid: binary GTID set: %s (byte %zu)",
                           why, at);
}

/* One source's block at p[*at]: uuid, n_intervals, intervals. */
static int decode_source(struct ferry_my_gtid_set *g, const uint8_t *p, size_t n, size_t *at,
                         struct ferry_error *err)
{
    if (n - *at < 24) return bad_binary(g, "truncated source", *at, err);
    struct ferry_my_gtid_source *s = source_of(g, p + *at);
    if (s == NULL) return nomem(err);
    uint64_t n_iv = le(p + *at + 16, 8);
    *at += 24;
    if (n_iv > (n - *at) / 16) return bad_binary(g, "more intervals than bytes", *at, err);
    for (uint64_t k = 0; k < n_iv; k++, *at += 16) {
        uint64_t lo = le(p + *at, 8), end = le(p + *at + 8, 8);
        if (lo == 0 || end <= lo || end > INT64_MAX)
            return bad_binary(g, "interval out of range", *at, err);
        if (add_interval(s, lo, end - 1) != FERRY_OK) return nomem(err);
    }
    return FERRY_OK;
}

int ferry__my_gtid_decode(struct ferry_my_gtid_set *g, const uint8_t *p, size_t n,
                          struct ferry_error *err)
{
    ferry__my_gtid_release(g);
    if (p == NULL || n < 8) return bad_binary(g, "truncated", 0, err);
    uint64_t n_sids = le(p, 8);
    if (n_sids >> 56 != 0)
        return bad_binary(g, "tagged GTIDs (MySQL 8.3 and later) are not supported", 7, err);
    if (n_sids > (n - 8) / 24) return bad_binary(g, "more sources than bytes", 0, err);
    g->flavor = FERRY_MY_GTID_MYSQL;
    size_t at = 8;
    for (uint64_t i = 0; i < n_sids; i++) {
        int rc = decode_source(g, p, n, &at, err);
        if (rc != FERRY_OK) {
            ferry__my_gtid_release(g);
            return rc;
        }
    }
    if (at != n) return bad_binary(g, "bytes after the last source", at, err);
    return FERRY_OK;
}

static const char *flavor_name(bool mariadb)
{
    return mariadb ? "MariaDB" : "MySQL";
}

int ferry__my_gtid_dump_kind(bool server_is_mariadb, const char *gtid,
                             enum ferry_my_dump_kind *kind, struct ferry_error *err)
{
    *kind = FERRY_MY_DUMP_FILE;
    if (gtid == NULL) return FERRY_OK;
    struct ferry_my_gtid_set g;
    ferry__my_gtid_init(&g);
    int rc = ferry__my_gtid_parse(&g, gtid, err);
    enum ferry_my_gtid_flavor f = g.flavor;
    ferry__my_gtid_release(&g);
    if (rc != FERRY_OK) return rc;
    if (f != FERRY_MY_GTID_NONE && (f == FERRY_MY_GTID_MARIADB) != server_is_mariadb)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "mysql gtid: the saved GTID position \"%.100s\" is a %s position, "
                               "but the server is %s (a pipeline pointed at another kind of "
                               "server cannot resume by GTID: resnapshot)",
                               gtid, flavor_name(f == FERRY_MY_GTID_MARIADB),
                               flavor_name(server_is_mariadb));
    *kind = server_is_mariadb ? FERRY_MY_DUMP_MARIADB_GTID : FERRY_MY_DUMP_MYSQL_GTID;
    return FERRY_OK;
}

int ferry__my_gtid_dump_packet(uint32_t server_id, const struct ferry_my_gtid_set *g,
                               struct ferry_buf *out, struct ferry_error *err)
{
    struct ferry_buf data;
    ferry_buf_init(&data, 0);
    int rc = ferry__my_gtid_encode(g, &data, err);
    if (rc == FERRY_OK && data.len > UINT32_MAX)
        rc = ferry_error_set(err, FERRY_EINVAL, "mysql", "mysql gtid: the GTID set is too large");
    if (rc == FERRY_OK) {
        uint8_t cmd = 0x1e; /* COM_BINLOG_DUMP_GTID */
        ferry_buf_append(out, &cmd, 1);
        put_le(out, 4, 2); /* BINLOG_THROUGH_GTID */
        put_le(out, server_id, 4);
        put_le(out, 0, 4); /* no file name: the server finds the first file it needs */
        put_le(out, 4, 8);
        put_le(out, data.len, 4);
        if (data.len > 0) ferry_buf_append(out, data.data, data.len);
        if (ferry_buf_failed(out)) rc = nomem(err);
    }
    ferry_buf_release(&data);
    return rc;
}
