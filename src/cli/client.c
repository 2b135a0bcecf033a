/* cli/client.c - see cli/client.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/client.h"
#include "ferry/config.h"
#include "net/http.h"
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

/* A whole number from the environment, or def when unset or out of [lo, hi]. */
static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    char *end = NULL;
    long n = v && v[0] ? strtol(v, &end, 10) : def;
    return end && *end == '\0' && n >= lo && n <= hi ? n : def;
}

/* One request through the engine's HTTP client (net/http.h), with the bearer token and
 * the content type as headers. The token line is wiped before it is freed. */
static int send_one(struct ferry_client *c, const char *method, const char *path,
                    const char *content_type, const char *body, size_t len,
                    const struct ferry__http_opts *o, struct ferry__http_req *q, long *status,
                    struct ferry_buf *out, struct ferry_error *err)
{
    struct ferry__http *h = NULL;
    int rc = ferry__http_open(o, &h, err);
    if (rc != FERRY_OK) return rc;
    char *url = ferry_asprintf("%s%s", c->base, path);
    char *auth = ferry_asprintf("Authorization: Bearer %s", c->token ? c->token : "");
    char *ct = content_type ? ferry_asprintf("Content-Type: %s", content_type) : NULL;
    char *kh = c->idem_key ? ferry_asprintf("Idempotency-Key: %s", c->idem_key) : NULL;
    const char *hdrs[4] = {auth, NULL, NULL, NULL};
    int n = 1;
    if (ct) hdrs[n++] = ct;
    if (kh) hdrs[n++] = kh;
    if (url == NULL || auth == NULL || (content_type && ct == NULL) || (c->idem_key && kh == NULL)) {
        rc = ferry_error_set(err, FERRY_ENOMEM, "cli", "out of memory");
    } else {
        q->method = method;
        q->url = url;
        q->headers = hdrs;
        q->body = body;
        q->len = body ? len : 0;
        rc = ferry__http_do(h, q, out, status, err);
        /* the CLI's contract: any transport failure, a timeout included, is FERRY_EIO (its
         * exit status, and what ferry_client_post_keyed resends) */
        if (rc == FERRY_ETIMEOUT) {
            rc = FERRY_EIO;
            if (err) err->code = FERRY_EIO;
        }
    }
    if (auth) memset(auth, 0, strlen(auth));
    ferry_free(auth);
    ferry_free(url);
    ferry_free(ct);
    ferry_free(kh);
    ferry__http_close(h);
    return rc;
}

int ferry_client_request(struct ferry_client *c, const char *method, const char *path,
                         const char *content_type, const char *body, size_t len, long *status,
                         struct ferry_buf *out, struct ferry_error *err)
{
    struct ferry__http_opts o = {
        .what = "ferry server",
        .origin = "http",
        .total_timeout_ms = env_long("FERRY_CLIENT_TIMEOUT", 60, 1, 3600) * 1000L,
    };
    struct ferry__http_req q = {0};
    *status = 0;
    int rc = send_one(c, method, path, content_type, body, len, &o, &q, status, out, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry_buf_append(out, "", 1); /* NUL-terminated */
    if (rc != FERRY_OK) return ferry_error_set(err, rc, "cli", "out of memory");
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
};

static bool on_data(void *arg, long status, const char *p, size_t n)
{
    struct stream *s = arg;
    if (ferry_buf_append(&s->buf, p, n) != FERRY_OK) return false;
    if (status != 200) return true; /* an error body: kept whole */
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
    return !s->stop;
}

int ferry_client_events(struct ferry_client *c, const char *path,
                        bool (*on_event)(void *arg, const char *json), void *arg, long *status,
                        struct ferry_error *err)
{
    struct stream s = {.on_event = on_event, .arg = arg};
    ferry_buf_init(&s.buf, 64u << 20);
    /* A stream has no end to wait for, but the server writes a keep-alive every 15 s: a
     * stream silent for twice that long (or $FERRY_CLIENT_TIMEOUT, when longer) is a server
     * that stopped answering, not an idle run. */
    long stall = env_long("FERRY_CLIENT_TIMEOUT", 60, 1, 3600);
    struct ferry__http_opts o = {
        .what = "ferry server", .origin = "http", .low_speed_time_s = stall > 30 ? stall : 30L};
    struct ferry__http_req q = {.on_data = on_data, .arg = &s};
    *status = 0;
    int rc = send_one(c, "GET", path, NULL, NULL, 0, &o, &q, status, NULL, err);
    if (rc == FERRY_OK && *status != 200) {
        char msg[512];
        if (ferry_buf_append(&s.buf, "", 1) == FERRY_OK) {
            s.buf.len--;
            ferry_client_error_message(*status, &s.buf, msg, sizeof msg);
        } else {
            snprintf(msg, sizeof msg, "HTTP %ld", *status);
        }
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
