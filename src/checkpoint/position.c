/* checkpoint/position.c - the codec of checkpoint positions (position.h): decoding with a
 * small reader of one flat JSON object, encoding through ferry_buf in the batch builder's
 * member order and number forms; every allocation goes through ferry_malloc & co.
 * Calls: core.
 * Called by the runner and the sqlite and postgres sources; the other sources, the builder,
 * the tracker and the store are to follow (docs/internals/checkpoint.md). */
#include "checkpoint/position.h"
#include <inttypes.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHAT "checkpoint position"

void ferry_position_init(struct ferry_position *p)
{
    memset(p, 0, sizeof *p);
}

void ferry_position_clear(struct ferry_position *p)
{
    for (int i = 0; p->key && i < p->n_key; i++)
        ferry_free(p->key[i].text);
    ferry_free(p->key);
    ferry_free(p->tag);
    ferry_free(p->object);
    ferry_free(p->snapshot);
    ferry_position_init(p);
}

/* ---- decode ----
 * A small reader of one flat JSON object (RFC 8259), so that every failure is exact: an
 * allocation failure is FERRY_ENOMEM, never mistaken for bad text. */

struct rd {
    const char *start, *s, *end;
    struct ferry_error *err;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "checkpoint", WHAT ": out of memory");
}

static int not_json(struct rd *r, const char *why)
{
    return ferry_error_set(r->err, FERRY_EINVAL, "checkpoint", WHAT ": not JSON (%s at byte %ld)",
                           why, (long)(r->s - r->start));
}

static int bad(struct ferry_error *err, const char *member, const char *why)
{
    return ferry_error_set(err, FERRY_EINVAL, "checkpoint", WHAT ": member \"%s\" %s", member, why);
}

static void skip_ws(struct rd *r)
{
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r'))
        r->s++;
}

static bool eat(struct rd *r, char c)
{
    skip_ws(r);
    if (r->s < r->end && *r->s == c) {
        r->s++;
        return true;
    }
    return false;
}

static int hex4(struct rd *r, unsigned *out)
{
    if (r->end - r->s < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    r->s += 4;
    *out = v;
    return 0;
}

static int put_utf8(struct ferry_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 63));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 63));
        u[2] = (char)(0x80 | (cp & 63));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 63));
        u[2] = (char)(0x80 | (cp >> 6 & 63));
        u[3] = (char)(0x80 | (cp & 63));
        n = 4;
    }
    return ferry_buf_append(b, u, n);
}

/* One escape after the backslash into b; -1: malformed, else a ferry code. */
static int escape(struct rd *r, struct ferry_buf *b)
{
    if (r->s >= r->end) return -1;
    char c = *r->s++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (k != NULL) return ferry_buf_append(b, to + (k - from), 1);
    if (c != 'u') return -1;
    unsigned cp, lo;
    if (hex4(r, &cp) != 0) return -1;
    if (cp >= 0xdc00 && cp <= 0xdfff) return -1;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (r->end - r->s < 2 || r->s[0] != '\\' || r->s[1] != 'u') return -1;
        r->s += 2;
        if (hex4(r, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff) return -1;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    return put_utf8(b, cp);
}

/* A string literal (after skipping space) into b (reset first). */
static int read_string(struct rd *r, struct ferry_buf *b)
{
    ferry_buf_reset(b);
    if (!eat(r, '"')) return not_json(r, "a string expected");
    int rc = ferry_buf_reserve(b, 1);
    while (rc == FERRY_OK) {
        if (r->s >= r->end) return not_json(r, "an unterminated string");
        unsigned char c = (unsigned char)*r->s++;
        if (c == '"') return FERRY_OK;
        if (c < 0x20) return not_json(r, "a control character in a string");
        if (c != '\\') {
            rc = ferry_buf_append(b, &c, 1);
            continue;
        }
        rc = escape(r, b);
        if (rc < 0) return not_json(r, "a bad escape");
    }
    return oom(r->err);
}

enum value_kind { V_NULL, V_BOOL, V_INT, V_REAL, V_TEXT, V_ARRAY, V_OBJECT };

struct value {
    enum value_kind kind;
    bool b;
    int64_t i;
    double real;
};

static bool literal(struct rd *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->s) < n || memcmp(r->s, word, n) != 0) return false;
    r->s += n;
    return true;
}

/* A number per RFC 8259's grammar: integers that fit int64 are V_INT, others V_REAL. */
static int read_number(struct rd *r, struct value *v)
{
    const char *p = r->s, *start = r->s;
    bool real = false;
    if (p < r->end && *p == '-') p++;
    if (p >= r->end || !(*p >= '0' && *p <= '9')) return not_json(r, "a value expected");
    if (*p == '0')
        p++;
    else
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    if (p < r->end && *p == '.') {
        real = true;
        p++;
        if (p >= r->end || !(*p >= '0' && *p <= '9')) return not_json(r, "a bad number");
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < r->end && (*p == '+' || *p == '-')) p++;
        if (p >= r->end || !(*p >= '0' && *p <= '9')) return not_json(r, "a bad number");
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    char tmp[64];
    size_t n = (size_t)(p - start);
    if (n >= sizeof tmp) return not_json(r, "a number too long");
    memcpy(tmp, start, n);
    tmp[n] = '\0';
    r->s = p;
    errno = 0;
    if (!real) {
        long long x = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->kind = V_INT;
            v->i = x;
            return FERRY_OK;
        }
    }
    v->kind = V_REAL;
    v->real = strtod(tmp, NULL);
    if (!isfinite(v->real)) return not_json(r, "a number out of range");
    return FERRY_OK;
}

/* The next value's kind and scalar; a string's bytes go to b; arrays and objects are only
 * recognised (their opening bracket is consumed). */
static int read_value(struct rd *r, struct value *v, struct ferry_buf *b)
{
    skip_ws(r);
    if (r->s >= r->end) return not_json(r, "a value expected");
    char c = *r->s;
    if (c == '"') {
        v->kind = V_TEXT;
        return read_string(r, b);
    }
    if (c == '[' || c == '{') {
        r->s++;
        v->kind = c == '[' ? V_ARRAY : V_OBJECT;
        return FERRY_OK;
    }
    if (literal(r, "null")) {
        v->kind = V_NULL;
        return FERRY_OK;
    }
    if (literal(r, "true")) {
        v->kind = V_BOOL;
        v->b = true;
        return FERRY_OK;
    }
    if (literal(r, "false")) {
        v->kind = V_BOOL;
        v->b = false;
        return FERRY_OK;
    }
    return read_number(r, v);
}

static char *dup_bytes(const char *s, size_t n)
{
    char *d = ferry_malloc(n + 1);
    if (d == NULL) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int key_value(struct rd *r, int i, struct ferry_key_value *out, struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    switch (v.kind) {
    case V_NULL:
        out->kind = FERRY_KEY_NULL;
        return FERRY_OK;
    case V_BOOL:
        out->kind = FERRY_KEY_BOOL;
        out->b = v.b;
        return FERRY_OK;
    case V_INT:
        out->kind = FERRY_KEY_INT;
        out->i = v.i;
        return FERRY_OK;
    case V_REAL:
        out->kind = FERRY_KEY_REAL;
        out->real = v.real;
        return FERRY_OK;
    case V_TEXT:
        out->kind = FERRY_KEY_TEXT;
        out->len = b->len;
        out->text = dup_bytes(b->data ? b->data : "", b->len);
        return out->text ? FERRY_OK : oom(r->err);
    default:
        return ferry_error_set(r->err, FERRY_EINVAL, "checkpoint",
                               WHAT ": key value %d is an array or an object", i);
    }
}

static int grow_key(struct ferry_position *p, int *cap, struct ferry_error *err)
{
    if (p->n_key < *cap) return FERRY_OK;
    if (*cap >= 4096) return bad(err, "key", "has more than 4096 values");
    int ncap = *cap ? *cap * 2 : 4;
    struct ferry_key_value *k = ferry_realloc(p->key, (size_t)ncap * sizeof *k);
    if (k == NULL) return oom(err);
    memset(k + *cap, 0, (size_t)(ncap - *cap) * sizeof *k);
    p->key = k;
    *cap = ncap;
    return FERRY_OK;
}

/* After "key": the array's values. */
static int decode_key(struct rd *r, struct ferry_position *p, struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    if (v.kind != V_ARRAY) return bad(r->err, "key", "is not an array");
    p->has_key = true;
    if (eat(r, ']')) return FERRY_OK;
    int cap = 0;
    do {
        rc = grow_key(p, &cap, r->err);
        if (rc == FERRY_OK) rc = key_value(r, p->n_key, &p->key[p->n_key], b);
        if (rc != FERRY_OK) return rc;
        p->n_key++;
    } while (eat(r, ','));
    return eat(r, ']') ? FERRY_OK : not_json(r, "',' or ']' expected");
}

static int int_member(struct rd *r, const char *member, int64_t max, int64_t *out,
                      struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    if (v.kind != V_INT || v.i < 0 || v.i > max)
        return bad(r->err, member, "is not a non-negative integer in range");
    *out = v.i;
    return FERRY_OK;
}

static int flag_member(struct rd *r, const char *member, bool *out, struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    if (v.kind != V_BOOL) return bad(r->err, member, "is not true or false");
    *out = v.b;
    return FERRY_OK;
}

static int text_member(struct rd *r, const char *member, char **out, struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    if (v.kind != V_TEXT || memchr(b->data ? b->data : "", '\0', b->len) != NULL)
        return bad(r->err, member, "is not a string");
    *out = dup_bytes(b->data ? b->data : "", b->len);
    return *out ? FERRY_OK : oom(r->err);
}

static const char *const MEMBERS[] = {"shard", "key",   "n",      "k",        "g",
                                      "done",  "reset", "object", "snapshot", "attempt"};
#define N_MEMBERS (int)(sizeof MEMBERS / sizeof MEMBERS[0])

static int decode_member(struct rd *r, int m, struct ferry_position *p, struct ferry_buf *b)
{
    int64_t x = 0;
    int rc = FERRY_OK;
    switch (m) {
    case 0:
        rc = int_member(r, "shard", INT32_MAX, &x, b);
        p->shard = (int)x;
        break;
    case 1:
        rc = decode_key(r, p, b);
        break;
    case 2:
        rc = int_member(r, "n", INT64_MAX, &p->n, b);
        p->has_n = rc == FERRY_OK;
        break;
    case 3:
        rc = int_member(r, "k", INT64_MAX, &p->k, b);
        break;
    case 4:
        rc = text_member(r, "g", &p->tag, b);
        break;
    case 5:
        rc = flag_member(r, "done", &p->done, b);
        break;
    case 6:
        rc = flag_member(r, "reset", &p->reset, b);
        break;
    case 7:
        rc = text_member(r, "object", &p->object, b);
        break;
    case 8:
        rc = text_member(r, "snapshot", &p->snapshot, b);
        break;
    default:
        rc = int_member(r, "attempt", INT32_MAX, &x, b);
        p->attempt = (int)x;
        break;
    }
    return rc;
}

/* The member whose name b holds; -1 after setting the error for an unknown or repeated one. */
static int member_index(struct rd *r, const struct ferry_buf *b, unsigned *seen)
{
    for (int m = 0; m < N_MEMBERS; m++) {
        if (b->len != strlen(MEMBERS[m]) || memcmp(b->data, MEMBERS[m], b->len) != 0) continue;
        if (*seen & (1u << m)) {
            bad(r->err, MEMBERS[m], "appears twice");
            return -1;
        }
        *seen |= 1u << m;
        return m;
    }
    ferry_error_set(r->err, FERRY_EINVAL, "checkpoint", WHAT ": unknown member \"%.*s\"",
                    (int)(b->len > 64 ? 64 : b->len), b->data ? b->data : "");
    return -1;
}

static int decode_object(struct rd *r, struct ferry_position *out, struct ferry_buf *b)
{
    struct value v;
    int rc = read_value(r, &v, b);
    if (rc != FERRY_OK) return rc;
    if (v.kind != V_OBJECT)
        return ferry_error_set(r->err, FERRY_EINVAL, "checkpoint", WHAT ": not a JSON object");
    unsigned seen = 0;
    if (!eat(r, '}')) {
        do {
            rc = read_string(r, b);
            if (rc != FERRY_OK) return rc;
            int m = member_index(r, b, &seen);
            if (m < 0) return FERRY_EINVAL;
            if (!eat(r, ':')) return not_json(r, "':' expected");
            rc = decode_member(r, m, out, b);
            if (rc != FERRY_OK) return rc;
        } while (eat(r, ','));
        if (!eat(r, '}')) return not_json(r, "',' or '}' expected");
    }
    skip_ws(r);
    return r->s == r->end ? FERRY_OK : not_json(r, "text after the object");
}

int ferry_position_decode(const char *text, size_t len, struct ferry_position *out,
                          struct ferry_error *err)
{
    ferry_position_init(out);
    if (text == NULL) return ferry_error_set(err, FERRY_EINVAL, "checkpoint", WHAT ": none given");
    struct rd r = {.start = text, .s = text, .end = text + len, .err = err};
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = decode_object(&r, out, &b);
    ferry_buf_release(&b);
    if (rc != FERRY_OK) ferry_position_clear(out);
    return rc;
}

bool ferry_position_text_done(const char *text)
{
    if (text == NULL) return false;
    struct ferry_position p;
    bool done = ferry_position_decode(text, strlen(text), &p, NULL) == FERRY_OK && p.done;
    ferry_position_clear(&p);
    return done;
}

/* ---- encode ---- */

/* The shortest form that reads back as the same double, or with single as the same float. */
static int put_real(struct ferry_buf *b, double v, bool single)
{
    char tmp[40];
    for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (single ? strtof(tmp, NULL) == (float)v : strtod(tmp, NULL) == v) break;
    }
    return ferry_buf_append(b, tmp, strlen(tmp));
}

static int put_key_value(struct ferry_buf *b, const struct ferry_key_value *v)
{
    switch (v->kind) {
    case FERRY_KEY_NULL:
        return ferry_buf_append(b, "null", 4);
    case FERRY_KEY_BOOL:
        return v->b ? ferry_buf_append(b, "true", 4) : ferry_buf_append(b, "false", 5);
    case FERRY_KEY_INT:
        return ferry_buf_printf(b, "%" PRId64, v->i);
    case FERRY_KEY_REAL:
        if (!isfinite(v->real)) return FERRY_EINVAL;
        return put_real(b, v->real, v->single);
    case FERRY_KEY_TEXT:
        return ferry_buf_json_string(b, v->text ? v->text : "", v->len);
    }
    return FERRY_EINVAL;
}

static int put_members(const struct ferry_position *p, struct ferry_buf *b)
{
    int rc = ferry_buf_printf(b, "{\"shard\":%d", p->shard);
    if (rc == FERRY_OK && p->has_key) {
        rc = ferry_buf_append(b, ",\"key\":[", 8);
        for (int i = 0; rc == FERRY_OK && i < p->n_key; i++) {
            if (i > 0) rc = ferry_buf_append(b, ",", 1);
            if (rc == FERRY_OK) rc = put_key_value(b, &p->key[i]);
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(b, "]", 1);
    }
    if (rc == FERRY_OK && p->has_n) rc = ferry_buf_printf(b, ",\"n\":%" PRId64, p->n);
    if (rc == FERRY_OK && p->k > 0) rc = ferry_buf_printf(b, ",\"k\":%" PRId64, p->k);
    if (rc == FERRY_OK && p->has_n && p->tag) {
        rc = ferry_buf_append(b, ",\"g\":", 5);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, p->tag, strlen(p->tag));
    }
    if (rc == FERRY_OK && p->done) rc = ferry_buf_append(b, ",\"done\":true", 12);
    if (rc == FERRY_OK && p->reset) rc = ferry_buf_append(b, ",\"reset\":true", 13);
    if (rc == FERRY_OK && p->object) {
        rc = ferry_buf_append(b, ",\"object\":", 10);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, p->object, strlen(p->object));
    }
    if (rc == FERRY_OK && p->snapshot) {
        rc = ferry_buf_append(b, ",\"snapshot\":", 12);
        if (rc == FERRY_OK) rc = ferry_buf_json_string(b, p->snapshot, strlen(p->snapshot));
    }
    if (rc == FERRY_OK && p->attempt > 0) rc = ferry_buf_printf(b, ",\"attempt\":%d", p->attempt);
    if (rc == FERRY_OK) rc = ferry_buf_append(b, "}", 1);
    return rc;
}

int ferry_position_encode(const struct ferry_position *p, struct ferry_buf *b,
                          struct ferry_error *err)
{
    size_t before = b->len;
    int rc = put_members(p, b);
    if (rc == FERRY_OK) return FERRY_OK;
    b->len = before;
    if (b->data) b->data[before] = '\0';
    if (rc == FERRY_EINVAL)
        return ferry_error_set(err, FERRY_EINVAL, "checkpoint",
                               WHAT " of shard %d: a real key value is not finite", p->shard);
    return oom(err);
}

int ferry_position_to_text(const struct ferry_position *p, char **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_position_encode(p, &b, err);
    if (rc == FERRY_OK) {
        *out = ferry_buf_take(&b);
        if (*out == NULL) rc = oom(err);
    }
    ferry_buf_release(&b);
    return rc;
}
