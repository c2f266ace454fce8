/* <spawn.h> for programs `vino build` makes (wasi-libc has none): posix_spawn and posix_spawnp
 * on the kernel's spawn (sdk/lib/vino_process.c). The child inherits every open descriptor,
 * then the file actions apply in order; its working directory is the parent's (PWD in its
 * environment). Process groups and sessions are refused (ENOTSUP); scheduling is not offered. */
#ifndef VINO_COMPAT_SPAWN_H
#define VINO_COMPAT_SPAWN_H
#include <__typedef_sigset_t.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

/* glibc's and musl's values. */
#define POSIX_SPAWN_RESETIDS 1
#define POSIX_SPAWN_SETPGROUP 2
#define POSIX_SPAWN_SETSIGDEF 4
#define POSIX_SPAWN_SETSIGMASK 8
#define POSIX_SPAWN_SETSID 128

typedef struct {
    int __flags;
    pid_t __pgroup;
    sigset_t __mask;
    sigset_t __default;
} posix_spawnattr_t;

struct vino_spawn_action;
typedef struct {
    int __count;
    int __capacity;
    struct vino_spawn_action *__actions;
} posix_spawn_file_actions_t;

int posix_spawn(pid_t *__restrict, const char *__restrict, const posix_spawn_file_actions_t *,
                const posix_spawnattr_t *__restrict, char *const[__restrict], char *const[__restrict]);
int posix_spawnp(pid_t *__restrict, const char *__restrict, const posix_spawn_file_actions_t *,
                 const posix_spawnattr_t *__restrict, char *const[__restrict], char *const[__restrict]);

int posix_spawn_file_actions_init(posix_spawn_file_actions_t *);
int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *);
int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *, int);
int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *, int, int);
int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *__restrict, int, const char *__restrict, int,
                                     mode_t);

int posix_spawnattr_init(posix_spawnattr_t *);
int posix_spawnattr_destroy(posix_spawnattr_t *);
int posix_spawnattr_setflags(posix_spawnattr_t *, short);
int posix_spawnattr_getflags(const posix_spawnattr_t *__restrict, short *__restrict);
int posix_spawnattr_setpgroup(posix_spawnattr_t *, pid_t);
int posix_spawnattr_getpgroup(const posix_spawnattr_t *__restrict, pid_t *__restrict);
int posix_spawnattr_setsigmask(posix_spawnattr_t *__restrict, const sigset_t *__restrict);
int posix_spawnattr_getsigmask(const posix_spawnattr_t *__restrict, sigset_t *__restrict);
int posix_spawnattr_setsigdefault(posix_spawnattr_t *__restrict, const sigset_t *__restrict);
int posix_spawnattr_getsigdefault(const posix_spawnattr_t *__restrict, sigset_t *__restrict);

#ifdef __cplusplus
}
#endif
#endif
