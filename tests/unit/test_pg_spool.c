/* tests/unit/test_pg_spool.c - the spool of streamed in-progress transactions (pg_spool.c):
 * frames come back in order without the xid after their kind byte; a rolled-back
 * subtransaction's frames (and those of one nested in it, also when they come first) are
 * cut, a released one's kept, also for 200,000 subtransactions;
 * a whole abort drops the transaction; a first segment of a spooled transaction starts it
 * over; a later segment of one never started is refused; a transaction read back is gone;
 * the files are deleted as soon as they are made; an unwritable $TMPDIR is an error naming
 * it. (Against a server: e2e/cdc_streamed.) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "connectors/postgres/pg_spool.h"
#include "ferry/core.h"

#define HDR 25 /* 'w', wal start, wal end, send time */

/* A frame: header whose wal start is `tag`, kind 'I' (or 'R' when tag is 'r'), xid, then the
 * payload byte `tag`. */
static size_t frame(uint8_t *f, uint32_t xid, uint8_t tag)
{
    memset(f, 0, HDR);
    f[0] = 'w';
    f[8] = tag;
    f[HDR] = tag == 'r' ? 'R' : 'I';
    for (int i = 0; i < 4; i++)
        f[HDR + 1 + i] = (uint8_t)(xid >> (24 - 8 * i));
    f[HDR + 5] = tag;
    f[HDR + 6] = 0xEE;
    return HDR + 7;
}

static void put(struct ferry_pg_spools *s, uint32_t xid, uint8_t tag)
{
    uint8_t f[64];
    struct ferry_error err;
    size_t n = frame(f, xid, tag);
    assert_int_equal(ferry__pg_spool_put(s, f, n, HDR, &err), FERRY_OK);
}

/* The tags of xid's frames read back, as a string; checks each frame's form. */
static void replay(struct ferry_pg_spools *s, uint32_t xid, char *tags)
{
    struct ferry_error err;
    assert_int_equal(ferry__pg_spool_replay(s, xid, &err), FERRY_OK);
    char *f;
    int n, k = 0;
    for (;;) {
        assert_int_equal(ferry__pg_spool_next(s, &f, &n, &err), FERRY_OK);
        if (f == NULL) break;
        assert_int_equal(n, HDR + 3);
        assert_int_equal(f[0], 'w');
        assert_int_equal(f[HDR], f[HDR + 1] == 'r' ? 'R' : 'I');
        assert_int_equal((uint8_t)f[8], (uint8_t)f[HDR + 1]); /* the xid is gone */
        assert_int_equal((uint8_t)f[HDR + 2], 0xEE);
        tags[k++] = f[HDR + 1];
        ferry_free(f);
    }
    tags[k] = '\0';
}

static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "ferry-txn-", 10) == 0) n++;
    closedir(d);
    return n;
}

/* The spool files this process holds open (deleted: /proc names them "... (deleted)") in dir. */
static int open_in(const char *dir)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[64], to[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, to, sizeof to - 1);
        if (k <= 0) continue;
        to[k] = '\0';
        if (strstr(to, "/ferry-txn-") != NULL && strncmp(to, dir, strlen(dir)) == 0) n++;
    }
    closedir(d);
    return n;
}

static void test_subtransactions(void **state)
{
    (void)state;
    /* a long folder name: the files' paths are not cut to a fixed buffer */
    char dir[] = "/tmp/ferry-spool-test-a-folder-name-longer-than-sixty-four-bytes-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("TMPDIR", dir, 1);
    struct ferry_pg_spools s;
    struct ferry_error err;
    char tags[64];
    ferry__pg_spools_init(&s, "postgres source: slot t");
    assert_int_equal(s.n, 0);
    /* 100: a, b; sub 101: c; sub 102 (in 101): d; rollback to 101; sub 103: e (released);
     * then f in the top transaction, in a second block. */
    assert_int_equal(ferry__pg_spool_start(&s, 100, true, &err), FERRY_OK);
    assert_int_equal(files_in(dir), 0); /* deleted as soon as made, */
    assert_int_equal(open_in(dir), 1);  /* made in $TMPDIR */
    put(&s, 100, 'a');
    put(&s, 100, 'b');
    put(&s, 101, 'c');
    put(&s, 102, 'd');
    ferry__pg_spool_stop(&s);
    /* another transaction streams in between */
    assert_int_equal(ferry__pg_spool_start(&s, 200, true, &err), FERRY_OK);
    put(&s, 200, 'x');
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 101, &err), FERRY_OK);
    assert_int_equal(ferry__pg_spool_start(&s, 100, false, &err), FERRY_OK);
    put(&s, 103, 'e');
    put(&s, 100, 'f');
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 999, &err), FERRY_OK); /* nothing of it */
    assert_int_equal(s.n, 2);
    replay(&s, 100, tags);
    assert_string_equal(tags, "abef");
    replay(&s, 100, tags); /* gone once read back */
    assert_string_equal(tags, "");
    /* a first segment again starts the transaction over */
    assert_int_equal(ferry__pg_spool_start(&s, 200, true, &err), FERRY_OK);
    put(&s, 200, 'y');
    ferry__pg_spool_stop(&s);
    replay(&s, 200, tags);
    assert_string_equal(tags, "y");
    /* a whole abort */
    assert_int_equal(ferry__pg_spool_start(&s, 300, true, &err), FERRY_OK);
    put(&s, 300, 'z');
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_abort(&s, 300, 300, &err), FERRY_OK);
    assert_int_equal(s.n, 0);
    replay(&s, 300, tags);
    assert_string_equal(tags, "");
    ferry__pg_spools_release(&s);
    assert_int_equal(files_in(dir), 0);
    assert_int_equal(open_in(dir), 0);
    rmdir(dir);
    unsetenv("TMPDIR");
}

/* A Relation message sent with a rolled-back subtransaction's first change stays: the top
 * level's later changes of that table refer to it. */
static void test_relation_kept(void **state)
{
    (void)state;
    struct ferry_pg_spools s;
    struct ferry_error err;
    char tags[64];
    ferry__pg_spools_init(&s, "postgres source: slot t");
    assert_int_equal(ferry__pg_spool_start(&s, 100, true, &err), FERRY_OK);
    put(&s, 100, 'a');
    put(&s, 101, 'r');
    put(&s, 101, 'c');
    put(&s, 102, 'd');
    put(&s, 102, 'r');
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 101, &err), FERRY_OK);
    assert_int_equal(ferry__pg_spool_start(&s, 100, false, &err), FERRY_OK);
    put(&s, 100, 'f');
    put(&s, 103, 'g');
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 103, &err), FERRY_OK);
    replay(&s, 100, tags);
    assert_string_equal(tags, "arrf");
    ferry__pg_spools_release(&s);
}

/* A subtransaction's own first record may follow one of a subtransaction nested in it (a
 * parent's xid is given with its child's, at the child's first change), and one with no
 * record of its own may hold nested ones: its rollback cuts from the first of them. */
static void test_nested_first(void **state)
{
    (void)state;
    struct ferry_pg_spools s;
    struct ferry_error err;
    char tags[64];
    ferry__pg_spools_init(&s, "postgres source: slot t");
    /* SAVEPOINT 101; SAVEPOINT 102; b (102); RELEASE 102; c (101); ROLLBACK TO 101 */
    assert_int_equal(ferry__pg_spool_start(&s, 100, true, &err), FERRY_OK);
    put(&s, 100, 'a');
    put(&s, 102, 'b');
    put(&s, 101, 'c');
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 101, &err), FERRY_OK);
    /* SAVEPOINT 103 (no change); SAVEPOINT 104; d (104); RELEASE 104; ROLLBACK TO 103 */
    put(&s, 104, 'd');
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 103, &err), FERRY_OK);
    /* 105 released, then the top level again, then 106 rolled back */
    put(&s, 105, 'e');
    put(&s, 100, 'f');
    put(&s, 106, 'g');
    put(&s, 105, 'h'); /* not possible after 106 began unless 106 ended: released into 105 */
    assert_int_equal(ferry__pg_spool_abort(&s, 100, 106, &err), FERRY_OK);
    ferry__pg_spool_stop(&s);
    replay(&s, 100, tags);
    assert_string_equal(tags, "aef");
    ferry__pg_spools_release(&s);
}

/* One subtransaction per change, as a PL/pgSQL loop with an exception block makes them:
 * 200,000 of them, every third rolled back (tags a to p: no Relation record). */
static void test_many_subtransactions(void **state)
{
    (void)state;
    struct ferry_pg_spools s;
    struct ferry_error err;
    ferry__pg_spools_init(&s, "postgres source: slot t");
    uint32_t top = UINT32_MAX - 1000; /* the xids wrap around meanwhile */
    assert_int_equal(ferry__pg_spool_start(&s, top, true, &err), FERRY_OK);
    int kept = 0;
    for (uint32_t i = 1; i <= 200000; i++) {
        put(&s, top + i, (uint8_t)('a' + i % 16));
        if (i % 3 == 0)
            assert_int_equal(ferry__pg_spool_abort(&s, top, top + i, &err), FERRY_OK);
        else
            kept++;
    }
    ferry__pg_spool_stop(&s);
    assert_int_equal(ferry__pg_spool_replay(&s, top, &err), FERRY_OK);
    char *f;
    int n, got = 0;
    uint32_t i = 1;
    for (;;) {
        assert_int_equal(ferry__pg_spool_next(&s, &f, &n, &err), FERRY_OK);
        if (f == NULL) break;
        if (i % 3 == 0) i++;
        assert_int_equal((uint8_t)f[HDR + 1], (uint8_t)('a' + i % 16));
        ferry_free(f);
        got++;
        i++;
    }
    assert_int_equal(got, kept);
    ferry__pg_spools_release(&s);
}

static void test_refusals(void **state)
{
    (void)state;
    struct ferry_pg_spools s;
    struct ferry_error err;
    ferry__pg_spools_init(&s, "postgres source: slot t");
    assert_int_equal(ferry__pg_spool_start(&s, 7, false, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "transaction 7"));
    uint8_t f[64];
    size_t n = frame(f, 7, 'a');
    assert_int_equal(ferry__pg_spool_put(&s, f, n, HDR, &err), FERRY_EINVAL); /* no block */
    assert_non_null(strstr(err.message, "outside a stream block"));
    assert_int_equal(ferry__pg_spool_start(&s, 7, true, &err), FERRY_OK);
    assert_int_equal(ferry__pg_spool_put(&s, f, HDR + 3, HDR, &err), FERRY_EINVAL);
    ferry__pg_spools_release(&s);
    setenv("TMPDIR", "/nonexistent/ferry-spool", 1);
    ferry__pg_spools_init(&s, "postgres source: slot t");
    assert_int_equal(ferry__pg_spool_start(&s, 8, true, &err), FERRY_EIO);
    assert_non_null(strstr(err.message, "/nonexistent/ferry-spool"));
    assert_non_null(strstr(err.message, "TMPDIR"));
    ferry__pg_spools_release(&s);
    unsetenv("TMPDIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subtransactions), cmocka_unit_test(test_relation_kept),
        cmocka_unit_test(test_nested_first), cmocka_unit_test(test_many_subtransactions),
        cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
