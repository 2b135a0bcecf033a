/* store/sqlite_store.c - the SQLite driver of the state store (store/sdb.h): one SQLite
 * connection per store handle on a state file.
 *
 * Owns the file-level concerns: creating the parent folders, refusing a path that is not a
 * regular file, the pragmas, mapping SQLite failures to ferry codes with messages naming the
 * file, and explaining a damaged file. The store's logic and migrations live in
 * store/store_sql.c. Calls SQLite and core; store/fault_vfs.c supplies the VFS for fault
 * tests. Called through the driver vtable by store/store_sql.c.
 *
 * Durability: WAL mode so readers (the bus consumers, `ferry status`) never block the
 * writer; synchronous=FULL by default so that a commit, and so a saved checkpoint, is on disk
 * when the call returns, power loss included (the bus publisher and the heartbeat switch
 * their handles to NORMAL, see sl_set_sync_full); a busy wait of up to 10 s (busy_wait)
 * because several handles (bus, tracker, runner, other processes) write the same file and
 * SQLite serialises them.
 * Transactions that will write start with BEGIN IMMEDIATE, so a check and the write that
 * follows see the same state. Nothing here opens a descriptor of a healthy state file
 * outside SQLite (see explain_damage). docs/internals/state-and-events.md explains why. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/bytes.h"
#include "ferry/core.h"
#include "store/sdb.h"
#include "store/store.h"

#define BUSY_TIMEOUT_MS 10000

/* Transaction control runs several times per batch (the publisher's commit, the tracker's
 * group, the savepoints of fenced saves): prepared once per connection instead of parsed by
 * sqlite3_exec at every call. */
static const char *const tx_sql[] = {"BEGIN IMMEDIATE",        "COMMIT",
                                     "ROLLBACK",               "SAVEPOINT \"ferry_op\"",
                                     "RELEASE \"ferry_op\"", "ROLLBACK TO \"ferry_op\""};
#define TX_STMTS ((int)(sizeof tx_sql / sizeof tx_sql[0]))

struct sl_db {
    struct sdb base;
    sqlite3 *db;
    int last_rc; /* extended code of the last failure, for violation() and explain_damage */
    sqlite3_stmt *tx[TX_STMTS]; /* tx_sql[i], prepared on first use */
};

struct sl_stmt {
    sqlite3_stmt *s;
    struct sl_db *db;
};

static struct sl_db *DB(struct sdb *db)
{
    return (struct sl_db *)(void *)db;
}

static struct sl_stmt *ST(struct sdb_stmt *s)
{
    return (struct sl_stmt *)(void *)s;
}

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

static int sqlfail(struct sl_db *d, int rc, const char *what, struct ferry_error *err)
{
    d->last_rc = rc;
    return sqlfail_db(d->db, d->base.label, rc, what, err);
}

static int fail(struct sl_db *d, int code, struct ferry_error *err, const char *msg)
{
    return ferry__sdb_fail(&d->base, code, "store", err, "%s", msg);
}

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
    uint32_t pages = ferry__be32(h + 28);
    bool count_valid = pages > 0 && ferry__be32(h + 24) == ferry__be32(h + 92);
    bool page_valid = page >= 512 && (page & (page - 1)) == 0;
    if (page_valid && ((count_valid && (long long)pages * page > (long long)sb.st_size) ||
                       sb.st_size % page != 0))
        ferry_error_set(err, FERRY_ESTORE, "store",
                        "state %s: the state file is truncated (its header counts %u pages of %u"
                        " bytes, the file has %lld bytes); restore it from a backup or move it"
                        " aside",
                        path, pages, page, (long long)sb.st_size);
}

/* SQLite's busy handler: waits while another handle holds the file's write lock, for
 * BUSY_TIMEOUT_MS in all. The holders are mostly ferry's own short transactions (an event,
 * a checkpoint: well under a millisecond, a few with an fsync), which sqlite3_busy_timeout
 * would wait out in steps of 1, 2, 5, 10, 15... ms: here 50 us doubling to 1.6 ms, then 2 ms
 * steps. N is the number of waits before this one. */
static int busy_wait(void *arg, int n)
{
    (void)arg;
    enum { RAMP = 6, STEP_US = 2000 }; /* 50 .. 1600 us: 3150 us in the ramp */
    long waited_us = n < RAMP ? 50L * ((1L << n) - 1) : 3150L + (long)(n - RAMP) * STEP_US;
    if (waited_us >= BUSY_TIMEOUT_MS * 1000L) return 0;
    long us = n < RAMP ? 50L << n : STEP_US;
    struct timespec ts = {0, us * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 1;
}

static int set_pragmas(struct sl_db *st, struct ferry_error *err)
{
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_handler(st->db, busy_wait, NULL);
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
    const unsigned char *mode = sqlite3_column_text(s, 0);
    bool wal = mode != NULL && strcmp((const char *)mode, "wal") == 0;
    sqlite3_finalize(s);
    if (!wal)
        return fail(st, FERRY_ESTORE, err,
                    "the file system refused WAL mode (network file systems do); put the state"
                    " file on a local disk");
    rc = sqlite3_exec(st->db, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON", NULL, NULL,
                      NULL);
    return rc == SQLITE_OK ? FERRY_OK
                           : sqlfail(st, rc, "setting synchronous and foreign keys", err);
}

/* ---- statements ---- */

static int sl_prepare(struct sdb *db, const char *sql, int n_params, struct sdb_stmt **out,
                      struct ferry_error *err)
{
    (void)n_params;
    struct sl_stmt *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return fail(DB(db), FERRY_ENOMEM, err, "preparing a statement: out of memory");
    s->db = DB(db);
    int rc = sqlite3_prepare_v3(DB(db)->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->s, NULL);
    if (rc != SQLITE_OK) {
        ferry_free(s);
        return sqlfail(DB(db), rc, "preparing a statement", err);
    }
    *out = (struct sdb_stmt *)(void *)s;
    return FERRY_OK;
}

static void sl_bind_int64(struct sdb_stmt *s, int i, int64_t v)
{
    sqlite3_bind_int64(ST(s)->s, i, v);
}

static void sl_bind_text(struct sdb_stmt *s, int i, const char *v)
{
    if (v == NULL)
        sqlite3_bind_null(ST(s)->s, i);
    else
        sqlite3_bind_text(ST(s)->s, i, v, -1, SQLITE_STATIC);
}

static int sl_step(struct sdb_stmt *s, bool *row, const char *what, struct ferry_error *err)
{
    int rc = sqlite3_step(ST(s)->s);
    *row = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return FERRY_OK;
    return sqlfail(ST(s)->db, rc, what, err);
}

static int64_t sl_col_int64(struct sdb_stmt *s, int i)
{
    return sqlite3_column_int64(ST(s)->s, i);
}

static const char *sl_col_text(struct sdb_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(ST(s)->s, i);
    return t ? (const char *)t : "";
}

static bool sl_col_null(struct sdb_stmt *s, int i)
{
    return sqlite3_column_type(ST(s)->s, i) == SQLITE_NULL;
}

static void sl_reset(struct sdb_stmt *s)
{
    sqlite3_reset(ST(s)->s);
    sqlite3_clear_bindings(ST(s)->s);
}

static void sl_finalize(struct sdb_stmt *s)
{
    if (s == NULL) return;
    sqlite3_finalize(ST(s)->s);
    ferry_free(s);
}

static int64_t sl_last_rowid(struct sdb *db)
{
    return sqlite3_last_insert_rowid(DB(db)->db);
}

static int64_t sl_changes(struct sdb *db)
{
    return sqlite3_changes(DB(db)->db);
}

static enum sdb_violation sl_violation(struct sdb *db)
{
    switch (DB(db)->last_rc) {
    case SQLITE_CONSTRAINT_FOREIGNKEY:
        return SDB_VIOLATION_FOREIGN_KEY;
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
        return SDB_VIOLATION_UNIQUE;
    default:
        return SDB_VIOLATION_NONE;
    }
}

/* One of tx_sql through its prepared statement; -1 when sql is not one of them. */
static int tx_exec(struct sl_db *d, const char *sql)
{
    int i = 0;
    while (i < TX_STMTS && strcmp(sql, tx_sql[i]) != 0)
        i++;
    if (i == TX_STMTS) return -1;
    if (d->tx[i] == NULL) {
        int rc = sqlite3_prepare_v3(d->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &d->tx[i], NULL);
        if (rc != SQLITE_OK) return rc;
    }
    int rc = sqlite3_step(d->tx[i]);
    sqlite3_reset(d->tx[i]);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int sl_exec(struct sdb *db, const char *sql, const char *what, struct ferry_error *err)
{
    int rc = tx_exec(DB(db), sql);
    if (rc < 0) rc = sqlite3_exec(DB(db)->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? FERRY_OK : sqlfail(DB(db), rc, what, err);
}

static int sl_begin(struct sdb *db, struct ferry_error *err)
{
    return sl_exec(db, "BEGIN IMMEDIATE", "starting a transaction", err);
}

static bool sl_in_tx(struct sdb *db)
{
    return !sqlite3_get_autocommit(DB(db)->db);
}

static int sl_commit(struct sdb *db, struct ferry_error *err)
{
    int rc = sl_exec(db, "COMMIT", "committing", err);
    if (rc != FERRY_OK && sl_in_tx(db)) sl_exec(db, "ROLLBACK", "rolling back", NULL);
    return rc;
}

/* A SQLite state file is shared by the processes of one host: its clock is this host's. */
static int sl_now_us(struct sdb *db, int64_t *out, struct ferry_error *err)
{
    (void)db;
    (void)err;
    *out = ferry_now_wall_us();
    return FERRY_OK;
}

/* The event publisher and the heartbeat use synchronous=NORMAL: in WAL mode their commits
 * survive a process crash at once, and reach the disk with the next FULL commit of any
 * handle (the tracker's fold, which saves checkpoints), since the WAL is one sequential file.
 * So a checkpoint that is on disk always has its events before it, and writers that commit
 * several times per batch do not wait for an fsync each. */
static int sl_set_sync_full(struct sdb *db, bool full, struct ferry_error *err)
{
    return sl_exec(db, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                   "setting synchronous", err);
}

/* Each migration step runs under BEGIN IMMEDIATE, which is lock enough. */
static int sl_migrate_lock(struct sdb *db, bool lock, struct ferry_error *err)
{
    (void)db;
    (void)lock;
    (void)err;
    return FERRY_OK;
}

static int count_of(struct sl_db *d, const char *sql, int64_t *out, struct ferry_error *err)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(d->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? FERRY_OK : sqlfail(d, rc, "reading the schema", err);
}

static int sl_tables(struct sdb *db, bool *has_migrations, int64_t *others, struct ferry_error *err)
{
    int64_t has = 0;
    int rc = count_of(DB(db),
                      "SELECT count(*) FROM \"sqlite_master\" WHERE \"type\" = 'table' AND"
                      " \"name\" = 'schema_migrations'",
                      &has, err);
    if (rc == FERRY_OK)
        rc = count_of(DB(db),
                      "SELECT count(*) FROM \"sqlite_master\" WHERE \"type\" = 'table' AND"
                      " \"name\" NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND"
                      " \"name\" <> 'schema_migrations'",
                      others, err);
    *has_migrations = has > 0;
    return rc;
}

static void sl_close(struct sdb *db, struct ferry_error *why)
{
    if (db == NULL) return;
    struct sl_db *d = DB(db);
    for (int i = 0; i < TX_STMTS; i++)
        sqlite3_finalize(d->tx[i]);
    if (d->db) {
        if (!sqlite3_get_autocommit(d->db)) sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close_v2(d->db);
        d->db = NULL;
    }
    int prim = d->last_rc & 0xff;
    if (why != NULL && d->base.label && (prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB))
        explain_damage(d->base.label, why);
    ferry_free(d->base.label);
    ferry_free(d);
}

static const struct sdb_driver sqlite_driver = {
    .dialect = SDB_SQLITE,
    .prepare = sl_prepare,
    .bind_int64 = sl_bind_int64,
    .bind_text = sl_bind_text,
    .step = sl_step,
    .col_int64 = sl_col_int64,
    .col_text = sl_col_text,
    .col_null = sl_col_null,
    .reset = sl_reset,
    .finalize = sl_finalize,
    .changes = sl_changes,
    .last_rowid = sl_last_rowid,
    .violation = sl_violation,
    .exec = sl_exec,
    .begin = sl_begin,
    .commit = sl_commit,
    .in_tx = sl_in_tx,
    .now_us = sl_now_us,
    .set_sync_full = sl_set_sync_full,
    .migrate_lock = sl_migrate_lock,
    .tables = sl_tables,
    .close = sl_close,
};

/* ---- open ---- */

static char *path_from_url(const char *url)
{
    const char *p = url;
    if (strncmp(p, "sqlite:", 7) == 0) {
        p += 7;
        if (strncmp(p, "//", 2) == 0) p += 2; /* sqlite:///abs/path, sqlite://rel/path */
    }
    return ferry_strdup(p);
}

int ferry__sdb_sqlite_open(const char *url, struct sdb **out, struct ferry_error *err)
{
    *out = NULL;
    struct sl_db *d = ferry_calloc(1, sizeof *d);
    if (d == NULL || (d->base.label = path_from_url(url)) == NULL) {
        ferry_free(d);
        return ferry_error_set(err, FERRY_ENOMEM, "store", "state store: out of memory");
    }
    d->base.drv = &sqlite_driver;
    const char *path = d->base.label;
    int rc =
        path[0] ? FERRY_OK : ferry_error_set(err, FERRY_EINVAL, "store", "state store: empty path");
    if (rc == FERRY_OK) rc = mkdir_parents(path, err);
    if (rc == FERRY_OK) rc = check_path(path, err);
    if (rc == FERRY_OK) {
        int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
        int src = sqlite3_open_v2(path, &d->db, flags, ferry__store_fault_vfs());
        if (src != SQLITE_OK) rc = sqlfail(d, src, "opening the state file", err);
    }
    if (rc == FERRY_OK) rc = set_pragmas(d, err);
    if (rc != FERRY_OK) {
        sl_close(&d->base, err);
        return rc;
    }
    *out = &d->base;
    return FERRY_OK;
}
