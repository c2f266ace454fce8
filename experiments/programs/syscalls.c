/* syscalls.c: what a system call costs a VINO process, timed from inside (E10,
 * `vino bench syscalls`).
 *
 *     syscalls NULL_CALLS READS PATH
 *
 * Times NULL_CALLS calls of the null system call (`vino_null`, which does nothing) and READS
 * reads of 4 KiB at offset 0 of PATH (pread: cached after the first), each loop between two
 * clock_gettime(CLOCK_MONOTONIC), after a warm-up, and prints the nanoseconds per call:
 *
 *     null NS
 *     pread NS
 *
 * Built for wasm32-wasi with vino_process.h (`vino build`). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <vino_process.h>

#define BLOCK 4096
#define WARM 1000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static char buf[BLOCK];

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: syscalls NULL_CALLS READS PATH\n");
        return 2;
    }
    long calls = atol(argv[1]), reads = atol(argv[2]);
    if (calls <= 0 || reads <= 0) {
        fprintf(stderr, "syscalls: counts must be positive\n");
        return 2;
    }
    int fd = open(argv[3], O_RDONLY);
    if (fd < 0) {
        perror(argv[3]);
        return 1;
    }
    for (int i = 0; i < WARM; i++) {
        if (vino_null() != 0) {
            fprintf(stderr, "syscalls: the null call failed\n");
            return 1;
        }
        if (pread(fd, buf, BLOCK, 0) != BLOCK) {
            fprintf(stderr, "syscalls: %s is shorter than %d bytes\n", argv[3], BLOCK);
            return 1;
        }
    }
    /* The sum keeps every result used; a failing call shows as a sum other than 0. */
    long failed = 0;
    double t0 = now_ns();
    for (long i = 0; i < calls; i++)
        failed += vino_null();
    double t1 = now_ns();
    for (long i = 0; i < reads; i++)
        failed += pread(fd, buf, BLOCK, 0) != BLOCK;
    double t2 = now_ns();
    if (failed != 0) {
        fprintf(stderr, "syscalls: %ld calls failed\n", failed);
        return 1;
    }
    printf("null %.2f\n", (t1 - t0) / (double)calls);
    printf("pread %.2f\n", (t2 - t1) / (double)reads);
    close(fd);
    return 0;
}
