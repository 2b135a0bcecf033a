/* store/sdb.h - the thin SQL driver under the state store (private to src/store/).
 *
 * The store's logic (store/store_sql.c) is written once against this interface; a driver
 * per database does the rest: store/sqlite_store.c (SQLite file) and store/pg_store.c
 * (PostgreSQL over libpq, with a small connection pool).
 *
 * SQL texts are written once, in SQLite's spelling with `?N` placeholders, and expanded
 * per dialect by ferry__sdb_expand before preparing:
 *   - a comment `/`+`*pg: TEXT*`+`/` becomes TEXT on PostgreSQL and disappears on SQLite,
 *     `/`+`*sqlite: TEXT*`+`/` the other way round (FOR UPDATE, SKIP LOCKED, the event lock);
 *   - on PostgreSQL `?N` becomes `$N` (a bare `?` takes the next number).
 * Parameters are typed by how they are bound (int64 -> bigint, text -> text; a NULL text is
 * a text NULL), so PostgreSQL never has to guess a type.
 *
 * Statements are cached per connection, keyed by the address of their SQL text (the store
 * passes string literals), so each is prepared once per handle. A handle, its connection
 * and its statements are used by one thread at a time. */
#ifndef FERRY_STORE_SDB_H
#define FERRY_STORE_SDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

enum sdb_dialect { SDB_SQLITE = 1, SDB_PG = 2 };

/* What the last failed statement violated (to tell "run not found" from a conflict). */
enum sdb_violation { SDB_VIOLATION_NONE = 0, SDB_VIOLATION_FOREIGN_KEY, SDB_VIOLATION_UNIQUE };

struct sdb;
struct sdb_stmt;

struct sdb_driver {
    enum sdb_dialect dialect;
    /* sql is already expanded for the dialect; n_params is the highest ?N/$N. */
    int (*prepare)(struct sdb *db, const char *sql, int n_params, struct sdb_stmt **out,
                   struct ferry_error *err);
    /* Bindings are borrowed until the statement is reset: the text must outlive step. */
    void (*bind_int64)(struct sdb_stmt *s, int i, int64_t v);
    void (*bind_text)(struct sdb_stmt *s, int i, const char *v); /* NULL binds NULL */
    /* *row true: a row is available; false: done. `what` names the operation for errors. */
    int (*step)(struct sdb_stmt *s, bool *row, const char *what, struct ferry_error *err);
    int64_t (*col_int64)(struct sdb_stmt *s, int i);
    const char *(*col_text)(struct sdb_stmt *s, int i); /* "" for NULL */
    bool (*col_null)(struct sdb_stmt *s, int i);
    void (*reset)(struct sdb_stmt *s); /* ends the execution and clears the bindings */
    void (*finalize)(struct sdb_stmt *s);
    /* Rows changed by the last finished INSERT/UPDATE/DELETE of this connection. */
    int64_t (*changes)(struct sdb *db);
    /* SQLite only (NULL on PostgreSQL): the rowid of this connection's last INSERT. */
    int64_t (*last_rowid)(struct sdb *db);
    enum sdb_violation (*violation)(struct sdb *db);
    /* A script without parameters (migrations, transaction control). */
    int (*exec)(struct sdb *db, const char *sql, const char *what, struct ferry_error *err);
    /* Starts a transaction that will write (SQLite: BEGIN IMMEDIATE). */
    int (*begin)(struct sdb *db, struct ferry_error *err);
    /* Commits; refuses (and rolls back) a transaction a failed statement already spoiled. */
    int (*commit)(struct sdb *db, struct ferry_error *err);
    bool (*in_tx)(struct sdb *db); /* a transaction is open on the connection */
    /* The store's clock (the database server's for PostgreSQL), µs since the epoch. */
    int (*now_us)(struct sdb *db, int64_t *out, struct ferry_error *err);
    int (*set_sync_full)(struct sdb *db, bool full, struct ferry_error *err);
    /* Serialises migrations between processes (PostgreSQL: a session advisory lock;
     * SQLite: nothing, each step runs under BEGIN IMMEDIATE). */
    int (*migrate_lock)(struct sdb *db, bool lock, struct ferry_error *err);
    /* Whether "schema_migrations" exists, and how many other tables there are. */
    int (*tables)(struct sdb *db, bool *has_migrations, int64_t *others, struct ferry_error *err);
    /* Closes the connection and frees db. `why`, when not NULL, is the error that made the
     * store give up at open: the driver may replace it with a better explanation. */
    void (*close)(struct sdb *db, struct ferry_error *why);
};

#define SDB_CACHE_SLOTS 256

/* The part every driver's connection starts with. */
struct sdb {
    const struct sdb_driver *drv;
    char *label; /* what errors name after "state ": the path, or the URL without password */
    struct {
        const char *sql;
        struct sdb_stmt *stmt;
    } cache[SDB_CACHE_SLOTS];
};

/* Opens a driver connection for the url (sqlite path or postgres URL). */
int ferry__sdb_sqlite_open(const char *url, struct sdb **out, struct ferry_error *err);
int ferry__sdb_pg_open(const char *url, struct sdb **out, struct ferry_error *err);
bool ferry__sdb_is_pg_url(const char *url);

/* The SQL text for the dialect (see above); *n_params the highest placeholder number.
 * NULL when out of memory. Caller frees with ferry_free. */
char *ferry__sdb_expand(const char *sql, enum sdb_dialect d, int *n_params);
/* The cached statement for this SQL text (prepared on first use), reset. NULL on failure
 * (err set). */
struct sdb_stmt *ferry__sdb_stmt(struct sdb *db, const char *sql, struct ferry_error *err);
/* Finalizes the cached statements and closes the connection (see sdb_driver.close). */
void ferry__sdb_close(struct sdb *db, struct ferry_error *why);
/* "state LABEL: message" with the given code and origin. */
int ferry__sdb_fail(struct sdb *db, int code, const char *origin, struct ferry_error *err,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
