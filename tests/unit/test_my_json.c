/* tests/unit/test_my_json.c - MySQL 8's binary JSON (my_json.h) as text, on hand-built
 * bytes laid out from the public format description (json_binary.h): scalars (literals,
 * every integer width at its limits, doubles in MySQL's form, strings with escapes and
 * non-ASCII), small and large objects and arrays with inlined and offset values, nesting,
 * opaque DECIMAL / DATETIME / DATE / TIME / other types, and bad bytes refused (offsets
 * outside the container, truncation, depth over 100, unknown types and literals). */
#include <string.h>
#include "unit.h"
#include "connectors/mysql/my_json.h"
#include "ferry/error.h"

static void expect(const uint8_t *p, size_t n, const char *want)
{
    struct ferry_buf b;
    struct ferry_error err;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__my_json_to_text(p, n, &b, &err), FERRY_OK);
    assert_true(ferry_buf_append(&b, "", 1) == FERRY_OK);
    assert_string_equal(b.data, want);
    ferry_buf_release(&b);
}

static void refused(const uint8_t *p, size_t n)
{
    struct ferry_buf b;
    struct ferry_error err;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__my_json_to_text(p, n, &b, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "binary JSON"));
    ferry_buf_release(&b);
}

static void dbl(double d, const char *want)
{
    uint8_t p[9] = {0x0b};
    uint64_t bits;
    memcpy(&bits, &d, 8);
    for (int i = 0; i < 8; i++)
        p[1 + i] = (uint8_t)(bits >> (8 * i));
    expect(p, sizeof p, want);
}

static void test_scalars(void **state)
{
    (void)state;
    expect((const uint8_t *)"", 0, "null");
    expect((const uint8_t[]){0x04, 0x00}, 2, "null");
    expect((const uint8_t[]){0x04, 0x01}, 2, "true");
    expect((const uint8_t[]){0x04, 0x02}, 2, "false");
    expect((const uint8_t[]){0x05, 0x00, 0x80}, 3, "-32768");
    expect((const uint8_t[]){0x06, 0xff, 0xff}, 3, "65535");
    expect((const uint8_t[]){0x07, 0x00, 0x00, 0x00, 0x80}, 5, "-2147483648");
    expect((const uint8_t[]){0x08, 0xff, 0xff, 0xff, 0xff}, 5, "4294967295");
    expect((const uint8_t[]){0x09, 0, 0, 0, 0, 0, 0, 0, 0x80}, 9, "-9223372036854775808");
    expect((const uint8_t[]){0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 9,
           "18446744073709551615");
    dbl(2.5, "2.5");
    dbl(1.0, "1.0");
    dbl(-0.1, "-0.1");
    dbl(1e20, "1e20");
    dbl(1.5e-7, "1.5e-7");
    dbl(1.7976931348623157e308, "1.7976931348623157e308");
    /* a string: length 9, then a " \n \x01 é (2 bytes) and a backslash */
    expect((const uint8_t[]){0x0c, 8, 'a', '"', '\n', 0x01, 0xc3, 0xa9, '\\', '/'}, 10,
           "\"a\\\"\\n\\u0001é\\\\/\"");
    /* a string of 200 bytes: a 2-byte length (0xc8 0x01) */
    uint8_t s[203] = {0x0c, 0xc8, 0x01};
    memset(s + 3, 'x', 200);
    char want[203] = "\"";
    memset(want + 1, 'x', 200);
    want[201] = '"';
    expect(s, sizeof s, want);
}

static void test_containers(void **state)
{
    (void)state;
    /* {"a": 1, "bc": "x"}: count 2, size 23; key entries (18, 1) (19, 2); value entries
     * int16 inlined 1, string at 21; keys; the string */
    static const uint8_t obj[] = {0x00, 2,    0, 23, 0,    18, 0, 1,   0,   19,  0, 2,
                                  0,    0x05, 1, 0,  0x0c, 21, 0, 'a', 'b', 'c', 1, 'x'};
    expect(obj, sizeof obj, "{\"a\": 1, \"bc\": \"x\"}");
    /* large array [1, [true, null], 3.5]: int32 inlined, a small array at 23, a double at 33 */
    uint8_t arr[42] = {0x03,        3, 0,    0,  0,    41, 0, 0,    0,  0x07, 1, 0,
                       0,           0, 0x02, 23, 0,    0,  0, 0x0b, 33, 0,    0, 0,
                       /* 23: */ 2, 0, 10,   0,  0x04, 1,  0, 0x04, 0,  0};
    double d = 3.5;
    uint64_t bits;
    memcpy(&bits, &d, 8);
    for (int i = 0; i < 8; i++)
        arr[34 + i] = (uint8_t)(bits >> (8 * i));
    expect(arr, sizeof arr, "[1, [true, null], 3.5]");
    expect((const uint8_t[]){0x02, 0, 0, 4, 0}, 5, "[]");
    expect((const uint8_t[]){0x00, 0, 0, 4, 0}, 5, "{}");
}

static void put_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_opaque(void **state)
{
    (void)state;
    /* DECIMAL(5,2) 123.45: 2 bytes for 3 integer digits (sign bit flipped), 1 for 2 */
    expect((const uint8_t[]){0x0f, 246, 5, 5, 2, 0x80, 0x7b, 0x2d}, 8, "123.45");
    /* -123.45: every byte inverted */
    expect((const uint8_t[]){0x0f, 246, 5, 5, 2, 0x7f, 0x84, 0xd2}, 8, "-123.45");
    uint64_t ym = 2024 * 13 + 2, ymd = ym << 5 | 29, hms = 13 << 12 | 14 << 6 | 15;
    uint8_t dt[11] = {0x0f, 12, 8};
    put_le(dt + 3, ((ymd << 17 | hms) << 24) | 123456);
    expect(dt, sizeof dt, "\"2024-02-29 13:14:15.123456\"");
    dt[1] = 7; /* TIMESTAMP: the same form */
    expect(dt, sizeof dt, "\"2024-02-29 13:14:15.123456\"");
    put_le(dt + 3, (ymd << 17) << 24);
    dt[1] = 10;
    expect(dt, sizeof dt, "\"2024-02-29\"");
    uint64_t t = (uint64_t)(838 << 12 | 59 << 6 | 59) << 24 | 500000;
    put_le(dt + 3, (uint64_t)0 - t);
    dt[1] = 11;
    expect(dt, sizeof dt, "\"-838:59:59.500000\"");
    expect((const uint8_t[]){0x0f, 15, 2, 'a', 'b'}, 5, "\"base64:type15:YWI=\"");
}

static void test_bad(void **state)
{
    (void)state;
    refused((const uint8_t[]){0x04, 0x03}, 2);                            /* literal 3 */
    refused((const uint8_t[]){0x0e, 0x00}, 2);                            /* no type 14 */
    refused((const uint8_t[]){0x09, 1, 2, 3}, 4);                         /* int64 cut short */
    refused((const uint8_t[]){0x0c, 5, 'a'}, 3);                          /* string past the end */
    refused((const uint8_t[]){0x0c, 0x80, 0x80, 0x80, 0x80, 0x80, 1}, 7); /* length */
    refused((const uint8_t[]){0x02, 1, 0, 9, 0, 0x0c, 40, 0, 1}, 9);      /* offset outside */
    refused((const uint8_t[]){0x02, 1, 0, 90, 0, 0x04, 1, 0}, 8);         /* size too large */
    refused((const uint8_t[]){0x00, 1, 0, 11, 0, 200, 0, 1, 0, 0x04, 1, 0}, 12); /* key */
    refused((const uint8_t[]){0x0f, 246, 1, 5}, 4); /* decimal without bytes */
    /* nested arrays [[[...[]...]]]: 101 levels decode, 102 are refused for their depth */
    for (int levels = 101; levels <= 102; levels++) {
        uint8_t deep[102 * 7 + 5];
        size_t n = 0;
        deep[n++] = 0x02;
        for (int i = 0; i < levels - 1; i++) {
            size_t rest = (size_t)(levels - 1 - i) * 7 + 4;
            uint8_t e[7] = {1, 0, (uint8_t)rest, (uint8_t)(rest >> 8), 0x02, 7, 0};
            memcpy(deep + n, e, 7);
            n += 7;
        }
        uint8_t last[4] = {0, 0, 4, 0};
        memcpy(deep + n, last, 4);
        n += 4;
        struct ferry_buf b;
        struct ferry_error err;
        ferry_buf_init(&b, 0);
        int rc = ferry__my_json_to_text(deep, n, &b, &err);
        if (levels == 101) {
            assert_int_equal(rc, FERRY_OK);
            assert_int_equal(b.len, 2 * 101);
        } else {
            assert_int_equal(rc, FERRY_EINVAL);
            assert_non_null(strstr(err.message, "nesting depth"));
        }
        ferry_buf_release(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_containers),
        cmocka_unit_test(test_opaque),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
