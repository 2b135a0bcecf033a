/* connectors/postgres/pg_spool.c - streamed in-progress transactions kept on local disk until
 * their commit (contract in pg_spool.h). Calls stdio and core only. Called by pg_demux.c
 * (the session's reader) and tests/unit/test_pg_spool.c. */
#include "connectors/postgres/pg_spool.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/bytes.h"
#include "ferry/core.h"

#define SPOOL_BUFFER (64 * 1024) /* stdio buffer per open spool */
#define XLOGDATA_HEADER 25       /* 'w', WAL start, WAL end, send time: then the message */

/* A record whose subtransaction xid is newer than every earlier record's: where the
 * records of that xid and every newer one begin. */
struct sub {
    uint32_t xid;
    off_t at; /* the file's length before the record */
};

struct ferry_pg_spool {
    uint32_t xid;
    FILE *f;
    char *path;       /* where it was made (unlinked at once): for messages */
    off_t len;        /* bytes written */
    struct sub *subs; /* xid and at both increase */
    int n_subs, cap_subs;
};

void ferry__pg_spools_init(struct ferry_pg_spools *s, const char *what)
{
    memset(s, 0, sizeof *s);
    s->what = what;
}

static void spool_free(struct ferry_pg_spool *p)
{
    if (p == NULL) return;
    if (p->f != NULL) fclose(p->f);
    ferry_free(p->path);
    ferry_free(p->subs);
    ferry_free(p);
}

void ferry__pg_spools_release(struct ferry_pg_spools *s)
{
    for (int i = 0; i < s->n; i++)
        spool_free(s->v[i]);
    ferry_free(s->v);
    const char *what = s->what;
    ferry__pg_spools_init(s, what);
}

static int nomem(const struct ferry_pg_spools *s, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", "%s: out of memory", s->what);
}

static int io_error(const struct ferry_pg_spools *s, const struct ferry_pg_spool *p,
                    const char *doing, struct ferry_error *err)
{
    return ferry_error_set(err, errno == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "postgres",
                           "%s: %s the streamed transaction %u in %s (a deleted temporary file; "
                           "$TMPDIR sets its folder): %s",
                           s->what, doing, p->xid, p->path, strerror(errno ? errno : EIO));
}

static int find(const struct ferry_pg_spools *s, uint32_t xid)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i]->xid == xid) return i;
    return -1;
}

static void drop_at(struct ferry_pg_spools *s, int i)
{
    struct ferry_pg_spool *p = s->v[i];
    if (s->open == p) s->open = NULL;
    if (s->replaying == p) s->replaying = NULL;
    spool_free(p);
    s->v[i] = s->v[--s->n];
}

/* A new spool file: made, opened and unlinked, so that nothing is left behind by a crash. */
static int spool_new(struct ferry_pg_spools *s, uint32_t xid, struct ferry_pg_spool **out,
                     struct ferry_error *err)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 4;
        void *v = ferry_realloc(s->v, (size_t)cap * sizeof *s->v);
        if (v == NULL) return nomem(s, err);
        s->v = v;
        s->cap = cap;
    }
    struct ferry_pg_spool *p = ferry_calloc(1, sizeof *p);
    if (p == NULL) return nomem(s, err);
    p->xid = xid;
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0') dir = "/tmp";
    p->path = ferry_asprintf("%s/ferry-txn-XXXXXX", dir);
    if (p->path == NULL) {
        ferry_free(p);
        return nomem(s, err);
    }
    int fd = mkstemp(p->path);
    if (fd < 0 || (unlink(p->path), (p->f = fdopen(fd, "w+b")) == NULL)) {
        int rc = ferry_error_set(err, FERRY_EIO, "postgres",
                                 "%s: cannot make a file for the streamed transaction %u in %s "
                                 "($TMPDIR sets the folder): %s",
                                 s->what, xid, dir, strerror(errno));
        if (fd >= 0) close(fd);
        spool_free(p);
        return rc;
    }
    /* stdio's default buffer is a page: a write and a read system call per 4 kB */
    setvbuf(p->f, NULL, _IOFBF, SPOOL_BUFFER);
    s->v[s->n++] = p;
    *out = p;
    return FERRY_OK;
}

static void spool_empty(struct ferry_pg_spool *p)
{
    p->n_subs = 0;
    p->len = 0;
    fflush(p->f);
    if (ftruncate(fileno(p->f), 0) == 0) fseeko(p->f, 0, SEEK_SET);
}

int ferry__pg_spool_start(struct ferry_pg_spools *s, uint32_t xid, bool first,
                          struct ferry_error *err)
{
    int i = find(s, xid);
    if (i < 0 && !first)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               "%s: the server continued the streamed transaction %u, whose "
                               "start this session never received",
                               s->what, xid);
    if (i >= 0) {
        s->open = s->v[i];
        if (first) spool_empty(s->open);
        return FERRY_OK;
    }
    return spool_new(s, xid, &s->open, err);
}

void ferry__pg_spool_stop(struct ferry_pg_spools *s)
{
    s->open = NULL;
}

/* xid's distance after the top-level xid: subtransactions get theirs later, so larger (an
 * xid counts modulo 2^32). */
static uint32_t after_top(const struct ferry_pg_spool *p, uint32_t xid)
{
    return xid - p->xid;
}

/* Remembers a record of an xid newer than every earlier one: where a rollback of it, or of
 * an older subtransaction still open (all its records come after this one's), cuts. */
static int note_sub(struct ferry_pg_spools *s, struct ferry_pg_spool *p, uint32_t xid,
                    struct ferry_error *err)
{
    uint32_t d = after_top(p, xid);
    if (d == 0 || (p->n_subs > 0 && d <= after_top(p, p->subs[p->n_subs - 1].xid))) return FERRY_OK;
    if (p->n_subs == p->cap_subs) {
        int cap = p->cap_subs ? p->cap_subs * 2 : 8;
        void *v = ferry_realloc(p->subs, (size_t)cap * sizeof *p->subs);
        if (v == NULL) return nomem(s, err);
        p->subs = v;
        p->cap_subs = cap;
    }
    p->subs[p->n_subs++] = (struct sub){.xid = xid, .at = p->len};
    return FERRY_OK;
}

int ferry__pg_spool_put(struct ferry_pg_spools *s, const uint8_t *frame, size_t n, size_t at,
                        struct ferry_error *err)
{
    struct ferry_pg_spool *p = s->open;
    if (p == NULL || at + 5 > n || n > UINT32_MAX)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", "%s: a streamed message %s", s->what,
                               p == NULL ? "outside a stream block" : "too short for its xid");
    int rc = note_sub(s, p, ferry__be32(frame + at + 1), err);
    if (rc != FERRY_OK) return rc;
    uint8_t len[4];
    uint32_t k = (uint32_t)(n - 4);
    ferry__put_be32(len, k);
    errno = 0;
    if (fwrite(len, 1, 4, p->f) != 4 || fwrite(frame, 1, at + 1, p->f) != at + 1 ||
        fwrite(frame + at + 5, 1, n - at - 5, p->f) != n - at - 5)
        return io_error(s, p, "writing", err);
    p->len += 4 + (off_t)k;
    return FERRY_OK;
}

/* The length of the record at the file's position into *k: 0 at the end of the file. */
static int record_length(struct ferry_pg_spools *s, struct ferry_pg_spool *p, uint32_t *k,
                         struct ferry_error *err)
{
    uint8_t len[4];
    errno = 0;
    size_t got = fread(len, 1, 4, p->f);
    *k = 0;
    if (got == 0 && feof(p->f)) return FERRY_OK;
    *k = ferry__be32(len);
    return got == 4 && *k > 0 && *k <= INT32_MAX ? FERRY_OK : io_error(s, p, "reading", err);
}

/* The Relation and Type records from `at` to the end, appended to keep. pgoutput sends a
 * table's Relation message with the table's first change in the streamed transaction, tagged
 * with that change's subtransaction, and not again in the transaction: cut with a rolled-back
 * subtransaction, the top level's later changes of the table would name a relation never
 * described in the session. Kept, it is at most one description too many (a schema changed
 * in the rolled-back subtransaction is sent again after it). */
static int metadata_after(struct ferry_pg_spools *s, struct ferry_pg_spool *p, off_t at,
                          struct ferry_buf *keep, struct ferry_error *err)
{
    errno = 0;
    if (fflush(p->f) != 0 || fseeko(p->f, at, SEEK_SET) != 0) return io_error(s, p, "reading", err);
    struct ferry_buf rec;
    ferry_buf_init(&rec, 0);
    int rc = FERRY_OK;
    for (off_t off = at; rc == FERRY_OK && off < p->len;) {
        uint32_t k = 0;
        rc = record_length(s, p, &k, err);
        if (rc == FERRY_OK && k == 0) rc = io_error(s, p, "reading", err); /* short file */
        if (rc == FERRY_OK && ferry_buf_reserve(&rec, k) != FERRY_OK) rc = nomem(s, err);
        if (rc == FERRY_OK && fread(rec.data, 1, k, p->f) != k) rc = io_error(s, p, "reading", err);
        char kind = rc == FERRY_OK && k > XLOGDATA_HEADER ? rec.data[XLOGDATA_HEADER] : 0;
        uint8_t len[4];
        ferry__put_be32(len, k);
        if ((kind == 'R' || kind == 'Y') && (ferry_buf_append(keep, len, 4) != FERRY_OK ||
                                             ferry_buf_append(keep, rec.data, k) != FERRY_OK))
            rc = nomem(s, err);
        off += 4 + (off_t)k;
    }
    ferry_buf_release(&rec);
    return rc;
}

int ferry__pg_spool_abort(struct ferry_pg_spools *s, uint32_t xid, uint32_t subxid,
                          struct ferry_error *err)
{
    int i = find(s, xid);
    if (i < 0) return FERRY_OK;
    struct ferry_pg_spool *p = s->v[i];
    if (subxid == xid) {
        drop_at(s, i);
        return FERRY_OK;
    }
    /* The records made since the subtransaction began go: those of xids from subxid on (it
     * and the subtransactions nested in it get theirs after it began; every earlier record
     * is of an older xid), but for their Relation and Type messages. Its own first record
     * may follow a nested one's (xids are given at the first change, a parent's first). */
    uint32_t d = after_top(p, subxid);
    int lo = 0, hi = p->n_subs; /* the first remembered record of an xid from subxid on */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (after_top(p, p->subs[mid].xid) < d)
            lo = mid + 1;
        else
            hi = mid;
    }
    int k = lo;
    if (k == p->n_subs) return FERRY_OK; /* it changed nothing published */
    off_t cut = p->subs[k].at;
    p->n_subs = k;
    struct ferry_buf keep;
    ferry_buf_init(&keep, 0);
    int rc = metadata_after(s, p, cut, &keep, err);
    errno = 0;
    if (rc == FERRY_OK && (ftruncate(fileno(p->f), cut) != 0 || fseeko(p->f, cut, SEEK_SET) != 0 ||
                           (keep.len > 0 && fwrite(keep.data, 1, keep.len, p->f) != keep.len)))
        rc = io_error(s, p, "cutting", err);
    p->len = cut + (off_t)keep.len;
    ferry_buf_release(&keep);
    return rc;
}

int ferry__pg_spool_replay(struct ferry_pg_spools *s, uint32_t xid, struct ferry_error *err)
{
    int i = find(s, xid);
    s->replaying = i < 0 ? NULL : s->v[i];
    if (s->replaying == NULL) return FERRY_OK;
    struct ferry_pg_spool *p = s->replaying;
    if (s->open == p) s->open = NULL;
    errno = 0;
    if (fflush(p->f) != 0 || fseeko(p->f, 0, SEEK_SET) != 0) return io_error(s, p, "reading", err);
    return FERRY_OK;
}

int ferry__pg_spool_next(struct ferry_pg_spools *s, char **frame, int *n, struct ferry_error *err)
{
    *frame = NULL;
    *n = 0;
    struct ferry_pg_spool *p = s->replaying;
    if (p == NULL) return FERRY_OK;
    uint32_t k = 0;
    int rc = record_length(s, p, &k, err);
    if (rc != FERRY_OK) return rc;
    if (k == 0) {
        drop_at(s, find(s, p->xid));
        return FERRY_OK;
    }
    char *buf = ferry_malloc(k);
    if (buf == NULL) return nomem(s, err);
    if (fread(buf, 1, k, p->f) != k) {
        ferry_free(buf);
        return io_error(s, p, "reading", err);
    }
    *frame = buf;
    *n = (int)k;
    return FERRY_OK;
}
