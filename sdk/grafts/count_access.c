/* count_access.c -- a permissive dir.access graft: allows everything, counting what it was asked
 * by kind (lookup, open, create, remove, setattr) and summing the bytes of each name (so every
 * name is read). Bound on the
 * root it puts every name of every walk through a graft without changing any answer: the POSIX
 * suites pass with it as without it. */
#include "vino_graft.h"

VINO_SHARED uint64_t asked[5];
VINO_SHARED uint64_t name_bytes;

VINO_GRAFT(dir_access)
int32_t dir_access(int32_t op, int32_t uid, int32_t gid, int32_t flags, int64_t dir, int32_t name_len, int64_t now_s) {
    (void)uid;
    (void)gid;
    (void)flags;
    (void)dir;
    (void)now_s;
    if (op >= 0 && op < 5)
        asked[op]++;
    for (int32_t i = 0; i < name_len && i < 4096; i++)
        name_bytes += vino_args[i];
    return 0;
}
