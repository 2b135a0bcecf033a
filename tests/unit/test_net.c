/* tests/unit/test_net.c - the HTTP client's contracts that need no server (net/http.h):
 * URLs in messages lose their user info and query, escaping, a refused connection is an
 * error naming the host and never the credentials, a canceled client sends nothing. The
 * clients' behaviour against real servers is covered by the s3, iceberg_rest, k8s_dispatch
 * and serve e2e tests. */
#include "unit.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "ferry/core.h"
#include "net/http.h"

static void test_redact(void **state)
{
    (void)state;
    char out[256];
    ferry__http_redact("https://user:secret@host.example:8443/a/b?X-Amz-Signature=abc#f", out,
                       sizeof out);
    assert_string_equal(out, "https://host.example:8443/a/b");
    ferry__http_redact("http://127.0.0.1:9000", out, sizeof out);
    assert_string_equal(out, "http://127.0.0.1:9000");
    ferry__http_redact("http://h/p?token=t", out, sizeof out);
    assert_string_equal(out, "http://h/p");
}

static void test_escape(void **state)
{
    (void)state;
    char *e = ferry__http_escape("a b/c~d_e.f-g%", 14);
    assert_non_null(e);
    assert_string_equal(e, "a%20b%2Fc~d_e.f-g%25");
    ferry_free(e);
}

/* A loopback port nothing listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_refused_names_host_not_secret(void **state)
{
    (void)state;
    struct ferry__http_opts o = {.what = "test client", .origin = "test", .max_attempts = 2,
                                 .backoff_ms = 1};
    struct ferry__http *h = NULL;
    struct ferry_error e = {0};
    assert_int_equal(ferry__http_open(&o, &h, &e), FERRY_OK);
    char url[128];
    snprintf(url, sizeof url, "http://user:hunter2@127.0.0.1:%d/x?sig=s3cr3t", closed_port());
    const char *hdrs[] = {"Authorization: Bearer tok3n", NULL};
    struct ferry__http_req q = {.method = "GET", .url = url, .headers = hdrs, .idempotent = true};
    struct ferry_buf body;
    ferry_buf_init(&body, 0);
    long status = -1;
    int rc = ferry__http_do(h, &q, &body, &status, &e);
    assert_int_equal(rc, FERRY_EIO);
    assert_int_equal(status, 0);
    assert_non_null(strstr(e.message, "test client: GET http://127.0.0.1:"));
    assert_null(strstr(e.message, "hunter2"));
    assert_null(strstr(e.message, "s3cr3t"));
    assert_null(strstr(e.message, "tok3n"));
    ferry_buf_release(&body);
    ferry__http_close(h);
}

static void test_canceled_sends_nothing(void **state)
{
    (void)state;
    struct ferry__http_opts o = {.what = "test client", .origin = "test"};
    struct ferry__http *h = NULL;
    struct ferry_error e = {0};
    assert_int_equal(ferry__http_open(&o, &h, &e), FERRY_OK);
    ferry__http_cancel(h);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", closed_port());
    struct ferry__http_req q = {.method = "GET", .url = url, .idempotent = true};
    struct ferry_buf body;
    ferry_buf_init(&body, 0);
    long status = -1;
    assert_int_equal(ferry__http_do(h, &q, &body, &status, &e), FERRY_ECANCELED);
    assert_non_null(strstr(e.message, "canceled"));
    ferry_buf_release(&body);
    ferry__http_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_refused_names_host_not_secret),
        cmocka_unit_test(test_canceled_sends_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
