/* tests/unit/test_my_binlog.c - the binary log decoder (my_binlog.h) on hand-built event
 * bytes, laid out from the public format documentation: a TABLE_MAP of one column of every
 * supported type, a WRITE_ROWS v2 row of edge values (negative DECIMAL, DECIMAL(65,30),
 * DATETIME2(6), negative TIME2(3), TIMESTAMP2, CHAR/ENUM/SET through the STRING type's
 * metadata, BIT(10), YEAR, DATE, FLOAT, INT24 all ones, NULL), UPDATE_ROWS v1 before and
 * after images, DELETE_ROWS v2, and refusals: truncation names the table and column, a rows
 * event of another table id, an unsupported type. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "unit.h"
#include "connectors/mysql/my_binlog.h"
#include "ferry/error.h"

struct bb {
    uint8_t b[4096];
    size_t n;
};

static void put(struct bb *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void u8(struct bb *b, unsigned v)
{
    b->b[b->n++] = (uint8_t)v;
}
static void le(struct bb *b, uint64_t v, int k)
{
    for (int i = 0; i < k; i++)
        u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}
static void be(struct bb *b, uint64_t v, int k)
{
    for (int i = k - 1; i >= 0; i--)
        u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}
static void name(struct bb *b, const char *s)
{
    u8(b, (unsigned)strlen(s));
    put(b, s, strlen(s) + 1);
}

/* column types and metadata of the wide table, in order */
enum { NCOL = 19 };
static const uint8_t types[NCOL] = {8,   3,   246, 246, 18, 19, 17, 15, 254, 254,
                                    254, 252, 16,  13,  10, 5,  4,  9,  1};

static void wide_table_map(struct bb *b)
{
    le(b, 77, 6); /* table id */
    le(b, 1, 2);
    name(b, "shop");
    name(b, "wide");
    u8(b, NCOL);
    put(b, types, NCOL);
    struct bb m = {{0}, 0};
    u8(&m, 10), u8(&m, 2);    /* DECIMAL(10,2): precision, scale */
    u8(&m, 65), u8(&m, 30);   /* DECIMAL(65,30) */
    u8(&m, 6);                /* DATETIME2(6) */
    u8(&m, 3);                /* TIME2(3) */
    u8(&m, 0);                /* TIMESTAMP2(0) */
    le(&m, 1200, 2);          /* VARCHAR(300) utf8mb4: max bytes */
    u8(&m, 0xfe), u8(&m, 40); /* CHAR(10) utf8mb4 */
    u8(&m, 247), u8(&m, 1);   /* ENUM, 1 byte */
    u8(&m, 248), u8(&m, 1);   /* SET, 1 byte */
    u8(&m, 2);                /* BLOB: 2-byte length */
    u8(&m, 2), u8(&m, 1);     /* BIT(10): 2 bits, 1 byte */
    u8(&m, 8);                /* DOUBLE */
    u8(&m, 4);                /* FLOAT */
    u8(b, (unsigned)m.n);
    put(b, m.b, m.n);
    le(b, 1u << 18, 3); /* null bitmap: only the TINY column is nullable */
}

static void wide_row(struct bb *b)
{
    le(b, 0, 3);                     /* row null bitmap: none null... */
    b->b[b->n - 1] = 0x04;           /* ...but column 19 (bit 18) */
    le(b, 0x8000000000000000ULL, 8); /* BIGINT: the stored bits of -2^63 */
    le(b, 0xffffffffULL, 4);         /* INT UNSIGNED max */
    /* -1234.56 as DECIMAL(10,2): 4 bytes for 8 digits, 1 for 2; inverted, sign bit */
    uint8_t d[5] = {0x00, 0x00, 0x04, 0xd2, 0x38};
    for (int i = 0; i < 5; i++)
        d[i] ^= 0xff;
    d[0] ^= 0x80;
    put(b, d, 5);
    /* 12345678901234567890123456789012345.123456789012345678901234567890 as (65,30) */
    be(b, 12345678ULL | 0x80000000ULL, 4);
    be(b, 901234567, 4), be(b, 890123456, 4), be(b, 789012345, 4);
    be(b, 123456789, 4), be(b, 12345678, 4), be(b, 901234567, 4);
    be(b, 890, 2);
    /* DATETIME2(6) 2024-02-29 13:45:07.123456 */
    uint64_t ymd = ((uint64_t)(2024 * 13 + 2) << 5) | 29, hms = 13 << 12 | 45 << 6 | 7;
    be(b, (ymd << 17 | hms) + 0x8000000000ULL, 5);
    be(b, 123456, 3);
    /* TIME2(3) -01:00:00.500: two fraction bytes in units of 100 us */
    int64_t a = (int64_t)((1 << 12) << 16 | 5000);
    be(b, (uint64_t)((int64_t)(1ULL << 39) - a), 5);
    be(b, 1700000000, 4);                /* TIMESTAMP2(0) */
    u8(b, 6), put(b, "h\xc3\xa9llo", 6); /* VARCHAR: 1200 >= 256 -> 2-byte length */
    b->b[b->n - 7] = 0;                  /* (rewrite as a 2-byte length) */
    b->n -= 7;
    le(b, 6, 2), put(b, "h\xc3\xa9llo", 6);
    u8(b, 2), put(b, "ab", 2); /* CHAR: max 40 < 256 -> 1-byte length */
    u8(b, 2);                  /* ENUM index 2 */
    u8(b, 5);                  /* SET members 1 and 3 */
    le(b, 3, 2), put(b, "\x00\x01\x02", 3);
    be(b, 0x2ab, 2); /* BIT(10) */
    u8(b, 124);      /* YEAR 2024 */
    le(b, 29 | 2 << 5 | 2024 << 9, 3);
    double dv = 0.1;
    uint64_t db;
    memcpy(&db, &dv, 8);
    le(b, db, 8);
    float fv = 1.5f;
    uint32_t fb;
    memcpy(&fb, &fv, 4);
    le(b, fb, 4);
    le(b, 0xffffff, 3); /* INT24: all ones */
}

struct seen {
    struct ferry_my_bl_value v[64];
    uint32_t col[64];
    enum ferry_my_bl_image img[64];
    int n, rows;
};

static int on_value(void *ctx, enum ferry_my_bl_image img, uint32_t col,
                    const struct ferry_my_bl_value *v, struct ferry_error *err)
{
    (void)err;
    struct seen *s = ctx;
    assert_true(s->n < 64);
    s->v[s->n] = *v;
    s->col[s->n] = col;
    s->img[s->n++] = img;
    return FERRY_OK;
}

static int on_row_end(void *ctx, struct ferry_error *err)
{
    (void)err;
    ((struct seen *)ctx)->rows++;
    return FERRY_OK;
}

static void rows_header(struct bb *b, uint64_t table_id, bool v2, unsigned ncol)
{
    le(b, table_id, 6);
    le(b, 1, 2); /* STMT_END_F */
    if (v2) le(b, 2, 2);
    u8(b, ncol);
}

static void test_header(void **state)
{
    (void)state;
    struct bb b = {{0}, 0};
    le(&b, 1700000000, 4), u8(&b, 30), le(&b, 1, 4), le(&b, 60, 4), le(&b, 4242, 4), le(&b, 0, 2);
    struct ferry_my_bl_header h;
    struct ferry_error err;
    assert_int_equal(ferry__my_bl_header(b.b, b.n, &h, &err), FERRY_OK);
    assert_int_equal(h.type, FERRY_MY_BL_WRITE_ROWS_V2);
    assert_int_equal(h.event_size, 60);
    assert_int_equal(h.log_pos, 4242);
    assert_int_equal(ferry__my_bl_header(b.b, 18, &h, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "flags"));
}

static void test_wide_write(void **state)
{
    (void)state;
    struct bb tm = {{0}, 0};
    wide_table_map(&tm);
    struct ferry_my_bl_table *t = test_malloc(sizeof *t);
    struct ferry_error err;
    assert_int_equal(ferry__my_bl_table_map(tm.b, tm.n, 8, t, &err), FERRY_OK);
    assert_int_equal(t->table_id, 77);
    assert_string_equal(t->db, "shop");
    assert_string_equal(t->table, "wide");
    assert_int_equal(t->n_cols, NCOL);

    struct bb ev = {{0}, 0};
    rows_header(&ev, 77, true, NCOL);
    le(&ev, 0x7ffff, 3); /* all present */
    wide_row(&ev);
    uint64_t id = 0;
    assert_int_equal(ferry__my_bl_rows_table_id(ev.b, ev.n, &id, &err), FERRY_OK);
    assert_int_equal(id, 77);
    struct seen *s = test_calloc(1, sizeof *s);
    struct ferry_my_bl_rows_cb cb = {s, on_value, on_row_end};
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_WRITE_ROWS_V2, ev.b, ev.n, t, &cb, &err),
                     FERRY_OK);
    assert_int_equal(s->rows, 1);
    assert_int_equal(s->n, NCOL);
    const struct ferry_my_bl_value *v = s->v;
    assert_int_equal(v[0].kind, FERRY_MY_BL_INT);
    assert_int_equal(v[0].width, 8);
    assert_true((int64_t)v[0].u == INT64_MIN);
    assert_true(v[1].u == 0xffffffffULL && v[1].width == 4);
    assert_string_equal(v[2].text, "-1234.56");
    assert_string_equal(v[3].text,
                        "12345678901234567890123456789012345.123456789012345678901234567890");
    assert_int_equal(v[4].kind, FERRY_MY_BL_DATETIME);
    assert_true(v[4].year == 2024 && v[4].month == 2 && v[4].day == 29);
    assert_true(v[4].hour == 13 && v[4].minute == 45 && v[4].second == 7);
    assert_int_equal(v[4].micro, 123456);
    assert_int_equal(v[5].kind, FERRY_MY_BL_TIME);
    assert_true(v[5].negative && v[5].hour == 1 && v[5].minute == 0 && v[5].second == 0);
    assert_int_equal(v[5].micro, 500000);
    assert_int_equal(v[6].kind, FERRY_MY_BL_TIMESTAMP);
    assert_true(v[6].u == 1700000000 && v[6].micro == 0);
    assert_true(v[7].kind == FERRY_MY_BL_BYTES && v[7].n == 6);
    assert_memory_equal(v[7].p, "h\xc3\xa9llo", 6);
    assert_true(v[8].kind == FERRY_MY_BL_BYTES && v[8].n == 2);
    assert_memory_equal(v[8].p, "ab", 2);
    assert_true(v[9].kind == FERRY_MY_BL_ENUM && v[9].u == 2);
    assert_true(v[10].kind == FERRY_MY_BL_SET && v[10].u == 5);
    assert_true(v[11].kind == FERRY_MY_BL_BYTES && v[11].n == 3 && !v[11].mysql_json);
    assert_memory_equal(v[11].p, "\x00\x01\x02", 3);
    assert_true(v[12].kind == FERRY_MY_BL_BIT && v[12].u == 0x2ab);
    assert_true(v[13].kind == FERRY_MY_BL_YEAR && v[13].year == 2024);
    assert_true(v[14].kind == FERRY_MY_BL_DATE && v[14].year == 2024 && v[14].month == 2 &&
                v[14].day == 29);
    assert_true(v[15].kind == FERRY_MY_BL_FLOAT && v[15].d == 0.1);
    assert_true(v[16].kind == FERRY_MY_BL_FLOAT && v[16].d == 1.5);
    assert_true(v[17].u == 0xffffff && v[17].width == 3);
    assert_int_equal(v[18].kind, FERRY_MY_BL_NULL);

    /* every truncation is an error, never a crash (cut after the bitmap: no rows, valid) */
    const size_t rows_start = 6 + 2 + 2 + 1 + 3;
    for (size_t cut = 0; cut < ev.n; cut++) {
        if (cut == rows_start) continue;
        s->n = 0;
        s->rows = 0;
        int rc = ferry__my_bl_rows(FERRY_MY_BL_WRITE_ROWS_V2, ev.b, cut, t, &cb, &err);
        assert_int_equal(rc, FERRY_EINVAL);
        assert_int_equal(s->rows, 0);
    }
    s->n = 0;
    ferry__my_bl_rows(FERRY_MY_BL_WRITE_ROWS_V2, ev.b, ev.n - 1, t, &cb, &err);
    assert_non_null(strstr(err.message, "shop.wide, column 18"));
    /* another table's event */
    ev.b[0] = 78;
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_WRITE_ROWS_V2, ev.b, ev.n, t, &cb, &err),
                     FERRY_EINVAL);
    assert_non_null(strstr(err.message, "does not match"));
    /* every truncation of the table map too */
    for (size_t cut = 0; cut < tm.n; cut++)
        assert_int_equal(ferry__my_bl_table_map(tm.b, cut, 8, t, &err), FERRY_EINVAL);
    test_free(s);
    test_free(t);
}

static void small_table(struct ferry_my_bl_table *t)
{
    struct bb tm = {{0}, 0};
    le(&tm, 5, 6), le(&tm, 1, 2);
    name(&tm, "shop"), name(&tm, "t");
    u8(&tm, 2), u8(&tm, 3), u8(&tm, 15); /* INT, VARCHAR(10) latin1 */
    u8(&tm, 2), le(&tm, 10, 2);
    u8(&tm, 0x02);
    struct ferry_error err;
    assert_int_equal(ferry__my_bl_table_map(tm.b, tm.n, 8, t, &err), FERRY_OK);
}

static void test_update_delete(void **state)
{
    (void)state;
    struct ferry_my_bl_table *t = test_malloc(sizeof *t);
    small_table(t);
    struct ferry_error err;
    struct seen *s = test_calloc(1, sizeof *s);
    struct ferry_my_bl_rows_cb cb = {s, on_value, on_row_end};
    /* UPDATE_ROWS v1, two rows: (1,'a')->(1,'b') and (2,NULL)->(3,'\xe9') */
    struct bb ev = {{0}, 0};
    rows_header(&ev, 5, false, 2);
    u8(&ev, 3), u8(&ev, 3);
    u8(&ev, 0), le(&ev, 1, 4), u8(&ev, 1), u8(&ev, 'a');
    u8(&ev, 0), le(&ev, 1, 4), u8(&ev, 1), u8(&ev, 'b');
    u8(&ev, 2), le(&ev, 2, 4);
    u8(&ev, 0), le(&ev, 3, 4), u8(&ev, 1), u8(&ev, 0xe9);
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_UPDATE_ROWS_V1, ev.b, ev.n, t, &cb, &err),
                     FERRY_OK);
    assert_int_equal(s->rows, 2);
    assert_int_equal(s->n, 8);
    assert_true(s->img[0] == FERRY_MY_BL_BEFORE && s->v[0].u == 1);
    assert_true(s->img[1] == FERRY_MY_BL_BEFORE && s->v[1].p[0] == 'a');
    assert_true(s->img[3] == FERRY_MY_BL_AFTER && s->v[3].p[0] == 'b' && s->col[3] == 1);
    assert_true(s->v[4].u == 2 && s->v[5].kind == FERRY_MY_BL_NULL);
    assert_true(s->v[6].u == 3 && s->img[6] == FERRY_MY_BL_AFTER && s->v[7].p[0] == 0xe9);
    /* DELETE_ROWS v2 with extra data, a minimal image (only the key column present) */
    struct bb d = {{0}, 0};
    le(&d, 5, 6), le(&d, 0, 2), le(&d, 5, 2), put(&d, "\x00\x01\x00", 3);
    u8(&d, 2), u8(&d, 1);
    u8(&d, 0), le(&d, 9, 4);
    s->n = s->rows = 0;
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_DELETE_ROWS_V2, d.b, d.n, t, &cb, &err),
                     FERRY_OK);
    assert_true(s->rows == 1 && s->n == 1 && s->v[0].u == 9 && s->col[0] == 0);
    /* not a rows event; an unsupported column type */
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_XID, d.b, d.n, t, &cb, &err), FERRY_EINVAL);
    t->types[0] = 141; /* MariaDB's compressed VARCHAR */
    assert_int_equal(ferry__my_bl_rows(FERRY_MY_BL_DELETE_ROWS_V2, d.b, d.n, t, &cb, &err),
                     FERRY_EINVAL);
    assert_non_null(strstr(err.message, "not supported"));
    test_free(s);
    test_free(t);
}

static void test_rotate_xid(void **state)
{
    (void)state;
    struct bb b = {{0}, 0};
    le(&b, 4, 8), put(&b, "mariadb-bin.000002", 18);
    uint64_t pos = 0;
    char file[64];
    struct ferry_error err;
    assert_int_equal(ferry__my_bl_rotate(b.b, b.n, &pos, file, sizeof file, &err), FERRY_OK);
    assert_int_equal(pos, 4);
    assert_string_equal(file, "mariadb-bin.000002");
    assert_int_equal(ferry__my_bl_rotate(b.b, 8, &pos, file, sizeof file, &err), FERRY_EINVAL);
    uint64_t xid = 0;
    assert_int_equal(ferry__my_bl_xid(b.b, 8, &xid, &err), FERRY_OK);
    assert_int_equal(xid, 4);
    assert_int_equal(ferry__my_bl_xid(b.b, 7, &xid, &err), FERRY_EINVAL);
}

/* The shared stream's routing reads: a TABLE_MAP's id and names, a QUERY's db and statement. */
static void test_names_query(void **state)
{
    (void)state;
    struct bb b = {{0}, 0};
    wide_table_map(&b);
    uint64_t id = 0;
    char db[8], table[8];
    struct ferry_error err;
    assert_int_equal(ferry__my_bl_table_names(b.b, b.n, 8, &id, db, sizeof db, table,
                                              sizeof table, &err),
                     FERRY_OK);
    assert_true(id == 77);
    assert_string_equal(db, "shop");
    assert_string_equal(table, "wide");
    assert_int_equal(ferry__my_bl_table_names(b.b, 12, 8, &id, db, sizeof db, table,
                                              sizeof table, &err),
                     FERRY_EINVAL); /* cut inside the database name */
    assert_int_equal(ferry__my_bl_table_names(b.b, b.n, 8, &id, db, 4, table, sizeof table, &err),
                     FERRY_EINVAL); /* a name longer than the buffer */
    struct bb q = {{0}, 0};
    le(&q, 7, 4), le(&q, 0, 4), u8(&q, 4), le(&q, 0, 2), le(&q, 3, 2); /* post-header */
    u8(&q, 1), u8(&q, 2), u8(&q, 3);                                    /* status variables */
    put(&q, "shop", 5), put(&q, "ALTER TABLE t ADD c int", 23);
    const char *qdb = NULL, *stmt = NULL;
    size_t dbn = 0, sn = 0;
    assert_int_equal(ferry__my_bl_query(q.b, q.n, &qdb, &dbn, &stmt, &sn, &err), FERRY_OK);
    assert_true(dbn == 4 && memcmp(qdb, "shop", 4) == 0);
    assert_true(sn == 23 && memcmp(stmt, "ALTER TABLE t ADD c int", 23) == 0);
    assert_int_equal(ferry__my_bl_query(q.b, 18, &qdb, &dbn, &stmt, &sn, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "QUERY"));
    /* optional metadata (binlog_row_metadata = FULL): SIGNEDNESS skipped, COLUMN_NAME read */
    struct ferry_my_bl_table *t = test_malloc(sizeof *t);
    struct bb tm = {{0}, 0};
    le(&tm, 5, 6), le(&tm, 1, 2);
    name(&tm, "shop"), name(&tm, "t");
    u8(&tm, 2), u8(&tm, 3), u8(&tm, 15);
    u8(&tm, 2), le(&tm, 10, 2);
    u8(&tm, 0x02);
    size_t base = tm.n;
    u8(&tm, 1), u8(&tm, 1), u8(&tm, 0x80);                 /* SIGNEDNESS */
    u8(&tm, 4), u8(&tm, 8), u8(&tm, 2), put(&tm, "id", 2); /* COLUMN_NAME */
    u8(&tm, 4), put(&tm, "note", 4);
    assert_int_equal(ferry__my_bl_table_map(tm.b, tm.n, 8, t, &err), FERRY_OK);
    assert_true(t->has_names && t->n_cols == 2);
    assert_string_equal(t->names + t->name_off[0], "id");
    assert_string_equal(t->names + t->name_off[1], "note");
    assert_int_equal(ferry__my_bl_table_map(tm.b, tm.n - 3, 8, t, &err), FERRY_OK);
    assert_false(t->has_names); /* a cut optional part: names not trusted, the map stands */
    assert_int_equal(ferry__my_bl_table_map(tm.b, base, 8, t, &err), FERRY_OK);
    assert_false(t->has_names); /* none logged */
    test_free(t);
}

/* binlog_checksum = CRC32: the ISO-HDLC CRC-32 of the event before its 4-byte trailer. The
 * standard check value: CRC-32("The quick brown fox jumps over the lazy dog") = 0x414fa339,
 * here as a 43-byte "event" and its trailer. A FORMAT_DESCRIPTION event's is computed with
 * its in-use flag (bit 0 of byte 17) clear. */
static void test_checksum(void **state)
{
    (void)state;
    uint8_t ev[47];
    memcpy(ev, "The quick brown fox jumps over the lazy dog", 43);
    ev[43] = 0x39, ev[44] = 0xa3, ev[45] = 0x4f, ev[46] = 0x41;
    assert_true(ferry__my_bl_checksum_ok(ev, sizeof ev));
    ev[30] ^= 0x20;
    assert_false(ferry__my_bl_checksum_ok(ev, sizeof ev));
    ev[30] ^= 0x20;
    ev[46] ^= 1;
    assert_false(ferry__my_bl_checksum_ok(ev, sizeof ev));
    assert_false(ferry__my_bl_checksum_ok(ev, 22)); /* shorter than a header and a trailer */
    assert_false(ferry__my_bl_checksum_ok(NULL, 47));
    /* a FORMAT_DESCRIPTION event: checksummed with byte 17's bit 0 clear ("o" -> "n") */
    memcpy(ev, "The \x0fuick brown fnx jumps over the lazy dog", 43);
    uLong c = crc32(crc32(0L, Z_NULL, 0), ev, 43);
    for (int i = 0; i < 4; i++)
        ev[43 + i] = (uint8_t)(c >> (8 * i));
    assert_true(ferry__my_bl_checksum_ok(ev, sizeof ev));
    ev[17] |= 1; /* the server sets the flag while the file is open */
    assert_true(ferry__my_bl_checksum_ok(ev, sizeof ev));
    ev[4] = 0x71; /* any other event: the flag counts */
    assert_false(ferry__my_bl_checksum_ok(ev, sizeof ev));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_wide_write),
        cmocka_unit_test(test_update_delete),
        cmocka_unit_test(test_rotate_xid),
        cmocka_unit_test(test_names_query),
        cmocka_unit_test(test_checksum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
