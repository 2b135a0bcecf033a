/* objstore/sigv4.h - AWS Signature Version 4 for s3_client.c, private to
 * src/objstore/ (and its unit test). Written from AWS's public description of the
 * signing process: canonical request, string to sign, derived signing key. */
#ifndef FERRY_CONNECTORS_S3_SIGV4_H
#define FERRY_CONNECTORS_S3_SIGV4_H

#include <stdbool.h>
#include "ferry/core.h"
#include "ferry/error.h"

struct ferry__s3_header {
    const char *name;  /* lowercase */
    const char *value; /* trimmed, single spaces */
};

struct ferry__s3_sign {
    const char *method; /* "PUT" */
    const char *uri;    /* canonical URI: already URI-encoded path, "/" for none */
    const char *query;  /* canonical query string (sorted, encoded), "" for none */
    const struct ferry__s3_header *headers; /* every header to sign, host included */
    int n_headers;
    const char *payload_sha256; /* lowercase hex of the body's SHA-256 */
    const char *amz_date;       /* "20130524T000000Z" */
    const char *region;
    const char *service; /* "s3" */
    const char *access_key;
    const char *secret_key;
};

/* Appends the value of the Authorization header. With `canonical` non-NULL, the canonical
 * request is appended there too (tests and debugging; it holds no secret). */
int ferry__s3_sigv4(const struct ferry__s3_sign *r, struct ferry_buf *auth,
                    struct ferry_buf *canonical, struct ferry_error *err);

/* Appends s URI-encoded the way SigV4 wants it: unreserved characters (A-Z a-z 0-9 - . _ ~)
 * kept, every other byte as %XX uppercase; '/' kept when keep_slash. */
int ferry__s3_uri_encode(struct ferry_buf *b, const char *s, bool keep_slash);

/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void ferry__s3_hex(const uint8_t *p, size_t n, char *out);

#endif
