/* File work through the kernel's system calls: write, read back, seek, append, mkdir,
 * rename, readdir, stat, unlink, rmdir, symlinks and times; prints what it saw and exits
 * with the number of checks that failed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int failed;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "files: check failed at line %d: %s (errno %d)\n", __LINE__, #c, errno); failed++; } } while (0)

int main(int argc, char **argv) {
    printf("argc %d", argc);
    for (int i = 0; i < argc; i++) printf(" [%s]", argv[i]);
    printf("\nenv %s\n", getenv("GREETING") ? getenv("GREETING") : "(none)");

    CHECK(mkdir("/work", 0755) == 0 || errno == EEXIST);
    FILE *f = fopen("/work/a.txt", "w");
    CHECK(f != NULL);
    for (int i = 0; i < 10000; i++) fprintf(f, "line %d\n", i);
    CHECK(fclose(f) == 0);

    struct stat st;
    CHECK(stat("/work/a.txt", &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    long size = st.st_size;
    printf("size %ld\n", size);

    int fd = open("/work/a.txt", O_RDONLY);
    CHECK(fd >= 0);
    char buf[64];
    CHECK(lseek(fd, 7 * 10, SEEK_SET) == 70);
    CHECK(read(fd, buf, 7) == 7);
    buf[7] = 0;
    printf("at 70: %s", buf);
    CHECK(lseek(fd, -7, SEEK_END) == size - 7);
    CHECK(close(fd) == 0);

    fd = open("/work/a.txt", O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK(write(fd, "tail\n", 5) == 5);
    CHECK(close(fd) == 0);
    CHECK(stat("/work/a.txt", &st) == 0 && st.st_size == size + 5);

    CHECK(rename("/work/a.txt", "/work/b.txt") == 0);
    CHECK(access("/work/a.txt", F_OK) != 0 && errno == ENOENT);
    CHECK(symlink("b.txt", "/work/link") == 0);
    char target[32] = {0};
    CHECK(readlink("/work/link", target, sizeof target - 1) == 5 && strcmp(target, "b.txt") == 0);
    CHECK(lstat("/work/link", &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat("/work/link", &st) == 0 && S_ISREG(st.st_mode));

    struct timespec times[2] = {{1000000000, 0}, {1234567890, 5}};
    CHECK(utimensat(AT_FDCWD, "/work/b.txt", times, 0) == 0);
    CHECK(stat("/work/b.txt", &st) == 0 && st.st_mtim.tv_sec == 1234567890);

    int names = 0;
    DIR *d = opendir("/work");
    CHECK(d != NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            printf("entry %s\n", e->d_name);
            names++;
        }
    }
    if (d) closedir(d);
    CHECK(names == 2);

    CHECK(open("/work/b.txt", O_WRONLY | O_CREAT | O_EXCL, 0644) < 0 && errno == EEXIST);
    CHECK(open("/nowhere/x", O_RDONLY) < 0 && errno == ENOENT);
    CHECK(rmdir("/work") != 0 && errno == ENOTEMPTY);
    CHECK(unlink("/work/link") == 0);
    CHECK(unlink("/work/b.txt") == 0);
    CHECK(rmdir("/work") == 0);

    /* A directory longer than one readdir buffer: read in several calls, every name once. */
    CHECK(mkdir("/many", 0755) == 0);
    char name[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "/many/a-rather-long-file-name-%04d", i);
        int m = open(name, O_WRONLY | O_CREAT, 0644);
        CHECK(m >= 0 && close(m) == 0);
    }
    int seen = 0;
    d = opendir("/many");
    while (d && (e = readdir(d))) seen += e->d_name[0] == 'a';
    if (d) closedir(d);
    printf("many %d\n", seen);
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "/many/a-rather-long-file-name-%04d", i);
        CHECK(unlink(name) == 0);
    }
    CHECK(rmdir("/many") == 0);

    struct timespec nap = {0, 2000000};
    CHECK(nanosleep(&nap, NULL) == 0);
    printf("failed %d\n", failed);
    return failed;
}
