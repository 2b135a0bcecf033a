/* connectors/sqlite/sqlite_evolve.h - table rebuilds for schema_changes: evolve. */
#ifndef FERRY_SQLITE_EVOLVE_H
#define FERRY_SQLITE_EVOLVE_H

#include <sqlite3.h>
#include "ferry/core.h"

#include <stdbool.h>

/* relaxed[i]: whether columns[i] is NOT NULL without a default outside the primary key;
 * when any is, rebuilds `table` with NOT NULL removed from those (rows, defaults, primary
 * key, indexes and triggers kept), in one savepoint: all or nothing. Errors name path and
 * table. */
int ferry__sqlite_relax_not_null(sqlite3 *db, const char *path, const char *table,
                                 const char *const *columns, int n, bool *relaxed,
                                 struct ferry_error *err);

#endif
