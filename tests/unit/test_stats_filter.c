/* tests/unit/test_stats_filter.c - ferry__stats_excludes (formats/parquet_cursor.c): when a
 * value range [min, max] from statistics proves that no row passes a pushed-down filter,
 * at the boundaries of each operator and with a bound unknown. A wrong "excluded" would drop
 * rows silently, so every boundary is checked both ways. */
#include "unit.h"
#include <stdbool.h>
#include "formats/parquet_cursor.h"

static struct ferry_read_filter one(enum ferry_read_filter_op op, const int64_t *v, int n)
{
    return (struct ferry_read_filter){"c", FERRY_TYPE_INT64, op, v, n};
}

static void test_greater(void **state)
{
    (void)state;
    int64_t v = 10;
    struct ferry_read_filter f = one(FERRY_READ_FILTER_GREATER, &v, 1);
    assert_true(ferry__stats_excludes(&f, true, 0, true, 10));   /* max = v: x > 10 none */
    assert_false(ferry__stats_excludes(&f, true, 0, true, 11));  /* 11 passes */
    assert_false(ferry__stats_excludes(&f, true, 0, false, 0));  /* max unknown */
    assert_true(ferry__stats_excludes(&f, false, 0, true, -5));
}

static void test_less(void **state)
{
    (void)state;
    int64_t v = 10;
    struct ferry_read_filter f = one(FERRY_READ_FILTER_LESS, &v, 1);
    assert_true(ferry__stats_excludes(&f, true, 10, true, 20));  /* min = v: x < 10 none */
    assert_false(ferry__stats_excludes(&f, true, 9, true, 20));
    assert_false(ferry__stats_excludes(&f, false, 0, true, 20)); /* min unknown */
}

static void test_equals_in(void **state)
{
    (void)state;
    int64_t v[] = {5, 30};
    struct ferry_read_filter eq = one(FERRY_READ_FILTER_EQUALS, v, 1);
    assert_false(ferry__stats_excludes(&eq, true, 5, true, 5));
    assert_false(ferry__stats_excludes(&eq, true, 0, true, 5));
    assert_true(ferry__stats_excludes(&eq, true, 6, true, 9));
    assert_true(ferry__stats_excludes(&eq, true, 0, true, 4));
    assert_false(ferry__stats_excludes(&eq, false, 0, false, 0));
    struct ferry_read_filter in = one(FERRY_READ_FILTER_IN, v, 2);
    assert_true(ferry__stats_excludes(&in, true, 6, true, 29));
    assert_false(ferry__stats_excludes(&in, true, 6, true, 30));
    assert_false(ferry__stats_excludes(&in, true, 5, true, 29));
    assert_true(ferry__stats_excludes(&in, true, 31, false, 0));
    struct ferry_read_filter none = one(FERRY_READ_FILTER_IN, v, 0);
    assert_false(ferry__stats_excludes(&none, true, 6, true, 29));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greater),
        cmocka_unit_test(test_less),
        cmocka_unit_test(test_equals_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
