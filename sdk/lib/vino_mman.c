/* mmap, munmap and msync over the kernel's file mappings (vino_mmap). Part of the compatibility
 * layer (compiled as one unit after vino_compat.c); `--emulate mman` gives programs the header.
 *
 * The program's memory is the only memory it can address, so a mapping is made over pages of
 * it: mmap takes page-aligned memory from malloc and asks the kernel to map the file over it;
 * munmap ends the mapping and gives the memory back. MAP_FIXED and partial munmap are not
 * offered (munmap ends the whole mapping that starts at `addr`).
 *
 * Where the kernel does not page program memory (-ENOTSUP), and built with
 * VINO_COMPAT_PORTABLE, a private or read-only mapping is a copy read with pread, as
 * wasi-libc's emulation makes it, and a shared writable one fails with ENOTSUP. */
#ifndef _WASI_EMULATED_MMAN
#define _WASI_EMULATED_MMAN
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vino_process.h"

#define VINO_MAPS_MAX 1024

static struct {
    void *addr;
    size_t len;
    int kernel; /* mapped by the kernel (else a copy) */
} vino_maps[VINO_MAPS_MAX];

static int vino_map_find(void *addr) {
    for (int i = 0; i < VINO_MAPS_MAX; i++)
        if (vino_maps[i].addr == addr && addr != NULL)
            return i;
    return -1;
}

#ifdef VINO_COMPAT_PORTABLE
#define VINO_MMAP(p, len, flags, fd, off) ((void)(p), (void)(len), (void)(flags), (void)(fd), (void)(off), -ENOTSUP)
#define VINO_MUNMAP(p, len) 0
#define VINO_MSYNC(p, len, durable) (-ENOTSUP)
#else
#define VINO_MMAP vino_mmap
#define VINO_MUNMAP vino_munmap
#define VINO_MSYNC vino_msync
#endif

/* A copy of the file's bytes (zeros past its end). */
static int vino_map_copy(char *p, size_t len, int fd, off_t off) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    memset(p + done, 0, len - done);
    return 0;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    (void)addr;
    int kind = flags & (MAP_SHARED | MAP_PRIVATE);
    if (len == 0 || off < 0 || off % VINO_MEMORY_PAGE_SIZE != 0 || (flags & MAP_FIXED) ||
        (kind != MAP_SHARED && kind != MAP_PRIVATE)) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    size_t span = (len + VINO_MEMORY_PAGE_SIZE - 1) & ~(size_t)(VINO_MEMORY_PAGE_SIZE - 1);
    int slot = -1;
    for (int i = 0; i < VINO_MAPS_MAX && slot < 0; i++)
        if (vino_maps[i].addr == NULL)
            slot = i;
    char *p = span < len || slot < 0 ? NULL : aligned_alloc(VINO_MEMORY_PAGE_SIZE, span);
    if (p == NULL) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    int r = 0, kernel = 0;
    if (flags & MAP_ANONYMOUS) {
        memset(p, 0, span);
    } else {
        unsigned f = (kind == MAP_SHARED ? VINO_MAP_SHARED : 0) | (prot & PROT_WRITE ? VINO_MAP_WRITABLE : 0);
        r = VINO_MMAP(p, span, f, fd, (uint64_t)off);
        kernel = r == 0;
        if (r == -ENOTSUP && f != (VINO_MAP_SHARED | VINO_MAP_WRITABLE))
            r = vino_map_copy(p, span, fd, off);
    }
    if (r < 0) {
        free(p);
        errno = -r;
        return MAP_FAILED;
    }
    vino_maps[slot].addr = p;
    vino_maps[slot].len = span;
    vino_maps[slot].kernel = kernel;
    return p;
}

int munmap(void *addr, size_t len) {
    (void)len;
    int slot = vino_map_find(addr);
    if (slot < 0) {
        errno = EINVAL;
        return -1;
    }
    int r = vino_maps[slot].kernel ? VINO_MUNMAP(addr, vino_maps[slot].len) : 0;
    vino_maps[slot].addr = NULL;
    free(addr);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return 0;
}

int msync(void *addr, size_t len, int flags) {
    if ((uintptr_t)addr % VINO_MEMORY_PAGE_SIZE != 0) {
        errno = EINVAL;
        return -1;
    }
    int r = VINO_MSYNC(addr, len, (flags & MS_SYNC) != 0);
    /* Copies never reach a file: nothing to write. */
    if (r < 0 && r != -ENOTSUP) {
        errno = -r;
        return -1;
    }
    return 0;
}
