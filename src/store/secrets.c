/* The secrets store over the state store (contract in secrets.h). */
#include "store/secrets.h"

#include <sodium.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/config.h"
#include "ferry/core.h"

int ferry_secrets_name_check(const char *name, struct ferry_error *err)
{
    size_t n = name ? strlen(name) : 0;
    bool ok = n > 0 && n < sizeof ((struct ferry_secret_info *)0)->name;
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    }
    if (!ok)
        return ferry_error_set(err, FERRY_EINVAL, "secrets",
                               "a secret name is 1 to 127 letters, digits, '_', '-' or '.'");
    return FERRY_OK;
}

int ferry_secrets_put(struct ferry_store *st, const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                      const char *name, const char *value, size_t len, struct ferry_error *err)
{
    int rc = ferry_secrets_name_check(name, err);
    if (rc) return rc;
    if (len == 0 || len > FERRY_SECRET_VALUE_MAX || memchr(value, '\0', len))
        return ferry_error_set(err, FERRY_EINVAL, "secrets",
                               "secret %s: the value must be 1 byte to 64 KiB without NUL bytes",
                               name);
    char *sealed = NULL;
    rc = ferry_secretbox_seal(key, name, value, len, &sealed, err);
    if (rc == FERRY_OK) rc = ferry_store_secret_put(st, name, sealed, err);
    ferry_free(sealed);
    return rc;
}

int ferry_secrets_reveal(struct ferry_store *st, const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                         const char *name, char **plain, struct ferry_error *err)
{
    int rc = ferry_secrets_name_check(name, err);
    if (rc) return rc;
    char *sealed = NULL;
    bool found = false;
    rc = ferry_store_secret_get(st, name, &sealed, &found, err);
    if (rc == FERRY_OK && !found)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "secrets",
                             "secret %s is not in the secrets store of %s", name,
                             ferry_store_path(st));
    if (rc == FERRY_OK) rc = ferry_secretbox_open(key, name, sealed, plain, err);
    ferry_free(sealed);
    return rc;
}

static int reseal_all(struct ferry_store *st, const uint8_t *old_key, const uint8_t *new_key,
                      int *count, struct ferry_error *err)
{
    struct ferry_secret_info *v = NULL;
    int n = 0;
    int rc = ferry_store_secret_list(st, &v, &n, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        char *plain = NULL;
        rc = ferry_secrets_reveal(st, old_key, v[i].name, &plain, err);
        if (rc == FERRY_OK) {
            char *sealed = NULL;
            rc = ferry_secretbox_seal(new_key, v[i].name, plain, strlen(plain), &sealed, err);
            if (rc == FERRY_OK) rc = ferry_store_secret_put(st, v[i].name, sealed, err);
            ferry_free(sealed);
            ferry_secret_free(plain);
        }
    }
    ferry_free(v);
    if (rc == FERRY_OK) *count = n;
    return rc;
}

int ferry_secrets_rotate(struct ferry_store *st, const uint8_t old_key[FERRY_SECRETBOX_KEY_BYTES],
                         const uint8_t new_key[FERRY_SECRETBOX_KEY_BYTES], int *count,
                         struct ferry_error *err)
{
    *count = 0;
    int rc = ferry_store_begin(st, err);
    if (rc) return rc;
    rc = reseal_all(st, old_key, new_key, count, err);
    if (rc == FERRY_OK) rc = ferry_store_commit(st, err);
    if (rc != FERRY_OK) {
        ferry_store_rollback(st);
        *count = 0;
    }
    return rc;
}

/* ---- secret:NAME for ferry_secret_resolve ---- */

static char *g_state_url;
static uint8_t g_key[FERRY_SECRETBOX_KEY_BYTES];
static bool g_have_key;
static struct ferry_error g_key_err; /* a malformed FERRY_STORE_KEY, told at first use */

static int resolve_from_store(const char *name, const char *what, char **out,
                              struct ferry_error *err)
{
    if (g_key_err.code != FERRY_OK) {
        if (err) *err = g_key_err;
        return g_key_err.code;
    }
    if (!g_have_key)
        return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                               "%s: secret:%s needs the secret key in " FERRY_SECRETBOX_KEY_ENV
                               " (ferry serve --secret-key sets it for its workers)",
                               what, name);
    struct ferry_store *st = NULL;
    int rc = ferry_store_open(g_state_url, &st, err);
    if (rc) return rc;
    rc = ferry_secrets_reveal(st, g_key, name, out, err);
    ferry_store_close(st);
    if (rc && err) {
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%s: %s", what, err->message);
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return rc;
}

/* ---- the key's way from ferry serve to its workers ----
 * Not the environment (which every child of a worker inherits and which tools show): a
 * sealed memfd holding the key's hex, left open across exec, its number in
 * FERRY_STORE_KEY_FD. A worker reads it once at start, closes it and drops the variable,
 * so nothing it starts in turn inherits the key. */

#define KEY_FD_NAME "ferry-store-key"

int ferry_secrets_key_handoff(const uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                              struct ferry_error *err)
{
    char hex[65], num[16];
    ferry_secretbox_key_hex(key, hex);
    int fd = memfd_create(KEY_FD_NAME, MFD_ALLOW_SEALING); /* no MFD_CLOEXEC: workers inherit */
    bool ok = fd >= 0 && write(fd, hex, 64) == 64 &&
              fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
    explicit_bzero(hex, sizeof hex);
    snprintf(num, sizeof num, "%d", fd);
    if (!ok || setenv(FERRY_SECRETBOX_KEY_FD_ENV, num, 1) != 0) {
        if (fd >= 0) close(fd);
        return ferry_error_set(err, FERRY_EIO, "secrets",
                               "cannot hand the secret key on to the workers: %s", strerror(errno));
    }
    unsetenv(FERRY_SECRETBOX_KEY_ENV);
    return FERRY_OK;
}

/* The key text from the descriptor named by FERRY_STORE_KEY_FD (when it is the server's
 * memfd), closed and forgotten; false when there is none. */
static bool key_from_fd(char *text, size_t len)
{
    const char *v = getenv(FERRY_SECRETBOX_KEY_FD_ENV);
    if (v == NULL || v[0] == '\0') return false;
    long fl = strtol(v, NULL, 10);
    int fd = fl > 2 && fl < 65536 ? (int)fl : -1;
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t tl = fd >= 0 ? readlink(link, target, sizeof target - 1) : -1;
    bool ours = tl > 0 && (target[tl] = '\0', strncmp(target, "/memfd:" KEY_FD_NAME, 22) == 0);
    ssize_t got = ours ? pread(fd, text, len - 1, 0) : -1;
    if (ours) close(fd);
    unsetenv(FERRY_SECRETBOX_KEY_FD_ENV);
    if (got <= 0) return false;
    text[got] = '\0';
    return true;
}

int ferry_secrets_hook_install(const char *state_url, struct ferry_error *err)
{
    ferry_free(g_state_url);
    g_state_url = ferry_strdup(state_url ? state_url : ferry_store_default_url());
    if (g_state_url == NULL) return ferry_error_set(err, FERRY_ENOMEM, "secrets", "out of memory");
    char fd_text[128];
    bool from_fd = key_from_fd(fd_text, sizeof fd_text);
    const char *k = from_fd ? fd_text : getenv(FERRY_SECRETBOX_KEY_ENV);
    g_have_key = false;
    ferry_error_clear(&g_key_err);
    /* A malformed key fails the first secret: lookup, not every command. */
    if (k && k[0])
        g_have_key = ferry_secretbox_key_parse(k, FERRY_SECRETBOX_KEY_ENV, g_key, &g_key_err) ==
                     FERRY_OK;
    explicit_bzero(fd_text, sizeof fd_text);
    ferry_secret_store_hook(resolve_from_store);
    return FERRY_OK;
}
