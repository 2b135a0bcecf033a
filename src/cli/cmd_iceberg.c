/* cli/cmd_iceberg.c - `ferry iceberg expire`: table housekeeping for the iceberg sink.
 *
 *   ferry iceberg expire TABLE --warehouse DIR [--namespace NS]
 *                        [--catalog-uri SQLITE_FILE [--catalog-name NAME]]
 *                        --older-than DURATION [--retain-last N] [--dry-run] [--json]
 *   ferry iceberg expire TABLE --pipeline FILE [--namespace NS] --older-than DURATION ...
 *
 * --pipeline opens the catalog and storage the file's iceberg sink writes to (S3 warehouses,
 * SQL catalogs on PostgreSQL, REST catalogs), with the sink's own keys and secrets.
 *
 * Owns argument parsing and the report. Calls the iceberg connector's catalog and expire
 * code (src/connectors/iceberg/). Called by main.c's dispatch. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "ferry/error.h"

static const char *usage =
    "usage: ferry iceberg expire TABLE --warehouse DIR [--namespace NS]\n"
    "                            [--catalog-uri SQLITE_FILE [--catalog-name NAME]]\n"
    "                            --older-than DURATION [--retain-last N] [--dry-run] [--json]\n"
    "       ferry iceberg expire TABLE --pipeline FILE [--namespace NS]\n"
    "                            --older-than DURATION [--retain-last N] [--dry-run] [--json]\n"
    "\n"
    "Removes the snapshots of an Iceberg table older than DURATION (30s, 15m, 12h, 7d),\n"
    "keeping the current one and the N newest (--retain-last, default 1), then deletes the\n"
    "data, delete, manifest and manifest list files no remaining snapshot reaches and that\n"
    "are older than DURATION (orphans of failed runs included). --catalog-uri selects the\n"
    "SQL catalog (SQLite file), else the filesystem catalog of the warehouse. --pipeline\n"
    "uses the catalog and storage of FILE's iceberg sink instead (S3 warehouses, SQL catalogs\n"
    "on PostgreSQL, REST catalogs): the same keys and secrets the sink reads. On S3 it also\n"
    "aborts the unfinished multipart uploads under the table's data/ initiated before\n"
    "DURATION (left by a writer that was killed mid-file).\n";

/* The catalog of the iceberg sink of pipeline file `path`. */
static int open_from_pipeline(const char *path, const char *ns_opt, struct ferry__iceberg_catalog **cat,
                              char **ns, struct ferry_error *err)
{
    struct ferry_cfg *root = NULL;
    int rc = ferry_cfg_parse_file(path, &root, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_cfg *sink = ferry_cfg_get(root, "sink");
    const char *type = NULL;
    if (sink == NULL)
        rc = ferry_error_set(err, FERRY_ECONFIG, "config", "%s: no sink section", path);
    else
        rc = ferry_cfg_str(sink, "type", true, &type, err);
    if (rc == FERRY_OK && strcmp(type, "iceberg") != 0)
        rc = ferry_cfg_error(err, ferry_cfg_get(sink, "type"),
                             "the sink is type %s, not iceberg", type);
    if (rc == FERRY_OK) rc = ferry__iceberg_catalog_from_sink(sink, cat, ns, err);
    if (rc == FERRY_OK && ns_opt != NULL) {
        /* --namespace: another namespace of the same catalog */
        char *n = ferry_strdup(ns_opt);
        if (n == NULL) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "iceberg", "out of memory");
        } else {
            ferry_free(*ns);
            *ns = n;
        }
    }
    ferry_cfg_free(root);
    return rc;
}

static void print_file(void *ctx, const char *path)
{
    (void)ctx;
    fprintf(stderr, "  %s\n", path);
}

static void print_upload(void *ctx, const char *loc, const char *upload_id)
{
    (void)ctx;
    fprintf(stderr, "  unfinished upload %s (upload id %s)\n", loc, upload_id);
}

static int duration_ms(const char *s, int64_t *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double mul = 1000;
    if (!strcmp(end, "ms")) mul = 1;
    else if (!strcmp(end, "s") || !*end) mul = 1000;
    else if (!strcmp(end, "m")) mul = 60000;
    else if (!strcmp(end, "h")) mul = 3600000;
    else if (!strcmp(end, "d")) mul = 86400000;
    else return -1;
    *out = (int64_t)(v * mul);
    return 0;
}

int ferry_cli_iceberg(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[2], "expire") != 0) {
        fputs(usage, argc >= 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) ? stdout
                                                                                          : stderr);
        return argc >= 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) ? 0 : 2;
    }
    static const struct option opts[] = {
        {"warehouse", required_argument, NULL, 'w'},   {"namespace", required_argument, NULL, 'n'},
        {"catalog-uri", required_argument, NULL, 'c'}, {"catalog-name", required_argument, NULL, 'C'},
        {"older-than", required_argument, NULL, 'o'},  {"retain-last", required_argument, NULL, 'r'},
        {"dry-run", no_argument, NULL, 'd'},           {"json", no_argument, NULL, 'j'},
        {"pipeline", required_argument, NULL, 'p'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *warehouse = NULL, *ns = NULL, *curi = NULL, *cname = "ferry", *older = NULL;
    const char *pipeline = NULL;
    long retain = 1;
    bool dry = false, json = false;
    optind = 3;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'w': warehouse = optarg; break;
        case 'n': ns = optarg; break;
        case 'c': curi = optarg; break;
        case 'C': cname = optarg; break;
        case 'o': older = optarg; break;
        case 'r': retain = strtol(optarg, NULL, 10); break;
        case 'd': dry = true; break;
        case 'j': json = true; break;
        case 'p': pipeline = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    int64_t older_ms = 0;
    if (optind != argc - 1 || (warehouse == NULL) == (pipeline == NULL) || older == NULL ||
        retain < 1 || duration_ms(older, &older_ms) != 0) {
        fprintf(stderr, "ferry iceberg expire: %s\n%s",
                optind != argc - 1 ? "one TABLE is required"
                : warehouse == NULL && pipeline == NULL ? "--warehouse or --pipeline is required"
                : warehouse != NULL && pipeline != NULL ? "--warehouse and --pipeline exclude each other"
                : older == NULL     ? "--older-than is required"
                : retain < 1        ? "--retain-last must be at least 1"
                                    : "--older-than: a duration like 30s, 15m, 12h, 7d",
                usage);
        return 2;
    }
    const char *table = argv[optind];
    if (warehouse && strncmp(warehouse, "file://", 7) == 0) warehouse += 7;
    if (warehouse && strstr(warehouse, "://") != NULL) { /* the connection is in the pipeline */
        fprintf(stderr, "ferry iceberg expire: --warehouse %s: give --pipeline FILE instead (the "
                        "pipeline whose iceberg sink writes the table: its S3 connection and "
                        "catalog)\n", warehouse);
        return 2;
    }
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry__iceberg_catalog *cat = NULL;
    char *nsbuf = NULL;
    int rc;
    if (pipeline) {
        rc = open_from_pipeline(pipeline, ns, &cat, &nsbuf, &err);
        ns = nsbuf;
    } else {
        if (ns == NULL) ns = "default";
        rc = ferry__iceberg_catalog_open(curi ? ICEBERG_CATALOG_SQL : ICEBERG_CATALOG_FILESYSTEM,
                                         warehouse, ns, curi, cname, &cat, &err);
    }
    struct ferry__iceberg_expire_result res;
    memset(&res, 0, sizeof res);
    if (!json) {
        res.on_file = print_file;
        res.on_upload = print_upload;
        if (dry) fprintf(stderr, "would delete:\n");
    }
    if (rc == FERRY_OK)
        rc = ferry__iceberg_expire(cat, table, older_ms, (int)retain, dry, &res, &err);
    ferry__iceberg_catalog_close(cat);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: error: %s\n", err.message);
        ferry_free(nsbuf);
        return ferry_code_exit_status(rc);
    }
    if (res.unreachable[0])
        fprintf(stderr, "ferry iceberg expire: %s.%s: files not deleted: %s\n", ns, table,
                res.unreachable);
    if (json) {
        json_t *o = json_pack("{s:s++,s:b,s:i,s:i,s:I,s:I,s:I}", "table", ns, ".", table, "dry_run",
                              dry, "snapshots_expired", res.snapshots_expired, "snapshots_kept",
                              res.snapshots_kept, "files_deleted", (json_int_t)res.files_deleted,
                              "bytes_deleted", (json_int_t)res.bytes_deleted, "uploads_aborted",
                              (json_int_t)res.uploads_aborted);
        if (o && res.unreachable[0])
            json_object_set_new(o, "files_not_deleted", json_string(res.unreachable));
        char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (t) printf("%s\n", t);
        free(t);
        json_decref(o);
    } else {
        printf("%s.%s: %d snapshot%s expired, %d kept; %" PRId64 " file%s (%" PRId64
               " bytes) %sdeleted",
               ns, table, res.snapshots_expired, res.snapshots_expired == 1 ? "" : "s",
               res.snapshots_kept, res.files_deleted, res.files_deleted == 1 ? "" : "s",
               res.bytes_deleted, dry ? "would be " : "");
        /* only where there are uploads to speak of: an S3 store that lists them */
        if (res.uploads_listed)
            printf("; %" PRId64 " unfinished upload%s %saborted", res.uploads_aborted,
                   res.uploads_aborted == 1 ? "" : "s", dry ? "would be " : "");
        printf("\n");
    }
    ferry_free(nsbuf);
    return 0;
}
