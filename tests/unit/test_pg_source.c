/* tests/unit/test_pg_source.c - the pure parts of the postgres source's unordered full reads
 * (pg_source.h): how many heap page ranges, where they split, and the SQL condition of one.
 * The ranges of a plan must partition every tuple id there can be: page 0 up, no gap, no
 * overlap, the last one open-ended. */
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_source.h"
#include "ferry/error.h"

static void test_shard_count(void **state)
{
    (void)state;
    /* One reader: one unfiltered read, whatever the size. */
    assert_int_equal(ferry__pg_page_shards(100000, 5000000, 1000000, 1), 1);
    /* Too few pages to split. */
    assert_int_equal(ferry__pg_page_shards(0, 0, 1000000, 4), 1);
    assert_int_equal(ferry__pg_page_shards(1, 10, 1000000, 4), 1);
    /* 5M rows of 1M per shard over 2 readers: 6 (a multiple of the readers, >= 5). */
    assert_int_equal(ferry__pg_page_shards(86000, 5000000, 1000000, 2), 6);
    /* Small table: one range per reader. */
    assert_int_equal(ferry__pg_page_shards(500, 1000, 1000000, 3), 3);
    /* Never analyzed (reltuples -1): one range per reader. */
    assert_int_equal(ferry__pg_page_shards(500, -1, 1000000, 4), 4);
    /* Never more ranges than pages. */
    assert_int_equal(ferry__pg_page_shards(3, 1000000, 10, 4), 3);
    /* Capped at 100000. */
    assert_int_equal(ferry__pg_page_shards(INT64_C(1) << 31, INT64_C(1) << 40, 1, 64), 100000);
}

/* Every (pages, est, shard_rows, parallelism) gives ranges [b_i, b_i+1) that start at 0,
 * increase strictly (no empty range) and end below `pages` (the last is open-ended). */
static void test_partition(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ULL;
    for (int iter = 0; iter < 20000; iter++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t pages = (int64_t)(x % 5000);
        int64_t est = (int64_t)((x >> 13) % 3000000) - 1;
        int64_t shard_rows = 1 + (int64_t)((x >> 33) % 200000);
        int64_t par = 1 + (int64_t)((x >> 50) % 8);
        int n = ferry__pg_page_shards(pages, est, shard_rows, par);
        assert_true(n >= 1);
        if (par > 1 && pages >= 2) assert_true(n <= pages);
        assert_int_equal(ferry__pg_page_bound(pages, 0, n), 0);
        int64_t prev = 0;
        for (int i = 1; i < n; i++) {
            int64_t b = ferry__pg_page_bound(pages, i, n);
            assert_true(b > prev);
            assert_true(b < pages);
            prev = b;
        }
    }
}

static void cond(int64_t lo, int64_t hi, const char *want)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry_buf_printf(&b, "SELECT 1 FROM t"), FERRY_OK);
    assert_int_equal(ferry__pg_page_range_sql(&b, " WHERE ", lo, hi), FERRY_OK);
    assert_string_equal(b.data, want);
    ferry_buf_release(&b);
}

static void test_range_sql(void **state)
{
    (void)state;
    cond(0, -1, "SELECT 1 FROM t");
    cond(0, 120, "SELECT 1 FROM t WHERE ctid < '(120,0)'::pg_catalog.tid");
    cond(120, 240,
         "SELECT 1 FROM t WHERE ctid >= '(120,0)'::pg_catalog.tid AND ctid < "
         "'(240,0)'::pg_catalog.tid");
    cond(240, -1, "SELECT 1 FROM t WHERE ctid >= '(240,0)'::pg_catalog.tid");
    cond(INT64_C(4294967294), -1, "SELECT 1 FROM t WHERE ctid >= '(4294967294,0)'::pg_catalog.tid");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_count),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_range_sql),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
