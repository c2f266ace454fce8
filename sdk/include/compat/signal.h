/* <signal.h> for programs `vino build` makes: wasi-libc's (which needs _WASI_EMULATED_SIGNAL,
 * defined here so programs need no flag) with what it leaves out and VINO provides
 * (sdk/lib/vino_signal.c): signal sets, sigaction, sigprocmask, sigpending, sigsuspend, kill.
 * Signals come from the kernel: kill from another process, a child's exit (SIGCHLD), a write
 * to a pipe nobody reads (SIGPIPE). */
#ifndef _WASI_EMULATED_SIGNAL
#define _WASI_EMULATED_SIGNAL
#endif
#include_next <signal.h>

#ifndef VINO_COMPAT_SIGNAL_H
#define VINO_COMPAT_SIGNAL_H
#include <__typedef_sigset_t.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

#define SIG_BLOCK 0
#define SIG_UNBLOCK 1
#define SIG_SETMASK 2

/* Linux's values. SA_RESTART: a blocking call the handler interrupts resumes after it;
 * SA_RESETHAND: the handler runs once; SA_NODEFER: the signal is not blocked while it runs;
 * SA_SIGINFO: sa_sigaction is called, with si_signo set. The others are accepted and do
 * nothing. */
#define SA_NOCLDSTOP 1
#define SA_NOCLDWAIT 2
#define SA_SIGINFO 4
#define SA_ONSTACK 0x08000000
#define SA_RESTART 0x10000000
#define SA_NODEFER 0x40000000
#define SA_RESETHAND 0x80000000
#define SA_NOMASK SA_NODEFER
#define SA_ONESHOT SA_RESETHAND

union sigval {
    int sival_int;
    void *sival_ptr;
};

/* What a SA_SIGINFO handler is given: si_signo; the rest is zero. */
typedef struct {
    int si_signo;
    int si_errno;
    int si_code;
    pid_t si_pid;
    uid_t si_uid;
    int si_status;
    void *si_addr;
    union sigval si_value;
} siginfo_t;

struct sigaction {
    union {
        void (*sa_handler)(int);
        void (*sa_sigaction)(int, siginfo_t *, void *);
    } __sa_handler;
    sigset_t sa_mask;
    int sa_flags;
};
#define sa_handler __sa_handler.sa_handler
#define sa_sigaction __sa_handler.sa_sigaction

int sigemptyset(sigset_t *);
int sigfillset(sigset_t *);
int sigaddset(sigset_t *, int);
int sigdelset(sigset_t *, int);
int sigismember(const sigset_t *, int);
int sigaction(int, const struct sigaction *__restrict, struct sigaction *__restrict);
int sigprocmask(int, const sigset_t *__restrict, sigset_t *__restrict);
int pthread_sigmask(int, const sigset_t *__restrict, sigset_t *__restrict);
int sigpending(sigset_t *);
int sigsuspend(const sigset_t *);
int kill(pid_t, int);

#ifdef __cplusplus
}
#endif
#endif
