/* connectors/s3/s3_sink.c - the `s3` sink: part objects in an S3-compatible bucket,
 * published by a per-run manifest object at commit.
 *
 * Layout under s3://<bucket>/<prefix>/:
 *     <table>/run=<run>/attempt=<a>/part-<n>.<ext>   data, one object per resource per part
 *     _runs/run=<run>/_manifest.json                 every object of the run: rows, bytes, CRC32-C
 * Objects are uploaded while the run goes (a single PUT for a part that stays under
 * `multipart_chunk`, else a multipart upload of chunks >= 5 MiB); the manifest is PUT last by
 * commit() and is the only thing that makes a run's objects part of the data set. abort()
 * deletes the objects this session uploaded and aborts its unfinished multipart uploads; a
 * crash leaves objects no manifest lists, which begin() of the next attempt of the run deletes
 * (and aborts the run's unfinished multipart uploads where the store can list them).
 * Durability at_commit; encoded integrity: CRC32-C of the exact bytes of each apply(), and
 * `x-amz-checksum-crc32c` on every PUT and part so the store verifies what it keeps.
 *
 * write: replace (as the files sink): `<prefix>/_manifest.json` lists every object of the data
 * set; a replace commit PUTs it (the switch, atomic for readers) after every object of the run
 * is complete, then the run manifest, then deletes the replaced tables' objects it does not
 * list and the run manifests that list no live object.
 *
 * Owns the S3 client (s3_client.c: requests, signing, credentials), the part buffers and the
 * format writer states. Calls s3_client.c, the format writers (connectors/formats.h), crc32c,
 * digest, jansson. Registered in connectors/registry.c; driven by the runner on one thread. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "connectors/formats.h"
#include "objstore/s3_client.h"
#include "objstore/sigv4.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"
#include "ferry/failpoint.h"

#define MIB (INT64_C(1) << 20)

static const char *const sink_tuning_keys[] = {"part_rows", "part_bytes", "multipart_chunk",
                                               "max_attempts", NULL};
static const char *const newline_words[] = {"crlf", "lf", NULL};

struct object {
    char *key; /* full object key */
    char *table;
    char *upload_id; /* multipart upload in progress, else NULL */
    bool uploaded;   /* the object exists in the bucket */
    int64_t rows, bytes;
    uint32_t crc;
};

struct target {
    bool used;
    char *table;
    struct ferry_schema *schema;
    void *fw;                 /* format writer state of the open part, or NULL */
    int obj;                  /* index in sink.objs of the open part, or -1 */
    struct ferry_buf pending; /* bytes not uploaded yet */
    uint32_t pending_crc;
    int part_no;               /* multipart: parts uploaded so far */
    struct ferry_buf complete; /* multipart: <Part> elements for CompleteMultipartUpload */
    uint32_t apply_crc;
    int64_t apply_bytes;
    struct sink *s;
};

struct sink {
    char *bucket, *prefix;
    struct ferry__s3_client *cli;
    const struct ferry__files_format *fmt;
    struct ferry__files_format_opts opts;
    char *null_marker;
    int64_t part_rows, part_bytes, chunk;
    struct target *t;
    int n_t;
    struct object *objs;
    int n_objs;
    json_t *earlier; /* objects of earlier commits of this run, or NULL */
    json_t *dataset; /* objects of the data set manifest <prefix>/_manifest.json, or NULL */
    bool replace;    /* write: replace (every target: the pipeline has one write mode) */
    bool published;  /* the data set manifest lists this session's objects: keep them */
    char *pipeline, *version;
    int64_t run_id;
    int attempt;
    int next_n;
    bool session;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 sink: out of memory");
}

/* ---- HTTP ------------------------------------------------------------------------------ */

/* ---- open / close ------------------------------------------------------------------------ */

static void object_free(struct object *o)
{
    ferry_free(o->key);
    ferry_free(o->table);
    ferry_free(o->upload_id);
}

static void target_reset(struct sink *s, struct target *t)
{
    if (s->fmt && t->fw) s->fmt->free(t->fw);
    t->fw = NULL;
    t->obj = -1;
    t->part_no = 0;
    t->pending_crc = 0;
    ferry_buf_reset(&t->pending);
    ferry_buf_reset(&t->complete);
}

static int abort_upload(struct sink *s, const char *key, const char *upload_id,
                        struct ferry_error *err)
{
    return ferry__s3_multipart_abort(s->cli, key, upload_id, err);
}

static int delete_object(struct sink *s, const char *key, struct ferry_error *err)
{
    return ferry__s3_delete(s->cli, key, err);
}

/* Ends the session's writers; with `unpublish` deletes what this session uploaded and aborts
 * its multipart uploads (best effort: a failure is logged, the next attempt's begin() sweeps). */
static void discard(struct sink *s, bool unpublish)
{
    for (int i = 0; i < s->n_t; i++)
        target_reset(s, &s->t[i]);
    for (int i = 0; i < s->n_objs; i++) {
        struct object *o = &s->objs[i];
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        int rc = FERRY_OK;
        if (unpublish && o->upload_id) rc = abort_upload(s, o->key, o->upload_id, &e);
        if (unpublish && !s->published && o->uploaded && rc == FERRY_OK)
            rc = delete_object(s, o->key, &e);
        if (rc != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "s3 sink: abort left s3://%s/%s behind: %s", s->bucket,
                      o->key, e.message);
        object_free(o);
    }
    ferry_free(s->objs);
    s->objs = NULL;
    s->n_objs = 0;
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    if (s->cli) discard(s, s->session);
    for (int i = 0; i < s->n_t; i++) {
        ferry_free(s->t[i].table);
        ferry_schema_unref(s->t[i].schema);
        ferry_buf_release(&s->t[i].pending);
        ferry_buf_release(&s->t[i].complete);
    }
    ferry_free(s->t);
    if (s->fmt && s->fmt->conf_free) s->fmt->conf_free(s->opts.conf);
    ferry__s3_client_close(s->cli);
    json_decref(s->earlier);
    json_decref(s->dataset);
    ferry_free(s->bucket);
    ferry_free(s->prefix);
    ferry_free(s->null_marker);
    ferry_free(s->pipeline);
    ferry_free(s->version);
    ferry_free(s);
}

static int one_char(struct ferry_cfg *cfg, const char *key, char *out, struct ferry_error *err)
{
    const char *v = NULL;
    int rc = ferry_cfg_str(cfg, key, false, &v, err);
    if (rc != FERRY_OK || v == NULL) return rc;
    if (strcmp(v, "\\t") == 0) v = "\t";
    if (strlen(v) != 1 || v[0] == '"' || v[0] == '\n' || v[0] == '\r')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, key),
                               "must be one character other than a quote or a line break");
    *out = v[0];
    return FERRY_OK;
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *bucket = NULL, *prefix = "";
    const char *format = "csv", *null_marker = "";
    bool header = true;
    int newline = 0;
    int64_t part_rows = 0, part_bytes = 128 * MIB, chunk = 8 * MIB;
    char delim = ',';
    int rc = ferry_cfg_str(cfg, "bucket", true, &bucket, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "prefix", false, &prefix, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "format", false, &format, err);
    if (rc == FERRY_OK) rc = one_char(cfg, "delimiter", &delim, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "null", false, &null_marker, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "header", false, &header, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "newline", false, newline_words, &newline, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "part_rows", false, 0, INT64_MAX, &part_rows, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "part_bytes", false, &part_bytes, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "multipart_chunk", false, &chunk, err);
    if (rc != FERRY_OK) return rc;
    /* S3 wants parts of 5 MiB at least; a chunk is held in memory, hence the upper bound. */
    if (chunk < 5 * MIB || chunk > 1024 * MIB)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "multipart_chunk"),
                               "must be between 5MiB (S3's smallest part) and 1GiB");
    if (strstr(prefix, "//") || prefix[0] == '/')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "prefix"),
                               "must not start with '/' or hold '//'");
    const struct ferry__files_format *fmt = ferry__files_format_find(format);
    if (fmt == NULL) {
        struct ferry_buf names;
        ferry_buf_init(&names, 0);
        for (const char *const *n = ferry__files_format_names(); *n; n++)
            ferry_buf_printf(&names, "%s%s", names.len ? ", " : "", *n);
        rc = ferry_cfg_error(err, ferry_cfg_get(cfg, "format"),
                             "unknown format \"%s\" (the s3 sink writes %s)", format,
                             names.data ? names.data : "");
        ferry_buf_release(&names);
        return rc;
    }
    if (strchr(null_marker, delim) || strpbrk(null_marker, "\"\r\n"))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "null"),
                               "must not hold the delimiter, a quote or a line break");
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    rc = ferry__s3_client_open(cfg, bucket, ferry_cfg_get(cfg, "bucket"), "s3 sink", &s->cli, err);
    if (rc != FERRY_OK) {
        sink_close(s);
        return rc;
    }
    s->bucket = ferry_strdup(bucket);
    s->prefix = ferry_strdup(prefix);
    s->null_marker = ferry_strdup(null_marker);
    if (!s->bucket || !s->prefix || !s->null_marker) {
        sink_close(s);
        return nomem(err);
    }
    size_t pl = strlen(s->prefix);
    while (pl > 0 && s->prefix[pl - 1] == '/')
        s->prefix[--pl] = '\0';
    s->fmt = fmt;
    s->opts.delimiter = delim;
    s->opts.null_marker = s->null_marker;
    s->opts.header = header;
    s->opts.crlf = newline == 0;
    s->part_rows = part_rows;
    s->part_bytes = part_bytes > 0 ? part_bytes : INT64_MAX;
    s->chunk = chunk;
    if (fmt->configure != NULL) {
        rc = fmt->configure(cfg, &s->opts.conf, err);
        if (rc != FERRY_OK) {
            sink_close(s);
            return rc;
        }
    }
    *ctx = s;
    return FERRY_OK;
}

static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    (void)ctx;
    (void)mode;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE);
    caps->durability = FERRY_DURABLE_AT_COMMIT;
    caps->encoded_integrity = true;
    caps->transactional_checkpoint = false;
    /* replace: the data set manifest (one PUT, atomic for readers) switches to the new
     * objects after every one of them is stored; the old ones are deleted after that. */
    caps->atomic_replace = true;
    caps->replace_commits_once = true; /* a pause must not publish half a table */
    caps->deletes = false;
}

/* ---- prepare / begin ---------------------------------------------------------------------- */

/* "<prefix>/" or "" */
static const char *pfx_sep(const struct sink *s)
{
    return s->prefix[0] ? "/" : "";
}

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    const char *table = target->table;
    if (table == NULL || table[0] == '\0' || table[0] == '.' || strchr(table, '/') ||
        strcmp(table, "_runs") == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "s3",
                               "s3 sink: \"%s\" cannot name a folder under s3://%s/%s (no '/', "
                               "no leading '.', not _runs); set the resource's target",
                               table ? table : "", s->bucket, s->prefix);
    if (target->mode != FERRY_WRITE_APPEND && target->mode != FERRY_WRITE_REPLACE)
        return ferry_error_set(err, FERRY_EPOLICY, "s3",
                               "s3 sink: table %s: write: %s is not supported (append or "
                               "replace)",
                               table, ferry_write_mode_name(target->mode));
    s->replace = target->mode == FERRY_WRITE_REPLACE;
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return nomem(err);
        for (int i = s->n_t; i <= target->index; i++) {
            memset(&nt[i], 0, sizeof nt[i]);
            nt[i].obj = -1;
            ferry_buf_init(&nt[i].pending, 0);
            ferry_buf_init(&nt[i].complete, 0);
        }
        s->t = nt;
        s->n_t = target->index + 1;
    }
    struct target *t = &s->t[target->index];
    if (t->used) return FERRY_OK;
    t->table = ferry_strdup(table);
    if (t->table == NULL) return nomem(err);
    t->schema = ferry_schema_ref(target->schema);
    t->used = true;
    return FERRY_OK;
}

static char *manifest_key(const struct sink *s)
{
    return ferry_asprintf("%s%s_runs/run=%" PRId64 "/_manifest.json", s->prefix, pfx_sep(s),
                          s->run_id);
}

static char *dataset_key(const struct sink *s)
{
    return ferry_asprintf("%s%s_manifest.json", s->prefix, pfx_sep(s));
}

/* The "objects" of the manifest at `key` (owned), or NULL when it does not exist. */
static int get_manifest(struct sink *s, char *key, json_t **out, struct ferry_error *err)
{
    *out = NULL;
    if (key == NULL) return nomem(err);
    struct ferry_buf resp;
    ferry_buf_init(&resp, 64 * MIB);
    struct ferry__s3_req q = {.method = "GET", .key = key, .query = ""};
    int rc = ferry__s3_call(s->cli, &q, true, &resp, err);
    if (rc == FERRY_ENOTFOUND) {
        rc = FERRY_OK;
    } else if (rc == FERRY_OK) {
        json_error_t je;
        json_t *root = json_loadb(resp.data ? resp.data : "", resp.len, 0, &je);
        json_t *objs = json_object_get(root, "objects");
        if (!json_is_array(objs))
            rc = ferry_error_set(err, FERRY_ESINK, "s3",
                                 "s3 sink: s3://%s/%s: not a manifest (%s, line %d)", s->bucket,
                                 key, je.text, je.line);
        else
            *out = json_incref(objs);
        json_decref(root);
    }
    ferry_buf_release(&resp);
    ferry_free(key);
    return rc;
}

/* Objects of earlier commits of this run, from its manifest (a paused run commits more
 * than once), and the data set manifest, if any. */
static int load_earlier(struct sink *s, struct ferry_error *err)
{
    json_decref(s->earlier);
    json_decref(s->dataset);
    s->earlier = s->dataset = NULL;
    int rc = get_manifest(s, manifest_key(s), &s->earlier, err);
    if (rc == FERRY_OK) rc = get_manifest(s, dataset_key(s), &s->dataset, err);
    return rc;
}

static bool in_objects(const json_t *objs, const char *key)
{
    size_t i;
    json_t *f;
    json_array_foreach(objs, i, f)
    {
        const char *p = json_string_value(json_object_get(f, "key"));
        if (p && key && strcmp(p, key) == 0) return true;
    }
    return false;
}

/* Listed by this run's manifest or by the data set manifest: published, never swept. */
static bool listed(const struct sink *s, const char *key)
{
    return in_objects(s->earlier, key) || in_objects(s->dataset, key);
}

/* Every key under `prefix` (ListObjectsV2, all pages) appended to `out` as strings. */
static int list_keys(struct sink *s, const char *prefix, json_t *out, struct ferry_error *err)
{
    return ferry__s3_list(s->cli, prefix, out, err);
}

/* Keys of the run manifests under <prefix>/_runs/ other than this run's. */
static int other_run_manifests(struct sink *s, json_t *out, struct ferry_error *err)
{
    char *runs = ferry_asprintf("%s%s_runs/", s->prefix, pfx_sep(s));
    char *self = manifest_key(s);
    json_t *keys = json_array();
    int rc = runs && self && keys ? list_keys(s, runs, keys, err) : nomem(err);
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        const char *key = json_string_value(k);
        size_t n = strlen(key);
        if (n >= 15 && strcmp(key + n - 15, "/_manifest.json") == 0 && strcmp(key, self) != 0)
            json_array_append(out, k);
    }
    json_decref(keys);
    ferry_free(runs);
    ferry_free(self);
    return rc;
}

static int sweep_key(const char *key, void *arg, struct ferry_error *err)
{
    struct sink *s = arg;
    if (listed(s, key)) return FERRY_OK;
    int rc = delete_object(s, key, err);
    if (rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, "s3 sink: removed s3://%s/%s, which no manifest lists", s->bucket,
                  key);
    return rc;
}

/* Leftovers of earlier attempts of this run under <prefix>/<table>/run=<run>/: objects no
 * manifest lists, and unfinished multipart uploads. */
static int sweep(struct sink *s, const struct target *t, struct ferry_error *err)
{
    char *dir =
        ferry_asprintf("%s%s%s/run=%" PRId64 "/", s->prefix, pfx_sep(s), t->table, s->run_id);
    struct ferry_buf qs, resp, key, tok, upl;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 64 * MIB);
    ferry_buf_init(&key, 0);
    ferry_buf_init(&tok, 0);
    ferry_buf_init(&upl, 0);
    int rc = dir ? ferry__s3_list_each(s->cli, dir, sweep_key, s, err) : nomem(err);
    /* Unfinished multipart uploads: not every S3-compatible store lists them. */
    if (rc == FERRY_OK) {
        ferry_buf_reset(&qs);
        if (ferry_buf_printf(&qs, "prefix=") != FERRY_OK ||
            ferry__s3_uri_encode(&qs, dir, false) != FERRY_OK ||
            ferry_buf_printf(&qs, "&uploads=") != FERRY_OK) {
            rc = nomem(err);
        } else {
            struct ferry__s3_req q = {.method = "GET", .key = NULL, .query = qs.data};
            struct ferry_error e;
            memset(&e, 0, sizeof e);
            if (ferry__s3_call(s->cli, &q, true, &resp, &e) != FERRY_OK) {
                ferry_log(FERRY_LOG_INFO,
                          "s3 sink: cannot list multipart uploads under s3://%s/%s "
                          "(%s); a lifecycle rule should expire them",
                          s->bucket, dir, e.message);
            } else {
                const char *from = NULL;
                while (rc == FERRY_OK && ferry__s3_xml_next(resp.data, "Upload", &from, &upl)) {
                    const char *f2 = NULL;
                    if (!ferry__s3_xml_next(upl.data, "Key", &f2, &key)) continue;
                    f2 = NULL;
                    if (!ferry__s3_xml_next(upl.data, "UploadId", &f2, &tok)) continue;
                    rc = abort_upload(s, key.data, tok.data, err);
                }
            }
        }
    }
    ferry_free(dir);
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    ferry_buf_release(&key);
    ferry_buf_release(&tok);
    ferry_buf_release(&upl);
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    discard(s, s->session);
    ferry_free(s->pipeline);
    ferry_free(s->version);
    s->pipeline = ferry_strdup(run->pipeline ? run->pipeline : "");
    s->version = ferry_strdup(run->version ? run->version : "");
    if (s->pipeline == NULL || s->version == NULL) return nomem(err);
    s->run_id = run->run_id;
    s->attempt = run->attempt;
    s->published = false;
    int rc = load_earlier(s, err);
    /* Part numbers never repeat within a run attempt, even across its commits. */
    s->next_n = (int)json_array_size(s->earlier);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used) rc = sweep(s, &s->t[i], err);
    if (rc != FERRY_OK) return rc;
    s->session = true;
    return FERRY_OK;
}

/* ---- upload ------------------------------------------------------------------------------ */

/* Uploads t->pending as the next part of the open multipart upload. */
static int upload_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct object *o = &s->objs[t->obj];
    int rc = o->upload_id ? FERRY_OK : ferry__s3_multipart_create(s->cli, o->key, &o->upload_id, err);
    if (rc != FERRY_OK) return rc;
    int n = t->part_no + 1;
    enum ferry_fp_action fp = FERRY_FAILPOINT("s3_upload_part");
    if (fp != FERRY_FP_NONE)
        rc = ferry_error_set(err, FERRY_EFAILPOINT, "s3", "s3 sink: failpoint s3_upload_part");
    else
        rc = ferry__s3_multipart_part(s->cli, o->key, o->upload_id, n, t->pending.data,
                                      t->pending.len, &t->complete, err);
    if (rc == FERRY_OK) {
        t->part_no = n;
        ferry_buf_reset(&t->pending);
    }
    return rc;
}

static int complete_multipart(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct object *o = &s->objs[t->obj];
    int rc = ferry__s3_multipart_complete(s->cli, o->key, o->upload_id, &t->complete, err);
    if (rc == FERRY_OK) {
        ferry_free(o->upload_id);
        o->upload_id = NULL;
        o->uploaded = true;
    }
    return rc;
}

/* Every byte of a part passes here: the CRCs cover exactly what the writer produced. */
static int out_write(void *ctx, const void *p, size_t n, struct ferry_error *err)
{
    struct target *t = ctx;
    struct sink *s = t->s;
    struct object *o = &s->objs[t->obj];
    if (ferry_buf_append(&t->pending, p, n) != FERRY_OK) return nomem(err);
    o->crc = ferry_crc32c_update(o->crc, p, n);
    o->bytes += (int64_t)n;
    t->apply_crc = ferry_crc32c_update(t->apply_crc, p, n);
    t->apply_bytes += (int64_t)n;
    if ((int64_t)t->pending.len >= s->chunk) return upload_part(s, t, err);
    return FERRY_OK;
}

static int open_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct object *no = ferry_realloc(s->objs, sizeof *no * (size_t)(s->n_objs + 1));
    if (no == NULL) return nomem(err);
    s->objs = no;
    struct object *o = &s->objs[s->n_objs];
    memset(o, 0, sizeof *o);
    o->key = ferry_asprintf("%s%s%s/run=%" PRId64 "/attempt=%d/part-%d.%s", s->prefix, pfx_sep(s),
                            t->table, s->run_id, s->attempt, s->next_n, s->fmt->ext);
    o->table = ferry_strdup(t->table);
    s->n_objs++;
    if (o->key == NULL || o->table == NULL) return nomem(err);
    s->next_n++;
    t->obj = s->n_objs - 1;
    t->part_no = 0;
    ferry_buf_reset(&t->pending);
    ferry_buf_reset(&t->complete);
    t->s = s;
    struct ferry__files_out out = {out_write, t};
    int rc = s->fmt->open_part(&s->opts, t->schema, out, &t->fw, err);
    if (rc != FERRY_OK) ferry_error_prefix(err, "s3://%s/%s", s->bucket, o->key);
    return rc;
}

/* Ends the open part of t: footer, then the single PUT or the last part and completion. */
static int close_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    if (t->obj < 0) return FERRY_OK;
    struct object *o = &s->objs[t->obj];
    int64_t bytes = 0;
    int rc = s->fmt->finish_part(t->fw, &bytes, err);
    s->fmt->free(t->fw);
    t->fw = NULL;
    if (rc == FERRY_OK && bytes != o->bytes)
        rc = ferry_error_set(err, FERRY_ESINK, "s3",
                             "s3 sink: s3://%s/%s: the %s writer reports %" PRId64
                             " bytes, %" PRId64 " were produced",
                             s->bucket, o->key, s->fmt->name, bytes, o->bytes);
    if (rc == FERRY_OK && o->upload_id == NULL && t->part_no == 0) {
        struct ferry_buf resp;
        ferry_buf_init(&resp, 0);
        struct ferry__s3_req q = {.method = "PUT",
                        .key = o->key,
                        .query = "",
                        .body = t->pending.data,
                        .len = t->pending.len,
                        .checksum = true};
        rc = ferry__s3_call(s->cli, &q, false, &resp, err);
        ferry_buf_release(&resp);
        if (rc == FERRY_OK) o->uploaded = true;
    } else if (rc == FERRY_OK) {
        if (t->pending.len > 0) rc = upload_part(s, t, err);
        if (rc == FERRY_OK) rc = complete_multipart(s, t, err);
    }
    t->obj = -1;
    ferry_buf_reset(&t->pending);
    ferry_buf_reset(&t->complete);
    t->part_no = 0;
    return rc;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "s3",
                               "s3 sink: apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    if (!ferry_receipt_start(receipt, b)) return FERRY_OK; /* the pipeline reports divergence */
    if (b->length == 0) return FERRY_OK;
    int rc = FERRY_OK;
    if (t->obj < 0) rc = open_part(s, t, err);
    if (rc != FERRY_OK) return rc;
    struct object *o = &s->objs[t->obj];
    t->apply_crc = 0;
    t->apply_bytes = 0;
    rc = s->fmt->write_batch(t->fw, b, err);
    o = &s->objs[t->obj];
    if (rc != FERRY_OK) return ferry_error_prefix(err, "s3://%s/%s", s->bucket, o->key);
    o->rows += b->length;
    receipt->rows = b->length;
    receipt->bytes = t->apply_bytes;
    receipt->encoded_crc = t->apply_crc;
    snprintf(receipt->uri, sizeof receipt->uri, "s3://%s/%s", s->bucket, o->key);
    if ((s->part_rows > 0 && o->rows >= s->part_rows) || o->bytes >= s->part_bytes)
        rc = close_part(s, t, err);
    return rc;
}

/* ---- commit / abort ------------------------------------------------------------------------ */

static void manifest_item(const void *ctx, int i, struct ferry__manifest_item *out)
{
    const struct object *o = &((const struct sink *)ctx)->objs[i];
    *out = (struct ferry__manifest_item){o->table, o->key, o->rows, o->bytes, o->crc};
}

static struct ferry__manifest_head manifest_head(const struct sink *s)
{
    return (struct ferry__manifest_head){.pipeline = s->pipeline,
                                         .version = s->version,
                                         .extra_key = "bucket",
                                         .extra_value = s->bucket,
                                         .run_id = s->run_id,
                                         .attempt = s->attempt,
                                         .format = s->fmt->name,
                                         .list_key = "objects",
                                         .name_key = "key"};
}

static int put_json(struct sink *s, const char *key, const struct ferry_buf *b,
                    struct ferry_error *err)
{
    struct ferry_buf resp;
    ferry_buf_init(&resp, 0);
    struct ferry__s3_req q = {.method = "PUT",
                    .key = key,
                    .query = "",
                    .body = b->data,
                    .len = b->len,
                    .checksum = true,
                    .content_type = "application/json"};
    int rc = ferry__s3_call(s->cli, &q, false, &resp, err);
    ferry_buf_release(&resp);
    return rc;
}

/* The run's own manifest: every object of the run (replace: of this attempt only). */
static int put_manifest(struct sink *s, struct ferry_error *err)
{
    char *key = manifest_key(s);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (key == NULL) return nomem(err);
    struct ferry__manifest_head h = manifest_head(s);
    int brc = ferry__manifest_text(&b, &h, s->replace ? NULL : s->earlier, s->n_objs,
                                   manifest_item, s);
    int rc = brc == FERRY_OK ? put_json(s, key, &b, err) : nomem(err);
    ferry_buf_release(&b);
    ferry_free(key);
    return rc;
}

static bool replaced_table(const struct sink *s, const char *table)
{
    for (int i = 0; i < s->n_t; i++)
        if (s->t[i].used && table && strcmp(s->t[i].table, table) == 0) return true;
    return false;
}

/* The data set manifest <prefix>/_manifest.json: every object of every table (replace:
 * this run's objects replace those of its tables, the other tables' are kept; append, once
 * a replace made one: the run's objects are added). Before the first one the data set is
 * the union of the run manifests. *out: its "objects". */
static int put_dataset(struct sink *s, json_t **out, struct ferry_error *err)
{
    *out = NULL;
    json_t *kept = json_array(), *old = NULL, *from = s->dataset;
    int rc = kept ? FERRY_OK : nomem(err);
    if (rc == FERRY_OK && from == NULL && s->replace) {
        json_t *keys = json_array();
        old = json_array();
        rc = keys && old ? other_run_manifests(s, keys, err) : nomem(err);
        size_t i;
        json_t *k;
        json_array_foreach(keys, i, k)
        {
            json_t *objs = NULL;
            if (rc == FERRY_OK) rc = get_manifest(s, ferry_strdup(json_string_value(k)), &objs, err);
            if (objs) json_array_extend(old, objs);
            json_decref(objs);
        }
        json_decref(keys);
        from = old;
    }
    size_t i;
    json_t *f;
    json_array_foreach(from, i, f)
    {
        const char *key = json_string_value(json_object_get(f, "key"));
        bool drop = s->replace ? replaced_table(s, json_string_value(json_object_get(f, "table")))
                               : in_objects(s->earlier, key);
        if (!drop) json_array_append(kept, f);
    }
    json_decref(old);
    if (!s->replace && s->earlier) json_array_extend(kept, s->earlier);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    struct ferry__manifest_head h = manifest_head(s);
    char *key = dataset_key(s);
    if (rc == FERRY_OK && (key == NULL || ferry__manifest_text(&b, &h, kept, s->n_objs,
                                                               manifest_item, s) != FERRY_OK))
        rc = nomem(err);
    json_decref(kept);
    if (rc == FERRY_OK) rc = put_json(s, key, &b, err);
    if (rc == FERRY_OK) {
        json_t *root = json_loadb(b.data, b.len, 0, NULL);
        *out = json_incref(json_object_get(root, "objects"));
        json_decref(root);
    }
    ferry_buf_release(&b);
    ferry_free(key);
    return rc;
}

/* After a replace switched the data set: deletes the objects of the replaced tables that it
 * does not list, and the run manifests none of whose objects it lists. Failures are logged:
 * the data set is already complete; the next replace deletes what is left. */
static void remove_replaced(struct sink *s, const json_t *now)
{
    json_t *keys = json_array();
    struct ferry_error e;
    memset(&e, 0, sizeof e);
    for (int i = 0; i < s->n_t && keys; i++) {
        if (!s->t[i].used) continue;
        char *dir = ferry_asprintf("%s%s%s/", s->prefix, pfx_sep(s), s->t[i].table);
        if (dir && list_keys(s, dir, keys, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "s3 sink: cannot list s3://%s/%s: %s", s->bucket, dir,
                      e.message);
        ferry_free(dir);
    }
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        const char *key = json_string_value(k);
        if (!in_objects(now, key) && delete_object(s, key, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "s3 sink: cannot delete replaced s3://%s/%s: %s",
                      s->bucket, key, e.message);
    }
    json_array_clear(keys);
    if (keys && other_run_manifests(s, keys, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "s3 sink: cannot list the run manifests: %s", e.message);
    json_array_foreach(keys, i, k)
    {
        json_t *objs = NULL;
        if (get_manifest(s, ferry_strdup(json_string_value(k)), &objs, &e) != FERRY_OK) continue;
        bool live = false;
        size_t j;
        json_t *o;
        json_array_foreach(objs, j, o)
            live = live || in_objects(now, json_string_value(json_object_get(o, "key")));
        json_decref(objs);
        if (!live && delete_object(s, json_string_value(k), &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "s3 sink: cannot delete s3://%s/%s: %s", s->bucket,
                      json_string_value(k), e.message);
    }
    json_decref(keys);
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session)
        return ferry_error_set(err, FERRY_EINVAL, "s3",
                               "s3 sink: s3://%s: commit without a session", s->bucket);
    int rc = FERRY_OK;
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        rc = close_part(s, &s->t[i], err);
    if (rc == FERRY_OK) rc = ferry_failpoint_check("s3_before_manifest", err);
    json_t *now = NULL;
    if (rc == FERRY_OK && (s->replace || s->dataset != NULL)) {
        /* The switch: one PUT of the data set manifest publishes the new complete set; from
         * then on the objects stay whatever happens. The run manifest only records the run. */
        rc = put_dataset(s, &now, err);
        if (rc == FERRY_OK) {
            s->published = true;
            rc = ferry_failpoint_check("s3_after_switch", err);
        }
        if (rc == FERRY_OK) rc = put_manifest(s, err);
        if (rc == FERRY_OK && s->replace) remove_replaced(s, now);
    } else if (rc == FERRY_OK) {
        rc = put_manifest(s, err);
    }
    json_decref(now);
    if (rc != FERRY_OK) return rc; /* abort() deletes what this session uploaded */
    discard(s, false);
    s->session = false;
    return FERRY_OK;
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    discard(s, s->session);
    s->session = false;
}

const struct ferry_sink_vtable ferry__s3_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "s3",
    .tuning_keys = sink_tuning_keys,
    .open = sink_open,
    .capabilities = sink_capabilities,
    .prepare = sink_prepare,
    .begin = sink_begin,
    .apply = sink_apply,
    .commit = sink_commit,
    .abort = sink_abort,
    .close = sink_close,
};
