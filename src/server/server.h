/* server/server.h - the HTTP API of `ferry serve` (docs/server.md, docs/api/openapi.json).
 *
 * JSON over HTTP with libmicrohttpd, one thread per connection; bearer-token
 * authentication on every route but /livez, /readyz and the static UI shell; a request
 * body limit (413); Server-Sent Events for run events with replay from a sequence;
 * Prometheus text at /metrics. Handlers share a small pool of state-store handles.
 * Calls the store, the bus, the pipeline loader, the connectors registry and
 * control/control.h (requests, stats). Called by cli/cmd_serve.c. */
#ifndef FERRY_SERVER_H
#define FERRY_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "ferry/error.h"

struct ferry_bus;
struct ferry_control;
struct ferry_access;

/* Roles (docs/security.md): viewer reads; operator also starts, pauses, resumes and cancels
 * runs; admin also manages pipelines, schedules, secrets and discovers sources. */
enum ferry_role { FERRY_ROLE_VIEWER = 1, FERRY_ROLE_OPERATOR = 2, FERRY_ROLE_ADMIN = 3 };

/* A token known by its SHA-256 only (--tokens FILE). */
struct ferry_token_hash {
    char id[64];
    enum ferry_role role;
    unsigned char sha256[32];
};

/* Parses a tokens file: one "ID ROLE sha256:HEX" per line, # comments. */
int ferry_server_tokens_load(const char *path, struct ferry_token_hash **out, int *n,
                             struct ferry_error *err);

struct ferry_server_options {
    const char *host; /* numeric IPv4 address, "127.0.0.1" by default */
    int port;         /* 0: any free port (see ferry_server_port) */
    const char *state_path;
    char **tokens; /* accepted bearer tokens (FERRY_API_TOKEN, --token): role admin */
    int n_tokens;
    const struct ferry_token_hash *hashed; /* --tokens FILE */
    int n_hashed;
    size_t max_body; /* bytes; larger bodies get 413 */
    struct ferry_bus *bus;
    struct ferry_control *control; /* NULL with --role api (no control stats) */
    const struct ferry_access *policy; /* what API pipelines may touch (config/access.h) */
    int max_per_address; /* connections at once from one client address (0: 32) */
    int max_streams;     /* event streams per token (0: 16); four times that in total */
    const uint8_t *secret_key; /* 32 bytes (--secret-key), NULL: PUT /v1/secrets answers 409 */
};

struct ferry_server;

int ferry_server_start(const struct ferry_server_options *o, struct ferry_server **out,
                       struct ferry_error *err);
int ferry_server_port(const struct ferry_server *s);
/* Ends event streams, stops the daemon and frees. */
void ferry_server_stop(struct ferry_server *s);

/* The route table, "METHOD PATH" per line, for `ferry serve --routes` and the OpenAPI test. */
void ferry_server_print_routes(void);

/* `ferry __discover`: the child side of POST /v1/connectors/discover (server/discover.c):
 * a pipeline on stdin, {"status", "body"} on stdout. */
int ferry_server_discover_child(void);

/* Embedded UI files (generated at build time from ui/ by cmake/embed_ui.cmake). */
struct ferry_ui_asset {
    const char *path; /* "index.html", "app.js"... */
    const unsigned char *data;
    size_t len;
};
extern const struct ferry_ui_asset ferry_ui_assets[];
extern const size_t ferry_ui_asset_count;

#endif
