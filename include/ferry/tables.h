/* ferry/tables.h - table patterns (`tables:` / `exclude:` in a resource entry), expanded into
 * one resource per table when a run is planned (src/config/tables.c).
 *
 * A pattern is `schema.name` or `name`; each part a glob (`*`, `?`, ASCII case-insensitive)
 * or a "quoted" name matched exactly. `name` alone matches the source's default schema. */
#ifndef FERRY_TABLES_H
#define FERRY_TABLES_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_pipeline_spec;

/* One table a source lists (its `list_tables` slot). */
struct ferry_table_info {
    char *schema;   /* as the catalog spells it; "" where the source has no schemas */
    char *name;
    int64_t bytes;  /* size estimate, for largest-first ordering; 0 when unknown */
};
void ferry_table_list_free(struct ferry_table_info *v, int n);

/* FERRY_OK when `text` is a well-formed pattern, else FERRY_ECONFIG naming it. */
int ferry_table_pattern_check(const char *text, struct ferry_error *err);
bool ferry_table_pattern_match(const char *pattern, const char *default_schema, const char *schema,
                               const char *name);
/* `schema.name` as a resource name: each part bare when it is a plain lower-case identifier,
 * else double-quoted. Owned by the caller; NULL on out of memory. */
char *ferry_table_qualified(const char *schema, const char *name);

/* Whether the pipeline has pattern entries still to expand. */
bool ferry_tables_pending(const struct ferry_pipeline_spec *p);
/* Replaces every pattern entry of p by one resource per matching table of `tables` (not
 * excluded, not named by an explicit `table:` entry or an earlier pattern entry), largest
 * first, after the explicit entries. A pattern matching no table at all is FERRY_ENOTFOUND
 * naming it; two tables that would write to one destination table is FERRY_ECONFIG naming
 * both. On error p is unchanged. */
int ferry_tables_expand(struct ferry_pipeline_spec *p, const struct ferry_table_info *tables,
                        int n, const char *default_schema, struct ferry_error *err);

/* The same with the tables the opened source `src_ctx` lists (its list_tables slot); a source
 * without one is FERRY_ECONFIG. Nothing to do when no entry is a pattern. Callers: the runner's
 * planning, verify, cdc drop. */
int ferry_tables_expand_source(struct ferry_pipeline_spec *p, void *src_ctx,
                               struct ferry_error *err);

/* internal: parses a pattern into its parts (schema NULL when absent); FERRY_EINVAL when
 * malformed. */
int ferry__table_pattern_parse(const char *text, char **schema, bool *schema_exact, char **name,
                               bool *name_exact);

#ifdef __cplusplus
}
#endif
#endif
