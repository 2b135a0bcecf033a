/* tests/unit/test_transform.c - the transform stage (pipeline/transform.c): compiling the
 * `transforms:` entries of a real pipeline file against a schema, and applying the chain to
 * batches built with the real row writer.
 *
 * What is proven: output schemas (names, types, nullability, key positions); projections
 * share the input's buffers and keep it alive exactly as long as the output; hash values
 * equal SHA-256 / HMAC-SHA-256 of each value's canonical text (several checked against
 * digests computed outside ferry); nulls stay null; slices work as input; every compile
 * error names the transform's index, key and line. mask counts code points; add fills
 * constants, the run id, one load time per batch and the batch position; filter keeps exactly
 * the matching rows of every type (and every delete) with the batch's seq and position, even
 * when none is left; cast converts values exactly and names column, row and value when text
 * does not parse; allocation failures anywhere in compile or apply are clean. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "unit.h"
#include "testrows.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "pipeline/transform.h"

/* The pipeline file around the transforms; its first transform is on line 11. */
static const char head[] = "version: 1\n"             /* 1 */
                           "name: t\n"                /* 2 */
                           "source:\n"                /* 3 */
                           "  type: sample\n"         /* 4 */
                           "  resources:\n"           /* 5 */
                           "    - table: test.rows\n" /* 6 */
                           "    - table: people\n"    /* 7 */
                           "sink:\n"                  /* 8 */
                           "  type: null\n"           /* 9 */
                           "transforms:\n";           /* 10 */

static struct ferry_pipeline_spec *load(const char *transforms)
{
    char *text = ferry_asprintf("%s%s", head, transforms);
    assert_non_null(text);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err = {0};
    int rc = ferry_pipeline_load_string(text, strlen(text), "t.yaml", &p, &err);
    ferry_free(text);
    if (rc != FERRY_OK) fail_msg("load: %s", err.message);
    return p;
}

struct compiled {
    struct ferry_pipeline_spec *p;
    struct ferry_transform_chain *chain;
    struct ferry_schema *out;
};

static struct compiled compile_ok(const char *transforms, const char *resource,
                                  struct ferry_schema *in)
{
    struct compiled c = {.p = load(transforms)};
    struct ferry_error err = {0};
    int rc = ferry_transforms_compile(c.p, resource, in, &c.chain, &c.out, &err);
    if (rc != FERRY_OK) fail_msg("compile: %s", err.message);
    assert_non_null(c.out);
    return c;
}

static void compiled_free(struct compiled *c)
{
    ferry_transforms_free(c->chain);
    ferry_schema_unref(c->out);
    ferry_pipeline_free(c->p);
}

/* Compiling must fail with FERRY_ECONFIG and exactly `message`. */
static void compile_fails(const char *transforms, const char *resource, struct ferry_schema *in,
                          const char *message)
{
    struct ferry_pipeline_spec *p = load(transforms);
    struct ferry_transform_chain *chain = (struct ferry_transform_chain *)1;
    struct ferry_schema *out = (struct ferry_schema *)1;
    struct ferry_error err = {0};
    int rc = ferry_transforms_compile(p, resource, in, &chain, &out, &err);
    if (rc != FERRY_ECONFIG) fail_msg("rc %d (%s) for:\n%s", rc, err.message, transforms);
    assert_null(chain);
    assert_null(out);
    if (strcmp(err.message, message) != 0)
        fail_msg("message \"%s\"\n   expected \"%s\"", err.message, message);
    ferry_pipeline_free(p);
}

static struct ferry_batch *apply_ok(struct ferry_transform_chain *chain, struct ferry_batch *in)
{
    struct ferry_batch *out = NULL;
    struct ferry_error err = {0};
    int rc = ferry_transforms_apply(chain, in, &out, &err);
    if (rc != FERRY_OK) fail_msg("apply: %s", err.message);
    assert_non_null(out);
    return out;
}

static int refs(struct ferry_batch *b)
{
    return atomic_load(&b->refcount);
}

/* ---- canonical text, as documented: what the hash of a value is computed over ---- */

static size_t shortest_float(double v, bool single, char *buf, size_t len)
{
    if (isnan(v)) return (size_t)snprintf(buf, len, "NaN");
    if (isinf(v)) return (size_t)snprintf(buf, len, "%s", v > 0 ? "Infinity" : "-Infinity");
    for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    return strlen(buf);
}

static void expected_hex(const struct ferry_batch *b, int col, int64_t row, char hex[65])
{
    char text[128];
    const void *p = text;
    size_t n = 0;
    int k = 0;
    bool calendar = false; /* text from a ferry_*_to_text form (-1: it has none) */
    enum ferry_type t = b->columns[col].type;
    switch (t) {
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_DECIMAL_TEXT:
        p = ferry_col_bytes(b, col, row, &n);
        break;
    case FERRY_TYPE_BOOL:
        n = (size_t)snprintf(text, sizeof text, "%s",
                             ferry_col_bool(b, col, row) ? "true" : "false");
        break;
    case FERRY_TYPE_FLOAT32:
        n = shortest_float(ferry_col_float(b, col, row), true, text, sizeof text);
        break;
    case FERRY_TYPE_FLOAT64:
        n = shortest_float(ferry_col_float(b, col, row), false, text, sizeof text);
        break;
    case FERRY_TYPE_DECIMAL128:
        k = ferry_decimal128_to_text(ferry_col_dec128(b, col, row), b->schema->fields[col].scale,
                                     text, sizeof text);
        calendar = true;
        break;
    case FERRY_TYPE_DATE32:
        k = ferry_date32_to_text((int32_t)ferry_col_int(b, col, row), text, sizeof text);
        calendar = true;
        break;
    case FERRY_TYPE_TIME64_US:
        k = ferry_time64_to_text(ferry_col_int(b, col, row), text, sizeof text);
        calendar = true;
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        k = ferry_timestamp_to_text(ferry_col_int(b, col, row), t == FERRY_TYPE_TIMESTAMPTZ_US,
                                    text, sizeof text);
        calendar = true;
        break;
    case FERRY_TYPE_UUID:
        k = ferry_uuid_to_text(ferry_col_fixed(b, col, row), text, sizeof text);
        calendar = true;
        break;
    default:
        n = (size_t)snprintf(text, sizeof text, "%lld", (long long)ferry_col_int(b, col, row));
        break;
    }
    if (calendar && k >= 0) n = (size_t)k;
    if (calendar && k < 0) /* no calendar text: the number */
        n = (size_t)snprintf(text, sizeof text, "%lld", (long long)ferry_col_int(b, col, row));
    assert_true(n < 100000);
    ferry_sha256_hex(p, n, hex);
}
/* The hex string in a utf8 cell. */
static void cell_text(const struct ferry_batch *b, int col, int64_t row, char *out, size_t len)
{
    size_t n;
    const uint8_t *p = ferry_col_bytes(b, col, row, &n);
    assert_true(n < len);
    memcpy(out, p, n);
    out[n] = '\0';
}

static void assert_tr_row(const struct ferry_batch *out, int out_col, int64_t out_row, int tr_col,
                          int64_t tr_row)
{
    struct tr_cell v;
    tr_cell(tr_row, tr_col, &v);
    assert_int_equal(ferry_col_is_null(out, out_col, out_row), v.null);
    if (v.null) return;
    switch (tr_types[tr_col]) {
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_BINARY:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t n;
        const uint8_t *p = ferry_col_bytes(out, out_col, out_row, &n);
        assert_int_equal(n, v.len);
        assert_memory_equal(p, v.bytes, n);
        break;
    }
    case FERRY_TYPE_BOOL:
        assert_int_equal(ferry_col_bool(out, out_col, out_row), v.b);
        break;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        assert_true(ferry_col_float(out, out_col, out_row) == v.f);
        break;
    case FERRY_TYPE_UUID:
        assert_memory_equal(ferry_col_fixed(out, out_col, out_row), v.fixed, 16);
        break;
    case FERRY_TYPE_DECIMAL128:
        break;
    default:
        assert_int_equal(ferry_col_int(out, out_col, out_row), v.i);
        break;
    }
}

/* ---- no transforms ---- */

static void test_no_transform_applies(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    /* An empty list, and a list whose only entry names another resource. */
    const char *lists[] = {"  []\n", "  - {resource: people, drop: [x]}\n"};
    for (int i = 0; i < 2; i++) {
        struct compiled c = compile_ok(lists[i], "test.rows", s);
        assert_null(c.chain);
        assert_ptr_equal(c.out, s); /* a new reference of the input schema */
        assert_int_equal(atomic_load(&s->refcount), 2);
        compiled_free(&c);
        assert_int_equal(atomic_load(&s->refcount), 1);
    }
    ferry_schema_unref(s);
}

/* ---- projections ---- */

static void assert_shares(const struct ferry_batch *out, int oc, const struct ferry_batch *in,
                          int ic)
{
    assert_ptr_equal(out->columns[oc].values, in->columns[ic].values);
    assert_ptr_equal(out->columns[oc].validity, in->columns[ic].validity);
    assert_ptr_equal(out->columns[oc].offsets, in->columns[ic].offsets);
    assert_ptr_equal(out->columns[oc].data, in->columns[ic].data);
    assert_int_equal(out->columns[oc].null_count, in->columns[ic].null_count);
}

static void test_drop(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - {resource: test.rows, drop: [flag, name]}\n"
                                   "  - drop: tiny\n", /* every resource; a single column */
                                   "test.rows", s);
    assert_non_null(c.chain);
    assert_int_equal(c.out->n_fields, TR_NCOLS - 3);
    int map[TR_NCOLS], m = 0;
    for (int i = 0; i < TR_NCOLS; i++)
        if (strcmp(tr_names[i], "flag") && strcmp(tr_names[i], "name") &&
            strcmp(tr_names[i], "tiny"))
            map[m++] = i;
    for (int j = 0; j < m; j++) {
        assert_string_equal(c.out->fields[j].name, tr_names[map[j]]);
        assert_int_equal(c.out->fields[j].type, tr_types[map[j]]);
        assert_int_equal(c.out->fields[j].nullable, map[j] > 0);
    }
    assert_int_equal(c.out->n_key, 1);
    assert_int_equal(c.out->key[0], 0);
    assert_int_equal(c.out->fields[0].key_pos, 1);
    int price = ferry_schema_find(c.out, "price");
    assert_int_equal(c.out->fields[price].precision, 20);
    assert_int_equal(c.out->fields[price].scale, 3);

    struct ferry_batch *in = tr_batch(s, 0, 60);
    assert_non_null(in);
    ferry_batch_ref(in); /* ours, to watch the count */
    struct ferry_batch *out = apply_ok(c.chain, in);
    assert_ptr_not_equal(out, in);
    assert_ptr_equal(out->schema, c.out);
    assert_int_equal(out->length, 60);
    assert_int_equal(out->seq, in->seq);
    assert_int_equal(out->shard, in->shard);
    assert_string_equal(out->position, in->position);
    assert_string_equal(out->resource, "test.rows");
    assert_ptr_equal(out->ops, in->ops);
    for (int j = 0; j < m; j++)
        assert_shares(out, j, in, map[j]);
    for (int64_t r = 0; r < 60; r++)
        assert_int_equal(ferry_batch_op(out, r), tr_op(r));

    /* Two projection steps: out's parent chain ends at `in`, which is alive while out is. */
    assert_int_equal(refs(in), 2);
    ferry_batch_unref(in); /* ours: only the output keeps it now */
    assert_int_equal(refs(in), 1);
    for (int64_t r = 0; r < 60; r++)
        for (int j = 0; j < m; j++)
            assert_tr_row(out, j, r, map[j], r);
    ferry_batch_unref(out); /* frees `in` too: the sanitizer build reports any leak */
    compiled_free(&c);
    ferry_schema_unref(s);
}

static void test_projection_keeps_input_alive(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - select: [name, id]\n", "test.rows", s);
    struct ferry_batch *in = tr_batch(s, 100, 30);
    ferry_batch_ref(in);
    struct ferry_batch *out = apply_ok(c.chain, in);
    assert_ptr_equal(out->parent, in); /* the output holds the input */
    assert_int_equal(refs(in), 2);     /* the caller's reference moved to out->parent */
    ferry_batch_unref(in);
    assert_int_equal(refs(in), 1);
    struct ferry_batch *more = ferry_batch_ref(out);
    ferry_batch_unref(out);
    assert_int_equal(refs(in), 1); /* still held: out has a reference left */
    for (int64_t r = 0; r < 30; r++) {
        assert_tr_row(more, 0, r, 10, 100 + r);
        assert_tr_row(more, 1, r, 0, 100 + r);
    }
    ferry_batch_unref(more);
    compiled_free(&c);
    ferry_schema_unref(s);
}

static void test_select_orders_and_keeps_key_positions(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c =
        compile_ok("  - {resource: test.rows, select: [name, big, id, day]}\n", "test.rows", s);
    static const char *const names[] = {"name", "big", "id", "day"};
    static const int from[] = {10, 5, 0, 12};
    assert_int_equal(c.out->n_fields, 4);
    for (int j = 0; j < 4; j++) {
        assert_string_equal(c.out->fields[j].name, names[j]);
        assert_int_equal(c.out->fields[j].type, tr_types[from[j]]);
        assert_int_equal(c.out->fields[j].key_pos, j == 2 ? 1 : 0);
    }
    assert_int_equal(c.out->n_key, 1);
    assert_int_equal(c.out->key[0], 2);
    struct ferry_batch *in = tr_batch(s, 0, 40);
    ferry_batch_ref(in);
    struct ferry_batch *out = apply_ok(c.chain, in);
    for (int j = 0; j < 4; j++)
        assert_shares(out, j, in, from[j]);
    for (int64_t r = 0; r < 40; r++)
        for (int j = 0; j < 4; j++)
            assert_tr_row(out, j, r, from[j], r);
    ferry_batch_unref(in);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* A composite key (b, a) declared out of column order. */
static struct ferry_schema *composite_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    const char *names[] = {"a", "x", "b", "y"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(ferry_schema_add_field(s, names[i], FERRY_TYPE_INT64, i % 2 == 1, NULL),
                         FERRY_OK);
    s->fields[0].key_pos = 2;
    s->fields[2].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static void test_composite_key_positions(void **state)
{
    (void)state;
    struct ferry_schema *s = composite_schema();
    /* Reordered: key order is the key's, not the columns'. */
    struct compiled c = compile_ok("  - {resource: people, select: [y, a, b]}\n", "people", s);
    assert_int_equal(c.out->n_key, 2);
    assert_string_equal(c.out->fields[c.out->key[0]].name, "b");
    assert_string_equal(c.out->fields[c.out->key[1]].name, "a");
    assert_int_equal(c.out->fields[1].key_pos, 2);
    assert_int_equal(c.out->fields[2].key_pos, 1);
    compiled_free(&c);

    /* Renamed key columns stay key columns. */
    c = compile_ok("  - {resource: people, rename: {a: alpha, b: beta}}\n", "people", s);
    assert_string_equal(c.out->fields[0].name, "alpha");
    assert_string_equal(c.out->fields[2].name, "beta");
    assert_int_equal(c.out->fields[0].key_pos, 2);
    assert_int_equal(c.out->fields[2].key_pos, 1);
    assert_int_equal(c.out->n_key, 2);
    compiled_free(&c);

    /* Dropping every key column leaves a table without key (the policy then refuses upsert). */
    c = compile_ok("  - {resource: people, drop: [a, b]}\n", "people", s);
    assert_int_equal(c.out->n_fields, 2);
    assert_int_equal(c.out->n_key, 0);
    assert_int_equal(c.out->fields[0].key_pos, 0);
    assert_int_equal(c.out->fields[1].key_pos, 0);
    compiled_free(&c);

    /* Keeping part of a composite key would make distinct rows collide under upsert. */
    compile_fails("  - {resource: people, drop: [b]}\n", "people", s,
                  "t.yaml: transforms[0].drop (line 11): column \"b\" is part of the key of "
                  "people (b, a); keep every key column or drop them all");
    compile_fails("  - {resource: people, select: [x, b]}\n", "people", s,
                  "t.yaml: transforms[0].select (line 11): column \"a\" is part of the key of "
                  "people (b, a); keep every key column or drop them all");
    ferry_schema_unref(s);
}

static void test_rename(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - resource: test.rows\n"
                                   "    rename: {name: full_name, id: row_id, big: name}\n",
                                   "test.rows", s);
    assert_int_equal(c.out->n_fields, TR_NCOLS);
    for (int j = 0; j < TR_NCOLS; j++) {
        const char *want = j == 10  ? "full_name"
                           : j == 0 ? "row_id"
                           : j == 5 ? "name"
                                    : tr_names[j];
        assert_string_equal(c.out->fields[j].name, want);
        assert_int_equal(c.out->fields[j].type, tr_types[j]);
    }
    assert_int_equal(c.out->fields[0].key_pos, 1);
    assert_int_equal(c.out->n_key, 1);
    struct ferry_batch *in = tr_batch(s, 7, 25);
    ferry_batch_ref(in);
    struct ferry_batch *out = apply_ok(c.chain, in);
    for (int j = 0; j < TR_NCOLS; j++)
        assert_shares(out, j, in, j);
    for (int64_t r = 0; r < 25; r++)
        for (int j = 0; j < TR_NCOLS; j++)
            assert_tr_row(out, j, r, j, 7 + r);
    ferry_batch_unref(in);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- hash ---- */

/* A table of hand-picked values whose digests were computed outside ferry
 * (sha256sum, openssl dgst -hmac). */
enum { P_ID, P_S, P_N, P_F64, P_F32, P_FLAG, P_DAY, P_TS, P_DEC, P_UUID, P_DOC, P_NCOLS };

static struct ferry_schema *people_schema(void)
{
    static const struct {
        const char *name;
        enum ferry_type type;
    } cols[P_NCOLS] = {
        {"id", FERRY_TYPE_INT64},       {"s", FERRY_TYPE_UTF8},
        {"n", FERRY_TYPE_INT64},        {"f64", FERRY_TYPE_FLOAT64},
        {"f32", FERRY_TYPE_FLOAT32},    {"flag", FERRY_TYPE_BOOL},
        {"day", FERRY_TYPE_DATE32},     {"ts", FERRY_TYPE_TIMESTAMPTZ_US},
        {"dec", FERRY_TYPE_DECIMAL128}, {"u", FERRY_TYPE_UUID},
        {"doc", FERRY_TYPE_JSON},
    };
    struct ferry_schema *s = ferry_schema_new();
    for (int i = 0; i < P_NCOLS; i++)
        assert_int_equal(ferry_schema_add_field(s, cols[i].name, cols[i].type, i > 0, NULL),
                         FERRY_OK);
    s->fields[P_ID].key_pos = 1;
    s->fields[P_DEC].precision = 10;
    s->fields[P_DEC].scale = 3;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static const char fox[] = "The quick brown fox jumps over the lazy dog";

/* Row 0: values with known digests. Row 1: every value null. Row 2: edge values, including
 * a date and a timestamp outside years 1..9999. */
static struct ferry_batch *people_batch(struct ferry_schema *s)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "people", lim, tr_take, &out);
    assert_non_null(rw);
    struct ferry_error err = {0};
    int32_t day;
    int64_t ts;
    uint8_t u[16];
    assert_int_equal(ferry_date32_from_text("2024-01-31", 10, &day), FERRY_OK);
    assert_int_equal(ferry_timestamp_from_text("2024-01-31 13:45:00.5+00", 24, &ts), FERRY_OK);
    assert_int_equal(ferry_uuid_from_text("12345678-9abc-def0-1234-56789abcdef0", 36, u), FERRY_OK);

    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 1);
    ferry_rw_text(rw, "abc", 3);
    ferry_rw_int(rw, 42);
    ferry_rw_float(rw, 1.5);
    ferry_rw_float(rw, 0.1);
    ferry_rw_bool(rw, true);
    ferry_rw_int(rw, day);
    ferry_rw_int(rw, ts);
    ferry_rw_dec128(rw, (struct ferry_decimal128){.lo = 123450, .hi = 0});
    ferry_rw_fixed(rw, u, 16);
    ferry_rw_text(rw, fox, strlen(fox));
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);

    ferry_rw_begin(rw, FERRY_OP_UPDATE);
    ferry_rw_int(rw, 2);
    for (int c = 1; c < P_NCOLS; c++)
        ferry_rw_null(rw);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);

    memset(u, 0, sizeof u);
    ferry_rw_begin(rw, FERRY_OP_DELETE);
    ferry_rw_int(rw, 3);
    ferry_rw_text(rw, "", 0);
    ferry_rw_int(rw, -7);
    ferry_rw_float(rw, 0.1);
    ferry_rw_float(rw, -2.75);
    ferry_rw_bool(rw, false);
    ferry_rw_int(rw, 3000000);                     /* year 10183 */
    ferry_rw_int(rw, INT64_C(-99999999999999999)); /* year -1199 */
    ferry_rw_dec128(rw, (struct ferry_decimal128){.lo = (uint64_t)-5, .hi = -1});
    ferry_rw_fixed(rw, u, 16);
    ferry_rw_text(rw, "{}", 2);
    if (ferry_rw_end(rw, &err) != FERRY_OK) fail_msg("row 3: %s", err.message);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(out);
    assert_int_equal(out->length, 3);
    return out;
}

static void assert_cell_hex(const struct ferry_batch *b, int col, int64_t row, const char *hex)
{
    char got[128];
    assert_false(ferry_col_is_null(b, col, row));
    cell_text(b, col, row, got, sizeof got);
    if (strcmp(got, hex) != 0)
        fail_msg("column %s row %lld: got %s, expected %s", b->schema->fields[col].name,
                 (long long)row, got, hex);
}

static void test_hash_sha256_known_values(void **state)
{
    (void)state;
    struct ferry_schema *s = people_schema();
    struct compiled c = compile_ok("  - {resource: people, column: s, hash: sha256}\n"
                                   "  - {resource: people, column: n, hash: sha256}\n"
                                   "  - {resource: people, column: f64, hash: sha256}\n"
                                   "  - {resource: people, column: f32, hash: sha256}\n"
                                   "  - {resource: people, column: flag, hash: sha256}\n"
                                   "  - {resource: people, column: day, hash: sha256}\n"
                                   "  - {resource: people, column: ts, hash: sha256}\n"
                                   "  - {resource: people, column: dec, hash: sha256}\n"
                                   "  - {resource: people, column: u, hash: sha256}\n"
                                   "  - {resource: test.rows, column: name, hash: sha256}\n",
                                   "people", s);
    /* Every hashed column becomes utf8, keeps its name, position and nullability. */
    assert_int_equal(c.out->n_fields, P_NCOLS);
    for (int j = 0; j < P_NCOLS; j++) {
        assert_string_equal(c.out->fields[j].name, s->fields[j].name);
        bool hashed = j >= P_S && j <= P_UUID;
        assert_int_equal(c.out->fields[j].type, hashed ? FERRY_TYPE_UTF8 : s->fields[j].type);
        assert_int_equal(c.out->fields[j].nullable, j > 0);
        assert_int_equal(c.out->fields[j].key_pos, j == 0 ? 1 : 0);
    }
    struct ferry_batch *in = people_batch(s);
    char *pos = ferry_strdup(in->position);
    uint64_t seq = in->seq;
    struct ferry_batch *out = apply_ok(c.chain, in);
    assert_ptr_equal(out->schema, c.out);
    assert_int_equal(out->length, 3);
    assert_int_equal(out->seq, seq);
    assert_string_equal(out->position, pos);
    ferry_free(pos);
    assert_int_equal(ferry_batch_op(out, 0), FERRY_OP_INSERT);
    assert_int_equal(ferry_batch_op(out, 1), FERRY_OP_UPDATE);
    assert_int_equal(ferry_batch_op(out, 2), FERRY_OP_DELETE);

    assert_cell_hex(out, P_S, 0,
                    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_cell_hex(out, P_N, 0,
                    "73475cb40a568e8da8a045ced110137e159f890ac4da883b6b17dc651b3a8049");
    assert_cell_hex(out, P_F64, 0,
                    "9f29a130438b81170b92a42650f9a94291ecad60bd47af2a3886e75f7f728725");
    /* float32 0.1 is hashed as "0.1", its shortest text, not as the double it widens to */
    assert_cell_hex(out, P_F32, 0,
                    "14be4b45f18e0d8c67b4f719b5144eee88497e413709d11d85b096d8e2346310");
    assert_cell_hex(out, P_FLAG, 0,
                    "b5bea41b6c623f7c09f1bf24dcae58ebab3c0cdd90ad966bc43a45b44867e12b");
    assert_cell_hex(out, P_DAY, 0,
                    "253cc68f602792c897da18d783813611200910b3d35b44991254a5a39e36b233");
    assert_cell_hex(out, P_DEC, 0,
                    "a94a03367d6e4038936c15703d2081c5a877e32c2be2340040eca651539b5070");
    assert_cell_hex(out, P_UUID, 0,
                    "3fad3d29a4559250a6b4c948ddb4a049cdbf291e55da90183eef8101a08fdf82");
    char hex[65];
    char tstext[64];
    int64_t ts;
    assert_int_equal(ferry_timestamp_from_text("2024-01-31 13:45:00.5+00", 24, &ts), FERRY_OK);
    int k = ferry_timestamp_to_text(ts, true, tstext, sizeof tstext);
    assert_true(k > 0);
    ferry_sha256_hex(tstext, (size_t)k, hex);
    assert_cell_hex(out, P_TS, 0, hex);
    /* not hashed: the key and the json column keep their values */
    assert_int_equal(ferry_col_int(out, P_ID, 0), 1);
    size_t n;
    const uint8_t *p = ferry_col_bytes(out, P_DOC, 0, &n);
    assert_int_equal(n, strlen(fox));
    assert_memory_equal(p, fox, n);

    /* row 1: nulls stay null, in every hashed column, with an empty slot */
    for (int j = P_S; j <= P_UUID; j++) {
        assert_true(ferry_col_is_null(out, j, 1));
        size_t slot;
        ferry_col_bytes(out, j, 1, &slot);
        assert_int_equal(slot, 0);
    }
    assert_int_equal(out->columns[P_S].null_count, 1);

    /* row 2: edge values */
    assert_cell_hex(out, P_S, 2,
                    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_cell_hex(out, P_N, 2,
                    "a770d3270c9dcdedf12ed9fd70444f7c8a95c26cae3cae9bd867499090a2f14b");
    assert_cell_hex(out, P_F64, 2,
                    "14be4b45f18e0d8c67b4f719b5144eee88497e413709d11d85b096d8e2346310");
    ferry_sha256_hex("-2.75", 5, hex);
    assert_cell_hex(out, P_F32, 2, hex);
    ferry_sha256_hex("false", 5, hex);
    assert_cell_hex(out, P_FLAG, 2, hex);
    ferry_sha256_hex("-0.005", 6, hex);
    assert_cell_hex(out, P_DEC, 2, hex);
    ferry_sha256_hex("00000000-0000-0000-0000-000000000000", 36, hex);
    assert_cell_hex(out, P_UUID, 2, hex);
    /* dates and timestamps without a calendar text (outside years 1..9999) hash their number */
    ferry_sha256_hex("3000000", 7, hex);
    assert_cell_hex(out, P_DAY, 2, hex);
    ferry_sha256_hex("-99999999999999999", 18, hex);
    assert_cell_hex(out, P_TS, 2, hex);

    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

static void test_hash_float_specials(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "f", FERRY_TYPE_FLOAT64, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct compiled c = compile_ok("  - {column: f, hash: sha256}\n", "people", s);
    struct ferry_batch *in = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "people", lim, tr_take, &in);
    const double v[] = {NAN, INFINITY, -INFINITY, 1e300, 5e-324, 100, 0.30000000000000004};
    const char *text[] = {
        "NaN", "Infinity",           "-Infinity", "1e+300", "4.94065645841247e-324",
        "100", "0.30000000000000004"};
    for (int i = 0; i < 7; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_float(rw, v[i]);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    struct ferry_batch *out = apply_ok(c.chain, in);
    for (int i = 0; i < 7; i++) {
        char hex[65];
        ferry_sha256_hex(text[i], strlen(text[i]), hex);
        assert_cell_hex(out, 0, i, hex);
    }
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

static void test_hash_hmac(void **state)
{
    (void)state;
    setenv("FERRY_TEST_HMAC_KEY", "key", 1);
    struct ferry_schema *s = people_schema();
    struct compiled c = compile_ok("  - {resource: people, column: doc, hash: hmac_sha256, "
                                   "key: 'env:FERRY_TEST_HMAC_KEY'}\n",
                                   "people", s);
    assert_int_equal(c.out->fields[P_DOC].type, FERRY_TYPE_UTF8);
    unsetenv("FERRY_TEST_HMAC_KEY"); /* resolved once, at compile time */
    struct ferry_batch *out = apply_ok(c.chain, people_batch(s));
    assert_cell_hex(out, P_DOC, 0,
                    "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
    assert_true(ferry_col_is_null(out, P_DOC, 1));
    uint8_t mac[32];
    ferry_hmac_sha256("key", 3, "{}", 2, mac);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    assert_cell_hex(out, P_DOC, 2, hex);
    /* and it is not the plain digest */
    char plain[65];
    ferry_sha256_hex("{}", 2, plain);
    assert_string_not_equal(hex, plain);
    ferry_batch_unref(out);
    compiled_free(&c);

    /* The key may also come from a file. */
    char path[] = "/tmp/ferry-hmac-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "key", 3), 3);
    close(fd);
    char *t = ferry_asprintf("  - {column: doc, hash: hmac_sha256, key: 'file:%s'}\n", path);
    c = compile_ok(t, "people", s);
    ferry_free(t);
    out = apply_ok(c.chain, people_batch(s));
    assert_cell_hex(out, P_DOC, 0,
                    "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
    ferry_batch_unref(out);
    compiled_free(&c);
    unlink(path);
    ferry_schema_unref(s);
}

/* Every type of the test rows, hashed, against the documented canonical text. */
static void test_hash_every_type(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct ferry_buf y;
    ferry_buf_init(&y, 0);
    /* single-quoted YAML: the double quotes of `at "utc"` need no escape */
    for (int c = 1; c < TR_NCOLS; c++)
        ferry_buf_printf(&y, "  - {column: '%s', hash: sha256}\n", tr_names[c]);
    char *list = ferry_buf_take(&y);
    struct compiled c = compile_ok(list, "test.rows", s);
    ferry_free(list);
    for (int j = 1; j < TR_NCOLS; j++)
        assert_int_equal(c.out->fields[j].type, FERRY_TYPE_UTF8);
    assert_int_equal(c.out->fields[0].type, FERRY_TYPE_INT64);

    struct ferry_batch *in = tr_batch(s, 0, 70);
    ferry_batch_ref(in);
    struct ferry_batch *out = apply_ok(c.chain, in);
    int nulls = 0;
    for (int64_t r = 0; r < 70; r++) {
        assert_int_equal(ferry_col_int(out, 0, r), r);
        for (int j = 1; j < TR_NCOLS; j++) {
            struct tr_cell v;
            tr_cell(r, j, &v);
            assert_int_equal(ferry_col_is_null(out, j, r), v.null);
            if (v.null) {
                nulls++;
                size_t slot;
                ferry_col_bytes(out, j, r, &slot);
                assert_int_equal(slot, 0);
                continue;
            }
            char hex[65];
            expected_hex(in, j, r, hex);
            assert_cell_hex(out, j, r, hex);
        }
    }
    assert_true(nulls > 100);
    /* the hashed batch owns its buffers: the input is no longer referenced */
    assert_int_equal(refs(in), 1);
    assert_null(out->parent);
    ferry_batch_unref(in);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- slices as input ---- */

static void test_slices_as_input(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled proj =
        compile_ok("  - drop: [flag, medium]\n  - rename: {name: label}\n", "test.rows", s);
    struct compiled hash = compile_ok(
        "  - {column: name, hash: sha256}\n  - select: [id, name, day]\n", "test.rows", s);
    struct ferry_batch *whole = tr_batch(s, 0, 64);

    /* A middle slice: no position (it does not end where its parent ends). */
    struct ferry_batch *mid = ferry_batch_slice(whole, 13, 21);
    assert_non_null(mid);
    struct ferry_batch *out = apply_ok(proj.chain, mid);
    assert_int_equal(out->length, 21);
    assert_int_equal(out->offset, 13);
    assert_null(out->position);
    int label = ferry_schema_find(out->schema, "label");
    assert_int_equal(label, 8);
    for (int64_t r = 0; r < 21; r++) {
        assert_tr_row(out, 0, r, 0, 13 + r);
        assert_tr_row(out, label, r, 10, 13 + r);
        assert_tr_row(out, out->schema->n_fields - 1, r, TR_NCOLS - 1, 13 + r);
        assert_int_equal(ferry_batch_op(out, r), tr_op(13 + r));
    }
    ferry_batch_unref(out);

    /* The tail slice carries the position; hashing makes a canonical copy (offset 0). */
    struct ferry_batch *tail = ferry_batch_slice(whole, 40, 24);
    out = apply_ok(hash.chain, tail);
    assert_int_equal(out->length, 24);
    assert_int_equal(out->offset, 0);
    assert_string_equal(out->position, whole->position);
    assert_int_equal(out->schema->n_fields, 3);
    for (int64_t r = 0; r < 24; r++) {
        assert_int_equal(ferry_col_int(out, 0, r), 40 + r);
        struct tr_cell v;
        tr_cell(40 + r, 10, &v);
        assert_int_equal(ferry_col_is_null(out, 1, r), v.null);
        if (!v.null) {
            char hex[65];
            ferry_sha256_hex(v.bytes, v.len, hex);
            assert_cell_hex(out, 1, r, hex);
        }
        assert_tr_row(out, 2, r, 12, 40 + r);
        assert_int_equal(ferry_batch_op(out, r), tr_op(40 + r));
    }
    ferry_batch_unref(out);
    ferry_batch_unref(whole);
    compiled_free(&proj);
    compiled_free(&hash);
    ferry_schema_unref(s);
}

/* An empty batch (a finished shard) goes through every kind of step. */
static void test_empty_batch(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c =
        compile_ok("  - {column: name, hash: sha256}\n  - drop: [blob]\n", "test.rows", s);
    struct ferry_batch *in = tr_batch(s, 0, 0);
    assert_non_null(in);
    assert_int_equal(in->length, 0);
    char *pos = ferry_strdup(in->position);
    struct ferry_batch *out = apply_ok(c.chain, in);
    assert_int_equal(out->length, 0);
    assert_string_equal(out->position, pos);
    assert_int_equal(out->schema->n_fields, TR_NCOLS - 1);
    ferry_free(pos);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- mask ---- */

/* Independent of the transform: decode each UTF-8 sequence by its length. */
static void expected_mask(const char *s, size_t n, int keep, const char *ch, char *out)
{
    size_t starts[64];
    int cps = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        starts[cps++] = i;
        i += c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    }
    int masked = cps > keep ? cps - keep : 0;
    out[0] = '\0';
    for (int k = 0; k < masked; k++) strcat(out, ch);
    size_t tail = masked < cps ? starts[masked] : n;
    strncat(out, s + tail, n - tail);
}

static void test_mask(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - {mask: name, keep_last: 3, char: '#'}\n"
                                   "  - {mask: exact, char: \"\xe2\x80\xa2\"}\n" /* U+2022 */
                                   "  - mask: doc\n",
                                   "test.rows", s);
    int name = ferry_schema_find(c.out, "name"), exact = ferry_schema_find(c.out, "exact");
    int doc = ferry_schema_find(c.out, "doc");
    /* Masked columns become utf8 in place, keeping name and nullability. */
    assert_int_equal(c.out->n_fields, TR_NCOLS);
    assert_int_equal(c.out->fields[name].type, FERRY_TYPE_UTF8);
    assert_int_equal(c.out->fields[exact].type, FERRY_TYPE_UTF8);
    assert_int_equal(c.out->fields[doc].type, FERRY_TYPE_UTF8);
    assert_true(c.out->fields[name].nullable);

    struct ferry_batch *whole = tr_batch(s, 0, 40);
    /* A slice as input (offset 5): values are read relative to it. */
    struct ferry_batch *in = ferry_batch_slice(whole, 5, 35);
    struct ferry_batch *out = apply_ok(c.chain, in);
    assert_int_equal(out->length, 35);
    assert_string_equal(out->position, whole->position);
    assert_int_equal(out->columns[name].type, FERRY_TYPE_UTF8);
    int nulls = 0;
    for (int64_t r = 0; r < 35; r++) {
        int64_t tr = 5 + r;
        const int cols[3] = {10, 9, 17}, outc[3] = {name, exact, doc}, keep[3] = {3, 0, 0};
        const char *chs[3] = {"#", "\xe2\x80\xa2", "*"};
        for (int k = 0; k < 3; k++) {
            struct tr_cell v;
            tr_cell(tr, cols[k], &v);
            assert_int_equal(ferry_col_is_null(out, outc[k], r), v.null);
            if (v.null) {
                nulls++;
                continue;
            }
            char want[256], got[256];
            expected_mask(v.bytes, v.len, keep[k], chs[k], want);
            cell_text(out, outc[k], r, got, sizeof got);
            assert_string_equal(got, want);
        }
        assert_tr_row(out, 0, r, 0, tr); /* other columns untouched */
        assert_tr_row(out, 12, r, 12, tr);
        assert_int_equal(ferry_batch_op(out, r), tr_op(tr));
    }
    assert_true(nulls > 0);
    /* Hand-checked values: row 7 is "row-7-éé" (8 characters, 10 bytes). */
    char got[64];
    cell_text(out, name, 2, got, sizeof got);
    assert_string_equal(got, "#####-\xc3\xa9\xc3\xa9");
    cell_text(out, doc, 3, got, sizeof got); /* {"r":8} */
    assert_string_equal(got, "*******");
    cell_text(out, exact, 2, got, sizeof got); /* 7.07 */
    assert_string_equal(got, "\xe2\x80\xa2\xe2\x80\xa2\xe2\x80\xa2\xe2\x80\xa2");
    /* keep_last larger than the value keeps it whole; "" stays "" (row 11). */
    struct compiled big = compile_ok("  - {mask: name, keep_last: 100}\n", "test.rows", s);
    struct ferry_batch *o2 = apply_ok(big.chain, ferry_batch_ref(whole));
    for (int64_t r = 0; r < 40; r++) {
        if (ferry_col_is_null(o2, 10, r)) continue;
        assert_tr_row(o2, 10, r, 10, r);
    }
    size_t len;
    ferry_col_bytes(o2, 10, 11, &len);
    assert_int_equal(len, 0);
    ferry_batch_unref(o2);
    compiled_free(&big);
    ferry_batch_unref(out);
    ferry_batch_unref(whole);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- add ---- */

static void test_add(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - {add: origin, value: 'eu-west'}\n"
                                   "  - {add: run, value: run_id}\n"
                                   "  - {add: loaded, value: load_time}\n"
                                   "  - {add: pos, value: source_position}\n"
                                   "  - drop: blob\n",
                                   "test.rows", s);
    /* Appended last, in order, with their types; the projection after them keeps them. */
    assert_int_equal(c.out->n_fields, TR_NCOLS - 1 + 4);
    int base = TR_NCOLS - 1;
    assert_string_equal(c.out->fields[base].name, "origin");
    assert_int_equal(c.out->fields[base].type, FERRY_TYPE_UTF8);
    assert_false(c.out->fields[base].nullable);
    assert_string_equal(c.out->fields[base + 1].name, "run");
    assert_int_equal(c.out->fields[base + 1].type, FERRY_TYPE_INT64);
    assert_int_equal(c.out->fields[base + 2].type, FERRY_TYPE_TIMESTAMPTZ_US);
    assert_int_equal(c.out->fields[base + 3].type, FERRY_TYPE_UTF8);
    assert_true(c.out->fields[base + 3].nullable);
    assert_int_equal(c.out->fields[base + 1].key_pos, 0);
    assert_int_equal(c.out->n_key, 1);

    /* Before the run is known, a run_id column cannot be filled. */
    struct ferry_batch *out = NULL;
    struct ferry_error err = {0};
    assert_int_equal(ferry_transforms_apply(c.chain, tr_batch(s, 0, 3), &out, &err), FERRY_EINVAL);
    assert_null(out);
    assert_string_equal(err.message, "transforms[1] (add run): the run id is not known yet");

    ferry_transforms_set_run(c.chain, 4242);
    ferry_transforms_set_run(NULL, 1); /* accepted */
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    struct ferry_batch *whole = tr_batch(s, 0, 30);
    struct ferry_batch *tail = ferry_batch_slice(whole, 10, 20);
    out = apply_ok(c.chain, tail);
    clock_gettime(CLOCK_REALTIME, &t1);
    int64_t lo = (int64_t)t0.tv_sec * 1000000 + t0.tv_nsec / 1000;
    int64_t hi = (int64_t)t1.tv_sec * 1000000 + t1.tv_nsec / 1000;
    assert_int_equal(out->length, 20);
    int64_t loaded = ferry_col_int(out, base + 2, 0);
    assert_true(loaded >= lo && loaded <= hi);
    for (int64_t r = 0; r < 20; r++) {
        char got[256];
        cell_text(out, base, r, got, sizeof got);
        assert_string_equal(got, "eu-west");
        assert_int_equal(ferry_col_int(out, base + 1, r), 4242);
        assert_int_equal(ferry_col_int(out, base + 2, r), loaded); /* one time per batch */
        cell_text(out, base + 3, r, got, sizeof got);
        assert_string_equal(got, whole->position);
        assert_tr_row(out, 0, r, 0, 10 + r);
        assert_tr_row(out, 10, r, 10, 10 + r);
    }
    ferry_batch_unref(out);
    /* A middle slice has no position: the column is null there. */
    out = apply_ok(c.chain, ferry_batch_slice(whole, 2, 5));
    for (int64_t r = 0; r < 5; r++) assert_true(ferry_col_is_null(out, base + 3, r));
    assert_int_equal(out->columns[base + 3].null_count, 5);
    assert_false(ferry_col_is_null(out, base, 0));
    ferry_batch_unref(out);
    /* An empty batch gets the column too. */
    out = apply_ok(c.chain, tr_batch(s, 0, 0));
    assert_int_equal(out->length, 0);
    assert_int_equal(out->schema->n_fields, TR_NCOLS + 3);
    ferry_batch_unref(out);
    ferry_batch_unref(whole);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- filter ---- */

typedef bool (*row_pred)(int64_t r);

/* Applies `transforms` to rows 0..59 (as a slice at offset 3 when `sliced`) and checks that
 * exactly the deletes and the rows where pred holds were kept, in order, whole. */
static void check_filter(struct ferry_schema *s, const char *transforms, row_pred pred,
                         bool sliced)
{
    struct compiled c = compile_ok(transforms, "test.rows", s);
    assert_ptr_equal(c.out, s); /* filter keeps the schema */
    int64_t first = sliced ? 3 : 0, n = 60;
    struct ferry_batch *whole = tr_batch(s, 0, 63), *in;
    in = sliced ? ferry_batch_slice(whole, 3, 60) : tr_batch(s, 0, 60);
    uint64_t seq = in->seq;
    char *pos = ferry_strdup(in->position);
    struct ferry_batch *out = apply_ok(c.chain, in);
    int64_t j = 0, dropped = 0, deletes_kept = 0;
    for (int64_t r = first; r < first + n; r++) {
        bool del = tr_op(r) == FERRY_OP_DELETE;
        if (!del && !pred(r)) {
            dropped++;
            continue;
        }
        if (del && !pred(r)) deletes_kept++;
        if (j >= out->length) fail_msg("%s: row %lld missing", transforms, (long long)r);
        for (int col = 0; col < TR_NCOLS; col++)
            assert_tr_row(out, col, j, col, r);
        assert_int_equal(ferry_batch_op(out, j), tr_op(r));
        j++;
    }
    assert_int_equal(out->length, j);
    assert_true(dropped > 0);      /* the test data exercises the predicate both ways */
    assert_true(deletes_kept > 0); /* ...and a delete it would have dropped */
    assert_int_equal(out->offset, 0);
    assert_int_equal(out->seq, seq);
    assert_string_equal(out->position, pos);
    for (int col = 0; col < TR_NCOLS; col++) { /* exact null counts, no stray bitmap */
        int64_t nn = 0;
        for (int64_t r = 0; r < out->length; r++) nn += ferry_col_is_null(out, col, r);
        assert_int_equal(out->columns[col].null_count, nn);
        if (nn == 0) assert_null(out->columns[col].validity);
    }
    ferry_free(pos);
    ferry_batch_unref(out);
    ferry_batch_unref(whole);
    compiled_free(&c);
}

static bool p_medium_gt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 4, &v);
    return !v.null && v.i > -499000000;
}
static bool p_name_in(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 10, &v);
    return !v.null &&
           (!strcmp(v.bytes, "row-7-\xc3\xa9\xc3\xa9") ||
            !strcmp(v.bytes, "row-13-\xc3\xa9\xc3\xa9\xc3\xa9") || !strcmp(v.bytes, "row-20-"));
}
static bool p_flag_null(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 1, &v);
    return v.null;
}
static bool p_flag_not_null(int64_t r)
{
    return !p_flag_null(r);
}
static bool p_flag_true(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 1, &v);
    return !v.null && v.b;
}
static bool p_f64_lt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 7, &v);
    return !v.null && v.f < 30.5;
}
static bool p_price_gt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 8, &v);
    int64_t unscaled = (r % 2 ? -1 : 1) * (r * 12345 + 1);
    return !v.null && unscaled > 100500; /* 100.5 at scale 3 */
}
static bool p_exact_lt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 9, &v);
    double x = (double)r + (double)(r % 100) / 100.0;
    return !v.null && (r % 3 ? x : -x) < -5.5;
}
static bool p_day_gt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 12, &v);
    return !v.null && v.i > 19022; /* 2022-01-30 */
}
static bool p_at_lt(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 14, &v);
    return !v.null && v.i < 1700000000000000LL + 20 * 1000001;
}
static bool p_tiny_ne(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 2, &v);
    return !v.null && v.i != -91; /* row 1 */
}
static bool p_uuid_eq(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 16, &v);
    return !v.null && r % 16 == 4; /* its bytes are (r * 16 + k) mod 256 */
}
static bool p_doc_eq(int64_t r)
{
    struct tr_cell v;
    tr_cell(r, 17, &v);
    return !v.null && r == 6;
}

static void test_filter(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    static const struct {
        const char *transforms;
        row_pred pred;
    } cases[] = {
        {"  - {filter: medium, greater_than: -499000000}\n", p_medium_gt},
        {"  - filter: name\n    in: [\"row-7-\xc3\xa9\xc3\xa9\", "
         "\"row-13-\xc3\xa9\xc3\xa9\xc3\xa9\", row-20-, nope]\n",
         p_name_in},
        {"  - {filter: flag, is_null: true}\n", p_flag_null},
        {"  - {filter: flag, is_null: false}\n", p_flag_not_null},
        {"  - {filter: flag, equals: true}\n", p_flag_true},
        {"  - {filter: f64, less_than: 30.5}\n", p_f64_lt},
        {"  - {filter: price, greater_than: '100.5'}\n", p_price_gt},
        {"  - {filter: exact, less_than: '-5.50'}\n", p_exact_lt},
        {"  - {filter: day, greater_than: '2022-01-30'}\n", p_day_gt},
        {"  - {filter: at, less_than: '2023-11-14 22:13:40.00002'}\n", p_at_lt},
        {"  - {filter: tiny, not_equals: -91}\n", p_tiny_ne},
        {"  - {filter: uid, equals: 40414243-4445-4647-4849-4a4b4c4d4e4f}\n", p_uuid_eq},
        {"  - {filter: doc, equals: '{\"r\":6}'}\n", p_doc_eq},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_filter(s, cases[i].transforms, cases[i].pred, false);
        check_filter(s, cases[i].transforms, cases[i].pred, true);
    }
    ferry_schema_unref(s);
}

/* Every row kept: the same batch passes on. Every row dropped: an empty batch that still
 * carries the position (the checkpoint must advance past the dropped rows). */
static void test_filter_all_or_nothing(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - {filter: id, greater_than: 100}\n", "test.rows", s);
    struct ferry_batch *in = tr_batch(s, 200, 10);
    struct ferry_batch *out = apply_ok(c.chain, ferry_batch_ref(in));
    assert_ptr_equal(out, in);
    ferry_batch_unref(out);
    ferry_batch_unref(in);
    in = tr_batch(s, 57, 2); /* an insert and an update, no delete */
    char *pos = ferry_strdup(in->position);
    uint64_t seq = in->seq;
    out = apply_ok(c.chain, in);
    assert_int_equal(out->length, 0);
    assert_string_equal(out->position, pos);
    assert_int_equal(out->seq, seq);
    assert_string_equal(out->resource, "test.rows");
    ferry_batch_unref(out);
    ferry_free(pos);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* A delete carries only its key (other columns null): a filter on another column must still
 * pass it, or a merge sink would keep a row the source deleted. */
static void test_filter_keeps_deletes(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "status", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_batch *in = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "orders", lim, tr_take, &in);
    struct ferry_error err = {0};
    static const struct {
        enum ferry_op op;
        const char *status;
    } rows[] = {{FERRY_OP_INSERT, "paid"},   {FERRY_OP_INSERT, "new"},   {FERRY_OP_DELETE, NULL},
                {FERRY_OP_UPDATE, "shipped"}, {FERRY_OP_UPDATE, NULL},   {FERRY_OP_DELETE, "new"},
                {FERRY_OP_INSERT, "PAID"}};
    for (int i = 0; i < 7; i++) {
        ferry_rw_begin(rw, rows[i].op);
        ferry_rw_int(rw, i + 1);
        if (rows[i].status) ferry_rw_text(rw, rows[i].status, strlen(rows[i].status));
        else ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, true, &err), FERRY_OK);
    ferry__rw_free(rw);
    struct compiled c = compile_ok("  - {filter: status, in: [paid, shipped]}\n", "orders", s);
    struct ferry_batch *out = apply_ok(c.chain, in);
    static const int64_t kept[] = {1, 3, 4, 6};
    assert_int_equal(out->length, 4);
    for (int j = 0; j < 4; j++) assert_int_equal(ferry_col_int(out, 0, j), kept[j]);
    assert_int_equal(ferry_batch_op(out, 1), FERRY_OP_DELETE);
    assert_true(ferry_col_is_null(out, 1, 1));
    assert_int_equal(ferry_batch_op(out, 3), FERRY_OP_DELETE);
    assert_int_equal(out->columns[1].null_count, 1);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- cast ---- */

static void test_cast_widen(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - {cast: tiny, to: int64}\n"
                                   "  - {cast: small, to: int32}\n"
                                   "  - {cast: medium, to: float64}\n"
                                   "  - {cast: f32, to: double}\n"
                                   "  - {cast: price, to: 'decimal(25,5)'}\n"
                                   "  - {cast: day, to: timestamptz}\n"
                                   "  - {cast: big, to: utf8}\n"
                                   "  - {cast: at, to: text}\n"
                                   "  - {cast: uid, to: utf8}\n"
                                   "  - {cast: id, to: int64}\n",
                                   "test.rows", s);
    assert_int_equal(c.out->fields[2].type, FERRY_TYPE_INT64);
    assert_int_equal(c.out->fields[3].type, FERRY_TYPE_INT32);
    assert_int_equal(c.out->fields[4].type, FERRY_TYPE_FLOAT64);
    assert_int_equal(c.out->fields[6].type, FERRY_TYPE_FLOAT64);
    assert_int_equal(c.out->fields[8].type, FERRY_TYPE_DECIMAL128);
    assert_int_equal(c.out->fields[8].precision, 25);
    assert_int_equal(c.out->fields[8].scale, 5);
    assert_int_equal(c.out->fields[12].type, FERRY_TYPE_TIMESTAMPTZ_US);
    assert_int_equal(c.out->fields[5].type, FERRY_TYPE_UTF8);
    assert_int_equal(c.out->fields[0].key_pos, 1); /* a cast key column stays in the key */
    struct ferry_batch *whole = tr_batch(s, 0, 50);
    struct ferry_batch *out = apply_ok(c.chain, ferry_batch_slice(whole, 7, 43));
    for (int64_t r = 0; r < 43; r++) {
        int64_t tr = 7 + r;
        struct tr_cell v;
        for (int col = 0; col < TR_NCOLS; col++) {
            tr_cell(tr, col, &v);
            assert_int_equal(ferry_col_is_null(out, col, r), v.null);
        }
        tr_cell(tr, 2, &v);
        if (!v.null) assert_int_equal(ferry_col_int(out, 2, r), v.i);
        tr_cell(tr, 3, &v);
        if (!v.null) assert_int_equal(ferry_col_int(out, 3, r), v.i);
        tr_cell(tr, 4, &v);
        if (!v.null) assert_true(ferry_col_float(out, 4, r) == (double)v.i);
        tr_cell(tr, 6, &v);
        if (!v.null) assert_true(ferry_col_float(out, 6, r) == v.f);
        tr_cell(tr, 8, &v);
        if (!v.null) {
            struct ferry_decimal128 d = ferry_col_dec128(out, 8, r);
            int64_t unscaled = (tr % 2 ? -1 : 1) * (tr * 12345 + 1) * 100;
            assert_int_equal((int64_t)d.lo, unscaled);
            assert_int_equal(d.hi, unscaled < 0 ? -1 : 0);
        }
        tr_cell(tr, 12, &v);
        if (!v.null) assert_int_equal(ferry_col_int(out, 12, r), v.i * 86400000000LL);
        char got[128], want[128];
        tr_cell(tr, 5, &v);
        if (!v.null) {
            cell_text(out, 5, r, got, sizeof got);
            snprintf(want, sizeof want, "%lld", (long long)v.i);
            assert_string_equal(got, want);
        }
        tr_cell(tr, 14, &v);
        if (!v.null) {
            cell_text(out, 14, r, got, sizeof got);
            assert_true(ferry_timestamp_to_text(v.i, false, want, sizeof want) > 0);
            assert_string_equal(got, want);
        }
        tr_cell(tr, 16, &v);
        if (!v.null) {
            cell_text(out, 16, r, got, sizeof got);
            assert_true(ferry_uuid_to_text(v.fixed, want, sizeof want) > 0);
            assert_string_equal(got, want);
        }
        assert_tr_row(out, 10, r, 10, tr);
    }
    ferry_batch_unref(out);
    ferry_batch_unref(whole);
    compiled_free(&c);
    ferry_schema_unref(s);
}

static struct ferry_schema *text_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    static const char *const names[] = {"i", "d", "day", "ts", "u", "b", "f", "amt", "n"};
    for (int i = 0; i < 9; i++)
        assert_int_equal(ferry_schema_add_field(s, names[i], i == 8 ? FERRY_TYPE_DECIMAL_TEXT
                                                                      : FERRY_TYPE_UTF8,
                                                true, NULL),
                         FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static struct ferry_batch *text_batch(struct ferry_schema *s, const char *const (*rows)[10],
                                      int n)
{
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "texts", lim, tr_take, &b);
    struct ferry_error err = {0};
    for (int r = 0; r < n; r++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, r + 1);
        for (int c = 0; c < 9; c++)
            if (rows[r][c]) ferry_rw_text(rw, rows[r][c], strlen(rows[r][c]));
            else ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    return b;
}

static void test_cast_from_text(void **state)
{
    (void)state;
    struct ferry_schema *s = text_schema();
    static const char *const rows[][10] = {
        {"42", "12.5", "2024-01-31", "2024-01-31 13:45:00.5+00",
         "12345678-9abc-def0-1234-56789abcdef0", "true", "0.25", "-3.10", "-3.10"},
        {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
        {"-7", "-0.001", "1970-01-02", "1970-01-01 00:00:01+00",
         "00000000-0000-0000-0000-000000000000", "false", "-1e3", "99", "NaN"},
    };
    struct compiled c = compile_ok("  - {cast: i, to: int16}\n"
                                   "  - {cast: d, to: 'decimal(10,3)'}\n"
                                   "  - {cast: day, to: date}\n"
                                   "  - {cast: ts, to: timestamptz}\n"
                                   "  - {cast: u, to: uuid}\n"
                                   "  - {cast: b, to: bool}\n"
                                   "  - {cast: f, to: float32}\n"
                                   "  - {cast: amt, to: decimal_text}\n"
                                   "  - {cast: n, to: float64}\n",
                                   "texts", s);
    struct ferry_batch *out = apply_ok(c.chain, text_batch(s, rows, 3));
    assert_int_equal(out->columns[1].type, FERRY_TYPE_INT16);
    assert_int_equal(ferry_col_int(out, 1, 0), 42);
    assert_int_equal(ferry_col_int(out, 1, 2), -7);
    struct ferry_decimal128 d = ferry_col_dec128(out, 2, 0);
    assert_int_equal(d.lo, 12500);
    assert_int_equal((int64_t)ferry_col_dec128(out, 2, 2).lo, -1);
    assert_int_equal(ferry_col_dec128(out, 2, 2).hi, -1);
    assert_int_equal(ferry_col_int(out, 3, 0), 19753);
    assert_int_equal(ferry_col_int(out, 3, 2), 1);
    int64_t ts;
    assert_int_equal(ferry_timestamp_from_text("2024-01-31 13:45:00.5+00", 24, &ts), FERRY_OK);
    assert_int_equal(ferry_col_int(out, 4, 0), ts);
    assert_int_equal(ferry_col_int(out, 4, 2), 1000000);
    assert_int_equal(ferry_col_fixed(out, 5, 0)[0], 0x12);
    assert_int_equal(ferry_col_fixed(out, 5, 0)[15], 0xf0);
    assert_true(ferry_col_bool(out, 6, 0));
    assert_false(ferry_col_bool(out, 6, 2));
    assert_true(ferry_col_float(out, 7, 0) == 0.25);
    assert_true(ferry_col_float(out, 7, 2) == -1000.0);
    assert_int_equal(out->columns[8].type, FERRY_TYPE_DECIMAL_TEXT);
    char got[64];
    cell_text(out, 8, 0, got, sizeof got);
    assert_string_equal(got, "-3.10");
    assert_true(ferry_col_float(out, 9, 0) == -3.1);
    assert_true(isnan(ferry_col_float(out, 9, 2)));
    for (int col = 1; col < 10; col++) {
        assert_true(ferry_col_is_null(out, col, 1));
        assert_int_equal(out->columns[col].null_count, 1);
    }
    ferry_batch_unref(out);
    compiled_free(&c);

    /* A value that does not parse: the error names the transform, column, row and value. */
    static const struct {
        const char *transforms;
        const char *rows[1][10];
        const char *message;
    } bad[] = {
        {"  - {cast: i, to: int8}\n",
         {{"300"}},
         "transforms[0] (cast): column \"i\" row 0 of batch 1 of texts: value \"300\" "
         "is not a valid int8"},
        {"  - drop: d\n  - {cast: day, to: date32}\n",
         {{"1", "2", "2024-02-30"}},
         "transforms[1] (cast): column \"day\" row 0 of batch 1 of texts: value "
         "\"2024-02-30\" is not a valid date32"},
        {"  - {cast: d, to: 'decimal(4,2)'}\n",
         {{"1", "123.456"}},
         "transforms[0] (cast): column \"d\" row 0 of batch 1 of texts: value "
         "\"123.456\" is not a valid decimal128(4,2)"},
        {"  - {cast: amt, to: decimal_text}\n",
         {{"1", "2", "3", "4", "5", "6", "7", "1.2.3"}},
         "transforms[0] (cast): column \"amt\" row 0 of batch 1 of texts: value "
         "\"1.2.3\" is not a valid decimal_text"},
        {"  - {cast: i, to: int64}\n",
         {{"12345678901234567890123456789012345678901234567890123456789012345678901234567890"}},
         "transforms[0] (cast): column \"i\" row 0 of batch 1 of texts: value "
         "\"1234567890123456789012345678901234567890123456789012345678901234...\" is not a valid "
         "int64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct compiled b = compile_ok(bad[i].transforms, "texts", s);
        struct ferry_batch *o = NULL;
        struct ferry_error err = {0};
        assert_int_equal(ferry_transforms_apply(b.chain, text_batch(s, bad[i].rows, 1), &o, &err),
                         FERRY_EINVAL);
        assert_null(o);
        assert_string_equal(err.message, bad[i].message);
        compiled_free(&b);
    }
    ferry_schema_unref(s);
}

/* ---- special values (issue 23): cast and hash carry them exactly or refuse ---- */

static struct ferry_schema *special_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "day", FERRY_TYPE_DATE32, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "ts", FERRY_TYPE_TIMESTAMPTZ_US, true, NULL),
                     FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "amt", FERRY_TYPE_DECIMAL128, true, NULL),
                     FERRY_OK);
    s->fields[3].precision = 20;
    s->fields[3].scale = 2;
    assert_int_equal(ferry_schema_add_field(s, "f", FERRY_TYPE_FLOAT64, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

/* Rows: +-infinity, decimal NaN (ferry's special values), -0, NaN, -Infinity, and plain
 * values; row 3: a date beyond ferry's timestamps (year 5874897, PostgreSQL's last). */
static struct ferry_batch *special_batch(struct ferry_schema *s)
{
    static const int64_t days[] = {FERRY_SPECIAL_DATE_PINF, FERRY_SPECIAL_DATE_NINF, 0,
                                   2145031949 + 10957};
    static const int64_t ts[] = {FERRY_SPECIAL_TS_PINF, FERRY_SPECIAL_TS_NINF, 0, 1};
    const struct ferry_decimal128 nan = {.hi = FERRY_SPECIAL_DEC_NAN_HI,
                                         .lo = FERRY_SPECIAL_DEC_NAN_LO};
    const struct ferry_decimal128 amt[] = {nan, {.lo = 150}, {.lo = UINT64_MAX, .hi = -1},
                                           {.lo = 1}};
    const double f[] = {-0.0, NAN, -INFINITY, 5e-324};
    struct ferry_batch *b = NULL;
    struct ferry_rw_limits lim = {.rows = 100, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "specials", lim, tr_take, &b);
    for (int r = 0; r < 4; r++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, r + 1);
        ferry_rw_int(rw, days[r]);
        ferry_rw_int(rw, ts[r]);
        ferry_rw_dec128(rw, amt[r]);
        ferry_rw_float(rw, f[r]);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    return b;
}

static void assert_cell_text(const struct ferry_batch *b, int col, int64_t row, const char *want)
{
    char got[128];
    cell_text(b, col, row, got, sizeof got);
    assert_string_equal(got, want);
}

/* With special values let through (on_unrepresentable into a sink without them): a cast
 * to text writes PostgreSQL's text, date -> timestamp keeps +-infinity, a rescaled decimal
 * keeps NaN; floats' NaN, -Infinity, -0 and subnormals are exact in every cast. */
static void test_cast_special_values(void **state)
{
    (void)state;
    struct ferry_schema *s = special_schema();
    struct compiled c = compile_ok("  - {cast: day, to: timestamptz}\n"
                                   "  - {cast: ts, to: utf8}\n"
                                   "  - {cast: amt, to: 'decimal(22,4)'}\n"
                                   "  - {cast: f, to: utf8}\n",
                                   "specials", s);
    ferry_transforms_set_specials(c.chain, true);
    struct ferry_batch *in = special_batch(s), *out = NULL;
    struct ferry_error err = {0};
    /* row 3's date has no timestamp: refused naming column, row and value */
    assert_int_equal(ferry_transforms_apply(c.chain, in, &out, &err), FERRY_EINVAL);
    assert_null(out);
    assert_non_null(strstr(err.message, "transforms[0] (cast): column \"day\" row 3 of batch 1 "
                                        "of specials: value \""));
    assert_non_null(strstr(err.message, "is beyond the range of a timestamp (ferry's timestamps "
                                        "end in year 294247)"));
    struct ferry_batch *whole = special_batch(s);
    in = ferry_batch_slice(whole, 0, 3);
    assert_non_null(in);
    ferry_batch_unref(whole); /* the slice keeps it alive */
    out = apply_ok(c.chain, in);
    assert_int_equal(ferry_col_int(out, 1, 0), FERRY_SPECIAL_TS_PINF);
    assert_int_equal(ferry_col_int(out, 1, 1), FERRY_SPECIAL_TS_NINF);
    assert_int_equal(ferry_col_int(out, 1, 2), 0);
    assert_cell_text(out, 2, 0, "infinity");
    assert_cell_text(out, 2, 1, "-infinity");
    char want[64];
    assert_true(ferry_timestamp_to_text(0, true, want, sizeof want) > 0);
    assert_cell_text(out, 2, 2, want);
    struct ferry_decimal128 d = ferry_col_dec128(out, 3, 0);
    assert_true(d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO);
    assert_int_equal(ferry_col_dec128(out, 3, 1).lo, 15000);
    assert_int_equal((int64_t)ferry_col_dec128(out, 3, 2).lo, -100);
    assert_cell_text(out, 4, 0, "-0");
    assert_cell_text(out, 4, 1, "NaN");
    assert_cell_text(out, 4, 2, "-Infinity");
    ferry_batch_unref(out);
    compiled_free(&c);

    /* hash: the special values' text, never their storage numbers */
    c = compile_ok("  - {column: day, hash: sha256}\n"
                   "  - {column: amt, hash: sha256}\n",
                   "specials", s);
    ferry_transforms_set_specials(c.chain, true);
    out = apply_ok(c.chain, special_batch(s));
    const char *dtext[] = {"infinity", "-infinity"};
    for (int r = 0; r < 2; r++) {
        char hex[65], got[65];
        ferry_sha256_hex(dtext[r], strlen(dtext[r]), hex);
        cell_text(out, 1, r, got, sizeof got);
        assert_string_equal(got, hex);
    }
    char hex[65], got[65];
    ferry_sha256_hex("NaN", 3, hex);
    cell_text(out, 3, 0, got, sizeof got);
    assert_string_equal(got, hex);
    ferry_sha256_hex("1.50", 4, hex);
    cell_text(out, 3, 1, got, sizeof got);
    assert_string_equal(got, hex);
    ferry_batch_unref(out);
    compiled_free(&c);

    /* without special values (the source refuses them), INT32_MAX is a date like any other:
     * beyond a timestamp, refused */
    c = compile_ok("  - {cast: day, to: timestamp}\n", "specials", s);
    out = NULL;
    assert_int_equal(ferry_transforms_apply(c.chain, special_batch(s), &out, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column \"day\" row 0 of batch 1 of specials"));
    assert_non_null(strstr(err.message, "is beyond the range of a timestamp"));
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* Text -> float: NaN, +-Infinity, -0 and subnormals are read as themselves; a finite text
 * that would become +-Infinity or 0 (beyond the type's range) is refused naming the row. */
static void test_cast_text_to_float_range(void **state)
{
    (void)state;
    struct ferry_schema *s = text_schema();
    static const char *const rows[][10] = {
        {NULL, NULL, NULL, NULL, NULL, NULL, "1e-45", NULL, "4.9e-324"},
        {NULL, NULL, NULL, NULL, NULL, NULL, "-0", NULL, "-0"},
        {NULL, NULL, NULL, NULL, NULL, NULL, "-Infinity", NULL, "NaN"},
    };
    struct compiled c = compile_ok("  - {cast: f, to: float32}\n  - {cast: n, to: float64}\n",
                                   "texts", s);
    struct ferry_batch *out = apply_ok(c.chain, text_batch(s, rows, 3));
    assert_true(ferry_col_float(out, 7, 0) > 0 && ferry_col_float(out, 7, 0) < 2e-45);
    assert_true(ferry_col_float(out, 9, 0) > 0 && ferry_col_float(out, 9, 0) < 1e-323);
    assert_true(ferry_col_float(out, 7, 1) == 0 && signbit(ferry_col_float(out, 7, 1)));
    assert_true(ferry_col_float(out, 9, 1) == 0 && signbit(ferry_col_float(out, 9, 1)));
    assert_true(isinf(ferry_col_float(out, 7, 2)) && ferry_col_float(out, 7, 2) < 0);
    assert_true(isnan(ferry_col_float(out, 9, 2)));
    ferry_batch_unref(out);
    compiled_free(&c);
    static const struct {
        const char *to, *value, *type;
    } bad[] = {{"float64", "1e400", "float64"},   {"float64", "-1e309", "float64"},
               {"float64", "1e-400", "float64"},  {"float32", "1e39", "float32"},
               {"float32", "-1e-50", "float32"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char tr[64], msg[256];
        snprintf(tr, sizeof tr, "  - {cast: f, to: %s}\n", bad[i].to);
        const char *const row[1][10] = {{NULL, NULL, NULL, NULL, NULL, NULL, bad[i].value}};
        struct compiled b = compile_ok(tr, "texts", s);
        struct ferry_batch *o = NULL;
        struct ferry_error err = {0};
        assert_int_equal(ferry_transforms_apply(b.chain, text_batch(s, row, 1), &o, &err),
                         FERRY_EINVAL);
        snprintf(msg, sizeof msg,
                 "transforms[0] (cast): column \"f\" row 0 of batch 1 of texts: value \"%s\" "
                 "is not a valid %s",
                 bad[i].value, bad[i].type);
        assert_string_equal(err.message, msg);
        compiled_free(&b);
    }
    ferry_schema_unref(s);
}

/* Filter, mask, add and cast chained with projections: the output is what each step
 * promises, applied in file order. */
static void test_chain_of_every_kind(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    struct compiled c = compile_ok("  - drop: [blob, doc]\n"
                                   "  - rename: {name: label}\n"
                                   "  - {filter: small, greater_than: 0}\n"
                                   "  - {mask: label, keep_last: 2}\n"
                                   "  - {cast: big, to: utf8}\n"
                                   "  - {add: run, value: run_id}\n"
                                   "  - {column: exact, hash: sha256}\n",
                                   "test.rows", s);
    ferry_transforms_set_run(c.chain, 9);
    assert_int_equal(c.out->n_fields, TR_NCOLS - 2 + 1);
    struct ferry_batch *out = apply_ok(c.chain, tr_batch(s, 0, 90));
    int64_t j = 0;
    for (int64_t r = 0; r < 90; r++) {
        struct tr_cell v;
        tr_cell(r, 3, &v);
        if (tr_op(r) != FERRY_OP_DELETE && (v.null || v.i <= 0)) continue;
        assert_int_equal(ferry_col_int(out, 0, j), r);
        assert_int_equal(ferry_col_int(out, c.out->n_fields - 1, j), 9);
        tr_cell(r, 10, &v);
        if (!v.null) {
            char want[128], got[128];
            expected_mask(v.bytes, v.len, 2, "*", want);
            cell_text(out, ferry_schema_find(out->schema, "label"), j, got, sizeof got);
            assert_string_equal(got, want);
        }
        j++;
    }
    assert_int_equal(out->length, j);
    assert_true(j > 30 && j < 90);
    ferry_batch_unref(out);
    compiled_free(&c);
    ferry_schema_unref(s);
}

/* ---- errors: each names the transform's index, key and line ---- */

static void test_errors(void **state)
{
    (void)state;
    struct ferry_schema *s = tr_schema();
    setenv("FERRY_TEST_SET_KEY", "k", 1);
    unsetenv("FERRY_TEST_MISSING_KEY");
    static const struct {
        const char *transforms;
        const char *message;
    } bad[] = {
        {"  - drop: [flag, nope]\n",
         "t.yaml: transforms[0].drop (line 11): column \"nope\" is not in resource test.rows"},
        {"  - drop: [flag]\n  - select: [id, flag]\n",
         "t.yaml: transforms[1].select (line 12): column \"flag\" is not in resource test.rows"},
        {"  - drop: [flag, flag]\n",
         "t.yaml: transforms[0].drop (line 11): column \"flag\" listed twice"},
        {"  - {resource: test.rows, column: nope, hash: sha256}\n",
         "t.yaml: transforms[0].column (line 11): column \"nope\" is not in resource test.rows"},
        {"  - rename: {name: label}\n  - rename:\n      nope: x\n",
         "t.yaml: transforms[1].rename.nope (line 13): column \"nope\" is not in resource "
         "test.rows"},
        {"  - rename: {name: label, big: label}\n",
         "t.yaml: transforms[0].rename (line 11): two columns would be named \"label\""},
        {"  - drop: tiny\n  - rename: {name: small}\n",
         "t.yaml: transforms[1].rename (line 12): two columns would be named \"small\""},
        {"  - rename: {name: [a]}\n",
         "t.yaml: transforms[0].rename.name (line 11): expected the new column name"},
        {"  - {column: id, hash: sha256}\n",
         "t.yaml: transforms[0].column (line 11): column \"id\" is part of the key of test.rows "
         "and cannot be hashed"},
        {"  - rename: {id: rid}\n  - {column: rid, hash: sha256}\n",
         "t.yaml: transforms[1].column (line 12): column \"rid\" is part of the key of test.rows "
         "and cannot be hashed"},
        /* mask */
        {"  - {mask: nope}\n",
         "t.yaml: transforms[0].mask (line 11): column \"nope\" is not in resource test.rows"},
        {"  - {mask: big}\n",
         "t.yaml: transforms[0].mask (line 11): column \"big\" is int64; mask applies to utf8, "
         "json and decimal_text columns (cast it to utf8 first)"},
        {"  - {mask: blob}\n",
         "t.yaml: transforms[0].mask (line 11): column \"blob\" is binary; mask applies to utf8, "
         "json and decimal_text columns (cast it to utf8 first)"},
        {"  - {mask: name, char: '**'}\n",
         "t.yaml: transforms[0].char (line 11): expected exactly one character"},
        {"  - {mask: name, char: ''}\n",
         "t.yaml: transforms[0].char (line 11): expected exactly one character"},
        {"  - {mask: name, keep_last: -1}\n",
         "t.yaml: transforms[0].keep_last (line 11): must be between 0 and 1000000, got -1"},
        {"  - {cast: id, to: utf8}\n  - {mask: id}\n",
         "t.yaml: transforms[1].mask (line 12): column \"id\" is part of the key of test.rows "
         "and cannot be masked"},
        /* add */
        {"  - {add: name, value: x}\n",
         "t.yaml: transforms[0].add (line 11): column \"name\" already exists in resource "
         "test.rows"},
        {"  - {add: a, value: run_id}\n  - {add: a, value: load_time}\n",
         "t.yaml: transforms[1].add (line 12): column \"a\" already exists in resource "
         "test.rows"},
        {"  - {add: extra}\n", "t.yaml: transforms[0].value: required (line 11)"},
        {"  - {add: extra, value: }\n",
         "t.yaml: transforms[0].value (line 11): a value is required"},
        /* filter */
        {"  - {filter: nope, equals: 1}\n",
         "t.yaml: transforms[0].filter (line 11): column \"nope\" is not in resource test.rows"},
        {"  - {filter: id}\n",
         "t.yaml: transforms[0].filter (line 11): no condition; use exactly one of equals, "
         "not_equals, in, is_null, greater_than, less_than"},
        {"  - {filter: id, equals: 1, less_than: 3}\n",
         "t.yaml: transforms[0].filter (line 11): several conditions; use exactly one of equals, "
         "not_equals, in, is_null, greater_than, less_than"},
        {"  - {filter: tiny, equals: 300}\n",
         "t.yaml: transforms[0].equals (line 11): \"300\" is not a valid int8 value for column "
         "\"tiny\""},
        {"  - {filter: price, greater_than: '1.2345'}\n",
         "t.yaml: transforms[0].greater_than (line 11): \"1.2345\" is not a valid "
         "decimal128(20,3) value for column \"price\""},
        {"  - {filter: day, less_than: yesterday}\n",
         "t.yaml: transforms[0].less_than (line 11): \"yesterday\" is not a valid date32 value "
         "for column \"day\""},
        {"  - {filter: exact, equals: 1e5}\n",
         "t.yaml: transforms[0].equals (line 11): \"1e5\" is not a valid decimal_text value for "
         "column \"exact\""},
        {"  - {filter: big, in: [1, 2, x]}\n",
         "t.yaml: transforms[0].in[2] (line 11): \"x\" is not a valid int64 value for column "
         "\"big\""},
        {"  - {filter: big, in: 1}\n",
         "t.yaml: transforms[0].in (line 11): expected a list of values"},
        {"  - {filter: big, in: []}\n",
         "t.yaml: transforms[0].in (line 11): expected at least one value"},
        {"  - {filter: flag, is_null: maybe}\n",
         "t.yaml: transforms[0].is_null (line 11): expected true or false, got \"maybe\""},
        {"  - {filter: blob, equals: x}\n",
         "t.yaml: transforms[0].equals (line 11): column \"blob\" is binary; only is_null "
         "applies to it"},
        {"  - {filter: f64, equals: }\n",
         "t.yaml: transforms[0].equals (line 11): a value is required"},
        {"  - {filter: big, in: [1, ~]}\n",
         "t.yaml: transforms[0].in[1] (line 11): expected a string, got nothing (null)"},
        {"  - {filter: uid, equals: not-a-uuid}\n",
         "t.yaml: transforms[0].equals (line 11): \"not-a-uuid\" is not a valid uuid value for "
         "column \"uid\""},
        /* cast */
        {"  - {cast: nope, to: utf8}\n",
         "t.yaml: transforms[0].cast (line 11): column \"nope\" is not in resource test.rows"},
        {"  - {cast: big}\n", "t.yaml: transforms[0].to: required (line 11)"},
        {"  - {cast: big, to: int65}\n",
         "t.yaml: transforms[0].to (line 11): unknown type \"int65\" (a ferry type name such as "
         "int64, float64, utf8, date32, timestamptz, or decimal(P,S))"},
        {"  - {cast: big, to: decimal}\n",
         "t.yaml: transforms[0].to (line 11): type \"decimal\" needs a precision and a scale: "
         "\"decimal(P,S)\""},
        {"  - {cast: big, to: 'decimal(12 2)'}\n",
         "t.yaml: transforms[0].to (line 11): unknown type \"decimal(12 2)\" (a ferry type name "
         "such as int64, float64, utf8, date32, timestamptz, or decimal(P,S))"},
        {"  - {cast: big, to: 'decimal(40,2)'}\n",
         "t.yaml: transforms[0].to (line 11): unknown type \"decimal(40,2)\" (a ferry type name "
         "such as int64, float64, utf8, date32, timestamptz, or decimal(P,S))"},
        {"  - {cast: big, to: int32}\n",
         "t.yaml: transforms[0].to (line 11): column \"big\" cannot be cast from int64 to int32: "
         "only conversions that lose nothing are allowed"},
        {"  - {cast: medium, to: float32}\n",
         "t.yaml: transforms[0].to (line 11): column \"medium\" cannot be cast from int32 to "
         "float32: only conversions that lose nothing are allowed"},
        {"  - {cast: f64, to: int64}\n",
         "t.yaml: transforms[0].to (line 11): column \"f64\" cannot be cast from float64 to "
         "int64: only conversions that lose nothing are allowed"},
        {"  - {cast: blob, to: utf8}\n",
         "t.yaml: transforms[0].to (line 11): column \"blob\" cannot be cast from binary to "
         "utf8: only conversions that lose nothing are allowed"},
        {"  - {cast: price, to: 'decimal(20,2)'}\n",
         "t.yaml: transforms[0].to (line 11): column \"price\" cannot be cast from "
         "decimal128(20,3) to decimal128(20,2): only conversions that lose nothing are allowed"},
        {"  - {cast: price, to: 'decimal(20,4)'}\n",
         "t.yaml: transforms[0].to (line 11): column \"price\" cannot be cast from "
         "decimal128(20,3) to decimal128(20,4): only conversions that lose nothing are allowed"},
        {"  - {cast: at, to: timestamptz}\n",
         "t.yaml: transforms[0].to (line 11): column \"at\" cannot be cast from timestamp to "
         "timestamptz: only conversions that lose nothing are allowed"},
        {"  - {cast: doc, to: int64}\n",
         "t.yaml: transforms[0].to (line 11): column \"doc\" cannot be cast from json to int64: "
         "only conversions that lose nothing are allowed"},
        {"  - {cast: name, to: json}\n",
         "t.yaml: transforms[0].to (line 11): column \"name\" cannot be cast from utf8 to json: "
         "only conversions that lose nothing are allowed"},
        {"  - drop: [flag]\n  - {column: name, hash: hmac_sha256, key: "
         "'env:FERRY_TEST_MISSING_KEY'}\n",
         "t.yaml: transforms[1].key (line 12): environment variable FERRY_TEST_MISSING_KEY is "
         "not set"},
        {"  - {column: name, hash: hmac_sha256}\n",
         "t.yaml: transforms[0].key: required (line 11)"},
        {"  - {column: name, hash: hmac_sha256, key: s3cr3t-canary}\n",
         "t.yaml: transforms[0].key (line 11): expected a secret reference env:NAME or "
         "file:PATH; a plain value is not allowed here (it would be saved with the run)"},
        {"  - drop: [id, flag, tiny, small, medium, big, f32, f64, price, exact, name, blob, "
         "day, clock, at, 'at \"utc\"', uid, doc]\n",
         "t.yaml: transforms[0].drop (line 11): no column of resource test.rows would remain"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].message == NULL) { /* print what it says, to fill the table in */
            struct ferry_pipeline_spec *q = load(bad[i].transforms);
            struct ferry_transform_chain *ch = NULL;
            struct ferry_schema *o = NULL;
            struct ferry_error e = {0};
            int rc = ferry_transforms_compile(q, "test.rows", s, &ch, &o, &e);
            fail_msg("rc %d: %s", rc, e.message);
        }
        compile_fails(bad[i].transforms, "test.rows", s, bad[i].message);
    }
    /* An unknown algorithm names the key and the words allowed. */
    struct ferry_pipeline_spec *p = load("  - {column: name, hash: md5}\n");
    struct ferry_transform_chain *chain = NULL;
    struct ferry_schema *out = NULL;
    struct ferry_error err = {0};
    assert_int_equal(ferry_transforms_compile(p, "test.rows", s, &chain, &out, &err),
                     FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "transforms[0].hash (line 11)"));
    assert_non_null(strstr(err.message, "sha256"));
    assert_non_null(strstr(err.message, "hmac_sha256"));
    ferry_pipeline_free(p);
    /* The schema was not leaked or over-released by any failed compile. */
    assert_int_equal(atomic_load(&s->refcount), 1);
    unsetenv("FERRY_TEST_SET_KEY");
    ferry_schema_unref(s);
}

/* Failed allocations at every point of compile and apply: an error or success, never a
 * crash or a leak (the sanitizer build checks the leaks). */
static void test_out_of_memory(void **state)
{
    (void)state;
    setenv("FERRY_TEST_HMAC_KEY", "key", 1);
    struct ferry_schema *s = tr_schema();
    static const char *const lists[] = {
        "  - drop: [flag]\n"
        "  - {column: name, hash: hmac_sha256, key: 'env:FERRY_TEST_HMAC_KEY'}\n"
        "  - rename: {big: large}\n",
        "  - {filter: small, greater_than: 0}\n"
        "  - {mask: name, keep_last: 2}\n"
        "  - {add: run, value: run_id}\n"
        "  - {add: pos, value: source_position}\n"
        "  - {cast: day, to: timestamptz}\n"
        "  - {cast: big, to: utf8}\n"
        "  - {filter: tiny, in: [1, 2, 3]}\n"};
    for (int li = 0; li < 2; li++) {
        struct ferry_pipeline_spec *p = load(lists[li]);
        bool compiled = false;
        for (long n = 0; n < 400 && !compiled; n++) {
            struct ferry_transform_chain *chain = NULL;
            struct ferry_schema *out = NULL;
            struct ferry_error err = {0};
            ferry_mem_fail_after(n);
            int rc = ferry_transforms_compile(p, "test.rows", s, &chain, &out, &err);
            ferry_mem_fail_after(-1);
            if (rc == FERRY_OK) {
                compiled = true;
                assert_non_null(chain);
                ferry_transforms_set_run(chain, 5);
                bool applied = false;
                for (long m = 0; m < 400 && !applied; m++) {
                    struct ferry_batch *in = tr_batch(s, 0, 20);
                    struct ferry_batch *res = NULL;
                    ferry_mem_fail_after(m);
                    rc = ferry_transforms_apply(chain, in, &res, &err);
                    ferry_mem_fail_after(-1);
                    if (rc == FERRY_OK) {
                        applied = true;
                        if (li == 0) assert_int_equal(res->length, 20);
                        else assert_true(res->length < 20);
                        ferry_batch_unref(res);
                    } else {
                        assert_int_equal(rc, FERRY_ENOMEM);
                    }
                }
                assert_true(applied);
                ferry_transforms_free(chain);
                ferry_schema_unref(out);
            } else {
                if (rc != FERRY_ENOMEM) fail_msg("allocation %ld: rc %d (%s)", n, rc, err.message);
                assert_null(chain);
                assert_null(out);
            }
        }
        assert_true(compiled);
        assert_int_equal(atomic_load(&s->refcount), 1);
        ferry_pipeline_free(p);
    }
    ferry_schema_unref(s);
    unsetenv("FERRY_TEST_HMAC_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_transform_applies),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_projection_keeps_input_alive),
        cmocka_unit_test(test_select_orders_and_keeps_key_positions),
        cmocka_unit_test(test_composite_key_positions),
        cmocka_unit_test(test_rename),
        cmocka_unit_test(test_hash_sha256_known_values),
        cmocka_unit_test(test_hash_float_specials),
        cmocka_unit_test(test_hash_hmac),
        cmocka_unit_test(test_hash_every_type),
        cmocka_unit_test(test_slices_as_input),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_filter_all_or_nothing),
        cmocka_unit_test(test_filter_keeps_deletes),
        cmocka_unit_test(test_cast_widen),
        cmocka_unit_test(test_cast_from_text),
        cmocka_unit_test(test_cast_special_values),
        cmocka_unit_test(test_cast_text_to_float_range),
        cmocka_unit_test(test_chain_of_every_kind),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
