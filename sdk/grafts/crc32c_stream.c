/* crc32c_stream.c -- an integrity stream graft (file.stream): a chunk is stored as its bytes and
 * their CRC32C (Castagnoli, little-endian) over the chunk index and the bytes, so a flipped bit on
 * the device, or a chunk found at another index, fails the read (EIO) instead of being returned. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

#define CRC_BYTES 4

static uint32_t crc_table[8][256];
static bool crc_ready;

/* Slicing-by-8 tables of the reflected polynomial 0x82F63B78. */
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = true;
}

static uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Continues crc (pre-inverted) over n bytes. */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, uint32_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = load32(p) ^ crc, hi = load32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return crc;
}

static uint32_t chunk_crc(uint64_t chunk, const uint8_t *p, uint32_t n) {
    uint8_t index[8];
    for (int i = 0; i < 8; i++)
        index[i] = (uint8_t)(chunk >> (8 * i));
    return ~crc_update(crc_update(~0u, index, 8), p, n);
}

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    if (!crc_ready)
        crc_init();
    const uint8_t *in = vino_stream_in();
    uint8_t *out = vino_stream_out();
    uint32_t n = (uint32_t)in_len;
    if (op == VINO_STREAM_ENCODE) {
        __builtin_memcpy(out, in, n);
        uint32_t crc = chunk_crc((uint64_t)chunk, in, n);
        for (int i = 0; i < CRC_BYTES; i++)
            out[n + i] = (uint8_t)(crc >> (8 * i));
        return (int32_t)(n + CRC_BYTES);
    }
    uint32_t plain = vino_stream_plain_len();
    if (n != plain + CRC_BYTES || chunk_crc((uint64_t)chunk, in, plain) != load32(in + plain))
        return VINO_STREAM_FAILED;
    __builtin_memcpy(out, in, plain);
    return (int32_t)plain;
}
