/* connectors/files/files_source.c - the `files` source: CSV and JSON Lines files matched by
 * a glob, plain or gzip/zstd compressed, and Parquet files (files_pq_source.c: a shard per
 * row group, the schema from the footer).
 *
 * Each file is one shard of the plan (names sorted; size and modification time frozen, so
 * a file changed between attempts is refused instead of resumed at a wrong offset). A
 * batch position carries `n`, the byte offset (in the decompressed stream) of the first
 * record not yet read: a resumed shard reads the header again, skips to n and goes on, so
 * a crash mid-file resumes inside the file. Full reads only.
 *
 * Schema, inference and on_error: files_text.c (shared with the s3 source).
 *
 * Owns the configuration. Calls files_text.c (CSV, JSON Lines), files_pq_source.c (Parquet),
 * jansson for the plan.
 * Registered in connectors/registry.c; driven by the runner, one instance per thread. */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "connectors/files/files_pq.h"
#include "connectors/files/files_text.h"
#include "ferry/config.h"
#include "ferry/connector.h"

static const char *const tuning_keys[] = {"sample_rows", "parallelism", NULL};

struct src {
    char *path; /* the source's glob, or NULL (each resource then names its own) */
    struct ferry__text_src t;
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

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *schema, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    struct src *s = ctx;
    if (spec->mode != FERRY_READ_FULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "files",
                               "resource %s: the files source reads in mode full only, not %s "
                               "(each run reads every file matched by path)",
                               spec->table, ferry_read_mode_name(spec->mode));
    const char *pattern = NULL;
    int rc = resource_glob(s, spec, &pattern, err);
    if (rc != FERRY_OK) return rc;
    glob_t g;
    rc = list_files(pattern, spec->table, &g, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int brc = ferry_buf_printf(&b, "{\"mode\":\"full\",\"shards\":[");
    int nshards = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == FERRY_OK && brc == FERRY_OK; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) != 0) {
            rc = ferry_error_set(err, FERRY_EIO, "files", "files source: %s: %s", g.gl_pathv[i],
                                 strerror(errno));
            break;
        }
        /* Parquet: a shard per row group (its footer read here, so a corrupt or lying
         * footer stops the run before anything is written); else one per file. */
        int groups = -1;
        if (ferry__text_format_of(&s->t, g.gl_pathv[i]) == FILES_FMT_PARQUET &&
            (rc = ferry__files_pq_groups(g.gl_pathv[i], &groups, err)) != FERRY_OK)
            break;
        for (int k = 0; k < (groups < 0 ? 1 : groups) && brc == FERRY_OK; k++) {
            brc = ferry_buf_printf(&b, "%s{\"file\":", nshards++ ? "," : "");
            if (brc == FERRY_OK)
                brc = ferry_buf_json_string(&b, g.gl_pathv[i], strlen(g.gl_pathv[i]));
            if (brc == FERRY_OK)
                brc = ferry_buf_printf(
                    &b, ",\"format\":\"%s\",\"size\":%" PRId64 ",\"mtime_ns\":%" PRId64,
                    ferry__text_format_word(ferry__text_format_of(&s->t, g.gl_pathv[i])),
                    (int64_t)st.st_size,
                    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
            if (brc == FERRY_OK && groups >= 0) brc = ferry_buf_printf(&b, ",\"group\":%d", k);
            if (brc == FERRY_OK) brc = ferry_buf_printf(&b, "}");
        }
    }
    if (brc == FERRY_OK) brc = ferry_buf_printf(&b, "]}");
    globfree(&g);
    if (rc == FERRY_OK && brc != FERRY_OK) rc = nomem(err);
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
    int group; /* parquet: the row group; else -1 */
};

static int load_shard(const char *table, const char *plan_json, int shard, struct shard_info *si,
                      struct ferry_error *err)
{
    json_t *root = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *sh = json_array_get(json_object_get(root, "shards"), (size_t)shard);
    json_t *file = json_object_get(sh, "file");
    json_t *size = json_object_get(sh, "size"), *mt = json_object_get(sh, "mtime_ns");
    int rc = FERRY_OK;
    if (shard < 0 || !json_is_string(file) || !json_is_integer(size) || !json_is_integer(mt)) {
        rc = ferry_error_set(err, FERRY_EINVAL, "files",
                             "resource %s: shard %d of the frozen plan is not a files plan: %.200s",
                             table, shard, plan_json ? plan_json : "(none)");
    } else {
        si->file = ferry_strdup(json_string_value(file));
        si->size = (int64_t)json_integer_value(size);
        si->mtime_ns = (int64_t)json_integer_value(mt);
        json_t *grp = json_object_get(sh, "group");
        si->group = json_is_integer(grp) ? (int)json_integer_value(grp) : -1;
        if (si->file == NULL) rc = nomem(err);
    }
    json_decref(root);
    return rc;
}

static int parse_resume(const char *resume, const char *file, int64_t *n, bool *done,
                        struct ferry_error *err)
{
    *n = 0;
    *done = false;
    if (resume == NULL) return FERRY_OK;
    json_t *root = json_loads(resume, 0, NULL);
    int rc = FERRY_OK;
    if (!json_is_object(root)) {
        rc = ferry_error_set(err, FERRY_EINVAL, "files",
                             "files source: %s: the resume position is not a JSON object: %.200s",
                             file, resume);
    } else {
        *done = json_is_true(json_object_get(root, "done"));
        json_t *v = json_object_get(root, "n");
        if (json_is_integer(v)) *n = (int64_t)json_integer_value(v);
    }
    json_decref(root);
    return rc;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const char *resume, struct ferry_row_writer *rw, struct ferry_error *err)
{
    struct src *s = ctx;
    struct shard_info si = {0};
    int rc = load_shard(spec->table, plan_json, shard, &si, err);
    if (rc != FERRY_OK) return rc;
    int64_t start = 0;
    bool done = false;
    rc = parse_resume(resume, si.file, &start, &done, err);
    if (rc != FERRY_OK || done) {
        ferry_free(si.file);
        return rc;
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
        rc = ferry__files_pq_extract(si.file, si.group, schema, start, rw, err);
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
    .supports_incremental = false,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = NULL,
};
