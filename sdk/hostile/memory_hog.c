/* memory_hog.c -- tests the memory cap: grows linear memory 1 MiB at a time until memory.grow
 * fails (or the kernel aborts the graft for asking past the cap), then touches every page it got,
 * so the memory is really committed. The kernel must keep the graft within its cap, and abort it
 * if the ABI says growing past the cap is a failure. Returns the number of pages it ended with. */
#include "vino_graft.h"

#define WASM_PAGE 65536u

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    (void)arg;
    while (__builtin_wasm_memory_grow(0, 16) != (size_t)-1) {
    }
    size_t pages = __builtin_wasm_memory_size(0);
    for (size_t p = 0; p < pages; p++)
        *(volatile uint8_t *)(uintptr_t)(p * WASM_PAGE + WASM_PAGE - 1) = 0xA5;
    return (int64_t)pages;
}
