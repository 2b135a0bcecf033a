/* batch/arrow_export.c - batches out through the Arrow C Data Interface, without copying.
 *
 * Owns ferry_schema_export() and ferry_batch_export() and the release callbacks of what
 * they hand out. Calls the allocator and ferry_batch_ref/unref. Called by sinks and
 * embedders that hand batches to Arrow-speaking code (Parquet writers, DuckDB...).
 *
 * Shapes: the schema is a struct ("+s") with one child per field; the array is a struct
 * array of the batch's length with one child per column. The struct itself has offset 0
 * and no validity; the batch's row offset is carried by each child, because a consumer
 * applies a struct's offset on top of its children's.
 *
 * Lifetimes follow the spec's rules for moving children: a consumer may move a child out
 * and release it after (or before) the parent. So every child owns what it points to on
 * its own: a child schema owns its name, format and metadata; a child array holds its own
 * reference on the batch, whose buffers it shares. A parent's release calls the release of
 * each child still in place (release != NULL), then frees the children's storage. */
#include <stdio.h>
#include <string.h>
#include "ferry/arrow.h"
#include "ferry/core.h"

/* Stands in for buffers of size zero: NULL is legal there but some consumers mishandle
 * it. Never written through. */
static const int64_t empty_buffer[8];

/* ---- schema ------------------------------------------------------------------------ */

struct schema_node {
    char format[24];
    char *name;
    char *metadata;               /* NULL when the field has no extension */
    struct ArrowSchema *kids;     /* root only: storage of the children */
    struct ArrowSchema **kid_ptrs;
    int64_t n_kids;
};

static void schema_release(struct ArrowSchema *s)
{
    if (s == NULL || s->release == NULL) return;
    struct schema_node *node = s->private_data;
    for (int64_t i = 0; i < node->n_kids; i++)
        if (node->kids[i].release != NULL) node->kids[i].release(&node->kids[i]);
    ferry_free(node->kids);
    ferry_free(node->kid_ptrs);
    ferry_free(node->name);
    ferry_free(node->metadata);
    ferry_free(node);
    s->release = NULL;
}

static void put_i32(char *p, int32_t v)
{
    memcpy(p, &v, sizeof v); /* the spec's metadata integers are in native byte order */
}

/* {ARROW:extension:name: ext, ARROW:extension:metadata: ""} in the spec's binary form. */
static char *extension_metadata(const char *ext)
{
    static const char kname[] = "ARROW:extension:name";
    static const char kmeta[] = "ARROW:extension:metadata";
    int32_t lname = (int32_t)strlen(kname), lext = (int32_t)strlen(ext),
            lmeta = (int32_t)strlen(kmeta);
    size_t total = 4 + (4 + (size_t)lname) + (4 + (size_t)lext) + (4 + (size_t)lmeta) + 4;
    char *m = ferry_malloc(total);
    if (m == NULL) return NULL;
    char *p = m;
    put_i32(p, 2);
    p += 4;
    put_i32(p, lname);
    memcpy(p + 4, kname, (size_t)lname);
    p += 4 + lname;
    put_i32(p, lext);
    memcpy(p + 4, ext, (size_t)lext);
    p += 4 + lext;
    put_i32(p, lmeta);
    memcpy(p + 4, kmeta, (size_t)lmeta);
    p += 4 + lmeta;
    put_i32(p, 0);
    return m;
}

/* Format string and extension name (or NULL) of a field; false for an unknown type. */
static bool arrow_type(const struct ferry_field *f, char *format, size_t len, const char **ext)
{
    *ext = NULL;
    const char *fmt = NULL;
    switch (f->type) {
    case FERRY_TYPE_BOOL: fmt = "b"; break;
    case FERRY_TYPE_INT8: fmt = "c"; break;
    case FERRY_TYPE_INT16: fmt = "s"; break;
    case FERRY_TYPE_INT32: fmt = "i"; break;
    case FERRY_TYPE_INT64: fmt = "l"; break;
    case FERRY_TYPE_FLOAT32: fmt = "f"; break;
    case FERRY_TYPE_FLOAT64: fmt = "g"; break;
    case FERRY_TYPE_DECIMAL128:
        snprintf(format, len, "d:%d,%d", f->precision, f->scale);
        return true;
    case FERRY_TYPE_DECIMAL_TEXT: fmt = "u"; *ext = "ferry.decimal_text"; break;
    case FERRY_TYPE_UTF8: fmt = "u"; break;
    case FERRY_TYPE_BINARY: fmt = "z"; break;
    case FERRY_TYPE_DATE32: fmt = "tdD"; break;
    case FERRY_TYPE_TIME64_US: fmt = "ttu"; break;
    case FERRY_TYPE_TIMESTAMP_US: fmt = "tsu:"; break;
    case FERRY_TYPE_TIMESTAMPTZ_US: fmt = "tsu:UTC"; break;
    case FERRY_TYPE_UUID: fmt = "w:16"; *ext = "arrow.uuid"; break;
    case FERRY_TYPE_JSON: fmt = "u"; *ext = "arrow.json"; break;
    default: return false;
    }
    snprintf(format, len, "%s", fmt);
    return true;
}

static int export_field(const struct ferry_field *f, struct ArrowSchema *out,
                        struct ferry_error *err)
{
    struct schema_node *node = ferry_calloc(1, sizeof *node);
    if (node == NULL) goto nomem;
    const char *ext;
    if (!arrow_type(f, node->format, sizeof node->format, &ext)) {
        ferry_free(node);
        return ferry_error_set(err, FERRY_EINVAL, "arrow",
                               "column %s: type %d has no Arrow form", f->name, (int)f->type);
    }
    node->name = ferry_strdup(f->name ? f->name : "");
    if (node->name == NULL) goto nomem;
    if (ext != NULL && (node->metadata = extension_metadata(ext)) == NULL) goto nomem;
    *out = (struct ArrowSchema){
        .format = node->format,
        .name = node->name,
        .metadata = node->metadata,
        .flags = f->nullable ? ARROW_FLAG_NULLABLE : 0,
        .release = schema_release,
        .private_data = node,
    };
    return FERRY_OK;
nomem:
    if (node != NULL) {
        ferry_free(node->name);
        ferry_free(node);
    }
    return ferry_error_set(err, FERRY_ENOMEM, "arrow",
                           "column %s: out of memory exporting schema", f->name ? f->name : "?");
}

int ferry_schema_export(const struct ferry_schema *s, struct ArrowSchema *out,
                        struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t n = s->n_fields;
    struct schema_node *root = ferry_calloc(1, sizeof *root);
    if (root == NULL) goto nomem;
    snprintf(root->format, sizeof root->format, "+s");
    root->kids = ferry_calloc((size_t)(n ? n : 1), sizeof *root->kids);
    root->kid_ptrs = ferry_calloc((size_t)(n ? n : 1), sizeof *root->kid_ptrs);
    if (root->kids == NULL || root->kid_ptrs == NULL) goto nomem;
    root->name = ferry_strdup("");
    if (root->name == NULL) goto nomem;
    *out = (struct ArrowSchema){
        .format = root->format,
        .name = root->name,
        .n_children = n,
        .children = root->kid_ptrs,
        .release = schema_release,
        .private_data = root,
    };
    for (int64_t i = 0; i < n; i++) {
        root->kid_ptrs[i] = &root->kids[i];
        int rc = export_field(&s->fields[i], &root->kids[i], err);
        if (rc != FERRY_OK) {
            root->n_kids = i; /* release what was made, nothing more */
            schema_release(out);
            memset(out, 0, sizeof *out);
            return rc;
        }
    }
    root->n_kids = n;
    return FERRY_OK;
nomem:
    if (root != NULL) {
        ferry_free(root->kids);
        ferry_free(root->kid_ptrs);
        ferry_free(root);
    }
    return ferry_error_set(err, FERRY_ENOMEM, "arrow",
                           "out of memory exporting a schema of %d fields", s->n_fields);
}

/* ---- array ------------------------------------------------------------------------- */

struct array_node {
    struct ferry_batch *batch;    /* one reference, for the buffers this node points to */
    const void *buffers[3];
    struct ArrowArray *kids;      /* root only */
    struct ArrowArray **kid_ptrs;
    int64_t n_kids;
};

static void array_release(struct ArrowArray *a)
{
    if (a == NULL || a->release == NULL) return;
    struct array_node *node = a->private_data;
    for (int64_t i = 0; i < node->n_kids; i++)
        if (node->kids[i].release != NULL) node->kids[i].release(&node->kids[i]);
    ferry_free(node->kids);
    ferry_free(node->kid_ptrs);
    ferry_batch_unref(node->batch);
    ferry_free(node);
    a->release = NULL;
}

static bool is_varwidth(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_BINARY || t == FERRY_TYPE_JSON ||
           t == FERRY_TYPE_DECIMAL_TEXT;
}

static int64_t count_nulls(const uint8_t *validity, int64_t off, int64_t n)
{
    if (validity == NULL) return 0;
    int64_t valid = 0, i = 0;
    for (; i < n && ((off + i) & 7) != 0; i++)
        valid += (validity[(off + i) >> 3] >> ((off + i) & 7)) & 1;
    for (; i + 8 <= n; i += 8) valid += __builtin_popcount(validity[(off + i) >> 3]);
    for (; i < n; i++) valid += (validity[(off + i) >> 3] >> ((off + i) & 7)) & 1;
    return n - valid;
}

static const void *or_empty(const void *p)
{
    return p != NULL ? p : (const void *)empty_buffer;
}

static int export_column(struct ferry_batch *b, int col, struct ArrowArray *out,
                         struct ferry_error *err)
{
    const struct ferry_column *c = &b->columns[col];
    struct array_node *node = ferry_calloc(1, sizeof *node);
    if (node == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "arrow",
                               "column %s: out of memory exporting batch",
                               b->schema->fields[col].name);
    int64_t nulls = count_nulls(c->validity, b->offset, b->length);
    node->buffers[0] = nulls > 0 ? c->validity : NULL;
    int64_t n_buffers = 2;
    if (is_varwidth(c->type)) {
        node->buffers[1] = or_empty(c->offsets);
        node->buffers[2] = or_empty(c->data);
        n_buffers = 3;
    } else {
        node->buffers[1] = or_empty(c->values);
    }
    node->batch = ferry_batch_ref(b);
    *out = (struct ArrowArray){
        .length = b->length,
        .null_count = nulls,
        .offset = b->offset,
        .n_buffers = n_buffers,
        .buffers = node->buffers,
        .release = array_release,
        .private_data = node,
    };
    return FERRY_OK;
}

int ferry_batch_export(struct ferry_batch *b, struct ArrowArray *out, struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t n = b->schema->n_fields;
    struct array_node *root = ferry_calloc(1, sizeof *root);
    if (root == NULL) goto nomem;
    root->kids = ferry_calloc((size_t)(n ? n : 1), sizeof *root->kids);
    root->kid_ptrs = ferry_calloc((size_t)(n ? n : 1), sizeof *root->kid_ptrs);
    if (root->kids == NULL || root->kid_ptrs == NULL) goto nomem;
    root->buffers[0] = NULL; /* the struct level has no nulls */
    root->batch = ferry_batch_ref(b);
    *out = (struct ArrowArray){
        .length = b->length,
        .null_count = 0,
        .offset = 0,
        .n_buffers = 1,
        .n_children = n,
        .buffers = root->buffers,
        .children = root->kid_ptrs,
        .release = array_release,
        .private_data = root,
    };
    for (int64_t i = 0; i < n; i++) {
        root->kid_ptrs[i] = &root->kids[i];
        int rc = export_column(b, (int)i, &root->kids[i], err);
        if (rc != FERRY_OK) {
            root->n_kids = i;
            array_release(out);
            memset(out, 0, sizeof *out);
            ferry_error_prefix(err, "resource %s batch %llu", b->resource ? b->resource : "?",
                               (unsigned long long)b->seq);
            return rc;
        }
    }
    root->n_kids = n;
    return FERRY_OK;
nomem:
    if (root != NULL) {
        ferry_free(root->kids);
        ferry_free(root->kid_ptrs);
        ferry_free(root);
    }
    return ferry_error_set(err, FERRY_ENOMEM, "arrow",
                           "resource %s batch %llu: out of memory exporting",
                           b->resource ? b->resource : "?", (unsigned long long)b->seq);
}
