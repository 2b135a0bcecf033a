/* bench/bench_crc.c - CRC32-C and batch digest throughput against memcpy, same buffer,
 * same run.
 *
 * A program, not a test: it never fails on timing. It measures, best of several
 * repetitions, memcpy over a 64 MiB buffer, the hardware CRC path, the portable path and
 * the run-time dispatch over the same bytes, then the batch digest over realistic batches
 * built by the row writer (with and without nulls, whole and as an unaligned slice). It
 * prints a table with each rate's ratio to memcpy and, with --out FILE, writes the same
 * table as markdown. GB/s are 10^9 bytes per second of input (memcpy: bytes copied).
 *
 *   bench_crc [--out FILE] [--mib N] [--reps N] [--rows N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "batch/builder.h"
#include "ferry/core.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"

struct row {
    const char *what;
    double gbps;
    char note[96];
};

static struct row rows[16];
static int n_rows;
static volatile uint32_t sink; /* keeps results alive */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add(const char *what, double bytes, double best_s, const char *note)
{
    struct row *r = &rows[n_rows++];
    r->what = what;
    r->gbps = bytes / best_s / 1e9;
    snprintf(r->note, sizeof r->note, "%s", note ? note : "");
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static double best_crc(crc_fn fn, const uint8_t *p, size_t n, int reps)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        sink ^= fn(0, p, n);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

static double best_memcpy(uint8_t *dst, const uint8_t *src, size_t n, int reps)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        memcpy(dst, src, n);
        __asm__ volatile("" : : "r"(dst) : "memory"); /* the copy must happen */
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    sink ^= dst[n / 2];
    return best;
}

/* ---- a realistic batch: an orders table ------------------------------------------- */

static const struct {
    const char *name;
    enum ferry_type type;
} order_cols[] = {
    {"id", FERRY_TYPE_INT64},          {"customer", FERRY_TYPE_UTF8},
    {"email", FERRY_TYPE_UTF8},        {"amount", FERRY_TYPE_DECIMAL128},
    {"quantity", FERRY_TYPE_INT32},    {"discount", FERRY_TYPE_FLOAT64},
    {"paid", FERRY_TYPE_BOOL},         {"created_at", FERRY_TYPE_TIMESTAMPTZ_US},
    {"ship_date", FERRY_TYPE_DATE32},  {"order_uid", FERRY_TYPE_UUID},
    {"note", FERRY_TYPE_UTF8},
};
#define N_ORDER_COLS ((int)(sizeof order_cols / sizeof order_cols[0]))

static int take(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct ferry_batch **slot = ctx;
    ferry_batch_unref(*slot);
    *slot = b;
    return FERRY_OK;
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* `null_pct` percent of the nullable cells are null. */
static struct ferry_batch *orders_batch(struct ferry_schema *s, int64_t n, int null_pct)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = n + 1, .bytes = INT64_MAX, .max_value_bytes = 0};
    struct ferry_row_writer *rw = ferry__rw_new(s, "public.orders", lim, take, &out);
    if (rw == NULL) return NULL;
    struct ferry_error err;
    char text[96];
    for (int64_t r = 0; r < n; r++) {
        ferry_rw_begin(rw, r % 10 == 0 ? FERRY_OP_UPDATE : FERRY_OP_INSERT);
        for (int c = 0; c < N_ORDER_COLS; c++) {
            uint64_t h = next_rand();
            if (c > 0 && (int)(h % 100) < null_pct) {
                ferry_rw_null(rw);
                continue;
            }
            switch (c) {
            case 0: ferry_rw_int(rw, r + 1); break;
            case 1: {
                int len = snprintf(text, sizeof text, "Customer %llu Ltd",
                                   (unsigned long long)(h % 100000));
                ferry_rw_text(rw, text, (size_t)len);
                break;
            }
            case 2: {
                int len = snprintf(text, sizeof text, "user%llu@example.com",
                                   (unsigned long long)(h % 1000000));
                ferry_rw_text(rw, text, (size_t)len);
                break;
            }
            case 3: ferry_rw_dec128(rw, (struct ferry_decimal128){h % 100000000, 0}); break;
            case 4: ferry_rw_int(rw, (int64_t)(h % 50) + 1); break;
            case 5: ferry_rw_float(rw, (double)(h % 30) / 100.0); break;
            case 6: ferry_rw_bool(rw, h & 1); break;
            case 7: ferry_rw_int(rw, 1700000000000000LL + (int64_t)(h % 100000000000ULL)); break;
            case 8: ferry_rw_int(rw, 19000 + (int64_t)(h % 1000)); break;
            case 9: {
                uint8_t u[16];
                for (int k = 0; k < 16; k++) u[k] = (uint8_t)(next_rand() >> 32);
                ferry_rw_fixed(rw, u, 16);
                break;
            }
            default: {
                int len = (int)(h % 60);
                memset(text, 'n', (size_t)len);
                ferry_rw_text(rw, text, (size_t)len);
                break;
            }
            }
        }
        if (ferry_rw_end(rw, &err) != FERRY_OK) {
            fprintf(stderr, "bench_crc: building batch: %s\n", err.message);
            ferry__rw_free(rw);
            ferry_batch_unref(out);
            return NULL;
        }
    }
    if (ferry_rw_flush(rw, false, &err) != FERRY_OK) {
        fprintf(stderr, "bench_crc: flush: %s\n", err.message);
        ferry_batch_unref(out);
        out = NULL;
    }
    ferry__rw_free(rw);
    return out;
}

/* Bytes of the canonical form (digest.h) of b: what the digest reads. */
static double canonical_bytes(const struct ferry_batch *b)
{
    double total = 16 + (double)b->length;
    int64_t n = b->length;
    for (int c = 0; c < b->schema->n_fields; c++) {
        const struct ferry_column *col = &b->columns[c];
        total += 1 + 8 + (col->null_count > 0 ? (double)((n + 7) / 8) : 0) + 8;
        if (ferry_type_is_varwidth(col->type)) {
            total += 4.0 * (double)(n + 1) + 8;
            total += n > 0 ? (double)(col->offsets[b->offset + n] - col->offsets[b->offset]) : 0;
        } else if (col->type == FERRY_TYPE_BOOL) {
            total += (double)((n + 7) / 8);
        } else {
            total += (double)ferry_type_width(col->type) * (double)n;
        }
    }
    return total;
}

static double best_digest(const struct ferry_batch *b, int reps)
{
    double best = 1e30;
    for (int i = 0; i < reps * 3; i++) {
        double t0 = now_s();
        sink ^= ferry_batch_digest(b);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = '\0';
                snprintf(buf, len, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

static void print_table(FILE *f, bool markdown, double memcpy_gbps)
{
    if (markdown) {
        fprintf(f, "| what | GB/s | vs memcpy | note |\n|---|---:|---:|---|\n");
        for (int i = 0; i < n_rows; i++)
            fprintf(f, "| %s | %.2f | %.2f | %s |\n", rows[i].what, rows[i].gbps,
                    rows[i].gbps / memcpy_gbps, rows[i].note);
    } else {
        fprintf(f, "%-36s %8s %10s  %s\n", "what", "GB/s", "vs memcpy", "note");
        for (int i = 0; i < n_rows; i++)
            fprintf(f, "%-36s %8.2f %10.2f  %s\n", rows[i].what, rows[i].gbps,
                    rows[i].gbps / memcpy_gbps, rows[i].note);
    }
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    long mib = 64, reps = 7, batch_rows = 50000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            batch_rows = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--out FILE] [--mib N] [--reps N] [--rows N]\n", argv[0]);
            return 2;
        }
    }
    if (mib < 1 || reps < 1 || batch_rows < 1) {
        fprintf(stderr, "bench_crc: --mib, --reps and --rows must be positive\n");
        return 2;
    }
    size_t n = (size_t)mib << 20;
    uint8_t *src = aligned_alloc(64, n), *dst = aligned_alloc(64, n);
    if (src == NULL || dst == NULL) {
        fprintf(stderr, "bench_crc: cannot allocate 2 x %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = next_rand();
        memcpy(src + i, &v, n - i < 8 ? n - i : 8);
    }
    memset(dst, 0, n); /* fault the pages in before timing */

    bool hw = ferry_crc32c_have_hw();
    char note[96];
    snprintf(note, sizeof note, "%ld MiB, best of %ld", mib, reps);
    double t_memcpy = best_memcpy(dst, src, n, (int)reps);
    add("memcpy", (double)n, t_memcpy, note);
    double memcpy_gbps = rows[0].gbps;
    if (hw) {
        add("crc32c hw (3 streams + pclmul)", (double)n,
            best_crc(ferry_crc32c_update_hw, src, n, (int)reps), note);
        if (ferry_crc32c_update_hw(0, src, n) != ferry_crc32c_update_sw(0, src, n)) {
            fprintf(stderr, "bench_crc: hw and sw CRCs disagree\n");
            return 1;
        }
    }
    add("crc32c sw (slicing-by-8)", (double)n, best_crc(ferry_crc32c_update_sw, src, n, (int)reps),
        note);
    add("crc32c dispatch", (double)n, best_crc(ferry_crc32c_update, src, n, (int)reps),
        hw ? "picks hw on this CPU" : "picks sw on this CPU");
    /* Small, cache-resident buffers: the per-call overhead the digest pays per buffer. */
    {
        static uint8_t small[4096];
        memcpy(small, src, sizeof small);
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            for (int k = 0; k < 4096; k++) sink ^= ferry_crc32c_update(0, small, sizeof small);
            double t = now_s() - t0;
            if (t < best) best = t;
        }
        add("crc32c dispatch, 4 KiB in L1", 4096.0 * 4096.0, best, "4096 calls");
    }

    struct ferry_schema *s = ferry_schema_new();
    for (int c = 0; c < N_ORDER_COLS; c++)
        if (ferry_schema_add_field(s, order_cols[c].name, order_cols[c].type, c > 0, NULL) != FERRY_OK)
            abort();
    s->fields[3].precision = 18;
    s->fields[3].scale = 2;
    if (ferry_schema_finish(s, NULL) != FERRY_OK) abort();
    struct ferry_batch *clean = orders_batch(s, batch_rows, 0);
    struct ferry_batch *nulls = orders_batch(s, batch_rows, 10);
    if (clean != NULL && nulls != NULL) {
        double bytes = canonical_bytes(clean);
        snprintf(note, sizeof note, "%ld rows x %d cols, %.1f MB canonical", batch_rows,
                 N_ORDER_COLS, bytes / 1e6);
        add("batch digest, no nulls", bytes, best_digest(clean, (int)reps), note);
        bytes = canonical_bytes(nulls);
        snprintf(note, sizeof note, "10%% nulls: null slots zeroed, %.1f MB", bytes / 1e6);
        add("batch digest, 10% nulls", bytes, best_digest(nulls, (int)reps), note);
        struct ferry_batch *sl = ferry_batch_slice(nulls, 3, batch_rows - 10);
        if (sl != NULL) {
            bytes = canonical_bytes(sl);
            add("batch digest, slice at row 3", bytes, best_digest(sl, (int)reps),
                "unaligned bitmaps and offsets rebased");
            ferry_batch_unref(sl);
        }
    } else {
        fprintf(stderr, "bench_crc: could not build the batches; digest rows skipped\n");
    }
    ferry_batch_unref(clean);
    ferry_batch_unref(nulls);
    ferry_schema_unref(s);

    char cpu[128];
    cpu_model(cpu, sizeof cpu);
    printf("CRC32-C throughput (%s)\n", cpu);
    print_table(stdout, false, memcpy_gbps);
    if (hw)
        printf("ratio hw crc / memcpy: %.2f (target >= 0.50)\n", rows[1].gbps / memcpy_gbps);
    if (out != NULL) {
        FILE *f = fopen(out, "w");
        if (f == NULL) {
            fprintf(stderr, "bench_crc: cannot write %s\n", out);
            return 1;
        }
        char when[40];
        ferry_format_time_us(ferry_now_wall_us(), when, sizeof when);
        fprintf(f, "# CRC32-C and batch digest throughput\n\n");
        fprintf(f, "Measured by `bench/bench_crc` (Release build) on %s, %s. GB/s are 10^9 bytes "
                   "of input per second, best of %ld repetitions over the same %ld MiB buffer; "
                   "memcpy counts bytes copied.\n\n",
                cpu, when, reps, mib);
        print_table(f, true, memcpy_gbps);
        if (hw)
            fprintf(f, "\nRatio hw CRC / memcpy: **%.2f** (target >= 0.50).\n",
                    rows[1].gbps / memcpy_gbps);
        fclose(f);
    }
    free(src);
    free(dst);
    return 0;
}
