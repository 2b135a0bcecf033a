/* connectors/s3/s3_source.c - the `s3` source: Parquet, CSV and JSON Lines objects under a
 * prefix whose keys match a glob.
 *
 * Parquet: a shard is a run of an object's row groups (up to SHARD_BYTES of column chunks,
 * so one reader reads them in order); an object is never read whole: its footer first (its
 * last 64 KiB in one ranged GET, kept per instance for the objects planned so the reads do
 * not fetch it again), then the span of the selected column chunks of each row group in one
 * GET. Up to SLOTS ranges are fetched ahead, each on a thread with its own client, while a
 * group is decoded: the next groups (into the next shards and objects) and the footers of
 * the next objects (at plan time too), at most AHEAD_BYTES (parquet_reader.h;
 * docs/internals/s3-source.md, "Fetching ahead"). A batch position is the number of the
 * shard's rows delivered, counted on across its groups. The schema is the first object's
 * footer (every column nullable); every other object must have each selected column with
 * the same type.
 *
 * CSV and JSON Lines (plain, gzip or zstd: recognised by their first bytes): each object is
 * one shard, streamed by ranged GETs of CHUNK bytes (one chunk in memory, never the whole
 * object) through formats/input.c into the shared record loop (connectors/files/
 * formats/text_source.c): the same keys, schema inference, on_error and resume by decompressed byte
 * offset as the files source. Every chunk's ETag must be the listed one, so an object that
 * changes or disappears during the run stops it with an error naming the object.
 *
 * Keys (plan frozen: key, size and ETag of every object, listed in key order, pages of
 * max_keys): bucket (required), prefix, glob (fnmatch on the key after the prefix, `*`
 * crossing `/`; default every key with a .parquet, .csv, .jsonl, .ndjson or .json name,
 * .gz / .zst aside), format (else from the key), the text keys of the files source and the
 * connection keys of the s3 sink (endpoint, region, path_style, credentials by reference,
 * max_attempts: s3_client.c retries, signs with SigV4). A resource may set its own prefix
 * and glob, or instead of a glob `keys:`, the exact objects it reads (each under the prefix
 * and in its listing, else an error naming s3://bucket/key; s3_verify.c reads an s3 sink's
 * destination so). Parquet and text objects under one resource: refused naming the object.
 * mode: incremental without a cursor plans the objects new or changed (key, ETag, size)
 * since the route checkpoint; with `cursor: [column]` (Parquet objects only) every object
 * is planned, but only its row groups whose statistics allow a row above the saved cursor
 * ({"cursor": "N"}), those rows alone read (formats/parquet_cursor.c, as the files source).
 *
 * Owns 1 + SLOTS S3 clients (one per fetch-ahead slot), a response buffer, the readers of
 * the object being read and of the next one, the footers read, the listing discovery made
 * (for the plan), the parsed plan and the text options. Calls s3_client.c,
 * parquet_reader.c, formats/text_source.c, jansson. Registered in connectors/registry.c; one
 * instance per reader thread. */
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint/plan_cache.h"
#include "formats/parquet_cursor.h"
#include "formats/text_source.h"
#include "formats/parquet_reader.h"
#include "checkpoint/position.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "objstore/s3_client.h"
#include "objstore/sigv4.h"

static const char *const src_tuning_keys[] = {"parallelism", "max_attempts", "sample_rows",
                                              "max_keys", NULL};

#define CHUNK (4u << 20)                 /* bytes per ranged GET of a text object */
#define SLOTS 4                          /* ranges fetched ahead at most */
#define AHEAD_MAX ((size_t)32 << 20)     /* larger row groups are not fetched ahead */
#define AHEAD_BYTES ((size_t)32 << 20)   /* group bytes held ahead at most (one larger group) */
#define AHEAD_MISSES 2 /* unused groups of next shards: then only the own shard's are fetched */
#define FOOTER_TAIL ((size_t)64 << 10)   /* parquet_reader.c's TAIL_READ */
#define FOOTERS_MAX ((size_t)8 << 20)    /* footer bytes kept per instance */
#define FOOTERS_N 256                    /* footers kept per instance */
#define SHARD_BYTES ((size_t)64 << 20)   /* a Parquet shard's row groups: this many bytes */

struct s3src;

/* A ranged read of the object being read: key and ETag owned (ETag "" when none listed). */
struct obj {
    struct s3src *s;
    const char *key;
    const char *etag;  /* as listed ("" when the store sent none) */
    int64_t size, pos; /* text stream: the next byte to fetch */
    size_t at;         /* text stream: bytes of s->resp already handed out */
};

/* Bytes of an object at off: its footer (its last min(size, FOOTER_TAIL) bytes, all the
 * Parquet reader reads to open a remote object) or a row group's span. */
struct span {
    char *key, *etag;
    int64_t size;
    uint64_t off; /* of bytes */
    size_t n;     /* bytes at off (bytes.len once fetched) */
    struct ferry_buf bytes;
};

/* A range fetched ahead by a thread with the slot's own client (docs/internals/
 * s3-source.md, "Fetching ahead"): a row group's span (is_footer false) or a footer. */
struct slot {
    struct ferry__s3_client *cli;
    pthread_t th;
    bool busy;   /* th started and not joined */
    atomic_bool done; /* th has finished (joining it will not wait) */
    bool held;   /* fetched for a read still to come */
    bool served; /* a read took its bytes */
    bool is_footer;
    int rc;   /* th's outcome, read once joined: FERRY_OK when f holds the bytes */
    struct ferry_error err;
    struct span f;
};

/* A Parquet object open for reading: its reader over o (key and ETag owned). */
struct reading {
    struct ferry_parquet_reader *r;
    struct obj o;
};

struct s3src {
    struct ferry__s3_client *cli;
    char *prefix, *glob;
    int64_t max_keys;         /* listing page size (S3: at most 1000) */
    struct ferry__text_src t; /* format, CSV / JSON Lines keys */
    struct ferry_buf resp;    /* ranged GET bodies */
    /* Parquet: the object being read (its footer reused by its next shards) and the next
     * one, opened from its fetched footer to fetch its first groups ahead */
    struct reading rd[2], *cur, *next;
    struct slot slots[SLOTS];
    int misses;               /* groups fetched ahead and not read (another reader took them) */
    struct span *footers;   /* footers read, for the reads to come */
    int n_footers;
    size_t footer_bytes;
    json_t *listed;           /* {"prefix\nglob": listing} of discovery, taken by the plan */
    struct ferry_plan_cache plan; /* the frozen plan extract was last given, parsed */
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 source: out of memory");
}

static void span_free(struct span *f)
{
    ferry_free(f->key);
    ferry_free(f->etag);
    ferry_buf_release(&f->bytes);
    memset(f, 0, sizeof *f);
    ferry_buf_init(&f->bytes, 0);
}

/* Joins the slot's fetch, if one runs. */
static void slot_wait(struct slot *sl)
{
    if (sl->busy) pthread_join(sl->th, NULL);
    sl->busy = false;
}

static void reading_drop(struct reading *x)
{
    ferry__parquet_reader_free(x->r);
    x->r = NULL;
    ferry_free((char *)x->o.key);
    ferry_free((char *)x->o.etag);
    x->o.key = x->o.etag = NULL;
}

static void src_close(void *ctx)
{
    struct s3src *s = ctx;
    if (s == NULL) return;
    for (int i = 0; i < SLOTS; i++) {
        slot_wait(&s->slots[i]);
        ferry__s3_client_close(s->slots[i].cli);
        span_free(&s->slots[i].f);
    }
    for (int i = 0; i < s->n_footers; i++)
        span_free(&s->footers[i]);
    ferry_free(s->footers);
    json_decref(s->listed);
    ferry_plan_cache_clear(&s->plan);
    reading_drop(&s->rd[0]);
    reading_drop(&s->rd[1]);
    ferry__s3_client_close(s->cli);
    ferry_free(s->prefix);
    ferry_free(s->glob);
    ferry__text_src_release(&s->t);
    ferry_buf_release(&s->resp);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *bucket = NULL, *prefix = "", *glob = NULL;
    int64_t max_keys = 1000;
    int rc = ferry_cfg_str(cfg, "bucket", true, &bucket, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "prefix", false, &prefix, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "glob", false, &glob, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "max_keys", false, 1, 1000, &max_keys, err);
    if (rc != FERRY_OK) return rc;
    struct s3src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    ferry_buf_init(&s->resp, 0);
    for (int i = 0; i < SLOTS; i++)
        ferry_buf_init(&s->slots[i].f.bytes, 0);
    s->cur = &s->rd[0];
    s->next = &s->rd[1];
    s->max_keys = max_keys;
    rc = ferry__text_src_open(cfg, &s->t, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    s->prefix = ferry_strdup(prefix ? prefix : "");
    s->glob = glob ? ferry_strdup(glob) : NULL;
    if (s->prefix == NULL || (glob && s->glob == NULL)) {
        src_close(s);
        return nomem(err);
    }
    struct ferry_cfg *bn = ferry_cfg_get(cfg, "bucket");
    rc = ferry__s3_client_open(cfg, bucket, bn, "s3 source", &s->cli, err);
    for (int i = 0; rc == FERRY_OK && i < SLOTS; i++)
        rc = ferry__s3_client_open(cfg, bucket, bn, "s3 source", &s->slots[i].cli, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    *ctx = s;
    return FERRY_OK;
}

/* ---- listing ------------------------------------------------------------------------------ */

/* The resource's prefix and glob: its own, else the source's. */
static int where(const struct s3src *s, const struct ferry_resource_spec *spec, const char **prefix,
                 const char **glob, struct ferry_error *err)
{
    *prefix = s->prefix;
    *glob = s->glob;
    int rc = FERRY_OK;
    if (spec->node != NULL) rc = ferry_cfg_str(spec->node, "prefix", false, prefix, err);
    if (rc == FERRY_OK && spec->node != NULL)
        rc = ferry_cfg_str(spec->node, "glob", false, glob, err);
    return rc;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* A key the source reads without a glob: .parquet, or .csv, .jsonl, .ndjson, .json with an
 * optional .gz / .zst after it. */
static bool known_name(const char *key)
{
    size_t n = strlen(key);
    if (ends_with(key, n, ".parquet")) return true;
    if (ends_with(key, n, ".gz"))
        n -= 3;
    else if (ends_with(key, n, ".zst"))
        n -= 4;
    return ends_with(key, n, ".csv") || ends_with(key, n, ".jsonl") ||
           ends_with(key, n, ".ndjson") || ends_with(key, n, ".json");
}

/* A resource's `keys:`: the exact objects it reads instead of a glob's, sorted, each once;
 * seen[i]: keys[i] was listed. n == 0: the resource has none. */
struct keyset {
    char **keys;
    bool *seen;
    int n;
};

static void keyset_free(struct keyset *ks)
{
    ferry_cfg_strv_free(ks->keys);
    ferry_free(ks->seen);
    memset(ks, 0, sizeof *ks);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ks's n keys sorted, each once (ks->n of them). */
static void keyset_sort(struct keyset *ks, int n)
{
    qsort(ks->keys, (size_t)n, sizeof *ks->keys, str_cmp);
    for (int i = 0; i < n; i++) {
        if (ks->n > 0 && strcmp(ks->keys[ks->n - 1], ks->keys[i]) == 0)
            ferry_free(ks->keys[i]);
        else
            ks->keys[ks->n++] = ks->keys[i];
    }
    ks->keys[ks->n] = NULL; /* the end mark of ferry_cfg_strv_free */
}

/* The resource's `keys:` into ks (none: ks->n 0): a non-empty list of strings, no glob of the
 * resource's beside it, each key under prefix; sorted, duplicates once. */
static int exact_keys(const struct s3src *s, const struct ferry_resource_spec *spec,
                      const char *prefix, struct keyset *ks, struct ferry_error *err)
{
    memset(ks, 0, sizeof *ks);
    struct ferry_cfg *node = spec->node ? ferry_cfg_get(spec->node, "keys") : NULL;
    if (node == NULL) return FERRY_OK;
    if (ferry_cfg_get(spec->node, "glob") != NULL)
        return ferry_cfg_error(err, node, "resource %s: `keys` and `glob` exclude each other",
                               spec->table);
    int n = 0;
    int rc = ferry_cfg_strv(spec->node, "keys", true, &ks->keys, &n, err);
    if (rc == FERRY_OK && n == 0)
        rc = ferry_cfg_error(err, node,
                             "resource %s: an empty list reads no object (leave `keys` "
                             "out to read every object under the prefix)",
                             spec->table);
    size_t pl = strlen(prefix);
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        if (strncmp(ks->keys[i], prefix, pl) != 0 || ks->keys[i][pl] == '\0')
            rc =
                ferry_cfg_error(err, node, "resource %s: s3://%s/%s is not under the prefix \"%s\"",
                                spec->table, ferry__s3_client_bucket(s->cli), ks->keys[i], prefix);
    if (rc == FERRY_OK && (ks->seen = ferry_calloc((size_t)n, sizeof *ks->seen)) == NULL)
        rc = nomem(err);
    if (rc != FERRY_OK) {
        keyset_free(ks);
        return rc;
    }
    keyset_sort(ks, n);
    return FERRY_OK;
}

/* Whether the listed key (rel: after the prefix) is the resource's: one of its `keys` (then
 * seen), else matching its glob, else a known name. */
static bool wanted(struct keyset *ks, const char *glob, const char *key, const char *rel)
{
    if (ks->n == 0) return glob ? fnmatch(glob, rel, 0) == 0 : known_name(key);
    char **k = bsearch(&key, ks->keys, (size_t)ks->n, sizeof *ks->keys, str_cmp);
    if (k == NULL) return false;
    ks->seen[k - ks->keys] = true;
    return true;
}

/* The first of `keys` the listing did not hold, as an error naming it (FERRY_ENOTFOUND). */
static int keys_missing(const struct s3src *s, const struct ferry_resource_spec *spec,
                        const struct keyset *ks, struct ferry_error *err)
{
    for (int i = 0; i < ks->n; i++)
        if (!ks->seen[i])
            return ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                                   "s3 source: resource %s: s3://%s/%s is named by `keys` but is "
                                   "not in the bucket",
                                   spec->table, ferry__s3_client_bucket(s->cli), ks->keys[i]);
    return FERRY_OK;
}

/* Every object under prefix matching glob (or known_name without one; or one of the
 * resource's `keys`, each of which must be there), as [{"key", "size", "etag"}], in key
 * order; FERRY_ENOTFOUND when none. keep (discovery): the listing is kept for the next call
 * with the same prefix and glob (the plan's; with `keys`, the same resource's), which takes
 * it instead of listing again. */
static int list_objects(struct s3src *s, const struct ferry_resource_spec *spec, bool keep,
                        json_t **out, struct ferry_error *err)
{
    const char *prefix, *glob;
    struct keyset ks;
    int rc = where(s, spec, &prefix, &glob, err);
    if (rc == FERRY_OK) rc = exact_keys(s, spec, prefix, &ks, err);
    if (rc != FERRY_OK) return rc;
    char lk[2048];
    snprintf(lk, sizeof lk, "%s\n%s\n%s", prefix, glob ? glob : "", ks.n ? spec->table : "");
    json_t *arr = json_object_get(s->listed, lk);
    if (arr != NULL) { /* discovery's, just before the plan */
        *out = json_incref(arr);
        json_object_del(s->listed, lk);
        keyset_free(&ks);
        return FERRY_OK;
    }
    arr = json_array();
    struct ferry_buf qs, resp, item, key, size, etag, tok;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 64 << 20);
    ferry_buf_init(&item, 0);
    ferry_buf_init(&key, 0);
    ferry_buf_init(&size, 0);
    ferry_buf_init(&etag, 0);
    ferry_buf_init(&tok, 0);
    bool more = true;
    int pages = 0;
    if (arr == NULL) rc = nomem(err);
    while (rc == FERRY_OK && more) {
        ferry_buf_reset(&qs);
        int brc = FERRY_OK;
        if (tok.len) {
            brc = ferry_buf_printf(&qs, "continuation-token=");
            if (brc == FERRY_OK) brc = ferry__s3_uri_encode(&qs, tok.data, false);
            if (brc == FERRY_OK) brc = ferry_buf_printf(&qs, "&");
        }
        if (brc == FERRY_OK)
            brc = ferry_buf_printf(&qs, "list-type=2&max-keys=%" PRId64 "&prefix=", s->max_keys);
        if (brc == FERRY_OK) brc = ferry__s3_uri_encode(&qs, prefix, false);
        if (brc != FERRY_OK) {
            rc = nomem(err);
            break;
        }
        struct ferry__s3_req q = {.method = "GET", .key = NULL, .query = qs.data};
        rc = ferry__s3_call(s->cli, &q, false, &resp, err);
        if (rc != FERRY_OK) break;
        if (++pages > 1000000) {
            rc = ferry_error_set(err, FERRY_ESOURCE, "s3", "s3 source: listing %s never ends",
                                 prefix);
            break;
        }
        const char *from = NULL;
        while (rc == FERRY_OK && resp.data &&
               ferry__s3_xml_next(resp.data, "Contents", &from, &item)) {
            const char *f2 = NULL, *f3 = NULL, *f4 = NULL;
            if (!ferry__s3_xml_next(item.data, "Key", &f2, &key) ||
                !ferry__s3_xml_next(item.data, "Size", &f3, &size)) {
                rc = ferry_error_set(err, FERRY_ESOURCE, "s3",
                                     "s3 source: listing %s: an entry without Key or Size", prefix);
                break;
            }
            if (!ferry__s3_xml_next(item.data, "ETag", &f4, &etag)) ferry_buf_reset(&etag);
            if (!wanted(&ks, glob, key.data, key.data + strlen(prefix))) continue;
            json_t *o = json_pack("{s:s,s:I,s:s}", "key", key.data, "size",
                                  (json_int_t)strtoll(size.data, NULL, 10), "etag",
                                  etag.len ? etag.data : "");
            if (o == NULL || json_array_append_new(arr, o) != 0) rc = nomem(err);
        }
        from = NULL;
        more = false;
        if (rc == FERRY_OK && resp.data &&
            ferry__s3_xml_next(resp.data, "IsTruncated", &from, &item))
            more = strcmp(item.data, "true") == 0;
        from = NULL;
        if (more && !ferry__s3_xml_next(resp.data, "NextContinuationToken", &from, &tok))
            more = false;
    }
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    ferry_buf_release(&item);
    ferry_buf_release(&key);
    ferry_buf_release(&size);
    ferry_buf_release(&etag);
    ferry_buf_release(&tok);
    if (rc == FERRY_OK) rc = keys_missing(s, spec, &ks, err);
    keyset_free(&ks);
    if (rc == FERRY_OK && json_array_size(arr) == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                             "s3 source: resource %s: no object under s3://%s/%s matches %s",
                             spec->table, ferry__s3_client_bucket(s->cli), prefix,
                             glob ? glob : "*.{parquet,csv,jsonl,ndjson,json}[.gz|.zst]");
    if (rc != FERRY_OK) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    /* kept for the plan that follows discovery (one listing, not two) */
    if (keep && (s->listed != NULL || (s->listed = json_object()) != NULL))
        json_object_set(s->listed, lk, arr);
    return FERRY_OK;
}

/* ---- ranged reads -------------------------------------------------------------------------- */

static void unquote(const char **p, size_t *n)
{
    if (*n >= 2 && (*p)[0] == '"' && (*p)[*n - 1] == '"') {
        (*p)++;
        *n -= 2;
    }
}

/* ETags equal, their surrounding quotes aside (stores differ between listing and headers). */
static bool etag_eq(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unquote(&a, &na);
    unquote(&b, &nb);
    return na == nb && memcmp(a, b, na) == 0;
}

/* Bytes [off, off + n) of key into out through cli: one ranged GET (s3_client.c retries),
 * checked against the listed size and ETag. */
static int fetch_range(struct ferry__s3_client *cli, const char *key, const char *want_etag,
                       uint64_t off, size_t n, struct ferry_buf *out, struct ferry_error *err)
{
    const char *bucket = ferry__s3_client_bucket(cli);
    char range[64], etag[256];
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, off, off + n - 1);
    struct ferry__s3_req q = {.method = "GET", .key = key, .query = "", .range = range};
    ferry_buf_reset(out);
    int rc = ferry__s3_call(cli, &q, true, out, err);
    if (rc == FERRY_ENOTFOUND)
        return ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                               "s3 source: s3://%s/%s is gone (deleted after it was listed)",
                               bucket, key);
    if (rc != FERRY_OK) return rc;
    if (want_etag && want_etag[0] && ferry__s3_last_header(cli, "ETag", etag, sizeof etag) &&
        !etag_eq(etag, want_etag))
        return ferry_error_set(err, FERRY_ESOURCE, "s3",
                               "s3 source: s3://%s/%s changed since it was listed (ETag %s, "
                               "listed %s); start a new run",
                               bucket, key, etag, want_etag);
    if (out->len != n)
        return ferry_error_set(err, FERRY_ESOURCE, "s3",
                               "s3 source: s3://%s/%s: %zu bytes at %" PRIu64 " asked, %zu came "
                               "(the object changed since it was listed?)",
                               bucket, key, n, off, out->len);
    return FERRY_OK;
}

static int get_range(struct obj *o, uint64_t off, size_t n, struct ferry_error *err)
{
    return fetch_range(o->s->cli, o->key, o->etag, off, n, &o->s->resp, err);
}

/* ---- fetching ahead ----------------------------------------------------------------------- */

static bool same_object(const struct span *f, const char *key, const char *etag, int64_t size)
{
    return f->key != NULL && strcmp(f->key, key) == 0 && strcmp(f->etag, etag) == 0 &&
           f->size == size;
}

/* Whether f's range [f->off, f->off + f->n) holds [off, off + k). */
static bool covers(const struct span *f, uint64_t off, size_t k)
{
    return off >= f->off && k <= f->n && off - f->off <= f->n - k;
}

static size_t tail_len(int64_t size)
{
    return (size_t)size < FOOTER_TAIL ? (size_t)size : FOOTER_TAIL;
}

static void *slot_run(void *arg)
{
    struct slot *sl = arg;
    struct span *f = &sl->f;
    sl->rc = fetch_range(sl->cli, f->key, f->etag, f->off, f->n, &f->bytes, &sl->err);
    atomic_store(&sl->done, true);
    return NULL;
}

/* One range to fetch ahead: a footer, or the span of a shard's row group. */
struct want {
    bool is_footer;
    const char *key, *etag;
    int64_t size;
    uint64_t off;
    size_t n;
};

static const struct span *cached_footer(const struct s3src *s, const char *key, const char *etag,
                                          int64_t size)
{
    for (int i = 0; i < s->n_footers; i++)
        if (same_object(&s->footers[i], key, etag, size)) return &s->footers[i];
    return NULL;
}

static bool slot_has(const struct slot *sl, const struct want *w)
{
    return sl->f.key != NULL && sl->is_footer == w->is_footer &&
           same_object(&sl->f, w->key, w->etag, w->size) &&
           (w->is_footer || (sl->f.off == w->off && sl->f.n == w->n));
}

/* Starts fetching w on sl's thread (sl idle and not held). A footer of an object too small
 * for Parquet is not fetched ahead (the reader's own reads say what is wrong). */
static void slot_start(struct slot *sl, const struct want *w)
{
    ferry_free(sl->f.key);
    ferry_free(sl->f.etag);
    sl->f.key = sl->f.etag = NULL;
    ferry_buf_reset(&sl->f.bytes); /* its memory serves the next fetch (no fresh pages) */
    if (w->is_footer && w->size < 12) return;
    sl->f.key = ferry_strdup(w->key);
    sl->f.etag = ferry_strdup(w->etag);
    sl->f.size = w->size;
    sl->is_footer = w->is_footer;
    sl->f.n = w->is_footer ? tail_len(w->size) : w->n;
    sl->f.off = w->is_footer ? (uint64_t)w->size - sl->f.n : w->off;
    sl->served = false;
    if (sl->f.key == NULL || sl->f.etag == NULL || ferry_buf_reserve(&sl->f.bytes, sl->f.n + 1)) {
        span_free(&sl->f);
        return;
    }
    atomic_store(&sl->done, false);
    if (pthread_create(&sl->th, NULL, slot_run, sl) != 0) {
        span_free(&sl->f);
        return;
    }
    sl->busy = sl->held = true;
}

/* Fetches ahead what the next reads want (at most SLOTS ranges, in the order they will be
 * read): a slot already holding one of them keeps it, a slot holding something else is let
 * go (a row group never read counts as a miss), and the others start on free slots. */
static void fetch_ahead(struct s3src *s, const struct want *w, int nw)
{
    bool have[SLOTS] = {false}, keep[SLOTS] = {false};
    for (int j = 0; j < nw && j < SLOTS; j++) {
        if (w[j].is_footer && cached_footer(s, w[j].key, w[j].etag, w[j].size) != NULL)
            have[j] = true;
        for (int i = 0; i < SLOTS && !have[j]; i++)
            if (s->slots[i].held && slot_has(&s->slots[i], &w[j])) have[j] = keep[i] = true;
    }
    for (int i = 0; i < SLOTS; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->held || keep[i]) continue;
        if (!sl->served && !sl->is_footer) s->misses++;
        sl->held = false;
    }
    for (int j = 0; j < nw && j < SLOTS; j++) {
        if (have[j]) continue;
        int i = 0;
        while (i < SLOTS && s->slots[i].held)
            i++;
        if (i == SLOTS) return;
        slot_wait(&s->slots[i]);
        slot_start(&s->slots[i], &w[j]);
    }
}

/* A fetched footer kept for the next reader of its object (while there is room). */
static void keep_footer(struct s3src *s, struct slot *sl)
{
    if (s->n_footers == FOOTERS_N || s->footer_bytes + sl->f.bytes.len > FOOTERS_MAX) return;
    if (s->footers == NULL && (s->footers = ferry_calloc(FOOTERS_N, sizeof *s->footers)) == NULL)
        return;
    s->footers[s->n_footers++] = sl->f;
    s->footer_bytes += sl->f.bytes.len;
    memset(&sl->f, 0, sizeof sl->f);
    ferry_buf_init(&sl->f.bytes, 0);
    sl->held = false;
}

/* Bytes [off, off + n) of o from a kept footer or a slot (its fetch joined), or NULL. */
static const void *fetched(struct s3src *s, const struct obj *o, uint64_t off, size_t n)
{
    const struct span *f = cached_footer(s, o->key, o->etag, o->size);
    if (f != NULL && covers(f, off, n)) return f->bytes.data + (off - f->off);
    for (int i = 0; i < SLOTS; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->f.key == NULL || !same_object(&sl->f, o->key, o->etag, o->size) ||
            !covers(&sl->f, off, n))
            continue;
        slot_wait(sl);
        if (sl->rc != FERRY_OK) continue; /* the reader's own GET reports what is wrong */
        sl->served = true;
        if (sl->is_footer) keep_footer(s, sl); /* moved when there is room */
        f = sl->is_footer ? cached_footer(s, o->key, o->etag, o->size) : NULL;
        if (f == NULL) f = &sl->f;
        return f->bytes.data + (off - f->off);
    }
    return NULL;
}

/* The parquet reader's reads: from what was fetched ahead, else a GET. */
static int obj_read_at(void *ctx, uint64_t off, size_t n, void *p, struct ferry_error *err)
{
    struct obj *o = ctx;
    const void *q = fetched(o->s, o, off, n);
    if (q != NULL) {
        memcpy(p, q, n);
        return FERRY_OK;
    }
    int rc = get_range(o, off, n, err);
    if (rc == FERRY_OK) memcpy(p, o->s->resp.data, n);
    return rc;
}

/* formats/input.c's raw bytes of a text object: CHUNK bytes per GET, handed out in pieces. */
static int obj_stream(void *ctx, void *p, size_t cap, size_t *n, struct ferry_error *err)
{
    struct obj *o = ctx;
    struct ferry_buf *b = &o->s->resp;
    *n = 0;
    if (o->at == b->len) {
        if (o->pos >= o->size) return FERRY_OK;
        size_t want = o->size - o->pos < (int64_t)CHUNK ? (size_t)(o->size - o->pos) : CHUNK;
        int rc = get_range(o, (uint64_t)o->pos, want, err);
        if (rc != FERRY_OK) return rc;
        o->pos += (int64_t)want;
        o->at = 0;
    }
    size_t k = b->len - o->at < cap ? b->len - o->at : cap;
    memcpy(p, b->data + o->at, k);
    o->at += k;
    *n = k;
    return FERRY_OK;
}

static void obj_init(struct obj *o, struct s3src *s, const char *key, const char *etag,
                     int64_t size, char *name, size_t cap)
{
    memset(o, 0, sizeof *o);
    o->s = s;
    o->key = key;
    o->etag = etag;
    o->size = size;
    ferry_buf_reset(&s->resp);
    snprintf(name, cap, "s3://%s/%s", ferry__s3_client_bucket(s->cli), key);
}

static int open_object(struct s3src *s, const char *key, const char *etag, int64_t size,
                       struct obj *o, struct ferry_parquet_reader **r, struct ferry_error *err)
{
    char name[1200];
    obj_init(o, s, key, etag, size, name, sizeof name);
    return ferry__parquet_reader_open_ranged((uint64_t)size, obj_read_at, o, name, r, err);
}

/* A text object as a decompressed stream (formats/input.c); o must outlive *in. */
static int open_text(struct s3src *s, const char *key, const char *etag, int64_t size,
                     struct obj *o, char *name, size_t cap, struct ferry__files_input **in,
                     struct ferry_error *err)
{
    obj_init(o, s, key, etag, size, name, cap);
    return ferry__files_input_open_fn(name, obj_stream, o, in, err);
}

static bool is_parquet(const struct s3src *s, const char *key)
{
    return ferry__text_format_of(&s->t, key) == FILES_FMT_PARQUET;
}

/* ---- discover ------------------------------------------------------------------------------ */

static const char *ob_key(const json_t *ob)
{
    return json_string_value(json_object_get(ob, "key"));
}

static int64_t ob_size(const json_t *ob)
{
    return (int64_t)json_integer_value(json_object_get(ob, "size"));
}

static const char *ob_etag(const json_t *ob)
{
    const char *e = json_string_value(json_object_get(ob, "etag"));
    return e ? e : "";
}

/* Incremental: whether the previous runs read ob as it is now ("etag size" in `seen`). */
static bool seen_before(const json_t *seen, const json_t *ob)
{
    const char *v = json_string_value(json_object_get(seen, ob_key(ob)));
    char now[320];
    snprintf(now, sizeof now, "%s %" PRId64, ob_etag(ob), ob_size(ob));
    return v != NULL && strcmp(v, now) == 0;
}

/* The footers of the Parquet objects from objs[i] on that the plan reads next, fetched
 * ahead (SLOTS in flight, not one GET after another). */
static void plan_ahead(struct s3src *s, const json_t *objs, size_t i, const json_t *seen)
{
    struct want w[SLOTS];
    int nw = 0;
    for (; i < json_array_size(objs) && nw < SLOTS; i++) {
        const json_t *ob = json_array_get(objs, i);
        if ((seen && seen_before(seen, ob)) || !is_parquet(s, ob_key(ob))) continue;
        w[nw++] = (struct want){true, ob_key(ob), ob_etag(ob), ob_size(ob), 0, 0};
    }
    fetch_ahead(s, w, nw);
}

/* Parquet: the first object's footer; text: declared, else inferred from the first object. */
static int discover_first(struct s3src *s, const struct ferry_resource_spec *spec,
                          const json_t *first, struct ferry_schema **out, struct ferry_error *err)
{
    struct ferry_cfg *decl = ferry__text_declared(spec);
    struct obj o;
    int rc = FERRY_OK;
    if (is_parquet(s, ob_key(first))) {
        if (decl != NULL)
            return ferry_cfg_error(err, decl,
                                   "resource %s: Parquet objects carry their schema; remove "
                                   "`schema`",
                                   spec->table);
        struct ferry_parquet_reader *r = NULL;
        rc = open_object(s, ob_key(first), ob_etag(first), ob_size(first), &o, &r, err);
        if (rc == FERRY_OK)
            rc = ferry__text_select(ferry__parquet_reader_schema(r), spec, "s3", out, err);
        ferry__parquet_reader_free(r);
        return rc;
    }
    char name[1200];
    struct ferry__files_input *in = NULL;
    struct ferry_schema *all = NULL;
    if (decl == NULL)
        rc = open_text(s, ob_key(first), ob_etag(first), ob_size(first), &o, name, sizeof name, &in,
                       err);
    else
        snprintf(name, sizeof name, "s3://%s/%s", ferry__s3_client_bucket(s->cli), ob_key(first));
    if (rc == FERRY_OK) rc = ferry__text_schema(&s->t, spec, in, name, &all, err);
    if (rc == FERRY_OK) rc = ferry__text_select(all, spec, "s3", out, err);
    ferry_schema_unref(all);
    return rc;
}

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct s3src *s = ctx;
    json_t *objs = NULL;
    int rc = list_objects(s, spec, true, &objs, err);
    /* the first objects' footers in parallel: the plan reads them next */
    if (rc == FERRY_OK) plan_ahead(s, objs, 0, NULL);
    if (rc == FERRY_OK) rc = discover_first(s, spec, json_array_get(objs, 0), out, err);
    json_decref(objs);
    return rc;
}

/* ---- plan ---------------------------------------------------------------------------------- */

/* A cursor read (Parquet objects, `cursor: [column]`): the saved cursor (route checkpoint
 * {"cursor": "N"}), the largest value of the objects planned and the groups skipped. */
struct cursor_plan {
    struct ferry_parquet_floor floor;
    int64_t hi;
    bool has_hi;
    int skipped;
};

/* The row groups of r a cursor read wants (want: NULL without a cursor: every group). */
static int cursor_groups(struct s3src *s, struct ferry_parquet_reader *r, const char *key,
                         struct cursor_plan *cp, bool **want, struct ferry_error *err)
{
    *want = NULL;
    if (cp == NULL) return FERRY_OK;
    char name[1200];
    snprintf(name, sizeof name, "s3 source: s3://%s/%s", ferry__s3_client_bucket(s->cli), key);
    int n = 0;
    return ferry__parquet_cursor_groups(r, name, &cp->floor, want, &n, &cp->skipped, &cp->hi,
                                        &cp->has_hi, err);
}

/* A Parquet shard of object ob appended to shards: its row groups `run` (taken), the first
 * as "group" and all as "groups" when more than one; with a cursor, the floor. */
static int add_shard(const json_t *ob, json_t *run, const struct cursor_plan *cp, json_t *shards,
                     struct ferry_error *err)
{
    json_t *sh = json_pack("{s:s,s:I,s:s,s:O}", "key", ob_key(ob), "size",
                           (json_int_t)ob_size(ob), "etag", ob_etag(ob), "group",
                           json_array_get(run, 0));
    int rc = sh == NULL ? nomem(err) : FERRY_OK;
    if (rc == FERRY_OK && json_array_size(run) > 1 && json_object_set(sh, "groups", run) != 0)
        rc = nomem(err);
    char fl[32];
    snprintf(fl, sizeof fl, "%" PRId64, cp ? cp->floor.value : 0);
    if (rc == FERRY_OK && cp && cp->floor.has_value &&
        json_object_set_new(sh, "floor", json_string(fl)) != 0)
        rc = nomem(err);
    if (rc == FERRY_OK && json_array_append(shards, sh) != 0) rc = nomem(err);
    json_decref(sh);
    json_decref(run);
    return rc;
}

/* The shards of one object appended to `shards`: for Parquet, runs of its consecutive
 * planned row groups up to SHARD_BYTES of column chunks (a larger group alone), so that
 * one reader reads an object in order and fetches its groups ahead (every footer read
 * here: a corrupt or lying one stops the run before any write; with a cursor only the
 * groups that may hold rows above it, carrying the floor); one for text. */
static int plan_object(struct s3src *s, const struct ferry_resource_spec *spec, const json_t *ob,
                       const json_t *first, struct cursor_plan *cp, int *fskipped, json_t *shards,
                       json_int_t *rows, struct ferry_error *err)
{
    const char *key = ob_key(ob), *bucket = ferry__s3_client_bucket(s->cli);
    bool pq = is_parquet(s, key);
    if (pq != is_parquet(s, ob_key(first)))
        return ferry_error_set(err, FERRY_EINVAL, "s3",
                               "s3 source: resource %s: s3://%s/%s is %s but s3://%s/%s is not: "
                               "a resource reads Parquet objects or CSV / JSON Lines objects, "
                               "not both (narrow the glob)",
                               spec->table, bucket, key, pq ? "Parquet" : "text", bucket,
                               ob_key(first));
    if (!pq && cp != NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "s3",
                               "s3 source: resource %s: s3://%s/%s: a `cursor:` is read from "
                               "Parquet objects only (remove it to read new objects incrementally)",
                               spec->table, bucket, key);
    if (!pq) {
        json_t *sh = json_pack("{s:s,s:I,s:s,s:s}", "key", key, "size", (json_int_t)ob_size(ob),
                               "etag", ob_etag(ob), "format",
                               ferry__text_format_word(ferry__text_format_of(&s->t, key)));
        return sh == NULL || json_array_append_new(shards, sh) != 0 ? nomem(err) : FERRY_OK;
    }
    struct obj o;
    struct ferry_parquet_reader *r = NULL;
    bool *want = NULL;
    int rc = open_object(s, key, ob_etag(ob), ob_size(ob), &o, &r, err);
    if (rc == FERRY_OK) rc = cursor_groups(s, r, key, cp, &want, err);
    const struct ferry_read_context *rx = ferry_read_context_of(spec);
    json_t *run = NULL; /* the groups of the shard being made */
    size_t bytes = 0;
    for (int g = 0; rc == FERRY_OK && g < ferry__parquet_reader_num_groups(r); g++) {
        if (want && !want[g]) continue;
        /* a row group a `filter` transform provably rejects whole is not planned */
        if (rx->n_filters > 0 && ferry__parquet_group_filtered(r, g, rx->filters, rx->n_filters)) {
            (*fskipped)++;
            continue;
        }
        uint64_t off;
        size_t n = SHARD_BYTES;
        (void)ferry__parquet_reader_group_span(r, g, &off, &n);
        if (run != NULL && bytes + n > SHARD_BYTES) {
            rc = add_shard(ob, run, cp, shards, err);
            run = NULL;
        }
        if (run == NULL) bytes = 0;
        if (rc == FERRY_OK && run == NULL && (run = json_array()) == NULL) rc = nomem(err);
        if (rc == FERRY_OK && json_array_append_new(run, json_integer(g)) != 0) rc = nomem(err);
        bytes += n;
        *rows += ferry__parquet_reader_group_rows(r, g);
    }
    if (rc == FERRY_OK && run != NULL) rc = add_shard(ob, run, cp, shards, err);
    else json_decref(run);
    ferry_free(want);
    ferry__parquet_reader_free(r);
    return rc;
}

/* {"objects": {key: "etag size"}} of every object listed now: the route's next position. */
static int remember(const json_t *objs, json_t **out, struct ferry_error *err)
{
    json_t *m = json_object();
    for (size_t i = 0; m && i < json_array_size(objs); i++) {
        const json_t *ob = json_array_get(objs, i);
        char v[320];
        snprintf(v, sizeof v, "%s %" PRId64, ob_etag(ob), ob_size(ob));
        if (json_object_set_new(m, ob_key(ob), json_string(v)) != 0) {
            json_decref(m);
            m = NULL;
        }
    }
    *out = m ? json_pack("{s:o}", "objects", m) : NULL;
    return *out ? FERRY_OK : nomem(err);
}

/* A cursor read's next route checkpoint: the largest value planned (the objects are frozen
 * by their ETags: no row above it is read now), or the saved one. */
static int cursor_next(const struct cursor_plan *cp, json_t **next, struct ferry_error *err)
{
    char v[32];
    bool any = cp->has_hi || cp->floor.has_value;
    int64_t hi =
        cp->has_hi && (!cp->floor.has_value || cp->hi > cp->floor.value) ? cp->hi : cp->floor.value;
    snprintf(v, sizeof v, "%" PRId64, hi);
    *next = json_pack("{s:o}", "cursor", any ? json_string(v) : json_null());
    return *next ? FERRY_OK : nomem(err);
}

/* The shards of every listed object (incremental: of those new or changed since the route
 * checkpoint, or with a cursor the row groups above it; none: one empty shard) and,
 * incremental, the next route checkpoint. */
static int plan_shards(struct s3src *s, const struct ferry_resource_spec *spec,
                       const char *route_checkpoint, json_t *plan, struct ferry_error *err)
{
    json_t *objs = NULL, *shards = json_array(), *prev = NULL, *next = NULL;
    bool incr = spec->mode == FERRY_READ_INCREMENTAL;
    struct cursor_plan cpl = {{NULL, false, 0}, 0, false, 0}, *cp = NULL;
    int fskipped = 0;
    int rc = shards == NULL ? nomem(err) : list_objects(s, spec, false, &objs, err);
    json_int_t rows = 0;
    if (rc == FERRY_OK && spec->cursor != NULL) {
        cp = &cpl;
        rc = ferry__parquet_saved_cursor(spec, route_checkpoint, "s3", &cpl.floor, err);
    } else if (rc == FERRY_OK && incr && route_checkpoint != NULL) {
        prev = json_loads(route_checkpoint, 0, NULL);
        if (!json_is_object(json_object_get(prev, "objects")))
            rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                                 "resource %s: the saved position is not the s3 source's: %.200s",
                                 spec->table, route_checkpoint);
    }
    const json_t *seen = json_object_get(prev, "objects");
    for (size_t i = 0; i < json_array_size(objs) && rc == FERRY_OK; i++) {
        const json_t *ob = json_array_get(objs, i);
        if (seen && seen_before(seen, ob)) continue;
        plan_ahead(s, objs, i, seen);
        rc = plan_object(s, spec, ob, json_array_get(objs, 0), cp, &fskipped, shards, &rows, err);
    }
    if (rc == FERRY_OK && json_array_size(shards) == 0 &&
        json_array_append_new(shards, json_pack("{s:b}", "none", 1)) != 0)
        rc = nomem(err);
    if (rc == FERRY_OK && cp != NULL)
        rc = cursor_next(cp, &next, err);
    else if (rc == FERRY_OK && incr)
        rc = remember(objs, &next, err);
    if (rc == FERRY_OK && (cp != NULL || ferry_read_context_of(spec)->n_filters > 0) &&
        json_object_set_new(plan, "row_groups_skipped",
                            json_integer((cp ? cp->skipped : 0) + fskipped)) != 0)
        rc = nomem(err);
    if (rc == FERRY_OK && (json_object_set(plan, "shards", shards) != 0 ||
                           json_object_set_new(plan, "rows_estimate", json_integer(rows)) != 0 ||
                           (next && json_object_set(plan, "route_checkpoint", next) != 0)))
        rc = nomem(err);
    json_decref(next);
    json_decref(prev);
    json_decref(shards);
    json_decref(objs);
    return rc;
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *schema, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    (void)schema;
    struct s3src *s = ctx;
    if (spec->mode != FERRY_READ_FULL && spec->mode != FERRY_READ_INCREMENTAL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "s3",
                               "resource %s: the s3 source reads in mode full or incremental, "
                               "not %s",
                               spec->table, ferry_read_mode_name(spec->mode));
    json_t *plan = json_pack("{s:s}", "mode", ferry_read_mode_name(spec->mode));
    int rc = plan == NULL ? nomem(err) : plan_shards(s, spec, route_checkpoint, plan, err);
    char *text = rc == FERRY_OK ? json_dumps(plan, JSON_COMPACT) : NULL;
    if (rc == FERRY_OK && text == NULL) rc = nomem(err);
    json_decref(plan);
    *plan_json = text ? ferry_strdup(text) : NULL;
    free(text);
    if (rc == FERRY_OK && *plan_json == NULL) rc = nomem(err);
    return rc;
}

/* ---- extract ------------------------------------------------------------------------------- */

/* Whether x reads shard sh's object. */
static bool reading_is(const struct reading *x, const json_t *sh)
{
    return x->r != NULL && strcmp(x->o.key, ob_key(sh)) == 0 &&
           strcmp(x->o.etag, ob_etag(sh)) == 0 && x->o.size == ob_size(sh);
}

/* Opens x on shard sh's object (its footer read, or taken from what was fetched ahead). */
static int reading_open(struct s3src *s, struct reading *x, const json_t *sh,
                        struct ferry_error *err)
{
    reading_drop(x);
    char name[1200];
    obj_init(&x->o, s, ob_key(sh), ob_etag(sh), ob_size(sh), name, sizeof name);
    x->o.key = ferry_strdup(ob_key(sh));
    x->o.etag = ferry_strdup(ob_etag(sh));
    int rc = x->o.key && x->o.etag ? FERRY_OK : nomem(err);
    if (rc == FERRY_OK)
        rc = ferry__parquet_reader_open_ranged((uint64_t)x->o.size, obj_read_at, &x->o, name,
                                               &x->r, err);
    if (rc != FERRY_OK) reading_drop(x);
    return rc;
}

/* The selected columns of x's object, in the first object's types. */
static int select_columns(struct s3src *s, struct reading *x, const struct ferry_schema *schema,
                          struct ferry_error *err)
{
    const char **names = ferry_calloc((size_t)schema->n_fields + 1, sizeof *names);
    if (names == NULL) return nomem(err);
    const struct ferry_schema *fs = ferry__parquet_reader_schema(x->r);
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < schema->n_fields; i++) {
        const struct ferry_field *want = &schema->fields[i];
        int k = ferry_schema_find(fs, want->name);
        names[i] = want->name;
        if (k < 0 || fs->fields[k].type != want->type ||
            fs->fields[k].precision != want->precision || fs->fields[k].scale != want->scale)
            rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                                 "s3 source: s3://%s/%s: column \"%s\" is missing or of another "
                                 "type than in the first object",
                                 ferry__s3_client_bucket(s->cli), x->o.key, want->name);
    }
    if (rc == FERRY_OK) rc = ferry__parquet_reader_select(x->r, names, schema->n_fields, err);
    ferry_free(names);
    return rc;
}

/* s->cur set to the reader of shard sh's object: the one open (its footer read once per
 * object and instance, reused by the object's next shards while they come in a row), the
 * next one opened ahead, or a new one; its columns selected. */
static int reader_for(struct s3src *s, const json_t *sh, const struct ferry_schema *schema,
                      struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (reading_is(s->next, sh)) {
        struct reading *t = s->cur;
        s->cur = s->next;
        s->next = t;
        reading_drop(s->next);
    } else if (!reading_is(s->cur, sh)) {
        struct want w = {true, ob_key(sh), ob_etag(sh), ob_size(sh), 0, 0};
        reading_drop(s->next);
        fetch_ahead(s, &w, 1); /* a footer not fetched ahead: through a slot, kept */
        rc = reading_open(s, s->cur, sh, err);
    }
    if (rc == FERRY_OK) rc = select_columns(s, s->cur, schema, err);
    return rc;
}

/* Whether the footer of shard sh's object was fetched (kept, or its slot's fetch done):
 * opening a reader on it waits for nothing. */
static bool footer_ready(struct s3src *s, const json_t *sh)
{
    if (cached_footer(s, ob_key(sh), ob_etag(sh), ob_size(sh)) != NULL) return true;
    struct want w = {true, ob_key(sh), ob_etag(sh), ob_size(sh), 0, 0};
    for (int i = 0; i < SLOTS; i++)
        if (s->slots[i].held && slot_has(&s->slots[i], &w) && atomic_load(&s->slots[i].done))
            return true;
    return false;
}

/* The reading of shard sh's object for spans: the current one, the next one (opened here
 * when its footer is at hand), or NULL. */
static struct reading *reading_ahead(struct s3src *s, const json_t *sh,
                                     const struct ferry_schema *schema)
{
    struct ferry_error e;
    if (reading_is(s->cur, sh)) return s->cur;
    if (reading_is(s->next, sh)) return s->next;
    if (s->next->r != NULL || !footer_ready(s, sh)) return NULL;
    if (reading_open(s, s->next, sh, &e) != FERRY_OK) return NULL;
    if (select_columns(s, s->next, schema, &e) != FERRY_OK) {
        reading_drop(s->next); /* the reader of that shard says what is wrong */
        return NULL;
    }
    return s->next;
}

/* The row groups of a Parquet shard: "groups", else its one "group". */
static size_t n_groups(const json_t *sh)
{
    const json_t *a = json_object_get(sh, "groups");
    return json_is_array(a) ? json_array_size(a) : 1;
}

static int group_at(const json_t *sh, size_t k)
{
    const json_t *a = json_object_get(sh, "groups");
    return (int)json_integer_value(json_is_array(a) ? json_array_get(a, k)
                                                    : json_object_get(sh, "group"));
}

/* What the reads from group k of shard i on want fetched ahead, in order: the shard's
 * groups from k, then the next shards' (unless AHEAD_MISSES of those went unread: another
 * reader took them), into the next object when its footer is at hand, else that footer;
 * up to AHEAD_BYTES (a group above AHEAD_MAX never). */
static void extract_ahead(struct s3src *s, const json_t *shards, size_t i, size_t k,
                          const struct ferry_schema *schema)
{
    struct want w[SLOTS];
    int nw = 0;
    size_t bytes = 0;
    bool full = false;
    for (size_t j = i; j < json_array_size(shards) && nw < SLOTS && !full; j++, k = 0) {
        const json_t *sh = json_array_get(shards, j);
        if (!json_is_integer(json_object_get(sh, "group")) ||
            !json_is_string(json_object_get(sh, "key")) || (j > i && s->misses >= AHEAD_MISSES))
            break;
        struct want x = {true, ob_key(sh), ob_etag(sh), ob_size(sh), 0, 0};
        struct reading *rd = reading_ahead(s, sh, schema);
        if (rd == NULL) {
            w[nw++] = x; /* the next object's footer (its spans are not known yet) */
            break;
        }
        x.is_footer = false;
        for (; k < n_groups(sh) && nw < SLOTS && !full; k++) {
            full = !ferry__parquet_reader_group_span(rd->r, group_at(sh, k), &x.off, &x.n) ||
                   x.n > AHEAD_MAX || (nw > 0 && bytes + x.n > AHEAD_BYTES);
            if (full) break;
            bytes += x.n;
            w[nw++] = x;
        }
    }
    fetch_ahead(s, w, nw);
}

/* The row groups of a Parquet object (shard i of shards) from row `skip` of the shard on
 * (rows count on across its groups); the next ranges fetched ahead meanwhile. */
static int extract_group(struct s3src *s, const struct ferry_resource_spec *spec,
                         const struct ferry_schema *schema, const json_t *shards, size_t i,
                         int64_t skip, struct ferry_row_writer *rw, struct ferry_error *err)
{
    const json_t *sh = json_array_get(shards, i);
    int rc = reader_for(s, sh, schema, err);
    /* a cursor read: only the rows above the saved cursor (the shard's floor) */
    const char *fl = json_string_value(json_object_get(sh, "floor"));
    if (rc == FERRY_OK && fl != NULL && spec->cursor != NULL)
        rc = ferry__parquet_reader_set_floor(s->cur->r, spec->cursor[0], strtoll(fl, NULL, 10),
                                             err);
    int64_t base = 0;
    for (size_t k = 0; rc == FERRY_OK && k < n_groups(sh); k++) {
        int g = group_at(sh, k);
        if (g < 0 || g >= ferry__parquet_reader_num_groups(s->cur->r)) {
            rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                                 "resource %s: shard %zu of the frozen plan names row group %d "
                                 "of s3://%s/%s, which has %d",
                                 spec->table, i, g, ferry__s3_client_bucket(s->cli), s->cur->o.key,
                                 ferry__parquet_reader_num_groups(s->cur->r));
            break;
        }
        int64_t rows = ferry__parquet_reader_group_rows(s->cur->r, g);
        if (skip >= base + rows) { /* delivered before the resume */
            base += rows;
            continue;
        }
        extract_ahead(s, shards, i, k, schema);
        ferry__parquet_reader_set_offset_base(s->cur->r, base);
        rc = ferry__parquet_reader_read_group(s->cur->r, g, skip > base ? skip - base : 0, rw, err);
        base += rows;
    }
    if (s->cur->r != NULL) ferry__parquet_reader_set_offset_base(s->cur->r, 0);
    if (rc != FERRY_OK) reading_drop(s->cur);
    return rc;
}

/* The resume position: rows of the shard (Parquet, across its groups) or decompressed
 * bytes (text) delivered ("n"); 1 when the shard is done. */
static int parse_resume(const struct ferry_position *resume, int64_t *skip)
{
    *skip = resume != NULL && resume->has_n ? resume->n : 0;
    return resume != NULL && resume->done;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    struct s3src *s = ctx;
    json_t *root = ferry_plan_cache_get(&s->plan, plan_json);
    json_t *sh = json_array_get(json_object_get(root, "shards"), (size_t)shard);
    int64_t skip = 0;
    int rc = FERRY_OK;
    if (!json_is_true(json_object_get(sh, "none")) &&
        (!json_is_string(json_object_get(sh, "key")) ||
         !json_is_integer(json_object_get(sh, "size"))))
        rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                             "resource %s: shard %d of the frozen plan is not an s3 plan",
                             spec->table, shard);
    if (rc != FERRY_OK || json_is_true(json_object_get(sh, "none")) ||
        parse_resume(resume, &skip))
        return rc;
    ferry_rw_set_shard(rw, shard);
    if (json_is_integer(json_object_get(sh, "group"))) {
        rc = extract_group(s, spec, schema, json_object_get(root, "shards"), (size_t)shard, skip,
                           rw, err);
    } else {
        struct obj o;
        char name[1200];
        struct ferry__files_input *in = NULL;
        rc = open_text(s, ob_key(sh), ob_etag(sh), ob_size(sh), &o, name, sizeof name, &in, err);
        if (rc == FERRY_OK)
            rc = ferry__text_extract(&s->t, spec, schema, in, name, shard, skip, rw, err);
    }
    return rc;
}

const struct ferry_source_vtable ferry__s3_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "s3",
    .tuning_keys = src_tuning_keys,
    .supports_incremental = true,
    .incremental_without_cursor = true,
    .incremental_cursor_optional = true,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = NULL,
};
