/* connectors/registry.c - the one table of sources and the one table of sinks.
 *
 * Owns the list of built-in connectors, their lookup by the pipeline file's `type` and the
 * check of a vtable's ABI version and required slots. The check runs once, when the table
 * is first used (pthread_once): a connector missing a required slot is logged, naming the
 * slot, and is never handed out by find.
 * Also ferry_pipeline_load: the pipeline-file loader (config/pipeline.c) with this table as
 * its connector catalog, so that config never calls up into connectors. Calls core (log),
 * config (the loader) and libc. Called by the CLI (`ferry connectors`, every command that
 * reads a pipeline), the server, the runner and verify (the optional verify_open slot).
 *
 * Adding a connector: write src/connectors/<name>/, define `ferry__<name>_source` and/or
 * `ferry__<name>_sink`, and add the name to FERRY_SOURCES or FERRY_SINKS below. */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"
#include "ferry/pipeline.h"

#define FERRY_SOURCES(X) X(sample) X(sqlite) X(postgres) X(files) X(mysql) X(s3) X(iceberg)
#define FERRY_SINKS(X) X(null) X(sqlite) X(postgres) X(files) X(s3) X(iceberg) X(mysql)

/* The callback sink exists for programs that embed ferry (src/embed/, docs/embedding.md). */
#define FERRY_ALL_SINKS(X) FERRY_SINKS(X) X(callback)

#define DECLARE_SOURCE(n) extern const struct ferry_source_vtable ferry__##n##_source;
#define DECLARE_SINK(n) extern const struct ferry_sink_vtable ferry__##n##_sink;
#define LIST_SOURCE(n) &ferry__##n##_source,
#define LIST_SINK(n) &ferry__##n##_sink,

FERRY_SOURCES(DECLARE_SOURCE)
FERRY_ALL_SINKS(DECLARE_SINK)

static const struct ferry_source_vtable *const sources[] = {FERRY_SOURCES(LIST_SOURCE) NULL};
static const struct ferry_sink_vtable *const sinks[] = {FERRY_ALL_SINKS(LIST_SINK) NULL};

#define N_SOURCES (sizeof sources / sizeof sources[0] - 1)
#define N_SINKS (sizeof sinks / sizeof sinks[0] - 1)
static bool source_ok[N_SOURCES], sink_ok[N_SINKS];
static pthread_once_t checked = PTHREAD_ONCE_INIT;

/* The required-slot check of every registered connector, once per process. */
static void check_all(void)
{
    struct ferry_error e;
    for (size_t i = 0; i < N_SOURCES; i++) {
        source_ok[i] = ferry_source_vtable_check(sources[i], &e) == FERRY_OK;
        if (!source_ok[i]) ferry_log(FERRY_LOG_ERROR, "connector registry: %s", e.message);
    }
    for (size_t i = 0; i < N_SINKS; i++) {
        sink_ok[i] = ferry_sink_vtable_check(sinks[i], &e) == FERRY_OK;
        if (!sink_ok[i]) ferry_log(FERRY_LOG_ERROR, "connector registry: %s", e.message);
    }
}

const struct ferry_source_vtable *ferry_source_find(const char *name)
{
    if (name == NULL) return NULL;
    pthread_once(&checked, check_all);
    for (size_t i = 0; i < N_SOURCES; i++)
        if (strcmp(sources[i]->name, name) == 0) return source_ok[i] ? sources[i] : NULL;
    return NULL;
}

const struct ferry_sink_vtable *ferry_sink_find(const char *name)
{
    if (name == NULL) return NULL;
    pthread_once(&checked, check_all);
    for (size_t i = 0; i < N_SINKS; i++)
        if (strcmp(sinks[i]->name, name) == 0) return sink_ok[i] ? sinks[i] : NULL;
    return NULL;
}

const struct ferry_source_vtable *const *ferry_sources(void)
{
    return sources;
}

const struct ferry_sink_vtable *const *ferry_sinks(void)
{
    return sinks;
}

static int check_abi(const char *kind, const char *name, int abi, struct ferry_error *err)
{
    if (abi != FERRY_CONNECTOR_ABI)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "connector",
                               "%s \"%s\": ABI version %d, this engine speaks %d", kind, name, abi,
                               FERRY_CONNECTOR_ABI);
    return FERRY_OK;
}

static int missing(const char *kind, const char *name, const char *slot, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_EINVAL, "connector", "%s \"%s\": required slot %s is missing",
                           kind, name, slot);
}

#define REQUIRE(kind, vt, slot)                                                                    \
    do {                                                                                           \
        if ((vt)->slot == NULL) return missing(kind, (vt)->name, #slot, err);                      \
    } while (0)

int ferry_source_vtable_check(const struct ferry_source_vtable *vt, struct ferry_error *err)
{
    if (vt == NULL) return ferry_error_set(err, FERRY_EINVAL, "connector", "source: no vtable");
    if (vt->name == NULL || vt->name[0] == '\0')
        return ferry_error_set(err, FERRY_EINVAL, "connector",
                               "source: required slot name is missing");
    int rc = check_abi("source", vt->name, vt->abi, err);
    if (rc != FERRY_OK) return rc;
    REQUIRE("source", vt, open);
    REQUIRE("source", vt, discover);
    REQUIRE("source", vt, plan);
    REQUIRE("source", vt, extract);
    REQUIRE("source", vt, close);
    return FERRY_OK;
}

int ferry_sink_vtable_check(const struct ferry_sink_vtable *vt, struct ferry_error *err)
{
    if (vt == NULL) return ferry_error_set(err, FERRY_EINVAL, "connector", "sink: no vtable");
    if (vt->name == NULL || vt->name[0] == '\0')
        return ferry_error_set(err, FERRY_EINVAL, "connector",
                               "sink: required slot name is missing");
    int rc = check_abi("sink", vt->name, vt->abi, err);
    if (rc != FERRY_OK) return rc;
    REQUIRE("sink", vt, open);
    REQUIRE("sink", vt, capabilities);
    REQUIRE("sink", vt, prepare);
    REQUIRE("sink", vt, begin);
    REQUIRE("sink", vt, apply);
    REQUIRE("sink", vt, commit);
    REQUIRE("sink", vt, abort);
    REQUIRE("sink", vt, close);
    return FERRY_OK;
}

void ferry_sink_checkpoints_free(struct ferry_sink_checkpoint *v, int n)
{
    if (v == NULL) return;
    for (int i = 0; i < n; i++) {
        ferry_free(v[i].resource);
        ferry_free(v[i].position);
    }
    ferry_free(v);
}

bool ferry_receipt_start(struct ferry_receipt *receipt, const struct ferry_batch *b)
{
    receipt->write_crc = ferry_batch_digest(b);
    receipt->rows = 0;
    receipt->bytes = 0;
    receipt->has_encoded_crc = true;
    receipt->encoded_crc = 0;
    receipt->uri[0] = '\0';
    return receipt->write_crc == b->digest;
}

static const struct ferry_connector_catalog catalog = {
    .source_find = ferry_source_find,
    .sink_find = ferry_sink_find,
    .sources = ferry_sources,
    .sinks = ferry_sinks,
};

int ferry_pipeline_load(const char *path, struct ferry_pipeline_spec **out,
                        struct ferry_error *err)
{
    return ferry_pipeline_parse(path, &catalog, out, err);
}

int ferry_pipeline_load_string(const char *text, size_t len, const char *name,
                               struct ferry_pipeline_spec **out, struct ferry_error *err)
{
    return ferry_pipeline_parse_string(text, len, name, &catalog, out, err);
}
