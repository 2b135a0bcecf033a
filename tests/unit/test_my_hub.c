/* tests/unit/test_my_hub.c - the lifetime of a shared binlog hub (my_hub.h) when its members
 * leave at once: every member of a gathering whose dump fails to open leaves on its own
 * thread at the same moment, as do members that answer without a subscription; the hub is
 * freed exactly once (ASan in CI: a second free or a lock on a freed hub fails the test;
 * before the fix two members that left together both freed it, the SIGSEGV of CI run 19).
 * No server: the open callback fails, so no reader thread starts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include "unit.h"
#include "connectors/mysql/my_hub.h"
#include "ferry/error.h"

#define MEMBERS 6
#define ROUNDS 200

static atomic_int opens;

static int open_fails(void *ctx, int64_t start, MYSQL **m, MARIADB_RPL **rpl, bool *crc,
                      struct ferry_error *err)
{
    (void)ctx, (void)start, (void)m, (void)rpl, (void)crc;
    atomic_fetch_add(&opens, 1);
    return ferry_error_set(err, FERRY_EIO, "mysql", "no server in a unit test");
}

struct member {
    const char *key;
    int i, rc;
    bool want;
    pthread_barrier_t *go;
};

static void *member_main(void *arg)
{
    struct member *m = arg;
    char table[16];
    snprintf(table, sizeof table, "t%d", m->i);
    pthread_barrier_wait(m->go);
    struct ferry_my_hub_sub *sub = (struct ferry_my_hub_sub *)1;
    bool crc = false;
    struct ferry_error e;
    m->rc = ferry__my_hub_join(m->key, "unit", MEMBERS, m->want, "db", table, 4 + m->i,
                               open_fails, NULL, &sub, &crc, &e);
    if (sub != NULL) m->rc = -1000; /* a failed open gives no subscription */
    ferry__my_hub_leave(sub);
    return NULL;
}

/* All members want the hub; the least start opens it and fails; all leave together. */
static void round_of(const char *key, int wanting)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, MEMBERS);
    pthread_t t[MEMBERS];
    struct member m[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) {
        m[i] = (struct member){.key = key, .i = i, .want = i < wanting, .go = &go};
        assert_int_equal(pthread_create(&t[i], NULL, member_main, &m[i]), 0);
    }
    for (int i = 0; i < MEMBERS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    int failed = 0;
    for (int i = 0; i < MEMBERS; i++) {
        assert_true(m[i].rc != -1000);
        if (m[i].rc != FERRY_OK) failed++;
    }
    /* only the opener reports the open error; the others stream alone */
    assert_int_equal(failed, wanting > 0 ? 1 : 0);
}

static void test_members_leave_together(void **state)
{
    (void)state;
    atomic_store(&opens, 0);
    for (int r = 0; r < ROUNDS; r++)
        round_of("unit-hub-all", MEMBERS);
    assert_int_equal(atomic_load(&opens), ROUNDS); /* one hub per round, opened once */
}

static void test_mixed_answers(void **state)
{
    (void)state;
    atomic_store(&opens, 0);
    for (int r = 0; r < ROUNDS; r++)
        round_of("unit-hub-mixed", r % (MEMBERS + 1)); /* from none to all wanting */
    int want_rounds = 0;
    for (int r = 0; r < ROUNDS; r++)
        want_rounds += r % (MEMBERS + 1) > 0;
    assert_int_equal(atomic_load(&opens), want_rounds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_leave_together),
        cmocka_unit_test(test_mixed_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
