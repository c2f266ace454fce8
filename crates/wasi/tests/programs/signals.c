/* Signals between VINO processes: handlers, the mask, SIGCHLD, SIGPIPE, a SIGTERM handler that
 * flushes and exits. The program spawns itself (argv[0] is its module's path) with a first
 * argument naming the child's part. Prints each check; exits 1 at the first that fails. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self;

#include "check.h"

/* Spawns this program with `part`, its stdout to `out` unless -1. */
static pid_t child(const char *part, int out, int closing) {
    char *argv[] = {(char *)self, (char *)part, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out, 1);
        posix_spawn_file_actions_addclose(&fa, out);
    }
    if (closing >= 0)
        posix_spawn_file_actions_addclose(&fa, closing);
    pid_t pid = -1;
    int r = posix_spawn(&pid, self, &fa, NULL, argv, NULL);
    posix_spawn_file_actions_destroy(&fa);
    if (r != 0) {
        errno = r;
        check(0, part);
    }
    return pid;
}

static int wait_for(pid_t pid) {
    int status = -1;
    while (waitpid(pid, &status, 0) != pid)
        if (errno != EINTR)
            check(0, "waitpid");
    return status;
}

static volatile sig_atomic_t caught[32];
static volatile int info_signo;

static void count(int sig) {
    caught[sig]++;
}

static void with_info(int sig, siginfo_t *info, void *context) {
    (void)context;
    caught[sig]++;
    info_signo = info->si_signo;
}

static void on(int sig, void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0)
        check(0, "sigaction");
}

/* SIGTERM's handler in the "term" child: what stdout holds goes out, then a clean exit. */
static void flush_and_exit(int sig) {
    (void)sig;
    printf(" and flushed on SIGTERM\n");
    fflush(stdout);
    _exit(0);
}

static int play(const char *part) {
    if (strcmp(part, "term") == 0) {
        on(SIGTERM, flush_and_exit, 0);
        /* Buffered (stdout is a pipe), not written until the handler flushes it. */
        printf("buffered output");
        fputs("ready\n", stderr); /* unbuffered: the parent may kill now */
        for (;;)
            pause();
    }
    if (strcmp(part, "kill-parent") == 0)
        return kill(getppid(), SIGUSR1) == 0 ? 0 : 1;
    if (strcmp(part, "pipe-default") == 0) {
        int fds[2];
        if (pipe(fds) != 0)
            return 3;
        close(fds[0]);
        (void)write(fds[1], "x", 1); /* SIGPIPE ends the process here */
        return 4;
    }
    if (strcmp(part, "ignored") == 0) {
        struct sigaction old;
        return sigaction(SIGUSR2, NULL, &old) == 0 && old.sa_handler == SIG_IGN ? 0 : 5;
    }
    return 2;
}

int main(int argc, char **argv) {
    self = argv[0];
    if (argc > 1)
        return play(argv[1]);

    /* To itself: raise has run the handler when it returns; kill by the next safe point. */
    on(SIGUSR1, count, 0);
    check(raise(SIGUSR1) == 0 && caught[SIGUSR1] == 1, "raise runs the handler");
    check(kill(getpid(), SIGUSR1) == 0, "kill to itself");
    sched_yield();
    check(caught[SIGUSR1] == 2, "the handler ran by the next safe point");

    /* Blocked: pending, not run; unblocked: run. */
    sigset_t block, pending, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    check(sigprocmask(SIG_BLOCK, &block, &old) == 0, "sigprocmask blocks SIGUSR1");
    raise(SIGUSR1);
    check(caught[SIGUSR1] == 2, "a blocked signal's handler does not run");
    check(sigpending(&pending) == 0 && sigismember(&pending, SIGUSR1) == 1, "it is pending");
    check(sigprocmask(SIG_SETMASK, &old, NULL) == 0, "unblocked");
    sched_yield();
    check(caught[SIGUSR1] == 3, "delivered on unblocking");

    /* SA_SIGINFO, SA_RESETHAND (SIGWINCH's default is to ignore). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = with_info;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    check(sigaction(SIGWINCH, &sa, NULL) == 0, "sigaction SA_SIGINFO|SA_RESETHAND");
    raise(SIGWINCH);
    raise(SIGWINCH);
    check(caught[SIGWINCH] == 1 && info_signo == SIGWINCH, "the handler ran once, with si_signo");
    struct sigaction now;
    check(sigaction(SIGWINCH, NULL, &now) == 0 && now.sa_handler == SIG_DFL, "then back to the default");
    check(signal(SIGUSR2, count) == SIG_DFL && signal(SIGUSR2, SIG_DFL) == count, "signal returns the old handler");
    check(sigaction(SIGKILL, &sa, NULL) == -1 && errno == EINVAL, "SIGKILL cannot be handled: EINVAL");

    /* From another process: sigsuspend waits for it, with SIGUSR1 blocked until then. */
    check(sigprocmask(SIG_BLOCK, &block, &old) == 0, "SIGUSR1 blocked before the child starts");
    pid_t pid = child("kill-parent", -1, -1);
    sigset_t none;
    sigemptyset(&none);
    check(sigsuspend(&none) == -1 && errno == EINTR && caught[SIGUSR1] == 4, "sigsuspend: the child's SIGUSR1");
    sigprocmask(SIG_SETMASK, &old, NULL);
    check(WEXITSTATUS(wait_for(pid)) == 0, "the child's kill succeeded");

    /* SIGCHLD when a child ends. */
    on(SIGCHLD, count, SA_RESTART);
    pid = child("kill-parent", -1, -1);
    wait_for(pid);
    sched_yield();
    check(caught[SIGCHLD] >= 1, "SIGCHLD on the child's exit");
    check(kill(pid, 0) == -1 && errno == ESRCH, "the reaped child is gone: ESRCH");

    /* A SIGTERM handler that flushes the child's buffered output and exits 0. */
    int out[2], err[2];
    check(pipe(out) == 0 && pipe(err) == 0, "pipes");
    char *argv_term[] = {(char *)self, "term", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addclose(&fa, out[1]);
    posix_spawn_file_actions_addclose(&fa, err[0]);
    posix_spawn_file_actions_addclose(&fa, err[1]);
    check(posix_spawn(&pid, self, &fa, NULL, argv_term, NULL) == 0, "spawn the SIGTERM child");
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(err[1]);
    char buf[256];
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    check(n > 0 && strncmp(buf, "ready", 5) == 0, "the child is ready");
    check(kill(pid, SIGTERM) == 0, "kill SIGTERM");
    size_t got = 0;
    while ((n = read(out[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    int status = wait_for(pid);
    close(out[0]);
    close(err[0]);
    printf("term child wrote: %s", buf);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the SIGTERM child exited 0");
    check(strcmp(buf, "buffered output and flushed on SIGTERM\n") == 0, "its buffered output came out");

    /* SIGPIPE: ignored, the write fails with EPIPE; by default, it kills. */
    int p[2];
    check(pipe(p) == 0, "pipe");
    close(p[0]);
    signal(SIGPIPE, SIG_IGN);
    check(write(p[1], "x", 1) == -1 && errno == EPIPE, "SIGPIPE ignored: EPIPE");
    close(p[1]);
    /* Ignored stays ignored in a child; it sets its own SIGPIPE back to default below. */
    signal(SIGUSR2, SIG_IGN);
    check(WEXITSTATUS(wait_for(child("ignored", -1, -1))) == 0, "an ignored signal stays ignored in the child");
    signal(SIGUSR2, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    status = wait_for(child("pipe-default", -1, -1));
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE, "SIGPIPE by default kills");

    check(kill(pid, SIGTERM) == -1 && errno == ESRCH, "kill of no process: ESRCH");
    printf("signals done\n");
    return 0;
}
