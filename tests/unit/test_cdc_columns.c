/* tests/unit/test_cdc_columns.c - the columns a cdc source appends (pipeline/cdc_columns.c):
 * a change log's four in their order, types and nullability; soft_delete's one; none for a
 * plain merge; a snapshot row's values (a soft_delete column named like a change-log column
 * stays NULL); a table that already has one of the names refused naming source, table and
 * column. */
#include <string.h>
#include "unit.h"
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "pipeline/cdc_columns.h"

static struct ferry_schema *table(const char *extra)
{
    struct ferry_schema *sc = ferry_schema_new();
    struct ferry_error err;
    assert_non_null(sc);
    assert_int_equal(ferry_schema_add_field(sc, "id", FERRY_TYPE_INT32, false, &err), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(sc, "v", FERRY_TYPE_UTF8, false, &err), FERRY_OK);
    if (extra)
        assert_int_equal(ferry_schema_add_field(sc, extra, FERRY_TYPE_INT64, true, &err), FERRY_OK);
    return sc;
}

static void change_log(void **state)
{
    (void)state;
    struct ferry_read_context run = {.change_log = true};
    struct ferry_error err;
    struct ferry_schema *sc = table(NULL);
    assert_int_equal(ferry_cdc_extra_cols(run.change_log, run.soft_delete != NULL),
                     FERRY_CDC_LOG_COLS);
    assert_int_equal(ferry_cdc_add_columns(sc, &run, "test source", "t", &err), FERRY_OK);
    assert_int_equal(sc->n_fields, 2 + FERRY_CDC_LOG_COLS);
    static const char *const names[] = {"_ferry_op", "_ferry_lsn", "_ferry_commit_time",
                                        "_ferry_seq"};
    static const enum ferry_type types[] = {FERRY_TYPE_UTF8, FERRY_TYPE_INT64,
                                            FERRY_TYPE_TIMESTAMPTZ_US, FERRY_TYPE_INT64};
    for (int i = 0; i < FERRY_CDC_LOG_COLS; i++) {
        assert_string_equal(sc->fields[2 + i].name, names[i]);
        assert_int_equal(sc->fields[2 + i].type, types[i]);
        assert_int_equal(sc->fields[2 + i].nullable, i == 2); /* only the commit time */
    }
    assert_false(sc->fields[1].nullable); /* the table's own columns are left as they are */
    ferry_schema_unref(sc);
}

static void soft_delete_and_merge(void **state)
{
    (void)state;
    struct ferry_read_context run = {.soft_delete = "deleted_at"};
    struct ferry_error err;
    struct ferry_schema *sc = table(NULL);
    assert_int_equal(ferry_cdc_extra_cols(run.change_log, run.soft_delete != NULL), 1);
    assert_int_equal(ferry_cdc_add_columns(sc, &run, "test source", "t", &err), FERRY_OK);
    assert_int_equal(sc->n_fields, 3);
    assert_string_equal(sc->fields[2].name, "deleted_at");
    assert_int_equal(sc->fields[2].type, FERRY_TYPE_TIMESTAMPTZ_US);
    assert_true(sc->fields[2].nullable);
    ferry_schema_unref(sc);
    struct ferry_read_context merge = {0};
    sc = table(NULL);
    assert_int_equal(ferry_cdc_extra_cols(merge.change_log, merge.soft_delete != NULL), 0);
    assert_int_equal(ferry_cdc_add_columns(sc, &merge, "test source", "t", &err), FERRY_OK);
    assert_int_equal(sc->n_fields, 2);
    ferry_schema_unref(sc);
}

/* A snapshot row's values: by the change log's names; soft_delete's mark is NULL even when
 * the column is named like a change-log column (it is a timestamptz). */
static void snapshot_values(void **state)
{
    (void)state;
    struct ferry_read_context run = {.change_log = true};
    struct ferry_error err;
    struct ferry_schema *sc = table(NULL);
    assert_int_equal(ferry_cdc_add_columns(sc, &run, "test source", "t", &err), FERRY_OK);
    static const enum ferry_cdc_snapshot_value want[] = {FERRY_CDC_SNAP_INSERT, FERRY_CDC_SNAP_LSN,
                                                         FERRY_CDC_SNAP_NULL, FERRY_CDC_SNAP_ZERO};
    for (int i = 0; i < FERRY_CDC_LOG_COLS; i++)
        assert_int_equal(ferry_cdc_snapshot_value(true, &sc->fields[2 + i]), want[i]);
    ferry_schema_unref(sc);
    struct ferry_read_context soft = {.soft_delete = "_ferry_seq"};
    sc = table(NULL);
    assert_int_equal(ferry_cdc_add_columns(sc, &soft, "test source", "t", &err), FERRY_OK);
    assert_int_equal(ferry_cdc_snapshot_value(false, &sc->fields[2]), FERRY_CDC_SNAP_NULL);
    ferry_schema_unref(sc);
}

static void taken_names(void **state)
{
    (void)state;
    struct ferry_read_context run = {.change_log = true};
    struct ferry_error err;
    struct ferry_schema *sc = table("_ferry_seq");
    assert_int_equal(ferry_cdc_add_columns(sc, &run, "test source", "orders", &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "test source"));
    assert_non_null(strstr(err.message, "table \"orders\" already has a column _ferry_seq"));
    ferry_schema_unref(sc);
    struct ferry_read_context soft = {.soft_delete = "gone"};
    sc = table("gone");
    assert_int_equal(ferry_cdc_add_columns(sc, &soft, "test source", "orders", &err),
                     FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "column gone, which `soft_delete` adds"));
    ferry_schema_unref(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(change_log),
        cmocka_unit_test(soft_delete_and_merge),
        cmocka_unit_test(snapshot_values),
        cmocka_unit_test(taken_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
