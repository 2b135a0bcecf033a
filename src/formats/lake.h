/* formats/lake.h - what the `files` and `s3` sinks share: parts in a format
 * (formats/formats.h) published by a run manifest and, once a replace made one, a data
 * set manifest (docs/internals/connectors.md, "files and s3 sinks"). The sink keeps where the
 * bytes go (a folder, a bucket); this keeps the format options read from the sink section,
 * the run's session state, the manifest lists and the commit's publish step. Engine-internal
 * (src/formats/, docs/internals/formats.md); calls no connector. */
#ifndef FERRY_FORMATS_LAKE_H
#define FERRY_FORMATS_LAKE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "formats/formats.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/error.h"

struct ferry__lake {
    const char *what;     /* "files sink" | "s3 sink": starts every message */
    const char *origin;   /* "files" | "s3": the error origin */
    const char *list_key; /* the manifests' list: "files" | "objects" */
    const char *name_key; /* an entry's name: "path" | "key" */
    /* from the sink section (ferry__lake_open) */
    const struct ferry__files_format *fmt;
    struct ferry__files_format_opts opts;
    char *null_marker;
    int64_t part_rows;  /* 0: no row limit */
    int64_t part_bytes; /* INT64_MAX: no byte limit */
    /* the run (ferry__lake_begin) */
    char *pipeline, *version;
    int64_t run_id;
    int attempt;
    json_t *earlier; /* entries of earlier commits of this run (its manifest), or NULL */
    json_t *dataset; /* entries of the data set manifest, or NULL */
    bool replace;    /* write: replace (every target: the pipeline has one write mode) */
    bool published;  /* the data set manifest lists this session's parts: keep them */
    bool session;
};

/* Sets what/origin/list_key/name_key, then reads format, delimiter, null, header, newline,
 * part_rows and part_bytes from cfg and lets the format read its own keys. On failure the
 * caller still calls ferry__lake_release. */
int ferry__lake_open(struct ferry__lake *lk, struct ferry_cfg *cfg, const char *what,
                     const char *origin, const char *list_key, const char *name_key,
                     struct ferry_error *err);
void ferry__lake_release(struct ferry__lake *lk);

/* The capabilities slot of both sinks: append and replace, durable at commit, encoded
 * integrity, an atomic replace that commits once. */
void ferry__lake_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps);

/* prepare(): `table` must name one folder level (no '/', no leading '.', not _runs) under
 * `where` (for the message) and the write mode be append or replace; sets lk->replace. */
int ferry__lake_check_target(struct ferry__lake *lk, const struct ferry_target *target,
                             const char *table, const char *where, struct ferry_error *err);

/* begin(): takes the run's identity, forgets the manifests of the previous session (the sink
 * then loads earlier and dataset) and clears published. */
int ferry__lake_begin(struct ferry__lake *lk, const struct ferry_session_info *run,
                      struct ferry_error *err);

/* Whether `list` (manifest entries, may be NULL) has an entry whose name_key is `name`. */
bool ferry__lake_in_list(const json_t *list, const char *name_key, const char *name);
/* Listed by this run's manifest or by the data set manifest: published, never swept. */
bool ferry__lake_listed(const struct ferry__lake *lk, const char *name);
/* apply(): the open part has reached part_rows or part_bytes. */
bool ferry__lake_part_full(const struct ferry__lake *lk, int64_t rows, int64_t bytes);

/* The head of this run's manifests; extra_key/extra_value may be NULL. */
struct ferry__manifest_head ferry__lake_head(const struct ferry__lake *lk, const char *extra_key,
                                             const char *extra_value);

/* The entries the new data set manifest keeps from `from` (the current data set, or the
 * union of the run manifests before the first one): replace drops the tables the run writes
 * (replaced(ctx, table)), append drops this run's earlier entries and adds them back, as they
 * are, at the end. A new reference, NULL when out of memory. */
json_t *ferry__lake_kept(const struct ferry__lake *lk, const json_t *from,
                         bool (*replaced)(const void *ctx, const char *table), const void *ctx);
/* The list of a manifest text just written (b), as the data set now lists it; NULL when b
 * cannot be parsed (out of memory). */
json_t *ferry__lake_list_of(const struct ferry__lake *lk, const struct ferry_buf *b);

/* The storage steps of a commit's publish. */
struct ferry__lake_store {
    /* writes the data set manifest (the switch); *now: its list */
    int (*put_dataset)(void *ctx, json_t **now, struct ferry_error *err);
    /* writes this run's manifest */
    int (*put_manifest)(void *ctx, struct ferry_error *err);
    /* after a replace's switch: removes what `now` no longer lists (best effort, logged) */
    void (*remove_replaced)(void *ctx, const json_t *now);
    const char *after_switch; /* failpoint name */
};
/* commit(), once every part is complete: with a data set manifest (replace, or append after
 * a replace) switches it, then marks the parts published (abort must keep them from then
 * on), writes the run manifest and removes what a replace replaced; else writes the run
 * manifest alone. */
int ferry__lake_publish(struct ferry__lake *lk, const struct ferry__lake_store *st, void *ctx,
                        struct ferry_error *err);

#endif
