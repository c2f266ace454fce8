/* memory MIB [PASSES]: allocates MIB MiB, writes a pattern naming each 4 KiB page, and reads it
 * all back PASSES times (default 2), rewriting it between passes; exits 1 at the first wrong
 * byte, naming it. Under a resident limit below MIB, its pages go to swap and come back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096

static uint8_t mark(size_t page, int pass, size_t at) {
    return (uint8_t)(page * 31 + pass * 7 + at);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    size_t mib = strtoul(argv[1], NULL, 10);
    int passes = argc > 2 ? atoi(argv[2]) : 2;
    size_t pages = mib * 256;
    uint8_t *mem = malloc(pages * PAGE);
    if (!mem) {
        printf("malloc of %zu MiB failed\n", mib);
        return 3;
    }
    for (int pass = 0; pass < passes; pass++) {
        for (size_t p = 0; p < pages; p++) {
            mem[p * PAGE] = mark(p, pass, 0);
            mem[p * PAGE + PAGE / 2] = mark(p, pass, 1);
            mem[p * PAGE + PAGE - 1] = mark(p, pass, 2);
        }
        for (size_t p = 0; p < pages; p++) {
            for (size_t at = 0; at < 3; at++) {
                size_t off = at == 0 ? 0 : at == 1 ? PAGE / 2 : PAGE - 1;
                if (mem[p * PAGE + off] != mark(p, pass, at)) {
                    printf("pass %d page %zu byte %zu: %u, not %u\n", pass, p, off, mem[p * PAGE + off],
                           mark(p, pass, at));
                    return 1;
                }
            }
        }
    }
    printf("memory ok %zu MiB %d passes\n", mib, passes);
    return 0;
}
