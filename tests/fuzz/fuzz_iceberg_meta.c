/* tests/fuzz/fuzz_iceberg_meta.c - Iceberg table metadata JSON as another writer may have left
 * it (src/connectors/iceberg/catalog.c loads it, iceberg_sink.c's prepare reads it): the
 * fuzzed bytes are v1.metadata.json (with version-hint.text) of a table in a filesystem
 * warehouse on a temporary folder, and the real sink's prepare() runs on it: current schema
 * and field ids, schema evolution (new columns, type widening), partition specs against the
 * configured partitioning, the metadata log, and when something changed the commit of v2.
 * The first byte picks the write mode and the partitioning. Snapshots are not followed here:
 * their manifest paths would name arbitrary files (fuzz_iceberg_avro reads manifests). */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "fuzz.h"

extern const struct ferry_sink_vtable ferry__iceberg_sink;

static char dir[] = "/tmp/ferry-fuzz-iceberg-XXXXXX";
static char mdir[128];

/* Removes a folder tree of the warehouse (files and folders only, no links followed). */
static void rm_tree(const char *path, int depth)
{
    DIR *d = depth < 8 ? opendir(path) : NULL;
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(p, &st) != 0) continue;
            if (S_ISDIR(st.st_mode)) rm_tree(p, depth + 1);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

static void cleanup(void)
{
    rm_tree(dir, 0);
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static const char *const partitions[] = {
    "",
    "partition: {t: [id]}\n",
    "partition: {t: [bucket(4, id)]}\n",
    "partition: {t: [day(ts), truncate(3, v)]}\n",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready = false;
    if (!ready) {
        if (mkdtemp(dir) == NULL) return 0;
        atexit(cleanup);
        snprintf(mdir, sizeof mdir, "%s/db/t/metadata", dir);
        ready = true;
    }
    if (size < 1) return 0;
    int pick = data[0];
    data++;
    size--;
    char tdir[96], path[160];
    snprintf(tdir, sizeof tdir, "%s/db", dir);
    rm_tree(tdir, 0);
    struct ferry_error err;
    ferry_error_clear(&err);
    if (ferry__iceberg_mkdirs(mdir, &err) != FERRY_OK) return 0;
    snprintf(path, sizeof path, "%s/v1.metadata.json", mdir);
    if (write_file(path, data, size) != 0) return 0;
    snprintf(path, sizeof path, "%s/version-hint.text", mdir);
    if (write_file(path, "1", 1) != 0) return 0;

    char yaml[512];
    snprintf(yaml, sizeof yaml, "warehouse: %s\nnamespace: db\n%s", dir,
             partitions[pick % (int)(sizeof partitions / sizeof partitions[0])]);
    struct ferry_cfg *cfg = NULL;
    if (ferry_cfg_parse_string(yaml, strlen(yaml), "fuzz", &cfg, &err) != FERRY_OK) return 0;
    struct ferry_schema *s = ferry_schema_new();
    bool ok = ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL) == FERRY_OK &&
              ferry_schema_add_field(s, "v", FERRY_TYPE_UTF8, true, NULL) == FERRY_OK &&
              ferry_schema_add_field(s, "ts", FERRY_TYPE_TIMESTAMP_US, true, NULL) == FERRY_OK &&
              ferry_schema_add_field(s, "n", FERRY_TYPE_INT32, true, NULL) == FERRY_OK;
    if (ok) {
        s->fields[0].key_pos = 1;
        ok = ferry_schema_finish(s, NULL) == FERRY_OK;
    }
    const struct ferry_sink_vtable *vt = &ferry__iceberg_sink;
    void *ctx = NULL;
    if (ok && vt->open(cfg, &ctx, &err) == FERRY_OK) {
        static const enum ferry_write_mode modes[] = {FERRY_WRITE_APPEND, FERRY_WRITE_UPSERT,
                                                      FERRY_WRITE_MERGE};
        struct ferry_target tg = {.index = 0, .resource = "t", .table = "t", .schema = s,
                                  .mode = modes[(pick >> 4) % 3], .read_mode = FERRY_READ_FULL};
        (void)vt->prepare(ctx, &tg, &err);
        vt->close(ctx);
    }
    ferry_schema_unref(s);
    ferry_cfg_free(cfg);
    return 0;
}
