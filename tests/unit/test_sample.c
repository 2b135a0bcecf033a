/* tests/unit/test_sample.c - the sample source through its vtable: determinism, types,
 * shards, resume, incremental reads over growing rows and a ticking clock, bounds. */
#include "unit.h"
#include "connector_harness.h"

static const struct ferry_source_vtable *vt;

struct src {
    struct ferry_cfg *cfg;
    void *ctx;
};

static struct src open_sample(const char *yaml)
{
    struct src s;
    struct ferry_error err;
    s.cfg = cfg_of(yaml);
    ASSERT_OK(vt->open(s.cfg, &s.ctx, &err), err);
    return s;
}

static void close_sample(struct src *s)
{
    vt->close(s->ctx);
    ferry_cfg_free(s->cfg);
}

/* Discover + plan + read every shard. */
static void read_table(struct src *s, struct ferry_resource_spec *spec, const char *route_cp,
                       int64_t batch_rows, struct collect *out, struct ferry_schema **schema_out,
                       char **plan_out)
{
    struct ferry_error err;
    struct ferry_schema *schema = NULL;
    char *plan = NULL;
    ASSERT_OK(vt->discover(s->ctx, spec, &schema, &err), err);
    ASSERT_OK(vt->plan(s->ctx, spec, schema, route_cp, &plan, &err), err);
    ASSERT_OK(read_all(vt, s->ctx, spec, schema, plan, batch_rows, out, &err), err);
    if (schema_out)
        *schema_out = schema;
    else
        ferry_schema_unref(schema);
    if (plan_out)
        *plan_out = plan;
    else
        ferry_free(plan);
}

static uint32_t digest_all(const struct collect *c)
{
    uint32_t h = 0;
    for (int i = 0; i < c->n; i++)
        h = h * 31 + ferry_batch_digest(c->b[i]);
    return h;
}

static void test_registry(void **state)
{
    (void)state;
    struct ferry_error err;
    assert_ptr_equal(ferry_source_find("sample"), vt);
    assert_null(ferry_source_find("nope"));
    for (const struct ferry_source_vtable *const *p = ferry_sources(); *p; p++)
        ASSERT_OK(ferry_source_vtable_check(*p, &err), err);
    for (const struct ferry_sink_vtable *const *p = ferry_sinks(); *p; p++)
        ASSERT_OK(ferry_sink_vtable_check(*p, &err), err);
    assert_non_null(ferry_sink_find("null"));
    assert_non_null(ferry_sink_find("sqlite"));

    struct ferry_sink_vtable broken = *ferry_sink_find("null");
    broken.name = "x";
    broken.apply = NULL;
    assert_int_not_equal(ferry_sink_vtable_check(&broken, &err), FERRY_OK);
    assert_string_equal(err.message, "sink \"x\": required slot apply is missing");
    struct ferry_source_vtable bsrc = *vt;
    bsrc.plan = NULL;
    assert_int_not_equal(ferry_source_vtable_check(&bsrc, &err), FERRY_OK);
    assert_string_equal(err.message, "source \"sample\": required slot plan is missing");
    bsrc = *vt;
    bsrc.abi = 99;
    assert_int_not_equal(ferry_source_vtable_check(&bsrc, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "ABI"));
    assert_string_equal(ferry_write_mode_name(FERRY_WRITE_MERGE), "merge");
    assert_string_equal(ferry_read_mode_name(FERRY_READ_INCREMENTAL), "incremental");
}

static void test_config_errors(void **state)
{
    (void)state;
    struct ferry_error err;
    void *ctx = NULL;
    struct ferry_cfg *c = cfg_of("seed: 1\n");
    assert_int_equal(vt->open(c, &ctx, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "rows"));
    ferry_cfg_free(c);
    c = cfg_of("rows: -1\n");
    assert_int_equal(vt->open(c, &ctx, &err), FERRY_ECONFIG);
    ferry_cfg_free(c);
    c = cfg_of("rows: 10\nclock: 500\n");
    assert_int_equal(vt->open(c, &ctx, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "clock"));
    ferry_cfg_free(c);
    const char *const *tk = vt->tuning_keys;
    bool rows = false, clock = false, seed = false;
    for (; *tk; tk++) {
        rows |= !strcmp(*tk, "rows");
        clock |= !strcmp(*tk, "clock");
        seed |= !strcmp(*tk, "seed");
    }
    assert_true(rows && clock && !seed);
}

static void test_determinism(void **state)
{
    (void)state;
    struct ferry_resource_spec spec = spec_of("users", FERRY_READ_FULL);
    struct collect a = {0}, b = {0}, c = {0};
    struct src s1 = open_sample("rows: 3000\nseed: 7\nclock: 2\n");
    struct src s2 = open_sample("rows: 3000\nseed: 7\nclock: 2\n");
    struct src s3 = open_sample("rows: 3000\nseed: 8\nclock: 2\n");
    read_table(&s1, &spec, NULL, 1000, &a, NULL, NULL);
    read_table(&s2, &spec, NULL, 1000, &b, NULL, NULL);
    read_table(&s3, &spec, NULL, 1000, &c, NULL, NULL);
    assert_int_equal(a.n, 3 + 1); /* three full batches and the empty done batch */
    assert_int_equal(collect_rows(&a), 3000);
    for (int i = 0; i < a.n; i++)
        assert_int_equal(ferry_batch_digest(a.b[i]), ferry_batch_digest(b.b[i]));
    assert_int_not_equal(digest_all(&a), digest_all(&c));
    /* Batch boundaries do not change the values. */
    struct collect d = {0};
    read_table(&s1, &spec, NULL, 3000, &d, NULL, NULL);
    assert_int_equal(collect_rows(&d), 3000);
    struct ferry_batch *whole = d.b[0];
    for (int i = 0; i < 3; i++) {
        struct ferry_batch *part = ferry_batch_slice(whole, i * 1000, 1000);
        assert_int_equal(ferry_batch_digest(part), ferry_batch_digest(a.b[i]));
        ferry_batch_unref(part);
    }
    collect_free(&a);
    collect_free(&b);
    collect_free(&c);
    collect_free(&d);
    close_sample(&s1);
    close_sample(&s2);
    close_sample(&s3);
}

static int count_nulls(const struct ferry_batch *b, int col)
{
    int n = 0;
    for (int64_t r = 0; r < b->length; r++)
        n += ferry_col_is_null(b, col, r);
    return n;
}

static void test_orders_values(void **state)
{
    (void)state;
    struct ferry_resource_spec spec = spec_of("orders", FERRY_READ_FULL);
    struct collect c = {0};
    struct ferry_schema *sc;
    struct src s = open_sample("rows: 5000\n");
    read_table(&s, &spec, NULL, 5000, &c, &sc, NULL);
    static const struct {
        const char *name;
        enum ferry_type type;
        bool nullable;
    } want[] = {{"id", FERRY_TYPE_INT64, false},
                {"customer_id", FERRY_TYPE_INT32, false},
                {"status", FERRY_TYPE_UTF8, false},
                {"quantity", FERRY_TYPE_INT16, false},
                {"amount", FERRY_TYPE_DECIMAL128, false},
                {"discount", FERRY_TYPE_FLOAT64, true},
                {"express", FERRY_TYPE_BOOL, false},
                {"note", FERRY_TYPE_UTF8, true},
                {"created_at", FERRY_TYPE_TIMESTAMPTZ_US, false},
                {"updated_at", FERRY_TYPE_TIMESTAMPTZ_US, false}};
    assert_int_equal(sc->n_fields, 10);
    for (int i = 0; i < 10; i++) {
        assert_string_equal(sc->fields[i].name, want[i].name);
        assert_int_equal(sc->fields[i].type, want[i].type);
        assert_int_equal(sc->fields[i].nullable, want[i].nullable);
    }
    assert_int_equal(sc->n_key, 1);
    assert_int_equal(sc->key[0], 0);
    assert_int_equal(sc->fields[4].precision, 12);
    assert_int_equal(sc->fields[4].scale, 2);
    struct ferry_batch *b = c.b[0];
    assert_int_equal(b->length, 5000);
    /* ~20% null discounts, ~30% null notes, none elsewhere. */
    int nd = count_nulls(b, 5), nn = count_nulls(b, 7);
    assert_in_range(nd, 800, 1200);
    assert_in_range(nn, 1300, 1700);
    for (int col = 0; col < 10; col++)
        if (col != 5 && col != 7) assert_int_equal(count_nulls(b, col), 0);
    bool quote = false, comma = false, newline = false, unicode = false, empty = false;
    int statuses[5] = {0};
    static const char *const names[5] = {"pending", "paid", "shipped", "delivered", "canceled"};
    for (int64_t r = 0; r < b->length; r++) {
        assert_int_equal(ferry_col_int(b, 0, r), r + 1);
        int64_t base = INT64_C(1577836800000000) + (r + 1) * 1000;
        assert_int_equal(ferry_col_int(b, 8, r), base);
        assert_int_equal(ferry_col_int(b, 9, r), base); /* clock 0: never updated */
        size_t len;
        const uint8_t *st = ferry_col_bytes(b, 2, r, &len);
        int k;
        for (k = 0; k < 5; k++)
            if (strlen(names[k]) == len && !memcmp(names[k], st, len)) break;
        assert_true(k < 5);
        statuses[k]++;
        struct ferry_decimal128 d = ferry_col_dec128(b, 4, r);
        assert_true(d.hi == 0 && d.lo < UINT64_C(1000000000000));
        int64_t q = ferry_col_int(b, 3, r);
        assert_in_range(q, 1, 100);
        if (!ferry_col_is_null(b, 7, r)) {
            const uint8_t *t = ferry_col_bytes(b, 7, r, &len);
            quote |= memchr(t, '"', len) != NULL;
            comma |= memchr(t, ',', len) != NULL;
            newline |= memchr(t, '\n', len) != NULL;
            empty |= len == 0;
            for (size_t i = 0; i < len; i++)
                unicode |= t[i] >= 0x80;
        }
    }
    assert_true(quote && comma && newline && unicode && empty);
    for (int k = 0; k < 5; k++)
        assert_true(statuses[k] > 500);
    ferry_schema_unref(sc);
    collect_free(&c);
    close_sample(&s);
}

static void test_users_values(void **state)
{
    (void)state;
    struct ferry_resource_spec spec = spec_of("users", FERRY_READ_FULL);
    struct collect c = {0};
    struct ferry_schema *sc;
    struct src s = open_sample("rows: 4000\nclock: 1\n");
    read_table(&s, &spec, NULL, 4000, &c, &sc, NULL);
    static const enum ferry_type types[] = {
        FERRY_TYPE_INT64,     FERRY_TYPE_UTF8,         FERRY_TYPE_UTF8,          FERRY_TYPE_INT8,
        FERRY_TYPE_FLOAT32,   FERRY_TYPE_DECIMAL128,   FERRY_TYPE_DECIMAL_TEXT,  FERRY_TYPE_DATE32,
        FERRY_TYPE_TIME64_US, FERRY_TYPE_TIMESTAMP_US, FERRY_TYPE_UUID,          FERRY_TYPE_BINARY,
        FERRY_TYPE_JSON,      FERRY_TYPE_BOOL,         FERRY_TYPE_TIMESTAMPTZ_US};
    assert_int_equal(sc->n_fields, 15);
    for (int i = 0; i < 15; i++)
        assert_int_equal(sc->fields[i].type, types[i]);
    assert_int_equal(sc->fields[5].precision, 38);
    assert_int_equal(sc->fields[5].scale, 10);
    const struct ferry_batch *b = c.b[0];
    /* nullable: age, last_login, avatar, profile, active */
    const int nullable[] = {3, 9, 11, 12, 13};
    for (int k = 0; k < 5; k++) {
        int n = count_nulls(b, nullable[k]);
        assert_true(n > 100 && n < 2000);
        assert_true(sc->fields[nullable[k]].nullable);
    }
    bool neg_big = false, pos_big = false, before_1970 = false, empty_avatar = false,
         neg_bal = false;
    bool uni_name = false;
    size_t max_avatar = 0;
    for (int64_t r = 0; r < b->length; r++) {
        size_t len;
        const uint8_t *t = ferry_col_bytes(b, 6, r, &len);
        size_t digits = 0;
        for (size_t i = 0; i < len && t[i] != '.'; i++)
            digits += t[i] >= '0' && t[i] <= '9';
        assert_true(digits >= 40);
        neg_big |= t[0] == '-';
        pos_big |= t[0] != '-';
        before_1970 |= ferry_col_int(b, 7, r) < 0;
        int64_t wake = ferry_col_int(b, 8, r);
        assert_true(wake >= 0 && wake < INT64_C(86400000000));
        if (!ferry_col_is_null(b, 11, r)) {
            ferry_col_bytes(b, 11, r, &len);
            empty_avatar |= len == 0;
            if (len > max_avatar) max_avatar = len;
            assert_true(len <= 300);
        }
        if (!ferry_col_is_null(b, 12, r)) {
            t = ferry_col_bytes(b, 12, r, &len);
            json_t *j = json_loadb((const char *)t, len, 0, NULL);
            assert_true(json_is_object(j));
            json_decref(j);
        }
        neg_bal |= ferry_col_dec128(b, 5, r).hi < 0;
        t = ferry_col_bytes(b, 2, r, &len);
        for (size_t i = 0; i < len; i++)
            uni_name |= t[i] >= 0x80;
        const uint8_t *u = ferry_col_fixed(b, 10, r);
        assert_int_equal(u[6] >> 4, 4);
        if (!ferry_col_is_null(b, 3, r)) assert_in_range(ferry_col_int(b, 3, r), 18, 97);
    }
    assert_true(neg_big && pos_big && before_1970 && neg_bal && uni_name);
    assert_true(max_avatar > 250);
    (void)empty_avatar;
    ferry_schema_unref(sc);
    collect_free(&c);
    close_sample(&s);
}

static void test_tables_and_columns(void **state)
{
    (void)state;
    struct ferry_error err;
    struct src s = open_sample("rows: 10\n");
    struct ferry_schema *sc = NULL;
    struct ferry_resource_spec spec = spec_of("invoices", FERRY_READ_FULL);
    assert_int_equal(vt->discover(s.ctx, &spec, &sc, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "sample source has tables orders and users"));
    char *cols[] = {"amount", "id", "note", NULL};
    spec = spec_of("orders", FERRY_READ_FULL);
    spec.columns = cols;
    spec.n_columns = 3;
    ASSERT_OK(vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_equal(sc->n_fields, 3);
    assert_string_equal(sc->fields[0].name, "amount");
    assert_int_equal(sc->n_key, 1);
    assert_int_equal(sc->key[0], 1);
    char *plan = NULL;
    ASSERT_OK(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    struct collect c = {0};
    ASSERT_OK(read_all(vt, s.ctx, &spec, sc, plan, 100, &c, &err), err);
    assert_int_equal(collect_rows(&c), 10);
    assert_int_equal(c.b[0]->schema->n_fields, 3);
    assert_int_equal(ferry_col_int(c.b[0], 1, 9), 10);
    /* A projection gives the same values as the full table. */
    struct collect full = {0};
    struct ferry_resource_spec fs = spec_of("orders", FERRY_READ_FULL);
    read_table(&s, &fs, NULL, 100, &full, NULL, NULL);
    for (int64_t r = 0; r < 10; r++) {
        struct ferry_decimal128 a = ferry_col_dec128(c.b[0], 0, r),
                                b = ferry_col_dec128(full.b[0], 4, r);
        assert_true(a.lo == b.lo && a.hi == b.hi);
    }
    collect_free(&full);
    collect_free(&c);
    ferry_free(plan);
    ferry_schema_unref(sc);
    char *bad[] = {"id", "nope", NULL};
    spec.columns = bad;
    spec.n_columns = 2;
    assert_int_equal(vt->discover(s.ctx, &spec, &sc, &err), FERRY_ENOTFOUND);
    assert_non_null(strstr(err.message, "nope"));
    close_sample(&s);
}

static void test_shards_cover_once(void **state)
{
    (void)state;
    struct ferry_error err;
    struct src s = open_sample("rows: 1003\nshards: 7\n");
    struct ferry_resource_spec spec = spec_of("orders", FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    assert_int_equal(plan_shards(plan), 7);
    int *seen = calloc(1004, sizeof *seen);
    for (int sh = 0; sh < 7; sh++) {
        struct collect c = {0};
        ASSERT_OK(read_shard(vt, s.ctx, &spec, sc, plan, sh, NULL, 50, &c, &err), err);
        for (int i = 0; i < c.n; i++) {
            assert_int_equal(c.b[i]->shard, sh);
            for (int64_t r = 0; r < c.b[i]->length; r++) {
                int64_t id = ferry_col_int(c.b[i], 0, r);
                assert_in_range(id, 1, 1003);
                seen[id]++;
            }
        }
        /* The last batch says the shard is done. */
        assert_non_null(strstr(c.b[c.n - 1]->position, "\"done\":true"));
        collect_free(&c);
    }
    for (int id = 1; id <= 1003; id++)
        assert_int_equal(seen[id], 1);
    free(seen);
    ferry_free(plan);
    /* rows 0: one empty shard, nothing read. */
    struct src z = open_sample("rows: 0\nshards: 4\n");
    ASSERT_OK(vt->plan(z.ctx, &spec, sc, NULL, &plan, &err), err);
    struct collect c = {0};
    ASSERT_OK(read_all(vt, z.ctx, &spec, sc, plan, 50, &c, &err), err);
    assert_int_equal(collect_rows(&c), 0);
    collect_free(&c);
    ferry_free(plan);
    close_sample(&z);
    ferry_schema_unref(sc);
    close_sample(&s);
}

static void test_resume(void **state)
{
    (void)state;
    struct ferry_error err;
    struct src s = open_sample("rows: 1000\nshards: 2\n");
    struct ferry_resource_spec spec = spec_of("orders", FERRY_READ_FULL);
    struct ferry_schema *sc;
    char *plan;
    ASSERT_OK(vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    /* Positions carry the key of the last row; resuming continues right after it. */
    struct collect c = {0};
    ASSERT_OK(read_shard(vt, s.ctx, &spec, sc, plan, 1, NULL, 64, &c, &err), err);
    assert_string_equal(c.b[0]->position, "{\"shard\":1,\"key\":[564]}");
    char *pos = strdup(c.b[2]->position); /* after 3 * 64 rows of 501..1000 */
    assert_string_equal(pos, "{\"shard\":1,\"key\":[692]}");
    collect_free(&c);
    ASSERT_OK(read_shard(vt, s.ctx, &spec, sc, plan, 1, pos, 64, &c, &err), err);
    int64_t n;
    int64_t *ids = collect_ints(&c, 0, &n);
    assert_int_equal(n, 1000 - 692);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(ids[i], 693 + i);
    free(ids);
    collect_free(&c);
    free(pos);
    ASSERT_OK(read_shard(vt, s.ctx, &spec, sc, plan, 1,
                         "{\"shard\":1,\"key\":[1000],\"done\":true}", 64, &c, &err),
              err);
    assert_int_equal(collect_rows(&c), 0);
    collect_free(&c);
    assert_int_not_equal(
        read_shard(vt, s.ctx, &spec, sc, plan, 1, "{\"key\":[\"x\"]}", 64, &c, &err), FERRY_OK);
    collect_free(&c);
    ferry_free(plan);
    ferry_schema_unref(sc);
    close_sample(&s);
}

static char *cursor_updated_at[] = {"updated_at", NULL};

static struct ferry_resource_spec inc_spec(const char *table)
{
    struct ferry_resource_spec spec = spec_of(table, FERRY_READ_INCREMENTAL);
    spec.cursor = cursor_updated_at;
    spec.n_cursor = 1;
    return spec;
}

static void assert_ordered(const struct collect *c, int ucol, int idcol)
{
    int64_t pu = INT64_MIN, pid = INT64_MIN;
    for (int i = 0; i < c->n; i++)
        for (int64_t r = 0; r < c->b[i]->length; r++) {
            int64_t u = ferry_col_int(c->b[i], ucol, r), id = ferry_col_int(c->b[i], idcol, r);
            assert_true(u > pu || (u == pu && id > pid));
            pu = u;
            pid = id;
        }
}

static void test_incremental_rows_grow(void **state)
{
    (void)state;
    struct ferry_resource_spec spec = inc_spec("orders");
    struct collect a = {0}, b = {0};
    struct src s1 = open_sample("rows: 1000\n");
    read_table(&s1, &spec, NULL, 128, &a, NULL, NULL);
    assert_int_equal(collect_rows(&a), 1000);
    assert_ordered(&a, 9, 0);
    char *cp = last_keyed_position(&a);
    assert_non_null(cp);
    assert_non_null(strstr(cp, "[1577836801000000,1000]"));
    struct src s2 = open_sample("rows: 1500\n");
    read_table(&s2, &spec, cp, 128, &b, NULL, NULL);
    int64_t n;
    int64_t *ids = collect_ints(&b, 0, &n);
    assert_int_equal(n, 500);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(ids[i], 1001 + i);
    free(ids);
    free(cp);
    /* Nothing new: nothing read. */
    cp = last_keyed_position(&b);
    collect_free(&b);
    read_table(&s2, &spec, cp, 128, &b, NULL, NULL);
    assert_int_equal(collect_rows(&b), 0);
    free(cp);
    collect_free(&a);
    collect_free(&b);
    close_sample(&s1);
    close_sample(&s2);
}

/* Ids whose row differs between two full reads (the oracle for "updated at new ticks"). */
static int changed_ids(const struct collect *x, const struct collect *y, int64_t *out)
{
    int k = 0;
    int64_t n = collect_rows(x);
    assert_int_equal(n, collect_rows(y));
    assert_int_equal(x->n, y->n);
    for (int i = 0; i < x->n; i++)
        for (int64_t r = 0; r < x->b[i]->length; r++) {
            struct ferry_batch *rx = ferry_batch_slice(x->b[i], r, 1),
                               *ry = ferry_batch_slice(y->b[i], r, 1);
            if (ferry_batch_digest(rx) != ferry_batch_digest(ry))
                out[k++] = ferry_col_int(x->b[i], 0, r);
            ferry_batch_unref(rx);
            ferry_batch_unref(ry);
        }
    return k;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_incremental_clock(void **state)
{
    (void)state;
    const char *tables[] = {"orders", "users"};
    for (int t = 0; t < 2; t++) {
        struct ferry_resource_spec inc = inc_spec(tables[t]),
                                   full = spec_of(tables[t], FERRY_READ_FULL);
        int ucol = t == 0 ? 9 : 14;
        struct src c0 = open_sample("rows: 2000\nseed: 3\n");
        struct src c1 = open_sample("rows: 2000\nseed: 3\nclock: 1\n");
        struct src c3 = open_sample("rows: 2000\nseed: 3\nclock: 3\n");
        struct collect f0 = {0}, f1 = {0}, f3 = {0}, i0 = {0}, i1 = {0}, i3 = {0};
        read_table(&c0, &full, NULL, 500, &f0, NULL, NULL);
        read_table(&c1, &full, NULL, 500, &f1, NULL, NULL);
        read_table(&c3, &full, NULL, 500, &f3, NULL, NULL);
        int64_t *want = malloc(sizeof *want * 2000);

        read_table(&c0, &inc, NULL, 100, &i0, NULL, NULL);
        assert_int_equal(collect_rows(&i0), 2000);
        char *cp = last_keyed_position(&i0);
        read_table(&c1, &inc, cp, 100, &i1, NULL, NULL);
        free(cp);
        int nw = changed_ids(&f0, &f1, want);
        assert_true(nw > 100 && nw < 300); /* ~10% */
        int64_t n;
        int64_t *got = collect_ints(&i1, 0, &n);
        assert_int_equal(n, nw);
        for (int i = 0; i < nw; i++)
            assert_int_equal(got[i], want[i]); /* one tick: id order */
        assert_ordered(&i1, ucol, 0);
        free(got);

        cp = last_keyed_position(&i1);
        read_table(&c3, &inc, cp, 100, &i3, NULL, NULL);
        free(cp);
        nw = changed_ids(&f1, &f3, want);
        got = collect_ints(&i3, 0, &n);
        assert_int_equal(n, nw);
        assert_ordered(&i3, ucol, 0);
        qsort(got, (size_t)n, sizeof *got, cmp64);
        for (int i = 0; i < nw; i++)
            assert_int_equal(got[i], want[i]);
        /* Each read row is the current version (equal to the full read at clock 3). */
        for (int i = 0; i < i3.n; i++)
            for (int64_t r = 0; r < i3.b[i]->length; r++) {
                int64_t id = ferry_col_int(i3.b[i], 0, r);
                struct ferry_batch *x = ferry_batch_slice(i3.b[i], r, 1);
                struct ferry_batch *y = ferry_batch_slice(f3.b[(id - 1) / 500], (id - 1) % 500, 1);
                assert_int_equal(ferry_batch_digest(x), ferry_batch_digest(y));
                ferry_batch_unref(x);
                ferry_batch_unref(y);
            }
        free(got);
        free(want);
        collect_free(&f0);
        collect_free(&f1);
        collect_free(&f3);
        collect_free(&i0);
        collect_free(&i1);
        collect_free(&i3);
        close_sample(&c0);
        close_sample(&c1);
        close_sample(&c3);
    }
}

static void test_incremental_bounds(void **state)
{
    (void)state;
    struct ferry_error err;
    struct ferry_resource_spec spec = inc_spec("orders");
    struct src s = open_sample("rows: 500\nclock: 2\n");
    struct collect all = {0};
    char *plan;
    read_table(&s, &spec, NULL, 1000, &all, NULL, &plan);
    assert_int_equal(collect_rows(&all), 500);
    /* The frozen upper bound is the newest row, and it is read (inclusive). */
    const struct ferry_batch *b = all.b[0];
    int64_t last_u = ferry_col_int(b, 9, 499), last_id = ferry_col_int(b, 0, 499);
    char want[128];
    snprintf(want, sizeof want, "\"hi\":[%" PRId64 ",%" PRId64 "]", last_u, last_id);
    assert_non_null(strstr(plan, want));
    ferry_free(plan);
    /* The lower bound is exclusive on the tuple: start right after row 200 of the order. */
    for (int64_t at = 0; at < 500; at += 37) {
        char cp[128];
        snprintf(cp, sizeof cp, "{\"shard\":0,\"key\":[%" PRId64 ",%" PRId64 "]}",
                 ferry_col_int(b, 9, at), ferry_col_int(b, 0, at));
        struct collect c = {0};
        read_table(&s, &spec, cp, 1000, &c, NULL, NULL);
        assert_int_equal(collect_rows(&c), 499 - at);
        if (at < 499) {
            assert_int_equal(ferry_col_int(c.b[0], 0, 0), ferry_col_int(b, 0, at + 1));
            assert_int_equal(ferry_col_int(c.b[0], 9, 0), ferry_col_int(b, 9, at + 1));
        }
        collect_free(&c);
    }
    /* Same timestamp, smaller id than the row: the row itself is read. */
    char cp[128];
    snprintf(cp, sizeof cp, "{\"key\":[%" PRId64 ",%" PRId64 "]}", ferry_col_int(b, 9, 300),
             ferry_col_int(b, 0, 300) - 1);
    struct collect c = {0};
    read_table(&s, &spec, cp, 1000, &c, NULL, NULL);
    assert_int_equal(collect_rows(&c), 200);
    collect_free(&c);
    /* Lookback: re-read everything within 5 ms before the saved cursor. */
    spec.lookback_ms = 5;
    snprintf(cp, sizeof cp, "{\"key\":[%" PRId64 ",%" PRId64 "]}", ferry_col_int(b, 9, 499),
             ferry_col_int(b, 0, 499));
    read_table(&s, &spec, cp, 1000, &c, NULL, NULL);
    int expect = 0;
    for (int64_t r = 0; r < 500; r++)
        expect += ferry_col_int(b, 9, r) >= last_u - 5000;
    assert_int_equal(collect_rows(&c), expect);
    assert_true(expect >= 1);
    collect_free(&c);
    spec.lookback_ms = 0;
    /* Resume inside an incremental shard continues after the position. */
    struct ferry_schema *sc;
    ASSERT_OK(vt->discover(s.ctx, &spec, &sc, &err), err);
    ASSERT_OK(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), err);
    snprintf(cp, sizeof cp, "{\"shard\":0,\"key\":[%" PRId64 ",%" PRId64 "]}",
             ferry_col_int(b, 9, 99), ferry_col_int(b, 0, 99));
    ASSERT_OK(read_shard(vt, s.ctx, &spec, sc, plan, 0, cp, 64, &c, &err), err);
    assert_int_equal(collect_rows(&c), 400);
    assert_int_equal(ferry_col_int(c.b[0], 0, 0), ferry_col_int(b, 0, 100));
    /* Positions are [updated_at, id]. */
    char pos[128];
    snprintf(pos, sizeof pos, "\"key\":[%" PRId64 ",%" PRId64 "]", ferry_col_int(c.b[0], 9, 63),
             ferry_col_int(c.b[0], 0, 63));
    assert_non_null(strstr(c.b[0]->position, pos));
    collect_free(&c);
    ferry_free(plan);
    ferry_schema_unref(sc);
    collect_free(&all);
    close_sample(&s);
}

static void test_incremental_refusals(void **state)
{
    (void)state;
    struct ferry_error err;
    struct src s = open_sample("rows: 10\n");
    struct ferry_resource_spec spec = inc_spec("orders");
    char *other[] = {"created_at", NULL};
    spec.cursor = other;
    struct ferry_schema *sc;
    char *plan = NULL;
    ASSERT_OK(vt->discover(s.ctx, &spec, &sc, &err), err);
    assert_int_not_equal(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), FERRY_OK);
    assert_non_null(strstr(err.message, "cursor: [updated_at]"));
    assert_non_null(strstr(err.message, "created_at"));
    spec = spec_of("orders", FERRY_READ_CDC);
    assert_int_not_equal(vt->plan(s.ctx, &spec, sc, NULL, &plan, &err), FERRY_OK);
    assert_null(plan);
    ferry_schema_unref(sc);
    close_sample(&s);
}

int main(void)
{
    vt = ferry_source_find("sample");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_orders_values),
        cmocka_unit_test(test_users_values),
        cmocka_unit_test(test_tables_and_columns),
        cmocka_unit_test(test_shards_cover_once),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_incremental_rows_grow),
        cmocka_unit_test(test_incremental_clock),
        cmocka_unit_test(test_incremental_bounds),
        cmocka_unit_test(test_incremental_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
