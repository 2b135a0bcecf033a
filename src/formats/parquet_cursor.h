/* formats/parquet_cursor.h - the row groups a cursor read of one Parquet file needs, from the
 * column statistics (decoding the cursor column only where a group has none). Shared by the
 * files source (a local file) and the s3 source (an object read by ranges): both plan the
 * groups this returns and read them with ferry__parquet_reader_set_floor. */
#ifndef FERRY_FORMATS_PARQUET_CURSOR_H
#define FERRY_FORMATS_PARQUET_CURSOR_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"
#include "formats/parquet_reader.h"

/* A cursor read's saved position: rows whose `column` value is above `value` (when
 * has_value) are new. */
struct ferry_parquet_floor {
    const char *column;
    bool has_value;
    int64_t value;
};

/* For each of the *n row groups of r, want[g] (caller frees *want): false when the exact
 * statistics maximum of the cursor column is at or below the saved value (the group is
 * skipped; *skipped counts those) or when the group is empty. A group without usable
 * statistics is wanted, its cursor column decoded here to learn its maximum. *hi / *has_hi
 * grow to the file's largest cursor value. The cursor column must be an integer, date or
 * timestamp column: else FERRY_ECONFIG naming `name` (the file or object) and the column.
 * Leaves the reader's column selection changed: select again before reading. */
int ferry__parquet_cursor_groups(struct ferry_parquet_reader *r, const char *name,
                                 const struct ferry_parquet_floor *f, bool **want, int *n,
                                 int *skipped, int64_t *hi, bool *has_hi,
                                 struct ferry_error *err);

#endif
