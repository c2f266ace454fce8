/* randread_ra.c -- read-ahead for a program whose random reads follow a sequence it can name:
 * here `vino bench programs`' random-read tool, which reads 4 KiB blocks in the order of a
 * SplitMix64 generator seeded with 7 (RANDREAD_SEED to change it). For file.compute_ra, bound
 * to the tool's descriptor through the mount's ioctl (`vino graft load --fd`).
 *
 * The kernel's default read-ahead sees random reads and does nothing; every read waits for the
 * device. This graft runs the same generator: when a read is the one the sequence says comes
 * next, it asks for the blocks of the next RANDREAD_DEPTH reads, so their misses overlap. A read
 * off the sequence changes nothing and prefetches nothing (advice, never a wrong answer).
 *
 * Reads that Linux's page cache serves (a block the sequence visited before) never reach the
 * kernel, so the read that does come may be some steps further along: the graft looks for it up
 * to RANDREAD_RESYNC steps ahead before calling it off the sequence. */
#include "vino_graft.h"

#ifndef RANDREAD_SEED
#define RANDREAD_SEED 7
#endif
#define RANDREAD_DEPTH 16 /* at most VINO_RA_MAX_EXTENTS */
#define RANDREAD_RESYNC 64
#define BS ((uint64_t)VINO_BLOCK_SIZE)

static uint64_t state = RANDREAD_SEED; /* the generator after the last read that matched */

static uint64_t next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    uint64_t pages = file_size > 0 ? (uint64_t)file_size / BS : 0;
    if (offset < 0 || len <= 0 || pages == 0)
        return 0;
    uint64_t s = state;
    int32_t step = 0;
    while (next(&s) % pages * BS != (uint64_t)offset)
        if (++step == RANDREAD_RESYNC)
            return 0; /* not a read the sequence expects soon */
    state = s;
    struct vino_extent *e = vino_ra_extents();
    for (int32_t i = 0; i < RANDREAD_DEPTH; i++) {
        e[i].off = next(&s) % pages * BS;
        e[i].len = BS; /* blocks already cached or on their way are skipped by the kernel */
    }
    return RANDREAD_DEPTH;
}
