/* pipeline/convert.c - `on_unrepresentable: null | clamp` (convert.h has the rules).
 *
 * A batch is scanned once for a value the sink cannot hold (only the columns whose type can
 * have one); nothing found, the batch goes on untouched. Otherwise it is copied (canonical,
 * owned buffers) and converted in place, except decimal text, whose column is rebuilt.
 * Calls batch and core only; called by pipeline/flow.c's writer and the runner's planning. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "pipeline/convert.h"

#define MIN_DAY INT64_C(-719162) /* 0001-01-01 */
#define MAX_DAY INT64_C(2932896) /* 9999-12-31 */
#define US_PER_DAY INT64_C(86400000000)
#define MIN_US (MIN_DAY * US_PER_DAY)
#define MAX_US ((MAX_DAY + 1) * US_PER_DAY - 1)

/* K_KEY: a key column that may hold a special value the sink cannot: refused, never converted */
enum kind { K_NONE, K_DATE, K_TS, K_DEC128, K_FLOAT, K_DECTEXT, K_KEY };
enum act { A_KEEP, A_NULL, A_LO, A_HI, A_ZERO };

struct ferry_convert {
    enum ferry_unrepresentable mode;
    struct ferry_value_limits lim;
    bool specials;    /* the source emits special values the sink cannot hold */
    int n;            /* fields */
    enum kind *kind;  /* per field */
    char **name;      /* per field, owned */
    int64_t *nulls, *clamps;           /* the last batch, per field */
    int64_t *total_nulls, *total_clamps;
    char *dec_max;    /* decimal text clamp: "999...9.99...9" */
    struct ferry_buf text; /* rebuilt decimal text column */
};

static enum kind kind_of(const struct ferry_field *f, const struct ferry_sink_caps *caps)
{
    const struct ferry_value_limits *l = &caps->values;
    if (f->key_pos > 0)
        return !caps->special_values &&
                       (f->type == FERRY_TYPE_DATE32 || f->type == FERRY_TYPE_TIMESTAMP_US ||
                        f->type == FERRY_TYPE_TIMESTAMPTZ_US || f->type == FERRY_TYPE_DECIMAL128)
                   ? K_KEY
                   : K_NONE;
    switch (f->type) {
    case FERRY_TYPE_DATE32: return !caps->special_values || l->calendar ? K_DATE : K_NONE;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: return !caps->special_values || l->calendar ? K_TS : K_NONE;
    case FERRY_TYPE_DECIMAL128: return !caps->special_values ? K_DEC128 : K_NONE;
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        return l->no_nan || l->no_infinity || l->no_negative_zero ? K_FLOAT : K_NONE;
    case FERRY_TYPE_DECIMAL_TEXT: return l->decimal_int_digits > 0 ? K_DECTEXT : K_NONE;
    default: return K_NONE;
    }
}

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "convert", "out of memory (on_unrepresentable)");
}

/* sc with every field of a convertible kind nullable; NULL (and FERRY_OK) when none changes */
static int nullable_copy(const struct ferry_schema *sc, const enum kind *kind,
                         struct ferry_schema **out, struct ferry_error *err)
{
    bool any = false;
    for (int i = 0; i < sc->n_fields; i++)
        any |= kind[i] != K_NONE && kind[i] != K_KEY && !sc->fields[i].nullable;
    *out = NULL;
    if (!any) return FERRY_OK;
    struct ferry_schema *d = ferry_schema_new();
    if (d == NULL) return oom(err);
    int rc = FERRY_OK;
    for (int i = 0; rc == FERRY_OK && i < sc->n_fields; i++) {
        const struct ferry_field *f = &sc->fields[i];
        bool null_ok = f->nullable || (kind[i] != K_NONE && kind[i] != K_KEY);
        rc = ferry_schema_add_field(d, f->name, f->type, null_ok, err);
        if (rc != FERRY_OK) break;
        d->fields[i].precision = f->precision;
        d->fields[i].scale = f->scale;
        d->fields[i].key_pos = f->key_pos;
        rc = ferry_schema_set_origin(d, i, f->origin_type, err);
    }
    if (rc == FERRY_OK) rc = ferry_schema_finish(d, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(d);
        return rc;
    }
    d->soft_delete = sc->soft_delete;
    *out = d;
    return FERRY_OK;
}

static char *decimal_max(int ints, int frac)
{
    char *s = ferry_malloc((size_t)ints + (size_t)frac + 2);
    if (s == NULL) return NULL;
    memset(s, '9', (size_t)ints);
    size_t n = (size_t)ints;
    if (frac > 0) {
        s[n++] = '.';
        memset(s + n, '9', (size_t)frac);
        n += (size_t)frac;
    }
    s[n] = '\0';
    return s;
}

int ferry_convert_new(const struct ferry_schema *sc, enum ferry_unrepresentable mode,
                      const struct ferry_sink_caps *caps, struct ferry_convert **out,
                      struct ferry_schema **nullable_sc, struct ferry_error *err)
{
    *out = NULL;
    *nullable_sc = NULL;
    if (mode == FERRY_UNREP_FAIL || sc->n_fields == 0) return FERRY_OK;
    struct ferry_convert *cv = ferry_calloc(1, sizeof *cv);
    if (cv == NULL) return oom(err);
    size_t n = (size_t)sc->n_fields;
    cv->mode = mode;
    cv->lim = caps->values;
    cv->specials = !caps->special_values;
    cv->n = sc->n_fields;
    cv->kind = ferry_calloc(n, sizeof *cv->kind);
    cv->name = ferry_calloc(n, sizeof *cv->name);
    cv->nulls = ferry_calloc(4 * n, sizeof *cv->nulls);
    ferry_buf_init(&cv->text, 0);
    if (cv->kind == NULL || cv->name == NULL || cv->nulls == NULL) {
        ferry_convert_free(cv);
        return oom(err);
    }
    cv->clamps = cv->nulls + n;
    cv->total_nulls = cv->nulls + 2 * n;
    cv->total_clamps = cv->nulls + 3 * n;
    bool any = false;
    for (int i = 0; i < sc->n_fields; i++) {
        cv->kind[i] = kind_of(&sc->fields[i], caps);
        cv->name[i] = ferry_strdup(sc->fields[i].name);
        if (cv->name[i] == NULL) {
            ferry_convert_free(cv);
            return oom(err);
        }
        any |= cv->kind[i] != K_NONE && cv->kind[i] != K_KEY;
    }
    if (cv->lim.decimal_int_digits > 0 &&
        (cv->dec_max = decimal_max(cv->lim.decimal_int_digits, cv->lim.decimal_frac_digits)) ==
            NULL) {
        ferry_convert_free(cv);
        return oom(err);
    }
    int rc = any ? nullable_copy(sc, cv->kind, nullable_sc, err) : FERRY_OK;
    if (rc != FERRY_OK || !any) {
        ferry_convert_free(cv);
        return rc;
    }
    *out = cv;
    return FERRY_OK;
}

/* ---- judging one value ---- */

static enum act judge_range(const struct ferry_convert *cv, int64_t v, int64_t lo, int64_t hi,
                            int64_t ninf, int64_t pinf)
{
    if (cv->specials && (v == ninf || v == pinf)) return v == ninf ? A_LO : A_HI;
    if (cv->lim.calendar && v < lo) return A_LO;
    if (cv->lim.calendar && v > hi) return A_HI;
    return A_KEEP;
}

static enum act judge_float(const struct ferry_convert *cv, double d)
{
    if (isnan(d)) return cv->lim.no_nan ? A_NULL : A_KEEP;
    if (isinf(d)) return cv->lim.no_infinity ? (d < 0 ? A_LO : A_HI) : A_KEEP;
    if (d == 0 && signbit(d) && cv->lim.no_negative_zero) return A_ZERO;
    return A_KEEP;
}

/* Decimal text against the sink's digits: too many integer digits (or +-Infinity) clamp,
 * NaN and too many fraction digits cannot. */
static enum act judge_dectext(const struct ferry_convert *cv, const uint8_t *p, size_t n)
{
    size_t i = 0;
    bool neg = n > 0 && p[0] == '-';
    if (n > 0 && (p[0] == '-' || p[0] == '+')) i++;
    if (n - i == 8 && !memcmp(p + i, "Infinity", 8)) return neg ? A_LO : A_HI;
    if (n - i == 3 && !memcmp(p + i, "NaN", 3)) return A_NULL;
    size_t ints = 0, frac = 0, zeros = 0;
    while (i < n && p[i] == '0')
        i++;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
        ints++;
    if (i < n && p[i] == '.')
        for (i++; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
            frac++;
            zeros = p[i] == '0' ? zeros + 1 : 0;
        }
    if (i != n) return A_NULL; /* not plain digits: the sink could not read it either */
    if (ints > (size_t)cv->lim.decimal_int_digits) return neg ? A_LO : A_HI;
    if (frac - zeros > (size_t)cv->lim.decimal_frac_digits) return A_NULL;
    return A_KEEP;
}

static enum act judge(const struct ferry_convert *cv, const struct ferry_batch *b, int f,
                      int64_t r)
{
    if (ferry_col_is_null(b, f, r)) return A_KEEP;
    switch (cv->kind[f]) {
    case K_DATE:
        return judge_range(cv, ferry_col_int(b, f, r), MIN_DAY, MAX_DAY, FERRY_SPECIAL_DATE_NINF,
                           FERRY_SPECIAL_DATE_PINF);
    case K_TS:
        return judge_range(cv, ferry_col_int(b, f, r), MIN_US, MAX_US, FERRY_SPECIAL_TS_NINF,
                           FERRY_SPECIAL_TS_PINF);
    case K_DEC128: {
        struct ferry_decimal128 d = ferry_col_dec128(b, f, r);
        return cv->specials && d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO
                   ? A_NULL
                   : A_KEEP;
    }
    case K_FLOAT: return judge_float(cv, ferry_col_float(b, f, r));
    case K_DECTEXT: {
        size_t len;
        const uint8_t *p = ferry_col_bytes(b, f, r, &len);
        return judge_dectext(cv, p ? p : (const uint8_t *)"", len);
    }
    default: return A_KEEP;
    }
}

/* ---- converting a canonical copy in place ---- */

/* A special value in a key column: the row cannot be converted (nor found again). */
static int check_keys(const struct ferry_convert *cv, const struct ferry_batch *b,
                      struct ferry_error *err)
{
    for (int f = 0; f < cv->n; f++) {
        if (cv->kind[f] != K_KEY) continue;
        enum ferry_type t = b->schema->fields[f].type;
        for (int64_t r = 0; r < b->length; r++) {
            if (ferry_col_is_null(b, f, r)) continue;
            bool special;
            if (t == FERRY_TYPE_DECIMAL128) {
                struct ferry_decimal128 d = ferry_col_dec128(b, f, r);
                special = d.hi == FERRY_SPECIAL_DEC_NAN_HI && d.lo == FERRY_SPECIAL_DEC_NAN_LO;
            } else {
                int64_t v = ferry_col_int(b, f, r);
                special = t == FERRY_TYPE_DATE32
                              ? v == FERRY_SPECIAL_DATE_PINF || v == FERRY_SPECIAL_DATE_NINF
                              : v == FERRY_SPECIAL_TS_PINF || v == FERRY_SPECIAL_TS_NINF;
            }
            if (special)
                return ferry_error_set(err, FERRY_EINVAL, "convert",
                                       "resource %s: key column \"%s\", batch %" PRIu64
                                       " row %" PRId64 ": %s is not converted in a key "
                                       "(on_unrepresentable); the sink cannot hold it",
                                       b->resource, cv->name[f], b->seq, r + 1,
                                       t == FERRY_TYPE_DECIMAL128 ? "numeric NaN" : "±infinity");
        }
    }
    return FERRY_OK;
}

static bool needs_any(const struct ferry_convert *cv, const struct ferry_batch *b)
{
    for (int f = 0; f < cv->n; f++)
        if (cv->kind[f] != K_NONE && cv->kind[f] != K_KEY)
            for (int64_t r = 0; r < b->length; r++)
                if (judge(cv, b, f, r) != A_KEEP) return true;
    return false;
}

static int set_null(struct ferry_column *c, int64_t r, int64_t length)
{
    if (c->validity == NULL) {
        size_t bytes = (size_t)(length + 7) / 8;
        c->validity = ferry_malloc(bytes);
        if (c->validity == NULL) return FERRY_ENOMEM;
        memset(c->validity, 0xff, bytes);
        c->validity_cap = bytes;
    }
    c->validity[r >> 3] &= (uint8_t) ~(1u << (r & 7));
    c->null_count++;
    if (c->values) memset(c->values + (size_t)r * (size_t)ferry_type_width(c->type), 0,
                          (size_t)ferry_type_width(c->type));
    return FERRY_OK;
}

static void set_fixed(struct ferry_column *c, int64_t r, enum act a)
{
    uint8_t *slot = c->values + (size_t)r * (size_t)ferry_type_width(c->type);
    if (c->type == FERRY_TYPE_DATE32) {
        int32_t v = (int32_t)(a == A_LO ? MIN_DAY : MAX_DAY);
        memcpy(slot, &v, 4);
    } else if (c->type == FERRY_TYPE_FLOAT32) {
        float v = a == A_ZERO ? 0.0f : a == A_LO ? -FLT_MAX : FLT_MAX;
        memcpy(slot, &v, 4);
    } else if (c->type == FERRY_TYPE_FLOAT64) {
        double v = a == A_ZERO ? 0.0 : a == A_LO ? -DBL_MAX : DBL_MAX;
        memcpy(slot, &v, 8);
    } else { /* timestamps */
        int64_t v = a == A_LO ? MIN_US : MAX_US;
        memcpy(slot, &v, 8);
    }
}

/* What an act becomes under the mode: NULL, or the clamp itself. */
static enum act effective(const struct ferry_convert *cv, enum act a)
{
    return cv->mode == FERRY_UNREP_NULL ? A_NULL : a;
}

static int convert_fixed(struct ferry_convert *cv, struct ferry_batch *b, int f)
{
    struct ferry_column *c = &b->columns[f];
    for (int64_t r = 0; r < b->length; r++) {
        enum act a = judge(cv, b, f, r);
        if (a == A_KEEP) continue;
        a = effective(cv, a);
        if (a == A_NULL) {
            if (set_null(c, r, b->length) != FERRY_OK) return FERRY_ENOMEM;
            cv->nulls[f]++;
        } else {
            set_fixed(c, r, a);
            cv->clamps[f]++;
        }
    }
    return FERRY_OK;
}

static int convert_text(struct ferry_convert *cv, struct ferry_batch *b, int f)
{
    struct ferry_column *c = &b->columns[f];
    struct ferry_buf *t = &cv->text;
    ferry_buf_reset(t);
    int32_t *off = ferry_malloc(sizeof(int32_t) * (size_t)(b->length + 1));
    if (off == NULL) return FERRY_ENOMEM;
    off[0] = 0;
    int rc = FERRY_OK;
    for (int64_t r = 0; rc == FERRY_OK && r < b->length; r++) {
        enum act a = judge(cv, b, f, r);
        size_t len = 0;
        const uint8_t *p = ferry_col_bytes(b, f, r, &len);
        if (a != A_KEEP) a = effective(cv, a);
        if (a == A_NULL) {
            rc = set_null(c, r, b->length);
            cv->nulls[f]++;
        } else if (a != A_KEEP) {
            if (a == A_LO) rc = ferry_buf_append(t, "-", 1);
            if (rc == FERRY_OK) rc = ferry_buf_append(t, cv->dec_max, strlen(cv->dec_max));
            cv->clamps[f]++;
        } else if (len > 0) {
            rc = ferry_buf_append(t, p, len);
        }
        if (t->len > INT32_MAX) rc = FERRY_ENOMEM;
        off[r + 1] = (int32_t)t->len;
    }
    uint8_t *data = rc == FERRY_OK ? ferry_malloc(t->len ? t->len : 1) : NULL;
    if (data == NULL) {
        ferry_free(off);
        return FERRY_ENOMEM;
    }
    if (t->len) memcpy(data, t->data, t->len);
    ferry_free(c->offsets);
    ferry_free(c->data);
    c->offsets = off;
    c->offsets_cap = sizeof(int32_t) * (size_t)(b->length + 1);
    c->data = data;
    c->data_cap = t->len ? t->len : 1;
    return FERRY_OK;
}

int ferry_convert_apply(struct ferry_convert *cv, struct ferry_batch **bp, struct ferry_error *err)
{
    if (cv == NULL) return FERRY_OK;
    memset(cv->nulls, 0, 2 * (size_t)cv->n * sizeof *cv->nulls);
    struct ferry_batch *b = *bp;
    int rc = check_keys(cv, b, err);
    if (rc != FERRY_OK || b->length == 0 || !needs_any(cv, b)) return rc;
    struct ferry_batch *d = ferry_batch_copy(b);
    if (d == NULL) return oom(err);
    for (int f = 0; rc == FERRY_OK && f < cv->n; f++) {
        if (cv->kind[f] == K_NONE || cv->kind[f] == K_KEY) continue;
        rc = cv->kind[f] == K_DECTEXT ? convert_text(cv, d, f) : convert_fixed(cv, d, f);
    }
    if (rc != FERRY_OK) {
        ferry_batch_unref(d);
        return oom(err);
    }
    for (int f = 0; f < cv->n; f++) {
        cv->total_nulls[f] += cv->nulls[f];
        cv->total_clamps[f] += cv->clamps[f];
    }
    ferry_batch_unref(b);
    *bp = d;
    return FERRY_OK;
}

int ferry_convert_json(const struct ferry_convert *cv, bool total, struct ferry_buf *out)
{
    if (cv == NULL) return FERRY_OK;
    const int64_t *nulls = total ? cv->total_nulls : cv->nulls;
    const int64_t *clamps = total ? cv->total_clamps : cv->clamps;
    int rc = FERRY_OK, k = 0;
    for (int f = 0; rc == FERRY_OK && f < cv->n; f++) {
        if (nulls[f] == 0 && clamps[f] == 0) continue;
        rc = k ? ferry_buf_append(out, ",", 1) : ferry_buf_append(out, ",\"converted\":{", 14);
        k++;
        if (rc == FERRY_OK) rc = ferry_buf_json_string(out, cv->name[f], strlen(cv->name[f]));
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(out, ":{\"null\":%lld,\"clamp\":%lld}", (long long)nulls[f],
                                  (long long)clamps[f]);
    }
    if (rc == FERRY_OK && k) rc = ferry_buf_append(out, "}", 1);
    return rc;
}

int64_t ferry_convert_total(const struct ferry_convert *cv)
{
    int64_t n = 0;
    for (int f = 0; cv && f < cv->n; f++)
        n += cv->total_nulls[f] + cv->total_clamps[f];
    return n;
}

void ferry_convert_free(struct ferry_convert *cv)
{
    if (cv == NULL) return;
    ferry_free(cv->kind);
    for (int i = 0; cv->name && i < cv->n; i++)
        ferry_free(cv->name[i]);
    ferry_free(cv->name);
    ferry_free(cv->nulls);
    ferry_free(cv->dec_max);
    ferry_buf_release(&cv->text);
    ferry_free(cv);
}
