/* Signals on the kernel's: sigaction, the mask, kill, and the trampoline the kernel calls.
 * Part of the compatibility layer (compiled as one unit after vino_compat.c, whose
 * vino_result it uses); include/compat/signal.h declares it.
 *
 * The kernel keeps each signal's disposition (default, ignored, handled) and the mask; the
 * handlers stay here. At a safe point (on the way out of an I/O or waiting call) the kernel
 * calls the registered trampoline with sig blocked; it runs the handler sigaction gave,
 * applying sa_mask, SA_NODEFER and SA_RESETHAND around it, which the kernel leaves to us.
 *
 * Built with VINO_COMPAT_PORTABLE, nothing here imports the kernel: handlers are kept and
 * raise runs them at once (as wasi-libc's emulation does), the rest fails with ENOSYS. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vino_process.h"

#define VINO_NSIG 32 /* Linux's standard signals, 1 to 31: the kernel's */

#ifdef VINO_COMPAT_PORTABLE
/* No kernel to ask: the disposition before is the one kept here. */
#define VINO_SIGACTION(sig, disposition, flags) ((void)(disposition), (void)(flags), vino_disposition(vino_actions[sig].sa_handler))
static int VINO_SIGPROCMASK(int how, uint64_t set, uint64_t *old) {
    (void)how, (void)set, (void)old;
    return -ENOSYS;
}
static int VINO_SIGPENDING(uint64_t *set) {
    (void)set;
    return -ENOSYS;
}
static int VINO_SIGSUSPEND(uint64_t mask) {
    (void)mask;
    return -ENOSYS;
}
static int VINO_KILL(int pid, int sig) {
    (void)pid, (void)sig;
    return -ENOSYS;
}
#else
#define VINO_SIGACTION vino_sigaction
#define VINO_SIGPROCMASK vino_sigprocmask
#define VINO_SIGPENDING vino_sigpending
#define VINO_SIGSUSPEND vino_sigsuspend
#define VINO_KILL vino_kill
#endif

/* SIG_IGN and SIG_ERR are these functions' addresses in wasi-libc's <signal.h> (on wasm 1 is
 * a function's address too). Defined here with everything else of wasi-libc's signal
 * emulation, so that library, if a program also links it, is never pulled in to clash. */
void __SIG_IGN(int sig) {
    (void)sig;
}

void __SIG_ERR(int sig) {
    (void)sig;
}

static uint64_t vino_bit(int sig) {
    return 1ull << (sig - 1);
}

static int vino_valid(int sig) {
    if (sig < 1 || sig > 64) {
        errno = EINVAL;
        return 0;
    }
    return 1;
}

int sigemptyset(sigset_t *set) {
    *set = 0;
    return 0;
}

int sigfillset(sigset_t *set) {
    *set = ~0ull;
    return 0;
}

int sigaddset(sigset_t *set, int sig) {
    if (!vino_valid(sig))
        return -1;
    *set |= vino_bit(sig);
    return 0;
}

int sigdelset(sigset_t *set, int sig) {
    if (!vino_valid(sig))
        return -1;
    *set &= ~vino_bit(sig);
    return 0;
}

int sigismember(const sigset_t *set, int sig) {
    if (!vino_valid(sig))
        return -1;
    return (*set & vino_bit(sig)) != 0;
}

/* What the program gave sigaction for each signal; `known` once the kernel's disposition is
 * (a program starts with those its parent ignored ignored). */
static struct sigaction vino_actions[VINO_NSIG];
static uint8_t vino_known[VINO_NSIG];

static int vino_disposition(void (*handler)(int)) {
    if (handler == SIG_DFL)
        return VINO_SIG_DEFAULT;
    if (handler == SIG_IGN)
        return VINO_SIG_IGNORE;
    return VINO_SIG_HANDLED;
}

/* Runs the handler of `sig`, the kernel having blocked sig; errno is the interrupted code's. */
static void vino_run_handler(int sig) {
    if (sig < 1 || sig >= VINO_NSIG)
        return;
    struct sigaction a = vino_actions[sig];
    if (vino_disposition(a.sa_handler) != VINO_SIG_HANDLED)
        return;
    int saved_errno = errno;
    if (a.sa_flags & SA_RESETHAND) {
        (void)VINO_SIGACTION(sig, VINO_SIG_DEFAULT, 0);
        memset(&vino_actions[sig], 0, sizeof vino_actions[sig]);
    }
    uint64_t old = 0;
    int masked = a.sa_mask != 0 || (a.sa_flags & SA_NODEFER);
    if (masked) {
        (void)VINO_SIGPROCMASK(SIG_BLOCK, a.sa_mask & ~vino_bit(sig), &old);
        if (a.sa_flags & SA_NODEFER)
            (void)VINO_SIGPROCMASK(SIG_UNBLOCK, vino_bit(sig), NULL);
    }
    if (a.sa_flags & SA_SIGINFO) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        info.si_signo = sig;
        a.sa_sigaction(sig, &info, NULL);
    } else {
        a.sa_handler(sig);
    }
    if (masked)
        (void)VINO_SIGPROCMASK(SIG_SETMASK, old, NULL);
    errno = saved_errno;
}

/* The trampoline the kernel calls (through the function table) to run a handler, registered
 * with the first handler sigaction installs: a program that handles no signal links none of the
 * above. */
static int vino_trampoline_set;

static void vino_register_trampoline(void) {
    if (vino_trampoline_set)
        return;
    vino_trampoline_set = 1;
#ifndef VINO_COMPAT_PORTABLE
    (void)vino_signal_trampoline(vino_run_handler);
#endif
}

/* The kernel's disposition of `sig`, asked without changing it. */
static int vino_query(int sig) {
    return VINO_SIGACTION(sig, VINO_SIG_QUERY, 0);
}

int sigaction(int sig, const struct sigaction *__restrict act, struct sigaction *__restrict old) {
    if (sig < 1 || sig >= VINO_NSIG) {
        errno = EINVAL;
        return -1;
    }
    int was;
    if (act != NULL) {
        int flags = (act->sa_flags & SA_RESTART) ? VINO_SA_RESTART : 0;
        was = VINO_SIGACTION(sig, vino_disposition(act->sa_handler), flags);
    } else if (vino_known[sig]) {
        was = vino_disposition(vino_actions[sig].sa_handler);
    } else {
        was = vino_query(sig);
    }
    if (was < 0) {
        errno = -was;
        return -1;
    }
    if (old != NULL) {
        *old = vino_actions[sig];
        if (was != VINO_SIG_HANDLED) {
            memset(old, 0, sizeof *old);
            old->sa_handler = was == VINO_SIG_IGNORE ? SIG_IGN : SIG_DFL;
        }
    }
    if (act != NULL) {
        vino_actions[sig] = *act;
        if (vino_disposition(act->sa_handler) == VINO_SIG_HANDLED)
            vino_register_trampoline();
    } else if (was != VINO_SIG_HANDLED) {
        memset(&vino_actions[sig], 0, sizeof vino_actions[sig]);
        vino_actions[sig].sa_handler = was == VINO_SIG_IGNORE ? SIG_IGN : SIG_DFL;
    }
    vino_known[sig] = 1;
    return 0;
}

/* signal() as on Linux: the handler stays, and interrupted calls resume. */
void (*signal(int sig, void (*handler)(int)))(int) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    if (sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

void (*bsd_signal(int sig, void (*handler)(int)))(int) {
    return signal(sig, handler);
}

/* System V's: the handler runs once, and the signal is not blocked while it runs. */
void (*__sysv_signal(int sig, void (*handler)(int)))(int) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESETHAND | SA_NODEFER;
    if (sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

int sigprocmask(int how, const sigset_t *__restrict set, sigset_t *__restrict old) {
    if (how < SIG_BLOCK || how > SIG_SETMASK) {
        errno = EINVAL;
        return -1;
    }
    uint64_t was = 0;
    /* No set: only the old mask, which blocking nothing answers. */
    int r = set != NULL ? VINO_SIGPROCMASK(how, *set, &was) : VINO_SIGPROCMASK(SIG_BLOCK, 0, &was);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    if (old != NULL)
        *old = was;
    return 0;
}

/* One thread per process: the process's mask. Returns the errno rather than setting it. */
int pthread_sigmask(int how, const sigset_t *__restrict set, sigset_t *__restrict old) {
    int saved = errno;
    int r = sigprocmask(how, set, old) < 0 ? errno : 0;
    errno = saved;
    return r;
}

int sigpending(sigset_t *set) {
    uint64_t pending = 0;
    int r = VINO_SIGPENDING(&pending);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    *set = pending;
    return 0;
}

int sigsuspend(const sigset_t *mask) {
    errno = -VINO_SIGSUSPEND(*mask);
    return -1;
}

int pause(void) {
    sigset_t now;
    if (sigprocmask(SIG_BLOCK, NULL, &now) < 0)
        return -1;
    return sigsuspend(&now);
}

int kill(pid_t pid, int sig) {
    return vino_result(VINO_KILL(pid, sig));
}

#ifdef VINO_COMPAT_PORTABLE
/* No kernel: the handler runs now; a signal whose default is to end the program ends it. */
int raise(int sig) {
    if (sig < 1 || sig >= VINO_NSIG) {
        errno = EINVAL;
        return -1;
    }
    void (*handler)(int) = vino_actions[sig].sa_handler;
    if (handler == SIG_IGN)
        return 0;
    if (handler != SIG_DFL) {
        vino_run_handler(sig);
        return 0;
    }
    const uint64_t ignored = vino_bit(SIGCHLD) | vino_bit(SIGCONT) | vino_bit(SIGURG) | vino_bit(SIGWINCH);
    if (!(ignored & vino_bit(sig)))
        _Exit(128 + sig);
    return 0;
}
#else
/* The kernel delivers a signal at a safe point: sched_yield is one, so the handler (or the
 * default action) has happened when raise returns. */
int raise(int sig) {
    if (kill(getpid(), sig) < 0)
        return -1;
    (void)sched_yield();
    return 0;
}
#endif
