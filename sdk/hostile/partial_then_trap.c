/* partial_then_trap.c -- tests undo: writes toy cells 0..3, then traps. The abort must run the
 * undo log so that all four cells hold their old values afterwards, and drop all four locks. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    for (int32_t k = 0; k < 4; k++)
        vino_toy_set(k, arg + 1000 + k);
    VINO_TRAP();
}
