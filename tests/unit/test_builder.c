/* tests/unit/test_builder.c - the row writer: when batches close, what they carry
 * (seq, shard, bytes, position JSON), sticky errors, row cancellation and the reuse of
 * buffer capacities from one batch to the next. */
#include "unit.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "batch/builder.h"
#include "ferry/core.h"

/* ---- fixture: an emit that keeps what it is given ---- */

#define MAX_BATCHES 64

struct sink {
    struct ferry_batch *b[MAX_BATCHES];
    int n;
    int fail_at; /* 1-based call that fails, 0: never */
    int calls;
};

static int capture(void *ctx, struct ferry_batch *b, struct ferry_error *err)
{
    struct sink *s = ctx;
    s->calls++;
    if (s->fail_at == s->calls) {
        ferry_batch_unref(b); /* emit owns the batch even when it fails */
        return ferry_error_set(err, FERRY_ESINK, "test", "resource t: the queue is closed");
    }
    assert_true(s->n < MAX_BATCHES);
    s->b[s->n++] = b;
    return FERRY_OK;
}

static void sink_clear(struct sink *s)
{
    for (int i = 0; i < s->n; i++)
        ferry_batch_unref(s->b[i]);
    s->n = 0;
}

static struct ferry_schema *schema_of(const char *spec)
{
    /* "name:type[!]" separated by spaces; '!' = not nullable; decimal128 is (10,2) */
    struct ferry_schema *s = ferry_schema_new();
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *colon = strchr(tok, ':');
        *colon = '\0';
        char *type = colon + 1;
        bool nullable = type[strlen(type) - 1] != '!';
        if (!nullable) type[strlen(type) - 1] = '\0';
        enum ferry_type t;
        assert_int_equal(ferry_type_from_name(type, &t), FERRY_OK);
        assert_int_equal(ferry_schema_add_field(s, tok, t, nullable, NULL), FERRY_OK);
        if (t == FERRY_TYPE_DECIMAL128) {
            s->fields[s->n_fields - 1].precision = 10;
            s->fields[s->n_fields - 1].scale = 2;
        }
    }
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    return s;
}

static struct ferry_row_writer *writer(struct ferry_schema *s, const char *resource, int64_t rows,
                                       int64_t bytes, struct sink *sk)
{
    struct ferry_rw_limits lim = {.rows = rows, .bytes = bytes};
    struct ferry_row_writer *rw = ferry__rw_new(s, resource, lim, capture, sk);
    assert_non_null(rw);
    return rw;
}

static int int_row(struct ferry_row_writer *rw, int64_t v, struct ferry_error *err)
{
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, v);
    return ferry_rw_end(rw, err);
}

/* ---- closing ---- */

static void test_close_on_rows(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64!");
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "t", 3, 0, &sk);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(int_row(rw, 100 + i, NULL), FERRY_OK);
        assert_int_equal(sk.n, (i + 1) / 3);
    }
    assert_int_equal(ferry__rw_rows(rw), 7);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(sk.n, 3);
    const int64_t lens[] = {3, 3, 1};
    int64_t v = 100;
    for (int i = 0; i < 3; i++) {
        struct ferry_batch *b = sk.b[i];
        assert_int_equal(b->seq, (uint64_t)i + 1);
        assert_int_equal(b->length, lens[i]);
        assert_string_equal(b->resource, "t");
        assert_ptr_equal(b->schema, s);
        assert_string_equal(b->position, "{\"shard\":0}");
        assert_int_equal(b->bytes, (size_t)(lens[i] * 9)); /* 8 value bytes + 1 op */
        for (int64_t r = 0; r < b->length; r++)
            assert_int_equal(ferry_col_int(b, 0, r), v++);
    }
    assert_ptr_equal(ferry_rw_schema(rw), s);
    /* a flush with nothing pending emits nothing */
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(sk.n, 3);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_close_on_bytes(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("name:utf8 flag:bool");
    struct sink sk = {0};
    /* per row: 10 data + 4 offset + 1 op; per batch: 4 (offsets[0]) + bitmap bytes */
    struct ferry_row_writer *rw = writer(s, "t", 1000, 100, &sk);
    int rows = 0;
    while (sk.n == 0) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_text(rw, "0123456789", 10);
        ferry_rw_bool(rw, rows % 2);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
        rows++;
    }
    /* 6 rows: 6*15 + 4 + 1 = 95 < 100; 7 rows: 105 + 4 + 1 = 110 */
    assert_int_equal(rows, 7);
    assert_int_equal(sk.b[0]->length, 7);
    assert_int_equal(sk.b[0]->bytes, 110);
    /* a single huge value closes the batch right after its row */
    char big[300];
    memset(big, 'x', sizeof big);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_text(rw, big, sizeof big);
    ferry_rw_null(rw);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    assert_int_equal(sk.n, 2);
    assert_int_equal(sk.b[1]->length, 1);
    /* 300 + 4 + 1 + 4 + 1 bool bitmap byte + 1 validity byte */
    assert_int_equal(sk.b[1]->bytes, 311);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_close_on_tick(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64 name:utf8");
    struct sink sk = {0};
    atomic_int tick = 0, stop = 0;
    struct ferry_row_writer *rw = writer(s, "t", 1000, 0, &sk);
    ferry__rw_set_signals(rw, &tick, &stop);
    for (int i = 0; i < 5; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        ferry_rw_text(rw, "ab", 2);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(sk.n, 0);
    /* the tick fires in the middle of row 6: the batch closes after that row is complete */
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 5);
    atomic_store(&tick, 1);
    assert_int_equal(sk.n, 0);
    ferry_rw_text(rw, "cd", 2);
    assert_int_equal(sk.n, 0);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    assert_int_equal(sk.n, 1);
    assert_int_equal(sk.b[0]->length, 6);
    assert_int_equal(ferry_col_int(sk.b[0], 0, 5), 5);
    assert_int_equal(atomic_load(&tick), 0); /* cleared */

    /* a tick while nothing is pending: no empty batch, the next complete row closes */
    atomic_store(&tick, 1);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(sk.n, 1);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 6);
    ferry_rw_text(rw, "ef", 2);
    ferry_rw_cancel_row(rw); /* a cancelled row is not a complete row */
    assert_int_equal(sk.n, 1);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 7);
    ferry_rw_text(rw, "gh", 2);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    assert_int_equal(sk.n, 2);
    assert_int_equal(sk.b[1]->length, 1);
    assert_int_equal(ferry_col_int(sk.b[1], 0, 0), 7);
    assert_int_equal(sk.b[1]->seq, 2);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_flush_and_done(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64! name:utf8");
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "t", 1000, 0, &sk);
    const int key[] = {0};
    ferry_rw_set_position_columns(rw, 1, key);

    /* an empty shard: the done flush emits a zero-row batch */
    assert_int_equal(ferry_rw_flush(rw, true, NULL), FERRY_OK);
    assert_int_equal(sk.n, 1);
    struct ferry_batch *e = sk.b[0];
    assert_int_equal(e->length, 0);
    assert_int_equal(e->seq, 1);
    assert_string_equal(e->position, "{\"shard\":0,\"done\":true}");
    assert_non_null(e->ops);
    assert_int_equal(e->columns[1].offsets[0], 0);
    assert_non_null(e->columns[0].values);
    assert_int_equal(e->bytes, 0);

    /* shard 1: two rows, flushed without done, then done with nothing pending */
    ferry_rw_set_shard(rw, 1);
    assert_int_equal(int_row(rw, 0, NULL), FERRY_EINVAL); /* 1 of 2 values: sticky */
    ferry__rw_free(rw);

    rw = writer(s, "t", 1000, 0, &sk);
    ferry_rw_set_position_columns(rw, 1, key);
    ferry_rw_set_shard(rw, 1);
    for (int i = 1; i <= 2; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        ferry_rw_text(rw, "n", 1);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    ferry_rw_set_offset(rw, 77);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(sk.n, 2);
    assert_int_equal(sk.b[1]->length, 2);
    assert_int_equal(sk.b[1]->shard, 1);
    assert_int_equal(sk.b[1]->seq, 1); /* seq starts at 1 per writer */
    assert_string_equal(sk.b[1]->position, "{\"shard\":1,\"key\":[2],\"n\":77}");
    assert_int_equal(ferry_rw_flush(rw, true, NULL), FERRY_OK);
    assert_int_equal(sk.n, 3);
    assert_int_equal(sk.b[2]->length, 0);
    assert_int_equal(sk.b[2]->shard, 1);
    assert_int_equal(sk.b[2]->seq, 2);
    /* an empty final batch still carries the shard's last key */
    assert_string_equal(sk.b[2]->position, "{\"shard\":1,\"key\":[2],\"n\":77,\"done\":true}");

    /* shard 2: rows and done in one flush; n is reset by the shard change */
    ferry_rw_set_shard(rw, 2);
    ferry_rw_begin(rw, FERRY_OP_DELETE);
    ferry_rw_int(rw, 9);
    ferry_rw_null(rw);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, true, NULL), FERRY_OK);
    assert_int_equal(sk.n, 4);
    assert_int_equal(sk.b[3]->length, 1);
    assert_int_equal(ferry_batch_op(sk.b[3], 0), FERRY_OP_DELETE);
    assert_string_equal(sk.b[3]->position, "{\"shard\":2,\"key\":[9],\"done\":true}");

    /* the rows of the next shard start a fresh batch with the builder's buffers intact */
    ferry_rw_set_shard(rw, 3);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 10);
    ferry_rw_text(rw, "z", 1);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    /* a shard change with rows pending closes the batch first, under the old shard */
    ferry_rw_set_shard(rw, 4);
    assert_int_equal(sk.n, 5);
    assert_int_equal(sk.b[4]->shard, 3);
    assert_string_equal(sk.b[4]->position, "{\"shard\":3,\"key\":[10]}");
    size_t len;
    assert_memory_equal(ferry_col_bytes(sk.b[4], 1, 0, &len), "z", 1);
    assert_int_equal(len, 1);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

/* ---- positions ---- */

static const char *position_of(struct ferry_schema *s, int n, const int *cols,
                               void (*row)(struct ferry_row_writer *), struct sink *sk)
{
    struct ferry_row_writer *rw = writer(s, "t", 1000, 0, sk);
    ferry_rw_set_position_columns(rw, n, cols);
    row(rw);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);
    return sk->b[sk->n - 1]->position;
}

static const uint8_t UUID1[16] = {18,  62, 69, 103, 232, 155, 18, 211,
                                  164, 86, 66, 102, 20,  23,  64, 0};

static void row_mixed(struct ferry_row_writer *rw)
{
    for (int i = 0; i < 2; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i == 0 ? 1 : -42);                               /* id int64 */
        ferry_rw_text(rw, i == 0 ? "a" : "O\"Brien\\\n", i == 0 ? 1 : 9); /* name utf8 */
        ferry_rw_int(rw, INT64_C(-14182939500000));                       /* at timestamptz */
        struct ferry_decimal128 d = {(uint64_t)-12345, -1};
        ferry_rw_dec128(rw, d);                 /* amount decimal(10,2) */
        ferry_rw_fixed(rw, UUID1, 16);          /* u uuid */
        ferry_rw_text(rw, "\x00\xff\x10", 3);   /* raw binary */
        ferry_rw_bool(rw, true);                /* ok bool */
        ferry_rw_null(rw);                      /* f float64 */
        ferry_rw_int(rw, -719162);              /* d date32 */
        ferry_rw_int(rw, INT64_C(49500123456)); /* t time64 */
        ferry_rw_text(rw, "{\"a\":[1]}", 9);    /* j json */
        ferry_rw_text(rw, "-0.50", 5);          /* n decimal_text */
        ferry_rw_int(rw, -7);                   /* s int16 */
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
}

static void row_floats(struct ferry_row_writer *rw)
{
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_float(rw, 0.1);
    ferry_rw_float(rw, 0.1);
    ferry_rw_float(rw, NAN);
    ferry_rw_float(rw, -INFINITY);
    ferry_rw_float(rw, 1e300);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
}

static void test_positions(void **state)
{
    (void)state;
    struct sink sk = {0};
    struct ferry_schema *s = schema_of("id:int64! name:utf8 at:timestamptz amount:decimal128 "
                                       "u:uuid raw:binary ok:bool f:float64 d:date32 t:time64 "
                                       "j:json n:decimal_text s:int16");
    const int k1[] = {0};
    assert_string_equal(position_of(s, 1, k1, row_mixed, &sk), "{\"shard\":0,\"key\":[-42]}");
    const int k2[] = {1, 0};
    assert_string_equal(position_of(s, 2, k2, row_mixed, &sk),
                        "{\"shard\":0,\"key\":[\"O\\\"Brien\\\\\\u000a\",-42]}");
    const int k3[] = {2, 3, 4, 5, 6, 7};
    assert_string_equal(position_of(s, 6, k3, row_mixed, &sk),
                        "{\"shard\":0,\"key\":[-14182939500000,\"-123.45\","
                        "\"123e4567-e89b-12d3-a456-426614174000\",\"00ff10\",true,null]}");
    const int k4[] = {8, 9, 10, 11, 12};
    assert_string_equal(position_of(s, 5, k4, row_mixed, &sk),
                        "{\"shard\":0,\"key\":[-719162,49500123456,\"{\\\"a\\\":[1]}\","
                        "\"-0.50\",-7]}");
    assert_string_equal(position_of(s, 0, NULL, row_mixed, &sk), "{\"shard\":0}");
    ferry_schema_unref(s);

    s = schema_of("a:float64 b:float32 c:float64 d:float64 e:float64");
    const int kf[] = {0, 1, 2, 3, 4};
    assert_string_equal(position_of(s, 5, kf, row_floats, &sk),
                        "{\"shard\":0,\"key\":[0.1,0.1,\"NaN\",\"-Infinity\",1e+300]}");
    ferry_schema_unref(s);

    /* a decimal with a negative scale prints its zeros */
    s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "big", FERRY_TYPE_DECIMAL128, false, NULL), FERRY_OK);
    s->fields[0].precision = 5;
    s->fields[0].scale = -3;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct ferry_row_writer *rw = writer(s, "t", 10, 0, &sk);
    const int k0[] = {0};
    ferry_rw_set_position_columns(rw, 1, k0);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    struct ferry_decimal128 d = {99999, 0};
    ferry_rw_dec128(rw, d);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_string_equal(sk.b[sk.n - 1]->position, "{\"shard\":0,\"key\":[\"99999000\"]}");
    /* bad position columns are a sticky error */
    const int bad[] = {1};
    ferry_rw_set_position_columns(rw, 1, bad);
    struct ferry_error err;
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "position column index 1"));
    ferry__rw_free(rw);
    ferry_schema_unref(s);
    sink_clear(&sk);
}

/* ---- sticky errors ---- */

static void test_wrong_value_count(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("a:int64 b:int64 c:int64 d:int64 e:int64 f:int64");
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "orders", 10, 0, &sk);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int i = 0; i < 5; i++)
        ferry_rw_int(rw, i);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_string_equal(err.message, "resource orders: row has 5 values, schema has 6 columns");
    assert_int_equal(err.code, FERRY_EINVAL);
    /* sticky: a good row and a flush report the same error */
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int i = 0; i < 6; i++)
        ferry_rw_int(rw, i);
    memset(&err, 0, sizeof err);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_string_equal(err.message, "resource orders: row has 5 values, schema has 6 columns");
    assert_int_equal(ferry_rw_flush(rw, true, &err), FERRY_EINVAL);
    assert_int_equal(sk.calls, 0);
    assert_int_equal(ferry__rw_rows(rw), 0);
    ferry__rw_free(rw);

    rw = writer(s, "orders", 10, 0, &sk);
    assert_int_equal(int_row(rw, 1, NULL), FERRY_EINVAL);
    ferry__rw_free(rw);

    rw = writer(s, "orders", 10, 0, &sk);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int i = 0; i < 7; i++)
        ferry_rw_int(rw, i);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_string_equal(err.message, "resource orders: row has 7 values, schema has 6 columns");
    ferry__rw_free(rw);

    /* values outside a row, an end without a begin, a begin inside a row */
    rw = writer(s, "orders", 10, 0, &sk);
    ferry_rw_int(rw, 1);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "outside ferry_rw_begin()"));
    ferry__rw_free(rw);
    rw = writer(s, "orders", 10, 0, &sk);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "without ferry_rw_begin()"));
    ferry__rw_free(rw);
    rw = writer(s, "orders", 10, 0, &sk);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 1);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int i = 0; i < 6; i++)
        ferry_rw_int(rw, i);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "inside a row"));
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_EINVAL);
    ferry__rw_free(rw);
    assert_int_equal(sk.calls, 0);
    ferry_schema_unref(s);
}

static void check_bad_value(const char *spec, void (*write)(struct ferry_row_writer *),
                            const char *expect)
{
    struct ferry_schema *s = schema_of(spec);
    struct sink sk = {0};
    struct ferry_rw_limits lim = {.rows = 10, .max_value_bytes = 8};
    struct ferry_row_writer *rw = ferry__rw_new(s, "orders", lim, capture, &sk);
    struct ferry_error err;
    /* one good row first: the error names the right row and the batch stays intact */
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    for (int c = 0; c < s->n_fields; c++) {
        if (s->fields[c].nullable)
            ferry_rw_null(rw);
        else
            ferry_rw_int(rw, 0);
    }
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_OK);
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    write(rw);
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    if (strstr(err.message, expect) == NULL)
        fail_msg("got \"%s\", want \"%s\"", err.message, expect);
    assert_int_equal(ferry__rw_rows(rw), 1);
    ferry__rw_free(rw);
    ferry_schema_unref(s);
}

static void w_int8(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, 200);
}
static void w_int8_neg(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, -129);
}
static void w_int16(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, 70000);
}
static void w_int32(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, INT64_C(3000000000));
}
static void w_date(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, INT64_C(-3000000000));
}
static void w_time(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, -1);
}
static void w_float32(struct ferry_row_writer *rw)
{
    ferry_rw_float(rw, 1e39);
}
static void w_int_text(struct ferry_row_writer *rw)
{
    ferry_rw_int(rw, 1);
}
static void w_text_int(struct ferry_row_writer *rw)
{
    ferry_rw_text(rw, "1", 1);
}
static void w_bool_int(struct ferry_row_writer *rw)
{
    ferry_rw_bool(rw, true);
}
static void w_float_int(struct ferry_row_writer *rw)
{
    ferry_rw_float(rw, 1.0);
}
static void w_dec_uuid(struct ferry_row_writer *rw)
{
    struct ferry_decimal128 d = {1, 0};
    ferry_rw_dec128(rw, d);
}
static void w_fixed_short(struct ferry_row_writer *rw)
{
    ferry_rw_fixed(rw, (const uint8_t *)"abc", 3);
}
static void w_fixed_int(struct ferry_row_writer *rw)
{
    ferry_rw_fixed(rw, UUID1, 16);
}
static void w_dec_wide(struct ferry_row_writer *rw)
{
    struct ferry_decimal128 d = {UINT64_C(10000000000), 0}; /* 11 digits > precision 10 */
    ferry_rw_dec128(rw, d);
}
static void w_dec_wide_neg(struct ferry_row_writer *rw)
{
    struct ferry_decimal128 d = {(uint64_t)-INT64_C(10000000000), -1};
    ferry_rw_dec128(rw, d);
}
static void w_dec_fixed_wide(struct ferry_row_writer *rw)
{
    uint8_t b[16] = {0};
    b[15] = 0x80; /* the most negative int128 */
    ferry_rw_fixed(rw, b, 16);
}
static void w_big_text(struct ferry_row_writer *rw)
{
    ferry_rw_text(rw, "123456789", 9);
}
static void w_null_notnull(struct ferry_row_writer *rw)
{
    ferry_rw_text(rw, "ok", 2);
    ferry_rw_null(rw);
}
static void w_bad_op(struct ferry_row_writer *rw)
{
    ferry_rw_cancel_row(rw);
    ferry_rw_begin(rw, (enum ferry_op)7);
    ferry_rw_null(rw);
}

static void test_bad_values(void **state)
{
    (void)state;
    check_bad_value("qty:int8", w_int8,
                    "resource orders: column qty (int8): value 200 is out of range (row 2)");
    check_bad_value("qty:int8", w_int8_neg, "value -129 is out of range");
    check_bad_value("qty:int16", w_int16, "column qty (int16): value 70000 is out of range");
    check_bad_value("qty:int32", w_int32, "column qty (int32): value 3000000000 is out of range");
    check_bad_value("day:date32", w_date, "column day (date32): value -3000000000 is out");
    check_bad_value("at:time64", w_time, "column at (time64): value -1 is out of range");
    check_bad_value("x:float32", w_float32, "column x (float32): value 1e+39 is out of range");
    check_bad_value("name:utf8", w_int_text, "column name (utf8): ferry_rw_int() cannot write");
    check_bad_value("qty:int32", w_text_int, "column qty (int32): ferry_rw_text() cannot write");
    check_bad_value("qty:int32", w_bool_int, "ferry_rw_bool() cannot write");
    check_bad_value("qty:int32", w_float_int, "ferry_rw_float() cannot write");
    check_bad_value("u:uuid", w_dec_uuid, "column u (uuid): ferry_rw_dec128() cannot write");
    check_bad_value("u:uuid", w_fixed_short, "column u (uuid): got 3 bytes, expected 16");
    check_bad_value("qty:int64", w_fixed_int, "ferry_rw_fixed() cannot write");
    check_bad_value("amount:decimal128", w_dec_wide,
                    "column amount (decimal128): unscaled value 10000000000 has more digits");
    check_bad_value("amount:decimal128", w_dec_wide_neg, "unscaled value -10000000000 has more");
    check_bad_value("amount:decimal128", w_dec_fixed_wide,
                    "-170141183460469231731687303715884105728 has more digits");
    check_bad_value("body:utf8", w_big_text,
                    "column body (utf8): a value of 9 bytes exceeds the 8-byte limit");
    check_bad_value("a:utf8 id:int64!", w_null_notnull, "column id (int64) is not nullable");
    check_bad_value("a:utf8", w_bad_op, "unknown operation 7");
}

static void test_failing_emit(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64");
    struct sink sk = {.fail_at = 2};
    struct ferry_row_writer *rw = writer(s, "t", 2, 0, &sk);
    struct ferry_error err;
    for (int i = 0; i < 3; i++)
        assert_int_equal(int_row(rw, i, NULL), FERRY_OK);
    /* the 4th row closes batch 2, whose emit fails */
    assert_int_equal(int_row(rw, 3, &err), FERRY_ESINK);
    assert_string_equal(err.message, "resource t: the queue is closed");
    assert_int_equal(sk.calls, 2);
    assert_int_equal(sk.n, 1);
    /* sticky from now on, without calling emit again */
    assert_int_equal(int_row(rw, 4, &err), FERRY_ESINK);
    assert_string_equal(err.message, "resource t: the queue is closed");
    assert_int_equal(ferry_rw_flush(rw, true, &err), FERRY_ESINK);
    assert_int_equal(sk.calls, 2);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

/* ---- cancel_row ---- */

static void cancel_fixture_row(struct ferry_row_writer *rw, int i)
{
    ferry_rw_begin(rw, (enum ferry_op)(i % 2));
    ferry_rw_int(rw, i);
    if (i == 1)
        ferry_rw_null(rw);
    else
        ferry_rw_text(rw, "abcdef", (size_t)(i % 6));
    ferry_rw_bool(rw, i % 3 == 0);
    ferry_rw_float(rw, i * 0.5);
    assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
}

static void assert_same_batch(const struct ferry_batch *a, const struct ferry_batch *b)
{
    assert_int_equal(a->length, b->length);
    assert_memory_equal(a->ops, b->ops, (size_t)a->length);
    assert_int_equal(a->bytes, b->bytes);
    assert_string_equal(a->position, b->position);
    for (int c = 0; c < a->schema->n_fields; c++) {
        const struct ferry_column *x = &a->columns[c], *y = &b->columns[c];
        assert_int_equal(x->null_count, y->null_count);
        assert_int_equal(x->validity == NULL, y->validity == NULL);
        size_t bits = (size_t)(a->length + 7) / 8;
        if (x->validity) assert_memory_equal(x->validity, y->validity, bits);
        if (ferry_type_is_varwidth(x->type)) {
            assert_memory_equal(x->offsets, y->offsets, sizeof(int32_t) * (size_t)(a->length + 1));
            assert_memory_equal(x->data, y->data, (size_t)x->offsets[a->length]);
        } else if (x->type == FERRY_TYPE_BOOL) {
            assert_memory_equal(x->values, y->values, bits);
        } else {
            assert_memory_equal(x->values, y->values,
                                (size_t)ferry_type_width(x->type) * (size_t)a->length);
        }
    }
}

static void test_cancel_row(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64! name:utf8 ok:bool f:float64");
    struct sink want = {0}, got = {0};
    const int key[] = {0, 1};

    struct ferry_row_writer *rw = writer(s, "t", 1000, 0, &want);
    ferry_rw_set_position_columns(rw, 2, key);
    for (int i = 2; i < 12; i++)
        cancel_fixture_row(rw, i);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    ferry__rw_free(rw);

    rw = writer(s, "t", 1000, 0, &got);
    ferry_rw_set_position_columns(rw, 2, key);
    for (int i = 2; i < 12; i++) {
        /* before each kept row, a row cancelled after 1, 2, 3 or 4 values; some are nulls
         * in columns without other nulls, which allocates their bitmap */
        ferry_rw_begin(rw, FERRY_OP_DELETE);
        ferry_rw_int(rw, -1);
        if (i % 4 > 0) {
            if (i % 2)
                ferry_rw_null(rw);
            else
                ferry_rw_text(rw, "cancelled-text-that-is-long", 27);
        }
        if (i % 4 > 1) {
            if (i % 2)
                ferry_rw_null(rw);
            else
                ferry_rw_bool(rw, true);
        }
        if (i % 4 > 2) ferry_rw_null(rw);
        ferry_rw_cancel_row(rw);
        ferry_rw_cancel_row(rw); /* outside a row: nothing */
        cancel_fixture_row(rw, i);
    }
    assert_int_equal(ferry__rw_rows(rw), 10);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(want.n, 1);
    assert_int_equal(got.n, 1);
    assert_same_batch(got.b[0], want.b[0]);
    assert_null(got.b[0]->columns[1].validity); /* only cancelled rows had nulls there */
    assert_null(got.b[0]->columns[3].validity);

    /* a cancelled row that held the only null keeps the bitmap out of the batch, and
     * a real null afterwards is counted once */
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, 100);
    ferry_rw_null(rw);
    ferry_rw_cancel_row(rw);
    cancel_fixture_row(rw, 1);
    cancel_fixture_row(rw, 2);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    struct ferry_batch *b = got.b[1];
    assert_int_equal(b->length, 2);
    assert_int_equal(b->columns[1].null_count, 1);
    assert_true(ferry_col_is_null(b, 1, 0));
    assert_false(ferry_col_is_null(b, 1, 1));
    size_t len;
    ferry_col_bytes(b, 1, 1, &len);
    assert_int_equal(len, 2);
    ferry__rw_free(rw);
    sink_clear(&want);
    sink_clear(&got);
    ferry_schema_unref(s);
}

/* ---- capacity reuse and allocation failures ---- */

static void fill_rows(struct ferry_row_writer *rw, int first, int count, struct ferry_error *err)
{
    for (int i = first; i < first + count; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        ferry_rw_int(rw, i);
        ferry_rw_text(rw, "some text that varies", (size_t)(5 + i % 17));
        if (i % 7 == 3)
            ferry_rw_null(rw);
        else
            ferry_rw_float(rw, i * 1.5);
        ferry_rw_bool(rw, i & 1);
        ferry_rw_int(rw, INT64_C(1700000000000000) + i);
        assert_int_equal(ferry_rw_end(rw, err), FERRY_OK);
    }
}

static void test_capacity_reuse(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64 name:utf8 f:float64 ok:bool at:timestamp");
    struct sink sk = {0};
    const int rows = 1000;
    struct ferry_row_writer *rw = writer(s, "t", rows, 0, &sk);
    struct ferry_error err;
    fill_rows(rw, 0, rows, &err);
    assert_int_equal(sk.n, 1);

    /* the second identical batch allocates nothing until its last row closes it */
    ferry_mem_fail_after(0);
    fill_rows(rw, 0, rows - 1, &err);
    ferry_mem_fail_after(-1);
    assert_int_equal(sk.n, 1);
    fill_rows(rw, rows - 1, 1, &err);
    assert_int_equal(sk.n, 2);
    fill_rows(rw, 0, rows, &err);
    assert_int_equal(sk.n, 3);

    /* batch 2 and 3: capacities are exactly the final sizes of the batch before */
    struct ferry_batch *b2 = sk.b[1], *b3 = sk.b[2];
    size_t text = (size_t)b2->columns[1].offsets[rows];
    for (int c = 0; c < s->n_fields; c++) {
        const struct ferry_column *x = &b2->columns[c], *y = &b3->columns[c];
        assert_int_equal(x->values_cap, y->values_cap);
        assert_int_equal(x->offsets_cap, y->offsets_cap);
        assert_int_equal(x->data_cap, y->data_cap);
        assert_int_equal(x->validity_cap, y->validity_cap);
    }
    assert_int_equal(b2->columns[0].values_cap, rows * 8);
    assert_int_equal(b2->columns[1].offsets_cap, (rows + 1) * 4);
    assert_int_equal(b2->columns[1].data_cap, text);
    assert_int_equal(b2->columns[2].validity_cap, (rows + 7) / 8);
    assert_int_equal(b2->columns[3].values_cap, (rows + 7) / 8);
    assert_int_equal(b3->columns[1].offsets[rows], (int32_t)text);
    /* the first batch grew geometrically: its capacities are at least as large */
    assert_true(sk.b[0]->columns[0].values_cap >= b2->columns[0].values_cap);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64 name:utf8 f:float64 ok:bool");
    /* every allocation the writer makes, from creation to the third batch, fails in turn:
     * the writer reports ENOMEM (or fails to be created) and leaks nothing; the position's
     * text key value (name) and its encoding allocate too */
    const int pos_cols[] = {1, 0};
    int failed = 0;
    bool succeeded = false;
    for (long n = 0; n < 400; n++) {
        struct sink sk = {0};
        ferry_mem_fail_after(n);
        struct ferry_rw_limits lim = {.rows = 700};
        struct ferry_row_writer *rw = ferry__rw_new(s, "t", lim, capture, &sk);
        if (rw == NULL) {
            ferry_mem_fail_after(-1);
            failed++;
            continue;
        }
        ferry_rw_set_position_columns(rw, 2, pos_cols);
        int rc = FERRY_OK;
        struct ferry_error err;
        for (int i = 0; i < 2000 && rc == FERRY_OK; i++) {
            ferry_rw_begin(rw, FERRY_OP_INSERT);
            ferry_rw_int(rw, i);
            char big[600];
            memset(big, 'a' + i % 26, sizeof big);
            ferry_rw_text(rw, big, (size_t)(i % 600));
            if (i % 5 == 0)
                ferry_rw_null(rw);
            else
                ferry_rw_float(rw, i);
            ferry_rw_bool(rw, true);
            rc = ferry_rw_end(rw, &err);
        }
        if (rc == FERRY_OK) rc = ferry_rw_flush(rw, true, &err);
        ferry_mem_fail_after(-1);
        if (rc != FERRY_OK) {
            assert_int_equal(rc, FERRY_ENOMEM);
            assert_non_null(strstr(err.message, "resource t: "));
            failed++;
        } else {
            assert_int_equal(sk.n, 3);
            /* the last row's key: name 'x' * (1999 % 600), id 1999 */
            char x[200], want[300];
            memset(x, 'x', 199);
            x[199] = '\0';
            snprintf(want, sizeof want, "{\"shard\":0,\"key\":[\"%s\",1999],\"done\":true}", x);
            assert_string_equal(sk.b[2]->position, want);
            succeeded = true;
            ferry__rw_free(rw);
            sink_clear(&sk);
            break;
        }
        ferry__rw_free(rw);
        sink_clear(&sk);
    }
    assert_true(succeeded);
    assert_true(failed > 20);
    ferry_schema_unref(s);
}

static void test_stop(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("id:int64");
    struct sink sk = {0};
    atomic_int tick = 0, stop = 0;
    struct ferry_row_writer *rw = writer(s, "t", 100, 0, &sk);
    assert_int_equal(ferry_rw_stop_requested(rw), 0);
    ferry__rw_set_signals(rw, &tick, &stop);
    assert_int_equal(int_row(rw, 1, NULL), FERRY_OK);
    atomic_store(&stop, FERRY_EPAUSED);
    assert_int_equal(ferry_rw_stop_requested(rw), FERRY_EPAUSED);
    struct ferry_error err;
    assert_int_equal(int_row(rw, 2, &err), FERRY_EPAUSED);
    assert_string_equal(err.message, "resource t: run paused");
    assert_int_equal(ferry__rw_rows(rw), 2); /* the row was accepted */
    /* the pause drains: a flush emits what was accepted */
    assert_int_equal(ferry_rw_flush(rw, false, &err), FERRY_OK);
    assert_int_equal(sk.n, 1);
    assert_int_equal(sk.b[0]->length, 2);
    atomic_store(&stop, FERRY_ECANCELED);
    assert_int_equal(int_row(rw, 3, &err), FERRY_ECANCELED);
    assert_string_equal(err.message, "resource t: run canceled");
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

static void test_bool_bitmap_and_growth(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("ok:bool");
    struct sink sk = {0};
    /* more rows than the first capacity, so the bitmaps grow while nulls exist */
    struct ferry_row_writer *rw = writer(s, "t", 5000, 0, &sk);
    for (int i = 0; i < 4099; i++) {
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        if (i % 11 == 5)
            ferry_rw_null(rw);
        else
            ferry_rw_bool(rw, i % 3 == 0);
        assert_int_equal(ferry_rw_end(rw, NULL), FERRY_OK);
    }
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    struct ferry_batch *b = sk.b[0];
    int64_t nulls = 0;
    for (int i = 0; i < 4099; i++) {
        bool null = i % 11 == 5;
        nulls += null;
        assert_int_equal(ferry_col_is_null(b, 0, i), null);
        assert_int_equal(ferry_col_bool(b, 0, i), !null && i % 3 == 0);
    }
    assert_int_equal(b->columns[0].null_count, nulls);
    /* padding bits of the last byte are zero in both bitmaps */
    assert_int_equal(b->columns[0].validity[4099 / 8] & ~0x07, 0);
    assert_int_equal(b->columns[0].values[4099 / 8] & ~0x07, 0);
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
}

/* ---- column-at-a-time appends (ferry__rw_bulk_*) ---- */

/* One bulk write of rows [0, n) of the arrays below into rw: n rows or false. */
static const int64_t b_int[6] = {1, -2, 0, 4, 32767, 6};
static const double b_flt[6] = {0.5, -1.25, 0, 3e300, NAN, 6};
static const int64_t b_bool[6] = {1, 0, 0, 1, 1, 0};
static const uint8_t b_null[6] = {0, 0, 1, 0, 0, 0};
static const char b_lo[] = "alphabeta";
static const char b_hi[] = "xyz";

static void bulk_spans(uint64_t sp[6])
{
    const uint64_t hi = UINT64_C(1) << 63;
    sp[0] = UINT64_C(5) << 32 | 0;      /* alpha */
    sp[1] = hi | UINT64_C(3) << 32 | 0; /* xyz, from the second base */
    sp[2] = 0;                          /* null */
    sp[3] = UINT64_C(4) << 32 | 5;      /* beta */
    sp[4] = 0;                          /* empty */
    sp[5] = hi | UINT64_C(1) << 32 | 2; /* z */
}

static bool bulk_write(struct ferry_row_writer *rw, int64_t at, int64_t n, const int64_t *ints)
{
    uint64_t sp[6];
    bulk_spans(sp);
    const char *const bases[2] = {b_lo, b_hi};
    struct ferry_decimal128 dec[6];
    for (int i = 0; i < 6; i++)
        dec[i] = (struct ferry_decimal128){(uint64_t)(i * 100), 0};
    return ferry__rw_bulk_int(rw, ints + at, b_null + at, n) &&
           ferry__rw_bulk_text(rw, sp + at, bases, b_null + at, n) &&
           ferry__rw_bulk_float(rw, b_flt + at, b_null + at, n) &&
           ferry__rw_bulk_bool(rw, b_bool + at, b_null + at, n) &&
           ferry__rw_bulk_fixed16(rw, (const uint8_t *)(dec + at), b_null + at, n);
}

static void test_bulk(void **state)
{
    (void)state;
    struct ferry_schema *s = schema_of("a:int16 b:utf8 c:float64 d:bool e:decimal128");
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "t", 4, 0, &sk);
    /* the batch takes 4 rows: begin says so, and the end closes it */
    int64_t n = ferry__rw_bulk_begin(rw, 6, NULL);
    assert_int_equal(n, 4);
    assert_true(bulk_write(rw, 0, n, b_int));
    ferry_rw_set_offset(rw, 4);
    assert_int_equal(ferry__rw_bulk_end(rw, n, NULL), FERRY_OK);
    assert_int_equal(sk.n, 1);
    /* a value out of int16's range: false, cancel, and the row path names column and row */
    const int64_t bad[6] = {1, 2, 3, 4, 40000, 6};
    n = ferry__rw_bulk_begin(rw, 2, NULL);
    assert_int_equal(n, 2);
    assert_true(bulk_write(rw, 4, n, b_int));
    ferry__rw_bulk_cancel(rw, n);
    n = ferry__rw_bulk_begin(rw, 2, NULL);
    assert_false(bulk_write(rw, 4, n, bad));
    ferry__rw_bulk_cancel(rw, n);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_int(rw, bad[4]);
    ferry_rw_text(rw, "q", 1);
    ferry_rw_float(rw, 1);
    ferry_rw_bool(rw, true);
    ferry_rw_dec128(rw, (struct ferry_decimal128){7, 0});
    assert_int_equal(ferry_rw_end(rw, &err), FERRY_EINVAL);
    assert_non_null(strstr(err.message, "column a (int16): value 40000 is out of range (row 5)"));
    ferry__rw_free(rw);

    struct ferry_batch *b = sk.b[0];
    assert_int_equal(b->length, 4);
    assert_string_equal(b->position, "{\"shard\":0,\"n\":4}");
    const char *texts[4] = {"alpha", "xyz", "", "beta"};
    for (int64_t r = 0; r < 4; r++) {
        bool null = r == 2;
        for (int c = 0; c < 5; c++)
            assert_int_equal(ferry_col_is_null(b, c, r), null);
        size_t len;
        const uint8_t *p = ferry_col_bytes(b, 1, r, &len);
        assert_int_equal(len, strlen(texts[r]));
        assert_memory_equal(p, texts[r], len);
        if (null) continue;
        assert_int_equal(ferry_col_int(b, 0, r), b_int[r]);
        assert_true(ferry_col_float(b, 2, r) == b_flt[r]);
        assert_int_equal(ferry_col_bool(b, 3, r), b_bool[r] != 0);
        assert_int_equal(ferry_col_dec128(b, 4, r).lo, (uint64_t)(r * 100));
    }
    for (int c = 0; c < 5; c++)
        assert_int_equal(b->columns[c].null_count, 1);
    sink_clear(&sk);

    /* a NOT NULL column refuses a null; the byte limit ends a bulk write early; a cancel
     * gives back the nulls and bytes it counted */
    struct ferry_schema *s2 = schema_of("a:int64! b:utf8");
    rw = writer(s2, "t", 100, 100, &sk);
    n = ferry__rw_bulk_begin(rw, 3, NULL);
    assert_false(ferry__rw_bulk_int(rw, b_int, b_null, n));
    ferry__rw_bulk_cancel(rw, n);
    const int64_t var[5] = {30, 30, 30, 30, 30}; /* 13 fixed bytes + 30 a row: 100 at row 3 */
    n = ferry__rw_bulk_begin(rw, 5, var);
    assert_int_equal(n, 3);
    uint64_t sp[6];
    bulk_spans(sp);
    const char *const bases[2] = {b_lo, b_hi};
    const uint8_t none[6] = {0};
    assert_true(ferry__rw_bulk_int(rw, b_int, none, 3));
    assert_true(ferry__rw_bulk_text(rw, sp, bases, b_null, 3));
    ferry__rw_bulk_cancel(rw, 3);
    assert_true(ferry__rw_bulk_int(rw, b_int, none, 1));
    assert_true(ferry__rw_bulk_text(rw, sp, bases, none, 1));
    assert_int_equal(ferry__rw_bulk_end(rw, 1, NULL), FERRY_OK);
    assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
    assert_int_equal(sk.n, 1);
    b = sk.b[0];
    assert_int_equal(b->length, 1);
    assert_int_equal(b->columns[1].null_count, 0);
    assert_int_equal(b->bytes, 13 + 5 + 4); /* 8 + 4 + 1 a row, 5 text bytes, 4 per var column */
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s2);
    ferry_schema_unref(s);
}

/* The bulk decimal check (a branch-free loop) accepts exactly what the row path accepts:
 * |unscaled| < 10^precision, or the NaN marker INT64_MAX:UINT64_MAX, at the edges of each
 * precision, on both sides of 2^64 (the 64-bit path up to precision 19, u128 above). */
static bool dec_row_ok(int precision, struct ferry_decimal128 d)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "d", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    s->fields[0].precision = precision;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "t", 8, 0, &sk);
    struct ferry_error err;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    ferry_rw_dec128(rw, d);
    bool ok = ferry_rw_end(rw, &err) == FERRY_OK;
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
    return ok;
}

static bool dec_bulk_ok(int precision, struct ferry_decimal128 d, int64_t pad)
{
    struct ferry_schema *s = ferry_schema_new();
    assert_int_equal(ferry_schema_add_field(s, "d", FERRY_TYPE_DECIMAL128, true, NULL), FERRY_OK);
    s->fields[0].precision = precision;
    assert_int_equal(ferry_schema_finish(s, NULL), FERRY_OK);
    struct sink sk = {0};
    struct ferry_row_writer *rw = writer(s, "t", 64, 0, &sk);
    struct ferry_decimal128 v[8] = {{0, 0}};
    uint8_t nul[8] = {0};
    v[pad] = d; /* the value among zeros, at several places of the block */
    int64_t n = ferry__rw_bulk_begin(rw, 8, NULL);
    assert_int_equal(n, 8);
    bool ok = ferry__rw_bulk_fixed16(rw, (const uint8_t *)v, nul, n);
    if (ok) {
        assert_int_equal(ferry__rw_bulk_end(rw, n, NULL), FERRY_OK);
        assert_int_equal(ferry_rw_flush(rw, false, NULL), FERRY_OK);
        assert_int_equal(sk.n, 1);
        struct ferry_decimal128 got = ferry_col_dec128(sk.b[0], 0, pad);
        assert_true(got.lo == d.lo && got.hi == d.hi);
    } else {
        ferry__rw_bulk_cancel(rw, n);
    }
    ferry__rw_free(rw);
    sink_clear(&sk);
    ferry_schema_unref(s);
    return ok;
}

__extension__ typedef unsigned __int128 u128;

static void test_bulk_decimal_bounds(void **state)
{
    (void)state;
    const int precs[] = {1, 4, 18, 19, 20, 38};
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        int p = precs[pi];
        u128 b = 1;
        for (int i = 0; i < p; i++)
            b *= 10;
        const u128 mags[] = {0, 1, b - 1, b, b + 1, (u128)1 << 64, ((u128)1 << 64) - 1, b * 2};
        for (size_t mi = 0; mi < sizeof mags / sizeof *mags; mi++) {
            for (int neg = 0; neg < 2; neg++) {
                u128 u = neg ? -mags[mi] : mags[mi];
                struct ferry_decimal128 d = {(uint64_t)u, (int64_t)(uint64_t)(u >> 64)};
                bool want = mags[mi] < b;
                assert_int_equal(dec_row_ok(p, d), want);
                for (int64_t pad = 0; pad < 8; pad += 7)
                    assert_int_equal(dec_bulk_ok(p, d, pad), want);
            }
        }
        const struct ferry_decimal128 odd[] = {{0, -1}, {UINT64_MAX, 0}, {0, INT64_MIN},
                                               {UINT64_MAX, INT64_MAX}, {1, -1}};
        for (size_t k = 0; k < sizeof odd / sizeof *odd; k++)
            assert_int_equal(dec_bulk_ok(p, odd[k], 3), dec_row_ok(p, odd[k]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_on_rows),
        cmocka_unit_test(test_close_on_bytes),
        cmocka_unit_test(test_close_on_tick),
        cmocka_unit_test(test_flush_and_done),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_wrong_value_count),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_failing_emit),
        cmocka_unit_test(test_cancel_row),
        cmocka_unit_test(test_capacity_reuse),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_bool_bitmap_and_growth),
        cmocka_unit_test(test_bulk),
        cmocka_unit_test(test_bulk_decimal_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
