/* connectors/iceberg/scan.c - reads one "unit" of an iceberg source plan: a Parquet data file
 * of the table, minus the rows its delete files remove, as inserts or as deletes by key.
 *
 * A unit (a JSON object frozen in the plan, see iceberg_source.c) names a file (path, size),
 * the op its rows become ("insert" or "delete"), the position delete files to apply ("pos":
 * rows whose (file_path, pos) they list are dropped; with "only_pos" instead, only those rows
 * are kept: a delete of rows of an older file), the equality delete files to apply ("eq",
 * read by the columns "eq_cols": rows whose values of those columns match one are dropped),
 * and "keys": the file is itself an equality delete file whose rows become deletes.
 *
 * The file is decoded by the Parquet reader (formats/parquet_reader.h) into a private row
 * writer whose schema is the output's columns the file has plus the equality columns; each
 * batch it closes is filtered here and copied row by row into the run's writer. Columns are
 * matched by field id (the plan's "field_ids": {column: id}, eq_cols' "id"), so a column
 * renamed after the file was written reads from its old name; a file whose columns carry no
 * ids (not written by an Iceberg writer) is matched by name. A column of the table's schema
 * the file lacks (added later) reads as null.
 * A file's column of another type family than the table says stops the read naming the file
 * and the column. Memory: the reader's (one column chunk, one row group of the selected
 * columns), the sorted positions of the position deletes that name the file, and a hash set
 * of the equality delete keys (hex of their values).
 *
 * Owns nothing between calls. Calls io.c (ranged reads), parquet_reader.c, the batch builder.
 * Called by iceberg_source.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "connectors/iceberg/iceberg.h"
#include "formats/parquet_reader.h"

#define KEY_MAX 4096 /* bytes of one serialized equality key */

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg source: out of memory");
}

/* ---- one Parquet file through a private row writer ------------------------------------- */

struct ranged {
    struct ferry__iceberg_io *io;
    const char *path;
};

static int ranged_read(void *ctx, uint64_t off, size_t n, void *p, struct ferry_error *err)
{
    struct ranged *g = ctx;
    return ferry__iceberg_io_read_range(g->io, g->path, off, n, p, err);
}

static bool int_family(enum ferry_type t)
{
    return t == FERRY_TYPE_INT8 || t == FERRY_TYPE_INT16 || t == FERRY_TYPE_INT32 ||
           t == FERRY_TYPE_INT64;
}

static bool text_family(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT;
}

/* Whether a file column of type `got` reads exactly as the table's `want`. */
static bool compatible(const struct ferry_field *want, const struct ferry_field *got)
{
    if (want->type == FERRY_TYPE_DECIMAL128)
        return got->type == FERRY_TYPE_DECIMAL128 && got->precision <= want->precision &&
               got->scale == want->scale;
    if (want->type == got->type) return true;
    if (want->type == FERRY_TYPE_INT64) return int_family(got->type);
    if (want->type == FERRY_TYPE_INT32) return int_family(got->type) && got->type != FERRY_TYPE_INT64;
    if (want->type == FERRY_TYPE_FLOAT64) return got->type == FERRY_TYPE_FLOAT32;
    if (want->type == FERRY_TYPE_UTF8) return text_family(got->type);
    if (want->type == FERRY_TYPE_BINARY) return got->type == FERRY_TYPE_UTF8;
    return false;
}

/* The file's top-level field for the table's field w: by field id when the table gives one
 * (id >= 0) and the file carries ids (Iceberg data files do: a renamed column keeps its id),
 * else by name (files written without ids). -1: the file lacks it. */
static int file_field(const struct ferry_parquet_reader *r, const struct ferry_field *w, int32_t id)
{
    bool any = false;
    int k = id >= 0 ? ferry__parquet_reader_find_id(r, id, &any) : -1;
    if (id >= 0 && any) return k;
    return ferry_schema_find(ferry__parquet_reader_schema(r), w->name);
}

/* Reads every row of the file at path (size bytes) as `want` (fields the file lacks are left
 * out: present[i] says which are read, in order) into emit(ctx). ids: the table's field id of
 * each of want's fields (-1: none), or NULL (match by name). */
static int read_file(struct ferry__iceberg_io *io, const char *path, int64_t size,
                     const struct ferry_schema *want, const int32_t *ids, bool *present,
                     ferry_emit_fn emit, void *ctx, struct ferry_error *err)
{
    struct ranged g = {io, path};
    struct ferry_parquet_reader *r = NULL;
    int rc = ferry__parquet_reader_open_ranged((uint64_t)size, ranged_read, &g, path, &r, err);
    if (rc != FERRY_OK) return rc;
    const struct ferry_schema *fs = ferry__parquet_reader_schema(r);
    struct ferry_schema *rs = ferry_schema_new();
    const char **names = ferry_calloc((size_t)want->n_fields + 1, sizeof *names);
    int n = 0;
    if (rs == NULL || names == NULL) rc = nomem(err);
    for (int i = 0; rc == FERRY_OK && i < want->n_fields; i++) {
        const struct ferry_field *w = &want->fields[i];
        int k = file_field(r, w, ids ? ids[i] : -1);
        present[i] = k >= 0;
        if (k < 0) continue;
        if (!compatible(w, &fs->fields[k])) {
            rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                 "iceberg source: %s: column \"%s\" (\"%s\" in the file) is %s "
                                 "in the file, the table says %s",
                                 path, w->name, fs->fields[k].name,
                                 ferry_type_name(fs->fields[k].type), ferry_type_name(w->type));
            break;
        }
        names[n++] = fs->fields[k].name;
        rc = ferry_schema_add_field(rs, w->name, w->type, true, err);
        if (rc == FERRY_OK) {
            rs->fields[n - 1].precision = w->precision;
            rs->fields[n - 1].scale = w->scale;
        }
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(rs, err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_select(r, names, n, err);
    struct ferry_rw_limits lim = {.rows = 4096, .bytes = 8 << 20, .max_value_bytes = 0};
    struct ferry_row_writer *rw = rc == FERRY_OK ? ferry__rw_new(rs, path, lim, emit, ctx) : NULL;
    if (rc == FERRY_OK && rw == NULL) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry__parquet_reader_read(r, rw, err);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, false, err);
    ferry__rw_free(rw);
    ferry_free(names);
    ferry_schema_unref(rs);
    ferry__parquet_reader_free(r);
    return rc;
}

/* ---- delete files ------------------------------------------------------------------------ */

struct posdel {
    const char *target; /* the data file whose positions are collected; NULL: every path */
    int64_t *pos;
    size_t n, cap;
    json_t *paths; /* target NULL: the distinct file_path values */
};

static int posdel_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct posdel *d = ctx;
    int rc = FERRY_OK;
    for (int64_t i = 0; i < b->length && rc == FERRY_OK; i++) {
        if (ferry_col_is_null(b, 0, i) || ferry_col_is_null(b, 1, i)) continue;
        size_t n;
        const uint8_t *p = ferry_col_bytes(b, 0, i, &n);
        if (d->target == NULL) {
            char *path = ferry_strndup((const char *)p, n);
            if (path == NULL || json_object_set_new(d->paths, path, json_true()) != 0)
                rc = nomem(err);
            ferry_free(path);
            continue;
        }
        if (n != strlen(d->target) || memcmp(p, d->target, n) != 0) continue;
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 1024;
            int64_t *np = ferry_realloc(d->pos, cap * sizeof *np);
            if (np == NULL) {
                rc = nomem(err);
                break;
            }
            d->pos = np;
            d->cap = cap;
        }
        d->pos[d->n++] = ferry_col_int(b, 1, i);
    }
    ferry_batch_unref(b);
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static struct ferry_schema *posdel_schema(struct ferry_error *err)
{
    struct ferry_schema *s = ferry_schema_new();
    int rc = s ? ferry_schema_add_field(s, "file_path", FERRY_TYPE_UTF8, true, err) : nomem(err);
    if (rc == FERRY_OK) rc = ferry_schema_add_field(s, "pos", FERRY_TYPE_INT64, true, err);
    if (rc == FERRY_OK) rc = ferry_schema_finish(s, err);
    if (rc == FERRY_OK) return s;
    ferry_schema_unref(s);
    return NULL;
}

/* Reads the position delete files of `files` ([{"file","size"}]) into d. */
static int load_posdels(struct ferry__iceberg_io *io, json_t *files, struct posdel *d,
                        struct ferry_error *err)
{
    struct ferry_schema *ps = posdel_schema(err);
    if (ps == NULL) return err->code;
    bool present[2];
    int rc = FERRY_OK;
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f)
    {
        const char *path = json_string_value(json_object_get(f, "file"));
        rc = read_file(io, path ? path : "", json_integer_value(json_object_get(f, "size")), ps, NULL,
                       present, posdel_emit, d, err);
        if (rc == FERRY_OK && (!present[0] || !present[1]))
            rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                 "iceberg source: position delete file %s has no file_path or pos "
                                 "column",
                                 path);
        if (rc != FERRY_OK) break;
    }
    ferry_schema_unref(ps);
    if (rc == FERRY_OK && d->n > 1) qsort(d->pos, d->n, sizeof *d->pos, cmp_i64);
    return rc;
}

int ferry__iceberg_posdel_targets(struct ferry__iceberg_io *io, const char *path, int64_t size,
                                  json_t *paths, struct ferry_error *err)
{
    json_t *files = json_pack("[{s:s,s:I}]", "file", path, "size", (json_int_t)size);
    if (files == NULL) return nomem(err);
    struct posdel d = {.target = NULL, .paths = paths};
    int rc = load_posdels(io, files, &d, err);
    json_decref(files);
    return rc;
}

/* The key of row i over cols as hex into hex (NUL-terminated); false when too long. */
static bool key_hex(const struct ferry_batch *b, const int *cols, int n, int64_t i,
                    struct ferry_buf *raw, struct ferry_buf *hex)
{
    ferry_buf_reset(raw);
    for (int k = 0; k < n; k++) {
        int c = cols[k];
        uint8_t tag = ferry_col_is_null(b, c, i) ? 0 : 1;
        if (ferry_buf_append(raw, &tag, 1) != FERRY_OK) return false;
        if (!tag) continue;
        enum ferry_type t = b->schema->fields[c].type;
        int rc;
        if (t == FERRY_TYPE_FLOAT32 || t == FERRY_TYPE_FLOAT64) {
            double d = ferry_col_float(b, c, i);
            rc = ferry_buf_append(raw, &d, sizeof d);
        } else if (t == FERRY_TYPE_DECIMAL128) {
            struct ferry_decimal128 d = ferry_col_dec128(b, c, i);
            rc = ferry_buf_append(raw, &d, sizeof d);
        } else if (t == FERRY_TYPE_UUID) {
            rc = ferry_buf_append(raw, ferry_col_fixed(b, c, i), 16);
        } else if (t == FERRY_TYPE_BOOL) {
            uint8_t v = ferry_col_bool(b, c, i);
            rc = ferry_buf_append(raw, &v, 1);
        } else if (ferry_type_is_varwidth(t)) {
            size_t len;
            const uint8_t *p = ferry_col_bytes(b, c, i, &len);
            uint32_t l32 = (uint32_t)len;
            rc = ferry_buf_append(raw, &l32, 4);
            if (rc == FERRY_OK) rc = ferry_buf_append(raw, p, len);
        } else {
            int64_t v = ferry_col_int(b, c, i);
            rc = ferry_buf_append(raw, &v, sizeof v);
        }
        if (rc != FERRY_OK || raw->len > KEY_MAX) return false;
    }
    static const char digits[] = "0123456789abcdef";
    ferry_buf_reset(hex);
    for (size_t k = 0; k < raw->len; k++) {
        uint8_t c = (uint8_t)raw->data[k];
        char two[2] = {digits[c >> 4], digits[c & 15]};
        if (ferry_buf_append(hex, two, 2) != FERRY_OK) return false;
    }
    return ferry_buf_append(hex, "", 1) == FERRY_OK;
}

struct eqdel {
    json_t *set;
    const char *file;
    struct ferry_buf raw, hex;
    int cols[64];
    int n;
};

static int eqdel_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct eqdel *e = ctx;
    int rc = FERRY_OK;
    for (int64_t i = 0; i < b->length && rc == FERRY_OK; i++) {
        if (!key_hex(b, e->cols, e->n, i, &e->raw, &e->hex))
            rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                 "iceberg source: equality delete file %s: a key longer than %d "
                                 "bytes",
                                 e->file, KEY_MAX);
        else if (json_object_set_new(e->set, (const char *)e->hex.data, json_true()) != 0)
            rc = nomem(err);
    }
    ferry_batch_unref(b);
    return rc;
}

/* ---- the unit ---------------------------------------------------------------------------- */

struct unit {
    struct ferry_row_writer *out;
    const struct ferry_schema *os;
    const char *file;
    enum ferry_op op;
    int map[512];      /* output column -> column of the read batch, -1: null */
    int keycols[64];   /* equality columns in the read batch */
    int keyorig[64];   /* the same in the read schema */
    int nkey;
    struct posdel pos;
    bool keep_pos;
    size_t ipos;
    struct eqdel eq;
    int64_t row, *emitted, skip;
    int32_t *ids; /* the table's field id of each read-schema field, -1: none */
};

/* Whether row i (file position u->row) is dropped by the unit's deletes. */
static int dropped(struct unit *u, const struct ferry_batch *b, int64_t i, bool *drop,
                   struct ferry_error *err)
{
    *drop = false;
    if (u->pos.n > 0 || u->keep_pos) {
        while (u->ipos < u->pos.n && u->pos.pos[u->ipos] < u->row) u->ipos++;
        bool hit = u->ipos < u->pos.n && u->pos.pos[u->ipos] == u->row;
        if (u->keep_pos ? !hit : hit) {
            *drop = true;
            return FERRY_OK;
        }
    }
    if (u->eq.set != NULL && json_object_size(u->eq.set) > 0) {
        if (!key_hex(b, u->keycols, u->nkey, i, &u->eq.raw, &u->eq.hex))
            return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                   "iceberg source: %s row %" PRId64 ": a key longer than %d bytes",
                                   u->file, u->row, KEY_MAX);
        *drop = json_object_get(u->eq.set, (const char *)u->eq.hex.data) != NULL;
    }
    return FERRY_OK;
}

static int unit_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct unit *u = ctx;
    int rc = FERRY_OK;
    for (int64_t i = 0; i < b->length && rc == FERRY_OK; i++, u->row++) {
        bool drop;
        rc = dropped(u, b, i, &drop, err);
        if (rc != FERRY_OK || drop) continue;
        if (++*u->emitted <= u->skip) continue; /* delivered before a resume */
        ferry_rw_begin(u->out, u->op);
        for (int c = 0; c < u->os->n_fields; c++) {
            bool blank = u->op == FERRY_OP_DELETE && u->os->fields[c].key_pos == 0;
            if (blank || u->map[c] < 0)
                ferry_rw_null(u->out);
            else
                ferry_rw_copy_value(u->out, b, u->map[c], i);
        }
        ferry_rw_set_offset(u->out, *u->emitted);
        rc = ferry_rw_end(u->out, err);
    }
    ferry_batch_unref(b);
    return rc;
}

/* The schema a unit's file is read as: the output's fields, then the equality columns the
 * output lacks (their types from eq_types: [{"name","type","precision","scale"}]). */
static int read_schema(struct unit *u, json_t *eq_cols, struct ferry_schema **out,
                       struct ferry_error *err)
{
    struct ferry_schema *s = ferry_schema_new();
    int rc = s ? FERRY_OK : nomem(err);
    for (int c = 0; rc == FERRY_OK && c < u->os->n_fields; c++) {
        const struct ferry_field *f = &u->os->fields[c];
        rc = ferry_schema_add_field(s, f->name, f->type, true, err);
        if (rc == FERRY_OK) {
            s->fields[c].precision = f->precision;
            s->fields[c].scale = f->scale;
        }
    }
    size_t i;
    json_t *e;
    u->nkey = 0;
    json_array_foreach(eq_cols, i, e)
    {
        if (rc != FERRY_OK) break;
        const char *name = json_string_value(json_object_get(e, "name"));
        enum ferry_type t = FERRY_TYPE_UTF8;
        if (name == NULL ||
            ferry_type_from_name(json_string_value(json_object_get(e, "type")), &t) != FERRY_OK ||
            i >= 64) {
            rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                 "iceberg source: %s: the plan's equality columns are malformed",
                                 u->file);
            break;
        }
        int k = ferry_schema_find(s, name);
        if (k < 0) {
            k = s->n_fields;
            rc = ferry_schema_add_field(s, name, t, true, err);
            if (rc == FERRY_OK) {
                s->fields[k].precision = (int)json_integer_value(json_object_get(e, "precision"));
                s->fields[k].scale = (int)json_integer_value(json_object_get(e, "scale"));
            }
        }
        u->keycols[u->nkey++] = k;
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(s, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(s);
        return rc;
    }
    *out = s;
    return FERRY_OK;
}

/* Reads the equality delete files of the unit into u->eq.set. */
static int load_eqdels(struct ferry__iceberg_io *io, struct unit *u, json_t *files,
                       const struct ferry_schema *rs, struct ferry_error *err)
{
    struct ferry_schema *ks = ferry_schema_new();
    int rc = ks ? FERRY_OK : nomem(err);
    int32_t kids[64];
    for (int k = 0; rc == FERRY_OK && k < u->nkey; k++) {
        const struct ferry_field *f = &rs->fields[u->keycols[k]];
        kids[k] = u->ids[u->keycols[k]];
        rc = ferry_schema_add_field(ks, f->name, f->type, true, err);
        if (rc == FERRY_OK) {
            ks->fields[k].precision = f->precision;
            ks->fields[k].scale = f->scale;
        }
        u->eq.cols[k] = k;
    }
    u->eq.n = u->nkey;
    if (rc == FERRY_OK) rc = ferry_schema_finish(ks, err);
    bool present[64];
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f)
    {
        if (rc != FERRY_OK) break;
        u->eq.file = json_string_value(json_object_get(f, "file"));
        rc = read_file(io, u->eq.file ? u->eq.file : "", json_integer_value(json_object_get(f, "size")),
                       ks, kids, present, eqdel_emit, &u->eq, err);
        for (int k = 0; rc == FERRY_OK && k < u->nkey; k++)
            if (!present[k])
                rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                     "iceberg source: equality delete file %s has no column \"%s\"",
                                     u->eq.file, ks->fields[k].name);
    }
    ferry_schema_unref(ks);
    return rc;
}

static void unit_release(struct unit *u)
{
    ferry_free(u->pos.pos);
    json_decref(u->eq.set);
    ferry_buf_release(&u->eq.raw);
    ferry_buf_release(&u->eq.hex);
}

/* The output column -> read column map, after read_file said which fields the file has. */
static void build_map(struct unit *u, const struct ferry_schema *rs, const bool *present)
{
    int at = 0;
    int idx[1024];
    for (int k = 0; k < rs->n_fields && k < 1024; k++) idx[k] = present[k] ? at++ : -1;
    for (int c = 0; c < u->os->n_fields; c++) u->map[c] = idx[c];
    for (int k = 0; k < u->nkey; k++) {
        u->keyorig[k] = u->keycols[k];
        u->keycols[k] = idx[u->keycols[k]];
    }
}

struct unit_pass {
    struct unit *u;
    const struct ferry_schema *rs;
    bool *present;
    bool mapped;
};

static int pass_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct unit_pass *p = ctx;
    if (!p->mapped) {
        build_map(p->u, p->rs, p->present);
        p->mapped = true;
        for (int k = 0; k < p->u->nkey; k++)
            if (p->u->keycols[k] < 0) {
                ferry_batch_unref(b);
                return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                                       "iceberg source: %s has no column \"%s\" (an equality "
                                       "column of its deletes)",
                                       p->u->file, p->rs->fields[p->u->keyorig[k]].name);
            }
    }
    return unit_emit(p->u, b, err);
}

/* u->ids for read schema rs: an equality column's own "id" (eq_cols), else the plan's
 * field_ids entry for the column's name, else -1. */
static int field_ids(struct unit *u, const struct ferry_schema *rs, json_t *by_name,
                     json_t *eq_cols, struct ferry_error *err)
{
    u->ids = ferry_calloc((size_t)rs->n_fields + 1, sizeof *u->ids);
    if (u->ids == NULL) return nomem(err);
    for (int c = 0; c < rs->n_fields; c++) {
        json_t *id = json_object_get(by_name, rs->fields[c].name);
        u->ids[c] = json_is_integer(id) ? (int32_t)json_integer_value(id) : -1;
    }
    for (int k = 0; k < u->nkey && k < (int)json_array_size(eq_cols); k++) {
        json_t *id = json_object_get(json_array_get(eq_cols, (size_t)k), "id");
        if (json_is_integer(id)) u->ids[u->keycols[k]] = (int32_t)json_integer_value(id);
    }
    return FERRY_OK;
}

int ferry__iceberg_read_unit(struct ferry__iceberg_io *io, json_t *unit, json_t *ids,
                             const struct ferry_schema *os, struct ferry_row_writer *out,
                             int64_t *emitted, int64_t skip, struct ferry_error *err)
{
    if (os->n_fields > 512)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg source: more than 512 columns");
    struct unit u;
    memset(&u, 0, sizeof u);
    u.out = out;
    u.os = os;
    u.file = json_string_value(json_object_get(unit, "file"));
    const char *op = json_string_value(json_object_get(unit, "op"));
    u.op = op && strcmp(op, "delete") == 0 ? FERRY_OP_DELETE : FERRY_OP_INSERT;
    u.emitted = emitted;
    u.skip = skip;
    u.pos.target = u.file;
    ferry_buf_init(&u.eq.raw, 0);
    ferry_buf_init(&u.eq.hex, 0);
    if (u.file == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                               "iceberg source: a unit of the frozen plan names no file");
    json_t *only = json_object_get(unit, "only_pos");
    u.keep_pos = json_is_array(only);
    bool keys = json_is_true(json_object_get(unit, "keys"));
    struct ferry_schema *rs = NULL;
    int rc = read_schema(&u, json_object_get(unit, "eq_cols"), &rs, err);
    if (rc == FERRY_OK) rc = field_ids(&u, rs, ids, json_object_get(unit, "eq_cols"), err);
    if (rc == FERRY_OK) rc = load_posdels(io, u.keep_pos ? only : json_object_get(unit, "pos"), &u.pos, err);
    json_t *eq = json_object_get(unit, "eq");
    if (rc == FERRY_OK && json_array_size(eq) > 0) {
        u.eq.set = json_object();
        rc = u.eq.set ? load_eqdels(io, &u, eq, rs, err) : nomem(err);
    }
    bool *present = rc == FERRY_OK ? ferry_calloc((size_t)rs->n_fields + 1, sizeof *present) : NULL;
    if (rc == FERRY_OK && present == NULL) rc = nomem(err);
    struct unit_pass pass = {&u, rs, present, false};
    if (keys) u.nkey = 0; /* an equality delete file read as deletes: nothing filters it */
    if (rc == FERRY_OK)
        rc = read_file(io, u.file, json_integer_value(json_object_get(unit, "size")), rs, u.ids,
                       present, pass_emit, &pass, err);
    ferry_free(present);
    ferry_schema_unref(rs);
    unit_release(&u);
    ferry_free(u.ids);
    return rc;
}
