/* sha256_allow.c -- an executable-fingerprint graft (exec.verify, Small 1998 4.2): the module's
 * bytes stream through SHA-256 (FIPS 180-4, written here from the standard), and the program may
 * run only if its digest is on the owner's allow-list.
 *
 *   allow-list  up to ALLOW_MAX digests, kept in this graft's memory. The owner adds one with
 *               vino_ctl_allow(w0, w1, w2, w3): the digest's 32 bytes as four 64-bit words,
 *               word 0 first, each little-endian (byte i of a word is value >> 8i), so the bytes
 *               come in the order `sha256sum` prints them; vino_ctl_clear() empties the list;
 *               vino_ctl_count() says how many it holds. Or it writes the list itself
 *               (`vino graft write-memory` at the symbols `sha256_allow_list` and
 *               `sha256_allow_count`, the address from `graft_symbol`).
 *   empty list  denies every program: an allow-list allows what is on it and nothing else, so
 *               a verifier bound before its list is written refuses (and a list cleared by
 *               mistake stops programs rather than lets them all through).
 *   answer      at the end, the digest at the start of vino_args and 0 (listed) or 1 (not).
 *
 * The digest equals `sha256sum` of the module file. */
#define VINO_EXEC_VERIFY_ARGS
#include "vino_graft.h"

#define ALLOW_MAX 64

VINO_SHARED uint8_t sha256_allow_list[ALLOW_MAX][32];
VINO_SHARED uint32_t sha256_allow_count;

/* ---- SHA-256 ---- */

struct sha256 {
    uint32_t h[8];
    uint64_t bytes;     /* hashed so far */
    uint8_t block[64];  /* a partial block */
    uint32_t filled;    /* bytes of it */
};

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One round; the eight working variables rotate by renaming, not by moves. */
#define ROUND(a, b, c, d, e, f, g, h, k, w)                                                      \
    do {                                                                                         \
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + (g ^ (e & (f ^ g))) + (k) + (w); \
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) | (c & (a | b)));        \
        d += t1;                                                                                 \
        h = t1 + t2;                                                                             \
    } while (0)

/* The message schedule kept as 16 words that roll (W[i] overwrites W[i - 16]): sixteen named
 * variables the compiler keeps in Wasm locals, not a 64-word array in linear memory. */
#define S0(x) (ror(x, 7) ^ ror(x, 18) ^ ((x) >> 3))
#define S1(x) (ror(x, 17) ^ ror(x, 19) ^ ((x) >> 10))
#define NEXT(w0, w1, w9, w14) (w0 += S1(w14) + w9 + S0(w1))

#define EIGHT(i, w0, w1, w2, w3, w4, w5, w6, w7)                                                 \
    do {                                                                                         \
        ROUND(a, b, c, d, e, f, g, hh, K[(i) + 0], w0);                                          \
        ROUND(hh, a, b, c, d, e, f, g, K[(i) + 1], w1);                                          \
        ROUND(g, hh, a, b, c, d, e, f, K[(i) + 2], w2);                                          \
        ROUND(f, g, hh, a, b, c, d, e, K[(i) + 3], w3);                                          \
        ROUND(e, f, g, hh, a, b, c, d, K[(i) + 4], w4);                                          \
        ROUND(d, e, f, g, hh, a, b, c, K[(i) + 5], w5);                                          \
        ROUND(c, d, e, f, g, hh, a, b, K[(i) + 6], w6);                                          \
        ROUND(b, c, d, e, f, g, hh, a, K[(i) + 7], w7);                                          \
    } while (0)

/* The next 16 schedule words, each from the four it depends on (W[i-16], W[i-15], W[i-7], W[i-2]). */
#define SCHEDULE()                                                                               \
    do {                                                                                         \
        NEXT(x0, x1, x9, x14);                                                                   \
        NEXT(x1, x2, x10, x15);                                                                  \
        NEXT(x2, x3, x11, x0);                                                                   \
        NEXT(x3, x4, x12, x1);                                                                   \
        NEXT(x4, x5, x13, x2);                                                                   \
        NEXT(x5, x6, x14, x3);                                                                   \
        NEXT(x6, x7, x15, x4);                                                                   \
        NEXT(x7, x8, x0, x5);                                                                    \
        NEXT(x8, x9, x1, x6);                                                                    \
        NEXT(x9, x10, x2, x7);                                                                   \
        NEXT(x10, x11, x3, x8);                                                                  \
        NEXT(x11, x12, x4, x9);                                                                  \
        NEXT(x12, x13, x5, x10);                                                                 \
        NEXT(x13, x14, x6, x11);                                                                 \
        NEXT(x14, x15, x7, x12);                                                                 \
        NEXT(x15, x0, x8, x13);                                                                  \
    } while (0)

static void compress(uint32_t h[8], const uint8_t *p) {
    uint32_t x0 = load_be(p), x1 = load_be(p + 4), x2 = load_be(p + 8), x3 = load_be(p + 12);
    uint32_t x4 = load_be(p + 16), x5 = load_be(p + 20), x6 = load_be(p + 24), x7 = load_be(p + 28);
    uint32_t x8 = load_be(p + 32), x9 = load_be(p + 36), x10 = load_be(p + 40), x11 = load_be(p + 44);
    uint32_t x12 = load_be(p + 48), x13 = load_be(p + 52), x14 = load_be(p + 56), x15 = load_be(p + 60);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i += 16) {
        if (i)
            SCHEDULE();
        EIGHT(i, x0, x1, x2, x3, x4, x5, x6, x7);
        EIGHT(i + 8, x8, x9, x10, x11, x12, x13, x14, x15);
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

static void sha256_init(struct sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    for (int i = 0; i < 8; i++)
        s->h[i] = iv[i];
    s->bytes = 0;
    s->filled = 0;
}

static void sha256_update(struct sha256 *s, const uint8_t *p, uint32_t n) {
    s->bytes += n;
    if (s->filled) {
        while (n && s->filled < 64) {
            s->block[s->filled++] = *p++;
            n--;
        }
        if (s->filled < 64)
            return;
        compress(s->h, s->block);
        s->filled = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        compress(s->h, p);
    for (uint32_t i = 0; i < n; i++)
        s->block[i] = p[i];
    s->filled = n;
}

static void sha256_final(struct sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->bytes * 8;
    uint32_t n = s->filled;
    s->block[n++] = 0x80;
    if (n > 56) {
        while (n < 64)
            s->block[n++] = 0;
        compress(s->h, s->block);
        n = 0;
    }
    while (n < 56)
        s->block[n++] = 0;
    for (int i = 0; i < 8; i++)
        s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(s->h, s->block);
    for (int i = 0; i < 8; i++)
        store_be(out + 4 * i, s->h[i]);
}

/* ---- The allow-list ---- */

VINO_CONTROL(allow) int32_t allow(int64_t w0, int64_t w1, int64_t w2, int64_t w3) {
    if (sha256_allow_count >= ALLOW_MAX)
        return -1;
    const int64_t words[4] = {w0, w1, w2, w3};
    uint8_t *d = sha256_allow_list[sha256_allow_count];
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < 8; i++)
            d[8 * w + i] = (uint8_t)((uint64_t)words[w] >> (8 * i));
    return (int32_t)++sha256_allow_count;
}

VINO_CONTROL(clear) int32_t clear(void) {
    sha256_allow_count = 0;
    return 0;
}

VINO_CONTROL(count) int32_t count(void) { return (int32_t)sha256_allow_count; }

static int listed(const uint8_t digest[32]) {
    uint32_t n = sha256_allow_count < ALLOW_MAX ? sha256_allow_count : ALLOW_MAX;
    for (uint32_t k = 0; k < n; k++) {
        uint8_t diff = 0;
        for (int i = 0; i < 32; i++)
            diff |= (uint8_t)(sha256_allow_list[k][i] ^ digest[i]);
        if (!diff)
            return 1;
    }
    return 0;
}

/* ---- The graftpoint ---- */

static struct sha256 state;

VINO_GRAFT(exec_verify) int32_t exec_verify(int32_t op, int32_t len) {
    switch (op) {
    case VINO_EXEC_BEGIN:
        sha256_init(&state);
        return 0;
    case VINO_EXEC_DATA:
        if (len < 0 || len > VINO_EXEC_CHUNK)
            return 1;
        sha256_update(&state, vino_args, (uint32_t)len);
        return 0;
    case VINO_EXEC_END: {
        uint8_t digest[32];
        sha256_final(&state, digest);
        for (int i = 0; i < 32; i++)
            vino_args[i] = digest[i];
        return listed(digest) ? 0 : 1;
    }
    default:
        return 1;
    }
}
