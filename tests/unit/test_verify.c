/* tests/unit/test_verify.c - verify's C side: lookup3 and the value and row hashes
 * (checked against values PostgreSQL 15 computed with the SQL backend_pg.c generates),
 * NULL vs '', -0 vs 0 and column order told apart, sums mod 2^64, key normalization, and
 * the SQLite backend's digest, ranges and split keys on a real SQLite file (-0.0 is not
 * used there: SQLite stores it as the integer 0). */
#include "unit.h"
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "connectors/sqlite/sqlite_common.h"
#include "verify/verify.h"

/* Values PostgreSQL 15 returned for hashtextextended, hashint8extended,
 * uuid_hash_extended, hashfloat8extended and hashfloat4extended. */
static void test_hashes_match_postgres(void **state)
{
    (void)state;
    assert_int_equal((int64_t)ferry__vcanon_hash_bytes("", 0, 0), INT64_C(-6939563903564495251));
    assert_int_equal((int64_t)ferry__vcanon_hash_bytes("abcdefghijk", 11, 0),
                     INT64_C(3112909444737856467));
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld this is longer than twelve bytes!!";
    assert_int_equal((int64_t)ferry__vcanon_hash_bytes(s, strlen(s), UINT64_C(12345678901)),
                     INT64_C(6476292497736660499));
    assert_int_equal((int64_t)ferry__vcanon_hash_int8(INT64_MIN, 7), INT64_C(-1839609485720848170));
    assert_int_equal((int64_t)ferry__vcanon_hash_int8(42, 0), INT64_C(8010225493015854792));
    struct ferry_buf scratch;
    ferry_buf_init(&scratch, 0);
    struct ferry_vvalue v;
    memset(&v, 0, sizeof v);
    assert_int_equal(ferry_uuid_from_text("123e4567-e89b-12d3-a456-426614174000", 36, v.u),
                     FERRY_OK);
    assert_int_equal(ferry__vcanon_value_hash(FERRY_TYPE_UUID, 3, &v, &scratch),
                     INT64_C(8358161817357351227));
    memset(&v, 0, sizeof v);
    v.f = 1.5;
    assert_int_equal(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 9, &v, &scratch),
                     INT64_C(420245996409940593));
    assert_int_equal(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT32, 9, &v, &scratch),
                     INT64_C(420245996409940593));
    v.f = NAN;
    assert_int_equal(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 2, &v, &scratch),
                     INT64_C(4456755843827096090));
    v.f = -NAN;
    assert_int_equal(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 2, &v, &scratch),
                     INT64_C(4456755843827096090));
    ferry_buf_release(&scratch);
}

/* The row (42, 'héllo', NULL, -0.0, 2024-01-31 13:45:00.123456, 123e4567-..., 2024-01-31,
 * true, 1.5f, '\x00ff', 13:45:00.5, 2024-01-31 13:45:00+02) through the SQL backend_pg.c
 * generates: PostgreSQL 15 gives -1242479654845619855. */
static void test_row_hash_matches_postgres(void **state)
{
    (void)state;
    struct ferry_buf scratch;
    ferry_buf_init(&scratch, 0);
    int64_t x = 0;
    struct ferry_vvalue v;
#define COL(type, pos) x ^= ferry__vcanon_value_hash(type, pos, &v, &scratch)
    memset(&v, 0, sizeof v);
    v.i = 42;
    COL(FERRY_TYPE_INT32, 1);
    memset(&v, 0, sizeof v);
    v.p = (const uint8_t *)"h\xc3\xa9llo";
    v.n = 6;
    COL(FERRY_TYPE_UTF8, 2);
    memset(&v, 0, sizeof v);
    v.null = true;
    COL(FERRY_TYPE_FLOAT64, 3);
    memset(&v, 0, sizeof v);
    v.f = -0.0;
    COL(FERRY_TYPE_FLOAT64, 4);
    memset(&v, 0, sizeof v);
    assert_int_equal(ferry_timestamp_from_text("2024-01-31 13:45:00.123456", 26, &v.i), FERRY_OK);
    COL(FERRY_TYPE_TIMESTAMP_US, 5);
    memset(&v, 0, sizeof v);
    assert_int_equal(ferry_uuid_from_text("123e4567-e89b-12d3-a456-426614174000", 36, v.u),
                     FERRY_OK);
    COL(FERRY_TYPE_UUID, 6);
    memset(&v, 0, sizeof v);
    int32_t d;
    assert_int_equal(ferry_date32_from_text("2024-01-31", 10, &d), FERRY_OK);
    v.i = d;
    COL(FERRY_TYPE_DATE32, 7);
    memset(&v, 0, sizeof v);
    v.i = 1;
    COL(FERRY_TYPE_BOOL, 8);
    memset(&v, 0, sizeof v);
    v.f = 1.5;
    COL(FERRY_TYPE_FLOAT32, 9);
    memset(&v, 0, sizeof v);
    v.p = (const uint8_t *)"\x00\xff";
    v.n = 2;
    COL(FERRY_TYPE_BINARY, 10);
    memset(&v, 0, sizeof v);
    assert_int_equal(ferry_time64_from_text("13:45:00.5", 10, &v.i), FERRY_OK);
    COL(FERRY_TYPE_TIME64_US, 11);
    memset(&v, 0, sizeof v);
    assert_int_equal(ferry_timestamp_from_text("2024-01-31 13:45:00+02", 22, &v.i), FERRY_OK);
    COL(FERRY_TYPE_TIMESTAMPTZ_US, 12);
#undef COL
    assert_int_equal(ferry__vcanon_row_hash(x), INT64_C(-1242479654845619855));
    ferry_buf_release(&scratch);
}

static void test_hash_distinguishes(void **state)
{
    (void)state;
    struct ferry_buf scratch;
    ferry_buf_init(&scratch, 0);
    struct ferry_vvalue a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    /* NULL vs '' */
    a.null = true;
    b.p = (const uint8_t *)"";
    assert_true(ferry__vcanon_value_hash(FERRY_TYPE_UTF8, 2, &a, &scratch) !=
                ferry__vcanon_value_hash(FERRY_TYPE_UTF8, 2, &b, &scratch));
    /* -0 vs 0 */
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.f = -0.0;
    b.f = 0.0;
    assert_true(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 4, &a, &scratch) !=
                ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 4, &b, &scratch));
    assert_true(ferry__vcanon_value_hash(FERRY_TYPE_FLOAT32, 4, &a, &scratch) !=
                ferry__vcanon_value_hash(FERRY_TYPE_FLOAT32, 4, &b, &scratch));
    /* the same value in another column position hashes differently: (a, b) != (b, a) */
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.i = 1;
    b.i = 2;
    int64_t ab = ferry__vcanon_value_hash(FERRY_TYPE_INT64, 1, &a, &scratch) ^
                 ferry__vcanon_value_hash(FERRY_TYPE_INT64, 2, &b, &scratch);
    int64_t ba = ferry__vcanon_value_hash(FERRY_TYPE_INT64, 1, &b, &scratch) ^
                 ferry__vcanon_value_hash(FERRY_TYPE_INT64, 2, &a, &scratch);
    assert_true(ab != ba);
    /* rows that swap a value keep no common sum: the row hash is not linear */
    int64_t r1 =
        ferry__vcanon_row_hash(ferry__vcanon_value_hash(FERRY_TYPE_INT64, 1, &a, &scratch));
    int64_t r2 =
        ferry__vcanon_row_hash(ferry__vcanon_value_hash(FERRY_TYPE_INT64, 1, &b, &scratch));
    assert_true(r1 != r2);
    ferry_buf_release(&scratch);
}

static void test_sum_text(void **state)
{
    (void)state;
    assert_int_equal(ferry__vcanon_sum_text("0"), 0);
    assert_int_equal(ferry__vcanon_sum_text("-1"), UINT64_MAX);
    assert_int_equal(ferry__vcanon_sum_text("18446744073709551616"), 0); /* 2^64 */
    assert_int_equal(ferry__vcanon_sum_text("18446744073709551617"), 1);
    assert_int_equal(ferry__vcanon_sum_text("-18446744073709551617"), UINT64_MAX);
    /* the wrapped sum equals wrapping addition of the parts */
    int64_t parts[] = {INT64_MAX, INT64_MAX, INT64_MIN, -5, 123456789};
    uint64_t s = 0;
    for (int i = 0; i < 5; i++)
        s += (uint64_t)parts[i];
    /* INT64_MAX*2 + INT64_MIN - 5 + 123456789 = 9223372036854775807 + 123456784 - 1 */
    assert_int_equal(ferry__vcanon_sum_text("9223372036978232590"), s);
}

static void test_key_text(void **state)
{
    (void)state;
    char *s = NULL;
    assert_int_equal(ferry__vcanon_key_text(FERRY_TYPE_INT64, "007", 3, &s, NULL), FERRY_OK);
    assert_string_equal(s, "7");
    ferry_free(s);
    assert_int_equal(
        ferry__vcanon_key_text(FERRY_TYPE_UUID, "123E4567E89B12D3A456426614174000", 32, &s, NULL),
        FERRY_OK);
    assert_string_equal(s, "123e4567-e89b-12d3-a456-426614174000");
    ferry_free(s);
    assert_int_equal(
        ferry__vcanon_key_text(FERRY_TYPE_TIMESTAMP_US, "2024-01-31 13:45:00", 19, &s, NULL),
        FERRY_OK);
    char *t = NULL;
    assert_int_equal(
        ferry__vcanon_key_text(FERRY_TYPE_TIMESTAMP_US, "2024-01-31T13:45:00.000000", 26, &t, NULL),
        FERRY_OK);
    assert_string_equal(s, t);
    ferry_free(s);
    ferry_free(t);
    struct ferry_error err;
    assert_int_equal(ferry__vcanon_key_text(FERRY_TYPE_INT32, "x1", 2, &s, &err), FERRY_EINVAL);
    assert_null(s);
}

/* The SQLite side: digests and rows computed by the registered functions equal what C
 * computes from the same values; ranges split the rows. */
static void test_sqlite_side(void **state)
{
    (void)state;
    char path[] = "/tmp/ferry-test-verify-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(
            db,
            "CREATE TABLE \"t x\"(id INTEGER PRIMARY KEY, name TEXT, ts TIMESTAMP, f DOUBLE);"
            "INSERT INTO \"t x\" VALUES (1, 'a', '2024-01-31 13:45:00.000000', 2.25),"
            "(2, '', NULL, 0.0), (3, NULL, '2024-02-01 00:00:00.500000', 1.5),"
            "(10, 'z', NULL, NULL);",
            NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    struct ferry_vcol cols[4] = {
        {"id", "id", FERRY_TYPE_INT64, FERRY_TYPE_INT64, 0, 0, FERRY_VHOW_PLAIN, 1},
        {"name", "name", FERRY_TYPE_UTF8, FERRY_TYPE_UTF8, 0, 0, FERRY_VHOW_PLAIN, 0},
        {"ts", "ts", FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_TIMESTAMP_US, 0, 0, FERRY_VHOW_PLAIN, 0},
        {"f", "f", FERRY_TYPE_FLOAT64, FERRY_TYPE_FLOAT64, 0, 0, FERRY_VHOW_PLAIN, 0}};
    int key[1] = {0};
    struct ferry_vtable t = {cols, 4, key, 1, false, false, false, NULL, NULL, 0, false, NULL};
    struct ferry_vside *s = NULL;
    struct ferry_error err;
    assert_int_equal(ferry__vside_sqlite_open(path, "t x", &t, "destination", &s, &err), FERRY_OK);

    /* expected hashes computed in C */
    int64_t want[4];
    const char *names[4] = {"a", "", NULL, "z"};
    const char *tss[4] = {"2024-01-31 13:45:00", NULL, "2024-02-01 00:00:00.5", NULL};
    double fs[4] = {2.25, 0.0, 1.5, 0};
    bool fnull[4] = {false, false, false, true};
    int64_t ids[4] = {1, 2, 3, 10};
    uint64_t sum = 0;
    struct ferry_buf scratch;
    ferry_buf_init(&scratch, 0);
    for (int i = 0; i < 4; i++) {
        int64_t x = 0;
        struct ferry_vvalue v = {0};
        v.i = ids[i];
        x ^= ferry__vcanon_value_hash(FERRY_TYPE_INT64, 1, &v, &scratch);
        memset(&v, 0, sizeof v);
        v.null = names[i] == NULL;
        v.p = (const uint8_t *)names[i];
        v.n = names[i] ? strlen(names[i]) : 0;
        x ^= ferry__vcanon_value_hash(FERRY_TYPE_UTF8, 2, &v, &scratch);
        memset(&v, 0, sizeof v);
        v.null = tss[i] == NULL;
        if (tss[i]) assert_int_equal(ferry_timestamp_from_text(tss[i], strlen(tss[i]), &v.i), FERRY_OK);
        x ^= ferry__vcanon_value_hash(FERRY_TYPE_TIMESTAMP_US, 3, &v, &scratch);
        memset(&v, 0, sizeof v);
        v.null = fnull[i];
        v.f = fs[i];
        x ^= ferry__vcanon_value_hash(FERRY_TYPE_FLOAT64, 4, &v, &scratch);
        want[i] = ferry__vcanon_row_hash(x);
        sum += (uint64_t)want[i];
    }
    ferry_buf_release(&scratch);
    struct ferry_vrange all = {NULL, false, NULL};
    int64_t count;
    uint64_t got;
    assert_int_equal(s->ops->digest_send(s, &all, &err), FERRY_OK);
    assert_int_equal(s->ops->digest_recv(s, &count, &got, &err), FERRY_OK);
    assert_int_equal(count, 4);
    assert_int_equal(got, sum);

    /* (2, 10]: rows 3 and 10 */
    char *lo_p[1] = {"2"}, *hi_p[1] = {"10"};
    struct ferry_vkey lo = {lo_p}, hi = {hi_p};
    struct ferry_vrange r = {&lo, false, &hi};
    struct ferry_vrows rows = {0};
    assert_int_equal(s->ops->rows(s, &r, &rows, &err), FERRY_OK);
    assert_int_equal(rows.n, 2);
    assert_string_equal(rows.v[0].key.part[0], "3");
    assert_int_equal(rows.v[0].hash, want[2]);
    assert_string_equal(rows.v[1].key.part[0], "10");
    assert_int_equal(rows.v[1].hash, want[3]);
    ferry__vrows_clear(&rows, 1);

    /* every second key */
    assert_int_equal(s->ops->bounds(s, &all, 2, &rows, &err), FERRY_OK);
    assert_int_equal(rows.n, 2);
    assert_string_equal(rows.v[0].key.part[0], "2");
    assert_string_equal(rows.v[1].key.part[0], "10");
    ferry__vrows_clear(&rows, 1);
    s->ops->close(s);
    unlink(path);
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) fprintf(stderr, "sqlite: %s\n", msg ? msg : "?");
    sqlite3_free(msg);
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_close(db);
}

static void events_count(void *ctx, const char *resource, const char *type, const char *payload)
{
    (void)resource, (void)payload;
    int *n = ctx;
    if (!strcmp(type, "verify.chunk_mismatch")) n[0]++;
    if (!strcmp(type, "verify.completed")) n[1]++;
}

/* The chunk walk between two SQLite files (a source table and its copy): equal tables cost
 * one chunk; after a delete, an insert and an update the walk splits (integer key:
 * arithmetic cuts; text key: split keys from the larger side) down to chunk_rows and
 * reports exactly those keys, with events. */
static void test_walk_sqlite_pair(void **state)
{
    (void)state;
    char dir[] = "/tmp/ferry-test-vwalk-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char src[256], dst[256], yaml[1024];
    snprintf(src, sizeof src, "%s/src.db", dir);
    snprintf(dst, sizeof dst, "%s/dst.db", dir);
    const char *make =
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, f DOUBLE);"
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 20000)"
        " INSERT INTO t SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE 'v' || i END, i * 0.5 FROM s;"
        "CREATE TABLE u (k TEXT PRIMARY KEY, n INTEGER);"
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 5000)"
        " INSERT INTO u SELECT printf('key-%05d', i), i FROM s;";
    exec_sql(src, make);
    exec_sql(dst, make);
    snprintf(yaml, sizeof yaml,
             "version: 1\nname: walk\nsource:\n  type: sqlite\n  path: %s\n  resources:\n"
             "    - table: t\n      mode: full\n    - table: u\n      mode: full\n"
             "sink:\n  type: sqlite\n  path: %s\n  write: merge\n",
             src, dst);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err;
    assert_int_equal(ferry_pipeline_load_string(yaml, strlen(yaml), "walk.yaml", &p, &err),
                     FERRY_OK);
    struct ferry_verify_opts o;
    memset(&o, 0, sizeof o);
    o.chunk_rows = 100;
    struct ferry_verify_report *rep = NULL;
    int ev[2] = {0, 0};
    assert_int_equal(ferry_verify_run(p, &o, events_count, ev, &rep, &err), FERRY_OK);
    assert_false(ferry_verify_differs(rep));
    assert_int_equal(rep->n_res, 2);
    assert_int_equal(rep->res[0].chunks, 1);
    assert_int_equal(rep->res[0].source_rows, 20000);
    assert_int_equal(ev[0], 0);
    assert_int_equal(ev[1], 2);
    ferry_verify_report_free(rep);

    exec_sql(dst,
             "DELETE FROM t WHERE id = 5000; INSERT INTO t VALUES (30000, 'x', 1);"
             "UPDATE t SET v = '' WHERE id = 14;" /* NULL in the source */
             "UPDATE t SET f = f + 1e-9 WHERE id = 12345;"
             "UPDATE u SET n = -1 WHERE k = 'key-04321'; DELETE FROM u WHERE k = 'key-00001';");
    ev[0] = ev[1] = 0;
    assert_int_equal(ferry_verify_run(p, &o, events_count, ev, &rep, &err), FERRY_OK);
    assert_true(ferry_verify_differs(rep));
    const struct ferry_verify_resource *t = &rep->res[0], *u = &rep->res[1];
    assert_int_equal(t->count[FERRY_VDIFF_MISSING], 1);
    assert_string_equal(t->listed[FERRY_VDIFF_MISSING][0], "5000");
    assert_int_equal(t->count[FERRY_VDIFF_EXTRA], 1);
    assert_string_equal(t->listed[FERRY_VDIFF_EXTRA][0], "30000");
    assert_int_equal(t->count[FERRY_VDIFF_DIFFERENT], 2);
    assert_int_equal(t->count[FERRY_VDIFF_CHANGED], 0);
    assert_true(t->chunks_mismatched > 2); /* it split */
    assert_true(t->chunks < 200);          /* ... only where it differed */
    assert_int_equal(u->count[FERRY_VDIFF_MISSING], 1);
    assert_string_equal(u->listed[FERRY_VDIFF_MISSING][0], "key-00001");
    assert_int_equal(u->count[FERRY_VDIFF_DIFFERENT], 1);
    assert_string_equal(u->listed[FERRY_VDIFF_DIFFERENT][0], "key-04321");
    assert_true(u->chunks_mismatched > 1);
    assert_true(ev[0] > 2);
    assert_int_equal(ev[1], 2);
    char *j = ferry_verify_report_json(rep);
    assert_non_null(strstr(j, "\"missing\":{\"count\":1,\"keys\":[\"5000\"]}"));
    ferry_free(j);
    ferry_verify_report_free(rep);

    /* --repair through the sqlite sink (merge: upserts and a delete), then clean */
    o.repair = true;
    int rrc = ferry_verify_run(p, &o, NULL, NULL, &rep, &err);
    if (rrc != FERRY_OK) fprintf(stderr, "repair: %s\n", err.message);
    assert_int_equal(rrc, FERRY_OK);
    assert_int_equal(rep->res[0].repaired, 4);
    assert_true(rep->res[0].repair_clean);
    assert_true(rep->res[1].repair_clean);
    assert_false(ferry_verify_differs(rep));
    ferry_verify_report_free(rep);
    o.repair = false;
    assert_int_equal(ferry_verify_run(p, &o, NULL, NULL, &rep, &err), FERRY_OK);
    assert_false(ferry_verify_differs(rep));
    ferry_verify_report_free(rep);
    ferry_pipeline_free(p);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir); /* the databases and their -wal/-shm */
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hashes_match_postgres),
        cmocka_unit_test(test_row_hash_matches_postgres),
        cmocka_unit_test(test_hash_distinguishes),
        cmocka_unit_test(test_sum_text),
        cmocka_unit_test(test_key_text),
        cmocka_unit_test(test_sqlite_side),
        cmocka_unit_test(test_walk_sqlite_pair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
