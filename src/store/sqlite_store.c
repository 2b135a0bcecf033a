/* store/sqlite_store.c - the SQLite state store (store/store.h).
 *
 * Owns one SQLite connection per handle, the handle's cached prepared statements, the
 * numbered schema migrations and the attempt fencing. Calls SQLite, jansson (only to check
 * that the JSON it is handed parses) and core. Called by the runner, the tracker, the
 * in-process bus, the control plane and the CLI.
 *
 * Durability: WAL mode so readers (the bus consumers, `ferry status`) never block the
 * writer; synchronous=FULL by default so that a commit, and so a saved checkpoint, is on disk
 * when the call returns, power loss included (the bus publisher and the heartbeat switch
 * their handles to NORMAL, see ferry_store_set_sync_full); busy_timeout 10 s because several
 * handles (bus, tracker, runner, other processes) write the same file and SQLite serialises
 * them. Every change that reads before it writes (fencing) runs in a BEGIN IMMEDIATE
 * transaction, so the check and the write see the same state. Nothing here opens a
 * descriptor of a healthy state file outside SQLite (see explain_damage).
 * docs/internals/state-and-events.md explains the tables and the rules. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "store/store.h"

#define BUSY_TIMEOUT_MS 10000
#define EVENT_READ_DEFAULT 1000

/* ---- migrations ----
 * Numbered, applied in order at open, one transaction each, recorded in
 * "schema_migrations". A migration is never edited once released: add a new one. */

static const char migration_1[] =
    "CREATE TABLE \"pipelines\" ("
    " \"name\" TEXT NOT NULL, \"version\" TEXT NOT NULL, \"spec\" TEXT NOT NULL,"
    " \"created_us\" INTEGER NOT NULL, PRIMARY KEY (\"name\", \"version\"));"
    "CREATE TABLE \"runs\" ("
    " \"id\" INTEGER PRIMARY KEY AUTOINCREMENT,"
    " \"pipeline\" TEXT NOT NULL, \"version\" TEXT NOT NULL, \"state\" TEXT NOT NULL,"
    " \"attempt\" INTEGER NOT NULL DEFAULT 0, \"pid\" INTEGER NOT NULL DEFAULT 0,"
    " \"created_us\" INTEGER NOT NULL, \"started_us\" INTEGER NOT NULL DEFAULT 0,"
    " \"ended_us\" INTEGER NOT NULL DEFAULT 0, \"heartbeat_us\" INTEGER NOT NULL DEFAULT 0,"
    " \"rows\" INTEGER NOT NULL DEFAULT 0, \"bytes\" INTEGER NOT NULL DEFAULT 0,"
    " \"batches\" INTEGER NOT NULL DEFAULT 0, \"verified\" INTEGER NOT NULL DEFAULT 0,"
    " \"diverged\" INTEGER NOT NULL DEFAULT 0, \"error\" TEXT NOT NULL DEFAULT '',"
    " \"signal\" TEXT NOT NULL DEFAULT '', \"request\" TEXT);"
    "CREATE INDEX \"runs_pipeline\" ON \"runs\" (\"pipeline\", \"version\", \"id\");"
    "CREATE TABLE \"run_resources\" ("
    " \"run_id\" INTEGER NOT NULL REFERENCES \"runs\" (\"id\") ON DELETE CASCADE,"
    " \"resource\" TEXT NOT NULL, \"mode\" TEXT NOT NULL DEFAULT '',"
    " \"write\" TEXT NOT NULL DEFAULT '', \"route\" TEXT NOT NULL DEFAULT '',"
    " \"state\" TEXT NOT NULL DEFAULT 'pending',"
    " \"rows\" INTEGER NOT NULL DEFAULT 0, \"bytes\" INTEGER NOT NULL DEFAULT 0,"
    " \"batches\" INTEGER NOT NULL DEFAULT 0, \"verified\" INTEGER NOT NULL DEFAULT 0,"
    " \"diverged\" INTEGER NOT NULL DEFAULT 0, \"error\" TEXT NOT NULL DEFAULT '',"
    " \"updated_us\" INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (\"run_id\", \"resource\"));"
    "CREATE TABLE \"plans\" ("
    " \"run_id\" INTEGER NOT NULL REFERENCES \"runs\" (\"id\") ON DELETE CASCADE,"
    " \"resource\" TEXT NOT NULL, \"plan\" TEXT NOT NULL, \"created_us\" INTEGER NOT NULL,"
    " PRIMARY KEY (\"run_id\", \"resource\"));"
    "CREATE TABLE \"run_checkpoints\" ("
    " \"run_id\" INTEGER NOT NULL REFERENCES \"runs\" (\"id\") ON DELETE CASCADE,"
    " \"resource\" TEXT NOT NULL, \"shard\" INTEGER NOT NULL, \"attempt\" INTEGER NOT NULL,"
    " \"position\" TEXT NOT NULL, \"updated_us\" INTEGER NOT NULL,"
    " PRIMARY KEY (\"run_id\", \"resource\", \"shard\"));"
    "CREATE TABLE \"pending_checkpoints\" ("
    " \"run_id\" INTEGER NOT NULL REFERENCES \"runs\" (\"id\") ON DELETE CASCADE,"
    " \"attempt\" INTEGER NOT NULL, \"resource\" TEXT NOT NULL, \"shard\" INTEGER NOT NULL,"
    " \"position\" TEXT NOT NULL, \"updated_us\" INTEGER NOT NULL,"
    " PRIMARY KEY (\"run_id\", \"attempt\", \"resource\", \"shard\"));"
    "CREATE TABLE \"route_checkpoints\" ("
    " \"pipeline\" TEXT NOT NULL, \"version\" TEXT NOT NULL, \"route\" TEXT NOT NULL,"
    " \"shard\" INTEGER NOT NULL, \"position\" TEXT NOT NULL, \"run_id\" INTEGER NOT NULL,"
    " \"updated_us\" INTEGER NOT NULL,"
    " PRIMARY KEY (\"pipeline\", \"version\", \"route\", \"shard\"));"
    "CREATE TABLE \"events\" ("
    " \"seq\" INTEGER PRIMARY KEY AUTOINCREMENT, \"time_us\" INTEGER NOT NULL,"
    " \"run_id\" INTEGER NOT NULL DEFAULT 0, \"attempt\" INTEGER NOT NULL DEFAULT 0,"
    " \"resource\" TEXT NOT NULL DEFAULT '', \"type\" TEXT NOT NULL,"
    " \"payload\" TEXT NOT NULL);"
    "CREATE INDEX \"events_run\" ON \"events\" (\"run_id\", \"seq\");"
    "CREATE TABLE \"marks\" ("
    " \"consumer\" TEXT PRIMARY KEY, \"seq\" INTEGER NOT NULL,"
    " \"updated_us\" INTEGER NOT NULL);";

/* 2: a random id of this state file. Destinations that store ferry's checkpoint key it by
 * pipeline *and* this id, so a second state file (whose run ids start at 1 again) never
 * mistakes another installation's checkpoints for its own. */
static const char migration_2[] =
    "CREATE TABLE \"meta\" (\"key\" TEXT PRIMARY KEY, \"value\" TEXT NOT NULL);"
    "INSERT INTO \"meta\" VALUES ('instance_id', lower(hex(randomblob(8))));";

/* 3 (ferry serve): the current version of each registered pipeline, its retry policy and
 * deletion mark (versions themselves stay: runs refer to them); idempotency keys of run
 * requests; how many times the reaper re-dispatched a run, what started it, how its last
 * worker process ended (exit status, or minus the signal that killed it), and whether a
 * stopping control plane paused it (to be requested again at the next start). */
static const char migration_3[] =
    "CREATE TABLE \"pipeline_heads\" ("
    " \"name\" TEXT PRIMARY KEY, \"version\" TEXT NOT NULL,"
    " \"retries\" INTEGER NOT NULL DEFAULT 0, \"created_us\" INTEGER NOT NULL,"
    " \"updated_us\" INTEGER NOT NULL, \"deleted_us\" INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE \"idempotency_keys\" ("
    " \"pipeline\" TEXT NOT NULL, \"key\" TEXT NOT NULL,"
    " \"run_id\" INTEGER NOT NULL REFERENCES \"runs\" (\"id\") ON DELETE CASCADE,"
    " \"created_us\" INTEGER NOT NULL, PRIMARY KEY (\"pipeline\", \"key\"));"
    "ALTER TABLE \"runs\" ADD COLUMN \"retries\" INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE \"runs\" ADD COLUMN \"trigger\" TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE \"runs\" ADD COLUMN \"worker_exit\" INTEGER;"
    "ALTER TABLE \"runs\" ADD COLUMN \"resume_on_start\" INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX \"runs_state\" ON \"runs\" (\"state\", \"id\");";

/* 4 (ferry serve): cron schedules of pipelines. */
static const char migration_4[] =
    "CREATE TABLE \"schedules\" ("
    " \"id\" INTEGER PRIMARY KEY AUTOINCREMENT, \"pipeline\" TEXT NOT NULL,"
    " \"cron\" TEXT NOT NULL, \"timezone\" TEXT NOT NULL DEFAULT 'UTC',"
    " \"overlap\" TEXT NOT NULL DEFAULT 'skip', \"enabled\" INTEGER NOT NULL DEFAULT 1,"
    " \"next_us\" INTEGER NOT NULL DEFAULT 0, \"last_us\" INTEGER NOT NULL DEFAULT 0,"
    " \"last_run\" INTEGER NOT NULL DEFAULT 0, \"created_us\" INTEGER NOT NULL);";

/* 5 (files source, on_error: skip): records a source skipped, per resource: the count and
 * a JSON object with per-shard counts and the first samples (file:line:column, reason). */
static const char migration_5[] =
    "ALTER TABLE \"run_resources\" ADD COLUMN \"skipped\" INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE \"run_resources\" ADD COLUMN \"skips\" TEXT NOT NULL DEFAULT '';";

static const char *const migrations[] = {migration_1, migration_2, migration_3, migration_4,
                                         migration_5};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

/* ---- cached statements ---- */

enum stmt_id {
    S_PIPELINE_PUT,
    S_RUN_CREATE,
    S_RUN_GET,
    S_RUN_LIST_ALL,
    S_RUN_LIST_PIPELINE,
    S_RUN_UNFINISHED,
    S_RUN_BEGIN_ATTEMPT,
    S_RUN_ATTEMPT,
    S_RUN_SET_STATE,
    S_RUN_HEARTBEAT,
    S_RUN_ADD_COUNTS,
    S_RUN_REQUEST,
    S_RUN_REQUESTED,
    S_RES_UPSERT,
    S_RES_ADD_COUNTS,
    S_RES_SET_STATE,
    S_RES_LIST,
    S_PLAN_GET,
    S_PLAN_PUT,
    S_RUNCP_SAVE,
    S_RUNCP_LIST,
    S_RUNCP_LIST_ALL,
    S_PENDING_SAVE,
    S_PENDING_PROMOTE,
    S_PENDING_DELETE,
    S_ROUTE_SAVE,
    S_ROUTE_LIST,
    S_ROUTE_LIST_ALL,
    S_ROUTE_LIST_PIPELINE,
    S_EVENT_APPEND,
    S_EVENT_READ_ALL,
    S_EVENT_READ_RUN,
    S_EVENT_LAST,
    S_MARK_GET,
    S_MARK_SET,
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_SAVEPOINT,
    S_RELEASE,
    S_ROLLBACK_TO,
    S_MAX
};

#define RUN_COLUMNS                                                                                \
    "\"id\", \"pipeline\", \"version\", \"state\", \"attempt\", \"pid\", \"created_us\", "         \
    "\"started_us\", \"ended_us\", \"heartbeat_us\", \"rows\", \"bytes\", \"batches\", "           \
    "\"verified\", \"diverged\", \"error\", \"request\""
#define CP_COLUMNS "\"shard\", \"run_id\", \"position\", \"updated_us\""
#define EVENT_COLUMNS                                                                              \
    "\"seq\", \"time_us\", \"run_id\", \"attempt\", \"resource\", \"type\", \"payload\""

static const char *const stmt_sql[S_MAX] = {
    [S_PIPELINE_PUT] = "INSERT INTO \"pipelines\" (\"name\", \"version\", \"spec\", \"created_us\")"
                       " VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
    [S_RUN_CREATE] = "INSERT INTO \"runs\" (\"pipeline\", \"version\", \"state\", \"created_us\","
                     " \"request\") VALUES (?1, ?2, 'requested', ?3, ?4)",
    [S_RUN_GET] = "SELECT " RUN_COLUMNS " FROM \"runs\" WHERE \"id\" = ?1",
    [S_RUN_LIST_ALL] = "SELECT " RUN_COLUMNS " FROM \"runs\" ORDER BY \"id\" DESC LIMIT ?1",
    [S_RUN_LIST_PIPELINE] = "SELECT " RUN_COLUMNS " FROM \"runs\" WHERE \"pipeline\" = ?1"
                            " ORDER BY \"id\" DESC LIMIT ?2",
    [S_RUN_UNFINISHED] = "SELECT " RUN_COLUMNS " FROM \"runs\" WHERE \"pipeline\" = ?1 AND"
                         " \"version\" = ?2 AND \"state\" IN ('requested', 'running', 'paused')"
                         " ORDER BY \"id\" DESC LIMIT 1",
    [S_RUN_BEGIN_ATTEMPT] =
        "UPDATE \"runs\" SET \"attempt\" = \"attempt\" + 1, \"state\" = 'running', \"pid\" = ?2,"
        " \"heartbeat_us\" = ?3, \"started_us\" = CASE WHEN \"started_us\" = 0 THEN ?3"
        " ELSE \"started_us\" END, \"ended_us\" = 0, \"error\" = '', \"signal\" = ''"
        " WHERE \"id\" = ?1 RETURNING \"attempt\"",
    [S_RUN_ATTEMPT] = "SELECT \"attempt\" FROM \"runs\" WHERE \"id\" = ?1",
    [S_RUN_SET_STATE] =
        "UPDATE \"runs\" SET \"state\" = ?2, \"error\" = coalesce(?3, \"error\"),"
        " \"ended_us\" = CASE WHEN ?4 THEN ?5 ELSE \"ended_us\" END WHERE \"id\" = ?1",
    [S_RUN_HEARTBEAT] = "UPDATE \"runs\" SET \"heartbeat_us\" = ?2 WHERE \"id\" = ?1",
    [S_RUN_ADD_COUNTS] = "UPDATE \"runs\" SET \"rows\" = \"rows\" + ?2, \"bytes\" = \"bytes\" + ?3,"
                         " \"batches\" = \"batches\" + ?4, \"verified\" = \"verified\" + ?5,"
                         " \"diverged\" = \"diverged\" + ?6 WHERE \"id\" = ?1",
    [S_RUN_REQUEST] = "UPDATE \"runs\" SET \"signal\" = ?2 WHERE \"id\" = ?1",
    [S_RUN_REQUESTED] = "SELECT \"signal\" FROM \"runs\" WHERE \"id\" = ?1",
    [S_RES_UPSERT] =
        "INSERT INTO \"run_resources\" (\"run_id\", \"resource\", \"mode\", \"write\", \"route\","
        " \"state\", \"rows\", \"bytes\", \"batches\", \"verified\", \"diverged\", \"error\","
        " \"updated_us\") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        " ON CONFLICT (\"run_id\", \"resource\") DO UPDATE SET"
        " \"mode\" = CASE WHEN excluded.\"mode\" <> '' THEN excluded.\"mode\" ELSE \"mode\" END,"
        " \"write\" = CASE WHEN excluded.\"write\" <> '' THEN excluded.\"write\""
        " ELSE \"write\" END,"
        " \"route\" = CASE WHEN excluded.\"route\" <> '' THEN excluded.\"route\""
        " ELSE \"route\" END,"
        " \"state\" = CASE WHEN excluded.\"state\" <> '' THEN excluded.\"state\""
        " ELSE \"state\" END,"
        " \"error\" = excluded.\"error\", \"updated_us\" = excluded.\"updated_us\"",
    [S_RES_ADD_COUNTS] =
        "INSERT INTO \"run_resources\" (\"run_id\", \"resource\", \"state\", \"rows\", \"bytes\","
        " \"batches\", \"verified\", \"diverged\", \"updated_us\")"
        " VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7, ?8)"
        " ON CONFLICT (\"run_id\", \"resource\") DO UPDATE SET"
        " \"rows\" = \"rows\" + excluded.\"rows\", \"bytes\" = \"bytes\" + excluded.\"bytes\","
        " \"batches\" = \"batches\" + excluded.\"batches\","
        " \"verified\" = \"verified\" + excluded.\"verified\","
        " \"diverged\" = \"diverged\" + excluded.\"diverged\","
        " \"updated_us\" = excluded.\"updated_us\"",
    [S_RES_SET_STATE] =
        "INSERT INTO \"run_resources\" (\"run_id\", \"resource\", \"state\", \"error\","
        " \"updated_us\") VALUES (?1, ?2, ?3, coalesce(?4, ''), ?5)"
        " ON CONFLICT (\"run_id\", \"resource\") DO UPDATE SET \"state\" = excluded.\"state\","
        " \"error\" = coalesce(?4, \"error\"), \"updated_us\" = excluded.\"updated_us\"",
    [S_RES_LIST] = "SELECT \"resource\", \"mode\", \"write\", \"state\", \"rows\", \"bytes\","
                   " \"batches\", \"verified\", \"diverged\", \"error\", \"route\","
                   " \"skipped\" FROM \"run_resources\" WHERE \"run_id\" = ?1 ORDER BY \"rowid\"",
    [S_PLAN_GET] = "SELECT \"plan\" FROM \"plans\" WHERE \"run_id\" = ?1 AND \"resource\" = ?2",
    [S_PLAN_PUT] = "INSERT INTO \"plans\" (\"run_id\", \"resource\", \"plan\", \"created_us\")"
                   " VALUES (?1, ?2, ?3, ?4)",
    [S_RUNCP_SAVE] =
        "INSERT INTO \"run_checkpoints\" (\"run_id\", \"resource\", \"shard\", \"attempt\","
        " \"position\", \"updated_us\") VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        " ON CONFLICT (\"run_id\", \"resource\", \"shard\") DO UPDATE SET"
        " \"attempt\" = excluded.\"attempt\", \"position\" = excluded.\"position\","
        " \"updated_us\" = excluded.\"updated_us\"",
    [S_RUNCP_LIST] = "SELECT \"resource\", " CP_COLUMNS " FROM \"run_checkpoints\""
                     " WHERE \"run_id\" = ?1 AND \"resource\" = ?2 ORDER BY \"shard\"",
    [S_RUNCP_LIST_ALL] = "SELECT \"resource\", " CP_COLUMNS " FROM \"run_checkpoints\""
                         " WHERE \"run_id\" = ?1 ORDER BY \"resource\", \"shard\"",
    [S_PENDING_SAVE] =
        "INSERT INTO \"pending_checkpoints\" (\"run_id\", \"attempt\", \"resource\", \"shard\","
        " \"position\", \"updated_us\") VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        " ON CONFLICT (\"run_id\", \"attempt\", \"resource\", \"shard\") DO UPDATE SET"
        " \"position\" = excluded.\"position\", \"updated_us\" = excluded.\"updated_us\"",
    [S_PENDING_PROMOTE] =
        "INSERT INTO \"run_checkpoints\" (\"run_id\", \"resource\", \"shard\", \"attempt\","
        " \"position\", \"updated_us\") SELECT \"run_id\", \"resource\", \"shard\", \"attempt\","
        " \"position\", ?3 FROM \"pending_checkpoints\" WHERE \"run_id\" = ?1 AND"
        " \"attempt\" = ?2 ORDER BY \"resource\", \"shard\""
        " ON CONFLICT (\"run_id\", \"resource\", \"shard\") DO UPDATE SET"
        " \"attempt\" = excluded.\"attempt\", \"position\" = excluded.\"position\","
        " \"updated_us\" = excluded.\"updated_us\"",
    [S_PENDING_DELETE] =
        "DELETE FROM \"pending_checkpoints\" WHERE \"run_id\" = ?1 AND \"attempt\" = ?2",
    [S_ROUTE_SAVE] =
        "INSERT INTO \"route_checkpoints\" (\"pipeline\", \"version\", \"route\", \"shard\","
        " \"position\", \"run_id\", \"updated_us\") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
        " ON CONFLICT (\"pipeline\", \"version\", \"route\", \"shard\") DO UPDATE SET"
        " \"position\" = excluded.\"position\", \"run_id\" = excluded.\"run_id\","
        " \"updated_us\" = excluded.\"updated_us\"",
    [S_ROUTE_LIST] = "SELECT \"route\", " CP_COLUMNS ", \"version\", \"pipeline\""
                     " FROM \"route_checkpoints\" WHERE \"pipeline\" = ?1 AND \"version\" = ?2"
                     " AND \"route\" = ?3 ORDER BY \"shard\"",
    [S_ROUTE_LIST_ALL] = "SELECT \"route\", " CP_COLUMNS ", \"version\", \"pipeline\""
                         " FROM \"route_checkpoints\""
                         " ORDER BY \"pipeline\", \"version\", \"route\", \"shard\"",
    [S_ROUTE_LIST_PIPELINE] = "SELECT \"route\", " CP_COLUMNS ", \"version\", \"pipeline\""
                              " FROM \"route_checkpoints\" WHERE \"pipeline\" = ?1"
                              " ORDER BY \"version\", \"route\", \"shard\"",
    [S_EVENT_APPEND] = "INSERT INTO \"events\" (\"time_us\", \"run_id\", \"attempt\","
                       " \"resource\", \"type\", \"payload\") VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [S_EVENT_READ_ALL] = "SELECT " EVENT_COLUMNS " FROM \"events\" WHERE \"seq\" > ?1"
                         " ORDER BY \"seq\" LIMIT ?2",
    [S_EVENT_READ_RUN] = "SELECT " EVENT_COLUMNS " FROM \"events\" WHERE \"run_id\" = ?3 AND"
                         " \"seq\" > ?1 ORDER BY \"seq\" LIMIT ?2",
    [S_EVENT_LAST] = "SELECT coalesce(max(\"seq\"), 0) FROM \"events\"",
    [S_MARK_GET] = "SELECT \"seq\" FROM \"marks\" WHERE \"consumer\" = ?1",
    [S_MARK_SET] =
        "INSERT INTO \"marks\" (\"consumer\", \"seq\", \"updated_us\") VALUES (?1, ?2, ?3)"
        " ON CONFLICT (\"consumer\") DO UPDATE SET \"seq\" = excluded.\"seq\","
        " \"updated_us\" = excluded.\"updated_us\"",
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_SAVEPOINT] = "SAVEPOINT \"ferry_op\"",
    [S_RELEASE] = "RELEASE \"ferry_op\"",
    [S_ROLLBACK_TO] = "ROLLBACK TO \"ferry_op\"",
};

struct ferry_store {
    sqlite3 *db;
    char *path;
    int schema_version;
    bool in_tx;         /* inside ferry_store_begin .. commit/rollback */
    int last_sqlite_rc; /* primary code of the last SQLite failure, for diagnosis at open */
    sqlite3_stmt *stmts[S_MAX];
};

/* ---- errors ---- */

static int code_for_sqlite(sqlite3 *db, int rc)
{
    int sys = db ? sqlite3_system_errno(db) : 0;
    switch (rc & 0xff) {
    case SQLITE_FULL:
        return FERRY_ENOSPC;
    case SQLITE_NOMEM:
        return FERRY_ENOMEM;
    case SQLITE_IOERR:
        return sys == ENOSPC ? FERRY_ENOSPC : FERRY_EIO;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
        return FERRY_EIO;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return FERRY_ETIMEOUT;
    case SQLITE_CONSTRAINT:
        return FERRY_ECONFLICT;
    default:
        return FERRY_ESTORE;
    }
}

/* "state PATH: <what>: <why>", with a hint for the failures a person must act on. */
static int sqlfail_db(sqlite3 *db, const char *path, int rc, const char *what,
                      struct ferry_error *err)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    int code = code_for_sqlite(db, rc);
    int prim = rc & 0xff;
    int sys = db ? sqlite3_system_errno(db) : 0;
    if (prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB)
        return ferry_error_set(err, FERRY_ESTORE, "sqlite",
                               "state %s: %s: the state file is corrupt or not a SQLite database"
                               " (%s); restore it from a backup or move it aside",
                               path, what, msg);
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED)
        return ferry_error_set(err, code, "sqlite",
                               "state %s: %s: the state file stayed locked by another writer for"
                               " more than %d s (%s)",
                               path, what, BUSY_TIMEOUT_MS / 1000, msg);
    if (code == FERRY_ENOSPC)
        return ferry_error_set(err, code, "sqlite", "state %s: %s: no space left on device (%s)",
                               path, what, msg);
    if ((prim == SQLITE_IOERR || prim == SQLITE_CANTOPEN) && sys != 0)
        return ferry_error_set(err, code, "sqlite", "state %s: %s: %s (%s)", path, what, msg,
                               strerror(sys));
    return ferry_error_set(err, code, "sqlite", "state %s: %s: %s", path, what, msg);
}

static int sqlfail(struct ferry_store *st, int rc, const char *what, struct ferry_error *err)
{
    st->last_sqlite_rc = rc & 0xff;
    return sqlfail_db(st->db, st->path, rc, what, err);
}

static int fail(struct ferry_store *st, int code, struct ferry_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct ferry_store *st, int code, struct ferry_error *err, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ferry_error_set(err, code, "store", "state %s: %s", st->path, msg);
}

/* ---- statements ---- */

/* The cached statement, reset and with its bindings cleared; NULL on failure (err set). */
static sqlite3_stmt *stmt(struct ferry_store *st, enum stmt_id id, struct ferry_error *err)
{
    sqlite3_stmt *s = st->stmts[id];
    if (s == NULL) {
        int rc = sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
        if (rc != SQLITE_OK) {
            sqlfail(st, rc, "preparing a statement", err);
            return NULL;
        }
        st->stmts[id] = s;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v == NULL)
        sqlite3_bind_null(s, i);
    else
        sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

/* Steps a statement that returns no row we need; resets it. */
static int run_stmt(struct ferry_store *st, sqlite3_stmt *s, const char *what,
                    struct ferry_error *err)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return sqlfail(st, rc, what, err);
    return FERRY_OK;
}

static int exec_id(struct ferry_store *st, enum stmt_id id, const char *what,
                   struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, id, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    return run_stmt(st, s, what, err);
}

static const char *col_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

static int check_json(struct ferry_store *st, const char *text, const char *what, bool object_only,
                      struct ferry_error *err)
{
    if (text == NULL) return fail(st, FERRY_EINVAL, err, "%s: missing JSON", what);
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (v == NULL)
        return fail(st, FERRY_EINVAL, err, "%s: not valid JSON (%s at column %d)", what, je.text,
                    je.column);
    bool ok = !object_only || json_is_object(v);
    json_decref(v);
    if (!ok) return fail(st, FERRY_EINVAL, err, "%s: not a JSON object", what);
    return FERRY_OK;
}

/* ---- transactions ----
 * op_begin/op_end make a multi-statement change atomic: a BEGIN IMMEDIATE transaction of
 * its own, or a savepoint inside the caller's explicit transaction. IMMEDIATE takes the
 * write lock first, so a check (fencing) and the write that follows cannot interleave with
 * another writer, and the busy timeout applies there rather than at a later upgrade. */

static int op_begin(struct ferry_store *st, struct ferry_error *err)
{
    return exec_id(st, st->in_tx ? S_SAVEPOINT : S_BEGIN, "starting a transaction", err);
}

static int op_end(struct ferry_store *st, int rc, struct ferry_error *err)
{
    if (st->in_tx) {
        if (rc != FERRY_OK) exec_id(st, S_ROLLBACK_TO, "rolling back", NULL);
        int r2 = exec_id(st, S_RELEASE, "releasing a savepoint", rc == FERRY_OK ? err : NULL);
        return rc != FERRY_OK ? rc : r2;
    }
    if (rc == FERRY_OK) {
        rc = exec_id(st, S_COMMIT, "committing", err);
        if (rc == FERRY_OK) return FERRY_OK;
    }
    if (!sqlite3_get_autocommit(st->db)) exec_id(st, S_ROLLBACK, "rolling back", NULL);
    return rc;
}

int ferry_store_begin(struct ferry_store *st, struct ferry_error *err)
{
    if (st->in_tx) return fail(st, FERRY_EINVAL, err, "a transaction is already open");
    int rc = exec_id(st, S_BEGIN, "starting a transaction", err);
    if (rc == FERRY_OK) st->in_tx = true;
    return rc;
}

int ferry_store_commit(struct ferry_store *st, struct ferry_error *err)
{
    if (!st->in_tx) return fail(st, FERRY_EINVAL, err, "commit without a transaction");
    int rc = ferry_failpoint_check("before_store_commit", err);
    if (rc == FERRY_OK) rc = exec_id(st, S_COMMIT, "committing", err);
    if (rc != FERRY_OK && !sqlite3_get_autocommit(st->db))
        exec_id(st, S_ROLLBACK, "rolling back", NULL);
    st->in_tx = false;
    return rc;
}

void ferry_store_rollback(struct ferry_store *st)
{
    if (st == NULL) return;
    if (!sqlite3_get_autocommit(st->db)) exec_id(st, S_ROLLBACK, "rolling back", NULL);
    st->in_tx = false;
}

/* ---- open ---- */

static int mkdir_parents(const char *path, struct ferry_error *err)
{
    char *dir = ferry_strdup(path);
    if (dir == NULL) return ferry_error_set(err, FERRY_ENOMEM, "store", "out of memory");
    char *slash = strrchr(dir, '/');
    int rc = FERRY_OK;
    if (slash == NULL || slash == dir) goto out;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        struct stat sb;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            rc = ferry_error_set(err, e == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "store",
                                 "state %s: cannot create folder %s: %s", path, dir, strerror(e));
            goto out;
        }
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            rc = ferry_error_set(err, FERRY_EIO, "store", "state %s: %s exists and is not a folder",
                                 path, dir);
            goto out;
        }
        if (end) break;
        *p = '/';
    }
out:
    ferry_free(dir);
    return rc;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A path that exists must be a regular file. stat() only: opening a descriptor on the file
 * here would be unsafe (see explain_damage). */
static int check_path(const char *path, struct ferry_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return FERRY_OK;
    return ferry_error_set(err, FERRY_EIO, "store", "state %s: %s", path,
                           S_ISDIR(sb.st_mode) ? "is a folder, not a state file"
                                               : "not a regular file");
}

/* Called only after SQLite found the file corrupt or not a database, and after our own
 * connection is closed, to say why in words a person can act on. It reads the header through
 * a descriptor of its own, which is why it never runs on a healthy file: POSIX advisory locks
 * belong to the process, so closing ANY descriptor of a database file drops the locks that
 * this process's other SQLite connections hold on it, and another process could then write
 * at the same time and lose commits. Leaves err alone when the header explains nothing. */
static void explain_damage(const char *path, struct ferry_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat sb;
    unsigned char h[100];
    ssize_t got = fstat(fd, &sb) == 0 ? read(fd, h, sizeof h) : -1;
    close(fd);
    if (got < 0) return;
    static const char magic[16] = "SQLite format 3";
    if (got < 16 || memcmp(h, magic, 16) != 0) {
        ferry_error_set(err, FERRY_ESTORE, "store",
                        "state %s: not a SQLite database (its first bytes are not the SQLite"
                        " header); move it aside or name another state file",
                        path);
        return;
    }
    if (got < (ssize_t)sizeof h) {
        ferry_error_set(err, FERRY_ESTORE, "store",
                        "state %s: the state file is truncated (%lld bytes, shorter than its"
                        " header); restore it from a backup or move it aside",
                        path, (long long)sb.st_size);
        return;
    }
    uint32_t page = (uint32_t)h[16] << 8 | h[17];
    if (page == 1) page = 65536;
    uint32_t pages = be32(h + 28);
    bool count_valid = pages > 0 && be32(h + 24) == be32(h + 92);
    bool page_valid = page >= 512 && (page & (page - 1)) == 0;
    if (page_valid && ((count_valid && (long long)pages * page > (long long)sb.st_size) ||
                       sb.st_size % page != 0))
        ferry_error_set(err, FERRY_ESTORE, "store",
                        "state %s: the state file is truncated (its header counts %u pages of %u"
                        " bytes, the file has %lld bytes); restore it from a backup or move it"
                        " aside",
                        path, pages, page, (long long)sb.st_size);
}

static int exec_sql(struct ferry_store *st, const char *sql, const char *what,
                    struct ferry_error *err)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? FERRY_OK : sqlfail(st, rc, what, err);
}

static int query_int(struct ferry_store *st, const char *sql, int64_t *out, const char *what,
                     struct ferry_error *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(s, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) sqlfail(st, rc, what, err);
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? FERRY_OK : (err ? err->code : FERRY_ESTORE);
}

/* One migration step in its own transaction; *done when the schema is current. */
static int migrate_step(struct ferry_store *st, bool *done, struct ferry_error *err)
{
    int rc = exec_sql(st, "BEGIN IMMEDIATE", "starting the migration transaction", err);
    if (rc != FERRY_OK) return rc;
    int64_t has_table = 0, others = 0, cur = 0;
    rc = query_int(st,
                   "SELECT count(*) FROM \"sqlite_master\" WHERE \"type\" = 'table' AND"
                   " \"name\" = 'schema_migrations'",
                   &has_table, "reading the schema", err);
    if (rc == FERRY_OK && !has_table)
        rc = query_int(st,
                       "SELECT count(*) FROM \"sqlite_master\" WHERE \"type\" = 'table' AND"
                       " \"name\" NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                       &others, "reading the schema", err);
    if (rc == FERRY_OK && others > 0)
        rc = fail(st, FERRY_ESTORE, err,
                  "a SQLite database that ferry did not create (it has tables but no"
                  " schema_migrations); refusing to use it as the state store");
    if (rc == FERRY_OK && !has_table)
        rc = exec_sql(st,
                      "CREATE TABLE \"schema_migrations\" (\"version\" INTEGER PRIMARY KEY,"
                      " \"applied_at\" INTEGER NOT NULL)",
                      "creating schema_migrations", err);
    if (rc == FERRY_OK)
        rc = query_int(st, "SELECT coalesce(max(\"version\"), 0) FROM \"schema_migrations\"", &cur,
                       "reading schema_migrations", err);
    if (rc == FERRY_OK && cur > SCHEMA_VERSION)
        rc = fail(st, FERRY_EUNSUPPORTED, err,
                  "schema version %lld is newer than this ferry knows (%d); upgrade ferry or"
                  " name another state file",
                  (long long)cur, SCHEMA_VERSION);
    if (rc == FERRY_OK && cur < SCHEMA_VERSION) {
        char what[64];
        snprintf(what, sizeof what, "applying migration %lld", (long long)cur + 1);
        rc = exec_sql(st, migrations[cur], what, err);
        if (rc == FERRY_OK) {
            char *ins = ferry_asprintf("INSERT INTO \"schema_migrations\" (\"version\","
                                       " \"applied_at\") VALUES (%lld, %lld)",
                                       (long long)cur + 1, (long long)ferry_now_wall_us());
            rc = ins ? exec_sql(st, ins, what, err)
                     : ferry_error_set(err, FERRY_ENOMEM, "store", "out of memory");
            ferry_free(ins);
        }
        cur++;
    }
    if (rc == FERRY_OK) rc = exec_sql(st, "COMMIT", "committing a migration", err);
    if (rc != FERRY_OK) {
        if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    st->schema_version = (int)cur;
    *done = cur == SCHEMA_VERSION;
    return FERRY_OK;
}

static int set_pragmas(struct ferry_store *st, struct ferry_error *err)
{
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
    sqlite3_stmt *s = NULL;
    int rc;
    /* Two processes opening a new state file at once (`serve --role api` and `--role
     * control`) can both hold a shared lock while each needs an exclusive one to switch the
     * journal mode: SQLite then answers BUSY at once instead of waiting. Each try releases
     * its lock, so retrying with a small staggered pause lets one of them win. */
    for (int tries = 0;; tries++) {
        rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) break;
        sqlite3_finalize(s);
        s = NULL;
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) break;
        if (tries >= 200) break;
        usleep((useconds_t)(20000 + (getpid() % 7) * 7000));
    }
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        return sqlfail(st, rc, "switching to WAL mode", err);
    }
    bool wal = strcmp(col_text(s, 0), "wal") == 0;
    sqlite3_finalize(s);
    if (!wal)
        return fail(st, FERRY_ESTORE, err,
                    "the file system refused WAL mode (network file systems do); put the state"
                    " file on a local disk");
    rc = exec_sql(st, "PRAGMA synchronous = FULL", "setting synchronous", err);
    if (rc == FERRY_OK) rc = exec_sql(st, "PRAGMA foreign_keys = ON", "enabling foreign keys", err);
    return rc;
}

static char *path_from_url(const char *url)
{
    const char *p = url;
    if (strncmp(p, "sqlite:", 7) == 0) {
        p += 7;
        if (strncmp(p, "//", 2) == 0) p += 2; /* sqlite:///abs/path, sqlite://rel/path */
    }
    return ferry_strdup(p);
}

int ferry_store_open(const char *url, struct ferry_store **out, struct ferry_error *err)
{
    *out = NULL;
    if (url == NULL || url[0] == '\0')
        return ferry_error_set(err, FERRY_EINVAL, "store", "state store: no path given");
    if (strncmp(url, "postgres:", 9) == 0 || strncmp(url, "postgresql:", 11) == 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "store",
                               "state store: PostgreSQL state is not available in this build;"
                               " use a SQLite file path");
    struct ferry_store *st = ferry_calloc(1, sizeof *st);
    if (st == NULL || (st->path = path_from_url(url)) == NULL) {
        ferry_free(st);
        return ferry_error_set(err, FERRY_ENOMEM, "store", "state store: out of memory");
    }
    int rc = st->path[0] ? FERRY_OK
                         : ferry_error_set(err, FERRY_EINVAL, "store", "state store: empty path");
    if (rc == FERRY_OK) rc = mkdir_parents(st->path, err);
    if (rc == FERRY_OK) rc = check_path(st->path, err);
    if (rc == FERRY_OK) {
        int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
        int src = sqlite3_open_v2(st->path, &st->db, flags, NULL);
        if (src != SQLITE_OK) rc = sqlfail(st, src, "opening the state file", err);
    }
    if (rc == FERRY_OK) rc = set_pragmas(st, err);
    for (bool done = false; rc == FERRY_OK && !done;)
        rc = migrate_step(st, &done, err);
    if (rc != FERRY_OK &&
        (st->last_sqlite_rc == SQLITE_CORRUPT || st->last_sqlite_rc == SQLITE_NOTADB)) {
        sqlite3_close_v2(st->db);
        st->db = NULL;
        explain_damage(st->path, err);
    }
    if (rc != FERRY_OK) {
        ferry_store_close(st);
        return rc;
    }
    *out = st;
    return FERRY_OK;
}

void ferry_store_close(struct ferry_store *st)
{
    if (st == NULL) return;
    for (int i = 0; i < S_MAX; i++)
        sqlite3_finalize(st->stmts[i]);
    if (st->db) {
        if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close_v2(st->db);
    }
    ferry_free(st->path);
    ferry_free(st);
}

const char *ferry_store_path(const struct ferry_store *st)
{
    return st->path;
}

int ferry_store_schema_version(struct ferry_store *st)
{
    return st->schema_version;
}

/* ---- fencing ---- */

/* Refuses unless `attempt` is the run's current attempt. Call inside op_begin/op_end. */
static int fence(struct ferry_store *st, int64_t run_id, int attempt, const char *what,
                 struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RUN_ATTEMPT, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    int rc = sqlite3_step(s);
    int current = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
    sqlite3_reset(s);
    if (rc == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found (while trying to %s)",
                    (long long)run_id, what);
    if (rc != SQLITE_ROW) return sqlfail(st, rc, "reading the run's attempt", err);
    if (current != attempt)
        return fail(st, FERRY_EFENCED, err,
                    "run %lld: attempt %d is fenced, the run's current attempt is %d; refusing"
                    " to %s",
                    (long long)run_id, attempt, current, what);
    return FERRY_OK;
}

/* ---- pipelines ---- */

int ferry_store_pipeline_put(struct ferry_store *st, const char *name, const char *version,
                             const char *spec_json, struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_PIPELINE_PUT, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, name);
    bind_text(s, 2, version);
    bind_text(s, 3, spec_json ? spec_json : "{}");
    sqlite3_bind_int64(s, 4, ferry_now_wall_us());
    char what[320];
    snprintf(what, sizeof what, "recording pipeline %s", name ? name : "(null)");
    return run_stmt(st, s, what, err);
}

/* ---- runs ---- */

static int read_run(sqlite3_stmt *s, struct ferry_run_info *r)
{
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(s, 0);
    snprintf(r->pipeline, sizeof r->pipeline, "%s", col_text(s, 1));
    snprintf(r->version, sizeof r->version, "%s", col_text(s, 2));
    if (ferry_run_state_from_name(col_text(s, 3), &r->state) != FERRY_OK)
        r->state = FERRY_RUN_FAILED;
    r->attempt = sqlite3_column_int(s, 4);
    r->pid = sqlite3_column_int(s, 5);
    r->created_us = sqlite3_column_int64(s, 6);
    r->started_us = sqlite3_column_int64(s, 7);
    r->ended_us = sqlite3_column_int64(s, 8);
    r->heartbeat_us = sqlite3_column_int64(s, 9);
    r->rows = sqlite3_column_int64(s, 10);
    r->bytes = sqlite3_column_int64(s, 11);
    r->batches = sqlite3_column_int64(s, 12);
    r->verified = sqlite3_column_int64(s, 13);
    r->diverged = sqlite3_column_int64(s, 14);
    snprintf(r->error, sizeof r->error, "%s", col_text(s, 15));
    if (sqlite3_column_type(s, 16) != SQLITE_NULL) {
        r->request = ferry_strdup(col_text(s, 16));
        if (r->request == NULL) return FERRY_ENOMEM;
    }
    return FERRY_OK;
}

int ferry_store_run_create(struct ferry_store *st, const char *pipeline, const char *version,
                           const char *request_json, int64_t *run_id, struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RUN_CREATE, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, pipeline ? pipeline : "");
    bind_text(s, 2, version ? version : "");
    sqlite3_bind_int64(s, 3, ferry_now_wall_us());
    bind_text(s, 4, request_json);
    int rc = run_stmt(st, s, "creating a run", err);
    if (rc == FERRY_OK) *run_id = sqlite3_last_insert_rowid(st->db);
    return rc;
}

/* Steps a statement selecting RUN_COLUMNS for at most one row. */
static int one_run(struct ferry_store *st, sqlite3_stmt *s, struct ferry_run_info *out, bool *found,
                   const char *what, struct ferry_error *err)
{
    int rc = sqlite3_step(s);
    int ret = FERRY_OK;
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) {
        if (read_run(s, out) != FERRY_OK) ret = fail(st, FERRY_ENOMEM, err, "out of memory");
    } else if (rc != SQLITE_DONE) {
        ret = sqlfail(st, rc, what, err);
    }
    sqlite3_reset(s);
    return ret;
}

int ferry_store_run_get(struct ferry_store *st, int64_t run_id, struct ferry_run_info *out,
                        struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = stmt(st, S_RUN_GET, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bool found = false;
    int rc = one_run(st, s, out, &found, "reading a run", err);
    if (rc == FERRY_OK && !found)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    return rc;
}

int ferry_store_run_list(struct ferry_store *st, const char *pipeline, int limit,
                         struct ferry_run_info **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt(st, pipeline ? S_RUN_LIST_PIPELINE : S_RUN_LIST_ALL, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    int i = 1;
    if (pipeline) bind_text(s, i++, pipeline);
    sqlite3_bind_int64(s, i, limit > 0 ? limit : -1);
    struct ferry_run_info *v = NULL;
    int cnt = 0, cap = 0, rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 16;
            struct ferry_run_info *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        if (read_run(s, &v[cnt]) != FERRY_OK) {
            cnt++;
            break;
        }
        cnt++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ferry_run_infos_free(v, cnt);
        if (rc == SQLITE_ROW) return fail(st, FERRY_ENOMEM, err, "listing runs: out of memory");
        return sqlfail(st, rc, "listing runs", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_run_find_unfinished(struct ferry_store *st, const char *pipeline,
                                    const char *version, struct ferry_run_info *out, bool *found,
                                    struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    *found = false;
    sqlite3_stmt *s = stmt(st, S_RUN_UNFINISHED, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, pipeline ? pipeline : "");
    bind_text(s, 2, version ? version : "");
    return one_run(st, s, out, found, "finding an unfinished run", err);
}

int ferry_store_run_begin_attempt(struct ferry_store *st, int64_t run_id, int pid, int *attempt,
                                  struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RUN_BEGIN_ATTEMPT, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int(s, 2, pid);
    sqlite3_bind_int64(s, 3, ferry_now_wall_us());
    int rc = sqlite3_step(s);
    int a = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
    if (rc == SQLITE_ROW) rc = sqlite3_step(s); /* finishes the statement, commits */
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return sqlfail(st, rc, "starting a new attempt", err);
    if (a == 0) return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    *attempt = a;
    return FERRY_OK;
}

int ferry_store_run_set_state(struct ferry_store *st, int64_t run_id, int attempt,
                              enum ferry_run_state state, const char *error_message,
                              struct ferry_error *err)
{
    if ((int)state < 0 || state >= FERRY_RUN_STATE_MAX)
        return fail(st, FERRY_EINVAL, err, "run %lld: invalid state %d", (long long)run_id,
                    (int)state);
    char what[64];
    snprintf(what, sizeof what, "set the state to %s", ferry_run_state_name(state));
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    rc = fence(st, run_id, attempt, what, err);
    sqlite3_stmt *s = rc == FERRY_OK ? stmt(st, S_RUN_SET_STATE, err) : NULL;
    if (rc == FERRY_OK && s == NULL) rc = err ? err->code : FERRY_ESTORE;
    if (rc == FERRY_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        bind_text(s, 2, ferry_run_state_name(state));
        bind_text(s, 3, error_message);
        sqlite3_bind_int(s, 4, ferry_run_state_is_final(state));
        sqlite3_bind_int64(s, 5, ferry_now_wall_us());
        rc = run_stmt(st, s, "changing a run's state", err);
    }
    return op_end(st, rc, err);
}

int ferry_store_run_heartbeat(struct ferry_store *st, int64_t run_id, int attempt,
                              struct ferry_error *err)
{
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    rc = fence(st, run_id, attempt, "record a heartbeat", err);
    sqlite3_stmt *s = rc == FERRY_OK ? stmt(st, S_RUN_HEARTBEAT, err) : NULL;
    if (rc == FERRY_OK && s == NULL) rc = err ? err->code : FERRY_ESTORE;
    if (rc == FERRY_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        sqlite3_bind_int64(s, 2, ferry_now_wall_us());
        rc = run_stmt(st, s, "recording a heartbeat", err);
    }
    return op_end(st, rc, err);
}

int ferry_store_run_add_counts(struct ferry_store *st, int64_t run_id, int64_t rows, int64_t bytes,
                               int64_t batches, int64_t verified, int64_t diverged,
                               struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RUN_ADD_COUNTS, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int64(s, 2, rows);
    sqlite3_bind_int64(s, 3, bytes);
    sqlite3_bind_int64(s, 4, batches);
    sqlite3_bind_int64(s, 5, verified);
    sqlite3_bind_int64(s, 6, diverged);
    int rc = run_stmt(st, s, "adding to a run's counters", err);
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    return rc;
}

int ferry_store_run_request(struct ferry_store *st, int64_t run_id, const char *signal,
                            struct ferry_error *err)
{
    if (signal == NULL || (strcmp(signal, "pause") != 0 && strcmp(signal, "cancel") != 0))
        return fail(st, FERRY_EINVAL, err, "run %lld: unknown signal '%s' (pause or cancel)",
                    (long long)run_id, signal ? signal : "(null)");
    sqlite3_stmt *s = stmt(st, S_RUN_REQUEST, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, signal);
    int rc = run_stmt(st, s, "recording a signal", err);
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    return rc;
}

int ferry_store_run_requested(struct ferry_store *st, int64_t run_id, char *signal, size_t len,
                              struct ferry_error *err)
{
    if (len > 0) signal[0] = '\0';
    sqlite3_stmt *s = stmt(st, S_RUN_REQUESTED, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && len > 0) snprintf(signal, len, "%s", col_text(s, 0));
    sqlite3_reset(s);
    if (rc == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    if (rc != SQLITE_ROW) return sqlfail(st, rc, "reading a run's signal", err);
    return FERRY_OK;
}

/* ---- per-resource state ---- */

/* A write to a child row of a run that does not exist fails on the foreign key. */
static int child_fail(struct ferry_store *st, int rc, int64_t run_id, const char *what,
                      struct ferry_error *err)
{
    if (rc == FERRY_ECONFLICT && err != NULL &&
        sqlite3_extended_errcode(st->db) == SQLITE_CONSTRAINT_FOREIGNKEY)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found (while %s)", (long long)run_id,
                    what);
    return rc;
}

int ferry_store_resource_upsert(struct ferry_store *st, int64_t run_id,
                                const struct ferry_resource_state *rs, struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RES_UPSERT, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, rs->resource);
    bind_text(s, 3, rs->mode);
    bind_text(s, 4, rs->write);
    bind_text(s, 5, rs->route);
    bind_text(s, 6, rs->state[0] ? rs->state : "pending");
    sqlite3_bind_int64(s, 7, rs->rows);
    sqlite3_bind_int64(s, 8, rs->bytes);
    sqlite3_bind_int64(s, 9, rs->batches);
    sqlite3_bind_int64(s, 10, rs->verified);
    sqlite3_bind_int64(s, 11, rs->diverged);
    bind_text(s, 12, rs->error);
    sqlite3_bind_int64(s, 13, ferry_now_wall_us());
    char what[320];
    snprintf(what, sizeof what, "recording resource %s", rs->resource);
    return child_fail(st, run_stmt(st, s, what, err), run_id, what, err);
}

int ferry_store_resource_add_counts(struct ferry_store *st, int64_t run_id, const char *resource,
                                    int64_t rows, int64_t bytes, int64_t batches, int64_t verified,
                                    int64_t diverged, struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RES_ADD_COUNTS, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, resource);
    sqlite3_bind_int64(s, 3, rows);
    sqlite3_bind_int64(s, 4, bytes);
    sqlite3_bind_int64(s, 5, batches);
    sqlite3_bind_int64(s, 6, verified);
    sqlite3_bind_int64(s, 7, diverged);
    sqlite3_bind_int64(s, 8, ferry_now_wall_us());
    char what[320];
    snprintf(what, sizeof what, "adding to the counters of resource %s", resource);
    return child_fail(st, run_stmt(st, s, what, err), run_id, what, err);
}

int ferry_store_resource_set_state(struct ferry_store *st, int64_t run_id, const char *resource,
                                   const char *state, const char *error_message,
                                   struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_RES_SET_STATE, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, resource);
    bind_text(s, 3, state ? state : "");
    bind_text(s, 4, error_message);
    sqlite3_bind_int64(s, 5, ferry_now_wall_us());
    char what[320];
    snprintf(what, sizeof what, "setting the state of resource %s", resource);
    return child_fail(st, run_stmt(st, s, what, err), run_id, what, err);
}

int ferry_store_resource_list(struct ferry_store *st, int64_t run_id,
                              struct ferry_resource_state **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt(st, S_RES_LIST, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    struct ferry_resource_state *v = NULL;
    int cnt = 0, cap = 0, rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 8;
            struct ferry_resource_state *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        struct ferry_resource_state *r = &v[cnt++];
        memset(r, 0, sizeof *r);
        snprintf(r->resource, sizeof r->resource, "%s", col_text(s, 0));
        snprintf(r->mode, sizeof r->mode, "%s", col_text(s, 1));
        snprintf(r->write, sizeof r->write, "%s", col_text(s, 2));
        snprintf(r->state, sizeof r->state, "%s", col_text(s, 3));
        r->rows = sqlite3_column_int64(s, 4);
        r->bytes = sqlite3_column_int64(s, 5);
        r->batches = sqlite3_column_int64(s, 6);
        r->verified = sqlite3_column_int64(s, 7);
        r->diverged = sqlite3_column_int64(s, 8);
        snprintf(r->error, sizeof r->error, "%s", col_text(s, 9));
        snprintf(r->route, sizeof r->route, "%s", col_text(s, 10));
        r->skipped = sqlite3_column_int64(s, 11);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        ferry_free(v);
        if (rc == SQLITE_ROW)
            return fail(st, FERRY_ENOMEM, err, "listing resources: out of memory");
        return sqlfail(st, rc, "listing resources", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

/* Rare (once per shard with skipped records): prepared on the spot, not cached. */
int ferry_store_resource_skips_put(struct ferry_store *st, int64_t run_id, const char *resource,
                                   int64_t skipped, const char *skips_json,
                                   struct ferry_error *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(
        st->db,
        "INSERT INTO \"run_resources\" (\"run_id\", \"resource\", \"state\", \"skipped\","
        " \"skips\", \"updated_us\") VALUES (?1, ?2, 'running', ?3, ?4, ?5)"
        " ON CONFLICT (\"run_id\", \"resource\") DO UPDATE SET \"skipped\" = excluded.\"skipped\","
        " \"skips\" = excluded.\"skips\", \"updated_us\" = excluded.\"updated_us\"",
        -1, &s, NULL);
    char what[320];
    snprintf(what, sizeof what, "recording the skipped records of resource %s", resource);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(s);
        return sqlfail(st, rc, what, err);
    }
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, resource);
    sqlite3_bind_int64(s, 3, skipped);
    bind_text(s, 4, skips_json ? skips_json : "");
    sqlite3_bind_int64(s, 5, ferry_now_wall_us());
    rc = run_stmt(st, s, what, err);
    sqlite3_finalize(s);
    return child_fail(st, rc, run_id, what, err);
}

int ferry_store_resource_skips_get(struct ferry_store *st, int64_t run_id, const char *resource,
                                   char **skips_json, struct ferry_error *err)
{
    *skips_json = NULL;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT \"skips\" FROM \"run_resources\" WHERE \"run_id\" = ?1"
                                " AND \"resource\" = ?2",
                                -1, &s, NULL);
    char what[320];
    snprintf(what, sizeof what, "reading the skipped records of resource %s", resource);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        bind_text(s, 2, resource);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            const char *t = col_text(s, 0);
            if (t[0] != '\0' && (*skips_json = ferry_strdup(t)) == NULL) {
                sqlite3_finalize(s);
                return fail(st, FERRY_ENOMEM, err, "%s: out of memory", what);
            }
            rc = SQLITE_DONE;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? FERRY_OK : sqlfail(st, rc, what, err);
}

/* ---- plans ---- */

int ferry_store_plan_get(struct ferry_store *st, int64_t run_id, const char *resource,
                         char **plan_json, struct ferry_error *err)
{
    *plan_json = NULL;
    sqlite3_stmt *s = stmt(st, S_PLAN_GET, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, resource);
    int rc = sqlite3_step(s);
    int ret = FERRY_OK;
    if (rc == SQLITE_ROW) {
        *plan_json = ferry_strdup(col_text(s, 0));
        if (*plan_json == NULL) ret = fail(st, FERRY_ENOMEM, err, "reading a plan: out of memory");
    } else if (rc != SQLITE_DONE) {
        ret = sqlfail(st, rc, "reading a plan", err);
    }
    sqlite3_reset(s);
    return ret;
}

int ferry_store_plan_put(struct ferry_store *st, int64_t run_id, const char *resource,
                         const char *plan_json, struct ferry_error *err)
{
    char what[320];
    snprintf(what, sizeof what, "plan of run %lld, resource %s", (long long)run_id, resource);
    int rc = check_json(st, plan_json, what, false, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_stmt *s = stmt(st, S_PLAN_PUT, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    bind_text(s, 2, resource);
    bind_text(s, 3, plan_json);
    sqlite3_bind_int64(s, 4, ferry_now_wall_us());
    rc = run_stmt(st, s, what, err);
    if (rc == FERRY_ECONFLICT && sqlite3_extended_errcode(st->db) == SQLITE_CONSTRAINT_PRIMARYKEY)
        return fail(st, FERRY_ECONFLICT, err, "%s is already frozen; a resumed attempt reuses it",
                    what);
    return child_fail(st, rc, run_id, what, err);
}

/* ---- checkpoints ---- */

static int save_fenced_checkpoint(struct ferry_store *st, enum stmt_id id, int64_t run_id,
                                  int attempt, const char *resource, int shard,
                                  const char *position, struct ferry_error *err)
{
    char what[400];
    snprintf(what, sizeof what, "save the %s checkpoint of resource %s, shard %d",
             id == S_RUNCP_SAVE ? "run" : "pending", resource ? resource : "(null)", shard);
    int rc = check_json(st, position, what, false, err);
    if (rc != FERRY_OK) return rc;
    rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    rc = fence(st, run_id, attempt, what, err);
    sqlite3_stmt *s = rc == FERRY_OK ? stmt(st, id, err) : NULL;
    if (rc == FERRY_OK && s == NULL) rc = err ? err->code : FERRY_ESTORE;
    if (rc == FERRY_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        if (id == S_RUNCP_SAVE) {
            bind_text(s, 2, resource);
            sqlite3_bind_int(s, 3, shard);
            sqlite3_bind_int(s, 4, attempt);
        } else {
            sqlite3_bind_int(s, 2, attempt);
            bind_text(s, 3, resource);
            sqlite3_bind_int(s, 4, shard);
        }
        bind_text(s, 5, position);
        sqlite3_bind_int64(s, 6, ferry_now_wall_us());
        rc = run_stmt(st, s, what, err);
    }
    return op_end(st, rc, err);
}

int ferry_store_run_checkpoint_save(struct ferry_store *st, int64_t run_id, int attempt,
                                    const char *resource, int shard, const char *position,
                                    struct ferry_error *err)
{
    return save_fenced_checkpoint(st, S_RUNCP_SAVE, run_id, attempt, resource, shard, position,
                                  err);
}

int ferry_store_pending_checkpoint_save(struct ferry_store *st, int64_t run_id, int attempt,
                                        const char *resource, int shard, const char *position,
                                        struct ferry_error *err)
{
    return save_fenced_checkpoint(st, S_PENDING_SAVE, run_id, attempt, resource, shard, position,
                                  err);
}

int ferry_store_pending_promote(struct ferry_store *st, int64_t run_id, int attempt,
                                struct ferry_error *err)
{
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    rc = fence(st, run_id, attempt, "promote pending checkpoints", err);
    sqlite3_stmt *s = rc == FERRY_OK ? stmt(st, S_PENDING_PROMOTE, err) : NULL;
    if (rc == FERRY_OK && s == NULL) rc = err ? err->code : FERRY_ESTORE;
    if (rc == FERRY_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        sqlite3_bind_int(s, 2, attempt);
        sqlite3_bind_int64(s, 3, ferry_now_wall_us());
        rc = run_stmt(st, s, "promoting pending checkpoints", err);
    }
    s = rc == FERRY_OK ? stmt(st, S_PENDING_DELETE, err) : NULL;
    if (rc == FERRY_OK && s == NULL) rc = err ? err->code : FERRY_ESTORE;
    if (rc == FERRY_OK) {
        sqlite3_bind_int64(s, 1, run_id);
        sqlite3_bind_int(s, 2, attempt);
        rc = run_stmt(st, s, "clearing promoted pending checkpoints", err);
    }
    return op_end(st, rc, err);
}

/* Collects rows of (name, shard, run_id, position, updated_us[, version, pipeline]). */
static int collect_checkpoints(struct ferry_store *st, sqlite3_stmt *s, bool route,
                               struct ferry_checkpoint **out, char ***pipelines, int *n,
                               const char *what, struct ferry_error *err)
{
    struct ferry_checkpoint *v = NULL;
    char **names = NULL;
    int cnt = 0, cap = 0, rc = SQLITE_DONE;
    bool oom = false;
    while (!oom && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 8;
            struct ferry_checkpoint *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv != NULL) v = nv;
            char **nn = pipelines ? ferry_realloc(names, (size_t)ncap * sizeof *names) : NULL;
            if (nn != NULL) names = nn;
            if (nv == NULL || (pipelines && nn == NULL)) {
                oom = true;
                break;
            }
            cap = ncap;
        }
        struct ferry_checkpoint *c = &v[cnt];
        memset(c, 0, sizeof *c);
        if (pipelines) names[cnt] = NULL;
        cnt++;
        snprintf(c->resource, sizeof c->resource, "%s", col_text(s, 0));
        c->shard = sqlite3_column_int(s, 1);
        c->run_id = sqlite3_column_int64(s, 2);
        c->position = ferry_strdup(col_text(s, 3));
        c->updated_us = sqlite3_column_int64(s, 4);
        if (route) snprintf(c->version, sizeof c->version, "%s", col_text(s, 5));
        if (pipelines) names[cnt - 1] = ferry_strdup(col_text(s, 6));
        if (c->position == NULL || (pipelines && names[cnt - 1] == NULL)) oom = true;
    }
    sqlite3_reset(s);
    if (oom || rc != SQLITE_DONE) {
        ferry_checkpoints_free(v, cnt);
        ferry_store_strings_free(names, pipelines ? cnt : 0);
        if (oom) return fail(st, FERRY_ENOMEM, err, "%s: out of memory", what);
        return sqlfail(st, rc, what, err);
    }
    *out = v;
    if (pipelines) *pipelines = names;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_run_checkpoints(struct ferry_store *st, int64_t run_id, const char *resource,
                                struct ferry_checkpoint **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt(st, resource ? S_RUNCP_LIST : S_RUNCP_LIST_ALL, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, run_id);
    if (resource) bind_text(s, 2, resource);
    return collect_checkpoints(st, s, false, out, NULL, n, "reading run checkpoints", err);
}

int ferry_store_route_checkpoint_save(struct ferry_store *st, const char *pipeline,
                                      const char *version, const char *route, int shard,
                                      const char *position, int64_t run_id, struct ferry_error *err)
{
    char what[640];
    snprintf(what, sizeof what, "route checkpoint of pipeline %s, route %s, shard %d",
             pipeline ? pipeline : "(null)", route ? route : "(null)", shard);
    int rc = check_json(st, position, what, false, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_stmt *s = stmt(st, S_ROUTE_SAVE, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, pipeline);
    bind_text(s, 2, version);
    bind_text(s, 3, route);
    sqlite3_bind_int(s, 4, shard);
    bind_text(s, 5, position);
    sqlite3_bind_int64(s, 6, run_id);
    sqlite3_bind_int64(s, 7, ferry_now_wall_us());
    return run_stmt(st, s, what, err);
}

int ferry_store_route_checkpoints(struct ferry_store *st, const char *pipeline, const char *version,
                                  const char *route, struct ferry_checkpoint **out, int *n,
                                  struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt(st, S_ROUTE_LIST, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, pipeline);
    bind_text(s, 2, version);
    bind_text(s, 3, route);
    return collect_checkpoints(st, s, true, out, NULL, n, "reading route checkpoints", err);
}

int ferry_store_route_checkpoint_list(struct ferry_store *st, const char *pipeline,
                                      struct ferry_checkpoint **out, char ***pipelines, int *n,
                                      struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    if (pipelines) *pipelines = NULL;
    sqlite3_stmt *s = stmt(st, pipeline ? S_ROUTE_LIST_PIPELINE : S_ROUTE_LIST_ALL, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    if (pipeline) bind_text(s, 1, pipeline);
    return collect_checkpoints(st, s, true, out, pipelines, n, "listing route checkpoints", err);
}

/* ---- event log ---- */

int ferry_store_event_append(struct ferry_store *st, struct ferry_event *ev,
                             struct ferry_error *err)
{
    if (ev->type[0] == '\0') return fail(st, FERRY_EINVAL, err, "event without a type");
    char what[96];
    snprintf(what, sizeof what, "payload of event %s", ev->type);
    int rc = ev->payload ? check_json(st, ev->payload, what, true, err) : FERRY_OK;
    if (rc != FERRY_OK) return rc;
    if (ev->time_us == 0) ev->time_us = ferry_now_wall_us();
    sqlite3_stmt *s = stmt(st, S_EVENT_APPEND, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, ev->time_us);
    sqlite3_bind_int64(s, 2, ev->run_id);
    sqlite3_bind_int(s, 3, ev->attempt);
    bind_text(s, 4, ev->resource);
    bind_text(s, 5, ev->type);
    bind_text(s, 6, ev->payload ? ev->payload : "{}");
    snprintf(what, sizeof what, "appending event %s", ev->type);
    rc = run_stmt(st, s, what, err);
    if (rc == FERRY_OK) ev->seq = sqlite3_last_insert_rowid(st->db);
    return rc;
}

int ferry_store_event_read(struct ferry_store *st, int64_t after, int64_t run_id, int max,
                           struct ferry_event **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    if (max <= 0) max = EVENT_READ_DEFAULT;
    sqlite3_stmt *s = stmt(st, run_id ? S_EVENT_READ_RUN : S_EVENT_READ_ALL, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    sqlite3_bind_int64(s, 1, after);
    sqlite3_bind_int(s, 2, max);
    if (run_id) sqlite3_bind_int64(s, 3, run_id);
    struct ferry_event *v = NULL;
    int cnt = 0, cap = 0, rc;
    bool oom = false;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : (max < 64 ? max : 64);
            struct ferry_event *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) {
                oom = true;
                break;
            }
            v = nv;
            cap = ncap;
        }
        struct ferry_event *e = &v[cnt++];
        memset(e, 0, sizeof *e);
        e->seq = sqlite3_column_int64(s, 0);
        e->time_us = sqlite3_column_int64(s, 1);
        e->run_id = sqlite3_column_int64(s, 2);
        e->attempt = sqlite3_column_int(s, 3);
        snprintf(e->resource, sizeof e->resource, "%s", col_text(s, 4));
        snprintf(e->type, sizeof e->type, "%s", col_text(s, 5));
        e->payload = ferry_strdup(col_text(s, 6));
        if (e->payload == NULL) {
            oom = true;
            break;
        }
    }
    sqlite3_reset(s);
    if (oom || rc != SQLITE_DONE) {
        ferry_events_free(v, cnt);
        if (oom) return fail(st, FERRY_ENOMEM, err, "reading events: out of memory");
        return sqlfail(st, rc, "reading events", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

int64_t ferry_store_event_last_seq(struct ferry_store *st)
{
    sqlite3_stmt *s = stmt(st, S_EVENT_LAST, NULL);
    if (s == NULL) return 0;
    int64_t seq = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    return seq;
}

/* ---- marks ---- */

int ferry_store_mark_get(struct ferry_store *st, const char *consumer, int64_t *seq,
                         struct ferry_error *err)
{
    *seq = 0;
    sqlite3_stmt *s = stmt(st, S_MARK_GET, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, consumer);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *seq = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sqlfail(st, rc, "reading a mark", err);
    return FERRY_OK;
}

int ferry_store_mark_set(struct ferry_store *st, const char *consumer, int64_t seq,
                         struct ferry_error *err)
{
    sqlite3_stmt *s = stmt(st, S_MARK_SET, err);
    if (s == NULL) return err ? err->code : FERRY_ESTORE;
    bind_text(s, 1, consumer);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_int64(s, 3, ferry_now_wall_us());
    char what[160];
    snprintf(what, sizeof what, "saving the mark of consumer %s", consumer ? consumer : "");
    return run_stmt(st, s, what, err);
}

/* ---- durability of this handle ----
 * The event publisher and the heartbeat use synchronous=NORMAL: in WAL mode their commits
 * survive a process crash at once, and reach the disk with the next FULL commit of any
 * handle (the tracker's fold, which saves checkpoints), since the WAL is one sequential file.
 * So a checkpoint that is on disk always has its events before it, and writers that commit
 * several times per batch do not wait for an fsync each. */
int ferry_store_set_sync_full(struct ferry_store *st, bool full, struct ferry_error *err)
{
    char *msg = NULL;
    int rc = sqlite3_exec(st->db, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                          NULL, NULL, &msg);
    sqlite3_free(msg);
    if (rc != SQLITE_OK) return sqlfail(st, rc, "setting synchronous", err);
    return FERRY_OK;
}

int ferry_store_instance_id(struct ferry_store *st, char *out, size_t len, struct ferry_error *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT \"value\" FROM \"meta\" WHERE \"key\" = 'instance_id'",
                                -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        snprintf(out, len, "%s", col_text(q, 0));
        sqlite3_finalize(q);
        return FERRY_OK;
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_DONE) return fail(st, FERRY_ESTORE, err, "the state has no instance id");
    return sqlfail(st, rc, "reading the instance id", err);
}

/* ---- ferry serve: registered pipelines, idempotent requests, reaping, schedules ----
 * Statements here are prepared per call (these paths run per API request or per sweep,
 * never per batch), so they stay out of the cached-statement table above. */

static int prep(struct ferry_store *st, const char *sql, sqlite3_stmt **s, struct ferry_error *err)
{
    int rc = sqlite3_prepare_v2(st->db, sql, -1, s, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(*s);
        *s = NULL;
        return sqlfail(st, rc, "preparing a statement", err);
    }
    return FERRY_OK;
}

/* Prepares, binds the texts/integers given by fmt ('t' text, 'i' int64), steps once. */
static int exec_bound(struct ferry_store *st, const char *sql, const char *what,
                      struct ferry_error *err, const char *fmt, ...)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(st, sql, &s, err);
    if (rc != FERRY_OK) return rc;
    va_list ap;
    va_start(ap, fmt);
    for (int i = 0; fmt[i]; i++) {
        if (fmt[i] == 't')
            bind_text(s, i + 1, va_arg(ap, const char *));
        else
            sqlite3_bind_int64(s, i + 1, va_arg(ap, int64_t));
    }
    va_end(ap);
    int src = sqlite3_step(s);
    sqlite3_finalize(s);
    if (src != SQLITE_DONE && src != SQLITE_ROW) return sqlfail(st, src, what, err);
    return FERRY_OK;
}

void ferry_pipeline_info_clear(struct ferry_pipeline_info *p)
{
    if (p == NULL) return;
    ferry_free(p->spec);
    p->spec = NULL;
}

void ferry_pipeline_infos_free(struct ferry_pipeline_info *v, int n)
{
    if (v == NULL) return;
    for (int i = 0; i < n; i++)
        ferry_free(v[i].spec);
    ferry_free(v);
}

int ferry_store_pipeline_apply(struct ferry_store *st, const char *name, const char *version,
                               const char *spec_json, int retries, bool *new_version,
                               struct ferry_error *err)
{
    if (name == NULL || name[0] == '\0' || version == NULL)
        return fail(st, FERRY_EINVAL, err, "pipeline: no name or version");
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry_store_pipeline_put(st, name, version, spec_json, err);
    bool added = rc == FERRY_OK && sqlite3_changes(st->db) > 0;
    int64_t now = ferry_now_wall_us();
    if (rc == FERRY_OK)
        rc = exec_bound(st,
                        "INSERT INTO \"pipeline_heads\" (\"name\", \"version\", \"retries\","
                        " \"created_us\", \"updated_us\") VALUES (?1, ?2, ?3, ?4, ?4)"
                        " ON CONFLICT (\"name\") DO UPDATE SET \"version\" = excluded.\"version\","
                        " \"retries\" = excluded.\"retries\", \"deleted_us\" = 0,"
                        " \"updated_us\" = CASE WHEN \"version\" <> excluded.\"version\" OR"
                        " \"deleted_us\" <> 0 THEN excluded.\"updated_us\" ELSE \"updated_us\" END",
                        "recording the pipeline's current version", err, "ttii", name, version,
                        (int64_t)retries, now);
    rc = op_end(st, rc, err);
    if (rc == FERRY_OK && new_version) *new_version = added;
    return rc;
}

#define HEAD_SELECT                                                                                \
    "SELECT h.\"name\", h.\"version\", h.\"retries\", h.\"created_us\", h.\"updated_us\","         \
    " (SELECT count(*) FROM \"pipelines\" p WHERE p.\"name\" = h.\"name\"),"                       \
    " (SELECT p.\"spec\" FROM \"pipelines\" p WHERE p.\"name\" = h.\"name\" AND"                   \
    " p.\"version\" = h.\"version\") FROM \"pipeline_heads\" h WHERE h.\"deleted_us\" = 0"

static int read_head(sqlite3_stmt *s, struct ferry_pipeline_info *p, bool with_spec)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", col_text(s, 0));
    snprintf(p->version, sizeof p->version, "%s", col_text(s, 1));
    p->retries = sqlite3_column_int(s, 2);
    p->created_us = sqlite3_column_int64(s, 3);
    p->updated_us = sqlite3_column_int64(s, 4);
    p->n_versions = sqlite3_column_int(s, 5);
    if (with_spec && (p->spec = ferry_strdup(col_text(s, 6))) == NULL) return FERRY_ENOMEM;
    return FERRY_OK;
}

int ferry_store_pipeline_list(struct ferry_store *st, struct ferry_pipeline_info **out, int *n,
                              struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(st, HEAD_SELECT " ORDER BY h.\"name\"", &s, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_pipeline_info *v = NULL;
    int cnt = 0, cap = 0, src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 16;
            struct ferry_pipeline_info *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        read_head(s, &v[cnt++], false);
    }
    sqlite3_finalize(s);
    if (src != SQLITE_DONE) {
        ferry_pipeline_infos_free(v, cnt);
        if (src == SQLITE_ROW)
            return fail(st, FERRY_ENOMEM, err, "listing pipelines: out of memory");
        return sqlfail(st, src, "listing pipelines", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_pipeline_get(struct ferry_store *st, const char *name,
                             struct ferry_pipeline_info *out, struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = NULL;
    int rc = prep(st, HEAD_SELECT " AND h.\"name\" = ?1", &s, err);
    if (rc != FERRY_OK) return rc;
    bind_text(s, 1, name);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) rc = read_head(s, out, true);
    sqlite3_finalize(s);
    if (src == SQLITE_DONE) return fail(st, FERRY_ENOTFOUND, err, "pipeline %s not found", name);
    if (src != SQLITE_ROW) return sqlfail(st, src, "reading a pipeline", err);
    if (rc != FERRY_OK) return fail(st, FERRY_ENOMEM, err, "reading a pipeline: out of memory");
    return FERRY_OK;
}

int ferry_store_pipeline_versions(struct ferry_store *st, const char *name,
                                  struct ferry_pipeline_version **out, int *n,
                                  struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(st,
                  "SELECT \"version\", \"created_us\" FROM \"pipelines\" WHERE \"name\" = ?1"
                  " ORDER BY \"created_us\" DESC, \"rowid\" DESC",
                  &s, err);
    if (rc != FERRY_OK) return rc;
    bind_text(s, 1, name);
    struct ferry_pipeline_version *v = NULL;
    int cnt = 0, cap = 0, src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 8;
            struct ferry_pipeline_version *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        snprintf(v[cnt].version, sizeof v[cnt].version, "%s", col_text(s, 0));
        v[cnt].created_us = sqlite3_column_int64(s, 1);
        cnt++;
    }
    sqlite3_finalize(s);
    if (src != SQLITE_DONE) {
        ferry_free(v);
        if (src == SQLITE_ROW)
            return fail(st, FERRY_ENOMEM, err, "listing versions: out of memory");
        return sqlfail(st, src, "listing pipeline versions", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_pipeline_version_spec(struct ferry_store *st, const char *name, const char *version,
                                      char **spec, struct ferry_error *err)
{
    *spec = NULL;
    sqlite3_stmt *s = NULL;
    int rc = prep(st, "SELECT \"spec\" FROM \"pipelines\" WHERE \"name\" = ?1 AND \"version\" = ?2",
                  &s, err);
    if (rc != FERRY_OK) return rc;
    bind_text(s, 1, name);
    bind_text(s, 2, version);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) *spec = ferry_strdup(col_text(s, 0));
    sqlite3_finalize(s);
    if (src == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "pipeline %s has no version %.16s", name, version);
    if (src != SQLITE_ROW) return sqlfail(st, src, "reading a pipeline version", err);
    return *spec ? FERRY_OK : fail(st, FERRY_ENOMEM, err, "out of memory");
}

int ferry_store_pipeline_delete(struct ferry_store *st, const char *name, struct ferry_error *err)
{
    int rc = exec_bound(st,
                        "UPDATE \"pipeline_heads\" SET \"deleted_us\" = ?2 WHERE \"name\" = ?1"
                        " AND \"deleted_us\" = 0",
                        "deleting a pipeline", err, "ti", name, ferry_now_wall_us());
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        return fail(st, FERRY_ENOTFOUND, err, "pipeline %s not found", name);
    return rc;
}

int ferry_store_run_create_keyed(struct ferry_store *st, const char *pipeline, const char *version,
                                 const char *request_json, const char *trigger, const char *key,
                                 int64_t *run_id, bool *existed, struct ferry_error *err)
{
    *existed = false;
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    if (key) {
        sqlite3_stmt *s = NULL;
        rc = prep(st,
                  "SELECT \"run_id\" FROM \"idempotency_keys\" WHERE \"pipeline\" = ?1 AND"
                  " \"key\" = ?2",
                  &s, err);
        if (rc == FERRY_OK) {
            bind_text(s, 1, pipeline);
            bind_text(s, 2, key);
            int src = sqlite3_step(s);
            if (src == SQLITE_ROW) {
                *run_id = sqlite3_column_int64(s, 0);
                *existed = true;
            } else if (src != SQLITE_DONE) {
                rc = sqlfail(st, src, "reading an idempotency key", err);
            }
            sqlite3_finalize(s);
        }
    }
    if (rc == FERRY_OK && !*existed) {
        rc = ferry_store_run_create(st, pipeline, version, request_json, run_id, err);
        if (rc == FERRY_OK && trigger)
            rc = exec_bound(st, "UPDATE \"runs\" SET \"trigger\" = ?2 WHERE \"id\" = ?1",
                            "recording a run's trigger", err, "it", *run_id, trigger);
        if (rc == FERRY_OK && key)
            rc = exec_bound(st,
                            "INSERT INTO \"idempotency_keys\" (\"pipeline\", \"key\", \"run_id\","
                            " \"created_us\") VALUES (?1, ?2, ?3, ?4)",
                            "recording an idempotency key", err, "ttii", pipeline, key, *run_id,
                            ferry_now_wall_us());
    }
    return op_end(st, rc, err);
}

int ferry_store_run_list_filtered(struct ferry_store *st, const char *pipeline, int state,
                                  int64_t before_id, int limit, struct ferry_run_info **out, int *n,
                                  struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(st,
                  "SELECT " RUN_COLUMNS " FROM \"runs\" WHERE (?1 IS NULL OR \"pipeline\" = ?1)"
                  " AND (?2 IS NULL OR \"state\" = ?2) AND (?3 <= 0 OR \"id\" < ?3)"
                  " ORDER BY \"id\" DESC LIMIT ?4",
                  &s, err);
    if (rc != FERRY_OK) return rc;
    bind_text(s, 1, pipeline);
    bind_text(s, 2,
              state >= 0 && state < FERRY_RUN_STATE_MAX
                  ? ferry_run_state_name((enum ferry_run_state)state)
                  : NULL);
    sqlite3_bind_int64(s, 3, before_id);
    sqlite3_bind_int64(s, 4, limit > 0 ? limit : -1);
    struct ferry_run_info *v = NULL;
    int cnt = 0, cap = 0, src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 16;
            struct ferry_run_info *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        if (read_run(s, &v[cnt++]) != FERRY_OK) break;
    }
    sqlite3_finalize(s);
    if (src != SQLITE_DONE) {
        ferry_run_infos_free(v, cnt);
        if (src == SQLITE_ROW) return fail(st, FERRY_ENOMEM, err, "listing runs: out of memory");
        return sqlfail(st, src, "listing runs", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

/* The run's state and attempt, read inside the caller's transaction. */
static int run_state_attempt(struct ferry_store *st, int64_t run_id, char *state, size_t len,
                             int *attempt, struct ferry_error *err)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(st, "SELECT \"state\", \"attempt\" FROM \"runs\" WHERE \"id\" = ?1", &s, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        snprintf(state, len, "%s", col_text(s, 0));
        *attempt = sqlite3_column_int(s, 1);
    }
    sqlite3_finalize(s);
    if (src == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    if (src != SQLITE_ROW) return sqlfail(st, src, "reading a run", err);
    return FERRY_OK;
}

int ferry_store_run_reap(struct ferry_store *st, int64_t run_id, int attempt,
                         int64_t silent_before_us, const char *message, int *new_attempt,
                         struct ferry_error *err)
{
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    char state[16] = "";
    int cur = 0;
    rc = run_state_attempt(st, run_id, state, sizeof state, &cur, err);
    if (rc == FERRY_OK && cur != attempt)
        rc = fail(st, FERRY_EFENCED, err, "run %lld: attempt %d is no longer current (%d)",
                  (long long)run_id, attempt, cur);
    if (rc == FERRY_OK && strcmp(state, "running") != 0)
        rc =
            fail(st, FERRY_ECONFLICT, err, "run %lld is %s, not running", (long long)run_id, state);
    if (rc == FERRY_OK)
        rc = exec_bound(st,
                        "UPDATE \"runs\" SET \"attempt\" = \"attempt\" + 1, \"state\" = 'failed',"
                        " \"error\" = ?2, \"pid\" = 0, \"ended_us\" = ?3 WHERE \"id\" = ?1"
                        " AND (?4 <= 0 OR \"heartbeat_us\" <= ?4)",
                        "fencing a lost worker", err, "itii", run_id,
                        message ? message : "worker lost", ferry_now_wall_us(), silent_before_us);
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        rc = fail(st, FERRY_ECONFLICT, err, "run %lld: its worker sent a heartbeat meanwhile",
                  (long long)run_id);
    rc = op_end(st, rc, err);
    if (rc == FERRY_OK) *new_attempt = attempt + 1;
    return rc;
}

int ferry_store_run_requeue(struct ferry_store *st, int64_t run_id, bool retry,
                            struct ferry_error *err)
{
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    char state[16] = "";
    int cur = 0;
    rc = run_state_attempt(st, run_id, state, sizeof state, &cur, err);
    if (rc == FERRY_OK && strcmp(state, "paused") != 0 && strcmp(state, "failed") != 0)
        rc = fail(st, FERRY_ECONFLICT, err,
                  "run %lld is %s; only a paused or failed run can be"
                  " resumed",
                  (long long)run_id, state);
    if (rc == FERRY_OK)
        rc = exec_bound(st,
                        "UPDATE \"runs\" SET \"state\" = 'requested', \"ended_us\" = 0,"
                        " \"pid\" = 0, \"signal\" = '', \"retries\" = \"retries\" + ?2"
                        " WHERE \"id\" = ?1",
                        "requesting a run again", err, "ii", run_id, (int64_t)(retry ? 1 : 0));
    return op_end(st, rc, err);
}

int ferry_store_run_worker_exited(struct ferry_store *st, int64_t run_id, int pid, int status,
                                  struct ferry_error *err)
{
    return exec_bound(st,
                      "UPDATE \"runs\" SET \"worker_exit\" = ?3 WHERE \"id\" = ?1 AND"
                      " (\"pid\" = ?2 OR \"pid\" = 0)",
                      "recording a worker's exit", err, "iii", run_id, (int64_t)pid,
                      (int64_t)status);
}

int ferry_store_run_worker_status(struct ferry_store *st, int64_t run_id, bool *known, int *status,
                                  struct ferry_error *err)
{
    *known = false;
    sqlite3_stmt *s = NULL;
    int rc =
        prep(st, "SELECT \"worker_exit\", \"trigger\" FROM \"runs\" WHERE \"id\" = ?1", &s, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
        *known = true;
        *status = sqlite3_column_int(s, 0);
    }
    sqlite3_finalize(s);
    if (src == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    return src == SQLITE_ROW ? FERRY_OK : sqlfail(st, src, "reading a run's worker status", err);
}

int ferry_store_run_mark_resume_on_start(struct ferry_store *st, int64_t run_id,
                                         struct ferry_error *err)
{
    return exec_bound(st, "UPDATE \"runs\" SET \"resume_on_start\" = 1 WHERE \"id\" = ?1",
                      "marking a run to resume", err, "i", run_id);
}

int ferry_store_run_requeue_marked(struct ferry_store *st, int64_t **ids, int *n,
                                   struct ferry_error *err)
{
    *ids = NULL;
    *n = 0;
    int rc = op_begin(st, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_stmt *s = NULL;
    rc = prep(st,
              "UPDATE \"runs\" SET \"state\" = 'requested', \"ended_us\" = 0, \"pid\" = 0,"
              " \"signal\" = '', \"resume_on_start\" = 0 WHERE \"resume_on_start\" = 1 AND"
              " \"state\" = 'paused' RETURNING \"id\"",
              &s, err);
    int64_t *v = NULL;
    int cnt = 0, src = SQLITE_DONE;
    while (rc == FERRY_OK && (src = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t *nv = ferry_realloc(v, (size_t)(cnt + 1) * sizeof *v);
        if (nv == NULL) {
            rc = fail(st, FERRY_ENOMEM, err, "out of memory");
            break;
        }
        v = nv;
        v[cnt++] = sqlite3_column_int64(s, 0);
    }
    if (rc == FERRY_OK && src != SQLITE_DONE) rc = sqlfail(st, src, "requeueing paused runs", err);
    sqlite3_finalize(s);
    /* A marked run that did not reach its pause (failed meanwhile) stays as it is. */
    if (rc == FERRY_OK)
        rc = exec_bound(st,
                        "UPDATE \"runs\" SET \"resume_on_start\" = 0 WHERE \"resume_on_start\" = 1",
                        "clearing resume marks", err, "");
    rc = op_end(st, rc, err);
    if (rc != FERRY_OK) {
        ferry_free(v);
        return rc;
    }
    *ids = v;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_run_retries(struct ferry_store *st, int64_t run_id, int *retries,
                            struct ferry_error *err)
{
    *retries = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(st, "SELECT \"retries\" FROM \"runs\" WHERE \"id\" = ?1", &s, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) *retries = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    if (src == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "run %lld not found", (long long)run_id);
    return src == SQLITE_ROW ? FERRY_OK : sqlfail(st, src, "reading a run's retries", err);
}

int ferry_store_totals(struct ferry_store *st, struct ferry_store_totals *out,
                       struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = NULL;
    int rc = prep(st,
                  "SELECT \"state\", count(*), sum(\"rows\"), sum(\"bytes\"), sum(\"batches\"),"
                  " sum(\"verified\"), sum(\"diverged\") FROM \"runs\" GROUP BY \"state\"",
                  &s, err);
    if (rc != FERRY_OK) return rc;
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        enum ferry_run_state state;
        if (ferry_run_state_from_name(col_text(s, 0), &state) == FERRY_OK)
            out->runs[state] += sqlite3_column_int64(s, 1);
        out->rows += sqlite3_column_int64(s, 2);
        out->bytes += sqlite3_column_int64(s, 3);
        out->batches += sqlite3_column_int64(s, 4);
        out->verified += sqlite3_column_int64(s, 5);
        out->diverged += sqlite3_column_int64(s, 6);
    }
    sqlite3_finalize(s);
    return src == SQLITE_DONE ? FERRY_OK : sqlfail(st, src, "summing runs", err);
}

#define SCHEDULE_COLUMNS                                                                           \
    "\"id\", \"pipeline\", \"cron\", \"timezone\", \"overlap\", \"enabled\", \"next_us\","         \
    " \"last_us\", \"last_run\", \"created_us\""

static void read_schedule(sqlite3_stmt *s, struct ferry_schedule *o)
{
    memset(o, 0, sizeof *o);
    o->id = sqlite3_column_int64(s, 0);
    snprintf(o->pipeline, sizeof o->pipeline, "%s", col_text(s, 1));
    snprintf(o->cron, sizeof o->cron, "%s", col_text(s, 2));
    snprintf(o->timezone, sizeof o->timezone, "%s", col_text(s, 3));
    snprintf(o->overlap, sizeof o->overlap, "%s", col_text(s, 4));
    o->enabled = sqlite3_column_int(s, 5) != 0;
    o->next_us = sqlite3_column_int64(s, 6);
    o->last_us = sqlite3_column_int64(s, 7);
    o->last_run = sqlite3_column_int64(s, 8);
    o->created_us = sqlite3_column_int64(s, 9);
}

int ferry_store_schedule_put(struct ferry_store *st, struct ferry_schedule *sc,
                             struct ferry_error *err)
{
    int rc;
    if (sc->id == 0) {
        rc = exec_bound(st,
                        "INSERT INTO \"schedules\" (\"pipeline\", \"cron\", \"timezone\","
                        " \"overlap\", \"enabled\", \"next_us\", \"created_us\")"
                        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        "creating a schedule", err, "ttttiii", sc->pipeline, sc->cron, sc->timezone,
                        sc->overlap, (int64_t)sc->enabled, sc->next_us, ferry_now_wall_us());
        if (rc == FERRY_OK) sc->id = sqlite3_last_insert_rowid(st->db);
        return rc;
    }
    rc = exec_bound(st,
                    "UPDATE \"schedules\" SET \"pipeline\" = ?2, \"cron\" = ?3, \"timezone\" = ?4,"
                    " \"overlap\" = ?5, \"enabled\" = ?6, \"next_us\" = ?7 WHERE \"id\" = ?1",
                    "changing a schedule", err, "ittttii", sc->id, sc->pipeline, sc->cron,
                    sc->timezone, sc->overlap, (int64_t)sc->enabled, sc->next_us);
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        return fail(st, FERRY_ENOTFOUND, err, "schedule %lld not found", (long long)sc->id);
    return rc;
}

int ferry_store_schedule_list(struct ferry_store *st, const char *pipeline,
                              struct ferry_schedule **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(st,
                  "SELECT " SCHEDULE_COLUMNS " FROM \"schedules\" WHERE ?1 IS NULL OR"
                  " \"pipeline\" = ?1 ORDER BY \"id\"",
                  &s, err);
    if (rc != FERRY_OK) return rc;
    bind_text(s, 1, pipeline);
    struct ferry_schedule *v = NULL;
    int cnt = 0, cap = 0, src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 8;
            struct ferry_schedule *nv = ferry_realloc(v, (size_t)ncap * sizeof *v);
            if (nv == NULL) break;
            v = nv;
            cap = ncap;
        }
        read_schedule(s, &v[cnt++]);
    }
    sqlite3_finalize(s);
    if (src != SQLITE_DONE) {
        ferry_free(v);
        if (src == SQLITE_ROW)
            return fail(st, FERRY_ENOMEM, err, "listing schedules: out of memory");
        return sqlfail(st, src, "listing schedules", err);
    }
    *out = v;
    *n = cnt;
    return FERRY_OK;
}

int ferry_store_schedule_get(struct ferry_store *st, int64_t id, struct ferry_schedule *out,
                             struct ferry_error *err)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(st, "SELECT " SCHEDULE_COLUMNS " FROM \"schedules\" WHERE \"id\" = ?1", &s, err);
    if (rc != FERRY_OK) return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) read_schedule(s, out);
    sqlite3_finalize(s);
    if (src == SQLITE_DONE)
        return fail(st, FERRY_ENOTFOUND, err, "schedule %lld not found", (long long)id);
    return src == SQLITE_ROW ? FERRY_OK : sqlfail(st, src, "reading a schedule", err);
}

int ferry_store_schedule_delete(struct ferry_store *st, int64_t id, struct ferry_error *err)
{
    int rc = exec_bound(st, "DELETE FROM \"schedules\" WHERE \"id\" = ?1", "deleting a schedule",
                        err, "i", id);
    if (rc == FERRY_OK && sqlite3_changes(st->db) == 0)
        return fail(st, FERRY_ENOTFOUND, err, "schedule %lld not found", (long long)id);
    return rc;
}

int ferry_store_schedule_fired(struct ferry_store *st, int64_t id, int64_t next_us, int64_t last_us,
                               int64_t last_run, struct ferry_error *err)
{
    return exec_bound(st,
                      "UPDATE \"schedules\" SET \"next_us\" = ?2, \"last_us\" = ?3,"
                      " \"last_run\" = CASE WHEN ?4 > 0 THEN ?4 ELSE \"last_run\" END"
                      " WHERE \"id\" = ?1",
                      "recording a schedule's firing", err, "iiii", id, next_us, last_us, last_run);
}
