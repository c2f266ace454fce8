/* private_tmp.c -- a dir.lookup graft (Small 1998, 4.2: name redirection): the process sees its
 * own directory where everyone else sees /tmp.
 *
 * The process writes the path of its private directory (absolute, NUL-terminated, at most
 * TMP_MAX - 1 bytes) at the exported `private_tmp` with write-memory. From then on the name `tmp`
 * looked up in the root directory leads there: /tmp/x is <private>/x. The kernel walks the
 * redirect with the process's own credentials, so it reaches nothing the process could not name
 * itself; the redirect's own names are not redirected again (no loops). Empty: no redirect. */
#include "vino_graft.h"

#define TMP_MAX 1024

VINO_SHARED char private_tmp[TMP_MAX];

VINO_GRAFT(dir_lookup) int32_t dir_lookup(int64_t dir, int32_t name_len) {
    if (dir != VINO_ROOT_INO || name_len != 3 || vino_args[0] != 't' || vino_args[1] != 'm' || vino_args[2] != 'p')
        return 0;
    int32_t n = 0;
    while (n < TMP_MAX - 1 && private_tmp[n] != 0)
        n++;
    if (n == 0)
        return 0;
    for (int32_t i = 0; i < n; i++)
        vino_args[i] = (unsigned char)private_tmp[i];
    return n;
}
