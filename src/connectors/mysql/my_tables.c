/* mysql/my_tables.c - the tables a `tables:` pattern may select (the source's list_tables
 * slot): base tables (and MariaDB's system-versioned ones) of every database the user can see
 * but the server's own (mysql, information_schema, performance_schema, sys) and ferry's
 * (`_ferry_checkpoints`, replace's `*__ferry_staging` / `*__ferry_old`), never a view or a
 * sequence; a partitioned table is one row (MySQL lists no partitions as tables). Sizes are
 * information_schema's DATA_LENGTH + INDEX_LENGTH (estimates), for largest-first scheduling.
 * A pattern's schema part is the database; a one-part pattern means the URL's database. */
#include <stdlib.h>
#include <string.h>
#include "connectors/mysql/my_common.h"
#include "ferry/tables.h"

static const char list_sql[] =
    "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0) "
    "FROM information_schema.TABLES WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') "
    "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') "
    "AND TABLE_NAME <> '_ferry_checkpoints' AND TABLE_NAME NOT LIKE '%\\_\\_ferry\\_staging' "
    "AND TABLE_NAME NOT LIKE '%\\_\\_ferry\\_old' ORDER BY 1, 2";

int ferry__my_list_tables(MYSQL *m, const char *default_db, struct ferry_table_info **out, int *n,
                          char **default_schema, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    *default_schema = NULL;
    MYSQL_RES *res = NULL;
    if (mysql_real_query(m, list_sql, sizeof list_sql - 1) != 0 ||
        (res = mysql_store_result(m)) == NULL)
        return ferry__my_error(err, FERRY_ESOURCE, m, "mysql source: listing tables");
    int rows = (int)mysql_num_rows(res), rc = FERRY_OK;
    struct ferry_table_info *v = ferry_calloc((size_t)rows + 1, sizeof *v);
    char *def = ferry_strdup(default_db ? default_db : "");
    if (v == NULL || def == NULL) rc = FERRY_ENOMEM;
    for (int i = 0; rc == FERRY_OK && i < rows; i++) {
        MYSQL_ROW row = mysql_fetch_row(res);
        if (row == NULL) break;
        v[i].schema = ferry_strdup(row[0] ? row[0] : "");
        v[i].name = ferry_strdup(row[1] ? row[1] : "");
        v[i].bytes = row[2] ? strtoll(row[2], NULL, 10) : 0;
        if (!v[i].schema || !v[i].name) rc = FERRY_ENOMEM;
    }
    mysql_free_result(res);
    if (rc) {
        ferry_table_list_free(v, rows);
        ferry_free(def);
        return ferry_error_set(err, rc, "mysql", "mysql source: out of memory");
    }
    *out = v;
    *n = rows;
    *default_schema = def;
    return FERRY_OK;
}
