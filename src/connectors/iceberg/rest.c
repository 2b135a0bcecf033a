/* connectors/iceberg/rest.c - the Iceberg REST catalog client (`catalog: rest`), written from
 * the Apache Iceberg REST Catalog OpenAPI specification (open-api/rest-catalog-open-api.yaml).
 *
 * The server owns the table metadata: load is GET .../namespaces/{ns}/tables/{table} (the
 * LoadTableResult carries the metadata and its location), create is POST .../tables (the
 * namespace is created first when the server answers NoSuchNamespace), and a commit is POST
 * .../tables/{table} with requirements and updates. The catalog interface hands this file the
 * whole next metadata the sink built, so a commit is expressed as the difference from the
 * table's current metadata: new schemas (add-schema, set-current-schema), new partition specs,
 * new snapshots (add-snapshot), dropped snapshots (remove-snapshots), changed refs
 * (set-snapshot-ref / remove-snapshot-ref) and properties; guarded by assert-table-uuid and
 * assert-ref-snapshot-id of `main` (plus assert-current-schema-id and
 * assert-last-assigned-field-id when the schema changes). 409 is the conflict the sink
 * retries on. A commit whose answer is lost (transport error, 5xx) is settled by loading the
 * table again: committed when its `main` ref points at the snapshot the commit added.
 *
 * GET /v1/config first; its `overrides.prefix` goes between /v1 and /namespaces. The bearer
 * token (a secret reference) is sent on every request and never shown. With a credential
 * (client_id:client_secret) the token comes from the OAuth2 client credentials grant: a
 * form-encoded POST to the token endpoint (the catalog's /v1/oauth/tokens unless configured)
 * before the first request, again once 80 % of its expires_in has passed, and once more when
 * the catalog answers 401 (a token revoked early), after which the request is sent again.
 *
 * Owns an HTTP client (net/http.h) and the token (wiped on close). Calls net, jansson. Called by
 * catalog.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "connectors/iceberg/iceberg.h"
#include "ferry/config.h"
#include "net/http.h"

struct ferry__iceberg_rest {
    char *base;   /* "http://host:port/path" without a trailing '/' */
    char *prefix; /* "v1" or "v1/<prefix>" */
    char *ns;
    char *token;       /* the bearer token sent: static, or the last OAuth2 access token */
    char *credential;  /* OAuth2 "client_id:client_secret" (a secret); NULL: no OAuth2 */
    char *oauth2_uri;  /* the token endpoint */
    char *scope;
    int64_t renew_at_us; /* OAuth2: renew the token from this time on (0: only on a 401) */
    int tokens;          /* OAuth2 tokens obtained (for the debug log) */
    struct ferry__http *http;
    json_t *seen; /* table -> {"location", "metadata"} of its last load */
    bool unknown; /* the last commit's outcome could not be learnt */
};

static int nomem(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "iceberg", "iceberg sink: out of memory");
}

/* Percent-encodes a path segment (RFC 3986 unreserved characters kept). */
static int encode(struct ferry_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        bool keep = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                    (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' || *c == '~';
        char esc[3] = {'%', hex[*c >> 4], hex[*c & 15]};
        if ((keep ? ferry_buf_append(b, c, 1) : ferry_buf_append(b, esc, 3)) != FERRY_OK)
            return FERRY_ENOMEM;
    }
    return FERRY_OK;
}

/* One request to url (a JSON body, the bearer token; form: a form-encoded body, no token)
 * through the client's HTTP handle (GETs retried there on transport errors and 5xx).
 * FERRY_OK when an answer came (*status); resp gets the body (NUL-terminated). */
static int perform(struct ferry__iceberg_rest *r, const char *method, const char *url,
                   const char *body, bool form, long *status, struct ferry_buf *resp,
                   struct ferry_error *err)
{
    char *auth = r->token && !form ? ferry_asprintf("Authorization: Bearer %s", r->token) : NULL;
    if (r->token && !form && auth == NULL) return nomem(err);
    const char *hdrs[] = {form ? "Content-Type: application/x-www-form-urlencoded"
                               : "Content-Type: application/json",
                          "Accept: application/json", auth, NULL};
    const char *b = strcmp(method, "POST") == 0 ? (body ? body : "{}") : NULL;
    struct ferry__http_req q = {.method = method,
                                .url = url,
                                .headers = hdrs,
                                .body = b,
                                .len = b ? strlen(b) : 0,
                                .idempotent = strcmp(method, "GET") == 0};
    int rc = ferry__http_do(r->http, &q, resp, status, err);
    ferry_secret_free(auth);
    if (rc != FERRY_OK) return rc;
    if (ferry_buf_reserve(resp, 1) != FERRY_OK) return nomem(err);
    resp->data[resp->len] = '\0';
    return FERRY_OK;
}

/* The server's message of an IcebergErrorResponse ({"error": {"message", "type"}}). */
static void server_message(const struct ferry_buf *resp, char *out, size_t cap)
{
    json_t *root = resp->len ? json_loadb(resp->data, resp->len, 0, NULL) : NULL;
    json_t *e = json_object_get(root, "error");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    snprintf(out, cap, "%s%s%s", type ? type : "", type && msg ? ": " : "", msg ? msg : "");
    json_decref(root);
}

/* Appends key=value, form-encoded (&-separated after the first). */
static int form_field(struct ferry__iceberg_rest *r, struct ferry_buf *b, const char *key,
                      const char *value, size_t n)
{
    char *v = ferry__http_escape(value, n);
    if (v == NULL) return FERRY_ENOMEM;
    int rc = ferry_buf_printf(b, "%s%s=%s", b->len ? "&" : "", key, v);
    explicit_bzero(v, strlen(v));
    ferry_free(v);
    return rc;
}

/* The OAuth2 client credentials grant: POST grant_type, client_id, client_secret and scope to
 * the token endpoint; its access_token becomes the bearer token, renewed once 80 % of its
 * expires_in (when given) has passed. Neither the secret nor a token is ever in a message. */
static int fetch_token(struct ferry__iceberg_rest *r, struct ferry_error *err)
{
    const char *colon = strchr(r->credential, ':');
    size_t idn = colon ? (size_t)(colon - r->credential) : 0;
    const char *secret = colon ? colon + 1 : r->credential;
    struct ferry_buf body, resp;
    ferry_buf_init(&body, 0);
    ferry_buf_init(&resp, 1 << 20);
    int rc = form_field(r, &body, "grant_type", "client_credentials", 18);
    if (rc == FERRY_OK && idn > 0) rc = form_field(r, &body, "client_id", r->credential, idn);
    if (rc == FERRY_OK) rc = form_field(r, &body, "client_secret", secret, strlen(secret));
    if (rc == FERRY_OK) rc = form_field(r, &body, "scope", r->scope, strlen(r->scope));
    if (rc == FERRY_OK) rc = ferry_buf_append(&body, "", 1); /* NUL-terminated */
    long status = 0;
    if (rc != FERRY_OK)
        rc = nomem(err);
    else
        rc = perform(r, "POST", r->oauth2_uri, body.data, true, &status, &resp, err);
    if (body.data) explicit_bzero(body.data, body.len);
    ferry_buf_release(&body);
    json_t *root = rc == FERRY_OK && resp.len
                       ? json_loadb(resp.data, resp.len, 0, NULL)
                       : NULL;
    const char *tok = json_string_value(json_object_get(root, "access_token"));
    if (rc != FERRY_OK) {
        /* err set (a transport error names the token endpoint, without its query) */
    } else if (status < 200 || status >= 300 || tok == NULL || tok[0] == '\0') {
        /* RFC 6749 5.2: {"error": "invalid_client", "error_description": "..."} */
        const char *code = json_string_value(json_object_get(root, "error"));
        const char *desc = json_string_value(json_object_get(root, "error_description"));
        rc = ferry_error_set(err, status == 401 || status == 400 || status == 403 ? FERRY_ECONFIG : FERRY_ESINK,
                             "http", "iceberg sink: REST catalog OAuth2 token request to %s: "
                             "HTTP %ld%s%s%s%s%s (check catalog_credential)", r->oauth2_uri, status,
                             code ? " " : "", code ? code : "", desc ? ": " : "", desc ? desc : "",
                             tok == NULL && status >= 200 && status < 300 ? " no access_token in the answer" : "");
    } else {
        char *t = ferry_strdup(tok);
        if (t == NULL) {
            rc = nomem(err);
        } else {
            ferry_secret_free(r->token);
            r->token = t;
            r->tokens++;
            json_int_t ttl = json_integer_value(json_object_get(root, "expires_in"));
            if (ttl > INT64_C(315360000)) ttl = INT64_C(315360000); /* ten years is forever */
            r->renew_at_us = ttl > 0 ? ferry_now_mono_us() + (int64_t)ttl * 800000 : 0;
            ferry_log(FERRY_LOG_DEBUG, "iceberg sink: REST catalog: OAuth2 token %d from %s%s",
                      r->tokens, r->oauth2_uri, ttl > 0 ? " (renewed before it expires)" : "");
        }
    }
    json_decref(root);
    if (resp.data) explicit_bzero(resp.data, resp.len);
    ferry_buf_release(&resp);
    return rc;
}

/* A request; GETs are retried on transport errors and 5xx. FERRY_OK on 2xx with *out the
 * parsed body (may be NULL for an empty body); else *status says what the server answered and
 * the error names the method, the path and the server's message. Status 404 and 409 come back
 * as FERRY_ENOTFOUND and FERRY_ECONFLICT. */
static int call(struct ferry__iceberg_rest *r, const char *method, const char *path,
                json_t *body, json_t **out, long *status, struct ferry_error *err)
{
    *out = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (body && text == NULL) return nomem(err);
    struct ferry_buf resp;
    ferry_buf_init(&resp, 256 << 20);
    int rc = FERRY_OK;
    bool renewed = false;
    *status = 0;
    char *url = ferry_asprintf("%s/%s", r->base, path);
    if (url == NULL) rc = nomem(err);
    if (rc == FERRY_OK && r->credential && r->renew_at_us && ferry_now_mono_us() >= r->renew_at_us)
        rc = fetch_token(r, err);
    while (rc == FERRY_OK) {
        rc = perform(r, method, url, text, false, status, &resp, err);
        if (rc != FERRY_OK || *status != 401 || r->credential == NULL || renewed) break;
        /* the token was revoked or expired early: a new one, then the same request (the
         * catalog applied nothing it refused) */
        renewed = true;
        rc = fetch_token(r, err);
    }
    ferry_free(url);
    free(text);
    if (rc != FERRY_OK) {
        /* err set: a transport error names the method and the URL */
    } else if (rc == FERRY_OK && (*status < 200 || *status >= 300)) {
        char msg[512];
        server_message(&resp, msg, sizeof msg);
        int code = *status == 404   ? FERRY_ENOTFOUND
                   : *status == 409 ? FERRY_ECONFLICT
                                    : FERRY_ESINK;
        rc = ferry_error_set(err, code, "http", "iceberg sink: REST catalog %s %s/%s: HTTP %ld%s%s%s",
                             method, r->base, path, *status, msg[0] ? " " : "", msg,
                             *status == 401 || *status == 403
                                 ? (r->credential ? " (check catalog_credential)" : " (check catalog_token)")
                                 : "");
        if (*status == 429 || *status == 502 || *status == 503 || *status == 504)
            ferry_error_set_transient(err);
    } else if (rc == FERRY_OK && resp.len > 0) {
        json_error_t je;
        *out = json_loadb(resp.data, resp.len, 0, &je);
        if (*out == NULL)
            rc = ferry_error_set(err, FERRY_ESINK, "iceberg",
                                 "iceberg sink: REST catalog %s %s/%s: the answer is not JSON (%s)",
                                 method, r->base, path, je.text);
    }
    ferry_buf_release(&resp);
    return rc;
}

int ferry__iceberg_rest_open(const char *uri, const struct ferry__iceberg_rest_auth *auth,
                             const char *ns, struct ferry__iceberg_rest **out,
                             struct ferry_error *err)
{
    static const struct ferry__iceberg_rest_auth none = {0};
    if (auth == NULL) auth = &none;
    const char *token = auth->token;
    *out = NULL;
    if (strncmp(uri, "http://", 7) != 0 && strncmp(uri, "https://", 8) != 0)
        return ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                               "iceberg sink: catalog: rest needs catalog_uri: http(s)://HOST[:PORT][/PATH]");
    const char *host = strstr(uri, "://") + 3;
    size_t hl = strcspn(host, "/?#");
    if (memchr(host, '@', hl) != NULL) /* never echo a password in a message */
        return ferry_error_set(err, FERRY_ECONFIG, "iceberg",
                               "iceberg sink: catalog_uri must not hold credentials: give the "
                               "token as catalog_token (env:NAME or file:PATH)");
    struct ferry__iceberg_rest *r = ferry_calloc(1, sizeof *r);
    if (r == NULL) return nomem(err);
    r->base = ferry_strdup(uri);
    r->ns = ferry_strdup(ns);
    r->token = token ? ferry_strdup(token) : NULL;
    r->credential = auth->credential ? ferry_strdup(auth->credential) : NULL;
    r->scope = ferry_strdup(auth->scope ? auth->scope : "catalog");
    r->seen = json_object();
    if (!r->base || !r->ns || (token && !r->token) || (auth->credential && !r->credential) ||
        !r->scope || !r->seen) {
        ferry__iceberg_rest_close(r);
        return nomem(err);
    }
    struct ferry__http_opts ho = {.what = "iceberg sink: REST catalog",
                                  .origin = "http",
                                  .connect_timeout_ms = 10000,
                                  .total_timeout_ms = 120000,
                                  .max_attempts = 4,
                                  .body_cap = (size_t)256 << 20};
    int hrc = ferry__http_open(&ho, &r->http, err);
    if (hrc != FERRY_OK) {
        ferry__iceberg_rest_close(r);
        return hrc;
    }
    size_t bl = strlen(r->base);
    while (bl > 0 && r->base[bl - 1] == '/') r->base[--bl] = '\0';
    r->oauth2_uri = auth->oauth2_uri ? ferry_strdup(auth->oauth2_uri)
                                     : ferry_asprintf("%s/v1/oauth/tokens", r->base);
    if (r->oauth2_uri == NULL) {
        ferry__iceberg_rest_close(r);
        return nomem(err);
    }
    int rc = r->credential ? fetch_token(r, err) : FERRY_OK;
    json_t *cfg = NULL;
    long st = 0;
    if (rc == FERRY_OK) rc = call(r, "GET", "v1/config", NULL, &cfg, &st, err);
    const char *prefix = json_string_value(json_object_get(json_object_get(cfg, "overrides"), "prefix"));
    if (prefix == NULL)
        prefix = json_string_value(json_object_get(json_object_get(cfg, "defaults"), "prefix"));
    if (rc == FERRY_OK) {
        struct ferry_buf p;
        ferry_buf_init(&p, 0);
        int brc = ferry_buf_printf(&p, "v1");
        if (brc == FERRY_OK && prefix && prefix[0]) {
            brc = ferry_buf_append(&p, "/", 1);
            if (brc == FERRY_OK) brc = encode(&p, prefix);
        }
        r->prefix = brc == FERRY_OK ? ferry_strdup(p.data) : NULL;
        ferry_buf_release(&p);
        if (r->prefix == NULL) rc = nomem(err);
    }
    json_decref(cfg);
    if (rc != FERRY_OK) {
        ferry__iceberg_rest_close(r);
        return rc;
    }
    *out = r;
    return FERRY_OK;
}

bool ferry__iceberg_rest_unknown(const struct ferry__iceberg_rest *r)
{
    return r->unknown;
}

void ferry__iceberg_rest_close(struct ferry__iceberg_rest *r)
{
    if (r == NULL) return;
    ferry__http_close(r->http);
    json_decref(r->seen);
    ferry_free(r->base);
    ferry_free(r->prefix);
    ferry_free(r->ns);
    ferry_secret_free(r->token);
    ferry_secret_free(r->credential);
    ferry_free(r->oauth2_uri);
    ferry_free(r->scope);
    ferry_free(r);
}

/* "v1[/prefix]/namespaces/{ns}/tables[/{table}]" */
static char *tables_path(const struct ferry__iceberg_rest *r, const char *table)
{
    struct ferry_buf p;
    ferry_buf_init(&p, 0);
    int rc = ferry_buf_printf(&p, "%s/namespaces/", r->prefix);
    if (rc == FERRY_OK) rc = encode(&p, r->ns);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&p, "/tables");
    if (rc == FERRY_OK && table) rc = ferry_buf_append(&p, "/", 1);
    if (rc == FERRY_OK && table) rc = encode(&p, table);
    char *s = rc == FERRY_OK && p.data ? ferry_strdup(p.data) : NULL;
    ferry_buf_release(&p);
    return s;
}

int ferry__iceberg_rest_load(struct ferry__iceberg_rest *r, const char *table, json_t **meta,
                             char **location, struct ferry_error *err)
{
    *meta = NULL;
    *location = NULL;
    char *path = tables_path(r, table);
    if (path == NULL) return nomem(err);
    json_t *res = NULL;
    long st = 0;
    struct ferry_error e;
    memset(&e, 0, sizeof e);
    int rc = call(r, "GET", path, NULL, &res, &st, &e);
    ferry_free(path);
    if (rc == FERRY_ENOTFOUND) return FERRY_OK; /* no such table (or namespace) */
    if (rc != FERRY_OK) {
        if (err) *err = e;
        return rc;
    }
    json_t *m = json_object_get(res, "metadata");
    const char *loc = json_string_value(json_object_get(res, "metadata-location"));
    if (!json_is_object(m) || loc == NULL) {
        json_decref(res);
        return ferry_error_set(err, FERRY_ESINK, "iceberg",
                               "iceberg sink: REST catalog %s: table %s.%s: no metadata or "
                               "metadata-location in the answer",
                               r->base, r->ns, table);
    }
    *meta = json_incref(m);
    *location = ferry_strdup(loc);
    /* a copy: the caller changes its metadata in place to build the next one */
    json_object_set_new(r->seen, table,
                        json_pack("{s:s,s:o}", "location", loc, "metadata", json_deep_copy(m)));
    json_decref(res);
    if (*location == NULL) {
        json_decref(*meta);
        *meta = NULL;
        return nomem(err);
    }
    return FERRY_OK;
}

static json_t *by_key(json_t *arr, const char *key, json_int_t v)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x)
    {
        if (json_integer_value(json_object_get(x, key)) == v) return x;
    }
    return NULL;
}

static json_t *create_request(const char *table, json_t *meta)
{
    json_t *req = json_pack("{s:s}", "name", table);
    json_int_t sid = json_integer_value(json_object_get(meta, "current-schema-id"));
    json_t *schema = by_key(json_object_get(meta, "schemas"), "schema-id", sid);
    json_t *spec = by_key(json_object_get(meta, "partition-specs"), "spec-id",
                          json_integer_value(json_object_get(meta, "default-spec-id")));
    json_t *order = by_key(json_object_get(meta, "sort-orders"), "order-id",
                           json_integer_value(json_object_get(meta, "default-sort-order-id")));
    if (json_object_get(meta, "location"))
        json_object_set(req, "location", json_object_get(meta, "location"));
    if (schema) json_object_set(req, "schema", schema);
    if (spec) json_object_set(req, "partition-spec", spec);
    if (order) json_object_set(req, "write-order", order);
    json_object_set_new(req, "stage-create", json_false());
    json_t *props = json_object_get(meta, "properties");
    json_object_set_new(req, "properties", json_is_object(props) ? json_copy(props) : json_object());
    return req;
}

static int create(struct ferry__iceberg_rest *r, const char *table, json_t *meta,
                  char **new_location, struct ferry_error *err)
{
    char *path = tables_path(r, NULL);
    json_t *req = path ? create_request(table, meta) : NULL;
    if (req == NULL) {
        ferry_free(path);
        return nomem(err);
    }
    json_t *res = NULL;
    long st = 0;
    int rc = call(r, "POST", path, req, &res, &st, err);
    if (rc == FERRY_ENOTFOUND) { /* NoSuchNamespaceException: create it, then the table */
        ferry_error_clear(err);
        json_t *nreq = json_pack("{s:[s],s:{}}", "namespace", r->ns, "properties");
        char *npath = ferry_asprintf("%s/namespaces", r->prefix);
        json_t *nres = NULL;
        rc = nreq && npath ? call(r, "POST", npath, nreq, &nres, &st, err) : nomem(err);
        if (rc == FERRY_ECONFLICT) { /* created meanwhile */
            ferry_error_clear(err);
            rc = FERRY_OK;
        }
        json_decref(nreq);
        json_decref(nres);
        ferry_free(npath);
        if (rc == FERRY_OK) rc = call(r, "POST", path, req, &res, &st, err);
    }
    const char *loc = json_string_value(json_object_get(res, "metadata-location"));
    if (rc == FERRY_OK && new_location) {
        *new_location = loc ? ferry_strdup(loc) : NULL;
        if (loc && *new_location == NULL) rc = nomem(err);
    }
    json_decref(res);
    json_decref(req);
    ferry_free(path);
    return rc;
}

static json_t *ref_snapshot(json_t *meta, const char *ref)
{
    json_t *id = json_object_get(json_object_get(json_object_get(meta, "refs"), ref), "snapshot-id");
    return json_is_integer(id) ? json_incref(id) : json_null();
}

/* The updates that turn `cur` into `next`, and the requirements they rest on. */
static int diff(json_t *cur, json_t *next, json_t *reqs, json_t *ups, int64_t *added_main)
{
    *added_main = 0;
    json_array_append_new(reqs, json_pack("{s:s,s:O}", "type", "assert-table-uuid", "uuid",
                                          json_object_get(cur, "table-uuid")));
    json_array_append_new(reqs, json_pack("{s:s,s:s,s:o}", "type", "assert-ref-snapshot-id", "ref",
                                          "main", "snapshot-id", ref_snapshot(cur, "main")));
    size_t i;
    json_t *x;
    bool schema_change = false;
    json_array_foreach(json_object_get(next, "schemas"), i, x)
    {
        json_int_t id = json_integer_value(json_object_get(x, "schema-id"));
        if (by_key(json_object_get(cur, "schemas"), "schema-id", id)) continue;
        schema_change = true;
        json_array_append_new(ups, json_pack("{s:s,s:O,s:O}", "action", "add-schema", "schema", x,
                                             "last-column-id",
                                             json_object_get(next, "last-column-id")));
    }
    if (!json_equal(json_object_get(cur, "current-schema-id"),
                    json_object_get(next, "current-schema-id"))) {
        schema_change = true;
        json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "set-current-schema",
                                             "schema-id", json_object_get(next, "current-schema-id")));
    }
    if (schema_change) {
        json_array_append_new(reqs, json_pack("{s:s,s:O}", "type", "assert-current-schema-id",
                                              "current-schema-id",
                                              json_object_get(cur, "current-schema-id")));
        json_array_append_new(reqs, json_pack("{s:s,s:O}", "type", "assert-last-assigned-field-id",
                                              "last-assigned-field-id",
                                              json_object_get(cur, "last-column-id")));
    }
    json_array_foreach(json_object_get(next, "partition-specs"), i, x)
    {
        if (!by_key(json_object_get(cur, "partition-specs"), "spec-id",
                    json_integer_value(json_object_get(x, "spec-id"))))
            json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "add-spec", "spec", x));
    }
    if (!json_equal(json_object_get(cur, "default-spec-id"), json_object_get(next, "default-spec-id")))
        json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "set-default-spec", "spec-id",
                                             json_object_get(next, "default-spec-id")));
    json_array_foreach(json_object_get(next, "snapshots"), i, x)
    {
        if (!by_key(json_object_get(cur, "snapshots"), "snapshot-id",
                    json_integer_value(json_object_get(x, "snapshot-id"))))
            json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "add-snapshot", "snapshot", x));
    }
    json_t *gone = json_array();
    json_array_foreach(json_object_get(cur, "snapshots"), i, x)
    {
        json_t *id = json_object_get(x, "snapshot-id");
        if (!by_key(json_object_get(next, "snapshots"), "snapshot-id", json_integer_value(id)))
            json_array_append(gone, id);
    }
    if (json_array_size(gone) > 0)
        json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "remove-snapshots",
                                             "snapshot-ids", gone));
    json_decref(gone);
    const char *name;
    json_t *ref;
    json_t *next_refs = json_object_get(next, "refs"), *cur_refs = json_object_get(cur, "refs");
    json_object_foreach(next_refs, name, ref)
    {
        if (json_equal(ref, json_object_get(cur_refs, name))) continue;
        json_t *u = json_pack("{s:s,s:s,s:O,s:O}", "action", "set-snapshot-ref", "ref-name", name,
                              "type", json_object_get(ref, "type"), "snapshot-id",
                              json_object_get(ref, "snapshot-id"));
        json_array_append_new(ups, u);
        if (!strcmp(name, "main"))
            *added_main = (int64_t)json_integer_value(json_object_get(ref, "snapshot-id"));
    }
    json_object_foreach(cur_refs, name, ref)
    {
        if (!json_object_get(next_refs, name))
            json_array_append_new(ups, json_pack("{s:s,s:s}", "action", "remove-snapshot-ref",
                                                 "ref-name", name));
    }
    json_t *set = json_object(), *removed = json_array();
    json_t *np = json_object_get(next, "properties"), *cp = json_object_get(cur, "properties");
    json_t *v;
    json_object_foreach(np, name, v)
    {
        if (!json_equal(v, json_object_get(cp, name))) json_object_set(set, name, v);
    }
    json_object_foreach(cp, name, v)
    {
        if (!json_object_get(np, name)) json_array_append_new(removed, json_string(name));
    }
    if (json_object_size(set) > 0)
        json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "set-properties", "updates", set));
    if (json_array_size(removed) > 0)
        json_array_append_new(ups, json_pack("{s:s,s:O}", "action", "remove-properties",
                                             "removals", removed));
    json_decref(set);
    json_decref(removed);
    return FERRY_OK;
}

int ferry__iceberg_rest_commit(struct ferry__iceberg_rest *r, const char *table,
                               const char *old_location, json_t *next, char **new_location,
                               struct ferry_error *err)
{
    if (new_location) *new_location = NULL;
    r->unknown = false;
    if (old_location == NULL) return create(r, table, next, new_location, err);
    /* The base of the difference is the metadata at old_location: the one the sink loaded
     * (normally just before), else a fresh load that must still be there. The catalog then
     * checks the requirements against what is current when the commit arrives. */
    json_t *cur = NULL;
    char *cur_loc = NULL;
    int rc = FERRY_OK;
    json_t *s = json_object_get(r->seen, table);
    const char *sloc = json_string_value(json_object_get(s, "location"));
    if (sloc && strcmp(sloc, old_location) == 0) {
        cur = json_incref(json_object_get(s, "metadata"));
        cur_loc = ferry_strdup(sloc);
        if (cur_loc == NULL) rc = nomem(err);
    } else {
        rc = ferry__iceberg_rest_load(r, table, &cur, &cur_loc, err);
    }
    if (rc == FERRY_OK && (cur == NULL || strcmp(cur_loc, old_location) != 0))
        rc = ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                             "iceberg sink: table %s.%s: its metadata was changed by another writer",
                             r->ns, table);
    json_t *reqs = json_array(), *ups = json_array();
    int64_t main_id = 0;
    if (rc == FERRY_OK) rc = diff(cur, next, reqs, ups, &main_id);
    char *path = tables_path(r, table);
    json_t *body = json_pack("{s:{s:[s],s:s},s:O,s:O}", "identifier", "namespace", r->ns, "name",
                             table, "requirements", reqs, "updates", ups);
    if (rc == FERRY_OK && (path == NULL || body == NULL)) rc = nomem(err);
    json_t *res = NULL;
    long st = 0;
    if (rc == FERRY_OK) rc = call(r, "POST", path, body, &res, &st, err);
    bool sent = rc != FERRY_OK && rc != FERRY_ENOMEM && path && body && cur && main_id != 0;
    if (sent && (rc == FERRY_ECONFLICT || st == 0 || st >= 500)) {
        /* A refusal or a lost answer may hide our own commit: libcurl re-sends a request
         * whose reused connection died, and the catalog then refuses the copy (409) of a
         * commit it already applied. The table tells: `main` at the snapshot we added. */
        json_t *now = NULL;
        char *now_loc = NULL;
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        int lrc = ferry__iceberg_rest_load(r, table, &now, &now_loc, &e);
        json_t *id = json_object_get(json_object_get(json_object_get(now, "refs"), "main"),
                                     "snapshot-id");
        if (lrc == FERRY_OK && now && json_integer_value(id) == main_id) {
            ferry_log(FERRY_LOG_WARN, "iceberg sink: table %s.%s: the commit's answer was lost "
                      "(%s); the table shows it committed", r->ns, table, err ? err->message : "");
            ferry_error_clear(err);
            rc = FERRY_OK;
            if (new_location) {
                *new_location = now_loc;
                now_loc = NULL;
            }
        } else if (lrc != FERRY_OK) {
            /* not a conflict to retry blindly: our own copy may be the one in the table */
            char msg[FERRY_ERROR_MESSAGE_MAX];
            snprintf(msg, sizeof msg, "%s", err ? err->message : "");
            ferry_error_clear(err);
            r->unknown = true;
            rc = ferry_error_set(err, FERRY_EIO, "iceberg",
                                 "iceberg sink: table %s.%s: the commit's outcome is unknown (%s; "
                                 "the table could not be loaded after it: %s)",
                                 r->ns, table, msg, e.message);
        }
        json_decref(now);
        ferry_free(now_loc);
    }
    if (rc == FERRY_ECONFLICT) {
        char msg[FERRY_ERROR_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->message : "");
        ferry_error_clear(err);
        rc = ferry_error_set(err, FERRY_ECONFLICT, "iceberg",
                             "iceberg sink: table %s.%s: its metadata was changed by another "
                             "writer (%s)",
                             r->ns, table, msg);
    } else if (rc == FERRY_OK && new_location && *new_location == NULL) {
        const char *loc = json_string_value(json_object_get(res, "metadata-location"));
        *new_location = loc ? ferry_strdup(loc) : NULL;
        if (loc && *new_location == NULL) rc = nomem(err);
    }
    json_decref(res);
    json_decref(body);
    json_decref(reqs);
    json_decref(ups);
    json_decref(cur);
    ferry_free(cur_loc);
    ferry_free(path);
    return rc;
}

int ferry__iceberg_rest_list(struct ferry__iceberg_rest *r, json_t *names, struct ferry_error *err)
{
    char *base = tables_path(r, NULL);
    if (base == NULL) return nomem(err);
    char *token = NULL;
    int rc = FERRY_OK;
    for (int pages = 0; pages < 100000; pages++) {
        struct ferry_buf p;
        ferry_buf_init(&p, 0);
        int brc = ferry_buf_printf(&p, "%s", base);
        if (brc == FERRY_OK && token) brc = ferry_buf_printf(&p, "?pageToken=");
        if (brc == FERRY_OK && token) brc = encode(&p, token);
        json_t *res = NULL;
        long st = 0;
        struct ferry_error e;
        memset(&e, 0, sizeof e);
        rc = brc == FERRY_OK ? call(r, "GET", p.data, NULL, &res, &st, &e) : nomem(err);
        ferry_buf_release(&p);
        if (rc == FERRY_ENOTFOUND) { /* no namespace yet: no table */
            rc = FERRY_OK;
            break;
        }
        if (rc != FERRY_OK) {
            if (err && rc != FERRY_ENOMEM) *err = e;
            break;
        }
        size_t i;
        json_t *id;
        json_array_foreach(json_object_get(res, "identifiers"), i, id)
        {
            json_t *n = json_object_get(id, "name");
            if (json_is_string(n)) json_array_append(names, n);
        }
        const char *next = json_string_value(json_object_get(res, "next-page-token"));
        ferry_free(token);
        token = next && next[0] ? ferry_strdup(next) : NULL;
        json_decref(res);
        if (token == NULL) break;
    }
    ferry_free(token);
    ferry_free(base);
    return rc;
}
