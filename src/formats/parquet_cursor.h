/* formats/parquet_cursor.h - the row groups a cursor read of one Parquet file needs, from the
 * column statistics (decoding the cursor column only where a group has none), and the row
 * groups (or Iceberg data files) a `filter` transform provably rejects whole. Shared by the
 * files source (a local file), the s3 source (an object read by ranges) and the iceberg
 * source (manifest bounds): cursor groups are read with ferry__parquet_reader_set_floor. */
#ifndef FERRY_FORMATS_PARQUET_CURSOR_H
#define FERRY_FORMATS_PARQUET_CURSOR_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/connector.h"
#include "ferry/error.h"
#include "formats/parquet_reader.h"

/* A cursor read's saved position: rows whose `column` value is above `value` (when
 * has_value) are new. */
struct ferry_parquet_floor {
    const char *column;
    bool has_value;
    int64_t value;
};

/* A cursor read's saved position into f: the route checkpoint's {"cursor": "N"} (the files
 * and s3 sources' own object, not a checkpoint position; NULL on the first run, and a null
 * "cursor" while no row was seen leave f->has_value false). f->column is the resource's one
 * cursor column: FERRY_ECONFIG for more than one, FERRY_EINVAL for saved text that is no
 * cursor position (was the cursor added since?); errors name `source` and the resource. */
int ferry__parquet_saved_cursor(const struct ferry_resource_spec *spec,
                                const char *route_checkpoint, const char *source,
                                struct ferry_parquet_floor *f, struct ferry_error *err);

/* For each of the *n row groups of r, want[g] (caller frees *want): false when the exact
 * statistics maximum of the cursor column is at or below the saved value (the group is
 * skipped; *skipped counts those) or when the group is empty. A group without usable
 * statistics is wanted, its cursor column decoded here to learn its maximum. *hi / *has_hi
 * grow to the file's largest cursor value. The cursor column must be an integer, date or
 * timestamp column: else FERRY_ECONFIG naming `name` (the file or object) and the column.
 * Leaves the reader's column selection changed: select again before reading. */
int ferry__parquet_cursor_groups(struct ferry_parquet_reader *r, const char *name,
                                 const struct ferry_parquet_floor *f, bool **want, int *n,
                                 int *skipped, int64_t *hi, bool *has_hi, struct ferry_error *err);

/* Whether no value in [min, max] can pass filter f (connector.h, ferry_read_filter; a
 * bound not known: has_min / has_max false). NULLs never pass such a filter, so a range
 * that excludes every constant excludes the whole group or file. */
bool ferry__stats_excludes(const struct ferry_read_filter *f, bool has_min, int64_t min,
                           bool has_max, int64_t max);
/* Whether the exact statistics of row group g of r prove that no row passes all of the n
 * filters (a filter on a column the file lacks, or of another type, proves nothing). */
bool ferry__parquet_group_filtered(struct ferry_parquet_reader *r, int g,
                                   const struct ferry_read_filter *f, int n);

#endif
