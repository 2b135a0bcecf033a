/* server/api.c - the route handlers of `ferry serve` (server/internal.h, one function per
 * route of the table in http.c, documented in docs/api/openapi.json).
 *
 * Handlers validate their input first and answer 400 with a JSON error naming the field
 * ({"error": {"code", "message"}}); they never show SQL, file paths of the state or
 * library internals (ferry__srv_ferror turns internal failures into a generic 500).
 * Pipeline specs are stored and returned as written, with secrets as `env:`/`file:`
 * references: nothing here resolves a secret, except /v1/connectors/discover, which opens
 * the source like a run would and returns only column descriptions. Calls the store, the
 * bus, the pipeline loader, the connector registry and control/control.h. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "bus/bus.h"
#include "control/attempts.h"
#include "config/access.h"
#include "control/control.h"
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "server/internal.h"
#include "store/secrets.h"
#include "store/store.h"

#define KEY_MAX 200

/* ---- helpers ---- */

static json_t *parse_json_text(const char *text)
{
    json_t *j = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_null();
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (s == NULL || *s == '\0') return false;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool body_blank(const struct req *rq)
{
    for (size_t i = 0; i < rq->body_len; i++)
        if (!isspace((unsigned char)rq->body[i])) return false;
    return true;
}

/* A JSON object body (empty body = {} when allow_empty); on failure the 400 is queued and
 * *reply holds it. */
static json_t *json_body(struct req *rq, bool allow_empty, enum MHD_Result *reply)
{
    if (allow_empty && body_blank(rq)) return json_object();
    json_error_t je;
    json_t *j = json_loadb(rq->body, rq->body_len, 0, &je);
    if (j == NULL) {
        *reply = ferry__srv_error(rq, 400, "invalid_body",
                                  "body: not valid JSON: %s (line %d, column %d)", je.text, je.line,
                                  je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *reply = ferry__srv_error(rq, 400, "invalid_body", "body: must be a JSON object");
        return NULL;
    }
    return j;
}

/* The first key of obj not in allowed (NULL-terminated), or NULL. */
static const char *unknown_key(json_t *obj, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i]; i++)
            if (strcmp(k, allowed[i]) == 0) ok = true;
        if (!ok) return k;
    }
    return NULL;
}

/* ---- plain secrets: refused at registration ---- */

static bool is_ref(const char *s)
{
    return strncmp(s, "env:", 4) == 0 || strncmp(s, "file:", 5) == 0 ||
           strncmp(s, "secret:", 7) == 0;
}


static bool has_word_ci(const char *s, const char *w)
{
    size_t wl = strlen(w);
    for (; *s; s++)
        if (strncasecmp(s, w, wl) == 0) return true;
    return false;
}

/* Keys that hold credentials (a resource's `key` lists key columns and is not one). */
static bool credential_key(const char *k)
{
    static const char *const words[] = {"password", "passwd", "secret", "token",
                                        "credential", "access_key", "private_key", NULL};
    if (k == NULL) return false;
    size_t l = strlen(k);
    static const char *const not_sfx[] = {"_url", "_uri", "_endpoint", "_scope", "_name", NULL};
    for (int i = 0; not_sfx[i]; i++) {
        size_t sl = strlen(not_sfx[i]);
        if (l > sl && strcasecmp(k + l - sl, not_sfx[i]) == 0) return false;
    }
    for (int w = 0; words[w]; w++)
        if (has_word_ci(k, words[w])) return true;
    return false;
}

/* password= in a conninfo or a URL query ("password =" too). */
static bool password_param(const char *v)
{
    for (const char *s = v; (s = strcasestr(s, "password")) != NULL; s += 8) {
        const char *t = s + 8;
        while (*t == ' ')
            t++;
        if (*t == '=') return true;
    }
    return false;
}

/* scheme://user:PASSWORD@host */
static bool url_password(const char *v)
{
    const char *sep = strstr(v, "://");
    if (sep == NULL) return false;
    const char *auth = sep + 3;
    size_t al = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < al; i++)
        if (auth[i] == '@') at = auth + i;
    return at && memchr(auth, ':', (size_t)(at - auth)) != NULL;
}

static int plain_secrets_walk(const struct ferry_cfg *n, const char *key, struct ferry_error *e)
{
    if (n->kind == FERRY_CFG_SCALAR && n->scalar) {
        const char *v = n->scalar;
        if (is_ref(v) || !strncmp(v, "secret:", 7) || v[0] == '\0') return FERRY_OK;
        const char *why = NULL;
        /* A transform's `key` is an HMAC key (a resource's `key` lists columns). */
        bool transform_key = key && !strcmp(key, "key") && n->path &&
                             !strncmp(n->path, "transforms[", 11) && n->key != NULL;
        if (credential_key(key) || transform_key)
            why = "a credential must be a reference (env:NAME, file:PATH or secret:NAME), not a "
                  "plain value";
        else if (url_password(v))
            why = "a password in a URL (user:PASSWORD@host) is not allowed; put the whole URL "
                  "in a secret and reference it (env:NAME, file:PATH or secret:NAME)";
        else if (password_param(v))
            why = "password= is not allowed in a connection string; reference the whole value "
                  "(env:NAME, file:PATH or secret:NAME)";
        if (why)
            return ferry_error_set(e, FERRY_EINVAL, "server", "%s: %s",
                                   n->path && n->path[0] ? n->path : "(root)", why);
        return FERRY_OK;
    }
    for (int i = 0; i < n->n_children; i++) {
        const struct ferry_cfg *c = n->children[i];
        int rc = plain_secrets_walk(c, c->key ? c->key : key, e);
        if (rc) return rc;
    }
    return FERRY_OK;
}

int ferry__api_plain_secrets(const struct ferry_pipeline_spec *p, struct ferry_error *e)
{
    return p->root ? plain_secrets_walk(p->root, NULL, e) : FERRY_OK;
}

/* Loads a pipeline from the body: YAML as the CLI reads it, or JSON (same keys). */
static int load_body_pipeline(struct req *rq, struct ferry_pipeline_spec **p,
                              enum MHD_Result *reply)
{
    *p = NULL;
    if (body_blank(rq)) {
        *reply = ferry__srv_error(rq, 400, "invalid_body",
                                  "body: a pipeline (YAML or JSON) is required");
        return -1;
    }
    const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Type");
    size_t i = 0;
    while (i < rq->body_len && isspace((unsigned char)rq->body[i]))
        i++;
    bool is_json = (ct && strstr(ct, "json")) || rq->body[i] == '{';
    char *text = NULL;
    if (is_json) {
        json_error_t je;
        json_t *j = json_loadb(rq->body, rq->body_len, 0, &je);
        if (j == NULL) {
            *reply = ferry__srv_error(rq, 400, "invalid_body",
                                      "body: not valid JSON: %s (line %d, column %d)", je.text,
                                      je.line, je.column);
            return -1;
        }
        if (!json_is_object(j)) {
            json_decref(j);
            *reply =
                ferry__srv_error(rq, 400, "invalid_body", "body: a pipeline must be a JSON object");
            return -1;
        }
        /* JSON is YAML's flow style: compact JSON goes through the same loader. */
        text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    } else if (memchr(rq->body, '\0', rq->body_len)) {
        *reply = ferry__srv_error(rq, 400, "invalid_body", "body: contains a NUL byte");
        return -1;
    }
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = text ? ferry_pipeline_load_string(text, strlen(text), "body", p, &e)
                  : ferry_pipeline_load_string(rq->body, rq->body_len, "body", p, &e);
    free(text);
    if (rc != FERRY_OK) {
        *reply = ferry__srv_error(rq, rc == FERRY_ENOMEM ? 500 : 400, "invalid_pipeline", "%s",
                                  e.message);
        return -1;
    }
    /* What the pipeline may touch: checked before anything opens, stores or answers. */
    rc = rq->srv->o.policy ? ferry_access_check(rq->srv->o.policy, *p, &e) : FERRY_OK;
    if (rc == FERRY_OK) rc = ferry__api_plain_secrets(*p, &e);
    if (rc != FERRY_OK) {
        ferry_pipeline_free(*p);
        *p = NULL;
        *reply = ferry__srv_error(rq, rc == FERRY_ENOMEM ? 500 : 400,
                                  rc == FERRY_EPOLICY ? "policy" : "plain_secret", "%s", e.message);
        return -1;
    }
    return 0;
}

static json_t *run_json(const struct ferry_run_info *r)
{
    return json_pack("{s:I,s:s,s:s,s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I},s:s}", "id",
                     (json_int_t)r->id, "pipeline", r->pipeline, "version", r->version, "state",
                     ferry_run_state_name(r->state), "attempt", r->attempt, "pid", r->pid,
                     "created_us", (json_int_t)r->created_us, "started_us",
                     (json_int_t)r->started_us, "ended_us", (json_int_t)r->ended_us, "heartbeat_us",
                     (json_int_t)r->heartbeat_us, "rows", (json_int_t)r->rows, "bytes",
                     (json_int_t)r->bytes, "batches", (json_int_t)r->batches, "integrity",
                     "verified", (json_int_t)r->verified, "diverged", (json_int_t)r->diverged,
                     "error", r->error);
}

static bool secret_key_name(const char *k)
{
    static const char *const words[] = {"password", "passwd",     "secret",
                                        "token",    "credential", NULL};
    char low[64];
    size_t i = 0;
    for (; k[i] && i < sizeof low - 1; i++)
        low[i] = (char)tolower((unsigned char)k[i]);
    low[i] = '\0';
    if (strcmp(low, "key") == 0 || strstr(low, "access_key")) return true;
    for (int w = 0; words[w]; w++)
        if (strstr(low, words[w])) return true;
    return false;
}

/* What a spec may hold in clear although it should not: a password inside a URL
 * (scheme://user:PASSWORD@host) or a plain value under a secret-sounding key. Both are
 * replaced before a spec leaves the server; references (env:/file:) stay as they are. */
static json_t *redact_string(const char *key, const char *s)
{
    if (is_ref(s)) return NULL;
    if (key && secret_key_name(key)) return json_string("(redacted)");
    const char *scheme = strstr(s, "://");
    if (scheme == NULL) return NULL;
    const char *user = scheme + 3, *at = strchr(user, '@'), *slash = strchr(user, '/');
    if (at == NULL || (slash && slash < at)) return NULL;
    const char *colon = memchr(user, ':', (size_t)(at - user));
    if (colon == NULL) return NULL;
    char *out = ferry_asprintf("%.*s:(redacted)%s", (int)(colon - s), s, at);
    json_t *j = out ? json_string(out) : NULL;
    ferry_free(out);
    return j;
}

static void redact(json_t *v)
{
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x)
        {
            if (json_is_string(x)) {
                json_t *r = redact_string(k, json_string_value(x));
                if (r) json_object_set_new(v, k, r);
            } else {
                redact(x);
            }
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            if (json_is_string(x)) {
                json_t *r = redact_string(NULL, json_string_value(x));
                if (r) json_array_set_new(v, i, r);
            } else {
                redact(x);
            }
        }
    }
}

static json_t *spec_json(const char *text)
{
    json_t *j = parse_json_text(text);
    redact(j);
    return j;
}

static json_t *pipeline_json(const struct ferry_pipeline_info *p)
{
    json_t *j = json_pack("{s:s,s:s,s:i,s:i,s:I,s:I}", "name", p->name, "version", p->version,
                          "retries", p->retries, "versions", p->n_versions, "created_us",
                          (json_int_t)p->created_us, "updated_us", (json_int_t)p->updated_us);
    if (p->spec) json_object_set_new(j, "spec", spec_json(p->spec));
    return j;
}

static json_t *schedule_json(const struct ferry_schedule *s)
{
    return json_pack("{s:I,s:s,s:s,s:s,s:s,s:b,s:I,s:I,s:I,s:I}", "id", (json_int_t)s->id,
                     "pipeline", s->pipeline, "cron", s->cron, "timezone", s->timezone, "overlap",
                     s->overlap, "enabled", s->enabled, "next_us", (json_int_t)s->next_us,
                     "last_us", (json_int_t)s->last_us, "last_run", (json_int_t)s->last_run,
                     "created_us", (json_int_t)s->created_us);
}

static bool run_id_param(struct req *rq, int64_t *id, enum MHD_Result *reply)
{
    if (parse_i64(rq->params[0], 1, INT64_MAX, id)) return true;
    *reply = ferry__srv_error(rq, 404, "not_found", "run \"%s\" not found (run ids are numbers)",
                              rq->params[0]);
    return false;
}

/* ---- health, metrics ---- */

enum MHD_Result ferry__api_livez(struct req *rq)
{
    return ferry__srv_json(rq, 200, json_pack("{s:s}", "status", "ok"));
}

enum MHD_Result ferry__api_readyz(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    int64_t seq = ferry_store_event_last_seq(st);
    struct ferry_store_totals t;
    int rc = ferry_store_totals(st, &t, NULL);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK || seq < 0)
        return ferry__srv_json(rq, 503, json_pack("{s:s}", "status", "state store unavailable"));
    return ferry__srv_json(rq, 200, json_pack("{s:s}", "status", "ready"));
}

/* A Prometheus label value: quoted, with \\, \" and newlines escaped. */
static void label_value(struct ferry_buf *b, const char *v)
{
    ferry_buf_append(b, "\"", 1);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            ferry_buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            ferry_buf_append(b, "\\n", 2);
        else
            ferry_buf_append(b, v, 1);
    }
    ferry_buf_append(b, "\"", 1);
}

enum MHD_Result ferry__api_metrics(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_store_totals t;
    struct ferry_error e;
    int rc = ferry_store_totals(st, &t, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    struct ferry_control_stats cs;
    ferry_control_stats(rq->srv->o.control, &cs);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(
        &b, "# HELP ferry_runs Runs in the state store by state.\n# TYPE ferry_runs gauge\n");
    for (int i = 0; i < FERRY_RUN_STATE_MAX; i++)
        ferry_buf_printf(&b, "ferry_runs{state=\"%s\"} %" PRId64 "\n",
                         ferry_run_state_name((enum ferry_run_state)i), t.runs[i]);
    struct {
        const char *name, *type, *help;
        int64_t v;
    } m[] = {
        {"ferry_rows_total", "counter", "Rows written by all runs.", t.rows},
        {"ferry_bytes_total", "counter", "Bytes written by all runs.", t.bytes},
        {"ferry_batches_total", "counter", "Batches written by all runs.", t.batches},
        {"ferry_batches_verified_total", "counter", "Batches whose integrity digest matched.",
         t.verified},
        {"ferry_batches_diverged_total", "counter", "Batches whose integrity digest differed.",
         t.diverged},
        {"ferry_workers_running", "gauge", "Worker processes running now.", cs.workers_running},
        {"ferry_runs_queued", "gauge", "Requested runs waiting for a worker slot.", cs.runs_queued},
        {"ferry_workers_started_total", "counter", "Worker processes started.", cs.workers_started},
        {"ferry_workers_lost_total", "counter", "Workers reaped (lease expired or died).",
         cs.workers_lost},
        {"ferry_runs_retried_total", "counter", "Lost runs dispatched again by the retry policy.",
         cs.runs_retried},
        {"ferry_schedules_fired_total", "counter", "Runs requested by schedules.",
         cs.schedules_fired},
        {"ferry_control_leader", "gauge",
         "1 while this process's control plane holds the lease \"control\" (leads).",
         cs.leader ? 1 : 0},
        {"ferry_http_requests_total", "counter", "HTTP requests received.",
         (int64_t)atomic_load(&rq->srv->requests)},
        {"ferry_http_unauthorized_total", "counter",
         "HTTP requests refused for a missing or wrong token.",
         (int64_t)atomic_load(&rq->srv->unauthorized)},
        {"ferry_event_streams", "gauge", "Open Server-Sent Events streams.",
         (int64_t)atomic_load(&rq->srv->streams_open)},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        ferry_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRId64 "\n", m[i].name, m[i].help,
                         m[i].name, m[i].type, m[i].name, m[i].v);
    struct ferry_server *s = rq->srv;
    pthread_mutex_lock(&s->stats_lock);
    ferry_buf_printf(&b,
                     "# HELP ferry_batch_latency_seconds Time from a batch closed (batch.buffered)"
                     " to written and verified (batch.written), since the server started.\n"
                     "# TYPE ferry_batch_latency_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < LAT_BUCKETS; i++) {
        cum += s->lat_counts[i];
        ferry_buf_printf(&b, "ferry_batch_latency_seconds_bucket{le=\"%g\"} %llu\n",
                         ferry__srv_lat_bounds[i], (unsigned long long)cum);
    }
    ferry_buf_printf(
        &b,
        "ferry_batch_latency_seconds_bucket{le=\"+Inf\"} %llu\n"
        "ferry_batch_latency_seconds_sum %.6f\nferry_batch_latency_seconds_count %llu\n",
        (unsigned long long)s->lat_n, s->lat_sum, (unsigned long long)s->lat_n);
    ferry_buf_printf(&b,
                     "# HELP ferry_queue_depth Ready batches waiting for the writer, per running"
                     " run (its last heartbeat).\n# TYPE ferry_queue_depth gauge\n");
    for (int i = 0; i < s->n_depth; i++)
        ferry_buf_printf(&b, "ferry_queue_depth{run=\"%" PRId64 "\"} %" PRId64 "\n",
                         s->depth[i].run_id, s->depth[i].depth);
    ferry_buf_printf(&b,
                     "# HELP ferry_replication_lag_bytes WAL bytes a running cdc resource is behind"
                     " its source.\n# TYPE ferry_replication_lag_bytes gauge\n");
    for (int i = 0; i < s->n_lag; i++) {
        ferry_buf_printf(
            &b, "ferry_replication_lag_bytes{run=\"%" PRId64 "\",resource=", s->lag[i].run_id);
        label_value(&b, s->lag[i].resource);
        ferry_buf_printf(&b, "} %" PRId64 "\n", s->lag[i].bytes);
    }
    ferry_buf_printf(&b,
                     "# HELP ferry_replication_lag_seconds How old the newest change a running cdc"
                     " resource applied is.\n# TYPE ferry_replication_lag_seconds gauge\n");
    for (int i = 0; i < s->n_lag; i++) {
        ferry_buf_printf(
            &b, "ferry_replication_lag_seconds{run=\"%" PRId64 "\",resource=", s->lag[i].run_id);
        label_value(&b, s->lag[i].resource);
        ferry_buf_printf(&b, "} %.3f\n", s->lag[i].seconds);
    }
    pthread_mutex_unlock(&s->stats_lock);
    enum MHD_Result r = ferry__srv_text(rq, 200, "text/plain; version=0.0.4", b.data, b.len);
    ferry_buf_release(&b);
    return r;
}

/* ---- connectors, secrets ---- */

enum MHD_Result ferry__api_connectors(struct req *rq)
{
    json_t *src = json_array(), *snk = json_array();
    for (const struct ferry_source_vtable *const *s = ferry_sources(); *s; s++) {
        json_t *modes = json_pack("[s]", "full");
        if ((*s)->supports_incremental) json_array_append_new(modes, json_string("incremental"));
        if ((*s)->supports_cdc) json_array_append_new(modes, json_string("cdc"));
        json_array_append_new(src, json_pack("{s:s,s:o}", "name", (*s)->name, "read_modes", modes));
    }
    for (const struct ferry_sink_vtable *const *s = ferry_sinks(); *s; s++)
        json_array_append_new(snk, json_pack("{s:s}", "name", (*s)->name));
    return ferry__srv_json(rq, 200, json_pack("{s:o,s:o}", "sources", src, "sinks", snk));
}

enum MHD_Result ferry__api_validate(struct req *rq)
{
    struct ferry_pipeline_spec *p;
    enum MHD_Result reply;
    if (load_body_pipeline(rq, &p, &reply) != 0) return reply;
    json_t *res = json_array();
    for (int i = 0; i < p->n_resources; i++)
        json_array_append_new(res, json_pack("{s:s,s:s}", "table", p->resources[i].table, "mode",
                                             ferry_read_mode_name(p->resources[i].mode)));
    json_t *j = json_pack("{s:b,s:s,s:s,s:s,s:s,s:s,s:o}", "valid", 1, "name", p->name, "version",
                          p->version, "source", p->source_type, "sink", p->sink_type, "write",
                          ferry_write_mode_name(p->write), "resources", res);
    ferry_pipeline_free(p);
    return ferry__srv_json(rq, 200, j);
}

enum MHD_Result ferry__api_discover(struct req *rq)
{
    struct ferry_pipeline_spec *p;
    enum MHD_Result reply;
    if (load_body_pipeline(rq, &p, &reply) != 0) return reply;
    /* Checked here (policy, plain secrets); opened in a child with limits (discover.c). */
    char *text = ferry_strdup(p->request_json ? p->request_json : "");
    ferry_pipeline_free(p);
    if (text == NULL) return ferry__srv_error(rq, 500, "internal", "out of memory");
    reply = ferry__srv_discover(rq, text, strlen(text));
    ferry_free(text);
    return reply;
}

static int add_stored(struct ferry_store *st, json_t *acc, struct ferry_error *e);

static void collect_refs(json_t *v, const char *pipeline, json_t *acc)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strncmp(s, "env:", 4) != 0 && strncmp(s, "file:", 5) != 0 &&
            strncmp(s, "secret:", 7) != 0)
            return;
        json_t *e = json_object_get(acc, s);
        if (e == NULL) {
            /* Never probed: whether a file or variable exists is not the caller's to learn. */
            e = json_pack("{s:s,s:s,s:[]}", "ref", s, "kind",
                          s[0] == 'e' ? "env" : s[0] == 'f' ? "file" : "secret", "pipelines");
            json_object_set_new(acc, s, e);
        }
        json_t *ps = json_object_get(e, "pipelines");
        size_t i;
        json_t *x;
        json_array_foreach(ps, i, x) if (strcmp(json_string_value(x), pipeline) == 0) return;
        json_array_append_new(ps, json_string(pipeline));
        return;
    }
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v)) json_array_foreach(v, i, x) collect_refs(x, pipeline, acc);
    if (json_is_object(v)) json_object_foreach(v, k, x) collect_refs(x, pipeline, acc);
}

enum MHD_Result ferry__api_secrets(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_pipeline_info *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_pipeline_list(st, &v, &n, &e);
    json_t *acc = json_object();
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        struct ferry_pipeline_info pi;
        if (ferry_store_pipeline_get(st, v[i].name, &pi, NULL) != FERRY_OK) continue;
        json_t *spec = parse_json_text(pi.spec);
        collect_refs(spec, pi.name, acc);
        json_decref(spec);
        ferry_pipeline_info_clear(&pi);
    }
    if (rc == FERRY_OK) rc = add_stored(st, acc, &e);
    ferry__srv_store_put(rq->srv, st);
    ferry_pipeline_infos_free(v, n);
    if (rc != FERRY_OK) {
        json_decref(acc);
        return ferry__srv_ferror(rq, &e);
    }
    json_t *arr = json_array();
    const char *k;
    json_t *x;
    json_object_foreach(acc, k, x) json_array_append(arr, x);
    json_decref(acc);
    return ferry__srv_json(rq, 200, json_pack("{s:o}", "secrets", arr));
}

/* The secrets store's entries (names and times, never values) into acc, keyed by ref. */
static int add_stored(struct ferry_store *st, json_t *acc, struct ferry_error *e)
{
    struct ferry_secret_info *v = NULL;
    int n = 0;
    int rc = ferry_store_secret_list(st, &v, &n, e);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        char ref[160];
        snprintf(ref, sizeof ref, "secret:%s", v[i].name);
        json_t *o = json_object_get(acc, ref);
        if (o == NULL) {
            o = json_pack("{s:s,s:s,s:[]}", "ref", ref, "kind", "secret", "pipelines");
            json_object_set_new(acc, ref, o);
        }
        json_object_set_new(o, "name", json_string(v[i].name));
        json_object_set_new(o, "stored", json_true());
        json_object_set_new(o, "created_us", json_integer(v[i].created_us));
        json_object_set_new(o, "updated_us", json_integer(v[i].updated_us));
    }
    ferry_free(v);
    return rc;
}

enum MHD_Result ferry__api_secret_put(struct req *rq)
{
    const uint8_t *key = rq->srv->o.secret_key;
    struct ferry_error e;
    ferry_error_clear(&e);
    if (key == NULL)
        return ferry__srv_error(rq, 409, "no_secret_key",
                                "this server has no secret key (ferry serve --secret-key)");
    if (ferry_secrets_name_check(rq->params[0], &e) != FERRY_OK)
        return ferry__srv_error(rq, 400, "invalid_name", "%s", e.message);
    struct ferry_store *st = ferry__srv_store(rq->srv);
    int rc = ferry_secrets_put(st, key, rq->params[0], rq->body, rq->body_len, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, json_pack("{s:s,s:b}", "name", rq->params[0], "stored", 1));
}

enum MHD_Result ferry__api_secret_delete(struct req *rq)
{
    struct ferry_error e;
    ferry_error_clear(&e);
    if (ferry_secrets_name_check(rq->params[0], &e) != FERRY_OK)
        return ferry__srv_error(rq, 400, "invalid_name", "%s", e.message);
    struct ferry_store *st = ferry__srv_store(rq->srv);
    int rc = ferry_store_secret_delete(st, rq->params[0], &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, json_pack("{s:s,s:b}", "name", rq->params[0], "deleted", 1));
}

/* ---- pipelines ---- */

enum MHD_Result ferry__api_pipelines_list(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_pipeline_info *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_pipeline_list(st, &v, &n, &e);
    json_t *arr = json_array();
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        json_t *pj = pipeline_json(&v[i]);
        struct ferry_schedule *sc = NULL;
        int ns = 0;
        json_t *sa = json_array();
        if (ferry_store_schedule_list(st, v[i].name, &sc, &ns, NULL) == FERRY_OK)
            for (int k = 0; k < ns; k++)
                json_array_append_new(sa, schedule_json(&sc[k]));
        ferry_free(sc);
        json_object_set_new(pj, "schedules", sa);
        struct ferry_run_info *runs = NULL;
        int nr = 0;
        if (ferry_store_run_list_filtered(st, v[i].name, -1, 0, 1, &runs, &nr, NULL) == FERRY_OK &&
            nr == 1)
            json_object_set_new(pj, "last_run", run_json(&runs[0]));
        ferry_run_infos_free(runs, nr);
        json_array_append_new(arr, pj);
    }
    ferry__srv_store_put(rq->srv, st);
    ferry_pipeline_infos_free(v, n);
    if (rc != FERRY_OK) {
        json_decref(arr);
        return ferry__srv_ferror(rq, &e);
    }
    return ferry__srv_json(rq, 200, json_pack("{s:o}", "pipelines", arr));
}

enum MHD_Result ferry__api_pipelines_apply(struct req *rq)
{
    int64_t retries = 0;
    const char *rs = ferry__srv_query(rq, "retries");
    if (rs && !parse_i64(rs, 0, 100, &retries))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "retries: must be an integer from 0 to 100");
    struct ferry_pipeline_spec *p;
    enum MHD_Result reply;
    if (load_body_pipeline(rq, &p, &reply) != 0) return reply;
    struct ferry_store *st = ferry__srv_store(rq->srv);
    bool added = false;
    struct ferry_error e;
    struct ferry_pipeline_info pi;
    memset(&pi, 0, sizeof pi);
    int rc = ferry_store_pipeline_apply(st, p->name, p->version, p->request_json, (int)retries,
                                        &added, &e);
    if (rc == FERRY_OK) rc = ferry_store_pipeline_get(st, p->name, &pi, &e);
    ferry__srv_store_put(rq->srv, st);
    ferry_pipeline_free(p);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *j = pipeline_json(&pi);
    json_object_set_new(j, "new_version", json_boolean(added));
    ferry_pipeline_info_clear(&pi);
    return ferry__srv_json(rq, added ? 201 : 200, j);
}

enum MHD_Result ferry__api_pipeline_get(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_pipeline_info pi;
    struct ferry_error e;
    int rc = ferry_store_pipeline_get(st, rq->params[0], &pi, &e);
    json_t *j = NULL;
    if (rc == FERRY_OK) {
        j = pipeline_json(&pi);
        struct ferry_schedule *sc = NULL;
        int ns = 0;
        json_t *sa = json_array();
        if (ferry_store_schedule_list(st, pi.name, &sc, &ns, NULL) == FERRY_OK)
            for (int k = 0; k < ns; k++)
                json_array_append_new(sa, schedule_json(&sc[k]));
        ferry_free(sc);
        json_object_set_new(j, "schedules", sa);
    }
    ferry__srv_store_put(rq->srv, st);
    ferry_pipeline_info_clear(&pi);
    return rc == FERRY_OK ? ferry__srv_json(rq, 200, j) : ferry__srv_ferror(rq, &e);
}

enum MHD_Result ferry__api_pipeline_delete(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_error e;
    int rc = ferry_store_pipeline_delete(st, rq->params[0], &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, json_pack("{s:s,s:b}", "name", rq->params[0], "deleted", 1));
}

enum MHD_Result ferry__api_pipeline_versions(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_pipeline_info pi;
    struct ferry_pipeline_version *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_pipeline_get(st, rq->params[0], &pi, &e);
    if (rc == FERRY_OK) rc = ferry_store_pipeline_versions(st, rq->params[0], &v, &n, &e);
    ferry__srv_store_put(rq->srv, st);
    json_t *arr = json_array();
    for (int i = 0; rc == FERRY_OK && i < n; i++)
        json_array_append_new(arr, json_pack("{s:s,s:I,s:b}", "version", v[i].version, "created_us",
                                             (json_int_t)v[i].created_us, "current",
                                             strcmp(v[i].version, pi.version) == 0));
    ferry_free(v);
    ferry_pipeline_info_clear(&pi);
    if (rc != FERRY_OK) {
        json_decref(arr);
        return ferry__srv_ferror(rq, &e);
    }
    return ferry__srv_json(rq, 200, json_pack("{s:s,s:o}", "name", rq->params[0], "versions", arr));
}

enum MHD_Result ferry__api_pipeline_version(struct req *rq)
{
    struct ferry_store *st = ferry__srv_store(rq->srv);
    char *spec = NULL;
    struct ferry_error e;
    int rc = ferry_store_pipeline_version_spec(st, rq->params[0], rq->params[1], &spec, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *j = json_pack("{s:s,s:s,s:o}", "name", rq->params[0], "version", rq->params[1], "spec",
                          spec_json(spec));
    ferry_free(spec);
    return ferry__srv_json(rq, 200, j);
}

/* ---- runs ---- */

enum MHD_Result ferry__api_runs_create(struct req *rq)
{
    enum MHD_Result reply;
    json_t *b = json_body(rq, true, &reply);
    if (b == NULL) return reply;
    static const char *const allowed[] = {"idempotency_key", NULL};
    const char *bad = unknown_key(b, allowed);
    if (bad) {
        reply = ferry__srv_error(rq, 400, "invalid_body",
                                 "%s: unknown field (allowed: idempotency_key)", bad);
        json_decref(b);
        return reply;
    }
    const char *key = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Idempotency-Key");
    json_t *k = json_object_get(b, "idempotency_key");
    if (k && !json_is_null(k)) {
        if (!json_is_string(k)) {
            json_decref(b);
            return ferry__srv_error(rq, 400, "invalid_body", "idempotency_key: must be a string");
        }
        key = json_string_value(k);
    }
    if (key && (key[0] == '\0' || strlen(key) > KEY_MAX)) {
        json_decref(b);
        return ferry__srv_error(rq, 400, "invalid_body",
                                "idempotency_key: must be 1 to %d characters", KEY_MAX);
    }
    struct ferry_store *st = ferry__srv_store(rq->srv);
    int64_t id = 0;
    bool existed = false;
    struct ferry_error e;
    struct ferry_run_info run;
    memset(&run, 0, sizeof run);
    int rc =
        ferry_control_request_run(st, rq->srv->o.bus, rq->params[0], "api", key, &id, &existed, &e);
    if (rc == FERRY_OK) rc = ferry_store_run_get(st, id, &run, &e);
    if (rc == FERRY_OK && !existed) ferry__api_trace_context(rq, id); /* api_ops.c */
    ferry__srv_store_put(rq->srv, st);
    json_decref(b);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *j = run_json(&run);
    json_object_set_new(j, "existed", json_boolean(existed));
    ferry_run_info_clear(&run);
    return ferry__srv_json(rq, existed ? 200 : 201, j);
}

enum MHD_Result ferry__api_runs_list(struct req *rq)
{
    const char *pipeline = ferry__srv_query(rq, "pipeline");
    const char *state_s = ferry__srv_query(rq, "state");
    int64_t limit = 50, before = 0;
    enum ferry_run_state state = 0;
    if (state_s && state_s[0] && ferry_run_state_from_name(state_s, &state) != FERRY_OK)
        return ferry__srv_error(
            rq, 400, "invalid_parameter",
            "state: must be requested, running, paused, completed, partial, failed or canceled");
    const char *ls = ferry__srv_query(rq, "limit"), *bs = ferry__srv_query(rq, "before");
    if (ls && !parse_i64(ls, 1, 1000, &limit))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "limit: must be an integer from 1 to 1000");
    if (bs && !parse_i64(bs, 1, INT64_MAX, &before))
        return ferry__srv_error(rq, 400, "invalid_parameter", "before: must be a run id");
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_run_list_filtered(st, pipeline && pipeline[0] ? pipeline : NULL,
                                           state_s && state_s[0] ? (int)state : -1, before,
                                           (int)limit, &v, &n, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, run_json(&v[i]));
    ferry_run_infos_free(v, n);
    return ferry__srv_json(rq, 200, json_pack("{s:o}", "runs", arr));
}

enum MHD_Result ferry__api_run_get(struct req *rq)
{
    int64_t id;
    enum MHD_Result reply;
    if (!run_id_param(rq, &id, &reply)) return reply;
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info run;
    struct ferry_resource_state *rs = NULL;
    int nrs = 0, retries = 0;
    struct ferry_error e;
    int rc = ferry_store_run_get(st, id, &run, &e);
    if (rc == FERRY_OK) rc = ferry_store_resource_list(st, id, &rs, &nrs, &e);
    json_t *j = NULL;
    if (rc == FERRY_OK) {
        j = run_json(&run);
        ferry_store_run_retries(st, id, &retries, NULL);
        json_object_set_new(j, "retries", json_integer(retries));
        bool exited = false;
        int wstatus = 0;
        ferry_store_run_worker_status(st, id, &exited, &wstatus, NULL);
        json_object_set_new(j, "worker_exit", exited ? json_integer(wstatus) : json_null());
        json_t *att = ferry_control_attempts(st, rq->srv->o.bus, id, NULL); /* issue 21 */
        json_object_set_new(j, "attempts", att ? att : json_array());
        json_t *ra = json_array();
        for (int i = 0; i < nrs; i++) {
            json_t *jr =
                json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:{s:I,s:I},s:s}", "resource",
                          rs[i].resource, "mode", rs[i].mode, "write", rs[i].write, "state",
                          rs[i].state, "route", rs[i].route, "rows", (json_int_t)rs[i].rows,
                          "bytes", (json_int_t)rs[i].bytes, "batches", (json_int_t)rs[i].batches,
                          "integrity", "verified", (json_int_t)rs[i].verified, "diverged",
                          (json_int_t)rs[i].diverged, "error", rs[i].error);
            json_object_set_new(jr, "rows_estimate", rs[i].rows_estimate > 0
                                                         ? json_integer((json_int_t)rs[i].rows_estimate)
                                                         : json_null());
            json_object_set_new(jr, "bound", rs[i].bound[0] ? json_string(rs[i].bound) : json_null());
            struct ferry_checkpoint *cps = NULL;
            int ncp = 0;
            json_t *ca = json_array();
            if (ferry_store_run_checkpoints(st, id, rs[i].resource, &cps, &ncp, NULL) == FERRY_OK)
                for (int k = 0; k < ncp; k++)
                    json_array_append_new(ca,
                                          json_pack("{s:i,s:I,s:o}", "shard", cps[k].shard,
                                                    "updated_us", (json_int_t)cps[k].updated_us,
                                                    "position", parse_json_text(cps[k].position)));
            ferry_checkpoints_free(cps, ncp);
            json_object_set_new(jr, "checkpoints", ca);
            /* on_unrepresentable: values converted per column ({} when none) */
            char *conv = NULL;
            ferry_store_resource_converted_get(st, id, rs[i].resource, &conv, NULL);
            json_t *jconv = conv ? json_loads(conv, 0, NULL) : NULL;
            ferry_free(conv);
            json_object_set_new(jr, "converted", json_is_object(jconv) ? jconv : json_object());
            if (!json_is_object(jconv)) json_decref(jconv);
            json_array_append_new(ra, jr);
        }
        json_object_set_new(j, "resources", ra);
    }
    ferry__srv_store_put(rq->srv, st);
    ferry_free(rs);
    if (rc == FERRY_OK) ferry_run_info_clear(&run);
    return rc == FERRY_OK ? ferry__srv_json(rq, 200, j) : ferry__srv_ferror(rq, &e);
}

enum MHD_Result ferry__api_run_events(struct req *rq)
{
    int64_t id, after = 0;
    enum MHD_Result reply;
    if (!run_id_param(rq, &id, &reply)) return reply;
    const char *a = ferry__srv_query(rq, "after");
    if (a == NULL) a = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Last-Event-ID");
    if (a && !parse_i64(a, 0, INT64_MAX, &after))
        return ferry__srv_error(rq, 400, "invalid_parameter",
                                "after: must be an event sequence number");
    const char *f = ferry__srv_query(rq, "follow");
    bool follow = !(f && (!strcmp(f, "0") || !strcmp(f, "false")));
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info run;
    struct ferry_error e;
    int rc = ferry_store_run_get(st, id, &run, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    ferry_run_info_clear(&run);
    return ferry__srv_stream_events(rq, id, after, follow);
}

static enum MHD_Result accepted(struct req *rq, int64_t id, const char *what, const char *state)
{
    return ferry__srv_json(
        rq, 202,
        json_pack("{s:I,s:s,s:s}", "run_id", (json_int_t)id, "requested", what, "state", state));
}

static enum MHD_Result signal_run(struct req *rq, const char *sig)
{
    int64_t id;
    enum MHD_Result reply;
    if (!run_id_param(rq, &id, &reply)) return reply;
    if (!body_blank(rq)) {
        json_t *b = json_body(rq, true, &reply);
        if (b == NULL) return reply;
        static const char *const none[] = {NULL};
        const char *bad = unknown_key(b, none);
        if (bad)
            reply = ferry__srv_error(rq, 400, "invalid_body",
                                     "%s: unknown field (this request takes no fields)", bad);
        json_decref(b);
        if (bad) return reply;
    }
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_run_info run;
    struct ferry_error e;
    int rc = ferry_store_run_get(st, id, &run, &e);
    const char *type = NULL, *result = "";
    if (rc == FERRY_OK) {
        const char *state = ferry_run_state_name(run.state);
        if (!strcmp(sig, "resume")) {
            rc = ferry_store_run_requeue(st, id, false, &e);
            type = FERRY_EV_RUN_REQUESTED, result = "requested";
        } else if (run.state == FERRY_RUN_RUNNING) {
            rc = ferry_store_run_request(st, id, sig, &e);
            type = !strcmp(sig, "pause") ? FERRY_EV_RUN_PAUSE_REQUESTED
                                         : FERRY_EV_RUN_CANCEL_REQUESTED;
            result = "running";
        } else if (!strcmp(sig, "cancel") && !ferry_run_state_is_final(run.state)) {
            /* Nobody runs it: requested (queued) or paused. */
            rc = ferry_store_run_set_state(st, id, run.attempt, FERRY_RUN_CANCELED,
                                           "canceled through the API", &e);
            type = FERRY_EV_RUN_CANCELED, result = "canceled";
        } else {
            rc = ferry_error_set(&e, FERRY_ECONFLICT, "server",
                                 "run %" PRId64 " is %s; it cannot be %s", id, state,
                                 !strcmp(sig, "pause") ? "paused" : "canceled");
        }
        if (rc == FERRY_OK) {
            char payload[64];
            snprintf(payload, sizeof payload, "{\"by\":\"api\"}");
            ferry_bus_emit(rq->srv->o.bus, id, run.attempt, "", type, payload, NULL);
        }
        ferry_run_info_clear(&run);
    }
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return accepted(rq, id, sig, result);
}

enum MHD_Result ferry__api_run_pause(struct req *rq)
{
    return signal_run(rq, "pause");
}

enum MHD_Result ferry__api_run_resume(struct req *rq)
{
    return signal_run(rq, "resume");
}

enum MHD_Result ferry__api_run_cancel(struct req *rq)
{
    return signal_run(rq, "cancel");
}

/* ---- schedules ---- */

enum MHD_Result ferry__api_schedules_list(struct req *rq)
{
    const char *pipeline = ferry__srv_query(rq, "pipeline");
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_schedule *v = NULL;
    int n = 0;
    struct ferry_error e;
    int rc = ferry_store_schedule_list(st, pipeline && pipeline[0] ? pipeline : NULL, &v, &n, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, schedule_json(&v[i]));
    ferry_free(v);
    return ferry__srv_json(rq, 200, json_pack("{s:o}", "schedules", arr));
}

/* field may point into b (an unknown key): the reply is made before b is released. */
static enum MHD_Result field_error(struct req *rq, json_t *b, const char *field, const char *what)
{
    enum MHD_Result r = ferry__srv_error(rq, 400, "invalid_body", "%s: %s", field, what);
    json_decref(b);
    return r;
}

/* Applies the optional fields cron, timezone, overlap and enabled of b to sc and computes the
 * next firing from now. Returns the field at fault (why says what is wrong), or NULL. */
static const char *schedule_fields(json_t *b, struct ferry_schedule *sc, char *why, size_t len)
{
    json_t *v = json_object_get(b, "cron");
    if (v) {
        if (!json_is_string(v) || json_string_length(v) >= sizeof sc->cron) {
            snprintf(why, len, "five fields: minute hour day-of-month month day-of-week");
            return "cron";
        }
        snprintf(sc->cron, sizeof sc->cron, "%s", json_string_value(v));
    }
    v = json_object_get(b, "timezone");
    if (v) {
        if (!json_is_string(v) || json_string_length(v) >= sizeof sc->timezone) {
            snprintf(why, len, "must be an IANA time zone name such as Europe/Paris");
            return "timezone";
        }
        snprintf(sc->timezone, sizeof sc->timezone, "%s", json_string_value(v));
    }
    if (!ferry_timezone_valid(sc->timezone)) {
        snprintf(why, len, "not a time zone known to this server");
        return "timezone";
    }
    v = json_object_get(b, "overlap");
    if (v) {
        const char *ov = json_string_value(v);
        if (ov == NULL || (strcmp(ov, "skip") && strcmp(ov, "queue") && strcmp(ov, "allow"))) {
            snprintf(why, len, "must be skip, queue or allow");
            return "overlap";
        }
        snprintf(sc->overlap, sizeof sc->overlap, "%s", ov);
    }
    v = json_object_get(b, "enabled");
    if (v) {
        if (!json_is_boolean(v)) {
            snprintf(why, len, "must be true or false");
            return "enabled";
        }
        sc->enabled = json_is_true(v);
    }
    struct ferry_cron *cron = NULL;
    struct ferry_error e;
    int rc = ferry_cron_parse(sc->cron, &cron, &e);
    if (rc == FERRY_OK)
        rc = ferry_cron_next(cron, sc->timezone, ferry_now_wall_us(), &sc->next_us, &e);
    ferry_cron_free(cron);
    if (rc != FERRY_OK) {
        /* The parser's message already says "cron: "; the reply adds the field name. */
        snprintf(why, len, "%s", strncmp(e.message, "cron: ", 6) == 0 ? e.message + 6 : e.message);
        return "cron";
    }
    return NULL;
}

enum MHD_Result ferry__api_schedules_create(struct req *rq)
{
    enum MHD_Result reply;
    json_t *b = json_body(rq, false, &reply);
    if (b == NULL) return reply;
    static const char *const allowed[] = {"pipeline", "cron",    "timezone",
                                          "overlap",  "enabled", NULL};
    const char *bad = unknown_key(b, allowed);
    if (bad)
        return field_error(rq, b, bad,
                           "unknown field (allowed: pipeline, cron, timezone, overlap, enabled)");
    struct ferry_schedule sc = {.enabled = true};
    snprintf(sc.timezone, sizeof sc.timezone, "UTC");
    snprintf(sc.overlap, sizeof sc.overlap, "skip");
    json_t *v = json_object_get(b, "pipeline");
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) >= sizeof sc.pipeline)
        return field_error(rq, b, "pipeline", "required, the name of a registered pipeline");
    snprintf(sc.pipeline, sizeof sc.pipeline, "%s", json_string_value(v));
    if (!json_is_string(json_object_get(b, "cron")))
        return field_error(rq, b, "cron",
                           "required, five fields: minute hour day-of-month month day-of-week");
    char why[768];
    bad = schedule_fields(b, &sc, why, sizeof why);
    if (bad) return field_error(rq, b, bad, why);
    json_decref(b);
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_pipeline_info pi;
    struct ferry_error e;
    int rc = ferry_store_pipeline_get(st, sc.pipeline, &pi, &e);
    if (rc == FERRY_OK) {
        ferry_pipeline_info_clear(&pi);
        rc = ferry_store_schedule_put(st, &sc, &e);
        if (rc == FERRY_OK) rc = ferry_store_schedule_get(st, sc.id, &sc, &e);
    }
    ferry__srv_store_put(rq->srv, st);
    if (rc == FERRY_ENOTFOUND)
        return ferry__srv_error(rq, 400, "invalid_body",
                                "pipeline: no registered pipeline named %s", sc.pipeline);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 201, schedule_json(&sc));
}

static bool schedule_id(struct req *rq, int64_t *id, enum MHD_Result *reply)
{
    if (parse_i64(rq->params[0], 1, INT64_MAX, id)) return true;
    *reply = ferry__srv_error(rq, 404, "not_found", "schedule \"%s\" not found", rq->params[0]);
    return false;
}

enum MHD_Result ferry__api_schedule_get(struct req *rq)
{
    int64_t id;
    enum MHD_Result reply;
    if (!schedule_id(rq, &id, &reply)) return reply;
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_schedule sc;
    struct ferry_error e;
    int rc = ferry_store_schedule_get(st, id, &sc, &e);
    ferry__srv_store_put(rq->srv, st);
    return rc == FERRY_OK ? ferry__srv_json(rq, 200, schedule_json(&sc))
                          : ferry__srv_ferror(rq, &e);
}

enum MHD_Result ferry__api_schedule_delete(struct req *rq)
{
    int64_t id;
    enum MHD_Result reply;
    if (!schedule_id(rq, &id, &reply)) return reply;
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_error e;
    int rc = ferry_store_schedule_delete(st, id, &e);
    ferry__srv_store_put(rq->srv, st);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, json_pack("{s:I,s:b}", "id", (json_int_t)id, "deleted", 1));
}

enum MHD_Result ferry__api_schedule_update(struct req *rq)
{
    int64_t id;
    enum MHD_Result reply;
    if (!schedule_id(rq, &id, &reply)) return reply;
    json_t *b = json_body(rq, false, &reply);
    if (b == NULL) return reply;
    static const char *const allowed[] = {"cron", "timezone", "overlap", "enabled", NULL};
    const char *bad = unknown_key(b, allowed);
    if (bad)
        return field_error(rq, b, bad, "unknown field (allowed: cron, timezone, overlap, enabled)");
    struct ferry_store *st = ferry__srv_store(rq->srv);
    struct ferry_schedule sc;
    struct ferry_error e;
    int rc = ferry_store_schedule_get(st, id, &sc, &e);
    char why[768];
    bad = rc == FERRY_OK ? schedule_fields(b, &sc, why, sizeof why) : NULL;
    if (rc == FERRY_OK && bad == NULL) rc = ferry_store_schedule_put(st, &sc, &e);
    if (rc == FERRY_OK && bad == NULL) rc = ferry_store_schedule_get(st, id, &sc, &e);
    ferry__srv_store_put(rq->srv, st);
    if (bad) return field_error(rq, b, bad, why);
    json_decref(b);
    if (rc != FERRY_OK) return ferry__srv_ferror(rq, &e);
    return ferry__srv_json(rq, 200, schedule_json(&sc));
}

/* ---- the UI shell ---- */

static const char *mime_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (dot == NULL) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    if (!strcmp(dot, ".json")) return "application/json";
    return "application/octet-stream";
}

enum MHD_Result ferry__api_ui(struct req *rq)
{
    const char *want = rq->params[0] ? rq->params[0] : "index.html";
    for (size_t i = 0; i < ferry_ui_asset_count; i++)
        if (strcmp(ferry_ui_assets[i].path, want) == 0)
            return ferry__srv_static(rq, mime_of(want), ferry_ui_assets[i].data,
                                     ferry_ui_assets[i].len);
    return ferry__srv_error(rq, 404, "not_found", "no such UI file");
}
