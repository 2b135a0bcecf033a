/* connectors/callback/callback.h - the `callback` sink's binding to the program that
 * embeds ferry (src/embed/embed.c binds it around a run; docs/embedding.md).
 *
 * The sink has no keys and nowhere to write by itself: it hands every batch, exported
 * through the Arrow C Data Interface, to the one function bound in this process. Opening it
 * with nothing bound is a configuration error (the CLI never binds one). */
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

/* Binds fn (NULL unbinds); FERRY_ECONFLICT when another function is bound already. */
int ferry__callback_sink_bind(ferry_callback_batch_fn fn, void *ctx, struct ferry_error *err);
void ferry__callback_sink_unbind(void);

#endif
