/* formats/input.c - one input file as a stream of decompressed bytes.
 *
 * Owns the file descriptor and the zlib / zstd stream state. The compression is chosen from
 * the first bytes (gzip 1f 8b, zstd 28 b5 2f fd), so a misnamed file still reads right.
 * Gzip files made of several members (cat a.gz b.gz) read as their concatenation, as gzip
 * does; so do several zstd frames. Calls libc, zlib and libzstd; called by the files source
 * through the reader (text_read.c). Memory: two fixed 64 KiB buffers at most. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include "formats/text.h"

#define IN_CHUNK (64 * 1024)

enum kind { K_PLAIN, K_GZIP, K_ZSTD };

struct ferry__files_input {
    int fd;
    ferry__files_raw_fn raw_fn; /* the compressed bytes: a callback (s3), else read(fd) */
    void *raw_ctx;
    const char *who; /* "files source" or "s3 source": the errors' prefix */
    enum kind kind;
    char *path;
    uint8_t *raw; /* compressed bytes read from the file */
    size_t raw_len, raw_pos;
    bool raw_eof;
    z_stream z;
    bool z_init, z_end; /* z_end: the last member ended */
    ZSTD_DStream *zs;
    size_t zs_last; /* last ZSTD_decompressStream hint: 0 = a frame just ended */
};

static int io_error(const char *path, const char *what, struct ferry_error *err)
{
    int e = errno;
    return ferry_error_set(err, e == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "files",
                           "files source: %s: %s: %s", path, what, strerror(e));
}

/* Up to cap raw bytes into p; *n = 0 at the end. */
static int raw_read(struct ferry__files_input *in, uint8_t *p, size_t cap, size_t *n,
                    struct ferry_error *err)
{
    if (in->raw_fn != NULL) return in->raw_fn(in->raw_ctx, p, cap, n, err);
    ssize_t r;
    do
        r = read(in->fd, p, cap);
    while (r < 0 && errno == EINTR);
    if (r < 0) return io_error(in->path, "read", err);
    *n = (size_t)r;
    return FERRY_OK;
}

static int fill_raw(struct ferry__files_input *in, struct ferry_error *err)
{
    if (in->raw_pos < in->raw_len || in->raw_eof) return FERRY_OK;
    size_t n = 0;
    int rc = raw_read(in, in->raw, IN_CHUNK, &n, err);
    if (rc != FERRY_OK) return rc;
    in->raw_len = n;
    in->raw_pos = 0;
    if (n == 0) in->raw_eof = true;
    return FERRY_OK;
}

/* The input's first bytes are read to see the magic; then its decoder is set up. */
static int input_start(struct ferry__files_input *in, struct ferry_error *err)
{
    const char *path = in->path;
    while (!in->raw_eof && in->raw_len < 4) {
        size_t n = 0;
        int rc = raw_read(in, in->raw + in->raw_len, IN_CHUNK - in->raw_len, &n, err);
        if (rc != FERRY_OK) return rc;
        if (n == 0) in->raw_eof = true;
        in->raw_len += n;
    }
    const uint8_t *m = in->raw;
    if (in->raw_len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
        in->kind = K_GZIP;
        /* 15 + 32: a zlib or gzip header, detected. */
        if (inflateInit2(&in->z, 15 + 32) != Z_OK) {
            return ferry_error_set(err, FERRY_ENOMEM, "zlib", "files source: %s: inflateInit",
                                   path);
        }
        in->z_init = true;
    } else if (in->raw_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) {
        in->kind = K_ZSTD;
        in->zs = ZSTD_createDStream();
        if (in->zs == NULL || ZSTD_isError(ZSTD_initDStream(in->zs))) {
            return ferry_error_set(err, FERRY_ENOMEM, "zstd", "files source: %s: zstd init", path);
        }
    }
    return FERRY_OK;
}

int ferry__files_input_open(const char *path, struct ferry__files_input **out,
                            struct ferry_error *err)
{
    *out = NULL;
    struct ferry__files_input *in = ferry_calloc(1, sizeof *in);
    if (in == NULL) return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory");
    in->fd = -1;
    in->who = "files source";
    in->path = ferry_strdup(path);
    in->raw = ferry_malloc(IN_CHUNK);
    if (in->path == NULL || in->raw == NULL) {
        ferry__files_input_close(in);
        return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory");
    }
    in->fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = in->fd < 0 ? io_error(path, "open", err) : input_start(in, err);
    if (rc != FERRY_OK) {
        ferry__files_input_close(in);
        return rc;
    }
    *out = in;
    return FERRY_OK;
}

int ferry__files_input_open_fn(const char *name, ferry__files_raw_fn fn, void *ctx,
                               struct ferry__files_input **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry__files_input *in = ferry_calloc(1, sizeof *in);
    if (in == NULL) return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory");
    in->fd = -1;
    in->raw_fn = fn;
    in->raw_ctx = ctx;
    in->who = "s3 source";
    in->path = ferry_strdup(name);
    in->raw = ferry_malloc(IN_CHUNK);
    int rc = in->path == NULL || in->raw == NULL
                 ? ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory")
                 : input_start(in, err);
    if (rc != FERRY_OK) {
        ferry__files_input_close(in);
        return rc;
    }
    *out = in;
    return FERRY_OK;
}
static int read_gzip(struct ferry__files_input *in, void *p, size_t cap, size_t *n,
                     struct ferry_error *err)
{
    *n = 0;
    while (*n == 0) {
        int rc = fill_raw(in, err);
        if (rc != FERRY_OK) return rc;
        if (in->raw_pos == in->raw_len) {
            if (!in->z_end)
                return ferry_error_set(err, FERRY_EINVAL, "zlib", "%s: %s: truncated gzip stream",
                                       in->who, in->path);
            return FERRY_OK;
        }
        if (in->z_end) {
            /* Another member follows the one that ended. */
            inflateReset(&in->z);
            in->z_end = false;
        }
        in->z.next_in = in->raw + in->raw_pos;
        in->z.avail_in = (uInt)(in->raw_len - in->raw_pos);
        in->z.next_out = p;
        in->z.avail_out = (uInt)cap;
        int zrc = inflate(&in->z, Z_NO_FLUSH);
        in->raw_pos = in->raw_len - in->z.avail_in;
        *n = cap - in->z.avail_out;
        if (zrc == Z_STREAM_END)
            in->z_end = true;
        else if (zrc != Z_OK && zrc != Z_BUF_ERROR)
            return ferry_error_set(err, FERRY_EINVAL, "zlib", "%s: %s: gzip: %s", in->who, in->path,
                                   in->z.msg ? in->z.msg : "corrupt data");
    }
    return FERRY_OK;
}

static int read_zstd(struct ferry__files_input *in, void *p, size_t cap, size_t *n,
                     struct ferry_error *err)
{
    *n = 0;
    while (*n == 0) {
        int rc = fill_raw(in, err);
        if (rc != FERRY_OK) return rc;
        if (in->raw_pos == in->raw_len) {
            if (in->zs_last != 0)
                return ferry_error_set(err, FERRY_EINVAL, "zstd", "%s: %s: truncated zstd stream",
                                       in->who, in->path);
            return FERRY_OK;
        }
        ZSTD_inBuffer ib = {in->raw, in->raw_len, in->raw_pos};
        ZSTD_outBuffer ob = {p, cap, 0};
        size_t z = ZSTD_decompressStream(in->zs, &ob, &ib);
        if (ZSTD_isError(z))
            return ferry_error_set(err, FERRY_EINVAL, "zstd", "%s: %s: zstd: %s", in->who, in->path,
                                   ZSTD_getErrorName(z));
        in->zs_last = z;
        in->raw_pos = ib.pos;
        *n = ob.pos;
    }
    return FERRY_OK;
}

int ferry__files_input_read(struct ferry__files_input *in, void *p, size_t cap, size_t *n,
                            struct ferry_error *err)
{
    if (in->kind == K_GZIP) return read_gzip(in, p, cap, n, err);
    if (in->kind == K_ZSTD) return read_zstd(in, p, cap, n, err);
    *n = 0;
    if (in->raw_pos < in->raw_len) {
        size_t k = in->raw_len - in->raw_pos;
        if (k > cap) k = cap;
        memcpy(p, in->raw + in->raw_pos, k);
        in->raw_pos += k;
        *n = k;
        return FERRY_OK;
    }
    if (in->raw_eof) return FERRY_OK;
    int rc = raw_read(in, p, cap, n, err);
    if (rc == FERRY_OK && *n == 0) in->raw_eof = true;
    return rc;
}

const char *ferry__files_input_kind(const struct ferry__files_input *in)
{
    return in->kind == K_GZIP ? "gzip" : in->kind == K_ZSTD ? "zstd" : "plain";
}

void ferry__files_input_close(struct ferry__files_input *in)
{
    if (in == NULL) return;
    if (in->z_init) inflateEnd(&in->z);
    ZSTD_freeDStream(in->zs);
    if (in->fd >= 0) close(in->fd);
    ferry_free(in->raw);
    ferry_free(in->path);
    ferry_free(in);
}
