/* pipeline/transform.c - compiles and applies the transforms of one resource.
 *
 * Owns: the chain of steps, the schema after each step and the constants parsed at compile
 * time. Calls: batch (new, copy, readers, text forms), config accessors, SHA-256/HMAC.
 * Called by the flow's transform stage (pipeline/flow.c) and by the runner at plan time
 * (to know the sink's schema) and once the run exists (ferry_transforms_set_run). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "ferry/connector.h"
#include "ferry/core.h"
#include "pipeline/transform.h"

enum step_kind { STEP_PROJECT, STEP_HASH, STEP_MASK, STEP_ADD, STEP_FILTER, STEP_CAST };
enum add_kind { ADD_CONST, ADD_RUN_ID, ADD_LOAD_TIME, ADD_POSITION };
enum filter_op { OP_EQ, OP_NE, OP_IN, OP_IS_NULL, OP_GT, OP_LT };

/* A constant (or a parsed text value) in a column's type. Text points into memory the
 * step owns (text, list) or into the batch being cast. */
struct konst {
    bool b;
    int64_t i; /* ints, date32 (days), time64, timestamps (microseconds) */
    double f;
    struct ferry_decimal128 d;
    uint8_t u[16];
    const char *s; /* utf8, json, decimal_text */
    size_t n;
};

struct step {
    enum step_kind kind;
    int index;                   /* the transform's index in the file, for messages */
    struct ferry_schema *schema; /* schema after this step */
    int *map;                    /* PROJECT: input column of each output column */
    int column;                  /* HASH, MASK, FILTER, CAST: column index */
    bool hmac;
    char *key;                   /* HASH hmac: resolved secret */
    size_t key_len;
    int64_t keep_last;           /* MASK */
    char mask[5];
    size_t mask_len;
    enum add_kind add;           /* ADD */
    char *text;                  /* ADD: the constant; FILTER: the single constant */
    enum filter_op op;           /* FILTER */
    bool want_null;
    char **list;                 /* FILTER in: the values as written */
    struct konst *vals;
    int n_vals;
};

struct ferry_transform_chain {
    int n_steps;
    struct step *steps;
    bool has_run;
    int64_t run_id;
    bool specials; /* batches may hold special values (ferry_transforms_set_specials) */
    bool push_done; /* ferry_transforms_pushdown: built once */
    struct ferry_read_filter *push;
    int n_push;
};

static void step_clear(struct step *st)
{
    ferry_schema_unref(st->schema);
    ferry_free(st->map);
    if (st->key) ferry_secret_free(st->key);
    ferry_free(st->text);
    ferry_cfg_strv_free(st->list);
    ferry_free(st->vals);
}

void ferry_transforms_free(struct ferry_transform_chain *chain)
{
    if (chain == NULL) return;
    for (int i = 0; i < chain->n_steps; i++)
        step_clear(&chain->steps[i]);
    ferry_free(chain->steps);
    for (int i = 0; i < chain->n_push; i++) {
        ferry_free((char *)chain->push[i].column);
        ferry_free((int64_t *)chain->push[i].values);
    }
    ferry_free(chain->push);
    ferry_free(chain);
}

void ferry_transforms_set_specials(struct ferry_transform_chain *chain, bool specials)
{
    if (chain) chain->specials = specials;
}

void ferry_transforms_set_run(struct ferry_transform_chain *chain, int64_t run_id)
{
    if (chain == NULL) return;
    chain->has_run = true;
    chain->run_id = run_id;
}

/* A new field appended after the projected ones (add). */
struct extra_field {
    const char *name;
    enum ferry_type type;
    bool nullable;
};

/* A new schema holding `n` fields of `in` picked by map[], with names[] overriding names
 * (NULL entries keep the name) and types[] overriding types (0 keeps it), then `extra`. */
static int schema_from_ex(const struct ferry_schema *in, int n, const int *map,
                          char *const *names, const enum ferry_type *types,
                          const struct extra_field *extra, struct ferry_schema **out,
                          struct ferry_error *err)
{
    struct ferry_schema *s = ferry_schema_new();
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    for (int j = 0; j < n; j++) {
        const struct ferry_field *f = &in->fields[map[j]];
        enum ferry_type t = types && types[j] ? types[j] : f->type;
        int rc = ferry_schema_add_field(s, names && names[j] ? names[j] : f->name, t, f->nullable,
                                        err);
        if (rc != FERRY_OK) {
            ferry_schema_unref(s);
            return rc;
        }
        struct ferry_field *nf = &s->fields[s->n_fields - 1];
        if (t == f->type) {
            nf->precision = f->precision;
            nf->scale = f->scale;
        }
        nf->key_pos = f->key_pos;
        /* The source's own type stays with values this step does not change. */
        if (!(types && types[j]))
            rc = ferry_schema_set_origin(s, s->n_fields - 1, f->origin_type, err);
        if (rc != FERRY_OK) {
            ferry_schema_unref(s);
            return rc;
        }
    }
    if (extra) {
        int rc = ferry_schema_add_field(s, extra->name, extra->type, extra->nullable, err);
        if (rc != FERRY_OK) {
            ferry_schema_unref(s);
            return rc;
        }
    }
    /* Key positions must stay dense (1..n) after a projection dropped some. */
    int next = 1;
    for (int k = 1; k <= in->n_key; k++)
        for (int j = 0; j < s->n_fields; j++)
            if (s->fields[j].key_pos == k) s->fields[j].key_pos = next++;
    int rc = ferry_schema_finish(s, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(s);
        return rc;
    }
    *out = s;
    return FERRY_OK;
}

static int schema_from(const struct ferry_schema *in, int n, const int *map, char *const *names,
                       const enum ferry_type *types, struct ferry_schema **out,
                       struct ferry_error *err)
{
    return schema_from_ex(in, n, map, names, types, NULL, out, err);
}

static int find_column(const struct ferry_schema *s, struct ferry_cfg *node, const char *name,
                       const char *resource, int *idx, struct ferry_error *err)
{
    *idx = ferry_schema_find(s, name);
    if (*idx < 0)
        return ferry_cfg_error(err, node, "column \"%s\" is not in resource %s", name, resource);
    return FERRY_OK;
}

/* A projection keeps every key column or none: with part of a composite key, rows that
 * differ only in a dropped key column would collide in the sink (an upsert would silently
 * merge them). Without any key column the table simply has no key, which the policy checks
 * against the write mode. */
static int check_whole_key(const struct ferry_schema *cur, const int *map, int m,
                           struct ferry_cfg *node, const char *resource, struct ferry_error *err)
{
    int kept = 0, missing = -1;
    for (int k = 0; k < cur->n_key; k++) {
        bool in = false;
        for (int j = 0; j < m && !in; j++) in = map[j] == cur->key[k];
        if (in)
            kept++;
        else if (missing < 0)
            missing = cur->key[k];
    }
    if (kept == 0 || kept == cur->n_key) return FERRY_OK;
    char keys[512];
    size_t o = 0;
    keys[0] = '\0';
    for (int k = 0; k < cur->n_key && o < sizeof keys; k++)
        o += (size_t)snprintf(keys + o, sizeof keys - o, "%s%s", k ? ", " : "",
                              cur->fields[cur->key[k]].name);
    return ferry_cfg_error(err, node,
                           "column \"%s\" is part of the key of %s (%s); keep every key column "
                           "or drop them all",
                           cur->fields[missing].name, resource, keys);
}

static int add_step(struct ferry_transform_chain *c, struct step st, struct ferry_error *err)
{
    struct step *v = ferry_realloc(c->steps, sizeof *v * (size_t)(c->n_steps + 1));
    if (v == NULL) return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    c->steps = v;
    c->steps[c->n_steps++] = st;
    return FERRY_OK;
}

/* drop / select / rename */
static int compile_projection(const struct ferry_transform_spec *t, const char *resource,
                              const struct ferry_schema *cur, struct step *st,
                              struct ferry_error *err)
{
    int n = cur->n_fields, m = 0;
    int *map = ferry_calloc((size_t)n + 1, sizeof *map);
    char **names = ferry_calloc((size_t)n + 1, sizeof *names);
    int rc = FERRY_OK;
    if (map == NULL || names == NULL) {
        rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
        goto out;
    }
    if (!strcmp(t->kind, "drop") || !strcmp(t->kind, "select")) {
        char **cols = NULL;
        int ncols = 0;
        rc = ferry_cfg_strv(t->node, t->kind, true, &cols, &ncols, err);
        if (rc != FERRY_OK) goto out;
        struct ferry_cfg *kn = ferry_cfg_get(t->node, t->kind);
        bool *listed = ferry_calloc((size_t)n + 1, sizeof *listed);
        if (listed == NULL) {
            ferry_cfg_strv_free(cols);
            rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
            goto out;
        }
        for (int i = 0; i < ncols && rc == FERRY_OK; i++) {
            int idx;
            rc = find_column(cur, kn, cols[i], resource, &idx, err);
            if (rc == FERRY_OK && listed[idx])
                rc = ferry_cfg_error(err, kn, "column \"%s\" listed twice", cols[i]);
            if (rc == FERRY_OK) {
                listed[idx] = true;
                if (!strcmp(t->kind, "select")) map[m++] = idx;
            }
        }
        if (rc == FERRY_OK && !strcmp(t->kind, "drop"))
            for (int i = 0; i < n; i++)
                if (!listed[i]) map[m++] = i;
        if (rc == FERRY_OK && m == 0)
            rc = ferry_cfg_error(err, kn, "no column of resource %s would remain", resource);
        if (rc == FERRY_OK) rc = check_whole_key(cur, map, m, kn, resource, err);
        ferry_free(listed);
        ferry_cfg_strv_free(cols);
    } else { /* rename */
        struct ferry_cfg *kn = ferry_cfg_get(t->node, "rename");
        if (kn == NULL || kn->kind != FERRY_CFG_MAP) {
            rc = ferry_cfg_error(err, kn ? kn : t->node, "expected a map {old: new}");
            goto out;
        }
        for (int i = 0; i < n; i++) map[m++] = i;
        for (int i = 0; i < kn->n_children && rc == FERRY_OK; i++) {
            struct ferry_cfg *e = kn->children[i];
            e->used = true;
            int idx;
            rc = find_column(cur, e, e->key, resource, &idx, err);
            if (rc != FERRY_OK) break;
            if (e->kind != FERRY_CFG_SCALAR || e->scalar[0] == '\0') {
                rc = ferry_cfg_error(err, e, "expected the new column name");
                break;
            }
            names[idx] = e->scalar;
        }
        for (int i = 0; i < n && rc == FERRY_OK; i++)
            for (int j = i + 1; j < n && rc == FERRY_OK; j++) {
                const char *a = names[i] ? names[i] : cur->fields[i].name;
                const char *b = names[j] ? names[j] : cur->fields[j].name;
                if (!strcmp(a, b))
                    rc = ferry_cfg_error(err, kn, "two columns would be named \"%s\"", a);
            }
    }
    if (rc == FERRY_OK) rc = schema_from(cur, m, map, names, NULL, &st->schema, err);
    if (rc == FERRY_OK) {
        st->kind = STEP_PROJECT;
        st->map = map;
        map = NULL;
    }
out:
    ferry_free(map);
    ferry_free(names);
    return rc;
}

static int compile_hash(const struct ferry_transform_spec *t, const char *resource,
                        const struct ferry_schema *cur, struct step *st, struct ferry_error *err)
{
    static const char *const algos[] = {"sha256", "hmac_sha256", NULL};
    int algo = 0;
    const char *col = NULL;
    int rc = ferry_cfg_enum(t->node, "hash", true, algos, &algo, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(t->node, "column", true, &col, err);
    if (rc != FERRY_OK) return rc;
    int idx;
    rc = find_column(cur, ferry_cfg_get(t->node, "column"), col, resource, &idx, err);
    if (rc != FERRY_OK) return rc;
    if (cur->fields[idx].key_pos > 0)
        return ferry_cfg_error(err, ferry_cfg_get(t->node, "column"),
                               "column \"%s\" is part of the key of %s and cannot be hashed", col,
                               resource);
    st->kind = STEP_HASH;
    st->column = idx;
    st->hmac = algo == 1;
    if (st->hmac) {
        rc = ferry_cfg_secret(t->node, "key", true, false, &st->key, err);
        if (rc != FERRY_OK) return rc;
        st->key_len = strlen(st->key);
    }
    int *map = ferry_calloc((size_t)cur->n_fields, sizeof *map);
    enum ferry_type *types = ferry_calloc((size_t)cur->n_fields, sizeof *types);
    if (map == NULL || types == NULL) {
        ferry_free(map);
        ferry_free(types);
        return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    }
    for (int i = 0; i < cur->n_fields; i++) map[i] = i;
    types[idx] = FERRY_TYPE_UTF8;
    rc = schema_from(cur, cur->n_fields, map, NULL, types, &st->schema, err);
    ferry_free(map);
    ferry_free(types);
    return rc;
}

/* ---- constants in a column's type (filter constants, cast of text values) ---- */

/* Digits of a decimal text split for comparing: sign, integer digits without leading
 * zeros, fraction digits without trailing zeros; NaN sorts above every number and equals
 * itself (as in PostgreSQL). */
struct dec_parts {
    bool nan, neg;
    const char *ip, *fp;
    size_t in, fn;
};

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool dec_split(const char *s, size_t n, struct dec_parts *d)
{
    memset(d, 0, sizeof *d);
    if (n == 3 && strncasecmp(s, "NaN", 3) == 0) {
        d->nan = true;
        return true;
    }
    size_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) d->neg = s[i++] == '-';
    size_t a = i;
    while (i < n && is_digit(s[i]))
        i++;
    d->ip = s + a;
    d->in = i - a;
    d->fp = s + i;
    if (i < n && s[i] == '.') {
        size_t f = ++i;
        while (i < n && is_digit(s[i]))
            i++;
        d->fp = s + f;
        d->fn = i - f;
    }
    if (i != n || d->in + d->fn == 0) return false;
    while (d->in > 0 && d->ip[0] == '0') {
        d->ip++;
        d->in--;
    }
    while (d->fn > 0 && d->fp[d->fn - 1] == '0')
        d->fn--;
    if (d->in == 0 && d->fn == 0) d->neg = false; /* -0 == 0 */
    return true;
}

static int sign_of(int c)
{
    return (c > 0) - (c < 0);
}

static int dec_text_cmp(const struct dec_parts *a, const struct dec_parts *b)
{
    if (a->nan || b->nan) return (int)a->nan - (int)b->nan;
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int mag;
    if (a->in != b->in) {
        mag = a->in < b->in ? -1 : 1;
    } else if ((mag = a->in ? sign_of(memcmp(a->ip, b->ip, a->in)) : 0) == 0) {
        size_t m = a->fn < b->fn ? a->fn : b->fn;
        mag = m ? sign_of(memcmp(a->fp, b->fp, m)) : 0;
        if (mag == 0) mag = (a->fn > b->fn) - (a->fn < b->fn);
    }
    return a->neg ? -mag : mag;
}

static bool parse_int_text(const char *s, size_t n, enum ferry_type t, int64_t *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!is_digit(buf[0]) && !((buf[0] == '-' || buf[0] == '+') && is_digit(buf[1])))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (t == FERRY_TYPE_INT8) lo = INT8_MIN, hi = INT8_MAX;
    if (t == FERRY_TYPE_INT16) lo = INT16_MIN, hi = INT16_MAX;
    if (t == FERRY_TYPE_INT32) lo = INT32_MIN, hi = INT32_MAX;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* A finite text never becomes +-Infinity, nor a nonzero one 0 (out of range: refused);
 * "NaN", "Infinity", "-Infinity" and "-0" are read as themselves. */
static bool parse_float_text(const char *s, size_t n, bool single, double *out)
{
    char buf[128];
    if (n == 0 || n >= sizeof buf || s[0] == ' ') return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    *out = single ? (double)strtof(buf, &end) : strtod(buf, &end);
    if (*end != '\0') return false;
    return !(errno == ERANGE && (isinf(*out) || *out == 0));
}

/* Text in the forms of ferry/batch.h -> a value of type t (precision/scale for decimal128).
 * False when it does not parse or does not fit. */
static bool parse_value(enum ferry_type t, int precision, int scale, const char *s, size_t n,
                        struct konst *k)
{
    memset(k, 0, sizeof *k);
    switch (t) {
    case FERRY_TYPE_BOOL:
        if (n == 4 && strncasecmp(s, "true", 4) == 0) k->b = true;
        else if (!(n == 5 && strncasecmp(s, "false", 5) == 0)) return false;
        return true;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64: return parse_int_text(s, n, t, &k->i);
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: return parse_float_text(s, n, t == FERRY_TYPE_FLOAT32, &k->f);
    case FERRY_TYPE_DECIMAL128:
        return ferry_decimal128_from_text(s, n, precision, scale, &k->d) == FERRY_OK;
    case FERRY_TYPE_DECIMAL_TEXT: {
        struct dec_parts d;
        if (!dec_split(s, n, &d)) return false;
        k->s = s;
        k->n = n;
        return true;
    }
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
        k->s = s;
        k->n = n;
        return true;
    case FERRY_TYPE_DATE32: {
        int32_t d;
        if (ferry_date32_from_text(s, n, &d) != FERRY_OK) return false;
        k->i = d;
        return true;
    }
    case FERRY_TYPE_TIME64_US: return ferry_time64_from_text(s, n, &k->i) == FERRY_OK;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: return ferry_timestamp_from_text(s, n, &k->i) == FERRY_OK;
    case FERRY_TYPE_UUID: return ferry_uuid_from_text(s, n, k->u) == FERRY_OK;
    default: return false;
    }
}

/* A type as written in `to:` -> type, precision, scale. "decimal(P,S)" (or decimal128,
 * numeric) is a decimal128; a decimal128 needs its precision and scale. */
static bool parse_type(const char *s, enum ferry_type *t, int *precision, int *scale)
{
    *precision = *scale = 0;
    const char *paren = strchr(s, '(');
    if (paren == NULL) {
        if (ferry_type_from_name(s, t) != FERRY_OK) return false;
        return *t != FERRY_TYPE_DECIMAL128;
    }
    size_t w = (size_t)(paren - s);
    if (!((w == 7 && strncasecmp(s, "decimal", 7) == 0) ||
          (w == 10 && strncasecmp(s, "decimal128", 10) == 0) ||
          (w == 7 && strncasecmp(s, "numeric", 7) == 0)))
        return false;
    int p, sc, used = 0;
    if (sscanf(paren, "(%d ,%d )%n", &p, &sc, &used) != 2 || paren[used] != '\0') return false;
    if (p < 1 || p > 38 || sc < 0 || sc > p) return false;
    *t = FERRY_TYPE_DECIMAL128;
    *precision = p;
    *scale = sc;
    return true;
}

static void type_text(enum ferry_type t, int precision, int scale, char *buf, size_t len)
{
    if (t == FERRY_TYPE_DECIMAL128)
        snprintf(buf, len, "decimal128(%d,%d)", precision, scale);
    else
        snprintf(buf, len, "%s", ferry_type_name(t));
}

static bool is_int(enum ferry_type t)
{
    return t >= FERRY_TYPE_INT8 && t <= FERRY_TYPE_INT64;
}

static bool is_text(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT;
}

/* The columns a value may not be rewritten in: rows that differ only there would collide
 * in the sink. */
static int check_not_key(const struct ferry_schema *cur, int idx, struct ferry_cfg *node,
                         const char *resource, const char *verb, struct ferry_error *err)
{
    if (cur->fields[idx].key_pos > 0)
        return ferry_cfg_error(err, node, "column \"%s\" is part of the key of %s and cannot be %s",
                               cur->fields[idx].name, resource, verb);
    return FERRY_OK;
}

/* The current schema with column idx turned into `type` (precision/scale for decimal128). */
static int schema_retype(const struct ferry_schema *cur, int idx, enum ferry_type type,
                         int precision, int scale, struct ferry_schema **out,
                         struct ferry_error *err)
{
    int *map = ferry_calloc((size_t)cur->n_fields, sizeof *map);
    enum ferry_type *types = ferry_calloc((size_t)cur->n_fields, sizeof *types);
    int rc;
    if (map == NULL || types == NULL) {
        rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    } else {
        for (int i = 0; i < cur->n_fields; i++) map[i] = i;
        types[idx] = type;
        rc = schema_from(cur, cur->n_fields, map, NULL, types, out, err);
        if (rc == FERRY_OK && type == FERRY_TYPE_DECIMAL128) {
            (*out)->fields[idx].precision = precision;
            (*out)->fields[idx].scale = scale;
        }
    }
    ferry_free(map);
    ferry_free(types);
    return rc;
}

/* mask: COL, keep_last: N, char: C */
static int compile_mask(const struct ferry_transform_spec *t, const char *resource,
                        const struct ferry_schema *cur, struct step *st, struct ferry_error *err)
{
    const char *col = NULL, *ch = "*";
    int64_t keep = 0;
    int rc = ferry_cfg_str(t->node, "mask", true, &col, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(t->node, "keep_last", false, 0, 1000000, &keep, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(t->node, "char", false, &ch, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_cfg *kn = ferry_cfg_get(t->node, "mask");
    if (col == NULL) return ferry_cfg_error(err, kn, "expected a column name");
    /* Exactly one code point, so that masked values keep their length in characters. */
    size_t n = ch ? strlen(ch) : 0;
    bool one = n >= 1 && n <= 4 && ((unsigned char)ch[0] & 0xC0) != 0x80;
    for (size_t i = 1; one && i < n; i++) one = ((unsigned char)ch[i] & 0xC0) == 0x80;
    if (one && n > 1) one = (int)n == (((unsigned char)ch[0] >= 0xF0)   ? 4
                                       : ((unsigned char)ch[0] >= 0xE0) ? 3
                                       : ((unsigned char)ch[0] >= 0xC0) ? 2
                                                                        : 1);
    if (!one)
        return ferry_cfg_error(err, ferry_cfg_get(t->node, "char"),
                               "expected exactly one character");
    int idx;
    rc = find_column(cur, kn, col, resource, &idx, err);
    if (rc != FERRY_OK) return rc;
    if (!is_text(cur->fields[idx].type))
        return ferry_cfg_error(err, kn,
                               "column \"%s\" is %s; mask applies to utf8, json and "
                               "decimal_text columns (cast it to utf8 first)",
                               col, ferry_type_name(cur->fields[idx].type));
    rc = check_not_key(cur, idx, kn, resource, "masked", err);
    if (rc != FERRY_OK) return rc;
    st->kind = STEP_MASK;
    st->column = idx;
    st->keep_last = keep;
    memcpy(st->mask, ch, n);
    st->mask_len = n;
    return schema_retype(cur, idx, FERRY_TYPE_UTF8, 0, 0, &st->schema, err);
}

/* add: NAME, value: CONST | run_id | load_time | source_position */
static int compile_add(const struct ferry_transform_spec *t, const char *resource,
                       const struct ferry_schema *cur, struct step *st, struct ferry_error *err)
{
    const char *name = NULL, *value = NULL;
    int rc = ferry_cfg_str(t->node, "add", true, &name, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(t->node, "value", true, &value, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_cfg *kn = ferry_cfg_get(t->node, "add");
    if (name == NULL || name[0] == '\0') return ferry_cfg_error(err, kn, "expected a column name");
    if (ferry_schema_find(cur, name) >= 0)
        return ferry_cfg_error(err, kn, "column \"%s\" already exists in resource %s", name,
                               resource);
    if (value == NULL)
        return ferry_cfg_error(err, ferry_cfg_get(t->node, "value"),
                               "expected a constant or one of run_id, load_time, "
                               "source_position");
    struct extra_field x = {name, FERRY_TYPE_UTF8, false};
    st->kind = STEP_ADD;
    st->add = ADD_CONST;
    if (!strcmp(value, "run_id")) {
        st->add = ADD_RUN_ID;
        x.type = FERRY_TYPE_INT64;
    } else if (!strcmp(value, "load_time")) {
        st->add = ADD_LOAD_TIME;
        x.type = FERRY_TYPE_TIMESTAMPTZ_US;
    } else if (!strcmp(value, "source_position")) {
        st->add = ADD_POSITION;
        x.nullable = true; /* a batch cut from the middle of another has no position */
    } else if ((st->text = ferry_strdup(value)) == NULL) {
        return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    }
    int *map = ferry_calloc((size_t)cur->n_fields + 1, sizeof *map);
    if (map == NULL) return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    for (int i = 0; i < cur->n_fields; i++) map[i] = i;
    rc = schema_from_ex(cur, cur->n_fields, map, NULL, NULL, &x, &st->schema, err);
    ferry_free(map);
    return rc;
}

static const char *const filter_ops[] = {"equals",  "not_equals",   "in",
                                         "is_null", "greater_than", "less_than", NULL};

static int filter_const(const struct ferry_field *f, struct ferry_cfg *node, const char *text,
                        struct konst *k, struct ferry_error *err)
{
    if (text == NULL)
        return ferry_cfg_error(err, node, "expected a value (use is_null for nulls)");
    if (!parse_value(f->type, f->precision, f->scale, text, strlen(text), k)) {
        char ty[48];
        type_text(f->type, f->precision, f->scale, ty, sizeof ty);
        return ferry_cfg_error(err, node, "\"%s\" is not a valid %s value for column \"%s\"",
                               text, ty, f->name);
    }
    return FERRY_OK;
}

/* filter: COL with exactly one of filter_ops */
static int compile_filter(const struct ferry_transform_spec *t, const char *resource,
                          const struct ferry_schema *cur, struct step *st,
                          struct ferry_error *err)
{
    const char *col = NULL;
    int rc = ferry_cfg_str(t->node, "filter", true, &col, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_cfg *kn = ferry_cfg_get(t->node, "filter");
    if (col == NULL) return ferry_cfg_error(err, kn, "expected a column name");
    int idx;
    rc = find_column(cur, kn, col, resource, &idx, err);
    if (rc != FERRY_OK) return rc;
    int op = -1, n_ops = 0;
    for (int i = 0; filter_ops[i]; i++)
        if (ferry_cfg_get(t->node, filter_ops[i])) {
            if (n_ops++ == 0) op = i;
        }
    if (n_ops != 1)
        return ferry_cfg_error(err, kn, "%s; use exactly one of equals, not_equals, in, is_null, "
                               "greater_than, less_than",
                               n_ops ? "several conditions" : "no condition");
    const struct ferry_field *f = &cur->fields[idx];
    struct ferry_cfg *on = ferry_cfg_get(t->node, filter_ops[op]);
    st->kind = STEP_FILTER;
    st->column = idx;
    st->op = (enum filter_op)op;
    if (st->op == OP_IS_NULL) {
        rc = ferry_cfg_bool(t->node, "is_null", true, &st->want_null, err);
    } else if (f->type == FERRY_TYPE_BINARY) {
        rc = ferry_cfg_error(err, on, "column \"%s\" is binary; only is_null applies to it",
                             f->name);
    } else if (st->op == OP_IN) {
        if (on->kind != FERRY_CFG_LIST)
            return ferry_cfg_error(err, on, "expected a list of values");
        rc = ferry_cfg_strv(t->node, "in", true, &st->list, &st->n_vals, err);
        if (rc == FERRY_OK && st->n_vals == 0)
            rc = ferry_cfg_error(err, on, "expected at least one value");
        if (rc == FERRY_OK && (st->vals = ferry_calloc((size_t)st->n_vals, sizeof *st->vals)) ==
                                  NULL)
            rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
        for (int i = 0; rc == FERRY_OK && i < st->n_vals; i++)
            rc = filter_const(f, on->children[i], st->list[i], &st->vals[i], err);
    } else {
        const char *text = NULL;
        rc = ferry_cfg_str(t->node, filter_ops[op], true, &text, err);
        if (rc == FERRY_OK && text != NULL && (st->text = ferry_strdup(text)) == NULL)
            rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
        if (rc == FERRY_OK && (st->vals = ferry_calloc(1, sizeof *st->vals)) == NULL)
            rc = ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
        if (rc == FERRY_OK) {
            st->n_vals = 1;
            rc = filter_const(f, on, st->text, &st->vals[0], err);
        }
    }
    if (rc != FERRY_OK) return rc;
    /* The schema does not change; the step holds its own reference. */
    st->schema = ferry_schema_ref((struct ferry_schema *)cur);
    return FERRY_OK;
}

/* Whether a cast from (ft, fp, fs) to (tt, tp, ts) can lose nothing (values that do not
 * parse are reported row by row when text is cast to a typed column). */
static bool cast_allowed(enum ferry_type ft, int fp, int fs, enum ferry_type tt, int tp, int ts)
{
    if (tt == FERRY_TYPE_UTF8) return ft != FERRY_TYPE_BINARY;
    if (is_int(ft) && is_int(tt)) return ferry_type_width(tt) >= ferry_type_width(ft);
    if (is_int(ft) && tt == FERRY_TYPE_FLOAT64) return true;
    if (is_int(ft) && tt == FERRY_TYPE_FLOAT32)
        return ft == FERRY_TYPE_INT8 || ft == FERRY_TYPE_INT16;
    if (ft == FERRY_TYPE_FLOAT32 && (tt == FERRY_TYPE_FLOAT32 || tt == FERRY_TYPE_FLOAT64))
        return true;
    if (ft == FERRY_TYPE_FLOAT64 && tt == FERRY_TYPE_FLOAT64) return true;
    if (ft == FERRY_TYPE_DATE32 && (tt == FERRY_TYPE_DATE32 || tt == FERRY_TYPE_TIMESTAMP_US ||
                                    tt == FERRY_TYPE_TIMESTAMPTZ_US))
        return true;
    if (ft == FERRY_TYPE_DECIMAL128 && tt == FERRY_TYPE_DECIMAL128)
        return ts >= fs && tp - ts >= fp - fs;
    if (ft == FERRY_TYPE_UTF8)
        return tt != FERRY_TYPE_BINARY && tt != FERRY_TYPE_JSON;
    if (ft == FERRY_TYPE_DECIMAL_TEXT)
        return tt == FERRY_TYPE_DECIMAL128 || tt == FERRY_TYPE_DECIMAL_TEXT ||
               tt == FERRY_TYPE_FLOAT64;
    return ft == tt && ft != FERRY_TYPE_DECIMAL128;
}

/* cast: COL, to: TYPE */
static int compile_cast(const struct ferry_transform_spec *t, const char *resource,
                        const struct ferry_schema *cur, struct step *st, struct ferry_error *err)
{
    const char *col = NULL, *to = NULL;
    int rc = ferry_cfg_str(t->node, "cast", true, &col, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(t->node, "to", true, &to, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_cfg *kn = ferry_cfg_get(t->node, "cast"), *tn = ferry_cfg_get(t->node, "to");
    if (col == NULL) return ferry_cfg_error(err, kn, "expected a column name");
    int idx;
    rc = find_column(cur, kn, col, resource, &idx, err);
    if (rc != FERRY_OK) return rc;
    enum ferry_type tt;
    int tp, ts;
    if (to != NULL && strchr(to, '(') == NULL && ferry_type_from_name(to, &tt) == FERRY_OK &&
        tt == FERRY_TYPE_DECIMAL128)
        return ferry_cfg_error(err, tn, "type \"%s\" needs a precision and a scale: "
                               "\"decimal(P,S)\"", to);
    if (to == NULL || !parse_type(to, &tt, &tp, &ts))
        return ferry_cfg_error(err, tn, "unknown type \"%s\" (a ferry type name such as int64, "
                               "float64, utf8, date32, timestamptz, or decimal(P,S))",
                               to ? to : "");
    const struct ferry_field *f = &cur->fields[idx];
    if (!cast_allowed(f->type, f->precision, f->scale, tt, tp, ts)) {
        char a[48], b[48];
        type_text(f->type, f->precision, f->scale, a, sizeof a);
        type_text(tt, tp, ts, b, sizeof b);
        return ferry_cfg_error(err, tn, "column \"%s\" cannot be cast from %s to %s: only "
                               "conversions that lose nothing are allowed",
                               col, a, b);
    }
    st->kind = STEP_CAST;
    st->column = idx;
    return schema_retype(cur, idx, tt, tp, ts, &st->schema, err);
}

int ferry_transforms_compile(const struct ferry_pipeline_spec *p, const char *resource,
                             struct ferry_schema *in, struct ferry_transform_chain **chain,
                             struct ferry_schema **out_schema, struct ferry_error *err)
{
    *chain = NULL;
    *out_schema = NULL;
    struct ferry_transform_chain *c = ferry_calloc(1, sizeof *c);
    if (c == NULL) return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    struct ferry_schema *cur = ferry_schema_ref(in);
    int rc = FERRY_OK;
    for (int i = 0; i < p->n_transforms && rc == FERRY_OK; i++) {
        const struct ferry_transform_spec *t = &p->transforms[i];
        if (t->resource && strcmp(t->resource, resource) != 0) continue;
        struct step st = {0};
        st.column = -1;
        st.index = i;
        if (!strcmp(t->kind, "drop") || !strcmp(t->kind, "select") || !strcmp(t->kind, "rename"))
            rc = compile_projection(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "hash"))
            rc = compile_hash(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "mask"))
            rc = compile_mask(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "add"))
            rc = compile_add(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "filter"))
            rc = compile_filter(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "cast"))
            rc = compile_cast(t, resource, cur, &st, err);
        else
            rc = ferry_cfg_error(err, t->node, "transform \"%s\" is not available in this version",
                                 t->kind);
        if (rc == FERRY_OK) rc = add_step(c, st, err);
        if (rc != FERRY_OK) {
            step_clear(&st);
            break;
        }
        ferry_schema_unref(cur);
        cur = ferry_schema_ref(st.schema);
    }
    if (rc != FERRY_OK) {
        ferry_schema_unref(cur);
        ferry_transforms_free(c);
        return rc;
    }
    *out_schema = cur;
    if (c->n_steps == 0)
        ferry_transforms_free(c);
    else
        *chain = c;
    return FERRY_OK;
}

/* ---- apply ---- */

static struct ferry_batch *project(const struct step *st, struct ferry_batch *in)
{
    struct ferry_batch *out = ferry_batch_new(st->schema, in->resource);
    if (out == NULL) return NULL;
    for (int j = 0; j < st->schema->n_fields; j++) {
        out->columns[j] = in->columns[st->map[j]];
        out->columns[j].validity_cap = out->columns[j].values_cap = 0;
        out->columns[j].offsets_cap = out->columns[j].data_cap = 0;
    }
    out->length = in->length;
    out->offset = in->offset;
    out->ops = in->ops;
    out->seq = in->seq;
    out->shard = in->shard;
    out->group_cut = in->group_cut;
    out->bytes = in->bytes;
    out->parent = ferry_batch_ref(in); /* `in` owns the buffers */
    if (in->position && ferry_batch_set_position(out, in->position) != FERRY_OK) {
        ferry_batch_unref(out);
        return NULL;
    }
    ferry_batch_unref(in); /* the caller's reference moved to out->parent */
    return out;
}

/* Floats as the shortest "%.Ng" text that reads back as the same value (N from 15, 6 for
 * float32: the form position JSON uses too), and NaN, Infinity, -Infinity. A float32 is
 * written as itself, never as the double it widens to (0.1, not 0.10000000149011612). */
static size_t float_text(double v, bool single, char *buf, size_t len)
{
    if (isnan(v)) return (size_t)snprintf(buf, len, "NaN");
    if (isinf(v)) return (size_t)snprintf(buf, len, "%s", v > 0 ? "Infinity" : "-Infinity");
    for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    return strlen(buf);
}

/* A special value's text (connector.h), NULL for any other value. */
static const char *special_text(const struct ferry_batch *b, int col, int64_t row)
{
    switch (b->columns[col].type) {
    case FERRY_TYPE_DATE32: {
        int64_t v = ferry_col_int(b, col, row);
        return v == FERRY_SPECIAL_DATE_PINF ? "infinity"
               : v == FERRY_SPECIAL_DATE_NINF ? "-infinity"
                                              : NULL;
    }
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: {
        int64_t v = ferry_col_int(b, col, row);
        return v == FERRY_SPECIAL_TS_PINF ? "infinity" : v == FERRY_SPECIAL_TS_NINF ? "-infinity" : NULL;
    }
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 d = ferry_col_dec128(b, col, row);
        return d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO ? "NaN" : NULL;
    }
    default: return NULL;
    }
}

/* Canonical text of one value, the input of a hash. Dates and timestamps outside years
 * 1..9999 have no calendar text: they are hashed as their number (days, microseconds).
 * With `specials`, +-infinity and decimal NaN are PostgreSQL's 'infinity', '-infinity' and
 * 'NaN'. */
static size_t value_text(const struct ferry_batch *b, int col, int64_t row, bool specials,
                         char *buf, size_t len, const uint8_t **bytes)
{
    int k = -1;
    const struct ferry_column *c = &b->columns[col];
    *bytes = (const uint8_t *)buf;
    const char *sp = specials ? special_text(b, col, row) : NULL;
    if (sp != NULL) return (size_t)snprintf(buf, len, "%s", sp);
    switch (c->type) {
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t n;
        *bytes = ferry_col_bytes(b, col, row, &n);
        return n;
    }
    case FERRY_TYPE_BOOL:
        return (size_t)snprintf(buf, len, "%s", ferry_col_bool(b, col, row) ? "true" : "false");
    case FERRY_TYPE_FLOAT32: return float_text(ferry_col_float(b, col, row), true, buf, len);
    case FERRY_TYPE_FLOAT64: return float_text(ferry_col_float(b, col, row), false, buf, len);
    case FERRY_TYPE_DECIMAL128:
        k = ferry_decimal128_to_text(ferry_col_dec128(b, col, row), b->schema->fields[col].scale,
                                     buf, len);
        break;
    case FERRY_TYPE_DATE32:
        k = ferry_date32_to_text((int32_t)ferry_col_int(b, col, row), buf, len);
        break;
    case FERRY_TYPE_TIME64_US:
        k = ferry_time64_to_text(ferry_col_int(b, col, row), buf, len);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        k = ferry_timestamp_to_text(ferry_col_int(b, col, row),
                                    c->type == FERRY_TYPE_TIMESTAMPTZ_US, buf, len);
        break;
    case FERRY_TYPE_UUID: k = ferry_uuid_to_text(ferry_col_fixed(b, col, row), buf, len); break;
    default: break;
    }
    /* The text forms return -1 for a value they cannot write; its length must never reach
     * the hash (it would read far past the buffer). */
    if (k >= 0 && (size_t)k < len) return (size_t)k;
    return (size_t)snprintf(buf, len, "%" PRId64, ferry_col_int(b, col, row));
}

static int hash_column(const struct step *st, bool specials, struct ferry_batch **io,
                       struct ferry_error *err)
{
    struct ferry_batch *b = ferry_batch_copy(*io);
    if (b == NULL) return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    ferry_batch_unref(*io);
    *io = b;
    int64_t n = b->length;
    int32_t *offsets = ferry_malloc(sizeof(int32_t) * (size_t)(n + 1));
    uint8_t *data = ferry_malloc((size_t)n * 64 + 1);
    if (offsets == NULL || data == NULL) {
        ferry_free(offsets);
        ferry_free(data);
        return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
    }
    static const char hex[] = "0123456789abcdef";
    int32_t pos = 0;
    char text[128];
    for (int64_t r = 0; r < n; r++) {
        offsets[r] = pos;
        if (ferry_col_is_null(b, st->column, r)) continue;
        const uint8_t *p;
        size_t len = value_text(b, st->column, r, specials, text, sizeof text, &p);
        uint8_t digest[32];
        if (st->hmac) {
            ferry_hmac_sha256(st->key, st->key_len, p, len, digest);
        } else {
            struct ferry_sha256 s;
            ferry_sha256_init(&s);
            ferry_sha256_update(&s, p, len);
            ferry_sha256_final(&s, digest);
        }
        for (int i = 0; i < 32; i++) {
            data[pos++] = (uint8_t)hex[digest[i] >> 4];
            data[pos++] = (uint8_t)hex[digest[i] & 15];
        }
    }
    offsets[n] = pos;
    struct ferry_column *c = &b->columns[st->column];
    ferry_free(c->values);
    ferry_free(c->offsets);
    ferry_free(c->data);
    c->type = FERRY_TYPE_UTF8;
    c->values = NULL;
    c->values_cap = 0;
    c->offsets = offsets;
    c->offsets_cap = sizeof(int32_t) * (size_t)(n + 1);
    c->data = data;
    c->data_cap = (size_t)n * 64 + 1;
    ferry_schema_unref(b->schema);
    b->schema = ferry_schema_ref(st->schema);
    return FERRY_OK;
}

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
}

/* Makes *io a canonical copy (offset 0, own buffers) that a step may rewrite in place. */
static int own_copy(struct ferry_batch **io, struct ferry_error *err)
{
    struct ferry_batch *b = ferry_batch_copy(*io);
    if (b == NULL) return oom(err);
    ferry_batch_unref(*io);
    *io = b;
    return FERRY_OK;
}

/* Var-width output grown per batch (doubling), never per row. */
struct vbuf {
    int32_t *offsets;
    uint8_t *data;
    size_t len, cap;
};

static int vbuf_init(struct vbuf *v, int64_t rows, size_t data_hint)
{
    v->len = 0;
    v->cap = data_hint + 16;
    v->offsets = ferry_malloc(sizeof(int32_t) * (size_t)(rows + 1));
    v->data = ferry_malloc(v->cap);
    if (v->offsets == NULL || v->data == NULL) {
        ferry_free(v->offsets);
        ferry_free(v->data);
        v->offsets = NULL;
        v->data = NULL;
        return FERRY_ENOMEM;
    }
    v->offsets[0] = 0;
    return FERRY_OK;
}

static void vbuf_free(struct vbuf *v)
{
    ferry_free(v->offsets);
    ferry_free(v->data);
}

static int vbuf_reserve(struct vbuf *v, size_t more)
{
    if (v->len + more > (size_t)INT32_MAX) return FERRY_ENOMEM; /* int32 offsets */
    if (v->len + more <= v->cap) return FERRY_OK;
    size_t cap = v->cap * 2;
    while (cap < v->len + more) cap *= 2;
    uint8_t *d = ferry_realloc(v->data, cap);
    if (d == NULL) return FERRY_ENOMEM;
    v->data = d;
    v->cap = cap;
    return FERRY_OK;
}

static int vbuf_put(struct vbuf *v, const void *p, size_t n)
{
    if (vbuf_reserve(v, n) != FERRY_OK) return FERRY_ENOMEM;
    if (n) memcpy(v->data + v->len, p, n);
    v->len += n;
    return FERRY_OK;
}

/* Column col of canonical batch b takes the buffers built (validity unchanged). */
static void set_column(struct ferry_batch *b, int col, enum ferry_type type, uint8_t *values,
                       size_t values_cap, struct vbuf *v, int64_t rows)
{
    struct ferry_column *c = &b->columns[col];
    ferry_free(c->values);
    ferry_free(c->offsets);
    ferry_free(c->data);
    c->type = type;
    c->values = values;
    c->values_cap = values ? values_cap : 0;
    c->offsets = v ? v->offsets : NULL;
    c->offsets_cap = v ? sizeof(int32_t) * (size_t)(rows + 1) : 0;
    c->data = v ? v->data : NULL;
    c->data_cap = v ? v->cap : 0;
}

static void set_schema(struct ferry_batch *b, struct ferry_schema *s)
{
    ferry_schema_unref(b->schema);
    b->schema = ferry_schema_ref(s);
}

/* ---- mask ---- */

static int mask_column(const struct step *st, struct ferry_batch **io, struct ferry_error *err)
{
    int rc = own_copy(io, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_batch *b = *io;
    int64_t n = b->length;
    const struct ferry_column *c = &b->columns[st->column];
    size_t hint = n > 0 ? (size_t)c->offsets[n] * st->mask_len : 0;
    struct vbuf v;
    if (vbuf_init(&v, n, hint) != FERRY_OK) return oom(err);
    for (int64_t r = 0; r < n; r++) {
        if (!ferry_col_is_null(b, st->column, r)) {
            size_t len;
            const uint8_t *p = ferry_col_bytes(b, st->column, r, &len);
            /* Code points are counted by their first byte (anything but 10xxxxxx), so that
             * a multi-byte character is masked once, never split. */
            int64_t cps = 0;
            for (size_t i = 0; i < len; i++) cps += (p[i] & 0xC0) != 0x80;
            int64_t masked = cps > st->keep_last ? cps - st->keep_last : 0;
            size_t tail = 0; /* byte where the kept code points start */
            for (int64_t seen = 0; masked > 0 && tail < len; tail++)
                if ((p[tail] & 0xC0) != 0x80 && seen++ == masked) break;
            if (vbuf_reserve(&v, (size_t)masked * st->mask_len + (len - tail)) != FERRY_OK) {
                vbuf_free(&v);
                return oom(err);
            }
            for (int64_t k = 0; k < masked; k++) vbuf_put(&v, st->mask, st->mask_len);
            vbuf_put(&v, p + tail, len - tail);
        }
        v.offsets[r + 1] = (int32_t)v.len;
    }
    set_column(b, st->column, FERRY_TYPE_UTF8, NULL, 0, &v, n);
    set_schema(b, st->schema);
    return FERRY_OK;
}

/* ---- add ---- */

static int add_column(const struct ferry_transform_chain *chain, const struct step *st,
                      struct ferry_batch **io, struct ferry_error *err)
{
    if (st->add == ADD_RUN_ID && !chain->has_run)
        return ferry_error_set(err, FERRY_EINVAL, "transform",
                               "transforms[%d] (add %s): the run id is not known yet", st->index,
                               st->schema->fields[st->schema->n_fields - 1].name);
    int rc = own_copy(io, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_batch *b = *io;
    int64_t n = b->length;
    struct ferry_column nc = {0};
    nc.type = st->schema->fields[st->schema->n_fields - 1].type;
    if (st->add == ADD_RUN_ID || st->add == ADD_LOAD_TIME) {
        int64_t x = chain->run_id;
        if (st->add == ADD_LOAD_TIME) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            x = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        }
        nc.values_cap = sizeof(int64_t) * (size_t)(n + 1);
        int64_t *vals = ferry_malloc(nc.values_cap);
        if (vals == NULL) return oom(err);
        for (int64_t r = 0; r < n; r++) vals[r] = x;
        nc.values = (uint8_t *)vals;
    } else {
        const char *text = st->add == ADD_CONST ? st->text : b->position;
        size_t len = text ? strlen(text) : 0;
        struct vbuf v;
        if (vbuf_init(&v, n, len * (size_t)n) != FERRY_OK) return oom(err);
        if (text == NULL && n > 0) {
            nc.validity_cap = (size_t)(n + 7) / 8;
            nc.validity = ferry_calloc(nc.validity_cap, 1); /* every row null */
            nc.null_count = n;
            if (nc.validity == NULL) {
                vbuf_free(&v);
                return oom(err);
            }
        }
        for (int64_t r = 0; r < n; r++) {
            if (text && vbuf_put(&v, text, len) != FERRY_OK) {
                vbuf_free(&v);
                ferry_free(nc.validity);
                return oom(err);
            }
            v.offsets[r + 1] = (int32_t)v.len;
        }
        nc.offsets = v.offsets;
        nc.offsets_cap = sizeof(int32_t) * (size_t)(n + 1);
        nc.data = v.data;
        nc.data_cap = v.cap;
    }
    int nf = b->schema->n_fields;
    struct ferry_column *cols = ferry_realloc(b->columns, sizeof *cols * (size_t)(nf + 1));
    if (cols == NULL) {
        ferry_free(nc.validity);
        ferry_free(nc.values);
        ferry_free(nc.offsets);
        ferry_free(nc.data);
        return oom(err);
    }
    b->columns = cols;
    cols[nf] = nc;
    set_schema(b, st->schema);
    return FERRY_OK;
}

/* ---- filter ---- */

static int cmp_i64(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

/* NaN sorts above every number and equals itself, as in PostgreSQL. */
static int cmp_f64(double a, double b)
{
    if (isnan(a) || isnan(b)) return (isnan(b) ? 0 : 1) - (isnan(a) ? 0 : 1);
    return (a > b) - (a < b);
}

static int cmp_bytes(const uint8_t *a, size_t an, const char *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;
    if (c) return sign_of(c);
    return (an > bn) - (an < bn);
}

static int cmp_value(const struct ferry_batch *b, int col, int64_t r, const struct konst *k)
{
    switch (b->columns[col].type) {
    case FERRY_TYPE_BOOL: return (int)ferry_col_bool(b, col, r) - (int)k->b;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: return cmp_f64(ferry_col_float(b, col, r), k->f);
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 d = ferry_col_dec128(b, col, r);
        if (d.hi != k->d.hi) return d.hi < k->d.hi ? -1 : 1;
        return (d.lo > k->d.lo) - (d.lo < k->d.lo);
    }
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t n;
        const uint8_t *p = ferry_col_bytes(b, col, r, &n);
        struct dec_parts a, c;
        dec_split(k->s, k->n, &c);
        if (!dec_split((const char *)p, n, &a)) a.nan = true; /* not a number: sorts as NaN */
        return dec_text_cmp(&a, &c);
    }
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON: {
        size_t n;
        const uint8_t *p = ferry_col_bytes(b, col, r, &n);
        return cmp_bytes(p, n, k->s, k->n);
    }
    case FERRY_TYPE_UUID: return sign_of(memcmp(ferry_col_fixed(b, col, r), k->u, 16));
    default: return cmp_i64(ferry_col_int(b, col, r), k->i);
    }
}

/* Deletes always pass: a merge sink must still apply them, and a delete carries only the
 * key (its other columns are null), so a predicate on them would drop every delete. */
static bool keep_row(const struct step *st, const struct ferry_batch *b, int64_t r)
{
    if (ferry_batch_op(b, r) >= FERRY_OP_DELETE) return true; /* deletes, truncates */
    bool null = ferry_col_is_null(b, st->column, r);
    if (st->op == OP_IS_NULL) return null == st->want_null;
    if (null) return false; /* a comparison with null is unknown, as in SQL */
    switch (st->op) {
    case OP_EQ: return cmp_value(b, st->column, r, &st->vals[0]) == 0;
    case OP_NE: return cmp_value(b, st->column, r, &st->vals[0]) != 0;
    case OP_GT: return cmp_value(b, st->column, r, &st->vals[0]) > 0;
    case OP_LT: return cmp_value(b, st->column, r, &st->vals[0]) < 0;
    default:
        for (int i = 0; i < st->n_vals; i++)
            if (cmp_value(b, st->column, r, &st->vals[i]) == 0) return true;
        return false;
    }
}

static inline bool bit_at(const uint8_t *bits, int64_t i)
{
    return (bits[i >> 3] >> (i & 7)) & 1;
}

static inline void bit_set(uint8_t *bits, int64_t i)
{
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* Rows rows[0..m) of b (batch-relative) into the column d, canonical. */
static int take_column(const struct ferry_batch *b, int col, const int64_t *rows, int64_t m,
                       struct ferry_column *d)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t off = b->offset;
    size_t bitmap = (size_t)(m + 7) / 8 + 1;
    if (c->validity) {
        d->validity = ferry_calloc(bitmap, 1);
        if (d->validity == NULL) return FERRY_ENOMEM;
        d->validity_cap = bitmap;
        for (int64_t j = 0; j < m; j++)
            if (bit_at(c->validity, off + rows[j])) bit_set(d->validity, j);
            else d->null_count++;
        if (d->null_count == 0) { /* the bitmap is absent while a column has no null */
            ferry_free(d->validity);
            d->validity = NULL;
            d->validity_cap = 0;
        }
    }
    if (c->type == FERRY_TYPE_BOOL) {
        d->values = ferry_calloc(bitmap, 1);
        if (d->values == NULL) return FERRY_ENOMEM;
        d->values_cap = bitmap;
        for (int64_t j = 0; j < m; j++)
            if (bit_at(c->values, off + rows[j])) bit_set(d->values, j);
    } else if (ferry_type_is_varwidth(c->type)) {
        size_t total = 0;
        for (int64_t j = 0; j < m; j++)
            total += (size_t)(c->offsets[off + rows[j] + 1] - c->offsets[off + rows[j]]);
        d->offsets_cap = sizeof(int32_t) * (size_t)(m + 1);
        d->data_cap = total + 1;
        d->offsets = ferry_malloc(d->offsets_cap);
        d->data = ferry_malloc(d->data_cap);
        if (d->offsets == NULL || d->data == NULL) return FERRY_ENOMEM;
        int32_t pos = 0;
        d->offsets[0] = 0;
        for (int64_t j = 0; j < m; j++) {
            int32_t s = c->offsets[off + rows[j]], e = c->offsets[off + rows[j] + 1];
            if (e > s) memcpy(d->data + pos, c->data + s, (size_t)(e - s));
            pos += e - s;
            d->offsets[j + 1] = pos;
        }
    } else {
        size_t w = (size_t)ferry_type_width(c->type);
        d->values_cap = w * (size_t)m + 1;
        d->values = ferry_malloc(d->values_cap);
        if (d->values == NULL) return FERRY_ENOMEM;
        for (int64_t j = 0; j < m; j++)
            memcpy(d->values + w * (size_t)j, c->values + w * (size_t)(off + rows[j]), w);
    }
    return FERRY_OK;
}

static int filter_rows(const struct step *st, struct ferry_batch **io, struct ferry_error *err)
{
    struct ferry_batch *b = *io;
    int64_t n = b->length, m = 0;
    int64_t *rows = ferry_malloc(sizeof *rows * (size_t)(n + 1));
    if (rows == NULL) return oom(err);
    for (int64_t r = 0; r < n; r++)
        if (keep_row(st, b, r)) rows[m++] = r;
    if (m == n) { /* every row kept: the batch passes as it is */
        ferry_free(rows);
        return FERRY_OK;
    }
    struct ferry_batch *o = ferry_batch_new(b->schema, b->resource);
    int rc = o ? FERRY_OK : FERRY_ENOMEM;
    if (rc == FERRY_OK) {
        o->seq = b->seq;
        o->shard = b->shard;
        o->group_cut = b->group_cut;
        o->length = m;
        o->bytes = n > 0 ? (size_t)((double)b->bytes * (double)m / (double)n) : 0;
        o->ops = ferry_malloc((size_t)m + 1);
        if (o->ops == NULL || ferry_batch_set_position(o, b->position) != FERRY_OK)
            rc = FERRY_ENOMEM;
    }
    for (int64_t j = 0; rc == FERRY_OK && j < m; j++) o->ops[j] = b->ops[b->offset + rows[j]];
    for (int j = 0; rc == FERRY_OK && j < b->schema->n_fields; j++)
        rc = take_column(b, j, rows, m, &o->columns[j]);
    ferry_free(rows);
    if (rc != FERRY_OK) {
        ferry_batch_unref(o);
        return oom(err);
    }
    ferry_batch_unref(b);
    *io = o;
    return FERRY_OK;
}

/* ---- cast ---- */

static void put_fixed(uint8_t *values, enum ferry_type t, int64_t r, const struct konst *k)
{
    switch (t) {
    case FERRY_TYPE_BOOL:
        if (k->b) bit_set(values, r);
        break;
    case FERRY_TYPE_INT8: ((int8_t *)values)[r] = (int8_t)k->i; break;
    case FERRY_TYPE_INT16: ((int16_t *)values)[r] = (int16_t)k->i; break;
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32: ((int32_t *)values)[r] = (int32_t)k->i; break;
    case FERRY_TYPE_FLOAT32: ((float *)values)[r] = (float)k->f; break;
    case FERRY_TYPE_FLOAT64: ((double *)values)[r] = k->f; break;
    case FERRY_TYPE_DECIMAL128:
        for (int i = 0; i < 8; i++) {
            values[16 * r + i] = (uint8_t)(k->d.lo >> (8 * i));
            values[16 * r + 8 + i] = (uint8_t)((uint64_t)k->d.hi >> (8 * i));
        }
        break;
    case FERRY_TYPE_UUID: memcpy(values + 16 * r, k->u, 16); break;
    default: ((int64_t *)values)[r] = k->i; break;
    }
}

/* "transforms[i] (cast): column C row R of batch B of RES: value "V" WHY" (WHY NULL: "is
 * not a valid TYPE"). */
static int cast_error_why(const struct step *st, const struct ferry_batch *b, int64_t r,
                          const char *text, size_t n, const char *why, struct ferry_error *err)
{
    const struct ferry_field *to = &st->schema->fields[st->column];
    char ty[48], msg[96];
    type_text(to->type, to->precision, to->scale, ty, sizeof ty);
    if (why == NULL) snprintf(msg, sizeof msg, "is not a valid %s", ty);
    return ferry_error_set(err, FERRY_EINVAL, "transform",
                           "transforms[%d] (cast): column \"%s\" row %" PRId64 " of batch %" PRIu64
                           " of %s: value \"%.*s%s\" %s",
                           st->index, to->name, r, b->seq, b->resource, (int)(n > 64 ? 64 : n),
                           text, n > 64 ? "..." : "", why ? why : msg);
}

static int cast_error(const struct step *st, const struct ferry_batch *b, int64_t r,
                      const char *text, size_t n, struct ferry_error *err)
{
    return cast_error_why(st, b, r, text, n, NULL, err);
}

/* To utf8 (canonical text of any value) or utf8 -> decimal_text (checked). */
static int cast_to_text(const struct step *st, bool specials, struct ferry_batch *b,
                        struct ferry_error *err)
{
    int64_t n = b->length;
    int col = st->column;
    enum ferry_type tt = st->schema->fields[col].type;
    char text[128];
    struct vbuf v;
    if (vbuf_init(&v, n, (size_t)n * 16) != FERRY_OK) return oom(err);
    for (int64_t r = 0; r < n; r++) {
        if (!ferry_col_is_null(b, col, r)) {
            const uint8_t *p;
            size_t len = value_text(b, col, r, specials, text, sizeof text, &p);
            struct dec_parts d;
            int rc = FERRY_OK;
            if (tt == FERRY_TYPE_DECIMAL_TEXT && !dec_split((const char *)p, len, &d))
                rc = cast_error(st, b, r, (const char *)p, len, err);
            else if (vbuf_put(&v, p, len) != FERRY_OK)
                rc = oom(err);
            if (rc != FERRY_OK) {
                vbuf_free(&v);
                return rc;
            }
        }
        v.offsets[r + 1] = (int32_t)v.len;
    }
    set_column(b, col, tt, NULL, 0, &v, n);
    set_schema(b, st->schema);
    return FERRY_OK;
}

/* Days -> microseconds, refused beyond ferry's timestamps (year 294247); +-infinity stays
 * +-infinity when the batch may hold special values. */
static int cast_date_to_ts(const struct step *st, bool specials, const struct ferry_batch *b,
                           int64_t r, struct konst *k, struct ferry_error *err)
{
    int64_t days = ferry_col_int(b, st->column, r);
    if (specials && (days == FERRY_SPECIAL_DATE_PINF || days == FERRY_SPECIAL_DATE_NINF)) {
        k->i = days == FERRY_SPECIAL_DATE_PINF ? FERRY_SPECIAL_TS_PINF : FERRY_SPECIAL_TS_NINF;
        return FERRY_OK;
    }
    const int64_t day_us = INT64_C(86400000000);
    if (days > INT64_MAX / day_us || days < INT64_MIN / day_us) {
        char text[48];
        int n = ferry_date32_to_text((int32_t)days, text, sizeof text);
        if (n < 0) n = snprintf(text, sizeof text, "%" PRId64 " days", days);
        return cast_error_why(st, b, r, text, (size_t)n,
                              "is beyond the range of a timestamp (ferry's timestamps end in "
                              "year 294247)",
                              err);
    }
    k->i = days * day_us;
    return FERRY_OK;
}

/* Row r of the cast column as a value of the target type in *k. */
static int cast_value(const struct step *st, bool specials, const struct ferry_batch *b,
                      int64_t r, struct konst *k, struct ferry_error *err)
{
    int col = st->column;
    const struct ferry_field *from = &b->schema->fields[col];
    const struct ferry_field *to = &st->schema->fields[col];
    enum ferry_type ft = from->type, tt = to->type;
    char text[128];
    memset(k, 0, sizeof *k);
    if (ft == FERRY_TYPE_UTF8 || ft == FERRY_TYPE_DECIMAL_TEXT) {
        size_t len;
        const char *p = (const char *)ferry_col_bytes(b, col, r, &len);
        if (!parse_value(tt, to->precision, to->scale, p, len, k))
            return cast_error(st, b, r, p, len, err);
    } else if (ft == FERRY_TYPE_DECIMAL128) {
        struct ferry_decimal128 d = ferry_col_dec128(b, col, r);
        if (specials && d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO) {
            k->d = d; /* NaN stays NaN */
            return FERRY_OK;
        }
        /* Rescale through the text form: the parser refuses any digit that would be lost,
         * and compile time made sure none can be. */
        int len = ferry_decimal128_to_text(d, from->scale, text, sizeof text);
        if (len < 0 ||
            ferry_decimal128_from_text(text, (size_t)len, to->precision, to->scale, &k->d) !=
                FERRY_OK)
            return cast_error(st, b, r, text, len < 0 ? 0 : (size_t)len, err);
    } else if (ft == FERRY_TYPE_DATE32 && tt != FERRY_TYPE_DATE32) {
        return cast_date_to_ts(st, specials, b, r, k, err);
    } else if (ft == FERRY_TYPE_FLOAT32 || ft == FERRY_TYPE_FLOAT64) {
        k->f = ferry_col_float(b, col, r);
    } else if (ft == FERRY_TYPE_BOOL) {
        k->b = ferry_col_bool(b, col, r);
    } else if (ft == FERRY_TYPE_UUID) {
        memcpy(k->u, ferry_col_fixed(b, col, r), 16);
    } else {
        k->i = ferry_col_int(b, col, r);
        k->f = (double)k->i;
    }
    return FERRY_OK;
}

static int cast_column(const struct step *st, bool specials, struct ferry_batch **io,
                       struct ferry_error *err)
{
    int rc = own_copy(io, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_batch *b = *io;
    int64_t n = b->length;
    int col = st->column;
    enum ferry_type tt = st->schema->fields[col].type;
    if (ferry_type_is_varwidth(tt)) return cast_to_text(st, specials, b, err);
    int w = ferry_type_width(tt);
    size_t cap = tt == FERRY_TYPE_BOOL ? (size_t)(n + 7) / 8 + 1 : (size_t)w * (size_t)n + 1;
    uint8_t *values = ferry_calloc(cap, 1); /* null rows keep a zero slot */
    if (values == NULL) return oom(err);
    for (int64_t r = 0; r < n; r++) {
        if (ferry_col_is_null(b, col, r)) continue;
        struct konst k;
        rc = cast_value(st, specials, b, r, &k, err);
        if (rc != FERRY_OK) {
            ferry_free(values);
            return rc;
        }
        put_fixed(values, tt, r, &k);
    }
    set_column(b, col, tt, values, cap, NULL, n);
    set_schema(b, st->schema);
    return FERRY_OK;
}

static bool pushable_type(enum ferry_type t)
{
    return t == FERRY_TYPE_INT8 || t == FERRY_TYPE_INT16 || t == FERRY_TYPE_INT32 ||
           t == FERRY_TYPE_INT64 || t == FERRY_TYPE_DATE32 || t == FERRY_TYPE_TIMESTAMP_US ||
           t == FERRY_TYPE_TIMESTAMPTZ_US;
}

/* The pushdown filter of filter step st on source column `src` of in, appended. */
static int push_filter(struct ferry_transform_chain *c, const struct step *st,
                       const struct ferry_schema *in, int src, struct ferry_error *err)
{
    static const int ops[] = {
        [OP_EQ] = FERRY_READ_FILTER_EQUALS,  [OP_NE] = -1,
        [OP_IN] = FERRY_READ_FILTER_IN,      [OP_IS_NULL] = -1,
        [OP_GT] = FERRY_READ_FILTER_GREATER, [OP_LT] = FERRY_READ_FILTER_LESS};
    const struct ferry_field *f = &in->fields[src];
    if (ops[st->op] < 0 || !pushable_type(f->type) || st->n_vals < 1) return FERRY_OK;
    struct ferry_read_filter *v = ferry_realloc(c->push, sizeof *v * (size_t)(c->n_push + 1));
    if (v == NULL) return oom(err);
    c->push = v;
    int64_t *vals = ferry_calloc((size_t)st->n_vals, sizeof *vals);
    char *name = ferry_strdup(f->name);
    if (vals == NULL || name == NULL) {
        ferry_free(vals);
        ferry_free(name);
        return oom(err);
    }
    for (int k = 0; k < st->n_vals; k++)
        vals[k] = st->vals[k].i;
    v[c->n_push++] = (struct ferry_read_filter){
        name, f->type, (enum ferry_read_filter_op)ops[st->op], vals, st->n_vals};
    return FERRY_OK;
}

int ferry_transforms_pushdown(struct ferry_transform_chain *chain, const struct ferry_schema *in,
                              const struct ferry_read_filter **out, int *n, struct ferry_error *err)
{
    *out = NULL;
    *n = 0;
    if (chain == NULL || in == NULL) return FERRY_OK;
    int rc = FERRY_OK;
    if (!chain->push_done) {
        /* org[j]: the source column column j of the current step's input is, or -1 */
        int width = in->n_fields, cap = in->n_fields + chain->n_steps + 1;
        int *org = ferry_calloc((size_t)cap, sizeof *org),
            *next = ferry_calloc((size_t)cap, sizeof *next);
        if (org == NULL || next == NULL) rc = oom(err);
        for (int j = 0; rc == FERRY_OK && j < width; j++)
            org[j] = j;
        for (int i = 0; rc == FERRY_OK && i < chain->n_steps; i++) {
            const struct step *st = &chain->steps[i];
            int nw = st->schema ? st->schema->n_fields : width;
            if (st->kind == STEP_PROJECT && st->map) {
                for (int j = 0; j < nw && j < cap; j++)
                    next[j] = st->map[j] < width ? org[st->map[j]] : -1;
                memcpy(org, next, sizeof *org * (size_t)(nw < cap ? nw : cap));
            } else if (st->kind == STEP_FILTER && st->column >= 0 && org[st->column] >= 0) {
                rc = push_filter(chain, st, in, org[st->column], err);
            } else if (st->kind != STEP_FILTER) {
                if (st->column >= 0 && st->column < cap) org[st->column] = -1;
                for (int j = width; j < nw && j < cap; j++)
                    org[j] = -1;
            }
            width = nw < cap ? nw : cap;
        }
        ferry_free(org);
        ferry_free(next);
        chain->push_done = rc == FERRY_OK;
    }
    *out = chain->push;
    *n = chain->n_push;
    return rc;
}

int ferry_transforms_apply(struct ferry_transform_chain *chain, struct ferry_batch *in,
                           struct ferry_batch **out, struct ferry_error *err)
{
    struct ferry_batch *b = in;
    for (int i = 0; i < chain->n_steps; i++) {
        const struct step *st = &chain->steps[i];
        int rc = FERRY_OK;
        switch (st->kind) {
        case STEP_PROJECT: {
            struct ferry_batch *p = project(st, b);
            if (p == NULL) rc = oom(err);
            else b = p;
            break;
        }
        case STEP_HASH: rc = hash_column(st, chain->specials, &b, err); break;
        case STEP_MASK: rc = mask_column(st, &b, err); break;
        case STEP_ADD: rc = add_column(chain, st, &b, err); break;
        case STEP_FILTER: rc = filter_rows(st, &b, err); break;
        case STEP_CAST: rc = cast_column(st, chain->specials, &b, err); break;
        }
        if (rc != FERRY_OK) {
            ferry_batch_unref(b);
            return rc;
        }
    }
    *out = b;
    return FERRY_OK;
}
