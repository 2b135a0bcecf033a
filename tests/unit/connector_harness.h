/* tests/unit/connector_harness.h - drives connectors through their vtables in unit tests.
 *
 * A source is read into a list of batches with a real row writer whose emit collects them;
 * a sink gets batches with their digest set, as the pipeline would. Include after unit.h. */
#ifndef FERRY_TESTS_CONNECTOR_HARNESS_H
#define FERRY_TESTS_CONNECTOR_HARNESS_H

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "batch/builder.h"
#include "checkpoint/position.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"

struct collect {
    struct ferry_batch **b;
    int n, cap;
};

static int collect_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct collect *c = ctx;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->b = realloc(c->b, sizeof *c->b * (size_t)c->cap);
    }
    c->b[c->n++] = b;
    return FERRY_OK;
}

static void collect_free(struct collect *c)
{
    for (int i = 0; i < c->n; i++)
        ferry_batch_unref(c->b[i]);
    free(c->b);
    memset(c, 0, sizeof *c);
}

static int64_t collect_rows(const struct collect *c)
{
    int64_t n = 0;
    for (int i = 0; i < c->n; i++)
        n += c->b[i]->length;
    return n;
}

/* The source section or any map, parsed from YAML; free with ferry_cfg_free. */
static struct ferry_cfg *cfg_of(const char *yaml)
{
    struct ferry_cfg *root = NULL;
    struct ferry_error err;
    int rc = ferry_cfg_parse_string(yaml, strlen(yaml), "test", &root, &err);
    if (rc != FERRY_OK) fprintf(stderr, "config: %s\n", err.message);
    assert_int_equal(rc, FERRY_OK);
    return root;
}

static struct ferry_resource_spec spec_of(const char *table, enum ferry_read_mode mode)
{
    struct ferry_resource_spec s;
    memset(&s, 0, sizeof s);
    s.table = (char *)table;
    s.mode = mode;
    return s;
}

/* Reads one shard (then flushes it as done, like the pipeline), from the stored resume
 * text decoded with the checkpoint codec as the flow does (a done shard is skipped). */
static int read_shard(const struct ferry_source_vtable *vt, void *ctx,
                      const struct ferry_resource_spec *spec, struct ferry_schema *schema,
                      const char *plan, int shard, const char *resume, int64_t batch_rows,
                      struct collect *out, struct ferry_error *err)
{
    struct ferry_rw_limits lim = {
        .rows = batch_rows, .bytes = INT64_C(1) << 40, .max_value_bytes = 0};
    struct ferry_row_writer *rw = ferry__rw_new(schema, spec->table, lim, collect_emit, out);
    assert_non_null(rw);
    ferry_rw_set_shard(rw, shard);
    struct ferry_position pos;
    int rc = resume ? ferry_position_decode(resume, strlen(resume), &pos, err) : FERRY_OK;
    if (rc == FERRY_OK && !(resume && pos.done))
        rc = vt->extract(ctx, spec, schema, plan, shard, resume ? &pos : NULL, rw, err);
    if (resume) ferry_position_clear(&pos); /* cleared by a failed decode, too */
    if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, err);
    ferry__rw_free(rw);
    return rc;
}

static int plan_shards(const char *plan)
{
    json_t *j = json_loads(plan, 0, NULL);
    assert_non_null(j);
    int n = (int)json_array_size(json_object_get(j, "shards"));
    json_decref(j);
    return n;
}

/* Every shard of a plan, in order. */
static int read_all(const struct ferry_source_vtable *vt, void *ctx,
                    const struct ferry_resource_spec *spec, struct ferry_schema *schema,
                    const char *plan, int64_t batch_rows, struct collect *out,
                    struct ferry_error *err)
{
    int n = plan_shards(plan);
    for (int s = 0; s < n; s++) {
        int rc = read_shard(vt, ctx, spec, schema, plan, s, NULL, batch_rows, out, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

/* The key of the last batch with a key: what a tracker would save as the position. */
static char *last_keyed_position(const struct collect *c)
{
    for (int i = c->n - 1; i >= 0; i--)
        if (c->b[i]->position && strstr(c->b[i]->position, "\"key\""))
            return strdup(c->b[i]->position);
    return NULL;
}

/* Values of an integer column across batches, in order; *n gets the count. */
static int64_t *collect_ints(const struct collect *c, int col, int64_t *n)
{
    int64_t total = collect_rows(c), k = 0;
    int64_t *v = malloc(sizeof *v * (size_t)(total ? total : 1));
    for (int i = 0; i < c->n; i++)
        for (int64_t r = 0; r < c->b[i]->length; r++)
            v[k++] = ferry_col_int(c->b[i], col, r);
    *n = total;
    return v;
}

#define ASSERT_OK(expr, err)                                                                       \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != FERRY_OK) fprintf(stderr, "%s: %s\n", #expr, (err).message);                    \
        assert_int_equal(rc_, FERRY_OK);                                                           \
    } while (0)

#endif
