/* mmap MODE FILE [PAGES]: files mapped into the program's memory (the SDK's mmap over
 * vino_mmap). Each mode prints "ok WHAT" as it goes (check.h) and ends with "MODE done":
 *   coherent  a shared read-only mapping sees the file's writes, and write(2) from it copies it;
 *   shared    stores through a shared writable mapping of PAGES pages reach the file (msync);
 *   private   stores through a private mapping never do;
 *   big       every page of a PAGES-page file read through a mapping is the file's;
 *   truncate  after the file shrinks, a system call over the lost page fails with EFAULT and
 *             the program's own touch of it traps (it prints "survived" if not);
 *   rostore   a store into a read-only mapping traps;
 *   readinto  read(2) into a read-only mapping fails with EFAULT;
 *   unlinked  a mapping outlives the file's last name. */
#define _WASI_EMULATED_MMAN
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#define PAGE 4096

static uint8_t mark(size_t page, size_t at) {
    return (uint8_t)(page * 13 + at * 7 + 1);
}

/* Makes `path` PAGES pages long, each byte its mark. */
static int make(const char *path, size_t pages) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "create the file");
    static uint8_t buf[PAGE];
    for (size_t p = 0; p < pages; p++) {
        for (size_t i = 0; i < PAGE; i++)
            buf[i] = mark(p, i);
        if (pwrite(fd, buf, PAGE, (off_t)(p * PAGE)) != PAGE)
            check(0, "write the file");
    }
    return fd;
}

static int pages_right(const uint8_t *m, size_t pages) {
    for (size_t p = 0; p < pages; p++)
        for (size_t i = 0; i < PAGE; i += 511)
            if (m[p * PAGE + i] != mark(p, i))
                return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    const char *mode = argv[1], *path = argv[2];
    size_t pages = argc > 3 ? strtoul(argv[3], NULL, 10) : 3;
    if (!strcmp(mode, "coherent")) {
        int fd = make(path, 3);
        uint8_t *m = mmap(NULL, 3 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED, "map shared read-only");
        check(pages_right(m, 3), "the mapping reads the file");
        check(pwrite(fd, "BBBBBBBBBB", 10, PAGE + 5) == 10, "pwrite into the mapped range");
        check(!memcmp(m + PAGE + 5, "BBBBBBBBBB", 10) && m[PAGE + 4] == mark(1, 4) && m[PAGE + 15] == mark(1, 15),
              "the mapping sees the write");
        char copy[64];
        snprintf(copy, sizeof copy, "%s.copy", path);
        int out = open(copy, O_RDWR | O_CREAT | O_TRUNC, 0644);
        check(out >= 0 && write(out, m, 3 * PAGE) == 3 * PAGE, "write(2) from the mapping");
        static uint8_t back[3 * PAGE];
        check(pread(out, back, sizeof back, 0) == sizeof back && !memcmp(back, m, sizeof back),
              "the copy is the mapping's bytes");
        check(munmap(m, 3 * PAGE) == 0, "munmap");
    } else if (!strcmp(mode, "shared")) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        check(fd >= 0 && ftruncate(fd, (off_t)(pages * PAGE)) == 0, "a file of zeros");
        uint8_t *m = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED, "map shared writable");
        for (size_t p = 0; p < pages; p++)
            for (size_t i = 0; i < PAGE; i += 511)
                m[p * PAGE + i] = mark(p, i);
        check(pages_right(m, pages), "the stores read back");
        check(msync(m, pages * PAGE, MS_SYNC) == 0, "msync");
        uint8_t b = 0;
        check(pread(fd, &b, 1, (off_t)((pages - 1) * PAGE + 511)) == 1 && b == mark(pages - 1, 511),
              "the file has the stores after msync");
        m[0] = 0x5a;
        check(munmap(m, pages * PAGE) == 0, "munmap");
        close(fd);
        fd = open(path, O_RDONLY);
        uint8_t *all = malloc(pages * PAGE);
        check(all && pread(fd, all, pages * PAGE, 0) == (ssize_t)(pages * PAGE), "read the file back");
        check(all[0] == 0x5a, "a store after msync reaches the file at munmap");
        all[0] = mark(0, 0);
        check(pages_right(all, pages), "every page reached the file");
    } else if (!strcmp(mode, "private")) {
        int fd = make(path, 3);
        uint8_t *m = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        check(m != MAP_FAILED, "map private");
        m[PAGE] = 0x77;
        uint8_t b = 0;
        check(pread(fd, &b, 1, PAGE) == 1 && b == mark(1, 0), "a private store stays out of the file");
        check(m[PAGE] == 0x77 && m[0] == mark(0, 0), "and stays in the mapping");
        check(munmap(m, 3 * PAGE) == 0, "munmap");
        check(pread(fd, &b, 1, PAGE) == 1 && b == mark(1, 0), "nor reaches it at munmap");
    } else if (!strcmp(mode, "big")) {
        int fd = make(path, pages);
        uint8_t *m = mmap(NULL, pages * PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED, "map a big file");
        check(pages_right(m, pages), "every page is the file's");
        check(pages_right(m, pages), "and again");
        check(munmap(m, pages * PAGE) == 0, "munmap");
    } else if (!strcmp(mode, "truncate")) {
        int fd = make(path, 3);
        uint8_t *m = mmap(NULL, 3 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED && m[2 * PAGE] == mark(2, 0), "map and touch the last page");
        check(ftruncate(fd, PAGE) == 0, "truncate to one page");
        check(m[0] == mark(0, 0), "the first page is still there");
        int out = open("/dev/null", O_WRONLY);
        check(write(out, m + 2 * PAGE, 10) < 0 && errno == EFAULT, "a system call over the lost page: EFAULT");
        volatile uint8_t x = m[2 * PAGE];
        printf("survived %u\n", x);
        return 1;
    } else if (!strcmp(mode, "rostore")) {
        int fd = make(path, 1);
        uint8_t *m = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED && m[1] == mark(0, 1), "map read-only");
        ((volatile uint8_t *)m)[1] = 9;
        printf("survived\n");
        return 1;
    } else if (!strcmp(mode, "readinto")) {
        int fd = make(path, 1);
        uint8_t *m = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED, "map read-only");
        check(pread(fd, m, 10, 0) < 0 && errno == EFAULT, "read(2) into it: EFAULT");
        check(m[0] == mark(0, 0), "and it is unchanged");
    } else if (!strcmp(mode, "unlinked")) {
        int fd = make(path, 2);
        uint8_t *m = mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
        check(m != MAP_FAILED, "map");
        close(fd);
        check(unlink(path) == 0, "unlink the mapped file");
        check(pages_right(m, 2), "the mapping still reads it");
        check(munmap(m, 2 * PAGE) == 0, "munmap");
    } else {
        return 2;
    }
    printf("%s done\n", mode);
    return 0;
}
