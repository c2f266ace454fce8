/* <sys/wait.h> for programs `vino build` makes (wasi-libc has none): wait and waitpid on the
 * kernel's wait (sdk/lib/vino_process.c), with Linux's status encoding. Stopped and continued
 * children are not reported: WUNTRACED and WCONTINUED are accepted and change nothing. A pid
 * of 0 is any child (a VINO process has no group of its own to leave). */
#ifndef VINO_COMPAT_SYS_WAIT_H
#define VINO_COMPAT_SYS_WAIT_H
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

#define WNOHANG 1
#define WUNTRACED 2
#define WSTOPPED 2
#define WEXITED 4
#define WCONTINUED 8
#define WNOWAIT 0x1000000

#define WEXITSTATUS(s) (((s) & 0xff00) >> 8)
#define WTERMSIG(s) ((s) & 0x7f)
#define WSTOPSIG(s) WEXITSTATUS(s)
#define WCOREDUMP(s) ((s) & 0x80)
#define WIFEXITED(s) (!WTERMSIG(s))
#define WIFSTOPPED(s) ((short)((((s) & 0xffff) * 0x10001U) >> 8) > 0x7f00)
#define WIFSIGNALED(s) (((s) & 0xffff) - 1U < 0xffu)
#define WIFCONTINUED(s) ((s) == 0xffff)

pid_t wait(int *);
pid_t waitpid(pid_t, int *, int);

#ifdef __cplusplus
}
#endif
#endif
