/* gzip and gunzip over zlib, to run as a VINO process.
 *
 *   gzip [-d] [-c] [-1..-9] [--ra-graft MODULE [--ra-blocks N]] [FILE...]
 *   gunzip [-c] [...] [FILE...]
 *
 * Without files, the standard input to the standard output. With files, FILE becomes FILE.gz
 * (or FILE.gz becomes FILE with -d), the original removed once the new file is whole; -c writes
 * to the standard output instead and keeps the original. Called as gunzip, -d is implied.
 * Compressed input is read 32 KB at a time, as the gunzip of Seltzer et al. 1995 did.
 *
 * --ra-graft MODULE grafts the read-ahead graft in MODULE (a file) on each input file's
 * descriptor before reading it, from inside the program (vino_process.h); --ra-blocks N then
 * calls its control seq_set_blocks(N), as sdk/grafts/sequential_ra.c has it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vino_process.h"
#include "zlib.h"

static const char *me = "gzip";
static const char *ra_graft; /* --ra-graft MODULE */
static long ra_blocks;       /* --ra-blocks N (0: leave the graft's default) */

static int fail(const char *what, const char *why) {
    fprintf(stderr, "%s: %s: %s\n", me, what, why);
    return 1;
}

/* Copies the raw descriptor `in` into the gz stream `out`. */
static int compress_fd(int in, gzFile out, const char *name) {
    static char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) {
        if (gzwrite(out, buf, (unsigned)n) != n) {
            int e;
            return fail(name, gzerror(out, &e));
        }
    }
    return n < 0 ? fail(name, strerror(errno)) : 0;
}

/* Copies the gz stream `in` to the raw descriptor `out`. */
static int decompress_fd(gzFile in, int out, const char *name) {
    static char buf[1 << 16];
    int n, e;
    while ((n = gzread(in, buf, sizeof buf)) > 0) {
        /* zlib copies what is not gzip as it is; gunzip refuses it. A stream cut short ends a
         * read with Z_BUF_ERROR, which the next gzread clears: look after each. */
        if (gzdirect(in)) return fail(name, "not in gzip format");
        const char *why = gzerror(in, &e);
        if (e != Z_OK) return fail(name, why);
        for (int done = 0; done < n;) {
            ssize_t w = write(out, buf + done, n - done);
            if (w < 0) return fail(name, strerror(errno));
            done += (int)w;
        }
    }
    if (n < 0) return fail(name, gzerror(in, &e));
    return 0;
}

/* Grafts --ra-graft's module on descriptor `fd` (nothing without the option). */
static int graft_read_ahead(int fd, const char *name) {
    if (!ra_graft) return 0;
    FILE *f = fopen(ra_graft, "rb");
    if (!f) return fail(ra_graft, strerror(errno));
    static char module[1 << 20];
    size_t len = fread(module, 1, sizeof module, f);
    fclose(f);
    char point[48];
    int n = snprintf(point, sizeof point, "file.compute_ra/%d", fd);
    int rc = vino_graft_load(point, (size_t)n, module, len);
    if (rc < 0) return fail(name, strerror(-rc));
    if (ra_blocks > 0) {
        int64_t arg = ra_blocks, result = 0;
        rc = vino_graft_call(point, (size_t)n, "seq_set_blocks", 14, &arg, 1, &result);
        if (rc < 0 || result != 0) return fail(name, "the graft refused --ra-blocks");
    }
    return 0;
}

/* One file. With -c, output goes to descriptor 1: compressed, into `stdout_gz`, one stream for
 * all the files (WASI has no dup, and gzclose closes its descriptor). */
static int one(const char *path, int decompress, int to_stdout, gzFile stdout_gz, const char *mode) {
    size_t len = strlen(path);
    char *target = NULL;
    if (!to_stdout) {
        if (decompress) {
            if (len < 4 || strcmp(path + len - 3, ".gz")) return fail(path, "unknown suffix -- ignored");
            target = strndup(path, len - 3);
        } else {
            target = malloc(len + 4);
            if (target) sprintf(target, "%s.gz", path);
        }
        if (!target) return fail(path, "out of memory");
    }
    int status;
    if (decompress) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) return fail(path, strerror(errno));
        if (graft_read_ahead(fd, path)) return 1;
        gzFile in = gzdopen(fd, "rb");
        if (!in) return fail(path, strerror(errno));
        gzbuffer(in, 32768);
        int out = to_stdout ? 1 : open(target, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0) return fail(target, strerror(errno));
        status = decompress_fd(in, out, path);
        gzclose(in);
        if (!to_stdout && close(out) != 0) status = fail(target, strerror(errno));
    } else {
        int in = open(path, O_RDONLY);
        if (in < 0) return fail(path, strerror(errno));
        gzFile out = to_stdout ? stdout_gz : gzopen(target, mode);
        if (!out) return fail(target, strerror(errno));
        status = compress_fd(in, out, path);
        if (!to_stdout && gzclose(out) != Z_OK) status = fail(target, "closing failed");
        close(in);
    }
    if (!to_stdout) {
        if (status == 0 && unlink(path) != 0) status = fail(path, strerror(errno));
        if (status != 0) unlink(target);
        free(target);
    }
    return status;
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    int decompress = strncmp(base, "gunzip", 6) == 0, to_stdout = 0;
    if (decompress) me = "gunzip";
    char mode[4] = "wb6";
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (!strcmp(argv[i], "--ra-graft") && i + 1 < argc) {
            ra_graft = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--ra-blocks") && i + 1 < argc) {
            ra_blocks = atol(argv[++i]);
            continue;
        }
        for (const char *o = argv[i] + 1; *o; o++) {
            if (*o == 'd') decompress = 1;
            else if (*o == 'c') to_stdout = 1;
            else if (*o >= '1' && *o <= '9') mode[2] = *o;
            else {
                fprintf(stderr, "%s: unknown option -%c\n", me, *o);
                return 2;
            }
        }
    }
    if (i == argc) {
        if (decompress) {
            gzFile in = gzdopen(0, "rb");
            return in ? decompress_fd(in, 1, "stdin") | (gzclose(in) != Z_OK) : fail("stdin", "cannot read");
        }
        gzFile out = gzdopen(1, mode);
        int status = out ? compress_fd(0, out, "stdin") : fail("stdout", "cannot write");
        return status | (out && gzclose(out) != Z_OK);
    }
    gzFile stdout_gz = NULL;
    if (to_stdout && !decompress && !(stdout_gz = gzdopen(1, mode))) return fail("stdout", "cannot write");
    int status = 0;
    for (; i < argc; i++) status |= one(argv[i], decompress, to_stdout, stdout_gz, mode);
    if (stdout_gz && gzclose(stdout_gz) != Z_OK) status |= fail("stdout", "closing failed");
    return status;
}
