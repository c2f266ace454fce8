/*
 * MD5 message digest (RFC 1321), the thesis' stream graft (4.2.2 / 4.3.5).
 *
 * Written from the algorithm's description: 64-byte blocks, four rounds of
 * sixteen steps over the state (A, B, C, D), the sine-derived additive
 * constants, and a final padding with the message length in bits.
 *
 * The data to fingerprint is passed by address.  In the Wasm build the
 * kernel first places it in the module's own input buffer (vb_md5_input),
 * as a stream graft would find it in its argument area.
 */
#include "workload.h"

#define MD5_INPUT_SIZE (1u << 20)

struct md5_ctx {
    uint32_t state[4];
    uint64_t length;      /* bytes fed so far */
    uint32_t pending;     /* bytes waiting in block[] */
    uint8_t block[64];
};

static struct md5_ctx md5;
static uint8_t md5_digest[16];
static uint8_t md5_input[MD5_INPUT_SIZE];

#define F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define H(x, y, z) ((x) ^ (y) ^ (z))
#define I(x, y, z) ((y) ^ ((x) | ~(z)))
#define ROTL(v, s) (((v) << (s)) | ((v) >> (32 - (s))))
#define STEP(f, a, b, c, d, xk, t, s)    \
    do {                                 \
        (a) += f((b), (c), (d)) + (xk) + (t); \
        (a) = ROTL((a), (s));            \
        (a) += (b);                      \
    } while (0)

static inline uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline void store_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void md5_compress(uint32_t state[4], const uint8_t *p)
{
    uint32_t x[16];
    for (int i = 0; i < 16; i++)
        x[i] = load_le32(p + 4 * i);

    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];

    STEP(F, a, b, c, d, x[ 0], 0xd76aa478u,  7);
    STEP(F, d, a, b, c, x[ 1], 0xe8c7b756u, 12);
    STEP(F, c, d, a, b, x[ 2], 0x242070dbu, 17);
    STEP(F, b, c, d, a, x[ 3], 0xc1bdceeeu, 22);
    STEP(F, a, b, c, d, x[ 4], 0xf57c0fafu,  7);
    STEP(F, d, a, b, c, x[ 5], 0x4787c62au, 12);
    STEP(F, c, d, a, b, x[ 6], 0xa8304613u, 17);
    STEP(F, b, c, d, a, x[ 7], 0xfd469501u, 22);
    STEP(F, a, b, c, d, x[ 8], 0x698098d8u,  7);
    STEP(F, d, a, b, c, x[ 9], 0x8b44f7afu, 12);
    STEP(F, c, d, a, b, x[10], 0xffff5bb1u, 17);
    STEP(F, b, c, d, a, x[11], 0x895cd7beu, 22);
    STEP(F, a, b, c, d, x[12], 0x6b901122u,  7);
    STEP(F, d, a, b, c, x[13], 0xfd987193u, 12);
    STEP(F, c, d, a, b, x[14], 0xa679438eu, 17);
    STEP(F, b, c, d, a, x[15], 0x49b40821u, 22);
    STEP(G, a, b, c, d, x[ 1], 0xf61e2562u,  5);
    STEP(G, d, a, b, c, x[ 6], 0xc040b340u,  9);
    STEP(G, c, d, a, b, x[11], 0x265e5a51u, 14);
    STEP(G, b, c, d, a, x[ 0], 0xe9b6c7aau, 20);
    STEP(G, a, b, c, d, x[ 5], 0xd62f105du,  5);
    STEP(G, d, a, b, c, x[10], 0x02441453u,  9);
    STEP(G, c, d, a, b, x[15], 0xd8a1e681u, 14);
    STEP(G, b, c, d, a, x[ 4], 0xe7d3fbc8u, 20);
    STEP(G, a, b, c, d, x[ 9], 0x21e1cde6u,  5);
    STEP(G, d, a, b, c, x[14], 0xc33707d6u,  9);
    STEP(G, c, d, a, b, x[ 3], 0xf4d50d87u, 14);
    STEP(G, b, c, d, a, x[ 8], 0x455a14edu, 20);
    STEP(G, a, b, c, d, x[13], 0xa9e3e905u,  5);
    STEP(G, d, a, b, c, x[ 2], 0xfcefa3f8u,  9);
    STEP(G, c, d, a, b, x[ 7], 0x676f02d9u, 14);
    STEP(G, b, c, d, a, x[12], 0x8d2a4c8au, 20);
    STEP(H, a, b, c, d, x[ 5], 0xfffa3942u,  4);
    STEP(H, d, a, b, c, x[ 8], 0x8771f681u, 11);
    STEP(H, c, d, a, b, x[11], 0x6d9d6122u, 16);
    STEP(H, b, c, d, a, x[14], 0xfde5380cu, 23);
    STEP(H, a, b, c, d, x[ 1], 0xa4beea44u,  4);
    STEP(H, d, a, b, c, x[ 4], 0x4bdecfa9u, 11);
    STEP(H, c, d, a, b, x[ 7], 0xf6bb4b60u, 16);
    STEP(H, b, c, d, a, x[10], 0xbebfbc70u, 23);
    STEP(H, a, b, c, d, x[13], 0x289b7ec6u,  4);
    STEP(H, d, a, b, c, x[ 0], 0xeaa127fau, 11);
    STEP(H, c, d, a, b, x[ 3], 0xd4ef3085u, 16);
    STEP(H, b, c, d, a, x[ 6], 0x04881d05u, 23);
    STEP(H, a, b, c, d, x[ 9], 0xd9d4d039u,  4);
    STEP(H, d, a, b, c, x[12], 0xe6db99e5u, 11);
    STEP(H, c, d, a, b, x[15], 0x1fa27cf8u, 16);
    STEP(H, b, c, d, a, x[ 2], 0xc4ac5665u, 23);
    STEP(I, a, b, c, d, x[ 0], 0xf4292244u,  6);
    STEP(I, d, a, b, c, x[ 7], 0x432aff97u, 10);
    STEP(I, c, d, a, b, x[14], 0xab9423a7u, 15);
    STEP(I, b, c, d, a, x[ 5], 0xfc93a039u, 21);
    STEP(I, a, b, c, d, x[12], 0x655b59c3u,  6);
    STEP(I, d, a, b, c, x[ 3], 0x8f0ccc92u, 10);
    STEP(I, c, d, a, b, x[10], 0xffeff47du, 15);
    STEP(I, b, c, d, a, x[ 1], 0x85845dd1u, 21);
    STEP(I, a, b, c, d, x[ 8], 0x6fa87e4fu,  6);
    STEP(I, d, a, b, c, x[15], 0xfe2ce6e0u, 10);
    STEP(I, c, d, a, b, x[ 6], 0xa3014314u, 15);
    STEP(I, b, c, d, a, x[13], 0x4e0811a1u, 21);
    STEP(I, a, b, c, d, x[ 4], 0xf7537e82u,  6);
    STEP(I, d, a, b, c, x[11], 0xbd3af235u, 10);
    STEP(I, c, d, a, b, x[ 2], 0x2ad7d2bbu, 15);
    STEP(I, b, c, d, a, x[ 9], 0xeb86d391u, 21);

    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

VB_EXPORT uint8_t *vb_md5_input(void)
{
    return md5_input;
}

VB_EXPORT uint32_t vb_md5_input_size(void)
{
    return MD5_INPUT_SIZE;
}

VB_EXPORT void vb_md5_begin(void)
{
    md5.state[0] = 0x67452301u;
    md5.state[1] = 0xefcdab89u;
    md5.state[2] = 0x98badcfeu;
    md5.state[3] = 0x10325476u;
    md5.length = 0;
    md5.pending = 0;
}

VB_EXPORT void vb_md5_feed(const uint8_t *data, uint32_t len)
{
    md5.length += len;
    if (md5.pending > 0) {
        while (len > 0 && md5.pending < 64) {
            md5.block[md5.pending++] = *data++;
            len--;
        }
        if (md5.pending < 64)
            return;
        md5_compress(md5.state, md5.block);
        md5.pending = 0;
    }
    while (len >= 64) {
        md5_compress(md5.state, data);
        data += 64;
        len -= 64;
    }
    while (len > 0) {
        md5.block[md5.pending++] = *data++;
        len--;
    }
}

/* Finish the digest; returns the address of the 16 digest bytes. */
VB_EXPORT const uint8_t *vb_md5_end(void)
{
    uint64_t bits = md5.length * 8;
    uint8_t pad[72];
    uint32_t padlen = (md5.pending < 56) ? 56 - md5.pending : 120 - md5.pending;

    pad[0] = 0x80;
    for (uint32_t i = 1; i < padlen; i++)
        pad[i] = 0;
    for (int i = 0; i < 8; i++)
        pad[padlen + i] = (uint8_t)(bits >> (8 * i));
    vb_md5_feed(pad, padlen + 8);

    for (int i = 0; i < 4; i++)
        store_le32(md5_digest + 4 * i, md5.state[i]);
    return md5_digest;
}
