/* tests/unit/test_policy.c - ferry_policy_check (runner/policy.c): every refusal, with a
 * message that names the resource and says what to do instead, and every combination of
 * read mode, write mode, key and sink capabilities checked against the rules of DESIGN §2
 * (Policy) written out independently below. */
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/pipeline.h"
#include "runner/runner.h"

static const struct ferry_source_vtable src_plain = {.abi = FERRY_CONNECTOR_ABI, .name = "files"};
static const struct ferry_source_vtable src_incremental = {
    .abi = FERRY_CONNECTOR_ABI, .name = "sqlite", .supports_incremental = true};
static const struct ferry_source_vtable src_cdc = {.abi = FERRY_CONNECTOR_ABI,
                                                   .name = "postgres",
                                                   .supports_incremental = true,
                                                   .supports_cdc = true};

#define ALL_MODES                                                                                  \
    ((1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) | (1u << FERRY_WRITE_UPSERT) |       \
     (1u << FERRY_WRITE_MERGE))

static struct ferry_schema *schema_with_key(bool key)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "note", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    if (key) s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

struct combo {
    const struct ferry_source_vtable *src;
    enum ferry_read_mode mode;
    enum ferry_write_mode write;
    bool key;
    struct ferry_sink_caps caps;
};

static int check(const struct combo *c, struct ferry_error *err)
{
    struct ferry_pipeline_spec p;
    memset(&p, 0, sizeof p);
    p.source_type = (char *)c->src->name;
    p.source_vt = c->src;
    p.sink_type = (char *)"warehouse";
    p.write = c->write;
    struct ferry_resource_spec r;
    memset(&r, 0, sizeof r);
    r.table = (char *)"public.orders";
    r.mode = c->mode;
    struct ferry_schema *s = schema_with_key(c->key);
    ferry_error_clear(err);
    int rc = ferry_policy_check(&p, &r, s, &c->caps, err);
    ferry_schema_unref(s);
    return rc;
}

static struct ferry_sink_caps caps_all(void)
{
    return (struct ferry_sink_caps){
        .write_modes = ALL_MODES, .atomic_replace = true, .deletes = true};
}

static void refused(const struct combo *c, const char *message)
{
    struct ferry_error err;
    int rc = check(c, &err);
    if (rc != FERRY_EPOLICY)
        fail_msg("rc %d (%s), expected a refusal: %s", rc, err.message, message);
    if (strcmp(err.message, message) != 0)
        fail_msg("message \"%s\"\n   expected \"%s\"", err.message, message);
    assert_string_equal(err.origin, "policy");
}

static void test_write_mode_the_sink_cannot_do(void **state)
{
    (void)state;
    struct combo c = {&src_cdc, FERRY_READ_FULL, FERRY_WRITE_UPSERT, true, caps_all()};
    c.caps.write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE);
    refused(&c, "resource public.orders: the warehouse sink cannot write with `write: upsert`; "
                "use one it supports: append, replace");
    c.write = FERRY_WRITE_MERGE;
    c.caps.write_modes = 1u << FERRY_WRITE_APPEND;
    refused(&c, "resource public.orders: the warehouse sink cannot write with `write: merge`; use "
                "one it supports: append");
    c.write = FERRY_WRITE_APPEND;
    c.caps.write_modes = (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    refused(&c, "resource public.orders: the warehouse sink cannot write with `write: append`; "
                "use one it supports: upsert, merge");
    c.caps.write_modes = 0;
    refused(&c, "resource public.orders: the warehouse sink cannot write with `write: append`; "
                "use one it supports: none");
}

static void test_upsert_and_merge_need_a_key(void **state)
{
    (void)state;
    struct combo c = {&src_cdc, FERRY_READ_FULL, FERRY_WRITE_UPSERT, false, caps_all()};
    refused(&c, "resource public.orders has no primary key, and `write: upsert` needs one to match "
                "rows (declare `key: [column]` on the resource)");
    c.write = FERRY_WRITE_MERGE;
    c.mode = FERRY_READ_CDC;
    refused(&c, "resource public.orders has no primary key, and `write: merge` needs one to match "
                "rows (declare `key: [column]` on the resource)");
    c.key = true;
    struct ferry_error err;
    assert_int_equal(check(&c, &err), FERRY_OK);
}

static void test_replace_needs_an_atomic_swap(void **state)
{
    (void)state;
    struct combo c = {&src_plain, FERRY_READ_FULL, FERRY_WRITE_REPLACE, false, caps_all()};
    c.caps.atomic_replace = false;
    refused(&c, "resource public.orders: the warehouse sink cannot swap a table atomically, so "
                "`write: replace` could leave it empty or half-loaded; use `write: upsert` (with "
                "a key) or `write: append`");
    c.caps.atomic_replace = true;
    struct ferry_error err;
    assert_int_equal(check(&c, &err), FERRY_OK);
}

static void test_replace_needs_a_full_read(void **state)
{
    (void)state;
    struct combo c = {&src_cdc, FERRY_READ_INCREMENTAL, FERRY_WRITE_REPLACE, true, caps_all()};
    refused(&c,
            "resource public.orders: `write: replace` needs `mode: full` (with mode incremental "
            "the table would be replaced by only the rows read this run)");
    c.mode = FERRY_READ_CDC;
    refused(&c, "resource public.orders: `write: replace` needs `mode: full` (with mode cdc the "
                "table would be replaced by only the rows read this run)");
}

static void test_merge_needs_deletes(void **state)
{
    (void)state;
    struct combo c = {&src_cdc, FERRY_READ_CDC, FERRY_WRITE_MERGE, true, caps_all()};
    c.caps.deletes = false;
    refused(&c,
            "resource public.orders: the warehouse sink cannot apply deletes, so `write: merge` "
            "is not possible; use `write: append` to keep the changes as a log");
    c.mode = FERRY_READ_FULL;
    refused(&c,
            "resource public.orders: the warehouse sink cannot apply deletes, so `write: merge` "
            "is not possible; use `write: upsert`");
}

static void test_cdc_with_upsert_would_drop_deletes(void **state)
{
    (void)state;
    struct combo c = {&src_cdc, FERRY_READ_CDC, FERRY_WRITE_UPSERT, true, caps_all()};
    refused(&c, "resource public.orders: `mode: cdc` with `write: upsert` would drop deletes; use "
                "`write: merge` (or append for a change log)");
}

static void test_read_modes_the_source_cannot_do(void **state)
{
    (void)state;
    struct combo c = {&src_plain, FERRY_READ_INCREMENTAL, FERRY_WRITE_APPEND, true, caps_all()};
    refused(&c, "resource public.orders: the files source cannot read incrementally; use "
                "`mode: full`");
    c.mode = FERRY_READ_CDC;
    refused(&c, "resource public.orders: the files source has no change data capture; use "
                "`mode: full`");
    c.src = &src_incremental;
    refused(&c, "resource public.orders: the sqlite source has no change data capture; use "
                "`mode: incremental` (with a cursor) or `mode: full`");
    c.mode = FERRY_READ_INCREMENTAL;
    struct ferry_error err;
    assert_int_equal(check(&c, &err), FERRY_OK);
}

static void test_accepted_combinations(void **state)
{
    (void)state;
    const struct combo ok[] = {
        {&src_plain,
         FERRY_READ_FULL,
         FERRY_WRITE_APPEND,
         false,
         {.write_modes = 1u << FERRY_WRITE_APPEND}},
        {&src_plain, FERRY_READ_FULL, FERRY_WRITE_REPLACE, false, caps_all()},
        {&src_plain,
         FERRY_READ_FULL,
         FERRY_WRITE_UPSERT,
         true,
         {.write_modes = 1u << FERRY_WRITE_UPSERT}},
        {&src_plain, FERRY_READ_FULL, FERRY_WRITE_MERGE, true, caps_all()},
        {&src_incremental, FERRY_READ_INCREMENTAL, FERRY_WRITE_APPEND, false, caps_all()},
        {&src_incremental, FERRY_READ_INCREMENTAL, FERRY_WRITE_UPSERT, true, caps_all()},
        {&src_incremental, FERRY_READ_INCREMENTAL, FERRY_WRITE_MERGE, true, caps_all()},
        {&src_cdc,
         FERRY_READ_CDC,
         FERRY_WRITE_APPEND,
         false,
         {.write_modes = 1u << FERRY_WRITE_APPEND}},
        {&src_cdc, FERRY_READ_CDC, FERRY_WRITE_MERGE, true, caps_all()},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct ferry_error err;
        int rc = check(&ok[i], &err);
        if (rc != FERRY_OK) fail_msg("combination %zu refused: %s", i, err.message);
    }
}

/* The rules, written out on their own, against every combination. */
static bool allowed(const struct combo *c)
{
    if (!(c->caps.write_modes & (1u << c->write))) return false;
    if (c->mode == FERRY_READ_INCREMENTAL && !c->src->supports_incremental) return false;
    if (c->mode == FERRY_READ_CDC && !c->src->supports_cdc) return false;
    bool keyed = c->write == FERRY_WRITE_UPSERT || c->write == FERRY_WRITE_MERGE;
    if (keyed && !c->key) return false;
    if (c->write == FERRY_WRITE_REPLACE && (!c->caps.atomic_replace || c->mode != FERRY_READ_FULL))
        return false;
    if (c->write == FERRY_WRITE_MERGE && !c->caps.deletes) return false;
    if (c->mode == FERRY_READ_CDC && c->write == FERRY_WRITE_UPSERT) return false;
    return true;
}

static void test_every_combination(void **state)
{
    (void)state;
    const struct ferry_source_vtable *srcs[] = {&src_plain, &src_incremental, &src_cdc};
    int accepted = 0, refusals = 0;
    for (int si = 0; si < 3; si++)
        for (int mode = FERRY_READ_FULL; mode <= FERRY_READ_CDC; mode++)
            for (int w = FERRY_WRITE_APPEND; w <= FERRY_WRITE_MERGE; w++)
                for (int bits = 0; bits < 16 * 2 * 2 * 2; bits++) {
                    struct combo c = {srcs[si],
                                      (enum ferry_read_mode)mode,
                                      (enum ferry_write_mode)w,
                                      bits & 16,
                                      {.write_modes = (unsigned)bits & 15u,
                                       .atomic_replace = bits & 32,
                                       .deletes = bits & 64}};
                    struct ferry_error err;
                    int rc = check(&c, &err);
                    bool want = allowed(&c);
                    if (want != (rc == FERRY_OK))
                        fail_msg("source %s, mode %s, write %s, key %d, modes %u, atomic %d, "
                                 "deletes %d: rc %d (%s)",
                                 c.src->name, ferry_read_mode_name(c.mode),
                                 ferry_write_mode_name(c.write), c.key, c.caps.write_modes,
                                 c.caps.atomic_replace, c.caps.deletes, rc, err.message);
                    if (rc == FERRY_OK) {
                        accepted++;
                        continue;
                    }
                    refusals++;
                    assert_int_equal(rc, FERRY_EPOLICY);
                    /* every refusal names the resource and says what to do instead */
                    assert_non_null(strstr(err.message, "public.orders"));
                    assert_true(strstr(err.message, "; use ") != NULL ||
                                strstr(err.message, "declare `key") != NULL ||
                                strstr(err.message, "needs `mode: full`") != NULL);
                }
    assert_true(accepted > 0);
    assert_true(refusals > accepted);
}

/* soft_delete: only cdc + merge into a sink that can mark, onto a nullable non-key column;
 * then merge is allowed even into a sink that cannot delete. */
static int check_soft(enum ferry_read_mode mode, enum ferry_write_mode write,
                      struct ferry_sink_caps caps, const char *column, struct ferry_error *err)
{
    struct ferry_pipeline_spec p;
    memset(&p, 0, sizeof p);
    p.source_type = (char *)"postgres";
    p.source_vt = &src_cdc;
    p.sink_type = (char *)"warehouse";
    p.write = write;
    struct ferry_resource_spec r;
    memset(&r, 0, sizeof r);
    r.table = (char *)"public.orders";
    r.mode = mode;
    struct ferry_read_context run = {.soft_delete = column};
    r.run = &run;
    struct ferry_schema *s = schema_with_key(true);
    assert_int_equal(ferry_schema_add_field(s, "deleted_at", FERRY_TYPE_TIMESTAMPTZ_US, true, NULL),
                     FERRY_OK);
    ferry_error_clear(err);
    int rc = ferry_policy_check(&p, &r, s, &caps, err);
    ferry_schema_unref(s);
    return rc;
}

static void test_soft_delete(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_sink_caps caps = caps_all();
    caps.soft_deletes = true;
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, "deleted_at", &err),
                     FERRY_OK);
    caps.deletes = false; /* marks instead of deleting: no delete reaches the sink */
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, "deleted_at", &err),
                     FERRY_OK);
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, NULL, &err),
                     FERRY_EPOLICY);
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_APPEND, caps, "deleted_at", &err),
                     FERRY_EPOLICY);
    assert_string_equal(err.message, "resource public.orders: `soft_delete` needs `mode: cdc` "
                                     "with `write: merge` (here mode cdc, write append)");
    assert_int_equal(check_soft(FERRY_READ_FULL, FERRY_WRITE_MERGE, caps, "deleted_at", &err),
                     FERRY_EPOLICY);
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, "id", &err), FERRY_EPOLICY);
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, "nope", &err),
                     FERRY_EPOLICY);
    caps.soft_deletes = false;
    assert_int_equal(check_soft(FERRY_READ_CDC, FERRY_WRITE_MERGE, caps, "deleted_at", &err),
                     FERRY_EPOLICY);
    assert_string_equal(err.message, "resource public.orders: the warehouse sink cannot mark "
                                     "deleted rows (`soft_delete`); use `write: append` to keep "
                                     "the changes as a log");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_mode_the_sink_cannot_do),
        cmocka_unit_test(test_upsert_and_merge_need_a_key),
        cmocka_unit_test(test_replace_needs_an_atomic_swap),
        cmocka_unit_test(test_replace_needs_a_full_read),
        cmocka_unit_test(test_merge_needs_deletes),
        cmocka_unit_test(test_cdc_with_upsert_would_drop_deletes),
        cmocka_unit_test(test_read_modes_the_source_cannot_do),
        cmocka_unit_test(test_accepted_combinations),
        cmocka_unit_test(test_every_combination),
        cmocka_unit_test(test_soft_delete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
