/* batch/schema.c - schemas: the refcounted list of fields every batch of a resource shares.
 *
 * Owns struct ferry_schema (fields, names, the key index). Calls only core (memory,
 * errors). Called by sources (discover), transforms (derived schemas), sinks (prepare)
 * and the batch code. A schema is built once (new, add_field..., finish) and is then
 * treated as immutable, so any number of batches and threads may share it; only the
 * refcount changes afterwards, atomically. */
#include <stdatomic.h>
#include <string.h>
#include "ferry/batch.h"
#include "ferry/core.h"

struct ferry_schema *ferry_schema_new(void)
{
    struct ferry_schema *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    atomic_init(&s->refcount, 1);
    return s;
}

int ferry_schema_add_field(struct ferry_schema *s, const char *name, enum ferry_type type,
                           bool nullable, struct ferry_error *err)
{
    if (name == NULL || name[0] == '\0')
        return ferry_error_set(err, FERRY_EINVAL, "schema", "field %d has an empty name",
                               s->n_fields + 1);
    if (type < FERRY_TYPE_BOOL || type >= FERRY_TYPE_MAX)
        return ferry_error_set(err, FERRY_EINVAL, "schema", "column %s: unknown type %d", name,
                               (int)type);
    /* A destination table cannot hold two columns of one name, so refuse it here, where
     * the message can still say which source column it was. */
    if (ferry_schema_find(s, name) >= 0)
        return ferry_error_set(err, FERRY_EINVAL, "schema", "column %s appears twice", name);
    char *copy = ferry_strdup(name);
    struct ferry_field *f = ferry_realloc(s->fields, sizeof *s->fields * (size_t)(s->n_fields + 1));
    if (copy == NULL || f == NULL) {
        ferry_free(copy);
        if (f != NULL) s->fields = f;
        return ferry_error_set(err, FERRY_ENOMEM, "schema", "column %s: out of memory", name);
    }
    s->fields = f;
    struct ferry_field *nf = &f[s->n_fields++];
    memset(nf, 0, sizeof *nf);
    nf->name = copy;
    nf->type = type;
    nf->nullable = nullable;
    if (type == FERRY_TYPE_DECIMAL128) {
        /* Widest decimal128 until the caller says otherwise. */
        nf->precision = 38;
        nf->scale = 0;
    }
    return FERRY_OK;
}

int ferry_schema_finish(struct ferry_schema *s, struct ferry_error *err)
{
    int n_key = 0;
    for (int i = 0; i < s->n_fields; i++) {
        const struct ferry_field *f = &s->fields[i];
        if (f->type == FERRY_TYPE_DECIMAL128) {
            if (f->precision < 1 || f->precision > 38)
                return ferry_error_set(err, FERRY_EINVAL, "schema",
                                       "column %s: decimal128 precision %d is not in 1..38",
                                       f->name, f->precision);
            if (f->scale < -f->precision || f->scale > f->precision)
                return ferry_error_set(err, FERRY_EINVAL, "schema",
                                       "column %s: decimal128 scale %d is not in -%d..%d", f->name,
                                       f->scale, f->precision, f->precision);
        }
        if (f->key_pos < 0 || f->key_pos > s->n_fields)
            return ferry_error_set(err, FERRY_EINVAL, "schema",
                                   "column %s: key position %d is not in 1..%d", f->name,
                                   f->key_pos, s->n_fields);
        if (f->key_pos > 0) n_key++;
    }
    int *key = NULL;
    if (n_key > 0) {
        key = ferry_malloc(sizeof *key * (size_t)n_key);
        if (key == NULL) return ferry_error_set(err, FERRY_ENOMEM, "schema", "out of memory");
        for (int k = 0; k < n_key; k++)
            key[k] = -1;
        for (int i = 0; i < s->n_fields; i++) {
            int p = s->fields[i].key_pos;
            if (p == 0) continue;
            if (p > n_key || key[p - 1] >= 0) {
                const char *other = p <= n_key ? s->fields[key[p - 1]].name : NULL;
                ferry_free(key);
                if (other)
                    return ferry_error_set(err, FERRY_EINVAL, "schema",
                                           "columns %s and %s both claim key position %d", other,
                                           s->fields[i].name, p);
                return ferry_error_set(err, FERRY_EINVAL, "schema",
                                       "column %s: key position %d but the key has %d columns",
                                       s->fields[i].name, p, n_key);
            }
            key[p - 1] = i;
        }
    }
    ferry_free(s->key);
    s->key = key;
    s->n_key = n_key;
    return FERRY_OK;
}

struct ferry_schema *ferry_schema_ref(struct ferry_schema *s)
{
    if (s) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
    return s;
}

void ferry_schema_unref(struct ferry_schema *s)
{
    if (s == NULL) return;
    /* acq_rel: the last owner must see every write the other owners made before theirs. */
    if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
    for (int i = 0; i < s->n_fields; i++) {
        ferry_free(s->fields[i].name);
        ferry_free(s->fields[i].origin_type);
    }
    ferry_free(s->fields);
    ferry_free(s->key);
    ferry_free(s);
}

int ferry_schema_mark_key(struct ferry_schema *s, char *const *key, int n)
{
    for (int k = 0; k < n; k++) {
        int f = ferry_schema_find(s, key[k]);
        if (f < 0) return k;
        s->fields[f].key_pos = k + 1;
    }
    return -1;
}

int ferry_schema_set_origin(struct ferry_schema *s, int i, const char *origin,
                            struct ferry_error *err)
{
    char *copy = NULL;
    if (origin != NULL && (copy = ferry_strdup(origin)) == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "schema", "out of memory");
    ferry_free(s->fields[i].origin_type);
    s->fields[i].origin_type = copy;
    return FERRY_OK;
}

int ferry_schema_find(const struct ferry_schema *s, const char *name)
{
    if (s == NULL || name == NULL) return -1;
    for (int i = 0; i < s->n_fields; i++)
        if (strcmp(s->fields[i].name, name) == 0) return i;
    return -1;
}
