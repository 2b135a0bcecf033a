/* tests/unit/test_secretbox.c - store/secretbox.c and store/secrets.c (issue 19): a sealed
 * value opens with its key and name only; any altered byte, another key or another name is
 * refused with a message naming the secret and never the value; keys parse from hex and
 * base64 and nothing else; the store keeps sealed text only and rotate-key is all or
 * nothing (on SQLite, and on PostgreSQL with FERRY_TEST_STORE: e2e/store_pg). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "state_fixture.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "store/secrets.h"

#define HEX1 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define HEX2 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
/* base64 of the 32 bytes 0x00..0x1f */
#define B64 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

static void key(const char *text, uint8_t k[32])
{
    struct ferry_error e;
    assert_int_equal(ferry_secretbox_key_parse(text, "test", k, &e), FERRY_OK);
}

static void keys_parse(void **state)
{
    (void)state;
    uint8_t k[32];
    key(HEX1, k);
    assert_int_equal(k[0], 0x00);
    assert_int_equal(k[31], 0xff);
    key(B64, k);
    for (int i = 0; i < 32; i++)
        assert_int_equal(k[i], i);
    struct ferry_error e;
    static const char *const bad[] = {"", "abc", HEX1 "00", "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
                                      "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(ferry_secretbox_key_parse(bad[i], "--secret-key", k, &e), FERRY_ECONFIG);
        assert_non_null(strstr(e.message, "--secret-key"));
        assert_non_null(strstr(e.message, "32 bytes"));
    }
    assert_int_equal(ferry_secretbox_key_load("env:FERRY_TEST_NO_SUCH_KEY_VAR", "--secret-key", k,
                                              &e),
                     FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "FERRY_TEST_NO_SUCH_KEY_VAR"));
}

static void seal_open_tamper(void **state)
{
    (void)state;
    uint8_t k1[32], k2[32];
    key(HEX1, k1);
    key(HEX2, k2);
    const char *plain = "p@ss w0rd\twith=odd;chars";
    char *a = NULL, *b = NULL, *out = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_secretbox_seal(k1, "db", plain, strlen(plain), &a, &e), FERRY_OK);
    assert_int_equal(ferry_secretbox_seal(k1, "db", plain, strlen(plain), &b, &e), FERRY_OK);
    assert_null(strstr(a, plain));
    assert_string_not_equal(a, b); /* a random nonce per value */
    assert_int_equal(ferry_secretbox_open(k1, "db", a, &out, &e), FERRY_OK);
    assert_string_equal(out, plain);
    ferry_secret_free(out);
    /* another key, another name */
    assert_int_equal(ferry_secretbox_open(k2, "db", a, &out, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "secret db"));
    assert_null(strstr(e.message, plain));
    assert_int_equal(ferry_secretbox_open(k1, "other", a, &out, &e), FERRY_ECONFIG);
    /* every hex digit altered in turn is refused (nonce, ciphertext, tag) */
    size_t n = strlen(a);
    for (size_t i = 3; i < n; i++) {
        char saved = a[i];
        a[i] = saved == '0' ? '1' : '0';
        out = NULL;
        assert_int_equal(ferry_secretbox_open(k1, "db", a, &out, &e), FERRY_ECONFIG);
        assert_null(out);
        a[i] = saved;
    }
    /* truncated, wrong prefix */
    a[n - 2] = '\0';
    assert_int_equal(ferry_secretbox_open(k1, "db", a, &out, &e), FERRY_ECONFIG);
    assert_int_equal(ferry_secretbox_open(k1, "db", "v2:00", &out, &e), FERRY_ECONFIG);
    ferry_free(a);
    ferry_free(b);
}

static void store_round_trip_and_rotate(void **state)
{
    (void)state;
    struct state_dir sd;
    struct ferry_store *st = NULL;
    struct ferry_error e;
    assert_int_equal(state_store_open(&sd, &st), 0);
    uint8_t k1[32], k2[32];
    key(HEX1, k1);
    key(HEX2, k2);
    assert_int_equal(ferry_secrets_put(st, k1, "a", "alpha-value", 11, &e), FERRY_OK);
    assert_int_equal(ferry_secrets_put(st, k1, "b.c-d_e", "beta-value", 10, &e), FERRY_OK);
    assert_int_equal(ferry_secrets_put(st, k1, "bad/name", "x", 1, &e), FERRY_EINVAL);
    assert_int_equal(ferry_secrets_put(st, k1, "empty", "", 0, &e), FERRY_EINVAL);
    struct ferry_secret_info *v = NULL;
    int n = 0;
    assert_int_equal(ferry_store_secret_list(st, &v, &n, &e), FERRY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].name, "a");
    assert_true(v[0].created_us > 0 && v[0].updated_us >= v[0].created_us);
    ferry_free(v);
    char *out = NULL;
    assert_int_equal(ferry_secrets_reveal(st, k1, "a", &out, &e), FERRY_OK);
    assert_string_equal(out, "alpha-value");
    ferry_secret_free(out);
    assert_int_equal(ferry_secrets_reveal(st, k1, "missing", &out, &e), FERRY_ENOTFOUND);
    assert_non_null(strstr(e.message, "missing"));
    /* a wrong old key stops the rotation and changes nothing */
    int count = -1;
    assert_int_equal(ferry_secrets_rotate(st, k2, k1, &count, &e), FERRY_ECONFIG);
    assert_int_equal(count, 0);
    assert_int_equal(ferry_secrets_reveal(st, k1, "b.c-d_e", &out, &e), FERRY_OK);
    ferry_secret_free(out);
    assert_int_equal(ferry_secrets_rotate(st, k1, k2, &count, &e), FERRY_OK);
    assert_int_equal(count, 2);
    assert_int_equal(ferry_secrets_reveal(st, k1, "a", &out, &e), FERRY_ECONFIG);
    assert_int_equal(ferry_secrets_reveal(st, k2, "b.c-d_e", &out, &e), FERRY_OK);
    assert_string_equal(out, "beta-value");
    ferry_secret_free(out);
    assert_int_equal(ferry_store_secret_delete(st, "a", &e), FERRY_OK);
    assert_int_equal(ferry_store_secret_delete(st, "a", &e), FERRY_ENOTFOUND);
    state_store_close(&sd, st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(keys_parse),
                                       cmocka_unit_test(seal_open_tamper),
                                       cmocka_unit_test(store_round_trip_and_rotate)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
