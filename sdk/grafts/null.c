/* null.c -- the null graft for toy.apply: returns its argument, exactly as the default does.
 * Measures the bare cost of crossing into a graft and back (thesis 6.3, "null graft"). */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) { return arg; }
