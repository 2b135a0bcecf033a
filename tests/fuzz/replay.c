/* tests/fuzz/replay.c - replays fuzz corpora without libFuzzer (any compiler, every build).
 *
 *   fuzz_<target>_replay DIR_OR_FILE...
 *
 * Feeds every regular file (directories one level deep) to LLVMFuzzerTestOneInput, one at a
 * time, and prints how many it ran. A crash, a sanitizer report or a leak fails the test;
 * an empty corpus fails too (a replay that runs nothing proves nothing). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    /* An exact-size copy, so that ASan catches a read one byte past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) == 0) ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (d == NULL) {
            perror(argv[i]);
            return 1;
        }
        char **names = NULL;
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, sizeof *names * (size_t)(n + 1));
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp);
        for (int k = 0; k < n; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode) && run_file(names[k]) == 0) ran++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs\n", ran);
    return ran > 0 ? 0 : 1;
}
