/* infinite_loop.c -- tests the CPU budget: toy.apply never returns. The kernel must stop it
 * (fuel / epoch deadline), abort the transaction and let the default answer. The volatile
 * counter keeps the compiler from proving the loop side-effect free and deleting it. */
#include "vino_graft.h"

static volatile uint64_t spins;

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    for (;;)
        spins += (uint64_t)arg;
}
