/* objstore/s3_client.c - the S3 client of the sinks that write to object storage (the
 * `s3` sink, the `iceberg` sink's s3:// warehouse): connection settings and credentials from
 * the sink config, SigV4-signed requests with retries, whole-object PUT / GET / DELETE,
 * ListObjectsV2, multipart uploads and their listing, conditional PUT (If-None-Match: *) and a
 * probe of whether the store honours it.
 *
 * Owns an HTTP client (net/http.h) and the credentials (wiped on close). Calls net, sigv4.c,
 * crc32c, the SHA-256 of ferry/digest.h. Called by s3_sink.c and iceberg/io.c on the thread
 * that owns the sink. */
#include "objstore/s3_client.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "net/http.h"
#include "objstore/sigv4.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"

struct ferry__s3_client {
    char *who;
    char *bucket, *region, *endpoint, *authority, *scheme;
    bool path_style;
    char *access_key, *secret_key, *token;
    int max_attempts;
    long last_status;
    struct ferry__http *http;
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 client: out of memory");
}

bool ferry__s3_xml_next(const char *xml, const char *tag, const char **from, struct ferry_buf *out)
{
    if (xml == NULL) return false; /* an empty answer body */
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = strstr(*from ? *from : xml, open);
    if (a == NULL) return false;
    a += strlen(open);
    const char *z = strstr(a, close);
    if (z == NULL) return false;
    *from = z + strlen(close);
    ferry_buf_reset(out);
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (const char *p = a; p < z; p++) {
        char c = *p;
        if (c == '&')
            for (size_t i = 0; i < sizeof ents / sizeof ents[0]; i++)
                if (strncmp(p, ents[i].ent, strlen(ents[i].ent)) == 0) {
                    c = ents[i].c;
                    p += strlen(ents[i].ent) - 1;
                    break;
                }
        if (ferry_buf_append(out, &c, 1) != FERRY_OK) return false;
    }
    if (out->data == NULL) ferry_buf_append(out, "", 0);
    return true;
}

static void crc_base64(uint32_t crc, char out[9])
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t b[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
    out[0] = al[b[0] >> 2];
    out[1] = al[((b[0] & 3) << 4) | (b[1] >> 4)];
    out[2] = al[((b[1] & 15) << 2) | (b[2] >> 6)];
    out[3] = al[b[2] & 63];
    out[4] = al[b[3] >> 2];
    out[5] = al[(b[3] & 3) << 4];
    out[6] = '=';
    out[7] = '=';
    out[8] = '\0';
}

/* Signs the request and sends it through the HTTP client (net/http.h), which retries it on
 * transport errors, 5xx and throttling with a jittered exponential backoff, at most
 * max_attempts tries (every S3 request ferry sends is safe to repeat: PUT, GET, DELETE and
 * HEAD are idempotent, a repeated multipart create leaves an upload the uploads listing
 * finds, a repeated complete answers NoSuchUpload). A signature holds for 15 minutes, longer
 * than every retry. FERRY_OK with *status once an answer came. */
static int send_signed(struct ferry__s3_client *s, const struct ferry__s3_req *q, long *status,
                       struct ferry_buf *resp, struct ferry_error *err)
{
    struct ferry_buf path, url, auth;
    ferry_buf_init(&path, 0);
    ferry_buf_init(&url, 0);
    ferry_buf_init(&auth, 0);
    char *lines[12] = {0};
    int rc = ferry_buf_append(&path, "/", 1);
    if (rc == FERRY_OK && s->path_style) {
        rc = ferry__s3_uri_encode(&path, s->bucket, false);
        if (rc == FERRY_OK && q->key) rc = ferry_buf_append(&path, "/", 1);
    }
    if (rc == FERRY_OK && q->key) rc = ferry__s3_uri_encode(&path, q->key, true);
    char host[512];
    if (s->path_style)
        snprintf(host, sizeof host, "%s", s->authority);
    else
        snprintf(host, sizeof host, "%s.%s", s->bucket, s->authority);
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&url, "%s://%s%s%s%s", s->scheme, host, path.data,
                              q->query[0] ? "?" : "", q->query);
    uint8_t digest[32];
    struct ferry_sha256 sh;
    ferry_sha256_init(&sh);
    ferry_sha256_update(&sh, q->body ? q->body : "", q->len);
    ferry_sha256_final(&sh, digest);
    char payload[65], amz_date[20], crc64[9];
    ferry__s3_hex(digest, 32, payload);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    crc_base64(ferry_crc32c(q->body ? q->body : "", q->len), crc64);
    struct ferry__s3_header h[10];
    int n = 0;
    h[n++] = (struct ferry__s3_header){"host", host};
    h[n++] = (struct ferry__s3_header){"x-amz-content-sha256", payload};
    h[n++] = (struct ferry__s3_header){"x-amz-date", amz_date};
    if (q->checksum) h[n++] = (struct ferry__s3_header){"x-amz-checksum-crc32c", crc64};
    if (q->declare_crc32c) h[n++] = (struct ferry__s3_header){"x-amz-checksum-algorithm", "CRC32C"};
    if (q->content_type) h[n++] = (struct ferry__s3_header){"content-type", q->content_type};
    if (q->if_none_match) h[n++] = (struct ferry__s3_header){"if-none-match", "*"};
    if (s->token) h[n++] = (struct ferry__s3_header){"x-amz-security-token", s->token};
    struct ferry__s3_sign sg = {q->method, path.data,     q->query,     h,
                                n,         payload,       amz_date,     s->region,
                                "s3",      s->access_key, s->secret_key};
    if (rc == FERRY_OK)
        rc = ferry__s3_sigv4(&sg, &auth, NULL, err) == FERRY_OK ? FERRY_OK : FERRY_ENOMEM;
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        lines[i] = ferry_asprintf("%s: %s", h[i].name, h[i].value);
        if (lines[i] == NULL) rc = FERRY_ENOMEM;
    }
    if (rc == FERRY_OK) {
        lines[n] = ferry_asprintf("authorization: %s", auth.data);
        if (lines[n] == NULL) rc = FERRY_ENOMEM;
        /* a ranged GET (the s3 source's Parquet reads); not signed, as SigV4 allows */
        if (rc == FERRY_OK && q->range != NULL) {
            lines[n + 1] = ferry_asprintf("Range: %.80s", q->range);
            if (lines[n + 1] == NULL) rc = FERRY_ENOMEM;
        }
    }
    if (rc != FERRY_OK) {
        rc = nomem(err);
    } else {
        char name[600];
        snprintf(name, sizeof name, "s3://%s/%s (%s)", s->bucket, q->key ? q->key : "",
                 s->endpoint);
        struct ferry__http_req hq = {.method = q->method,
                                     .url = url.data,
                                     .headers = (const char *const *)lines,
                                     .body = q->body,
                                     .len = q->len,
                                     .idempotent = true,
                                     .name = name};
        rc = ferry__http_do(s->http, &hq, resp, status, err);
    }
    for (int i = 0; i < 12; i++) ferry_secret_free(lines[i]);
    if (auth.data) memset(auth.data, 0, auth.len);
    ferry_buf_release(&path);
    ferry_buf_release(&url);
    ferry_buf_release(&auth);
    return rc;
}

/* A request with retries (send_signed). FERRY_OK on 2xx; FERRY_ENOTFOUND on 404 (no message
 * when quiet_404); else an error naming the method, the object and S3's code and message
 * (never a header value). */
int ferry__s3_call(struct ferry__s3_client *s, const struct ferry__s3_req *q, bool quiet_404, struct ferry_buf *resp,
                   struct ferry_error *err)
{
    long st = 0;
    s->last_status = 0;
    int rc = send_signed(s, q, &st, resp, err);
    s->last_status = st;
    if (rc != FERRY_OK) return rc;
    if (st >= 200 && st < 300) return FERRY_OK;
    const char *what = q->key ? q->key : "";
    if (st == 404 && quiet_404) return FERRY_ENOTFOUND;
    if (q->if_none_match && (st == 412 || st == 409))
        return ferry_error_set(err, FERRY_ECONFLICT, "s3", "%s: s3://%s/%s exists already",
                               s->who, s->bucket, what);
    struct ferry_buf code, msg;
    ferry_buf_init(&code, 4096);
    ferry_buf_init(&msg, 4096);
    const char *from = NULL;
    bool has_code = resp->data && ferry__s3_xml_next(resp->data, "Code", &from, &code);
    from = NULL;
    bool has_msg = resp->data && ferry__s3_xml_next(resp->data, "Message", &from, &msg);
    rc = ferry_error_set(
        err, st == 404 ? FERRY_ENOTFOUND : FERRY_ESINK, "s3",
        "%s: %s s3://%s/%s: HTTP %ld %s%s%s%s", s->who, q->method, s->bucket, what, st,
        has_code ? code.data : "", has_msg ? ": " : "", has_msg ? msg.data : "",
        st == 403 ? " (check access_key_id and secret_access_key, region and bucket)" : "");
    ferry_buf_release(&code);
    ferry_buf_release(&msg);
    if (st == 429 || st >= 500) ferry_error_set_transient(err); /* a run may be retried */
    return rc;
}

long ferry__s3_last_status(const struct ferry__s3_client *c)
{
    return c->last_status;
}

bool ferry__s3_last_header(struct ferry__s3_client *c, const char *name, char *out, size_t cap)
{
    return ferry__http_header(c->http, name, out, cap);
}

const char *ferry__s3_client_bucket(const struct ferry__s3_client *c)
{
    return c->bucket;
}

const char *ferry__s3_client_endpoint(const struct ferry__s3_client *c)
{
    return c->endpoint;
}

/* ---- open / close ------------------------------------------------------------------------ */

void ferry__s3_client_close(struct ferry__s3_client *c)
{
    if (c == NULL) return;
    ferry__http_close(c->http);
    ferry_free(c->who);
    ferry_free(c->bucket);
    ferry_free(c->region);
    ferry_free(c->endpoint);
    ferry_free(c->authority);
    ferry_free(c->scheme);
    ferry_secret_free(c->access_key);
    ferry_secret_free(c->secret_key);
    ferry_secret_free(c->token);
    ferry_free(c);
}

/* access_key_id / secret_access_key references, else the standard AWS variables. */
static int credentials(struct ferry_cfg *cfg, struct ferry__s3_client *s, struct ferry_error *err)
{
    int rc = ferry_cfg_secret(cfg, "access_key_id", false, true, &s->access_key, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_secret(cfg, "secret_access_key", false, false, &s->secret_key, err);
    if (rc == FERRY_OK) rc = ferry_cfg_secret(cfg, "session_token", false, false, &s->token, err);
    if (rc != FERRY_OK) return rc;
    if ((s->access_key == NULL) != (s->secret_key == NULL))
        return ferry_cfg_error(err, cfg,
                               "access_key_id and secret_access_key go together (or neither: "
                               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
    if (s->access_key == NULL) {
        const char *id = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
        const char *tk = getenv("AWS_SESSION_TOKEN");
        if (id == NULL || sk == NULL || id[0] == '\0' || sk[0] == '\0')
            return ferry_cfg_error(err, cfg,
                                   "%s: no credentials: set access_key_id and "
                                   "secret_access_key (env:NAME or file:PATH) or "
                                   "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                                   s->who);
        s->access_key = ferry_strdup(id);
        s->secret_key = ferry_strdup(sk);
        if (tk && tk[0] && s->token == NULL) s->token = ferry_strdup(tk);
        if (s->access_key == NULL || s->secret_key == NULL) return nomem(err);
    }
    return FERRY_OK;
}

static bool plain_name(const char *v)
{
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    return v[0] != '\0';
}

int ferry__s3_client_open(struct ferry_cfg *cfg, const char *bucket, struct ferry_cfg *bucket_node,
                          const char *who, struct ferry__s3_client **out, struct ferry_error *err)
{
    *out = NULL;
    const char *region = "us-east-1", *endpoint = NULL;
    bool path_style = false;
    int64_t attempts = 6;
    int rc = ferry_cfg_str(cfg, "region", false, &region, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "endpoint", false, &endpoint, err);
    if (rc == FERRY_OK) rc = ferry_cfg_bool(cfg, "path_style", false, &path_style, err);
    if (rc == FERRY_OK) rc = ferry_cfg_int(cfg, "max_attempts", false, 1, 20, &attempts, err);
    if (rc != FERRY_OK) return rc;
    if (!plain_name(bucket))
        return ferry_cfg_error(err, bucket_node ? bucket_node : cfg,
                               "must be a bucket name (lowercase letters, digits, '-', '.')");
    struct ferry__s3_client *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return nomem(err);
    s->who = ferry_strdup(who);
    if (s->who == NULL) {
        ferry__s3_client_close(s);
        return nomem(err);
    }
    rc = credentials(cfg, s, err);
    if (rc != FERRY_OK) {
        ferry__s3_client_close(s);
        return rc;
    }
    char *ep =
        endpoint ? ferry_strdup(endpoint) : ferry_asprintf("https://s3.%s.amazonaws.com", region);
    s->bucket = ferry_strdup(bucket);
    s->region = ferry_strdup(region);
    s->endpoint = ep;
    if (!ep || !s->bucket || !s->region) {
        ferry__s3_client_close(s);
        return nomem(err);
    }
    const char *sep = strstr(ep, "://");
    size_t el = strlen(ep);
    while (el > 0 && ep[el - 1] == '/')
        ep[--el] = '\0';
    if (sep == NULL || (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) ||
        strchr(sep + 3, '/') != NULL || sep[3] == '\0') {
        ferry__s3_client_close(s);
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "endpoint"),
                               "must be http://HOST[:PORT] or https://HOST[:PORT]");
    }
    s->scheme = ferry_strndup(ep, (size_t)(sep - ep));
    s->authority = ferry_strdup(sep + 3);
    s->path_style = path_style;
    s->max_attempts = (int)attempts;
    if (s->scheme == NULL || s->authority == NULL) {
        ferry__s3_client_close(s);
        return nomem(err);
    }
    struct ferry__http_opts ho = {.what = s->who,
                                  .origin = "s3",
                                  .connect_timeout_ms = 10000,
                                  .low_speed_time_s = 30,
                                  .max_attempts = s->max_attempts,
                                  .body_cap = (size_t)1 << 30};
    rc = ferry__http_open(&ho, &s->http, err);
    if (rc != FERRY_OK) {
        ferry__s3_client_close(s);
        return rc;
    }
    *out = s;
    return FERRY_OK;
}

/* ---- objects ------------------------------------------------------------------------------ */

static int put(struct ferry__s3_client *c, const char *key, const void *p, size_t n,
               const char *content_type, bool if_none_match, struct ferry_error *err)
{
    struct ferry_buf resp;
    ferry_buf_init(&resp, 0);
    struct ferry__s3_req q = {.method = "PUT",
                              .key = key,
                              .query = "",
                              .body = p,
                              .len = n,
                              .checksum = true,
                              .if_none_match = if_none_match,
                              .content_type = content_type};
    int rc = ferry__s3_call(c, &q, false, &resp, err);
    ferry_buf_release(&resp);
    return rc;
}

int ferry__s3_put(struct ferry__s3_client *c, const char *key, const void *p, size_t n,
                  const char *content_type, struct ferry_error *err)
{
    return put(c, key, p, n, content_type, false, err);
}

int ferry__s3_put_new(struct ferry__s3_client *c, const char *key, const void *p, size_t n,
                      const char *content_type, struct ferry_error *err)
{
    return put(c, key, p, n, content_type, true, err);
}

int ferry__s3_get(struct ferry__s3_client *c, const char *key, struct ferry_buf *resp,
                  struct ferry_error *err)
{
    struct ferry__s3_req q = {.method = "GET", .key = key, .query = ""};
    int rc = ferry__s3_call(c, &q, true, resp, err);
    if (rc == FERRY_OK && ferry_buf_reserve(resp, 1) != FERRY_OK) rc = nomem(err);
    if (rc == FERRY_OK) resp->data[resp->len] = '\0';
    return rc;
}

int ferry__s3_delete(struct ferry__s3_client *c, const char *key, struct ferry_error *err)
{
    struct ferry_buf resp;
    ferry_buf_init(&resp, 0);
    struct ferry__s3_req q = {.method = "DELETE", .key = key, .query = ""};
    int rc = ferry__s3_call(c, &q, true, &resp, err);
    if (rc == FERRY_ENOTFOUND) rc = FERRY_OK;
    ferry_buf_release(&resp);
    return rc;
}

int ferry__s3_list_each(struct ferry__s3_client *c, const char *prefix,
                        int (*each)(const char *key, void *arg, struct ferry_error *err),
                        void *arg, struct ferry_error *err)
{
    struct ferry_buf qs, resp, key, tok, prev;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 64 << 20);
    ferry_buf_init(&key, 0);
    ferry_buf_init(&tok, 0);
    ferry_buf_init(&prev, 0);
    int rc = FERRY_OK;
    bool more = true;
    while (rc == FERRY_OK && more) {
        ferry_buf_reset(&qs);
        int brc = FERRY_OK;
        if (tok.len) {
            brc = ferry_buf_printf(&qs, "continuation-token=");
            if (brc == FERRY_OK) brc = ferry__s3_uri_encode(&qs, tok.data, false);
            if (brc == FERRY_OK) brc = ferry_buf_printf(&qs, "&");
        }
        if (brc == FERRY_OK) brc = ferry_buf_printf(&qs, "list-type=2&prefix=");
        if (brc == FERRY_OK) brc = ferry__s3_uri_encode(&qs, prefix, false);
        if (brc != FERRY_OK) {
            rc = nomem(err);
            break;
        }
        struct ferry__s3_req q = {.method = "GET", .key = NULL, .query = qs.data};
        rc = ferry__s3_call(c, &q, false, &resp, err);
        if (rc != FERRY_OK) break;
        const char *from = NULL;
        while (rc == FERRY_OK && resp.data && ferry__s3_xml_next(resp.data, "Key", &from, &key))
            rc = each(key.data, arg, err);
        from = NULL;
        struct ferry_buf trunc;
        ferry_buf_init(&trunc, 0);
        more = resp.data && ferry__s3_xml_next(resp.data, "IsTruncated", &from, &trunc) &&
               strcmp(trunc.data, "true") == 0;
        ferry_buf_release(&trunc);
        from = NULL;
        /* a server that hands back the token it was given would be listed forever */
        ferry_buf_reset(&prev);
        if (more && ferry_buf_append(&prev, tok.data ? tok.data : "", tok.len) != FERRY_OK)
            rc = nomem(err);
        if (rc == FERRY_OK && more &&
            !ferry__s3_xml_next(resp.data, "NextContinuationToken", &from, &tok))
            more = false;
        if (rc == FERRY_OK && more && strcmp(prev.data, tok.data) == 0)
            rc = ferry_error_set(err, FERRY_ESINK, "s3",
                                 "%s: listing s3://%s/%s: the server repeated the continuation "
                                 "token of the page before",
                                 c->who, c->bucket, prefix);
    }
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    ferry_buf_release(&key);
    ferry_buf_release(&tok);
    ferry_buf_release(&prev);
    return rc;
}

static int append_key(const char *key, void *arg, struct ferry_error *err)
{
    return json_array_append_new(arg, json_string(key)) == 0 ? FERRY_OK : nomem(err);
}

int ferry__s3_list(struct ferry__s3_client *c, const char *prefix, json_t *out,
                   struct ferry_error *err)
{
    return ferry__s3_list_each(c, prefix, append_key, out, err);
}

int ferry__s3_probe_conditional(struct ferry__s3_client *c, const char *probe_key, bool *ok,
                                struct ferry_error *err)
{
    *ok = false;
    static const char body[] = "ferry: does this store honour If-None-Match?\n";
    int rc = ferry__s3_delete(c, probe_key, err);
    if (rc == FERRY_OK) rc = ferry__s3_put_new(c, probe_key, body, sizeof body - 1, NULL, err);
    if (rc == FERRY_OK) {
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        int again = ferry__s3_put_new(c, probe_key, body, sizeof body - 1, NULL, &e);
        if (again == FERRY_ECONFLICT)
            *ok = true;
        else if (again != FERRY_OK)
            rc = ferry_error_set(err, e.code, "s3", "%s", e.message);
    }
    struct ferry_error e2;
    memset(&e2, 0, sizeof e2);
    if (ferry__s3_delete(c, probe_key, &e2) != FERRY_OK)
        ferry_log(FERRY_LOG_WARN, "%s: probe object s3://%s/%s left behind: %s", c->who,
                  c->bucket, probe_key, e2.message);
    return rc;
}

/* ---- multipart ---------------------------------------------------------------------------- */

int ferry__s3_multipart_create(struct ferry__s3_client *c, const char *key, char **upload_id,
                               struct ferry_error *err)
{
    *upload_id = NULL;
    struct ferry_buf resp, id;
    ferry_buf_init(&resp, 0);
    ferry_buf_init(&id, 0);
    struct ferry__s3_req q = {
        .method = "POST", .key = key, .query = "uploads=", .declare_crc32c = true};
    int rc = ferry__s3_call(c, &q, false, &resp, err);
    const char *from = NULL;
    if (rc == FERRY_OK && !(resp.data && ferry__s3_xml_next(resp.data, "UploadId", &from, &id)))
        rc = ferry_error_set(err, FERRY_ESINK, "s3",
                             "%s: POST s3://%s/%s?uploads: no UploadId in the answer", c->who,
                             c->bucket, key);
    if (rc == FERRY_OK) {
        *upload_id = ferry_strdup(id.data);
        if (*upload_id == NULL) rc = nomem(err);
    }
    ferry_buf_release(&resp);
    ferry_buf_release(&id);
    return rc;
}

int ferry__s3_multipart_part(struct ferry__s3_client *c, const char *key, const char *upload_id,
                             int n, const void *p, size_t len, struct ferry_buf *parts,
                             struct ferry_error *err)
{
    struct ferry_buf qs, resp;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 0);
    if (ferry_buf_printf(&qs, "partNumber=%d&uploadId=", n) != FERRY_OK ||
        ferry__s3_uri_encode(&qs, upload_id, false) != FERRY_OK) {
        ferry_buf_release(&qs);
        return nomem(err);
    }
    struct ferry__s3_req q = {
        .method = "PUT", .key = key, .query = qs.data, .body = p, .len = len, .checksum = true};
    int rc = ferry__s3_call(c, &q, false, &resp, err);
    if (rc == FERRY_OK) {
        char etag[256] = "";
        ferry__s3_last_header(c, "ETag", etag, sizeof etag);
        char crc64[9];
        crc_base64(ferry_crc32c(p, len), crc64);
        struct ferry_buf esc;
        ferry_buf_init(&esc, 0);
        for (const char *e = etag; *e; e++)
            ferry_buf_printf(&esc, "%s",
                             *e == '"'   ? "&quot;"
                             : *e == '&' ? "&amp;"
                                         : (char[]){*e, 0});
        if (ferry_buf_printf(parts,
                             "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag>"
                             "<ChecksumCRC32C>%s</ChecksumCRC32C></Part>",
                             n, esc.data ? esc.data : "", crc64) != FERRY_OK)
            rc = nomem(err);
        ferry_buf_release(&esc);
    }
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    return rc;
}

int ferry__s3_multipart_complete(struct ferry__s3_client *c, const char *key,
                                 const char *upload_id, const struct ferry_buf *parts,
                                 struct ferry_error *err)
{
    struct ferry_buf qs, resp, body;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 0);
    ferry_buf_init(&body, 0);
    int rc = FERRY_OK;
    if (ferry_buf_printf(&qs, "uploadId=") != FERRY_OK ||
        ferry__s3_uri_encode(&qs, upload_id, false) != FERRY_OK ||
        ferry_buf_printf(&body,
                         "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/"
                         "2006-03-01/\">%s</CompleteMultipartUpload>",
                         parts->data ? parts->data : "") != FERRY_OK)
        rc = nomem(err);
    struct ferry__s3_req q = {.method = "POST",
                              .key = key,
                              .query = qs.data,
                              .body = body.data,
                              .len = body.len,
                              .content_type = "application/xml"};
    if (rc == FERRY_OK) rc = ferry__s3_call(c, &q, false, &resp, err);
    /* CompleteMultipartUpload may answer 200 with an error in the body. */
    const char *from = NULL;
    struct ferry_buf code;
    ferry_buf_init(&code, 0);
    if (rc == FERRY_OK && resp.data && strstr(resp.data, "<Error>") &&
        ferry__s3_xml_next(resp.data, "Code", &from, &code))
        rc = ferry_error_set(err, FERRY_ESINK, "s3", "%s: completing the upload of s3://%s/%s: %s",
                             c->who, c->bucket, key, code.data);
    ferry_buf_release(&code);
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    ferry_buf_release(&body);
    return rc;
}

int ferry__s3_multipart_abort(struct ferry__s3_client *c, const char *key, const char *upload_id,
                              struct ferry_error *err)
{
    struct ferry_buf qs, resp;
    ferry_buf_init(&qs, 0);
    ferry_buf_init(&resp, 0);
    int rc = ferry_buf_append(&qs, "uploadId=", 9);
    if (rc == FERRY_OK) rc = ferry__s3_uri_encode(&qs, upload_id, false);
    if (rc != FERRY_OK) {
        ferry_buf_release(&qs);
        return nomem(err);
    }
    struct ferry__s3_req q = {.method = "DELETE", .key = key, .query = qs.data};
    rc = ferry__s3_call(c, &q, true, &resp, err);
    if (rc == FERRY_ENOTFOUND) rc = FERRY_OK;
    ferry_buf_release(&qs);
    ferry_buf_release(&resp);
    return rc;
}

/* ISO 8601 as S3 writes Initiated: "2026-11-30T18:40:47.123Z" (fraction optional). */
static int64_t iso_ms(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t ms = 0;
    const char *p = s + n;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (digits++ < 3) ms = ms * 10 + (*p - '0');
        for (; digits < 3; digits++)
            ms *= 10;
    }
    if (*p != 'Z' && strncmp(p, "+00:00", 6) != 0) return -1;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? -1 : (int64_t)t * 1000 + ms;
}

/* One page's query: the parameters in canonical (sorted) order. */
static int uploads_query(struct ferry_buf *qs, const char *prefix, const struct ferry_buf *km,
                         const struct ferry_buf *um)
{
    ferry_buf_reset(qs);
    int rc = FERRY_OK;
    if (km->len) {
        rc = ferry_buf_printf(qs, "key-marker=");
        if (rc == FERRY_OK) rc = ferry__s3_uri_encode(qs, km->data, false);
        if (rc == FERRY_OK) rc = ferry_buf_printf(qs, "&");
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(qs, "prefix=");
    if (rc == FERRY_OK) rc = ferry__s3_uri_encode(qs, prefix, false);
    if (rc == FERRY_OK && um->len) {
        rc = ferry_buf_printf(qs, "&upload-id-marker=");
        if (rc == FERRY_OK) rc = ferry__s3_uri_encode(qs, um->data, false);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(qs, "&uploads=");
    return rc;
}

int ferry__s3_list_uploads_each(struct ferry__s3_client *c, const char *prefix,
                                ferry__s3_upload_fn each, void *arg, struct ferry_error *err)
{
    struct ferry_buf qs, resp, upl, key, id, when, km, um, flag;
    struct ferry_buf *all[] = {&qs, &resp, &upl, &key, &id, &when, &km, &um, &flag};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ferry_buf_init(all[i], 0);
    ferry_buf_init(&resp, 64 << 20);
    int rc = FERRY_OK;
    bool more = true;
    while (rc == FERRY_OK && more) {
        if (uploads_query(&qs, prefix, &km, &um) != FERRY_OK) {
            rc = nomem(err);
            break;
        }
        struct ferry__s3_req q = {.method = "GET", .key = NULL, .query = qs.data};
        rc = ferry__s3_call(c, &q, false, &resp, err);
        long st = c->last_status;
        if (rc != FERRY_OK) {
            /* a refusal, not a failure: the store does not offer the listing */
            if (st == 501 || (st >= 400 && st < 500 && st != 408 && st != 429)) {
                rc = FERRY_EUNSUPPORTED;
                if (err) err->code = rc;
            }
            break;
        }
        const char *from = NULL;
        while (rc == FERRY_OK && resp.data &&
               ferry__s3_xml_next(resp.data, "Upload", &from, &upl)) {
            const char *f = NULL;
            if (!ferry__s3_xml_next(upl.data, "Key", &f, &key)) continue;
            f = NULL;
            if (!ferry__s3_xml_next(upl.data, "UploadId", &f, &id)) continue;
            f = NULL;
            int64_t ms =
                ferry__s3_xml_next(upl.data, "Initiated", &f, &when) ? iso_ms(when.data) : -1;
            rc = each(key.data, id.data, ms, arg, err);
        }
        if (rc != FERRY_OK) break;
        from = NULL;
        more = resp.data && ferry__s3_xml_next(resp.data, "IsTruncated", &from, &flag) &&
               strcmp(flag.data, "true") == 0;
        if (!more) break;
        /* the next page starts after these markers; a server that repeats them would be
         * listed forever */
        char *pk = ferry_strdup(km.len ? km.data : ""), *pu = ferry_strdup(um.len ? um.data : "");
        ferry_buf_reset(&km);
        ferry_buf_reset(&um);
        from = NULL;
        bool got = ferry__s3_xml_next(resp.data, "NextKeyMarker", &from, &km);
        from = NULL;
        if (!ferry__s3_xml_next(resp.data, "NextUploadIdMarker", &from, &um)) ferry_buf_reset(&um);
        if (pk == NULL || pu == NULL)
            rc = nomem(err);
        else if (!got || km.len == 0)
            more = false;
        else if (strcmp(pk, km.data) == 0 && strcmp(pu, um.len ? um.data : "") == 0)
            rc = ferry_error_set(err, FERRY_ESINK, "s3",
                                 "%s: listing the multipart uploads under s3://%s/%s: the server "
                                 "repeated the markers of the page before",
                                 c->who, c->bucket, prefix);
        ferry_free(pk);
        ferry_free(pu);
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ferry_buf_release(all[i]);
    return rc;
}
