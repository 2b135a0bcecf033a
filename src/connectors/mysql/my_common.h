/* connectors/mysql/my_common.h - what the MySQL/MariaDB source and sink share (private to
 * this folder): the connection URL, connecting through Connector/C (libmariadb), identifier
 * quoting and error messages.
 *
 * Connection: the `url` key is a secret reference (env:NAME, file:PATH) holding
 * mysql://user:password@host:port/database (or mariadb://; user and password
 * percent-decoded; `?socket=PATH` or the `socket:` key connects through a Unix socket);
 * `connect_timeout` (default 10s) and `io_timeout` (read/write timeout of one network call,
 * default 10m). Sessions speak utf8mb4 (the server converts every other character set to
 * UTF-8) with time_zone '+00:00'. Messages name host, port and database, never the URL or
 * the password. */
#ifndef FERRY_MY_COMMON_H
#define FERRY_MY_COMMON_H

#include <mysql.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"

/* `tls:` disabled (default; a socket connection needs none), required (encrypted, the server's
 * certificate not checked), verify_full (encrypted, the certificate checked against
 * `tls_ca` and the host name). `tls_cert`/`tls_key`: a client certificate. */
enum ferry_my_tls { FERRY_MY_TLS_DISABLED = 0, FERRY_MY_TLS_REQUIRED, FERRY_MY_TLS_VERIFY_FULL };

struct ferry_my_conn {
    char *host, *user, *password, *db, *socket; /* owned; password wiped on free */
    unsigned port;
    int64_t connect_timeout_ms;
    int64_t io_timeout_ms;
    int tls;                           /* enum ferry_my_tls */
    char *tls_ca, *tls_cert, *tls_key; /* file paths, owned */
    char peer[256];                    /* "host:port/db" for messages */
    /* the client may answer LOAD DATA LOCAL INFILE (the sink sets it, and installs a handler
     * that serves only its own buffer: a server asking for a file never gets one) */
    bool local_infile;
};

/* Reads url, socket, the tls keys and the timeouts from cfg (`what`: "mysql source" / "mysql
 * sink"). */
int ferry__my_read_conn_config(struct ferry_cfg *cfg, const char *what, struct ferry_my_conn *c,
                               struct ferry_error *err);
/* Parses a mysql:// URL into c (no config node: for tests). A message never shows it. */
int ferry__my_parse_url(const char *url, struct ferry_my_conn *c, struct ferry_error *err);
void ferry__my_conn_free(struct ferry_my_conn *c);
/* Connects and sets the session up (utf8mb4, UTC, timeouts). */
int ferry__my_connect(const struct ferry_my_conn *c, const char *what, MYSQL **out,
                      struct ferry_error *err);
/* The server's error (errno, SQLSTATE, message) after a failed call, with origin "mysql". */
int ferry__my_error(struct ferry_error *err, int code, MYSQL *m, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Runs a statement that returns no rows. */
int ferry__my_exec(MYSQL *m, const char *sql, int code, const char *what, struct ferry_error *err);
/* `name` backquoted (backquotes doubled) appended to b. Empty names, names over 64
 * characters and NUL are FERRY_ECONFIG. */
/* The statement that reads the binary log's end (file, position) after `failed` (NULL: the
 * first try) was refused with MySQL error number errnum: "SHOW MASTER STATUS" first; MySQL 8.4
 * removed it (a syntax error, 1064), so "SHOW BINARY LOG STATUS" (8.2+) next; NULL: no
 * other statement to try. Spec only: no MySQL 8.4 server in the suite. */
const char *ferry__my_log_status_sql(const char *failed, unsigned errnum);
int ferry__my_quote_ident(struct ferry_buf *b, const char *name, struct ferry_error *err);
/* 'text' with the connection's escaping appended to b. */
int ferry__my_quote_text(MYSQL *m, struct ferry_buf *b, const char *s, size_t n);
/* Splits "db.table" (backquoted parts allowed: `my db`.`t.x`, and double-quoted ones as a
 * table pattern spells a listed name: "My Db"."t") into db (NULL when absent) and table. */
int ferry__my_split_name(const char *qualified, char **db, char **table, struct ferry_error *err);

/* The list_tables slot (my_tables.c): every table a `tables:` pattern may select; the
 * default schema is default_db (the URL's database). */
struct ferry_table_info;
int ferry__my_list_tables(MYSQL *m, const char *default_db, struct ferry_table_info **out, int *n,
                          char **default_schema, struct ferry_error *err);

/* The verify_open slot of the mysql source and sink (my_verify.c): a side whose chunk
 * digests MySQL computes, on verify's `text_md5` canonical form only. */
struct ferry_resource_spec;
struct ferry_vtable;
struct ferry_vside;
int ferry__my_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err);

#endif
