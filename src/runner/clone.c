/* runner/clone.c - `create: like_source` of a postgres sink fed by a postgres source: the
 * destination schema made like the source's (connectors/postgres/pg_clone.h) around the
 * data: tables, types, defaults and sequences before the sink prepares its targets;
 * constraints, indexes, foreign keys and sequence values once the run has committed. The
 * runner is the one place that knows both ends of a pipeline, so the hook lives here.
 * Called by runner.c (move_data). */
#include <string.h>
#include "connectors/postgres/pg_clone.h"
#include "ferry/core.h"
#include "runner/run.h"

/* Whether the sink asks for it; a config error when the pipeline cannot do it. */
static int wanted(struct run *r, bool *yes, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    const char *create = NULL;
    *yes = false;
    int rc = ferry_cfg_str(p->sink, "create", false, &create, err);
    if (rc != FERRY_OK || create == NULL || r->shard_mode) return rc;
    if (strcmp(p->source_type, "postgres") != 0 || strcmp(p->sink_type, "postgres") != 0)
        return ferry_cfg_error(err, ferry_cfg_get(p->sink, "create"),
                               "create: like_source needs a postgres source and a postgres sink "
                               "(this pipeline: %s -> %s)",
                               p->source_type, p->sink_type);
    *yes = true;
    return FERRY_OK;
}

static int clone_phase(struct run *r, enum ferry_pg_clone_phase phase, struct ferry_error *err)
{
    bool yes = false;
    int rc = wanted(r, &yes, err);
    if (rc != FERRY_OK || !yes) return rc;
    struct ferry_pg_clone_table *t = ferry_calloc((size_t)(r->n_res ? r->n_res : 1), sizeof *t);
    if (t == NULL) return ferry__run_oom(err);
    bool all_full = true;
    for (int i = 0; i < r->n_res; i++) {
        t[i].source = r->res[i].spec->table;
        t[i].target = r->res[i].target.table;
        all_full = all_full && r->res[i].spec->mode == FERRY_READ_FULL;
    }
    bool keyed = r->p->write == FERRY_WRITE_UPSERT || r->p->write == FERRY_WRITE_MERGE;
    /* cdc applies tables one after the other: a foreign key would refuse a change whose
     * referenced row comes in another table's batch (docs/connectors.md) */
    rc = ferry_pg_clone(r->p->source, r->p->sink, t, r->n_res, phase, keyed, all_full, err);
    ferry_free(t);
    return rc;
}

int ferry__clone_before(struct run *r, struct ferry_error *err)
{
    return clone_phase(r, FERRY_PG_CLONE_BEFORE, err);
}

int ferry__clone_after(struct run *r, struct ferry_error *err)
{
    return clone_phase(r, FERRY_PG_CLONE_AFTER, err);
}
