/* sequential_ra.c -- the kernel's default read-ahead, re-implemented as a graft for
 * file.compute_ra: shows that a graft can do what the default does (and measures what it costs).
 *
 * A read is sequential when it starts where the previous one ended (the first read of a file, at
 * offset 0, counts). After a sequential read the graft keeps a window of `seq_params.blocks`
 * blocks (default 8, at most 256 = 1 MiB) prefetched beyond it. It tops the window up only once
 * the reader has consumed half of it, so the disk sees half-window-sized requests rather than one
 * block per read. A non-sequential read resets the window and prefetches nothing.
 *
 * State lives in the graft's memory, so one instance serves one open file (file.compute_ra/<fd>). */
#include "vino_graft.h"

#define BS ((uint64_t)VINO_BLOCK_SIZE)

VINO_SHARED struct {
    uint64_t blocks; /* window size in blocks, 1..256 */
} seq_params = {8};

static uint64_t next_expected; /* where a sequential read would start */
static uint64_t ra_end;        /* end of what has been asked for already */

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    if (offset < 0 || len <= 0 || file_size <= 0)
        return 0;
    uint64_t end = (uint64_t)offset + (uint64_t)len, fs = (uint64_t)file_size;
    int sequential = (uint64_t)offset == next_expected;
    next_expected = end;
    if (!sequential) {
        ra_end = 0;
        return 0;
    }

    uint64_t blocks = seq_params.blocks;
    if (blocks == 0 || blocks > VINO_RA_MAX_BYTES / BS)
        blocks = 8;
    uint64_t window = blocks * BS;
    if (ra_end > end && ra_end - end >= window / 2)
        return 0; /* plenty prefetched still ahead of the reader */

    uint64_t from = (end + BS - 1) & ~(BS - 1);
    uint64_t start = from > ra_end ? from : ra_end;
    uint64_t stop = from + window;
    if (stop > fs)
        stop = fs;
    if (start >= stop)
        return 0; /* at the end of the file */
    struct vino_extent *ext = vino_ra_extents();
    ext[0].off = start;
    ext[0].len = stop - start;
    ra_end = stop;
    return 1;
}

/* Window size in blocks (1..256). */
VINO_CONTROL(seq_set_blocks) int32_t seq_set_blocks(uint64_t n) {
    if (n == 0 || n > VINO_RA_MAX_BYTES / BS)
        return -1;
    seq_params.blocks = n;
    return 0;
}
