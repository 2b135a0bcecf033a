/* ferry/arrow.h - export batches through the Arrow C Data Interface.
 *
 * The structs are those of the public specification
 * (https://arrow.apache.org/docs/format/CDataInterface.html), declared here under the
 * spec's own guard so a consumer that already has them compiles once. The exported array
 * is a struct array with one child per column; buffers are shared with the batch (no
 * copy): the export holds a reference on the batch until the consumer calls release. */
#ifndef FERRY_ARROW_H
#define FERRY_ARROW_H

#include <stdint.h>
#include "ferry/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

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
