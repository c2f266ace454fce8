/* What a hostile (or careless) program tries with processes, each a mode (argv[1]):
 *   hang            waits forever on a pipe nobody writes (it holds the write end itself)
 *   spawnloop PATH  spawns `PATH hang` until the kernel refuses; prints how many and the errno,
 *                   then kills and reaps them all
 *   peek PATH       prints what opening PATH gives (0 or the errno)
 *   orphan PATH     spawns `PATH hang` and exits at once, without waiting
 *   kill PID        prints what kill(PID, SIGTERM) gives (0 or the errno)
 *   child PATH M A  spawns `PATH M A`, waits for it, and exits with its status
 *   flood PATH      spawns `PATH hang` with its stdin a pipe, and writes to it until the pipe
 *                   is full: blocks there (the child never reads) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t spawn_hang(const char *path, posix_spawn_file_actions_t *fa) {
    char *argv[] = {(char *)path, "hang", NULL};
    pid_t pid = -1;
    int r = posix_spawn(&pid, path, fa, NULL, argv, NULL);
    if (r != 0) {
        errno = r;
        return -1;
    }
    return pid;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    if (strcmp(mode, "hang") == 0) {
        int p[2];
        if (pipe(p) != 0)
            return 1;
        char c;
        return (int)read(p[0], &c, 1);
    }
    if (strcmp(mode, "spawnloop") == 0) {
        pid_t kids[256];
        int n = 0;
        while (n < 256) {
            pid_t pid = spawn_hang(arg, NULL);
            if (pid < 0)
                break;
            kids[n++] = pid;
        }
        printf("spawned %d, then errno %d (%s)\n", n, errno, strerror(errno));
        fflush(stdout);
        for (int i = 0; i < n; i++)
            kill(kids[i], SIGKILL);
        int status, reaped = 0;
        while (wait(&status) > 0)
            reaped += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        printf("reaped %d killed\n", reaped);
        return 0;
    }
    if (strcmp(mode, "peek") == 0) {
        int fd = open(arg, O_RDONLY);
        printf("open %s: %d\n", arg, fd >= 0 ? 0 : errno);
        return 0;
    }
    if (strcmp(mode, "orphan") == 0) {
        pid_t pid = spawn_hang(arg, NULL);
        printf("left %d\n", (int)pid);
        return pid > 0 ? 0 : 1;
    }
    if (strcmp(mode, "kill") == 0) {
        int r = kill(atoi(arg), SIGTERM);
        printf("kill: %d\n", r == 0 ? 0 : errno);
        return 0;
    }
    if (strcmp(mode, "child") == 0 && argc == 5) {
        char *cargv[] = {argv[2], argv[3], argv[4], NULL};
        pid_t pid;
        if (posix_spawn(&pid, argv[2], NULL, NULL, cargv, NULL) != 0)
            return 3;
        int status;
        if (waitpid(pid, &status, 0) != pid)
            return 4;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
    }
    if (strcmp(mode, "flood") == 0) {
        int p[2];
        if (pipe(p) != 0)
            return 1;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[0], 0);
        if (spawn_hang(arg, &fa) < 0)
            return 1;
        close(p[0]);
        static char block[65536];
        printf("flooding\n");
        fflush(stdout);
        for (;;)
            if (write(p[1], block, sizeof block) < 0)
                return 2;
    }
    fprintf(stderr, "no mode %s\n", mode);
    return 2;
}
