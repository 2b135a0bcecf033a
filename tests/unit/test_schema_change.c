/* tests/unit/test_schema_change.c - the schema_changes policy (pipeline/schema_change.c):
 * which type changes are widenings, what each policy does with each kind of change, the
 * schema.changed notes (kept per route, in order, taken once), and the pipeline key
 * (top level and per resource, a bad value refused naming the key). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "pipeline/schema_change.h"

static struct ferry_field fld(enum ferry_type t, int p, int s)
{
    struct ferry_field f = {0};
    f.type = t;
    f.precision = p;
    f.scale = s;
    return f;
}

static void widens(void **state)
{
    (void)state;
    struct ferry_field i16 = fld(FERRY_TYPE_INT16, 0, 0), i32 = fld(FERRY_TYPE_INT32, 0, 0),
                       i64 = fld(FERRY_TYPE_INT64, 0, 0), f32 = fld(FERRY_TYPE_FLOAT32, 0, 0),
                       f64 = fld(FERRY_TYPE_FLOAT64, 0, 0), txt = fld(FERRY_TYPE_UTF8, 0, 0),
                       d82 = fld(FERRY_TYPE_DECIMAL128, 8, 2), d124 = fld(FERRY_TYPE_DECIMAL128, 12, 4),
                       d83 = fld(FERRY_TYPE_DECIMAL128, 8, 3), dt = fld(FERRY_TYPE_DECIMAL_TEXT, 0, 0);
    assert_true(ferry_type_widens(&i16, &i32));
    assert_true(ferry_type_widens(&i32, &i64));
    assert_true(ferry_type_widens(&i16, &i64));
    assert_false(ferry_type_widens(&i64, &i32));
    assert_true(ferry_type_widens(&f32, &f64));
    assert_false(ferry_type_widens(&f64, &f32));
    assert_true(ferry_type_widens(&d82, &d124));
    assert_false(ferry_type_widens(&d124, &d82));
    assert_false(ferry_type_widens(&d82, &d83)); /* one digit fewer before the point */
    assert_true(ferry_type_widens(&d82, &dt));
    assert_false(ferry_type_widens(&i32, &txt));
    assert_false(ferry_type_widens(&txt, &i32));
    assert_true(ferry_type_widens(&txt, &txt));
}

static void decide(void **state)
{
    (void)state;
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_EVOLVE, FERRY_SC_ADDED), FERRY_SC_STOP);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_EVOLVE, FERRY_SC_DROPPED), FERRY_SC_STOP);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_EVOLVE, FERRY_SC_WIDENED), FERRY_SC_STOP);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_EVOLVE, FERRY_SC_GONE), FERRY_SC_CONTINUE);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_EVOLVE, FERRY_SC_RETYPED), FERRY_SC_ERROR);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_FREEZE, FERRY_SC_ADDED), FERRY_SC_CONTINUE);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_FREEZE, FERRY_SC_DROPPED), FERRY_SC_CONTINUE);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_FREEZE, FERRY_SC_WIDENED), FERRY_SC_ERROR);
    assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_FREEZE, FERRY_SC_RETYPED), FERRY_SC_ERROR);
    for (int k = FERRY_SC_ADDED; k <= FERRY_SC_TRUNCATED; k++)
        assert_int_equal(ferry_schema_change_decide(FERRY_SCHEMA_FAIL, k), FERRY_SC_ERROR);
}

static void notes(void **state)
{
    (void)state;
    ferry_schema_change_note("r1", "public.t", "a", FERRY_SC_WIDENED, "int32", "int64",
                             FERRY_SCHEMA_EVOLVE, FERRY_SC_STOP);
    ferry_schema_change_note("r2", "public.u", "b", FERRY_SC_ADDED, NULL, "utf8",
                             FERRY_SCHEMA_FREEZE, FERRY_SC_CONTINUE);
    ferry_schema_change_note("r1", "public.\"q\"", NULL, FERRY_SC_TRUNCATED, NULL, NULL,
                             FERRY_SCHEMA_FAIL, FERRY_SC_ERROR);
    int n = 0;
    char **v = ferry_schema_change_take("r1", &n);
    assert_int_equal(n, 2);
    assert_string_equal(v[0], "{\"table\":\"public.t\",\"column\":\"a\",\"change\":\"widened\","
                              "\"old_type\":\"int32\",\"new_type\":\"int64\",\"policy\":\"evolve\","
                              "\"action\":\"stop\"}");
    assert_non_null(strstr(v[1], "\"table\":\"public.\\\"q\\\"\",\"column\":null"));
    for (int i = 0; i < n; i++) ferry_free(v[i]);
    ferry_free(v);
    assert_null(ferry_schema_change_take("r1", &n));
    assert_int_equal(n, 0);
    v = ferry_schema_change_take("r2", &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(v[0], "\"change\":\"added\",\"old_type\":null"));
    ferry_free(v[0]);
    ferry_free(v);
    /* a note after a take goes to the tail again */
    ferry_schema_change_note("r3", "t", "c", FERRY_SC_GONE, NULL, NULL, FERRY_SCHEMA_EVOLVE,
                             FERRY_SC_CONTINUE);
    v = ferry_schema_change_take("r3", &n);
    assert_int_equal(n, 1);
    ferry_free(v[0]);
    ferry_free(v);
}

/* Two runs at once with the same route key: each takes the notes its own threads made (a
 * note made on another thread of the run - a flow's reader - carries the run's tag). */
static int run_a, run_b;

static void *note_for_b(void *arg)
{
    (void)arg;
    ferry_schema_change_tag_set(&run_b);
    ferry_schema_change_note("rt", "t", "b_col", FERRY_SC_ADDED, NULL, "utf8",
                             FERRY_SCHEMA_EVOLVE, FERRY_SC_CONTINUE);
    return NULL;
}

static void notes_per_run(void **state)
{
    (void)state;
    ferry_schema_change_tag_set(&run_a);
    ferry_schema_change_note("rt", "t", "a_col", FERRY_SC_ADDED, NULL, "utf8",
                             FERRY_SCHEMA_EVOLVE, FERRY_SC_CONTINUE);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, note_for_b, NULL), 0);
    pthread_join(t, NULL);
    int n = 0;
    char **v = ferry_schema_change_take("rt", &n); /* as run a */
    assert_int_equal(n, 1);
    assert_non_null(strstr(v[0], "\"column\":\"a_col\""));
    ferry_free(v[0]);
    ferry_free(v);
    assert_null(ferry_schema_change_take("rt", &n));
    ferry_schema_change_tag_set(&run_b);
    v = ferry_schema_change_take("rt", &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(v[0], "\"column\":\"b_col\""));
    ferry_free(v[0]);
    ferry_free(v);
    ferry_schema_change_tag_set(NULL);
}

static const char *const base =
    "version: 1\nname: p\n%s"
    "source: {type: sqlite, path: /nonexistent.db, resources: [{table: t%s}]}\n"
    "sink: {type: sqlite, path: /nonexistent2.db}\n";

static int load(const char *top, const char *res, struct ferry_pipeline_spec **p,
                struct ferry_error *err)
{
    char text[512];
    snprintf(text, sizeof text, base, top, res);
    return ferry_pipeline_load_string(text, strlen(text), "p.yaml", p, err);
}

static void config(void **state)
{
    (void)state;
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err;
    assert_int_equal(load("", "", &p, &err), FERRY_OK);
    assert_int_equal(p->schema_changes, FERRY_SCHEMA_EVOLVE);
    ferry_pipeline_free(p);
    assert_int_equal(load("schema_changes: freeze\n", ", schema_changes: fail", &p, &err), FERRY_OK);
    assert_int_equal(p->schema_changes, FERRY_SCHEMA_FREEZE);
    ferry_pipeline_free(p);
    assert_int_not_equal(load("schema_changes: evolved\n", "", &p, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "schema_changes"));
    assert_non_null(strstr(err.message, "evolve, freeze, fail"));
    assert_int_not_equal(load("", ", schema_changes: sometimes", &p, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "schema_changes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(widens),
        cmocka_unit_test(decide),
        cmocka_unit_test(notes),
        cmocka_unit_test(notes_per_run),
        cmocka_unit_test(config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
