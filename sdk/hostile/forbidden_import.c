/* forbidden_import.c -- tests the import check: imports `vino_format_disk` from module "vino",
 * which no graftpoint allows. The kernel must refuse the module at load time, naming the import
 * and the allowed set; it never runs. */
#include "vino_graft.h"

VINO_IMPORT(vino_format_disk) void vino_format_disk(int32_t disk);

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    vino_format_disk((int32_t)arg);
    return arg;
}
