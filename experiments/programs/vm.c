/* What a page fault costs, from inside a program: the same source runs as a Linux process (-O2
 * for the host) and, for `touch` and `reread`, as a VINO process (wasm32-wasi, its linear memory
 * paged by the kernel). Each mode times itself with clock_gettime(CLOCK_MONOTONIC) and prints
 * one line, `ns_per_page=X pages=N` followed, on the host, by `minflt=N majflt=N` (getrusage,
 * over the timed loop only).
 *
 *   vm touch PAGES           fresh anonymous memory (mmap; malloc on wasm32), one write per
 *                            4 KiB page: first-touch faults
 *   vm uffd PAGES [one-cpu]  (host only) the same with the region registered with userfaultfd
 *                            for missing pages and a thread resolving each fault with UFFDIO_COPY
 *                            of a zeroed page: the floor for a pager in user space; `one-cpu`
 *                            keeps both threads on the CPU the program started on; without root
 *                            the region is registered for user-mode faults only (and
 *                            `user_mode_only=1` printed)
 *   vm reread PAGES PASSES   PAGES written once, then PASSES passes reading one byte per page in
 *                            order, timed (run it where memory is short of PAGES, and the pages
 *                            come back from swap); checks every byte read
 *   vm mapfile PATH cold|hot PATH mmap'd read-only, one read per page; cold: its cached pages
 *                            dropped first (on the host posix_fadvise DONTNEED, the count left
 *                            printed as `resident_before`; on VINO the bench boots a kernel with
 *                            an empty page cache), hot: read into the page cache first
 *
 * Any failure prints what failed on stderr and exits 1; a mode this build lacks exits 2. */
#define _GNU_SOURCE
#ifdef __wasm__
#define _WASI_EMULATED_MMAN /* the SDK's mmap: a VINO file mapped by the kernel */
#endif
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef __wasm__
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#endif

#define PAGE 4096L

static void fail(const char *what) {
    fprintf(stderr, "vm: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Faults taken so far by this process (0 where there is no getrusage). */
struct faults {
    long minflt, majflt;
};

static struct faults faults(void) {
    struct faults f = {0, 0};
#ifndef __wasm__
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        fail("getrusage");
    f.minflt = ru.ru_minflt;
    f.majflt = ru.ru_majflt;
#endif
    return f;
}

/* The result line: time and faults between `t0`/`f0` and now, per page. */
static void report(double t0, struct faults f0, long pages, const char *extra) {
    double t = now() - t0;
    struct faults f = faults();
    printf("ns_per_page=%.1f pages=%ld", t * 1e9 / (double)pages, pages);
#ifndef __wasm__
    printf(" minflt=%ld majflt=%ld", f.minflt - f0.minflt, f.majflt - f0.majflt);
#else
    (void)f;
#endif
    printf("%s\n", extra);
}

/* `pages` pages of fresh memory, none touched yet. */
static char *fresh(long pages) {
#ifdef __wasm__
    char *p = aligned_alloc(PAGE, (size_t)(pages * PAGE));
    if (!p)
        fail("aligned_alloc");
#else
    char *p = mmap(NULL, (size_t)(pages * PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("mmap");
#endif
    return p;
}

static void touch(long pages) {
    volatile char *p = fresh(pages);
    struct faults f0 = faults();
    double t0 = now();
    for (long i = 0; i < pages; i++)
        p[i * PAGE] = 1;
    report(t0, f0, pages, "");
}

static void reread(long pages, long passes) {
    volatile char *p = fresh(pages);
    for (long i = 0; i < pages; i++)
        p[i * PAGE] = (char)(i % 251 + 1);
    struct faults f0 = faults();
    double t0 = now();
    for (long pass = 0; pass < passes; pass++)
        for (long i = 0; i < pages; i++)
            if (p[i * PAGE] != (char)(i % 251 + 1)) {
                fprintf(stderr, "vm: page %ld read back wrong\n", i);
                exit(1);
            }
    report(t0, f0, pages * passes, "");
}

#ifdef __wasm__

static int unsupported(const char *what) {
    fprintf(stderr, "vm: %s not supported\n", what);
    return 2;
}

#else

struct pager {
    int uffd, stop;
    char *zero;
};

/* Resolves every missing-page fault with a copy of the zeroed page until `stop` is readable. */
static void *serve(void *arg) {
    struct pager *pg = arg;
    struct pollfd fds[2] = {{.fd = pg->uffd, .events = POLLIN}, {.fd = pg->stop, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            fail("poll");
        }
        if (fds[1].revents)
            return NULL;
        struct uffd_msg msg;
        ssize_t r = read(pg->uffd, &msg, sizeof msg);
        if (r < 0 && errno == EAGAIN)
            continue;
        if (r != sizeof msg)
            fail("reading a userfaultfd event");
        if (msg.event != UFFD_EVENT_PAGEFAULT)
            continue;
        struct uffdio_copy copy = {
            .dst = msg.arg.pagefault.address & ~(uint64_t)(PAGE - 1),
            .src = (uint64_t)(uintptr_t)pg->zero,
            .len = PAGE,
            .mode = 0,
        };
        if (ioctl(pg->uffd, UFFDIO_COPY, &copy) != 0 && errno != EEXIST)
            fail("UFFDIO_COPY");
    }
}

/* Keeps this process (and the threads it makes) on the CPU it is running on. */
static void stay_on_this_cpu(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpu = sched_getcpu();
    if (cpu < 0)
        fail("sched_getcpu");
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fail("sched_setaffinity");
}

static void uffd(long pages, int one_cpu) {
    if (one_cpu)
        stay_on_this_cpu();
    /* Root may take kernel-mode faults too; anyone else (vm.unprivileged_userfaultfd = 0) only
     * user-mode ones, which are all this loop makes. */
    int user_mode_only = 0;
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EPERM) {
        user_mode_only = 1;
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    }
    if (fd < 0)
        fail("userfaultfd");
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(fd, UFFDIO_API, &api) != 0)
        fail("UFFDIO_API");
    char *p = fresh(pages);
    struct uffdio_register reg = {
        .range = {.start = (uint64_t)(uintptr_t)p, .len = (uint64_t)(pages * PAGE)},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0)
        fail("UFFDIO_REGISTER");
    int stop[2];
    if (pipe(stop) != 0)
        fail("pipe");
    struct pager pg = {.uffd = fd, .stop = stop[0], .zero = fresh(1)};
    pg.zero[0] = 0; /* the source page is mapped before the timing starts */
    pthread_t thread;
    if ((errno = pthread_create(&thread, NULL, serve, &pg)) != 0)
        fail("pthread_create");
    volatile char *v = p;
    struct faults f0 = faults();
    double t0 = now();
    for (long i = 0; i < pages; i++)
        v[i * PAGE] = 1;
    report(t0, f0, pages, user_mode_only ? " user_mode_only=1" : "");
    if (write(stop[1], "x", 1) != 1)
        fail("write");
    pthread_join(thread, NULL);
}

/* Pages of `len` bytes at `p` now in the page cache. */
#endif

static long resident(void *p, size_t len) {
#ifdef __wasm__
    (void)p, (void)len;
    return 0; /* no mincore: the kernel's counts tell */
#else
    long n = (long)((len + PAGE - 1) / PAGE), count = 0;
    unsigned char *vec = malloc((size_t)n);
    if (!vec || mincore(p, len, vec) != 0)
        fail("mincore");
    for (long i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
#endif
}

static void mapfile(const char *path, const char *how) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        fail(path);
    size_t len = (size_t)st.st_size;
    long pages = (long)(len / PAGE);
    if (pages == 0) {
        fprintf(stderr, "vm: %s holds no whole page\n", path);
        exit(1);
    }
    int cold = strcmp(how, "cold") == 0;
    if (cold) {
#ifndef __wasm__
        if ((errno = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) != 0)
            fail("posix_fadvise");
#endif
    } else {
        static char buf[1 << 16];
        while (read(fd, buf, sizeof buf) > 0) {
        }
    }
    char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        fail("mmap");
    char extra[64];
    snprintf(extra, sizeof extra, " resident_before=%ld", resident(p, len));
    volatile char *v = p;
    unsigned sum = 0;
    struct faults f0 = faults();
    double t0 = now();
    for (long i = 0; i < pages; i++)
        sum += (unsigned char)v[i * PAGE];
    report(t0, f0, pages, extra);
    if (sum == 0)
        fprintf(stderr, "vm: %s reads as zeros\n", path);
    munmap(p, len);
    close(fd);
}

static long count(const char *s) {
    char *end;
    long n = strtol(s, &end, 10);
    if (*end || n <= 0) {
        fprintf(stderr, "vm: %s is not a positive count\n", s);
        exit(1);
    }
    return n;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "touch") == 0 && argc == 3)
        touch(count(argv[2]));
    else if (strcmp(mode, "reread") == 0 && argc == 4)
        reread(count(argv[2]), count(argv[3]));
#ifdef __wasm__
    else if (strcmp(mode, "uffd") == 0)
        return unsupported("userfaultfd");
#else
    else if (strcmp(mode, "uffd") == 0 && (argc == 3 || (argc == 4 && strcmp(argv[3], "one-cpu") == 0)))
        uffd(count(argv[2]), argc == 4);
#endif
    else if (strcmp(mode, "mapfile") == 0 && argc == 4 &&
             (strcmp(argv[3], "cold") == 0 || strcmp(argv[3], "hot") == 0))
        mapfile(argv[2], argv[3]);
    else {
        fprintf(stderr, "usage: vm touch PAGES | uffd PAGES [one-cpu] | reread PAGES PASSES | mapfile PATH cold|hot\n");
        return 1;
    }
    return 0;
}
