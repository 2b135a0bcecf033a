/* tests/unit/test_pg_values.c - PostgreSQL's ISO text of dates and timestamps outside
 * years 0001..9999 as pgoutput sends them (connectors/postgres/pg_values.c): BC, more year
 * digits, offsets, leap days, the last microsecond ferry holds and the first it does not. */
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_values.h"
#include "ferry/batch.h"

static int ts(const char *s, int64_t *out)
{
    return ferry__pg_timestamp_text(s, strlen(s), out);
}

static void test_dates(void **state)
{
    (void)state;
    int32_t d = 0;
    assert_int_equal(ferry__pg_date_text("2024-01-31", 10, &d), FERRY_OK);
    int32_t want;
    assert_int_equal(ferry_date32_from_text("2024-01-31", 10, &want), FERRY_OK);
    assert_int_equal(d, want);
    assert_int_equal(ferry__pg_date_text("0001-01-01 BC", 13, &d), FERRY_OK);
    assert_int_equal(d, -719162 - 366); /* 1 BC is a leap year */
    assert_int_equal(ferry__pg_date_text("4713-01-01 BC", 13, &d), FERRY_OK);
    assert_int_equal(d, -2440550); /* PostgreSQL: SELECT date '4713-01-01 BC' - date '1970-01-01' */
    assert_int_equal(ferry__pg_date_text("10000-02-29", 11, &d), FERRY_OK);
    assert_int_equal(d, 2932897 + 31 + 28);
    assert_int_equal(ferry__pg_date_text("9999-02-29", 10, &d), FERRY_EINVAL);
    assert_int_equal(ferry__pg_date_text("5874897-12-31", 13, &d), FERRY_OK);
    assert_int_equal(ferry__pg_date_text("2024-13-01", 10, &d), FERRY_EINVAL);
    assert_int_equal(ferry__pg_date_text("2024-01-01 AD", 13, &d), FERRY_EINVAL);
    assert_int_equal(ferry__pg_date_text("infinity", 8, &d), FERRY_EINVAL);
}

static void test_timestamps(void **state)
{
    (void)state;
    int64_t v = 0;
    assert_int_equal(ts("294247-01-10 04:00:54.775806", &v), FERRY_OK);
    assert_true(v == INT64_MAX - 1);
    /* INT64_MAX is +infinity's special value; one more does not fit */
    assert_int_equal(ts("294247-01-10 04:00:54.775807", &v), FERRY_EUNSUPPORTED);
    assert_int_equal(ts("294276-12-31 23:59:59.999999", &v), FERRY_EUNSUPPORTED);
    assert_int_equal(ts("294247-01-10 04:00:54.775807+00", &v), FERRY_EUNSUPPORTED);
    assert_int_equal(ts("294247-01-10 05:00:54.775806+01", &v), FERRY_OK);
    assert_true(v == INT64_MAX - 1);
    assert_int_equal(ts("4713-01-01 00:00:00 BC", &v), FERRY_OK);
    assert_true(v == INT64_C(-2440550) * 86400000000);
    assert_int_equal(ts("0001-12-31 23:59:59.5 BC", &v), FERRY_OK);
    assert_true(v == INT64_C(-719162) * 86400000000 - 500000);
    assert_int_equal(ts("10000-01-01 00:00:00-05:30", &v), FERRY_OK);
    assert_true(v == INT64_C(2932897) * 86400000000 + INT64_C(19800) * 1000000);
    assert_int_equal(ts("2024-01-01 10:00:00+00 BC", &v), FERRY_OK);
    assert_int_equal(ts("2024-01-01T10:00:00", &v), FERRY_EINVAL);
    assert_int_equal(ts("2024-01-01 10:00", &v), FERRY_EINVAL);
    assert_int_equal(ts("2024-01-01 10:00:00.1234567", &v), FERRY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dates),
        cmocka_unit_test(test_timestamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
