/* oob_store.c -- tests memory isolation: a store far outside the graft's linear memory (the
 * kernel caps memory at 16 MiB; 0xFFFFFFF0 is near 4 GiB). Wasm bounds-checks it: the graft traps
 * instead of scribbling on the kernel. The volatile pointer stops clang from treating the store
 * as undefined behaviour and dropping it. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    volatile int64_t *p = (volatile int64_t *)(uintptr_t)0xFFFFFFF0u;
    *p = arg;
    return arg;
}
