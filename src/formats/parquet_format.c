/* formats/parquet_format.c - `format: parquet` of the files sink: the glue between
 * the sink's format interface (files.h) and the Parquet encoder (parquet_writer.h).
 *
 * Owns the format's configuration (compression, row_group_bytes, dictionary) and, per part,
 * one parquet writer plus the adapter that hands its bytes to the sink's out callback. The
 * encoder's write callback has no error argument while the sink's has one carrying the path
 * and errno: the adapter keeps the sink's error and puts it back in place of the encoder's
 * generic "writing N bytes failed", so a full disk still names the file. Every byte goes
 * through out.write, so the part CRC32-C and the manifest cover exactly the file. A part is
 * one complete Parquet file: finish_part writes the last row group and the footer.
 * Calls parquet_writer.c and the config accessors; called by files_sink.c through
 * ferry__files_formats (text_write.c). */
#include <string.h>
#include "formats/text.h"
#include "formats/parquet_writer.h"

/* Same order as enum ferry_parquet_codec. */
static const char *const codec_words[] = {"zstd", "snappy", "gzip", "none", NULL};

struct pq_part {
    struct ferry__files_out out;
    struct ferry_error out_err; /* what the sink's write said when it failed */
    struct ferry_parquet_writer *w;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "files", "files sink: out of memory");
}

static int pq_configure(struct ferry_cfg *cfg, void **conf, struct ferry_error *err)
{
    struct ferry_parquet_options o;
    ferry__parquet_options_default(&o);
    int codec = (int)o.codec;
    int64_t rg = o.row_group_bytes ? (int64_t)o.row_group_bytes : INT64_C(32) << 20;
    bool dict = o.dictionary;
    int rc = ferry_cfg_enum(cfg, "compression", false, codec_words, &codec, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "row_group_bytes", false, &rg, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "dictionary", false, &dict, err);
    if (rc != FERRY_OK) return rc;
    /* Below 64 KiB a group holds too few rows to be worth its footer entry; the bound is a
     * memory setting, and SIZE_MAX-sized groups would make it meaningless. */
    if (rg < (INT64_C(64) << 10) || rg > (INT64_C(4) << 30))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "row_group_bytes"),
                               "must be between 64KiB and 4GiB");
    struct ferry_parquet_options *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) return nomem(err);
    *c = o;
    c->codec = (enum ferry_parquet_codec)codec;
    c->row_group_bytes = (size_t)rg;
    c->dictionary = dict;
    *conf = c;
    return FERRY_OK;
}

static void pq_conf_free(void *conf)
{
    ferry_free(conf);
}

static int pq_out(void *ctx, const void *p, size_t n)
{
    struct pq_part *pp = ctx;
    return pp->out.write(pp->out.ctx, p, n, &pp->out_err);
}

/* The encoder's error, replaced by the sink's own when a write was what failed. */
static int pq_error(struct pq_part *pp, int rc, struct ferry_error *err)
{
    if (pp->out_err.code != FERRY_OK && err != NULL) *err = pp->out_err;
    return pp->out_err.code != FERRY_OK ? pp->out_err.code : rc;
}

static void pq_free(void *state)
{
    struct pq_part *pp = state;
    if (pp == NULL) return;
    ferry__parquet_free(pp->w);
    ferry_free(pp);
}

static int pq_open(const struct ferry__files_format_opts *opts, const struct ferry_schema *schema,
                   struct ferry__files_out out, void **state, struct ferry_error *err)
{
    struct pq_part *pp = ferry_calloc(1, sizeof *pp);
    if (pp == NULL) return nomem(err);
    pp->out = out;
    const struct ferry_parquet_options *po = opts->conf;
    struct ferry_parquet_options with_ids;
    if (opts->field_ids != NULL) { /* iceberg data files: the options plus field ids */
        if (po != NULL)
            with_ids = *po;
        else
            ferry__parquet_options_default(&with_ids);
        with_ids.field_ids = opts->field_ids;
        po = &with_ids;
    }
    int rc = ferry__parquet_open(schema, po, pq_out, pp, &pp->w, err);
    if (rc != FERRY_OK) {
        rc = pq_error(pp, rc, err);
        pq_free(pp);
        return rc;
    }
    *state = pp;
    return FERRY_OK;
}

static int pq_write(void *state, const struct ferry_batch *b, struct ferry_error *err)
{
    struct pq_part *pp = state;
    int rc = ferry__parquet_write_batch(pp->w, b, err);
    return rc == FERRY_OK ? FERRY_OK : pq_error(pp, rc, err);
}

static int pq_finish(void *state, int64_t *bytes_written, struct ferry_error *err)
{
    struct pq_part *pp = state;
    int rc = ferry__parquet_close(pp->w, bytes_written, err);
    return rc == FERRY_OK ? FERRY_OK : pq_error(pp, rc, err);
}

static int pq_column_stats(void *state, int col, struct ferry__files_column_stats *out)
{
    struct pq_part *pp = state;
    return ferry__parquet_column_stats(pp->w, col, out);
}

const struct ferry__files_format ferry__files_parquet = {
    .name = "parquet",
    .ext = "parquet",
    .per_batch_bytes = false, /* rows become bytes when their row group is written */
    .configure = pq_configure,
    .conf_free = pq_conf_free,
    .open_part = pq_open,
    .write_batch = pq_write,
    .finish_part = pq_finish,
    .free = pq_free,
    .column_stats = pq_column_stats,
};
