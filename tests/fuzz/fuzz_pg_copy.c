/* tests/fuzz/fuzz_pg_copy.c - the PostgreSQL COPY binary decoder
 * (src/connectors/postgres/pg_copy.c) on arbitrary bytes: header, tuples of every natively
 * decoded type (numeric both as decimal text and as decimal128 with a scale), trailer. The
 * first byte picks the column set (all types, or one type alone so that short inputs reach
 * deep) and the second where the stream is split in two chunks (the carry-over path). Batches
 * are built by the real row writer and checked with the digest. */
#include "batch/builder.h"
#include "connectors/postgres/pg_copy.h"
#include "ferry/digest.h"
#include "fuzz.h"

static const struct ferry_pg_copy_col all_cols[] = {
    {"b", FERRY_PG_W_BOOL, FERRY_TYPE_BOOL, 0, 0},
    {"i2", FERRY_PG_W_INT2, FERRY_TYPE_INT16, 0, 0},
    {"i4", FERRY_PG_W_INT4, FERRY_TYPE_INT32, 0, 0},
    {"i8", FERRY_PG_W_INT8, FERRY_TYPE_INT64, 0, 0},
    {"o", FERRY_PG_W_OID, FERRY_TYPE_INT64, 0, 0},
    {"f4", FERRY_PG_W_FLOAT4, FERRY_TYPE_FLOAT32, 0, 0},
    {"f8", FERRY_PG_W_FLOAT8, FERRY_TYPE_FLOAT64, 0, 0},
    {"n", FERRY_PG_W_NUMERIC, FERRY_TYPE_DECIMAL_TEXT, 0, 0},
    {"n2", FERRY_PG_W_NUMERIC, FERRY_TYPE_DECIMAL128, 12, 2},
    {"t", FERRY_PG_W_TEXT, FERRY_TYPE_UTF8, 0, 0},
    {"by", FERRY_PG_W_BYTEA, FERRY_TYPE_BINARY, 0, 0},
    {"d", FERRY_PG_W_DATE, FERRY_TYPE_DATE32, 0, 0},
    {"tm", FERRY_PG_W_TIME, FERRY_TYPE_TIME64_US, 0, 0},
    {"ts", FERRY_PG_W_TIMESTAMP, FERRY_TYPE_TIMESTAMP_US, 0, 0},
    {"tz", FERRY_PG_W_TIMESTAMPTZ, FERRY_TYPE_TIMESTAMPTZ_US, 0, 0},
    {"u", FERRY_PG_W_UUID, FERRY_TYPE_UUID, 0, 0},
    {"jb", FERRY_PG_W_JSONB, FERRY_TYPE_JSON, 0, 0},
};
#define NALL ((int)(sizeof all_cols / sizeof all_cols[0]))

static int drop(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    (void)err;
    (void)ferry_batch_digest(b);
    ferry_batch_unref(b);
    return FERRY_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int pick = data[0] % (NALL + 1);
    const struct ferry_pg_copy_col *cols = pick == NALL ? all_cols : &all_cols[pick];
    int n = pick == NALL ? NALL : 1;
    size_t split = data[1];
    data += 2;
    size -= 2;
    if (split > size) split = size;

    struct ferry_schema *s = ferry_schema_new();
    for (int i = 0; i < n; i++) {
        if (ferry_schema_add_field(s, cols[i].name, cols[i].type, true, NULL) != FERRY_OK) {
            ferry_schema_unref(s);
            return 0;
        }
        s->fields[i].precision = cols[i].precision;
        s->fields[i].scale = cols[i].scale;
    }
    if (ferry_schema_finish(s, NULL) != FERRY_OK) {
        ferry_schema_unref(s);
        return 0;
    }
    struct ferry_rw_limits lim = {.rows = 64, .bytes = 1 << 20, .max_value_bytes = 1 << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "fuzz", lim, drop, NULL);
    struct ferry_pg_copy d;
    struct ferry_error err;
    ferry__pg_copy_init(&d, cols, n, "fuzz");
    int rc = ferry__pg_copy_feed(&d, data, split, rw, &err);
    if (rc == FERRY_OK) rc = ferry__pg_copy_feed(&d, data + split, size - split, rw, &err);
    if (rc == FERRY_OK) rc = ferry__pg_copy_finish(&d, &err);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, &err);
    ferry__pg_copy_release(&d);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    return 0;
}
