/* connectors/s3/s3_verify.c - the s3 sink's verify_open slot: a destination of Parquet,
 * CSV or JSON Lines objects read back for `ferry verify`.
 *
 * The objects that make the table are those the manifests list, as for the files sink: the
 * data set manifest <prefix>/_manifest.json when it exists (a replace wrote it), else every
 * run manifest <prefix>/_runs/run=<run>/_manifest.json; entries whose table is the
 * destination's, sorted by key. Objects no manifest lists (a crashed attempt's) never count.
 * Each object is fetched into a private temporary folder (TMPDIR, mode 0700; each file named
 * after its object, so a reader error names it) and the folder's files are hashed row by row:
 * Parquet by verify's Parquet side (ferry__vside_parquet_open), CSV and JSON Lines by the
 * files source (ferry__vside_text_open: the sink section's format, header, delimiter and null,
 * the schema the pipeline writes; gzip or zstd bytes are recognised by the source, though the
 * sink writes plain text). Both read every file whole at open, so the files and the folder
 * are removed before this returns, on every path. An object that is listed but gone is an
 * error naming it (s3://bucket/key). Disk: the table's objects, for the time of the open.
 *
 * Calls s3_client.c, verify/verify.c and verify/backend_stream.c, jansson. Called by
 * `ferry verify` through the sink vtable. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ferry/config.h"
#include "ferry/connector.h"
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

/* Fetches object key into file path. */
static int fetch(struct ferry__s3_client *c, const char *key, const char *path,
                 struct ferry_buf *b, struct ferry_error *err)
{
    ferry_buf_reset(b);
    int rc = ferry__s3_get(c, key, b, err);
    if (rc == FERRY_ENOTFOUND)
        return ferry_error_set(err, FERRY_ENOTFOUND, "s3",
                               "s3 verify: s3://%s/%s is listed by a manifest but missing",
                               ferry__s3_client_bucket(c), key);
    if (rc != FERRY_OK) return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t done = 0;
    while (fd >= 0 && done < b->len) {
        ssize_t k = write(fd, b->data + done, b->len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    if (fd < 0 || done < b->len) rc = ferry_error_set(err, FERRY_EIO, "s3", "s3 verify: cannot write %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return rc;
}

/* A file name in dir for the i-th object: its index (the keys' order) and the key's last 200
 * bytes, '/' as '_' (a reader's error then names the object; NAME_MAX is 255). */
static char *object_path(const char *dir, size_t i, const char *key)
{
    size_t kl = strlen(key);
    char *path = ferry_asprintf("%s/%06zu-%s", dir, i, kl > 200 ? key + kl - 200 : key);
    for (char *q = path ? path + strlen(dir) + 1 : NULL; q && *q; q++)
        if (*q == '/') *q = '_';
    return path;
}

/* The glob of every file in dir (dir, then "/" and "*"), the metacharacters of dir (from
 * TMPDIR) escaped for glob(3). */
static char *folder_glob(const char *dir)
{
    char *g = ferry_malloc(strlen(dir) * 2 + 3), *o = g;
    for (const char *c = dir; g && *c; c++) {
        if (strchr("*?[\\", *c)) *o++ = '\\';
        *o++ = *c;
    }
    if (g) memcpy(o, "/*", 3);
    return g;
}

/* The fetched files (n, in key order) hashed by the side of the format. No object: an empty
 * side (the files source wants at least one file; the Parquet side takes none). */
static int open_files(struct ferry_cfg *cfg, const char *format, char *const *paths, size_t n,
                      const char *dir, const char *table, const struct ferry_vtable *t,
                      const char *what, struct ferry_vside **out, struct ferry_error *err)
{
    if (!strcmp(format, "parquet") || n == 0)
        return ferry__vside_parquet_open(paths, (int)n, table, t, what, out, err);
    char *glob = folder_glob(dir);
    int rc =
        glob ? ferry__vside_text_open(cfg, glob, table, t->written, t, what, out, err) : nomem(err);
    ferry_free(glob);
    return rc;
}

/* Every listed object of the table fetched into dir and hashed; the files are removed before
 * this returns (the sides read them whole at open). */
static int read_objects(struct ferry__s3_client *c, struct ferry_cfg *cfg, const char *format,
                        json_t *keys, const char *dir, const char *table,
                        const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                        struct ferry_error *err)
{
    size_t n = json_array_size(keys);
    char **paths = ferry_calloc(n + 1, sizeof *paths);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = paths ? FERRY_OK : nomem(err);
    for (size_t i = 0; rc == FERRY_OK && i < n; i++) {
        const char *key = json_string_value(json_array_get(keys, i));
        paths[i] = object_path(dir, i, key);
        rc = paths[i] ? fetch(c, key, paths[i], &b, err) : nomem(err);
    }
    ferry_buf_release(&b);
    if (rc == FERRY_OK) rc = open_files(cfg, format, paths, n, dir, table, t, what, out, err);
    for (size_t i = 0; paths && i < n; i++) {
        if (paths[i]) unlink(paths[i]);
        ferry_free(paths[i]);
    }
    ferry_free(paths);
    return rc;
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
    const char *tmp = getenv("TMPDIR");
    char *dir = ferry_asprintf("%s/ferry-s3-verify-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (rc == FERRY_OK && (dir == NULL || mkdtemp(dir) == NULL))
        rc = ferry_error_set(err, FERRY_EIO, "s3", "s3 verify: cannot make a temporary folder: %s",
                             strerror(errno));
    else if (rc == FERRY_OK) {
        rc = read_objects(c, cfg, format, keys, dir, table, t, what, out, err);
        rmdir(dir);
    }
    if (rc == FERRY_OK &&
        (*table_out = ferry_asprintf("s3://%s/%s%s%s (%zu object%s)", bucket, pfx, pl ? "/" : "",
                                     table, json_array_size(keys),
                                     json_array_size(keys) == 1 ? "" : "s")) == NULL) {
        (*out)->ops->close(*out);
        *out = NULL;
        rc = nomem(err);
    }
    ferry_free(dir);
    ferry_free(pfx);
    json_decref(keys);
    ferry__s3_client_close(c);
    return rc;
}
