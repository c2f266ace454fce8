/* bad_result.c -- tests result checking: toy.apply returns -1, which is invalid (results must be
 * >= 0). The kernel must treat the call as failed and use the default (arg) instead. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    (void)arg;
    return -1;
}
