/* connectors/iceberg/localfs.c - the local file system side of the iceberg sink: creating
 * folders, writing a file durably (temporary name, fsync, rename, fsync of the folder) and
 * reading one whole (a path or a file:// URI).
 *
 * Split from catalog.c so that io.c (which calls these for a local warehouse) and catalog.c
 * (which calls io.c) no longer call each other. Calls libc and core only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"

static int io_error(const char *what, const char *path, struct ferry_error *err)
{
    int e = errno;
    return ferry_error_set(err, e == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "iceberg",
                           "iceberg sink: %s %s: %s", what, path, strerror(e));
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg sink: out of memory");
}

int ferry__iceberg_mkdirs(const char *path, struct ferry_error *err)
{
    char *p = ferry_strdup(path);
    if (p == NULL) return nomem(err);
    int rc = FERRY_OK;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) rc = io_error("cannot create folder", p, err);
            *s = c;
            if (c == '\0' || rc != FERRY_OK) break;
        }
    }
    ferry_free(p);
    return rc;
}

int ferry__iceberg_fsync_dir(const char *path, struct ferry_error *err)
{
    int fd = open(path, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", path, err);
    int rc = fsync(fd) == 0 ? FERRY_OK : io_error("fsync", path, err);
    close(fd);
    return rc;
}

static int write_all(int fd, const void *p, size_t n, const char *path, struct ferry_error *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return io_error("cannot write", path, err);
        c += w;
        n -= (size_t)w;
    }
    return FERRY_OK;
}

/* Temporary file next to `path`, written and fsynced; *tmp gets its name. */
int ferry__iceberg_write_tmp(const char *path, const void *p, size_t n, char **tmp,
                             struct ferry_error *err)
{
    uint8_t r[6];
    ferry__iceberg_random(r, sizeof r);
    char *slash = strrchr(path, '/');
    *tmp = ferry_asprintf("%.*s/.tmp-%02x%02x%02x%02x%02x%02x-%s", (int)(slash - path), path, r[0],
                          r[1], r[2], r[3], r[4], r[5], slash + 1);
    if (*tmp == NULL) return nomem(err);
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("cannot create", *tmp, err);
    int rc = write_all(fd, p, n, *tmp, err);
    if (rc == FERRY_OK && fsync(fd) != 0) rc = io_error("fsync", *tmp, err);
    if (close(fd) != 0 && rc == FERRY_OK) rc = io_error("cannot close", *tmp, err);
    if (rc != FERRY_OK) unlink(*tmp);
    return rc;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? ferry_strndup(path, (size_t)(slash - path)) : ferry_strdup(".");
}

int ferry__iceberg_write_file(const char *path, const void *p, size_t n, struct ferry_error *err)
{
    char *tmp = NULL;
    int rc = ferry__iceberg_write_tmp(path, p, n, &tmp, err);
    if (rc == FERRY_OK && rename(tmp, path) != 0) {
        rc = io_error("cannot rename", tmp, err);
        unlink(tmp);
    }
    if (rc == FERRY_OK) {
        char *d = dir_of(path);
        rc = d ? ferry__iceberg_fsync_dir(d, err) : nomem(err);
        ferry_free(d);
    }
    ferry_free(tmp);
    return rc;
}

static const char *local_path(const char *path_or_uri)
{
    if (strncmp(path_or_uri, "file://", 7) == 0) return path_or_uri + 7;
    if (strncmp(path_or_uri, "file:", 5) == 0) return path_or_uri + 5;
    return path_or_uri;
}

int ferry__iceberg_read_file(const char *path_or_uri, struct ferry_buf *out, struct ferry_error *err)
{
    const char *path = local_path(path_or_uri);
    if (strstr(path_or_uri, "://") && strncmp(path_or_uri, "file://", 7) != 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: %s: only local files can be read", path_or_uri);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", path, err);
    out->len = 0;
    int rc = FERRY_OK;
    for (;;) {
        if (ferry_buf_reserve(out, 65536) != FERRY_OK) {
            rc = nomem(err);
            break;
        }
        ssize_t r = read(fd, out->data + out->len, out->cap - out->len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = io_error("cannot read", path, err);
            break;
        }
        if (r == 0) break;
        out->len += (size_t)r;
    }
    close(fd);
    if (rc == FERRY_OK) out->data[out->len] = '\0';
    return rc;
}

/* ---- open / close ----------------------------------------------------------------------- */
