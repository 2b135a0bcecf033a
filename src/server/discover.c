/* server/discover.c - POST /v1/connectors/discover out of the API process.
 *
 * A discover opens the source like a run would: a FIFO can block it forever, a device can
 * feed it without end, a slow server can hold it. So the API process never does it itself:
 * it starts its own binary as `ferry __discover` (a child with a CPU-time limit, an address
 * space limit and a wall-clock deadline, killed when it passes it), gives it the pipeline
 * (already checked against the policy) on stdin and relays the JSON it prints:
 * {"status": 200|422|500, "body": {...}}. Calls the pipeline loader and the connectors (in
 * the child), posix_spawn. Called by api.c and cli/main.c (the child side). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ferry/tables.h"
#include "ferry/batch.h"
#include "ferry/connector.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "server/internal.h"
#include "store/secretbox.h"

extern char **environ;

#define DISCOVER_DEADLINE_MS 20000
#define DISCOVER_CPU_S 15
#define DISCOVER_MEM_BYTES ((rlim_t)1 << 30)
#define DISCOVER_OUT_MAX ((size_t)4 << 20)

/* ---- the child: `ferry __discover` ---- */

static int child_reply(int status, json_t *body)
{
    json_t *j = json_pack("{s:i,s:o}", "status", status, "body", body);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s) fputs(s, stdout);
    free(s);
    fflush(stdout);
    return 0;
}

int ferry_server_discover_child(void)
{
    /* The secrets store's key descriptor the server's children inherit: not needed here. */
    const char *kfd = getenv(FERRY_SECRETBOX_KEY_FD_ENV);
    long kn = kfd ? strtol(kfd, NULL, 10) : -1;
    if (kn > 2 && kn < INT_MAX) close((int)kn);
    /* Limits first: nothing the source does may outgrow them. */
    struct rlimit cpu = {DISCOVER_CPU_S, DISCOVER_CPU_S + 1};
    setrlimit(RLIMIT_CPU, &cpu);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    struct rlimit mem = {DISCOVER_MEM_BYTES, DISCOVER_MEM_BYTES};
    setrlimit(RLIMIT_AS, &mem);
#endif
    struct ferry_buf in;
    ferry_buf_init(&in, 64u << 20);
    char chunk[8192];
    ssize_t got;
    while ((got = read(STDIN_FILENO, chunk, sizeof chunk)) > 0)
        if (ferry_buf_append(&in, chunk, (size_t)got) != FERRY_OK) break;
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry_pipeline_load_string(in.data ? in.data : "", in.len, "body", &p, &e);
    ferry_buf_release(&in);
    if (rc != FERRY_OK)
        return child_reply(400, json_pack("{s:{s:s,s:s}}", "error", "code", "invalid_pipeline",
                                          "message", e.message));
    void *ctx = NULL;
    json_t *out = json_array();
    rc = p->source_vt->open(p->source, &ctx, &e);
    if (rc == FERRY_OK) rc = ferry_tables_expand_source(p, ctx, &e); /* tables: patterns */
    struct ferry_read_context run = {.pipeline = p->name};
    for (int i = 0; rc == FERRY_OK && i < p->n_resources; i++) {
        struct ferry_schema *sc = NULL;
        p->resources[i].run = &run;
        rc = p->source_vt->discover(ctx, &p->resources[i], &sc, &e);
        if (rc != FERRY_OK) break;
        json_t *cols = json_array();
        for (int k = 0; k < sc->n_fields; k++) {
            const struct ferry_field *f = &sc->fields[k];
            json_array_append_new(cols, json_pack("{s:s,s:s,s:b,s:i}", "name", f->name, "type",
                                                  ferry_type_name(f->type), "nullable", f->nullable,
                                                  "key_position", f->key_pos));
        }
        json_array_append_new(
            out, json_pack("{s:s,s:o}", "resource", p->resources[i].table, "columns", cols));
        ferry_schema_unref(sc);
    }
    if (ctx) p->source_vt->close(ctx);
    ferry_pipeline_free(p);
    if (rc != FERRY_OK) {
        json_decref(out);
        if (rc == FERRY_ENOMEM || rc == FERRY_ESTORE) {
            fprintf(stderr, "ferry: discover: %s\n", e.message);
            return child_reply(500, json_pack("{s:{s:s,s:s}}", "error", "code", ferry_code_name(rc),
                                              "message", "the server could not complete the "
                                                         "request; see its log"));
        }
        /* Connectors redact credentials from their messages; the user needs the reason. */
        return child_reply(422, json_pack("{s:{s:s,s:s}}", "error", "code", ferry_code_name(rc),
                                          "message", e.message));
    }
    return child_reply(200, json_pack("{s:o}", "resources", out));
}

/* ---- the parent ---- */

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* Runs the child on text; *status and *body (NULL: it failed, *why says how). */
static void run_child(const char *text, size_t len, int *status, json_t **body, const char **why)
{
    *body = NULL;
    *why = "the discover worker failed";
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        close_fd(&in[0]), close_fd(&in[1]), close_fd(&out[0]), close_fd(&out[1]);
        return;
    }
    char exe[PATH_MAX];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        close_fd(&in[0]), close_fd(&in[1]), close_fd(&out[0]), close_fd(&out[1]);
        return;
    }
    exe[el] = '\0';
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    char *argv[] = {exe, "__discover", NULL};
    pid_t pid = -1;
    int e = posix_spawn(&pid, exe, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close_fd(&in[0]);
    close_fd(&out[1]);
    if (e != 0) {
        close_fd(&in[1]), close_fd(&out[0]);
        return;
    }
    /* The body is at most --max-body: a pipe takes it while the child reads. */
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    struct ferry_buf res;
    ferry_buf_init(&res, DISCOVER_OUT_MAX);
    size_t sent = 0;
    int64_t deadline = ferry_now_mono_us() + (int64_t)DISCOVER_DEADLINE_MS * 1000;
    bool timed_out = false, too_big = false;
    for (;;) {
        if (sent == len) close_fd(&in[1]);
        struct pollfd pf[2] = {{.fd = out[0], .events = POLLIN}, {.fd = in[1], .events = POLLOUT}};
        int64_t left = (deadline - ferry_now_mono_us()) / 1000;
        if (left <= 0) {
            timed_out = true;
            break;
        }
        int n = poll(pf, in[1] >= 0 ? 2 : 1, (int)(left > 1000 ? 1000 : left));
        if (n < 0 && errno != EINTR) break;
        if (in[1] >= 0 && (pf[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(in[1], text + sent, len - sent);
            if (w > 0) sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN) close_fd(&in[1]), sent = len;
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char chunk[16384];
            ssize_t r = read(out[0], chunk, sizeof chunk);
            if (r == 0) break;
            if (r > 0 && ferry_buf_append(&res, chunk, (size_t)r) != FERRY_OK) {
                too_big = true;
                break;
            }
        }
    }
    close_fd(&in[1]);
    close_fd(&out[0]);
    int ws = 0;
    if (timed_out || too_big) kill(pid, SIGKILL);
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (timed_out) {
        *why = "discover did not finish in time (a source that never answers, a FIFO or a "
               "device?); it was stopped";
    } else if (too_big) {
        *why = "discover's answer is too large";
    } else if (WIFSIGNALED(ws)) {
        *why = "discover was stopped by its time or memory limit (a source that never ends?)";
    } else {
        json_t *j = json_loadb(res.data ? res.data : "", res.len, 0, NULL);
        json_t *b = json_object_get(j, "body");
        if (json_is_integer(json_object_get(j, "status")) && json_is_object(b)) {
            *status = (int)json_integer_value(json_object_get(j, "status"));
            *body = json_incref(b);
        }
        json_decref(j);
        if (*body == NULL && WIFEXITED(ws) && WEXITSTATUS(ws) != 0)
            *why = "discover was stopped by its memory limit (a source that never ends?)";
    }
    ferry_buf_release(&res);
}

enum MHD_Result ferry__srv_discover(struct req *rq, const char *text, size_t len)
{
    int status = 500;
    json_t *body = NULL;
    const char *why = NULL;
    run_child(text, len, &status, &body, &why);
    if (body == NULL) return ferry__srv_error(rq, 422, "discover_failed", "%s", why);
    return ferry__srv_json(rq, (unsigned)status, body);
}
