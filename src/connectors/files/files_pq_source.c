/* connectors/files/files_pq_source.c - `format: parquet` of the files source: the glue
 * between files_source.c (glob, plan, resume) and the Parquet decoder (parquet_reader.h).
 *
 * The schema is the first file's footer (every column nullable; a declared `schema:` is
 * refused, the footer already says). Each row group of each file is one shard; a batch
 * position is the number of the group's rows delivered, so a resumed shard decodes its
 * group again and skips them. Only the selected columns' chunks are read, by ranges
 * (pread): memory is one column chunk plus one decoded row group of the selected columns.
 * The reader of the file last read is kept by the source instance for the file's next
 * group (ferry__files_pq_keep): one footer parse and one set of buffers per file.
 * Every other file of the glob must have each selected column with the same type, else the
 * run stops naming the file and the column before writing anything of that file.
 * Cursor reads (mode: incremental with `cursor:`): a group whose cursor maximum from the
 * column statistics is at or below the saved cursor is not planned; the others are read with
 * the rows at or below it (or null) left out.
 * Calls parquet_reader.c; called by files_source.c. */
#include <inttypes.h>
#include <string.h>
#include "batch/builder.h"
#include "connectors/files/files_pq.h"
#include "formats/text.h"
#include "formats/parquet_cursor.h"
#include "formats/parquet_reader.h"

int ferry__files_pq_schema(const char *path, struct ferry_schema **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_parquet_reader *r = NULL;
    int rc = ferry__parquet_reader_open_file(path, &r, err);
    if (rc != FERRY_OK) return rc;
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    struct ferry_schema *s = ferry_schema_new();
    if (s == NULL) rc = ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
    for (int i = 0; s != NULL && i < fs->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &fs->fields[i];
        rc = ferry_schema_add_field(s, f->name, f->type, true, err);
        if (rc == FERRY_OK) {
            s->fields[i].precision = f->precision;
            s->fields[i].scale = f->scale;
        }
    }
    ferry__parquet_reader_free(r);
    if (rc != FERRY_OK) {
        ferry_schema_unref(s);
        return rc;
    }
    *out = s; /* not finished: the caller picks the selected columns from it */
    return FERRY_OK;
}

int ferry__files_pq_groups(const char *path, int *n, struct ferry_error *err)
{
    *n = 0;
    struct ferry_parquet_reader *r = NULL;
    int rc = ferry__parquet_reader_open_file(path, &r, err);
    if (rc != FERRY_OK) return rc;
    *n = ferry__parquet_reader_num_groups(r);
    ferry__parquet_reader_free(r);
    return FERRY_OK;
}

/* The file's column of each schema field, with the same type. */
static int check_columns(struct ferry_parquet_reader *r, const char *path,
                         const struct ferry_schema *schema, const char **names,
                         struct ferry_error *err)
{
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    for (int i = 0; i < schema->n_fields; i++) {
        const struct ferry_field *want = &schema->fields[i];
        names[i] = want->name;
        int k = ferry_schema_find(fs, want->name);
        if (k < 0)
            return ferry_error_set(err, FERRY_EINVAL, "files",
                                   "files source: %s has no column \"%s\" (the first file of the "
                                   "glob has it)",
                                   path, want->name);
        const struct ferry_field *got = &fs->fields[k];
        if (got->type != want->type || got->precision != want->precision ||
            got->scale != want->scale)
            return ferry_error_set(err, FERRY_EINVAL, "files",
                                   "files source: %s: column \"%s\" is %s, the first file of the "
                                   "glob has %s",
                                   path, want->name, ferry_type_name(got->type),
                                   ferry_type_name(want->type));
    }
    return FERRY_OK;
}

void ferry__files_pq_keep_release(struct ferry__files_pq_keep *keep)
{
    if (keep == NULL) return;
    ferry__parquet_reader_free(keep->r);
    ferry_free(keep->path);
    keep->r = NULL;
    keep->path = NULL;
}

/* keep's reader when it reads path, else a new one (kept in place of the old). The caller
 * checked that the file is the planned one (size, modification time) before. */
static int reader_for(struct ferry__files_pq_keep *keep, const char *path,
                      struct ferry_parquet_reader **r, struct ferry_error *err)
{
    if (keep != NULL && keep->r != NULL && strcmp(keep->path, path) == 0) {
        *r = keep->r;
        return FERRY_OK;
    }
    ferry__files_pq_keep_release(keep);
    int rc = ferry__parquet_reader_open_file(path, r, err);
    if (rc != FERRY_OK || keep == NULL) return rc;
    if ((keep->path = ferry_strdup(path)) == NULL) {
        ferry__parquet_reader_free(*r);
        *r = NULL;
        return ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
    }
    keep->r = *r;
    return FERRY_OK;
}

int ferry__files_pq_extract(struct ferry__files_pq_keep *keep, const char *path, int group,
                            const struct ferry_schema *schema, int64_t skip,
                            const struct ferry_parquet_floor *floor, struct ferry_row_writer *rw,
                            struct ferry_error *err)
{
    struct ferry_parquet_reader *r = NULL;
    int rc = reader_for(keep, path, &r, err);
    if (rc != FERRY_OK) return rc;
    const char **names = ferry_calloc((size_t)schema->n_fields + 1, sizeof *names);
    if (names == NULL)
        rc = ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
    if (rc == FERRY_OK) rc = check_columns(r, path, schema, names, err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_select(r, names, schema->n_fields, err);
    if (rc == FERRY_OK && group >= ferry__parquet_reader_num_groups(r))
        rc = ferry_error_set(err, FERRY_ESOURCE, "files",
                             "files source: %s has no row group %d any more (it was planned)", path,
                             group);
    if (rc == FERRY_OK && floor && floor->has_value)
        rc = ferry__parquet_reader_set_floor(r, floor->column, floor->value, err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_read_group(r, group, skip, rw, err);
    ferry_free(names);
    /* a reader that failed is not kept: the next shard starts from a fresh one */
    if (keep == NULL)
        ferry__parquet_reader_free(r);
    else if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED)
        ferry__files_pq_keep_release(keep);
    return rc;
}

/* ---- cursor reads ------------------------------------------------------------------------- */

int ferry__files_pq_cursor_groups(const char *path, const struct ferry_parquet_floor *f,
                                  bool **want, int *n, int *skipped, int64_t *hi, bool *has_hi,
                                  struct ferry_error *err)
{
    *want = NULL;
    *n = 0;
    struct ferry_parquet_reader *r = NULL;
    int rc = ferry__parquet_reader_open_file(path, &r, err);
    if (rc == FERRY_OK)
        rc = ferry__parquet_cursor_groups(r, path, f, want, n, skipped, hi, has_hi, err);
    ferry__parquet_reader_free(r);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "files source");
    return FERRY_OK;
}

int ferry__files_pq_filter_groups(const char *path, const struct ferry_read_filter *f, int nf,
                                  bool **want, int ng, int *skipped, struct ferry_error *err)
{
    if (*want == NULL) {
        *want = ferry_calloc((size_t)ng + 1, sizeof **want);
        if (*want == NULL)
            return ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
        for (int g = 0; g < ng; g++) (*want)[g] = true;
    }
    struct ferry_parquet_reader *r = NULL;
    int rc = ferry__parquet_reader_open_file(path, &r, err);
    for (int g = 0; rc == FERRY_OK && g < ng && g < ferry__parquet_reader_num_groups(r); g++)
        if ((*want)[g] && ferry__parquet_group_filtered(r, g, f, nf)) {
            (*want)[g] = false;
            (*skipped)++;
        }
    ferry__parquet_reader_free(r);
    return rc == FERRY_OK ? FERRY_OK : ferry_error_prefix(err, "files source");
}
