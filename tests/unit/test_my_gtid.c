/* tests/unit/test_my_gtid.c - GTID sets (my_gtid.h): MariaDB positions (one domain-server-seq
 * per domain, the newest transaction replacing its domain's entry) and MySQL 8 sets
 * (uuid:interval lists: parsed, merged when intervals touch, formatted canonically), bad
 * text refused naming it, flavors not mixed, and the two GTID events decoded from
 * hand-built bytes laid out from the public documentation; MySQL's binary GTID set and the
 * COM_BINLOG_DUMP_GTID payload on hand-built bytes, subsets, and the dump dialect chosen by
 * server and position. */
#include <string.h>
#include "unit.h"
#include "connectors/mysql/my_gtid.h"
#include "ferry/error.h"

static void expect_text(const struct ferry_my_gtid_set *g, const char *want)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__my_gtid_format(g, &b), FERRY_OK);
    assert_true(ferry_buf_append(&b, "", 1) == FERRY_OK);
    assert_string_equal(b.data, want);
    ferry_buf_release(&b);
}

/* g (uninitialised) becomes the set `text` parses to; the parse must succeed */
static void parsed(struct ferry_my_gtid_set *g, const char *text)
{
    struct ferry_error err;
    ferry__my_gtid_init(g);
    if (ferry__my_gtid_parse(g, text, &err) != FERRY_OK)
        fail_msg("parse \"%s\": %s", text, err.message);
}

/* Texts that parse, and their canonical form: MariaDB positions (domains sorted), MySQL sets
 * (touching and overlapping intervals merged, sources sorted by uuid, newlines after commas
 * as @@gtid_executed prints them). */
static void test_round_trips(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"0-1-42", "0-1-42"},
        {" 5-2-7 , 0-1-42", "0-1-42,5-2-7"},
        {"", ""},
        {"4294967295-4294967295-18446744073709551615",
         "4294967295-4294967295-18446744073709551615"},
        {"3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:11-18:7",
         "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7:11-18"},
        {"ffffffff-0000-0000-0000-000000000000:3,\n"
         "00000000-0000-0000-0000-00000000000a:1-2:3-4:4-9:20",
         "00000000-0000-0000-0000-00000000000a:1-9:20,ffffffff-0000-0000-0000-000000000000:3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ferry_my_gtid_set g;
        parsed(&g, cases[i].in);
        expect_text(&g, cases[i].want);
        ferry__my_gtid_release(&g);
    }
}

static void test_mariadb(void **state)
{
    (void)state;
    struct ferry_my_gtid_set g;
    struct ferry_error err;
    parsed(&g, "0-1-42");
    assert_int_equal(g.flavor, FERRY_MY_GTID_MARIADB);
    /* a failover: the same domain's next transaction from another server */
    assert_int_equal(ferry__my_gtid_add_mariadb(&g, 0, 2, 43, &err), FERRY_OK);
    assert_int_equal(ferry__my_gtid_add_mariadb(&g, 3, 1, 1, &err), FERRY_OK);
    assert_int_equal(ferry__my_gtid_add_mariadb(&g, 1, 1, 9, &err), FERRY_OK);
    expect_text(&g, "0-2-43,1-1-9,3-1-1");
    uint8_t u[16] = {1};
    assert_int_equal(ferry__my_gtid_add_mysql(&g, u, 1, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "MySQL transaction id in a MariaDB position"));
    ferry__my_gtid_release(&g);
}

static void test_mysql(void **state)
{
    (void)state;
    struct ferry_my_gtid_set g;
    struct ferry_error err;
    parsed(&g, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7");
    uint8_t u[16] = {0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1,
                     0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62};
    assert_int_equal(ferry__my_gtid_add_mysql(&g, u, 6, &err), FERRY_OK); /* joins both */
    expect_text(&g, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7");
    assert_int_equal(ferry__my_gtid_add_mysql(&g, u, 9, &err), FERRY_OK);
    assert_int_equal(ferry__my_gtid_add_mysql(&g, u, 8, &err), FERRY_OK);
    assert_int_equal(ferry__my_gtid_add_mysql(&g, u, 3, &err), FERRY_OK); /* already in */
    uint8_t v[16] = {0};
    assert_int_equal(ferry__my_gtid_add_mysql(&g, v, 100, &err), FERRY_OK);
    expect_text(&g, "00000000-0000-0000-0000-000000000000:100,"
                    "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9");
    assert_int_equal(ferry__my_gtid_add_mysql(&g, v, 0, &err), FERRY_EINVAL);
    assert_int_equal(ferry__my_gtid_add_mariadb(&g, 0, 1, 1, &err), FERRY_EINVAL);
    ferry__my_gtid_release(&g);
}

static void test_bad_text(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "0-1",
        "0-1-",
        "x",
        "0-1-2,",
        "0-1-2;1-1-1",
        "99999999999-1-1",
        "3e11fa47-71ca-11e1-9e33-c80aa9429562",
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:",
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:5-3",
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:0",
        "3e11fa47-71ca-11e1-9e33-c80aa942956:1",
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag:1",
        "3e11fa47x71ca-11e1-9e33-c80aa9429562:1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct ferry_my_gtid_set g;
        struct ferry_error err;
        ferry__my_gtid_init(&g);
        assert_int_equal(ferry__my_gtid_parse(&g, bad[i], &err), FERRY_EINVAL);
        assert_non_null(strstr(err.message, "is neither a MariaDB GTID position"));
        assert_int_equal(g.flavor, FERRY_MY_GTID_NONE);
        assert_int_equal(g.n_dom + g.n_src, 0);
        ferry__my_gtid_release(&g);
    }
}

static void test_events(void **state)
{
    (void)state;
    /* MariaDB GTID_EVENT: seq 0x0102 (8 LE), domain 7 (4 LE), flags2 FL_STANDALONE */
    uint8_t m[19] = {0x02, 0x01, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1};
    uint64_t seq = 0;
    uint32_t domain = 0;
    uint8_t flags = 0;
    struct ferry_error err;
    assert_int_equal(ferry__my_gtid_event_mariadb(m, sizeof m, &seq, &domain, &flags, &err),
                     FERRY_OK);
    assert_int_equal(seq, 0x0102);
    assert_int_equal(domain, 7);
    assert_int_equal(flags, 1);
    assert_int_equal(ferry__my_gtid_event_mariadb(m, 12, &seq, &domain, &flags, &err),
                     FERRY_EINVAL);
    /* MySQL GTID_LOG_EVENT: flags (1), sid (16), gno (8 LE) */
    uint8_t y[42] = {1};
    for (int i = 0; i < 16; i++)
        y[1 + i] = (uint8_t)(0xa0 + i);
    y[17] = 5;
    uint8_t uuid[16];
    uint64_t gno = 0;
    assert_int_equal(ferry__my_gtid_event_mysql(y, sizeof y, uuid, &gno, &err), FERRY_OK);
    assert_int_equal(gno, 5);
    assert_int_equal(uuid[0], 0xa0);
    assert_int_equal(uuid[15], 0xaf);
    assert_int_equal(ferry__my_gtid_event_mysql(y, 24, uuid, &gno, &err), FERRY_EINVAL);
}

/* The SID block of COM_BINLOG_DUMP_GTID, laid out by hand from the protocol documentation:
 * n_sids (8 LE), then per source uuid (16), n_intervals (8 LE), start (8 LE), end (8 LE,
 * exclusive). "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7" is one source, [1,6) and [7,8). */
static const uint8_t sid_block[] = {
    1,    0,    0,    0,    0,    0,    0,    0, /* n_sids */
    0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1,
    0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62, /* uuid */
    2,    0,    0,    0,    0,    0,    0,    0,    /* n_iv */
    1,    0,    0,    0,    0,    0,    0,    0,
    6,    0,    0,    0,    0,    0,    0,    0, /* 1-5 */
    7,    0,    0,    0,    0,    0,    0,    0,
    8,    0,    0,    0,    0,    0,    0,    0, /* 7 */
};

static void test_binary_set(void **state)
{
    (void)state;
    struct ferry_my_gtid_set g;
    struct ferry_error err;
    struct ferry_buf b;
    parsed(&g, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7");
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__my_gtid_encode(&g, &b, &err), FERRY_OK);
    assert_int_equal(b.len, sizeof sid_block);
    assert_memory_equal(b.data, sid_block, sizeof sid_block);
    /* decoded back (PREVIOUS_GTIDS_LOG_EVENT's body has the same form) */
    assert_int_equal(ferry__my_gtid_decode(&g, sid_block, sizeof sid_block, &err), FERRY_OK);
    assert_int_equal(g.flavor, FERRY_MY_GTID_MYSQL);
    expect_text(&g, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7");
    /* the empty set: n_sids 0 */
    ferry__my_gtid_release(&g);
    ferry_buf_reset(&b);
    assert_int_equal(ferry__my_gtid_encode(&g, &b, &err), FERRY_OK);
    assert_int_equal(b.len, 8);
    assert_memory_equal(b.data, "\0\0\0\0\0\0\0\0", 8);
    assert_int_equal(ferry__my_gtid_decode(&g, (const uint8_t *)b.data, b.len, &err), FERRY_OK);
    assert_int_equal(g.n_src, 0);
    /* a MariaDB position has no binary form */
    assert_int_equal(ferry__my_gtid_parse(&g, "0-1-5", &err), FERRY_OK);
    ferry_buf_reset(&b);
    assert_int_equal(ferry__my_gtid_encode(&g, &b, &err), FERRY_EINVAL);
    ferry__my_gtid_release(&g);
    ferry_buf_release(&b);
}

static void expect_bad_binary(const uint8_t *p, size_t n, const char *why)
{
    struct ferry_my_gtid_set g;
    struct ferry_error err;
    ferry__my_gtid_init(&g);
    assert_int_equal(ferry__my_gtid_decode(&g, p, n, &err), FERRY_EINVAL);
    if (strstr(err.message, why) == NULL) fail_msg("\"%s\" for \"%s\"", err.message, why);
    assert_int_equal(g.n_src, 0);
    assert_int_equal(g.flavor, FERRY_MY_GTID_NONE);
    ferry__my_gtid_release(&g);
}

/* sid_block with at most one byte changed, its first `len` bytes read (one past its end: a
 * zero byte more) */
static void test_binary_bad(void **state)
{
    (void)state;
    enum { SID = sizeof sid_block, NONE = -1 };
    static const struct {
        int at; /* the byte changed, or NONE */
        uint8_t to;
        size_t len;
        const char *why;
    } cases[] = {
        {NONE, 0, 7, "truncated"},
        {NONE, 0, SID - 1, "more intervals than bytes"},
        {NONE, 0, SID + 1, "bytes after the last source"},
        {0, 2, SID, "truncated source"}, /* two sources announced, one present */
        {0, 3, SID, "more sources than bytes"},
        {7, 1, SID, "tagged GTIDs"},           /* the tagged format's byte */
        {32, 0, SID, "interval out of range"}, /* interval start 0 */
        {40, 1, SID, "interval out of range"}, /* end 1 <= start 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t b[SID + 1] = {0};
        memcpy(b, sid_block, SID);
        if (cases[i].at != NONE) b[cases[i].at] = cases[i].to;
        expect_bad_binary(b, cases[i].len, cases[i].why);
    }
}

static void test_dump_packet(void **state)
{
    (void)state;
    struct ferry_my_gtid_set g;
    struct ferry_error err;
    struct ferry_buf b;
    parsed(&g, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7");
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__my_gtid_dump_packet(0x01020304, &g, &b, &err), FERRY_OK);
    static const uint8_t head[] = {
        0x1e, /* COM_BINLOG_DUMP_GTID */
        4,
        0, /* flags: BINLOG_THROUGH_GTID */
        4,
        3,
        2,
        1, /* server_id */
        0,
        0,
        0,
        0, /* binlog-filename-len, no name */
        4,
        0,
        0,
        0,
        0,
        0,
        0,
        0, /* binlog-pos */
        sizeof sid_block,
        0,
        0,
        0, /* data-size */
    };
    assert_int_equal(b.len, sizeof head + sizeof sid_block);
    assert_memory_equal(b.data, head, sizeof head);
    assert_memory_equal((const uint8_t *)b.data + sizeof head, sid_block, sizeof sid_block);
    ferry__my_gtid_release(&g);
    ferry_buf_release(&b);
}

static void test_subset(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        bool in;
    } cases[] = {
        {"", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", true},
        {"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9",
         true},
        {"3e11fa47-71ca-11e1-9e33-c80aa9429562:2-3:7", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7",
         true},
        {"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7",
         false}, /* 6 is missing: the server purged a transaction the position has not seen */
        {"00000000-0000-0000-0000-000000000001:1", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
         false},
        {"3e11fa47-71ca-11e1-9e33-c80aa9429562:1", "", false},
        {"0-1-5", "0-2-7,1-1-1", true},
        {"0-1-5,1-1-2", "0-2-7,1-1-1", false},
        {"0-1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ferry_my_gtid_set a, b;
        parsed(&a, cases[i].a);
        parsed(&b, cases[i].b);
        if (ferry__my_gtid_subset(&a, &b) != cases[i].in) fail_msg("case %zu", i);
        ferry__my_gtid_release(&a);
        ferry__my_gtid_release(&b);
    }
}

/* The dialect: file:offset without a GTID; MariaDB's connect state on MariaDB; MySQL's
 * COM_BINLOG_DUMP_GTID on MySQL; a position of the other kind of server refused by name. */
static void test_dump_kind(void **state)
{
    (void)state;
#define MY_POS "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
    static const struct {
        bool mariadb;     /* the server */
        const char *gtid; /* the position (NULL: none) */
        int rc;
        enum ferry_my_dump_kind kind; /* when FERRY_OK */
        const char *words;            /* in the error, when given */
    } cases[] = {
        {true, NULL, FERRY_OK, FERRY_MY_DUMP_FILE, NULL},
        {false, NULL, FERRY_OK, FERRY_MY_DUMP_FILE, NULL},
        {true, "0-1-5", FERRY_OK, FERRY_MY_DUMP_MARIADB_GTID, NULL},
        {false, MY_POS, FERRY_OK, FERRY_MY_DUMP_MYSQL_GTID, NULL},
        {false, "", FERRY_OK, FERRY_MY_DUMP_MYSQL_GTID, NULL},
        {true, "", FERRY_OK, FERRY_MY_DUMP_MARIADB_GTID, NULL},
        {true, MY_POS, FERRY_EINVAL, 0, "is a MySQL position, but the server is MariaDB"},
        {false, "0-1-5", FERRY_EINVAL, 0, "is a MariaDB position, but the server is MySQL"},
        {false, "junk", FERRY_EINVAL, 0, NULL},
    };
#undef MY_POS
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        /* a kind other than the expected one, so that each case must set it */
        enum ferry_my_dump_kind k =
            cases[i].kind == FERRY_MY_DUMP_FILE ? FERRY_MY_DUMP_MYSQL_GTID : FERRY_MY_DUMP_FILE;
        struct ferry_error err;
        int rc = ferry__my_gtid_dump_kind(cases[i].mariadb, cases[i].gtid, &k, &err);
        if (rc != cases[i].rc) fail_msg("case %zu: rc %d, want %d", i, rc, cases[i].rc);
        if (rc == FERRY_OK && k != cases[i].kind) fail_msg("case %zu: kind %d", i, (int)k);
        if (cases[i].words != NULL && strstr(err.message, cases[i].words) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.message, cases[i].words);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips), cmocka_unit_test(test_mariadb),
        cmocka_unit_test(test_mysql),       cmocka_unit_test(test_bad_text),
        cmocka_unit_test(test_events),      cmocka_unit_test(test_binary_set),
        cmocka_unit_test(test_binary_bad),  cmocka_unit_test(test_dump_packet),
        cmocka_unit_test(test_subset),      cmocka_unit_test(test_dump_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
