/* connectors/iceberg/io.c - where the files of an Iceberg warehouse live: a local folder or
 * an S3 prefix (`warehouse: s3://bucket/path`).
 *
 * A location is what the sink builds paths from: a local absolute path, or the object's URI
 * s3://bucket/key. Metadata names files by URI (file:// + the path, or the s3:// URI itself),
 * and every read accepts either form. Local writes are durable (temporary file, fsync, rename,
 * fsync of the folder); on S3 a PUT is durable when it answers, a data file is uploaded in
 * one PUT or, past `multipart_chunk` (8 MiB), as a multipart upload so that an open file
 * holds at most one chunk in memory. `io == NULL` means the local disk everywhere.
 *
 * Owns the S3 client of the warehouse. Calls catalog.c's local file helpers, s3_client.c
 * (requests, signing, retries, the listing of unfinished multipart uploads), libc. Called by
 * iceberg_sink.c and catalog.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"
#include "objstore/s3_client.h"
#include "ferry/failpoint.h"

struct ferry__iceberg_io {
    struct ferry__s3_client *s3;
    char *bucket;
    size_t chunk; /* multipart part size (S3 wants 5 MiB at least) */
};

struct ferry__iceberg_wfile {
    struct ferry__iceberg_io *io;
    char *loc;
    int fd;                  /* local */
    const char *key;         /* S3: into loc */
    struct ferry_buf pending; /* S3: bytes not uploaded yet */
    char *upload_id;         /* S3: multipart upload in progress */
    int part_no;
    struct ferry_buf parts;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg sink: out of memory");
}

static int io_error(const char *what, const char *path, struct ferry_error *err)
{
    int e = errno;
    return ferry_error_set(err, e == ENOSPC ? FERRY_ENOSPC : e == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO,
                           "iceberg", "iceberg: %s %s: %s", what, path, strerror(e));
}

int ferry__iceberg_io_open_s3(struct ferry__s3_client *s3, size_t chunk,
                              struct ferry__iceberg_io **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry__iceberg_io *io = ferry_calloc(1, sizeof *io);
    if (io == NULL) {
        ferry__s3_client_close(s3);
        return nomem(err);
    }
    io->s3 = s3;
    io->chunk = chunk < ((size_t)5 << 20) ? (size_t)8 << 20 : chunk;
    io->bucket = ferry_strdup(ferry__s3_client_bucket(s3));
    if (io->bucket == NULL) {
        ferry__iceberg_io_close(io);
        return nomem(err);
    }
    *out = io;
    return FERRY_OK;
}

void ferry__iceberg_io_close(struct ferry__iceberg_io *io)
{
    if (io == NULL) return;
    ferry__s3_client_close(io->s3);
    ferry_free(io->bucket);
    ferry_free(io);
}

bool ferry__iceberg_io_remote(const struct ferry__iceberg_io *io)
{
    return io != NULL;
}

struct ferry__s3_client *ferry__iceberg_io_s3(struct ferry__iceberg_io *io)
{
    return io ? io->s3 : NULL;
}

char *ferry__iceberg_io_uri(const struct ferry__iceberg_io *io, const char *loc)
{
    if (io || strncmp(loc, "file:", 5) == 0) return ferry_strdup(loc);
    return ferry_asprintf("file://%s", loc);
}

/* The object key of an s3://bucket/key location of this warehouse's bucket. */
static int s3_key(const struct ferry__iceberg_io *io, const char *loc, const char **key,
                  struct ferry_error *err)
{
    size_t bl = strlen(io->bucket);
    if (strncmp(loc, "s3://", 5) != 0 || strncmp(loc + 5, io->bucket, bl) != 0 ||
        loc[5 + bl] != '/')
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: %s is not in the warehouse's bucket s3://%s", loc,
                               io->bucket);
    *key = loc + 5 + bl + 1;
    return FERRY_OK;
}

static const char *local_path(const char *loc)
{
    if (strncmp(loc, "file://", 7) == 0) return loc + 7;
    if (strncmp(loc, "file:", 5) == 0) return loc + 5;
    return loc;
}

int ferry__iceberg_io_write(struct ferry__iceberg_io *io, const char *loc, const void *p, size_t n,
                            struct ferry_error *err)
{
    if (io == NULL) return ferry__iceberg_write_file(local_path(loc), p, n, err);
    const char *key = NULL;
    int rc = s3_key(io, loc, &key, err);
    const char *ct = strstr(key, ".json") ? "application/json" : "application/octet-stream";
    return rc == FERRY_OK ? ferry__s3_put(io->s3, key, p, n, ct, err) : rc;
}

int ferry__iceberg_io_write_new(struct ferry__iceberg_io *io, const char *loc, const void *p,
                                size_t n, struct ferry_error *err)
{
    if (io == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: %s: exclusive creation is the catalog's on local disks",
                               loc);
    const char *key = NULL;
    int rc = s3_key(io, loc, &key, err);
    return rc == FERRY_OK ? ferry__s3_put_new(io->s3, key, p, n, "application/json", err) : rc;
}

int ferry__iceberg_io_read(struct ferry__iceberg_io *io, const char *loc, struct ferry_buf *out,
                           struct ferry_error *err)
{
    if (strncmp(loc, "s3://", 5) == 0 || strncmp(loc, "s3a://", 6) == 0) {
        if (io == NULL)
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                   "iceberg sink: %s: an s3:// file in a local warehouse", loc);
        const char *key = NULL;
        int rc = s3_key(io, loc, &key, err);
        if (rc == FERRY_OK) {
            out->len = 0;
            rc = ferry__s3_get(io->s3, key, out, err);
            if (rc == FERRY_ENOTFOUND)
                rc = ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                                     "iceberg sink: %s does not exist", loc);
        }
        return rc;
    }
    struct stat st;
    if (stat(local_path(loc), &st) != 0) return io_error("cannot open", local_path(loc), err);
    return ferry__iceberg_read_file(loc, out, err);
}

int ferry__iceberg_io_read_range(struct ferry__iceberg_io *io, const char *loc, uint64_t off,
                                 size_t n, void *p, struct ferry_error *err)
{
    if (strncmp(loc, "s3://", 5) == 0) {
        if (io == NULL)
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                   "iceberg: %s: an s3:// file in a local warehouse", loc);
        const char *key = NULL;
        int rc = s3_key(io, loc, &key, err);
        if (rc != FERRY_OK) return rc;
        char range[64];
        snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)off,
                 (unsigned long long)(off + n - 1));
        struct ferry_buf resp;
        ferry_buf_init(&resp, 0);
        struct ferry__s3_req q = {.method = "GET", .key = key, .query = "", .range = range};
        rc = ferry__s3_call(io->s3, &q, false, &resp, err);
        if (rc == FERRY_ENOTFOUND)
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "iceberg", "iceberg: %s does not exist", loc);
        else if (rc == FERRY_OK && resp.len != n)
            rc = ferry_error_set(err, FERRY_ESOURCE, "iceberg",
                                 "iceberg: %s: %zu bytes at %llu asked, %zu came (the file is "
                                 "shorter than its manifest says?)",
                                 loc, n, (unsigned long long)off, resp.len);
        if (rc == FERRY_OK) memcpy(p, resp.data, n);
        ferry_buf_release(&resp);
        return rc;
    }
    const char *path = local_path(loc);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", path, err);
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (uint8_t *)p + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int rc = k < 0 ? io_error("cannot read", path, err)
                           : ferry_error_set(err, FERRY_ESOURCE, "iceberg",
                                             "iceberg: %s ends before byte %llu (truncated?)",
                                             path, (unsigned long long)(off + n));
            close(fd);
            return rc;
        }
        done += (size_t)k;
    }
    close(fd);
    return FERRY_OK;
}

int ferry__iceberg_io_exists(struct ferry__iceberg_io *io, const char *loc, bool *yes,
                             struct ferry_error *err)
{
    return ferry__iceberg_io_stat(io, loc, yes, NULL, NULL, err);
}

int ferry__iceberg_io_stat(struct ferry__iceberg_io *io, const char *loc, bool *exists,
                           int64_t *size, int64_t *mtime_ms, struct ferry_error *err)
{
    int64_t unused_size, unused_mtime;
    bool want_mtime = mtime_ms != NULL;
    if (size == NULL) size = &unused_size;
    if (mtime_ms == NULL) mtime_ms = &unused_mtime;
    *exists = false;
    *size = *mtime_ms = 0;
    if (io == NULL) {
        struct stat st;
        if (stat(local_path(loc), &st) != 0)
            return errno == ENOENT ? FERRY_OK : io_error("cannot stat", local_path(loc), err);
        *exists = true;
        *size = (int64_t)st.st_size;
        *mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        return FERRY_OK;
    }
    const char *key = NULL;
    int rc = s3_key(io, loc, &key, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf resp;
    ferry_buf_init(&resp, 0);
    struct ferry__s3_req q = {.method = "HEAD", .key = key, .query = ""};
    rc = ferry__s3_call(io->s3, &q, true, &resp, err);
    ferry_buf_release(&resp);
    if (rc == FERRY_ENOTFOUND) return FERRY_OK;
    if (rc != FERRY_OK) return rc;
    *exists = true;
    char h[128];
    if (ferry__s3_last_header(io->s3, "Content-Length", h, sizeof h)) *size = strtoll(h, NULL, 10);
    if (!want_mtime) return FERRY_OK;
    /* RFC 7231 IMF-fixdate, always GMT: "Wed, 12 Oct 2009 17:50:00 GMT" */
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = NULL;
    if (ferry__s3_last_header(io->s3, "Last-Modified", h, sizeof h))
        end = strptime(h, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == NULL)
        return ferry_error_set(err, FERRY_ESINK, "iceberg",
                               "iceberg: %s: the store gave no readable Last-Modified", loc);
    *mtime_ms = (int64_t)timegm(&tm) * 1000;
    return FERRY_OK;
}

int ferry__iceberg_io_remove(struct ferry__iceberg_io *io, const char *loc, struct ferry_error *err)
{
    if (io == NULL) {
        if (unlink(local_path(loc)) != 0 && errno != ENOENT)
            return io_error("cannot remove", local_path(loc), err);
        return FERRY_OK;
    }
    const char *key = NULL;
    int rc = s3_key(io, loc, &key, err);
    return rc == FERRY_OK ? ferry__s3_delete(io->s3, key, err) : rc;
}

int ferry__iceberg_io_mkdirs(struct ferry__iceberg_io *io, const char *loc, struct ferry_error *err)
{
    return io ? FERRY_OK : ferry__iceberg_mkdirs(local_path(loc), err); /* S3 has no folders */
}

void ferry__iceberg_io_sync_dir(struct ferry__iceberg_io *io, const char *loc)
{
    if (io) return;
    int fd = open(local_path(loc), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int ferry__iceberg_io_list(struct ferry__iceberg_io *io, const char *dir, json_t *out,
                           struct ferry_error *err)
{
    if (io == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: listing %s: local folders are read directly", dir);
    const char *key = NULL;
    int rc = s3_key(io, dir, &key, err);
    char *prefix = rc == FERRY_OK ? ferry_asprintf("%s/", key) : NULL;
    json_t *keys = json_array();
    if (rc == FERRY_OK && (prefix == NULL || keys == NULL)) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry__s3_list(io->s3, prefix, keys, err);
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        if (rc != FERRY_OK) break;
        char *loc = ferry_asprintf("s3://%s/%s", io->bucket, json_string_value(k));
        if (loc == NULL || json_array_append_new(out, json_string(loc)) != 0) rc = nomem(err);
        ferry_free(loc);
    }
    json_decref(keys);
    ferry_free(prefix);
    return rc;
}

struct uploads_ctx {
    const struct ferry__iceberg_io *io;
    ferry__iceberg_upload_fn each;
    void *arg;
};

static int upload_one(const char *key, const char *upload_id, int64_t initiated_ms, void *arg,
                      struct ferry_error *err)
{
    const struct uploads_ctx *c = arg;
    char *loc = ferry_asprintf("s3://%s/%s", c->io->bucket, key);
    if (loc == NULL) return nomem(err);
    const char *base = strrchr(key, '/');
    int rc = c->each(loc, base ? base + 1 : key, upload_id, initiated_ms, c->arg, err);
    ferry_free(loc);
    return rc;
}

int ferry__iceberg_io_uploads_each(struct ferry__iceberg_io *io, const char *dir,
                                   ferry__iceberg_upload_fn each, void *arg,
                                   struct ferry_error *err)
{
    if (io == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: %s: a local folder has no multipart uploads", dir);
    const char *key = NULL;
    int rc = s3_key(io, dir, &key, err);
    char *prefix = rc == FERRY_OK ? ferry_asprintf("%s/", key) : NULL;
    if (rc == FERRY_OK && prefix == NULL) rc = nomem(err);
    struct uploads_ctx c = {io, each, arg};
    if (rc == FERRY_OK) rc = ferry__s3_list_uploads_each(io->s3, prefix, upload_one, &c, err);
    ferry_free(prefix);
    return rc;
}

int ferry__iceberg_io_abort_upload(struct ferry__iceberg_io *io, const char *loc,
                                   const char *upload_id, struct ferry_error *err)
{
    const char *key = NULL;
    int rc = io ? s3_key(io, loc, &key, err)
                : ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                  "iceberg sink: %s: a local file has no multipart upload", loc);
    return rc == FERRY_OK ? ferry__s3_multipart_abort(io->s3, key, upload_id, err) : rc;
}

static int walk_local(const char *dir, ferry__iceberg_walk_fn each, void *arg, int depth,
                      struct ferry_error *err)
{
    DIR *d = depth <= 16 ? opendir(dir) : NULL;
    if (d == NULL) return FERRY_OK;
    int rc = FERRY_OK;
    struct dirent *e;
    while (rc == FERRY_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char *p = ferry_asprintf("%s/%s", dir, e->d_name);
        char *uri = p ? ferry_asprintf("file://%s", p) : NULL;
        struct stat st;
        if (uri == NULL)
            rc = nomem(err);
        else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rc = walk_local(p, each, arg, depth + 1, err);
        else
            rc = each(uri, p, e->d_name, arg, err);
        ferry_free(uri);
        ferry_free(p);
    }
    closedir(d);
    return rc;
}

int ferry__iceberg_io_walk(struct ferry__iceberg_io *io, const char *dir, ferry__iceberg_walk_fn each,
                           void *arg, struct ferry_error *err)
{
    if (io == NULL) return walk_local(local_path(dir), each, arg, 0, err);
    json_t *locs = json_array();
    int rc = locs ? ferry__iceberg_io_list(io, dir, locs, err) : nomem(err);
    size_t i;
    json_t *l;
    json_array_foreach(locs, i, l)
    {
        if (rc != FERRY_OK) break;
        const char *loc = json_string_value(l), *base = strrchr(loc, '/');
        rc = each(loc, loc, base ? base + 1 : loc, arg, err);
    }
    json_decref(locs);
    return rc;
}

/* ---- streamed files (data and delete files) ----------------------------------------------- */

int ferry__iceberg_wfile_open(struct ferry__iceberg_io *io, const char *loc,
                              struct ferry__iceberg_wfile **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry__iceberg_wfile *w = ferry_calloc(1, sizeof *w);
    if (w == NULL) return nomem(err);
    w->io = io;
    w->fd = -1;
    w->loc = ferry_strdup(loc);
    ferry_buf_init(&w->pending, 0);
    ferry_buf_init(&w->parts, 0);
    if (w->loc == NULL) {
        ferry__iceberg_wfile_free(w);
        return nomem(err);
    }
    int rc = FERRY_OK;
    if (io == NULL) {
        w->fd = open(local_path(loc), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd < 0) rc = io_error("cannot create", local_path(loc), err);
    } else {
        rc = s3_key(io, w->loc, &w->key, err);
    }
    if (rc != FERRY_OK) {
        ferry__iceberg_wfile_free(w);
        return rc;
    }
    *out = w;
    return FERRY_OK;
}

static int upload_part(struct ferry__iceberg_wfile *w, struct ferry_error *err)
{
    int rc = w->upload_id ? FERRY_OK
                          : ferry__s3_multipart_create(w->io->s3, w->key, &w->upload_id, err);
    if (rc == FERRY_OK)
        rc = ferry__s3_multipart_part(w->io->s3, w->key, w->upload_id, w->part_no + 1,
                                      w->pending.data, w->pending.len, &w->parts, err);
    if (rc == FERRY_OK) {
        w->part_no++;
        ferry_buf_reset(&w->pending);
        /* tests: a crash here leaves an unfinished multipart upload for expire to abort */
        rc = ferry_failpoint_check("iceberg_upload_part", err);
    }
    return rc;
}

int ferry__iceberg_wfile_write(struct ferry__iceberg_wfile *w, const void *p, size_t n,
                               struct ferry_error *err)
{
    if (w->io == NULL) {
        const char *c = p;
        while (n > 0) {
            ssize_t r = write(w->fd, c, n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return io_error("cannot write", w->loc, err);
            c += r;
            n -= (size_t)r;
        }
        return FERRY_OK;
    }
    if (ferry_buf_append(&w->pending, p, n) != FERRY_OK) return nomem(err);
    return w->pending.len >= w->io->chunk ? upload_part(w, err) : FERRY_OK;
}

int ferry__iceberg_wfile_finish(struct ferry__iceberg_wfile *w, struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (w->io == NULL) {
        if (fsync(w->fd) != 0) rc = io_error("fsync", w->loc, err);
        if (close(w->fd) != 0 && rc == FERRY_OK) rc = io_error("cannot close", w->loc, err);
        w->fd = -1;
        return rc;
    }
    if (w->upload_id == NULL)
        return ferry__s3_put(w->io->s3, w->key, w->pending.data ? w->pending.data : "",
                             w->pending.len, "application/octet-stream", err);
    if (w->pending.len > 0) rc = upload_part(w, err);
    if (rc == FERRY_OK) rc = ferry__s3_multipart_complete(w->io->s3, w->key, w->upload_id, &w->parts, err);
    if (rc == FERRY_OK) {
        ferry_free(w->upload_id);
        w->upload_id = NULL;
    }
    return rc;
}

void ferry__iceberg_wfile_free(struct ferry__iceberg_wfile *w)
{
    if (w == NULL) return;
    if (w->fd >= 0) close(w->fd);
    if (w->upload_id) {
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        if (ferry__s3_multipart_abort(w->io->s3, w->key, w->upload_id, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "iceberg sink: upload of %s not aborted: %s", w->loc,
                      e.message);
    }
    ferry_free(w->upload_id);
    ferry_free(w->loc);
    ferry_buf_release(&w->pending);
    ferry_buf_release(&w->parts);
    ferry_free(w);
}
