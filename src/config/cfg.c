/* config/cfg.c - the pipeline file as a tree of nodes, and the typed accessors on it.
 *
 * Owns: reading YAML (libyaml's event API) into struct ferry_cfg nodes that remember
 * their key path, line and column; the accessors that turn a node into an int, a size, a
 * duration, an enum word, a list of strings or a resolved secret, each failing with one
 * message "<file>: <path> (line N): <what was expected>, got <what was there>"; the
 * unknown-key check; canonical JSON of a node (sorted keys) for version hashes and the
 * saved request.
 *
 * May call: libyaml, core (memory, buffers, errors). Called by: config/pipeline.c, the
 * connectors (their own keys), the transform stage, the runner (ferry_cfg_check_unused).
 *
 * Deliberately small YAML: one document, string keys, no anchors, aliases or tags
 * (other than !!str). A pipeline file is read by people; those features only make it
 * harder to see what a key holds. Scalars stay text and the accessor that reads a key
 * decides its type. Quotes only decide null-ness (`"null"` is the word null): a quoted
 * `"50000"` is still read as an integer, because the saved request (ferry_cfg_to_json,
 * every scalar a JSON string) must load back to the same pipeline. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"

#define MAX_DEPTH 64                       /* nesting of maps and lists */
#define MAX_FILE_BYTES ((size_t)16 << 20)  /* a pipeline file is small */
#define MAX_SECRET_BYTES ((size_t)1 << 20) /* certificates fit, accidents do not */
#define VALUE_SHOWN_MAX 60                 /* bytes of a bad value echoed in an error */
/* What one document may cost, whatever its size in bytes (a request body is parsed with
 * the same code): nodes, the length of one key, the bytes of all key paths together. With
 * these a 1 MiB body stays in linear time and a few tens of MiB. */
#define MAX_NODES 100000
#define MAX_KEY_BYTES 1024
#define MAX_PATH_BYTES ((size_t)8 << 20)

static const char yaml_str_tag[] = "tag:yaml.org,2002:str";

/* ---- tree ---------------------------------------------------------------------------- */

struct parse {
    yaml_parser_t parser;
    const char *file; /* node->file: points into the root node's allocation */
    const char *name; /* the caller's name, for messages */
    struct ferry_error *err;
    size_t nodes, path_bytes; /* spent so far (MAX_NODES, MAX_PATH_BYTES) */
};

static int oom(struct parse *ps)
{
    return ferry_error_set(ps->err, FERRY_ENOMEM, "config", "%s: out of memory while reading",
                           ps->name);
}

/* The root carries the file name in its own allocation, so every node can point at it
 * and freeing the tree frees it too. */
static struct ferry_cfg *node_new(struct parse *ps, enum ferry_cfg_kind kind, const char *key,
                                  const char *path, const yaml_mark_t *mark)
{
    size_t extra = ps->file ? 0 : strlen(ps->name) + 1;
    struct ferry_cfg *n = ferry_calloc(1, sizeof *n + extra);
    if (n == NULL) return NULL;
    if (ps->file == NULL) {
        char *name = (char *)(n + 1);
        memcpy(name, ps->name, extra);
        ps->file = name;
    }
    n->kind = kind;
    n->file = ps->file;
    n->line = (int)mark->line + 1;
    n->column = (int)mark->column + 1;
    n->key = key ? ferry_strdup(key) : NULL;
    n->path = ferry_strdup(path);
    if ((key && n->key == NULL) || n->path == NULL) {
        if (extra) ps->file = NULL;
        ferry_free(n->key);
        ferry_free(n->path);
        ferry_free(n);
        return NULL;
    }
    return n;
}

void ferry_cfg_free(struct ferry_cfg *root)
{
    if (root == NULL) return;
    for (int i = 0; i < root->n_children; i++) ferry_cfg_free(root->children[i]);
    ferry_free(root->children);
    ferry_free(root->key);
    ferry_free(root->path);
    ferry_free(root->scalar);
    ferry_free(root);
}

static int add_child(struct ferry_cfg *parent, struct ferry_cfg *child)
{
    if ((parent->n_children & (parent->n_children - 1)) == 0) {
        size_t cap = parent->n_children ? (size_t)parent->n_children * 2 : 4;
        struct ferry_cfg **c = ferry_realloc(parent->children, cap * sizeof *c);
        if (c == NULL) return FERRY_ENOMEM;
        parent->children = c;
    }
    parent->children[parent->n_children++] = child;
    return FERRY_OK;
}

/* ---- parsing ------------------------------------------------------------------------- */

static int at_mark(struct parse *ps, const yaml_mark_t *m, const char *path, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

static int at_mark(struct parse *ps, const yaml_mark_t *m, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *file = ps->name;
    if (path && *path)
        return ferry_error_set(ps->err, FERRY_ECONFIG, "config", "%s: %s (line %zu): %s", file,
                               path, m->line + 1, msg);
    return ferry_error_set(ps->err, FERRY_ECONFIG, "config", "%s: line %zu: %s", file,
                           m->line + 1, msg);
}

static int next_event(struct parse *ps, yaml_event_t *ev)
{
    if (yaml_parser_parse(&ps->parser, ev)) return FERRY_OK;
    yaml_parser_t *p = &ps->parser;
    const char *file = ps->name;
    const char *problem = p->problem ? p->problem : "unreadable input";
    if (p->error == YAML_MEMORY_ERROR) return oom(ps);
    if (p->error == YAML_READER_ERROR)
        return ferry_error_set(ps->err, FERRY_ECONFIG, "config", "%s: byte %zu: %s", file,
                               p->problem_offset, problem);
    if (p->context)
        return ferry_error_set(ps->err, FERRY_ECONFIG, "config",
                               "%s: line %zu, column %zu: YAML syntax: %s %s", file,
                               p->problem_mark.line + 1, p->problem_mark.column + 1, p->context,
                               problem);
    return ferry_error_set(ps->err, FERRY_ECONFIG, "config",
                           "%s: line %zu, column %zu: YAML syntax: %s", file,
                           p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

/* Anchors, aliases and tags make a file say things its reader cannot see at a glance. */
static int refuse_extras(struct parse *ps, const yaml_event_t *ev, const char *path,
                         const yaml_char_t *anchor, const yaml_char_t *tag, bool *str_tag)
{
    if (anchor)
        return at_mark(ps, &ev->start_mark, path,
                       "anchors (&%s) are not supported; write the value out", anchor);
    if (tag) {
        if (str_tag && strcmp((const char *)tag, yaml_str_tag) == 0) {
            *str_tag = true;
            return FERRY_OK;
        }
        return at_mark(ps, &ev->start_mark, path, "tags (%s) are not supported", tag);
    }
    return FERRY_OK;
}

static bool plain_null(const yaml_event_t *ev)
{
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = (const char *)ev->data.scalar.value;
    return !strcmp(v, "") || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

static int parse_node(struct parse *ps, yaml_event_t *ev, const char *key, const char *path,
                      int depth, struct ferry_cfg **out);

static int parse_scalar(struct parse *ps, yaml_event_t *ev, const char *key, const char *path,
                        struct ferry_cfg **out)
{
    bool str_tag = false;
    int rc = refuse_extras(ps, ev, path, ev->data.scalar.anchor, ev->data.scalar.tag, &str_tag);
    if (rc) return rc;
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
        return at_mark(ps, &ev->start_mark, path, "a value contains a NUL character");
    bool is_null = !str_tag && plain_null(ev);
    struct ferry_cfg *n =
        node_new(ps, is_null ? FERRY_CFG_NULL : FERRY_CFG_SCALAR, key, path, &ev->start_mark);
    if (n == NULL) return oom(ps);
    /* A null keeps its text too: `type: null` names the null sink, `type:` names nothing. */
    n->scalar = ferry_strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (n->scalar == NULL) {
        ferry_cfg_free(n);
        return oom(ps);
    }
    n->quoted = !is_null && (str_tag || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE);
    *out = n;
    return FERRY_OK;
}

static int parse_list(struct parse *ps, yaml_event_t *start, const char *key, const char *path,
                      int depth, struct ferry_cfg **out)
{
    int rc = refuse_extras(ps, start, path, start->data.sequence_start.anchor,
                           start->data.sequence_start.tag, NULL);
    if (rc) return rc;
    struct ferry_cfg *n = node_new(ps, FERRY_CFG_LIST, key, path, &start->start_mark);
    if (n == NULL) return oom(ps);
    for (;;) {
        yaml_event_t ev;
        rc = next_event(ps, &ev);
        if (rc) break;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            *out = n;
            return FERRY_OK;
        }
        char *item_path = ferry_asprintf("%s[%d]", path, n->n_children);
        struct ferry_cfg *item = NULL;
        if (item_path) {
            rc = parse_node(ps, &ev, NULL, item_path, depth + 1, &item);
        } else {
            yaml_event_delete(&ev);
            rc = oom(ps);
        }
        ferry_free(item_path);
        if (rc == FERRY_OK && add_child(n, item) != FERRY_OK) {
            ferry_cfg_free(item);
            rc = oom(ps);
        }
        if (rc) break;
    }
    ferry_cfg_free(n);
    return rc;
}

/* The keys of one map, for the duplicate check in linear time: an open-addressing table of
 * child indexes (+1; 0 is empty), grown to keep it at most half full. */
struct keyset {
    uint32_t *slot;
    size_t cap;
};

static uint64_t key_hash(const char *k)
{
    uint64_t h = 1469598103934665603u;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211u;
    return h;
}

/* The child with key k, or NULL. */
static const struct ferry_cfg *keyset_find(const struct keyset *ks, const struct ferry_cfg *map,
                                           const char *k)
{
    if (ks->cap == 0) return NULL;
    for (size_t i = key_hash(k) & (ks->cap - 1);; i = (i + 1) & (ks->cap - 1)) {
        if (ks->slot[i] == 0) return NULL;
        const struct ferry_cfg *c = map->children[ks->slot[i] - 1];
        if (strcmp(c->key, k) == 0) return c;
    }
}

/* Adds child number idx of map (its key is new). */
static int keyset_add(struct keyset *ks, const struct ferry_cfg *map, size_t idx)
{
    if ((idx + 1) * 2 > ks->cap) {
        size_t cap = ks->cap ? ks->cap * 2 : 16;
        uint32_t *s = ferry_calloc(cap, sizeof *s);
        if (s == NULL) return FERRY_ENOMEM;
        ferry_free(ks->slot);
        ks->slot = s;
        ks->cap = cap;
        for (size_t j = 0; j < idx; j++) {
            size_t i = key_hash(map->children[j]->key) & (cap - 1);
            while (s[i]) i = (i + 1) & (cap - 1);
            s[i] = (uint32_t)j + 1;
        }
    }
    size_t i = key_hash(map->children[idx]->key) & (ks->cap - 1);
    while (ks->slot[i]) i = (i + 1) & (ks->cap - 1);
    ks->slot[i] = (uint32_t)idx + 1;
    return FERRY_OK;
}

static int parse_key(struct parse *ps, yaml_event_t *ev, const struct ferry_cfg *map,
                     const struct keyset *ks, const char *path)
{
    if (ev->type == YAML_ALIAS_EVENT)
        return at_mark(ps, &ev->start_mark, path, "aliases (*%s) are not supported",
                       ev->data.alias.anchor);
    if (ev->type != YAML_SCALAR_EVENT)
        return at_mark(ps, &ev->start_mark, path, "keys must be strings, not %s",
                       ev->type == YAML_MAPPING_START_EVENT ? "maps" : "lists");
    bool str_tag = false;
    int rc = refuse_extras(ps, ev, path, ev->data.scalar.anchor, ev->data.scalar.tag, &str_tag);
    if (rc) return rc;
    /* A plain `null: ...` key is the word null (connector keys use it); only an empty or `~`
     * key is refused. */
    const char *kv = (const char *)ev->data.scalar.value;
    if (!str_tag && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (kv[0] == '\0' || strcmp(kv, "~") == 0))
        return at_mark(ps, &ev->start_mark, path, "keys must be strings, got an empty key");
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
        return at_mark(ps, &ev->start_mark, path, "a key contains a NUL character");
    if (ev->data.scalar.length > MAX_KEY_BYTES)
        return at_mark(ps, &ev->start_mark, path, "a key is longer than %d bytes", MAX_KEY_BYTES);
    const char *k = (const char *)ev->data.scalar.value;
    const struct ferry_cfg *first = keyset_find(ks, map, k);
    if (first) {
        char *kp = *path ? ferry_asprintf("%s.%s", path, k) : ferry_strdup(k);
        if (kp == NULL) return oom(ps);
        rc = at_mark(ps, &ev->start_mark, kp, "duplicate key (first at line %d)", first->line);
        ferry_free(kp);
        return rc;
    }
    return FERRY_OK;
}

static int parse_map(struct parse *ps, yaml_event_t *start, const char *key, const char *path,
                     int depth, struct ferry_cfg **out)
{
    int rc = refuse_extras(ps, start, path, start->data.mapping_start.anchor,
                           start->data.mapping_start.tag, NULL);
    if (rc) return rc;
    struct ferry_cfg *n = node_new(ps, FERRY_CFG_MAP, key, path, &start->start_mark);
    if (n == NULL) return oom(ps);
    struct keyset ks = {0};
    for (;;) {
        yaml_event_t kev, vev;
        rc = next_event(ps, &kev);
        if (rc) break;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            ferry_free(ks.slot);
            *out = n;
            return FERRY_OK;
        }
        rc = parse_key(ps, &kev, n, &ks, path);
        if (rc) {
            yaml_event_delete(&kev);
            break;
        }
        const char *k = (const char *)kev.data.scalar.value;
        char *child_path = *path ? ferry_asprintf("%s.%s", path, k) : ferry_strdup(k);
        if (child_path == NULL) {
            yaml_event_delete(&kev);
            rc = oom(ps);
            break;
        }
        struct ferry_cfg *child = NULL;
        rc = next_event(ps, &vev);
        if (rc == FERRY_OK) rc = parse_node(ps, &vev, k, child_path, depth + 1, &child);
        ferry_free(child_path);
        yaml_event_delete(&kev);
        if (rc == FERRY_OK && add_child(n, child) != FERRY_OK) {
            ferry_cfg_free(child);
            rc = oom(ps);
        }
        if (rc == FERRY_OK && keyset_add(&ks, n, (size_t)n->n_children - 1) != FERRY_OK)
            rc = oom(ps);
        if (rc) break;
    }
    ferry_free(ks.slot);
    ferry_cfg_free(n);
    return rc;
}

/* Takes ownership of *ev. */
static int parse_node(struct parse *ps, yaml_event_t *ev, const char *key, const char *path,
                      int depth, struct ferry_cfg **out)
{
    int rc;
    ps->nodes++;
    ps->path_bytes += strlen(path) + 1;
    if (depth > MAX_DEPTH) {
        rc = at_mark(ps, &ev->start_mark, path, "nested more than %d levels deep", MAX_DEPTH);
    } else if (ps->nodes > MAX_NODES) {
        rc = at_mark(ps, &ev->start_mark, NULL, "more than %d values; a pipeline is smaller",
                     MAX_NODES);
    } else if (ps->path_bytes > MAX_PATH_BYTES) {
        rc = at_mark(ps, &ev->start_mark, NULL,
                     "the key paths of this document add up to more than %zu MiB; a pipeline "
                     "is smaller",
                     MAX_PATH_BYTES >> 20);
    } else {
        switch (ev->type) {
        case YAML_SCALAR_EVENT: rc = parse_scalar(ps, ev, key, path, out); break;
        case YAML_SEQUENCE_START_EVENT: rc = parse_list(ps, ev, key, path, depth, out); break;
        case YAML_MAPPING_START_EVENT: rc = parse_map(ps, ev, key, path, depth, out); break;
        case YAML_ALIAS_EVENT:
            rc = at_mark(ps, &ev->start_mark, path, "aliases (*%s) are not supported",
                         ev->data.alias.anchor);
            break;
        default: rc = at_mark(ps, &ev->start_mark, path, "unexpected YAML event"); break;
        }
    }
    yaml_event_delete(ev);
    return rc;
}

static int parse_stream(struct parse *ps, struct ferry_cfg **out)
{
    yaml_event_t ev;
    struct ferry_cfg *root = NULL;
    int rc = next_event(ps, &ev); /* STREAM_START */
    if (rc) return rc;
    yaml_event_delete(&ev);
    if ((rc = next_event(ps, &ev))) return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        /* An empty file is a document with nothing in it: the caller says what is missing. */
        root = node_new(ps, FERRY_CFG_NULL, NULL, "", &ev.start_mark);
        yaml_event_delete(&ev);
        if (root == NULL) return oom(ps);
        *out = root;
        return FERRY_OK;
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    if ((rc = next_event(ps, &ev))) return rc;
    if ((rc = parse_node(ps, &ev, NULL, "", 0, &root))) return rc;
    if ((rc = next_event(ps, &ev))) goto fail; /* DOCUMENT_END */
    yaml_event_delete(&ev);
    if ((rc = next_event(ps, &ev))) goto fail;
    if (ev.type != YAML_STREAM_END_EVENT) {
        rc = at_mark(ps, &ev.start_mark, NULL,
                     "a second YAML document starts here; a file holds one pipeline");
        yaml_event_delete(&ev);
        goto fail;
    }
    yaml_event_delete(&ev);
    *out = root;
    return FERRY_OK;
fail:
    ferry_cfg_free(root);
    return rc;
}

int ferry_cfg_parse_string(const char *text, size_t len, const char *name,
                           struct ferry_cfg **out, struct ferry_error *err)
{
    *out = NULL;
    struct parse ps = {.name = name ? name : "<string>", .err = err};
    if (!yaml_parser_initialize(&ps.parser)) return oom(&ps);
    yaml_parser_set_input_string(&ps.parser, (const unsigned char *)(text ? text : ""),
                                 text ? len : 0);
    int rc = parse_stream(&ps, out);
    yaml_parser_delete(&ps.parser);
    return rc;
}

int ferry_cfg_parse_file(const char *path, struct ferry_cfg **out, struct ferry_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    /* A pipeline file that cannot be opened is a usage error (exit 2), like a bad one. */
    if (f == NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "config", "cannot open pipeline file %s: %s",
                               path, strerror(errno));
    struct ferry_buf b;
    ferry_buf_init(&b, MAX_FILE_BYTES + 1);
    char chunk[8192];
    size_t got;
    int rc = FERRY_OK;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + got > MAX_FILE_BYTES) {
            rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 "%s: larger than %zu MiB; is this a pipeline file?", path,
                                 MAX_FILE_BYTES >> 20);
            break;
        }
        if (ferry_buf_append(&b, chunk, got) != FERRY_OK) {
            rc = ferry_error_set(err, FERRY_ENOMEM, "config", "%s: out of memory", path);
            break;
        }
    }
    if (rc == FERRY_OK && ferror(f))
        rc = ferry_error_set(err, FERRY_EIO, "config", "cannot read pipeline file %s: %s", path,
                             strerror(errno));
    fclose(f);
    if (rc == FERRY_OK) rc = ferry_cfg_parse_string(b.data ? b.data : "", b.len, path, out, err);
    ferry_buf_release(&b);
    return rc;
}

/* ---- errors -------------------------------------------------------------------------- */

static int vnode_error(struct ferry_error *err, const struct ferry_cfg *node, const char *fmt,
                       va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (node == NULL) return ferry_error_set(err, FERRY_ECONFIG, "config", "%s", msg);
    if (node->path == NULL || node->path[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: line %d: %s", node->file,
                               node->line, msg);
    return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s (line %d): %s", node->file,
                           node->path, node->line, msg);
}

int ferry_cfg_error(struct ferry_error *err, const struct ferry_cfg *node, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vnode_error(err, node, fmt, ap);
    va_end(ap);
    return rc;
}

/* How a bad value is echoed: quoted, control characters escaped, long ones cut. Never
 * used for secrets. */
static void show_value(const struct ferry_cfg *n, char *buf, size_t size)
{
    if (n->kind == FERRY_CFG_MAP) {
        snprintf(buf, size, "a map");
        return;
    }
    if (n->kind == FERRY_CFG_LIST) {
        snprintf(buf, size, "a list");
        return;
    }
    if (n->kind == FERRY_CFG_NULL) {
        snprintf(buf, size, "nothing (null)");
        return;
    }
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)n->scalar;
    buf[o++] = '"';
    size_t i;
    for (i = 0; s[i] && i < VALUE_SHOWN_MAX && o + 8 < size; i++) {
        if (s[i] < 0x20 || s[i] == 0x7f) o += (size_t)snprintf(buf + o, size - o, "\\x%02x", s[i]);
        else if (s[i] == '"' || s[i] == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)s[i];
        } else buf[o++] = (char)s[i];
    }
    if (s[i] && o + 4 < size) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

static int expected(struct ferry_error *err, const struct ferry_cfg *n, const char *what)
{
    char shown[VALUE_SHOWN_MAX * 4 + 16];
    show_value(n, shown, sizeof shown);
    return ferry_cfg_error(err, n, "expected %s, got %s", what, shown);
}

/* ---- accessors ----------------------------------------------------------------------- */

struct ferry_cfg *ferry_cfg_get(struct ferry_cfg *map, const char *key)
{
    if (map == NULL || map->kind != FERRY_CFG_MAP) return NULL;
    for (int i = 0; i < map->n_children; i++) {
        if (strcmp(map->children[i]->key, key) == 0) {
            map->children[i]->used = true;
            return map->children[i];
        }
    }
    return NULL;
}

/* The value node of map[key], or *node = NULL when it is absent (or null) and optional. */
static int lookup(struct ferry_cfg *map, const char *key, bool required, struct ferry_cfg **node,
                  struct ferry_error *err)
{
    *node = NULL;
    if (map == NULL) {
        if (!required) return FERRY_OK;
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: required", key);
    }
    if (map->kind != FERRY_CFG_MAP) {
        if (map->kind == FERRY_CFG_NULL && !required) return FERRY_OK;
        return expected(err, map, "a map");
    }
    struct ferry_cfg *n = ferry_cfg_get(map, key);
    if (n == NULL || n->kind == FERRY_CFG_NULL) {
        if (!required) return FERRY_OK;
        if (n) return ferry_cfg_error(err, n, "a value is required");
        if (map->path[0] == '\0')
            return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s: required (line %d)",
                                   map->file, key, map->line);
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s.%s: required (line %d)",
                               map->file, map->path, key, map->line);
    }
    *node = n;
    return FERRY_OK;
}

int ferry_cfg_str(struct ferry_cfg *map, const char *key, bool required, const char **out,
                  struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind != FERRY_CFG_SCALAR) return expected(err, n, "a string");
    *out = n->scalar;
    return FERRY_OK;
}

/* Decimal digits with optional '_' between them (YAML 1.1 style 1_000_000). */
static bool parse_int64(const char *s, int64_t *out, bool *overflow)
{
    *overflow = false;
    bool neg = false;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (*s < '0' || *s > '9') return false;
    uint64_t v = 0;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *s; s++) {
        if (*s == '_' && s[1] >= '0' && s[1] <= '9') continue;
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (limit - d) / 10) *overflow = true;
        else v = v * 10 + d;
    }
    if (*overflow) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

int ferry_cfg_int(struct ferry_cfg *map, const char *key, bool required, int64_t min,
                  int64_t max, int64_t *out, struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    int64_t v;
    bool overflow;
    if (n->kind != FERRY_CFG_SCALAR || !parse_int64(n->scalar, &v, &overflow)) {
        if (n->kind == FERRY_CFG_SCALAR && overflow)
            return expected(err, n, "an integer that fits in 64 bits");
        return expected(err, n, "an integer");
    }
    if (v < min || v > max)
        return ferry_cfg_error(err, n, "must be between %" PRId64 " and %" PRId64 ", got %s",
                               min, max, n->scalar);
    *out = v;
    return FERRY_OK;
}

int ferry_cfg_bool(struct ferry_cfg *map, const char *key, bool required, bool *out,
                   struct ferry_error *err)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
                                      "ON", NULL};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off",
                                     "OFF", NULL};
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind == FERRY_CFG_SCALAR) {
        for (int i = 0; yes[i]; i++)
            if (!strcmp(n->scalar, yes[i])) return *out = true, FERRY_OK;
        for (int i = 0; no[i]; i++)
            if (!strcmp(n->scalar, no[i])) return *out = false, FERRY_OK;
    }
    return expected(err, n, "true or false");
}

/* "<number>[.<fraction>]" at *s, advancing it. The fraction keeps 6 digits, so that
 * value * unit cannot overflow for the units below (at most 2^40 or 1 day in ms). */
static bool parse_decimal(const char **s, int64_t *ip, int64_t *frac, int64_t *den)
{
    const char *p = *s;
    if (*p < '0' || *p > '9') return false;
    int64_t v = 0;
    for (; (*p >= '0' && *p <= '9') || (*p == '_' && p[1] >= '0' && p[1] <= '9'); p++) {
        if (*p == '_') continue;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v))
            return false;
    }
    *frac = 0;
    *den = 1;
    if (*p == '.' && p[1] >= '0' && p[1] <= '9') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            if (*den < 1000000) {
                *frac = *frac * 10 + (*p - '0');
                *den *= 10;
            }
        }
    }
    *ip = v;
    *s = p;
    return true;
}

static bool scale(int64_t ip, int64_t frac, int64_t den, int64_t unit, int64_t *out)
{
    int64_t v;
    if (__builtin_mul_overflow(ip, unit, &v)) return false;
    return !__builtin_add_overflow(v, frac * unit / den, out);
}

struct unit {
    const char *name;
    int64_t factor;
};

/* Binary for the IEC names and the one-letter shorthands (1k = 1024, as dd and docker
 * read it), decimal for KB/MB/GB/TB. Case-insensitive. */
static const struct unit size_units[] = {
    {"", 1},
    {"b", 1},
    {"k", (int64_t)1 << 10},
    {"kib", (int64_t)1 << 10},
    {"kb", 1000},
    {"m", (int64_t)1 << 20},
    {"mib", (int64_t)1 << 20},
    {"mb", 1000000},
    {"g", (int64_t)1 << 30},
    {"gib", (int64_t)1 << 30},
    {"gb", 1000000000},
    {"t", (int64_t)1 << 40},
    {"tib", (int64_t)1 << 40},
    {"tb", 1000000000000},
    {NULL, 0},
};

static bool parse_size(const char *s, int64_t *out)
{
    int64_t ip, frac, den;
    if (!parse_decimal(&s, &ip, &frac, &den)) return false;
    while (*s == ' ') s++;
    for (int i = 0; size_units[i].name; i++)
        if (!strcasecmp(s, size_units[i].name))
            return scale(ip, frac, den, size_units[i].factor, out);
    return false;
}

int ferry_cfg_size(struct ferry_cfg *map, const char *key, bool required, int64_t *out,
                   struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind != FERRY_CFG_SCALAR || !parse_size(n->scalar, out)) {
        if (n->kind == FERRY_CFG_SCALAR && n->scalar[0] == '-')
            return ferry_cfg_error(err, n, "a size cannot be negative");
        return expected(err, n, "a size like 4MiB, 512KiB, 4MB, 64k or a number of bytes");
    }
    return FERRY_OK;
}

static const struct unit duration_units[] = {
    {"ms", 1},
    {"s", 1000},
    {"m", 60 * 1000},
    {"h", 3600 * 1000},
    {"d", 86400 * 1000},
    {NULL, 0},
};

/* "250ms", "1s", "1.5s", "1h30m", or "0". A bare number is refused: seconds or
 * milliseconds would be a guess. */
static bool parse_duration(const char *s, int64_t *out);

bool ferry_duration_parse_ms(const char *text, int64_t *ms)
{
    return text != NULL && parse_duration(text, ms);
}

static bool parse_duration(const char *s, int64_t *out)
{
    if (!strcmp(s, "0")) return *out = 0, true;
    int64_t total = 0;
    if (*s == '\0') return false;
    while (*s) {
        int64_t ip, frac, den, part;
        if (!parse_decimal(&s, &ip, &frac, &den)) return false;
        size_t ulen = 0;
        while ((s[ulen] >= 'a' && s[ulen] <= 'z')) ulen++;
        const struct unit *u = NULL;
        for (int i = 0; duration_units[i].name; i++)
            if (strlen(duration_units[i].name) == ulen &&
                !strncmp(s, duration_units[i].name, ulen))
                u = &duration_units[i];
        if (u == NULL) return false;
        s += ulen;
        if (!scale(ip, frac, den, u->factor, &part) || __builtin_add_overflow(total, part, &total))
            return false;
    }
    *out = total;
    return true;
}

int ferry_cfg_duration_ms(struct ferry_cfg *map, const char *key, bool required, int64_t *out,
                          struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind != FERRY_CFG_SCALAR || !parse_duration(n->scalar, out)) {
        bool bare = false;
        if (n->kind == FERRY_CFG_SCALAR) {
            int64_t v;
            bool of;
            bare = parse_int64(n->scalar, &v, &of);
        }
        return expected(err, n,
                        bare ? "a duration with a unit (ms, s, m, h, d) like 250ms or 1s"
                             : "a duration like 250ms, 1s, 5m, 2h or 1d");
    }
    return FERRY_OK;
}

int ferry_cfg_enum(struct ferry_cfg *map, const char *key, bool required,
                   const char *const *words, int *out, struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind == FERRY_CFG_SCALAR) {
        for (int i = 0; words[i]; i++) {
            if (!strcmp(n->scalar, words[i])) {
                *out = i;
                return FERRY_OK;
            }
        }
    }
    char list[512];
    size_t o = 0;
    list[0] = '\0';
    for (int i = 0; words[i] && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", words[i]);
    char what[600];
    snprintf(what, sizeof what, "one of %s", list);
    return expected(err, n, what);
}

void ferry_cfg_strv_free(char **v)
{
    if (v == NULL) return;
    for (char **p = v; *p; p++) ferry_free(*p);
    ferry_free(v);
}

int ferry_cfg_strv(struct ferry_cfg *map, const char *key, bool required, char ***out, int *n,
                   struct ferry_error *err)
{
    struct ferry_cfg *node;
    int rc = lookup(map, key, required, &node, err);
    if (rc || node == NULL) return rc;
    struct ferry_cfg *const *items = &node;
    int count = 1;
    if (node->kind == FERRY_CFG_LIST) {
        items = node->children;
        count = node->n_children;
    } else if (node->kind != FERRY_CFG_SCALAR) {
        return expected(err, node, "a string or a list of strings");
    }
    for (int i = 0; i < count; i++)
        if (items[i]->kind != FERRY_CFG_SCALAR) return expected(err, items[i], "a string");
    char **v = ferry_calloc((size_t)count + 1, sizeof *v);
    if (v == NULL) return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
    for (int i = 0; i < count; i++) {
        items[i]->used = true;
        v[i] = ferry_strdup(items[i]->scalar);
        if (v[i] == NULL) {
            ferry_cfg_strv_free(v);
            return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
        }
    }
    *out = v;
    if (n) *n = count;
    return FERRY_OK;
}

/* ---- secrets ------------------------------------------------------------------------- */

void ferry_secret_free(char *s)
{
    if (s == NULL) return;
    explicit_bzero(s, strlen(s));
    ferry_free(s);
}

static bool env_name_ok(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* Reads a whole secret file; every buffer it lets go of is wiped first. */
static int read_secret_file(const char *path, const char *what, char **out,
                            struct ferry_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: cannot read secret file %s: %s",
                               what, path, strerror(errno));
    size_t cap = 256, len = 0;
    char *buf = ferry_malloc(cap);
    int rc = FERRY_OK;
    while (buf) {
        if (len + 1 == cap) {
            if (cap > MAX_SECRET_BYTES) {
                rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                     "%s: secret file %s is larger than %zu KiB", what, path,
                                     MAX_SECRET_BYTES >> 10);
                break;
            }
            char *bigger = ferry_malloc(cap * 2);
            if (bigger) memcpy(bigger, buf, len);
            explicit_bzero(buf, cap);
            ferry_free(buf);
            buf = bigger;
            cap *= 2;
            if (buf == NULL) break;
        }
        ssize_t got = read(fd, buf + len, cap - 1 - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 "%s: cannot read secret file %s: %s", what, path,
                                 strerror(errno));
            break;
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    close(fd);
    if (buf == NULL) return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
    if (rc == FERRY_OK && len > MAX_SECRET_BYTES)
        rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                             "%s: secret file %s is larger than %zu KiB", what, path,
                             MAX_SECRET_BYTES >> 10);
    if (rc == FERRY_OK && memchr(buf, '\0', len))
        rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                             "%s: secret file %s contains a NUL byte", what, path);
    if (rc) {
        explicit_bzero(buf, cap);
        ferry_free(buf);
        return rc;
    }
    /* `echo secret > file` adds one newline that is not part of the secret. */
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r') len--;
    }
    buf[len] = '\0';
    *out = buf;
    return FERRY_OK;
}

static ferry_secret_store_fn g_store_hook;

void ferry_secret_store_hook(ferry_secret_store_fn fn)
{
    g_store_hook = fn;
}

int ferry_secret_resolve(const char *ref, const char *what, char **out, struct ferry_error *err)
{
    if (what == NULL) what = "secret";
    if (ref == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "config", "%s: no secret reference", what);
    if (!strncmp(ref, "env:", 4)) {
        const char *name = ref + 4;
        if (!env_name_ok(name))
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "%s: env: needs a variable name of letters, digits and _",
                                   what);
        const char *v = getenv(name);
        if (v == NULL)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "%s: environment variable %s is not set", what, name);
        *out = ferry_strdup(v);
        if (*out == NULL) return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
        return FERRY_OK;
    }
    if (!strncmp(ref, "file:", 5)) {
        if (ref[5] == '\0')
            return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: file: needs a path", what);
        return read_secret_file(ref + 5, what, out, err);
    }
    if (!strncmp(ref, "secret:", 7)) {
        if (ref[7] == '\0')
            return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: secret: needs a name", what);
        if (g_store_hook == NULL)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "%s: secret:%s cannot be resolved here (no secrets store)",
                                   what, ref + 7);
        return g_store_hook(ref + 7, what, out, err);
    }
    /* Never echo it: a value that is not a reference may be the secret itself. */
    return ferry_error_set(err, FERRY_ECONFIG, "config",
                           "%s: expected a secret reference env:NAME, file:PATH or secret:NAME",
                           what);
}

int ferry_cfg_secret(struct ferry_cfg *map, const char *key, bool required, bool allow_plain,
                     char **out, struct ferry_error *err)
{
    struct ferry_cfg *n;
    int rc = lookup(map, key, required, &n, err);
    if (rc || n == NULL) return rc;
    if (n->kind != FERRY_CFG_SCALAR)
        return ferry_cfg_error(err, n, "expected a secret reference env:NAME or file:PATH, got %s",
                               n->kind == FERRY_CFG_MAP ? "a map" : "a list");
    const char *v = n->scalar;
    if (strncmp(v, "env:", 4) && strncmp(v, "file:", 5) && strncmp(v, "secret:", 7)) {
        if (!allow_plain)
            return ferry_cfg_error(err, n,
                                   "expected a secret reference env:NAME or file:PATH; a plain "
                                   "value is not allowed here (it would be saved with the run)");
        *out = ferry_strdup(v);
        if (*out == NULL) return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
        return FERRY_OK;
    }
    char what[512];
    snprintf(what, sizeof what, "%s: %s (line %d)", n->file, n->path, n->line);
    return ferry_secret_resolve(v, what, out, err);
}

/* ---- unknown keys, marking, JSON ----------------------------------------------------- */

int ferry_cfg_check_unused(const struct ferry_cfg *node, struct ferry_error *err)
{
    if (node == NULL) return FERRY_OK;
    for (int i = 0; i < node->n_children; i++) {
        const struct ferry_cfg *c = node->children[i];
        if (node->kind == FERRY_CFG_MAP && !c->used)
            return ferry_cfg_error(err, c, "unknown key");
        int rc = ferry_cfg_check_unused(c, err);
        if (rc) return rc;
    }
    return FERRY_OK;
}

void ferry_cfg_mark_used(struct ferry_cfg *node)
{
    if (node == NULL) return;
    node->used = true;
    for (int i = 0; i < node->n_children; i++) ferry_cfg_mark_used(node->children[i]);
}

static int by_key(const void *a, const void *b)
{
    const struct ferry_cfg *x = *(const struct ferry_cfg *const *)a;
    const struct ferry_cfg *y = *(const struct ferry_cfg *const *)b;
    return strcmp(x->key, y->key);
}

static bool skipped(const char *key, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (!strcmp(key, *skip)) return true;
    return false;
}

static int to_json(struct ferry_buf *b, const struct ferry_cfg *n, const char *const *skip)
{
    int rc = FERRY_OK;
    switch (n->kind) {
    case FERRY_CFG_NULL: return ferry_buf_append(b, "null", 4);
    case FERRY_CFG_SCALAR: return ferry_buf_json_string(b, n->scalar, strlen(n->scalar));
    case FERRY_CFG_LIST:
        rc = ferry_buf_append(b, "[", 1);
        for (int i = 0; rc == FERRY_OK && i < n->n_children; i++) {
            if (i) rc = ferry_buf_append(b, ",", 1);
            if (rc == FERRY_OK) rc = to_json(b, n->children[i], NULL);
        }
        return rc ? rc : ferry_buf_append(b, "]", 1);
    case FERRY_CFG_MAP: break;
    }
    struct ferry_cfg **sorted = ferry_malloc(((size_t)n->n_children + 1) * sizeof *sorted);
    if (sorted == NULL) return FERRY_ENOMEM;
    if (n->n_children) memcpy(sorted, n->children, (size_t)n->n_children * sizeof *sorted);
    qsort(sorted, (size_t)n->n_children, sizeof *sorted, by_key);
    rc = ferry_buf_append(b, "{", 1);
    bool first = true;
    for (int i = 0; rc == FERRY_OK && i < n->n_children; i++) {
        if (skipped(sorted[i]->key, skip)) continue;
        if (!first) rc = ferry_buf_append(b, ",", 1);
        first = false;
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, sorted[i]->key, strlen(sorted[i]->key));
        if (rc == FERRY_OK) rc = ferry_buf_append(b, ":", 1);
        if (rc == FERRY_OK) rc = to_json(b, sorted[i], NULL);
    }
    ferry_free(sorted);
    return rc ? rc : ferry_buf_append(b, "}", 1);
}

char *ferry_cfg_to_json(const struct ferry_cfg *node, const char *const *skip)
{
    if (node == NULL) return ferry_strdup("null");
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (to_json(&b, node, skip) != FERRY_OK) {
        ferry_buf_release(&b);
        return NULL;
    }
    return ferry_buf_take(&b);
}
