/* connectors/postgres/pg_clone.c - the destination schema like the source (pg_clone.h).
 * Calls libpq and pg_common.c; called by runner/clone.c on the run's thread, before the
 * sink's prepare and after the run's commit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/postgres/pg_clone.h"
#include "connectors/postgres/pg_common.h"

#define WHAT "postgres sink (create: like_source)"

struct clone {
    PGconn *src, *dst;
    const char *dschema; /* the sink's schema */
    char *sschema, *stable; /* the table at hand, at the source */
    const char *target;
    char oid[16];          /* its oid at the source */
    bool keyed;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "postgres", WHAT ": out of memory");
}

static PGresult *q(PGconn *c, const char *sql, int n, const char *const *p)
{
    return PQexecParams(c, sql, n, NULL, p, NULL, NULL, 0);
}

static int rows(struct clone *k, PGconn *c, const char *sql, int n, const char *const *p,
                PGresult **out, const char *doing, struct ferry_error *err)
{
    *out = q(c, sql, n, p);
    if (PQresultStatus(*out) == PGRES_TUPLES_OK) return FERRY_OK;
    int rc = ferry__pg_error(err, FERRY_ESINK, c, *out, WHAT ": table %s.%s: %s", k->sschema,
                             k->stable, doing);
    PQclear(*out);
    *out = NULL;
    return rc;
}

static int run_sql(struct clone *k, const char *sql, const char *doing, struct ferry_error *err)
{
    char what[400];
    snprintf(what, sizeof what, WHAT ": table \"%s\".\"%s\": %s", k->dschema, k->target, doing);
    return ferry__pg_exec(k->dst, sql, FERRY_ESINK, what, err);
}

/* SET search_path so that names of schema `s` print (source) or resolve (destination)
 * unqualified. */
static int search_path(PGconn *c, const char *s, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "SET search_path = ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, s, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, ", pg_catalog") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_exec(c, b.data, FERRY_ESINK, WHAT ": search_path", err);
    ferry_buf_release(&b);
    return rc;
}

static bool exists(PGconn *c, const char *sql, int n, const char *const *p)
{
    PGresult *r = q(c, sql, n, p);
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    PQclear(r);
    return yes;
}

/* The destination schema a source type lives in: the table's own schema maps to the sink's. */
static const char *type_schema(const struct clone *k, const char *nsp)
{
    return strcmp(nsp, k->sschema) == 0 ? k->dschema : nsp;
}

/* ---- types --------------------------------------------------------------------------- */

static int create_enum(struct clone *k, const char *toid, struct ferry_buf *b,
                       struct ferry_error *err)
{
    const char *p[1] = {toid};
    PGresult *r = NULL;
    int rc = rows(k, k->src,
                  "SELECT enumlabel FROM pg_catalog.pg_enum WHERE enumtypid = $1::oid "
                  "ORDER BY enumsortorder",
                  1, p, &r, "reading an enum's labels", err);
    if (rc == FERRY_OK && ferry_buf_printf(b, " AS ENUM (") != FERRY_OK) rc = oom(err);
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) {
        char *lit = PQescapeLiteral(k->dst, PQgetvalue(r, i, 0), strlen(PQgetvalue(r, i, 0)));
        if (lit == NULL || ferry_buf_printf(b, "%s%s", i ? ", " : "", lit) != FERRY_OK)
            rc = oom(err);
        PQfreemem(lit);
    }
    if (rc == FERRY_OK && ferry_buf_printf(b, ")") != FERRY_OK) rc = oom(err);
    PQclear(r);
    return rc;
}

static int create_domain(struct clone *k, const char *toid, struct ferry_buf *b,
                         struct ferry_error *err)
{
    const char *p[1] = {toid};
    PGresult *r = NULL;
    int rc = rows(k, k->src,
                  "SELECT pg_catalog.format_type(t.typbasetype, t.typtypmod), t.typnotnull, "
                  "t.typdefault, (SELECT string_agg(pg_catalog.pg_get_constraintdef(c.oid), ' ' "
                  "ORDER BY c.conname) FROM pg_catalog.pg_constraint c WHERE c.contypid = t.oid) "
                  "FROM pg_catalog.pg_type t WHERE t.oid = $1::oid",
                  1, p, &r, "reading a domain", err);
    if (rc == FERRY_OK && PQntuples(r) == 1 &&
        ferry_buf_printf(b, " AS %s%s%s%s%s%s", PQgetvalue(r, 0, 0),
                         PQgetisnull(r, 0, 2) ? "" : " DEFAULT ", PQgetvalue(r, 0, 2),
                         PQgetvalue(r, 0, 1)[0] == 't' ? " NOT NULL" : "",
                         PQgetisnull(r, 0, 3) ? "" : " ", PQgetvalue(r, 0, 3)) != FERRY_OK)
        rc = oom(err);
    PQclear(r);
    return rc;
}

/* A column's enum or domain type, created in the destination unless it exists there. */
static int ensure_type(struct clone *k, const char *toid, char kind, const char *nsp,
                       const char *name, struct ferry_error *err)
{
    const char *dn = type_schema(k, nsp);
    const char *p[2] = {dn, name};
    if (exists(k->dst,
               "SELECT 1 FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = "
               "t.typnamespace WHERE n.nspname = $1 AND t.typname = $2",
               2, p))
        return FERRY_OK;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "CREATE SCHEMA IF NOT EXISTS ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, dn, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, "; CREATE %s ", kind == 'e' ? "TYPE" : "DOMAIN"))
        rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, dn, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, ".") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, name, err);
    if (rc == FERRY_OK)
        rc = kind == 'e' ? create_enum(k, toid, &b, err) : create_domain(k, toid, &b, err);
    char doing[200];
    snprintf(doing, sizeof doing, "creating type %s.%s", dn, name);
    if (rc == FERRY_OK) rc = run_sql(k, b.data, doing, err);
    ferry_buf_release(&b);
    return rc;
}

/* ---- the table ----------------------------------------------------------------------- */

/* Columns: name, type, not null, default, identity, generated, typtype, type schema, type
 * name, type oid, owned sequence (serial or identity). */
static const char *const columns_sql =
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, t.typtype, "
    "tn.nspname, t.typname, a.atttypid::text, (SELECT s.relname FROM pg_catalog.pg_depend dep "
    "JOIN pg_catalog.pg_class s ON s.oid = dep.objid WHERE dep.refobjid = a.attrelid AND "
    "dep.refobjsubid = a.attnum AND s.relkind = 'S' AND dep.deptype IN ('a', 'i') LIMIT 1) "
    "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace "
    "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
    "WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";

/* "dest"."name" into b. */
static int dest_name(struct clone *k, struct ferry_buf *b, const char *name,
                     struct ferry_error *err)
{
    int rc = ferry__pg_quote_ident(b, k->dschema, err);
    if (rc == FERRY_OK && ferry_buf_printf(b, ".") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, name, err);
    return rc;
}

/* The source sequence's type and options, appended to its CREATE SEQUENCE. */
static int sequence_options(struct clone *k, const char *seq, struct ferry_buf *b,
                            struct ferry_error *err)
{
    const char *p[2] = {k->sschema, seq};
    PGresult *r = NULL;
    int rc = rows(k, k->src,
                  "SELECT pg_catalog.format_type(q.seqtypid, NULL), q.seqincrement, q.seqmin, "
                  "q.seqmax, q.seqstart, q.seqcache, q.seqcycle FROM pg_catalog.pg_sequence q "
                  "JOIN pg_catalog.pg_class c ON c.oid = q.seqrelid JOIN pg_catalog.pg_namespace "
                  "n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
                  2, p, &r, "reading a sequence", err);
    if (rc == FERRY_OK && PQntuples(r) == 1 &&
        ferry_buf_printf(b,
                         " AS %s INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s"
                         "%s",
                         PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2),
                         PQgetvalue(r, 0, 3), PQgetvalue(r, 0, 4), PQgetvalue(r, 0, 5),
                         PQgetvalue(r, 0, 6)[0] == 't' ? " CYCLE" : " NO CYCLE") != FERRY_OK)
        rc = oom(err);
    PQclear(r);
    return rc;
}

/* One column's definition; a serial's sequence is created first and its default points to
 * it in the sink's schema. */
static int column_def(struct clone *k, PGresult *r, int i, struct ferry_buf *b,
                      struct ferry_error *err)
{
    const char *ident = PQgetvalue(r, i, 4), *gen = PQgetvalue(r, i, 5);
    if (gen[0] != '\0')
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "postgres",
                               WHAT ": table %s.%s: column \"%s\" is a generated column; "
                                    "create: like_source does not copy generated columns",
                               k->sschema, k->stable, PQgetvalue(r, i, 0));
    char tk = PQgetvalue(r, i, 6)[0];
    int rc = FERRY_OK;
    if (tk == 'e' || tk == 'd')
        rc = ensure_type(k, PQgetvalue(r, i, 9), tk, PQgetvalue(r, i, 7), PQgetvalue(r, i, 8), err);
    if (rc == FERRY_OK && i && ferry_buf_printf(b, ", ") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = ferry__pg_quote_ident(b, PQgetvalue(r, i, 0), err);
    if (rc == FERRY_OK && ferry_buf_printf(b, " %s", PQgetvalue(r, i, 1)) != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK && PQgetvalue(r, i, 2)[0] == 't' && ferry_buf_printf(b, " NOT NULL"))
        rc = oom(err);
    if (rc != FERRY_OK) return rc;
    if (ident[0] != '\0') /* ALWAYS is restored after the data (the load writes the values) */
        return ferry_buf_printf(b, " GENERATED BY DEFAULT AS IDENTITY") == FERRY_OK ? FERRY_OK
                                                                                    : oom(err);
    if (PQgetisnull(r, i, 3)) return FERRY_OK;
    if (PQgetisnull(r, i, 10)) /* an ordinary default, printed for the table's schema */
        return ferry_buf_printf(b, " DEFAULT %s", PQgetvalue(r, i, 3)) == FERRY_OK ? FERRY_OK
                                                                                  : oom(err);
    struct ferry_buf seq;
    ferry_buf_init(&seq, 0);
    rc = ferry_buf_printf(&seq, "CREATE SEQUENCE IF NOT EXISTS ") == FERRY_OK ? FERRY_OK : oom(err);
    size_t at = seq.len;
    if (rc == FERRY_OK) rc = dest_name(k, &seq, PQgetvalue(r, i, 10), err);
    char *lit = rc == FERRY_OK ? PQescapeLiteral(k->dst, seq.data + at, seq.len - at) : NULL;
    if (rc == FERRY_OK && (lit == NULL || ferry_buf_printf(b, " DEFAULT pg_catalog.nextval(%s::"
                                                              "pg_catalog.regclass)", lit)))
        rc = oom(err);
    PQfreemem(lit);
    if (rc == FERRY_OK) rc = sequence_options(k, PQgetvalue(r, i, 10), &seq, err);
    if (rc == FERRY_OK) rc = run_sql(k, seq.data, "creating a sequence", err);
    ferry_buf_release(&seq);
    return rc;
}

/* The serial sequences created above belong to their columns, as at the source. */
static int own_sequences(struct clone *k, PGresult *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, 10) || PQgetvalue(r, i, 4)[0] != '\0') continue;
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "ALTER SEQUENCE ") == FERRY_OK ? FERRY_OK : oom(err);
        if (rc == FERRY_OK) rc = dest_name(k, &b, PQgetvalue(r, i, 10), err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, " OWNED BY ") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = dest_name(k, &b, k->target, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, ".") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, PQgetvalue(r, i, 0), err);
        if (rc == FERRY_OK) rc = run_sql(k, b.data, "owning a sequence", err);
        ferry_buf_release(&b);
    }
    return rc;
}

static int constraints(struct clone *k, const char *kinds, struct ferry_error *err);

static int create_table(struct clone *k, struct ferry_error *err)
{
    const char *p[1] = {k->oid};
    PGresult *r = NULL;
    int rc = rows(k, k->src, columns_sql, 1, p, &r, "reading its columns", err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    rc = ferry_buf_printf(&b, "CREATE TABLE ") == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = dest_name(k, &b, k->target, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, " (") != FERRY_OK) rc = oom(err);
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) rc = column_def(k, r, i, &b, err);
    if (rc == FERRY_OK && ferry_buf_printf(&b, ")") != FERRY_OK) rc = oom(err);
    if (rc == FERRY_OK) rc = run_sql(k, b.data, "creating it like the source", err);
    if (rc == FERRY_OK) rc = own_sequences(k, r, err);
    /* upsert and merge match rows by the primary key: it exists before the data */
    if (rc == FERRY_OK && k->keyed) rc = constraints(k, "p", err);
    ferry_buf_release(&b);
    PQclear(r);
    return rc;
}

/* ---- after the data ------------------------------------------------------------------ */

/* The source's constraints of the given kinds (contype letters), added unless the
 * destination table has one of that name. */
static int constraints(struct clone *k, const char *kinds, struct ferry_error *err)
{
    const char *p[2] = {k->oid, kinds};
    PGresult *r = NULL;
    int rc = rows(k, k->src,
                  "SELECT conname, pg_catalog.pg_get_constraintdef(oid) FROM "
                  "pg_catalog.pg_constraint WHERE conrelid = $1::oid AND "
                  "strpos($2, contype::text) > 0 ORDER BY strpos($2, contype::text), conname",
                  2, p, &r, "reading its constraints", err);
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        rc = dest_name(k, &b, k->target, err);
        const char *e[2] = {b.data, PQgetvalue(r, i, 0)};
        bool have = rc == FERRY_OK && exists(k->dst,
                                             "SELECT 1 FROM pg_catalog.pg_constraint WHERE "
                                             "conrelid = $1::regclass AND conname = $2",
                                             2, e);
        struct ferry_buf s;
        ferry_buf_init(&s, 0);
        if (rc == FERRY_OK && !have) {
            rc = ferry_buf_printf(&s, "ALTER TABLE %s ADD CONSTRAINT ", b.data) == FERRY_OK
                     ? FERRY_OK
                     : oom(err);
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&s, PQgetvalue(r, i, 0), err);
            if (rc == FERRY_OK && ferry_buf_printf(&s, " %s", PQgetvalue(r, i, 1)) != FERRY_OK)
                rc = oom(err);
            char doing[200];
            snprintf(doing, sizeof doing, "adding constraint %s", PQgetvalue(r, i, 0));
            if (rc == FERRY_OK) rc = run_sql(k, s.data, doing, err);
        }
        ferry_buf_release(&s);
        ferry_buf_release(&b);
    }
    PQclear(r);
    return rc;
}

/* Indexes that back no constraint, each `CREATE ... INDEX IF NOT EXISTS`. */
static int indexes(struct clone *k, struct ferry_error *err)
{
    const char *p[1] = {k->oid};
    PGresult *r = NULL;
    int rc = rows(k, k->src,
                  "SELECT pg_catalog.pg_get_indexdef(i.indexrelid) FROM pg_catalog.pg_index i "
                  "WHERE i.indrelid = $1::oid AND NOT EXISTS (SELECT 1 FROM "
                  "pg_catalog.pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = "
                  "i.indrelid) ORDER BY i.indexrelid",
                  1, p, &r, "reading its indexes", err);
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) {
        const char *def = PQgetvalue(r, i, 0);
        bool unique = strncmp(def, "CREATE UNIQUE INDEX ", 20) == 0;
        const char *rest = def + (unique ? 20 : 13);
        if (!unique && strncmp(def, "CREATE INDEX ", 13) != 0) continue;
        char *sql = ferry_asprintf("CREATE %sINDEX IF NOT EXISTS %s", unique ? "UNIQUE " : "", rest);
        rc = sql ? run_sql(k, sql, "creating an index", err) : oom(err);
        ferry_free(sql);
    }
    PQclear(r);
    return rc;
}

/* Identity columns made ALWAYS again, every owned sequence at the source's value. */
static int sequences(struct clone *k, struct ferry_error *err)
{
    const char *p[1] = {k->oid};
    PGresult *r = NULL;
    int rc = rows(k, k->src, columns_sql, 1, p, &r, "reading its columns", err);
    for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, 10)) continue;
        struct ferry_buf b, t;
        ferry_buf_init(&b, 0);
        ferry_buf_init(&t, 0);
        rc = dest_name(k, &t, k->target, err);
        if (rc == FERRY_OK && PQgetvalue(r, i, 4)[0] == 'a') {
            rc = ferry_buf_printf(&b, "ALTER TABLE %s ALTER COLUMN ", t.data) == FERRY_OK
                     ? FERRY_OK : oom(err);
            if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, PQgetvalue(r, i, 0), err);
            if (rc == FERRY_OK && ferry_buf_printf(&b, " SET GENERATED ALWAYS") != FERRY_OK)
                rc = oom(err);
            if (rc == FERRY_OK) rc = run_sql(k, b.data, "identity GENERATED ALWAYS", err);
        }
        ferry_buf_reset(&b);
        /* the source sequence's state, read where it is (a table's schema) */
        if (rc == FERRY_OK && ferry_buf_printf(&b, "SELECT last_value, is_called FROM ") != FERRY_OK)
            rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, k->sschema, err);
        if (rc == FERRY_OK && ferry_buf_printf(&b, ".") != FERRY_OK) rc = oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, PQgetvalue(r, i, 10), err);
        PGresult *v = NULL;
        if (rc == FERRY_OK) rc = rows(k, k->src, b.data, 0, NULL, &v, "reading a sequence", err);
        if (rc == FERRY_OK) {
            const char *sp[4] = {t.data, PQgetvalue(r, i, 0), PQgetvalue(v, 0, 0),
                                 PQgetvalue(v, 0, 1)};
            PGresult *s = q(k->dst,
                            "SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence($1, $2), "
                            "$3::bigint, $4::boolean)",
                            4, sp);
            if (PQresultStatus(s) != PGRES_TUPLES_OK)
                rc = ferry__pg_error(err, FERRY_ESINK, k->dst, s,
                                     WHAT ": table %s: setting the sequence of column \"%s\"",
                                     t.data, PQgetvalue(r, i, 0));
            PQclear(s);
        }
        PQclear(v);
        ferry_buf_release(&b);
        ferry_buf_release(&t);
    }
    PQclear(r);
    return rc;
}

/* ---- phases -------------------------------------------------------------------------- */

/* k->sschema, k->stable, k->oid of a resource's source table; both search paths set. */
static int locate(struct clone *k, const struct ferry_pg_clone_table *t, struct ferry_error *err)
{
    ferry_free(k->sschema);
    ferry_free(k->stable);
    k->sschema = k->stable = NULL;
    int rc = ferry__pg_split_name(t->source, &k->sschema, &k->stable, err);
    if (rc != FERRY_OK) return rc;
    k->target = t->target;
    const char *p[2] = {k->sschema, k->stable};
    PGresult *r = NULL;
    rc = rows(k, k->src,
              "SELECT c.oid::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON "
              "n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
              2, p, &r, "finding it", err);
    if (rc == FERRY_OK && PQntuples(r) != 1)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "postgres", WHAT ": no table %s.%s at the source",
                             k->sschema, k->stable);
    if (rc == FERRY_OK) snprintf(k->oid, sizeof k->oid, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (rc == FERRY_OK) rc = search_path(k->src, k->sschema, err);
    if (rc == FERRY_OK) rc = search_path(k->dst, k->dschema, err);
    return rc;
}

static int before(struct clone *k, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = dest_name(k, &b, k->target, err);
    const char *p[1] = {b.data};
    bool have = rc == FERRY_OK &&
                exists(k->dst, "SELECT 1 WHERE pg_catalog.to_regclass($1) IS NOT NULL", 1, p);
    ferry_buf_release(&b);
    if (rc != FERRY_OK || have) return rc; /* made by an earlier run: kept as it is */
    rc = run_sql(k, "BEGIN", "begin", err);
    if (rc == FERRY_OK) rc = create_table(k, err);
    if (rc == FERRY_OK) return run_sql(k, "COMMIT", "commit", err);
    PQclear(PQexec(k->dst, "ROLLBACK"));
    return rc;
}

static int connect_both(struct clone *k, struct ferry_cfg *source, struct ferry_cfg *sink,
                        struct ferry_error *err)
{
    char *surl = NULL, *durl = NULL;
    struct ferry_pg_conn_opts so, dso;
    int rc = ferry__pg_read_conn_config(source, "postgres source", &surl, &so, err);
    if (rc == FERRY_OK) rc = ferry__pg_read_conn_config(sink, "postgres sink", &durl, &dso, err);
    if (rc == FERRY_OK) rc = ferry__pg_connect(surl, &so, "postgres source", &k->src, err);
    if (rc == FERRY_OK) rc = ferry__pg_connect(durl, &dso, "postgres sink", &k->dst, err);
    ferry_secret_free(surl);
    ferry_secret_free(durl);
    return rc;
}

int ferry_pg_clone(struct ferry_cfg *source, struct ferry_cfg *sink,
                   const struct ferry_pg_clone_table *tables, int n,
                   enum ferry_pg_clone_phase phase, bool keyed, bool foreign_keys,
                   struct ferry_error *err)
{
    struct clone k = {.keyed = keyed, .dschema = "public"};
    int rc = ferry_cfg_str(sink, "schema", false, &k.dschema, err);
    if (rc == FERRY_OK) rc = connect_both(&k, source, sink, err);
    if (rc == FERRY_OK && phase == FERRY_PG_CLONE_BEFORE) {
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "CREATE SCHEMA IF NOT EXISTS ") == FERRY_OK ? FERRY_OK : oom(err);
        if (rc == FERRY_OK) rc = ferry__pg_quote_ident(&b, k.dschema, err);
        if (rc == FERRY_OK) rc = ferry__pg_exec(k.dst, b.data, FERRY_ESINK, WHAT ": schema", err);
        ferry_buf_release(&b);
    }
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        rc = locate(&k, &tables[i], err);
        if (rc != FERRY_OK) break;
        if (phase == FERRY_PG_CLONE_BEFORE) {
            rc = before(&k, err);
        } else {
            rc = constraints(&k, "pucx", err);
            if (rc == FERRY_OK) rc = indexes(&k, err);
            if (rc == FERRY_OK) rc = sequences(&k, err);
        }
    }
    /* foreign keys last: the keys they reference exist by now */
    for (int i = 0; rc == FERRY_OK && phase == FERRY_PG_CLONE_AFTER && foreign_keys && i < n; i++) {
        rc = locate(&k, &tables[i], err);
        if (rc == FERRY_OK) rc = constraints(&k, "f", err);
    }
    ferry_free(k.sschema);
    ferry_free(k.stable);
    if (k.src) PQfinish(k.src);
    if (k.dst) PQfinish(k.dst);
    return rc;
}
