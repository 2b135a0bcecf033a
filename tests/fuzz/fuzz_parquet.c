/* tests/fuzz/fuzz_parquet.c - the Parquet reader (src/formats/parquet_reader.c, what
 * `ferry verify` reads Parquet destinations with) on arbitrary bytes: footer, Thrift metadata,
 * page headers, levels (nested fields' record assembly too), dictionaries, every codec,
 * and the column statistics of cursor reads. Rows go to a row writer whose batches are
 * dropped, so the builders see whatever the reader decodes. */
#include <stdint.h>
#include "batch/builder.h"
#include "formats/parquet_reader.h"
#include "fuzz.h"

static int drop(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    (void)err;
    ferry_batch_unref(b);
    return FERRY_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ferry_parquet_reader *r = NULL;
    struct ferry_error err = {0};
    if (ferry__parquet_reader_open_mem(data, size, "fuzz.parquet", &r, &err) != FERRY_OK) return 0;
    struct ferry_schema *s = ferry_schema_ref((struct ferry_schema *)ferry__parquet_reader_schema(r));
    /* the column statistics cursor reads use (a max of every field of every group) */
    for (int g = 0; g < ferry__parquet_reader_num_groups(r) && g < 64; g++)
        for (int i = 0; i < s->n_fields; i++) {
            int64_t max;
            (void)ferry__parquet_reader_group_max(r, g, s->fields[i].name, &max);
        }
    struct ferry_rw_limits lim = {.rows = 512, .bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, drop, NULL);
    if (rw != NULL) {
        if (ferry__parquet_reader_read(r, rw, &err) == FERRY_OK && ferry_rw_flush(rw, false, &err) != FERRY_OK) {
            /* a refused value is a finding of the reader only when it crashes */
        }
        ferry__rw_free(rw);
    }
    ferry_schema_unref(s);
    ferry__parquet_reader_free(r);
    return 0;
}
