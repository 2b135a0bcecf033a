/* connectors/callback/callback.h - the `callback` sink's binding to the program that
 * embeds ferry (src/embed/embed.c binds it for each run; docs/embedding.md).
 *
 * The sink has no keys and nowhere to write by itself: it hands every batch, exported
 * through the Arrow C Data Interface, to the function of its run's binding, which the
 * runner puts on the sink section (ferry_run_options.sink_host -> ferry_cfg.host). Runs at
 * once in one process each have their own. Opening it without a binding is a configuration
 * error (the CLI never binds one). */
#ifndef FERRY_CALLBACK_SINK_H
#define FERRY_CALLBACK_SINK_H

#include <stdint.h>
#include "ferry/arrow.h"
#include "ferry/error.h"

struct ferry_callback_batch {
    const char *resource;
    const char *table;
    int64_t seq;
    int64_t rows;
};

/* Receives one batch; owns *schema and *array whatever it returns. 0: delivered; else the
 * sink fails the run with FERRY_ESINK naming the resource, the batch and the value. */
typedef int (*ferry_callback_batch_fn)(void *ctx, const struct ferry_callback_batch *batch,
                                       struct ArrowSchema *schema, struct ArrowArray *array);

/* What ferry_run_options.sink_host points to for a callback sink; lives for the run. */
struct ferry_callback_binding {
    ferry_callback_batch_fn fn;
    void *ctx;
};

#endif
