/* formats/text_write.c - the CSV and JSON Lines format writers of the files sink.
 *
 * Owns each part's staging buffer (reused from batch to batch; flushed to `out` every
 * 256 KiB and at the end of each batch, so a batch costs no allocation once the buffer has
 * grown). Values take the text forms of ferry/batch.h; floats the shortest text that reads
 * back to the same value. Calls the batch readers and text forms; called by the files sink
 * (files_sink.c) through struct ferry__files_format, and by the unit tests.
 *
 * CSV (RFC 4180): a header row of column names, `delimiter` between fields, records ending
 * with CRLF (or LF with `newline: lf`), a field quoted when it holds the delimiter, a quote,
 * CR or LF, when it is empty (the empty string is `""`) or when it equals the null marker;
 * quotes inside doubled. NULL is the null marker unquoted (empty by default). Binary is
 * `\x` and lowercase hex. JSON Lines (RFC 8259): one object per line, keys in column order;
 * integers and floats are numbers (NaN and infinities, which JSON lacks, are the strings
 * "NaN", "Infinity", "-Infinity"), bool true/false, NULL null; decimals, dates, times,
 * timestamps, uuids and json columns are strings (a json column keeps its text as written);
 * binary is base64 (RFC 4648, padded). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "formats/text.h"

#define FLUSH_AT (256 * 1024)

/* ---- shared ---------------------------------------------------------------------------- */

int ferry__files_float_text(double v, bool single, char *buf, size_t len)
{
    if (isnan(v)) return snprintf(buf, len, "NaN");
    if (isinf(v)) return snprintf(buf, len, v < 0 ? "-Infinity" : "Infinity");
    int lo = single ? 6 : 15, hi = single ? 9 : 17;
    int n = 0;
    for (int p = lo; p <= hi; p++) {
        n = snprintf(buf, len, "%.*g", p, v);
        double back = strtod(buf, NULL);
        if (single ? (float)back == (float)v : back == v) break;
    }
    return n;
}

static size_t put_i64(char *p, int64_t v)
{
    char tmp[24];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t k = 0;
    if (v < 0) p[k++] = '-';
    while (n)
        p[k++] = tmp[--n];
    return k;
}

struct wbase {
    struct ferry__files_format_opts opts;
    const struct ferry_schema *schema;
    struct ferry__files_out out;
    struct ferry_buf stage;
    int64_t bytes;
};

static int flush_stage(struct wbase *w, struct ferry_error *err)
{
    if (w->stage.len == 0) return FERRY_OK;
    int rc = w->out.write(w->out.ctx, w->stage.data, w->stage.len, err);
    if (rc != FERRY_OK) return rc;
    w->bytes += (int64_t)w->stage.len;
    ferry_buf_reset(&w->stage);
    return FERRY_OK;
}

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "files", "files sink: out of memory");
}

static int value_error(const struct ferry_batch *b, int f, int64_t r, struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESINK, "files",
                           "files sink: resource %s column \"%s\", batch %" PRIu64 " row %" PRId64
                           ": value outside what the text form covers (years 0001..9999)",
                           b->resource ? b->resource : "", b->schema->fields[f].name, b->seq, r);
}

/* The text of a non-null value that is not a string, int, float, bool or binary, into tmp
 * (>= 64 bytes); -1 when the value has no text form. */
static int other_text(const struct ferry_batch *b, int f, int64_t r, char *tmp, size_t len)
{
    const struct ferry_field *fd = &b->schema->fields[f];
    switch (fd->type) {
    case FERRY_TYPE_DECIMAL128:
        return ferry_decimal128_to_text(ferry_col_dec128(b, f, r), fd->scale, tmp, len);
    case FERRY_TYPE_DATE32:
        return ferry_date32_to_text((int32_t)ferry_col_int(b, f, r), tmp, len);
    case FERRY_TYPE_TIME64_US:
        return ferry_time64_to_text(ferry_col_int(b, f, r), tmp, len);
    case FERRY_TYPE_TIMESTAMP_US:
        return ferry_timestamp_to_text(ferry_col_int(b, f, r), false, tmp, len);
    case FERRY_TYPE_TIMESTAMPTZ_US:
        return ferry_timestamp_to_text(ferry_col_int(b, f, r), true, tmp, len);
    case FERRY_TYPE_UUID:
        return ferry_uuid_to_text(ferry_col_fixed(b, f, r), tmp, len);
    default:
        return -1;
    }
}

static void wbase_free(struct wbase *w)
{
    if (w == NULL) return;
    ferry_buf_release(&w->stage);
    ferry_free(w);
}

static int wbase_new(const struct ferry__files_format_opts *opts, const struct ferry_schema *schema,
                     struct ferry__files_out out, struct wbase **w, struct ferry_error *err)
{
    *w = ferry_calloc(1, sizeof **w);
    if (*w == NULL) return nomem(err);
    (*w)->opts = *opts;
    if ((*w)->opts.delimiter == 0) (*w)->opts.delimiter = ',';
    if ((*w)->opts.null_marker == NULL) (*w)->opts.null_marker = "";
    (*w)->schema = schema;
    (*w)->out = out;
    ferry_buf_init(&(*w)->stage, 0);
    return FERRY_OK;
}

static int wbase_finish(void *state, int64_t *bytes, struct ferry_error *err)
{
    struct wbase *w = state;
    int rc = flush_stage(w, err);
    if (rc == FERRY_OK) *bytes = w->bytes;
    return rc;
}

static void wbase_release(void *state)
{
    wbase_free(state);
}

/* ---- CSV --------------------------------------------------------------------------------- */

static int csv_field(struct wbase *w, const char *p, size_t n, bool force_quote)
{
    const char d = w->opts.delimiter;
    bool quote = force_quote || n == 0;
    for (size_t i = 0; i < n && !quote; i++)
        quote = p[i] == d || p[i] == '"' || p[i] == '\r' || p[i] == '\n';
    const char *nm = w->opts.null_marker;
    size_t nl = strlen(nm);
    if (!quote && nl == n && nl > 0 && memcmp(p, nm, n) == 0) quote = true;
    if (!quote) return ferry_buf_append(&w->stage, p, n);
    if (ferry_buf_reserve(&w->stage, n * 2 + 2) != FERRY_OK) return FERRY_ENOMEM;
    char *o = w->stage.data + w->stage.len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '"') *o++ = '"';
        *o++ = p[i];
    }
    *o++ = '"';
    w->stage.len = (size_t)(o - w->stage.data);
    return FERRY_OK;
}

static int csv_open(const struct ferry__files_format_opts *opts, const struct ferry_schema *schema,
                    struct ferry__files_out out, void **state, struct ferry_error *err)
{
    struct wbase *w;
    int rc = wbase_new(opts, schema, out, &w, err);
    if (rc != FERRY_OK) return rc;
    if (opts->header) {
        for (int f = 0; f < schema->n_fields && rc == FERRY_OK; f++) {
            if (f) rc = ferry_buf_append(&w->stage, &w->opts.delimiter, 1);
            const char *nm = schema->fields[f].name;
            if (rc == FERRY_OK) rc = csv_field(w, nm, strlen(nm), false);
        }
        if (rc == FERRY_OK)
            rc = ferry_buf_append(&w->stage, opts->crlf ? "\r\n" : "\n", opts->crlf ? 2 : 1);
        if (rc != FERRY_OK) {
            wbase_free(w);
            return nomem(err);
        }
    }
    *state = w;
    return FERRY_OK;
}

static const char hexd[] = "0123456789abcdef";

static int csv_write(void *state, const struct ferry_batch *b, struct ferry_error *err)
{
    struct wbase *w = state;
    const int nf = b->schema->n_fields;
    const char *nl = w->opts.crlf ? "\r\n" : "\n";
    const size_t nll = w->opts.crlf ? 2 : 1;
    const char *nm = w->opts.null_marker;
    const size_t nml = strlen(nm);
    char tmp[128];
    for (int64_t r = 0; r < b->length; r++) {
        int rc = FERRY_OK;
        for (int f = 0; f < nf && rc == FERRY_OK; f++) {
            if (f) rc = ferry_buf_append(&w->stage, &w->opts.delimiter, 1);
            if (rc != FERRY_OK) break;
            if (ferry_col_is_null(b, f, r)) {
                rc = ferry_buf_append(&w->stage, nm, nml);
                continue;
            }
            size_t len;
            const uint8_t *p;
            int n;
            switch (b->schema->fields[f].type) {
            case FERRY_TYPE_BOOL:
                rc = ferry_col_bool(b, f, r) ? ferry_buf_append(&w->stage, "true", 4)
                                             : ferry_buf_append(&w->stage, "false", 5);
                break;
            case FERRY_TYPE_INT8:
            case FERRY_TYPE_INT16:
            case FERRY_TYPE_INT32:
            case FERRY_TYPE_INT64:
                rc = ferry_buf_append(&w->stage, tmp, put_i64(tmp, ferry_col_int(b, f, r)));
                break;
            case FERRY_TYPE_FLOAT32:
            case FERRY_TYPE_FLOAT64:
                n = ferry__files_float_text(ferry_col_float(b, f, r),
                                            b->schema->fields[f].type == FERRY_TYPE_FLOAT32, tmp,
                                            sizeof tmp);
                rc = csv_field(w, tmp, (size_t)n, false);
                break;
            case FERRY_TYPE_UTF8:
            case FERRY_TYPE_JSON:
            case FERRY_TYPE_DECIMAL_TEXT:
                p = ferry_col_bytes(b, f, r, &len);
                rc = csv_field(w, p ? (const char *)p : "", len, false);
                break;
            case FERRY_TYPE_BINARY: {
                p = ferry_col_bytes(b, f, r, &len);
                rc = ferry_buf_reserve(&w->stage, 2 + 2 * len);
                if (rc != FERRY_OK) break;
                char *o = w->stage.data + w->stage.len;
                *o++ = '\\';
                *o++ = 'x';
                for (size_t i = 0; i < len; i++) {
                    *o++ = hexd[p[i] >> 4];
                    *o++ = hexd[p[i] & 15];
                }
                w->stage.len = (size_t)(o - w->stage.data);
                break;
            }
            default:
                n = other_text(b, f, r, tmp, sizeof tmp);
                if (n < 0) return value_error(b, f, r, err);
                rc = csv_field(w, tmp, (size_t)n, false);
                break;
            }
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(&w->stage, nl, nll);
        if (rc != FERRY_OK) return nomem(err);
        if (w->stage.len >= FLUSH_AT) {
            rc = flush_stage(w, err);
            if (rc != FERRY_OK) return rc;
        }
    }
    return flush_stage(w, err);
}

const struct ferry__files_format ferry__files_csv = {
    .name = "csv",
    .ext = "csv",
    .per_batch_bytes = true,
    .open_part = csv_open,
    .write_batch = csv_write,
    .finish_part = wbase_finish,
    .free = wbase_release,
};

/* ---- JSON Lines ---------------------------------------------------------------------------- */

static int json_str(struct ferry_buf *s, const char *p, size_t n)
{
    if (ferry_buf_reserve(s, n * 6 + 2) != FERRY_OK) return FERRY_ENOMEM;
    char *o = s->data + s->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c >= 0x20) {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            switch (c) {
            case '\n':
                *o++ = 'n';
                break;
            case '\r':
                *o++ = 'r';
                break;
            case '\t':
                *o++ = 't';
                break;
            case '\b':
                *o++ = 'b';
                break;
            case '\f':
                *o++ = 'f';
                break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hexd[c >> 4];
                *o++ = hexd[c & 15];
            }
        }
    }
    *o++ = '"';
    s->len = (size_t)(o - s->data);
    return FERRY_OK;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int json_base64(struct ferry_buf *s, const uint8_t *p, size_t n)
{
    if (ferry_buf_reserve(s, (n + 2) / 3 * 4 + 2) != FERRY_OK) return FERRY_ENOMEM;
    char *o = s->data + s->len;
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = b64[(v >> 6) & 63];
        *o++ = b64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = b64[(v >> 6) & 63];
        *o++ = '=';
    }
    *o++ = '"';
    s->len = (size_t)(o - s->data);
    return FERRY_OK;
}

struct jsonw {
    struct wbase base;     /* first: the shared finish/free work on it */
    struct ferry_buf keys; /* "\"name\":" of every column, back to back */
    size_t *key_off;
};

static void jsonl_free(void *state)
{
    struct jsonw *j = state;
    if (j == NULL) return;
    ferry_buf_release(&j->keys);
    ferry_free(j->key_off);
    ferry_buf_release(&j->base.stage);
    ferry_free(j);
}

static int jsonl_open(const struct ferry__files_format_opts *opts,
                      const struct ferry_schema *schema, struct ferry__files_out out, void **state,
                      struct ferry_error *err)
{
    struct jsonw *j = ferry_calloc(1, sizeof *j);
    if (j == NULL) return nomem(err);
    j->base.opts = *opts;
    j->base.schema = schema;
    j->base.out = out;
    ferry_buf_init(&j->base.stage, 0);
    ferry_buf_init(&j->keys, 0);
    j->key_off = ferry_calloc((size_t)schema->n_fields + 1, sizeof *j->key_off);
    int rc = j->key_off ? FERRY_OK : FERRY_ENOMEM;
    for (int f = 0; f < schema->n_fields && rc == FERRY_OK; f++) {
        j->key_off[f] = j->keys.len;
        rc = json_str(&j->keys, schema->fields[f].name, strlen(schema->fields[f].name));
        if (rc == FERRY_OK) rc = ferry_buf_append(&j->keys, ":", 1);
    }
    if (rc == FERRY_OK && j->key_off) j->key_off[schema->n_fields] = j->keys.len;
    if (rc != FERRY_OK) {
        jsonl_free(j);
        return nomem(err);
    }
    *state = j;
    return FERRY_OK;
}

static int jsonl_write(void *state, const struct ferry_batch *b, struct ferry_error *err)
{
    struct jsonw *j = state;
    struct ferry_buf *s = &j->base.stage;
    const int nf = b->schema->n_fields;
    char tmp[128];
    for (int64_t r = 0; r < b->length; r++) {
        int rc = ferry_buf_append(s, "{", 1);
        for (int f = 0; f < nf && rc == FERRY_OK; f++) {
            if (f) rc = ferry_buf_append(s, ",", 1);
            if (rc == FERRY_OK)
                rc = ferry_buf_append(s, j->keys.data + j->key_off[f],
                                      j->key_off[f + 1] - j->key_off[f]);
            if (rc != FERRY_OK) break;
            if (ferry_col_is_null(b, f, r)) {
                rc = ferry_buf_append(s, "null", 4);
                continue;
            }
            size_t len;
            const uint8_t *p;
            int n;
            switch (b->schema->fields[f].type) {
            case FERRY_TYPE_BOOL:
                rc = ferry_col_bool(b, f, r) ? ferry_buf_append(s, "true", 4)
                                             : ferry_buf_append(s, "false", 5);
                break;
            case FERRY_TYPE_INT8:
            case FERRY_TYPE_INT16:
            case FERRY_TYPE_INT32:
            case FERRY_TYPE_INT64:
                rc = ferry_buf_append(s, tmp, put_i64(tmp, ferry_col_int(b, f, r)));
                break;
            case FERRY_TYPE_FLOAT32:
            case FERRY_TYPE_FLOAT64: {
                double v = ferry_col_float(b, f, r);
                n = ferry__files_float_text(v, b->schema->fields[f].type == FERRY_TYPE_FLOAT32, tmp,
                                            sizeof tmp);
                rc =
                    isfinite(v) ? ferry_buf_append(s, tmp, (size_t)n) : json_str(s, tmp, (size_t)n);
                break;
            }
            case FERRY_TYPE_UTF8:
            case FERRY_TYPE_JSON:
            case FERRY_TYPE_DECIMAL_TEXT:
                p = ferry_col_bytes(b, f, r, &len);
                rc = json_str(s, p ? (const char *)p : "", len);
                break;
            case FERRY_TYPE_BINARY:
                p = ferry_col_bytes(b, f, r, &len);
                rc = json_base64(s, p, len);
                break;
            default:
                n = other_text(b, f, r, tmp, sizeof tmp);
                if (n < 0) return value_error(b, f, r, err);
                rc = json_str(s, tmp, (size_t)n);
                break;
            }
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(s, "}\n", 2);
        if (rc != FERRY_OK) return nomem(err);
        if (s->len >= FLUSH_AT) {
            rc = flush_stage(&j->base, err);
            if (rc != FERRY_OK) return rc;
        }
    }
    return flush_stage(&j->base, err);
}

const struct ferry__files_format ferry__files_jsonl = {
    .name = "jsonl",
    .ext = "jsonl",
    .per_batch_bytes = true,
    .open_part = jsonl_open,
    .write_batch = jsonl_write,
    .finish_part = wbase_finish,
    .free = jsonl_free,
};

/* ---- the table --------------------------------------------------------------------------- */

/* Parquet is defined in parquet_format.c (an adapter over parquet_writer.c). */
static const struct ferry__files_format *const formats[] = {&ferry__files_csv, &ferry__files_jsonl,
                                                            &ferry__files_parquet, NULL};
static const char *const format_names[] = {"csv", "jsonl", "parquet", NULL};

const struct ferry__files_format *ferry__files_format_find(const char *name)
{
    for (int i = 0; formats[i] != NULL; i++)
        if (strcmp(formats[i]->name, name) == 0) return formats[i];
    return NULL;
}

const char *const *ferry__files_format_names(void)
{
    return format_names;
}
