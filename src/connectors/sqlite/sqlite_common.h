/* connectors/sqlite/sqlite_common.h - what the sqlite source and sink share (private).
 *
 * The mapping between SQLite declared types and ferry types (the sink declares columns so
 * that the source maps them back to the same ferry type), identifier quoting, the
 * canonical text forms the sink stores and the source compares, and error formatting. */
#ifndef FERRY_CONNECTORS_SQLITE_COMMON_H
#define FERRY_CONNECTORS_SQLITE_COMMON_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/error.h"

/* A declared type ("DECIMAL(12,2)", "varchar(20)", "", "TIMESTAMPTZ") as a ferry type.
 * precision/scale are set for decimal128. Unknown names map to utf8. */
void ferry__sqlite_type_from_decl(const char *decl, enum ferry_type *type, int *precision,
                                  int *scale);
/* The declared type the sink writes for a field; maps back through type_from_decl to the
 * field's type and has the affinity that keeps the stored value exact. buf >= 48. */
void ferry__sqlite_decl_for(const struct ferry_field *f, char *buf, size_t len);

/* Appends "ident" with embedded double quotes doubled. */
int ferry__sqlite_quote(struct ferry_buf *b, const char *ident);

/* Canonical text forms, sortable as text over years 0001..9999 (fixed widths):
 *   date       2024-01-31
 *   time       13:45:00.123456
 *   timestamp  2024-01-31 13:45:00.123456      (+00:00 appended for timestamptz)
 * Return the length, or -1 when the value is outside the form (buf >= 40). */
int ferry__sqlite_date_text(int32_t days, char *buf);
int ferry__sqlite_time_text(int64_t us, char *buf);
int ferry__sqlite_ts_text(int64_t us, bool tz, char *buf);
/* The same in another fixed style: `sep` between date and time (' ' or 'T'), `digits`
 * fraction digits (0..6, truncated), then `suffix` ("", "Z", "+00:00"...). */
int ferry__sqlite_ts_text_style(int64_t us, char sep, int digits, const char *suffix, char *buf);
int ferry__sqlite_time_text_style(int64_t us, int digits, char *buf);

/* Sets err from the connection's last error: "<what>: <sqlite message>". */
int ferry__sqlite_error(struct ferry_error *err, int code, sqlite3 *db, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs a statement without results; on failure sets err naming `what`. */
int ferry__sqlite_exec(sqlite3 *db, const char *sql, const char *what, struct ferry_error *err);

struct ferry_table_info;
/* The tables of the main database for `tables:` patterns (sqlite_tables.c). */
int ferry__sqlite_list_tables(sqlite3 *db, const char *path, struct ferry_table_info **out, int *n,
                              char **default_schema, struct ferry_error *err);
/* The verify_open slot of the sqlite source and sink (sqlite_verify.c); the side itself,
 * for a database file and a table. */
int ferry__sqlite_verify_open(struct ferry_cfg *cfg, bool source,
                              const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                              const char *what, struct ferry_vside **out, char **table_out,
                              struct ferry_error *err);
int ferry__vside_sqlite_open(const char *path, const char *table, const struct ferry_vtable *t,
                             const char *what, struct ferry_vside **out, struct ferry_error *err);

#endif
