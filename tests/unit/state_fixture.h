/* tests/unit/state_fixture.h - a fresh folder per test for real SQLite state files, used by
 * test_store, test_bus, test_tracker, test_control, test_store_lease and test_pipeline.
 *
 * With FERRY_TEST_STORE set to a postgres:// URL, `url` names a fresh schema of that
 * database instead (t_<pid>_<n>, dropped by state_dir_remove), so the same tests run
 * against the PostgreSQL store; `path` is still a file in the fresh folder, and tests that
 * look inside the SQLite file skip themselves (state_is_pg). */
#ifndef FERRY_TESTS_STATE_FIXTURE_H
#define FERRY_TESTS_STATE_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <ftw.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "store/store.h"

struct state_dir {
    char dir[256];
    char path[320];  /* dir/state/ferry.db: the parent folder does not exist yet */
    char url[1024];  /* what to hand ferry_store_open: path, or the test schema's URL */
    char schema[64]; /* "" for SQLite */
};

static inline const char *state_pg_base(void)
{
    const char *u = getenv("FERRY_TEST_STORE");
    return u && (strncmp(u, "postgres://", 11) == 0 || strncmp(u, "postgresql://", 13) == 0) ? u
                                                                                             : NULL;
}

static inline bool state_is_pg(void)
{
    return state_pg_base() != NULL;
}

/* Runs one statement on the test database with a connection of its own (schema drops,
 * independent reads). Returns the first column of the first row in out (may be NULL). */
static inline int state_pg_exec(const char *sql, char *out, size_t len)
{
    const char *base = state_pg_base();
    if (base == NULL) return -1;
    PGconn *c = PQconnectdb(base);
    int rc = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        ExecStatusType t = PQresultStatus(r);
        if (t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK)
            rc = 0;
        else
            fprintf(stderr, "state_pg_exec: %s", PQerrorMessage(c));
        if (out && len) {
            out[0] = '\0';
            if (t == PGRES_TUPLES_OK && PQntuples(r) > 0)
                snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
        }
        PQclear(r);
    } else {
        fprintf(stderr, "state_pg_exec: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

static inline void state_dir_make(struct state_dir *sd)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(sd->dir, sizeof sd->dir, "%s/ferry-state-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(sd->dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
    snprintf(sd->path, sizeof sd->path, "%s/state/ferry.db", sd->dir);
    snprintf(sd->url, sizeof sd->url, "%s", sd->path);
    sd->schema[0] = '\0';
    const char *base = state_pg_base();
    if (base != NULL) {
        static int n;
        snprintf(sd->schema, sizeof sd->schema, "t_%ld_%d", (long)getpid(), ++n);
        snprintf(sd->url, sizeof sd->url, "%s%cschema=%s", base, strchr(base, '?') ? '&' : '?',
                 sd->schema);
    }
}

static inline int state_dir_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline void state_dir_remove(struct state_dir *sd)
{
    if (sd->schema[0] != '\0') {
        char sql[128];
        snprintf(sql, sizeof sql,
                 "SET client_min_messages = warning; DROP SCHEMA IF EXISTS \"%s\" CASCADE",
                 sd->schema);
        state_pg_exec(sql, NULL, 0);
    }
    nftw(sd->dir, state_dir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh state folder (or schema) and a store handle on it, as most setups start: 0, or
 * -1 after saying why (a cmocka setup's failure). */
static inline int state_store_open(struct state_dir *sd, struct ferry_store **st)
{
    state_dir_make(sd);
    struct ferry_error err = {0};
    if (ferry_store_open(sd->url, st, &err) != FERRY_OK) {
        fprintf(stderr, "open: %s\n", err.message);
        return -1;
    }
    return 0;
}

static inline void state_store_close(struct state_dir *sd, struct ferry_store *st)
{
    ferry_store_close(st);
    state_dir_remove(sd);
}

#endif
