/* connectors/mysql/my_charset.c - binlog bytes of a non-UTF-8 character set as UTF-8: the
 * contract is in my_charset.h. Called by my_source.c (the cdc stream's bl_text and the
 * tables it reads from the server); calls nothing but the allocator and ferry_buf. */
#include "connectors/mysql/my_charset.h"
#include <string.h>

#define TWO_N (128u * 256u)
#define THREE_N (94u * 94u)
#define FOUR_N 39420u         /* 0x81308130 .. 0x8431a439: U+0080 .. U+FFFF not in two bytes */
#define FOUR_SUPP 189000u     /* linear index of 0x90308130 = U+10000 */

enum ferry_my_cs_kind ferry__my_cs_kind(const char *name)
{
    if (strcmp(name, "ucs2") == 0) return FERRY_MY_CS_UCS2;
    if (strcmp(name, "utf16") == 0) return FERRY_MY_CS_UTF16;
    if (strcmp(name, "utf16le") == 0) return FERRY_MY_CS_UTF16LE;
    if (strcmp(name, "utf32") == 0) return FERRY_MY_CS_UTF32;
    return FERRY_MY_CS_TABLE;
}

static uint32_t *undefined(size_t n)
{
    uint32_t *t = ferry_malloc(n * sizeof *t);
    if (t != NULL) memset(t, 0xff, n * sizeof *t);
    return t;
}

int ferry__my_cs_init(struct ferry_my_cs *cs, const char *name, enum ferry_my_cs_kind kind,
                      int maxlen)
{
    memset(cs, 0, sizeof *cs);
    memset(cs->one, 0xff, sizeof cs->one);
    cs->kind = kind;
    if (kind != FERRY_MY_CS_TABLE || maxlen < 2) return FERRY_OK;
    bool euc3 = strcmp(name, "ujis") == 0 || strcmp(name, "eucjpms") == 0;
    bool gb4 = strcmp(name, "gb18030") == 0;
    cs->two = undefined(TWO_N);
    if (euc3) cs->three = undefined(THREE_N);
    if (gb4) cs->four = undefined(FOUR_N);
    if (cs->two == NULL || (euc3 && cs->three == NULL) || (gb4 && cs->four == NULL)) {
        ferry__my_cs_release(cs);
        return FERRY_ENOMEM;
    }
    return FERRY_OK;
}

void ferry__my_cs_release(struct ferry_my_cs *cs)
{
    if (cs == NULL) return;
    ferry_free(cs->two);
    ferry_free(cs->three);
    ferry_free(cs->four);
    cs->two = cs->three = cs->four = NULL;
}

bool ferry__my_cs_needs(const struct ferry_my_cs *cs, enum ferry_my_cs_part part)
{
    if (cs->kind != FERRY_MY_CS_TABLE) return false;
    switch (part) {
    case FERRY_MY_CS_ONE: return true;
    case FERRY_MY_CS_TWO: return cs->two != NULL;
    case FERRY_MY_CS_THREE: return cs->three != NULL;
    case FERRY_MY_CS_FOUR: return cs->four != NULL;
    }
    return false;
}

uint32_t ferry__my_cs_count(enum ferry_my_cs_part part)
{
    static const uint32_t n[] = {256, TWO_N, THREE_N, FOUR_N};
    return n[part];
}

const char *ferry__my_cs_bytes_sql(enum ferry_my_cs_part part)
{
    static const char *const sql[] = {
        "CHAR(i)",
        "CHAR(128 + i DIV 256, i MOD 256)",
        "CHAR(143, 161 + i DIV 94, 161 + i MOD 94)",
        "CHAR(129 + i DIV 12600, 48 + i DIV 1260 MOD 10, 129 + i DIV 10 MOD 126, 48 + i MOD 10)",
    };
    return sql[part];
}

/* The code point of utf8[0..n) when it is exactly one well-formed character, else NONE. */
static uint32_t one_char(const uint8_t *u, size_t n)
{
    if (n == 0) return FERRY_MY_CS_NONE;
    size_t len = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
    if (len != n || u[0] > 0xf4) return FERRY_MY_CS_NONE;
    uint32_t cp = len == 1 ? u[0] : (uint32_t)(u[0] & (0x7f >> len));
    for (size_t k = 1; k < len; k++) {
        if ((u[k] & 0xc0) != 0x80) return FERRY_MY_CS_NONE;
        cp = cp << 6 | (u[k] & 0x3f);
    }
    return cp;
}

void ferry__my_cs_set(struct ferry_my_cs *cs, enum ferry_my_cs_part part, uint32_t i,
                      const uint8_t *utf8, size_t n)
{
    uint32_t cp = one_char(utf8, n);
    if (cp == '?' && !(part == FERRY_MY_CS_ONE && i == '?')) cp = FERRY_MY_CS_NONE;
    uint32_t *t = part == FERRY_MY_CS_ONE     ? cs->one
                  : part == FERRY_MY_CS_TWO   ? cs->two
                  : part == FERRY_MY_CS_THREE ? cs->three
                                              : cs->four;
    if (t != NULL && i < ferry__my_cs_count(part)) t[i] = cp;
}

void ferry__my_put_utf8(struct ferry_buf *b, uint32_t cp)
{
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp, n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3f)), n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f)), n = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (uint8_t)(0x80 | (cp & 0x3f)), n = 4;
    }
    ferry_buf_append(b, u, n);
}

/* gb18030's four-byte sequence at p (4 bytes there), or NONE. */
static uint32_t gb_four(const struct ferry_my_cs *cs, const uint8_t *p)
{
    if (p[0] < 0x81 || p[0] > 0xfe || p[2] < 0x81 || p[2] > 0xfe || p[3] < 0x30 || p[3] > 0x39)
        return FERRY_MY_CS_NONE;
    uint32_t lin = (((uint32_t)(p[0] - 0x81) * 10 + (p[1] - 0x30)) * 126 + (p[2] - 0x81)) * 10 +
                   (p[3] - 0x30);
    if (lin < FOUR_N) return cs->four[lin];
    if (lin >= FOUR_SUPP && lin - FOUR_SUPP <= 0x10ffff - 0x10000) return 0x10000 + lin - FOUR_SUPP;
    return FERRY_MY_CS_NONE;
}

/* One character of a table set at p[0..n): its code point and length, NONE when undefined. */
static uint32_t table_char(const struct ferry_my_cs *cs, const uint8_t *p, size_t n, size_t *len)
{
    *len = 1;
    if (cs->one[p[0]] != FERRY_MY_CS_NONE || cs->two == NULL || p[0] < 0x80 || n < 2)
        return cs->one[p[0]];
    if (cs->four != NULL && p[1] >= 0x30 && p[1] <= 0x39) {
        if (n < 4) return FERRY_MY_CS_NONE;
        *len = 4;
        return gb_four(cs, p);
    }
    if (cs->three != NULL && p[0] == 0x8f) {
        if (n < 3 || p[1] < 0xa1 || p[1] > 0xfe || p[2] < 0xa1 || p[2] > 0xfe)
            return FERRY_MY_CS_NONE;
        *len = 3;
        return cs->three[(p[1] - 0xa1) * 94u + (p[2] - 0xa1)];
    }
    *len = 2;
    return cs->two[(p[0] - 0x80) * 256u + p[1]];
}

/* One character of ucs2/utf16/utf16le/utf32 at p[0..n), as table_char. */
static uint32_t unicode_char(enum ferry_my_cs_kind k, const uint8_t *p, size_t n, size_t *len)
{
    if (k == FERRY_MY_CS_UTF32) {
        *len = 4;
        if (n < 4) return FERRY_MY_CS_NONE;
        uint32_t cp = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        return cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000) ? FERRY_MY_CS_NONE : cp;
    }
    *len = 2;
    if (n < 2) return FERRY_MY_CS_NONE;
    bool le = k == FERRY_MY_CS_UTF16LE;
    uint32_t u = le ? (uint32_t)p[1] << 8 | p[0] : (uint32_t)p[0] << 8 | p[1];
    if (u < 0xd800 || u >= 0xe000) return u;
    if (k == FERRY_MY_CS_UCS2 || u >= 0xdc00 || n < 4) return FERRY_MY_CS_NONE;
    uint32_t lo = le ? (uint32_t)p[3] << 8 | p[2] : (uint32_t)p[2] << 8 | p[3];
    if (lo < 0xdc00 || lo >= 0xe000) return FERRY_MY_CS_NONE;
    *len = 4;
    return 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
}

int ferry__my_cs_to_utf8(const struct ferry_my_cs *cs, const uint8_t *p, size_t n,
                         struct ferry_buf *out, size_t *bad)
{
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = cs->kind == FERRY_MY_CS_TABLE ? table_char(cs, p + i, n - i, &len)
                                                    : unicode_char(cs->kind, p + i, n - i, &len);
        if (cp == FERRY_MY_CS_NONE) {
            *bad = i;
            return FERRY_EINVAL;
        }
        ferry__my_put_utf8(out, cp);
        i += len;
    }
    return ferry_buf_failed(out) ? FERRY_ENOMEM : FERRY_OK;
}
