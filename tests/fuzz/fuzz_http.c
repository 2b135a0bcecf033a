/* tests/fuzz/fuzz_http.c - request bodies of the `ferry serve` HTTP API (src/server/), sent
 * over a real loopback connection to an in-process server on a temporary state file, with a
 * valid bearer token: POST /v1/pipelines (as JSON and as YAML), POST /v1/schedules,
 * PATCH /v1/schedules/1, POST /v1/pipelines/{name}/runs, POST /v1/runs/1/pause. The first
 * byte picks the route. Routes that connect to data systems (validate, discover) are left
 * out: fuzzed connection strings must not reach the network. The server must answer every
 * request with a status line and never crash (sanitizers run in its threads too). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "fuzz.h"
#include "server/server.h"

/* The embedded UI is not under test here (and is generated for the ferry binary only). */
const struct ferry_ui_asset ferry_ui_assets[] = {{"index.html", (const unsigned char *)"", 0}};
const size_t ferry_ui_asset_count = 0;

static int port = -1;

static char dir[] = "/tmp/ferry-fuzz-http-XXXXXX";
static char state[64];

static void cleanup(void)
{
    static const char *const ext[] = {"", "-wal", "-shm"};
    char p[96];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", state, ext[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int start(void)
{
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(state, sizeof state, "%s/state.db", dir);
    atexit(cleanup);
    static char token[] = "fuzz-token-0123456789";
    static char *tokens[] = {token};
    struct ferry_bus *bus = NULL;
    struct ferry_error err;
    if (ferry_bus_inproc_open(state, &bus, &err) != 0) return -1;
    struct ferry_server_options o = {.host = "127.0.0.1", .port = 0, .state_path = state,
                                     .tokens = tokens, .n_tokens = 1, .max_body = 1 << 20,
                                     .bus = bus, .control = NULL};
    struct ferry_server *srv = NULL;
    if (ferry_server_start(&o, &srv, &err) != 0) {
        fprintf(stderr, "fuzz_http: %s\n", err.message);
        return -1;
    }
    return ferry_server_port(srv);
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        c += w;
        n -= (size_t)w;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (port < 0) port = start();
    if (port <= 0 || size < 1) return 0;
    static const char *const routes[][3] = {
        {"POST", "/v1/pipelines", "application/json"},
        {"POST", "/v1/pipelines", "application/yaml"},
        {"POST", "/v1/schedules", "application/json"},
        {"PATCH", "/v1/schedules/1", "application/json"},
        {"POST", "/v1/pipelines/fuzz/runs", "application/json"},
        {"POST", "/v1/runs/1/pause", "application/json"},
    };
    const char *const *r = routes[data[0] % 6];
    data++;
    size--;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return 0;
    }
    char head[512];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     "fuzz-token-0123456789\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     r[0], r[1], r[2], size);
    send_all(fd, head, (size_t)n);
    send_all(fd, data, size);
    char buf[4096];
    size_t got = 0;
    ssize_t k;
    while ((k = recv(fd, buf + (got < 16 ? got : 16), got < 16 ? 16 - got : sizeof buf - 16, 0)) > 0)
        got += (size_t)k;
    close(fd);
    if (getenv("FUZZ_HTTP_VERBOSE")) fprintf(stderr, "%s %s -> %.*s\n", r[0], r[1], got < 12 ? (int)got : 12, buf);
    /* A reply that is not HTTP at all means the server broke the connection. */
    if (got > 0 && memcmp(buf, "HTTP/1.", got < 7 ? got : 7) != 0) abort();
    return 0;
}
