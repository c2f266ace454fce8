/* fifo.c -- first come, first served for disk.pick_request: the kernel offers the waiting requests
 * in arrival order, so the one that has waited longest is always entry 0. The baseline the
 * elevator (elevator.c, and the kernel's default) is measured against. */
#include "vino_graft.h"

VINO_GRAFT(disk_pick_request) int32_t disk_pick_request(int32_t n, int64_t head) {
    (void)head;
    return n > 0 ? 0 : -1;
}
