/* stream_wrong_length.c -- tests the decode length check: encodes a chunk as itself, but decodes
 * it to one byte fewer than the plain length the kernel asked for. The decode must fail. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    (void)chunk;
    __builtin_memcpy(vino_stream_out(), vino_stream_in(), (size_t)in_len);
    return op == VINO_STREAM_DECODE ? in_len - 1 : in_len;
}
