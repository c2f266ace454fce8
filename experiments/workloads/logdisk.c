/*
 * Logical disk (thesis 4.2.3 / 4.3.6, after de Jonge et al.): a computation
 * graft that turns random block writes into sequential segment writes.
 *
 * A 1 GB disk of 4 KB blocks (262,144 blocks) is divided into 64 KB
 * segments of 16 blocks.  Every write of a logical block goes to the next
 * free slot of the current segment; the graft keeps the logical->physical
 * map, the physical->logical segment summary, the number of live blocks in
 * each segment and the fill of the current segment.  There is no cleaner:
 * segments are taken once, in order, from the free list, so the disk is
 * full after 262,144 writes.
 *
 * The write stream is generated here, from a deterministic generator, so
 * that every build of this file does exactly the same work: 80% of writes
 * go to a hot fifth of the blocks, scattered over the disk.
 */
#include "workload.h"

#define LD_BLOCKS 262144u          /* 1 GB / 4 KB */
#define LD_SEG_BLOCKS 16u          /* 64 KB / 4 KB */
#define LD_SEGS (LD_BLOCKS / LD_SEG_BLOCKS)
#define LD_HOT_BLOCKS (LD_BLOCKS / 5)
#define LD_NONE 0xffffffffu
#define LD_SCATTER 0x9e3779b1u     /* odd: a bijection modulo 2^18 */

static uint32_t ld_map[LD_BLOCKS];     /* logical -> physical */
static uint32_t ld_summary[LD_BLOCKS]; /* physical -> logical */
static uint32_t ld_live[LD_SEGS];      /* live blocks per segment */
static uint32_t ld_free[LD_SEGS];      /* free segments, in allocation order */
static uint32_t ld_free_next, ld_free_count;
static uint32_t ld_cur_seg, ld_cur_fill;
static uint32_t ld_rng;
static uint32_t ld_writes;

VB_EXPORT uint32_t vb_ld_blocks(void)
{
    return LD_BLOCKS;
}

VB_EXPORT void vb_ld_reset(uint32_t seed)
{
    for (uint32_t i = 0; i < LD_BLOCKS; i++) {
        ld_map[i] = LD_NONE;
        ld_summary[i] = LD_NONE;
    }
    for (uint32_t s = 0; s < LD_SEGS; s++) {
        ld_live[s] = 0;
        ld_free[s] = s;
    }
    ld_free_next = 0;
    ld_free_count = LD_SEGS;
    ld_cur_seg = LD_NONE;
    ld_cur_fill = LD_SEG_BLOCKS; /* forces a segment to be taken on the first write */
    ld_rng = seed ? seed : 1u;
    ld_writes = 0;
}

/* Next logical block of the skewed write stream. */
static uint32_t ld_next_block(void)
{
    uint32_t idx;
    if (vb_below(&ld_rng, 10) < 8)
        idx = vb_below(&ld_rng, LD_HOT_BLOCKS);
    else
        idx = LD_HOT_BLOCKS + vb_below(&ld_rng, LD_BLOCKS - LD_HOT_BLOCKS);
    return (idx * LD_SCATTER) & (LD_BLOCKS - 1);
}

/* Write one logical block; returns its new physical block, or LD_NONE if full. */
static uint32_t ld_write(uint32_t lblock)
{
    if (ld_cur_fill == LD_SEG_BLOCKS) {
        if (ld_free_next == ld_free_count)
            return LD_NONE;
        ld_cur_seg = ld_free[ld_free_next++];
        ld_cur_fill = 0;
    }
    uint32_t old = ld_map[lblock];
    if (old != LD_NONE) {
        ld_live[old / LD_SEG_BLOCKS]--;
        ld_summary[old] = LD_NONE;
    }
    uint32_t pblock = ld_cur_seg * LD_SEG_BLOCKS + ld_cur_fill++;
    ld_map[lblock] = pblock;
    ld_summary[pblock] = lblock;
    ld_live[ld_cur_seg]++;
    ld_writes++;
    return pblock;
}

/*
 * Perform the next n writes of the stream.  Returns the physical block of
 * the last one, or LD_NONE if the disk filled up.
 */
VB_EXPORT uint32_t vb_ld_write_next(uint32_t n)
{
    uint32_t pblock = LD_NONE;
    for (uint32_t i = 0; i < n; i++) {
        pblock = ld_write(ld_next_block());
        if (pblock == LD_NONE)
            break;
    }
    return pblock;
}

/* Write a given logical block (for tests and other drivers). */
VB_EXPORT uint32_t vb_ld_write_block(uint32_t lblock)
{
    return ld_write(lblock & (LD_BLOCKS - 1));
}

VB_EXPORT uint32_t vb_ld_lookup(uint32_t lblock)
{
    return ld_map[lblock & (LD_BLOCKS - 1)];
}

VB_EXPORT uint32_t vb_ld_live_total(void)
{
    uint32_t total = 0;
    for (uint32_t s = 0; s < LD_SEGS; s++)
        total += ld_live[s];
    return total;
}

VB_EXPORT uint32_t vb_ld_writes(void)
{
    return ld_writes;
}

/* FNV-1a over the map, the live counts and the write position. */
VB_EXPORT uint64_t vb_ld_checksum(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t prime = 0x100000001b3ull;
    for (uint32_t i = 0; i < LD_BLOCKS; i++)
        h = (h ^ ld_map[i]) * prime;
    for (uint32_t s = 0; s < LD_SEGS; s++)
        h = (h ^ ld_live[s]) * prime;
    h = (h ^ ld_cur_seg) * prime;
    h = (h ^ ld_cur_fill) * prime;
    return h;
}
