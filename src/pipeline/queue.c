/* pipeline/queue.c - bounded blocking batch queue (see queue.h). A ring of pointers under
 * one mutex and two condition variables; no allocation after creation. The time spent
 * blocked is summed per side; the clock is read only when a call has to wait. */
#include <pthread.h>
#include "core/check.h"
#include "ferry/core.h"
#include "pipeline/queue.h"

struct ferry_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_full;
    pthread_cond_t not_empty;
    struct ferry_batch **ring;
    int capacity, head, count, high_water;
    int64_t push_wait_us, pop_wait_us;
    bool closed;
    int close_code;
};

struct ferry_queue *ferry_queue_new(int capacity)
{
    if (capacity < 1) capacity = 1;
    struct ferry_queue *q = ferry_calloc(1, sizeof *q);
    if (q == NULL) return NULL;
    q->ring = ferry_calloc((size_t)capacity, sizeof *q->ring);
    if (q->ring == NULL) {
        ferry_free(q);
        return NULL;
    }
    q->capacity = capacity;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_full, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    return q;
}

void ferry_queue_free(struct ferry_queue *q)
{
    if (q == NULL) return;
    ferry_queue_discard(q);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    ferry_free(q->ring);
    ferry_free(q);
}

int ferry_queue_push(struct ferry_queue *q, struct ferry_batch *b)
{
    pthread_mutex_lock(&q->lock);
    if (q->count == q->capacity && !q->closed) {
        int64_t t0 = ferry_now_mono_us();
        while (q->count == q->capacity && !q->closed) pthread_cond_wait(&q->not_full, &q->lock);
        q->push_wait_us += ferry_now_mono_us() - t0;
    }
    if (q->closed) {
        int code = q->close_code ? q->close_code : FERRY_ECANCELED;
        pthread_mutex_unlock(&q->lock);
        return code;
    }
    FERRY_ASSERT(q->count < q->capacity);
    q->ring[(q->head + q->count) % q->capacity] = b;
    q->count++;
    if (q->count > q->high_water) q->high_water = q->count;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
    return FERRY_OK;
}

struct ferry_batch *ferry_queue_pop(struct ferry_queue *q)
{
    pthread_mutex_lock(&q->lock);
    if (q->count == 0 && !q->closed) {
        int64_t t0 = ferry_now_mono_us();
        while (q->count == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->lock);
        q->pop_wait_us += ferry_now_mono_us() - t0;
    }
    struct ferry_batch *b = NULL;
    if (q->count > 0) {
        b = q->ring[q->head];
        q->ring[q->head] = NULL;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return b;
}

void ferry_queue_close(struct ferry_queue *q, int code)
{
    pthread_mutex_lock(&q->lock);
    if (!q->closed) {
        q->closed = true;
        q->close_code = code;
    }
    pthread_cond_broadcast(&q->not_full);
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

void ferry_queue_discard(struct ferry_queue *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->count > 0) {
        ferry_batch_unref(q->ring[q->head]);
        q->ring[q->head] = NULL;
        q->head = (q->head + 1) % q->capacity;
        q->count--;
    }
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->lock);
}

int ferry_queue_length(struct ferry_queue *q)
{
    pthread_mutex_lock(&q->lock);
    int n = q->count;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int ferry_queue_high_water(struct ferry_queue *q)
{
    pthread_mutex_lock(&q->lock);
    int n = q->high_water;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void ferry_queue_waits(struct ferry_queue *q, int64_t *push_wait_us, int64_t *pop_wait_us)
{
    pthread_mutex_lock(&q->lock);
    *push_wait_us = q->push_wait_us;
    *pop_wait_us = q->pop_wait_us;
    pthread_mutex_unlock(&q->lock);
}
