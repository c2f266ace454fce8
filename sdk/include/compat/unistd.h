/* <unistd.h> for programs `vino build` makes: wasi-libc's, plus what it leaves out and VINO
 * provides (sdk/lib/): chown and its relatives; pipes, process ids and pause. */
#include_next <unistd.h>

#ifndef VINO_COMPAT_UNISTD_H
#define VINO_COMPAT_UNISTD_H
#ifdef __cplusplus
extern "C" {
#endif
int chown(const char *, uid_t, gid_t);
int fchown(int, uid_t, gid_t);
int lchown(const char *, uid_t, gid_t);
int fchownat(int, const char *, uid_t, gid_t, int);
int pipe(int[2]);
int pipe2(int[2], int);
pid_t getppid(void);
int pause(void);
#ifdef __cplusplus
}
#endif
#endif
