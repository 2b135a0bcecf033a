/* tests/unit/test_sqlite_connector.c - the sqlite sink and source through their vtables,
 * on real SQLite files in mkdtemp folders, checked with a second, independent connection. */
#include <ftw.h>
#include <math.h>
#include <sqlite3.h>
#include <unistd.h>
#include "unit.h"
#include "connector_harness.h"

static const struct ferry_sink_vtable *sink_vt;
static const struct ferry_source_vtable *src_vt;
static const struct ferry_source_vtable *sample_vt;
static char dir[256];
static char db_path[512];

/* ---- fixtures ----------------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ferry-sqlite-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(db_path, sizeof db_path, "%s/sub/dir/out.db", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!getenv("KEEP")) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* A second connection, as an independent reader would open it. */
static sqlite3 *reader(void)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static int64_t q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
        fail();
    }
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* First column of the first row as text ("(null)" for NULL, "(none)" without a row). */
static char *q_text(sqlite3 *db, const char *sql)
{
    static char buf[4096];
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
        fail();
    }
    snprintf(buf, sizeof buf, "(none)");
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        snprintf(buf, sizeof buf, "%s", t ? t : "(null)");
    }
    sqlite3_finalize(st);
    return buf;
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, msg);
        sqlite3_free(msg);
        fail();
    }
    sqlite3_close(db);
}

static bool table_exists(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1,
                       &st, NULL);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

struct fdef {
    const char *name;
    enum ferry_type type;
    bool nullable;
    int key_pos;
};

static struct ferry_schema *mk_schema(const struct fdef *d, int n)
{
    struct ferry_error err;
    struct ferry_schema *s = ferry_schema_new();
    for (int i = 0; i < n; i++) {
        ASSERT_OK(ferry_schema_add_field(s, d[i].name, d[i].type, d[i].nullable, &err), err);
        s->fields[i].key_pos = d[i].key_pos;
        if (d[i].type == FERRY_TYPE_DECIMAL128) {
            s->fields[i].precision = 12;
            s->fields[i].scale = 2;
        }
    }
    ASSERT_OK(ferry_schema_finish(s, &err), err);
    return s;
}

/* Row writer whose batches land in c; positions on the key. */
static struct ferry_row_writer *mk_rw(struct ferry_schema *sc, const char *resource,
                                      struct collect *c)
{
    struct ferry_rw_limits lim = {.rows = 1000000, .bytes = INT64_C(1) << 40};
    struct ferry_row_writer *rw = ferry__rw_new(sc, resource, lim, collect_emit, c);
    if (sc->n_key > 0) ferry_rw_set_position_columns(rw, sc->n_key, sc->key);
    return rw;
}

static void end_row(struct ferry_row_writer *rw)
{
    struct ferry_error err;
    ASSERT_OK(ferry_rw_end(rw, &err), err);
}

static struct ferry_batch *flush(struct ferry_row_writer *rw, struct collect *c)
{
    struct ferry_error err;
    ASSERT_OK(ferry_rw_flush(rw, false, &err), err);
    return c->b[c->n - 1];
}

static void mkdb(const char *sql);

/* ---- sink harness ------------------------------------------------------------------------ */

struct sinkh {
    struct ferry_cfg *cfg;
    void *ctx;
    struct ferry_target t[4];
    int n;
};

static void sink_open(struct sinkh *h, const char *extra)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "path: '%s'\n%s", db_path, extra ? extra : "");
    memset(h, 0, sizeof *h);
    h->cfg = cfg_of(yaml);
    struct ferry_error err;
    ASSERT_OK(sink_vt->open(h->cfg, &h->ctx, &err), err);
}

static int sink_target(struct sinkh *h, const char *resource, const char *table,
                       struct ferry_schema *sc, enum ferry_write_mode mode, struct ferry_error *err)
{
    struct ferry_target *t = &h->t[h->n];
    t->index = h->n;
    t->resource = resource;
    t->table = table;
    t->schema = sc;
    t->mode = mode;
    t->read_mode = FERRY_READ_FULL;
    int rc = sink_vt->prepare(h->ctx, t, err);
    if (rc == FERRY_OK) h->n++;
    return rc;
}

static void sink_begin(struct sinkh *h, int64_t run_id, bool resuming)
{
    struct ferry_session_info si = {
        .pipeline = "p1", .version = "v", .run_id = run_id, .attempt = 1, .resuming = resuming};
    struct ferry_error err;
    ASSERT_OK(sink_vt->begin(h->ctx, &si, &err), err);
}

static int sink_apply(struct sinkh *h, int idx, struct ferry_batch *b, struct ferry_error *err)
{
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    b->digest = ferry_batch_digest(b);
    int r = sink_vt->apply(h->ctx, &h->t[idx], b, &rc, err);
    if (r == FERRY_OK) {
        assert_int_equal(rc.write_crc, b->digest);
        assert_int_equal(rc.rows, b->length);
    }
    return r;
}

static void sink_close(struct sinkh *h)
{
    sink_vt->close(h->ctx);
    ferry_cfg_free(h->cfg);
}

/* ---- common data ----------------------------------------------------------------------------- */

static const struct fdef kv_fields[] = {{"id", FERRY_TYPE_INT64, false, 1},
                                        {"name", FERRY_TYPE_UTF8, true, 0},
                                        {"n", FERRY_TYPE_INT32, true, 0}};

/* Rows lo..hi of (id, name, n) as one batch. */
static struct ferry_batch *kv_batch(struct ferry_schema *sc, struct collect *c, int64_t lo,
                                    int64_t hi, const char *name, enum ferry_op op)
{
    struct ferry_row_writer *rw = mk_rw(sc, "kv", c);
    for (int64_t i = lo; i <= hi; i++) {
        ferry_rw_begin(rw, op);
        ferry_rw_int(rw, i);
        ferry_rw_text(rw, name, strlen(name));
        ferry_rw_int(rw, i * 10);
        end_row(rw);
    }
    struct ferry_batch *b = flush(rw, c);
    ferry__rw_free(rw);
    return b;
}

/* ---- sink tests ---------------------------------------------------------------------------- */

static void test_sink_append_types(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_cfg *scfg = cfg_of("rows: 2000\nclock: 1\n");
    void *sctx;
    ASSERT_OK(sample_vt->open(scfg, &sctx, &err), err);
    struct ferry_resource_spec spec = spec_of("users", FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(sample_vt->discover(sctx, &spec, &sc, &err), err);
    ASSERT_OK(sample_vt->plan(sctx, &spec, sc, NULL, &plan, &err), err);
    struct collect c = {0};
    ASSERT_OK(read_all(sample_vt, sctx, &spec, sc, plan, 700, &c, &err), err);

    struct sinkh h;
    sink_open(&h, NULL);
    struct ferry_sink_caps caps;
    sink_vt->capabilities(h.ctx, FERRY_WRITE_APPEND, &caps);
    assert_int_equal(caps.durability, FERRY_DURABLE_PER_APPLY);
    assert_true(caps.transactional_checkpoint && caps.atomic_replace && caps.deletes);
    ASSERT_OK(sink_target(&h, "users", "users", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 1, false);
    for (int i = 0; i < c.n; i++)
        ASSERT_OK(sink_apply(&h, 0, c.b[i], &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);

    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM users"), 2000);
    assert_string_equal(
        q_text(db, "SELECT type FROM pragma_table_info('users') WHERE name = 'balance'"),
        "DECIMAL_TEXT(38,10)");
    assert_string_equal(
        q_text(db, "SELECT type FROM pragma_table_info('users') WHERE name = 'profile'"),
        "JSON_TEXT");
    /* An append table is a log: no PRIMARY KEY, but the key column stays NOT NULL. */
    assert_int_equal(q_int(db, "SELECT count(*) FROM pragma_table_info('users') WHERE pk > 0"), 0);
    assert_int_equal(
        q_int(db, "SELECT \"notnull\" FROM pragma_table_info('users') WHERE name = 'id'"), 1);
    assert_int_equal(
        q_int(db, "SELECT \"notnull\" FROM pragma_table_info('users') WHERE name = 'email'"), 1);
    assert_int_equal(
        q_int(db, "SELECT \"notnull\" FROM pragma_table_info('users') WHERE name = 'age'"), 0);
    /* Exact text forms, stored as TEXT (decimals keep their trailing zeros). */
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE typeof(balance) <> 'text'"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE balance NOT GLOB '*.' || "
                               "replace(hex(zeroblob(10)), '00', '?')"),
                     0);
    assert_true(q_int(db, "SELECT count(*) FROM users WHERE balance GLOB '*0'") > 100);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM users WHERE typeof(updated_at) <> 'text' "
                  "OR updated_at NOT GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] "
                  "[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]+00:00'"),
        0);
    /* Rows never updated keep updated_at = 2020-01-01 + id ms, in the canonical form. */
    assert_true(q_int(db, "SELECT count(*) FROM users WHERE updated_at < '2100-01-01'") > 1500);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM users WHERE updated_at < '2100-01-01' AND updated_at <> "
                  "printf('2020-01-01 00:00:%02d.%06d+00:00', id / 1000, id % 1000 * 1000)"),
        0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE last_login GLOB '*+*'"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE birth_date < '1970-01-01'") > 0,
                     1);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM users WHERE typeof(avatar) NOT IN ('blob', 'null')"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE typeof(score) <> 'real'"), 0);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM users WHERE typeof(active) NOT IN ('integer', 'null')"), 0);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM users WHERE length(uuid) <> 36 OR uuid <> lower(uuid)"), 0);
    assert_int_equal(
        q_int(db,
              "SELECT count(*) FROM users WHERE profile IS NOT NULL AND NOT json_valid(profile)"),
        0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM users WHERE length(big_number) < 40"), 0);
    /* The checkpoint of the last batch, in the same file. */
    assert_string_equal(q_text(db,
                               "SELECT position FROM _ferry_checkpoints WHERE pipeline = 'p1' AND "
                               "resource = 'users' AND shard = 0"),
                        c.b[c.n - 1]->position);
    sqlite3_close(db);
    collect_free(&c);
    ferry_free(plan);
    ferry_schema_unref(sc);
    sample_vt->close(sctx);
    ferry_cfg_free(scfg);
}

/* Issue 23: NaN and ±Infinity kept (NaN as the text 'NaN' in the REAL column, read back as
 * NaN), subnormals exact, -0 refused naming table, column and row (never stored as 0). */
static void test_sink_float_edges(void **state)
{
    (void)state;
    struct ferry_error err;
    static const struct fdef fl[] = {{"id", FERRY_TYPE_INT64, false, 1},
                                     {"x", FERRY_TYPE_FLOAT64, true, 0}};
    struct ferry_schema *sc = mk_schema(fl, 2);
    struct collect c = {0};
    const double v[] = {NAN, INFINITY, -INFINITY, 4.9406564584124654e-324, 0.0, -1.5};
    struct sinkh h;
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "fl", "fl", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 1, false);
    struct ferry_row_writer *rw = mk_rw(sc, "fl", &c);
    for (int i = 0; i < 6; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        ferry_rw_float(rw, v[i]);
        end_row(rw);
    }
    ASSERT_OK(sink_apply(&h, 0, flush(rw, &c), &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    sqlite3 *db = reader();
    assert_string_equal(q_text(db, "SELECT group_concat(typeof(x) || ':' || quote(x), ' ') FROM "
                                   "(SELECT x FROM fl ORDER BY id)"),
                        "text:'NaN' real:Inf real:-Inf real:4.94065645841247e-324 real:0.0 "
                        "real:-1.5");
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM fl WHERE id = 3 AND x = 4.9406564584124654e-324"), 1);
    sqlite3_close(db);

    /* -0 in the second row of a batch: refused, nothing of the batch kept. */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "fl", "fl", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 2, false);
    for (int i = 0; i < 2; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, 10 + i);
        ferry_rw_float(rw, i ? -0.0 : 2.0);
        end_row(rw);
    }
    assert_int_equal(sink_apply(&h, 0, flush(rw, &c), &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "table \"fl\" column \"x\""));
    assert_non_null(strstr(err.message, "row 1: float -0"));
    sink_vt->abort(h.ctx);
    sink_close(&h);
    db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM fl WHERE id >= 10"), 0);
    sqlite3_close(db);
    ferry__rw_free(rw);
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_upsert_merge(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct sinkh h;
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "kv", sc, FERRY_WRITE_UPSERT, &err), err);
    ASSERT_OK(sink_target(&h, "kv", "kv2", sc, FERRY_WRITE_MERGE, &err), err);
    sink_begin(&h, 1, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 10, "a", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 5, 15, "b", FERRY_OP_UPDATE), &err), err);
    ASSERT_OK(sink_apply(&h, 1, kv_batch(sc, &c, 1, 10, "a", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_apply(&h, 1, kv_batch(sc, &c, 3, 4, "x", FERRY_OP_DELETE), &err), err);
    ASSERT_OK(sink_apply(&h, 1, kv_batch(sc, &c, 9, 12, "m", FERRY_OP_UPDATE), &err), err);
    /* 300 rows cycling over 50 keys: groups of rows go through one multi-row statement,
     * where the later row of a key must win, as row by row. */
    struct ferry_row_writer *rw = mk_rw(sc, "kv", &c);
    for (int i = 0; i < 300; i++) {
        ferry_rw_begin(rw, FERRY_OP_UPDATE);
        ferry_rw_int(rw, 1000 + i % 50);
        ferry_rw_text(rw, "cyc", 3);
        ferry_rw_int(rw, i);
        end_row(rw);
    }
    ASSERT_OK(sink_apply(&h, 0, flush(rw, &c), &err), err);
    ferry__rw_free(rw);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv WHERE name = 'cyc'"), 50);
    assert_int_equal(
        q_int(db, "SELECT count(*) FROM kv WHERE name = 'cyc' AND n = id - 1000 + 250"), 50);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv WHERE id < 1000"), 15);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv WHERE name = 'a'"), 4);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv WHERE name = 'b' AND id BETWEEN 5 AND 15"),
                     11);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv2"), 10);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv2 WHERE id IN (3, 4)"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv2 WHERE name = 'm'"), 4);
    assert_int_equal(q_int(db, "SELECT n FROM kv2 WHERE id = 12"), 120);
    sqlite3_close(db);

    /* Upsert without a key is refused before any row; so is a destination keyed otherwise. */
    static const struct fdef nokey[] = {{"id", FERRY_TYPE_INT64, false, 0},
                                        {"name", FERRY_TYPE_UTF8, true, 0}};
    struct ferry_schema *nk = mk_schema(nokey, 2);
    sink_open(&h, NULL);
    assert_int_equal(sink_target(&h, "kv", "kv3", nk, FERRY_WRITE_UPSERT, &err), FERRY_EPOLICY);
    assert_non_null(strstr(err.message, "key"));
    exec_sql(db_path, "CREATE TABLE other (id INTEGER, name TEXT, n INT4, PRIMARY KEY (name))");
    assert_int_equal(sink_target(&h, "kv", "other", sc, FERRY_WRITE_UPSERT, &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "\"other\""));
    sink_close(&h);
    ferry_schema_unref(nk);
    collect_free(&c);
    ferry_schema_unref(sc);
}

/* Append tables are logs (no PRIMARY KEY, a key may repeat); the keyed modes declare the
 * data's key, which their ON CONFLICT and the swap of replace rely on. */
static void test_sink_append_is_a_log(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct sinkh h;
    /* Two full runs append the same rows; an incremental run appends changed rows again. */
    for (int run = 1; run <= 2; run++) {
        sink_open(&h, NULL);
        ASSERT_OK(sink_target(&h, "kv", "log", sc, FERRY_WRITE_APPEND, &err), err);
        sink_begin(&h, run, false);
        ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 5, "full", FERRY_OP_INSERT), &err), err);
        ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
        sink_close(&h);
    }
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "log", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 3, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 2, 3, "v2", FERRY_OP_UPDATE), &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM pragma_table_info('log') WHERE pk > 0"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM pragma_index_list('log')"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM log"), 12);
    /* Each key twice from the full runs, with the same values each time. */
    assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT id FROM log WHERE name = 'full' "
                               "GROUP BY id HAVING count(*) = 2 AND min(n) = id * 10 "
                               "AND max(n) = id * 10)"),
                     5);
    assert_int_equal(q_int(db, "SELECT count(*) FROM log WHERE id IN (2, 3)"), 6);
    assert_int_equal(q_int(db, "SELECT count(*) FROM log WHERE name = 'v2'"), 2);
    /* An upsert into the log finds no key to match rows by and is refused, naming it. */
    sink_open(&h, NULL);
    assert_int_equal(sink_target(&h, "kv", "log", sc, FERRY_WRITE_UPSERT, &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "\"log\""));
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM log"), 12);

    /* upsert, merge and replace declare the key (replace through its staging table). */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "up", sc, FERRY_WRITE_UPSERT, &err), err);
    ASSERT_OK(sink_target(&h, "kv", "mg", sc, FERRY_WRITE_MERGE, &err), err);
    ASSERT_OK(sink_target(&h, "kv", "rp", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 4, false);
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sink_apply(&h, i, kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT), &err), err);
        if (i < 2) /* the same keys again converge instead of adding rows */
            ASSERT_OK(sink_apply(&h, i, kv_batch(sc, &c, 1, 5, "b", FERRY_OP_UPDATE), &err), err);
    }
    /* Replace refuses a key twice in its staging table, like any keyed table. */
    assert_int_equal(sink_apply(&h, 2, kv_batch(sc, &c, 5, 5, "b", FERRY_OP_INSERT), &err),
                     FERRY_ESINK);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    const char *keyed[] = {"up", "mg", "rp"};
    for (int i = 0; i < 3; i++) {
        char sql[160];
        snprintf(sql, sizeof sql,
                 "SELECT group_concat(name) FROM pragma_table_info('%s') WHERE pk > 0", keyed[i]);
        assert_string_equal(q_text(db, sql), "id");
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", keyed[i]);
        assert_int_equal(q_int(db, sql), 5);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE name = '%s'", keyed[i],
                 i < 2 ? "b" : "a");
        assert_int_equal(q_int(db, sql), 5);
    }
    sqlite3_close(db);
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_replace_atomic(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct sinkh h;
    /* The previous complete table. Its checkpoint table is as an older ferry made it (no
     * run_* counts): the sink adds them; the old rows stay "not counted", the new ones sum
     * what their run committed. */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_APPEND, &err), err);
    exec_sql(db_path, "CREATE TABLE _ferry_checkpoints (pipeline TEXT NOT NULL, resource TEXT "
                      "NOT NULL, shard INTEGER NOT NULL, run_id INTEGER NOT NULL, position TEXT, "
                      "updated_at TEXT NOT NULL, PRIMARY KEY (pipeline, resource, shard)); "
                      "INSERT INTO _ferry_checkpoints VALUES ('p1', 'gone', 0, 1, '{}', 'then')");
    sink_begin(&h, 1, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 3, "old", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    struct ferry_sink_checkpoint *cps = NULL;
    int ncp = 0;
    ASSERT_OK(sink_vt->checkpoints(h.ctx, "p1", &cps, &ncp, &err), err);
    assert_int_equal(ncp, 2); /* ordered by resource */
    assert_string_equal(cps[0].resource, "gone");
    assert_false(cps[0].has_counts);
    assert_string_equal(cps[1].resource, "kv");
    assert_true(cps[1].has_counts);
    assert_int_equal(cps[1].rows, 3);
    assert_int_equal(cps[1].batches, 1);
    assert_true(cps[1].bytes > 0);
    ferry_sink_checkpoints_free(cps, ncp);
    sink_close(&h);

    /* A replace that fails halfway: the old table stays, the staging table goes. */
    sink_open(&h, NULL);
    struct ferry_sink_caps caps;
    sink_vt->capabilities(h.ctx, FERRY_WRITE_REPLACE, &caps);
    assert_int_equal(caps.durability, FERRY_DURABLE_AT_COMMIT);
    assert_true(caps.atomic_replace);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 2, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 10, 14, "new", FERRY_OP_INSERT), &err), err);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM t"), 3);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t WHERE name = 'old'"), 3);
    sink_vt->abort(h.ctx);
    sink_vt->abort(h.ctx); /* idempotent */
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t WHERE name = 'old'"), 3);
    assert_false(table_exists(db, "t__ferry_staging"));
    assert_int_equal(q_int(db, "SELECT count(*) FROM _ferry_checkpoints WHERE run_id = 2"), 0);

    /* A complete replace: a reader inside a transaction keeps the old table, a new reader
     * sees exactly the new rows. */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 3, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 10, 14, "new", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 15, 16, "new", FERRY_OP_INSERT), &err), err);
    sqlite3 *snap = reader();
    assert_int_equal(sqlite3_exec(snap, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(q_int(snap, "SELECT count(*) FROM t"), 3);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    assert_int_equal(q_int(snap, "SELECT count(*) FROM t WHERE name = 'old'"), 3);
    sqlite3_exec(snap, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(snap);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t"), 7);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t WHERE name = 'new'"), 7);
    assert_false(table_exists(db, "t__ferry_staging"));
    assert_int_equal(q_int(db, "SELECT pk FROM pragma_table_info('t') WHERE name = 'id'"), 1);

    /* A worker dies mid-replace (no commit, no abort): a later attempt of the same run keeps
     * the staged rows its checkpoints account for; a new run starts from an empty staging. */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 4, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 20, 29, "r4", FERRY_OP_INSERT), &err), err);
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t__ferry_staging"), 10);
    assert_string_equal(q_text(db, "SELECT position FROM _ferry_checkpoints WHERE run_id = 4"),
                        "{\"shard\":0,\"key\":[29]}");
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 4, true);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 30, 34, "r4", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t"), 15);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t WHERE name = 'r4'"), 15);
    /* the resumed attempt's batch added to what the dead one committed */
    assert_int_equal(q_int(db, "SELECT run_rows FROM _ferry_checkpoints WHERE run_id = 4"), 15);
    assert_int_equal(q_int(db, "SELECT run_batches FROM _ferry_checkpoints WHERE run_id = 4"), 2);
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 5, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 2, "r5", FERRY_OP_INSERT), &err), err);
    sink_close(&h);
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "kv", "t", sc, FERRY_WRITE_REPLACE, &err), err);
    sink_begin(&h, 6, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 3, 3, "r6", FERRY_OP_INSERT), &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM t"), 1);
    assert_string_equal(q_text(db, "SELECT name FROM t"), "r6");
    sqlite3_close(db);
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_durability_visibility(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct sinkh h;
    /* per_apply: rows and checkpoint visible once apply returns. */
    sink_open(&h, "durability: per_apply\n");
    ASSERT_OK(sink_target(&h, "kv", "pa", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 7, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT), &err), err);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM pa"), 5);
    assert_string_equal(q_text(db, "SELECT position FROM _ferry_checkpoints WHERE resource = 'kv'"),
                        "{\"shard\":0,\"key\":[5]}");
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 6, 8, "a", FERRY_OP_INSERT), &err), err);
    assert_int_equal(q_int(db, "SELECT count(*) FROM pa"), 8);
    assert_string_equal(q_text(db, "SELECT position FROM _ferry_checkpoints WHERE resource = 'kv'"),
                        "{\"shard\":0,\"key\":[8]}");
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);

    /* at_commit: nothing visible before commit, everything after. */
    sink_open(&h, "durability: at_commit\n");
    struct ferry_sink_caps caps;
    sink_vt->capabilities(h.ctx, FERRY_WRITE_APPEND, &caps);
    assert_int_equal(caps.durability, FERRY_DURABLE_AT_COMMIT);
    ASSERT_OK(sink_target(&h, "kv2", "ac", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 8, false);
    struct ferry_batch *b1 = kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT);
    ASSERT_OK(sink_apply(&h, 0, b1, &err), err);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 6, 9, "a", FERRY_OP_INSERT), &err), err);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ac"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM _ferry_checkpoints WHERE run_id = 8"), 0);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ac"), 9);
    assert_string_equal(q_text(db, "SELECT position FROM _ferry_checkpoints WHERE run_id = 8"),
                        "{\"shard\":0,\"key\":[9]}");
    sink_close(&h);

    /* at_commit abort: nothing at all. */
    sink_open(&h, "durability: at_commit\n");
    ASSERT_OK(sink_target(&h, "kv3", "ab", sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 9, false);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT), &err), err);
    sink_vt->abort(h.ctx);
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ab"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM _ferry_checkpoints WHERE run_id = 9"), 0);
    sqlite3_close(db);
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_checkpoints_transactional(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct sinkh h;
    sink_open(&h, NULL);
    /* A fresh file has no checkpoints (and no table yet). */
    struct ferry_sink_checkpoint *cps = NULL;
    int n = -1;
    ASSERT_OK(sink_vt->checkpoints(h.ctx, "p1", &cps, &n, &err), err);
    assert_int_equal(n, 0);
    /* Opening and asking creates nothing: a pipeline refused before prepare leaves no file. */
    assert_int_not_equal(access(db_path, F_OK), 0);
    ASSERT_OK(sink_target(&h, "kv", "kv", sc, FERRY_WRITE_APPEND, &err), err);
    assert_int_equal(access(db_path, F_OK), 0);
    /* An append table declares no key, so a duplicate is a new row there; a unique index the
     * user added to it refuses one, which is how a row fails halfway through a batch here. */
    exec_sql(db_path, "CREATE UNIQUE INDEX kv_id ON kv (id)");
    sink_begin(&h, 11, false);
    struct ferry_batch *b = kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT);
    b->shard = 2;
    ASSERT_OK(sink_apply(&h, 0, b, &err), err);
    /* A batch that fails halfway (a refused row): neither its rows nor its checkpoint. */
    b = kv_batch(sc, &c, 4, 9, "dup", FERRY_OP_INSERT);
    b->shard = 2;
    assert_int_equal(sink_apply(&h, 0, b, &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "\"kv\""));
    /* The same through the multi-row statement (a duplicate deep inside a large batch). */
    b = kv_batch(sc, &c, 100, 400, "dup", FERRY_OP_INSERT);
    ASSERT_OK(sink_apply(&h, 0, kv_batch(sc, &c, 350, 350, "single", FERRY_OP_INSERT), &err), err);
    b->shard = 2;
    assert_int_equal(sink_apply(&h, 0, b, &err), FERRY_ESINK);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv"), 6);
    assert_int_equal(q_int(db, "SELECT count(*) FROM kv WHERE name = 'dup'"), 0);
    ASSERT_OK(sink_vt->checkpoints(h.ctx, "p1", &cps, &n, &err), err);
    assert_int_equal(n, 2); /* shard 2 from the first batch, shard 0 from "single" */
    assert_string_equal(cps[0].resource, "kv");
    assert_int_equal(cps[0].shard, 0);
    assert_string_equal(cps[0].position, "{\"shard\":0,\"key\":[350]}");
    assert_string_equal(cps[1].resource, "kv");
    assert_int_equal(cps[1].shard, 2);
    assert_int_equal(cps[1].run_id, 11);
    assert_string_equal(cps[1].position, "{\"shard\":0,\"key\":[5]}");
    ferry_sink_checkpoints_free(cps, n);
    ASSERT_OK(sink_vt->checkpoints(h.ctx, "other-pipeline", &cps, &n, &err), err);
    assert_int_equal(n, 0);
    /* Zero-row batches record a position only. */
    struct ferry_row_writer *rw = mk_rw(sc, "kv", &c);
    ferry_rw_set_shard(rw, 3);
    ASSERT_OK(ferry_rw_flush(rw, true, &err), err);
    ferry__rw_free(rw);
    ASSERT_OK(sink_apply(&h, 0, c.b[c.n - 1], &err), err);
    assert_string_equal(q_text(db, "SELECT position FROM _ferry_checkpoints WHERE shard = 3"),
                        "{\"shard\":3,\"done\":true}");
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    sqlite3_close(db);
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_digest_mismatch(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    const char *modes[] = {"durability: per_apply\n", "durability: at_commit\n"};
    for (int m = 0; m < 2; m++) {
        struct sinkh h;
        sink_open(&h, modes[m]);
        ASSERT_OK(sink_target(&h, "kv", m ? "mm2" : "mm1", sc, FERRY_WRITE_APPEND, &err), err);
        sink_begin(&h, 20 + m, false);
        struct ferry_batch *b = kv_batch(sc, &c, 1, 5, "a", FERRY_OP_INSERT);
        uint32_t real = ferry_batch_digest(b);
        b->digest = real ^ 0x10u; /* what a flipped bit between digest and sink looks like */
        struct ferry_receipt rc;
        memset(&rc, 0, sizeof rc);
        ASSERT_OK(sink_vt->apply(h.ctx, &h.t[0], b, &rc, &err), err);
        assert_int_equal(rc.write_crc, real);
        assert_int_not_equal(rc.write_crc, b->digest);
        assert_int_equal(rc.rows, 5);
        if (m == 1)
            sink_vt->abort(h.ctx); /* what the pipeline does on divergence */
        else
            ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
        sink_close(&h);
        sqlite3 *db = reader();
        assert_int_equal(q_int(db, m ? "SELECT count(*) FROM mm2" : "SELECT count(*) FROM mm1"), 0);
        assert_int_equal(q_int(db, "SELECT count(*) FROM _ferry_checkpoints WHERE run_id >= 20"),
                         0);
        sqlite3_close(db);
    }
    collect_free(&c);
    ferry_schema_unref(sc);
}

static void test_sink_schema_evolution(void **state)
{
    (void)state;
    struct ferry_error err;
    struct collect c = {0};
    static const struct fdef v1[] = {{"id", FERRY_TYPE_INT64, false, 1},
                                     {"a", FERRY_TYPE_INT64, true, 0}};
    static const struct fdef v2[] = {{"id", FERRY_TYPE_INT64, false, 1},
                                     {"a", FERRY_TYPE_INT32, true, 0},
                                     {"B", FERRY_TYPE_DECIMAL128, true, 0}};
    static const struct fdef v3[] = {{"id", FERRY_TYPE_INT64, false, 1},
                                     {"a", FERRY_TYPE_UTF8, true, 0}};
    struct ferry_schema *s1 = mk_schema(v1, 2), *s2 = mk_schema(v2, 3), *s3 = mk_schema(v3, 2);
    struct sinkh h;
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "ev", "ev", s1, FERRY_WRITE_UPSERT, &err), err);
    sink_begin(&h, 1, false);
    struct ferry_row_writer *rw = mk_rw(s1, "ev", &c);
    for (int i = 1; i <= 3; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        ferry_rw_int(rw, i);
        end_row(rw);
    }
    ASSERT_OK(sink_apply(&h, 0, flush(rw, &c), &err), err);
    ferry__rw_free(rw);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);

    /* A new column is added; a narrower integer fits the existing one. */
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, "ev", "ev", s2, FERRY_WRITE_UPSERT, &err), err);
    sink_begin(&h, 2, false);
    rw = mk_rw(s2, "ev", &c);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 4);
    ferry_rw_int(rw, 4);
    ferry_rw_dec128(rw, (struct ferry_decimal128){1250, 0});
    end_row(rw);
    ASSERT_OK(sink_apply(&h, 0, flush(rw, &c), &err), err);
    ferry__rw_free(rw);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT count(*) FROM ev"), 4);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ev WHERE \"B\" IS NULL"), 3);
    assert_string_equal(q_text(db, "SELECT \"B\" FROM ev WHERE id = 4"), "12.50");
    assert_string_equal(q_text(db, "SELECT type FROM pragma_table_info('ev') WHERE name = 'B'"),
                        "DECIMAL_TEXT(12,2)");

    /* A changed type is refused, naming table and column; the table is untouched. */
    sink_open(&h, NULL);
    assert_int_equal(sink_target(&h, "ev", "ev", s3, FERRY_WRITE_UPSERT, &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "table \"ev\" column \"a\""));
    assert_non_null(strstr(err.message, "utf8"));
    sink_close(&h);
    assert_int_equal(q_int(db, "SELECT count(*) FROM ev"), 4);
    sqlite3_close(db);
    collect_free(&c);
    ferry_schema_unref(s1);
    ferry_schema_unref(s2);
    ferry_schema_unref(s3);
}

static const char *const hostile_table = "we\"ird; DROP TABLE canary; --";
static const struct fdef hostile_fields[] = {
    {"k\"ey", FERRY_TYPE_INT64, false, 1},     {"a \"b\"", FERRY_TYPE_UTF8, true, 0},
    {"sp ace", FERRY_TYPE_INT32, true, 0},     {"semi;colon", FERRY_TYPE_TIMESTAMPTZ_US, true, 0},
    {"ünï ✓", FERRY_TYPE_DECIMAL128, true, 0},
};

static struct ferry_batch *hostile_batch(struct ferry_schema *sc, struct collect *c, int lo, int hi,
                                         enum ferry_op op)
{
    struct ferry_row_writer *rw = mk_rw(sc, "hostile", c);
    static const char *const vals[] = {"'); DROP TABLE canary; --", "\"quoted\"", "a,b\nc",
                                       "ünïcødé"};
    for (int i = lo; i <= hi; i++) {
        ferry_rw_begin(rw, op);
        ferry_rw_int(rw, i);
        ferry_rw_text(rw, vals[i % 4], strlen(vals[i % 4]));
        ferry_rw_int(rw, -i);
        ferry_rw_int(rw, INT64_C(1700000000000000) + i);
        ferry_rw_dec128(rw, (struct ferry_decimal128){(uint64_t)i * 100, 0});
        end_row(rw);
    }
    struct ferry_batch *b = flush(rw, c);
    ferry__rw_free(rw);
    return b;
}

static void test_hostile_identifiers(void **state)
{
    (void)state;
    struct ferry_error err;
    struct collect c = {0};
    struct ferry_schema *sc = mk_schema(hostile_fields, 5);
    mkdb("CREATE TABLE canary (x INTEGER); INSERT INTO canary VALUES (42);");
    /* Append writes a log table of its own (it declares no key, which upsert and merge
     * need); the keyed modes share one table, each starting from what the previous left. */
    const enum ferry_write_mode modes[] = {FERRY_WRITE_APPEND, FERRY_WRITE_UPSERT,
                                           FERRY_WRITE_MERGE, FERRY_WRITE_REPLACE};
    for (int m = 0; m < 4; m++) {
        struct sinkh h;
        sink_open(&h, m == 0 ? "table_prefix: 'log\"; '\n" : "table_prefix: 'x\"; '\n");
        ASSERT_OK(sink_target(&h, "hostile", hostile_table, sc, modes[m], &err), err);
        sink_begin(&h, 100 + m, false);
        ASSERT_OK(sink_apply(&h, 0, hostile_batch(sc, &c, 1, 8, FERRY_OP_INSERT), &err), err);
        ASSERT_OK(sink_apply(&h, 0,
                             hostile_batch(sc, &c, m == 3 ? 9 : 5, 10,
                                           m == 2 ? FERRY_OP_DELETE : FERRY_OP_UPDATE),
                             &err),
                  err);
        ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
        sink_close(&h);
    }
    sqlite3 *db = reader();
    assert_int_equal(q_int(db, "SELECT x FROM canary"), 42);
    assert_int_equal(q_int(db, "SELECT count(*) FROM canary"), 1);
    /* The log: both versions of keys 5..8, each with its exact values. */
    const char *logt = "FROM \"log\"\"; we\"\"ird; DROP TABLE canary; --\"";
    char lq[256];
    snprintf(lq, sizeof lq, "SELECT count(*) %s", logt);
    assert_int_equal(q_int(db, lq), 14);
    snprintf(lq, sizeof lq, "SELECT count(DISTINCT \"k\"\"ey\") %s", logt);
    assert_int_equal(q_int(db, lq), 10);
    snprintf(lq, sizeof lq,
             "SELECT count(*) %s WHERE \"k\"\"ey\" = 6 AND \"ünï ✓\" = '6.00' AND "
             "\"a \"\"b\"\"\" = 'a,b\nc' AND \"sp ace\" = -6",
             logt);
    assert_int_equal(q_int(db, lq), 2);
    assert_int_equal(q_int(db, "SELECT count(*) FROM "
                               "pragma_table_info('log\"; we\"ird; DROP TABLE canary; --') "
                               "WHERE pk > 0"),
                     0);
    assert_int_equal(q_int(db, "SELECT pk FROM "
                               "pragma_table_info('x\"; we\"ird; DROP TABLE canary; --') "
                               "WHERE name = 'k\"ey'"),
                     1);
    /* After the last mode (replace): exactly rows 1..10 with their exact values. */
    const char *q = "SELECT count(*) FROM \"x\"\"; we\"\"ird; DROP TABLE canary; --\"";
    assert_int_equal(q_int(db, q), 10);
    assert_string_equal(
        q_text(db, "SELECT \"a \"\"b\"\"\" FROM \"x\"\"; we\"\"ird; DROP TABLE canary; --\" "
                   "WHERE \"k\"\"ey\" = 4"),
        "'); DROP TABLE canary; --");
    assert_string_equal(q_text(db,
                               "SELECT \"ünï ✓\" FROM \"x\"\"; we\"\"ird; DROP TABLE canary; --\" "
                               "WHERE \"k\"\"ey\" = 7"),
                        "7.00");
    sqlite3_close(db);

    /* The source reads the hostile table back, with its key. */
    char yaml[600];
    snprintf(yaml, sizeof yaml, "path: '%s'\n", db_path);
    struct ferry_cfg *cfg = cfg_of(yaml);
    void *ctx;
    ASSERT_OK(src_vt->open(cfg, &ctx, &err), err);
    char name[128];
    snprintf(name, sizeof name, "x\"; %s", hostile_table);
    struct ferry_resource_spec spec = spec_of(name, FERRY_READ_FULL);
    struct ferry_schema *rs;
    char *plan;
    ASSERT_OK(src_vt->discover(ctx, &spec, &rs, &err), err);
    assert_int_equal(rs->n_fields, 5);
    assert_int_equal(rs->n_key, 1);
    assert_string_equal(rs->fields[rs->key[0]].name, "k\"ey");
    ASSERT_OK(src_vt->plan(ctx, &spec, rs, NULL, &plan, &err), err);
    struct collect r = {0};
    ASSERT_OK(read_all(src_vt, ctx, &spec, rs, plan, 4, &r, &err), err);
    assert_int_equal(collect_rows(&r), 10);
    /* Resume after key 6 of a hostile key column. */
    collect_free(&r);
    ASSERT_OK(read_shard(src_vt, ctx, &spec, rs, plan, 0, "{\"shard\":0,\"key\":[6]}", 4, &r, &err),
              err);
    assert_int_equal(collect_rows(&r), 4);
    assert_int_equal(ferry_col_int(r.b[0], 0, 0), 7);
    collect_free(&r);
    ferry_free(plan);
    ferry_schema_unref(rs);
    src_vt->close(ctx);
    ferry_cfg_free(cfg);
    collect_free(&c);
    ferry_schema_unref(sc);
}

/* ---- source tests -------------------------------------------------------------------------- */

struct srch {
    struct ferry_cfg *cfg;
    void *ctx;
};

static struct srch src_open(const char *extra)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "path: '%s'\n%s", db_path, extra ? extra : "");
    struct srch s;
    s.cfg = cfg_of(yaml);
    struct ferry_error err;
    ASSERT_OK(src_vt->open(s.cfg, &s.ctx, &err), err);
    return s;
}

static void src_close(struct srch *s)
{
    src_vt->close(s->ctx);
    ferry_cfg_free(s->cfg);
}

static void mkdb(const char *sql)
{
    char sub[600];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0777);
    snprintf(sub, sizeof sub, "%s/sub/dir", dir);
    mkdir(sub, 0777);
    exec_sql(db_path, sql);
}

static void test_source_discover(void **state)
{
    (void)state;
    struct ferry_error err;
    /* A missing file is named. */
    char yaml[600];
    snprintf(yaml, sizeof yaml, "path: '%s/nope.db'\n", dir);
    struct ferry_cfg *cfg = cfg_of(yaml);
    void *ctx;
    assert_int_equal(src_vt->open(cfg, &ctx, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "nope.db"));
    ferry_cfg_free(cfg);

    mkdb("CREATE TABLE t (a TINYINT, b SMALLINT, c INT, d INTEGER, e BIGINT, f REAL, g DOUBLE, "
         "h FLOAT4, i TEXT, j VARCHAR(20), k CHAR(3), l BLOB, m BOOLEAN, n DECIMAL(12,2), "
         "o NUMERIC(50,5), p DECIMAL_TEXT(38,10), q DATE, r TIME, s TIMESTAMP, t DATETIME, "
         "u TIMESTAMPTZ, v UUID, w JSON, x WEIRDTYPE, y, z INT4 NOT NULL, "
         "PRIMARY KEY (z, a));"
         "CREATE TABLE nokey (a TEXT, b INTEGER);"
         "CREATE VIEW v AS SELECT a, b FROM nokey;");
    static const enum ferry_type want[] = {
        FERRY_TYPE_INT8,         FERRY_TYPE_INT16,        FERRY_TYPE_INT64,
        FERRY_TYPE_INT64,        FERRY_TYPE_INT64,        FERRY_TYPE_FLOAT64,
        FERRY_TYPE_FLOAT64,      FERRY_TYPE_FLOAT32,      FERRY_TYPE_UTF8,
        FERRY_TYPE_UTF8,         FERRY_TYPE_UTF8,         FERRY_TYPE_BINARY,
        FERRY_TYPE_BOOL,         FERRY_TYPE_DECIMAL128,   FERRY_TYPE_DECIMAL_TEXT,
        FERRY_TYPE_DECIMAL128,   FERRY_TYPE_DATE32,       FERRY_TYPE_TIME64_US,
        FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_TIMESTAMPTZ_US,
        FERRY_TYPE_UUID,         FERRY_TYPE_JSON,         FERRY_TYPE_UTF8,
        FERRY_TYPE_UTF8,         FERRY_TYPE_INT32};
    struct srch s = src_open(NULL);
    struct ferry_resource_spec spec = spec_of("t", FERRY_READ_FULL);
    struct ferry_schema *sc;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(sc->n_fields, 26);
    for (int i = 0; i < 26; i++) {
        if (sc->fields[i].type != want[i]) fprintf(stderr, "column %s\n", sc->fields[i].name);
        assert_int_equal(sc->fields[i].type, want[i]);
    }
    assert_int_equal(sc->fields[13].precision, 12);
    assert_int_equal(sc->fields[13].scale, 2);
    assert_int_equal(sc->fields[15].precision, 38);
    assert_int_equal(sc->fields[15].scale, 10);
    assert_int_equal(sc->n_key, 2);
    assert_string_equal(sc->fields[sc->key[0]].name, "z");
    assert_string_equal(sc->fields[sc->key[1]].name, "a");
    assert_false(sc->fields[25].nullable);
    assert_true(sc->fields[1].nullable);
    ferry_schema_unref(sc);

    /* No declared key: keyed on the rowid, exposed as a column. */
    spec = spec_of("nokey", FERRY_READ_FULL);
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(sc->n_fields, 3);
    assert_string_equal(sc->fields[0].name, "rowid");
    assert_int_equal(sc->n_key, 1);
    assert_int_equal(sc->key[0], 0);
    ferry_schema_unref(sc);
    /* A view has no rowid: no key. */
    spec = spec_of("v", FERRY_READ_FULL);
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(sc->n_fields, 2);
    assert_int_equal(sc->n_key, 0);
    ferry_schema_unref(sc);
    /* Missing table, missing column, schema-qualified name. */
    spec = spec_of("missing", FERRY_READ_FULL);
    assert_int_equal(src_vt->discover(s.ctx, &spec, &sc, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "\"missing\""));
    char *cols[] = {"b", "zz", NULL};
    spec = spec_of("main.nokey", FERRY_READ_FULL);
    spec.columns = cols;
    spec.n_columns = 2;
    assert_int_equal(src_vt->discover(s.ctx, &spec, &sc, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "\"zz\""));
    spec.n_columns = 1;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(sc->n_fields, 1);
    ferry_schema_unref(sc);
    src_close(&s);
}

static void test_source_full_keyset(void **state)
{
    (void)state;
    struct ferry_error err;
    mkdb("CREATE TABLE k (id INTEGER PRIMARY KEY, v TEXT);"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
         "INSERT INTO k SELECT i * 3 - 500, 'v' || i FROM n;"
         "CREATE TABLE c (a TEXT, b INTEGER, v REAL, PRIMARY KEY (a, b));"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
         "INSERT INTO c SELECT 'k' || (i % 7), i, i / 2.0 FROM n;");
    struct srch s = src_open("shards: 3\n");
    struct ferry_resource_spec spec = spec_of("k", FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    assert_int_equal(plan_shards(plan), 3);
    int *seen = calloc(3001, sizeof *seen);
    for (int sh = 0; sh < 3; sh++) {
        struct collect c = {0};
        ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, sh, NULL, 100, &c, &err), err);
        int64_t n;
        int64_t *ids = collect_ints(&c, 0, &n);
        for (int64_t i = 0; i < n; i++) {
            seen[ids[i] + 500]++;
            if (i) assert_true(ids[i] > ids[i - 1]);
        }
        free(ids);
        collect_free(&c);
    }
    int total = 0;
    for (int i = 0; i <= 3000; i++) {
        assert_true(seen[i] <= 1);
        total += seen[i];
    }
    assert_int_equal(total, 1000);
    free(seen);
    /* Resume in shard 1 from a batch position. */
    struct collect a = {0}, b = {0};
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 1, NULL, 50, &a, &err), err);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 1, a.b[2]->position, 50, &b, &err), err);
    assert_int_equal(collect_rows(&b), collect_rows(&a) - 150);
    assert_int_equal(ferry_col_int(b.b[0], 0, 0), ferry_col_int(a.b[3], 0, 0));
    collect_free(&a);
    collect_free(&b);
    ferry_free(plan);
    ferry_schema_unref(sc);

    /* Composite text+integer key: one shard, tuple resume. */
    spec = spec_of("c", FERRY_READ_FULL);
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    assert_int_equal(plan_shards(plan), 1);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 13, &a, &err), err);
    assert_int_equal(collect_rows(&a), 300);
    for (int k = 0; k < a.n - 1; k++) {
        ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, a.b[k]->position, 13, &b, &err),
                  err);
        assert_int_equal(collect_rows(&b), 300 - 13 * (k + 1));
        if (collect_rows(&b) > 0) {
            struct ferry_batch *x = ferry_batch_slice(b.b[0], 0, 1);
            struct ferry_batch *y = ferry_batch_slice(a.b[k + 1], 0, 1);
            assert_int_equal(ferry_batch_digest(x), ferry_batch_digest(y));
            ferry_batch_unref(x);
            ferry_batch_unref(y);
        }
        collect_free(&b);
    }
    collect_free(&a);
    ferry_free(plan);
    ferry_schema_unref(sc);
    src_close(&s);
}

static char *cursor_ua[] = {"updated_at", NULL};

/* a holds shard 0 of plan read in batches of batch_rows rows (ids in column 0): reading the
 * shard again from the position of every step-th batch gives exactly the rows after that
 * batch, in the same order. */
static void assert_resumes(struct srch *s, const struct ferry_resource_spec *spec,
                           struct ferry_schema *sc, const char *plan,
                           const struct collect *a, int batch_rows, int step)
{
    struct ferry_error err;
    int64_t n;
    int64_t *ids = collect_ints(a, 0, &n);
    for (int k = 0; k < a->n - 1; k += step) {
        struct collect b = {0};
        ASSERT_OK(read_shard(src_vt, s->ctx, spec, sc, plan, 0, a->b[k]->position, batch_rows,
                             &b, &err),
                  err);
        int64_t m;
        int64_t *rest = collect_ints(&b, 0, &m);
        assert_int_equal(m, n - (int64_t)batch_rows * (k + 1));
        for (int64_t i = 0; i < m; i++)
            assert_int_equal(rest[i], ids[(int64_t)batch_rows * (k + 1) + i]);
        free(rest);
        collect_free(&b);
    }
    free(ids);
}

/* The ids (column 0) of a, in order, are exactly want[0..count). */
static void assert_ids(const struct collect *a, const int64_t *want, int64_t count)
{
    int64_t n;
    int64_t *ids = collect_ints(a, 0, &n);
    assert_int_equal(n, count);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
}

static void test_source_incremental_ties(void **state)
{
    (void)state;
    struct ferry_error err;
    /* 1000 rows share only 4 cursor values: every batch boundary falls inside a tie. */
    mkdb("CREATE TABLE e (id INTEGER PRIMARY KEY, updated_at TIMESTAMPTZ NOT NULL, v TEXT);"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
         "INSERT INTO e SELECT (i * 7919) % 1000 + 1, "
         "'2024-01-0' || (1 + i % 4) || ' 12:00:00.000000+00:00', 'v' || i FROM n;");
    struct srch s = src_open(NULL);
    struct ferry_resource_spec spec = spec_of("e", FERRY_READ_INCREMENTAL);
    spec.cursor = cursor_ua;
    spec.n_cursor = 1;
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    struct collect a = {0};
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 7, &a, &err), err);
    int64_t n;
    int64_t *ids = collect_ints(&a, 0, &n);
    assert_int_equal(n, 1000);
    int *seen = calloc(1001, sizeof *seen);
    for (int64_t i = 0; i < n; i++)
        seen[ids[i]]++;
    for (int i = 1; i <= 1000; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    /* Resuming after any batch gives exactly the rest, in the same order. */
    assert_resumes(&s, &spec, sc, plan, &a, 7, 9);
    char *cp = last_keyed_position(&a);
    assert_non_null(strstr(cp, "\"key\":[1704369600000000,"));
    free(ids);
    collect_free(&a);
    ferry_free(plan);

    /* New rows at the newest cursor value with higher ids, and at an older one. */
    exec_sql(db_path, "INSERT INTO e VALUES (1001, '2024-01-04 12:00:00.000000+00:00', 'late tie'),"
                      "(1002, '2024-01-04 12:00:00.000000+00:00', 'late tie'),"
                      "(1003, '2024-01-05 00:00:00.000000+00:00', 'newer'),"
                      "(1004, '2024-01-01 00:00:00.000000+00:00', 'older');");
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, cp, &plan, &err), err);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 7, &a, &err), err);
    assert_ids(&a, (const int64_t[]){1001, 1002, 1003}, 3);
    /* The upper bound is frozen at plan time: a row added after planning waits. */
    exec_sql(db_path,
             "INSERT INTO e VALUES (1005, '2024-01-06 00:00:00.000000+00:00', 'after plan');");
    collect_free(&a);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 7, &a, &err), err);
    assert_int_equal(collect_rows(&a), 3);
    collect_free(&a);
    ferry_free(plan);
    free(cp);
    ferry_schema_unref(sc);
    src_close(&s);
}

struct cancel_ctx {
    void *src;
    int batches;
};

static int cancel_emit(void *p, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct cancel_ctx *cc = p;
    cc->batches++;
    ferry_batch_unref(b);
    src_vt->cancel(cc->src); /* what the runner does from another thread */
    return FERRY_OK;
}

static void test_source_cancel(void **state)
{
    (void)state;
    struct ferry_error err;
    mkdb("CREATE TABLE big (id INTEGER PRIMARY KEY, v TEXT);"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
         "INSERT INTO big SELECT i, 'v' FROM n;");
    struct srch s = src_open(NULL);
    struct ferry_resource_spec spec = spec_of("big", FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    struct cancel_ctx cc = {s.ctx, 0};
    struct ferry_rw_limits lim = {.rows = 100};
    struct ferry_row_writer *rw = ferry__rw_new(sc, "big", lim, cancel_emit, &cc);
    assert_int_equal(src_vt->extract(s.ctx, &spec, sc, plan, 0, NULL, rw, &err), FERRY_ECANCELED);
    assert_non_null(strstr(err.message, "\"big\""));
    assert_true(cc.batches >= 1 && cc.batches < 200);
    ferry__rw_free(rw);
    ferry_free(plan);
    ferry_schema_unref(sc);
    src_close(&s);
}

static void test_source_incremental_forms(void **state)
{
    (void)state;
    struct ferry_error err;
    mkdb("CREATE TABLE iu (id INTEGER PRIMARY KEY, updated_at TIMESTAMP);"
         "INSERT INTO iu VALUES (1, 1000), (2, 2000), (3, 2000), (4, NULL), (5, NULL);"
         "CREATE TABLE bad (id INTEGER PRIMARY KEY, updated_at TIMESTAMPTZ);"
         "INSERT INTO bad VALUES (1, '2024-01-31T14:00:00+02:00');"
         "CREATE TABLE st (id INTEGER PRIMARY KEY, updated_at TIMESTAMP NOT NULL);"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) "
         "INSERT INTO st SELECT i, '2024-01-0' || (1 + i % 3) || ' 10:00:00' FROM n;"
         "CREATE TABLE sz (id INTEGER PRIMARY KEY, updated_at TIMESTAMPTZ NOT NULL);"
         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) "
         "INSERT INTO sz SELECT i, '2024-01-0' || (1 + i % 3) || 'T10:00:00.' || (100 + i % 2) || "
         "'Z' FROM n;");
    struct srch s = src_open(NULL);
    struct ferry_resource_spec spec = spec_of("iu", FERRY_READ_INCREMENTAL);
    spec.cursor = cursor_ua;
    spec.n_cursor = 1;
    struct ferry_schema *sc;
    char *plan;
    /* Integer microseconds; NULL cursors are read by the first run only, first. */
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    struct collect a = {0};
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 2, &a, &err), err);
    assert_ids(&a, (const int64_t[]){4, 5, 1, 2, 3}, 5);
    /* Resume inside the NULL rows. */
    assert_string_equal(a.b[0]->position, "{\"shard\":0,\"key\":[null,5]}");
    struct collect b = {0};
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, a.b[0]->position, 2, &b, &err), err);
    assert_int_equal(collect_rows(&b), 3);
    collect_free(&b);
    char *cp = last_keyed_position(&a);
    collect_free(&a);
    ferry_free(plan);
    exec_sql(db_path, "INSERT INTO iu VALUES (6, NULL), (7, 2000), (8, 3000);");
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, cp, &plan, &err), err);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 2, &a, &err), err);
    assert_ids(&a, (const int64_t[]){7, 8}, 2);
    collect_free(&a);
    ferry_free(plan);
    free(cp);
    ferry_schema_unref(sc);

    /* Timestamps stored in SQLite's own CURRENT_TIMESTAMP form, or as 'T...Z' with a fixed
     * fraction: bounds are written in the same style, ties across batches hold. */
    const char *styled[] = {"st", "sz"};
    for (int t = 0; t < 2; t++) {
        spec.table = (char *)styled[t];
        ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
        ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
        assert_non_null(strstr(plan, t == 0 ? "\" 0\"" : "\"T3Z\""));
        ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 4, &a, &err), err);
        assert_int_equal(collect_rows(&a), 30);
        assert_resumes(&s, &spec, sc, plan, &a, 4, 1);
        cp = last_keyed_position(&a);
        collect_free(&a);
        ferry_free(plan);
        char sql[256];
        snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (31, '%s'), (32, '%s');", styled[t],
                 t == 0 ? "2024-01-03 10:00:00" : "2024-01-03T10:00:00.101Z",
                 t == 0 ? "2024-01-02 10:00:00" : "2024-01-03T10:00:00.100Z");
        exec_sql(db_path, sql);
        ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, cp, &plan, &err), err);
        ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 4, &a, &err), err);
        assert_ids(&a, (const int64_t[]){31}, 1);
        free(cp);
        collect_free(&a);
        ferry_free(plan);
        ferry_schema_unref(sc);
    }

    /* Timestamps as text in a form that cannot be reproduced (a local offset): refused
     * with the reason. */
    spec.table = "bad";
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), FERRY_EUNSUPPORTED);
    assert_non_null(strstr(err.message, "updated_at"));
    assert_non_null(strstr(err.message, "2024-01-31T14:00:00+02:00"));
    ferry_schema_unref(sc);
    /* Full reads of it still work and parse the value. */
    spec.mode = FERRY_READ_FULL;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    ASSERT_OK(read_shard(src_vt, s.ctx, &spec, sc, plan, 0, NULL, 2, &a, &err), err);
    assert_int_equal(ferry_col_int(a.b[0], 1, 0), INT64_C(1706702400000000));
    collect_free(&a);
    ferry_free(plan);
    ferry_schema_unref(sc);
    /* A wrong cursor column is named. */
    spec.mode = FERRY_READ_INCREMENTAL;
    spec.table = "iu";
    char *wrong[] = {"changed", NULL};
    spec.cursor = wrong;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(src_vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "\"changed\""));
    ferry_schema_unref(sc);
    src_close(&s);
}

/* Reads a sample table, writes it with the sqlite sink, reads it back with the sqlite
 * source: the batches must have equal digests (same types, values, nulls and order). */
static void round_trip(const char *table, enum ferry_read_mode mode)
{
    struct ferry_error err;
    struct ferry_cfg *scfg = cfg_of("rows: 3000\nclock: 2\nseed: 11\n");
    void *sctx;
    ASSERT_OK(sample_vt->open(scfg, &sctx, &err), err);
    struct ferry_resource_spec spec = spec_of(table, mode);
    if (mode == FERRY_READ_INCREMENTAL) {
        spec.cursor = cursor_ua;
        spec.n_cursor = 1;
    }
    struct ferry_resource_spec full = spec_of(table, FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    struct collect orig = {0}, back = {0}, all = {0};
    ASSERT_OK(sample_vt->discover(sctx, &spec, &sc, &err), err);
    ASSERT_OK(sample_vt->plan(sctx, &full, sc, NULL, &plan, &err), err);
    ASSERT_OK(read_all(sample_vt, sctx, &full, sc, plan, 3000, &all, &err), err);
    ferry_free(plan);
    ASSERT_OK(sample_vt->plan(sctx, &spec, sc, NULL, &plan, &err), err);
    ASSERT_OK(read_all(sample_vt, sctx, &spec, sc, plan, 400, &orig, &err), err);
    ferry_free(plan);

    struct sinkh h;
    sink_open(&h, NULL);
    ASSERT_OK(sink_target(&h, table, table, sc, FERRY_WRITE_APPEND, &err), err);
    sink_begin(&h, 1, false);
    for (int i = 0; i < all.n; i++)
        ASSERT_OK(sink_apply(&h, 0, all.b[i], &err), err);
    ASSERT_OK(sink_vt->commit(h.ctx, &err), err);
    sink_close(&h);

    struct srch s = src_open(NULL);
    struct ferry_schema *rs;
    /* An append table declares no key: undeclared, the source keys it on its rowid... */
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &rs, &err), err);
    assert_int_equal(rs->n_fields, sc->n_fields + 1);
    assert_string_equal(rs->fields[0].name, "rowid");
    assert_int_equal(rs->n_key, 1);
    assert_int_equal(rs->key[0], 0);
    ferry_schema_unref(rs);
    /* ...so the reader declares it, as a user would with `key: [id]`. */
    static char *key_id[] = {"id", NULL};
    spec.key = key_id;
    spec.n_key = 1;
    ASSERT_OK(src_vt->discover(s.ctx, &spec, &rs, &err), err);
    assert_int_equal(rs->n_fields, sc->n_fields);
    for (int f = 0; f < sc->n_fields; f++) {
        assert_string_equal(rs->fields[f].name, sc->fields[f].name);
        assert_int_equal(rs->fields[f].type, sc->fields[f].type);
        assert_int_equal(rs->fields[f].nullable, sc->fields[f].nullable);
        assert_int_equal(rs->fields[f].key_pos, sc->fields[f].key_pos);
    }
    ASSERT_OK(src_vt->plan(s.ctx, &spec, rs, NULL, &plan, &err), err);
    ASSERT_OK(read_all(src_vt, s.ctx, &spec, rs, plan, 400, &back, &err), err);
    assert_int_equal(collect_rows(&back), 3000);
    assert_int_equal(back.n, orig.n);
    for (int i = 0; i < orig.n; i++) {
        assert_int_equal(back.b[i]->length, orig.b[i]->length);
        assert_int_equal(ferry_batch_digest(back.b[i]), ferry_batch_digest(orig.b[i]));
        /* Same positions, so a resume could switch between them. */
        assert_string_equal(back.b[i]->position, orig.b[i]->position);
    }
    collect_free(&orig);
    collect_free(&back);
    collect_free(&all);
    ferry_free(plan);
    ferry_schema_unref(rs);
    ferry_schema_unref(sc);
    src_close(&s);
    sample_vt->close(sctx);
    ferry_cfg_free(scfg);
}

static void test_round_trip_orders(void **state)
{
    (void)state;
    round_trip("orders", FERRY_READ_FULL);
}

static void test_round_trip_users(void **state)
{
    (void)state;
    round_trip("users", FERRY_READ_FULL);
}

static void test_round_trip_incremental(void **state)
{
    (void)state;
    round_trip("users", FERRY_READ_INCREMENTAL);
}

static void test_null_sink(void **state)
{
    (void)state;
    struct ferry_error err;
    const struct ferry_sink_vtable *nv = ferry_sink_find("null");
    struct ferry_cfg *cfg = cfg_of("{}\n");
    void *ctx;
    ASSERT_OK(nv->open(cfg, &ctx, &err), err);
    struct ferry_sink_caps caps;
    nv->capabilities(ctx, FERRY_WRITE_MERGE, &caps);
    assert_int_equal(caps.write_modes, 0xfu);
    assert_int_equal(caps.durability, FERRY_DURABLE_PER_APPLY);
    struct ferry_schema *sc = mk_schema(kv_fields, 3);
    struct collect c = {0};
    struct ferry_batch *b = kv_batch(sc, &c, 1, 100, "x", FERRY_OP_INSERT);
    struct ferry_target t = {.index = 0, .resource = "kv", .table = "kv", .schema = sc};
    struct ferry_session_info si = {.pipeline = "p"};
    ASSERT_OK(nv->prepare(ctx, &t, &err), err);
    ASSERT_OK(nv->begin(ctx, &si, &err), err);
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    ASSERT_OK(nv->apply(ctx, &t, b, &rc, &err), err);
    assert_int_equal(rc.rows, 100);
    assert_int_equal(rc.bytes, (int64_t)b->bytes);
    assert_int_equal(rc.write_crc, ferry_batch_digest(b));
    ASSERT_OK(nv->commit(ctx, &err), err);
    nv->abort(ctx);
    nv->close(ctx);
    ferry_cfg_free(cfg);
    collect_free(&c);
    ferry_schema_unref(sc);
}

int main(void)
{
    sink_vt = ferry_sink_find("sqlite");
    src_vt = ferry_source_find("sqlite");
    sample_vt = ferry_source_find("sample");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sink_append_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_float_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_append_is_a_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_upsert_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_replace_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_durability_visibility, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_checkpoints_transactional, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_digest_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_schema_evolution, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_identifiers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_discover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_full_keyset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_incremental_ties, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_incremental_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_orders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_incremental, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_sink, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
