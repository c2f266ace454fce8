/* wisc_readahead.c -- random-access read-ahead for file.compute_ra (Small 1998, 7.3.4; the
 * thesis' graft is in 7.7.2).
 *
 * A database reading records through a nonclustered index reads them in index order, scattered
 * over the file: the kernel's sequential detection never fires and each read waits for the disk.
 * The application knows the order, so it gives the graft the byte offset of every record of the
 * scan once; after each read the graft keeps the blocks of the upcoming records requested, up to
 * a window of N blocks not yet read. With many requests outstanding the disk scheduler can sort
 * them (an elevator sweep instead of a random seek per record) and the disk can serve them while
 * the application works.
 *
 * Shared state (the owner writes it with write_memory, then calls the control function wra_start):
 *
 *   wra_ctl    { window (N, blocks; 0 turns read-ahead off), count (records in the plan),
 *                record_size (bytes per record, e.g. 208) }
 *   wra_plan   the byte offset of each record, in the order the application reads them.
 *
 * The graft follows the scan by itself: a read at the offset of the next planned record moves its
 * cursor past that record (a read of a record a little further on skips to it). After each read
 * it requests, in plan order, the blocks of records beyond those already requested, as long as
 * fewer than N requested blocks belong to records not read yet; a block already requested for an
 * upcoming record is not asked for again, and adjacent blocks are merged into one extent. At most
 * VINO_RA_MAX_EXTENTS extents per call: a large window fills over a few reads. Everything is
 * O(1) per block. */
#include "vino_graft.h"

#define WRA_MAX_RECORDS 65536
#define WRA_MAX_BLOCKS 65536
#define WRA_SKIP_LIMIT 64 /* how far ahead a read may land and still be recognised */
#define BS ((uint64_t)VINO_BLOCK_SIZE)

VINO_SHARED struct {
    uint64_t window;      /* N: blocks requested for records not read yet, at most */
    uint64_t count;       /* records in the plan (clamped to WRA_MAX_RECORDS) */
    uint64_t record_size; /* bytes per record */
} wra_ctl;

VINO_SHARED uint64_t wra_plan[WRA_MAX_RECORDS];

static uint64_t cur;                    /* the next record the application reads */
static uint64_t issued;                 /* records [0, issued) have had their blocks requested */
static uint64_t ahead;                  /* blocks requested for records in [cur, issued) */
static uint32_t stamp[WRA_MAX_BLOCKS];  /* 1 + the record a block was last requested for */
static uint8_t charged[WRA_MAX_RECORDS]; /* blocks requested on behalf of each record */
static uint32_t started;

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Moves the cursor to record `to`, releasing the blocks charged to the records passed. */
static void advance(uint64_t to) {
    for (; cur < to; cur++) {
        if (cur < issued)
            ahead -= charged[cur] <= ahead ? charged[cur] : ahead;
    }
}

VINO_GRAFT(file_compute_ra)
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    if (!started || offset < 0 || len < 0 || file_size <= 0)
        return 0;
    uint64_t count = min_u64(wra_ctl.count, WRA_MAX_RECORDS);
    uint64_t rs = wra_ctl.record_size;
    if (rs == 0 || rs > BS)
        return 0;
    uint64_t fs = (uint64_t)file_size;

    /* Follow the scan: the read just done is the next planned record, or one a little ahead. */
    uint64_t limit = min_u64(cur + WRA_SKIP_LIMIT, count);
    for (uint64_t i = cur; i < limit; i++) {
        if (wra_plan[i] == (uint64_t)offset) {
            advance(i + 1);
            break;
        }
    }
    if (issued < cur)
        issued = cur;

    struct vino_extent *ext = vino_ra_extents();
    int32_t n = 0;
    uint64_t window = wra_ctl.window, bytes = 0;
    /* A record needs at most two extents and two blocks: stop while a whole record still fits. */
    while (issued < count && ahead < window && n + 2 <= VINO_RA_MAX_EXTENTS &&
           bytes + 2 * BS <= VINO_RA_MAX_BYTES) {
        uint64_t r = issued++;
        uint64_t a = wra_plan[r];
        charged[r] = 0;
        if (a >= fs)
            continue;
        uint64_t e = min_u64(a + rs, fs);
        for (uint64_t b = a / BS; b * BS < e; b++) {
            if (b >= WRA_MAX_BLOCKS)
                break;
            if (stamp[b] > cur)
                continue; /* already requested for a record not read yet */
            stamp[b] = (uint32_t)(r + 1);
            charged[r]++;
            ahead++;
            uint64_t off = b * BS, blen = min_u64(BS, fs - off);
            bytes += blen;
            if (n > 0 && ext[n - 1].off + ext[n - 1].len == off)
                ext[n - 1].len += blen;
            else {
                ext[n].off = off;
                ext[n].len = blen;
                n++;
            }
        }
    }
    return n;
}

/* Starts a scan: wra_ctl and wra_plan have been written. Returns the records in the plan. */
VINO_CONTROL(wra_start) int32_t wra_start(void) {
    memset(stamp, 0, sizeof stamp);
    memset(charged, 0, sizeof charged);
    cur = issued = ahead = 0;
    started = 1;
    return (int32_t)min_u64(wra_ctl.count, WRA_MAX_RECORDS);
}

VINO_CONTROL(wra_stop) int32_t wra_stop(void) {
    started = 0;
    return 0;
}
