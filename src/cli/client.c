/* cli/client.c - see cli/client.h. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/client.h"
#include "ferry/config.h"
#include "store/store.h"

void ferry_client_opts_init(struct ferry_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->state = ferry_store_default_url();
}

bool ferry_client_opts_take(struct ferry_client_opts *o, int ch, const char *arg)
{
    switch (ch) {
    case 'S':
        o->server = arg;
        return true;
    case 't':
        o->token = arg;
        return true;
    case 's':
        o->state = arg;
        return true;
    case 'j':
        o->json = true;
        return true;
    default:
        return false;
    }
}

int ferry_client_init(struct ferry_client *c, const char *server, const char *token_ref,
                      bool *remote, struct ferry_error *err)
{
    memset(c, 0, sizeof *c);
    if (server == NULL || server[0] == '\0') server = getenv("FERRY_SERVER");
    *remote = server != NULL && server[0] != '\0';
    if (!*remote) return FERRY_OK;
    if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0)
        return ferry_error_set(err, FERRY_ECONFIG, "cli",
                               "--server: \"%s\" is not an http:// or https:// URL", server);
    c->base = ferry_strdup(server);
    if (c->base == NULL) return ferry_error_set(err, FERRY_ENOMEM, "cli", "out of memory");
    size_t n = strlen(c->base);
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    if (token_ref) return ferry_secret_resolve(token_ref, "--token", &c->token, err);
    const char *t = getenv("FERRY_API_TOKEN");
    if (t == NULL || t[0] == '\0')
        return ferry_error_set(err, FERRY_ECONFIG, "cli",
                               "no API token for %s: set FERRY_API_TOKEN or pass --token"
                               " env:NAME|file:PATH",
                               c->base);
    c->token = ferry_strdup(t);
    return c->token ? FERRY_OK : ferry_error_set(err, FERRY_ENOMEM, "cli", "out of memory");
}

void ferry_client_release(struct ferry_client *c)
{
    ferry_free(c->base);
    ferry_secret_free(c->token);
    memset(c, 0, sizeof *c);
}

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    struct ferry_buf *b = arg;
    return ferry_buf_append(b, p, size * n) == FERRY_OK ? size * n : 0;
}

static CURL *prepare(struct ferry_client *c, const char *path, struct curl_slist **hdrs,
                     const char *content_type, struct ferry_error *err)
{
    CURL *h = curl_easy_init();
    if (h == NULL) {
        ferry_error_set(err, FERRY_ENOMEM, "curl", "cannot start an HTTP client");
        return NULL;
    }
    char *url = ferry_asprintf("%s%s", c->base, path);
    char *auth = ferry_asprintf("Authorization: Bearer %s", c->token ? c->token : "");
    *hdrs = curl_slist_append(NULL, auth);
    if (content_type) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        *hdrs = curl_slist_append(*hdrs, ct);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (auth) {
        memset(auth, 0, strlen(auth));
        ferry_free(auth);
    }
    ferry_free(url); /* libcurl copies the URL */
    return h;
}

/* A whole number from the environment, or def when unset or out of [lo, hi]. */
static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    char *end = NULL;
    long n = v && v[0] ? strtol(v, &end, 10) : def;
    return end && *end == '\0' && n >= lo && n <= hi ? n : def;
}

int ferry_client_request(struct ferry_client *c, const char *method, const char *path,
                         const char *content_type, const char *body, size_t len, long *status,
                         struct ferry_buf *out, struct ferry_error *err)
{
    struct curl_slist *hdrs = NULL;
    CURL *h = prepare(c, path, &hdrs, content_type, err);
    if (h == NULL) return err ? err->code : FERRY_ENOMEM;
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, env_long("FERRY_CLIENT_TIMEOUT", 60, 1, 3600));
    if (c->idem_key) {
        /* appended in place: the list set as CURLOPT_HTTPHEADER keeps its head */
        char *kh = ferry_asprintf("Idempotency-Key: %s", c->idem_key);
        if (kh) curl_slist_append(hdrs, kh);
        ferry_free(kh);
    }
    CURLcode cc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    if (cc != CURLE_OK)
        return ferry_error_set(err, FERRY_EIO, "curl", "%s %s%s: %s", method, c->base, path,
                               curl_easy_strerror(cc));
    ferry_buf_append(out, "", 1); /* NUL-terminated */
    out->len--;
    return FERRY_OK;
}

int ferry_client_post_keyed(struct ferry_client *c, const char *path, const char *key,
                            const char *body, size_t len, long *status, struct ferry_buf *out,
                            int *attempts, struct ferry_error *err)
{
    long retries = env_long("FERRY_CLIENT_RETRIES", 2, 0, 10);
    int rc = FERRY_OK;
    c->idem_key = key;
    for (*attempts = 1;; (*attempts)++) {
        out->len = 0;
        rc = ferry_client_request(c, "POST", path, "application/json", body, len, status, out, err);
        /* Only a transport failure is retried: whether the server acted on the request is
         * unknown then, and the key makes a second request find the first one's outcome. An
         * HTTP answer is the server's word and is returned as it is. */
        if (rc != FERRY_EIO || *attempts > retries) break;
        usleep(200000u * (unsigned)*attempts);
    }
    c->idem_key = NULL;
    return rc;
}

struct stream {
    struct ferry_buf buf;
    bool (*on_event)(void *, const char *);
    void *arg;
    bool stop;
    long status;
    CURL *h;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct stream *s = arg;
    if (s->status == 0) curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
    if (ferry_buf_append(&s->buf, p, size * n) != FERRY_OK) return 0;
    if (s->status != 200) return size * n; /* an error body: kept whole */
    for (;;) {
        char *end = s->buf.len ? memmem(s->buf.data, s->buf.len, "\n\n", 2) : NULL;
        if (end == NULL) break;
        *end = '\0';
        for (char *line = s->buf.data; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            if (strncmp(line, "data: ", 6) == 0 && !s->stop && !s->on_event(s->arg, line + 6))
                s->stop = true;
            line = nl ? nl + 1 : NULL;
        }
        size_t used = (size_t)(end - s->buf.data) + 2;
        memmove(s->buf.data, s->buf.data + used, s->buf.len - used);
        s->buf.len -= used;
    }
    return s->stop ? 0 : size * n;
}

int ferry_client_events(struct ferry_client *c, const char *path,
                        bool (*on_event)(void *arg, const char *json), void *arg, long *status,
                        struct ferry_error *err)
{
    struct curl_slist *hdrs = NULL;
    CURL *h = prepare(c, path, &hdrs, NULL, err);
    if (h == NULL) return err ? err->code : FERRY_ENOMEM;
    struct stream s = {.on_event = on_event, .arg = arg, .h = h};
    ferry_buf_init(&s.buf, 64u << 20);
    /* A stream has no end to wait for, but the server writes a keep-alive every 15 s: a
     * stream silent for twice that long (or $FERRY_CLIENT_TIMEOUT, when longer) is a server
     * that stopped answering, not an idle run. */
    long stall = env_long("FERRY_CLIENT_TIMEOUT", 60, 1, 3600);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall > 30 ? stall : 30L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    int rc = FERRY_OK;
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && s.stop))
        rc = ferry_error_set(err, FERRY_EIO, "curl", "GET %s%s: %s", c->base, path,
                             curl_easy_strerror(cc));
    else if (*status != 200) {
        ferry_buf_append(&s.buf, "", 1);
        s.buf.len--;
        char msg[512];
        ferry_client_error_message(*status, &s.buf, msg, sizeof msg);
        rc = ferry_error_set(err, *status == 404 ? FERRY_ENOTFOUND : FERRY_EIO, "http",
                             "GET %s: %s", path, msg);
    }
    ferry_buf_release(&s.buf);
    return rc;
}

void ferry_client_error_message(long status, const struct ferry_buf *body, char *out, size_t len)
{
    json_t *j = body->data ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (m)
        snprintf(out, len, "%s (HTTP %ld)", m, status);
    else
        snprintf(out, len, "HTTP %ld", status);
    json_decref(j);
}
