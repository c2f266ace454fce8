/*
 * The few C library routines clang may emit calls to when compiling the
 * workloads for wasm32 (there is no libc there).  Built with -fno-builtin
 * so these loops are not themselves turned back into calls.
 */
#include <stddef.h>
#include <stdint.h>

void *memset(void *dest, int c, size_t n)
{
    unsigned char *d = dest;
    uint32_t word = (uint8_t)c * 0x01010101u;
    while (n > 0 && ((uintptr_t)d & 3) != 0) {
        *d++ = (unsigned char)c;
        n--;
    }
    while (n >= 4) {
        *(uint32_t *)d = word;
        d += 4;
        n -= 4;
    }
    while (n > 0) {
        *d++ = (unsigned char)c;
        n--;
    }
    return dest;
}

void *memcpy(void *restrict dest, const void *restrict src, size_t n)
{
    unsigned char *d = dest;
    const unsigned char *s = src;
    if ((((uintptr_t)d | (uintptr_t)s) & 3) == 0) {
        while (n >= 4) {
            *(uint32_t *)d = *(const uint32_t *)s;
            d += 4;
            s += 4;
            n -= 4;
        }
    }
    while (n > 0) {
        *d++ = *s++;
        n--;
    }
    return dest;
}

void *memmove(void *dest, const void *src, size_t n)
{
    unsigned char *d = dest;
    const unsigned char *s = src;
    if (d == s || n == 0)
        return dest;
    if (d < s) {
        while (n > 0) {
            *d++ = *s++;
            n--;
        }
    } else {
        d += n;
        s += n;
        while (n > 0) {
            *--d = *--s;
            n--;
        }
    }
    return dest;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    }
    return 0;
}
