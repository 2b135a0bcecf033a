/* connectors/s3/s3_verify.c - the s3 sink's verify_open slot: a destination of Parquet,
 * CSV or JSON Lines objects read back for `ferry verify`.
 *
 * The objects that make the table are those the manifests list, as for the files sink: the
 * data set manifest <prefix>/_manifest.json when it exists (a replace wrote it), else every
 * run manifest <prefix>/_runs/run=<run>/_manifest.json; entries whose table is the
 * destination's, sorted by key. Objects no manifest lists (a crashed attempt's) never count.
 * They are read where they are, through the s3 source (connectors/s3/s3_source.c) on a
 * one-resource pipeline made here and opened as a stream side (ferry__vside_stream_open),
 * as ferry__vside_text_open does over the files source for the files sink: the sink's
 * bucket and connection keys, its format (CSV: its header, delimiter and null), the resource's
 * `keys:` exactly the listed objects under their common folder (the source lists it once and
 * fails on a key it does not hold), no transforms (the objects hold what the sink wrote);
 * for CSV and JSON Lines the schema the pipeline writes and its key (gzip or zstd bytes are
 * recognised by the source, though the sink writes plain text), for Parquet the compared
 * columns and the key (the footers carry the types). So Parquet objects are read by ranged
 * GETs (footer, then the selected column chunks of each row group, a bounded window fetched
 * ahead) and text objects streamed in chunks, each response's ETag and length checked:
 * nothing goes to disk (the side's sorted list may spill under TMPDIR above its budget:
 * vsorted.c) and memory is the source's buffers plus that list. An object a manifest lists
 * that the bucket does not hold (or that goes while it is read) is one error naming it
 * (s3://bucket/key, FERRY_ENOTFOUND; the source's message said again as the manifest's). No
 * object: an empty side.
 *
 * Calls s3_client.c (the manifests), the pipeline loader, verify/backend_stream.c, jansson.
 * Called by `ferry verify` through the sink vtable. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/pipeline.h"
#include "objstore/s3_client.h"
#include "verify/verify.h"

int ferry__s3_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err);

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 verify: out of memory");
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* Appends the keys of `table` listed by the manifest object mkey to keys; *found false when
 * the manifest does not exist. */
static int manifest_keys(struct ferry__s3_client *c, const char *mkey, const char *table,
                         json_t *keys, bool *found, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 64 << 20);
    int rc = ferry__s3_get(c, mkey, &b, err);
    *found = rc == FERRY_OK;
    if (rc == FERRY_ENOTFOUND) rc = FERRY_OK;
    json_t *m = *found ? json_loadb(b.data, b.len, 0, NULL) : NULL;
    json_t *objs = json_object_get(m, "objects");
    if (*found && !json_is_array(objs))
        rc = ferry_error_set(err, FERRY_EINVAL, "s3", "s3 verify: s3://%s/%s is not a manifest",
                             ferry__s3_client_bucket(c), mkey);
    size_t i;
    json_t *e;
    json_array_foreach(objs, i, e)
    {
        const char *tb = json_string_value(json_object_get(e, "table"));
        json_t *k = json_object_get(e, "key");
        if (rc != FERRY_OK || tb == NULL || strcmp(tb, table) != 0 || !json_is_string(k)) continue;
        if (json_array_append(keys, k) != 0) rc = nomem(err);
    }
    json_decref(m);
    ferry_buf_release(&b);
    return rc;
}

/* The table's object keys from the data set manifest, else from every run manifest. */
static int table_keys(struct ferry__s3_client *c, const char *prefix, const char *table,
                      json_t *keys, struct ferry_error *err)
{
    const char *sep = prefix[0] ? "/" : "";
    char *ds = ferry_asprintf("%s%s_manifest.json", prefix, sep);
    char *runs = ferry_asprintf("%s%s_runs/", prefix, sep);
    bool found = false;
    int rc = ds && runs ? manifest_keys(c, ds, table, keys, &found, err) : nomem(err);
    json_t *all = rc == FERRY_OK && !found ? json_array() : NULL;
    if (rc == FERRY_OK && !found) rc = all ? ferry__s3_list(c, runs, all, err) : nomem(err);
    size_t i;
    json_t *k;
    json_array_foreach(all, i, k)
    {
        const char *key = json_string_value(k);
        size_t n = key ? strlen(key) : 0;
        if (rc != FERRY_OK || n < 15 || strcmp(key + n - 15, "/_manifest.json") != 0) continue;
        bool f2;
        rc = manifest_keys(c, key, table, keys, &f2, err);
    }
    json_decref(all);
    ferry_free(ds);
    ferry_free(runs);
    if (rc == FERRY_OK && json_array_size(keys) > 1) {
        size_t n = json_array_size(keys);
        json_t **v = ferry_calloc(n, sizeof *v);
        if (v == NULL) return nomem(err);
        for (size_t j = 0; j < n; j++) v[j] = json_incref(json_array_get(keys, j));
        qsort(v, n, sizeof *v, key_cmp);
        json_array_clear(keys);
        for (size_t j = 0; j < n; j++) json_array_append_new(keys, v[j]);
        ferry_free(v);
    }
    return rc;
}

/* y += `  name: "value"` and a line end, when the section cfg has a string at name. */
static int copy_key(struct ferry_cfg *cfg, const char *name, struct ferry_buf *y,
                    struct ferry_error *err)
{
    const char *v = NULL;
    int rc = ferry_cfg_str(cfg, name, false, &v, err);
    if (rc != FERRY_OK || v == NULL) return rc;
    ferry_buf_printf(y, "  %s: ", name);
    ferry_buf_json_string(y, v, strlen(v));
    return ferry_buf_printf(y, "\n") == FERRY_OK ? FERRY_OK : nomem(err);
}

/* The s3 source's section: the sink's bucket and connection keys as written (secret
 * references stay references), the format and, for CSV, the sink's header, delimiter and
 * null with the sink's defaults (as ferry__vside_text_open reads a files sink's). */
static int source_section(struct ferry_cfg *cfg, const char *format, struct ferry_buf *y,
                          struct ferry_error *err)
{
    static const char *const conn[] = {"bucket",        "endpoint",      "region",
                                       "path_style",    "access_key_id", "secret_access_key",
                                       "session_token", "max_attempts",  NULL};
    ferry_buf_printf(y,
                     "version: 1\nname: verify-s3-destination\nsource:\n  type: s3\n"
                     "  format: %s\n",
                     format);
    int rc = FERRY_OK;
    for (int i = 0; conn[i] && rc == FERRY_OK; i++)
        rc = copy_key(cfg, conn[i], y, err);
    const char *nul = "", *delim = ",";
    bool header = true;
    if (rc != FERRY_OK || strcmp(format, "csv") != 0) return rc;
    rc = ferry_cfg_str(cfg, "null", false, &nul, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "delimiter", false, &delim, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "header", false, &header, err);
    ferry_buf_printf(y, "  header: %s\n  delimiter: ", header ? "true" : "false");
    ferry_buf_json_string(y, delim, strlen(delim));
    ferry_buf_printf(y, "\n  \"null\": ");
    ferry_buf_json_string(y, nul, strlen(nul));
    ferry_buf_printf(y, "\n");
    return rc;
}

/* y += `      schema: {...}`: the schema the pipeline writes, each column's exact type. */
static void schema_yaml(const struct ferry_schema *w, struct ferry_buf *y)
{
    ferry_buf_printf(y, "      schema: {");
    for (int i = 0; i < w->n_fields; i++) {
        const struct ferry_field *f = &w->fields[i];
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
    ferry_buf_printf(y, "}\n");
}

/* y += `      NAME: [...]`: the n names name(ctx, i). */
static void names_yaml(const char *list, int n, const char *(*name)(const void *, int),
                       const void *ctx, struct ferry_buf *y)
{
    ferry_buf_printf(y, "      %s: [", list);
    for (int i = 0; i < n; i++) {
        const char *v = name(ctx, i);
        ferry_buf_printf(y, "%s", i > 0 ? ", " : "");
        ferry_buf_json_string(y, v, strlen(v));
    }
    ferry_buf_printf(y, "]\n");
}

static const char *written_key(const void *w, int k)
{
    const struct ferry_schema *s = w;
    return s->fields[s->key[k]].name;
}

static const char *compared(const void *t, int i)
{
    return ((const struct ferry_vtable *)t)->cols[i].dst;
}

static const char *compared_key(const void *t, int k)
{
    const struct ferry_vtable *v = t;
    return v->cols[v->key[k]].dst;
}

/* The folder every key (sorted) is under: their common prefix up to its last '/'. */
static char *common_folder(json_t *keys)
{
    const char *a = json_string_value(json_array_get(keys, 0));
    const char *b = json_string_value(json_array_get(keys, json_array_size(keys) - 1));
    size_t n = 0, cut = 0;
    while (a[n] && a[n] == b[n])
        if (a[n++] == '/') cut = n;
    return ferry_strndup(a, cut);
}

/* The one resource: the table, the folder its keys are under and exactly those keys; for
 * text the schema the pipeline writes and its key (what ferry__vside_text_open declares to
 * the files source), for Parquet the compared columns and the key (the objects carry their
 * types; only those columns' chunks are fetched). No transforms: the objects hold what the
 * sink wrote, so they are not applied twice. */
static int resource_section(const char *format, json_t *keys, const char *table,
                            const struct ferry_vtable *t, struct ferry_buf *y,
                            struct ferry_error *err)
{
    char *dir = common_folder(keys);
    if (dir == NULL) return nomem(err);
    ferry_buf_printf(y, "  resources:\n    - table: ");
    ferry_buf_json_string(y, table, strlen(table));
    ferry_buf_printf(y, "\n      prefix: ");
    ferry_buf_json_string(y, dir, strlen(dir));
    ferry_buf_printf(y, "\n      keys:\n");
    ferry_free(dir);
    for (size_t i = 0; i < json_array_size(keys); i++) {
        const char *k = json_string_value(json_array_get(keys, i));
        ferry_buf_printf(y, "        - ");
        ferry_buf_json_string(y, k, strlen(k));
        ferry_buf_printf(y, "\n");
    }
    if (strcmp(format, "parquet") == 0) {
        names_yaml("columns", t->n_cols, compared, t, y);
        names_yaml("key", t->n_key, compared_key, t, y);
    } else {
        schema_yaml(t->written, y);
        names_yaml("key", t->written->n_key, written_key, t->written, y);
    }
    ferry_buf_printf(y, "sink:\n  type: \"null\"\n");
    return y->data == NULL ? nomem(err) : FERRY_OK;
}

/* An object the source found missing (not listed, or gone when read: FERRY_ENOTFOUND naming
 * s3://bucket/key) said as a manifest's: it lists the object, the bucket does not hold it. */
static int missing(int rc, const char *bucket, json_t *keys, struct ferry_error *err)
{
    for (size_t i = 0; rc == FERRY_ENOTFOUND && err != NULL && i < json_array_size(keys); i++) {
        const char *k = json_string_value(json_array_get(keys, i));
        char *needle = ferry_asprintf("s3://%s/%s ", bucket, k);
        bool named = needle != NULL && strstr(err->message, needle) != NULL;
        ferry_free(needle);
        if (named)
            return ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                                   "s3 verify: s3://%s/%s is listed by a manifest but missing",
                                   bucket, k);
    }
    return rc;
}

/* The listed objects (at least one) hashed as a side read through the s3 source: a pipeline
 * made for the purpose, freed once the side is open (a stream side opened for a destination
 * reads everything at open and keeps no reference to it). */
static int open_objects(struct ferry_cfg *cfg, const char *bucket, const char *format, json_t *keys,
                        const char *table, const struct ferry_vtable *t, const char *what,
                        struct ferry_vside **out, struct ferry_error *err)
{
    if (t->source || (strcmp(format, "parquet") != 0 && t->written == NULL))
        return ferry_error_set(err, FERRY_EINVAL, "verify",
                               "verify: %s %s: s3 objects are read back for a destination only, "
                               "in the schema written",
                               what, table);
    struct ferry_buf y;
    ferry_buf_init(&y, 0);
    int rc = source_section(cfg, format, &y, err);
    if (rc == FERRY_OK) rc = resource_section(format, keys, table, t, &y, err);
    struct ferry_pipeline_spec *rp = NULL;
    if (rc == FERRY_OK) rc = ferry_pipeline_load_string(y.data, y.len, "s3 verify", &rp, err);
    if (rc == FERRY_OK) rc = ferry__vside_stream_open(rp, &rp->resources[0], t, what, out, err);
    ferry_pipeline_free(rp);
    ferry_buf_release(&y);
    return missing(rc, bucket, keys, err);
}

int ferry__s3_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err)
{
    *out = NULL;
    *table_out = NULL;
    const char *bucket = NULL, *prefix = "", *format = "csv"; /* the sink's default */
    int rc = source ? ferry_error_set(err, FERRY_EUNSUPPORTED, "s3", "s3 verify: a destination only")
                    : ferry_cfg_str(cfg, "bucket", true, &bucket, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "prefix", false, &prefix, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "format", false, &format, err);
    if (rc == FERRY_OK && strcmp(format, "parquet") != 0 && strcmp(format, "csv") != 0 &&
        strcmp(format, "jsonl") != 0)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "verify",
                             "verify: an s3 destination in %s format cannot be verified yet "
                             "(parquet, csv and jsonl can)",
                             format);
    if (rc != FERRY_OK) return rc;
    char *pfx = ferry_strdup(prefix);
    if (pfx == NULL) return nomem(err);
    size_t pl = strlen(pfx);
    while (pl > 0 && pfx[pl - 1] == '/') pfx[--pl] = '\0';
    struct ferry__s3_client *c = NULL;
    rc = ferry__s3_client_open(cfg, bucket, ferry_cfg_get(cfg, "bucket"), "s3 verify", &c, err);
    const char *table = ferry_resource_target(r);
    json_t *keys = json_array();
    if (rc == FERRY_OK && keys == NULL) rc = nomem(err);
    if (rc == FERRY_OK) rc = table_keys(c, pfx, table, keys, err);
    ferry__s3_client_close(c);
    if (rc == FERRY_OK && json_array_size(keys) == 0) /* an empty side */
        rc = ferry__vside_parquet_open(NULL, 0, table, t, what, out, err);
    else if (rc == FERRY_OK)
        rc = open_objects(cfg, bucket, format, keys, table, t, what, out, err);
    if (rc == FERRY_OK &&
        (*table_out = ferry_asprintf("s3://%s/%s%s%s (%zu object%s)", bucket, pfx, pl ? "/" : "",
                                     table, json_array_size(keys),
                                     json_array_size(keys) == 1 ? "" : "s")) == NULL) {
        (*out)->ops->close(*out);
        *out = NULL;
        rc = nomem(err);
    }
    ferry_free(pfx);
    json_decref(keys);
    return rc;
}
