/* change_then_fail.c -- tests that a graft's changes to kernel state through its graftpoint's
 * functions are made only by calls that commit. Each call first asks for one change, then ends
 * as `vino_ctl_fail` last said: 0 answers validly (the change is made), 1 traps, 2 spins until
 * its budget stops it, 3 answers out of range (each time the change must be dropped). The
 * change's arguments come from `vino_ctl_set(a, b)`; a change the kernel refuses traps at once.
 * `vino_ctl_calls` tells how many calls committed (a failed call's count is rolled back with its
 * memory). Built for one graftpoint, chosen by a define:
 *   (none)          file.compute_ra: vino_prefetch(a, b); answers no extents
 *   CHANGE_VICTIM   vas.pick_victim: vino_page_hint(a, b); answers the kernel's candidate
 *   CHANGE_GRANT    lock.grant: vino_lock_requeue(a, b); grants nothing
 *   CHANGE_THREAD   sched.pick_thread: vino_tickets_give(a, b); answers the kernel's choice */
#include "vino_graft.h"

static int32_t fail;
static int64_t a, b;
static int64_t calls;
static volatile uint64_t spins;

VINO_CONTROL(set) int32_t set_change(int64_t first, int64_t second) {
    a = first;
    b = second;
    return 0;
}

VINO_CONTROL(fail) int32_t set_fail(int32_t mode) {
    fail = mode;
    return 0;
}

VINO_CONTROL(calls) int64_t committed_calls(void) { return calls; }

/* Ends the call as told: `good` is a valid answer, `bad` one out of range. */
static int64_t end(int64_t good, int64_t bad) {
    calls++;
    switch (fail) {
    case 1:
        VINO_TRAP();
    case 2:
        for (;;)
            spins++;
    case 3:
        return bad;
    default:
        return good;
    }
}

#if defined(CHANGE_VICTIM)
VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
    if (vino_page_hint((uint64_t)a, (int32_t)b) != 0)
        VINO_TRAP();
    return (int32_t)end(0, n + 1000);
}
#elif defined(CHANGE_GRANT)
VINO_GRAFT(lock_grant) int64_t lock_grant(int32_t n, int32_t m) {
    (void)n;
    (void)m;
    if (vino_lock_requeue((int32_t)a, (int32_t)b) != 0)
        VINO_TRAP();
    return end(0, -1);
}
#elif defined(CHANGE_THREAD)
VINO_GRAFT(sched_pick_thread) int32_t sched_pick_thread(int32_t n, int32_t def) {
    if (vino_tickets_give(a, (int32_t)b) != 0)
        VINO_TRAP();
    return (int32_t)end(def, n);
}
#else
VINO_GRAFT(file_compute_ra) int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size) {
    (void)offset;
    (void)len;
    (void)file_size;
    if (vino_prefetch(a, b) != 0)
        VINO_TRAP();
    return (int32_t)end(0, -1);
}
#endif
