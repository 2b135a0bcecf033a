/* pipeline/cdc_columns.c - the columns a cdc source appends (see cdc_columns.h). */
#include "pipeline/cdc_columns.h"

int ferry_cdc_extra_cols(const struct ferry_read_context *run)
{
    return run->change_log ? FERRY_CDC_LOG_COLS : run->soft_delete != NULL ? 1 : 0;
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
