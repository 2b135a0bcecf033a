/* formats/parquet_writer.h - a streaming Parquet file encoder (engine-internal).
 *
 * Written from the Apache Parquet format specification. One writer produces one file:
 * open() writes the "PAR1" magic, write_batch() buffers rows into the current row group
 * and writes each row group out once its encoded size reaches row_group_bytes, close()
 * writes the last row group and the footer (Thrift compact FileMetaData). Bytes leave
 * only through the caller's `write` callback, in file order, never seeked.
 *
 * Memory: bounded by one row group. A writer holds at most row_group_bytes of encoded
 * (uncompressed) pages, plus per column one dictionary (<= dictionary_bytes of values
 * and its hash table) and one page being compressed; rows are taken in steps of at most
 * 4096 rows and ~1 MiB of var-width data, so a row group overshoots row_group_bytes by at
 * most one such step. Finished pages are kept compressed, in blocks of 128 KiB (no
 * realloc copies), so the row group's resident size is its compressed size plus the open
 * pages (one page_bytes buffer per column) and the dictionaries. docs/internals/parquet.md has the layout and type mapping.
 *
 * Every row of a batch is written whatever its operation byte (insert, update, delete):
 * the sink decides what a row means. Not thread-safe: one thread owns a writer.
 * Ownership: the writer takes a reference on the schema; batches are borrowed. */
#ifndef FERRY_FORMATS_PARQUET_WRITER_H
#define FERRY_FORMATS_PARQUET_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/error.h"
#include "formats/formats.h"

enum ferry_parquet_codec {
    FERRY_PARQUET_ZSTD = 0, /* default */
    FERRY_PARQUET_SNAPPY,
    FERRY_PARQUET_GZIP,
    FERRY_PARQUET_NONE
};

struct ferry_parquet_options {
    enum ferry_parquet_codec codec;
    int level;               /* codec level; 0 = codec default (zstd 3, gzip 6) */
    size_t row_group_bytes;  /* 0 = 32 MiB */
    size_t page_bytes;       /* target data page size before compression; 0 = 1 MiB */
    bool dictionary;         /* dictionary-encode byte-array (utf8, binary, json, decimal
                                text) and INT32/INT64/FLOAT/DOUBLE columns where it pays:
                                each chunk's first page decides (dictionary + indexes under
                                half the PLAIN bytes); ferry__parquet_options_default() sets it */
    size_t dictionary_bytes; /* a column falls back to PLAIN for the rest of the row group
                                once its dictionary would pass this; 0 = 4 MiB */
    const int32_t *field_ids; /* optional: one id per schema field, written as each column's
                                 SchemaElement.field_id (Iceberg data files); NULL = none.
                                 Read at open() only. */
};

/* zstd, 32 MiB row groups, 1 MiB pages, dictionary on with a 4 MiB limit. */
void ferry__parquet_options_default(struct ferry_parquet_options *o);
/* "zstd" | "snappy" | "gzip" | "none" (also "uncompressed"). FERRY_ECONFIG otherwise. */
int ferry__parquet_codec_from_name(const char *name, enum ferry_parquet_codec *out,
                                   struct ferry_error *err);

/* Receives the file's bytes in order. Returns FERRY_OK or a ferry code; the writer then
 * fails with that code and a message naming the failed write (the callback keeps its own
 * detail, e.g. the path and errno). */
typedef int (*ferry_parquet_write_fn)(void *ctx, const void *p, size_t n);

struct ferry_parquet_writer;

/* Checks that every field maps to Parquet (FERRY_EUNSUPPORTED names the column otherwise:
 * a decimal128 with a negative scale) and writes the leading magic. o may be NULL
 * (defaults). On failure *out is NULL. */
int ferry__parquet_open(const struct ferry_schema *schema, const struct ferry_parquet_options *o,
                        ferry_parquet_write_fn write, void *ctx, struct ferry_parquet_writer **out,
                        struct ferry_error *err);
/* Appends all rows of b. b's fields must match the schema (names and types);
 * a null in a non-nullable column is FERRY_EINVAL naming the column. After any error the
 * writer is unusable except for free(). */
int ferry__parquet_write_batch(struct ferry_parquet_writer *w, const struct ferry_batch *b,
                               struct ferry_error *err);
/* Writes the last row group and the footer; *bytes (may be NULL) gets the file size. */
int ferry__parquet_close(struct ferry_parquet_writer *w, int64_t *bytes, struct ferry_error *err);
/* Rows accepted and bytes handed to `write` so far (for part_rows / part_bytes). */
int64_t ferry__parquet_rows(const struct ferry_parquet_writer *w);
int64_t ferry__parquet_bytes_written(const struct ferry_parquet_writer *w);
/* After a successful close(): column col's statistics over the whole file, merged from its
 * column chunks' (the same values, null counts and bounds the footer carries; plus NaN
 * counts and the chunks' bytes). Binary bounds are missing (has_minmax false) when a chunk
 * held a value over 256 bytes. Pointers borrowed until free(). FERRY_EINVAL: no such col. */
int ferry__parquet_column_stats(const struct ferry_parquet_writer *w, int col,
                                struct ferry__files_column_stats *out);
/* Accepts NULL. Does not write anything: a file not closed is incomplete. */
void ferry__parquet_free(struct ferry_parquet_writer *w);

#endif
