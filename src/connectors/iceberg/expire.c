/* connectors/iceberg/expire.c - `ferry iceberg expire`: drops old snapshots from a table's
 * metadata and deletes the files no remaining snapshot references.
 *
 * A snapshot is kept when it is the current one, when a ref names it, when it is younger
 * than the cutoff, or when it is among the `retain_last` newest. The metadata without the
 * others is committed through the catalog like any commit (a conflict re-reads and
 * retries). Then the table's folder is walked: a manifest list, manifest, data or delete
 * file that no kept snapshot reaches and whose modification time is before the cutoff is
 * deleted. The age test keeps the files of a writer still running (written but not yet
 * committed), and covers the orphans of runs that died. A metadata JSON file goes by the
 * same age rule when it is neither the current one nor in the current metadata log, and its
 * number is below the current one (so a commit made meanwhile keeps its file).
 *
 * Files are found under the table's `location` (its data/ and metadata/ folders only): a
 * local folder is walked, an S3 prefix in the catalog's warehouse bucket is listed (and each
 * candidate's Last-Modified read). On S3 the unfinished multipart uploads under data/ (a
 * writer killed mid-file) are aborted by the same age rule, by their Initiated time.
 * A location ferry cannot reach (a REST catalog whose tables live where this process has
 * no storage) still gets its snapshots expired; the files are left and the result says
 * why, so the caller can tell the user.
 *
 * Owns nothing beyond one call. Calls catalog.c, io.c, avro.c, jansson, libc. Called by
 * the CLI (src/cli/cmd_iceberg.c) and tests. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"
#include "objstore/s3_client.h"

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg expire: out of memory");
}

static bool is_local(const char *loc)
{
    return loc[0] == '/' || strncmp(loc, "file:", 5) == 0;
}

/* The path of a local location (file:///p, file:/p or /p). */
static const char *local_of(const char *loc)
{
    return loc + (strncmp(loc, "file://", 7) == 0 ? 7 : strncmp(loc, "file:", 5) == 0 ? 5 : 0);
}

static int read_avro(struct ferry__iceberg_io *io, const char *uri, json_t **records,
                     struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    json_t *meta = NULL;
    *records = NULL;
    int rc = ferry__iceberg_io_read(is_local(uri) ? NULL : io, uri, &b, err);
    if (rc == FERRY_OK) rc = ferry__avro_read((const uint8_t *)b.data, b.len, &meta, records, err);
    json_decref(meta);
    ferry_buf_release(&b);
    return rc;
}

/* Every file a snapshot reaches: its manifest list, manifests, data and delete files. */
static int reach(struct ferry__iceberg_io *io, json_t *snap, json_t *set, struct ferry_error *err)
{
    const char *ml = json_string_value(json_object_get(snap, "manifest-list"));
    if (ml == NULL) return FERRY_OK;
    json_object_set_new(set, ml, json_true());
    json_t *list = NULL;
    int rc = read_avro(io, ml, &list, err);
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m)
    {
        if (rc != FERRY_OK) break;
        const char *mp = json_string_value(json_object_get(m, "manifest_path"));
        if (mp == NULL || json_object_get(set, mp)) continue;
        json_object_set_new(set, mp, json_true());
        json_t *entries = NULL;
        rc = read_avro(io, mp, &entries, err);
        size_t k;
        json_t *e;
        json_array_foreach(entries, k, e)
        {
            const char *fp = json_string_value(
                json_object_get(json_object_get(e, "data_file"), "file_path"));
            if (fp) json_object_set_new(set, fp, json_true());
        }
        json_decref(entries);
    }
    json_decref(list);
    return rc;
}

static bool is_ref(json_t *meta, json_int_t id)
{
    const char *k;
    json_t *r;
    json_object_foreach(json_object_get(meta, "refs"), k, r)
    {
        if (json_integer_value(json_object_get(r, "snapshot-id")) == id) return true;
    }
    json_t *cur = json_object_get(meta, "current-snapshot-id");
    return json_is_integer(cur) && json_integer_value(cur) == id;
}

static int ts_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static bool ours(const char *name)
{
    size_t n = strlen(name);
    return (n > 8 && !strcmp(name + n - 8, ".parquet")) || (n > 5 && !strcmp(name + n - 5, ".avro"));
}

struct sweep_ctx {
    struct ferry__iceberg_io *io;
    json_t *keep; /* URIs the kept snapshots reach */
    json_t *keep_meta; /* names of the current metadata file and of those its log lists */
    int version;       /* the current metadata file's number (-1: unknown, keep them all) */
    int64_t cutoff_ms;
    bool dry_run;
    struct ferry__iceberg_expire_result *res;
};

/* The metadata files the table needs, read after the expire's own commit: the current one
 * and those its metadata log lists (Iceberg keeps write.metadata.previous-versions-max of
 * them). Every other metadata file is an old version or the file of a lost commit race. */
static int current_metadata(struct ferry__iceberg_catalog *cat, const char *table,
                            struct sweep_ctx *c, struct ferry_error *err)
{
    json_t *meta = NULL;
    char *loc = NULL;
    int version = 0;
    int rc = ferry__iceberg_catalog_load(cat, table, &meta, &loc, &version, err);
    c->keep_meta = json_object();
    if (rc == FERRY_OK && c->keep_meta == NULL) rc = nomem(err);
    const char *base = loc ? strrchr(loc, '/') : NULL;
    if (rc == FERRY_OK && base) {
        c->version = ferry__iceberg_meta_version(base + 1);
        json_object_set_new(c->keep_meta, base + 1, json_true());
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(meta, "metadata-log"), i, e)
        {
            const char *f = json_string_value(json_object_get(e, "metadata-file"));
            const char *b = f ? strrchr(f, '/') : NULL;
            if (b) json_object_set_new(c->keep_meta, b + 1, json_true());
        }
    }
    json_decref(meta);
    ferry_free(loc);
    return rc;
}

/* One file under the table's data/ or metadata/: deleted when it is ours, no kept snapshot
 * reaches it and it is older than the cutoff. A local file that cannot be removed is
 * skipped (not counted); an S3 DELETE that fails stops the expire. */
static int sweep_one(const char *uri, const char *loc, const char *name, void *arg,
                     struct ferry_error *err)
{
    struct sweep_ctx *c = arg;
    int v = ferry__iceberg_meta_version(name);
    if (v >= 0) {
        /* a metadata file: not the current one, not in its log, and older than the current
         * one by its number, so a commit made since expire read the table is never touched */
        if (c->version < 0 || v >= c->version || json_object_get(c->keep_meta, name))
            return FERRY_OK;
    } else if (!ours(name) || json_object_get(c->keep, uri) || json_object_get(c->keep, loc)) {
        /* manifests name local files by file:// URI; a bare path counts the same */
        return FERRY_OK;
    }
    struct ferry__iceberg_io *io = is_local(loc) ? NULL : c->io;
    bool exists = false;
    int64_t size = 0, mtime = 0;
    int rc = ferry__iceberg_io_stat(io, loc, &exists, &size, &mtime, err);
    if (rc != FERRY_OK) return io ? rc : FERRY_OK;
    if (!exists || mtime >= c->cutoff_ms) return FERRY_OK;
    if (!c->dry_run) {
        rc = ferry__iceberg_io_remove(io, loc, err);
        if (rc != FERRY_OK && io == NULL) {
            ferry_error_clear(err);
            return FERRY_OK;
        }
        if (rc != FERRY_OK) return rc;
    }
    c->res->files_deleted++;
    c->res->bytes_deleted += size;
    if (c->res->on_file) c->res->on_file(c->res->ctx, loc);
    return FERRY_OK;
}

/* An unfinished multipart upload under data/: aborted when it is ours and was initiated
 * before the cutoff. A writer still running started its upload after the cutoff; an upload
 * whose time the store does not give is left alone. */
static int abort_one(const char *loc, const char *name, const char *upload_id,
                     int64_t initiated_ms, void *arg, struct ferry_error *err)
{
    struct sweep_ctx *c = arg;
    if (!ours(name) || initiated_ms < 0 || initiated_ms >= c->cutoff_ms) return FERRY_OK;
    if (!c->dry_run) {
        int rc = ferry__iceberg_io_abort_upload(c->io, loc, upload_id, err);
        if (rc != FERRY_OK) return rc;
    }
    c->res->uploads_aborted++;
    if (c->res->on_upload) c->res->on_upload(c->res->ctx, loc, upload_id);
    return FERRY_OK;
}

/* The unfinished multipart uploads of a killed writer cost storage until aborted; they are
 * only under data/ (metadata files go up in one PUT). location is in the client's bucket
 * (reachable() said so). */
static int abort_uploads(struct ferry__iceberg_io *io, const char *location, struct sweep_ctx *c,
                         struct ferry_error *err)
{
    char *dir = ferry_asprintf("%s/data", location);
    if (dir == NULL) return nomem(err);
    int rc = ferry__iceberg_io_uploads_each(io, dir, abort_one, c, err);
    c->res->uploads_listed = rc == FERRY_OK;
    if (rc == FERRY_EUNSUPPORTED) {
        ferry_log(FERRY_LOG_INFO,
                  "iceberg expire: cannot list the multipart uploads under %s/ (%s); "
                  "unfinished ones are left to the bucket's lifecycle rule",
                  dir, err ? err->message : "");
        ferry_error_clear(err);
        rc = FERRY_OK;
    } else if (rc != FERRY_OK) {
        ferry_error_prefix(err, "iceberg expire: multipart uploads under %s/", dir);
    }
    ferry_free(dir);
    return rc;
}

/* Whether this process can reach the table's files; why not in res->unreachable. */
static bool reachable(struct ferry__iceberg_io *io, const char *location,
                      struct ferry__iceberg_expire_result *res)
{
    if (location == NULL) {
        snprintf(res->unreachable, sizeof res->unreachable, "the table metadata has no location");
        return false;
    }
    if (is_local(location)) {
        struct stat st;
        if (stat(local_of(location), &st) == 0 && S_ISDIR(st.st_mode)) return true;
        snprintf(res->unreachable, sizeof res->unreachable,
                 "its location %s is not a folder on this machine", location);
        return false;
    }
    if (io != NULL && strncmp(location, "s3://", 5) == 0) {
        struct ferry__s3_client *c = ferry__iceberg_io_s3(io);
        const char *bucket = c ? ferry__s3_client_bucket(c) : "";
        size_t bl = strlen(bucket);
        if (bl > 0 && strncmp(location + 5, bucket, bl) == 0 && location[5 + bl] == '/') return true;
    }
    snprintf(res->unreachable, sizeof res->unreachable,
             "its location %.300s is not in storage this command can reach (give the warehouse's "
             "S3 connection with --pipeline)",
             location);
    return false;
}

int ferry__iceberg_expire(struct ferry__iceberg_catalog *cat, const char *table, int64_t older_than_ms,
                          int retain_last, bool dry_run, struct ferry__iceberg_expire_result *res,
                          struct ferry_error *err)
{
    int64_t cutoff = ferry_now_wall_us() / 1000 - older_than_ms;
    res->snapshots_expired = res->snapshots_kept = 0;
    res->files_deleted = res->bytes_deleted = 0;
    res->uploads_aborted = 0;
    res->uploads_listed = false;
    res->unreachable[0] = '\0';
    struct ferry__iceberg_io *io = ferry__iceberg_catalog_io(cat);
    json_t *keep = NULL;
    char *location = NULL;
    bool files = false;
    int rc = FERRY_OK;
    for (int tries = 0; tries < 20; tries++) {
        json_t *meta = NULL;
        char *loc = NULL;
        int version = 0;
        rc = ferry__iceberg_catalog_load(cat, table, &meta, &loc, &version, err);
        if (rc == FERRY_OK && meta == NULL)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "iceberg", "iceberg expire: no table %s",
                                 table);
        if (rc != FERRY_OK) {
            ferry_free(loc);
            json_decref(keep);
            ferry_free(location);
            return rc;
        }
        ferry_free(location);
        location = json_is_string(json_object_get(meta, "location"))
                       ? ferry_strdup(json_string_value(json_object_get(meta, "location")))
                       : NULL;
        files = reachable(io, location, res);
        json_t *snaps = json_object_get(meta, "snapshots");
        size_t n = json_array_size(snaps);
        int64_t *ts = ferry_calloc(n + 1, sizeof *ts);
        if (ts == NULL) {
            json_decref(meta);
            ferry_free(loc);
            json_decref(keep);
            ferry_free(location);
            return nomem(err);
        }
        for (size_t i = 0; i < n; i++)
            ts[i] = json_integer_value(json_object_get(json_array_get(snaps, i), "timestamp-ms"));
        qsort(ts, n, sizeof *ts, ts_desc);
        int64_t nth = retain_last > 0 && n > 0 ? ts[(size_t)retain_last < n ? (size_t)retain_last - 1 : n - 1]
                                               : INT64_MAX;
        ferry_free(ts);
        json_t *kept = json_array(), *ids = json_object();
        size_t i;
        json_t *s;
        json_array_foreach(snaps, i, s)
        {
            json_int_t id = json_integer_value(json_object_get(s, "snapshot-id"));
            int64_t t = json_integer_value(json_object_get(s, "timestamp-ms"));
            if (is_ref(meta, id) || t >= cutoff || t >= nth) {
                json_array_append(kept, s);
                char k[32];
                snprintf(k, sizeof k, "%" JSON_INTEGER_FORMAT, id);
                json_object_set_new(ids, k, json_true());
            }
        }
        res->snapshots_kept = (int)json_array_size(kept);
        res->snapshots_expired = (int)(n - json_array_size(kept));
        json_decref(keep);
        keep = json_object();
        json_array_foreach(kept, i, s)
        {
            if (rc == FERRY_OK && files) rc = reach(io, s, keep, err);
        }
        if (rc == FERRY_OK && res->snapshots_expired > 0 && !dry_run) {
            json_t *next = json_deep_copy(meta);
            json_object_set(next, "snapshots", kept);
            json_t *log = json_array();
            json_array_foreach(json_object_get(meta, "snapshot-log"), i, s)
            {
                char k[32];
                snprintf(k, sizeof k, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(json_object_get(s, "snapshot-id")));
                if (json_object_get(ids, k)) json_array_append(log, s);
            }
            json_object_set_new(next, "snapshot-log", log);
            if (ferry__iceberg_meta_log(
                    next, loc, json_integer_value(json_object_get(meta, "last-updated-ms")),
                    NULL) != FERRY_OK)
                rc = nomem(err);
            json_object_set_new(next, "last-updated-ms", json_integer(ferry_now_wall_us() / 1000));
            if (rc == FERRY_OK)
                rc = ferry__iceberg_catalog_commit(cat, table, loc, version + 1, next, NULL, err);
            json_decref(next);
        }
        json_decref(kept);
        json_decref(ids);
        json_decref(meta);
        ferry_free(loc);
        if (rc != FERRY_ECONFLICT) break;
        ferry_error_clear(err);
    }
    /* only the table's own data/ and metadata/ folders: a location a catalog hands out
     * is never swept wider than the layout ferry writes */
    static const char *const sub[] = {"data", "metadata"};
    struct sweep_ctx c = {io, keep, NULL, -1, cutoff, dry_run, res};
    if (rc == FERRY_OK && files) rc = current_metadata(cat, table, &c, err);
    for (int k = 0; rc == FERRY_OK && files && k < 2; k++) {
        size_t ln = strlen(location);
        while (ln > 1 && location[ln - 1] == '/') location[--ln] = '\0';
        char *dir = ferry_asprintf("%s/%s", is_local(location) ? local_of(location) : location,
                                   sub[k]);
        if (dir == NULL) rc = nomem(err);
        if (rc == FERRY_OK)
            rc = ferry__iceberg_io_walk(is_local(location) ? NULL : io, dir, sweep_one, &c, err);
        if (rc != FERRY_OK && dir) ferry_error_prefix(err, "iceberg expire: %s", dir);
        ferry_free(dir);
    }
    if (rc == FERRY_OK && files && !is_local(location)) rc = abort_uploads(io, location, &c, err);
    json_decref(c.keep_meta);
    json_decref(keep);
    ferry_free(location);
    return rc;
}
