/* formats/parquet_cursor.c - which row groups of a Parquet file a cursor read plans
 * (parquet_cursor.h). Calls parquet_reader.c and the row writer; called by the files source
 * (connectors/files/files_pq_source.c) and the s3 source (connectors/s3/s3_source.c), which
 * also read their saved cursor here (jansson: that route checkpoint is theirs, not a
 * checkpoint position). */
#include "formats/parquet_cursor.h"
#include <jansson.h>
#include <stdlib.h>
#include "batch/builder.h"
#include "ferry/core.h"

int ferry__parquet_saved_cursor(const struct ferry_resource_spec *spec,
                                const char *route_checkpoint, const char *source,
                                struct ferry_parquet_floor *f, struct ferry_error *err)
{
    f->column = spec->cursor[0];
    f->has_value = false;
    f->value = 0;
    if (spec->n_cursor != 1)
        return ferry_error_set(err, FERRY_ECONFIG, source,
                               "resource %s: the %s source reads one cursor column", spec->table,
                               source);
    if (route_checkpoint == NULL) return FERRY_OK;
    json_t *root = json_loads(route_checkpoint, 0, NULL);
    json_t *c = json_object_get(root, "cursor");
    const char *v = json_string_value(c);
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    int rc = FERRY_OK;
    if (v != NULL && end != v && *end == '\0') {
        f->has_value = true;
        f->value = x;
    } else if (!json_is_null(c)) {
        rc = ferry_error_set(
            err, FERRY_EINVAL, source,
            "resource %s: the saved position is not the %s source's cursor position "
            "(was the cursor added since?): %.200s",
            spec->table, source, route_checkpoint);
    }
    json_decref(root);
    return rc;
}

struct col_max {
    int64_t max;
    bool any;
};

static int collect_max(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct col_max *m = ctx;
    for (int64_t i = 0; i < b->length; i++) {
        if (ferry_col_is_null(b, 0, i)) continue;
        int64_t v = ferry_col_int(b, 0, i);
        if (!m->any || v > m->max) m->max = v;
        m->any = true;
    }
    ferry_batch_unref(b);
    return FERRY_OK;
}

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "parquet", "parquet: out of memory");
}

/* The largest value of column `cursor` in group g, decoded (no usable statistics). */
static int decoded_max(struct ferry_parquet_reader *r, int g, const char *cursor, struct col_max *m,
                       struct ferry_error *err)
{
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    int k = ferry_schema_find(fs, cursor);
    struct ferry_schema *s = ferry_schema_new();
    int rc = s ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry_schema_add_field(s, cursor, fs->fields[k].type, true, err);
    if (rc == FERRY_OK) rc = ferry_schema_finish(s, err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_select(r, &cursor, 1, err);
    struct ferry_rw_limits lim = {.rows = 8192, .bytes = INT64_MAX};
    struct ferry_row_writer *rw =
        rc == FERRY_OK ? ferry__rw_new(s, cursor, lim, collect_max, m) : NULL;
    if (rc == FERRY_OK && rw == NULL) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_read_group(r, g, 0, rw, err);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    return rc;
}

static bool cursor_type(enum ferry_type t)
{
    return t == FERRY_TYPE_INT8 || t == FERRY_TYPE_INT16 || t == FERRY_TYPE_INT32 ||
           t == FERRY_TYPE_INT64 || t == FERRY_TYPE_DATE32 || t == FERRY_TYPE_TIMESTAMP_US ||
           t == FERRY_TYPE_TIMESTAMPTZ_US;
}

int ferry__parquet_cursor_groups(struct ferry_parquet_reader *r, const char *name,
                                 const struct ferry_parquet_floor *f, bool **want, int *n,
                                 int *skipped, int64_t *hi, bool *has_hi, struct ferry_error *err)
{
    *want = NULL;
    *n = 0;
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    int k = ferry_schema_find(fs, f->column);
    int ng = ferry__parquet_reader_num_groups(r);
    if (k < 0 || !cursor_type(fs->fields[k].type))
        return ferry_error_set(
            err, FERRY_ECONFIG, "parquet", "%s: the cursor column \"%s\" %s", name, f->column,
            k < 0 ? "is not in the file" : "is not an integer, date or timestamp column");
    bool *w = ferry_calloc((size_t)ng + 1, sizeof *w);
    if (w == NULL) return oom(err);
    int rc = FERRY_OK;
    for (int g = 0; g < ng && rc == FERRY_OK; g++) {
        struct col_max m = {0, false};
        m.any = ferry__parquet_reader_group_max(r, g, f->column, &m.max);
        bool from_stats = m.any;
        if (!from_stats && ferry__parquet_reader_group_rows(r, g) > 0)
            rc = decoded_max(r, g, f->column, &m, err);
        /* no usable statistics: read it anyway (its rows are filtered by the floor) */
        w[g] = !(from_stats && f->has_value && m.max <= f->value) &&
               ferry__parquet_reader_group_rows(r, g) > 0;
        if (from_stats && !w[g]) (*skipped)++;
        if (m.any && (!*has_hi || m.max > *hi)) {
            *hi = m.max;
            *has_hi = true;
        }
    }
    if (rc != FERRY_OK) {
        ferry_free(w);
        return rc;
    }
    *want = w;
    *n = ng;
    return FERRY_OK;
}

static bool value_excluded(int64_t v, bool has_min, int64_t min, bool has_max, int64_t max)
{
    return (has_min && v < min) || (has_max && v > max);
}

bool ferry__stats_excludes(const struct ferry_read_filter *f, bool has_min, int64_t min,
                           bool has_max, int64_t max)
{
    if (f->n_values < 1) return false;
    switch (f->op) {
    case FERRY_READ_FILTER_GREATER: /* x > v: none when max <= v */
        return has_max && max <= f->values[0];
    case FERRY_READ_FILTER_LESS: /* x < v: none when min >= v */
        return has_min && min >= f->values[0];
    case FERRY_READ_FILTER_EQUALS:
        return value_excluded(f->values[0], has_min, min, has_max, max);
    case FERRY_READ_FILTER_IN:
        for (int i = 0; i < f->n_values; i++)
            if (!value_excluded(f->values[i], has_min, min, has_max, max)) return false;
        return true;
    }
    return false;
}

bool ferry__parquet_group_filtered(struct ferry_parquet_reader *r, int g,
                                   const struct ferry_read_filter *f, int n)
{
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    for (int i = 0; i < n; i++) {
        int k = ferry_schema_find(fs, f[i].column);
        if (k < 0 || fs->fields[k].type != f[i].type) continue;
        int64_t mn = 0, mx = 0;
        bool has_min = ferry__parquet_reader_group_min(r, g, f[i].column, &mn);
        bool has_max = ferry__parquet_reader_group_max(r, g, f[i].column, &mx);
        if (ferry__stats_excludes(&f[i], has_min, mn, has_max, mx)) return true;
    }
    return false;
}
