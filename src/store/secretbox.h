/* Secret values at rest (issue 19): sealed with libsodium's XChaCha20-Poly1305 (IETF AEAD)
 * under a 32-byte key, with the secret's name as associated data (a sealed value copied
 * under another name does not open). A sealed value is text: "v1:" then the hex of a
 * random 24-byte nonce followed by the ciphertext and its 16-byte tag.
 *
 * Keys: ferry_secretbox_key_load() resolves a reference (env:NAME or file:PATH, through
 * ferry_secret_resolve) and ferry_secretbox_key_parse() decodes its text: 64 hex digits or
 * the standard base64 of 32 bytes (44 characters, one '=' pad). Errors name the key's
 * source, never its text; errors of open name the secret, never a value. */
#ifndef FERRY_STORE_SECRETBOX_H
#define FERRY_STORE_SECRETBOX_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

#define FERRY_SECRETBOX_KEY_BYTES 32

/* The key's text for `ferry run`, `ferry secrets` and workers started by hand. */
#define FERRY_SECRETBOX_KEY_ENV "FERRY_STORE_KEY"
/* The descriptor (a sealed memfd) through which ferry serve hands the key to its workers. */
#define FERRY_SECRETBOX_KEY_FD_ENV "FERRY_STORE_KEY_FD"

int ferry_secretbox_key_parse(const char *text, const char *what,
                              uint8_t key[FERRY_SECRETBOX_KEY_BYTES], struct ferry_error *err);
int ferry_secretbox_key_load(const char *ref, const char *what,
                             uint8_t key[FERRY_SECRETBOX_KEY_BYTES], struct ferry_error *err);
/* The key as 64 lowercase hex digits (hex must hold 65 bytes). */
void ferry_secretbox_key_hex(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], char hex[65]);

/* *out: a new sealed text (ferry_free). */
int ferry_secretbox_seal(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], const char *name,
                         const char *plain, size_t len, char **out, struct ferry_error *err);
/* *plain: a new NUL-terminated string (ferry_secret_free wipes it). A wrong key or an
 * altered value is FERRY_ECONFIG naming the secret. */
int ferry_secretbox_open(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES], const char *name,
                         const char *sealed, char **plain, struct ferry_error *err);

#endif
