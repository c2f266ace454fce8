/* lock_fifo.c -- strict FIFO for lock.grant (Seltzer et al. 1995, 4.4): a waiting request is granted
 * only if it conflicts neither with a held lock nor with a request that arrived before it and still
 * waits, so an incoming reader never passes a writer that came first. Upgrades (a reader that holds
 * its read lock while it waits to write) go first: every earlier writer waits for that read lock
 * anyway. Makes the same decisions as the kernel's native FIFO policy.
 *
 * Argument area: n waiting requests in arrival order, then m held locks (struct vino_lock). */
#include "vino_graft.h"

static bool overlap(const struct vino_lock *a, const struct vino_lock *b) {
    return a->start < b->end && b->start < a->end;
}

/* POSIX: one owner's locks never conflict; others do where they overlap and one is a write. */
static bool conflicts(const struct vino_lock *a, const struct vino_lock *b) {
    return a->owner != b->owner && overlap(a, b) && ((a->flags | b->flags) & VINO_LOCK_WRITE);
}

/* The order requests are considered in: upgrades first, then the others, each by arrival. */
static int32_t order[VINO_LOCK_GRANT_MAX];

VINO_GRAFT(lock_grant) int64_t lock_grant(int32_t n, int32_t m) {
    const struct vino_lock *w = vino_lock_entries();
    const struct vino_lock *held = w + n;
    if (n <= 0 || n > VINO_LOCK_GRANT_MAX || m < 0 || (n + m) * 32 > VINO_ARG_BYTES)
        return -1; /* invalid: the kernel's default decides */

    int32_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n; i++)
            if (((w[i].flags & VINO_LOCK_UPGRADE) != 0) == (pass == 0))
                order[k++] = i;

    uint64_t granted = 0;
    for (int32_t a = 0; a < n; a++) {
        int32_t i = order[a];
        bool ok = true;
        for (int32_t h = 0; ok && h < m; h++)
            ok = !conflicts(&w[i], &held[h]);
        /* Every request considered before this one is either granted or still waiting: both block. */
        for (int32_t b = 0; ok && b < a; b++)
            ok = !conflicts(&w[i], &w[order[b]]);
        if (ok)
            granted |= 1ull << i;
    }
    return (int64_t)granted;
}
