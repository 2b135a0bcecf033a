/* tests/unit/test_my_charset.c - binlog bytes of non-UTF-8 character sets as UTF-8
 * (my_charset.h) on hand-built bytes: ucs2, utf16 (both byte orders) and utf32 by their
 * definitions (surrogate pairs, U+10FFFF, lone surrogates, odd lengths refused at their
 * offset); table sets filled as my_source.c fills them from the server (one character kept,
 * '?' and two characters left undefined): a gbk-like two-byte set, ujis's three-byte 0x8f
 * sequences, gb18030's four-byte BMP table and its supplementary planes by arithmetic. */
#include <string.h>
#include "unit.h"
#include "connectors/mysql/my_charset.h"

/* p[0..n) converted: want (NUL-terminated UTF-8), or refused at byte bad (want NULL). */
static void conv(const struct ferry_my_cs *cs, const char *p, size_t n, const char *want,
                 size_t bad)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    size_t at = 999;
    int rc = ferry__my_cs_to_utf8(cs, (const uint8_t *)p, n, &b, &at);
    if (want == NULL) {
        assert_int_equal(rc, FERRY_EINVAL);
        assert_int_equal(at, bad);
    } else {
        assert_int_equal(rc, FERRY_OK);
        assert_int_equal(b.len, strlen(want));
        assert_memory_equal(b.data, want, b.len);
    }
    ferry_buf_release(&b);
}

static void set(struct ferry_my_cs *cs, enum ferry_my_cs_part part, uint32_t i, const char *u)
{
    ferry__my_cs_set(cs, part, i, (const uint8_t *)u, strlen(u));
}

static void test_unicode(void **state)
{
    (void)state;
    struct ferry_my_cs cs;
    assert_int_equal(ferry__my_cs_kind("utf16"), FERRY_MY_CS_UTF16);
    assert_int_equal(ferry__my_cs_init(&cs, "utf16", FERRY_MY_CS_UTF16, 4), FERRY_OK);
    assert_false(ferry__my_cs_needs(&cs, FERRY_MY_CS_ONE));
    conv(&cs, "\x00" "A\x00\xe9\xd8\x3d\xde\x00\xdb\xff\xdf\xff", 12,
         "A\xc3\xa9\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 0);
    conv(&cs, "\x00" "A\xd8\x3d\x00" "A", 6, NULL, 2);    /* high surrogate, no low one */
    conv(&cs, "\x00" "A\xdc\x00", 4, NULL, 2);            /* lone low surrogate */
    conv(&cs, "\x00" "A\x00", 3, NULL, 2);                /* odd length */
    cs.kind = ferry__my_cs_kind("utf16le");
    conv(&cs, "A\x00\xe9\x00\x3d\xd8\x00\xde", 8, "A\xc3\xa9\xf0\x9f\x98\x80", 0);
    conv(&cs, "\x3d\xd8", 2, NULL, 0);
    cs.kind = ferry__my_cs_kind("ucs2");
    conv(&cs, "\x00" "A\xff\xff\x20\xac", 6, "A\xef\xbf\xbf\xe2\x82\xac", 0);
    conv(&cs, "\x00" "A\xd8\x3d\xde\x00", 6, NULL, 2); /* ucs2 has no surrogate pairs */
    cs.kind = ferry__my_cs_kind("utf32");
    conv(&cs, "\x00\x00\x00" "A\x00\x01\xf6\x00\x00\x10\xff\xff", 12,
         "A\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 0);
    conv(&cs, "\x00\x00\x00" "A\x00\x11\x00\x00", 8, NULL, 4);
    conv(&cs, "\x00\x00\xd8\x00", 4, NULL, 0);
    conv(&cs, "\x00\x00\x00", 3, NULL, 0);
    conv(&cs, "", 0, "", 0);
    ferry__my_cs_release(&cs);
}

static void test_single_byte(void **state)
{
    (void)state;
    struct ferry_my_cs cs;
    assert_int_equal(ferry__my_cs_kind("greek"), FERRY_MY_CS_TABLE);
    assert_int_equal(ferry__my_cs_init(&cs, "greek", FERRY_MY_CS_TABLE, 1), FERRY_OK);
    assert_true(ferry__my_cs_needs(&cs, FERRY_MY_CS_ONE));
    assert_false(ferry__my_cs_needs(&cs, FERRY_MY_CS_TWO));
    set(&cs, FERRY_MY_CS_ONE, 'A', "A");
    set(&cs, FERRY_MY_CS_ONE, '?', "?");         /* '?' itself is defined */
    set(&cs, FERRY_MY_CS_ONE, 0xc1, "\xce\x91"); /* greek capital alpha */
    set(&cs, FERRY_MY_CS_ONE, 0xae, "?");        /* undefined: the server's '?' */
    set(&cs, FERRY_MY_CS_ONE, 0xaf, "ab");       /* two characters: undefined */
    set(&cs, FERRY_MY_CS_ONE, 0xb0, "\xce");     /* malformed: undefined */
    set(&cs, FERRY_MY_CS_ONE, 0, "");            /* NULL or empty: undefined */
    conv(&cs, "A?\xc1", 3, "A?\xce\x91", 0);
    conv(&cs, "AA\xae", 3, NULL, 2);
    conv(&cs, "\xaf", 1, NULL, 0);
    conv(&cs, "\xb0", 1, NULL, 0);
    conv(&cs, "A\x00", 2, NULL, 1);
    conv(&cs, "B", 1, NULL, 0); /* never set */
    ferry__my_cs_release(&cs);
}

static void test_two_and_three(void **state)
{
    (void)state;
    struct ferry_my_cs cs;
    assert_int_equal(ferry__my_cs_init(&cs, "gbk", FERRY_MY_CS_TABLE, 2), FERRY_OK);
    assert_true(ferry__my_cs_needs(&cs, FERRY_MY_CS_TWO));
    assert_false(ferry__my_cs_needs(&cs, FERRY_MY_CS_THREE));
    assert_int_equal(ferry__my_cs_count(FERRY_MY_CS_TWO), 32768);
    for (uint32_t i = 0; i < 128; i++) {
        char c[2] = {(char)i, 0};
        ferry__my_cs_set(&cs, FERRY_MY_CS_ONE, i, (const uint8_t *)c, 1);
    }
    set(&cs, FERRY_MY_CS_TWO, (0xc4 - 0x80) * 256 + 0xe3, "\xe4\xbd\xa0"); /* U+4F60 */
    set(&cs, FERRY_MY_CS_TWO, (0xba - 0x80) * 256 + 0xc3, "\xe5\xa5\xbd"); /* U+597D */
    set(&cs, FERRY_MY_CS_TWO, (0x81 - 0x80) * 256 + 0x20, "? ");           /* undefined */
    set(&cs, FERRY_MY_CS_TWO, (0x81 - 0x80) * 256 + 0x40, "?");
    conv(&cs, "A\xc4\xe3\xba\xc3" "B", 6, "A\xe4\xbd\xa0\xe5\xa5\xbd" "B", 0);
    conv(&cs, "A\xc4", 2, NULL, 1);        /* a lead byte at the end */
    conv(&cs, "AB\x81\x20", 4, NULL, 2);   /* a pair the server prints as "? " */
    conv(&cs, "\x81\x40", 2, NULL, 0);
    conv(&cs, "\xc4\xe3\xc4\xe4", 4, NULL, 2);
    ferry__my_cs_release(&cs);

    assert_int_equal(ferry__my_cs_init(&cs, "ujis", FERRY_MY_CS_TABLE, 3), FERRY_OK);
    assert_true(ferry__my_cs_needs(&cs, FERRY_MY_CS_THREE));
    set(&cs, FERRY_MY_CS_ONE, 'x', "x");
    set(&cs, FERRY_MY_CS_TWO, (0x8e - 0x80) * 256 + 0xb1, "\xef\xbd\xb1"); /* half-width A */
    set(&cs, FERRY_MY_CS_THREE, (0xb0 - 0xa1) * 94 + 0, "\xe4\xb8\x82");   /* 8f b0 a1 */
    conv(&cs, "x\x8e\xb1\x8f\xb0\xa1x", 7, "x\xef\xbd\xb1\xe4\xb8\x82x", 0);
    conv(&cs, "x\x8f\xb0\xa2", 4, NULL, 1); /* undefined there */
    conv(&cs, "x\x8f\xb0", 3, NULL, 1);     /* cut short */
    conv(&cs, "\x8f\x20\xa1", 3, NULL, 0);  /* second byte outside 0xa1..0xfe */
    ferry__my_cs_release(&cs);
    ferry__my_cs_release(NULL);
}

static void test_gb18030(void **state)
{
    (void)state;
    struct ferry_my_cs cs;
    assert_int_equal(ferry__my_cs_init(&cs, "gb18030", FERRY_MY_CS_TABLE, 4), FERRY_OK);
    assert_true(ferry__my_cs_needs(&cs, FERRY_MY_CS_FOUR));
    assert_int_equal(ferry__my_cs_count(FERRY_MY_CS_FOUR), 39420);
    set(&cs, FERRY_MY_CS_ONE, 'A', "A");
    set(&cs, FERRY_MY_CS_TWO, (0xc4 - 0x80) * 256 + 0xe3, "\xe4\xbd\xa0");
    set(&cs, FERRY_MY_CS_FOUR, 0, "\xc2\x80");          /* 81 30 81 30: U+0080 */
    set(&cs, FERRY_MY_CS_FOUR, 39419, "\xef\xbf\xbf");  /* 84 31 a4 39: U+FFFF */
    conv(&cs, "A\x81\x30\x81\x30\xc4\xe3\x84\x31\xa4\x39", 11,
         "A\xc2\x80\xe4\xbd\xa0\xef\xbf\xbf", 0);
    /* supplementary planes: 90 30 81 30 = U+10000, 94 39 fc 36 = U+1F600, e3 32 9a 35 = U+10FFFF */
    conv(&cs, "\x90\x30\x81\x30\x94\x39\xfc\x36\xe3\x32\x9a\x35", 12,
         "\xf0\x90\x80\x80\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 0);
    conv(&cs, "A\xe3\x32\x9a\x36", 5, NULL, 1);       /* past U+10FFFF */
    conv(&cs, "A\x84\x31\xa5\x30", 5, NULL, 1);       /* between the BMP and U+10000 */
    conv(&cs, "\x81\x30\x81\x31", 4, NULL, 0);        /* never set */
    conv(&cs, "A\x81\x30\x81", 4, NULL, 1);           /* cut short */
    conv(&cs, "\x81\x30\x20\x30", 4, NULL, 0);        /* third byte out of range */
    ferry__my_cs_release(&cs);
}

static void test_put_utf8(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    uint32_t cps[] = {0, 0x7f, 0x80, 0x7ff, 0x800, 0xffff, 0x10000, 0x10ffff};
    for (size_t i = 0; i < sizeof cps / sizeof *cps; i++)
        ferry__my_put_utf8(&b, cps[i]);
    const char want[] = "\x00\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80"
                        "\xf4\x8f\xbf\xbf";
    assert_int_equal(b.len, sizeof want - 1);
    assert_memory_equal(b.data, want, b.len);
    ferry_buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_single_byte),
        cmocka_unit_test(test_two_and_three),
        cmocka_unit_test(test_gb18030),
        cmocka_unit_test(test_put_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
