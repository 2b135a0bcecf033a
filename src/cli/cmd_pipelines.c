/* cli/cmd_pipelines.c - `ferry pipelines apply FILE`: registers a pipeline (a new version
 * when its route definition changed) with a server (--server URL / FERRY_SERVER, through
 * POST /v1/pipelines) or, without one, in the local state file. Calls cli/client, the
 * pipeline loader and the store. Called by main.c. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "store/store.h"

static const char *usage =
    "usage: ferry pipelines apply FILE [--retries N] [--server URL] [--token env:NAME|file:PATH]\n"
    "                              [--state PATH] [--json]\n\n"
    "Registers the pipeline FILE; a changed route definition makes a new version. With a\n"
    "server (--server or $FERRY_SERVER) it is sent to POST /v1/pipelines, else it is recorded\n"
    "in the local state file. --retries: how many times a run whose worker was lost is\n"
    "dispatched again (ferry serve).\n";

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static int read_file(const char *path, char **out, size_t *len, struct ferry_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return ferry_error_set(err, FERRY_ECONFIG, "cli", "%s: cannot open", path);
    struct ferry_buf b;
    ferry_buf_init(&b, 16u << 20);
    char chunk[8192];
    size_t n;
    int rc = FERRY_OK;
    while (rc == FERRY_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = ferry_buf_append(&b, chunk, n);
    fclose(f);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, "", 1);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return ferry_error_set(err, FERRY_ECONFIG, "cli", "%s: larger than 16 MiB", path);
    }
    *len = b.len - 1;
    *out = ferry_buf_take(&b);
    return FERRY_OK;
}

int ferry_cli_pipelines(int argc, char **argv)
{
    struct ferry_client_opts co;
    ferry_client_opts_init(&co);
    int retries = 0;
    static const struct option opts[] = {{"server", required_argument, NULL, 'S'},
                                         {"token", required_argument, NULL, 't'},
                                         {"state", required_argument, NULL, 's'},
                                         {"retries", required_argument, NULL, 'r'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (ferry_client_opts_take(&co, ch, optarg)) continue;
        switch (ch) {
        case 'r':
            retries = (int)strtol(optarg, NULL, 10);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 2 || strcmp(argv[optind], "apply") != 0) {
        fputs(usage, stderr);
        return 2;
    }
    if (retries < 0 || retries > 100) {
        fprintf(stderr, "ferry: --retries must be from 0 to 100\n");
        return 2;
    }
    const char *file = argv[optind + 1];
    struct ferry_error err;
    ferry_error_clear(&err);
    struct ferry_client cl;
    bool remote = false;
    char *text = NULL;
    size_t len = 0;
    int rc = ferry_client_init(&cl, co.server, co.token, &remote, &err);
    if (rc == FERRY_OK) rc = read_file(file, &text, &len, &err);
    char name[256] = "", version[65] = "";
    bool added = false;
    if (rc == FERRY_OK && remote) {
        char path[64];
        snprintf(path, sizeof path, "/v1/pipelines?retries=%d", retries);
        struct ferry_buf out;
        ferry_buf_init(&out, 0);
        long status = 0;
        rc = ferry_client_request(&cl, "POST", path, "application/yaml", text, len, &status, &out,
                                  &err);
        if (rc == FERRY_OK && status != 200 && status != 201) {
            char msg[768];
            ferry_client_error_message(status, &out, msg, sizeof msg);
            rc = ferry_error_set(&err, status == 400 ? FERRY_ECONFIG : FERRY_EIO, "http", "%s: %s",
                                 file, msg);
        }
        if (rc == FERRY_OK) {
            json_t *j = json_loadb(out.data, out.len, 0, NULL);
            snprintf(name, sizeof name, "%s",
                     str_or_empty(json_string_value(json_object_get(j, "name"))));
            snprintf(version, sizeof version, "%s",
                     str_or_empty(json_string_value(json_object_get(j, "version"))));
            added = json_is_true(json_object_get(j, "new_version"));
            json_decref(j);
        }
        ferry_buf_release(&out);
    } else if (rc == FERRY_OK) {
        struct ferry_pipeline_spec *p = NULL;
        struct ferry_store *st = NULL;
        rc = ferry_pipeline_load_string(text, len, file, &p, &err);
        if (rc == FERRY_OK) rc = ferry_store_open(co.state, &st, &err);
        if (rc == FERRY_OK)
            rc = ferry_store_pipeline_apply(st, p->name, p->version, p->request_json, retries,
                                            &added, &err);
        if (rc == FERRY_OK) {
            snprintf(name, sizeof name, "%s", p->name);
            snprintf(version, sizeof version, "%s", p->version);
        }
        ferry_store_close(st);
        ferry_pipeline_free(p);
    }
    ferry_free(text);
    ferry_client_release(&cl);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: error: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    if (co.json)
        printf("{\"name\":\"%s\",\"version\":\"%s\",\"new_version\":%s}\n", name, version,
               added ? "true" : "false");
    else
        printf("pipeline %s: version %.12s (%s)\n", name, version,
               added ? "new version" : "unchanged");
    return 0;
}
