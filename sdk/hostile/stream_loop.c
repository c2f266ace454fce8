/* stream_loop.c -- tests the stream graft's CPU budget: loops forever on an encode of a chunk
 * whose first byte is 'L', and copies the chunk otherwise. The looping call must be stopped at
 * the budget and fail; the next chunk must still go through the same instance. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)chunk;
    volatile const uint8_t *in = vino_stream_in();
    while (op == VINO_STREAM_ENCODE && in_len > 0 && in[0] == 'L') {
    }
    __builtin_memcpy(vino_stream_out(), vino_stream_in(), (size_t)in_len);
    return in_len;
}
