/* connectors/callback/callback.c - the `callback` sink: batches handed to the embedding
 * program through the Arrow C Data Interface (callback.h, docs/embedding.md).
 *
 * Append only. Durable per apply: a batch is delivered when the bound function returns 0,
 * so the run's checkpoint may move past it at once. apply computes the batch digest first
 * (as every sink does: a batch changed between the pipeline and this sink is reported, not
 * delivered), exports the schema and the rows (shared buffers, no copy), and calls the
 * function under a lock: the program never sees two calls at once, whatever the runner's
 * threads. Zero-row batches (a shard's end) are not handed over. Calls batch/arrow_export
 * and the digest. Registered in connectors/registry.c; bound per run by src/embed/ through
 * the sink section's host pointer (callback.h). */
#include <pthread.h>
#include <string.h>
#include "connectors/callback/callback.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"

struct callback_sink {
    ferry_callback_batch_fn fn;
    void *fn_ctx;
    pthread_mutex_t call_lock; /* one call of fn at a time */
};

static int cb_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const struct ferry_callback_binding *bound = cfg->host;
    if (bound == NULL || bound->fn == NULL)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "sink type callback: no program is receiving batches; the callback "
                               "sink exists only in a program that embeds libferry and runs the "
                               "pipeline with ferry_job_run and an on_batch function "
                               "(docs/embedding.md)");
    struct callback_sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "callback", "callback sink: out of memory");
    if (pthread_mutex_init(&s->call_lock, NULL) != 0) {
        ferry_free(s);
        return ferry_error_set(err, FERRY_ENOMEM, "callback", "callback sink: no mutex");
    }
    s->fn = bound->fn;
    s->fn_ctx = bound->ctx;
    *ctx = s;
    return FERRY_OK;
}

static void cb_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    caps->write_modes = 1u << FERRY_WRITE_APPEND;
    caps->durability = FERRY_DURABLE_PER_APPLY;
}

static int cb_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    return FERRY_OK;
}

static int cb_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    return FERRY_OK;
}

/* Exports b with the target's schema and calls the bound function. */
static int deliver(struct callback_sink *s, const struct ferry_target *target,
                   struct ferry_batch *b, struct ferry_error *err)
{
    struct ArrowSchema schema;
    struct ArrowArray array;
    int rc = ferry_schema_export(b->schema, &schema, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry_batch_export(b, &array, err);
    if (rc != FERRY_OK) {
        schema.release(&schema);
        return rc;
    }
    struct ferry_callback_batch info = {target->resource, target->table, (int64_t)b->seq,
                                        b->length};
    pthread_mutex_lock(&s->call_lock);
    int got = s->fn(s->fn_ctx, &info, &schema, &array);
    pthread_mutex_unlock(&s->call_lock);
    if (got != 0)
        return ferry_error_set(err, FERRY_ESINK, "callback",
                               "callback sink: the program's on_batch refused batch %lld of "
                               "resource %s (%lld rows): it returned %d",
                               (long long)b->seq, target->resource, (long long)b->length, got);
    return FERRY_OK;
}

static int cb_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                    struct ferry_receipt *receipt, struct ferry_error *err)
{
    receipt->rows = b->length;
    receipt->bytes = (int64_t)b->bytes;
    receipt->write_crc = ferry_batch_digest(b);
    receipt->has_encoded_crc = false;
    receipt->uri[0] = '\0';
    if (receipt->write_crc != b->digest || b->length == 0) return FERRY_OK;
    return deliver(ctx, target, b, err);
}

static int cb_commit(void *ctx, struct ferry_error *err)
{
    return FERRY_OK;
}

static void cb_abort(void *ctx) {}

static void cb_close(void *ctx)
{
    struct callback_sink *s = ctx;
    if (s == NULL) return;
    pthread_mutex_destroy(&s->call_lock);
    ferry_free(s);
}

const struct ferry_sink_vtable ferry__callback_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "callback",
    .tuning_keys = NULL,
    .open = cb_open,
    .capabilities = cb_capabilities,
    .prepare = cb_prepare,
    .begin = cb_begin,
    .apply = cb_apply,
    .commit = cb_commit,
    .abort = cb_abort,
    .close = cb_close,
    .checkpoints = NULL,
};
