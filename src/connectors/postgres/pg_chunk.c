/* connectors/postgres/pg_chunk.c - watermark chunks of a table that joins a running slot
 * (DBLog): the chunk reads and their snapshots, the watermarks, the keys changed between
 * them and the changes a chunk's snapshot may not see. Contract in pg_chunk.h; the stream
 * that drives it is pg_cdc.c; docs/internals/cdc.md. */
#include "connectors/postgres/pg_chunk.h"
#include "core/bytes.h"
#include "ferry/failpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WHAT "postgres cdc"

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* Key texts serialised: per key field, 4 bytes of length (big-endian) and the bytes. */
static int put_key_part(struct ferry_buf *b, const char *p, uint32_t n)
{
    uint8_t len[4];
    ferry__put_be32(len, n);
    if (ferry_buf_append(b, len, 4) != FERRY_OK) return FERRY_ENOMEM;
    return ferry_buf_append(b, p, n);
}

int ferry__pg_chunk_open(struct ferry_pg_chunk *ch, const char *url,
                         const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, int n_user, const char *tag,
                         struct ferry_error *err)
{
    memset(ch, 0, sizeof *ch);
    ch->peer = peer;
    ch->t = t;
    ch->n_user = n_user;
    ferry_buf_init(&ch->after, 0);
    ferry_buf_init(&ch->keys, 0);
    ferry_buf_init(&ch->held, 0);
    ferry_buf_init(&ch->scratch, 0);
    ferry_buf_init(&ch->writers, 0);
    static _Atomic unsigned seq;
    snprintf(ch->nonce, sizeof ch->nonce, "%x.%llx.%x", (unsigned)getpid(),
             (unsigned long long)ferry_now_wall_us(), ++seq);
    if (tag != NULL && strcmp(tag, "d") == 0) {
        ch->phase = CHUNK_DONE;
        return FERRY_OK;
    }
    if (tag != NULL && tag[0] == 'c') {
        for (size_t i = 1; tag[i] != '\0'; i += 2) {
            int hi = hexval(tag[i]), lo = tag[i + 1] ? hexval(tag[i + 1]) : -1;
            if (hi < 0 || lo < 0)
                return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                       WHAT ": table %s: the saved snapshot progress is not "
                                            "a key (\"%.40s\")",
                                       t->from, tag);
            uint8_t byte = (uint8_t)(hi << 4 | lo);
            if (ferry_buf_append(&ch->after, &byte, 1) != FERRY_OK) return nomem(err);
        }
    }
    int rc = ferry__pg_connect(url, opts, WHAT, &ch->c, err);
    /* the walsender's text output (pg_demux.c): a key reads the same in both */
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(ch->c,
                            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET bytea_output = "
                            "'hex'; SET extra_float_digits = 3; SET IntervalStyle = 'postgres'",
                            FERRY_ESOURCE, WHAT ": the chunk connection's settings", err);
    return rc;
}

void ferry__pg_chunk_close(struct ferry_pg_chunk *ch)
{
    if (ch->c) PQfinish(ch->c);
    ch->c = NULL;
    if (ch->rows) PQclear(ch->rows);
    ch->rows = NULL;
    ferry_buf_release(&ch->after);
    ferry_buf_release(&ch->keys);
    ferry_buf_release(&ch->held);
    ferry_buf_release(&ch->scratch);
    ferry_buf_release(&ch->writers);
    ferry_free(ch->slots);
    ch->slots = NULL;
    ferry__pg_snap_release(&ch->snap);
}

/* ---- snapshots ------------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* One decimal xid8 at *p, cut to its 32 bits; *p moves past it. */
static bool xid_at(const char **p, uint32_t *out)
{
    if (**p < '0' || **p > '9') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(*p, &end, 10);
    if (errno != 0) return false;
    *p = end;
    *out = (uint32_t)v;
    return true;
}

static int add_xip(struct ferry_pg_snap *s, uint32_t xid)
{
    if (s->n_xip == s->cap_xip) {
        uint32_t cap = s->cap_xip ? s->cap_xip * 2 : 64;
        uint32_t *x = ferry_realloc(s->xip, cap * sizeof *x);
        if (x == NULL) return FERRY_ENOMEM;
        s->xip = x;
        s->cap_xip = cap;
    }
    s->xip[s->n_xip++] = xid;
    return FERRY_OK;
}

int ferry__pg_snap_parse(struct ferry_pg_snap *s, const char *text, struct ferry_error *err)
{
    const char *p = text;
    s->n_xip = 0;
    bool ok = xid_at(&p, &s->xmin) && *p++ == ':' && xid_at(&p, &s->xmax) && *p++ == ':';
    while (ok && *p != '\0') {
        uint32_t x = 0;
        ok = xid_at(&p, &x);
        if (ok && *p == ',')
            ok = *++p != '\0'; /* another one follows */
        else if (ok)
            ok = *p == '\0';
        if (ok && add_xip(s, x) != FERRY_OK)
            return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
    }
    if (!ok)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": the chunk's snapshot is not xmin:xmax:xip (\"%.60s\")",
                               text);
    if (s->n_xip > 1) qsort(s->xip, s->n_xip, sizeof *s->xip, cmp_u32);
    return FERRY_OK;
}

bool ferry__pg_snap_visible(const struct ferry_pg_snap *s, uint32_t xid)
{
    if ((int32_t)(xid - s->xmin) < 0) return true;   /* ended before every running one */
    if ((int32_t)(xid - s->xmax) >= 0) return false; /* not ended when it was taken */
    return s->n_xip == 0 || bsearch(&xid, s->xip, s->n_xip, sizeof xid, cmp_u32) == NULL;
}

void ferry__pg_snap_release(struct ferry_pg_snap *s)
{
    ferry_free(s->xip);
    s->xip = NULL;
    s->n_xip = s->cap_xip = 0;
}

static int watermark(struct ferry_pg_chunk *ch, const char *kind, struct ferry_error *err)
{
    char content[80];
    snprintf(content, sizeof content, "%s %s %lld", kind, ch->nonce, (long long)ch->no);
    const char *p[1] = {content};
    PGresult *res = NULL;
    int rc = ferry__pg_cdc_query(ch->c,
                                 "SELECT pg_catalog.pg_logical_emit_message(false, 'ferry', "
                                 "$1)::pg_catalog.text",
                                 1, p, &res, ch->peer, "writing a snapshot watermark", err);
    if (rc == FERRY_OK) PQclear(res);
    return rc;
}

/* "k1", "k2" (names) or $1, $2 (parameters) */
static int key_list(struct ferry_pg_chunk *ch, struct ferry_buf *b, bool params,
                    struct ferry_error *err)
{
    const struct ferry_schema *sc = ch->t->sc;
    int rc = FERRY_OK;
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        if (k > 0) rc = ferry_buf_printf(b, ", ");
        if (rc != FERRY_OK) break;
        rc = params ? ferry_buf_printf(b, "$%d", k + 1)
                    : ferry__pg_quote_ident(b, sc->fields[sc->key[k]].name, err);
    }
    return rc;
}

/* SELECT the user fields FROM t [WHERE (key) > ($1..)] ORDER BY key LIMIT n */
static int chunk_sql(struct ferry_pg_chunk *ch, struct ferry_buf *b, struct ferry_error *err)
{
    const struct ferry_schema *sc = ch->t->sc;
    int rc = ferry_buf_printf(b, "SELECT ");
    for (int f = 0; f < ch->n_user && rc == FERRY_OK; f++) {
        if (f > 0) rc = ferry_buf_printf(b, ", ");
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, sc->fields[f].name, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " FROM %s", ch->t->from);
    if (rc == FERRY_OK && ch->after.len > 0) {
        rc = ferry_buf_printf(b, " WHERE (");
        if (rc == FERRY_OK) rc = key_list(ch, b, false, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ") > (");
        if (rc == FERRY_OK) rc = key_list(ch, b, true, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " ORDER BY ");
    if (rc == FERRY_OK) rc = key_list(ch, b, false, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " LIMIT %d", FERRY_PG_CHUNK_ROWS);
    (void)sc;
    return rc == FERRY_ENOMEM ? nomem(err) : rc;
}

/* The saved key as parameters (texts inside ch->scratch). */
static int key_params(struct ferry_pg_chunk *ch, const char **params, int n_key,
                      struct ferry_error *err)
{
    ferry_buf_reset(&ch->scratch);
    size_t at = 0;
    size_t offs[64];
    for (int k = 0; k < n_key; k++) {
        if (at + 4 > ch->after.len) goto bad;
        const uint8_t *p = (const uint8_t *)ch->after.data + at;
        uint32_t n = ferry__be32(p);
        if (at + 4 + n > ch->after.len) goto bad;
        offs[k] = ch->scratch.len;
        if (ferry_buf_append(&ch->scratch, p + 4, n) != FERRY_OK ||
            ferry_buf_append(&ch->scratch, "", 1) != FERRY_OK)
            return nomem(err);
        at += 4 + n;
    }
    if (at != ch->after.len) goto bad;
    for (int k = 0; k < n_key; k++)
        params[k] = ch->scratch.data + offs[k];
    return FERRY_OK;
bad:
    return ferry_error_set(err, FERRY_EINVAL, "postgres",
                           WHAT ": table %s: the saved snapshot progress does not hold %d key "
                                "values",
                           ch->t->from, n_key);
}
/* The chunk's snapshot: the text of pg_current_snapshot(), the one the transaction reads
 * with (REPEATABLE READ: taken by this first statement). */
static int take_snapshot(struct ferry_pg_chunk *ch, struct ferry_error *err)
{
    PGresult *res = NULL;
    int rc =
        ferry__pg_cdc_query(ch->c, "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text", 0,
                            NULL, &res, ch->peer, "taking a snapshot chunk's snapshot", err);
    if (rc != FERRY_OK) return rc;
    rc = PQntuples(res) == 1
             ? ferry__pg_snap_parse(&ch->snap, PQgetvalue(res, 0, 0), err)
             : ferry_error_set(err, FERRY_ESOURCE, "postgres",
                               WHAT ": %s: pg_current_snapshot() returned no row", ch->peer);
    PQclear(res);
    return rc;
}

/* Low watermark, then the chunk in a REPEATABLE READ transaction whose snapshot is kept
 * (a transaction the stream applies before the low watermark may still be invisible to it:
 * at_hw() drops its keys). Failpoint cdc_chunk_snapshot_first takes the snapshot before the
 * low watermark and sleeps between them: tests widen that race. */
static int read_chunk(struct ferry_pg_chunk *ch, const char *sql, int np, const char **params,
                      struct ferry_error *err)
{
    bool snapshot_first = ferry_failpoint_armed("cdc_chunk_snapshot_first");
    int rc = snapshot_first ? FERRY_OK : watermark(ch, "lw", err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(ch->c, "BEGIN ISOLATION LEVEL REPEATABLE READ", FERRY_ESOURCE,
                            WHAT ": reading a snapshot chunk", err);
    if (rc == FERRY_OK) rc = take_snapshot(ch, err);
    if (rc == FERRY_OK && snapshot_first) {
        rc = ferry_failpoint_check("cdc_chunk_snapshot_first", err);
        if (rc == FERRY_OK) rc = watermark(ch, "lw", err);
    }
    if (rc == FERRY_OK)
        rc = ferry__pg_cdc_query(ch->c, sql, np, params, &ch->rows, ch->peer,
                                 "reading a snapshot chunk", err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(ch->c, "COMMIT", FERRY_ESOURCE, WHAT ": reading a snapshot chunk", err);
    return rc;
}

/* ---- writers from before the publication ----------------------------------------------
 * pgoutput decodes a change with the catalog as of that change: a transaction that wrote to
 * the table before ALTER PUBLICATION ... ADD TABLE committed, and commits after it, has
 * those changes skipped, never published. Only a chunk whose snapshot sees the transaction
 * carries them, so the first chunk waits until every such transaction ended. They all hold
 * the table's RowExclusiveLock until they end (any INSERT, UPDATE, DELETE, MERGE or COPY
 * takes it); the first look lists the holders (a superset: later writers too), each later
 * look keeps those still holding it (ferry__pg_cdc_writers). */
#define WRITERS_POLL_US 100000
#define WRITERS_LOG_US 30000000

static int writers_look(struct ferry_pg_chunk *ch, int *n, struct ferry_error *err)
{
    struct ferry_buf tables;
    ferry_buf_init(&tables, 0);
    int rc = ferry__pg_cdc_array_add(&tables, ch->t->from) == FERRY_OK ? FERRY_OK : nomem(err);
    ferry_buf_reset(&ch->scratch); /* the pids */
    if (rc == FERRY_OK)
        rc =
            ferry__pg_cdc_writers(ch->c, ch->peer, tables.data, &ch->writers, n, &ch->scratch, err);
    ferry_buf_release(&tables);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", ch->t->from);
    int64_t now = ferry_now_mono_us();
    if (*n > 0 && now >= ch->writers_log_us) {
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": table %s: waiting for %d transaction%s that wrote to it and may "
                       "predate its joining the publication (pid %s): its snapshot must see "
                       "them",
                  ch->t->from, *n, *n == 1 ? "" : "s", ch->scratch.data);
        ch->writers_log_us = now + WRITERS_LOG_US;
    }
    ch->writers_poll_us = now + WRITERS_POLL_US;
    return FERRY_OK;
}

/* Whether the first chunk may start: no writer from before the publication is left. */
static int writers_gone(struct ferry_pg_chunk *ch, bool *gone, struct ferry_error *err)
{
    *gone = ch->writers_done;
    if (*gone || ferry_now_mono_us() < ch->writers_poll_us) return FERRY_OK;
    int n = 0;
    int rc = writers_look(ch, &n, err);
    if (rc == FERRY_OK && n == 0) *gone = ch->writers_done = true;
    return rc;
}

int ferry__pg_chunk_start(struct ferry_pg_chunk *ch, struct ferry_error *err)
{
    const struct ferry_schema *sc = ch->t->sc;
    if (sc->n_key < 1 || sc->n_key > 64)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                               WHAT ": table %s: a table read in chunks needs a key of 1 to 64 "
                                    "columns",
                               ch->t->from);
    /* from the table's start only: every snapshot after a written chunk sees them ended */
    bool gone = true;
    int rc = ch->after.len == 0 ? writers_gone(ch, &gone, err) : FERRY_OK;
    if (rc != FERRY_OK || !gone) return rc;
    /* tests kill a run in the middle of a snapshot (sleep) */
    rc = ferry_failpoint_check("cdc_chunk", err);
    if (rc != FERRY_OK) return rc;
    if (ch->rows) PQclear(ch->rows);
    ch->rows = NULL;
    ch->no++;
    const char *params[64];
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    rc = ch->after.len > 0 ? key_params(ch, params, sc->n_key, err) : FERRY_OK;
    if (rc == FERRY_OK) rc = chunk_sql(ch, &sql, err);
    if (rc == FERRY_OK)
        rc = read_chunk(ch, sql.data, ch->after.len > 0 ? sc->n_key : 0, params, err);
    ferry_buf_release(&sql);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", ch->t->from);
    ch->last = PQntuples(ch->rows) < FERRY_PG_CHUNK_ROWS;
    if (PQntuples(ch->rows) == 0) {
        ch->phase = CHUNK_DONE;
        ferry_buf_release(&ch->held);
        return FERRY_OK;
    }
    rc = watermark(ch, "hw", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", ch->t->from);
    ch->truncated = false;
    ch->phase = CHUNK_WAIT_LW;
    return FERRY_OK;
}

static bool is_ours(const struct ferry_pg_chunk *ch, const char *kind, const uint8_t *p, size_t n)
{
    char want[80];
    int w = snprintf(want, sizeof want, "%s %s %lld", kind, ch->nonce, (long long)ch->no);
    return w > 0 && (size_t)w == n && memcmp(want, p, n) == 0;
}

static void keys_clear(struct ferry_pg_chunk *ch)
{
    ferry_buf_reset(&ch->keys);
    if (ch->slots) memset(ch->slots, 0, ch->n_slots * sizeof *ch->slots);
    ch->n_keys = 0;
}

bool ferry__pg_chunk_message(struct ferry_pg_chunk *ch, const char *prefix, const uint8_t *p,
                             size_t n)
{
    if (prefix == NULL || strcmp(prefix, "ferry") != 0) return false;
    if (ch->phase == CHUNK_WAIT_LW && is_ours(ch, "lw", p, n)) {
        keys_clear(ch);
        ch->phase = CHUNK_WINDOW;
        return false;
    }
    return ch->phase == CHUNK_WINDOW && is_ours(ch, "hw", p, n);
}

static uint32_t hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* The key at keys[off]: 4 bytes of length, then the serialised key. */
static bool key_at(const struct ferry_pg_chunk *ch, uint32_t off, const uint8_t *p, size_t n)
{
    const uint8_t *q = (const uint8_t *)ch->keys.data + off;
    uint32_t len = ferry__be32(q);
    return len == n && memcmp(q + 4, p, n) == 0;
}

static bool seen(const struct ferry_pg_chunk *ch, const uint8_t *p, size_t n, uint32_t *slot)
{
    if (ch->n_slots == 0) return false;
    uint32_t i = hash(p, n) & (ch->n_slots - 1);
    while (ch->slots[i] != 0) {
        if (key_at(ch, ch->slots[i] - 1, p, n)) return true;
        i = (i + 1) & (ch->n_slots - 1);
    }
    if (slot) *slot = i;
    return false;
}

static int grow(struct ferry_pg_chunk *ch, struct ferry_error *err)
{
    uint32_t cap = ch->n_slots ? ch->n_slots * 2 : 1024;
    uint32_t *s = ferry_calloc(cap, sizeof *s);
    if (s == NULL) return nomem(err);
    for (uint32_t i = 0; i < ch->n_slots; i++) {
        if (ch->slots[i] == 0) continue;
        const uint8_t *q = (const uint8_t *)ch->keys.data + ch->slots[i] - 1;
        uint32_t len = ferry__be32(q);
        uint32_t j = hash(q + 4, len) & (cap - 1);
        while (s[j] != 0)
            j = (j + 1) & (cap - 1);
        s[j] = ch->slots[i];
    }
    ferry_free(ch->slots);
    ch->slots = s;
    ch->n_slots = cap;
    return FERRY_OK;
}

static int remember(struct ferry_pg_chunk *ch, const uint8_t *p, size_t n, struct ferry_error *err)
{
    if ((ch->n_keys + 1) * 2 > ch->n_slots && grow(ch, err) != FERRY_OK) return FERRY_ENOMEM;
    uint32_t slot = 0;
    if (seen(ch, p, n, &slot)) return FERRY_OK;
    if (ch->keys.len + n + 4 >= UINT32_MAX) return nomem(err);
    uint32_t off = (uint32_t)ch->keys.len;
    if (put_key_part(&ch->keys, (const char *)p, (uint32_t)n) != FERRY_OK) return nomem(err);
    ch->slots[slot] = off + 1;
    ch->n_keys++;
    return FERRY_OK;
}

#define HELD_TRUNCATE UINT32_MAX /* a held entry's key length: a TRUNCATE, no key */

/* A change no chunk's snapshot saw yet: xid, key length (host order), key. */
static int hold(struct ferry_pg_chunk *ch, uint32_t xid, const void *key, uint32_t n,
                struct ferry_error *err)
{
    uint32_t head[2] = {xid, n};
    size_t kn = n == HELD_TRUNCATE ? 0 : n;
    if (ferry_buf_append(&ch->held, head, sizeof head) != FERRY_OK ||
        (kn > 0 && ferry_buf_append(&ch->held, key, kn) != FERRY_OK))
        return nomem(err);
    return FERRY_OK;
}

int ferry__pg_chunk_note(struct ferry_pg_chunk *ch, uint32_t xid,
                         const struct ferry_pg_repl_tuple *tp, const int *map,
                         struct ferry_error *err)
{
    if (ch->phase == CHUNK_DONE) return FERRY_OK;
    const struct ferry_schema *sc = ch->t->sc;
    ferry_buf_reset(&ch->scratch);
    for (int k = 0; k < sc->n_key; k++) {
        int idx = sc->key[k] < ch->n_user ? map[sc->key[k]] : -1;
        const struct ferry_pg_repl_value *v = idx >= 0 && idx < tp->n ? &tp->values[idx] : NULL;
        if (v == NULL || v->kind != 't') return FERRY_OK; /* no key here: the other image has it */
        if (put_key_part(&ch->scratch, (const char *)v->data, v->len) != FERRY_OK)
            return nomem(err);
    }
    if (ch->scratch.len >= HELD_TRUNCATE) return nomem(err);
    int rc = hold(ch, xid, ch->scratch.data, (uint32_t)ch->scratch.len, err);
    if (rc == FERRY_OK && ch->phase == CHUNK_WINDOW)
        rc = remember(ch, (const uint8_t *)ch->scratch.data, ch->scratch.len, err);
    return rc;
}

int ferry__pg_chunk_truncated(struct ferry_pg_chunk *ch, uint32_t xid, struct ferry_error *err)
{
    if (ch->phase == CHUNK_DONE) return FERRY_OK;
    if (ch->phase == CHUNK_WINDOW) ch->truncated = true;
    return hold(ch, xid, NULL, HELD_TRUNCATE, err);
}

int ferry__pg_chunk_at_hw(struct ferry_pg_chunk *ch, struct ferry_error *err)
{
    uint8_t *b = (uint8_t *)ch->held.data;
    size_t at = 0, kept = 0;
    while (at < ch->held.len) {
        uint32_t head[2];
        memcpy(head, b + at, sizeof head);
        size_t size = sizeof head + (head[1] == HELD_TRUNCATE ? 0 : head[1]);
        if (!ferry__pg_snap_visible(&ch->snap, head[0])) {
            /* committed, yet after the chunk's snapshot: the stream's value is newer */
            if (head[1] == HELD_TRUNCATE)
                ch->truncated = true;
            else if (remember(ch, b + at + sizeof head, head[1], err) != FERRY_OK)
                return FERRY_ENOMEM;
            memmove(b + kept, b + at, size);
            kept += size;
        }
        at += size;
    }
    ch->held.len = kept; /* what this snapshot sees, every later one sees */
    return FERRY_OK;
}

int ferry__pg_chunk_rows(const struct ferry_pg_chunk *ch)
{
    return ch->rows && !ch->truncated ? PQntuples(ch->rows) : 0;
}

/* Row r's key, serialised into ch->scratch. */
static int row_key(struct ferry_pg_chunk *ch, int r)
{
    const struct ferry_schema *sc = ch->t->sc;
    ferry_buf_reset(&ch->scratch);
    for (int k = 0; k < sc->n_key; k++) {
        int f = sc->key[k];
        if (put_key_part(&ch->scratch, PQgetvalue(ch->rows, r, f),
                         (uint32_t)PQgetlength(ch->rows, r, f)) != FERRY_OK)
            return FERRY_ENOMEM;
    }
    return FERRY_OK;
}

bool ferry__pg_chunk_dropped(struct ferry_pg_chunk *ch, int r)
{
    if (ch->n_keys == 0) return false;
    if (row_key(ch, r) != FERRY_OK) return false;
    return seen(ch, (const uint8_t *)ch->scratch.data, ch->scratch.len, NULL);
}

int ferry__pg_chunk_written(struct ferry_pg_chunk *ch, int r, const char **tag, size_t *n,
                            struct ferry_error *err)
{
    static const char hex[] = "0123456789abcdef";
    if (row_key(ch, r) != FERRY_OK) return nomem(err);
    ferry_buf_reset(&ch->after);
    if (ferry_buf_append(&ch->after, ch->scratch.data, ch->scratch.len) != FERRY_OK)
        return nomem(err);
    /* the tag: "c" and the key in hex, built in scratch after the key */
    size_t klen = ch->scratch.len;
    if (ferry_buf_reserve(&ch->scratch, 2 * klen + 2) != FERRY_OK) return nomem(err);
    char *t = ch->scratch.data + klen;
    t[0] = 'c';
    for (size_t i = 0; i < klen; i++) {
        t[1 + 2 * i] = hex[(uint8_t)ch->scratch.data[i] >> 4];
        t[2 + 2 * i] = hex[(uint8_t)ch->scratch.data[i] & 15];
    }
    *tag = t;
    *n = 1 + 2 * klen;
    return FERRY_OK;
}

void ferry__pg_chunk_next(struct ferry_pg_chunk *ch)
{
    if (ch->rows) PQclear(ch->rows);
    ch->rows = NULL;
    keys_clear(ch);
    ch->phase = ch->last ? CHUNK_DONE : CHUNK_IDLE;
    if (ch->phase == CHUNK_DONE) ferry_buf_release(&ch->held);
}
