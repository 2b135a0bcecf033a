/* core/crc32c_impl.h - what the portable and the x86 CRC32-C files share (private).
 *
 * Polynomials are in the reflected representation used by CRC32-C everywhere: bit 31 of
 * a uint32_t is the coefficient of x^0, bit 0 that of x^31. The hardware file needs
 * powers of x modulo P for its stream-combine constants; the portable file computes
 * them, so both agree on one definition of the field. */
#ifndef FERRY_CORE_CRC32C_IMPL_H
#define FERRY_CORE_CRC32C_IMPL_H

#include <stdint.h>

#define FERRY__CRC32C_POLY 0x82F63B78u /* Castagnoli, reflected */

/* a(x) * b(x) mod P. */
uint32_t ferry__crc32c_mulmod(uint32_t a, uint32_t b);
/* x^n mod P, in O(log n) multiplications. */
uint32_t ferry__crc32c_xpow(uint64_t n);

#endif
