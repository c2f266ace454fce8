/* reverse_ra.c -- read-ahead for a file read backwards, for file.compute_ra: a read the kernel's
 * default gets wrong. The default looks for reads that continue forwards; a program reading a
 * file from its end to its start (a log read newest first, a descending scan) only ever jumps
 * backwards, so the default prefetches nothing and every read waits for the device, in
 * requests no larger than the reads.
 *
 * A read is backward when it ends where the previous one started. After a backward read the graft
 * keeps a window of `rev_params.blocks` blocks (default 64, at most 256 = 1 MiB) prefetched before
 * it, as one extent. It tops the window up only once the reader has consumed half of it, so the
 * disk sees requests of half a window rather than one per read. Any other read resets the window
 * and prefetches nothing.
 *
 * State lives in the graft's memory, so one instance serves one open file (file.compute_ra/<fd>). */
#include "vino_graft.h"

#define BS ((uint64_t)VINO_BLOCK_SIZE)
#define NONE (~(uint64_t)0)

VINO_SHARED struct {
    uint64_t blocks; /* window size in blocks, 1..256 */
} rev_params = {64};

static uint64_t expected_end = NONE; /* where a backward read would end */
static uint64_t ra_start = NONE;     /* start of what has been asked for already */

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    if (offset < 0 || len <= 0 || file_size <= 0)
        return 0;
    uint64_t start = (uint64_t)offset, end = start + (uint64_t)len;
    int backward = end == expected_end;
    expected_end = start;
    if (!backward) {
        ra_start = NONE;
        return 0;
    }

    uint64_t blocks = rev_params.blocks;
    if (blocks == 0 || blocks > VINO_RA_MAX_BYTES / BS)
        blocks = 64;
    uint64_t window = blocks * BS;
    if (ra_start < start && start - ra_start >= window / 2)
        return 0; /* plenty prefetched still before the reader */

    uint64_t to = start & ~(BS - 1); /* the read brought in the block holding `start` */
    uint64_t stop = ra_start < to ? ra_start : to;
    uint64_t from = to > window ? to - window : 0;
    if (from >= stop)
        return 0; /* at the start of the file */
    struct vino_extent *ext = vino_ra_extents();
    ext[0].off = from;
    ext[0].len = stop - from;
    ra_start = from;
    return 1;
}

/* Window size in blocks (1..256). */
VINO_CONTROL(rev_set_blocks) int32_t rev_set_blocks(uint64_t n) {
    if (n == 0 || n > VINO_RA_MAX_BYTES / BS)
        return -1;
    rev_params.blocks = n;
    return 0;
}
