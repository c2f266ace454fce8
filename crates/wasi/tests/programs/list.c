/* Lists the directory argv[1] argv[2] times with readdir (fd_readdir underneath), printing each
 * name on a line and "end" after each listing, so that a host can check every listing. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    for (int round = atoi(argv[2]); round > 0; round--) {
        DIR *d = opendir(argv[1]);
        if (d == NULL) {
            perror("opendir");
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) printf("%s\n", e->d_name);
        closedir(d);
        printf("end\n");
    }
    return 0;
}
