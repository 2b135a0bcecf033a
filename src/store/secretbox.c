/* Sealing and opening secret values (contract in secretbox.h). */
#include "store/secretbox.h"

#include <sodium.h>
#include <string.h>

#include "ferry/config.h"
#include "ferry/core.h"

#define NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_BYTES crypto_aead_xchacha20poly1305_ietf_ABYTES
#define PREFIX "v1:"

static int sodium_ready(struct ferry_error *err)
{
    if (sodium_init() < 0)
        return ferry_error_set(err, FERRY_EIO, "secrets", "libsodium failed to initialise");
    return FERRY_OK;
}

int ferry_secretbox_key_parse(const char *text, const char *what,
                              uint8_t key[FERRY_SECRETBOX_KEY_BYTES], struct ferry_error *err)
{
    int rc = sodium_ready(err);
    if (rc) return rc;
    size_t len = strlen(text), got = 0;
    const char *end = NULL;
    if (len == 2 * FERRY_SECRETBOX_KEY_BYTES &&
        sodium_hex2bin(key, FERRY_SECRETBOX_KEY_BYTES, text, len, NULL, &got, &end) == 0 &&
        got == FERRY_SECRETBOX_KEY_BYTES && end == text + len)
        return FERRY_OK;
    if (len == sodium_base64_ENCODED_LEN(FERRY_SECRETBOX_KEY_BYTES,
                                         sodium_base64_VARIANT_ORIGINAL) - 1 &&
        sodium_base642bin(key, FERRY_SECRETBOX_KEY_BYTES, text, len, NULL, &got, &end,
                          sodium_base64_VARIANT_ORIGINAL) == 0 &&
        got == FERRY_SECRETBOX_KEY_BYTES && end == text + len)
        return FERRY_OK;
    sodium_memzero(key, FERRY_SECRETBOX_KEY_BYTES);
    return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                           "%s: the secret key must be 32 bytes written as 64 hex digits or 44 "
                           "base64 characters (got %zu characters)",
                           what, len);
}

int ferry_secretbox_key_load(const char *ref, const char *what,
                             uint8_t key[FERRY_SECRETBOX_KEY_BYTES], struct ferry_error *err)
{
    if (ref == NULL || ref[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                               "%s: no secret key (pass --secret-key env:NAME or file:PATH)", what);
    char *text = NULL;
    int rc = ferry_secret_resolve(ref, what, &text, err);
    if (rc) return rc;
    rc = ferry_secretbox_key_parse(text, what, key, err);
    ferry_secret_free(text);
    return rc;
}

void ferry_secretbox_key_hex(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], char hex[65])
{
    sodium_bin2hex(hex, 65, key, FERRY_SECRETBOX_KEY_BYTES);
}

int ferry_secretbox_seal(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], const char *name,
                         const char *plain, size_t len, char **out, struct ferry_error *err)
{
    int rc = sodium_ready(err);
    if (rc) return rc;
    size_t n = NONCE_BYTES + len + TAG_BYTES;
    uint8_t *buf = ferry_malloc(n);
    char *text = ferry_malloc(sizeof PREFIX + 2 * n);
    if (buf == NULL || text == NULL) {
        ferry_free(buf);
        ferry_free(text);
        return ferry_error_set(err, FERRY_ENOMEM, "secrets", "out of memory sealing %s", name);
    }
    randombytes_buf(buf, NONCE_BYTES);
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(buf + NONCE_BYTES, &clen, (const uint8_t *)plain,
                                               len, (const uint8_t *)name, strlen(name), NULL,
                                               buf, key);
    memcpy(text, PREFIX, sizeof PREFIX - 1);
    sodium_bin2hex(text + sizeof PREFIX - 1, 2 * n + 1, buf, n);
    ferry_free(buf);
    *out = text;
    return FERRY_OK;
}

int ferry_secretbox_open(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], const char *name,
                         const char *sealed, char **plain, struct ferry_error *err)
{
    int rc = sodium_ready(err);
    if (rc) return rc;
    size_t hl = strlen(sealed);
    if (strncmp(sealed, PREFIX, sizeof PREFIX - 1) != 0 || (hl - (sizeof PREFIX - 1)) % 2 ||
        (hl - (sizeof PREFIX - 1)) / 2 < NONCE_BYTES + TAG_BYTES)
        return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                               "secret %s: the stored value is not in a format this ferry knows",
                               name);
    size_t n = (hl - (sizeof PREFIX - 1)) / 2, got = 0;
    uint8_t *buf = ferry_malloc(n);
    char *text = ferry_malloc(n - NONCE_BYTES - TAG_BYTES + 1);
    if (buf == NULL || text == NULL) {
        ferry_free(buf);
        ferry_free(text);
        return ferry_error_set(err, FERRY_ENOMEM, "secrets", "out of memory opening %s", name);
    }
    unsigned long long plen = 0;
    bool ok = sodium_hex2bin(buf, n, sealed + sizeof PREFIX - 1, hl - (sizeof PREFIX - 1), NULL,
                             &got, NULL) == 0 &&
              got == n &&
              crypto_aead_xchacha20poly1305_ietf_decrypt(
                  (uint8_t *)text, &plen, NULL, buf + NONCE_BYTES, n - NONCE_BYTES,
                  (const uint8_t *)name, strlen(name), buf, key) == 0;
    ferry_free(buf);
    if (!ok) {
        ferry_free(text);
        return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                               "secret %s cannot be decrypted: wrong secret key, or the stored "
                               "value was altered",
                               name);
    }
    text[plen] = '\0';
    *plain = text;
    return FERRY_OK;
}
