/* tests/unit/test_arrow.c - the Arrow C Data Interface export, checked by a consumer that
 * reads only the ArrowSchema / ArrowArray structs (format strings, metadata, buffers,
 * offsets, validity), as a foreign library would. Leaks and use-after-release are left to
 * ASan (the asan build runs this file too). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "testrows.h"
#include "ferry/arrow.h"
#include "ferry/core.h"

/* ---- the consumer: knows the spec, not ferry ------------------------------------- */

static int32_t rd_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Extension name from the binary metadata, or NULL. */
static const char *extension_of(const char *metadata, char *buf, size_t len)
{
    if (metadata == NULL) return NULL;
    const char *p = metadata;
    int32_t n = rd_i32(p);
    p += 4;
    for (int32_t i = 0; i < n; i++) {
        int32_t kl = rd_i32(p);
        const char *k = p + 4;
        p += 4 + kl;
        int32_t vl = rd_i32(p);
        const char *v = p + 4;
        p += 4 + vl;
        if (kl == 20 && memcmp(k, "ARROW:extension:name", 20) == 0) {
            snprintf(buf, len, "%.*s", (int)vl, v);
            return buf;
        }
    }
    return NULL;
}

static int expected_buffers(const char *format)
{
    return strcmp(format, "u") == 0 || strcmp(format, "z") == 0 ? 3 : 2;
}

static void read_cell(const struct ArrowSchema *s, const struct ArrowArray *a, int64_t row,
                      struct tr_cell *out)
{
    memset(out, 0, sizeof *out);
    int64_t i = a->offset + row;
    const uint8_t *validity = a->buffers[0];
    out->null = validity != NULL && !((validity[i >> 3] >> (i & 7)) & 1);
    if (out->null) return;
    const char *f = s->format;
    const uint8_t *v = a->buffers[1];
    if (strcmp(f, "b") == 0) {
        out->b = (v[i >> 3] >> (i & 7)) & 1;
    } else if (strcmp(f, "c") == 0) {
        out->i = ((const int8_t *)v)[i];
    } else if (strcmp(f, "s") == 0) {
        int16_t x;
        memcpy(&x, v + 2 * i, 2);
        out->i = x;
    } else if (strcmp(f, "i") == 0 || strcmp(f, "tdD") == 0) {
        out->i = rd_i32(v + 4 * i);
    } else if (strcmp(f, "l") == 0 || strcmp(f, "ttu") == 0 || strncmp(f, "tsu:", 4) == 0) {
        memcpy(&out->i, v + 8 * i, 8);
    } else if (strcmp(f, "f") == 0) {
        float x;
        memcpy(&x, v + 4 * i, 4);
        out->f = x;
    } else if (strcmp(f, "g") == 0) {
        memcpy(&out->f, v + 8 * i, 8);
    } else if (strncmp(f, "d:", 2) == 0 || strcmp(f, "w:16") == 0) {
        memcpy(out->fixed, v + 16 * i, 16);
    } else if (strcmp(f, "u") == 0 || strcmp(f, "z") == 0) {
        int32_t start = rd_i32(v + 4 * i), end = rd_i32(v + 4 * (i + 1));
        assert_true(end >= start);
        out->len = (size_t)(end - start);
        assert_true(out->len <= sizeof out->bytes);
        memcpy(out->bytes, (const char *)a->buffers[2] + start, out->len);
    } else {
        fail_msg("consumer does not know format %s", f);
    }
}

static void assert_cell_equal(const struct tr_cell *got, const struct tr_cell *want,
                              const char *col, int64_t row)
{
    if (got->null != want->null)
        fail_msg("column %s row %lld: null %d, want %d", col, (long long)row, got->null,
                 want->null);
    if (got->null) return;
    if (got->b != want->b || got->i != want->i || got->f != want->f ||
        memcmp(got->fixed, want->fixed, 16) != 0 || got->len != want->len ||
        memcmp(got->bytes, want->bytes, got->len) != 0)
        fail_msg("column %s row %lld: value differs (i %lld/%lld, f %g/%g, len %zu/%zu)", col,
                 (long long)row, (long long)got->i, (long long)want->i, got->f, want->f,
                 got->len, want->len);
}

/* Reads every cell of an exported batch whose rows are first..first+length-1. */
static void check_rows(const struct ArrowSchema *s, const struct ArrowArray *a, int64_t first)
{
    assert_string_equal(s->format, "+s");
    assert_int_equal(a->n_children, TR_NCOLS);
    assert_int_equal(s->n_children, TR_NCOLS);
    assert_int_equal(a->offset, 0);
    assert_int_equal(a->null_count, 0);
    assert_int_equal(a->n_buffers, 1);
    assert_null(a->buffers[0]);
    for (int c = 0; c < TR_NCOLS; c++) {
        const struct ArrowSchema *cs = s->children[c];
        const struct ArrowArray *ca = a->children[c];
        assert_int_equal(ca->length, a->length);
        assert_int_equal(ca->n_buffers, expected_buffers(cs->format));
        assert_int_equal(ca->n_children, 0);
        assert_null(ca->dictionary);
        assert_non_null(ca->buffers[1]);
        int64_t nulls = 0;
        for (int64_t r = 0; r < a->length; r++) {
            struct tr_cell got, want;
            read_cell(cs, ca, r, &got);
            tr_cell(first + r, c, &want);
            assert_cell_equal(&got, &want, cs->name, first + r);
            nulls += want.null;
        }
        assert_int_equal(ca->null_count, nulls);
        if (nulls > 0) assert_non_null(ca->buffers[0]);
    }
}

static int refcount(struct ferry_batch *b)
{
    return atomic_load(&b->refcount);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_schema_formats(void **state)
{
    (void)state;
    static const char *const formats[TR_NCOLS] = {
        "l", "b", "c", "s", "i", "l", "f", "g", "d:20,3", "u", "u", "z", "tdD", "ttu", "tsu:",
        "tsu:UTC", "w:16", "u"};
    static const char *const exts[TR_NCOLS] = {
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "ferry.decimal_text", NULL, NULL,
        NULL, NULL, NULL, NULL, "arrow.uuid", "arrow.json"};
    struct ferry_schema *fs = tr_schema();
    assert_non_null(fs);
    struct ArrowSchema s;
    struct ferry_error err;
    assert_int_equal(ferry_schema_export(fs, &s, &err), FERRY_OK);
    assert_string_equal(s.format, "+s");
    assert_int_equal(s.flags, 0);
    assert_null(s.metadata);
    assert_null(s.dictionary);
    assert_int_equal(s.n_children, TR_NCOLS);
    for (int c = 0; c < TR_NCOLS; c++) {
        const struct ArrowSchema *k = s.children[c];
        char ext[64];
        assert_string_equal(k->format, formats[c]);
        assert_string_equal(k->name, tr_names[c]);
        assert_int_equal(k->flags, c == 0 ? 0 : ARROW_FLAG_NULLABLE);
        assert_int_equal(k->n_children, 0);
        assert_non_null(k->release);
        const char *got = extension_of(k->metadata, ext, sizeof ext);
        if (exts[c] == NULL)
            assert_null(got);
        else
            assert_string_equal(got, exts[c]);
    }
    /* The extension metadata also carries an (empty) ARROW:extension:metadata entry. */
    const char *m = s.children[16]->metadata;
    assert_int_equal(rd_i32(m), 2);
    s.release(&s);
    assert_null(s.release);
    ferry_schema_unref(fs);
}

static void test_values_full_batch(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = tr_batch(fs, 0, 100);
    assert_non_null(b);
    struct ArrowSchema s;
    struct ArrowArray a;
    assert_int_equal(ferry_schema_export(fs, &s, NULL), FERRY_OK);
    assert_int_equal(ferry_batch_export(b, &a, NULL), FERRY_OK);
    assert_int_equal(a.length, 100);
    check_rows(&s, &a, 0);
    /* Zero copy: the consumer reads the batch's own memory. */
    for (int c = 0; c < TR_NCOLS; c++) {
        const struct ferry_column *col = &b->columns[c];
        if (ferry_type_is_varwidth(col->type)) {
            assert_ptr_equal(a.children[c]->buffers[1], col->offsets);
            assert_ptr_equal(a.children[c]->buffers[2], col->data);
        } else {
            assert_ptr_equal(a.children[c]->buffers[1], col->values);
        }
    }
    a.release(&a);
    assert_null(a.release);
    s.release(&s);
    assert_int_equal(refcount(b), 1);
    ferry_batch_unref(b);
    ferry_schema_unref(fs);
}

/* A slice (and a slice of a slice) is exported with the row offset on each child. */
static void test_values_slice(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = tr_batch(fs, 1000, 90);
    assert_non_null(b);
    struct ArrowSchema s;
    assert_int_equal(ferry_schema_export(fs, &s, NULL), FERRY_OK);
    for (int64_t off = 0; off < 12; off++) {
        struct ferry_batch *sl = ferry_batch_slice(b, off + 13, 50);
        assert_non_null(sl);
        struct ferry_batch *sl2 = ferry_batch_slice(sl, 5, 21);
        assert_non_null(sl2);
        ferry_batch_unref(sl); /* sl2 keeps the buffers alive on its own */
        struct ArrowArray a;
        assert_int_equal(ferry_batch_export(sl2, &a, NULL), FERRY_OK);
        assert_int_equal(a.length, 21);
        for (int c = 0; c < TR_NCOLS; c++) assert_int_equal(a.children[c]->offset, off + 18);
        check_rows(&s, &a, 1000 + off + 18);
        a.release(&a);
        ferry_batch_unref(sl2);
    }
    s.release(&s);
    assert_int_equal(refcount(b), 1);
    ferry_batch_unref(b);
    ferry_schema_unref(fs);
}

static void test_reference_held_until_release(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = tr_batch(fs, 0, 40);
    struct ArrowSchema s;
    struct ArrowArray a;
    assert_int_equal(ferry_schema_export(fs, &s, NULL), FERRY_OK);
    assert_int_equal(ferry_batch_export(b, &a, NULL), FERRY_OK);
    assert_true(refcount(b) > 1);
    /* The producer drops its own reference: the export alone keeps the rows readable. */
    ferry_batch_unref(b);
    check_rows(&s, &a, 0);
    a.release(&a); /* frees the batch: ASan would report a leak otherwise */
    s.release(&s);
    ferry_schema_unref(fs);
}

/* The spec lets a consumer move children out and release them on their own schedule. */
static void test_move_children_out(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = tr_batch(fs, 500, 64);
    struct ArrowSchema s;
    struct ArrowArray a;
    assert_int_equal(ferry_schema_export(fs, &s, NULL), FERRY_OK);
    assert_int_equal(ferry_batch_export(b, &a, NULL), FERRY_OK);
    ferry_batch_unref(b);
    ferry_schema_unref(fs);

    /* Move columns 10 (utf8) and 16 (uuid) out, as the spec describes: copy the struct,
     * mark the original released. */
    struct ArrowSchema ks[2];
    struct ArrowArray ka[2];
    const int moved[2] = {10, 16};
    for (int i = 0; i < 2; i++) {
        ks[i] = *s.children[moved[i]];
        s.children[moved[i]]->release = NULL;
        ka[i] = *a.children[moved[i]];
        a.children[moved[i]]->release = NULL;
    }
    /* Release one child in place before its parent too. */
    a.children[3]->release(a.children[3]);
    assert_null(a.children[3]->release);
    s.children[3]->release(s.children[3]);

    a.release(&a);
    s.release(&s);
    /* The moved children outlive their parents. */
    for (int i = 0; i < 2; i++) {
        assert_string_equal(ks[i].name, tr_names[moved[i]]);
        for (int64_t r = 0; r < ka[i].length; r++) {
            struct tr_cell got, want;
            read_cell(&ks[i], &ka[i], r, &got);
            tr_cell(500 + r, moved[i], &want);
            assert_cell_equal(&got, &want, ks[i].name, 500 + r);
        }
    }
    char ext[64];
    assert_string_equal(extension_of(ks[1].metadata, ext, sizeof ext), "arrow.uuid");
    ka[0].release(&ka[0]);
    ks[0].release(&ks[0]);
    ka[1].release(&ka[1]); /* the last reference: the batch goes now */
    ks[1].release(&ks[1]);
    assert_null(ka[1].release);
}

/* Every allocation the export makes can fail: ENOMEM, nothing leaked, nothing to release,
 * the batch's reference count untouched. */
static void test_allocation_failures(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = tr_batch(fs, 0, 10);
    int failures = 0;
    for (long k = 0;; k++) {
        struct ArrowSchema s;
        struct ferry_error err;
        ferry_error_clear(&err);
        ferry_mem_fail_after(k);
        int rc = ferry_schema_export(fs, &s, &err);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            s.release(&s);
            break;
        }
        assert_int_equal(rc, FERRY_ENOMEM);
        assert_null(s.release);
        assert_non_null(strstr(err.message, "out of memory"));
        failures++;
    }
    assert_true(failures >= 3);
    failures = 0;
    for (long k = 0;; k++) {
        struct ArrowArray a;
        struct ferry_error err;
        ferry_error_clear(&err);
        ferry_mem_fail_after(k);
        int rc = ferry_batch_export(b, &a, &err);
        ferry_mem_fail_after(-1);
        if (rc == FERRY_OK) {
            a.release(&a);
            break;
        }
        assert_int_equal(rc, FERRY_ENOMEM);
        assert_null(a.release);
        assert_non_null(strstr(err.message, "test.rows"));
        assert_int_equal(refcount(b), 1);
        failures++;
    }
    assert_true(failures >= 3);
    assert_int_equal(refcount(b), 1);
    ferry_batch_unref(b);
    ferry_schema_unref(fs);
}

static void test_empty_batch(void **state)
{
    (void)state;
    struct ferry_schema *fs = tr_schema();
    struct ferry_batch *b = ferry_batch_new(fs, "empty");
    assert_non_null(b);
    struct ArrowSchema s;
    struct ArrowArray a;
    assert_int_equal(ferry_schema_export(fs, &s, NULL), FERRY_OK);
    assert_int_equal(ferry_batch_export(b, &a, NULL), FERRY_OK);
    assert_int_equal(a.length, 0);
    for (int c = 0; c < TR_NCOLS; c++) {
        const struct ArrowArray *k = a.children[c];
        assert_int_equal(k->length, 0);
        assert_int_equal(k->null_count, 0);
        /* Data buffers are never NULL, and an empty var-width array has offsets [0]. */
        for (int64_t j = 1; j < k->n_buffers; j++) assert_non_null(k->buffers[j]);
        if (k->n_buffers == 3) assert_int_equal(rd_i32(k->buffers[1]), 0);
    }
    check_rows(&s, &a, 0);
    a.release(&a);
    s.release(&s);
    ferry_batch_unref(b);
    ferry_schema_unref(fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_formats),
        cmocka_unit_test(test_values_full_batch),
        cmocka_unit_test(test_values_slice),
        cmocka_unit_test(test_reference_held_until_release),
        cmocka_unit_test(test_move_children_out),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_empty_batch),
    };
    return cmocka_run_group_tests_name("arrow", tests, NULL, NULL);
}
