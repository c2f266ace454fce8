/* index_readahead.c -- the thesis' index-driven read-ahead graft (Small 1998, 7.7.2) for
 * file.compute_ra.
 *
 * A database scanning a table through an index reads records in index order, which is random in
 * file order: sequential read-ahead never fires, and every read waits for the disk. The
 * application, though, knows where it will read next. It pushes the upcoming record offsets (scan
 * order) into this graft -- with ra_push, or by writing `ra_index` directly -- and after every
 * read the graft asks the kernel to prefetch the blocks holding the next `depth` records.
 *
 * Shared state (exported globals, the owner may write them with write_memory):
 *   ra_params  { uint64 record_size (default 208, the thesis' record); uint64 depth (default 8,
 *                extents per call, at most 16; 0 turns read-ahead off) }
 *   ra_index   { uint64 cur; uint64 count; uint64 off[RA_CAPACITY] }: off[cur..count) are the
 *                records not read yet, in scan order.
 *
 * Each call first advances `cur` past the records the read just done covered (the first record at
 * or after cur that overlaps the read, and those right after it in scan order that the read also
 * covers; a read matching no upcoming record leaves cur alone), then
 * returns one block-aligned extent per distinct 4 KB block holding the next records, clamped to
 * the file's size, skipping the blocks the read itself just brought in. The thesis' graft handed
 * back a single record per call; asking for several blocks at once lets the disk overlap them. */
#include "vino_graft.h"

#define RA_CAPACITY 4096
#define RA_DEFAULT_RECORD 208
#define RA_DEFAULT_DEPTH 8
#define BS ((uint64_t)VINO_BLOCK_SIZE)

VINO_SHARED struct {
    uint64_t record_size;
    uint64_t depth;
} ra_params = {RA_DEFAULT_RECORD, RA_DEFAULT_DEPTH};

VINO_SHARED struct {
    uint64_t cur;
    uint64_t count;
    uint64_t off[RA_CAPACITY];
} ra_index;

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    if (offset < 0 || len < 0 || file_size <= 0)
        return 0;
    /* The owner writes this memory directly: clamp everything read from it. */
    uint64_t count = min_u64(ra_index.count, RA_CAPACITY);
    uint64_t cur = min_u64(ra_index.cur, count);
    uint64_t rs = ra_params.record_size;
    if (rs == 0 || rs > VINO_RA_MAX_BYTES)
        rs = RA_DEFAULT_RECORD;
    uint64_t depth = min_u64(ra_params.depth, VINO_RA_MAX_EXTENTS);
    uint64_t fs = (uint64_t)file_size;
    uint64_t rd_start = (uint64_t)offset, rd_end = rd_start + (uint64_t)len;

    /* Advance past the records this read covered: the first upcoming one it overlaps and any
     * that follow it in scan order and lie within the read too. */
    for (uint64_t i = cur; i < count; i++) {
        if (ra_index.off[i] < rd_end && ra_index.off[i] + rs > rd_start) {
            cur = i + 1;
            while (cur < count && ra_index.off[cur] < rd_end && ra_index.off[cur] + rs > rd_start)
                cur++;
            break;
        }
    }
    ra_index.cur = cur;

    /* One extent per distinct block of the next records. */
    struct vino_extent *ext = vino_ra_extents();
    int32_t n = 0;
    uint64_t just_read = rd_start & ~(BS - 1); /* first block of the read just done */
    for (uint64_t i = cur; i < count && (uint64_t)n < depth; i++) {
        uint64_t a = ra_index.off[i];
        if (a >= fs)
            continue;
        uint64_t e = min_u64(a + rs, fs);
        for (uint64_t b = a & ~(BS - 1); b < e && (uint64_t)n < depth; b += BS) {
            if (b >= just_read && b < rd_end)
                continue;
            int dup = 0;
            for (int32_t k = 0; k < n; k++)
                dup |= ext[k].off == b;
            if (dup)
                continue;
            ext[n].off = b;
            ext[n].len = min_u64(BS, fs - b);
            n++;
        }
    }
    return n;
}

/* Append an upcoming record offset. Returns the number queued, or -1 if the queue is full. */
VINO_CONTROL(ra_push) int32_t ra_push(uint64_t off) {
    uint64_t count = min_u64(ra_index.count, RA_CAPACITY);
    uint64_t cur = min_u64(ra_index.cur, count);
    if (count == RA_CAPACITY) {
        if (cur == 0)
            return -1;
        /* Drop the records already read to make room. */
        for (uint64_t i = cur; i < count; i++)
            ra_index.off[i - cur] = ra_index.off[i];
        count -= cur;
        cur = 0;
    }
    ra_index.off[count++] = off;
    ra_index.cur = cur;
    ra_index.count = count;
    return (int32_t)(count - cur);
}

/* Forget the scan (a new query starts). */
VINO_CONTROL(ra_reset) int32_t ra_reset(void) {
    ra_index.cur = 0;
    ra_index.count = 0;
    return 0;
}

VINO_CONTROL(ra_set_record_size) int32_t ra_set_record_size(uint64_t n) {
    if (n == 0 || n > VINO_RA_MAX_BYTES)
        return -1;
    ra_params.record_size = n;
    return 0;
}

/* Extents per call, 0 (off) to 16. */
VINO_CONTROL(ra_set_depth) int32_t ra_set_depth(uint64_t n) {
    if (n > VINO_RA_MAX_EXTENTS)
        return -1;
    ra_params.depth = n;
    return 0;
}
