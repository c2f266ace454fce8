/* multimedia.c -- the thesis' multimedia case as a process's own thread policy
 * (sched.pick_thread; Small 1998, 4.2.1).
 *
 * A player has periodic threads (audio input, audio output: each needs a little CPU every
 * period) and one that takes whatever is left (video). On each of the process's turns this
 * graft runs the runnable periodic thread with the shortest period (rate-monotonic priority),
 * and the others only when no periodic thread is runnable; among those, the one that has waited
 * longest. The owner names the periodic threads with the control function
 * set_period(tid, period_ns) (0 forgets one; at most 32).
 *
 * The kernel still decides how much CPU the process gets: the graft only decides which of its
 * threads uses it, so the audio threads meet their periods when the process's share covers
 * them, whatever other users run.
 *
 * Argument area: n <= 64 entries of struct vino_sched_thread (32 bytes, little-endian). */
#include "vino_graft.h"

#define SLOTS 32

static uint64_t slot_tid[SLOTS];
static uint64_t slot_period[SLOTS];

static uint64_t period_of(uint64_t tid) {
    for (int32_t i = 0; i < SLOTS; i++)
        if (slot_tid[i] == tid && tid != 0)
            return slot_period[i];
    return 0;
}

VINO_GRAFT(sched_pick_thread) int32_t sched_pick_thread(int32_t n, int32_t def) {
    const struct vino_sched_thread *t = vino_sched_threads();
    if (n <= 0 || n > VINO_SCHED_PICK_MAX)
        return def;
    int32_t best = -1;
    uint64_t best_period = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t p = period_of(t[i].tid);
        if (p != 0 && (best < 0 || p < best_period)) {
            best = i;
            best_period = p;
        }
    }
    /* No periodic thread runnable: the one that has waited longest (entry 0). */
    return best >= 0 ? best : 0;
}

/* Makes thread `tid` periodic with `period_ns` (0: not periodic); returns 0, or -1 when the
 * table is full. */
VINO_CONTROL(set_period) int64_t set_period(int64_t tid, int64_t period_ns) {
    int32_t free_slot = -1;
    for (int32_t i = 0; i < SLOTS; i++) {
        if (slot_tid[i] == (uint64_t)tid) {
            if (period_ns <= 0)
                slot_tid[i] = 0;
            else
                slot_period[i] = (uint64_t)period_ns;
            return 0;
        }
        if (slot_tid[i] == 0 && free_slot < 0)
            free_slot = i;
    }
    if (period_ns <= 0)
        return 0;
    if (free_slot < 0)
        return -1;
    slot_tid[free_slot] = (uint64_t)tid;
    slot_period[free_slot] = (uint64_t)period_ns;
    return 0;
}
