/* runner/plan.c - planning, shared by `ferry run` and `ferry check`: open the connectors,
 * discover every resource, compile its transforms, ask the sink's capabilities, apply the
 * policy, refuse unknown keys (everything that can refuse the pipeline happens here, before
 * a run is recorded); then freeze each resource's plan for the chosen run and find where
 * each shard resumes. Calls: run.c, connectors (open, discover, plan, capabilities,
 * checkpoints), transforms, policy, store, the checkpoint rules (checkpoint/promote.h:
 * which of the store's and the destination's checkpoints a plan starts from and a shard
 * resumes from). Called by runner.c. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint/promote.h"
#include "ferry/core.h"
#include "ferry/tables.h"
#include "pipeline/convert.h"
#include "pipeline/transform.h"
#include "runner/run.h"

/* ---- before a run exists ---- */

/* What the engine decides about rr for this run, handed to the source (connector.h). */
static int read_context_init(struct run *r, struct resource_run *rr, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    struct ferry_read_context *rc = &rr->read;
    rr->route = ferry_pipeline_route(p, rr->spec);
    if (rr->route == NULL) return ferry__run_oom(err);
    /* Names a source derives per route (cdc slots), and whether cdc keeps a change log. */
    rc->pipeline = p->name;
    rc->route = rr->route;
    rc->change_log = rr->spec->mode == FERRY_READ_CDC && p->write == FERRY_WRITE_APPEND;
    rc->applies_deletes = p->write == FERRY_WRITE_MERGE;
    rc->soft_delete = NULL; /* a cdc resource's `soft_delete: COLUMN` (policy checks) */
    rc->cdc_epoch_rows = r->o->cdc_epoch_rows;
    rc->cdc_follow = r->o->cdc_follow;
    rc->schema_changes = p->schema_changes;
    rc->on_unrepresentable = p->on_unrepresentable;
    rr->spec->run = rc;
    if (rr->spec->node == NULL) return FERRY_OK;
    static const char *const words[] = {"evolve", "freeze", "fail", NULL};
    int policy = (int)p->schema_changes;
    int e = ferry_cfg_enum(rr->spec->node, "schema_changes", false, words, &policy, err);
    rc->schema_changes = (enum ferry_schema_changes)policy;
    if (e != FERRY_OK) return e;
    e = ferry_pipeline_unrepresentable(rr->spec->node, &rc->on_unrepresentable, err);
    if (e != FERRY_OK) return e;
    return ferry_cfg_str(rr->spec->node, "soft_delete", false, &rc->soft_delete, err);
}

/* ---- the table list of `tables:` patterns, frozen with the run ----
 * The first attempt lists the source's tables and stores the list as a plan of the reserved
 * resource TABLES_KEY; a later attempt of the same run expands the patterns over that list
 * again (a table created since is not part of the run, one dropped since fails). */

#define TABLES_KEY "(tables)"

static char *tables_to_json(const struct ferry_table_info *v, int n, const char *def)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_pack("{s:s,s:s,s:I}", "schema", v[i].schema, "name",
                                             v[i].name, "bytes", (json_int_t)v[i].bytes));
    json_t *o = json_pack("{s:s?,s:o}", "default_schema", def, "tables", arr);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char *out = text ? ferry_strdup(text) : NULL;
    free(text);
    return out;
}

/* The frozen list back into table infos (NULL *v with n 0 on a malformed text). */
static int tables_from_json(const char *text, struct ferry_table_info **v, int *n, char **def)
{
    json_t *o = json_loads(text, 0, NULL);
    json_t *arr = json_object_get(o, "tables");
    *v = NULL;
    *n = 0;
    *def = NULL;
    size_t len = json_array_size(arr);
    *v = ferry_calloc(len + 1, sizeof **v);
    int rc = *v && json_is_array(arr) ? FERRY_OK : FERRY_EINVAL;
    for (size_t i = 0; rc == FERRY_OK && i < len; i++) {
        json_t *t = json_array_get(arr, i);
        const char *schema = json_string_value(json_object_get(t, "schema"));
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!schema || !name) {
            rc = FERRY_EINVAL;
            break;
        }
        (*v)[i].schema = ferry_strdup(schema);
        (*v)[i].name = ferry_strdup(name);
        (*v)[i].bytes = json_integer_value(json_object_get(t, "bytes"));
        (*n)++;
        if (!(*v)[i].schema || !(*v)[i].name) rc = FERRY_ENOMEM;
    }
    const char *d = json_string_value(json_object_get(o, "default_schema"));
    if (rc == FERRY_OK && d && (*def = ferry_strdup(d)) == NULL) rc = FERRY_ENOMEM;
    json_decref(o);
    return rc;
}

static int expand_with(struct run *r, struct ferry_table_info *v, int n, const char *def,
                       struct ferry_error *err)
{
    int rc = ferry_tables_expand(r->p, v, n, def, err);
    if (rc == FERRY_OK && r->tables_json == NULL &&
        (r->tables_json = tables_to_json(v, n, def)) == NULL)
        rc = ferry__run_oom(err);
    return rc;
}

/* Expands `tables:` entries: over the list frozen by the run this invocation continues, or
 * over the source's tables now. */
static int expand_tables(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    if (!ferry_tables_pending(p)) return FERRY_OK;
    if (p->source_vt->list_tables == NULL) return ferry_tables_expand_source(p, r->src_ctx, err);
    struct ferry_table_info *v = NULL;
    int n = 0;
    char *def = NULL;
    int64_t run_id = ferry__run_peek(r);
    int rc = run_id > 0 ? ferry_store_plan_get(r->st, run_id, TABLES_KEY, &r->tables_json, err)
                        : FERRY_OK;
    if (rc != FERRY_OK) return rc;
    if (r->tables_json != NULL) {
        r->tables_run = run_id;
        if (tables_from_json(r->tables_json, &v, &n, &def) != FERRY_OK)
            rc = ferry_error_set(err, FERRY_ESTORE, "runner",
                                 "run %" PRId64 ": its frozen table list cannot be read", run_id);
    } else {
        rc = p->source_vt->list_tables(r->src_ctx, &v, &n, &def, err);
    }
    if (rc == FERRY_OK) rc = expand_with(r, v, n, def, err);
    ferry_table_list_free(v, n);
    ferry_free(def);
    return rc;
}

/* After attach: the run's table list is the one the expansion used. */
static int freeze_tables(struct run *r, struct ferry_error *err)
{
    if (r->tables_json == NULL || (r->tables_run == r->run_id && r->run_id > 0)) return FERRY_OK;
    char *have = NULL;
    int rc = ferry_store_plan_get(r->st, r->run_id, TABLES_KEY, &have, err);
    if (rc == FERRY_OK && have == NULL)
        return ferry_store_plan_put(r->st, r->run_id, TABLES_KEY, r->tables_json, err);
    if (rc == FERRY_OK && strcmp(have, r->tables_json) != 0)
        rc = ferry_error_set(err, FERRY_ECONFLICT, "runner",
                             "run %" PRId64 " was planned over another list of tables than this "
                             "attempt read; run the command again",
                             r->run_id);
    ferry_free(have);
    return rc;
}

/* A table of a frozen list that the source no longer has: the resource fails when its turn
 * comes, the others go on. */
static int discover(struct run *r, struct resource_run *rr, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = p->source_vt->discover(r->src_ctx, rr->spec, &rr->schema, err);
    if (rc != FERRY_ENOTFOUND || !rr->spec->expanded || r->tables_run == 0) return rc;
    rr->gone = ferry_asprintf("table %s was dropped after run %" PRId64
                              " planned it (tables: pattern): %s",
                              rr->spec->table, r->tables_run, err->message);
    ferry_error_clear(err);
    return rr->gone ? FERRY_OK : ferry__run_oom(err);
}

/* Tells the source (and below the sink) every table it is about to be asked about, so that
 * a database reads their catalog in one query, not one per table. */
static const char **resource_names(const struct run *r, bool targets)
{
    const char **v = ferry_calloc((size_t)r->n_res + 1, sizeof *v);
    for (int i = 0; v && i < r->n_res; i++)
        v[i] = targets ? ferry_resource_target(&r->p->resources[i]) : r->p->resources[i].table;
    return v;
}

void ferry__plan_prepare_ahead(struct run *r, void *sink_ctx, int lane)
{
    if (r->p->sink_vt->prepare_ahead == NULL || r->n_res < 2) return;
    const char **v = resource_names(r, true);
    int n = 0;
    for (int i = 0; v && i < r->n_res; i++)
        if (r->res[i].lane == lane && !r->res[i].gone) v[n++] = v[i];
    if (n > 1) r->p->sink_vt->prepare_ahead(sink_ctx, v, n);
    ferry_free(v);
}

static int open_source_side(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = p->source_vt->open(p->source, &r->src_ctx, err);
    if (rc != FERRY_OK) return rc; /* connectors name themselves in their messages */
    if ((rc = expand_tables(r, err))) return rc;
    r->n_res = p->n_resources;
    r->res = ferry_calloc((size_t)r->n_res, sizeof *r->res);
    if (r->res == NULL) return ferry__run_oom(err);
    /* An engine key of the source section (each connector lists it as tuning). */
    r->parallelism = 1;
    rc = ferry_cfg_int(p->source, "parallelism", false, 1, 64, &r->parallelism, err);
    if (rc == FERRY_OK && p->source_vt->discover_ahead && r->n_res > 1) {
        const char **v = resource_names(r, false);
        if (v) p->source_vt->discover_ahead(r->src_ctx, v, r->n_res);
        ferry_free(v);
    }
    for (int i = 0; rc == FERRY_OK && i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        rr->spec = &p->resources[i];
        rc = read_context_init(r, rr, err);
        if (rc == FERRY_OK) rc = discover(r, rr, err);
        if (rc == FERRY_OK && rr->gone == NULL)
            rc = ferry_transforms_compile(p, rr->spec->table, rr->schema, &rr->chain,
                                          &rr->out_schema, err);
        /* filters the source may check against statistics (borrowed from the chain) */
        if (rc == FERRY_OK && rr->gone == NULL)
            rc = ferry_transforms_pushdown(rr->chain, rr->schema, &rr->read.filters,
                                           &rr->read.n_filters, err);
    }
    /* The source section and the transforms are fully read: refuse unknown keys there before
     * the sink is even opened. */
    if (rc == FERRY_OK) rc = ferry_cfg_check_unused(p->source, err);
    for (int i = 0; rc == FERRY_OK && i < p->n_transforms; i++)
        rc = ferry_cfg_check_unused(p->transforms[i].node, err);
    return rc;
}

/* Whether a transform of p reads values as text or bytes (cast, hash): special values
 * (connector.h) must then not reach it. */
static bool transforms_read_values(const struct ferry_pipeline_spec *p)
{
    for (int i = 0; i < p->n_transforms; i++)
        if (p->transforms[i].kind &&
            (!strcmp(p->transforms[i].kind, "cast") || !strcmp(p->transforms[i].kind, "hash")))
            return true;
    return false;
}

/* on_unrepresentable: null | clamp: the converter of rr's batches against the sink's limits
 * (NULL when nothing needs one), and the schema the sink prepares with the columns it may
 * set to NULL made nullable. */
static int convert_prepare(struct resource_run *rr, struct ferry_error *err)
{
    if (rr->out_schema == NULL || rr->read.on_unrepresentable == FERRY_UNREP_FAIL) return FERRY_OK;
    struct ferry_schema *sc = NULL;
    int rc = ferry_convert_new(rr->out_schema, rr->read.on_unrepresentable, &rr->caps,
                               &rr->convert, &sc, err);
    if (rc != FERRY_OK || sc == NULL) return rc;
    ferry_schema_unref(rr->out_schema);
    rr->out_schema = sc;
    return FERRY_OK;
}

static int open_sink_side(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = p->sink_vt->open(p->sink, &r->sink_ctx, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        memset(&rr->caps, 0, sizeof rr->caps);
        p->sink_vt->capabilities(r->sink_ctx, p->write, &rr->caps);
        rc = rr->gone ? FERRY_OK : ferry_policy_check(p, rr->spec, rr->out_schema, &rr->caps, err);
        if (rc == FERRY_OK && !rr->gone) rc = convert_prepare(rr, err);
        if (rc != FERRY_OK) return rc;
        /* The one commit of a run is at its end, unless runs are spread over workers. */
        rr->read.positions_at_end =
            rr->caps.durability == FERRY_DURABLE_AT_COMMIT && !r->distributed && !r->shard_mode;
        /* on_unrepresentable: null | clamp also reads special values: the writer converts
         * those the sink cannot hold (rr->convert), after the transforms (cast and hash
         * read them as PostgreSQL's text, a cast keeps them special). A sink that holds them
         * knows them by the column's origin, which a cast drops: with cast or hash the
         * source refuses them there, naming column and row. */
        bool reads = transforms_read_values(p);
        rr->read.special_values = reads ? rr->convert != NULL && !rr->caps.special_values
                                        : rr->caps.special_values || rr->convert != NULL;
        ferry_transforms_set_specials(rr->chain, rr->read.special_values);
        rr->target.index = i;
        rr->target.resource = rr->spec->table;
        rr->target.table = ferry_resource_target(rr->spec);
        rr->target.schema = rr->out_schema;
        rr->target.mode = p->write;
        rr->target.read_mode = rr->spec->mode;
        rr->target.schema_changes = rr->read.schema_changes;
        rr->read.truncates = rr->caps.truncates && !rr->read.change_log &&
                             rr->read.soft_delete == NULL &&
                             (p->write == FERRY_WRITE_UPSERT || p->write == FERRY_WRITE_MERGE);
        rr->target.route = rr->route;
        /* checked by the policy: a field outside the key */
        if (rr->read.soft_delete != NULL && rr->out_schema)
            rr->out_schema->soft_delete =
                1 + ferry_schema_find(rr->out_schema, rr->read.soft_delete);
    }
    return FERRY_OK;
}

int ferry__plan_prepare(struct run *r, struct ferry_error *err)
{
    int rc = open_source_side(r, err);
    if (rc == FERRY_OK) rc = open_sink_side(r, err);
    if (rc != FERRY_OK) return rc;
    /* How many tables at once, and batches within the memory budget. */
    rc = ferry__lanes_plan(r, err);
    if (rc != FERRY_OK) return rc;
    /* Every key of the file must have been read by now: unknown keys are errors. */
    return ferry_cfg_check_unused(r->p->root, err);
}

/* ---- freezing the chosen run's plans ---- */

static struct ferry_sink_checkpoint *sink_checkpoint(struct ferry_sink_checkpoint *v, int n,
                                                     const char *resource, int shard)
{
    for (int i = 0; i < n; i++)
        if (v[i].shard == shard && !strcmp(v[i].resource, resource)) return &v[i];
    return NULL;
}

/* Whether run_id ran this pipeline version: a destination checkpoint written by another
 * version (another cursor, another mode) has another shape and must not be used. */
static bool run_has_version(void *ctx, int64_t run_id)
{
    struct run *r = ctx;
    struct ferry_run_info info;
    memset(&info, 0, sizeof info);
    bool same = ferry_store_run_get(r->st, run_id, &info, NULL) == FERRY_OK &&
                strcmp(info.version, r->p->version) == 0;
    ferry_run_info_clear(&info);
    return same;
}

static struct ferry_held_checkpoint held_of(const struct ferry_sink_checkpoint *c)
{
    struct ferry_held_checkpoint h = {0, NULL};
    if (c != NULL) {
        h.run_id = c->run_id;
        h.position = c->position;
    }
    return h;
}

/* Where a new plan of rr starts: the route checkpoint for incremental reads, or the
 * destination's own when it stored a later one in its commit (checkpoint/promote.h).
 * Owned, NULL: the start. */
static int plan_lower(struct run *r, struct resource_run *rr, struct ferry_sink_checkpoint *scp,
                      int n_scp, char **lower, struct ferry_error *err)
{
    *lower = NULL;
    if (rr->spec->mode == FERRY_READ_FULL) return FERRY_OK;
    int64_t route_run = 0;
    int rc = ferry__run_route_position(r, rr, lower, &route_run, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_sink_checkpoint *s = sink_checkpoint(scp, n_scp, rr->spec->table, 0);
    struct ferry_held_checkpoint held = held_of(s);
    if (s && ferry_checkpoint_lower_from_held(route_run, &held, run_has_version, r)) {
        ferry_free(*lower);
        *lower = ferry_strdup(s->position);
        if (*lower == NULL) return ferry__run_oom(err);
        if (r->o->out && !r->o->quiet)
            fprintf(r->o->out,
                    "%s: the destination holds rows of run %" PRId64
                    " that were never recorded here; continuing after them\n",
                    rr->spec->table, s->run_id);
    }
    return FERRY_OK;
}

/* The frozen plan of rr in this run, or one planned now when there is none (*fresh: to be
 * frozen by freeze_fresh). */
static int frozen_plan(struct run *r, struct resource_run *rr, struct ferry_sink_checkpoint *scp,
                       int n_scp, bool *fresh, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    const char *res = rr->spec->table;
    *fresh = false;
    int rc = ferry_store_plan_get(r->st, r->run_id, res, &rr->plan_json, err);
    if (rc != FERRY_OK || rr->plan_json != NULL) return rc;
    if (rr->gone) return FERRY_OK; /* nothing to plan: it fails when its turn comes */
    if (r->shard_mode)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "run %" PRId64 " resource %s: no frozen plan: its coordinator "
                               "plans before it hands out shards",
                               r->run_id, res);
    char *lower = NULL;
    rc = plan_lower(r, rr, scp, n_scp, &lower, err);
    if (rc != FERRY_OK) return rc;
    rc = p->source_vt->plan(r->src_ctx, rr->spec, rr->schema, lower, &rr->plan_json, err);
    ferry_free(lower);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "resource %s: plan", res);
    *fresh = true;
    return FERRY_OK;
}

/* Freezes the plans made now in one store transaction (one commit for a run of many
 * tables, not one per table). Planned first, then written: a source's planning may wait on
 * its server (a slot waiting for running transactions), which must not hold the state
 * file's write lock. A crash before the commit freezes none; the next attempt plans again. */
static int freeze_fresh(struct run *r, const bool *fresh, struct ferry_error *err)
{
    int n = 0;
    for (int i = 0; i < r->n_res; i++) n += fresh[i];
    if (n == 0) return FERRY_OK;
    int rc = n > 1 ? ferry_store_begin(r->st, err) : FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++)
        if (fresh[i])
            rc = ferry_store_plan_put(r->st, r->run_id, r->res[i].spec->table,
                                      r->res[i].plan_json, err);
    if (n > 1 && rc == FERRY_OK) return ferry_store_commit(r->st, err);
    if (n > 1) ferry_store_rollback(r->st);
    return rc;
}

/* Shards, commit_once, no_resume_point, rows_estimate and row_groups_skipped of rr's plan. */
static int plan_shape(struct run *r, struct resource_run *rr, struct ferry_error *err)
{
    const char *res = rr->spec->table;
    json_t *pj = json_loads(rr->plan_json, 0, NULL);
    json_t *shards = pj ? json_object_get(pj, "shards") : NULL;
    if (!json_is_array(shards) || json_array_size(shards) == 0) {
        json_decref(pj);
        return ferry_error_set(err, FERRY_ESOURCE, "runner",
                               "resource %s: the %s source produced a plan without shards", res,
                               r->p->source_type);
    }
    rr->n_shards = (int)json_array_size(shards);
    rr->commit_once = json_is_true(json_object_get(pj, "commit_once"));
    const char *keyset = json_string_value(json_object_get(pj, "keyset"));
    rr->no_resume_point =
        rr->spec->mode == FERRY_READ_FULL && keyset != NULL && strcmp(keyset, "none") == 0;
    json_t *est = json_object_get(pj, "rows_estimate");
    rr->rows_estimate =
        json_is_integer(est) && json_integer_value(est) >= 0 ? json_integer_value(est) : -1;
    json_t *skipped = json_object_get(pj, "row_groups_skipped");
    rr->row_groups_skipped = json_is_integer(skipped) ? json_integer_value(skipped) : -1;
    json_decref(pj);
    /* Such a plan's unfinished shards have no resume point: only a run whose positions
     * become durable at its end may read it (durability is a tuning key: it may change
     * between attempts). */
    if (rr->commit_once && !rr->read.positions_at_end)
        return ferry_error_set(err, FERRY_ECONFLICT, "runner",
                               "resource %s: run %" PRId64 " was planned for a sink durable at "
                               "its commit (read without key order, resumable only from the "
                               "start); this attempt would make batches durable one by one "
                               "(durability per_apply, or distributed): resume it with "
                               "`durability: at_commit`, or start over with --fresh",
                               res, r->run_id);
    return FERRY_OK;
}

/* Resume positions: what the store saved as durable for this run, overridden by what a
 * transactional destination committed for this very run (never behind the store). */
static int resume_positions(struct run *r, struct resource_run *rr,
                            struct ferry_sink_checkpoint *scp, int n_scp, bool *dest_ahead,
                            struct ferry_error *err)
{
    const char *res = rr->spec->table;
    rr->resume = ferry_calloc((size_t)rr->n_shards, sizeof *rr->resume);
    if (rr->resume == NULL) return ferry__run_oom(err);
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    int rc = ferry_store_run_checkpoints(r->st, r->run_id, res, &cps, &n, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < n; i++)
        if (cps[i].shard >= 0 && cps[i].shard < rr->n_shards && cps[i].position) {
            ferry_free(rr->resume[cps[i].shard]);
            rr->resume[cps[i].shard] = ferry_strdup(cps[i].position);
        }
    ferry_checkpoints_free(cps, n);
    for (int s = 0; s < rr->n_shards && rc == FERRY_OK; s++) {
        struct ferry_held_checkpoint held = held_of(sink_checkpoint(scp, n_scp, res, s));
        bool record = false;
        const char *pos = ferry_checkpoint_resume_of(rr->resume[s], &held, r->run_id, &record);
        if (record) {
            *dest_ahead = true;
            char *copy = ferry_strdup(pos);
            if (copy == NULL) return ferry__run_oom(err);
            ferry_free(rr->resume[s]);
            rr->resume[s] = copy;
            /* The destination made it durable, the store never heard (a crash between the
             * sink's commit and the fold of sink.committed): record it, else this attempt
             * may read nothing more and complete without moving the route, and the next
             * run would write those changes again (cdc). A pull worker leaves it to the
             * task it leases (coordinator.c, task_resume). */
            if (!r->shard_mode)
                rc = ferry_store_run_checkpoint_save(r->st, r->run_id, r->attempt, res, s,
                                                     copy, err);
        }
        if (rr->resume[s]) rr->resumed_any = true;
    }
    return rc;
}

/* The destination's sums of this run for resource `res` over its shards' checkpoint rows;
 * false when it holds none, or one without counts (an older ferry wrote it). */
static bool dest_counts(const struct ferry_sink_checkpoint *scp, int n_scp, int64_t run_id,
                        const char *res, struct ferry_sink_checkpoint *sum)
{
    memset(sum, 0, sizeof *sum);
    int n = 0;
    for (int i = 0; i < n_scp; i++) {
        if (scp[i].run_id != run_id || strcmp(scp[i].resource, res) != 0) continue;
        if (!scp[i].has_counts) return false;
        sum->rows += scp[i].rows;
        sum->bytes += scp[i].bytes;
        sum->batches += scp[i].batches;
        n++;
    }
    return n > 0;
}

/* Every checkpoint row of this run carries its counts. */
static bool all_counted(const struct ferry_sink_checkpoint *scp, int n_scp, int64_t run_id)
{
    for (int i = 0; i < n_scp; i++)
        if (scp[i].run_id == run_id && !scp[i].has_counts) return false;
    return true;
}

static int64_t shortfall(int64_t dest, int64_t have)
{
    return dest > have ? dest - have : 0;
}

/* Batches the destination committed and the store never counted: a crash between the
 * sink's commit and the fold of their batch.written (per_apply: the last batch or two,
 * durable_after_next). The destination sums what each run committed through each
 * checkpoint row, so the run's and resources' counters are raised to it, in one store
 * transaction. Never lowered: the at_commit take-back above is the store's own account. */
static int raise_counts(struct run *r, const struct ferry_sink_checkpoint *scp, int n_scp,
                        struct ferry_error *err)
{
    if (n_scp == 0 || r->shard_mode) return FERRY_OK;
    struct ferry_resource_state *rs = NULL;
    int n_rs = 0;
    int rc = ferry_store_resource_list(r->st, r->run_id, &rs, &n_rs, err);
    bool open = false;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        const char *res = r->res[i].spec->table;
        struct ferry_sink_checkpoint d;
        if (!dest_counts(scp, n_scp, r->run_id, res, &d)) continue;
        int64_t have[3] = {0, 0, 0};
        for (int j = 0; j < n_rs; j++)
            if (strcmp(rs[j].resource, res) == 0) {
                have[0] = rs[j].rows;
                have[1] = rs[j].bytes;
                have[2] = rs[j].batches;
            }
        int64_t rows = shortfall(d.rows, have[0]), bytes = shortfall(d.bytes, have[1]),
                batches = shortfall(d.batches, have[2]);
        if (rows == 0 && bytes == 0 && batches == 0) continue;
        if (!open) {
            rc = ferry_store_begin(r->st, err);
            open = rc == FERRY_OK;
        }
        if (rc == FERRY_OK)
            rc = ferry_store_run_add_counts(r->st, r->run_id, rows, bytes, batches, 0, 0, err);
        if (rc == FERRY_OK)
            rc = ferry_store_resource_add_counts(r->st, r->run_id, res, rows, bytes, batches, 0,
                                                 0, err);
        if (rc == FERRY_OK)
            ferry_log(FERRY_LOG_INFO,
                      "resource %s: %" PRId64 " rows in %" PRId64 " batches of run %" PRId64
                      " were committed in the destination but not recorded before the last "
                      "attempt ended; they are counted now",
                      res, rows, batches, r->run_id);
    }
    if (open && rc == FERRY_OK) rc = ferry_store_commit(r->st, err);
    if (open && rc != FERRY_OK) ferry_store_rollback(r->st);
    ferry_free(rs);
    return rc;
}

int ferry__plan_freeze(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc;
    struct ferry_sink_checkpoint *scp = NULL;
    int n_scp = 0;
    if (r->n_res > 0 && r->res[0].caps.transactional_checkpoint && p->sink_vt->checkpoints) {
        rc = p->sink_vt->checkpoints(r->sink_ctx, r->dest_key, &scp, &n_scp, err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "%s sink: reading checkpoints", p->sink_type);
    }
    rc = freeze_tables(r, err);
    bool *fresh = rc == FERRY_OK ? ferry_calloc((size_t)r->n_res + 1, sizeof *fresh) : NULL;
    if (rc == FERRY_OK && fresh == NULL) rc = ferry__run_oom(err);
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++)
        rc = frozen_plan(r, &r->res[i], scp, n_scp, &fresh[i], err);
    if (rc == FERRY_OK) rc = freeze_fresh(r, fresh, err);
    bool dest_ahead = false;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        if (rr->gone && rr->plan_json == NULL) continue;
        rc = plan_shape(r, rr, err);
        if (rc == FERRY_OK) rc = resume_positions(r, rr, scp, n_scp, &dest_ahead, err);
    }
    /* What earlier attempts counted but never committed (an at_commit sink's batches of an
     * attempt that died) comes off the counters: its transaction was rolled back and this
     * attempt writes those rows again. When the destination holds a checkpoint of this run
     * the store never heard of, that attempt's commit did happen: where the destination
     * also counts what the run committed, the counters are taken back all the same and
     * raised to its sums (exact per resource); else they are kept. */
    if (rc == FERRY_OK && !r->shard_mode)
        rc = ferry_store_uncommitted_settle(r->st, r->run_id, r->attempt, true,
                                            !dest_ahead || all_counted(scp, n_scp, r->run_id),
                                            err);
    if (rc == FERRY_OK) rc = raise_counts(r, scp, n_scp, err);
    ferry_free(fresh);
    ferry_sink_checkpoints_free(scp, n_scp);
    return rc;
}

/* ---- ferry check ---- */

static void print_columns(FILE *out, const struct ferry_schema *sc)
{
    fprintf(out, "    columns:");
    for (int j = 0; j < sc->n_fields; j++) {
        const struct ferry_field *f = &sc->fields[j];
        char ty[48];
        if (f->type == FERRY_TYPE_DECIMAL128)
            snprintf(ty, sizeof ty, "decimal128(%d,%d)", f->precision, f->scale);
        else
            snprintf(ty, sizeof ty, "%s", ferry_type_name(f->type));
        fprintf(out, " %s %s%s%s%s", f->name, ty, f->nullable ? "" : " not null",
                f->key_pos ? " key" : "", j + 1 < sc->n_fields ? "," : "");
    }
}

static void print_plan(struct run *r)
{
    FILE *out = r->o->out;
    if (out == NULL) return;
    fprintf(out, "pipeline %s (version %.12s)\n", r->p->name, r->p->version);
    fprintf(out,
            "  source %s -> sink %s, write %s, batch %" PRId64 " rows / %" PRId64
            " bytes, queue %" PRId64 "\n",
            r->p->source_type, r->p->sink_type, ferry_write_mode_name(r->p->write),
            r->opts.rows, r->opts.bytes, r->opts.queue);
    fprintf(out, "  %d resource%s, %d at once (concurrency %" PRId64 "), memory %" PRId64 " bytes\n",
            r->n_res, r->n_res == 1 ? "" : "s", r->n_lanes, r->p->concurrency, r->p->memory);
    for (int i = 0; i < r->n_res; i++) {
        struct resource_run *rr = &r->res[i];
        const struct ferry_sink_caps *c = &rr->caps;
        if (rr->gone) {
            fprintf(out, "  %s: %s\n", rr->spec->table, rr->gone);
            continue;
        }
        fprintf(out, "  %s: mode %s, %d shard%s, durability %s%s, route \"%s\"\n", rr->spec->table,
                ferry_read_mode_name(rr->spec->mode), rr->n_shards, rr->n_shards == 1 ? "" : "s",
                c->durability == FERRY_DURABLE_PER_APPLY ? "per_apply" : "at_commit",
                c->transactional_checkpoint ? " (checkpoint stored with the data: exactly-once)"
                                            : "",
                rr->route);
        print_columns(out, rr->out_schema);
        fprintf(out, "\n    plan: %s\n", rr->plan_json);
    }
}

int ferry__plan_check(struct run *r, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        struct resource_run *rr = &r->res[i];
        if (rr->gone) continue;
        if (rr->spec->mode == FERRY_READ_CDC) {
            /* Planning cdc creates a publication and a slot: `check` only says so. */
            rr->plan_json = ferry_strdup("{\"mode\":\"cdc\",\"shards\":[{\"stream\":true}],"
                                         "\"note\":\"slot and snapshot are made by the run\"}");
            rr->n_shards = 1;
            continue;
        }
        char *lower = NULL;
        if (rr->spec->mode != FERRY_READ_FULL)
            (void)ferry__run_route_position(r, rr, &lower, NULL, NULL);
        rc = r->p->source_vt->plan(r->src_ctx, rr->spec, rr->schema, lower, &rr->plan_json, err);
        ferry_free(lower);
        if (rc != FERRY_OK) break;
        json_t *pj = json_loads(rr->plan_json, 0, NULL);
        rr->n_shards = (int)json_array_size(json_object_get(pj, "shards"));
        json_decref(pj);
    }
    if (rc == FERRY_OK) print_plan(r);
    return rc;
}
