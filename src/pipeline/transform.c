/* pipeline/transform.c - compiles and applies the transforms of one resource.
 *
 * Owns: the chain of steps and the schema after each step. Calls: batch (new, copy,
 * readers, text forms), config accessors, SHA-256/HMAC. Called by the flow's transform
 * stage (pipeline/flow.c) and by the runner at plan time (to know the sink's schema). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ferry/core.h"
#include "pipeline/transform.h"

enum step_kind { STEP_PROJECT, STEP_HASH };

struct step {
    enum step_kind kind;
    struct ferry_schema *schema; /* schema after this step */
    int *map;                    /* PROJECT: input column of each output column */
    int column;                  /* HASH: column index */
    bool hmac;
    char *key;                   /* HASH hmac: resolved secret */
    size_t key_len;
};

struct ferry_transform_chain {
    int n_steps;
    struct step *steps;
};

void ferry_transforms_free(struct ferry_transform_chain *chain)
{
    if (chain == NULL) return;
    for (int i = 0; i < chain->n_steps; i++) {
        ferry_schema_unref(chain->steps[i].schema);
        ferry_free(chain->steps[i].map);
        if (chain->steps[i].key) ferry_secret_free(chain->steps[i].key);
    }
    ferry_free(chain->steps);
    ferry_free(chain);
}

/* A new schema holding `n` fields of `in` picked by map[], with names[] overriding names
 * (NULL entries keep the name) and types[] overriding types (0 keeps it). */
static int schema_from(const struct ferry_schema *in, int n, const int *map, char *const *names,
                       const enum ferry_type *types, struct ferry_schema **out,
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
        if (!strcmp(t->kind, "drop") || !strcmp(t->kind, "select") || !strcmp(t->kind, "rename"))
            rc = compile_projection(t, resource, cur, &st, err);
        else if (!strcmp(t->kind, "hash"))
            rc = compile_hash(t, resource, cur, &st, err);
        else
            rc = ferry_cfg_error(err, t->node, "transform \"%s\" is not available in this version "
                                 "(available: drop, select, rename, hash)", t->kind);
        if (rc == FERRY_OK) rc = add_step(c, st, err);
        if (rc != FERRY_OK) {
            ferry_schema_unref(st.schema);
            ferry_free(st.map);
            if (st.key) ferry_secret_free(st.key);
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

/* Canonical text of one value, the input of a hash. Dates and timestamps outside years
 * 1..9999 have no calendar text: they are hashed as their number (days, microseconds). */
static size_t value_text(const struct ferry_batch *b, int col, int64_t row, char *buf, size_t len,
                         const uint8_t **bytes)
{
    int k = -1;
    const struct ferry_column *c = &b->columns[col];
    *bytes = (const uint8_t *)buf;
    switch (c->type) {
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t n;
        *bytes = ferry_col_bytes(b, col, row, &n);
        return n;
    }
    case FERRY_TYPE_BOOL: return (size_t)snprintf(buf, len, "%s", ferry_col_bool(b, col, row) ? "true" : "false");
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

static int hash_column(const struct step *st, struct ferry_batch **io, struct ferry_error *err)
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
        size_t len = value_text(b, st->column, r, text, sizeof text, &p);
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

int ferry_transforms_apply(struct ferry_transform_chain *chain, struct ferry_batch *in,
                           struct ferry_batch **out, struct ferry_error *err)
{
    struct ferry_batch *b = in;
    for (int i = 0; i < chain->n_steps; i++) {
        const struct step *st = &chain->steps[i];
        if (st->kind == STEP_PROJECT) {
            struct ferry_batch *p = project(st, b);
            if (p == NULL) {
                ferry_batch_unref(b);
                return ferry_error_set(err, FERRY_ENOMEM, "transform", "out of memory");
            }
            b = p;
        } else {
            int rc = hash_column(st, &b, err);
            if (rc != FERRY_OK) {
                ferry_batch_unref(b);
                return rc;
            }
        }
    }
    *out = b;
    return FERRY_OK;
}
