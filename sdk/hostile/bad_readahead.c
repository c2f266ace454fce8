/* bad_readahead.c -- tests result checking for file.compute_ra: asks for a block that reaches
 * past the end of the file (a graft fishing for data beyond EOF, or just a bug). The kernel must
 * reject the whole answer, issue no read-ahead from it, and fall back to its default. */
#include "vino_graft.h"

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    (void)offset;
    (void)len;
    struct vino_extent *ext = vino_ra_extents();
    ext[0].off = (uint64_t)file_size & ~(uint64_t)(VINO_BLOCK_SIZE - 1);
    ext[0].len = 2 * VINO_BLOCK_SIZE; /* always ends past file_size */
    return 1;
}
