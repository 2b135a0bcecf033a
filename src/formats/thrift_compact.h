/* formats/thrift_compact.h - a write-only Thrift compact protocol encoder.
 *
 * Enough of the compact protocol (Apache Thrift, "compact protocol" spec) to write the
 * Parquet footer and page headers: structs, lists, bool, i8, i16/i32/i64 (zigzag
 * varints) and binary. Field ids are delta-encoded against the previous field of the
 * same struct, so fields of one struct must be written in increasing id order.
 *
 * Errors are sticky: every call after a failed append does nothing and
 * ferry__thrift_status() reports the first failure (FERRY_ENOMEM). Not thread-safe. */
#ifndef FERRY_FORMATS_THRIFT_COMPACT_H
#define FERRY_FORMATS_THRIFT_COMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"

/* Compact protocol type ids (as written in field headers and list headers). */
enum ferry_thrift_type {
    FERRY_THRIFT_BOOL_TRUE = 1,
    FERRY_THRIFT_BOOL_FALSE = 2,
    FERRY_THRIFT_I8 = 3,
    FERRY_THRIFT_I16 = 4,
    FERRY_THRIFT_I32 = 5,
    FERRY_THRIFT_I64 = 6,
    FERRY_THRIFT_DOUBLE = 7,
    FERRY_THRIFT_BINARY = 8,
    FERRY_THRIFT_LIST = 9,
    FERRY_THRIFT_STRUCT = 12
};

#define FERRY_THRIFT_MAX_DEPTH 16

struct ferry_thrift {
    struct ferry_buf *out;            /* borrowed */
    int16_t last[FERRY_THRIFT_MAX_DEPTH]; /* previous field id per open struct */
    int depth;
    int status;
};

void ferry__thrift_init(struct ferry_thrift *t, struct ferry_buf *out);
int ferry__thrift_status(const struct ferry_thrift *t);

/* Fields of the current struct. */
void ferry__thrift_bool(struct ferry_thrift *t, int16_t id, bool v);
void ferry__thrift_i8(struct ferry_thrift *t, int16_t id, int8_t v);
void ferry__thrift_i32(struct ferry_thrift *t, int16_t id, int32_t v);
void ferry__thrift_i64(struct ferry_thrift *t, int16_t id, int64_t v);
void ferry__thrift_binary(struct ferry_thrift *t, int16_t id, const void *p, size_t n);
void ferry__thrift_string(struct ferry_thrift *t, int16_t id, const char *s);
/* A struct-typed field: begin, its fields, end. */
void ferry__thrift_struct_begin(struct ferry_thrift *t, int16_t id);
void ferry__thrift_struct_end(struct ferry_thrift *t);
/* A list-typed field of n elements of type elem; then write n elements with the
 * *_elem calls (or, for structs, ferry__thrift_elem_struct_begin/struct_end). */
void ferry__thrift_list_begin(struct ferry_thrift *t, int16_t id, enum ferry_thrift_type elem,
                              size_t n);
void ferry__thrift_i32_elem(struct ferry_thrift *t, int32_t v);
void ferry__thrift_binary_elem(struct ferry_thrift *t, const void *p, size_t n);
void ferry__thrift_elem_struct_begin(struct ferry_thrift *t);
/* Raw bytes (an element already encoded, e.g. a struct serialized on its own earlier). */
void ferry__thrift_raw(struct ferry_thrift *t, const void *p, size_t n);
/* Ends the top-level struct (writes its stop byte). */
void ferry__thrift_end(struct ferry_thrift *t);

#endif
