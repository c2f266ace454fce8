/* stream_clock.c -- tests that a stream graft gets no clock: mixes vino_now_ns into its output,
 * so two readers of one chunk would see different bytes. file.stream must refuse the module at
 * load, naming the import. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)op, (void)chunk;
    uint8_t *out = vino_stream_out();
    __builtin_memcpy(out, vino_stream_in(), (size_t)in_len);
    if (in_len > 0)
        out[0] ^= (uint8_t)vino_now_ns();
    return in_len;
}
