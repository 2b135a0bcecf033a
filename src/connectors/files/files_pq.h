/* connectors/files/files_pq.h - the files source's Parquet input (files_pq_source.c), over
 * the Parquet reader of src/formats/. */
#ifndef FERRY_CONNECTORS_FILES_PQ_H
#define FERRY_CONNECTORS_FILES_PQ_H

#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/error.h"

/* ---- parquet (files_pq_source.c) ---------------------------------------------------------
 * The schema of a Parquet file's footer (every field nullable, not finished); its row
 * group count (a shard each); one row group's rows from `skip` on, the columns of `schema`
 * (checked by name and type against the file). Errors name the file. */
int ferry__files_pq_schema(const char *path, struct ferry_schema **out, struct ferry_error *err);
int ferry__files_pq_groups(const char *path, int *n, struct ferry_error *err);
int ferry__files_pq_extract(const char *path, int group, const struct ferry_schema *schema,
                            int64_t skip, struct ferry_row_writer *rw, struct ferry_error *err);

#endif
