/* cli/cmd_secrets.c - `ferry secrets put|list|rm|rotate-key`: the secrets store of the
 * local state (store/secrets.h). Values come from stdin only (never argv); the key from
 * --secret-key env:NAME|file:PATH, else the key text in $FERRY_STORE_KEY. Nothing here
 * prints a value or a key. Called by main.c. */
#include <getopt.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "store/secrets.h"

static const char *usage =
    "usage: ferry secrets put NAME      [--secret-key env:NAME|file:PATH] [--state PATH]\n"
    "       ferry secrets list          [--state PATH] [--json]\n"
    "       ferry secrets rm NAME       [--state PATH]\n"
    "       ferry secrets rotate-key --new-key env:NAME|file:PATH [--secret-key ...]\n\n"
    "put reads the value from stdin (one trailing newline is dropped) and stores it sealed\n"
    "with the secret key; pipelines reference it as secret:NAME. list shows names and\n"
    "times, never values. rotate-key reseals every secret under the new key (all or\n"
    "nothing). The key: 32 bytes as 64 hex digits or 44 base64 characters, from\n"
    "--secret-key, else the key text in $" FERRY_SECRETBOX_KEY_ENV ".\n";

static int load_key(const char *ref, uint8_t key[FERRY_SECRETBOX_KEY_BYTES],
                    struct ferry_error *err)
{
    if (ref) return ferry_secretbox_key_load(ref, "--secret-key", key, err);
    const char *k = getenv(FERRY_SECRETBOX_KEY_ENV);
    if (k == NULL || k[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "secrets",
                               "no secret key: pass --secret-key env:NAME|file:PATH or set "
                               FERRY_SECRETBOX_KEY_ENV);
    return ferry_secretbox_key_parse(k, FERRY_SECRETBOX_KEY_ENV, key, err);
}

static int read_stdin(char **out, size_t *len, struct ferry_error *err)
{
    size_t cap = FERRY_SECRET_VALUE_MAX + 2, n = 0, got;
    char *buf = ferry_malloc(cap + 1);
    if (buf == NULL) return ferry_error_set(err, FERRY_ENOMEM, "secrets", "out of memory");
    while (n < cap && (got = fread(buf + n, 1, cap - n, stdin)) > 0)
        n += got;
    if (n > 0 && buf[n - 1] == '\n') n--;
    if (n > 0 && buf[n - 1] == '\r') n--;
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return FERRY_OK;
}

static void print_time(int64_t us, char *out, size_t cap)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int do_list(struct ferry_store *st, bool json, struct ferry_error *err)
{
    struct ferry_secret_info *v = NULL;
    int n = 0;
    int rc = ferry_store_secret_list(st, &v, &n, err);
    if (rc) return rc;
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        char c[32], u[32];
        print_time(v[i].created_us, c, sizeof c);
        print_time(v[i].updated_us, u, sizeof u);
        if (json)
            json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "name", v[i].name, "created", c,
                                               "updated", u));
        else
            printf("%-32s created %s  updated %s\n", v[i].name, c, u);
    }
    if (json) {
        char *s = json_dumps(a, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    }
    json_decref(a);
    ferry_free(v);
    return FERRY_OK;
}

static int run(const char *sub, const char *name, const char *state, const char *key_ref,
               const char *new_ref, bool json, struct ferry_error *err)
{
    uint8_t key[FERRY_SECRETBOX_KEY_BYTES], nkey[FERRY_SECRETBOX_KEY_BYTES];
    bool put = !strcmp(sub, "put"), rotate = !strcmp(sub, "rotate-key");
    int rc = FERRY_OK;
    if (put || rotate) rc = load_key(key_ref, key, err);
    if (rc == FERRY_OK && rotate)
        rc = new_ref ? ferry_secretbox_key_load(new_ref, "--new-key", nkey, err)
                     : ferry_error_set(err, FERRY_ECONFIG, "secrets",
                                       "rotate-key needs --new-key env:NAME|file:PATH");
    char *value = NULL;
    size_t len = 0;
    if (rc == FERRY_OK && put) rc = ferry_secrets_name_check(name, err);
    if (rc == FERRY_OK && put) rc = read_stdin(&value, &len, err);
    struct ferry_store *st = NULL;
    if (rc == FERRY_OK) rc = ferry_store_open(state, &st, err);
    int count = 0;
    if (rc == FERRY_OK && put) rc = ferry_secrets_put(st, key, name, value, len, err);
    if (rc == FERRY_OK && !strcmp(sub, "rm")) rc = ferry_store_secret_delete(st, name, err);
    if (rc == FERRY_OK && !strcmp(sub, "list")) rc = do_list(st, json, err);
    if (rc == FERRY_OK && rotate) rc = ferry_secrets_rotate(st, key, nkey, &count, err);
    if (rc == FERRY_OK && put) printf("secret %s stored\n", name);
    if (rc == FERRY_OK && !strcmp(sub, "rm")) printf("secret %s removed\n", name);
    if (rc == FERRY_OK && rotate) printf("%d secret(s) resealed under the new key\n", count);
    if (st) ferry_store_close(st);
    if (value) ferry_secret_free(value);
    sodium_memzero(key, sizeof key);
    sodium_memzero(nkey, sizeof nkey);
    return rc;
}

int ferry_cli_secrets(int argc, char **argv)
{
    const char *state = ferry_store_default_url(), *key_ref = NULL, *new_ref = NULL;
    bool json = false;
    static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                         {"store", required_argument, NULL, 's'},
                                         {"secret-key", required_argument, NULL, 'k'},
                                         {"new-key", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': state = optarg; break;
        case 'k': key_ref = optarg; break;
        case 'n': new_ref = optarg; break;
        case 'j': json = true; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    int nargs = argc - optind;
    const char *sub = nargs >= 1 ? argv[optind] : "";
    bool named = !strcmp(sub, "put") || !strcmp(sub, "rm");
    bool bare = !strcmp(sub, "list") || !strcmp(sub, "rotate-key");
    if (!((named && nargs == 2) || (bare && nargs == 1))) {
        if (!strcmp(sub, "put") && nargs > 2)
            fputs("ferry: secrets put takes the value on stdin, never as an argument\n", stderr);
        fputs(usage, stderr);
        return 2;
    }
    struct ferry_error err;
    ferry_error_clear(&err);
    int rc = run(sub, named ? argv[optind + 1] : NULL, state, key_ref, new_ref, json, &err);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: secrets %s: %s\n", sub, err.message);
        return ferry_code_exit_status(rc);
    }
    return 0;
}
