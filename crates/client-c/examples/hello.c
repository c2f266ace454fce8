/* hello.c -- connects to vinod, creates a file, writes to it, reads it back and prints it.
 *
 *   cc -std=c99 -I crates/client-c/include crates/client-c/examples/hello.c \
 *      -L target/release -lvino -Wl,-rpath,target/release -o hello
 *   ./hello [PATH]          # the socket is $VINO_SOCKET, or /run/vino/vinod.sock
 */
#include <stdio.h>
#include <string.h>

#include "vino.h"

static int fail(vino_client *c, const char *what, long long rc) {
    fprintf(stderr, "hello: %s: %s (errno %lld)\n", what, vino_last_error(c), -rc);
    vino_disconnect(c);
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/hello.txt";
    const char *text = "hello from C through vinod\n";

    vino_client *c = vino_connect(NULL);
    if (c == NULL) {
        fprintf(stderr, "hello: %s\n", vino_last_error(NULL));
        return 1;
    }

    int fd = vino_open(c, path, VINO_O_RDWR | VINO_O_CREAT | VINO_O_TRUNC, 0644);
    if (fd < 0)
        return fail(c, "open", fd);
    int64_t n = vino_write(c, fd, text, strlen(text));
    if (n != (int64_t)strlen(text))
        return fail(c, "write", n);

    char buf[128];
    n = vino_pread(c, fd, buf, sizeof buf - 1, 0);
    if (n < 0)
        return fail(c, "pread", n);
    buf[n] = '\0';

    struct vino_stat st;
    int rc = vino_fstat(c, fd, &st);
    if (rc < 0)
        return fail(c, "fstat", rc);
    rc = vino_close(c, fd);
    if (rc < 0)
        return fail(c, "close", rc);

    printf("%s", buf);
    printf("%s: %llu bytes, inode %llu, kernel pid %llu\n", path, (unsigned long long)st.size,
           (unsigned long long)st.ino, (unsigned long long)vino_pid(c));
    vino_disconnect(c);
    return 0;
}
