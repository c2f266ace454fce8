/* dir_guard DIR MODULE bind|unbind: binds MODULE as the dir.access graft of DIR (a descriptor of
 * it names the binding) from inside the program, or unbinds it, and prints what the call
 * returned. The binding outlives the program: it is its user's, not its process's. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "module.h"
#include "vino_process.h"

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (fd < 0) return 3;
    char point[64];
    snprintf(point, sizeof point, "dir.access/%d", fd);
    if (strcmp(argv[3], "bind") == 0) {
        size_t len;
        char *wasm = slurp(argv[2], &len);
        if (!wasm) return 4;
        printf("load %d\n", vino_graft_load(point, strlen(point), wasm, len));
    } else {
        printf("unload %d\n", vino_graft_unload(point, strlen(point)));
    }
    return 0;
}
