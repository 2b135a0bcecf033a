/* ferry/config.h - the pipeline file: a YAML document read into a tree of nodes that
 * remember their key path and line, typed accessors that produce one clear error naming
 * the key path and the line, and a check that refuses unknown keys.
 *
 * Every accessor marks the key it reads as used; ferry_cfg_check_unused() then reports the
 * first key nobody read ("source.rowz (line 7): unknown key"). Secrets are read with
 * ferry_cfg_secret(): the value must be a reference, `env:NAME` or `file:PATH`, and is
 * resolved then; the resolved value never appears in an error. */
#ifndef FERRY_CONFIG_H
#define FERRY_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "ferry/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_cfg_kind { FERRY_CFG_NULL, FERRY_CFG_SCALAR, FERRY_CFG_MAP, FERRY_CFG_LIST };

struct ferry_cfg {
    enum ferry_cfg_kind kind;
    char *key;       /* key in the parent map, NULL for list items and the root */
    char *path;      /* "source.resources[0].table" ("" for the root) */
    char *scalar;    /* SCALAR: the text; NULL: the text as written ("", "~", "null") */
    bool quoted;     /* SCALAR written with quotes: never a null ("null" is text); typed
                      * accessors still read "42" as 42 so saved JSON requests reload */
    int line;        /* 1-based */
    int column;
    int n_children;
    struct ferry_cfg **children; /* MAP entries (with key) or LIST items, in file order */
    bool used;
    const char *file; /* shared by every node of one document */
    /* Not from the file: what the program embedding ferry hands this section's connector
     * for one run (the runner sets it on the sink section from ferry_run_options.sink_host;
     * the `callback` sink reads it). NULL otherwise; never freed by the tree. */
    void *host;
};

/* Parses a YAML document (a file, or a string for tests and the API). Duplicate keys,
 * anchors/aliases and several documents are refused. *out is freed with ferry_cfg_free. */
int ferry_cfg_parse_file(const char *path, struct ferry_cfg **out, struct ferry_error *err);
int ferry_cfg_parse_string(const char *text, size_t len, const char *name,
                           struct ferry_cfg **out, struct ferry_error *err);
void ferry_cfg_free(struct ferry_cfg *root);

/* Child of a map by key (marks it used), or NULL. */
struct ferry_cfg *ferry_cfg_get(struct ferry_cfg *map, const char *key);

/* Typed accessors on map[key]. When the key is absent: required -> FERRY_ECONFIG
 * "<path>.<key>: required (line N)"; else *out keeps its default and FERRY_OK. */
int ferry_cfg_str(struct ferry_cfg *map, const char *key, bool required, const char **out,
                  struct ferry_error *err);
int ferry_cfg_int(struct ferry_cfg *map, const char *key, bool required, int64_t min,
                  int64_t max, int64_t *out, struct ferry_error *err);
int ferry_cfg_bool(struct ferry_cfg *map, const char *key, bool required, bool *out,
                   struct ferry_error *err);
/* "4MiB", "512k", "1000000" -> bytes */
int ferry_cfg_size(struct ferry_cfg *map, const char *key, bool required, int64_t *out,
                   struct ferry_error *err);
/* "1s", "250ms", "5m", "2h" -> milliseconds */
/* The one duration syntax of config keys and command-line flags: "250ms", "1s", "1.5s",
 * "1h30m", "2d" or "0" into milliseconds. false when it does not parse or overflows. */
bool ferry_duration_parse_ms(const char *text, int64_t *ms);
int ferry_cfg_duration_ms(struct ferry_cfg *map, const char *key, bool required, int64_t *out,
                          struct ferry_error *err);
/* One of a NULL-terminated list of words; returns its index in *out. */
int ferry_cfg_enum(struct ferry_cfg *map, const char *key, bool required,
                   const char *const *words, int *out, struct ferry_error *err);
/* A string or a list of strings -> a NULL-terminated array (free with ferry_cfg_strv_free). */
int ferry_cfg_strv(struct ferry_cfg *map, const char *key, bool required, char ***out,
                   int *n, struct ferry_error *err);
void ferry_cfg_strv_free(char **v);
/* A secret reference (env:NAME or file:PATH, or a plain value when allow_plain) resolved
 * into a fresh string the caller frees with ferry_secret_free (which wipes it). */
int ferry_cfg_secret(struct ferry_cfg *map, const char *key, bool required, bool allow_plain,
                     char **out, struct ferry_error *err);
int ferry_secret_resolve(const char *ref, const char *what, char **out, struct ferry_error *err);
void ferry_secret_free(char *s);
/* `secret:NAME` references are answered by this function (store/secrets.c installs one
 * once, before threads start); without one they fail naming the reference. */
typedef int (*ferry_secret_store_fn)(const char *name, const char *what, char **out,
                                     struct ferry_error *err);
void ferry_secret_store_hook(ferry_secret_store_fn fn);

/* Errors about a node: "<file>: <path> (line N): <message>", code FERRY_ECONFIG. */
int ferry_cfg_error(struct ferry_error *err, const struct ferry_cfg *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* First key under node (recursively) that no accessor read -> FERRY_ECONFIG. */
int ferry_cfg_check_unused(const struct ferry_cfg *node, struct ferry_error *err);
/* Marks node and everything under it as used (sections handled elsewhere). */
void ferry_cfg_mark_used(struct ferry_cfg *node);

/* The node as canonical JSON (keys sorted, scalars as strings), for version hashes and
 * the saved request. Keys listed in `skip` (NULL-terminated, direct children only) are
 * left out. Caller frees. */
char *ferry_cfg_to_json(const struct ferry_cfg *node, const char *const *skip);

#ifdef __cplusplus
}
#endif
#endif
