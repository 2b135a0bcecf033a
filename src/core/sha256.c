/* core/sha256.c - SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104).
 *
 * Owns the ferry_sha256_* state machine and ferry_hmac_sha256(). Calls only libc. Called
 * by pipeline version hashes, the hash transform and tests. Byte order is explicit
 * (big-endian words, big-endian bit length) so the code does not depend on the host. */
#include <string.h>
#include "ferry/core.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
               (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] +
                      w[t];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void ferry_sha256_init(struct ferry_sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->fill = 0;
}

void ferry_sha256_update(struct ferry_sha256 *s, const void *p, size_t n)
{
    if (n == 0) return;
    const uint8_t *in = p;
    s->len += n;
    if (s->fill > 0) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->block + s->fill, in, take);
        s->fill += take;
        in += take;
        n -= take;
        if (s->fill < 64) return;
        compress(s->h, s->block);
        s->fill = 0;
    }
    while (n >= 64) {
        compress(s->h, in);
        in += 64;
        n -= 64;
    }
    if (n > 0) memcpy(s->block, in, n);
    s->fill = n;
}

void ferry_sha256_final(struct ferry_sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->len * 8;
    s->block[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->block + s->fill, 0, 64 - s->fill);
        compress(s->h, s->block);
        s->fill = 0;
    }
    memset(s->block + s->fill, 0, 56 - s->fill);
    for (int i = 0; i < 8; i++) s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(s->h, s->block);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
    /* The state held key-derived material for HMAC: leave nothing behind. */
    explicit_bzero(s, sizeof *s);
}

void ferry_sha256_hex(const void *p, size_t n, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    struct ferry_sha256 s;
    uint8_t d[32];
    ferry_sha256_init(&s);
    ferry_sha256_update(&s, p, n);
    ferry_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}

void ferry_hmac_sha256(const void *key, size_t klen, const void *p, size_t n, uint8_t out[32])
{
    uint8_t k0[64] = {0};
    struct ferry_sha256 s;
    if (klen > 64) {
        ferry_sha256_init(&s);
        ferry_sha256_update(&s, key, klen);
        ferry_sha256_final(&s, k0);
    } else if (klen > 0) {
        memcpy(k0, key, klen);
    }
    uint8_t pad[64], inner[32];
    for (int i = 0; i < 64; i++) pad[i] = k0[i] ^ 0x36;
    ferry_sha256_init(&s);
    ferry_sha256_update(&s, pad, 64);
    ferry_sha256_update(&s, p, n);
    ferry_sha256_final(&s, inner);
    for (int i = 0; i < 64; i++) pad[i] = k0[i] ^ 0x5c;
    ferry_sha256_init(&s);
    ferry_sha256_update(&s, pad, 64);
    ferry_sha256_update(&s, inner, 32);
    ferry_sha256_final(&s, out);
    explicit_bzero(k0, sizeof k0);
    explicit_bzero(pad, sizeof pad);
    explicit_bzero(inner, sizeof inner);
}
