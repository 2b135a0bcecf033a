/* formats/text.h - the text formats' read side and helpers: the input stream (plain, gzip,
 * zstd; input.c), the CSV / JSON Lines record readers (text_read.c) and the shortest float
 * text (text_write.c). Used by the files source, verify's file side, the unit tests and the
 * fuzz targets (docs/internals/formats.md). */
#ifndef FERRY_FORMATS_TEXT_H
#define FERRY_FORMATS_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ferry/batch.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"

/* The format writers (struct ferry__files_format, csv, jsonl, the table) live in
 * formats/formats.h, shared with the s3 sink. */
#include "formats/formats.h"

/* Shortest text that reads back to the same float64 / float32 ("NaN", "Infinity",
 * "-Infinity" for the specials). buf >= 32 bytes. Returns the length. */
int ferry__files_float_text(double v, bool single, char *buf, size_t len);

/* ---- input (source side) ---------------------------------------------------------------
 *
 * A file read as a stream of decompressed bytes: the compression is recognised from the
 * magic bytes (gzip 1f 8b, zstd 28 b5 2f fd), not the name. Offsets are in the decompressed
 * stream, so a position is the same whether the file is compressed or not. */

struct ferry__files_input;

int ferry__files_input_open(const char *path, struct ferry__files_input **in,
                            struct ferry_error *err);
/* The same over raw bytes from a callback (the s3 source's object stream): fn fills up to
 * cap bytes, *n = 0 at the end; its errors name the object. `name` is used in errors. */
typedef int (*ferry__files_raw_fn)(void *ctx, void *p, size_t cap, size_t *n,
                                   struct ferry_error *err);
int ferry__files_input_open_fn(const char *name, ferry__files_raw_fn fn, void *ctx,
                               struct ferry__files_input **in, struct ferry_error *err);
/* Up to cap bytes into p; *n = 0 at the end. */
int ferry__files_input_read(struct ferry__files_input *in, void *p, size_t cap, size_t *n,
                            struct ferry_error *err);
const char *ferry__files_input_kind(const struct ferry__files_input *in); /* plain|gzip|zstd */
void ferry__files_input_close(struct ferry__files_input *in);

/* ---- records ----------------------------------------------------------------------------
 *
 * Both parsers read records from an input into reused buffers (no allocation per record
 * once the buffers have grown to the longest record). A record is a list of fields; each
 * field is a NUL-terminated text in `text` with a flag: null, and for JSON its kind. */

enum ferry__files_kind {
    FILES_KIND_NULL = 0,
    FILES_KIND_STRING, /* CSV: every non-null field; JSON: a string */
    FILES_KIND_NUMBER,
    FILES_KIND_BOOL,
    FILES_KIND_NESTED, /* JSON object or array, kept as its text */
};

struct ferry__files_field {
    size_t off, len; /* into the reader's text buffer */
    enum ferry__files_kind kind;
    int64_t column; /* 1-based character column where the field starts */
    int64_t line;   /* line where the field starts */
    bool quoted;    /* CSV: written in quotes (never NULL, never a blank line) */
};

struct ferry__files_csv_opts {
    char delimiter;          /* ',' */
    char quote;              /* '"'; 0 = no quoting */
    char escape;             /* 0 = quotes are doubled; else this byte escapes the next one */
    const char *null_marker; /* an unquoted field equal to this is NULL ("" by default) */
};

enum ferry__files_fmt { FILES_FMT_CSV = 0, FILES_FMT_JSONL = 1, FILES_FMT_PARQUET = 2 };


struct ferry__files_reader;

/* Reads from `in` (borrowed). `name` is used in errors ("in/a.csv:12:5: ..."). */
struct ferry__files_reader *ferry__files_reader_new(enum ferry__files_fmt fmt,
                                                    const struct ferry__files_csv_opts *csv,
                                                    struct ferry__files_input *in,
                                                    const char *name);
void ferry__files_reader_free(struct ferry__files_reader *r);

/* The next record. *eof at the end (no record). CSV: fields in file order. JSONL: fields
 * in the order of `keys` (set with ferry__files_reader_set_keys; a key absent from the
 * line is a NULL field); unknown keys are ignored. Errors (FERRY_EINVAL) name
 * file:line:column; the reader then stands at the next record, so a caller that skips
 * bad records may go on reading. */
int ferry__files_reader_next(struct ferry__files_reader *r, bool *eof, struct ferry_error *err);
/* JSONL: the keys to extract, borrowed. With n = 0 every key is collected in line order
 * (names in the text buffer: field 2i is the name, 2i+1 the value), for inference. */
void ferry__files_reader_set_keys(struct ferry__files_reader *r, const char *const *keys, int n);
int ferry__files_reader_nfields(const struct ferry__files_reader *r);
const struct ferry__files_field *ferry__files_reader_field(const struct ferry__files_reader *r,
                                                           int i);
const char *ferry__files_reader_text(const struct ferry__files_reader *r,
                                     const struct ferry__files_field *f);
/* Byte offset just after the last record read (where the next one starts), and its line. */
int64_t ferry__files_reader_offset(const struct ferry__files_reader *r);
int64_t ferry__files_reader_line(const struct ferry__files_reader *r);
/* Discards input until offset `n` (a record boundary this reader reported earlier). */
int ferry__files_reader_skip_to(struct ferry__files_reader *r, int64_t n, struct ferry_error *err);

#endif
