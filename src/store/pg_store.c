/* store/pg_store.c - the PostgreSQL driver of the state store (store/sdb.h), over libpq.
 *
 * Owns the store URL handling (postgres:// or postgresql://, the `schema` query option,
 * default "ferry", which is created when missing; the label errors and ferry_store_path
 * show is the URL without its password), a small process-wide pool of idle connections,
 * server-side prepared statements with typed parameters, and the mapping of SQLSTATEs to
 * ferry codes. Calls libpq and core. Called through the driver vtable by
 * store/store_sql.c.
 *
 * Each store handle holds one connection, used by one thread at a time. Closing a handle
 * hands its connection back to the pool (rolled back, then DISCARD ALL, which also drops
 * its prepared statements and session settings); opening one takes an idle connection of
 * the same URL before dialling a new one, and pins its session again: search_path = the
 * schema, then pg_catalog; lock_timeout 10 s (as SQLite's busy timeout). A forked child
 * never uses its parent's pooled connections (the socket would be shared).
 *
 * Durability is the server's, but never weaker than synchronous_commit = on: a session
 * finding it off raises it (setup_session); set_sync_full is a no-op. The store's
 * clock is the server's clock_timestamp(), so workers on hosts with skewed clocks agree on
 * lease deadlines. */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ferry/core.h"
#include "store/sdb.h"

#define POOL_MAX 4
#define INT8_OID 20
#define TEXT_OID 25
/* Advisory lock keys (first half; the second is a hash of the schema's name). */
#define MIGRATION_LOCK_KEY 1718773111

struct pg_db {
    struct sdb base;
    PGconn *c;
    char *key;      /* the connection string: the pool's key (holds the password) */
    char *password; /* to redact from libpq messages; NULL when none */
    char *schema;
    bool tx; /* we opened a transaction block (BEGIN) not yet ended */
    int64_t changes;
    char sqlstate[6]; /* of the last failure */
    unsigned n_stmts; /* names the prepared statements */
};

struct pg_stmt {
    struct pg_db *db;
    char name[24];
    char *sql;
    int n;
    bool prepared;
    Oid *types;
    const char **vals;
    char (*ibuf)[24];
    PGresult *res;
    int row, nrows;
};

static struct pg_db *DB(struct sdb *db)
{
    return (struct pg_db *)(void *)db;
}

static struct pg_stmt *ST(struct sdb_stmt *s)
{
    return (struct pg_stmt *)(void *)s;
}

bool ferry__sdb_is_pg_url(const char *url)
{
    return strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0;
}

/* ---- the pool ---- */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *key;
    PGconn *c;
} pool[POOL_MAX];
static int pool_n;
static pid_t pool_pid;

/* Forgets connections inherited through fork(): finishing them would send a Terminate
 * message on the parent's socket. Call with pool_lock held. */
static void pool_check_pid(void)
{
    pid_t me = getpid();
    if (pool_pid == me) return;
    for (int i = 0; i < pool_n; i++) {
        ferry_free(pool[i].key);
        pool[i].key = NULL;
        pool[i].c = NULL;
    }
    pool_n = 0;
    pool_pid = me;
}

static PGconn *pool_take(const char *key)
{
    PGconn *c = NULL;
    pthread_mutex_lock(&pool_lock);
    pool_check_pid();
    for (int i = pool_n - 1; i >= 0; i--) {
        if (strcmp(pool[i].key, key) != 0) continue;
        c = pool[i].c;
        ferry_free(pool[i].key);
        pool[i] = pool[--pool_n];
        pool[pool_n].key = NULL;
        pool[pool_n].c = NULL;
        break;
    }
    pthread_mutex_unlock(&pool_lock);
    return c;
}

static bool exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType t = PQresultStatus(r);
    PQclear(r);
    return t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK;
}

/* Resets the session and keeps the connection for the next open, or finishes it. */
static void pool_give(const char *key, PGconn *c)
{
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok && PQtransactionStatus(c) != PQTRANS_IDLE) ok = exec_ok(c, "ROLLBACK");
    if (ok) ok = exec_ok(c, "DISCARD ALL");
    char *k = ok ? ferry_strdup(key) : NULL;
    if (k != NULL) {
        pthread_mutex_lock(&pool_lock);
        pool_check_pid();
        if (pool_n < POOL_MAX) {
            pool[pool_n].key = k;
            pool[pool_n].c = c;
            pool_n++;
            k = NULL;
            c = NULL;
        }
        pthread_mutex_unlock(&pool_lock);
    }
    ferry_free(k);
    if (c != NULL) PQfinish(c);
}

/* ---- errors ---- */

/* The first line of a libpq message, with the password (if any) masked. */
static void clean_message(const char *msg, const char *password, char *out, size_t len)
{
    snprintf(out, len, "%s", msg ? msg : "");
    char *nl = strchr(out, '\n');
    if (nl) *nl = '\0';
    size_t pl = password ? strlen(password) : 0;
    for (char *p = pl ? strstr(out, password) : NULL; p; p = strstr(p, password))
        memset(p, '*', pl);
}

static int code_for_sqlstate(const char *s, bool connection_lost)
{
    if (connection_lost || strncmp(s, "08", 2) == 0) return FERRY_EIO;
    if (strncmp(s, "23", 2) == 0) return FERRY_ECONFLICT;
    if (strcmp(s, "53100") == 0) return FERRY_ENOSPC;
    if (strcmp(s, "53200") == 0) return FERRY_ENOMEM;
    if (strncmp(s, "40", 2) == 0 || strcmp(s, "55P03") == 0 || strcmp(s, "57014") == 0)
        return FERRY_ETIMEOUT;
    return FERRY_ESTORE;
}

/* rc, with err marked transient (ferry_error_is_transient): the same work may succeed. */
static int transient(int rc, struct ferry_error *err)
{
    ferry_error_set_transient(err);
    return rc;
}

/* A store that is restarting, refusing or unreachable may be back soon: the caller (a run's
 * retries, a control loop's next tick) may try again. Credentials and names are permanent. */
static bool connect_failure_transient(const char *msg)
{
    static const char *const permanent[] = {"password", "authentication", "does not exist",
                                            "permission denied", "no pg_hba.conf", NULL};
    for (int i = 0; permanent[i]; i++)
        if (strstr(msg, permanent[i])) return false;
    return true;
}

/* "state LABEL: what: message" for a failed statement (r may be NULL). */
static int pgfail(struct pg_db *d, const PGresult *r, const char *what, struct ferry_error *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(d->sqlstate, sizeof d->sqlstate, "%s", state ? state : "");
    const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    char msg[600];
    clean_message(primary ? primary : PQerrorMessage(d->c), d->password, msg, sizeof msg);
    bool lost = PQstatus(d->c) != CONNECTION_OK;
    int code = code_for_sqlstate(d->sqlstate, lost);
    /* a server restarting (admin shutdown, crash, cannot connect now) is a transient loss */
    if (lost || !strncmp(d->sqlstate, "08", 2) || !strncmp(d->sqlstate, "57P0", 4)) {
        return transient(ferry__sdb_fail(&d->base, code, "libpq", err,
                                         "%s: lost the connection to the server (%s)", what, msg),
                         err);
    }
    if (code == FERRY_ETIMEOUT && strcmp(d->sqlstate, "55P03") == 0)
        return ferry__sdb_fail(&d->base, code, "libpq", err,
                               "%s: a row or lock stayed held by another session for more than"
                               " 10 s (%s)",
                               what, msg);
    return ferry__sdb_fail(&d->base, code, "libpq", err, "%s: %s", what, msg);
}

static int setup_session(struct pg_db *d, const char *schema, struct ferry_error *err);

/* A connection the server dropped (restart, failover, idle kill) is dialled again before
 * the next statement, its session set up again and its statements prepared again; inside a
 * transaction block it is not (the server already rolled that transaction back): the
 * statements of the block fail until the caller rolls back. The statement that met the
 * loss fails too and is not retried: whether it committed is unknown. */
static int ensure_connected(struct pg_db *d, const char *what, struct ferry_error *err)
{
    if (PQstatus(d->c) == CONNECTION_OK) return FERRY_OK;
    if (d->tx)
        return transient(ferry__sdb_fail(&d->base, FERRY_EIO, "libpq", err,
                                         "%s: lost the connection to the server inside a "
                                         "transaction; the server rolled it back",
                                         what),
                         err);
    PQreset(d->c);
    if (PQstatus(d->c) != CONNECTION_OK) {
        char msg[600];
        clean_message(PQerrorMessage(d->c), d->password, msg, sizeof msg);
        ferry__sdb_fail(&d->base, FERRY_EIO, "libpq", err,
                        "%s: lost the connection to the server and cannot connect again (%s)",
                        what, msg);
        return connect_failure_transient(msg) ? transient(FERRY_EIO, err) : FERRY_EIO;
    }
    for (size_t i = 0; i < SDB_CACHE_SLOTS; i++)
        if (d->base.cache[i].stmt)
            ((struct pg_stmt *)(void *)d->base.cache[i].stmt)->prepared = false;
    return setup_session(d, d->schema, err);
}

/* ---- statements ---- */

static int pg_prepare(struct sdb *db, const char *sql, int n_params, struct sdb_stmt **out,
                      struct ferry_error *err)
{
    struct pg_db *d = DB(db);
    size_t n = (size_t)(n_params > 0 ? n_params : 1);
    struct pg_stmt *s = ferry_calloc(1, sizeof *s);
    if (s != NULL) {
        s->sql = ferry_strdup(sql);
        s->types = ferry_calloc(n, sizeof *s->types);
        s->vals = ferry_calloc(n, sizeof *s->vals);
        s->ibuf = ferry_calloc(n, sizeof *s->ibuf);
    }
    if (s == NULL || s->sql == NULL || s->types == NULL || s->vals == NULL || s->ibuf == NULL) {
        if (s) {
            ferry_free(s->sql);
            ferry_free(s->types);
            ferry_free(s->vals);
            ferry_free(s->ibuf);
            ferry_free(s);
        }
        return ferry__sdb_fail(db, FERRY_ENOMEM, "store", err,
                               "preparing a statement: out of memory");
    }
    s->db = d;
    s->n = n_params;
    s->row = -1;
    snprintf(s->name, sizeof s->name, "ferry_s%u", ++d->n_stmts);
    *out = (struct sdb_stmt *)(void *)s;
    return FERRY_OK;
}

static void pg_bind_int64(struct sdb_stmt *ss, int i, int64_t v)
{
    struct pg_stmt *s = ST(ss);
    if (i < 1 || i > s->n) return;
    snprintf(s->ibuf[i - 1], sizeof s->ibuf[i - 1], "%lld", (long long)v);
    s->vals[i - 1] = s->ibuf[i - 1];
    if (!s->prepared) s->types[i - 1] = INT8_OID;
}

static void pg_bind_text(struct sdb_stmt *ss, int i, const char *v)
{
    struct pg_stmt *s = ST(ss);
    if (i < 1 || i > s->n) return;
    s->vals[i - 1] = v;
    if (!s->prepared) s->types[i - 1] = TEXT_OID;
}

/* Prepared at the first execution, when the bindings tell the parameters' types. */
static int pg_step(struct sdb_stmt *ss, bool *row, const char *what, struct ferry_error *err)
{
    struct pg_stmt *s = ST(ss);
    struct pg_db *d = s->db;
    *row = false;
    if (s->res == NULL) {
        int crc = ensure_connected(d, what, err);
        if (crc != FERRY_OK) return crc;
        if (!s->prepared) {
            PGresult *r = PQprepare(d->c, s->name, s->sql, s->n, s->types);
            int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? FERRY_OK : pgfail(d, r, what, err);
            PQclear(r);
            if (rc != FERRY_OK) return rc;
            s->prepared = true;
        }
        PGresult *r = PQexecPrepared(d->c, s->name, s->n, s->vals, NULL, NULL, 0);
        ExecStatusType t = PQresultStatus(r);
        if (t != PGRES_TUPLES_OK && t != PGRES_COMMAND_OK) {
            int rc = pgfail(d, r, what, err);
            PQclear(r);
            return rc;
        }
        const char *tuples = PQcmdTuples(r);
        d->changes = tuples && tuples[0] ? atoll(tuples) : 0;
        s->res = r;
        s->nrows = PQntuples(r);
        s->row = -1;
    }
    if (s->row < s->nrows) s->row++;
    *row = s->row < s->nrows;
    return FERRY_OK;
}

static bool have(struct pg_stmt *s, int i)
{
    return s->res != NULL && s->row >= 0 && s->row < s->nrows && i >= 0 && i < PQnfields(s->res);
}

static int64_t pg_col_int64(struct sdb_stmt *ss, int i)
{
    struct pg_stmt *s = ST(ss);
    if (!have(s, i) || PQgetisnull(s->res, s->row, i)) return 0;
    const char *v = PQgetvalue(s->res, s->row, i);
    if (strcmp(v, "t") == 0) return 1; /* a boolean column */
    return strtoll(v, NULL, 10);
}

static const char *pg_col_text(struct sdb_stmt *ss, int i)
{
    struct pg_stmt *s = ST(ss);
    return have(s, i) ? PQgetvalue(s->res, s->row, i) : "";
}

static bool pg_col_null(struct sdb_stmt *ss, int i)
{
    struct pg_stmt *s = ST(ss);
    return !have(s, i) || PQgetisnull(s->res, s->row, i);
}

static void pg_reset(struct sdb_stmt *ss)
{
    struct pg_stmt *s = ST(ss);
    PQclear(s->res);
    s->res = NULL;
    s->row = -1;
    s->nrows = 0;
    for (int i = 0; i < s->n; i++)
        s->vals[i] = NULL;
}

/* The prepared statement itself goes with the session (DISCARD ALL or disconnect). */
static void pg_finalize(struct sdb_stmt *ss)
{
    if (ss == NULL) return;
    struct pg_stmt *s = ST(ss);
    PQclear(s->res);
    ferry_free(s->sql);
    ferry_free(s->types);
    ferry_free(s->vals);
    ferry_free(s->ibuf);
    ferry_free(s);
}

static int64_t pg_changes(struct sdb *db)
{
    return DB(db)->changes;
}

static enum sdb_violation pg_violation(struct sdb *db)
{
    if (strcmp(DB(db)->sqlstate, "23503") == 0) return SDB_VIOLATION_FOREIGN_KEY;
    if (strcmp(DB(db)->sqlstate, "23505") == 0) return SDB_VIOLATION_UNIQUE;
    return SDB_VIOLATION_NONE;
}

static int pg_exec(struct sdb *db, const char *sql, const char *what, struct ferry_error *err)
{
    struct pg_db *d = DB(db);
    bool ends = strcmp(sql, "COMMIT") == 0 || strcmp(sql, "ROLLBACK") == 0;
    if (ends && strcmp(sql, "ROLLBACK") == 0 && PQstatus(d->c) != CONNECTION_OK) {
        d->tx = false; /* the server ended it with the connection */
        return FERRY_OK;
    }
    int rc = ensure_connected(d, what, err);
    if (rc != FERRY_OK) return rc;
    PGresult *r = PQexec(d->c, sql);
    ExecStatusType t = PQresultStatus(r);
    rc = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? FERRY_OK : pgfail(d, r, what, err);
    PQclear(r);
    if (ends)
        d->tx = false;
    else if (rc == FERRY_OK && strcmp(sql, "BEGIN") == 0)
        d->tx = true;
    return rc;
}

static int pg_begin(struct sdb *db, struct ferry_error *err)
{
    return pg_exec(db, "BEGIN", "starting a transaction", err);
}

static bool pg_in_tx(struct sdb *db)
{
    struct pg_db *d = DB(db);
    if (PQstatus(d->c) != CONNECTION_OK) return d->tx;
    return PQtransactionStatus(d->c) != PQTRANS_IDLE;
}

/* A statement that failed inside a transaction aborts it; COMMIT would then answer
 * ROLLBACK without an error. Say so instead of reporting a commit that did not happen. */
static int pg_commit(struct sdb *db, struct ferry_error *err)
{
    if (PQstatus(DB(db)->c) == CONNECTION_OK && PQtransactionStatus(DB(db)->c) == PQTRANS_INERROR) {
        pg_exec(db, "ROLLBACK", "rolling back", NULL);
        return ferry__sdb_fail(db, FERRY_ESTORE, "libpq", err,
                               "committing: a statement of this transaction failed earlier, so"
                               " PostgreSQL aborted it; nothing was committed");
    }
    int rc = pg_exec(db, "COMMIT", "committing", err);
    if (rc != FERRY_OK && pg_in_tx(db)) pg_exec(db, "ROLLBACK", "rolling back", NULL);
    return rc;
}

/* One bigint from a query without parameters. */
static int query_i64(struct pg_db *d, const char *sql, int64_t *out, const char *what,
                     struct ferry_error *err)
{
    int crc = ensure_connected(d, what, err);
    if (crc != FERRY_OK) return crc;
    PGresult *r = PQexec(d->c, sql);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQnfields(r) >= 1
                 ? FERRY_OK
                 : pgfail(d, r, what, err);
    if (rc == FERRY_OK) *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return rc;
}

static int pg_now_us(struct sdb *db, int64_t *out, struct ferry_error *err)
{
    return query_i64(DB(db), "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                     out, "reading the server's clock", err);
}

/* Durability is the server's: a commit is as durable as synchronous_commit makes it (never
 * off for a store session, see setup_session). */
static int pg_set_sync_full(struct sdb *db, bool full, struct ferry_error *err)
{
    (void)db;
    (void)full;
    (void)err;
    return FERRY_OK;
}

/* Two processes opening a fresh schema at once: the second waits here, then finds the
 * migrations applied. Keyed by schema, so other schemas of the database do not wait. */
static int pg_migrate_lock(struct sdb *db, bool lock, struct ferry_error *err)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT %s(%d, hashtext(current_schema()))",
             lock ? "pg_advisory_lock" : "pg_advisory_unlock", MIGRATION_LOCK_KEY);
    return pg_exec(db, sql,
                   lock ? "waiting for the migration lock" : "releasing the migration lock", err);
}

static int pg_tables(struct sdb *db, bool *has_migrations, int64_t *others, struct ferry_error *err)
{
    struct pg_db *d = DB(db);
    const char *vals[1] = {d->schema};
    PGresult *r = PQexecParams(d->c,
                               "SELECT count(*) FILTER (WHERE c.relname = 'schema_migrations'),"
                               " count(*) FILTER (WHERE c.relname <> 'schema_migrations')"
                               " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                               " ON n.oid = c.relnamespace WHERE n.nspname = $1"
                               " AND c.relkind IN ('r', 'p')",
                               1, NULL, vals, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                 ? FERRY_OK
                 : pgfail(d, r, "reading the schema", err);
    if (rc == FERRY_OK) {
        *has_migrations = strtoll(PQgetvalue(r, 0, 0), NULL, 10) > 0;
        *others = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    return rc;
}

static void pg_close(struct sdb *db, struct ferry_error *why)
{
    (void)why;
    if (db == NULL) return;
    struct pg_db *d = DB(db);
    if (d->c) pool_give(d->key, d->c);
    ferry_free(d->key);
    ferry_free(d->schema);
    if (d->password) {
        memset(d->password, 0, strlen(d->password));
        ferry_free(d->password);
    }
    ferry_free(d->base.label);
    ferry_free(d);
}

static const struct sdb_driver pg_driver = {
    .dialect = SDB_PG,
    .prepare = pg_prepare,
    .bind_int64 = pg_bind_int64,
    .bind_text = pg_bind_text,
    .step = pg_step,
    .col_int64 = pg_col_int64,
    .col_text = pg_col_text,
    .col_null = pg_col_null,
    .reset = pg_reset,
    .finalize = pg_finalize,
    .changes = pg_changes,
    .violation = pg_violation,
    .exec = pg_exec,
    .begin = pg_begin,
    .commit = pg_commit,
    .in_tx = pg_in_tx,
    .now_us = pg_now_us,
    .set_sync_full = pg_set_sync_full,
    .migrate_lock = pg_migrate_lock,
    .tables = pg_tables,
    .close = pg_close,
};

/* ---- open ---- */

/* Splits the `schema` option off the URL's query (libpq would refuse it). */
static int split_url(const char *url, char **conn, char **schema, struct ferry_error *err)
{
    *conn = NULL;
    *schema = NULL;
    const char *q = strchr(url, '?');
    size_t base = q ? (size_t)(q - url) : strlen(url);
    char *c = ferry_malloc(strlen(url) + 1);
    if (c == NULL) return ferry_error_set(err, FERRY_ENOMEM, "store", "state store: out of memory");
    memcpy(c, url, base);
    size_t w = base;
    char sep = '?';
    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > 7 && strncmp(p, "schema=", 7) == 0) {
            ferry_free(*schema);
            *schema = ferry_strndup(p + 7, len - 7);
        } else if (len > 0) {
            c[w++] = sep;
            memcpy(c + w, p, len);
            w += len;
            sep = '&';
        }
        p = amp ? amp + 1 : NULL;
    }
    c[w] = '\0';
    if (*schema == NULL) *schema = ferry_strdup("ferry");
    if (*schema == NULL) {
        ferry_free(c);
        return ferry_error_set(err, FERRY_ENOMEM, "store", "state store: out of memory");
    }
    *conn = c;
    return FERRY_OK;
}

/* The password the connection string carries, or NULL. */
static char *url_password(const char *conn)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conn, &msg);
    PQfreemem(msg);
    char *pw = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && o->val[0]) pw = ferry_strdup(o->val);
    PQconninfoFree(opts);
    return pw;
}

static char *quote_ident(const char *name)
{
    char *q = ferry_malloc(strlen(name) * 2 + 3);
    if (q == NULL) return NULL;
    char *w = q;
    *w++ = '"';
    for (const char *p = name; *p; p++) {
        if (*p == '"') *w++ = '"';
        *w++ = *p;
    }
    *w++ = '"';
    *w = '\0';
    return q;
}

/* Creates the schema when missing and pins the session to it. */
static int setup_session(struct pg_db *d, const char *schema, struct ferry_error *err)
{
    char *qs = quote_ident(schema);
    if (qs == NULL) return ferry__sdb_fail(&d->base, FERRY_ENOMEM, "store", err, "out of memory");
    const char *vals[1] = {schema};
    PGresult *r = PQexecParams(d->c,
                               "SELECT has_schema_privilege(oid, 'USAGE') FROM"
                               " pg_catalog.pg_namespace WHERE nspname = $1",
                               1, NULL, vals, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? FERRY_OK
                                                  : pgfail(d, r, "looking up the schema", err);
    bool exists = rc == FERRY_OK && PQntuples(r) > 0;
    /* Without USAGE the search path would silently skip the schema. */
    if (exists && strcmp(PQgetvalue(r, 0, 0), "t") != 0)
        rc = ferry__sdb_fail(&d->base, FERRY_ESTORE, "libpq", err,
                             "the role has no USAGE on schema %s (grant USAGE, and CREATE for"
                             " migrations, on it)",
                             schema);
    PQclear(r);
    char *sql = NULL;
    if (rc == FERRY_OK && !exists) {
        /* Under the migration lock of that schema: two ferry processes creating it at once
         * would otherwise race inside CREATE SCHEMA IF NOT EXISTS. */
        char *lit = PQescapeLiteral(d->c, schema, strlen(schema));
        sql = lit ? ferry_asprintf("SELECT pg_advisory_lock(%d, hashtext(%s));"
                                   " CREATE SCHEMA IF NOT EXISTS %s;"
                                   " SELECT pg_advisory_unlock(%d, hashtext(%s))",
                                   MIGRATION_LOCK_KEY, lit, qs, MIGRATION_LOCK_KEY, lit)
                  : NULL;
        PQfreemem(lit);
        r = sql ? PQexec(d->c, sql) : NULL;
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            char what[200];
            snprintf(what, sizeof what,
                     "creating schema %s (the role needs CREATE on the database, or create the"
                     " schema beforehand and grant the role CREATE and USAGE on it)",
                     schema);
            rc = pgfail(d, r, what, err);
            exec_ok(d->c, "SELECT pg_advisory_unlock_all()"); /* the failure skipped it */
        }
        PQclear(r);
        ferry_free(sql);
    }
    if (rc == FERRY_OK) {
        /* A checkpoint ferry reported saved must survive the store server's crash: a server
         * (or role, or database) running with synchronous_commit = off acknowledges commits
         * before their WAL is flushed, so the store raises it to on for its own sessions.
         * Stronger settings (remote_write, remote_apply, local) are kept. */
        sql = ferry_asprintf("SET search_path = %s, pg_catalog; SET lock_timeout = '10s';"
                             " SELECT set_config('synchronous_commit', 'on', false)"
                             " WHERE current_setting('synchronous_commit') = 'off'",
                             qs);
        rc = sql ? pg_exec(&d->base, sql, "pinning the session to the schema", err)
                 : ferry__sdb_fail(&d->base, FERRY_ENOMEM, "store", err, "out of memory");
        ferry_free(sql);
    }
    ferry_free(qs);
    return rc;
}

/* Server notices (e.g. "schema already exists, skipping") are not ours to print. */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static int connect_new(struct pg_db *d, struct ferry_error *err)
{
    /* The URL's own options come after ours, so they win. */
    const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
    const char *vals[] = {"10", "ferry-state", d->key, NULL};
    d->c = PQconnectdbParams(keys, vals, 1);
    if (d->c == NULL) return ferry__sdb_fail(&d->base, FERRY_ENOMEM, "libpq", err, "out of memory");
    if (PQstatus(d->c) == CONNECTION_OK) {
        PQsetNoticeProcessor(d->c, quiet, NULL);
        return FERRY_OK;
    }
    char msg[600];
    clean_message(PQerrorMessage(d->c), d->password, msg, sizeof msg);
    int rc = ferry__sdb_fail(&d->base, FERRY_EIO, "libpq", err,
                             "cannot connect to PostgreSQL at host %s, port %s, database %s as"
                             " user %s: %s",
                             PQhost(d->c) ? PQhost(d->c) : "?", PQport(d->c) ? PQport(d->c) : "?",
                             PQdb(d->c) ? PQdb(d->c) : "?", PQuser(d->c) ? PQuser(d->c) : "?", msg);
    PQfinish(d->c);
    d->c = NULL;
    return connect_failure_transient(msg) ? transient(rc, err) : rc;
}

/* postgres://USER@HOST:PORT/DATABASE?schema=S: what the user may see of the URL. */
static char *make_label(const char *conn, const char *schema)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conn, &msg);
    PQfreemem(msg);
    const char *user = "", *host = "", *port = "", *dbname = "";
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        const char *v = o->val ? o->val : "";
        if (strcmp(o->keyword, "user") == 0)
            user = v;
        else if (strcmp(o->keyword, "host") == 0)
            host = v;
        else if (strcmp(o->keyword, "port") == 0)
            port = v;
        else if (strcmp(o->keyword, "dbname") == 0)
            dbname = v;
    }
    char *label = ferry_asprintf("postgres://%s%s%s%s%s/%s?schema=%s", user, user[0] ? "@" : "",
                                 host, port[0] ? ":" : "", port, dbname, schema);
    PQconninfoFree(opts);
    return label;
}

int ferry__sdb_pg_open(const char *url, struct sdb **out, struct ferry_error *err)
{
    *out = NULL;
    struct pg_db *d = ferry_calloc(1, sizeof *d);
    if (d == NULL) return ferry_error_set(err, FERRY_ENOMEM, "store", "state store: out of memory");
    d->base.drv = &pg_driver;
    char *schema = NULL;
    int rc = split_url(url, &d->key, &schema, err);
    if (rc == FERRY_OK) {
        d->password = url_password(d->key);
        d->base.label = make_label(d->key, schema);
        if (d->base.label == NULL)
            rc = ferry_error_set(err, FERRY_EINVAL, "store",
                                 "state store: not a valid PostgreSQL URL (postgres://USER@HOST"
                                 ":PORT/DATABASE[?schema=NAME])");
    }
    if (rc == FERRY_OK && (schema[0] == '\0' || strlen(schema) > 63))
        rc = ferry__sdb_fail(&d->base, FERRY_EINVAL, "store", err,
                             "the schema name must have 1 to 63 bytes");
    if (rc == FERRY_OK) {
        /* A pooled connection that went stale fails its session setup: dial a new one. */
        d->c = pool_take(d->key);
        if (d->c != NULL &&
            (PQstatus(d->c) != CONNECTION_OK || setup_session(d, schema, NULL) != FERRY_OK)) {
            PQfinish(d->c);
            d->c = NULL;
        }
        if (d->c == NULL) {
            rc = connect_new(d, err);
            if (rc == FERRY_OK) rc = setup_session(d, schema, err);
        }
    }
    d->schema = schema;
    if (rc != FERRY_OK) {
        if (d->c) {
            PQfinish(d->c);
            d->c = NULL;
        }
        pg_close(&d->base, NULL);
        return rc;
    }
    *out = &d->base;
    return FERRY_OK;
}
