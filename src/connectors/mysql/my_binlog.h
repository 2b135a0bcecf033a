/* connectors/mysql/my_binlog.h - decodes MySQL/MariaDB binary log events from bytes, written
 * from the public protocol documentation (the v4 event header, TABLE_MAP_EVENT and
 * WRITE/UPDATE/DELETE_ROWS_EVENT v1 and v2, XID, ROTATE, QUERY). Pure: no I/O, no client
 * library; every read is bounds-checked, so any input yields a result or FERRY_EINVAL
 * naming the field. Contract:
 *   - ferry__my_bl_header() splits an event into header and body (the caller strips the
 *     4-byte CRC32 trailer first when the server's binlog_checksum is CRC32);
 *   - ferry__my_bl_table_map() fills a struct ferry_my_bl_table (borrowing nothing: names
 *     and metadata are copied into its fixed arrays; of the optional metadata only the
 *     column names are read, when present and when they fit);
 *   - ferry__my_bl_rows() walks a rows event of that table and calls `on_value` once per
 *     present column of every row image (before and after images of an update), then
 *     `on_row_end`; values are decoded exactly (struct ferry_my_bl_value) and borrow the
 *     event's bytes. Signedness is not in the binary log (without binlog_row_metadata=FULL):
 *     integers come as the stored bits and the caller applies the column's signedness.
 * MySQL 8's binary JSON (type 245) is returned as FERRY_MY_BL_BYTES with `mysql_json` set;
 * my_json.h turns it into text. */
#ifndef FERRY_MY_BINLOG_H
#define FERRY_MY_BINLOG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

enum {
    FERRY_MY_BL_QUERY = 2,
    FERRY_MY_BL_ROTATE = 4,
    FERRY_MY_BL_FORMAT_DESCRIPTION = 15,
    FERRY_MY_BL_XID = 16,
    FERRY_MY_BL_TABLE_MAP = 19,
    FERRY_MY_BL_WRITE_ROWS_V1 = 23,
    FERRY_MY_BL_UPDATE_ROWS_V1 = 24,
    FERRY_MY_BL_DELETE_ROWS_V1 = 25,
    FERRY_MY_BL_HEARTBEAT = 27,
    FERRY_MY_BL_WRITE_ROWS_V2 = 30,
    FERRY_MY_BL_UPDATE_ROWS_V2 = 31,
    FERRY_MY_BL_DELETE_ROWS_V2 = 32,
    FERRY_MY_BL_MYSQL_GTID = 33,
    FERRY_MY_BL_MARIADB_GTID = 162,
};

#define FERRY_MY_BL_HEADER 19
#define FERRY_MY_BL_MAX_COLS 4096

struct ferry_my_bl_header {
    uint32_t timestamp, server_id, event_size, log_pos;
    uint8_t type;
    uint16_t flags;
};

struct ferry_my_bl_table {
    uint64_t table_id;
    char db[65 * 4], table[65 * 4]; /* up to 64 characters of utf8mb4, NUL-terminated */
    uint32_t n_cols;
    uint8_t types[FERRY_MY_BL_MAX_COLS];
    uint16_t meta[FERRY_MY_BL_MAX_COLS]; /* per-type metadata, see my_binlog.c */
    uint8_t nullable[(FERRY_MY_BL_MAX_COLS + 7) / 8];
    /* The column names of the optional metadata (COLUMN_NAME, logged with
     * binlog_row_metadata = FULL): name i at names + name_off[i], NUL-terminated. */
    bool has_names;
    uint32_t name_off[FERRY_MY_BL_MAX_COLS];
    char names[FERRY_MY_BL_MAX_COLS * 16];
};

enum ferry_my_bl_kind {
    FERRY_MY_BL_NULL,
    FERRY_MY_BL_INT,       /* u = the stored bits, width bytes wide (caller: signedness) */
    FERRY_MY_BL_FLOAT,     /* d (FLOAT widened exactly) */
    FERRY_MY_BL_DECIMAL,   /* text: "-123.4500", exact, scale digits after the point */
    FERRY_MY_BL_DATE,      /* year, month, day (zero dates as stored) */
    FERRY_MY_BL_DATETIME,  /* year..second, micro (DATETIME, DATETIME2) */
    FERRY_MY_BL_TIMESTAMP, /* epoch seconds in u, micro (TIMESTAMP, TIMESTAMP2; UTC) */
    FERRY_MY_BL_TIME,      /* negative, hour (may exceed 24), minute, second, micro */
    FERRY_MY_BL_YEAR,      /* year (0 for the zero year) */
    FERRY_MY_BL_BYTES,     /* p, n: CHAR/VARCHAR/TEXT/BLOB/JSON(MariaDB)/GEOMETRY bytes */
    FERRY_MY_BL_ENUM,      /* u = 1-based index (0: the empty error value) */
    FERRY_MY_BL_SET,       /* u = bit mask of members */
    FERRY_MY_BL_BIT,       /* u = the bits (BIT(n), n <= 64) */
};

struct ferry_my_bl_value {
    enum ferry_my_bl_kind kind;
    uint8_t type; /* the column's binlog type */
    int width;    /* INT: bytes */
    uint64_t u;
    double d;
    const uint8_t *p;
    size_t n;
    bool negative, mysql_json;
    int year, month, day, hour, minute, second, micro;
    char text[96]; /* DECIMAL */
};

enum ferry_my_bl_image { FERRY_MY_BL_BEFORE, FERRY_MY_BL_AFTER };

struct ferry_my_bl_rows_cb {
    void *ctx;
    /* col: the table's column index; returns FERRY_OK or an error that stops the walk. */
    int (*on_value)(void *ctx, enum ferry_my_bl_image img, uint32_t col,
                    const struct ferry_my_bl_value *v, struct ferry_error *err);
    int (*on_row_end)(void *ctx, struct ferry_error *err);
};

/* Whether an event's CRC32 trailer (binlog_checksum = CRC32: the ISO-HDLC CRC-32, as zlib's
 * crc32(), of the event_size - 4 bytes before it, little-endian) matches. A
 * FORMAT_DESCRIPTION event's is computed with its LOG_EVENT_BINLOG_IN_USE_F flag (0x1)
 * clear: the server sets the flag in the file after checksumming. raw holds event_size
 * bytes (at least the header and the trailer, else false). */
bool ferry__my_bl_checksum_ok(const uint8_t *raw, size_t event_size);

int ferry__my_bl_header(const uint8_t *p, size_t n, struct ferry_my_bl_header *h,
                        struct ferry_error *err);
/* post_header_len: the table map's post-header length from the format description (8 on
 * every server since 5.1; 6 means a 4-byte table id). */
int ferry__my_bl_table_map(const uint8_t *body, size_t n, int post_header_len,
                           struct ferry_my_bl_table *t, struct ferry_error *err);
/* A TABLE_MAP's table id and names only (the shared stream routes by them). */
int ferry__my_bl_table_names(const uint8_t *body, size_t n, int post_header_len, uint64_t *table_id,
                             char *db, size_t db_cap, char *table, size_t table_cap,
                             struct ferry_error *err);
/* A QUERY event's default database and statement (both borrow body; db not NUL-terminated
 * by length, statement up to the end of body). */
int ferry__my_bl_query(const uint8_t *body, size_t n, const char **db, size_t *db_len,
                       const char **stmt, size_t *stmt_len, struct ferry_error *err);
/* The table id a rows event refers to (to pick its table map before decoding). */
int ferry__my_bl_rows_table_id(const uint8_t *body, size_t n, uint64_t *table_id,
                               struct ferry_error *err);
int ferry__my_bl_rows(uint8_t type, const uint8_t *body, size_t n,
                      const struct ferry_my_bl_table *t, const struct ferry_my_bl_rows_cb *cb,
                      struct ferry_error *err);
/* A NEWDECIMAL value (precision, scale) at p as exact text into out (cap bytes, NUL
 * included); *used: its byte length. FERRY_EINVAL for bad metadata or bytes. */
int ferry__my_bl_decimal_text(const uint8_t *p, size_t n, int precision, int scale, char *out,
                              size_t cap, size_t *used);
/* ROTATE: the next file's name and position. XID: the transaction id. */
int ferry__my_bl_rotate(const uint8_t *body, size_t n, uint64_t *pos, char *file, size_t cap,
                        struct ferry_error *err);
int ferry__my_bl_xid(const uint8_t *body, size_t n, uint64_t *xid, struct ferry_error *err);

#endif
