/* connectors/mysql/my_json.c - MySQL 8's binary JSON as text (see my_json.h for the format
 * and the contract). One recursive walk: container() for objects and arrays, value() for
 * everything a value entry or the document's type byte names, opaque() for values of a
 * MySQL type. Every read goes through need(): an offset, length or count that points
 * outside the bytes of its container is FERRY_EINVAL naming the field. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/mysql/my_binlog.h"
#include "connectors/mysql/my_json.h"

enum {
    J_SMALL_OBJ = 0x00,
    J_LARGE_OBJ = 0x01,
    J_SMALL_ARR = 0x02,
    J_LARGE_ARR = 0x03,
    J_LITERAL = 0x04,
    J_INT16 = 0x05,
    J_UINT16 = 0x06,
    J_INT32 = 0x07,
    J_UINT32 = 0x08,
    J_INT64 = 0x09,
    J_UINT64 = 0x0a,
    J_DOUBLE = 0x0b,
    J_STRING = 0x0c,
    J_OPAQUE = 0x0f,
};

#define MAX_DEPTH 100

struct jr {
    const uint8_t *p;
    size_t n;
    struct ferry_buf *out;
    const char *bad; /* the field that failed first */
};

static bool need(struct jr *j, size_t at, size_t k, size_t end, const char *what)
{
    if (end > j->n || at > end || k > end - at) {
        if (!j->bad) j->bad = what;
        return false;
    }
    return true;
}

static uint64_t le(const uint8_t *p, int w)
{
    uint64_t v = 0;
    for (int i = w - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put(struct jr *j, const char *s, size_t n)
{
    if (ferry_buf_append(j->out, s, n) != FERRY_OK && !j->bad) j->bad = "(out of memory)";
}

static void puts_(struct jr *j, const char *s)
{
    put(j, s, strlen(s));
}

/* A length of 1 to 5 bytes, 7 bits each, low bits first, the high bit set on all but the
 * last byte. */
static bool varlen(struct jr *j, size_t *at, size_t end, size_t *len)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (!need(j, *at, 1, end, "string length")) return false;
        uint8_t b = j->p[(*at)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > end - *at) break;
            *len = (size_t)v;
            return true;
        }
    }
    if (!j->bad) j->bad = "string length";
    return false;
}

static void string_out(struct jr *j, const uint8_t *s, size_t n)
{
    put(j, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(j, (const char *)s + run, i - run);
        run = i + 1;
        char e[8];
        switch (c) {
        case '"':
            puts_(j, "\\\"");
            break;
        case '\\':
            puts_(j, "\\\\");
            break;
        case '\b':
            puts_(j, "\\b");
            break;
        case '\f':
            puts_(j, "\\f");
            break;
        case '\n':
            puts_(j, "\\n");
            break;
        case '\r':
            puts_(j, "\\r");
            break;
        case '\t':
            puts_(j, "\\t");
            break;
        default:
            snprintf(e, sizeof e, "\\u%04x", c);
            puts_(j, e);
        }
    }
    put(j, (const char *)s + run, n - run);
    put(j, "\"", 1);
}

/* The shortest text that reads back as d, exponent without '+' or leading zeros, ".0"
 * after an integral value (how MySQL prints a JSON double). */
static void double_out(struct jr *j, double d)
{
    char b[40], o[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
    }
    size_t k = 0;
    for (const char *c = b; *c && k < sizeof o - 3; c++) {
        o[k++] = *c;
        if (*c != 'e') continue;
        c++;
        if (*c == '-')
            o[k++] = *c++;
        else if (*c == '+')
            c++;
        while (*c == '0' && c[1])
            c++;
        while (*c && k < sizeof o - 3)
            o[k++] = *c++;
        break;
    }
    o[k] = 0;
    puts_(j, o);
    if (strpbrk(o, ".en") == NULL) puts_(j, ".0");
}

/* DATE/DATETIME/TIMESTAMP/TIME in MySQL's packed 8-byte form: (hms or ymd<<17|hms) << 24
 * | microseconds, negative for a negative TIME. */
static void temporal_out(struct jr *j, uint8_t type, int64_t packed)
{
    char b[64];
    bool neg = packed < 0;
    uint64_t v = neg ? (uint64_t)0 - (uint64_t)packed : (uint64_t)packed;
    uint64_t ip = v >> 24, frac = v & 0xffffff;
    unsigned hms = (unsigned)(ip % (1u << 17));
    if (type == 11) { /* TIME: hours may exceed 24 */
        snprintf(b, sizeof b, "\"%s%02u:%02u:%02u.%06u\"", neg ? "-" : "", (unsigned)(ip >> 12),
                 (unsigned)((ip >> 6) & 63), (unsigned)(ip & 63), (unsigned)frac);
        puts_(j, b);
        return;
    }
    uint64_t ymd = ip >> 17, ym = ymd >> 5;
    unsigned year = (unsigned)(ym / 13), month = (unsigned)(ym % 13), day = (unsigned)(ymd & 31);
    if (type == 10)
        snprintf(b, sizeof b, "\"%04u-%02u-%02u\"", year, month, day);
    else
        snprintf(b, sizeof b, "\"%04u-%02u-%02u %02u:%02u:%02u.%06u\"", year, month, day, hms >> 12,
                 (hms >> 6) & 63, hms & 63, (unsigned)frac);
    puts_(j, b);
}

static void base64_out(struct jr *j, const uint8_t *s, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        char q[4] = {a[v >> 18], a[(v >> 12) & 63], i + 1 < n ? a[(v >> 6) & 63] : '=',
                     i + 2 < n ? a[v & 63] : '='};
        put(j, q, 4);
    }
}

/* A value of a MySQL type: its field type byte, a length, the bytes. */
static void opaque(struct jr *j, size_t at, size_t end)
{
    if (!need(j, at, 1, end, "opaque type")) return;
    uint8_t type = j->p[at++];
    size_t len;
    if (!varlen(j, &at, end, &len)) return;
    const uint8_t *d = j->p + at;
    if (type == 246) { /* DECIMAL: precision, scale, the binary decimal */
        char t[100];
        size_t used;
        if (len < 2 ||
            ferry__my_bl_decimal_text(d + 2, len - 2, d[0], d[1], t, sizeof t, &used) != FERRY_OK) {
            if (!j->bad) j->bad = "opaque decimal";
            return;
        }
        puts_(j, t);
    } else if (type == 10 || type == 12 || type == 7 || type == 11) {
        if (len < 8) {
            if (!j->bad) j->bad = "opaque temporal";
            return;
        }
        temporal_out(j, type, (int64_t)le(d, 8));
    } else { /* as MySQL prints any other opaque value */
        char h[32];
        snprintf(h, sizeof h, "\"base64:type%u:", type);
        puts_(j, h);
        base64_out(j, d, len);
        put(j, "\"", 1);
    }
}

static void value(struct jr *j, uint8_t type, size_t at, size_t end, int depth);

static bool inlined(uint8_t t, bool large)
{
    return t == J_LITERAL || t == J_INT16 || t == J_UINT16 ||
           (large && (t == J_INT32 || t == J_UINT32));
}

/* An object or array starting at `at`: count, size, key entries, value entries; offsets
 * are from `at`. */
static void container(struct jr *j, size_t at, size_t end, bool large, bool obj, int depth)
{
    int w = large ? 4 : 2;
    if (depth > MAX_DEPTH) {
        if (!j->bad) j->bad = "nesting depth (over 100)";
        return;
    }
    if (!need(j, at, 2 * (size_t)w, end, "container header")) return;
    uint64_t count = le(j->p + at, w), size = le(j->p + at + w, w);
    if (!need(j, at, size, end, "container size")) return;
    size_t cend = at + size, ke = at + 2 * (size_t)w;
    size_t ve = ke + (obj ? (size_t)count * ((size_t)w + 2) : 0);
    if (count > size ||
        !need(j, ke, obj ? (size_t)count * ((size_t)w + 2) : 0, cend, "key entries") ||
        !need(j, ve, (size_t)count * (1 + (size_t)w), cend, "value entries"))
        return;
    put(j, obj ? "{" : "[", 1);
    for (uint64_t i = 0; i < count && !j->bad; i++) {
        if (i > 0) put(j, ", ", 2);
        if (obj) {
            const uint8_t *e = j->p + ke + i * ((size_t)w + 2);
            size_t koff = (size_t)le(e, w), klen = (size_t)le(e + w, 2);
            if (!need(j, at + koff, klen, cend, "key")) return;
            string_out(j, j->p + at + koff, klen);
            put(j, ": ", 2);
        }
        const uint8_t *e = j->p + ve + i * (1 + (size_t)w);
        uint8_t t = e[0];
        if (inlined(t, large)) {
            value(j, t, (size_t)(e + 1 - j->p), cend, depth + 1);
        } else {
            size_t off = (size_t)le(e + 1, w);
            if (!need(j, at + off, 1, cend, "value offset")) return;
            value(j, t, at + off, cend, depth + 1);
        }
    }
    put(j, obj ? "}" : "]", 1);
}

static void int_out(struct jr *j, uint8_t t, const uint8_t *p)
{
    char b[32];
    switch (t) {
    case J_INT16:
        snprintf(b, sizeof b, "%d", (int16_t)le(p, 2));
        break;
    case J_UINT16:
        snprintf(b, sizeof b, "%u", (unsigned)le(p, 2));
        break;
    case J_INT32:
        snprintf(b, sizeof b, "%ld", (long)(int32_t)le(p, 4));
        break;
    case J_UINT32:
        snprintf(b, sizeof b, "%lu", (unsigned long)le(p, 4));
        break;
    case J_INT64:
        snprintf(b, sizeof b, "%lld", (long long)(int64_t)le(p, 8));
        break;
    default:
        snprintf(b, sizeof b, "%llu", (unsigned long long)le(p, 8));
        break;
    }
    puts_(j, b);
}

static void value(struct jr *j, uint8_t type, size_t at, size_t end, int depth)
{
    static const int width[16] = {0, 0, 0, 0, 1, 2, 2, 4, 4, 8, 8, 8};
    switch (type) {
    case J_SMALL_OBJ:
    case J_LARGE_OBJ:
    case J_SMALL_ARR:
    case J_LARGE_ARR:
        container(j, at, end, type == J_LARGE_OBJ || type == J_LARGE_ARR,
                  type == J_SMALL_OBJ || type == J_LARGE_OBJ, depth);
        return;
    case J_STRING: {
        size_t len;
        if (varlen(j, &at, end, &len)) string_out(j, j->p + at, len);
        return;
    }
    case J_OPAQUE:
        opaque(j, at, end);
        return;
    default:
        break;
    }
    if (type > J_DOUBLE) {
        if (!j->bad) j->bad = "value type";
        return;
    }
    if (!need(j, at, (size_t)width[type], end, "scalar value")) return;
    const uint8_t *p = j->p + at;
    if (type == J_LITERAL) {
        if (p[0] > 2) {
            if (!j->bad) j->bad = "literal";
            return;
        }
        puts_(j, p[0] == 0 ? "null" : p[0] == 1 ? "true" : "false");
    } else if (type == J_DOUBLE) {
        uint64_t bits = le(p, 8);
        double d;
        memcpy(&d, &bits, 8);
        double_out(j, d);
    } else {
        int_out(j, type, p);
    }
}

int ferry__my_json_to_text(const uint8_t *p, size_t n, struct ferry_buf *out,
                           struct ferry_error *err)
{
    if (n == 0) return ferry_buf_append(out, "null", 4);
    struct jr j = {p, n, out, NULL};
    value(&j, p[0], 1, n, 0);
    if (j.bad)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", "MySQL binary JSON: bad %s (%zu bytes)",
                               j.bad, n);
    return FERRY_OK;
}
