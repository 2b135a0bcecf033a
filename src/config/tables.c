/* config/tables.c - table patterns: `tables: [PATTERN, ...]` and `exclude: [PATTERN, ...]`.
 *
 * A pattern is `schema.name` or `name`. Each part is either a glob (`*` any run of
 * characters, `?` one character, compared case-insensitively in ASCII) or a double-quoted
 * name matched exactly (`""` inside stands for one quote). A pattern without a schema part
 * matches tables of the source's default schema (postgres: public, sqlite: main).
 *
 * ferry_tables_expand() turns every pattern entry of a loaded pipeline into one resource
 * per table the source lists (its `list_tables` slot), largest first, after the explicit
 * `table:` entries, which win over a pattern naming the same table. A pattern that matches
 * nothing is an error naming it. Callers: the runner (run and check), verify, cdc drop.
 * Calls: nothing above config/ but the source vtable it is handed. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "ferry/tables.h"

/* One part of a pattern, unquoted: the glob text or the exact name. */
struct part {
    char *text;
    bool exact;
};

struct pattern {
    struct part schema; /* text NULL: the source's default schema */
    struct part name;
};

static void pattern_free(struct pattern *p)
{
    ferry_free(p->schema.text);
    ferry_free(p->name.text);
    p->schema.text = p->name.text = NULL;
}

/* Reads one part starting at *s: a quoted name or a glob up to the next '.' or the end. */
static int parse_part(const char **s, struct part *out)
{
    const char *c = *s;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (*c == '"') {
        out->exact = true;
        for (c++;; c++) {
            if (*c == '\0') goto bad;
            if (*c == '"') {
                if (c[1] != '"') break;
                c++;
            }
            if (ferry_buf_append(&b, c, 1)) goto bad;
        }
        c++;
        if (b.len == 0) goto bad;
    } else {
        out->exact = false;
        for (; *c && *c != '.' && *c != '"'; c++)
            if (ferry_buf_append(&b, c, 1)) goto bad;
        if (b.len == 0) goto bad;
    }
    if ((out->text = ferry_buf_take(&b)) == NULL) return FERRY_ENOMEM;
    *s = c;
    return FERRY_OK;
bad:
    ferry_buf_release(&b);
    return FERRY_EINVAL;
}

int ferry_table_pattern_check(const char *text, struct ferry_error *err)
{
    struct pattern p;
    int rc = ferry__table_pattern_parse(text, &p.schema.text, &p.schema.exact, &p.name.text,
                                        &p.name.exact);
    if (rc == FERRY_OK) pattern_free(&p);
    if (rc == FERRY_EINVAL)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "table pattern '%s' is malformed: expected schema.name or name, "
                               "each part a glob (* and ?) or a \"quoted\" name",
                               text);
    if (rc) return ferry_error_set(err, rc, "config", "out of memory");
    return FERRY_OK;
}

int ferry__table_pattern_parse(const char *text, char **schema, bool *schema_exact, char **name,
                               bool *name_exact)
{
    struct part a = {0}, b = {0};
    const char *s = text;
    *schema = *name = NULL;
    int rc = parse_part(&s, &a);
    if (rc) return rc;
    if (*s == '\0') { /* one part: the name */
        *name = a.text;
        *name_exact = a.exact;
        return FERRY_OK;
    }
    if (*s != '.') goto bad;
    s++;
    if ((rc = parse_part(&s, &b))) goto fail;
    if (*s != '\0') goto bad;
    *schema = a.text;
    *schema_exact = a.exact;
    *name = b.text;
    *name_exact = b.exact;
    return FERRY_OK;
bad:
    rc = FERRY_EINVAL;
fail:
    ferry_free(a.text);
    ferry_free(b.text);
    return rc;
}

/* Glob with * and ?, ASCII case-insensitive; iterative with one backtrack point. */
static bool glob_match(const char *g, const char *s)
{
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*g == '*') {
            star = g++;
            resume = s;
        } else if (*g == '?' || (*g && tolower((unsigned char)*g) == tolower((unsigned char)*s))) {
            g++;
            s++;
        } else if (star) {
            g = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*g == '*') g++;
    return *g == '\0';
}

static bool part_match(const struct part *p, const char *s)
{
    return p->exact ? strcmp(p->text, s) == 0 : glob_match(p->text, s);
}

bool ferry_table_pattern_match(const char *pattern, const char *default_schema, const char *schema,
                               const char *name)
{
    struct pattern p;
    if (ferry__table_pattern_parse(pattern, &p.schema.text, &p.schema.exact, &p.name.text,
                                   &p.name.exact))
        return false;
    bool ok;
    if (p.schema.text == NULL)
        ok = default_schema && !strcmp(schema, default_schema) && part_match(&p.name, name);
    else
        ok = part_match(&p.schema, schema) && part_match(&p.name, name);
    pattern_free(&p);
    return ok;
}

/* A plain identifier: lower-case letters, digits and underscores, not starting with a digit. */
static bool plain_ident(const char *s)
{
    if (!*s || isdigit((unsigned char)*s)) return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return false;
    return true;
}

static int append_ident(struct ferry_buf *b, const char *s)
{
    if (plain_ident(s)) return ferry_buf_append(b, s, strlen(s));
    int rc = ferry_buf_append(b, "\"", 1);
    for (; *s && rc == FERRY_OK; s++)
        rc = *s == '"' ? ferry_buf_append(b, "\"\"", 2) : ferry_buf_append(b, s, 1);
    return rc ? rc : ferry_buf_append(b, "\"", 1);
}

char *ferry_table_qualified(const char *schema, const char *name)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = FERRY_OK;
    if (schema && *schema) {
        rc = append_ident(&b, schema);
        if (rc == FERRY_OK) rc = ferry_buf_append(&b, ".", 1);
    }
    if (rc == FERRY_OK) rc = append_ident(&b, name);
    if (rc) {
        ferry_buf_release(&b);
        return NULL;
    }
    return ferry_buf_take(&b);
}

void ferry_table_list_free(struct ferry_table_info *v, int n)
{
    for (int i = 0; v && i < n; i++) {
        ferry_free(v[i].schema);
        ferry_free(v[i].name);
    }
    ferry_free(v);
}

/* ---- expansion ----------------------------------------------------------------------- */

bool ferry_tables_pending(const struct ferry_pipeline_spec *p)
{
    for (int i = 0; i < p->n_resources; i++)
        if (p->resources[i].patterns) return true;
    return false;
}

static bool any_match(char **patterns, int n, const char *def, const struct ferry_table_info *t)
{
    for (int i = 0; i < n; i++)
        if (ferry_table_pattern_match(patterns[i], def, t->schema, t->name)) return true;
    return false;
}

/* The table t as an explicit resource already names it (same qualified name). */
static bool named_explicitly(const struct ferry_pipeline_spec *p, const char *qualified,
                             const struct ferry_table_info *t, const char *def)
{
    for (int i = 0; i < p->n_resources; i++) {
        const struct ferry_resource_spec *r = &p->resources[i];
        if (r->patterns) continue;
        if (!strcmp(r->table, qualified)) return true;
        /* `orders` names def.orders */
        if (def && !strcmp(t->schema, def) && !strcmp(r->table, t->name)) return true;
    }
    return false;
}

static char **strv_dup(char **v, int n)
{
    if (v == NULL) return NULL;
    char **out = ferry_calloc((size_t)n + 1, sizeof *out);
    for (int i = 0; out && i < n; i++)
        if ((out[i] = ferry_strdup(v[i])) == NULL) {
            ferry_cfg_strv_free(out);
            return NULL;
        }
    return out;
}

/* A resource for table t, with the pattern entry's settings. */
static int resource_from(const struct ferry_resource_spec *tmpl, const struct ferry_table_info *t,
                         const char *def, struct ferry_resource_spec *r)
{
    *r = (struct ferry_resource_spec){
        .mode = tmpl->mode,
        .n_cursor = tmpl->n_cursor,
        .n_columns = tmpl->n_columns,
        .n_key = tmpl->n_key,
        .lookback_ms = tmpl->lookback_ms,
        .node = tmpl->node,
        .expanded = true,
    };
    /* a table of the default schema keeps the name `table: NAME` gives it (same route) */
    bool bare = def && !strcmp(t->schema, def);
    r->table = ferry_table_qualified(bare ? NULL : t->schema, t->name);
    r->cursor = strv_dup(tmpl->cursor, tmpl->n_cursor);
    r->columns = strv_dup(tmpl->columns, tmpl->n_columns);
    r->key = strv_dup(tmpl->key, tmpl->n_key);
    if (r->table && strcmp(r->table, t->name) && (r->target_default = ferry_strdup(t->name)) == NULL)
        return FERRY_ENOMEM;
    if (!r->table || (tmpl->cursor && !r->cursor) || (tmpl->columns && !r->columns) ||
        (tmpl->key && !r->key))
        return FERRY_ENOMEM;
    return FERRY_OK;
}

static int by_size_desc(const void *a, const void *b)
{
    const struct ferry_table_info *x = *(const struct ferry_table_info *const *)a;
    const struct ferry_table_info *y = *(const struct ferry_table_info *const *)b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    int c = strcmp(x->schema, y->schema);
    return c ? c : strcmp(x->name, y->name);
}

/* The tables pattern entry `tmpl` takes, in order, into pick[*n_pick]; taken[] marks the
 * tables earlier entries took. */
static int select_tables(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *tmpl,
                         const struct ferry_table_info *tables, int n, const char *def,
                         bool *taken, const struct ferry_table_info **pick, int *n_pick,
                         struct ferry_error *err)
{
    for (int k = 0; k < tmpl->n_patterns; k++) {
        bool hit = false;
        for (int t = 0; t < n && !hit; t++)
            hit = ferry_table_pattern_match(tmpl->patterns[k], def, tables[t].schema, tables[t].name);
        if (!hit)
            return ferry_error_set(err, FERRY_ENOTFOUND, "config",
                                   "%s: line %d: table pattern '%s' matches no table of the source",
                                   tmpl->node ? tmpl->node->file : "pipeline",
                                   tmpl->node ? tmpl->node->line : 0, tmpl->patterns[k]);
    }
    *n_pick = 0;
    for (int t = 0; t < n; t++) {
        if (taken[t] || !any_match(tmpl->patterns, tmpl->n_patterns, def, &tables[t])) continue;
        if (any_match(tmpl->exclude, tmpl->n_exclude, def, &tables[t])) continue;
        char *q = ferry_table_qualified(tables[t].schema, tables[t].name);
        if (q == NULL) return ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
        bool expl = named_explicitly(p, q, &tables[t], def);
        ferry_free(q);
        if (expl) continue;
        taken[t] = true;
        pick[(*n_pick)++] = &tables[t];
    }
    qsort(pick, (size_t)*n_pick, sizeof *pick, by_size_desc);
    return FERRY_OK;
}

static void resources_free(struct ferry_resource_spec *v, int n)
{
    for (int i = 0; i < n; i++) ferry_resource_spec_release(&v[i]);
    ferry_free(v);
}

/* Two resources writing one destination table. */
static int check_targets(const struct ferry_resource_spec *v, int n, struct ferry_error *err)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(ferry_resource_target(&v[i]), ferry_resource_target(&v[j])))
                return ferry_error_set(err, FERRY_ECONFIG, "config",
                                       "%s and %s would both write to %s; exclude one of them or "
                                       "list it with its own target:",
                                       v[j].table, v[i].table, ferry_resource_target(&v[i]));
    return FERRY_OK;
}

int ferry_tables_expand(struct ferry_pipeline_spec *p, const struct ferry_table_info *tables,
                        int n, const char *default_schema, struct ferry_error *err)
{
    bool *taken = ferry_calloc((size_t)n + 1, sizeof *taken);
    const struct ferry_table_info **pick = ferry_calloc((size_t)n + 1, sizeof *pick);
    struct ferry_resource_spec *out = ferry_calloc((size_t)p->n_resources + (size_t)n + 1, sizeof *out);
    int n_out = 0, rc = FERRY_OK;
    if (!taken || !pick || !out) rc = ferry_error_set(err, FERRY_ENOMEM, "config", "out of memory");
    /* explicit entries first, moved over as they are (on error they are moved back) */
    for (int i = 0; rc == FERRY_OK && i < p->n_resources; i++)
        if (!p->resources[i].patterns) out[n_out++] = p->resources[i];
    int n_explicit = n_out;
    for (int i = 0; rc == FERRY_OK && i < p->n_resources; i++) {
        const struct ferry_resource_spec *tmpl = &p->resources[i];
        if (!tmpl->patterns) continue;
        int n_pick = 0;
        rc = select_tables(p, tmpl, tables, n, default_schema, taken, pick, &n_pick, err);
        for (int k = 0; rc == FERRY_OK && k < n_pick; k++) {
            rc = resource_from(tmpl, pick[k], default_schema, &out[n_out++]);
            if (rc) rc = ferry_error_set(err, rc, "config", "out of memory");
        }
    }
    if (rc == FERRY_OK) rc = check_targets(out, n_out, err);
    if (rc == FERRY_OK) {
        for (int i = 0; i < p->n_resources; i++)
            if (p->resources[i].patterns) ferry_resource_spec_release(&p->resources[i]);
        ferry_free(p->resources);
        p->resources = out;
        p->n_resources = n_out;
    } else if (out) {
        /* the explicit entries still belong to p */
        for (int i = 0; i < n_explicit; i++) out[i] = (struct ferry_resource_spec){0};
        resources_free(out, n_out);
    }
    ferry_free(taken);
    ferry_free(pick);
    return rc;
}

int ferry_tables_expand_source(struct ferry_pipeline_spec *p, void *src_ctx, struct ferry_error *err)
{
    if (!ferry_tables_pending(p)) return FERRY_OK;
    if (p->source_vt == NULL || p->source_vt->list_tables == NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "%s: source %s cannot list its tables: name each with table:",
                               p->file ? p->file : "pipeline", p->source_type);
    struct ferry_table_info *tables = NULL;
    char *def = NULL;
    int n = 0;
    int rc = p->source_vt->list_tables(src_ctx, &tables, &n, &def, err);
    if (rc == FERRY_OK) rc = ferry_tables_expand(p, tables, n, def, err);
    ferry_table_list_free(tables, n);
    ferry_free(def);
    return rc;
}
