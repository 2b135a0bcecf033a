/* connectors/files/files_pq.h - the files source's Parquet input (files_pq_source.c), over
 * the Parquet reader of src/formats/. */
#ifndef FERRY_CONNECTORS_FILES_PQ_H
#define FERRY_CONNECTORS_FILES_PQ_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/error.h"
#include "formats/parquet_cursor.h"
#include "formats/parquet_reader.h"

/* ---- parquet (files_pq_source.c) ---------------------------------------------------------
 * The schema of a Parquet file's footer (every field nullable, not finished); its row
 * group count (a shard each); one row group's rows from `skip` on, the columns of `schema`
 * (checked by name and type against the file). Errors name the file. */
int ferry__files_pq_schema(const char *path, struct ferry_schema **out, struct ferry_error *err);
int ferry__files_pq_groups(const char *path, int *n, struct ferry_error *err);
/* floor: NULL, or a cursor read: only rows whose `floor->column` value is above
 * floor->value (when has_value) are written (formats/parquet_cursor.h). */
/* The reader of the file last extracted, kept for its next row group (one footer parse
 * and one set of decode buffers per file and reader thread, not per shard). keep may be
 * NULL; release accepts an empty one. */
struct ferry__files_pq_keep {
    char *path;
    struct ferry_parquet_reader *r;
};
void ferry__files_pq_keep_release(struct ferry__files_pq_keep *keep);
int ferry__files_pq_extract(struct ferry__files_pq_keep *keep, const char *path, int group,
                            const struct ferry_schema *schema, int64_t skip,
                            const struct ferry_parquet_floor *floor, struct ferry_row_writer *rw,
                            struct ferry_error *err);

/* A cursor read's plan of one file: want[g] says whether row group g is read. A group is
 * skipped when the saved cursor (f->has_value) is at or above its maximum from the column
 * statistics (exact ones only, parquet_reader.h); groups without usable statistics are
 * read (their cursor column decoded here) to learn their maximum. *hi / *has_hi: the
 * largest cursor value of the file's rows. *skipped counts the skipped groups. */
int ferry__files_pq_cursor_groups(const char *path, const struct ferry_parquet_floor *f,
                                  bool **want, int *n, int *skipped, int64_t *hi, bool *has_hi,
                                  struct ferry_error *err);

/* A read under `filter` transforms (f, nf: the read context's filters): clears want[g] of
 * every row group of path whose statistics prove no row passes (parquet_cursor.h), counting
 * them in *skipped. *want (ng entries) is allocated all true when NULL. */
int ferry__files_pq_filter_groups(const char *path, const struct ferry_read_filter *f, int nf,
                                  bool **want, int ng, int *skipped, struct ferry_error *err);

#endif
