/* ferry/batch.h - typed columnar batches in the Apache Arrow memory layout.
 *
 * A schema is a refcounted, immutable list of fields. A batch holds `length` rows of
 * every field as one column each, plus one operation byte per row, the resource it
 * belongs to, its sequence number within the run, and the source position of its last
 * row. Buffers follow Arrow exactly so that ferry_batch_export() (ferry/arrow.h) hands
 * them out without copying:
 *
 *   type                      buffers                       value width
 *   BOOL                      validity, values (bitmap)     1 bit
 *   INT8/16/32/64, FLOAT32/64 validity, values              1/2/4/8, 4/8
 *   DATE32                    validity, values              4 (days since 1970-01-01)
 *   TIME64_US                 validity, values              8 (microseconds since midnight)
 *   TIMESTAMP_US(TZ)          validity, values              8 (microseconds since 1970, UTC)
 *   DECIMAL128(p,s)           validity, values              16 (little-endian two's complement)
 *   UUID                      validity, values              16 (RFC 4122 byte order)
 *   UTF8, JSON, DECIMAL_TEXT, validity, offsets (int32), data
 *   BINARY
 *
 * Validity: bit i set means row i is not null; the bitmap is NULL while a column has no
 * null. Builders zero the value slot of a null fixed-width row.
 *
 * Slices share buffers with their parent and carry an `offset` (in rows) that applies to
 * every column and to `ops`; ferry_batch_slice() is O(columns) plus a popcount of each
 * validity bitmap over the range, so that null counts stay exact.
 *
 * Ownership: a batch is refcounted; ferry_batch_unref() frees it at zero. A batch has one
 * owner at a time in the pipeline (a queue takes it on push, hands it over on pop); a
 * sink that keeps it after apply() takes a reference. Not thread-safe except ref/unref. */
#ifndef FERRY_BATCH_H
#define FERRY_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reference counts are C11 atomics (stdatomic); C++ before C++23 has no _Atomic and sees
 * a plain int, which has the same size and alignment on every ABI ferry builds for. */
#ifdef __cplusplus
#define FERRY_ATOMIC_INT int
#else
#define FERRY_ATOMIC_INT _Atomic int
#endif

enum ferry_type {
    FERRY_TYPE_BOOL = 1,
    FERRY_TYPE_INT8,
    FERRY_TYPE_INT16,
    FERRY_TYPE_INT32,
    FERRY_TYPE_INT64,
    FERRY_TYPE_FLOAT32,
    FERRY_TYPE_FLOAT64,
    FERRY_TYPE_DECIMAL128,   /* precision 1..38, scale -precision..precision */
    FERRY_TYPE_DECIMAL_TEXT, /* exact decimal carried as canonical text: "-12.3400", "NaN" */
    FERRY_TYPE_UTF8,
    FERRY_TYPE_BINARY,
    FERRY_TYPE_DATE32,
    FERRY_TYPE_TIME64_US,
    FERRY_TYPE_TIMESTAMP_US,   /* without time zone */
    FERRY_TYPE_TIMESTAMPTZ_US, /* with time zone; values are UTC */
    FERRY_TYPE_UUID,
    FERRY_TYPE_JSON,           /* utf8 with extension name "arrow.json" */
    FERRY_TYPE_MAX
};

/* TRUNCATE: every row of the table written before it goes (cdc into sinks whose caps say
 * `truncates`); its key columns hold placeholder values, its other columns are null. */
enum ferry_op {
    FERRY_OP_INSERT = 0,
    FERRY_OP_UPDATE = 1,
    FERRY_OP_DELETE = 2,
    FERRY_OP_TRUNCATE = 3
};

/* Stable names ("int64", "decimal128", "timestamptz"...) used in config, JSON, docs. */
const char *ferry_type_name(enum ferry_type t);
FERRY_MUST_CHECK int ferry_type_from_name(const char *name, enum ferry_type *out);
/* Bytes per value for fixed-width types, 0 for bool (bits) and variable-width types. */
int ferry_type_width(enum ferry_type t);
bool ferry_type_is_varwidth(enum ferry_type t);

struct ferry_field {
    char *name;
    enum ferry_type type;
    int precision; /* DECIMAL128 only */
    int scale;     /* DECIMAL128 only */
    bool nullable;
    int key_pos;   /* 0: not in the primary key; 1..n: position in the key */
    /* The source's own column type, "<connector>:<type>" (e.g. "postgres:integer[]",
     * "postgres:src.mood"), or NULL. Only a sink of the same kind reads it (to create or
     * check a column of that type); the values are those `type` says. Owned by the schema. */
    char *origin_type;
};

struct ferry_schema {
    FERRY_ATOMIC_INT refcount;
    int n_fields;
    struct ferry_field *fields;
    int n_key;
    int *key; /* field indexes in key order */
    /* 1 + the index of the field a merge sets instead of deleting the row (cdc
     * `soft_delete`, set by the runner on what a sink writes; sinks with caps.soft_deletes
     * honour it); 0: deletes delete. Added for cdc. */
    int soft_delete;
};

/* Ownership: new returns refcount 1. add_field copies name. finish computes `key` from the
 * fields' key_pos and must be called once all fields are added. */
struct ferry_schema *ferry_schema_new(void);
FERRY_MUST_CHECK int ferry_schema_add_field(struct ferry_schema *s, const char *name, enum ferry_type type,
                           bool nullable, struct ferry_error *err);
FERRY_MUST_CHECK int ferry_schema_finish(struct ferry_schema *s, struct ferry_error *err);
struct ferry_schema *ferry_schema_ref(struct ferry_schema *s);
void ferry_schema_unref(struct ferry_schema *s);
int ferry_schema_find(const struct ferry_schema *s, const char *name); /* index or -1 */
/* Sets (copies) field i's origin_type; NULL clears it. Before the schema is shared. */
FERRY_MUST_CHECK int ferry_schema_set_origin(struct ferry_schema *s, int i, const char *origin,
                                             struct ferry_error *err);
/* Marks the declared key (`key:` of a resource): key[k] gets key position k + 1. Returns -1,
 * or the index in key of the first name the schema lacks (the caller reports it). */
int ferry_schema_mark_key(struct ferry_schema *s, char *const *key, int n);

struct ferry_decimal128 {
    uint64_t lo;
    int64_t hi;
};

struct ferry_column {
    enum ferry_type type;
    int64_t null_count;
    uint8_t *validity;  /* NULL when null_count == 0 */
    uint8_t *values;    /* fixed width values or bool bitmap; NULL for var-width */
    int32_t *offsets;   /* var-width only: offset + length + 1 entries are valid */
    uint8_t *data;      /* var-width only */
    /* builder state: capacities in bytes; unused by readers */
    size_t validity_cap, values_cap, offsets_cap, data_cap;
};

struct ferry_batch {
    FERRY_ATOMIC_INT refcount;
    struct ferry_schema *schema;
    char *resource;
    uint64_t seq;     /* 1, 2, 3... per resource within a run */
    int64_t length;   /* rows */
    int64_t offset;   /* first row in the buffers (slices) */
    struct ferry_column *columns; /* schema->n_fields */
    uint8_t *ops;     /* enum ferry_op per row, indexed with offset */
    char *position;   /* JSON position of the last row (see DESIGN §3), or NULL */
    int shard;        /* shard the rows came from */
    uint32_t digest;  /* set by the pipeline just before sink apply */
    size_t bytes;     /* approximate payload bytes */
    struct ferry_batch *parent; /* slices: the batch that owns the buffers */
    /* The last batch of the resource before a commit-group cut (ferry_rw_close_group): the
     * cdc streams of one source log that share a destination commit there together. */
    bool group_cut;
};

/* An empty batch (length 0) with allocated column headers; builders fill it.
 * Takes a reference on schema. */
struct ferry_batch *ferry_batch_new(struct ferry_schema *schema, const char *resource);
struct ferry_batch *ferry_batch_ref(struct ferry_batch *b);
void ferry_batch_unref(struct ferry_batch *b);
/* Rows [offset, offset+length) of b as a new batch sharing b's buffers. */
struct ferry_batch *ferry_batch_slice(struct ferry_batch *b, int64_t offset, int64_t length);
/* A deep copy whose buffers are canonical (offset 0). */
struct ferry_batch *ferry_batch_copy(const struct ferry_batch *b);
int ferry_batch_set_position(struct ferry_batch *b, const char *json);

/* Readers. `row` is relative to the batch (offset is applied inside). */
static inline bool ferry_col_is_null(const struct ferry_batch *b, int col, int64_t row)
{
    const struct ferry_column *c = &b->columns[col];
    int64_t i = row + b->offset;
    return c->validity != NULL && !(c->validity[i >> 3] & (1u << (i & 7)));
}
bool ferry_col_bool(const struct ferry_batch *b, int col, int64_t row);
int64_t ferry_col_int(const struct ferry_batch *b, int col, int64_t row); /* ints, dates, times */
double ferry_col_float(const struct ferry_batch *b, int col, int64_t row);
struct ferry_decimal128 ferry_col_dec128(const struct ferry_batch *b, int col, int64_t row);
const uint8_t *ferry_col_bytes(const struct ferry_batch *b, int col, int64_t row, size_t *len);
const uint8_t *ferry_col_fixed(const struct ferry_batch *b, int col, int64_t row); /* uuid */
static inline enum ferry_op ferry_batch_op(const struct ferry_batch *b, int64_t row)
{
    return (enum ferry_op)b->ops[row + b->offset];
}

/* Value text forms shared by sinks, verify and the CLI (no allocation; buf >= 64 bytes,
 * or the decimal's digits + 3). Return the length written. */
int ferry_decimal128_to_text(struct ferry_decimal128 v, int scale, char *buf, size_t len);
FERRY_MUST_CHECK int ferry_decimal128_from_text(const char *s, size_t n, int precision, int scale,
                               struct ferry_decimal128 *out);
int ferry_date32_to_text(int32_t days, char *buf, size_t len);            /* 2024-01-31 */
int ferry_time64_to_text(int64_t us, char *buf, size_t len);              /* 13:45:00.123456 */
int ferry_timestamp_to_text(int64_t us, bool tz, char *buf, size_t len);  /* ...+00 when tz */
int ferry_uuid_to_text(const uint8_t b[16], char *buf, size_t len);
FERRY_MUST_CHECK int ferry_date32_from_text(const char *s, size_t n, int32_t *out);
FERRY_MUST_CHECK int ferry_time64_from_text(const char *s, size_t n, int64_t *out);
FERRY_MUST_CHECK int ferry_timestamp_from_text(const char *s, size_t n, int64_t *out); /* accepts offsets */
FERRY_MUST_CHECK int ferry_uuid_from_text(const char *s, size_t n, uint8_t out[16]);

/* ---- Builders: the row writer a source writes into --------------------------------- */

/* The source hands each row's values, in schema order, to a row writer:
 *
 *     ferry_rw_begin(rw, FERRY_OP_INSERT);
 *     ferry_rw_int(rw, id); ferry_rw_text(rw, name, len); ferry_rw_null(rw); ...
 *     rc = ferry_rw_end(rw, err);   // may block on backpressure; honours pause/cancel
 *
 * The append calls never fail and never allocate per row: a value that does not fit the
 * column's type or a buffer that reaches its cap sets a sticky error reported by
 * ferry_rw_end(). ferry_rw_int() accepts every integer-backed type (ints, date32,
 * time64, timestamps) and narrows it; ferry_rw_float() both float types; ferry_rw_text()
 * every var-width type; ferry_rw_fixed() uuid and decimal128 bytes.
 *
 * Positions: the batch position is built when the batch closes from the last row's
 * values of the position columns (ferry_rw_set_position_columns(): the key for keyset
 * reads, cursor + key for incremental ones), plus `shard` and an optional integer `n`
 * (byte offset, LSN) the source sets with ferry_rw_set_offset(). */
struct ferry_row_writer;

void ferry_rw_begin(struct ferry_row_writer *rw, enum ferry_op op);
void ferry_rw_null(struct ferry_row_writer *rw);
void ferry_rw_bool(struct ferry_row_writer *rw, bool v);
void ferry_rw_int(struct ferry_row_writer *rw, int64_t v);
void ferry_rw_float(struct ferry_row_writer *rw, double v);
void ferry_rw_dec128(struct ferry_row_writer *rw, struct ferry_decimal128 v);
void ferry_rw_text(struct ferry_row_writer *rw, const void *p, size_t n);
void ferry_rw_fixed(struct ferry_row_writer *rw, const uint8_t *p, size_t n);
/* Writes the value of column c, row r of batch b (NULL when null) as the next column: a
 * row copied from one batch into another of the same column types. */
void ferry_rw_copy_value(struct ferry_row_writer *rw, const struct ferry_batch *b, int c, int64_t r);
FERRY_MUST_CHECK int ferry_rw_end(struct ferry_row_writer *rw, struct ferry_error *err);
/* Discards the row begun with ferry_rw_begin() (a source that met bad data mid-row). */
void ferry_rw_cancel_row(struct ferry_row_writer *rw);

void ferry_rw_set_shard(struct ferry_row_writer *rw, int shard);
void ferry_rw_set_offset(struct ferry_row_writer *rw, int64_t n);
/* A second level under `n` ("k" in the position when > 0): cdc sets n to the last complete
 * transaction and k to the rows of the next one already written, so that a resumed stream
 * skips them (added for cdc). */
void ferry_rw_set_suboffset(struct ferry_row_writer *rw, int64_t k);
/* A text beside `n` ("g" in the position when not empty; n bytes, copied): a log position in
 * another form that stays valid where `n` does not (mysql: the GTID set). No quote,
 * backslash or control character (else a sticky FERRY_EINVAL). Kept until set again. */
void ferry_rw_set_offset_tag(struct ferry_row_writer *rw, const char *tag, size_t n);
void ferry_rw_set_position_columns(struct ferry_row_writer *rw, int n, const int *cols);
/* Closes the current batch now (end of shard, end of transaction). With `done`, the
 * position says the shard is complete, and a batch is emitted even when empty. */
FERRY_MUST_CHECK int ferry_rw_flush(struct ferry_row_writer *rw, bool shard_done, struct ferry_error *err);
/* Commit groups (cdc streams of one source log applied in one destination transaction,
 * docs/internals/cdc.md "One destination transaction per source transaction"):
 * ferry_rw_grouped() says whether this resource's flow is in one (the source then marks
 * cuts); ferry_rw_group_enter() counts the resource in the group from now on (call it when
 * it joined the shared log session, before any change of it can be read); and
 * ferry_rw_close_group() closes the current batch at a cut, also when it is empty (the
 * position must then be at a source commit boundary, no row of an open transaction). */
bool ferry_rw_grouped(const struct ferry_row_writer *rw);
void ferry_rw_group_enter(struct ferry_row_writer *rw);
FERRY_MUST_CHECK int ferry_rw_close_group(struct ferry_row_writer *rw, struct ferry_error *err);
/* The schema rows must follow. */
const struct ferry_schema *ferry_rw_schema(const struct ferry_row_writer *rw);
/* Non-zero once the run was asked to stop (pause or cancel): the source should return. */
int ferry_rw_stop_requested(const struct ferry_row_writer *rw);
/* A source that skips bad records (files: on_error: skip) reports them per shard: `count`
 * since the shard's start (a resumed shard counts again from its start, so each report
 * replaces the shard's earlier one) and `samples_json`, a JSON array of at most 10
 * {"at":"file:line:column","reason":"..."} (short; never a value of the data). The engine
 * publishes it as resource.rows_skipped. Never fails the caller. */
void ferry_rw_report_skipped(struct ferry_row_writer *rw, int64_t count, const char *samples_json);

#ifdef __cplusplus
}
#endif
#endif
