/* pipeline/transform.h - transforms on whole batches, run on their own stage.
 *
 * A chain is compiled once per resource from the pipeline file's `transforms:` entries
 * that name the resource (or name none), against the resource's schema; compiling yields
 * the schema batches have after the chain, which is what the sink prepares. Errors name the
 * transform's index, key and line, before any data moves.
 *
 * Kinds available: drop: COL|[COLS], select: [COLS], rename: {OLD: NEW},
 * hash: sha256|hmac_sha256 with column: COL (and key: env:NAME|file:PATH for hmac).
 * Projections (drop, select, rename) share the input's buffers; hash builds one new column.
 * Not thread-safe; one chain per transform stage. */
#ifndef FERRY_PIPELINE_TRANSFORM_H
#define FERRY_PIPELINE_TRANSFORM_H

#include "ferry/batch.h"
#include "ferry/pipeline.h"

struct ferry_transform_chain;

/* *chain is NULL when no transform applies (then *out_schema is a new ref of `in`). */
int ferry_transforms_compile(const struct ferry_pipeline_spec *p, const char *resource,
                             struct ferry_schema *in, struct ferry_transform_chain **chain,
                             struct ferry_schema **out_schema, struct ferry_error *err);
/* Consumes `in`, returns the transformed batch in *out. */
int ferry_transforms_apply(struct ferry_transform_chain *chain, struct ferry_batch *in,
                           struct ferry_batch **out, struct ferry_error *err);
void ferry_transforms_free(struct ferry_transform_chain *chain);

#endif
