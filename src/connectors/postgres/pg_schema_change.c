/* connectors/postgres/pg_schema_change.c - a cdc stream's view of its table's Relation
 * messages under `schema_changes:` (pg_cdc.h, pipeline/schema_change.h).
 *
 * Maps the run's schema (discovered when the run began) onto the columns a Relation
 * message describes, by name, and classifies each difference:
 *   - a field the message lacks: if the column is still in the catalog, the message
 *     describes changes made before it was added (NULL, nothing changed); else the column
 *     was dropped at the source (dropped);
 *   - a column the schema lacks (all columns captured): still in the catalog, it was added
 *     after the run began (added); else added and dropped again since (gone);
 *   - a type that maps differently: the schema's type holding every value of the message's
 *     means the message predates a widening discover already saw (read as the wider type);
 *     the reverse is a widening at the source (widened); anything else is retyped.
 * ferry_schema_change_decide() says what each difference does; each one is noted for the
 * run's `schema.changed` events. The catalog is read on a connection of its own (the
 * stream's is busy, and a reader's may sit in an older snapshot), opened only when a
 * column is missing on one side. Called by pg_cdc.c on the stream's thread. */
#include <string.h>
#include "connectors/postgres/pg_cdc.h"
#include "connectors/postgres/pg_copy.h"
#include "connectors/postgres/pg_repl.h"
#include "pipeline/schema_change.h"

#define WHAT "postgres source"

struct check {
    const struct ferry_pg_schema_source *src;
    const struct ferry_pg_cdc_target *t;
    PGconn *c; /* the catalog connection, once opened */
    bool *stop;
};

/* Whether the table has column `name` in the current catalog. */
static int column_exists_now(struct check *k, const char *name, bool *exists,
                             struct ferry_error *err)
{
    if (k->c == NULL) {
        int rc = ferry__pg_connect(k->src->url, k->src->opts, WHAT, &k->c, err);
        if (rc != FERRY_OK) return rc;
    }
    const char *params[3] = {k->t->schema_name, k->t->table, name};
    PGresult *res = PQexecParams(
        k->c,
        "SELECT 1 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = "
        "a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE "
        "n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 AND NOT "
        "a.attisdropped",
        3, NULL, params, NULL, NULL, 0);
    int rc = FERRY_OK;
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        rc = ferry__pg_error(err, FERRY_ESOURCE, k->c, res, WHAT ": %s: reading the catalog",
                             k->src->peer);
    else
        *exists = PQntuples(res) == 1;
    PQclear(res);
    return rc;
}

static bool builtin_oid(uint32_t oid)
{
    enum ferry_pg_wire w;
    return ferry__pg_wire_of(oid, &w);
}

/* Notes the change and turns its decision into the caller's outcome. */
static int decide(struct check *k, const char *column, enum ferry_schema_change_kind kind,
                  const char *old_type, const char *new_type, struct ferry_error *err)
{
    const struct ferry_pg_cdc_target *t = k->t;
    enum ferry_schema_action a = ferry_schema_change_decide(t->policy, kind);
    ferry_schema_change_note(t->route, t->from, column, kind, old_type, new_type, t->policy, a);
    const char *policy = ferry_schema_changes_name(t->policy);
    if (a == FERRY_SC_STOP) {
        if (kind == FERRY_SC_ADDED)
            ferry_log(FERRY_LOG_INFO,
                      WHAT ": table %s: new column \"%s\" at the source; this run stops before "
                           "the change that carries it, the next run adds it to the destination",
                      t->from, column);
        else
            ferry_log(FERRY_LOG_INFO,
                      WHAT ": table %s: column \"%s\" was %s at the source (%s -> %s); this run "
                           "stops before the change that carries it, the next run takes it in",
                      t->from, column, kind == FERRY_SC_DROPPED ? "dropped" : "widened", old_type,
                      new_type ? new_type : "dropped");
        *k->stop = true;
        return FERRY_OK;
    }
    if (a == FERRY_SC_CONTINUE) {
        /* gone: the values of a column added and dropped again before they were captured
         * are not written (the destination's column, if any, gets NULL): said loudly */
        ferry_log(kind == FERRY_SC_GONE ? FERRY_LOG_WARN : FERRY_LOG_INFO,
                  WHAT ": table %s: column \"%s\" %s at the source (schema_changes: %s); %s",
                  t->from, column,
                  kind == FERRY_SC_GONE ? "was dropped while changes carrying it were not yet "
                                          "captured"
                                        : ferry_schema_change_kind_name(kind),
                  policy,
                  kind == FERRY_SC_DROPPED ? "kept in the destination, NULL from now on"
                                           : "its values are not written");
        return FERRY_OK;
    }
    if (kind == FERRY_SC_RETYPED || kind == FERRY_SC_WIDENED)
        return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                               WHAT ": table %s: column \"%s\" changed type at the source from %s "
                                    "to %s, which schema_changes: %s does not follow%s; adapt the "
                                    "destination and resnapshot the resource (`ferry cdc drop`, "
                                    "then run)",
                               t->from, column, old_type, new_type, policy,
                               kind == FERRY_SC_RETYPED ? " (not a widening: values could be lost)"
                                                        : "");
    return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                           WHAT ": table %s: column \"%s\" was %s at the source while it was "
                                "followed (schema_changes: %s); adapt the destination and "
                                "resnapshot the resource (`ferry cdc drop`, then run), or use "
                                "schema_changes: evolve",
                           t->from, column,
                           kind == FERRY_SC_ADDED ? "added" : "dropped (or renamed)", policy);
}

/* A field of the schema against the message's column idx (or its absence). */
static int check_field(struct check *k, const struct ferry_field *fd,
                       const struct ferry_pg_repl_column *col, struct ferry_error *err)
{
    if (col == NULL) {
        bool exists = true;
        int rc = column_exists_now(k, fd->name, &exists, err);
        if (rc != FERRY_OK || exists) return rc;
        char was[64];
        ferry_field_type_text(fd, was, sizeof was);
        return decide(k, fd->name, FERRY_SC_DROPPED, was, NULL, err);
    }
    struct ferry_field msg = {0};
    ferry__pg_map_type(col->type_oid, col->typmod, &msg.type, &msg.precision, &msg.scale);
    bool same = msg.type == fd->type && (msg.type != FERRY_TYPE_DECIMAL128 ||
                                         (msg.precision == fd->precision && msg.scale == fd->scale));
    /* Domains and user types arrive with their own oid: judged by their values. */
    if (same || !builtin_oid(col->type_oid)) return FERRY_OK;
    if (ferry_type_widens(&msg, fd)) return FERRY_OK; /* changes from before a widening */
    char was[64], now[64];
    ferry_field_type_text(fd, was, sizeof was);
    ferry_field_type_text(&msg, now, sizeof now);
    return decide(k, fd->name, ferry_type_widens(fd, &msg) ? FERRY_SC_WIDENED : FERRY_SC_RETYPED,
                  was, now, err);
}

/* A column of the message that the schema lacks. */
static int check_new_column(struct check *k, const struct ferry_pg_repl_column *col,
                            struct ferry_error *err)
{
    bool exists = false;
    int rc = column_exists_now(k, col->name, &exists, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_field f = {0};
    ferry__pg_map_type(col->type_oid, col->typmod, &f.type, &f.precision, &f.scale);
    char now[64];
    ferry_field_type_text(&f, now, sizeof now);
    return decide(k, col->name, exists ? FERRY_SC_ADDED : FERRY_SC_GONE, NULL, now, err);
}

int ferry__pg_schema_relation(const struct ferry_pg_schema_source *src,
                              const struct ferry_pg_cdc_target *t, int n_user,
                              const struct ferry_pg_repl_msg *m, int *map, bool *stop,
                              struct ferry_error *err)
{
    struct check k = {.src = src, .t = t, .stop = stop};
    const struct ferry_schema *sc = t->sc;
    int rc = FERRY_OK;
    for (int f = 0; f < n_user && rc == FERRY_OK; f++) {
        const struct ferry_field *fd = &sc->fields[f];
        map[f] = -1;
        for (int i = 0; i < m->n_cols; i++)
            if (strcmp(m->cols[i].name, fd->name) == 0) map[f] = i;
        rc = check_field(&k, fd, map[f] >= 0 ? &m->cols[map[f]] : NULL, err);
    }
    for (int i = 0; t->all_columns && rc == FERRY_OK && i < m->n_cols; i++)
        if (ferry_schema_find(sc, m->cols[i].name) < 0) rc = check_new_column(&k, &m->cols[i], err);
    if (k.c != NULL) PQfinish(k.c);
    return rc;
}

int ferry__pg_schema_truncate(const struct ferry_pg_cdc_target *t, struct ferry_error *err)
{
    enum ferry_schema_action a = ferry_schema_change_decide(t->policy, FERRY_SC_TRUNCATED);
    if (a == FERRY_SC_APPLY && !t->truncates) a = FERRY_SC_ERROR;
    ferry_schema_change_note(t->route, t->from, NULL, FERRY_SC_TRUNCATED, NULL, NULL, t->policy, a);
    if (a == FERRY_SC_APPLY) {
        ferry_log(FERRY_LOG_INFO, WHAT ": table %s was truncated at the source; applied in "
                                       "stream order",
                  t->from);
        return FERRY_OK;
    }
    return ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                           WHAT ": table %s was truncated at the source; %s: resnapshot the "
                                "resource (`ferry cdc drop`, empty the destination, run)",
                           t->from,
                           t->policy == FERRY_SCHEMA_FAIL
                               ? "schema_changes: fail stops here"
                               : "a truncate is applied only by write: upsert or merge without "
                                 "soft_delete into a postgres or sqlite sink");
}
