/* pipeline/flow.c - the journey of one resource's rows: reader threads -> a row writer
 * each -> ready queue -> (transform thread -> write queue) -> writer (this thread) -> sink.
 *
 * Owns: the threads, row writers and queues of one resource (not the source instances:
 * the runner opens and closes them). Calls: the source's extract and cancel, the row
 * writer (batch/builder.h), transforms, the digest, the sink's apply, the bus. Called by
 * the runner once per resource of a run, inside an open sink session. */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include "batch/builder.h"
#include "batch/pool.h"
#include "bus/bus.h"
#include "checkpoint/position.h"
#include "ferry/core.h"
#include "ferry/digest.h"
#include "ferry/event.h"
#include "ferry/failpoint.h"
#include "pipeline/flow.h"
#include "pipeline/commit_group.h"
#include "pipeline/queue.h"
#include "pipeline/schema_change.h"

struct flow_run;

/* One reader thread: its source instance, its row writer, its outcome. */
struct reader {
    struct flow_run *fr;
    int index;
    void *ctx;
    struct ferry_row_writer *rw;
    atomic_int tick; /* the flow's tick fanned out (several readers) */
    int rc;
    struct ferry_error err;
    pthread_t thread;
    bool started;
};

struct flow_run {
    struct ferry_flow *f;
    struct ferry_queue *ready;
    struct ferry_queue *write; /* == ready when there is no transform stage */
    struct reader *readers;
    int n_readers;
    atomic_int next_shard; /* the next shard a reader takes */
    atomic_int running;    /* readers that have not finished (the last closes ready) */
    atomic_ullong seq;     /* the last batch seq handed out */
    pthread_mutex_t emit_lock; /* seq + push together: seq increases in queue order */
    pthread_mutex_t err_lock;
    int first_rc; /* the first reader error (not pause/cancel): it wins */
    struct ferry_error first_err;
    atomic_bool reader_stopped; /* a reader error set *stop: not the caller's cancel */
    atomic_int ticker_stop;
    int src_rc;
    struct ferry_error src_err;
    int tr_rc;
    struct ferry_error tr_err;
    const void *tag; /* the caller's run (schema_change.h): the readers' too */
    /* a commit group's member: batch events held until the group's next commit (each
     * payload a copy owned here) */
    struct ferry_event *held;
    int n_held, cap_held;
};

static bool position_done(const char *pos)
{
    return ferry_position_text_done(pos);
}

static void publish(struct ferry_flow *f, const char *type, const char *payload)
{
    struct ferry_error e;
    /* A lost event can only make ferry re-read, never skip: checkpoints advance only from
     * events that were stored. So a publish failure here is logged, not fatal, except for
     * batch.written which the writer checks itself. */
    if (ferry_bus_emit(f->bus, f->run_id, f->attempt, f->spec->table, type, payload, &e) !=
        FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "resource %s: could not publish %s: %s", f->spec->table, type,
                  e.message);
}

/* Row writer -> ready queue. Runs on a reader thread; blocks while the queue is full. The
 * seq the row writer stamped counts that writer's batches only: the flow's replaces it, and
 * is handed out under the same lock as the push so the writer pops increasing seqs. */
static int emit_batch(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct reader *rd = ctx;
    struct flow_run *fr = rd->fr;
    struct ferry_flow *f = fr->f;
    int64_t rows = b->length;
    size_t bytes = b->bytes;
    /* a slow or failing source, batch by batch (the failpoint's sleep is a slow read) */
    if (FERRY_FAILPOINT("before_queue_push") == FERRY_FP_ERROR) {
        ferry_batch_unref(b);
        return ferry_error_set(err, FERRY_EFAILPOINT, "failpoint",
                               "resource %s: failpoint before_queue_push", f->spec->table);
    }
    pthread_mutex_lock(&fr->emit_lock);
    uint64_t seq = (uint64_t)atomic_fetch_add(&fr->seq, 1) + 1;
    b->seq = seq;
    int rc = ferry_queue_push(fr->ready, b);
    pthread_mutex_unlock(&fr->emit_lock);
    if (rc != FERRY_OK) {
        ferry_batch_unref(b);
        return ferry_error_set(err, rc, "pipeline", "resource %s: pipeline stopped",
                               f->spec->table);
    }
    atomic_store(&f->queue_depth, ferry_queue_length(fr->ready));
    char payload[160];
    snprintf(payload, sizeof payload, "{\"seq\":%" PRIu64 ",\"rows\":%" PRId64 ",\"bytes\":%zu}",
             seq, rows, bytes);
    publish(f, FERRY_EV_BATCH_BUFFERED, payload);
    return FERRY_OK;
}

/* on_error: skip reports (one per shard with skipped records): counts and short samples,
 * never values, so they may go into events and run state. */
static void report_skipped(void *ctx, int shard, int64_t count, const char *samples_json)
{
    struct reader *rd = ctx;
    json_t *samples = samples_json ? json_loads(samples_json, 0, NULL) : NULL;
    if (!json_is_array(samples)) {
        json_decref(samples);
        samples = json_array();
    }
    json_t *p = json_pack("{s:i,s:I,s:o}", "shard", shard, "count", (json_int_t)count,
                          "samples", samples);
    char *text = p ? json_dumps(p, JSON_COMPACT) : NULL;
    if (text != NULL) publish(rd->fr->f, FERRY_EV_RESOURCE_ROWS_SKIPPED, text);
    free(text);
    json_decref(p);
}

static void cancel_readers(struct flow_run *fr, const struct reader *except)
{
    if (fr->f->src_vt->cancel == NULL) return;
    for (int i = 0; i < fr->n_readers; i++)
        if (&fr->readers[i] != except) fr->f->src_vt->cancel(fr->readers[i].ctx);
}

/* A reader failed: the first failure is the flow's error; the other readers stop at their
 * next row (through *stop) or in their blocking call (cancel). Batches already queued are
 * still written: their positions are valid. */
static void reader_failed(struct flow_run *fr, struct reader *rd)
{
    struct ferry_flow *f = fr->f;
    pthread_mutex_lock(&fr->err_lock);
    bool first = fr->first_rc == FERRY_OK;
    if (first) {
        fr->first_rc = rd->rc;
        fr->first_err = rd->err;
    }
    pthread_mutex_unlock(&fr->err_lock);
    if (!first || fr->n_readers < 2) return;
    /* Flag first: the writer must never see this stop without knowing it is ours. */
    atomic_store(&fr->reader_stopped, true);
    int expected = 0;
    if (!atomic_compare_exchange_strong(f->stop, &expected, FERRY_ECANCELED))
        atomic_store(&fr->reader_stopped, false); /* the caller stopped the run already */
    cancel_readers(fr, rd);
}

/* The last reader out decides how the input ended and closes the ready queue: the first
 * error, else cancel, else pause (the writer drains what is queued), else the end. */
static void reader_leave(struct flow_run *fr)
{
    if (atomic_fetch_sub(&fr->running, 1) != 1) return;
    int rc = fr->first_rc;
    if (rc != FERRY_OK) {
        fr->src_err = fr->first_err;
    } else {
        for (int i = 0; i < fr->n_readers; i++)
            if (fr->readers[i].rc == FERRY_ECANCELED) rc = FERRY_ECANCELED;
        for (int i = 0; i < fr->n_readers && rc == FERRY_OK; i++)
            if (fr->readers[i].rc == FERRY_EPAUSED) rc = FERRY_EPAUSED;
    }
    fr->src_rc = rc;
    ferry_queue_close(fr->ready, rc == FERRY_EPAUSED ? FERRY_OK : rc);
}

/* One shard: its saved position decoded here, once (a source never parses position
 * text), nothing when it says done, else extracted and flushed. */
static int read_shard(struct ferry_flow *f, struct reader *rd, int shard)
{
    const char *text = f->resume ? f->resume[shard] : NULL;
    struct ferry_position pos;
    ferry_position_init(&pos);
    if (text != NULL && ferry_position_decode(text, strlen(text), &pos, &rd->err) != FERRY_OK)
        return ferry_error_prefix(&rd->err, "resource %s: shard %d: the saved position",
                                  f->spec->table, shard);
    if (pos.done) {
        ferry_position_clear(&pos);
        return FERRY_OK;
    }
    /* Asked to stop between shards: do not start another one. */
    int rc = atomic_load(f->stop);
    if (rc == FERRY_OK) {
        ferry_rw_set_shard(rd->rw, shard);
        rc = f->src_vt->extract(rd->ctx, f->spec, f->schema, f->plan_json, shard,
                                text ? &pos : NULL, rd->rw, &rd->err);
    }
    ferry_position_clear(&pos);
    if (rc == FERRY_OK) rc = ferry_rw_flush(rd->rw, true, &rd->err);
    return rc;
}

static void *reader_main(void *arg)
{
    struct reader *rd = arg;
    struct flow_run *fr = rd->fr;
    struct ferry_flow *f = fr->f;
    ferry_schema_change_tag_set(fr->tag);
    int rc = FERRY_OK;
    while (rc == FERRY_OK) {
        int shard = atomic_fetch_add(&fr->next_shard, 1);
        if (shard >= f->n_shards) break;
        rc = read_shard(f, rd, shard);
    }
    if (rc == FERRY_EPAUSED) {
        /* The rows accepted so far are part of what the pause drains. */
        struct ferry_error e;
        int frc = ferry_rw_flush(rd->rw, false, &e);
        if (frc != FERRY_OK && frc != FERRY_EPAUSED) {
            rc = frc;
            rd->err = e;
        }
    }
    rd->rc = rc;
    atomic_fetch_add(&f->rows_read, ferry__rw_rows(rd->rw));
    if (rc != FERRY_OK && rc != FERRY_EPAUSED && rc != FERRY_ECANCELED) reader_failed(fr, rd);
    reader_leave(fr);
    return NULL;
}

/* Several readers: the runner's timer sets f->tick once; each reader's row writer needs
 * its own copy (a writer clears the flag it closes a batch on). */
static void *ticker_main(void *arg)
{
    struct flow_run *fr = arg;
    while (!atomic_load(&fr->ticker_stop)) {
        usleep(5000);
        if (atomic_exchange(&fr->f->tick, 0))
            for (int i = 0; i < fr->n_readers; i++)
                atomic_store(&fr->readers[i].tick, 1);
    }
    return NULL;
}

static void *transform_main(void *arg)
{
    struct flow_run *fr = arg;
    struct ferry_batch *b;
    while ((b = ferry_queue_pop(fr->ready)) != NULL) {
        struct ferry_batch *out;
        int rc = ferry_transforms_apply(fr->f->chain, b, &out, &fr->tr_err);
        if (rc == FERRY_OK) {
            rc = ferry_queue_push(fr->write, out);
            /* A refused push leaves the batch ours (the writer closed the queue). */
            if (rc != FERRY_OK) ferry_batch_unref(out);
        }
        if (rc != FERRY_OK) {
            if (fr->tr_rc == FERRY_OK && fr->tr_err.code == FERRY_OK)
                ferry_error_set(&fr->tr_err, rc, "transform", "transform stage stopped");
            fr->tr_rc = rc;
            ferry_queue_close(fr->ready, rc);
            ferry_queue_discard(fr->ready);
            break;
        }
    }
    ferry_queue_close(fr->write, fr->tr_rc);
    return NULL;
}

/* Flips one bit of a non-null value of the batch (failpoint bitflip): the sink must
 * notice. A flip in a null slot would be invisible by design, so nulls are skipped; a batch
 * of nulls only gets an operation byte flipped. */
static void flip_one_bit(struct ferry_batch *b)
{
    for (int c = 0; c < b->schema->n_fields; c++) {
        struct ferry_column *col = &b->columns[c];
        for (int64_t r = 0; r < b->length; r++) {
            if (ferry_col_is_null(b, c, r)) continue;
            int64_t i = b->offset + r;
            if (col->type == FERRY_TYPE_BOOL) {
                col->values[i >> 3] ^= (uint8_t)(1u << (i & 7));
                return;
            }
            if (col->values) {
                col->values[(size_t)i * (size_t)ferry_type_width(col->type)] ^= 0x01;
                return;
            }
            if (col->offsets && col->offsets[i + 1] > col->offsets[i]) {
                col->data[col->offsets[i]] ^= 0x01;
                return;
            }
        }
    }
    if (b->length > 0) b->ops[b->offset] ^= 0x01;
}

/* What a written batch leaves to record: its batch.written event (which moves the
 * checkpoint), the verified events and the counts. A sink with caps.durable_after_next
 * makes batch N durable only when its next apply (or settle) returns: the writer holds N's
 * record until then, so no checkpoint is saved as durable before the sink's data is. */
struct written {
    bool held;
    struct ferry_buf event; /* batch.written payload */
    char verified[96], encoded[96];
    int64_t rows, bytes;
};

static int hold_events(struct flow_run *fr, const struct ferry_event *evs, int n,
                       struct ferry_error *err);

/* Publishes evs[0..n) in one bus call (one store transaction on the in-process and PostgreSQL
 * buses). A failure that left a batch.written unstored fails the flow; one that only lost a
 * verified event is logged (the run's counters miss it, its checkpoints do not). */
static int publish_batch_events(struct flow_run *fr, struct ferry_event *evs, int n,
                                struct ferry_error *err)
{
    struct ferry_flow *f = fr->f;
    struct ferry_error e;
    int rc = ferry_bus_publish_n(f->bus, evs, n, &e);
    if (rc == FERRY_OK) return FERRY_OK;
    for (int i = 0; i < n; i++) {
        if (evs[i].seq == 0 && strcmp(evs[i].type, FERRY_EV_BATCH_WRITTEN) == 0) {
            if (err) *err = e;
            return rc;
        }
    }
    ferry_log(FERRY_LOG_WARN, "resource %s: could not publish: %s", f->spec->table, e.message);
    return FERRY_OK;
}

/* Records w's events: batch.written, batch.integrity_verified and (when the sink gave one)
 * batch.encoded_integrity_verified, in that order, in one publish; a commit group's member
 * holds them until the group's commit instead (hold_events). */
static int record_written(struct flow_run *fr, struct written *w, struct ferry_error *err)
{
    struct ferry_flow *f = fr->f;
    if (!w->held) return FERRY_OK;
    w->held = false;
    struct ferry_event evs[3];
    int n = 2;
    const char *res = f->spec->table;
    /* a batch without an event text still publishes an object: observers (the CLI's
     * progress, SSE, OTLP) read every payload */
    static char empty[] = "{}";
    int rc = ferry_bus_event_init(&evs[0], f->run_id, f->attempt, res, FERRY_EV_BATCH_WRITTEN,
                                  w->event.data ? w->event.data : empty, err);
    if (rc == FERRY_OK)
        rc = ferry_bus_event_init(&evs[1], f->run_id, f->attempt, res, FERRY_EV_BATCH_VERIFIED,
                                  w->verified, err);
    if (rc == FERRY_OK && w->encoded[0])
        rc = ferry_bus_event_init(&evs[n++], f->run_id, f->attempt, res,
                                  FERRY_EV_BATCH_ENCODED_VERIFIED, w->encoded, err);
    if (rc == FERRY_OK)
        rc =
            f->group == NULL ? publish_batch_events(fr, evs, n, err) : hold_events(fr, evs, n, err);
    if (rc != FERRY_OK) return rc;
    atomic_fetch_add(&f->rows_written, w->rows);
    atomic_fetch_add(&f->bytes_written, w->bytes);
    atomic_fetch_add(&f->batches_written, 1);
    return FERRY_OK;
}

/* After the last apply (or a failed one): the held record once the sink says the batch is
 * durable. A sink that cannot say so fails a flow that had not failed yet. */
static int settle_written(struct flow_run *fr, struct written *w, int rc, struct ferry_error *err)
{
    struct ferry_flow *f = fr->f;
    struct ferry_error scratch;
    struct ferry_error *e = rc == FERRY_OK ? err : &scratch;
    if (w->held) {
        if (f->sink_lock) pthread_mutex_lock(f->sink_lock);
        int src = f->sink_vt->settle ? f->sink_vt->settle(f->sink_ctx, e) : FERRY_OK;
        if (f->sink_lock) pthread_mutex_unlock(f->sink_lock);
        if (src == FERRY_OK) src = record_written(fr, w, e);
        if (src != FERRY_OK && rc == FERRY_OK)
            rc = ferry_error_prefix(err, "resource %s: the last batch", f->spec->table);
    }
    ferry_buf_release(&w->event);
    return rc;
}

/* A commit group's member: copies of the events, held until the group's commit. */
static int hold_events(struct flow_run *fr, const struct ferry_event *evs, int n,
                       struct ferry_error *err)
{
    if (fr->n_held + n > fr->cap_held) {
        int cap = fr->cap_held ? 2 * fr->cap_held : 16;
        while (cap < fr->n_held + n)
            cap *= 2;
        struct ferry_event *v = ferry_realloc(fr->held, (size_t)cap * sizeof *v);
        if (v == NULL) return ferry_error_set(err, FERRY_ENOMEM, "pipeline", "out of memory");
        fr->held = v;
        fr->cap_held = cap;
    }
    for (int i = 0; i < n; i++) {
        char *copy = ferry_strdup(evs[i].payload ? evs[i].payload : "{}");
        if (copy == NULL) return ferry_error_set(err, FERRY_ENOMEM, "pipeline", "out of memory");
        fr->held[fr->n_held] = evs[i];
        fr->held[fr->n_held++].payload = copy;
    }
    return FERRY_OK;
}

/* The group committed: the held events are published, all in one bus call, stamped with the
 * time of the commit (publish: false drops them). */
static int release_held(struct flow_run *fr, bool publish_them, struct ferry_error *err)
{
    struct ferry_flow *f = fr->f;
    int rc = FERRY_OK;
    if (publish_them && fr->n_held > 0) {
        int64_t now = ferry_now_wall_us();
        for (int i = 0; i < fr->n_held; i++)
            fr->held[i].time_us = now;
        rc = publish_batch_events(fr, fr->held, fr->n_held, err);
    }
    for (int i = 0; i < fr->n_held; i++)
        ferry_free(fr->held[i].payload);
    fr->n_held = 0;
    if (rc != FERRY_OK) ferry_error_prefix(err, "resource %s", f->spec->table);
    return rc;
}

static int sink_apply(struct ferry_flow *f, struct ferry_batch *b, struct ferry_receipt *r,
                      struct ferry_error *err)
{
    if (f->group != NULL) return ferry_commit_group_apply(f->group, f->target, b, r, err);
    if (f->sink_lock) pthread_mutex_lock(f->sink_lock);
    int rc = f->sink_vt->apply(f->sink_ctx, f->target, b, r, err);
    if (f->sink_lock) pthread_mutex_unlock(f->sink_lock);
    return rc;
}

static int write_one(struct flow_run *fr, struct ferry_batch *b, struct written *w,
                     struct ferry_error *err)
{
    struct ferry_flow *f = fr->f;
    const char *res = f->spec->table;
    b->digest = ferry_batch_digest(b);
    switch (FERRY_FAILPOINT("before_sink_apply")) {
    case FERRY_FP_ERROR:
        return ferry_error_set(err, FERRY_EFAILPOINT, "failpoint",
                               "resource %s batch %" PRIu64 ": failpoint before_sink_apply", res,
                               b->seq);
    case FERRY_FP_ENOSPC:
        return ferry_error_set(err, FERRY_ENOSPC, "failpoint",
                               "resource %s batch %" PRIu64 ": No space left on device", res,
                               b->seq);
    case FERRY_FP_BITFLIP: flip_one_bit(b); break;
    default: break;
    }
    struct ferry_receipt r;
    memset(&r, 0, sizeof r);
    int rc = sink_apply(f, b, &r, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "resource %s batch %" PRIu64, res, b->seq);
    char payload[768];
    if (r.write_crc != b->digest) {
        snprintf(payload, sizeof payload,
                 "{\"seq\":%" PRIu64 ",\"expected\":%u,\"got\":%u,\"rows\":%" PRId64 "}", b->seq,
                 b->digest, r.write_crc, b->length);
        publish(f, FERRY_EV_BATCH_DIVERGENCE, payload);
        return ferry_error_set(err, FERRY_EINTEGRITY, "integrity",
                               "resource %s batch %" PRIu64 " (%" PRId64 " rows): integrity digest "
                               "mismatch: the pipeline computed %08x, the %s sink holds %08x; the "
                               "batch changed between the pipeline and the sink",
                               res, b->seq, b->length, b->digest, f->sink_vt->name, r.write_crc);
    }
    if (f->caps.encoded_integrity && !r.has_encoded_crc)
        return ferry_error_set(err, FERRY_EINTEGRITY, "integrity",
                               "resource %s batch %" PRIu64 ": the %s sink advertises encoded "
                               "integrity but returned no encoded CRC",
                               res, b->seq, f->sink_vt->name);
    /* The previous batch (held) is durable now that this apply returned. */
    rc = record_written(fr, w, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "resource %s batch %" PRIu64, res, b->seq);
    int fp = FERRY_FAILPOINT("after_sink_apply");
    if (fp == FERRY_FP_ERROR)
        return ferry_error_set(err, FERRY_EFAILPOINT, "failpoint",
                               "resource %s batch %" PRIu64 ": failpoint after_sink_apply", res,
                               b->seq);

    struct ferry_buf *pb = &w->event;
    ferry_buf_reset(pb);
    ferry_buf_printf(pb,
                     "{\"seq\":%" PRIu64 ",\"rows\":%" PRId64 ",\"bytes\":%" PRId64
                     ",\"shard\":%d,\"durable\":%s,\"crc\":%u,\"position\":%s,\"uri\":",
                     b->seq, r.rows, r.bytes, b->shard,
                     f->caps.durability == FERRY_DURABLE_PER_APPLY ? "true" : "false", b->digest,
                     b->position ? b->position : "null");
    ferry_buf_json_string(pb, r.uri, strlen(r.uri));
    ferry_convert_json(f->convert, false, pb); /* on_unrepresentable: this batch's counts */
    ferry_buf_append(pb, "}", 1);
    snprintf(w->verified, sizeof w->verified, "{\"seq\":%" PRIu64 ",\"crc\":%u}", b->seq,
             b->digest);
    w->encoded[0] = '\0';
    if (r.has_encoded_crc)
        snprintf(w->encoded, sizeof w->encoded, "{\"seq\":%" PRIu64 ",\"encoded_crc\":%u}",
                 b->seq, r.encoded_crc);
    w->rows = r.rows;
    w->bytes = r.bytes;
    w->held = true;
    /* Durable after the next apply: held until then, unless this apply made it durable
     * already (r.durable_now). A commit group's member records at once (its events wait for
     * the group's commit instead, batch_event). */
    if (f->group == NULL && f->caps.durable_after_next && !r.durable_now) return FERRY_OK;
    rc = record_written(fr, w, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "resource %s batch %" PRIu64, res, b->seq);
    /* a cut: the group's transaction commits once every table of the log reached it */
    if (f->group != NULL && b->group_cut) {
        rc = ferry_commit_group_arrive(f->group, err);
        if (rc == FERRY_OK) rc = release_held(fr, true, err);
    }
    return rc;
}

/* A commit group's member at the flow's end: a clean end waits for the commit of what it
 * applied since the last one, then publishes the held events; any other end breaks the group
 * (its open transaction is rolled back) and drops them. */
static int group_end(struct flow_run *fr, int rc, struct ferry_error *err)
{
    struct ferry_error e;
    ferry_error_clear(&e);
    int grc = ferry_commit_group_finish(fr->f->group, rc, err ? err->message : "", &e);
    if (rc == FERRY_OK && grc != FERRY_OK) {
        rc = grc;
        if (err) *err = e;
    }
    int hrc = release_held(fr, rc == FERRY_OK, &e);
    if (rc == FERRY_OK && hrc != FERRY_OK) {
        rc = hrc;
        if (err) *err = e;
    }
    return rc;
}

static void flow_free(struct flow_run *fr)
{
    ferry_free(fr->held);
    for (int i = 0; fr->readers && i < fr->n_readers; i++)
        ferry__rw_free(fr->readers[i].rw);
    ferry_free(fr->readers);
    if (fr->write != fr->ready) ferry_queue_free(fr->write);
    ferry_queue_free(fr->ready);
    pthread_mutex_destroy(&fr->emit_lock);
    pthread_mutex_destroy(&fr->err_lock);
}

/* Readers worth starting: at most n_readers, at most one per shard left to read. */
static int readers_wanted(const struct ferry_flow *f)
{
    int want = f->readers != NULL && f->n_readers > 1 ? f->n_readers : 1;
    int left = 0;
    for (int s = 0; s < f->n_shards; s++)
        if (!position_done(f->resume ? f->resume[s] : NULL)) left++;
    if (want > left) want = left;
    return want < 1 ? 1 : want;
}

/* The flow's waits so far (struct ferry_flow): readers blocked pushing into `ready`, the
 * writer blocked popping from `write`. */
static void note_waits(struct flow_run *fr)
{
    int64_t push = 0, pop = 0, unused = 0;
    ferry_queue_waits(fr->ready, &push, &unused);
    ferry_queue_waits(fr->write, &unused, &pop);
    atomic_store(&fr->f->wait_sink_us, push);
    atomic_store(&fr->f->wait_source_us, pop);
}

int ferry_flow_run(struct ferry_flow *f, struct ferry_error *err)
{
    struct flow_run fr;
    memset(&fr, 0, sizeof fr);
    fr.f = f;
    fr.tag = ferry_schema_change_tag();
    pthread_mutex_init(&fr.emit_lock, NULL);
    pthread_mutex_init(&fr.err_lock, NULL);
    int qcap = (int)f->opts.queue;
    fr.ready = ferry_queue_new(qcap);
    fr.write = f->chain ? ferry_queue_new(qcap) : fr.ready;
    fr.n_readers = readers_wanted(f);
    fr.readers = ferry_calloc((size_t)fr.n_readers, sizeof *fr.readers);
    bool ok = fr.ready != NULL && fr.write != NULL && fr.readers != NULL;
    struct ferry_rw_limits lim = {.rows = f->opts.rows, .bytes = f->opts.bytes};
    for (int i = 0; ok && i < fr.n_readers; i++) {
        struct reader *rd = &fr.readers[i];
        rd->fr = &fr;
        rd->index = i;
        rd->ctx = f->readers != NULL && fr.n_readers > 1 ? f->readers[i] : f->src_ctx;
        rd->rw = ferry__rw_new(f->schema, f->spec->table, lim, emit_batch, rd);
        ok = rd->rw != NULL;
        /* One reader keeps the runner's tick itself; several get theirs from the ticker. */
        if (ok) ferry__rw_set_signals(rd->rw, fr.n_readers > 1 ? &rd->tick : &f->tick, f->stop);
        if (ok) ferry__rw_set_skip_report(rd->rw, report_skipped, rd);
        if (ok && f->group) ferry__rw_set_group(rd->rw, ferry_commit_group_enter, f->group);
    }
    if (!ok) {
        flow_free(&fr);
        return ferry_error_set(err, FERRY_ENOMEM, "pipeline", "out of memory");
    }
    /* The pool keeps what this flow's readers will take again: one batch each. */
    long long pool_share = f->opts.bytes * fr.n_readers;
    ferry__pool_reserve(pool_share);

    atomic_store(&fr.seq, f->seq_base);
    atomic_store(&fr.running, fr.n_readers);
    for (int i = 0; i < fr.n_readers; i++) {
        struct reader *rd = &fr.readers[i];
        if (pthread_create(&rd->thread, NULL, reader_main, rd) == 0) {
            rd->started = true;
            continue;
        }
        if (i == 0) {
            flow_free(&fr);
            ferry__pool_reserve(-pool_share);
            return ferry_error_set(err, FERRY_ENOMEM, "pipeline",
                                   "cannot start the source thread");
        }
        /* Fewer readers than asked still read every shard: the others take them. */
        ferry_log(FERRY_LOG_WARN, "resource %s: started %d of %d readers", f->spec->table, i,
                  fr.n_readers);
        for (int j = i; j < fr.n_readers; j++)
            reader_leave(&fr);
        break;
    }
    pthread_t ticker;
    bool ticker_started =
        fr.n_readers > 1 && pthread_create(&ticker, NULL, ticker_main, &fr) == 0;
    pthread_t tr_thread;
    bool tr_started = false;
    if (f->chain) {
        if (pthread_create(&tr_thread, NULL, transform_main, &fr) == 0) {
            tr_started = true;
        } else {
            /* Nobody would drain the ready queue: stop the source too, and fail (returning
             * FERRY_OK here would claim rows that were never written). */
            fr.tr_rc = ferry_error_set(&fr.tr_err, FERRY_ENOMEM, "pipeline",
                                       "cannot start the transform thread");
            ferry_queue_close(fr.ready, FERRY_ENOMEM);
            ferry_queue_close(fr.write, FERRY_ENOMEM);
        }
    }

    int rc = FERRY_OK;
    bool stopped_source = false;
    struct written w;
    memset(&w, 0, sizeof w);
    ferry_buf_init(&w.event, 0);
    struct ferry_batch *b;
    while ((b = ferry_queue_pop(fr.write)) != NULL) {
        if (atomic_load(f->stop) == FERRY_ECANCELED && !atomic_load(&fr.reader_stopped)) {
            ferry_batch_unref(b);
            rc = FERRY_ECANCELED;
            ferry_error_set(err, rc, "pipeline", "resource %s: canceled", f->spec->table);
            break;
        }
        rc = ferry_convert_apply(f->convert, &b, err);
        if (rc == FERRY_OK) rc = write_one(&fr, b, &w, err);
        ferry_batch_unref(b);
        if (rc != FERRY_OK) break;
        atomic_store(&f->queue_depth, ferry_queue_length(fr.ready));
        note_waits(&fr);
    }
    rc = settle_written(&fr, &w, rc, err);
    if (rc != FERRY_OK) {
        /* Stop the other stages: nothing after a failed write may be applied. The readers
         * hear it through *stop at their next row (they may be reading, not pushing). */
        int expected = 0;
        stopped_source = atomic_compare_exchange_strong(f->stop, &expected, FERRY_ECANCELED);
        ferry_queue_close(fr.ready, rc);
        ferry_queue_close(fr.write, rc);
        cancel_readers(&fr, NULL);
        ferry_queue_discard(fr.ready);
        ferry_queue_discard(fr.write);
    }
    for (int i = 0; i < fr.n_readers; i++)
        if (fr.readers[i].started) pthread_join(fr.readers[i].thread, NULL);
    if (tr_started) pthread_join(tr_thread, NULL);
    if (ticker_started) {
        atomic_store(&fr.ticker_stop, 1);
        pthread_join(ticker, NULL);
    }
    if (stopped_source || atomic_load(&fr.reader_stopped)) {
        /* *stop is the caller's: give it back as it was, so that a failed flow does not read
         * as a canceled run nor stop the caller's next flow. */
        int expected = FERRY_ECANCELED;
        atomic_compare_exchange_strong(f->stop, &expected, 0);
    }
    note_waits(&fr);
    ferry_queue_discard(fr.ready);
    ferry_queue_discard(fr.write);
    f->seq_base = atomic_load(&fr.seq);

    if (rc == FERRY_OK && fr.tr_rc != FERRY_OK) {
        rc = fr.tr_rc;
        if (err) *err = fr.tr_err;
        ferry_error_prefix(err, "resource %s", f->spec->table);
    }
    if (rc == FERRY_OK && fr.src_rc != FERRY_OK) {
        rc = fr.src_rc;
        if (rc == FERRY_EPAUSED || rc == FERRY_ECANCELED) {
            ferry_error_set(err, rc, "pipeline", "resource %s: %s", f->spec->table,
                            rc == FERRY_EPAUSED ? "paused" : "canceled");
        } else {
            if (err) *err = fr.src_err;
            if (strncmp(fr.src_err.message, "resource ", 9) != 0)
                ferry_error_prefix(err, "resource %s", f->spec->table);
        }
    }
    if (f->group != NULL) rc = group_end(&fr, rc, err);
    flow_free(&fr);
    ferry__pool_reserve(-pool_share);
    return rc;
}
