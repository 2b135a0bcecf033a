/* formats/formats.h - the format writers (CSV, JSON Lines, Parquet) as an engine-internal
 * interface shared by the sinks that write files: `files` (local folder), `s3` (object
 * storage) and `iceberg` (Parquet data files). Implemented in src/formats/ (text_write.c,
 * parquet_format.c, parquet_writer.c), which calls nothing above core/ and batch/
 * (docs/internals/formats.md). Names keep the ferry__files_ prefix they had when the
 * writers lived in the files connector. */
#ifndef FERRY_FORMATS_FORMATS_H
#define FERRY_FORMATS_FORMATS_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"
#include <jansson.h>

/* ---- format writers (sink side) --------------------------------------------------------
 *
 * A format writer turns batches into the bytes of one part file. It never touches the file
 * system: it hands every byte to `out`, which the sink writes to the part's temporary file
 * while computing the CRC32-C of exactly those bytes. So a new format (Parquet:
 * parquet_writer.{h,c}) plugs in by defining one `struct ferry__files_format` and adding it
 * to ferry__files_formats[]; nothing else in the sink changes. */

struct ferry__files_out {
    int (*write)(void *ctx, const void *p, size_t n, struct ferry_error *err);
    void *ctx;
};

struct ferry__files_format_opts {
    char delimiter;          /* csv */
    const char *null_marker; /* csv: text of a NULL (default "": an empty unquoted field) */
    bool header;             /* csv */
    bool crlf;               /* csv: records end with CRLF (RFC 4180) or LF */
    void *conf;              /* what the format's configure() made of the sink section */
    const int32_t *field_ids; /* parquet: optional field id per schema field (iceberg) */
};

/* Statistics of one column over a whole finished part. Bounds compare like the column's
 * Parquet sort order: signed integers, IEEE floats without NaN, signed decimals, unsigned
 * bytes (utf8, binary, json, decimal text, uuid). */
struct ferry__files_column_stats {
    int64_t values, nulls, nans; /* values counts nulls; nans: float columns only */
    int64_t bytes;               /* the column's chunks in the file (compressed, with headers) */
    bool has_minmax; /* false: no non-null non-NaN value, or a var-width value was too long
                        for the format to keep exact bounds of its chunk */
    int64_t min_i, max_i;                  /* bool (0/1), integers, dates, times, timestamps */
    double min_f, max_f;                   /* float32 (widened), float64 */
    struct ferry_decimal128 min_d, max_d;  /* decimal128 */
    const uint8_t *min_b, *max_b;          /* var-width and uuid: exact, borrowed until free */
    size_t min_n, max_n;
};

struct ferry__files_format {
    const char *name; /* the pipeline file's `format:` */
    const char *ext;  /* file name extension without the dot */
    /* true: write_batch hands `out` exactly the bytes of that batch's rows (CSV, JSON Lines),
     * so a sink reports their CRC32-C as the batch's encoded CRC; false: rows wait in the
     * writer for a later unit (a Parquet row group holds many batches), no per-batch encoded
     * CRC exists and the sink claims none (the part's CRC32-C in the manifest covers the
     * file's bytes). */
    bool per_batch_bytes;
    /* optional: reads the format's own keys of the sink section (compression, row group
     * size...) at sink open, before unknown keys are refused; *conf reaches open_part as
     * opts->conf and is freed with conf_free. */
    int (*configure)(struct ferry_cfg *cfg, void **conf, struct ferry_error *err);
    void (*conf_free)(void *conf);
    /* Starts a part for `schema` (borrowed until free); may write a header through out. */
    int (*open_part)(const struct ferry__files_format_opts *opts, const struct ferry_schema *schema,
                     struct ferry__files_out out, void **state, struct ferry_error *err);
    /* Encodes every row of b (borrowed for the call only). */
    int (*write_batch)(void *state, const struct ferry_batch *b, struct ferry_error *err);
    /* Writes what the part still holds (a footer) and returns the part's total bytes. */
    int (*finish_part)(void *state, int64_t *bytes_written, struct ferry_error *err);
    void (*free)(void *state);
    /* optional (parquet): after finish_part, the statistics of column col over the whole
     * part, as the format computed them for its own metadata (iceberg manifests). */
    int (*column_stats)(void *state, int col, struct ferry__files_column_stats *out);
};

extern const struct ferry__files_format ferry__files_csv;
extern const struct ferry__files_format ferry__files_jsonl;
extern const struct ferry__files_format ferry__files_parquet; /* parquet_format.c */
/* NULL-terminated, looked up by name. */
const struct ferry__files_format *ferry__files_format_find(const char *name);
const char *const *ferry__files_format_names(void);

/* ---- the run manifest (formats/manifest.c), shared by the files and s3 sinks ----
 * {"manifest_version":1,"pipeline":…,"pipeline_version":…[,EXTRA_KEY:…],"run_id":…,
 *  "attempt":…,"format":…,"committed_at":…,LIST_KEY:[earlier entries…, new items…],"rows":N}
 * `earlier` (may be NULL) holds entries of earlier commits of the run, copied as they are. */
struct ferry__manifest_item {
    const char *table;
    const char *name; /* path (files) or object key (s3) */
    int64_t rows, bytes;
    uint32_t crc;
};
struct ferry__manifest_head {
    const char *pipeline, *version;
    const char *extra_key, *extra_value; /* one more string field, or NULL */
    int64_t run_id;
    int attempt;
    const char *format;
    const char *list_key; /* "files" | "objects" */
    const char *name_key; /* "path" | "key" */
};
/* Appends the manifest text to b; item(ctx, i, &out) fills the i-th new item. */
int ferry__manifest_text(struct ferry_buf *b, const struct ferry__manifest_head *h, json_t *earlier,
                         int n, void (*item)(const void *ctx, int i, struct ferry__manifest_item *out),
                         const void *ctx);

#endif
