/* What the graft-loading test programs share: `slurp` reads a graft module (at most 1 MiB)
 * from a file into memory, NULL if the file cannot be opened. */
#include <stdio.h>
#include <stdlib.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}
