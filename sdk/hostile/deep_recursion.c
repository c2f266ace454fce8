/* deep_recursion.c -- tests stack exhaustion: unbounded recursion in toy.apply.
 *
 * Even arg: each frame keeps a volatile buffer on the shadow stack in linear memory (64 KiB,
 * placed first in memory by --stack-first), so the stack pointer runs below address 0, wraps,
 * and the next store traps out of bounds instead of overwriting the graft's data.
 * Odd arg: frames without linear-memory locals, so it is Wasm's own call stack that overflows
 * (wasmtime's stack limit traps).
 * The base cases test a volatile that never matches, and the work after each call (a volatile
 * store, a use of the buffer) keeps clang from turning the recursion into a loop. */
#include "vino_graft.h"

static volatile int64_t never = -1;
static volatile int64_t sink;

static __attribute__((noinline)) int64_t shadow(int64_t n) {
    volatile uint8_t buf[64];
    buf[n & 63] = (uint8_t)n;
    if (n == never)
        return 0;
    int64_t r = shadow(n + 1);
    return r + buf[(n * 7) & 63];
}

static __attribute__((noinline)) int64_t native(int64_t n) {
    if (n == never)
        return 0;
    int64_t r = native(n + 1);
    sink = r;
    return r ^ n;
}

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    return (arg & 1) ? native(arg) : shadow(arg);
}
