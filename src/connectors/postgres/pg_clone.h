/* connectors/postgres/pg_clone.h - the destination schema like the source, PostgreSQL to
 * PostgreSQL (`create: like_source` of the postgres sink).
 *
 * Before the data: the enum and domain types the tables use, the sequences their columns
 * own (serial), and each table with the source's own column types, NOT NULL, defaults and
 * identity (BY DEFAULT while loading); for keyed writes (upsert, merge) the primary key too.
 * After the data: primary keys, unique, check and exclusion constraints, the other indexes,
 * then foreign keys (when asked), GENERATED ALWAYS restored, sequences set to the source's
 * values. Everything is read from the source's catalog (pg_get_expr, pg_get_constraintdef,
 * pg_get_indexdef, printed with the table's schema on the search path so that same-schema
 * names come out unqualified and land in the sink's schema); every step checks whether its
 * object exists first, so a resumed or repeated run creates each object once. Called by
 * the runner (runner/clone.c), the one place that knows both ends of a pipeline. */
#ifndef FERRY_PG_CLONE_H
#define FERRY_PG_CLONE_H

#include <stdbool.h>
#include "ferry/config.h"
#include "ferry/error.h"

struct ferry_pg_clone_table {
    const char *source; /* as the resource names it: "orders", "public.orders" */
    const char *target; /* the destination table in the sink's schema */
};

enum ferry_pg_clone_phase { FERRY_PG_CLONE_BEFORE, FERRY_PG_CLONE_AFTER };

/* One phase over all tables. source/sink: the pipeline's sections (connection keys are
 * read from them). keyed: the write mode needs the primary key before the data.
 * foreign_keys: create foreign keys in the after phase. Errors name table and object. */
int ferry_pg_clone(struct ferry_cfg *source, struct ferry_cfg *sink,
                   const struct ferry_pg_clone_table *tables, int n,
                   enum ferry_pg_clone_phase phase, bool keyed, bool foreign_keys,
                   struct ferry_error *err);

#endif
