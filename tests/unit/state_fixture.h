/* tests/unit/state_fixture.h - a fresh folder per test for real SQLite state files, used by
 * test_store, test_bus and test_tracker. */
#ifndef FERRY_TESTS_STATE_FIXTURE_H
#define FERRY_TESTS_STATE_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct state_dir {
    char dir[256];
    char path[320]; /* dir/state/ferry.db: the parent folder does not exist yet */
};

static inline void state_dir_make(struct state_dir *sd)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(sd->dir, sizeof sd->dir, "%s/ferry-state-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(sd->dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
    snprintf(sd->path, sizeof sd->path, "%s/state/ferry.db", sd->dir);
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
    nftw(sd->dir, state_dir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
