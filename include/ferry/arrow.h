/* ferry/arrow.h - export batches through the Arrow C Data Interface.
 *
 * The structs are those of the public specification
 * (https://arrow.apache.org/docs/format/CDataInterface.html), declared in the installed
 * ferry/ferry.h under the spec's own guard. The exported array
 * is a struct array with one child per column; buffers are shared with the batch (no
 * copy): the export holds a reference on the batch until the consumer calls release. */
#ifndef FERRY_ARROW_H
#define FERRY_ARROW_H

#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/ferry.h" /* the Arrow C Data Interface structs, declared once */

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *out (a struct "+s" with one child per field; uuid is "w:16" with extension
 * "arrow.uuid", json is "u" with extension "arrow.json", decimal text is "u" with
 * extension "ferry.decimal_text"). The caller owns *out and must call out->release. */
int ferry_schema_export(const struct ferry_schema *s, struct ArrowSchema *out,
                        struct ferry_error *err);
/* Fills *out sharing b's buffers; takes a reference on b released by out->release. */
int ferry_batch_export(struct ferry_batch *b, struct ArrowArray *out, struct ferry_error *err);

#ifdef __cplusplus
}
#endif
#endif
