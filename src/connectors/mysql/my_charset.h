/* connectors/mysql/my_charset.h - column character sets other than UTF-8 in the binary log
 * (a row image holds a column's bytes in its own set) converted to UTF-8 exactly as the
 * server converts them.
 *
 * Two kinds. ucs2, utf16, utf16le and utf32 are converted by their definitions (a lone
 * surrogate, an odd length, a code point over U+10FFFF: undefined). Every other set is a
 * table filled from the server's own conversion (my_source.c runs the queries, this file
 * says what to ask and keeps the answers): `one` for each byte alone, and for multi-byte
 * sets `two` (a lead byte 0x80..0xff and any trail byte: gbk, big5, sjis, cp932, euckr,
 * gb2312, ujis's 0x8e), `three` (ujis/eucjpms: 0x8f and two bytes 0xa1..0xfe, JIS X 0212)
 * and `four` (gb18030's four-byte sequences in the BMP, by their linear index; the
 * supplementary planes, linear from 0x90308130 = U+10000, by the standard's arithmetic).
 * A sequence is taken by its lead byte as the server's own scanner does: a byte defined
 * alone is one character; else gb18030's second byte 0x30..0x39 makes four bytes, ujis's
 * 0x8f three, any other lead two. Undefined (FERRY_MY_CS_NONE): what the server would print
 * as '?'; the decoder stops there and names the offset rather than guessing.
 *
 * Pure: no I/O. Memory: a multi-byte table set holds 128 KiB (`two`), ujis/eucjpms 35 KiB
 * more, gb18030 154 KiB more. Tested by tests/unit/test_my_charset.c (hand-built tables and
 * bytes) and e2e/mysql_charsets (every set against MariaDB's own conversion). */
#ifndef FERRY_MY_CHARSET_H
#define FERRY_MY_CHARSET_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

#define FERRY_MY_CS_NONE UINT32_MAX /* a sequence the set does not define */

enum ferry_my_cs_kind {
    FERRY_MY_CS_TABLE = 0,
    FERRY_MY_CS_UCS2,
    FERRY_MY_CS_UTF16,
    FERRY_MY_CS_UTF16LE,
    FERRY_MY_CS_UTF32
};

/* The tables a set's conversion is read into (ferry__my_cs_query says how). */
enum ferry_my_cs_part { FERRY_MY_CS_ONE = 0, FERRY_MY_CS_TWO, FERRY_MY_CS_THREE, FERRY_MY_CS_FOUR };

struct ferry_my_cs {
    enum ferry_my_cs_kind kind;
    uint32_t one[256]; /* code point of each byte alone */
    uint32_t *two;     /* [(lead - 0x80) * 256 + trail], NULL for a single-byte set */
    uint32_t *three;   /* [(b2 - 0xa1) * 94 + b3 - 0xa1] after 0x8f; NULL: none */
    uint32_t *four;    /* [linear index] of gb18030's BMP four-byte sequences; NULL: none */
};

/* The kind of set `name` (lower case, as information_schema names it). */
enum ferry_my_cs_kind ferry__my_cs_kind(const char *name);

/* Sets cs up for a set of `kind` whose longest character is maxlen bytes (the server's
 * MAXLEN): tables allocated for the parts that set needs, every entry FERRY_MY_CS_NONE.
 * FERRY_ENOMEM when out of memory (cs is then released). */
int ferry__my_cs_init(struct ferry_my_cs *cs, const char *name, enum ferry_my_cs_kind kind,
                      int maxlen);
void ferry__my_cs_release(struct ferry_my_cs *cs);

/* Whether cs needs `part` read from the server, and then how many entries it has and the
 * SQL expression of entry `i`'s bytes (a column named i), for
 * CONVERT(CONVERT(expr USING set) USING utf8mb4). */
bool ferry__my_cs_needs(const struct ferry_my_cs *cs, enum ferry_my_cs_part part);
uint32_t ferry__my_cs_count(enum ferry_my_cs_part part);
const char *ferry__my_cs_bytes_sql(enum ferry_my_cs_part part);

/* Stores the server's conversion of entry i of part: `utf8` (n bytes) is kept only when it
 * is exactly one character other than '?' (or the byte '?' itself); anything else (NULL,
 * '?', two characters) leaves the entry undefined. */
void ferry__my_cs_set(struct ferry_my_cs *cs, enum ferry_my_cs_part part, uint32_t i,
                      const uint8_t *utf8, size_t n);

/* Appends p[0..n) as UTF-8 to out. FERRY_OK; FERRY_EINVAL: a sequence the set does not
 * define at byte *bad of p (nothing of it appended); FERRY_ENOMEM from the buffer. */
int ferry__my_cs_to_utf8(const struct ferry_my_cs *cs, const uint8_t *p, size_t n,
                         struct ferry_buf *out, size_t *bad);

/* Appends code point cp (<= U+10FFFF) as UTF-8. */
void ferry__my_put_utf8(struct ferry_buf *b, uint32_t cp);

#endif
