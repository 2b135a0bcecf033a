/* config/pipeline.c - a pipeline file, loaded and checked (DESIGN §6), and its version.
 *
 * Owns: the keys the engine itself reads (version, name, source.type, source.resources,
 * sink.type, sink.write, transforms' kinds, batch, verify), the names of read and write
 * modes, the pipeline version hash and the saved request and route names. Connector keys
 * stay in the tree unread: each connector reads its section when opened and the runner
 * then reports whatever nobody read (ferry_cfg_check_unused). Transform details are the
 * transform stage's; only the kind and the resource they apply to are read here.
 *
 * May call: config/cfg.c, core (sha256, memory), and the connectors only through the
 * catalog its caller hands it (struct ferry_connector_catalog: lookups by type, the lists for
 * "known types"), never the registry itself: config stays below connectors. Called by the
 * registry's ferry_pipeline_load (connectors/registry.c), which the CLI, the server (saved
 * requests) and the runner call.
 *
 * The version is a SHA-256 of canonical JSON of what decides which rows land where:
 * source identity, resources, cursor, columns, key, sink target, write mode, transforms.
 * Tuning knobs (batch settings, each connector's tuning_keys, a resource's lookback) are
 * left out so that changing them keeps route checkpoints; everything else resets them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "notify/notify.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/error.h"
#include "ferry/pipeline.h"
#include "ferry/tables.h"

static const char *const read_modes[] = {"full", "incremental", "cdc", NULL};
static const char *const write_modes[] = {"append", "replace", "upsert", "merge", NULL};
static const char *const transform_kinds[] = {"drop", "rename", "hash", "mask", "select",
                                              "add",  "filter", "cast", NULL};
static const char *const top_keys[] = {"version", "name",   "source", "sink", "transforms",
                                       "batch",   "verify", "worker", "distribute",
                                       "retries", "notify", "on_resource_error",
                                       "schema_changes", "concurrency", "memory",
                                       "on_unrepresentable", NULL};
static const char *const batch_keys[] = {"rows", "bytes", "flush_after", "queue", NULL};
static const char *const worker_keys[] = {"cpu",          "memory", "cpu_limit",
                                          "memory_limit", "pods",   NULL};
static const char *const verify_words[] = {"after_run", "none", NULL};
static const char *const schema_change_words[] = {"evolve", "freeze", "fail", NULL};
static const char *const unrepresentable_words[] = {"fail", "null", "clamp", NULL};

int ferry_pipeline_unrepresentable(struct ferry_cfg *map, enum ferry_unrepresentable *out,
                                   struct ferry_error *err)
{
    /* `null` unquoted is YAML's null: here it is the word */
    struct ferry_cfg *n = ferry_cfg_get(map, "on_unrepresentable");
    if (n != NULL && n->kind == FERRY_CFG_NULL && n->scalar && !strcmp(n->scalar, "null")) {
        *out = FERRY_UNREP_NULL;
        return FERRY_OK;
    }
    if (n != NULL && n->kind == FERRY_CFG_NULL)
        return ferry_cfg_error(err, n, "expected one of fail, null, clamp");
    int v = (int)*out;
    int rc = ferry_cfg_enum(map, "on_unrepresentable", false, unrepresentable_words, &v, err);
    *out = (enum ferry_unrepresentable)v;
    return rc;
}

#define NAME_MAX_LEN 128

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory while loading a pipeline");
}

/* ---- key checks ---------------------------------------------------------------------- */

static bool in_list(const char *word, const char *const *words)
{
    for (; *words; words++)
        if (!strcmp(word, *words)) return true;
    return false;
}

/* Levenshtein distance, for "did you mean"; long words are never close. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof prev);
    }
    return prev[lb];
}

static void join(char *buf, size_t size, const char *const *words)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; words[i] && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? ", " : "", words[i]);
}

/* The engine owns every key of these maps, so a stranger is a typo: say so right away,
 * with the closest known key, before "required" errors about the key it should have been. */
static int check_keys(const struct ferry_cfg *map, const char *const *allowed, const char *where,
                      struct ferry_error *err)
{
    for (int i = 0; i < map->n_children; i++) {
        const struct ferry_cfg *c = map->children[i];
        if (in_list(c->key, allowed)) continue;
        const char *best = NULL;
        int best_d = 3;
        for (int k = 0; allowed[k]; k++) {
            int d = distance(c->key, allowed[k]);
            if (d < best_d) best_d = d, best = allowed[k];
        }
        char list[256];
        join(list, sizeof list, allowed);
        if (best)
            return ferry_cfg_error(err, c, "unknown key; did you mean %s? (%s takes %s)", best,
                                   where, list);
        return ferry_cfg_error(err, c, "unknown key (%s takes %s)", where, list);
    }
    return FERRY_OK;
}

/* map[key] as a map (or a list): *out = NULL when absent and optional. */
static int section(struct ferry_cfg *map, const char *key, bool required,
                   enum ferry_cfg_kind kind, struct ferry_cfg **out, struct ferry_error *err)
{
    struct ferry_cfg *n = ferry_cfg_get(map, key);
    *out = NULL;
    if (n == NULL) {
        if (!required) return FERRY_OK;
        if (map->path[0] == '\0')
            return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s: required (line %d)",
                                   map->file, key, map->line);
        return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s.%s: required (line %d)",
                               map->file, map->path, key, map->line);
    }
    if (n->kind == FERRY_CFG_NULL && !required) return FERRY_OK;
    if (n->kind != kind) {
        const char *got = n->kind == FERRY_CFG_NULL     ? "nothing (null)"
                          : n->kind == FERRY_CFG_MAP    ? "a map"
                          : n->kind == FERRY_CFG_LIST   ? "a list"
                                                        : "a single value";
        return ferry_cfg_error(err, n, "expected %s, got %s",
                               kind == FERRY_CFG_MAP ? "a map" : "a list", got);
    }
    *out = n;
    return FERRY_OK;
}

/* ---- connectors ---------------------------------------------------------------------- */

/* The names of read and write modes (connector.h), as the file spells them. */
const char *ferry_read_mode_name(enum ferry_read_mode m)
{
    return (unsigned)m <= (unsigned)FERRY_READ_CDC ? read_modes[m] : "unknown";
}

const char *ferry_write_mode_name(enum ferry_write_mode m)
{
    return (unsigned)m <= (unsigned)FERRY_WRITE_MERGE ? write_modes[m] : "unknown";
}

static int unknown_type(struct ferry_cfg *section_node, const char *kind, const char *type,
                        const char *const *known, struct ferry_error *err)
{
    char list[512];
    list[0] = '\0';
    join(list, sizeof list, known);
    return ferry_cfg_error(err, ferry_cfg_get(section_node, "type"),
                           "unknown %s type \"%s\"; known types: %s", kind, type,
                           list[0] ? list : "(none)");
}

static int load_source_type(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    const struct ferry_connector_catalog *cat = p->catalog;
    const char *type = NULL;
    int rc = ferry_cfg_str(p->source, "type", true, &type, err);
    if (rc) return rc;
    p->source_type = ferry_strdup(type);
    if (p->source_type == NULL) return oom(err);
    p->source_vt = cat->source_find(type);
    if (p->source_vt) return FERRY_OK;
    const char *names[64];
    int n = 0;
    const struct ferry_source_vtable *const *all = cat->sources();
    for (; all && all[n] && n < 63; n++) names[n] = all[n]->name;
    names[n] = NULL;
    return unknown_type(p->source, "source", type, names, err);
}

static int load_sink_type(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    const struct ferry_connector_catalog *cat = p->catalog;
    const char *type = NULL;
    struct ferry_cfg *node = ferry_cfg_get(p->sink, "type");
    int rc = FERRY_OK;
    /* Unquoted, `null` is YAML's null; here it can only mean the null sink. An empty
     * `type:` or `~` still means nothing: silently discarding data would be the worst
     * reading of a forgotten value. */
    if (node && node->kind == FERRY_CFG_NULL && node->scalar && !strcasecmp(node->scalar, "null"))
        type = "null";
    else
        rc = ferry_cfg_str(p->sink, "type", true, &type, err);
    if (rc) return rc;
    p->sink_type = ferry_strdup(type);
    if (p->sink_type == NULL) return oom(err);
    p->sink_vt = cat->sink_find(type);
    if (p->sink_vt) return FERRY_OK;
    const char *names[64];
    int n = 0;
    const struct ferry_sink_vtable *const *all = cat->sinks();
    for (; all && all[n] && n < 63; n++) names[n] = all[n]->name;
    names[n] = NULL;
    return unknown_type(p->sink, "sink", type, names, err);
}

/* ---- resources ----------------------------------------------------------------------- */

/* A list of column names: at least one, none empty, none twice. */
static int column_list(struct ferry_cfg *item, const char *key, char ***out, int *n,
                       struct ferry_error *err)
{
    int rc = ferry_cfg_strv(item, key, false, out, n, err);
    if (rc || *out == NULL) return rc;
    struct ferry_cfg *node = ferry_cfg_get(item, key);
    if (*n == 0) return ferry_cfg_error(err, node, "must name at least one column");
    for (int i = 0; i < *n; i++) {
        if ((*out)[i][0] == '\0') return ferry_cfg_error(err, node, "a column name is empty");
        for (int j = 0; j < i; j++)
            if (!strcmp((*out)[i], (*out)[j]))
                return ferry_cfg_error(err, node, "column %s is listed twice", (*out)[i]);
    }
    return FERRY_OK;
}

static int required_with(const struct ferry_cfg *map, const char *key, const char *why,
                         struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ECONFIG, "config", "%s: %s.%s: required %s (line %d)",
                           map->file, map->path, key, why, map->line);
}

static int unquoted_target(const char *table, char **out);

/* A list of table patterns under `key`: at least one, each well-formed. */
static int pattern_list(struct ferry_cfg *item, const char *key, char ***out, int *n,
                        struct ferry_error *err)
{
    int rc = ferry_cfg_strv(item, key, false, out, n, err);
    if (rc || *out == NULL) return rc;
    struct ferry_cfg *node = ferry_cfg_get(item, key);
    if (*n == 0) return ferry_cfg_error(err, node, "must give at least one table pattern");
    for (int i = 0; i < *n; i++) {
        struct ferry_error e = {0};
        if (ferry_table_pattern_check((*out)[i], &e))
            return ferry_cfg_error(err, node, "%s", e.message);
    }
    return FERRY_OK;
}

/* `table: NAME`, or `tables: [PATTERN...]` with an optional `exclude: [PATTERN...]`. */
static int load_table_or_patterns(struct ferry_cfg *item, struct ferry_resource_spec *r,
                                  struct ferry_error *err)
{
    int rc = pattern_list(item, "tables", &r->patterns, &r->n_patterns, err);
    if (rc == FERRY_OK) rc = pattern_list(item, "exclude", &r->exclude, &r->n_exclude, err);
    if (rc) return rc;
    if (r->patterns) {
        if (ferry_cfg_get(item, "table"))
            return ferry_cfg_error(err, ferry_cfg_get(item, "table"),
                                   "give either table: or tables:, not both");
        if (ferry_cfg_get(item, "target"))
            return ferry_cfg_error(err, ferry_cfg_get(item, "target"),
                                   "target: names one table; a tables: entry writes each table "
                                   "under its own name");
        struct ferry_buf b;
    ferry_buf_init(&b, 0);
        rc = ferry_buf_printf(&b, "tables[");
        for (int i = 0; rc == FERRY_OK && i < r->n_patterns; i++)
            rc = ferry_buf_printf(&b, "%s%s", i ? ", " : "", r->patterns[i]);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, "]");
        if (rc) {
            ferry_buf_release(&b);
            return oom(err);
        }
        r->table = ferry_buf_take(&b);
        return r->table ? FERRY_OK : oom(err);
    }
    if (r->exclude)
        return ferry_cfg_error(err, ferry_cfg_get(item, "exclude"), "exclude: goes with tables:");
    const char *table = NULL;
    if ((rc = ferry_cfg_str(item, "table", true, &table, err))) return rc;
    if (table[0] == '\0')
        return ferry_cfg_error(err, ferry_cfg_get(item, "table"), "must not be empty");
    if ((r->table = ferry_strdup(table)) == NULL) return oom(err);
    if (unquoted_target(table, &r->target_default)) return oom(err);
    return FERRY_OK;
}

static int load_resource(struct ferry_pipeline_spec *p, struct ferry_cfg *item,
                         struct ferry_resource_spec *r, struct ferry_error *err)
{
    if (item->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, item, "expected a map like {table: orders, mode: full}");
    r->node = item;
    int rc = load_table_or_patterns(item, r, err);
    if (rc) return rc;

    int mode = FERRY_READ_FULL;
    if ((rc = ferry_cfg_enum(item, "mode", false, read_modes, &mode, err))) return rc;
    r->mode = (enum ferry_read_mode)mode;
    if (r->mode == FERRY_READ_INCREMENTAL && !p->source_vt->supports_incremental)
        return ferry_cfg_error(err, ferry_cfg_get(item, "mode"),
                               "source %s cannot read incrementally; use mode: full",
                               p->source_vt->name);
    if (r->mode == FERRY_READ_CDC && !p->source_vt->supports_cdc)
        return ferry_cfg_error(err, ferry_cfg_get(item, "mode"),
                               "source %s cannot capture changes (cdc); use mode: full",
                               p->source_vt->name);

    if ((rc = column_list(item, "cursor", &r->cursor, &r->n_cursor, err))) return rc;
    if (r->mode == FERRY_READ_INCREMENTAL && r->cursor == NULL &&
        !p->source_vt->incremental_without_cursor)
        return required_with(item, "cursor", "with mode: incremental", err);
    if (r->cursor && p->source_vt->incremental_without_cursor &&
        !p->source_vt->incremental_cursor_optional)
        return ferry_cfg_error(err, ferry_cfg_get(item, "cursor"),
                               "source %s keeps its own position: it reads no cursor",
                               p->source_vt->name);
    /* A cursor the read would ignore hides a mistake: refuse it. */
    if (r->mode != FERRY_READ_INCREMENTAL && r->cursor)
        return ferry_cfg_error(err, ferry_cfg_get(item, "cursor"),
                               "a cursor is only read with mode: incremental (this resource "
                               "reads mode: %s)",
                               ferry_read_mode_name(r->mode));
    if ((rc = column_list(item, "columns", &r->columns, &r->n_columns, err))) return rc;
    if ((rc = column_list(item, "key", &r->key, &r->n_key, err))) return rc;

    r->lookback_ms = 0;
    if ((rc = ferry_cfg_duration_ms(item, "lookback", false, &r->lookback_ms, err))) return rc;
    if (r->lookback_ms && r->mode != FERRY_READ_INCREMENTAL)
        return ferry_cfg_error(err, ferry_cfg_get(item, "lookback"),
                               "lookback is only read with mode: incremental");

    /* Read again (with the pipeline's as default) when the run is planned: checked here. */
    int policy = 0;
    if ((rc = ferry_cfg_enum(item, "schema_changes", false, schema_change_words, &policy, err)))
        return rc;
    enum ferry_unrepresentable unrep = FERRY_UNREP_FAIL;
    if ((rc = ferry_pipeline_unrepresentable(item, &unrep, err))) return rc;

    const char *target = NULL;
    if ((rc = ferry_cfg_str(item, "target", false, &target, err))) return rc;
    if (target && target[0] == '\0')
        return ferry_cfg_error(err, ferry_cfg_get(item, "target"), "must not be empty");
    return FERRY_OK;
}

static int load_resources(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_cfg *list;
    int rc = section(p->source, "resources", true, FERRY_CFG_LIST, &list, err);
    if (rc) return rc;
    if (list->n_children == 0)
        return ferry_cfg_error(err, list, "lists no resource; add at least one {table: ...}");
    p->resources = ferry_calloc((size_t)list->n_children, sizeof *p->resources);
    if (p->resources == NULL) return oom(err);
    for (int i = 0; i < list->n_children; i++) {
        struct ferry_resource_spec *r = &p->resources[i];
        p->n_resources = i + 1;
        if ((rc = load_resource(p, list->children[i], r, err))) return rc;
        for (int j = 0; j < i; j++) {
            const struct ferry_resource_spec *o = &p->resources[j];
            if (!strcmp(o->table, r->table))
                return ferry_cfg_error(err, ferry_cfg_get(r->node, "table"),
                                       "table %s is listed twice (first at line %d)", r->table,
                                       o->node->line);
            if (!strcmp(ferry_resource_target(o), ferry_resource_target(r)))
                return ferry_cfg_error(err, r->node,
                                       "%s and %s would both write to %s; set target: on one "
                                       "of them",
                                       o->table, r->table, ferry_resource_target(r));
        }
    }
    return FERRY_OK;
}

/* The default destination of a quoted resource name: its last dot-separated part outside
 * double quotes, unquoted (two quotes -> one), so sch."My Tab" writes to My Tab. *out stays
 * NULL when the last part is not quoted (the plain suffix after the last dot is then right)
 * or is malformed (the source reports that when it reads the table). */
static int unquoted_target(const char *table, char **out)
{
    *out = NULL;
    const char *last = table;
    bool in_q = false;
    for (const char *c = table; *c; c++) {
        if (*c == '"') in_q = !in_q;
        else if (*c == '.' && !in_q) last = c + 1;
    }
    size_t n = strlen(last);
    if (in_q || n < 3 || last[0] != '"' || last[n - 1] != '"') return FERRY_OK;
    char *s = ferry_malloc(n);
    if (s == NULL) return FERRY_ENOMEM;
    size_t o = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (last[i] == '"') {
            if (last[i + 1] != '"' || i + 2 >= n) { ferry_free(s); return FERRY_OK; }
            i++;
        }
        s[o++] = last[i];
    }
    s[o] = '\0';
    *out = s;
    return FERRY_OK;
}

const char *ferry_resource_target(const struct ferry_resource_spec *r)
{
    if (r == NULL || r->table == NULL) return NULL;
    const struct ferry_cfg *n = r->node;
    if (n && n->kind == FERRY_CFG_MAP) {
        for (int i = 0; i < n->n_children; i++) {
            const struct ferry_cfg *c = n->children[i];
            if (!strcmp(c->key, "target") && c->kind == FERRY_CFG_SCALAR && c->scalar[0])
                return c->scalar;
        }
    }
    if (r->target_default) return r->target_default;
    const char *dot = strrchr(r->table, '.');
    return dot && dot[1] ? dot + 1 : r->table;
}

char *ferry_pipeline_route(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r)
{
    if (p == NULL || r == NULL) return NULL;
    return ferry_asprintf("%s -> %s:%s", r->table, p->sink_type, ferry_resource_target(r));
}

/* ---- transforms, batch --------------------------------------------------------------- */

static int load_transforms(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_cfg *list;
    int rc = section(p->root, "transforms", false, FERRY_CFG_LIST, &list, err);
    if (rc || list == NULL) return rc;
    if (list->n_children == 0) return FERRY_OK;
    p->transforms = ferry_calloc((size_t)list->n_children, sizeof *p->transforms);
    if (p->transforms == NULL) return oom(err);
    for (int i = 0; i < list->n_children; i++) {
        struct ferry_cfg *item = list->children[i];
        struct ferry_transform_spec *t = &p->transforms[i];
        p->n_transforms = i + 1;
        t->node = item;
        char kinds[256];
        join(kinds, sizeof kinds, transform_kinds);
        if (item->kind != FERRY_CFG_MAP)
            return ferry_cfg_error(err, item, "expected a map with one of %s", kinds);
        const char *found[2] = {NULL, NULL};
        int n_found = 0;
        for (int c = 0; c < item->n_children; c++) {
            if (!in_list(item->children[c]->key, transform_kinds)) continue;
            if (n_found < 2) found[n_found] = item->children[c]->key;
            n_found++;
        }
        if (n_found == 0)
            return ferry_cfg_error(err, item, "transform %d has no kind; use exactly one of %s",
                                   i, kinds);
        if (n_found > 1)
            return ferry_cfg_error(err, item,
                                   "transform %d has several kinds (%s and %s); use exactly one "
                                   "per list item",
                                   i, found[0], found[1]);
        ferry_cfg_get(item, found[0]);
        if ((t->kind = ferry_strdup(found[0])) == NULL) return oom(err);
        const char *res = NULL;
        if ((rc = ferry_cfg_str(item, "resource", false, &res, err))) return rc;
        if (res == NULL) continue;
        bool known = false;
        for (int r = 0; r < p->n_resources && !known; r++)
            known = !strcmp(p->resources[r].table, res);
        if (!known)
            return ferry_cfg_error(err, ferry_cfg_get(item, "resource"),
                                   "no resource %s in source.resources", res);
        if ((t->resource = ferry_strdup(res)) == NULL) return oom(err);
    }
    return FERRY_OK;
}

static int in_range(struct ferry_cfg *map, const char *key, int64_t v, int64_t lo, int64_t hi,
                    const char *lo_text, const char *hi_text, struct ferry_error *err)
{
    if (v >= lo && v <= hi) return FERRY_OK;
    const struct ferry_cfg *n = ferry_cfg_get(map, key);
    return ferry_cfg_error(err, n, "must be between %s and %s, got %s", lo_text, hi_text,
                           n->scalar);
}

static int load_batch(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_batch_opts *b = &p->batch;
    b->rows = 50000;
    /* 2 MiB batches, 2 queued: a PG -> PG copy peaks near 30 MiB (docs/pipeline-file.md) */
    b->bytes = (int64_t)2 << 20;
    b->flush_after_ms = 1000;
    b->queue = 2;
    struct ferry_cfg *map;
    int rc = section(p->root, "batch", false, FERRY_CFG_MAP, &map, err);
    if (rc || map == NULL) return rc;
    if ((rc = check_keys(map, batch_keys, "batch", err))) return rc;
    if ((rc = ferry_cfg_int(map, "rows", false, 1, 10000000, &b->rows, err))) return rc;
    if ((rc = ferry_cfg_size(map, "bytes", false, &b->bytes, err))) return rc;
    if ((rc = in_range(map, "bytes", b->bytes, (int64_t)64 << 10, (int64_t)1 << 30, "64KiB",
                       "1GiB", err)))
        return rc;
    if ((rc = ferry_cfg_duration_ms(map, "flush_after", false, &b->flush_after_ms, err)))
        return rc;
    if ((rc = in_range(map, "flush_after", b->flush_after_ms, 10, 3600 * 1000, "10ms", "1h",
                       err)))
        return rc;
    return ferry_cfg_int(map, "queue", false, 1, 1024, &b->queue, err);
}

/* A Kubernetes resource quantity ("500m", "0.5", "256Mi", "1e3"): digits with an optional
 * fraction, then one of the API's suffixes or a decimal exponent. */
static bool quantity_ok(const char *q)
{
    static const char *const suffixes[] = {"",  "n",  "u",  "m",  "k",  "M",  "G",  "T", "P",
                                           "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", NULL};
    const char *p = q;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++;
    if (digits == 0) return false;
    if ((*p == 'e' || *p == 'E') && p[1] != '\0') {
        const char *x = p + 1 + (p[1] == '+' || p[1] == '-');
        if (*x == '\0') return false;
        for (; *x; x++)
            if (*x < '0' || *x > '9') return false;
        return true;
    }
    return in_list(p, suffixes);
}

/* `worker:` - what a worker of this pipeline needs when it runs as a Kubernetes Job
 * (control/k8s.c reads it from the saved request): requests, limits, pods of a sharded run.
 * Not part of the version: it moves no data elsewhere. */
static int load_worker(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_cfg *map;
    int rc = section(p->root, "worker", false, FERRY_CFG_MAP, &map, err);
    if (rc || map == NULL) return rc;
    if ((rc = check_keys(map, worker_keys, "worker", err))) return rc;
    for (int i = 0; worker_keys[i] && strcmp(worker_keys[i], "pods") != 0; i++) {
        struct ferry_cfg *n = ferry_cfg_get(map, worker_keys[i]);
        if (n == NULL) continue;
        if (n->kind != FERRY_CFG_SCALAR || n->scalar == NULL || !quantity_ok(n->scalar))
            return ferry_cfg_error(err, n,
                                   "expected a Kubernetes quantity such as \"500m\", \"2\" or "
                                   "\"256Mi\"%s%s%s",
                                   n->scalar ? ", got \"" : "", n->scalar ? n->scalar : "",
                                   n->scalar ? "\"" : "");
    }
    int64_t pods = 1;
    if ((rc = ferry_cfg_int(map, "pods", false, 1, 1000, &pods, err))) return rc;
    bool distribute = false;
    if ((rc = ferry_cfg_bool(p->root, "distribute", false, &distribute, err))) return rc;
    if (pods > 1 && !distribute)
        return ferry_cfg_error(err, ferry_cfg_get(map, "pods"),
                               "%lld pods share a run's shards only in a distributed run: add "
                               "`distribute: true`, or leave pods at 1",
                               (long long)pods);
    return FERRY_OK;
}

/* `concurrency: N` (resources copied at once, default 4) and `memory: SIZE` (every batch in
 * flight, default 256MiB); whether the budget holds one batch per flow is the runner's check
 * (it knows the readers). */
static int load_concurrency(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    p->concurrency = 4;
    p->memory = (int64_t)256 << 20;
    int rc = ferry_cfg_int(p->root, "concurrency", false, 1, 64, &p->concurrency, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(p->root, "memory", false, &p->memory, err);
    if (rc == FERRY_OK)
        rc = in_range(p->root, "memory", p->memory, (int64_t)1 << 20, (int64_t)1 << 40, "1MiB",
                      "1TiB", err);
    return rc;
}

/* retries: {max: N, backoff: 10s, max_backoff: 10m}, or `retries: N`. Absent: max -1 (the
 * caller's default: 3 under ferry serve, --retries for ferry run). */
static int load_retries(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    static const char *const keys[] = {"max", "backoff", "max_backoff", NULL};
    struct ferry_retry_policy *rp = &p->retries;
    rp->max = -1;
    rp->backoff_ms = 10000;
    rp->max_backoff_ms = 600000;
    struct ferry_cfg *n = ferry_cfg_get(p->root, "retries");
    if (n == NULL) return FERRY_OK;
    int64_t max = 0;
    int rc;
    if (n->kind == FERRY_CFG_SCALAR) {
        if ((rc = ferry_cfg_int(p->root, "retries", false, 0, 100, &max, err))) return rc;
        rp->max = (int)max;
        return FERRY_OK;
    }
    if (n->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, n, "expected a number or a map (max, backoff, max_backoff)");
    if ((rc = check_keys(n, keys, "retries", err))) return rc;
    if ((rc = ferry_cfg_int(n, "max", true, 0, 100, &max, err))) return rc;
    rp->max = (int)max;
    if ((rc = ferry_cfg_duration_ms(n, "backoff", false, &rp->backoff_ms, err))) return rc;
    if ((rc = in_range(n, "backoff", rp->backoff_ms, 100, 3600 * 1000, "100ms", "1h", err)))
        return rc;
    rp->max_backoff_ms = rp->backoff_ms > rp->max_backoff_ms ? rp->backoff_ms : rp->max_backoff_ms;
    if ((rc = ferry_cfg_duration_ms(n, "max_backoff", false, &rp->max_backoff_ms, err))) return rc;
    if ((rc = in_range(n, "max_backoff", rp->max_backoff_ms, rp->backoff_ms, 24 * 3600 * 1000,
                       "backoff", "24h", err)))
        return rc;
    return FERRY_OK;
}

/* ---- version ------------------------------------------------------------------------- */

static int json_strv(struct ferry_buf *b, char **v, int n)
{
    if (v == NULL) return ferry_buf_append(b, "null", 4);
    int rc = ferry_buf_append(b, "[", 1);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        if (i) rc = ferry_buf_append(b, ",", 1);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, v[i], strlen(v[i]));
    }
    return rc ? rc : ferry_buf_append(b, "]", 1);
}

static int json_key_str(struct ferry_buf *b, const char *key, const char *value, bool comma)
{
    int rc = ferry_buf_printf(b, "%s\"%s\":", comma ? "," : "", key);
    return rc ? rc : ferry_buf_json_string(b, value, strlen(value));
}

/* A connector section without its tuning keys and without the keys the loader owns
 * (`type` is hashed once, normalised, beside the section: `type: null` and
 * `type: "null"` are the same sink). */
static int json_section(struct ferry_buf *b, const struct ferry_cfg *node,
                        const char *const *tuning, const char *owned)
{
    size_t n = 0;
    while (tuning && tuning[n]) n++;
    const char **skip = ferry_calloc(n + 3, sizeof *skip);
    if (skip == NULL) return FERRY_ENOMEM;
    for (size_t i = 0; i < n; i++) skip[i] = tuning[i];
    skip[n] = owned;
    skip[n + 1] = "type";
    char *json = ferry_cfg_to_json(node, skip);
    ferry_free(skip);
    if (json == NULL) return FERRY_ENOMEM;
    int rc = ferry_buf_append(b, json, strlen(json));
    ferry_free(json);
    return rc;
}

/* Resources are hashed in table order: listing them differently moves no row. */
static int json_resources(struct ferry_buf *b, const struct ferry_pipeline_spec *p)
{
    int *order = ferry_malloc((size_t)p->n_resources * sizeof *order);
    if (order == NULL) return FERRY_ENOMEM;
    for (int i = 0; i < p->n_resources; i++) order[i] = i;
    for (int i = 1; i < p->n_resources; i++) {
        int v = order[i], j = i;
        while (j > 0 && strcmp(p->resources[order[j - 1]].table, p->resources[v].table) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    int rc = ferry_buf_append(b, "[", 1);
    for (int i = 0; rc == FERRY_OK && i < p->n_resources; i++) {
        const struct ferry_resource_spec *r = &p->resources[order[i]];
        if (i) rc = ferry_buf_append(b, ",", 1);
        if (rc == FERRY_OK) rc = ferry_buf_append(b, "{\"columns\":", 11);
        if (rc == FERRY_OK) rc = json_strv(b, r->columns, r->n_columns);
        if (rc == FERRY_OK) rc = ferry_buf_append(b, ",\"cursor\":", 10);
        if (rc == FERRY_OK) rc = json_strv(b, r->cursor, r->n_cursor);
        if (rc == FERRY_OK && r->exclude) { /* only when given: older hashes stay as they were */
            rc = ferry_buf_append(b, ",\"exclude\":", 11);
            if (rc == FERRY_OK) rc = json_strv(b, r->exclude, r->n_exclude);
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(b, ",\"key\":", 7);
        if (rc == FERRY_OK) rc = json_strv(b, r->key, r->n_key);
        if (rc == FERRY_OK) rc = json_key_str(b, "mode", ferry_read_mode_name(r->mode), true);
        if (rc == FERRY_OK) rc = json_key_str(b, "table", r->table, true);
        if (rc == FERRY_OK) rc = json_key_str(b, "target", ferry_resource_target(r), true);
        if (rc == FERRY_OK) rc = ferry_buf_append(b, "}", 1);
    }
    ferry_free(order);
    return rc ? rc : ferry_buf_append(b, "]", 1);
}

static int compute_version(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    /* Keys in byte order, so the text is canonical JSON like ferry_cfg_to_json's. */
    int rc = ferry_buf_append(&b, "{", 1);
    if (rc == FERRY_OK) rc = json_key_str(&b, "name", p->name, false);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ",\"resources\":", 13);
    if (rc == FERRY_OK) rc = json_resources(&b, p);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ",\"sink\":", 8);
    if (rc == FERRY_OK) rc = json_section(&b, p->sink, p->sink_vt->tuning_keys, "write");
    if (rc == FERRY_OK) rc = json_key_str(&b, "sink_type", p->sink_type, true);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ",\"source\":", 10);
    if (rc == FERRY_OK)
        rc = json_section(&b, p->source, p->source_vt->tuning_keys, "resources");
    if (rc == FERRY_OK) rc = json_key_str(&b, "source_type", p->source_type, true);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ",\"transforms\":[", 15);
    for (int i = 0; rc == FERRY_OK && i < p->n_transforms; i++) {
        if (i) rc = ferry_buf_append(&b, ",", 1);
        char *t = rc == FERRY_OK ? ferry_cfg_to_json(p->transforms[i].node, NULL) : NULL;
        if (t == NULL) rc = FERRY_ENOMEM;
        else rc = ferry_buf_append(&b, t, strlen(t));
        ferry_free(t);
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, "]", 1);
    if (rc == FERRY_OK) rc = json_key_str(&b, "write", ferry_write_mode_name(p->write), true);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, "}", 1);
    if (rc == FERRY_OK) ferry_sha256_hex(b.data, b.len, p->version);
    ferry_buf_release(&b);
    return rc ? oom(err) : FERRY_OK;
}

/* ---- load ---------------------------------------------------------------------------- */

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN) return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static int load_spec(struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    struct ferry_cfg *root = p->root;
    if (root->kind == FERRY_CFG_NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "%s: the file is empty; a pipeline file starts with version: 1",
                               root->file);
    if (root->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, root, "expected a map of keys (version, name, source, sink)");
    int rc = check_keys(root, top_keys, "the top level", err);
    if (rc) return rc;

    int64_t version = 0;
    if ((rc = ferry_cfg_int(root, "version", true, INT64_MIN, INT64_MAX, &version, err)))
        return rc;
    if (version != 1)
        return ferry_cfg_error(err, ferry_cfg_get(root, "version"),
                               "unsupported version %lld; this ferry reads version 1",
                               (long long)version);

    const char *name = NULL;
    if ((rc = ferry_cfg_str(root, "name", true, &name, err))) return rc;
    if (!name_ok(name))
        return ferry_cfg_error(err, ferry_cfg_get(root, "name"),
                               "expected 1 to %d letters, digits, '_', '.' or '-', got \"%.*s\"",
                               NAME_MAX_LEN, 60, name);
    if ((p->name = ferry_strdup(name)) == NULL) return oom(err);

    if ((rc = section(root, "source", true, FERRY_CFG_MAP, &p->source, err))) return rc;
    if ((rc = load_source_type(p, err))) return rc;
    int policy = FERRY_SCHEMA_EVOLVE;
    if ((rc = ferry_cfg_enum(root, "schema_changes", false, schema_change_words, &policy, err)))
        return rc;
    p->schema_changes = (enum ferry_schema_changes)policy;
    p->on_unrepresentable = FERRY_UNREP_FAIL;
    if ((rc = ferry_pipeline_unrepresentable(root, &p->on_unrepresentable, err))) return rc;
    if ((rc = load_resources(p, err))) return rc;

    if ((rc = section(root, "sink", true, FERRY_CFG_MAP, &p->sink, err))) return rc;
    if ((rc = load_sink_type(p, err))) return rc;
    int write = FERRY_WRITE_APPEND;
    if ((rc = ferry_cfg_enum(p->sink, "write", false, write_modes, &write, err))) return rc;
    p->write = (enum ferry_write_mode)write;

    if ((rc = load_transforms(p, err))) return rc;
    if ((rc = load_batch(p, err))) return rc;
    if ((rc = load_worker(p, err))) return rc;
    if ((rc = load_retries(p, err))) return rc;
    if ((rc = load_concurrency(p, err))) return rc;
    if ((rc = ferry_notify_check(ferry_cfg_get(root, "notify"), err))) return rc;
    static const char *const on_res_words[] = {"fail", "continue", NULL};
    int on_res = 0;
    if ((rc = ferry_cfg_enum(root, "on_resource_error", false, on_res_words, &on_res, err)))
        return rc;
    p->on_resource_error_continue = on_res == 1;

    int verify = -1;
    if ((rc = ferry_cfg_enum(root, "verify", false, verify_words, &verify, err))) return rc;
    if (verify >= 0 && (p->verify = ferry_strdup(verify_words[verify])) == NULL) return oom(err);

    if ((rc = compute_version(p, err))) return rc;
    p->request_json = ferry_cfg_to_json(root, NULL);
    return p->request_json ? FERRY_OK : oom(err);
}

/* Takes root, whatever happens. */
static int load(struct ferry_cfg *root, const char *file, const struct ferry_connector_catalog *cat,
                struct ferry_pipeline_spec **out, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = ferry_calloc(1, sizeof *p);
    if (p == NULL) {
        ferry_cfg_free(root);
        return oom(err);
    }
    p->root = root;
    p->catalog = cat;
    p->file = ferry_strdup(file);
    int rc = p->file ? load_spec(p, err) : oom(err);
    if (rc) {
        ferry_pipeline_free(p);
        return rc;
    }
    *out = p;
    return FERRY_OK;
}

int ferry_pipeline_parse(const char *path, const struct ferry_connector_catalog *cat,
                         struct ferry_pipeline_spec **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_cfg *root;
    int rc = ferry_cfg_parse_file(path, &root, err);
    return rc ? rc : load(root, path, cat, out, err);
}

int ferry_pipeline_parse_string(const char *text, size_t len, const char *name,
                                const struct ferry_connector_catalog *cat,
                                struct ferry_pipeline_spec **out, struct ferry_error *err)
{
    *out = NULL;
    if (name == NULL) name = "<string>";
    struct ferry_cfg *root;
    int rc = ferry_cfg_parse_string(text, len, name, &root, err);
    return rc ? rc : load(root, name, cat, out, err);
}

void ferry_resource_spec_release(struct ferry_resource_spec *r)
{
    ferry_free(r->table);
    ferry_free(r->target_default);
    ferry_cfg_strv_free(r->cursor);
    ferry_cfg_strv_free(r->columns);
    ferry_cfg_strv_free(r->key);
    ferry_cfg_strv_free(r->patterns);
    ferry_cfg_strv_free(r->exclude);
    *r = (struct ferry_resource_spec){0};
}

void ferry_pipeline_free(struct ferry_pipeline_spec *p)
{
    if (p == NULL) return;
    for (int i = 0; i < p->n_resources; i++) {
        struct ferry_resource_spec *r = &p->resources[i];
        ferry_resource_spec_release(r);
    }
    ferry_free(p->resources);
    for (int i = 0; i < p->n_transforms; i++) {
        ferry_free(p->transforms[i].resource);
        ferry_free(p->transforms[i].kind);
    }
    ferry_free(p->transforms);
    ferry_free(p->name);
    ferry_free(p->source_type);
    ferry_free(p->sink_type);
    ferry_free(p->verify);
    ferry_free(p->request_json);
    ferry_free(p->file);
    ferry_cfg_free(p->root);
    ferry_free(p);
}
