/* lock_hog.c -- tests deadlines under locks: takes the exclusive lock on toy cell 0 (by writing
 * it) and then spins forever. Once another thread waits for the cell the graft gets a deadline;
 * the kernel must abort it, undo the write (cell 0 keeps its old value) and release the lock. */
#include "vino_graft.h"

static volatile uint64_t spins;

/* It spins reading, not writing, its memory: every write of a call is logged for rollback, and
 * a loop of writes would fill its owner's memory with the log before any deadline came. */
VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    vino_toy_set(0, 1);
    while (spins == 0) /* nothing writes it */
        ;
    return arg;
}
