/* elevator.c -- the kernel's default disk.pick_request policy, written as a graft (Small 1998,
 * 4.2.1: "disk driver: which disk request to schedule next").
 *
 * A one-way elevator (C-SCAN; strictly C-LOOK): serve the waiting request with the lowest block
 * at or after the head; when none is ahead, go back to the lowest block and sweep up again. Ties
 * go to the request that has waited longest (the lower index: requests arrive in the argument
 * area in arrival order). Against starvation, a request that has waited `age_cap_ns` (1 s unless
 * the owner changes it with the control function set_age_cap) is served first, whatever the
 * sweep. Makes the same decisions as the kernel's native elevator with the default cap.
 *
 * Argument area: n <= 128 entries of struct vino_disk_request (24 bytes, little-endian). */
#include "vino_graft.h"


static uint64_t age_cap_ns = 1000000000ull; /* 0 turns the cap off */

VINO_GRAFT(disk_pick_request) int32_t disk_pick_request(int32_t n, int64_t head) {
    const struct vino_disk_request *r = vino_disk_requests();
    if (n <= 0 || n > VINO_DISK_PICK_MAX)
        return -1; /* invalid: the kernel's elevator decides */

    if (age_cap_ns != 0) {
        int32_t oldest = 0;
        for (int32_t i = 1; i < n; i++)
            if (r[i].age_ns > r[oldest].age_ns)
                oldest = i;
        if (r[oldest].age_ns >= age_cap_ns)
            return oldest;
    }

    uint64_t at = (uint64_t)head;
    int32_t ahead = -1, lowest = 0;
    for (int32_t i = 0; i < n; i++) {
        if (r[i].block >= at && (ahead < 0 || r[i].block < r[ahead].block))
            ahead = i;
        if (r[i].block < r[lowest].block)
            lowest = i;
    }
    return ahead >= 0 ? ahead : lowest;
}

/* Sets the age cap in nanoseconds (0: no cap); returns the previous one. */
VINO_CONTROL(set_age_cap) int64_t set_age_cap(int64_t ns) {
    int64_t old = (int64_t)age_cap_ns;
    age_cap_ns = ns < 0 ? 0 : (uint64_t)ns;
    return old;
}
