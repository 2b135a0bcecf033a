/* tests/unit/test_pgoutput.c - the pgoutput decoder (connectors/postgres/pg_repl.c) on
 * hand-built messages: every message kind, tuple value kinds, replication frames and the
 * standby status update, LSN text; then every truncation of every valid message, trailing
 * bytes, lying lengths and counts, and random garbage: always a clean FERRY_EINVAL, never a
 * read past the buffer (the buffers are heap copies of exactly the input, so ASan sees any
 * overrun). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "connectors/postgres/pg_repl.h"
#include "ferry/core.h"

struct bytes {
    uint8_t b[4096];
    size_t n;
};

static void put(struct bytes *x, const void *p, size_t n)
{
    assert_true(x->n + n <= sizeof x->b);
    memcpy(x->b + x->n, p, n);
    x->n += n;
}
static void p8(struct bytes *x, int v)
{
    uint8_t b = (uint8_t)v;
    put(x, &b, 1);
}
static void p16(struct bytes *x, int v)
{
    uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    put(x, b, 2);
}
static void p32(struct bytes *x, int64_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(x, b, 4);
}
static void p64(struct bytes *x, uint64_t v)
{
    p32(x, (int64_t)(v >> 32));
    p32(x, (int64_t)(v & 0xffffffffu));
}
static void pstr(struct bytes *x, const char *s)
{
    put(x, s, strlen(s) + 1);
}
static void ptext(struct bytes *x, const char *s)
{
    p8(x, 't');
    p32(x, (int64_t)strlen(s));
    put(x, s, strlen(s));
}

/* Decodes from an exact-size heap copy so that any overrun is caught by ASan. */
static int decode(struct ferry_pg_repl_decoder *d, const uint8_t *p, size_t n,
                  struct ferry_pg_repl_msg *m, struct ferry_error *err)
{
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, p, n);
    int rc = ferry_pg_repl_decode(d, copy, n, m, err);
    /* The message points into the copy: check what the tests read, then free. */
    if (rc == FERRY_OK && m->kind == 'R')
        for (int i = 0; i < m->n_cols; i++)
            assert_true(strlen(m->cols[i].name) < n);
    free(copy);
    return rc;
}

static void build_begin(struct bytes *x)
{
    p8(x, 'B');
    p64(x, 0x16B374D848ULL);
    p64(x, 1000000);
    p32(x, 777);
}
static void build_commit(struct bytes *x)
{
    p8(x, 'C');
    p8(x, 0);
    p64(x, 0x100);
    p64(x, 0x180);
    p64(x, 2000000);
}
static void build_relation(struct bytes *x)
{
    p8(x, 'R');
    p32(x, 16384);
    pstr(x, "public");
    pstr(x, "orders");
    p8(x, 'd');
    p16(x, 3);
    p8(x, 1);
    pstr(x, "id");
    p32(x, 20);
    p32(x, -1);
    p8(x, 0);
    pstr(x, "name");
    p32(x, 25);
    p32(x, -1);
    p8(x, 0);
    pstr(x, "amount");
    p32(x, 1700);
    p32(x, (12 << 16 | 2) + 4);
}
static void build_insert(struct bytes *x)
{
    p8(x, 'I');
    p32(x, 16384);
    p8(x, 'N');
    p16(x, 3);
    ptext(x, "42");
    p8(x, 'n');
    ptext(x, "12.50");
}
static void build_update(struct bytes *x)
{
    p8(x, 'U');
    p32(x, 16384);
    p8(x, 'K');
    p16(x, 3);
    ptext(x, "41");
    p8(x, 'n');
    p8(x, 'n');
    p8(x, 'N');
    p16(x, 3);
    ptext(x, "42");
    p8(x, 'u');
    p8(x, 'b');
    p32(x, 2);
    p8(x, 0xAB);
    p8(x, 0xCD);
}
static void build_delete(struct bytes *x)
{
    p8(x, 'D');
    p32(x, 16384);
    p8(x, 'O');
    p16(x, 2);
    ptext(x, "7");
    ptext(x, "x");
}
static void build_truncate(struct bytes *x)
{
    p8(x, 'T');
    p32(x, 2);
    p8(x, 1);
    p32(x, 16384);
    p32(x, 16390);
}
static void build_type(struct bytes *x)
{
    p8(x, 'Y');
    p32(x, 90000);
    pstr(x, "public");
    pstr(x, "mood");
}
static void build_origin(struct bytes *x)
{
    p8(x, 'O');
    p64(x, 0x55);
    pstr(x, "node_a");
}
static void build_message(struct bytes *x)
{
    p8(x, 'M');
    p8(x, 1);
    p64(x, 0x99);
    pstr(x, "ferry");
    p32(x, 3);
    put(x, "end", 3);
}

typedef void (*builder_fn)(struct bytes *);
/* protocol 2's stream blocks */
static void build_stream_start(struct bytes *x)
{
    p8(x, 'S');
    p32(x, 4242);
    p8(x, 1);
}
static void build_stream_stop(struct bytes *x)
{
    p8(x, 'E');
}
static void build_stream_commit(struct bytes *x)
{
    p8(x, 'c');
    p32(x, 4242);
    p8(x, 0);
    p64(x, 0x200);
    p64(x, 0x280);
    p64(x, 3000000);
}
static void build_stream_abort(struct bytes *x)
{
    p8(x, 'A');
    p32(x, 4242);
    p32(x, 4243);
}
static const builder_fn builders[] = {
    build_begin,        build_commit,      build_relation,      build_insert,      build_update,
    build_delete,       build_truncate,    build_type,          build_origin,      build_message,
    build_stream_start, build_stream_stop, build_stream_commit, build_stream_abort};

/* Decodes the message `build` makes from an exact-size heap copy and returns the copy, which
 * m points into: the caller frees it after reading m. */
static uint8_t *decode_kept(struct ferry_pg_repl_decoder *d, builder_fn build,
                            struct ferry_pg_repl_msg *m)
{
    struct bytes x;
    memset(&x, 0, sizeof x);
    build(&x);
    uint8_t *keep = malloc(x.n);
    assert_non_null(keep);
    memcpy(keep, x.b, x.n);
    struct ferry_error err;
    assert_int_equal(ferry_pg_repl_decode(d, keep, x.n, m, &err), FERRY_OK);
    return keep;
}

/* Decodes the message `build` makes (decode(): a copy freed at once) and expects success. */
static void decode_built(struct ferry_pg_repl_decoder *d, builder_fn build,
                         struct ferry_pg_repl_msg *m)
{
    struct bytes x;
    memset(&x, 0, sizeof x);
    build(&x);
    struct ferry_error err;
    assert_int_equal(decode(d, x.b, x.n, m, &err), FERRY_OK);
}

static void test_messages(void **state)
{
    (void)state;
    struct ferry_pg_repl_decoder d;
    ferry_pg_repl_decoder_init(&d);
    struct ferry_pg_repl_msg m;
    struct ferry_error err;
    struct bytes x;

    decode_built(&d, build_begin, &m);
    assert_int_equal(m.kind, 'B');
    assert_true(m.final_lsn == 0x16B374D848ULL);
    assert_int_equal(m.time, 1000000);
    assert_int_equal(m.xid, 777);

    decode_built(&d, build_commit, &m);
    assert_true(m.commit_lsn == 0x100 && m.end_lsn == 0x180);
    assert_int_equal(m.time, 2000000);

    decode_built(&d, build_stream_start, &m);
    assert_int_equal(m.kind, 'S');
    assert_int_equal(m.xid, 4242);
    assert_true(m.first_segment);
    decode_built(&d, build_stream_stop, &m);
    assert_int_equal(m.kind, 'E');
    decode_built(&d, build_stream_commit, &m);
    assert_int_equal(m.kind, 'c');
    assert_int_equal(m.xid, 4242);
    assert_true(m.commit_lsn == 0x200 && m.end_lsn == 0x280);
    assert_int_equal(m.time, 3000000);
    decode_built(&d, build_stream_abort, &m);
    assert_int_equal(m.kind, 'A');
    assert_int_equal(m.xid, 4242);
    assert_int_equal(m.subxid, 4243);

    uint8_t *keep = decode_kept(&d, build_relation, &m);
    assert_int_equal(m.relid, 16384);
    assert_string_equal(m.nspname, "public");
    assert_string_equal(m.relname, "orders");
    assert_int_equal(m.replident, 'd');
    assert_int_equal(m.n_cols, 3);
    assert_true(m.cols[0].key);
    assert_false(m.cols[1].key);
    assert_string_equal(m.cols[2].name, "amount");
    assert_int_equal(m.cols[2].type_oid, 1700);
    assert_int_equal(m.cols[0].typmod, -1);
    free(keep);

    keep = decode_kept(&d, build_insert, &m);
    assert_int_equal(m.kind, 'I');
    assert_int_equal(m.new_tuple.n, 3);
    assert_int_equal(m.new_tuple.values[0].kind, 't');
    assert_int_equal(m.new_tuple.values[0].len, 2);
    assert_memory_equal(m.new_tuple.values[0].data, "42", 2);
    assert_int_equal(m.new_tuple.values[1].kind, 'n');
    assert_memory_equal(m.new_tuple.values[2].data, "12.50", 5);
    free(keep);

    keep = decode_kept(&d, build_update, &m);
    assert_int_equal(m.old_kind, 'K');
    assert_int_equal(m.old_tuple.n, 3);
    assert_memory_equal(m.old_tuple.values[0].data, "41", 2);
    assert_int_equal(m.new_tuple.values[1].kind, 'u');
    assert_int_equal(m.new_tuple.values[2].kind, 'b');
    assert_int_equal(m.new_tuple.values[2].data[1], 0xCD);
    free(keep);

    /* An update without an old image. */
    memset(&x, 0, sizeof x);
    p8(&x, 'U');
    p32(&x, 5);
    p8(&x, 'N');
    p16(&x, 1);
    ptext(&x, "z");
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_OK);
    assert_int_equal(m.old_kind, 0);
    assert_int_equal(m.new_tuple.n, 1);

    decode_built(&d, build_delete, &m);
    assert_int_equal(m.old_kind, 'O');
    assert_int_equal(m.old_tuple.n, 2);

    keep = decode_kept(&d, build_truncate, &m);
    assert_int_equal(m.n_rels, 2);
    assert_int_equal(m.truncate_options, 1);
    assert_int_equal(ferry_pg_repl_truncate_relid(&m, 0), 16384);
    assert_int_equal(ferry_pg_repl_truncate_relid(&m, 1), 16390);
    assert_int_equal(ferry_pg_repl_truncate_relid(&m, 2), 0);
    free(keep);

    decode_built(&d, build_type, &m);
    assert_int_equal(m.type_oid, 90000);

    decode_built(&d, build_origin, &m);
    assert_true(m.origin_lsn == 0x55);

    decode_built(&d, build_message, &m);
    assert_int_equal(m.content_len, 3);
    ferry_pg_repl_decoder_release(&d);
}

/* Every prefix of every valid message is refused; so is one extra byte. */
static void test_truncations(void **state)
{
    (void)state;
    struct ferry_pg_repl_decoder d;
    ferry_pg_repl_decoder_init(&d);
    struct ferry_pg_repl_msg m;
    struct ferry_error err;
    for (size_t b = 0; b < sizeof builders / sizeof builders[0]; b++) {
        struct bytes x;
        memset(&x, 0, sizeof x);
        builders[b](&x);
        for (size_t n = 0; n < x.n; n++) {
            ferry_error_clear(&err);
            int rc = decode(&d, x.b, n, &m, &err);
            assert_int_equal(rc, FERRY_EINVAL);
            assert_int_equal(err.code, FERRY_EINVAL);
            assert_non_null(strstr(err.message, "replication message"));
        }
        x.b[x.n++] = 0;
        assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
        assert_non_null(strstr(err.message, "trailing"));
    }
    ferry_pg_repl_decoder_release(&d);
}

static void test_lies(void **state)
{
    (void)state;
    struct ferry_pg_repl_decoder d;
    ferry_pg_repl_decoder_init(&d);
    struct ferry_pg_repl_msg m;
    struct ferry_error err;
    struct bytes x;

    /* A column count far beyond the bytes present: refused before allocating. */
    memset(&x, 0, sizeof x);
    p8(&x, 'I');
    p32(&x, 1);
    p8(&x, 'N');
    p16(&x, 1600);
    p8(&x, 'n');
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    /* More columns than PostgreSQL allows. */
    memset(&x, 0, sizeof x);
    p8(&x, 'I');
    p32(&x, 1);
    p8(&x, 'N');
    p16(&x, 0xFFFF);
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    /* A value length larger than the message, and a negative one. */
    memset(&x, 0, sizeof x);
    p8(&x, 'I');
    p32(&x, 1);
    p8(&x, 'N');
    p16(&x, 1);
    p8(&x, 't');
    p32(&x, 1000);
    put(&x, "abc", 3);
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    x.b[9] = 0xFF;
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    /* An unknown value kind, an unknown message, a bad tuple marker, an unterminated name. */
    memset(&x, 0, sizeof x);
    p8(&x, 'I');
    p32(&x, 1);
    p8(&x, 'N');
    p16(&x, 1);
    p8(&x, 'q');
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    uint8_t unknown[] = {'Z', 1, 2, 3};
    assert_int_equal(decode(&d, unknown, sizeof unknown, &m, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "'Z'"));
    uint8_t bad_marker[] = {'I', 0, 0, 0, 1, 'X', 0, 0};
    assert_int_equal(decode(&d, bad_marker, sizeof bad_marker, &m, &err), FERRY_EINVAL);
    uint8_t bad_delete[] = {'D', 0, 0, 0, 1, 'N', 0, 0};
    assert_int_equal(decode(&d, bad_delete, sizeof bad_delete, &m, &err), FERRY_EINVAL);
    uint8_t unterminated[] = {'R', 0, 0, 0, 1, 'p', 'u', 'b'};
    assert_int_equal(decode(&d, unterminated, sizeof unterminated, &m, &err), FERRY_EINVAL);
    /* A truncate that claims more relations than it carries. */
    memset(&x, 0, sizeof x);
    p8(&x, 'T');
    p32(&x, 0x7FFFFFFF);
    p8(&x, 0);
    p32(&x, 1);
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    /* A relation with a huge column count. */
    memset(&x, 0, sizeof x);
    p8(&x, 'R');
    p32(&x, 1);
    pstr(&x, "s");
    pstr(&x, "t");
    p8(&x, 'd');
    p16(&x, 1500);
    assert_int_equal(decode(&d, x.b, x.n, &m, &err), FERRY_EINVAL);
    assert_int_equal(decode(&d, NULL, 0, &m, &err), FERRY_EINVAL);
    ferry_pg_repl_decoder_release(&d);
}

static void test_frames(void **state)
{
    (void)state;
    struct ferry_pg_repl_frame f;
    struct ferry_error err;
    struct bytes x;
    memset(&x, 0, sizeof x);
    p8(&x, 'w');
    p64(&x, 0x10);
    p64(&x, 0x20);
    p64(&x, 12345);
    build_begin(&x);
    assert_int_equal(ferry_pg_repl_parse_frame(x.b, x.n, &f, &err), FERRY_OK);
    assert_int_equal(f.kind, 'w');
    assert_true(f.wal_start == 0x10 && f.wal_end == 0x20);
    assert_int_equal(f.len, 21);
    assert_int_equal(f.data[0], 'B');
    for (size_t n = 0; n < 25; n++)
        assert_int_equal(ferry_pg_repl_parse_frame(x.b, n, &f, &err), FERRY_EINVAL);

    memset(&x, 0, sizeof x);
    p8(&x, 'k');
    p64(&x, 0xABCDEF);
    p64(&x, 99);
    p8(&x, 1);
    assert_int_equal(ferry_pg_repl_parse_frame(x.b, x.n, &f, &err), FERRY_OK);
    assert_true(f.wal_end == 0xABCDEF);
    assert_true(f.reply_requested);
    for (size_t n = 0; n < x.n; n++)
        assert_int_equal(ferry_pg_repl_parse_frame(x.b, n, &f, &err), FERRY_EINVAL);
    uint8_t other[] = {'x', 0};
    assert_int_equal(ferry_pg_repl_parse_frame(other, sizeof other, &f, &err), FERRY_EINVAL);

    uint8_t st[34];
    assert_int_equal(ferry_pg_repl_status_update(st, 0x0102030405060708ULL, 2, 3, 4, true), 34);
    assert_int_equal(st[0], 'r');
    assert_int_equal(st[1], 1);
    assert_int_equal(st[8], 8);
    assert_int_equal(st[16], 2);
    assert_int_equal(st[24], 3);
    assert_int_equal(st[32], 4);
    assert_int_equal(st[33], 1);
}

static void test_lsn(void **state)
{
    (void)state;
    uint64_t v;
    char buf[32];
    assert_int_equal(ferry_pg_lsn_parse("16/B374D848", &v), FERRY_OK);
    assert_true(v == 0x16B374D848ULL);
    ferry_pg_lsn_format(v, buf, sizeof buf);
    assert_string_equal(buf, "16/B374D848");
    assert_int_equal(ferry_pg_lsn_parse("0/0", &v), FERRY_OK);
    assert_true(v == 0);
    assert_int_equal(ferry_pg_lsn_parse("FFFFFFFF/FFFFFFFF", &v), FERRY_OK);
    assert_true(v == UINT64_MAX);
    const char *bad[] = {"", "/", "1/", "/1", "1", "g/1", "1/2/3", "123456789/1", "1/-2", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(ferry_pg_lsn_parse(bad[i], &v), FERRY_EINVAL);
    assert_int_equal(ferry_pg_lsn_parse(NULL, &v), FERRY_EINVAL);
}

/* Random bytes, and valid messages with random bytes flipped: only OK or EINVAL. */
static void test_garbage(void **state)
{
    (void)state;
    struct ferry_pg_repl_decoder d;
    ferry_pg_repl_decoder_init(&d);
    struct ferry_pg_repl_msg m;
    struct ferry_pg_repl_frame f;
    struct ferry_error err;
    uint32_t seed = 12345;
    const char kinds[] = "BCORYIUDTMwkZ";
    for (int iter = 0; iter < 60000; iter++) {
        struct bytes x;
        memset(&x, 0, sizeof x);
        if (iter % 2 == 0) {
            builders[(size_t)iter / 2 % (sizeof builders / sizeof builders[0])](&x);
            for (int k = 0; k < 3; k++) {
                seed = seed * 1103515245u + 12345u;
                x.b[(seed >> 8) % x.n] ^= (uint8_t)(seed >> 20);
            }
        } else {
            seed = seed * 1103515245u + 12345u;
            x.n = (seed >> 16) % 64;
            for (size_t i = 0; i < x.n; i++) {
                seed = seed * 1103515245u + 12345u;
                x.b[i] = (uint8_t)(seed >> 16);
            }
            if (x.n > 0) x.b[0] = (uint8_t)kinds[(seed >> 24) % (sizeof kinds - 1)];
        }
        int rc = decode(&d, x.b, x.n, &m, &err);
        assert_true(rc == FERRY_OK || rc == FERRY_EINVAL);
        uint8_t *copy = malloc(x.n ? x.n : 1);
        memcpy(copy, x.b, x.n);
        rc = ferry_pg_repl_parse_frame(copy, x.n, &f, &err);
        assert_true(rc == FERRY_OK || rc == FERRY_EINVAL);
        free(copy);
    }
    ferry_pg_repl_decoder_release(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages), cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_lies),     cmocka_unit_test(test_frames),
        cmocka_unit_test(test_lsn),      cmocka_unit_test(test_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
