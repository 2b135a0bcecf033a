/* objstore/sigv4.c - AWS Signature Version 4 (the s3 sink's request signing).
 *
 * Owns nothing beyond the call: builds the canonical request, the string to sign and the
 * signing key (HMAC chain "AWS4"+secret -> date -> region -> service -> "aws4_request"),
 * then the Authorization header value. Calls ferry_sha256_* and ferry_hmac_sha256 only.
 * Called by s3_client.c for every request (the s3 sink, the iceberg sink's S3 warehouse), and
 * by tests/unit/test_s3_sigv4.c against AWS's
 * published example. The secret never leaves this function except as HMAC output. */
#include "objstore/sigv4.h"
#include <stdlib.h>
#include <string.h>

void ferry__s3_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int ferry__s3_uri_encode(struct ferry_buf *b, const char *s, bool keep_slash)
{
    static const char digits[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        bool keep = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                    (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' || *c == '~' ||
                    (keep_slash && *c == '/');
        char esc[3] = {'%', digits[*c >> 4], digits[*c & 15]};
        int rc = keep ? ferry_buf_append(b, c, 1) : ferry_buf_append(b, esc, 3);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

static int by_name(const void *a, const void *b)
{
    const struct ferry__s3_header *x = a, *y = b;
    return strcmp(x->name, y->name);
}

int ferry__s3_sigv4(const struct ferry__s3_sign *r, struct ferry_buf *auth,
                    struct ferry_buf *canonical, struct ferry_error *err)
{
    if (r->n_headers <= 0 || r->n_headers > 32 || strlen(r->amz_date) != 16)
        return ferry_error_set(err, FERRY_EINVAL, "s3", "s3 sink: malformed request to sign");
    struct ferry__s3_header h[32];
    memcpy(h, r->headers, sizeof h[0] * (size_t)r->n_headers);
    qsort(h, (size_t)r->n_headers, sizeof h[0], by_name);
    struct ferry_buf c, signed_names, sts;
    ferry_buf_init(&c, 0);
    ferry_buf_init(&signed_names, 0);
    ferry_buf_init(&sts, 0);
    int rc = ferry_buf_printf(&c, "%s\n%s\n%s\n", r->method, r->uri, r->query);
    for (int i = 0; i < r->n_headers && rc == FERRY_OK; i++) {
        rc = ferry_buf_printf(&c, "%s:%s\n", h[i].name, h[i].value);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&signed_names, "%s%s", i ? ";" : "", h[i].name);
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&c, "\n%s\n%s", signed_names.len ? signed_names.data : "",
                              r->payload_sha256);
    char date[9];
    memcpy(date, r->amz_date, 8);
    date[8] = '\0';
    char creq_hex[65];
    if (rc == FERRY_OK) {
        ferry_sha256_hex(c.data, c.len, creq_hex);
        rc = ferry_buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", r->amz_date,
                              date, r->region, r->service, creq_hex);
    }
    if (rc == FERRY_OK) {
        size_t sl = strlen(r->secret_key);
        char *k0 = ferry_malloc(sl + 5);
        if (k0 == NULL) {
            rc = FERRY_ENOMEM;
        } else {
            memcpy(k0, "AWS4", 4);
            memcpy(k0 + 4, r->secret_key, sl + 1);
            uint8_t k[32], sig[32];
            ferry_hmac_sha256(k0, sl + 4, date, 8, k);
            ferry_hmac_sha256(k, 32, r->region, strlen(r->region), k);
            ferry_hmac_sha256(k, 32, r->service, strlen(r->service), k);
            ferry_hmac_sha256(k, 32, "aws4_request", 12, k);
            ferry_hmac_sha256(k, 32, sts.data, sts.len, sig);
            char sig_hex[65];
            ferry__s3_hex(sig, 32, sig_hex);
            memset(k0, 0, sl + 4);
            memset(k, 0, sizeof k);
            ferry_free(k0);
            rc = ferry_buf_printf(auth,
                                  "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
                                  "SignedHeaders=%s, Signature=%s",
                                  r->access_key, date, r->region, r->service, signed_names.data,
                                  sig_hex);
        }
    }
    if (rc == FERRY_OK && canonical != NULL) rc = ferry_buf_append(canonical, c.data, c.len);
    ferry_buf_release(&c);
    ferry_buf_release(&signed_names);
    ferry_buf_release(&sts);
    if (rc != FERRY_OK) return ferry_error_set(err, FERRY_ENOMEM, "s3", "s3 sink: out of memory");
    return FERRY_OK;
}
