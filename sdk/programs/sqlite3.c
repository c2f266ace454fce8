/* sqlite3: a small shell over the SQLite library, to run as a VINO process.
 *
 *   sqlite3 DATABASE [SQL...]
 *
 * Runs each SQL argument in turn, or else the whole standard input as one script. Rows are
 * printed with columns separated by '|' (NULL as an empty column, as the sqlite3 shell does).
 * Exit status 1 on the first error, with SQLite's message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"

static int print_row(void *unused, int n, char **values, char **names) {
    (void)unused;
    (void)names;
    for (int i = 0; i < n; i++) {
        if (i) putchar('|');
        if (values[i]) fputs(values[i], stdout);
    }
    putchar('\n');
    return 0;
}

static char *read_all(FILE *in) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    if (buf) buf[len] = 0;
    return buf;
}

static int run(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, print_row, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlite3: %s\n", err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sqlite3 DATABASE [SQL...]\n");
        return 2;
    }
    sqlite3 *db;
    if (sqlite3_open(argv[1], &db) != SQLITE_OK) {
        fprintf(stderr, "sqlite3: %s: %s\n", argv[1], sqlite3_errmsg(db));
        return 1;
    }
    int status = 0;
    if (argc > 2) {
        for (int i = 2; i < argc && !status; i++) status = run(db, argv[i]);
    } else {
        char *script = read_all(stdin);
        if (!script) {
            fprintf(stderr, "sqlite3: out of memory reading the script\n");
            status = 1;
        } else {
            status = run(db, script);
            free(script);
        }
    }
    if (sqlite3_close(db) != SQLITE_OK) {
        fprintf(stderr, "sqlite3: closing: %s\n", sqlite3_errmsg(db));
        status = 1;
    }
    return status;
}
