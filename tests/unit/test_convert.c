/* tests/unit/test_convert.c - on_unrepresentable (pipeline/convert.c): which values of a
 * batch are converted for a sink's limits, to what, the per-column counts and their JSON,
 * the nullable schema the sink prepares, a key column's special value refused, and a batch
 * with nothing to convert passed on as it is. */
#include <float.h>
#include <math.h>
#include <string.h>
#include "unit.h"
#include "batch/builder.h"
#include "ferry/core.h"
#include "pipeline/convert.h"

static struct ferry_batch *got;

static int capture(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)ctx;
    (void)err;
    ferry_batch_unref(got);
    got = b;
    return FERRY_OK;
}

/* id (key), d date, ts timestamp, n decimal128(10,2), f float64, t decimal text */
static struct ferry_schema *schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_DATE32, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "d", FERRY_TYPE_DATE32, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "ts", FERRY_TYPE_TIMESTAMP_US, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "n", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "f", FERRY_TYPE_FLOAT64, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "t", FERRY_TYPE_DECIMAL_TEXT, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    s->fields[3].precision = 10;
    s->fields[3].scale = 2;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

struct row {
    int64_t id, d, ts;
    bool nan_n;
    double f;
    const char *t;
};

static struct ferry_batch *batch(struct ferry_schema *s, const struct row *rows, int n)
{
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_C(1) << 30};
    struct ferry_row_writer *rw = ferry__rw_new(s, "r", lim, capture, NULL);
    assert_non_null(rw);
    for (int i = 0; i < n; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, rows[i].id);
        ferry_rw_int(rw, rows[i].d);
        ferry_rw_int(rw, rows[i].ts);
        ferry_rw_dec128(rw, rows[i].nan_n ? (struct ferry_decimal128){.hi = FERRY_SPECIAL_DEC_NAN_HI,
                                                                     .lo = FERRY_SPECIAL_DEC_NAN_LO}
                                          : (struct ferry_decimal128){.lo = 125});
        ferry_rw_float(rw, rows[i].f);
        ferry_rw_text(rw, rows[i].t, strlen(rows[i].t));
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    struct ferry_batch *b = got;
    got = NULL;
    return b;
}

#define DAY_MAX 2932896
#define DAY_MIN (-719162)
#define US_MAX (INT64_C(2932897) * 86400000000 - 1)

static const struct row rows[] = {
    {1, 19000, 5, false, 1.5, "12.5"},
    {2, FERRY_SPECIAL_DATE_NINF, FERRY_SPECIAL_TS_PINF, true, NAN, "NaN"},
    {3, DAY_MAX + 1, INT64_C(-62135596800000001), false, INFINITY,
     "123456789012345678901234567890123456"},
    {4, DAY_MIN, 0, false, -0.0, "0.1234567890123456789012345678901"},
};

/* A MySQL-like sink: calendar, no NaN/Infinity/-0, DECIMAL(65,30). */
static struct ferry_sink_caps mysql_like(void)
{
    struct ferry_sink_caps c = {0};
    c.values.calendar = c.values.no_nan = c.values.no_infinity = c.values.no_negative_zero = true;
    c.values.decimal_int_digits = 35;
    c.values.decimal_frac_digits = 30;
    return c;
}

static void test_clamp(void **state)
{
    (void)state;
    struct ferry_schema *s = schema(), *ns = NULL;
    struct ferry_sink_caps caps = mysql_like();
    struct ferry_convert *cv = NULL;
    assert_int_equal(ferry_convert_new(s, FERRY_UNREP_CLAMP, &caps, &cv, &ns, NULL), FERRY_OK);
    assert_non_null(cv);
    assert_non_null(ns); /* d was NOT NULL: nullable now; the key stays as it was */
    assert_true(ns->fields[1].nullable);
    assert_false(ns->fields[0].nullable);
    assert_int_equal(ns->fields[3].precision, 10);
    struct ferry_batch *b = batch(s, rows, 4), *orig = ferry_batch_ref(b);
    assert_int_equal(ferry_convert_apply(cv, &b, NULL), FERRY_OK);
    assert_ptr_not_equal(b, orig);
    /* the original is untouched */
    assert_int_equal(ferry_col_int(orig, 1, 1), FERRY_SPECIAL_DATE_NINF);
    ferry_batch_unref(orig);
    assert_int_equal(ferry_col_int(b, 1, 0), 19000);
    assert_int_equal(ferry_col_int(b, 1, 1), DAY_MIN);
    assert_int_equal(ferry_col_int(b, 1, 2), DAY_MAX);
    assert_int_equal(ferry_col_int(b, 1, 3), DAY_MIN); /* in range: kept */
    assert_true(ferry_col_int(b, 2, 1) == US_MAX);
    assert_true(ferry_col_int(b, 2, 2) == INT64_C(-719162) * 86400000000);
    assert_true(ferry_col_is_null(b, 3, 1));
    assert_false(ferry_col_is_null(b, 3, 0));
    assert_true(ferry_col_is_null(b, 4, 1));           /* NaN: no nearest value */
    assert_true(ferry_col_float(b, 4, 2) == DBL_MAX);  /* Infinity */
    double z = ferry_col_float(b, 4, 3);
    assert_true(z == 0 && !signbit(z));                /* -0 */
    size_t len;
    const uint8_t *p = ferry_col_bytes(b, 5, 0, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(p, "12.5", 4);
    assert_true(ferry_col_is_null(b, 5, 1));
    p = ferry_col_bytes(b, 5, 2, &len);
    assert_int_equal(len, 35 + 1 + 30);
    assert_memory_equal(p, "99999999999999999999999999999999999.9", 37);
    assert_true(ferry_col_is_null(b, 5, 3)); /* 31 fraction digits: rounding is not clamping */
    struct ferry_buf j;
    ferry_buf_init(&j, 0);
    assert_int_equal(ferry_convert_json(cv, false, &j), FERRY_OK);
    assert_string_equal(j.data, ",\"converted\":{\"d\":{\"null\":0,\"clamp\":2},"
                                "\"ts\":{\"null\":0,\"clamp\":2},\"n\":{\"null\":1,\"clamp\":0},"
                                "\"f\":{\"null\":1,\"clamp\":2},\"t\":{\"null\":2,\"clamp\":1}}");
    assert_int_equal(ferry_convert_total(cv), 11);
    /* a batch with nothing to convert: the same batch, counts of the last batch zero */
    struct ferry_batch *c = batch(s, rows, 1), *same = c;
    assert_int_equal(ferry_convert_apply(cv, &c, NULL), FERRY_OK);
    assert_ptr_equal(c, same);
    ferry_buf_reset(&j);
    assert_int_equal(ferry_convert_json(cv, false, &j), FERRY_OK);
    assert_int_equal(j.len, 0);
    assert_int_equal(ferry_convert_json(cv, true, &j), FERRY_OK);
    assert_non_null(strstr(j.data, "\"d\":{\"null\":0,\"clamp\":2}"));
    ferry_buf_release(&j);
    ferry_batch_unref(c);
    ferry_batch_unref(b);
    ferry_convert_free(cv);
    ferry_schema_unref(ns);
    ferry_schema_unref(s);
}

static void test_null_and_key(void **state)
{
    (void)state;
    struct ferry_schema *s = schema(), *ns = NULL;
    struct ferry_sink_caps caps = {0}; /* parquet-like: only the special values */
    struct ferry_convert *cv = NULL;
    assert_int_equal(ferry_convert_new(s, FERRY_UNREP_NULL, &caps, &cv, &ns, NULL), FERRY_OK);
    struct ferry_batch *b = batch(s, rows, 4);
    assert_int_equal(ferry_convert_apply(cv, &b, NULL), FERRY_OK);
    assert_true(ferry_col_is_null(b, 1, 1));
    assert_int_equal(ferry_col_int(b, 1, 2), DAY_MAX + 1); /* parquet holds it */
    assert_true(ferry_col_is_null(b, 2, 1));
    assert_true(ferry_col_is_null(b, 3, 1));
    assert_true(isnan(ferry_col_float(b, 4, 1)));
    assert_int_equal(ferry_convert_total(cv), 3);
    ferry_batch_unref(b);
    /* a special value in the key column: refused, naming column and row */
    struct row k = rows[0];
    k.id = FERRY_SPECIAL_DATE_PINF;
    b = batch(s, &k, 1);
    struct ferry_error err = {0};
    assert_int_equal(ferry_convert_apply(cv, &b, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "key column \"id\""));
    assert_non_null(strstr(err.message, "row 1"));
    ferry_batch_unref(b);
    ferry_convert_free(cv);
    ferry_schema_unref(ns);
    /* a sink that holds everything (PostgreSQL): no converter */
    caps.special_values = true;
    assert_int_equal(ferry_convert_new(s, FERRY_UNREP_CLAMP, &caps, &cv, &ns, NULL), FERRY_OK);
    assert_null(cv);
    assert_null(ns);
    ferry_schema_unref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clamp),
        cmocka_unit_test(test_null_and_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
