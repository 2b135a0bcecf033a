/* batch/builder.h - the row writer's engine side (private to the engine).
 *
 * A row writer owns the batch being built for one resource. Sources append values
 * through the ferry_rw_* calls of ferry/batch.h; when the batch reaches `rows`, about
 * `bytes`, the flush tick (after the next complete row), or an explicit flush, the writer
 * closes it: builds its position JSON from the last row (see below), stamps resource,
 * seq (1, 2, 3...) and shard, and hands it to `emit`, which takes ownership and may block
 * (backpressure). A non-zero return from emit is sticky and is returned by every later
 * ferry_rw_end()/ferry_rw_flush().
 *
 * The next batch is allocated with the previous batch's final buffer sizes as initial
 * capacities, so steady state grows no buffer and allocates nothing per row.
 *
 * Position JSON: {"shard":S,"key":[v...],"n":N,"done":true}
 *   key  - the last row's values of the position columns, typed as JSON: integers and
 *          date/time/timestamps as numbers (days / microseconds), floats as numbers, bool,
 *          null, decimal128 and decimal text as strings, utf8/json as strings, uuid as its
 *          text form, binary as lowercase hex. Omitted when no position column is set.
 *   n    - present after ferry_rw_set_offset()
 *   done - present only on the shard's final flush (ferry_rw_flush(rw, true, ...))
 * A batch with no rows carries the key of the shard's last row emitted by this writer (if
 * any) plus n when set: {"shard":S,"key":[...],"done":true}; it is emitted only for a
 * shard_done flush.
 *
 * Signals: `tick` is set to 1 by a timer thread every flush_after; the writer closes a
 * non-empty batch at the next ferry_rw_end() and clears it. `stop` is non-zero when the
 * run must stop (value FERRY_EPAUSED or FERRY_ECANCELED): ferry_rw_end() returns it after
 * the current row was accepted. */
#ifndef FERRY_BATCH_BUILDER_H
#define FERRY_BATCH_BUILDER_H

#include <stdatomic.h>
#include "ferry/batch.h"

typedef int (*ferry_emit_fn)(void *ctx, struct ferry_batch *b, struct ferry_error *err);

struct ferry_rw_limits {
    int64_t rows;   /* close at this many rows (>= 1) */
    int64_t bytes;  /* close when the approximate payload reaches this many bytes */
    int64_t max_value_bytes; /* a single var-width value larger than this is an error;
                                0 = 64 MiB */
};

/* Takes a reference on schema. */
struct ferry_row_writer *ferry__rw_new(struct ferry_schema *schema, const char *resource,
                                       struct ferry_rw_limits limits, ferry_emit_fn emit,
                                       void *emit_ctx);
/* Frees the writer and any open batch (its rows are dropped, not emitted). */
void ferry__rw_free(struct ferry_row_writer *rw);
void ferry__rw_set_signals(struct ferry_row_writer *rw, atomic_int *tick, atomic_int *stop);
/* Rows accepted (ended) so far, for progress. */
int64_t ferry__rw_rows(const struct ferry_row_writer *rw);
/* Where ferry_rw_report_skipped() goes (the flow publishes it); unset: dropped. */
typedef void (*ferry_skip_fn)(void *ctx, int shard, int64_t count, const char *samples_json);
void ferry__rw_set_skip_report(struct ferry_row_writer *rw, ferry_skip_fn fn, void *ctx);
/* The flow's commit group (ferry_rw_grouped/ferry_rw_group_enter); unset: none. */
void ferry__rw_set_group(struct ferry_row_writer *rw, void (*enter)(void *ctx), void *ctx);

/* Column-at-a-time appends, for a source that decodes values by column (the Parquet reader):
 *     n = ferry__rw_bulk_begin(rw, want, row_var);   // rows to write now, 0: use ferry_rw_*
 *     ferry__rw_bulk_int(rw, v, isnull, n); ...      // one call per column, in schema order
 *     ferry_rw_set_offset(rw, ...);                  // the last row's, if any
 *     rc = ferry__rw_bulk_end(rw, n, err);           // as n ferry_rw_end() calls (inserts)
 * begin returns at most `want` rows and no more than the batch takes by its row and byte
 * limits (row_var[i]: the var-width bytes of row i, NULL when none), growing the buffers for
 * them; 0 when a row is open or an error is sticky. isnull[i] != 0 makes row i null, whose
 * value must be zero (an empty span). A column call returns false and counts nothing when
 * the column is of another type class or a value does not fit (out of range, a null in a NOT
 * NULL column, a value above the size limit): the caller then calls ferry__rw_bulk_cancel(rw,
 * n) and writes those rows with ferry_rw_begin()/ferry_rw_end(), whose error names the
 * column and the row. int: ints, dates, times, timestamps (narrowed, range-checked); float:
 * both float types; bool: v[i] != 0; fixed16: uuid bytes or struct ferry_decimal128 values
 * (16 bytes each); text: every var-width type, spans[i] = length << 32 | offset into
 * bases[spans[i] >> 63] (bit 63 picks the base). */
int64_t ferry__rw_bulk_begin(struct ferry_row_writer *rw, int64_t want, const int64_t *row_var);
bool ferry__rw_bulk_int(struct ferry_row_writer *rw, const int64_t *v, const uint8_t *isnull,
                        int64_t n);
bool ferry__rw_bulk_float(struct ferry_row_writer *rw, const double *v, const uint8_t *isnull,
                          int64_t n);
bool ferry__rw_bulk_bool(struct ferry_row_writer *rw, const int64_t *v, const uint8_t *isnull,
                         int64_t n);
bool ferry__rw_bulk_fixed16(struct ferry_row_writer *rw, const uint8_t *v, const uint8_t *isnull,
                            int64_t n);
bool ferry__rw_bulk_text(struct ferry_row_writer *rw, const uint64_t *spans,
                         const char *const bases[2], const uint8_t *isnull, int64_t n);
void ferry__rw_bulk_cancel(struct ferry_row_writer *rw, int64_t n);
FERRY_MUST_CHECK int ferry__rw_bulk_end(struct ferry_row_writer *rw, int64_t n,
                                        struct ferry_error *err);

#endif
