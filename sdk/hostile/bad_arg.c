/* bad_arg.c -- tests argument checking in graft-callable functions: reads toy cell -5. The
 * kernel function must check the key as a system call checks its arguments and abort the
 * transaction rather than index out of its table. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) { return vino_toy_get(-5) + arg; }
