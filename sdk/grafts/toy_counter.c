/* toy_counter.c -- a well-behaved toy.apply graft that changes kernel state.
 *
 * Adds its argument to toy cell 0 and returns the new value. vino_toy_get takes a shared lock on
 * the cell, vino_toy_set upgrades it to exclusive and logs the old value, so if anything later in
 * this invocation fails (a trap, a deadline, a negative -- invalid -- result) the kernel puts the
 * old value back. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    int64_t v = vino_toy_get(0) + arg;
    vino_toy_set(0, v);
    return v; /* < 0 would be invalid: the transaction aborts and cell 0 keeps its value */
}
