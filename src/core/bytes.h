/* core/bytes.h - big-endian (network order) integers read from and written to bytes: the
 * PostgreSQL wire and binary COPY formats, ferry's own length-prefixed records, TZif files,
 * SQLite's file header. Header only, no alignment assumed. */
#ifndef FERRY_CORE_BYTES_H
#define FERRY_CORE_BYTES_H

#include <stdint.h>

static inline uint16_t ferry__be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t ferry__be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t ferry__be64(const uint8_t *p)
{
    return (uint64_t)ferry__be32(p) << 32 | ferry__be32(p + 4);
}

static inline void ferry__put_be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

#endif
