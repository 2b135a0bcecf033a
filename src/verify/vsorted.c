/* verify/vsorted.c - the (key, row hash) list of a side read through ferry, sorted in the
 * database sides' key order, in bounded memory (docs/internals/verify.md, "Memory").
 *
 * Rows are added in any order. While they fit the budget they stay in memory; above it the
 * rows held are sorted and written as one run to a temporary file (TMPDIR, unlinked as soon
 * as it is created: nothing is left behind on failure or kill -9), and memory starts again.
 * At finish a list that never spilled is sorted in memory with prefix sums of the hashes;
 * otherwise the runs are merged (a heap over one buffered reader per run) into a second file
 * of length-prefixed records, and a sparse index keeps every PAGE-th record's key, offset
 * and prefix sum. The position of a key, the prefix sum at a position and the row at a
 * position then read one page of that file (one page cached). Rows of equal keys are
 * ordered by hash on both paths. Record: u32 length of what follows, i64 hash, per key part
 * a byte 0 (NULL) or 1 and the text with its NUL. Called by backend_stream.c. Not
 * thread-safe; a row returned is valid until the next call on the list. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "verify/verify.h"

#define PAGE 512
#define RBUF (64 * 1024)

struct ixent {
    struct ferry_vkey key; /* the first record of the page */
    int64_t off;           /* its offset in the merged file */
    uint64_t prefix;       /* sum of the hashes before it */
};

struct wbuf {
    int fd;
    int64_t off; /* bytes written so far (flushed + held) */
    uint8_t *p;
    size_t n, cap;
};

struct ferry_vsorted {
    int n_key;
    bool *kint;
    int64_t budget, mem;
    char name[256];
    struct ferry_vrows rows; /* in memory: the rows held (sorted once finished) */
    uint64_t *prefix;        /* in memory, finished: prefix[i] = sum of hashes of [0, i) */
    int64_t n;
    uint64_t sum;
    /* spilled */
    struct wbuf runs; /* the runs file */
    int64_t *run_off; /* run i is [run_off[i], run_off[i + 1]) */
    int n_runs, cap_runs;
    int merged_fd;
    int64_t merged_end;
    struct ixent *ix;
    int64_t n_ix, cap_ix;
    /* the page cached */
    int64_t page; /* -1: none */
    uint8_t *pbuf;
    size_t pcap;
    struct ferry_vrow prow[PAGE];
    char **pparts;
    int pn;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

static int io_error(const struct ferry_vsorted *v, const char *what, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_EIO, "verify", "verify: %s: temporary sort file: %s: %s",
                           v->name, what, strerror(errno));
}

/* Two normal texts of integers ("-12", "7"; no leading zeros) by value. */
static int int_text_cmp(const char *x, const char *y)
{
    bool nx = x[0] == '-', ny = y[0] == '-';
    if (nx != ny) return nx ? -1 : 1;
    size_t lx = strlen(x), ly = strlen(y);
    int c = lx != ly ? (lx < ly ? -1 : 1) : strcmp(x, y);
    return nx ? -c : c;
}

int ferry__vkey_order(const struct ferry_vkey *a, const struct ferry_vkey *b, int n,
                      const bool *kint)
{
    for (int i = 0; i < n; i++) {
        const char *x = a->part[i], *y = b->part[i];
        if (x == NULL || y == NULL) {
            if (x != y) return x == NULL ? -1 : 1;
            continue;
        }
        int c = kint && kint[i] ? int_text_cmp(x, y) : strcmp(x, y);
        if (c != 0) return c;
    }
    return 0;
}

static _Thread_local int sort_nkey;
static _Thread_local const bool *sort_kint;

/* Key order, then hash: rows of equal keys come out in the same order from memory and from
 * merged runs. */
static int vrow_order(const struct ferry_vrow *a, const struct ferry_vrow *b, int n,
                      const bool *kint)
{
    int c = ferry__vkey_order(&a->key, &b->key, n, kint);
    if (c != 0 || a->hash == b->hash) return c;
    return a->hash < b->hash ? -1 : 1;
}

static int row_cmp(const void *a, const void *b)
{
    return vrow_order(a, b, sort_nkey, sort_kint);
}

static void sort_rows(struct ferry_vsorted *v)
{
    sort_nkey = v->n_key;
    sort_kint = v->kint;
    if (v->rows.n > 1) qsort(v->rows.v, (size_t)v->rows.n, sizeof *v->rows.v, row_cmp);
}

static _Thread_local int64_t memory_setting;

void ferry__vsorted_set_memory(int64_t memory)
{
    memory_setting = memory;
}

int64_t ferry__vsorted_budget(void)
{
    int64_t memory = memory_setting;
    const char *e = getenv("FERRY_VERIFY_SORT_BYTES"); /* tests: force spilling */
    if (e && *e) {
        long long b = strtoll(e, NULL, 10);
        if (b > 0) return (int64_t)b;
    }
    if (memory <= 0) memory = INT64_C(256) << 20;
    int64_t b = memory / 4;
    return b < (INT64_C(1) << 20) ? (INT64_C(1) << 20) : b;
}

int ferry__vsorted_new(int n_key, const bool *kint, int64_t budget, const char *name,
                       struct ferry_vsorted **out, struct ferry_error *err)
{
    struct ferry_vsorted *v = ferry_calloc(1, sizeof *v);
    if (v == NULL) return oom(err);
    v->n_key = n_key;
    v->budget = budget > 0 ? budget : INT64_MAX;
    v->runs.fd = v->merged_fd = -1;
    v->page = -1;
    snprintf(v->name, sizeof v->name, "%s", name ? name : "?");
    v->kint = ferry_calloc((size_t)n_key + 1, sizeof *v->kint);
    v->pparts = ferry_calloc((size_t)PAGE * (size_t)(n_key + 1), sizeof *v->pparts);
    if (v->kint == NULL || v->pparts == NULL) {
        ferry__vsorted_free(v);
        return oom(err);
    }
    for (int i = 0; i < n_key; i++)
        v->kint[i] = kint && kint[i];
    *out = v;
    return FERRY_OK;
}

/* ---- the temporary files ------------------------------------------------------------- */

static int temp_fd(const struct ferry_vsorted *v, int *fd, struct ferry_error *err)
{
    const char *tmp = getenv("TMPDIR");
    char *path = ferry_asprintf("%s/ferry-verify-sort-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (path == NULL) return oom(err);
    *fd = mkstemp(path);
    int rc = *fd < 0 ? io_error(v, path, err) : FERRY_OK;
    if (*fd >= 0) unlink(path); /* gone from the folder now; freed when closed */
    ferry_free(path);
    return rc;
}

static int wflush(const struct ferry_vsorted *v, struct wbuf *w, struct ferry_error *err)
{
    size_t done = 0;
    while (done < w->n) {
        ssize_t k = write(w->fd, w->p + done, w->n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return io_error(v, "write", err);
        done += (size_t)k;
    }
    w->n = 0;
    return FERRY_OK;
}

static int wput(const struct ferry_vsorted *v, struct wbuf *w, const void *p, size_t n,
                struct ferry_error *err)
{
    if (w->cap == 0) {
        if ((w->p = ferry_malloc(RBUF * 4)) == NULL) return oom(err);
        w->cap = RBUF * 4;
    }
    while (n > 0) {
        if (w->n == w->cap) {
            int rc = wflush(v, w, err);
            if (rc != FERRY_OK) return rc;
        }
        size_t k = n < w->cap - w->n ? n : w->cap - w->n;
        memcpy(w->p + w->n, p, k);
        w->n += k;
        w->off += (int64_t)k;
        p = (const uint8_t *)p + k;
        n -= k;
    }
    return FERRY_OK;
}

static int put_row(const struct ferry_vsorted *v, struct wbuf *w, const struct ferry_vkey *k,
                   int64_t hash, struct ferry_error *err)
{
    uint32_t len = 8;
    for (int i = 0; i < v->n_key; i++)
        len += 1 + (k->part[i] ? (uint32_t)strlen(k->part[i]) + 1 : 0);
    int rc = wput(v, w, &len, 4, err);
    if (rc == FERRY_OK) rc = wput(v, w, &hash, 8, err);
    for (int i = 0; i < v->n_key && rc == FERRY_OK; i++) {
        uint8_t there = k->part[i] != NULL;
        rc = wput(v, w, &there, 1, err);
        if (rc == FERRY_OK && there) rc = wput(v, w, k->part[i], strlen(k->part[i]) + 1, err);
    }
    return rc;
}

/* Parses the record body at p (len bytes, after its length) into row, its parts pointing
 * into p. FERRY_EIO when it does not parse (the file was changed under us). */
static int parse_row(const struct ferry_vsorted *v, const uint8_t *p, uint32_t len, char **parts,
                     struct ferry_vrow *row, struct ferry_error *err)
{
    if (len < 8) goto bad;
    memcpy(&row->hash, p, 8);
    size_t at = 8;
    for (int i = 0; i < v->n_key; i++) {
        if (at >= len) goto bad;
        parts[i] = NULL;
        if (p[at++] == 0) continue;
        const void *z = memchr(p + at, 0, len - at);
        if (z == NULL) goto bad;
        parts[i] = (char *)(p + at);
        at = (size_t)((const uint8_t *)z - p) + 1;
    }
    row->key.part = parts;
    return FERRY_OK;
bad:
    return ferry_error_set(err, FERRY_EIO, "verify", "verify: %s: temporary sort file corrupt",
                           v->name);
}

/* ---- adding rows and spilling runs ---------------------------------------------------- */

/* The rows held, sorted, appended to the runs file as one run. */
static int spill(struct ferry_vsorted *v, struct ferry_error *err)
{
    int rc = v->runs.fd < 0 ? temp_fd(v, &v->runs.fd, err) : FERRY_OK;
    if (rc == FERRY_OK && v->n_runs + 2 > v->cap_runs) {
        int cap = v->cap_runs ? v->cap_runs * 2 : 16;
        int64_t *o = ferry_realloc(v->run_off, sizeof *o * (size_t)cap);
        if (o == NULL) return oom(err);
        v->run_off = o;
        v->cap_runs = cap;
    }
    if (rc != FERRY_OK) return rc;
    sort_rows(v);
    v->run_off[v->n_runs] = v->runs.off;
    for (int64_t i = 0; i < v->rows.n && rc == FERRY_OK; i++)
        rc = put_row(v, &v->runs, &v->rows.v[i].key, v->rows.v[i].hash, err);
    if (rc == FERRY_OK) rc = wflush(v, &v->runs, err);
    if (rc != FERRY_OK) return rc;
    v->n_runs++;
    v->run_off[v->n_runs] = v->runs.off;
    for (int64_t i = 0; i < v->rows.n; i++)
        ferry__vkey_free(&v->rows.v[i].key, v->n_key);
    v->rows.n = 0;
    v->mem = (int64_t)sizeof(struct ferry_vrow) * v->rows.cap;
    return FERRY_OK;
}

int ferry__vsorted_add(struct ferry_vsorted *v, char **parts, int64_t hash, struct ferry_error *err)
{
    int64_t cap0 = v->rows.cap;
    int rc = ferry__vrows_push(&v->rows, parts, hash, err);
    if (rc != FERRY_OK) {
        struct ferry_vkey k = {parts};
        ferry__vkey_free(&k, v->n_key);
        return rc;
    }
    v->n++;
    v->sum += (uint64_t)hash;
    /* what malloc holds for it: the parts array and each text, 16 bytes of overhead each */
    int64_t m = 16 + 8 * (int64_t)(v->n_key + 1);
    for (int i = 0; i < v->n_key; i++)
        if (parts[i]) m += 16 + (int64_t)((strlen(parts[i]) + 16) & ~(size_t)15);
    v->mem += m + (int64_t)sizeof(struct ferry_vrow) * (v->rows.cap - cap0);
    return v->mem > v->budget ? spill(v, err) : FERRY_OK;
}

/* ---- merging ---------------------------------------------------------------------------- */

struct rreader {
    int64_t off, end; /* next byte of the file to read, end of the run */
    uint8_t *buf;
    size_t cap, pos, len;
    struct ferry_vrow row; /* the current record */
    char **parts;
    bool done;
};

static int rfill(const struct ferry_vsorted *v, struct rreader *r, size_t need,
                 struct ferry_error *err)
{
    if (r->len - r->pos >= need) return FERRY_OK;
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
    if (need > r->cap) {
        uint8_t *b = ferry_realloc(r->buf, need);
        if (b == NULL) return oom(err);
        r->buf = b;
        r->cap = need;
    }
    while (r->len < need) {
        size_t want = r->cap - r->len;
        if ((int64_t)want > r->end - r->off) want = (size_t)(r->end - r->off);
        if (want == 0)
            return ferry_error_set(err, FERRY_EIO, "verify",
                                   "verify: %s: temporary sort file short", v->name);
        ssize_t k = pread(v->runs.fd, r->buf + r->len, want, (off_t)r->off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return io_error(v, "read", err);
        r->len += (size_t)k;
        r->off += k;
    }
    return FERRY_OK;
}

static int rnext(const struct ferry_vsorted *v, struct rreader *r, struct ferry_error *err)
{
    if (r->pos == r->len && r->off == r->end) {
        r->done = true;
        return FERRY_OK;
    }
    uint32_t len;
    int rc = rfill(v, r, 4, err);
    if (rc != FERRY_OK) return rc;
    memcpy(&len, r->buf + r->pos, 4);
    if ((rc = rfill(v, r, 4 + (size_t)len, err)) != FERRY_OK) return rc;
    rc = parse_row(v, r->buf + r->pos + 4, len, r->parts, &r->row, err);
    r->pos += 4 + (size_t)len;
    return rc;
}

static bool rless(const struct ferry_vsorted *v, const struct rreader *a, const struct rreader *b)
{
    return vrow_order(&a->row, &b->row, v->n_key, v->kint) < 0;
}

static void sift_down(const struct ferry_vsorted *v, struct rreader **h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, m = i;
        if (l < n && rless(v, h[l], h[m])) m = l;
        if (l + 1 < n && rless(v, h[l + 1], h[m])) m = l + 1;
        if (m == i) return;
        struct rreader *x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static int index_add(struct ferry_vsorted *v, const struct ferry_vkey *k, int64_t off,
                     uint64_t prefix, struct ferry_error *err)
{
    if (v->n_ix == v->cap_ix) {
        int64_t cap = v->cap_ix ? v->cap_ix * 2 : 64;
        struct ixent *ix = ferry_realloc(v->ix, sizeof *ix * (size_t)cap);
        if (ix == NULL) return oom(err);
        v->ix = ix;
        v->cap_ix = cap;
    }
    char **parts = ferry_calloc((size_t)v->n_key + 1, sizeof *parts);
    if (parts == NULL) return oom(err);
    struct ixent *e = &v->ix[v->n_ix++];
    e->key.part = parts;
    e->off = off;
    e->prefix = prefix;
    for (int i = 0; i < v->n_key; i++)
        if (k->part[i] && (parts[i] = ferry_strdup(k->part[i])) == NULL) return oom(err);
    return FERRY_OK;
}

/* Every run merged into the merged file, the sparse index built on the way. */
static int merge(struct ferry_vsorted *v, struct ferry_error *err)
{
    int k = v->n_runs;
    struct rreader *rd = ferry_calloc((size_t)k, sizeof *rd);
    struct rreader **heap = ferry_calloc((size_t)k, sizeof *heap);
    struct wbuf w = {.fd = -1};
    int rc = rd && heap ? temp_fd(v, &w.fd, err) : oom(err);
    v->merged_fd = w.fd;
    int n = 0;
    size_t rbuf = RBUF; /* the readers' buffers within the budget (they grow for a long key) */
    if (v->budget / 2 / k < RBUF)
        rbuf = v->budget / 2 / k < 4096 ? 4096 : (size_t)(v->budget / 2 / k);
    for (int i = 0; i < k && rc == FERRY_OK; i++) {
        rd[i].off = v->run_off[i];
        rd[i].end = v->run_off[i + 1];
        rd[i].cap = rbuf;
        rd[i].buf = ferry_malloc(rbuf);
        rd[i].parts = ferry_calloc((size_t)v->n_key + 1, sizeof *rd[i].parts);
        if (rd[i].buf == NULL || rd[i].parts == NULL) rc = oom(err);
        if (rc == FERRY_OK) rc = rnext(v, &rd[i], err);
        if (rc == FERRY_OK && !rd[i].done) heap[n++] = &rd[i];
    }
    for (int i = n / 2 - 1; i >= 0 && rc == FERRY_OK; i--)
        sift_down(v, heap, n, i);
    int64_t at = 0;
    uint64_t prefix = 0;
    while (n > 0 && rc == FERRY_OK) {
        struct rreader *r = heap[0];
        if (at % PAGE == 0) rc = index_add(v, &r->row.key, w.off, prefix, err);
        if (rc == FERRY_OK) rc = put_row(v, &w, &r->row.key, r->row.hash, err);
        prefix += (uint64_t)r->row.hash;
        at++;
        if (rc == FERRY_OK) rc = rnext(v, r, err);
        if (r->done) heap[0] = heap[--n];
        sift_down(v, heap, n, 0);
    }
    if (rc == FERRY_OK) rc = wflush(v, &w, err);
    if (rc == FERRY_OK && at != v->n)
        rc = ferry_error_set(err, FERRY_EIO, "verify", "verify: %s: merged %lld of %lld rows",
                             v->name, (long long)at, (long long)v->n);
    v->merged_end = w.off;
    for (int i = 0; rd && i < k; i++) {
        ferry_free(rd[i].buf);
        ferry_free(rd[i].parts);
    }
    ferry_free(rd);
    ferry_free(heap);
    ferry_free(w.p);
    return rc;
}

int ferry__vsorted_finish(struct ferry_vsorted *v, struct ferry_error *err)
{
    if (v->n_runs == 0) { /* it all fits: sorted in memory, with prefix sums */
        sort_rows(v);
        v->prefix = ferry_calloc((size_t)v->rows.n + 1, sizeof *v->prefix);
        if (v->prefix == NULL) return oom(err);
        for (int64_t i = 0; i < v->rows.n; i++)
            v->prefix[i + 1] = v->prefix[i] + (uint64_t)v->rows.v[i].hash;
        return FERRY_OK;
    }
    int rc = v->rows.n > 0 ? spill(v, err) : FERRY_OK;
    ferry__vrows_clear(&v->rows, v->n_key);
    if (rc == FERRY_OK) rc = merge(v, err);
    close(v->runs.fd); /* the runs are merged: their space is freed */
    v->runs.fd = -1;
    ferry_free(v->runs.p);
    v->runs.p = NULL;
    v->runs.cap = 0;
    return rc;
}

/* ---- questions ---------------------------------------------------------------------------- */

int64_t ferry__vsorted_count(const struct ferry_vsorted *v)
{
    return v->n;
}

uint64_t ferry__vsorted_sum(const struct ferry_vsorted *v)
{
    return v->sum;
}

int ferry__vsorted_runs(const struct ferry_vsorted *v)
{
    return v->n_runs;
}

static int load_page(struct ferry_vsorted *v, int64_t p, struct ferry_error *err)
{
    if (v->page == p) return FERRY_OK;
    v->page = -1;
    int64_t off = v->ix[p].off, end = p + 1 < v->n_ix ? v->ix[p + 1].off : v->merged_end;
    size_t n = (size_t)(end - off);
    if (n > v->pcap) {
        uint8_t *b = ferry_realloc(v->pbuf, n);
        if (b == NULL) return oom(err);
        v->pbuf = b;
        v->pcap = n;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(v->merged_fd, v->pbuf + got, n - got, (off_t)(off + (int64_t)got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return io_error(v, "read", err);
        got += (size_t)k;
    }
    size_t at = 0;
    int i = 0;
    for (; at < n && i < PAGE; i++) {
        uint32_t len;
        if (n - at < 4) break;
        memcpy(&len, v->pbuf + at, 4);
        if (n - at - 4 < len) break;
        int rc = parse_row(v, v->pbuf + at + 4, len, v->pparts + (size_t)i * (size_t)(v->n_key + 1),
                           &v->prow[i], err);
        if (rc != FERRY_OK) return rc;
        at += 4 + (size_t)len;
    }
    int64_t want = p + 1 < v->n_ix ? PAGE : v->n - p * PAGE;
    if (at != n || i != want)
        return ferry_error_set(err, FERRY_EIO, "verify", "verify: %s: temporary sort file corrupt",
                               v->name);
    v->pn = i;
    v->page = p;
    return FERRY_OK;
}

/* Whether row x comes before the first row at or after k (after k only, unless incl). */
static bool before(const struct ferry_vsorted *v, const struct ferry_vkey *x,
                   const struct ferry_vkey *k, bool incl)
{
    int c = ferry__vkey_order(x, k, v->n_key, v->kint);
    return c < 0 || (c == 0 && !incl);
}

int ferry__vsorted_after(struct ferry_vsorted *v, const struct ferry_vkey *k, bool incl,
                         int64_t *pos, struct ferry_error *err)
{
    *pos = 0;
    if (k == NULL) return FERRY_OK;
    int64_t lo = 0, hi = v->prefix ? v->rows.n : v->n_ix;
    while (lo < hi) { /* first row (in memory) or page (spilled) not before k */
        int64_t mid = lo + (hi - lo) / 2;
        const struct ferry_vkey *x = v->prefix ? &v->rows.v[mid].key : &v->ix[mid].key;
        if (before(v, x, k, incl))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (v->prefix || lo == 0) {
        *pos = lo;
        return FERRY_OK;
    }
    int rc = load_page(v, lo - 1, err); /* the answer is in the page before, or starts lo */
    if (rc != FERRY_OK) return rc;
    int i = 1;
    while (i < v->pn && before(v, &v->prow[i].key, k, incl))
        i++;
    *pos = (lo - 1) * PAGE + i;
    return FERRY_OK;
}

int ferry__vsorted_prefix(struct ferry_vsorted *v, int64_t i, uint64_t *sum,
                          struct ferry_error *err)
{
    if (v->prefix || i >= v->n) {
        *sum = v->prefix ? v->prefix[i] : v->sum;
        return FERRY_OK;
    }
    int rc = load_page(v, i / PAGE, err);
    if (rc != FERRY_OK) return rc;
    uint64_t s = v->ix[i / PAGE].prefix;
    for (int64_t j = (i / PAGE) * PAGE; j < i; j++)
        s += (uint64_t)v->prow[j % PAGE].hash;
    *sum = s;
    return FERRY_OK;
}

int ferry__vsorted_row(struct ferry_vsorted *v, int64_t i, const struct ferry_vrow **row,
                       struct ferry_error *err)
{
    if (v->prefix) {
        *row = &v->rows.v[i];
        return FERRY_OK;
    }
    int rc = load_page(v, i / PAGE, err);
    *row = rc == FERRY_OK ? &v->prow[i % PAGE] : NULL;
    return rc;
}

void ferry__vsorted_free(struct ferry_vsorted *v)
{
    if (v == NULL) return;
    ferry__vrows_clear(&v->rows, v->n_key);
    ferry_free(v->prefix);
    if (v->runs.fd >= 0) close(v->runs.fd);
    if (v->merged_fd >= 0) close(v->merged_fd);
    ferry_free(v->runs.p);
    ferry_free(v->run_off);
    for (int64_t i = 0; i < v->n_ix; i++)
        ferry__vkey_free(&v->ix[i].key, v->n_key);
    ferry_free(v->ix);
    ferry_free(v->pbuf);
    ferry_free(v->pparts);
    ferry_free(v->kint);
    ferry_free(v);
}
