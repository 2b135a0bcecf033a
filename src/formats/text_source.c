/* formats/text_source.c - CSV and JSON Lines as a source: options, schema inference
 * and the record loop, shared by the files source (local files) and the s3 source (objects
 * streamed by ranged GETs). Both hand over a ferry__files_input (formats/input.c: plain,
 * gzip or zstd, recognised by magic bytes) and a name used in every error.
 *
 * Schema: declared on the resource (`schema: {col: type}`, file columns matched by header
 * name, or by position without a header) or inferred from the first `sample_rows` (1000)
 * records of the first file with this rule, per column over its non-null values:
 *   bool when every value is true/false (any case); int64 when every value is an integer
 *   that fits; float64 when every value is a number; date32 when every value is a date
 *   (YYYY-MM-DD); timestamptz when every value is an ISO 8601 timestamp and one carries an
 *   offset or Z, timestamp when none does; JSON Lines only: json when every value is an
 *   object or array, and numbers/bools only from JSON numbers/bools; else utf8. A column
 *   without a non-null value in the sample is utf8. Every inferred column is nullable.
 *
 * on_error: fail stops at the first bad record naming file:line:column; skip counts bad
 * records per file (shard) with their first samples (where and why, never the value) and
 * reports them when the file ends (ferry_rw_report_skipped -> resource.rows_skipped). The
 * count of a file is always the whole file's: a resumed file is read again from its start
 * (records before the resume offset are checked and counted, not written), so the report
 * replaces the earlier attempt's instead of adding to it.
 *
 * Owns nothing between calls: each call owns the input it is given and one reader (their
 * buffers are reused for every record: nothing is allocated per row). Calls the reader
 * (text_read.c), the row writer, the text forms of ferry/batch.h. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "formats/text_source.h"
#include "ferry/config.h"
#include "ferry/connector.h"

static const char *const format_words[] = {"csv", "jsonl", "parquet", NULL};
static const char *const on_error_words[] = {"fail", "skip", NULL};
/* `compression:`; but "auto", the names ferry__files_input_kind gives ("none" is its "plain") */
static const char *const compression_words[] = {"auto", "none", "gzip", "zstd", NULL};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "files", "files source: out of memory");
}

const char *ferry__text_format_word(enum ferry__files_fmt f)
{
    return format_words[f];
}

/* ---- options ----------------------------------------------------------------------------- */

static int char_key(struct ferry_cfg *cfg, const char *key, bool allow_empty, char *out,
                    struct ferry_error *err)
{
    const char *v = NULL;
    int rc = ferry_cfg_str(cfg, key, false, &v, err);
    if (rc != FERRY_OK || v == NULL) return rc;
    if (strcmp(v, "\\t") == 0) v = "\t";
    if ((allow_empty && v[0] == '\0')) {
        *out = 0;
        return FERRY_OK;
    }
    if (strlen(v) != 1 || v[0] == '\n' || v[0] == '\r')
        return ferry_cfg_error(err, ferry_cfg_get(cfg, key),
                               "must be one character other than a line break%s",
                               allow_empty ? " (or empty for none)" : "");
    *out = v[0];
    return FERRY_OK;
}

int ferry__text_src_open(struct ferry_cfg *cfg, struct ferry__text_src *out,
                         struct ferry_error *err)
{
    const char *null_marker = "";
    int format = -1, on_error = 0;
    struct ferry__text_src s = {.header = true, .sample_rows = 1000};
    s.csv.delimiter = ',';
    s.csv.quote = '"';
    int rc = FERRY_OK;
    if (ferry_cfg_get(cfg, "format") != NULL)
        rc = ferry_cfg_enum(cfg, "format", false, format_words, &format, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "header", false, &s.header, err);
    if (rc == FERRY_OK) rc = char_key(cfg, "delimiter", false, &s.csv.delimiter, err);
    if (rc == FERRY_OK) rc = char_key(cfg, "quote", true, &s.csv.quote, err);
    if (rc == FERRY_OK) rc = char_key(cfg, "escape", true, &s.csv.escape, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "null", false, &null_marker, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "skip_blank_lines", false, &s.skip_blank, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "on_error", false, on_error_words, &on_error, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "compression", false, compression_words, &s.compression, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_int(cfg, "sample_rows", false, 1, 100000000, &s.sample_rows, err);
    if (rc != FERRY_OK) return rc;
    if (s.csv.delimiter == s.csv.quote)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "quote"), "must differ from the delimiter");
    s.format = format;
    s.skip = on_error == 1;
    s.null_marker = ferry_strdup(null_marker);
    if (s.null_marker == NULL) return nomem(err);
    s.csv.null_marker = s.null_marker;
    *out = s;
    return FERRY_OK;
}

void ferry__text_src_release(struct ferry__text_src *t)
{
    ferry_free(t->null_marker);
    t->null_marker = NULL;
}

/* The resource's declared `schema:` node, or NULL. */
struct ferry_cfg *ferry__text_declared(const struct ferry_resource_spec *spec)
{
    return spec->node ? ferry_cfg_get(spec->node, "schema") : NULL;
}

/* Whether the first n bytes of s end with suffix. */
static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* csv, jsonl or parquet: the configured one, else from the name (a .gz / .zst suffix
 * aside; .parquet is never compressed as a whole). Names of any length (S3 keys: 1024). */
enum ferry__files_fmt ferry__text_format_of(const struct ferry__text_src *s, const char *file)
{
    if (s->format >= 0) return (enum ferry__files_fmt)s->format;
    size_t n = strlen(file);
    if (ends_with(file, n, ".parquet")) return FILES_FMT_PARQUET;
    if (ends_with(file, n, ".gz"))
        n -= 3;
    else if (ends_with(file, n, ".zst"))
        n -= 4;
    if (ends_with(file, n, ".jsonl") || ends_with(file, n, ".ndjson") ||
        ends_with(file, n, ".json"))
        return FILES_FMT_JSONL;
    return FILES_FMT_CSV;
}

/* ---- values -------------------------------------------------------------------------------- */

static bool parse_i64(const char *t, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (i < n && (t[i] == '-' || t[i] == '+')) neg = t[i++] == '-';
    if (i == n) return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return false;
        uint64_t d = (uint64_t)(t[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* How a number's text maps without changing it (inference only picks a type every sampled
 * value maps to exactly):
 *   NUM_INT   -?(0|[1-9][0-9]*) within int64, not "-0";
 *   NUM_FLOAT the RFC 8259 number grammar with at most 15 significant digits, finite and
 *             not subnormal in a double (so the double gives back the same decimal value);
 *   NUM_DEC   -?(0|[1-9][0-9]*)(.[0-9]+)? of any length (carried as exact decimal text);
 *   NUM_NONE  anything else: leading zeros ("08123"), a leading '+', an exponent beyond a
 *             double, words. Flags: bit per class, a value can be several. */
enum { NUM_INT = 1, NUM_FLOAT = 2, NUM_DEC = 4 };

static int num_class(const char *t, size_t n)
{
    size_t i = 0, sig = 0;
    bool seen_nonzero = false, frac = false, expo = false;
    if (i < n && t[i] == '-') i++;
    if (i == n || t[i] < '0' || t[i] > '9') return 0;
    if (t[i] == '0' && i + 1 < n && t[i + 1] >= '0' && t[i + 1] <= '9') return 0;
    for (; i < n && t[i] >= '0' && t[i] <= '9'; i++) {
        if (t[i] != '0') seen_nonzero = true;
        if (seen_nonzero) sig++;
    }
    if (i < n && t[i] == '.') {
        frac = true;
        size_t s0 = ++i;
        for (; i < n && t[i] >= '0' && t[i] <= '9'; i++) {
            if (t[i] != '0') seen_nonzero = true;
            if (seen_nonzero) sig++;
        }
        if (i == s0) return 0;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        expo = true;
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-')) i++;
        size_t s0 = i;
        for (; i < n && t[i] >= '0' && t[i] <= '9'; i++)
            ;
        if (i == s0) return 0;
    }
    if (i != n) return 0;
    int c = 0;
    int64_t v;
    bool minus_zero = n == 2 && t[0] == '-' && t[1] == '0';
    if (!frac && !expo && !minus_zero && parse_i64(t, n, &v)) c |= NUM_INT;
    if (!expo) c |= NUM_DEC;
    if (sig <= 15) {
        errno = 0;
        double d = strtod(t, NULL);
        if (errno == 0 && isfinite(d) && (d == 0 ? !seen_nonzero : fabs(d) >= DBL_MIN))
            c |= NUM_FLOAT;
    }
    return c;
}

/* t is NUL-terminated at t[n]. */
static bool parse_f64(const char *t, size_t n, bool words, double *out)
{
    if (n == 0) return false;
    if (!words && !(isdigit((unsigned char)t[0]) || t[0] == '-' || t[0] == '+' || t[0] == '.'))
        return false;
    if (!words)
        for (size_t i = 0; i < n; i++)
            if (isalpha((unsigned char)t[i]) && t[i] != 'e' && t[i] != 'E') return false;
    if (isspace((unsigned char)t[0])) return false;
    char *end;
    errno = 0;
    double v = strtod(t, &end);
    if (end != t + n) return false;
    if (errno == ERANGE && isinf(v)) return false; /* beyond a double: never Infinity */
    *out = v;
    return true;
}

static int parse_bool(const char *t, size_t n)
{
    static const char *const yes[] = {"true", "t", "yes", "y", "1"};
    static const char *const no[] = {"false", "f", "no", "n", "0"};
    for (int i = 0; i < 5; i++) {
        if (strlen(yes[i]) == n && strncasecmp(t, yes[i], n) == 0) return 1;
        if (strlen(no[i]) == n && strncasecmp(t, no[i], n) == 0) return 0;
    }
    return -1;
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int b64v(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static bool decode_base64(const char *t, size_t n, struct ferry_buf *out)
{
    ferry_buf_reset(out);
    if (n % 4 != 0 || ferry_buf_reserve(out, n / 4 * 3 + 1) != FERRY_OK) return false;
    uint8_t *o = (uint8_t *)out->data;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            if (t[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else {
                if (pad) return false;
                v[j] = b64v(t[i + j]);
                if (v[j] < 0) return false;
            }
        }
        uint32_t x =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[k++] = (uint8_t)(x >> 16);
        if (pad < 2) o[k++] = (uint8_t)(x >> 8);
        if (pad < 1) o[k++] = (uint8_t)x;
    }
    out->len = k;
    return true;
}

struct conv {
    struct ferry_buf scratch; /* binary values, reused */
    bool jsonl;
};

/* Writes one non-null value of type `fd` into rw; false when the text is not one. */
static bool put_value(struct conv *c, struct ferry_row_writer *rw, const struct ferry_field *fd,
                      const char *t, size_t n, enum ferry__files_kind kind)
{
    int64_t i;
    double d;
    int32_t day;
    switch (fd->type) {
    case FERRY_TYPE_BOOL: {
        int b = parse_bool(t, n);
        if (b < 0) return false;
        ferry_rw_bool(rw, b == 1);
        return true;
    }
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64: {
        if (!parse_i64(t, n, &i)) return false;
        int bits = fd->type == FERRY_TYPE_INT8    ? 8
                   : fd->type == FERRY_TYPE_INT16 ? 16
                   : fd->type == FERRY_TYPE_INT32 ? 32
                                                  : 64;
        if (bits < 64 && (i < -(INT64_C(1) << (bits - 1)) || i >= (INT64_C(1) << (bits - 1))))
            return false;
        ferry_rw_int(rw, i);
        return true;
    }
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64:
        if (n == 3 && strcmp(t, "NaN") == 0)
            d = NAN;
        else if (n == 8 && strcmp(t, "Infinity") == 0)
            d = INFINITY;
        else if (n == 9 && strcmp(t, "-Infinity") == 0)
            d = -INFINITY;
        else if (!parse_f64(t, n, false, &d))
            return false;
        ferry_rw_float(rw, d);
        return true;
    case FERRY_TYPE_DECIMAL128: {
        struct ferry_decimal128 v;
        if (ferry_decimal128_from_text(t, n, fd->precision, fd->scale, &v) != FERRY_OK)
            return false;
        ferry_rw_dec128(rw, v);
        return true;
    }
    case FERRY_TYPE_DECIMAL_TEXT:
        /* exact decimal text only: an exponent or leading zeros would change the text */
        if (!(num_class(t, n) & NUM_DEC) && strcmp(t, "NaN") != 0) return false;
        ferry_rw_text(rw, t, n);
        return true;
    case FERRY_TYPE_UTF8:
    case FERRY_TYPE_JSON:
        ferry_rw_text(rw, t, n);
        return true;
    case FERRY_TYPE_BINARY:
        if (n >= 2 && t[0] == '\\' && t[1] == 'x') {
            if (n % 2 != 0) return false;
            ferry_buf_reset(&c->scratch);
            if (ferry_buf_reserve(&c->scratch, n / 2) != FERRY_OK) return false;
            for (size_t k = 2; k < n; k += 2) {
                int hi = hexv(t[k]), lo = hexv(t[k + 1]);
                if (hi < 0 || lo < 0) return false;
                c->scratch.data[c->scratch.len++] = (char)(hi << 4 | lo);
            }
            ferry_rw_text(rw, c->scratch.data, c->scratch.len);
            return true;
        }
        if (c->jsonl && kind == FILES_KIND_STRING) {
            if (!decode_base64(t, n, &c->scratch)) return false;
            ferry_rw_text(rw, c->scratch.data, c->scratch.len);
            return true;
        }
        ferry_rw_text(rw, t, n);
        return true;
    case FERRY_TYPE_DATE32:
        if (ferry_date32_from_text(t, n, &day) != FERRY_OK) return false;
        ferry_rw_int(rw, day);
        return true;
    case FERRY_TYPE_TIME64_US:
        if (ferry_time64_from_text(t, n, &i) != FERRY_OK) return false;
        ferry_rw_int(rw, i);
        return true;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        if (ferry_timestamp_from_text(t, n, &i) != FERRY_OK) return false;
        ferry_rw_int(rw, i);
        return true;
    case FERRY_TYPE_UUID: {
        uint8_t u[16];
        if (ferry_uuid_from_text(t, n, u) != FERRY_OK) return false;
        ferry_rw_fixed(rw, u, 16);
        return true;
    }
    default:
        return false;
    }
}

/* ---- reading a file ------------------------------------------------------------------------ */

struct file_reader {
    struct ferry__files_input *in;
    struct ferry__files_reader *r;
    enum ferry__files_fmt fmt;
    char **header; /* CSV: the header's names (or c1..cN) */
    int n_header;
};

static void fr_close(struct file_reader *f)
{
    ferry__files_reader_free(f->r);
    ferry__files_input_close(f->in);
    for (int i = 0; i < f->n_header; i++)
        ferry_free(f->header[i]);
    ferry_free(f->header);
    memset(f, 0, sizeof *f);
}

/* A blank line (one empty unquoted field). Before a header it is always skipped; among the
 * records only with skip_blank_lines: true (RFC 4180 makes it a record of one empty field). */
static bool blank_record(const struct ferry__files_reader *r)
{
    if (ferry__files_reader_nfields(r) != 1) return false;
    const struct ferry__files_field *f = ferry__files_reader_field(r, 0);
    return f->len == 0 && !f->quoted;
}

/* Reads `in` (owned from here on, closed by fr_close), named `path`: for CSV with a
 * header, reads the header. */
static int fr_open(const struct ferry__text_src *s, struct ferry__files_input *in, const char *path,
                   struct file_reader *f, struct ferry_error *err)
{
    memset(f, 0, sizeof *f);
    f->fmt = ferry__text_format_of(s, path);
    f->in = in;
    int rc = FERRY_OK;
    const char *kind = ferry__files_input_kind(in);
    const char *want = s->compression == 1 ? "plain" : compression_words[s->compression];
    if (s->compression > 0 && strcmp(kind, want) != 0) {
        rc = ferry_error_set(err, FERRY_EINVAL, "files",
                             "%s: compression: %s, but its bytes are %s (compression: auto, the "
                             "default, recognises it)",
                             path, compression_words[s->compression],
                             strcmp(kind, "plain") == 0 ? "not compressed" : kind);
        fr_close(f);
        return rc;
    }
    f->r = ferry__files_reader_new(f->fmt, &s->csv, f->in, path);
    if (f->r == NULL) {
        fr_close(f);
        return nomem(err);
    }
    if (f->fmt != FILES_FMT_CSV || !s->header) return FERRY_OK;
    bool eof = false;
    do
        rc = ferry__files_reader_next(f->r, &eof, err);
    while (rc == FERRY_OK && !eof && blank_record(f->r));
    if (rc == FERRY_OK && eof)
        rc = ferry_error_set(err, FERRY_EINVAL, "files", "%s: empty file: no header row", path);
    if (rc != FERRY_OK) {
        fr_close(f);
        return rc;
    }
    int n = ferry__files_reader_nfields(f->r);
    f->header = ferry_calloc((size_t)n, sizeof *f->header);
    if (f->header == NULL) {
        fr_close(f);
        return nomem(err);
    }
    f->n_header = n;
    for (int i = 0; i < n; i++) {
        const struct ferry__files_field *fd = ferry__files_reader_field(f->r, i);
        const char *name = ferry__files_reader_text(f->r, fd);
        if (fd->len == 0) {
            rc = ferry_error_set(err, FERRY_EINVAL, "files",
                                 "%s:%" PRId64 ":%" PRId64 ": header column %d has no name", path,
                                 fd->line, fd->column, i + 1);
            break;
        }
        for (int k = 0; k < i && rc == FERRY_OK; k++)
            if (strcmp(f->header[k], name) == 0)
                rc = ferry_error_set(err, FERRY_EINVAL, "files",
                                     "%s:%" PRId64 ":%" PRId64
                                     ": header column \"%s\" appears twice",
                                     path, fd->line, fd->column, name);
        if (rc != FERRY_OK) break;
        f->header[i] = ferry_strdup(name);
        if (f->header[i] == NULL) {
            rc = nomem(err);
            break;
        }
    }
    if (rc != FERRY_OK) fr_close(f);
    return rc;
}

/* ---- discover ------------------------------------------------------------------------------ */

struct guess {
    char *name;
    bool any, can_bool, can_int, can_float, can_dec, can_date, can_ts, tz, can_json;
};

static void guess_value(struct guess *g, const char *t, size_t n, enum ferry__files_kind kind,
                        bool jsonl)
{
    if (kind == FILES_KIND_NULL) return;
    g->any = true;
    int num = jsonl && kind != FILES_KIND_NUMBER ? 0 : num_class(t, n);
    g->can_int &= (num & NUM_INT) != 0;
    g->can_float &= (num & NUM_FLOAT) != 0;
    g->can_dec &= (num & NUM_DEC) != 0;
    if (jsonl) {
        g->can_bool &= kind == FILES_KIND_BOOL;
        g->can_json &= kind == FILES_KIND_NESTED;
        if (kind != FILES_KIND_STRING) g->can_date = g->can_ts = false;
    } else {
        g->can_bool &= (n == 4 && strncasecmp(t, "true", 4) == 0) ||
                       (n == 5 && strncasecmp(t, "false", 5) == 0);
        g->can_json = false;
    }
    if (g->can_date) {
        int32_t day;
        g->can_date = n == 10 && t[4] == '-' && ferry_date32_from_text(t, n, &day) == FERRY_OK;
    }
    if (g->can_ts) {
        int64_t us;
        g->can_ts = n >= 16 && t[4] == '-' && (t[10] == 'T' || t[10] == ' ') &&
                    ferry_timestamp_from_text(t, n, &us) == FERRY_OK;
        if (g->can_ts) {
            const char *time = t + 11;
            g->tz |= t[n - 1] == 'Z' || strchr(time, '+') != NULL || strchr(time, '-') != NULL;
        }
    }
}

static enum ferry_type guess_type(const struct guess *g)
{
    if (!g->any) return FERRY_TYPE_UTF8;
    if (g->can_bool) return FERRY_TYPE_BOOL;
    if (g->can_int) return FERRY_TYPE_INT64;
    if (g->can_float) return FERRY_TYPE_FLOAT64;
    if (g->can_dec) return FERRY_TYPE_DECIMAL_TEXT;
    if (g->can_date) return FERRY_TYPE_DATE32;
    if (g->can_ts) return g->tz ? FERRY_TYPE_TIMESTAMPTZ_US : FERRY_TYPE_TIMESTAMP_US;
    if (g->can_json) return FERRY_TYPE_JSON;
    return FERRY_TYPE_UTF8;
}

static struct guess *guess_add(struct guess **gs, int *n, const char *name)
{
    struct guess *ng = ferry_realloc(*gs, sizeof *ng * (size_t)(*n + 1));
    if (ng == NULL) return NULL;
    *gs = ng;
    struct guess *g = &ng[*n];
    memset(g, 0, sizeof *g);
    g->name = ferry_strdup(name);
    if (g->name == NULL) return NULL;
    g->can_bool = g->can_int = g->can_float = g->can_dec = g->can_date = g->can_ts = g->can_json =
        true;
    (*n)++;
    return g;
}

static int infer(const struct ferry__text_src *s, struct ferry__files_input *in, const char *path,
                 struct guess **out, int *n_out, struct ferry_error *err)
{
    struct file_reader f;
    int rc = fr_open(s, in, path, &f, err);
    if (rc != FERRY_OK) return rc;
    struct guess *gs = NULL;
    int n = 0;
    for (int i = 0; i < f.n_header && rc == FERRY_OK; i++)
        if (guess_add(&gs, &n, f.header[i]) == NULL) rc = nomem(err);
    bool jsonl = f.fmt == FILES_FMT_JSONL;
    if (jsonl) ferry__files_reader_set_keys(f.r, NULL, 0);
    for (int64_t row = 0; row < s->sample_rows && rc == FERRY_OK; row++) {
        bool eof;
        rc = ferry__files_reader_next(f.r, &eof, err);
        if (rc != FERRY_OK) {
            if (s->skip && rc == FERRY_EINVAL) rc = FERRY_OK;
            continue;
        }
        if (eof) break;
        const struct ferry__files_reader *r = f.r;
        int nf = ferry__files_reader_nfields(r);
        if (!jsonl) {
            if (s->skip_blank && blank_record(r)) continue;
            if (!s->header && n == 0) {
                for (int i = 0; i < nf && rc == FERRY_OK; i++) {
                    char name[24];
                    snprintf(name, sizeof name, "c%d", i + 1);
                    if (guess_add(&gs, &n, name) == NULL) rc = nomem(err);
                }
            }
            if (nf != n) continue; /* malformed: extract reports it */
            for (int i = 0; i < nf; i++) {
                const struct ferry__files_field *fd = ferry__files_reader_field(r, i);
                guess_value(&gs[i], ferry__files_reader_text(r, fd), fd->len, fd->kind, false);
            }
        } else {
            for (int i = 0; i + 1 < nf && rc == FERRY_OK; i += 2) {
                const struct ferry__files_field *kf = ferry__files_reader_field(r, i);
                const struct ferry__files_field *vf = ferry__files_reader_field(r, i + 1);
                const char *key = ferry__files_reader_text(r, kf);
                int k = 0;
                while (k < n && strcmp(gs[k].name, key) != 0)
                    k++;
                if (k == n && guess_add(&gs, &n, key) == NULL) {
                    rc = nomem(err);
                    break;
                }
                guess_value(&gs[k], ferry__files_reader_text(r, vf), vf->len, vf->kind, true);
            }
        }
    }
    fr_close(&f);
    if (rc == FERRY_OK && n == 0)
        rc = ferry_error_set(err, FERRY_EINVAL, "files",
                             "%s: no column found in the first %" PRId64 " records", path,
                             s->sample_rows);
    if (rc != FERRY_OK) {
        for (int i = 0; i < n; i++)
            ferry_free(gs[i].name);
        ferry_free(gs);
        return rc;
    }
    *out = gs;
    *n_out = n;
    return FERRY_OK;
}

/* "int64", "decimal128(12,2)" / "decimal(12,2)", "text" ... */
static int type_of(const char *name, enum ferry_type *t, int *p, int *sc)
{
    *p = *sc = 0;
    if (strncmp(name, "decimal128(", 11) == 0 || strncmp(name, "decimal(", 8) == 0 ||
        strncmp(name, "numeric(", 8) == 0) {
        const char *a = strchr(name, '(') + 1;
        char *end;
        long pp = strtol(a, &end, 10), ss = 0;
        if (*end == ',') ss = strtol(end + 1, &end, 10);
        if (*end != ')' || end[1] != '\0' || pp < 1 || pp > 38 || ss < -pp || ss > pp) return -1;
        *t = FERRY_TYPE_DECIMAL128;
        *p = (int)pp;
        *sc = (int)ss;
        return 0;
    }
    static const struct {
        const char *alias;
        enum ferry_type t;
    } aliases[] = {{"text", FERRY_TYPE_UTF8},           {"string", FERRY_TYPE_UTF8},
                   {"integer", FERRY_TYPE_INT64},       {"int", FERRY_TYPE_INT32},
                   {"bigint", FERRY_TYPE_INT64},        {"double", FERRY_TYPE_FLOAT64},
                   {"float", FERRY_TYPE_FLOAT64},       {"boolean", FERRY_TYPE_BOOL},
                   {"date", FERRY_TYPE_DATE32},         {"time", FERRY_TYPE_TIME64_US},
                   {"decimal", FERRY_TYPE_DECIMAL_TEXT}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0) {
            *t = aliases[i].t;
            return 0;
        }
    if (ferry_type_from_name(name, t) != FERRY_OK) return -1;
    if (*t == FERRY_TYPE_DECIMAL128) return -1; /* needs (p,s) */
    return 0;
}

static int declared_schema(struct ferry_cfg *node, const char *table, struct ferry_schema *s,
                           struct ferry_error *err)
{
    if (node->kind != FERRY_CFG_MAP || node->n_children == 0)
        return ferry_cfg_error(err, node, "must be a map of column: type");
    for (int i = 0; i < node->n_children; i++) {
        struct ferry_cfg *c = node->children[i];
        c->used = true;
        enum ferry_type t;
        int p, sc;
        if (c->kind != FERRY_CFG_SCALAR || c->scalar == NULL ||
            type_of(c->scalar, &t, &p, &sc) != 0)
            return ferry_cfg_error(err, c,
                                   "resource %s column %s: unknown type (int64, float64, bool, "
                                   "utf8, date32, timestamp, timestamptz, decimal128(p,s), ...)",
                                   table, c->key);
        int rc = ferry_schema_add_field(s, c->key, t, true, err);
        if (rc != FERRY_OK) return rc;
        s->fields[s->n_fields - 1].precision = p;
        s->fields[s->n_fields - 1].scale = sc;
    }
    return FERRY_OK;
}

int ferry__text_schema(const struct ferry__text_src *s, const struct ferry_resource_spec *spec,
                       struct ferry__files_input *in, const char *name, struct ferry_schema **out,
                       struct ferry_error *err)
{
    struct ferry_schema *all = ferry_schema_new();
    struct ferry_cfg *decl = ferry__text_declared(spec);
    int rc = FERRY_OK;
    if (all == NULL) {
        ferry__files_input_close(in);
        rc = nomem(err);
    } else if (decl != NULL) {
        ferry__files_input_close(in);
        rc = declared_schema(decl, spec->table, all, err);
    } else {
        struct guess *gs = NULL;
        int n = 0;
        rc = infer(s, in, name, &gs, &n, err);
        for (int i = 0; i < n; i++) {
            if (rc == FERRY_OK)
                rc = ferry_schema_add_field(all, gs[i].name, guess_type(&gs[i]), true, err);
            ferry_free(gs[i].name);
        }
        ferry_free(gs);
    }
    if (rc != FERRY_OK) {
        ferry_schema_unref(all);
        return rc;
    }
    *out = all;
    return FERRY_OK;
}

int ferry__text_select(const struct ferry_schema *all, const struct ferry_resource_spec *spec,
                       const char *who, struct ferry_schema **out, struct ferry_error *err)
{
    struct ferry_schema *sc = ferry_schema_new();
    int rc = sc == NULL ? nomem(err) : FERRY_OK;
    int n = rc == FERRY_OK ? (spec->columns ? spec->n_columns : all->n_fields) : 0;
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        int f = spec->columns ? ferry_schema_find(all, spec->columns[i]) : i;
        if (f < 0) {
            rc = ferry_error_set(err, FERRY_ENOTFOUND, who,
                                 "%s source: resource %s has no column \"%s\"", who, spec->table,
                                 spec->columns[i]);
            break;
        }
        const struct ferry_field *fd = &all->fields[f];
        rc = ferry_schema_add_field(sc, fd->name, fd->type, true, err);
        if (rc == FERRY_OK) {
            sc->fields[i].precision = fd->precision;
            sc->fields[i].scale = fd->scale;
        }
    }
    int missing =
        rc == FERRY_OK && spec->key ? ferry_schema_mark_key(sc, spec->key, spec->n_key) : -1;
    if (missing >= 0)
        rc = ferry_error_set(err, FERRY_ENOTFOUND, who,
                             "%s source: resource %s: key column \"%s\" is not among the columns",
                             who, spec->table, spec->key[missing]);
    if (rc == FERRY_OK) rc = ferry_schema_finish(sc, err);
    if (rc != FERRY_OK) {
        ferry_schema_unref(sc);
        return rc;
    }
    *out = sc;
    return FERRY_OK;
}

#define SKIP_SAMPLES 10

/* on_error: skip - the shard's count and its first samples. A sample names where
 * (file:line:column) and why, never the value: it goes into events and run state. */
struct skips {
    int64_t count;
    int n;
    struct {
        char at[200];
        char reason[200];
    } sample[SKIP_SAMPLES];
};

/* A bad record. on_error: fail returns the error (err holds the full message); skip
 * counts it and keeps a sample. `reason` NULL: err's message is "FILE:LINE[:COL]: why"
 * (the reader's errors), split here. */
static int bad_record(const struct ferry__text_src *s, struct skips *sk, const char *file,
                      int64_t line, int64_t col, const char *reason, struct ferry_error *err)
{
    if (!s->skip) return err ? err->code : FERRY_EINVAL;
    if (sk->count++ < SKIP_SAMPLES) {
        char *at = sk->sample[sk->n].at, *why = sk->sample[sk->n].reason;
        size_t atn = sizeof sk->sample[0].at, whyn = sizeof sk->sample[0].reason;
        if (reason != NULL) {
            snprintf(at, atn, "%s:%" PRId64 ":%" PRId64, file, line, col);
            snprintf(why, whyn, "%s", reason);
        } else {
            const char *m = err ? err->message : "";
            size_t fl = strlen(file);
            const char *p = m;
            if (strncmp(m, file, fl) == 0 && m[fl] == ':') {
                p = m + fl + 1;
                while (*p >= '0' && *p <= '9')
                    p++;
                if (*p == ':' && p[1] >= '0' && p[1] <= '9') {
                    p++;
                    while (*p >= '0' && *p <= '9')
                        p++;
                }
            }
            if (p != m && *p == ':') {
                snprintf(at, atn, "%.*s", (int)(p - m), m);
                p++;
                while (*p == ' ')
                    p++;
                snprintf(why, whyn, "%s", p);
            } else {
                snprintf(at, atn, "%s", file);
                snprintf(why, whyn, "%s", m);
            }
        }
        sk->n++;
    }
    if (err) ferry_error_clear(err);
    return FERRY_OK;
}

/* Hands the shard's skips to the engine (resource.rows_skipped). */
static void report_skips(const struct skips *sk, const char *file, struct ferry_row_writer *rw)
{
    if (sk->count == 0) return;
    json_t *a = json_array();
    for (int i = 0; i < sk->n && a; i++)
        json_array_append_new(
            a, json_pack("{s:s,s:s}", "at", sk->sample[i].at, "reason", sk->sample[i].reason));
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    ferry_rw_report_skipped(rw, sk->count, text ? text : "[]");
    free(text);
    json_decref(a);
    ferry_log(FERRY_LOG_WARN,
              "files source: %s: skipped %" PRId64
              " bad record%s (on_error: skip); first at %s: %s",
              file, sk->count, sk->count == 1 ? "" : "s", sk->sample[0].at, sk->sample[0].reason);
}

/* Without a header the file's columns are, in order, the declared schema's (read without
 * marking anything: several readers may share spec) or c1..cN as inferred. */
static int headerless_column(const struct ferry_resource_spec *spec, const char *name)
{
    const struct ferry_cfg *node = spec->node;
    for (int i = 0; node && node->kind == FERRY_CFG_MAP && i < node->n_children; i++) {
        const struct ferry_cfg *c = node->children[i];
        if (c->key == NULL || strcmp(c->key, "schema") != 0 || c->kind != FERRY_CFG_MAP) continue;
        for (int k = 0; k < c->n_children; k++)
            if (c->children[k]->key && strcmp(c->children[k]->key, name) == 0) return k;
        return -1;
    }
    if (name[0] != 'c' || name[1] < '1' || name[1] > '9') return -1;
    for (const char *p = name + 1; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    long n = strtol(name + 1, NULL, 10);
    return n > INT_MAX ? -1 : (int)n - 1;
}

int ferry__text_extract(const struct ferry__text_src *s, const struct ferry_resource_spec *spec,
                        const struct ferry_schema *schema, struct ferry__files_input *in,
                        const char *name, int shard, int64_t start, struct ferry_row_writer *rw,
                        struct ferry_error *err)
{
    struct file_reader f = {0};
    int rc = fr_open(s, in, name, &f, err);
    const int nf = schema->n_fields;
    int *src_col = rc == FERRY_OK ? ferry_malloc(sizeof *src_col * (size_t)(nf ? nf : 1)) : NULL;
    const char **keys = rc == FERRY_OK ? ferry_calloc((size_t)(nf ? nf : 1), sizeof *keys) : NULL;
    if (rc == FERRY_OK && (src_col == NULL || keys == NULL)) rc = nomem(err);
    int expect = 0;
    for (int i = 0; i < nf && rc == FERRY_OK; i++) {
        keys[i] = schema->fields[i].name;
        if (f.fmt == FILES_FMT_JSONL) {
            src_col[i] = i;
        } else if (s->header) {
            src_col[i] = -1;
            for (int k = 0; k < f.n_header; k++)
                if (strcmp(f.header[k], schema->fields[i].name) == 0) src_col[i] = k;
            if (src_col[i] < 0)
                rc = ferry_error_set(err, FERRY_EINVAL, "files",
                                     "%s: the header has no column \"%s\" (resource %s)", name,
                                     schema->fields[i].name, spec->table);
        } else {
            src_col[i] = headerless_column(spec, schema->fields[i].name);
            if (src_col[i] < 0)
                rc = ferry_error_set(err, FERRY_EINVAL, "files",
                                     "%s: no file column for \"%s\" (resource %s, header: false)",
                                     name, schema->fields[i].name, spec->table);
        }
    }
    if (rc == FERRY_OK) {
        if (f.fmt == FILES_FMT_JSONL) ferry__files_reader_set_keys(f.r, keys, nf);
        expect = s->header ? f.n_header : -1;
        /* on_error: skip counts the whole shard in every attempt (a report replaces the
         * shard's earlier one): a resumed shard reads its already-delivered records again,
         * only to count the bad ones, instead of jumping over them. */
        if (start > 0 && !s->skip) rc = ferry__files_reader_skip_to(f.r, start, err);
    }
    struct conv cv;
    memset(&cv, 0, sizeof cv);
    ferry_buf_init(&cv.scratch, 0);
    cv.jsonl = f.fmt == FILES_FMT_JSONL;
    struct skips sk = {0};
    ferry_rw_set_shard(rw, shard);
    while (rc == FERRY_OK) {
        bool eof = false;
        rc = ferry__files_reader_next(f.r, &eof, err);
        if (rc == FERRY_EINVAL) {
            rc = bad_record(s, &sk, name, 0, 0, NULL, err);
            continue;
        }
        if (rc != FERRY_OK || eof) break;
        const struct ferry__files_reader *r = f.r;
        bool delivered = start > 0 && ferry__files_reader_offset(r) <= start;
        if (f.fmt == FILES_FMT_CSV) {
            if (s->skip_blank && blank_record(r)) continue;
            int got = ferry__files_reader_nfields(r);
            if (expect < 0) expect = got;
            if (got != expect) {
                const struct ferry__files_field *last = ferry__files_reader_field(r, got - 1);
                char why[160];
                snprintf(why, sizeof why, "%d fields where the file has %d columns%s", got, expect,
                         got == 1 && blank_record(r)
                             ? " (a blank line; skip_blank_lines: true skips them)"
                             : "");
                ferry_error_set(err, FERRY_EINVAL, "files", "%s:%" PRId64 ":%" PRId64 ": %s", name,
                                last->line, last->column, why);
                rc = bad_record(s, &sk, name, last->line, last->column, why, err);
                continue;
            }
        }
        ferry_rw_begin(rw, FERRY_OP_INSERT);
        int bad = -1;
        for (int i = 0; i < nf; i++) {
            const struct ferry__files_field *fd = ferry__files_reader_field(r, src_col[i]);
            if (fd->kind == FILES_KIND_NULL) {
                ferry_rw_null(rw);
                continue;
            }
            if (!put_value(&cv, rw, &schema->fields[i], ferry__files_reader_text(r, fd), fd->len,
                           fd->kind)) {
                bad = i;
                break;
            }
        }
        if (bad >= 0) {
            ferry_rw_cancel_row(rw);
            const struct ferry__files_field *fd = ferry__files_reader_field(r, src_col[bad]);
            char type[48];
            if (schema->fields[bad].type == FERRY_TYPE_DECIMAL128)
                snprintf(type, sizeof type, "decimal128(%d,%d)", schema->fields[bad].precision,
                         schema->fields[bad].scale);
            else
                snprintf(type, sizeof type, "%s", ferry_type_name(schema->fields[bad].type));
            ferry_error_set(err, FERRY_EINVAL, "files",
                            "%s:%" PRId64 ":%" PRId64
                            ": column \"%s\": \"%.80s\" is not a %s value",
                            name, fd->line, fd->column, schema->fields[bad].name,
                            ferry__files_reader_text(r, fd), type);
            char why[200];
            snprintf(why, sizeof why, "column \"%.100s\": not a %s value (%zu bytes)",
                     schema->fields[bad].name, type, fd->len);
            rc = bad_record(s, &sk, name, fd->line, fd->column, why, err);
            continue;
        }
        if (delivered) {
            /* Written by an earlier attempt: only its validity was wanted. */
            ferry_rw_cancel_row(rw);
            continue;
        }
        /* The position of this row: where the next record starts. */
        ferry_rw_set_offset(rw, ferry__files_reader_offset(r));
        rc = ferry_rw_end(rw, err);
    }
    report_skips(&sk, name, rw);
    ferry_buf_release(&cv.scratch);
    ferry_free(src_col);
    ferry_free(keys);
    fr_close(&f);
    return rc;
}
