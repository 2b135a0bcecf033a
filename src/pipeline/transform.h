/* pipeline/transform.h - transforms on whole batches, run on their own stage.
 *
 * A chain is compiled once per resource from the pipeline file's `transforms:` entries
 * that name the resource (or name none), against the resource's schema; compiling yields
 * the schema batches have after the chain, which is what the sink prepares. Errors name the
 * transform's index, key and line, before any data moves.
 *
 * Kinds: drop: COL|[COLS], select: [COLS], rename: {OLD: NEW},
 * hash: sha256|hmac_sha256 with column: COL (and key: env:NAME|file:PATH for hmac),
 * mask: COL [keep_last: N] [char: C], add: NAME with value: CONST|run_id|load_time|
 * source_position, filter: COL with one of equals|not_equals|in|is_null|greater_than|
 * less_than, cast: COL with to: TYPE. docs/pipeline-file.md has the semantics.
 * Projections (drop, select, rename) share the input's buffers; hash, mask, add and cast
 * build a canonical copy with one new column; filter copies the kept rows.
 * Not thread-safe; one chain per transform stage. */
#ifndef FERRY_PIPELINE_TRANSFORM_H
#define FERRY_PIPELINE_TRANSFORM_H

#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/pipeline.h"

struct ferry_transform_chain;

/* *chain is NULL when no transform applies (then *out_schema is a new ref of `in`). */
int ferry_transforms_compile(const struct ferry_pipeline_spec *p, const char *resource,
                             struct ferry_schema *in, struct ferry_transform_chain **chain,
                             struct ferry_schema **out_schema, struct ferry_error *err);
/* The chain's `filter` steps a source may check against statistics (connector.h,
 * ferry_read_filter): those on an integer, date or timestamp column that comes unchanged
 * from the source column of schema `in` (renames followed; hash, mask, cast and add break
 * the link), with equals, in, greater_than or less_than. Owned by the chain (valid until it
 * is freed); *n 0 for a NULL chain. */
int ferry_transforms_pushdown(struct ferry_transform_chain *chain, const struct ferry_schema *in,
                              const struct ferry_read_filter **out, int *n,
                              struct ferry_error *err);
/* Consumes `in`, returns the transformed batch in *out. */
int ferry_transforms_apply(struct ferry_transform_chain *chain, struct ferry_batch *in,
                           struct ferry_batch **out, struct ferry_error *err);
/* The run whose batches the chain transforms (`add: ... value: run_id`). The chain is
 * compiled before the run exists (plan time), so the runner sets it once the run is picked;
 * applying an `add run_id` step before this is an error. Accepts a NULL chain. */
void ferry_transforms_set_run(struct ferry_transform_chain *chain, int64_t run_id);
/* Whether the batches may hold ferry's special values (connector.h: +-infinity dates and
 * timestamps, decimal NaN; the runner lets them through only for on_unrepresentable null |
 * clamp into a sink that cannot hold them, which converts them after the chain). hash and
 * cast to text then read them as 'infinity', '-infinity' and 'NaN' (PostgreSQL's text), a
 * cast date -> timestamp keeps +-infinity, a rescaled decimal keeps NaN. Accepts NULL. */
void ferry_transforms_set_specials(struct ferry_transform_chain *chain, bool specials);
void ferry_transforms_free(struct ferry_transform_chain *chain);

#endif
