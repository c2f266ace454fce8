/*
 * Shared definitions for the extension-technology workloads.
 *
 * Every workload is plain C with no libc: the same file is compiled to a
 * native static library (linked into vino-experiments) and to a wasm32 module
 * (loaded by wasmtime and by wasmi).  Functions marked VB_EXPORT form the
 * interface the host calls; everything else is private to the module.
 */
#ifndef VINO_BENCH_WORKLOAD_H
#define VINO_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#define VB_EXPORT __attribute__((visibility("default")))

/* xorshift32: the deterministic generator used by every workload. */
static inline uint32_t vb_xorshift32(uint32_t *state)
{
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return x;
}

/* Uniform value in [0, bound) without a division. */
static inline uint32_t vb_below(uint32_t *state, uint32_t bound)
{
    return (uint32_t)(((uint64_t)vb_xorshift32(state) * bound) >> 32);
}

#endif
