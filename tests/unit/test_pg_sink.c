/* tests/unit/test_pg_sink.c - the postgres sink's vtable against a real PostgreSQL: merge
 * with deletes and repeated keys inside one batch (no source emits deletes yet), the
 * transactional checkpoint, encoded CRCs, digest mismatch, policy refusals.
 *
 * Needs a server: without FERRY_PG_URL the program runs itself again under
 * tests/pg/pg.sh (which starts a throw-away PostgreSQL and stops it afterwards). If the
 * server cannot start the test fails; it never skips. */
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "batch/builder.h"
#include "ferry/config.h"
#include "ferry/connector.h"
#include "ferry/digest.h"

static const struct ferry_sink_vtable *vt;
static PGconn *db;

static char *one(const char *sql)
{
    PGresult *r = PQexec(db, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(db));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    char *v = strdup(PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return v;
}

static void expect_sql(const char *sql, const char *want)
{
    char *got = one(sql);
    if (strcmp(got, want) != 0) fprintf(stderr, "%s\n  got  %s\n  want %s\n", sql, got, want);
    assert_string_equal(got, want);
    free(got);
}

static int take(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    (void)err;
    struct ferry_batch **slot = ctx;
    ferry_batch_unref(*slot);
    *slot = b;
    return FERRY_OK;
}

static struct ferry_schema *schema(void)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

struct row {
    enum ferry_op op;
    int64_t id;
    const char *v;
};

static struct ferry_batch *batch(struct ferry_schema *s, const struct row *rows, int n,
                                 const char *position)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "items", lim, take, &out);
    struct ferry_error err;
    for (int i = 0; i < n; i++) {
        ferry_rw_begin(rw, rows[i].op);
        ferry_rw_int(rw, rows[i].id);
        if (rows[i].v)
            ferry_rw_text(rw, rows[i].v, strlen(rows[i].v));
        else
            ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(out);
    if (position) assert_int_equal(ferry_batch_set_position(out, position), FERRY_OK);
    out->digest = ferry_batch_digest(out);
    return out;
}

static void *open_sink(const char *schema_name, const char *extra)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, "url: env:FERRY_PG_URL\nschema: %s\n%s", schema_name, extra);
    struct ferry_cfg *cfg;
    struct ferry_error err;
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "test", &cfg, &err), FERRY_OK);
    void *ctx = NULL;
    int rc = vt->open(cfg, &ctx, &err);
    if (rc != FERRY_OK) fprintf(stderr, "open: %s\n", err.message);
    assert_int_equal(rc, FERRY_OK);
    assert_int_equal(ferry_cfg_check_unused(cfg, &err), FERRY_OK);
    ferry_cfg_free(cfg);
    return ctx;
}

static void apply_ok(void *ctx, const struct ferry_target *t, struct ferry_batch *b)
{
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    struct ferry_error err;
    int code = vt->apply(ctx, t, b, &rc, &err);
    if (code != FERRY_OK) fprintf(stderr, "apply: %s\n", err.message);
    assert_int_equal(code, FERRY_OK);
    assert_int_equal(rc.write_crc, b->digest);
    assert_true(rc.has_encoded_crc);
    if (b->length > 0) assert_int_not_equal(rc.encoded_crc, 0);
    assert_int_equal(rc.rows, b->length);
}

/* Merge applies a batch as if its rows ran in order: the last operation of each key wins. */
static void test_merge_deletes(void **state)
{
    (void)state;
    for (int at_commit = 0; at_commit < 2; at_commit++) {
        const char *sch = at_commit ? "merge_c" : "merge_p";
        void *ctx = open_sink(sch, at_commit ? "durability: at_commit\n" : "");
        struct ferry_sink_caps caps;
        vt->capabilities(ctx, FERRY_WRITE_MERGE, &caps);
        assert_true(caps.encoded_integrity && caps.transactional_checkpoint && caps.deletes);
        assert_int_equal(caps.durability,
                         at_commit ? FERRY_DURABLE_AT_COMMIT : FERRY_DURABLE_PER_APPLY);
        struct ferry_schema *s = schema();
        struct ferry_target t = {.index = 0,
                                 .resource = "items",
                                 .table = "items",
                                 .schema = s,
                                 .mode = FERRY_WRITE_MERGE};
        struct ferry_session_info run = {.pipeline = "merge-test", .run_id = 7};
        struct ferry_error err;
        assert_int_equal(vt->prepare(ctx, &t, &err), FERRY_OK);
        assert_int_equal(vt->begin(ctx, &run, &err), FERRY_OK);
        const struct row r1[] = {
            {FERRY_OP_INSERT, 1, "a"}, {FERRY_OP_INSERT, 2, "b"}, {FERRY_OP_INSERT, 3, "c"}};
        struct ferry_batch *b1 = batch(s, r1, 3, "{\"shard\":0,\"key\":[3]}");
        apply_ok(ctx, &t, b1);
        const struct row r2[] = {{FERRY_OP_UPDATE, 2, "b2"},    {FERRY_OP_DELETE, 3, NULL},
                                 {FERRY_OP_INSERT, 4, "d"},     {FERRY_OP_INSERT, 5, "e"},
                                 {FERRY_OP_DELETE, 5, NULL},    {FERRY_OP_DELETE, 1, NULL},
                                 {FERRY_OP_INSERT, 1, "again"}, {FERRY_OP_DELETE, 99, NULL}};
        struct ferry_batch *b2 = batch(s, r2, 8, "{\"shard\":0,\"key\":[99]}");
        apply_ok(ctx, &t, b2);
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '') FROM %s.items",
                 sch);
        /* at_commit: nothing visible from another connection before commit. */
        expect_sql(sql, at_commit ? "" : "1:again,2:b2,4:d");
        assert_int_equal(vt->commit(ctx, &err), FERRY_OK);
        expect_sql(sql, "1:again,2:b2,4:d");
        expect_sql("SELECT position || ' ' || run_id FROM _ferry.checkpoints WHERE pipeline = "
                   "'merge-test' AND resource = 'items' AND shard = 0",
                   "{\"shard\":0,\"key\":[99]} 7");
        struct ferry_sink_checkpoint *cps = NULL;
        int n = 0;
        assert_int_equal(vt->checkpoints(ctx, "merge-test", &cps, &n, &err), FERRY_OK);
        assert_int_equal(n, 1);
        assert_string_equal(cps[0].resource, "items");
        assert_int_equal(cps[0].run_id, 7);
        /* what the run committed through the row: both batches, as their receipts count */
        assert_true(cps[0].has_counts);
        assert_int_equal(cps[0].rows, 11);
        assert_int_equal(cps[0].batches, 2);
        assert_int_equal(cps[0].bytes, (int64_t)(b1->bytes + b2->bytes));
        ferry_sink_checkpoints_free(cps, n);
        ferry_batch_unref(b1);
        ferry_batch_unref(b2);
        ferry_schema_unref(s);
        vt->close(ctx);
        PQclear(PQexec(db, "DELETE FROM _ferry.checkpoints WHERE pipeline = 'merge-test'"));
    }
}

/* The checkpoint row's run counts: a table an older ferry made gets the columns, its rows
 * stay "not counted" for the rest of their run, and a new run counts from zero; a later
 * session of the same run (a resumed attempt) adds to them. */
static struct ferry_sink_checkpoint counts_of(void *ctx, const char *pipeline)
{
    struct ferry_sink_checkpoint *cps = NULL, c;
    int n = 0;
    struct ferry_error err;
    assert_int_equal(vt->checkpoints(ctx, pipeline, &cps, &n, &err), FERRY_OK);
    assert_int_equal(n, 1);
    c = cps[0];
    c.resource = c.position = NULL;
    ferry_sink_checkpoints_free(cps, n);
    return c;
}

static void one_session(struct ferry_target *t, int64_t run_id, int nrows, int key)
{
    void *ctx = open_sink("counts", "");
    struct ferry_session_info run = {.pipeline = "counts-test", .run_id = run_id};
    struct ferry_error err;
    assert_int_equal(vt->prepare(ctx, t, &err), FERRY_OK);
    assert_int_equal(vt->begin(ctx, &run, &err), FERRY_OK);
    struct row r[3];
    for (int i = 0; i < nrows; i++)
        r[i] = (struct row){FERRY_OP_INSERT, key + i, "x"};
    char pos[64];
    snprintf(pos, sizeof pos, "{\"shard\":0,\"key\":[%d]}", key + nrows - 1);
    struct ferry_batch *b = batch(t->schema, r, nrows, pos);
    apply_ok(ctx, t, b);
    assert_int_equal(vt->commit(ctx, &err), FERRY_OK);
    ferry_batch_unref(b);
    vt->close(ctx);
}

static void test_checkpoint_counts(void **state)
{
    (void)state;
    PQclear(PQexec(db, "ALTER TABLE _ferry.checkpoints RENAME TO checkpoints_kept"));
    PQclear(PQexec(db, "CREATE TABLE _ferry.checkpoints (pipeline text NOT NULL, resource text "
                       "NOT NULL, shard integer NOT NULL, run_id bigint NOT NULL, position text, "
                       "updated_at timestamptz NOT NULL DEFAULT now(), "
                       "PRIMARY KEY (pipeline, resource, shard))"));
    PQclear(PQexec(db, "INSERT INTO _ferry.checkpoints (pipeline, resource, shard, run_id, "
                       "position) VALUES ('counts-test', 'items', 0, 3, '{}')"));
    void *ctx = open_sink("counts", "");
    struct ferry_schema *s = schema();
    struct ferry_target t = {.index = 0, .resource = "items", .table = "items", .schema = s,
                             .mode = FERRY_WRITE_UPSERT};
    struct ferry_sink_checkpoint c = counts_of(ctx, "counts-test"); /* before any begin */
    assert_false(c.has_counts);
    one_session(&t, 3, 2, 1); /* the same run as the old row: still not counted */
    c = counts_of(ctx, "counts-test");
    assert_false(c.has_counts);
    assert_int_equal(c.run_id, 3);
    one_session(&t, 4, 3, 10); /* a new run counts from zero */
    c = counts_of(ctx, "counts-test");
    assert_true(c.has_counts);
    assert_int_equal(c.rows, 3);
    assert_int_equal(c.batches, 1);
    one_session(&t, 4, 2, 20); /* a later attempt of that run adds */
    c = counts_of(ctx, "counts-test");
    assert_true(c.has_counts);
    assert_int_equal(c.run_id, 4);
    assert_int_equal(c.rows, 5);
    assert_int_equal(c.batches, 2);
    assert_true(c.bytes > 0);
    vt->close(ctx);
    ferry_schema_unref(s);
    PQclear(PQexec(db, "DROP TABLE _ferry.checkpoints"));
    PQclear(PQexec(db, "ALTER TABLE _ferry.checkpoints_kept RENAME TO checkpoints"));
}

/* ---- one key changed several times in a batch, under both SQL paths ---------------------- */

/* A row of the mixed batches: `mark` is the soft_delete column (0: NULL). */
struct mrow {
    enum ferry_op op;
    int64_t id;
    const char *v;
    int64_t mark;
};

enum { MAX_KEY = 16 };

/* What the destination holds, applied row by row in batch order (the contract). */
struct model {
    bool live[MAX_KEY];
    const char *v[MAX_KEY];
    int64_t mark[MAX_KEY];
};

static void model_apply(struct model *m, enum ferry_write_mode mode, bool soft,
                        const struct mrow *r)
{
    int64_t k = r->id;
    if (r->op != FERRY_OP_DELETE || mode == FERRY_WRITE_UPSERT) {
        m->live[k] = true;
        m->v[k] = r->v;
        m->mark[k] = r->mark;
    } else if (soft) {
        if (m->live[k]) m->mark[k] = r->mark; /* marked, values kept */
    } else {
        m->live[k] = false;
    }
}

static void model_text(const struct model *m, bool soft, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < MAX_KEY && n < len; k++) {
        if (!m->live[k]) continue;
        char mark[24] = "~";
        if (m->mark[k]) snprintf(mark, sizeof mark, "%" PRId64, m->mark[k]);
        n += (size_t)snprintf(buf + n, len - n, "%s%d:%s%s%s", n ? "," : "", k,
                              m->v[k] ? m->v[k] : "~", soft ? ":" : "", soft ? mark : "");
    }
}

static struct ferry_schema *mschema(bool soft)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(s, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    if (soft)
        assert_int_equal(ferry_schema_add_field(s, "gone", FERRY_TYPE_INT64, true, NULL), FERRY_OK);
    s->fields[0].key_pos = 1;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    s->soft_delete = soft ? 3 : 0;
    return s;
}

static struct ferry_batch *mbatch(struct ferry_schema *s, const struct mrow *rows, int n,
                                  enum ferry_write_mode mode, const char *position)
{
    struct ferry_batch *out = NULL;
    struct ferry_rw_limits lim = {.rows = 1000, .bytes = INT64_MAX};
    struct ferry_row_writer *rw = ferry__rw_new(s, "items", lim, take, &out);
    struct ferry_error err;
    for (int i = 0; i < n; i++) {
        if (mode == FERRY_WRITE_UPSERT && rows[i].op == FERRY_OP_DELETE) continue;
        ferry_rw_begin(rw, rows[i].op);
        ferry_rw_int(rw, rows[i].id);
        if (rows[i].v)
            ferry_rw_text(rw, rows[i].v, strlen(rows[i].v));
        else
            ferry_rw_null(rw);
        if (s->soft_delete && rows[i].mark)
            ferry_rw_int(rw, rows[i].mark);
        else if (s->soft_delete)
            ferry_rw_null(rw);
        assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    ferry__rw_free(rw);
    assert_non_null(out);
    assert_int_equal(ferry_batch_set_position(out, position), FERRY_OK);
    out->digest = ferry_batch_digest(out);
    return out;
}

/* Batches: keys 1-6 inserted; then one key inserted, updated, deleted and inserted again,
 * others deleted and re-inserted, inserted and deleted, deleted without existing, updated
 * twice; then inserts only with keys twice (new and existing: the plain statement refuses
 * them, the ordered one applies them); then inserts only, each key once. */
static const struct mrow mix1[] = {{FERRY_OP_INSERT, 1, "1a", 0}, {FERRY_OP_INSERT, 2, "2a", 0},
                                   {FERRY_OP_INSERT, 3, "3a", 0}, {FERRY_OP_INSERT, 4, "4a", 0},
                                   {FERRY_OP_INSERT, 5, "5a", 0}, {FERRY_OP_INSERT, 6, "6a", 0}};
static const struct mrow mix2[] = {
    {FERRY_OP_UPDATE, 1, "1b", 0},   {FERRY_OP_DELETE, 2, NULL, 21}, {FERRY_OP_INSERT, 7, "7a", 0},
    {FERRY_OP_DELETE, 1, NULL, 11},  {FERRY_OP_UPDATE, 3, "3b", 0},  {FERRY_OP_INSERT, 8, "8a", 0},
    {FERRY_OP_INSERT, 2, "2b", 0},   {FERRY_OP_UPDATE, 7, "7b", 0},  {FERRY_OP_DELETE, 9, NULL, 91},
    {FERRY_OP_INSERT, 1, "1c", 0},   {FERRY_OP_DELETE, 8, NULL, 81}, {FERRY_OP_DELETE, 7, NULL, 71},
    {FERRY_OP_DELETE, 4, NULL, 41},  {FERRY_OP_UPDATE, 3, "3c", 0},  {FERRY_OP_DELETE, 2, NULL, 22},
    {FERRY_OP_INSERT, 10, "10a", 0}, {FERRY_OP_UPDATE, 1, "1d", 0},  {FERRY_OP_INSERT, 7, "7c", 0}};
static const struct mrow mix3[] = {{FERRY_OP_INSERT, 11, "11a", 0},
                                   {FERRY_OP_INSERT, 5, "5b", 0},
                                   {FERRY_OP_INSERT, 11, "11b", 0},
                                   {FERRY_OP_INSERT, 5, "5c", 0},
                                   {FERRY_OP_INSERT, 12, "12a", 0}};
static const struct mrow mix4[] = {{FERRY_OP_INSERT, 6, "6b", 0},
                                   {FERRY_OP_INSERT, 13, "13a", 0},
                                   {FERRY_OP_INSERT, 12, "12b", 0}};

static void run_mix(enum ferry_write_mode mode, bool soft, bool no_merge)
{
    char sch[32];
    snprintf(sch, sizeof sch, "mix_%s%s_%s", ferry_write_mode_name(mode), soft ? "_soft" : "",
             no_merge ? "old" : "new");
    setenv("FERRY_PG_NO_MERGE", no_merge ? "1" : "0", 1);
    /* The table made beforehand, with a trigger noting the statement that wrote each row. */
    char ddl[512];
    snprintf(ddl, sizeof ddl,
             "CREATE SCHEMA %s; CREATE TABLE %s.items (id bigint PRIMARY KEY, v text%s); "
             "CREATE TRIGGER note AFTER INSERT OR UPDATE OR DELETE ON %s.items FOR EACH ROW "
             "EXECUTE FUNCTION public.note_stmt()",
             sch, sch, soft ? ", gone bigint" : "", sch);
    PGresult *r = PQexec(db, ddl);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fprintf(stderr, "%s", PQerrorMessage(db));
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    void *ctx = open_sink(sch, "");
    struct ferry_schema *s = mschema(soft);
    struct ferry_target t = {
        .index = 0, .resource = "items", .table = "items", .schema = s, .mode = mode};
    struct ferry_session_info run = {.pipeline = sch, .run_id = 3};
    struct ferry_error err;
    assert_int_equal(vt->prepare(ctx, &t, &err), FERRY_OK);
    assert_int_equal(vt->begin(ctx, &run, &err), FERRY_OK);
    const struct mrow *mixes[] = {mix1, mix2, mix3, mix4};
    const int sizes[] = {6, 18, 5, 3};
    struct model m;
    memset(&m, 0, sizeof m);
    char want[512], sql[256], pos[64];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(string_agg(id || ':' || coalesce(v, '~')%s, ',' ORDER BY id), '') "
             "FROM %s.items",
             soft ? " || ':' || coalesce(gone::text, '~')" : "", sch);
    for (int i = 0; i < 4; i++) {
        snprintf(pos, sizeof pos, "{\"shard\":0,\"key\":[%d]}", i);
        struct ferry_batch *b = mbatch(s, mixes[i], sizes[i], mode, pos);
        apply_ok(ctx, &t, b);
        ferry_batch_unref(b);
        for (int j = 0; j < sizes[i]; j++)
            if (mode != FERRY_WRITE_UPSERT || mixes[i][j].op != FERRY_OP_DELETE)
                model_apply(&m, mode, soft, &mixes[i][j]);
        model_text(&m, soft, want, sizeof want);
        expect_sql(sql, want);
    }
    assert_int_equal(vt->commit(ctx, &err), FERRY_OK);
    /* The path taken: batches of inserts only by INSERT ... ON CONFLICT, the others by MERGE
     * on 15+ (soft deletes: then their marks), else INSERT ... ON CONFLICT (hard deletes:
     * after DELETE ... USING). */
    bool merge = !no_merge && PQserverVersion(db) >= 150000;
    const char *kinds = merge ? (soft ? "INSERT,MERGE,UPDATE" : "INSERT,MERGE")
                              : (soft                        ? "INSERT,UPDATE"
                                 : mode == FERRY_WRITE_MERGE ? "DELETE,INSERT"
                                                             : "INSERT");
    snprintf(sql, sizeof sql,
             "SELECT string_agg(DISTINCT kind, ',' ORDER BY kind) FROM public.stmts "
             "WHERE sch = '%s'",
             sch);
    expect_sql(sql, kinds);
    ferry_schema_unref(s);
    vt->close(ctx);
    unsetenv("FERRY_PG_NO_MERGE");
}

/* The contract "a batch is applied as if its rows ran in order" under both SQL paths: MERGE
 * (PostgreSQL 15+) and INSERT ... ON CONFLICT with the separate DELETE (FERRY_PG_NO_MERGE),
 * for merge (hard deletes), merge with soft_delete, and upsert; the destination after every
 * batch equals a model that applies the rows one by one. */
static void test_mixed_batches(void **state)
{
    (void)state;
    PGresult *r = PQexec(db, "CREATE TABLE public.stmts (sch text, kind text); "
                             "CREATE FUNCTION public.note_stmt() RETURNS trigger "
                             "LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.stmts VALUES "
                             "(TG_TABLE_SCHEMA, upper(split_part(ltrim(current_query()), ' ', "
                             "1))); RETURN NULL; END $$");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    for (int no_merge = 0; no_merge < 2; no_merge++) {
        run_mix(FERRY_WRITE_MERGE, false, no_merge);
        run_mix(FERRY_WRITE_MERGE, true, no_merge);
        run_mix(FERRY_WRITE_UPSERT, false, no_merge);
    }
}

/* A batch whose digest differs is not written (nor its checkpoint); the receipt says so. */
static void test_digest_mismatch(void **state)
{
    (void)state;
    void *ctx = open_sink("mismatch", "");
    struct ferry_schema *s = schema();
    struct ferry_target t = {
        .index = 0, .resource = "items", .table = "items", .schema = s, .mode = FERRY_WRITE_APPEND};
    struct ferry_session_info run = {.pipeline = "mm", .run_id = 1};
    struct ferry_error err;
    assert_int_equal(vt->prepare(ctx, &t, &err), FERRY_OK);
    assert_int_equal(vt->begin(ctx, &run, &err), FERRY_OK);
    const struct row r[] = {{FERRY_OP_INSERT, 1, "a"}};
    struct ferry_batch *b = batch(s, r, 1, "{\"shard\":0,\"key\":[1]}");
    b->digest ^= 1;
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    assert_int_equal(vt->apply(ctx, &t, b, &rc, &err), FERRY_OK);
    assert_int_not_equal(rc.write_crc, b->digest);
    assert_int_equal(vt->commit(ctx, &err), FERRY_OK);
    expect_sql("SELECT count(*) FROM mismatch.items", "0");
    expect_sql("SELECT count(*) FROM _ferry.checkpoints WHERE pipeline = 'mm'", "0");
    ferry_batch_unref(b);
    ferry_schema_unref(s);
    vt->close(ctx);
}

/* receipt.durable_now, append per_apply: an apply that committed on its own connection says
 * so (the flow then records its batch at once); an overlapped one, whose COMMIT is still in
 * flight when it returns, does not. overlap_commits auto commits its first 4 batches one at
 * a time (said durable), then keeps to its choice: every later batch says the same, durable
 * exactly when the sink stayed on one connection. */
static int apply_durable_now(void *ctx, const struct ferry_target *t, struct ferry_schema *s,
                             int64_t id)
{
    const struct row r[] = {{FERRY_OP_INSERT, id, "x"}};
    char pos[64];
    snprintf(pos, sizeof pos, "{\"shard\":0,\"key\":[%" PRId64 "]}", id);
    struct ferry_batch *b = batch(s, r, 1, pos);
    struct ferry_receipt rc;
    memset(&rc, 0, sizeof rc);
    rc.durable_now = true; /* the sink must say false itself */
    struct ferry_error err;
    assert_int_equal(vt->apply(ctx, t, b, &rc, &err), FERRY_OK);
    ferry_batch_unref(b);
    return rc.durable_now;
}

static void test_durable_now(void **state)
{
    (void)state;
    const char *modes[] = {"overlap_commits: false\n", "overlap_commits: true\n", ""};
    for (int m = 0; m < 3; m++) {
        char sch[32];
        snprintf(sch, sizeof sch, "durable_now_%d", m);
        void *ctx = open_sink(sch, modes[m]);
        struct ferry_schema *s = schema();
        struct ferry_target t = {.index = 0, .resource = "items", .table = "items",
                                 .schema = s, .mode = FERRY_WRITE_APPEND};
        struct ferry_session_info run = {.pipeline = sch, .run_id = 1};
        struct ferry_error err;
        assert_int_equal(vt->prepare(ctx, &t, &err), FERRY_OK);
        assert_int_equal(vt->begin(ctx, &run, &err), FERRY_OK);
        int later = -1;
        for (int64_t id = 1; id <= 8; id++) {
            int now = apply_durable_now(ctx, &t, s, id);
            if (m == 0) assert_int_equal(now, 1);
            if (m == 1) assert_int_equal(now, 0);
            if (m == 2 && id <= 4) assert_int_equal(now, 1); /* the timed batches */
            if (m == 2 && id > 4) {
                if (later < 0) later = now;
                assert_int_equal(now, later);
            }
        }
        assert_int_equal(vt->settle(ctx, &err), FERRY_OK);
        /* what the applies said matches how they committed: one connection of the sink's
         * to this database when durable at once, two (the spare) when overlapped */
        bool one = m == 0 || (m == 2 && later == 1);
        expect_sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                   "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                   one ? "1" : "2");
        assert_int_equal(vt->commit(ctx, &err), FERRY_OK);
        char q[128];
        snprintf(q, sizeof q, "SELECT count(*) FROM %s.items", sch);
        expect_sql(q, "8");
        ferry_schema_unref(s);
        vt->close(ctx);
    }
}

/* upsert/merge without a key, and into a table keyed differently, are refused by name. */
static void test_refusals(void **state)
{
    (void)state;
    void *ctx = open_sink("refuse", "");
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "id", FERRY_TYPE_INT64, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_target t = {
        .index = 0, .resource = "nokey", .table = "nokey", .schema = s, .mode = FERRY_WRITE_UPSERT};
    struct ferry_error err;
    assert_int_equal(vt->prepare(ctx, &t, &err), FERRY_EPOLICY);
    assert_non_null(strstr(err.message, "nokey"));
    ferry_schema_unref(s);
    vt->close(ctx);

    PGresult *r = PQexec(
        db, "CREATE SCHEMA refuse; CREATE TABLE refuse.items (id bigint, v text PRIMARY KEY)");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    ctx = open_sink("refuse", "");
    s = schema();
    struct ferry_target t2 = {
        .index = 0, .resource = "items", .table = "items", .schema = s, .mode = FERRY_WRITE_UPSERT};
    assert_int_equal(vt->prepare(ctx, &t2, &err), FERRY_ESINK);
    assert_non_null(strstr(err.message, "primary key"));
    assert_non_null(strstr(err.message, "\"refuse\".\"items\""));
    ferry_schema_unref(s);
    vt->close(ctx);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("FERRY_PG_URL") == NULL) {
        char pg_sh[4096];
        snprintf(pg_sh, sizeof pg_sh, "%s", __FILE__);
        char *slash = strrchr(pg_sh, '/');
        if (slash) *slash = '\0';
        strncat(pg_sh, "/../pg/pg.sh", sizeof pg_sh - strlen(pg_sh) - 1);
        execl("/bin/bash", "bash", "-c", ". \"$1\" && pg_start && \"$2\"", "test_pg_sink", pg_sh,
              argv[0], (char *)NULL);
        perror("exec bash");
        return 1;
    }
    vt = ferry_sink_find("postgres");
    if (vt == NULL) return 1;
    db = PQconnectdb(getenv("FERRY_PG_URL"));
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "test_pg_sink: cannot connect: %s", PQerrorMessage(db));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_deletes),
        cmocka_unit_test(test_checkpoint_counts),
        cmocka_unit_test(test_mixed_batches),
        cmocka_unit_test(test_digest_mismatch),
        cmocka_unit_test(test_durable_now),
        cmocka_unit_test(test_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    PQfinish(db);
    return rc;
}
