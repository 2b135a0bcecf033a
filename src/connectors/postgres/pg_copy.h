/* connectors/postgres/pg_copy.h - the COPY ... TO STDOUT (FORMAT binary) decoder of the
 * postgres source (private to this folder; exposed for its unit test).
 *
 * The stream is: an 11-byte signature "PGCOPY\n\377\r\n\0", int32 flags, int32 header
 * extension length and that many bytes; then tuples, each an int16 field count followed by
 * (int32 length, bytes) per field, length -1 meaning NULL; then the int16 trailer -1. All
 * integers are big-endian. Chunks may split the stream anywhere: an incomplete tuple is
 * kept (copied once) until the next chunk completes it; a complete tuple is decoded in
 * place straight into the row writer, so steady state allocates nothing per row.
 *
 * Each column says how its value is sent (`wire`, the PostgreSQL binary send form) and the
 * ferry type it is written as. Types without a native decoder are selected as `col::text`
 * by the source and arrive as FERRY_PG_W_TEXT. */
#ifndef FERRY_PG_COPY_H
#define FERRY_PG_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/error.h"

enum ferry_pg_wire {
    FERRY_PG_W_BOOL = 1,
    FERRY_PG_W_INT2,
    FERRY_PG_W_INT4,
    FERRY_PG_W_INT8,
    FERRY_PG_W_OID,        /* uint32 */
    FERRY_PG_W_FLOAT4,
    FERRY_PG_W_FLOAT8,
    FERRY_PG_W_NUMERIC,    /* -> decimal128 (exact scaling) or decimal text */
    FERRY_PG_W_TEXT,       /* text, varchar, bpchar, name, json, ::text fallbacks */
    FERRY_PG_W_BYTEA,
    FERRY_PG_W_DATE,       /* int32 days since 2000-01-01 */
    FERRY_PG_W_TIME,       /* int64 us since midnight */
    FERRY_PG_W_TIMESTAMP,  /* int64 us since 2000-01-01 */
    FERRY_PG_W_TIMESTAMPTZ,
    FERRY_PG_W_UUID,
    FERRY_PG_W_JSONB       /* version byte 1, then the text */
};

/* The wire form of a natively decoded type OID; false for types read through ::text. */
bool ferry__pg_wire_of(uint32_t type_oid, enum ferry_pg_wire *wire);

struct ferry_pg_copy_col {
    const char *name;      /* for messages (borrowed) */
    enum ferry_pg_wire wire;
    enum ferry_type type;  /* the schema field's type */
    int precision, scale;  /* decimal128 */
};

struct ferry_pg_copy {
    const struct ferry_pg_copy_col *cols; /* borrowed */
    int n_cols;
    const char *what;      /* "postgres source: table \"s\".\"t\"" for messages (borrowed) */
    int state;             /* 0 header, 1 tuples, 2 trailer seen */
    int64_t rows;          /* tuples decoded */
    struct ferry_buf carry; /* an incomplete tuple between chunks */
    struct ferry_buf text;  /* numeric text scratch, reused */
    bool specials;          /* +-infinity and numeric(p,s) NaN as ferry's special values
                             * (connector.h), else refused; false after init */
};

void ferry__pg_copy_init(struct ferry_pg_copy *d, const struct ferry_pg_copy_col *cols, int n,
                         const char *what);
void ferry__pg_copy_release(struct ferry_pg_copy *d);
/* Decodes every complete tuple of the stream so far into rw (ferry_rw_begin .. end per
 * tuple). Bad data is FERRY_EINVAL naming the column and the row; a non-OK return of
 * ferry_rw_end() (pause, cancel, sink failure) is returned as is. */
int ferry__pg_copy_feed(struct ferry_pg_copy *d, const uint8_t *p, size_t n,
                        struct ferry_row_writer *rw, struct ferry_error *err);
/* At the end of the stream: FERRY_OK only when the trailer was seen and nothing is left. */
int ferry__pg_copy_finish(struct ferry_pg_copy *d, struct ferry_error *err);

/* numeric's binary form (int16 ndigits, int16 weight, uint16 sign, uint16 dscale, ndigits
 * base-10000 int16 digits) as exact decimal text ("-12.3400", "NaN", "Infinity",
 * "-Infinity"), appended to out. FERRY_EINVAL when malformed. */
int ferry__pg_numeric_text(const uint8_t *p, size_t n, struct ferry_buf *out);
/* The same as a decimal128 unscaled integer at `scale`: FERRY_EINVAL when malformed, NaN or
 * infinite, when the value has more fractional digits than `scale`, or when it needs more
 * than `precision` digits. */
int ferry__pg_numeric_dec128(const uint8_t *p, size_t n, int precision, int scale,
                             struct ferry_decimal128 *out);

#endif
