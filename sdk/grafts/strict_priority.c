/* strict_priority.c -- a process's own thread policy (sched.pick_thread): strict priorities.
 *
 * The kernel gives the process its turns by its share (Small 1998, 4.2.1); on each turn this
 * graft picks, among the process's runnable threads, the one with the highest priority, ties
 * going to the one that has waited longest (the lower index). Threads without a priority have
 * priority 0. The owner sets priorities with the control function set_priority(tid, priority)
 * (at most 64 threads; a priority of 0 forgets the thread). A low-priority thread may wait as
 * long as higher ones are runnable, but never past the kernel's starvation cap, and the process
 * as a whole never gets more than its share.
 *
 * Argument area: n <= 64 entries of struct vino_sched_thread (32 bytes, little-endian). */
#include "vino_graft.h"

#define SLOTS 64

static uint64_t slot_tid[SLOTS];
static int64_t slot_priority[SLOTS];

static int64_t priority_of(uint64_t tid) {
    for (int32_t i = 0; i < SLOTS; i++)
        if (slot_tid[i] == tid && tid != 0)
            return slot_priority[i];
    return 0;
}

VINO_GRAFT(sched_pick_thread) int32_t sched_pick_thread(int32_t n, int32_t def) {
    const struct vino_sched_thread *t = vino_sched_threads();
    if (n <= 0 || n > VINO_SCHED_PICK_MAX)
        return def;
    int32_t best = 0;
    int64_t best_priority = priority_of(t[0].tid);
    for (int32_t i = 1; i < n; i++) {
        int64_t p = priority_of(t[i].tid);
        if (p > best_priority) {
            best = i;
            best_priority = p;
        }
    }
    return best;
}

/* Sets the priority of thread `tid` (0 forgets it); returns 0, or -1 when the table is full. */
VINO_CONTROL(set_priority) int64_t set_priority(int64_t tid, int64_t priority) {
    int32_t free_slot = -1;
    for (int32_t i = 0; i < SLOTS; i++) {
        if (slot_tid[i] == (uint64_t)tid) {
            if (priority == 0)
                slot_tid[i] = 0;
            else
                slot_priority[i] = priority;
            return 0;
        }
        if (slot_tid[i] == 0 && free_slot < 0)
            free_slot = i;
    }
    if (priority == 0)
        return 0;
    if (free_slot < 0)
        return -1;
    slot_tid[free_slot] = (uint64_t)tid;
    slot_priority[free_slot] = priority;
    return 0;
}
