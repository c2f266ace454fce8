/* posix_spawn, waitpid, pipes and exit statuses: the program spawns itself (argv[0] is its
 * module's path) with a first argument naming the child's part. Prints each check; exits 1 at
 * the first that fails. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self;

#include "check.h"

/* Spawns this program with `part` and `arg` (may be NULL) and the file actions `fa`. */
static pid_t child(const char *part, const char *arg, posix_spawn_file_actions_t *fa) {
    char *argv[] = {(char *)self, (char *)part, (char *)arg, NULL};
    pid_t pid = -1;
    int r = posix_spawn(&pid, self, fa, NULL, argv, NULL);
    if (r != 0) {
        errno = r;
        check(0, part);
    }
    return pid;
}

static int wait_for(pid_t pid) {
    int status = -1;
    pid_t r = waitpid(pid, &status, 0);
    if (r != pid)
        check(0, "waitpid");
    return status;
}

/* Reads `fd` to its end into `buf` (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t size) {
    size_t n = 0;
    ssize_t r;
    while (n + 1 < size && (r = read(fd, buf + n, size - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return n;
}

/* The children's parts. */
static int play(const char *part, const char *arg) {
    if (strcmp(part, "exit") == 0)
        return atoi(arg);
    if (strcmp(part, "echo") == 0) {
        char cwd[256];
        printf("%s from %d, parent %d, cwd %s, PWD %s\n", arg, (int)getpid(), (int)getppid(),
               getcwd(cwd, sizeof cwd) ? cwd : "?", getenv("PWD"));
        return 0;
    }
    if (strcmp(part, "count") == 0) {
        /* Reads stdin (or the file `arg`) to its end: the byte count, mod 251, is the status. */
        static char buf[8192];
        size_t total = 0;
        ssize_t r;
        int fd = arg[0] ? open(arg, O_RDONLY) : 0;
        if (fd < 0)
            return 254;
        while ((r = read(fd, buf, sizeof buf)) > 0)
            total += (size_t)r;
        return r < 0 ? 255 : (int)(total % 251);
    }
    fprintf(stderr, "no part %s\n", part);
    return 2;
}

int main(int argc, char **argv) {
    self = argv[0];
    if (argc > 1)
        return play(argv[1], argc > 2 ? argv[2] : "");

    pid_t me = getpid();
    check(me > 0, "getpid");
    printf("pid %d parent %d\n", (int)me, (int)getppid());

    int status = wait_for(child("exit", "7", NULL));
    check(WIFEXITED(status) && WEXITSTATUS(status) == 7, "exit status 7");
    status = wait_for(child("exit", "0", NULL));
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status 0");

    /* The child's stdout into a pipe: its line, its parent, its working directory. */
    int out[2];
    check(pipe(out) == 0, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addclose(&fa, out[1]);
    pid_t pid = child("echo", "hello there", &fa);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    char line[512], cwd[256], want[512];
    read_all(out[0], line, sizeof line);
    close(out[0]);
    check(wait_for(pid) == 0, "echo exited 0");
    snprintf(want, sizeof want, "hello there from %d, parent %d, cwd %s, PWD %s\n", (int)pid, (int)me,
             getcwd(cwd, sizeof cwd), cwd);
    printf("child said: %s", line);
    check(strcmp(line, want) == 0, "the child's line through the pipe, in the parent's directory");

    /* More than the pipe holds, into the child's stdin. */
    int in[2];
    check(pipe(in) == 0, "pipe for stdin");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[0]);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    pid = child("count", NULL, &fa);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    static char block[100000];
    memset(block, 'x', sizeof block);
    size_t sent = 0;
    while (sent < sizeof block) {
        ssize_t w = write(in[1], block + sent, sizeof block - sent);
        if (w <= 0)
            check(0, "write to the pipe");
        sent += (size_t)w;
    }
    /* Not ended while the write end is open: WNOHANG answers 0. */
    int early = waitpid(pid, &status, WNOHANG);
    close(in[1]);
    status = wait_for(pid);
    check(early == 0, "WNOHANG before the end of its input is 0");
    check(WIFEXITED(status) && WEXITSTATUS(status) == (int)(sizeof block % 251), "100000 bytes through a pipe");

    /* stdout to a file opened by a relative path, in the child. */
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "spawn-out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid = child("echo", "to a file", &fa);
    posix_spawn_file_actions_destroy(&fa);
    check(wait_for(pid) == 0, "echo to a file exited 0");
    int fd = open("spawn-out.txt", O_RDONLY);
    check(fd >= 0, "open spawn-out.txt");
    read_all(fd, line, sizeof line);
    close(fd);
    check(strncmp(line, "to a file from ", 15) == 0, "the child's line in the file");

    /* A FIFO by its name: the child opens it to read (opening waits for a writer, so not as a
     * file action, which posix_spawn may wait for), the parent to write. */
    check(mkfifo("fifo", 0600) == 0, "mkfifo");
    pid = child("count", "fifo", NULL);
    fd = open("fifo", O_WRONLY);
    check(fd >= 0, "open the FIFO for writing");
    check(write(fd, "through the fifo", 16) == 16, "write to the FIFO");
    close(fd);
    status = wait_for(pid);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 16, "16 bytes through the FIFO");
    check(mkfifo("fifo", 0600) == -1 && errno == EEXIST, "mkfifo again: EEXIST");
    unlink("fifo");

    /* A blocked child killed: death by signal. */
    check(pipe(in) == 0, "pipe for a child to block on");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[0]);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    pid = child("count", NULL, &fa);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    check(waitpid(pid, &status, WNOHANG) == 0, "WNOHANG on a running child is 0");
    check(kill(pid, SIGKILL) == 0, "kill SIGKILL");
    status = wait_for(pid);
    close(in[1]);
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "killed by SIGKILL");

    check(waitpid(-1, &status, 0) == -1 && errno == ECHILD, "no children left: ECHILD");
    char *none[] = {"nosuch", NULL};
    check(posix_spawn(&pid, "/nosuch.wasm", NULL, NULL, none, NULL) == ENOENT, "posix_spawn of no file: ENOENT");
    check(posix_spawnp(&pid, "nosuch", NULL, NULL, none, NULL) == ENOENT, "posix_spawnp through PATH: ENOENT");
    printf("spawn done\n");
    return 0;
}
