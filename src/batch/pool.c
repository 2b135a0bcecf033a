/* batch/pool.c - recycled batch buffers (see pool.h). An unordered array of slots under one
 * mutex; get takes the smallest buffer that fits (best fit, at most twice the request, so a
 * small request never pins a large buffer); put keeps a buffer while the slots and the byte
 * bound allow. No allocation of its own. */
#include <malloc.h>
#include <pthread.h>
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

void *ferry__pool_get(size_t need, size_t *cap)
{
    if (need >= FERRY_POOL_MIN) {
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
            slots[best] = slots[--n_slots];
        }
        pthread_mutex_unlock(&lock);
        if (p != NULL) return p;
    }
    void *p = ferry_malloc(need);
    if (p != NULL) *cap = need;
    return p;
}

void ferry__pool_put(void *p)
{
    if (p == NULL) return;
    size_t cap = malloc_usable_size(p);
    if (cap >= FERRY_POOL_MIN && cap <= FERRY_POOL_BYTES) {
        pthread_mutex_lock(&lock);
        bool kept = n_slots < FERRY_POOL_SLOTS && pooled_bytes + cap <= FERRY_POOL_BYTES;
        if (kept) {
            slots[n_slots++] = (struct slot){p, cap};
            pooled_bytes += cap;
        }
        pthread_mutex_unlock(&lock);
        if (kept) return;
    }
    ferry_free(p);
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
