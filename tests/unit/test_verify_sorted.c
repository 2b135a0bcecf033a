/* tests/unit/test_verify_sorted.c - verify's sorted (key, hash) list (src/verify/vsorted.c):
 * the same rows added to a list that holds them in memory and to one whose budget is so small
 * that it spills many sorted runs to a temporary file and merges them must answer every
 * question alike - count, sum, the row at each position (key order and hash), the position
 * of a key (before, at, between and after the keys, inclusive or not) and every prefix sum.
 * Keys: one integer part (negative, several digit counts), one text part, a composite
 * (integer, text) key with NULL parts, equal keys in several runs; and an empty list. The
 * temporary folder (TMPDIR) is empty while the spilled list is open and after it is freed;
 * a folder that cannot be written fails the add, naming the side. */
#include "unit.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ferry/core.h"
#include "verify/verify.h"

static char tmpdir[256];

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

/* Row i's key: part 0 an integer with a sign and length that vary, part 1 a text; NULL
 * parts for every 37th row (composite keys only); every 5th key repeated (dup). */
static char **make_key(int n_key, bool text_first, int i, bool dup)
{
    int x = dup ? i - i % 5 : i;
    char **parts = ferry_calloc((size_t)n_key + 1, sizeof *parts);
    char num[32], txt[32];
    snprintf(num, sizeof num, "%d", (x % 3 == 0 ? -1 : 1) * (x * 7919 % 100003));
    snprintf(txt, sizeof txt, "k%d/%c", x * 31 % 977, 'a' + x % 26);
    if (n_key == 1) {
        parts[0] = ferry_strdup(text_first ? txt : num);
        return parts;
    }
    parts[0] = x % 37 == 0 ? NULL : ferry_strdup(num);
    parts[1] = x % 41 == 0 ? NULL : ferry_strdup(txt);
    return parts;
}

static void check_same(struct ferry_vsorted *a, struct ferry_vsorted *b, int n_key,
                       const bool *kint)
{
    struct ferry_error err;
    int64_t n = ferry__vsorted_count(a);
    assert_int_equal(ferry__vsorted_count(b), n);
    assert_int_equal(ferry__vsorted_sum(a), ferry__vsorted_sum(b));
    for (int64_t i = 0; i <= n; i++) {
        uint64_t pa, pb;
        assert_int_equal(ferry__vsorted_prefix(a, i, &pa, &err), FERRY_OK);
        assert_int_equal(ferry__vsorted_prefix(b, i, &pb, &err), FERRY_OK);
        assert_int_equal(pa, pb);
    }
    /* every row, and the position of every row's key (at and after), of a key just before */
    for (int64_t i = 0; i < n; i++) {
        const struct ferry_vrow *ra, *rb;
        assert_int_equal(ferry__vsorted_row(a, i, &ra, &err), FERRY_OK);
        struct ferry_vrow copy = {{ferry_calloc((size_t)n_key + 1, sizeof(char *))}, ra->hash};
        for (int k = 0; k < n_key; k++)
            copy.key.part[k] = ra->key.part[k] ? ferry_strdup(ra->key.part[k]) : NULL;
        assert_int_equal(ferry__vsorted_row(b, i, &rb, &err), FERRY_OK);
        assert_int_equal(copy.hash, rb->hash);
        assert_int_equal(ferry__vkey_order(&copy.key, &rb->key, n_key, kint), 0);
        for (int k = 0; k < n_key; k++)
            if (copy.key.part[k])
                assert_string_equal(copy.key.part[k], rb->key.part[k]);
            else
                assert_null(rb->key.part[k]);
        if (i > 0) { /* sorted */
            const struct ferry_vrow *prev;
            assert_int_equal(ferry__vsorted_row(b, i - 1, &prev, &err), FERRY_OK);
            assert_true(ferry__vkey_order(&prev->key, &copy.key, n_key, kint) <= 0);
        }
        for (int incl = 0; incl < 2; incl++) {
            int64_t xa, xb;
            assert_int_equal(ferry__vsorted_after(a, &copy.key, incl, &xa, &err), FERRY_OK);
            assert_int_equal(ferry__vsorted_after(b, &copy.key, incl, &xb, &err), FERRY_OK);
            assert_int_equal(xa, xb);
            assert_true(incl ? xa <= i : xa > i);
        }
        ferry__vkey_free(&copy.key, n_key);
    }
    /* keys that are not there: below all, between, above all */
    const char *probes[] = {"-999999", "5", "50000", "999999", "k", "k5/", "zzz", "", NULL};
    for (int p = 0; probes[p]; p++) {
        char *parts[3] = {(char *)probes[p], (char *)probes[p], NULL};
        struct ferry_vkey k = {parts};
        for (int incl = 0; incl < 2; incl++) {
            int64_t xa, xb;
            assert_int_equal(ferry__vsorted_after(a, &k, incl, &xa, &err), FERRY_OK);
            assert_int_equal(ferry__vsorted_after(b, &k, incl, &xb, &err), FERRY_OK);
            assert_int_equal(xa, xb);
        }
    }
    int64_t x;
    assert_int_equal(ferry__vsorted_after(b, NULL, false, &x, &err), FERRY_OK);
    assert_int_equal(x, 0);
}

static void run_case(int n_key, const bool *kint, bool text_first, int rows, bool dup)
{
    struct ferry_error err;
    struct ferry_vsorted *mem = NULL, *disk = NULL;
    assert_int_equal(ferry__vsorted_new(n_key, kint, INT64_MAX, "mem", &mem, &err), FERRY_OK);
    assert_int_equal(ferry__vsorted_new(n_key, kint, 3000, "disk", &disk, &err), FERRY_OK);
    for (int i = 0; i < rows; i++) {
        int64_t h = (int64_t)((uint64_t)i * UINT64_C(0x9e3779b97f4a7c15));
        assert_int_equal(ferry__vsorted_add(mem, make_key(n_key, text_first, i, dup), h, &err),
                         FERRY_OK);
        assert_int_equal(ferry__vsorted_add(disk, make_key(n_key, text_first, i, dup), h, &err),
                         FERRY_OK);
    }
    assert_int_equal(ferry__vsorted_finish(mem, &err), FERRY_OK);
    assert_int_equal(ferry__vsorted_finish(disk, &err), FERRY_OK);
    assert_int_equal(ferry__vsorted_runs(mem), 0);
    if (rows > 100) assert_true(ferry__vsorted_runs(disk) > 5);
    assert_int_equal(entries(tmpdir), 0); /* unlinked as soon as created */
    check_same(mem, disk, n_key, kint);
    ferry__vsorted_free(mem);
    ferry__vsorted_free(disk);
    assert_int_equal(entries(tmpdir), 0);
}

static void test_int_key(void **state)
{
    (void)state;
    bool kint[] = {true};
    run_case(1, kint, false, 3000, false);
}

static void test_text_key_duplicates(void **state)
{
    (void)state;
    bool kint[] = {false};
    run_case(1, kint, true, 2600, true); /* equal keys in several runs */
}

static void test_composite_key_nulls(void **state)
{
    (void)state;
    bool kint[] = {true, false};
    run_case(2, kint, false, 2100, true);
}

static void test_empty_and_small(void **state)
{
    (void)state;
    bool kint[] = {true};
    run_case(1, kint, false, 0, false);
    run_case(1, kint, false, 1, false);
    run_case(1, kint, false, 513, false); /* one page and one row */
}

/* A temporary folder that cannot be written: the spill fails naming the side, the rows
 * added are freed with the list (ASan's leak check). */
static void test_spill_error_names_side(void **state)
{
    (void)state;
    bool kint[] = {true};
    struct ferry_error err;
    struct ferry_vsorted *v = NULL;
    setenv("TMPDIR", "/nonexistent/ferry", 1);
    assert_int_equal(ferry__vsorted_new(1, kint, 200, "iceberg db.big", &v, &err), FERRY_OK);
    int rc = FERRY_OK;
    for (int i = 0; i < 100 && rc == FERRY_OK; i++)
        rc = ferry__vsorted_add(v, make_key(1, false, i, false), i, &err);
    setenv("TMPDIR", tmpdir, 1);
    assert_int_equal(rc, FERRY_EIO);
    assert_non_null(strstr(err.message, "iceberg db.big"));
    assert_non_null(strstr(err.message, "temporary sort file"));
    ferry__vsorted_free(v);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/vsorted-XXXXXX",
             getenv("FERRY_TEST_TMP") ? getenv("FERRY_TEST_TMP") : "/tmp");
    if (mkdtemp(tmpdir) == NULL) return 1;
    setenv("TMPDIR", tmpdir, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_key),
        cmocka_unit_test(test_text_key_duplicates),
        cmocka_unit_test(test_composite_key_nulls),
        cmocka_unit_test(test_empty_and_small),
        cmocka_unit_test(test_spill_error_names_side),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
