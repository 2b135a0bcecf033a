/* core/crc32c_x86.c - CRC32-C with the SSE4.2 crc32 instruction and a PCLMULQDQ join.
 *
 * Owns ferry_crc32c_update_hw(); compiled with -msse4.2 -mpclmul (CMakeLists.txt) and only
 * ever called after crc32c.c checked the CPU. Calls crc32c.c for powers of x. Called by
 * the dispatch in crc32c.c, by tests and by bench/bench_crc.c.
 *
 * Why three streams: crc32 has a latency of 3 cycles but issues once per cycle, so one
 * dependency chain uses a third of the unit. A block of 3*B bytes is split into three
 * independent chains (the first continues the running register, the other two start at
 * zero), and their registers are joined with linearity:
 *
 *   reg(A||B||C) = reg(A)*x^(16B) + reg0(B)*x^(8B) + reg0(C)          (mod P)
 *
 * A shift by a fixed n bytes is one carry-less multiply by K = x^(8n-33) mod P: the
 * 63-bit product read as crc32 input is multiplied by x^32 by the instruction and by one
 * more x by the bit reflection, so crc32_u64(0, clmul(r, K)) = r*x^(8n) mod P. Both
 * shifted registers go through one crc32_u64 since it is linear in its input.
 *
 * Block sizes come in tiers (4096, 512, 64 bytes per stream) so that medium buffers keep
 * three chains busy too; whatever is left goes through one 8-byte chain, then bytes. */
#include <pthread.h>
#include <string.h>
#include "core/crc32c_impl.h"
#include "ferry/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#include <wmmintrin.h>

struct tier {
    size_t block;    /* bytes per stream */
    uint64_t k_one;  /* x^(8*block - 33) mod P: shifts a register past one block */
    uint64_t k_two;  /* x^(16*block - 33) mod P: past two blocks */
};

static struct tier tiers[3] = {{4096, 0, 0}, {512, 0, 0}, {64, 0, 0}};
static pthread_once_t tiers_once = PTHREAD_ONCE_INIT;

static void build_tiers(void)
{
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
        tiers[i].k_one = ferry__crc32c_xpow((uint64_t)tiers[i].block * 8 - 33);
        tiers[i].k_two = ferry__crc32c_xpow((uint64_t)tiers[i].block * 16 - 33);
    }
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* unaligned-safe; compiles to one mov */
    return v;
}

static inline uint64_t clmul(uint32_t a, uint64_t k)
{
    __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)a), _mm_cvtsi64_si128((long long)k),
                                        0x00);
    return (uint64_t)_mm_cvtsi128_si64(prod);
}

/* One round over 3*block bytes; `block` is a constant at each call site after inlining,
 * so the three chains unroll. */
static inline __attribute__((always_inline)) uint32_t
three_streams(uint32_t r, const uint8_t *p, const struct tier *t, size_t block)
{
    uint64_t r0 = r, r1 = 0, r2 = 0;
    for (size_t i = 0; i < block; i += 8) {
        r0 = _mm_crc32_u64(r0, load64(p + i));
        r1 = _mm_crc32_u64(r1, load64(p + block + i));
        r2 = _mm_crc32_u64(r2, load64(p + 2 * block + i));
    }
    uint64_t joined = clmul((uint32_t)r0, t->k_two) ^ clmul((uint32_t)r1, t->k_one);
    return (uint32_t)(_mm_crc32_u64(0, joined) ^ r2);
}

uint32_t ferry_crc32c_update_hw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t r = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        r = _mm_crc32_u8(r, *p++);
        len--;
    }
    if (len >= 3 * 64) {
        pthread_once(&tiers_once, build_tiers);
        while (len >= 3 * 4096) {
            r = three_streams(r, p, &tiers[0], 4096);
            p += 3 * 4096;
            len -= 3 * 4096;
        }
        while (len >= 3 * 512) {
            r = three_streams(r, p, &tiers[1], 512);
            p += 3 * 512;
            len -= 3 * 512;
        }
        while (len >= 3 * 64) {
            r = three_streams(r, p, &tiers[2], 64);
            p += 3 * 64;
            len -= 3 * 64;
        }
    }
    uint64_t r64 = r;
    while (len >= 8) {
        r64 = _mm_crc32_u64(r64, load64(p));
        p += 8;
        len -= 8;
    }
    r = (uint32_t)r64;
    while (len > 0) {
        r = _mm_crc32_u8(r, *p++);
        len--;
    }
    return ~r;
}

#else /* not x86-64: ferry_crc32c_have_hw() is false, so this is never chosen */

uint32_t ferry_crc32c_update_hw(uint32_t crc, const void *buf, size_t len)
{
    return ferry_crc32c_update_sw(crc, buf, len);
}

#endif
