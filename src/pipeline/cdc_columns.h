/* pipeline/cdc_columns.h - the columns a cdc source appends to a table's own, shared by
 * every cdc source (postgres, mysql).
 *
 * A change log (`write: append`, ferry_read_context.change_log) ends each row with, in this
 * order: `_ferry_op` (utf8: insert, update, delete), `_ferry_lsn` (int64: the source
 * transaction's position in its log, shared by its changes), `_ferry_commit_time`
 * (timestamptz; NULL for snapshot rows) and `_ferry_seq` (int64: the change's place among
 * the table's changes in that transaction, from 1; 0 for snapshot rows).
 * (`_ferry_lsn`, `_ferry_seq`) orders a table's log and names each change once; a snapshot
 * row's `_ferry_lsn` sorts before every change that follows its read. Each source says what
 * its position is (pg_cdc.h, my_source.c). Merge with `soft_delete: COLUMN` ends each row
 * with COLUMN instead (timestamptz, NULL while the row lives). */
#ifndef FERRY_PIPELINE_CDC_COLUMNS_H
#define FERRY_PIPELINE_CDC_COLUMNS_H

#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/core.h"

#define FERRY_CDC_OP_COL "_ferry_op"
#define FERRY_CDC_LSN_COL "_ferry_lsn"
#define FERRY_CDC_TIME_COL "_ferry_commit_time"
#define FERRY_CDC_SEQ_COL "_ferry_seq"
#define FERRY_CDC_LOG_COLS 4

/* How many columns a cdc read appends to the table's own: the change log's 4, the
 * `soft_delete` column 1, else 0. */
int ferry_cdc_extra_cols(bool change_log, bool soft_delete);

/* What a snapshot row (a first copy, a watermark chunk) holds in appended field f, for the
 * sources that write it as a literal of their SELECT: the change log's operation (insert),
 * its position (the caller's "before every later change"), its sequence (0); NULL for the
 * commit time and for soft_delete's mark, whatever that column is named. */
enum ferry_cdc_snapshot_value {
    FERRY_CDC_SNAP_NULL,
    FERRY_CDC_SNAP_INSERT,
    FERRY_CDC_SNAP_LSN,
    FERRY_CDC_SNAP_ZERO
};
enum ferry_cdc_snapshot_value ferry_cdc_snapshot_value(bool change_log,
                                                       const struct ferry_field *f);

/* Appends them to sc. A table that already has one of those names is FERRY_ECONFIG naming
 * `what` (the source), the table and the column. */
int ferry_cdc_add_columns(struct ferry_schema *sc, const struct ferry_read_context *run,
                          const char *what, const char *table, struct ferry_error *err);

/* The appended columns of one change, after the table's fields in a row begun on rw: a
 * change log's operation word, lsn, commit time and seq; soft_delete's mark (time_us for a
 * delete, else NULL); nothing for a plain merge. */
void ferry_cdc_put_change(struct ferry_row_writer *rw, bool change_log, bool soft_delete,
                          enum ferry_op op, int64_t lsn, int64_t time_us, int64_t seq);

/* The same for a snapshot row: an insert at lsn (the caller's "before every later change"),
 * no commit time, sequence 0; soft_delete's mark NULL. */
void ferry_cdc_put_snapshot(struct ferry_row_writer *rw, bool change_log, bool soft_delete,
                            int64_t lsn);

#endif
