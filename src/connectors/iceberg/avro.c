/* connectors/iceberg/avro.c - Avro object container files, written and read.
 *
 * Owns nothing beyond one call. Calls core, jansson and zlib (the deflate codec when
 * reading files other writers compressed). Called by iceberg_sink.c for manifests and
 * manifest lists, and by the unit test. Written from the Apache Avro specification:
 * ints and longs are zigzag varints, strings and bytes a long length then the bytes,
 * a union a long branch index then the value, arrays and maps blocks of (count, items)
 * ended by a zero count, records their fields in schema order with no framing. A
 * container is "Obj" 1, a metadata map<bytes>, a 16-byte sync marker, then blocks of
 * (record count, byte size, records, sync marker). The record shapes are described in
 * iceberg.h. Manifests are small (one record per data file), so the generic walk over a
 * JSON schema costs nothing that matters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "connectors/iceberg/iceberg.h"

#define AVRO_MAX_DEPTH 32

/* ---- hex ------------------------------------------------------------------------------- */

char *ferry__iceberg_hex(const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char *s = ferry_malloc(2 * n + 1);
    if (s == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long ferry__iceberg_unhex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = strlen(s);
    if (n % 2 != 0 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

/* ---- writing ------------------------------------------------------------------------- */

struct wctx {
    struct ferry_buf *out;
    json_t *names; /* named types seen so far */
    struct ferry_error *err;
    const char *field; /* innermost field name, for errors */
};

static int put_long(struct ferry_buf *b, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    uint8_t tmp[10];
    size_t n = 0;
    while (z >= 0x80) {
        tmp[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    tmp[n++] = (uint8_t)z;
    return ferry_buf_append(b, tmp, n);
}

static int put_bytes(struct ferry_buf *b, const void *p, size_t n)
{
    int rc = put_long(b, (int64_t)n);
    return rc == FERRY_OK ? ferry_buf_append(b, p, n) : rc;
}

static int bad(struct wctx *w, const char *what)
{
    return ferry_error_set(w->err, FERRY_EINVAL, "avro", "avro: field %s: %s",
                           w->field ? w->field : "(record)", what);
}

static json_t *resolve(json_t *names, json_t *type)
{
    if (json_is_string(type)) {
        json_t *named = json_object_get(names, json_string_value(type));
        if (named) return named;
    }
    return type;
}

static void remember(json_t *names, json_t *type)
{
    const char *name = json_string_value(json_object_get(type, "name"));
    if (name && json_object_get(names, name) == NULL) json_object_set(names, name, type);
}

static const char *type_name(json_t *type)
{
    if (json_is_string(type)) return json_string_value(type);
    if (json_is_object(type)) return json_string_value(json_object_get(type, "type"));
    if (json_is_array(type)) return "union";
    return NULL;
}

static int write_value(struct wctx *w, json_t *type, json_t *v, int depth);

static bool fits(json_t *names, json_t *type, json_t *v)
{
    const char *t = type_name(resolve(names, type));
    if (t == NULL) return false;
    if (!strcmp(t, "null")) return json_is_null(v);
    if (json_is_null(v)) return false;
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "int") || !strcmp(t, "long")) return json_is_integer(v);
    if (!strcmp(t, "float") || !strcmp(t, "double")) return json_is_number(v);
    if (!strcmp(t, "string") || !strcmp(t, "bytes") || !strcmp(t, "fixed") || !strcmp(t, "enum"))
        return json_is_string(v);
    if (!strcmp(t, "record") || !strcmp(t, "map")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static int write_record(struct wctx *w, json_t *type, json_t *v, int depth)
{
    if (!json_is_object(v)) return bad(w, "expected a record");
    json_t *fields = json_object_get(type, "fields");
    size_t i;
    json_t *f;
    const char *outer = w->field;
    json_array_foreach(fields, i, f)
    {
        const char *name = json_string_value(json_object_get(f, "name"));
        json_t *fv = json_object_get(v, name ? name : "");
        w->field = name;
        int rc = write_value(w, json_object_get(f, "type"), fv ? fv : json_null(), depth + 1);
        if (rc != FERRY_OK) return rc;
    }
    w->field = outer;
    return FERRY_OK;
}

static int write_value(struct wctx *w, json_t *type, json_t *v, int depth)
{
    if (depth > AVRO_MAX_DEPTH) return bad(w, "schema nested too deeply");
    type = resolve(w->names, type);
    if (json_is_array(type)) { /* union */
        size_t i;
        json_t *branch;
        json_array_foreach(type, i, branch)
        {
            if (fits(w->names, branch, v)) {
                int rc = put_long(w->out, (int64_t)i);
                return rc == FERRY_OK ? write_value(w, branch, v, depth + 1) : rc;
            }
        }
        return bad(w, json_is_null(v) ? "null where the schema allows none"
                                      : "value fits no branch of the union");
    }
    const char *t = type_name(type);
    if (t == NULL) return bad(w, "bad schema");
    if (json_is_object(type)) remember(w->names, type);
    if (!strcmp(t, "null")) return json_is_null(v) ? FERRY_OK : bad(w, "expected null");
    if (!strcmp(t, "boolean")) {
        if (!json_is_boolean(v)) return bad(w, "expected a boolean");
        uint8_t b = json_is_true(v) ? 1 : 0;
        return ferry_buf_append(w->out, &b, 1);
    }
    if (!strcmp(t, "int") || !strcmp(t, "long")) {
        if (!json_is_integer(v)) return bad(w, "expected an integer");
        json_int_t x = json_integer_value(v);
        if (!strcmp(t, "int") && (x < INT32_MIN || x > INT32_MAX)) return bad(w, "int out of range");
        return put_long(w->out, (int64_t)x);
    }
    if (!strcmp(t, "float") || !strcmp(t, "double")) {
        if (!json_is_number(v)) return bad(w, "expected a number");
        double d = json_number_value(v);
        uint8_t le[8];
        if (!strcmp(t, "float")) {
            float f = (float)d;
            uint32_t u;
            memcpy(&u, &f, 4);
            for (int k = 0; k < 4; k++) le[k] = (uint8_t)(u >> (8 * k));
            return ferry_buf_append(w->out, le, 4);
        }
        uint64_t u;
        memcpy(&u, &d, 8);
        for (int k = 0; k < 8; k++) le[k] = (uint8_t)(u >> (8 * k));
        return ferry_buf_append(w->out, le, 8);
    }
    if (!strcmp(t, "string")) {
        if (!json_is_string(v)) return bad(w, "expected a string");
        return put_bytes(w->out, json_string_value(v), json_string_length(v));
    }
    if (!strcmp(t, "bytes") || !strcmp(t, "fixed")) {
        if (!json_is_string(v)) return bad(w, "expected hex bytes");
        size_t n = json_string_length(v) / 2;
        uint8_t *tmp = ferry_malloc(n + 1);
        if (tmp == NULL) return ferry_error_set(w->err, FERRY_ENOMEM, "avro", "out of memory");
        long got = ferry__iceberg_unhex(json_string_value(v), tmp, n);
        int rc;
        if (got < 0)
            rc = bad(w, "not hex bytes");
        else if (!strcmp(t, "fixed")) {
            json_int_t size = json_integer_value(json_object_get(type, "size"));
            rc = got == size ? ferry_buf_append(w->out, tmp, (size_t)got)
                             : bad(w, "fixed value of the wrong size");
        } else
            rc = put_bytes(w->out, tmp, (size_t)got);
        ferry_free(tmp);
        return rc;
    }
    if (!strcmp(t, "enum")) {
        json_t *symbols = json_object_get(type, "symbols");
        size_t i;
        json_t *s;
        json_array_foreach(symbols, i, s)
        {
            if (json_equal(s, v)) return put_long(w->out, (int64_t)i);
        }
        return bad(w, "not a symbol of the enum");
    }
    if (!strcmp(t, "record")) return write_record(w, type, v, depth);
    if (!strcmp(t, "array")) {
        if (!json_is_array(v)) return bad(w, "expected an array");
        size_t n = json_array_size(v);
        int rc = FERRY_OK;
        if (n > 0) rc = put_long(w->out, (int64_t)n);
        json_t *items = json_object_get(type, "items");
        for (size_t i = 0; i < n && rc == FERRY_OK; i++)
            rc = write_value(w, items, json_array_get(v, i), depth + 1);
        return rc == FERRY_OK ? put_long(w->out, 0) : rc;
    }
    if (!strcmp(t, "map")) {
        if (!json_is_object(v)) return bad(w, "expected a map");
        size_t n = json_object_size(v);
        int rc = FERRY_OK;
        if (n > 0) rc = put_long(w->out, (int64_t)n);
        json_t *values = json_object_get(type, "values");
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            if (rc == FERRY_OK) rc = put_bytes(w->out, k, strlen(k));
            if (rc == FERRY_OK) rc = write_value(w, values, x, depth + 1);
        }
        return rc == FERRY_OK ? put_long(w->out, 0) : rc;
    }
    return bad(w, "unknown schema type");
}

int ferry__avro_write(struct ferry_buf *out, json_t *schema, json_t *meta, json_t *records,
                      struct ferry_error *err)
{
    struct ferry_buf body;
    ferry_buf_init(&body, 0);
    struct wctx w = {.out = &body, .names = json_object(), .err = err};
    if (w.names == NULL) return ferry_error_set(err, FERRY_ENOMEM, "avro", "out of memory");
    int rc = FERRY_OK;
    size_t i;
    json_t *r;
    json_array_foreach(records, i, r)
    {
        w.field = NULL;
        rc = write_value(&w, schema, r, 0);
        if (rc != FERRY_OK) break;
    }
    json_decref(w.names);
    char *schema_text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (rc == FERRY_OK && schema_text == NULL)
        rc = ferry_error_set(err, FERRY_ENOMEM, "avro", "out of memory");
    uint8_t sync[16];
    ferry__iceberg_random(sync, sizeof sync);
    struct ferry_buf *o = out;
    if (rc == FERRY_OK) rc = ferry_buf_append(o, "Obj\x01", 4);
    if (rc == FERRY_OK) rc = put_long(o, (int64_t)(json_object_size(meta) + 2));
    if (rc == FERRY_OK) rc = put_bytes(o, "avro.schema", 11);
    if (rc == FERRY_OK) rc = put_bytes(o, schema_text, strlen(schema_text));
    if (rc == FERRY_OK) rc = put_bytes(o, "avro.codec", 10);
    if (rc == FERRY_OK) rc = put_bytes(o, "null", 4);
    const char *k;
    json_t *x;
    json_object_foreach(meta, k, x)
    {
        const char *s = json_string_value(x);
        if (rc == FERRY_OK) rc = put_bytes(o, k, strlen(k));
        if (rc == FERRY_OK) rc = put_bytes(o, s ? s : "", s ? strlen(s) : 0);
    }
    if (rc == FERRY_OK) rc = put_long(o, 0);
    if (rc == FERRY_OK) rc = ferry_buf_append(o, sync, 16);
    if (rc == FERRY_OK && json_array_size(records) > 0) {
        rc = put_long(o, (int64_t)json_array_size(records));
        if (rc == FERRY_OK) rc = put_long(o, (int64_t)body.len);
        if (rc == FERRY_OK) rc = ferry_buf_append(o, body.data, body.len);
        if (rc == FERRY_OK) rc = ferry_buf_append(o, sync, 16);
    }
    if (rc == FERRY_ENOMEM && (err == NULL || err->code == FERRY_OK))
        rc = ferry_error_set(err, FERRY_ENOMEM, "avro", "out of memory");
    free(schema_text);
    ferry_buf_release(&body);
    return rc;
}

/* ---- reading -------------------------------------------------------------------------- */

struct rctx {
    const uint8_t *p, *end;
    json_t *names;
    struct ferry_error *err;
    /* Values left to read: null, empty records and the like take no bytes, so a block
     * count alone could ask for 2^63 of them (a hang, then out of memory). Real manifests
     * hold far fewer values than bytes; the budget is 8 per byte of the file (inflated). */
    uint64_t *budget;
};

static int truncated(struct rctx *r)
{
    return ferry_error_set(r->err, FERRY_EINVAL, "avro", "avro: file truncated or corrupt");
}

static int get_long(struct rctx *r, int64_t *out)
{
    *out = 0;
    uint64_t z = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return truncated(r);
        uint8_t c = *r->p++;
        z |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return FERRY_OK;
        }
    }
    return truncated(r);
}

static int get_bytes(struct rctx *r, const uint8_t **p, size_t *n)
{
    *p = NULL;
    *n = 0;
    int64_t len = 0;
    int rc = get_long(r, &len);
    if (rc != FERRY_OK) return rc;
    if (len < 0 || len > r->end - r->p) return truncated(r);
    *p = r->p;
    *n = (size_t)len;
    r->p += len;
    return FERRY_OK;
}

static int read_value(struct rctx *r, json_t *type, json_t **out, int depth);

static int read_blocks(struct rctx *r, json_t *items, json_t *values, json_t **out, int depth)
{
    json_t *c = values ? json_object() : json_array();
    if (c == NULL) return ferry_error_set(r->err, FERRY_ENOMEM, "avro", "out of memory");
    for (;;) {
        int64_t count = 0;
        int rc = get_long(r, &count);
        if (rc == FERRY_OK && count == INT64_MIN) rc = truncated(r); /* has no negation */
        if (rc == FERRY_OK && count < 0) {
            int64_t size = 0;
            count = -count;
            rc = get_long(r, &size);
        }
        if (rc != FERRY_OK) {
            json_decref(c);
            return rc;
        }
        if (count == 0) break;
        for (int64_t i = 0; i < count; i++) {
            json_t *v = NULL;
            if (values) {
                const uint8_t *k = NULL;
                size_t kn = 0;
                rc = get_bytes(r, &k, &kn);
                char *key = rc == FERRY_OK ? ferry_strndup((const char *)k, kn) : NULL;
                if (rc == FERRY_OK && key == NULL) rc = FERRY_ENOMEM;
                if (rc == FERRY_OK) rc = read_value(r, values, &v, depth + 1);
                if (rc == FERRY_OK) json_object_set_new(c, key, v);
                ferry_free(key);
            } else {
                rc = read_value(r, items, &v, depth + 1);
                if (rc == FERRY_OK) json_array_append_new(c, v);
            }
            if (rc != FERRY_OK) {
                json_decref(c);
                return rc == FERRY_ENOMEM ? ferry_error_set(r->err, rc, "avro", "out of memory")
                                          : rc;
            }
        }
    }
    *out = c;
    return FERRY_OK;
}

static int read_value(struct rctx *r, json_t *type, json_t **out, int depth)
{
    *out = NULL;
    if (depth > AVRO_MAX_DEPTH)
        return ferry_error_set(r->err, FERRY_EINVAL, "avro", "avro: schema nested too deeply");
    if (*r->budget == 0)
        return ferry_error_set(r->err, FERRY_EINVAL, "avro",
                               "avro: more values than the file's size can hold (corrupt counts)");
    (*r->budget)--;
    type = resolve(r->names, type);
    int rc;
    if (json_is_array(type)) {
        int64_t idx = 0;
        rc = get_long(r, &idx);
        if (rc != FERRY_OK) return rc;
        if (idx < 0 || (size_t)idx >= json_array_size(type)) return truncated(r);
        return read_value(r, json_array_get(type, (size_t)idx), out, depth + 1);
    }
    const char *t = type_name(type);
    if (t == NULL)
        return ferry_error_set(r->err, FERRY_EINVAL, "avro", "avro: bad schema in the file");
    if (json_is_object(type)) remember(r->names, type);
    if (!strcmp(t, "null")) {
        *out = json_null();
        return FERRY_OK;
    }
    if (!strcmp(t, "boolean")) {
        if (r->p >= r->end) return truncated(r);
        *out = json_boolean(*r->p++ != 0);
        return FERRY_OK;
    }
    if (!strcmp(t, "int") || !strcmp(t, "long")) {
        int64_t v = 0;
        rc = get_long(r, &v);
        if (rc == FERRY_OK) *out = json_integer((json_int_t)v);
        return rc;
    }
    if (!strcmp(t, "float") || !strcmp(t, "double")) {
        size_t n = !strcmp(t, "float") ? 4 : 8;
        if ((size_t)(r->end - r->p) < n) return truncated(r);
        uint64_t u = 0;
        for (size_t k = 0; k < n; k++) u |= (uint64_t)r->p[k] << (8 * k);
        r->p += n;
        double d;
        if (n == 4) {
            uint32_t u32 = (uint32_t)u;
            float f;
            memcpy(&f, &u32, 4);
            d = f;
        } else {
            memcpy(&d, &u, 8);
        }
        *out = isfinite(d) ? json_real(d) : json_null();
        return FERRY_OK;
    }
    if (!strcmp(t, "string") || !strcmp(t, "bytes") || !strcmp(t, "fixed")) {
        const uint8_t *p;
        size_t n;
        if (!strcmp(t, "fixed")) {
            json_int_t size = json_integer_value(json_object_get(type, "size"));
            if (size < 0 || size > r->end - r->p) return truncated(r);
            p = r->p;
            n = (size_t)size;
            r->p += size;
        } else {
            rc = get_bytes(r, &p, &n);
            if (rc != FERRY_OK) return rc;
        }
        if (!strcmp(t, "string")) {
            *out = json_stringn((const char *)p, n);
        } else {
            char *h = ferry__iceberg_hex(p, n);
            *out = h ? json_string(h) : NULL;
            ferry_free(h);
        }
        return *out ? FERRY_OK : ferry_error_set(r->err, FERRY_EINVAL, "avro",
                                                 "avro: a string that is not UTF-8");
    }
    if (!strcmp(t, "enum")) {
        int64_t idx = 0;
        rc = get_long(r, &idx);
        if (rc != FERRY_OK) return rc;
        json_t *s = json_array_get(json_object_get(type, "symbols"), (size_t)idx);
        if (s == NULL) return truncated(r);
        *out = json_incref(s);
        return FERRY_OK;
    }
    if (!strcmp(t, "record")) {
        json_t *o = json_object();
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(type, "fields"), i, f)
        {
            json_t *v = NULL;
            rc = read_value(r, json_object_get(f, "type"), &v, depth + 1);
            if (rc != FERRY_OK) {
                json_decref(o);
                return rc;
            }
            const char *name = json_string_value(json_object_get(f, "name"));
            json_object_set_new(o, name ? name : "", v);
        }
        *out = o;
        return FERRY_OK;
    }
    if (!strcmp(t, "array")) return read_blocks(r, json_object_get(type, "items"), NULL, out, depth);
    if (!strcmp(t, "map")) return read_blocks(r, NULL, json_object_get(type, "values"), out, depth);
    return ferry_error_set(r->err, FERRY_EINVAL, "avro", "avro: unknown type %s in the file", t);
}

/* Avro's deflate codec is raw RFC 1951 data. */
static int inflate_block(const uint8_t *p, size_t n, struct ferry_buf *out, struct ferry_error *err)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -15) != Z_OK)
        return ferry_error_set(err, FERRY_ENOMEM, "avro", "out of memory (inflate)");
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    out->len = 0;
    int zrc = Z_OK;
    while (zrc == Z_OK) {
        if (ferry_buf_reserve(out, n * 2 + 4096) != FERRY_OK) {
            inflateEnd(&zs);
            return ferry_error_set(err, FERRY_ENOMEM, "avro", "out of memory");
        }
        zs.next_out = (Bytef *)out->data + out->len;
        zs.avail_out = (uInt)(out->cap - out->len);
        size_t before = zs.avail_out;
        zrc = inflate(&zs, Z_NO_FLUSH);
        out->len += before - zs.avail_out;
        if (zrc == Z_BUF_ERROR && zs.avail_in == 0) break;
        if (zrc == Z_BUF_ERROR) zrc = Z_OK;
    }
    inflateEnd(&zs);
    if (zrc != Z_STREAM_END && zrc != Z_BUF_ERROR)
        return ferry_error_set(err, FERRY_EINVAL, "avro", "avro: corrupt deflate block");
    return FERRY_OK;
}

int ferry__avro_read(const uint8_t *p, size_t n, json_t **meta, json_t **records,
                     struct ferry_error *err)
{
    *meta = NULL;
    *records = NULL;
    uint64_t budget = 8 * (uint64_t)n + 1024;
    struct rctx r = {.p = p, .end = p + n, .names = NULL, .err = err, .budget = &budget};
    if (n < 4 || memcmp(p, "Obj\x01", 4) != 0)
        return ferry_error_set(err, FERRY_EINVAL, "avro", "avro: not an object container file");
    r.p += 4;
    json_t *m = NULL;
    json_t *bytes_t = json_string("bytes");
    int rc = read_blocks(&r, NULL, bytes_t, &m, 0);
    json_decref(bytes_t);
    if (rc != FERRY_OK) return rc;
    /* metadata values are bytes (hex in our convention): turn them back into text */
    const char *k;
    json_t *v;
    json_t *mt = json_object();
    json_object_foreach(m, k, v)
    {
        size_t hn = json_string_length(v) / 2;
        uint8_t *tmp = ferry_malloc(hn + 1);
        long got = tmp ? ferry__iceberg_unhex(json_string_value(v), tmp, hn) : -1;
        if (got >= 0) json_object_set_new(mt, k, json_stringn((const char *)tmp, (size_t)got));
        ferry_free(tmp);
    }
    json_decref(m);
    json_error_t je;
    const char *schema_text = json_string_value(json_object_get(mt, "avro.schema"));
    json_t *schema = schema_text ? json_loads(schema_text, JSON_DECODE_ANY, &je) : NULL;
    const char *codec = json_string_value(json_object_get(mt, "avro.codec"));
    if (schema == NULL) {
        json_decref(mt);
        return ferry_error_set(err, FERRY_EINVAL, "avro", "avro: no readable avro.schema");
    }
    if (codec && strcmp(codec, "null") != 0 && strcmp(codec, "deflate") != 0) {
        /* codec points into mt: word the error before releasing it */
        int urc = ferry_error_set(err, FERRY_EUNSUPPORTED, "avro",
                                  "avro: codec %s is not supported (null, deflate)", codec);
        json_decref(mt);
        json_decref(schema);
        return urc;
    }
    bool deflate = codec && !strcmp(codec, "deflate");
    if (r.end - r.p < 16) {
        json_decref(mt);
        json_decref(schema);
        return truncated(&r);
    }
    const uint8_t *sync = r.p;
    r.p += 16;
    json_t *recs = json_array();
    r.names = json_object();
    struct ferry_buf raw;
    ferry_buf_init(&raw, 0);
    while (rc == FERRY_OK && r.p < r.end) {
        int64_t count = 0, size = 0;
        rc = get_long(&r, &count);
        if (rc == FERRY_OK) rc = get_long(&r, &size);
        if (rc != FERRY_OK) break;
        if (count < 0 || size < 0 || size > r.end - r.p || r.end - r.p - size < 16) {
            rc = truncated(&r);
            break;
        }
        const uint8_t *blk = r.p;
        size_t blen = (size_t)size;
        r.p += size;
        if (memcmp(r.p, sync, 16) != 0) {
            rc = ferry_error_set(err, FERRY_EINVAL, "avro", "avro: sync marker mismatch");
            break;
        }
        r.p += 16;
        if (deflate) {
            rc = inflate_block(blk, blen, &raw, err);
            if (rc != FERRY_OK) break;
            blk = (const uint8_t *)raw.data;
            blen = raw.len;
            budget += 8 * (uint64_t)blen;
        }
        struct rctx br = {.p = blk, .end = blk + blen, .names = r.names, .err = err,
                          .budget = &budget};
        for (int64_t i = 0; i < count && rc == FERRY_OK; i++) {
            json_t *rec = NULL;
            rc = read_value(&br, schema, &rec, 0);
            if (rc == FERRY_OK) json_array_append_new(recs, rec);
        }
    }
    ferry_buf_release(&raw);
    json_decref(r.names);
    json_decref(schema);
    if (rc != FERRY_OK) {
        json_decref(mt);
        json_decref(recs);
        return rc;
    }
    *meta = mt;
    *records = recs;
    return FERRY_OK;
}
