/* control/k8s.h - the Kubernetes dispatcher of `ferry serve --dispatch kubernetes`
 * (DESIGN §1 step 2, §7): one batch/v1 Job per run attempt, created, watched and deleted
 * through the Kubernetes API with libcurl (docs/internals/server.md, "Kubernetes Jobs").
 *
 * Where the API is: in a pod, the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT,
 * /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}); each setting can
 * be overridden (FERRY_K8S_API, FERRY_K8S_TOKEN_FILE, FERRY_K8S_CA_FILE, FERRY_K8S_NAMESPACE).
 * The token file is read again for every request: Kubernetes rotates bound tokens.
 * What the Job runs: FERRY_IMAGE (or --image), FERRY_IMAGE_PULL_POLICY, the Secret
 * FERRY_K8S_SECRET (keys FERRY_STORE, FERRY_BUS) for the worker's environment,
 * FERRY_K8S_ENV_SECRET (default ferry-pipeline-env, optional: all its keys as env vars, for
 * the secrets pipelines reference as env:NAME),
 * FERRY_K8S_SERVICE_ACCOUNT, FERRY_K8S_TTL (ttlSecondsAfterFinished), FERRY_K8S_DEADLINE
 * (activeDeadlineSeconds, optional).
 *
 * Threads: a struct ferry_k8s is used by the dispatcher's thread only. */
#ifndef FERRY_CONTROL_K8S_H
#define FERRY_CONTROL_K8S_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

struct ferry_bus;
struct ferry_store;
struct ferry_k8s;

struct ferry_k8s_settings {
    char *api; /* base URL, no trailing slash: https://10.0.0.1:443 */
    char *token_file, *ca_file, *namespace_name;
    char *image, *pull_policy, *secret, *service_account;
    char *env_secret; /* every key becomes an env var of the pod (pipelines' env:NAME) */
    int ttl_s;        /* ttlSecondsAfterFinished */
    int deadline_s;   /* activeDeadlineSeconds, 0 = none */
};

/* Reads the settings from the environment (see above); image overrides FERRY_IMAGE.
 * FERRY_ECONFIG naming the missing setting (no API address, no namespace, no image). */
int ferry_k8s_settings_load(const char *image, struct ferry_k8s_settings *out,
                            struct ferry_error *err);
void ferry_k8s_settings_clear(struct ferry_k8s_settings *s);

/* The Job name of a run attempt: "ferry-run-<id>-<attempt>" (a DNS-1123 label). */
void ferry_k8s_job_name(int64_t run_id, int attempt, char *out, size_t len);

/* The Job (JSON) that runs attempt `attempt` of run_id, whose saved request (pipeline spec
 * JSON) is request_json: resources from its `worker:` section; an Indexed Job of
 * `worker.pods` workers (`worker --pull --run ID`) when that is above 1 and the request
 * says `distribute: true`. FERRY_EINVAL when
 * the request is not JSON. */
int ferry_k8s_job_body(const struct ferry_k8s_settings *s, int64_t run_id, int attempt,
                       const char *pipeline, const char *request_json, struct ferry_buf *out,
                       struct ferry_error *err);

/* Takes the settings (cleared in *s on success and failure). */
int ferry_k8s_open(struct ferry_k8s_settings *s, struct ferry_k8s **out, struct ferry_error *err);
void ferry_k8s_close(struct ferry_k8s *k);

/* Creates the Job of the run's next attempt unless this dispatcher already did. A Job of
 * that name that already exists (HTTP 409: a restarted control plane, a redelivered
 * request) is adopted. *retry_later: a transient failure (network, HTTP 5xx/429): the run
 * stays requested, ask again later. Other failures (403, 422...): the run is failed (state
 * and a run.failed event) with an error naming the API host, the Job and the API's
 * Status.message, also returned in *err. */
int ferry_k8s_dispatch(struct ferry_k8s *k, struct ferry_store *st, struct ferry_bus *bus,
                       int64_t run_id, bool *retry_later, struct ferry_error *err);
/* The next watch pass lists the Jobs by label again (this replica just became the leader:
 * another one may have created Jobs meanwhile). NULL accepted. */
void ferry_k8s_relist(struct ferry_k8s *k);
/* Jobs this dispatcher watches (counted against --workers). */
int ferry_k8s_active(const struct ferry_k8s *k);
/* One pass over the watched Jobs (the first pass also lists the Jobs labelled
 * app.kubernetes.io/managed-by=ferry, left by a previous control plane, and watches them
 * too): a Job whose run is final is deleted (propagationPolicy
 * Background); a Job that failed or disappeared while its attempt still runs loses the run
 * (ferry_control_lose: fenced, failed, retried when allowed); a failed Job whose pod never
 * started the run fails it. Counts the runs lost and requested again. */
void ferry_k8s_watch(struct ferry_k8s *k, struct ferry_store *st, struct ferry_bus *bus,
                     int lease_ms, int *lost, int *retried);

#endif
