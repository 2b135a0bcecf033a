/* objstore/s3_client.h - a small S3 client shared by the sinks that write to S3-compatible
 * object storage: the `s3` sink and the `iceberg` sink's S3 warehouse. One bucket per client;
 * every request is signed with SigV4 (sigv4.c), retried on transport errors, 5xx and throttling.
 *
 * Not thread-safe: one client per connector instance, used by the thread that owns it.
 * Ownership: the client owns its curl handle and its credentials (wiped on close). */
#ifndef FERRY_CONNECTORS_S3_CLIENT_H
#define FERRY_CONNECTORS_S3_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/error.h"

struct ferry__s3_client;

/* Reads the connection keys of a sink config: endpoint, region, path_style, max_attempts,
 * access_key_id / secret_access_key / session_token (secret references; else the standard AWS
 * variables). `bucket` is checked (its config node `bucket_node` is named in the error);
 * `who` ("s3 sink") prefixes every message. Nothing is sent. */
int ferry__s3_client_open(struct ferry_cfg *cfg, const char *bucket, struct ferry_cfg *bucket_node,
                          const char *who, struct ferry__s3_client **out, struct ferry_error *err);
void ferry__s3_client_close(struct ferry__s3_client *c);
const char *ferry__s3_client_bucket(const struct ferry__s3_client *c);
const char *ferry__s3_client_endpoint(const struct ferry__s3_client *c);

struct ferry__s3_req {
    const char *method;
    const char *key;   /* NULL: the bucket itself */
    const char *query; /* canonical query string (sorted, encoded) or "" */
    const void *body;
    size_t len;
    bool checksum;       /* send x-amz-checksum-crc32c of the body */
    bool declare_crc32c; /* CreateMultipartUpload: x-amz-checksum-algorithm */
    bool if_none_match;  /* PUT only if the key does not exist (If-None-Match: *) */
    const char *content_type;
    const char *range; /* GET of a byte range: "bytes=A-B" (sent unsigned), or NULL */
};

/* One request with retries. FERRY_OK on 2xx; FERRY_ENOTFOUND on 404 (no message when
 * quiet_404); FERRY_ECONFLICT on 412 / 409 of a conditional PUT; else an error naming the
 * method, the object and S3's code and message (never a header value). resp gets the body. */
int ferry__s3_call(struct ferry__s3_client *c, const struct ferry__s3_req *q, bool quiet_404,
                   struct ferry_buf *resp, struct ferry_error *err);
/* HTTP status of the last request (0 after a transport error). */
long ferry__s3_last_status(const struct ferry__s3_client *c);
/* A response header of the last request (e.g. "ETag") into out (cap bytes); false if absent. */
bool ferry__s3_last_header(struct ferry__s3_client *c, const char *name, char *out, size_t cap);

/* Whole objects. put_new: FERRY_ECONFLICT when the key exists already (a store that ignores
 * If-None-Match overwrites instead: ferry__s3_probe_conditional tells). get: FERRY_ENOTFOUND
 * (quietly) when missing; resp holds the bytes NUL-terminated. delete: a missing key is fine. */
int ferry__s3_put(struct ferry__s3_client *c, const char *key, const void *p, size_t n,
                  const char *content_type, struct ferry_error *err);
int ferry__s3_put_new(struct ferry__s3_client *c, const char *key, const void *p, size_t n,
                      const char *content_type, struct ferry_error *err);
int ferry__s3_get(struct ferry__s3_client *c, const char *key, struct ferry_buf *resp,
                  struct ferry_error *err);
int ferry__s3_delete(struct ferry__s3_client *c, const char *key, struct ferry_error *err);
/* Every key under prefix (ListObjectsV2, all pages) appended to out as strings. */
int ferry__s3_list(struct ferry__s3_client *c, const char *prefix, json_t *out,
                   struct ferry_error *err);
/* each(key, arg, err) for every key under prefix, page by page as the pages arrive (it may
 * delete the key); the first code other than FERRY_OK it returns stops the listing and is
 * returned. */
int ferry__s3_list_each(struct ferry__s3_client *c, const char *prefix,
                        int (*each)(const char *key, void *arg, struct ferry_error *err),
                        void *arg, struct ferry_error *err);
/* Whether the store honours PUT If-None-Match: * : PUTs `probe_key` twice (the second must be
 * refused), then deletes it. *ok false when the second PUT went through. */
int ferry__s3_probe_conditional(struct ferry__s3_client *c, const char *probe_key, bool *ok,
                                struct ferry_error *err);

/* Multipart uploads. create: *upload_id fresh. part: uploads part n (1-based) and appends its
 * <Part> element to `parts`. complete: CompleteMultipartUpload of `parts`. abort: a missing
 * upload is fine. */
int ferry__s3_multipart_create(struct ferry__s3_client *c, const char *key, char **upload_id,
                               struct ferry_error *err);
int ferry__s3_multipart_part(struct ferry__s3_client *c, const char *key, const char *upload_id,
                             int n, const void *p, size_t len, struct ferry_buf *parts,
                             struct ferry_error *err);
int ferry__s3_multipart_complete(struct ferry__s3_client *c, const char *key,
                                 const char *upload_id, const struct ferry_buf *parts,
                                 struct ferry_error *err);
int ferry__s3_multipart_abort(struct ferry__s3_client *c, const char *key, const char *upload_id,
                              struct ferry_error *err);
/* ListMultipartUploads under prefix, every page: each(key, upload_id, initiated_ms, arg, err)
 * for every upload in progress, page by page (it may abort the upload). initiated_ms is the
 * upload's Initiated time (ms since the epoch), -1 when the store gave none readable. The
 * first code other than FERRY_OK each returns stops the listing and is returned. A store that
 * refuses to list uploads (4xx or 501, as several S3-compatible stores answer): returns
 * FERRY_EUNSUPPORTED with its reason in err, so the caller can log it and go on. */
typedef int (*ferry__s3_upload_fn)(const char *key, const char *upload_id, int64_t initiated_ms,
                                   void *arg, struct ferry_error *err);
int ferry__s3_list_uploads_each(struct ferry__s3_client *c, const char *prefix,
                                ferry__s3_upload_fn each, void *arg, struct ferry_error *err);

/* The text between <tag> and </tag> of xml after *from (advanced past it), entities decoded,
 * into out; false when absent. */
bool ferry__s3_xml_next(const char *xml, const char *tag, const char **from, struct ferry_buf *out);

#endif
