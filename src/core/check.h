/* core/check.h - FERRY_ASSERT, the invariant check of engine code.
 *
 * For conditions that hold unless ferry itself is wrong (a queue's count never exceeds its
 * capacity, a released buffer has no data), never for bad input, which gets a
 * struct ferry_error. On (FERRY_ASSERTS: Debug builds, that is the dev, asan and tsan
 * presets, and every sanitizer build) a false condition prints the expression, file, line
 * and function to stderr and aborts; off (Release) the condition is not evaluated, so it
 * must have no side effect. */
#ifndef FERRY_CORE_CHECK_H
#define FERRY_CORE_CHECK_H

_Noreturn void ferry__assert_fail(const char *expr, const char *file, int line, const char *func);

#ifdef FERRY_ASSERTS
#define FERRY_ASSERT(cond)                                                                         \
    ((cond) ? (void)0 : ferry__assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define FERRY_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif
