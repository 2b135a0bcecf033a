/* connectors/null/null.c - the `null` sink: accepts every batch and keeps nothing.
 *
 * It measures the engine without a destination: apply computes the batch digest (so the
 * integrity path costs what it costs with a real sink), fills the receipt and forgets
 * the rows. Calls the batch digest only. Registered in connectors/registry.c; driven by
 * the runner. It has no keys. */
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/digest.h"

struct null_sink {
    int64_t rows;
};

static int null_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct null_sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "null", "null sink: out of memory");
    *ctx = s;
    return FERRY_OK;
}

static void null_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) |
                        (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    caps->durability = FERRY_DURABLE_PER_APPLY;
    caps->concurrent_sessions = true;
    caps->encoded_integrity = false;
    caps->transactional_checkpoint = false;
    /* Nothing is ever visible, so no reader can see half a table. */
    caps->atomic_replace = true;
    caps->deletes = true;
}

static int null_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    return FERRY_OK;
}

static int null_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    return FERRY_OK;
}

static int null_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct null_sink *s = ctx;
    receipt->rows = b->length;
    receipt->bytes = (int64_t)b->bytes;
    receipt->write_crc = ferry_batch_digest(b);
    receipt->has_encoded_crc = false;
    receipt->encoded_crc = 0;
    receipt->uri[0] = '\0';
    s->rows += b->length;
    return FERRY_OK;
}

static int null_commit(void *ctx, struct ferry_error *err)
{
    return FERRY_OK;
}

static void null_abort(void *ctx) {}

static void null_close(void *ctx)
{
    ferry_free(ctx);
}

const struct ferry_sink_vtable ferry__null_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "null",
    .tuning_keys = NULL,
    .open = null_open,
    .capabilities = null_capabilities,
    .prepare = null_prepare,
    .begin = null_begin,
    .apply = null_apply,
    .commit = null_commit,
    .abort = null_abort,
    .close = null_close,
    .checkpoints = NULL,
};
