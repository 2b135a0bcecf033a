/* connectors/postgres/pg_encode.h - the COPY ... FROM STDIN (FORMAT binary) encoder of the
 * postgres sink (private to this folder; needs no libpq, so it is unit-tested without a
 * server).
 *
 * The binary COPY format: an 11-byte signature, a 32-bit flags word and a 32-bit header
 * extension length, then per row a 16-bit field count and per field a 32-bit length (-1 for
 * NULL) followed by the value in the type's binary send format, then a 16-bit -1 trailer.
 * Everything is big-endian. The value format is that of the DESTINATION column's type (a
 * bigint column wants 8 bytes even when the data is int32), so each column is encoded with a
 * wire kind chosen from the destination column (see ferry__pg_wire_for). */
#ifndef FERRY_PG_ENCODE_H
#define FERRY_PG_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/error.h"

/* Binary formats of the destination column types the sink writes. */
enum ferry_pg_wire {
    FERRY_PG_WIRE_NONE = 0,
    FERRY_PG_WIRE_BOOL,
    FERRY_PG_WIRE_INT2,
    FERRY_PG_WIRE_INT4,
    FERRY_PG_WIRE_INT8,
    FERRY_PG_WIRE_FLOAT4,
    FERRY_PG_WIRE_FLOAT8,
    FERRY_PG_WIRE_NUMERIC,
    FERRY_PG_WIRE_TEXT,  /* text, varchar, json: the bytes as they are */
    FERRY_PG_WIRE_JSONB, /* version byte 1, then the text */
    FERRY_PG_WIRE_BYTEA,
    FERRY_PG_WIRE_DATE,
    FERRY_PG_WIRE_TIME,
    FERRY_PG_WIRE_TIMESTAMP, /* timestamp and timestamptz: microseconds since 2000-01-01 */
    FERRY_PG_WIRE_UUID,
    FERRY_PG_WIRE_TEXT_CHARS, /* varchar(n) / char(n): the bytes, length checked (chars) */
    FERRY_PG_WIRE_OID,        /* oid: 4 bytes unsigned, from integers in 0..4294967295 */
};

/* Pseudo source columns for the staging tables of upsert/merge. */
#define FERRY_PG_COL_ROWNUM (-1) /* the row's index in the batch, as int8 */
#define FERRY_PG_COL_OP (-2)     /* the row's operation, as int2 */

struct ferry_pg_wire_col {
    int col; /* batch column, or FERRY_PG_COL_ROWNUM / FERRY_PG_COL_OP */
    enum ferry_pg_wire wire;
    int32_t chars; /* FERRY_PG_WIRE_TEXT_CHARS: at most this many characters (varchar(n)), or
                    * exactly -chars (char(n), whose text form is padded): PostgreSQL would
                    * cut trailing spaces or pad silently */
    bool specials; /* the values may be ferry's special values (connector.h): +-infinity of
                    * dates and timestamps, NaN of decimal128, written as PostgreSQL's own */
};

/* The wire kind that writes data of field f into a destination column of type `type_oid`
 * (typmod as in pg_attribute), or FERRY_PG_WIRE_NONE when that column cannot hold every
 * value of f exactly (the caller reports the table and column). */
enum ferry_pg_wire ferry__pg_wire_for(const struct ferry_field *f, uint32_t type_oid,
                                      int32_t typmod);

/* Appends the 19-byte stream header / the 2-byte trailer. */
int ferry__pg_copy_header(struct ferry_buf *out);
int ferry__pg_copy_trailer(struct ferry_buf *out);

/* Appends rows [*row, b->length) of b to out, stopping after the row that makes out->len
 * reach `flush_at` (the caller sends and resets out, then calls again). Advances *row.
 * A value the destination cannot take (a decimal text that is not a number, a timestamp
 * outside PostgreSQL's range) is FERRY_EINVAL naming the column and the row. Allocates
 * nothing but out's growth. */
int ferry__pg_copy_rows(struct ferry_buf *out, const struct ferry_batch *b,
                        const struct ferry_pg_wire_col *cols, int n_cols, int64_t *row,
                        size_t flush_at, struct ferry_error *err);

/* One numeric value in the binary numeric format (ndigits, weight, sign, dscale, then
 * NBASE-10000 digits) from its text ("-12.3400", "1.5e-3", "NaN", "Infinity",
 * "-Infinity"), appended to out. FERRY_EINVAL when s is not a number or exceeds numeric's
 * range. */
int ferry__pg_numeric_from_text(struct ferry_buf *out, const char *s, size_t n);

/* The same for a decimal128 unscaled integer at `scale` (negative: trailing zeros), computed
 * arithmetically (no text, no allocation beyond out). Byte-identical to
 * ferry__pg_numeric_from_text of ferry_decimal128_to_text(v, scale): zero keeps dscale
 * max(scale, 0) and is never negative. FERRY_EINVAL only for a scale beyond numeric's. */
int ferry__pg_numeric_from_dec128(struct ferry_buf *out, struct ferry_decimal128 v, int scale);

#endif
