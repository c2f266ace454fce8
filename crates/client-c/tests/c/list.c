/* list.c -- lists a directory with vino_readdir, which reads it page by page.
 *
 *   list PATH ROUNDS
 *
 * Prints each name on a line and "end" after each listing. */
#include <stdio.h>
#include <stdlib.h>

#include "vino.h"

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    vino_client *c = vino_connect(NULL);
    if (c == NULL) {
        fprintf(stderr, "connect: %s\n", vino_last_error(NULL));
        return 1;
    }
    for (int round = atoi(argv[2]); round > 0; round--) {
        struct vino_dirent *entries;
        int n = vino_readdir(c, argv[1], &entries);
        if (n < 0) {
            fprintf(stderr, "readdir: %d %s\n", n, vino_last_error(c));
            return 1;
        }
        for (int i = 0; i < n; i++) printf("%s\n", entries[i].name);
        vino_readdir_free(entries, (size_t)n);
        printf("end\n");
    }
    vino_disconnect(c);
    return 0;
}
