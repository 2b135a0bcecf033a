/* connectors/iceberg/iceberg_sink.c - the `iceberg` sink: Apache Iceberg tables (format
 * version 2) whose data files are Parquet, committed through a filesystem or SQL catalog.
 *
 * One resource is one table <warehouse>/<namespace>/<table>. prepare() creates the table
 * (v1 metadata: schema with field ids, partition spec, sort order) or checks and evolves
 * the existing one (new columns become optional fields with fresh ids; int -> long and
 * float -> double widen). apply() encodes rows into Parquet data files under data/ (one
 * open file per partition, Parquet field ids = Iceberg field ids) and folds each column's
 * statistics; nothing is visible yet. commit() closes and fsyncs the files, writes one
 * manifest (Avro) listing them with their statistics, then per table: reads the current
 * metadata, writes a manifest list (the parent snapshot's manifests plus the new one for
 * append; only the new one for replace, an `overwrite` snapshot) and swaps in the next
 * metadata file through the catalog. A conflict (another writer committed first) re-reads
 * and retries. Durability at_commit. upsert / merge write, next to the data, an equality
 * delete file of the session's keys and position deletes for rows the same session
 * replaced (see "upsert / merge" below).
 *
 * Exactly-once: each snapshot's summary carries ferry.pipeline (the runner's destination
 * key), ferry.resource, ferry.run-id and ferry.checkpoint (every shard position of the
 * run committed so far, cumulative across the run's commits) with ferry.run-counts (per
 * shard, the rows, bytes and batches committed with those positions, for the runner's
 * counters after a crash). checkpoints() reads them
 * back from the newest snapshot of each table written by the pipeline, so a resumed run
 * continues after what the table holds; a commit that adds no file is skipped (except the
 * first of a replace), so the same checkpoint is never committed twice.
 *
 * The warehouse is a local folder or an S3 prefix (s3://bucket/path, the s3 sink's connection
 * keys): every file goes through io.c, so this file never touches the disk itself. The catalog
 * is the filesystem, SQL or REST one (catalog.c, rest.c).
 *
 * Owns the open data files, their statistics, the manifests of the session. Calls the
 * Parquet format writer (formats/formats.h), avro.c, values.c, catalog.c, io.c, jansson,
 * crc32c, digest, the row writer (partition routing copies rows into per-partition
 * batches). Registered in connectors/registry.c; driven by the runner on one thread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "batch/builder.h"
#include "formats/formats.h"
#include "connectors/iceberg/iceberg.h"
#include "objstore/s3_client.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"
#include "ferry/failpoint.h"

#define MAX_PFIELDS 8
#define COMMIT_TRIES 20

static const char *const sink_tuning_keys[] = {"file_bytes", "commit_retries", "manifest_merge_count",
                                               "multipart_chunk", "max_attempts", NULL};
static const char *const catalog_words[] = {"filesystem", "sql", "rest", NULL};

enum { CONTENT_DATA = 0, CONTENT_POS_DELETES = 1, CONTENT_EQ_DELETES = 2 };

struct dfile {
    char *path; /* location: local path or s3:// URI */
    char *uri;  /* file:// or s3:// URI, as manifests name it */
    int content; /* CONTENT_* */
    int64_t rows, bytes;
    json_t *partition; /* {partition field name: value} */
    struct ferry__iceberg_stats *stats; /* per column of the file's schema */
    int ncols;
    const int32_t *ids; /* field id per column (the target's arrays) */
    char *pkey;         /* partition path ("" unpartitioned) */
    bool done;       /* closed and fsynced */
    bool committed;  /* referenced by a committed snapshot: never removed */
};

struct target;

struct pwriter {
    char *key; /* partition path, "" unpartitioned */
    const struct ferry_schema *schema; /* what the file holds (the table's, or the key's) */
    const int32_t *field_ids;
    int content;
    json_t *partition;
    void *fw;
    struct ferry__iceberg_wfile *wf; /* the open file, or NULL */
    int file; /* index in t->files */
    int64_t routed; /* row-level writes: rows routed to the open file (the next row's position) */
    struct ferry_row_writer *rw; /* partitioned tables: rows are copied into it */
    struct target *t;
    struct ferry_error err; /* what the emit callback met */
};

/* One key seen in this session (upsert / merge): where its live row is. */
struct keyslot {
    uint64_t hash;
    uint32_t off, len; /* in target.keys */
    int32_t file;      /* index in target.files of the live row, -1: deleted */
    bool used;
    int64_t pos;
};

struct posdel {
    int file; /* index in target.files */
    int64_t pos;
};

struct target {
    bool used;
    char *table, *resource;
    char *dir; /* table folder: local path or s3:// URI */
    char *data_dir;
    struct ferry_schema *schema;
    int32_t *field_ids;
    enum ferry_write_mode mode;
    struct ferry__iceberg_pfield pf[MAX_PFIELDS];
    int n_pf;
    int spec_id;
    struct pwriter **pw; /* pointers: row writers keep their pwriter as emit context */
    int n_pw;
    struct dfile *files;
    int n_files;
    json_t *positions; /* "shard" -> position JSON text, of this session */
    json_t *counts;    /* "shard" -> [rows, bytes, batches] of those batches, this session */
    /* upsert / merge (merge-on-read): equality deletes by the key, position deletes for
     * rows of this session that a later row of the same key replaces */
    bool row_level;
    struct ferry_schema *key_schema; /* the key columns only */
    int32_t *key_ids;
    int *key_cols;
    struct pwriter **eqws;      /* the session's equality delete files, one per partition */
    int n_eqws;
    struct ferry_buf pkeybuf;   /* scratch: partition path of a row (row-level writes) */
    struct ferry_buf keys;      /* arena of serialized keys of the session */
    struct keyslot *slots;      /* open addressing over `keys` */
    size_t n_slots, used_slots;
    struct posdel *pd;          /* position deletes of the session */
    size_t n_pd, cap_pd;
    int next_n;
    uint32_t apply_crc;
    int64_t apply_bytes;
    struct sink *s;
    struct ferry_buf keybuf; /* scratch: partition key of a row */
};

struct sink {
    enum ferry__iceberg_catalog_kind kind;
    bool reader; /* opened for the iceberg source's catalog: loads only */
    char *warehouse, *ns, *catalog_name;
    char *sql_path;  /* SQLite file, or a PostgreSQL URL (a secret: never in a message), or
                      * the REST catalog's URI */
    char *rest_token; /* REST catalog bearer token (a secret) */
    char *rest_credential; /* REST catalog OAuth2 client_id:client_secret (a secret) */
    char *rest_oauth2_uri, *rest_scope;
    bool sql_is_pg;
    json_t *partition_cfg; /* {table: [transform text...]} */
    json_t *properties;    /* table properties the pipeline sets: {key: text} */
    struct ferry__iceberg_catalog *cat;
    struct ferry__s3_client *s3; /* S3 warehouse, until the catalog takes it */
    int64_t chunk;                /* S3: multipart part size */
    struct ferry__iceberg_io *io; /* the catalog's storage (NULL: local disk) */
    const struct ferry__files_format *fmt;
    struct ferry__files_format_opts opts;
    int64_t file_bytes;
    int64_t retries;
    int64_t merge_count; /* merge the data manifests once a snapshot would carry this many */
    struct target *t;
    int n_t;
    char *pipeline;
    int64_t run_id;
    int attempt;
    bool session;
};

static int parent_manifests(struct sink *s, json_t *snap, json_t **out, struct ferry_error *err);

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg sink: out of memory");
}

static void uuid4(char out[40])
{
    uint8_t r[16];
    ferry__iceberg_random(r, sizeof r);
    r[6] = (uint8_t)((r[6] & 0x0f) | 0x40);
    r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);
    ferry_uuid_to_text(r, out, 40);
}

static int64_t random_id(void)
{
    uint64_t v;
    ferry__iceberg_random(&v, sizeof v);
    v &= INT64_MAX;
    return v == 0 ? 1 : (int64_t)v;
}

static int64_t now_ms(void)
{
    return ferry_now_wall_us() / 1000;
}

/* ---- open / close ---------------------------------------------------------------------- */

static void file_release(struct dfile *f)
{
    ferry_free(f->path);
    ferry_free(f->uri);
    ferry_free(f->pkey);
    json_decref(f->partition);
    for (int i = 0; f->stats && i < f->ncols; i++) ferry__iceberg_stats_release(&f->stats[i]);
    ferry_free(f->stats);
}

static void pw_free(struct sink *s, struct pwriter *pw)
{
    if (pw == NULL) return;
    ferry__rw_free(pw->rw);
    if (pw->fw) s->fmt->free(pw->fw);
    ferry__iceberg_wfile_free(pw->wf);
    ferry_free(pw->key);
    json_decref(pw->partition);
    ferry_free(pw);
}

/* Forgets the session's key index and position deletes (upsert / merge). */
static void keys_reset(struct target *t)
{
    ferry_buf_reset(&t->keys);
    if (t->slots) memset(t->slots, 0, t->n_slots * sizeof *t->slots);
    t->used_slots = 0;
    t->n_pd = 0;
}

/* Closes open writers without finishing them; removes every file not committed. */
static void discard(struct sink *s, struct target *t)
{
    for (int i = 0; i < t->n_pw; i++) pw_free(s, t->pw[i]);
    ferry_free(t->pw);
    t->pw = NULL;
    t->n_pw = 0;
    for (int i = 0; i < t->n_eqws; i++) pw_free(s, t->eqws[i]);
    ferry_free(t->eqws);
    t->eqws = NULL;
    t->n_eqws = 0;
    keys_reset(t);
    for (int i = 0; i < t->n_files; i++) {
        if (!t->files[i].committed && t->files[i].path)
            ferry__iceberg_io_remove(s->io, t->files[i].path, NULL);
        file_release(&t->files[i]);
    }
    ferry_free(t->files);
    t->files = NULL;
    t->n_files = 0;
    json_object_clear(t->positions);
    json_object_clear(t->counts);
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    for (int i = 0; i < s->n_t; i++) {
        struct target *t = &s->t[i];
        discard(s, t);
        ferry_free(t->table);
        ferry_free(t->resource);
        ferry_free(t->dir);
        ferry_free(t->data_dir);
        ferry_free(t->field_ids);
        for (int k = 0; k < t->n_pf; k++) ferry__iceberg_pfield_release(&t->pf[k]);
        ferry_schema_unref(t->schema);
        json_decref(t->positions);
        json_decref(t->counts);
        ferry_buf_release(&t->keybuf);
        ferry_buf_release(&t->keys);
        ferry_buf_release(&t->pkeybuf);
        ferry_free(t->slots);
        ferry_free(t->pd);
        ferry_free(t->key_ids);
        ferry_free(t->key_cols);
        ferry_schema_unref(t->key_schema);
    }
    ferry_free(s->t);
    ferry__iceberg_catalog_close(s->cat);
    ferry__s3_client_close(s->s3);
    if (s->fmt && s->fmt->conf_free) s->fmt->conf_free(s->opts.conf);
    json_decref(s->partition_cfg);
    json_decref(s->properties);
    ferry_free(s->warehouse);
    ferry_free(s->ns);
    ferry_secret_free(s->sql_path);
    ferry_secret_free(s->rest_token);
    ferry_secret_free(s->rest_credential);
    ferry_free(s->rest_oauth2_uri);
    ferry_free(s->rest_scope);
    ferry_free(s->catalog_name);
    ferry_free(s->pipeline);
    ferry_free(s);
}

/* `partition: {table: [day(created_at), bucket(16, id)], ...}` (a single string allowed). */
static int read_partition_cfg(struct ferry_cfg *cfg, json_t **out, struct ferry_error *err)
{
    *out = json_object();
    if (*out == NULL) return nomem(err);
    struct ferry_cfg *p = ferry_cfg_get(cfg, "partition");
    if (p == NULL || p->kind == FERRY_CFG_NULL) return FERRY_OK;
    if (p->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, p,
                               "must map table names to partition transforms, e.g. "
                               "{orders: [day(created_at), bucket(16, id)]}");
    for (int i = 0; i < p->n_children; i++) {
        struct ferry_cfg *c = p->children[i];
        char **v = NULL;
        int n = 0;
        int rc = ferry_cfg_strv(p, c->key, true, &v, &n, err);
        if (rc != FERRY_OK) return rc;
        if (n > MAX_PFIELDS) {
            ferry_cfg_strv_free(v);
            return ferry_cfg_error(err, c, "at most %d partition fields", MAX_PFIELDS);
        }
        json_t *a = json_array();
        for (int k = 0; k < n; k++) json_array_append_new(a, json_string(v[k]));
        json_object_set_new(*out, c->key, a);
        ferry_cfg_strv_free(v);
    }
    return FERRY_OK;
}

/* `properties: {write.metadata.previous-versions-max: 20, ...}`: Iceberg table properties
 * (text; numbers and booleans as written) set on every table the sink writes. */
static int read_properties(struct ferry_cfg *cfg, json_t **out, struct ferry_error *err)
{
    *out = json_object();
    if (*out == NULL) return nomem(err);
    struct ferry_cfg *p = ferry_cfg_get(cfg, "properties");
    if (p == NULL || p->kind == FERRY_CFG_NULL) return FERRY_OK;
    if (p->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, p,
                               "must map Iceberg table property names to values, e.g. "
                               "{write.metadata.previous-versions-max: 20}");
    p->used = true;
    for (int i = 0; i < p->n_children; i++) {
        struct ferry_cfg *c = p->children[i];
        if (c->kind != FERRY_CFG_SCALAR || c->scalar == NULL)
            return ferry_cfg_error(err, c, "must be a text, number or boolean");
        c->used = true;
        if (json_object_set_new(*out, c->key, json_string(c->scalar)) != 0)
            return ferry_cfg_error(err, c, "must be UTF-8 text");
    }
    return FERRY_OK;
}

/* What sink_open reads from the sink section; the secrets and the S3 client are owned until
 * the sink takes them (open_keys_release frees what is left). */
struct open_keys {
    const char *warehouse, *ns, *catalog_name, *catalog_uri, *oauth2_uri, *scope;
    char *uri_secret; /* catalog_uri: a PostgreSQL URL may hold a password */
    char *token_secret, *cred_secret;
    int kind;
    int64_t file_bytes, retries, merge_count, chunk;
    bool object_store;
    struct ferry__s3_client *s3;
};

static void open_keys_release(struct open_keys *k)
{
    ferry_secret_free(k->token_secret);
    ferry_secret_free(k->cred_secret);
    ferry__s3_client_close(k->s3);
    ferry_secret_free(k->uri_secret);
}

static int read_open_keys(struct ferry_cfg *cfg, struct open_keys *k, struct ferry_error *err)
{
    k->ns = "default";
    k->catalog_name = "ferry";
    k->file_bytes = INT64_C(512) << 20;
    k->retries = COMMIT_TRIES;
    k->merge_count = 100;
    k->chunk = INT64_C(8) << 20;
    int rc = ferry_cfg_str(cfg, "warehouse", true, &k->warehouse, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "namespace", false, &k->ns, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "catalog", false, catalog_words, &k->kind, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_secret(cfg, "catalog_uri", false, true, &k->uri_secret, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_secret(cfg, "catalog_token", false, false, &k->token_secret, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_secret(cfg, "catalog_credential", false, false, &k->cred_secret, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "catalog_oauth2_uri", false, &k->oauth2_uri, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "catalog_scope", false, &k->scope, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "catalog_name", false, &k->catalog_name, err);
    if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "file_bytes", false, &k->file_bytes, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_int(cfg, "commit_retries", false, 0, 1000, &k->retries, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_int(cfg, "manifest_merge_count", false, 2, 100000, &k->merge_count, err);
    k->catalog_uri = k->uri_secret;
    return rc;
}

/* warehouse: a local folder (absolute, or file:///PATH) or s3://BUCKET[/PATH], whose S3
 * client is opened with the same connection keys as the s3 sink. */
static int open_warehouse(struct ferry_cfg *cfg, struct open_keys *k, struct ferry_error *err)
{
    const char *warehouse = k->warehouse;
    if (warehouse[0] == '\0')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "warehouse"), "must not be empty");
    k->object_store = strstr(warehouse, "://") != NULL && strncmp(warehouse, "file://", 7) != 0;
    if (k->object_store) {
        const char *b = warehouse + 5, *slash = strchr(b, '/');
        if (strncmp(warehouse, "s3://", 5) != 0 || (slash && (strstr(slash, "//") || slash == b)))
            return ferry_cfg_error(err, ferry_cfg_get(cfg, "warehouse"),
                                   "%s: must be a local folder, file:///PATH or s3://BUCKET/PATH",
                                   warehouse);
        char *bucket = slash ? ferry_strndup(b, (size_t)(slash - b)) : ferry_strdup(b);
        if (bucket == NULL) return nomem(err);
        int rc = ferry__s3_client_open(cfg, bucket, ferry_cfg_get(cfg, "warehouse"),
                                       "iceberg sink", &k->s3, err);
        ferry_free(bucket);
        if (rc == FERRY_OK) rc = ferry_cfg_size(cfg, "multipart_chunk", false, &k->chunk, err);
        if (rc == FERRY_OK && (k->chunk < (INT64_C(5) << 20) || k->chunk > (INT64_C(1) << 30)))
            rc = ferry_cfg_error(err, ferry_cfg_get(cfg, "multipart_chunk"),
                                 "must be between 5MiB (S3's smallest part) and 1GiB");
        if (rc != FERRY_OK) return rc;
    }
    if (strncmp(warehouse, "file://", 7) == 0) {
        warehouse += 7;
        k->warehouse = warehouse;
    }
    if (!k->object_store && warehouse[0] != '/')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "warehouse"),
                               "must be an absolute path (Iceberg metadata holds absolute "
                               "locations)");
    return FERRY_OK;
}

/* The REST catalog's keys: its URI, a bearer token or an OAuth2 credential (with its token
 * endpoint and scope), none of them with another catalog. */
static int check_rest_keys(struct ferry_cfg *cfg, const struct open_keys *k,
                           struct ferry_error *err)
{
    const char *uri = k->catalog_uri, *oauth2_uri = k->oauth2_uri;
    if (k->kind == ICEBERG_CATALOG_REST &&
        (uri == NULL || (strncmp(uri, "http://", 7) && strncmp(uri, "https://", 8))))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, uri ? "catalog_uri" : "catalog"),
                               "catalog: rest needs catalog_uri: the REST catalog's "
                               "http(s)://HOST[:PORT][/PATH]");
    static const char *const rest_only[] = {"catalog_token", "catalog_credential",
                                            "catalog_oauth2_uri", "catalog_scope", NULL};
    for (int i = 0; k->kind != ICEBERG_CATALOG_REST && rest_only[i]; i++)
        if (ferry_cfg_get(cfg, rest_only[i]) != NULL)
            return ferry_cfg_error(err, ferry_cfg_get(cfg, rest_only[i]),
                                   "only used with catalog: rest");
    if (k->token_secret != NULL && k->cred_secret != NULL)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "catalog_credential"),
                               "give either catalog_token (a bearer token) or catalog_credential "
                               "(OAuth2 client_id:client_secret), not both");
    if ((oauth2_uri || k->scope) && k->cred_secret == NULL)
        return ferry_cfg_error(
            err, ferry_cfg_get(cfg, oauth2_uri ? "catalog_oauth2_uri" : "catalog_scope"),
            "only used with catalog_credential (OAuth2)");
    if (oauth2_uri && strncmp(oauth2_uri, "http://", 7) && strncmp(oauth2_uri, "https://", 8))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "catalog_oauth2_uri"),
                               "must be the token endpoint's http(s):// URL");
    if (oauth2_uri) {
        const char *host = strstr(oauth2_uri, "://") + 3;
        if (memchr(host, '@', strcspn(host, "/?#")) != NULL) /* never echo a password */
            return ferry_cfg_error(err, ferry_cfg_get(cfg, "catalog_oauth2_uri"),
                                   "must not hold credentials: give them as catalog_credential");
    }
    return FERRY_OK;
}

/* namespace, the catalog's keys and file_bytes; strips a sqlite: prefix of catalog_uri. */
static int check_catalog_keys(struct ferry_cfg *cfg, struct open_keys *k, struct ferry_error *err)
{
    const char *ns = k->ns;
    if (ns[0] == '\0' || strchr(ns, '/') || ns[0] == '.')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "namespace"),
                               "must be a name without '/' or a leading '.'");
    int rc = check_rest_keys(cfg, k, err);
    if (rc != FERRY_OK) return rc;
    if (k->kind == ICEBERG_CATALOG_SQL && (k->catalog_uri == NULL || k->catalog_uri[0] == '\0'))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "catalog"),
                               "catalog: sql needs catalog_uri: the SQLite file of the catalog or "
                               "a postgresql:// URL (env:NAME or file:PATH when it holds a "
                               "password)");
    if (k->kind == ICEBERG_CATALOG_FILESYSTEM && k->catalog_uri != NULL)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "catalog_uri"),
                               "only used with catalog: sql");
    if (strncmp(k->catalog_uri ? k->catalog_uri : "", "sqlite:", 7) == 0) {
        k->catalog_uri += 7;
        while (k->catalog_uri[0] == '/' && k->catalog_uri[1] == '/') k->catalog_uri++;
    }
    if (k->file_bytes < (INT64_C(1) << 20))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "file_bytes"), "must be at least 1MiB");
    return FERRY_OK;
}

/* The sink, taking k's secrets and S3 client. */
static int sink_new(struct open_keys *k, const struct ferry__files_format *fmt, struct sink **out,
                    struct ferry_error *err)
{
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    const char *uri = k->catalog_uri;
    s->kind = (enum ferry__iceberg_catalog_kind)k->kind;
    s->fmt = fmt;
    s->warehouse = ferry_strdup(k->warehouse);
    s->s3 = k->s3;
    s->chunk = k->chunk;
    k->s3 = NULL;
    s->ns = ferry_strdup(k->ns);
    s->sql_path = uri ? ferry_strdup(uri) : NULL;
    s->sql_is_pg = uri && (!strncmp(uri, "postgres://", 11) || !strncmp(uri, "postgresql://", 13));
    s->catalog_name = ferry_strdup(k->catalog_name);
    s->rest_token = k->token_secret;
    k->token_secret = NULL;
    s->rest_credential = k->cred_secret;
    k->cred_secret = NULL;
    s->rest_oauth2_uri = k->oauth2_uri ? ferry_strdup(k->oauth2_uri) : NULL;
    s->rest_scope = k->scope ? ferry_strdup(k->scope) : NULL;
    s->file_bytes = k->file_bytes;
    s->retries = k->retries;
    s->merge_count = k->merge_count;
    if (s->warehouse) {
        size_t wl = strlen(s->warehouse);
        while (wl > 1 && s->warehouse[wl - 1] == '/') s->warehouse[--wl] = '\0';
    }
    if (!s->warehouse || !s->ns || !s->catalog_name || (uri && !s->sql_path) ||
        (k->oauth2_uri && !s->rest_oauth2_uri) || (k->scope && !s->rest_scope)) {
        sink_close(s);
        return nomem(err);
    }
    *out = s;
    return FERRY_OK;
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct open_keys k;
    memset(&k, 0, sizeof k);
    struct sink *s = NULL;
    int rc = read_open_keys(cfg, &k, err);
    if (rc == FERRY_OK) rc = open_warehouse(cfg, &k, err);
    if (rc == FERRY_OK) rc = check_catalog_keys(cfg, &k, err);
    const struct ferry__files_format *fmt = ferry__files_format_find("parquet");
    if (rc == FERRY_OK && (fmt == NULL || fmt->column_stats == NULL))
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg", "iceberg sink: no parquet writer");
    if (rc == FERRY_OK) rc = sink_new(&k, fmt, &s, err);
    if (rc == FERRY_OK) rc = read_partition_cfg(cfg, &s->partition_cfg, err);
    if (rc == FERRY_OK) rc = read_properties(cfg, &s->properties, err);
    if (rc == FERRY_OK && fmt->configure) rc = fmt->configure(cfg, &s->opts.conf, err);
    if (rc == FERRY_OK) *ctx = s;
    else if (s != NULL) sink_close(s);
    open_keys_release(&k);
    return rc;
}

static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    (void)ctx;
    (void)mode;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) |
                        (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    caps->durability = FERRY_DURABLE_AT_COMMIT;
    /* Parquet data files: a batch's rows are encoded with their row group, later; no
     * per-batch encoded CRC exists and none is claimed (docs/connectors.md, "Integrity"). */
    caps->encoded_integrity = false;
    caps->transactional_checkpoint = true;
    caps->atomic_replace = true;
    /* A paused replace must not publish half a table: the runner aborts it instead. */
    caps->replace_commits_once = true;
    caps->deletes = true; /* merge: equality deletes */
}

/* The catalog is opened on first use: a pipeline refused before prepare leaves nothing. */
static int catalog(struct sink *s, struct ferry_error *err)
{
    if (s->cat) return FERRY_OK;
    if (s->kind == ICEBERG_CATALOG_SQL && !s->sql_is_pg && !s->reader) {
        char *d = ferry_strdup(s->sql_path);
        if (d == NULL) return nomem(err);
        char *slash = strrchr(d, '/');
        int rc = FERRY_OK;
        if (slash && slash != d) {
            *slash = '\0';
            rc = ferry__iceberg_mkdirs(d, err);
        }
        ferry_free(d);
        if (rc != FERRY_OK) return rc;
    }
    struct ferry__iceberg_io *io = NULL;
    if (s->s3) {
        struct ferry__s3_client *c = s->s3;
        s->s3 = NULL; /* the catalog owns it from here, whatever happens */
        int rc = ferry__iceberg_io_open_s3(c, (size_t)s->chunk, &io, err);
        if (rc != FERRY_OK) return rc;
    } else if (strncmp(s->warehouse, "s3://", 5) == 0) {
        return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                               "iceberg sink: warehouse %s: its catalog failed to open before",
                               s->warehouse);
    }
    struct ferry__iceberg_rest_auth auth = {s->rest_token, s->rest_credential,
                                            s->rest_oauth2_uri, s->rest_scope};
    int rc = s->kind == ICEBERG_CATALOG_REST
                 ? ferry__iceberg_catalog_open_rest(io, s->warehouse, s->ns, s->sql_path, &auth,
                                                    &s->cat, err)
                 : s->reader ? ferry__iceberg_catalog_open_io_reader(s->kind, io, s->warehouse,
                                                                     s->ns, s->sql_path,
                                                                     s->catalog_name, &s->cat, err)
                             : ferry__iceberg_catalog_open_io(s->kind, io, s->warehouse, s->ns,
                                                              s->sql_path, s->catalog_name,
                                                              &s->cat, err);
    if (rc == FERRY_OK) s->io = ferry__iceberg_catalog_io(s->cat);
    return rc;
}

static int catalog_of(struct ferry_cfg *sink_cfg, bool reader, struct ferry__iceberg_catalog **out,
                      char **ns, struct ferry_error *err)
{
    *out = NULL;
    *ns = NULL;
    void *ctx = NULL;
    int rc = sink_open(sink_cfg, &ctx, err);
    if (rc != FERRY_OK) return rc;
    struct sink *s = ctx;
    s->reader = reader;
    rc = catalog(s, err);
    if (rc == FERRY_OK) {
        *ns = ferry_strdup(s->ns);
        if (*ns == NULL) {
            rc = nomem(err);
        } else {
            *out = s->cat;
            s->cat = NULL;
        }
    }
    sink_close(s);
    return rc;
}

int ferry__iceberg_catalog_from_sink(struct ferry_cfg *sink_cfg, struct ferry__iceberg_catalog **out,
                                     char **ns, struct ferry_error *err)
{
    return catalog_of(sink_cfg, false, out, ns, err);
}

int ferry__iceberg_catalog_for_reading(struct ferry_cfg *cfg, struct ferry__iceberg_catalog **out,
                                       char **ns, struct ferry_error *err)
{
    return catalog_of(cfg, true, out, ns, err);
}

/* ---- table metadata -------------------------------------------------------------------- */

static json_t *schema_field_json(int id, const struct ferry_field *f, struct ferry_error *err)
{
    char ty[48];
    if (ferry__iceberg_type(f, ty, sizeof ty, err) != FERRY_OK) return NULL;
    return json_pack("{s:i,s:s,s:b,s:s}", "id", id, "name", f->name, "required", !f->nullable,
                     "type", ty);
}

static json_t *current_schema(json_t *meta)
{
    json_int_t id = json_integer_value(json_object_get(meta, "current-schema-id"));
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(meta, "schemas"), i, s)
    {
        if (json_integer_value(json_object_get(s, "schema-id")) == id) return s;
    }
    return NULL;
}

static json_t *default_spec(json_t *meta)
{
    json_int_t id = json_integer_value(json_object_get(meta, "default-spec-id"));
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(meta, "partition-specs"), i, s)
    {
        if (json_integer_value(json_object_get(s, "spec-id")) == id) return s;
    }
    return NULL;
}

static json_t *find_snapshot(json_t *meta, json_int_t id)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(meta, "snapshots"), i, s)
    {
        if (json_integer_value(json_object_get(s, "snapshot-id")) == id) return s;
    }
    return NULL;
}

static json_t *current_snapshot(json_t *meta)
{
    json_t *id = json_object_get(meta, "current-snapshot-id");
    if (!json_is_integer(id) || json_integer_value(id) < 0) return NULL;
    return find_snapshot(meta, json_integer_value(id));
}

/* The newest snapshot of the current chain written by `pipeline`, or NULL. */
static json_t *latest_ferry_snapshot(json_t *meta, const char *pipeline)
{
    json_t *snap = current_snapshot(meta);
    int guard = 0;
    while (snap != NULL && guard++ < 1000000) {
        json_t *sum = json_object_get(snap, "summary");
        const char *p = json_string_value(json_object_get(sum, "ferry.pipeline"));
        if (p && !strcmp(p, pipeline)) return snap;
        json_t *parent = json_object_get(snap, "parent-snapshot-id");
        snap = json_is_integer(parent) ? find_snapshot(meta, json_integer_value(parent)) : NULL;
    }
    return NULL;
}

static json_t *spec_json(const struct target *t)
{
    json_t *fields = json_array();
    for (int i = 0; i < t->n_pf; i++)
        json_array_append_new(fields,
                              json_pack("{s:s,s:s,s:i,s:i}", "name", t->pf[i].name, "transform",
                                        t->pf[i].text, "source-id", (int)t->field_ids[t->pf[i].col],
                                        "field-id", 1000 + i));
    return fields;
}

/* Sets the pipeline's table properties on meta; true when one was missing or different. */
static bool set_properties(const struct sink *s, json_t *meta)
{
    json_t *props = json_object_get(meta, "properties");
    if (!json_is_object(props)) {
        props = json_object();
        json_object_set_new(meta, "properties", props);
    }
    bool changed = false;
    const char *k;
    json_t *v;
    json_object_foreach(s->properties, k, v)
    {
        if (!json_equal(json_object_get(props, k), v)) {
            json_object_set(props, k, v);
            changed = true;
        }
    }
    return changed;
}

/* The metadata log of a commit that replaces prev (the file prev_loc) with next: see
 * ferry__iceberg_meta_log. */
static int log_metadata(json_t *next, const char *prev_loc, const json_t *prev, json_t *dropped,
                        struct ferry_error *err)
{
    int64_t at = json_integer_value(json_object_get(prev, "last-updated-ms"));
    return ferry__iceberg_meta_log(next, prev_loc, at, dropped) == FERRY_OK ? FERRY_OK : nomem(err);
}

/* After a commit of meta: the metadata files its log trimmed off (dropped) are deleted when
 * the table's write.metadata.delete-after-commit.enabled is true, and only files in the
 * table's own metadata/ folder. Never on a REST catalog: its server keeps the log and owns
 * those files. Best effort: a file left is harmless and `ferry iceberg expire` removes it. */
static void drop_old_metadata(const struct target *t, const json_t *meta, const json_t *dropped)
{
    struct sink *s = t->s;
    if (s->kind == ICEBERG_CATALOG_REST || json_array_size(dropped) == 0 ||
        !ferry__iceberg_meta_delete_after_commit(meta))
        return;
    char *mdir = ferry_asprintf("%s/metadata/", t->dir);
    char *muri = mdir ? ferry__iceberg_io_uri(s->io, mdir) : NULL;
    size_t i;
    json_t *v;
    json_array_foreach(dropped, i, v)
    {
        const char *loc = json_string_value(v), *name = NULL;
        if (muri && loc && strncmp(loc, muri, strlen(muri)) == 0)
            name = loc + strlen(muri);
        else if (mdir && loc && strncmp(loc, mdir, strlen(mdir)) == 0)
            name = loc + strlen(mdir);
        if (name == NULL || strchr(name, '/') || ferry__iceberg_meta_version(name) < 0) continue;
        struct ferry_error e;
        ferry_error_clear(&e);
        if (ferry__iceberg_io_remove(s->io, loc, &e) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "iceberg sink: old metadata file %s not deleted: %s", loc,
                      e.message);
    }
    ferry_free(muri);
    ferry_free(mdir);
}

static json_t *new_table_metadata(const struct target *t, const char *location,
                                  struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    json_t *fields = json_array();
    json_t *ids = json_array();
    for (int i = 0; i < sc->n_fields; i++) {
        json_t *f = schema_field_json(i + 1, &sc->fields[i], err);
        if (f == NULL) {
            json_decref(fields);
            json_decref(ids);
            return NULL;
        }
        json_array_append_new(fields, f);
    }
    /* identifier fields must be required and not floating point */
    bool key_ok = sc->n_key > 0;
    for (int k = 0; k < sc->n_key; k++) {
        const struct ferry_field *f = &sc->fields[sc->key[k]];
        if (f->nullable || f->type == FERRY_TYPE_FLOAT32 || f->type == FERRY_TYPE_FLOAT64)
            key_ok = false;
    }
    for (int k = 0; key_ok && k < sc->n_key; k++) json_array_append_new(ids, json_integer(sc->key[k] + 1));
    json_t *schema = json_pack("{s:s,s:i,s:o,s:o}", "type", "struct", "schema-id", 0,
                               "identifier-field-ids", ids, "fields", fields);
    char uuid[40];
    uuid4(uuid);
    json_t *props = json_pack("{s:s,s:s}", "write.format.default", "parquet", "created-by",
                              "ferry");
    json_t *meta = json_pack(
        "{s:i,s:s,s:s,s:i,s:I,s:i,s:i,s:[o],s:i,s:[{s:i,s:o}],s:i,s:i,s:[{s:i,s:[]}],s:o,"
        "s:{},s:[],s:[],s:[]}",
        "format-version", 2, "table-uuid", uuid, "location", location, "last-sequence-number", 0,
        "last-updated-ms", (json_int_t)now_ms(), "last-column-id", sc->n_fields,
        "current-schema-id", 0, "schemas", schema, "default-spec-id", 0, "partition-specs",
        "spec-id", 0, "fields", spec_json(t), "last-partition-id", 999 + t->n_pf,
        "default-sort-order-id", 0, "sort-orders", "order-id", 0, "fields", "properties", props,
        "refs", "snapshots", "snapshot-log", "metadata-log");
    if (meta == NULL) nomem(err);
    return meta;
}

static const char *field_type(json_t *f)
{
    return json_string_value(json_object_get(f, "type"));
}

/* Checks the ferry schema against the table's current schema, adds what it lacks (a new
 * schema: new columns optional with fresh ids, widened types, required made optional),
 * and fills t->field_ids. *changed when meta was modified. */
static int reconcile_schema(struct target *t, json_t *meta, bool *changed, struct ferry_error *err)
{
    *changed = false;
    json_t *cur = current_schema(meta);
    if (cur == NULL)
        return ferry_error_set(err, FERRY_ESINK, "iceberg",
                               "iceberg sink: table %s: metadata without its current schema",
                               t->table);
    json_t *fields = json_deep_copy(json_object_get(cur, "fields"));
    json_int_t last_id = json_integer_value(json_object_get(meta, "last-column-id"));
    int rc = FERRY_OK;
    const struct ferry_schema *sc = t->schema;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *ff = &sc->fields[i];
        char want[48];
        rc = ferry__iceberg_type(ff, want, sizeof want, err);
        if (rc != FERRY_OK) break;
        json_t *hit = NULL;
        size_t k;
        json_t *f;
        json_array_foreach(fields, k, f)
        {
            const char *n = json_string_value(json_object_get(f, "name"));
            if (n && !strcmp(n, ff->name)) hit = f;
        }
        if (hit == NULL) {
            json_t *nf = schema_field_json((int)++last_id, ff, err);
            if (nf == NULL) {
                rc = FERRY_EUNSUPPORTED;
                break;
            }
            json_object_set_new(nf, "required", json_false()); /* existing rows have none */
            json_array_append_new(fields, nf);
            t->field_ids[i] = (int32_t)last_id;
            *changed = true;
            continue;
        }
        t->field_ids[i] = (int32_t)json_integer_value(json_object_get(hit, "id"));
        const char *have = field_type(hit);
        if (have == NULL || !json_is_string(json_object_get(hit, "type"))) {
            rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                                 "iceberg sink: table %s: column %s has a nested type", t->table,
                                 ff->name);
            break;
        }
        if (strcmp(have, want) != 0) {
            bool reads_as = (!strcmp(have, "long") && !strcmp(want, "int")) ||
                            (!strcmp(have, "double") && !strcmp(want, "float"));
            bool widen = (!strcmp(have, "int") && !strcmp(want, "long")) ||
                         (!strcmp(have, "float") && !strcmp(want, "double"));
            if (widen) {
                json_object_set_new(hit, "type", json_string(want));
                *changed = true;
            } else if (!reads_as) {
                rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                                     "iceberg sink: table %s: column %s is %s in the table and %s "
                                     "in the source; only int -> long and float -> double can "
                                     "change",
                                     t->table, ff->name, have, want);
                break;
            }
        }
        if (ff->nullable && json_is_true(json_object_get(hit, "required"))) {
            json_object_set_new(hit, "required", json_false());
            *changed = true;
        }
    }
    /* table columns the source lacks get nulls: they must allow them */
    size_t k;
    json_t *f;
    json_array_foreach(fields, k, f)
    {
        if (rc != FERRY_OK) break;
        const char *n = json_string_value(json_object_get(f, "name"));
        if (n && ferry_schema_find(sc, n) < 0 && json_is_true(json_object_get(f, "required")))
            rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                                 "iceberg sink: table %s: required column %s is missing from the "
                                 "source",
                                 t->table, n);
    }
    if (rc == FERRY_OK && *changed) {
        json_int_t max_id = 0;
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(meta, "schemas"), i, s)
        {
            json_int_t id = json_integer_value(json_object_get(s, "schema-id"));
            if (id > max_id) max_id = id;
        }
        /* "o" takes the reference: a schema without identifier-field-ids (other engines
         * often leave it out) gets a fresh array, one with them a new reference */
        json_t *ids = json_object_get(cur, "identifier-field-ids");
        json_t *ns = json_pack("{s:s,s:I,s:o,s:o}", "type", "struct", "schema-id", max_id + 1,
                               "identifier-field-ids", ids ? json_incref(ids) : json_array(),
                               "fields", fields);
        fields = NULL;
        json_array_append_new(json_object_get(meta, "schemas"), ns);
        json_object_set_new(meta, "current-schema-id", json_integer(max_id + 1));
        json_object_set_new(meta, "last-column-id", json_integer(last_id));
    }
    json_decref(fields);
    return rc;
}

/* Partitioning: the configured fields, or the table's own spec when none is configured. A
 * configured spec that differs from an existing table's is refused. */
static int resolve_partitioning(struct sink *s, struct target *t, json_t *meta,
                                struct ferry_error *err)
{
    json_t *want = json_object_get(s->partition_cfg, t->table);
    json_t *spec = meta ? default_spec(meta) : NULL;
    json_t *have = spec ? json_object_get(spec, "fields") : NULL;
    int rc = FERRY_OK;
    if (want != NULL) {
        size_t i;
        json_t *w;
        json_array_foreach(want, i, w)
        {
            rc = ferry__iceberg_pfield_parse(json_string_value(w), t->schema, &t->pf[t->n_pf], err);
            if (rc != FERRY_OK) return ferry_error_prefix(err, "sink.partition.%s", t->table);
            t->n_pf++;
        }
    }
    if (meta == NULL) return FERRY_OK;
    t->spec_id = (int)json_integer_value(json_object_get(meta, "default-spec-id"));
    if (want == NULL) {
        size_t i;
        json_t *f;
        json_array_foreach(have, i, f)
        {
            const char *tr = json_string_value(json_object_get(f, "transform"));
            json_int_t src = json_integer_value(json_object_get(f, "source-id"));
            const char *col = NULL;
            size_t k;
            json_t *sf;
            json_array_foreach(json_object_get(current_schema(meta), "fields"), k, sf)
            {
                if (json_integer_value(json_object_get(sf, "id")) == src)
                    col = json_string_value(json_object_get(sf, "name"));
            }
            char text[300];
            int b = 0;
            if (tr && sscanf(tr, "bucket[%d]", &b) == 1)
                snprintf(text, sizeof text, "bucket(%d, %s)", b, col ? col : "?");
            else
                snprintf(text, sizeof text, "%s(%s)", tr ? tr : "?", col ? col : "?");
            if (t->n_pf >= MAX_PFIELDS ||
                ferry__iceberg_pfield_parse(text, t->schema, &t->pf[t->n_pf], NULL) != FERRY_OK)
                return ferry_error_set(err, FERRY_ESINK, "iceberg",
                                       "iceberg sink: table %s: its partition field %s cannot be "
                                       "written by ferry (transforms: identity, day, hour, bucket)",
                                       t->table, text);
            /* keep the table's own names */
            const char *name = json_string_value(json_object_get(f, "name"));
            if (name) {
                ferry_free(t->pf[t->n_pf].name);
                t->pf[t->n_pf].name = ferry_strdup(name);
            }
            t->n_pf++;
        }
        return FERRY_OK;
    }
    bool same = json_array_size(have) == (size_t)t->n_pf;
    for (int i = 0; same && i < t->n_pf; i++) {
        json_t *f = json_array_get(have, (size_t)i);
        const char *tr = json_string_value(json_object_get(f, "transform"));
        same = tr && !strcmp(tr, t->pf[i].text) &&
               json_integer_value(json_object_get(f, "source-id")) == t->field_ids[t->pf[i].col];
        const char *name = json_string_value(json_object_get(f, "name"));
        if (same && name) {
            ferry_free(t->pf[i].name);
            t->pf[i].name = ferry_strdup(name);
        }
    }
    if (!same)
        rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                             "sink.partition.%s: the existing table %s.%s is partitioned "
                             "differently; ferry does not change a table's partition spec",
                             t->table, s->ns, t->table);
    return rc;
}

/* ---- prepare / begin -------------------------------------------------------------------- */

/* upsert / merge: the key's own schema and field ids (the equality delete files' columns). */
static int prepare_row_level(struct target *t, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    /* a delete carries only its key: the key must tell the partition */
    for (int k = 0; k < t->n_pf; k++)
        if (sc->fields[t->pf[k].col].key_pos == 0)
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                   "iceberg sink: table %s: write: %s needs every partition column "
                                   "to be a key column (%s is not)",
                                   t->table, ferry_write_mode_name(t->mode),
                                   sc->fields[t->pf[k].col].name);
    t->key_schema = ferry_schema_new();
    t->key_cols = ferry_calloc((size_t)sc->n_key, sizeof *t->key_cols);
    t->key_ids = ferry_calloc((size_t)sc->n_key, sizeof *t->key_ids);
    if (!t->key_schema || !t->key_cols || !t->key_ids) return nomem(err);
    for (int k = 0; k < sc->n_key; k++) {
        const struct ferry_field *f = &sc->fields[sc->key[k]];
        int rc = ferry_schema_add_field(t->key_schema, f->name, f->type, f->nullable, err);
        if (rc != FERRY_OK) return rc;
        t->key_schema->fields[k].precision = f->precision;
        t->key_schema->fields[k].scale = f->scale;
        t->key_cols[k] = sc->key[k];
        t->key_ids[k] = t->field_ids[sc->key[k]];
    }
    int rc = ferry_schema_finish(t->key_schema, err);
    if (rc == FERRY_OK) t->row_level = true;
    return rc;
}

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    const char *table = target->table ? target->table : target->resource;
    if (table == NULL || table[0] == '\0' || table[0] == '.' || strchr(table, '/'))
        return ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                               "iceberg sink: \"%s\" cannot name a table (no '/', no leading '.'); "
                               "set the resource's target",
                               table ? table : "");
    bool row_level = target->mode == FERRY_WRITE_UPSERT || target->mode == FERRY_WRITE_MERGE;
    if (row_level && target->schema->n_key == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "iceberg",
                               "iceberg sink: table %s: write: %s needs a key", table,
                               ferry_write_mode_name(target->mode));
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return nomem(err);
        for (int i = s->n_t; i <= target->index; i++) memset(&nt[i], 0, sizeof nt[i]);
        s->t = nt;
        s->n_t = target->index + 1;
    }
    struct target *t = &s->t[target->index];
    if (t->used) return FERRY_OK;
    int rc = catalog(s, err);
    if (rc != FERRY_OK) return rc;
    t->s = s;
    t->mode = target->mode;
    t->table = ferry_strdup(table);
    t->resource = ferry_strdup(target->resource ? target->resource : table);
    t->dir = ferry__iceberg_catalog_table_dir(s->cat, table);
    t->data_dir = t->dir ? ferry_asprintf("%s/data", t->dir) : NULL;
    t->schema = ferry_schema_ref(target->schema);
    t->field_ids = ferry_calloc((size_t)target->schema->n_fields, sizeof *t->field_ids);
    t->positions = json_object();
    t->counts = json_object();
    ferry_buf_init(&t->keybuf, 4096);
    ferry_buf_init(&t->keys, 0);
    ferry_buf_init(&t->pkeybuf, 4096);
    if (!t->table || !t->resource || !t->dir || !t->data_dir || !t->field_ids || !t->positions ||
        !t->counts)
        return nomem(err);
    t->used = true;
    for (int i = 0; i < t->schema->n_fields; i++) {
        char ty[48];
        rc = ferry__iceberg_type(&t->schema->fields[i], ty, sizeof ty, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "iceberg sink: table %s", table);
        t->field_ids[i] = i + 1;
    }
    json_t *dropped = json_array();
    if (dropped == NULL) return nomem(err);
    for (int tries = 0; tries <= s->retries; tries++) {
        json_t *meta = NULL;
        char *loc = NULL;
        int version = 0;
        rc = ferry__iceberg_catalog_load(s->cat, table, &meta, &loc, &version, err);
        if (rc != FERRY_OK) break;
        bool changed = false;
        for (int k = 0; k < t->n_pf; k++) ferry__iceberg_pfield_release(&t->pf[k]);
        t->n_pf = 0;
        if (meta == NULL) {
            rc = resolve_partitioning(s, t, NULL, err);
            char *location = rc == FERRY_OK ? ferry__iceberg_io_uri(s->io, t->dir) : NULL;
            if (rc == FERRY_OK && location == NULL) rc = nomem(err);
            if (rc == FERRY_OK) rc = ferry__iceberg_io_mkdirs(s->io, t->data_dir, err);
            if (rc == FERRY_OK) {
                meta = new_table_metadata(t, location, err);
                if (meta == NULL) rc = err && err->code ? err->code : FERRY_ENOMEM;
            }
            if (rc == FERRY_OK) set_properties(s, meta);
            ferry_free(location);
            changed = true;
        } else {
            rc = reconcile_schema(t, meta, &changed, err);
            if (rc == FERRY_OK) rc = resolve_partitioning(s, t, meta, err);
            if (rc == FERRY_OK && set_properties(s, meta)) changed = true;
            if (rc == FERRY_OK && changed) {
                rc = log_metadata(meta, loc, meta, dropped, err);
                json_object_set_new(meta, "last-updated-ms", json_integer(now_ms()));
            }
            if (rc == FERRY_OK) rc = ferry__iceberg_io_mkdirs(s->io, t->data_dir, err);
        }
        if (rc == FERRY_OK && changed)
            rc = ferry__iceberg_catalog_commit(s->cat, table, loc, version + 1, meta, NULL, err);
        if (rc == FERRY_OK && changed) drop_old_metadata(t, meta, dropped);
        json_array_clear(dropped);
        json_decref(meta);
        ferry_free(loc);
        if (rc != FERRY_ECONFLICT) break;
        ferry_error_clear(err);
    }
    json_decref(dropped);
    if (rc == FERRY_OK && row_level) rc = prepare_row_level(t, err);
    return rc;
}

/* ---- orphans of earlier attempts ----------------------------------------------------------
 *
 * Data files are written under their final names and become part of the table only when
 * a snapshot names them, so an attempt that died leaves files no snapshot references.
 * Their names carry the run and the attempt (NNNNN-<run>-<attempt>-<uuid>.parquet), and
 * only snapshots of the same run can reference them: begin() of a later attempt removes
 * the files of earlier attempts of its run that none of the run's snapshots lists, and on S3
 * aborts the unfinished multipart uploads of those attempts (same name test). */

/* The snapshot snap (or NULL) was committed by ferry's run run_id (summary ferry.run-id). */
static bool of_run(json_t *snap, int64_t run_id)
{
    const char *run =
        json_string_value(json_object_get(json_object_get(snap, "summary"), "ferry.run-id"));
    return run != NULL && strtoll(run, NULL, 10) == run_id;
}

static int referenced_files(struct sink *s, json_t *meta, int64_t run_id, json_t *set,
                            struct ferry_error *err)
{
    size_t i;
    json_t *snap;
    int rc = FERRY_OK;
    json_array_foreach(json_object_get(meta, "snapshots"), i, snap)
    {
        if (!of_run(snap, run_id)) continue;
        json_t *list = NULL;
        rc = parent_manifests(s, snap, &list, err);
        size_t k;
        json_t *m;
        json_array_foreach(list, k, m)
        {
            if (rc != FERRY_OK) break;
            const char *path = json_string_value(json_object_get(m, "manifest_path"));
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            json_t *mm = NULL, *entries = NULL;
            rc = path ? ferry__iceberg_io_read(s->io, path, &b, err) : FERRY_OK;
            if (rc == FERRY_OK && path)
                rc = ferry__avro_read((const uint8_t *)b.data, b.len, &mm, &entries, err);
            size_t e;
            json_t *en;
            json_array_foreach(entries, e, en)
            {
                const char *fp = json_string_value(
                    json_object_get(json_object_get(en, "data_file"), "file_path"));
                if (fp) json_object_set_new(set, fp, json_true());
            }
            json_decref(mm);
            json_decref(entries);
            ferry_buf_release(&b);
        }
        json_decref(list);
        if (rc != FERRY_OK) break;
    }
    return rc;
}

struct sweep_ctx {
    const struct sink *s;
    json_t *set; /* URIs the run's snapshots name */
};

/* Whether a data file's name (NNNNN-<run>-<attempt>-...) is one of another attempt of this
 * run; its attempt and run in *att, *run. */
static bool other_attempt(const struct sink *s, const char *name, int *att, long long *run)
{
    int n = 0;
    return sscanf(name, "%d-%lld-%d-", &n, run, att) == 3 && *run == s->run_id &&
           *att != s->attempt;
}

/* A data file of another attempt of this run that no snapshot names: it died before its
 * commit. Removal is best effort (the next sweep tries again). */
static int sweep_one(const char *uri, const char *loc, const char *name, void *arg,
                     struct ferry_error *err)
{
    const struct sweep_ctx *c = arg;
    int att = 0;
    long long run = 0;
    if (!other_attempt(c->s, name, &att, &run) || json_object_get(c->set, uri) != NULL)
        return FERRY_OK;
    struct ferry_error e;
    ferry_error_clear(&e);
    if (ferry__iceberg_io_remove(c->s->io, loc, &e) == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, "iceberg sink: removed %s (attempt %d of run %lld died "
                  "before a snapshot named it)", loc, att, run);
    (void)err;
    return FERRY_OK;
}

/* An unfinished multipart upload of a data file of another attempt of this run: that attempt
 * died mid-file (a completed upload is an object, which sweep_one handles). Ours by the same
 * name test as sweep_one: uploads of other runs or other writers under data/ may be in
 * progress right now and are never touched. Best effort like sweep_one. */
static int sweep_upload(const char *loc, const char *name, const char *upload_id,
                        int64_t initiated_ms, void *arg, struct ferry_error *err)
{
    const struct sweep_ctx *c = arg;
    int att = 0;
    long long run = 0;
    (void)initiated_ms; /* ours by name, never by age */
    (void)err;
    if (!other_attempt(c->s, name, &att, &run)) return FERRY_OK;
    struct ferry_error e;
    ferry_error_clear(&e);
    if (ferry__iceberg_io_abort_upload(c->s->io, loc, upload_id, &e) == FERRY_OK)
        ferry_log(FERRY_LOG_INFO, "iceberg sink: aborted the unfinished upload of %s (attempt %d "
                  "of run %lld died mid-file)", loc, att, run);
    else
        ferry_log(FERRY_LOG_WARN, "iceberg sink: unfinished upload of %s not aborted: %s", loc,
                  e.message);
    return FERRY_OK;
}

/* Unfinished multipart uploads of earlier attempts under the table's data/ (only data and
 * delete files are uploaded in parts); not every S3-compatible store lists them. */
static int sweep_uploads(struct sink *s, const struct target *t, struct sweep_ctx *c,
                         struct ferry_error *err)
{
    if (!ferry__iceberg_io_remote(s->io)) return FERRY_OK;
    int rc = ferry__iceberg_io_uploads_each(s->io, t->data_dir, sweep_upload, c, err);
    if (rc == FERRY_EUNSUPPORTED) {
        ferry_log(FERRY_LOG_INFO,
                  "iceberg sink: cannot list the multipart uploads under %s/ (%s); unfinished "
                  "ones are left to `ferry iceberg expire` or the bucket's lifecycle rule",
                  t->data_dir, err ? err->message : "");
        ferry_error_clear(err);
        rc = FERRY_OK;
    } else if (rc != FERRY_OK) {
        ferry_error_prefix(err, "multipart uploads under %s/", t->data_dir);
    }
    return rc;
}

static int sweep(struct sink *s, struct target *t, struct ferry_error *err)
{
    json_t *meta = NULL;
    char *loc = NULL;
    int version = 0;
    int rc = ferry__iceberg_catalog_load(s->cat, t->table, &meta, &loc, &version, err);
    json_t *set = json_object();
    if (rc == FERRY_OK && meta) rc = referenced_files(s, meta, s->run_id, set, err);
    struct sweep_ctx c = {s, set};
    if (rc == FERRY_OK) rc = ferry__iceberg_io_walk(s->io, t->data_dir, sweep_one, &c, err);
    if (rc == FERRY_OK) rc = sweep_uploads(s, t, &c, err);
    json_decref(set);
    json_decref(meta);
    ferry_free(loc);
    return rc;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    for (int i = 0; i < s->n_t; i++)
        if (s->t[i].used) discard(s, &s->t[i]);
    ferry_free(s->pipeline);
    s->pipeline = ferry_strdup(run && run->pipeline ? run->pipeline : "");
    if (s->pipeline == NULL) return nomem(err);
    s->run_id = run ? run->run_id : 0;
    s->attempt = run ? run->attempt : 0;
    int rc = FERRY_OK;
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used && run && run->resuming) rc = sweep(s, &s->t[i], err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "iceberg sink: removing orphan files and uploads");
    s->session = true;
    return FERRY_OK;
}

/* ---- apply ------------------------------------------------------------------------------ */

/* Every byte of a data file passes here: the receipt's CRC covers exactly these bytes. */
static int out_write(void *ctx, const void *p, size_t n, struct ferry_error *err)
{
    struct pwriter *pw = ctx;
    struct target *t = pw->t;
    struct dfile *f = &t->files[pw->file];
    int rc = ferry__iceberg_wfile_write(pw->wf, p, n, err);
    if (rc != FERRY_OK) return rc;
    f->bytes += (int64_t)n;
    t->apply_crc = ferry_crc32c_update(t->apply_crc, p, n);
    t->apply_bytes += (int64_t)n;
    return FERRY_OK;
}

static int fold(struct target *t, struct pwriter *pw, const struct ferry_batch *b,
                struct ferry_error *err)
{
    struct dfile *f = &t->files[pw->file];
    int rc = t->s->fmt->write_batch(pw->fw, b, err);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "%s", f->path);
    f->rows += b->length;
    return FERRY_OK;
}

static int pw_emit(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct pwriter *pw = ctx;
    int rc = fold(pw->t, pw, b, err);
    ferry_batch_unref(b);
    return rc;
}

static int open_file(struct sink *s, struct target *t, struct pwriter *pw, struct ferry_error *err)
{
    struct dfile *nf = ferry_realloc(t->files, sizeof *nf * (size_t)(t->n_files + 1));
    if (nf == NULL) return nomem(err);
    t->files = nf;
    struct dfile *f = &t->files[t->n_files];
    memset(f, 0, sizeof *f);
    t->n_files++;
    char uuid[40];
    uuid4(uuid);
    char *dir = pw->key[0] ? ferry_asprintf("%s/%s", t->data_dir, pw->key) : ferry_strdup(t->data_dir);
    if (dir == NULL) return nomem(err);
    int rc = pw->key[0] ? ferry__iceberg_io_mkdirs(s->io, dir, err) : FERRY_OK;
    f->path = ferry_asprintf("%s/%05d-%" PRId64 "-%d-%s.parquet", dir, t->next_n++, s->run_id,
                             s->attempt, uuid);
    ferry_free(dir);
    if (rc != FERRY_OK) return rc;
    f->uri = f->path ? ferry__iceberg_io_uri(s->io, f->path) : NULL;
    f->partition = json_incref(pw->partition);
    f->pkey = ferry_strdup(pw->key);
    pw->routed = 0;
    f->content = pw->content;
    f->ids = pw->field_ids;
    f->stats = ferry_calloc((size_t)pw->schema->n_fields, sizeof *f->stats);
    if (!f->path || !f->uri || !f->stats || !f->pkey) return nomem(err);
    f->ncols = pw->schema->n_fields;
    for (int i = 0; i < pw->schema->n_fields; i++)
        ferry__iceberg_stats_init(&f->stats[i], pw->schema->fields[i].type);
    rc = ferry__iceberg_wfile_open(s->io, f->path, &pw->wf, err);
    if (rc != FERRY_OK) return rc;
    pw->file = t->n_files - 1;
    struct ferry__files_format_opts o = s->opts;
    o.field_ids = pw->field_ids;
    struct ferry__files_out out = {out_write, pw};
    rc = s->fmt->open_part(&o, pw->schema, out, &pw->fw, err);
    if (rc != FERRY_OK) ferry_error_prefix(err, "%s", f->path);
    return rc;
}

/* Finishes the open file of pw: footer, fsync, close. */
static int close_file(struct sink *s, struct target *t, struct pwriter *pw, struct ferry_error *err)
{
    int rc = FERRY_OK;
    if (pw->rw) {
        rc = ferry_rw_flush(pw->rw, false, err);
        ferry__rw_free(pw->rw);
        pw->rw = NULL;
    }
    if (pw->wf == NULL) return rc;
    struct dfile *f = &t->files[pw->file];
    int64_t bytes = 0;
    if (rc == FERRY_OK) rc = s->fmt->finish_part(pw->fw, &bytes, err);
    /* the manifest's column statistics are the ones the writer kept for its footer */
    for (int i = 0; i < f->ncols && rc == FERRY_OK; i++) {
        struct ferry__files_column_stats cs;
        rc = s->fmt->column_stats(pw->fw, i, &cs);
        if (rc == FERRY_OK) rc = ferry__iceberg_stats_from_file(&f->stats[i], &cs);
        if (rc != FERRY_OK) rc = nomem(err);
    }
    s->fmt->free(pw->fw);
    pw->fw = NULL;
    if (rc == FERRY_OK) rc = ferry__iceberg_wfile_finish(pw->wf, err);
    ferry__iceberg_wfile_free(pw->wf);
    pw->wf = NULL;
    if (rc == FERRY_OK && bytes != f->bytes)
        rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                             "iceberg sink: %s: the parquet writer reports %" PRId64
                             " bytes, %" PRId64 " were written",
                             f->path, bytes, f->bytes);
    if (rc == FERRY_OK) f->done = true;
    return rc;
}

static struct pwriter *find_pw(struct target *t, const char *key)
{
    for (int i = t->n_pw - 1; i >= 0; i--)
        if (!strcmp(t->pw[i]->key, key)) return t->pw[i];
    return NULL;
}

static struct pwriter *add_pw(struct target *t, const char *key, json_t *partition,
                              struct ferry_error *err)
{
    struct pwriter **np = ferry_realloc(t->pw, sizeof *np * (size_t)(t->n_pw + 1));
    struct pwriter *pw = np ? ferry_calloc(1, sizeof *pw) : NULL;
    if (np) t->pw = np;
    if (pw == NULL) {
        json_decref(partition);
        nomem(err);
        return NULL;
    }
    pw->wf = NULL;
    pw->t = t;
    pw->schema = t->schema;
    pw->field_ids = t->field_ids;
    pw->content = CONTENT_DATA;
    pw->key = ferry_strdup(key);
    pw->partition = partition;
    if (pw->key == NULL) {
        json_decref(partition);
        ferry_free(pw);
        nomem(err);
        return NULL;
    }
    t->pw[t->n_pw++] = pw;
    return pw;
}

static int copy_row(struct ferry_row_writer *rw, const struct ferry_batch *b, int64_t r)
{
    ferry_rw_begin(rw, ferry_batch_op(b, r));
    for (int c = 0; c < b->schema->n_fields; c++) ferry_rw_copy_value(rw, b, c, r);
    return ferry_rw_end(rw, NULL);
}

/* ---- upsert / merge: equality deletes, and position deletes within a session ---------------
 *
 * Every key written in a session gets one row in the session's equality delete file: the
 * snapshot's sequence number is above every older data file's, so readers drop the older
 * rows of that key (and only those: equality deletes never apply to data files of their
 * own snapshot). A key written twice in one session (an update after an insert, a delete
 * after an update) must also lose its earlier row of this session: a position delete
 * (file, row position) does that, since position deletes apply to data files of the same
 * sequence number. The session keeps an index of the keys it wrote (serialized key ->
 * file and position of its live row): memory grows with the distinct keys of one commit. */

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3u;
    }
    return h;
}

/* The key columns of row r, serialized into t->keybuf (type-tagged, unambiguous). */
static int key_bytes(struct target *t, const struct ferry_batch *b, int64_t r)
{
    struct ferry_buf *k = &t->keybuf;
    k->len = 0;
    int rc = FERRY_OK;
    for (int i = 0; i < t->key_schema->n_fields && rc == FERRY_OK; i++) {
        int c = t->key_cols[i];
        if (ferry_col_is_null(b, c, r)) {
            rc = ferry_buf_append(k, "\0", 1);
            continue;
        }
        rc = ferry_buf_append(k, "\1", 1);
        enum ferry_type ty = b->schema->fields[c].type;
        if (rc != FERRY_OK) break;
        if (ferry_type_is_varwidth(ty)) {
            size_t n;
            const uint8_t *p = ferry_col_bytes(b, c, r, &n);
            uint32_t len = (uint32_t)n;
            rc = ferry_buf_append(k, &len, sizeof len);
            if (rc == FERRY_OK) rc = ferry_buf_append(k, p, n);
        } else if (ty == FERRY_TYPE_UUID) {
            rc = ferry_buf_append(k, ferry_col_fixed(b, c, r), 16);
        } else if (ty == FERRY_TYPE_DECIMAL128) {
            struct ferry_decimal128 d = ferry_col_dec128(b, c, r);
            rc = ferry_buf_append(k, &d, sizeof d);
        } else if (ty == FERRY_TYPE_FLOAT32 || ty == FERRY_TYPE_FLOAT64) {
            double d = ferry_col_float(b, c, r);
            rc = ferry_buf_append(k, &d, sizeof d);
        } else {
            int64_t v = ty == FERRY_TYPE_BOOL ? ferry_col_bool(b, c, r) : ferry_col_int(b, c, r);
            rc = ferry_buf_append(k, &v, sizeof v);
        }
    }
    return rc;
}

static int keys_grow(struct target *t)
{
    size_t n = t->n_slots ? t->n_slots * 2 : 4096;
    struct keyslot *ns = ferry_calloc(n, sizeof *ns);
    if (ns == NULL) return FERRY_ENOMEM;
    for (size_t i = 0; i < t->n_slots; i++) {
        if (!t->slots[i].used) continue;
        size_t j = t->slots[i].hash & (n - 1);
        while (ns[j].used) j = (j + 1) & (n - 1);
        ns[j] = t->slots[i];
    }
    ferry_free(t->slots);
    t->slots = ns;
    t->n_slots = n;
    return FERRY_OK;
}

/* The slot of the key in t->keybuf; *fresh when it was not in the index (now added). */
static struct keyslot *key_slot(struct target *t, bool *fresh)
{
    if ((t->used_slots + 1) * 2 > t->n_slots && keys_grow(t) != FERRY_OK) return NULL;
    const uint8_t *k = (const uint8_t *)t->keybuf.data;
    size_t n = t->keybuf.len;
    uint64_t h = fnv1a(k, n);
    size_t j = h & (t->n_slots - 1);
    while (t->slots[j].used) {
        struct keyslot *e = &t->slots[j];
        if (e->hash == h && e->len == n && memcmp(t->keys.data + e->off, k, n) == 0) {
            *fresh = false;
            return e;
        }
        j = (j + 1) & (t->n_slots - 1);
    }
    if (t->keys.len + n > UINT32_MAX) return NULL;
    uint32_t off = (uint32_t)t->keys.len;
    if (ferry_buf_append(&t->keys, k, n) != FERRY_OK) return NULL;
    struct keyslot *e = &t->slots[j];
    *e = (struct keyslot){.hash = h, .off = off, .len = (uint32_t)n, .file = -1, .used = true};
    t->used_slots++;
    *fresh = true;
    return e;
}

static int add_posdel(struct target *t, int file, int64_t pos)
{
    if (t->n_pd == t->cap_pd) {
        size_t n = t->cap_pd ? t->cap_pd * 2 : 1024;
        struct posdel *np = ferry_realloc(t->pd, n * sizeof *np);
        if (np == NULL) return FERRY_ENOMEM;
        t->pd = np;
        t->cap_pd = n;
    }
    t->pd[t->n_pd++] = (struct posdel){file, pos};
    return FERRY_OK;
}

/* A writer of delete files. partition (taken; NULL: unpartitioned) and key place it. */
static struct pwriter *new_pw(struct target *t, const struct ferry_schema *schema,
                              const int32_t *ids, int content, const char *key, json_t *partition,
                              struct ferry_error *err)
{
    struct pwriter *pw = ferry_calloc(1, sizeof *pw);
    if (pw == NULL) {
        json_decref(partition);
        nomem(err);
        return NULL;
    }
    pw->wf = NULL;
    pw->file = -1;
    pw->t = t;
    pw->schema = schema;
    pw->field_ids = ids;
    pw->content = content;
    pw->key = ferry_strdup(key ? key : "");
    pw->partition = partition ? partition : json_object();
    if (pw->key == NULL || pw->partition == NULL) {
        ferry_free(pw->key);
        json_decref(pw->partition);
        ferry_free(pw);
        nomem(err);
        return NULL;
    }
    return pw;
}

/* The partition path of row r into kb (NUL-terminated). */
static int partition_key(const struct target *t, const struct ferry_batch *b, int64_t r,
                         struct ferry_buf *kb)
{
    struct ferry__iceberg_pvalue v;
    kb->len = 0;
    int rc = FERRY_OK;
    for (int k = 0; k < t->n_pf && rc == FERRY_OK; k++) {
        ferry__iceberg_pvalue(&t->pf[k], b, r, &v);
        if (k > 0) rc = ferry_buf_append(kb, "/", 1);
        if (rc == FERRY_OK)
            rc = ferry__iceberg_pvalue_path(&t->pf[k], b->schema->fields[t->pf[k].col].type, &v, kb);
    }
    return rc == FERRY_OK ? ferry_buf_append(kb, "", 1) : rc;
}

static json_t *partition_json(const struct target *t, const struct ferry_batch *b, int64_t r)
{
    struct ferry__iceberg_pvalue v;
    json_t *part = json_object();
    for (int k = 0; k < t->n_pf; k++) {
        ferry__iceberg_pvalue(&t->pf[k], b, r, &v);
        json_object_set_new(part, t->pf[k].name,
                            ferry__iceberg_pvalue_json(&t->pf[k], b->schema->fields[t->pf[k].col].type,
                                                       &v));
    }
    return part;
}

/* The open equality delete writer of a partition (its file and row writer opened). */
static struct pwriter *eq_writer(struct sink *s, struct target *t, const struct ferry_batch *b,
                                 int64_t r, const char *key, struct ferry_error *err)
{
    struct pwriter *pw = NULL;
    for (int i = t->n_eqws - 1; i >= 0 && pw == NULL; i--)
        if (!strcmp(t->eqws[i]->key, key)) pw = t->eqws[i];
    if (pw == NULL) {
        struct pwriter **n = ferry_realloc(t->eqws, sizeof *n * (size_t)(t->n_eqws + 1));
        if (n == NULL) {
            nomem(err);
            return NULL;
        }
        t->eqws = n;
        pw = new_pw(t, t->key_schema, t->key_ids, CONTENT_EQ_DELETES, key,
                    t->n_pf ? partition_json(t, b, r) : NULL, err);
        if (pw == NULL) return NULL;
        t->eqws[t->n_eqws++] = pw;
    }
    int rc = pw->wf == NULL ? open_file(s, t, pw, err) : FERRY_OK;
    if (rc == FERRY_OK && pw->rw == NULL) {
        struct ferry_rw_limits lim = {.rows = 65536, .bytes = INT64_C(16) << 20};
        pw->rw = ferry__rw_new(t->key_schema, t->resource, lim, pw_emit, pw);
        if (pw->rw == NULL) rc = nomem(err);
    }
    return rc == FERRY_OK ? pw : NULL;
}

/* Unpartitioned tables write runs of kept rows as slices of the batch (no copy); partitioned
 * ones copy each kept row into its partition's row writer (a key never changes partition:
 * prepare_row_level checks that the partition columns are key columns). */
static int apply_row_level(struct sink *s, struct target *t, struct ferry_batch *b,
                           struct ferry_error *err)
{
    bool part = t->n_pf > 0;
    struct pwriter *pw = NULL, *eq = NULL;
    int rc = FERRY_OK;
    if (!part) {
        pw = t->n_pw > 0 ? t->pw[0] : add_pw(t, "", json_object(), err);
        if (pw == NULL) return FERRY_ENOMEM;
        rc = pw->wf == NULL ? open_file(s, t, pw, err) : FERRY_OK;
        if (rc != FERRY_OK) return rc;
        eq = eq_writer(s, t, b, 0, "", err);
        if (eq == NULL) return err && err->code ? err->code : FERRY_ENOMEM;
        pw->routed = t->files[pw->file].rows;
    }
    int64_t run = -1;
    for (int64_t r = 0; r <= b->length && rc == FERRY_OK; r++) {
        bool del = r < b->length && ferry_batch_op(b, r) == FERRY_OP_DELETE;
        if (!part && run >= 0 && (r == b->length || del)) { /* write the rows kept so far */
            struct ferry_batch *sl = ferry_batch_slice(b, run, r - run);
            if (sl == NULL) return nomem(err);
            rc = fold(t, pw, sl, err);
            ferry_batch_unref(sl);
            run = -1;
        }
        if (r == b->length || rc != FERRY_OK) break;
        if (part) {
            if (partition_key(t, b, r, &t->pkeybuf) != FERRY_OK) return nomem(err);
            pw = find_pw(t, t->pkeybuf.data);
            if (pw == NULL) pw = add_pw(t, t->pkeybuf.data, partition_json(t, b, r), err);
            if (pw == NULL) return FERRY_ENOMEM;
            eq = eq_writer(s, t, b, r, t->pkeybuf.data, err);
            if (eq == NULL) return err && err->code ? err->code : FERRY_ENOMEM;
        }
        bool fresh = false;
        struct keyslot *e = key_bytes(t, b, r) == FERRY_OK ? key_slot(t, &fresh) : NULL;
        if (e == NULL) return nomem(err);
        if (!fresh && e->file >= 0 && add_posdel(t, e->file, e->pos) != FERRY_OK) return nomem(err);
        if (fresh) { /* the first time this session meets the key: delete its older rows */
            ferry_rw_begin(eq->rw, FERRY_OP_DELETE);
            for (int i = 0; i < t->key_schema->n_fields; i++) ferry_rw_copy_value(eq->rw, b, t->key_cols[i], r);
            rc = ferry_rw_end(eq->rw, err);
        }
        if (del) {
            e->file = -1;
            continue;
        }
        if (part) {
            if (pw->wf == NULL) rc = open_file(s, t, pw, err);
            if (rc == FERRY_OK && pw->rw == NULL) {
                struct ferry_rw_limits lim = {.rows = 65536, .bytes = INT64_C(16) << 20};
                pw->rw = ferry__rw_new(t->schema, t->resource, lim, pw_emit, pw);
                if (pw->rw == NULL) rc = nomem(err);
            }
            if (rc == FERRY_OK && copy_row(pw->rw, b, r) != FERRY_OK)
                rc = pw->err.code != FERRY_OK ? pw->err.code
                                              : ferry_error_set(err, FERRY_ESINK, "iceberg",
                                                                "iceberg sink: table %s: copying a "
                                                                "row into partition %s failed",
                                                                t->table, pw->key);
        } else if (run < 0) {
            run = r;
        }
        e->file = pw->file;
        e->pos = pw->routed++;
    }
    for (int i = 0; i < t->n_eqws && rc == FERRY_OK; i++)
        if (t->eqws[i]->rw) rc = ferry_rw_flush(t->eqws[i]->rw, false, err);
    for (int i = 0; i < t->n_pw && rc == FERRY_OK; i++) {
        struct pwriter *w = t->pw[i];
        if (w->rw) rc = ferry_rw_flush(w->rw, false, err);
        if (rc == FERRY_OK && w->wf != NULL && t->files[w->file].bytes >= s->file_bytes)
            rc = close_file(s, t, w, err);
    }
    return rc;
}

static int posdel_cmp(const void *a, const void *b, void *ctx)
{
    const struct posdel *x = a, *y = b;
    const struct target *t = ctx;
    int c = x->file == y->file ? 0 : strcmp(t->files[x->file].pkey, t->files[y->file].pkey);
    if (c == 0 && x->file != y->file) c = strcmp(t->files[x->file].uri, t->files[y->file].uri);
    if (c != 0) return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static const int32_t posdel_ids[2] = {2147483546, 2147483545}; /* file_path, pos (reserved) */

/* The session's position deletes: one delete file per partition (a position delete file
 * applies to data files of its own partition), rows sorted by file and position. */
static int write_position_deletes(struct sink *s, struct target *t, struct ferry_error *err)
{
    qsort_r(t->pd, t->n_pd, sizeof *t->pd, posdel_cmp, t);
    struct ferry_schema *sc = ferry_schema_new();
    int rc = sc ? ferry_schema_add_field(sc, "file_path", FERRY_TYPE_UTF8, false, err) : nomem(err);
    if (rc == FERRY_OK) rc = ferry_schema_add_field(sc, "pos", FERRY_TYPE_INT64, false, err);
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    struct pwriter *pw = NULL;
    for (size_t i = 0; i < t->n_pd && rc == FERRY_OK; i++) {
        const struct dfile *f = &t->files[t->pd[i].file];
        if (pw == NULL || strcmp(pw->key, f->pkey) != 0) {
            if (pw) {
                rc = close_file(s, t, pw, err);
                pw_free(s, pw); /* its file entry points at posdel_ids, not at the schema */
                pw = NULL;
                if (rc != FERRY_OK) break;
            }
            pw = new_pw(t, sc, posdel_ids, CONTENT_POS_DELETES, f->pkey,
                        json_incref(f->partition), err);
            if (pw == NULL) {
                rc = FERRY_ENOMEM;
                break;
            }
            rc = open_file(s, t, pw, err);
            if (rc == FERRY_OK) {
                struct ferry_rw_limits lim = {.rows = 65536, .bytes = INT64_C(16) << 20};
                pw->rw = ferry__rw_new(sc, t->resource, lim, pw_emit, pw);
                if (pw->rw == NULL) rc = nomem(err);
            }
            if (rc != FERRY_OK) break;
        }
        const char *uri = t->files[t->pd[i].file].uri;
        ferry_rw_begin(pw->rw, FERRY_OP_DELETE);
        ferry_rw_text(pw->rw, uri, strlen(uri));
        ferry_rw_int(pw->rw, t->pd[i].pos);
        rc = ferry_rw_end(pw->rw, err);
    }
    if (pw && rc == FERRY_OK) rc = close_file(s, t, pw, err);
    pw_free(s, pw);
    ferry_schema_unref(sc);
    return rc;
}

/* Each partition's rows are copied into its own batches (a row writer per partition)
 * before they are encoded: a data file holds one partition. */
static int apply_partitioned(struct sink *s, struct target *t, const struct ferry_batch *b,
                             struct ferry_error *err)
{
    struct ferry__iceberg_pvalue v;
    int rc = FERRY_OK;
    struct pwriter *last = NULL;
    for (int64_t r = 0; r < b->length && rc == FERRY_OK; r++) {
        t->keybuf.len = 0;
        for (int k = 0; k < t->n_pf && rc == FERRY_OK; k++) {
            ferry__iceberg_pvalue(&t->pf[k], b, r, &v);
            if (k > 0) rc = ferry_buf_append(&t->keybuf, "/", 1);
            if (rc == FERRY_OK)
                rc = ferry__iceberg_pvalue_path(&t->pf[k], b->schema->fields[t->pf[k].col].type,
                                                &v, &t->keybuf);
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(&t->keybuf, "", 1);
        if (rc != FERRY_OK) return nomem(err);
        struct pwriter *pw = last;
        if (pw == NULL || strcmp(pw->key, t->keybuf.data) != 0) {
            pw = find_pw(t, t->keybuf.data);
            if (pw == NULL) {
                json_t *part = json_object();
                for (int k = 0; k < t->n_pf; k++) {
                    ferry__iceberg_pvalue(&t->pf[k], b, r, &v);
                    json_object_set_new(part, t->pf[k].name,
                                        ferry__iceberg_pvalue_json(
                                            &t->pf[k], b->schema->fields[t->pf[k].col].type, &v));
                }
                pw = add_pw(t, t->keybuf.data, part, err);
                if (pw == NULL) return FERRY_ENOMEM;
            }
        }
        last = pw;
        if (pw->wf == NULL) {
            rc = open_file(s, t, pw, err);
            if (rc != FERRY_OK) return rc;
        }
        if (pw->rw == NULL) {
            struct ferry_rw_limits lim = {.rows = 65536, .bytes = INT64_C(16) << 20};
            pw->rw = ferry__rw_new((struct ferry_schema *)pw->schema, t->resource, lim, pw_emit, pw);
            if (pw->rw == NULL) return nomem(err);
        }
        t->keybuf.len = 0;
        rc = copy_row(pw->rw, b, r);
        if (rc != FERRY_OK) {
            if (pw->err.code != FERRY_OK && err) *err = pw->err;
            else rc = ferry_error_set(err, rc, "iceberg", "iceberg sink: table %s: copying a row "
                                      "into partition %s failed", t->table, pw->key);
        }
    }
    for (int i = 0; i < t->n_pw && rc == FERRY_OK; i++) {
        struct pwriter *pw = t->pw[i];
        if (pw->rw == NULL) continue;
        rc = ferry_rw_flush(pw->rw, false, err);
        if (rc == FERRY_OK && t->files[pw->file].bytes >= s->file_bytes) rc = close_file(s, t, pw, err);
    }
    return rc;
}

/* Adds rows, bytes and batches to counts' "shard" entry, [rows, bytes, batches]. */
static int count_batch(json_t *counts, const char *shard, json_int_t rows, json_int_t bytes,
                       json_int_t batches)
{
    json_t *a = json_object_get(counts, shard);
    json_t *n = json_pack("[I,I,I]", json_integer_value(json_array_get(a, 0)) + rows,
                          json_integer_value(json_array_get(a, 1)) + bytes,
                          json_integer_value(json_array_get(a, 2)) + batches);
    return n != NULL && json_object_set_new(counts, shard, n) == 0 ? FERRY_OK : FERRY_ENOMEM;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                               "iceberg sink: apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    if (!ferry_receipt_start(receipt, b)) return FERRY_OK; /* the pipeline reports divergence */
    receipt->has_encoded_crc = false; /* see capabilities */
    t->apply_crc = 0;
    t->apply_bytes = 0;
    int rc = FERRY_OK;
    if (b->length > 0) {
        if (t->row_level) {
            rc = apply_row_level(s, t, b, err);
        } else if (t->n_pf > 0) {
            rc = apply_partitioned(s, t, b, err);
        } else {
            struct pwriter *pw = t->n_pw > 0 ? t->pw[0] : add_pw(t, "", json_object(), err);
            if (pw == NULL) return FERRY_ENOMEM;
            if (pw->wf == NULL) rc = open_file(s, t, pw, err);
            if (rc == FERRY_OK) rc = fold(t, pw, b, err);
            if (rc == FERRY_OK && t->files[pw->file].bytes >= s->file_bytes)
                rc = close_file(s, t, pw, err);
        }
        if (rc != FERRY_OK) return rc;
        snprintf(receipt->uri, sizeof receipt->uri, "%s%s", s->io ? "" : "file://", t->dir);
    }
    /* the position is committed with the rows it accounts for, and so are their counts */
    receipt->rows = b->length;
    receipt->bytes = t->apply_bytes;
    if (b->position != NULL) {
        char shard[16];
        snprintf(shard, sizeof shard, "%d", b->shard);
        if (json_object_set_new(t->positions, shard, json_string(b->position)) != 0 ||
            count_batch(t->counts, shard, receipt->rows, receipt->bytes, 1) != FERRY_OK)
            return nomem(err);
    }
    return FERRY_OK;
}

/* ---- commit ------------------------------------------------------------------------------ */

static json_t *map_schema(const char *name, int kid, int vid, const char *vtype, int fid)
{
    char rec[32];
    snprintf(rec, sizeof rec, "k%d_v%d", kid, vid);
    return json_pack("{s:s,s:[s,{s:s,s:s,s:{s:s,s:s,s:[{s:s,s:s,s:i},{s:s,s:s,s:i}]}}],s:n,s:i}",
                     "name", name, "type", "null", "type", "array", "logicalType", "map", "items",
                     "type", "record", "name", rec, "fields", "name", "key", "type", "int",
                     "field-id", kid, "name", "value", "type", vtype, "field-id", vid, "default",
                     "field-id", fid);
}

static json_t *manifest_entry_schema(const struct target *t)
{
    json_t *pfields = json_array();
    for (int i = 0; i < t->n_pf; i++)
        json_array_append_new(
            pfields, json_pack("{s:s,s:[s,s],s:n,s:i}", "name", t->pf[i].name, "type", "null",
                               ferry__iceberg_pfield_avro(&t->pf[i],
                                                          t->schema->fields[t->pf[i].col].type),
                               "default", "field-id", 1000 + i));
    json_t *df = json_pack("{s:s,s:s,s:[]}", "type", "record", "name", "r2", "fields");
    json_t *f = json_object_get(df, "fields");
    json_array_append_new(f, json_pack("{s:s,s:s,s:i}", "name", "content", "type", "int", "field-id", 134));
    json_array_append_new(f, json_pack("{s:s,s:s,s:i}", "name", "file_path", "type", "string", "field-id", 100));
    json_array_append_new(f, json_pack("{s:s,s:s,s:i}", "name", "file_format", "type", "string", "field-id", 101));
    json_array_append_new(f, json_pack("{s:s,s:{s:s,s:s,s:o},s:i}", "name", "partition", "type", "type",
                                       "record", "name", "r102", "fields", pfields, "field-id", 102));
    json_array_append_new(f, json_pack("{s:s,s:s,s:i}", "name", "record_count", "type", "long", "field-id", 103));
    json_array_append_new(f, json_pack("{s:s,s:s,s:i}", "name", "file_size_in_bytes", "type", "long", "field-id", 104));
    json_array_append_new(f, map_schema("column_sizes", 117, 118, "long", 108));
    json_array_append_new(f, map_schema("value_counts", 119, 120, "long", 109));
    json_array_append_new(f, map_schema("null_value_counts", 121, 122, "long", 110));
    json_array_append_new(f, map_schema("nan_value_counts", 138, 139, "long", 137));
    json_array_append_new(f, map_schema("lower_bounds", 126, 127, "bytes", 125));
    json_array_append_new(f, map_schema("upper_bounds", 129, 130, "bytes", 128));
    json_array_append_new(f, json_pack("{s:s,s:[s,s],s:n,s:i}", "name", "key_metadata", "type", "null",
                                       "bytes", "default", "field-id", 131));
    json_array_append_new(f, json_pack("{s:s,s:[s,{s:s,s:s,s:i}],s:n,s:i}", "name", "split_offsets",
                                       "type", "null", "type", "array", "items", "long",
                                       "element-id", 133, "default", "field-id", 132));
    json_array_append_new(f, json_pack("{s:s,s:[s,{s:s,s:s,s:i}],s:n,s:i}", "name", "equality_ids",
                                       "type", "null", "type", "array", "items", "int",
                                       "element-id", 136, "default", "field-id", 135));
    json_array_append_new(f, json_pack("{s:s,s:[s,s],s:n,s:i}", "name", "sort_order_id", "type",
                                       "null", "int", "default", "field-id", 140));
    return json_pack("{s:s,s:s,s:[{s:s,s:s,s:i},{s:s,s:[s,s],s:n,s:i},{s:s,s:[s,s],s:n,s:i},"
                     "{s:s,s:[s,s],s:n,s:i},{s:s,s:o,s:i}]}",
                     "type", "record", "name", "manifest_entry", "fields", "name", "status", "type",
                     "int", "field-id", 0, "name", "snapshot_id", "type", "null", "long", "default",
                     "field-id", 1, "name", "sequence_number", "type", "null", "long", "default",
                     "field-id", 3, "name", "file_sequence_number", "type", "null", "long",
                     "default", "field-id", 4, "name", "data_file", "type", df, "field-id", 2);
}

static json_t *manifest_file_schema(void)
{
    return json_pack(
        "{s:s,s:s,s:["
        "{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},"
        "{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},{s:s,s:s,s:i},"
        "{s:s,s:s,s:i},"
        "{s:s,s:[s,{s:s,s:{s:s,s:s,s:[{s:s,s:s,s:i},{s:s,s:[s,s],s:n,s:i},{s:s,s:[s,s],s:n,s:i},"
        "{s:s,s:[s,s],s:n,s:i}]},s:i}],s:n,s:i},"
        "{s:s,s:[s,s],s:n,s:i}]}",
        "type", "record", "name", "manifest_file", "fields", "name", "manifest_path", "type",
        "string", "field-id", 500, "name", "manifest_length", "type", "long", "field-id", 501,
        "name", "partition_spec_id", "type", "int", "field-id", 502, "name", "content", "type",
        "int", "field-id", 517, "name", "sequence_number", "type", "long", "field-id", 515, "name",
        "min_sequence_number", "type", "long", "field-id", 516, "name", "added_snapshot_id",
        "type", "long", "field-id", 503, "name", "added_files_count", "type", "int", "field-id",
        504, "name", "existing_files_count", "type", "int", "field-id", 505, "name",
        "deleted_files_count", "type", "int", "field-id", 506, "name", "added_rows_count", "type",
        "long", "field-id", 512, "name", "existing_rows_count", "type", "long", "field-id", 513,
        "name", "deleted_rows_count", "type", "long", "field-id", 514, "name", "partitions", "type",
        "null", "type", "array", "items", "type", "record", "name", "r508", "fields", "name",
        "contains_null", "type", "boolean", "field-id", 509, "name", "contains_nan", "type",
        "null", "boolean", "default", "field-id", 518, "name", "lower_bound", "type", "null",
        "bytes", "default", "field-id", 510, "name", "upper_bound", "type", "null", "bytes",
        "default", "field-id", 511, "element-id", 508, "default", "field-id", 507, "name",
        "key_metadata", "type", "null", "bytes", "default", "field-id", 519);
}

static json_t *kv_long(int32_t key, int64_t v)
{
    return json_pack("{s:i,s:I}", "key", (int)key, "value", (json_int_t)v);
}

static json_t *kv_bytes(int32_t key, const uint8_t *p, size_t n)
{
    char *h = ferry__iceberg_hex(p, n);
    json_t *o = h ? json_pack("{s:i,s:s}", "key", (int)key, "value", h) : NULL;
    ferry_free(h);
    return o;
}

static json_t *entry_json(const struct target *t, const struct dfile *f, int64_t snapshot_id)
{
    json_t *cs = json_array(), *vc = json_array(), *nc = json_array(), *nan = json_array(),
           *lo = json_array(), *hi = json_array();
    uint8_t buf[128];
    for (int i = 0; i < f->ncols; i++) {
        const struct ferry__iceberg_stats *st = &f->stats[i];
        int32_t id = f->ids[i];
        json_array_append_new(cs, kv_long(id, st->bytes));
        json_array_append_new(vc, kv_long(id, st->values));
        json_array_append_new(nc, kv_long(id, st->nulls));
        if (st->type == FERRY_TYPE_FLOAT32 || st->type == FERRY_TYPE_FLOAT64)
            json_array_append_new(nan, kv_long(id, st->nans));
        long n = ferry__iceberg_stats_bound(st, false, buf, sizeof buf);
        if (n >= 0) json_array_append_new(lo, kv_bytes(id, buf, (size_t)n));
        n = ferry__iceberg_stats_bound(st, true, buf, sizeof buf);
        if (n >= 0) json_array_append_new(hi, kv_bytes(id, buf, (size_t)n));
    }
    json_t *df = json_pack("{s:i,s:s,s:s,s:O,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "content",
                           f->content, "file_path", f->uri, "file_format", "PARQUET", "partition",
                           f->partition, "record_count", (json_int_t)f->rows, "file_size_in_bytes",
                           (json_int_t)f->bytes, "column_sizes", cs, "value_counts", vc, "null_value_counts", nc,
                           "nan_value_counts", nan, "lower_bounds", lo, "upper_bounds", hi);
    if (f->content == CONTENT_EQ_DELETES) {
        json_t *eq = json_array();
        for (int i = 0; i < f->ncols; i++) json_array_append_new(eq, json_integer(f->ids[i]));
        json_object_set_new(df, "equality_ids", eq);
    }
    (void)t;
    return json_pack("{s:i,s:I,s:n,s:n,s:o}", "status", 1, "snapshot_id", (json_int_t)snapshot_id,
                     "sequence_number", "file_sequence_number", "data_file", df);
}

/* Single-value bytes of a partition value (manifest list partition summaries). */
static long pvalue_bytes(json_t *v, const char *avro, uint8_t *out, size_t cap)
{
    if (!strcmp(avro, "string")) {
        size_t n = json_string_length(v);
        if (n > cap) return -1;
        memcpy(out, json_string_value(v), n);
        return (long)n;
    }
    if (!strcmp(avro, "boolean")) {
        out[0] = json_is_true(v) ? 1 : 0;
        return 1;
    }
    int64_t x = (int64_t)json_integer_value(v);
    int n = !strcmp(avro, "long") ? 8 : 4;
    for (int i = 0; i < n; i++) out[i] = (uint8_t)((uint64_t)x >> (8 * i));
    return n;
}

static int value_cmp(json_t *a, json_t *b)
{
    if (json_is_string(a)) {
        size_t an = json_string_length(a), bn = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), an < bn ? an : bn);
        return c ? c : (an < bn ? -1 : an > bn);
    }
    if (json_is_boolean(a)) return (int)json_is_true(a) - (int)json_is_true(b);
    json_int_t x = json_integer_value(a), y = json_integer_value(b);
    return x < y ? -1 : x > y;
}

static json_t *partition_summaries(const struct target *t, int kind)
{
    json_t *arr = json_array();
    for (int k = 0; k < t->n_pf; k++) {
        const char *avro = ferry__iceberg_pfield_avro(&t->pf[k], t->schema->fields[t->pf[k].col].type);
        bool has_null = false;
        json_t *lo = NULL, *hi = NULL;
        for (int i = 0; i < t->n_files; i++) {
            if (t->files[i].committed || (t->files[i].content != CONTENT_DATA) != kind) continue;
            json_t *v = json_object_get(t->files[i].partition, t->pf[k].name);
            if (v == NULL || json_is_null(v)) {
                has_null = true;
                continue;
            }
            if (lo == NULL || value_cmp(v, lo) < 0) lo = v;
            if (hi == NULL || value_cmp(v, hi) > 0) hi = v;
        }
        json_t *s = json_pack("{s:b,s:n,s:n,s:n}", "contains_null", has_null, "contains_nan",
                              "lower_bound", "upper_bound");
        uint8_t buf[256];
        long n;
        if (lo && (n = pvalue_bytes(lo, avro, buf, sizeof buf)) >= 0) {
            char *h = ferry__iceberg_hex(buf, (size_t)n);
            if (h) json_object_set_new(s, "lower_bound", json_string(h));
            ferry_free(h);
        }
        if (hi && (n = pvalue_bytes(hi, avro, buf, sizeof buf)) >= 0) {
            char *h = ferry__iceberg_hex(buf, (size_t)n);
            if (h) json_object_set_new(s, "upper_bound", json_string(h));
            ferry_free(h);
        }
        json_array_append_new(arr, s);
    }
    return arr;
}

static int write_avro_file(struct sink *s, const char *path, json_t *schema, json_t *meta,
                           json_t *records, int64_t *length, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__avro_write(&b, schema, meta, records, err);
    if (rc == FERRY_OK) rc = ferry__iceberg_io_write(s->io, path, b.data, b.len, err);
    if (rc == FERRY_OK && length) *length = (int64_t)b.len;
    ferry_buf_release(&b);
    return rc;
}

/* The records of the parent snapshot's manifest list, normalised to the v2 field names. */
static int parent_manifests(struct sink *s, json_t *snap, json_t **out, struct ferry_error *err)
{
    *out = json_array();
    if (snap == NULL) return FERRY_OK;
    const char *ml = json_string_value(json_object_get(snap, "manifest-list"));
    if (ml == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg sink: snapshot %" JSON_INTEGER_FORMAT
                               " has no manifest list (a v1 table with inline manifests)",
                               json_integer_value(json_object_get(snap, "snapshot-id")));
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    json_t *meta = NULL, *recs = NULL;
    int rc = ferry__iceberg_io_read(s->io, ml, &b, err);
    if (rc == FERRY_OK) rc = ferry__avro_read((const uint8_t *)b.data, b.len, &meta, &recs, err);
    if (rc != FERRY_OK) ferry_error_prefix(err, "%s", ml);
    ferry_buf_release(&b);
    size_t i;
    json_t *r;
    static const char *const renames[][2] = {{"added_data_files_count", "added_files_count"},
                                             {"existing_data_files_count", "existing_files_count"},
                                             {"deleted_data_files_count", "deleted_files_count"}};
    json_array_foreach(recs, i, r)
    {
        json_t *c = json_copy(r);
        for (size_t k = 0; k < 3; k++)
            if (!json_object_get(c, renames[k][1]) && json_object_get(c, renames[k][0]))
                json_object_set(c, renames[k][1], json_object_get(c, renames[k][0]));
        static const char *const zero[] = {"content", "sequence_number", "min_sequence_number",
                                           "added_files_count", "existing_files_count",
                                           "deleted_files_count", "added_rows_count",
                                           "existing_rows_count", "deleted_rows_count"};
        for (size_t k = 0; k < sizeof zero / sizeof zero[0]; k++)
            if (!json_is_integer(json_object_get(c, zero[k])))
                json_object_set_new(c, zero[k], json_integer(0));
        if (!json_is_integer(json_object_get(c, "added_snapshot_id")))
            json_object_set(c, "added_snapshot_id", json_object_get(snap, "snapshot-id"));
        json_array_append_new(*out, c);
    }
    json_decref(meta);
    json_decref(recs);
    return rc;
}

static int64_t summary_int(json_t *snap, const char *key)
{
    const char *v = json_string_value(json_object_get(json_object_get(snap, "summary"), key));
    return v ? strtoll(v, NULL, 10) : 0;
}

static void set_num(json_t *o, const char *k, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    json_object_set_new(o, k, json_string(buf));
}

/* The run's counts as it will be after this commit: per shard, the rows, bytes and batches of
 * every batch with a position the run committed into this table (what the runner's tracker
 * counts), cumulative like the checkpoint; the runner raises its counters to them after a
 * crash (connector.h, struct ferry_sink_checkpoint). NULL when a snapshot of this run without
 * them came first (an older ferry wrote it): the run is then not counted here, or on error. */
static char *merged_counts(const struct sink *s, const struct target *t, json_t *prev_snap)
{
    json_t *sum = json_object_get(prev_snap, "summary");
    json_t *counts = NULL;
    if (of_run(prev_snap, s->run_id) && json_object_get(sum, "ferry.checkpoint") != NULL) {
        const char *text = json_string_value(json_object_get(sum, "ferry.run-counts"));
        counts = text ? json_loads(text, 0, NULL) : NULL;
        if (!json_is_object(counts)) {
            json_decref(counts);
            return NULL;
        }
    } else {
        counts = json_object();
    }
    const char *k;
    json_t *v;
    int rc = counts ? FERRY_OK : FERRY_ENOMEM;
    json_object_foreach(t->counts, k, v)
    {
        if (rc != FERRY_OK) break;
        rc = count_batch(counts, k, json_integer_value(json_array_get(v, 0)),
                         json_integer_value(json_array_get(v, 1)),
                         json_integer_value(json_array_get(v, 2)));
    }
    char *text = rc == FERRY_OK ? json_dumps(counts, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(counts);
    return text;
}

/* The run's checkpoint as it will be after this commit, and whether it adds anything. */
static json_t *merged_checkpoint(const struct sink *s, const struct target *t, json_t *prev_snap,
                                 bool *adds)
{
    json_t *cp = NULL;
    json_t *sum = json_object_get(prev_snap, "summary");
    const char *text = json_string_value(json_object_get(sum, "ferry.checkpoint"));
    if (of_run(prev_snap, s->run_id) && text) cp = json_loads(text, 0, NULL);
    if (!json_is_object(cp)) {
        json_decref(cp);
        cp = json_object();
    }
    *adds = false;
    const char *k;
    json_t *v;
    json_object_foreach(t->positions, k, v)
    {
        json_t *old = json_object_get(cp, k);
        if (old == NULL || !json_equal(old, v)) {
            *adds = true;
            json_object_set(cp, k, v);
        }
    }
    return cp;
}

/* Appends carry every earlier manifest forward, so a table that takes many small commits
 * (CDC) would make every commit read and rewrite a longer manifest list. Once the data
 * manifests of the table's spec reach merge_count, they are rewritten as one manifest whose
 * entries are EXISTING, with the sequence numbers and snapshot ids they inherited made
 * explicit (the spec requires them for EXISTING entries). Delete manifests stay as they are.
 * *merged gets the new manifest's path (the caller removes it if the commit fails). */
static int merge_manifests(struct sink *s, struct target *t, json_t *meta, json_t **list,
                           const char *path, int64_t snapshot_id, json_int_t seq,
                           bool *merged, struct ferry_error *err)
{
    *merged = false;
    size_t i;
    json_t *m;
    int64_t n_data = 0;
    json_array_foreach(*list, i, m)
    {
        if (json_integer_value(json_object_get(m, "content")) == 0 &&
            json_integer_value(json_object_get(m, "partition_spec_id")) == t->spec_id)
            n_data++;
    }
    if (n_data < s->merge_count) return FERRY_OK;
    json_t *keep = json_array(), *entries = json_array();
    int64_t files = 0, rows = 0;
    json_int_t min_seq = seq;
    int rc = FERRY_OK;
    json_array_foreach(*list, i, m)
    {
        if (rc != FERRY_OK) break;
        if (json_integer_value(json_object_get(m, "content")) != 0 ||
            json_integer_value(json_object_get(m, "partition_spec_id")) != t->spec_id) {
            json_array_append(keep, m);
            continue;
        }
        const char *mp = json_string_value(json_object_get(m, "manifest_path"));
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        json_t *mm = NULL, *ents = NULL;
        rc = mp ? ferry__iceberg_io_read(s->io, mp, &b, err)
                : ferry_error_set(err, FERRY_ESINK, "iceberg", "iceberg sink: a manifest without a path");
        if (rc == FERRY_OK) rc = ferry__avro_read((const uint8_t *)b.data, b.len, &mm, &ents, err);
        ferry_buf_release(&b);
        json_t *mseq = json_object_get(m, "sequence_number");
        size_t k;
        json_t *e;
        json_array_foreach(ents, k, e)
        {
            if (rc != FERRY_OK || json_integer_value(json_object_get(e, "status")) == 2) continue;
            json_t *c = json_copy(e);
            json_object_set_new(c, "status", json_integer(0));
            if (!json_is_integer(json_object_get(c, "sequence_number")))
                json_object_set(c, "sequence_number", mseq);
            if (!json_is_integer(json_object_get(c, "file_sequence_number")))
                json_object_set(c, "file_sequence_number", mseq);
            if (!json_is_integer(json_object_get(c, "snapshot_id")))
                json_object_set(c, "snapshot_id", json_object_get(m, "added_snapshot_id"));
            json_int_t es = json_integer_value(json_object_get(c, "sequence_number"));
            if (es < min_seq) min_seq = es;
            files++;
            rows += (int64_t)json_integer_value(
                json_object_get(json_object_get(c, "data_file"), "record_count"));
            json_array_append_new(entries, c);
        }
        json_decref(mm);
        json_decref(ents);
    }
    int64_t len = 0;
    if (rc == FERRY_OK) {
        json_t *schema = manifest_entry_schema(t);
        char *sj = json_dumps(current_schema(meta), JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_t *pspec = spec_json(t);
        char *pj = json_dumps(pspec, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(pspec);
        char sid[24], spid[16];
        snprintf(sid, sizeof sid, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(meta, "current-schema-id")));
        snprintf(spid, sizeof spid, "%d", t->spec_id);
        json_t *mmeta = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "schema", sj ? sj : "{}", "schema-id",
                                  sid, "partition-spec", pj ? pj : "[]", "partition-spec-id", spid,
                                  "format-version", "2", "content", "data");
        free(sj);
        free(pj);
        rc = write_avro_file(s, path, schema, mmeta, entries, &len, err);
        json_decref(schema);
        json_decref(mmeta);
    }
    if (rc == FERRY_OK) {
        char *uri = ferry__iceberg_io_uri(s->io, path);
        /* partition summaries of a merged manifest are left out (optional): no pruning of
         * this one manifest, never a wrong one */
        json_array_append_new(
            keep, json_pack("{s:s,s:I,s:i,s:i,s:I,s:I,s:I,s:i,s:I,s:i,s:i,s:I,s:I,s:n,s:n}",
                            "manifest_path", uri ? uri : "", "manifest_length", (json_int_t)len,
                            "partition_spec_id", t->spec_id, "content", 0, "sequence_number", seq,
                            "min_sequence_number", min_seq, "added_snapshot_id",
                            (json_int_t)snapshot_id, "added_files_count", 0,
                            "existing_files_count", (json_int_t)files, "deleted_files_count", 0,
                            "added_rows_count", 0, "existing_rows_count", (json_int_t)rows,
                            "deleted_rows_count", (json_int_t)0, "partitions", "key_metadata"));
        ferry_free(uri);
        if (t->n_pf == 0) json_object_set_new(json_array_get(keep, json_array_size(keep) - 1),
                                              "partitions", json_array());
        json_decref(*list);
        *list = keep;
        keep = NULL;
        *merged = true;
        ferry_log(FERRY_LOG_INFO, "iceberg sink: table %s: merged %" PRId64 " manifests (%" PRId64
                  " files) into one", t->table, n_data, files);
    }
    json_decref(keep);
    json_decref(entries);
    return rc;
}

/* One table's commit: its new files by kind ([0] data, [1] deletes, each kind gets its own
 * manifest) and the names of what the commit writes. */
struct commit {
    int kind_n[2];
    int64_t kind_rows[2], kind_bytes[2], eq_rows, pos_rows;
    int n_new;
    char *mdir;
    /* [0] data, [1] deletes, [2] the merge of earlier data manifests (rewritten per try) */
    char *manifests[3];
    int64_t manifest_len[2];
    bool manifest_written;
    char *manifest_list;
    int64_t snapshot_id;
    int64_t t_commit;
    char *run_counts; /* this try's summary "ferry.run-counts" (merged_counts), or NULL */
};

/* Closes the session's open files, counts what is new and names the manifests. */
static int commit_prepare(struct sink *s, struct target *t, struct commit *c,
                          struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int i = 0; i < t->n_pw && rc == FERRY_OK; i++) rc = close_file(s, t, t->pw[i], err);
    for (int i = 0; i < t->n_eqws && rc == FERRY_OK; i++) rc = close_file(s, t, t->eqws[i], err);
    if (rc == FERRY_OK && t->n_pd > 0) rc = write_position_deletes(s, t, err);
    if (rc != FERRY_OK) return rc;
    for (int i = 0; i < t->n_files; i++) {
        const struct dfile *f = &t->files[i];
        if (f->committed) continue;
        int k = f->content != CONTENT_DATA;
        c->kind_n[k]++;
        c->kind_rows[k] += f->rows;
        c->kind_bytes[k] += f->bytes;
        if (f->content == CONTENT_EQ_DELETES) c->eq_rows += f->rows;
        if (f->content == CONTENT_POS_DELETES) c->pos_rows += f->rows;
    }
    c->n_new = c->kind_n[0] + c->kind_n[1];
    /* the names of the new files must be durable before a manifest names them */
    if (c->n_new > 0) {
        ferry__iceberg_io_sync_dir(s->io, t->data_dir);
        for (int i = 0; i < t->n_pw; i++) {
            if (!t->pw[i]->key[0]) continue;
            char *d = ferry_asprintf("%s/%s", t->data_dir, t->pw[i]->key);
            if (d) ferry__iceberg_io_sync_dir(s->io, d);
            ferry_free(d);
        }
    }
    c->mdir = ferry_asprintf("%s/metadata", t->dir);
    char uuid[40];
    uuid4(uuid);
    for (int k = 0; k < 3; k++)
        c->manifests[k] = c->mdir ? ferry_asprintf("%s/%s-m%d.avro", c->mdir, uuid, k) : NULL;
    if (c->manifests[0] == NULL || c->manifests[1] == NULL || c->manifests[2] == NULL)
        return nomem(err);
    c->snapshot_id = random_id();
    c->t_commit = ferry_now_mono_us();
    return FERRY_OK;
}

/* The manifests of the new data and delete files (once per commit, not per try). */
static int write_new_manifests(struct sink *s, struct target *t, json_t *meta, struct commit *c,
                               struct ferry_error *err)
{
    for (int k = 0; k < 2 && !c->manifest_written; k++) {
        if (c->kind_n[k] == 0) continue;
        json_t *schema = manifest_entry_schema(t);
        json_t *entries = json_array();
        for (int i = 0; i < t->n_files; i++)
            if (!t->files[i].committed && (t->files[i].content != CONTENT_DATA) == k)
                json_array_append_new(entries, entry_json(t, &t->files[i], c->snapshot_id));
        char *sj = json_dumps(current_schema(meta), JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_t *pspec = spec_json(t);
        char *pj = json_dumps(pspec, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(pspec);
        char sid[16], spid[16];
        snprintf(sid, sizeof sid, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(meta, "current-schema-id")));
        snprintf(spid, sizeof spid, "%d", t->spec_id);
        json_t *mm = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "schema", sj ? sj : "{}", "schema-id",
                               sid, "partition-spec", pj ? pj : "[]", "partition-spec-id", spid,
                               "format-version", "2", "content", k ? "deletes" : "data");
        free(sj);
        free(pj);
        int rc = write_avro_file(s, c->manifests[k], schema, mm, entries, &c->manifest_len[k], err);
        json_decref(schema);
        json_decref(entries);
        json_decref(mm);
        if (rc != FERRY_OK) return rc;
    }
    c->manifest_written = true;
    return FERRY_OK;
}

/* The snapshot's manifest list: the parent's manifests (none for a replace), merged when
 * they are many, and the new ones; written under a name of this try. */
static int write_manifest_list(struct sink *s, struct target *t, json_t *meta, json_t *parent,
                               json_int_t seq, bool replace, int tries, struct commit *c,
                               struct ferry_error *err)
{
    int rc = FERRY_OK;
    json_t *list = NULL;
    if (replace) list = json_array();
    else rc = parent_manifests(s, parent, &list, err);
    bool merged = false;
    if (rc == FERRY_OK && !replace)
        rc = merge_manifests(s, t, meta, &list, c->manifests[2], c->snapshot_id, seq, &merged,
                             err);
    for (int k = 0; k < 2 && rc == FERRY_OK; k++) {
        if (c->kind_n[k] == 0) continue;
        char *muri = ferry__iceberg_io_uri(s->io, c->manifests[k]);
        json_array_append_new(
            list, json_pack("{s:s,s:I,s:i,s:i,s:I,s:I,s:I,s:i,s:i,s:i,s:I,s:I,s:I,s:o,s:n}",
                            "manifest_path", muri ? muri : "", "manifest_length",
                            (json_int_t)c->manifest_len[k], "partition_spec_id", t->spec_id,
                            "content", k, "sequence_number", seq, "min_sequence_number", seq,
                            "added_snapshot_id", (json_int_t)c->snapshot_id, "added_files_count",
                            c->kind_n[k], "existing_files_count", 0, "deleted_files_count", 0,
                            "added_rows_count", (json_int_t)c->kind_rows[k], "existing_rows_count",
                            (json_int_t)0, "deleted_rows_count", (json_int_t)0, "partitions",
                            partition_summaries(t, k), "key_metadata"));
        ferry_free(muri);
    }
    ferry_free(c->manifest_list);
    char uuid2[40];
    uuid4(uuid2);
    c->manifest_list = ferry_asprintf("%s/snap-%" PRId64 "-%d-%s.avro", c->mdir, c->snapshot_id,
                                      tries + 1, uuid2);
    if (rc == FERRY_OK && c->manifest_list == NULL) rc = nomem(err);
    if (rc == FERRY_OK) {
        char sid[24], pid[24], sq[24];
        snprintf(sid, sizeof sid, "%" PRId64, c->snapshot_id);
        if (parent)
            snprintf(pid, sizeof pid, "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(parent, "snapshot-id")));
        else
            snprintf(pid, sizeof pid, "null");
        snprintf(sq, sizeof sq, "%" JSON_INTEGER_FORMAT, seq);
        json_t *lm = json_pack("{s:s,s:s,s:s,s:s}", "snapshot-id", sid, "parent-snapshot-id", pid,
                               "sequence-number", sq, "format-version", "2");
        json_t *schema = manifest_file_schema();
        rc = write_avro_file(s, c->manifest_list, schema, lm, list, NULL, err);
        json_decref(schema);
        json_decref(lm);
    }
    json_decref(list);
    return rc;
}

/* The snapshot's summary: what it adds (and, for a replace, removes), the totals, and ferry's
 * pipeline, resource, run and checkpoint `cp` (taken). */
static json_t *snapshot_summary(const struct sink *s, const struct target *t, json_t *parent,
                                bool replace, const struct commit *c, json_t *cp)
{
    json_t *sum = json_object();
    json_object_set_new(sum, "operation",
                        json_string(replace || c->kind_n[1] > 0 ? "overwrite" : "append"));
    set_num(sum, "added-data-files", c->kind_n[0]);
    set_num(sum, "added-records", c->kind_rows[0]);
    set_num(sum, "added-files-size", c->kind_bytes[0]);
    int64_t prev_rows = summary_int(parent, "total-records");
    int64_t prev_files = summary_int(parent, "total-data-files");
    int64_t prev_size = summary_int(parent, "total-files-size");
    if (replace && parent) {
        set_num(sum, "deleted-data-files", prev_files);
        set_num(sum, "deleted-records", prev_rows);
        set_num(sum, "removed-files-size", prev_size);
        prev_rows = prev_files = prev_size = 0;
    }
    set_num(sum, "total-records", prev_rows + c->kind_rows[0]);
    set_num(sum, "total-data-files", prev_files + c->kind_n[0]);
    set_num(sum, "total-files-size", prev_size + c->kind_bytes[0] + c->kind_bytes[1]);
    int64_t prev_del = replace ? 0 : summary_int(parent, "total-delete-files");
    int64_t prev_eq = replace ? 0 : summary_int(parent, "total-equality-deletes");
    int64_t prev_pos = replace ? 0 : summary_int(parent, "total-position-deletes");
    if (c->kind_n[1] > 0) {
        set_num(sum, "added-delete-files", c->kind_n[1]);
        set_num(sum, "added-equality-deletes", c->eq_rows);
        set_num(sum, "added-position-deletes", c->pos_rows);
    }
    set_num(sum, "total-delete-files", prev_del + c->kind_n[1]);
    set_num(sum, "total-position-deletes", prev_pos + c->pos_rows);
    set_num(sum, "total-equality-deletes", prev_eq + c->eq_rows);
    json_object_set_new(sum, "ferry.pipeline", json_string(s->pipeline));
    json_object_set_new(sum, "ferry.resource", json_string(t->resource));
    set_num(sum, "ferry.run-id", s->run_id);
    set_num(sum, "ferry.attempt", s->attempt);
    char *cpt = json_dumps(cp, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(cp);
    json_object_set_new(sum, "ferry.checkpoint", json_string(cpt ? cpt : "{}"));
    free(cpt);
    if (c->run_counts) json_object_set_new(sum, "ferry.run-counts", json_string(c->run_counts));
    return sum;
}

/* A copy of meta with snapshot `snap` (taken) appended and made current. */
static json_t *next_metadata(json_t *meta, json_t *snap, json_int_t seq, int64_t ts,
                             int64_t snapshot_id)
{
    json_t *next = json_deep_copy(meta);
    json_t *snaps = json_object_get(next, "snapshots");
    if (!json_is_array(snaps)) {
        json_object_set_new(next, "snapshots", json_array());
        snaps = json_object_get(next, "snapshots");
    }
    json_array_append_new(snaps, snap);
    json_object_set_new(next, "last-sequence-number", json_integer(seq));
    json_object_set_new(next, "last-updated-ms", json_integer(ts));
    json_object_set_new(next, "current-snapshot-id", json_integer(snapshot_id));
    json_object_set_new(next, "refs", json_pack("{s:{s:I,s:s}}", "main", "snapshot-id",
                                                (json_int_t)snapshot_id, "type", "branch"));
    json_t *slog = json_object_get(next, "snapshot-log");
    if (!json_is_array(slog)) {
        json_object_set_new(next, "snapshot-log", json_array());
        slog = json_object_get(next, "snapshot-log");
    }
    json_array_append_new(slog, json_pack("{s:I,s:I}", "snapshot-id", (json_int_t)snapshot_id,
                                          "timestamp-ms", (json_int_t)ts));
    return next;
}

/* The snapshot of this try, committed to the catalog as metadata version `version` + 1. */
static int commit_snapshot(struct sink *s, struct target *t, json_t *meta, const char *loc,
                           int version, json_t *parent, json_int_t seq, bool replace,
                           struct commit *c, json_t *cp, struct ferry_error *err)
{
    json_t *sum = snapshot_summary(s, t, parent, replace, c, cp);
    char *luri = ferry__iceberg_io_uri(s->io, c->manifest_list);
    int64_t ts = now_ms();
    json_t *snap = json_pack("{s:I,s:I,s:I,s:s,s:o,s:O}", "snapshot-id",
                             (json_int_t)c->snapshot_id, "sequence-number", seq, "timestamp-ms",
                             (json_int_t)ts, "manifest-list", luri ? luri : "", "summary", sum,
                             "schema-id", json_object_get(meta, "current-schema-id"));
    ferry_free(luri);
    if (parent) json_object_set(snap, "parent-snapshot-id", json_object_get(parent, "snapshot-id"));
    json_t *next = next_metadata(meta, snap, seq, ts, c->snapshot_id);
    json_t *dropped = json_array();
    int rc = dropped ? log_metadata(next, loc, meta, dropped, err) : nomem(err);
    if (rc == FERRY_OK) rc = ferry_failpoint_check("iceberg_before_catalog_commit", err);
    if (rc == FERRY_OK)
        rc = ferry__iceberg_catalog_commit(s->cat, t->table, loc, version + 1, next, NULL, err);
    if (rc == FERRY_OK) drop_old_metadata(t, next, dropped);
    json_decref(dropped);
    json_decref(next);
    return rc;
}

/* What a catalog commit's outcome means for the files and for another try (*done). */
static int after_catalog_commit(struct sink *s, struct target *t, struct commit *c, int rc,
                                bool replace, int tries, bool *done, struct ferry_error *err)
{
    *done = true;
    if (rc == FERRY_OK) {
        for (int i = 0; i < t->n_files; i++) t->files[i].committed = true;
        ferry_log(FERRY_LOG_INFO,
                  "iceberg sink: table %s: snapshot %" PRId64 " (%s, %d files) committed in "
                  "%.1f ms",
                  t->table, c->snapshot_id, replace || c->kind_n[1] ? "overwrite" : "append",
                  c->n_new, (double)(ferry_now_mono_us() - c->t_commit) / 1000.0);
        return rc;
    }
    if (rc != FERRY_ECONFLICT && ferry__iceberg_catalog_commit_unknown(s->cat)) {
        /* the snapshot may be in the table: keep every file it names; a later attempt
         * of the run removes them if no snapshot does */
        for (int i = 0; i < t->n_files; i++) t->files[i].committed = true;
        c->manifest_written = false;
        ferry_log(FERRY_LOG_WARN,
                  "iceberg sink: table %s: commit outcome unknown, its files are kept",
                  t->table);
        return rc;
    }
    ferry__iceberg_io_remove(s->io, c->manifest_list, NULL); /* never referenced */
    ferry__iceberg_io_remove(s->io, c->manifests[2], NULL);
    if (rc != FERRY_ECONFLICT) return rc;
    *done = false;
    ferry_log(FERRY_LOG_INFO, "iceberg sink: table %s: commit conflict, retrying (%d)", t->table,
              tries + 1);
    ferry_error_clear(err);
    return ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                           "iceberg sink: table %s: %d commits conflicted with other writers",
                           t->table, tries + 1);
}

/* One try: the table's current metadata, the manifests, the snapshot, the catalog commit.
 * *done: no other try (committed, nothing to commit, or a failure a try cannot mend). */
static int commit_try(struct sink *s, struct target *t, struct commit *c, int tries, bool *done,
                      struct ferry_error *err)
{
    *done = true;
    int version = 0;
    json_t *meta = NULL;
    char *loc = NULL;
    int rc = ferry__iceberg_catalog_load(s->cat, t->table, &meta, &loc, &version, err);
    if (rc == FERRY_OK && meta == NULL)
        rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                             "iceberg sink: table %s.%s disappeared during the run", s->ns,
                             t->table);
    json_t *prev = rc == FERRY_OK ? latest_ferry_snapshot(meta, s->pipeline) : NULL;
    bool adds = false;
    json_t *cp = rc == FERRY_OK ? merged_checkpoint(s, t, prev, &adds) : NULL;
    free(c->run_counts);
    c->run_counts = rc == FERRY_OK ? merged_counts(s, t, prev) : NULL;
    /* A run that commits more than once (pause, resume) replaces the table at its first
     * commit only; later commits add to the run's own new table. */
    bool replace = t->mode == FERRY_WRITE_REPLACE && !of_run(prev, s->run_id);
    /* No file, no snapshot: a checkpoint alone protects no row from being written twice
     * (a resumed run re-reads nothing it would duplicate), and a resumed run whose rows
     * the table already holds must not commit them again. A replace still commits
     * when this session read its resource (an empty source empties the table; a
     * resource a paused run never reached leaves its table alone). */
    if (rc == FERRY_OK && c->n_new == 0 && !(replace && json_object_size(t->positions) > 0)) {
        ferry_log(FERRY_LOG_INFO, "iceberg sink: table %s: nothing new to commit%s", t->table,
                  adds ? "" : " (its checkpoint is already in the table)");
    } else if (rc == FERRY_OK) {
        rc = write_new_manifests(s, t, meta, c, err);
        json_t *parent = current_snapshot(meta);
        json_int_t seq = json_integer_value(json_object_get(meta, "last-sequence-number")) + 1;
        if (rc == FERRY_OK)
            rc = write_manifest_list(s, t, meta, parent, seq, replace, tries, c, err);
        if (rc == FERRY_OK) {
            rc = commit_snapshot(s, t, meta, loc, version, parent, seq, replace, c, cp, err);
            cp = NULL; /* taken */
            rc = after_catalog_commit(s, t, c, rc, replace, tries, done, err);
        }
    }
    json_decref(cp);
    json_decref(meta);
    ferry_free(loc);
    return rc;
}

/* After the tries: unreferenced manifests removed; committed, the session's files now
 * belong to the table. */
static void commit_finish(struct sink *s, struct target *t, struct commit *c, bool ok)
{
    if (!ok && c->manifest_written) {
        ferry__iceberg_io_remove(s->io, c->manifests[0], NULL);
        ferry__iceberg_io_remove(s->io, c->manifests[1], NULL);
    }
    for (int k = 0; k < 3; k++) ferry_free(c->manifests[k]);
    ferry_free(c->manifest_list);
    ferry_free(c->mdir);
    free(c->run_counts);
    if (!ok) return;
    for (int i = 0; i < t->n_pw; i++) pw_free(s, t->pw[i]);
    ferry_free(t->pw);
    t->pw = NULL;
    t->n_pw = 0;
    for (int i = 0; i < t->n_eqws; i++) pw_free(s, t->eqws[i]);
    ferry_free(t->eqws);
    t->eqws = NULL;
    t->n_eqws = 0;
    keys_reset(t);
    for (int i = 0; i < t->n_files; i++) file_release(&t->files[i]);
    ferry_free(t->files);
    t->files = NULL;
    t->n_files = 0;
    json_object_clear(t->positions);
    json_object_clear(t->counts);
}

/* One snapshot for one table; retried on a conflict. */
static int commit_table(struct sink *s, struct target *t, struct ferry_error *err)
{
    struct commit c;
    memset(&c, 0, sizeof c);
    int rc = commit_prepare(s, t, &c, err);
    if (rc != FERRY_OK) {
        for (int k = 0; k < 3; k++) ferry_free(c.manifests[k]);
        ferry_free(c.mdir);
        return rc;
    }
    bool done = false;
    for (int tries = 0; tries <= s->retries && !done; tries++)
        rc = commit_try(s, t, &c, tries, &done, err);
    commit_finish(s, t, &c, rc == FERRY_OK);
    return rc;
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session)
        return ferry_error_set(err, FERRY_EINVAL, "iceberg", "iceberg sink: commit without a session");
    int rc = FERRY_OK;
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used) rc = commit_table(s, &s->t[i], err);
    if (rc != FERRY_OK) return rc; /* abort() removes the files no snapshot references */
    s->session = false;
    return FERRY_OK;
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    for (int i = 0; i < s->n_t; i++)
        if (s->t[i].used) discard(s, &s->t[i]);
    s->session = false;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

static int sink_checkpoints(void *ctx, const char *pipeline, struct ferry_sink_checkpoint **out,
                            int *n, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    *n = 0;
    struct stat st;
    if (s->cat == NULL && s->s3 == NULL && stat(s->warehouse, &st) != 0)
        return FERRY_OK; /* nothing written */
    if (s->kind == ICEBERG_CATALOG_SQL && !s->sql_is_pg && s->cat == NULL &&
        stat(s->sql_path, &st) != 0)
        return FERRY_OK;
    int rc = catalog(s, err);
    char **tables = NULL;
    if (rc == FERRY_OK) rc = ferry__iceberg_catalog_list(s->cat, &tables, err);
    struct ferry_sink_checkpoint *v = NULL;
    int k = 0;
    for (int i = 0; rc == FERRY_OK && tables && tables[i]; i++) {
        json_t *meta = NULL;
        char *loc = NULL;
        int version = 0;
        rc = ferry__iceberg_catalog_load(s->cat, tables[i], &meta, &loc, &version, err);
        ferry_free(loc);
        if (rc != FERRY_OK || meta == NULL) continue;
        json_t *snap = latest_ferry_snapshot(meta, pipeline ? pipeline : "");
        json_t *sum = json_object_get(snap, "summary");
        const char *res = json_string_value(json_object_get(sum, "ferry.resource"));
        const char *run = json_string_value(json_object_get(sum, "ferry.run-id"));
        json_t *cp = json_loads(json_string_value(json_object_get(sum, "ferry.checkpoint"))
                                    ? json_string_value(json_object_get(sum, "ferry.checkpoint"))
                                    : "{}",
                                0, NULL);
        const char *ctext = json_string_value(json_object_get(sum, "ferry.run-counts"));
        json_t *counts = ctext ? json_loads(ctext, 0, NULL) : NULL;
        const char *key;
        json_t *pos;
        json_object_foreach(cp, key, pos)
        {
            if (res == NULL || run == NULL || !json_is_string(pos)) continue;
            struct ferry_sink_checkpoint *nv = ferry_realloc(v, sizeof *nv * (size_t)(k + 1));
            if (nv == NULL) {
                rc = nomem(err);
                break;
            }
            v = nv;
            v[k] = (struct ferry_sink_checkpoint){0};
            json_t *a = json_object_get(counts, key); /* none: written by an older ferry */
            if (json_is_array(a) && json_array_size(a) == 3) {
                v[k].has_counts = true;
                v[k].rows = json_integer_value(json_array_get(a, 0));
                v[k].bytes = json_integer_value(json_array_get(a, 1));
                v[k].batches = json_integer_value(json_array_get(a, 2));
            }
            v[k].resource = ferry_strdup(res);
            v[k].shard = (int)strtol(key, NULL, 10);
            v[k].run_id = strtoll(run, NULL, 10);
            v[k].position = ferry_strdup(json_string_value(pos));
            k++;
            if (!v[k - 1].resource || !v[k - 1].position) {
                rc = nomem(err);
                break;
            }
        }
        json_decref(counts);
        json_decref(cp);
        json_decref(meta);
    }
    ferry_cfg_strv_free(tables);
    if (rc != FERRY_OK) {
        ferry_sink_checkpoints_free(v, k);
        return rc;
    }
    *out = v;
    *n = k;
    return FERRY_OK;
}

const struct ferry_sink_vtable ferry__iceberg_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "iceberg",
    .tuning_keys = sink_tuning_keys,
    .open = sink_open,
    .capabilities = sink_capabilities,
    .prepare = sink_prepare,
    .begin = sink_begin,
    .apply = sink_apply,
    .commit = sink_commit,
    .abort = sink_abort,
    .close = sink_close,
    .checkpoints = sink_checkpoints,
    .verify_open = ferry__iceberg_verify_open,
};
