/* stream_partial_trap.c -- tests that a stream graft's partial output is never used: writes half
 * of a chunk's output, then traps, when the chunk's first byte is 'T'; copies it otherwise. The
 * kernel must fail the trapping chunk and return nothing of what was written. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)op, (void)chunk;
    const uint8_t *in = vino_stream_in();
    uint8_t *out = vino_stream_out();
    if (in_len > 0 && in[0] == 'T') {
        __builtin_memcpy(out, in, (size_t)in_len / 2);
        VINO_TRAP();
    }
    __builtin_memcpy(out, in, (size_t)in_len);
    return in_len;
}
