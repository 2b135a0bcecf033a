/* bench/bench_builder.c - rows/s of the row writer (the builder hot path).
 *
 * Appends N rows (default 10 million) of 10 columns - int64, int32, int16, utf8 x2,
 * timestamptz, decimal128(12,2), nullable float64 (1 row in 10 null), bool, date32 - into
 * a row writer with the default limits (50000 rows, 4 MiB) and an emit that only drops
 * the batch. What it measures is the source-facing cost per row: the appends, the row
 * end, the batch closes and the position JSON. Build with the bench preset (Release).
 *
 *   bench_builder [rows]        prints one line: rows, seconds, rows/s, MB/s, batches */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/core.h"

static int64_t batches;
static int64_t bytes;

static int drop(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    (void)err;
    batches++;
    bytes += (int64_t)b->bytes;
    ferry_batch_unref(b);
    return FERRY_OK;
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 1 ? strtoll(argv[1], NULL, 10) : INT64_C(10000000);
    struct ferry_error err;
    struct ferry_schema *s = ferry_schema_new();
    static const struct {
        const char *name;
        enum ferry_type type;
        bool nullable;
    } cols[] = {
        {"id", FERRY_TYPE_INT64, false},         {"qty", FERRY_TYPE_INT32, true},
        {"code", FERRY_TYPE_INT16, true},        {"name", FERRY_TYPE_UTF8, true},
        {"email", FERRY_TYPE_UTF8, true},        {"created", FERRY_TYPE_TIMESTAMPTZ_US, true},
        {"amount", FERRY_TYPE_DECIMAL128, true}, {"score", FERRY_TYPE_FLOAT64, true},
        {"active", FERRY_TYPE_BOOL, true},       {"day", FERRY_TYPE_DATE32, true},
    };
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        if (ferry_schema_add_field(s, cols[i].name, cols[i].type, cols[i].nullable, &err) !=
            FERRY_OK) {
            fprintf(stderr, "bench_builder: %s\n", err.message);
            return 1;
        }
    }
    s->fields[6].precision = 12;
    s->fields[6].scale = 2;
    s->fields[0].key_pos = 1;
    if (ferry_schema_finish(s, &err) != FERRY_OK) {
        fprintf(stderr, "bench_builder: %s\n", err.message);
        return 1;
    }

    /* Values prepared up front so that the loop measures the writer, not the generator. */
    char names[64][24], emails[64][40];
    size_t name_len[64], email_len[64];
    for (int i = 0; i < 64; i++) {
        name_len[i] = (size_t)snprintf(names[i], sizeof names[i], "customer %d", i * 7919);
        email_len[i] =
            (size_t)snprintf(emails[i], sizeof emails[i], "user%d@example.com", i * 104729);
    }

    struct ferry_rw_limits lim = {.rows = 50000, .bytes = INT64_C(4) << 20};
    struct ferry_row_writer *rw = ferry__rw_new(s, "bench.orders", lim, drop, NULL);
    if (rw == NULL) {
        fprintf(stderr, "bench_builder: out of memory\n");
        return 1;
    }
    const int key[] = {0};
    ferry_rw_set_position_columns(rw, 1, key);

    int64_t t0 = ferry_now_mono_us();
    const int64_t ts0 = INT64_C(1700000000000000);
    for (int64_t r = 0; r < rows; r++) {
        unsigned k = (unsigned)r & 63;
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, r);
        ferry_rw_int(rw, (int32_t)(r % 1000));
        ferry_rw_int(rw, (int16_t)(r & 0x7fff));
        ferry_rw_text(rw, names[k], name_len[k]);
        ferry_rw_text(rw, emails[k], email_len[k]);
        ferry_rw_int(rw, ts0 + r * 1000);
        struct ferry_decimal128 d = {(uint64_t)(r * 37 % 100000000), 0};
        ferry_rw_dec128(rw, d);
        if (r % 10 == 9)
            ferry_rw_null(rw);
        else
            ferry_rw_float(rw, (double)r * 0.25);
        ferry_rw_bool(rw, r & 1);
        ferry_rw_int(rw, 19000 + (r & 1023));
        if (ferry_rw_end(rw, &err) != FERRY_OK) {
            fprintf(stderr, "bench_builder: %s\n", err.message);
            return 1;
        }
    }
    if (ferry_rw_flush(rw, true, &err) != FERRY_OK) {
        fprintf(stderr, "bench_builder: %s\n", err.message);
        return 1;
    }
    int64_t t1 = ferry_now_mono_us();
    double secs = (double)(t1 - t0) / 1e6;
    printf("bench_builder: %" PRId64 " rows x 10 columns in %.3f s: %.0f rows/s, %.0f MB/s, "
           "%" PRId64 " batches\n",
           rows, secs, (double)rows / secs, (double)bytes / secs / 1e6, batches);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    return 0;
}
