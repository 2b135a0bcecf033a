/* ferry/digest.h - the batch integrity digest (DESIGN §2).
 *
 * CRC32-C over a canonical form of the batch:
 *   u64le row count, u64le column count,
 *   per column: u8 type, then each of its buffers as u64le byte length + bytes:
 *     validity  ceil(rows/8) bytes, bit 0 = first row, padding bits zero; length 0 when
 *               the column has no null (with or without a bitmap)
 *     offsets   var-width only: rows+1 int32le, rebased so the first is 0
 *     values    fixed width: rows*width bytes, null slots zeroed;
 *               bool: ceil(rows/8) bytes bitmap, padding and null bits zero;
 *               var-width: the used data bytes only (data[off[0]..off[rows]])
 *   then one byte per row: the operation.
 * It changes with row order, column order, nulls, values and operations, and with nothing
 * else (not with slicing, buffer offsets, spare capacity or bitmap padding). Allocates
 * nothing; thread-safe for distinct batches. */
#ifndef FERRY_DIGEST_H
#define FERRY_DIGEST_H

#include <stdint.h>
#include "ferry/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

uint32_t ferry_batch_digest(const struct ferry_batch *b);

#ifdef __cplusplus
}
#endif
#endif
