/* tests/unit/test_crc32c.c - CRC32-C: RFC 3720 vectors, hw == sw at every length and
 * alignment, chaining, combine. A bit-at-a-time CRC written here is the third oracle. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "ferry/crc32c.h"

/* The definition itself: one bit at a time, nothing shared with the library. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t r = ~crc;
    for (size_t i = 0; i < n; i++) {
        r ^= p[i];
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ (0x82F63B78u & (0u - (r & 1)));
    }
    return ~r;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint8_t rnd8(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint8_t)(rng_state >> 24);
}
static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = rnd8();
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* Runs every vector through fn: the public dispatch, sw, and hw when present. */
static void check_rfc3720(crc_fn fn)
{
    uint8_t buf[48];
    memset(buf, 0, 32);
    assert_int_equal(fn(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, 32);
    assert_int_equal(fn(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    assert_int_equal(fn(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    assert_int_equal(fn(0, buf, 32), 0x113FDB5Cu);
    static const uint8_t iscsi_read[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    assert_int_equal(fn(0, iscsi_read, sizeof iscsi_read), 0xD9963A56u);
    assert_int_equal(fn(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(fn(0, "", 0), 0u);
    assert_int_equal(fn(0x12345678u, NULL, 0), 0x12345678u); /* empty input changes nothing */
}

static void test_vectors_dispatch(void **state)
{
    (void)state;
    check_rfc3720(ferry_crc32c_update);
    assert_int_equal(ferry_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(crc_bitwise(0, (const uint8_t *)"123456789", 9), 0xE3069283u);
}

static void test_vectors_sw(void **state)
{
    (void)state;
    check_rfc3720(ferry_crc32c_update_sw);
}

static void test_vectors_hw(void **state)
{
    (void)state;
    if (!ferry_crc32c_have_hw()) {
        printf("# hw path skipped: this CPU lacks SSE4.2 or PCLMULQDQ\n");
        skip();
    }
    check_rfc3720(ferry_crc32c_update_hw);
}

/* Every length 0..4096 at every alignment 0..7, hw vs sw, with a running seed so the
 * incoming-crc handling is exercised too; bitwise spot checks tie both to the definition. */
static void test_every_length_and_alignment(void **state)
{
    (void)state;
    enum { MAXLEN = 4096 };
    uint8_t *mem = malloc(MAXLEN + 16);
    assert_non_null(mem);
    fill_random(mem, MAXLEN + 16);
    bool hw = ferry_crc32c_have_hw();
    if (!hw) printf("# hw half skipped: this CPU lacks SSE4.2 or PCLMULQDQ\n");
    long compared = 0;
    for (size_t align = 0; align < 8; align++) {
        const uint8_t *p = mem + align;
        for (size_t len = 0; len <= MAXLEN; len++) {
            uint32_t seed = (uint32_t)(len * 2654435761u);
            uint32_t sw = ferry_crc32c_update_sw(seed, p, len);
            if (hw) {
                uint32_t h = ferry_crc32c_update_hw(seed, p, len);
                if (h != sw) fail_msg("hw %08x != sw %08x at len %zu align %zu", h, sw, len, align);
                compared++;
            }
            if (len < 64 || len % 97 == 0 || (len >= 190 && len <= 194) ||
                (len >= 1534 && len <= 1538)) {
                uint32_t ref = crc_bitwise(seed, p, len);
                if (ref != sw) fail_msg("sw %08x != bitwise %08x at len %zu align %zu", sw, ref,
                                        len, align);
            }
        }
    }
    if (hw) assert_int_equal(compared, 8 * (MAXLEN + 1));
    free(mem);
}

/* Lengths that reach the 3 x 4096 tier and mixes of all tiers, beyond the 0..4096 sweep. */
static void test_large_buffers(void **state)
{
    (void)state;
    static const size_t lens[] = {12287, 12288, 12289, 12288 + 1536 + 192 + 7, 3 * 12288 + 5,
                                  100003, 1 << 20};
    size_t maxlen = 1 << 20;
    uint8_t *mem = malloc(maxlen + 8);
    assert_non_null(mem);
    fill_random(mem, maxlen + 8);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (size_t align = 0; align < 8; align += 3) {
            uint32_t ref = crc_bitwise(0, mem + align, lens[i]);
            assert_int_equal(ferry_crc32c_update_sw(0, mem + align, lens[i]), ref);
            assert_int_equal(ferry_crc32c_update(0, mem + align, lens[i]), ref);
            if (ferry_crc32c_have_hw())
                assert_int_equal(ferry_crc32c_update_hw(0, mem + align, lens[i]), ref);
        }
    free(mem);
}

static void test_chaining_equals_one_shot(void **state)
{
    (void)state;
    enum { N = 5000 };
    uint8_t *buf = malloc(N);
    assert_non_null(buf);
    fill_random(buf, N);
    uint32_t whole = ferry_crc32c(buf, N);
    assert_int_equal(whole, crc_bitwise(0, buf, N));
    for (size_t cut = 0; cut <= N; cut += (cut < 64 ? 1 : 37)) {
        uint32_t c = ferry_crc32c_update(0, buf, cut);
        assert_int_equal(ferry_crc32c_update(c, buf + cut, N - cut), whole);
        uint32_t s = ferry_crc32c_update_sw(0, buf, cut);
        assert_int_equal(ferry_crc32c_update_sw(s, buf + cut, N - cut), whole);
    }
    /* Many small irregular pieces. */
    uint32_t c = 0;
    size_t at = 0, step = 1;
    while (at < N) {
        size_t n = step < N - at ? step : N - at;
        c = ferry_crc32c_update(c, buf + at, n);
        at += n;
        step = step * 7 % 301 + 1;
    }
    assert_int_equal(c, whole);
    free(buf);
}

static void test_combine_equals_concatenation(void **state)
{
    (void)state;
    enum { N = 3000 };
    uint8_t *buf = malloc(N);
    assert_non_null(buf);
    fill_random(buf, N);
    uint32_t whole = ferry_crc32c(buf, N);
    for (size_t cut = 0; cut <= N; cut += (cut < 40 ? 1 : 53)) {
        uint32_t a = ferry_crc32c(buf, cut);
        uint32_t b = ferry_crc32c(buf + cut, N - cut);
        assert_int_equal(ferry_crc32c_combine(a, b, N - cut), whole);
    }
    /* Three pieces, both groupings. */
    uint32_t a = ferry_crc32c(buf, 100), b = ferry_crc32c(buf + 100, 1000),
             c = ferry_crc32c(buf + 1100, N - 1100);
    assert_int_equal(ferry_crc32c_combine(ferry_crc32c_combine(a, b, 1000), c, N - 1100), whole);
    assert_int_equal(ferry_crc32c_combine(a, ferry_crc32c_combine(b, c, N - 1100), N - 100),
                     whole);
    /* Length 0 and empty B. */
    assert_int_equal(ferry_crc32c_combine(whole, 0, 0), whole);
    free(buf);
}

/* Lengths far beyond what a test can hash: combine must still be associative and agree with
 * itself when a zero run is split in two. */
static void test_combine_huge_lengths(void **state)
{
    (void)state;
    /* crc of n zero bytes, built by doubling with combine; checked against direct CRC for
     * small n, then used to cross-check large n two ways. */
    uint8_t zeros[4096] = {0};
    uint32_t z1 = ferry_crc32c(zeros, 1);
    uint32_t zn = z1;
    size_t n = 1;
    while (n < 4096) {
        zn = ferry_crc32c_combine(zn, zn, n);
        n *= 2;
        if (n <= 4096) assert_int_equal(zn, ferry_crc32c(zeros, n));
    }
    uint32_t x = 0xDEADBEEFu;
    size_t big1 = (size_t)1 << 40, big2 = ((size_t)1 << 62) + 12345;
    uint32_t y = 0x01234567u, w = 0x89ABCDEFu;
    /* (x . y) . w == x . (y . w) */
    uint32_t left = ferry_crc32c_combine(ferry_crc32c_combine(x, y, big1), w, big2);
    uint32_t right = ferry_crc32c_combine(x, ferry_crc32c_combine(y, w, big2), big1 + big2);
    assert_int_equal(left, right);
    assert_int_not_equal(ferry_crc32c_combine(x, y, big1), ferry_crc32c_combine(x, y, big1 + 1));
    /* SIZE_MAX itself must not overflow internally: split it into two halves. */
    size_t h1 = SIZE_MAX / 2, h2 = SIZE_MAX - h1;
    uint32_t l2 = ferry_crc32c_combine(ferry_crc32c_combine(x, y, h1), w, h2);
    uint32_t r2 = ferry_crc32c_combine(x, ferry_crc32c_combine(y, w, h2), SIZE_MAX);
    assert_int_equal(l2, r2);
}

struct race_arg {
    const uint8_t *buf;
    size_t n;
    uint32_t out;
};

static void *race_main(void *p)
{
    struct race_arg *a = p;
    uint32_t c = 0;
    for (int i = 0; i < 200; i++) c = ferry_crc32c_update(0, a->buf, a->n);
    a->out = c;
    return NULL;
}

/* Registered first, so these threads race the one-time dispatch choice. */
static void test_first_call_from_many_threads(void **state)
{
    (void)state;
    static uint8_t buf[20000];
    fill_random(buf, sizeof buf);
    uint32_t ref = crc_bitwise(0, buf, sizeof buf);
    pthread_t t[4];
    struct race_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct race_arg){buf, sizeof buf, 0};
        assert_int_equal(pthread_create(&t[i], NULL, race_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].out, ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_call_from_many_threads),
        cmocka_unit_test(test_vectors_dispatch),
        cmocka_unit_test(test_vectors_sw),
        cmocka_unit_test(test_vectors_hw),
        cmocka_unit_test(test_every_length_and_alignment),
        cmocka_unit_test(test_large_buffers),
        cmocka_unit_test(test_chaining_equals_one_shot),
        cmocka_unit_test(test_combine_equals_concatenation),
        cmocka_unit_test(test_combine_huge_lengths),
    };
    return cmocka_run_group_tests_name("crc32c", tests, NULL, NULL);
}
