/* core/crc32c.c - CRC32-C: the portable path, the run-time dispatch and the combine.
 *
 * Owns the slicing-by-8 tables, the table of x^(2^k) mod P used to shift a CRC past n
 * zero bytes, and the choice between this file's portable code and crc32c_x86.c's
 * SSE4.2 code, made once on the first call. Calls only libc and crc32c_x86.c. Called by
 * the batch digest, sinks (encoded integrity), the state store and tests.
 *
 * Conventions (RFC 3720): reflected polynomial 0x82F63B78, register preset to all ones
 * and inverted at the end. Both happen inside update(), so the public value of an empty
 * input is 0 and update() chains: update(update(0, A), B) == update(0, A||B).
 *
 * Combine: in GF(2)[x]/P the raw register after A||B is reg(A)*x^(8|B|) + raw(B); the
 * presets and final inversions cancel in crc(A)*x^(8|B|) + crc(B), so combine is one
 * modular multiplication by x^(8|B|), built from a table of x^(2^k) in O(log |B|). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "core/crc32c_impl.h"
#include "ferry/crc32c.h"

static uint32_t table[8][256];    /* table[k][b]: byte b followed by k zero bytes */
static uint32_t x2k[67];          /* x^(2^k) mod P, k < 64 + 3 */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int i = 0; i < 8; i++) r = (r & 1) ? (r >> 1) ^ FERRY__CRC32C_POLY : r >> 1;
        table[0][b] = r;
    }
    for (int k = 1; k < 8; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t prev = table[k - 1][b];
            table[k][b] = (prev >> 8) ^ table[0][prev & 0xff];
        }
    x2k[0] = 0x40000000u; /* x^1 */
    for (int k = 1; k < 67; k++) x2k[k] = ferry__crc32c_mulmod(x2k[k - 1], x2k[k - 1]);
}

uint32_t ferry__crc32c_mulmod(uint32_t a, uint32_t b)
{
    /* Walk a's coefficients from x^0 (bit 31) up while b runs through b*x^i. */
    uint32_t p = 0;
    for (uint32_t m = 0x80000000u; m != 0; m >>= 1) {
        if (a & m) p ^= b;
        b = (b & 1) ? (b >> 1) ^ FERRY__CRC32C_POLY : b >> 1;
    }
    return p;
}

uint32_t ferry__crc32c_xpow(uint64_t n)
{
    pthread_once(&tables_once, build_tables);
    uint32_t r = 0x80000000u; /* x^0 */
    for (int k = 0; n != 0; k++, n >>= 1)
        if (n & 1) r = ferry__crc32c_mulmod(r, x2k[k]);
    return r;
}

/* x^(8n) mod P without forming 8n, which could overflow for n near SIZE_MAX. */
static uint32_t xpow_bytes(uint64_t n)
{
    pthread_once(&tables_once, build_tables);
    uint32_t r = 0x80000000u;
    for (int k = 3; n != 0; k++, n >>= 1)
        if (n & 1) r = ferry__crc32c_mulmod(r, x2k[k]);
    return r;
}

uint32_t ferry_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    return ferry__crc32c_mulmod(crc_a, xpow_bytes(len_b)) ^ crc_b;
}

static inline uint32_t load32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t ferry_crc32c_update_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tables_once, build_tables);
    const uint8_t *p = buf;
    uint32_t r = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        r = (r >> 8) ^ table[0][(r ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint32_t lo = load32le(p) ^ r;
        uint32_t hi = load32le(p + 4);
        r = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        r = (r >> 8) ^ table[0][(r ^ *p++) & 0xff];
        len--;
    }
    return ~r;
}

bool ferry_crc32c_have_hw(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
#else
    return false;
#endif
}

typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);

static uint32_t resolve_and_update(uint32_t crc, const void *buf, size_t len);

/* Starts at the resolver; the first call (from any thread) stores the real path. Racing
 * first calls store the same value, so a relaxed store and load are enough. */
static _Atomic(crc_fn) active = resolve_and_update;

static uint32_t resolve_and_update(uint32_t crc, const void *buf, size_t len)
{
    crc_fn f = ferry_crc32c_have_hw() ? ferry_crc32c_update_hw : ferry_crc32c_update_sw;
    atomic_store_explicit(&active, f, memory_order_relaxed);
    return f(crc, buf, len);
}

uint32_t ferry_crc32c_update(uint32_t crc, const void *buf, size_t len)
{
    return atomic_load_explicit(&active, memory_order_relaxed)(crc, buf, len);
}
