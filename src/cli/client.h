/* cli/client.h - the HTTP client of the commands that talk to `ferry serve` (--server URL
 * or FERRY_SERVER): `ferry pipelines apply`, `ferry runs start|watch`. libcurl; the
 * bearer token comes from --token env:NAME|file:PATH or FERRY_API_TOKEN and is never
 * printed. Calls libcurl, config (secrets), core. Called by cmd_pipelines.c and
 * cmd_runs_remote.c. */
#ifndef FERRY_CLI_CLIENT_H
#define FERRY_CLI_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include "ferry/core.h"
#include "ferry/error.h"

/* The options every command that may talk to a server shares, with the getopt_long codes
 * its option table gives them: --server URL ('S'), --token REF ('t'), --state PATH ('s'),
 * --json ('j'). */
struct ferry_client_opts {
    const char *server; /* NULL: FERRY_SERVER */
    const char *token;  /* NULL: FERRY_API_TOKEN */
    const char *state;  /* starts as ferry_store_default_url() */
    bool json;
};
void ferry_client_opts_init(struct ferry_client_opts *o);
/* Stores getopt_long's ch and arg when ch is one of the codes above; false for any other. */
bool ferry_client_opts_take(struct ferry_client_opts *o, int ch, const char *arg);

struct ferry_client {
    char *base;           /* "http://127.0.0.1:8080", no trailing slash */
    char *token;          /* wiped when freed */
    const char *idem_key; /* sent as Idempotency-Key while set (ferry_client_post_keyed) */
};

/* server: --server value or NULL (then FERRY_SERVER); *remote false when neither is set
 * (the command then works on the local state file). */
int ferry_client_init(struct ferry_client *c, const char *server, const char *token_ref,
                      bool *remote, struct ferry_error *err);
void ferry_client_release(struct ferry_client *c);
/* One request; the response body goes to out (a JSON text), its status to *status. */
int ferry_client_request(struct ferry_client *c, const char *method, const char *path,
                         const char *content_type, const char *body, size_t len, long *status,
                         struct ferry_buf *out, struct ferry_error *err);
/* POST path with the header `Idempotency-Key: key`, sent again (same key) when the
 * transport failed - reset, refused, timed out - so a request the server acted on before the
 * answer was lost is found, not repeated: at most 1 + $FERRY_CLIENT_RETRIES (default 2)
 * attempts, *attempts says how many were made. Each attempt is bounded by
 * $FERRY_CLIENT_TIMEOUT seconds (default 60, as every request). */
int ferry_client_post_keyed(struct ferry_client *c, const char *path, const char *key,
                            const char *body, size_t len, long *status, struct ferry_buf *out,
                            int *attempts, struct ferry_error *err);
/* Follows an event stream: on_event gets each event's data line (a JSON envelope) and
 * returns false to stop. Returns when the server ends the stream. */
int ferry_client_events(struct ferry_client *c, const char *path,
                        bool (*on_event)(void *arg, const char *json), void *arg, long *status,
                        struct ferry_error *err);
/* The message of an API error body, or the status line. */
void ferry_client_error_message(long status, const struct ferry_buf *body, char *out, size_t len);

#endif
