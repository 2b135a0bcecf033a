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
 * format writer states. Calls s3_client.c, the format writers (formats/formats.h),
 * formats/lake.c (what it shares with the files sink: format options, session state,
 * manifest lists, the publish order), crc32c, digest, jansson. Registered in
 * connectors/registry.c; driven by the runner on one thread. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "formats/formats.h"
#include "formats/lake.h"
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
    struct ferry__lake lk; /* format, run, manifests (formats/lake.h) */
    int64_t chunk;
    struct target *t;
    int n_t;
    struct object *objs;
    int n_objs;
    int next_n;
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
    if (s->lk.fmt && t->fw) s->lk.fmt->free(t->fw);
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
        if (unpublish && !s->lk.published && o->uploaded && rc == FERRY_OK)
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
    if (s->cli) discard(s, s->lk.session);
    for (int i = 0; i < s->n_t; i++) {
        ferry_free(s->t[i].table);
        ferry_schema_unref(s->t[i].schema);
        ferry_buf_release(&s->t[i].pending);
        ferry_buf_release(&s->t[i].complete);
    }
    ferry_free(s->t);
    ferry__lake_release(&s->lk);
    ferry__s3_client_close(s->cli);
    ferry_free(s->bucket);
    ferry_free(s->prefix);
    ferry_free(s);
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *bucket = NULL, *prefix = "";
    int64_t chunk = 8 * MIB;
    int rc = ferry_cfg_str(cfg, "bucket", true, &bucket, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "prefix", false, &prefix, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "multipart_chunk", false, &chunk, err);
    if (rc != FERRY_OK) return rc;
    /* S3 wants parts of 5 MiB at least; a chunk is held in memory, hence the upper bound. */
    if (chunk < 5 * MIB || chunk > 1024 * MIB)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "multipart_chunk"),
                               "must be between 5MiB (S3's smallest part) and 1GiB");
    if (strstr(prefix, "//") || prefix[0] == '/')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "prefix"),
                               "must not start with '/' or hold '//'");
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    rc = ferry__lake_open(&s->lk, cfg, "s3 sink", "s3", "objects", "key", err);
    if (rc == FERRY_OK)
        rc = ferry__s3_client_open(cfg, bucket, ferry_cfg_get(cfg, "bucket"), "s3 sink", &s->cli,
                                   err);
    if (rc == FERRY_OK) {
        s->bucket = ferry_strdup(bucket);
        s->prefix = ferry_strdup(prefix);
        if (!s->bucket || !s->prefix) rc = nomem(err);
    }
    if (rc != FERRY_OK) {
        sink_close(s);
        return rc;
    }
    size_t pl = strlen(s->prefix);
    while (pl > 0 && s->prefix[pl - 1] == '/')
        s->prefix[--pl] = '\0';
    s->chunk = chunk;
    *ctx = s;
    return FERRY_OK;
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
    char where[512];
    snprintf(where, sizeof where, "s3://%s/%s", s->bucket, s->prefix);
    int rc = ferry__lake_check_target(&s->lk, target, table, where, err);
    if (rc != FERRY_OK) return rc;
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
                          s->lk.run_id);
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
    int rc = get_manifest(s, manifest_key(s), &s->lk.earlier, err);
    if (rc == FERRY_OK) rc = get_manifest(s, dataset_key(s), &s->lk.dataset, err);
    return rc;
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
    if (ferry__lake_listed(&s->lk, key)) return FERRY_OK;
    int rc = delete_object(s, key, err);
    if (rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, "s3 sink: removed s3://%s/%s, which no manifest lists", s->bucket,
                  key);
    return rc;
}

static int sweep_upload(const char *key, const char *upload_id, int64_t initiated_ms, void *arg,
                        struct ferry_error *err)
{
    (void)initiated_ms; /* the run prefix is this run's alone: every upload there is ours */
    return abort_upload(arg, key, upload_id, err);
}

/* Leftovers of earlier attempts of this run under <prefix>/<table>/run=<run>/: objects no
 * manifest lists, and unfinished multipart uploads. */
static int sweep(struct sink *s, const struct target *t, struct ferry_error *err)
{
    char *dir =
        ferry_asprintf("%s%s%s/run=%" PRId64 "/", s->prefix, pfx_sep(s), t->table, s->lk.run_id);
    int rc = dir ? ferry__s3_list_each(s->cli, dir, sweep_key, s, err) : nomem(err);
    /* Unfinished multipart uploads: not every S3-compatible store lists them. */
    if (rc == FERRY_OK) {
        rc = ferry__s3_list_uploads_each(s->cli, dir, sweep_upload, s, err);
        if (rc == FERRY_EUNSUPPORTED) {
            ferry_log(FERRY_LOG_INFO,
                      "s3 sink: cannot list multipart uploads under s3://%s/%s "
                      "(%s); a lifecycle rule should expire them",
                      s->bucket, dir, err ? err->message : "");
            ferry_error_clear(err);
            rc = FERRY_OK;
        }
    }
    ferry_free(dir);
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    discard(s, s->lk.session);
    int rc = ferry__lake_begin(&s->lk, run, err);
    if (rc == FERRY_OK) rc = load_earlier(s, err);
    /* Part numbers never repeat within a run attempt, even across its commits. */
    s->next_n = (int)json_array_size(s->lk.earlier);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used) rc = sweep(s, &s->t[i], err);
    if (rc != FERRY_OK) return rc;
    s->lk.session = true;
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
                            t->table, s->lk.run_id, s->lk.attempt, s->next_n, s->lk.fmt->ext);
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
    int rc = s->lk.fmt->open_part(&s->lk.opts, t->schema, out, &t->fw, err);
    if (rc != FERRY_OK) ferry_error_prefix(err, "s3://%s/%s", s->bucket, o->key);
    return rc;
}

/* Ends the open part of t: footer, then the single PUT or the last part and completion. */
static int close_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    if (t->obj < 0) return FERRY_OK;
    struct object *o = &s->objs[t->obj];
    int64_t bytes = 0;
    int rc = s->lk.fmt->finish_part(t->fw, &bytes, err);
    s->lk.fmt->free(t->fw);
    t->fw = NULL;
    if (rc == FERRY_OK && bytes != o->bytes)
        rc = ferry_error_set(err, FERRY_ESINK, "s3",
                             "s3 sink: s3://%s/%s: the %s writer reports %" PRId64
                             " bytes, %" PRId64 " were produced",
                             s->bucket, o->key, s->lk.fmt->name, bytes, o->bytes);
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

/* The lake's capabilities; encoded integrity only for formats that encode each batch on
 * its own (formats.h, per_batch_bytes). */
static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    struct sink *s = ctx;
    ferry__lake_capabilities(ctx, mode, caps);
    caps->encoded_integrity = s->lk.fmt != NULL && s->lk.fmt->per_batch_bytes;
    /* CSV and JSON Lines write dates and timestamps as text of years 0001..9999 */
    caps->values.calendar = s->lk.fmt != NULL && strcmp(s->lk.fmt->name, "parquet") != 0;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->lk.session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "s3",
                               "s3 sink: apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    if (!ferry_receipt_start(receipt, b)) return FERRY_OK; /* the pipeline reports divergence */
    /* Parquet: the rows are encoded later with their row group, so no encoded CRC of this
     * batch exists; none is claimed (docs/connectors.md, "Integrity"). */
    receipt->has_encoded_crc = s->lk.fmt->per_batch_bytes;
    if (b->length == 0) return FERRY_OK;
    int rc = FERRY_OK;
    if (t->obj < 0) rc = open_part(s, t, err);
    if (rc != FERRY_OK) return rc;
    struct object *o = &s->objs[t->obj];
    t->apply_crc = 0;
    t->apply_bytes = 0;
    rc = s->lk.fmt->write_batch(t->fw, b, err);
    o = &s->objs[t->obj];
    if (rc != FERRY_OK) return ferry_error_prefix(err, "s3://%s/%s", s->bucket, o->key);
    o->rows += b->length;
    receipt->rows = b->length;
    receipt->bytes = t->apply_bytes;
    receipt->encoded_crc = t->apply_crc;
    snprintf(receipt->uri, sizeof receipt->uri, "s3://%s/%s", s->bucket, o->key);
    if (ferry__lake_part_full(&s->lk, o->rows, o->bytes))
        rc = close_part(s, t, err);
    return rc;
}

/* ---- commit / abort ------------------------------------------------------------------------ */

static void manifest_item(const void *ctx, int i, struct ferry__manifest_item *out)
{
    const struct object *o = &((const struct sink *)ctx)->objs[i];
    *out = (struct ferry__manifest_item){o->table, o->key, o->rows, o->bytes, o->crc};
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
static int put_manifest(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    char *key = manifest_key(s);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (key == NULL) return nomem(err);
    struct ferry__manifest_head h = ferry__lake_head(&s->lk, "bucket", s->bucket);
    int brc = ferry__manifest_text(&b, &h, s->lk.replace ? NULL : s->lk.earlier, s->n_objs,
                                   manifest_item, s);
    int rc = brc == FERRY_OK ? put_json(s, key, &b, err) : nomem(err);
    ferry_buf_release(&b);
    ferry_free(key);
    return rc;
}

static bool replaced_table(const void *ctx, const char *table)
{
    const struct sink *s = ctx;
    for (int i = 0; i < s->n_t; i++)
        if (s->t[i].used && table && strcmp(s->t[i].table, table) == 0) return true;
    return false;
}

/* The data set manifest <prefix>/_manifest.json: every object of every table (replace:
 * this run's objects replace those of its tables, the other tables' are kept; append, once
 * a replace made one: the run's objects are added). Before the first one the data set is
 * the union of the run manifests. *out: its "objects". */
static int put_dataset(void *ctx, json_t **out, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    json_t *old = NULL;
    int rc = FERRY_OK;
    if (s->lk.dataset == NULL && s->lk.replace) {
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
    }
    json_t *kept = ferry__lake_kept(&s->lk, old ? old : s->lk.dataset, replaced_table, s);
    json_decref(old);
    if (rc == FERRY_OK && kept == NULL) rc = nomem(err);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    struct ferry__manifest_head h = ferry__lake_head(&s->lk, "bucket", s->bucket);
    char *key = dataset_key(s);
    if (rc == FERRY_OK && (key == NULL || ferry__manifest_text(&b, &h, kept, s->n_objs,
                                                               manifest_item, s) != FERRY_OK))
        rc = nomem(err);
    json_decref(kept);
    if (rc == FERRY_OK) rc = put_json(s, key, &b, err);
    if (rc == FERRY_OK) *out = ferry__lake_list_of(&s->lk, &b);
    ferry_buf_release(&b);
    ferry_free(key);
    return rc;
}

/* After a replace switched the data set: deletes the objects of the replaced tables that it
 * does not list, and the run manifests none of whose objects it lists. Failures are logged:
 * the data set is already complete; the next replace deletes what is left. */
static void remove_replaced(void *ctx, const json_t *now)
{
    struct sink *s = ctx;
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
        if (!ferry__lake_in_list(now, "key", key) && delete_object(s, key, &e) != FERRY_OK)
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
        json_array_foreach(objs, j, o) live =
            live || ferry__lake_in_list(now, "key", json_string_value(json_object_get(o, "key")));
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
    if (!s->lk.session)
        return ferry_error_set(err, FERRY_EINVAL, "s3",
                               "s3 sink: s3://%s: commit without a session", s->bucket);
    int rc = FERRY_OK;
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        rc = close_part(s, &s->t[i], err);
    if (rc == FERRY_OK) rc = ferry_failpoint_check("s3_before_manifest", err);
    /* The switch is one PUT of the data set manifest. */
    static const struct ferry__lake_store store = {put_dataset, put_manifest, remove_replaced,
                                                   "s3_after_switch"};
    if (rc == FERRY_OK) rc = ferry__lake_publish(&s->lk, &store, s, err);
    if (rc != FERRY_OK) return rc; /* abort() deletes what this session uploaded */
    discard(s, false);
    s->lk.session = false;
    return FERRY_OK;
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    discard(s, s->lk.session);
    s->lk.session = false;
}

int ferry__s3_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err);

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
    .verify_open = ferry__s3_verify_open, /* s3_verify.c */
};
