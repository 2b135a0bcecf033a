/* postgres/pg_tables.c - the tables a `tables:` pattern may select (the source's list_tables
 * slot): ordinary and partitioned tables of every schema but the system ones and ferry's own
 * (`_ferry`), never a partition (a partitioned table is read once, through its parent), each
 * with its size on disk (partitions summed) for largest-first scheduling. The default schema
 * of a one-part pattern is `public`, as for `table: NAME` (ferry__pg_split_name): connections
 * pin search_path to pg_catalog. */
#include <stdlib.h>
#include <string.h>
#include "connectors/postgres/pg_common.h"
#include "ferry/core.h"
#include "ferry/tables.h"

static const char list_sql[] =
    "SELECT n.nspname, c.relname, "
    "CASE WHEN c.relkind = 'p' THEN (SELECT COALESCE(sum(pg_catalog.pg_total_relation_size(t.relid)), 0) "
    "FROM pg_catalog.pg_partition_tree(c.oid) t) ELSE pg_catalog.pg_total_relation_size(c.oid) END::bigint "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_ferry') "
    "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%' "
    "ORDER BY 1, 2";

int ferry__pg_list_tables(PGconn *c, struct ferry_table_info **out, int *n, char **default_schema,
                          struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    *default_schema = NULL;
    PGresult *res = PQexec(c, list_sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, FERRY_ESOURCE, c, res, "postgres source: listing tables");
        PQclear(res);
        return rc;
    }
    int rows = PQntuples(res), rc = FERRY_OK;
    struct ferry_table_info *v = ferry_calloc((size_t)rows + 1, sizeof *v);
    char *def = ferry_strdup("public");
    if (v == NULL || def == NULL) rc = FERRY_ENOMEM;
    for (int i = 0; rc == FERRY_OK && i < rows; i++) {
        v[i].schema = ferry_strdup(PQgetvalue(res, i, 0));
        v[i].name = ferry_strdup(PQgetvalue(res, i, 1));
        v[i].bytes = strtoll(PQgetvalue(res, i, 2), NULL, 10);
        if (!v[i].schema || !v[i].name) rc = FERRY_ENOMEM;
    }
    PQclear(res);
    if (rc) {
        ferry_table_list_free(v, rows);
        ferry_free(def);
        return ferry_error_set(err, rc, "postgres", "postgres source: out of memory");
    }
    *out = v;
    *n = rows;
    *default_schema = def;
    return FERRY_OK;
}
