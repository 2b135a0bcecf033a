/* connectors/postgres/pg_cdc.c - change data capture for the postgres source (pg_cdc.h).
 *
 * Owns: the names and lifecycle of a cdc resource's publication and replication slot, the
 * replication connection (libpq `replication=database`), the START_REPLICATION stream
 * (pgoutput protocol version 1, values as text), the conversion of its tuples into the row
 * writer, the standby status updates, and acknowledging (advancing) the slot. Calls libpq,
 * pg_common.c, pg_repl.c (the pure decoder), the row writer, the batch text parsers and
 * jansson. Called by pg_source.c (plan, extract of shard 0, cdc_ack, cdc_drop) on the
 * thread that owns the source instance.
 *
 * The rule that matters most: the slot's confirmed position moves only through
 * ferry__pg_cdc_ack(), which the runner calls with a position the state store has saved
 * after the sink made it durable. The stream's standby status updates report `flush` as
 * the plan's start (the position already saved when the run began), never what was merely
 * received; `write` may run ahead (it does not move a logical slot). See
 * docs/internals/cdc.md. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "connectors/postgres/pg_cdc.h"
#include "connectors/postgres/pg_copy.h"
#include "connectors/postgres/pg_repl.h"
#include "connectors/postgres/pg_values.h"
#include "ferry/failpoint.h"

#define WHAT "postgres source"
#define STATUS_EVERY_US INT64_C(10000000) /* standby status even when idle */
#define PROBE_EVERY_US INT64_C(100000)    /* ask for a keepalive (server position) when idle */

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

/* ---- names and options --------------------------------------------------------------- */

static bool valid_slot_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
    return true;
}

void ferry__pg_cdc_fold_name(const char *a, const char *b, const char *id, char out[64])
{
    char full[600];
    if (b != NULL)
        snprintf(full, sizeof full, "ferry_%s_%s", a, b);
    else
        snprintf(full, sizeof full, "ferry_%s", a);
    size_t n = strlen(full);
    for (size_t i = 0; i < n; i++) {
        char ch = full[i];
        if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))) ch = '_';
        full[i] = ch;
    }
    if (n <= 63) {
        memcpy(out, full, n + 1);
        return;
    }
    /* Too long: keep a readable head and make it unique with a hash. */
    char hex[65];
    struct ferry_buf buf;
    ferry_buf_init(&buf, 0);
    ferry_buf_printf(&buf, "%s\n%s", a, id);
    ferry_sha256_hex(buf.data ? buf.data : "", buf.len, hex);
    ferry_buf_release(&buf);
    memcpy(out, full, 54);
    out[54] = '_';
    memcpy(out + 55, hex, 8);
    out[63] = '\0';
}

/* "ferry_<pipeline>_<table>" (a table's own slot, before one slot per pipeline). */
static void derive_name(const struct ferry_resource_spec *spec, char out[64])
{
    const struct ferry_read_context *run = ferry_read_context_of(spec);
    ferry__pg_cdc_fold_name(run->pipeline ? run->pipeline : "pipeline", spec->table,
                            run->route ? run->route : spec->table, out);
}

int ferry__pg_cdc_opts(const struct ferry_resource_spec *spec, struct ferry_pg_cdc_opts *o,
                       struct ferry_error *err)
{
    static const char *const lost_words[] = {"error", "resnapshot", NULL};
    memset(o, 0, sizeof *o);
    const char *slot = NULL, *pub = NULL;
    int lost = -1;
    int rc = FERRY_OK;
    if (spec->node != NULL) {
        rc = ferry_cfg_str(spec->node, "slot", false, &slot, err);
        if (rc == FERRY_OK) rc = ferry_cfg_str(spec->node, "publication", false, &pub, err);
        if (rc == FERRY_OK)
            rc = ferry_cfg_enum(spec->node, "on_slot_lost", false, lost_words, &lost, err);
        if (rc != FERRY_OK) return rc;
    }
    if (slot != NULL) {
        if (!valid_slot_name(slot))
            return ferry_cfg_error(err, ferry_cfg_get(spec->node, "slot"),
                                   "a replication slot name is 1 to 63 characters of a-z, 0-9 "
                                   "and _");
        snprintf(o->slot, sizeof o->slot, "%s", slot);
    } else {
        derive_name(spec, o->slot);
    }
    if (pub != NULL) {
        if (pub[0] == '\0' || strlen(pub) > 63)
            return ferry_cfg_error(err, ferry_cfg_get(spec->node, "publication"),
                                   "a publication name is 1 to 63 bytes");
        snprintf(o->publication, sizeof o->publication, "%s", pub);
        o->publication_given = true;
    } else {
        derive_name(spec, o->publication);
    }
    o->own_slot = slot != NULL;
    o->lost_given = lost >= 0;
    o->resnapshot = lost == 1;
    return FERRY_OK;
}

/* ---- small SQL helpers -------------------------------------------------------------- */

/* Runs a parameterised query that returns rows; *res is the caller's to clear. */
static int query(PGconn *c, const char *sql, int np, const char *const *params, PGresult **res,
                 const char *peer, const char *what, struct ferry_error *err)
{
    *res = PQexecParams(c, sql, np, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(*res) != PGRES_TUPLES_OK) {
        int rc = ferry__pg_error(err, FERRY_ESOURCE, c, *res, WHAT ": %s: %s", peer, what);
        PQclear(*res);
        *res = NULL;
        return rc;
    }
    return FERRY_OK;
}

int ferry__pg_cdc_query(PGconn *c, const char *sql, int np, const char *const *params,
                        PGresult **res, const char *peer, const char *what, struct ferry_error *err)
{
    return query(c, sql, np, params, res, peer, what, err);
}

static int lsn_of(const char *text, uint64_t *out, const char *what, struct ferry_error *err)
{
    if (ferry_pg_lsn_parse(text, out) != FERRY_OK)
        return ferry_error_set(err, FERRY_EINVAL, "postgres", WHAT ": %s is not an LSN", what);
    return FERRY_OK;
}

int ferry__pg_cdc_slot_info(PGconn *c, const char *peer, const char *slot,
                            struct ferry_pg_slot_info *si, struct ferry_error *err)
{
    memset(si, 0, sizeof *si);
    /* wal_status exists from PostgreSQL 13; through jsonb the query runs on older ones. */
    static const char sql[] = "SELECT s.plugin, s.database = pg_catalog.current_database(), "
                              "COALESCE(s.confirmed_flush_lsn::pg_catalog.text, ''), "
                              "COALESCE(pg_catalog.to_jsonb(s) ->> 'wal_status', ''), s.active "
                              "FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1";
    const char *params[1] = {slot};
    PGresult *res = NULL;
    char what[128];
    snprintf(what, sizeof what, "reading replication slot %s", slot);
    int rc = query(c, sql, 1, params, &res, peer, what, err);
    if (rc != FERRY_OK) return rc;
    if (PQntuples(res) == 1) {
        si->exists = true;
        si->pgoutput = !strcmp(PQgetvalue(res, 0, 0), "pgoutput");
        si->this_db = PQgetvalue(res, 0, 1)[0] == 't';
        const char *cf = PQgetvalue(res, 0, 2);
        if (cf[0] != '\0') ferry_pg_lsn_parse(cf, &si->confirmed);
        si->lost = !strcmp(PQgetvalue(res, 0, 3), "lost");
        si->unreserved = !strcmp(PQgetvalue(res, 0, 3), "unreserved");
        si->active = PQgetvalue(res, 0, 4)[0] == 't';
    }
    PQclear(res);
    return FERRY_OK;
}

static int exec_params(PGconn *c, const char *sql, int np, const char *const *params,
                       const char *peer, const char *what, struct ferry_error *err)
{
    PGresult *res = PQexecParams(c, sql, np, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    int rc = FERRY_OK;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        rc = ferry__pg_error(err, FERRY_ESOURCE, c, res, WHAT ": %s: %s", peer, what);
    PQclear(res);
    return rc;
}

/* ---- plan ---------------------------------------------------------------------------- */

/* A table in a publication that publishes updates must have a replica identity, or
 * PostgreSQL refuses UPDATE and DELETE on it: check before touching the publication, so
 * that capturing never breaks the application's writes. */
int ferry__pg_cdc_check_identity(PGconn *c, const char *peer, const char *from,
                                 struct ferry_error *err)
{
    static const char sql[] = "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_catalog.pg_index i "
                              "WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)) "
                              "FROM pg_catalog.pg_class c WHERE c.oid = $1::pg_catalog.regclass";
    const char *params[1] = {from};
    PGresult *res = NULL;
    int rc = query(c, sql, 1, params, &res, peer, "reading the replica identity", err);
    if (rc != FERRY_OK) return rc;
    char ident = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0)[0] : 'n';
    bool has_index = PQntuples(res) == 1 && PQgetvalue(res, 0, 1)[0] == 't';
    PQclear(res);
    if (ident == 'n' || (ident == 'd' && !has_index) || (ident == 'i' && !has_index))
        return ferry_error_set(err, FERRY_EPOLICY, "postgres",
                               WHAT
                               ": table %s has no replica identity, so its updates and "
                               "deletes cannot be captured (and PostgreSQL would refuse them once "
                               "the table is published): add a primary key or run ALTER TABLE %s "
                               "REPLICA IDENTITY FULL",
                               from, from);
    return FERRY_OK;
}

static int ensure_publication(PGconn *c, const char *peer, const struct ferry_pg_cdc_opts *o,
                              const struct ferry_pg_cdc_target *t, struct ferry_error *err)
{
    const char *p1[1] = {o->publication};
    PGresult *res = NULL;
    int rc = query(c, "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1", 1, p1, &res,
                   peer, "reading publications", err);
    if (rc != FERRY_OK) return rc;
    bool exists = PQntuples(res) == 1;
    PQclear(res);
    bool member = false;
    if (exists) {
        const char *p3[3] = {o->publication, t->schema_name, t->table};
        rc = query(c,
                   "SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND "
                   "schemaname = $2 AND tablename = $3",
                   3, p3, &res, peer, "reading publication tables", err);
        if (rc != FERRY_OK) return rc;
        member = PQntuples(res) > 0;
        PQclear(res);
    }
    if (member) return FERRY_OK;
    if (o->publication_given)
        return ferry_error_set(
            err, FERRY_ECONFIG, "postgres",
            WHAT ": %s: publication \"%s\" %s table %s; create it with CREATE "
                 "PUBLICATION ... FOR TABLE %s (or ALTER PUBLICATION ... ADD TABLE), "
                 "or leave `publication:` out to let ferry create one",
            peer, o->publication, exists ? "does not publish" : "does not exist for", t->from,
            t->from);
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    rc = ferry_buf_printf(&sql, exists ? "ALTER PUBLICATION " : "CREATE PUBLICATION ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, o->publication, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&sql, exists ? " ADD TABLE %s" : " FOR TABLE %s", t->from);
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    char what[200];
    snprintf(what, sizeof what,
             WHAT ": %s: %s publication \"%s\" for table %s (needs ownership "
                  "of the table, and CREATE on the database)",
             peer, exists ? "extending" : "creating", o->publication, t->from);
    if (rc == FERRY_OK) rc = ferry__pg_exec(c, sql.data, FERRY_ESOURCE, what, err);
    ferry_buf_release(&sql);
    return rc;
}

/* The WAL position a bounded run streams up to: a logical message written now, so that
 * the server's decoding position is certain to pass it (a bare pg_current_wal_lsn() may
 * sit after a page header no record ever ends at). */
int ferry__pg_cdc_end_position(PGconn *c, const char *peer, uint64_t *end, struct ferry_error *err)
{
    PGresult *res = NULL;
    /* Tests change the source here: after discover, before the range a run streams is set. */
    int rc = ferry_failpoint_check("cdc_before_end", err);
    if (rc != FERRY_OK) return rc;
    rc = query(c,
               "SELECT pg_catalog.pg_logical_emit_message(false, 'ferry', 'end')"
               "::pg_catalog.text",
               0, NULL, &res, peer, "taking the end position (pg_logical_emit_message)", err);
    if (rc != FERRY_OK) return rc;
    rc = lsn_of(PQgetvalue(res, 0, 0), end, "the end position", err);
    PQclear(res);
    return rc;
}

/* A saved position's LSN ("n": the end of the last complete transaction, 0 when absent)
 * and "k" (rows of the following transaction already written, 0 when absent). */
int ferry__pg_cdc_position(const char *position, uint64_t *lsn, int64_t *k, struct ferry_error *err)
{
    *lsn = 0;
    if (k) *k = 0;
    if (position == NULL) return FERRY_OK;
    json_t *j = json_loads(position, 0, NULL);
    json_t *n = json_object_get(j, "n"), *kk = json_object_get(j, "k");
    int rc = FERRY_OK;
    if (!json_is_object(j) || (n != NULL && !json_is_integer(n)) ||
        (n != NULL && json_integer_value(n) < 0) || (kk != NULL && !json_is_integer(kk)) ||
        (kk != NULL && json_integer_value(kk) < 0))
        rc = ferry_error_set(err, FERRY_EINVAL, "postgres",
                             WHAT ": the saved cdc position is not a log position");
    else if (n != NULL) {
        *lsn = (uint64_t)json_integer_value(n);
        if (k && kk != NULL) *k = (int64_t)json_integer_value(kk);
    }
    json_decref(j);
    return rc;
}

static int position_lsn(const char *position, uint64_t *lsn, struct ferry_error *err)
{
    return ferry__pg_cdc_position(position, lsn, NULL, err);
}

void ferry__pg_cdc_set_lsn(json_t *plan, const char *key, uint64_t lsn)
{
    char buf[32];
    ferry_pg_lsn_format(lsn, buf, sizeof buf);
    json_object_set_new(plan, key, json_string(buf));
}

int ferry__pg_cdc_plan_lsn(json_t *plan, const char *key, uint64_t *out, struct ferry_error *err)
{
    const char *s = json_string_value(json_object_get(plan, key));
    if (s == NULL || ferry_pg_lsn_parse(s, out) != FERRY_OK)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": the frozen cdc plan has no valid \"%s\" position", key);
    return FERRY_OK;
}

int ferry__pg_cdc_extend_end(const char *url, const struct ferry_pg_conn_opts *opts,
                             const char *peer, json_t *plan, struct ferry_error *err)
{
    uint64_t end = 0, now = 0;
    int rc = ferry__pg_cdc_plan_lsn(plan, "end", &end, err);
    if (rc != FERRY_OK) return rc;
    PGconn *c = NULL;
    rc = ferry__pg_connect(url, opts, WHAT, &c, err);
    if (rc == FERRY_OK) rc = ferry__pg_cdc_end_position(c, peer, &now, err);
    PQfinish(c);
    if (rc == FERRY_OK && now > end) ferry__pg_cdc_set_lsn(plan, "end", now);
    return rc;
}

static int resnapshot_required(struct ferry_error *err, const char *peer, const char *slot,
                               const char *from, const char *why)
{
    return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                           WHAT ": %s: table %s: replication slot \"%s\" %s; changes may have "
                                "been lost, so resnapshot required: run `ferry cdc drop` on the "
                                "pipeline file and run it again (a new snapshot is copied), or set "
                                "`on_slot_lost: resnapshot` on the resource",
                           peer, from, slot, why);
}

/* Creates `slot` (pgoutput) on a replication connection of its own with an exported
 * snapshot: plan gets "snapshot" and "start" (the consistent point); the connection, idle
 * in the exporting transaction, is handed over in *keep. */
int ferry__pg_cdc_create_slot(const char *url, const struct ferry_pg_conn_opts *opts,
                              const char *peer, const char *slot, json_t *plan, PGconn **keep,
                              struct ferry_error *err)
{
    *keep = NULL;
    PGconn *rc_conn = NULL;
    int rc = ferry__pg_connect_ex(url, opts, "database", WHAT " (replication)", &rc_conn, err);
    if (rc != FERRY_OK) return rc;
    /* It stays idle in the exporting transaction while the copy runs: by design. */
    rc = ferry__pg_exec(rc_conn, "SET idle_in_transaction_session_timeout = 0", FERRY_ESOURCE,
                        WHAT ": replication session", err);
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, "CREATE_REPLICATION_SLOT ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, slot, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, " LOGICAL pgoutput EXPORT_SNAPSHOT");
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    PGresult *res = rc == FERRY_OK ? PQexec(rc_conn, sql.data) : NULL;
    ferry_buf_release(&sql);
    if (rc == FERRY_OK &&
        (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 3))
        rc = ferry__pg_error(err, FERRY_ESOURCE, rc_conn, res,
                             WHAT ": %s: creating replication slot \"%s\" (needs the REPLICATION "
                                  "attribute and wal_level = logical)",
                             peer, slot);
    uint64_t start = 0;
    if (rc == FERRY_OK)
        rc = lsn_of(PQgetvalue(res, 0, 1), &start, "the slot's consistent point", err);
    if (rc == FERRY_OK) {
        json_object_set_new(plan, "snapshot", json_string(PQgetvalue(res, 0, 2)));
        ferry__pg_cdc_set_lsn(plan, "start", start);
    }
    PQclear(res);
    if (rc != FERRY_OK) {
        PQfinish(rc_conn);
        return rc;
    }
    *keep = rc_conn;
    return FERRY_OK;
}

int ferry__pg_cdc_plan(PGconn *c, const char *url, const struct ferry_pg_conn_opts *opts,
                       const char *peer, const struct ferry_resource_spec *spec,
                       const struct ferry_pg_cdc_target *t, const char *route_checkpoint,
                       json_t *plan, bool *copy, PGconn **keep, struct ferry_error *err)
{
    *copy = false;
    *keep = NULL;
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc != FERRY_OK) return rc;
    uint64_t saved = 0;
    int64_t saved_k = 0;
    rc = ferry__pg_cdc_position(route_checkpoint, &saved, &saved_k, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_pg_slot_info si;
    rc = ferry__pg_cdc_slot_info(c, peer, o.slot, &si, err);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "mode", json_string("cdc"));
    json_object_set_new(plan, "slot", json_string(o.slot));
    json_object_set_new(plan, "publication", json_string(o.publication));
    if (saved != 0) {
        char sv[32], cf[32];
        ferry_pg_lsn_format(saved, sv, sizeof sv);
        ferry_pg_lsn_format(si.confirmed, cf, sizeof cf);
        char why[256] = "";
        if (!si.exists)
            snprintf(why, sizeof why, "does not exist any more");
        else if (si.lost)
            snprintf(why, sizeof why,
                     "was invalidated by the server (wal_status lost: the WAL "
                     "it needed was removed)");
        else if (!si.pgoutput || !si.this_db)
            snprintf(why, sizeof why, "is not a pgoutput slot of this database");
        else if (si.confirmed > saved)
            snprintf(why, sizeof why,
                     "was recreated or advanced behind ferry's back (its "
                     "confirmed position %s is past ferry's saved position %s)",
                     cf, sv);
        if (why[0] != '\0' && !o.resnapshot)
            return resnapshot_required(err, peer, o.slot, t->from, why);
        if (why[0] == '\0') {
            uint64_t end = 0;
            rc = ferry__pg_cdc_end_position(c, peer, &end, err);
            if (rc != FERRY_OK) return rc;
            ferry__pg_cdc_set_lsn(plan, "start", saved);
            ferry__pg_cdc_set_lsn(plan, "end", end);
            /* A pause inside a transaction: its first rows are in the destination. */
            if (saved_k > 0) json_object_set_new(plan, "skip", json_integer(saved_k));
            json_object_set_new(plan, "snapshot", json_null());
            if (si.unreserved) {
                /* Not lost yet, but the next checkpoint may remove WAL this run needs: say so
                 * now (log, and the run's cdc lag events carry it). */
                json_object_set_new(plan, "wal_status", json_string("unreserved"));
                ferry_log(FERRY_LOG_WARN,
                          WHAT ": table %s: replication slot \"%s\" has wal_status "
                               "unreserved: it is more than max_slot_wal_keep_size behind, and "
                               "the server may invalidate it at its next checkpoint (then a "
                               "resnapshot is required); run more often or raise "
                               "max_slot_wal_keep_size",
                          t->from, o.slot);
            }
            return FERRY_OK;
        }
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": table %s: replication slot \"%s\" %s; taking a new "
                       "snapshot (on_slot_lost: resnapshot)",
                  t->from, o.slot, why);
    }
    /* First run (or resnapshot): publication first (the slot's decoding must see it),
     * then a fresh slot. A slot that exists without a saved position was made by a run
     * that never completed: nothing relies on it. */
    rc = ferry__pg_cdc_check_identity(c, peer, t->from, err);
    if (rc == FERRY_OK) rc = ensure_publication(c, peer, &o, t, err);
    if (rc != FERRY_OK) return rc;
    if (si.exists) {
        if (si.active)
            return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                                   WHAT ": %s: replication slot \"%s\" is in use by another "
                                        "connection",
                                   peer, o.slot);
        const char *p1[1] = {o.slot};
        rc = exec_params(c, "SELECT pg_catalog.pg_drop_replication_slot($1)", 1, p1, peer,
                         "dropping an unused replication slot", err);
        if (rc != FERRY_OK) return rc;
    }
    PGconn *rc_conn = NULL;
    rc = ferry__pg_cdc_create_slot(url, opts, peer, o.slot, plan, &rc_conn, err);
    uint64_t end = 0;
    if (rc == FERRY_OK) rc = ferry__pg_cdc_end_position(c, peer, &end, err);
    if (rc != FERRY_OK) {
        PQfinish(rc_conn);
        return rc;
    }
    ferry__pg_cdc_set_lsn(plan, "end", end);
    *copy = true;
    *keep = rc_conn;
    return FERRY_OK;
}

/* ---- the stream ---------------------------------------------------------------------- */

struct relmsg {
    uint32_t relid;
    uint8_t *p;
    size_t n;
};
struct rels {
    struct relmsg *v;
    int n;
};

static void rels_free(struct rels *r)
{
    for (int i = 0; i < r->n; i++)
        ferry_free(r->v[i].p);
    ferry_free(r->v);
    memset(r, 0, sizeof *r);
}

/* Keeps a copy of relation message p as relid's (replacing an older one). */
static int rels_put(struct rels *r, uint32_t relid, const uint8_t *p, size_t n)
{
    uint8_t *copy = ferry_malloc(n ? n : 1);
    if (copy == NULL) return FERRY_ENOMEM;
    memcpy(copy, p, n);
    for (int i = 0; i < r->n; i++)
        if (r->v[i].relid == relid) {
            ferry_free(r->v[i].p);
            r->v[i].p = copy;
            r->v[i].n = n;
            return FERRY_OK;
        }
    struct relmsg *v = ferry_realloc(r->v, (size_t)(r->n + 1) * sizeof *v);
    if (v == NULL) {
        ferry_free(copy);
        return FERRY_ENOMEM;
    }
    r->v = v;
    r->v[r->n++] = (struct relmsg){.relid = relid, .p = copy, .n = n};
    return FERRY_OK;
}

struct stream {
    PGconn *c;
    const char *url;
    const struct ferry_pg_conn_opts *opts;
    const char *peer;
    const struct ferry_pg_cdc_target *t;
    struct ferry_row_writer *rw;
    struct ferry_pg_repl_decoder dec;
    int n_user;     /* schema fields that come from the table (change-log columns follow) */
    int *map;       /* per user field: index in the relation's columns */
    uint32_t relid; /* ours, once its Relation message arrived */
    bool rel_known;
    uint64_t start, end, flush, received, last_commit_end;
    bool in_txn;
    int64_t txn_rows; /* rows of the current transaction written (or skipped) so far */
    int64_t skip;     /* rows of the first transaction already in the destination */
    uint64_t txn_lsn;
    int64_t txn_time_us; /* unix microseconds */
    bool done, schema_stop;
    bool epoch_stop; /* epoch_rows changes written: this run ends at the last commit */
    int64_t last_status, last_probe, last_data;
    int64_t changes;
    int64_t last_commit_time_us; /* unix microseconds of the last commit received */
    struct ferry_pg_cdc_progress *progress;
    struct ferry_buf scratch;
    /* keep_session: the last Relation message of every relation the session sent, as
     * received (pgoutput sends one once per session: a table that continues the session
     * of another table of a shared slot needs its own from there). */
    struct rels rels;
    bool replaying; /* on_message of a kept Relation message */
    const char *value_class; /* put_text's FERRY_EUNSUPPORTED: the special value refused */
};

static void report(struct stream *s)
{
    if (s->progress == NULL) return;
    uint64_t ahead = s->received > s->end ? s->received : s->end;
    uint64_t lag = ahead > s->last_commit_end ? ahead - s->last_commit_end : 0;
    if (s->done) lag = 0;
    int64_t age = 0;
    if (!s->done && s->last_commit_time_us > 0) {
        age = ferry_now_wall_us() - s->last_commit_time_us;
        if (age < 0) age = 0;
    }
    atomic_store(&s->progress->position, (long long)s->last_commit_end);
    atomic_store(&s->progress->lag_bytes, (long long)lag);
    atomic_store(&s->progress->lag_us, (long long)age);
}

static int send_status(struct stream *s, bool reply, struct ferry_error *err)
{
    uint8_t msg[34];
    int64_t now = ferry_now_wall_us() - FERRY_PG_REPL_EPOCH_US;
    uint64_t write = s->received > s->last_commit_end ? s->received : s->last_commit_end;
    ferry_pg_repl_status_update(msg, write, s->flush, s->flush, now, reply);
    if (PQputCopyData(s->c, (const char *)msg, sizeof msg) != 1 || PQflush(s->c) != 0)
        return ferry__pg_error(err, FERRY_EIO, s->c, NULL, WHAT ": %s: sending standby status",
                               s->peer);
    s->last_status = ferry_now_mono_us();
    return FERRY_OK;
}

/* Our relation's description, sent before its first change in each session and after
 * each schema change: mapped onto the run's schema, and its changes judged under the
 * resource's `schema_changes:` (pg_schema_change.c). */
static int on_relation(struct stream *s, const struct ferry_pg_repl_msg *m, struct ferry_error *err)
{
    const char *nsp = m->nspname[0] ? m->nspname : "pg_catalog";
    if (strcmp(nsp, s->t->schema_name) != 0 || strcmp(m->relname, s->t->table) != 0)
        return FERRY_OK;
    const struct ferry_pg_schema_source src = {s->url, s->opts, s->peer};
    int rc = ferry__pg_schema_relation(&src, s->t, s->n_user, m, s->map, &s->schema_stop, err);
    if (rc != FERRY_OK || s->schema_stop) return rc;
    s->relid = m->relid;
    s->rel_known = true;
    return FERRY_OK;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* One text value into the row writer as the field's type. */
static int put_text(struct stream *s, const struct ferry_field *f, const uint8_t *p, size_t n)
{
    struct ferry_row_writer *rw = s->rw;
    char num[80];
    const char *cp = (const char *)p;
    /* ±infinity, numeric(p,s) NaN: ferry's special values, or refused (pg_values.c) */
    int sp = ferry__pg_text_special(f, p, n, s->t->specials, rw, &s->value_class);
    if (sp != 0) return sp > 0 ? FERRY_OK : FERRY_EUNSUPPORTED;
    int rc;
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        if (n != 1 || (p[0] != 't' && p[0] != 'f')) return FERRY_EINVAL;
        ferry_rw_bool(rw, p[0] == 't');
        return FERRY_OK;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64: {
        if (n == 0 || n >= sizeof num) return FERRY_EINVAL;
        memcpy(num, p, n);
        num[n] = '\0';
        char *end = NULL;
        errno = 0;
        long long v = strtoll(num, &end, 10);
        if (errno != 0 || end != num + n) return FERRY_EINVAL;
        ferry_rw_int(rw, v);
        return FERRY_OK;
    }
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: {
        if (n == 0 || n >= sizeof num) return FERRY_EINVAL;
        memcpy(num, p, n);
        num[n] = '\0';
        char *end = NULL;
        double v = strtod(num, &end);
        if (end != num + n) return FERRY_EINVAL;
        ferry_rw_float(rw, v);
        return FERRY_OK;
    }
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 d;
        if (ferry_decimal128_from_text(cp, n, f->precision, f->scale, &d) != FERRY_OK)
            return FERRY_EINVAL;
        ferry_rw_dec128(rw, d);
        return FERRY_OK;
    }
    case FERRY_TYPE_BINARY: {
        if (n < 2 || p[0] != '\\' || p[1] != 'x' || (n - 2) % 2 != 0) return FERRY_EINVAL;
        ferry_buf_reset(&s->scratch);
        if (ferry_buf_reserve(&s->scratch, (n - 2) / 2 + 1) != FERRY_OK) return FERRY_ENOMEM;
        uint8_t *out = (uint8_t *)s->scratch.data;
        for (size_t i = 2; i < n; i += 2) {
            int hi = hexval(p[i]), lo = hexval(p[i + 1]);
            if (hi < 0 || lo < 0) return FERRY_EINVAL;
            *out++ = (uint8_t)(hi << 4 | lo);
        }
        ferry_rw_text(rw, s->scratch.data, (n - 2) / 2);
        return FERRY_OK;
    }
    case FERRY_TYPE_DATE32: {
        int32_t d;
        if (ferry_date32_from_text(cp, n, &d) != FERRY_OK &&
            (rc = ferry__pg_date_text(cp, n, &d)) != FERRY_OK) { /* BC, year 10000... */
            s->value_class = "date beyond ferry's range";
            return rc;
        }
        ferry_rw_int(rw, d);
        return FERRY_OK;
    }
    case FERRY_TYPE_TIME64_US: {
        int64_t v;
        if (ferry_time64_from_text(cp, n, &v) != FERRY_OK) return FERRY_EINVAL;
        ferry_rw_int(rw, v);
        return FERRY_OK;
    }
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: {
        int64_t v;
        if (ferry_timestamp_from_text(cp, n, &v) != FERRY_OK &&
            (rc = ferry__pg_timestamp_text(cp, n, &v)) != FERRY_OK) { /* BC, year 10000... */
            s->value_class = "timestamp past year 294247 (ferry's last is "
                             "294247-01-10 04:00:54.775806 UTC)";
            return rc;
        }
        ferry_rw_int(rw, v);
        return FERRY_OK;
    }
    case FERRY_TYPE_UUID: {
        uint8_t u[16];
        if (ferry_uuid_from_text(cp, n, u) != FERRY_OK) return FERRY_EINVAL;
        ferry_rw_fixed(rw, u, 16);
        return FERRY_OK;
    }
    default: /* utf8, json, exact decimal text: the text itself */
        ferry_rw_text(rw, p, n);
        return FERRY_OK;
    }
}

static const char *op_word(enum ferry_op op)
{
    return op == FERRY_OP_INSERT ? "insert" : op == FERRY_OP_UPDATE ? "update" : "delete";
}

/* One change into the row writer: the schema's fields from `tp` (unchanged TOAST values
 * from `old`, when the old image has them), then the change-log columns. */
static int write_row(struct stream *s, enum ferry_op op, const struct ferry_pg_repl_tuple *tp,
                     const struct ferry_pg_repl_tuple *old, struct ferry_error *err)
{
    const struct ferry_schema *sc = s->t->sc;
    struct ferry_row_writer *rw = s->rw;
    s->txn_rows++;
    if (s->skip > 0) {
        /* Written before an interruption inside this transaction: the same rows come back
         * in the same order, the first ones are not written twice. */
        s->skip--;
        return FERRY_OK;
    }
    /* Positions of batches closing inside the transaction: restart at the last complete
     * one, skipping the rows written up to and including this one. */
    ferry_rw_set_suboffset(rw, s->txn_rows);
    ferry_rw_begin(rw, s->t->change_log ? FERRY_OP_INSERT : op);
    for (int f = 0; f < s->n_user; f++) {
        const struct ferry_field *fd = &sc->fields[f];
        int idx = s->map[f];
        const struct ferry_pg_repl_value *v = idx >= 0 && idx < tp->n ? &tp->values[idx] : NULL;
        if (v != NULL && v->kind == 'u') {
            v = old != NULL && idx < old->n && old->values[idx].kind == 't' ? &old->values[idx]
                                                                            : NULL;
            if (v == NULL) {
                ferry_rw_cancel_row(rw);
                return ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                                       WHAT ": table %s: an update left column \"%s\" (a large, "
                                            "TOASTed value) out of the change; run ALTER TABLE %s "
                                            "REPLICA IDENTITY FULL so that changes carry it",
                                       s->t->from, fd->name, s->t->from);
            }
        }
        if (v == NULL || v->kind == 'n') {
            if (op == FERRY_OP_DELETE && fd->key_pos > 0) {
                ferry_rw_cancel_row(rw);
                return ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                                       WHAT
                                       ": table %s: a delete carries no value for key column "
                                       "\"%s\": the table's replica identity does not cover "
                                       "ferry's key; use the primary key, or REPLICA IDENTITY FULL",
                                       s->t->from, fd->name);
            }
            ferry_rw_null(rw);
            continue;
        }
        if (v->kind != 't') {
            ferry_rw_cancel_row(rw);
            return ferry_error_set(err, FERRY_EINVAL, "postgres",
                                   WHAT ": table %s: column \"%s\" arrived in binary form",
                                   s->t->from, fd->name);
        }
        int rc = put_text(s, fd, v->data, v->len);
        if (rc != FERRY_OK) {
            ferry_rw_cancel_row(rw);
            if (rc == FERRY_ENOMEM) return nomem(err);
            char why[160];
            if (rc == FERRY_EUNSUPPORTED && (!strncmp(s->value_class, "timestamp past", 14) ||
                                             !strncmp(s->value_class, "date beyond", 11)))
                snprintf(why, sizeof why, "%s: refused", s->value_class);
            else if (rc == FERRY_EUNSUPPORTED)
                snprintf(why, sizeof why, "%s has no value in this sink (it is carried to "
                         "PostgreSQL, or converted with on_unrepresentable: null | clamp)",
                         s->value_class);
            else
                snprintf(why, sizeof why, "the value in the replication stream cannot be read "
                         "as %s (dates and timestamps: years 0001..9999)", ferry_type_name(fd->type));
            return ferry__pg_change_value_error(WHAT, s->t->from, sc, s->map, tp, f, why, err);
        }
    }
    if (s->t->change_log) {
        const char *w = op_word(op);
        ferry_rw_text(rw, w, strlen(w));
        ferry_rw_int(rw, (int64_t)s->txn_lsn);
        ferry_rw_int(rw, s->txn_time_us);
    } else if (s->t->soft_delete) {
        /* The sink marks the row with this instead of deleting it. */
        if (op == FERRY_OP_DELETE)
            ferry_rw_int(rw, s->txn_time_us);
        else
            ferry_rw_null(rw);
    }
    s->changes++;
    return ferry_rw_end(rw, err);
}

/* A placeholder for key field f of a truncate row (the sink ignores its values). */
static void put_placeholder(struct ferry_row_writer *rw, const struct ferry_field *f)
{
    static const uint8_t zero[16];
    struct ferry_decimal128 d = {0, 0};
    switch (f->type) {
    case FERRY_TYPE_BOOL: ferry_rw_bool(rw, false); return;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: ferry_rw_float(rw, 0); return;
    case FERRY_TYPE_DECIMAL128: ferry_rw_dec128(rw, d); return;
    case FERRY_TYPE_UUID: ferry_rw_fixed(rw, zero, 16); return;
    case FERRY_TYPE_DECIMAL_TEXT: ferry_rw_text(rw, "0", 1); return;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_JSON: ferry_rw_text(rw, "", 0); return;
    default: ferry_rw_int(rw, 0); return; /* integers, dates, times, timestamps */
    }
}

/* A source TRUNCATE as one FERRY_OP_TRUNCATE row, in stream order (pg_schema_change.c
 * decided it is applied): keys hold placeholders, other fields are null. */
static int write_truncate(struct stream *s, struct ferry_error *err)
{
    const struct ferry_schema *sc = s->t->sc;
    s->txn_rows++;
    if (s->skip > 0) {
        s->skip--;
        return FERRY_OK;
    }
    ferry_rw_set_suboffset(s->rw, s->txn_rows);
    ferry_rw_begin(s->rw, FERRY_OP_TRUNCATE);
    for (int f = 0; f < sc->n_fields; f++) {
        if (sc->fields[f].key_pos > 0 || !sc->fields[f].nullable)
            put_placeholder(s->rw, &sc->fields[f]);
        else
            ferry_rw_null(s->rw);
    }
    s->changes++;
    return ferry_rw_end(s->rw, err);
}

/* Whether the old image's key values differ from the new row's (a key update). */
static bool key_changed(const struct stream *s, const struct ferry_pg_repl_tuple *old,
                        const struct ferry_pg_repl_tuple *nw)
{
    const struct ferry_schema *sc = s->t->sc;
    for (int k = 0; k < sc->n_key; k++) {
        int f = sc->key[k];
        if (f >= s->n_user) continue;
        int idx = s->map[f];
        if (idx < 0 || idx >= old->n || idx >= nw->n) return false;
        const struct ferry_pg_repl_value *a = &old->values[idx], *b = &nw->values[idx];
        if (a->kind != 't' || b->kind != 't') continue;
        if (a->len != b->len || memcmp(a->data, b->data, a->len) != 0) return true;
    }
    return false;
}

static int on_change(struct stream *s, const struct ferry_pg_repl_msg *m, struct ferry_error *err)
{
    if (!s->rel_known || m->relid != s->relid) return FERRY_OK;
    switch (m->kind) {
    case 'I':
        return write_row(s, FERRY_OP_INSERT, &m->new_tuple, NULL, err);
    case 'U': {
        const struct ferry_pg_repl_tuple *old = m->old_kind ? &m->old_tuple : NULL;
        if (old != NULL && !s->t->change_log && key_changed(s, old, &m->new_tuple)) {
            int rc = write_row(s, FERRY_OP_DELETE, old, NULL, err);
            if (rc != FERRY_OK) return rc;
        }
        return write_row(s, FERRY_OP_UPDATE, &m->new_tuple, old, err);
    }
    case 'D':
        return write_row(s, FERRY_OP_DELETE, &m->old_tuple, NULL, err);
    default:
        return FERRY_OK;
    }
}

static int on_message(struct stream *s, const uint8_t *p, size_t n, struct ferry_error *err)
{
    struct ferry_pg_repl_msg m;
    int rc = ferry_pg_repl_decode(&s->dec, p, n, &m, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT ": %s: table %s", s->peer, s->t->from);
    switch (m.kind) {
    case 'B':
        s->in_txn = true;
        s->txn_lsn = m.final_lsn;
        s->txn_time_us = m.time + FERRY_PG_REPL_EPOCH_US;
        return FERRY_OK;
    case 'C':
        s->in_txn = false;
        s->txn_rows = 0;
        s->skip = 0;
        ferry_rw_set_suboffset(s->rw, 0);
        if (m.end_lsn > s->last_commit_end) {
            s->last_commit_end = m.end_lsn;
            ferry_rw_set_offset(s->rw, (int64_t)m.end_lsn);
        }
        if (m.end_lsn >= s->end) s->done = true;
        /* A row-count epoch ends at a commit, the position exact; the next run goes on. */
        if (!s->done && s->t->epoch_rows > 0 && s->changes >= s->t->epoch_rows)
            s->epoch_stop = true;
        s->last_commit_time_us = m.time + FERRY_PG_REPL_EPOCH_US;
        report(s);
        return FERRY_OK;
    case 'R':
        rc = on_relation(s, &m, err);
        /* A session's walsender sends a table's Relation message once: a parked session
         * (below) keeps every one for the run (of any table) that continues the session.
         * Ours only when it was accepted (a schema stop does not park). */
        if (rc == FERRY_OK && s->t->keep_session && !s->replaying && !s->schema_stop &&
            rels_put(&s->rels, m.relid, p, n) != FERRY_OK)
            return nomem(err);
        return rc;
    case 'I':
    case 'U':
    case 'D':
        return on_change(s, &m, err);
    case 'T':
        for (int i = 0; i < m.n_rels; i++)
            if (s->rel_known && ferry_pg_repl_truncate_relid(&m, i) == s->relid) {
                rc = ferry__pg_schema_truncate(s->t, err);
                return rc == FERRY_OK ? write_truncate(s, err) : rc;
            }
        return FERRY_OK;
    default:
        return FERRY_OK; /* origin, type, logical messages */
    }
}

static int on_frame(struct stream *s, const uint8_t *p, size_t n, struct ferry_error *err)
{
    struct ferry_pg_repl_frame f;
    int rc = ferry_pg_repl_parse_frame(p, n, &f, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT ": %s: table %s", s->peer, s->t->from);
    if (f.kind == 'k') {
        if (f.wal_end > s->received) s->received = f.wal_end;
        /* Decoding passed the end with no transaction open: everything committed before the
         * end has been received. */
        if (!s->in_txn && f.wal_end >= s->end) s->done = true;
        report(s);
        if (f.reply_requested) return send_status(s, false, err);
        return FERRY_OK;
    }
    s->last_data = ferry_now_mono_us();
    if (f.wal_start > s->received) s->received = f.wal_start;
    return on_message(s, f.data, f.len, err);
}

/* CopyDone, then drain until the server ends the command (so the slot is released before
 * anyone acknowledges it), at most a few seconds. */
static void end_stream(PGconn *c)
{
    if (PQputCopyEnd(c, NULL) == 1) PQflush(c);
    int64_t deadline = ferry_now_mono_us() + 5000000;
    for (;;) {
        char *buf = NULL;
        int n = PQgetCopyData(c, &buf, 1);
        if (n > 0) {
            PQfreemem(buf);
            continue;
        }
        if (n < 0 || ferry_now_mono_us() > deadline) break;
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        poll(&pfd, 1, 100);
        if (!PQconsumeInput(c)) break;
    }
    PGresult *res;
    while (PQstatus(c) == CONNECTION_OK && (res = PQgetResult(c)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        PQclear(res);
        if (st == PGRES_COPY_BOTH || st == PGRES_COPY_OUT) break;
    }
}

static int start_replication(struct stream *s, const char *slot, const char *pub,
                             struct ferry_error *err)
{
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    char at[32];
    ferry_pg_lsn_format(s->start, at, sizeof at);
    /* publication_names is a list of identifiers inside a string literal. */
    struct ferry_buf names;
    ferry_buf_init(&names, 0);
    int rc = ferry__pg_quote_ident(&names, pub, err);
    char *lit = rc == FERRY_OK ? PQescapeLiteral(s->c, names.data, names.len) : NULL;
    if (rc == FERRY_OK && lit == NULL) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, "START_REPLICATION SLOT ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, slot, err);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&sql, " LOGICAL %s (\"proto_version\" '1', \"publication_names\" %s)",
                              at, lit);
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (lit) PQfreemem(lit);
    ferry_buf_release(&names);
    if (rc == FERRY_OK) {
        /* A walsender that streamed the slot a moment ago (another table of a shared slot)
         * may still be releasing it: retry "in use" for a while. */
        int64_t deadline = ferry_now_mono_us() + 10000000;
        PGresult *res = PQexec(s->c, sql.data);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        while (PQresultStatus(res) != PGRES_COPY_BOTH && state != NULL && !strcmp(state, "55006") &&
               ferry_now_mono_us() < deadline) {
            PQclear(res);
            usleep(100000);
            res = PQexec(s->c, sql.data);
            state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        }
        if (PQresultStatus(res) != PGRES_COPY_BOTH && state != NULL && !strcmp(state, "42704"))
            rc = resnapshot_required(err, s->peer, slot, s->t->from, "does not exist any more");
        else if (PQresultStatus(res) != PGRES_COPY_BOTH)
            rc = ferry__pg_error(err, FERRY_ESOURCE, s->c, res,
                                 WHAT ": %s: table %s: starting replication from slot \"%s\" at %s",
                                 s->peer, s->t->from, slot, at);
        PQclear(res);
    }
    ferry_buf_release(&sql);
    return rc;
}

/* ---- replication sessions kept between `--follow` runs --------------------------------
 *
 * A walsender decodes from its slot's restart_lsn, which trails the confirmed position by up
 * to two running-transactions records (logged every 15 s): starting a new session every
 * epoch decoded that WAL again each time. Under --follow (target keep_session) a stream
 * that ended cleanly at its position parks its session here; the next run's stream of the
 * same slot continues it when it starts exactly at that position (same publication, parked
 * less than PARK_MAX_US ago, below the server's default wal_sender_timeout of 60 s), else
 * the session is closed and a new one started. While parked the session is acknowledged
 * through its standby status (flush = the run's SAVED position, sent by ferry__pg_cdc_ack
 * after the tracker saved it: the same rule as pg_replication_slot_advance, which cannot
 * act on a slot a session holds). At exit every parked session reports its last flush,
 * ends the copy and closes. */

#define MAX_PARKED 32
#define PARK_MAX_US INT64_C(20000000)

struct parked {
    PGconn *c;
    char slot[64];
    char pub[64];
    uint64_t pos;      /* where the session stopped: the run's final position */
    uint64_t received; /* furthest WAL position the server reported */
    uint64_t flush;    /* last flush reported to the server */
    int64_t since;     /* parked at, monotonic us */
    struct rels rels;  /* the session's Relation messages */
};

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static struct parked parked[MAX_PARKED];
static bool park_atexit_set;

static int status_raw(PGconn *c, uint64_t write, uint64_t flush)
{
    uint8_t msg[34];
    int64_t now = ferry_now_wall_us() - FERRY_PG_REPL_EPOCH_US;
    ferry_pg_repl_status_update(msg, write > flush ? write : flush, flush, flush, now, false);
    return PQputCopyData(c, (const char *)msg, sizeof msg) == 1 && PQflush(c) == 0 ? FERRY_OK
                                                                                   : FERRY_EIO;
}

/* park_lock held. Reports the last flush, ends the copy, closes. */
static void parked_close(struct parked *p)
{
    if (p->c != NULL) {
        if (PQstatus(p->c) == CONNECTION_OK && status_raw(p->c, p->received, p->flush) == FERRY_OK)
            end_stream(p->c);
        PQfinish(p->c);
    }
    rels_free(&p->rels);
    memset(p, 0, sizeof *p);
}

static void park_exit(void)
{
    pthread_mutex_lock(&park_lock);
    for (int i = 0; i < MAX_PARKED; i++)
        if (parked[i].c != NULL) parked_close(&parked[i]);
    pthread_mutex_unlock(&park_lock);
}

/* park_lock held. */
static struct parked *park_find(const char *slot)
{
    for (int i = 0; i < MAX_PARKED; i++)
        if (parked[i].c != NULL && !strcmp(parked[i].slot, slot)) return &parked[i];
    return NULL;
}

/* Takes the parked session of `slot` when it stopped exactly at `start`; any other parked
 * session of the slot is closed (its position is not where this run starts). */
static bool park_take(const char *slot, const char *pub, uint64_t start, struct parked *out)
{
    bool ok = false;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL) {
        if (p->pos == start && !strcmp(p->pub, pub) && PQstatus(p->c) == CONNECTION_OK &&
            ferry_now_mono_us() - p->since < PARK_MAX_US) {
            *out = *p;
            memset(p, 0, sizeof *p);
            ok = true;
        } else {
            parked_close(p);
        }
    }
    pthread_mutex_unlock(&park_lock);
    return ok;
}

/* Parks s->c (and the Relation messages it sent) at `pos`; false when there is no room. */
static bool park_put(struct stream *s, const char *slot, const char *pub, uint64_t pos)
{
    bool ok = false;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL) parked_close(p);
    for (int i = 0; p == NULL && i < MAX_PARKED; i++)
        if (parked[i].c == NULL) p = &parked[i];
    if (p != NULL && !park_atexit_set) park_atexit_set = atexit(park_exit) == 0;
    /* Without the exit hook a parked session could be left unclosed: keep none. */
    if (p != NULL && park_atexit_set) {
        p->c = s->c;
        snprintf(p->slot, sizeof p->slot, "%s", slot);
        snprintf(p->pub, sizeof p->pub, "%s", pub);
        p->pos = pos;
        p->received = s->received;
        p->flush = s->flush;
        p->since = ferry_now_mono_us();
        p->rels = s->rels;
        memset(&s->rels, 0, sizeof s->rels);
        ok = true;
    }
    pthread_mutex_unlock(&park_lock);
    return ok;
}

/* The acknowledgement of a parked session: its standby status. FERRY_ENOTFOUND when the
 * slot has no parked session at `lsn` (then the slot is advanced by SQL; a parked session
 * of it at another position is closed first, releasing the slot). */
static int park_ack(const char *slot, uint64_t lsn)
{
    int rc = FERRY_ENOTFOUND;
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL && p->pos == lsn && status_raw(p->c, p->received, lsn) == FERRY_OK) {
        p->flush = lsn;
        rc = FERRY_OK;
    } else if (p != NULL) {
        parked_close(p);
    }
    pthread_mutex_unlock(&park_lock);
    return rc;
}

/* Closes the parked session of `slot`, if any (it holds the slot on the server). */
static void park_close_slot(const char *slot)
{
    pthread_mutex_lock(&park_lock);
    struct parked *p = park_find(slot);
    if (p != NULL) parked_close(p);
    pthread_mutex_unlock(&park_lock);
}

/* ---- one stream per slot in this process ---------------------------------------------- */

#define MAX_LOCKED 64
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_cv = PTHREAD_COND_INITIALIZER;
static char slot_held[MAX_LOCKED][64];

/* slot_mu held. */
static int slot_find(const char *slot)
{
    for (int i = 0; i < MAX_LOCKED; i++)
        if (!strcmp(slot_held[i], slot)) return i;
    return -1;
}

/* Waits until no other stream of this process holds `slot`, then holds it; a stop request
 * of the row writer ends the wait. */
static int slot_lock(const char *slot, struct ferry_row_writer *rw, const char *from,
                     struct ferry_error *err)
{
    pthread_mutex_lock(&slot_mu);
    int rc = FERRY_OK;
    for (;;) {
        int free_i = slot_find("");
        if (slot_find(slot) < 0 && free_i >= 0) {
            snprintf(slot_held[free_i], sizeof slot_held[free_i], "%s", slot);
            break;
        }
        int stop = ferry_rw_stop_requested(rw);
        if (stop != 0) {
            rc = stop == FERRY_ECANCELED ? FERRY_ECANCELED : FERRY_EPAUSED;
            ferry_error_set(err, rc, "postgres", WHAT ": table %s: stream stopped", from);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&slot_cv, &slot_mu, &ts);
    }
    pthread_mutex_unlock(&slot_mu);
    return rc;
}

static void slot_unlock(const char *slot)
{
    pthread_mutex_lock(&slot_mu);
    int i = slot_find(slot);
    if (i >= 0) slot_held[i][0] = '\0';
    pthread_cond_broadcast(&slot_cv);
    pthread_mutex_unlock(&slot_mu);
}

int ferry__pg_cdc_stream(const char *url, const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, json_t *plan, const char *resume,
                         struct ferry_row_writer *rw, struct ferry_pg_cdc_progress *progress,
                         struct ferry_error *err)
{
    struct stream s;
    memset(&s, 0, sizeof s);
    s.progress = progress;
    s.peer = peer;
    s.url = url;
    s.opts = opts;
    s.t = t;
    s.rw = rw;
    s.n_user = t->sc->n_fields - (t->change_log ? 3 : t->soft_delete ? 1 : 0);
    const char *slot = json_string_value(json_object_get(plan, "slot"));
    const char *pub = json_string_value(json_object_get(plan, "publication"));
    if (slot == NULL || pub == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": table %s: the frozen cdc plan names no slot or publication",
                               t->from);
    int rc = ferry__pg_cdc_plan_lsn(plan, "start", &s.start, err);
    if (rc == FERRY_OK) rc = ferry__pg_cdc_plan_lsn(plan, "end", &s.end, err);
    uint64_t resumed = 0;
    int64_t resumed_k = 0;
    if (rc == FERRY_OK) rc = ferry__pg_cdc_position(resume, &resumed, &resumed_k, err);
    if (rc != FERRY_OK) return rc;
    /* flush never moves past what was saved before this run: the plan's start, or for a
     * slot shared by the pipeline's tables the slot's confirmed position at plan time (the
     * minimum over every table, pg_slot.c). */
    s.flush = s.start;
    if (json_is_string(json_object_get(plan, "flush")))
        rc = ferry__pg_cdc_plan_lsn(plan, "flush", &s.flush, err);
    if (rc != FERRY_OK) return rc;
    json_t *skip = json_object_get(plan, "skip");
    if (json_is_integer(skip) && json_integer_value(skip) > 0) s.skip = json_integer_value(skip);
    if (resumed >= s.start && resume != NULL && resumed != 0) {
        s.start = resumed;
        s.skip = resumed_k;
    }
    s.last_commit_end = s.start;
    ferry_rw_set_offset(rw, (int64_t)s.start);
    if (s.start >= s.end) return FERRY_OK; /* nothing left to read up to the frozen end */

    s.map = ferry_calloc((size_t)(s.n_user > 0 ? s.n_user : 1), sizeof *s.map);
    if (s.map == NULL) return nomem(err);
    ferry_pg_repl_decoder_init(&s.dec);
    ferry_buf_init(&s.scratch, 0);
    /* One session per slot at a time in this process: the tables of a shared slot stream
     * one after another even when resources run concurrently. */
    rc = slot_lock(slot, rw, t->from, err);
    if (rc != FERRY_OK) {
        ferry_buf_release(&s.scratch);
        ferry_pg_repl_decoder_release(&s.dec);
        ferry_free(s.map);
        return rc;
    }
    struct parked pk;
    bool reused = t->keep_session && s.skip == 0 && park_take(slot, pub, s.start, &pk);
    if (!reused) park_close_slot(slot); /* a parked session of the slot would hold it */
    if (reused) {
        /* The session of the previous run goes on right after its last position. */
        s.c = pk.c;
        s.received = pk.received;
        s.rels = pk.rels;
        s.replaying = true;
        for (int i = 0; i < s.rels.n && rc == FERRY_OK; i++)
            rc = on_message(&s, s.rels.v[i].p, s.rels.v[i].n, err);
        s.replaying = false;
    } else {
        rc = ferry__pg_connect_ex(url, opts, "database", WHAT " (replication)", &s.c, err);
        /* Values arrive as the walsender's text output: pin the forms the parsers read. */
        if (rc == FERRY_OK)
            rc = ferry__pg_exec(s.c,
                                "SET TimeZone = 'UTC'; SET bytea_output = 'hex'; "
                                "SET extra_float_digits = 3; SET IntervalStyle = 'postgres'",
                                FERRY_ESOURCE, WHAT ": replication session", err);
        if (rc == FERRY_OK) rc = start_replication(&s, slot, pub, err);
    }
    bool streaming = reused || rc == FERRY_OK;
    ferry_log(FERRY_LOG_DEBUG, WHAT ": table %s: streaming from slot %s (%s session)", t->from,
              slot, reused ? "continued" : "new");
    if (progress != NULL) {
        atomic_store(&progress->final_pending, 0);
        report(&s);
        atomic_store(&progress->active, 1);
    }
    int64_t now = ferry_now_mono_us();
    s.last_status = s.last_probe = now;
    s.last_data = now;
    unsigned frames = 0;
    /* io_timeout: while we wait with nothing to read (an idle stream is probed every
     * PROBE_EVERY_US and a live server answers each probe), how long since the last frame or
     * since on_frame returned (a queue full downstream is backpressure, not silence). Found
     * by tests/fault/cdc_conn_reset.sh: a proxy that stopped answering hung the stream until
     * the server's wal_sender_timeout closed it, and forever when nothing closes it. */
    int64_t heard = now;
    while (rc == FERRY_OK && !s.done && !s.schema_stop && !s.epoch_stop) {
        char *buf = NULL;
        int n = PQgetCopyData(s.c, &buf, 1);
        if (n > 0) {
            rc = on_frame(&s, (const uint8_t *)buf, (size_t)n, err);
            PQfreemem(buf);
            heard = ferry_now_mono_us();
            /* A busy stream still looks at stop requests and the status timer now and then
             * (its rows may all be other tables' of a shared publication). */
            if (rc != FERRY_OK || s.done || s.schema_stop || s.epoch_stop || (++frames & 1023) != 0)
                continue;
        }
        if (n == -1) {
            PGresult *res = PQgetResult(s.c);
            rc = ferry__pg_error(err, FERRY_ESOURCE, s.c, res,
                                 WHAT ": %s: table %s: the server ended the replication stream",
                                 peer, t->from);
            PQclear(res);
            streaming = false;
            break;
        }
        if (n == -2) {
            rc = ferry__pg_error(err, FERRY_EIO, s.c, NULL,
                                 WHAT ": %s: table %s: reading the replication stream", peer,
                                 t->from);
            streaming = false;
            break;
        }
        int stop = ferry_rw_stop_requested(rw);
        if (stop != 0) {
            rc = stop == FERRY_ECANCELED ? FERRY_ECANCELED : FERRY_EPAUSED;
            ferry_error_set(err, rc, "postgres", WHAT ": table %s: stream stopped", t->from);
            break;
        }
        now = ferry_now_mono_us();
        if (now - s.last_status >= STATUS_EVERY_US) {
            rc = send_status(&s, false, err);
        } else if (now - s.last_probe >= PROBE_EVERY_US && now - s.last_data >= 20000) {
            /* Idle: ask where the server's decoding is, to notice we are caught up. */
            s.last_probe = now;
            rc = send_status(&s, true, err);
        }
        if (rc != FERRY_OK) break;
        if (n > 0) continue;
        if (s.opts->io_timeout_ms > 0 && now - heard > s.opts->io_timeout_ms * 1000) {
            rc = ferry_error_set(err, FERRY_ETIMEOUT, "postgres",
                                 WHAT ": %s: table %s: the replication stream sent nothing for %lld"
                                 " ms although asked (io_timeout); the server or the network"
                                 " stopped answering",
                                 peer, t->from, (long long)s.opts->io_timeout_ms);
            streaming = false;
            break;
        }
        struct pollfd pfd = {.fd = PQsocket(s.c), .events = POLLIN};
        poll(&pfd, 1, 100);
        if (!PQconsumeInput(s.c)) {
            rc = ferry__pg_error(err, FERRY_EIO, s.c, NULL,
                                 WHAT ": %s: table %s: reading the replication stream", peer,
                                 t->from);
            streaming = false;
        }
    }
    if (rc == FERRY_OK && s.done && !s.schema_stop && s.last_commit_end < s.end) {
        /* Caught up through a keepalive: the end itself is the position (nothing of ours
         * lies between the last commit and it). */
        ferry_rw_set_offset(rw, (int64_t)s.end);
    }
    if (progress != NULL) {
        report(&s);
        atomic_store(&progress->active, 0);
        atomic_store(&progress->final_pending, 1);
    }
    /* --follow: a stream that ended cleanly at a commit or at its end keeps its session for
     * the next run (see above); anything else releases the slot now. */
    bool park = rc == FERRY_OK && streaming && t->keep_session && !s.schema_stop && !s.in_txn &&
                (s.done || s.epoch_stop);
    uint64_t pos = s.done && s.last_commit_end < s.end ? s.end : s.last_commit_end;
    if (park && park_put(&s, slot, pub, pos)) {
        s.c = NULL;
        ferry_log(FERRY_LOG_DEBUG, WHAT ": table %s: stream ended, session kept", t->from);
    } else {
        ferry_log(FERRY_LOG_DEBUG, WHAT ": table %s: stream ended, releasing the slot", t->from);
    }
    if (s.c != NULL) {
        if (streaming) end_stream(s.c);
        PQfinish(s.c);
    }
    slot_unlock(slot);
    rels_free(&s.rels);
    if (rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, WHAT ": table %s: %" PRId64 " changes streamed%s", t->from,
                  s.changes,
                  s.schema_stop  ? " (stopped at a schema change)"
                  : s.epoch_stop ? " (row-count epoch: the next run goes on)"
                                 : "");
    ferry_buf_release(&s.scratch);
    ferry_pg_repl_decoder_release(&s.dec);
    ferry_free(s.map);
    return rc;
}

/* ---- acknowledge and drop ------------------------------------------------------------ */

int ferry__pg_cdc_ack(PGconn *c, const char *peer, const char *plan_json, const char *position,
                      bool *caught_up, struct ferry_error *err)
{
    *caught_up = true;
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    const char *slot = json_string_value(json_object_get(plan, "slot"));
    uint64_t end = 0, lsn = 0;
    int rc = slot != NULL ? ferry__pg_cdc_plan_lsn(plan, "end", &end, err)
                          : ferry_error_set(err, FERRY_EINVAL, "postgres",
                                            WHAT ": the frozen cdc plan names no slot");
    if (rc == FERRY_OK) rc = position_lsn(position, &lsn, err);
    char name[64];
    snprintf(name, sizeof name, "%s", slot ? slot : "");
    json_decref(plan);
    if (rc != FERRY_OK || lsn == 0) return rc;
    *caught_up = lsn >= end;
    return ferry__pg_cdc_advance(c, peer, name, lsn, err);
}

int ferry__pg_cdc_advance(PGconn *c, const char *peer, const char *name, uint64_t lsn,
                          struct ferry_error *err)
{
    struct ferry_pg_slot_info si;
    int rc = ferry__pg_cdc_slot_info(c, peer, name, &si, err);
    if (rc != FERRY_OK) return rc;
    if (!si.exists)
        return ferry_error_set(err, FERRY_ENOTFOUND, "postgres",
                               WHAT ": %s: replication slot \"%s\" disappeared before it could be "
                                    "acknowledged",
                               peer, name);
    if (lsn <= si.confirmed) return FERRY_OK; /* never backwards */
    rc = ferry_failpoint_check("before_slot_ack", err);
    if (rc != FERRY_OK) return rc;
    if (park_ack(name, lsn) == FERRY_OK) return FERRY_OK; /* its session holds the slot */
    char at[32];
    ferry_pg_lsn_format(lsn, at, sizeof at);
    const char *params[2] = {name, at};
    /* The stream's walsender may still be releasing the slot for a moment. */
    int64_t deadline = ferry_now_mono_us() + 10000000;
    for (;;) {
        PGresult *res = PQexecParams(
            c, "SELECT pg_catalog.pg_replication_slot_advance($1, $2::pg_catalog.pg_lsn)", 2, NULL,
            params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            PQclear(res);
            return FERRY_OK;
        }
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        bool busy = state != NULL && !strcmp(state, "55006");
        if (!busy || ferry_now_mono_us() > deadline) {
            rc = ferry__pg_error(err, FERRY_ESOURCE, c, res,
                                 WHAT ": %s: acknowledging replication slot \"%s\" up to %s", peer,
                                 name, at);
            PQclear(res);
            return rc;
        }
        PQclear(res);
        usleep(100000);
    }
}

int ferry__pg_cdc_drop(PGconn *c, const char *peer, const struct ferry_resource_spec *spec,
                       struct ferry_error *err)
{
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc != FERRY_OK) return rc;
    return ferry__pg_cdc_drop_names(c, peer, o.slot, o.publication_given ? NULL : o.publication,
                                    err);
}

int ferry__pg_cdc_drop_names(PGconn *c, const char *peer, const char *slot, const char *pub,
                             struct ferry_error *err)
{
    struct ferry_pg_slot_info si;
    int rc = ferry__pg_cdc_slot_info(c, peer, slot, &si, err);
    if (rc != FERRY_OK) return rc;
    if (si.exists) {
        if (si.active)
            return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                                   WHAT ": %s: replication slot \"%s\" is in use (a run is "
                                        "streaming from it); pause it first",
                                   peer, slot);
        const char *p1[1] = {slot};
        rc = exec_params(c, "SELECT pg_catalog.pg_drop_replication_slot($1)", 1, p1, peer,
                         "dropping the replication slot", err);
        if (rc != FERRY_OK) return rc;
    }
    if (pub == NULL) return FERRY_OK; /* not ferry's to drop */
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    rc = ferry_buf_printf(&sql, "DROP PUBLICATION IF EXISTS ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, pub, err);
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(c, sql.data, FERRY_ESOURCE, WHAT ": dropping the publication", err);
    ferry_buf_release(&sql);
    return rc;
}
