/* connectors/sqlite/sqlite_evolve.c - `schema_changes: evolve` on SQLite: a column the
 * source dropped is kept, NULL from now on, so a NOT NULL without a default must go; a
 * column the source widened gets the wider declared type (SQLite's storage would hold the
 * values anyway, the declaration is what readers go by). SQLite cannot alter a column's
 * type or constraints in place; the table
 * is rebuilt the way its documentation describes (create the new shape under another name,
 * copy the rows, drop the old table, rename, recreate its indexes and triggers), inside one
 * savepoint, so a failure leaves the table as it was. Called by sqlite_sink.c's prepare. */
#include <stdio.h>
#include <string.h>
#include "connectors/sqlite/sqlite_common.h"
#include "connectors/sqlite/sqlite_evolve.h"

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
}

/* CREATE TABLE "new" (...) from pragma_table_info of `table`, NOT NULL kept except on the
 * columns in `relax`, declared types kept except those in `retype`; INSERT INTO "new"
 * SELECT <columns> FROM "table". */
static int rebuild_sql(sqlite3 *db, const char *table, const char *tmp, const char *const *relax,
                       int n_relax, const struct ferry_sqlite_retype *retype, int n_retype,
                       struct ferry_buf *create, struct ferry_buf *copy, struct ferry_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT name, type, \"notnull\", dflt_value, pk FROM "
                           "pragma_table_info(?1, 'main') ORDER BY cid",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESINK, db, "sqlite sink: table \"%s\"", table);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    int rc = ferry_buf_printf(create, "CREATE TABLE ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(create, tmp);
    if (rc == FERRY_OK) rc = ferry_buf_printf(create, " (");
    if (rc == FERRY_OK) rc = ferry_buf_printf(copy, "INSERT INTO ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(copy, tmp);
    if (rc == FERRY_OK) rc = ferry_buf_printf(copy, " SELECT ");
    char pk[8][128];
    int n_pk = 0, i = 0;
    while (rc == FERRY_OK && sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *decl = (const char *)sqlite3_column_text(st, 1);
        const char *dflt = (const char *)sqlite3_column_text(st, 3);
        bool not_null = sqlite3_column_int(st, 2) != 0;
        for (int r = 0; r < n_relax; r++)
            if (strcmp(relax[r], name) == 0) not_null = false;
        for (int r = 0; r < n_retype; r++)
            if (strcmp(retype[r].name, name) == 0) decl = retype[r].decl;
        int p = sqlite3_column_int(st, 4);
        if (p > 0 && p <= 8) {
            snprintf(pk[p - 1], sizeof pk[0], "%s", name);
            n_pk++;
        }
        if (i) rc = ferry_buf_printf(create, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(create, name);
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(create, " %s%s%s%s", decl ? decl : "",
                                  not_null ? " NOT NULL" : "", dflt ? " DEFAULT " : "",
                                  dflt ? dflt : "");
        if (rc == FERRY_OK && i) rc = ferry_buf_printf(copy, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(copy, name);
        i++;
    }
    sqlite3_finalize(st);
    for (int k = 0; rc == FERRY_OK && k < n_pk; k++) {
        rc = ferry_buf_printf(create, k ? ", " : ", PRIMARY KEY (");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(create, pk[k]);
    }
    if (rc == FERRY_OK && n_pk) rc = ferry_buf_printf(create, ")");
    if (rc == FERRY_OK) rc = ferry_buf_printf(create, ")");
    if (rc == FERRY_OK) rc = ferry_buf_printf(copy, " FROM ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(copy, table);
    return rc == FERRY_OK ? FERRY_OK : oom(err);
}

/* The CREATE statements of the table's indexes and triggers, to run again after the
 * rename (dropping the table drops them). */
static int companions(sqlite3 *db, const char *table, struct ferry_buf *out,
                      struct ferry_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT sql FROM sqlite_schema WHERE tbl_name = ?1 AND type IN "
                           "('index', 'trigger') AND sql IS NOT NULL",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESINK, db, "sqlite sink: table \"%s\"", table);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    int rc = FERRY_OK;
    while (rc == FERRY_OK && sqlite3_step(st) == SQLITE_ROW)
        rc = ferry_buf_printf(out, "%s;\n", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc == FERRY_OK ? FERRY_OK : oom(err);
}

/* Which of columns are NOT NULL without a default and outside the primary key. */
static int must_relax(sqlite3 *db, const char *table, const char *const *columns, int n,
                      bool *relax, int *n_relax, struct ferry_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT 1 FROM pragma_table_info(?1, 'main') WHERE name = ?2 AND "
                           "\"notnull\" AND dflt_value IS NULL AND pk = 0",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESINK, db, "sqlite sink: table \"%s\"", table);
    *n_relax = 0;
    for (int i = 0; i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, columns[i], -1, SQLITE_STATIC);
        relax[i] = sqlite3_step(st) == SQLITE_ROW;
        *n_relax += relax[i];
    }
    sqlite3_finalize(st);
    return FERRY_OK;
}

int ferry__sqlite_evolve(sqlite3 *db, const char *path, const char *table,
                         const char *const *columns, int n, bool *relaxed,
                         const struct ferry_sqlite_retype *retype, int n_retype,
                         struct ferry_error *err)
{
    int n_relax = 0;
    int rc0 = must_relax(db, table, columns, n, relaxed, &n_relax, err);
    if (rc0 != FERRY_OK || (n_relax == 0 && n_retype == 0)) return rc0;
    const char *relax[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++)
        if (relaxed[i]) relax[k++] = columns[i];
    columns = relax;
    n = k;
    char *tmp = ferry_asprintf("%s__ferry_evolve", table);
    if (tmp == NULL) return oom(err);
    struct ferry_buf create, copy, again, tail;
    ferry_buf_init(&create, 0);
    ferry_buf_init(&copy, 0);
    ferry_buf_init(&again, 0);
    ferry_buf_init(&tail, 0);
    int rc = rebuild_sql(db, table, tmp, columns, n, retype, n_retype, &create, &copy, err);
    if (rc == FERRY_OK) rc = companions(db, table, &again, err);
    if (rc == FERRY_OK) {
        int b = ferry_buf_printf(&tail, "DROP TABLE ");
        if (b == FERRY_OK) b = ferry__sqlite_quote(&tail, table);
        if (b == FERRY_OK) b = ferry_buf_printf(&tail, "; ALTER TABLE ");
        if (b == FERRY_OK) b = ferry__sqlite_quote(&tail, tmp);
        if (b == FERRY_OK) b = ferry_buf_printf(&tail, " RENAME TO ");
        if (b == FERRY_OK) b = ferry__sqlite_quote(&tail, table);
        if (b == FERRY_OK) b = ferry_buf_printf(&tail, ";\n%s", again.data ? again.data : "");
        if (b != FERRY_OK) rc = oom(err);
    }
    char what[300];
    snprintf(what, sizeof what, "sqlite sink: %s: rebuilding table \"%s\" (%d column(s) widened, "
             "NOT NULL let go on %d column(s) dropped at the source)", path, table, n_retype, n);
    if (rc == FERRY_OK) rc = ferry__sqlite_exec(db, "SAVEPOINT ferry_evolve", what, err);
    if (rc == FERRY_OK) {
        rc = ferry__sqlite_exec(db, create.data, what, err);
        if (rc == FERRY_OK) rc = ferry__sqlite_exec(db, copy.data, what, err);
        if (rc == FERRY_OK) rc = ferry__sqlite_exec(db, tail.data, what, err);
        if (rc != FERRY_OK) sqlite3_exec(db, "ROLLBACK TO ferry_evolve", NULL, NULL, NULL);
        sqlite3_exec(db, "RELEASE ferry_evolve", NULL, NULL, NULL);
    }
    if (rc == FERRY_OK) ferry_log(FERRY_LOG_INFO, "%s (schema_changes: evolve)", what);
    ferry_buf_release(&create);
    ferry_buf_release(&copy);
    ferry_buf_release(&again);
    ferry_buf_release(&tail);
    ferry_free(tmp);
    return rc;
}
