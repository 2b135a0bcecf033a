/* tests/fuzz/fuzz_s3_xml.c - the S3 client's reading of server answers
 * (src/objstore/s3_client.c): ListObjectsV2 pages (Key, IsTruncated, NextContinuationToken),
 * InitiateMultipartUpload (UploadId), CompleteMultipartUpload (a 200 that carries <Error>),
 * and error bodies (Code, Message) of any status, with XML entities. The answers come from
 * a real HTTP server on loopback (a thread of this process) so that the bytes pass through
 * curl and ferry__s3_call as they do in a run; the first byte picks the status, the rest is
 * the body, the same for every request of the input (so a server that repeats its
 * continuation token is in the search). max_attempts is 1: no retry sleeps. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include "ferry/config.h"
#include "ferry/core.h"
#include "fuzz.h"
#include "objstore/s3_client.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *answer;
static size_t answer_len;
static int listen_fd = -1;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

/* Reads one request (headers, then Content-Length bytes) and answers it. */
static void serve_one(int fd)
{
    char buf[16384];
    size_t got = 0;
    char *end = NULL;
    while (got < sizeof buf - 1 && end == NULL) {
        ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0) return;
        got += (size_t)r;
        buf[got] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (end == NULL) return;
    size_t want = 0;
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (cl) want = (size_t)strtoul(cl + 17, NULL, 10);
    size_t have = got - (size_t)(end + 4 - buf);
    while (have < want) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) return;
        have += (size_t)r;
    }
    pthread_mutex_lock(&mu);
    send_all(fd, answer, answer_len);
    pthread_mutex_unlock(&mu);
}

static void *server(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) continue;
        serve_one(fd);
        close(fd);
    }
    return NULL;
}

static int start(void)
{
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(listen_fd, 16) != 0 || getsockname(listen_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    pthread_t th;
    if (pthread_create(&th, NULL, server, NULL) != 0) return -1;
    pthread_detach(th);
    return ntohs(a.sin_port);
}

static const long statuses[] = {200, 200, 200, 200, 206, 400, 403, 404, 409, 412, 500, 503, 507};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int port = 0;
    if (port == 0) {
        setenv("AWS_ACCESS_KEY_ID", "fuzz", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "fuzz-secret", 1);
        port = start();
    }
    if (port <= 0 || size < 1) return 0;
    long st = statuses[data[0] % (sizeof statuses / sizeof statuses[0])];
    data++;
    size--;
    struct ferry_buf a;
    ferry_buf_init(&a, 0);
    if (ferry_buf_printf(&a, "HTTP/1.1 %ld X\r\nContent-Type: application/xml\r\nContent-Length: %zu\r\n"
                             "Connection: close\r\n\r\n", st, size) != FERRY_OK ||
        ferry_buf_append(&a, data, size) != FERRY_OK) {
        ferry_buf_release(&a);
        return 0;
    }
    pthread_mutex_lock(&mu);
    ferry_free(answer);
    answer = ferry_buf_take(&a); /* released at the next input */
    answer_len = a.len;
    pthread_mutex_unlock(&mu);

    char yaml[160];
    snprintf(yaml, sizeof yaml,
             "endpoint: http://127.0.0.1:%d\npath_style: true\nmax_attempts: 1\n", port);
    struct ferry_cfg *cfg = NULL;
    struct ferry__s3_client *c = NULL;
    struct ferry_error err;
    if (ferry_cfg_parse_string(yaml, strlen(yaml), "fuzz", &cfg, &err) != FERRY_OK) return 0;
    if (ferry__s3_client_open(cfg, "bucket", NULL, "fuzz", &c, &err) == FERRY_OK) {
        json_t *keys = json_array();
        (void)ferry__s3_list(c, "p/", keys, &err);
        json_decref(keys);
        char *id = NULL;
        (void)ferry__s3_multipart_create(c, "k", &id, &err);
        ferry_free(id);
        struct ferry_buf parts;
        ferry_buf_init(&parts, 0);
        (void)ferry_buf_printf(&parts, "<Part><PartNumber>1</PartNumber><ETag>e</ETag></Part>");
        (void)ferry__s3_multipart_complete(c, "k", "u&1", &parts, &err);
        ferry_buf_release(&parts);
        struct ferry_buf body;
        ferry_buf_init(&body, 0);
        (void)ferry__s3_get(c, "k", &body, &err);
        ferry_buf_release(&body);
    }
    ferry__s3_client_close(c);
    ferry_cfg_free(cfg);
    return 0;
}
