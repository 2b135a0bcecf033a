/* tests/unit/test_s3_uploads.c - ferry__s3_list_uploads_each (objstore/s3_client.c) against a
 * loopback HTTP server thread that answers each request with the next canned response and
 * records the request lines: pages followed by their key / upload-id markers, XML entities
 * decoded, Initiated parsed to ms, a callback's error stopping the walk, a refusal (501)
 * reported as FERRY_EUNSUPPORTED, a server repeating its markers refused. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "objstore/s3_client.h"

#define MAX_RESP 4

struct canned {
    int fd;
    int n; /* responses */
    const char *status[MAX_RESP];
    const char *body[MAX_RESP];
    char lines[MAX_RESP][512]; /* the request lines received */
    int served;
};

/* Reads one request (headers; GETs have no body) and answers it; stops after c->n. */
static void *serve(void *arg)
{
    struct canned *c = arg;
    while (c->served < c->n) {
        int s = accept(c->fd, NULL, NULL);
        if (s < 0) break;
        /* one connection may carry several requests (curl keeps it alive) */
        char buf[8192];
        size_t len = 0;
        while (c->served < c->n) {
            char *end = NULL;
            while ((end = memmem(buf, len, "\r\n\r\n", 4)) == NULL) {
                ssize_t r = read(s, buf + len, sizeof buf - len - 1);
                if (r <= 0) goto next;
                len += (size_t)r;
            }
            size_t hl = (size_t)(end - buf) + 4;
            char *eol = memchr(buf, '\r', hl);
            size_t ll = (size_t)(eol - buf);
            if (ll >= sizeof c->lines[0]) ll = sizeof c->lines[0] - 1;
            memcpy(c->lines[c->served], buf, ll);
            c->lines[c->served][ll] = '\0';
            char head[256];
            const char *body = c->body[c->served];
            int hn = snprintf(head, sizeof head,
                              "HTTP/1.1 %s\r\nContent-Type: application/xml\r\nContent-Length: "
                              "%zu\r\n\r\n",
                              c->status[c->served], strlen(body));
            c->served++;
            if (write(s, head, (size_t)hn) != hn || write(s, body, strlen(body)) < 0) goto next;
            memmove(buf, buf + hl, len - hl);
            len -= hl;
        }
    next:
        close(s);
    }
    return NULL;
}

static struct ferry__s3_client *client(struct canned *c, pthread_t *th, struct ferry_cfg **cfg)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(c->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(c->fd, 4), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&a, &al), 0);
    char yaml[256];
    snprintf(yaml, sizeof yaml,
             "endpoint: \"http://127.0.0.1:%d\"\npath_style: true\nmax_attempts: 1\n",
             ntohs(a.sin_port));
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 1);
    struct ferry_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(ferry_cfg_parse_string(yaml, strlen(yaml), "test", cfg, &err), FERRY_OK);
    struct ferry__s3_client *cli = NULL;
    assert_int_equal(ferry__s3_client_open(*cfg, "lake", NULL, "test", &cli, &err), FERRY_OK);
    assert_int_equal(pthread_create(th, NULL, serve, c), 0);
    return cli;
}

static void done(struct canned *c, pthread_t th, struct ferry__s3_client *cli,
                 struct ferry_cfg *cfg)
{
    ferry__s3_client_close(cli);
    shutdown(c->fd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(c->fd);
    ferry_cfg_free(cfg);
}

struct seen {
    int n;
    char keys[4][64], ids[4][64];
    int64_t ms[4];
    int fail_at; /* 1-based; 0: never */
};

static int each(const char *key, const char *upload_id, int64_t initiated_ms, void *arg,
                struct ferry_error *err)
{
    struct seen *s = arg;
    if (s->n >= 4) return ferry_error_set(err, FERRY_EINVAL, "test", "too many uploads");
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
    snprintf(s->ids[s->n], sizeof s->ids[0], "%s", upload_id);
    s->ms[s->n] = initiated_ms;
    s->n++;
    if (s->n == s->fail_at) return ferry_error_set(err, FERRY_ESINK, "test", "stop at %s", key);
    return FERRY_OK;
}

static const char *page1 =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListMultipartUploadsResult><Bucket>lake</Bucket>"
    "<KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>"
    "<NextKeyMarker>wh/data/a&amp;b.parquet</NextKeyMarker><NextUploadIdMarker>id "
    "1</NextUploadIdMarker>"
    "<MaxUploads>1</MaxUploads><IsTruncated>true</IsTruncated>"
    "<Upload><Key>wh/data/a&amp;b.parquet</Key><UploadId>id 1</UploadId>"
    "<Initiator><ID>x</ID></Initiator><Initiated>2026-11-30T18:40:47.123Z</Initiated></Upload>"
    "</ListMultipartUploadsResult>";
static const char *page2 =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListMultipartUploadsResult><Bucket>lake</Bucket>"
    "<IsTruncated>false</IsTruncated>"
    "<Upload><Key>wh/data/c.parquet</Key><UploadId>id2</UploadId>"
    "<Initiated>1970-01-01T00:00:01Z</Initiated></Upload>"
    "<Upload><Key>wh/data/d.parquet</Key><UploadId>id3</UploadId>"
    "<Initiated>yesterday</Initiated></Upload>"
    "</ListMultipartUploadsResult>";

/* One listing of prefix wh/data/ against the canned answers: its code; err cleared first. */
static int list(struct canned *c, struct seen *s, struct ferry_error *err)
{
    pthread_t th;
    struct ferry_cfg *cfg = NULL;
    struct ferry__s3_client *cli = client(c, &th, &cfg);
    memset(err, 0, sizeof *err);
    int rc = ferry__s3_list_uploads_each(cli, "wh/data/", each, s, err);
    done(c, th, cli, cfg);
    return rc;
}

static void test_pages(void **state)
{
    (void)state;
    struct canned c = {.n = 2, .status = {"200 OK", "200 OK"}, .body = {page1, page2}};
    struct seen s = {0};
    struct ferry_error err;
    assert_int_equal(list(&c, &s, &err), FERRY_OK);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.keys[0], "wh/data/a&b.parquet");
    assert_string_equal(s.ids[0], "id 1");
    assert_true(s.ms[0] == INT64_C(1796064047123)); /* date -u -d 2026-11-30T18:40:47Z +%s */
    assert_string_equal(s.keys[1], "wh/data/c.parquet");
    assert_true(s.ms[1] == 1000);
    assert_true(s.ms[2] == -1); /* unreadable: the caller keeps such an upload */
    assert_string_equal(c.lines[0], "GET /lake?prefix=wh%2Fdata%2F&uploads= HTTP/1.1");
    /* the second page starts after the first's markers, parameters in canonical order */
    assert_string_equal(c.lines[1],
                        "GET /lake?key-marker=wh%2Fdata%2Fa%26b.parquet&prefix=wh%2Fdata%2F"
                        "&upload-id-marker=id%201&uploads= HTTP/1.1");
}

static void test_callback_error_stops(void **state)
{
    (void)state;
    struct canned c = {.n = 1, .status = {"200 OK"}, .body = {page2}};
    struct seen s = {.fail_at = 1};
    struct ferry_error err;
    assert_int_equal(list(&c, &s, &err), FERRY_ESINK);
    assert_int_equal(s.n, 1);
    assert_non_null(strstr(err.message, "stop at wh/data/c.parquet"));
}

static void test_refused(void **state)
{
    (void)state;
    const char *body =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NotImplemented</Code>"
        "<Message>A parameter you provided implies functionality that is not "
        "implemented</Message></Error>";
    struct canned c = {.n = 1, .status = {"501 Not Implemented"}, .body = {body}};
    struct seen s = {0};
    struct ferry_error err;
    assert_int_equal(list(&c, &s, &err), FERRY_EUNSUPPORTED);
    assert_int_equal(s.n, 0);
    assert_int_equal(err.code, FERRY_EUNSUPPORTED);
    assert_non_null(strstr(err.message, "NotImplemented"));
}

static void test_repeated_markers(void **state)
{
    (void)state;
    /* a server that hands back the markers it was given would be listed forever */
    struct canned c = {.n = 2, .status = {"200 OK", "200 OK"}, .body = {page1, page1}};
    struct seen s = {0};
    struct ferry_error err;
    assert_int_equal(list(&c, &s, &err), FERRY_ESINK);
    assert_int_equal(s.n, 2);
    assert_non_null(strstr(err.message, "repeated the markers"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pages),
        cmocka_unit_test(test_callback_error_stops),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_repeated_markers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
