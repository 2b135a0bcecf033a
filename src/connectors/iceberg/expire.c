/* connectors/iceberg/expire.c - `ferry iceberg expire`: drops old snapshots from a table's
 * metadata and deletes the files no remaining snapshot references.
 *
 * A snapshot is kept when it is the current one, when a ref names it, when it is younger
 * than the cutoff, or when it is among the `retain_last` newest. The metadata without the
 * others is committed through the catalog like any commit (a conflict re-reads and
 * retries). Then the table's folder is walked: a manifest list, manifest, data or delete
 * file that no kept snapshot reaches and whose modification time is before the cutoff is
 * deleted. The age test keeps the files of a writer still running (written but not yet
 * committed), and covers the orphans of runs that died. Metadata JSON files stay (the
 * metadata log names them).
 *
 * Owns nothing beyond one call. Calls catalog.c, avro.c, jansson, libc. Called by the CLI
 * (src/cli/cmd_iceberg.c) and tests. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg expire: out of memory");
}

static int read_avro(const char *uri, json_t **records, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    json_t *meta = NULL;
    *records = NULL;
    int rc = ferry__iceberg_read_file(uri, &b, err);
    if (rc == FERRY_OK) rc = ferry__avro_read((const uint8_t *)b.data, b.len, &meta, records, err);
    json_decref(meta);
    ferry_buf_release(&b);
    return rc;
}

/* Every file a snapshot reaches: its manifest list, manifests, data and delete files. */
static int reach(json_t *snap, json_t *set, struct ferry_error *err)
{
    const char *ml = json_string_value(json_object_get(snap, "manifest-list"));
    if (ml == NULL) return FERRY_OK;
    json_object_set_new(set, ml, json_true());
    json_t *list = NULL;
    int rc = read_avro(ml, &list, err);
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m)
    {
        if (rc != FERRY_OK) break;
        const char *mp = json_string_value(json_object_get(m, "manifest_path"));
        if (mp == NULL || json_object_get(set, mp)) continue;
        json_object_set_new(set, mp, json_true());
        json_t *entries = NULL;
        rc = read_avro(mp, &entries, err);
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

static void sweep(const char *dir, int64_t cutoff_ms, json_t *keep, bool dry_run,
                  struct ferry__iceberg_expire_result *res, int depth)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while (depth < 16 && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = ferry_asprintf("%s/%s", dir, e->d_name);
        if (p == NULL) break;
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            sweep(p, cutoff_ms, keep, dry_run, res, depth + 1);
        } else if (stat(p, &st) == 0) {
            size_t n = strlen(e->d_name);
            bool ours = (n > 8 && !strcmp(e->d_name + n - 8, ".parquet")) ||
                        (n > 5 && !strcmp(e->d_name + n - 5, ".avro"));
            int64_t mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
            char *uri = ferry_asprintf("file://%s", p);
            if (ours && uri && json_object_get(keep, uri) == NULL && mtime_ms < cutoff_ms) {
                if (dry_run || unlink(p) == 0) {
                    res->files_deleted++;
                    res->bytes_deleted += (int64_t)st.st_size;
                    if (res->on_file) res->on_file(res->ctx, p);
                }
            }
            ferry_free(uri);
        }
        ferry_free(p);
    }
    closedir(d);
}

int ferry__iceberg_expire(struct ferry__iceberg_catalog *cat, const char *table, int64_t older_than_ms,
                          int retain_last, bool dry_run, struct ferry__iceberg_expire_result *res,
                          struct ferry_error *err)
{
    int64_t cutoff = ferry_now_wall_us() / 1000 - older_than_ms;
    res->snapshots_expired = res->snapshots_kept = 0;
    res->files_deleted = res->bytes_deleted = 0;
    json_t *keep = NULL;
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
            return rc;
        }
        json_t *snaps = json_object_get(meta, "snapshots");
        size_t n = json_array_size(snaps);
        int64_t *ts = ferry_calloc(n + 1, sizeof *ts);
        if (ts == NULL) {
            json_decref(meta);
            ferry_free(loc);
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
            if (rc == FERRY_OK) rc = reach(s, keep, err);
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
            json_t *mlog = json_object_get(next, "metadata-log");
            if (json_is_array(mlog))
                json_array_append_new(mlog, json_pack("{s:s,s:O}", "metadata-file", loc,
                                                      "timestamp-ms",
                                                      json_object_get(meta, "last-updated-ms")));
            json_object_set_new(next, "last-updated-ms", json_integer(ferry_now_wall_us() / 1000));
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
    if (rc == FERRY_OK) {
        char *dir = ferry__iceberg_catalog_table_dir(cat, table);
        if (dir == NULL) {
            rc = nomem(err);
        } else {
            sweep(dir, cutoff, keep, dry_run, res, 0);
            ferry_free(dir);
        }
    }
    json_decref(keep);
    return rc;
}
