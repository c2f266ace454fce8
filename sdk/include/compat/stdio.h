/* <stdio.h> for programs `vino build` makes: wasi-libc's, plus popen and pclose
 * (sdk/lib/vino_shell.c). VINO has no shell: the command is split into words as a shell would
 * (quotes, backslashes) and run with posix_spawnp; pipes, redirections, variables and globs
 * are refused with ENOTSUP (sdk/PORTING.md). */
#include_next <stdio.h>

#ifndef VINO_COMPAT_STDIO_H
#define VINO_COMPAT_STDIO_H
#ifdef __cplusplus
extern "C" {
#endif
FILE *popen(const char *, const char *);
int pclose(FILE *);
#ifdef __cplusplus
}
#endif
#endif
