/* scan_evict.c -- a vas.pick_victim graft for a process that reads one file once, start to end
 * (a backup, a table scan), while it keeps a working set of other pages it reads again.
 *
 * LRU treats the scan's pages as the most recently used, so a long scan pushes the working set
 * out. The owner names the scanned file (scan_set with its object id, the high 32 bits of a page
 * id); when the kernel wants one of the process's pages, the graft gives a scanned page instead
 * of the working set's oldest, and hints the other scanned pages among the candidates it was
 * shown as `drop` (vino_page_hint): their frames are given back at once, in one eviction, rather
 * than one eviction at a time. If the call fails after its hints, none of them is applied. */
#include "vino_graft.h"

#define ENOSPC 28

VINO_SHARED struct {
    uint64_t object; /* the scanned file's object id; 0: none */
} scan;

VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
    const uint64_t *page = vino_victim_pages();
    int32_t first = (int32_t)vino_victim_first();
    if (n <= 0 || n > VINO_VICTIM_MAX || scan.object == 0)
        return first; /* the kernel's choice (or, with no more pages, the first one offered) */
    int32_t chosen = -1;
    for (int32_t i = 0; i < n; i++) {
        if (page[i] >> 32 != scan.object)
            continue;
        if (chosen < 0)
            chosen = i;
        else if (vino_page_hint(page[i], VINO_HINT_DROP) == -ENOSPC)
            break;
    }
    return chosen < 0 ? first : first + chosen;
}

/* The file read once, by object id (0: none). */
VINO_CONTROL(scan_set) int32_t scan_set(uint64_t object) {
    scan.object = object;
    return 0;
}
