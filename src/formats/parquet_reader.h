/* formats/parquet_reader.h - a Parquet file decoder for flat schemas
 * (engine-internal).
 *
 * Written from the Apache Parquet format specification. Reads the footer (Thrift compact
 * FileMetaData), maps each leaf column to a ferry type from its physical and logical
 * (or converted) type, and decodes row groups: data pages v1 and v2, PLAIN and
 * PLAIN_DICTIONARY/RLE_DICTIONARY values, RLE/bit-packed definition levels, codecs none,
 * snappy, gzip and zstd. Nested schemas (groups, repeated fields) are refused.
 *
 * Every offset and length read from the file is checked against the buffer: malformed
 * input is FERRY_EINVAL naming the file and the byte offset, never a crash, so the memory
 * entry point can be fuzzed. Memory: the file (or buffer) plus one decoded row group.
 * Used by `ferry verify` to read the files sink's Parquet datasets. Not thread-safe. */
#ifndef FERRY_FORMATS_PARQUET_READER_H
#define FERRY_FORMATS_PARQUET_READER_H

#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/error.h"

struct ferry_parquet_reader;

/* Parses the footer of the n bytes at p (borrowed: they must outlive the reader). `name`
 * (copied) is used in messages. On failure *out is NULL. */
int ferry__parquet_reader_open_mem(const uint8_t *p, size_t n, const char *name,
                                   struct ferry_parquet_reader **out, struct ferry_error *err);
/* Reads the whole file at path into memory, then as open_mem. */
int ferry__parquet_reader_open_file(const char *path, struct ferry_parquet_reader **out,
                                    struct ferry_error *err);
/* One field per leaf column, named as the file names it, nullable unless REQUIRED. */
const struct ferry_schema *ferry__parquet_reader_schema(const struct ferry_parquet_reader *r);
int64_t ferry__parquet_reader_num_rows(const struct ferry_parquet_reader *r);
/* Writes every row, in file order, as inserts into rw, whose schema must have the
 * reader's fields in order (same types). Returns rw's codes (pause/cancel) too. */
int ferry__parquet_reader_read(struct ferry_parquet_reader *r, struct ferry_row_writer *rw,
                               struct ferry_error *err);
/* Accepts NULL. */
void ferry__parquet_reader_free(struct ferry_parquet_reader *r);

#endif
