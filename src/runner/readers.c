/* runner/readers.c - the source's reader instances of an attempt and the one snapshot
 * they share: `parallelism` opens extra instances (no more than the shards left to read),
 * the planning instance exports a snapshot and every reader uses it. A distributed run's
 * coordinator saves that snapshot for its shard workers, which import it; the readers of
 * the copy phase's other lanes (lanes.c) import it too. Calls: run.c, the source, store.
 * Called by runner.c. */
#include <inttypes.h>
#include <string.h>
#include "ferry/core.h"
#include "runner/run.h"

/* Shard mode: a reader instance of its own that imports the coordinator's snapshot; when
 * that fails (the coordinator is gone, and its snapshot with it) the shard reads a snapshot
 * of its own, as a resumed attempt does. */
static int open_shard_reader(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    r->readers = ferry_calloc(1, sizeof *r->readers);
    if (r->readers == NULL) return ferry__run_oom(err);
    int rc = p->source_vt->open(p->source, &r->own_reader, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s source: shard reader", p->source_type);
    r->readers[0] = r->own_reader;
    r->n_readers = 1;
    if (p->source_vt->use_snapshot == NULL) return FERRY_OK;
    /* Exported by this attempt's coordinator (an older attempt's died with its process). */
    char *id = NULL;
    int saved_by = 0;
    if (ferry_store_run_snapshot_get(r->st, r->run_id, &id, &saved_by, NULL) == FERRY_OK &&
        id != NULL && saved_by != r->attempt) {
        ferry_free(id);
        id = NULL;
    }
    if (id == NULL) return FERRY_OK;
    struct ferry_error e;
    if (p->source_vt->use_snapshot(r->own_reader, id, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN,
                  "run %" PRId64 ": the coordinator's snapshot %s cannot be imported (%s); this "
                  "shard reads a newer snapshot",
                  r->run_id, id, e.message);
        p->source_vt->close(r->own_reader);
        r->own_reader = NULL;
        r->readers[0] = NULL;
        rc = p->source_vt->open(p->source, &r->own_reader, err);
        if (rc == FERRY_OK) r->readers[0] = r->own_reader;
    }
    ferry_free(id);
    return rc;
}

/* Opens the extra source instances `parallelism` asks for (no more than the shards left
 * to read in any resource), then, when the source can, exports one snapshot from the
 * planning instance and has every reader use it, so that all shards of all resources of
 * this attempt read the same moment. */
int ferry__readers_open(struct run *r, struct ferry_error *err)
{
    struct ferry_pipeline_spec *p = r->p;
    int want = 1;
    for (int i = 0; i < r->n_res; i++) {
        int left = 0;
        for (int s = 0; s < r->res[i].n_shards; s++)
            if (!ferry__run_position_done(r->res[i].resume[s])) left++;
        if (left > want) want = left;
    }
    if (want > r->parallelism) want = (int)r->parallelism;
    /* A distributed run's process works one task (one shard) at a time. */
    if (r->distributed || r->shard_mode) want = 1;
    if (r->shard_mode) return open_shard_reader(r, err);
    r->readers = ferry_calloc((size_t)want, sizeof *r->readers);
    if (r->readers == NULL) return ferry__run_oom(err);
    r->readers[0] = r->src_ctx;
    r->n_readers = 1;
    int rc = FERRY_OK;
    while (r->n_readers < want) {
        rc = p->source_vt->open(p->source, &r->readers[r->n_readers], err);
        if (rc != FERRY_OK)
            return ferry_error_prefix(err, "%s source: reader %d of %d", p->source_type,
                                      r->n_readers + 1, want);
        r->n_readers++;
    }
    if (p->source_vt->snapshot == NULL || p->source_vt->use_snapshot == NULL) return FERRY_OK;
    char *id = NULL;
    rc = p->source_vt->snapshot(r->src_ctx, &id, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s source: snapshot", p->source_type);
    for (int i = 0; i < r->n_readers && rc == FERRY_OK; i++) {
        rc = p->source_vt->use_snapshot(r->readers[i], id, err);
        if (rc != FERRY_OK)
            ferry_error_prefix(err, "%s source: reader %d: using snapshot %s", p->source_type,
                               i + 1, id);
    }
    /* Shard workers of other processes import it while this process keeps it open. */
    if (rc == FERRY_OK && r->distributed) {
        rc = ferry_store_run_snapshot_set(r->st, r->run_id, r->attempt, id, err);
    }
    /* The copy phase's other lanes open their readers on it too (lanes.c). */
    r->snapshot_id = id;
    return rc;
}

void ferry__readers_close(struct run *r)
{
    for (int i = 1; i < r->n_readers; i++)
        r->p->source_vt->close(r->readers[i]);
    if (r->own_reader) r->p->source_vt->close(r->own_reader);
    r->own_reader = NULL;
    ferry_free(r->readers);
    r->readers = NULL;
    r->n_readers = 0;
    ferry_free(r->snapshot_id);
    r->snapshot_id = NULL;
}
