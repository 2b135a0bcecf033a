/* connectors/postgres/pg_cdc.c - change data capture for the postgres source (pg_cdc.h).
 *
 * Owns: the names and lifecycle of a cdc resource's publication and replication slot, one
 * table's stream (pgoutput protocol version 1, values as text: its frames come from the
 * slot's one replication session through pg_demux.c, which reads the socket and answers the
 * server), the conversion of its tuples into the row writer, and acknowledging (advancing)
 * the slot. Calls libpq, pg_common.c, pg_demux.c, pg_repl.c (the pure decoder), the row
 * writer, the batch text parsers, jansson (plans) and the checkpoint codec (saved positions:
 * checkpoint/position.h). Called by pg_source.c (plan, extract of shard
 * 0, cdc_ack, cdc_drop) on the thread that owns the source instance.
 *
 * The rule that matters most: the slot's confirmed position moves only through
 * ferry__pg_cdc_ack(), which the runner calls with a position the state store has saved
 * after the sink made it durable. The stream's standby status updates report `flush` as
 * the plan's start (the position already saved when the run began), never what was merely
 * received; `write` may run ahead (it does not move a logical slot). See
 * docs/internals/cdc.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "checkpoint/position.h"
#include "connectors/postgres/pg_cdc.h"
#include "connectors/postgres/pg_chunk.h"
#include "connectors/postgres/pg_copy.h"
#include "connectors/postgres/pg_demux.h"
#include "connectors/postgres/pg_repl.h"
#include "connectors/postgres/pg_values.h"
#include "ferry/failpoint.h"

#define WHAT "postgres source"

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
                              "COALESCE(pg_catalog.to_jsonb(s) ->> 'wal_status', ''), s.active, "
                              "COALESCE(s.restart_lsn::pg_catalog.text, '') "
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
        const char *rs = PQgetvalue(res, 0, 5);
        if (rs[0] != '\0') ferry_pg_lsn_parse(rs, &si->restart);
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

int ferry__pg_cdc_check_publish(PGconn *c, const char *peer, const char *pub,
                                struct ferry_error *err)
{
    static const char *const kinds[4] = {"insert", "update", "delete", "truncate"};
    const char *p1[1] = {pub};
    PGresult *res = NULL;
    /* through to_jsonb: pubtruncate exists from PostgreSQL 11 on */
    int rc = query(c,
                   "SELECT coalesce((j->>'pubinsert')::bool, true), "
                   "coalesce((j->>'pubupdate')::bool, true), "
                   "coalesce((j->>'pubdelete')::bool, true), "
                   "coalesce((j->>'pubtruncate')::bool, true) FROM (SELECT to_jsonb(p) AS j "
                   "FROM pg_catalog.pg_publication p WHERE p.pubname = $1) x",
                   1, p1, &res, peer, "reading what the publication publishes", err);
    if (rc != FERRY_OK) return rc;
    char missing[64] = "";
    for (int i = 0; PQntuples(res) == 1 && i < 4; i++)
        if (strcmp(PQgetvalue(res, 0, i), "t") != 0)
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                     missing[0] ? ", " : "", kinds[i]);
    PQclear(res);
    if (missing[0] == '\0') return FERRY_OK;
    return ferry_error_set(err, FERRY_ECONFIG, "postgres",
                           WHAT ": %s: publication \"%s\" does not publish %s: those changes "
                                "would never reach the destination; run ALTER PUBLICATION "
                                "\"%s\" SET (publish = 'insert, update, delete, truncate')",
                           peer, pub, missing, pub);
}

static int ensure_members(PGconn *c, const char *peer, const struct ferry_pg_cdc_opts *o,
                          const struct ferry_pg_cdc_target *t, struct ferry_error *err);

/* The publication publishes the table, and every kind of change. */
static int ensure_publication(PGconn *c, const char *peer, const struct ferry_pg_cdc_opts *o,
                              const struct ferry_pg_cdc_target *t, struct ferry_error *err)
{
    int rc = ensure_members(c, peer, o, t, err);
    return rc == FERRY_OK ? ferry__pg_cdc_check_publish(c, peer, o->publication, err) : rc;
}

static int ensure_members(PGconn *c, const char *peer, const struct ferry_pg_cdc_opts *o,
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

int ferry__pg_cdc_array_add(struct ferry_buf *b, const char *elem)
{
    bool first = b->len == 0;
    if (!first) b->len--; /* its closing brace, written again after elem */
    int rc = ferry_buf_append(b, first ? "{\"" : ",\"", 2);
    for (const char *p = elem; *p != '\0' && rc == FERRY_OK; p++)
        rc = *p == '"' || *p == '\\' ? ferry_buf_printf(b, "\\%c", *p) : ferry_buf_append(b, p, 1);
    return rc == FERRY_OK ? ferry_buf_append(b, "\"}", 2) : rc;
}

int ferry__pg_cdc_writers(PGconn *c, const char *peer, const char *tables, struct ferry_buf *list,
                          int *n, struct ferry_buf *pids, struct ferry_error *err)
{
    const char *p[2] = {tables, list->len > 0 ? list->data : NULL};
    PGresult *res = NULL;
    int rc =
        query(c,
              "SELECT pg_catalog.count(DISTINCT l.virtualtransaction), "
              "coalesce(pg_catalog.array_agg(DISTINCT l.virtualtransaction)::pg_catalog.text, "
              "'{}'), coalesce(pg_catalog.string_agg(DISTINCT coalesce(l.pid::pg_catalog.text, "
              "'prepared'), ', '), '') "
              "FROM pg_catalog.pg_locks l WHERE l.locktype = 'relation' AND l.granted "
              "AND l.mode = 'RowExclusiveLock' AND l.database = (SELECT d.oid FROM "
              "pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()) "
              "AND l.relation IN (SELECT t::pg_catalog.regclass FROM "
              "pg_catalog.unnest($1::pg_catalog.text[]) t UNION ALL SELECT r.relid FROM "
              "pg_catalog.unnest($1::pg_catalog.text[]) t, "
              "pg_catalog.pg_partition_tree(t::pg_catalog.regclass) r) "
              "AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid() "
              "AND ($2::pg_catalog.text[] IS NULL OR "
              "l.virtualtransaction = ANY ($2::pg_catalog.text[]))",
              2, p, &res, peer, "listing the open writers of joining tables (pg_locks)", err);
    if (rc != FERRY_OK) return rc;
    *n = atoi(PQgetvalue(res, 0, 0));
    ferry_buf_reset(list);
    ferry_buf_reset(pids);
    rc = ferry_buf_printf(list, "%s", PQgetvalue(res, 0, 1));
    if (rc == FERRY_OK) rc = ferry_buf_printf(pids, "%s", PQgetvalue(res, 0, 2));
    PQclear(res);
    return rc == FERRY_OK ? FERRY_OK : nomem(err);
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
    struct ferry_position p;
    struct ferry_error e;
    if (ferry_position_decode(position, strlen(position), &p, &e) != FERRY_OK) {
        if (e.code == FERRY_ENOMEM) return nomem(err);
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": the saved cdc position is not a log position (%s)",
                               e.message);
    }
    if (p.has_n) {
        *lsn = (uint64_t)p.n;
        if (k) *k = p.k;
    }
    ferry_position_clear(&p);
    return FERRY_OK;
}

int ferry__pg_cdc_plan_chunks(json_t *plan, const char *position, struct ferry_error *err)
{
    if (position == NULL) return FERRY_OK;
    struct ferry_position p;
    struct ferry_error e;
    if (ferry_position_decode(position, strlen(position), &p, &e) != FERRY_OK)
        return ferry_error_set(
            err, e.code == FERRY_ENOMEM ? FERRY_ENOMEM : FERRY_EINVAL, "postgres",
            WHAT ": the saved cdc position is not a log position (%s)", e.message);
    int rc = FERRY_OK;
    if (p.has_n && p.tag != NULL && p.tag[0] == 'c') {
        json_object_set_new(plan, "chunked", json_true());
        if (json_object_set_new(plan, "chunk_after", json_string(p.tag)) != 0) rc = nomem(err);
    }
    ferry_position_clear(&p);
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

struct stream {
    const char *url;
    const struct ferry_pg_conn_opts *opts;
    const char *peer;
    const struct ferry_pg_cdc_target *t;
    struct ferry_row_writer *rw;
    struct ferry_pg_repl_decoder dec;
    struct ferry_pg_demux_member *member; /* this table's queue of the slot's session */
    const char *slot, *pub;
    int n_user;     /* schema fields that come from the table (change-log columns follow) */
    int *map;       /* per user field: index in the relation's columns */
    uint32_t relid; /* ours, once its Relation message arrived */
    bool rel_known;
    uint64_t start, end, flush, received, last_commit_end;
    bool in_txn;
    bool dropping;    /* the open transaction ends before start: ours already */
    int64_t txn_rows; /* rows of the current transaction written (or skipped) so far */
    int64_t skip;     /* rows of the first transaction already in the destination */
    uint64_t txn_lsn;
    uint32_t txn_xid;    /* Begin's: a chunk's snapshot may not see it (pg_chunk.h) */
    int64_t txn_time_us; /* unix microseconds */
    bool done, schema_stop;
    bool epoch_stop; /* epoch_rows changes written: this run ends at the last commit */
    int64_t changes;
    int64_t last_commit_time_us; /* unix microseconds of the last commit received */
    struct ferry_pg_cdc_progress *progress;
    struct ferry_buf scratch;
    const char *value_class; /* put_text's FERRY_EUNSUPPORTED: the special value refused */
    /* A table that joined a running slot: read in watermark chunks (pg_chunk.h) */
    bool chunking;
    const char *chunk_tag; /* where its snapshot got: plan's "chunk_after" or the resume tag */
    struct ferry_pg_chunk chunk;
    int64_t snapshot_rows;
};

/* Whether the table's snapshot is still being read in chunks: it does not end before. */
static bool chunk_active(const struct stream *s)
{
    return s->chunking && s->chunk.phase != CHUNK_DONE;
}

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
    /* `_ferry_seq`: its place in the transaction (pg_cdc.h) */
    ferry_cdc_put_change(rw, s->t->change_log, s->t->soft_delete, op, (int64_t)s->txn_lsn,
                         s->txn_time_us, s->txn_rows);
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
    if (chunk_active(s)) {
        /* in a chunk's window, or unseen by its snapshot: the stream's value of these keys
         * wins over the chunk's */
        const struct ferry_pg_repl_tuple *nw = m->kind == 'D' ? NULL : &m->new_tuple;
        int rc = nw ? ferry__pg_chunk_note(&s->chunk, s->txn_xid, nw, s->map, err) : FERRY_OK;
        if (rc == FERRY_OK && m->old_kind)
            rc = ferry__pg_chunk_note(&s->chunk, s->txn_xid, &m->old_tuple, s->map, err);
        if (rc != FERRY_OK) return rc;
    }
    switch (m->kind) {
    case 'I':
        return write_row(s, FERRY_OP_INSERT, &m->new_tuple, NULL, err);
    case 'U': {
        const struct ferry_pg_repl_tuple *old = m->old_kind ? &m->old_tuple : NULL;
        if (old != NULL && key_changed(s, old, &m->new_tuple)) {
            /* the old key goes first; in a change log the new one is an insert (merged by key,
             * an update row alone would leave the old key behind) */
            int rc = write_row(s, FERRY_OP_DELETE, old, NULL, err);
            if (rc != FERRY_OK) return rc;
            if (s->t->change_log) return write_row(s, FERRY_OP_INSERT, &m->new_tuple, old, err);
        }
        return write_row(s, FERRY_OP_UPDATE, &m->new_tuple, old, err);
    }
    case 'D':
        return write_row(s, FERRY_OP_DELETE, &m->old_tuple, NULL, err);
    default:
        return FERRY_OK;
    }
}

/* The stream passed a commit ending at end_lsn, made at time_us (pgoutput's clock): the
 * position moves there, and the table is done once it reaches its end. */
static void pass_commit(struct stream *s, uint64_t end_lsn, int64_t time_us)
{
    if (end_lsn > s->last_commit_end) {
        s->last_commit_end = end_lsn;
        ferry_rw_set_offset(s->rw, (int64_t)end_lsn);
        s->last_commit_time_us = time_us + FERRY_PG_REPL_EPOCH_US;
    }
    if (end_lsn >= s->end && !chunk_active(s)) s->done = true;
}

/* A commit of a transaction the table had a part in, or at its end or a row-count epoch's
 * (the session sends no other Commit: the other positions move at cuts, stream_loop).
 * epoch_end: the session's row-count epoch ends the run here (pg_demux.c). */
static void on_commit(struct stream *s, const struct ferry_pg_repl_msg *m, bool epoch_end)
{
    s->in_txn = false;
    if (s->dropping) {
        /* ours already; the session's epoch may still end here (the session stops reading) */
        s->dropping = false;
        if (epoch_end) s->epoch_stop = true;
        return;
    }
    s->txn_rows = 0;
    s->skip = 0;
    ferry_rw_set_suboffset(s->rw, 0);
    pass_commit(s, m->end_lsn, m->time);
    /* A row-count epoch ends at a commit, the position exact; the next run goes on. */
    if (!s->done && epoch_end) s->epoch_stop = true;
    report(s);
}

static int on_truncate(struct stream *s, const struct ferry_pg_repl_msg *m, struct ferry_error *err)
{
    if (s->dropping || !s->rel_known) return FERRY_OK;
    for (int i = 0; i < m->n_rels; i++)
        if (ferry_pg_repl_truncate_relid(m, i) == s->relid) {
            int rc = ferry__pg_schema_truncate(s->t, err);
            if (rc == FERRY_OK && chunk_active(s))
                rc = ferry__pg_chunk_truncated(&s->chunk, s->txn_xid, err);
            return rc == FERRY_OK ? write_truncate(s, err) : rc;
        }
    return FERRY_OK;
}

/* Row r of the chunk as an insert (merge: an upsert; change log: `_ferry_lsn` = our high
 * watermark's position minus one, no commit time, `_ferry_seq` 0, like the rows of a first
 * copy). */
static int write_snapshot_row(struct stream *s, PGresult *res, int r, uint64_t lsn,
                              struct ferry_error *err)
{
    const struct ferry_schema *sc = s->t->sc;
    struct ferry_row_writer *rw = s->rw;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int f = 0; f < s->n_user; f++) {
        if (PQgetisnull(res, r, f)) {
            ferry_rw_null(rw);
            continue;
        }
        int rc = put_text(s, &sc->fields[f], (const uint8_t *)PQgetvalue(res, r, f),
                          (size_t)PQgetlength(res, r, f));
        if (rc == FERRY_OK) continue;
        ferry_rw_cancel_row(rw);
        if (rc == FERRY_ENOMEM) return nomem(err);
        int k = sc->n_key > 0 ? sc->key[0] : 0;
        return ferry_error_set(err, rc, "postgres",
                               WHAT ": table %s: column \"%s\" of the row %s=%.60s of a snapshot "
                                    "chunk cannot be read as %s%s%s",
                               s->t->from, sc->fields[f].name, sc->fields[k].name,
                               PQgetvalue(res, r, k), ferry_type_name(sc->fields[f].type),
                               rc == FERRY_EUNSUPPORTED ? ": " : "",
                               rc == FERRY_EUNSUPPORTED ? s->value_class : "");
    }
    /* before a commit that begins at lsn (pg_cdc.h) */
    ferry_cdc_put_snapshot(rw, s->t->change_log, s->t->soft_delete, (int64_t)lsn - 1);
    s->snapshot_rows++;
    return ferry_rw_end(rw, err);
}

/* Our high watermark arrived: the chunk's rows whose key the stream did not change since
 * our low one, nor in a transaction the chunk's snapshot does not see, are written here.
 * Each row's key becomes the position's tag before the row (a batch closes after a row:
 * its position then covers it), so a resume reads on after the last durable row. */
static int write_chunk(struct stream *s, uint64_t lsn, struct ferry_error *err)
{
    struct ferry_pg_chunk *ch = &s->chunk;
    int rc = ferry__pg_chunk_at_hw(ch, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", s->t->from);
    int n = ferry__pg_chunk_rows(ch);
    for (int r = 0; r < n && rc == FERRY_OK; r++) {
        bool drop = ferry__pg_chunk_dropped(ch, r);
        const char *tag = NULL;
        size_t tn = 0;
        rc = ferry__pg_chunk_written(ch, r, &tag, &tn, err);
        if (rc != FERRY_OK) break;
        ferry_rw_set_offset_tag(s->rw, tag, tn);
        if (!drop) rc = write_snapshot_row(s, ch->rows, r, lsn, err);
    }
    if (rc != FERRY_OK) return rc;
    ferry__pg_chunk_next(ch);
    if (ch->phase == CHUNK_DONE) {
        ferry_rw_set_offset_tag(s->rw, "d", 1);
        ferry_log(FERRY_LOG_INFO,
                  WHAT ": table %s: snapshot read in %lld chunks (%" PRId64
                       " rows) while streaming",
                  s->t->from, (long long)ch->no, s->snapshot_rows);
    }
    return FERRY_OK;
}

static int on_message(struct stream *s, const uint8_t *p, size_t n, bool epoch_end,
                      struct ferry_error *err)
{
    struct ferry_pg_repl_msg m;
    int rc = ferry_pg_repl_decode(&s->dec, p, n, &m, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT ": %s: table %s", s->peer, s->t->from);
    switch (m.kind) {
    case 'B':
        s->in_txn = true;
        /* The session starts at the least start of its tables: a transaction whose commit
         * record begins before ours was ours already (as the server skips it for a session
         * started at our own start). */
        s->dropping = m.final_lsn < s->start;
        s->txn_lsn = m.final_lsn;
        s->txn_xid = m.xid;
        s->txn_time_us = m.time + FERRY_PG_REPL_EPOCH_US;
        return FERRY_OK;
    case 'C':
        on_commit(s, &m, epoch_end);
        return FERRY_OK;
    case 'R':
        return on_relation(s, &m, err);
    case 'I':
    case 'U':
    case 'D':
        return s->dropping ? FERRY_OK : on_change(s, &m, err);
    case 'T':
        return on_truncate(s, &m, err);
    case 'M':
        /* our high watermark (between transactions): the chunk's rows go in here */
        if (chunk_active(s) && !s->in_txn &&
            ferry__pg_chunk_message(&s->chunk, m.prefix, m.content, m.content_len))
            return write_chunk(s, m.commit_lsn, err);
        return FERRY_OK;
    default:
        return FERRY_OK; /* origin, type */
    }
}

static int on_frame(struct stream *s, const uint8_t *p, size_t n, bool epoch_end,
                    struct ferry_error *err)
{
    struct ferry_pg_repl_frame f;
    int rc = ferry_pg_repl_parse_frame(p, n, &f, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT ": %s: table %s", s->peer, s->t->from);
    if (f.kind == 'k') {
        if (f.wal_end > s->received) s->received = f.wal_end;
        /* Decoding passed the end with no transaction open: everything committed before the
         * end has been received. */
        if (!s->in_txn && f.wal_end >= s->end && !chunk_active(s)) s->done = true;
        report(s);
        return FERRY_OK; /* the session's reader answers the server */
    }
    if (f.wal_start > s->received) s->received = f.wal_start;
    return on_message(s, f.data, f.len, epoch_end, err);
}


/* ---- the stream: one table's queue of the slot's session (pg_demux.c) ---------------- */

/* The frozen plan's range, the resume position, flush and skip into s; *nothing when the
 * table has nothing left to read up to its end. */
static int stream_plan(struct stream *s, json_t *plan, const struct ferry_position *resume,
                       bool *nothing, struct ferry_error *err)
{
    s->slot = json_string_value(json_object_get(plan, "slot"));
    s->pub = json_string_value(json_object_get(plan, "publication"));
    if (s->slot == NULL || s->pub == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "postgres",
                               WHAT ": table %s: the frozen cdc plan names no slot or publication",
                               s->t->from);
    int rc = ferry__pg_cdc_plan_lsn(plan, "start", &s->start, err);
    if (rc == FERRY_OK) rc = ferry__pg_cdc_plan_lsn(plan, "end", &s->end, err);
    /* the resume position's LSN ("n") and rows of the next transaction written ("k") */
    bool has_n = resume != NULL && resume->has_n;
    uint64_t resumed = has_n ? (uint64_t)resume->n : 0;
    int64_t resumed_k = has_n ? resume->k : 0;
    /* flush never moves past what was saved before this run: the plan's start, or for a
     * slot shared by the pipeline's tables the slot's confirmed position at plan time (the
     * minimum over every table, pg_slot.c). */
    s->flush = s->start;
    if (rc == FERRY_OK && json_is_string(json_object_get(plan, "flush")))
        rc = ferry__pg_cdc_plan_lsn(plan, "flush", &s->flush, err);
    if (rc != FERRY_OK) return rc;
    json_t *skip = json_object_get(plan, "skip");
    if (json_is_integer(skip) && json_integer_value(skip) > 0) s->skip = json_integer_value(skip);
    /* a table that joined a running slot: its snapshot in watermark chunks */
    s->chunking = json_is_true(json_object_get(plan, "chunked"));
    s->chunk_tag = json_string_value(json_object_get(plan, "chunk_after"));
    if (resumed >= s->start && resume != NULL && resumed != 0) {
        s->start = resumed;
        s->skip = resumed_k;
        if (s->chunking) s->chunk_tag = resume->tag; /* the last durable chunk row, "d" */
    }
    s->last_commit_end = s->start;
    ferry_rw_set_offset(s->rw, (int64_t)s->start);
    *nothing = s->start >= s->end && !s->chunking;
    return FERRY_OK;
}

/* Joins the slot's session: `tables` of the plan (a shared slot) start at once when the
 * runner starts their streams together (t->streams), else this table streams alone. */
static int stream_join(struct stream *s, json_t *plan, struct ferry_error *err)
{
    int expected = 1;
    json_t *tables = json_object_get(plan, "tables");
    if (json_is_integer(tables) && s->t->streams > 1) {
        expected = (int)json_integer_value(tables);
        if (expected > s->t->streams) expected = s->t->streams;
        if (expected < 1) expected = 1;
    }
    const struct ferry_pg_demux_join j = {.url = s->url,
                                          .opts = s->opts,
                                          .peer = s->peer,
                                          .slot = s->slot,
                                          .pub = s->pub,
                                          .schema_name = s->t->schema_name,
                                          .table = s->t->table,
                                          .from = s->t->from,
                                          .start = s->start,
                                          /* chunks: its watermarks lie past the end */
                                          .end = chunk_active(s) ? UINT64_MAX : s->end,
                                          .flush = s->flush,
                                          .expected = expected,
                                          .keep_session = s->t->keep_session,
                                          .can_continue = s->skip == 0,
                                          .epoch_rows = s->t->epoch_rows,
                                          .stream_large_txns = s->t->stream_large_txns,
                                          .rw = s->rw};
    return ferry__pg_demux_join(&j, &s->member, err);
}

static int stop_code(struct stream *s, struct ferry_error *err)
{
    int stop = ferry_rw_stop_requested(s->rw);
    if (stop == 0) return FERRY_OK;
    int rc = stop == FERRY_ECANCELED ? FERRY_ECANCELED : FERRY_EPAUSED;
    return ferry_error_set(err, rc, "postgres", WHAT ": table %s: stream stopped", s->t->from);
}

/* Frames of the table's queue until its end, a stop (schema change, row-count epoch, pause,
 * cancel) or an error. */
static int stream_loop(struct stream *s, struct ferry_error *err)
{
    int rc = FERRY_OK;
    unsigned frames = 0;
    while (rc == FERRY_OK && !s->done && !s->schema_stop && !s->epoch_stop) {
        /* the next chunk of a joining table, between source transactions */
        if (chunk_active(s) && s->chunk.phase == CHUNK_IDLE && !s->in_txn) {
            rc = ferry__pg_chunk_start(&s->chunk, err);
            if (rc == FERRY_OK && s->chunk.phase == CHUNK_DONE)
                ferry_rw_set_offset_tag(s->rw, "d", 1);
            if (rc != FERRY_OK) return rc;
        }
        struct ferry_pg_demux_frame fr;
        rc = ferry__pg_demux_next(s->member, 100, &fr, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", s->t->from);
        if (fr.cut && !s->in_txn && !s->done) {
            /* a commit-group cut: this table's batch closes here, also when empty, at the
             * session's last commit (the Commits of transactions without this table are not
             * sent to it) */
            if (fr.cut_commit > s->received) s->received = fr.cut_commit;
            pass_commit(s, fr.cut_commit, fr.cut_commit_time);
            report(s);
            rc = ferry_rw_close_group(s->rw, err);
        } else if (fr.n > 0) {
            rc = on_frame(s, fr.p, fr.n, fr.epoch_end, err);
            ferry__pg_demux_frame_release(&fr);
            /* A busy stream looks at stop requests now and then (every frame may be a Begin
             * or Commit of other tables' transactions). */
            if ((++frames & 1023) != 0) continue;
        }
        if (rc == FERRY_OK) rc = stop_code(s, err);
    }
    return rc;
}

/* The position the run saves, the last report, leaving the session. */
static void stream_finish(struct stream *s, int rc)
{
    if (rc == FERRY_OK && s->done && !s->schema_stop && s->last_commit_end < s->end) {
        /* Caught up through a keepalive: the end itself is the position (nothing of ours
         * lies between the last commit and it). */
        ferry_rw_set_offset(s->rw, (int64_t)s->end);
    }
    if (s->progress != NULL) {
        report(s);
        atomic_store(&s->progress->active, 0);
        atomic_store(&s->progress->final_pending, 1);
    }
    /* --follow: a session every table of which ended cleanly at one commit boundary is
     * kept for the next run (pg_demux.c). */
    bool clean = rc == FERRY_OK && !s->schema_stop && !s->in_txn && (s->done || s->epoch_stop);
    uint64_t pos = s->done && s->last_commit_end < s->end ? s->end : s->last_commit_end;
    ferry__pg_demux_leave(s->member, clean, pos);
    s->member = NULL;
    if (rc == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, WHAT ": table %s: %" PRId64 " changes streamed%s", s->t->from,
                  s->changes,
                  s->schema_stop  ? " (stopped at a schema change)"
                  : s->epoch_stop ? " (row-count epoch: the next run goes on)"
                                  : "");
}

int ferry__pg_cdc_stream(const char *url, const struct ferry_pg_conn_opts *opts, const char *peer,
                         const struct ferry_pg_cdc_target *t, json_t *plan,
                         const struct ferry_position *resume, struct ferry_row_writer *rw,
                         struct ferry_pg_cdc_progress *progress, struct ferry_error *err)
{
    struct stream s = {.progress = progress, .peer = peer, .url = url, .opts = opts, .t = t,
                       .rw = rw};
    s.n_user = t->sc->n_fields - ferry_cdc_extra_cols(t->change_log, t->soft_delete);
    bool nothing = false;
    int rc = stream_plan(&s, plan, resume, &nothing, err);
    /* a table that will not join: its session need not wait for it */
    if ((rc != FERRY_OK || nothing) && t->streams > 1 && s.slot != NULL)
        ferry__pg_demux_decline(s.slot);
    if (rc != FERRY_OK || nothing) return rc; /* nothing left to read up to the frozen end */
    s.map = ferry_calloc((size_t)(s.n_user > 0 ? s.n_user : 1), sizeof *s.map);
    if (s.map == NULL) {
        if (t->streams > 1) ferry__pg_demux_decline(s.slot);
        return nomem(err);
    }
    ferry_pg_repl_decoder_init(&s.dec);
    ferry_buf_init(&s.scratch, 0);
    if (s.chunking)
        rc = ferry__pg_chunk_open(&s.chunk, url, opts, peer, t, s.n_user, s.chunk_tag, err);
    if (rc == FERRY_OK && chunk_active(&s)) {
        /* every position of this run says the snapshot is unfinished, also one saved before
         * the first chunk's rows (a run ended by a row-count epoch or a schema change) */
        const char *tag = s.chunk_tag != NULL && s.chunk_tag[0] == 'c' ? s.chunk_tag : "c";
        ferry_rw_set_offset_tag(rw, tag, strlen(tag));
    }
    if (rc != FERRY_OK && t->streams > 1) ferry__pg_demux_decline(s.slot);
    if (rc == FERRY_OK) rc = stream_join(&s, plan, err);
    if (rc == FERRY_OK) {
        if (progress != NULL) {
            atomic_store(&progress->final_pending, 0);
            report(&s);
            atomic_store(&progress->active, 1);
        }
        rc = stream_loop(&s, err);
        stream_finish(&s, rc);
    }
    if (s.chunking) ferry__pg_chunk_close(&s.chunk);
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

/* pg_replication_slot_advance(name, lsn), retried while the ending stream's walsender
 * still releases the slot (SQLSTATE 55006, up to 10 s). */
static int slot_advance(PGconn *c, const char *peer, const char *name, uint64_t lsn,
                        struct ferry_error *err)
{
    char at[32];
    ferry_pg_lsn_format(lsn, at, sizeof at);
    const char *params[2] = {name, at};
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
            int rc = ferry__pg_error(err, FERRY_ESOURCE, c, res,
                                     WHAT ": %s: acknowledging replication slot \"%s\" up to %s",
                                     peer, name, at);
            PQclear(res);
            return rc;
        }
        PQclear(res);
        usleep(100000);
    }
}

/* A session (or an advance) moves restart_lsn to one running-transactions record only: the
 * first it decodes past the confirmed position it started with, applied once the position is
 * confirmed beyond it. A bounded run confirms only at its end, so the slot kept its
 * restart_lsn near where the run began, and every later session decoded the run's WAL again
 * (122 MB after a bulk copy: bench/results/cdc-bulk-20261202.md). An advance to the
 * confirmed position itself (allowed: it never moves confirmed) decodes from restart_lsn
 * with every record before the position already confirmed, so it moves restart_lsn up to
 * the last one. Decoding once here spares that WAL to every later session. Best effort: a
 * failure only leaves the slot as it was (logged). */
#define RESTART_PULL_BYTES ((uint64_t)4 << 20)

static void pull_restart(PGconn *c, const char *peer, const char *name)
{
    struct ferry_error e;
    ferry_error_clear(&e);
    struct ferry_pg_slot_info si;
    if (ferry__pg_cdc_slot_info(c, peer, name, &si, &e) != FERRY_OK || !si.exists || si.active ||
        si.restart == 0 || si.confirmed < si.restart + RESTART_PULL_BYTES)
        return;
    if (slot_advance(c, peer, name, si.confirmed, &e) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "%s (its restart_lsn stays behind)", e.message);
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
    if (lsn > si.confirmed) { /* never backwards */
        rc = ferry_failpoint_check("before_slot_ack", err);
        if (rc != FERRY_OK) return rc;
        if (ferry__pg_demux_park_ack(name, lsn) == FERRY_OK) return FERRY_OK; /* its session holds the slot */
        rc = slot_advance(c, peer, name, lsn, err);
        if (rc != FERRY_OK) return rc;
    }
    pull_restart(c, peer, name);
    return FERRY_OK;
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
