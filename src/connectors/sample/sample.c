/* connectors/sample/sample.c - the `sample` source: deterministic synthetic tables.
 *
 * Two tables, `orders` and `users`, whose every value is a pure function of (seed,
 * table, id, version, column) through a splitmix64-style mixer, so two runs with the
 * same keys produce the same bytes on any machine, and tests and benchmarks need no
 * server. Calls the row writer (ferry/batch.h), the config accessors, jansson for plan
 * JSON and the checkpoint codec for positions (checkpoint/position.h). Registered in
 * connectors/registry.c; driven by the runner.
 *
 * Time model. Row i exists from the start with version 0 and
 *     created_at = updated_at = 2020-01-01T00:00:00Z + i ms.
 * The clock advances in ticks k = 1..clock. At tick k, row i is updated (version k) when
 * tick_hash(seed, i, k) % 10 == 0: its changing columns take version-k values and
 *     updated_at = 2020-01-01T00:00:00Z + k * TICK + i ms      (TICK = 100 years)
 * A row's current version is the latest tick that updated it. Every tick therefore owns a
 * disjoint band of timestamps above all earlier ones, which is what lets incremental reads
 * be generated in (updated_at, id) order without materialising anything: for each band,
 * walk the ids that sit in it. Memory is O(1) per shard; a row costs one version lookup
 * (expected ~10 hashes, going down from the newest tick) and its values.
 *
 * Consequences the tests rely on (docs/connectors.md):
 *   - a larger `clock` yields, after a previous incremental run, exactly the rows updated
 *     at the new ticks, in (updated_at, id) order;
 *   - a larger `rows` at clock 0 yields exactly the new ids. New ids get 2020 base
 *     timestamps, so at clock > 0 growing `rows` is not modelled (nor growing both at
 *     once): real tables do not receive rows stamped in the past either. */
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include "ferry/connector.h"
#include "ferry/core.h"
#include "checkpoint/position.h"

#define BASE_US INT64_C(1577836800000000) /* 2020-01-01T00:00:00Z */
#define TICK_US INT64_C(3155760000000000) /* 100 years of 365.25 days */
#define MAX_CLOCK 79                      /* keeps every year within 4 digits */
#define MAX_ROWS INT64_C(1000000000000)   /* i ms stays far below one TICK */

enum table_id { T_ORDERS = 1, T_USERS = 2 };

enum orders_col {
    O_ID,
    O_CUSTOMER_ID,
    O_STATUS,
    O_QUANTITY,
    O_AMOUNT,
    O_DISCOUNT,
    O_EXPRESS,
    O_NOTE,
    O_CREATED_AT,
    O_UPDATED_AT,
    O_N
};
enum users_col {
    U_ID,
    U_EMAIL,
    U_NAME,
    U_AGE,
    U_SCORE,
    U_BALANCE,
    U_BIG_NUMBER,
    U_BIRTH_DATE,
    U_WAKE_TIME,
    U_LAST_LOGIN,
    U_UUID,
    U_AVATAR,
    U_PROFILE,
    U_ACTIVE,
    U_UPDATED_AT,
    U_N
};

struct col_def {
    const char *name;
    enum ferry_type type;
    int precision, scale;
    bool nullable;
};

static const struct col_def orders_cols[O_N] = {
    [O_ID] = {"id", FERRY_TYPE_INT64, 0, 0, false},
    [O_CUSTOMER_ID] = {"customer_id", FERRY_TYPE_INT32, 0, 0, false},
    [O_STATUS] = {"status", FERRY_TYPE_UTF8, 0, 0, false},
    [O_QUANTITY] = {"quantity", FERRY_TYPE_INT16, 0, 0, false},
    [O_AMOUNT] = {"amount", FERRY_TYPE_DECIMAL128, 12, 2, false},
    [O_DISCOUNT] = {"discount", FERRY_TYPE_FLOAT64, 0, 0, true},
    [O_EXPRESS] = {"express", FERRY_TYPE_BOOL, 0, 0, false},
    [O_NOTE] = {"note", FERRY_TYPE_UTF8, 0, 0, true},
    [O_CREATED_AT] = {"created_at", FERRY_TYPE_TIMESTAMPTZ_US, 0, 0, false},
    [O_UPDATED_AT] = {"updated_at", FERRY_TYPE_TIMESTAMPTZ_US, 0, 0, false},
};

static const struct col_def users_cols[U_N] = {
    [U_ID] = {"id", FERRY_TYPE_INT64, 0, 0, false},
    [U_EMAIL] = {"email", FERRY_TYPE_UTF8, 0, 0, false},
    [U_NAME] = {"name", FERRY_TYPE_UTF8, 0, 0, false},
    [U_AGE] = {"age", FERRY_TYPE_INT8, 0, 0, true},
    [U_SCORE] = {"score", FERRY_TYPE_FLOAT32, 0, 0, false},
    [U_BALANCE] = {"balance", FERRY_TYPE_DECIMAL128, 38, 10, false},
    [U_BIG_NUMBER] = {"big_number", FERRY_TYPE_DECIMAL_TEXT, 0, 0, false},
    [U_BIRTH_DATE] = {"birth_date", FERRY_TYPE_DATE32, 0, 0, false},
    [U_WAKE_TIME] = {"wake_time", FERRY_TYPE_TIME64_US, 0, 0, false},
    [U_LAST_LOGIN] = {"last_login", FERRY_TYPE_TIMESTAMP_US, 0, 0, true},
    [U_UUID] = {"uuid", FERRY_TYPE_UUID, 0, 0, false},
    [U_AVATAR] = {"avatar", FERRY_TYPE_BINARY, 0, 0, true},
    [U_PROFILE] = {"profile", FERRY_TYPE_JSON, 0, 0, true},
    [U_ACTIVE] = {"active", FERRY_TYPE_BOOL, 0, 0, true},
    [U_UPDATED_AT] = {"updated_at", FERRY_TYPE_TIMESTAMPTZ_US, 0, 0, false},
};

struct table_def {
    const char *name;
    enum table_id id;
    const struct col_def *cols;
    int n_cols;
    int id_col, updated_at_col;
};

static const struct table_def tables[] = {
    {"orders", T_ORDERS, orders_cols, O_N, O_ID, O_UPDATED_AT},
    {"users", T_USERS, users_cols, U_N, U_ID, U_UPDATED_AT},
};

static const char *const tuning_keys[] = {"rows", "clock", "shards", "parallelism", NULL};

struct sample {
    uint64_t seed;
    int64_t rows;
    int64_t clock;
    int64_t shards;
};

/* ---- hashing ------------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The seed of one row version; column values derive from it with col_hash(). */
static inline uint64_t row_hash(uint64_t seed, enum table_id t, int64_t id, int64_t version)
{
    uint64_t h = mix64(seed ^ ((uint64_t)t * UINT64_C(0xd6e8feb86659fd93)));
    h = mix64(h ^ (uint64_t)id);
    return mix64(h + (uint64_t)version * UINT64_C(0xa0761d6478bd642f));
}

static inline uint64_t col_hash(uint64_t row, int col)
{
    return mix64(row + (uint64_t)(col + 1) * UINT64_C(0xe7037ed1a0b428db));
}

/* Whether tick k updates row i. Independent of the table, so both tables tick alike. */
static inline bool tick_updates(uint64_t seed, int64_t i, int64_t k)
{
    uint64_t h = mix64(mix64(mix64(seed ^ UINT64_C(0x7469636b)) ^ (uint64_t)i) + (uint64_t)k);
    return h % 10 == 0;
}

static inline int64_t row_version(uint64_t seed, int64_t clock, int64_t i)
{
    for (int64_t k = clock; k >= 1; k--)
        if (tick_updates(seed, i, k)) return k;
    return 0;
}

static inline int64_t band_start(int64_t tick)
{
    return BASE_US + tick * TICK_US;
}

static inline int64_t updated_at(int64_t i, int64_t version)
{
    return band_start(version) + i * 1000;
}

/* ---- value text ---------------------------------------------------------------------- */

static size_t put_u64(char *p, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t k = 0; k < n; k++)
        p[k] = tmp[n - 1 - k];
    return n;
}

static size_t put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return n;
}

static const char *const statuses[] = {"pending", "paid", "shipped", "delivered", "canceled"};

/* Notes exercise what text encoders get wrong: quotes, separators, line breaks,
 * backslashes, multibyte characters and the empty string (which is not NULL). */
static const char *const notes[] = {
    "leave at the door",
    "say \"hello\", then leave",
    "line one\nline two",
    "comma, separated, values",
    "naïve café — ünïcödé ✓",
    "emoji 🚚 shipped",
    "tab\there; semicolon; 'single' quotes",
    "back\\slash and \r\n crlf",
    "",
    "%s %d {} [] <>& NULL null",
};
#define N_NOTES ((int)(sizeof notes / sizeof notes[0]))

static const char *const first_names[] = {"José", "Zoë",   "Łukasz", "Søren",   "Chloé", "Renée",
                                          "田中", "Мария", "Ægir",   "O'Brien", "Ana",   "Li"};
static const char *const last_names[] = {"García", "Müller", "Nguyễn",  "Kowalski", "Smith",
                                         "Øster",  "山田",   "Иванова", "D'Angelo", "Brontë"};
static const char *const plans[] = {"free", "pro", "team", "enterprise"};

__extension__ typedef unsigned __int128 u128;

static struct ferry_decimal128 dec_from(bool negative, u128 mag)
{
    u128 v = negative ? (u128)0 - mag : mag;
    struct ferry_decimal128 d = {(uint64_t)v, (int64_t)(uint64_t)(v >> 64)};
    return d;
}

/* ---- one row -------------------------------------------------------------------------- */

struct gen {
    uint64_t seed;
    const struct table_def *t;
    int n;           /* fields of the schema */
    const int *cols; /* schema field -> table column */
};

static void write_orders_value(struct ferry_row_writer *rw, int col, int64_t i, int64_t v,
                               uint64_t r0, uint64_t rv)
{
    char buf[128];
    uint64_t h;
    switch ((enum orders_col)col) {
    case O_ID:
        ferry_rw_int(rw, i);
        return;
    case O_CUSTOMER_ID:
        ferry_rw_int(rw, 1 + (int64_t)(col_hash(r0, col) % 50000));
        return;
    case O_STATUS: {
        const char *s = statuses[col_hash(rv, col) % 5];
        ferry_rw_text(rw, s, strlen(s));
        return;
    }
    case O_QUANTITY:
        ferry_rw_int(rw, 1 + (int64_t)(col_hash(r0, col) % 100));
        return;
    case O_AMOUNT:
        ferry_rw_dec128(rw, dec_from(false, col_hash(rv, col) % UINT64_C(10000000000)));
        return;
    case O_DISCOUNT:
        h = col_hash(r0, col);
        if (h % 5 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_float(rw, (double)((h >> 8) % 3000) / 10000.0);
        return;
    case O_EXPRESS:
        ferry_rw_bool(rw, (col_hash(r0, col) >> 7) & 1);
        return;
    case O_NOTE: {
        h = col_hash(rv, col);
        if (h % 10 < 3) {
            ferry_rw_null(rw);
            return;
        }
        int k = (int)((h >> 8) % (N_NOTES + 1));
        if (k < N_NOTES) {
            ferry_rw_text(rw, notes[k], strlen(notes[k]));
            return;
        }
        size_t n = put_str(buf, "order #");
        n += put_u64(buf + n, (uint64_t)i);
        n += put_str(buf + n, ", version ");
        n += put_u64(buf + n, (uint64_t)v);
        ferry_rw_text(rw, buf, n);
        return;
    }
    case O_CREATED_AT:
        ferry_rw_int(rw, updated_at(i, 0));
        return;
    case O_UPDATED_AT:
        ferry_rw_int(rw, updated_at(i, v));
        return;
    case O_N:
        break;
    }
}

static void write_users_value(struct ferry_row_writer *rw, int col, int64_t i, int64_t v,
                              uint64_t r0, uint64_t rv)
{
    char buf[384];
    size_t n;
    uint64_t h;
    switch ((enum users_col)col) {
    case U_ID:
        ferry_rw_int(rw, i);
        return;
    case U_EMAIL:
        n = put_str(buf, "user");
        n += put_u64(buf + n, (uint64_t)i);
        if (v > 0) {
            n += put_str(buf + n, "+v");
            n += put_u64(buf + n, (uint64_t)v);
        }
        n += put_str(buf + n, "@example.com");
        ferry_rw_text(rw, buf, n);
        return;
    case U_NAME:
        h = col_hash(r0, col);
        n = put_str(buf, first_names[h % 12]);
        buf[n++] = ' ';
        n += put_str(buf + n, last_names[(h >> 16) % 10]);
        ferry_rw_text(rw, buf, n);
        return;
    case U_AGE:
        h = col_hash(r0, col);
        if (h % 10 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_int(rw, 18 + (int64_t)((h >> 8) % 80));
        return;
    case U_SCORE:
        /* Multiples of 1/64 below 2^24/64: exact in float32, so every encoder agrees. */
        ferry_rw_float(rw, (double)((float)((col_hash(rv, col) >> 8) % 640000) / 64.0f));
        return;
    case U_BALANCE: {
        h = col_hash(rv, col);
        uint64_t frac = col_hash(rv, col + 100) % UINT64_C(10000000000);
        u128 mag = (u128)(h % UINT64_C(1000000000000000000)) * UINT64_C(10000000000) + frac;
        ferry_rw_dec128(rw, dec_from((h >> 63) != 0, mag));
        return;
    }
    case U_BIG_NUMBER: {
        h = col_hash(r0, col);
        int digits = 40 + (int)(h % 6);
        int frac = (int)((h >> 8) % 4);
        n = 0;
        if ((h >> 12) & 1) buf[n++] = '-';
        uint64_t s = h;
        for (int d = 0; d < digits + frac; d++) {
            if (d == digits) buf[n++] = '.';
            s = mix64(s);
            int digit = (int)(s % 10);
            if (d == 0 && digit == 0) digit = 7;
            buf[n++] = (char)('0' + digit);
        }
        ferry_rw_text(rw, buf, n);
        return;
    }
    case U_BIRTH_DATE:
        ferry_rw_int(rw, (int64_t)(col_hash(r0, col) % 29220) - 14610);
        return;
    case U_WAKE_TIME:
        ferry_rw_int(rw, (int64_t)(col_hash(r0, col) % UINT64_C(86400000000)));
        return;
    case U_LAST_LOGIN:
        h = col_hash(r0, col);
        if (h % 7 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_int(rw, INT64_C(1420070400000000) +
                                 (int64_t)((h >> 4) % UINT64_C(315576000000000)));
        return;
    case U_UUID: {
        uint8_t u[16];
        uint64_t a = col_hash(r0, col), b = col_hash(r0, col + 100);
        for (int k = 0; k < 8; k++) {
            u[k] = (uint8_t)(a >> (8 * k));
            u[8 + k] = (uint8_t)(b >> (8 * k));
        }
        u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* version 4 */
        u[8] = (uint8_t)((u[8] & 0x3f) | 0x80); /* RFC 4122 variant */
        ferry_rw_fixed(rw, u, 16);
        return;
    }
    case U_AVATAR: {
        h = col_hash(r0, col);
        if (h % 5 == 0) {
            ferry_rw_null(rw);
            return;
        }
        size_t len = (size_t)((h >> 8) % 301);
        uint64_t s = col_hash(r0, col + 100);
        for (size_t k = 0; k < len; k += 8) {
            s = mix64(s);
            for (size_t b = 0; b < 8 && k + b < len; b++)
                buf[k + b] = (char)(s >> (8 * b));
        }
        ferry_rw_text(rw, buf, len);
        return;
    }
    case U_PROFILE:
        h = col_hash(r0, col);
        if (h % 4 == 0) {
            ferry_rw_null(rw);
            return;
        }
        n = put_str(buf, "{\"plan\":\"");
        n += put_str(buf + n, plans[(h >> 8) % 4]);
        n += put_str(buf + n, "\",\"visits\":");
        n += put_u64(buf + n, (h >> 16) % 10000);
        n += put_str(buf + n, ",\"tags\":[\"a\",\"caf\\u00e9\"],\"beta\":");
        n += put_str(buf + n, (h >> 40) & 1 ? "true" : "false");
        n += put_str(buf + n, ",\"nick\":\"O\\\"Neil ✓\"}");
        ferry_rw_text(rw, buf, n);
        return;
    case U_ACTIVE:
        h = col_hash(r0, col);
        if (h % 10 == 0)
            ferry_rw_null(rw);
        else
            ferry_rw_bool(rw, (h >> 8) & 1);
        return;
    case U_UPDATED_AT:
        ferry_rw_int(rw, updated_at(i, v));
        return;
    case U_N:
        break;
    }
}

static int write_row(const struct gen *g, struct ferry_row_writer *rw, int64_t i, int64_t v,
                     struct ferry_error *err)
{
    uint64_t r0 = row_hash(g->seed, g->t->id, i, 0);
    uint64_t rv = v ? row_hash(g->seed, g->t->id, i, v) : r0;
    ferry_rw_begin(rw, FERRY_OP_INSERT);
    if (g->t->id == T_ORDERS)
        for (int f = 0; f < g->n; f++)
            write_orders_value(rw, g->cols[f], i, v, r0, rv);
    else
        for (int f = 0; f < g->n; f++)
            write_users_value(rw, g->cols[f], i, v, r0, rv);
    return ferry_rw_end(rw, err);
}

/* ---- open / discover ---------------------------------------------------------------------- */

static int sample_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct sample s = {.seed = 42, .rows = 0, .clock = 0, .shards = 1};
    int64_t seed = 42;
    int rc = ferry_cfg_int(cfg, "seed", false, INT64_MIN, INT64_MAX, &seed, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "rows", true, 0, MAX_ROWS, &s.rows, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "clock", false, 0, MAX_CLOCK, &s.clock, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "shards", false, 1, 1024, &s.shards, err);
    if (rc != FERRY_OK) return rc;
    s.seed = (uint64_t)seed;
    struct sample *p = ferry_malloc(sizeof *p);
    if (p == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    *p = s;
    *ctx = p;
    return FERRY_OK;
}

static void sample_close(void *ctx)
{
    ferry_free(ctx);
}

static const struct table_def *find_table(const char *name)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (name != NULL && strcmp(tables[i].name, name) == 0) return &tables[i];
    return NULL;
}

static int table_col(const struct table_def *t, const char *name)
{
    for (int c = 0; c < t->n_cols; c++)
        if (strcmp(t->cols[c].name, name) == 0) return c;
    return -1;
}

static int lookup_table(const struct ferry_resource_spec *spec, const struct table_def **out,
                        struct ferry_error *err)
{
    *out = find_table(spec->table);
    if (*out == NULL)
        return ferry_error_set(err, FERRY_ENOTFOUND, "sample",
                               "table \"%s\" not found: the sample source has tables orders "
                               "and users",
                               spec->table ? spec->table : "");
    return FERRY_OK;
}

static int sample_discover(void *ctx, const struct ferry_resource_spec *spec,
                           struct ferry_schema **out, struct ferry_error *err)
{
    const struct table_def *t;
    int rc = lookup_table(spec, &t, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_schema *s = ferry_schema_new();
    if (s == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    int n = spec->columns ? spec->n_columns : t->n_cols;
    for (int f = 0; f < n && rc == FERRY_OK; f++) {
        int c = spec->columns ? table_col(t, spec->columns[f]) : f;
        if (c < 0) {
            rc = ferry_error_set(err, FERRY_ENOTFOUND, "sample", "table %s has no column \"%s\"",
                                 t->name, spec->columns[f]);
            break;
        }
        const struct col_def *d = &t->cols[c];
        rc = ferry_schema_add_field(s, d->name, d->type, d->nullable, err);
        if (rc != FERRY_OK) break;
        struct ferry_field *fd = &s->fields[s->n_fields - 1];
        if (d->type == FERRY_TYPE_DECIMAL128) {
            fd->precision = d->precision;
            fd->scale = d->scale;
        }
    }
    if (rc == FERRY_OK && spec->key != NULL) {
        for (int k = 0; k < spec->n_key && rc == FERRY_OK; k++) {
            int f = ferry_schema_find(s, spec->key[k]);
            if (f < 0)
                rc = ferry_error_set(err, FERRY_ENOTFOUND, "sample",
                                     "table %s: key column \"%s\" is not among the selected "
                                     "columns",
                                     t->name, spec->key[k]);
            else
                s->fields[f].key_pos = k + 1;
        }
    } else if (rc == FERRY_OK) {
        int f = ferry_schema_find(s, "id");
        if (f >= 0) s->fields[f].key_pos = 1;
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(s, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(s);
        return rc;
    }
    *out = s;
    return FERRY_OK;
}

/* ---- plan ----------------------------------------------------------------------------- */

struct tuple {
    bool set;
    int64_t u, id;
};

static int tuple_cmp(int64_t u1, int64_t i1, int64_t u2, int64_t i2)
{
    if (u1 != u2) return u1 < u2 ? -1 : 1;
    return i1 < i2 ? -1 : i1 > i2;
}

/* A decoded position's key {"key":[a]} or {"key":[a,b]} -> integers (checkpoint codec,
 * checkpoint/position.h: position text is never parsed here). */
static int position_key(const struct ferry_position *p, const char *what, int want, int64_t *key,
                        bool *has_key, struct ferry_error *err)
{
    *has_key = false;
    if (p->has_key && p->n_key != want)
        return ferry_error_set(err, FERRY_EINVAL, "sample",
                               "sample source: %s has a key of %d values (want %d integers)", what,
                               p->n_key, want);
    for (int i = 0; p->has_key && i < want; i++) {
        if (p->key[i].kind != FERRY_KEY_INT)
            return ferry_error_set(err, FERRY_EINVAL, "sample",
                                   "sample source: %s: key value %d is not an integer", what,
                                   i + 1);
        key[i] = p->key[i].i;
    }
    *has_key = p->has_key;
    return FERRY_OK;
}

/* Stored position text (a route checkpoint) -> its key as position_key; *done when the
 * position says so. */
static int parse_position(const char *text, const char *what, int want, int64_t *key,
                          bool *has_key, bool *done, struct ferry_error *err)
{
    *has_key = false;
    *done = false;
    struct ferry_position p;
    int rc = ferry_position_decode(text, strlen(text), &p, err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "sample source: %s", what);
        return rc;
    }
    *done = p.done;
    rc = position_key(&p, what, want, key, has_key, err);
    ferry_position_clear(&p);
    return rc;
}

static int check_incremental(const struct table_def *t, const struct ferry_resource_spec *spec,
                             const struct ferry_schema *schema, struct ferry_error *err)
{
    if (spec->n_cursor != 1 || spec->cursor == NULL || strcmp(spec->cursor[0], "updated_at") != 0) {
        char got[256] = "";
        size_t n = 0;
        for (int i = 0; i < spec->n_cursor && spec->cursor && n < sizeof got; i++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%s", i ? ", " : "", spec->cursor[i]);
        return ferry_error_set(err, FERRY_ECONFIG, "sample",
                               "table %s: the sample source reads incrementally only with "
                               "`cursor: [updated_at]` (got [%s])",
                               t->name, got);
    }
    if (ferry_schema_find(schema, "updated_at") < 0 || ferry_schema_find(schema, "id") < 0)
        return ferry_error_set(err, FERRY_ECONFIG, "sample",
                               "table %s: incremental reads need the columns updated_at and id "
                               "among the selected columns",
                               t->name);
    return FERRY_OK;
}

/* The newest (updated_at, id) at this clock: the highest id of the newest tick that
 * updated any row, or the highest id when no tick did. Expected O(10 * clock) hashes. */
static struct tuple newest_row(const struct sample *s)
{
    struct tuple hi = {false, 0, 0};
    if (s->rows == 0) return hi;
    for (int64_t k = s->clock; k >= 1; k--)
        for (int64_t i = s->rows; i >= 1; i--)
            if (tick_updates(s->seed, i, k)) {
                hi.set = true;
                hi.u = updated_at(i, k);
                hi.id = i;
                return hi;
            }
    hi.set = true;
    hi.u = updated_at(s->rows, 0);
    hi.id = s->rows;
    return hi;
}

static int put_tuple(struct ferry_buf *b, const struct tuple *t)
{
    if (t->set) return ferry_buf_printf(b, "[%" PRId64 ",%" PRId64 "]", t->u, t->id);
    return ferry_buf_printf(b, "null");
}

static int plan_full(const struct sample *s, struct ferry_buf *b)
{
    int64_t n_shards = s->shards;
    if (n_shards > s->rows) n_shards = s->rows > 0 ? s->rows : 1;
    int rc = ferry_buf_printf(
        b,
        "{\"mode\":\"full\",\"rows\":%" PRId64 ",\"rows_estimate\":%" PRId64 ",\"clock\":%" PRId64
        ",\"shards\":[",
        s->rows, s->rows, s->clock);
    for (int64_t k = 0; k < n_shards && rc == FERRY_OK; k++) {
        int64_t lo = 1 + k * s->rows / n_shards, hi = (k + 1) * s->rows / n_shards;
        rc = ferry_buf_printf(b, "%s{\"lo\":%" PRId64 ",\"hi\":%" PRId64 "}", k ? "," : "", lo, hi);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, "]}");
    return rc;
}

static int plan_incremental(const struct sample *s, const struct table_def *t,
                            const struct ferry_resource_spec *spec, const char *route_checkpoint,
                            struct ferry_buf *b, struct ferry_error *err)
{
    struct tuple lo = {false, 0, 0};
    if (route_checkpoint != NULL) {
        int64_t key[2];
        bool has_key, done;
        int rc = parse_position(route_checkpoint, "route checkpoint", 2, key, &has_key, &done, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s", t->name);
        /* A position without a key carries no watermark: read from the beginning. */
        if (has_key) {
            lo.set = true;
            lo.u = key[0];
            lo.id = key[1];
            if (spec->lookback_ms > 0) {
                /* (u - lookback, 0) exclusive = every row at or after u - lookback. */
                lo.u -= spec->lookback_ms * 1000;
                lo.id = 0;
            }
        }
    }
    struct tuple hi = newest_row(s);
    int rc = ferry_buf_printf(b,
                              "{\"mode\":\"incremental\",\"rows\":%" PRId64 ",\"clock\":%" PRId64
                              ",\"shards\":[{\"lo\":",
                              s->rows, s->clock);
    if (rc == FERRY_OK) rc = put_tuple(b, &lo);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, ",\"hi\":");
    if (rc == FERRY_OK) rc = put_tuple(b, &hi);
    if (rc == FERRY_OK) rc = ferry_buf_printf(b, "}]}");
    if (rc != FERRY_OK)
        return ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    return FERRY_OK;
}

static int sample_plan(void *ctx, const struct ferry_resource_spec *spec,
                       const struct ferry_schema *schema, const char *route_checkpoint,
                       char **plan_json, struct ferry_error *err)
{
    struct sample *s = ctx;
    const struct table_def *t;
    int rc = lookup_table(spec, &t, err);
    if (rc != FERRY_OK) return rc;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    if (spec->mode == FERRY_READ_FULL) {
        if (plan_full(s, &b) != FERRY_OK)
            rc = ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    } else if (spec->mode == FERRY_READ_INCREMENTAL) {
        rc = check_incremental(t, spec, schema, err);
        if (rc == FERRY_OK) rc = plan_incremental(s, t, spec, route_checkpoint, &b, err);
    } else {
        rc = ferry_error_set(err, FERRY_EUNSUPPORTED, "sample",
                             "table %s: the sample source reads in modes full and incremental, "
                             "not %s",
                             t->name, ferry_read_mode_name(spec->mode));
    }
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return rc;
    }
    *plan_json = ferry_buf_take(&b);
    if (*plan_json == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    return FERRY_OK;
}

/* ---- extract ---------------------------------------------------------------------------- */

struct frozen {
    bool full;
    int64_t rows, clock;
    int64_t lo, hi;        /* full: id range, inclusive */
    struct tuple tlo, thi; /* incremental: lo exclusive, hi inclusive */
};

static bool get_tuple(json_t *v, struct tuple *t)
{
    t->set = false;
    if (v == NULL || json_is_null(v)) return true;
    if (!json_is_array(v) || json_array_size(v) != 2) return false;
    json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (!json_is_integer(a) || !json_is_integer(b)) return false;
    t->set = true;
    t->u = (int64_t)json_integer_value(a);
    t->id = (int64_t)json_integer_value(b);
    return true;
}

static int load_plan(const char *table, const char *plan_json, int shard, struct frozen *fz,
                     struct ferry_error *err)
{
    json_t *root = json_loads(plan_json ? plan_json : "", 0, NULL);
    json_t *shards = json_object_get(root, "shards");
    json_t *mode = json_object_get(root, "mode");
    json_t *sh = json_array_get(shards, (size_t)shard);
    bool ok = json_is_string(mode) && json_is_object(sh) && shard >= 0 &&
              json_is_integer(json_object_get(root, "rows")) &&
              json_is_integer(json_object_get(root, "clock"));
    if (ok) {
        fz->full = strcmp(json_string_value(mode), "full") == 0;
        fz->rows = (int64_t)json_integer_value(json_object_get(root, "rows"));
        fz->clock = (int64_t)json_integer_value(json_object_get(root, "clock"));
        if (fz->clock < 0 || fz->clock > MAX_CLOCK || fz->rows < 0 || fz->rows > MAX_ROWS)
            ok = false;
        if (fz->full) {
            json_t *lo = json_object_get(sh, "lo"), *hi = json_object_get(sh, "hi");
            ok = ok && json_is_integer(lo) && json_is_integer(hi);
            if (ok) {
                fz->lo = (int64_t)json_integer_value(lo);
                fz->hi = (int64_t)json_integer_value(hi);
            }
        } else {
            ok = ok && get_tuple(json_object_get(sh, "lo"), &fz->tlo) &&
                 get_tuple(json_object_get(sh, "hi"), &fz->thi);
        }
    }
    json_decref(root);
    if (!ok)
        return ferry_error_set(err, FERRY_EINVAL, "sample",
                               "table %s: shard %d of the frozen plan is not a sample plan: %.200s",
                               table, shard, plan_json ? plan_json : "(none)");
    return FERRY_OK;
}

/* Smallest i >= 1 with (band + i ms, i) > (u, id). */
static int64_t first_after(int64_t band, int64_t u, int64_t id)
{
    int64_t d = u - band;
    if (d < 1000) return 1;
    int64_t i0 = d / 1000;
    if (d % 1000 == 0) return i0 > id ? i0 : i0 + 1;
    return i0 + 1;
}

/* Largest i with (band + i ms, i) <= (u, id); may be < 1. */
static int64_t last_upto(int64_t band, int64_t u, int64_t id)
{
    int64_t d = u - band;
    if (d < 1000) return 0;
    int64_t i0 = d / 1000;
    if (d % 1000 == 0) return i0 <= id ? i0 : i0 - 1;
    return i0;
}

static int extract_incremental(const struct gen *g, const struct frozen *fz, struct tuple lo,
                               struct ferry_row_writer *rw, struct ferry_error *err)
{
    if (!fz->thi.set) return FERRY_OK;
    if (lo.set && tuple_cmp(lo.u, lo.id, fz->thi.u, fz->thi.id) >= 0) return FERRY_OK;
    for (int64_t k = 0; k <= fz->clock; k++) {
        int64_t band = band_start(k);
        int64_t from = lo.set ? first_after(band, lo.u, lo.id) : 1;
        int64_t to = last_upto(band, fz->thi.u, fz->thi.id);
        if (to > fz->rows) to = fz->rows;
        for (int64_t i = from; i <= to; i++) {
            if (row_version(g->seed, fz->clock, i) != k) continue;
            int rc = write_row(g, rw, i, k, err);
            if (rc != FERRY_OK) return rc;
        }
    }
    return FERRY_OK;
}

static int sample_extract(void *ctx, const struct ferry_resource_spec *spec,
                          const struct ferry_schema *schema, const char *plan_json, int shard,
                          const struct ferry_position *resume, struct ferry_row_writer *rw,
                          struct ferry_error *err)
{
    struct sample *s = ctx;
    const struct table_def *t;
    int rc = lookup_table(spec, &t, err);
    if (rc != FERRY_OK) return rc;
    struct frozen fz;
    memset(&fz, 0, sizeof fz);
    rc = load_plan(t->name, plan_json, shard, &fz, err);
    if (rc != FERRY_OK) return rc;

    int64_t key[2] = {0, 0};
    bool has_key = false;
    if (resume != NULL) {
        if (resume->done) return FERRY_OK;
        rc = position_key(resume, "resume position", fz.full ? 1 : 2, key, &has_key, err);
        if (rc != FERRY_OK) return ferry_error_prefix(err, "table %s shard %d", t->name, shard);
    }

    int *cols = ferry_malloc(sizeof *cols * (size_t)(schema->n_fields ? schema->n_fields : 1));
    if (cols == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "sample", "sample source: out of memory");
    for (int f = 0; f < schema->n_fields; f++) {
        cols[f] = table_col(t, schema->fields[f].name);
        if (cols[f] < 0) {
            ferry_free(cols);
            return ferry_error_set(err, FERRY_ENOTFOUND, "sample", "table %s has no column \"%s\"",
                                   t->name, schema->fields[f].name);
        }
    }
    struct gen g = {s->seed, t, schema->n_fields, cols};
    int id_f = ferry_schema_find(schema, "id");
    ferry_rw_set_shard(rw, shard);
    if (fz.full) {
        if (id_f >= 0) ferry_rw_set_position_columns(rw, 1, &id_f);
        int64_t from = fz.lo;
        /* A key at or past hi: the shard is read (key + 1 could overflow: fuzz_position). */
        bool read = has_key && key[0] >= fz.hi;
        if (has_key && !read && key[0] + 1 > from) from = key[0] + 1;
        for (int64_t i = from; !read && i <= fz.hi && rc == FERRY_OK; i++)
            rc = write_row(&g, rw, i, row_version(s->seed, fz.clock, i), err);
    } else {
        int pos[2] = {ferry_schema_find(schema, "updated_at"), id_f};
        if (pos[0] < 0 || pos[1] < 0) {
            ferry_free(cols);
            return check_incremental(t, spec, schema, err);
        }
        ferry_rw_set_position_columns(rw, 2, pos);
        struct tuple lo = fz.tlo;
        if (has_key && (!lo.set || tuple_cmp(key[0], key[1], lo.u, lo.id) > 0)) {
            lo.set = true;
            lo.u = key[0];
            lo.id = key[1];
        }
        rc = extract_incremental(&g, &fz, lo, rw, err);
    }
    ferry_free(cols);
    return rc;
}

const struct ferry_source_vtable ferry__sample_source = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "sample",
    .tuning_keys = tuning_keys,
    .supports_incremental = true,
    .supports_cdc = false,
    .open = sample_open,
    .discover = sample_discover,
    .plan = sample_plan,
    .extract = sample_extract,
    .close = sample_close,
    .cancel = NULL,
};
