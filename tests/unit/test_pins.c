/* tests/unit/test_pins.c - DNS pinning (net/pins.h, docs/security.md): the worker's policy
 * check records the address it approved for each host name, and the connectors connect to
 * that address without resolving the name again. The table's rules (exact port before any
 * port, replace, IPv6 brackets, port 0 as 80 and 443); a worker-side check of a pipeline
 * naming "localhost" pins a loopback address allowed by the policy's CIDRs; the HTTP client
 * reaches a name that can never resolve (".invalid", RFC 6761) only through its pin, on a
 * loopback server of this test. */
#include "unit.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "config/access.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "net/http.h"
#include "net/pins.h"

static void test_table(void **state)
{
    (void)state;
    ferry_pins_clear();
    char a[64], line[400];
    assert_false(ferry_pins_find("db.example", 5432, a, sizeof a));
    ferry_pins_add("db.example", 0, "192.0.2.1");
    ferry_pins_add("db.example", 5432, "192.0.2.2");
    assert_true(ferry_pins_find("db.example", 5432, a, sizeof a));
    assert_string_equal(a, "192.0.2.2"); /* the exact port first */
    assert_true(ferry_pins_find("db.example", 6543, a, sizeof a));
    assert_string_equal(a, "192.0.2.1"); /* then the pin for any port */
    ferry_pins_add("db.example", 5432, "192.0.2.3");
    assert_true(ferry_pins_find("db.example", 5432, a, sizeof a));
    assert_string_equal(a, "192.0.2.3"); /* replaced */
    assert_false(ferry_pins_find("other.example", 5432, a, sizeof a));
    ferry_pins_clear();
    ferry_pins_add("v6.example", 9000, "2001:db8::1");
    ferry_pins_add("any.example", 0, "192.0.2.9");
    assert_true(ferry_pins_curl_line(0, line, sizeof line));
    assert_string_equal(line, "v6.example:9000:[2001:db8::1]");
    assert_true(ferry_pins_curl_line(1, line, sizeof line));
    assert_string_equal(line, "any.example:80:192.0.2.9");
    assert_true(ferry_pins_curl_line(2, line, sizeof line));
    assert_string_equal(line, "any.example:443:192.0.2.9");
    assert_false(ferry_pins_curl_line(3, line, sizeof line));
    ferry_pins_clear();
}

static void test_worker_check_pins(void **state)
{
    (void)state;
    ferry_pins_clear();
    char dir[] = "/tmp/ferry-pins-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/policy.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("hosts: [\"127.0.0.1/32\", \"::1/128\"]\n", f);
    fclose(f);
    const char *y = "version: 1\nname: p\nsource: {type: sample, rows: 1, resources: [{table: "
                    "orders, mode: full}]}\nsink: {type: s3, bucket: b, endpoint: "
                    "\"http://localhost:9123\"}\n";
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_pipeline_load_string(y, strlen(y), "body", &p, &e), FERRY_OK);
    /* the server's own (registration) check records nothing */
    struct ferry_access *a = NULL;
    assert_int_equal(ferry_access_load(path, &a, &e), FERRY_OK);
    assert_int_equal(ferry_access_check(a, p, &e), FERRY_OK);
    ferry_access_free(a);
    char addr[64];
    assert_false(ferry_pins_find("localhost", 9123, addr, sizeof addr));
    /* the worker's check pins what it approved */
    setenv("FERRY_POLICY", path, 1);
    int rc = ferry_access_check_from_env(p, &e);
    unsetenv("FERRY_POLICY");
    if (rc != FERRY_OK) fprintf(stderr, "check: %s\n", e.message);
    assert_int_equal(rc, FERRY_OK);
    assert_true(ferry_pins_find("localhost", 9123, addr, sizeof addr));
    assert_true(!strcmp(addr, "127.0.0.1") || !strcmp(addr, "::1"));
    ferry_pipeline_free(p);
    unlink(path);
    rmdir(dir);
    ferry_pins_clear();
}

/* A loopback HTTP server answering one request "pinned". */
static void *serve_one(void *arg)
{
    int ls = *(int *)arg;
    int c = accept(ls, NULL, NULL);
    if (c < 0) return NULL;
    char buf[4096];
    ssize_t n = recv(c, buf, sizeof buf, 0);
    (void)n;
    static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\npinned";
    ssize_t w = send(c, reply, sizeof reply - 1, 0);
    (void)w;
    close(c);
    return NULL;
}

static void test_http_uses_pin(void **state)
{
    (void)state;
    ferry_pins_clear();
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 4), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    int port = ntohs(sa.sin_port);
    char url[128];
    snprintf(url, sizeof url, "http://ferry-pin-test.invalid:%d/x", port);
    struct ferry__http_opts o = {.what = "pin test", .connect_timeout_ms = 5000};
    struct ferry__http *h = NULL;
    struct ferry_error e;
    assert_int_equal(ferry__http_open(&o, &h, &e), FERRY_OK);
    struct ferry__http_req q = {.method = "GET", .url = url};
    struct ferry_buf body;
    ferry_buf_init(&body, 1 << 16);
    long status = 0;
    /* no pin: the name does not resolve */
    assert_int_not_equal(ferry__http_do(h, &q, &body, &status, &e), FERRY_OK);
    ferry_pins_add("ferry-pin-test.invalid", port, "127.0.0.1");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, serve_one, &ls), 0);
    int rc = ferry__http_do(h, &q, &body, &status, &e);
    if (rc != FERRY_OK) fprintf(stderr, "http: %s\n", e.message);
    assert_int_equal(rc, FERRY_OK);
    assert_int_equal(status, 200);
    assert_int_equal(body.len, 6);
    assert_memory_equal(body.data, "pinned", 6);
    pthread_join(t, NULL);
    ferry_buf_release(&body);
    ferry__http_close(h);
    close(ls);
    ferry_pins_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_worker_check_pins),
        cmocka_unit_test(test_http_uses_pin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
