/* formats/text_read.c - the CSV (RFC 4180) and JSON Lines (RFC 8259 values, one
 * object per line) record readers of the files source.
 *
 * Owns a window on the decompressed input (grown to the longest record, never per record),
 * the text buffer every field of the current record is copied into (NUL-terminated, quotes
 * and escapes resolved) and the field array. A record is parsed from its first byte; when
 * the window ends mid-record the window is refilled and the record parsed again, so the
 * parsers are plain loops over bytes without saved states. Calls the input stream and
 * libc; called by the files source (files_source.c) and the unit tests.
 *
 * Lines and columns in errors are 1-based; a column counts characters (UTF-8 sequences),
 * not bytes. Every record is checked to be UTF-8 before its fields are handed out. A
 * UTF-8 byte order mark at the start of a file is skipped (it counts in byte offsets). */
#include <inttypes.h>
#include <string.h>
#include "formats/text.h"

#define WINDOW_MIN (64 * 1024)
#define WINDOW_MAX ((size_t)1 << 30) /* a record longer than this is refused */

enum { P_OK = 0, P_MORE = 1, P_EOF = 2, P_ERR = 3 };

struct ferry__files_reader {
    enum ferry__files_fmt fmt;
    struct ferry__files_csv_opts csv;
    size_t null_len;
    struct ferry__files_input *in;
    const char *name;
    uint8_t *buf;
    size_t cap, start, len; /* window; the current record starts at buf[start] */
    int64_t base;           /* stream offset of buf[0] */
    int64_t line;           /* line of buf[start] */
    bool eof, bom_done;
    struct ferry_buf text;
    struct ferry__files_field *fields;
    int n_fields, cap_fields;
    const char *const *keys;
    int n_keys;
    int64_t rec_line; /* line where the last record started */
    /* error: where the scan stopped, to resynchronise at the next line */
    size_t err_at;
};

struct ferry__files_reader *ferry__files_reader_new(enum ferry__files_fmt fmt,
                                                    const struct ferry__files_csv_opts *csv,
                                                    struct ferry__files_input *in, const char *name)
{
    struct ferry__files_reader *r = ferry_calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->fmt = fmt;
    if (csv) r->csv = *csv;
    if (r->csv.delimiter == 0) r->csv.delimiter = ',';
    if (r->csv.null_marker == NULL) r->csv.null_marker = "";
    r->null_len = strlen(r->csv.null_marker);
    r->in = in;
    r->name = name;
    r->line = 1;
    r->cap = WINDOW_MIN;
    r->buf = ferry_malloc(r->cap);
    ferry_buf_init(&r->text, 0);
    if (r->buf == NULL) {
        ferry__files_reader_free(r);
        return NULL;
    }
    return r;
}

void ferry__files_reader_free(struct ferry__files_reader *r)
{
    if (r == NULL) return;
    ferry_free(r->buf);
    ferry_free(r->fields);
    ferry_buf_release(&r->text);
    ferry_free(r);
}

void ferry__files_reader_set_keys(struct ferry__files_reader *r, const char *const *keys, int n)
{
    r->keys = keys;
    r->n_keys = n;
}

int ferry__files_reader_nfields(const struct ferry__files_reader *r)
{
    return r->n_fields;
}

const struct ferry__files_field *ferry__files_reader_field(const struct ferry__files_reader *r,
                                                           int i)
{
    return &r->fields[i];
}

const char *ferry__files_reader_text(const struct ferry__files_reader *r,
                                     const struct ferry__files_field *f)
{
    return r->text.data + f->off;
}

int64_t ferry__files_reader_offset(const struct ferry__files_reader *r)
{
    return r->base + (int64_t)r->start;
}

int64_t ferry__files_reader_line(const struct ferry__files_reader *r)
{
    return r->rec_line;
}

/* ---- window ---------------------------------------------------------------------------- */

/* More bytes after buf[len]: drops what lies before the record, grows when full. */
static int refill(struct ferry__files_reader *r, struct ferry_error *err)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->base += (int64_t)r->start;
        r->len -= r->start;
        r->start = 0;
    }
    if (r->len == r->cap) {
        if (r->cap >= WINDOW_MAX)
            return ferry_error_set(err, FERRY_EINVAL, "files",
                                   "%s:%" PRId64 ": a record longer than 1 GiB", r->name, r->line);
        uint8_t *nb = ferry_realloc(r->buf, r->cap * 2);
        if (nb == NULL) return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory");
        r->buf = nb;
        r->cap *= 2;
    }
    size_t n = 0;
    int rc = ferry__files_input_read(r->in, r->buf + r->len, r->cap - r->len, &n, err);
    /* A broken stream (truncated or corrupt gzip/zstd) is not a bad record: as FERRY_EINVAL,
     * `on_error: skip` skipped it and read again, forever (found by tests/fuzz/fuzz_csv). */
    if (rc == FERRY_EINVAL) {
        rc = FERRY_EIO;
        if (err != NULL) err->code = rc;
    }
    /* Not `return ferry_error_prefix(...)`: with err == NULL (resync) that is FERRY_OK, and
     * resync read the failing stream again, forever (tests/fuzz/fuzz_csv). */
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "%s", r->name);
        return rc;
    }
    if (n == 0) r->eof = true;
    r->len += n;
    if (!r->bom_done && (r->len >= 3 || r->eof)) {
        r->bom_done = true;
        if (r->base == 0 && r->len >= 3 && r->buf[0] == 0xEF && r->buf[1] == 0xBB &&
            r->buf[2] == 0xBF)
            r->start = 3;
    }
    return FERRY_OK;
}

/* ---- helpers --------------------------------------------------------------------------- */

/* Index of the first byte of p[0..n) that does not belong to a valid UTF-8 sequence
 * (overlongs, surrogates and values above U+10FFFF are invalid), or n. */
static size_t utf8_check(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t min, cp;
        if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return i;
        }
        if (i + k >= n) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

/* Line and character column of buf[at], counting from the record start. */
static void where(const struct ferry__files_reader *r, size_t at, int64_t *line, int64_t *col)
{
    int64_t l = r->line, c = 1;
    for (size_t i = r->start; i < at && i < r->len; i++) {
        if (r->buf[i] == '\n') {
            l++;
            c = 1;
        } else if ((r->buf[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int parse_error(struct ferry__files_reader *r, size_t at, struct ferry_error *err,
                       const char *what)
{
    int64_t l, c;
    where(r, at, &l, &c);
    r->err_at = at;
    ferry_error_set(err, FERRY_EINVAL, "files", "%s:%" PRId64 ":%" PRId64 ": %s", r->name, l, c,
                    what);
    return P_ERR;
}

static int text_put(struct ferry__files_reader *r, const void *p, size_t n)
{
    return ferry_buf_append(&r->text, p, n);
}

static struct ferry__files_field *new_field(struct ferry__files_reader *r)
{
    if (r->n_fields == r->cap_fields) {
        int nc = r->cap_fields ? r->cap_fields * 2 : 16;
        struct ferry__files_field *nf = ferry_realloc(r->fields, sizeof *nf * (size_t)nc);
        if (nf == NULL) return NULL;
        r->fields = nf;
        r->cap_fields = nc;
    }
    struct ferry__files_field *f = &r->fields[r->n_fields++];
    memset(f, 0, sizeof *f);
    return f;
}

static void begin_record(struct ferry__files_reader *r)
{
    r->n_fields = 0;
    ferry_buf_reset(&r->text);
}

/* ---- CSV --------------------------------------------------------------------------------- */

/* One record from buf[start]; *end gets the index after it (after its line break). */
static int csv_record(struct ferry__files_reader *r, size_t *end, int64_t *lines,
                      struct ferry_error *err)
{
    const uint8_t *b = r->buf;
    const size_t n = r->len;
    const char d = r->csv.delimiter, q = r->csv.quote, e = r->csv.escape;
    size_t i = r->start;
    int64_t line = r->line, col = 1;
    begin_record(r);
    if (i == n) return r->eof ? P_EOF : P_MORE;
    for (;;) {
        struct ferry__files_field *f = new_field(r);
        if (f == NULL) return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory"), P_ERR;
        f->off = r->text.len;
        f->line = line;
        f->column = col;
        f->kind = FILES_KIND_STRING;
        bool quoted = false;
        if (q != 0 && i < n && b[i] == (uint8_t)q) {
            quoted = true;
            f->quoted = true;
            size_t open_at = i;
            i++;
            col++;
            for (;;) {
                if (i == n) {
                    if (!r->eof) return P_MORE;
                    parse_error(r, open_at, err, "a quoted field is not closed");
                    r->err_at = n; /* the rest of the file is inside the quotes */
                    return P_ERR;
                }
                uint8_t c = b[i];
                if (e != 0 && e != q && c == (uint8_t)e) {
                    if (i + 1 == n) {
                        if (!r->eof) return P_MORE;
                        return parse_error(r, i, err, "an escape character ends the file");
                    }
                    if (text_put(r, b + i + 1, 1) != FERRY_OK) goto nomem;
                    if (b[i + 1] == '\n') {
                        line++;
                        col = 1;
                    } else {
                        col += 1 + ((b[i + 1] & 0xC0) != 0x80);
                    }
                    i += 2;
                    continue;
                }
                if (c == (uint8_t)q) {
                    if (i + 1 == n && !r->eof) return P_MORE;
                    if (i + 1 < n && b[i + 1] == (uint8_t)q) {
                        if (text_put(r, &c, 1) != FERRY_OK) goto nomem;
                        i += 2;
                        col += 2;
                        continue;
                    }
                    i++;
                    col++;
                    break;
                }
                if (text_put(r, &c, 1) != FERRY_OK) goto nomem;
                if (c == '\n') {
                    line++;
                    col = 1;
                } else if ((c & 0xC0) != 0x80) {
                    col++;
                }
                i++;
            }
        } else {
            size_t s = i;
            while (i < n && b[i] != (uint8_t)d && b[i] != '\n' && b[i] != '\r') {
                if (q != 0 && b[i] == (uint8_t)q)
                    return parse_error(r, i, err, "a quote inside an unquoted field");
                if ((b[i] & 0xC0) != 0x80) col++;
                i++;
            }
            if (i == n && !r->eof) return P_MORE;
            if (i < n && b[i] == '\r' && i + 1 == n && !r->eof) return P_MORE;
            if (i < n && b[i] == '\r' && i + 1 < n && b[i + 1] != '\n')
                return parse_error(r, i, err, "a carriage return inside an unquoted field");
            if (text_put(r, b + s, i - s) != FERRY_OK) goto nomem;
        }
        f->len = r->text.len - f->off;
        if (text_put(r, "", 1) != FERRY_OK) goto nomem;
        if (!quoted && f->len == r->null_len &&
            memcmp(r->text.data + f->off, r->csv.null_marker, r->null_len) == 0)
            f->kind = FILES_KIND_NULL;
        /* What ends the field. */
        if (i == n) break; /* end of the file (r->eof) */
        if (b[i] == (uint8_t)d) {
            i++;
            col++;
            continue;
        }
        if (b[i] == '\r') {
            if (i + 1 == n) {
                if (!r->eof) return P_MORE;
                i++;
                break;
            }
            if (b[i + 1] == '\n') {
                i += 2;
                line++;
                break;
            }
            return parse_error(r, i, err, "a carriage return after a quoted field");
        }
        if (b[i] == '\n') {
            i++;
            line++;
            break;
        }
        return parse_error(r, i, err, "unexpected character after a closing quote");
    }
    *end = i;
    *lines = line - r->line;
    return P_OK;
nomem:
    ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory");
    r->err_at = r->len;
    return P_ERR;
}

/* ---- JSON Lines ---------------------------------------------------------------------------- */

struct jcur {
    struct ferry__files_reader *r;
    const uint8_t *b;
    size_t i, end;
    size_t col_i; /* incremental column counting */
    int64_t col;
    struct ferry_error *err;
};

static int64_t jcol(struct jcur *j, size_t at)
{
    for (; j->col_i < at; j->col_i++)
        if ((j->b[j->col_i] & 0xC0) != 0x80) j->col++;
    return j->col;
}

static void jws(struct jcur *j)
{
    while (j->i < j->end &&
           (j->b[j->i] == ' ' || j->b[j->i] == '\t' || j->b[j->i] == '\r' || j->b[j->i] == '\n'))
        j->i++;
}

static int jerr(struct jcur *j, const char *what)
{
    return parse_error(j->r, j->i, j->err, what);
}

static int hex4(const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static int put_utf8(struct ferry__files_reader *r, uint32_t cp)
{
    uint8_t o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (uint8_t)(0xF0 | (cp >> 18));
        o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return text_put(r, o, n);
}

/* A JSON string at j->i (the opening quote) into the text buffer, unescaped. */
static int jstring(struct jcur *j)
{
    const uint8_t *b = j->b;
    j->i++;
    for (;;) {
        size_t s = j->i;
        while (j->i < j->end && b[j->i] != '"' && b[j->i] != '\\' && b[j->i] >= 0x20)
            j->i++;
        if (text_put(j->r, b + s, j->i - s) != FERRY_OK) goto nomem;
        if (j->i == j->end) return jerr(j, "a string is not closed");
        uint8_t c = b[j->i];
        if (c == '"') {
            j->i++;
            return P_OK;
        }
        if (c < 0x20) return jerr(j, "a control character inside a string (escape it)");
        if (j->i + 1 == j->end) return jerr(j, "a string is not closed");
        uint8_t x = b[j->i + 1];
        const char *rep = NULL;
        switch (x) {
        case '"':
            rep = "\"";
            break;
        case '\\':
            rep = "\\";
            break;
        case '/':
            rep = "/";
            break;
        case 'b':
            rep = "\b";
            break;
        case 'f':
            rep = "\f";
            break;
        case 'n':
            rep = "\n";
            break;
        case 'r':
            rep = "\r";
            break;
        case 't':
            rep = "\t";
            break;
        case 'u':
            break;
        default:
            return jerr(j, "an invalid escape in a string");
        }
        if (rep) {
            if (text_put(j->r, rep, 1) != FERRY_OK) goto nomem;
            j->i += 2;
            continue;
        }
        uint32_t cp;
        if (j->i + 6 > j->end || hex4(b + j->i + 2, &cp) != 0)
            return jerr(j, "an invalid \\u escape in a string");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (j->i + 12 > j->end || b[j->i + 6] != '\\' || b[j->i + 7] != 'u' ||
                hex4(b + j->i + 8, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                return jerr(j, "an unpaired surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            j->i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return jerr(j, "an unpaired surrogate in a \\u escape");
        }
        if (put_utf8(j->r, cp) != FERRY_OK) goto nomem;
        j->i += 6;
    }
nomem:
    ferry_error_set(j->err, FERRY_ENOMEM, "files", "out of memory");
    return P_ERR;
}

static bool jdigit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

/* RFC 8259 number grammar. */
static int jnumber(struct jcur *j)
{
    const uint8_t *b = j->b;
    size_t s = j->i;
    if (j->i < j->end && b[j->i] == '-') j->i++;
    if (j->i == j->end || !jdigit(b[j->i])) return jerr(j, "an invalid number");
    if (b[j->i] == '0')
        j->i++;
    else
        while (j->i < j->end && jdigit(b[j->i]))
            j->i++;
    if (j->i < j->end && b[j->i] == '.') {
        j->i++;
        if (j->i == j->end || !jdigit(b[j->i])) return jerr(j, "an invalid number");
        while (j->i < j->end && jdigit(b[j->i]))
            j->i++;
    }
    if (j->i < j->end && (b[j->i] == 'e' || b[j->i] == 'E')) {
        j->i++;
        if (j->i < j->end && (b[j->i] == '+' || b[j->i] == '-')) j->i++;
        if (j->i == j->end || !jdigit(b[j->i])) return jerr(j, "an invalid number");
        while (j->i < j->end && jdigit(b[j->i]))
            j->i++;
    }
    if (text_put(j->r, b + s, j->i - s) != FERRY_OK) {
        ferry_error_set(j->err, FERRY_ENOMEM, "files", "out of memory");
        return P_ERR;
    }
    return P_OK;
}

static bool jword(struct jcur *j, const char *w)
{
    size_t n = strlen(w);
    if (j->i + n > j->end || memcmp(j->b + j->i, w, n) != 0) return false;
    j->i += n;
    return true;
}

static int jvalue(struct jcur *j, enum ferry__files_kind *kind, int depth);

/* An object or array, checked, its text kept as written. */
static int jnested(struct jcur *j, int depth)
{
    if (depth > 64) return jerr(j, "values nested deeper than 64 levels");
    uint8_t close = j->b[j->i] == '{' ? '}' : ']';
    bool obj = close == '}';
    size_t mark = j->r->text.len;
    j->i++;
    jws(j);
    if (j->i < j->end && j->b[j->i] == close) {
        j->i++;
        return P_OK;
    }
    for (;;) {
        enum ferry__files_kind k;
        if (obj) {
            jws(j);
            if (j->i == j->end || j->b[j->i] != '"')
                return jerr(j, "an object key must be a string");
            int rc = jstring(j);
            if (rc != P_OK) return rc;
            jws(j);
            if (j->i == j->end || j->b[j->i] != ':') return jerr(j, "a ':' is missing after a key");
            j->i++;
        }
        int rc = jvalue(j, &k, depth + 1);
        if (rc != P_OK) return rc;
        j->r->text.len = mark; /* the caller keeps the raw text instead */
        jws(j);
        if (j->i < j->end && j->b[j->i] == ',') {
            j->i++;
            continue;
        }
        if (j->i < j->end && j->b[j->i] == close) {
            j->i++;
            return P_OK;
        }
        return jerr(j, obj ? "a ',' or '}' is missing in an object"
                           : "a ',' or ']' is missing in an array");
    }
}

static int jvalue(struct jcur *j, enum ferry__files_kind *kind, int depth)
{
    jws(j);
    if (j->i == j->end) return jerr(j, "a value is missing");
    uint8_t c = j->b[j->i];
    if (c == '"') {
        *kind = FILES_KIND_STRING;
        return jstring(j);
    }
    if (c == '-' || jdigit(c)) {
        *kind = FILES_KIND_NUMBER;
        return jnumber(j);
    }
    if (c == '{' || c == '[') {
        size_t s = j->i;
        int rc = jnested(j, depth);
        if (rc != P_OK) return rc;
        *kind = FILES_KIND_NESTED;
        if (text_put(j->r, j->b + s, j->i - s) != FERRY_OK) {
            ferry_error_set(j->err, FERRY_ENOMEM, "files", "out of memory");
            return P_ERR;
        }
        return P_OK;
    }
    if (jword(j, "true")) {
        *kind = FILES_KIND_BOOL;
        return text_put(j->r, "true", 4) == FERRY_OK ? P_OK : P_ERR;
    }
    if (jword(j, "false")) {
        *kind = FILES_KIND_BOOL;
        return text_put(j->r, "false", 5) == FERRY_OK ? P_OK : P_ERR;
    }
    if (jword(j, "null")) {
        *kind = FILES_KIND_NULL;
        return P_OK;
    }
    return jerr(j, "an invalid value");
}

static int key_index(const struct ferry__files_reader *r, const char *k, size_t n)
{
    for (int i = 0; i < r->n_keys; i++)
        if (strlen(r->keys[i]) == n && memcmp(r->keys[i], k, n) == 0) return i;
    return -1;
}

/* One object spanning buf[start..eol). */
static int jsonl_object(struct ferry__files_reader *r, size_t eol, struct ferry_error *err)
{
    struct jcur j = {r, r->buf, r->start, eol, r->start, 1, err};
    begin_record(r);
    if (r->n_keys > 0) {
        for (int k = 0; k < r->n_keys; k++) {
            struct ferry__files_field *f = new_field(r);
            if (f == NULL)
                return ferry_error_set(err, FERRY_ENOMEM, "files", "out of memory"), P_ERR;
            f->kind = FILES_KIND_NULL;
            f->line = r->line;
            f->column = 1;
        }
        if (text_put(r, "", 1) != FERRY_OK) return P_ERR; /* off 0: the empty text */
    }
    jws(&j);
    if (j.i == j.end || r->buf[j.i] != '{') return jerr(&j, "a line must hold one JSON object");
    j.i++;
    jws(&j);
    if (j.i < j.end && r->buf[j.i] == '}') {
        j.i++;
    } else {
        for (;;) {
            jws(&j);
            if (j.i == j.end || r->buf[j.i] != '"')
                return jerr(&j, "an object key must be a string");
            size_t key_off = r->text.len;
            int64_t key_col = jcol(&j, j.i);
            size_t key_start = j.i;
            int rc = jstring(&j);
            if (rc != P_OK) return rc;
            size_t key_len = r->text.len - key_off;
            if (memchr(r->text.data + key_off, '\0', key_len) != NULL) {
                j.i = key_start;
                return jerr(&j, "a key holds \\u0000, which no column name can hold");
            }
            jws(&j);
            if (j.i == j.end || r->buf[j.i] != ':') return jerr(&j, "a ':' is missing after a key");
            j.i++;
            jws(&j);
            int k = -1;
            if (r->n_keys > 0) {
                k = key_index(r, r->text.data + key_off, key_len);
                r->text.len = key_off;
            } else {
                struct ferry__files_field *kf = new_field(r);
                if (kf == NULL || text_put(r, "", 1) != FERRY_OK) return P_ERR;
                kf->off = key_off;
                kf->len = key_len;
                kf->kind = FILES_KIND_STRING;
                kf->line = r->line;
                kf->column = key_col;
            }
            size_t val_off = r->text.len;
            int64_t val_col = jcol(&j, j.i);
            enum ferry__files_kind kind;
            rc = jvalue(&j, &kind, 0);
            if (rc != P_OK) return rc;
            size_t val_len = r->text.len - val_off;
            if (text_put(r, "", 1) != FERRY_OK) return P_ERR;
            struct ferry__files_field *f = NULL;
            if (r->n_keys == 0) {
                f = new_field(r);
                if (f == NULL) return P_ERR;
            } else if (k >= 0) {
                f = &r->fields[k];
            } else {
                r->text.len = val_off; /* a key nobody asked for */
            }
            if (f != NULL) {
                f->off = val_off;
                f->len = val_len;
                f->kind = kind;
                f->line = r->line;
                f->column = val_col;
            }
            jws(&j);
            if (j.i < j.end && r->buf[j.i] == ',') {
                j.i++;
                continue;
            }
            if (j.i < j.end && r->buf[j.i] == '}') {
                j.i++;
                break;
            }
            return jerr(&j, "a ',' or '}' is missing in the object");
        }
    }
    jws(&j);
    if (j.i != j.end) return jerr(&j, "text after the object (one object per line)");
    return P_OK;
}

/* ---- next ------------------------------------------------------------------------------ */

/* After an error: stand at the line after the one where the scan stopped. */
static int resync(struct ferry__files_reader *r, struct ferry_error *err)
{
    size_t i = r->err_at;
    for (;;) {
        while (i < r->len && r->buf[i] != '\n')
            i++;
        if (i < r->len) {
            i++;
            break;
        }
        if (r->eof) break;
        size_t keep = i - r->start;
        int rc = refill(r, err);
        if (rc != FERRY_OK) return rc;
        i = r->start + keep;
    }
    for (size_t k = r->start; k < i; k++)
        if (r->buf[k] == '\n') r->line++;
    r->start = i;
    return FERRY_OK;
}

static int next_csv(struct ferry__files_reader *r, bool *eof, struct ferry_error *err)
{
    for (;;) {
        size_t end = 0;
        int64_t lines = 0;
        int p = csv_record(r, &end, &lines, err);
        if (p == P_MORE) {
            int rc = refill(r, err);
            if (rc != FERRY_OK) return rc;
            continue;
        }
        if (p == P_EOF) {
            *eof = true;
            return FERRY_OK;
        }
        r->rec_line = r->line;
        if (p == P_ERR) {
            int code = err ? err->code : FERRY_EINVAL;
            int rc = resync(r, NULL);
            return rc != FERRY_OK ? rc : code;
        }
        size_t bad = utf8_check(r->buf + r->start, end - r->start);
        if (bad < end - r->start) {
            parse_error(r, r->start + bad, err, "invalid UTF-8");
            r->line += lines;
            r->start = end;
            return FERRY_EINVAL;
        }
        r->line += lines;
        r->start = end;
        return FERRY_OK;
    }
}

static int next_jsonl(struct ferry__files_reader *r, bool *eof, struct ferry_error *err)
{
    for (;;) {
        uint8_t *nl = r->start < r->len ? memchr(r->buf + r->start, '\n', r->len - r->start) : NULL;
        if (nl == NULL && !r->eof) {
            int rc = refill(r, err);
            if (rc != FERRY_OK) return rc;
            continue;
        }
        if (nl == NULL && r->start == r->len) {
            *eof = true;
            return FERRY_OK;
        }
        size_t eol = nl ? (size_t)(nl - r->buf) : r->len;
        size_t next = nl ? eol + 1 : eol;
        /* Blank lines are not records. */
        size_t k = r->start;
        while (k < eol && (r->buf[k] == ' ' || r->buf[k] == '\t' || r->buf[k] == '\r'))
            k++;
        r->rec_line = r->line;
        if (k == eol) {
            r->start = next;
            r->line++;
            continue;
        }
        size_t bad = utf8_check(r->buf + r->start, eol - r->start);
        int p = bad < eol - r->start ? parse_error(r, r->start + bad, err, "invalid UTF-8")
                                     : jsonl_object(r, eol, err);
        r->start = next;
        r->line++;
        if (p != P_OK) return err ? err->code : FERRY_EINVAL;
        return FERRY_OK;
    }
}

int ferry__files_reader_next(struct ferry__files_reader *r, bool *eof, struct ferry_error *err)
{
    *eof = false;
    if (!r->bom_done && r->len < 3 && !r->eof) {
        int rc = refill(r, err);
        if (rc != FERRY_OK) return rc;
    }
    return r->fmt == FILES_FMT_CSV ? next_csv(r, eof, err) : next_jsonl(r, eof, err);
}

int ferry__files_reader_skip_to(struct ferry__files_reader *r, int64_t n, struct ferry_error *err)
{
    while (r->base + (int64_t)r->start < n) {
        if (r->start == r->len) {
            if (r->eof)
                return ferry_error_set(err, FERRY_EINVAL, "files",
                                       "%s: the saved position %" PRId64
                                       " lies beyond the end of the file",
                                       r->name, n);
            int rc = refill(r, err);
            if (rc != FERRY_OK) return rc;
            continue;
        }
        size_t want = (size_t)(n - (r->base + (int64_t)r->start));
        size_t have = r->len - r->start;
        size_t k = want < have ? want : have;
        for (size_t i = r->start; i < r->start + k; i++)
            if (r->buf[i] == '\n') r->line++;
        r->start += k;
    }
    return FERRY_OK;
}
