/* stream DIR FILE OTHER MODULE: binds the stream codec MODULE to the empty FILE in DIR from
 * inside the program, writes FILE through it and reads it back, and prints what each call
 * returned (OTHER is another user's file). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "module.h"
#include "vino_process.h"

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    size_t len;
    char *wasm = slurp(argv[4], &len);
    if (!wasm) return 3;
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    const char *file = argv[2], *other = argv[3];
    printf("not a codec %d\n", vino_stream_bind(dir, file, strlen(file), "junk", 4));
    printf("not the owner %d\n", vino_stream_bind(dir, other, strlen(other), wasm, len));
    printf("bind %d\n", vino_stream_bind(dir, file, strlen(file), wasm, len));
    static char data[200000], back[200001];
    for (size_t i = 0; i < sizeof data; i++) data[i] = "stream\n"[i % 7];
    int fd = openat(dir, file, O_RDWR);
    long wrote = write(fd, data, sizeof data);
    printf("fsync %d\n", fsync(fd));
    long got = pread(fd, back, sizeof back, 0);
    printf("wrote %ld read %ld same %d\n", wrote, got, got == wrote && !memcmp(data, back, sizeof data));
    close(fd);
    printf("unbind with data %d\n", vino_stream_bind(dir, file, strlen(file), NULL, 0));
    return 0;
}
