/* control/k8s.c - the Kubernetes dispatcher (control/k8s.h): a batch/v1 Job per run attempt.
 *
 * Owns: the settings read from the environment, the Job spec (ferry_k8s_job_body), the
 * table of Jobs this dispatcher created or adopted, and the HTTP exchanges with the API
 * server (net/http.h, bearer token re-read from its file for every request, the cluster CA).
 * May call: the store (run rows), the reaper's lose path (ferry_control_lose), the bus,
 * net/http.h, jansson (reading API answers). Called by the dispatcher thread (dispatcher.c).
 *
 * A Job is named after the attempt its worker is going to begin (the run's attempt + 1), so
 * a dispatcher that restarts, or a run.requested delivered twice, asks for the same name
 * and gets 409 AlreadyExists: the Job is adopted instead of doubled. backoffLimit is 0:
 * retries are the reaper's (a pod restarted by Kubernetes would resume a fenced attempt).
 * An Indexed Job (distributed run) has backoffLimitPerIndex 0 and maxFailedIndexes N - 1
 * instead: one lost pod's shards are leased again by the others (the run goes on); only
 * when all N failed does the Job fail (needs Kubernetes 1.29 or later).
 * Watching is a GET per watched Job at each pass (no watch stream to keep open); a list
 * by label would be cheaper with thousands of Jobs, and is left for then. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bus/bus.h"
#include "ferry/config.h"
#include "control/control.h"
#include "control/k8s.h"
#include "net/http.h"
#include "store/store.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_ANSWER (4 << 20)

struct job {
    int64_t run_id;
    int attempt; /* the attempt its worker begins */
    char name[64];
};

struct ferry_k8s {
    struct ferry_k8s_settings s;
    struct job *jobs;
    int n_jobs;
    bool listed; /* the Jobs a previous control plane left were adopted */
    struct ferry__http *http;
};

/* ---- settings ---- */

static char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return ferry_strdup(v && v[0] ? v : fallback);
}

/* A small file's first line, without surrounding white space (namespace, token). */
static char *read_line_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return NULL;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t l = strcspn(s, "\r\n");
    while (l > 0 && (s[l - 1] == ' ' || s[l - 1] == '\t'))
        l--;
    char *out = ferry_strndup(s, l);
    memset(buf, 0, sizeof buf); /* it may have been the token */
    return out;
}

static int env_int(const char *name, int fallback, int lo, int *out, struct ferry_error *err)
{
    const char *v = getenv(name);
    *out = fallback;
    if (v == NULL || v[0] == '\0') return FERRY_OK;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || errno || n < lo || n > 100000000)
        return ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                               "%s: expected a whole number of seconds >= %d, got \"%s\"", name, lo,
                               v);
    *out = (int)n;
    return FERRY_OK;
}

int ferry_k8s_settings_load(const char *image, struct ferry_k8s_settings *out,
                            struct ferry_error *err)
{
    memset(out, 0, sizeof *out);
    const char *api = getenv("FERRY_K8S_API");
    if (api && api[0]) {
        out->api = ferry_strdup(api);
    } else {
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        if (host == NULL || host[0] == '\0')
            return ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                                   "--dispatch kubernetes: no API server: not in a pod "
                                   "(KUBERNETES_SERVICE_HOST unset) and FERRY_K8S_API unset");
        bool v6 = strchr(host, ':') != NULL;
        out->api = ferry_asprintf("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                                  port && port[0] ? port : "443");
    }
    if (out->api) {
        size_t l = strlen(out->api);
        while (l > 0 && out->api[l - 1] == '/')
            out->api[--l] = '\0';
    }
    out->token_file = env_or("FERRY_K8S_TOKEN_FILE", SA_DIR "/token");
    out->ca_file = env_or("FERRY_K8S_CA_FILE", SA_DIR "/ca.crt");
    const char *ns = getenv("FERRY_K8S_NAMESPACE");
    out->namespace_name = ns && ns[0] ? ferry_strdup(ns) : read_line_file(SA_DIR "/namespace");
    if (image == NULL || image[0] == '\0') image = getenv("FERRY_IMAGE");
    out->image = ferry_strdup(image ? image : "");
    out->pull_policy = env_or("FERRY_IMAGE_PULL_POLICY", "IfNotPresent");
    out->secret = env_or("FERRY_K8S_SECRET", "ferry");
    out->env_secret = env_or("FERRY_K8S_ENV_SECRET", "ferry-pipeline-env");
    out->service_account = env_or("FERRY_K8S_SERVICE_ACCOUNT", "ferry-worker");
    int rc = FERRY_OK;
    if (!out->api || !out->token_file || !out->ca_file || !out->image || !out->pull_policy ||
        !out->secret || !out->env_secret || !out->service_account)
        rc = ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "out of memory");
    else if (out->namespace_name == NULL || out->namespace_name[0] == '\0')
        rc = ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                             "--dispatch kubernetes: no namespace: %s/namespace unreadable and "
                             "FERRY_K8S_NAMESPACE unset",
                             SA_DIR);
    else if (out->image[0] == '\0')
        rc = ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                             "--dispatch kubernetes: no worker image: --image or FERRY_IMAGE");
    else if (strcmp(out->pull_policy, "Always") && strcmp(out->pull_policy, "IfNotPresent") &&
             strcmp(out->pull_policy, "Never"))
        rc = ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                             "FERRY_IMAGE_PULL_POLICY: expected Always, IfNotPresent or Never, "
                             "got \"%s\"",
                             out->pull_policy);
    if (rc == FERRY_OK) rc = env_int("FERRY_K8S_TTL", 3600, 0, &out->ttl_s, err);
    if (rc == FERRY_OK) rc = env_int("FERRY_K8S_DEADLINE", 0, 0, &out->deadline_s, err);
    if (rc != FERRY_OK) ferry_k8s_settings_clear(out);
    return rc;
}

void ferry_k8s_settings_clear(struct ferry_k8s_settings *s)
{
    if (s == NULL) return;
    ferry_free(s->api);
    ferry_free(s->token_file);
    ferry_free(s->ca_file);
    ferry_free(s->namespace_name);
    ferry_free(s->image);
    ferry_free(s->pull_policy);
    ferry_free(s->secret);
    ferry_free(s->env_secret);
    ferry_free(s->service_account);
    memset(s, 0, sizeof *s);
}

/* ---- the Job ---- */

void ferry_k8s_job_name(int64_t run_id, int attempt, char *out, size_t len)
{
    snprintf(out, len, "ferry-run-%" PRId64 "-%d", run_id, attempt);
}

/* worker.pods of a saved request of a distributed run (`distribute: true`; other runs
 * have one worker); the request keeps YAML scalars as strings ("3", "true"). */
static int64_t pods_of(json_t *req)
{
    json_t *d = json_object_get(req, "distribute");
    if (!json_is_true(d) && !(json_is_string(d) && !strcmp(json_string_value(d), "true"))) return 1;
    json_t *v = json_object_get(json_object_get(req, "worker"), "pods");
    int64_t n = 1;
    if (json_is_integer(v)) n = json_integer_value(v);
    if (json_is_string(v)) n = strtoll(json_string_value(v), NULL, 10);
    return n < 1 ? 1 : n > 1000 ? 1000 : n;
}

/* A quantity from the pipeline's worker section: YAML may give "500m" or 2 or 0.5. */
static bool quantity(json_t *worker, const char *key, char *out, size_t len)
{
    json_t *v = json_object_get(worker, key);
    if (json_is_string(v)) {
        snprintf(out, len, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(out, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(out, len, "%gm", json_real_value(v) * 1000.0); /* 0.5 -> "500m" */
    } else {
        return false;
    }
    return out[0] != '\0';
}

static void resources(struct ferry_buf *b, json_t *worker)
{
    char cpu[64], mem[64], cpu_l[64], mem_l[64];
    if (!quantity(worker, "cpu", cpu, sizeof cpu)) snprintf(cpu, sizeof cpu, "500m");
    if (!quantity(worker, "memory", mem, sizeof mem)) snprintf(mem, sizeof mem, "256Mi");
    bool has_cl = quantity(worker, "cpu_limit", cpu_l, sizeof cpu_l);
    bool has_ml = quantity(worker, "memory_limit", mem_l, sizeof mem_l);
    ferry_buf_printf(b, "\"resources\":{\"requests\":{\"cpu\":");
    ferry_buf_json_string(b, cpu, strlen(cpu));
    ferry_buf_printf(b, ",\"memory\":");
    ferry_buf_json_string(b, mem, strlen(mem));
    ferry_buf_append(b, "}", 1);
    if (has_cl || has_ml) {
        ferry_buf_printf(b, ",\"limits\":{");
        if (has_cl) {
            ferry_buf_printf(b, "\"cpu\":");
            ferry_buf_json_string(b, cpu_l, strlen(cpu_l));
        }
        if (has_ml) {
            ferry_buf_printf(b, "%s\"memory\":", has_cl ? "," : "");
            ferry_buf_json_string(b, mem_l, strlen(mem_l));
        }
        ferry_buf_append(b, "}", 1);
    }
    ferry_buf_append(b, "}", 1);
}

static void labels(struct ferry_buf *b, int64_t run_id, int attempt)
{
    ferry_buf_printf(b,
                     "{\"app.kubernetes.io/name\":\"ferry\",\"app.kubernetes.io/component\":"
                     "\"worker\",\"app.kubernetes.io/managed-by\":\"ferry\",\"ferry.dev/run\":"
                     "\"%" PRId64 "\",\"ferry.dev/attempt\":\"%d\"}",
                     run_id, attempt);
}

static void env_from_secret(struct ferry_buf *b, const char *secret, const char *key, bool optional)
{
    ferry_buf_printf(b, "{\"name\":\"%s\",\"valueFrom\":{\"secretKeyRef\":{\"name\":", key);
    ferry_buf_json_string(b, secret, strlen(secret));
    ferry_buf_printf(b, ",\"key\":\"%s\"%s}}}", key, optional ? ",\"optional\":true" : "");
}

int ferry_k8s_job_body(const struct ferry_k8s_settings *s, int64_t run_id, int attempt,
                       const char *pipeline, const char *request_json, struct ferry_buf *b,
                       struct ferry_error *err)
{
    json_error_t je;
    json_t *req = json_loads(request_json ? request_json : "{}", 0, &je);
    if (req == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "kubernetes",
                               "run %" PRId64 ": its saved request is not JSON: %s", run_id,
                               je.text);
    json_t *worker = json_object_get(req, "worker");
    int64_t pods = pods_of(req);
    char name[64], id[32];
    ferry_k8s_job_name(run_id, attempt, name, sizeof name);
    snprintf(id, sizeof id, "%" PRId64, run_id);

    ferry_buf_printf(b,
                     "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":"
                     "\"%s\",\"namespace\":",
                     name);
    ferry_buf_json_string(b, s->namespace_name, strlen(s->namespace_name));
    ferry_buf_printf(b, ",\"labels\":");
    labels(b, run_id, attempt);
    /* An annotation, not a label: pipeline names may be longer than a label value. */
    ferry_buf_printf(b, ",\"annotations\":{\"ferry.dev/pipeline\":");
    ferry_buf_json_string(b, pipeline ? pipeline : "", pipeline ? strlen(pipeline) : 0);
    /* A distributed run survives the loss of a pod (its shards are leased again by the
     * others): only when every index failed is the Job, and so the attempt, lost. */
    if (pods > 1)
        ferry_buf_printf(b,
                         "}},\"spec\":{\"backoffLimitPerIndex\":0,\"maxFailedIndexes\":%" PRId64
                         ",\"completionMode\":\"Indexed\",\"completions\":%" PRId64
                         ",\"parallelism\":%" PRId64,
                         pods - 1, pods, pods);
    else
        ferry_buf_printf(b, "}},\"spec\":{\"backoffLimit\":0");
    ferry_buf_printf(b, ",\"ttlSecondsAfterFinished\":%d", s->ttl_s);
    if (s->deadline_s > 0) ferry_buf_printf(b, ",\"activeDeadlineSeconds\":%d", s->deadline_s);
    ferry_buf_printf(b, ",\"template\":{\"metadata\":{\"labels\":");
    labels(b, run_id, attempt);
    ferry_buf_printf(b, "},\"spec\":{\"restartPolicy\":\"Never\",\"serviceAccountName\":");
    ferry_buf_json_string(b, s->service_account, strlen(s->service_account));
    /* Workers do not call the Kubernetes API: no token in their pods. */
    ferry_buf_printf(b, ",\"automountServiceAccountToken\":false,\"securityContext\":{"
                        "\"runAsNonRoot\":true,\"runAsUser\":10001,\"runAsGroup\":10001,"
                        "\"seccompProfile\":{\"type\":\"RuntimeDefault\"}},"
                        "\"containers\":[{\"name\":\"worker\",\"image\":");
    ferry_buf_json_string(b, s->image, strlen(s->image));
    ferry_buf_printf(b, ",\"imagePullPolicy\":");
    ferry_buf_json_string(b, s->pull_policy, strlen(s->pull_policy));
    if (pods > 1)
        ferry_buf_printf(b, ",\"args\":[\"worker\",\"--pull\",\"--run\",\"%s\"]", id);
    else
        ferry_buf_printf(b, ",\"args\":[\"worker\",\"--run\",\"%s\"]", id);
    /* The store URL carries a password: the pod reads it from the Secret, never the spec. */
    ferry_buf_printf(b, ",\"env\":[");
    env_from_secret(b, s->secret, "FERRY_STORE", false);
    ferry_buf_append(b, ",", 1);
    env_from_secret(b, s->secret, "FERRY_BUS", true);
    /* The secrets pipelines name as env:NAME (source and sink URLs), as the pod's env. */
    ferry_buf_printf(b, "],\"envFrom\":[{\"secretRef\":{\"name\":");
    ferry_buf_json_string(b, s->env_secret, strlen(s->env_secret));
    ferry_buf_printf(b, ",\"optional\":true}}],");
    resources(b, worker);
    ferry_buf_printf(b, ",\"securityContext\":{\"allowPrivilegeEscalation\":false,"
                        "\"readOnlyRootFilesystem\":true,\"capabilities\":{\"drop\":[\"ALL\"]}},"
                        "\"volumeMounts\":[{\"name\":\"tmp\",\"mountPath\":\"/tmp\"}]}],"
                        "\"volumes\":[{\"name\":\"tmp\",\"emptyDir\":{}}]}}}}");
    json_decref(req);
    if (b->data == NULL || b->len == 0 || b->data[b->len - 1] != '}')
        return ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "Job %s: out of memory", name);
    return FERRY_OK;
}

/* ---- the API ---- */

/* "https://host:port" -> "host:port", for messages. */
static const char *api_host(const struct ferry_k8s *k)
{
    const char *p = strstr(k->s.api, "://");
    return p ? p + 3 : k->s.api;
}

/* One request. *status is the HTTP status (0 when no answer); the answer's body in *out.
 * FERRY_EIO naming the API host on a transport failure; the token never appears. */
static int request(struct ferry_k8s *k, const char *method, const char *path, const char *body,
                   long *status, struct ferry_buf *out, struct ferry_error *err)
{
    *status = 0;
    char *token = read_line_file(k->s.token_file);
    if (token == NULL || token[0] == '\0') {
        ferry_secret_free(token);
        return ferry_error_set(err, FERRY_ECONFIG, "kubernetes",
                               "Kubernetes API %s: no service account token in %s", api_host(k),
                               k->s.token_file);
    }
    char *auth = ferry_asprintf("Authorization: Bearer %s", token);
    ferry_secret_free(token);
    char *url = ferry_asprintf("%s%s", k->s.api, path);
    int rc = FERRY_OK;
    if (auth == NULL || url == NULL) {
        rc = ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "out of memory");
    } else {
        const char *hdrs[] = {auth, "Accept: application/json",
                              body ? "Content-Type: application/json" : NULL, NULL};
        struct ferry__http_req q = {.method = method, .url = url, .headers = hdrs,
                                    .body = body, .len = body ? strlen(body) : 0};
        rc = ferry__http_do(k->http, &q, out, status, err);
        if (rc == FERRY_OK && ferry_buf_append(out, "", 1) == FERRY_OK)
            out->len--; /* NUL-terminated */
    }
    ferry_secret_free(auth);
    ferry_free(url);
    return rc;
}

/* The API's own explanation: a Status object's message ("jobs.batch is forbidden: ..."). */
static void status_message(const struct ferry_buf *b, char *out, size_t len)
{
    snprintf(out, len, "no explanation in the answer");
    if (b->data == NULL || b->len == 0) return;
    json_t *j = json_loadb(b->data, b->len, 0, NULL);
    const char *m = json_string_value(json_object_get(j, "message"));
    const char *r = json_string_value(json_object_get(j, "reason"));
    if (m && m[0]) snprintf(out, len, "%s%s%s", r && r[0] ? r : "", r && r[0] ? ": " : "", m);
    json_decref(j);
}

static int api_failure(struct ferry_k8s *k, const char *doing, const char *job, long status,
                       const struct ferry_buf *answer, struct ferry_error *err)
{
    char msg[600];
    status_message(answer, msg, sizeof msg);
    char origin[24];
    snprintf(origin, sizeof origin, "http %ld", status);
    int code = status == 404 ? FERRY_ENOTFOUND : status == 409 ? FERRY_ECONFLICT : FERRY_EIO;
    return ferry_error_set(err, code, origin,
                           "Kubernetes API %s: %s Job %s in namespace %s: HTTP %ld: %s",
                           api_host(k), doing, job, k->s.namespace_name, status, msg);
}

static bool transient(long status)
{
    return status == 0 || status == 429 || status >= 500;
}

static char *jobs_path(const struct ferry_k8s *k, const char *name)
{
    const char *ns = k->s.namespace_name;
    char *esc = ferry__http_escape(ns, strlen(ns));
    char *p = ferry_asprintf("/apis/batch/v1/namespaces/%s/jobs%s%s", esc ? esc : "",
                             name ? "/" : "", name ? name : "");
    ferry_free(esc);
    return p;
}

int ferry_k8s_open(struct ferry_k8s_settings *s, struct ferry_k8s **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_k8s *k = ferry_calloc(1, sizeof *k);
    if (k == NULL) {
        ferry_k8s_settings_clear(s);
        return ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "out of memory");
    }
    k->s = *s;
    memset(s, 0, sizeof *s);
    struct ferry__http_opts o = {.what = "Kubernetes API",
                                 .origin = "kubernetes",
                                 .connect_timeout_ms = 10000,
                                 .total_timeout_ms = 30000,
                                 .body_cap = MAX_ANSWER,
                                 .ca_file = k->s.ca_file,
                                 .https_only = true,
                                 .user_agent = "ferry-dispatcher"};
    int rc = ferry__http_open(&o, &k->http, err);
    if (rc != FERRY_OK) {
        ferry_k8s_close(k);
        return rc;
    }
    ferry_log(FERRY_LOG_INFO, "dispatcher: Kubernetes Jobs in namespace %s through %s, image %s",
              k->s.namespace_name, api_host(k), k->s.image);
    *out = k;
    return FERRY_OK;
}

void ferry_k8s_close(struct ferry_k8s *k)
{
    if (k == NULL) return;
    ferry__http_close(k->http);
    ferry_k8s_settings_clear(&k->s);
    ferry_free(k->jobs);
    ferry_free(k);
}

void ferry_k8s_relist(struct ferry_k8s *k)
{
    if (k) k->listed = false;
}

int ferry_k8s_active(const struct ferry_k8s *k)
{
    return k ? k->n_jobs : 0;
}

static int track(struct ferry_k8s *k, int64_t run_id, int attempt, const char *name)
{
    for (int i = 0; i < k->n_jobs; i++)
        if (!strcmp(k->jobs[i].name, name)) return FERRY_OK;
    struct job *nv = ferry_realloc(k->jobs, (size_t)(k->n_jobs + 1) * sizeof *nv);
    if (nv == NULL) return FERRY_ENOMEM;
    k->jobs = nv;
    struct job *j = &k->jobs[k->n_jobs++];
    memset(j, 0, sizeof *j);
    j->run_id = run_id;
    j->attempt = attempt;
    snprintf(j->name, sizeof j->name, "%s", name);
    return FERRY_OK;
}

static void fail_run(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id, int attempt,
                     const char *code, const char *msg);

int ferry_k8s_dispatch(struct ferry_k8s *k, struct ferry_store *st, struct ferry_bus *bus,
                       int64_t run_id, bool *retry_later, struct ferry_error *err)
{
    *retry_later = false;
    struct ferry_run_info run;
    int rc = ferry_store_run_get(st, run_id, &run, err);
    if (rc != FERRY_OK) return rc;
    int attempt = run.attempt + 1;
    char name[64];
    ferry_k8s_job_name(run_id, attempt, name, sizeof name);
    for (int i = 0; i < k->n_jobs; i++)
        if (k->jobs[i].run_id == run_id && k->jobs[i].attempt == attempt) {
            ferry_run_info_clear(&run);
            return FERRY_OK; /* a redelivered request: its Job exists */
        }
    struct ferry_buf body, answer;
    ferry_buf_init(&body, 0);
    ferry_buf_init(&answer, 0);
    char *path = jobs_path(k, NULL);
    rc = ferry_k8s_job_body(&k->s, run_id, attempt, run.pipeline, run.request, &body, err);
    if (rc == FERRY_OK && path == NULL)
        rc = ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "out of memory");
    json_t *req = rc == FERRY_OK ? json_loads(run.request ? run.request : "{}", 0, NULL) : NULL;
    bool sharded = pods_of(req) > 1;
    json_decref(req);
    /* The pods of an Indexed Job are pull workers of this run: one claims the run. */
    if (rc == FERRY_OK && sharded) rc = ferry_store_run_set_dispatch(st, run_id, "pull", err);
    long status = 0;
    if (rc == FERRY_OK) {
        rc = request(k, "POST", path, body.data, &status, &answer, err);
        if (rc != FERRY_OK) *retry_later = true;
    }
    if (rc == FERRY_OK) {
        if (status == 201 || status == 200 || status == 202) {
            ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 ": Kubernetes Job %s created",
                      run_id, name);
        } else if (status == 409) {
            ferry_log(FERRY_LOG_INFO,
                      "dispatcher: run %" PRId64 ": Kubernetes Job %s already exists; adopted",
                      run_id, name);
        } else {
            rc = api_failure(k, "creating", name, status, &answer, err);
            *retry_later = transient(status);
        }
    }
    if (rc == FERRY_OK && track(k, run_id, attempt, name) != FERRY_OK)
        rc = ferry_error_set(err, FERRY_ENOMEM, "kubernetes", "out of memory");
    if (rc != FERRY_OK && !*retry_later && err)
        fail_run(st, bus, run_id, run.attempt, "dispatch", err->message);
    ferry_free(path);
    ferry_buf_release(&body);
    ferry_buf_release(&answer);
    ferry_run_info_clear(&run);
    return rc;
}

/* ---- watching ---- */

enum job_phase { JOB_ACTIVE, JOB_FAILED, JOB_COMPLETE, JOB_GONE };

/* A Job's phase from its status: a Failed/Complete condition, or counts of pods. */
static enum job_phase job_phase(const struct ferry_buf *b, char *why, size_t len)
{
    json_t *j = json_loadb(b->data ? b->data : "", b->len, 0, NULL);
    json_t *status = json_object_get(j, "status");
    enum job_phase ph = JOB_ACTIVE;
    snprintf(why, len, "failed");
    json_t *cond;
    size_t i;
    json_array_foreach(json_object_get(status, "conditions"), i, cond)
    {
        const char *type = json_string_value(json_object_get(cond, "type"));
        const char *st = json_string_value(json_object_get(cond, "status"));
        if (type == NULL || st == NULL || strcmp(st, "True") != 0) continue;
        if (!strcmp(type, "Failed")) {
            const char *r = json_string_value(json_object_get(cond, "reason"));
            const char *m = json_string_value(json_object_get(cond, "message"));
            snprintf(why, len, "failed: %s%s%s", r ? r : "", r && m ? ": " : "", m ? m : "");
            ph = JOB_FAILED;
        } else if (!strcmp(type, "Complete") && ph != JOB_FAILED) {
            ph = JOB_COMPLETE;
        }
    }
    if (ph == JOB_ACTIVE && json_integer_value(json_object_get(status, "failed")) > 0) {
        snprintf(why, len, "failed: %" JSON_INTEGER_FORMAT " pod(s) failed",
                 json_integer_value(json_object_get(status, "failed")));
        ph = JOB_FAILED;
    }
    json_decref(j);
    return ph;
}

/* DELETE with propagationPolicy Background: the pods go too. True when the Job is gone. */
static bool delete_job(struct ferry_k8s *k, const struct job *jb)
{
    char *path = jobs_path(k, jb->name);
    struct ferry_buf answer;
    ferry_buf_init(&answer, 0);
    struct ferry_error e;
    long status = 0;
    bool gone = false;
    if (path == NULL) return false;
    int rc = request(k, "DELETE", path,
                     "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"propagationPolicy\":"
                     "\"Background\"}",
                     &status, &answer, &e);
    if (rc == FERRY_OK && (status == 200 || status == 202 || status == 404)) {
        gone = true;
        ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 ": Kubernetes Job %s deleted",
                  jb->run_id, jb->name);
    } else {
        if (rc == FERRY_OK) api_failure(k, "deleting", jb->name, status, &answer, &e);
        ferry_log(FERRY_LOG_WARN, "dispatcher: %s (tried again at the next pass)", e.message);
    }
    ferry_buf_release(&answer);
    ferry_free(path);
    return gone;
}

/* A requested run that no worker will start: failed, with the reason on the run and in a
 * run.failed event (what a worker that cannot start does itself, cmd_worker.c). */
static void fail_run(struct ferry_store *st, struct ferry_bus *bus, int64_t run_id, int attempt,
                     const char *code, const char *msg)
{
    struct ferry_error e;
    if (ferry_store_run_set_state(st, run_id, attempt, FERRY_RUN_FAILED, msg, &e) != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, "dispatcher: %s", e.message);
        return;
    }
    ferry_log(FERRY_LOG_ERROR, "dispatcher: run %" PRId64 ": %s", run_id, msg);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    ferry_buf_printf(&b, "{\"code\":\"%s\",\"message\":", code);
    ferry_buf_json_string(&b, msg, strlen(msg));
    ferry_buf_append(&b, "}", 1);
    ferry_bus_emit(bus, run_id, attempt, "", FERRY_EV_RUN_FAILED, b.data, NULL);
    ferry_buf_release(&b);
}

/* The Job's pod ended without beginning its attempt: the run would stay requested. */
static void fail_unstarted(struct ferry_store *st, struct ferry_bus *bus, const struct job *jb,
                           const char *why)
{
    char msg[700];
    snprintf(msg, sizeof msg, "Kubernetes Job %s %s before starting the run", jb->name, why);
    fail_run(st, bus, jb->run_id, jb->attempt - 1, "worker", msg);
}

/* One Job: true when it is no longer watched. */
static bool watch_one(struct ferry_k8s *k, struct ferry_store *st, struct ferry_bus *bus,
                      const struct job *jb, int lease_ms, int *lost, int *retried)
{
    struct ferry_run_info run;
    struct ferry_error e;
    int rc = ferry_store_run_get(st, jb->run_id, &run, &e);
    if (rc == FERRY_ENOTFOUND) return delete_job(k, jb);
    if (rc != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, "dispatcher: %s", e.message);
        return false;
    }
    enum ferry_run_state state = run.state;
    int attempt = run.attempt;
    ferry_run_info_clear(&run);
    if (ferry_run_state_is_final(state)) return delete_job(k, jb);

    char *path = jobs_path(k, jb->name);
    struct ferry_buf answer;
    ferry_buf_init(&answer, 0);
    long status = 0;
    rc = path ? request(k, "GET", path, NULL, &status, &answer, &e) : FERRY_ENOMEM;
    ferry_free(path);
    enum job_phase ph = JOB_ACTIVE;
    char why[400] = "";
    if (rc == FERRY_OK && status == 200) {
        ph = job_phase(&answer, why, sizeof why);
    } else if (rc == FERRY_OK && status == 404) {
        ph = JOB_GONE;
        snprintf(why, sizeof why, "was deleted");
    } else {
        if (rc == FERRY_OK) api_failure(k, "reading", jb->name, status, &answer, &e);
        if (rc != FERRY_ENOMEM) ferry_log(FERRY_LOG_WARN, "dispatcher: %s", e.message);
        ferry_buf_release(&answer);
        return false;
    }
    ferry_buf_release(&answer);

    bool its_attempt = state == FERRY_RUN_RUNNING && attempt == jb->attempt;
    bool unstarted = state == FERRY_RUN_REQUESTED && attempt == jb->attempt - 1;
    if (ph == JOB_ACTIVE) {
        /* Its attempt was fenced (reaped, or lost to a newer one): stop the zombie pod. */
        if (attempt >= jb->attempt && !its_attempt) return delete_job(k, jb);
        return false;
    }
    if (ph != JOB_COMPLETE || its_attempt) {
        char reason[500];
        snprintf(reason, sizeof reason, "Kubernetes Job %s %s", jb->name,
                 ph == JOB_COMPLETE ? "completed but the run is still running" : why);
        if (its_attempt) {
            bool again = false;
            rc = ferry_control_lose(st, bus, jb->run_id, jb->attempt, 0, reason, lease_ms, &again,
                                    &e);
            if (rc == FERRY_OK) {
                (*lost)++;
                if (again) (*retried)++;
            } else if (rc != FERRY_EFENCED && rc != FERRY_ECONFLICT) {
                ferry_log(FERRY_LOG_ERROR, "dispatcher: run %" PRId64 ": %s", jb->run_id,
                          e.message);
                return false;
            }
        } else if (unstarted) {
            fail_unstarted(st, bus, jb, ph == JOB_GONE ? "was deleted" : why);
        }
    }
    return ph == JOB_GONE ? true : delete_job(k, jb);
}

/* The Jobs ferry created before this control plane started (a restart, a new leader):
 * listed once by label and watched like the others, so their runs' losses and ends are
 * still seen. Until the list succeeds it is tried again at every pass. */
static void adopt_existing(struct ferry_k8s *k)
{
    char *path = jobs_path(k, NULL);
    char *url =
        path ? ferry_asprintf("%s?labelSelector=app.kubernetes.io%%2Fmanaged-by%%3Dferry", path)
             : NULL;
    ferry_free(path);
    if (url == NULL) return;
    struct ferry_buf answer;
    ferry_buf_init(&answer, 0);
    struct ferry_error e;
    long status = 0;
    int rc = request(k, "GET", url, NULL, &status, &answer, &e);
    ferry_free(url);
    if (rc == FERRY_OK && status != 200)
        rc = api_failure(k, "listing", "(all)", status, &answer, &e);
    if (rc != FERRY_OK) {
        ferry_log(FERRY_LOG_WARN, "dispatcher: %s (tried again at the next pass)", e.message);
        ferry_buf_release(&answer);
        return;
    }
    json_t *list = json_loadb(answer.data ? answer.data : "", answer.len, 0, NULL);
    ferry_buf_release(&answer);
    json_t *item;
    size_t i;
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        json_t *meta = json_object_get(item, "metadata");
        json_t *lb = json_object_get(meta, "labels");
        const char *name = json_string_value(json_object_get(meta, "name"));
        const char *run = json_string_value(json_object_get(lb, "ferry.dev/run"));
        const char *att = json_string_value(json_object_get(lb, "ferry.dev/attempt"));
        if (name == NULL || run == NULL || att == NULL || strlen(name) >= sizeof k->jobs[0].name)
            continue;
        int64_t run_id = strtoll(run, NULL, 10);
        char *end = NULL;
        long attempt = strtol(att, &end, 10);
        if (run_id <= 0 || attempt <= 0 || attempt > INT_MAX || *end != '\0') continue;
        if (track(k, run_id, (int)attempt, name) == FERRY_OK)
            ferry_log(FERRY_LOG_INFO, "dispatcher: run %" PRId64 ": watching Kubernetes Job %s",
                      run_id, name);
    }
    json_decref(list);
    k->listed = true;
}

void ferry_k8s_watch(struct ferry_k8s *k, struct ferry_store *st, struct ferry_bus *bus,
                     int lease_ms, int *lost, int *retried)
{
    *lost = 0;
    *retried = 0;
    if (k == NULL) return;
    if (!k->listed) adopt_existing(k);
    for (int i = 0; i < k->n_jobs;) {
        if (watch_one(k, st, bus, &k->jobs[i], lease_ms, lost, retried))
            k->jobs[i] = k->jobs[--k->n_jobs];
        else
            i++;
    }
}
