/* verify/verify.c - `ferry verify`: does the destination hold what the source holds?
 *
 * Owns the plan of one verification (which columns are compared, named how on each side,
 * from the source's discovered schema and the pipeline's transforms), the chunk walk
 * (digest a key range on both sides; when (count, sum) differ, split it at keys the
 * larger side returns, `fanout` ways, until a chunk holds at most `chunk_rows` rows, then
 * compare row hashes key by key), the second pass that re-reads differing keys in a fresh
 * snapshot ("changed during check"), the report and its events. Calls the source
 * connector (discover), the transform compiler (the destination schema), the database
 * sides through the connectors' verify_open slot (connectors/postgres/pg_verify.c,
 * connectors/sqlite/sqlite_verify.c) and repair.c. Called by cli/cmd_verify.c and the
 * runner (verify: after_run); its stream side (ferry__vside_stream_open) also by
 * connectors/s3/s3_verify.c, over the s3 source. docs/internals/verify.md explains the
 * design. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ferry/connector.h"
#include "ferry/event.h"
#include "ferry/failpoint.h"
#include "pipeline/transform.h"
#include "store/store.h"
#include "verify/verify.h"

#define MAX_KEPT 100000  /* differing keys kept for the re-check and repair */
#define MAX_RECHECK 2000 /* keys re-read one by one in the second pass */
#define MAX_CHUNK_EVENTS 200

struct diff {
    enum ferry_vdiff kind;
    struct ferry_vkey key;
    int64_t src_hash, dst_hash;
    bool in_src, in_dst;
};

struct walk {
    const struct ferry_verify_opts *o;
    struct ferry_vside *src, *dst;
    const struct ferry_vtable *st; /* source table (for key types) */
    int n_key;
    struct ferry_verify_resource *res;
    struct diff *diffs;
    int64_t n_diffs, cap_diffs;
    int64_t events;
    ferry_verify_event_fn on_event;
    void *event_ctx;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "verify", "out of memory");
}

/* ---- which columns are compared ------------------------------------------------------- */

struct tcol {
    char *name;
    char *src;
    enum ferry_vhow how;
    enum ferry_type src_type;
    char *why; /* not compared: the transform that makes it so */
};

static void tcols_free(struct tcol *v, int n)
{
    for (int i = 0; i < n; i++) {
        ferry_free(v[i].name);
        ferry_free(v[i].src);
        ferry_free(v[i].why);
    }
    ferry_free(v);
}

static int tfind(struct tcol *v, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].name, name)) return i;
    return -1;
}

static bool text_like(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT ||
           t == FERRY_TYPE_BINARY;
}

static const char *scalar_of(struct ferry_cfg *node, const char *key)
{
    struct ferry_cfg *c = ferry_cfg_get(node, key);
    return c && c->kind == FERRY_CFG_SCALAR ? c->scalar : NULL;
}

static int set_why(struct tcol *c, const char *why, struct ferry_error *err)
{
    ferry_free(c->why);
    c->why = ferry_strdup(why);
    return c->why ? FERRY_OK : oom(err);
}

/* Follows the transforms of the resource by column name: who comes from which source
 * column, and what can only be compared as written (hashes of text PostgreSQL can redo)
 * or not at all (hmac, mask, cast, add). */
static int trace_columns(const struct ferry_pipeline_spec *p, const char *resource,
                         const struct ferry_schema *in, struct tcol **out, int *n_out,
                         struct ferry_error *err)
{
    int n = in->n_fields, rc = FERRY_OK;
    struct tcol *v = ferry_calloc((size_t)n + (size_t)p->n_transforms + 1, sizeof *v);
    if (v == NULL) return oom(err);
    for (int i = 0; i < n; i++) {
        v[i].name = ferry_strdup(in->fields[i].name);
        v[i].src = ferry_strdup(in->fields[i].name);
        v[i].src_type = in->fields[i].type;
        if (!v[i].name || !v[i].src) rc = oom(err);
    }
    for (int ti = 0; ti < p->n_transforms && rc == FERRY_OK; ti++) {
        const struct ferry_transform_spec *t = &p->transforms[ti];
        if (t->resource && strcmp(t->resource, resource) != 0) continue;
        if (!strcmp(t->kind, "drop") || !strcmp(t->kind, "select")) {
            char **cols = NULL;
            int nc = 0;
            rc = ferry_cfg_strv(t->node, t->kind, true, &cols, &nc, err);
            if (rc != FERRY_OK) break;
            struct tcol *nv = ferry_calloc((size_t)n + (size_t)p->n_transforms + 1, sizeof *nv);
            if (nv == NULL) {
                ferry_cfg_strv_free(cols);
                rc = oom(err);
                break;
            }
            int m = 0;
            bool drop = !strcmp(t->kind, "drop");
            if (drop) {
                for (int i = 0; i < n; i++) {
                    bool listed = false;
                    for (int j = 0; j < nc; j++)
                        listed |= !strcmp(cols[j], v[i].name);
                    if (listed) {
                        ferry_free(v[i].name);
                        ferry_free(v[i].src);
                        ferry_free(v[i].why);
                    } else {
                        nv[m++] = v[i];
                    }
                }
            } else {
                for (int j = 0; j < nc; j++) {
                    int i = tfind(v, n, cols[j]);
                    if (i >= 0) {
                        nv[m++] = v[i];
                        v[i].name = NULL; /* moved */
                    }
                }
                for (int i = 0; i < n; i++)
                    if (v[i].name) {
                        ferry_free(v[i].name);
                        ferry_free(v[i].src);
                        ferry_free(v[i].why);
                    }
            }
            ferry_free(v);
            v = nv;
            n = m;
            ferry_cfg_strv_free(cols);
        } else if (!strcmp(t->kind, "rename")) {
            struct ferry_cfg *kn = ferry_cfg_get(t->node, "rename");
            for (int j = 0; kn && j < kn->n_children && rc == FERRY_OK; j++) {
                struct ferry_cfg *e = kn->children[j];
                int i = tfind(v, n, e->key);
                if (i < 0 || e->kind != FERRY_CFG_SCALAR) continue;
                char *nn = ferry_strdup(e->scalar);
                if (nn == NULL)
                    rc = oom(err);
                else {
                    ferry_free(v[i].name);
                    v[i].name = nn;
                }
            }
        } else if (!strcmp(t->kind, "hash")) {
            const char *col = scalar_of(t->node, "column"), *algo = scalar_of(t->node, "hash");
            int i = col ? tfind(v, n, col) : -1;
            if (i < 0) continue;
            if (algo && !strcmp(algo, "sha256") && v[i].how == FERRY_VHOW_PLAIN &&
                text_like(v[i].src_type))
                v[i].how = FERRY_VHOW_SHA256;
            else
                rc = set_why(&v[i],
                             algo && !strcmp(algo, "sha256") ? "hash: sha256 of a non-text value"
                                                             : "hash: hmac_sha256",
                             err);
        } else if (!strcmp(t->kind, "mask") || !strcmp(t->kind, "cast")) {
            const char *col = scalar_of(t->node, t->kind);
            int i = col ? tfind(v, n, col) : -1;
            if (i >= 0) rc = set_why(&v[i], t->kind, err);
        } else if (!strcmp(t->kind, "add")) {
            const char *name = scalar_of(t->node, "add");
            if (name == NULL) continue;
            v[n].name = ferry_strdup(name);
            v[n].src = ferry_strdup(name);
            v[n].why = ferry_strdup("add");
            if (!v[n].name || !v[n].src || !v[n].why) rc = oom(err);
            n++;
        } else if (!strcmp(t->kind, "filter")) {
            rc = ferry_cfg_error(err, t->node,
                                 "verify: resource %s has a filter transform: the destination "
                                 "is meant to hold fewer rows than the source, which verify "
                                 "cannot compare yet",
                                 resource);
        }
    }
    if (rc != FERRY_OK) {
        tcols_free(v, n);
        return rc;
    }
    *out = v;
    *n_out = n;
    return FERRY_OK;
}

/* ---- diffs ------------------------------------------------------------------------------ */

static _Thread_local int sort_nkey;

static int key_cmp(const struct ferry_vkey *a, const struct ferry_vkey *b, int n)
{
    for (int i = 0; i < n; i++) {
        const char *x = a->part[i], *y = b->part[i];
        if (x == NULL || y == NULL) {
            if (x != y) return x == NULL ? -1 : 1;
            continue;
        }
        int c = strcmp(x, y);
        if (c != 0) return c;
    }
    return 0;
}

static int row_cmp(const void *a, const void *b)
{
    return key_cmp(&((const struct ferry_vrow *)a)->key, &((const struct ferry_vrow *)b)->key,
                   sort_nkey);
}

static char *key_display(const struct ferry_vkey *k, int n)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (n > 1) ferry_buf_append(&b, "(", 1);
    for (int i = 0; i < n; i++) {
        if (i > 0) ferry_buf_append(&b, ", ", 2);
        const char *p = k->part[i] ? k->part[i] : "NULL";
        ferry_buf_append(&b, p, strlen(p));
    }
    if (n > 1) ferry_buf_append(&b, ")", 1);
    return ferry_buf_take(&b);
}

static int key_copy(const struct ferry_vkey *k, int n, struct ferry_vkey *out,
                    struct ferry_error *err)
{
    out->part = ferry_calloc((size_t)n, sizeof *out->part);
    if (out->part == NULL) return oom(err);
    for (int i = 0; i < n; i++)
        if (k->part[i] && (out->part[i] = ferry_strdup(k->part[i])) == NULL) {
            ferry__vkey_free(out, n);
            return oom(err);
        }
    return FERRY_OK;
}

static int add_diff(struct walk *w, enum ferry_vdiff kind, const struct ferry_vrow *s,
                    const struct ferry_vrow *d, struct ferry_error *err)
{
    w->res->count[kind]++;
    if (w->n_diffs >= MAX_KEPT) return FERRY_OK;
    if (w->n_diffs == w->cap_diffs) {
        int64_t cap = w->cap_diffs ? w->cap_diffs * 2 : 64;
        struct diff *v = ferry_realloc(w->diffs, sizeof *v * (size_t)cap);
        if (v == NULL) return oom(err);
        w->diffs = v;
        w->cap_diffs = cap;
    }
    struct diff *x = &w->diffs[w->n_diffs];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->in_src = s != NULL;
    x->in_dst = d != NULL;
    x->src_hash = s ? s->hash : 0;
    x->dst_hash = d ? d->hash : 0;
    int rc = key_copy(d ? &d->key : &s->key, w->n_key, &x->key, err);
    if (rc == FERRY_OK) w->n_diffs++;
    return rc;
}

static int compare_rows(struct walk *w, const struct ferry_vrange *r, struct ferry_error *err)
{
    struct ferry_vrows a = {0}, b = {0};
    int rc = w->src->ops->rows(w->src, r, &a, err);
    if (rc == FERRY_OK) rc = w->dst->ops->rows(w->dst, r, &b, err);
    if (rc == FERRY_OK) {
        sort_nkey = w->n_key;
        if (a.n > 1) qsort(a.v, (size_t)a.n, sizeof *a.v, row_cmp);
        if (b.n > 1) qsort(b.v, (size_t)b.n, sizeof *b.v, row_cmp);
        int64_t i = 0, j = 0;
        while (rc == FERRY_OK && (i < a.n || j < b.n)) {
            int c = i >= a.n ? 1 : j >= b.n ? -1 : key_cmp(&a.v[i].key, &b.v[j].key, w->n_key);
            if (c < 0) {
                rc = add_diff(w, FERRY_VDIFF_MISSING, &a.v[i], NULL, err);
                i++;
            } else if (c > 0) {
                /* a duplicate of the key just matched: the source does hold that key */
                const struct ferry_vrow *prev =
                    i > 0 && key_cmp(&a.v[i - 1].key, &b.v[j].key, w->n_key) == 0 ? &a.v[i - 1]
                                                                                  : NULL;
                rc = add_diff(w, FERRY_VDIFF_EXTRA, prev, &b.v[j], err);
                j++;
            } else {
                if (a.v[i].hash != b.v[j].hash)
                    rc = add_diff(w, FERRY_VDIFF_DIFFERENT, &a.v[i], &b.v[j], err);
                i++;
                j++;
            }
        }
    }
    ferry__vrows_clear(&a, w->n_key);
    ferry__vrows_clear(&b, w->n_key);
    return rc;
}

static void json_key(struct ferry_buf *b, const struct ferry_vkey *k, int n)
{
    if (k == NULL) {
        ferry_buf_printf(b, "null");
        return;
    }
    ferry_buf_append(b, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i > 0) ferry_buf_append(b, ",", 1);
        if (k->part[i])
            ferry_buf_json_string(b, k->part[i], strlen(k->part[i]));
        else
            ferry_buf_printf(b, "null");
    }
    ferry_buf_append(b, "]", 1);
}

static void chunk_event(struct walk *w, const struct ferry_vrange *r, int depth, int64_t sc,
                        int64_t dc)
{
    if (w->on_event == NULL || w->events >= MAX_CHUNK_EVENTS) return;
    w->events++;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(
        &b, "{\"depth\":%d,\"source_rows\":%" PRId64 ",\"dest_rows\":%" PRId64 ",\"after\":", depth,
        sc, dc);
    json_key(&b, r->lo, w->n_key);
    ferry_buf_printf(&b, ",\"through\":");
    json_key(&b, r->hi, w->n_key);
    ferry_buf_append(&b, "}", 1);
    if (b.data) w->on_event(w->event_ctx, w->res->resource, FERRY_EV_VERIFY_CHUNK_MISMATCH, b.data);
    ferry_buf_release(&b);
}

/* Integer keys: cut [a, b] into `fanout` equal-width ranges by arithmetic, where a and b
 * come from the range's own bounds or, at an open end, from the side's min/max (one
 * index lookup) - no scan of the keys. Uneven data only makes some chunks larger. */
static int int_cuts(struct ferry_vside *by, const struct ferry_vrange *r, int fanout,
                    struct ferry_vrows *cut, struct ferry_error *err)
{
    char *mn = NULL, *mx = NULL;
    int rc = FERRY_OK;
    if (r->lo == NULL || r->hi == NULL) rc = by->ops->key_span(by, r, &mn, &mx, err);
    if (rc != FERRY_OK || ((r->lo == NULL || r->hi == NULL) && mn == NULL)) {
        ferry_free(mn);
        ferry_free(mx);
        return rc;
    }
    __extension__ typedef __int128 i128;
    i128 a = r->lo ? (i128)strtoll(r->lo->part[0], NULL, 10) + (r->lo_incl ? 0 : 1)
                   : (i128)strtoll(mn, NULL, 10);
    i128 b = r->hi ? (i128)strtoll(r->hi->part[0], NULL, 10) : (i128)strtoll(mx, NULL, 10);
    ferry_free(mn);
    ferry_free(mx);
    i128 prev = a - 1;
    for (int i = 1; i < fanout && rc == FERRY_OK; i++) {
        i128 c = a - 1 + (b - a + 1) * i / fanout;
        if (c <= prev || c >= b) continue;
        prev = c;
        char **parts = ferry_calloc(2, sizeof *parts);
        if (parts == NULL) return oom(err);
        parts[0] = ferry_asprintf("%lld", (long long)c);
        if (parts[0] == NULL) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__vrows_push(cut, parts, 0, err);
        if (rc != FERRY_OK) {
            struct ferry_vkey k = {parts};
            ferry__vkey_free(&k, 1);
        }
    }
    return rc;
}

struct digest {
    int64_t sc, dc;
    uint64_t ss, ds;
};

static bool int_key(const struct walk *w)
{
    enum ferry_type kt = w->st->cols[w->st->key[0]].type;
    return w->n_key == 1 && (kt == FERRY_TYPE_INT8 || kt == FERRY_TYPE_INT16 ||
                             kt == FERRY_TYPE_INT32 || kt == FERRY_TYPE_INT64);
}

static int walk_range(struct walk *w, const struct ferry_vrange *r, int depth,
                      const struct digest *known, struct ferry_error *err);

/* Integer key, both sides able: one statement per side gives every sub-range's digest,
 * with as many sub-ranges as make them about chunk_rows rows (up to 4096), so a few
 * differences in a large table cost about one more scan, not one per level. */
static int walk_buckets(struct walk *w, const struct ferry_vrange *r, int depth, int64_t n,
                        struct ferry_vside *by, struct ferry_error *err)
{
    int64_t f = n / w->o->chunk_rows;
    int fanout = f < w->o->fanout ? w->o->fanout : f > 4096 ? 4096 : (int)f;
    struct ferry_vrows cut = {0};
    int rc = int_cuts(by, r, fanout, &cut, err);
    if (rc == FERRY_OK && cut.n == 0) {
        ferry__vrows_clear(&cut, 1);
        return compare_rows(w, r, err);
    }
    int64_t nb = cut.n + 1;
    int64_t *cnt = ferry_calloc((size_t)nb * 2, sizeof *cnt);
    uint64_t *sum = ferry_calloc((size_t)nb * 2, sizeof *sum);
    if (rc == FERRY_OK && (cnt == NULL || sum == NULL)) rc = oom(err);
    if (rc == FERRY_OK) rc = w->src->ops->buckets_send(w->src, r, &cut, err);
    if (rc == FERRY_OK) {
        rc = w->dst->ops->buckets_send(w->dst, r, &cut, err);
        struct ferry_error e2 = {0};
        int rc2 = w->src->ops->buckets_recv(w->src, cnt, sum, nb, rc == FERRY_OK ? err : &e2);
        if (rc == FERRY_OK) rc = rc2;
        if (rc == FERRY_OK) rc = w->dst->ops->buckets_recv(w->dst, cnt + nb, sum + nb, nb, err);
    }
    for (int64_t i = 0; rc == FERRY_OK && i < nb; i++) {
        struct digest d = {cnt[i], cnt[nb + i], sum[i], sum[nb + i]};
        struct ferry_vrange sub = {i == 0 ? r->lo : &cut.v[i - 1].key, i == 0 && r->lo_incl,
                                   i == cut.n ? r->hi : &cut.v[i].key};
        rc = walk_range(w, &sub, depth + 1, &d, err);
    }
    ferry_free(cnt);
    ferry_free(sum);
    ferry__vrows_clear(&cut, 1);
    return rc;
}

static int walk_range(struct walk *w, const struct ferry_vrange *r, int depth,
                      const struct digest *known, struct ferry_error *err)
{
    int64_t sc = 0, dc = 0;
    uint64_t ss = 0, ds = 0;
    int rc = FERRY_OK;
    if (known != NULL) {
        sc = known->sc;
        dc = known->dc;
        ss = known->ss;
        ds = known->ds;
    } else {
        rc = w->src->ops->digest_send(w->src, r, err);
        if (rc == FERRY_OK) {
            rc = w->dst->ops->digest_send(w->dst, r, err);
            struct ferry_error e2 = {0};
            int rc2 = w->src->ops->digest_recv(w->src, &sc, &ss, rc == FERRY_OK ? err : &e2);
            if (rc == FERRY_OK) rc = rc2;
            if (rc == FERRY_OK) rc = w->dst->ops->digest_recv(w->dst, &dc, &ds, err);
        }
    }
    if (rc != FERRY_OK) return rc;
    w->res->chunks++;
    if (depth == 0) {
        w->res->source_rows = sc;
        w->res->dest_rows = dc;
    }
    if (sc == dc && ss == ds) return FERRY_OK;
    w->res->chunks_mismatched++;
    chunk_event(w, r, depth, sc, dc);
    int64_t n = sc > dc ? sc : dc;
    if (n <= w->o->chunk_rows || w->src->whole_only || w->dst->whole_only)
        return compare_rows(w, r, err);
    struct ferry_vside *by = sc >= dc ? w->src : w->dst;
    if (int_key(w) && by->ops->key_span != NULL && w->src->ops->buckets_send != NULL &&
        w->dst->ops->buckets_send != NULL)
        return walk_buckets(w, r, depth, n, by, err);
    int64_t step = (n + w->o->fanout - 1) / w->o->fanout;
    struct ferry_vrows cut = {0};
    if (int_key(w) && by->ops->key_span != NULL)
        rc = int_cuts(by, r, w->o->fanout, &cut, err);
    else
        rc = by->ops->bounds(by, r, step, &cut, err);
    if (rc == FERRY_OK && cut.n == 0) rc = compare_rows(w, r, err);
    for (int64_t i = 0; rc == FERRY_OK && i <= cut.n && cut.n > 0; i++) {
        struct ferry_vrange sub = {i == 0 ? r->lo : &cut.v[i - 1].key, i == 0 && r->lo_incl,
                                   i == cut.n ? r->hi : &cut.v[i].key};
        rc = walk_range(w, &sub, depth + 1, NULL, err);
    }
    ferry__vrows_clear(&cut, w->n_key);
    return rc;
}

/* Second pass: each kept differing key re-read on both sides in new snapshots. A key
 * whose source row changed since the first pass, or that now matches, changed during the
 * check; the rest are confirmed. */
static int recheck(struct walk *w, struct ferry_error *err)
{
    if (w->n_diffs == 0) return FERRY_OK;
    /* tests change the source here (sleep action) to see "changed during check" */
    int rc = ferry_failpoint_check("verify_between_passes", err);
    if (rc == FERRY_OK) rc = w->src->ops->refresh(w->src, err);
    if (rc == FERRY_OK) rc = w->dst->ops->refresh(w->dst, err);
    for (int64_t i = 0; i < w->n_diffs && i < MAX_RECHECK && rc == FERRY_OK; i++) {
        struct diff *d = &w->diffs[i];
        struct ferry_vrange r = {&d->key, true, &d->key};
        struct ferry_vrows a = {0}, b = {0};
        rc = w->src->ops->rows(w->src, &r, &a, err);
        if (rc == FERRY_OK) rc = w->dst->ops->rows(w->dst, &r, &b, err);
        if (rc == FERRY_OK) {
            bool src_same = (a.n > 0) == d->in_src && (a.n == 0 || a.v[0].hash == d->src_hash);
            bool now_equal = a.n == b.n && (a.n == 0 || a.v[0].hash == b.v[0].hash);
            if (!src_same || now_equal) {
                w->res->count[d->kind]--;
                w->res->count[FERRY_VDIFF_CHANGED]++;
                d->kind = FERRY_VDIFF_CHANGED;
            }
        }
        ferry__vrows_clear(&a, w->n_key);
        ferry__vrows_clear(&b, w->n_key);
    }
    return rc;
}

static void list_diffs(struct walk *w)
{
    struct ferry_verify_resource *res = w->res;
    for (int k = 0; k < FERRY_VDIFF_KINDS; k++) {
        int want = w->o->max_listed;
        if (want <= 0) continue;
        res->listed[k] = ferry_calloc((size_t)want, sizeof(char *));
        if (res->listed[k] == NULL) continue;
        for (int64_t i = 0; i < w->n_diffs && res->n_listed[k] < want; i++)
            if ((int)w->diffs[i].kind == k) {
                char *s = key_display(&w->diffs[i].key, w->n_key);
                if (s) res->listed[k][res->n_listed[k]++] = s;
            }
    }
}

static void walk_clear(struct walk *w)
{
    for (int64_t i = 0; i < w->n_diffs; i++)
        ferry__vkey_free(&w->diffs[i].key, w->n_key);
    ferry_free(w->diffs);
    w->diffs = NULL;
    w->n_diffs = w->cap_diffs = 0;
}

/* ---- sides ---------------------------------------------------------------------------- */

/* Adds the files of `table` listed by the manifest at m (absent: nothing) to *v. */
static int manifest_files(const char *dir, const char *m, const char *table, char ***v, int *n,
                          struct ferry_error *err)
{
    FILE *f = fopen(m, "rb");
    if (f == NULL) {
        if (errno == ENOENT) return FERRY_OK;
        return ferry_error_set(err, FERRY_EIO, "verify", "verify: cannot open %s: %s", m,
                               strerror(errno));
    }
    json_error_t je;
    json_t *j = json_loadf(f, 0, &je);
    fclose(f);
    json_t *files = json_object_get(j, "files");
    if (j == NULL || !json_is_array(files)) {
        json_decref(j);
        return ferry_error_set(err, FERRY_EINVAL, "verify", "verify: %s: not a manifest (%s)", m,
                               j ? "no files list" : je.text);
    }
    size_t i;
    json_t *e;
    int rc = FERRY_OK;
    json_array_foreach(files, i, e) {
        const char *t = json_string_value(json_object_get(e, "table"));
        const char *rel = json_string_value(json_object_get(e, "path"));
        if (t == NULL || rel == NULL || strcmp(t, table) != 0) continue;
        char **nv = ferry_realloc(*v, sizeof *nv * (size_t)(*n + 2));
        if (nv == NULL) {
            rc = oom(err);
            break;
        }
        *v = nv;
        if ((nv[*n] = ferry_asprintf("%s/%s", dir, rel)) == NULL) {
            rc = oom(err);
            break;
        }
        nv[++*n] = NULL;
    }
    json_decref(j);
    return rc;
}

static int path_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A files-sink Parquet destination: the parts of the table that the data set manifest
 * (<path>/_manifest.json) lists, or else that the run manifests (<path>/_runs/<run>/
 * _manifest.json) list, read by ferry's Parquet reader. Never the folder: parts no
 * manifest names are not part of the data set. */
static int open_parquet_dest(const char *path, const char *table, const struct ferry_vtable *t,
                             struct ferry_vside **out, char **table_out, struct ferry_error *err)
{
    char **v = NULL;
    int n = 0;
    char *m = ferry_asprintf("%s/_manifest.json", path);
    if (m == NULL) return oom(err);
    struct stat st;
    bool dataset = stat(m, &st) == 0;
    int rc = dataset ? manifest_files(path, m, table, &v, &n, err) : FERRY_OK;
    ferry_free(m);
    if (rc == FERRY_OK && !dataset) {
        char *runs = ferry_asprintf("%s/_runs", path);
        DIR *d = runs ? opendir(runs) : NULL;
        if (runs == NULL) rc = oom(err);
        struct dirent *de;
        while (rc == FERRY_OK && d && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') continue;
            char *rm = ferry_asprintf("%s/%s/_manifest.json", runs, de->d_name);
            rc = rm ? manifest_files(path, rm, table, &v, &n, err) : oom(err);
            ferry_free(rm);
        }
        if (d) closedir(d);
        ferry_free(runs);
    }
    if (rc == FERRY_OK && n > 1) qsort(v, (size_t)n, sizeof *v, path_cmp);
    if (rc == FERRY_OK) rc = ferry__vside_parquet_open(v, n, table, t, "destination", out, err);
    if (rc == FERRY_OK && (*table_out = ferry_asprintf("%s/%s (%d parquet file%s)", path, table, n,
                                                       n == 1 ? "" : "s")) == NULL) {
        (*out)->ops->close(*out);
        *out = NULL;
        rc = oom(err);
    }
    for (int i = 0; i < n; i++) ferry_free(v[i]);
    ferry_free(v);
    return rc;
}

/* The files source's pipeline for ferry__vside_text_open, into y: CSV options as the sink
 * section has them (the sink's defaults: header, ",", null ""), the files `glob`, and the
 * written schema with its exact types and key. */
static int text_pipeline(struct ferry_cfg *sink, const char *glob, const char *table,
                         const struct ferry_schema *written, struct ferry_buf *y,
                         struct ferry_error *err)
{
    const char *format = "csv", *nul = "", *delim = ",";
    bool header = true;
    int rc = ferry_cfg_str(sink, "format", false, &format, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(sink, "null", false, &nul, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(sink, "delimiter", false, &delim, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(sink, "header", false, &header, err);
    if (rc != FERRY_OK) return rc;
    bool csv = !strcmp(format, "csv");
    if (!csv && strcmp(format, "jsonl") != 0)
        return ferry_error_set(err, FERRY_EINVAL, "verify",
                               "verify: %s files are read back as csv or jsonl only", format);
    ferry_buf_printf(y,
                     "version: 1\nname: verify-text-destination\nsource:\n  type: files\n"
                     "  format: %s\n",
                     format);
    if (csv) {
        ferry_buf_printf(y, "  header: %s\n  delimiter: ", header ? "true" : "false");
        ferry_buf_json_string(y, delim, strlen(delim));
        ferry_buf_printf(y, "\n  \"null\": ");
        ferry_buf_json_string(y, nul, strlen(nul));
        ferry_buf_printf(y, "\n");
    }
    ferry_buf_printf(y, "  resources:\n    - table: ");
    ferry_buf_json_string(y, table, strlen(table));
    ferry_buf_printf(y, "\n      path: ");
    ferry_buf_json_string(y, glob, strlen(glob));
    ferry_buf_printf(y, "\n      schema: {");
    for (int i = 0; i < written->n_fields; i++) {
        const struct ferry_field *f = &written->fields[i];
        char ty[64];
        if (f->type == FERRY_TYPE_DECIMAL128)
            snprintf(ty, sizeof ty, "decimal128(%d,%d)", f->precision, f->scale);
        else
            snprintf(ty, sizeof ty, "%s", ferry_type_name(f->type));
        ferry_buf_printf(y, "%s", i > 0 ? ", " : "");
        ferry_buf_json_string(y, f->name, strlen(f->name));
        ferry_buf_printf(y, ": ");
        ferry_buf_json_string(y, ty, strlen(ty));
    }
    ferry_buf_printf(y, "}\n      key: [");
    for (int k = 0; k < written->n_key; k++) {
        const char *kn = written->fields[written->key[k]].name;
        ferry_buf_printf(y, "%s", k > 0 ? ", " : "");
        ferry_buf_json_string(y, kn, strlen(kn));
    }
    ferry_buf_printf(y, "]\nsink:\n  type: \"null\"\n");
    return y->data == NULL ? oom(err) : FERRY_OK;
}

/* The pipeline made by text_pipeline is freed once the side is open: a stream side opened
 * for a destination reads everything at open and keeps no reference to it (it never
 * fetches; backend_stream.c). */
int ferry__vside_text_open(struct ferry_cfg *sink, const char *glob, const char *table,
                           const struct ferry_schema *written, const struct ferry_vtable *t,
                           const char *what, struct ferry_vside **out, struct ferry_error *err)
{
    *out = NULL;
    if (written == NULL || t->source) /* a source side would keep rp for its fetches */
        return ferry_error_set(err, FERRY_EINVAL, "verify",
                               "verify: %s %s: files are read back for a destination only, in "
                               "the schema written",
                               what, table);
    struct ferry_buf y;
    ferry_buf_init(&y, 0);
    int rc = text_pipeline(sink, glob, table, written, &y, err);
    struct ferry_pipeline_spec *rp = NULL;
    if (rc == FERRY_OK) rc = ferry_pipeline_load_string(y.data, y.len, "verify", &rp, err);
    if (rc == FERRY_OK) rc = ferry__vside_stream_open(rp, &rp->resources[0], t, what, out, err);
    ferry_pipeline_free(rp);
    ferry_buf_release(&y);
    return rc;
}

/* A files-sink destination (CSV, JSON Lines) is read back with the files source
 * (ferry__vside_text_open): `<path>/<table>/part-*.<ext>` in the schema the sink wrote.
 * Parts of several runs all count (an append run repeated shows as extra rows); temporary
 * parts (.tmp-*) never match. */
static int open_files_dest(struct ferry_cfg *cfg, const struct ferry_resource_spec *r,
                           const struct ferry_vtable *t, struct ferry_vside **out, char **table_out,
                           struct ferry_error *err)
{
    const char *path = NULL, *format = "csv";
    int rc = ferry_cfg_str(cfg, "path", true, &path, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "format", false, &format, err);
    if (rc != FERRY_OK) return rc;
    if (!strcmp(format, "parquet"))
        return open_parquet_dest(path, ferry_resource_target(r), t, out, table_out, err);
    bool csv = !strcmp(format, "csv");
    if (!csv && strcmp(format, "jsonl") != 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                               "verify: a files destination in %s format cannot be verified yet "
                               "(csv, jsonl and parquet can)",
                               format);
    const char *table = ferry_resource_target(r);
    char *glob = ferry_asprintf("%s/%s/part-*.%s", path, table, csv ? "csv" : "jsonl");
    if (glob == NULL) return oom(err);
    rc = ferry__vside_text_open(cfg, glob, table, t->written, t, "destination", out, err);
    if (rc != FERRY_OK) ferry_free(glob);
    if (rc == FERRY_OK) *table_out = glob; /* the report names the glob */
    return rc;
}

/* A mysql destination is read back with the mysql source: a pipeline made for the purpose
 * (the sink's connection keys, secret references as written) reads the target table (the
 * URL's database, the whole target name one identifier) through backend_stream.c, hashed in
 * C: MySQL's SQL has none of the canonical form's hash functions (docs/internals/mysql.md). */
static int open_mysql_dest(struct ferry_cfg *cfg, const struct ferry_resource_spec *r,
                           const struct ferry_vtable *t, struct ferry_vside **out, char **table_out,
                           struct ferry_error *err)
{
    static const char *const keys[] = {
        "url",     "socket",          "tls",        "tls_ca", "tls_cert",
        "tls_key", "connect_timeout", "io_timeout", NULL};
    const char *table = ferry_resource_target(r);
    struct ferry_buf y, q;
    ferry_buf_init(&y, 0);
    ferry_buf_init(&q, 0);
    ferry_buf_printf(&y, "version: 1\nname: verify-mysql-destination\nsource:\n  type: mysql\n");
    int rc = FERRY_OK;
    for (int i = 0; keys[i] && rc == FERRY_OK; i++) {
        const char *v = NULL;
        if (ferry_cfg_get(cfg, keys[i]) == NULL) continue;
        rc = ferry_cfg_str(cfg, keys[i], false, &v, err);
        if (rc != FERRY_OK || v == NULL) continue;
        ferry_buf_printf(&y, "  %s: ", keys[i]);
        ferry_buf_json_string(&y, v, strlen(v));
        ferry_buf_printf(&y, "\n");
    }
    ferry_buf_append(&q, "`", 1);
    for (const char *c = table; *c; c++) {
        ferry_buf_append(&q, c, 1);
        if (*c == '`') ferry_buf_append(&q, "`", 1); /* doubled inside backquotes */
    }
    ferry_buf_append(&q, "`", 1);
    ferry_buf_printf(&y, "  resources:\n    - table: ");
    ferry_buf_json_string(&y, q.data ? q.data : "", q.len);
    ferry_buf_printf(&y, "\nsink:\n  type: \"null\"\n");
    if (rc == FERRY_OK && (y.data == NULL || q.data == NULL)) rc = oom(err);
    struct ferry_pipeline_spec *rp = NULL;
    if (rc == FERRY_OK) rc = ferry_pipeline_load_string(y.data, y.len, "verify", &rp, err);
    if (rc == FERRY_OK)
        rc = ferry__vside_stream_open(rp, &rp->resources[0], t, "destination", out, err);
    if (rc == FERRY_OK && (*table_out = ferry_asprintf("mysql %s", table)) == NULL) rc = oom(err);
    ferry_pipeline_free(rp);
    ferry_buf_release(&y);
    ferry_buf_release(&q);
    return rc;
}

static int open_side(const struct ferry_pipeline_spec *p, const char *type, struct ferry_cfg *cfg,
                     bool source, const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                     struct ferry_vside **out, char **table_out, struct ferry_error *err)
{
    const char *what = source ? "source" : "destination";
    int rc;
    if (!source && !strcmp(type, "files")) return open_files_dest(cfg, r, t, out, table_out, err);
    if (!source && !strcmp(type, "mysql") && !t->text_md5)
        return open_mysql_dest(cfg, r, t, out, table_out, err);
    if (source && !strcmp(type, "mysql") && !t->text_md5) {
        rc = ferry__vside_stream_open(p, r, t, what, out, err);
        if (rc == FERRY_OK && (*table_out = ferry_asprintf("%s %s", type, r->table)) == NULL)
            rc = oom(err);
        return rc;
    }
    /* a database side: the connector's chunk-digest slot */
    const struct ferry_source_vtable *sv = source ? ferry_source_find(type) : NULL;
    const struct ferry_sink_vtable *kv = source ? NULL : ferry_sink_find(type);
    ferry_verify_open_fn vopen = sv ? sv->verify_open : kv ? kv->verify_open : NULL;
    if (vopen) return vopen(cfg, source, r, t, what, out, table_out, err);
    if (source) { /* any other source: read through ferry, hashed in C */
        rc = ferry__vside_stream_open(p, r, t, what, out, err);
        if (rc == FERRY_OK && (*table_out = ferry_asprintf("%s %s", type, r->table)) == NULL)
            rc = oom(err);
        return rc;
    }
    return ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                           "verify: a %s destination cannot be verified yet (postgres, "
                           "sqlite, mysql, files, s3 and iceberg can)",
                           type);
}

/* ---- one resource --------------------------------------------------------------------- */

static bool md5_key_type(enum ferry_type ty)
{
    return ty == FERRY_TYPE_INT8 || ty == FERRY_TYPE_INT16 || ty == FERRY_TYPE_INT32 ||
           ty == FERRY_TYPE_INT64 || ty == FERRY_TYPE_UTF8 || ty == FERRY_TYPE_DECIMAL128 ||
           ty == FERRY_TYPE_DATE32 || ty == FERRY_TYPE_TIMESTAMP_US || ty == FERRY_TYPE_UUID;
}

/* Whether a pair with a MySQL side can have its digests computed by both servers on the
 * text_md5 form (verify.h): MySQL or PostgreSQL on both ends, every compared column with a
 * text form both print alike (floats as their bits; not json into jsonb, no hashed column), keys of
 * types both order alike, no --repair (rows are then fetched through the mysql source).
 * Otherwise a MySQL side is read through ferry and hashed in C (lookup3). */
static bool use_text_md5(const struct ferry_pipeline_spec *p, const struct ferry_verify_opts *o,
                         const struct ferry_vtable *t)
{
    const char *a = p->source_type, *b = p->sink_type;
    if (a == NULL || b == NULL || o->repair) return false;
    if (strcmp(a, "mysql") != 0 && strcmp(b, "mysql") != 0) return false;
    if ((strcmp(a, "mysql") != 0 && strcmp(a, "postgres") != 0) ||
        (strcmp(b, "mysql") != 0 && strcmp(b, "postgres") != 0))
        return false;
    for (int i = 0; i < t->n_cols; i++) {
        const struct ferry_vcol *c = &t->cols[i];
        if (c->how != FERRY_VHOW_PLAIN || (c->type == FERRY_TYPE_JSON && t->json_normalize))
            return false;
        if (c->key_pos > 0 && !md5_key_type(c->type)) return false;
    }
    return true;
}

static int discover(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                    struct ferry_schema **out, struct ferry_error *err)
{
    void *ctx = NULL;
    int rc = p->source_vt->open(p->source, &ctx, err);
    if (rc == FERRY_OK) rc = p->source_vt->discover(ctx, r, out, err);
    if (ctx) p->source_vt->close(ctx);
    return rc;
}

static int push_note(struct ferry_verify_resource *res, const char *col, const char *why,
                     struct ferry_error *err)
{
    char **v = ferry_realloc(res->not_compared, sizeof *v * (size_t)(res->n_not_compared + 1));
    if (v == NULL) return oom(err);
    res->not_compared = v;
    if ((v[res->n_not_compared] = ferry_asprintf("%s (%s)", col, why)) == NULL) return oom(err);
    res->n_not_compared++;
    return FERRY_OK;
}

static void completed_event(struct walk *w)
{
    if (w->on_event == NULL) return;
    struct ferry_verify_resource *res = w->res;
    char *j = ferry_asprintf(
        "{\"source_rows\":%" PRId64 ",\"dest_rows\":%" PRId64 ",\"missing\":%" PRId64
        ",\"extra\":%" PRId64 ",\"different\":%" PRId64 ",\"changed_during_check\":%" PRId64
        ",\"chunks\":%" PRId64 ",\"chunks_mismatched\":%" PRId64 ",\"source_bytes\":%" PRId64
        ",\"dest_bytes\":%" PRId64 ",\"repaired\":%" PRId64 ",\"equal\":%s}",
        res->source_rows, res->dest_rows, res->count[0], res->count[1], res->count[2],
        res->count[3], res->chunks, res->chunks_mismatched, res->source_bytes, res->dest_bytes,
        res->repaired, res->count[0] + res->count[1] + res->count[2] == 0 ? "true" : "false");
    if (j) w->on_event(w->event_ctx, res->resource, FERRY_EV_VERIFY_COMPLETED, j);
    ferry_free(j);
}

static void resource_clear(struct ferry_verify_resource *x)
{
    ferry_free(x->resource);
    ferry_free(x->source_table);
    ferry_free(x->dest_table);
    for (int k = 0; k < FERRY_VDIFF_KINDS; k++) {
        for (int j = 0; j < x->n_listed[k]; j++)
            ferry_free(x->listed[k][j]);
        ferry_free(x->listed[k]);
    }
    for (int j = 0; j < x->n_not_compared; j++)
        ferry_free(x->not_compared[j]);
    ferry_free(x->not_compared);
    memset(x, 0, sizeof *x);
}

static int repair(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                  struct walk *w, struct ferry_error *err)
{
    struct ferry_vfix *fix = ferry_calloc((size_t)w->n_diffs + 1, sizeof *fix);
    if (fix == NULL) return oom(err);
    int64_t n = 0;
    for (int64_t i = 0; i < w->n_diffs; i++) {
        if (w->diffs[i].kind == FERRY_VDIFF_CHANGED) continue;
        fix[n].key = w->diffs[i].key; /* borrowed */
        fix[n].delete_ = w->diffs[i].kind == FERRY_VDIFF_EXTRA;
        n++;
    }
    int rc = ferry__verify_repair(p, r, w->src, fix, n, &w->res->repaired, err);
    ferry_free(fix);
    return rc;
}

struct until {
    int *col;
    char **val;
    int n;
};

static void until_clear(struct until *u)
{
    for (int i = 0; i < u->n; i++)
        ferry_free(u->val[i]);
    ferry_free(u->val);
    ferry_free(u->col);
    memset(u, 0, sizeof *u);
}

/* A value of the saved position (builder.h: numbers for ints, days, microseconds; text
 * otherwise) as the normal text of a column of type t. */
static char *position_text(json_t *v, enum ferry_type t)
{
    char buf[80];
    int k = -1;
    if (json_is_string(v)) return ferry_strdup(json_string_value(v));
    if (json_is_boolean(v)) return ferry_strdup(json_is_true(v) ? "true" : "false");
    if (json_is_real(v)) k = snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
    if (json_is_integer(v)) {
        int64_t i = (int64_t)json_integer_value(v);
        if (t == FERRY_TYPE_DATE32)
            k = ferry_date32_to_text((int32_t)i, buf, sizeof buf);
        else if (t == FERRY_TYPE_TIME64_US)
            k = ferry_time64_to_text(i, buf, sizeof buf);
        else if (t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIMESTAMPTZ_US)
            k = ferry_timestamp_to_text(i, t == FERRY_TYPE_TIMESTAMPTZ_US, buf, sizeof buf);
        else
            k = snprintf(buf, sizeof buf, "%" PRId64, i);
    }
    return k >= 0 ? ferry_strndup(buf, (size_t)k) : NULL;
}

/* --until-checkpoint: the route checkpoint of an incremental resource, as a bound on
 * (cursor..., key...) for both sides. Other resources are compared whole. */
static int load_until(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                      const struct ferry_verify_opts *o, const struct ferry_vcol *cols, int n,
                      const int *key, int n_key, struct until *u, struct ferry_error *err)
{
    memset(u, 0, sizeof *u);
    if (!o->until_checkpoint || r->mode != FERRY_READ_INCREMENTAL) return FERRY_OK;
    const char *path = o->state_path;
    if (path == NULL || path[0] == '\0') path = ferry_store_default_url();
    struct ferry_store *st = NULL;
    struct ferry_checkpoint *cps = NULL;
    int ncp = 0;
    char *route = ferry_pipeline_route(p, r);
    if (route == NULL) return oom(err);
    int rc = ferry_store_open(path, &st, err);
    if (rc == FERRY_OK)
        rc = ferry_store_route_checkpoints(st, p->name, p->version, route, &cps, &ncp, err);
    if (rc == FERRY_OK && ncp == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify",
                             "verify --until-checkpoint: no saved checkpoint for %s in %s (run "
                             "the pipeline first)",
                             route, path);
    json_t *pos = rc == FERRY_OK ? json_loads(cps[0].position, 0, NULL) : NULL;
    json_t *kv = json_object_get(pos, "key");
    int want = r->n_cursor + n_key;
    if (rc == FERRY_OK && (!json_is_array(kv) || (int)json_array_size(kv) != want))
        rc = ferry_error_set(err, FERRY_EINVAL, "verify",
                             "verify --until-checkpoint: the checkpoint of %s does not hold the "
                             "cursor and key (%s)",
                             route, cps[0].position);
    if (rc == FERRY_OK) {
        u->col = ferry_calloc((size_t)want + 1, sizeof *u->col);
        u->val = ferry_calloc((size_t)want + 1, sizeof *u->val);
        if (u->col == NULL || u->val == NULL) rc = oom(err);
    }
    for (int i = 0; i < want && rc == FERRY_OK; i++) {
        int col = -1;
        if (i < r->n_cursor) {
            for (int j = 0; j < n; j++)
                if (!strcmp(cols[j].src, r->cursor[i])) col = j;
            if (col < 0) {
                rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                                     "verify --until-checkpoint: cursor column %s is not "
                                     "compared in the destination",
                                     r->cursor[i]);
                break;
            }
        } else {
            col = key[i - r->n_cursor];
        }
        u->col[u->n] = col;
        u->val[u->n] = position_text(json_array_get(kv, (size_t)i), cols[col].type);
        if (u->val[u->n] == NULL)
            rc = ferry_error_set(err, FERRY_EINVAL, "verify",
                                 "verify --until-checkpoint: checkpoint value %d of %s", i, route);
        else
            u->n++;
    }
    json_decref(pos);
    ferry_checkpoints_free(cps, ncp);
    ferry_store_close(st);
    ferry_free(route);
    if (rc != FERRY_OK) until_clear(u);
    return rc;
}

static int verify_resource(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                           const struct ferry_verify_opts *o, ferry_verify_event_fn on_event,
                           void *ev_ctx, struct ferry_verify_resource *res, struct ferry_error *err)
{
    int64_t t0 = ferry_now_mono_us();
    struct ferry_schema *in = NULL, *outs = NULL;
    struct ferry_transform_chain *chain = NULL;
    struct tcol *tc = NULL;
    int ntc = 0;
    struct ferry_vcol *cols = NULL;
    int *key = NULL;
    struct ferry_vside *src = NULL, *dst = NULL;
    struct walk w = {0};
    if ((res->resource = ferry_strdup(r->table)) == NULL) return oom(err);
    int rc = discover(p, r, &in, err);
    if (rc == FERRY_OK) rc = ferry_transforms_compile(p, r->table, in, &chain, &outs, err);
    ferry_transforms_free(chain);
    if (rc == FERRY_OK) rc = trace_columns(p, r->table, in, &tc, &ntc, err);
    int n = 0;
    if (rc == FERRY_OK) {
        cols = ferry_calloc((size_t)outs->n_fields + 1, sizeof *cols);
        key = ferry_calloc((size_t)outs->n_key + 1, sizeof *key);
        if (cols == NULL || key == NULL) rc = oom(err);
    }
    for (int i = 0; rc == FERRY_OK && i < outs->n_fields; i++) {
        const struct ferry_field *f = &outs->fields[i];
        int j = tfind(tc, ntc, f->name);
        if (j < 0 || tc[j].why) {
            if (f->key_pos > 0)
                rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                                     "verify: resource %s: key column %s is transformed (%s)",
                                     r->table, f->name, j >= 0 ? tc[j].why : "?");
            else
                rc = push_note(res, f->name, j >= 0 ? tc[j].why : "not from the source", err);
            continue;
        }
        struct ferry_vcol *c = &cols[n];
        c->dst = f->name;
        c->src = tc[j].src;
        c->type = f->type;
        c->src_type = tc[j].src_type;
        c->precision = f->precision;
        c->scale = f->scale;
        c->how = tc[j].how;
        c->key_pos = f->key_pos;
        if (f->key_pos > 0 && f->key_pos <= outs->n_key) key[f->key_pos - 1] = n;
        n++;
    }
    if (rc == FERRY_OK && outs->n_key == 0)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                             "verify: resource %s has no primary key (declare key: in the "
                             "pipeline file)",
                             r->table);
    bool cross = p->source_type && p->sink_type && strcmp(p->source_type, p->sink_type) != 0;
    struct until until = {0};
    if (rc == FERRY_OK) rc = load_until(p, r, o, cols, n, key, outs->n_key, &until, err);
    struct ferry_vtable st = {cols,
                              n,
                              key,
                              outs ? outs->n_key : 0,
                              true,
                              cross,
                              p->sink_type && !strcmp(p->sink_type, "postgres"),
                              until.col,
                              until.val,
                              until.n,
                              false,
                              outs};
    if (use_text_md5(p, o, &st)) {
        st.text_md5 = true;
        st.byte_order_text = true; /* MySQL collations differ between tables and from "C" */
    }
    struct ferry_vtable dt = st;
    dt.source = false;
    if (rc == FERRY_OK)
        rc = open_side(p, p->source_type, p->source, true, r, &st, &src, &res->source_table, err);
    if (rc == FERRY_OK)
        rc = open_side(p, p->sink_type, p->sink, false, r, &dt, &dst, &res->dest_table, err);
    if (rc == FERRY_OK && until.n > 0 && src->read_whole)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                             "verify --until-checkpoint: the %s source is read whole; it needs "
                             "a postgres or sqlite source",
                             p->source_type);
    if (rc == FERRY_OK) {
        w.o = o;
        w.src = src;
        w.dst = dst;
        w.st = &st;
        w.n_key = st.n_key;
        w.res = res;
        w.on_event = on_event;
        w.event_ctx = ev_ctx;
        struct ferry_vrange all = {NULL, false, NULL};
        rc = walk_range(&w, &all, 0, NULL, err);
        if (rc == FERRY_OK) rc = recheck(&w, err);
        if (rc == FERRY_OK) list_diffs(&w);
        if (rc == FERRY_OK && o->repair &&
            res->count[FERRY_VDIFF_MISSING] + res->count[FERRY_VDIFF_EXTRA] +
                    res->count[FERRY_VDIFF_DIFFERENT] >
                0) {
            /* the sink writes where this side reads (a SQLite file it may switch to WAL) */
            res->dest_bytes = dst->bytes;
            res->dest_queries = dst->queries;
            res->dest_sort_runs = dst->sort_runs;
            dst->ops->close(dst);
            dst = w.dst = NULL;
            rc = repair(p, r, &w, err);
        }
    }
    if (src) {
        res->source_bytes = src->bytes;
        res->source_queries = src->queries;
        res->source_sort_runs = src->sort_runs;
        src->ops->close(src);
    }
    if (dst) {
        res->dest_bytes = dst->bytes;
        res->dest_queries = dst->queries;
        res->dest_sort_runs = dst->sort_runs;
        dst->ops->close(dst);
    }
    if (rc == FERRY_OK && res->repaired > 0) {
        /* verify again, from scratch, with new connections and snapshots */
        struct ferry_verify_opts again = *o;
        again.repair = false;
        struct ferry_verify_resource tmp;
        memset(&tmp, 0, sizeof tmp);
        rc = verify_resource(p, r, &again, NULL, NULL, &tmp, err);
        res->repair_done = rc == FERRY_OK;
        res->repair_clean = rc == FERRY_OK && tmp.count[FERRY_VDIFF_MISSING] +
                                                      tmp.count[FERRY_VDIFF_EXTRA] +
                                                      tmp.count[FERRY_VDIFF_DIFFERENT] ==
                                                  0;
        res->source_bytes += tmp.source_bytes;
        res->dest_bytes += tmp.dest_bytes;
        resource_clear(&tmp);
    }
    res->seconds = (double)(ferry_now_mono_us() - t0) / 1e6;
    if (rc == FERRY_OK) completed_event(&w);
    walk_clear(&w);
    until_clear(&until);
    ferry_free(cols);
    ferry_free(key);
    tcols_free(tc, ntc);
    ferry_schema_unref(in);
    ferry_schema_unref(outs);
    if (rc != FERRY_OK) ferry_error_prefix(err, "resource %s", r->table);
    return rc;
}

int ferry_verify_run(const struct ferry_pipeline_spec *p, const struct ferry_verify_opts *oin,
                     ferry_verify_event_fn on_event, void *event_ctx,
                     struct ferry_verify_report **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_verify_opts o = *oin;
    if (o.chunk_rows <= 0) o.chunk_rows = 1000;
    if (o.fanout < 2) o.fanout = 16;
    if (o.max_listed <= 0) o.max_listed = 20;
    struct ferry_verify_report *rep = ferry_calloc(1, sizeof *rep);
    if (rep == NULL) return oom(err);
    rep->res = ferry_calloc((size_t)p->n_resources + 1, sizeof *rep->res);
    if (rep->res == NULL) {
        ferry_free(rep);
        return oom(err);
    }
    int64_t t0 = ferry_now_mono_us();
    ferry__vsorted_set_memory(p->memory); /* sides read through ferry sort in a quarter */
    int rc = FERRY_OK;
    bool found = false;
    for (int i = 0; i < p->n_resources && rc == FERRY_OK; i++) {
        const struct ferry_resource_spec *r = &p->resources[i];
        if (o.resource && strcmp(o.resource, r->table) != 0) continue;
        found = true;
        rc = verify_resource(p, r, &o, on_event, event_ctx, &rep->res[rep->n_res], err);
        rep->n_res++;
    }
    if (rc == FERRY_OK && !found)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "verify", "verify: no resource named %s in %s",
                             o.resource, p->file ? p->file : "the pipeline");
    rep->seconds = (double)(ferry_now_mono_us() - t0) / 1e6;
    if (rc != FERRY_OK) {
        ferry_verify_report_free(rep);
        return rc;
    }
    *out = rep;
    return FERRY_OK;
}

void ferry_verify_after_run(const struct ferry_pipeline_spec *p, ferry_verify_event_fn on_event,
                            void *event_ctx)
{
    struct ferry_verify_opts o;
    memset(&o, 0, sizeof o);
    struct ferry_verify_report *rep = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    if (ferry_verify_run(p, &o, on_event, event_ctx, &rep, &err) != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, "verify after run: %s", err.message);
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        ferry_buf_printf(&b, "{\"error\":");
        ferry_buf_json_string(&b, err.message, strlen(err.message));
        ferry_buf_printf(&b, "}");
        if (b.data && on_event) on_event(event_ctx, "", FERRY_EV_VERIFY_COMPLETED, b.data);
        ferry_buf_release(&b);
        return;
    }
    for (int i = 0; i < rep->n_res; i++) {
        const struct ferry_verify_resource *x = &rep->res[i];
        if (x->count[0] + x->count[1] + x->count[2] > 0)
            ferry_log(FERRY_LOG_WARN,
                      "verify after run: %s differs from its source: %" PRId64 " missing, %" PRId64
                      " extra, %" PRId64 " different (ferry verify --repair re-copies them)",
                      x->resource, x->count[0], x->count[1], x->count[2]);
    }
    ferry_verify_report_free(rep);
}

bool ferry_verify_differs(const struct ferry_verify_report *r)
{
    for (int i = 0; r && i < r->n_res; i++) {
        if (r->res[i].repair_done) {
            if (!r->res[i].repair_clean) return true;
            continue;
        }
        for (int k = 0; k < FERRY_VDIFF_KINDS; k++)
            if (r->res[i].count[k] > 0) return true;
    }
    return false;
}

static const char *const kind_names[FERRY_VDIFF_KINDS] = {"missing", "extra", "different",
                                                          "changed_during_check"};

char *ferry_verify_report_json(const struct ferry_verify_report *r)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b, "{\"equal\":%s,\"seconds\":%.3f,\"resources\":[",
                     ferry_verify_differs(r) ? "false" : "true", r->seconds);
    for (int i = 0; i < r->n_res; i++) {
        const struct ferry_verify_resource *x = &r->res[i];
        if (i > 0) ferry_buf_append(&b, ",", 1);
        ferry_buf_printf(&b, "{\"resource\":");
        ferry_buf_json_string(&b, x->resource, strlen(x->resource));
        ferry_buf_printf(&b, ",\"source\":");
        ferry_buf_json_string(&b, x->source_table ? x->source_table : "",
                              x->source_table ? strlen(x->source_table) : 0);
        ferry_buf_printf(&b, ",\"destination\":");
        ferry_buf_json_string(&b, x->dest_table ? x->dest_table : "",
                              x->dest_table ? strlen(x->dest_table) : 0);
        ferry_buf_printf(
            &b,
            ",\"source_rows\":%" PRId64 ",\"dest_rows\":%" PRId64 ",\"chunks\":%" PRId64
            ",\"chunks_mismatched\":%" PRId64 ",\"source_bytes\":%" PRId64
            ",\"dest_bytes\":%" PRId64 ",\"source_queries\":%" PRId64 ",\"dest_queries\":%" PRId64
            ",\"source_sort_runs\":%d,\"dest_sort_runs\":%d"
            ",\"seconds\":%.3f,\"repaired\":%" PRId64 ",\"repair_verified_equal\":%s",
            x->source_rows, x->dest_rows, x->chunks, x->chunks_mismatched, x->source_bytes,
            x->dest_bytes, x->source_queries, x->dest_queries, x->source_sort_runs,
            x->dest_sort_runs, x->seconds, x->repaired,
            x->repair_done ? (x->repair_clean ? "true" : "false") : "null");
        for (int k = 0; k < FERRY_VDIFF_KINDS; k++) {
            ferry_buf_printf(&b, ",\"%s\":{\"count\":%" PRId64 ",\"keys\":[", kind_names[k],
                             x->count[k]);
            for (int j = 0; j < x->n_listed[k]; j++) {
                if (j > 0) ferry_buf_append(&b, ",", 1);
                ferry_buf_json_string(&b, x->listed[k][j], strlen(x->listed[k][j]));
            }
            ferry_buf_printf(&b, "]}");
        }
        ferry_buf_printf(&b, ",\"not_compared\":[");
        for (int j = 0; j < x->n_not_compared; j++) {
            if (j > 0) ferry_buf_append(&b, ",", 1);
            ferry_buf_json_string(&b, x->not_compared[j], strlen(x->not_compared[j]));
        }
        ferry_buf_printf(&b, "]}");
    }
    ferry_buf_printf(&b, "]}");
    return ferry_buf_take(&b);
}

void ferry_verify_report_free(struct ferry_verify_report *r)
{
    if (r == NULL) return;
    for (int i = 0; i < r->n_res; i++)
        resource_clear(&r->res[i]);
    ferry_free(r->res);
    ferry_free(r);
}
