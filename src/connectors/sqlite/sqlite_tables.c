/* sqlite/sqlite_tables.c - the tables a `tables:` pattern may select (the source's
 * list_tables slot): the main database's tables but SQLite's own (sqlite_*), sized by their
 * pages when the dbstat table is compiled in (else 0: ordered by name). Default schema: main. */
#include <string.h>
#include "connectors/sqlite/sqlite_common.h"
#include "ferry/core.h"
#include "ferry/tables.h"

static const char list_sql[] =
    "SELECT name FROM main.sqlite_master WHERE type = 'table' "
    "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name";

/* Bytes of each table from dbstat, when the library has it; quietly 0 otherwise. */
static void table_sizes(sqlite3 *db, struct ferry_table_info *v, int n)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT sum(pgsize) FROM dbstat('main') WHERE name = ?1", -1, &st,
                           NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return;
    }
    for (int i = 0; i < n; i++) {
        sqlite3_bind_text(st, 1, v[i].name, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) v[i].bytes = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

int ferry__sqlite_list_tables(sqlite3 *db, const char *path, struct ferry_table_info **out, int *n,
                              char **default_schema, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    *default_schema = NULL;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, list_sql, -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return ferry__sqlite_error(err, FERRY_EIO, db, "sqlite source: listing the tables of %s",
                                   path);
    }
    struct ferry_table_info *v = NULL;
    int rows = 0, cap = 0, rc = FERRY_OK, step = SQLITE_DONE;
    while (rc == FERRY_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (rows == cap) {
            int ncap = cap ? cap * 2 : 16;
            struct ferry_table_info *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) {
                rc = FERRY_ENOMEM;
                break;
            }
            memset(nv + cap, 0, (size_t)(ncap - cap) * sizeof *nv);
            v = nv;
            cap = ncap;
        }
        v[rows].schema = ferry_strdup("main");
        v[rows].name = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        if (!v[rows++].schema || !v[rows - 1].name) rc = FERRY_ENOMEM;
    }
    if (rc == FERRY_OK && step != SQLITE_DONE) {
        rc = ferry__sqlite_error(err, FERRY_EIO, db, "sqlite source: listing the tables of %s", path);
        sqlite3_finalize(st);
        ferry_table_list_free(v, rows);
        return rc;
    }
    sqlite3_finalize(st);
    char *def = rc == FERRY_OK ? ferry_strdup("main") : NULL;
    if (rc == FERRY_OK && def == NULL) rc = FERRY_ENOMEM;
    if (rc) {
        ferry_table_list_free(v, rows);
        return ferry_error_set(err, rc, "sqlite", "sqlite source: out of memory");
    }
    table_sizes(db, v, rows);
    *out = v;
    *n = rows;
    *default_schema = def;
    return FERRY_OK;
}
