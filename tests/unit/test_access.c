/* tests/unit/test_access.c - the policy for API pipelines (config/access.c) and the cost
 * limits of the YAML reader (config/cfg.c): every refusal names the key and the rule; the
 * safe defaults refuse local paths, file: references, env: outside FERRY_SECRET_, loopback
 * and link-local (metadata) addresses; allow-all still protects the server's own files; a
 * hostile 1 MiB document is parsed (or refused) in linear time and bounded memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "unit.h"
#include "config/access.h"
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ferry-access-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct ferry_pipeline_spec *load(const char *source, const char *sink)
{
    char *y = ferry_asprintf("version: 1\nname: p\nsource: %s\nsink: %s\n", source, sink);
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error e;
    int rc = ferry_pipeline_load_string(y, strlen(y), "body", &p, &e);
    if (rc != FERRY_OK) fprintf(stderr, "load: %s\n", e.message);
    assert_int_equal(rc, FERRY_OK);
    ferry_free(y);
    return p;
}

#define SAMPLE "{type: sample, rows: 1, resources: [{table: orders, mode: full}]}"

/* Checks source/sink against policy a: expect FERRY_OK, or FERRY_EPOLICY with every word. */
static void expect(const struct ferry_access *a, const char *source, const char *sink,
                   const char *w1, const char *w2)
{
    struct ferry_pipeline_spec *p = load(source, sink);
    struct ferry_error e;
    ferry_error_clear(&e);
    int rc = ferry_access_check(a, p, &e);
    ferry_pipeline_free(p);
    if (w1 == NULL) {
        if (rc != FERRY_OK) fprintf(stderr, "unexpected: %s\n", e.message);
        assert_int_equal(rc, FERRY_OK);
        return;
    }
    assert_int_equal(rc, FERRY_EPOLICY);
    if (!strstr(e.message, w1) || (w2 && !strstr(e.message, w2)))
        fail_msg("\"%s\" lacks \"%s\" / \"%s\"", e.message, w1, w2 ? w2 : "");
}

static void defaults_refuse(void **state)
{
    (void)state;
    struct ferry_access *a = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_access_load(NULL, &a, &e), FERRY_OK);
    char sink[256];
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/out.db}", dir);
    expect(a, SAMPLE, sink, "sink.path: refused by policy rule paths", "not under an allowed");
    expect(a, SAMPLE, "{type: sqlite, path: /etc/passwd}", "sink.path", "rule paths");
    expect(a, "{type: postgres, url: \"postgres://u@127.0.0.1:5432/db\", resources: [{table: t}]}",
           "{type: 'null'}", "source.url: refused by policy rule hosts", "loopback");
    expect(a, "{type: postgres, url: \"host=169.254.169.254 dbname=x\", resources: [{table: t}]}",
           "{type: 'null'}", "source.url", "link-local");
    expect(a, "{type: postgres, url: \"postgres:///db\", resources: [{table: t}]}",
           "{type: 'null'}", "source.url", "loopback");
    expect(a, SAMPLE, "{type: s3, bucket: b, endpoint: \"http://[::1]:9000\"}", "sink.endpoint",
           "loopback");
    expect(a, SAMPLE, "{type: s3, bucket: b, endpoint: \"http://192.0.2.1:9000\", access_key_id: env:HOME}",
           "sink.access_key_id: refused by policy rule env", "FERRY_SECRET_");
    expect(a, SAMPLE,
           "{type: s3, bucket: b, endpoint: \"http://192.0.2.1:9000\", session_token: env:FERRY_API_TOKEN}",
           "sink.session_token", "rule env");
    expect(a, SAMPLE, "{type: s3, bucket: b, endpoint: \"http://192.0.2.1:9000\", access_key_id: file:/etc/shadow}",
           "sink.access_key_id: refused by policy rule files", NULL);
    /* what the defaults allow: a public address, an env: under the prefix */
    expect(a, SAMPLE,
           "{type: s3, bucket: b, endpoint: \"http://192.0.2.1:9000\", access_key_id: env:FERRY_SECRET_K}",
           NULL, NULL);
    assert_false(ferry_access_env_allowed(a, "AWS_SECRET_ACCESS_KEY"));
    ferry_access_free(a);
}

static void allow_all_protects_server_files(void **state)
{
    (void)state;
    struct ferry_access *a = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_access_load("allow-all", &a, &e), FERRY_OK);
    char state_db[128], sink[256];
    snprintf(state_db, sizeof state_db, "%s/state.db", dir);
    assert_int_equal(ferry_access_protect(a, state_db, &e), FERRY_OK);
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/out.db}", dir);
    expect(a, SAMPLE, sink, NULL, NULL); /* a sibling is fine */
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/state.db}", dir);
    expect(a, SAMPLE, sink, "sink.path: refused by policy rule protected", NULL);
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/./state.db-wal}", dir);
    expect(a, SAMPLE, sink, "rule protected", NULL);
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/x/../state.db}", dir); /* x: none */
    expect(a, SAMPLE, sink, "sink.path", "without \"..\"");
    snprintf(sink, sizeof sink, "{type: files, path: %s, format: csv}", dir); /* its folder */
    expect(a, SAMPLE, sink, "rule protected", NULL);
    expect(a, "{type: postgres, url: \"postgres://u@127.0.0.1/db\", resources: [{table: t}]}",
           "{type: 'null'}", NULL, NULL);
    assert_false(ferry_access_env_allowed(a, "FERRY_API_TOKEN"));
    ferry_access_free(a);
}

static void policy_file_rules(void **state)
{
    (void)state;
    char pol[128], y[512];
    snprintf(pol, sizeof pol, "%s/policy.yaml", dir);
    snprintf(y, sizeof y,
             "paths: [%s/data]\nenv: [APP_*]\nfiles: [%s/keys]\n"
             "hosts: [\"127.0.0.1/32:5432\", \"*.example.com\"]\nconnectors: [sample, sqlite, postgres]\n",
             dir, dir);
    FILE *f = fopen(pol, "w");
    assert_non_null(f);
    fputs(y, f);
    fclose(f);
    struct ferry_access *a = NULL;
    struct ferry_error e;
    assert_int_equal(ferry_access_load(pol, &a, &e), FERRY_OK);
    char sink[256];
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/data/new/out.db}", dir);
    expect(a, SAMPLE, sink, NULL, NULL);
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/data/../out.db}", dir);
    expect(a, SAMPLE, sink, "rule paths", NULL);
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/policy.yaml}", dir);
    expect(a, SAMPLE, sink, "rule protected", NULL);
    expect(a, "{type: postgres, url: \"postgres://u@127.0.0.1:5432/db\", resources: [{table: t}]}",
           "{type: 'null'}", "sink.type: refused by policy rule connectors", "null");
    snprintf(sink, sizeof sink, "{type: sqlite, path: %s/data/o.db}", dir);
    expect(a, "{type: postgres, url: \"postgres://u@127.0.0.1:5432/db\", resources: [{table: t}]}",
           sink, NULL, NULL); /* loopback allowed by an explicit CIDR with its port */
    expect(a, "{type: postgres, url: \"postgres://u@127.0.0.1:5433/db\", resources: [{table: t}]}",
           sink, "rule hosts", "loopback");
    expect(a, "{type: postgres, url: \"host=192.0.2.7 port=5432\", resources: [{table: t}]}", sink,
           "rule hosts", "not in the allowed hosts");
    expect(a, "{type: postgres, url: env:APP_PG, resources: [{table: t}]}", sink, NULL, NULL);
    expect(a, "{type: postgres, url: env:PG, resources: [{table: t}]}", sink, "rule env", NULL);
    ferry_access_free(a);
    /* a bad policy file names its key */
    f = fopen(pol, "w");
    fputs("hosts: [\"10.0.0.0/99\"]\n", f);
    fclose(f);
    assert_int_equal(ferry_access_load(pol, &a, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "hosts"));
    f = fopen(pol, "w");
    fputs("pathz: [/tmp]\n", f);
    fclose(f);
    assert_int_equal(ferry_access_load(pol, &a, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "pathz"));
}

/* ---- YAML cost limits ---- */

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void yaml_limits(void **state)
{
    (void)state;
    long rss0 = maxrss_kib();
    struct ferry_cfg *root = NULL;
    struct ferry_error e;
    /* 1 MiB of distinct keys in one map: the duplicate check is linear, so this parses. */
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    for (int i = 0; b.len < (1 << 20) - 32; i++)
        ferry_buf_printf(&b, "k%07d: 1\n", i);
    int rc = ferry_cfg_parse_string(b.data, b.len, "body", &root, &e);
    if (rc != FERRY_OK) fprintf(stderr, "%s\n", e.message);
    assert_int_equal(rc, FERRY_OK);
    assert_true(root->n_children > 80000);
    ferry_cfg_free(root);
    /* a duplicate at the end is still found, naming both lines */
    ferry_buf_printf(&b, "k0000005: 2\n");
    assert_int_equal(ferry_cfg_parse_string(b.data, b.len, "body", &root, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "k0000005 (line"));
    assert_non_null(strstr(e.message, "duplicate key (first at line 6)"));
    ferry_buf_reset(&b);
    /* 1 MiB of one-byte list items: refused by the node cap */
    ferry_buf_printf(&b, "[");
    while (b.len < (1 << 20))
        ferry_buf_printf(&b, "1,");
    ferry_buf_printf(&b, "1]");
    assert_int_equal(ferry_cfg_parse_string(b.data, b.len, "body", &root, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "more than 100000 values"));
    ferry_buf_reset(&b);
    /* a key longer than the cap */
    ferry_buf_printf(&b, "a: {");
    for (int i = 0; i < 2000; i++)
        ferry_buf_append(&b, "k", 1);
    ferry_buf_printf(&b, ": 1}");
    assert_int_equal(ferry_cfg_parse_string(b.data, b.len, "body", &root, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "longer than 1024 bytes"));
    ferry_buf_reset(&b);
    /* long keys nested deep, many leaves: every node would carry a 60 KiB path */
    char key[1001];
    memset(key, 'x', 1000);
    key[1000] = '\0';
    for (int d = 0; d < 60; d++)
        ferry_buf_printf(&b, "%.*s%s%d:\n", d, "                                                            ", key, d);
    for (int i = 0; b.len < (1 << 20) - 100; i++)
        ferry_buf_printf(&b, "%.*sl%d: 1\n", 60, "                                                            ", i);
    assert_int_equal(ferry_cfg_parse_string(b.data, b.len, "body", &root, &e), FERRY_ECONFIG);
    assert_non_null(strstr(e.message, "key paths of this document add up to more than 8 MiB"));
    ferry_buf_release(&b);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* the process grew by less than 32 MiB over all of these (sanitizers add shadow memory) */
    long grown = maxrss_kib() - rss0;
    if (grown >= 32 * 1024) fail_msg("parsing hostile 1 MiB documents grew the process by %ld KiB", grown);
#else
    (void)rss0;
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(yaml_limits), /* first: its memory is measured from the start */
        cmocka_unit_test(defaults_refuse),
        cmocka_unit_test(allow_all_protects_server_files),
        cmocka_unit_test(policy_file_rules),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
