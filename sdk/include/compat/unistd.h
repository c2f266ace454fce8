/* <unistd.h> for programs `vino build` makes: wasi-libc's, plus what it leaves out and VINO
 * provides (sdk/lib/vino_compat.c): chown and its relatives. */
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
#ifdef __cplusplus
}
#endif
#endif
