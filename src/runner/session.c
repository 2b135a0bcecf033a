/* runner/session.c - the destination session of a run: prepare every target, begin,
 * commit (with its failpoints and the fencing heartbeat before it) or abort, and close.
 * Whether a paused run commits is decided here too. Calls: run.c, the sink, store.
 * The sessions of the copy phase's other lanes are committed first and closed with it
 * (lanes.c). Called by runner.c. */
#include <string.h>
#include "ferry/core.h"
#include "ferry/failpoint.h"
#include "runner/run.h"

int ferry__session_begin(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = FERRY_OK;
    ferry__plan_prepare_ahead(r, r->sink_ctx, 0);
    for (int i = 0; i < r->n_res && rc == FERRY_OK; i++) {
        /* other lanes prepare their own targets on their own instances (lanes.c) */
        if (r->res[i].lane != 0 || r->res[i].gone) continue;
        rc = p->sink_vt->prepare(r->sink_ctx, &r->res[i].target, err);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, "%s sink: prepare %s", p->sink_type, r->res[i].target.table);
    }
    if (rc != FERRY_OK) return rc;
    struct ferry_session_info si = {.pipeline = r->dest_key,
                                    .version = p->version,
                                    .run_id = r->run_id,
                                    .attempt = r->attempt,
                                    .resuming = r->resumed || r->shard_mode};
    rc = p->sink_vt->begin(r->sink_ctx, &si, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: open session", p->sink_type);
    r->session_open = true;
    return FERRY_OK;
}

bool ferry__session_should_commit(const struct run *r, int rc)
{
    if (rc == FERRY_OK) return true;
    if (rc != FERRY_EPAUSED) return false;
    /* A pause of `replace` into a sink whose every commit publishes the whole table commits
     * nothing (it would publish half a table): the session is aborted and the resumed run
     * reads again from the start. */
    if (r->p->write == FERRY_WRITE_REPLACE && r->n_res > 0 && r->res[0].caps.replace_commits_once)
        return false;
    /* Likewise a run whose plan read shards without key order (commit_once): a commit now
     * would make half-read shards durable with no point to resume them from. */
    for (int i = 0; i < r->n_res; i++)
        if (r->res[i].commit_once) return false;
    return true;
}

int ferry__session_commit(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int rc = ferry_failpoint_check("before_sink_commit", err);
    if (rc != FERRY_OK) return rc;
    /* A worker reaped while it was stopped must not commit: its attempt is fenced. A shard
     * worker never beats for the run (its coordinator does); its tasks were fenced by token. */
    if (!r->shard_mode) rc = ferry_store_run_heartbeat(r->st, r->run_id, r->attempt, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry__lanes_commit(r, err); /* the copy phase's other sessions */
    if (rc != FERRY_OK) return rc;
    rc = p->sink_vt->commit(r->sink_ctx, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s sink: commit", p->sink_type);
    r->session_open = false;
    rc = ferry_failpoint_check("after_sink_commit", err);
    if (rc != FERRY_OK) return rc;
    return ferry__run_emit(r, NULL, FERRY_EV_SINK_COMMITTED, "{}", &r->committed_seq, err);
}

/* The destination is released before the run's final event: whoever sees the run
 * completed (runs watch, the API) finds no ferry connection or lock left on it. */
void ferry__session_close(struct run *r)
{
    ferry__lanes_close(r);
    if (r->session_open) {
        r->p->sink_vt->abort(r->sink_ctx);
        r->session_open = false;
    }
    if (r->sink_ctx) {
        r->p->sink_vt->close(r->sink_ctx);
        r->sink_ctx = NULL;
    }
}
