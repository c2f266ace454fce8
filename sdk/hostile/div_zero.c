/* div_zero.c -- tests arithmetic traps: integer division by zero (Wasm's i64.div_s traps). The
 * divisor is read through a volatile so clang cannot fold the division away as undefined. */
#include "vino_graft.h"

static volatile int64_t zero = 0;

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) { return arg / zero; }
