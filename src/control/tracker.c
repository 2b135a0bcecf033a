/* control/tracker.c - folds bus events into run state (control/tracker.h).
 *
 * Owns a store handle of its own, the fold rules, the dedup mark (consumer "tracker") and
 * an optional folding thread. A group of up to 256 events is folded in ONE store
 * transaction together with the new mark, so a crash leaves either the whole group folded
 * and marked, or nothing: a redelivered event (seq <= mark) changes nothing. Calls the
 * store, the bus, jansson and the checkpoint rules (checkpoint/promote.h: which scope a
 * written position takes, which run positions become route positions; the tracker only
 * stores what they decide). Called by the embedded runner, `ferry serve` and the tests.
 *
 * Fencing: an event whose attempt is not the run's current attempt is ignored whole. Its
 * batches belong to an attempt that lost its lease; the current attempt re-reads from the
 * last durable checkpoint and writes them again, so counting the stale ones too would count
 * rows twice, and letting them move checkpoints could move progress past data the current
 * attempt has not made durable. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bus/bus.h"
#include "checkpoint/promote.h"
#include "control/tracker.h"
#include "core/mono.h"
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "store/store.h"

#define GROUP_MAX 256
#define POLL_MS 200
#define CONSUMER "tracker"

struct ferry_tracker {
    struct ferry_store *st;
    struct ferry_bus *bus;     /* NULL: read the store's event log directly */
    pthread_mutex_t fold_lock; /* one fold at a time: the store handle is single-threaded */
    pthread_mutex_t lock;      /* guards the fields below */
    pthread_cond_t cond;       /* folded moved, or stop was asked */
    int64_t folded;            /* every event with seq <= folded is folded and marked */
    bool running, stop;
    pthread_t thread;
    int first_rc; /* first fold error the thread met */
    struct ferry_error first_err;
    bool group_moves_checkpoints; /* the group being folded saves a checkpoint */
    /* FERRY_CHAOS_BUS (fault tests only): the folding thread "restarts" now and then: it
     * drops its store handle and in-memory mark and reopens them from the state file. */
    char *chaos_path;
    unsigned chaos_state;
    char consumer[96]; /* the mark's name: "tracker", or "tracker@<tag>" on an external bus */
};

/* ---- payload helpers ---- */

static int64_t jint(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    return 0;
}

static const char *jstr(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

/* Compact JSON text of v in engine memory (jansson's own allocator is not ours). */
static char *dump_json(json_t *v)
{
    size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    size_t len = json_dumpb(v, NULL, 0, flags);
    if (len == 0) return NULL;
    char *s = ferry_malloc(len + 1);
    if (s == NULL) return NULL;
    json_dumpb(v, s, len, flags);
    s[len] = '\0';
    return s;
}

/* ---- fold rules ---- */

struct fold_ctx {
    struct ferry_tracker *tr;
    const struct ferry_event *ev;
    struct ferry_run_info *run;
    json_t *p;
};

/* A batch of a distributed run's shard task carries the task's lease token: its
 * checkpoint is saved only while that token is current. A worker that lost its lease (it
 * stalled, another one leased the shard) still publishes what it wrote before it noticed;
 * such an event is ignored whole, like an event of a fenced attempt. */
static int fold_task_batch(struct fold_ctx *c, int64_t token, bool *fenced,
                           struct ferry_error *err)
{
    const struct ferry_event *ev = c->ev;
    *fenced = false;
    json_t *pos = json_object_get(c->p, "position");
    if (pos == NULL || json_is_null(pos) || ev->resource[0] == '\0') return FERRY_OK;
    c->tr->group_moves_checkpoints = true;
    char *text = dump_json(pos);
    if (text == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "tracker", "event %lld: out of memory",
                               (long long)ev->seq);
    struct ferry_error e;
    int rc = ferry_store_shard_checkpoint_save(c->tr->st, ev->run_id, ev->resource,
                                               (int)jint(c->p, "shard"), token, text, &e);
    ferry_free(text);
    if (rc == FERRY_EFENCED) {
        ferry_log(FERRY_LOG_DEBUG,
                  "tracker: event %lld (batch.written of run %lld, %s shard %lld) is from "
                  "token %lld, which lost its lease; ignored (fenced)",
                  (long long)ev->seq, (long long)ev->run_id, ev->resource,
                  (long long)jint(c->p, "shard"), (long long)token);
        *fenced = true;
        return FERRY_OK;
    }
    if (rc != FERRY_OK && err) *err = e;
    return rc;
}

/* batch.written's "converted" (on_unrepresentable) as text (*text NULL when it has none). */
static int converted_text(struct fold_ctx *c, char **text, struct ferry_error *err)
{
    json_t *add = json_object_get(c->p, "converted");
    *text = NULL;
    if (!json_is_object(add) || json_object_size(add) == 0) return FERRY_OK;
    *text = dump_json(add);
    return *text ? FERRY_OK : ferry_error_set(err, FERRY_ENOMEM, "tracker", "out of memory");
}

/* The store adds it to the resource's per-column counts, as its rows to the resource's. */
static int fold_converted(struct fold_ctx *c, const char *text, struct ferry_error *err)
{
    if (text == NULL || c->ev->resource[0] == '\0') return FERRY_OK;
    return ferry_store_resource_converted_add(c->tr->st, c->ev->run_id, c->ev->resource, text,
                                              err);
}

static int fold_batch_written(struct fold_ctx *c, struct ferry_error *err)
{
    struct ferry_store *st = c->tr->st;
    const struct ferry_event *ev = c->ev;
    int64_t rows = jint(c->p, "rows"), bytes = jint(c->p, "bytes");
    int64_t token = jint(c->p, "token");
    if (token > 0) {
        bool fenced = false;
        int trc = fold_task_batch(c, token, &fenced, err);
        if (trc != FERRY_OK || fenced) return trc;
        trc = ferry_store_run_add_counts(st, ev->run_id, rows, bytes, 1, 0, 0, err);
        if (trc == FERRY_OK && ev->resource[0])
            trc = ferry_store_resource_add_counts(st, ev->run_id, ev->resource, rows, bytes, 1, 0,
                                                  0, err);
        char *conv = NULL;
        if (trc == FERRY_OK) trc = converted_text(c, &conv, err);
        if (trc == FERRY_OK) trc = fold_converted(c, conv, err);
        ferry_free(conv);
        return trc;
    }
    int rc = ferry_store_run_add_counts(st, ev->run_id, rows, bytes, 1, 0, 0, err);
    if (rc == FERRY_OK && ev->resource[0])
        rc = ferry_store_resource_add_counts(st, ev->run_id, ev->resource, rows, bytes, 1, 0, 0,
                                             err);
    char *conv = NULL;
    if (rc == FERRY_OK) rc = converted_text(c, &conv, err);
    if (rc == FERRY_OK) rc = fold_converted(c, conv, err);
    /* Not durable yet (an at_commit sink): counted now, so progress shows, and noted as the
     * attempt's uncommitted counts (converted values included), taken back if its
     * transaction never commits. */
    bool durable = json_is_true(json_object_get(c->p, "durable"));
    if (rc == FERRY_OK && json_is_false(json_object_get(c->p, "durable")))
        rc = ferry_store_uncommitted_add(st, ev->run_id, ev->attempt, ev->resource, rows, bytes,
                                         1, conv, err);
    ferry_free(conv);
    json_t *pos = json_object_get(c->p, "position");
    if (rc != FERRY_OK || pos == NULL || json_is_null(pos)) return rc;
    if (ev->resource[0] == '\0') {
        ferry_log(FERRY_LOG_WARN,
                  "tracker: event %lld (batch.written of run %lld) has a position"
                  " but no resource; its checkpoint is not saved",
                  (long long)ev->seq, (long long)ev->run_id);
        return FERRY_OK;
    }
    c->tr->group_moves_checkpoints = true;
    char *text = dump_json(pos);
    if (text == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "tracker", "event %lld: out of memory",
                               (long long)ev->seq);
    int shard = (int)jint(c->p, "shard");
    if (ferry_checkpoint_written_scope(durable) == FERRY_CHECKPOINT_RUN)
        rc = ferry_store_run_checkpoint_save(st, ev->run_id, ev->attempt, ev->resource, shard, text,
                                             err);
    else
        rc = ferry_store_pending_checkpoint_save(st, ev->run_id, ev->attempt, ev->resource, shard,
                                                 text, err);
    ferry_free(text);
    return rc;
}

/* A plan's "route_checkpoint" (sources reading incrementally without a cursor: the s3 and
 * files sources' objects read) stands for the whole plan: it becomes the route's position
 * only when `whole` (the run completed and so did the resource); never the shards' row
 * positions. *has: the plan carries one. */
static int save_plan_route(struct fold_ctx *c, const struct ferry_resource_state *res,
                           const char *route, bool whole, bool *has, struct ferry_error *err)
{
    char *plan = NULL;
    *has = false;
    int rc = ferry_store_plan_get(c->tr->st, c->run->id, res->resource, &plan, err);
    json_t *pj = plan ? json_loads(plan, 0, NULL) : NULL;
    json_t *rcp = json_object_get(pj, "route_checkpoint");
    *has = json_is_object(rcp);
    char *text = *has && ferry_checkpoint_plan_route_due(whole, res->state)
                     ? json_dumps(rcp, JSON_COMPACT)
                     : NULL;
    if (rc == FERRY_OK && text != NULL)
        rc = ferry_store_route_checkpoint_save(c->tr->st, c->run->pipeline, c->run->version,
                                               route, 0, text, c->run->id, err);
    free(text);
    json_decref(pj);
    ferry_free(plan);
    return rc;
}

/* Run checkpoints of every incremental or cdc resource become its route checkpoints
 * (the rules: checkpoint/promote.h). completed: the run completed (else it paused after a
 * commit). */
static int advance_routes(struct fold_ctx *c, bool completed, struct ferry_error *err)
{
    struct ferry_store *st = c->tr->st;
    struct ferry_resource_state *res = NULL;
    int nres = 0;
    c->tr->group_moves_checkpoints = true;
    int rc = ferry_store_resource_list(st, c->run->id, &res, &nres, err);
    for (int i = 0; rc == FERRY_OK && i < nres; i++) {
        if (!ferry_checkpoint_mode_has_route(res[i].mode)) continue;
        const char *route = res[i].route[0] ? res[i].route : res[i].resource;
        bool has = false;
        rc = save_plan_route(c, &res[i], route, completed, &has, err);
        if (rc != FERRY_OK || has) continue;
        struct ferry_checkpoint *cps = NULL;
        int ncp = 0;
        rc = ferry_store_run_checkpoints(st, c->run->id, res[i].resource, &cps, &ncp, err);
        for (int k = 0; rc == FERRY_OK && k < ncp; k++) {
            /* A run that read nothing new ends its shard with a position that only says
             * "done": there is nothing to carry, and the route keeps where it was. */
            if (!ferry_checkpoint_carries_progress(cps[k].position)) continue;
            rc = ferry_store_route_checkpoint_save(st, c->run->pipeline, c->run->version, route,
                                                   cps[k].shard, cps[k].position, c->run->id, err);
        }
        ferry_checkpoints_free(cps, ncp);
    }
    ferry_free(res);
    return rc;
}

static int set_run_state(struct fold_ctx *c, enum ferry_run_state s, const char *msg,
                         struct ferry_error *err)
{
    return ferry_store_run_set_state(c->tr->st, c->ev->run_id, c->ev->attempt, s, msg, err);
}

static int fold_run_end(struct fold_ctx *c, const char *type, struct ferry_error *err)
{
    if (ferry_run_state_is_final(c->run->state)) return FERRY_OK; /* the first end wins */
    /* Requested again since this end was recorded (the reaper's retry: it fails the run in
     * the store, publishes run.failed, then requeues at once): the end is already history. */
    if (c->run->state == FERRY_RUN_REQUESTED) return FERRY_OK;
    /* The attempt's uncommitted counts: kept when it ended committed (completed, or paused
     * after a commit), taken back when its transaction was rolled back. */
    bool committed = strcmp(type, FERRY_EV_RUN_COMPLETED) == 0 ||
                     (strcmp(type, FERRY_EV_RUN_PAUSED) == 0 &&
                      json_is_true(json_object_get(c->p, "committed")));
    int urc = ferry_store_uncommitted_settle(c->tr->st, c->ev->run_id, c->ev->attempt, false,
                                             !committed, err);
    if (urc != FERRY_OK) return urc;
    if (strcmp(type, FERRY_EV_RUN_COMPLETED) == 0) {
        int rc = advance_routes(c, true, err);
        /* on_resource_error: continue - committed, with failed resources (their errors are
         * on the resources; the run's message names them) */
        if (json_is_true(json_object_get(c->p, "partial"))) {
            const char *msg = jstr(c->p, "message");
            return rc == FERRY_OK ? set_run_state(c, FERRY_RUN_PARTIAL, msg[0] ? msg : "partial", err)
                                  : rc;
        }
        return rc == FERRY_OK ? set_run_state(c, FERRY_RUN_COMPLETED, NULL, err) : rc;
    }
    if (strcmp(type, FERRY_EV_RUN_PAUSED) == 0) {
        int rc = FERRY_OK;
        if (json_is_true(json_object_get(c->p, "committed"))) rc = advance_routes(c, false, err);
        return rc == FERRY_OK ? set_run_state(c, FERRY_RUN_PAUSED, NULL, err) : rc;
    }
    if (strcmp(type, FERRY_EV_RUN_FAILED) == 0) {
        const char *msg = jstr(c->p, "message");
        if (msg[0] == '\0') msg = jstr(c->p, "code");
        return set_run_state(c, FERRY_RUN_FAILED, msg[0] ? msg : "failed", err);
    }
    return set_run_state(c, FERRY_RUN_CANCELED, NULL, err);
}

static int fold_resource(struct fold_ctx *c, const char *type, struct ferry_error *err)
{
    const struct ferry_event *ev = c->ev;
    if (ev->resource[0] == '\0') {
        ferry_log(FERRY_LOG_WARN,
                  "tracker: event %lld (%s of run %lld) names no resource;"
                  " skipped",
                  (long long)ev->seq, type, (long long)ev->run_id);
        return FERRY_OK;
    }
    if (strcmp(type, FERRY_EV_RESOURCE_STARTED) == 0) {
        struct ferry_resource_state rs;
        memset(&rs, 0, sizeof rs);
        snprintf(rs.resource, sizeof rs.resource, "%s", ev->resource);
        snprintf(rs.mode, sizeof rs.mode, "%s", jstr(c->p, "mode"));
        snprintf(rs.write, sizeof rs.write, "%s", jstr(c->p, "write"));
        snprintf(rs.route, sizeof rs.route, "%s", jstr(c->p, "route"));
        snprintf(rs.state, sizeof rs.state, "running");
        rs.rows_estimate = jint(c->p, "rows_estimate");
        return ferry_store_resource_upsert(c->tr->st, ev->run_id, &rs, err);
    }
    bool failed = strcmp(type, FERRY_EV_RESOURCE_FAILED) == 0;
    const char *msg = failed ? jstr(c->p, "message") : NULL;
    if (failed && msg[0] == '\0') msg = jstr(c->p, "code");
    const char *bound = failed ? "" : jstr(c->p, "bound");
    int rc = bound[0] ? ferry_store_resource_set_bound(c->tr->st, ev->run_id, ev->resource, bound, err)
                      : FERRY_OK;
    if (rc != FERRY_OK) return rc;
    return ferry_store_resource_set_state(c->tr->st, ev->run_id, ev->resource,
                                          failed ? "failed" : "completed", msg, err);
}

#define SKIP_SAMPLES_MAX 20  /* per resource, lowest shards first */
#define SKIP_TEXT_MAX 300     /* bytes of one sample's "at" or "reason" */

/* A short copy of a sample's text: cut at a character boundary. */
static json_t *short_text(const char *s)
{
    size_t n = strlen(s);
    if (n <= SKIP_TEXT_MAX) return json_string(s);
    n = SKIP_TEXT_MAX;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return json_stringn(s, n);
}

/* resource.rows_skipped: the shard's report replaces its earlier one (a resumed shard is
 * counted again from its start), so redelivery and later attempts never count twice. */
static int fold_skipped(struct fold_ctx *c, struct ferry_error *err)
{
    const struct ferry_event *ev = c->ev;
    if (ev->resource[0] == '\0') return FERRY_OK;
    int64_t shard = jint(c->p, "shard"), count = jint(c->p, "count");
    char *old = NULL;
    int rc = ferry_store_resource_skips_get(c->tr->st, ev->run_id, ev->resource, &old, err);
    if (rc != FERRY_OK) return rc;
    json_t *root = old ? json_loads(old, 0, NULL) : NULL;
    ferry_free(old);
    if (!json_is_object(root)) {
        json_decref(root);
        root = json_pack("{s:o,s:o}", "shards", json_object(), "samples", json_array());
    }
    json_t *shards = json_object_get(root, "shards"), *samples = json_object_get(root, "samples");
    if (!json_is_object(shards) || !json_is_array(samples)) {
        json_decref(root);
        return ferry_error_set(err, FERRY_ENOMEM, "tracker", "out of memory");
    }
    char key[24];
    snprintf(key, sizeof key, "%" PRId64, shard);
    json_object_set_new(shards, key, json_integer(count));
    /* Keep the other shards' samples, replace this shard's, order by shard, keep the first. */
    json_t *merged = json_array();
    size_t i;
    json_t *v;
    json_t *fresh = json_object_get(c->p, "samples");
    bool placed = false;
    json_array_foreach(samples, i, v)
    {
        int64_t s = jint(v, "shard");
        if (s == shard) continue;
        if (s > shard && !placed) {
            size_t k;
            json_t *f;
            json_array_foreach(fresh, k, f)
                json_array_append_new(merged, json_pack("{s:I,s:o,s:o}", "shard", (json_int_t)shard,
                                                        "at", short_text(jstr(f, "at")), "reason",
                                                        short_text(jstr(f, "reason"))));
            placed = true;
        }
        json_array_append(merged, v);
    }
    if (!placed) {
        size_t k;
        json_t *f;
        json_array_foreach(fresh, k, f)
            json_array_append_new(merged, json_pack("{s:I,s:o,s:o}", "shard", (json_int_t)shard,
                                                    "at", short_text(jstr(f, "at")), "reason",
                                                    short_text(jstr(f, "reason"))));
    }
    while (json_array_size(merged) > SKIP_SAMPLES_MAX)
        json_array_remove(merged, json_array_size(merged) - 1);
    json_object_set_new(root, "samples", merged);
    int64_t total = 0;
    const char *k;
    json_object_foreach(shards, k, v) total += json_integer_value(v);
    char *text = dump_json(root);
    json_decref(root);
    if (text == NULL) return ferry_error_set(err, FERRY_ENOMEM, "tracker", "out of memory");
    rc = ferry_store_resource_skips_put(c->tr->st, ev->run_id, ev->resource, total, text, err);
    ferry_free(text);
    return rc;
}

static int fold_counter(struct fold_ctx *c, bool diverged, struct ferry_error *err)
{
    const struct ferry_event *ev = c->ev;
    int64_t v = diverged ? 0 : 1, d = diverged ? 1 : 0;
    int rc = ferry_store_run_add_counts(c->tr->st, ev->run_id, 0, 0, 0, v, d, err);
    if (rc == FERRY_OK && ev->resource[0])
        rc = ferry_store_resource_add_counts(c->tr->st, ev->run_id, ev->resource, 0, 0, 0, v, d,
                                             err);
    return rc;
}

static int rule_verified(struct fold_ctx *c, struct ferry_error *err)
{
    return fold_counter(c, false, err);
}

static int rule_divergence(struct fold_ctx *c, struct ferry_error *err)
{
    return fold_counter(c, true, err);
}

static int rule_committed(struct fold_ctx *c, struct ferry_error *err)
{
    c->tr->group_moves_checkpoints = true;
    int rc = ferry_store_pending_promote(c->tr->st, c->ev->run_id, c->ev->attempt, err);
    if (rc != FERRY_OK) return rc;
    return ferry_store_uncommitted_settle(c->tr->st, c->ev->run_id, c->ev->attempt, false, false,
                                          err);
}

/* The reaper fenced a silent worker (control/reaper.c) and failed the run in the store, so
 * the run.failed it publishes next finds the run ended and settles nothing: the lost
 * attempt's uncommitted counts are taken back here (its transaction died with it; should
 * it have committed, a new attempt raises the counters to the destination's sums). The
 * event carries the fencing attempt: every attempt before it. */
static int rule_lost(struct fold_ctx *c, struct ferry_error *err)
{
    return ferry_store_uncommitted_settle(c->tr->st, c->ev->run_id, c->ev->attempt, true, true,
                                          err);
}

static int rule_heartbeat(struct fold_ctx *c, struct ferry_error *err)
{
    return ferry_store_run_heartbeat(c->tr->st, c->ev->run_id, c->ev->attempt, err);
}

static int rule_started(struct fold_ctx *c, struct ferry_error *err)
{
    return ferry_run_state_is_final(c->run->state) ? FERRY_OK
                                                   : set_run_state(c, FERRY_RUN_RUNNING, NULL, err);
}

static int rule_resource(struct fold_ctx *c, struct ferry_error *err)
{
    return fold_resource(c, c->ev->type, err);
}

static int rule_run_end(struct fold_ctx *c, struct ferry_error *err)
{
    return fold_run_end(c, c->ev->type, err);
}

typedef int (*fold_rule)(struct fold_ctx *c, struct ferry_error *err);

/* The rule of an event type; NULL for the types that change nothing (run.requested,
 * batch.buffered, batch.encoded_integrity_verified, watermarks...), which
 * fold_one passes over before parsing their payload or reading their run. */
static fold_rule rule_of(const char *t)
{
    static const struct {
        const char *type;
        fold_rule fn;
    } rules[] = {
        {FERRY_EV_BATCH_WRITTEN, fold_batch_written},
        {FERRY_EV_BATCH_VERIFIED, rule_verified},
        {FERRY_EV_RESOURCE_ROWS_SKIPPED, fold_skipped},
        {FERRY_EV_BATCH_DIVERGENCE, rule_divergence},
        {FERRY_EV_SINK_COMMITTED, rule_committed},
        {FERRY_EV_RUN_HEARTBEAT, rule_heartbeat},
        {FERRY_EV_WORKER_LOST, rule_lost},
        {FERRY_EV_RUN_STARTED, rule_started},
        {FERRY_EV_RESOURCE_STARTED, rule_resource},
        {FERRY_EV_RESOURCE_COMPLETED, rule_resource},
        {FERRY_EV_RESOURCE_FAILED, rule_resource},
        {FERRY_EV_RUN_COMPLETED, rule_run_end},
        {FERRY_EV_RUN_PAUSED, rule_run_end},
        {FERRY_EV_RUN_FAILED, rule_run_end},
        {FERRY_EV_RUN_CANCELED, rule_run_end},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(t, rules[i].type) == 0) return rules[i].fn;
    return NULL;
}

/* Folds one event inside the group transaction. Bad input (unknown run, payload that is
 * not an object, stale attempt) is skipped, so one poisoned event cannot stop the tracker;
 * a store error aborts the group, which is retried. */
static int fold_one(struct ferry_tracker *tr, const struct ferry_event *ev, struct ferry_error *err)
{
    fold_rule rule = rule_of(ev->type);
    if (ev->run_id == 0 || rule == NULL) return FERRY_OK;
    json_error_t je;
    json_t *p = json_loads(ev->payload ? ev->payload : "{}", 0, &je);
    if (!json_is_object(p)) {
        ferry_log(FERRY_LOG_WARN,
                  "tracker: event %lld (%s of run %lld): payload is not a JSON"
                  " object; skipped",
                  (long long)ev->seq, ev->type, (long long)ev->run_id);
        json_decref(p);
        return FERRY_OK;
    }
    struct ferry_run_info run;
    struct ferry_error gerr;
    int rc = ferry_store_run_get(tr->st, ev->run_id, &run, &gerr);
    if (rc == FERRY_ENOTFOUND) {
        ferry_log(FERRY_LOG_WARN,
                  "tracker: event %lld (%s) is about run %lld, which the state"
                  " store does not know; skipped",
                  (long long)ev->seq, ev->type, (long long)ev->run_id);
        rc = FERRY_OK;
    } else if (rc != FERRY_OK) {
        if (err) *err = gerr;
    } else if (ev->attempt != run.attempt) {
        ferry_log(FERRY_LOG_DEBUG,
                  "tracker: event %lld (%s of run %lld) is from attempt %d, the"
                  " current attempt is %d; ignored (fenced)",
                  (long long)ev->seq, ev->type, (long long)ev->run_id, ev->attempt, run.attempt);
    } else {
        struct fold_ctx c = {.tr = tr, .ev = ev, .run = &run, .p = p};
        rc = rule(&c, err);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, "tracker: folding event %lld (%s of run %lld)",
                               (long long)ev->seq, ev->type, (long long)ev->run_id);
    }
    ferry_run_info_clear(&run);
    json_decref(p);
    return rc;
}

static int64_t get_folded(struct ferry_tracker *tr)
{
    pthread_mutex_lock(&tr->lock);
    int64_t v = tr->folded;
    pthread_mutex_unlock(&tr->lock);
    return v;
}

static void set_folded(struct ferry_tracker *tr, int64_t seq)
{
    pthread_mutex_lock(&tr->lock);
    if (seq > tr->folded) tr->folded = seq;
    pthread_cond_broadcast(&tr->cond);
    pthread_mutex_unlock(&tr->lock);
}

/* One transaction: the events of the group past the mark, then the new mark. */
static int fold_group(struct ferry_tracker *tr, const struct ferry_event *evs, int n,
                      struct ferry_error *err)
{
    int64_t last = 0;
    for (int i = 0; i < n; i++)
        if (evs[i].seq > last) last = evs[i].seq;
    if (last <= get_folded(tr)) return FERRY_OK; /* all redelivered */
    int rc = ferry_store_begin(tr->st, err);
    if (rc != FERRY_OK) return rc;
    int64_t mark = 0;
    tr->group_moves_checkpoints = false;
    rc = ferry_store_mark_get(tr->st, tr->consumer, &mark, err);
    int64_t start = mark;
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        if (evs[i].seq <= mark) continue;
        rc = fold_one(tr, &evs[i], err);
        if (rc == FERRY_OK) mark = evs[i].seq;
    }
    if (rc == FERRY_OK && mark > start) rc = ferry_store_mark_set(tr->st, tr->consumer, mark, err);
    bool saving = tr->group_moves_checkpoints;
    if (rc == FERRY_OK && saving) rc = ferry_failpoint_check("before_checkpoint_save", err);
    if (rc == FERRY_OK)
        rc = ferry_store_commit(tr->st, err);
    else
        ferry_store_rollback(tr->st);
    if (rc != FERRY_OK) return rc;
    set_folded(tr, mark);
    return saving ? ferry_failpoint_check("after_checkpoint_save", err) : FERRY_OK;
}

int ferry__tracker_fold_events(struct ferry_tracker *tr, const struct ferry_event *evs, int n,
                               struct ferry_error *err)
{
    pthread_mutex_lock(&tr->fold_lock);
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < n; i += GROUP_MAX)
        rc = fold_group(tr, evs + i, n - i < GROUP_MAX ? n - i : GROUP_MAX, err);
    pthread_mutex_unlock(&tr->fold_lock);
    return rc;
}

/* Reads up to GROUP_MAX events after `after`, waiting up to timeout_ms when a bus is used. */
static int read_events(struct ferry_tracker *tr, int64_t after, int timeout_ms,
                       struct ferry_event **evs, int *n, struct ferry_error *err)
{
    if (tr->bus) return ferry_bus_fetch(tr->bus, after, 0, GROUP_MAX, timeout_ms, evs, n, err);
    pthread_mutex_lock(&tr->fold_lock);
    int rc = ferry_store_event_read(tr->st, after, 0, GROUP_MAX, evs, n, err);
    pthread_mutex_unlock(&tr->fold_lock);
    return rc;
}

int ferry_tracker_fold_available(struct ferry_tracker *tr, struct ferry_error *err)
{
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        int rc = read_events(tr, get_folded(tr), 0, &evs, &n, err);
        if (rc == FERRY_OK && n > 0) rc = ferry__tracker_fold_events(tr, evs, n, err);
        ferry_events_free(evs, n);
        if (rc != FERRY_OK || n == 0) return rc;
    }
}

/* ---- lifecycle ---- */

int ferry_tracker_open(const char *state_path, struct ferry_bus *bus, struct ferry_tracker **out,
                       struct ferry_error *err)
{
    *out = NULL;
    struct ferry_tracker *tr = ferry_calloc(1, sizeof *tr);
    if (tr == NULL) return ferry_error_set(err, FERRY_ENOMEM, "tracker", "tracker: out of memory");
    /* A mark is a sequence of one bus: each bus keeps its own (bus/bus.h mark_tag). */
    if (bus && bus->mark_tag[0])
        snprintf(tr->consumer, sizeof tr->consumer, "%s@%s", CONSUMER, bus->mark_tag);
    else
        snprintf(tr->consumer, sizeof tr->consumer, "%s", CONSUMER);
    int rc = ferry_store_open(state_path, &tr->st, err);
    if (rc == FERRY_OK) rc = ferry_store_mark_get(tr->st, tr->consumer, &tr->folded, err);
    if (rc != FERRY_OK) {
        ferry_store_close(tr->st);
        ferry_free(tr);
        ferry_error_prefix(err, "tracker");
        return rc;
    }
    tr->bus = bus;
    const char *chaos = getenv("FERRY_CHAOS_BUS");
    if (chaos != NULL && chaos[0] != '\0' && strcmp(chaos, "0") != 0) {
        const char *seed = getenv("FERRY_SEED");
        tr->chaos_path = ferry_strdup(state_path);
        tr->chaos_state = seed ? (unsigned)strtoul(seed, NULL, 10) + 1u : (unsigned)ferry_now_mono_us();
        if (tr->chaos_state == 0) tr->chaos_state = 0x85ebca6bu;
    }
    pthread_mutex_init(&tr->fold_lock, NULL);
    pthread_mutex_init(&tr->lock, NULL);
    ferry__cond_init_mono(&tr->cond);
    *out = tr;
    return FERRY_OK;
}

static bool stopping(struct ferry_tracker *tr)
{
    pthread_mutex_lock(&tr->lock);
    bool s = tr->stop;
    pthread_mutex_unlock(&tr->lock);
    return s;
}

/* Sleeps up to POLL_MS unless stop is asked. */
static void pause_a_little(struct ferry_tracker *tr)
{
    struct timespec ts = ferry__mono_after_us((int64_t)POLL_MS * 1000);
    pthread_mutex_lock(&tr->lock);
    while (!tr->stop)
        if (pthread_cond_timedwait(&tr->cond, &tr->lock, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&tr->lock);
}

/* Chaos restart: what a new tracker process would do, under fold_lock. */
static void chaos_restart(struct ferry_tracker *tr)
{
    unsigned x = tr->chaos_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    tr->chaos_state = x;
    if (x % 5 != 0) return;
    pthread_mutex_lock(&tr->fold_lock);
    struct ferry_store *st = NULL;
    struct ferry_error e;
    int64_t mark = 0;
    if (ferry_store_open(tr->chaos_path, &st, &e) == FERRY_OK &&
        ferry_store_mark_get(st, tr->consumer, &mark, &e) == FERRY_OK) {
        ferry_store_close(tr->st);
        tr->st = st;
        pthread_mutex_lock(&tr->lock);
        tr->folded = mark;
        pthread_mutex_unlock(&tr->lock);
    } else {
        ferry_store_close(st);
        ferry_log(FERRY_LOG_WARN, "chaos tracker restart: %s", e.message);
    }
    pthread_mutex_unlock(&tr->fold_lock);
}

static void *tracker_main(void *arg)
{
    struct ferry_tracker *tr = arg;
    bool failing = false;
    while (!stopping(tr)) {
        struct ferry_event *evs = NULL;
        int n = 0;
        struct ferry_error e;
        ferry_error_clear(&e);
        int rc = read_events(tr, get_folded(tr), POLL_MS, &evs, &n, &e);
        if (rc == FERRY_OK && n > 0) rc = ferry__tracker_fold_events(tr, evs, n, &e);
        ferry_events_free(evs, n);
        if (rc == FERRY_OK && n > 0 && tr->chaos_path) chaos_restart(tr);
        if (rc != FERRY_OK) {
            pthread_mutex_lock(&tr->lock);
            if (tr->first_rc == FERRY_OK) {
                tr->first_rc = rc;
                tr->first_err = e;
            }
            pthread_mutex_unlock(&tr->lock);
            if (!failing) ferry_log(FERRY_LOG_ERROR, "%s (retrying)", e.message);
            failing = true;
            pause_a_little(tr);
            continue;
        }
        if (failing) ferry_log(FERRY_LOG_INFO, "tracker: folding again");
        failing = false;
        if (n == 0 && tr->bus == NULL) pause_a_little(tr);
    }
    return NULL;
}

int ferry_tracker_start(struct ferry_tracker *tr, struct ferry_error *err)
{
    pthread_mutex_lock(&tr->lock);
    bool already = tr->running;
    tr->stop = false;
    pthread_mutex_unlock(&tr->lock);
    if (already) return FERRY_OK;
    int e = pthread_create(&tr->thread, NULL, tracker_main, tr);
    if (e != 0)
        return ferry_error_set(err, FERRY_ENOMEM, "tracker",
                               "tracker: cannot start its thread:"
                               " %s",
                               strerror(e));
    pthread_mutex_lock(&tr->lock);
    tr->running = true;
    pthread_mutex_unlock(&tr->lock);
    return FERRY_OK;
}

int ferry_tracker_stop(struct ferry_tracker *tr, struct ferry_error *err)
{
    pthread_mutex_lock(&tr->lock);
    bool was_running = tr->running;
    tr->stop = true;
    pthread_cond_broadcast(&tr->cond);
    pthread_mutex_unlock(&tr->lock);
    if (was_running) {
        if (tr->bus && tr->bus->vt->wake) tr->bus->vt->wake(tr->bus);
        pthread_join(tr->thread, NULL);
        pthread_mutex_lock(&tr->lock);
        tr->running = false;
        pthread_mutex_unlock(&tr->lock);
    }
    int rc = ferry_tracker_fold_available(tr, err);
    pthread_mutex_lock(&tr->lock);
    if (tr->first_rc != FERRY_OK) {
        rc = tr->first_rc;
        if (err) *err = tr->first_err;
        tr->first_rc = FERRY_OK;
    }
    pthread_mutex_unlock(&tr->lock);
    return rc;
}

int ferry_tracker_wait(struct ferry_tracker *tr, int64_t seq, int timeout_ms,
                       struct ferry_error *err)
{
    int64_t deadline = ferry_now_mono_us() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
    for (;;) {
        pthread_mutex_lock(&tr->lock);
        bool running = tr->running;
        pthread_mutex_unlock(&tr->lock);
        /* Without the thread, the caller's wait does the folding itself. */
        if (!running) {
            int rc = ferry_tracker_fold_available(tr, err);
            if (rc != FERRY_OK) return rc;
        }
        int64_t now = ferry_now_mono_us();
        int64_t slice = running ? deadline - now : 20000;
        if (slice > deadline - now) slice = deadline - now;
        pthread_mutex_lock(&tr->lock);
        if (tr->folded < seq && slice > 0) {
            struct timespec ts = ferry__mono_after_us(slice);
            while (tr->folded < seq)
                if (pthread_cond_timedwait(&tr->cond, &tr->lock, &ts) == ETIMEDOUT) break;
        }
        int64_t folded = tr->folded;
        pthread_mutex_unlock(&tr->lock);
        if (folded >= seq) return FERRY_OK;
        if (ferry_now_mono_us() >= deadline)
            return ferry_error_set(err, FERRY_ETIMEOUT, "tracker",
                                   "tracker: event %lld not folded within %d ms (folded up to"
                                   " %lld)",
                                   (long long)seq, timeout_ms, (long long)folded);
    }
}

int64_t ferry_tracker_folded_seq(struct ferry_tracker *tr)
{
    return get_folded(tr);
}

void ferry_tracker_close(struct ferry_tracker *tr)
{
    if (tr == NULL) return;
    pthread_mutex_lock(&tr->lock);
    bool running = tr->running;
    pthread_mutex_unlock(&tr->lock);
    if (running) ferry_tracker_stop(tr, NULL);
    ferry_store_close(tr->st);
    ferry_free(tr->chaos_path);
    pthread_cond_destroy(&tr->cond);
    pthread_mutex_destroy(&tr->lock);
    pthread_mutex_destroy(&tr->fold_lock);
    ferry_free(tr);
}
