/* chacha20poly1305_stream.c -- an encrypting stream graft (file.stream): each chunk is sealed
 * with ChaCha20-Poly1305 (RFC 8439's AEAD), written here from the RFC.
 *
 *   key    256 bits, given by the file's owner with four control calls
 *          vino_ctl_set_key(word, value), word 0..3 each taking 64 bits (little-endian, word 0
 *          first); kept only in this graft's memory, which no one but the instance reads. Until
 *          all four words are set (and after vino_ctl_forget_key()) every chunk gets
 *          VINO_STREAM_NEED_KEY (EACCES).
 *   nonce  the first 12 of the kernel's fresh nonce bytes for the chunk's write.
 *   AD     the chunk index (8 bytes, little-endian): a chunk moved to another index fails.
 *   output ciphertext, then the 16-byte tag; a decode whose tag does not match fails (EIO).
 *
 * Built with -DCHACHA_AD_FROM_NONCE (tests only) the associated data is the nonce's last 12
 * bytes instead, so RFC 8439's test vector (2.8.2), whose AD is 12 bytes, runs through it. */
#define VINO_STREAM_ARGS
#include "vino_graft.h"

#define KEY_WORDS 4
#define TAG_BYTES 16
#define NONCE_USED 12

static uint8_t key[32];
static uint32_t key_words_set; /* bit w: word w given */

VINO_CONTROL(set_key) int32_t set_key(int32_t word, int64_t value) {
    if (word < 0 || word >= KEY_WORDS)
        return -1;
    for (int i = 0; i < 8; i++)
        key[8 * word + i] = (uint8_t)((uint64_t)value >> (8 * i));
    key_words_set |= 1u << word;
    return 0;
}

VINO_CONTROL(forget_key) int32_t forget_key(void) {
    for (int i = 0; i < 32; i++)
        ((volatile uint8_t *)key)[i] = 0;
    key_words_set = 0;
    return 0;
}

static uint32_t load32(const uint8_t *p) {
    uint32_t v;
    __builtin_memcpy(&v, p, 4); /* little-endian, as wasm32 and x86 are */
    return v;
}

static void store32(uint8_t *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }

/* ---- ChaCha20 (RFC 8439, 2.3-2.4). ---- */

#define ROTL(a, b) (((a) << (b)) | ((a) >> (32 - (b))))
#define QR(a, b, c, d)                                                                                 \
    a += b, d ^= a, d = ROTL(d, 16), c += d, b ^= c, b = ROTL(b, 12), a += b, d ^= a, d = ROTL(d, 8), \
        c += d, b ^= c, b = ROTL(b, 7)

static void chacha_block(const uint32_t in[16], uint32_t out[16]) {
    uint32_t x[16];
    for (int i = 0; i < 16; i++)
        x[i] = in[i];
    for (int i = 0; i < 10; i++) {
        QR(x[0], x[4], x[8], x[12]), QR(x[1], x[5], x[9], x[13]);
        QR(x[2], x[6], x[10], x[14]), QR(x[3], x[7], x[11], x[15]);
        QR(x[0], x[5], x[10], x[15]), QR(x[1], x[6], x[11], x[12]);
        QR(x[2], x[7], x[8], x[13]), QR(x[3], x[4], x[9], x[14]);
    }
    for (int i = 0; i < 16; i++)
        out[i] = x[i] + in[i];
}

static void chacha_init(uint32_t state[16], const uint8_t *nonce, uint32_t counter) {
    state[0] = 0x61707865, state[1] = 0x3320646e, state[2] = 0x79622d32, state[3] = 0x6b206574;
    for (int i = 0; i < 8; i++)
        state[4 + i] = load32(key + 4 * i);
    state[12] = counter;
    for (int i = 0; i < 3; i++)
        state[13 + i] = load32(nonce + 4 * i);
}

/* out = in XOR the key stream from block 1 on (block 0 keys Poly1305). */
static void chacha_xor(const uint8_t *nonce, const uint8_t *in, uint8_t *out, uint32_t n) {
    uint32_t state[16], stream[16];
    chacha_init(state, nonce, 1);
    for (; n >= 64; n -= 64, in += 64, out += 64, state[12]++) {
        chacha_block(state, stream);
        for (int i = 0; i < 16; i++)
            store32(out + 4 * i, load32(in + 4 * i) ^ stream[i]);
    }
    if (n > 0) {
        uint8_t last[64];
        chacha_block(state, stream);
        for (int i = 0; i < 16; i++)
            store32(last + 4 * i, stream[i]);
        for (uint32_t i = 0; i < n; i++)
            out[i] = in[i] ^ last[i];
    }
}

/* ---- Poly1305 (RFC 8439, 2.5), 26-bit limbs. The AEAD pads every part to 16 bytes, so only
 * whole blocks are ever absorbed. ---- */

struct poly {
    uint32_t r[5], h[5], pad[4];
};

static void poly_init(struct poly *p, const uint8_t k[32]) {
    p->r[0] = load32(k + 0) & 0x3ffffff;
    p->r[1] = (load32(k + 3) >> 2) & 0x3ffff03;
    p->r[2] = (load32(k + 6) >> 4) & 0x3ffc0ff;
    p->r[3] = (load32(k + 9) >> 6) & 0x3f03fff;
    p->r[4] = (load32(k + 12) >> 8) & 0x00fffff;
    for (int i = 0; i < 5; i++)
        p->h[i] = 0;
    for (int i = 0; i < 4; i++)
        p->pad[i] = load32(k + 16 + 4 * i);
}

static void poly_blocks(struct poly *p, const uint8_t *m, uint32_t n) {
    const uint32_t r0 = p->r[0], r1 = p->r[1], r2 = p->r[2], r3 = p->r[3], r4 = p->r[4];
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    uint32_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], h3 = p->h[3], h4 = p->h[4];
    for (; n >= 16; n -= 16, m += 16) {
        h0 += load32(m) & 0x3ffffff;
        h1 += (load32(m + 3) >> 2) & 0x3ffffff;
        h2 += (load32(m + 6) >> 4) & 0x3ffffff;
        h3 += (load32(m + 9) >> 6) & 0x3ffffff;
        h4 += (load32(m + 12) >> 8) | (1u << 24);
        uint64_t d0 = (uint64_t)h0 * r0 + (uint64_t)h1 * s4 + (uint64_t)h2 * s3 + (uint64_t)h3 * s2 + (uint64_t)h4 * s1;
        uint64_t d1 = (uint64_t)h0 * r1 + (uint64_t)h1 * r0 + (uint64_t)h2 * s4 + (uint64_t)h3 * s3 + (uint64_t)h4 * s2;
        uint64_t d2 = (uint64_t)h0 * r2 + (uint64_t)h1 * r1 + (uint64_t)h2 * r0 + (uint64_t)h3 * s4 + (uint64_t)h4 * s3;
        uint64_t d3 = (uint64_t)h0 * r3 + (uint64_t)h1 * r2 + (uint64_t)h2 * r1 + (uint64_t)h3 * r0 + (uint64_t)h4 * s4;
        uint64_t d4 = (uint64_t)h0 * r4 + (uint64_t)h1 * r3 + (uint64_t)h2 * r2 + (uint64_t)h3 * r1 + (uint64_t)h4 * r0;
        uint32_t c = (uint32_t)(d0 >> 26);
        h0 = (uint32_t)d0 & 0x3ffffff;
        d1 += c, c = (uint32_t)(d1 >> 26), h1 = (uint32_t)d1 & 0x3ffffff;
        d2 += c, c = (uint32_t)(d2 >> 26), h2 = (uint32_t)d2 & 0x3ffffff;
        d3 += c, c = (uint32_t)(d3 >> 26), h3 = (uint32_t)d3 & 0x3ffffff;
        d4 += c, c = (uint32_t)(d4 >> 26), h4 = (uint32_t)d4 & 0x3ffffff;
        h0 += c * 5, c = h0 >> 26, h0 &= 0x3ffffff, h1 += c;
    }
    p->h[0] = h0, p->h[1] = h1, p->h[2] = h2, p->h[3] = h3, p->h[4] = h4;
}

/* Absorbs n bytes, the last partial block zero-padded (the AEAD's pad16). */
static void poly_padded(struct poly *p, const uint8_t *m, uint32_t n) {
    uint32_t whole = n & ~15u;
    poly_blocks(p, m, whole);
    if (n > whole) {
        uint8_t last[16] = {0};
        for (uint32_t i = 0; i < n - whole; i++)
            last[i] = m[whole + i];
        poly_blocks(p, last, 16);
    }
}

static void poly_finish(struct poly *p, uint8_t tag[16]) {
    uint32_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], h3 = p->h[3], h4 = p->h[4], c;
    c = h1 >> 26, h1 &= 0x3ffffff, h2 += c;
    c = h2 >> 26, h2 &= 0x3ffffff, h3 += c;
    c = h3 >> 26, h3 &= 0x3ffffff, h4 += c;
    c = h4 >> 26, h4 &= 0x3ffffff, h0 += c * 5;
    c = h0 >> 26, h0 &= 0x3ffffff, h1 += c;
    /* h - p, kept if it did not go negative. */
    uint32_t g0 = h0 + 5;
    c = g0 >> 26, g0 &= 0x3ffffff;
    uint32_t g1 = h1 + c;
    c = g1 >> 26, g1 &= 0x3ffffff;
    uint32_t g2 = h2 + c;
    c = g2 >> 26, g2 &= 0x3ffffff;
    uint32_t g3 = h3 + c;
    c = g3 >> 26, g3 &= 0x3ffffff;
    uint32_t g4 = h4 + c - (1u << 26);
    uint32_t keep_g = (g4 >> 31) - 1;
    h0 = (h0 & ~keep_g) | (g0 & keep_g);
    h1 = (h1 & ~keep_g) | (g1 & keep_g);
    h2 = (h2 & ~keep_g) | (g2 & keep_g);
    h3 = (h3 & ~keep_g) | (g3 & keep_g);
    h4 = (h4 & ~keep_g) | (g4 & keep_g);
    uint32_t w[4] = {h0 | (h1 << 26), (h1 >> 6) | (h2 << 20), (h2 >> 12) | (h3 << 14), (h3 >> 18) | (h4 << 8)};
    uint64_t f = 0;
    for (int i = 0; i < 4; i++) {
        f = (uint64_t)w[i] + p->pad[i] + (f >> 32);
        store32(tag + 4 * i, (uint32_t)f);
    }
}

/* The tag of ciphertext ct under the one-time key of the nonce (RFC 8439, 2.8). */
static void aead_tag(const uint8_t *nonce, const uint8_t *ad, uint32_t ad_len, const uint8_t *ct, uint32_t n,
                     uint8_t tag[16]) {
    uint32_t state[16], block0[16];
    uint8_t otk[32], lengths[16];
    chacha_init(state, nonce, 0);
    chacha_block(state, block0);
    for (int i = 0; i < 8; i++)
        store32(otk + 4 * i, block0[i]);
    struct poly p;
    poly_init(&p, otk);
    poly_padded(&p, ad, ad_len);
    poly_padded(&p, ct, n);
    uint64_t lens[2] = {ad_len, n};
    __builtin_memcpy(lengths, lens, 16);
    poly_blocks(&p, lengths, 16);
    poly_finish(&p, tag);
}

static bool tags_equal(const uint8_t *a, const uint8_t *b) {
    uint8_t diff = 0;
    for (int i = 0; i < TAG_BYTES; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

VINO_GRAFT(file_stream) int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len) {
    if (key_words_set != (1u << KEY_WORDS) - 1)
        return VINO_STREAM_NEED_KEY;
    const uint8_t *nonce = vino_stream_nonce();
#ifdef CHACHA_AD_FROM_NONCE
    const uint8_t *ad = nonce + NONCE_USED;
    uint32_t ad_len = VINO_STREAM_NONCE_BYTES - NONCE_USED;
    (void)chunk;
#else
    uint8_t ad[8];
    uint32_t ad_len = sizeof ad;
    for (int i = 0; i < 8; i++)
        ad[i] = (uint8_t)((uint64_t)chunk >> (8 * i));
#endif
    const uint8_t *in = vino_stream_in();
    uint8_t *out = vino_stream_out();
    uint32_t n = (uint32_t)in_len;
    if (op == VINO_STREAM_ENCODE) {
        chacha_xor(nonce, in, out, n);
        aead_tag(nonce, ad, ad_len, out, n, out + n);
        return (int32_t)(n + TAG_BYTES);
    }
    uint32_t plain = vino_stream_plain_len();
    uint8_t tag[TAG_BYTES];
    if (n != plain + TAG_BYTES)
        return VINO_STREAM_FAILED;
    aead_tag(nonce, ad, ad_len, in, plain, tag);
    if (!tags_equal(tag, in + plain))
        return VINO_STREAM_FAILED;
    chacha_xor(nonce, in, out, plain);
    return (int32_t)plain;
}
