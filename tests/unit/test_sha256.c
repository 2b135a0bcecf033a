/* tests/unit/test_sha256.c - SHA-256 against FIPS 180-4 examples, HMAC-SHA-256 against
 * RFC 4231 test cases 1-4, 6 and 7. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "ferry/core.h"

static void to_hex(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha(const void *p, size_t n, const char *want)
{
    char hex[65];
    ferry_sha256_hex(p, n, hex);
    assert_string_equal(hex, want);
    /* The same message fed in uneven pieces gives the same digest. */
    struct ferry_sha256 s;
    uint8_t d[32];
    ferry_sha256_init(&s);
    const uint8_t *b = p;
    size_t at = 0, step = 1;
    while (at < n) {
        size_t k = step < n - at ? step : n - at;
        ferry_sha256_update(&s, b + at, k);
        at += k;
        step = step * 5 % 131 + 1;
    }
    ferry_sha256_final(&s, d);
    to_hex(d, hex);
    assert_string_equal(hex, want);
}

static void test_fips_vectors(void **state)
{
    (void)state;
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(m448, strlen(m448),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check_sha(m896, strlen(m896),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void **state)
{
    (void)state;
    size_t n = 1000000;
    char *m = malloc(n);
    assert_non_null(m);
    memset(m, 'a', n);
    check_sha(m, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}

/* Lengths around the 55/56/64-byte padding edges agree between one-shot and bytewise. */
static void test_padding_edges(void **state)
{
    (void)state;
    uint8_t msg[130];
    for (size_t i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7 + 1);
    char prev[65] = "";
    for (size_t n = 50; n <= sizeof msg; n++) {
        char one[65], bytewise[65];
        ferry_sha256_hex(msg, n, one);
        struct ferry_sha256 s;
        uint8_t d[32];
        ferry_sha256_init(&s);
        for (size_t i = 0; i < n; i++) ferry_sha256_update(&s, msg + i, 1);
        ferry_sha256_final(&s, d);
        to_hex(d, bytewise);
        assert_string_equal(one, bytewise);
        assert_string_not_equal(one, prev);
        memcpy(prev, one, sizeof prev);
    }
}

static void check_hmac(const void *key, size_t klen, const void *msg, size_t n, const char *want)
{
    uint8_t d[32];
    char hex[65];
    ferry_hmac_sha256(key, klen, msg, n, d);
    to_hex(d, hex);
    assert_string_equal(hex, want);
}

static void test_rfc4231(void **state)
{
    (void)state;
    uint8_t key[131], data[50];
    /* 1 */
    memset(key, 0x0b, 20);
    check_hmac(key, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* 2 */
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* 3 */
    memset(key, 0xaa, 20);
    memset(data, 0xdd, 50);
    check_hmac(key, 20, data, 50,
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    /* 4 */
    for (int i = 0; i < 25; i++) key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, 50);
    check_hmac(key, 25, data, 50,
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    /* 6: key longer than the block is hashed first */
    memset(key, 0xaa, 131);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(key, 131, m6, strlen(m6),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    /* 7 */
    const char *m7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the "
                     "HMAC algorithm.";
    check_hmac(key, 131, m7, strlen(m7),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_vectors),
        cmocka_unit_test(test_million_a),
        cmocka_unit_test(test_padding_edges),
        cmocka_unit_test(test_rfc4231),
    };
    return cmocka_run_group_tests_name("sha256", tests, NULL, NULL);
}
