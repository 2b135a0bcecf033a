/* connectors/iceberg/values.c - Iceberg's view of single values: types, the single-value
 * binary serialization of column bounds, the 32-bit Murmur3 hash, partition transforms.
 *
 * Owns nothing beyond the statistics buffers of one data file. Calls core and the batch
 * readers. Called by iceberg_sink.c and the unit test. Written from the Iceberg table
 * specification: Appendix B (32-bit hash requirements), Appendix D (single-value
 * serialization), "Partition Transforms". Bounds of var-width columns are written whole
 * up to BOUND_MAX bytes; a longer minimum is cut to a prefix (still a lower bound, cut on
 * a UTF-8 character boundary for strings) and a longer maximum is left out (a prefix
 * would not be an upper bound), which the spec allows: bounds are optional. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "connectors/iceberg/iceberg.h"

#define BOUND_MAX 64

void ferry__iceberg_random(void *p, size_t n)
{
    uint8_t *b = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(b + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    /* getrandom cannot fail on a Linux with a seeded pool; never leave bytes unset */
    for (; got < n; got++) b[got] = (uint8_t)(ferry_now_mono_us() >> (got % 8));
}

/* ---- Murmur3 x86 32 ------------------------------------------------------------------ */

static uint32_t rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

uint32_t ferry__iceberg_murmur3(const void *data, size_t n)
{
    const uint8_t *p = data;
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = 0;
    size_t blocks = n / 4;
    for (size_t i = 0; i < blocks; i++) {
        uint32_t k = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                     (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = rotl32(h, 13);
        h = h * 5 + 0xe6546b64;
    }
    const uint8_t *tail = p + blocks * 4;
    uint32_t k = 0;
    switch (n & 3) {
    case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        break;
    default: break;
    }
    h ^= (uint32_t)n;
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

int32_t ferry__iceberg_hash_long(int64_t v)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)v >> (8 * i));
    return (int32_t)ferry__iceberg_murmur3(le, 8);
}

int32_t ferry__iceberg_hash_bytes(const void *p, size_t n)
{
    return (int32_t)ferry__iceberg_murmur3(p, n);
}

int32_t ferry__iceberg_bucket(int32_t hash, int32_t n)
{
    return (int32_t)(((uint32_t)hash & 0x7fffffffu) % (uint32_t)n);
}

size_t ferry__iceberg_decimal_bytes(struct ferry_decimal128 v, uint8_t out[16])
{
    uint8_t be[16];
    uint64_t hi = (uint64_t)v.hi;
    for (int i = 0; i < 8; i++) {
        be[i] = (uint8_t)(hi >> (56 - 8 * i));
        be[8 + i] = (uint8_t)(v.lo >> (56 - 8 * i));
    }
    /* drop leading bytes that only repeat the sign of the next one */
    size_t start = 0;
    while (start < 15) {
        bool neg = (be[start + 1] & 0x80) != 0;
        if ((be[start] == 0x00 && !neg) || (be[start] == 0xff && neg))
            start++;
        else
            break;
    }
    memcpy(out, be + start, 16 - start);
    return 16 - start;
}

/* ---- types --------------------------------------------------------------------------- */

int ferry__iceberg_type(const struct ferry_field *f, char *buf, size_t len, struct ferry_error *err)
{
    const char *t = NULL;
    switch (f->type) {
    case FERRY_TYPE_BOOL: t = "boolean"; break;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32: t = "int"; break;
    case FERRY_TYPE_INT64: t = "long"; break;
    case FERRY_TYPE_FLOAT32: t = "float"; break;
    case FERRY_TYPE_FLOAT64: t = "double"; break;
    case FERRY_TYPE_DECIMAL128:
        if (f->scale < 0 || f->precision < 1 || f->precision > 38)
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg",
                                   "column %s: decimal(%d,%d) has no Iceberg type (scale >= 0)",
                                   f->name, f->precision, f->scale);
        snprintf(buf, len, "decimal(%d, %d)", f->precision, f->scale);
        return FERRY_OK;
    case FERRY_TYPE_DECIMAL_TEXT:
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON: t = "string"; break;
    case FERRY_TYPE_BINARY: t = "binary"; break;
    case FERRY_TYPE_DATE32: t = "date"; break;
    case FERRY_TYPE_TIME64_US: t = "time"; break;
    case FERRY_TYPE_TIMESTAMP_US: t = "timestamp"; break;
    case FERRY_TYPE_TIMESTAMPTZ_US: t = "timestamptz"; break;
    case FERRY_TYPE_UUID: t = "uuid"; break;
    default: break;
    }
    if (t == NULL)
        return ferry_error_set(err, FERRY_EUNSUPPORTED, "iceberg", "column %s: type %s has no Iceberg type",
                               f->name, ferry_type_name(f->type));
    snprintf(buf, len, "%s", t);
    return FERRY_OK;
}

/* ---- statistics ---------------------------------------------------------------------- */

void ferry__iceberg_stats_init(struct ferry__iceberg_stats *s, enum ferry_type type)
{
    memset(s, 0, sizeof *s);
    s->type = type;
    ferry_buf_init(&s->min_b, 0);
    ferry_buf_init(&s->max_b, 0);
}

void ferry__iceberg_stats_release(struct ferry__iceberg_stats *s)
{
    if (s == NULL) return;
    ferry_buf_release(&s->min_b);
    ferry_buf_release(&s->max_b);
}

static bool is_text(enum ferry_type t)
{
    return t == FERRY_TYPE_UTF8 || t == FERRY_TYPE_JSON || t == FERRY_TYPE_DECIMAL_TEXT;
}

/* A prefix of at most BOUND_MAX bytes that ends on a character boundary for text. */
static size_t cut(const uint8_t *p, size_t n, bool text)
{
    if (n <= BOUND_MAX) return n;
    size_t k = BOUND_MAX;
    if (text)
        while (k > 0 && (p[k] & 0xc0) == 0x80) k--;
    return k;
}

static int set_buf(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    b->len = 0;
    return ferry_buf_append(b, p, n);
}

int ferry__iceberg_stats_from_file(struct ferry__iceberg_stats *s,
                                   const struct ferry__files_column_stats *c)
{
    s->values = c->values;
    s->nulls = c->nulls;
    s->nans = c->nans;
    s->bytes = c->bytes;
    s->has_minmax = false;
    enum ferry_type t = s->type;
    /* unsigned vs signed UUID order differs between engines: no bounds rather than wrong ones */
    if (!c->has_minmax || t == FERRY_TYPE_UUID) return FERRY_OK;
    s->has_minmax = true;
    switch (t) {
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        s->min_f = c->min_f;
        s->max_f = c->max_f;
        return FERRY_OK;
    case FERRY_TYPE_DECIMAL128:
        s->min_d = c->min_d;
        s->max_d = c->max_d;
        return FERRY_OK;
    default:
        if (!ferry_type_is_varwidth(t)) {
            s->min_i = c->min_i;
            s->max_i = c->max_i;
            return FERRY_OK;
        }
        break;
    }
    /* var-width: the lower bound may be a prefix of the minimum (still a lower bound); a
     * prefix of the maximum is not an upper bound, so a long maximum is left out */
    size_t k = cut(c->min_b, c->min_n, is_text(t));
    s->lower_cut = k < c->min_n;
    s->no_upper = c->max_n > BOUND_MAX;
    int rc = set_buf(&s->min_b, c->min_b, k);
    if (rc == FERRY_OK && !s->no_upper) rc = set_buf(&s->max_b, c->max_b, c->max_n);
    return rc;
}

static void le(uint8_t *out, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) out[i] = (uint8_t)(v >> (8 * i));
}

long ferry__iceberg_stats_bound(const struct ferry__iceberg_stats *s, bool upper, uint8_t *out,
                                size_t cap)
{
    if (!s->has_minmax || cap < BOUND_MAX + 8) return -1;
    switch (s->type) {
    case FERRY_TYPE_BOOL:
        out[0] = (uint8_t)(upper ? s->max_i : s->min_i);
        return 1;
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32:
        le(out, (uint64_t)(upper ? s->max_i : s->min_i), 4);
        return 4;
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        le(out, (uint64_t)(upper ? s->max_i : s->min_i), 8);
        return 8;
    case FERRY_TYPE_FLOAT32: {
        float f = (float)(upper ? s->max_f : s->min_f);
        /* -0.0 and 0.0 compare equal: widen the bounds so both are covered */
        if (f == 0.0f) f = upper ? 0.0f : -0.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        le(out, u, 4);
        return 4;
    }
    case FERRY_TYPE_FLOAT64: {
        double d = upper ? s->max_f : s->min_f;
        if (d == 0.0) d = upper ? 0.0 : -0.0;
        uint64_t u;
        memcpy(&u, &d, 8);
        le(out, u, 8);
        return 8;
    }
    case FERRY_TYPE_DECIMAL128:
        return (long)ferry__iceberg_decimal_bytes(upper ? s->max_d : s->min_d, out);
    case FERRY_TYPE_UUID: return -1;
    default:
        if (upper) {
            if (s->no_upper) return -1;
            memcpy(out, s->max_b.data, s->max_b.len);
            return (long)s->max_b.len;
        }
        memcpy(out, s->min_b.data, s->min_b.len);
        return (long)s->min_b.len;
    }
}

/* ---- partition transforms ------------------------------------------------------------ */

void ferry__iceberg_pfield_release(struct ferry__iceberg_pfield *p)
{
    if (p == NULL) return;
    ferry_free(p->name);
    ferry_free(p->text);
    p->name = p->text = NULL;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

int ferry__iceberg_pfield_parse(const char *text, const struct ferry_schema *schema,
                                struct ferry__iceberg_pfield *out, struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    const char *open = strchr(text, '(');
    char fn[16] = "identity";
    const char *arg = text;
    size_t argn = strlen(text);
    if (open != NULL) {
        const char *close = strrchr(text, ')');
        size_t fnl = (size_t)(open - text);
        if (close == NULL || close < open || close[1] != '\0' || fnl == 0 || fnl >= sizeof fn)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "partition \"%s\": write transform(column), e.g. day(created_at), "
                                   "hour(ts), bucket(16, id), identity(status)",
                                   text);
        memcpy(fn, text, fnl);
        fn[fnl] = '\0';
        arg = open + 1;
        argn = (size_t)(close - arg);
    }
    int32_t buckets = 0;
    if (!strncmp(fn, "bucket[", 7)) { /* Iceberg's own spelling: bucket[16](id) */
        char *end;
        long v = strtol(fn + 7, &end, 10);
        if (end == fn + 7 || strcmp(end, "]") != 0 || v < 1 || v > 1000000)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "partition \"%s\": bucket needs a count from 1 to 1000000: "
                                   "bucket[16](id)",
                                   text);
        buckets = (int32_t)v;
        out->transform = ICEBERG_BUCKET;
    } else if (!strcmp(fn, "bucket")) {
        const char *comma = memchr(arg, ',', argn);
        char num[16];
        const char *ns = arg;
        size_t nn = comma ? (size_t)(comma - arg) : 0;
        trim(&ns, &nn);
        long v = 0;
        if (comma != NULL && nn > 0 && nn < sizeof num) {
            memcpy(num, ns, nn);
            num[nn] = '\0';
            char *end;
            v = strtol(num, &end, 10);
            if (*end != '\0') v = 0;
        }
        if (v < 1 || v > 1000000)
            return ferry_error_set(err, FERRY_ECONFIG, "config",
                                   "partition \"%s\": bucket needs a count from 1 to 1000000 "
                                   "first: bucket(16, id)",
                                   text);
        buckets = (int32_t)v;
        argn -= (size_t)(comma + 1 - arg);
        arg = comma + 1;
        out->transform = ICEBERG_BUCKET;
    } else if (!strcmp(fn, "day")) {
        out->transform = ICEBERG_DAY;
    } else if (!strcmp(fn, "hour")) {
        out->transform = ICEBERG_HOUR;
    } else if (!strcmp(fn, "identity")) {
        out->transform = ICEBERG_IDENTITY;
    } else {
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "partition \"%s\": unknown transform %s (identity, day, hour, bucket)",
                               text, fn);
    }
    trim(&arg, &argn);
    char *col = ferry_strndup(arg, argn);
    if (col == NULL) return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "out of memory");
    int idx = ferry_schema_find(schema, col);
    if (idx < 0) {
        int rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 "partition \"%s\": the table has no column \"%s\"", text, col);
        ferry_free(col);
        return rc;
    }
    enum ferry_type t = schema->fields[idx].type;
    bool ok = true;
    switch (out->transform) {
    case ICEBERG_DAY:
        ok = t == FERRY_TYPE_DATE32 || t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIMESTAMPTZ_US;
        break;
    case ICEBERG_HOUR: ok = t == FERRY_TYPE_TIMESTAMP_US || t == FERRY_TYPE_TIMESTAMPTZ_US; break;
    case ICEBERG_BUCKET:
        ok = t != FERRY_TYPE_BOOL && t != FERRY_TYPE_FLOAT32 && t != FERRY_TYPE_FLOAT64 &&
             t != FERRY_TYPE_JSON && t != FERRY_TYPE_DECIMAL_TEXT;
        break;
    case ICEBERG_IDENTITY:
        ok = t != FERRY_TYPE_FLOAT32 && t != FERRY_TYPE_FLOAT64 && t != FERRY_TYPE_DECIMAL128 &&
             t != FERRY_TYPE_UUID && t != FERRY_TYPE_BINARY;
        break;
    }
    if (!ok) {
        int rc = ferry_error_set(err, FERRY_ECONFIG, "config",
                                 "partition \"%s\": %s does not apply to column %s of type %s",
                                 text, fn, col, ferry_type_name(t));
        ferry_free(col);
        return rc;
    }
    out->col = idx;
    out->buckets = buckets;
    switch (out->transform) {
    case ICEBERG_IDENTITY:
        out->name = ferry_strdup(col);
        out->text = ferry_strdup("identity");
        break;
    case ICEBERG_DAY:
        out->name = ferry_asprintf("%s_day", col);
        out->text = ferry_strdup("day");
        break;
    case ICEBERG_HOUR:
        out->name = ferry_asprintf("%s_hour", col);
        out->text = ferry_strdup("hour");
        break;
    case ICEBERG_BUCKET:
        out->name = ferry_asprintf("%s_bucket", col);
        out->text = ferry_asprintf("bucket[%d]", (int)buckets);
        break;
    }
    ferry_free(col);
    if (out->name == NULL || out->text == NULL) {
        ferry__iceberg_pfield_release(out);
        return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "out of memory");
    }
    return FERRY_OK;
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

void ferry__iceberg_pvalue(const struct ferry__iceberg_pfield *pf, const struct ferry_batch *b,
                           int64_t row, struct ferry__iceberg_pvalue *out)
{
    memset(out, 0, sizeof *out);
    int col = pf->col;
    if (ferry_col_is_null(b, col, row)) {
        out->is_null = true;
        return;
    }
    enum ferry_type t = b->schema->fields[col].type;
    switch (pf->transform) {
    case ICEBERG_DAY:
        out->i = t == FERRY_TYPE_DATE32 ? ferry_col_int(b, col, row)
                                        : floordiv(ferry_col_int(b, col, row), INT64_C(86400000000));
        return;
    case ICEBERG_HOUR: out->i = floordiv(ferry_col_int(b, col, row), INT64_C(3600000000)); return;
    case ICEBERG_BUCKET: {
        int32_t h;
        if (ferry_type_is_varwidth(t)) {
            size_t n;
            const uint8_t *p = ferry_col_bytes(b, col, row, &n);
            h = ferry__iceberg_hash_bytes(p, n);
        } else if (t == FERRY_TYPE_UUID) {
            h = ferry__iceberg_hash_bytes(ferry_col_fixed(b, col, row), 16);
        } else if (t == FERRY_TYPE_DECIMAL128) {
            uint8_t d[16];
            size_t n = ferry__iceberg_decimal_bytes(ferry_col_dec128(b, col, row), d);
            h = ferry__iceberg_hash_bytes(d, n);
        } else {
            h = ferry__iceberg_hash_long(ferry_col_int(b, col, row));
        }
        out->i = ferry__iceberg_bucket(h, pf->buckets);
        return;
    }
    case ICEBERG_IDENTITY:
        if (ferry_type_is_varwidth(t))
            out->p = ferry_col_bytes(b, col, row, &out->n);
        else if (t == FERRY_TYPE_BOOL)
            out->i = ferry_col_bool(b, col, row);
        else
            out->i = ferry_col_int(b, col, row);
        return;
    }
}

int ferry__iceberg_pvalue_path(const struct ferry__iceberg_pfield *pf, enum ferry_type src,
                               const struct ferry__iceberg_pvalue *v, struct ferry_buf *b)
{
    int rc = ferry_buf_printf(b, "%s=", pf->name);
    if (rc != FERRY_OK) return rc;
    if (v->is_null) return ferry_buf_printf(b, "null");
    char tmp[64];
    switch (pf->transform) {
    case ICEBERG_DAY:
        ferry_date32_to_text((int32_t)v->i, tmp, sizeof tmp);
        return ferry_buf_printf(b, "%s", tmp);
    case ICEBERG_HOUR: {
        int64_t day = floordiv(v->i, 24);
        ferry_date32_to_text((int32_t)day, tmp, sizeof tmp);
        return ferry_buf_printf(b, "%s-%02d", tmp, (int)(v->i - day * 24));
    }
    case ICEBERG_BUCKET: return ferry_buf_printf(b, "%d", (int)v->i);
    case ICEBERG_IDENTITY: break;
    }
    if (ferry_type_is_varwidth(src)) {
        static const char hexd[] = "0123456789ABCDEF";
        for (size_t i = 0; i < v->n && rc == FERRY_OK; i++) {
            uint8_t c = v->p[i];
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.') {
                rc = ferry_buf_append(b, &c, 1);
            } else {
                char e[3] = {'%', hexd[c >> 4], hexd[c & 15]};
                rc = ferry_buf_append(b, e, 3);
            }
        }
        return rc;
    }
    if (src == FERRY_TYPE_BOOL) return ferry_buf_printf(b, "%s", v->i ? "true" : "false");
    if (src == FERRY_TYPE_DATE32) {
        ferry_date32_to_text((int32_t)v->i, tmp, sizeof tmp);
        return ferry_buf_printf(b, "%s", tmp);
    }
    return ferry_buf_printf(b, "%lld", (long long)v->i);
}

json_t *ferry__iceberg_pvalue_json(const struct ferry__iceberg_pfield *pf, enum ferry_type src,
                                   const struct ferry__iceberg_pvalue *v)
{
    if (v->is_null) return json_null();
    if (pf->transform == ICEBERG_IDENTITY && ferry_type_is_varwidth(src))
        return json_stringn((const char *)v->p, v->n);
    if (pf->transform == ICEBERG_IDENTITY && src == FERRY_TYPE_BOOL) return json_boolean(v->i);
    return json_integer((json_int_t)v->i);
}

const char *ferry__iceberg_pfield_avro(const struct ferry__iceberg_pfield *pf, enum ferry_type src)
{
    if (pf->transform != ICEBERG_IDENTITY) return "int";
    switch (src) {
    case FERRY_TYPE_BOOL: return "boolean";
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_DATE32: return "int";
    case FERRY_TYPE_INT64:
    case FERRY_TYPE_TIME64_US:
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US: return "long";
    default: return "string";
    }
}

int ferry__iceberg_pfield_type(const struct ferry__iceberg_pfield *pf, const struct ferry_field *f,
                               char *buf, size_t len)
{
    if (pf->transform != ICEBERG_IDENTITY) {
        snprintf(buf, len, "int");
        return FERRY_OK;
    }
    return ferry__iceberg_type(f, buf, len, NULL);
}
