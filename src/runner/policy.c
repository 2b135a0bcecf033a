/* runner/policy.c - combines a resource's read mode with the sink's capabilities and
 * refuses, with one clear message and before any data moves, what cannot be correct
 * (DESIGN §2 Policy). Called by the runner at plan time. */
#include <string.h>
#include "ferry/core.h"
#include "runner/runner.h"

static void supported_modes(unsigned bits, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int m = FERRY_WRITE_APPEND; m <= FERRY_WRITE_MERGE; m++) {
        if (!(bits & (1u << m))) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s", n ? ", " : "", ferry_write_mode_name(m));
    }
}

int ferry_policy_check(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                       const struct ferry_schema *schema, const struct ferry_sink_caps *caps,
                       struct ferry_error *err)
{
    const char *w = ferry_write_mode_name(p->write);
    const char *sink = p->sink_type;
    if (!(caps->write_modes & (1u << p->write))) {
        char modes[96];
        supported_modes(caps->write_modes, modes, sizeof modes);
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: the %s sink cannot write with `write: %s`; use "
                               "one it supports: %s", r->table, sink, w,
                               modes[0] ? modes : "none");
    }
    if (r->mode == FERRY_READ_INCREMENTAL && !p->source_vt->supports_incremental)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: the %s source cannot read incrementally; use "
                               "`mode: full`", r->table, p->source_type);
    if (r->mode == FERRY_READ_CDC && !p->source_vt->supports_cdc)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: the %s source has no change data capture; use "
                               "%s", r->table, p->source_type,
                               p->source_vt->supports_incremental
                                   ? "`mode: incremental` (with a cursor) or `mode: full`"
                                   : "`mode: full`");
    if ((p->write == FERRY_WRITE_UPSERT || p->write == FERRY_WRITE_MERGE) && schema->n_key == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s has no primary key, and `write: %s` needs one to "
                               "match rows (declare `key: [column]` on the resource)",
                               r->table, w);
    if (p->write == FERRY_WRITE_REPLACE && !caps->atomic_replace)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: the %s sink cannot swap a table atomically, so "
                               "`write: replace` could leave it empty or half-loaded; use "
                               "`write: upsert` (with a key) or `write: append`", r->table, sink);
    if (p->write == FERRY_WRITE_REPLACE && r->mode != FERRY_READ_FULL)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: `write: replace` needs `mode: full` (with mode %s the "
                               "table would be replaced by only the rows read this run)",
                               r->table, ferry_read_mode_name(r->mode));
    if (ferry_read_context_of(r)->soft_delete != NULL) {
        /* Marking deleted rows is a merge of captured changes into a sink that can mark. */
        if (r->mode != FERRY_READ_CDC || p->write != FERRY_WRITE_MERGE)
            return ferry_error_set(err, FERRY_EPOLICY, "policy",
                                   "resource %s: `soft_delete` needs `mode: cdc` with `write: "
                                   "merge` (here mode %s, write %s)", r->table,
                                   ferry_read_mode_name(r->mode), w);
        if (!caps->soft_deletes)
            return ferry_error_set(err, FERRY_EPOLICY, "policy",
                                   "resource %s: the %s sink cannot mark deleted rows "
                                   "(`soft_delete`); use `write: append` to keep the changes "
                                   "as a log", r->table, sink);
        int f = ferry_schema_find(schema, ferry_read_context_of(r)->soft_delete);
        if (f < 0 || schema->fields[f].key_pos > 0 || !schema->fields[f].nullable)
            return ferry_error_set(err, FERRY_EPOLICY, "policy",
                                   "resource %s: the `soft_delete` column \"%s\" must be a "
                                   "nullable column outside the key of what is written",
                                   r->table, ferry_read_context_of(r)->soft_delete);
    }
    if (p->write == FERRY_WRITE_MERGE && !caps->deletes && ferry_read_context_of(r)->soft_delete == NULL)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: the %s sink cannot apply deletes, so `write: merge` "
                               "is not possible; use %s", r->table, sink,
                               r->mode == FERRY_READ_CDC
                                   ? "`write: append` to keep the changes as a log"
                                   : "`write: upsert`");
    if (r->mode == FERRY_READ_CDC && p->write == FERRY_WRITE_UPSERT)
        return ferry_error_set(err, FERRY_EPOLICY, "policy",
                               "resource %s: `mode: cdc` with `write: upsert` would drop deletes; "
                               "use `write: merge` (or append for a change log)", r->table);
    return FERRY_OK;
}
