/* stream_overflow.c -- tests the stream graft's output bound: claims more encoded bytes than a
 * chunk may grow to (in_len + VINO_STREAM_MAX_GROWTH + 1). The kernel must fail the chunk and
 * take nothing from the output area. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)op, (void)chunk;
    return in_len + VINO_STREAM_MAX_GROWTH + 1;
}
