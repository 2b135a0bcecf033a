/* connectors/iceberg/catalog.c - where an Iceberg table's current metadata is, and the
 * atomic swap of that pointer (the commit).
 *
 * Filesystem catalog (Hadoop layout): <table>/metadata/vN.metadata.json, the highest N is
 * current, metadata/version-hint.text names it for readers. A commit writes the new file
 * under a temporary name, fsyncs it, then link()s it to v(N+1).metadata.json: link fails
 * with EEXIST when another writer took that number first, which is the conflict check
 * (rename would silently replace). Then version-hint.text is replaced by rename. A crash
 * between the two leaves the hint one behind: load() probes past it.
 *
 * SQL catalog: the `iceberg_tables` row (catalog_name, table_namespace, table_name) holds
 * metadata_location; a commit writes a new uniquely named metadata file, then runs
 * UPDATE ... SET metadata_location = new WHERE ... AND metadata_location = old: no row
 * changed means someone else committed first. Same tables as Iceberg's JDBC catalog and
 * PyIceberg's SqlCatalog (the namespace gets an `exists` property as both do).
 *
 * The SQL catalog's database is a SQLite file or a PostgreSQL database (a postgres:// URL):
 * the same two tables, the same statements. The URL may hold a password: no message ever
 * shows it (errors name "the PostgreSQL catalog" and the server's own message).
 *
 * REST catalog: the server holds the pointer and swaps it (rest.c).
 *
 * On an S3 warehouse (io.c) the files are objects: the filesystem catalog commits with a
 * conditional PUT (If-None-Match: *) of v(N+1).metadata.json, which fails when the object
 * exists; a store that ignores the condition would let two writers both "win", so open()
 * probes it first and refuses the filesystem catalog there (the SQL catalog swaps in its
 * database and only needs plain PUTs).
 *
 * Owns the SQLite or PostgreSQL connection of the SQL catalog and the warehouse's storage
 * (io.c). Calls libc, SQLite, libpq, jansson, io.c. Called by iceberg_sink.c and the CLI
 * (expire). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"
#include "objstore/s3_client.h"

struct ferry__iceberg_catalog {
    enum ferry__iceberg_catalog_kind kind;
    char *warehouse, *ns, *name;
    char *sql_path; /* SQLite: the file; PostgreSQL: "the PostgreSQL catalog" (never the URL) */
    sqlite3 *db;
    PGconn *pg;
    struct ferry__iceberg_io *io; /* NULL: local disk */
    struct ferry__iceberg_rest *rest;
    bool unknown; /* the last commit's outcome is unknown (PostgreSQL connection lost, or an
                   * S3 PUT unanswered and its object not there yet) */
};

static bool is_pg_url(const char *s)
{
    return s && (!strncmp(s, "postgres://", 11) || !strncmp(s, "postgresql://", 13));
}

static const char *const catalog_ddl =
    "CREATE TABLE IF NOT EXISTS \"iceberg_tables\" ("
    "\"catalog_name\" VARCHAR(255) NOT NULL, "
    "\"table_namespace\" VARCHAR(255) NOT NULL, "
    "\"table_name\" VARCHAR(255) NOT NULL, "
    "\"metadata_location\" VARCHAR(1000), "
    "\"previous_metadata_location\" VARCHAR(1000), "
    "PRIMARY KEY (\"catalog_name\", \"table_namespace\", \"table_name\"));"
    "CREATE TABLE IF NOT EXISTS \"iceberg_namespace_properties\" ("
    "\"catalog_name\" VARCHAR(255) NOT NULL, "
    "\"namespace\" VARCHAR(255) NOT NULL, "
    "\"property_key\" VARCHAR(255) NOT NULL, "
    "\"property_value\" VARCHAR(1000), "
    "PRIMARY KEY (\"catalog_name\", \"namespace\", \"property_key\"));";

/* One statement on the PostgreSQL catalog with text parameters; *res (may be NULL) keeps the
 * result. FERRY_ESINK with the server's message otherwise. */
static int pg_run(struct ferry__iceberg_catalog *c, const char *sql, int n, const char *const *params,
                  PGresult **res, struct ferry_error *err)
{
    PGresult *r = PQexecParams(c->pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *m = r ? PQresultErrorMessage(r) : PQerrorMessage(c->pg);
        int rc = ferry_error_set(err, FERRY_ESINK, "libpq", "iceberg sink: %s: %.*s", c->sql_path,
                                 (int)strcspn(m, "\n"), m);
        PQclear(r);
        return rc;
    }
    if (res)
        *res = r;
    else
        PQclear(r);
    return FERRY_OK;
}

static int io_error(const char *what, const char *path, struct ferry_error *err)
{
    int e = errno;
    return ferry_error_set(err, e == ENOSPC ? FERRY_ENOSPC : FERRY_EIO, "iceberg",
                           "iceberg sink: %s %s: %s", what, path, strerror(e));
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg sink: out of memory");
}

static int sql_exec(sqlite3 *db, const char *sql, const char *path, struct ferry_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return FERRY_OK;
    int rc = ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s", path,
                             msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return rc;
}

int ferry__iceberg_catalog_open(enum ferry__iceberg_catalog_kind kind, const char *warehouse,
                                const char *namespace_, const char *sql_path,
                                const char *catalog_name, struct ferry__iceberg_catalog **out,
                                struct ferry_error *err)
{
    return ferry__iceberg_catalog_open_io(kind, NULL, warehouse, namespace_, sql_path,
                                          catalog_name, out, err);
}

bool ferry__iceberg_catalog_commit_unknown(const struct ferry__iceberg_catalog *c)
{
    return c->unknown || (c->rest && ferry__iceberg_rest_unknown(c->rest));
}

struct ferry__iceberg_io *ferry__iceberg_catalog_io(struct ferry__iceberg_catalog *c)
{
    return c->io;
}

/* The filesystem catalog on object storage is safe only where a PUT can be made conditional. */
static int probe_conditional(struct ferry__iceberg_catalog *c, struct ferry_error *err)
{
    uint8_t r[6];
    ferry__iceberg_random(r, sizeof r);
    char *loc = ferry_asprintf("%s/.ferry-probe-%02x%02x%02x%02x%02x%02x", c->warehouse, r[0],
                               r[1], r[2], r[3], r[4], r[5]);
    if (loc == NULL) return nomem(err);
    const char *key = strchr(loc + 5, '/'); /* s3://bucket/key */
    bool ok = false;
    int rc = key ? ferry__s3_probe_conditional(ferry__iceberg_io_s3(c->io), key + 1, &ok, err)
                 : FERRY_EINVAL;
    if (rc == FERRY_OK && !ok)
        rc = ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                             "iceberg sink: warehouse %s: this object store does not honour "
                             "conditional writes (PUT If-None-Match: *), which the filesystem "
                             "catalog needs to commit safely on object storage; use `catalog: sql` "
                             "with `catalog_uri:` (a SQLite file or a postgresql:// URL) instead",
                             c->warehouse);
    else if (rc != FERRY_OK)
        ferry_error_prefix(err, "iceberg sink: warehouse %s: probing conditional writes",
                           c->warehouse);
    ferry_free(loc);
    return rc;
}

int ferry__iceberg_catalog_open_rest(struct ferry__iceberg_io *io, const char *warehouse,
                                     const char *namespace_, const char *uri,
                                     const struct ferry__iceberg_rest_auth *auth,
                                     struct ferry__iceberg_catalog **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry__iceberg_catalog *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) {
        ferry__iceberg_io_close(io);
        return nomem(err);
    }
    c->io = io;
    c->kind = ICEBERG_CATALOG_REST;
    c->warehouse = ferry_strdup(warehouse);
    c->ns = ferry_strdup(namespace_);
    c->name = ferry_strdup("rest");
    c->sql_path = ferry_strdup("the REST catalog");
    if (!c->warehouse || !c->ns || !c->name || !c->sql_path) {
        ferry__iceberg_catalog_close(c);
        return nomem(err);
    }
    size_t wl = strlen(c->warehouse);
    while (wl > 1 && c->warehouse[wl - 1] == '/') c->warehouse[--wl] = '\0';
    int rc = ferry__iceberg_rest_open(uri, auth, namespace_, &c->rest, err);
    if (rc != FERRY_OK) {
        ferry__iceberg_catalog_close(c);
        return rc;
    }
    *out = c;
    return FERRY_OK;
}

static int open_io(enum ferry__iceberg_catalog_kind kind, struct ferry__iceberg_io *io,
                   const char *warehouse, const char *namespace_, const char *sql_path,
                   const char *catalog_name, bool reader, struct ferry__iceberg_catalog **out,
                   struct ferry_error *err);

int ferry__iceberg_catalog_open_io(enum ferry__iceberg_catalog_kind kind,
                                   struct ferry__iceberg_io *io, const char *warehouse,
                                   const char *namespace_, const char *sql_path,
                                   const char *catalog_name, struct ferry__iceberg_catalog **out,
                                   struct ferry_error *err)
{
    return open_io(kind, io, warehouse, namespace_, sql_path, catalog_name, false, out, err);
}

int ferry__iceberg_catalog_open_io_reader(enum ferry__iceberg_catalog_kind kind,
                                          struct ferry__iceberg_io *io, const char *warehouse,
                                          const char *namespace_, const char *sql_path,
                                          const char *catalog_name,
                                          struct ferry__iceberg_catalog **out,
                                          struct ferry_error *err)
{
    return open_io(kind, io, warehouse, namespace_, sql_path, catalog_name, true, out, err);
}

/* reader: the catalog only loads (the iceberg source): no conditional-write probe, which
 * would PUT into the bucket. */
static int open_io(enum ferry__iceberg_catalog_kind kind, struct ferry__iceberg_io *io,
                   const char *warehouse, const char *namespace_, const char *sql_path,
                   const char *catalog_name, bool reader, struct ferry__iceberg_catalog **out,
                   struct ferry_error *err)
{
    *out = NULL;
    struct ferry__iceberg_catalog *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) {
        ferry__iceberg_io_close(io);
        return nomem(err);
    }
    c->io = io;
    c->kind = kind;
    c->warehouse = ferry_strdup(warehouse);
    c->ns = ferry_strdup(namespace_);
    c->name = ferry_strdup(catalog_name ? catalog_name : "ferry");
    bool pg = is_pg_url(sql_path);
    c->sql_path = sql_path ? ferry_strdup(pg ? "the PostgreSQL catalog" : sql_path) : NULL;
    if (!c->warehouse || !c->ns || !c->name || (sql_path && !c->sql_path)) {
        ferry__iceberg_catalog_close(c);
        return nomem(err);
    }
    size_t wl = strlen(c->warehouse);
    while (wl > 1 && c->warehouse[wl - 1] == '/') c->warehouse[--wl] = '\0';
    if (kind == ICEBERG_CATALOG_SQL && pg) {
        const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
        const char *vals[] = {sql_path, "10", "ferry-iceberg", NULL};
        c->pg = PQconnectdbParams(keys, vals, 1);
        if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK) {
            const char *m = c->pg ? PQerrorMessage(c->pg) : "out of memory";
            int rc = ferry_error_set(err, FERRY_ESINK, "libpq",
                                     "iceberg sink: cannot connect to the PostgreSQL catalog: %.*s",
                                     (int)strcspn(m, "\n"), m);
            ferry__iceberg_catalog_close(c);
            return rc;
        }
        PGresult *r = PQexec(c->pg, catalog_ddl);
        ExecStatusType st = PQresultStatus(r);
        PQclear(r);
        if (st != PGRES_COMMAND_OK) {
            int rc = ferry_error_set(err, FERRY_ESINK, "libpq",
                                     "iceberg sink: the PostgreSQL catalog: creating its tables: %.*s",
                                     (int)strcspn(PQerrorMessage(c->pg), "\n"),
                                     PQerrorMessage(c->pg));
            ferry__iceberg_catalog_close(c);
            return rc;
        }
    } else if (kind == ICEBERG_CATALOG_SQL) {
        /* a reader never creates the catalog file: a wrong path is an error naming it */
        int flags = reader ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
        if (sqlite3_open_v2(sql_path, &c->db, flags, NULL) != SQLITE_OK) {
            int rc = ferry_error_set(err, reader ? FERRY_ENOTFOUND : FERRY_ESINK, "sqlite",
                                     "iceberg%s: cannot open the SQL catalog %s: %s",
                                     reader ? "" : " sink", sql_path,
                                     c->db ? sqlite3_errmsg(c->db) : "out of memory");
            ferry__iceberg_catalog_close(c);
            return rc;
        }
        sqlite3_busy_timeout(c->db, 10000);
        int rc = sql_exec(c->db, catalog_ddl, sql_path, err);
        if (rc != FERRY_OK) {
            ferry__iceberg_catalog_close(c);
            return rc;
        }
    }
    if (kind == ICEBERG_CATALOG_FILESYSTEM && c->io && !reader) {
        int rc = probe_conditional(c, err);
        if (rc != FERRY_OK) {
            ferry__iceberg_catalog_close(c);
            return rc;
        }
    }
    *out = c;
    return FERRY_OK;
}

void ferry__iceberg_catalog_close(struct ferry__iceberg_catalog *c)
{
    if (c == NULL) return;
    if (c->db) sqlite3_close(c->db);
    if (c->pg) PQfinish(c->pg);
    ferry__iceberg_io_close(c->io);
    ferry__iceberg_rest_close(c->rest);
    ferry_free(c->warehouse);
    ferry_free(c->ns);
    ferry_free(c->name);
    ferry_free(c->sql_path);
    ferry_free(c);
}

char *ferry__iceberg_catalog_table_dir(const struct ferry__iceberg_catalog *c, const char *table)
{
    return ferry_asprintf("%s/%s/%s", c->warehouse, c->ns, table);
}

/* ---- load ------------------------------------------------------------------------------- */

static int load_json(struct ferry__iceberg_catalog *c, const char *uri, json_t **meta,
                     struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__iceberg_io_read(c->io, uri, &b, err);
    if (rc == FERRY_OK) {
        json_error_t je;
        *meta = json_loadb(b.data, b.len, 0, &je);
        if (*meta == NULL || !json_is_object(*meta)) {
            json_decref(*meta);
            *meta = NULL;
            rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                                 "iceberg sink: %s: not table metadata (%s, line %d)", uri, je.text,
                                 je.line);
        }
    }
    ferry_buf_release(&b);
    return rc;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int parse_version(const char *name)
{
    int v = 0;
    char tail[32];
    if (sscanf(name, "v%d%31s", &v, tail) == 2 && !strcmp(tail, ".metadata.json")) return v;
    return 0;
}

/* fs_current on S3: the hint object, else a listing, then probing past with HEAD. */
static int fs_current_remote(struct ferry__iceberg_catalog *c, const char *mdir, int *version,
                             struct ferry_error *err)
{
    *version = 0;
    char *hint = ferry_asprintf("%s/version-hint.text", mdir);
    if (hint == NULL) return nomem(err);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__iceberg_io_read(c->io, hint, &b, err);
    ferry_free(hint);
    long hinted = rc == FERRY_OK && b.data ? strtol(b.data, NULL, 10) : 0;
    if (hinted > 0 && hinted < INT_MAX) *version = (int)hinted;
    ferry_buf_release(&b);
    if (rc == FERRY_ENOTFOUND) {
        ferry_error_clear(err);
        rc = FERRY_OK;
    }
    if (rc != FERRY_OK) return rc;
    if (*version == 0) {
        json_t *locs = json_array();
        rc = locs ? ferry__iceberg_io_list(c->io, mdir, locs, err) : nomem(err);
        size_t i;
        json_t *l;
        json_array_foreach(locs, i, l)
        {
            const char *base = strrchr(json_string_value(l), '/');
            int v = base ? parse_version(base + 1) : 0;
            if (v > *version) *version = v;
        }
        json_decref(locs);
        if (rc != FERRY_OK) return rc;
    }
    for (;;) {
        char *next = ferry_asprintf("%s/v%d.metadata.json", mdir, *version + 1);
        if (next == NULL) return nomem(err);
        bool more = false;
        rc = ferry__iceberg_io_exists(c->io, next, &more, err);
        ferry_free(next);
        if (rc != FERRY_OK) return rc;
        if (!more) break;
        (*version)++;
    }
    return FERRY_OK;
}

/* The highest N with vN.metadata.json: from the hint, else a listing, then probing past. */
static int fs_current(struct ferry__iceberg_catalog *c, const char *mdir, int *version,
                      struct ferry_error *err)
{
    if (c->io) return fs_current_remote(c, mdir, version, err);
    *version = 0;
    char *hint = ferry_asprintf("%s/version-hint.text", mdir);
    if (hint == NULL) return nomem(err);
    FILE *f = fopen(hint, "r");
    ferry_free(hint);
    if (f != NULL) {
        int v = 0;
        if (fscanf(f, "%d", &v) == 1 && v > 0) *version = v;
        fclose(f);
    }
    if (*version == 0) {
        DIR *d = opendir(mdir);
        if (d == NULL) return errno == ENOENT ? FERRY_OK : io_error("cannot list", mdir, err);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int v = 0;
            char tail[32];
            if (sscanf(e->d_name, "v%d%31s", &v, tail) == 2 && !strcmp(tail, ".metadata.json") &&
                v > *version)
                *version = v;
        }
        closedir(d);
    }
    for (;;) {
        char *next = ferry_asprintf("%s/v%d.metadata.json", mdir, *version + 1);
        if (next == NULL) return nomem(err);
        bool more = exists(next);
        ferry_free(next);
        if (!more) break;
        (*version)++;
    }
    return FERRY_OK;
}

int ferry__iceberg_catalog_load(struct ferry__iceberg_catalog *c, const char *table, json_t **meta,
                                char **location, int *version, struct ferry_error *err)
{
    *meta = NULL;
    *location = NULL;
    *version = 0;
    if (c->rest) {
        int rc = ferry__iceberg_rest_load(c->rest, table, meta, location, err);
        const char *base = *location ? strrchr(*location, '/') : NULL;
        *version = base ? atoi(base + 1) : 0;
        return rc;
    }
    if (c->kind == ICEBERG_CATALOG_FILESYSTEM) {
        char *mdir = ferry_asprintf("%s/%s/%s/metadata", c->warehouse, c->ns, table);
        if (mdir == NULL) return nomem(err);
        int rc = fs_current(c, mdir, version, err);
        if (rc == FERRY_OK && *version > 0) {
            char *path = ferry_asprintf("%s/v%d.metadata.json", mdir, *version);
            *location = path ? ferry__iceberg_io_uri(c->io, path) : NULL;
            ferry_free(path);
            rc = *location ? load_json(c, *location, meta, err) : nomem(err);
        }
        ferry_free(mdir);
        if (rc != FERRY_OK) {
            ferry_free(*location);
            *location = NULL;
        }
        return rc;
    }
    if (c->pg) {
        const char *params[] = {c->name, c->ns, table};
        PGresult *r = NULL;
        int rc = pg_run(c,
                        "SELECT \"metadata_location\" FROM \"iceberg_tables\" WHERE "
                        "\"catalog_name\" = $1 AND \"table_namespace\" = $2 AND \"table_name\" = $3",
                        3, params, &r, err);
        if (rc == FERRY_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)) {
            *location = ferry_strdup(PQgetvalue(r, 0, 0));
            if (*location == NULL) rc = nomem(err);
        }
        PQclear(r);
        if (rc == FERRY_OK && *location) {
            rc = load_json(c, *location, meta, err);
            const char *base = strrchr(*location, '/');
            *version = base ? atoi(base + 1) : 0;
        }
        if (rc != FERRY_OK) {
            ferry_free(*location);
            *location = NULL;
        }
        return rc;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT \"metadata_location\" FROM \"iceberg_tables\" WHERE "
                           "\"catalog_name\" = ?1 AND \"table_namespace\" = ?2 AND \"table_name\" = ?3",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s",
                               c->sql_path, sqlite3_errmsg(c->db));
    sqlite3_bind_text(st, 1, c->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, table, -1, SQLITE_STATIC);
    int rc = FERRY_OK;
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL) {
        *location = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        if (*location == NULL) rc = nomem(err);
    } else if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s",
                             c->sql_path, sqlite3_errmsg(c->db));
    }
    sqlite3_finalize(st);
    if (rc == FERRY_OK && *location) {
        rc = load_json(c, *location, meta, err);
        /* the number is the file name's prefix: 00003-<uuid>.metadata.json */
        const char *base = strrchr(*location, '/');
        *version = base ? atoi(base + 1) : 0;
    }
    if (rc != FERRY_OK) {
        ferry_free(*location);
        *location = NULL;
    }
    return rc;
}

/* ---- commit ----------------------------------------------------------------------------- */

/* On S3: the conditional PUT is the swap (open() checked the store honours it). */
static int fs_commit_remote(struct ferry__iceberg_catalog *c, const char *table, int new_version,
                            const char *text, char **new_location, struct ferry_error *err)
{
    char *mdir = ferry_asprintf("%s/%s/%s/metadata", c->warehouse, c->ns, table);
    char *final = mdir ? ferry_asprintf("%s/v%d.metadata.json", mdir, new_version) : NULL;
    char *hint = mdir ? ferry_asprintf("%s/version-hint.text", mdir) : NULL;
    int rc = final && hint ? ferry__iceberg_io_write_new(c->io, final, text, strlen(text), err)
                           : nomem(err);
    if (rc != FERRY_OK && rc != FERRY_ENOMEM && final) {
        /* A lost answer (connection reset after the PUT went out) leaves the outcome open, and
         * the client's retry of our own landed PUT is refused as "exists already". Read the
         * object back: our bytes there mean the commit happened (treating it as a conflict
         * would commit the checkpoint twice; as a failure, remove files it names). */
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        int grc = ferry__iceberg_io_read(c->io, final, &b, &e);
        if (grc == FERRY_OK && b.len == strlen(text) && memcmp(b.data, text, b.len) == 0) {
            ferry_log(FERRY_LOG_INFO, "iceberg sink: table %s: %s was written (%s): committed",
                      table, final, err && err->message[0] ? err->message : "answer lost");
            ferry_error_clear(err);
            rc = FERRY_OK;
        } else if (grc == FERRY_OK && rc != FERRY_ECONFLICT) {
            ferry_error_clear(err);
            rc = FERRY_ECONFLICT; /* someone else's version N */
        } else if (grc != FERRY_OK && rc != FERRY_ECONFLICT) {
            c->unknown = true; /* not there now, but a PUT in flight may still land */
        }
        ferry_buf_release(&b);
    }
    if (rc == FERRY_ECONFLICT) {
        ferry_error_clear(err);
        rc = ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                             "iceberg sink: table %s: version %d was committed by another writer",
                             table, new_version);
    }
    if (rc == FERRY_OK) {
        char num[24];
        int n = snprintf(num, sizeof num, "%d\n", new_version);
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        if (ferry__iceberg_io_write(c->io, hint, num, (size_t)n, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "iceberg sink: %s not updated (readers probe past it): %s",
                      hint, e.message);
    }
    if (rc == FERRY_OK && new_location) {
        *new_location = ferry_strdup(final);
        if (*new_location == NULL) rc = nomem(err);
    }
    ferry_free(mdir);
    ferry_free(final);
    ferry_free(hint);
    return rc;
}

static int fs_commit(struct ferry__iceberg_catalog *c, const char *table, int new_version,
                     const char *text, char **new_location, struct ferry_error *err)
{
    if (c->io) return fs_commit_remote(c, table, new_version, text, new_location, err);
    char *mdir = ferry_asprintf("%s/%s/%s/metadata", c->warehouse, c->ns, table);
    char *final = mdir ? ferry_asprintf("%s/v%d.metadata.json", mdir, new_version) : NULL;
    char *hint = mdir ? ferry_asprintf("%s/version-hint.text", mdir) : NULL;
    char *tmp = NULL;
    int rc = final && hint ? ferry__iceberg_mkdirs(mdir, err) : nomem(err);
    if (rc == FERRY_OK) rc = ferry__iceberg_write_tmp(final, text, strlen(text), &tmp, err);
    if (rc == FERRY_OK) {
        if (link(tmp, final) != 0) {
            rc = errno == EEXIST
                     ? ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                                       "iceberg sink: table %s: version %d was committed by "
                                       "another writer",
                                       table, new_version)
                     : io_error("cannot link", final, err);
        }
        unlink(tmp);
    }
    /* Linked means committed: readers may already see it, so a failure from here on must
     * not make the caller discard files the new metadata names. */
    if (rc == FERRY_OK && ferry__iceberg_fsync_dir(mdir, NULL) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "iceberg sink: fsync of %s failed after the commit", mdir);
    if (rc == FERRY_OK) {
        /* the hint only helps readers find the newest file: the commit already happened */
        char num[24];
        int n = snprintf(num, sizeof num, "%d\n", new_version);
        int hrc = ferry__iceberg_write_file(hint, num, (size_t)n, NULL);
        if (hrc != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "iceberg sink: %s not updated (readers probe past it)", hint);
    }
    if (rc == FERRY_OK && new_location) {
        *new_location = ferry_asprintf("file://%s", final);
        if (*new_location == NULL) rc = nomem(err);
    }
    ferry_free(tmp);
    ferry_free(mdir);
    ferry_free(final);
    ferry_free(hint);
    return rc;
}

static int sql_commit(struct ferry__iceberg_catalog *c, const char *table, const char *old_location,
                      int new_version, const char *text, char **new_location,
                      struct ferry_error *err)
{
    uint8_t r[16];
    ferry__iceberg_random(r, sizeof r);
    r[6] = (uint8_t)((r[6] & 0x0f) | 0x40);
    r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);
    char uuid[40];
    ferry_uuid_to_text(r, uuid, sizeof uuid);
    char *mdir = ferry_asprintf("%s/%s/%s/metadata", c->warehouse, c->ns, table);
    char *path = mdir ? ferry_asprintf("%s/%05d-%s.metadata.json", mdir, new_version, uuid) : NULL;
    char *uri = path ? ferry__iceberg_io_uri(c->io, path) : NULL;
    int rc = uri ? ferry__iceberg_io_mkdirs(c->io, mdir, err) : nomem(err);
    if (rc == FERRY_OK) rc = ferry__iceberg_io_write(c->io, path, text, strlen(text), err);
    if (rc == FERRY_OK && c->pg) {
        PGresult *res = NULL;
        if (old_location) {
            const char *p[] = {c->name, c->ns, table, uri, old_location};
            rc = pg_run(c,
                        "UPDATE \"iceberg_tables\" SET \"metadata_location\" = $4, "
                        "\"previous_metadata_location\" = $5 WHERE \"catalog_name\" = $1 AND "
                        "\"table_namespace\" = $2 AND \"table_name\" = $3 AND "
                        "\"metadata_location\" = $5",
                        5, p, &res, err);
        } else {
            const char *p[] = {c->name, c->ns, table, uri};
            const char *np[] = {c->name, c->ns};
            rc = pg_run(c,
                        "INSERT INTO \"iceberg_namespace_properties\" (\"catalog_name\", "
                        "\"namespace\", \"property_key\", \"property_value\") VALUES ($1, $2, "
                        "'exists', 'true') ON CONFLICT DO NOTHING",
                        2, np, NULL, err);
            if (rc == FERRY_OK)
                rc = pg_run(c,
                            "INSERT INTO \"iceberg_tables\" (\"catalog_name\", \"table_namespace\", "
                            "\"table_name\", \"metadata_location\", \"previous_metadata_location\") "
                            "VALUES ($1, $2, $3, $4, NULL) ON CONFLICT DO NOTHING",
                            4, p, &res, err);
        }
        if (rc == FERRY_OK && strcmp(PQcmdTuples(res), "1") != 0)
            rc = ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                                 "iceberg sink: table %s.%s: its metadata was changed by another "
                                 "writer",
                                 c->ns, table);
        PQclear(res);
        if (rc != FERRY_OK && rc != FERRY_ECONFLICT && PQstatus(c->pg) != CONNECTION_OK) {
            /* The connection died with the UPDATE in flight: the server may have committed
             * it. Keep the new metadata file (the row may name it) and say so: the caller
             * keeps every file the snapshot names; the next run reads what the row says. */
            c->unknown = true;
            ferry_error_prefix(err, "iceberg sink: table %s.%s: the commit's outcome is unknown "
                               "(the PostgreSQL catalog connection was lost during it)",
                               c->ns, table);
        } else if (rc != FERRY_OK && rc != FERRY_ENOMEM) {
            ferry__iceberg_io_remove(c->io, path, NULL);
        }
        if (rc == FERRY_OK && new_location) {
            *new_location = uri;
            uri = NULL;
        }
        ferry_free(mdir);
        ferry_free(path);
        ferry_free(uri);
        return rc;
    }
    sqlite3_stmt *st = NULL;
    if (rc == FERRY_OK) {
        const char *sql =
            old_location
                ? "UPDATE \"iceberg_tables\" SET \"metadata_location\" = ?4, "
                  "\"previous_metadata_location\" = ?5 WHERE \"catalog_name\" = ?1 AND "
                  "\"table_namespace\" = ?2 AND \"table_name\" = ?3 AND \"metadata_location\" = ?5"
                : "INSERT INTO \"iceberg_tables\" (\"catalog_name\", \"table_namespace\", "
                  "\"table_name\", \"metadata_location\", \"previous_metadata_location\") "
                  "VALUES (?1, ?2, ?3, ?4, NULL) ON CONFLICT DO NOTHING";
        if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
            rc = ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s",
                                 c->sql_path, sqlite3_errmsg(c->db));
    }
    if (rc == FERRY_OK && !old_location) {
        sqlite3_stmt *ns = NULL;
        if (sqlite3_prepare_v2(c->db,
                               "INSERT INTO \"iceberg_namespace_properties\" (\"catalog_name\", "
                               "\"namespace\", \"property_key\", \"property_value\") VALUES (?1, "
                               "?2, 'exists', 'true') ON CONFLICT DO NOTHING",
                               -1, &ns, NULL) == SQLITE_OK) {
            sqlite3_bind_text(ns, 1, c->name, -1, SQLITE_STATIC);
            sqlite3_bind_text(ns, 2, c->ns, -1, SQLITE_STATIC);
            sqlite3_step(ns);
        }
        sqlite3_finalize(ns);
    }
    if (rc == FERRY_OK) {
        sqlite3_bind_text(st, 1, c->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, c->ns, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, uri, -1, SQLITE_STATIC);
        if (old_location) sqlite3_bind_text(st, 5, old_location, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s",
                                 c->sql_path, sqlite3_errmsg(c->db));
        else if (sqlite3_changes(c->db) != 1)
            rc = ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                                 "iceberg sink: table %s.%s: its metadata was changed by another "
                                 "writer",
                                 c->ns, table);
    }
    sqlite3_finalize(st);
    if (rc != FERRY_OK && path && rc != FERRY_ENOMEM)
        ferry__iceberg_io_remove(c->io, path, NULL); /* never published */
    if (rc == FERRY_OK && new_location) {
        *new_location = uri;
        uri = NULL;
    }
    ferry_free(mdir);
    ferry_free(path);
    ferry_free(uri);
    return rc;
}

int ferry__iceberg_catalog_commit(struct ferry__iceberg_catalog *c, const char *table,
                                  const char *old_location, int new_version, json_t *meta,
                                  char **new_location, struct ferry_error *err)
{
    if (new_location) *new_location = NULL;
    c->unknown = false;
    if (c->rest) return ferry__iceberg_rest_commit(c->rest, table, old_location, meta, new_location, err);
    char *text = json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text == NULL) return nomem(err);
    int rc = c->kind == ICEBERG_CATALOG_FILESYSTEM
                 ? fs_commit(c, table, new_version, text, new_location, err)
                 : sql_commit(c, table, old_location, new_version, text, new_location, err);
    free(text);
    return rc;
}

/* ---- list ------------------------------------------------------------------------------- */

static int push(char ***v, int *n, const char *s)
{
    char **nv = ferry_realloc(*v, sizeof *nv * (size_t)(*n + 2));
    if (nv == NULL) return FERRY_ENOMEM;
    *v = nv;
    nv[*n] = ferry_strdup(s);
    if (nv[*n] == NULL) return FERRY_ENOMEM;
    (*n)++;
    nv[*n] = NULL;
    return FERRY_OK;
}

int ferry__iceberg_catalog_list(struct ferry__iceberg_catalog *c, char ***names,
                                struct ferry_error *err)
{
    *names = ferry_calloc(1, sizeof **names);
    if (*names == NULL) return nomem(err);
    int n = 0, rc = FERRY_OK;
    if (c->rest) {
        json_t *v = json_array();
        rc = v ? ferry__iceberg_rest_list(c->rest, v, err) : nomem(err);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (rc == FERRY_OK && push(names, &n, json_string_value(x)) != FERRY_OK) rc = nomem(err);
        }
        json_decref(v);
        return rc;
    }
    if (c->kind == ICEBERG_CATALOG_FILESYSTEM && c->io) {
        /* <ns>/<table>/metadata/... */
        char *nsdir = ferry_asprintf("%s/%s", c->warehouse, c->ns);
        json_t *locs = json_array(), *seen = json_object();
        rc = nsdir && locs && seen ? ferry__iceberg_io_list(c->io, nsdir, locs, err) : nomem(err);
        size_t i;
        json_t *l;
        json_array_foreach(locs, i, l)
        {
            if (rc != FERRY_OK) break;
            const char *rest = json_string_value(l) + strlen(nsdir) + 1;
            const char *slash = strchr(rest, '/');
            if (slash == NULL || strncmp(slash, "/metadata/", 10) != 0) continue;
            char *name = ferry_strndup(rest, (size_t)(slash - rest));
            if (name == NULL) rc = nomem(err);
            else if (!json_object_get(seen, name)) {
                json_object_set_new(seen, name, json_true());
                if (push(names, &n, name) != FERRY_OK) rc = nomem(err);
            }
            ferry_free(name);
        }
        json_decref(locs);
        json_decref(seen);
        ferry_free(nsdir);
        return rc;
    }
    if (c->kind == ICEBERG_CATALOG_FILESYSTEM) {
        char *nsdir = ferry_asprintf("%s/%s", c->warehouse, c->ns);
        if (nsdir == NULL) return nomem(err);
        DIR *d = opendir(nsdir);
        if (d == NULL) {
            rc = errno == ENOENT ? FERRY_OK : io_error("cannot list", nsdir, err);
        } else {
            struct dirent *e;
            while (rc == FERRY_OK && (e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.') continue;
                char *m = ferry_asprintf("%s/%s/metadata", nsdir, e->d_name);
                if (m == NULL) rc = nomem(err);
                else if (exists(m) && push(names, &n, e->d_name) != FERRY_OK) rc = nomem(err);
                ferry_free(m);
            }
            closedir(d);
        }
        ferry_free(nsdir);
        return rc;
    }
    if (c->pg) {
        const char *params[] = {c->name, c->ns};
        PGresult *r = NULL;
        rc = pg_run(c,
                    "SELECT \"table_name\" FROM \"iceberg_tables\" WHERE \"catalog_name\" = $1 "
                    "AND \"table_namespace\" = $2 ORDER BY \"table_name\"",
                    2, params, &r, err);
        for (int i = 0; rc == FERRY_OK && i < PQntuples(r); i++)
            if (push(names, &n, PQgetvalue(r, i, 0)) != FERRY_OK) rc = nomem(err);
        PQclear(r);
        return rc;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT \"table_name\" FROM \"iceberg_tables\" WHERE \"catalog_name\" = ?1 "
                           "AND \"table_namespace\" = ?2 ORDER BY \"table_name\"",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry_error_set(err, FERRY_ESINK, "sqlite", "iceberg sink: SQL catalog %s: %s",
                               c->sql_path, sqlite3_errmsg(c->db));
    sqlite3_bind_text(st, 1, c->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->ns, -1, SQLITE_STATIC);
    int s;
    while (rc == FERRY_OK && (s = sqlite3_step(st)) == SQLITE_ROW)
        if (push(names, &n, (const char *)sqlite3_column_text(st, 0)) != FERRY_OK) rc = nomem(err);
    sqlite3_finalize(st);
    return rc;
}

/* ---- the metadata log ----------------------------------------------------------------- */

/* A table property read as a whole number (properties are strings); dflt when absent or
 * not a number. */
static int64_t prop_int(const json_t *meta, const char *key, int64_t dflt)
{
    const char *v = json_string_value(json_object_get(json_object_get(meta, "properties"), key));
    if (v == NULL || *v == '\0') return dflt;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    return errno == 0 && end && *end == '\0' ? (int64_t)n : dflt;
}

int ferry__iceberg_meta_log(json_t *next, const char *prev_location, int64_t prev_updated_ms,
                            json_t *dropped)
{
    json_t *mlog = json_object_get(next, "metadata-log");
    if (!json_is_array(mlog)) {
        mlog = json_array();
        if (mlog == NULL || json_object_set_new(next, "metadata-log", mlog) != 0) return FERRY_ENOMEM;
    }
    if (json_array_append_new(mlog, json_pack("{s:s,s:I}", "metadata-file", prev_location,
                                              "timestamp-ms", (json_int_t)prev_updated_ms)) != 0)
        return FERRY_ENOMEM;
    int64_t max = prop_int(next, "write.metadata.previous-versions-max", 100);
    if (max < 1) max = 1;
    while ((int64_t)json_array_size(mlog) > max) {
        json_t *file = json_object_get(json_array_get(mlog, 0), "metadata-file");
        if (dropped && json_is_string(file) && json_array_append(dropped, file) != 0)
            return FERRY_ENOMEM;
        json_array_remove(mlog, 0);
    }
    return FERRY_OK;
}

bool ferry__iceberg_meta_delete_after_commit(const json_t *meta)
{
    const char *v = json_string_value(json_object_get(json_object_get(meta, "properties"),
                                                      "write.metadata.delete-after-commit.enabled"));
    return v && !strcasecmp(v, "true");
}

int ferry__iceberg_meta_version(const char *location)
{
    const char *base = strrchr(location, '/');
    base = base ? base + 1 : location;
    size_t n = strlen(base);
    if (n <= 14 || strcmp(base + n - 14, ".metadata.json") != 0) return -1;
    if (base[0] == 'v') base++;
    if (*base < '0' || *base > '9') return -1;
    char *end = NULL;
    long v = strtol(base, &end, 10);
    if (v < 0 || v > INT32_MAX || end == NULL || (*end != '.' && *end != '-')) return -1;
    return (int)v;
}
