/* runner/saved.c - cursor.checkpoint_saved: tells the event stream where each shard of the
 * run would resume, each time that point moves. The tracker saves run checkpoints when it
 * folds batch.written (durable) and sink.committed; this file reads them back from the
 * store and publishes each one not reported yet: every second from the control thread,
 * and once more after the sink's commit is folded, before the run's final event (which
 * stays the attempt's last). Route checkpoints move with run.completed (or a committed
 * run.paused): that event reports them. Shard workers leave it to their coordinator.
 * Calls: run.c, store, the position codec. Called by control.c and runner.c (never at the same time). */
#include <string.h>
#include "checkpoint/position.h"
#include "ferry/core.h"
#include "runner/run.h"

static int publish(struct run *r, const char *resource, int shard, const char *position)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b, "{\"shard\":%d,\"position\":%s}", shard, position);
    int rc = b.data ? ferry__run_emit(r, resource, FERRY_EV_CHECKPOINT_SAVED, b.data, NULL, NULL)
                    : FERRY_ENOMEM;
    ferry_buf_release(&b);
    return rc;
}

/* Whether text is a position (what the store holds is one; anything else is not published
 * raw into a payload). Read with the codec (checkpoint/position.h). */
static bool is_position(const char *text)
{
    struct ferry_position p;
    bool yes = ferry_position_decode(text, strlen(text), &p, NULL) == FERRY_OK;
    ferry_position_clear(&p);
    return yes;
}

static void report_resource(struct run *r, struct resource_run *rr, struct ferry_store *st)
{
    if (rr->n_shards <= 0) return;
    if (rr->saved_seen == NULL) {
        rr->saved_seen = ferry_calloc((size_t)rr->n_shards, sizeof *rr->saved_seen);
        if (rr->saved_seen == NULL) return;
    }
    struct ferry_checkpoint *cps = NULL;
    int n = 0;
    if (ferry_store_run_checkpoints(st, r->run_id, rr->spec->table, &cps, &n, NULL) != FERRY_OK)
        return;
    for (int i = 0; i < n; i++) {
        int s = cps[i].shard;
        const char *pos = cps[i].position;
        if (s < 0 || s >= rr->n_shards || pos == NULL) continue;
        if (rr->saved_seen[s] && !strcmp(rr->saved_seen[s], pos)) continue;
        char *copy = ferry_strdup(pos);
        if (copy == NULL || !is_position(pos) || publish(r, rr->spec->table, s, pos) != FERRY_OK) {
            ferry_free(copy);
            continue;
        }
        ferry_free(rr->saved_seen[s]);
        rr->saved_seen[s] = copy;
    }
    ferry_checkpoints_free(cps, n);
}

void ferry__run_report_saved(struct run *r, struct ferry_store *st)
{
    if (st == NULL || r->shard_mode || r->run_id <= 0) return;
    for (int i = 0; i < r->n_res; i++)
        report_resource(r, &r->res[i], st);
}

void ferry__run_saved_free(struct resource_run *rr)
{
    for (int s = 0; rr->saved_seen && s < rr->n_shards; s++)
        ferry_free(rr->saved_seen[s]);
    ferry_free(rr->saved_seen);
    rr->saved_seen = NULL;
}
