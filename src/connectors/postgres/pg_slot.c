/* connectors/postgres/pg_slot.c - the pipeline's one publication and one replication slot,
 * shared by its cdc resources (pg_slot.h describes the rules). Calls pg_cdc.c (slot
 * queries, slot creation, advance, drop), pg_common.c and libpq. Called by pg_source.c on
 * the thread that owns the planning instance. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "connectors/postgres/pg_slot.h"
#include "connectors/postgres/pg_repl.h"
#include "ferry/failpoint.h"

#define WHAT "postgres source"

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
    return true;
}

int ferry__pg_slot_config(struct ferry_pg_slot *sl, struct ferry_cfg *cfg, struct ferry_error *err)
{
    static const char *const lost_words[] = {"error", "resnapshot", NULL};
    memset(sl, 0, sizeof *sl);
    ferry_buf_init(&sl->joined, 0);
    sl->lost_key = -1;
    int rc = ferry_cfg_str(cfg, "slot", false, &sl->slot_key, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "publication", false, &sl->pub_key, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "on_slot_lost", false, lost_words, &sl->lost_key, err);
    if (rc != FERRY_OK) return rc;
    if (sl->slot_key != NULL && !valid_name(sl->slot_key))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "slot"),
                               "a replication slot name is 1 to 63 characters of a-z, 0-9 and _");
    if (sl->pub_key != NULL && (sl->pub_key[0] == '\0' || strlen(sl->pub_key) > 63))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "publication"),
                               "a publication name is 1 to 63 bytes");
    return FERRY_OK;
}

/* The shared slot's name, and the resource's publication (given, or ferry's shared one). */
static void names(struct ferry_pg_slot *sl, const struct ferry_resource_spec *spec,
                  const struct ferry_pg_cdc_opts *o, char pub[64], bool *pub_given)
{
    const char *pipeline = ferry_read_context_of(spec)->pipeline;
    if (pipeline == NULL) pipeline = "pipeline";
    if (sl->slot_key != NULL)
        snprintf(sl->slot, sizeof sl->slot, "%s", sl->slot_key);
    else
        ferry__pg_cdc_fold_name(pipeline, NULL, pipeline, sl->slot);
    *pub_given = true;
    if (o->publication_given)
        snprintf(pub, 64, "%s", o->publication);
    else if (sl->pub_key != NULL)
        snprintf(pub, 64, "%s", sl->pub_key);
    else {
        ferry__pg_cdc_fold_name(pipeline, NULL, pipeline, pub);
        *pub_given = false;
    }
}

static bool resnapshot_on_loss(const struct ferry_pg_slot *sl, const struct ferry_pg_cdc_opts *o)
{
    return o->lost_given ? o->resnapshot : sl->lost_key == 1;
}

static struct ferry_pg_slot_table *find_table(struct ferry_pg_slot *sl, const char *route)
{
    for (int i = 0; i < sl->n_tabs; i++)
        if (!strcmp(sl->tabs[i].route, route)) return &sl->tabs[i];
    return NULL;
}

int ferry__pg_slot_register(struct ferry_pg_slot *sl, const struct ferry_resource_spec *spec,
                            const char *schema_name, const char *table, const char *from,
                            struct ferry_error *err)
{
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc != FERRY_OK || o.own_slot) return rc;
    const char *route = ferry_read_context_of(spec)->route;
    if (route == NULL) route = spec->table;
    if (find_table(sl, route) != NULL) return FERRY_OK;
    struct ferry_pg_slot_table *v = ferry_realloc(sl->tabs, (size_t)(sl->n_tabs + 1) * sizeof *v);
    if (v == NULL) return nomem(err);
    sl->tabs = v;
    struct ferry_pg_slot_table *t = &v[sl->n_tabs];
    memset(t, 0, sizeof *t);
    t->route = ferry_strdup(route);
    t->from = ferry_strdup(from);
    t->schema_name = ferry_strdup(schema_name);
    t->table = ferry_strdup(table);
    sl->n_tabs++;
    if (!t->route || !t->from || !t->schema_name || !t->table) return nomem(err);
    names(sl, spec, &o, t->publication, &t->pub_given);
    snprintf(t->legacy_slot, sizeof t->legacy_slot, "%s", o.slot); /* the derived per-table name */
    return FERRY_OK;
}

void ferry__pg_slot_release(struct ferry_pg_slot *sl)
{
    if (sl == NULL) return;
    for (int i = 0; i < sl->n_tabs; i++) {
        ferry_free(sl->tabs[i].route);
        ferry_free(sl->tabs[i].from);
        ferry_free(sl->tabs[i].schema_name);
        ferry_free(sl->tabs[i].table);
    }
    ferry_free(sl->tabs);
    if (sl->keep) PQfinish(sl->keep);
    sl->tabs = NULL;
    sl->n_tabs = 0;
    sl->keep = NULL;
    ferry_buf_release(&sl->joined);
    ferry_buf_init(&sl->joined, 0);
}

/* ---- the publication ----------------------------------------------------------------- */

/* Whether publication `pub` exists, and which registered tables it lacks (missing[i]). */
static int publication_members(PGconn *c, const char *peer, const char *pub, bool *exists,
                               bool *missing, struct ferry_pg_slot *sl, struct ferry_error *err)
{
    const char *p1[1] = {pub};
    PGresult *res = NULL;
    int rc = ferry__pg_cdc_query(c, "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1", 1,
                                 p1, &res, peer, "reading publications", err);
    if (rc != FERRY_OK) return rc;
    *exists = PQntuples(res) == 1;
    PQclear(res);
    rc = ferry__pg_cdc_query(c,
                             "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables "
                             "WHERE pubname = $1",
                             1, p1, &res, peer, "reading publication tables", err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < sl->n_tabs; i++) {
        missing[i] = false;
        if (strcmp(sl->tabs[i].publication, pub) != 0) continue;
        missing[i] = true;
        for (int r = 0; r < PQntuples(res) && missing[i]; r++)
            if (!strcmp(PQgetvalue(res, r, 0), sl->tabs[i].schema_name) &&
                !strcmp(PQgetvalue(res, r, 1), sl->tabs[i].table))
                missing[i] = false;
    }
    PQclear(res);
    return FERRY_OK;
}

/* A publication the user gave must publish its tables already. */
static int check_given(PGconn *c, const char *peer, struct ferry_pg_slot *sl, int i, bool *missing,
                       struct ferry_error *err)
{
    const char *pub = sl->tabs[i].publication;
    bool exists = false;
    int rc = publication_members(c, peer, pub, &exists, missing, sl, err);
    if (rc != FERRY_OK || !missing[i]) return rc;
    return ferry_error_set(err, FERRY_ECONFIG, "postgres",
                           WHAT ": %s: publication \"%s\" %s table %s; create it with CREATE "
                                "PUBLICATION ... FOR TABLE %s (or ALTER PUBLICATION ... ADD "
                                "TABLE), or leave `publication:` out to let ferry create one",
                           peer, pub, exists ? "does not publish" : "does not exist for",
                           sl->tabs[i].from, sl->tabs[i].from);
}

/* ferry's publication `pub` holds every table that names it: created with all of them, or
 * extended by the missing ones (each checked for a replica identity first). */
static int ensure_publication(PGconn *c, const char *peer, struct ferry_pg_slot *sl,
                              const char *pub, bool *missing, struct ferry_error *err)
{
    bool exists = false;
    int rc = publication_members(c, peer, pub, &exists, missing, sl, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf sql;
    ferry_buf_init(&sql, 0);
    rc = ferry_buf_printf(&sql, exists ? "ALTER PUBLICATION " : "CREATE PUBLICATION ");
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&sql, pub, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, exists ? " ADD TABLE " : " FOR TABLE ");
    int n = 0;
    for (int i = 0; i < sl->n_tabs && rc == FERRY_OK; i++) {
        if (!missing[i]) continue;
        rc = ferry__pg_cdc_check_identity(c, peer, sl->tabs[i].from, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&sql, "%s%s", n++ ? ", " : "", sl->tabs[i].from);
        if (rc == FERRY_OK) rc = ferry__pg_cdc_array_add(&sl->joined, sl->tabs[i].from);
    }
    if (rc == FERRY_ENOMEM) rc = nomem(err);
    char what[200];
    snprintf(what, sizeof what,
             WHAT ": %s: %s publication \"%s\" with %d table(s) (needs ownership of the "
                  "tables, and CREATE on the database)",
             peer, exists ? "extending" : "creating", pub, n);
    if (rc == FERRY_OK && n > 0) rc = ferry__pg_exec(c, sql.data, FERRY_ESOURCE, what, err);
    ferry_buf_release(&sql);
    return rc;
}

static int publications(PGconn *c, const char *peer, struct ferry_pg_slot *sl,
                        struct ferry_error *err)
{
    bool *missing = ferry_calloc((size_t)(sl->n_tabs ? sl->n_tabs : 1), sizeof *missing);
    if (missing == NULL) return nomem(err);
    int rc = FERRY_OK;
    const char *ours = NULL;
    for (int i = 0; i < sl->n_tabs && rc == FERRY_OK; i++) {
        if (sl->tabs[i].pub_given)
            rc = check_given(c, peer, sl, i, missing, err);
        else
            ours = sl->tabs[i].publication;
    }
    if (rc == FERRY_OK && ours != NULL) rc = ensure_publication(c, peer, sl, ours, missing, err);
    /* every publication used publishes every kind of change (each checked once) */
    for (int i = 0; i < sl->n_tabs && rc == FERRY_OK; i++) {
        bool seen = false;
        for (int k = 0; k < i && !seen; k++)
            seen = !strcmp(sl->tabs[k].publication, sl->tabs[i].publication);
        if (!seen) rc = ferry__pg_cdc_check_publish(c, peer, sl->tabs[i].publication, err);
    }
    ferry_free(missing);
    return rc;
}

/* ---- planning ------------------------------------------------------------------------ */

/* Tables that still hold a slot of their own (ferry before one slot per pipeline). */
static int refuse_legacy(PGconn *c, const char *peer, struct ferry_pg_slot *sl,
                         struct ferry_error *err)
{
    for (int i = 0; i < sl->n_tabs; i++) {
        struct ferry_pg_slot_info si;
        int rc = ferry__pg_cdc_slot_info(c, peer, sl->tabs[i].legacy_slot, &si, err);
        if (rc != FERRY_OK) return rc;
        if (si.exists)
            return ferry_error_set(
                err, FERRY_ECONFLICT, "postgres",
                WHAT ": %s: table %s is followed through replication slot \"%s\" of its own "
                     "(made by an earlier ferry); the pipeline's tables now share one slot, "
                     "\"%s\": migrate with `ferry cdc drop PIPELINE_FILE` and run again (each "
                     "table is copied anew), or keep the old slot with `slot: %s` on the "
                     "resource",
                peer, sl->tabs[i].from, sl->tabs[i].legacy_slot, sl->slot, sl->tabs[i].legacy_slot);
    }
    return FERRY_OK;
}

static int resnapshot_required(struct ferry_error *err, const char *peer, const char *slot,
                               const char *from, const char *why)
{
    return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                           WHAT ": %s: table %s: replication slot \"%s\" %s; changes may have "
                                "been lost, so resnapshot required: run `ferry cdc drop` on the "
                                "pipeline file and run it again (a new snapshot is copied), or set "
                                "`on_slot_lost: resnapshot` on the source or the resource",
                           peer, from, slot, why);
}

/* Makes the slot: a lost or foreign one is dropped first. */
static int make_slot(struct ferry_pg_slot *sl, PGconn *c, const char *url,
                     const struct ferry_pg_conn_opts *opts, const char *peer,
                     const struct ferry_pg_slot_info *si, struct ferry_error *err)
{
    if (si->exists) {
        if (si->active)
            return ferry_error_set(err, FERRY_ECONFLICT, "postgres",
                                   WHAT ": %s: replication slot \"%s\" is in use by another "
                                        "connection",
                                   peer, sl->slot);
        int rc = ferry__pg_cdc_drop_names(c, peer, sl->slot, NULL, err);
        if (rc != FERRY_OK) return rc;
    }
    json_t *tmp = json_object();
    if (tmp == NULL) return nomem(err);
    int rc = ferry__pg_cdc_create_slot(url, opts, peer, sl->slot, tmp, &sl->keep, err);
    if (rc == FERRY_OK) rc = ferry__pg_cdc_plan_lsn(tmp, "start", &sl->start, err);
    if (rc == FERRY_OK)
        snprintf(sl->snapshot, sizeof sl->snapshot, "%s",
                 json_string_value(json_object_get(tmp, "snapshot")));
    json_decref(tmp);
    sl->fresh = rc == FERRY_OK;
    sl->confirmed = sl->start;
    return rc;
}

/* Once per run: the publication holds every table, the slot exists. `saved`: the first
 * planned table's position (a loss it cannot accept fails before anything is made). */
static int prepare(struct ferry_pg_slot *sl, PGconn *c, const char *url,
                   const struct ferry_pg_conn_opts *opts, const char *peer, const char *from,
                   uint64_t saved, bool resnapshot, struct ferry_error *err)
{
    struct ferry_pg_slot_info si;
    int rc = ferry__pg_cdc_slot_info(c, peer, sl->slot, &si, err);
    if (rc == FERRY_OK && !si.exists) rc = refuse_legacy(c, peer, sl, err);
    if (rc != FERRY_OK) return rc;
    sl->why[0] = '\0';
    if (!si.exists)
        snprintf(sl->why, sizeof sl->why, "does not exist any more");
    else if (si.lost)
        snprintf(sl->why, sizeof sl->why,
                 "was invalidated by the server (wal_status lost: the WAL it needed was removed)");
    else if (!si.pgoutput || !si.this_db)
        snprintf(sl->why, sizeof sl->why, "is not a pgoutput slot of this database");
    if (sl->why[0] != '\0' && saved != 0 && !resnapshot)
        return resnapshot_required(err, peer, sl->slot, from, sl->why);
    /* The publication first: the slot's decoding must see every table in it. */
    ferry_buf_reset(&sl->joined);
    rc = publications(c, peer, sl, err);
    if (rc != FERRY_OK) return rc;
    if (sl->why[0] != '\0') {
        rc = make_slot(sl, c, url, opts, peer, &si, err);
    } else {
        sl->confirmed = si.confirmed;
        sl->unreserved = si.unreserved;
    }
    /* One end for every table: when the run ends, each table holds every transaction that
     * committed before it and none after (tables that stop early aside: epochs, schema
     * changes). */
    if (rc == FERRY_OK) rc = ferry__pg_cdc_end_position(c, peer, &sl->end, err);
    if (rc == FERRY_OK) sl->prepared = true;
    return rc;
}

/* Waits until the transactions that wrote to the tables this planning added to the
 * publication, open when it did, ended: their earlier changes are never published, so the
 * snapshot must see them (ferry__pg_cdc_writers). Named in the log every 30 s; the pauses
 * sleep on the server, so that a cancel of the run ends the wait. */
static int wait_writers(struct ferry_pg_slot *sl, PGconn *c, const char *peer,
                        struct ferry_error *err)
{
    if (sl->joined.len == 0) return FERRY_OK;
    struct ferry_buf list, pids;
    ferry_buf_init(&list, 0);
    ferry_buf_init(&pids, 0);
    int n = 0, rc = FERRY_OK;
    for (int64_t log_at = 0;;) {
        rc = ferry__pg_cdc_writers(c, peer, sl->joined.data, &list, &n, &pids, err);
        if (rc != FERRY_OK || n == 0) break;
        if (ferry_now_mono_us() >= log_at) {
            ferry_log(FERRY_LOG_INFO,
                      WHAT ": %s: waiting for %d transaction%s that wrote to tables joining "
                           "the publication (pid %s): their snapshot must see them",
                      peer, n, n == 1 ? "" : "s", pids.data);
            log_at = ferry_now_mono_us() + 30000000;
        }
        /* on the server: a cancel of the run (PQcancel on c) ends the wait with an error */
        rc =
            ferry__pg_exec(c, "SELECT pg_catalog.pg_sleep(0.1)", FERRY_ESOURCE,
                           WHAT ": waiting for the writers of tables joining the publication", err);
        if (rc != FERRY_OK) break;
    }
    ferry_buf_release(&list);
    ferry_buf_release(&pids);
    return rc;
}

/* A snapshot for tables that join a slot that serves others already: exported now, after
 * they joined the publication and their earlier writers ended, on a plain connection kept
 * idle in its transaction. */
static int export_snapshot(struct ferry_pg_slot *sl, PGconn *plan_c, const char *url,
                           const struct ferry_pg_conn_opts *opts, const char *peer,
                           struct ferry_error *err)
{
    if (sl->snapshot[0] != '\0') return FERRY_OK;
    int rc = wait_writers(sl, plan_c, peer, err);
    if (rc != FERRY_OK) return rc;
    PGconn *c = NULL;
    rc = ferry__pg_connect(url, opts, WHAT, &c, err);
    if (rc == FERRY_OK)
        rc = ferry__pg_exec(c,
                            "SET idle_in_transaction_session_timeout = 0; BEGIN ISOLATION LEVEL "
                            "REPEATABLE READ READ ONLY",
                            FERRY_ESOURCE, WHAT ": exporting a snapshot", err);
    PGresult *res = NULL;
    if (rc == FERRY_OK)
        rc = ferry__pg_cdc_query(c, "SELECT pg_catalog.pg_export_snapshot()", 0, NULL, &res, peer,
                                 "exporting a snapshot", err);
    if (rc == FERRY_OK) {
        snprintf(sl->snapshot, sizeof sl->snapshot, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
        if (sl->keep) PQfinish(sl->keep);
        sl->keep = c;
        return FERRY_OK;
    }
    PQfinish(c);
    return rc;
}

/* Undoes a slot made by this planning when a later table refuses the run: nothing may rely
 * on it, and the next run must see the loss again. */
static void undo(struct ferry_pg_slot *sl, PGconn *c, const char *peer)
{
    if (!sl->fresh) return;
    if (sl->keep) PQfinish(sl->keep);
    sl->keep = NULL;
    struct ferry_error e;
    (void)ferry__pg_cdc_drop_names(c, peer, sl->slot, NULL, &e);
    sl->fresh = false;
    sl->prepared = false;
}

/* A table with a saved position: why it cannot stream from it ("" when it can). */
static void table_loss(const struct ferry_pg_slot *sl, uint64_t saved, char *why, size_t n)
{
    why[0] = '\0';
    if (sl->fresh) {
        snprintf(why, n, "%s", sl->why[0] ? sl->why : "was made again by this run");
    } else if (sl->confirmed > saved) {
        char sv[32], cf[32];
        ferry_pg_lsn_format(saved, sv, sizeof sv);
        ferry_pg_lsn_format(sl->confirmed, cf, sizeof cf);
        snprintf(why, n,
                 "was recreated or advanced behind ferry's back (its confirmed position %s is "
                 "past ferry's saved position %s for this table)",
                 cf, sv);
    }
}

int ferry__pg_slot_plan(struct ferry_pg_slot *sl, PGconn *c, const char *url,
                        const struct ferry_pg_conn_opts *opts, const char *peer,
                        const struct ferry_resource_spec *spec, const struct ferry_pg_cdc_target *t,
                        const char *route_checkpoint, json_t *plan, bool *copy,
                        struct ferry_error *err)
{
    *copy = false;
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    char pub[64];
    bool pub_given = false;
    if (rc == FERRY_OK) names(sl, spec, &o, pub, &pub_given);
    uint64_t saved = 0;
    int64_t saved_k = 0;
    if (rc == FERRY_OK) rc = ferry__pg_cdc_position(route_checkpoint, &saved, &saved_k, err);
    bool resnapshot = resnapshot_on_loss(sl, &o);
    if (rc == FERRY_OK && !sl->prepared)
        rc = prepare(sl, c, url, opts, peer, t->from, saved, resnapshot, err);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "mode", json_string("cdc"));
    json_object_set_new(plan, "shared", json_true());
    json_object_set_new(plan, "slot", json_string(sl->slot));
    json_object_set_new(plan, "publication", json_string(pub));
    char why[300];
    table_loss(sl, saved, why, sizeof why);
    if (saved != 0 && why[0] != '\0') {
        if (!resnapshot) {
            undo(sl, c, peer);
            return resnapshot_required(err, peer, sl->slot, t->from, why);
        }
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": table %s: replication slot \"%s\" %s; taking a new snapshot "
                       "(on_slot_lost: resnapshot)",
                  t->from, sl->slot, why);
    }
    ferry__pg_cdc_set_lsn(plan, "end", sl->end);
    ferry__pg_cdc_set_lsn(plan, "flush", sl->confirmed);
    /* The tables that share the slot: their streams read one session (pg_demux.c). */
    json_object_set_new(plan, "tables", json_integer(sl->n_tabs));
    if (saved != 0 && why[0] == '\0') {
        ferry__pg_cdc_set_lsn(plan, "start", saved);
        if (saved_k > 0) json_object_set_new(plan, "skip", json_integer(saved_k));
        json_object_set_new(plan, "snapshot", json_null());
        /* a snapshot in chunks that an earlier run did not finish goes on after its key */
        rc = ferry__pg_cdc_plan_chunks(plan, route_checkpoint, err);
        if (rc != FERRY_OK) return rc;
        if (sl->unreserved) {
            json_object_set_new(plan, "wal_status", json_string("unreserved"));
            ferry_log(FERRY_LOG_WARN,
                      WHAT ": table %s: replication slot \"%s\" has wal_status unreserved: it "
                           "is more than max_slot_wal_keep_size behind, and the server may "
                           "invalidate it at its next checkpoint (then a resnapshot is "
                           "required); run more often or raise max_slot_wal_keep_size",
                      t->from, sl->slot);
        }
        return FERRY_OK;
    }
    /* Joining a slot that serves other tables already: read in watermark chunks inside its
     * stream, from the slot's position (needs pgoutput's messages: PostgreSQL 14). */
    /* (failpoint cdc_join_by_copy: tests take an older server's way on a newer one) */
    if (!sl->fresh && PQserverVersion(c) >= 140000 && !ferry_failpoint_armed("cdc_join_by_copy")) {
        json_object_set_new(plan, "snapshot", json_null());
        json_object_set_new(plan, "chunked", json_true());
        ferry__pg_cdc_set_lsn(plan, "start", sl->confirmed);
        return FERRY_OK;
    }
    /* Copied now: from the new slot's snapshot at its start, or (the slot serves other
     * tables already, an older server) from a snapshot taken now, streaming from the slot's
     * position. */
    if (!sl->fresh) rc = export_snapshot(sl, c, url, opts, peer, err);
    if (rc != FERRY_OK) return rc;
    json_object_set_new(plan, "snapshot", json_string(sl->snapshot));
    ferry__pg_cdc_set_lsn(plan, "start", sl->fresh ? sl->start : sl->confirmed);
    *copy = true;
    return FERRY_OK;
}

/* ---- acknowledge and drop ------------------------------------------------------------ */

int ferry__pg_slot_ack(struct ferry_pg_slot *sl, PGconn *c, const char *peer,
                       const struct ferry_resource_spec *spec, const char *plan_json,
                       const char *position, bool *caught_up, struct ferry_error *err)
{
    *caught_up = true;
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    const char *slot = json_string_value(json_object_get(plan, "slot"));
    uint64_t end = 0, lsn = 0;
    int rc = slot != NULL ? ferry__pg_cdc_plan_lsn(plan, "end", &end, err)
                          : ferry_error_set(err, FERRY_EINVAL, "postgres",
                                            WHAT ": the frozen cdc plan names no slot");
    if (rc == FERRY_OK) rc = ferry__pg_cdc_position(position, &lsn, NULL, err);
    char name[64];
    snprintf(name, sizeof name, "%s", slot ? slot : "");
    json_decref(plan);
    if (rc != FERRY_OK || lsn == 0) return rc;
    *caught_up = lsn >= end;
    const char *route = ferry_read_context_of(spec)->route;
    struct ferry_pg_slot_table *t = find_table(sl, route ? route : spec->table);
    if (t == NULL) return FERRY_OK; /* not discovered by this instance: no say */
    if (!t->has_ack || lsn > t->acked) t->acked = lsn;
    t->has_ack = true;
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < sl->n_tabs; i++) {
        if (!sl->tabs[i].has_ack) return FERRY_OK; /* not every table's position is known */
        if (sl->tabs[i].acked < min) min = sl->tabs[i].acked;
    }
    return ferry__pg_cdc_advance(c, peer, name, min, err);
}

int ferry__pg_slot_drop(struct ferry_pg_slot *sl, PGconn *c, const char *peer,
                        const struct ferry_resource_spec *spec, struct ferry_error *err)
{
    struct ferry_pg_cdc_opts o;
    int rc = ferry__pg_cdc_opts(spec, &o, err);
    if (rc != FERRY_OK) return rc;
    char pub[64];
    bool pub_given = false;
    names(sl, spec, &o, pub, &pub_given);
    rc = ferry__pg_cdc_drop_names(c, peer, sl->slot, pub_given ? NULL : pub, err);
    /* What an earlier ferry made for this table alone (o.slot and o.publication are the
     * per-table derived names here). */
    if (rc == FERRY_OK)
        rc = ferry__pg_cdc_drop_names(c, peer, o.slot, o.publication_given ? NULL : o.publication,
                                      err);
    return rc;
}
