/* noswitch.c -- the NoSwitch block placement policy (Smith and Seltzer; Small 1998, 7.5 and
 * 7.7.7) as a graft for file.block_buddy.
 *
 * FFS moves a file to another cylinder group at its first indirect block (file block 12), so a
 * file of more than twelve blocks is split across the disk. NoSwitch puts block 12 right after
 * block 11 instead; every other decision is left to the kernel's default (FFS) by answering 0,
 * so later switches (every maxbpg blocks) still happen.
 *
 * Arguments: the file's inode, the file block being allocated, the device block of the previous
 * file block (0 if none), the inode's cylinder group, the number of groups and blocks per group.
 * Result: a preferred device block, or 0 for "no preference". */
#include "vino_graft.h"

#define NDIRECT 12 /* direct block pointers in an inode */

VINO_GRAFT(file_block_buddy)
int64_t file_block_buddy(int64_t ino, int64_t index, int64_t prev, int32_t group, int32_t groups,
                         int64_t per_group) {
    (void)ino;
    (void)group;
    if (index == NDIRECT && prev > 0 && prev + 1 < (int64_t)groups * per_group)
        return prev + 1;
    return 0;
}
