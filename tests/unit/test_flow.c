/* tests/unit/test_flow.c - one resource's flow (pipeline/flow.c) driven end to end: a fake
 * source and a fake sink (defined here, next to the piece under test), the real row writer,
 * queues, transform stage, digest and the real in-process bus over a temporary state file.
 *
 * What is proven: every row arrives once and in order across shards; shard-done batches;
 * resume positions; backpressure bounds the batches alive; pause drains; cancel discards;
 * sink errors, digest mismatches and source errors stop the flow with a message naming the
 * resource and the batch; the bitflip failpoint is detected; batch.* events carry what the
 * tracker needs; the transform stage runs. With several readers: every row once, each
 * shard in order and by one reader, seq unique and increasing, pause drains every reader,
 * cancel, a reader's or the sink's error stops every reader, the first error wins, the
 * flush tick reaches every reader. The sanitizer build proves no batch leaks on any of
 * these paths. */
#include "state_fixture.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "batch/builder.h"
#include "bus/bus.h"
#include "checkpoint/position.h"
#include "ferry/core.h"
#include "ferry/digest.h"
#include "ferry/event.h"
#include "ferry/failpoint.h"
#include "ferry/pipeline.h"
#include "pipeline/flow.h"
#include "pipeline/transform.h"
#include "store/store.h"

#define MAX_SHARDS 8
#define MAX_READERS 3
#define RUN_ID 7

/* ---- fake sink ---- */

struct sink_batch {
    uint64_t seq;
    int64_t rows;
    int shard;
    char *position;
    uint32_t digest;   /* the pipeline's */
    uint32_t computed; /* the sink's own */
    int n_fields;
};

struct fake_sink {
    int sleep_us;           /* per apply */
    uint64_t wrong_crc_seq; /* return a wrong write_crc for this batch (0: never) */
    uint64_t fail_seq;      /* fail apply of this batch (0: never) */
    atomic_int calls;
    atomic_int applied; /* applies that returned FERRY_OK */
    int settle_calls;   /* caps.durable_after_next: settle() calls, and what they return */
    int settle_rc;
    bool durable_now;   /* every apply says its batch is durable already (receipt) */
    struct sink_batch *batches;
    int n_batches, cap;
    int64_t *keys; /* column 0 of each row, -1 for null */
    int *shards;   /* column 1 of each row */
    int64_t n_rows, rows_cap;
};

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *r, struct ferry_error *err)
{
    struct fake_sink *s = ctx;
    atomic_fetch_add(&s->calls, 1);
    assert_int_equal(b->schema->n_fields, target->schema->n_fields);
    if (s->sleep_us) usleep((useconds_t)s->sleep_us);
    if (b->seq == s->fail_seq)
        return ferry_error_set(err, FERRY_ESINK, "fake", "fake sink: disk on fire");
    uint32_t d = ferry_batch_digest(b);
    if (s->n_batches == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->batches = realloc(s->batches, sizeof *s->batches * (size_t)s->cap);
    }
    s->batches[s->n_batches++] = (struct sink_batch){
        .seq = b->seq,
        .rows = b->length,
        .shard = b->shard,
        .position = b->position ? strdup(b->position) : NULL,
        .digest = b->digest,
        .computed = d,
        .n_fields = b->schema->n_fields,
    };
    if (s->n_rows + b->length > s->rows_cap) {
        s->rows_cap = (s->n_rows + b->length) * 2;
        s->keys = realloc(s->keys, sizeof *s->keys * (size_t)s->rows_cap);
        s->shards = realloc(s->shards, sizeof *s->shards * (size_t)s->rows_cap);
    }
    for (int64_t i = 0; i < b->length; i++) {
        s->keys[s->n_rows] = ferry_col_is_null(b, 0, i) ? -1 : ferry_col_int(b, 0, i);
        s->shards[s->n_rows] = (int)ferry_col_int(b, 1, i);
        s->n_rows++;
    }
    memset(r, 0, sizeof *r);
    r->rows = b->length;
    r->bytes = (int64_t)b->bytes;
    r->write_crc = b->seq == s->wrong_crc_seq ? d ^ 0xdeadbeefu : d;
    snprintf(r->uri, sizeof r->uri, "fake://orders/%llu", (unsigned long long)b->seq);
    r->durable_now = s->durable_now;
    atomic_fetch_add(&s->applied, 1);
    return FERRY_OK;
}

static void sink_records_free(struct fake_sink *s)
{
    for (int i = 0; i < s->n_batches; i++)
        free(s->batches[i].position);
    free(s->batches);
    free(s->keys);
    free(s->shards);
}

static int sink_settle(void *ctx, struct ferry_error *err)
{
    struct fake_sink *s = ctx;
    s->settle_calls++;
    if (s->settle_rc == FERRY_OK) return FERRY_OK;
    return ferry_error_set(err, s->settle_rc, "fake", "fake sink: the last commit failed");
}

static const struct ferry_sink_vtable fake_sink_vt = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "fake",
    .apply = sink_apply,
    .settle = sink_settle,
};

/* ---- fake source: rows k = 1..rows[shard] of (k int64, shard int32, label utf8) ----
 * One fake_src holds what the test sets and measures; each reader thread gets its own
 * instance (fake_reader) pointing at it, as the runner opens one source per reader. */

struct fake_src {
    int rows[MAX_SHARDS];
    bool null_first; /* column k is null in the first 3 rows of every batch */
    int64_t batch_rows;
    int fail_shard, fail_key; /* fail_key 0: never */
    int row_sleep_us;
    int pause_at_key; /* the source thread itself asks for a pause at this row (0: never) */
    atomic_int *stop;
    atomic_int extract_calls[MAX_SHARDS];
    int start_key[MAX_SHARDS]; /* first key read by the last extract of each shard */
    atomic_llong accepted;     /* rows ferry_rw_end accepted */
    atomic_int cancel_calls;
    struct fake_sink *sink; /* to measure batches alive */
    int64_t max_alive;
    atomic_int reader_of[MAX_SHARDS]; /* 1 + the reader that extracted the shard */
    atomic_int overlaps;              /* an instance used by two threads at once */
};

struct fake_reader {
    struct fake_src *src;
    int id;
    atomic_int busy;
    atomic_int extracts;
    atomic_int cancel_calls;
};

static int src_extract_rows(struct fake_src *s, int shard, const struct ferry_position *resume,
                            struct ferry_row_writer *rw, struct ferry_error *err);

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    (void)spec;
    (void)schema;
    (void)plan_json;
    struct fake_reader *r = ctx;
    if (atomic_exchange(&r->busy, 1)) atomic_fetch_add(&r->src->overlaps, 1);
    atomic_fetch_add(&r->extracts, 1);
    atomic_store(&r->src->reader_of[shard], r->id + 1);
    int rc = src_extract_rows(r->src, shard, resume, rw, err);
    atomic_store(&r->busy, 0);
    return rc;
}

static int src_extract_rows(struct fake_src *s, int shard, const struct ferry_position *resume,
                            struct ferry_row_writer *rw, struct ferry_error *err)
{
    atomic_fetch_add(&s->extract_calls[shard], 1);
    int start = 1;
    if (resume != NULL) {
        /* decoded by the flow: a done shard is never extracted */
        if (resume->shard != shard || resume->done)
            return ferry_error_set(err, FERRY_ESOURCE, "fake",
                                   "fake source: bad resume (shard %d, done %d) for shard %d",
                                   resume->shard, resume->done, shard);
        if (resume->has_key && resume->n_key > 0) {
            if (resume->key[0].kind != FERRY_KEY_INT)
                return ferry_error_set(err, FERRY_ESOURCE, "fake", "fake source: bad key");
            start = (int)resume->key[0].i + 1;
        }
    }
    s->start_key[shard] = start;
    int pos = 0;
    ferry_rw_set_position_columns(rw, 1, &pos);
    for (int k = start; k <= s->rows[shard]; k++) {
        if (shard == s->fail_shard && k == s->fail_key)
            return ferry_error_set(err, FERRY_ESOURCE, "fake",
                                   "fake source: shard %d row %d unreadable", shard, k);
        if (s->row_sleep_us) usleep((useconds_t)s->row_sleep_us);
        ferry_rw_begin(rw, k % 3 == 0 ? FERRY_OP_UPDATE : FERRY_OP_INSERT);
        if (s->null_first && (k - 1) % s->batch_rows < 3)
            ferry_rw_null(rw);
        else
            ferry_rw_int(rw, k);
        ferry_rw_int(rw, shard);
        if (k % 7 == 0) {
            ferry_rw_null(rw);
        } else {
            char t[32];
            int n = snprintf(t, sizeof t, "s%d-r%d", shard, k);
            ferry_rw_text(rw, t, (size_t)n);
        }
        if (k == s->pause_at_key) atomic_store(s->stop, FERRY_EPAUSED);
        int rc = ferry_rw_end(rw, err);
        if (rc == FERRY_OK || rc == FERRY_EPAUSED) {
            int64_t acc = atomic_fetch_add(&s->accepted, 1) + 1;
            if (s->sink && s->batch_rows > 0) {
                /* Batches closed so far minus those the sink finished: alive now. */
                int64_t alive = acc / s->batch_rows - atomic_load(&s->sink->applied);
                if (alive > s->max_alive) s->max_alive = alive;
            }
        }
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

static void src_cancel(void *ctx)
{
    struct fake_reader *r = ctx;
    atomic_fetch_add(&r->src->cancel_calls, 1);
    atomic_fetch_add(&r->cancel_calls, 1);
}

static const struct ferry_source_vtable fake_source_vt = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "fake",
    .extract = src_extract,
    .cancel = src_cancel,
};

/* ---- fixture ---- */

struct fx {
    struct state_dir sd;
    struct ferry_bus *bus;
    struct fake_src src;
    struct fake_reader rd[MAX_READERS];
    void *readers[MAX_READERS];
    struct fake_sink sink;
    struct ferry_resource_spec spec;
    struct ferry_schema *schema;
    struct ferry_schema *out_schema;
    struct ferry_target target;
    struct ferry_flow f;
    atomic_int stop;
    char *resume[MAX_SHARDS];
    struct ferry_pipeline_spec *p;
    struct ferry_error err;
    char plan[256];
};

static struct ferry_schema *fake_schema(bool null_first)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "k", FERRY_TYPE_INT64, null_first, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "shard", FERRY_TYPE_INT32, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "label", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    if (!null_first) s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static void use_schema(struct fx *x, bool null_first)
{
    ferry_schema_unref(x->schema);
    ferry_schema_unref(x->out_schema);
    x->schema = fake_schema(null_first);
    x->out_schema = ferry_schema_ref(x->schema);
    x->target.schema = x->out_schema;
    x->f.schema = x->schema;
}

static int setup(void **state)
{
    struct fx *x = calloc(1, sizeof *x);
    state_dir_make(&x->sd);
    struct ferry_error err = {0};
    if (ferry_bus_inproc_open(x->sd.url, &x->bus, &err) != FERRY_OK) {
        fprintf(stderr, "bus: %s\n", err.message);
        return -1;
    }
    x->spec.table = "orders";
    x->src.rows[0] = 100;
    x->src.fail_shard = -1;
    x->src.batch_rows = 10;
    x->target = (struct ferry_target){.index = 0,
                                      .resource = "orders",
                                      .table = "orders",
                                      .mode = FERRY_WRITE_APPEND,
                                      .read_mode = FERRY_READ_FULL};
    struct ferry_flow *f = &x->f;
    for (int i = 0; i < MAX_READERS; i++) {
        x->rd[i].src = &x->src;
        x->rd[i].id = i;
        x->readers[i] = &x->rd[i];
    }
    f->src_vt = &fake_source_vt;
    f->src_ctx = &x->rd[0];
    f->spec = &x->spec;
    f->plan_json = "{\"shards\":[{}]}";
    f->n_shards = 1;
    f->sink_vt = &fake_sink_vt;
    f->sink_ctx = &x->sink;
    f->caps = (struct ferry_sink_caps){.write_modes = 1u << FERRY_WRITE_APPEND,
                                       .durability = FERRY_DURABLE_PER_APPLY};
    f->target = &x->target;
    f->bus = x->bus;
    f->run_id = RUN_ID;
    f->attempt = 1;
    f->opts =
        (struct ferry_batch_opts){.rows = 10, .bytes = 1 << 20, .flush_after_ms = 1000, .queue = 2};
    f->stop = &x->stop;
    x->src.stop = &x->stop;
    use_schema(x, false);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    struct fx *x = *state;
    ferry_transforms_free(x->f.chain);
    ferry_pipeline_free(x->p);
    sink_records_free(&x->sink);
    ferry_bus_close(x->bus);
    ferry_schema_unref(x->schema);
    ferry_schema_unref(x->out_schema);
    for (int i = 0; i < MAX_SHARDS; i++)
        free(x->resume[i]);
    state_dir_remove(&x->sd);
    free(x);
    return 0;
}

static void set_shards(struct fx *x, int n, const int *rows)
{
    x->f.n_shards = n;
    for (int i = 0; i < n; i++)
        x->src.rows[i] = rows[i];
}

static void set_batch_rows(struct fx *x, int64_t rows)
{
    x->f.opts.rows = rows;
    x->src.batch_rows = rows;
}

static int run(struct fx *x)
{
    ferry_error_clear(&x->err);
    return ferry_flow_run(&x->f, &x->err);
}

static void run_ok(struct fx *x)
{
    int rc = run(x);
    if (rc != FERRY_OK) fail_msg("flow: rc %d: %s", rc, x->err.message);
}

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
}

/* The transforms of a pipeline file, compiled against the fake schema. */
static void use_transforms(struct fx *x, const char *transforms)
{
    char *text = ferry_asprintf("version: 1\nname: t\nsource:\n  type: sample\n  resources:\n"
                                "    - table: orders\nsink:\n  type: null\ntransforms:\n%s",
                                transforms);
    struct ferry_error err = {0};
    int rc = ferry_pipeline_load_string(text, strlen(text), "t.yaml", &x->p, &err);
    ferry_free(text);
    if (rc != FERRY_OK) fail_msg("load: %s", err.message);
    ferry_schema_unref(x->out_schema);
    x->out_schema = NULL;
    rc = ferry_transforms_compile(x->p, "orders", x->schema, &x->f.chain, &x->out_schema, &err);
    if (rc != FERRY_OK) fail_msg("compile: %s", err.message);
    assert_non_null(x->f.chain);
    x->target.schema = x->out_schema;
}

/* ---- events ---- */

struct events {
    struct ferry_event *ev;
    int n;
};

static struct events read_events(struct fx *x)
{
    struct ferry_store *st = NULL;
    struct ferry_error err = {0};
    if (ferry_store_open(x->sd.url, &st, &err) != FERRY_OK) fail_msg("store: %s", err.message);
    struct events all = {0};
    int64_t after = 0;
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (ferry_store_event_read(st, after, RUN_ID, 1000, &evs, &n, &err) != FERRY_OK)
            fail_msg("read: %s", err.message);
        if (n == 0) {
            ferry_events_free(evs, n);
            break;
        }
        all.ev = realloc(all.ev, sizeof *all.ev * (size_t)(all.n + n));
        for (int i = 0; i < n; i++) {
            all.ev[all.n++] = evs[i];
            evs[i].payload = NULL;
        }
        after = evs[n - 1].seq;
        ferry_events_free(evs, n);
    }
    ferry_store_close(st);
    return all;
}

static void events_free(struct events *e)
{
    for (int i = 0; i < e->n; i++)
        ferry_event_clear(&e->ev[i]);
    free(e->ev);
}

static int count_type(const struct events *e, const char *type)
{
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += !strcmp(e->ev[i].type, type);
    return n;
}

/* The payload of the event of `type` whose "seq" is seq (a new reference), or NULL. */
static json_t *find_event(const struct events *e, const char *type, uint64_t seq)
{
    for (int i = 0; i < e->n; i++) {
        if (strcmp(e->ev[i].type, type) != 0) continue;
        json_t *j = json_loads(e->ev[i].payload, 0, NULL);
        assert_non_null(j);
        if ((uint64_t)json_integer_value(json_object_get(j, "seq")) == seq) return j;
        json_decref(j);
    }
    return NULL;
}

/* ---- every row, once, in order ---- */

static void assert_rows_in_order(struct fx *x, int n_shards, const int *first_key)
{
    int64_t i = 0;
    for (int s = 0; s < n_shards; s++) {
        for (int k = first_key ? first_key[s] : 1; k <= x->src.rows[s]; k++, i++) {
            if (i >= x->sink.n_rows)
                fail_msg("sink has %lld rows; shard %d row %d missing", (long long)x->sink.n_rows,
                         s, k);
            if (x->sink.shards[i] != s || x->sink.keys[i] != k)
                fail_msg("row %lld: got shard %d key %lld, expected shard %d key %d", (long long)i,
                         x->sink.shards[i], (long long)x->sink.keys[i], s, k);
        }
    }
    assert_int_equal(x->sink.n_rows, i);
}

static void test_every_row_once_in_order_across_shards(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20, 25, 0, 33};
    set_shards(x, 4, rows);
    x->f.plan_json = "{\"shards\":[{},{},{},{}]}";
    run_ok(x);
    assert_rows_in_order(x, 4, NULL);

    /* seq 1, 2, 3... each batch from one shard, shards in order */
    struct fake_sink *s = &x->sink;
    int last_shard = 0;
    for (int i = 0; i < s->n_batches; i++) {
        assert_int_equal(s->batches[i].seq, (uint64_t)i + 1);
        assert_true(s->batches[i].shard >= last_shard);
        last_shard = s->batches[i].shard;
        assert_int_equal(s->batches[i].digest, s->batches[i].computed);
        assert_int_equal(s->batches[i].n_fields, 3);
        assert_true(s->batches[i].rows <= 10);
    }
    /* Shard-done batches: the last batch of each shard says so, with the shard's last key;
     * shard 0 (20 rows, batches of 10) and shard 2 (no rows) end with an empty one. */
    for (int sh = 0; sh < 4; sh++) {
        const struct sink_batch *last = NULL;
        int done = 0;
        for (int i = 0; i < s->n_batches; i++) {
            if (s->batches[i].shard != sh) continue;
            last = &s->batches[i];
            done += strstr(last->position, "\"done\":true") != NULL;
        }
        assert_non_null(last);
        assert_int_equal(done, 1);
        assert_non_null(strstr(last->position, "\"done\":true"));
        char want[96];
        if (rows[sh] > 0)
            snprintf(want, sizeof want, "{\"shard\":%d,\"key\":[%d],\"done\":true}", sh, rows[sh]);
        else
            snprintf(want, sizeof want, "{\"shard\":%d,\"done\":true}", sh);
        assert_string_equal(last->position, want);
        if (sh == 0 || sh == 2) assert_int_equal(last->rows, 0);
        if (sh == 1 || sh == 3) assert_true(last->rows > 0);
    }
    for (int sh = 0; sh < 4; sh++)
        assert_int_equal(atomic_load(&x->src.extract_calls[sh]), 1);
    int64_t total = 20 + 25 + 33;
    assert_int_equal(atomic_load(&x->f.rows_written), total);
    assert_int_equal(atomic_load(&x->f.rows_read), total);
    assert_int_equal(atomic_load(&x->f.batches_written), s->n_batches);
}

static void test_resume_positions(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20, 25, 12};
    set_shards(x, 3, rows);
    x->f.plan_json = "{\"shards\":[{},{},{}]}";
    x->resume[0] = strdup("{\"shard\":0,\"key\":[20],\"done\":true}");
    x->resume[1] = strdup("{\"shard\":1,\"key\":[7]}");
    x->resume[2] = NULL;
    x->f.resume = x->resume;
    run_ok(x);
    /* shard 0 is not even extracted; shard 1 continues after key 7; shard 2 from its start */
    assert_int_equal(atomic_load(&x->src.extract_calls[0]), 0);
    assert_int_equal(atomic_load(&x->src.extract_calls[1]), 1);
    assert_int_equal(x->src.start_key[1], 8);
    assert_int_equal(x->src.start_key[2], 1);
    x->src.rows[0] = 0; /* nothing expected from shard 0 */
    const int first[] = {1, 8, 1};
    assert_rows_in_order(x, 3, first);
    for (int i = 0; i < x->sink.n_batches; i++)
        assert_int_not_equal(x->sink.batches[i].shard, 0);
    assert_string_equal(x->sink.batches[x->sink.n_batches - 1].position,
                        "{\"shard\":2,\"key\":[12],\"done\":true}");

    /* A resume position exactly at the shard's end: the shard still ends with a done batch. */
    sink_records_free(&x->sink);
    memset(&x->sink, 0, sizeof x->sink);
    free(x->resume[1]);
    x->resume[1] = strdup("{\"shard\":1,\"key\":[25]}");
    free(x->resume[2]);
    x->resume[2] = strdup("{\"shard\":2,\"key\":[12],\"done\":true}");
    run_ok(x);
    assert_int_equal(x->sink.n_rows, 0);
    assert_int_equal(x->sink.n_batches, 1);
    assert_int_equal(x->sink.batches[0].shard, 1);
    assert_non_null(strstr(x->sink.batches[0].position, "\"done\":true"));

    /* Saved text that is no position: the flow refuses it naming resource and shard, before
     * the source is asked to read that shard (sources never see position text). */
    sink_records_free(&x->sink);
    memset(&x->sink, 0, sizeof x->sink);
    free(x->resume[1]);
    x->resume[1] = strdup("{\"shard\":1,\"key\":[7],\"cursor\":\"9\"}");
    free(x->resume[2]);
    x->resume[2] = NULL;
    int calls = atomic_load(&x->src.extract_calls[1]);
    assert_int_equal(run(x), FERRY_EINVAL);
    assert_non_null(strstr(x->err.message, "resource orders: shard 1: the saved position"));
    assert_non_null(strstr(x->err.message, "unknown member \"cursor\""));
    assert_int_equal(atomic_load(&x->src.extract_calls[1]), calls);
}

/* ---- backpressure ---- */

static void test_backpressure_bounds_batches_alive(void **state)
{
    struct fx *x = *state;
    /* queue 2, 200 batches the source could produce at once, a sink that is slow. */
    set_batch_rows(x, 10);
    x->f.opts.queue = 2;
    x->src.rows[0] = 2000;
    x->src.sink = &x->sink;
    x->sink.sleep_us = 2000;
    run_ok(x);
    assert_rows_in_order(x, 1, NULL);
    /* queue + one being written + one the source pushes as it measures; the bound the flow
     * documents leaves one more for the batch being built. */
    if (x->src.max_alive > x->f.opts.queue + 3)
        fail_msg("%lld batches alive at once with queue %lld", (long long)x->src.max_alive,
                 (long long)x->f.opts.queue);
    /* and the measure is real: the source did run ahead of the sink up to the bound */
    assert_true(x->src.max_alive >= x->f.opts.queue);
}

/* ---- pause and cancel from another thread ---- */

struct stopper {
    struct fx *x;
    int after_applied;
    int code;
    int applied_at_stop;
    bool fired;
};

static void *stopper_main(void *arg)
{
    struct stopper *s = arg;
    int64_t t0 = ferry_now_mono_us();
    while (atomic_load(&s->x->sink.applied) < s->after_applied) {
        if (ferry_now_mono_us() - t0 > 10000000) return NULL; /* the test fails on its own */
        usleep(200);
    }
    atomic_store(&s->x->stop, s->code);
    /* read after the store: only an apply already under way can still finish */
    s->applied_at_stop = atomic_load(&s->x->sink.applied);
    s->fired = true;
    return NULL;
}

static int run_with_stopper(struct fx *x, struct stopper *s)
{
    pthread_t t;
    s->x = x;
    assert_int_equal(pthread_create(&t, NULL, stopper_main, s), 0);
    int rc = run(x);
    pthread_join(t, NULL);
    assert_true(s->fired);
    return rc;
}

static void test_pause_drains_accepted_batches(void **state)
{
    struct fx *x = *state;
    x->src.rows[0] = 5000;
    x->sink.sleep_us = 1000;
    struct stopper s = {.after_applied = 5, .code = FERRY_EPAUSED};
    int rc = run_with_stopper(x, &s);
    assert_int_equal(rc, FERRY_EPAUSED);
    assert_contains(x->err.message, "resource orders");
    assert_contains(x->err.message, "paused");
    /* Every row the source handed over was written, in order, and the source stopped early. */
    int64_t accepted = atomic_load(&x->src.accepted);
    assert_true(accepted < 5000);
    assert_int_equal(x->sink.n_rows, accepted);
    for (int64_t i = 0; i < accepted; i++)
        assert_int_equal(x->sink.keys[i], i + 1);
    /* The last batch says where the shard got to, and that it is not done. */
    char want[64];
    snprintf(want, sizeof want, "{\"shard\":0,\"key\":[%lld]}", (long long)accepted);
    assert_string_equal(x->sink.batches[x->sink.n_batches - 1].position, want);
    assert_int_equal(atomic_load(&x->f.rows_written), accepted);

    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), x->sink.n_batches);
    events_free(&e);
}

/* Paused in the middle of a batch: the rows already accepted form a last, partial batch. */
static void test_pause_mid_batch_flushes_the_partial_batch(void **state)
{
    struct fx *x = *state;
    x->src.rows[0] = 1000;
    x->src.pause_at_key = 55;
    assert_int_equal(run(x), FERRY_EPAUSED);
    assert_int_equal(atomic_load(&x->src.accepted), 55);
    assert_int_equal(x->sink.n_rows, 55);
    for (int64_t i = 0; i < 55; i++)
        assert_int_equal(x->sink.keys[i], i + 1);
    const struct sink_batch *last = &x->sink.batches[x->sink.n_batches - 1];
    assert_int_equal(last->rows, 5);
    assert_string_equal(last->position, "{\"shard\":0,\"key\":[55]}");
    struct events e = read_events(x);
    json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, last->seq);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "rows")), 5);
    json_decref(j);
    events_free(&e);
}

static void test_pause_with_transforms(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - drop: [label]\n");
    x->src.rows[0] = 5000;
    x->sink.sleep_us = 1000;
    struct stopper s = {.after_applied = 3, .code = FERRY_EPAUSED};
    assert_int_equal(run_with_stopper(x, &s), FERRY_EPAUSED);
    int64_t accepted = atomic_load(&x->src.accepted);
    assert_true(accepted < 5000);
    assert_int_equal(x->sink.n_rows, accepted);
    for (int i = 0; i < x->sink.n_batches; i++)
        assert_int_equal(x->sink.batches[i].n_fields, 2);
}

static void test_cancel_stops_early_and_discards(void **state)
{
    struct fx *x = *state;
    x->src.rows[0] = 5000;
    x->sink.sleep_us = 1000;
    struct stopper s = {.after_applied = 4, .code = FERRY_ECANCELED};
    int rc = run_with_stopper(x, &s);
    assert_int_equal(rc, FERRY_ECANCELED);
    assert_contains(x->err.message, "resource orders");
    assert_contains(x->err.message, "canceled");
    /* At most the apply under way when cancel came finished after it. */
    assert_true(atomic_load(&x->sink.applied) <= s.applied_at_stop + 1);
    assert_true(atomic_load(&x->src.accepted) < 5000);
    assert_true(x->sink.n_rows < 5000);
    /* What was written is still a prefix, in order. */
    for (int64_t i = 0; i < x->sink.n_rows; i++)
        assert_int_equal(x->sink.keys[i], i + 1);
}

static void test_cancel_with_transforms(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - rename: {label: name}\n");
    x->f.opts.queue = 1;
    x->src.rows[0] = 5000;
    x->sink.sleep_us = 1000;
    struct stopper s = {.after_applied = 3, .code = FERRY_ECANCELED};
    assert_int_equal(run_with_stopper(x, &s), FERRY_ECANCELED);
    assert_true(atomic_load(&x->sink.applied) <= s.applied_at_stop + 1);
    assert_true(x->sink.n_rows < 5000);
}

/* ---- failures ---- */

static void test_sink_error_stops_the_source(void **state)
{
    struct fx *x = *state;
    x->src.rows[0] = 5000;
    x->sink.fail_seq = 3;
    int rc = run(x);
    assert_int_equal(rc, FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 3: fake sink: disk on fire");
    assert_int_equal(atomic_load(&x->sink.calls), 3); /* nothing after the failed batch */
    assert_int_equal(atomic_load(&x->sink.applied), 2);
    assert_int_equal(x->sink.n_rows, 20);
    assert_true(atomic_load(&x->src.accepted) < 5000); /* the source was stopped */
    assert_int_equal(atomic_load(&x->src.cancel_calls), 1);
    assert_int_equal(atomic_load(&x->stop), 0); /* the caller's flag, given back */

    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 2);
    json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, 3);
    assert_null(j);
    events_free(&e);
}

/* A source that reads slowly into big batches is stopped at its next row, not at its next
 * batch: the flow tells it through *stop, and through its cancel slot. */
static void test_sink_error_stops_a_reading_source(void **state)
{
    struct fx *x = *state;
    set_batch_rows(x, 500);
    x->src.rows[0] = 5000;
    x->src.row_sleep_us = 20;
    x->sink.fail_seq = 1;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 1: fake sink: disk on fire");
    /* batch 1 (500 rows) failed while the source was early in batch 2 */
    int64_t accepted = atomic_load(&x->src.accepted);
    if (accepted >= 900)
        fail_msg("the source read %lld rows after the failure", (long long)(accepted - 500));
    assert_int_equal(atomic_load(&x->src.cancel_calls), 1);
    assert_int_equal(atomic_load(&x->stop), 0);
}

static void test_sink_error_with_transforms(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - drop: label\n");
    x->f.opts.queue = 1;
    x->src.rows[0] = 5000;
    x->sink.fail_seq = 2;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 2: fake sink: disk on fire");
    assert_int_equal(atomic_load(&x->sink.calls), 2);
    assert_true(atomic_load(&x->src.accepted) < 5000);
}

static void test_wrong_write_crc_is_divergence(void **state)
{
    struct fx *x = *state;
    x->src.rows[0] = 200;
    x->sink.wrong_crc_seq = 2;
    int rc = run(x);
    assert_int_equal(rc, FERRY_EINTEGRITY);
    assert_contains(x->err.message, "resource orders batch 2 (10 rows): integrity digest mismatch");
    assert_int_equal(atomic_load(&x->sink.calls), 2);
    assert_int_equal(x->sink.n_batches, 2);
    const struct sink_batch *b2 = &x->sink.batches[1];
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", b2->digest);
    assert_contains(x->err.message, hex);
    snprintf(hex, sizeof hex, "%08x", b2->computed ^ 0xdeadbeefu);
    assert_contains(x->err.message, hex);

    struct events e = read_events(x);
    json_t *j = find_event(&e, FERRY_EV_BATCH_DIVERGENCE, 2);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "expected")), b2->digest);
    assert_int_equal(json_integer_value(json_object_get(j, "got")), b2->computed ^ 0xdeadbeefu);
    assert_int_equal(json_integer_value(json_object_get(j, "rows")), 10);
    json_decref(j);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_DIVERGENCE), 1);
    for (int i = 0; i < e.n; i++)
        if (!strcmp(e.ev[i].type, FERRY_EV_BATCH_DIVERGENCE))
            assert_string_equal(e.ev[i].resource, "orders");
    /* batch 2 was never reported written or verified */
    assert_null(find_event(&e, FERRY_EV_BATCH_WRITTEN, 2));
    assert_null(find_event(&e, FERRY_EV_BATCH_VERIFIED, 2));
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 1);
    events_free(&e);
}

static void test_source_error_after_accepted_batches(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20, 30};
    set_shards(x, 2, rows);
    x->f.plan_json = "{\"shards\":[{},{}]}";
    set_batch_rows(x, 5);
    x->src.fail_shard = 1;
    x->src.fail_key = 13;
    int rc = run(x);
    assert_int_equal(rc, FERRY_ESOURCE);
    assert_string_equal(x->err.message, "resource orders: fake source: shard 1 row 13 unreadable");
    /* Shard 0 entirely, then the full batches of shard 1 the source handed over (rows 1..10);
     * rows 11 and 12 were still being built: never applied. */
    x->src.rows[1] = 10;
    assert_rows_in_order(x, 2, NULL);
    assert_non_null(strstr(x->sink.batches[x->sink.n_batches - 1].position, "\"key\":[10]"));
    assert_null(strstr(x->sink.batches[x->sink.n_batches - 1].position, "done"));
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), x->sink.n_batches);
    events_free(&e);
}

static void test_bitflip_failpoint_is_detected(void **state)
{
    struct fx *x = *state;
    use_schema(x, true); /* column k is null in the first rows of every batch */
    x->src.null_first = true;
    x->src.rows[0] = 30;
    setenv("FERRY_FAILPOINTS", "before_sink_apply=bitflip", 1);
    struct ferry_error err = {0};
    assert_int_equal(ferry_failpoints_init(&err), FERRY_OK);
    int rc = run(x);
    unsetenv("FERRY_FAILPOINTS");
    assert_int_equal(ferry_failpoints_init(&err), FERRY_OK);
    assert_int_equal(rc, FERRY_EINTEGRITY);
    assert_contains(x->err.message, "resource orders batch 1 (10 rows): integrity digest mismatch");
    assert_int_equal(x->sink.n_batches, 1);
    assert_int_not_equal(x->sink.batches[0].digest, x->sink.batches[0].computed);
    assert_int_equal(x->sink.keys[0], -1); /* the batch did start with nulls */
    struct events e = read_events(x);
    json_t *j = find_event(&e, FERRY_EV_BATCH_DIVERGENCE, 1);
    assert_non_null(j);
    json_decref(j);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 0);
    events_free(&e);

    /* Without the failpoint, the same rows go through. */
    sink_records_free(&x->sink);
    memset(&x->sink, 0, sizeof x->sink);
    run_ok(x);
    assert_int_equal(x->sink.n_rows, 30);
}

/* ---- events ---- */

static void assert_written_events(struct fx *x, bool durable)
{
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), x->sink.n_batches);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_VERIFIED), x->sink.n_batches);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_BUFFERED), x->sink.n_batches);
    for (int i = 0; i < x->sink.n_batches; i++) {
        const struct sink_batch *b = &x->sink.batches[i];
        json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, b->seq);
        if (j == NULL) fail_msg("no batch.written for batch %llu", (unsigned long long)b->seq);
        assert_int_equal(json_integer_value(json_object_get(j, "rows")), b->rows);
        assert_int_equal(json_integer_value(json_object_get(j, "shard")), b->shard);
        assert_int_equal(json_integer_value(json_object_get(j, "crc")), b->digest);
        assert_int_equal(json_is_true(json_object_get(j, "durable")), durable);
        json_t *want = json_loads(b->position, 0, NULL);
        assert_non_null(want);
        if (!json_equal(json_object_get(j, "position"), want)) {
            char *got = json_dumps(json_object_get(j, "position"), JSON_COMPACT);
            fail_msg("batch %llu: event position %s, batch position %s", (unsigned long long)b->seq,
                     got, b->position);
        }
        json_decref(want);
        char uri[64];
        snprintf(uri, sizeof uri, "fake://orders/%llu", (unsigned long long)b->seq);
        assert_string_equal(json_string_value(json_object_get(j, "uri")), uri);
        json_decref(j);
        j = find_event(&e, FERRY_EV_BATCH_VERIFIED, b->seq);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "crc")), b->digest);
        json_decref(j);
    }
    for (int i = 0; i < e.n; i++) {
        assert_string_equal(e.ev[i].resource, "orders");
        assert_int_equal(e.ev[i].run_id, RUN_ID);
        assert_int_equal(e.ev[i].attempt, 1);
    }
    events_free(&e);
}

static void test_written_events_carry_positions(void **state)
{
    struct fx *x = *state;
    const int rows[] = {23, 10};
    set_shards(x, 2, rows);
    x->f.plan_json = "{\"shards\":[{},{}]}";
    run_ok(x);
    assert_written_events(x, true);
}

static void test_written_events_at_commit_sink(void **state)
{
    struct fx *x = *state;
    x->f.caps.durability = FERRY_DURABLE_AT_COMMIT;
    x->src.rows[0] = 35;
    run_ok(x);
    assert_written_events(x, false);
}

/* A sink whose batch N is durable only when apply(N+1) or settle() returned: every batch
 * is recorded once, after that; settle is called once, after the last apply. */
static void test_durable_after_next_records_every_batch(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->src.rows[0] = 35;
    run_ok(x);
    assert_int_equal(x->sink.n_batches, 4);
    assert_int_equal(x->sink.settle_calls, 1);
    assert_written_events(x, true);
}

/* The last batch's commit fails (settle): the run fails and that batch is never recorded. */
static void test_durable_after_next_failed_settle(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->src.rows[0] = 35;
    x->sink.settle_rc = FERRY_ESINK;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_contains(x->err.message, "resource orders: the last batch");
    assert_contains(x->err.message, "fake sink: the last commit failed");
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 3);
    json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, 4);
    assert_null(j);
    events_free(&e);
}

/* apply(3) fails: batch 1 was recorded when apply(2) returned, batch 2 only if settle says
 * it is durable. */
static void test_durable_after_next_failed_apply(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->src.rows[0] = 5000;
    x->sink.fail_seq = 3;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 3: fake sink: disk on fire");
    assert_int_equal(x->sink.settle_calls, 1);
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 2);
    events_free(&e);

}

static void test_durable_after_next_failed_apply_and_settle(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->src.rows[0] = 5000;
    x->sink.fail_seq = 3;
    x->sink.settle_rc = FERRY_ESINK;
    assert_int_equal(run(x), FERRY_ESINK);
    /* the apply's error is the run's, not the settle's */
    assert_string_equal(x->err.message, "resource orders batch 3: fake sink: disk on fire");
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 1);
    json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, 1);
    assert_non_null(j);
    json_decref(j);
    events_free(&e);
}

/* A durable_after_next sink whose applies say their batch is durable already
 * (receipt.durable_now: the postgres sink committing on one connection): each batch is
 * recorded when its own apply returns, so settle is never needed, and when apply(3) fails
 * batch 2 is recorded although settle fails (against 1 batch without the flag, above). */
static void test_durable_now_records_at_once(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->sink.durable_now = true;
    x->src.rows[0] = 35;
    run_ok(x);
    assert_int_equal(x->sink.n_batches, 4);
    assert_int_equal(x->sink.settle_calls, 0);
    assert_written_events(x, true);
}

static void test_durable_now_failed_apply_and_settle(void **state)
{
    struct fx *x = *state;
    x->f.caps.durable_after_next = true;
    x->sink.durable_now = true;
    x->src.rows[0] = 5000;
    x->sink.fail_seq = 3;
    x->sink.settle_rc = FERRY_ESINK;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 3: fake sink: disk on fire");
    assert_int_equal(x->sink.settle_calls, 0);
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), 2);
    json_t *j = find_event(&e, FERRY_EV_BATCH_WRITTEN, 2);
    assert_non_null(j);
    json_decref(j);
    events_free(&e);
}

/* ---- transforms ---- */

static void test_transform_stage_runs(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - drop: [label]\n  - rename: {shard: part}\n");
    assert_int_equal(x->out_schema->n_fields, 2);
    const int rows[] = {45, 17};
    set_shards(x, 2, rows);
    x->f.plan_json = "{\"shards\":[{},{}]}";
    x->f.opts.queue = 1;
    run_ok(x);
    assert_rows_in_order(x, 2, NULL);
    for (int i = 0; i < x->sink.n_batches; i++) {
        assert_int_equal(x->sink.batches[i].n_fields, 2);
        /* the digest is the transformed batch's, and it matches what the sink holds */
        assert_int_equal(x->sink.batches[i].digest, x->sink.batches[i].computed);
    }
    assert_written_events(x, true);
}

static void test_transform_hash_stage(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - {column: label, hash: sha256}\n");
    x->src.rows[0] = 50;
    run_ok(x);
    assert_int_equal(x->sink.n_rows, 50);
    for (int i = 0; i < x->sink.n_batches; i++) {
        assert_int_equal(x->sink.batches[i].n_fields, 3);
        assert_int_equal(x->sink.batches[i].digest, x->sink.batches[i].computed);
    }
}


/* ---- several readers ---- */

/* n readers over n_shards shards of rows[] rows each. */
static void use_readers(struct fx *x, int n, int n_shards, const int *rows)
{
    set_shards(x, n_shards, rows);
    int len = snprintf(x->plan, sizeof x->plan, "{\"shards\":[");
    for (int i = 0; i < n_shards; i++)
        len += snprintf(x->plan + len, sizeof x->plan - (size_t)len, "%s{}", i ? "," : "");
    snprintf(x->plan + len, sizeof x->plan - (size_t)len, "]}");
    x->f.plan_json = x->plan;
    x->f.readers = x->readers;
    x->f.n_readers = n;
}

/* What the sink holds, per shard: keys 1, 2, 3... with no gap and no repeat (a prefix of
 * the shard, in order), each batch of one shard, batch seq 1, 2, 3... in the order the
 * sink saw them. Returns the rows of each shard in got[]. */
static void assert_shard_prefixes(struct fx *x, int n_shards, int *got)
{
    for (int s = 0; s < n_shards; s++)
        got[s] = 0;
    int64_t i = 0;
    for (int b = 0; b < x->sink.n_batches; b++) {
        const struct sink_batch *sb = &x->sink.batches[b];
        if (sb->seq != (uint64_t)b + 1)
            fail_msg("batch %d reached the sink with seq %llu", b + 1,
                     (unsigned long long)sb->seq);
        assert_int_equal(sb->digest, sb->computed);
        for (int64_t r = 0; r < sb->rows; r++, i++) {
            int sh = x->sink.shards[i];
            if (sh != sb->shard)
                fail_msg("batch %llu of shard %d holds a row of shard %d",
                         (unsigned long long)sb->seq, sb->shard, sh);
            assert_true(sh >= 0 && sh < n_shards);
            if (x->sink.keys[i] != got[sh] + 1)
                fail_msg("shard %d: key %lld after key %d (a row lost, repeated or out of order)",
                         sh, (long long)x->sink.keys[i], got[sh]);
            got[sh]++;
        }
    }
    assert_int_equal(i, x->sink.n_rows);
}

static int readers_used(struct fx *x, int n_shards)
{
    bool used[MAX_READERS] = {false};
    int n = 0;
    for (int s = 0; s < n_shards; s++) {
        int r = atomic_load(&x->src.reader_of[s]);
        if (r > 0 && !used[r - 1]) {
            used[r - 1] = true;
            n++;
        }
    }
    return n;
}

static void test_parallel_readers_every_row_once(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20, 25, 0, 33, 7, 41, 12};
    use_readers(x, 3, 7, rows);
    x->src.row_sleep_us = 200; /* a shard outlasts the start of the other readers */
    run_ok(x);
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 7, got);
    for (int s = 0; s < 7; s++) {
        assert_int_equal(got[s], rows[s]);
        /* read by exactly one reader, once */
        assert_int_equal(atomic_load(&x->src.extract_calls[s]), 1);
        assert_true(atomic_load(&x->src.reader_of[s]) >= 1);
        /* exactly one done batch, the shard's last, with its last key */
        const struct sink_batch *last = NULL;
        int done = 0;
        for (int i = 0; i < x->sink.n_batches; i++) {
            if (x->sink.batches[i].shard != s) continue;
            last = &x->sink.batches[i];
            done += strstr(last->position, "\"done\":true") != NULL;
        }
        assert_non_null(last);
        assert_int_equal(done, 1);
        char want[96];
        if (rows[s] > 0)
            snprintf(want, sizeof want, "{\"shard\":%d,\"key\":[%d],\"done\":true}", s, rows[s]);
        else
            snprintf(want, sizeof want, "{\"shard\":%d,\"done\":true}", s);
        assert_string_equal(last->position, want);
    }
    /* the readers really ran at the same time, each on its own instance (how many got a
     * shard depends on scheduling: under a sanitizer on a loaded machine a reader may
     * finish before another starts) */
    assert_true(readers_used(x, 7) >= 2);
    assert_int_equal(atomic_load(&x->src.overlaps), 0);
    int extracts = 0;
    for (int r = 0; r < 3; r++)
        extracts += atomic_load(&x->rd[r].extracts);
    assert_int_equal(extracts, 7);
    int64_t total = 20 + 25 + 0 + 33 + 7 + 41 + 12;
    assert_int_equal(atomic_load(&x->f.rows_written), total);
    assert_int_equal(atomic_load(&x->f.rows_read), total);
    assert_int_equal(atomic_load(&x->f.batches_written), x->sink.n_batches);
    assert_int_equal(atomic_load(&x->stop), 0);
    assert_written_events(x, true);
}

/* No more readers than shards left: done shards are skipped, a resumed one continues. */
static void test_parallel_readers_resume(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20, 25, 12, 9};
    use_readers(x, 3, 4, rows);
    x->resume[0] = strdup("{\"shard\":0,\"key\":[20],\"done\":true}");
    x->resume[1] = strdup("{\"shard\":1,\"key\":[7]}");
    x->resume[3] = strdup("{\"shard\":3,\"key\":[9],\"done\":true}");
    x->f.resume = x->resume;
    x->src.row_sleep_us = 200;
    run_ok(x);
    assert_int_equal(atomic_load(&x->src.extract_calls[0]), 0);
    assert_int_equal(atomic_load(&x->src.extract_calls[3]), 0);
    assert_int_equal(x->src.start_key[1], 8);
    assert_int_equal(x->src.start_key[2], 1);
    /* two shards to read: the third reader is not even started */
    assert_int_equal(atomic_load(&x->rd[2].extracts), 0);
    int used = readers_used(x, 4);
    assert_true(used >= 1 && used <= 2);
    assert_int_equal(x->sink.n_rows, 18 + 12);
    for (int i = 0; i < x->sink.n_batches; i++) {
        assert_int_equal(x->sink.batches[i].seq, (uint64_t)i + 1);
        assert_true(x->sink.batches[i].shard == 1 || x->sink.batches[i].shard == 2);
    }
}

static void test_parallel_pause_drains_every_reader(void **state)
{
    struct fx *x = *state;
    const int rows[] = {3000, 3000, 3000, 3000, 3000, 3000, 3000};
    use_readers(x, 3, 7, rows);
    x->sink.sleep_us = 1000;
    struct stopper st = {.after_applied = 6, .code = FERRY_EPAUSED};
    assert_int_equal(run_with_stopper(x, &st), FERRY_EPAUSED);
    assert_contains(x->err.message, "resource orders: paused");
    /* every row a reader handed over was written (partial batches included), per shard in
     * order, and every reader stopped early */
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 7, got);
    int64_t accepted = atomic_load(&x->src.accepted);
    assert_int_equal(x->sink.n_rows, accepted);
    assert_true(accepted < 3 * 3000);
    for (int s = 3; s < 7; s++)
        assert_int_equal(atomic_load(&x->src.extract_calls[s]), 0);
    /* How many readers started before the pause depends on scheduling (a loaded machine may
     * start fewer): every shard a reader started was drained up to what it handed over. */
    int used = readers_used(x, 7);
    assert_true(used >= 1 && used <= 3);
    for (int s = 0; s < 7; s++)
        if (atomic_load(&x->src.extract_calls[s]) > 0) assert_true(got[s] > 0);
    assert_int_equal(atomic_load(&x->stop), FERRY_EPAUSED); /* the caller's, untouched */
    assert_int_equal(atomic_load(&x->src.cancel_calls), 0);
}

static void test_parallel_cancel(void **state)
{
    struct fx *x = *state;
    const int rows[] = {3000, 3000, 3000, 3000, 3000, 3000, 3000};
    use_readers(x, 3, 7, rows);
    x->sink.sleep_us = 1000;
    struct stopper st = {.after_applied = 4, .code = FERRY_ECANCELED};
    assert_int_equal(run_with_stopper(x, &st), FERRY_ECANCELED);
    assert_contains(x->err.message, "resource orders: canceled");
    assert_true(atomic_load(&x->sink.applied) <= st.applied_at_stop + 1);
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 7, got);
    assert_true(atomic_load(&x->src.accepted) < 3 * 3000);
    for (int s = 3; s < 7; s++)
        assert_int_equal(atomic_load(&x->src.extract_calls[s]), 0);
}

/* One reader fails: its error is the flow's; the other readers stop at their next row and
 * hear it through their cancel slot; no further shard is started; what was queued before
 * the failure is still written (valid positions); the caller's *stop is given back. */
static void test_parallel_reader_error_stops_the_others(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20000, 20000, 20000, 20000, 20000, 20000, 20000};
    use_readers(x, 3, 7, rows);
    x->src.row_sleep_us = 20;
    x->src.fail_shard = 1;
    x->src.fail_key = 300;
    int rc = run(x);
    assert_int_equal(rc, FERRY_ESOURCE);
    assert_string_equal(x->err.message, "resource orders: fake source: shard 1 row 300 unreadable");
    int64_t accepted = atomic_load(&x->src.accepted);
    /* shards 0 and 2 were being read at the same pace: stopped long before their end */
    if (accepted >= 20000)
        fail_msg("the other readers went on: %lld rows read", (long long)accepted);
    for (int s = 3; s < 7; s++)
        assert_int_equal(atomic_load(&x->src.extract_calls[s]), 0);
    int failed = atomic_load(&x->src.reader_of[1]) - 1;
    for (int r = 0; r < 3; r++)
        assert_int_equal(atomic_load(&x->rd[r].cancel_calls), r == failed ? 0 : 1);
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 7, got);
    assert_true(got[1] < 300); /* never past the failed row */
    assert_int_equal(atomic_load(&x->stop), 0);
    struct events e = read_events(x);
    assert_int_equal(count_type(&e, FERRY_EV_BATCH_WRITTEN), x->sink.n_batches);
    events_free(&e);
}

/* Two readers fail: the first error is the one reported, once. */
static void test_parallel_first_error_wins(void **state)
{
    struct fx *x = *state;
    const int rows[] = {20000, 20000, 20000};
    use_readers(x, 3, 3, rows);
    x->src.row_sleep_us = 20;
    x->src.fail_shard = 2;
    x->src.fail_key = 1; /* fails at once */
    assert_int_equal(run(x), FERRY_ESOURCE);
    assert_string_equal(x->err.message, "resource orders: fake source: shard 2 row 1 unreadable");
    assert_true(atomic_load(&x->src.accepted) < 2 * 20000);
    assert_int_equal(atomic_load(&x->stop), 0);
}

static void test_parallel_sink_error_stops_every_reader(void **state)
{
    struct fx *x = *state;
    const int rows[] = {5000, 5000, 5000, 5000, 5000, 5000, 5000};
    use_readers(x, 3, 7, rows);
    x->src.row_sleep_us = 5;
    x->sink.fail_seq = 3;
    assert_int_equal(run(x), FERRY_ESINK);
    assert_string_equal(x->err.message, "resource orders batch 3: fake sink: disk on fire");
    assert_int_equal(atomic_load(&x->sink.calls), 3);
    assert_int_equal(x->sink.n_rows, 20);
    assert_true(atomic_load(&x->src.accepted) < 3 * 5000);
    /* Every reader is told to stop (at least once: the error path and the first-error path
     * may both reach a reader that is still running). */
    for (int r = 0; r < 3; r++)
        assert_true(atomic_load(&x->rd[r].cancel_calls) >= 1);
    assert_int_equal(atomic_load(&x->stop), 0);
}

static void test_parallel_with_transforms(void **state)
{
    struct fx *x = *state;
    use_transforms(x, "  - drop: [label]\n");
    const int rows[] = {45, 17, 60, 3, 28};
    use_readers(x, 2, 5, rows);
    x->src.row_sleep_us = 100;
    x->f.opts.queue = 1;
    run_ok(x);
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 5, got);
    for (int s = 0; s < 5; s++)
        assert_int_equal(got[s], rows[s]);
    for (int i = 0; i < x->sink.n_batches; i++)
        assert_int_equal(x->sink.batches[i].n_fields, 2);
    int used = readers_used(x, 5);
    assert_true(used >= 1 && used <= 2);
}

/* The runner's flush tick reaches every reader: each closes its half-full batch at every
 * tick (a tick shared by the row writers would go to one of them, about half each). */
struct ticker {
    struct fx *x;
    atomic_int stop;
    atomic_int ticks;
};

static void *ticker_main(void *arg)
{
    struct ticker *t = arg;
    while (!atomic_load(&t->stop)) {
        usleep(20000);
        atomic_store(&t->x->f.tick, 1);
        /* counted once the flow took it (a loaded machine must not coalesce two ticks the
         * flow saw as one and count both) */
        while (atomic_load(&t->x->f.tick) && !atomic_load(&t->stop))
            usleep(1000);
        atomic_fetch_add(&t->ticks, 1);
    }
    return NULL;
}

static void test_parallel_flush_tick_reaches_every_reader(void **state)
{
    struct fx *x = *state;
    const int rows[] = {200, 200};
    use_readers(x, 2, 2, rows);
    set_batch_rows(x, 1000); /* never full: only ticks and shard ends close batches */
    x->src.row_sleep_us = 2000; /* 400 ms per shard, ~20 ticks */
    struct ticker t = {.x = x};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ticker_main, &t), 0);
    run_ok(x);
    int ticks = atomic_load(&t.ticks);
    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    int got[MAX_SHARDS];
    assert_shard_prefixes(x, 2, got);
    assert_true(ticks >= 5);
    for (int s = 0; s < 2; s++) {
        int with_rows = 0;
        for (int i = 0; i < x->sink.n_batches; i++)
            with_rows += x->sink.batches[i].shard == s && x->sink.batches[i].rows > 0;
        /* a tick shared by the readers would reach each about half the time */
        if (with_rows * 10 < ticks * 6)
            fail_msg("shard %d: %d batches for %d ticks", s, with_rows, ticks);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_row_once_in_order_across_shards, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_resume_positions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durable_after_next_records_every_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_durable_after_next_failed_settle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durable_after_next_failed_apply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durable_now_records_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durable_now_failed_apply_and_settle, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_durable_after_next_failed_apply_and_settle, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_backpressure_bounds_batches_alive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_drains_accepted_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_mid_batch_flushes_the_partial_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pause_with_transforms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_stops_early_and_discards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_with_transforms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_error_stops_the_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_error_stops_a_reading_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_error_with_transforms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_write_crc_is_divergence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_error_after_accepted_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bitflip_failpoint_is_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_written_events_carry_positions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_written_events_at_commit_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transform_stage_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transform_hash_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_readers_every_row_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_readers_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_pause_drains_every_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_reader_error_stops_the_others, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_parallel_first_error_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_sink_error_stops_every_reader, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_parallel_with_transforms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parallel_flush_tick_reaches_every_reader, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
