/* batch/pool.h - recycled batch buffers.
 *
 * A released batch's column buffers (ferry_batch_unref) are kept here and handed to the
 * next batch a row writer closes (builder.c alloc_next), instead of going back to malloc
 * and being asked for again a moment later: no page faults and no heap growth per batch,
 * and a heap that does not fragment across the reader and writer threads.
 *
 * Process-wide and thread-safe: one mutex, taken once per buffer, never per row. Keeps at
 * most FERRY_POOL_SLOTS buffers and FERRY_POOL_BYTES bytes, or while flows run the bytes
 * they reserved (one batch per reader each: what the next batches take), if less; the
 * most recently released
 * (docs/pipeline-file.md counts them in the peak memory); a buffer under FERRY_POOL_MIN
 * bytes or over FERRY_POOL_BYTES is freed. A buffer's size is what the allocator says it
 * holds (malloc_usable_size), never what a caller claims. */
#ifndef FERRY_BATCH_POOL_H
#define FERRY_BATCH_POOL_H

#include <stddef.h>

#define FERRY_POOL_SLOTS 64
#define FERRY_POOL_BYTES ((size_t)8 << 20)
#define FERRY_POOL_MIN ((size_t)16 << 10)

/* A buffer of at least `need` bytes, its size in *cap: a pooled one of at most twice
 * `need` (the smallest), else a new ferry_malloc'd one (from FERRY_POOL_MIN bytes on, of
 * `need` rounded up to its size class, at most 12.5 % more). NULL when out of memory. The
 * contents are undefined. */
void *ferry__pool_get(size_t need, size_t *cap);
/* Takes p (a ferry_malloc'd buffer, or NULL): pooled, or freed. */
void ferry__pool_put(void *p);
/* A running flow reserves (delta > 0) and at its end returns (delta < 0) its share of the
 * pool's bound: with anything reserved the pool keeps at most the reserved bytes (and never
 * more than FERRY_POOL_BYTES), so that a writer ahead of its reader does not park more
 * released batches than the readers will take. */
void ferry__pool_reserve(long long delta);
/* Frees every pooled buffer (tests; a process may also just exit). */
void ferry__pool_drain(void);
/* Buffers and bytes pooled now. */
void ferry__pool_stats(int *buffers, size_t *bytes);

#endif
