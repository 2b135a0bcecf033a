/* pipeline/cdc_columns.c - the columns a cdc source appends (see cdc_columns.h). */
#include "pipeline/cdc_columns.h"
#include <string.h>

int ferry_cdc_extra_cols(bool change_log, bool soft_delete)
{
    return change_log ? FERRY_CDC_LOG_COLS : soft_delete ? 1 : 0;
}

enum ferry_cdc_snapshot_value ferry_cdc_snapshot_value(bool change_log, const struct ferry_field *f)
{
    if (!change_log) return FERRY_CDC_SNAP_NULL;
    if (!strcmp(f->name, FERRY_CDC_OP_COL)) return FERRY_CDC_SNAP_INSERT;
    if (!strcmp(f->name, FERRY_CDC_LSN_COL)) return FERRY_CDC_SNAP_LSN;
    if (!strcmp(f->name, FERRY_CDC_SEQ_COL)) return FERRY_CDC_SNAP_ZERO;
    return FERRY_CDC_SNAP_NULL;
}

static int taken(const char *what, const char *table, const char *column, const char *by,
                 struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ECONFIG, "config",
                           "%s: table \"%s\" already has a column %s, which %s adds", what, table,
                           column, by);
}

int ferry_cdc_add_columns(struct ferry_schema *sc, const struct ferry_read_context *run,
                          const char *what, const char *table, struct ferry_error *err)
{
    if (!run->change_log && run->soft_delete != NULL) {
        /* The deleted-at mark: NULL while the row lives, a delete's commit time after. */
        if (ferry_schema_find(sc, run->soft_delete) >= 0)
            return taken(what, table, run->soft_delete, "`soft_delete`", err);
        return ferry_schema_add_field(sc, run->soft_delete, FERRY_TYPE_TIMESTAMPTZ_US, true, err);
    }
    if (!run->change_log) return FERRY_OK;
    static const char *const names[FERRY_CDC_LOG_COLS] = {FERRY_CDC_OP_COL, FERRY_CDC_LSN_COL,
                                                          FERRY_CDC_TIME_COL, FERRY_CDC_SEQ_COL};
    static const enum ferry_type types[FERRY_CDC_LOG_COLS] = {
        FERRY_TYPE_UTF8, FERRY_TYPE_INT64, FERRY_TYPE_TIMESTAMPTZ_US, FERRY_TYPE_INT64};
    int rc = FERRY_OK;
    for (int i = 0; i < FERRY_CDC_LOG_COLS && rc == FERRY_OK; i++) {
        if (ferry_schema_find(sc, names[i]) >= 0)
            return taken(what, table, names[i], "the cdc change log", err);
        rc = ferry_schema_add_field(sc, names[i], types[i], i == 2, err);
    }
    return rc;
}

void ferry_cdc_put_change(struct ferry_row_writer *rw, bool change_log, bool soft_delete,
                          enum ferry_op op, int64_t lsn, int64_t time_us, int64_t seq)
{
    if (change_log) {
        const char *w = op == FERRY_OP_INSERT   ? "insert"
                        : op == FERRY_OP_UPDATE ? "update"
                                                : "delete";
        ferry_rw_text(rw, w, strlen(w));
        ferry_rw_int(rw, lsn);
        ferry_rw_int(rw, time_us);
        ferry_rw_int(rw, seq);
    } else if (soft_delete) {
        /* The sink marks the row with this instead of deleting it. */
        if (op == FERRY_OP_DELETE)
            ferry_rw_int(rw, time_us);
        else
            ferry_rw_null(rw);
    }
}

void ferry_cdc_put_snapshot(struct ferry_row_writer *rw, bool change_log, bool soft_delete,
                            int64_t lsn)
{
    if (change_log) {
        ferry_rw_text(rw, "insert", 6);
        ferry_rw_int(rw, lsn);
        ferry_rw_null(rw);
        ferry_rw_int(rw, 0);
    } else if (soft_delete) {
        ferry_rw_null(rw);
    }
}
