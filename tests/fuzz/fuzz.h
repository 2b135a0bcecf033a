/* tests/fuzz/fuzz.h - what every fuzz target shares: the libFuzzer entry point's prototype and
 * a memory file for targets whose code reads from a path.
 *
 * Each tests/fuzz/fuzz_<target>.c defines LLVMFuzzerTestOneInput. It is linked twice: with
 * libFuzzer (-DFERRY_FUZZ=ON, clang) to search, and with tests/fuzz/replay.c (every build) to
 * replay tests/fuzz/corpus/<target>/ as the CTest test fuzz/<target>. A target must not leak,
 * must not keep state between inputs that changes its behaviour, and must accept any bytes. */
#ifndef FERRY_TESTS_FUZZ_H
#define FERRY_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bytes as a file: a memfd made once, rewritten per input; *path names it. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t len)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("ferry-fuzz", 0);
    if (fd < 0) return -1;
    if (ftruncate(fd, 0) != 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return 0;
}

#endif
