/* tests/unit/test_batch.c - schemas, batches (every type, nulls, slices, copies,
 * refcounts) and the value text forms. Batches are built through the row writer, the
 * way every batch in the engine is built. */
#include "unit.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/core.h"

/* ---- helpers ---- */

struct sink {
    struct ferry_batch *b[16];
    int n;
};

static int capture(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct sink *s = ctx;
    (void)err;
    assert_true(s->n < 16);
    s->b[s->n++] = b;
    return FERRY_OK;
}

static void sink_clear(struct sink *s)
{
    for (int i = 0; i < s->n; i++)
        ferry_batch_unref(s->b[i]);
    s->n = 0;
}

static struct ferry_schema *all_types_schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_non_null(s);
    char name[32];
    for (int t = FERRY_TYPE_BOOL; t < FERRY_TYPE_MAX; t++) {
        snprintf(name, sizeof name, "c_%s", ferry_type_name((enum ferry_type)t));
        assert_int_equal(ferry_schema_add_field(s, name, (enum ferry_type)t, true, NULL), FERRY_OK);
    }
    int d = ferry_schema_find(s, "c_decimal128");
    s->fields[d].precision = 38;
    s->fields[d].scale = 10;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static const uint8_t UUID1[16] = {18,  62, 69, 103, 232, 155, 18, 211,
                                  164, 86, 66, 102, 20,  23,  64, 0};
static const uint8_t UUID2[16] = {0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0xee};

/* Row i of the all-types fixture: i % 3 == 1 is all nulls; others vary with i. */
static void write_all_types_row(struct ferry_row_writer *rw, int i)
{
    ferry_rw_begin(rw, (enum ferry_op)(i % 3));
    if (i % 3 == 1) {
        for (int t = FERRY_TYPE_BOOL; t < FERRY_TYPE_MAX; t++)
            ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
        return;
    }
    bool big = i % 2 == 0;
    char text[32];
    snprintf(text, sizeof text, "row-%d", i);
    ferry_rw_bool(rw, big);
    ferry_rw_int(rw, big ? INT8_MIN : INT8_MAX);
    ferry_rw_int(rw, big ? INT16_MIN : INT16_MAX);
    ferry_rw_int(rw, big ? INT32_MIN : INT32_MAX);
    ferry_rw_int(rw, big ? INT64_MIN : INT64_MAX);
    ferry_rw_float(rw, big ? -1.5 : 3.25);
    ferry_rw_float(rw, big ? 1e300 : -0.1);
    struct ferry_decimal128 d = {big ? UINT64_MAX : 12345, big ? -1 : 0}; /* -1 or 12345 */
    ferry_rw_dec128(rw, d);
    ferry_rw_text(rw, big ? "-12.3400" : "NaN", big ? 8 : 3);
    ferry_rw_text(rw, text, strlen(text));
    ferry_rw_text(rw, "\0\1\2", big ? 3 : 0);
    ferry_rw_int(rw, big ? -719162 : 2932896);
    ferry_rw_int(rw, big ? 0 : INT64_C(86399999999));
    ferry_rw_int(rw, big ? INT64_C(-14182939500000) : 0);
    ferry_rw_int(rw, big ? INT64_C(253402300799999999) : -1);
    ferry_rw_fixed(rw, big ? UUID1 : UUID2, 16);
    ferry_rw_text(rw, "{\"a\":1}", 7);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
}

static void check_all_types_row(const struct ferry_batch *b, int64_t row, int i)
{
    int c = 0;
    if (i % 3 == 1) {
        for (c = 0; c < b->schema->n_fields; c++) {
            assert_true(ferry_col_is_null(b, c, row));
            const struct ferry_column *col = &b->columns[c];
            size_t len;
            if (ferry_type_is_varwidth(col->type)) {
                ferry_col_bytes(b, c, row, &len);
                assert_int_equal(len, 0);
            } else if (col->type == FERRY_TYPE_BOOL) {
                assert_false(ferry_col_bool(b, c, row));
            } else {
                /* null fixed-width slots are zeroed */
                const uint8_t *p = ferry_col_bytes(b, c, row, &len);
                for (size_t k = 0; k < len; k++)
                    assert_int_equal(p[k], 0);
            }
        }
        assert_int_equal(ferry_batch_op(b, row), FERRY_OP_UPDATE);
        return;
    }
    for (c = 0; c < b->schema->n_fields; c++)
        assert_false(ferry_col_is_null(b, c, row));
    bool big = i % 2 == 0;
    size_t len;
    const uint8_t *p;
    char text[32];
    snprintf(text, sizeof text, "row-%d", i);
    assert_int_equal(ferry_col_bool(b, 0, row), big);
    assert_int_equal(ferry_col_int(b, 1, row), big ? INT8_MIN : INT8_MAX);
    assert_int_equal(ferry_col_int(b, 2, row), big ? INT16_MIN : INT16_MAX);
    assert_int_equal(ferry_col_int(b, 3, row), big ? INT32_MIN : INT32_MAX);
    assert_true(ferry_col_int(b, 4, row) == (big ? INT64_MIN : INT64_MAX));
    assert_true(ferry_col_float(b, 5, row) == (big ? -1.5 : 3.25));
    assert_true(ferry_col_float(b, 6, row) == (big ? 1e300 : -0.1));
    struct ferry_decimal128 d = ferry_col_dec128(b, 7, row);
    assert_true(d.lo == (big ? UINT64_MAX : 12345) && d.hi == (big ? -1 : 0));
    p = ferry_col_bytes(b, 8, row, &len);
    assert_int_equal(len, big ? 8 : 3);
    assert_memory_equal(p, big ? "-12.3400" : "NaN", len);
    p = ferry_col_bytes(b, 9, row, &len);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(p, text, len);
    p = ferry_col_bytes(b, 10, row, &len);
    assert_int_equal(len, big ? 3 : 0);
    if (big) assert_memory_equal(p, "\0\1\2", 3);
    assert_int_equal(ferry_col_int(b, 11, row), big ? -719162 : 2932896);
    assert_true(ferry_col_int(b, 12, row) == (big ? 0 : INT64_C(86399999999)));
    assert_true(ferry_col_int(b, 13, row) == (big ? INT64_C(-14182939500000) : 0));
    assert_true(ferry_col_int(b, 14, row) == (big ? INT64_C(253402300799999999) : -1));
    assert_memory_equal(ferry_col_fixed(b, 15, row), big ? UUID1 : UUID2, 16);
    p = ferry_col_bytes(b, 16, row, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(p, "{\"a\":1}", 7);
    assert_int_equal(ferry_batch_op(b, row), (enum ferry_op)(i % 3));
}

static struct ferry_batch *all_types_batch(int rows)
{
    struct ferry_schema *s = all_types_schema();
    struct sink sk = {0};
    struct ferry_rw_limits lim = {.rows = 100000, .bytes = INT64_C(1) << 30};
    struct ferry_row_writer *rw = ferry__rw_new(s, "everything", lim, capture, &sk);
    assert_non_null(rw);
    for (int i = 0; i < rows; i++)
        write_all_types_row(rw, i);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    assert_int_equal(sk.n, 1);
    return sk.b[0];
}

/* ---- types and schemas ---- */

static void test_type_names(void **state)
{
    (void)state;
    for (int t = FERRY_TYPE_BOOL; t < FERRY_TYPE_MAX; t++) {
        const char *name = ferry_type_name((enum ferry_type)t);
        assert_string_not_equal(name, "unknown");
        enum ferry_type back = 0;
        assert_int_equal(ferry_type_from_name(name, &back), FERRY_OK);
        assert_int_equal(back, t);
    }
    assert_string_equal(ferry_type_name(FERRY_TYPE_TIMESTAMPTZ_US), "timestamptz");
    assert_string_equal(ferry_type_name(FERRY_TYPE_DECIMAL128), "decimal128");
    assert_string_equal(ferry_type_name((enum ferry_type)0), "unknown");
    assert_string_equal(ferry_type_name(FERRY_TYPE_MAX), "unknown");
    enum ferry_type t;
    assert_int_equal(ferry_type_from_name("BIGINT", &t), FERRY_OK);
    assert_int_equal(t, FERRY_TYPE_INT64);
    assert_int_equal(ferry_type_from_name("text", &t), FERRY_OK);
    assert_int_equal(t, FERRY_TYPE_UTF8);
    assert_int_equal(ferry_type_from_name("int128", &t), FERRY_EINVAL);
    assert_int_equal(ferry_type_from_name(NULL, &t), FERRY_EINVAL);

    static const int widths[FERRY_TYPE_MAX] = {
        [FERRY_TYPE_BOOL] = 0,      [FERRY_TYPE_INT8] = 1,         [FERRY_TYPE_INT16] = 2,
        [FERRY_TYPE_INT32] = 4,     [FERRY_TYPE_INT64] = 8,        [FERRY_TYPE_FLOAT32] = 4,
        [FERRY_TYPE_FLOAT64] = 8,   [FERRY_TYPE_DECIMAL128] = 16,  [FERRY_TYPE_DECIMAL_TEXT] = 0,
        [FERRY_TYPE_UTF8] = 0,      [FERRY_TYPE_BINARY] = 0,       [FERRY_TYPE_DATE32] = 4,
        [FERRY_TYPE_TIME64_US] = 8, [FERRY_TYPE_TIMESTAMP_US] = 8, [FERRY_TYPE_TIMESTAMPTZ_US] = 8,
        [FERRY_TYPE_UUID] = 16,     [FERRY_TYPE_JSON] = 0,
    };
    for (int k = FERRY_TYPE_BOOL; k < FERRY_TYPE_MAX; k++)
        assert_int_equal(ferry_type_width((enum ferry_type)k), widths[k]);
    assert_true(ferry_type_is_varwidth(FERRY_TYPE_UTF8));
    assert_true(ferry_type_is_varwidth(FERRY_TYPE_JSON));
    assert_true(ferry_type_is_varwidth(FERRY_TYPE_BINARY));
    assert_true(ferry_type_is_varwidth(FERRY_TYPE_DECIMAL_TEXT));
    assert_false(ferry_type_is_varwidth(FERRY_TYPE_UUID));
    assert_false(ferry_type_is_varwidth(FERRY_TYPE_BOOL));
}

static void test_schema(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(s->refcount, 1);
    assert_int_equal(ferry_schema_add_field(s, "tenant", FERRY_TYPE_INT32, false, &err), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "note", FERRY_TYPE_UTF8, true, &err), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, &err), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "amount", FERRY_TYPE_DECIMAL128, true, &err),
                     FERRY_OK);
    assert_int_equal(s->fields[3].precision, 38);
    assert_int_equal(s->fields[3].scale, 0);

    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_UTF8, true, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column id appears twice"));
    assert_int_equal(ferry_schema_add_field(s, "", FERRY_TYPE_UTF8, true, &err), FERRY_EINVAL);
    assert_int_equal(ferry_schema_add_field(s, "x", (enum ferry_type)99, true, &err), FERRY_EINVAL);
    assert_int_equal(s->n_fields, 4);

    assert_int_equal(ferry_schema_find(s, "id"), 2);
    assert_int_equal(ferry_schema_find(s, "note"), 1);
    assert_int_equal(ferry_schema_find(s, "ID"), -1);
    assert_int_equal(ferry_schema_find(s, "missing"), -1);

    /* key (tenant, id) declared as positions 1 and 2 */
    s->fields[2].key_pos = 2;
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_OK);
    assert_int_equal(s->n_key, 2);
    assert_int_equal(s->key[0], 0);
    assert_int_equal(s->key[1], 2);

    s->fields[1].key_pos = 2;
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "columns note and id both claim key position 2"));
    s->fields[1].key_pos = 3;
    s->fields[2].key_pos = 0;
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column note"));
    s->fields[1].key_pos = 0;
    s->fields[2].key_pos = 2;

    s->fields[3].precision = 39;
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column amount: decimal128 precision 39"));
    s->fields[3].precision = 10;
    s->fields[3].scale = -11;
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "scale -11"));
    s->fields[3].scale = -2; /* negative scales are fine */
    assert_int_equal(ferry_schema_finish(s, &err), FERRY_OK);
    assert_int_equal(s->n_key, 2);

    assert_ptr_equal(ferry_schema_ref(s), s);
    assert_int_equal(s->refcount, 2);
    ferry_schema_unref(s);
    assert_int_equal(s->refcount, 1);
    ferry_schema_unref(s);
    ferry_schema_unref(NULL);
}

/* ---- batches ---- */

static void test_every_type_roundtrip(void **state)
{
    (void)state;
    struct ferry_batch *b = all_types_batch(6);
    assert_int_equal(b->length, 6);
    assert_int_equal(b->offset, 0);
    assert_null(b->parent);
    assert_string_equal(b->resource, "everything");
    assert_int_equal(b->seq, 1);
    for (int i = 0; i < 6; i++)
        check_all_types_row(b, i, i);
    for (int c = 0; c < b->schema->n_fields; c++) {
        const struct ferry_column *col = &b->columns[c];
        assert_int_equal(col->type, b->schema->fields[c].type);
        assert_int_equal(col->null_count, 2); /* rows 1 and 4 */
        assert_non_null(col->validity);
        /* bitmap: rows 1 and 4 clear, padding bits zero */
        assert_int_equal(col->validity[0], 0x3f & ~0x12);
        if (ferry_type_is_varwidth(col->type)) {
            assert_null(col->values);
            assert_int_equal(col->offsets[0], 0);
        } else {
            assert_non_null(col->values);
            assert_null(col->offsets);
        }
    }
    /* the bool values bitmap: rows 0, 2 true (big), row 4 null, 3, 5 false */
    assert_int_equal(b->columns[0].values[0], 0x05);
    ferry_batch_unref(b);
}

static void test_no_null_no_bitmap(void **state)
{
    (void)state;
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "a", FERRY_TYPE_INT32, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "b", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct sink sk = {0};
    struct ferry_rw_limits lim = {.rows = 10};
    struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, capture, &sk);
    for (int i = 0; i < 10; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        if (i == 9)
            ferry_rw_null(rw);
        else
            ferry_rw_text(rw, "x", 1);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(sk.n, 1);
    struct ferry_batch *b = sk.b[0];
    assert_null(b->columns[0].validity);
    assert_int_equal(b->columns[0].null_count, 0);
    assert_non_null(b->columns[1].validity);
    assert_int_equal(b->columns[1].null_count, 1);
    /* the bitmap was back-filled: rows 0..8 valid */
    for (int i = 0; i < 9; i++)
        assert_false(ferry_col_is_null(b, 1, i));
    assert_true(ferry_col_is_null(b, 1, 9));
    assert_int_equal(b->columns[1].validity[1], 0x01); /* bit 8 set, bit 9 clear, padding zero */
    assert_int_equal(b->columns[1].validity[0], 0xff);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_slice(void **state)
{
    (void)state;
    struct ferry_batch *b = all_types_batch(20);
    assert_int_equal(ferry_batch_set_position(b, "{\"shard\":0,\"key\":[19]}"), FERRY_OK);
    b->shard = 3;
    struct ferry_batch *s = ferry_batch_slice(b, 5, 10);
    assert_non_null(s);
    assert_int_equal(s->length, 10);
    assert_int_equal(s->offset, 5);
    assert_ptr_equal(s->parent, b);
    assert_int_equal(b->refcount, 2);
    assert_int_equal(s->shard, 3);
    assert_int_equal(s->seq, b->seq);
    assert_null(s->position); /* does not end where b ends */
    for (int i = 0; i < 10; i++)
        check_all_types_row(s, i, i + 5);
    /* rows 7, 10, 13 of b are null: 3 in [5, 15) */
    for (int c = 0; c < s->schema->n_fields; c++) {
        assert_int_equal(s->columns[c].null_count, 3);
        assert_ptr_equal(s->columns[c].values, b->columns[c].values); /* shared */
    }

    /* a slice of a slice refers to the owner and accumulates offsets */
    struct ferry_batch *ss = ferry_batch_slice(s, 3, 2); /* b rows 8, 9: no null */
    assert_non_null(ss);
    assert_ptr_equal(ss->parent, b);
    assert_int_equal(ss->offset, 8);
    for (int c = 0; c < ss->schema->n_fields; c++) {
        assert_int_equal(ss->columns[c].null_count, 0);
        assert_null(ss->columns[c].validity);
    }
    check_all_types_row(ss, 0, 8);
    check_all_types_row(ss, 1, 9);

    /* the tail slice keeps the position */
    struct ferry_batch *tail = ferry_batch_slice(b, 15, 5);
    assert_string_equal(tail->position, "{\"shard\":0,\"key\":[19]}");
    struct ferry_batch *empty = ferry_batch_slice(b, 20, 0);
    assert_non_null(empty);
    assert_int_equal(empty->length, 0);

    assert_null(ferry_batch_slice(b, 15, 6));
    assert_null(ferry_batch_slice(b, -1, 2));
    assert_null(ferry_batch_slice(b, 21, 0));
    assert_null(ferry_batch_slice(b, 0, -1));

    /* the slices keep the buffers alive after the owner's last own reference goes */
    assert_int_equal(b->refcount, 5);
    ferry_batch_unref(b);
    check_all_types_row(s, 9, 14);
    ferry_batch_unref(s);
    check_all_types_row(ss, 1, 9);
    ferry_batch_unref(ss);
    ferry_batch_unref(tail);
    ferry_batch_unref(empty);
}

static void test_copy(void **state)
{
    (void)state;
    struct ferry_batch *b = all_types_batch(20);
    b->digest = 0xdeadbeef;
    struct ferry_batch *s = ferry_batch_slice(b, 3, 13); /* unaligned offset, rows 3..15 */
    struct ferry_batch *c = ferry_batch_copy(s);
    assert_non_null(c);
    assert_null(c->parent);
    assert_int_equal(c->offset, 0);
    assert_int_equal(c->length, 13);
    assert_int_equal(c->refcount, 1);
    for (int i = 0; i < 13; i++)
        check_all_types_row(c, i, i + 3);
    for (int k = 0; k < c->schema->n_fields; k++) {
        const struct ferry_column *col = &c->columns[k];
        /* nulls at b rows 4, 7, 10, 13 -> copy rows 1, 4, 7, 10 */
        assert_int_equal(col->null_count, 4);
        assert_int_equal(col->validity[0], (uint8_t) ~((1u << 1) | (1u << 4) | (1u << 7)));
        assert_int_equal(col->validity[1], 0x1f & ~(1u << 2)); /* 13 rows: padding zero */
        if (ferry_type_is_varwidth(col->type)) {
            assert_int_equal(col->offsets[0], 0);
            assert_int_equal((size_t)col->offsets[13], col->data_cap);
        }
        assert_ptr_not_equal(col->validity, b->columns[k].validity);
    }
    /* bool values canonical: bit per row, padding zero */
    assert_int_equal(c->columns[0].values[1] & ~0x1f, 0);
    ferry_batch_unref(s);
    ferry_batch_unref(b);
    for (int i = 0; i < 13; i++)
        check_all_types_row(c, i, i + 3);

    /* a copy of a range without nulls has no bitmap */
    struct ferry_batch *s2 = ferry_batch_slice(c, 2, 2); /* b rows 5, 6 */
    struct ferry_batch *c2 = ferry_batch_copy(s2);
    for (int k = 0; k < c2->schema->n_fields; k++) {
        assert_null(c2->columns[k].validity);
        assert_int_equal(c2->columns[k].null_count, 0);
    }
    check_all_types_row(c2, 0, 5);
    check_all_types_row(c2, 1, 6);
    ferry_batch_unref(s2);
    ferry_batch_unref(c2);
    ferry_batch_unref(c);

    /* a zero-row batch copies to valid empty buffers */
    struct ferry_schema *sc = all_types_schema();
    struct ferry_batch *e = ferry_batch_new(sc, "r");
    assert_int_equal(e->length, 0);
    assert_null(e->ops);
    struct ferry_batch *ec = ferry_batch_copy(e);
    assert_non_null(ec);
    assert_int_equal(ec->columns[9].offsets[0], 0);
    ferry_batch_unref(ec);
    ferry_batch_unref(e);
    ferry_schema_unref(sc);
}

static void test_copy_oom(void **state)
{
    (void)state;
    struct ferry_batch *b = all_types_batch(5);
    /* every allocation of the copy fails in turn; none leaks (ASan) */
    int failures = 0;
    for (long n = 0; n < 200; n++) {
        ferry_mem_fail_after(n);
        struct ferry_batch *c = ferry_batch_copy(b);
        ferry_mem_fail_after(-1);
        if (c == NULL) {
            failures++;
            continue;
        }
        check_all_types_row(c, 4, 4);
        ferry_batch_unref(c);
        break;
    }
    assert_true(failures > 10);
    ferry_batch_unref(b);
}

static void *ref_worker(void *arg)
{
    struct ferry_batch *b = arg;
    for (int i = 0; i < 100000; i++) {
        ferry_batch_ref(b);
        ferry_schema_ref(b->schema);
        ferry_schema_unref(b->schema);
        ferry_batch_unref(b);
    }
    return NULL;
}

static void test_refcount_threads(void **state)
{
    (void)state;
    struct ferry_batch *b = all_types_batch(2);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, ref_worker, b), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(b->refcount, 1);
    assert_int_equal(b->schema->refcount, 1);
    assert_ptr_equal(ferry_batch_ref(b), b);
    assert_int_equal(b->refcount, 2);
    ferry_batch_unref(b);
    ferry_batch_unref(b);
    ferry_batch_unref(NULL);
    assert_null(ferry_batch_ref(NULL));
}

static void test_set_position(void **state)
{
    (void)state;
    struct ferry_schema *s = all_types_schema();
    struct ferry_batch *b = ferry_batch_new(s, "r");
    assert_int_equal(ferry_batch_set_position(b, "{\"shard\":1}"), FERRY_OK);
    assert_string_equal(b->position, "{\"shard\":1}");
    assert_int_equal(ferry_batch_set_position(b, "{\"shard\":2}"), FERRY_OK);
    assert_string_equal(b->position, "{\"shard\":2}");
    assert_int_equal(ferry_batch_set_position(b, NULL), FERRY_OK);
    assert_null(b->position);
    ferry_mem_fail_after(0);
    assert_int_equal(ferry_batch_set_position(b, "x"), FERRY_ENOMEM);
    ferry_mem_fail_after(-1);
    ferry_batch_unref(b);
    ferry_schema_unref(s);
}

/* ---- text forms ---- */

static struct ferry_decimal128 dec(int64_t hi, uint64_t lo)
{
    struct ferry_decimal128 d = {lo, hi};
    return d;
}

static void check_dec(struct ferry_decimal128 v, int p, int s, const char *text)
{
    char buf[128];
    int n = ferry_decimal128_to_text(v, s, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(text));
    assert_string_equal(buf, text);
    struct ferry_decimal128 back;
    assert_int_equal(ferry_decimal128_from_text(text, strlen(text), p, s, &back), FERRY_OK);
    assert_true(back.lo == v.lo && back.hi == v.hi);
}

static int parse_dec(const char *text, int p, int s, struct ferry_decimal128 *out)
{
    return ferry_decimal128_from_text(text, strlen(text), p, s, out);
}

static void test_decimal_text(void **state)
{
    (void)state;
    check_dec(dec(0, 12345), 10, 2, "123.45");
    check_dec(dec(-1, (uint64_t)-12345), 10, 2, "-123.45");
    check_dec(dec(-1, (uint64_t)-5), 3, 3, "-0.005");
    check_dec(dec(0, 5), 5, 3, "0.005");
    check_dec(dec(0, 0), 10, 2, "0.00");
    check_dec(dec(0, 7), 1, 0, "7");
    check_dec(dec(0, 123), 5, -2, "12300");
    check_dec(dec(-1, (uint64_t)-123), 5, -2, "-12300");
    check_dec(dec(0, 0), 5, -2, "0");
    /* decimal(38,10) max and min: 38 nines = 10^38 - 1 */
    const uint64_t max_lo = UINT64_C(687399551400673279);
    const int64_t max_hi = INT64_C(5421010862427522170);
    check_dec(dec(max_hi, max_lo), 38, 10, "9999999999999999999999999999.9999999999");
    check_dec(dec(~max_hi, ~max_lo + 1), 38, 10, "-9999999999999999999999999999.9999999999");
    check_dec(dec(max_hi, max_lo), 38, 0, "99999999999999999999999999999999999999");
    check_dec(dec(max_hi, max_lo), 38, 38, "0.99999999999999999999999999999999999999");
    check_dec(dec(0, 1), 38, -38, "100000000000000000000000000000000000000");

    char buf[128];
    /* the most negative int128 still prints (it has 39 digits) */
    assert_int_equal(ferry_decimal128_to_text(dec(INT64_MIN, 0), 0, buf, sizeof buf), 40);
    assert_string_equal(buf, "-170141183460469231731687303715884105728");
    /* a buffer too small */
    assert_int_equal(ferry_decimal128_to_text(dec(0, 12345), 2, buf, 6), -1);
    assert_int_equal(ferry_decimal128_to_text(dec(0, 12345), 2, buf, 7), 6);

    struct ferry_decimal128 v;
    assert_int_equal(parse_dec("+1.50", 5, 2, &v), FERRY_OK);
    assert_true(v.lo == 150 && v.hi == 0);
    assert_int_equal(parse_dec("1.5", 5, 3, &v), FERRY_OK);
    assert_true(v.lo == 1500);
    assert_int_equal(parse_dec(".5", 5, 1, &v), FERRY_OK);
    assert_true(v.lo == 5);
    assert_int_equal(parse_dec("7.", 5, 0, &v), FERRY_OK);
    assert_true(v.lo == 7);
    assert_int_equal(parse_dec("1.5e3", 5, 0, &v), FERRY_OK);
    assert_true(v.lo == 1500);
    assert_int_equal(parse_dec("-25E-3", 5, 3, &v), FERRY_OK);
    assert_true(v.hi == -1 && v.lo == (uint64_t)-25);
    assert_int_equal(parse_dec("1.000000000000000000000000000000000000000000000", 5, 2, &v),
                     FERRY_OK);
    assert_true(v.lo == 100);
    assert_int_equal(parse_dec("000000000000000000000000000000000000000000012.5", 3, 1, &v),
                     FERRY_OK);
    assert_true(v.lo == 125);
    assert_int_equal(parse_dec("-0.00", 5, 2, &v), FERRY_OK);
    assert_true(v.lo == 0 && v.hi == 0);
    /* precision and scale are checked, never rounded */
    assert_int_equal(parse_dec("1.005", 10, 2, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("100000", 5, 0, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("99999", 5, 0, &v), FERRY_OK);
    assert_int_equal(parse_dec("1000.0", 5, 2, &v), FERRY_EINVAL); /* 100000 unscaled */
    assert_int_equal(parse_dec("999.99", 5, 2, &v), FERRY_OK);
    assert_int_equal(parse_dec("12345", 5, -2, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("12300", 5, -2, &v), FERRY_OK);
    assert_true(v.lo == 123);
    assert_int_equal(parse_dec("100000000000000000000000000000000000000", 38, 0, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("1e38", 38, 0, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("1e99999", 38, 0, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("1e999999999", 38, 0, &v), FERRY_EINVAL);
    const char *bad[] = {"",   "-",  "+",   ".",        "abc", "1.2.3", "1e",  "1e+",
                         "1 ", " 1", "NaN", "Infinity", "1,5", "--1",   "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse_dec(bad[i], 10, 2, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("1", 39, 0, &v), FERRY_EINVAL);
    assert_int_equal(parse_dec("1", 5, 6, &v), FERRY_EINVAL);
    /* only n bytes are read */
    assert_int_equal(ferry_decimal128_from_text("12.34junk", 5, 4, 2, &v), FERRY_OK);
    assert_true(v.lo == 1234);
}

static void check_date(int32_t days, const char *text)
{
    char buf[64];
    assert_int_equal(ferry_date32_to_text(days, buf, sizeof buf), 10);
    assert_string_equal(buf, text);
    int32_t back;
    assert_int_equal(ferry_date32_from_text(text, strlen(text), &back), FERRY_OK);
    assert_int_equal(back, days);
}

static void test_date_text(void **state)
{
    (void)state;
    check_date(0, "1970-01-01");
    check_date(-1, "1969-12-31");
    check_date(19782, "2024-02-29");
    check_date(-719162, "0001-01-01");
    check_date(2932896, "9999-12-31");
    check_date(-25509, "1900-02-28");
    check_date(-25508, "1900-03-01");
    check_date(11016, "2000-02-29");
    /* every day of four centuries round-trips and is consecutive */
    char buf[16], prev[16] = "";
    for (int32_t d = -146097 * 2; d < 146097 * 2; d += 1) {
        int32_t back;
        assert_int_equal(ferry_date32_to_text(d, buf, sizeof buf), 10);
        assert_int_equal(ferry_date32_from_text(buf, 10, &back), FERRY_OK);
        assert_int_equal(back, d);
        assert_true(strcmp(prev, buf) < 0);
        memcpy(prev, buf, sizeof buf);
    }
    assert_int_equal(ferry_date32_to_text(-719163, buf, sizeof buf), -1);
    assert_int_equal(ferry_date32_to_text(2932897, buf, sizeof buf), -1);
    assert_int_equal(ferry_date32_to_text(0, buf, 10), -1);
    int32_t d;
    const char *bad[] = {"2023-02-29", "1900-02-29",  "2024-13-01", "2024-00-10",
                         "2024-01-32", "0000-01-01",  "2024-1-01",  "2024/01/01",
                         "24-01-01",   "2024-01-01T", "",           "2024-04-31"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ferry_date32_from_text(bad[i], strlen(bad[i]), &d), FERRY_EINVAL);
}

static void check_time(int64_t us, const char *text)
{
    char buf[64];
    assert_int_equal(ferry_time64_to_text(us, buf, sizeof buf), (int)strlen(text));
    assert_string_equal(buf, text);
    int64_t back;
    assert_int_equal(ferry_time64_from_text(text, strlen(text), &back), FERRY_OK);
    assert_true(back == us);
}

static void test_time_text(void **state)
{
    (void)state;
    check_time(0, "00:00:00");
    check_time(INT64_C(49500123456), "13:45:00.123456");
    check_time(500000, "00:00:00.5");
    check_time(10, "00:00:00.00001");
    check_time(INT64_C(86399999999), "23:59:59.999999");
    check_time(INT64_C(86400000000), "24:00:00");
    int64_t t;
    assert_int_equal(ferry_time64_from_text("13:45", 5, &t), FERRY_OK);
    assert_true(t == INT64_C(49500000000));
    assert_int_equal(ferry_time64_from_text("13:45:00,5", 10, &t), FERRY_OK);
    assert_true(t == INT64_C(49500500000));
    const char *bad[] = {"24:00:01", "25:00",     "12:60", "12:00:00.1234567", "12:00:00.", "12",
                         "1:00",     "12:00:00Z", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ferry_time64_from_text(bad[i], strlen(bad[i]), &t), FERRY_EINVAL);
    char buf[64];
    assert_int_equal(ferry_time64_to_text(-1, buf, sizeof buf), -1);
    assert_int_equal(ferry_time64_to_text(INT64_C(86400000001), buf, sizeof buf), -1);
}

static void check_ts(int64_t us, bool tz, const char *text)
{
    char buf[64];
    assert_int_equal(ferry_timestamp_to_text(us, tz, buf, sizeof buf), (int)strlen(text));
    assert_string_equal(buf, text);
    int64_t back;
    assert_int_equal(ferry_timestamp_from_text(text, strlen(text), &back), FERRY_OK);
    assert_true(back == us);
}

static int64_t parse_ts(const char *text)
{
    int64_t v = 0;
    assert_int_equal(ferry_timestamp_from_text(text, strlen(text), &v), FERRY_OK);
    return v;
}

static void test_timestamp_text(void **state)
{
    (void)state;
    check_ts(0, false, "1970-01-01T00:00:00");
    check_ts(0, true, "1970-01-01T00:00:00+00");
    check_ts(-1, false, "1969-12-31T23:59:59.999999");
    check_ts(INT64_C(-14182939500000), true, "1969-07-20T20:17:40.5+00");
    check_ts(INT64_C(-2203847999999999), false, "1900-03-01T12:00:00.000001");
    check_ts(INT64_C(-62135596800000000), false, "0001-01-01T00:00:00");
    check_ts(INT64_C(253402300799999999), true, "9999-12-31T23:59:59.999999+00");
    check_ts(INT64_C(1706688900000000), false, "2024-01-31T08:15:00");

    /* separators, fractions and offsets, all converted to UTC */
    const int64_t t = INT64_C(1706688900000000); /* 2024-01-31T08:15:00Z */
    assert_true(parse_ts("2024-01-31 08:15:00") == t);
    assert_true(parse_ts("2024-01-31t08:15") == t);
    assert_true(parse_ts("2024-01-31T08:15:00Z") == t);
    assert_true(parse_ts("2024-01-31T08:15:00.000000z") == t);
    assert_true(parse_ts("2024-01-31 13:45:00+05:30") == t);
    assert_true(parse_ts("2024-01-31 13:45:00+0530") == t);
    assert_true(parse_ts("2024-01-31T13:15:00+05") == t);
    assert_true(parse_ts("2024-01-31T00:15:00-08:00") == t);
    assert_true(parse_ts("2024-01-30T23:15:00-09") == t);
    assert_true(parse_ts("2024-01-31T08:15:00.25+00") == t + 250000);
    assert_true(parse_ts("1969-12-31T23:59:59.9-01:00") == INT64_C(3600000000) - 100000);
    assert_true(parse_ts("2024-01-31") == INT64_C(1706659200000000));
    assert_true(parse_ts("2024-01-31T24:00:00") ==
                INT64_C(1706659200000000) + INT64_C(86400000000));
    /* before 1970 with an offset that crosses midnight and the year */
    assert_true(parse_ts("1970-01-01T02:00:00+05:30") == INT64_C(-12600000000));

    int64_t v;
    const char *bad[] = {"2024-01-31T08:15:00.1234567",
                         "2024-01-31T08:15:00+",
                         "2024-01-31T08:15:00+05:",
                         "2024-01-31T08:15:00+5",
                         "2024-01-31T08:15:00+05:3",
                         "2024-01-31T08:15:00+19",
                         "2024-01-31T08:15:00 +05",
                         "2024-01-31X08:15:00",
                         "2024-01-31T",
                         "2024-01-31T8:15",
                         "2024-02-30T00:00:00",
                         "2024-01-31T08:15:00Zjunk",
                         "10000-01-01T00:00:00",
                         "2024-01-31T24:00:01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ferry_timestamp_from_text(bad[i], strlen(bad[i]), &v), FERRY_EINVAL);

    char buf[64];
    assert_int_equal(ferry_timestamp_to_text(INT64_C(-62135596800000001), false, buf, 64), -1);
    assert_int_equal(ferry_timestamp_to_text(INT64_C(253402300800000000), false, buf, 64), -1);
    assert_int_equal(ferry_timestamp_to_text(INT64_MIN, true, buf, 64), -1);
    assert_int_equal(ferry_timestamp_to_text(0, true, buf, 29), -1);
}

static void test_uuid_text(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(ferry_uuid_to_text(UUID1, buf, sizeof buf), 36);
    assert_string_equal(buf, "123e4567-e89b-12d3-a456-426614174000");
    uint8_t u[16];
    const char *good[] = {
        "123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
        "123e4567e89b12d3a456426614174000", "{123e4567-e89b-12d3-a456-426614174000}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        memset(u, 0, sizeof u);
        assert_int_equal(ferry_uuid_from_text(good[i], strlen(good[i]), u), FERRY_OK);
        assert_memory_equal(u, UUID1, 16);
    }
    assert_int_equal(ferry_uuid_to_text(UUID2, buf, sizeof buf), 36);
    assert_string_equal(buf, "ff000102-0304-0506-0708-090a0b0c0dee");
    assert_int_equal(ferry_uuid_from_text(buf, 36, u), FERRY_OK);
    assert_memory_equal(u, UUID2, 16);
    const char *bad[] = {"123e4567-e89b-12d3-a456-42661417400",
                         "123e4567-e89b-12d3-a456_426614174000",
                         "123e4567-e89b-12d3-a456-42661417400g",
                         "123e4567e89b12d3a45642661417400",
                         "",
                         "{123e4567e89b12d3a456426614174000}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ferry_uuid_from_text(bad[i], strlen(bad[i]), u), FERRY_EINVAL);
    assert_int_equal(ferry_uuid_to_text(UUID1, buf, 36), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_names),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_every_type_roundtrip),
        cmocka_unit_test(test_no_null_no_bitmap),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_copy_oom),
        cmocka_unit_test(test_refcount_threads),
        cmocka_unit_test(test_set_position),
        cmocka_unit_test(test_decimal_text),
        cmocka_unit_test(test_date_text),
        cmocka_unit_test(test_time_text),
        cmocka_unit_test(test_timestamp_text),
        cmocka_unit_test(test_uuid_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
