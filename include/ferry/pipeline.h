/* ferry/pipeline.h - a pipeline file, loaded and checked (DESIGN §6).
 *
 *   version: 1
 *   name: demo
 *   source: {type: sample, ..., resources: [{table: orders, mode: full}]}
 *   sink:   {type: sqlite, path: out/demo.db, write: append}
 *   transforms: [{resource: orders, column: email, hash: sha256}]
 *   batch:  {rows: 50000, bytes: 2MiB, flush_after: 1s, queue: 2}
 *
 * ferry_pipeline_load() checks the keys the engine owns (everything but the connector
 * sections, which connectors read when opened) and computes the version hash: SHA-256
 * of the canonical JSON of what defines the data's route (source identity, resources,
 * columns, cursor, key, sink target, write mode, transforms), without tuning knobs
 * (batch settings, each connector's tuning_keys). */
#ifndef FERRY_PIPELINE_H
#define FERRY_PIPELINE_H

#include <stdint.h>
#include "ferry/config.h"
#include "ferry/connector.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_connector_catalog;

/* retries: (docs/pipeline-file.md): failed attempts whose error is transient are run again
 * from the run's durable checkpoints after backoff * 2^(n-1), capped at max_backoff and
 * jittered. */
struct ferry_retry_policy {
    int max;                /* -1: not written (the caller's default) */
    int64_t backoff_ms;     /* default 10 s */
    int64_t max_backoff_ms; /* default 10 min */
};

struct ferry_batch_opts {
    int64_t rows;           /* default 50000 */
    int64_t bytes;          /* default 2 MiB */
    int64_t flush_after_ms; /* default 1000 */
    int64_t queue;          /* ready batches waiting for the writer, default 2 */
};

struct ferry_transform_spec {
    char *resource;         /* NULL: every resource */
    char *kind;             /* drop | rename | hash | ... */
    struct ferry_cfg *node;
};

struct ferry_pipeline_spec {
    char *file;
    struct ferry_cfg *root;
    char *name;
    char *source_type;
    const struct ferry_source_vtable *source_vt;
    struct ferry_cfg *source;      /* the source section (connector keys) */
    struct ferry_resource_spec *resources;
    int n_resources;
    char *sink_type;
    const struct ferry_sink_vtable *sink_vt;
    const struct ferry_connector_catalog *catalog; /* what the types were looked up in */
    struct ferry_cfg *sink;        /* the sink section (connector keys) */
    enum ferry_write_mode write;
    struct ferry_transform_spec *transforms;
    int n_transforms;
    struct ferry_batch_opts batch;
    /* `concurrency: N` (default 4): resources copied at once; `memory:` (default 256 MiB):
     * the budget of every batch in flight in the run (runner/budget.c). Tuning, not part of
     * the version. */
    int64_t concurrency;
    int64_t memory;
    char *verify;                  /* "after_run" | "none" as written, NULL when absent;
                                    * read and stored, not acted on yet */
    struct ferry_retry_policy retries;
    bool on_resource_error_continue; /* on_resource_error: continue (default fail) */
    enum ferry_schema_changes schema_changes; /* top-level `schema_changes:` (default evolve) */
    enum ferry_unrepresentable on_unrepresentable; /* top-level `on_unrepresentable:` (fail) */
    char version[65];              /* hex SHA-256 of the route definition */
    char *request_json;            /* the whole file as canonical JSON, secrets as refs */
};

/* Loads with the built-in connectors (connectors/registry.c): what every caller uses. */
int ferry_pipeline_load(const char *path, struct ferry_pipeline_spec **out,
                        struct ferry_error *err);
int ferry_pipeline_load_string(const char *text, size_t len, const char *name,
                               struct ferry_pipeline_spec **out, struct ferry_error *err);

/* The connectors a pipeline file may name, as the loader sees them: the caller's, so that
 * config/ never calls the registry (it stays below connectors/). find: NULL when unknown;
 * the lists (NULL-terminated) name the known types in "unknown type" errors. */
struct ferry_connector_catalog {
    const struct ferry_source_vtable *(*source_find)(const char *name);
    const struct ferry_sink_vtable *(*sink_find)(const char *name);
    const struct ferry_source_vtable *const *(*sources)(void);
    const struct ferry_sink_vtable *const *(*sinks)(void);
};
/* The loader itself (config/pipeline.c), with the connectors of `cat`. */
int ferry_pipeline_parse(const char *path, const struct ferry_connector_catalog *cat,
                         struct ferry_pipeline_spec **out, struct ferry_error *err);
int ferry_pipeline_parse_string(const char *text, size_t len, const char *name,
                                const struct ferry_connector_catalog *cat,
                                struct ferry_pipeline_spec **out, struct ferry_error *err);
void ferry_pipeline_free(struct ferry_pipeline_spec *p);
/* Frees what a resource owns and zeroes it. */
void ferry_resource_spec_release(struct ferry_resource_spec *r);

/* The route key of a resource: "<resource> -> <sink type>:<table>". */
char *ferry_pipeline_route(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r);
/* Destination table for a resource: `target:` when set, else the table's last part
 * without its schema, unquoted when quoted (`"s"."My ""T"""` -> My "T"). */
const char *ferry_resource_target(const struct ferry_resource_spec *r);

/* `on_unrepresentable:` of map (fail | null | clamp; YAML's unquoted null is the word null)
 * into *out, left as it is when the key is absent. */
struct ferry_cfg;
int ferry_pipeline_unrepresentable(struct ferry_cfg *map, enum ferry_unrepresentable *out,
                                   struct ferry_error *err);

#ifdef __cplusplus
}
#endif
#endif
