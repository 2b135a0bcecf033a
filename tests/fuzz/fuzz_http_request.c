/* tests/fuzz/fuzz_http_request.c - whole raw requests to `ferry serve` (src/server/http.c):
 * the input's bytes are the request line, headers and body, sent over a real loopback
 * connection to an in-process server under the default policy with a small body limit
 * (4 KiB), then the write side is shut. Exercises the UTF-8 checks (path, query, headers,
 * body), the path decoding, the token check, the declared and chunked body limits and the
 * body parsers' node and key-length caps. The server must answer with an HTTP status line
 * or close the connection, never crash (sanitizers run in its threads). The bearer token
 * "fuzz-token-0123456789" is accepted. Requests naming /discover are skipped: they would
 * start the fuzzer binary as a discover child. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include "bus/bus.h"
#include "config/access.h"
#include "ferry/core.h"
#include "fuzz.h"
#include "server/server.h"

const struct ferry_ui_asset ferry_ui_assets[] = {{"index.html", (const unsigned char *)"", 0}};
const size_t ferry_ui_asset_count = 0;

static int port = -1;
static char dir[] = "/tmp/ferry-fuzz-req-XXXXXX";
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
    static struct ferry_access *policy;
    if (ferry_bus_inproc_open(state, &bus, &err) != 0) return -1;
    if (ferry_access_load(NULL, &policy, &err) != 0) return -1;
    struct ferry_server_options o = {.host = "127.0.0.1", .port = 0, .state_path = state,
                                     .tokens = tokens, .n_tokens = 1, .max_body = 4096,
                                     .bus = bus, .control = NULL, .policy = policy};
    struct ferry_server *srv = NULL;
    if (ferry_server_start(&o, &srv, &err) != 0) {
        fprintf(stderr, "fuzz_http_request: %s\n", err.message);
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
    if (port <= 0 || size < 1 || size > 65536) return 0;
    if (memmem(data, size, "discover", 8) != NULL) return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return 0;
    }
    send_all(fd, data, size);
    shutdown(fd, SHUT_WR);
    char buf[4096];
    size_t got = 0;
    ssize_t k;
    while ((k = recv(fd, buf + (got < 16 ? got : 16), got < 16 ? 16 - got : sizeof buf - 16, 0)) > 0)
        got += (size_t)k;
    close(fd);
    if (getenv("FUZZ_HTTP_VERBOSE")) fprintf(stderr, "-> %.*s\n", got < 12 ? (int)got : 12, buf);
    if (got > 0 && memcmp(buf, "HTTP/1.", got < 7 ? got : 7) != 0) abort();
    return 0;
}
