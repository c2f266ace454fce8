/* Spawns each program named in its arguments twice (the second spawn finds it in its user's
 * cache of compiled programs) and prints, for each spawn, "<path> ok <status>" or
 * "<path> errno <n>". With no arguments it does nothing: it plays its own children. */
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        for (int k = 0; k < 2; k++) {
            char *child_argv[] = {argv[i], NULL};
            pid_t pid = -1;
            int r = posix_spawn(&pid, argv[i], NULL, NULL, child_argv, NULL);
            if (r != 0) {
                printf("%s errno %d\n", argv[i], r);
                continue;
            }
            int status = -1;
            waitpid(pid, &status, 0);
            printf("%s ok %d\n", argv[i], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
    }
    return 0;
}
