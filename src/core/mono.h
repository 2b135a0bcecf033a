/* core/mono.h - condition variables timed on the monotonic clock (ferry_now_mono_us's), so
 * that a wait's deadline does not move when the wall clock is set, and the deadline `us`
 * microseconds from now on that clock for pthread_cond_timedwait. Header only; used by the
 * bus, the tracker, the dispatcher, the runner and the server. */
#ifndef FERRY_CORE_MONO_H
#define FERRY_CORE_MONO_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include "ferry/core.h"

static inline void ferry__cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

static inline struct timespec ferry__mono_after_us(int64_t us)
{
    int64_t t = ferry_now_mono_us() + us;
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000), .tv_nsec = (long)(t % 1000000) * 1000};
    return ts;
}

#endif
