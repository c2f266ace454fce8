/* Prints its working directory, then opens each path given and prints what it read from it or
 * the errno that refused it (by name for those a confined program meets). */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

static const char *name(int e) {
    switch (e) {
    case ENOENT: return "ENOENT";
    case EXDEV: return "EXDEV";
    case ENOTCAPABLE: return "ENOTCAPABLE";
    case EACCES: return "EACCES";
    default: return "other";
    }
}

int main(int argc, char **argv) {
    char cwd[256];
    printf("cwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "r");
        if (f == NULL) {
            printf("%s: %s\n", argv[i], name(errno));
            continue;
        }
        char buf[64] = {0};
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        printf("%s: %.*s\n", argv[i], (int)n, buf);
    }
    return 0;
}
