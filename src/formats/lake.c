/* formats/lake.c - the part of the `files` and `s3` sinks that does not depend on where
 * the bytes go: the format options of the sink section, the run's session state, manifest
 * lists and the order of a commit's publish step (contract in formats/lake.h).
 *
 * Owns nothing beyond struct ferry__lake's strings and JSON references. Calls config, the
 * format table (formats/formats.h), jansson and core. Called by the files and s3 sinks
 * (connectors/files/files_sink.c, connectors/s3/s3_sink.c). */
#include <string.h>
#include "formats/lake.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"

static const char *const newline_words[] = {"crlf", "lf", NULL};

static int one_char(struct ferry_cfg *cfg, const char *key, char *out, struct ferry_error *err)
{
    const char *v = NULL;
    int rc = ferry_cfg_str(cfg, key, false, &v, err);
    if (rc != FERRY_OK || v == NULL) return rc;
    if (strcmp(v, "\\t") == 0) v = "\t";
    if (strlen(v) != 1 || v[0] == '"' || v[0] == '\n' || v[0] == '\r')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, key),
                               "must be one character other than a quote or a line break");
    *out = v[0];
    return FERRY_OK;
}

static int unknown_format(struct ferry_cfg *cfg, const char *what, const char *format,
                          struct ferry_error *err)
{
    struct ferry_buf names;
    ferry_buf_init(&names, 0);
    for (const char *const *n = ferry__files_format_names(); *n; n++)
        ferry_buf_printf(&names, "%s%s", names.len ? ", " : "", *n);
    int rc = ferry_cfg_error(err, ferry_cfg_get(cfg, "format"),
                             "unknown format \"%s\" (the %s writes %s)", format, what,
                             names.data ? names.data : "");
    ferry_buf_release(&names);
    return rc;
}

int ferry__lake_open(struct ferry__lake *lk, struct ferry_cfg *cfg, const char *what,
                     const char *origin, const char *list_key, const char *name_key,
                     struct ferry_error *err)
{
    lk->what = what;
    lk->origin = origin;
    lk->list_key = list_key;
    lk->name_key = name_key;
    const char *format = "csv", *null_marker = "";
    bool header = true;
    int newline = 0;
    int64_t part_rows = 0, part_bytes = INT64_C(128) << 20;
    char delim = ',';
    int rc = ferry_cfg_str(cfg, "format", false, &format, err);
    if (rc == FERRY_OK) rc = one_char(cfg, "delimiter", &delim, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "null", false, &null_marker, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "header", false, &header, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "newline", false, newline_words, &newline, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "part_rows", false, 0, INT64_MAX, &part_rows, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "part_bytes", false, &part_bytes, err);
    if (rc != FERRY_OK) return rc;
    const struct ferry__files_format *fmt = ferry__files_format_find(format);
    if (fmt == NULL) return unknown_format(cfg, what, format, err);
    if (strchr(null_marker, delim) || strpbrk(null_marker, "\"\r\n"))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "null"),
                               "must not hold the delimiter, a quote or a line break");
    lk->null_marker = ferry_strdup(null_marker);
    if (lk->null_marker == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, origin, "%s: out of memory", what);
    lk->opts.delimiter = delim;
    lk->opts.null_marker = lk->null_marker;
    lk->opts.header = header;
    lk->opts.crlf = newline == 0;
    lk->part_rows = part_rows;
    lk->part_bytes = part_bytes > 0 ? part_bytes : INT64_MAX;
    if (fmt->configure != NULL) {
        rc = fmt->configure(cfg, &lk->opts.conf, err);
        if (rc != FERRY_OK) return rc;
    }
    lk->fmt = fmt; /* conf_free only runs for a conf its own format made */
    return FERRY_OK;
}

void ferry__lake_release(struct ferry__lake *lk)
{
    if (lk == NULL) return;
    if (lk->fmt && lk->fmt->conf_free) lk->fmt->conf_free(lk->opts.conf);
    lk->opts.conf = NULL;
    json_decref(lk->earlier);
    json_decref(lk->dataset);
    lk->earlier = lk->dataset = NULL;
    ferry_free(lk->null_marker);
    ferry_free(lk->pipeline);
    ferry_free(lk->version);
    lk->null_marker = lk->pipeline = lk->version = NULL;
}

void ferry__lake_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    (void)ctx;
    (void)mode;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE);
    caps->durability = FERRY_DURABLE_AT_COMMIT;
    caps->encoded_integrity = true;
    caps->transactional_checkpoint = false;
    /* replace: the data set manifest (one rename, one PUT: atomic for readers) switches to
     * the new parts after every one of them is durable; the old ones go only after that. */
    caps->atomic_replace = true;
    caps->replace_commits_once = true; /* a pause must not publish half a table */
    caps->deletes = false;
}

int ferry__lake_check_target(struct ferry__lake *lk, const struct ferry_target *target,
                             const char *table, const char *where, struct ferry_error *err)
{
    if (table == NULL || table[0] == '\0' || table[0] == '.' || strchr(table, '/') ||
        strcmp(table, "_runs") == 0)
        return ferry_error_set(err, FERRY_ECONFIG, lk->origin,
                               "%s: \"%s\" cannot name a folder under %s (no '/', no leading "
                               "'.', not _runs); set the resource's target",
                               lk->what, table ? table : "", where);
    if (target->mode != FERRY_WRITE_APPEND && target->mode != FERRY_WRITE_REPLACE)
        return ferry_error_set(err, FERRY_EPOLICY, lk->origin,
                               "%s: table %s: write: %s is not supported (append or replace)",
                               lk->what, table, ferry_write_mode_name(target->mode));
    lk->replace = target->mode == FERRY_WRITE_REPLACE;
    return FERRY_OK;
}

int ferry__lake_begin(struct ferry__lake *lk, const struct ferry_session_info *run,
                      struct ferry_error *err)
{
    ferry_free(lk->pipeline);
    ferry_free(lk->version);
    json_decref(lk->earlier);
    json_decref(lk->dataset);
    lk->earlier = lk->dataset = NULL;
    lk->pipeline = ferry_strdup(run->pipeline ? run->pipeline : "");
    lk->version = ferry_strdup(run->version ? run->version : "");
    if (lk->pipeline == NULL || lk->version == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, lk->origin, "%s: out of memory", lk->what);
    lk->run_id = run->run_id;
    lk->attempt = run->attempt;
    lk->published = false;
    return FERRY_OK;
}

bool ferry__lake_in_list(const json_t *list, const char *name_key, const char *name)
{
    size_t i;
    json_t *f;
    json_array_foreach(list, i, f)
    {
        const char *p = json_string_value(json_object_get(f, name_key));
        if (p && name && strcmp(p, name) == 0) return true;
    }
    return false;
}

bool ferry__lake_listed(const struct ferry__lake *lk, const char *name)
{
    return ferry__lake_in_list(lk->earlier, lk->name_key, name) ||
           ferry__lake_in_list(lk->dataset, lk->name_key, name);
}

bool ferry__lake_part_full(const struct ferry__lake *lk, int64_t rows, int64_t bytes)
{
    return (lk->part_rows > 0 && rows >= lk->part_rows) || bytes >= lk->part_bytes;
}

struct ferry__manifest_head ferry__lake_head(const struct ferry__lake *lk, const char *extra_key,
                                             const char *extra_value)
{
    return (struct ferry__manifest_head){.pipeline = lk->pipeline,
                                         .version = lk->version,
                                         .extra_key = extra_key,
                                         .extra_value = extra_value,
                                         .run_id = lk->run_id,
                                         .attempt = lk->attempt,
                                         .format = lk->fmt->name,
                                         .list_key = lk->list_key,
                                         .name_key = lk->name_key};
}

json_t *ferry__lake_kept(const struct ferry__lake *lk, const json_t *from,
                         bool (*replaced)(const void *ctx, const char *table), const void *ctx)
{
    json_t *kept = json_array();
    if (kept == NULL) return NULL;
    size_t i;
    json_t *f;
    json_array_foreach(from, i, f)
    {
        bool drop = lk->replace
                        ? replaced(ctx, json_string_value(json_object_get(f, "table")))
                        : ferry__lake_in_list(lk->earlier, lk->name_key,
                                              json_string_value(json_object_get(f, lk->name_key)));
        if (!drop) json_array_append(kept, f);
    }
    if (!lk->replace && lk->earlier) json_array_extend(kept, lk->earlier);
    return kept;
}

json_t *ferry__lake_list_of(const struct ferry__lake *lk, const struct ferry_buf *b)
{
    json_t *root = json_loadb(b->data, b->len, 0, NULL);
    json_t *list = json_incref(json_object_get(root, lk->list_key));
    json_decref(root);
    return list;
}

int ferry__lake_publish(struct ferry__lake *lk, const struct ferry__lake_store *st, void *ctx,
                        struct ferry_error *err)
{
    if (!lk->replace && lk->dataset == NULL) return st->put_manifest(ctx, err);
    /* The switch: one write of the data set manifest publishes the new complete set; from
     * then on the parts stay whatever happens. The run manifest after it only records the
     * run. */
    json_t *now = NULL;
    int rc = st->put_dataset(ctx, &now, err);
    if (rc == FERRY_OK) {
        lk->published = true;
        rc = ferry_failpoint_check(st->after_switch, err);
    }
    if (rc == FERRY_OK) rc = st->put_manifest(ctx, err);
    if (rc == FERRY_OK && lk->replace) st->remove_replaced(ctx, now);
    json_decref(now);
    return rc;
}
