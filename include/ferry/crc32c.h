/* ferry/crc32c.h - CRC32-C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * ferry_crc32c_update() continues a CRC: start with 0, feed buffers in order; the
 * value after the last buffer is the CRC of their concatenation (RFC 3720 convention:
 * ferry_crc32c_update(0, "123456789", 9) == 0xE3069283). The hardware path (SSE4.2
 * crc32 over three parallel streams joined by a carry-less-multiply combine) is chosen
 * at run time when the CPU has it; the portable path is slicing-by-8 tables. Both are
 * thread-safe and give identical results. */
#ifndef FERRY_CRC32C_H
#define FERRY_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

uint32_t ferry_crc32c_update(uint32_t crc, const void *buf, size_t len);
static inline uint32_t ferry_crc32c(const void *buf, size_t len)
{
    return ferry_crc32c_update(0, buf, len);
}

/* The two implementations, for tests and benchmarks. */
uint32_t ferry_crc32c_update_sw(uint32_t crc, const void *buf, size_t len);
uint32_t ferry_crc32c_update_hw(uint32_t crc, const void *buf, size_t len); /* needs have_hw */
bool ferry_crc32c_have_hw(void);

/* crc of A||B from crc(A), crc(B) and len(B), in O(log len) without the data. */
uint32_t ferry_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

#ifdef __cplusplus
}
#endif
#endif
