/* lz4_stream.c -- a compressing stream graft (file.stream): each chunk is one LZ4 block, made by
 * LZ4's own code (vendor/lz4, LZ4 1.9.4, BSD-2-Clause; the SDK puts it on the include path as
 * lz4/lz4.c). A chunk LZ4 cannot shrink is stored raw. On a socket (a connection's layer) the
 * peer's raw frames come to the decode flagged VINO_STREAM_RAW_INPUT, and are taken as they are:
 * they are what this graft's own encode leaves raw. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

/* Freestanding: no libc, no heap (the hash table lives on the stack), copies by the builtins. */
#define LZ4_FREESTANDING 1
#define LZ4_HEAPMODE 0
#define LZ4LIB_VISIBILITY /* LZ4's functions stay inside the graft, not exported */
#define LZ4_memcpy(dst, src, size) __builtin_memcpy(dst, src, size)
#define LZ4_memset(p, v, s) __builtin_memset(p, v, s)
#define LZ4_memmove(dst, src, size) __builtin_memmove(dst, src, size)
/* LZ4 picks its faster decoding loop by architecture (x86 and some aarch64 only): ask for it
 * here, so that the graft and a native x86 build of this file run the same code. */
#define LZ4_FAST_DEC_LOOP 1
#include "lz4/lz4.c"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)chunk;
    const char *in = (const char *)vino_stream_in();
    char *out = (char *)vino_stream_out();
    if (op == VINO_STREAM_ENCODE) {
        /* Only a block shorter than the chunk is worth storing: capacity in_len - 1. */
        int n = in_len > 1 ? LZ4_compress_default(in, out, in_len, in_len - 1) : 0;
        return n > 0 ? n : VINO_STREAM_RAW;
    }
    if (vino_stream_flags() & VINO_STREAM_RAW_INPUT) {
        __builtin_memcpy(out, in, (uint32_t)in_len);
        return in_len;
    }
    int n = LZ4_decompress_safe(in, out, in_len, (int)vino_stream_plain_len());
    return n >= 0 ? n : VINO_STREAM_FAILED;
}
