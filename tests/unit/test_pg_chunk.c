/* tests/unit/test_pg_chunk.c - the bookkeeping of watermark chunks (connectors/postgres/
 * pg_chunk.c) on hand-built chunks (libpq's PQmakeEmptyPGresult, no server): only our own
 * watermarks open and close the window (prefix, kind, nonce, chunk number); keys changed in
 * the window (two-column keys, many of them: the table grows) drop exactly those rows; a
 * TRUNCATE drops the chunk; the progress tag is "c" + hex of the last row's key texts and a
 * chunker opened on it resumes after that key; a tag that is not hex is refused. The
 * snapshot's visibility (pg_visible_in_snapshot, modulo 2^32 across an epoch) and parsing;
 * changes before the low watermark by a transaction the chunk's snapshot does not see drop
 * their keys (and a TRUNCATE the chunk), held until a later chunk's snapshot sees them. The
 * reads and watermarks against a real server are e2e/cdc_new_tables and e2e/cdc_chunk_race. */
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_chunk.h"
#include "ferry/batch.h"

static struct ferry_schema *two_key_schema(void)
{
    struct ferry_schema *sc = ferry_schema_new();
    assert_non_null(sc);
    assert_int_equal(ferry_schema_add_field(sc, "a", FERRY_TYPE_INT32, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(sc, "b", FERRY_TYPE_UTF8, false, NULL), FERRY_OK);
    assert_int_equal(ferry_schema_add_field(sc, "v", FERRY_TYPE_UTF8, true, NULL), FERRY_OK);
    sc->fields[0].key_pos = 1;
    sc->fields[1].key_pos = 2;
    assert_int_equal(ferry_schema_finish(sc, NULL), FERRY_OK);
    return sc;
}

/* A chunk of n rows (a = i, b = "k<i>", v = "v<i>") as the chunk read would hold it. */
static PGresult *chunk_rows(int n)
{
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    PGresAttDesc att[3];
    memset(att, 0, sizeof att);
    char *names[3] = {"a", "b", "v"};
    for (int i = 0; i < 3; i++) {
        att[i].name = names[i];
        att[i].columnid = (int)i + 1;
        att[i].format = 0;
        att[i].typlen = -1;
        att[i].atttypmod = -1;
    }
    assert_true(PQsetResultAttrs(r, 3, att));
    for (int i = 0; i < n; i++) {
        char a[16], b[16], v[16];
        snprintf(a, sizeof a, "%d", i);
        snprintf(b, sizeof b, "k%d", i);
        snprintf(v, sizeof v, "v%d", i);
        assert_true(PQsetvalue(r, i, 0, a, (int)strlen(a)));
        assert_true(PQsetvalue(r, i, 1, b, (int)strlen(b)));
        assert_true(PQsetvalue(r, i, 2, v, (int)strlen(v)));
    }
    return r;
}

static void open_chunk(struct ferry_pg_chunk *ch, const struct ferry_pg_cdc_target *t,
                       const char *nonce, int64_t no)
{
    memset(ch, 0, sizeof *ch);
    ch->t = t;
    ch->n_user = 3;
    ferry_buf_init(&ch->after, 0);
    ferry_buf_init(&ch->keys, 0);
    ferry_buf_init(&ch->scratch, 0);
    ferry_buf_init(&ch->held, 0);
    snprintf(ch->nonce, sizeof ch->nonce, "%s", nonce);
    ch->no = no;
    ch->phase = CHUNK_WAIT_LW;
    /* a snapshot that sees every transaction below 1000 */
    assert_int_equal(ferry__pg_snap_parse(&ch->snap, "1000:1000:", NULL), FERRY_OK);
}

static bool msg(struct ferry_pg_chunk *ch, const char *prefix, const char *content)
{
    return ferry__pg_chunk_message(ch, prefix, (const uint8_t *)content, strlen(content));
}

/* A change by transaction xid: its tuple holds key texts a and b in relation columns 1 and 0
 * (map: a->1, b->0). */
static int note_x(struct ferry_pg_chunk *ch, uint32_t xid, const char *a, const char *b)
{
    struct ferry_pg_repl_value vals[2] = {{'t', (const uint8_t *)b, (uint32_t)strlen(b)},
                                          {'t', (const uint8_t *)a, (uint32_t)strlen(a)}};
    struct ferry_pg_repl_tuple tp = {2, vals};
    static const int map[3] = {1, 0, -1};
    return ferry__pg_chunk_note(ch, xid, &tp, map, NULL);
}

/* A change by a transaction every chunk's snapshot sees. */
static int note(struct ferry_pg_chunk *ch, const char *a, const char *b)
{
    return note_x(ch, 999, a, b);
}

/* Which of rows 0..n-1 the chunk drops, as a bit mask. */
static unsigned drops(struct ferry_pg_chunk *ch, int n)
{
    unsigned m = 0;
    for (int r = 0; r < n; r++)
        if (ferry__pg_chunk_dropped(ch, r)) m |= 1u << r;
    return m;
}

static void test_window_and_drops(void **state)
{
    (void)state;
    struct ferry_schema *sc = two_key_schema();
    struct ferry_pg_cdc_target t = {.schema_name = "public", .table = "t", .from = "\"t\"", .sc = sc};
    struct ferry_pg_chunk ch;
    open_chunk(&ch, &t, "n1", 3);
    ch.rows = chunk_rows(5000);
    /* a change before our low watermark, seen by the chunk's snapshot, drops nothing */
    assert_int_equal(note(&ch, "7", "k7"), FERRY_OK);
    assert_false(msg(&ch, "ferry", "lw n2 3")); /* another chunker's */
    assert_false(msg(&ch, "ferry", "lw n1 2")); /* an earlier chunk's */
    assert_false(msg(&ch, "other", "lw n1 3"));
    assert_int_equal(ch.phase, CHUNK_WAIT_LW);
    assert_false(msg(&ch, "ferry", "hw n1 3")); /* no high watermark before the low one */
    assert_false(msg(&ch, "ferry", "lw n1 3"));
    assert_int_equal(ch.phase, CHUNK_WINDOW);
    /* many keys: the set grows past its first size; a key in another column order or with
     * a different second part is another key */
    for (int i = 0; i < 3000; i += 3) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", i);
        snprintf(b, sizeof b, "k%d", i);
        assert_int_equal(note(&ch, a, b), FERRY_OK);
    }
    assert_int_equal(note(&ch, "1", "k2"), FERRY_OK);
    assert_int_equal(note(&ch, "4000", "k4000"), FERRY_OK);
    assert_int_equal(note(&ch, "4000", "k4000"), FERRY_OK); /* twice: once in the set */
    assert_false(msg(&ch, "ferry", "hw n1 2"));
    assert_true(msg(&ch, "ferry", "hw n1 3"));
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(ch.held.len, 0); /* all seen by the snapshot: nothing held */
    assert_int_equal(ferry__pg_chunk_rows(&ch), 5000);
    int dropped = 0;
    for (int r = 0; r < 5000; r++) {
        bool d = ferry__pg_chunk_dropped(&ch, r);
        assert_int_equal(d, (r < 3000 && r % 3 == 0) || r == 4000);
        dropped += d;
    }
    assert_int_equal(dropped, 1001);
    assert_false(ferry__pg_chunk_dropped(&ch, 7)); /* noted before the window */
    /* progress: "c" + hex of (len 1, "9", len 2, "k9") */
    const char *tag = NULL;
    size_t n = 0;
    assert_int_equal(ferry__pg_chunk_written(&ch, 9, &tag, &n, NULL), FERRY_OK);
    assert_int_equal(n, 1 + 2 * (4 + 1 + 4 + 2));
    assert_memory_equal(tag, "c00000001390000000" "26b39", n);
    char saved[64];
    memcpy(saved, tag, n);
    saved[n] = '\0';
    ch.last = false;
    ferry__pg_chunk_next(&ch);
    assert_int_equal(ch.phase, CHUNK_IDLE);
    assert_null(ch.rows);
    ferry__pg_chunk_close(&ch);

    /* resumed from the tag: the saved key is the next chunk's lower bound */
    struct ferry_pg_chunk r2;
    memset(&r2, 0, sizeof r2);
    ferry_buf_init(&r2.after, 0);
    struct ferry_error err;
    /* the tag is read before connecting: a bad one and "d" never reach the URL */
    int rc = ferry__pg_chunk_open(&r2, "postgresql://127.0.0.1:1/none?connect_timeout=1", NULL,
                                  "p", &t, 3, "c00zz", &err);
    assert_int_equal(rc, FERRY_EINVAL);
    assert_non_null(strstr(err.message, "saved snapshot progress"));
    ferry__pg_chunk_close(&r2);
    rc = ferry__pg_chunk_open(&r2, "postgresql://127.0.0.1:1/none", NULL, "p", &t, 3, "d", &err);
    assert_int_equal(rc, FERRY_OK);
    assert_int_equal(r2.phase, CHUNK_DONE);
    ferry__pg_chunk_close(&r2);
    ferry_schema_unref(sc);
}

static void test_truncate_drops_chunk(void **state)
{
    (void)state;
    struct ferry_schema *sc = two_key_schema();
    struct ferry_pg_cdc_target t = {.schema_name = "public", .table = "t", .from = "\"t\"", .sc = sc};
    struct ferry_pg_chunk ch;
    open_chunk(&ch, &t, "n", 1);
    ch.rows = chunk_rows(10);
    ch.last = true;
    /* before the window, seen by the snapshot: nothing */
    assert_int_equal(ferry__pg_chunk_truncated(&ch, 999, NULL), FERRY_OK);
    assert_false(msg(&ch, "ferry", "lw n 1"));
    assert_int_equal(ferry__pg_chunk_rows(&ch), 10);
    assert_int_equal(ferry__pg_chunk_truncated(&ch, 1001, NULL), FERRY_OK);
    assert_int_equal(ferry__pg_chunk_rows(&ch), 0);
    assert_true(msg(&ch, "ferry", "hw n 1"));
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(ferry__pg_chunk_rows(&ch), 0);
    ferry__pg_chunk_next(&ch);
    assert_int_equal(ch.phase, CHUNK_DONE);
    ferry__pg_chunk_close(&ch);
    ferry_schema_unref(sc);
}

static void test_snapshot_visibility(void **state)
{
    (void)state;
    struct ferry_pg_snap s;
    memset(&s, 0, sizeof s);
    struct ferry_error err;
    assert_int_equal(ferry__pg_snap_parse(&s, "100:110:105,102", &err), FERRY_OK);
    assert_int_equal(s.n_xip, 2);
    static const uint32_t seen[] = {1, 99, 100, 101, 103, 104, 106, 109};
    static const uint32_t unseen[] = {102, 105, 110, 111, 5000};
    for (size_t i = 0; i < sizeof seen / sizeof *seen; i++)
        assert_true(ferry__pg_snap_visible(&s, seen[i]));
    for (size_t i = 0; i < sizeof unseen / sizeof *unseen; i++)
        assert_false(ferry__pg_snap_visible(&s, unseen[i]));
    /* xid8 across an epoch: xmin = 2^33 - 10, xmax = 2^33 + 4, running 2^33 - 5 and 2^33 + 1;
     * pgoutput's xids are the low 32 bits */
    assert_int_equal(ferry__pg_snap_parse(&s, "8589934582:8589934596:8589934587,8589934593",
                                          &err),
                     FERRY_OK);
    assert_true(ferry__pg_snap_visible(&s, 0xFFFFFFF5u));  /* below xmin */
    assert_true(ferry__pg_snap_visible(&s, 0xFFFFFFF7u));  /* ended, between */
    assert_false(ferry__pg_snap_visible(&s, 0xFFFFFFFBu)); /* running */
    assert_true(ferry__pg_snap_visible(&s, 0xFFFFFFFFu));
    assert_false(ferry__pg_snap_visible(&s, 1));           /* running, past the wrap */
    assert_true(ferry__pg_snap_visible(&s, 3));
    assert_false(ferry__pg_snap_visible(&s, 4));           /* xmax */
    assert_false(ferry__pg_snap_visible(&s, 1000));
    /* no running transaction */
    assert_int_equal(ferry__pg_snap_parse(&s, "7:7:", &err), FERRY_OK);
    assert_int_equal(s.n_xip, 0);
    assert_true(ferry__pg_snap_visible(&s, 6));
    assert_false(ferry__pg_snap_visible(&s, 7));
    static const char *const bad[] = {"", "1:2", "1:2:3,", "a:b:", "1:2:,3", "-1:2:", "1;2:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ferry__pg_snap_parse(&s, bad[i], &err), FERRY_EINVAL);
        assert_non_null(strstr(err.message, "snapshot"));
    }
    ferry__pg_snap_release(&s);
}

/* The race of issue 17: a transaction committed before our low watermark (the stream applied
 * it before the window) that the chunk's snapshot does not see. Its keys are dropped from the
 * chunk, and it stays held until a later chunk's snapshot sees it. */
static void test_unseen_before_window(void **state)
{
    (void)state;
    struct ferry_schema *sc = two_key_schema();
    struct ferry_pg_cdc_target t = {
        .schema_name = "public", .table = "t", .from = "\"t\"", .sc = sc};
    struct ferry_pg_chunk ch;
    open_chunk(&ch, &t, "n", 1);
    ch.rows = chunk_rows(10);
    assert_int_equal(ferry__pg_snap_parse(&ch.snap, "100:103:101", NULL), FERRY_OK);
    assert_int_equal(note_x(&ch, 101, "3", "k3"), FERRY_OK); /* running at the snapshot */
    assert_int_equal(note_x(&ch, 102, "4", "k4"), FERRY_OK); /* ended before it */
    assert_int_equal(note_x(&ch, 103, "5", "k5"), FERRY_OK); /* xmax: after it */
    assert_int_equal(note_x(&ch, 50, "6", "k6"), FERRY_OK);  /* long before */
    assert_false(msg(&ch, "ferry", "lw n 1"));
    assert_int_equal(note_x(&ch, 102, "8", "k8"), FERRY_OK); /* in the window: always */
    assert_int_equal(note_x(&ch, 104, "7", "k7"), FERRY_OK);
    assert_true(msg(&ch, "ferry", "hw n 1"));
    assert_int_equal(drops(&ch, 10), 1u << 7 | 1u << 8); /* the window's, before at_hw */
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(drops(&ch, 10), 1u << 3 | 1u << 5 | 1u << 7 | 1u << 8);
    assert_int_equal(ferry__pg_chunk_rows(&ch), 10);
    ch.last = false;
    ferry__pg_chunk_next(&ch);
    assert_int_equal(ch.phase, CHUNK_IDLE);
    assert_int_equal(ch.held.len, 3 * 8 + 3 * (4 + 1 + 4 + 2)); /* 101, 103, 104 */

    /* the next chunk: 101 still runs, 103 and 104 ended before its snapshot */
    ch.no = 2;
    ch.phase = CHUNK_WAIT_LW;
    ch.rows = chunk_rows(10);
    assert_int_equal(ferry__pg_snap_parse(&ch.snap, "101:106:101", NULL), FERRY_OK);
    assert_false(msg(&ch, "ferry", "lw n 2"));
    assert_true(msg(&ch, "ferry", "hw n 2"));
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(drops(&ch, 10), 1u << 3);
    ferry__pg_chunk_next(&ch);

    /* the third: every noted transaction seen, nothing dropped, nothing held */
    ch.no = 3;
    ch.phase = CHUNK_WAIT_LW;
    ch.rows = chunk_rows(10);
    assert_int_equal(ferry__pg_snap_parse(&ch.snap, "106:106:", NULL), FERRY_OK);
    assert_false(msg(&ch, "ferry", "lw n 3"));
    assert_true(msg(&ch, "ferry", "hw n 3"));
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(drops(&ch, 10), 0);
    assert_int_equal(ch.held.len, 0);
    ch.last = true;
    ferry__pg_chunk_next(&ch);
    assert_int_equal(ch.phase, CHUNK_DONE);
    /* done: nothing is noted any more */
    assert_int_equal(note_x(&ch, 200, "1", "k1"), FERRY_OK);
    assert_int_equal(ch.held.len, 0);
    ferry__pg_chunk_close(&ch);

    /* a TRUNCATE before the window that the snapshot does not see drops the chunk */
    open_chunk(&ch, &t, "n", 1);
    ch.rows = chunk_rows(10);
    assert_int_equal(ferry__pg_snap_parse(&ch.snap, "100:103:", NULL), FERRY_OK);
    assert_int_equal(ferry__pg_chunk_truncated(&ch, 103, NULL), FERRY_OK);
    assert_false(msg(&ch, "ferry", "lw n 1"));
    assert_true(msg(&ch, "ferry", "hw n 1"));
    assert_int_equal(ferry__pg_chunk_rows(&ch), 10);
    assert_int_equal(ferry__pg_chunk_at_hw(&ch, NULL), FERRY_OK);
    assert_int_equal(ferry__pg_chunk_rows(&ch), 0);
    ferry__pg_chunk_close(&ch);
    ferry_schema_unref(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_and_drops),
        cmocka_unit_test(test_truncate_drops_chunk),
        cmocka_unit_test(test_snapshot_visibility),
        cmocka_unit_test(test_unseen_before_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
