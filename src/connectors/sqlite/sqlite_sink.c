/* connectors/sqlite/sqlite_sink.c - the `sqlite` sink: tables in one SQLite file.
 *
 * Owns the destination connection, the tables it creates (quoted identifiers, declared
 * types that map back to the same ferry types, see sqlite_common.c), the staging tables
 * of `replace`, and the `_ferry_checkpoints` table written in the same transaction as
 * the data. Calls SQLite, the batch readers and digest, the config accessors. Registered
 * in connectors/registry.c; driven by the runner on one thread.
 *
 * Transactions. per_apply: every apply() is one transaction (rows + checkpoint), so what
 * apply returned is durable (WAL, synchronous=FULL). at_commit: one transaction from
 * begin() to commit(). `replace` loads `<table>__ferry_staging` and, at commit, drops the
 * old table and renames the staging one inside one transaction: a reader sees the old or
 * the new table, never half of one; a failed run keeps the old table. Because a staging
 * table is not the destination, replace reports at_commit durability even when its
 * staging rows are committed apply by apply (which lets a resumed attempt keep them).
 *
 * Exactly-once. The checkpoint row (pipeline, resource, shard) holds the position of the
 * last batch whose rows are committed with it; the runner reads them through the
 * `checkpoints` slot and resumes after them, so a resumed run writes no row twice even
 * in append mode. The row also sums what its run committed through it (run_rows,
 * run_bytes, run_batches): the runner raises the run's counters to them after a crash
 * between this commit and the store's.
 *
 * Waiting for the write lock. A commit group (a key-less table's whole copy, cdc streams)
 * holds the file's write lock across applies. The run's other lanes write the same file
 * through instances of their own: while a group of this process is open on the file they
 * wait for it as long as it lasts (busy_wait); otherwise a lock is waited for 10 s
 * (FERRY_SQLITE_BUSY_MS overrides it, for tests), then the apply fails naming the file. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "connectors/sqlite/sqlite_common.h"
#include "connectors/sqlite/sqlite_evolve.h"
#include "ferry/connector.h"
#include "ferry/digest.h"
#include "pipeline/schema_change.h"

#define SCRATCH 64   /* bytes of text scratch per value: decimals, times, uuids */
#define MANY_ROWS 64 /* rows per multi-row INSERT (fewer statement runs) */
#define CHECKPOINT_TABLE "_ferry_checkpoints"

static const char *const sink_tuning_keys[] = {"durability", NULL};
static const char *const durability_words[] = {"per_apply", "at_commit", NULL};

struct target {
    bool used;
    char *resource;
    char *table;   /* with table_prefix */
    char *staging; /* replace only */
    struct ferry_schema *schema;
    enum ferry_write_mode mode;
    sqlite3_stmt *ins;      /* insert, or upsert for upsert/merge */
    sqlite3_stmt *ins_many; /* the same for `many` rows at once (not merge) */
    int many;
    sqlite3_stmt *del; /* merge: delete by key (soft_col >= 0: set that column by key) */
    int soft_col;      /* merge: the target's soft_delete field, else -1 */
    int *key_cols;
    char *scratch;
    bool *skip; /* schema_changes: freeze: fields the existing table lacks (NULL: none) */
    char uri[512];
};

struct sink {
    sqlite3 *db;
    char *path;
    char *prefix;
    bool at_commit; /* durability: at_commit */
    struct target *t;
    int n_t;
    char *pipeline;
    int64_t run_id;
    bool session; /* begin() done, neither committed nor aborted */
    bool in_tx;   /* the at_commit transaction is open */
    bool grouped; /* in_tx is a commit group's, counted in held[] */
    int busy_steps; /* busy_wait's 10 ms steps since the lock was last held by a group */
    sqlite3_stmt *cp_put;
};

/* ---- open ------------------------------------------------------------------------------- */

static void held_count(const struct sink *s, int delta);

static int make_parents(const char *path, struct ferry_error *err)
{
    char *dir = ferry_strdup(path);
    if (dir == NULL) return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    char *slash = strrchr(dir, '/');
    int rc = FERRY_OK;
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1; rc == FERRY_OK; p++) {
            bool end = *p == '\0';
            if (*p == '/' || end) {
                char c = *p;
                *p = '\0';
                if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                    rc = ferry_error_set(err, errno == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "sqlite",
                                         "sqlite sink: cannot create folder %s: %s", dir,
                                         strerror(errno));
                *p = c;
            }
            if (end) break;
        }
    }
    ferry_free(dir);
    return rc;
}

static void finalize_target(struct target *t)
{
    sqlite3_finalize(t->ins);
    sqlite3_finalize(t->ins_many);
    sqlite3_finalize(t->del);
    t->ins = t->ins_many = t->del = NULL;
}

static void finalize_all(struct sink *s)
{
    for (int i = 0; i < s->n_t; i++)
        finalize_target(&s->t[i]);
    sqlite3_finalize(s->cp_put);
    s->cp_put = NULL;
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    finalize_all(s);
    if (s->in_tx) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    if (s->grouped) held_count(s, -1);
    for (int i = 0; i < s->n_t; i++) {
        struct target *t = &s->t[i];
        ferry_free(t->resource);
        ferry_free(t->table);
        ferry_free(t->staging);
        ferry_free(t->key_cols);
        ferry_free(t->scratch);
        ferry_free(t->skip);
        ferry_schema_unref(t->schema);
    }
    ferry_free(s->t);
    sqlite3_close_v2(s->db);
    ferry_free(s->path);
    ferry_free(s->prefix);
    ferry_free(s->pipeline);
    ferry_free(s);
}

/* ---- the write lock between this process's instances ---- */

/* Commit groups open in this process, per file (as the pipeline names it). */
struct held_file {
    char *path;
    int groups;
};
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static struct held_file *held;
static int n_held;

/* Counts a group of s's file in (+1) or out (-1); an entry stays once made. */
static void held_count(const struct sink *s, int delta)
{
    pthread_mutex_lock(&held_lock);
    int i = 0;
    while (i < n_held && strcmp(held[i].path, s->path) != 0)
        i++;
    if (i == n_held && delta > 0) {
        struct held_file *v = realloc(held, sizeof *v * (size_t)(n_held + 1));
        char *path = strdup(s->path);
        if (v != NULL) held = v;
        if (v != NULL && path != NULL) {
            held[n_held].path = path;
            held[n_held++].groups = 0;
        } else {
            free(path); /* not counted: its waiters keep the usual bound */
        }
    }
    if (i < n_held) held[i].groups += delta;
    pthread_mutex_unlock(&held_lock);
}

static bool held_here(const struct sink *s)
{
    pthread_mutex_lock(&held_lock);
    bool any = false;
    for (int i = 0; i < n_held && !any; i++)
        any = held[i].groups > 0 && strcmp(held[i].path, s->path) == 0;
    pthread_mutex_unlock(&held_lock);
    return any;
}

static int busy_ms(void)
{
    const char *e = getenv("FERRY_SQLITE_BUSY_MS");
    long ms = e && e[0] ? strtol(e, NULL, 10) : 10000;
    return ms > 0 && ms < 86400000 ? (int)ms : 10000;
}

/* SQLite's busy handler: 10 ms steps, for busy_ms() in all, not counting the steps during
 * which a commit group of this process holds the file (it commits when its table or cut is
 * done; then the lock is tried again and the count starts over). */
static int busy_wait(void *ctx, int tries)
{
    struct sink *s = ctx;
    if (tries == 0 || held_here(s)) s->busy_steps = 0;
    if (s->busy_steps++ * 10 >= busy_ms()) return 0;
    usleep(10000);
    return 1;
}

/* Opens the file on first use, not in open(): a pipeline refused at plan time (policy,
 * unknown keys) must leave no destination behind. With !create a missing file stays
 * missing and s->db NULL (reading checkpoints of a destination never written). */
static int connect(struct sink *s, bool create, struct ferry_error *err)
{
    if (s->db != NULL) return FERRY_OK;
    struct stat st;
    if (!create && stat(s->path, &st) != 0) return FERRY_OK;
    int rc = make_parents(s->path, err);
    if (rc != FERRY_OK) return rc;
    if (sqlite3_open_v2(s->path, &s->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        rc = ferry__sqlite_error(err, FERRY_EIO, s->db, "sqlite sink: cannot open %s", s->path);
        sqlite3_close_v2(s->db);
        s->db = NULL;
        return rc;
    }
    sqlite3_busy_handler(s->db, busy_wait, s);
    sqlite3_extended_result_codes(s->db, 1);
    /* WAL: readers keep their snapshot while we write; FULL: a commit survives power loss,
     * which is what per_apply promises. */
    rc = ferry__sqlite_exec(s->db, "PRAGMA journal_mode=WAL", "sqlite sink: WAL mode", err);
    if (rc == FERRY_OK)
        rc = ferry__sqlite_exec(s->db, "PRAGMA synchronous=FULL", "sqlite sink", err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "%s", s->path);
        sqlite3_close_v2(s->db);
        s->db = NULL;
    }
    return rc;
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *path = NULL, *prefix = NULL;
    int durability = 0;
    int rc = ferry_cfg_str(cfg, "path", true, &path, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "durability", false, durability_words, &durability, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "table_prefix", false, &prefix, err);
    if (rc != FERRY_OK) return rc;
    if (path[0] == '\0') return ferry_cfg_error(err, cfg, "path: must not be empty");

    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    s->path = ferry_strdup(path);
    s->prefix = ferry_strdup(prefix ? prefix : "");
    s->at_commit = durability == 1;
    if (s->path == NULL || s->prefix == NULL) {
        sink_close(s);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    *ctx = s;
    return FERRY_OK;
}

static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    struct sink *s = ctx;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) |
                        (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    caps->durability = (s->at_commit || mode == FERRY_WRITE_REPLACE) ? FERRY_DURABLE_AT_COMMIT
                                                                     : FERRY_DURABLE_PER_APPLY;
    caps->encoded_integrity = false;
    caps->transactional_checkpoint = true;
    /* per_apply: each apply is its own short write transaction (busy_timeout waits) */
    caps->concurrent_sessions = true;
    caps->atomic_replace = true;
    /* The swap at commit publishes the staging table whole: a paused replace must not. */
    caps->replace_commits_once = true;
    caps->deletes = true;
    caps->soft_deletes = mode == FERRY_WRITE_MERGE;
    caps->truncates = mode == FERRY_WRITE_UPSERT || mode == FERRY_WRITE_MERGE;
    /* dates and timestamps are text of years 0001..9999; a REAL keeps no -0 */
    caps->values.calendar = true;
    caps->values.no_negative_zero = true;
}

/* ---- tables ----------------------------------------------------------------------------- */

struct dest_col {
    char *name;
    char *decl;
    int pk;
};

static void dest_cols_free(struct dest_col *c, int n)
{
    for (int i = 0; i < n; i++) {
        ferry_free(c[i].name);
        ferry_free(c[i].decl);
    }
    ferry_free(c);
}

/* Columns of main.<table>, or n = 0 when it does not exist. */
static int dest_columns(sqlite3 *db, const char *table, struct dest_col **out, int *n,
                        struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT name, type, pk FROM pragma_table_info(?1, 'main') ORDER BY cid",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESINK, db, "sqlite sink: table \"%s\"", table);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    int rc = FERRY_OK, src;
    struct dest_col *c = NULL;
    int k = 0;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        struct dest_col *nc = ferry_realloc(c, sizeof *c * (size_t)(k + 1));
        if (nc == NULL) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
            break;
        }
        c = nc;
        c[k].name = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        c[k].decl = ferry_strdup(
            sqlite3_column_text(st, 1) ? (const char *)sqlite3_column_text(st, 1) : "");
        c[k].pk = sqlite3_column_int(st, 2);
        k++;
        if (c[k - 1].name == NULL || c[k - 1].decl == NULL) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
            break;
        }
    }
    if (rc == FERRY_OK && src != SQLITE_DONE)
        rc = ferry__sqlite_error(err, FERRY_ESINK, db, "sqlite sink: table \"%s\"", table);
    sqlite3_finalize(st);
    if (rc != FERRY_OK) {
        dest_cols_free(c, k);
        return rc;
    }
    *out = c;
    *n = k;
    return FERRY_OK;
}

static int int_rank(enum ferry_type t)
{
    switch (t) {
    case FERRY_TYPE_INT8:
        return 1;
    case FERRY_TYPE_INT16:
        return 2;
    case FERRY_TYPE_INT32:
        return 3;
    case FERRY_TYPE_INT64:
        return 4;
    default:
        return 0;
    }
}

/* Whether a destination column declared `decl` holds every value of f exactly. */
static bool holds(const char *decl, const struct ferry_field *f, char *what, size_t len)
{
    enum ferry_type dt;
    int p, sc;
    ferry__sqlite_type_from_decl(decl, &dt, &p, &sc);
    if (dt == FERRY_TYPE_DECIMAL128)
        snprintf(what, len, "decimal128(%d,%d)", p, sc);
    else
        snprintf(what, len, "%s", ferry_type_name(dt));
    if (dt == f->type)
        return dt != FERRY_TYPE_DECIMAL128 || (sc == f->scale && p - sc >= f->precision - f->scale);
    if (int_rank(dt) && int_rank(f->type)) return int_rank(dt) >= int_rank(f->type);
    if (dt == FERRY_TYPE_FLOAT64 && f->type == FERRY_TYPE_FLOAT32) return true;
    if (dt == FERRY_TYPE_DECIMAL_TEXT && f->type == FERRY_TYPE_DECIMAL128) return true;
    return false;
}

static void field_type_text(const struct ferry_field *f, char *buf, size_t len)
{
    if (f->type == FERRY_TYPE_DECIMAL128)
        snprintf(buf, len, "decimal128(%d,%d)", f->precision, f->scale);
    else
        snprintf(buf, len, "%s", ferry_type_name(f->type));
}

static int column_def(struct ferry_buf *b, const struct ferry_field *f, bool not_null)
{
    char decl[48];
    ferry__sqlite_decl_for(f, decl, sizeof decl);
    int rc = ferry__sqlite_quote(b, f->name);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " %s%s", decl, not_null ? " NOT NULL" : "");
    return rc;
}

/* Append tables get no PRIMARY KEY: an append target is a log that may hold a key more
 * than once (repeated full runs, change logs); the other modes declare the data's key. */
static int create_table(struct sink *s, const char *table, const struct ferry_schema *sc,
                        bool declare_key, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "CREATE TABLE ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, table);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " (");
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i) rc = ferry_buf_printf(&b, ", ");
        if (rc == FERRY_OK)
            rc = column_def(&b, &sc->fields[i],
                            !sc->fields[i].nullable || sc->fields[i].key_pos > 0);
    }
    if (declare_key && sc->n_key > 0 && rc == FERRY_OK) {
        rc = ferry_buf_printf(&b, ", PRIMARY KEY (");
        for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
            if (k) rc = ferry_buf_printf(&b, ", ");
            if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, sc->fields[sc->key[k]].name);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ")");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ")");
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    if (sqlite3_exec(s->db, b.data, NULL, NULL, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: creating table \"%s\"",
                                 s->path, table);
    ferry_buf_release(&b);
    return rc;
}

static int add_column(struct sink *s, const char *table, const struct ferry_field *f,
                      struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "ALTER TABLE ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, table);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " ADD COLUMN ");
    /* NOT NULL cannot be added to a table that has rows (they would need a default). */
    if (rc == FERRY_OK) rc = column_def(&b, f, false);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    if (sqlite3_exec(s->db, b.data, NULL, NULL, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db,
                                 "sqlite sink: %s: adding column \"%s\" to table \"%s\"", s->path,
                                 f->name, table);
    ferry_buf_release(&b);
    return rc;
}

/* A change made to an existing table, for the run's schema.changed events. */
static void note(const struct ferry_target *target, const char *table, const char *column,
                 enum ferry_schema_change_kind k, const char *old_decl,
                 const struct ferry_field *f)
{
    if (target == NULL || target->route == NULL) return;
    char decl[48], name[300];
    ferry__sqlite_decl_for(f, decl, sizeof decl);
    snprintf(name, sizeof name, "\"%s\" (destination)", table);
    ferry_schema_change_note(target->route, name, column, k, old_decl, decl,
                             target->schema_changes, FERRY_SC_APPLY);
}

/* schema_changes: freeze, on a table that exists: field i, which it lacks, is not written
 * (a key or soft_delete field it lacks is an error). */
static int freeze_skip(struct sink *s, const char *table, const struct ferry_schema *sc, int i,
                       bool **skip, struct ferry_error *err)
{
    if (sc->fields[i].key_pos > 0 || sc->soft_delete == i + 1)
        return ferry_error_set(err, FERRY_ESINK, "sqlite",
                               "sqlite sink: %s: table \"%s\" has no column \"%s\", which ferry "
                               "needs (key or soft_delete) and schema_changes: freeze does not add",
                               s->path, table, sc->fields[i].name);
    if (*skip == NULL && (*skip = ferry_calloc((size_t)sc->n_fields, sizeof **skip)) == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    (*skip)[i] = true;
    ferry_log(FERRY_LOG_INFO,
              "sqlite sink: %s: table \"%s\" has no column \"%s\": not written (schema_changes: "
              "freeze)",
              s->path, table, sc->fields[i].name);
    return FERRY_OK;
}

/* schema_changes: evolve: the destination's columns the data no longer has (dropped at the
 * source) are NULL from now on: their NOT NULL goes; the widened columns get their new
 * declared types (sqlite_evolve.c). */
static int evolve_table(struct sink *s, const char *table, const struct ferry_schema *sc,
                        const struct dest_col *dc, int n_dc,
                        const struct ferry_sqlite_retype *retype, int n_retype,
                        const struct ferry_target *target, struct ferry_error *err)
{
    const char *gone[64];
    bool relaxed[64];
    int n = 0;
    for (int j = 0; j < n_dc && n < 64; j++) {
        bool have = false;
        for (int i = 0; i < sc->n_fields && !have; i++)
            have = sqlite3_stricmp(sc->fields[i].name, dc[j].name) == 0;
        if (!have) gone[n++] = dc[j].name;
    }
    if (n == 0 && n_retype == 0) return FERRY_OK;
    int rc = ferry__sqlite_evolve(s->db, s->path, table, gone, n, relaxed, retype, n_retype, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        if (!relaxed[i] || target->route == NULL) continue;
        char name[300];
        snprintf(name, sizeof name, "\"%s\" (destination)", table);
        ferry_schema_change_note(target->route, name, gone[i], FERRY_SC_DROPPED, "NOT NULL", NULL,
                                 target->schema_changes, FERRY_SC_APPLY);
    }
    return rc;
}

/* schema_changes: evolve and a column whose declared type the data's widens (INT4 ->
 * INTEGER, FLOAT4 -> DOUBLE, a wider DECIMAL_TEXT): the table is rebuilt with the new
 * declaration (evolve_table). */
static bool widened(struct sink *s, const char *table, const char *decl,
                    const struct ferry_field *f)
{
    struct ferry_field d = {0};
    ferry__sqlite_type_from_decl(decl, &d.type, &d.precision, &d.scale);
    if (!ferry_type_widens(&d, f)) return false;
    (void)s;
    (void)table;
    return true;
}

/* Creates the table, or checks the existing one: adds missing columns, refuses a column
 * whose declared type cannot hold the data, and (for upsert/merge) a primary key that is
 * not the data's key, since ON CONFLICT needs exactly that unique key. */
static int ensure_table(struct sink *s, const char *table, const struct ferry_schema *sc,
                        bool need_key, bool declare_key, const struct ferry_target *target,
                        bool **skip, struct ferry_error *err)
{
    struct dest_col *dc;
    int n_dc;
    int rc = dest_columns(s->db, table, &dc, &n_dc, err);
    if (rc != FERRY_OK) return rc;
    if (n_dc == 0) return create_table(s, table, sc, declare_key, err);
    bool evolve = target != NULL && target->schema_changes == FERRY_SCHEMA_EVOLVE;
    struct ferry_sqlite_retype retype[64];
    char decls[64][48];
    int n_retype = 0;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[i];
        int j = 0;
        while (j < n_dc && sqlite3_stricmp(dc[j].name, f->name) != 0)
            j++;
        if (j == n_dc && skip != NULL && target->schema_changes == FERRY_SCHEMA_FREEZE) {
            rc = freeze_skip(s, table, sc, i, skip, err);
            continue;
        }
        if (j == n_dc) {
            rc = add_column(s, table, f, err);
            if (rc == FERRY_OK) note(target, table, f->name, FERRY_SC_ADDED, NULL, f);
            continue;
        }
        char have[64], want[64];
        if (!holds(dc[j].decl, f, have, sizeof have) && evolve && n_retype < 64 &&
            widened(s, table, dc[j].decl, f)) {
            ferry__sqlite_decl_for(f, decls[n_retype], sizeof decls[0]);
            retype[n_retype].name = f->name;
            retype[n_retype].decl = decls[n_retype];
            n_retype++;
            note(target, table, f->name, FERRY_SC_WIDENED, dc[j].decl, f);
            continue;
        }
        if (!holds(dc[j].decl, f, have, sizeof have)) {
            field_type_text(f, want, sizeof want);
            rc = ferry_error_set(err, FERRY_ESINK, "sqlite",
                                 "sqlite sink: %s: table \"%s\" column \"%s\" is %s (declared "
                                 "%s) but the data is %s; ferry adds columns, it does not "
                                 "change their types",
                                 s->path, table, f->name, have,
                                 dc[j].decl[0] ? dc[j].decl : "without a type", want);
        }
    }
    if (rc == FERRY_OK && evolve)
        rc = evolve_table(s, table, sc, dc, n_dc, retype, n_retype, target, err);
    if (rc == FERRY_OK && need_key) {
        int n_pk = 0;
        bool same = true;
        for (int j = 0; j < n_dc; j++) {
            if (dc[j].pk == 0) continue;
            n_pk++;
            int f = -1;
            for (int k = 0; k < sc->n_key; k++)
                if (sqlite3_stricmp(sc->fields[sc->key[k]].name, dc[j].name) == 0) f = k;
            if (f < 0) same = false;
        }
        if (!same || n_pk != sc->n_key)
            rc = ferry_error_set(err, FERRY_ESINK, "sqlite",
                                 "sqlite sink: %s: table \"%s\" exists with a primary key that is "
                                 "not the data's key, so upsert cannot match rows by key",
                                 s->path, table);
    }
    dest_cols_free(dc, n_dc);
    return rc;
}

static int drop_table(struct sink *s, const char *table, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "DROP TABLE IF EXISTS ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, table);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    if (sqlite3_exec(s->db, b.data, NULL, NULL, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: dropping table \"%s\"",
                                 s->path, table);
    ferry_buf_release(&b);
    return rc;
}

/* ---- prepare / begin ---------------------------------------------------------------------- */

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (target->index < 0)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite", "sqlite sink: bad target index %d",
                               target->index);
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
        memset(nt + s->n_t, 0, sizeof *nt * (size_t)(target->index + 1 - s->n_t));
        s->t = nt;
        s->n_t = target->index + 1;
    }
    int crc = connect(s, true, err);
    if (crc != FERRY_OK) return crc;
    struct target *t = &s->t[target->index];
    if (t->used)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite", "sqlite sink: target %d prepared twice",
                               target->index);
    const struct ferry_schema *sc = target->schema;
    if ((target->mode == FERRY_WRITE_UPSERT || target->mode == FERRY_WRITE_MERGE) && sc->n_key == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "sqlite",
                               "sqlite sink: table \"%s\": write %s needs a key and resource %s "
                               "has none",
                               target->table, ferry_write_mode_name(target->mode),
                               target->resource);
    /* A merge that marks deleted rows (cdc soft_delete) instead of deleting them. */
    t->soft_col = target->mode == FERRY_WRITE_MERGE && sc->soft_delete > 0 &&
                          sc->soft_delete <= sc->n_fields && sc->fields[sc->soft_delete - 1].key_pos == 0
                      ? sc->soft_delete - 1
                      : -1;
    t->used = true;
    t->mode = target->mode;
    t->schema = ferry_schema_ref(target->schema);
    t->resource = ferry_strdup(target->resource ? target->resource : "");
    t->table = ferry_asprintf("%s%s", s->prefix, target->table);
    t->staging = t->table ? ferry_asprintf("%s__ferry_staging", t->table) : NULL;
    t->scratch =
        ferry_malloc((size_t)SCRATCH * MANY_ROWS * (size_t)(sc->n_fields ? sc->n_fields : 1));
    t->key_cols = ferry_malloc(sizeof *t->key_cols * (size_t)(sc->n_key ? sc->n_key : 1));
    if (!t->resource || !t->table || !t->staging || !t->scratch || !t->key_cols)
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    for (int k = 0; k < sc->n_key; k++)
        t->key_cols[k] = sc->key[k];
    snprintf(t->uri, sizeof t->uri, "sqlite:%s#%s", s->path, t->table);
    if (t->mode == FERRY_WRITE_REPLACE) return FERRY_OK; /* staging is made by begin() */
    return ensure_table(s, t->table, sc,
                        t->mode == FERRY_WRITE_UPSERT || t->mode == FERRY_WRITE_MERGE,
                        t->mode != FERRY_WRITE_APPEND, target, &t->skip, err);
}

/* skip (freeze): fields left out; the others keep their parameter numbers (?field + 1). */
static int build_insert(struct ferry_buf *b, const char *table, const struct ferry_schema *sc,
                        bool upsert, int rows, const bool *skip)
{
    int rc = ferry_buf_printf(b, "INSERT INTO ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, table);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, " (");
    for (int i = 0, n = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (skip && skip[i]) continue;
        if (n++) rc = ferry_buf_printf(b, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[i].name);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ") VALUES ");
    for (int r = 0; r < rows && rc == FERRY_OK; r++) {
        rc = ferry_buf_printf(b, "%s(", r ? ", " : "");
        for (int i = 0, n = 0; i < sc->n_fields && rc == FERRY_OK; i++)
            if (!(skip && skip[i]))
                rc = ferry_buf_printf(b, "%s?%d", n++ ? ", " : "", r * sc->n_fields + i + 1);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")");
    }
    if (!upsert || rc != FERRY_OK) return rc;
    rc = ferry_buf_printf(b, " ON CONFLICT (");
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        if (k) rc = ferry_buf_printf(b, ", ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[sc->key[k]].name);
    }
    int n_set = 0;
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ") DO ");
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (sc->fields[i].key_pos > 0 || (skip && skip[i])) continue;
        rc = ferry_buf_printf(b, n_set++ ? ", " : "UPDATE SET ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[i].name);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, " = excluded.");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[i].name);
    }
    if (rc == FERRY_OK && n_set == 0) rc = ferry_buf_printf(b, "NOTHING");
    return rc;
}

/* soft_col >= 0 (soft_delete): marks the row, ?1 the mark, the key from ?2. */
static int build_delete(struct ferry_buf *b, const char *table, const struct ferry_schema *sc,
                        int soft_col)
{
    int rc = ferry_buf_printf(b, soft_col < 0 ? "DELETE FROM " : "UPDATE ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, table);
    if (rc == FERRY_OK && soft_col >= 0) {
        rc = ferry_buf_printf(b, " SET ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[soft_col].name);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, " = ?1");
    }
    int base = soft_col < 0 ? 1 : 2;
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        rc = ferry_buf_printf(b, k ? " AND " : " WHERE ");
        if (rc == FERRY_OK) rc = ferry__sqlite_quote(b, sc->fields[sc->key[k]].name);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, " = ?%d", k + base);
    }
    return rc;
}

static int prepare_sql(struct sink *s, struct ferry_buf *b, int built, sqlite3_stmt **st,
                       const char *table, struct ferry_error *err)
{
    if (built != FERRY_OK) {
        ferry_buf_release(b);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    int rc = FERRY_OK;
    if (sqlite3_prepare_v3(s->db, b->data, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: table \"%s\"", s->path,
                                 table);
    ferry_buf_release(b);
    return rc;
}

static int prepare_statements(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct ferry_buf b;
    bool upsert = t->mode == FERRY_WRITE_UPSERT || t->mode == FERRY_WRITE_MERGE;
    const char *into = t->mode == FERRY_WRITE_REPLACE ? t->staging : t->table;
    ferry_buf_init(&b, 0);
    int rc = prepare_sql(s, &b, build_insert(&b, into, t->schema, upsert, 1, t->skip), &t->ins,
                         into, err);
    int nf = t->schema->n_fields;
    int max_vars = sqlite3_limit(s->db, SQLITE_LIMIT_VARIABLE_NUMBER, -1);
    t->many = nf > 0 ? max_vars / nf : 0;
    if (t->many > MANY_ROWS) t->many = MANY_ROWS;
    /* Merge keeps one statement per row: deletes and upserts must stay in batch order. */
    if (rc == FERRY_OK && t->mode != FERRY_WRITE_MERGE && t->many > 1 && t->skip == NULL) {
        ferry_buf_init(&b, 0);
        rc = prepare_sql(s, &b, build_insert(&b, into, t->schema, upsert, t->many, NULL), &t->ins_many,
                         into, err);
    }
    if (rc == FERRY_OK && t->mode == FERRY_WRITE_MERGE) {
        ferry_buf_init(&b, 0);
        rc = prepare_sql(s, &b, build_delete(&b, t->table, t->schema, t->soft_col), &t->del, t->table, err);
    }
    return rc;
}

/* The checkpoint table, with the run_* count columns (nullable: NULL is "not counted", the
 * rows of a table an older ferry made). Another lane of the run may add them at the same
 * time: a column it added first is no error. */
static int ensure_checkpoint_table(struct sink *s, struct ferry_error *err)
{
    int rc = ferry__sqlite_exec(s->db,
                                "CREATE TABLE IF NOT EXISTS \"" CHECKPOINT_TABLE "\" ("
                                "pipeline TEXT NOT NULL, resource TEXT NOT NULL, "
                                "shard INTEGER NOT NULL, run_id INTEGER NOT NULL, "
                                "position TEXT, updated_at TEXT NOT NULL, run_rows INTEGER, "
                                "run_bytes INTEGER, run_batches INTEGER, "
                                "PRIMARY KEY (pipeline, resource, shard))",
                                "sqlite sink: creating " CHECKPOINT_TABLE, err);
    static const char *const add[] = {
        "ALTER TABLE \"" CHECKPOINT_TABLE "\" ADD COLUMN run_rows INTEGER",
        "ALTER TABLE \"" CHECKPOINT_TABLE "\" ADD COLUMN run_bytes INTEGER",
        "ALTER TABLE \"" CHECKPOINT_TABLE "\" ADD COLUMN run_batches INTEGER"};
    static const char *const col[] = {"run_rows", "run_bytes", "run_batches"};
    for (int i = 0; i < 3 && rc == FERRY_OK; i++) {
        if (sqlite3_table_column_metadata(s->db, NULL, CHECKPOINT_TABLE, col[i], NULL, NULL, NULL,
                                          NULL, NULL) == SQLITE_OK)
            continue;
        if (sqlite3_exec(s->db, add[i], NULL, NULL, NULL) != SQLITE_OK &&
            strstr(sqlite3_errmsg(s->db), "duplicate column") == NULL)
            rc = ferry__sqlite_error(err, FERRY_ESINK, s->db,
                                     "sqlite sink: %s: adding %s to " CHECKPOINT_TABLE, s->path,
                                     col[i]);
    }
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (s->session)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite", "sqlite sink: %s: session already open",
                               s->path);
    ferry_free(s->pipeline);
    s->pipeline = ferry_strdup(run && run->pipeline ? run->pipeline : "");
    if (s->pipeline == NULL) return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    s->run_id = run ? run->run_id : 0;
    int rc = connect(s, true, err);
    if (rc != FERRY_OK) return rc;
    rc = ensure_checkpoint_table(s, err);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++) {
        struct target *t = &s->t[i];
        if (!t->used) continue;
        if (t->mode == FERRY_WRITE_REPLACE) {
            /* A later attempt of the same run keeps the rows its checkpoints account for. */
            if (!(run && run->resuming)) rc = drop_table(s, t->staging, err);
            if (rc == FERRY_OK) rc = ensure_table(s, t->staging, t->schema, false, true, NULL, NULL, err);
        }
        if (rc == FERRY_OK) rc = prepare_statements(s, t, err);
    }
    if (rc == FERRY_OK &&
        sqlite3_prepare_v3(s->db,
                           "INSERT INTO \"" CHECKPOINT_TABLE
                           "\" AS c (pipeline, resource, shard, run_id, position, updated_at, "
                           "run_rows, run_bytes, run_batches) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                           "?7, ?8, 1) ON CONFLICT (pipeline, resource, shard) DO UPDATE SET "
                           "run_id = excluded.run_id, position = excluded.position, "
                           "updated_at = excluded.updated_at, "
                           "run_rows = CASE WHEN c.run_id = excluded.run_id "
                           "THEN c.run_rows + excluded.run_rows ELSE excluded.run_rows END, "
                           "run_bytes = CASE WHEN c.run_id = excluded.run_id "
                           "THEN c.run_bytes + excluded.run_bytes ELSE excluded.run_bytes END, "
                           "run_batches = CASE WHEN c.run_id = excluded.run_id "
                           "THEN c.run_batches + 1 ELSE 1 END",
                           -1, SQLITE_PREPARE_PERSISTENT, &s->cp_put, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: " CHECKPOINT_TABLE,
                                 s->path);
    if (rc == FERRY_OK && s->at_commit) {
        rc = ferry__sqlite_exec(s->db, "BEGIN IMMEDIATE", "sqlite sink: begin", err);
        if (rc == FERRY_OK) s->in_tx = true;
    }
    if (rc != FERRY_OK) {
        finalize_all(s);
        return rc;
    }
    s->session = true;
    return FERRY_OK;
}

/* ---- apply ------------------------------------------------------------------------------ */

/* Binds column `f` of row r to parameter p. Text is bound in place (the batch outlives the
 * step); formatted values use the column's scratch slot. */
static inline int bind_value(sqlite3_stmt *st, int p, const struct ferry_batch *b, int f, int64_t r,
                             char *scratch)
{
    if (ferry_col_is_null(b, f, r)) return sqlite3_bind_null(st, p);
    const struct ferry_field *fd = &b->schema->fields[f];
    size_t len;
    const uint8_t *bytes;
    int n;
    switch (fd->type) {
    case FERRY_TYPE_BOOL:
        return sqlite3_bind_int(st, p, ferry_col_bool(b, f, r));
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        return sqlite3_bind_int64(st, p, ferry_col_int(b, f, r));
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: {
        /* SQLite turns a bound NaN into NULL and stores -0 as 0: NaN goes in as the text
         * 'NaN' (REAL affinity leaves it text; the sqlite source reads it back as NaN), -0 is
         * refused (SQLITE_MISMATCH: no form of it survives a REAL column). ±Infinity is a
         * REAL SQLite keeps. */
        double d = ferry_col_float(b, f, r);
        if (isnan(d)) return sqlite3_bind_text(st, p, "NaN", 3, SQLITE_STATIC);
        if (d == 0 && signbit(d)) return SQLITE_MISMATCH;
        return sqlite3_bind_double(st, p, d);
    }
    case FERRY_TYPE_DECIMAL128:
        n = ferry_decimal128_to_text(ferry_col_dec128(b, f, r), fd->scale, scratch, SCRATCH);
        break;
    case FERRY_TYPE_DECIMAL_TEXT:
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
        bytes = ferry_col_bytes(b, f, r, &len);
        return sqlite3_bind_text(st, p, bytes ? (const char *)bytes : "", (int)len, SQLITE_STATIC);
    case FERRY_TYPE_BINARY:
        bytes = ferry_col_bytes(b, f, r, &len);
        return sqlite3_bind_blob(st, p, bytes ? (const void *)bytes : "", (int)len, SQLITE_STATIC);
    case FERRY_TYPE_DATE32:
        n = ferry__sqlite_date_text((int32_t)ferry_col_int(b, f, r), scratch);
        break;
    case FERRY_TYPE_TIME64_US:
        n = ferry__sqlite_time_text(ferry_col_int(b, f, r), scratch);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
        n = ferry__sqlite_ts_text(ferry_col_int(b, f, r), false, scratch);
        break;
    case FERRY_TYPE_TIMESTAMPTZ_US:
        n = ferry__sqlite_ts_text(ferry_col_int(b, f, r), true, scratch);
        break;
    case FERRY_TYPE_UUID:
        n = ferry_uuid_to_text(ferry_col_fixed(b, f, r), scratch, SCRATCH);
        break;
    default:
        return SQLITE_MISUSE;
    }
    if (n < 0) return SQLITE_RANGE;
    return sqlite3_bind_text(st, p, scratch, n, SQLITE_STATIC);
}

static int row_error(struct sink *s, const struct target *t, const struct ferry_batch *b, int64_t r,
                     int f, int brc, struct ferry_error *err)
{
    if (brc == SQLITE_RANGE && f >= 0)
        return ferry_error_set(err, FERRY_ESINK, "sqlite",
                               "sqlite sink: table \"%s\" column \"%s\", batch %" PRIu64
                               " row %" PRId64 ": value outside what the text form covers "
                               "(years 0001..9999)",
                               t->table, b->schema->fields[f].name, b->seq, r);
    if (brc == SQLITE_MISMATCH && f >= 0)
        return ferry_error_set(err, FERRY_ESINK, "sqlite",
                               "sqlite sink: table \"%s\" column \"%s\", batch %" PRIu64
                               " row %" PRId64 ": float -0 cannot be stored exactly (SQLite keeps "
                               "it as 0); refused",
                               t->table, b->schema->fields[f].name, b->seq, r);
    return ferry__sqlite_error(err, FERRY_ESINK, s->db,
                               "sqlite sink: %s: table \"%s\", batch %" PRIu64 " row %" PRId64,
                               s->path, t->table, b->seq, r);
}

static int step_reset(struct sink *s, const struct target *t, const struct ferry_batch *b,
                      sqlite3_stmt *st, int64_t r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (sqlite3_step(st) != SQLITE_DONE) rc = row_error(s, t, b, r, -1, SQLITE_ERROR, err);
    sqlite3_reset(st);
    return rc;
}

/* A source TRUNCATE (cdc, upsert/merge): every row of the table written before it goes. */
static int apply_truncate(struct sink *s, const struct target *t, struct ferry_error *err)
{
    struct ferry_buf q;
    ferry_buf_init(&q, 0);
    int rc = ferry_buf_printf(&q, "DELETE FROM ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&q, t->table);
    if (rc != FERRY_OK) {
        ferry_buf_release(&q);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    char what[300];
    snprintf(what, sizeof what, "sqlite sink: %s: table \"%s\": a truncate from the source",
             s->path, t->table);
    rc = ferry__sqlite_exec(s->db, q.data, what, err);
    ferry_buf_release(&q);
    return rc;
}

static bool has_truncate(const struct ferry_batch *b)
{
    for (int64_t r = 0; r < b->length; r++)
        if (ferry_batch_op(b, r) == FERRY_OP_TRUNCATE) return true;
    return false;
}

static int write_rows(struct sink *s, struct target *t, const struct ferry_batch *b,
                      struct ferry_error *err)
{
    const int nf = b->schema->n_fields;
    const bool merge = t->mode == FERRY_WRITE_MERGE;
    int64_t r = 0;
    /* Whole groups of `many` rows through the multi-row statement (row by row when a
     * truncate must land between rows). */
    if (t->ins_many != NULL && !has_truncate(b)) {
        for (; r + t->many <= b->length; r += t->many) {
            int brc = SQLITE_OK, f = 0, k;
            for (k = 0; k < t->many && brc == SQLITE_OK; k++)
                for (f = 0; f < nf && brc == SQLITE_OK; f++)
                    brc = bind_value(t->ins_many, k * nf + f + 1, b, f, r + k,
                                     t->scratch + ((size_t)k * (size_t)nf + (size_t)f) * SCRATCH);
            if (brc != SQLITE_OK) {
                sqlite3_reset(t->ins_many);
                return row_error(s, t, b, r + k - 1, f - 1, brc, err);
            }
            int rc = step_reset(s, t, b, t->ins_many, r, err);
            if (rc != FERRY_OK) return rc;
        }
    }
    for (; r < b->length; r++) {
        sqlite3_stmt *st = t->ins;
        int brc = SQLITE_OK, f = 0;
        if (ferry_batch_op(b, r) == FERRY_OP_TRUNCATE) {
            int rc = apply_truncate(s, t, err);
            if (rc != FERRY_OK) return rc;
            continue;
        }
        if (merge && ferry_batch_op(b, r) == FERRY_OP_DELETE) {
            st = t->del;
            int base = 1;
            if (t->soft_col >= 0) {
                f = t->soft_col;
                brc = bind_value(st, 1, b, f, r, t->scratch + (size_t)f * SCRATCH);
                base = 2;
            }
            for (int k = 0; k < b->schema->n_key && brc == SQLITE_OK; k++) {
                f = t->key_cols[k];
                brc = bind_value(st, k + base, b, f, r, t->scratch + (size_t)f * SCRATCH);
            }
        } else {
            for (f = 0; f < nf && brc == SQLITE_OK; f++)
                if (t->skip == NULL || !t->skip[f])
                    brc = bind_value(st, f + 1, b, f, r, t->scratch + (size_t)f * SCRATCH);
            f--;
        }
        if (brc != SQLITE_OK) {
            sqlite3_reset(st);
            return row_error(s, t, b, r, f, brc, err);
        }
        int rc = step_reset(s, t, b, st, r, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

static int put_checkpoint(struct sink *s, const struct ferry_batch *b, struct ferry_error *err)
{
    char now[40];
    ferry_format_time_us(ferry_now_wall_us(), now, sizeof now);
    sqlite3_stmt *st = s->cp_put;
    sqlite3_bind_text(st, 1, s->pipeline, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, b->resource ? b->resource : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, b->shard);
    sqlite3_bind_int64(st, 4, s->run_id);
    sqlite3_bind_text(st, 5, b->position, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, now, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, b->length);
    sqlite3_bind_int64(st, 8, (sqlite3_int64)b->bytes);
    int rc = FERRY_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db,
                                 "sqlite sink: %s: saving the checkpoint "
                                 "of resource %s",
                                 s->path, b->resource ? b->resource : "");
    sqlite3_reset(st);
    return rc;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite sink: apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    /* The digest of exactly the batch whose values are bound below. */
    receipt->write_crc = ferry_batch_digest(b);
    receipt->rows = b->length;
    receipt->bytes = (int64_t)b->bytes;
    receipt->has_encoded_crc = false;
    receipt->encoded_crc = 0;
    snprintf(receipt->uri, sizeof receipt->uri, "%s", t->uri);
    if (receipt->write_crc != b->digest) return FERRY_OK; /* the pipeline reports divergence */

    int rc = FERRY_OK;
    if (!s->in_tx) rc = ferry__sqlite_exec(s->db, "BEGIN IMMEDIATE", "sqlite sink: begin", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->path);
    rc = write_rows(s, t, b, err);
    if (rc == FERRY_OK && b->position != NULL) rc = put_checkpoint(s, b, err);
    if (!s->in_tx) {
        if (rc == FERRY_OK) {
            rc = ferry__sqlite_exec(s->db, "COMMIT", "sqlite sink: commit", err);
            if (rc != FERRY_OK) ferry_error_prefix(err, "%s: table \"%s\"", s->path, t->table);
        }
        if (rc != FERRY_OK) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    }
    return rc;
}

/* ---- commit / abort ---------------------------------------------------------------------- */

static int swap_staging(struct sink *s, struct target *t, struct ferry_error *err)
{
    int rc = drop_table(s, t->table, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    rc = ferry_buf_printf(&b, "ALTER TABLE ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, t->staging);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " RENAME TO ");
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, t->table);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    if (sqlite3_exec(s->db, b.data, NULL, NULL, NULL) != SQLITE_OK)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: replacing table \"%s\"",
                                 s->path, t->table);
    ferry_buf_release(&b);
    return rc;
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite sink: %s: commit without a session", s->path);
    /* Statements on a staging table must not outlive its rename. */
    finalize_all(s);
    int rc = FERRY_OK;
    if (!s->in_tx) {
        rc = ferry__sqlite_exec(s->db, "BEGIN IMMEDIATE", "sqlite sink: begin", err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->path);
        s->in_tx = true;
    }
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used && s->t[i].mode == FERRY_WRITE_REPLACE)
            rc = swap_staging(s, &s->t[i], err);
    if (rc == FERRY_OK) {
        rc = ferry__sqlite_exec(s->db, "COMMIT", "sqlite sink: commit", err);
        if (rc != FERRY_OK) ferry_error_prefix(err, "%s", s->path);
    }
    if (rc != FERRY_OK) {
        /* Still in the transaction: abort() rolls it back and drops the staging tables. */
        return rc;
    }
    s->in_tx = false;
    s->session = false;
    return FERRY_OK;
}

/* ---- commit groups (cdc streams of one source log, pipeline/commit_group.h) -------------- */

static int sink_group_begin(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || s->at_commit || s->in_tx)
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite sink: %s: a commit group needs a per_apply session, no "
                               "transaction open",
                               s->path);
    int rc = ferry__sqlite_exec(s->db, "BEGIN IMMEDIATE", "sqlite sink: begin (commit group)", err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", s->path);
    s->in_tx = true;
    s->grouped = true;
    held_count(s, +1);
    return FERRY_OK;
}

/* The group's transaction is over (committed or rolled back). */
static void group_ended(struct sink *s)
{
    if (s->grouped) held_count(s, -1);
    s->grouped = false;
    s->in_tx = false;
}

static int sink_group_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    int rc = ferry__sqlite_exec(s->db, "COMMIT", "sqlite sink: commit (commit group)", err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "%s", s->path);
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    }
    group_ended(s);
    return rc;
}

static void sink_group_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s->in_tx) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    group_ended(s);
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL || s->db == NULL) return;
    finalize_all(s);
    if (s->in_tx) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        group_ended(s);
    }
    if (!s->session) return;
    s->session = false;
    /* Staging rows and the checkpoints that account for them go together. */
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return;
    sqlite3_stmt *del = NULL;
    sqlite3_prepare_v2(s->db,
                       "DELETE FROM \"" CHECKPOINT_TABLE "\" WHERE pipeline = ?1 AND resource = ?2",
                       -1, &del, NULL);
    bool ok = true;
    for (int i = 0; i < s->n_t && ok; i++) {
        struct target *t = &s->t[i];
        if (!t->used || t->mode != FERRY_WRITE_REPLACE) continue;
        ok = drop_table(s, t->staging, NULL) == FERRY_OK;
        if (ok && del) {
            sqlite3_bind_text(del, 1, s->pipeline, -1, SQLITE_STATIC);
            sqlite3_bind_text(del, 2, t->resource, -1, SQLITE_STATIC);
            ok = sqlite3_step(del) == SQLITE_DONE;
            sqlite3_reset(del);
        }
    }
    sqlite3_finalize(del);
    sqlite3_exec(s->db, ok ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
}

/* ---- checkpoints -------------------------------------------------------------------------- */

static int sink_checkpoints(void *ctx, const char *pipeline, struct ferry_sink_checkpoint **out,
                            int *n, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    *n = 0;
    int rc = connect(s, false, err);
    if (rc != FERRY_OK || s->db == NULL) return rc;
    sqlite3_stmt *st = NULL;
    int prc = sqlite3_prepare_v2(s->db,
                                 "SELECT resource, shard, run_id, position, run_rows, run_bytes, "
                                 "run_batches FROM \"" CHECKPOINT_TABLE
                                 "\" WHERE pipeline = ?1 ORDER BY resource, shard",
                                 -1, &st, NULL);
    if (prc != SQLITE_OK && strstr(sqlite3_errmsg(s->db), "no such column"))
        prc = sqlite3_prepare_v2(s->db,
                                 "SELECT resource, shard, run_id, position, NULL, NULL, NULL "
                                 "FROM \"" CHECKPOINT_TABLE
                                 "\" WHERE pipeline = ?1 ORDER BY resource, shard",
                                 -1, &st, NULL); /* a table an older ferry made */
    if (prc != SQLITE_OK) {
        /* No table yet: nothing was ever committed here. */
        if (strstr(sqlite3_errmsg(s->db), "no such table")) return FERRY_OK;
        return ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: reading checkpoints",
                                   s->path);
    }
    sqlite3_bind_text(st, 1, pipeline ? pipeline : "", -1, SQLITE_STATIC);
    struct ferry_sink_checkpoint *v = NULL;
    int k = 0, src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        struct ferry_sink_checkpoint *nv = ferry_realloc(v, sizeof *v * (size_t)(k + 1));
        if (nv == NULL) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
            break;
        }
        v = nv;
        v[k] = (struct ferry_sink_checkpoint){0};
        const char *pos = (const char *)sqlite3_column_text(st, 3);
        v[k].resource = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        v[k].shard = sqlite3_column_int(st, 1);
        v[k].run_id = sqlite3_column_int64(st, 2);
        v[k].position = pos ? ferry_strdup(pos) : NULL;
        v[k].has_counts = sqlite3_column_type(st, 4) != SQLITE_NULL &&
                          sqlite3_column_type(st, 5) != SQLITE_NULL &&
                          sqlite3_column_type(st, 6) != SQLITE_NULL;
        v[k].rows = sqlite3_column_int64(st, 4);
        v[k].bytes = sqlite3_column_int64(st, 5);
        v[k].batches = sqlite3_column_int64(st, 6);
        k++;
        if (v[k - 1].resource == NULL || (pos && v[k - 1].position == NULL)) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
            break;
        }
    }
    if (rc == FERRY_OK && src != SQLITE_DONE)
        rc = ferry__sqlite_error(err, FERRY_ESINK, s->db, "sqlite sink: %s: reading checkpoints",
                                 s->path);
    sqlite3_finalize(st);
    if (rc != FERRY_OK) {
        ferry_sink_checkpoints_free(v, k);
        return rc;
    }
    *out = v;
    *n = k;
    return FERRY_OK;
}

const struct ferry_sink_vtable ferry__sqlite_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "sqlite",
    .tuning_keys = sink_tuning_keys,
    .open = sink_open,
    .capabilities = sink_capabilities,
    .prepare = sink_prepare,
    .begin = sink_begin,
    .apply = sink_apply,
    .commit = sink_commit,
    .abort = sink_abort,
    .close = sink_close,
    .checkpoints = sink_checkpoints,
    .verify_open = ferry__sqlite_verify_open,
    .group_begin = sink_group_begin,
    .group_commit = sink_group_commit,
    .group_abort = sink_group_abort,
};
