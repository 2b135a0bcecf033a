/* connectors/postgres/pg_common.h - what the PostgreSQL source and sink share (private to
 * this folder): connecting through libpq, identifier quoting, the catalog type mapping and
 * the COPY binary value formats.
 *
 * Connection (ferry__pg_connect): the `url` key is a secret reference (env:NAME, file:PATH)
 * or a plain libpq URL/keyword string; `connect_timeout` (duration, default 10s),
 * `statement_timeout` (duration, default 0 = none), `idle_timeout` (default 0),
 * `keepalives_idle` (duration, default 30s): keepalives on so that a dead peer is noticed;
 * `application_name=ferry`; `search_path` pinned to pg_catalog so nothing resolves through a
 * user schema; every statement schema-qualifies its names. Messages never contain the URL or
 * password: they name host, port and database only (from PQhost/PQport/PQdb). */
#ifndef FERRY_PG_COMMON_H
#define FERRY_PG_COMMON_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/connector.h"
#include "ferry/error.h"

struct ferry_pg_conn_opts {
    int64_t connect_timeout_ms;
    int64_t statement_timeout_ms;
    int64_t idle_timeout_ms;
    int64_t keepalives_idle_ms;
    /* Client-side deadline of work that makes no network progress (pg_guard.h); 0: none. */
    int64_t io_timeout_ms;
};

/* Reads url + the timeout keys from cfg (the source or sink section); `what` is "postgres
 * source" / "postgres sink" for messages. *url_out is a resolved secret (free with
 * ferry_secret_free). */
int ferry__pg_read_conn_config(struct ferry_cfg *cfg, const char *what, char **url_out,
                               struct ferry_pg_conn_opts *opts, struct ferry_error *err);
/* Connects and sets the session up (application_name, search_path, timeouts). */
int ferry__pg_connect(const char *url, const struct ferry_pg_conn_opts *opts, const char *what,
                      PGconn **out, struct ferry_error *err);
/* The same with libpq's `replication` keyword ("database" for a logical replication
 * connection, which also runs simple SQL; NULL: a normal connection). (Added for cdc.) */
int ferry__pg_connect_ex(const char *url, const struct ferry_pg_conn_opts *opts,
                         const char *replication, const char *what, PGconn **out,
                         struct ferry_error *err);
/* "host:port/db" of a connection, for messages (never the password). */
void ferry__pg_describe(PGconn *c, char *buf, size_t len);
/* Error from a failed result or connection: FERRY_ESOURCE/ESINK with origin "libpq", the
 * server's primary message, detail and hint, and the SQLSTATE. */
int ferry__pg_error(struct ferry_error *err, int code, PGconn *c, PGresult *r, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));
/* Runs a command that returns no rows. */
int ferry__pg_exec(PGconn *c, const char *sql, int code, const char *what,
                   struct ferry_error *err);

/* "schema"."name" quoting (doubling quotes), appended to b. A name longer than 63 bytes is
 * FERRY_ECONFIG (PostgreSQL would silently truncate it). */
int ferry__pg_quote_ident(struct ferry_buf *b, const char *name, struct ferry_error *err);
/* at(v, 0..n) appended to b as a text[] literal {"a","b"} (quotes and backslashes escaped),
 * for a query parameter; ferry__pg_string_at reads a plain array of strings. */
typedef const char *(*ferry__pg_text_at_fn)(const void *v, int i);
const char *ferry__pg_string_at(const void *v, int i);
void ferry__pg_text_array(struct ferry_buf *b, const void *v, int n, ferry__pg_text_at_fn at);
/* Splits "schema.table" (quoted parts allowed: "my schema"."t.x") into schema (default
 * `public`) and table. */
int ferry__pg_split_name(const char *qualified, char **schema, char **table,
                         struct ferry_error *err);

/* Catalog type (pg_type.oid + typmod from pg_attribute) -> ferry type. numeric(p,s) with
 * p <= 38 -> decimal128(p,s); unconstrained or wider numeric -> decimal_text; arrays, enums,
 * domains over unknown types, ranges, geometric... -> utf8 (text output), documented. */
int ferry__pg_map_type(uint32_t type_oid, int32_t typmod, enum ferry_type *type, int *precision,
                       int *scale);
/* Whether the COPY BINARY form of this type is decoded natively by the source; the others
 * (arrays, enums, intervals... everything ferry__pg_map_type sends to utf8 that is not
 * text-like) are selected as `col::text`. (Added by the source helper.) */
bool ferry__pg_type_is_native(uint32_t type_oid);
/* ferry type -> the column type the sink creates ("bigint", "numeric(12,2)", "timestamptz"...). */
void ferry__pg_sql_type(const struct ferry_field *f, char *buf, size_t len);
/* The type OID COPY BINARY carries for a ferry type (for the sink's encoder). JSON maps
 * to jsonb, whose binary form is a version byte (1) followed by the text; INT8 maps to
 * smallint (2 bytes on the wire). */
uint32_t ferry__pg_type_oid(const struct ferry_field *f);

/* The source's own column type travels as the field's origin_type "postgres:<format_type>"
 * (format_type under search_path pg_catalog, so user types are schema-qualified). set stores
 * it; origin returns the type text of a field from a postgres source, else NULL. */
int ferry__pg_set_origin(struct ferry_schema *sc, int i, const char *sql_type,
                         struct ferry_error *err);
const char *ferry__pg_origin(const struct ferry_field *f);
/* A format_type text without its schema qualifier ("src.mood[]" -> "mood[]"); built-in
 * types are returned as they are. */
const char *ferry__pg_unqualified(const char *type);
/* Whether a source column of type `origin` and a destination column of type `dest` (both
 * format_type texts) are the same type: equal, or a user type of the same name in another
 * schema (a schema loaded from pg_dump into a renamed schema). */
bool ferry__pg_same_type(const char *origin, const char *dest);

/* Built-in type OIDs (pg_type.dat; stable across versions). */
#define FERRY_PG_OID_BOOL 16
#define FERRY_PG_OID_BYTEA 17
#define FERRY_PG_OID_CHAR 18
#define FERRY_PG_OID_NAME 19
#define FERRY_PG_OID_INT8 20
#define FERRY_PG_OID_INT2 21
#define FERRY_PG_OID_INT4 23
#define FERRY_PG_OID_TEXT 25
#define FERRY_PG_OID_OID 26
#define FERRY_PG_OID_JSON 114
#define FERRY_PG_OID_FLOAT4 700
#define FERRY_PG_OID_FLOAT8 701
#define FERRY_PG_OID_BPCHAR 1042
#define FERRY_PG_OID_VARCHAR 1043
#define FERRY_PG_OID_DATE 1082
#define FERRY_PG_OID_TIME 1083
#define FERRY_PG_OID_TIMESTAMP 1114
#define FERRY_PG_OID_TIMESTAMPTZ 1184
#define FERRY_PG_OID_NUMERIC 1700
#define FERRY_PG_OID_UUID 2950
#define FERRY_PG_OID_JSONB 3802

/* PostgreSQL epoch (2000-01-01) offsets. */
#define FERRY_PG_EPOCH_DAYS 10957
#define FERRY_PG_EPOCH_US INT64_C(946684800000000)

struct ferry_table_info;
/* The tables a `tables:` pattern may select (pg_tables.c). */
int ferry__pg_list_tables(PGconn *c, struct ferry_table_info **out, int *n, char **default_schema,
                          struct ferry_error *err);
/* The verify_open slot of the postgres source and sink (pg_verify.c); the side itself, for
 * a schema and a table. */
int ferry__pg_verify_open(struct ferry_cfg *cfg, bool source, const struct ferry_resource_spec *r,
                          const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                          char **table_out, struct ferry_error *err);
int ferry__vside_pg_open(struct ferry_cfg *cfg, const char *schema, const char *table,
                         const struct ferry_vtable *t, const char *what, struct ferry_vside **out,
                         struct ferry_error *err);

#endif
