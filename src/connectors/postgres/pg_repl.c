/* connectors/postgres/pg_repl.c - decodes the replication stream's frames and pgoutput
 * messages from bytes (pg_repl.h). Pure: no I/O, no libpq; every read goes through a
 * bounds-checked cursor, so any input yields a message or FERRY_EINVAL. Calls core only.
 * Called by pg_cdc.c (the live stream), the unit test and the fuzz target. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "connectors/postgres/pg_repl.h"
#include "ferry/core.h"

struct rd {
    const uint8_t *p;
    size_t n, off;
    bool bad;
    const char *what; /* the field that failed first */
};

static bool need(struct rd *r, size_t k, const char *what)
{
    if (r->bad) return false;
    if (r->n - r->off < k) {
        r->bad = true;
        r->what = what;
        return false;
    }
    return true;
}

static uint8_t u8(struct rd *r, const char *what)
{
    if (!need(r, 1, what)) return 0;
    return r->p[r->off++];
}

static uint16_t u16(struct rd *r, const char *what)
{
    if (!need(r, 2, what)) return 0;
    const uint8_t *p = r->p + r->off;
    r->off += 2;
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t u32(struct rd *r, const char *what)
{
    if (!need(r, 4, what)) return 0;
    const uint8_t *p = r->p + r->off;
    r->off += 4;
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t u64(struct rd *r, const char *what)
{
    uint64_t hi = u32(r, what);
    uint64_t lo = u32(r, what);
    return (hi << 32) | lo;
}

/* A NUL-terminated string inside the buffer. */
static const char *cstr(struct rd *r, const char *what)
{
    if (r->bad) return "";
    const void *z = memchr(r->p + r->off, 0, r->n - r->off);
    if (z == NULL) {
        r->bad = true;
        r->what = what;
        return "";
    }
    const char *s = (const char *)(r->p + r->off);
    r->off = (size_t)((const uint8_t *)z - r->p) + 1;
    return s;
}

static int fail(struct ferry_error *err, char kind, const char *fmt, const char *what)
{
    char k[8];
    if (kind >= 0x20 && kind < 0x7f)
        snprintf(k, sizeof k, "'%c'", kind);
    else
        snprintf(k, sizeof k, "0x%02x", (unsigned)(uint8_t)kind);
    return ferry_error_set(err, FERRY_EINVAL, "pgoutput", "replication message %s: %s%s", k, fmt,
                           what ? what : "");
}

/* ---- frames ----------------------------------------------------------------------------- */

int ferry_pg_repl_parse_frame(const uint8_t *p, size_t n, struct ferry_pg_repl_frame *out,
                              struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    struct rd r = {.p = p, .n = p ? n : 0};
    if (r.n == 0) return fail(err, 0, "empty frame", NULL);
    out->kind = (char)u8(&r, "kind");
    if (out->kind == 'w') {
        out->wal_start = u64(&r, "WAL start");
        out->wal_end = u64(&r, "WAL end");
        out->send_time = (int64_t)u64(&r, "send time");
        if (r.bad) return fail(err, 'w', "truncated at ", r.what);
        out->data = p + r.off;
        out->len = n - r.off;
        return FERRY_OK;
    }
    if (out->kind == 'k') {
        out->wal_end = u64(&r, "WAL end");
        out->send_time = (int64_t)u64(&r, "send time");
        out->reply_requested = u8(&r, "reply flag") != 0;
        if (r.bad) return fail(err, 'k', "truncated at ", r.what);
        return FERRY_OK;
    }
    return fail(err, out->kind, "not a replication frame (expected 'w' or 'k')", NULL);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

size_t ferry_pg_repl_status_update(uint8_t out[34], uint64_t write, uint64_t flush, uint64_t apply,
                                   int64_t clock_us, bool reply)
{
    out[0] = 'r';
    put64(out + 1, write);
    put64(out + 9, flush);
    put64(out + 17, apply);
    put64(out + 25, (uint64_t)clock_us);
    out[33] = reply ? 1 : 0;
    return 34;
}

/* ---- pgoutput messages ------------------------------------------------------------------ */

void ferry_pg_repl_decoder_init(struct ferry_pg_repl_decoder *d)
{
    memset(d, 0, sizeof *d);
}

void ferry_pg_repl_decoder_release(struct ferry_pg_repl_decoder *d)
{
    if (d == NULL) return;
    ferry_free(d->old_vals);
    ferry_free(d->new_vals);
    ferry_free(d->cols);
    memset(d, 0, sizeof *d);
}

/* Grows *arr to hold k elements of size sz (k already checked against the cap). */
static int grow(void **arr, int *cap, int k, size_t sz)
{
    if (k <= *cap) return FERRY_OK;
    int c = *cap ? *cap : 16;
    while (c < k)
        c *= 2;
    if (c > FERRY_PG_REPL_MAX_COLS) c = FERRY_PG_REPL_MAX_COLS;
    void *p = ferry_realloc(*arr, (size_t)c * sz);
    if (p == NULL) return FERRY_ENOMEM;
    *arr = p;
    *cap = c;
    return FERRY_OK;
}

static int tuple(struct rd *r, struct ferry_pg_repl_value **vals, int *cap,
                 struct ferry_pg_repl_tuple *t, char kind, struct ferry_error *err)
{
    int ncols = (int)u16(r, "tuple column count");
    if (r->bad) return fail(err, kind, "truncated at ", r->what);
    if (ncols > FERRY_PG_REPL_MAX_COLS)
        return fail(err, kind, "tuple has more columns than PostgreSQL allows", NULL);
    /* Every column takes at least one byte: a count the message cannot hold is garbage,
     * refused before anything is allocated for it. */
    if ((size_t)ncols > r->n - r->off) return fail(err, kind, "truncated at ", "tuple data");
    if (grow((void **)vals, cap, ncols, sizeof **vals) != FERRY_OK)
        return ferry_error_set(err, FERRY_ENOMEM, "pgoutput", "pgoutput: out of memory");
    t->n = ncols;
    t->values = *vals;
    for (int i = 0; i < ncols; i++) {
        struct ferry_pg_repl_value *v = &(*vals)[i];
        v->kind = (char)u8(r, "column kind");
        v->data = NULL;
        v->len = 0;
        if (r->bad) return fail(err, kind, "truncated at ", r->what);
        if (v->kind == 'n' || v->kind == 'u') continue;
        if (v->kind != 't' && v->kind != 'b')
            return fail(err, kind, "unknown tuple column kind", NULL);
        uint32_t len = u32(r, "column length");
        if (!r->bad && (len > INT32_MAX || !need(r, len, "column value")))
            return fail(err, kind, "truncated at ", "column value");
        if (r->bad) return fail(err, kind, "truncated at ", r->what);
        v->data = r->p + r->off;
        v->len = len;
        r->off += len;
    }
    return FERRY_OK;
}

int ferry_pg_repl_decode(struct ferry_pg_repl_decoder *d, const uint8_t *p, size_t n,
                         struct ferry_pg_repl_msg *m, struct ferry_error *err)
{
    memset(m, 0, sizeof *m);
    struct rd r = {.p = p, .n = p ? n : 0};
    if (r.n == 0) return fail(err, 0, "empty message", NULL);
    char k = (char)u8(&r, "kind");
    m->kind = k;
    int rc = FERRY_OK;
    switch (k) {
    case 'B':
        m->final_lsn = u64(&r, "final LSN");
        m->time = (int64_t)u64(&r, "commit time");
        m->xid = u32(&r, "xid");
        break;
    case 'C':
        m->flags = u8(&r, "flags");
        m->commit_lsn = u64(&r, "commit LSN");
        m->end_lsn = u64(&r, "end LSN");
        m->time = (int64_t)u64(&r, "commit time");
        break;
    case 'S':
        m->xid = u32(&r, "xid");
        m->first_segment = u8(&r, "first segment") == 1;
        break;
    case 'E':
        break;
    case 'c':
        m->xid = u32(&r, "xid");
        m->flags = u8(&r, "flags");
        m->commit_lsn = u64(&r, "commit LSN");
        m->end_lsn = u64(&r, "end LSN");
        m->time = (int64_t)u64(&r, "commit time");
        break;
    case 'A':
        m->xid = u32(&r, "xid");
        m->subxid = u32(&r, "subtransaction xid");
        break;
    case 'O':
        m->origin_lsn = u64(&r, "origin LSN");
        m->origin_name = cstr(&r, "origin name");
        break;
    case 'Y':
        m->type_oid = u32(&r, "type oid");
        m->type_nsp = cstr(&r, "type namespace");
        m->type_name = cstr(&r, "type name");
        break;
    case 'M':
        m->flags = u8(&r, "flags");
        m->commit_lsn = u64(&r, "message LSN");
        m->prefix = cstr(&r, "prefix");
        m->content_len = u32(&r, "content length");
        if (!r.bad && m->content_len > INT32_MAX)
            return fail(err, k, "message content longer than PostgreSQL allows", NULL);
        if (!r.bad && !need(&r, m->content_len, "content")) break;
        if (r.bad) break;
        m->content = p + r.off;
        r.off += m->content_len;
        break;
    case 'R': {
        m->relid = u32(&r, "relation id");
        m->nspname = cstr(&r, "namespace");
        m->relname = cstr(&r, "relation name");
        m->replident = (char)u8(&r, "replica identity");
        int nc = (int)u16(&r, "column count");
        if (r.bad) break;
        if (nc > FERRY_PG_REPL_MAX_COLS)
            return fail(err, k, "relation has more columns than PostgreSQL allows", NULL);
        /* A column takes at least 10 bytes (flags, empty name, oid, typmod). */
        if ((size_t)nc * 10 > r.n - r.off) return fail(err, k, "truncated at ", "columns");
        if (grow((void **)&d->cols, &d->cols_cap, nc, sizeof *d->cols) != FERRY_OK)
            return ferry_error_set(err, FERRY_ENOMEM, "pgoutput", "pgoutput: out of memory");
        m->n_cols = nc;
        m->cols = d->cols;
        for (int i = 0; i < nc && !r.bad; i++) {
            struct ferry_pg_repl_column *c = &d->cols[i];
            c->key = (u8(&r, "column flags") & 1) != 0;
            c->name = cstr(&r, "column name");
            c->type_oid = u32(&r, "column type");
            c->typmod = (int32_t)u32(&r, "column typmod");
        }
        break;
    }
    case 'I': {
        m->relid = u32(&r, "relation id");
        uint8_t t = u8(&r, "tuple marker");
        if (r.bad) break;
        if (t != 'N') return fail(err, k, "expected the new tuple marker 'N'", NULL);
        rc = tuple(&r, &d->new_vals, &d->new_cap, &m->new_tuple, k, err);
        break;
    }
    case 'U': {
        m->relid = u32(&r, "relation id");
        uint8_t t = u8(&r, "tuple marker");
        if (r.bad) break;
        if (t == 'K' || t == 'O') {
            m->old_kind = (char)t;
            rc = tuple(&r, &d->old_vals, &d->old_cap, &m->old_tuple, k, err);
            if (rc != FERRY_OK) return rc;
            t = u8(&r, "tuple marker");
            if (r.bad) break;
        }
        if (t != 'N') return fail(err, k, "expected the new tuple marker 'N'", NULL);
        rc = tuple(&r, &d->new_vals, &d->new_cap, &m->new_tuple, k, err);
        break;
    }
    case 'D': {
        m->relid = u32(&r, "relation id");
        uint8_t t = u8(&r, "tuple marker");
        if (r.bad) break;
        if (t != 'K' && t != 'O')
            return fail(err, k, "expected an old tuple marker 'K' or 'O'", NULL);
        m->old_kind = (char)t;
        rc = tuple(&r, &d->old_vals, &d->old_cap, &m->old_tuple, k, err);
        break;
    }
    case 'T': {
        uint32_t nrels = u32(&r, "relation count");
        m->truncate_options = u8(&r, "options");
        if (r.bad) break;
        if (nrels > (r.n - r.off) / 4) return fail(err, k, "truncated at ", "relation ids");
        m->n_rels = (int)nrels;
        m->relids = p + r.off;
        r.off += (size_t)nrels * 4;
        break;
    }
    default:
        return fail(err, k, "unknown pgoutput message kind", NULL);
    }
    if (rc != FERRY_OK) return rc;
    if (r.bad) return fail(err, k, "truncated at ", r.what);
    if (r.off != r.n) return fail(err, k, "trailing bytes after the message", NULL);
    return FERRY_OK;
}

uint32_t ferry_pg_repl_truncate_relid(const struct ferry_pg_repl_msg *m, int i)
{
    if (m->relids == NULL || i < 0 || i >= m->n_rels) return 0;
    const uint8_t *q = m->relids + (size_t)i * 4;
    return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3];
}

/* ---- LSN text ------------------------------------------------------------------------- */

int ferry_pg_lsn_parse(const char *s, uint64_t *out)
{
    *out = 0;
    if (s == NULL) return FERRY_EINVAL;
    uint64_t hi = 0, lo = 0;
    int nh = 0, nl = 0;
    const char *q = s;
    for (; *q && *q != '/'; q++, nh++) {
        int v = (*q >= '0' && *q <= '9')   ? *q - '0'
                : (*q >= 'A' && *q <= 'F') ? *q - 'A' + 10
                : (*q >= 'a' && *q <= 'f') ? *q - 'a' + 10
                                           : -1;
        if (v < 0 || nh >= 8) return FERRY_EINVAL;
        hi = hi * 16 + (uint64_t)v;
    }
    if (*q != '/' || nh == 0) return FERRY_EINVAL;
    for (q++; *q; q++, nl++) {
        int v = (*q >= '0' && *q <= '9')   ? *q - '0'
                : (*q >= 'A' && *q <= 'F') ? *q - 'A' + 10
                : (*q >= 'a' && *q <= 'f') ? *q - 'a' + 10
                                           : -1;
        if (v < 0 || nl >= 8) return FERRY_EINVAL;
        lo = lo * 16 + (uint64_t)v;
    }
    if (nl == 0) return FERRY_EINVAL;
    *out = (hi << 32) | lo;
    return FERRY_OK;
}

void ferry_pg_lsn_format(uint64_t lsn, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIX32 "/%" PRIX32, (uint32_t)(lsn >> 32), (uint32_t)lsn);
}
