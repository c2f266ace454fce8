/* bad_log_ptr.c -- tests pointer checking in graft-callable functions: hands vino_log a buffer
 * that lies outside the graft's memory (and a huge length). The kernel must bounds-check the
 * range against the graft's memory, not read whatever lies there; the transaction aborts. */
#include "vino_graft.h"

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    vino_log((const char *)(uintptr_t)0xFFFFFF00u, 0x7FFFFFFF);
    return arg;
}
