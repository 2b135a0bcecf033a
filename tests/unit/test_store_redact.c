/* tests/unit/test_store_redact.c - store migration 10 (issue 19): specs and run requests saved
 * before registration refused plain credentials are redacted when an older state file is
 * opened: a URL's userinfo password, password= in a conninfo or query, plain values under
 * credential keys. References (env:, file:) and everything else stay as they were, and the
 * plaintext is in no byte of the state files afterwards. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit.h"
#include "ferry/core.h"
#include "store/store.h"

static char dir[64], path[128];

static bool file_has(const char *file, const char *needle)
{
    FILE *f = fopen(file, "rb");
    if (f == NULL) return false;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        ferry_buf_append(&b, chunk, got);
    fclose(f);
    bool found = b.len && memmem(b.data, b.len, needle, strlen(needle)) != NULL;
    ferry_buf_release(&b);
    return found;
}

static void redacts_older_state(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ferry-redact-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/state.db", dir);
    struct ferry_store *st = NULL;
    struct ferry_error err;
    assert_int_equal(ferry_store_open(path, &st, &err), FERRY_OK);
    const char *spec =
        "{\"name\":\"p\",\"sink\":{\"access_key_id\":\"env:K\",\"secret_access_key\":\"plainS3cret1\","
        "\"type\":\"s3\"},\"source\":{\"resources\":[{\"key\":[\"id\"],\"table\":\"t\"}],\"type\":"
        "\"postgres\",\"url\":\"postgres://app:urlPw2@db/x?password=qPw3&sslmode=require\"},"
        "\"transforms\":[{\"note\":\"host=db password = 'cPw4 x' user=u\"}],\"version\":\"1\"}";
    bool added = false;
    assert_int_equal(ferry_store_pipeline_apply(st, "p", "v1", spec, 0, &added, &err), FERRY_OK);
    int64_t run = 0;
    assert_int_equal(ferry_store_run_create(st, "p", "v1", spec, &run, &err), FERRY_OK);
    int latest = ferry_store_schema_version(st);
    ferry_store_close(st);
    /* Make it a state file from before migration 10 (and the later ones: 11 adds secrets,
     * 12 run_resources.converted, 13 uncommitted_counts, 14 its converted column). */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DELETE FROM \"schema_migrations\" WHERE \"version\" >= 10;"
                                  " DROP TABLE IF EXISTS \"secrets\";"
                                  " DROP TABLE IF EXISTS \"uncommitted_counts\";"
                                  " ALTER TABLE \"run_resources\" DROP COLUMN \"converted\"",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(ferry_store_open(path, &st, &err), FERRY_OK);
    assert_true(latest >= 11);
    assert_int_equal(ferry_store_schema_version(st), latest);
    char *saved = NULL;
    assert_int_equal(ferry_store_pipeline_version_spec(st, "p", "v1", &saved, &err), FERRY_OK);
    assert_non_null(strstr(saved, "\"secret_access_key\":\"(redacted)\""));
    assert_non_null(strstr(saved, "postgres://app:(redacted)@db/x?password=(redacted)&sslmode=require"));
    assert_non_null(strstr(saved, "host=db password =(redacted) user=u"));
    assert_non_null(strstr(saved, "\"access_key_id\":\"env:K\""));
    assert_non_null(strstr(saved, "\"key\":[\"id\"]"));
    ferry_free(saved);
    struct ferry_run_info ri;
    assert_int_equal(ferry_store_run_get(st, run, &ri, &err), FERRY_OK);
    assert_non_null(strstr(ri.request, "\"secret_access_key\":\"(redacted)\""));
    ferry_run_info_clear(&ri);
    ferry_store_close(st);
    /* Checkpoint the WAL into the file (no VACUUM): no byte of the files holds a plaintext. */
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    static const char *const plain[] = {"plainS3cret1", "urlPw2", "qPw3", "cPw4", NULL};
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", path);
    for (int i = 0; plain[i]; i++) {
        if (file_has(path, plain[i]) || file_has(wal, plain[i]))
            fail_msg("%s is still in the state files", plain[i]);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(redacts_older_state)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
