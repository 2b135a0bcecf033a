/* connectors/sqlite/sqlite_evolve.h - table rebuilds for schema_changes: evolve. */
#ifndef FERRY_SQLITE_EVOLVE_H
#define FERRY_SQLITE_EVOLVE_H

#include <sqlite3.h>
#include "ferry/core.h"

#include <stdbool.h>

struct ferry_sqlite_retype {
    const char *name;
    const char *decl; /* the new declared type */
};

/* relaxed[i]: whether columns[i] is NOT NULL without a default outside the primary key;
 * when any is, or retype lists columns, rebuilds `table` with NOT NULL removed from those
 * and the new declared types (rows, defaults, primary key, indexes and triggers kept), in
 * one savepoint: all or nothing. Errors name path and table. */
int ferry__sqlite_evolve(sqlite3 *db, const char *path, const char *table,
                         const char *const *columns, int n, bool *relaxed,
                         const struct ferry_sqlite_retype *retype, int n_retype,
                         struct ferry_error *err);

#endif
