/* bench/bench_sqlite_connector.c - rows/s of the sample source, the null sink, the sqlite
 * sink and the sqlite source, on one thread, without the pipeline around them.
 *
 *   bench_sqlite_connector [rows] [table] [folder]     (defaults: 1000000 orders /tmp)
 *
 * Prints a table and appends it to bench/results/sqlite_connector.txt when that folder
 * exists in the current directory. Batches of 50000 rows, as the pipeline's default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "batch/builder.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"

struct sink_ctx {
    const struct ferry_sink_vtable *vt;
    void *ctx;
    struct ferry_target *t;
    int64_t rows;
};

static int to_sink(void *p, struct ferry_batch *b, struct ferry_error *err)
{
    struct sink_ctx *s = p;
    struct ferry_receipt r;
    b->digest = ferry_batch_digest(b);
    int rc = s->vt->apply(s->ctx, s->t, b, &r, err);
    s->rows += b->length;
    ferry_batch_unref(b);
    return rc;
}

static int die(const char *what, struct ferry_error *err)
{
    fprintf(stderr, "%s: %s\n", what, err->message);
    exit(1);
}

static double now_s(void)
{
    return (double)ferry_now_mono_us() / 1e6;
}

/* source -> sink; returns seconds. */
static double run(const struct ferry_source_vtable *svt, const char *src_yaml,
                  const struct ferry_sink_vtable *kvt, const char *sink_yaml, const char *table,
                  int64_t *rows)
{
    struct ferry_error err;
    struct ferry_cfg *scfg, *kcfg;
    void *sctx, *kctx;
    if (ferry_cfg_parse_string(src_yaml, strlen(src_yaml), "bench", &scfg, &err))
        die("config", &err);
    if (ferry_cfg_parse_string(sink_yaml, strlen(sink_yaml), "bench", &kcfg, &err))
        die("config", &err);
    if (svt->open(scfg, &sctx, &err)) die("source open", &err);
    if (kvt->open(kcfg, &kctx, &err)) die("sink open", &err);
    struct ferry_resource_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.table = (char *)table;
    /* Append tables carry no primary key: read them back by their declared key. */
    static char *id_key[] = {"id", NULL};
    spec.key = id_key;
    spec.n_key = 1;
    struct ferry_schema *sc;
    char *plan;
    if (svt->discover(sctx, &spec, &sc, &err)) die("discover", &err);
    if (svt->plan(sctx, &spec, sc, NULL, &plan, &err)) die("plan", &err);
    struct ferry_target t = {
        .index = 0, .resource = table, .table = table, .schema = sc, .mode = FERRY_WRITE_APPEND};
    struct ferry_session_info si = {.pipeline = "bench", .run_id = 1};
    if (kvt->prepare(kctx, &t, &err)) die("prepare", &err);
    if (kvt->begin(kctx, &si, &err)) die("begin", &err);
    struct sink_ctx sk = {kvt, kctx, &t, 0};
    struct ferry_rw_limits lim = {.rows = 50000, .bytes = INT64_C(64) << 20};
    double t0 = now_s();
    struct ferry_row_writer *rw = ferry__rw_new(sc, table, lim, to_sink, &sk);
    if (svt->extract(sctx, &spec, sc, plan, 0, NULL, rw, &err)) die("extract", &err);
    if (ferry_rw_flush(rw, true, &err)) die("flush", &err);
    if (kvt->commit(kctx, &err)) die("commit", &err);
    double dt = now_s() - t0;
    ferry__rw_free(rw);
    kvt->close(kctx);
    svt->close(sctx);
    ferry_free(plan);
    ferry_schema_unref(sc);
    ferry_cfg_free(scfg);
    ferry_cfg_free(kcfg);
    *rows = sk.rows;
    return dt;
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 1 ? atoll(argv[1]) : 1000000;
    const char *table = argc > 2 ? argv[2] : "orders";
    const char *folder = argc > 3 ? argv[3] : "/tmp";
    char path[512], yaml[1024], out[4096];
    snprintf(path, sizeof path, "%s/ferry-bench-%d.db", folder, (int)getpid());
    const struct ferry_source_vtable *sample = ferry_source_find("sample"),
                                     *sqlite_src = ferry_source_find("sqlite");
    const struct ferry_sink_vtable *null_sink = ferry_sink_find("null"),
                                   *sqlite_sink = ferry_sink_find("sqlite");
    size_t o = 0;
    o += (size_t)snprintf(out + o, sizeof out - o, "%-28s %12s %10s %12s\n", "step", "rows",
                          "seconds", "rows/s");
    int64_t n;
    double dt;
    char src_yaml[128];
    snprintf(src_yaml, sizeof src_yaml, "rows: %lld\nclock: 2\n", (long long)rows);

    dt = run(sample, src_yaml, null_sink, "{}", table, &n);
    o += (size_t)snprintf(out + o, sizeof out - o, "%-28s %12lld %10.3f %12.0f\n", "sample -> null",
                          (long long)n, dt, (double)n / dt);
    snprintf(yaml, sizeof yaml, "path: '%s'\n", path);
    dt = run(sample, src_yaml, sqlite_sink, yaml, table, &n);
    o += (size_t)snprintf(out + o, sizeof out - o, "%-28s %12lld %10.3f %12.0f\n",
                          "sample -> sqlite (per_apply)", (long long)n, dt, (double)n / dt);
    dt = run(sqlite_src, yaml, null_sink, "{}", table, &n);
    o += (size_t)snprintf(out + o, sizeof out - o, "%-28s %12lld %10.3f %12.0f\n", "sqlite -> null",
                          (long long)n, dt, (double)n / dt);
    unlink(path);
    char aux[600];
    snprintf(aux, sizeof aux, "%s-wal", path);
    unlink(aux);
    snprintf(aux, sizeof aux, "%s-shm", path);
    unlink(aux);
    fputs(out, stdout);
    FILE *f = fopen("bench/results/sqlite_connector.txt", "a");
    if (f) {
        fprintf(f, "# %s, %lld rows of %s\n%s\n", __DATE__, (long long)rows, table, out);
        fclose(f);
    }
    return 0;
}
