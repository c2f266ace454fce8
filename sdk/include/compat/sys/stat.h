/* <sys/stat.h> for programs `vino build` makes: wasi-libc's, plus what it leaves out and VINO
 * provides (sdk/lib/): chmod and its relatives, umask, and FIFOs. */
#include_next <sys/stat.h>

#ifndef VINO_COMPAT_SYS_STAT_H
#define VINO_COMPAT_SYS_STAT_H
#ifdef __cplusplus
extern "C" {
#endif
int chmod(const char *, mode_t);
int fchmod(int, mode_t);
int fchmodat(int, const char *, mode_t, int);
mode_t umask(mode_t);
int mkfifo(const char *, mode_t);
int mkfifoat(int, const char *, mode_t);
#ifdef __cplusplus
}
#endif
#endif
