/* bad_victim.c -- tests result checking for vas.pick_victim: returns n, one past the last
 * candidate (the classic off-by-one). The kernel must not index its candidate list with it: the
 * call fails and the LRU candidate is evicted. */
#include "vino_graft.h"

VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) { return n; }
