/* tests/unit/test_position.c - the checkpoint position codec (src/checkpoint/position.h):
 * a round trip of every kind of member and key value (a 4-byte float's shortest form
 * included), the stored forms earlier versions
 * wrote, malformed input with a clear error each, and an allocation-failure loop over
 * decode and encode (every allocation fails in turn). */
#include "unit.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <jansson.h>
#include "checkpoint/position.h"
#include "ferry/core.h"

static struct ferry_position decoded(const char *text)
{
    struct ferry_position p;
    struct ferry_error err;
    ferry_error_clear(&err);
    int rc = ferry_position_decode(text, strlen(text), &p, &err);
    if (rc != FERRY_OK) fail_msg("decode %s: %s", text, err.message);
    return p;
}

static char *encoded(const struct ferry_position *p)
{
    char *t = NULL;
    struct ferry_error err;
    ferry_error_clear(&err);
    if (ferry_position_to_text(p, &t, &err) != FERRY_OK) fail_msg("encode: %s", err.message);
    return t;
}

/* text decodes and encodes back to exactly text */
static void assert_round_trip(const char *text)
{
    struct ferry_position p = decoded(text);
    char *t = encoded(&p);
    assert_string_equal(t, text);
    ferry_free(t);
    ferry_position_clear(&p);
}

/* A position of the one key value v (not owned). */
static struct ferry_position one_key(struct ferry_key_value *v)
{
    struct ferry_position p;
    ferry_position_init(&p);
    p.has_key = true;
    p.n_key = 1;
    p.key = v;
    return p;
}

/* Forms the builder, the sources and the runner have stored: they read back unchanged. */
static void test_stored_forms(void **state)
{
    (void)state;
    static const char *const forms[] = {
        "{\"shard\":0,\"key\":[-42]}",
        "{\"shard\":0,\"key\":[\"O\\\"Brien\\\\\\u000a\",-42]}",
        "{\"shard\":1,\"n\":77,\"done\":true}",
        "{\"shard\":0,\"n\":123456789,\"k\":17}",
        "{\"shard\":0,\"reset\":true}",
        "{\"shard\":2,\"key\":[],\"done\":true}",
        "{\"shard\":0,\"done\":true}",
        /* the MySQL source's binlog position with its GTID set ("g", ferry_rw_set_offset_tag) */
        "{\"shard\":0,\"n\":1099511628211,\"k\":3,"
        "\"g\":\"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5\",\"done\":true}",
    };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        assert_round_trip(forms[i]);
    assert_true(ferry_position_text_done("{\"shard\":0,\"n\":4,\"g\":\"u:1-2\",\"done\":true}"));
    /* the coordinator's snapshot record has no shard: it decodes as shard 0 */
    struct ferry_position p = decoded("{\"attempt\":3,\"snapshot\":\"00000003-00000002-1\"}");
    assert_int_equal(p.shard, 0);
    assert_int_equal(p.attempt, 3);
    assert_string_equal(p.snapshot, "00000003-00000002-1");
    ferry_position_clear(&p);
}

static void test_every_kind(void **state)
{
    (void)state;
    struct ferry_key_value key[6] = {
        {.kind = FERRY_KEY_NULL},
        {.kind = FERRY_KEY_BOOL, .b = true},
        {.kind = FERRY_KEY_INT, .i = INT64_MIN},
        {.kind = FERRY_KEY_REAL, .real = 0.1},
        {.kind = FERRY_KEY_TEXT, .text = (char *)"a\0b\xc3\xa9", .len = 5},
        {.kind = FERRY_KEY_TEXT, .text = (char *)"NaN", .len = 3},
    };
    struct ferry_position p;
    ferry_position_init(&p);
    p.shard = 7;
    p.has_key = true;
    p.n_key = 6;
    p.key = key;
    p.has_n = true;
    p.n = INT64_MAX;
    p.k = 5;
    p.tag = (char *)"uuid:1-9,uuid2:4";
    p.done = true;
    p.reset = true;
    p.object = (char *)"dir/part-0001.parquet";
    p.snapshot = (char *)"snap \"1\"";
    p.attempt = 2;
    char *t = encoded(&p);
    struct ferry_position q = decoded(t);
    assert_int_equal(q.shard, 7);
    assert_true(q.has_key);
    assert_int_equal(q.n_key, 6);
    assert_int_equal(q.key[0].kind, FERRY_KEY_NULL);
    assert_int_equal(q.key[1].kind, FERRY_KEY_BOOL);
    assert_true(q.key[1].b);
    assert_int_equal(q.key[2].kind, FERRY_KEY_INT);
    assert_true(q.key[2].i == INT64_MIN);
    assert_int_equal(q.key[3].kind, FERRY_KEY_REAL);
    assert_true(q.key[3].real == 0.1);
    assert_int_equal(q.key[4].kind, FERRY_KEY_TEXT);
    assert_int_equal(q.key[4].len, 5);
    assert_memory_equal(q.key[4].text, "a\0b\xc3\xa9", 5);
    assert_string_equal(q.key[5].text, "NaN");
    assert_true(q.has_n);
    assert_true(q.n == INT64_MAX);
    assert_int_equal(q.k, 5);
    assert_string_equal(q.tag, "uuid:1-9,uuid2:4");
    assert_true(q.done);
    assert_true(q.reset);
    assert_string_equal(q.object, "dir/part-0001.parquet");
    assert_string_equal(q.snapshot, "snap \"1\"");
    assert_int_equal(q.attempt, 2);
    /* and its text is stable: encoding the decoded form gives the same text */
    char *t2 = encoded(&q);
    assert_string_equal(t, t2);
    ferry_free(t);
    ferry_free(t2);
    ferry_position_clear(&q);
    /* a real key value that is not finite is refused (the builder stores those as text) */
    struct ferry_key_value inf = {.kind = FERRY_KEY_REAL, .real = INFINITY};
    struct ferry_position r = one_key(&inf);
    char *none = NULL;
    struct ferry_error err;
    assert_int_equal(ferry_position_to_text(&r, &none, &err), FERRY_EINVAL);
    assert_null(none);
    assert_non_null(strstr(err.message, "not finite"));
}

/* A 4-byte float's key value (single) encodes in the shortest form that reads back as the
 * same float, as the builder always stored it ("0.1", not the double's 0.10000000149011612),
 * and decodes to a double that converts back to the very float. */
static void test_single_real(void **state)
{
    (void)state;
    const struct {
        float v;
        const char *text;
        enum ferry_key_kind back; /* what the text decodes as */
    } cases[] = {{0.1f, "0.1", FERRY_KEY_REAL},
                 {1e7f, "1e+07", FERRY_KEY_REAL},
                 {-3.4028235e38f, "-3.4028235e+38", FERRY_KEY_REAL},
                 {1.17549435e-38f, "1.1754944e-38", FERRY_KEY_REAL},
                 {16777217.0f, "16777216", FERRY_KEY_INT},
                 {0.0f, "0", FERRY_KEY_INT}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ferry_key_value v = {.kind = FERRY_KEY_REAL, .real = cases[i].v, .single = true};
        struct ferry_position p = one_key(&v);
        char *t = encoded(&p);
        char expect[64];
        snprintf(expect, sizeof expect, "{\"shard\":0,\"key\":[%s]}", cases[i].text);
        assert_string_equal(t, expect);
        struct ferry_position q = decoded(t);
        assert_int_equal(q.key[0].kind, cases[i].back);
        double back = q.key[0].kind == FERRY_KEY_REAL ? q.key[0].real : (double)q.key[0].i;
        assert_true((float)back == cases[i].v);
        assert_false(q.key[0].single);
        ferry_position_clear(&q);
        ferry_free(t);
    }
    /* without single the same value is the double's shortest form */
    struct ferry_key_value d = {.kind = FERRY_KEY_REAL, .real = 0.1f};
    struct ferry_position p = one_key(&d);
    char *t = encoded(&p);
    assert_string_equal(t, "{\"shard\":0,\"key\":[0.10000000149011612]}");
    ferry_free(t);
}

static void expect_refused(const char *text, const char *words)
{
    struct ferry_position p;
    struct ferry_error err;
    ferry_error_clear(&err);
    assert_int_equal(ferry_position_decode(text, strlen(text), &p, &err), FERRY_EINVAL);
    if (strstr(err.message, words) == NULL)
        fail_msg("decode %s: message \"%s\" lacks \"%s\"", text, err.message, words);
    assert_null(p.key);
    assert_null(p.snapshot);
}

/* The key as the jansson array the sqlite and postgres sources bind from: each value kept
 * exactly (text with its NUL, the real's double, integers at their limits). */
static void test_key_json(void **state)
{
    (void)state;
    const char *text = "{\"shard\":1,\"key\":[null,false,-9223372036854775808,"
                       "9223372036854775807,0.1,1e-300,\"a\\u0000b\",\"NaN\"],\"done\":true}";
    struct ferry_position p = decoded(text);
    json_t *a = ferry_position_key_json(&p);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 8);
    assert_true(json_is_null(json_array_get(a, 0)));
    assert_true(json_is_false(json_array_get(a, 1)));
    assert_true(json_integer_value(json_array_get(a, 2)) == INT64_MIN);
    assert_true(json_integer_value(json_array_get(a, 3)) == INT64_MAX);
    assert_true(json_real_value(json_array_get(a, 4)) == 0.1);
    assert_true(json_real_value(json_array_get(a, 5)) == 1e-300);
    assert_int_equal(json_string_length(json_array_get(a, 6)), 3);
    assert_memory_equal(json_string_value(json_array_get(a, 6)), "a\0b", 3);
    assert_string_equal(json_string_value(json_array_get(a, 7)), "NaN");
    json_decref(a);
    ferry_position_clear(&p);
    /* no key: an empty array (callers ask only when has_key) */
    p = decoded("{\"done\":true}");
    a = ferry_position_key_json(&p);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    ferry_position_clear(&p);
}

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *text, *words; /* the input, and what its error must say */
    } cases[] = {
        {"", "not JSON"},
        {"{\"shard\":0", "not JSON"},
        {"{\"shard\":0} trailing", "not JSON"},
        {"[1,2]", "not a JSON object"},
        {"\"done\"", "not a JSON object"},
        {"{\"shard\":-1}", "\"shard\" is not a non-negative integer"},
        {"{\"shard\":\"0\"}", "\"shard\""},
        {"{\"shard\":4294967296}", "\"shard\""},
        {"{\"n\":-5}", "\"n\""},
        {"{\"n\":1.5}", "\"n\""},
        {"{\"k\":true}", "\"k\""},
        {"{\"done\":1}", "\"done\" is not true or false"},
        {"{\"key\":{\"a\":1}}", "\"key\" is not an array"},
        {"{\"key\":[1,[2]]}", "key value 1 is an array or an object"},
        {"{\"snapshot\":5}", "\"snapshot\" is not a string"},
        {"{\"n\":1,\"g\":[1]}", "\"g\" is not a string"},
        {"{\"shard\":0,\"shard\":1}", "\"shard\" appears twice"},
        {"{\"shard\":0,\"cursor\":5}", "unknown member \"cursor\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_refused(cases[i].text, cases[i].words);
    struct ferry_position p;
    struct ferry_error err;
    assert_int_equal(ferry_position_decode(NULL, 0, &p, &err), FERRY_EINVAL);
    assert_false(ferry_position_text_done(NULL));
    assert_false(ferry_position_text_done("{\"done\":\"yes\"}"));
    assert_true(ferry_position_text_done("{\"shard\":3,\"done\":true}"));
}

/* Fail the Nth allocation, N = 0, 1, 2, ... until decode and encode succeed: each failure
 * is a clean FERRY_ENOMEM with nothing left allocated (ASan). */
static void test_allocation_failures(void **state)
{
    (void)state;
    const char *text = "{\"shard\":3,\"key\":[null,true,-9,2.5,\"text\",\"more text\"],\"n\":9,"
                       "\"k\":2,\"g\":\"u:1-3\",\"done\":true,\"object\":\"o\",\"snapshot\":\"s\",\"attempt\":4}";
    bool succeeded = false;
    int failures = 0;
    for (long n = 0; n < 10000 && !succeeded; n++) {
        struct ferry_position p;
        struct ferry_error err;
        ferry_error_clear(&err);
        char *t = NULL;
        ferry_mem_fail_after(n);
        int rc = ferry_position_decode(text, strlen(text), &p, &err);
        if (rc == FERRY_OK) rc = ferry_position_to_text(&p, &t, &err);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            assert_string_equal(t, text);
            succeeded = true;
        } else {
            if (rc != FERRY_ENOMEM) fail_msg("allocation %ld failed: %s", n, err.message);
            assert_non_null(strstr(err.message, "out of memory"));
            assert_null(t);
            failures++;
        }
        ferry_free(t);
        ferry_position_clear(&p);
    }
    assert_true(succeeded);
    assert_true(failures > 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stored_forms),
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_single_real),
        cmocka_unit_test(test_key_json),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
