/* bus/pg_bus.c - the PostgreSQL event bus: an events table plus LISTEN/NOTIFY wake-ups,
 * so a deployment that already has PostgreSQL needs no other infrastructure.
 *
 * Owns its libpq connections: one for publishing (guarded by a mutex) and a small pool for
 * fetching (each fetch takes one, so concurrent consumers never queue behind each other's
 * waits). Events are scoped by the state store's instance id, so state files that share a
 * database never see each other's runs.
 *
 * Ordering: a consumer reads "seq > after", so a sequence value must never become visible
 * after a larger one, or the consumer would move past it and skip it for good. A plain
 * sequence gives no such promise under concurrent publishers (nextval is not transactional:
 * 7 can commit after 8). Publishers therefore draw their seq from a single counter row with
 * UPDATE ... RETURNING inside the publishing statement: the row lock is held until commit,
 * so the next publisher gets its seq only after the previous one is committed and visible.
 * Publishes serialize on that row (one short statement each), which is the price of a
 * reader that never skips. The NOTIFY is sent in the same statement, i.e. on commit.
 * publish_n runs several such statements in one transaction (all or none, seqs consecutive).
 *
 * Calls libpq and core. Called through bus/bus.h (ferry_bus_open). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus/bus.h"
#include "ferry/config.h"
#include "ferry/core.h"

#define FETCH_DEFAULT 1000
#define POOL_MAX 8
#define SLICE_MS 250    /* a waiting fetch re-checks wake() at least this often */
#define REQUERY_MS 1000 /* and re-reads the table this often even without a NOTIFY */
#define SQL_MAX 640

struct pgbus {
    struct ferry_bus bus;
    char *conninfo;   /* may hold a password: wiped on close, never logged */
    char where[300];  /* "PostgreSQL bus at host:port/db (schema s)": for messages */
    char channel[64]; /* NOTIFY channel: the schema name */
    char scope[64];
    char q_publish[SQL_MAX], q_fetch_all[SQL_MAX], q_fetch_run[SQL_MAX];
    pthread_mutex_t pub_lock; /* guards pub */
    PGconn *pub;
    pthread_mutex_t pool_lock; /* guards idle */
    PGconn *idle[POOL_MAX];
    int n_idle;
    pthread_mutex_t lock; /* guards wakes and closed */
    uint64_t wakes;
    bool closed;
    int wake_pipe[2];
};

static struct pgbus *ctx_of(struct ferry_bus *b)
{
    return (struct pgbus *)b->ctx;
}

/* libpq's message on one line (it spreads some over several, indented with tabs). */
static const char *pq_msg(const PGconn *c, const PGresult *r)
{
    static __thread char buf[512];
    const char *m = r ? PQresultErrorMessage(r) : NULL;
    if (m == NULL || m[0] == '\0') m = c ? PQerrorMessage(c) : "no connection";
    size_t n = 0;
    for (const char *p = m; *p && n + 1 < sizeof buf; p++) {
        char ch = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
        if (ch == ' ' && (n == 0 || buf[n - 1] == ' ')) continue;
        buf[n++] = ch;
    }
    while (n > 0 && buf[n - 1] == ' ')
        n--;
    buf[n] = '\0';
    return buf;
}

static bool ident_ok(const char *s)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 48) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
    return !(s[0] >= '0' && s[0] <= '9');
}

/* Takes the ferry-only `bus_schema=NAME` parameter out of a URL's query string (libpq would
 * refuse it). Rewrites url in place; returns the schema in `schema`. */
static void strip_schema_param(char *url, char *schema, size_t len)
{
    char *q = strchr(url, '?');
    if (q == NULL) return;
    char *p = q + 1;
    while (*p) {
        char *amp = strchr(p, '&');
        size_t plen = amp ? (size_t)(amp - p) : strlen(p);
        if (plen > 11 && strncmp(p, "bus_schema=", 11) == 0) {
            snprintf(schema, len, "%.*s", (int)(plen - 11), p + 11);
            if (amp)
                memmove(p, amp + 1, strlen(amp + 1) + 1);
            else
                *(p > q + 1 ? p - 1 : p) = '\0';
            continue;
        }
        if (amp == NULL) break;
        p = amp + 1;
    }
    size_t n = strlen(url);
    if (n > 0 && (url[n - 1] == '?' || url[n - 1] == '&')) url[n - 1] = '\0';
}

/* "relation already exists, skipping" and the like are not for the user's terminal. */
static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static int connect_one(struct pgbus *pb, bool listen, PGconn **out, struct ferry_error *err)
{
    *out = NULL;
    PGconn *c = PQconnectdb(pb->conninfo);
    if (c == NULL || PQstatus(c) != CONNECTION_OK) {
        int rc = ferry_error_set(err, FERRY_EIO, "libpq", "%s: cannot connect: %s", pb->where,
                                 pq_msg(c, NULL));
        PQfinish(c);
        return rc;
    }
    PQsetNoticeProcessor(c, quiet_notice, NULL);
    if (listen) {
        char sql[128];
        snprintf(sql, sizeof sql, "LISTEN \"%s\"", pb->channel);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            int rc =
                ferry_error_set(err, FERRY_EIO, "libpq", "%s: LISTEN: %s", pb->where, pq_msg(c, r));
            PQclear(r);
            PQfinish(c);
            return rc;
        }
        PQclear(r);
    }
    *out = c;
    return FERRY_OK;
}

/* Creates the schema if missing. An advisory lock keyed by the schema name makes
 * concurrent first starts safe (CREATE ... IF NOT EXISTS alone can still race). */
static int ensure_schema(struct pgbus *pb, PGconn *c, const char *s, struct ferry_error *err)
{
    char sql[2048];
    snprintf(sql, sizeof sql,
             "BEGIN;"
             "SELECT pg_advisory_xact_lock(hashtext('ferry_bus.' || '%s'));"
             "CREATE SCHEMA IF NOT EXISTS \"%s\";"
             "CREATE TABLE IF NOT EXISTS \"%s\".\"counter\" (\"id\" integer PRIMARY KEY"
             " CHECK (\"id\" = 1), \"last\" bigint NOT NULL, \"bus_id\" text NOT NULL"
             " DEFAULT md5(random()::text || clock_timestamp()::text));"
             "ALTER TABLE \"%s\".\"counter\" ADD COLUMN IF NOT EXISTS \"bus_id\" text NOT NULL"
             " DEFAULT md5(random()::text || clock_timestamp()::text);"
             "INSERT INTO \"%s\".\"counter\" (\"id\", \"last\") VALUES (1, 0)"
             " ON CONFLICT (\"id\") DO NOTHING;"
             "CREATE TABLE IF NOT EXISTS \"%s\".\"events\" (\"seq\" bigint PRIMARY KEY,"
             " \"scope\" text NOT NULL, \"time_us\" bigint NOT NULL, \"run_id\" bigint NOT NULL,"
             " \"attempt\" integer NOT NULL, \"resource\" text NOT NULL, \"type\" text NOT NULL,"
             " \"payload\" json NOT NULL);"
             "CREATE INDEX IF NOT EXISTS \"events_scope_seq\" ON \"%s\".\"events\""
             " (\"scope\", \"seq\");"
             "CREATE INDEX IF NOT EXISTS \"events_scope_run_seq\" ON \"%s\".\"events\""
             " (\"scope\", \"run_id\", \"seq\");"
             "COMMIT;",
             s, s, s, s, s, s, s, s);
    PGresult *r = PQexec(c, sql);
    int rc = FERRY_OK;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = ferry_error_set(err, FERRY_EIO, "libpq", "%s: creating the bus tables: %s", pb->where,
                             pq_msg(c, r));
    PQclear(r);
    if (rc != FERRY_OK) {
        r = PQexec(c, "ROLLBACK");
        PQclear(r);
        return rc;
    }
    /* The id born with the tables names this sequence space (bus.h mark_tag). */
    snprintf(sql, sizeof sql, "SELECT \"bus_id\" FROM \"%s\".\"counter\" WHERE \"id\" = 1", s);
    r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        snprintf(pb->bus.mark_tag, sizeof pb->bus.mark_tag, "pg:%.40s", PQgetvalue(r, 0, 0));
    else
        rc = ferry_error_set(err, FERRY_EIO, "libpq", "%s: reading the bus id: %s", pb->where,
                             pq_msg(c, r));
    PQclear(r);
    return rc;
}

/* One event through the publishing connection (pub_lock held, pb->pub connected): the
 * statement draws the seq from the counter row, inserts and notifies. A dropped connection
 * is finished (the next publish dials again). */
static int publish_one(struct pgbus *pb, struct ferry_event *ev, struct ferry_error *err)
{
    if (ev->time_us == 0) ev->time_us = ferry_now_wall_us();
    char t[24], run[24], att[16];
    snprintf(t, sizeof t, "%" PRId64, ev->time_us);
    snprintf(run, sizeof run, "%" PRId64, ev->run_id);
    snprintf(att, sizeof att, "%d", ev->attempt);
    const char *params[8] = {
        pb->scope,  t, run, att, ev->resource, ev->type, ev->payload ? ev->payload : "{}",
        pb->channel};
    int rc = FERRY_OK;
    PGresult *r = PQexecParams(pb->pub, pb->q_publish, 8, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        ev->seq = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    } else {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        /* class 22 (data exception): the payload is not JSON; anything else is I/O */
        int code = state && strncmp(state, "22", 2) == 0 ? FERRY_EINVAL : FERRY_EIO;
        rc = ferry_error_set(err, code, "libpq", "%s: %s", pb->where, pq_msg(pb->pub, r));
        if (PQstatus(pb->pub) != CONNECTION_OK) {
            PQfinish(pb->pub);
            pb->pub = NULL; /* reconnect on the next publish */
        }
    }
    PQclear(r);
    return rc;
}

static int pg_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    struct pgbus *pb = ctx_of(b);
    pthread_mutex_lock(&pb->pub_lock);
    int rc = FERRY_OK;
    if (pb->pub == NULL) rc = connect_one(pb, false, &pb->pub, err);
    if (rc == FERRY_OK) rc = publish_one(pb, ev, err);
    pthread_mutex_unlock(&pb->pub_lock);
    if (rc != FERRY_OK) ferry_error_prefix(err, "publishing %s", ev->type);
    return rc;
}

/* BEGIN, COMMIT or ROLLBACK on the publishing connection (pub_lock held). */
static int pub_exec(struct pgbus *pb, const char *sql, struct ferry_error *err)
{
    if (pb->pub == NULL)
        return ferry_error_set(err, FERRY_EIO, "libpq", "%s: lost the connection", pb->where);
    PGresult *r = PQexec(pb->pub, sql);
    int rc = FERRY_OK;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = ferry_error_set(err, FERRY_EIO, "libpq", "%s: %s: %s", pb->where, sql,
                             pq_msg(pb->pub, r));
    PQclear(r);
    if (rc != FERRY_OK && PQstatus(pb->pub) != CONNECTION_OK) {
        PQfinish(pb->pub);
        pb->pub = NULL;
    }
    return rc;
}

/* All n in one transaction: the counter row stays locked from the first event to the commit,
 * so the seqs are consecutive and become visible together; a failure rolls all back. */
static int pg_publish_n(struct ferry_bus *b, struct ferry_event *evs, int n,
                        struct ferry_error *err)
{
    struct pgbus *pb = ctx_of(b);
    if (n <= 1) return n == 1 ? pg_publish(b, evs, err) : FERRY_OK;
    pthread_mutex_lock(&pb->pub_lock);
    int rc = FERRY_OK;
    if (pb->pub == NULL) rc = connect_one(pb, false, &pb->pub, err);
    if (rc == FERRY_OK) rc = pub_exec(pb, "BEGIN", err);
    bool open = rc == FERRY_OK;
    int failed = -1; /* the event whose statement failed */
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        if ((rc = publish_one(pb, &evs[i], err)) != FERRY_OK) failed = i;
    if (rc == FERRY_OK)
        rc = pub_exec(pb, "COMMIT", err);
    else if (open && pb->pub != NULL)
        pub_exec(pb, "ROLLBACK", NULL);
    pthread_mutex_unlock(&pb->pub_lock);
    if (rc == FERRY_OK) return FERRY_OK;
    for (int i = 0; i < n; i++)
        evs[i].seq = 0;
    if (failed >= 0)
        return ferry_error_prefix(err, "publishing %s (event %d of %d, none stored)",
                                  evs[failed].type, failed + 1, n);
    return ferry_error_prefix(err, "publishing %d events from %s (none stored)", n, evs[0].type);
}

static PGconn *pool_take(struct pgbus *pb)
{
    pthread_mutex_lock(&pb->pool_lock);
    PGconn *c = pb->n_idle > 0 ? pb->idle[--pb->n_idle] : NULL;
    pthread_mutex_unlock(&pb->pool_lock);
    return c;
}

static void pool_give(struct pgbus *pb, PGconn *c)
{
    if (c == NULL) return;
    if (PQstatus(c) == CONNECTION_OK) {
        pthread_mutex_lock(&pb->pool_lock);
        if (pb->n_idle < POOL_MAX) {
            pb->idle[pb->n_idle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&pb->pool_lock);
    }
    PQfinish(c);
}

/* Consumes what the server sent; true when a NOTIFY for our scope arrived. */
static int drain_notifies(struct pgbus *pb, PGconn *c, bool *ours, struct ferry_error *err)
{
    if (!PQconsumeInput(c))
        return ferry_error_set(err, FERRY_EIO, "libpq", "%s: %s", pb->where, pq_msg(c, NULL));
    PGnotify *nf;
    while ((nf = PQnotifies(c)) != NULL) {
        if (nf->extra && strcmp(nf->extra, pb->scope) == 0) *ours = true;
        PQfreemem(nf);
    }
    return FERRY_OK;
}

static int read_events(struct pgbus *pb, PGconn *c, int64_t after, int64_t run_id, int max,
                       struct ferry_event **evs, int *n, struct ferry_error *err)
{
    char a[24], run[24], lim[16];
    snprintf(a, sizeof a, "%" PRId64, after);
    snprintf(run, sizeof run, "%" PRId64, run_id);
    snprintf(lim, sizeof lim, "%d", max);
    const char *p_all[3] = {pb->scope, a, lim};
    const char *p_run[4] = {pb->scope, a, lim, run};
    PGresult *r = run_id != 0 ? PQexecParams(c, pb->q_fetch_run, 4, NULL, p_run, NULL, NULL, 0)
                              : PQexecParams(c, pb->q_fetch_all, 3, NULL, p_all, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = ferry_error_set(err, FERRY_EIO, "libpq", "%s: %s", pb->where, pq_msg(c, r));
        PQclear(r);
        return rc;
    }
    int rows = PQntuples(r);
    if (rows == 0) {
        PQclear(r);
        return FERRY_OK;
    }
    struct ferry_event *v = ferry_calloc((size_t)rows, sizeof *v);
    if (v == NULL) {
        PQclear(r);
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "%s: out of memory", pb->where);
    }
    for (int i = 0; i < rows; i++) {
        v[i].seq = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        v[i].time_us = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        v[i].run_id = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        v[i].attempt = (int)strtol(PQgetvalue(r, i, 3), NULL, 10);
        snprintf(v[i].resource, sizeof v[i].resource, "%s", PQgetvalue(r, i, 4));
        snprintf(v[i].type, sizeof v[i].type, "%s", PQgetvalue(r, i, 5));
        v[i].payload = ferry_strdup(PQgetvalue(r, i, 6));
        if (v[i].payload == NULL) {
            ferry_events_free(v, i);
            PQclear(r);
            return ferry_error_set(err, FERRY_ENOMEM, "bus", "%s: out of memory", pb->where);
        }
    }
    PQclear(r);
    *evs = v;
    *n = rows;
    return FERRY_OK;
}

static uint64_t wakes_now(struct pgbus *pb, bool *closed)
{
    pthread_mutex_lock(&pb->lock);
    uint64_t w = pb->wakes;
    if (closed) *closed = pb->closed;
    pthread_mutex_unlock(&pb->lock);
    return w;
}

static int pg_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                    struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct pgbus *pb = ctx_of(b);
    *evs = NULL;
    *n = 0;
    if (max <= 0) max = FETCH_DEFAULT;
    /* Seen before anything else: a wake() from here on ends this fetch. */
    uint64_t seen_wake = wakes_now(pb, NULL);
    int64_t deadline = ferry_now_mono_us() + (timeout_ms > 0 ? (int64_t)timeout_ms * 1000 : 0);
    PGconn *c = pool_take(pb);
    int rc = FERRY_OK;
    if (c == NULL) rc = connect_one(pb, true, &c, err);
    bool ours = false;
    /* Notifications that arrived while the connection sat idle are about events the read
     * below sees anyway. */
    if (rc == FERRY_OK) rc = drain_notifies(pb, c, &ours, err);
    int64_t last_read = 0;
    while (rc == FERRY_OK) {
        rc = read_events(pb, c, after, run_id, max, evs, n, err);
        last_read = ferry_now_mono_us();
        if (rc != FERRY_OK || *n > 0) break;
        /* Wait for a NOTIFY (LISTEN is set on every pooled connection), a wake() or the
         * deadline; re-read now and then in case a notification was missed. */
        ours = false;
        for (;;) {
            bool closed = false;
            if (wakes_now(pb, &closed) != seen_wake || closed) goto out;
            int64_t now = ferry_now_mono_us();
            if (now >= deadline) goto out;
            int64_t left_ms = (deadline - now + 999) / 1000;
            struct pollfd fds[2] = {{.fd = PQsocket(c), .events = POLLIN},
                                    {.fd = pb->wake_pipe[0], .events = POLLIN}};
            int slice = left_ms < SLICE_MS ? (int)left_ms : SLICE_MS;
            int pr = poll(fds, 2, slice);
            if (pr < 0 && errno != EINTR) {
                rc = ferry_error_set(err, FERRY_EIO, "bus", "%s: poll: %s", pb->where,
                                     strerror(errno));
                break;
            }
            if (pr > 0 && (fds[1].revents & POLLIN) && wakes_now(pb, NULL) == seen_wake) {
                /* a stale byte from an earlier wake(): drop it */
                char buf[64];
                while (read(pb->wake_pipe[0], buf, sizeof buf) > 0) {
                }
            }
            if (pr > 0 && fds[0].revents) {
                rc = drain_notifies(pb, c, &ours, err);
                if (rc != FERRY_OK || ours) break;
            }
            if (ferry_now_mono_us() - last_read >= (int64_t)REQUERY_MS * 1000) break;
        }
    }
out:
    if (rc != FERRY_OK && c != NULL && PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        c = NULL;
    }
    pool_give(pb, c);
    if (rc != FERRY_OK) {
        ferry_events_free(*evs, *n);
        *evs = NULL;
        *n = 0;
        ferry_error_prefix(err, "fetching events");
    }
    return rc;
}

static void pg_wake(struct ferry_bus *b)
{
    struct pgbus *pb = ctx_of(b);
    pthread_mutex_lock(&pb->lock);
    pb->wakes++;
    pthread_mutex_unlock(&pb->lock);
    ssize_t w = write(pb->wake_pipe[1], "w", 1);
    (void)w; /* a full pipe already wakes every poller */
}

/* The caller guarantees no publish or fetch is still running (wake them first). */
static void pg_close(struct ferry_bus *b)
{
    struct pgbus *pb = ctx_of(b);
    PQfinish(pb->pub);
    for (int i = 0; i < pb->n_idle; i++)
        PQfinish(pb->idle[i]);
    if (pb->wake_pipe[0] >= 0) close(pb->wake_pipe[0]);
    if (pb->wake_pipe[1] >= 0) close(pb->wake_pipe[1]);
    ferry_secret_free(pb->conninfo);
    pthread_mutex_destroy(&pb->pub_lock);
    pthread_mutex_destroy(&pb->pool_lock);
    pthread_mutex_destroy(&pb->lock);
    ferry_free(pb);
}

static const struct ferry_bus_vtable pg_vtable = {
    .name = "postgres",
    .publish = pg_publish,
    .publish_n = pg_publish_n,
    .fetch = pg_fetch,
    .wake = pg_wake,
    .close = pg_close,
};

/* "host:port/db" of a conninfo, without user or password, for messages. */
static void describe(struct pgbus *pb, const char *schema)
{
    PQconninfoOption *opts = PQconninfoParse(pb->conninfo, NULL);
    const char *host = NULL, *port = NULL, *db = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (strcmp(o->keyword, "host") == 0) host = o->val;
        if (strcmp(o->keyword, "hostaddr") == 0 && host == NULL) host = o->val;
        if (strcmp(o->keyword, "port") == 0) port = o->val;
        if (strcmp(o->keyword, "dbname") == 0) db = o->val;
    }
    snprintf(pb->where, sizeof pb->where, "PostgreSQL bus at %s:%s/%s (schema %s)",
             host && host[0] ? host : "localhost", port && port[0] ? port : "5432",
             db && db[0] ? db : "(default)", schema);
    PQconninfoFree(opts);
}

int ferry_bus_pg_open(const char *url, const char *scope, struct ferry_bus **out,
                      struct ferry_error *err)
{
    *out = NULL;
    struct pgbus *pb = ferry_calloc(1, sizeof *pb);
    if (pb == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "PostgreSQL bus: out of memory");
    pb->wake_pipe[0] = pb->wake_pipe[1] = -1;
    pthread_mutex_init(&pb->pub_lock, NULL);
    pthread_mutex_init(&pb->pool_lock, NULL);
    pthread_mutex_init(&pb->lock, NULL);
    pb->bus.vt = &pg_vtable;
    pb->bus.ctx = pb;
    int rc = FERRY_OK;
    char schema[64] = "ferry_bus";
    pb->conninfo = ferry_strdup(url);
    if (pb->conninfo == NULL) {
        pg_close(&pb->bus);
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "PostgreSQL bus: out of memory");
    }
    strip_schema_param(pb->conninfo, schema, sizeof schema);
    describe(pb, schema);
    if (!ident_ok(schema))
        rc = ferry_error_set(err, FERRY_ECONFIG, "bus",
                             "%s: bus_schema must be lower-case letters, digits and _", pb->where);
    if (rc == FERRY_OK && (scope == NULL || strlen(scope) >= sizeof pb->scope))
        rc = ferry_error_set(err, FERRY_EINVAL, "bus", "%s: bad scope", pb->where);
    if (rc == FERRY_OK) {
        snprintf(pb->scope, sizeof pb->scope, "%s", scope);
        snprintf(pb->channel, sizeof pb->channel, "%s", schema);
        snprintf(pb->q_publish, SQL_MAX,
                 "WITH n AS (UPDATE \"%s\".\"counter\" SET \"last\" = \"last\" + 1"
                 " WHERE \"id\" = 1 RETURNING \"last\"),"
                 " i AS (INSERT INTO \"%s\".\"events\" SELECT n.\"last\", $1, $2::bigint,"
                 " $3::bigint, $4::integer, $5, $6, $7::json FROM n RETURNING \"seq\")"
                 " SELECT i.\"seq\", pg_notify($8, $1) FROM i",
                 schema, schema);
        snprintf(pb->q_fetch_all, SQL_MAX,
                 "SELECT \"seq\", \"time_us\", \"run_id\", \"attempt\", \"resource\", \"type\","
                 " \"payload\"::text FROM \"%s\".\"events\" WHERE \"scope\" = $1"
                 " AND \"seq\" > $2::bigint ORDER BY \"seq\" LIMIT $3::integer",
                 schema);
        snprintf(pb->q_fetch_run, SQL_MAX,
                 "SELECT \"seq\", \"time_us\", \"run_id\", \"attempt\", \"resource\", \"type\","
                 " \"payload\"::text FROM \"%s\".\"events\" WHERE \"scope\" = $1"
                 " AND \"run_id\" = $4::bigint AND \"seq\" > $2::bigint ORDER BY \"seq\""
                 " LIMIT $3::integer",
                 schema);
        if (pipe(pb->wake_pipe) != 0)
            rc = ferry_error_set(err, FERRY_EIO, "bus", "%s: pipe: %s", pb->where, strerror(errno));
    }
    if (rc == FERRY_OK) {
        for (int i = 0; i < 2; i++) {
            int fl = fcntl(pb->wake_pipe[i], F_GETFL);
            fcntl(pb->wake_pipe[i], F_SETFL, fl | O_NONBLOCK);
            fcntl(pb->wake_pipe[i], F_SETFD, FD_CLOEXEC);
        }
        rc = connect_one(pb, false, &pb->pub, err);
    }
    if (rc == FERRY_OK) rc = ensure_schema(pb, pb->pub, schema, err);
    if (rc != FERRY_OK) {
        pg_close(&pb->bus);
        return rc;
    }
    *out = &pb->bus;
    return FERRY_OK;
}
