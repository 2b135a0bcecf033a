/* connectors/files/files_sink.c - the `files` sink: part files in a local folder, published
 * by a per-run manifest at commit.
 *
 * Layout under `path`:
 *     <table>/part-<run>-<attempt>-<n>.<ext>     data, one file per resource per part
 *     _runs/<run>/_manifest.json                 every file of the run: rows, bytes, CRC32-C
 * A part is written as <table>/.tmp-<run>-<attempt>-<n>.<ext>; commit() fsyncs every part,
 * renames it to its final name, fsyncs the folders, then writes the manifest the same way
 * (temporary name, fsync, rename, fsync of its folder). The manifest is the only thing that
 * makes a run's files part of the data set: a reader lists `_runs/<run>/_manifest.json` files and
 * reads the files they name. A crash before the manifest's rename leaves temporary files or part
 * files no manifest names; the next attempt of the same run removes both (begin), abort()
 * removes the temporary ones. Durability at_commit; encoded integrity: the CRC32-C of the
 * exact bytes each apply() wrote. upsert and merge are refused by the policy through
 * capabilities().
 *
 * write: replace. `<path>/_manifest.json`, the data set manifest, lists every file of every
 * table; once it exists readers follow it alone. A replace commit renames its parts (still
 * unlisted), then writes the data set manifest through a temporary name and one rename (the
 * switch: the run's tables now list only the run's files, other tables are kept), then the
 * run manifest, and only then removes the replaced tables' unlisted parts and the run
 * manifests that list no live file. Before the switch nothing changed; after it the parts
 * are published even if the commit then fails (abort keeps them). Append commits add their
 * files to the data set manifest when one exists.
 *
 * Owns the part files and their descriptors, the format writer states, the manifest. Calls
 * libc, the format writers (text_write.c, parquet_format.c), formats/lake.c (format
 * options, session state, manifest lists and the publish order it shares with the s3 sink),
 * crc32c, digest, jansson (reading an earlier manifest of the same run). Registered in
 * connectors/registry.c; driven by the runner on one thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "formats/text.h"
#include "formats/lake.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"
#include "ferry/failpoint.h"

static const char *const sink_tuning_keys[] = {"part_rows", "part_bytes", NULL};

struct part {
    char *tmp;   /* full temporary path (NULL once renamed) */
    char *final; /* full final path */
    char *rel;   /* final path relative to `path`, for the manifest */
    char *table;
    int64_t rows, bytes;
    uint32_t crc;
};

struct target {
    bool used;
    char *table;
    char *dir;
    struct ferry_schema *schema;
    void *fw;   /* format writer state of the open part, or NULL */
    int fd;     /* open part, or -1 */
    int part;   /* index in sink.parts of the open part, or -1 */
    int next_n; /* part number */
    uint32_t apply_crc;
    int64_t apply_bytes;
    struct sink *s; /* for the out callback */
};

struct sink {
    char *path;
    struct ferry__lake lk; /* format, run, manifests (formats/lake.h) */
    struct target *t;
    int n_t;
    struct part *parts;
    int n_parts;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "files", "files sink: out of memory");
}

static int io_error(const char *what, const char *path, struct ferry_error *err)
{
    int e = errno;
    return ferry_error_set(err, e == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "files",
                           "files sink: %s %s: %s", what, path, strerror(e));
}

static int mkdirs(const char *path, struct ferry_error *err)
{
    char *p = ferry_strdup(path);
    if (p == NULL) return nomem(err);
    int rc = FERRY_OK;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                rc = io_error("cannot create folder", p, err);
            *s = c;
            if (c == '\0' || rc != FERRY_OK) break;
        }
    }
    ferry_free(p);
    return rc;
}

/* fsync(2), or EIO when the `files_fsync` failpoint says error (tests of a failing disk). */
static int sync_fd(int fd)
{
    if (FERRY_FAILPOINT("files_fsync") == FERRY_FP_ERROR) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static int fsync_path(const char *path, bool dir, struct ferry_error *err)
{
    int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", path, err);
    int rc = FERRY_OK;
    if (sync_fd(fd) != 0) rc = io_error("fsync", path, err);
    close(fd);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------------ */

static void part_free(struct part *p)
{
    ferry_free(p->tmp);
    ferry_free(p->final);
    ferry_free(p->rel);
    ferry_free(p->table);
}

/* Closes the open parts and removes every temporary file of the session; with `unpublish`
 * also the parts renamed by a commit that failed before its manifest. */
static void discard(struct sink *s, bool unpublish)
{
    for (int i = 0; i < s->n_t; i++) {
        struct target *t = &s->t[i];
        if (s->lk.fmt && t->fw) s->lk.fmt->free(t->fw);
        t->fw = NULL;
        if (t->fd >= 0) close(t->fd);
        t->fd = -1;
        t->part = -1;
    }
    for (int i = 0; i < s->n_parts; i++) {
        if (s->parts[i].tmp)
            unlink(s->parts[i].tmp);
        else if (unpublish && !s->lk.published && s->parts[i].final)
            unlink(s->parts[i].final);
        part_free(&s->parts[i]);
    }
    ferry_free(s->parts);
    s->parts = NULL;
    s->n_parts = 0;
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    discard(s, s->lk.session);
    for (int i = 0; i < s->n_t; i++) {
        ferry_free(s->t[i].table);
        ferry_free(s->t[i].dir);
        ferry_schema_unref(s->t[i].schema);
    }
    ferry_free(s->t);
    ferry__lake_release(&s->lk);
    ferry_free(s->path);
    ferry_free(s);
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *path = NULL;
    int rc = ferry_cfg_str(cfg, "path", true, &path, err);
    if (rc != FERRY_OK) return rc;
    if (path[0] == '\0')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "path"), "must not be empty");
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    rc = ferry__lake_open(&s->lk, cfg, "files sink", "files", "files", "path", err);
    if (rc == FERRY_OK) {
        s->path = ferry_strdup(path);
        if (s->path == NULL) rc = nomem(err);
    }
    if (rc != FERRY_OK) {
        sink_close(s);
        return rc;
    }
    size_t pl = strlen(s->path);
    while (pl > 1 && s->path[pl - 1] == '/')
        s->path[--pl] = '\0';
    *ctx = s;
    return FERRY_OK;
}

/* ---- prepare / begin ---------------------------------------------------------------------- */

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    const char *table = target->table ? target->table : target->resource;
    int rc = ferry__lake_check_target(&s->lk, target, table, s->path, err);
    if (rc != FERRY_OK) return rc;
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return nomem(err);
        for (int i = s->n_t; i <= target->index; i++) {
            memset(&nt[i], 0, sizeof nt[i]);
            nt[i].fd = -1;
            nt[i].part = -1;
        }
        s->t = nt;
        s->n_t = target->index + 1;
    }
    struct target *t = &s->t[target->index];
    if (t->used) return FERRY_OK;
    t->table = ferry_strdup(table);
    t->dir = ferry_asprintf("%s/%s", s->path, table);
    if (t->table == NULL || t->dir == NULL) return nomem(err);
    rc = mkdirs(t->dir, err);
    if (rc != FERRY_OK) return rc;
    t->schema = ferry_schema_ref(target->schema);
    t->used = true;
    return FERRY_OK;
}

static char *manifest_dir(const struct sink *s)
{
    return ferry_asprintf("%s/_runs/%" PRId64, s->path, s->lk.run_id);
}

/* The "files" of the manifest at m (owned path), or NULL when m does not exist. */
static int load_files(char *m, json_t **out, struct ferry_error *err)
{
    *out = NULL;
    if (m == NULL) return nomem(err);
    struct stat st;
    int rc = FERRY_OK;
    if (stat(m, &st) == 0) {
        json_error_t je;
        json_t *root = json_load_file(m, 0, &je);
        json_t *files = json_object_get(root, "files");
        if (!json_is_array(files))
            rc = ferry_error_set(err, FERRY_ESINK, "files",
                                 "files sink: %s: not a manifest (%s, line %d)", m, je.text,
                                 je.line);
        else
            *out = json_incref(files);
        json_decref(root);
    }
    ferry_free(m);
    return rc;
}

/* Files of earlier commits of this run, from its manifest (a paused run commits more
 * than once), and the data set manifest, if any. */
static int load_earlier(struct sink *s, struct ferry_error *err)
{
    int rc =
        load_files(ferry_asprintf("%s/_runs/%" PRId64 "/_manifest.json", s->path, s->lk.run_id),
                   &s->lk.earlier, err);
    if (rc == FERRY_OK)
        rc = load_files(ferry_asprintf("%s/_manifest.json", s->path), &s->lk.dataset, err);
    return rc;
}

/* Leftovers of earlier attempts of this run: temporary files, and part files that a crash
 * left renamed but unlisted (the manifest never got written). */
static int sweep(struct sink *s, const struct target *t, struct ferry_error *err)
{
    char tmp_prefix[48], part_prefix[48];
    snprintf(tmp_prefix, sizeof tmp_prefix, ".tmp-%" PRId64 "-", s->lk.run_id);
    snprintf(part_prefix, sizeof part_prefix, "part-%" PRId64 "-", s->lk.run_id);
    DIR *d = opendir(t->dir);
    if (d == NULL) return io_error("cannot list", t->dir, err);
    int rc = FERRY_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && rc == FERRY_OK) {
        bool tmp = strncmp(e->d_name, tmp_prefix, strlen(tmp_prefix)) == 0;
        bool part = strncmp(e->d_name, part_prefix, strlen(part_prefix)) == 0;
        if (!tmp && !part) continue;
        char *rel = ferry_asprintf("%s/%s", t->table, e->d_name);
        char *full = ferry_asprintf("%s/%s", t->dir, e->d_name);
        if (rel == NULL || full == NULL)
            rc = nomem(err);
        else if ((tmp || !ferry__lake_listed(&s->lk, rel)) && unlink(full) != 0 && errno != ENOENT)
            rc = io_error("cannot remove", full, err);
        else if (part && !ferry__lake_listed(&s->lk, rel))
            ferry_log(FERRY_LOG_INFO, "files sink: removed %s, which no manifest lists", full);
        ferry_free(rel);
        ferry_free(full);
    }
    closedir(d);
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    discard(s, s->lk.session);
    int rc = ferry__lake_begin(&s->lk, run, err);
    if (rc == FERRY_OK) rc = load_earlier(s, err);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++) {
        if (!s->t[i].used) continue;
        s->t[i].next_n = 0;
        rc = sweep(s, &s->t[i], err);
    }
    if (rc != FERRY_OK) return rc;
    s->lk.session = true;
    return FERRY_OK;
}

/* ---- apply ---------------------------------------------------------------------------------- */

/* Every byte of a part passes here: the CRCs cover exactly what write() got. */
static int out_write(void *ctx, const void *p, size_t n, struct ferry_error *err)
{
    struct target *t = ctx;
    struct part *pt = &t->s->parts[t->part];
    enum ferry_fp_action fp = FERRY_FAILPOINT("files_sink_write");
    if (fp == FERRY_FP_ENOSPC) {
        errno = ENOSPC;
        return io_error("cannot write", pt->tmp, err);
    }
    const char *c = p;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(t->fd, c, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return io_error("cannot write", pt->tmp, err);
        c += w;
        left -= (size_t)w;
    }
    pt->crc = ferry_crc32c_update(pt->crc, p, n);
    pt->bytes += (int64_t)n;
    t->apply_crc = ferry_crc32c_update(t->apply_crc, p, n);
    t->apply_bytes += (int64_t)n;
    return FERRY_OK;
}

static int open_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct part *np = ferry_realloc(s->parts, sizeof *np * (size_t)(s->n_parts + 1));
    if (np == NULL) return nomem(err);
    s->parts = np;
    struct part *p = &s->parts[s->n_parts];
    memset(p, 0, sizeof *p);
    int n = t->next_n;
    p->tmp = ferry_asprintf("%s/.tmp-%" PRId64 "-%d-%d.%s", t->dir, s->lk.run_id, s->lk.attempt, n,
                            s->lk.fmt->ext);
    p->rel = ferry_asprintf("%s/part-%" PRId64 "-%d-%d.%s", t->table, s->lk.run_id, s->lk.attempt,
                            n, s->lk.fmt->ext);
    p->final = p->rel ? ferry_asprintf("%s/%s", s->path, p->rel) : NULL;
    p->table = ferry_strdup(t->table);
    s->n_parts++;
    if (p->tmp == NULL || p->rel == NULL || p->final == NULL || p->table == NULL) return nomem(err);
    t->fd = open(p->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t->fd < 0) return io_error("cannot create", p->tmp, err);
    t->part = s->n_parts - 1;
    t->next_n++;
    t->s = s;
    struct ferry__files_out out = {out_write, t};
    int rc = s->lk.fmt->open_part(&s->lk.opts, t->schema, out, &t->fw, err);
    if (rc != FERRY_OK) ferry_error_prefix(err, "%s", p->tmp);
    return rc;
}

/* Ends the open part of t: footer, fsync, close. The rename waits for commit. */
static int close_part(struct sink *s, struct target *t, struct ferry_error *err)
{
    if (t->part < 0) return FERRY_OK;
    struct part *p = &s->parts[t->part];
    int64_t bytes = 0;
    int rc = s->lk.fmt->finish_part(t->fw, &bytes, err);
    s->lk.fmt->free(t->fw);
    t->fw = NULL;
    if (rc == FERRY_OK && sync_fd(t->fd) != 0) rc = io_error("fsync", p->tmp, err);
    if (close(t->fd) != 0 && rc == FERRY_OK) rc = io_error("cannot close", p->tmp, err);
    t->fd = -1;
    t->part = -1;
    if (rc == FERRY_OK && bytes != p->bytes)
        rc = ferry_error_set(err, FERRY_ESINK, "files",
                             "files sink: %s: the %s writer reports %" PRId64 " bytes, %" PRId64
                             " were written",
                             p->tmp, s->lk.fmt->name, bytes, p->bytes);
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
        return ferry_error_set(err, FERRY_EINVAL, "files",
                               "files sink: apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    /* The digest of exactly the batch encoded below. */
    if (!ferry_receipt_start(receipt, b)) return FERRY_OK; /* the pipeline reports divergence */
    /* Parquet: the rows are encoded later with their row group, so no encoded CRC of this
     * batch exists; none is claimed (docs/connectors.md, "Integrity"). */
    receipt->has_encoded_crc = s->lk.fmt->per_batch_bytes;
    if (b->length == 0) return FERRY_OK;
    int rc = FERRY_OK;
    if (t->part < 0) rc = open_part(s, t, err);
    if (rc != FERRY_OK) return rc;
    struct part *p = &s->parts[t->part];
    t->apply_crc = 0;
    t->apply_bytes = 0;
    rc = s->lk.fmt->write_batch(t->fw, b, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", p->tmp);
    p->rows += b->length;
    receipt->rows = b->length;
    receipt->bytes = t->apply_bytes;
    receipt->encoded_crc = t->apply_crc;
    snprintf(receipt->uri, sizeof receipt->uri, "file://%s", p->final);
    if (ferry__lake_part_full(&s->lk, p->rows, p->bytes))
        rc = close_part(s, t, err);
    return rc;
}

/* ---- commit / abort ---------------------------------------------------------------------------
 */

static void manifest_item(const void *ctx, int i, struct ferry__manifest_item *out)
{
    const struct part *p = &((const struct sink *)ctx)->parts[i];
    *out = (struct ferry__manifest_item){p->table, p->rel, p->rows, p->bytes, p->crc};
}

/* Writes b to dir/name through dir/.tmp-name: write, fsync, rename, fsync of dir. A reader
 * sees the old file or the new one, never a part of one. */
static int put_atomic(const char *dir, const char *name, const struct ferry_buf *b,
                      struct ferry_error *err)
{
    char *tmp = ferry_asprintf("%s/.tmp-%s", dir, name);
    char *final = ferry_asprintf("%s/%s", dir, name);
    int rc = tmp && final ? FERRY_OK : nomem(err);
    if (rc == FERRY_OK) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            rc = io_error("cannot create", tmp, err);
        } else {
            size_t off = 0;
            while (off < b->len && rc == FERRY_OK) {
                ssize_t w = write(fd, b->data + off, b->len - off);
                if (w < 0 && errno == EINTR) continue;
                if (w < 0)
                    rc = io_error("cannot write", tmp, err);
                else
                    off += (size_t)w;
            }
            if (rc == FERRY_OK && sync_fd(fd) != 0) rc = io_error("fsync", tmp, err);
            close(fd);
        }
    }
    if (rc == FERRY_OK && rename(tmp, final) != 0) rc = io_error("cannot rename", tmp, err);
    if (rc == FERRY_OK) rc = fsync_path(dir, true, err);
    if (rc != FERRY_OK && tmp) unlink(tmp);
    ferry_free(tmp);
    ferry_free(final);
    return rc;
}

/* The run's own manifest, _runs/<run>/_manifest.json: every file of the run (replace: of
 * this attempt only; a replace run publishes once). */
static int write_manifest(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    char *dir = manifest_dir(s);
    char *runs = ferry_asprintf("%s/_runs", s->path);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = (dir && runs) ? mkdirs(dir, err) : nomem(err);
    if (rc == FERRY_OK) {
        struct ferry__manifest_head h = ferry__lake_head(&s->lk, NULL, NULL);
        if (ferry__manifest_text(&b, &h, s->lk.replace ? NULL : s->lk.earlier, s->n_parts,
                                 manifest_item, s) != FERRY_OK)
            rc = nomem(err);
    }
    if (rc == FERRY_OK) rc = put_atomic(dir, "_manifest.json", &b, err);
    if (rc == FERRY_OK) rc = fsync_path(runs, true, err);
    if (rc == FERRY_OK) rc = fsync_path(s->path, true, err);
    ferry_buf_release(&b);
    ferry_free(dir);
    ferry_free(runs);
    return rc;
}

static bool replaced_table(const void *ctx, const char *table)
{
    const struct sink *s = ctx;
    for (int i = 0; i < s->n_t; i++)
        if (s->t[i].used && table && strcmp(s->t[i].table, table) == 0) return true;
    return false;
}

/* Before the first data set manifest the data set is every run manifest under _runs. */
static int runs_union(const struct sink *s, json_t *out, struct ferry_error *err)
{
    char *runs = ferry_asprintf("%s/_runs", s->path);
    if (runs == NULL) return nomem(err);
    DIR *d = opendir(runs);
    int rc = FERRY_OK;
    char self[32];
    snprintf(self, sizeof self, "%" PRId64, s->lk.run_id);
    struct dirent *e;
    while (d && rc == FERRY_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0) continue;
        json_t *files = NULL;
        rc = load_files(ferry_asprintf("%s/%s/_manifest.json", runs, e->d_name), &files, err);
        if (files) json_array_extend(out, files);
        json_decref(files);
    }
    if (d) closedir(d);
    ferry_free(runs);
    return rc;
}

/* The data set manifest <path>/_manifest.json: every file of every table. replace: the
 * files of the tables this run does not write are kept, this run's files replace the rest;
 * append (only once a replace made one): the run's files are added. *out: its "files". */
static int write_dataset(void *ctx, json_t **out, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    int rc = FERRY_OK;
    json_t *old = NULL;
    if (s->lk.dataset == NULL && s->lk.replace) {
        old = json_array();
        rc = old ? runs_union(s, old, err) : nomem(err);
    }
    json_t *kept = ferry__lake_kept(&s->lk, old ? old : s->lk.dataset, replaced_table, s);
    json_decref(old);
    if (rc == FERRY_OK && kept == NULL) rc = nomem(err);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    struct ferry__manifest_head h = ferry__lake_head(&s->lk, NULL, NULL);
    if (rc == FERRY_OK && ferry__manifest_text(&b, &h, kept, s->n_parts, manifest_item, s) != FERRY_OK)
        rc = nomem(err);
    json_decref(kept);
    if (rc == FERRY_OK) rc = put_atomic(s->path, "_manifest.json", &b, err);
    if (rc == FERRY_OK) *out = ferry__lake_list_of(&s->lk, &b);
    ferry_buf_release(&b);
    return rc;
}

/* After a replace switched the data set: removes the files of the replaced tables that the
 * new data set does not list (the previous runs' parts, leftovers of crashed ones) and the
 * run manifests none of whose files is still listed. Failures are logged: the data set is
 * already complete; the next replace removes what is left. */
static void remove_replaced(void *ctx, const json_t *now)
{
    struct sink *s = ctx;
    for (int i = 0; i < s->n_t; i++) {
        const struct target *t = &s->t[i];
        if (!t->used) continue;
        DIR *d = opendir(t->dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "part-", 5) != 0) continue;
            char *rel = ferry_asprintf("%s/%s", t->table, e->d_name);
            char *full = ferry_asprintf("%s/%s", t->dir, e->d_name);
            if (rel && full && !ferry__lake_in_list(now, "path", rel) && unlink(full) != 0 &&
                errno != ENOENT)
                ferry_log(FERRY_LOG_WARN, "files sink: cannot remove %s (replaced): %s", full,
                          strerror(errno));
            ferry_free(rel);
            ferry_free(full);
        }
        if (d) closedir(d);
    }
    char *runs = ferry_asprintf("%s/_runs", s->path);
    DIR *d = runs ? opendir(runs) : NULL;
    char self[32];
    snprintf(self, sizeof self, "%" PRId64, s->lk.run_id);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0) continue;
        char *dir = ferry_asprintf("%s/%s", runs, e->d_name);
        char *m = dir ? ferry_asprintf("%s/_manifest.json", dir) : NULL;
        json_t *files = NULL;
        if (m && load_files(ferry_strdup(m), &files, NULL) == FERRY_OK) {
            bool live = false;
            size_t i;
            json_t *f;
            json_array_foreach(files, i, f) live =
                live ||
                ferry__lake_in_list(now, "path", json_string_value(json_object_get(f, "path")));
            if (!live && (unlink(m) != 0 || rmdir(dir) != 0) && errno != ENOENT)
                ferry_log(FERRY_LOG_WARN, "files sink: cannot remove %s (replaced): %s", dir,
                          strerror(errno));
        }
        json_decref(files);
        ferry_free(m);
        ferry_free(dir);
    }
    if (d) closedir(d);
    ferry_free(runs);
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->lk.session)
        return ferry_error_set(err, FERRY_EINVAL, "files",
                               "files sink: %s: commit without a session", s->path);
    int rc = FERRY_OK;
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        rc = close_part(s, &s->t[i], err);
    /* The temporary names are durable before they are renamed, the new names after. */
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used) rc = fsync_path(s->t[i].dir, true, err);
    for (int k = 0; k < s->n_parts && rc == FERRY_OK; k++) {
        struct part *p = &s->parts[k];
        if (p->tmp == NULL) continue;
        if (rename(p->tmp, p->final) != 0) {
            rc = io_error("cannot rename", p->tmp, err);
            break;
        }
        ferry_free(p->tmp);
        p->tmp = NULL;
    }
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used) rc = fsync_path(s->t[i].dir, true, err);
    if (rc == FERRY_OK) rc = ferry_failpoint_check("files_before_manifest", err);
    /* The switch is one rename of the data set manifest. */
    static const struct ferry__lake_store store = {write_dataset, write_manifest, remove_replaced,
                                                   "files_after_switch"};
    if (rc == FERRY_OK) rc = ferry__lake_publish(&s->lk, &store, s, err);
    if (rc != FERRY_OK) return rc; /* abort() removes what is still temporary */
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

const struct ferry_sink_vtable ferry__files_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "files",
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
