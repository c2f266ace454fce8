/* graft FILE MODULE: grafts MODULE (a read-ahead graft) on FILE's descriptor from inside the
 * program, sets its window through a control call, reads FILE to its end, and prints what each
 * call returned. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "module.h"
#include "vino_process.h"

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    size_t len;
    char *wasm = slurp(argv[2], &len);
    if (!wasm) return 3;
    int fd = open(argv[1], O_RDONLY);
    char point[64];
    snprintf(point, sizeof point, "file.compute_ra/%d", fd);
    const char *bad_fd = "file.compute_ra/99";
    const char *nowhere = "no.such.point";
    printf("bad module %d\n", vino_graft_load(point, strlen(point), "junk", 4));
    printf("bad descriptor %d\n", vino_graft_load(bad_fd, strlen(bad_fd), wasm, len));
    printf("no such point %d\n", vino_graft_load(nowhere, strlen(nowhere), wasm, len));
    printf("load %d\n", vino_graft_load(point, strlen(point), wasm, len));
    int64_t result = 99, zero = 0, window = 64;
    int rc = vino_graft_call(point, strlen(point), "seq_set_blocks", 14, &zero, 1, &result);
    printf("call 0 -> %d %lld\n", rc, (long long)result);
    rc = vino_graft_call(point, strlen(point), "seq_set_blocks", 14, &window, 1, &result);
    printf("call 64 -> %d %lld\n", rc, (long long)result);
    char buf[32768];
    long total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) total += n;
    printf("read %ld\n", total);
    printf("unload %d\n", vino_graft_unload(point, strlen(point)));
    printf("unload again %d\n", vino_graft_unload(point, strlen(point)));
    printf("chmod %d\n", vino_fd_chmod(fd, 0600));
    printf("chown %d\n", vino_fd_chown(fd, 1000, -1));
    printf("chmod bad fd %d\n", vino_fd_chmod(99, 0600));
    printf("null %d\n", vino_null());
    return 0;
}
