/* connectors/mysql/my_json.h - MySQL 8's binary JSON (the JSON column's storage form, which
 * the binary log carries for type 245) as JSON text, written from the format description in
 * MySQL's public source documentation (json_binary.h): a type byte, then small (16-bit) or
 * large (32-bit) objects and arrays of value entries (inlined literals and small integers,
 * else offsets from the container's start), key entries (offset, 16-bit length), int16 ..
 * uint64, doubles (8 bytes little-endian), utf8mb4 strings with a variable-length size, and
 * opaque values of a MySQL type (DECIMAL, DATE, DATETIME, TIMESTAMP, TIME decoded; others as
 * MySQL prints them, "base64:typeN:..."). The text is in MySQL's own output form:
 * `{"k": v, "k2": [1, 2]}`, keys in stored order, strings escaped as JSON requires, doubles
 * in the shortest round-trip form with ".0" when integral.
 *
 * Pure and bounds-checked: any bytes give text or FERRY_EINVAL naming the field; nesting is
 * limited to 100 levels (MySQL's own limit). Tested only on hand-built bytes
 * (tests/unit/test_my_json.c): no MySQL 8 server in the suite. */
#ifndef FERRY_MY_JSON_H
#define FERRY_MY_JSON_H
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

/* Appends the JSON text of the binary JSON document p[0..n) to out. An empty document
 * (n == 0) is the JSON null literal. */
int ferry__my_json_to_text(const uint8_t *p, size_t n, struct ferry_buf *out,
                           struct ferry_error *err);

#endif
