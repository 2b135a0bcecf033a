/* connectors/mysql/my_binlog.c - binary log event decoding (my_binlog.h). Pure: no I/O.
 * Every read goes through a bounds-checked cursor; the first failing field is named in the
 * error. Formats from the public MySQL protocol documentation ("Binlog Event", "Rows
 * Event", "TABLE_MAP_EVENT") and MariaDB's knowledge base. Called by the unit test (and,
 * once the stream exists, by the mysql source's cdc path). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "connectors/mysql/my_binlog.h"

struct rd {
    const uint8_t *p;
    size_t n, off;
    const char *bad; /* the field that failed first */
};

static bool need(struct rd *r, size_t k, const char *what)
{
    if (r->bad) return false;
    if (r->n - r->off < k) {
        r->bad = what;
        return false;
    }
    return true;
}

/* little-endian unsigned of k <= 8 bytes */
static uint64_t le(struct rd *r, size_t k, const char *what)
{
    if (!need(r, k, what)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++)
        v |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += k;
    return v;
}

/* big-endian unsigned of k <= 8 bytes */
static uint64_t be(struct rd *r, size_t k, const char *what)
{
    if (!need(r, k, what)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++)
        v = (v << 8) | r->p[r->off + i];
    r->off += k;
    return v;
}

static const uint8_t *bytes(struct rd *r, size_t k, const char *what)
{
    if (!need(r, k, what)) return NULL;
    const uint8_t *p = r->p + r->off;
    r->off += k;
    return p;
}

/* the protocol's length-encoded integer */
static uint64_t lenenc(struct rd *r, const char *what)
{
    uint64_t b = le(r, 1, what);
    if (b < 0xfb) return b;
    if (b == 0xfc) return le(r, 2, what);
    if (b == 0xfd) return le(r, 3, what);
    if (b == 0xfe) return le(r, 8, what);
    if (!r->bad) r->bad = what;
    return 0;
}

static int bad(struct ferry_error *err, const char *event, const char *what)
{
    return ferry_error_set(err, FERRY_EINVAL, "mysql", "binlog %s event: bad or truncated %s",
                           event, what);
}

bool ferry__my_bl_checksum_ok(const uint8_t *raw, size_t event_size)
{
    if (raw == NULL || event_size < FERRY_MY_BL_HEADER + 4 || event_size - 4 > UINT32_MAX)
        return false;
    size_t n = event_size - 4;
    uint8_t flags = raw[17]; /* (flags: bytes 17-18, little-endian) */
    if (raw[4] == FERRY_MY_BL_FORMAT_DESCRIPTION) flags &= (uint8_t)~1u;
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, raw, 17);
    c = crc32(c, &flags, 1);
    c = crc32(c, raw + 18, (uInt)(n - 18));
    uint32_t want = (uint32_t)raw[n] | (uint32_t)raw[n + 1] << 8 | (uint32_t)raw[n + 2] << 16 |
                    (uint32_t)raw[n + 3] << 24;
    return (uint32_t)c == want;
}

int ferry__my_bl_header(const uint8_t *p, size_t n, struct ferry_my_bl_header *h,
                        struct ferry_error *err)
{
    struct rd r = {p, n, 0, NULL};
    h->timestamp = (uint32_t)le(&r, 4, "timestamp");
    h->type = (uint8_t)le(&r, 1, "type");
    h->server_id = (uint32_t)le(&r, 4, "server id");
    h->event_size = (uint32_t)le(&r, 4, "event size");
    h->log_pos = (uint32_t)le(&r, 4, "log position");
    h->flags = (uint16_t)le(&r, 2, "flags");
    if (r.bad) return bad(err, "header of an", r.bad);
    if (h->event_size < FERRY_MY_BL_HEADER) return bad(err, "header of an", "event size");
    return FERRY_OK;
}

/* Metadata bytes per column type (TABLE_MAP_EVENT), kept in one uint16_t. */
static uint16_t read_meta(struct rd *r, uint8_t type)
{
    switch (type) {
    case 4:
    case 5:
    case 252:
    case 255:
    case 245:
    case 17:
    case 18:
    case 19:
        return (uint16_t)le(r, 1, "column metadata");
    case 15:
    case 253:
        return (uint16_t)le(r, 2, "column metadata");
    case 16:
    case 246:
    case 254:
    case 247:
    case 248: {
        uint16_t b0 = (uint16_t)le(r, 1, "column metadata");
        uint16_t b1 = (uint16_t)le(r, 1, "column metadata");
        return (uint16_t)(b0 << 8 | b1); /* bit: bits%8, bytes; decimal: precision, scale;
                                            string: real type, length */
    }
    default:
        return 0;
    }
}

static int copy_name(struct rd *r, char *out, size_t cap, const char *what)
{
    size_t len = (size_t)le(r, 1, what);
    const uint8_t *s = bytes(r, len + 1, what); /* the name and its NUL */
    if (!s || len >= cap || s[len] != 0) {
        if (!r->bad) r->bad = what;
        return -1;
    }
    memcpy(out, s, len);
    out[len] = 0;
    return 0;
}

/* COLUMN_NAME (optional metadata type 4): one length-encoded name per column. */
static void column_names(struct ferry_my_bl_table *t, const uint8_t *v, size_t n)
{
    struct rd r = {v, n, 0, NULL};
    size_t used = 0;
    for (uint32_t i = 0; i < t->n_cols; i++) {
        uint64_t len = lenenc(&r, "column name");
        const uint8_t *s = bytes(&r, (size_t)len, "column name");
        if (s == NULL || len + 1 > sizeof t->names - used) return;
        memcpy(t->names + used, s, (size_t)len);
        t->names[used + len] = '\0';
        t->name_off[i] = (uint32_t)used;
        used += (size_t)len + 1;
    }
    t->has_names = r.off == n;
}

int ferry__my_bl_table_map(const uint8_t *body, size_t n, int post_header_len,
                           struct ferry_my_bl_table *t, struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    memset(t, 0, sizeof *t);
    t->table_id = le(&r, post_header_len == 6 ? 4 : 6, "table id");
    le(&r, 2, "flags");
    copy_name(&r, t->db, sizeof t->db, "database name");
    copy_name(&r, t->table, sizeof t->table, "table name");
    uint64_t nc = lenenc(&r, "column count");
    if (!r.bad && (nc == 0 || nc > FERRY_MY_BL_MAX_COLS)) r.bad = "column count";
    if (r.bad) return bad(err, "TABLE_MAP", r.bad);
    t->n_cols = (uint32_t)nc;
    const uint8_t *ty = bytes(&r, nc, "column types");
    if (ty) memcpy(t->types, ty, nc);
    uint64_t mlen = lenenc(&r, "metadata length");
    size_t mend = r.off + (size_t)mlen;
    if (!r.bad && mlen > r.n - r.off) r.bad = "metadata length";
    for (uint32_t i = 0; !r.bad && i < t->n_cols; i++)
        t->meta[i] = read_meta(&r, t->types[i]);
    if (!r.bad && r.off != mend) r.bad = "metadata length";
    const uint8_t *nb = bytes(&r, (nc + 7) / 8, "null bitmap");
    if (nb) memcpy(t->nullable, nb, (nc + 7) / 8);
    if (r.bad) return bad(err, "TABLE_MAP", r.bad);
    /* optional metadata (binlog_row_metadata = MINIMAL or FULL): type, length, value */
    while (r.off < r.n && !r.bad) {
        uint8_t type = (uint8_t)le(&r, 1, "optional metadata type");
        uint64_t len = lenenc(&r, "optional metadata length");
        const uint8_t *v = bytes(&r, (size_t)len, "optional metadata");
        if (v != NULL && type == 4) column_names(t, v, (size_t)len);
    }
    if (r.bad) { /* a malformed optional part: the names are not trusted, the rest stands */
        t->has_names = false;
    }
    return FERRY_OK;
}

int ferry__my_bl_table_names(const uint8_t *body, size_t n, int post_header_len, uint64_t *table_id,
                             char *db, size_t db_cap, char *table, size_t table_cap,
                             struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    *table_id = le(&r, post_header_len == 6 ? 4 : 6, "table id");
    le(&r, 2, "flags");
    copy_name(&r, db, db_cap, "database name");
    copy_name(&r, table, table_cap, "table name");
    return r.bad ? bad(err, "TABLE_MAP", r.bad) : FERRY_OK;
}

/* QUERY_EVENT: post-header thread id (4), exec time (4), database length (1), error code
 * (2), status variables length (2); then the status variables, the database and its NUL,
 * and the statement up to the end of the body. */
int ferry__my_bl_query(const uint8_t *body, size_t n, const char **db, size_t *db_len,
                       const char **stmt, size_t *stmt_len, struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    le(&r, 8, "query post-header");
    size_t dlen = (size_t)le(&r, 1, "database length");
    le(&r, 2, "error code");
    size_t vlen = (size_t)le(&r, 2, "status variables length");
    bytes(&r, vlen, "status variables");
    const uint8_t *d = bytes(&r, dlen + 1, "database name");
    if (r.bad) return bad(err, "QUERY", r.bad);
    *db = (const char *)d;
    *db_len = dlen;
    *stmt = (const char *)body + r.off;
    *stmt_len = n - r.off;
    return FERRY_OK;
}

static bool bit(const uint8_t *map, uint32_t i)
{
    return (map[i / 8] >> (i % 8)) & 1;
}

static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

/* Appends the decimal digits of one group (width digits, zero-padded). */
static int put_group(char *out, int at, uint32_t v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        out[at + i] = (char)('0' + v % 10);
        v /= 10;
    }
    return at + width;
}

/* NEWDECIMAL: groups of 9 digits in 4 big-endian bytes, partial groups in fewer; the sign
 * bit inverted, negative numbers stored with every byte inverted. */
static void read_decimal(struct rd *r, uint16_t meta, struct ferry_my_bl_value *v)
{
    int prec = meta >> 8, scale = meta & 0xff;
    if (prec < 1 || prec > 65 || scale > 30 || scale > prec) {
        if (!r->bad) r->bad = "decimal metadata";
        return;
    }
    int intg = prec - scale, i0 = intg / 9, i0x = intg % 9, f0 = scale / 9, f0x = scale % 9;
    size_t size = (size_t)(i0 * 4 + dig2bytes[i0x] + f0 * 4 + dig2bytes[f0x]);
    const uint8_t *src = bytes(r, size, "decimal value");
    if (!src) return;
    uint8_t b[40];
    memcpy(b, src, size);
    bool neg = !(b[0] & 0x80);
    b[0] ^= 0x80;
    if (neg)
        for (size_t i = 0; i < size; i++)
            b[i] ^= 0xff;
    struct rd g = {b, size, 0, NULL};
    char digits[96];
    int at = 0;
    uint32_t x;
    if (i0x) {
        x = (uint32_t)be(&g, (size_t)dig2bytes[i0x], "decimal");
        at = put_group(digits, at, x, i0x);
        if (x >= 1000000000u) r->bad = "decimal value";
    }
    for (int i = 0; i < i0; i++) {
        x = (uint32_t)be(&g, 4, "decimal");
        if (x > 999999999u) r->bad = "decimal value";
        at = put_group(digits, at, x, 9);
    }
    int int_digits = at;
    for (int i = 0; i < f0; i++) {
        x = (uint32_t)be(&g, 4, "decimal");
        if (x > 999999999u) r->bad = "decimal value";
        at = put_group(digits, at, x, 9);
    }
    if (f0x) {
        x = (uint32_t)be(&g, (size_t)dig2bytes[f0x], "decimal");
        at = put_group(digits, at, x, f0x);
    }
    int lead = 0; /* leading zeros of the integer part, keeping one */
    while (lead < int_digits - 1 && digits[lead] == '0')
        lead++;
    bool nonzero = false;
    for (int i = 0; i < at; i++)
        nonzero |= digits[i] != '0';
    int o = 0;
    if (neg && nonzero) v->text[o++] = '-';
    if (int_digits == 0) v->text[o++] = '0';
    memcpy(v->text + o, digits + lead, (size_t)(int_digits - lead));
    o += int_digits - lead;
    if (scale) {
        v->text[o++] = '.';
        memcpy(v->text + o, digits + int_digits, (size_t)scale);
        o += scale;
    }
    v->text[o] = 0;
    v->kind = FERRY_MY_BL_DECIMAL;
}

/* fractional seconds of TIME2/DATETIME2/TIMESTAMP2: (fsp+1)/2 big-endian bytes */
static int frac_bytes(uint16_t fsp)
{
    return (fsp + 1) / 2;
}
static int frac_unit(int fb)
{
    return fb == 1 ? 10000 : fb == 2 ? 100 : 1;
}

static void read_datetime2(struct rd *r, uint16_t fsp, struct ferry_my_bl_value *v)
{
    int fb = frac_bytes(fsp);
    uint64_t ip = be(r, 5, "datetime value") - 0x8000000000ULL;
    uint64_t fr = be(r, (size_t)fb, "datetime fraction");
    uint64_t ymd = ip >> 17, hms = ip & 0x1ffff, ym = ymd >> 5;
    v->kind = FERRY_MY_BL_DATETIME;
    v->year = (int)(ym / 13);
    v->month = (int)(ym % 13);
    v->day = (int)(ymd & 31);
    v->hour = (int)(hms >> 12);
    v->minute = (int)((hms >> 6) & 63);
    v->second = (int)(hms & 63);
    v->micro = (int)fr * frac_unit(fb);
}

static void read_time2(struct rd *r, uint16_t fsp, struct ferry_my_bl_value *v)
{
    int fb = frac_bytes(fsp), bits = 8 * (3 + fb);
    uint64_t raw = be(r, (size_t)(3 + fb), "time value");
    int64_t s = (int64_t)raw - (int64_t)(1ULL << (bits - 1));
    uint64_t a = s < 0 ? (uint64_t)-s : (uint64_t)s;
    uint64_t hms = a >> (8 * fb), units = a & ((1ULL << (8 * fb)) - 1);
    v->kind = FERRY_MY_BL_TIME;
    v->negative = s < 0;
    v->hour = (int)((hms >> 12) & 0x3ff);
    v->minute = (int)((hms >> 6) & 63);
    v->second = (int)(hms & 63);
    v->micro = (int)units * frac_unit(fb);
}

/* CHAR/BINARY (type STRING): the real type and the maximum length from the metadata. */
static void string_meta(uint16_t meta, uint8_t *real, unsigned *max_len)
{
    unsigned b0 = meta >> 8, b1 = meta & 0xff;
    if ((b0 & 0x30) != 0x30) {
        *real = (uint8_t)(b0 | 0x30);
        *max_len = (((b0 & 0x30) ^ 0x30) << 4) | b1;
    } else {
        *real = (uint8_t)b0;
        *max_len = b1;
    }
}

static void read_value(struct rd *r, uint8_t type, uint16_t meta, struct ferry_my_bl_value *v)
{
    static const int int_width[] = {[1] = 1, [2] = 2, [3] = 4, [8] = 8, [9] = 3};
    v->type = type;
    switch (type) {
    case 1:
    case 2:
    case 3:
    case 8:
    case 9:
        v->kind = FERRY_MY_BL_INT;
        v->width = int_width[type];
        v->u = le(r, (size_t)v->width, "integer value");
        return;
    case 4: {
        uint32_t b = (uint32_t)le(r, 4, "float value");
        float f;
        memcpy(&f, &b, 4);
        v->kind = FERRY_MY_BL_FLOAT;
        v->d = f;
        return;
    }
    case 5: {
        uint64_t b = le(r, 8, "double value");
        memcpy(&v->d, &b, 8);
        v->kind = FERRY_MY_BL_FLOAT;
        return;
    }
    case 246:
        read_decimal(r, meta, v);
        return;
    case 10:
    case 14: {
        uint32_t x = (uint32_t)le(r, 3, "date value");
        v->kind = FERRY_MY_BL_DATE;
        v->day = (int)(x & 31);
        v->month = (int)((x >> 5) & 15);
        v->year = (int)(x >> 9);
        return;
    }
    case 12: { /* old DATETIME: YYYYMMDDhhmmss as a number */
        uint64_t x = le(r, 8, "datetime value");
        v->kind = FERRY_MY_BL_DATETIME;
        v->second = (int)(x % 100), x /= 100;
        v->minute = (int)(x % 100), x /= 100;
        v->hour = (int)(x % 100), x /= 100;
        v->day = (int)(x % 100), x /= 100;
        v->month = (int)(x % 100), x /= 100;
        v->year = (int)x;
        return;
    }
    case 18:
        read_datetime2(r, meta, v);
        return;
    case 7:
        v->kind = FERRY_MY_BL_TIMESTAMP;
        v->u = le(r, 4, "timestamp value");
        return;
    case 17: {
        int fb = frac_bytes(meta);
        v->kind = FERRY_MY_BL_TIMESTAMP;
        v->u = be(r, 4, "timestamp value");
        v->micro = (int)be(r, (size_t)fb, "timestamp fraction") * frac_unit(fb);
        return;
    }
    case 11: { /* old TIME: a signed HHMMSS number in 3 bytes */
        int32_t x = (int32_t)le(r, 3, "time value");
        if (x & 0x800000) x -= 0x1000000;
        v->kind = FERRY_MY_BL_TIME;
        v->negative = x < 0;
        if (x < 0) x = -x;
        v->second = x % 100;
        v->minute = x / 100 % 100;
        v->hour = x / 10000;
        return;
    }
    case 19:
        read_time2(r, meta, v);
        return;
    case 13: {
        int y = (int)le(r, 1, "year value");
        v->kind = FERRY_MY_BL_YEAR;
        v->year = y ? 1900 + y : 0;
        return;
    }
    case 16: {
        size_t nb = (meta & 0xff) + ((meta >> 8) ? 1 : 0);
        v->kind = FERRY_MY_BL_BIT;
        v->u = be(r, nb, "bit value");
        return;
    }
    case 15:
    case 253: {
        size_t len = (size_t)le(r, meta < 256 ? 1 : 2, "string length");
        v->kind = FERRY_MY_BL_BYTES;
        v->n = len;
        v->p = bytes(r, len, "string value");
        return;
    }
    case 254:
    case 247:
    case 248: {
        uint8_t real = (uint8_t)type;
        unsigned max_len = meta & 0xff;
        if (type == 254) string_meta(meta, &real, &max_len);
        if (real == 247 || real == 248) {
            v->kind = real == 247 ? FERRY_MY_BL_ENUM : FERRY_MY_BL_SET;
            if (!(meta & 0xff) || (meta & 0xff) > 8) {
                if (!r->bad) r->bad = "enum/set metadata";
                return;
            }
            v->u = le(r, meta & 0xff, "enum/set value");
            return;
        }
        size_t len = (size_t)le(r, max_len < 256 ? 1 : 2, "string length");
        v->kind = FERRY_MY_BL_BYTES;
        v->n = len;
        v->p = bytes(r, len, "string value");
        return;
    }
    case 249:
    case 250:
    case 251:
    case 252:
    case 255:
    case 245: {
        size_t pl = meta;
        if (pl < 1 || pl > 4) {
            if (!r->bad) r->bad = "blob metadata";
            return;
        }
        size_t len = (size_t)le(r, pl, "blob length");
        v->kind = FERRY_MY_BL_BYTES;
        v->mysql_json = type == 245;
        v->n = len;
        v->p = bytes(r, len, "blob value");
        return;
    }
    default:
        if (!r->bad) r->bad = "column type (not supported)";
        return;
    }
}

int ferry__my_bl_decimal_text(const uint8_t *p, size_t n, int precision, int scale, char *out,
                              size_t cap, size_t *used)
{
    struct rd r = {p, n, 0, NULL};
    struct ferry_my_bl_value v;
    memset(&v, 0, sizeof v);
    if (precision < 1 || precision > 65 || scale < 0 || scale > 30) return FERRY_EINVAL;
    read_decimal(&r, (uint16_t)(precision << 8 | scale), &v);
    if (r.bad || v.kind != FERRY_MY_BL_DECIMAL || strlen(v.text) + 1 > cap) return FERRY_EINVAL;
    memcpy(out, v.text, strlen(v.text) + 1);
    *used = r.off;
    return FERRY_OK;
}

int ferry__my_bl_rows_table_id(const uint8_t *body, size_t n, uint64_t *table_id,
                               struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    *table_id = le(&r, 6, "table id");
    return r.bad ? bad(err, "rows", r.bad) : FERRY_OK;
}

static uint32_t popcount(const uint8_t *map, uint32_t n)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        c += bit(map, i);
    return c;
}

static int image(struct rd *r, const struct ferry_my_bl_table *t, const uint8_t *present,
                 enum ferry_my_bl_image img, const struct ferry_my_bl_rows_cb *cb,
                 const char *event, struct ferry_error *err)
{
    const uint8_t *nulls = bytes(r, (popcount(present, t->n_cols) + 7) / 8, "row null bitmap");
    if (!nulls) return bad(err, event, r->bad);
    uint32_t k = 0; /* index among the present columns */
    for (uint32_t c = 0; c < t->n_cols; c++) {
        if (!bit(present, c)) continue;
        struct ferry_my_bl_value v;
        memset(&v, 0, sizeof v);
        v.type = t->types[c];
        if (bit(nulls, k++))
            v.kind = FERRY_MY_BL_NULL;
        else
            read_value(r, t->types[c], t->meta[c], &v);
        if (r->bad)
            return ferry_error_set(
                err, FERRY_EINVAL, "mysql",
                "binlog %s event: bad or truncated %s (table %s.%s, column %" PRIu32 ")", event,
                r->bad, t->db, t->table, c + 1);
        int rc = cb->on_value(cb->ctx, img, c, &v, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

int ferry__my_bl_rows(uint8_t type, const uint8_t *body, size_t n,
                      const struct ferry_my_bl_table *t, const struct ferry_my_bl_rows_cb *cb,
                      struct ferry_error *err)
{
    bool v2 = type >= FERRY_MY_BL_WRITE_ROWS_V2 && type <= FERRY_MY_BL_DELETE_ROWS_V2;
    bool v1 = type >= FERRY_MY_BL_WRITE_ROWS_V1 && type <= FERRY_MY_BL_DELETE_ROWS_V1;
    if (!v1 && !v2)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "binlog event type %u is not a rows event", (unsigned)type);
    bool update = type == FERRY_MY_BL_UPDATE_ROWS_V1 || type == FERRY_MY_BL_UPDATE_ROWS_V2;
    const char *event = update ? "UPDATE_ROWS"
                        : (type == FERRY_MY_BL_WRITE_ROWS_V1 || type == FERRY_MY_BL_WRITE_ROWS_V2)
                            ? "WRITE_ROWS"
                            : "DELETE_ROWS";
    struct rd r = {body, n, 0, NULL};
    uint64_t id = le(&r, 6, "table id");
    le(&r, 2, "flags");
    if (v2) {
        uint64_t extra = le(&r, 2, "extra data length");
        if (!r.bad && extra < 2) r.bad = "extra data length";
        bytes(&r, extra >= 2 ? (size_t)extra - 2 : 0, "extra data");
    }
    uint64_t nc = lenenc(&r, "column count");
    if (r.bad) return bad(err, event, r.bad);
    if (id != t->table_id || nc != t->n_cols)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "binlog %s event: table id %" PRIu64 " with %" PRIu64
                               " columns does not match the table map of %s.%s",
                               event, id, nc, t->db, t->table);
    const uint8_t *present = bytes(&r, (nc + 7) / 8, "columns bitmap");
    const uint8_t *present2 = update ? bytes(&r, (nc + 7) / 8, "update columns bitmap") : present;
    if (r.bad) return bad(err, event, r.bad);
    while (r.off < r.n) {
        int rc =
            image(&r, t, present, update ? FERRY_MY_BL_BEFORE : FERRY_MY_BL_AFTER, cb, event, err);
        if (rc == FERRY_OK && update)
            rc = image(&r, t, present2, FERRY_MY_BL_AFTER, cb, event, err);
        if (rc == FERRY_OK) rc = cb->on_row_end(cb->ctx, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

int ferry__my_bl_rotate(const uint8_t *body, size_t n, uint64_t *pos, char *file, size_t cap,
                        struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    *pos = le(&r, 8, "position");
    if (r.bad) return bad(err, "ROTATE", r.bad);
    size_t len = n - r.off;
    if (len == 0 || len >= cap) return bad(err, "ROTATE", "file name");
    memcpy(file, body + r.off, len);
    file[len] = 0;
    return FERRY_OK;
}

int ferry__my_bl_xid(const uint8_t *body, size_t n, uint64_t *xid, struct ferry_error *err)
{
    struct rd r = {body, n, 0, NULL};
    *xid = le(&r, 8, "xid");
    return r.bad ? bad(err, "XID", r.bad) : FERRY_OK;
}
