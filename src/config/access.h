/* config/access.h - what a pipeline that arrives over the API may touch (docs/security.md).
 *
 * A policy lists the local folders pipelines may read and write, the env: names (or
 * NAME* prefixes) and file: paths they may reference, the hosts (names, *.suffix, CIDRs,
 * each with an optional :port) they may connect to and the connector types allowed.
 * ferry_access_check() walks a loaded pipeline and refuses (FERRY_EPOLICY, message
 * "<key path>: refused by policy rule <rule>: <why>") the first value out of bounds.
 * Without a policy file the safe defaults hold: no local paths, no file: references,
 * env: only under FERRY_SECRET_, no loopback, link-local, unspecified, multicast or
 * cloud-metadata addresses. "allow-all" keeps the CLI's freedom (single-user hosts).
 * Whatever the policy, the protected files (the state store, the server's logs, its policy
 * and key files) are never a source, sink or reference, and env:FERRY_API_TOKEN and
 * env:FERRY_STORE_KEY (the secrets store's key) are never allowed. Host names are
 * resolved and every address checked, at registration and again by the worker
 * (resolve = true) right before it connects.
 *
 * The worker side reads its policy from the environment the server gives it
 * (FERRY_POLICY = allow-all | default | PATH, FERRY_POLICY_PROTECT = paths joined by '\n'). */
#ifndef FERRY_CONFIG_ACCESS_H
#define FERRY_CONFIG_ACCESS_H

#include <stdbool.h>
#include "ferry/error.h"

struct ferry_pipeline_spec;
struct ferry_access;

#define FERRY_ACCESS_ENV_PREFIX "FERRY_SECRET_"

/* spec: NULL, "" or "default" (safe defaults), "allow-all", or a policy file path. */
int ferry_access_load(const char *spec, struct ferry_access **out, struct ferry_error *err);
void ferry_access_free(struct ferry_access *a);
/* Adds a file or folder that no pipeline may touch (stored canonical). */
int ferry_access_protect(struct ferry_access *a, const char *path, struct ferry_error *err);
bool ferry_access_allow_all(const struct ferry_access *a);
/* The protected paths joined by '\n' (for FERRY_POLICY_PROTECT); caller frees. */
char *ferry_access_protected_list(const struct ferry_access *a);
/* May a pipeline reference env:NAME? */
bool ferry_access_env_allowed(const struct ferry_access *a, const char *name);
/* May a pipeline reference secret:NAME? Every name unless the policy has a `secrets:`
 * list (names or PREFIX*), then only those. */
bool ferry_access_secret_allowed(const struct ferry_access *a, const char *name);

/* Checks every value of the pipeline; FERRY_EPOLICY naming the key and the rule. */
int ferry_access_check(const struct ferry_access *a, const struct ferry_pipeline_spec *p,
                       struct ferry_error *err);
/* One host (name or address) and port against the host rules, after resolving it. */
int ferry_access_check_host(const struct ferry_access *a, const char *what, const char *host,
                            int port, struct ferry_error *err);

/* Worker side: the policy named by FERRY_POLICY (none set: FERRY_OK, nothing checked). */
int ferry_access_check_from_env(const struct ferry_pipeline_spec *p, struct ferry_error *err);

#endif
