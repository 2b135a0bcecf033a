/* connectors/iceberg/iceberg.h - private to the `iceberg` sink (and its unit test).
 *
 * Three small codecs written from public specifications, used by iceberg_sink.c:
 *   - the Avro object container file (Apache Avro 1.11 specification, "Object Container
 *     Files" and "Binary Encoding"), for manifests and manifest lists (avro.c);
 *   - Iceberg's single-value binary serialization (table spec, Appendix D), its 32-bit
 *     Murmur3 hash and the partition transforms (Appendix B, "Partition Transforms")
 *     (values.c);
 *   - the table catalogs: filesystem (version-hint.text + vN.metadata.json, commit by an
 *     exclusive link) and SQL (the iceberg_tables table of Iceberg's JDBC catalog and
 *     PyIceberg's SqlCatalog, commit by compare-and-swap) (catalog.c);
 *   - snapshot expiry and the removal of files no snapshot reaches (expire.c).
 * docs/internals/iceberg.md describes the layout and the commit protocol. */
#ifndef FERRY_CONNECTORS_ICEBERG_H
#define FERRY_CONNECTORS_ICEBERG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/error.h"
#include "formats/formats.h"

/* ---- Avro (avro.c) --------------------------------------------------------------------
 *
 * Records are jansson values shaped by the Avro schema (itself JSON): record -> object (a
 * field missing from the object is written as null, which its union must allow), array
 * -> array, map -> object, union -> the value of the first branch that fits (null for
 * null, else the first non-null branch), int/long -> integer, float/double -> real or
 * integer, boolean -> true/false, string -> string, bytes/fixed -> a string of lowercase
 * hex digits (jansson strings must be UTF-8), enum -> its symbol. Decoding gives the same
 * shapes back. Named types may be referenced by name after their definition. */

/* Writes one container file into out: header (magic, metadata map holding avro.schema,
 * avro.codec "null" and every string member of `meta`), one block with every record,
 * sync marker. FERRY_EINVAL names the field when a value does not fit the schema. */
int ferry__avro_write(struct ferry_buf *out, json_t *schema, json_t *meta, json_t *records,
                      struct ferry_error *err);
/* Reads a container file (codec null or deflate). *meta gets the metadata map (strings;
 * avro.schema left as text), *records an array of the records. Both new references. */
int ferry__avro_read(const uint8_t *p, size_t n, json_t **meta, json_t **records,
                     struct ferry_error *err);

/* Hex helpers of the bytes convention above. */
char *ferry__iceberg_hex(const uint8_t *p, size_t n); /* fresh string */
/* Decodes hex into out (cap bytes); returns the byte count or -1. */
long ferry__iceberg_unhex(const char *s, uint8_t *out, size_t cap);

/* ---- values (values.c) ----------------------------------------------------------------- */

/* Murmur3 x86 32-bit, seed 0 (what the bucket transform hashes with). */
uint32_t ferry__iceberg_murmur3(const void *p, size_t n);
/* Hashes of Appendix B: ints, longs, dates, times and timestamps all hash as the 8-byte
 * little-endian long; decimals as the minimal big-endian two's complement of the unscaled
 * value; strings, binary and uuid (big-endian bytes) as their bytes. */
int32_t ferry__iceberg_hash_long(int64_t v);
int32_t ferry__iceberg_hash_bytes(const void *p, size_t n);
/* (hash & INT_MAX) % n */
int32_t ferry__iceberg_bucket(int32_t hash, int32_t n);
/* Minimal big-endian two's-complement bytes of a decimal's unscaled value (1..16 bytes). */
size_t ferry__iceberg_decimal_bytes(struct ferry_decimal128 v, uint8_t out[16]);

/* The Iceberg type of a ferry column ("long", "decimal(12,2)", "timestamptz"...) into buf,
 * or FERRY_EUNSUPPORTED naming the type. */
int ferry__iceberg_type(const struct ferry_field *f, char *buf, size_t len, struct ferry_error *err);

/* Per-column statistics of one data file, in the form manifests want. */
struct ferry__iceberg_stats {
    enum ferry_type type;
    int64_t values, nulls, nans;
    int64_t bytes; /* the column's chunks in the file (manifest column_sizes) */
    bool has_minmax;
    int64_t min_i, max_i;
    double min_f, max_f;
    struct ferry_decimal128 min_d, max_d;
    struct ferry_buf min_b, max_b; /* var-width: the values (lower may be truncated) */
    bool lower_cut, no_upper;      /* var-width: lower truncated; upper left out */
};
void ferry__iceberg_stats_init(struct ferry__iceberg_stats *s, enum ferry_type type);
void ferry__iceberg_stats_release(struct ferry__iceberg_stats *s);
/* Takes a finished data file's column statistics from its Parquet writer (which computed
 * them for its own footer anyway): counts as they are, bounds as Iceberg wants them (no
 * UUID bounds; var-width lower bound cut to a prefix, upper left out when too long). */
int ferry__iceberg_stats_from_file(struct ferry__iceberg_stats *s,
                                   const struct ferry__files_column_stats *c);
/* The single-value serialization (Appendix D) of the lower / upper bound into out (>= 72
 * bytes); returns the length, or -1 when that bound is not written. */
long ferry__iceberg_stats_bound(const struct ferry__iceberg_stats *s, bool upper, uint8_t *out,
                                size_t cap);

/* Partition transforms. */
enum ferry__iceberg_transform { ICEBERG_IDENTITY, ICEBERG_DAY, ICEBERG_HOUR, ICEBERG_BUCKET };
struct ferry__iceberg_pfield {
    enum ferry__iceberg_transform transform;
    int32_t buckets; /* bucket only */
    int col;         /* source column index in the ferry schema */
    char *name;      /* partition field name: "created_at_day", "id_bucket"... */
    char *text;      /* the transform as the spec writes it: "day", "bucket[16]" */
};
/* Parses "day(created_at)", "hour(ts)", "bucket(16, id)", "identity(status)" or "status"
 * against the schema. FERRY_ECONFIG with a message naming the text otherwise. */
int ferry__iceberg_pfield_parse(const char *text, const struct ferry_schema *schema,
                                struct ferry__iceberg_pfield *out, struct ferry_error *err);
void ferry__iceberg_pfield_release(struct ferry__iceberg_pfield *p);
/* The partition value of one row: *is_null, an integer (day, hour, bucket, identity of
 * integer-backed and bool columns) or bytes (identity of var-width columns, borrowed from
 * the batch). */
struct ferry__iceberg_pvalue {
    bool is_null;
    int64_t i;
    const uint8_t *p;
    size_t n;
};
void ferry__iceberg_pvalue(const struct ferry__iceberg_pfield *pf, const struct ferry_batch *b,
                           int64_t row, struct ferry__iceberg_pvalue *out);
/* "name=value" path segment of a partition value (dates as 2024-01-31, hours as
 * 2024-01-31-13, bytes percent-encoded); appended to b. */
int ferry__iceberg_pvalue_path(const struct ferry__iceberg_pfield *pf, enum ferry_type src,
                               const struct ferry__iceberg_pvalue *v, struct ferry_buf *b);
/* The partition value as a manifest record member (integer, string or null). */
json_t *ferry__iceberg_pvalue_json(const struct ferry__iceberg_pfield *pf, enum ferry_type src,
                                   const struct ferry__iceberg_pvalue *v);
/* Avro type of a partition field ("int", "long", "string", "boolean"...). */
const char *ferry__iceberg_pfield_avro(const struct ferry__iceberg_pfield *pf, enum ferry_type src);
/* Iceberg result type name of a partition field ("int", or the source type). */
int ferry__iceberg_pfield_type(const struct ferry__iceberg_pfield *pf, const struct ferry_field *f,
                               char *buf, size_t len);

/* ---- warehouse storage (io.c) -----------------------------------------------------------
 *
 * A location is a local absolute path or an s3://bucket/key URI; reads also take file:// URIs.
 * io == NULL everywhere means the local disk. */
struct ferry__iceberg_io;
struct ferry__s3_client;
/* An S3 warehouse; takes the client (closed on failure too). chunk: the multipart part size
 * (below 5 MiB: the default 8 MiB). */
int ferry__iceberg_io_open_s3(struct ferry__s3_client *s3, size_t chunk,
                              struct ferry__iceberg_io **out, struct ferry_error *err);
void ferry__iceberg_io_close(struct ferry__iceberg_io *io);
bool ferry__iceberg_io_remote(const struct ferry__iceberg_io *io);
struct ferry__s3_client *ferry__iceberg_io_s3(struct ferry__iceberg_io *io);
/* The URI metadata names a location by (fresh string). */
char *ferry__iceberg_io_uri(const struct ferry__iceberg_io *io, const char *loc);
/* Whole files: write is durable when it returns; write_new (S3 only) refuses with
 * FERRY_ECONFLICT an existing object (If-None-Match); read gives FERRY_ENOTFOUND when
 * missing; remove of a missing file is fine. */
int ferry__iceberg_io_write(struct ferry__iceberg_io *io, const char *loc, const void *p, size_t n,
                            struct ferry_error *err);
int ferry__iceberg_io_write_new(struct ferry__iceberg_io *io, const char *loc, const void *p,
                                size_t n, struct ferry_error *err);
int ferry__iceberg_io_read(struct ferry__iceberg_io *io, const char *loc, struct ferry_buf *out,
                           struct ferry_error *err);
/* n bytes at off of a file into p (a local pread, or a ranged GET): FERRY_ENOTFOUND when the
 * file is missing, FERRY_ESOURCE naming it when it is shorter. (The iceberg source.) */
int ferry__iceberg_io_read_range(struct ferry__iceberg_io *io, const char *loc, uint64_t off,
                                 size_t n, void *p, struct ferry_error *err);
int ferry__iceberg_io_exists(struct ferry__iceberg_io *io, const char *loc, bool *yes,
                             struct ferry_error *err);
/* Size and modification time (ms since the epoch; S3: Last-Modified, whole seconds) of a
 * file; *exists false (FERRY_OK) when it is missing. size and mtime_ms may be NULL (then a
 * store without Last-Modified is no error). */
int ferry__iceberg_io_stat(struct ferry__iceberg_io *io, const char *loc, bool *exists,
                           int64_t *size, int64_t *mtime_ms, struct ferry_error *err);
int ferry__iceberg_io_remove(struct ferry__iceberg_io *io, const char *loc, struct ferry_error *err);
int ferry__iceberg_io_mkdirs(struct ferry__iceberg_io *io, const char *loc, struct ferry_error *err);
/* fsync of a local folder (best effort); nothing on S3. */
void ferry__iceberg_io_sync_dir(struct ferry__iceberg_io *io, const char *loc);
/* Every file under dir: a local folder is walked (16 levels deep, names starting with '.'
 * skipped; a missing folder is empty), an S3 prefix listed (every object under dir/).
 * each() gets the URI metadata names the file by (file://PATH or the s3:// URI), its
 * location (what remove/stat take) and its name; a code other than FERRY_OK stops the walk
 * and is returned. Used by the sink's orphan sweep and by expire. */
typedef int (*ferry__iceberg_walk_fn)(const char *uri, const char *loc, const char *name, void *arg,
                                      struct ferry_error *err);
int ferry__iceberg_io_walk(struct ferry__iceberg_io *io, const char *dir, ferry__iceberg_walk_fn each,
                           void *arg, struct ferry_error *err);
/* S3 only: the locations of every object under dir/ appended to out. */
int ferry__iceberg_io_list(struct ferry__iceberg_io *io, const char *dir, json_t *out,
                           struct ferry_error *err);
/* S3 only: every unfinished multipart upload of a file under dir/ (ListMultipartUploads, every
 * page, through the shared S3 client): each() gets the file's location, its name, the upload
 * id and its Initiated time (ms since the epoch, -1 when the store gave none), and may abort
 * it with abort_upload; a code other than FERRY_OK stops the listing and is returned. A store
 * that cannot list uploads: FERRY_EUNSUPPORTED with its reason in err. Used by the sink's
 * resume sweep (by name) and by expire (by age). */
typedef int (*ferry__iceberg_upload_fn)(const char *loc, const char *name, const char *upload_id,
                                        int64_t initiated_ms, void *arg, struct ferry_error *err);
int ferry__iceberg_io_uploads_each(struct ferry__iceberg_io *io, const char *dir,
                                   ferry__iceberg_upload_fn each, void *arg,
                                   struct ferry_error *err);
int ferry__iceberg_io_abort_upload(struct ferry__iceberg_io *io, const char *loc,
                                   const char *upload_id, struct ferry_error *err);
/* A file written as a stream (data and delete files): local = an fd; S3 = one PUT, or a
 * multipart upload once a chunk is pending. finish makes it durable; free without finish abandons it
 * (aborts the upload; a local file stays for the caller to remove). */
struct ferry__iceberg_wfile;
int ferry__iceberg_wfile_open(struct ferry__iceberg_io *io, const char *loc,
                              struct ferry__iceberg_wfile **out, struct ferry_error *err);
int ferry__iceberg_wfile_write(struct ferry__iceberg_wfile *w, const void *p, size_t n,
                               struct ferry_error *err);
int ferry__iceberg_wfile_finish(struct ferry__iceberg_wfile *w, struct ferry_error *err);
void ferry__iceberg_wfile_free(struct ferry__iceberg_wfile *w);

/* ---- catalogs (catalog.c) --------------------------------------------------------------
 *
 * A catalog maps (namespace, table) to the table's current metadata file and swaps that
 * pointer atomically. Both kinds keep the table's files in a local folder
 * <warehouse>/<namespace>/<table>/{data,metadata}. */
enum ferry__iceberg_catalog_kind {
    ICEBERG_CATALOG_FILESYSTEM = 0,
    ICEBERG_CATALOG_SQL,
    ICEBERG_CATALOG_REST
};
struct ferry__iceberg_catalog;

/* warehouse: an absolute local folder (created when missing). sql_path: the SQLite file
 * of the SQL catalog (its tables are created when missing), NULL for the filesystem one. */
int ferry__iceberg_catalog_open(enum ferry__iceberg_catalog_kind kind, const char *warehouse,
                                const char *namespace_, const char *sql_path,
                                const char *catalog_name, struct ferry__iceberg_catalog **out,
                                struct ferry_error *err);
void ferry__iceberg_catalog_close(struct ferry__iceberg_catalog *c);
/* The same with the warehouse's storage: io (taken, closed on failure too; NULL: local)
 * and warehouse "s3://bucket/path". The filesystem catalog on S3 first checks that the store
 * honours conditional writes, else refuses (FERRY_ECONFIG) pointing to the SQL catalog. */
int ferry__iceberg_catalog_open_io(enum ferry__iceberg_catalog_kind kind,
                                   struct ferry__iceberg_io *io, const char *warehouse,
                                   const char *namespace_, const char *sql_path,
                                   const char *catalog_name, struct ferry__iceberg_catalog **out,
                                   struct ferry_error *err);
/* The same, for a reader (the iceberg source): the filesystem catalog on S3 is not probed
 * (the probe writes). */
int ferry__iceberg_catalog_open_io_reader(enum ferry__iceberg_catalog_kind kind,
                                          struct ferry__iceberg_io *io, const char *warehouse,
                                          const char *namespace_, const char *sql_path,
                                          const char *catalog_name,
                                          struct ferry__iceberg_catalog **out,
                                          struct ferry_error *err);
/* The REST catalog at uri (http(s)://host[:port][/path]); auth as ferry__iceberg_rest_open
 * (may be NULL: no authentication). */
struct ferry__iceberg_rest_auth;
int ferry__iceberg_catalog_open_rest(struct ferry__iceberg_io *io, const char *warehouse,
                                     const char *namespace_, const char *uri,
                                     const struct ferry__iceberg_rest_auth *auth,
                                     struct ferry__iceberg_catalog **out, struct ferry_error *err);
/* The catalog's storage (NULL: local disk). */
struct ferry__iceberg_io *ferry__iceberg_catalog_io(struct ferry__iceberg_catalog *c);
/* The table's folder (fresh string). */
char *ferry__iceberg_catalog_table_dir(const struct ferry__iceberg_catalog *c, const char *table);
/* The current metadata of a table: *meta NULL (and FERRY_OK) when the table does not exist;
 * else a new reference, *location its metadata file URI (fresh) and *version its number. */
int ferry__iceberg_catalog_load(struct ferry__iceberg_catalog *c, const char *table, json_t **meta,
                                char **location, int *version, struct ferry_error *err);
/* Makes `meta` the table's current metadata if the current one is still `old_location`
 * (NULL: the table must not exist yet). FERRY_ECONFLICT when someone else committed
 * first; nothing is changed then. *new_location (may be NULL) gets the new file's URI. */
int ferry__iceberg_catalog_commit(struct ferry__iceberg_catalog *c, const char *table,
                                  const char *old_location, int new_version, json_t *meta,
                                  char **new_location, struct ferry_error *err);
/* The metadata log of a commit's new metadata `next`: appends the metadata file it replaces
 * (prev_location, last updated at prev_updated_ms) and trims the log to the table's
 * `write.metadata.previous-versions-max` newest entries (default 100, as Iceberg's own
 * writers). The locations trimmed off are appended to dropped (may be NULL). FERRY_OK or
 * FERRY_ENOMEM. */
int ferry__iceberg_meta_log(json_t *next, const char *prev_location, int64_t prev_updated_ms,
                            json_t *dropped);
/* The table property `write.metadata.delete-after-commit.enabled` is true: a committer
 * deletes the metadata files its commit trimmed off the log. */
bool ferry__iceberg_meta_delete_after_commit(const json_t *meta);
/* The version number of a metadata file's name (vN.metadata.json, NNNNN-<uuid>.metadata.json),
 * -1 for any other name. */
int ferry__iceberg_meta_version(const char *location);
/* After a failed commit: true when it may have happened all the same (REST: the answer was
 * lost and the table could not be loaded); the caller must then keep the files it named. */
bool ferry__iceberg_catalog_commit_unknown(const struct ferry__iceberg_catalog *c);
/* Tables of the namespace (NULL-terminated, free with ferry_cfg_strv_free). */
int ferry__iceberg_catalog_list(struct ferry__iceberg_catalog *c, char ***names,
                                struct ferry_error *err);

/* The catalog an iceberg sink section of a pipeline file describes (warehouse, namespace,
 * catalog, catalog_uri, catalog_token and the S3 connection keys, exactly as the sink reads
 * them), for housekeeping commands; *ns gets the namespace (fresh). (iceberg_sink.c) */
struct ferry_cfg;
int ferry__iceberg_catalog_from_sink(struct ferry_cfg *sink_cfg, struct ferry__iceberg_catalog **out,
                                     char **ns, struct ferry_error *err);
/* The same for reading only (the iceberg source): nothing is written to open it. */
int ferry__iceberg_catalog_for_reading(struct ferry_cfg *cfg, struct ferry__iceberg_catalog **out,
                                       char **ns, struct ferry_error *err);

/* ---- REST catalog client (rest.c), used by catalog.c ---------------------------------------- */
struct ferry__iceberg_rest;
/* How the REST client authenticates; every field may be NULL, strings are copied and the
 * secrets never shown. token: a bearer token sent as is. credential: "client_id:client_secret"
 * for the OAuth2 client credentials grant (RFC 6749 4.4) at oauth2_uri (default
 * <uri>/v1/oauth/tokens) for scope (default "catalog"); the access token it returns is
 * renewed before it expires and once when the catalog answers 401. */
struct ferry__iceberg_rest_auth {
    const char *token, *credential, *oauth2_uri, *scope;
};
/* GET /v1/config (the prefix override), after the token request with a credential. */
int ferry__iceberg_rest_open(const char *uri, const struct ferry__iceberg_rest_auth *auth,
                             const char *ns, struct ferry__iceberg_rest **out,
                             struct ferry_error *err);
void ferry__iceberg_rest_close(struct ferry__iceberg_rest *r);
/* *meta NULL (FERRY_OK) when the table (or its namespace) does not exist. */
int ferry__iceberg_rest_load(struct ferry__iceberg_rest *r, const char *table, json_t **meta,
                             char **location, struct ferry_error *err);
/* old_location NULL: create the table (and its namespace) from next's schema, spec, order,
 * location and properties; else commit the difference between the current metadata (still
 * at old_location, else FERRY_ECONFLICT) and next. */
int ferry__iceberg_rest_commit(struct ferry__iceberg_rest *r, const char *table,
                               const char *old_location, json_t *next, char **new_location,
                               struct ferry_error *err);
/* After a failed commit: whether it may have happened all the same (its answer was lost and
 * the table could not be loaded to tell). */
bool ferry__iceberg_rest_unknown(const struct ferry__iceberg_rest *r);
/* Table names of the namespace appended to names (strings). */
int ferry__iceberg_rest_list(struct ferry__iceberg_rest *r, json_t *names, struct ferry_error *err);

/* ---- the source's reads (scan.c) ----------------------------------------------------------
 *
 * read_unit: one unit of an iceberg source plan (a data file minus its deletes, as inserts or
 * deletes; the shape is described in scan.c) into out, whose schema is os. *emitted counts the
 * rows written for the shard (their offset); the first `skip` are not written again (resume).
 * ids: the plan's {column name: field id} (borrowed; columns are matched by id in files that
 * carry ids).
 * posdel_targets: the distinct file_path values of a position delete file, as members of the
 * object paths. */
int ferry__iceberg_read_unit(struct ferry__iceberg_io *io, json_t *unit, json_t *ids,
                             const struct ferry_schema *os, struct ferry_row_writer *out,
                             int64_t *emitted, int64_t skip, struct ferry_error *err);
int ferry__iceberg_posdel_targets(struct ferry__iceberg_io *io, const char *path, int64_t size,
                                  json_t *paths, struct ferry_error *err);

/* The sink's verify_open slot (iceberg_verify.c): the destination table read back through
 * the iceberg source on the sink's own catalog keys (ferry/connector.h, ferry_verify_open_fn). */
struct ferry_resource_spec;
struct ferry_vtable;
struct ferry_vside;
int ferry__iceberg_verify_open(struct ferry_cfg *cfg, bool source,
                               const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                               const char *what, struct ferry_vside **out, char **table_out,
                               struct ferry_error *err);

/* ---- expire (expire.c) -------------------------------------------------------------------- */
struct ferry__iceberg_expire_result {
    int snapshots_expired, snapshots_kept;
    int64_t files_deleted, bytes_deleted;
    int64_t uploads_aborted; /* S3: unfinished multipart uploads under data/ older than the cutoff */
    bool uploads_listed;     /* the store listed the table's uploads (S3 that supports it) */
    void (*on_file)(void *ctx, const char *path); /* optional: each deleted (or would-be) file */
    void (*on_upload)(void *ctx, const char *loc, const char *upload_id); /* optional: each aborted (s3:// location) */
    void *ctx;
    char unreachable[512]; /* non-empty: the table's files were not looked at, and why */
};
/* Expires the snapshots older than now - older_than_ms (keeping the current one, those refs
 * name and the retain_last newest), commits the trimmed metadata, then deletes the data,
 * delete, manifest and manifest list files under the table's location that no kept snapshot
 * reaches and that are older than the cutoff (a local folder, or an S3 prefix in the bucket
 * of the catalog's storage; elsewhere nothing is deleted and res->unreachable says why).
 * On S3 it also aborts the unfinished multipart uploads under the table's data/ initiated
 * before the cutoff (a store that cannot list them: one info line, no error).
 * dry_run: commits, deletes and aborts nothing, counts the same. */
int ferry__iceberg_expire(struct ferry__iceberg_catalog *cat, const char *table, int64_t older_than_ms,
                          int retain_last, bool dry_run, struct ferry__iceberg_expire_result *res,
                          struct ferry_error *err);

/* ---- local files (localfs.c) ---- */

/* Writes a whole file durably: temporary name, fsync, rename, fsync of the folder. */
int ferry__iceberg_write_file(const char *path, const void *p, size_t n, struct ferry_error *err);
/* Reads a whole local file (path or file:// URI) into a fresh buffer. */
int ferry__iceberg_read_file(const char *path_or_uri, struct ferry_buf *out, struct ferry_error *err);
/* mkdir -p */
int ferry__iceberg_mkdirs(const char *path, struct ferry_error *err);
/* localfs.c: fsync of a folder; a file written under a temporary name beside path and
 * fsynced (*tmp: that name, caller frees; removed again on failure). */
int ferry__iceberg_fsync_dir(const char *path, struct ferry_error *err);
int ferry__iceberg_write_tmp(const char *path, const void *p, size_t n, char **tmp,
                             struct ferry_error *err);

/* Random bytes from the kernel (ids and names). */
void ferry__iceberg_random(void *p, size_t n);

#endif
