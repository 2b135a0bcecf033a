/* The secrets store (issue 19): named values sealed with secretbox.h in the state store's
 * "secrets" table (migration 11), read back only to resolve `secret:NAME` references.
 *
 * Names: 1 to 127 of letters, digits, '_', '-', '.'. Values: at most 64 KiB, no NUL.
 * ferry_secrets_reveal() is the one way to a plain value; its errors name the secret,
 * never the value or the key. ferry_secrets_rotate() reseals every secret under a new key
 * in one transaction: all or nothing (a secret the old key cannot open stops it).
 *
 * ferry_secrets_hook_install() makes ferry_secret_resolve() answer `secret:NAME` from the
 * store at state_url, with the key read once, now: from the sealed memfd named by
 * FERRY_STORE_KEY_FD (how ferry serve hands its --secret-key to workers, see
 * ferry_secrets_key_handoff(); read, closed and the variable dropped), else from
 * FERRY_STORE_KEY (hex or base64 of 32 bytes). Call it before any thread starts. Without a
 * key, or with a malformed one, secret: references fail naming the variable (other work
 * goes on).
 *
 * ferry_secrets_key_handoff() (ferry serve, before any thread starts): the key's hex in a
 * sealed memfd inherited by the processes it starts, FERRY_STORE_KEY_FD set to its number
 * and FERRY_STORE_KEY removed from the environment. */
#ifndef FERRY_STORE_SECRETS_H
#define FERRY_STORE_SECRETS_H

#include <stddef.h>
#include <stdint.h>

#include "store/secretbox.h"
#include "store/store.h"

#define FERRY_SECRET_VALUE_MAX (64 * 1024)

int ferry_secrets_name_check(const char *name, struct ferry_error *err);
int ferry_secrets_put(struct ferry_store *st, const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                      const char *name, const char *value, size_t len, struct ferry_error *err);
int ferry_secrets_reveal(struct ferry_store *st, const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                         const char *name, char **plain, struct ferry_error *err);
int ferry_secrets_rotate(struct ferry_store *st, const uint8_t old_key[FERRY_SECRETBOX_KEY_BYTES],
                         const uint8_t new_key[FERRY_SECRETBOX_KEY_BYTES], int *count,
                         struct ferry_error *err);
int ferry_secrets_hook_install(const char *state_url, struct ferry_error *err);
int ferry_secrets_key_handoff(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                              struct ferry_error *err);

#endif
