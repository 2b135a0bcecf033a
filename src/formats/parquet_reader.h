/* formats/parquet_reader.h - a Parquet file decoder (engine-internal).
 *
 * Written from the Apache Parquet format specification. Reads the footer (Thrift compact
 * FileMetaData), maps each leaf column to a ferry type from its physical and logical
 * (or converted) type, and decodes row groups: data pages v1 and v2, PLAIN,
 * PLAIN_DICTIONARY/RLE_DICTIONARY, DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
 * DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT values, RLE/bit-packed definition levels, codecs
 * none, snappy, gzip and zstd. A nested top-level field (a group: LIST, MAP, struct; or a
 * REPEATED field) is one `json` field whose value is assembled from the repetition and
 * definition levels (docs/connectors.md "Nested fields" has the JSON mapping).
 * Unsigned 64-bit integers read as decimal128(20,0); nanosecond times and timestamps must
 * be whole microseconds (else an error naming the column); INTERVAL is refused.
 *
 * Every offset and length read from the file is checked against the buffer: malformed
 * input is FERRY_EINVAL naming the file and the byte offset, never a crash, so the memory
 * entry point can be fuzzed. Memory: the footer, one column chunk and one decoded row group
 * of the selected columns (plus the buffer itself for open_mem): files and objects are read
 * by ranges, footer first, then only the column chunks of the selected columns.
 * Used by `ferry verify` to read the files sink's Parquet datasets and by the files and s3
 * sources (shard = one row group). Not thread-safe. */
#ifndef FERRY_FORMATS_PARQUET_READER_H
#define FERRY_FORMATS_PARQUET_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/error.h"

struct ferry_parquet_reader;

/* Parses the footer of the n bytes at p (borrowed: they must outlive the reader). `name`
 * (copied) is used in messages. On failure *out is NULL. */
int ferry__parquet_reader_open_mem(const uint8_t *p, size_t n, const char *name,
                                   struct ferry_parquet_reader **out, struct ferry_error *err);
/* Reads the file at path by ranges (pread), as open_ranged. */
int ferry__parquet_reader_open_file(const char *path, struct ferry_parquet_reader **out,
                                    struct ferry_error *err);
/* Reads n bytes at off into p, or fails naming the object. */
typedef int (*ferry_parquet_read_at)(void *ctx, uint64_t off, size_t n, void *p,
                                     struct ferry_error *err);
/* An object of `size` bytes read through read_at (ctx borrowed): footer first, then column
 * chunks as they are decoded. */
int ferry__parquet_reader_open_ranged(uint64_t size, ferry_parquet_read_at read_at, void *ctx,
                                      const char *name, struct ferry_parquet_reader **out,
                                      struct ferry_error *err);
/* One field per top-level field, named as the file names it, nullable unless REQUIRED:
 * a flat column's type, or json for a nested field. */
const struct ferry_schema *ferry__parquet_reader_schema(const struct ferry_parquet_reader *r);
int64_t ferry__parquet_reader_num_rows(const struct ferry_parquet_reader *r);
/* Writes every row, in file order, as inserts into rw, whose schema must have the
 * selected fields in order (same types). Returns rw's codes (pause/cancel) too. */
int ferry__parquet_reader_read(struct ferry_parquet_reader *r, struct ferry_row_writer *rw,
                               struct ferry_error *err);
/* Reads (and writes to rw) only these top-level fields, in this order (names borrowed only for the
 * call); by default every column. FERRY_ENOTFOUND naming a missing column. */
int ferry__parquet_reader_select(struct ferry_parquet_reader *r, const char *const *names, int n,
                                 struct ferry_error *err);
/* The index (in the schema) of the top-level field whose SchemaElement.field_id is id, or
 * -1; *any: whether any top-level field of the file carries an id (Iceberg data files do). */
int ferry__parquet_reader_find_id(const struct ferry_parquet_reader *r, int32_t id, bool *any);
int ferry__parquet_reader_num_groups(const struct ferry_parquet_reader *r);
/* The largest value of field (a flat signed integer, date or timestamp column, as ferry
 * reads it) in row group g from the column chunk's statistics: true only when the file
 * gives an exact max_value of that column (not the deprecated max, not for unsigned or
 * INT96 columns), else false (the group must be read to know). */
bool ferry__parquet_reader_group_max(struct ferry_parquet_reader *r, int g, const char *field,
                                     int64_t *max);
/* The smallest value, from an exact min_value, the same way. */
bool ferry__parquet_reader_group_min(struct ferry_parquet_reader *r, int g, const char *field,
                                     int64_t *min);
/* From now on only rows whose value of field (one of the selected fields, as group_max
 * takes) is not null and above floor are written (a cursor's saved position); their
 * offsets stay their index in the group. select() clears it. */
int ferry__parquet_reader_set_floor(struct ferry_parquet_reader *r, const char *field,
                                    int64_t floor, struct ferry_error *err);
int64_t ferry__parquet_reader_group_rows(const struct ferry_parquet_reader *r, int g);
/* Writes the rows of row group g from row `skip` (0-based) on, the selected columns; each
 * row's offset (ferry_rw_set_offset) is its 1-based index in the group plus the offset
 * base (0 unless set: a shard of several groups counts on across them). */
void ferry__parquet_reader_set_offset_base(struct ferry_parquet_reader *r, int64_t base);
int ferry__parquet_reader_read_group(struct ferry_parquet_reader *r, int g, int64_t skip,
                                     struct ferry_row_writer *rw, struct ferry_error *err);
/* Ranged readers: the byte span read_group(g) fetches in one read_at call for the selected
 * columns (a caller may fetch it ahead, e.g. while group g - 1 is decoded); false when g is
 * read chunk by chunk instead (or the reader is not ranged). */
bool ferry__parquet_reader_group_span(const struct ferry_parquet_reader *r, int g, uint64_t *off,
                                      size_t *n);
/* Accepts NULL. */
void ferry__parquet_reader_free(struct ferry_parquet_reader *r);

#endif
