/* bad_indirect.c -- tests control-flow integrity: calls a function through a pointer cast to the
 * wrong type. Wasm checks the signature of every indirect call, so the graft traps instead of
 * jumping into the middle of something. (The cast is undefined behaviour in C; the volatile
 * pointer stops clang from exploiting that.) */
#include "vino_graft.h"

static int32_t takes_one(int32_t x) { return x + 1; }

typedef int64_t (*wrong_fn)(int64_t, int64_t, int64_t);

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    wrong_fn volatile f = (wrong_fn)(void *)takes_one;
    return f(arg, arg, arg);
}
