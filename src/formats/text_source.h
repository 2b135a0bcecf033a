/* formats/text_source.h - CSV and JSON Lines as a source (text_source.c), shared by
 * the files source and the s3 source: the options, the schema (declared or inferred from
 * the first object) and the record loop of one object. Each function that takes an input
 * owns it from then on (closed before it returns, on every path). Errors name `name` (a
 * path or s3://bucket/key), line and column. */
#ifndef FERRY_FORMATS_TEXT_SOURCE_H
#define FERRY_FORMATS_TEXT_SOURCE_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/error.h"
#include "formats/text.h"

struct ferry__text_src {
    int format; /* enum ferry__files_fmt, or -1: from the name */
    bool header;
    struct ferry__files_csv_opts csv;
    char *null_marker;
    bool skip;       /* on_error: skip */
    bool skip_blank; /* skip_blank_lines: true; else a blank line is a record (RFC 4180) */
    int64_t sample_rows;
    int compression; /* 0 auto (from the bytes); 1 none, 2 gzip, 3 zstd: the bytes must be */
};

/* The keys format, compression, header, delimiter, quote, escape, null, skip_blank_lines,
 * on_error, sample_rows of a source config. release frees what open allocated. */
int ferry__text_src_open(struct ferry_cfg *cfg, struct ferry__text_src *t, struct ferry_error *err);
void ferry__text_src_release(struct ferry__text_src *t);
/* csv, jsonl or parquet: the configured one, else from the name (.parquet; .jsonl, .ndjson,
 * .json; else csv; a .gz / .zst suffix aside). */
enum ferry__files_fmt ferry__text_format_of(const struct ferry__text_src *t, const char *name);
const char *ferry__text_format_word(enum ferry__files_fmt f);
/* The resource's declared `schema:` node, or NULL. */
struct ferry_cfg *ferry__text_declared(const struct ferry_resource_spec *spec);

/* Every column (not finished): declared on the resource, else inferred from `in`'s first
 * sample_rows records. */
int ferry__text_schema(const struct ferry__text_src *t, const struct ferry_resource_spec *spec,
                       struct ferry__files_input *in, const char *name, struct ferry_schema **out,
                       struct ferry_error *err);
/* The resource's selected columns of `all`, in their order, every one nullable, its key
 * marked; finished. `who` ("files", "s3") names the source in errors. */
int ferry__text_select(const struct ferry_schema *all, const struct ferry_resource_spec *spec,
                       const char *who, struct ferry_schema **out, struct ferry_error *err);
/* The records of `in` after decompressed offset `start` (a position the row writer was
 * given earlier), as rows of `schema`, positions set to the next record's offset; on_error:
 * skip counts and reports the bad records of the whole object. */
int ferry__text_extract(const struct ferry__text_src *t, const struct ferry_resource_spec *spec,
                        const struct ferry_schema *schema, struct ferry__files_input *in,
                        const char *name, int shard, int64_t start, struct ferry_row_writer *rw,
                        struct ferry_error *err);

#endif
