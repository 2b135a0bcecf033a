/* batch/batch.c - batches: lifetime (ref/unref), slices, canonical copies, positions,
 * the value readers and the type table.
 *
 * Owns struct ferry_batch and its buffers. A batch with parent == NULL owns its buffers
 * (each one a separate ferry_malloc block, so a transform may swap one); a batch with a
 * parent (a slice, a projection) owns only its column headers and holds a reference on
 * the parent, which keeps the shared buffers alive. Calls only core. Called by the row
 * writer (builder.c), the pipeline, transforms, the digest, the Arrow export and sinks. */
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include "batch/pool.h"
#include "ferry/batch.h"
#include "ferry/core.h"

/* ---- types ---- */

static const struct {
    const char *name;
    int width;
} type_info[FERRY_TYPE_MAX] = {
    [FERRY_TYPE_BOOL] = {"bool", 0},
    [FERRY_TYPE_INT8] = {"int8", 1},
    [FERRY_TYPE_INT16] = {"int16", 2},
    [FERRY_TYPE_INT32] = {"int32", 4},
    [FERRY_TYPE_INT64] = {"int64", 8},
    [FERRY_TYPE_FLOAT32] = {"float32", 4},
    [FERRY_TYPE_FLOAT64] = {"float64", 8},
    [FERRY_TYPE_DECIMAL128] = {"decimal128", 16},
    [FERRY_TYPE_DECIMAL_TEXT] = {"decimal_text", 0},
    [FERRY_TYPE_UTF8] = {"utf8", 0},
    [FERRY_TYPE_BINARY] = {"binary", 0},
    [FERRY_TYPE_DATE32] = {"date32", 4},
    [FERRY_TYPE_TIME64_US] = {"time64", 8},
    [FERRY_TYPE_TIMESTAMP_US] = {"timestamp", 8},
    [FERRY_TYPE_TIMESTAMPTZ_US] = {"timestamptz", 8},
    [FERRY_TYPE_UUID] = {"uuid", 16},
    [FERRY_TYPE_JSON] = {"json", 0},
};

/* Other spellings a pipeline file may use; the canonical names above always work. */
static const struct {
    const char *name;
    enum ferry_type type;
} type_alias[] = {
    {"boolean", FERRY_TYPE_BOOL},
    {"tinyint", FERRY_TYPE_INT8},
    {"smallint", FERRY_TYPE_INT16},
    {"int", FERRY_TYPE_INT32},
    {"integer", FERRY_TYPE_INT32},
    {"bigint", FERRY_TYPE_INT64},
    {"float", FERRY_TYPE_FLOAT64}, /* as in PostgreSQL: float is double precision */
    {"real", FERRY_TYPE_FLOAT32},
    {"double", FERRY_TYPE_FLOAT64},
    {"decimal", FERRY_TYPE_DECIMAL128},
    {"numeric", FERRY_TYPE_DECIMAL_TEXT},
    {"text", FERRY_TYPE_UTF8},
    {"string", FERRY_TYPE_UTF8},
    {"bytes", FERRY_TYPE_BINARY},
    {"date", FERRY_TYPE_DATE32},
    {"time", FERRY_TYPE_TIME64_US},
    {"time64_us", FERRY_TYPE_TIME64_US},
    {"timestamp_us", FERRY_TYPE_TIMESTAMP_US},
    {"timestamptz_us", FERRY_TYPE_TIMESTAMPTZ_US},
};

const char *ferry_type_name(enum ferry_type t)
{
    if (t < FERRY_TYPE_BOOL || t >= FERRY_TYPE_MAX) return "unknown";
    return type_info[t].name;
}

int ferry_type_from_name(const char *name, enum ferry_type *out)
{
    if (name == NULL) return FERRY_EINVAL;
    for (int t = FERRY_TYPE_BOOL; t < FERRY_TYPE_MAX; t++) {
        if (strcasecmp(name, type_info[t].name) == 0) {
            *out = (enum ferry_type)t;
            return FERRY_OK;
        }
    }
    for (size_t i = 0; i < sizeof type_alias / sizeof type_alias[0]; i++) {
        if (strcasecmp(name, type_alias[i].name) == 0) {
            *out = type_alias[i].type;
            return FERRY_OK;
        }
    }
    return FERRY_EINVAL;
}

int ferry_type_width(enum ferry_type t)
{
    if (t < FERRY_TYPE_BOOL || t >= FERRY_TYPE_MAX) return 0;
    return type_info[t].width;
}

bool ferry_type_is_varwidth(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_BINARY || t == FERRY_TYPE_JSON ||
           t == FERRY_TYPE_DECIMAL_TEXT;
}

/* ---- lifetime ---- */

struct ferry_batch *ferry_batch_new(struct ferry_schema *schema, const char *resource)
{
    struct ferry_batch *b = ferry_calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    atomic_init(&b->refcount, 1);
    int n = schema->n_fields;
    b->columns = ferry_calloc((size_t)(n > 0 ? n : 1), sizeof *b->columns);
    b->resource = ferry_strdup(resource ? resource : "");
    if (b->columns == NULL || b->resource == NULL) {
        ferry_free(b->columns);
        ferry_free(b->resource);
        ferry_free(b);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        b->columns[i].type = schema->fields[i].type;
    b->schema = ferry_schema_ref(schema);
    return b;
}

struct ferry_batch *ferry_batch_ref(struct ferry_batch *b)
{
    if (b) atomic_fetch_add_explicit(&b->refcount, 1, memory_order_relaxed);
    return b;
}

void ferry_batch_unref(struct ferry_batch *b)
{
    if (b == NULL) return;
    if (atomic_fetch_sub_explicit(&b->refcount, 1, memory_order_acq_rel) != 1) return;
    if (b->parent != NULL) {
        ferry_batch_unref(b->parent);
    } else {
        /* The buffers serve the next batch a row writer closes (batch/pool.h). */
        for (int i = 0; i < b->schema->n_fields; i++) {
            struct ferry_column *c = &b->columns[i];
            ferry__pool_put(c->validity);
            ferry__pool_put(c->values);
            ferry__pool_put(c->offsets);
            ferry__pool_put(c->data);
        }
        ferry__pool_put(b->ops);
    }
    ferry_free(b->columns);
    ferry_free(b->resource);
    ferry_free(b->position);
    ferry_schema_unref(b->schema);
    ferry_free(b);
}

int ferry_batch_set_position(struct ferry_batch *b, const char *json)
{
    char *p = NULL;
    if (json != NULL && (p = ferry_strdup(json)) == NULL) return FERRY_ENOMEM;
    ferry_free(b->position);
    b->position = p;
    return FERRY_OK;
}

/* ---- bit helpers ---- */

static inline bool bit_get(const uint8_t *bits, int64_t i)
{
    return (bits[i >> 3] >> (i & 7)) & 1u;
}

/* Nulls among bits [from, from+n) of a validity bitmap. */
static int64_t count_nulls(const uint8_t *validity, int64_t from, int64_t n)
{
    if (validity == NULL || n <= 0) return 0;
    int64_t set = 0, i = from, end = from + n;
    while (i < end && (i & 7))
        set += bit_get(validity, i++);
    while (end - i >= 64) {
        uint64_t w;
        memcpy(&w, validity + (i >> 3), 8);
        set += __builtin_popcountll(w);
        i += 64;
    }
    while (end - i >= 8) {
        set += __builtin_popcount(validity[i >> 3]);
        i += 8;
    }
    while (i < end)
        set += bit_get(validity, i++);
    return n - set;
}

/* Bits [from, from+n) of src into a fresh bitmap starting at bit 0, padding bits zero. */
static uint8_t *copy_bits(const uint8_t *src, int64_t from, int64_t n, size_t *cap)
{
    size_t bytes = (size_t)(n + 7) / 8;
    uint8_t *dst = ferry_calloc(bytes ? bytes : 1, 1);
    if (dst == NULL) return NULL;
    *cap = bytes ? bytes : 1;
    if (n == 0) return dst;
    if ((from & 7) == 0) {
        memcpy(dst, src + (from >> 3), bytes);
        if (n & 7) dst[bytes - 1] &= (uint8_t)((1u << (n & 7)) - 1);
        return dst;
    }
    for (int64_t i = 0; i < n; i++)
        if (bit_get(src, from + i)) dst[i >> 3] |= (uint8_t)(1u << (i & 7));
    return dst;
}

/* ---- slices and copies ---- */

struct ferry_batch *ferry_batch_slice(struct ferry_batch *b, int64_t offset, int64_t length)
{
    if (b == NULL || offset < 0 || length < 0 || offset > b->length || length > b->length - offset)
        return NULL;
    struct ferry_batch *s = ferry_batch_new(b->schema, b->resource);
    if (s == NULL) return NULL;
    /* The slice ends where its parent ends: it carries the parent's position. Any other
     * slice does not know the position of its last row. */
    if (offset + length == b->length && ferry_batch_set_position(s, b->position) != FERRY_OK) {
        ferry_batch_unref(s);
        return NULL;
    }
    s->seq = b->seq;
    s->shard = b->shard;
    s->group_cut = b->group_cut && offset + length == b->length;
    s->length = length;
    s->offset = b->offset + offset;
    s->ops = b->ops;
    s->bytes = b->length > 0 ? (size_t)((double)b->bytes * (double)length / (double)b->length) : 0;
    for (int i = 0; i < b->schema->n_fields; i++) {
        struct ferry_column *c = &s->columns[i];
        *c = b->columns[i];
        c->validity_cap = c->values_cap = c->offsets_cap = c->data_cap = 0;
        /* Exact null counts (Arrow requires them); a range without nulls drops the bitmap
         * so that "validity NULL when null_count == 0" holds for slices too. */
        c->null_count = count_nulls(c->validity, s->offset, length);
        if (c->null_count == 0) c->validity = NULL;
    }
    s->parent = ferry_batch_ref(b->parent ? b->parent : b);
    return s;
}

static int copy_column(const struct ferry_batch *b, int col, struct ferry_column *out)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t off = b->offset, n = b->length;
    out->type = c->type;
    out->null_count = count_nulls(c->validity, off, n);
    if (out->null_count > 0) {
        out->validity = copy_bits(c->validity, off, n, &out->validity_cap);
        if (out->validity == NULL) return FERRY_ENOMEM;
    }
    if (c->type == FERRY_TYPE_BOOL) {
        out->values = copy_bits(c->values, off, n, &out->values_cap);
        if (out->values == NULL) return FERRY_ENOMEM;
        /* Canonical: a null row's value bit is zero. */
        if (out->validity)
            for (size_t i = 0; i < out->values_cap; i++)
                out->values[i] &= out->validity[i];
        return FERRY_OK;
    }
    if (ferry_type_is_varwidth(c->type)) {
        out->offsets = ferry_malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (out->offsets == NULL) return FERRY_ENOMEM;
        out->offsets_cap = sizeof(int32_t) * (size_t)(n + 1);
        int32_t base = c->offsets ? c->offsets[off] : 0;
        for (int64_t i = 0; i <= n; i++)
            out->offsets[i] = c->offsets ? c->offsets[off + i] - base : 0;
        size_t used = (size_t)out->offsets[n];
        out->data = ferry_malloc(used ? used : 1);
        if (out->data == NULL) return FERRY_ENOMEM;
        out->data_cap = used ? used : 1;
        if (used) memcpy(out->data, c->data + base, used);
        return FERRY_OK;
    }
    size_t w = (size_t)ferry_type_width(c->type);
    size_t bytes = w * (size_t)n;
    out->values = ferry_malloc(bytes ? bytes : 1);
    if (out->values == NULL) return FERRY_ENOMEM;
    out->values_cap = bytes ? bytes : 1;
    if (bytes) memcpy(out->values, c->values + (size_t)off * w, bytes);
    if (out->validity)
        for (int64_t i = 0; i < n; i++)
            if (!bit_get(out->validity, i)) memset(out->values + (size_t)i * w, 0, w);
    return FERRY_OK;
}

struct ferry_batch *ferry_batch_copy(const struct ferry_batch *b)
{
    if (b == NULL) return NULL;
    struct ferry_batch *d = ferry_batch_new(b->schema, b->resource);
    if (d == NULL) return NULL;
    d->seq = b->seq;
    d->shard = b->shard;
    d->group_cut = b->group_cut;
    d->digest = b->digest;
    d->bytes = b->bytes;
    d->length = b->length;
    size_t n = (size_t)b->length;
    d->ops = ferry_malloc(n ? n : 1);
    if (d->ops == NULL || ferry_batch_set_position(d, b->position) != FERRY_OK) goto fail;
    if (n) memcpy(d->ops, b->ops + b->offset, n);
    for (int i = 0; i < b->schema->n_fields; i++)
        if (copy_column(b, i, &d->columns[i]) != FERRY_OK) goto fail;
    return d;
fail:
    ferry_batch_unref(d);
    return NULL;
}

/* ---- readers ---- */

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

bool ferry_col_bool(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    if (c->type != FERRY_TYPE_BOOL) return ferry_col_int(b, col, row) != 0;
    return bit_get(c->values, row + b->offset);
}

int64_t ferry_col_int(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t i = row + b->offset;
    switch (c->type) {
    case FERRY_TYPE_BOOL:
        return bit_get(c->values, i);
    case FERRY_TYPE_INT8:
        return ((const int8_t *)c->values)[i];
    case FERRY_TYPE_INT16:
        return ((const int16_t *)c->values)[i];
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32:
        return ((const int32_t *)c->values)[i];
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return ((const int64_t *)c->values)[i];
    case FERRY_TYPE_FLOAT32:
        return (int64_t)((const float *)c->values)[i];
    case FERRY_TYPE_FLOAT64:
        return (int64_t)((const double *)c->values)[i];
    default:
        return 0;
    }
}

double ferry_col_float(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t i = row + b->offset;
    switch (c->type) {
    case FERRY_TYPE_FLOAT32:
        return ((const float *)c->values)[i];
    case FERRY_TYPE_FLOAT64:
        return ((const double *)c->values)[i];
    default:
        return (double)ferry_col_int(b, col, row);
    }
}

struct ferry_decimal128 ferry_col_dec128(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    struct ferry_decimal128 v = {0, 0};
    if (c->type != FERRY_TYPE_DECIMAL128) return v;
    const uint8_t *p = c->values + (size_t)(row + b->offset) * 16;
    v.lo = load_le64(p);
    v.hi = (int64_t)load_le64(p + 8);
    return v;
}

const uint8_t *ferry_col_bytes(const struct ferry_batch *b, int col, int64_t row, size_t *len)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t i = row + b->offset;
    if (ferry_type_is_varwidth(c->type)) {
        *len = (size_t)(c->offsets[i + 1] - c->offsets[i]);
        return c->data + c->offsets[i];
    }
    size_t w = (size_t)ferry_type_width(c->type);
    if (w == 0) {
        *len = 0;
        return NULL;
    }
    *len = w;
    return c->values + (size_t)i * w;
}

const uint8_t *ferry_col_fixed(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    size_t w = (size_t)ferry_type_width(c->type);
    if (w == 0) return NULL;
    return c->values + (size_t)(row + b->offset) * w;
}
