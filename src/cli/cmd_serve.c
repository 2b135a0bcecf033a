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

int ferry_cli_serve(int argc, char **argv)
{
    /* The state file, its logs and spools, and the workers' files: the owner's only. */
    umask(077);
    const char *state = getenv("FERRY_STATE");
    if (state == NULL || state[0] == '\0') state = ".ferry/state.db";
    if (getenv("FERRY_STORE") && getenv("FERRY_STORE")[0]) state = getenv("FERRY_STORE");
    const char *listen = "127.0.0.1:8080", *role = "all", *log_dir = NULL;
    const char *dispatch = getenv("FERRY_DISPATCH"), *image = getenv("FERRY_IMAGE");
    const char *bus_url = getenv("FERRY_BUS");
    const char *policy_spec = NULL, *tokens_file = NULL, *secret_key_ref = NULL;
    int max_streams = 16, max_per_address = 32;
    if (dispatch == NULL || dispatch[0] == '\0') dispatch = "local";
    const char *token_refs[16];
    int n_refs = 0, workers = 4, lease_ms = 30000, sweep_ms = -1;
    size_t max_body = 1 << 20;
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
        switch (ch) {
        case 'L':
            listen = optarg;
            break;
        case 's':
            state = optarg;
            break;
        case 't':
            if (n_refs == 16) {
                fprintf(stderr, "ferry: serve: at most 16 --token options\n");
                return 2;
            }
            token_refs[n_refs++] = optarg;
            break;
        case 'r':
            role = optarg;
            break;
        case 'w':
            workers = (int)strtol(optarg, NULL, 10);
            break;
        case 'l':
            if (parse_ms(optarg, &lease_ms) != 0 || lease_ms < 1000) {
                fprintf(stderr, "ferry: serve: --lease: \"%s\" is not a duration of at least 1s\n",
                        optarg);
                return 2;
            }
            break;
        case 'S':
            if (parse_ms(optarg, &sweep_ms) != 0 || sweep_ms < 50) {
                fprintf(stderr,
                        "ferry: serve: --sweep: \"%s\" is not a duration of at least 50ms\n",
                        optarg);
                return 2;
            }
            break;
        case 'b':
            max_body = (size_t)strtoull(optarg, NULL, 10);
            break;
        case 'd':
            log_dir = optarg;
            break;
        case 'D':
            dispatch = optarg;
            break;
        case 'B':
            bus_url = optarg;
            break;
        case 'I':
            image = optarg;
            break;
        case 'P':
            policy_spec = optarg;
            break;
        case 'T':
            tokens_file = optarg;
            break;
        case 'K':
            secret_key_ref = optarg;
            break;
        case 'M':
            max_streams = (int)strtol(optarg, NULL, 10);
            if (max_streams < 1 || max_streams > 4096) {
                fprintf(stderr, "ferry: serve: --max-streams must be from 1 to 4096\n");
                return 2;
            }
            break;
        case 'A':
            max_per_address = (int)strtol(optarg, NULL, 10);
            if (max_per_address < 1 || max_per_address > 2000) {
                fprintf(stderr, "ferry: serve: --max-per-address must be from 1 to 2000\n");
                return 2;
            }
            break;
        case 'R':
            ferry_server_print_routes();
            return 0;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    bool api = !strcmp(role, "all") || !strcmp(role, "api");
    bool control = !strcmp(role, "all") || !strcmp(role, "control");
    if (!api && !control) {
        fprintf(stderr, "ferry: serve: --role must be all, api or control, not \"%s\"\n", role);
        return 2;
    }
    if (strcmp(dispatch, "local") != 0 && strcmp(dispatch, "pull") != 0 &&
        strcmp(dispatch, "kubernetes") != 0) {
        fprintf(stderr,
                "ferry: serve: --dispatch (or FERRY_DISPATCH) must be local, pull or kubernetes, "
                "not \"%s\"\n",
                dispatch);
        return 2;
    }
    if (control && !strcmp(dispatch, "kubernetes") && (image == NULL || image[0] == '\0')) {
        fprintf(stderr, "ferry: serve: --dispatch kubernetes needs the worker image: --image "
                        "IMAGE or FERRY_IMAGE\n");
        return 2;
    }
    if (workers < 1 || workers > 1024) {
        fprintf(stderr, "ferry: serve: --workers must be from 1 to 1024\n");
        return 2;
    }
    if (max_body < 1024) {
        fprintf(stderr, "ferry: serve: --max-body must be at least 1024 bytes\n");
        return 2;
    }
    if (sweep_ms < 0) sweep_ms = lease_ms / 4 < 1000 ? lease_ms / 4 : 1000;
    char host[64];
    int port = 0;
    if (split_listen(listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "ferry: serve: --listen: \"%s\" is not HOST:PORT\n", listen);
        return 2;
    }

    struct ferry_error err;
    ferry_error_clear(&err);
    char *tokens[17];
    int n_tokens = 0, rc = FERRY_OK;
    const char *env_token = getenv("FERRY_API_TOKEN");
    if (env_token && env_token[0]) tokens[n_tokens++] = ferry_strdup(env_token);
    for (int i = 0; i < n_refs && rc == FERRY_OK; i++) {
        char *t = NULL;
        rc = ferry_secret_resolve(token_refs[i], "--token", &t, &err);
        if (rc == FERRY_OK && t[0] == '\0') {
            ferry_secret_free(t);
            rc = ferry_error_set(&err, FERRY_ECONFIG, "serve", "--token %s: the token is empty",
                                 token_refs[i]);
        } else if (rc == FERRY_OK) {
            tokens[n_tokens++] = t;
            if (!strncmp(token_refs[i], "env:", 4))
                unsetenv(token_refs[i] + 4); /* read once: no worker inherits it */
        }
    }
    struct ferry_token_hash *hashed = NULL;
    int n_hashed = 0;
    if (rc == FERRY_OK && tokens_file)
        rc = ferry_server_tokens_load(tokens_file, &hashed, &n_hashed, &err);
    if (rc == FERRY_OK && api && n_tokens == 0 && n_hashed == 0)
        rc =
            ferry_error_set(&err, FERRY_ECONFIG, "serve",
                            "no API token: set FERRY_API_TOKEN, pass --token env:NAME|file:PATH or "
                            "--tokens FILE");
    char exe[PATH_MAX], logs[PATH_MAX];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0)
        snprintf(exe, sizeof exe, "%s", argv[0]);
    else
        exe[el] = '\0';
    if (log_dir == NULL) {
        /* Beside a state file; a store URL or reference has no folder of its own. */
        const char *slash = strstr(state, "://") || !strncmp(state, "env:", 4) ||
                                    !strncmp(state, "file:", 5)
                                ? NULL
                                : strrchr(state, '/');
        if (slash)
            snprintf(logs, sizeof logs, "%.*s/logs", (int)(slash - state), state);
        else
            snprintf(logs, sizeof logs, "logs");
        log_dir = logs;
    }

    /* The policy, the files no pipeline may touch, and the workers' environment: set
     * before any thread starts (nothing edits the environment afterwards). */
    struct ferry_access *policy = NULL;
    if (rc == FERRY_OK) rc = ferry_access_load(policy_spec, &policy, &err);
    if (rc == FERRY_OK) rc = ferry_access_protect(policy, state, &err);
    if (rc == FERRY_OK) rc = ferry_access_protect(policy, log_dir, &err);
    if (rc == FERRY_OK && tokens_file) rc = ferry_access_protect(policy, tokens_file, &err);
    for (int i = 0; i < n_refs && rc == FERRY_OK; i++)
        if (!strncmp(token_refs[i], "file:", 5))
            rc = ferry_access_protect(policy, token_refs[i] + 5, &err);
    /* The secrets store's key: workers get its hex through a sealed memfd they inherit
     * (FERRY_STORE_KEY_FD, set before any thread starts; never their environment); this
     * process keeps the bytes for PUT /v1/secrets. */
    uint8_t secret_key[FERRY_SECRETBOX_KEY_BYTES];
    bool have_secret_key = false;
    if (rc == FERRY_OK && secret_key_ref) {
        rc = ferry_secretbox_key_load(secret_key_ref, "--secret-key", secret_key, &err);
        if (rc == FERRY_OK && !strncmp(secret_key_ref, "file:", 5))
            rc = ferry_access_protect(policy, secret_key_ref + 5, &err);
        if (rc == FERRY_OK) rc = ferry_secrets_key_handoff(secret_key, &err);
        if (rc == FERRY_OK && !strncmp(secret_key_ref, "env:", 4))
            unsetenv(secret_key_ref + 4); /* read once: no worker inherits it */
        have_secret_key = rc == FERRY_OK;
    } else if (rc == FERRY_OK) {
        unsetenv(FERRY_SECRETBOX_KEY_ENV); /* a key only by --secret-key */
    }

    struct ferry_store *st = NULL;
    struct ferry_bus *bus = NULL;
    struct ferry_tracker *tracker = NULL;
    struct ferry_control *ctl = NULL;
    struct ferry_server *srv = NULL;
    /* Creates and migrates the state before any thread opens it. */
    if (rc == FERRY_OK) rc = ferry_store_open(state, &st, &err);
    /* Workers (local children, pull workers on this host) inherit the bus through the
     * environment: a URL with a password never reaches a command line. */
    if (rc == FERRY_OK && bus_url && bus_url[0] && setenv("FERRY_BUS", bus_url, 1) != 0)
        rc = ferry_error_set(&err, FERRY_EIO, "serve",
                             "setting FERRY_BUS for the workers failed");
    if (rc == FERRY_OK) rc = ferry_bus_open(bus_url, state, &bus, &err);
    if (rc == FERRY_OK) rc = worker_environment(policy, policy_spec, state, bus_url, &err);
    if (rc == FERRY_OK && control) {
        rc = ferry_tracker_open(state, bus, &tracker, &err);
        if (rc == FERRY_OK) rc = ferry_tracker_start(tracker, &err);
        struct ferry_control_options co = {.state_path = state,
                                           .worker_bin = exe,
                                           .log_dir = log_dir,
                                           .max_workers = workers,
                                           .lease_ms = lease_ms,
                                           .sweep_ms = sweep_ms,
                                           .scheduler = true,
                                           .dispatch = dispatch,
                                           .image = image};
        if (rc == FERRY_OK) rc = ferry_control_start(&co, bus, &ctl, &err);
    }
    if (rc == FERRY_OK && api) {
        struct ferry_server_options so = {.host = host,
                                          .port = port,
                                          .state_path = state,
                                          .tokens = tokens,
                                          .n_tokens = n_tokens,
                                          .hashed = hashed,
                                          .n_hashed = n_hashed,
                                          .max_body = max_body,
                                          .bus = bus,
                                          .control = ctl,
                                          .policy = policy,
                                          .max_per_address = max_per_address,
                                          .max_streams = max_streams,
                                          .secret_key = have_secret_key ? secret_key : NULL};
        rc = ferry_server_start(&so, &srv, &err);
    }
    if (rc == FERRY_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_quit;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        if (srv) {
            if (strcmp(host, "127.0.0.1") != 0)
                fprintf(stderr, "ferry: serve: warning: listening on %s, not only loopback\n",
                        host);
            printf("ferry serve: listening on http://%s:%d (role %s, state %s)\n", host,
                   ferry_server_port(srv), role, ferry_store_path(st));
        } else {
            printf("ferry serve: control plane running (role %s, state %s)\n", role,
                   ferry_store_path(st));
        }
        fflush(stdout);
        /* Notifications left pending by the processes that ran the runs (a receiver down,
         * a worker gone) are delivered from here, with their backoff (notify/notify.c). */
        struct ferry_store *nst = NULL;
        if (control && ferry_store_open(state, &nst, NULL) != FERRY_OK) nst = NULL;
        for (int tick = 0; !g_quit; tick++) {
            usleep(100000);
            if (nst && tick % 10 == 0) ferry_notify_deliver_due(nst, 10, NULL, NULL);
        }
        ferry_store_close(nst);
        fprintf(stderr, "ferry serve: stopping\n");
    }
    ferry_server_stop(srv);
    ferry_control_stop(ctl, 30000);
    if (tracker) {
        ferry_tracker_stop(tracker, NULL);
        ferry_tracker_close(tracker);
    }
    ferry_bus_close(bus);
    ferry_store_close(st);
    for (int i = 0; i < n_tokens; i++)
        ferry_secret_free(tokens[i]);
    ferry_access_free(policy);
    ferry_free(hashed);
    explicit_bzero(secret_key, sizeof secret_key);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: serve: %s\n", err.message);
        return ferry_code_exit_status(rc);
    }
    return 0;
}
