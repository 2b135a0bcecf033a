/* connectors/iceberg/iceberg_source.c - the `iceberg` source: a table's snapshot read through
 * its manifest list and manifests (Avro, avro.c), its data files (Parquet) read by ranges, its
 * position and equality delete files applied (scan.c).
 *
 * The source section names the catalog exactly as the iceberg sink does (warehouse local or
 * s3://, namespace, catalog filesystem / sql / rest and their keys): the same code opens it.
 * A resource's `table` is a table of that namespace. Opening writes nothing (the filesystem
 * catalog on S3 is not probed for conditional writes, as the sink does). The schema is the table's (the current
 * schema, or the schema of the snapshot read), each Iceberg type mapped to one ferry type;
 * the identifier fields are the key unless the resource declares `key:`.
 *
 * mode full: the current snapshot, or `snapshot_id: N`, or `as_of: TIMESTAMP` (the snapshot
 * that was current then, from the snapshot log). One shard per data file; each shard reads
 * its file minus the rows the snapshot's delete files remove: position deletes of a sequence
 * number >= the file's, equality deletes of a greater one in the same partition (or
 * unpartitioned). A batch position is the number of rows the shard delivered ("n"); a
 * resumed shard decodes its file again and skips them.
 *
 * mode incremental: the route checkpoint is the snapshot id read up to, carried as "n" of
 * shard 0 (a marker shard without rows). Without one, the current snapshot is read in full.
 * Else the snapshots after it on the current snapshot's ancestry are replayed in order, in
 * one shard (their order matters): an append's added data files as inserts; an overwrite or
 * delete (needs a key) as deletes by key (the data files it removed, its equality delete
 * files, its position deletes of older files) then its added data files as inserts (minus
 * its own position deletes); a replace (compaction) changes no row and is skipped. Anything
 * else is refused naming the snapshot. A checkpointed snapshot that was expired is fine as
 * long as the ancestry still reaches its child; else the run stops saying so (the changes
 * between cannot be replayed: a new pipeline name or state starts again with a full read).
 *
 * Every data and delete file is looked up (stat / HEAD) when the plan is made: a missing one,
 * or one whose size differs from its manifest's, stops the run before a row is written,
 * naming the file, the manifest and the snapshot.
 *
 * Owns one catalog (and its storage). Calls catalog.c, io.c, avro.c, scan.c, jansson.
 * Registered in connectors/registry.c; one instance per reader thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "checkpoint/plan_cache.h"
#include "checkpoint/position.h"
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "formats/parquet_cursor.h"

static const char *const src_tuning_keys[] = {"parallelism", "max_attempts", NULL};

enum { CONTENT_DATA = 0, CONTENT_POS = 1, CONTENT_EQ = 2 };
enum { STATUS_EXISTING = 0, STATUS_ADDED = 1, STATUS_DELETED = 2 };

struct isrc {
    struct ferry__iceberg_catalog *cat;
    struct ferry__iceberg_io *io; /* the catalog's */
    char *ns;
    bool has_snapshot;
    int64_t snapshot_id; /* the section's snapshot_id */
    char *as_of;         /* the section's as_of */
    struct ferry_plan_cache plan; /* the frozen plan extract was last given, parsed */
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg source: out of memory");
}

static void src_close(void *ctx)
{
    struct isrc *s = ctx;
    if (s == NULL) return;
    ferry__iceberg_catalog_close(s->cat);
    ferry_free(s->ns);
    ferry_free(s->as_of);
    ferry_plan_cache_clear(&s->plan);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct isrc *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    const char *as_of = NULL;
    int rc = ferry_cfg_str(cfg, "as_of", false, &as_of, err);
    if (rc == FERRY_OK && ferry_cfg_get(cfg, "snapshot_id") != NULL) {
        s->has_snapshot = true;
        rc = ferry_cfg_int(cfg, "snapshot_id", true, INT64_MIN + 1, INT64_MAX, &s->snapshot_id, err);
    }
    if (rc == FERRY_OK && as_of && (s->as_of = ferry_strdup(as_of)) == NULL) rc = nomem(err);
    if (rc == FERRY_OK) rc = ferry__iceberg_catalog_for_reading(cfg, &s->cat, &s->ns, err);
    if (rc != FERRY_OK) {
        src_close(s);
        return rc;
    }
    s->io = ferry__iceberg_catalog_io(s->cat);
    *ctx = s;
    return FERRY_OK;
}

/* ---- metadata ------------------------------------------------------------------------------ */

static int load_table(struct isrc *s, const char *table, json_t **meta, struct ferry_error *err)
{
    char *loc = NULL;
    int version = 0;
    int rc = ferry__iceberg_catalog_load(s->cat, table, meta, &loc, &version, err);
    ferry_free(loc);
    if (rc != FERRY_OK) return ferry_error_prefix(err, "iceberg source: table %s.%s", s->ns, table);
    if (*meta == NULL)
        return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                               "iceberg source: table %s.%s does not exist in the catalog", s->ns,
                               table);
    return FERRY_OK;
}

static json_t *find_snapshot(json_t *meta, json_int_t id)
{
    size_t i;
    json_t *sn;
    json_array_foreach(json_object_get(meta, "snapshots"), i, sn)
    {
        if (json_integer_value(json_object_get(sn, "snapshot-id")) == id) return sn;
    }
    return NULL;
}

static json_t *current_snapshot(json_t *meta)
{
    json_t *id = json_object_get(meta, "current-snapshot-id");
    if (!json_is_integer(id) || json_integer_value(id) == -1) return NULL;
    return find_snapshot(meta, json_integer_value(id));
}

/* The resource's snapshot_id / as_of, else the section's. */
static int time_travel(struct isrc *s, const struct ferry_resource_spec *spec, bool *has_id,
                       int64_t *id, const char **as_of, struct ferry_error *err)
{
    *has_id = s->has_snapshot;
    *id = s->snapshot_id;
    *as_of = s->as_of;
    int rc = FERRY_OK;
    if (spec->node && ferry_cfg_get(spec->node, "snapshot_id") != NULL) {
        *has_id = true;
        rc = ferry_cfg_int(spec->node, "snapshot_id", true, INT64_MIN + 1, INT64_MAX, id, err);
    }
    if (rc == FERRY_OK && spec->node) rc = ferry_cfg_str(spec->node, "as_of", false, as_of, err);
    if (rc == FERRY_OK && *has_id && *as_of)
        rc = ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                             "resource %s: give snapshot_id or as_of, not both", spec->table);
    if (rc == FERRY_OK && (*has_id || *as_of) && spec->mode != FERRY_READ_FULL)
        rc = ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                             "resource %s: snapshot_id and as_of (time travel) need mode: full",
                             spec->table);
    return rc;
}

/* The snapshot to read in full: the chosen one, or the current one (*snap NULL: the table has
 * no snapshot yet). */
static int pick_snapshot(struct isrc *s, const struct ferry_resource_spec *spec, json_t *meta,
                         json_t **snap, struct ferry_error *err)
{
    bool has_id;
    int64_t id;
    const char *as_of;
    int rc = time_travel(s, spec, &has_id, &id, &as_of, err);
    if (rc != FERRY_OK) return rc;
    *snap = NULL;
    if (has_id) {
        *snap = find_snapshot(meta, id);
        if (*snap == NULL)
            return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                                   "iceberg source: table %s.%s has no snapshot %" PRId64
                                   " (never made, or expired)",
                                   s->ns, spec->table, id);
        return FERRY_OK;
    }
    if (as_of == NULL) {
        *snap = current_snapshot(meta);
        return FERRY_OK;
    }
    int64_t us;
    if (ferry_timestamp_from_text(as_of, strlen(as_of), &us) != FERRY_OK)
        return ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                               "resource %s: as_of \"%s\" is not a timestamp (2024-01-31T13:45:00Z)",
                               spec->table, as_of);
    int64_t best = -1;
    json_int_t best_id = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(meta, "snapshot-log"), i, e)
    {
        int64_t t = json_integer_value(json_object_get(e, "timestamp-ms"));
        if (t <= us / 1000 && t >= best) {
            best = t;
            best_id = json_integer_value(json_object_get(e, "snapshot-id"));
        }
    }
    if (best >= 0) *snap = find_snapshot(meta, best_id);
    if (*snap == NULL)
        return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                               "iceberg source: table %s.%s had no snapshot at %s (or it was "
                               "expired)",
                               s->ns, spec->table, as_of);
    return FERRY_OK;
}

/* The table's current schema when reading its current snapshot (a column renamed since the
 * last commit reads under its new name), else the snapshot's own (schema-id; time travel). */
static json_t *table_schema(json_t *meta, json_t *snap)
{
    bool current = snap && json_equal(json_object_get(snap, "snapshot-id"),
                                      json_object_get(meta, "current-snapshot-id"));
    json_t *id = snap && !current ? json_object_get(snap, "schema-id") : NULL;
    if (!json_is_integer(id)) id = json_object_get(meta, "current-schema-id");
    size_t i;
    json_t *sc;
    json_array_foreach(json_object_get(meta, "schemas"), i, sc)
    {
        if (json_equal(json_object_get(sc, "schema-id"), id)) return sc;
    }
    return json_object_get(meta, "schema"); /* format v1 */
}

/* An Iceberg primitive type as a ferry field type (decimal's precision and scale too). */
static bool map_type(const char *t, struct ferry_field *f)
{
    static const struct {
        const char *name;
        enum ferry_type type;
    } prim[] = {{"boolean", FERRY_TYPE_BOOL},        {"int", FERRY_TYPE_INT32},
                {"long", FERRY_TYPE_INT64},          {"float", FERRY_TYPE_FLOAT32},
                {"double", FERRY_TYPE_FLOAT64},      {"date", FERRY_TYPE_DATE32},
                {"time", FERRY_TYPE_TIME64_US},      {"timestamp", FERRY_TYPE_TIMESTAMP_US},
                {"timestamptz", FERRY_TYPE_TIMESTAMPTZ_US},
                {"timestamp_ns", FERRY_TYPE_TIMESTAMP_US},
                {"timestamptz_ns", FERRY_TYPE_TIMESTAMPTZ_US},
                {"string", FERRY_TYPE_UTF8},         {"uuid", FERRY_TYPE_UUID},
                {"binary", FERRY_TYPE_BINARY}};
    for (size_t i = 0; i < sizeof prim / sizeof prim[0]; i++)
        if (strcmp(t, prim[i].name) == 0) {
            f->type = prim[i].type;
            return true;
        }
    int p, sc, n;
    if (sscanf(t, "decimal(%d,%d)%n", &p, &sc, &n) == 2 && t[n] == '\0' && p >= 1 && p <= 38 &&
        sc >= 0 && sc <= p) {
        f->type = FERRY_TYPE_DECIMAL128;
        f->precision = p;
        f->scale = sc;
        return true;
    }
    if (sscanf(t, "fixed[%d]%n", &p, &n) == 1 && t[n] == '\0') {
        f->type = FERRY_TYPE_BINARY;
        return true;
    }
    return false;
}

/* The field of schema json sc with this id (any schema of the table), or NULL. */
static json_t *field_by_id(json_t *meta, json_t *sc, json_int_t id)
{
    size_t i, j;
    json_t *f, *other;
    json_array_foreach(json_object_get(sc, "fields"), i, f)
    {
        if (json_integer_value(json_object_get(f, "id")) == id) return f;
    }
    json_array_foreach(json_object_get(meta, "schemas"), j, other)
    {
        json_array_foreach(json_object_get(other, "fields"), i, f)
        {
            if (json_integer_value(json_object_get(f, "id")) == id) return f;
        }
    }
    return NULL;
}

static int add_column(struct ferry_schema *out, json_t *f, bool nullable,
                      const struct ferry_resource_spec *spec, struct ferry_error *err)
{
    const char *name = json_string_value(json_object_get(f, "name"));
    json_t *type = json_object_get(f, "type");
    struct ferry_field m = {0};
    if (name == NULL || !json_is_string(type) || !map_type(json_string_value(type), &m))
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg source: table %s: column \"%s\" is of type %s, which has "
                               "no ferry type (nested types are not read yet)",
                               spec->table, name ? name : "?",
                               json_is_string(type) ? json_string_value(type) : "struct/list/map");
    int rc = ferry_schema_add_field(out, name, m.type, nullable, err);
    if (rc == FERRY_OK) {
        out->fields[out->n_fields - 1].precision = m.precision;
        out->fields[out->n_fields - 1].scale = m.scale;
    }
    return rc;
}

/* The key: the resource's `key:`, else the identifier fields when every one is selected. */
static int mark_key(struct ferry_schema *out, json_t *meta, json_t *sc,
                    const struct ferry_resource_spec *spec, struct ferry_error *err)
{
    if (spec->key) {
        int missing = ferry_schema_mark_key(out, spec->key, spec->n_key);
        if (missing >= 0)
            return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                                   "iceberg source: resource %s: key column \"%s\" is not among "
                                   "the columns",
                                   spec->table, spec->key[missing]);
        return FERRY_OK;
    }
    json_t *ids = json_object_get(sc, "identifier-field-ids");
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id)
    {
        json_t *f = field_by_id(meta, sc, json_integer_value(id));
        if (f == NULL || ferry_schema_find(out, json_string_value(json_object_get(f, "name"))) < 0)
            return FERRY_OK; /* not selected: no key */
    }
    json_array_foreach(ids, i, id)
    {
        json_t *f = field_by_id(meta, sc, json_integer_value(id));
        int k = ferry_schema_find(out, json_string_value(json_object_get(f, "name")));
        out->fields[k].key_pos = (int)i + 1;
        out->fields[k].nullable = false;
    }
    return FERRY_OK;
}

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct isrc *s = ctx;
    json_t *meta = NULL, *snap = NULL;
    int rc = load_table(s, spec->table, &meta, err);
    if (rc == FERRY_OK) rc = pick_snapshot(s, spec, meta, &snap, err);
    json_t *sc = rc == FERRY_OK ? table_schema(meta, snap) : NULL;
    if (rc == FERRY_OK && sc == NULL)
        rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                             "iceberg source: table %s.%s: its metadata has no schema", s->ns,
                             spec->table);
    struct ferry_schema *o = rc == FERRY_OK ? ferry_schema_new() : NULL;
    if (rc == FERRY_OK && o == NULL) rc = nomem(err);
    json_t *fields = json_object_get(sc, "fields");
    /* incremental reads carry deletes, whose columns outside the key are null */
    bool incr = spec->mode != FERRY_READ_FULL;
    size_t n = spec->columns ? (size_t)spec->n_columns : json_array_size(fields);
    for (size_t i = 0; rc == FERRY_OK && i < n; i++) {
        json_t *f = NULL;
        size_t j;
        json_t *g;
        if (spec->columns) {
            json_array_foreach(fields, j, g)
            {
                const char *gn = json_string_value(json_object_get(g, "name"));
                if (gn && strcmp(gn, spec->columns[i]) == 0) f = g;
            }
            if (f == NULL) {
                rc = ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                                     "iceberg source: table %s has no column \"%s\"", spec->table,
                                     spec->columns[i]);
                break;
            }
        } else {
            f = json_array_get(fields, i);
        }
        rc = add_column(o, f, incr || !json_is_true(json_object_get(f, "required")), spec, err);
    }
    if (rc == FERRY_OK) rc = mark_key(o, meta, sc, spec, err);
    if (rc == FERRY_OK) rc = ferry_schema_finish(o, err);
    json_decref(meta);
    if (rc != FERRY_OK) {
        ferry_schema_unref(o);
        return rc;
    }
    *out = o;
    return FERRY_OK;
}

/* ---- manifests ------------------------------------------------------------------------------ */

static int read_avro(struct isrc *s, const char *path, json_t **records, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    json_t *meta = NULL;
    int rc = ferry__iceberg_io_read(s->io, path, &b, err);
    if (rc == FERRY_OK) rc = ferry__avro_read((const uint8_t *)b.data, b.len, &meta, records, err);
    json_decref(meta);
    ferry_buf_release(&b);
    return rc;
}

static json_int_t jint(json_t *o, const char *k, json_int_t dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* The entries of one manifest, each {"status","snap","seq","spec","df","manifest"} appended
 * to out; only_snap >= 0: only those that snapshot added or removed. */
static int manifest_entries(struct isrc *s, json_t *mf, json_int_t only_snap, json_t *out,
                            struct ferry_error *err)
{
    const char *path = json_string_value(json_object_get(mf, "manifest_path"));
    json_t *recs = NULL;
    int rc = path ? read_avro(s, path, &recs, err)
                  : ferry_error_set(err, FERRY_EINVAL, "iceberg", "a manifest without a path");
    size_t i;
    json_t *e;
    json_array_foreach(recs, i, e)
    {
        if (rc != FERRY_OK) break;
        json_int_t status = jint(e, "status", -1);
        json_int_t snap = jint(e, "snapshot_id", jint(mf, "added_snapshot_id", -1));
        json_int_t seq = jint(e, "sequence_number", -1);
        /* an entry without one inherits its manifest's (ADDED), as the spec says */
        if (seq < 0) seq = jint(mf, "sequence_number", 0);
        if (only_snap >= 0 && (snap != only_snap || status == STATUS_EXISTING)) continue;
        if (only_snap < 0 && status == STATUS_DELETED) continue;
        json_t *x = json_pack("{s:I,s:I,s:I,s:I,s:O,s:s}", "status", status, "snap", snap, "seq",
                              seq, "spec", jint(mf, "partition_spec_id", 0), "df",
                              json_object_get(e, "data_file"), "manifest", path);
        if (x == NULL || json_array_append_new(out, x) != 0) rc = nomem(err);
    }
    json_decref(recs);
    return rc;
}

/* Every entry of snapshot snap (only_added: those it added or removed, from the manifests it
 * wrote). Errors name the table, the snapshot and the file. */
static int snapshot_entries(struct isrc *s, const char *table, json_t *snap, bool only_added,
                            json_t *out, struct ferry_error *err)
{
    json_int_t id = jint(snap, "snapshot-id", -1);
    const char *list = json_string_value(json_object_get(snap, "manifest-list"));
    json_t *mfs = NULL;
    int rc = list ? read_avro(s, list, &mfs, err)
                  : ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                    "no manifest-list (format v1 inline manifests are not read)");
    size_t i;
    json_t *mf;
    json_array_foreach(mfs, i, mf)
    {
        if (rc != FERRY_OK) break;
        if (only_added && jint(mf, "added_snapshot_id", -1) != id) continue;
        rc = manifest_entries(s, mf, only_added ? id : -1, out, err);
    }
    json_decref(mfs);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "iceberg source: table %s.%s snapshot %" JSON_INTEGER_FORMAT,
                                  s->ns, table, id);
    return FERRY_OK;
}

static const char *df_path(json_t *x)
{
    return json_string_value(json_object_get(json_object_get(x, "df"), "file_path"));
}

static json_int_t df_int(json_t *x, const char *k)
{
    return jint(json_object_get(x, "df"), k, -1);
}

/* The file of entry x exists with the size its manifest gives; else an error naming both. */
static int check_file(struct isrc *s, const char *table, json_int_t snap, json_t *x,
                      struct ferry_error *err)
{
    const char *path = df_path(x);
    const char *fmt = json_string_value(json_object_get(json_object_get(x, "df"), "file_format"));
    const char *man = json_string_value(json_object_get(x, "manifest"));
    if (path == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               ": manifest %s has an entry without file_path",
                               table, snap, man);
    if (fmt == NULL || strcasecmp(fmt, "parquet") != 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               ": %s is a %s file (only Parquet data and delete files are read)",
                               table, snap, path, fmt ? fmt : "?");
    bool exists = false;
    int64_t size = 0;
    int rc = ferry__iceberg_io_stat(s->io, path, &exists, &size, NULL, err);
    if (rc != FERRY_OK) return rc;
    if (!exists)
        return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               ": %s is missing (listed in manifest %s)",
                               table, snap, path, man);
    if (size != df_int(x, "file_size_in_bytes"))
        return ferry_error_set(err, FERRY_ESOURCE, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               ": %s is %" PRId64 " bytes, manifest %s says %" JSON_INTEGER_FORMAT
                               " (truncated or replaced?)",
                               table, snap, path, size, man, df_int(x, "file_size_in_bytes"));
    return FERRY_OK;
}

static json_t *file_ref(json_t *x)
{
    return json_pack("{s:s,s:I}", "file", df_path(x), "size", df_int(x, "file_size_in_bytes"));
}

/* The equality columns of delete entry x as [{"name","type","precision","scale"}]. */
static int eq_columns(json_t *meta, json_t *sc, json_t *x, json_t **out, struct ferry_error *err)
{
    json_t *ids = json_object_get(json_object_get(x, "df"), "equality_ids");
    json_t *cols = json_array();
    int rc = cols ? FERRY_OK : nomem(err);
    size_t i;
    json_t *id;
    if (json_array_size(ids) == 0)
        rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                             "iceberg source: equality delete file %s has no equality_ids",
                             df_path(x));
    json_array_foreach(ids, i, id)
    {
        if (rc != FERRY_OK) break;
        json_t *f = field_by_id(meta, sc, json_integer_value(id));
        struct ferry_field m = {0};
        json_t *t = json_object_get(f, "type");
        if (f == NULL || !json_is_string(t) || !map_type(json_string_value(t), &m)) {
            rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                 "iceberg source: equality delete file %s: field id %" JSON_INTEGER_FORMAT
                                 " is not a column of a type ferry reads",
                                 df_path(x), json_integer_value(id));
            break;
        }
        json_t *c = json_pack("{s:O,s:s,s:i,s:i,s:I}", "name", json_object_get(f, "name"), "type",
                              ferry_type_name(m.type), "precision", m.precision, "scale", m.scale,
                              "id", json_integer_value(id));
        if (c == NULL || json_array_append_new(cols, c) != 0) rc = nomem(err);
    }
    if (rc != FERRY_OK) {
        json_decref(cols);
        return rc;
    }
    *out = cols;
    return FERRY_OK;
}

/* ---- full plans ---------------------------------------------------------------------------- */

static bool spec_unpartitioned(json_t *meta, json_int_t spec_id)
{
    size_t i;
    json_t *sp;
    json_array_foreach(json_object_get(meta, "partition-specs"), i, sp)
    {
        if (jint(sp, "spec-id", -1) == spec_id) return json_array_size(json_object_get(sp, "fields")) == 0;
    }
    return spec_id == 0 && json_object_get(meta, "partition-specs") == NULL;
}

/* Whether equality delete e applies to data file d (sequence and partition). */
static bool eq_applies(json_t *meta, json_t *e, json_t *d)
{
    if (jint(e, "seq", 0) <= jint(d, "seq", 0)) return false;
    if (spec_unpartitioned(meta, jint(e, "spec", 0))) return true;
    return jint(e, "spec", 0) == jint(d, "spec", 0) &&
           json_equal(json_object_get(json_object_get(e, "df"), "partition"),
                      json_object_get(json_object_get(d, "df"), "partition"));
}

struct scan {
    struct isrc *s;
    const char *table;
    json_t *meta, *sc, *snap;
    json_int_t snap_id;
    bool deletes_ok; /* the sink applies deletes (write: merge) */
    json_t *posdel_targets; /* full plans: position delete file -> {data file path: true} */
    const struct ferry_read_context *rx; /* its filters: data files skipped by bounds */
    json_t *ids;                         /* column name -> field id (current schema) */
    int skipped;                         /* data files the filters ruled out */
};

/* The bound of field `id` in a data file's lower_bounds / upper_bounds (Iceberg's
 * single-value serialization: int and date 4 bytes, long and timestamps 8, little-endian). */
static bool file_bound(json_t *bounds, json_int_t id, int64_t *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(bounds, i, e)
    {
        if (jint(e, "key", -1) != id) continue;
        const char *h = json_string_value(json_object_get(e, "value"));
        uint8_t b[8];
        long n = h ? ferry__iceberg_unhex(h, b, sizeof b) : -1;
        if (n == 4) {
            *v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                           (uint32_t)b[3] << 24);
            return true;
        }
        if (n != 8) return false;
        uint64_t u = 0;
        for (int k = 7; k >= 0; k--) u = u << 8 | b[k];
        *v = (int64_t)u;
        return true;
    }
    return false;
}

/* Whether the manifest bounds of data file entry x prove that no row passes the read's
 * `filter` transforms (a column without bounds proves nothing). */
static bool bounds_exclude(const struct scan *sc, json_t *x)
{
    const struct ferry_read_context *rx = sc->rx;
    json_t *df = json_object_get(x, "df");
    for (int i = 0; rx && i < rx->n_filters; i++) {
        json_int_t id = jint(sc->ids, rx->filters[i].column, -1);
        if (id < 0) continue;
        int64_t mn = 0, mx = 0;
        bool has_min = file_bound(json_object_get(df, "lower_bounds"), id, &mn);
        bool has_max = file_bound(json_object_get(df, "upper_bounds"), id, &mx);
        if (ferry__stats_excludes(&rx->filters[i], has_min, mn, has_max, mx)) return true;
    }
    return false;
}

/* The unit reading data file d of a full read: its deletes attached. */
static int full_unit(struct scan *sc, json_t *d, json_t *entries, json_t **out,
                     struct ferry_error *err)
{
    json_t *pos = json_array(), *eq = json_array(), *eqc = NULL;
    json_t *u = json_pack("{s:s,s:I,s:s,s:o,s:o}", "file", df_path(d), "size",
                          df_int(d, "file_size_in_bytes"), "op", "insert", "pos", pos, "eq", eq);
    int rc = u && pos && eq ? FERRY_OK : nomem(err);
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK) break;
        json_int_t content = df_int(x, "content");
        if (content == CONTENT_POS && jint(x, "seq", 0) >= jint(d, "seq", 0)) {
            /* only the position delete files that name this data file (read at plan time) */
            json_t *names = json_object_get(sc->posdel_targets, df_path(x));
            if (json_object_get(names, df_path(d)) != NULL &&
                json_array_append_new(pos, file_ref(x)) != 0)
                rc = nomem(err);
        } else if (content == CONTENT_EQ && eq_applies(sc->meta, x, d)) {
            json_t *cols = NULL;
            rc = eq_columns(sc->meta, sc->sc, x, &cols, err);
            if (rc == FERRY_OK && eqc != NULL && !json_equal(eqc, cols))
                rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                     "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                                     ": equality delete files of different columns apply to %s "
                                     "(%s among them): not read yet",
                                     sc->table, sc->snap_id, df_path(d), df_path(x));
            if (rc == FERRY_OK && eqc == NULL) {
                eqc = cols;
                cols = NULL;
            }
            json_decref(cols);
            if (rc == FERRY_OK && json_array_append_new(eq, file_ref(x)) != 0) rc = nomem(err);
        }
    }
    if (rc == FERRY_OK && eqc) json_object_set_new(u, "eq_cols", eqc);
    else json_decref(eqc);
    if (rc != FERRY_OK) {
        json_decref(u);
        return rc;
    }
    *out = u;
    return FERRY_OK;
}

/* Every entry's file checked, and a content other than data / position / equality refused. */
static int check_entries(struct scan *sc, json_t *entries, struct ferry_error *err)
{
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        json_int_t content = df_int(x, "content");
        if (content < 0) content = 0; /* format v1 */
        if (content > CONTENT_EQ)
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                   "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                                   ": %s is a delete file of kind %" JSON_INTEGER_FORMAT
                                   " (not position or equality deletes): not read",
                                   sc->table, sc->snap_id, df_path(x), content);
        int rc = check_file(sc->s, sc->table, sc->snap_id, x, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

/* One shard per data file of the snapshot, appended to shards; *rows their record counts. */
static int full_shards(struct scan *sc, json_t *shards, json_int_t *rows, struct ferry_error *err)
{
    json_t *entries = json_array();
    if (entries == NULL) return nomem(err);
    int rc = snapshot_entries(sc->s, sc->table, sc->snap, false, entries, err);
    if (rc == FERRY_OK) rc = check_entries(sc, entries, err);
    /* Each position delete file is read once here, for the data files it names: a shard then
     * reads only those that concern its file (a merge table gains one per commit). */
    json_t *targets = json_object();
    if (rc == FERRY_OK && targets == NULL) rc = nomem(err);
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK || df_int(x, "content") != CONTENT_POS) continue;
        json_t *names = json_object();
        rc = names ? ferry__iceberg_posdel_targets(sc->s->io, df_path(x),
                                                    df_int(x, "file_size_in_bytes"), names, err)
                   : nomem(err);
        if (rc == FERRY_OK && json_object_set(targets, df_path(x), names) != 0) rc = nomem(err);
        json_decref(names);
    }
    sc->posdel_targets = targets;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK) break;
        if (df_int(x, "content") > CONTENT_DATA) continue;
        if (bounds_exclude(sc, x)) { /* a full read: its rows would all be filtered out */
            sc->skipped++;
            continue;
        }
        json_t *u = NULL;
        rc = full_unit(sc, x, entries, &u, err);
        json_t *sh = rc == FERRY_OK ? json_pack("{s:[o]}", "units", u) : NULL;
        if (rc == FERRY_OK && (sh == NULL || json_array_append_new(shards, sh) != 0)) rc = nomem(err);
        *rows += df_int(x, "record_count");
    }
    sc->posdel_targets = NULL;
    json_decref(targets);
    json_decref(entries);
    return rc;
}

/* ---- incremental plans ------------------------------------------------------------------------ */

/* The snapshots after `from` on the ancestry of `to`, oldest first. */
static int snapshots_since(struct scan *sc, json_int_t from, json_t *to, json_t *out,
                           struct ferry_error *err)
{
    json_t *cur = to;
    json_int_t child_parent = -1;
    while (cur != NULL && jint(cur, "snapshot-id", -1) != from) {
        if (json_array_insert(out, 0, cur) != 0) return nomem(err);
        child_parent = jint(cur, "parent-snapshot-id", -1);
        cur = child_parent >= 0 ? find_snapshot(sc->meta, child_parent) : NULL;
    }
    if (cur == NULL && child_parent != from)
        return ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                               "iceberg source: table %s: the checkpointed snapshot %" JSON_INTEGER_FORMAT
                               " is not an ancestor of the current snapshot %" JSON_INTEGER_FORMAT
                               " any more (the snapshots between were expired, or the table was "
                               "rolled back): its changes cannot be replayed; read the table "
                               "again under a new pipeline name (or state), which starts with "
                               "a full read",
                               sc->table, from, jint(to, "snapshot-id", -1));
    return FERRY_OK;
}

static int append_unit(json_t *units, json_t *u, struct ferry_error *err)
{
    if (u == NULL || json_array_append_new(units, u) != 0) return nomem(err);
    return FERRY_OK;
}

/* Whether the equality columns cols are exactly the key columns of schema. */
static bool eq_is_key(json_t *cols, const struct ferry_schema *schema)
{
    if ((int)json_array_size(cols) != schema->n_key) return false;
    size_t i;
    json_t *c;
    json_array_foreach(cols, i, c)
    {
        int k = ferry_schema_find(schema, json_string_value(json_object_get(c, "name")));
        if (k < 0 || schema->fields[k].key_pos == 0) return false;
    }
    return true;
}

/* The delete units of an overwrite/delete snapshot: removed data files, equality delete
 * files, position deletes of files it did not add (a unit per file they name). */
static int change_deletes(struct scan *sc, const struct ferry_schema *schema, json_t *entries,
                          json_t *added, json_t *units, struct ferry_error *err)
{
    int rc = FERRY_OK;
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK) break;
        json_int_t content = df_int(x, "content"), status = jint(x, "status", -1);
        if (status == STATUS_DELETED && content == CONTENT_DATA) {
            continue; /* removed_files() has it */
        } else if (status == STATUS_ADDED && content == CONTENT_EQ) {
            json_t *cols = NULL;
            rc = eq_columns(sc->meta, sc->sc, x, &cols, err);
            if (rc == FERRY_OK && !eq_is_key(cols, schema))
                rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                     "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                                     ": equality delete file %s deletes by other columns than the "
                                     "key: an incremental read cannot replay it",
                                     sc->table, sc->snap_id, df_path(x));
            json_decref(cols);
            if (rc == FERRY_OK)
                rc = append_unit(units, json_pack("{s:s,s:I,s:s,s:b}", "file", df_path(x), "size",
                                                  df_int(x, "file_size_in_bytes"), "op", "delete",
                                                  "keys", 1), err);
        } else if (status == STATUS_ADDED && content == CONTENT_POS) {
            json_t *targets = json_object();
            rc = targets ? ferry__iceberg_posdel_targets(sc->s->io, df_path(x),
                                                         df_int(x, "file_size_in_bytes"), targets, err)
                         : nomem(err);
            const char *t;
            json_t *v;
            json_object_foreach(targets, t, v)
            {
                if (rc != FERRY_OK || json_object_get(added, t) != NULL) continue;
                bool exists = false;
                int64_t size = 0;
                rc = ferry__iceberg_io_stat(sc->s->io, t, &exists, &size, NULL, err);
                if (rc == FERRY_OK && !exists)
                    rc = ferry_error_set(err, FERRY_ENOTFOUND, "iceberg",
                                         "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                                         ": %s (named by position delete file %s) is missing",
                                         sc->table, sc->snap_id, t, df_path(x));
                if (rc == FERRY_OK)
                    rc = append_unit(units, json_pack("{s:s,s:I,s:s,s:[o]}", "file", t, "size",
                                                      (json_int_t)size, "op", "delete", "only_pos",
                                                      file_ref(x)), err);
            }
            json_decref(targets);
        }
    }
    return rc;
}

/* Live entries of snapshot snap by file path, into out (an object). */
static int live_files(struct scan *sc, json_t *snap, json_t *out, struct ferry_error *err)
{
    json_t *entries = json_array();
    int rc = entries ? snapshot_entries(sc->s, sc->table, snap, false, entries, err) : nomem(err);
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK) break;
        if (df_int(x, "content") <= CONTENT_DATA && json_object_set(out, df_path(x), x) != 0)
            rc = nomem(err);
    }
    json_decref(entries);
    return rc;
}

/* Delete units for the data files snapshot sc->snap removed: those its manifests mark
 * DELETED, and those its parent had that it has not (a writer that rewrites the manifest list
 * without DELETED entries, as the iceberg sink's replace). Read whole, every row a delete. */
static int removed_files(struct scan *sc, json_t *entries, json_t *units, struct ferry_error *err)
{
    json_t *gone = json_object(), *now = json_object(), *before = json_object();
    int rc = gone && now && before ? FERRY_OK : nomem(err);
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc == FERRY_OK && jint(x, "status", -1) == STATUS_DELETED &&
            df_int(x, "content") <= CONTENT_DATA && json_object_set(gone, df_path(x), x) != 0)
            rc = nomem(err);
    }
    json_int_t parent_id = jint(sc->snap, "parent-snapshot-id", -1);
    json_t *parent = find_snapshot(sc->meta, parent_id);
    json_t *sum = json_object_get(sc->snap, "summary");
    const char *removed = json_string_value(json_object_get(sum, "deleted-data-files"));
    /* files removed without DELETED entries can only be found against the parent */
    if (rc == FERRY_OK && parent == NULL && parent_id != -1 && json_object_size(gone) == 0 &&
        removed != NULL && strtoll(removed, NULL, 10) > 0)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                             "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                             " removed %s data files that its manifests do not list, and its "
                             "parent %" JSON_INTEGER_FORMAT " was expired: the rows it deleted "
                             "cannot be known; read the table again under a new pipeline name "
                             "(or state), which starts with a full read",
                             sc->table, sc->snap_id, removed, parent_id);
    if (rc == FERRY_OK && parent != NULL) rc = live_files(sc, sc->snap, now, err);
    if (rc == FERRY_OK && parent != NULL) rc = live_files(sc, parent, before, err);
    const char *path;
    json_object_foreach(before, path, x)
    {
        if (rc == FERRY_OK && json_object_get(now, path) == NULL && json_object_set(gone, path, x) != 0)
            rc = nomem(err);
    }
    json_object_foreach(gone, path, x)
    {
        if (rc != FERRY_OK) break;
        rc = check_file(sc->s, sc->table, sc->snap_id, x, err);
        if (rc == FERRY_OK)
            rc = append_unit(units, json_pack("{s:s,s:I,s:s}", "file", path, "size",
                                              df_int(x, "file_size_in_bytes"), "op", "delete"), err);
    }
    json_decref(gone);
    json_decref(now);
    json_decref(before);
    return rc;
}

/* The units replaying snapshot sc->snap, appended to units. */
static int snapshot_units(struct scan *sc, const struct ferry_schema *schema, json_t *units,
                          struct ferry_error *err)
{
    const char *op = json_string_value(json_object_get(json_object_get(sc->snap, "summary"), "operation"));
    if (op == NULL) op = "append";
    if (strcmp(op, "replace") == 0) return FERRY_OK; /* compaction: the same rows */
    bool change = strcmp(op, "overwrite") == 0 || strcmp(op, "delete") == 0;
    if (!change && strcmp(op, "append") != 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               ": operation \"%s\" cannot be read incrementally",
                               sc->table, sc->snap_id, op);
    if (change && schema->n_key == 0)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               " is an %s (rows deleted or replaced) and the table has no "
                               "identifier fields (nor a declared key): an incremental read "
                               "cannot apply it; read in mode full",
                               sc->table, sc->snap_id, op);
    if (change && !sc->deletes_ok)
        return ferry_error_set(err, FERRY_EPOLICY, "iceberg",
                               "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                               " is an %s (rows deleted or replaced): replaying it emits deletes, "
                               "which only `write: merge` applies (another write mode would keep "
                               "them as rows)",
                               sc->table, sc->snap_id, op);
    json_t *entries = json_array(), *added = json_object(), *posdels = json_array();
    int rc = entries && added && posdels ? FERRY_OK : nomem(err);
    if (rc == FERRY_OK) rc = snapshot_entries(sc->s, sc->table, sc->snap, true, entries, err);
    if (rc == FERRY_OK) rc = check_entries(sc, entries, err);
    size_t i;
    json_t *x;
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK || jint(x, "status", -1) != STATUS_ADDED) continue;
        json_int_t content = df_int(x, "content");
        if (content == CONTENT_DATA) json_object_set_new(added, df_path(x), json_true());
        if (content != CONTENT_DATA && !change)
            rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                 "iceberg source: table %s snapshot %" JSON_INTEGER_FORMAT
                                 ": an append that adds delete file %s",
                                 sc->table, sc->snap_id, df_path(x));
        if (content == CONTENT_POS && json_array_append_new(posdels, file_ref(x)) != 0)
            rc = nomem(err);
    }
    if (rc == FERRY_OK && change) rc = removed_files(sc, entries, units, err);
    if (rc == FERRY_OK && change) rc = change_deletes(sc, schema, entries, added, units, err);
    json_array_foreach(entries, i, x)
    {
        if (rc != FERRY_OK) break;
        if (jint(x, "status", -1) != STATUS_ADDED || df_int(x, "content") != CONTENT_DATA) continue;
        /* an added file's rows would all be filtered out (its deletes, above, are kept) */
        if (bounds_exclude(sc, x)) {
            sc->skipped++;
            continue;
        }
        rc = append_unit(units, json_pack("{s:s,s:I,s:s,s:O}", "file", df_path(x), "size",
                                          df_int(x, "file_size_in_bytes"), "op", "insert", "pos",
                                          posdels), err);
    }
    json_decref(entries);
    json_decref(added);
    json_decref(posdels);
    return rc;
}

/* The checkpointed snapshot id (shard 0's "n", read by the checkpoint codec), or -1 for
 * none. */
static int64_t checkpoint_snapshot(const char *route_checkpoint)
{
    struct ferry_position p;
    if (route_checkpoint == NULL ||
        ferry_position_decode(route_checkpoint, strlen(route_checkpoint), &p, NULL) != FERRY_OK)
        return -1;
    int64_t id = p.has_n ? p.n : -1;
    ferry_position_clear(&p);
    return id;
}

static int incremental_shards(struct scan *sc, const struct ferry_schema *schema, int64_t from,
                              json_t *shards, json_int_t *rows, struct ferry_error *err)
{
    if (from < 0 || sc->snap == NULL)
        return sc->snap ? full_shards(sc, shards, rows, err) : FERRY_OK; /* the first read */
    json_t *chain = json_array(), *units = json_array();
    int rc = chain && units ? snapshots_since(sc, from, sc->snap, chain, err) : nomem(err);
    json_t *to = sc->snap;
    size_t i;
    json_t *sn;
    json_array_foreach(chain, i, sn)
    {
        if (rc != FERRY_OK) break;
        sc->snap = sn;
        sc->snap_id = jint(sn, "snapshot-id", -1);
        rc = snapshot_units(sc, schema, units, err);
        json_t *sum = json_object_get(sn, "summary");
        const char *added = json_string_value(json_object_get(sum, "added-records"));
        if (added) *rows += strtoll(added, NULL, 10);
    }
    sc->snap = to;
    sc->snap_id = jint(to, "snapshot-id", -1);
    if (rc == FERRY_OK && json_array_size(units) > 0 &&
        json_array_append_new(shards, json_pack("{s:O}", "units", units)) != 0)
        rc = nomem(err);
    json_decref(chain);
    json_decref(units);
    return rc;
}

static int dump_plan(json_t *plan, char **plan_json, struct ferry_error *err)
{
    char *text = plan ? json_dumps(plan, JSON_COMPACT) : NULL;
    *plan_json = text ? ferry_strdup(text) : NULL;
    free(text);
    return *plan_json ? FERRY_OK : nomem(err);
}

/* {column name: field id} of schema json sc: the data files' columns are matched by id
 * (scan.c), so a column renamed since a file was written reads from it. */
static json_t *ids_by_name(json_t *sc)
{
    json_t *o = json_object();
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(sc, "fields"), i, f)
    {
        const char *name = json_string_value(json_object_get(f, "name"));
        json_t *id = json_object_get(f, "id");
        if (o && name && json_is_integer(id)) json_object_set(o, name, id);
    }
    return o;
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *schema, const char *route_checkpoint,
                    char **plan_json, struct ferry_error *err)
{
    struct isrc *s = ctx;
    if (spec->mode == FERRY_READ_CDC)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                               "resource %s: the iceberg source reads in mode full or incremental",
                               spec->table);
    struct scan sc = {.s = s, .table = spec->table,
                      .deletes_ok = ferry_read_context_of(spec)->applies_deletes,
                      .rx = ferry_read_context_of(spec)};
    int rc = load_table(s, spec->table, &sc.meta, err);
    if (rc == FERRY_OK) rc = pick_snapshot(s, spec, sc.meta, &sc.snap, err);
    sc.sc = rc == FERRY_OK ? table_schema(sc.meta, sc.snap) : NULL;
    sc.snap_id = sc.snap ? jint(sc.snap, "snapshot-id", -1) : -1;
    bool incr = spec->mode == FERRY_READ_INCREMENTAL;
    if (rc == FERRY_OK && incr && sc.snap_id < -1)
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                             "iceberg source: table %s: snapshot id %" JSON_INTEGER_FORMAT
                             " is negative: incremental reads keep a non-negative one",
                             spec->table, sc.snap_id);
    json_t *shards = json_array();
    json_int_t rows = 0;
    int64_t from = incr ? checkpoint_snapshot(route_checkpoint) : -1;
    if (rc == FERRY_OK && shards == NULL) rc = nomem(err);
    /* shard 0 of an incremental plan carries the snapshot read up to */
    if (rc == FERRY_OK && incr)
        rc = append_unit(shards, json_pack("{s:I}", "marker", sc.snap ? sc.snap_id : (from < 0 ? 0 : from)), err);
    sc.ids = rc == FERRY_OK ? ids_by_name(sc.sc) : NULL;
    if (rc == FERRY_OK)
        rc = incr ? incremental_shards(&sc, schema, from <= 0 ? -1 : from, shards, &rows, err)
                  : (sc.snap ? full_shards(&sc, shards, &rows, err) : FERRY_OK);
    if (rc == FERRY_OK && json_array_size(shards) == 0)
        rc = append_unit(shards, json_pack("{s:[]}", "units"), err);
    json_t *plan = rc == FERRY_OK ? json_pack("{s:s,s:I,s:O,s:I,s:o}", "mode", incr ? "incremental" : "full",
                                              "snapshot_id", sc.snap_id, "shards", shards,
                                              "rows_estimate", rows, "field_ids", ids_by_name(sc.sc))
                                  : NULL;
    /* the data files the filters ruled out by their bounds (resource.started) */
    if (rc == FERRY_OK && sc.rx->n_filters > 0 &&
        json_object_set_new(plan, "row_groups_skipped", json_integer(sc.skipped)) != 0)
        rc = nomem(err);
    if (rc == FERRY_OK) rc = dump_plan(plan, plan_json, err);
    json_decref(sc.ids);
    json_decref(plan);
    json_decref(shards);
    json_decref(sc.meta);
    return rc;
}

/* ---- extract ------------------------------------------------------------------------------- */

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    struct isrc *s = ctx;
    json_t *root = ferry_plan_cache_get(&s->plan, plan_json);
    json_t *sh = json_array_get(json_object_get(root, "shards"), (size_t)shard);
    int64_t skip = resume != NULL && resume->has_n ? resume->n : 0;
    bool done = resume != NULL && resume->done;
    int rc = FERRY_OK;
    ferry_rw_set_shard(rw, shard);
    json_t *marker = json_object_get(sh, "marker");
    if (!json_is_object(sh)) {
        rc = ferry_error_set(err, FERRY_EINVAL, "iceberg",
                             "resource %s: shard %d of the frozen plan is not an iceberg plan",
                             spec->table, shard);
    } else if (json_is_integer(marker)) {
        ferry_rw_set_offset(rw, json_integer_value(marker)); /* the route checkpoint to be */
    } else if (!done) {
        int64_t emitted = 0;
        size_t i;
        json_t *u;
        json_array_foreach(json_object_get(sh, "units"), i, u)
        {
            rc = ferry__iceberg_read_unit(s->io, u, json_object_get(root, "field_ids"), schema, rw,
                                          &emitted, skip, err);
            if (rc != FERRY_OK) break;
        }
        if (rc == FERRY_OK && emitted > 0) ferry_rw_set_offset(rw, emitted);
    }
    return rc;
}

const struct ferry_source_vtable ferry__iceberg_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "iceberg",
    .tuning_keys = src_tuning_keys,
    .supports_incremental = true,
    .supports_cdc = false,
    .incremental_without_cursor = true,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = NULL,
};
