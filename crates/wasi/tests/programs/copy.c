/* copy SRC DST: copies a file ("-" is the standard input or output); on an error prints
 * what failed with strerror and exits 1. `copy --sleep N` sleeps N seconds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--sleep") == 0) {
        sleep(atoi(argv[2]));
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: copy SRC DST\n");
        return 2;
    }
    int in = strcmp(argv[1], "-") ? open(argv[1], O_RDONLY) : 0;
    if (in < 0) {
        fprintf(stderr, "copy: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    int out = strcmp(argv[2], "-") ? open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644) : 1;
    if (out < 0) {
        fprintf(stderr, "copy: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) {
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, n - done);
            if (w < 0) {
                fprintf(stderr, "copy: writing %s: %s\n", argv[2], strerror(errno));
                return 1;
            }
            done += w;
        }
    }
    if (n < 0) {
        fprintf(stderr, "copy: reading %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    return close(out) == 0 ? 0 : 1;
}
