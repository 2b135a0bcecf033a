/* connectors/files/files_source.c - the `files` source: CSV and JSON Lines files matched by
 * a glob, plain or gzip/zstd compressed, and Parquet files (files_pq_source.c: a shard per
 * row group, the schema from the footer).
 *
 * Each file is one shard of the plan (names sorted; size and modification time frozen, so
 * a file changed between attempts is refused instead of resumed at a wrong offset). A
 * batch position carries `n`, the byte offset (in the decompressed stream) of the first
 * record not yet read: a resumed shard reads the header again, skips to n and goes on, so
 * a crash mid-file resumes inside the file.
 *
 * mode: incremental (no cursor): the plan holds only the files whose path, size or
 * modification time is not in the route checkpoint ({"files": {path: "SIZE MTIME_NS"}}),
 * and the next checkpoint (every file matched now) as "route_checkpoint", saved by the
 * tracker when the run completes. A changed file is read again whole.
 *
 * mode: incremental with `cursor: [column]` (Parquet files only): every matched file is
 * planned, but only its row groups whose statistics allow a row above the saved cursor
 * ({"cursor": "N"}, strictly above); those rows alone are read (files_pq_source.c). The
 * next position is the largest cursor value of the files planned; the plan says how many
 * groups it skipped ("row_groups_skipped", in resource.started).
 *
 * Schema, inference and on_error: formats/text_source.c (shared with the s3 source).
 *
 * Owns the configuration. Calls formats/text_source.c (CSV, JSON Lines), files_pq_source.c
 * (Parquet), jansson for the plan, the checkpoint codec for resume positions.
 * Registered in connectors/registry.c; driven by the runner, one instance per thread. */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "checkpoint/plan_cache.h"
#include "checkpoint/position.h"
#include "connectors/files/files_pq.h"
#include "formats/text_source.h"
#include "ferry/config.h"
#include "ferry/connector.h"

static const char *const tuning_keys[] = {"sample_rows", "parallelism", NULL};

struct src {
    char *path; /* the source's glob, or NULL (each resource then names its own) */
    struct ferry__text_src t;
    struct ferry__files_pq_keep pq; /* the Parquet file last read, kept for its next group */
    struct ferry_plan_cache plan;   /* the frozen plan extract was last given, parsed */
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
}

/* ---- open -------------------------------------------------------------------------------- */

static void src_close(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    ferry_free(s->path);
    ferry__text_src_release(&s->t);
    ferry__files_pq_keep_release(&s->pq);
    ferry_plan_cache_clear(&s->plan);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *path = NULL;
    int rc = ferry_cfg_str(cfg, "path", false, &path, err);
    struct src *p = rc == FERRY_OK ? ferry_calloc(1, sizeof *p) : NULL;
    if (rc == FERRY_OK && p == NULL) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry__text_src_open(cfg, &p->t, err);
    if (rc == FERRY_OK && path != NULL && (p->path = ferry_strdup(path)) == NULL) rc = nomem(err);
    if (rc != FERRY_OK) {
        src_close(p);
        return rc;
    }
    *ctx = p;
    return FERRY_OK;
}

/* ---- files ------------------------------------------------------------------------------- */

static int resource_glob(const struct src *s, const struct ferry_resource_spec *spec,
                         const char **out, struct ferry_error *err)
{
    const char *g = s->path;
    if (spec->node != NULL) {
        int rc = ferry_cfg_str(spec->node, "path", false, &g, err);
        if (rc != FERRY_OK) return rc;
    }
    if (g == NULL || g[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "files",
                               "files source: resource %s: no `path` (set it on the source or "
                               "on the resource)",
                               spec->table);
    *out = g;
    return FERRY_OK;
}

static int list_files(const char *pattern, const char *table, glob_t *g, struct ferry_error *err)
{
    memset(g, 0, sizeof *g);
    int grc = glob(pattern, GLOB_ERR, NULL, g); /* sorted by name */
    if (grc == GLOB_NOMATCH || (grc == 0 && g->gl_pathc == 0)) {
        globfree(g);
        return ferry_error_set(err, FERRY_ENOTFOUND, "files",
                               "files source: resource %s: no file matches %s", table, pattern);
    }
    if (grc != 0) {
        globfree(g);
        return ferry_error_set(err, FERRY_EIO, "files", "files source: resource %s: cannot list %s",
                               table, pattern);
    }
    return FERRY_OK;
}

/* ---- discover ------------------------------------------------------------------------------ */

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct src *s = ctx;
    const char *pattern = NULL;
    int rc = resource_glob(s, spec, &pattern, err);
    if (rc != FERRY_OK) return rc;
    glob_t g;
    rc = list_files(pattern, spec->table, &g, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_schema *all = NULL;
    struct ferry_cfg *decl = ferry__text_declared(spec);
    const char *first = g.gl_pathv[0];
    if (ferry__text_format_of(&s->t, first) == FILES_FMT_PARQUET) {
        rc = decl != NULL ? ferry_cfg_error(err, decl,
                                            "resource %s: Parquet files carry their schema; "
                                            "remove `schema`",
                                            spec->table)
                          : ferry__files_pq_schema(first, &all, err);
    } else {
        struct ferry__files_input *in = NULL;
        if (decl == NULL) rc = ferry__files_input_open(first, &in, err);
        if (rc == FERRY_OK) rc = ferry__text_schema(&s->t, spec, in, first, &all, err);
    }
    globfree(&g);
    if (rc == FERRY_OK) rc = ferry__text_select(all, spec, "files", out, err);
    ferry_schema_unref(all);
    return rc;
}

/* ---- plan -------------------------------------------------------------------------------- */

/* A cursor read (Parquet files, mode: incremental with `cursor: [column]`): the saved
 * cursor (the route checkpoint {"cursor": "N"}), the largest value seen now, and the row
 * groups the statistics let the plan skip. */
struct cursor_plan {
    struct ferry_parquet_floor floor;
    int64_t hi;
    bool has_hi;
    int skipped;
};

/* The shards of one file appended to b: Parquet, a shard per row group (its footer read
 * here, so a corrupt or lying footer stops the run before anything is written), with a
 * cursor only the groups that may hold rows above it; else one. */
static int plan_file(const struct src *s, const char *path, const struct stat *st,
                     struct cursor_plan *cp, const struct ferry_read_context *rx, int *fskipped,
                     struct ferry_buf *b, int *nshards, struct ferry_error *err)
{
    int groups = -1, rc = FERRY_OK, brc = FERRY_OK;
    enum ferry__files_fmt fmt = ferry__text_format_of(&s->t, path);
    bool *want = NULL;
    if (cp != NULL && fmt != FILES_FMT_PARQUET)
        return ferry_error_set(err, FERRY_ECONFIG, "files",
                               "files source: %s: a `cursor:` is read from Parquet files only "
                               "(remove it to read new files incrementally)",
                               path);
    if (cp != NULL)
        rc = ferry__files_pq_cursor_groups(path, &cp->floor, &want, &groups, &cp->skipped, &cp->hi,
                                           &cp->has_hi, err);
    else if (fmt == FILES_FMT_PARQUET)
        rc = ferry__files_pq_groups(path, &groups, err);
    /* row groups a `filter` transform provably rejects whole are not planned */
    if (rc == FERRY_OK && fmt == FILES_FMT_PARQUET && rx->n_filters > 0 && groups > 0)
        rc = ferry__files_pq_filter_groups(path, rx->filters, rx->n_filters, &want, groups,
                                           fskipped, err);
    if (rc != FERRY_OK) {
        ferry_free(want);
        return rc;
    }
    for (int k = 0; k < (groups < 0 ? 1 : groups) && brc == FERRY_OK; k++) {
        if (want && !want[k]) continue;
        brc = ferry_buf_printf(b, "%s{\"file\":", (*nshards)++ ? "," : "");
        if (brc == FERRY_OK) brc = ferry_buf_json_string(b, path, strlen(path));
        if (brc == FERRY_OK)
            brc =
                ferry_buf_printf(b, ",\"format\":\"%s\",\"size\":%" PRId64 ",\"mtime_ns\":%" PRId64,
                                 ferry__text_format_word(fmt), (int64_t)st->st_size,
                                 (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec);
        if (brc == FERRY_OK && groups >= 0) brc = ferry_buf_printf(b, ",\"group\":%d", k);
        if (brc == FERRY_OK && cp && cp->floor.has_value)
            brc = ferry_buf_printf(b, ",\"floor\":\"%" PRId64 "\"", cp->floor.value);
        if (brc == FERRY_OK) brc = ferry_buf_printf(b, "}");
    }
    ferry_free(want);
    return brc == FERRY_OK ? FERRY_OK : nomem(err);
}

/* Incremental: the route checkpoint's {"files": {path: "SIZE MTIME_NS"}}, or NULL. */
static int seen_files(const struct ferry_resource_spec *spec, const char *route_checkpoint,
                      json_t **seen, struct ferry_error *err)
{
    *seen = NULL;
    if (route_checkpoint == NULL) return FERRY_OK;
    json_t *root = json_loads(route_checkpoint, 0, NULL);
    json_t *f = json_object_get(root, "files");
    if (!json_is_object(f)) {
        json_decref(root);
        return ferry_error_set(err, FERRY_EINVAL, "files",
                               "resource %s: the saved position is not the files source's: %.200s",
                               spec->table, route_checkpoint);
    }
    *seen = json_incref(f);
    json_decref(root);
    return FERRY_OK;
}

/* The plan's tail: a `none` shard when nothing is to be read, and, incremental, the next
 * route checkpoint (every file matched now). */
static int plan_tail(struct ferry_buf *b, int nshards, json_t *next, const struct cursor_plan *cp,
                     int fskipped, bool filtered, struct ferry_error *err)
{
    int brc = ferry_buf_printf(b, "%s]", nshards ? "" : "{\"none\":true}");
    char *text = next ? json_dumps(next, JSON_COMPACT) : NULL;
    if (brc == FERRY_OK && next != NULL && cp == NULL)
        brc =
            text ? ferry_buf_printf(b, ",\"route_checkpoint\":{\"files\":%s}", text) : FERRY_ENOMEM;
    /* a cursor read moves to the largest value planned (the files are frozen: no row above) */
    if (brc == FERRY_OK && cp != NULL && (cp->has_hi || cp->floor.has_value))
        brc = ferry_buf_printf(b, ",\"route_checkpoint\":{\"cursor\":\"%" PRId64 "\"}",
                               cp->has_hi && (!cp->floor.has_value || cp->hi > cp->floor.value)
                                   ? cp->hi
                                   : cp->floor.value);
    else if (brc == FERRY_OK && cp != NULL)
        brc = ferry_buf_printf(b, ",\"route_checkpoint\":{\"cursor\":null}");
    if (brc == FERRY_OK && (cp != NULL || filtered))
        brc = ferry_buf_printf(b, ",\"row_groups_skipped\":%d", (cp ? cp->skipped : 0) + fskipped);
    free(text);
    if (brc == FERRY_OK) brc = ferry_buf_printf(b, "}");
    return brc == FERRY_OK ? FERRY_OK : nomem(err);
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *schema, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    (void)schema;
    struct src *s = ctx;
    bool incr = spec->mode == FERRY_READ_INCREMENTAL;
    if (spec->mode != FERRY_READ_FULL && !incr)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "files",
                               "resource %s: the files source reads in mode full or incremental, "
                               "not %s",
                               spec->table, ferry_read_mode_name(spec->mode));
    struct cursor_plan cpl = {{NULL, false, 0}, 0, false, 0}, *cp = NULL;
    int rc = FERRY_OK;
    if (spec->cursor != NULL) {
        cp = &cpl;
        rc = ferry__parquet_saved_cursor(spec, route_checkpoint, "files", &cpl.floor, err);
    }
    const char *pattern = NULL;
    json_t *seen = NULL, *next = incr ? json_object() : NULL;
    if (rc == FERRY_OK)
        rc = incr && next == NULL ? nomem(err) : resource_glob(s, spec, &pattern, err);
    if (rc == FERRY_OK && incr && cp == NULL) rc = seen_files(spec, route_checkpoint, &seen, err);
    glob_t g;
    memset(&g, 0, sizeof g);
    bool listed = rc == FERRY_OK && (rc = list_files(pattern, spec->table, &g, err)) == FERRY_OK;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (rc == FERRY_OK &&
        ferry_buf_printf(&b, "{\"mode\":\"%s\",\"shards\":[", incr ? "incremental" : "full"))
        rc = nomem(err);
    int nshards = 0, fskipped = 0;
    const struct ferry_read_context *rx = ferry_read_context_of(spec);
    for (size_t i = 0; i < g.gl_pathc && rc == FERRY_OK; i++) {
        const char *path = g.gl_pathv[i];
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = ferry_error_set(err, FERRY_EIO, "files", "files source: %s: %s", path,
                                 strerror(errno));
            break;
        }
        char v[64];
        snprintf(v, sizeof v, "%" PRId64 " %" PRId64, (int64_t)st.st_size,
                 (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
        if (next && json_object_set_new(next, path, json_string(v)) != 0) rc = nomem(err);
        const char *was = json_string_value(json_object_get(seen, path));
        if (rc != FERRY_OK || (was && strcmp(was, v) == 0)) continue; /* read before */
        rc = plan_file(s, path, &st, cp, rx, &fskipped, &b, &nshards, err);
    }
    if (rc == FERRY_OK) rc = plan_tail(&b, nshards, next, cp, fskipped, rx->n_filters > 0, err);
    if (listed) globfree(&g);
    json_decref(seen);
    json_decref(next);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    *plan_json = ferry_buf_take(&b);
    return *plan_json ? FERRY_OK : nomem(err);
}

/* ---- extract ------------------------------------------------------------------------------- */

struct shard_info {
    char *file;
    int64_t size, mtime_ns;
    int group;      /* parquet: the row group; else -1 */
    bool has_floor; /* a cursor read: only rows above floor */
    int64_t floor;
};

static int load_shard(struct src *s, const char *table, const char *plan_json, int shard,
                      struct shard_info *si, struct ferry_error *err)
{
    json_t *root = ferry_plan_cache_get(&s->plan, plan_json);
    json_t *sh = json_array_get(json_object_get(root, "shards"), (size_t)shard);
    json_t *file = json_object_get(sh, "file");
    json_t *size = json_object_get(sh, "size"), *mt = json_object_get(sh, "mtime_ns");
    int rc = FERRY_OK;
    if (json_is_true(json_object_get(sh, "none"))) {
        si->file = NULL; /* nothing new: an empty shard */
    } else if (shard < 0 || !json_is_string(file) || !json_is_integer(size) ||
               !json_is_integer(mt)) {
        rc = ferry_error_set(err, FERRY_EINVAL, "files",
                             "resource %s: shard %d of the frozen plan is not a files plan: %.200s",
                             table, shard, plan_json ? plan_json : "(none)");
    } else {
        si->file = ferry_strdup(json_string_value(file));
        si->size = (int64_t)json_integer_value(size);
        si->mtime_ns = (int64_t)json_integer_value(mt);
        json_t *grp = json_object_get(sh, "group");
        si->group = json_is_integer(grp) ? (int)json_integer_value(grp) : -1;
        const char *fl = json_string_value(json_object_get(sh, "floor"));
        si->has_floor = fl != NULL;
        si->floor = fl ? strtoll(fl, NULL, 10) : 0;
        if (si->file == NULL) rc = nomem(err);
    }
    return rc;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    struct src *s = ctx;
    struct shard_info si = {0};
    int rc = load_shard(s, spec->table, plan_json, shard, &si, err);
    if (rc != FERRY_OK || si.file == NULL) return rc; /* error, or the `none` shard */
    /* The resume position's offset n (a byte or a row offset) and done. */
    int64_t start = resume != NULL && resume->has_n ? resume->n : 0;
    if (resume != NULL && resume->done) {
        ferry_free(si.file);
        return FERRY_OK;
    }
    struct stat st;
    if (stat(si.file, &st) != 0) {
        rc = ferry_error_set(err, errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "files",
                             "files source: %s: %s (it was planned)", si.file, strerror(errno));
    } else if ((int64_t)st.st_size != si.size ||
               (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != si.mtime_ns) {
        rc = ferry_error_set(err, FERRY_ESOURCE, "files",
                             "files source: %s changed since the run was planned (size or "
                             "modification time); start a new run",
                             si.file);
    }
    if (rc == FERRY_OK && si.group >= 0) {
        ferry_rw_set_shard(rw, shard);
        struct ferry_parquet_floor fl = {spec->cursor ? spec->cursor[0] : NULL, si.has_floor,
                                         si.floor};
        rc = ferry__files_pq_extract(&s->pq, si.file, si.group, schema, start,
                                     spec->cursor ? &fl : NULL, rw, err);
        ferry_free(si.file);
        return rc;
    }
    struct ferry__files_input *in = NULL;
    if (rc == FERRY_OK) rc = ferry__files_input_open(si.file, &in, err);
    if (rc == FERRY_OK)
        rc = ferry__text_extract(&s->t, spec, schema, in, si.file, shard, start, rw, err);
    ferry_free(si.file);
    return rc;
}

const struct ferry_source_vtable ferry__files_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "files",
    .tuning_keys = tuning_keys,
    .supports_incremental = true,
    .incremental_without_cursor = true,
    .incremental_cursor_optional = true,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = NULL,
};
