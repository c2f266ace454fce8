/* index_prefetch.c -- index-driven read-ahead (Small 1998, 7.7.2) for file.compute_ra that asks
 * the kernel as it goes, with vino_prefetch, instead of returning extents.
 *
 * The application pushes the byte offsets of the records it will read, in scan order (ip_push).
 * After each read the graft moves its cursor past the record just read and asks for the blocks
 * of the next `depth` records, one vino_prefetch per block, stopping when the kernel says the
 * call's allowance is used (-ENOSPC).
 *
 * Why it shows the transaction at work: a call changes two things, the cursor in the graft's own
 * memory and the kernel's list of reads to issue. If the call then fails (here: the owner asks
 * for a trap after the prefetches with ip_fail, as a buggy graft would trap), both are
 * undone together: the prefetches are never issued and the cursor is back where it was, so the
 * next call asks again for the same records. */
#include "vino_graft.h"

#define IP_CAPACITY 1024
#define BS ((uint64_t)VINO_BLOCK_SIZE)
#define ENOSPC 28

VINO_SHARED struct {
    uint64_t record_size; /* bytes per record (default 208) */
    uint64_t depth;       /* records to keep asked for (default 8) */
    uint64_t cur;         /* next record not read yet */
    uint64_t count;       /* records pushed */
    uint64_t fail;        /* nonzero: every call traps after its prefetches */
    uint64_t off[IP_CAPACITY];
} ip_scan = {208, 8, 0, 0, 0, {0}};

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    if (offset < 0 || len < 0 || file_size <= 0)
        return 0;
    /* The owner may write this memory directly: clamp what is read from it. */
    uint64_t count = min_u64(ip_scan.count, IP_CAPACITY), cur = min_u64(ip_scan.cur, count);
    uint64_t rs = ip_scan.record_size ? min_u64(ip_scan.record_size, VINO_RA_MAX_BYTES) : 208;
    uint64_t fs = (uint64_t)file_size, rd_start = (uint64_t)offset, rd_end = rd_start + (uint64_t)len;
    /* Past the record this read covered, if it was the next one or a little further on. */
    for (uint64_t i = cur; i < count && i < cur + 4; i++)
        if (ip_scan.off[i] < rd_end && ip_scan.off[i] + rs > rd_start) {
            cur = i + 1;
            break;
        }
    ip_scan.cur = cur;
    uint64_t last = ~(uint64_t)0; /* the block asked for last: records often share one */
    uint64_t stop = min_u64(count, cur + min_u64(ip_scan.depth, VINO_RA_MAX_EXTENTS));
    for (uint64_t i = cur; i < stop; i++) {
        uint64_t a = ip_scan.off[i];
        if (a >= fs)
            continue;
        for (uint64_t b = a & ~(BS - 1); b < min_u64(a + rs, fs); b += BS) {
            if (b == last)
                continue;
            int32_t r = vino_prefetch((int64_t)b, (int64_t)min_u64(BS, fs - b));
            if (r == -ENOSPC)
                goto asked;
            last = b;
        }
    }
asked:
    if (ip_scan.fail)
        VINO_TRAP();
    return 0;
}

/* Append a record offset. Returns the records not read yet, or -1 when full. */
VINO_CONTROL(ip_push) int32_t ip_push(uint64_t off) {
    uint64_t count = min_u64(ip_scan.count, IP_CAPACITY);
    if (count == IP_CAPACITY)
        return -1;
    ip_scan.off[count] = off;
    ip_scan.count = count + 1;
    return (int32_t)(count + 1 - min_u64(ip_scan.cur, count + 1));
}

/* The next record not read yet. */
VINO_CONTROL(ip_cursor) int64_t ip_cursor(void) { return (int64_t)ip_scan.cur; }

/* Nonzero: every call traps after asking for its prefetches (to show them undone). */
VINO_CONTROL(ip_fail) int32_t ip_fail(uint64_t on) {
    ip_scan.fail = on;
    return 0;
}
