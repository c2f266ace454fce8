/* system, popen and pclose without a shell: VINO ships none. The command is split into words
 * as sh would split it (blanks; '...' literal; "..." with \ escaping $ ` " \ and newline; \
 * outside quotes escaping any character), and the first word is run with posix_spawnp.
 * Anything that needs a shell to mean what it says is refused with ENOTSUP rather than passed
 * on as an argument: unquoted | & ; < > ( ) $ ` * ? [, a ~ or # starting a word, a $ or `
 * inside double quotes, and a first word NAME=value (an assignment). Part of the compatibility
 * layer (compiled as one unit after vino_process.c); sdk/PORTING.md documents it. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ; /* <unistd.h> declares it only for _GNU_SOURCE */

/* The words of `command`, NULL-terminated, in one allocation (free the array alone); NULL with
 * errno ENOTSUP (shell syntax), EINVAL (an unterminated quote) or ENOMEM. */
static char **vino_split_command(const char *command) {
    size_t len = strlen(command);
    /* At most one word per two characters, plus the NULL; the words fit in `len` + NULs. */
    size_t max_words = len / 2 + 2;
    char **words = malloc(max_words * sizeof(char *) + 2 * len + 2);
    if (words == NULL)
        return NULL;
    char *out = (char *)(words + max_words);
    size_t n = 0;
    const char *p = command;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (*p == '\0')
            break;
        if (*p == '~' || *p == '#')
            goto needs_shell;
        words[n++] = out;
        int quoted = 0, assignment = 0;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\n') {
            char c = *p++;
            if (c == '\'') {
                quoted = 1;
                while (*p != '\'' && *p != '\0')
                    *out++ = *p++;
                if (*p++ != '\'')
                    goto unterminated;
            } else if (c == '"') {
                quoted = 1;
                while (*p != '"' && *p != '\0') {
                    if (*p == '$' || *p == '`')
                        goto needs_shell;
                    if (*p == '\\' && strchr("$`\"\\\n", p[1]) != NULL && p[1] != '\0') {
                        if (p[1] == '\n') {
                            p += 2;
                            continue;
                        }
                        p++;
                    }
                    *out++ = *p++;
                }
                if (*p++ != '"')
                    goto unterminated;
            } else if (c == '\\') {
                if (*p == '\0')
                    break;
                if (*p == '\n') {
                    p++;
                    continue;
                }
                quoted = 1;
                *out++ = *p++;
            } else if (strchr("|&;<>()$`*?[", c) != NULL) {
                goto needs_shell;
            } else {
                if (c == '=' && n == 1 && !quoted && out != words[0])
                    assignment = 1;
                *out++ = c;
            }
        }
        *out++ = '\0';
        if (assignment)
            goto needs_shell;
    }
    words[n] = NULL;
    return words;
needs_shell:
    free(words);
    errno = ENOTSUP;
    return NULL;
unterminated:
    free(words);
    errno = EINVAL;
    return NULL;
}

int system(const char *command) {
    if (command == NULL)
        return 1; /* a command processor is there: commands run, within the limits above */
    char **argv = vino_split_command(command);
    if (argv == NULL)
        return -1;
    if (argv[0] == NULL) {
        free(argv);
        return 0; /* as sh -c "" */
    }
    /* POSIX: SIGCHLD blocked and SIGINT, SIGQUIT ignored while waiting; the child gets the
     * mask and those two as they were. */
    struct sigaction ignore, old_int, old_quit;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigset_t chld, old_mask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old_mask);
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGQUIT, &ignore, &old_quit);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    if (old_int.sa_handler != SIG_IGN)
        sigaddset(&defaults, SIGINT);
    if (old_quit.sa_handler != SIG_IGN)
        sigaddset(&defaults, SIGQUIT);
    posix_spawnattr_setsigmask(&attr, &old_mask);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    pid_t pid;
    int status = -1;
    int r = posix_spawnp(&pid, argv[0], NULL, &attr, argv, environ);
    if (r == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    } else if (r == ENOENT || r == ENOTDIR) {
        status = 127 << 8; /* as sh: not found */
    } else if (r == EACCES || r == ENOEXEC) {
        status = 126 << 8; /* as sh: found, cannot run */
    } else {
        errno = r;
    }
    int saved = errno;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    posix_spawnattr_destroy(&attr);
    free(argv);
    errno = saved;
    return status;
}

/* The children popen started and not yet pclosed, by their stream. */
struct vino_popened {
    FILE *stream;
    pid_t pid;
    struct vino_popened *next;
};
static struct vino_popened *vino_popened;

/* The pipe end the child uses, put at `child_fd`; the child closes the others and, as POSIX
 * asks, the streams of earlier popens. */
static int vino_popen_actions(posix_spawn_file_actions_t *fa, const int fds[2], int mine, int child_fd) {
    int theirs = fds[1 - mine];
    int r = 0;
    if (theirs != child_fd) {
        r = posix_spawn_file_actions_adddup2(fa, theirs, child_fd);
        if (r == 0)
            r = posix_spawn_file_actions_addclose(fa, theirs);
    }
    if (r == 0)
        r = posix_spawn_file_actions_addclose(fa, fds[mine]);
    for (struct vino_popened *p = vino_popened; p != NULL && r == 0; p = p->next)
        r = posix_spawn_file_actions_addclose(fa, fileno(p->stream));
    return r;
}

FILE *popen(const char *command, const char *mode) {
    int reading = mode[0] == 'r';
    if ((mode[0] != 'r' && mode[0] != 'w') || (mode[1] != '\0' && strcmp(mode + 1, "e") != 0)) {
        errno = EINVAL;
        return NULL;
    }
    char **argv = vino_split_command(command);
    if (argv == NULL)
        return NULL;
    struct vino_popened *entry = malloc(sizeof *entry);
    int fds[2] = {-1, -1};
    int r = entry == NULL ? ENOMEM : 0;
    if (r == 0 && argv[0] == NULL)
        r = EINVAL;
    if (r == 0 && pipe(fds) < 0)
        r = errno;
    /* The parent keeps the read end to read the child's output, the write end to feed it. */
    int mine = reading ? 0 : 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (r == 0)
        r = vino_popen_actions(&fa, fds, mine, reading ? 1 : 0);
    pid_t pid = 0;
    if (r == 0)
        r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    FILE *stream = NULL;
    if (r == 0) {
        close(fds[1 - mine]);
        fds[1 - mine] = -1;
        stream = fdopen(fds[mine], reading ? "r" : "w");
        if (stream == NULL)
            r = errno;
    }
    if (r != 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        if (pid > 0)
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
        free(entry);
        errno = r;
        return NULL;
    }
    *entry = (struct vino_popened){.stream = stream, .pid = pid, .next = vino_popened};
    vino_popened = entry;
    return stream;
}

int pclose(FILE *stream) {
    struct vino_popened **at = &vino_popened;
    while (*at != NULL && (*at)->stream != stream)
        at = &(*at)->next;
    struct vino_popened *entry = *at;
    if (entry == NULL) {
        errno = ECHILD;
        return -1;
    }
    *at = entry->next;
    pid_t pid = entry->pid;
    free(entry);
    fclose(stream);
    int status;
    pid_t r;
    while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    return r < 0 ? -1 : status;
}
