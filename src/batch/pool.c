/* batch/pool.c - recycled batch buffers (see pool.h). An array of slots, oldest first, under
 * one mutex. Requests are rounded up to size classes (8 per doubling) so that consecutive
 * batches' slightly different sizes meet; get takes the smallest pooled buffer that fits
 * (at most twice the request, so a small request never pins a large buffer); put evicts the
 * oldest buffers while the slots or the byte bound are full. No allocation of its own. */
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include "batch/pool.h"
#include "ferry/core.h"

struct slot {
    void *p;
    size_t cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[FERRY_POOL_SLOTS];
static int n_slots;
static size_t pooled_bytes;
static long long reserved; /* flows' shares (ferry__pool_reserve) */

/* The byte bound now (under the lock). */
static size_t bound(void)
{
    return reserved > 0 && (size_t)reserved < FERRY_POOL_BYTES ? (size_t)reserved
                                                                : FERRY_POOL_BYTES;
}

void ferry__pool_reserve(long long delta)
{
    pthread_mutex_lock(&lock);
    reserved += delta;
    pthread_mutex_unlock(&lock);
}

/* A request rounded up to its size class: 8 classes per doubling (at most 12.5 % more),
 * so that the slightly different sizes of consecutive batches share buffers. */
static size_t size_class(size_t need)
{
    int shift = 0;
    for (size_t v = need; v >= 16; v >>= 1) shift++;
    size_t step = (size_t)1 << shift; /* need / 16 < step <= need / 8 */
    return (need + step - 1) / step * step;
}

void *ferry__pool_get(size_t need, size_t *cap)
{
    if (need >= FERRY_POOL_MIN) {
        need = size_class(need);
        pthread_mutex_lock(&lock);
        int best = -1;
        for (int i = 0; i < n_slots; i++)
            if (slots[i].cap >= need && slots[i].cap / 2 <= need &&
                (best < 0 || slots[i].cap < slots[best].cap))
                best = i;
        void *p = NULL;
        if (best >= 0) {
            p = slots[best].p;
            *cap = slots[best].cap;
            pooled_bytes -= slots[best].cap;
            memmove(&slots[best], &slots[best + 1], (size_t)(n_slots - best - 1) * sizeof *slots);
            n_slots--;
        }
        pthread_mutex_unlock(&lock);
        if (p != NULL) return p;
    }
    void *p = ferry_malloc(need);
    if (p != NULL) *cap = need;
    return p;
}

/* Slots are kept oldest first: a full pool frees its oldest buffers to take a new one, so
 * buffers of sizes no batch asks for any more age out. */
void ferry__pool_put(void *p)
{
    if (p == NULL) return;
    size_t cap = malloc_usable_size(p);
    if (cap < FERRY_POOL_MIN || cap > FERRY_POOL_BYTES) {
        ferry_free(p);
        return;
    }
    void *evicted[FERRY_POOL_SLOTS];
    int n_evicted = 0;
    pthread_mutex_lock(&lock);
    if (cap > bound()) {
        pthread_mutex_unlock(&lock);
        ferry_free(p);
        return;
    }
    while (n_slots == FERRY_POOL_SLOTS || pooled_bytes + cap > bound()) {
        evicted[n_evicted++] = slots[0].p;
        pooled_bytes -= slots[0].cap;
        memmove(&slots[0], &slots[1], (size_t)(n_slots - 1) * sizeof *slots);
        n_slots--;
    }
    slots[n_slots++] = (struct slot){p, cap};
    pooled_bytes += cap;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n_evicted; i++)
        ferry_free(evicted[i]);
}

void ferry__pool_drain(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_slots; i++)
        ferry_free(slots[i].p);
    n_slots = 0;
    pooled_bytes = 0;
    pthread_mutex_unlock(&lock);
}

void ferry__pool_stats(int *buffers, size_t *bytes)
{
    pthread_mutex_lock(&lock);
    *buffers = n_slots;
    *bytes = pooled_bytes;
    pthread_mutex_unlock(&lock);
}
