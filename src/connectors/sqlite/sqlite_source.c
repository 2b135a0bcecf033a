/* connectors/sqlite/sqlite_source.c - the `sqlite` source: tables of one SQLite file.
 *
 * Owns a read-only connection, the discovery of a table's columns (declared types mapped
 * by sqlite_common.c), its key, frozen read plans and the SELECTs that read them. Calls
 * SQLite, the row writer, the batch text forms, jansson (plans), the position codec (saved
 * and resume positions: checkpoint/position.h, never parsed here). Registered in
 * connectors/registry.c; driven by the runner on one thread (cancel from any thread).
 *
 * Reads.
 *   full, single-column integer key: the key range [min, max] seen at plan time is split
 *     into `shards` ranges; a shard reads `WHERE k >= lo AND k <= hi ORDER BY k` and
 *     resumes with `k > last`.
 *   full, other keys: one shard ordered by the key, resuming with `(k1, k2) > (?, ?)`.
 *     A table without a key is read in one pass without resume points.
 *   incremental: ORDER BY cursor..., key... between the saved position (exclusive) and
 *     the newest (cursor, key) seen at plan time (inclusive, frozen in the plan).
 * Comparisons happen in SQLite on stored values. A position holds ferry values, so each
 * position column's storage class (integer, real, text, blob) and, for text times and
 * timestamps, their style (separator, fraction width, UTC suffix: SQLite's own
 * `2024-01-31 12:00:00`, ferry's `2024-01-31 12:00:00.000000+00:00`...) are frozen in the
 * plan, and a bound is written back in that form. The plan checks, on the newest row, that
 * the round trip gives back the stored value exactly; when it does not, incremental reads
 * are refused and full reads run without resume points.
 *
 * NULL cursors: with one cursor column, rows whose cursor is NULL are read by the first
 * incremental run (the one without a saved position; they sort first) and never after.
 * With several cursor columns such rows are never read incrementally. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "connectors/sqlite/sqlite_common.h"
#include "checkpoint/position.h"
#include "ferry/connector.h"

__extension__ typedef __int128 i128;

static const char *const source_tuning_keys[] = {"shards", "parallelism", NULL};

struct src {
    sqlite3 *db;
    char *path;
    int64_t shards;
};

/* ---- open ------------------------------------------------------------------------------- */

static void src_close(void *ctx)
{
    struct src *s = ctx;
    if (s == NULL) return;
    sqlite3_close_v2(s->db);
    ferry_free(s->path);
    ferry_free(s);
}

static int src_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    const char *path = NULL;
    int64_t shards = 1;
    int rc = ferry_cfg_str(cfg, "path", true, &path, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "shards", false, 1, 1024, &shards, err);
    if (rc != FERRY_OK) return rc;
    struct stat stt;
    if (stat(path, &stt) != 0)
        return ferry_error_set(err, errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "sqlite",
                               "sqlite source: file %s %s", path,
                               errno == ENOENT ? "not found" : strerror(errno));
    if (!S_ISREG(stt.st_mode))
        return ferry_error_set(err, FERRY_EINVAL, "sqlite", "sqlite source: %s is not a file",
                               path);
    struct src *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    s->shards = shards;
    s->path = ferry_strdup(path);
    if (s->path == NULL) {
        src_close(s);
        return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
    }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        rc = ferry__sqlite_error(err, FERRY_EIO, s->db, "sqlite source: cannot open %s", path);
        src_close(s);
        return rc;
    }
    sqlite3_busy_timeout(s->db, 10000);
    /* A file that is not a database fails here rather than at the first read. */
    if (sqlite3_exec(s->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
        rc = ferry__sqlite_error(err, FERRY_EIO, s->db, "sqlite source: %s", path);
        src_close(s);
        return rc;
    }
    *ctx = s;
    return FERRY_OK;
}

static void src_cancel(void *ctx)
{
    struct src *s = ctx;
    if (s && s->db) sqlite3_interrupt(s->db);
}

/* ---- the table -------------------------------------------------------------------------- */

struct col_info {
    char *name;
    char *decl;
    bool notnull;
    int pk;
};

struct rel {
    char *schema_name; /* "main" unless the resource said "<schema>.<table>" */
    char *table;
    char *from; /* quoted "schema"."table" */
    struct col_info *cols;
    int n_cols;
    bool has_rowid; /* a table (not a view, not WITHOUT ROWID) with no column "rowid" */
    char **exprs;   /* per schema field: its SQL expression (extract/plan only) */
    int n_exprs;
};

static void rel_free(struct rel *r)
{
    for (int i = 0; i < r->n_cols; i++) {
        ferry_free(r->cols[i].name);
        ferry_free(r->cols[i].decl);
    }
    ferry_free(r->cols);
    for (int i = 0; i < r->n_exprs; i++)
        ferry_free(r->exprs[i]);
    ferry_free(r->exprs);
    ferry_free(r->schema_name);
    ferry_free(r->table);
    ferry_free(r->from);
    memset(r, 0, sizeof *r);
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "sqlite", "out of memory");
}

static int load_columns(struct src *s, struct rel *r, struct ferry_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1, ?2) "
                           "ORDER BY cid",
                           -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s", s->path);
    sqlite3_bind_text(st, 1, r->table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->schema_name, -1, SQLITE_STATIC);
    int rc = FERRY_OK, src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        struct col_info *nc = ferry_realloc(r->cols, sizeof *nc * (size_t)(r->n_cols + 1));
        if (nc == NULL) {
            rc = nomem(err);
            break;
        }
        r->cols = nc;
        struct col_info *c = &r->cols[r->n_cols++];
        const char *decl = (const char *)sqlite3_column_text(st, 1);
        c->name = ferry_strdup((const char *)sqlite3_column_text(st, 0));
        c->decl = ferry_strdup(decl ? decl : "");
        c->notnull = sqlite3_column_int(st, 2) != 0;
        c->pk = sqlite3_column_int(st, 3);
        if (c->name == NULL || c->decl == NULL) {
            rc = nomem(err);
            break;
        }
    }
    if (rc == FERRY_OK && src != SQLITE_DONE)
        rc = ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                 s->path, r->table);
    sqlite3_finalize(st);
    return rc;
}

static int col_index(const struct rel *r, const char *name)
{
    for (int i = 0; i < r->n_cols; i++)
        if (strcmp(r->cols[i].name, name) == 0) return i;
    for (int i = 0; i < r->n_cols; i++)
        if (sqlite3_stricmp(r->cols[i].name, name) == 0) return i;
    return -1;
}

/* Whether the relation is an ordinary rowid table (views and WITHOUT ROWID have none). */
static int detect_rowid(struct src *s, struct rel *r, struct ferry_error *err)
{
    r->has_rowid = false;
    if (col_index(r, "rowid") >= 0) return FERRY_OK;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__sqlite_quote(&b, r->schema_name);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ".sqlite_master WHERE name = ?1 COLLATE NOCASE");
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return nomem(err);
    }
    char *sql = ferry_asprintf("SELECT type FROM %s", b.data);
    ferry_buf_release(&b);
    if (sql == NULL) return nomem(err);
    sqlite3_stmt *st = NULL;
    bool table = false;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, r->table, -1, SQLITE_STATIC);
        table = sqlite3_step(st) == SQLITE_ROW &&
                strcmp((const char *)sqlite3_column_text(st, 0), "table") == 0;
    }
    sqlite3_finalize(st);
    ferry_free(sql);
    if (!table) return FERRY_OK;
    sql = ferry_asprintf("SELECT rowid FROM %s LIMIT 0", r->from);
    if (sql == NULL) return nomem(err);
    /* Preparing is enough: SQLite refuses `rowid` on a WITHOUT ROWID table. */
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) r->has_rowid = true;
    sqlite3_finalize(st);
    ferry_free(sql);
    return FERRY_OK;
}

static int set_from(struct rel *r)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__sqlite_quote(&b, r->schema_name);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ".", 1);
    if (rc == FERRY_OK) rc = ferry__sqlite_quote(&b, r->table);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return FERRY_ENOMEM;
    }
    r->from = ferry_buf_take(&b);
    return r->from ? FERRY_OK : FERRY_ENOMEM;
}

/* A quoted identifier at *p ("My.Tab", two quotes for one) or a bare one up to the next
 * dot; *p moves past it. NULL when malformed (or out of memory: the caller reports "not
 * found" either way, naming the table as written). */
static char *take_ident(const char **p, bool *quoted)
{
    const char *c = *p;
    *quoted = *c == '"';
    if (!*quoted) {
        const char *dot = strchr(c, '.');
        size_t n = dot ? (size_t)(dot - c) : strlen(c);
        *p = c + n;
        return n ? ferry_strndup(c, n) : NULL;
    }
    char *out = ferry_malloc(strlen(c));
    if (out == NULL) return NULL;
    size_t o = 0;
    for (c++;; c++) {
        if (*c == '\0') break;
        if (*c == '"') {
            if (c[1] != '"') {
                *p = c + 1;
                out[o] = '\0';
                if (o) return out;
                break;
            }
            c++;
        }
        out[o++] = *c;
    }
    ferry_free(out);
    return NULL;
}

/* The quoted forms of a table name, as the pipeline file writes them for every source:
 * "My.Tab", aux."My.Tab", "my aux".t. False (nothing set) when no part is quoted or the
 * name is not one of these forms. */
static bool split_quoted(const char *name, char **schema, char **table)
{
    const char *p = name;
    bool q1, q2 = false;
    char *a = take_ident(&p, &q1), *b = NULL;
    if (a != NULL && *p == '.') {
        p++;
        b = take_ident(&p, &q2);
    }
    if (a == NULL || *p != '\0' || (!q1 && !q2) || (b == NULL && p[-1] == '.')) {
        ferry_free(a);
        ferry_free(b);
        return false;
    }
    *schema = b ? a : ferry_strdup("main");
    *table = b ? b : a;
    if (*schema == NULL) {
        ferry_free(a);
        return false;
    }
    return true;
}

/* "orders" is main.orders; "aux.orders" is tried as a table of that name first, then as
 * table orders of schema aux; a quoted part ("My.Tab", aux."My.Tab") is one identifier. */
static int resolve(struct src *s, const char *name, struct rel *r, struct ferry_error *err)
{
    memset(r, 0, sizeof *r);
    if (name == NULL || name[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "sqlite", "sqlite source: empty table name");
    r->schema_name = ferry_strdup("main");
    r->table = ferry_strdup(name);
    if (!r->schema_name || !r->table) {
        rel_free(r);
        return nomem(err);
    }
    int rc = load_columns(s, r, err);
    char *qs = NULL, *qt = NULL;
    if (rc == FERRY_OK && r->n_cols == 0 && split_quoted(name, &qs, &qt)) {
        ferry_free(r->schema_name);
        ferry_free(r->table);
        r->schema_name = qs;
        r->table = qt;
        rc = load_columns(s, r, err);
    }
    const char *dot = strchr(name, '.');
    if (rc == FERRY_OK && r->n_cols == 0 && dot != NULL && qt == NULL) {
        ferry_free(r->schema_name);
        ferry_free(r->table);
        r->schema_name = ferry_strndup(name, (size_t)(dot - name));
        r->table = ferry_strdup(dot + 1);
        if (!r->schema_name || !r->table) rc = nomem(err);
        if (rc == FERRY_OK) rc = load_columns(s, r, err);
    }
    if (rc == FERRY_OK && r->n_cols == 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                             "sqlite source: table \"%s\" not found in %s", name, s->path);
    if (rc == FERRY_OK && set_from(r) != FERRY_OK) rc = nomem(err);
    if (rc == FERRY_OK) rc = detect_rowid(s, r, err);
    if (rc != FERRY_OK) rel_free(r);
    return rc;
}

static bool is_int_type(enum ferry_type t)
{
    return t == FERRY_TYPE_INT8 || t == FERRY_TYPE_INT16 || t == FERRY_TYPE_INT32 ||
           t == FERRY_TYPE_INT64;
}

static bool is_ts_type(enum ferry_type t)
{
    return t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIMESTAMPTZ_US;
}

/* ---- discover --------------------------------------------------------------------------- */

static int add_col_field(struct ferry_schema *sc, const struct col_info *c, struct ferry_error *err)
{
    enum ferry_type t;
    int p, scale;
    ferry__sqlite_type_from_decl(c->decl, &t, &p, &scale);
    /* Key columns are never NULL in practice; a NULL there is reported when read. */
    int rc = ferry_schema_add_field(sc, c->name, t, !c->notnull && c->pk == 0, err);
    if (rc != FERRY_OK) return rc;
    if (t == FERRY_TYPE_DECIMAL128) {
        sc->fields[sc->n_fields - 1].precision = p;
        sc->fields[sc->n_fields - 1].scale = scale;
    }
    return FERRY_OK;
}

static int src_discover(void *ctx, const struct ferry_resource_spec *spec,
                        struct ferry_schema **out, struct ferry_error *err)
{
    struct src *s = ctx;
    struct rel r;
    int rc = resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_schema *sc = ferry_schema_new();
    if (sc == NULL) {
        rel_free(&r);
        return nomem(err);
    }
    bool has_pk = false;
    for (int i = 0; i < r.n_cols; i++)
        has_pk |= r.cols[i].pk > 0;
    /* A rowid table without a declared key is keyed on its rowid, exposed as a column. */
    bool implicit_rowid = r.has_rowid && !has_pk && spec->key == NULL && spec->columns == NULL;
    if (implicit_rowid) {
        rc = ferry_schema_add_field(sc, "rowid", FERRY_TYPE_INT64, false, err);
        if (rc == FERRY_OK) sc->fields[0].key_pos = 1;
    }
    int n = spec->columns ? spec->n_columns : r.n_cols;
    for (int f = 0; f < n && rc == FERRY_OK; f++) {
        if (spec->columns == NULL) {
            rc = add_col_field(sc, &r.cols[f], err);
            continue;
        }
        int c = col_index(&r, spec->columns[f]);
        if (c >= 0) {
            rc = add_col_field(sc, &r.cols[c], err);
        } else if (r.has_rowid && sqlite3_stricmp(spec->columns[f], "rowid") == 0) {
            rc = ferry_schema_add_field(sc, "rowid", FERRY_TYPE_INT64, false, err);
        } else {
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                                 "sqlite source: table \"%s\" has no "
                                 "column \"%s\"",
                                 spec->table, spec->columns[f]);
        }
    }
    if (rc == FERRY_OK && spec->key != NULL) {
        for (int k = 0; k < spec->n_key && rc == FERRY_OK; k++) {
            int f = ferry_schema_find(sc, spec->key[k]);
            if (f < 0)
                rc = ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                                     "sqlite source: table \"%s\": "
                                     "key column \"%s\" is not among the selected columns",
                                     spec->table, spec->key[k]);
            else
                sc->fields[f].key_pos = k + 1;
        }
    } else if (rc == FERRY_OK && has_pk) {
        /* The primary key, when every column of it is selected. */
        int n_pk = 0, found = 0;
        for (int i = 0; i < r.n_cols; i++)
            if (r.cols[i].pk > 0) {
                n_pk++;
                if (ferry_schema_find(sc, r.cols[i].name) >= 0) found++;
            }
        if (found == n_pk)
            for (int i = 0; i < r.n_cols; i++)
                if (r.cols[i].pk > 0)
                    sc->fields[ferry_schema_find(sc, r.cols[i].name)].key_pos = r.cols[i].pk;
    } else if (rc == FERRY_OK && !implicit_rowid) {
        int f = ferry_schema_find(sc, "rowid");
        if (f >= 0 && r.has_rowid && !has_pk) sc->fields[f].key_pos = 1;
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    rel_free(&r);
    if (rc != FERRY_OK) {
        ferry_schema_unref(sc);
        return rc;
    }
    *out = sc;
    return FERRY_OK;
}

/* SQL expressions of the schema's fields, in order. */
static int bind_exprs(struct rel *r, const struct ferry_schema *sc, struct ferry_error *err)
{
    r->exprs = ferry_calloc((size_t)(sc->n_fields ? sc->n_fields : 1), sizeof *r->exprs);
    if (r->exprs == NULL) return nomem(err);
    r->n_exprs = sc->n_fields;
    for (int f = 0; f < sc->n_fields; f++) {
        const char *name = sc->fields[f].name;
        int c = col_index(r, name);
        if (c < 0 && r->has_rowid && sqlite3_stricmp(name, "rowid") == 0) {
            r->exprs[f] = ferry_strdup("rowid"); /* the pseudo-column: unquoted on purpose */
        } else if (c < 0) {
            return ferry_error_set(err, FERRY_ENOTFOUND, "sqlite",
                                   "sqlite source: table \"%s\" "
                                   "has no column \"%s\"",
                                   r->table, name);
        } else {
            struct ferry_buf b;
            ferry_buf_init(&b, 0);
            if (ferry__sqlite_quote(&b, r->cols[c].name) != FERRY_OK) {
                ferry_buf_release(&b);
                return nomem(err);
            }
            r->exprs[f] = ferry_buf_take(&b);
        }
        if (r->exprs[f] == NULL) return nomem(err);
    }
    return FERRY_OK;
}

/* ---- values ----------------------------------------------------------------------------- */

/* One stored value read as the field's ferry type. */
struct tv {
    bool null;
    bool b;
    int64_t i;
    double d;
    struct ferry_decimal128 dec;
    const uint8_t *p;
    size_t n;
    uint8_t uuid[16];
};

static bool parse_int(const char *t, size_t n, int64_t *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, t, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *out = v;
    return true;
}

static bool parse_double(const char *t, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, t, n);
    buf[n] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0';
}

static bool parse_bool(const char *t, size_t n, bool *out)
{
    static const char *const yes[] = {"1", "t", "true", "y", "yes", "on"};
    static const char *const no[] = {"0", "f", "false", "n", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strlen(yes[i]) == n && strncasecmp(t, yes[i], n) == 0) return *out = true;
        if (strlen(no[i]) == n && strncasecmp(t, no[i], n) == 0) return !(*out = false);
    }
    return false;
}

/* Reads column i as f's type. False when the stored value does not convert. */
static bool read_tv(sqlite3_stmt *st, int i, const struct ferry_field *f, struct tv *v)
{
    int kind = sqlite3_column_type(st, i);
    v->null = kind == SQLITE_NULL;
    if (v->null) return true;
    const char *t;
    size_t n;
    char num[64];
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        if (kind == SQLITE_INTEGER || kind == SQLITE_FLOAT) {
            v->b = sqlite3_column_double(st, i) != 0;
            return true;
        }
        t = (const char *)sqlite3_column_text(st, i);
        return parse_bool(t, (size_t)sqlite3_column_bytes(st, i), &v->b);
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        if (kind == SQLITE_INTEGER) {
            v->i = sqlite3_column_int64(st, i);
            return true;
        }
        if (kind == SQLITE_FLOAT) {
            double d = sqlite3_column_double(st, i);
            if (d != floor(d) || d < -9.2e18 || d > 9.2e18) return false;
            v->i = (int64_t)d;
            return true;
        }
        t = (const char *)sqlite3_column_text(st, i);
        return parse_int(t, (size_t)sqlite3_column_bytes(st, i), &v->i);
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        if (kind == SQLITE_INTEGER || kind == SQLITE_FLOAT) {
            v->d = sqlite3_column_double(st, i);
            return true;
        }
        t = (const char *)sqlite3_column_text(st, i);
        return parse_double(t, (size_t)sqlite3_column_bytes(st, i), &v->d);
    case FERRY_TYPE_DECIMAL128:
        if (kind == SQLITE_FLOAT) {
            /* A REAL is rounded to the column's scale: the best a binary double can give. */
            int k = snprintf(num, sizeof num, "%.*f", f->scale > 0 ? f->scale : 0,
                             sqlite3_column_double(st, i));
            return k > 0 && (size_t)k < sizeof num &&
                   ferry_decimal128_from_text(num, (size_t)k, f->precision, f->scale, &v->dec) ==
                       FERRY_OK;
        }
        t = (const char *)sqlite3_column_text(st, i);
        n = (size_t)sqlite3_column_bytes(st, i);
        return ferry_decimal128_from_text(t, n, f->precision, f->scale, &v->dec) == FERRY_OK;
    case FERRY_TYPE_DECIMAL_TEXT:
        /* Numbers stored as INTEGER or REAL read as SQLite's text of them (REAL: 15
         * significant digits). */
        if (kind == SQLITE_BLOB) return false;
        v->p = sqlite3_column_text(st, i);
        v->n = (size_t)sqlite3_column_bytes(st, i);
        return v->p != NULL;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
        v->p = sqlite3_column_text(st, i);
        v->n = (size_t)sqlite3_column_bytes(st, i);
        if (v->p == NULL) v->p = (const uint8_t *)"";
        return true;
    case FERRY_TYPE_BINARY:
        v->p = sqlite3_column_blob(st, i);
        v->n = (size_t)sqlite3_column_bytes(st, i);
        if (v->p == NULL) v->p = (const uint8_t *)"";
        return true;
    case FERRY_TYPE_DATE32:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (kind == SQLITE_INTEGER) {
            v->i = sqlite3_column_int64(st, i);
            return true;
        }
        if (kind != SQLITE_TEXT) return false;
        t = (const char *)sqlite3_column_text(st, i);
        n = (size_t)sqlite3_column_bytes(st, i);
        if (f->type == FERRY_TYPE_DATE32) {
            int32_t d;
            if (ferry_date32_from_text(t, n, &d) != FERRY_OK) return false;
            v->i = d;
            return true;
        }
        if (f->type == FERRY_TYPE_TIME64_US) return ferry_time64_from_text(t, n, &v->i) == FERRY_OK;
        return ferry_timestamp_from_text(t, n, &v->i) == FERRY_OK;
    case FERRY_TYPE_UUID:
        if (kind == SQLITE_BLOB) {
            if (sqlite3_column_bytes(st, i) != 16) return false;
            memcpy(v->uuid, sqlite3_column_blob(st, i), 16);
            return true;
        }
        t = (const char *)sqlite3_column_text(st, i);
        return ferry_uuid_from_text(t, (size_t)sqlite3_column_bytes(st, i), v->uuid) == FERRY_OK;
    case FERRY_TYPE_MAX:
        break;
    }
    return false;
}

static inline void emit_tv(struct ferry_row_writer *rw, const struct ferry_field *f,
                           const struct tv *v)
{
    if (v->null) {
        ferry_rw_null(rw);
        return;
    }
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        ferry_rw_bool(rw, v->b);
        return;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        ferry_rw_float(rw, v->d);
        return;
    case FERRY_TYPE_DECIMAL128:
        ferry_rw_dec128(rw, v->dec);
        return;
    case FERRY_TYPE_DECIMAL_TEXT:
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
    case FERRY_TYPE_BINARY:
        ferry_rw_text(rw, v->p, v->n);
        return;
    case FERRY_TYPE_UUID:
        ferry_rw_fixed(rw, v->uuid, 16);
        return;
    default:
        ferry_rw_int(rw, v->i);
        return;
    }
}

static int bad_value(struct src *s, const struct rel *r, sqlite3_stmt *st, int i,
                     const struct ferry_field *f, struct ferry_error *err)
{
    static const char *const kinds[] = {"?", "INTEGER", "REAL", "TEXT", "BLOB", "NULL"};
    int kind = sqlite3_column_type(st, i);
    const char *t = kind == SQLITE_BLOB ? "(blob)" : (const char *)sqlite3_column_text(st, i);
    return ferry_error_set(err, FERRY_ESOURCE, "sqlite",
                           "sqlite source: %s: table \"%s\" column \"%s\": the %s value '%.40s' "
                           "is not a valid %s",
                           s->path, r->table, f->name, kinds[kind >= 1 && kind <= 5 ? kind : 0],
                           t ? t : "", ferry_type_name(f->type));
}

/* ---- positions: ferry values <-> stored values ------------------------------------------- */

/* A value ready to bind, in one storage class. */
struct sv {
    int kind; /* SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL */
    int64_t i;
    double d;
    char *p; /* owned */
    size_t n;
};

static void sv_clear(struct sv *v)
{
    ferry_free(v->p);
    memset(v, 0, sizeof *v);
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case SQLITE_INTEGER:
        return "integer";
    case SQLITE_FLOAT:
        return "real";
    case SQLITE_BLOB:
        return "blob";
    case SQLITE_NULL:
        return "null";
    default:
        return "text";
    }
}

static int kind_from_name(const char *s)
{
    if (s == NULL) return SQLITE_TEXT;
    if (!strcmp(s, "integer")) return SQLITE_INTEGER;
    if (!strcmp(s, "real")) return SQLITE_FLOAT;
    if (!strcmp(s, "blob")) return SQLITE_BLOB;
    if (!strcmp(s, "null")) return SQLITE_NULL;
    return SQLITE_TEXT;
}

/* Where the sink of this connector would store the type, for columns seen empty. */
static int default_kind(enum ferry_type t)
{
    if (t == FERRY_TYPE_BOOL || is_int_type(t)) return SQLITE_INTEGER;
    if (t == FERRY_TYPE_FLOAT32 || t == FERRY_TYPE_FLOAT64) return SQLITE_FLOAT;
    if (t == FERRY_TYPE_BINARY) return SQLITE_BLOB;
    return SQLITE_TEXT;
}

static bool sv_text(struct sv *v, const char *p, size_t n)
{
    v->p = ferry_malloc(n + 1);
    if (v->p == NULL) return false;
    memcpy(v->p, p, n);
    v->p[n] = '\0';
    v->n = n;
    return true;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* How a position column is stored: its storage class and, for times and timestamps kept
 * as text, their style ("<sep><digits><suffix>", e.g. " 6+00:00", "T0Z"), so that a bound
 * is written exactly as the stored values it is compared with. */
struct pform {
    int kind;
    char style[12]; /* "" = ferry's own form */
};

/* The style of a stored time or timestamp text, when it is one this reader reproduces:
 * fixed fields, a fraction of 0..6 digits, a UTC suffix. */
static bool detect_style(enum ferry_type t, const char *s, size_t n, char *style)
{
    size_t i = 0;
    char sep = ' ';
    if (is_ts_type(t)) {
        if (n < 19 || (s[10] != ' ' && s[10] != 'T')) return false;
        sep = s[10];
        i = 19;
    } else if (t == FERRY_TYPE_TIME64_US) {
        if (n < 8) return false;
        i = 8;
    } else {
        return false;
    }
    int digits = 0;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            digits++;
            i++;
        }
        if (digits == 0 || digits > 6) return false;
    }
    static const char *const utc[] = {"", "Z", "+00:00", "+00", "+0000", "-00:00"};
    size_t rest = n - i;
    if (t == FERRY_TYPE_TIME64_US && rest != 0) return false;
    for (size_t k = 0; k < sizeof utc / sizeof utc[0]; k++)
        if (strlen(utc[k]) == rest && memcmp(s + i, utc[k], rest) == 0) {
            snprintf(style, 12, "%c%d%s", sep, digits, utc[k]);
            return true;
        }
    return false;
}

/* The JSON form of a position value (what the row writer puts in "key") as the stored
 * value of storage class `kind`. False when it has no such form. */
static bool sv_from_json(const json_t *j, const struct ferry_field *f, const struct pform *pf,
                         struct sv *v)
{
    int kind = pf->kind;
    const char *style = pf->style;
    memset(v, 0, sizeof *v);
    if (j == NULL || json_is_null(j)) {
        v->kind = SQLITE_NULL;
        return true;
    }
    v->kind = kind;
    char buf[64];
    int n;
    const char *str = json_is_string(j) ? json_string_value(j) : NULL;
    size_t slen = str ? json_string_length(j) : 0;
    switch (kind) {
    case SQLITE_INTEGER:
        if (json_is_integer(j))
            v->i = (int64_t)json_integer_value(j);
        else if (json_is_boolean(j))
            v->i = json_is_true(j);
        else if (str) {
            double d;
            if (!parse_int(str, slen, &v->i)) {
                if (!parse_double(str, slen, &d) || d != floor(d) || fabs(d) > 9.2e18) return false;
                v->i = (int64_t)d;
            }
        } else
            return false;
        return true;
    case SQLITE_FLOAT:
        if (json_is_number(j))
            v->d = json_number_value(j);
        else if (str)
            return parse_double(str, slen, &v->d);
        else
            return false;
        return true;
    case SQLITE_TEXT:
        if (json_is_integer(j)) {
            int64_t x = (int64_t)json_integer_value(j);
            switch (f->type) {
            case FERRY_TYPE_DATE32:
                if (x < INT32_MIN || x > INT32_MAX) return false;
                n = ferry__sqlite_date_text((int32_t)x, buf);
                break;
            case FERRY_TYPE_TIME64_US:
                n = style[0] ? ferry__sqlite_time_text_style(x, style[1] - '0', buf)
                             : ferry__sqlite_time_text(x, buf);
                break;
            case FERRY_TYPE_TIMESTAMP_US:
            case FERRY_TYPE_TIMESTAMPTZ_US:
                n = style[0]
                        ? ferry__sqlite_ts_text_style(x, style[0], style[1] - '0', style + 2, buf)
                        : ferry__sqlite_ts_text(x, f->type == FERRY_TYPE_TIMESTAMPTZ_US, buf);
                break;
            default:
                n = snprintf(buf, sizeof buf, "%" PRId64, x);
                break;
            }
            return n >= 0 && sv_text(v, buf, (size_t)n);
        }
        if (str) return sv_text(v, str, slen);
        return false;
    case SQLITE_BLOB:
        if (!str) return false;
        if (f->type == FERRY_TYPE_UUID) {
            uint8_t u[16];
            return ferry_uuid_from_text(str, slen, u) == FERRY_OK &&
                   sv_text(v, (const char *)u, 16);
        }
        if (f->type == FERRY_TYPE_BINARY) {
            if (slen % 2) return false;
            if (!sv_text(v, "", 0)) return false;
            ferry_free(v->p);
            v->p = ferry_malloc(slen / 2 + 1);
            if (v->p == NULL) return false;
            for (size_t k = 0; k < slen / 2; k++) {
                int a = hexval(str[2 * k]), b = hexval(str[2 * k + 1]);
                if (a < 0 || b < 0) return false;
                v->p[k] = (char)(a << 4 | b);
            }
            v->n = slen / 2;
            return true;
        }
        return sv_text(v, str, slen);
    default:
        return false;
    }
}

static int sv_bind(sqlite3_stmt *st, int p, const struct sv *v)
{
    switch (v->kind) {
    case SQLITE_INTEGER:
        return sqlite3_bind_int64(st, p, v->i);
    case SQLITE_FLOAT:
        return sqlite3_bind_double(st, p, v->d);
    case SQLITE_TEXT:
        return sqlite3_bind_text(st, p, v->p, (int)v->n, SQLITE_STATIC);
    case SQLITE_BLOB:
        return sqlite3_bind_blob(st, p, v->p ? v->p : "", (int)v->n, SQLITE_STATIC);
    default:
        return sqlite3_bind_null(st, p);
    }
}

/* The row writer's JSON form of a read value (batch/builder.h, "Position JSON"). */
static json_t *tv_to_json(const struct ferry_field *f, const struct tv *v)
{
    if (v->null) return json_null();
    char buf[80];
    int n;
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        return json_boolean(v->b);
    case FERRY_TYPE_FLOAT32:
        return json_real((double)(float)v->d);
    case FERRY_TYPE_FLOAT64:
        return json_real(v->d);
    case FERRY_TYPE_DECIMAL128:
        n = ferry_decimal128_to_text(v->dec, f->scale, buf, sizeof buf);
        return n < 0 ? NULL : json_stringn(buf, (size_t)n);
    case FERRY_TYPE_DECIMAL_TEXT:
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
        return json_stringn((const char *)v->p, v->n);
    case FERRY_TYPE_BINARY: {
        static const char hex[] = "0123456789abcdef";
        char *h = ferry_malloc(v->n * 2 + 1);
        if (h == NULL) return NULL;
        for (size_t k = 0; k < v->n; k++) {
            h[2 * k] = hex[v->p[k] >> 4];
            h[2 * k + 1] = hex[v->p[k] & 15];
        }
        json_t *j = json_stringn(h, v->n * 2);
        ferry_free(h);
        return j;
    }
    case FERRY_TYPE_UUID:
        n = ferry_uuid_to_text(v->uuid, buf, sizeof buf);
        return n < 0 ? NULL : json_stringn(buf, (size_t)n);
    default:
        return json_integer(v->i);
    }
}

/* Whether binding `v` reproduces column i of the current row exactly. */
static bool sv_matches(sqlite3_stmt *st, int i, int kind, const struct sv *v)
{
    if (kind != v->kind) return false;
    switch (kind) {
    case SQLITE_INTEGER:
        return sqlite3_column_int64(st, i) == v->i;
    case SQLITE_FLOAT:
        return sqlite3_column_double(st, i) == v->d;
    case SQLITE_NULL:
        return true;
    case SQLITE_BLOB:
        return (size_t)sqlite3_column_bytes(st, i) == v->n &&
               (v->n == 0 || memcmp(sqlite3_column_blob(st, i), v->p, v->n) == 0);
    default:
        return (size_t)sqlite3_column_bytes(st, i) == v->n &&
               memcmp(sqlite3_column_text(st, i), v->p, v->n) == 0;
    }
}

/* ---- plan ------------------------------------------------------------------------------- */

/* The position columns of a read: cursor columns then the key columns not already in the
 * cursor (incremental), or the key (full). Field indexes into the schema. */
struct poscols {
    int n, n_cursor;
    int f[64];
};

static int incremental_columns(const struct ferry_resource_spec *spec,
                               const struct ferry_schema *sc, struct poscols *pc,
                               struct ferry_error *err)
{
    pc->n = pc->n_cursor = 0;
    if (spec->cursor == NULL || spec->n_cursor == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "sqlite",
                               "sqlite source: table \"%s\": "
                               "incremental reads need `cursor: [column]`",
                               spec->table);
    if (sc->n_key == 0)
        return ferry_error_set(err, FERRY_ECONFIG, "sqlite",
                               "sqlite source: table \"%s\" has no key "
                               "to break ties between equal cursor values; declare `key: [column]`",
                               spec->table);
    if (spec->n_cursor + sc->n_key > 64)
        return ferry_error_set(err, FERRY_ECONFIG, "sqlite",
                               "sqlite source: table \"%s\": cursor and "
                               "key have too many columns",
                               spec->table);
    for (int c = 0; c < spec->n_cursor; c++) {
        int f = ferry_schema_find(sc, spec->cursor[c]);
        if (f < 0)
            return ferry_error_set(err, FERRY_ECONFIG, "sqlite",
                                   "sqlite source: table \"%s\": cursor "
                                   "column \"%s\" is not among its (selected) columns",
                                   spec->table, spec->cursor[c]);
        pc->f[pc->n++] = f;
    }
    pc->n_cursor = pc->n;
    for (int k = 0; k < sc->n_key; k++) {
        bool dup = false;
        for (int c = 0; c < pc->n_cursor; c++)
            dup |= pc->f[c] == sc->key[k];
        if (!dup) pc->f[pc->n++] = sc->key[k];
    }
    return FERRY_OK;
}

/* The newest row by the position columns (descending), or none. On success *hi is a JSON
 * array (or NULL when no row) and kinds[] the storage classes seen (defaults otherwise);
 * *canonical says whether every value round-trips through its ferry form. */
static int newest(struct src *s, const struct rel *r, const struct ferry_schema *sc,
                  const struct poscols *pc, bool skip_null_cursor, json_t **hi, struct pform *forms,
                  bool *canonical, char *why, size_t why_len, struct ferry_error *err)
{
    *hi = NULL;
    *canonical = true;
    for (int k = 0; k < pc->n; k++) {
        forms[k].kind = default_kind(sc->fields[pc->f[k]].type);
        forms[k].style[0] = '\0';
    }
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int brc = ferry_buf_printf(&b, "SELECT ");
    for (int k = 0; k < pc->n && brc == FERRY_OK; k++)
        brc = ferry_buf_printf(&b, "%s%s", k ? ", " : "", r->exprs[pc->f[k]]);
    if (brc == FERRY_OK) brc = ferry_buf_printf(&b, " FROM %s", r->from);
    for (int k = 0; k < pc->n_cursor && skip_null_cursor && brc == FERRY_OK; k++)
        brc = ferry_buf_printf(&b, "%s%s IS NOT NULL", k ? " AND " : " WHERE ", r->exprs[pc->f[k]]);
    for (int k = 0; k < pc->n && brc == FERRY_OK; k++)
        brc = ferry_buf_printf(&b, "%s%s DESC", k ? ", " : " ORDER BY ", r->exprs[pc->f[k]]);
    if (brc == FERRY_OK) brc = ferry_buf_printf(&b, " LIMIT 1");
    if (brc != FERRY_OK) {
        ferry_buf_release(&b);
        return nomem(err);
    }
    sqlite3_stmt *st = NULL;
    int rc = FERRY_OK;
    if (sqlite3_prepare_v2(s->db, b.data, -1, &st, NULL) != SQLITE_OK) {
        rc = ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                 s->path, r->table);
        ferry_buf_release(&b);
        return rc;
    }
    ferry_buf_release(&b);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        json_t *arr = json_array();
        for (int k = 0; k < pc->n && rc == FERRY_OK && arr; k++) {
            const struct ferry_field *f = &sc->fields[pc->f[k]];
            struct tv v;
            memset(&v, 0, sizeof v);
            /* Before any read: a conversion can change what column_type reports. */
            forms[k].kind = sqlite3_column_type(st, k);
            if (forms[k].kind == SQLITE_TEXT &&
                !detect_style(f->type, (const char *)sqlite3_column_text(st, k),
                              (size_t)sqlite3_column_bytes(st, k), forms[k].style))
                forms[k].style[0] = '\0';
            if (!read_tv(st, k, f, &v)) {
                rc = bad_value(s, r, st, k, f, err);
                break;
            }
            json_t *j = tv_to_json(f, &v);
            struct sv back;
            memset(&back, 0, sizeof back);
            if (j == NULL || !sv_from_json(j, f, &forms[k], &back) ||
                !sv_matches(st, k, forms[k].kind, &back)) {
                if (*canonical)
                    snprintf(why, why_len,
                             "column \"%s\" stores %s values in a form ferry does not "
                             "reproduce exactly (the %s value '%.40s')",
                             f->name, ferry_type_name(f->type), kind_name(forms[k].kind),
                             forms[k].kind == SQLITE_BLOB
                                 ? "(blob)"
                                 : (const char *)sqlite3_column_text(st, k));
                *canonical = false;
            }
            sv_clear(&back);
            if (j == NULL) j = json_null();
            json_array_append_new(arr, j);
        }
        if (arr == NULL) rc = nomem(err);
        if (rc == FERRY_OK)
            *hi = arr;
        else
            json_decref(arr);
    } else if (step != SQLITE_DONE) {
        rc = ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                 s->path, r->table);
    }
    sqlite3_finalize(st);
    return rc;
}

static void set_forms(json_t *plan, const struct pform *forms, int n)
{
    json_t *as = json_array(), *styles = json_array();
    for (int k = 0; k < n && as && styles; k++) {
        json_array_append_new(as, json_string(kind_name(forms[k].kind)));
        json_array_append_new(styles,
                              forms[k].style[0] ? json_string(forms[k].style) : json_null());
    }
    json_object_set_new(plan, "as", as);
    json_object_set_new(plan, "styles", styles);
}

static json_t *names_json(const struct ferry_schema *sc, const struct poscols *pc)
{
    json_t *a = json_array();
    for (int k = 0; k < pc->n && a; k++)
        json_array_append_new(a, json_string(sc->fields[pc->f[k]].name));
    return a;
}

static int plan_full(struct src *s, const struct rel *r, const struct ferry_schema *sc,
                     json_t *plan, struct ferry_error *err)
{
    json_t *shards = json_array();
    json_object_set_new(plan, "shards", shards);
    if (sc->n_key == 1 && is_int_type(sc->fields[sc->key[0]].type)) {
        const char *k = r->exprs[sc->key[0]];
        struct ferry_buf b;
        ferry_buf_init(&b, 0);
        if (ferry_buf_printf(&b, "SELECT min(%s), max(%s) FROM %s", k, k, r->from) != FERRY_OK) {
            ferry_buf_release(&b);
            return nomem(err);
        }
        sqlite3_stmt *st = NULL;
        int rc = FERRY_OK;
        if (sqlite3_prepare_v2(s->db, b.data, -1, &st, NULL) != SQLITE_OK ||
            sqlite3_step(st) != SQLITE_ROW)
            rc = ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                     s->path, r->table);
        ferry_buf_release(&b);
        if (rc != FERRY_OK) {
            sqlite3_finalize(st);
            return rc;
        }
        json_object_set_new(plan, "keyset", json_string("range"));
        if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
            json_t *sh = json_object();
            json_object_set_new(sh, "lo", json_integer(1));
            json_object_set_new(sh, "hi", json_integer(0));
            json_array_append_new(shards, sh);
        } else {
            int64_t lo = sqlite3_column_int64(st, 0), hi = sqlite3_column_int64(st, 1);
            i128 span = (i128)hi - lo + 1;
            int64_t n = s->shards;
            if ((i128)n > span) n = (int64_t)span;
            for (int64_t k2 = 0; k2 < n; k2++) {
                int64_t a = (int64_t)(lo + span * k2 / n);
                int64_t z = k2 == n - 1 ? hi : (int64_t)(lo + span * (k2 + 1) / n - 1);
                json_t *sh = json_object();
                json_object_set_new(sh, "lo", json_integer(a));
                json_object_set_new(sh, "hi", json_integer(z));
                json_array_append_new(shards, sh);
            }
        }
        sqlite3_finalize(st);
        return FERRY_OK;
    }
    json_t *sh = json_object();
    json_array_append_new(shards, sh);
    if (sc->n_key == 0) {
        json_object_set_new(plan, "keyset", json_string("none"));
        return FERRY_OK;
    }
    struct poscols pc = {.n = sc->n_key, .n_cursor = 0};
    for (int k = 0; k < sc->n_key && k < 64; k++)
        pc.f[k] = sc->key[k];
    struct pform forms[64];
    json_t *hi = NULL;
    bool canonical;
    char why[256];
    int rc = newest(s, r, sc, &pc, false, &hi, forms, &canonical, why, sizeof why, err);
    if (rc != FERRY_OK) return rc;
    json_decref(hi);
    /* Without an exact round trip a resume position could skip or repeat rows: read the
     * table in key order in one pass instead. */
    json_object_set_new(plan, "keyset", json_string(canonical ? "tuple" : "ordered"));
    set_forms(plan, forms, pc.n);
    return FERRY_OK;
}

/* The saved route position's key (NULL when it has none), decoded by the codec. */
static int parse_route_key(const char *route_checkpoint, const struct ferry_resource_spec *spec,
                           int n, json_t **lo, struct ferry_error *err)
{
    *lo = NULL;
    if (route_checkpoint == NULL) return FERRY_OK;
    struct ferry_position p;
    int rc = ferry_position_decode(route_checkpoint, strlen(route_checkpoint), &p, err);
    if (rc != FERRY_OK)
        return ferry_error_prefix(err, "sqlite source: table \"%s\": the saved position %.200s",
                                  spec->table, route_checkpoint);
    if (p.has_key && p.n_key != n)
        rc = ferry_error_set(err, FERRY_EINVAL, "sqlite",
                             "sqlite source: table \"%s\": the saved "
                             "position has %d key values, the read needs %d: %.200s",
                             spec->table, p.n_key, n, route_checkpoint);
    else if (p.has_key && (*lo = ferry_position_key_json(&p)) == NULL)
        rc = nomem(err);
    ferry_position_clear(&p);
    return rc;
}

static int plan_incremental(struct src *s, const struct ferry_resource_spec *spec,
                            const struct rel *r, const struct ferry_schema *sc,
                            const char *route_checkpoint, json_t *plan, struct ferry_error *err)
{
    struct poscols pc;
    int rc = incremental_columns(spec, sc, &pc, err);
    if (rc != FERRY_OK) return rc;
    json_t *lo = NULL;
    rc = parse_route_key(route_checkpoint, spec, pc.n, &lo, err);
    if (rc != FERRY_OK) return rc;
    struct pform forms[64];
    json_t *hi = NULL;
    bool canonical;
    char why[256] = "";
    rc = newest(s, r, sc, &pc, true, &hi, forms, &canonical, why, sizeof why, err);
    if (rc == FERRY_OK && !canonical)
        rc = ferry_error_set(
            err, FERRY_EUNSUPPORTED, "sqlite",
            "sqlite source: %s: table \"%s\": incremental reads compare stored "
            "values, and %s; store it as ferry writes it (integers, or text like "
            "'2024-01-31 12:00:00.000000+00:00' for timestamps) or read in full mode",
            s->path, r->table, why);
    if (rc != FERRY_OK) {
        json_decref(lo);
        json_decref(hi);
        return rc;
    }
    const struct ferry_field *c0 = &sc->fields[pc.f[0]];
    json_t *sh = json_object();
    bool lo_null_cursor = lo && json_is_null(json_array_get(lo, 0));
    /* Rows with a NULL cursor sort first: the first run reads them, later runs never. */
    bool null_first = lo == NULL && pc.n_cursor == 1 && c0->nullable;
    if (lo_null_cursor) {
        json_decref(lo);
        lo = NULL;
    }
    json_object_set_new(sh, "lo", lo ? lo : json_null());
    json_object_set_new(sh, "hi", hi ? hi : json_null());
    if (lo && spec->lookback_ms > 0 && is_ts_type(c0->type) &&
        json_is_integer(json_array_get(lo, 0)))
        json_object_set_new(
            sh, "lookback_from",
            json_integer(json_integer_value(json_array_get(lo, 0)) - spec->lookback_ms * 1000));
    json_object_set_new(sh, "null_first", json_boolean(null_first));
    json_t *shards = json_array();
    json_array_append_new(shards, sh);
    json_object_set_new(plan, "shards", shards);
    json_object_set_new(plan, "columns", names_json(sc, &pc));
    json_object_set_new(plan, "n_cursor", json_integer(pc.n_cursor));
    set_forms(plan, forms, pc.n);
    return FERRY_OK;
}

static int src_plan(void *ctx, const struct ferry_resource_spec *spec,
                    const struct ferry_schema *sc, const char *route_checkpoint, char **plan_json,
                    struct ferry_error *err)
{
    struct src *s = ctx;
    if (spec->mode == FERRY_READ_CDC)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "sqlite",
                               "sqlite source: table \"%s\": SQLite "
                               "has no change log; use mode full or incremental",
                               spec->table);
    struct rel r;
    int rc = resolve(s, spec->table, &r, err);
    if (rc != FERRY_OK) return rc;
    rc = bind_exprs(&r, sc, err);
    json_t *plan = json_object();
    if (plan == NULL && rc == FERRY_OK) rc = nomem(err);
    if (rc == FERRY_OK) {
        json_object_set_new(plan, "mode", json_string(ferry_read_mode_name(spec->mode)));
        if (spec->mode == FERRY_READ_FULL)
            rc = plan_full(s, &r, sc, plan, err);
        else
            rc = plan_incremental(s, spec, &r, sc, route_checkpoint, plan, err);
    }
    rel_free(&r);
    if (rc == FERRY_OK) {
        char *text = json_dumps(plan, JSON_COMPACT);
        *plan_json = text ? ferry_strdup(text) : NULL;
        free(text);
        if (*plan_json == NULL) rc = nomem(err);
    }
    json_decref(plan);
    return rc;
}

/* ---- extract ---------------------------------------------------------------------------- */

struct reader {
    struct src *s;
    struct rel r;
    const struct ferry_schema *sc;
    struct ferry_buf sql;
    struct sv binds[130];
    int n_binds;
    int pos[64];
    int n_pos;
};

static int add_bind(struct reader *rd, const json_t *j, const struct ferry_field *f,
                    const struct pform *pf, struct ferry_error *err)
{
    if (rd->n_binds >= (int)(sizeof rd->binds / sizeof rd->binds[0]))
        return ferry_error_set(err, FERRY_EINVAL, "sqlite", "sqlite source: too many bounds");
    if (!sv_from_json(j, f, pf, &rd->binds[rd->n_binds])) {
        sv_clear(&rd->binds[rd->n_binds]);
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite source: table \"%s\": a position "
                               "value of column \"%s\" cannot be compared with its stored values",
                               rd->r.table, f->name);
    }
    rd->n_binds++;
    return FERRY_OK;
}

/* "(a, b) <op> (?, ?)" over the position columns, binding the values of `vals`. */
static int tuple_cond(struct reader *rd, const char *op, json_t *vals, const struct pform *forms,
                      int from, int n, struct ferry_error *err)
{
    struct ferry_buf *b = &rd->sql;
    int rc = ferry_buf_printf(b, "(");
    for (int k = from; k < n && rc == FERRY_OK; k++)
        rc = ferry_buf_printf(b, "%s%s", k > from ? ", " : "", rd->r.exprs[rd->pos[k]]);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ") %s (", op);
    for (int k = from; k < n && rc == FERRY_OK; k++)
        rc = ferry_buf_printf(b, "%s?%d", k > from ? ", " : "", rd->n_binds + 1 + (k - from));
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")");
    if (rc != FERRY_OK) return nomem(err);
    for (int k = from; k < n && rc == FERRY_OK; k++)
        rc = add_bind(rd, json_array_get(vals, (size_t)k), &rd->sc->fields[rd->pos[k]], &forms[k],
                      err);
    return rc;
}

static int order_by(struct reader *rd, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int k = 0; k < rd->n_pos && rc == FERRY_OK; k++)
        rc = ferry_buf_printf(&rd->sql, "%s%s", k ? ", " : " ORDER BY ", rd->r.exprs[rd->pos[k]]);
    return rc == FERRY_OK ? FERRY_OK : nomem(err);
}

static int select_list(struct reader *rd, struct ferry_error *err)
{
    int rc = ferry_buf_printf(&rd->sql, "SELECT ");
    for (int f = 0; f < rd->sc->n_fields && rc == FERRY_OK; f++)
        rc = ferry_buf_printf(&rd->sql, "%s%s", f ? ", " : "", rd->r.exprs[f]);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&rd->sql, " FROM %s WHERE ", rd->r.from);
    return rc == FERRY_OK ? FERRY_OK : nomem(err);
}

static bool get_forms(json_t *plan, int n, struct pform *forms)
{
    json_t *as = json_object_get(plan, "as"), *styles = json_object_get(plan, "styles");
    if (!json_is_array(as) || (int)json_array_size(as) != n) return false;
    for (int k = 0; k < n; k++) {
        forms[k].kind = kind_from_name(json_string_value(json_array_get(as, (size_t)k)));
        const char *st = json_string_value(json_array_get(styles, (size_t)k));
        if (st != NULL &&
            (strlen(st) < 2 || strlen(st) >= sizeof forms[k].style || st[1] < '0' || st[1] > '6'))
            return false;
        snprintf(forms[k].style, sizeof forms[k].style, "%s", st ? st : "");
    }
    return true;
}

static int build_full(struct reader *rd, json_t *plan, json_t *sh, json_t *resume_key,
                      struct ferry_error *err)
{
    const struct ferry_schema *sc = rd->sc;
    const char *keyset = json_string_value(json_object_get(plan, "keyset"));
    int rc = select_list(rd, err);
    if (rc != FERRY_OK) return rc;
    if (keyset && !strcmp(keyset, "range")) {
        if (sc->n_key != 1)
            return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                                   "sqlite source: plan "
                                   "and table \"%s\" disagree on the key",
                                   rd->r.table);
        json_t *lo = json_object_get(sh, "lo"), *hi = json_object_get(sh, "hi");
        if (!json_is_integer(lo) || !json_is_integer(hi))
            return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                                   "sqlite source: table \"%s\": bad "
                                   "shard in the frozen plan",
                                   rd->r.table);
        rd->pos[0] = sc->key[0];
        rd->n_pos = 1;
        const char *k = rd->r.exprs[sc->key[0]];
        json_t *from = resume_key ? json_array_get(resume_key, 0) : lo;
        if (!json_is_integer(from))
            return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                                   "sqlite source: table \"%s\": the "
                                   "resume position's key is not an integer",
                                   rd->r.table);
        rc = ferry_buf_printf(&rd->sql, "%s %s ?1 AND %s <= ?2", k, resume_key ? ">" : ">=", k);
        if (rc != FERRY_OK) return nomem(err);
        rd->binds[0] = (struct sv){.kind = SQLITE_INTEGER, .i = (int64_t)json_integer_value(from)};
        rd->binds[1] = (struct sv){.kind = SQLITE_INTEGER, .i = (int64_t)json_integer_value(hi)};
        rd->n_binds = 2;
        return order_by(rd, err);
    }
    if (keyset && (!strcmp(keyset, "tuple") || !strcmp(keyset, "ordered"))) {
        rd->n_pos = sc->n_key;
        for (int k = 0; k < sc->n_key; k++)
            rd->pos[k] = sc->key[k];
        struct pform forms[64];
        if (!get_forms(plan, rd->n_pos, forms))
            return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                                   "sqlite source: table \"%s\": bad "
                                   "frozen plan",
                                   rd->r.table);
        if (resume_key && !strcmp(keyset, "tuple"))
            rc = tuple_cond(rd, ">", resume_key, forms, 0, rd->n_pos, err);
        else
            rc = ferry_buf_printf(&rd->sql, "1") == FERRY_OK ? FERRY_OK : nomem(err);
        if (rc == FERRY_OK) rc = order_by(rd, err);
        if (strcmp(keyset, "tuple") != 0) rd->n_pos = 0; /* no resume points */
        return rc;
    }
    rd->n_pos = 0;
    return ferry_buf_printf(&rd->sql, "1") == FERRY_OK ? FERRY_OK : nomem(err);
}

static int build_incremental(struct reader *rd, const struct ferry_resource_spec *spec,
                             json_t *plan, json_t *sh, json_t *resume_key, struct ferry_error *err)
{
    struct poscols pc;
    int rc = incremental_columns(spec, rd->sc, &pc, err);
    if (rc != FERRY_OK) return rc;
    json_t *cols = json_object_get(plan, "columns");
    bool same = json_is_array(cols) && (int)json_array_size(cols) == pc.n;
    for (int k = 0; same && k < pc.n; k++)
        same = json_is_string(json_array_get(cols, (size_t)k)) &&
               !strcmp(json_string_value(json_array_get(cols, (size_t)k)),
                       rd->sc->fields[pc.f[k]].name);
    struct pform forms[64];
    if (!same || !get_forms(plan, pc.n, forms))
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite source: table \"%s\": the frozen "
                               "plan does not match the cursor and key",
                               rd->r.table);
    rd->n_pos = pc.n;
    memcpy(rd->pos, pc.f, sizeof pc.f[0] * (size_t)pc.n);
    if ((rc = select_list(rd, err)) != FERRY_OK) return rc;

    json_t *lo = json_object_get(sh, "lo"), *hi = json_object_get(sh, "hi");
    bool null_first = json_is_true(json_object_get(sh, "null_first"));
    json_t *lookback = json_object_get(sh, "lookback_from");
    if (json_is_null(lo)) lo = NULL;
    if (json_is_null(hi)) hi = NULL;
    if ((lo && (!json_is_array(lo) || (int)json_array_size(lo) != pc.n)) ||
        (hi && (!json_is_array(hi) || (int)json_array_size(hi) != pc.n)) ||
        (resume_key && (int)json_array_size(resume_key) != pc.n))
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite source: table \"%s\": bounds of "
                               "the wrong shape",
                               rd->r.table);
    const char *c0 = rd->r.exprs[pc.f[0]];
    struct ferry_buf *b = &rd->sql;
    bool resume_in_nulls = resume_key && json_is_null(json_array_get(resume_key, 0));
    if (resume_key && !resume_in_nulls) {
        lo = resume_key;
        lookback = NULL;
        null_first = false;
    }
    if (null_first) {
        /* The NULL-cursor rows first (ordered by key), then the rest up to hi. */
        rc = ferry_buf_printf(b, "((%s IS NULL", c0) == FERRY_OK ? FERRY_OK : nomem(err);
        if (rc == FERRY_OK && resume_in_nulls && pc.n > 1) {
            rc = ferry_buf_printf(b, " AND ") == FERRY_OK ? FERRY_OK : nomem(err);
            if (rc == FERRY_OK) rc = tuple_cond(rd, ">", resume_key, forms, 1, pc.n, err);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")") == FERRY_OK ? FERRY_OK : nomem(err);
        if (rc == FERRY_OK && hi) {
            rc = ferry_buf_printf(b, " OR ") == FERRY_OK ? FERRY_OK : nomem(err);
            if (rc == FERRY_OK) rc = tuple_cond(rd, "<=", hi, forms, 0, pc.n, err);
        }
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, ")") == FERRY_OK ? FERRY_OK : nomem(err);
        if (rc == FERRY_OK) rc = order_by(rd, err);
        return rc;
    }
    if (hi == NULL) return ferry_buf_printf(b, "0") == FERRY_OK ? FERRY_OK : nomem(err);
    for (int k = 0; k < pc.n_cursor && rc == FERRY_OK; k++)
        rc = ferry_buf_printf(b, "%s IS NOT NULL AND ", rd->r.exprs[pc.f[k]]) == FERRY_OK
                 ? FERRY_OK
                 : nomem(err);
    if (rc == FERRY_OK && lookback && json_is_integer(lookback)) {
        /* Re-read everything from `lookback` before the saved cursor, whatever its key. */
        rc = ferry_buf_printf(b, "%s >= ?%d AND ", c0, rd->n_binds + 1) == FERRY_OK ? FERRY_OK
                                                                                    : nomem(err);
        if (rc == FERRY_OK) rc = add_bind(rd, lookback, &rd->sc->fields[pc.f[0]], &forms[0], err);
    } else if (rc == FERRY_OK && lo) {
        rc = tuple_cond(rd, ">", lo, forms, 0, pc.n, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(b, " AND ") == FERRY_OK ? FERRY_OK : nomem(err);
    }
    if (rc == FERRY_OK) rc = tuple_cond(rd, "<=", hi, forms, 0, pc.n, err);
    if (rc == FERRY_OK) rc = order_by(rd, err);
    return rc;
}

/* The resume position's key (NULL when it has none) and whether its shard is done. */
static int resume_key_of(const struct ferry_position *resume, json_t **key, bool *done,
                         struct ferry_error *err)
{
    *key = NULL;
    *done = resume != NULL && resume->done;
    if (resume == NULL || *done || !resume->has_key) return FERRY_OK;
    *key = ferry_position_key_json(resume);
    return *key ? FERRY_OK : nomem(err);
}

static int run_select(struct reader *rd, struct ferry_row_writer *rw, struct ferry_error *err)
{
    struct src *s = rd->s;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, rd->sql.data, -1, &st, NULL) != SQLITE_OK)
        return ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                   s->path, rd->r.table);
    for (int k = 0; k < rd->n_binds; k++)
        sv_bind(st, k + 1, &rd->binds[k]);
    const struct ferry_schema *sc = rd->sc;
    const int nf = sc->n_fields;
    int rc = FERRY_OK, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        for (int f = 0; f < nf; f++) {
            struct tv v;
            if (!read_tv(st, f, &sc->fields[f], &v)) {
                ferry_rw_cancel_row(rw);
                rc = bad_value(s, &rd->r, st, f, &sc->fields[f], err);
                break;
            }
            emit_tv(rw, &sc->fields[f], &v);
        }
        if (rc != FERRY_OK) break;
        rc = ferry_rw_end(rw, err);
        if (rc != FERRY_OK) break;
    }
    if (rc == FERRY_OK && step != SQLITE_DONE) {
        if (step == SQLITE_INTERRUPT)
            rc = ferry_error_set(err, FERRY_ECANCELED, "sqlite",
                                 "sqlite source: %s: read of table "
                                 "\"%s\" canceled",
                                 s->path, rd->r.table);
        else
            rc = ferry__sqlite_error(err, FERRY_ESOURCE, s->db, "sqlite source: %s: table \"%s\"",
                                     s->path, rd->r.table);
    }
    sqlite3_finalize(st);
    return rc;
}

static int src_extract(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *sc, const char *plan_json, int shard,
                       const struct ferry_position *resume, struct ferry_row_writer *rw,
                       struct ferry_error *err)
{
    struct src *s = ctx;
    json_t *resume_key = NULL;
    bool done = false;
    int rc = resume_key_of(resume, &resume_key, &done, err);
    if (rc != FERRY_OK || done) return rc;
    json_t *plan = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *sh = json_array_get(json_object_get(plan, "shards"), (size_t)shard);
    const char *mode = json_string_value(json_object_get(plan, "mode"));
    if (!json_is_object(sh) || mode == NULL || shard < 0) {
        json_decref(plan);
        json_decref(resume_key);
        return ferry_error_set(err, FERRY_EINVAL, "sqlite",
                               "sqlite source: table \"%s\": shard %d "
                               "is not in the frozen plan",
                               spec->table, shard);
    }
    struct reader *rd = ferry_calloc(1, sizeof *rd);
    if (rd == NULL) {
        json_decref(plan);
        json_decref(resume_key);
        return nomem(err);
    }
    rd->s = s;
    rd->sc = sc;
    ferry_buf_init(&rd->sql, 0);
    rc = resolve(s, spec->table, &rd->r, err);
    if (rc == FERRY_OK) rc = bind_exprs(&rd->r, sc, err);
    if (rc == FERRY_OK) {
        if (!strcmp(mode, "full"))
            rc = build_full(rd, plan, sh, resume_key, err);
        else
            rc = build_incremental(rd, spec, plan, sh, resume_key, err);
    }
    if (rc == FERRY_OK) {
        ferry_rw_set_shard(rw, shard);
        if (rd->n_pos > 0) ferry_rw_set_position_columns(rw, rd->n_pos, rd->pos);
        rc = run_select(rd, rw, err);
    }
    for (int k = 0; k < rd->n_binds; k++)
        sv_clear(&rd->binds[k]);
    ferry_buf_release(&rd->sql);
    rel_free(&rd->r);
    ferry_free(rd);
    json_decref(plan);
    json_decref(resume_key);
    return rc;
}

static int src_list_tables(void *ctx, struct ferry_table_info **out, int *n, char **def,
                           struct ferry_error *err)
{
    struct src *s = ctx;
    return ferry__sqlite_list_tables(s->db, s->path, out, n, def, err);
}

const struct ferry_source_vtable ferry__sqlite_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "sqlite",
    .tuning_keys = source_tuning_keys,
    .supports_incremental = true,
    .supports_cdc = false,
    .open = src_open,
    .discover = src_discover,
    .plan = src_plan,
    .extract = src_extract,
    .close = src_close,
    .cancel = src_cancel,
    .list_tables = src_list_tables,
    .verify_open = ferry__sqlite_verify_open,
};
