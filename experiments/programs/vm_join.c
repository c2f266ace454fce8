/* The Wisconsin join of E4 (Small 1998, 7.3.3 and 7.7.1) with its relations in the program's own
 * memory: the same source runs as a Linux process (-O2 for the host, in a memory cgroup with
 * swap) and as a VINO process (wasm32-wasi, its linear memory paged by the kernel within its
 * resident limit, swapped to VINO's file system).
 *
 *   vm_join TUPLES LOOKAHEAD
 *
 * Two relations A and B of TUPLES Wisconsin tuples each (208 bytes, 19 whole tuples to a 4 KiB
 * page, as experiments/src/wisconsin.rs lays them out; unique1 a permutation drawn as
 * `Relation::generate` draws it, A with seed 1998, B with seed 1999), stored in unique2 order,
 * and a nonclustered index on unique1 for each. The join walks the keys 0 .. TUPLES-1 in index
 * order and reads, for each key, A's tuple and B's tuple with that unique1: two records at
 * random places in memory per key. Every record read is checked (its unique1, its derived
 * attributes and its string); a wrong one exits 1.
 *
 * LOOKAHEAD > 0 (VINO only) loads sdk/grafts/lookahead_evict.c, linked in as `vm_join_graft`,
 * on the program's own `vas.pick_victim`: the plan is each key's two memory pages, written with
 * control calls, and the cursor moves every CURSOR_STEP keys, so the kernel, when it must take
 * pages from the program, takes none the next LOOKAHEAD keys read. 0 leaves the default policy.
 *
 * Between building the relations and the join, and again after the join, the program prints a
 * line (`built`, then its figures) and reads one byte of standard input: a runner that keeps
 * stdin open until then can read the memory's counters at both points. At end of input (Linux,
 * stdin /dev/null) it goes straight on. The figures (one line):
 *
 *   ns_per_page=X pages=N seconds=S setup_seconds=S matches=N checksum=C [minflt=N majflt=N]
 *
 * ns_per_page is the join's time per record read (each record lies in one page), seconds the
 * join's time including setup_seconds (loading the graft and its plan), checksum the sum over
 * keys of A.unique2 * B.unique2 (which pairs were joined), the faults from getrusage over the
 * join (host only). Any failure prints what failed on stderr and exits 1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __wasm__
#include "vino_process.h"
#else
#include <sys/resource.h>
#endif

#define PAGE 4096u
#define TUPLE 208u
#define PER_PAGE (PAGE / TUPLE) /* 19 */
#define SEED_A 1998u
#define SEED_B 1999u
/* The graft's cursor moves every CURSOR_STEP keys: a control call per key would cost more than
 * the precision is worth with windows of thousands of keys. */
#define CURSOR_STEP 16u

static void die(const char *what) {
    fprintf(stderr, "vm_join: %s\n", what);
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* SplitMix64, as experiments/src/wisconsin.rs `Rng`. */
static uint64_t next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* unique1 of each position: a Fisher-Yates shuffle of 0 .. n-1, as `Relation::generate`. */
static uint32_t *permutation(uint32_t n, uint64_t seed) {
    uint32_t *p = malloc((size_t)n * sizeof *p);
    if (!p)
        die("out of memory for a permutation");
    for (uint32_t i = 0; i < n; i++)
        p[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next(&seed) % ((uint64_t)i + 1));
        uint32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* The benchmark's string attribute: seven significant letters from the value, 'x' padding. */
static void wisconsin_string(uint32_t v, unsigned char *s) {
    memset(s, 'x', 52);
    for (int i = 6; i >= 0; i--) {
        s[i] = (unsigned char)('A' + v % 26);
        v /= 26;
    }
}

static size_t offset_of(uint32_t position) {
    return (size_t)(position / PER_PAGE) * PAGE + (size_t)(position % PER_PAGE) * TUPLE;
}

/* The tuple at `position` with unique1 `u1`, as `Relation::tuple` makes it. */
static void write_tuple(unsigned char *t, uint32_t u1, uint32_t position) {
    uint32_t ints[13] = {u1,       position, u1 % 2,     u1 % 4,           u1 % 10,           u1 % 20, u1 % 100,
                         u1 % 1000, u1 % 5000, u1 % 50000, u1, (u1 % 100) * 2, (u1 % 100) * 2 + 1};
    memcpy(t, ints, sizeof ints);
    wisconsin_string(u1, t + 52);
    wisconsin_string(position, t + 104);
    static const char *const fill[4] = {"AAAA", "HHHH", "OOOO", "VVVV"};
    for (int i = 0; i < 13; i++)
        memcpy(t + 156 + 4 * i, fill[position % 4], 4);
}

/* A relation in memory and its nonclustered index on unique1 (key -> position). */
struct relation {
    unsigned char *tuples;
    uint32_t *index;
};

static struct relation build(uint32_t n, uint64_t seed) {
    struct relation r;
    size_t bytes = (size_t)((n + PER_PAGE - 1) / PER_PAGE) * PAGE;
    uint32_t *unique1 = permutation(n, seed);
    r.index = malloc((size_t)n * sizeof *r.index);
    r.tuples = aligned_alloc(PAGE, bytes);
    if (!r.index || !r.tuples)
        die("out of memory for a relation");
    memset(r.tuples, 0, bytes);
    for (uint32_t p = 0; p < n; p++) {
        r.index[unique1[p]] = p;
        write_tuple(r.tuples + offset_of(p), unique1[p], p);
    }
    free(unique1);
    return r;
}

static const unsigned char *record(const struct relation *r, uint32_t key) {
    return r->tuples + offset_of(r->index[key]);
}

/* The tuple read for `key`: its unique2, after checking it is the tuple that key names. */
static uint32_t checked(const unsigned char *t, uint32_t key) {
    uint32_t ints[13];
    memcpy(ints, t, sizeof ints);
    unsigned char s[52];
    wisconsin_string(key, s);
    if (ints[0] != key || ints[6] != key % 100 || ints[10] != key || memcmp(t + 52, s, 7) != 0) {
        fprintf(stderr, "vm_join: the record of key %u read back wrong\n", key);
        exit(1);
    }
    return ints[1];
}

/* Waits for one byte of standard input (or its end): the runner's turn to look. */
static void pause_for_runner(void) {
    fflush(stdout);
    char c;
    if (read(0, &c, 1) < 0)
        die("reading standard input");
}

/* Faults taken so far (0 where there is no getrusage). */
struct faults {
    long minflt, majflt;
};

static struct faults faults(void) {
    struct faults f = {0, 0};
#ifndef __wasm__
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        die("getrusage");
    f.minflt = ru.ru_minflt;
    f.majflt = ru.ru_majflt;
#endif
    return f;
}

#ifdef __wasm__

/* sdk/grafts/lookahead_evict.c for wasm32, linked in by the runner. */
extern const unsigned char vm_join_graft[];
extern const size_t vm_join_graft_len;

static const char POINT[] = "vas.pick_victim";
/* The object id of program memory: the high 32 bits of its page ids. */
#define MEMORY_OBJECT 0xFFFFFFFFull

static int64_t control(const char *name, const int64_t *args, size_t nargs) {
    int64_t result = 0;
    int r = vino_graft_call(POINT, sizeof POINT - 1, name, strlen(name), args, nargs, &result);
    if (r != 0) {
        fprintf(stderr, "vm_join: the graft's %s: error %d\n", name, -r);
        exit(1);
    }
    return result;
}

static uint64_t page_of(const unsigned char *p) {
    return (uint64_t)(uintptr_t)p / PAGE;
}

/* Loads the look-ahead graft over this program's pages and gives it the join's plan: for key k,
 * the pages of A's and B's records. */
static void graft_lookahead(const struct relation *a, const struct relation *b, uint32_t n, uint32_t lookahead) {
    int r = vino_graft_load(POINT, sizeof POINT - 1, vm_join_graft, vm_join_graft_len);
    if (r != 0) {
        fprintf(stderr, "vm_join: loading the graft: error %d\n", -r);
        exit(1);
    }
    /* When every candidate is needed, the graft answers the LRU page itself: failing instead (as
     * the thesis' graft did) would have the kernel unload it after eight in a row. */
    int64_t set[4] = {(int64_t)MEMORY_OBJECT, lookahead, n, 1};
    control("la_set", set, 4);
    for (uint32_t at = 0; at < n; at += 7) {
        int64_t put[8] = {at};
        for (uint32_t k = 0; k < 7; k++) {
            uint32_t key = at + k < n ? at + k : at;
            put[k + 1] = (int64_t)(page_of(record(a, key)) << 32 | page_of(record(b, key)));
        }
        control("la_put", put, 8);
    }
    if (control("la_start", NULL, 0) != (int64_t)n)
        die("the graft took a shorter plan than the join's");
}

static void move_cursor(uint32_t key) {
    int64_t at = key;
    control("la_cursor", &at, 1);
}

#else

static void graft_lookahead(const struct relation *a, const struct relation *b, uint32_t n, uint32_t lookahead) {
    (void)a, (void)b, (void)n, (void)lookahead;
    die("the look-ahead graft is VINO's: LOOKAHEAD must be 0 on this build");
}

static void move_cursor(uint32_t key) { (void)key; }

#endif

static uint32_t count(const char *s, int zero_ok) {
    char *end;
    long n = strtol(s, &end, 10);
    if (*end || n < (zero_ok ? 0 : 1) || n > 0x7fffffffL) {
        fprintf(stderr, "vm_join: %s is not a count\n", s);
        exit(1);
    }
    return (uint32_t)n;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: vm_join TUPLES LOOKAHEAD\n");
        return 1;
    }
    uint32_t n = count(argv[1], 0), lookahead = count(argv[2], 1);
    struct relation a = build(n, SEED_A), b = build(n, SEED_B);
    printf("built tuples=%u bytes=%zu\n", n, 2 * (size_t)((n + PER_PAGE - 1) / PER_PAGE) * PAGE);
    pause_for_runner();

    struct faults f0 = faults();
    double t0 = now();
    if (lookahead > 0)
        graft_lookahead(&a, &b, n, lookahead);
    double setup = now() - t0;
    uint64_t checksum = 0, matches = 0;
    for (uint32_t key = 0; key < n; key++) {
        if (lookahead > 0 && key % CURSOR_STEP == 0)
            move_cursor(key);
        uint32_t a2 = checked(record(&a, key), key);
        uint32_t b2 = checked(record(&b, key), key);
        checksum += (uint64_t)a2 * b2;
        matches++;
    }
    double t = now() - t0;
    struct faults f = faults();
    printf("ns_per_page=%.1f pages=%u seconds=%.6f setup_seconds=%.6f matches=%llu checksum=%llu", t * 1e9 / (2.0 * n),
           2 * n, t, setup, (unsigned long long)matches, (unsigned long long)checksum);
#ifndef __wasm__
    printf(" minflt=%ld majflt=%ld", f.minflt - f0.minflt, f.majflt - f0.majflt);
#else
    (void)f, (void)f0;
#endif
    printf("\n");
    pause_for_runner();
    return 0;
}
