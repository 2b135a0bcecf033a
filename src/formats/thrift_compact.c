/* formats/thrift_compact.c - Thrift compact protocol encoder (write side only).
 *
 * Owns nothing but the encoder state; appends to a caller's ferry_buf. Calls core only.
 * Called by parquet_writer.c for the footer (FileMetaData) and every page header.
 * Written from the Thrift compact protocol specification: varints are unsigned LEB128,
 * signed integers are zigzag-encoded first, a field header is one byte
 * (delta << 4 | type) when the id grows by 1..15 and otherwise the type byte followed
 * by the zigzag i16 id; bool fields carry their value in the type nibble. */
#include <string.h>
#include "formats/thrift_compact.h"
#include "ferry/error.h"

void ferry__thrift_init(struct ferry_thrift *t, struct ferry_buf *out)
{
    memset(t, 0, sizeof(*t));
    t->out = out;
}

int ferry__thrift_status(const struct ferry_thrift *t)
{
    return t->status;
}

void ferry__thrift_raw(struct ferry_thrift *t, const void *p, size_t n)
{
    if (t->status == FERRY_OK && n > 0)
        t->status = ferry_buf_append(t->out, p, n);
}

static void put_byte(struct ferry_thrift *t, uint8_t v)
{
    ferry__thrift_raw(t, &v, 1);
}

static void put_varint(struct ferry_thrift *t, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    ferry__thrift_raw(t, tmp, n);
}

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static void field_header(struct ferry_thrift *t, int16_t id, int type)
{
    int16_t delta = (int16_t)(id - t->last[t->depth]);
    if (delta > 0 && delta <= 15) {
        put_byte(t, (uint8_t)((delta << 4) | type));
    } else {
        put_byte(t, (uint8_t)type);
        put_varint(t, zigzag(id));
    }
    t->last[t->depth] = id;
}

void ferry__thrift_bool(struct ferry_thrift *t, int16_t id, bool v)
{
    field_header(t, id, v ? FERRY_THRIFT_BOOL_TRUE : FERRY_THRIFT_BOOL_FALSE);
}

void ferry__thrift_i8(struct ferry_thrift *t, int16_t id, int8_t v)
{
    field_header(t, id, FERRY_THRIFT_I8);
    put_byte(t, (uint8_t)v);
}

void ferry__thrift_i32(struct ferry_thrift *t, int16_t id, int32_t v)
{
    field_header(t, id, FERRY_THRIFT_I32);
    put_varint(t, zigzag(v));
}

void ferry__thrift_i64(struct ferry_thrift *t, int16_t id, int64_t v)
{
    field_header(t, id, FERRY_THRIFT_I64);
    put_varint(t, zigzag(v));
}

void ferry__thrift_binary(struct ferry_thrift *t, int16_t id, const void *p, size_t n)
{
    field_header(t, id, FERRY_THRIFT_BINARY);
    ferry__thrift_binary_elem(t, p, n);
}

void ferry__thrift_string(struct ferry_thrift *t, int16_t id, const char *s)
{
    ferry__thrift_binary(t, id, s, strlen(s));
}

static void push(struct ferry_thrift *t)
{
    if (t->depth + 1 >= FERRY_THRIFT_MAX_DEPTH) {
        t->status = FERRY_EINVAL; /* a programming error: our structs nest 5 deep */
        return;
    }
    t->depth++;
    t->last[t->depth] = 0;
}

void ferry__thrift_struct_begin(struct ferry_thrift *t, int16_t id)
{
    field_header(t, id, FERRY_THRIFT_STRUCT);
    push(t);
}

void ferry__thrift_elem_struct_begin(struct ferry_thrift *t)
{
    push(t);
}

void ferry__thrift_struct_end(struct ferry_thrift *t)
{
    put_byte(t, 0);
    if (t->depth > 0)
        t->depth--;
}

void ferry__thrift_end(struct ferry_thrift *t)
{
    put_byte(t, 0);
}

void ferry__thrift_list_begin(struct ferry_thrift *t, int16_t id, enum ferry_thrift_type elem,
                              size_t n)
{
    field_header(t, id, FERRY_THRIFT_LIST);
    if (n < 15) {
        put_byte(t, (uint8_t)((n << 4) | (unsigned)elem));
    } else {
        put_byte(t, (uint8_t)(0xF0 | (unsigned)elem));
        put_varint(t, n);
    }
}

void ferry__thrift_i32_elem(struct ferry_thrift *t, int32_t v)
{
    put_varint(t, zigzag(v));
}

void ferry__thrift_binary_elem(struct ferry_thrift *t, const void *p, size_t n)
{
    put_varint(t, n);
    ferry__thrift_raw(t, p, n);
}
