/* What spawning, pipes and signals' neighbours cost, from inside a program: the same source runs
 * as a VINO process (wasm32-wasi, the SDK's posix_spawn on the kernel's process calls) and as a
 * Linux process (-O2 for the host), and times itself with clock_gettime(CLOCK_MONOTONIC).
 *
 *   procs spawn N CHILD      posix_spawn CHILD (a program that returns 0) and waitpid it, N
 *                            times after a warm-up: prints `spawn_us` per spawn and wait
 *   procs pipe BYTES         64 KiB writes into a pipe to a child (this program, part `sink`)
 *                            that reads and discards them: prints `pipe_gbps`, from the first
 *                            write to the child's exit
 *   procs pingpong N         one byte to a child (part `echo`) and back over two pipes, N round
 *                            trips after a warm-up: prints `pingpong_us` per round trip
 *
 * The children are this program (argv[0] is its path), given the part to play. Any failure
 * prints what failed on stderr and exits 1. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)
#define WARMUP 20

static const char *self;
static char block[BLOCK];

static void fail(const char *what) {
    fprintf(stderr, "procs: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Spawns `path` with `argv`, its stdin `in` and stdout `out` (-1: the parent's), every other
 * end of the pipes closed in it. */
static pid_t start(const char *path, char **argv, int in, int out, const int *close_fds, int nclose) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in >= 0)
        posix_spawn_file_actions_adddup2(&fa, in, 0);
    if (out >= 0)
        posix_spawn_file_actions_adddup2(&fa, out, 1);
    for (int i = 0; i < nclose; i++)
        posix_spawn_file_actions_addclose(&fa, close_fds[i]);
    pid_t pid;
    int r = posix_spawn(&pid, path, &fa, NULL, argv, NULL);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0) {
        errno = r;
        fail("posix_spawn");
    }
    return pid;
}

/* Waits for `pid`, which must exit 0. */
static void reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid)
        fail("waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "procs: child %d ended with status %#x\n", (int)pid, status);
        exit(1);
    }
}

static void spawn_loop(long n, const char *child) {
    char *argv[] = {(char *)child, NULL};
    for (int i = 0; i < WARMUP; i++)
        reap(start(child, argv, -1, -1, NULL, 0));
    double t = now();
    for (long i = 0; i < n; i++)
        reap(start(child, argv, -1, -1, NULL, 0));
    printf("spawn_us %.3f\n", (now() - t) * 1e6 / (double)n);
}

static void write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w <= 0)
            fail("write");
        buf += w;
        len -= (size_t)w;
    }
}

static void pipe_throughput(long long bytes) {
    int p[2];
    if (pipe(p) != 0)
        fail("pipe");
    char count[32];
    snprintf(count, sizeof count, "%lld", bytes);
    char *argv[] = {(char *)self, "sink", count, NULL};
    int ends[] = {p[0], p[1]};
    memset(block, 'x', sizeof block);
    double t = now();
    pid_t pid = start(self, argv, p[0], -1, ends, 2);
    close(p[0]);
    for (long long sent = 0; sent < bytes; sent += BLOCK)
        write_all(p[1], block, bytes - sent < BLOCK ? (size_t)(bytes - sent) : BLOCK);
    close(p[1]);
    reap(pid);
    printf("pipe_gbps %.4f\n", (double)bytes / (now() - t) / 1e9);
}

/* Reads stdin to its end; exits 0 if it held `expected` bytes. */
static int sink(long long expected) {
    long long got = 0;
    ssize_t r;
    while ((r = read(0, block, sizeof block)) > 0)
        got += r;
    if (r < 0)
        fail("read");
    return got == expected ? 0 : 1;
}

static void round_trip(int to, int from) {
    char c = 'p';
    if (write(to, &c, 1) != 1)
        fail("write");
    if (read(from, &c, 1) != 1)
        fail("read");
}

static void pingpong(long n) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        fail("pipe");
    char *argv[] = {(char *)self, "echo", NULL};
    int ends[] = {down[0], down[1], up[0], up[1]};
    pid_t pid = start(self, argv, down[0], up[1], ends, 4);
    close(down[0]);
    close(up[1]);
    for (int i = 0; i < WARMUP; i++)
        round_trip(down[1], up[0]);
    double t = now();
    for (long i = 0; i < n; i++)
        round_trip(down[1], up[0]);
    double us = (now() - t) * 1e6 / (double)n;
    close(down[1]);
    reap(pid);
    close(up[0]);
    printf("pingpong_us %.3f\n", us);
}

/* Sends back every byte of stdin until its end. */
static int echo(void) {
    char c;
    ssize_t r;
    while ((r = read(0, &c, 1)) == 1)
        if (write(1, &c, 1) != 1)
            fail("write");
    return r == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    self = argv[0];
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "spawn") == 0 && argc == 4)
        spawn_loop(atol(argv[2]), argv[3]);
    else if (strcmp(mode, "pipe") == 0 && argc == 3)
        pipe_throughput(atoll(argv[2]));
    else if (strcmp(mode, "pingpong") == 0 && argc == 3)
        pingpong(atol(argv[2]));
    else if (strcmp(mode, "sink") == 0 && argc == 3)
        return sink(atoll(argv[2]));
    else if (strcmp(mode, "echo") == 0)
        return echo();
    else {
        fprintf(stderr, "usage: procs spawn N CHILD | pipe BYTES | pingpong N\n");
        return 2;
    }
    return 0;
}
