/* connectors/s3/s3_source.c - the `s3` source: Parquet objects under a prefix whose keys
 * match a glob, read by ranged GETs.
 *
 * Each row group of each object is one shard (keys sorted as S3 lists them; size and ETag
 * frozen in the plan). An object is never read whole: the footer first (three ranged GETs:
 * magic, length, footer), then only the column chunks of the selected columns of the
 * shard's row group, one at a time (parquet_reader.h). A batch position is the number of
 * the group's rows delivered, as for the files source. Full reads only. The schema is the
 * first object's footer (every column nullable); every other object must have each
 * selected column with the same type.
 *
 * Keys: bucket (required), prefix, glob (fnmatch on the key after the prefix, `*` crossing
 * `/`; default every key), format (parquet; from the key's .parquet suffix otherwise) and
 * the connection keys of the s3 sink (endpoint, region, path_style, credentials by reference,
 * max_attempts: s3_client.c retries, signs with SigV4). A resource may set its own prefix
 * and glob. Not yet: CSV and JSON Lines objects, `mode: incremental` (refused naming them).
 *
 * Owns one S3 client and a response buffer. Calls s3_client.c, parquet_reader.c, jansson.
 * Registered in connectors/registry.c; one instance per reader thread. */
#include <fnmatch.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/parquet_reader.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "objstore/s3_client.h"
#include "objstore/sigv4.h"

static const char *const src_tuning_keys[] = {"parallelism", "max_attempts", NULL};
static const char *const src_format_words[] = {"parquet", "csv", "jsonl", NULL};

struct s3src {
    struct ferry__s3_client *cli;
    char *prefix, *glob;
    struct ferry_buf resp; /* ranged GET bodies */
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 source: out of memory");
}

static void src_close(void *ctx)
{
    struct s3src *s = ctx;
    if (s == NULL) return;
    ferry__s3_client_close(s->cli);
    ferry_free(s->prefix);
    ferry_free(s->glob);
    ferry_buf_release(&s->resp);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *bucket = NULL, *prefix = "", *glob = NULL;
    int format = 0;
    int rc = ferry_cfg_str(cfg, "bucket", true, &bucket, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "prefix", false, &prefix, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "glob", false, &glob, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "format", false, src_format_words, &format, err);
    if (rc != FERRY_OK) return rc;
    if (format != 0)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "format"),
                               "the s3 source reads Parquet objects only for now (csv and jsonl: "
                               "not yet)");
    struct s3src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    ferry_buf_init(&s->resp, 0);
    s->prefix = ferry_strdup(prefix ? prefix : "");
    s->glob = glob ? ferry_strdup(glob) : NULL;
    if (s->prefix == NULL || (glob && s->glob == NULL)) {
        src_close(s);
        return nomem(err);
    }
    rc =
        ferry__s3_client_open(cfg, bucket, ferry_cfg_get(cfg, "bucket"), "s3 source", &s->cli, err);
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

/* Every object under prefix matching glob (or ending in .parquet without one), as
 * [{"key", "size", "etag"}], in key order; FERRY_ENOTFOUND when none. */
static int list_objects(struct s3src *s, const struct ferry_resource_spec *spec, json_t **out,
                        struct ferry_error *err)
{
    const char *prefix, *glob;
    int rc = where(s, spec, &prefix, &glob, err);
    if (rc != FERRY_OK) return rc;
    json_t *arr = json_array();
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
        if (brc == FERRY_OK) brc = ferry_buf_printf(&qs, "list-type=2&prefix=");
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
            const char *rel = key.data + strlen(prefix);
            bool match = glob ? fnmatch(glob, rel, 0) == 0
                              : key.len >= 8 && strcmp(key.data + key.len - 8, ".parquet") == 0;
            if (!match) continue;
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
    if (rc == FERRY_OK && json_array_size(arr) == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                             "s3 source: resource %s: no object under s3://%s/%s matches %s",
                             spec->table, ferry__s3_client_bucket(s->cli), prefix,
                             glob ? glob : "*.parquet");
    if (rc != FERRY_OK) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return FERRY_OK;
}

/* ---- ranged reads -------------------------------------------------------------------------- */

struct obj {
    struct s3src *s;
    const char *key;
};

static int obj_read_at(void *ctx, uint64_t off, size_t n, void *p, struct ferry_error *err)
{
    struct obj *o = ctx;
    char range[64];
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, off, off + n - 1);
    struct ferry__s3_req q = {.method = "GET", .key = o->key, .query = "", .range = range};
    ferry_buf_reset(&o->s->resp);
    int rc = ferry__s3_call(o->s->cli, &q, false, &o->s->resp, err);
    if (rc == FERRY_ENOTFOUND)
        return ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                               "s3 source: s3://%s/%s is gone (it was listed)",
                               ferry__s3_client_bucket(o->s->cli), o->key);
    if (rc != FERRY_OK) return rc;
    if (o->s->resp.len != n)
        return ferry_error_set(err, FERRY_ESOURCE, "s3",
                               "s3 source: s3://%s/%s: %zu bytes at %" PRIu64 " asked, %zu came "
                               "(the object changed since it was listed?)",
                               ferry__s3_client_bucket(o->s->cli), o->key, n, off, o->s->resp.len);
    memcpy(p, o->s->resp.data, n);
    return FERRY_OK;
}

static int open_object(struct s3src *s, const char *key, int64_t size, struct obj *o,
                       struct ferry_parquet_reader **r, struct ferry_error *err)
{
    o->s = s;
    o->key = key;
    char name[1200];
    snprintf(name, sizeof name, "s3://%s/%s", ferry__s3_client_bucket(s->cli), key);
    return ferry__parquet_reader_open_ranged((uint64_t)size, obj_read_at, o, name, r, err);
}

/* ---- discover / plan / extract ----------------------------------------------------------------
 */

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct s3src *s = ctx;
    json_t *objs = NULL;
    int rc = list_objects(s, spec, &objs, err);
    if (rc != FERRY_OK) return rc;
    json_t *first = json_array_get(objs, 0);
    struct obj o;
    struct ferry_parquet_reader *r = NULL;
    rc = open_object(s, json_string_value(json_object_get(first, "key")),
                     (int64_t)json_integer_value(json_object_get(first, "size")), &o, &r, err);
    struct ferry_schema *sc = rc == FERRY_OK ? ferry_schema_new() : NULL;
    if (rc == FERRY_OK && sc == NULL) rc = nomem(err);
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    int n = rc == FERRY_OK ? (spec->columns ? spec->n_columns : fs->n_fields) : 0;
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        int f = spec->columns ? ferry_schema_find(fs, spec->columns[i]) : i;
        if (f < 0) {
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                                 "s3 source: resource %s has no column \"%s\"", spec->table,
                                 spec->columns[i]);
            break;
        }
        const struct ferry_field *fd = &fs->fields[f];
        rc = ferry_schema_add_field(sc, fd->name, fd->type, true, err);
        if (rc == FERRY_OK) {
            sc->fields[i].precision = fd->precision;
            sc->fields[i].scale = fd->scale;
        }
    }
    int missing = rc == FERRY_OK && spec->key ? ferry_schema_mark_key(sc, spec->key, spec->n_key) : -1;
    if (missing >= 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                             "s3 source: resource %s: key column \"%s\" is not among the columns",
                             spec->table, spec->key[missing]);
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    ferry__parquet_reader_free(r);
    json_decref(objs);
    if (rc != FERRY_OK) {
        ferry_schema_unref(sc);
        return rc;
    }
    *out = sc;
    return FERRY_OK;
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *schema, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    (void)schema;
    (void)route_checkpoint;
    struct s3src *s = ctx;
    if (spec->mode != FERRY_READ_FULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "s3",
                               "resource %s: the s3 source reads in mode full only for now, not "
                               "%s",
                               spec->table, ferry_read_mode_name(spec->mode));
    json_t *objs = NULL;
    int rc = list_objects(s, spec, &objs, err);
    if (rc != FERRY_OK) return rc;
    json_t *shards = json_array();
    json_int_t rows = 0;
    if (shards == NULL) rc = nomem(err);
    for (size_t i = 0; i < json_array_size(objs) && rc == FERRY_OK; i++) {
        json_t *ob = json_array_get(objs, i);
        const char *key = json_string_value(json_object_get(ob, "key"));
        int64_t size = (int64_t)json_integer_value(json_object_get(ob, "size"));
        struct obj o;
        struct ferry_parquet_reader *r = NULL;
        /* every footer read here: a corrupt or lying one stops the run before any write */
        rc = open_object(s, key, size, &o, &r, err);
        for (int g = 0; rc == FERRY_OK && g < ferry__parquet_reader_num_groups(r); g++) {
            json_t *sh = json_pack("{s:s,s:I,s:O,s:i}", "key", key, "size", (json_int_t)size,
                                   "etag", json_object_get(ob, "etag"), "group", g);
            if (sh == NULL || json_array_append_new(shards, sh) != 0) rc = nomem(err);
            rows += ferry__parquet_reader_group_rows(r, g);
        }
        ferry__parquet_reader_free(r);
    }
    json_t *plan = rc == FERRY_OK ? json_pack("{s:s,s:O,s:I}", "mode", "full", "shards", shards,
                                              "rows_estimate", rows)
                                  : NULL;
    if (rc == FERRY_OK && plan == NULL) rc = nomem(err);
    char *text = plan ? json_dumps(plan, JSON_COMPACT) : NULL;
    if (rc == FERRY_OK && text == NULL) rc = nomem(err);
    json_decref(plan);
    json_decref(shards);
    json_decref(objs);
    if (rc != FERRY_OK) {
        free(text);
        return rc;
    }
    *plan_json = ferry_strdup(text);
    free(text);
    return *plan_json ? FERRY_OK : nomem(err);
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const char *resume, struct ferry_row_writer *rw, struct ferry_error *err)
{
    struct s3src *s = ctx;
    json_t *root = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *sh = json_array_get(json_object_get(root, "shards"), (size_t)shard);
    json_t *key = json_object_get(sh, "key"), *size = json_object_get(sh, "size");
    json_t *grp = json_object_get(sh, "group");
    int rc = FERRY_OK;
    int64_t skip = 0;
    if (!json_is_string(key) || !json_is_integer(size) || !json_is_integer(grp)) {
        rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                             "resource %s: shard %d of the frozen plan is not an s3 plan",
                             spec->table, shard);
    } else if (resume != NULL) {
        json_t *pos = json_loads(resume, 0, NULL);
        if (json_is_true(json_object_get(pos, "done"))) rc = -1;
        json_t *n = json_object_get(pos, "n");
        if (json_is_integer(n)) skip = (int64_t)json_integer_value(n);
        json_decref(pos);
    }
    if (rc == -1) {
        json_decref(root);
        return FERRY_OK;
    }
    struct obj o;
    struct ferry_parquet_reader *r = NULL;
    if (rc == FERRY_OK)
        rc = open_object(s, json_string_value(key), (int64_t)json_integer_value(size), &o, &r, err);
    const char **names = ferry_calloc((size_t)schema->n_fields + 1, sizeof *names);
    if (rc == FERRY_OK && names == NULL) rc = nomem(err);
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    for (int i = 0; rc == FERRY_OK && i < schema->n_fields; i++) {
        const struct ferry_field *want = &schema->fields[i];
        int k = ferry_schema_find(fs, want->name);
        names[i] = want->name;
        if (k < 0 || fs->fields[k].type != want->type ||
            fs->fields[k].precision != want->precision || fs->fields[k].scale != want->scale)
            rc = ferry_error_set(err, FERRY_EINVAL, "s3",
                                 "s3 source: s3://%s/%s: column \"%s\" is missing or of another "
                                 "type than in the first object",
                                 ferry__s3_client_bucket(s->cli), json_string_value(key),
                                 want->name);
    }
    if (rc == FERRY_OK) rc = ferry__parquet_reader_select(r, names, schema->n_fields, err);
    ferry_rw_set_shard(rw, shard);
    if (rc == FERRY_OK)
        rc = ferry__parquet_reader_read_group(r, (int)json_integer_value(grp), skip, rw, err);
    ferry_free(names);
    ferry__parquet_reader_free(r);
    json_decref(root);
    return rc;
}

const struct ferry_source_vtable ferry__s3_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "s3",
    .tuning_keys = src_tuning_keys,
    .supports_incremental = false,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = NULL,
};
