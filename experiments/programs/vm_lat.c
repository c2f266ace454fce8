/* Another user's fault latency beside hostile neighbours (`vino bench vm-latency`): built for
 * wasm32-wasi with the SDK and run as VINO processes whose memory the kernel pages. Times are
 * clock_gettime(CLOCK_MONOTONIC) around single-page touches.
 *
 *   vm_lat victim PAGES  PAGES pages touched once in descending order, each touch timed (a
 *                        first-touch fault of one page: the default's cluster fills only the
 *                        untouched pages after the one touched, and those are touched already);
 *                        then the half touched first re-read in descending order, each read timed
 *                        (with PAGES at least 4 times the resident limit, a swap-in of one page:
 *                        the pages after it are back already); checks every byte read. Prints
 *                        `first_n=N first_p50_ns=X first_p99_ns=X first_max_ns=X` and the same
 *                        for `swap_`.
 *   vm_lat hog PAGES     writes one byte per page over PAGES pages, pass after pass, as fast as
 *                        it can, until it is killed.
 *
 * Any failure prints what failed on stderr and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 4096L

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static char *fresh(long pages) {
    char *p = aligned_alloc(PAGE, (size_t)(pages * PAGE));
    if (!p) {
        fprintf(stderr, "vm_lat: aligned_alloc of %ld pages failed\n", pages);
        exit(1);
    }
    return p;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The `q`-quantile of `n` sorted samples (nearest rank). */
static uint64_t quantile(const uint64_t *s, long n, double q) {
    long i = (long)(q * (double)n + 0.999999) - 1;
    return s[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static void summary(const char *kind, uint64_t *s, long n) {
    qsort(s, (size_t)n, sizeof *s, by_value);
    printf(" %s_n=%ld %s_p50_ns=%llu %s_p99_ns=%llu %s_max_ns=%llu", kind, n, kind,
           (unsigned long long)quantile(s, n, 0.5), kind, (unsigned long long)quantile(s, n, 0.99), kind,
           (unsigned long long)s[n - 1]);
}

static char mark(long page) {
    return (char)(page % 251 + 1);
}

static void victim(long pages) {
    volatile char *p = fresh(pages);
    uint64_t *first = malloc((size_t)pages * sizeof *first);
    uint64_t *swap = malloc((size_t)(pages / 2) * sizeof *swap);
    if (!first || !swap) {
        fprintf(stderr, "vm_lat: no memory for the samples\n");
        exit(1);
    }
    for (long i = pages - 1; i >= 0; i--) {
        uint64_t t = now_ns();
        p[i * PAGE] = mark(i);
        first[pages - 1 - i] = now_ns() - t;
    }
    long n = 0;
    for (long i = pages - 1; i >= pages - pages / 2; i--) {
        uint64_t t = now_ns();
        char got = p[i * PAGE];
        swap[n++] = now_ns() - t;
        if (got != mark(i)) {
            fprintf(stderr, "vm_lat: page %ld read back wrong\n", i);
            exit(1);
        }
    }
    printf("latency");
    summary("first", first, pages);
    summary("swap", swap, n);
    printf("\n");
}

static void hog(long pages) {
    volatile char *p = fresh(pages);
    for (long pass = 0;; pass++)
        for (long i = 0; i < pages; i++)
            p[i * PAGE] = (char)(pass + i + 1);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    long pages = argc == 3 ? strtol(argv[2], NULL, 10) : 0;
    if (pages < 2) {
        fprintf(stderr, "usage: vm_lat victim PAGES | hog PAGES\n");
        return 1;
    }
    if (strcmp(mode, "victim") == 0)
        victim(pages);
    else if (strcmp(mode, "hog") == 0)
        hog(pages);
    else {
        fprintf(stderr, "usage: vm_lat victim PAGES | hog PAGES\n");
        return 1;
    }
    return 0;
}
