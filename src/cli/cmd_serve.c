/* cli/cmd_serve.c - `ferry serve`: the HTTP API and the control plane in one process
 * (--role all, the default), or either one alone (--role api | --role control), on one
 * SQLite state file shared with the workers (docs/server.md).
 *
 * Owns: option parsing, token resolution (FERRY_API_TOKEN, --token env:NAME|file:PATH),
 * the in-process bus, the tracker thread, the control plane and the HTTP server, and the
 * shutdown on SIGINT/SIGTERM (workers are asked to pause). Calls server/, control/, bus,
 * store. Called by main.c. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "notify/notify.h"
#include "bus/bus.h"
#include "config/access.h"
#include "cli/commands.h"
#include "control/control.h"
#include "control/tracker.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "server/server.h"
#include "store/store.h"
#include "store/secretbox.h"
#include "store/secrets.h"

static volatile sig_atomic_t g_quit;

static void on_quit(int sig)
{
    (void)sig;
    g_quit = 1;
}

static const char *usage =
    "usage: ferry serve [--listen HOST:PORT] [--state PATH|--store URL] [--token env:NAME|file:PATH]\n"
    "                   [--role all|api|control] [--workers N] [--lease DURATION]\n"
    "                   [--sweep DURATION] [--max-body BYTES] [--log-dir DIR] [--routes]\n"
    "                   [--dispatch local|pull|kubernetes] [--image IMAGE]\n"
    "                   [--policy FILE|allow-all] [--max-streams N] [--max-per-address N]\n"
    "                   [--tokens FILE] [--secret-key env:NAME|file:PATH]\n"
    "\n"
    "Serves the HTTP API and web UI and runs the control plane: requested runs are started\n"
    "as `ferry worker` child processes (at most --workers at a time, default 4); a worker\n"
    "silent for longer than --lease (default 30s) is reaped. Binds 127.0.0.1:8080 by default.\n"
    "API tokens: FERRY_API_TOKEN, and/or --token (repeatable). --routes prints the routes.\n"
    "--dispatch (FERRY_DISPATCH): local child processes (default), pull (`ferry worker --pull`\n"
    "processes claim runs) or kubernetes (one Job per run; --image or FERRY_IMAGE names the\n"
    "worker image; see docs/operations.md).\n"
    "--store URL (FERRY_STORE) is --state: a SQLite path or postgres://USER@HOST/DB[?schema=S]\n"
    "--bus URL (FERRY_BUS): inproc (default: the state store's event log), postgres://... or\n"
    "nats://HOST:PORT (JetStream); workers get the same bus.\n"
    "(env:NAME or file:PATH keep a password off the command line).\n"
    "--policy FILE: what pipelines registered over the API may touch (local folders, env:\n"
    "and file: references, hosts, connectors; docs/security.md). Without it the safe\n"
    "defaults hold; --policy allow-all is for a single-user host only.\n"
    "--max-per-address N: connections at once from one client address (default 32);\n"
    "--max-streams N: event streams per token (default 16, four times that in total).\n"
    "--tokens FILE: \"ID viewer|operator|admin sha256:HEX\" per line (token hashes only);\n"
    "FERRY_API_TOKEN and --token tokens are admins.\n"
    "--secret-key env:NAME|file:PATH: the 32-byte key (64 hex digits or 44 base64\n"
    "characters) of the secrets store (PUT /v1/secrets/NAME, secret:NAME references);\n"
    "workers receive it through an inherited sealed memfd (" FERRY_SECRETBOX_KEY_FD_ENV "),\n"
    "never their environment or argv.\n";

/* A duration flag: the config's syntax (ferry_duration_parse_ms: "250ms", "5s", "2m") or,
 * as these flags always took, a bare number of milliseconds. */
static int parse_ms(const char *s, int *out)
{
    int64_t v = 0;
    char *end = NULL;
    long bare = strtol(s, &end, 10);
    if (end != s && *end == '\0' && bare >= 0)
        v = bare;
    else if (!ferry_duration_parse_ms(s, &v))
        return -1;
    if (v < 0 || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

static int split_listen(const char *s, char *host, size_t hl, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= hl) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p < 0 || p > 65535) return -1;
    *port = (int)p;
    if (host[0] == '\0') snprintf(host, hl, "127.0.0.1");
    return 0;
}

/* Variables a worker may see whatever the policy: the platform's, and ferry's own settings
 * (FERRY_API_TOKEN is never one of them). */
static bool base_variable(const char *e)
{
    static const char *const keep[] = {"PATH=", "HOME=", "LANG=", "LC_", "TZ=", "TMPDIR=",
                                       "USER=", "LOGNAME=", "SHELL=", "PWD=", "TERM=",
                                       "SSL_CERT_", "CURL_CA_BUNDLE=", "ASAN_", "UBSAN_",
                                       "TSAN_", "LSAN_", "LLVM_", NULL};
    for (int i = 0; keep[i]; i++)
        if (!strncmp(e, keep[i], strlen(keep[i]))) return true;
    return !strncmp(e, "FERRY_", 6) && strncmp(e, "FERRY_API_TOKEN=", 16) != 0;
}

/* The workers inherit this process's environment: the API token never, and under a policy
 * only the base variables and the names the policy's env: rules allow. The policy itself
 * goes along (FERRY_POLICY, FERRY_POLICY_PROTECT) so workers check again after DNS. */
static int worker_environment(const struct ferry_access *policy, const char *spec,
                              const char *state, const char *bus, struct ferry_error *err)
{
    if (unsetenv("FERRY_API_TOKEN") != 0)
        return ferry_error_set(err, FERRY_EIO, "serve", "cannot clear FERRY_API_TOKEN");
    if (!ferry_access_allow_all(policy)) {
        for (bool again = true; again;) {
            again = false;
            for (char **e = environ; *e; e++) {
                const char *eq = strchr(*e, '=');
                if (eq == NULL || base_variable(*e)) continue;
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
                if (ferry_access_env_allowed(policy, name)) continue;
                /* the store and bus URLs may be env: references the workers resolve */
                if ((state && !strncmp(state, "env:", 4) && !strcmp(state + 4, name)) ||
                    (bus && !strncmp(bus, "env:", 4) && !strcmp(bus + 4, name)))
                    continue;
                unsetenv(name);
                again = true;
                break;
            }
        }
    }
    char *prot = ferry_access_protected_list(policy);
    int bad = prot == NULL || setenv("FERRY_POLICY", spec && spec[0] ? spec : "default", 1) != 0 ||
              setenv("FERRY_POLICY_PROTECT", prot, 1) != 0;
    ferry_free(prot);
    return bad ? ferry_error_set(err, FERRY_EIO, "serve", "cannot set the workers' environment")
               : FERRY_OK;
}

/* What the command line and the environment asked for. */
struct serve_opts {
    const char *state, *listen, *role, *log_dir, *dispatch, *image, *bus_url;
    const char *policy_spec, *tokens_file, *secret_key_ref;
    const char *token_refs[16];
    int n_refs, workers, lease_ms, sweep_ms, max_streams, max_per_address;
    size_t max_body;
    bool api, control; /* from role */
    char host[64];     /* from listen */
    int port;
};

/* The running server: what it resolved, opened and started (closed by serve_close). */
struct serve {
    struct serve_opts o;
    char *tokens[17];
    int n_tokens;
    struct ferry_token_hash *hashed;
    int n_hashed;
    char exe[PATH_MAX], logs[PATH_MAX];
    struct ferry_access *policy;
    uint8_t secret_key[FERRY_SECRETBOX_KEY_BYTES];
    bool have_secret_key;
    struct ferry_store *st;
    struct ferry_bus *bus;
    struct ferry_tracker *tracker;
    struct ferry_control *ctl;
    struct ferry_server *srv;
};

static void opts_defaults(struct serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->state = getenv("FERRY_STATE");
    if (o->state == NULL || o->state[0] == '\0') o->state = ".ferry/state.db";
    if (getenv("FERRY_STORE") && getenv("FERRY_STORE")[0]) o->state = getenv("FERRY_STORE");
    o->listen = "127.0.0.1:8080";
    o->role = "all";
    o->dispatch = getenv("FERRY_DISPATCH");
    if (o->dispatch == NULL || o->dispatch[0] == '\0') o->dispatch = "local";
    o->image = getenv("FERRY_IMAGE");
    o->bus_url = getenv("FERRY_BUS");
    o->max_streams = 16;
    o->max_per_address = 32;
    o->workers = 4;
    o->lease_ms = 30000;
    o->sweep_ms = -1;
    o->max_body = 1 << 20;
}

/* The options with a number or a duration: -1 when taken, else the exit status. */
static int number_option(struct serve_opts *o, int ch, const char *arg)
{
    switch (ch) {
    case 'w': o->workers = (int)strtol(arg, NULL, 10); return -1;
    case 'b': o->max_body = (size_t)strtoull(arg, NULL, 10); return -1;
    case 'l':
        if (parse_ms(arg, &o->lease_ms) == 0 && o->lease_ms >= 1000) return -1;
        fprintf(stderr, "ferry: serve: --lease: \"%s\" is not a duration of at least 1s\n", arg);
        return 2;
    case 'S':
        if (parse_ms(arg, &o->sweep_ms) == 0 && o->sweep_ms >= 50) return -1;
        fprintf(stderr, "ferry: serve: --sweep: \"%s\" is not a duration of at least 50ms\n", arg);
        return 2;
    case 'M':
        o->max_streams = (int)strtol(arg, NULL, 10);
        if (o->max_streams >= 1 && o->max_streams <= 4096) return -1;
        fprintf(stderr, "ferry: serve: --max-streams must be from 1 to 4096\n");
        return 2;
    case 'A':
        o->max_per_address = (int)strtol(arg, NULL, 10);
        if (o->max_per_address >= 1 && o->max_per_address <= 2000) return -1;
        fprintf(stderr, "ferry: serve: --max-per-address must be from 1 to 2000\n");
        return 2;
    }
    fputs(usage, stderr);
    return 2;
}

/* One option: -1 when taken, else the exit status (0 for --help and --routes). */
static int take_option(struct serve_opts *o, int ch, const char *arg)
{
    switch (ch) {
    case 'L': o->listen = arg; return -1;
    case 's': o->state = arg; return -1;
    case 'r': o->role = arg; return -1;
    case 'd': o->log_dir = arg; return -1;
    case 'D': o->dispatch = arg; return -1;
    case 'B': o->bus_url = arg; return -1;
    case 'I': o->image = arg; return -1;
    case 'P': o->policy_spec = arg; return -1;
    case 'T': o->tokens_file = arg; return -1;
    case 'K': o->secret_key_ref = arg; return -1;
    case 't':
        if (o->n_refs < 16) {
            o->token_refs[o->n_refs++] = arg;
            return -1;
        }
        fprintf(stderr, "ferry: serve: at most 16 --token options\n");
        return 2;
    case 'R': ferry_server_print_routes(); return 0;
    case 'h': fputs(usage, stdout); return 0;
    }
    return number_option(o, ch, arg);
}

static int parse_options(struct serve_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'L'},  {"state", required_argument, NULL, 's'},
        {"store", required_argument, NULL, 's'},
        {"token", required_argument, NULL, 't'},   {"role", required_argument, NULL, 'r'},
        {"workers", required_argument, NULL, 'w'}, {"lease", required_argument, NULL, 'l'},
        {"sweep", required_argument, NULL, 'S'},   {"max-body", required_argument, NULL, 'b'},
        {"log-dir", required_argument, NULL, 'd'}, {"routes", no_argument, NULL, 'R'},
        {"dispatch", required_argument, NULL, 'D'}, {"image", required_argument, NULL, 'I'},
        {"bus", required_argument, NULL, 'B'},      {"policy", required_argument, NULL, 'P'},
        {"max-streams", required_argument, NULL, 'M'},  {"tokens", required_argument, NULL, 'T'},
        {"max-per-address", required_argument, NULL, 'A'},
        {"secret-key", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int status = take_option(o, ch, optarg);
        if (status >= 0) return status;
    }
    return -1;
}

/* What the options mean together: -1 when they hold, else the exit status (2). */
static int check_options(struct serve_opts *o)
{
    o->api = !strcmp(o->role, "all") || !strcmp(o->role, "api");
    o->control = !strcmp(o->role, "all") || !strcmp(o->role, "control");
    const char *why = NULL;
    char msg[256];
    if (!o->api && !o->control) {
        snprintf(msg, sizeof msg, "--role must be all, api or control, not \"%s\"", o->role);
        why = msg;
    } else if (strcmp(o->dispatch, "local") != 0 && strcmp(o->dispatch, "pull") != 0 &&
               strcmp(o->dispatch, "kubernetes") != 0) {
        snprintf(msg, sizeof msg,
                 "--dispatch (or FERRY_DISPATCH) must be local, pull or kubernetes, not \"%s\"",
                 o->dispatch);
        why = msg;
    } else if (o->control && !strcmp(o->dispatch, "kubernetes") &&
               (o->image == NULL || o->image[0] == '\0')) {
        why = "--dispatch kubernetes needs the worker image: --image IMAGE or FERRY_IMAGE";
    } else if (o->workers < 1 || o->workers > 1024) {
        why = "--workers must be from 1 to 1024";
    } else if (o->max_body < 1024) {
        why = "--max-body must be at least 1024 bytes";
    } else if (split_listen(o->listen, o->host, sizeof o->host, &o->port) != 0) {
        snprintf(msg, sizeof msg, "--listen: \"%s\" is not HOST:PORT", o->listen);
        why = msg;
    }
    if (why != NULL) {
        fprintf(stderr, "ferry: serve: %s\n", why);
        return 2;
    }
    if (o->sweep_ms < 0) o->sweep_ms = o->lease_ms / 4 < 1000 ? o->lease_ms / 4 : 1000;
    return -1;
}

/* The API tokens: FERRY_API_TOKEN, each --token reference (an env: one is read once and
 * cleared, so no worker inherits it) and the hashes of --tokens FILE. */
static int resolve_tokens(struct serve *s, struct ferry_error *err)
{
    const struct serve_opts *o = &s->o;
    int rc = FERRY_OK;
    const char *env_token = getenv("FERRY_API_TOKEN");
    if (env_token && env_token[0]) s->tokens[s->n_tokens++] = ferry_strdup(env_token);
    for (int i = 0; i < o->n_refs && rc == FERRY_OK; i++) {
        char *t = NULL;
        rc = ferry_secret_resolve(o->token_refs[i], "--token", &t, err);
        if (rc == FERRY_OK && t[0] == '\0') {
            ferry_secret_free(t);
            rc = ferry_error_set(err, FERRY_ECONFIG, "serve", "--token %s: the token is empty",
                                 o->token_refs[i]);
        } else if (rc == FERRY_OK) {
            s->tokens[s->n_tokens++] = t;
            if (!strncmp(o->token_refs[i], "env:", 4))
                unsetenv(o->token_refs[i] + 4); /* read once: no worker inherits it */
        }
    }
    if (rc == FERRY_OK && o->tokens_file)
        rc = ferry_server_tokens_load(o->tokens_file, &s->hashed, &s->n_hashed, err);
    if (rc == FERRY_OK && o->api && s->n_tokens == 0 && s->n_hashed == 0)
        rc = ferry_error_set(err, FERRY_ECONFIG, "serve",
                             "no API token: set FERRY_API_TOKEN, pass --token env:NAME|file:PATH "
                             "or --tokens FILE");
    return rc;
}

/* This executable (the workers' binary) and the workers' log folder: --log-dir, else
 * beside a state file (a store URL or reference has no folder of its own: ./logs). */
static void resolve_paths(struct serve *s, const char *argv0)
{
    ssize_t el = readlink("/proc/self/exe", s->exe, sizeof s->exe - 1);
    if (el <= 0)
        snprintf(s->exe, sizeof s->exe, "%s", argv0);
    else
        s->exe[el] = '\0';
    if (s->o.log_dir != NULL) return;
    const char *state = s->o.state;
    const char *slash = strstr(state, "://") || !strncmp(state, "env:", 4) ||
                                !strncmp(state, "file:", 5)
                            ? NULL
                            : strrchr(state, '/');
    if (slash)
        snprintf(s->logs, sizeof s->logs, "%.*s/logs", (int)(slash - state), state);
    else
        snprintf(s->logs, sizeof s->logs, "logs");
    s->o.log_dir = s->logs;
}

/* The policy and the files no pipeline may touch: set before any thread starts. */
static int load_policy(struct serve *s, struct ferry_error *err)
{
    const struct serve_opts *o = &s->o;
    int rc = ferry_access_load(o->policy_spec, &s->policy, err);
    if (rc == FERRY_OK) rc = ferry_access_protect(s->policy, o->state, err);
    if (rc == FERRY_OK) rc = ferry_access_protect(s->policy, o->log_dir, err);
    if (rc == FERRY_OK && o->tokens_file) rc = ferry_access_protect(s->policy, o->tokens_file, err);
    for (int i = 0; i < o->n_refs && rc == FERRY_OK; i++)
        if (!strncmp(o->token_refs[i], "file:", 5))
            rc = ferry_access_protect(s->policy, o->token_refs[i] + 5, err);
    return rc;
}

/* The secrets store's key: workers get its hex through a sealed memfd they inherit
 * (FERRY_STORE_KEY_FD, set before any thread starts; never their environment); this
 * process keeps the bytes for PUT /v1/secrets. Without --secret-key no key at all. */
static int load_secret_key(struct serve *s, struct ferry_error *err)
{
    const char *ref = s->o.secret_key_ref;
    if (ref == NULL) {
        unsetenv(FERRY_SECRETBOX_KEY_ENV); /* a key only by --secret-key */
        return FERRY_OK;
    }
    int rc = ferry_secretbox_key_load(ref, "--secret-key", s->secret_key, err);
    if (rc == FERRY_OK && !strncmp(ref, "file:", 5))
        rc = ferry_access_protect(s->policy, ref + 5, err);
    if (rc == FERRY_OK) rc = ferry_secrets_key_handoff(s->secret_key, err);
    if (rc == FERRY_OK && !strncmp(ref, "env:", 4))
        unsetenv(ref + 4); /* read once: no worker inherits it */
    s->have_secret_key = rc == FERRY_OK;
    return rc;
}

/* The state (created and migrated before any thread opens it), the bus and the workers'
 * environment. Workers (local children, pull workers on this host) inherit the bus through
 * the environment: a URL with a password never reaches a command line. */
static int open_state(struct serve *s, struct ferry_error *err)
{
    const struct serve_opts *o = &s->o;
    int rc = ferry_store_open(o->state, &s->st, err);
    if (rc == FERRY_OK && o->bus_url && o->bus_url[0] && setenv("FERRY_BUS", o->bus_url, 1) != 0)
        rc = ferry_error_set(err, FERRY_EIO, "serve", "setting FERRY_BUS for the workers failed");
    if (rc == FERRY_OK) rc = ferry_bus_open(o->bus_url, o->state, &s->bus, err);
    if (rc == FERRY_OK)
        rc = worker_environment(s->policy, o->policy_spec, o->state, o->bus_url, err);
    return rc;
}

/* --role control or all: the tracker thread and the control plane. */
static int start_control(struct serve *s, struct ferry_error *err)
{
    const struct serve_opts *o = &s->o;
    int rc = ferry_tracker_open(o->state, s->bus, &s->tracker, err);
    if (rc == FERRY_OK) rc = ferry_tracker_start(s->tracker, err);
    struct ferry_control_options co = {.state_path = o->state,
                                       .worker_bin = s->exe,
                                       .log_dir = o->log_dir,
                                       .max_workers = o->workers,
                                       .lease_ms = o->lease_ms,
                                       .sweep_ms = o->sweep_ms,
                                       .scheduler = true,
                                       .dispatch = o->dispatch,
                                       .image = o->image};
    if (rc == FERRY_OK) rc = ferry_control_start(&co, s->bus, &s->ctl, err);
    return rc;
}

/* --role api or all: the HTTP server. */
static int start_api(struct serve *s, struct ferry_error *err)
{
    const struct serve_opts *o = &s->o;
    struct ferry_server_options so = {.host = o->host,
                                      .port = o->port,
                                      .state_path = o->state,
                                      .tokens = s->tokens,
                                      .n_tokens = s->n_tokens,
                                      .hashed = s->hashed,
                                      .n_hashed = s->n_hashed,
                                      .max_body = o->max_body,
                                      .bus = s->bus,
                                      .control = s->ctl,
                                      .policy = s->policy,
                                      .max_per_address = o->max_per_address,
                                      .max_streams = o->max_streams,
                                      .secret_key = s->have_secret_key ? s->secret_key : NULL};
    return ferry_server_start(&so, &s->srv, err);
}

/* Says where it listens, then waits for SIGINT/SIGTERM, delivering the notifications the
 * processes that ran the runs left pending (a receiver down, a worker gone) with their
 * backoff (notify/notify.c). */
static void serve_until_quit(struct serve *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (s->srv) {
        if (strcmp(s->o.host, "127.0.0.1") != 0)
            fprintf(stderr, "ferry: serve: warning: listening on %s, not only loopback\n",
                    s->o.host);
        printf("ferry serve: listening on http://%s:%d (role %s, state %s)\n", s->o.host,
               ferry_server_port(s->srv), s->o.role, ferry_store_path(s->st));
    } else {
        printf("ferry serve: control plane running (role %s, state %s)\n", s->o.role,
               ferry_store_path(s->st));
    }
    fflush(stdout);
    struct ferry_store *nst = NULL;
    if (s->o.control && ferry_store_open(s->o.state, &nst, NULL) != FERRY_OK) nst = NULL;
    for (int tick = 0; !g_quit; tick++) {
        usleep(100000);
        if (nst && tick % 10 == 0) ferry_notify_deliver_due(nst, 10, NULL, NULL);
    }
    ferry_store_close(nst);
    fprintf(stderr, "ferry serve: stopping\n");
}

/* Stops what started (workers are asked to pause, at most 30 s) and frees the rest. */
static void serve_close(struct serve *s)
{
    ferry_server_stop(s->srv);
    ferry_control_stop(s->ctl, 30000);
    if (s->tracker) {
        ferry_tracker_stop(s->tracker, NULL);
        ferry_tracker_close(s->tracker);
    }
    ferry_bus_close(s->bus);
    ferry_store_close(s->st);
    for (int i = 0; i < s->n_tokens; i++)
        ferry_secret_free(s->tokens[i]);
    ferry_access_free(s->policy);
    ferry_free(s->hashed);
    explicit_bzero(s->secret_key, sizeof s->secret_key);
}

int ferry_cli_serve(int argc, char **argv)
{
    /* The state file, its logs and spools, and the workers' files: the owner's only. */
    umask(077);
    struct serve s;
    memset(&s, 0, sizeof s);
    opts_defaults(&s.o);
    int status = parse_options(&s.o, argc, argv);
    if (status < 0) status = check_options(&s.o);
    if (status >= 0) return status;
    struct ferry_error err;
    ferry_error_clear(&err);
    int rc = resolve_tokens(&s, &err);
    resolve_paths(&s, argv[0]);
    /* The policy, the protected files, the secret key and the workers' environment: set
     * before any thread starts (nothing edits the environment afterwards). */
    if (rc == FERRY_OK) rc = load_policy(&s, &err);
    if (rc == FERRY_OK) rc = load_secret_key(&s, &err);
    if (rc == FERRY_OK) rc = open_state(&s, &err);
    if (rc == FERRY_OK && s.o.control) rc = start_control(&s, &err);
    if (rc == FERRY_OK && s.o.api) rc = start_api(&s, &err);
    if (rc == FERRY_OK) serve_until_quit(&s);
    serve_close(&s);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: serve: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    return 0;
}
