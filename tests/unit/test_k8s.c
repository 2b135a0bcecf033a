/* tests/unit/test_k8s.c - the Kubernetes dispatcher's settings (environment, in-cluster
 * defaults, clear errors) and the Job it asks for (control/k8s.h): names, resources from the
 * pipeline's worker section as the saved request writes it (strings) or as numbers,
 * Indexed Jobs, optional fields, and that no secret value ever enters the spec. The HTTP
 * side is tested against a recorded conversation by tests/e2e/k8s_dispatch.sh. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "control/k8s.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"

static const char *const vars[] = {"FERRY_K8S_API",
                                   "KUBERNETES_SERVICE_HOST",
                                   "KUBERNETES_SERVICE_PORT",
                                   "FERRY_K8S_NAMESPACE",
                                   "FERRY_IMAGE",
                                   "FERRY_IMAGE_PULL_POLICY",
                                   "FERRY_K8S_TTL",
                                   "FERRY_K8S_DEADLINE",
                                   "FERRY_K8S_SECRET",
                                   "FERRY_K8S_ENV_SECRET",
                                   "FERRY_K8S_SERVICE_ACCOUNT",
                                   "FERRY_K8S_TOKEN_FILE",
                                   "FERRY_K8S_CA_FILE",
                                   NULL};

static int clean_env(void **state)
{
    (void)state;
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    return 0;
}

static void test_settings(void **state)
{
    (void)state;
    struct ferry_k8s_settings s;
    struct ferry_error err;
    /* Not in a pod, nothing set: which setting is missing is named. */
    assert_int_equal(ferry_k8s_settings_load("img:1", &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "KUBERNETES_SERVICE_HOST"));
    /* In-cluster address; IPv6 in brackets; default port 443. */
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("FERRY_K8S_NAMESPACE", "jobs", 1);
    assert_int_equal(ferry_k8s_settings_load("img:1", &s, &err), FERRY_OK);
    assert_string_equal(s.api, "https://[fd00::1]:443");
    assert_string_equal(s.namespace_name, "jobs");
    assert_string_equal(s.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
    assert_string_equal(s.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
    assert_string_equal(s.pull_policy, "IfNotPresent");
    assert_int_equal(s.ttl_s, 3600);
    assert_int_equal(s.deadline_s, 0);
    ferry_k8s_settings_clear(&s);
    /* Overrides; a trailing slash dropped; FERRY_IMAGE when no --image. */
    setenv("FERRY_K8S_API", "https://127.0.0.1:6443/", 1);
    setenv("FERRY_IMAGE", "from-env:2", 1);
    setenv("FERRY_K8S_DEADLINE", "600", 1);
    assert_int_equal(ferry_k8s_settings_load(NULL, &s, &err), FERRY_OK);
    assert_string_equal(s.api, "https://127.0.0.1:6443");
    assert_string_equal(s.image, "from-env:2");
    assert_int_equal(s.deadline_s, 600);
    ferry_k8s_settings_clear(&s);
    /* Bad values are named. */
    setenv("FERRY_IMAGE_PULL_POLICY", "Sometimes", 1);
    assert_int_equal(ferry_k8s_settings_load(NULL, &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "FERRY_IMAGE_PULL_POLICY"));
    unsetenv("FERRY_IMAGE_PULL_POLICY");
    setenv("FERRY_K8S_TTL", "1h", 1);
    assert_int_equal(ferry_k8s_settings_load(NULL, &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "FERRY_K8S_TTL"));
    unsetenv("FERRY_K8S_TTL");
    unsetenv("FERRY_IMAGE");
    assert_int_equal(ferry_k8s_settings_load(NULL, &s, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "image"));
    ferry_k8s_settings_clear(NULL);
}

static json_t *job_of(const char *request, int64_t run_id, int attempt)
{
    setenv("FERRY_K8S_API", "https://127.0.0.1:6443", 1);
    setenv("FERRY_K8S_NAMESPACE", "ns", 1);
    struct ferry_k8s_settings s;
    struct ferry_error err;
    assert_int_equal(ferry_k8s_settings_load("img:1", &s, &err), FERRY_OK);
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_k8s_job_body(&s, run_id, attempt, "p", request, &b, &err);
    ferry_k8s_settings_clear(&s);
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return NULL;
    }
    json_t *j = json_loadb(b.data, b.len, 0, NULL);
    ferry_buf_release(&b);
    assert_non_null(j);
    return j;
}

static const char *at(json_t *j, const char *path)
{
    json_t *v = json_object_get(j, "spec");
    char copy[256];
    snprintf(copy, sizeof copy, "%s", path);
    for (char *tok = strtok(copy, "."); tok && v; tok = strtok(NULL, ".")) {
        if (tok[0] >= '0' && tok[0] <= '9')
            v = json_array_get(v, (size_t)atoi(tok));
        else
            v = json_object_get(v, tok);
    }
    static char out[256];
    if (json_is_string(v))
        snprintf(out, sizeof out, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(out, sizeof out, "%lld", (long long)json_integer_value(v));
    else if (v)
        snprintf(out, sizeof out, "<%s>",
                 json_is_boolean(v) ? (json_is_true(v) ? "true" : "false") : "json");
    else
        snprintf(out, sizeof out, "<absent>");
    return out;
}

static void test_job(void **state)
{
    (void)state;
    char name[64];
    ferry_k8s_job_name(9223372036854775807LL, 12, name, sizeof name);
    assert_string_equal(name, "ferry-run-9223372036854775807-12");
    assert_true(strlen(name) <= 63);

    /* Defaults: no worker section. */
    json_t *j = job_of("{\"name\":\"p\"}", 7, 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "metadata"), "name")),
                        "ferry-run-7-1");
    assert_string_equal(at(j, "backoffLimit"), "0");
    assert_string_equal(at(j, "completionMode"), "<absent>");
    assert_string_equal(at(j, "activeDeadlineSeconds"), "<absent>");
    assert_string_equal(at(j, "template.spec.restartPolicy"), "Never");
    assert_string_equal(at(j, "template.spec.containers.0.args.1"), "--run");
    assert_string_equal(at(j, "template.spec.containers.0.args.2"), "7");
    assert_string_equal(at(j, "template.spec.containers.0.resources.requests.cpu"), "500m");
    assert_string_equal(at(j, "template.spec.containers.0.resources.requests.memory"), "256Mi");
    assert_string_equal(at(j, "template.spec.containers.0.resources.limits"), "<absent>");
    assert_string_equal(at(j, "template.spec.containers.0.env.0.valueFrom.secretKeyRef.key"),
                        "FERRY_STORE");
    assert_string_equal(at(j, "template.spec.containers.0.env.0.value"), "<absent>");
    json_decref(j);

    /* The saved request keeps scalars as strings; a number in JSON works too. */
    j = job_of("{\"distribute\":\"true\",\"worker\":{\"cpu\":\"2\",\"memory\":\"1Gi\","
               "\"memory_limit\":\"2Gi\",\"pods\":\"4\"}}",
               8, 3);
    assert_string_equal(at(j, "completionMode"), "Indexed");
    assert_string_equal(at(j, "backoffLimit"), "<absent>");
    assert_string_equal(at(j, "backoffLimitPerIndex"), "0");
    assert_string_equal(at(j, "maxFailedIndexes"), "3");
    assert_string_equal(at(j, "completions"), "4");
    assert_string_equal(at(j, "parallelism"), "4");
    assert_string_equal(at(j, "template.spec.containers.0.args.1"), "--pull");
    assert_string_equal(at(j, "template.spec.containers.0.resources.requests.cpu"), "2");
    assert_string_equal(at(j, "template.spec.containers.0.resources.limits.memory"), "2Gi");
    assert_string_equal(at(j, "template.spec.containers.0.resources.limits.cpu"), "<absent>");
    json_decref(j);
    j = job_of("{\"worker\":{\"cpu\":0.25,\"cpu_limit\":1,\"pods\":3}}", 8, 3);
    assert_string_equal(at(j, "completionMode"), "<absent>"); /* not distributed */
    assert_string_equal(at(j, "template.spec.containers.0.resources.requests.cpu"), "250m");
    assert_string_equal(at(j, "template.spec.containers.0.resources.limits.cpu"), "1");
    json_decref(j);
    /* A saved request that is not JSON: an error, no Job. */
    assert_null(job_of("{not json", 8, 3));
}

/* The pipeline file's worker section is checked where it is loaded. */
static void test_pipeline_worker(void **state)
{
    (void)state;
    const char *base = "version: 1\nname: w\nsource: {type: sample, rows: 10, resources: "
                       "[{table: orders}]}\nsink: {type: null}\n";
    static const struct {
        const char *worker;
        bool ok;
        const char *says;
    } cases[] = {
        {"worker: {cpu: 500m, memory: 256Mi, cpu_limit: \"2\", memory_limit: 1Gi, pods: 3}\n"
         "distribute: true\n",
         true, NULL},
        {"worker: {pods: 3}\n", false, "distribute: true"},
        {"worker: {cpu: 0.5, memory: 1e9}\n", true, NULL},
        {"worker: {cpu: half}\n", false, "worker.cpu"},
        {"worker: {memory: 256MB}\n", false, "worker.memory"},
        {"worker: {pods: 0}\n", false, "worker.pods"},
        {"worker: {cpus: 1}\n", false, "did you mean cpu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", base, cases[i].worker);
        struct ferry_pipeline_spec *p = NULL;
        struct ferry_error err;
        ferry_error_clear(&err);
        int rc = ferry_pipeline_load_string(text, strlen(text), "w.yaml", &p, &err);
        if (cases[i].ok) {
            if (rc != FERRY_OK) fail_msg("case %zu: %s", i, err.message);
        } else {
            assert_int_equal(rc, FERRY_ECONFIG);
            if (strstr(err.message, cases[i].says) == NULL)
                fail_msg("case %zu: \"%s\" does not say %s", i, err.message, cases[i].says);
        }
        ferry_pipeline_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_settings, clean_env),
        cmocka_unit_test_setup(test_job, clean_env),
        cmocka_unit_test(test_pipeline_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
