/* What the process-model test programs share: `check` prints "ok WHAT" as it goes, or
 * "FAIL WHAT" with errno and exits 1 at the first failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char *what) {
    if (!ok) {
        printf("FAIL %s (errno %d: %s)\n", what, errno, strerror(errno));
        exit(1);
    }
    printf("ok %s\n", what);
    fflush(stdout);
}
