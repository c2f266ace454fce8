/* system, popen and pclose without a shell. The test installs this program as /bin/popen, on
 * the default PATH, and runs it by that name; with arguments it plays the child: "exit N",
 * "args A B..." (prints them between brackets), "count" (its stdin's length is its status).
 * Prints each check; exits 1 at the first that fails. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int play(int argc, char **argv) {
    if (strcmp(argv[1], "exit") == 0)
        return atoi(argv[2]);
    if (strcmp(argv[1], "args") == 0) {
        for (int i = 2; i < argc; i++)
            printf("[%s]", argv[i]);
        printf("\n");
        return 0;
    }
    if (strcmp(argv[1], "count") == 0) {
        size_t n = 0;
        while (getchar() != EOF)
            n++;
        return (int)(n % 251);
    }
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1)
        return play(argc, argv);

    check(system(NULL) == 1, "system(NULL) is 1");
    int status = system("popen exit 3");
    check(WIFEXITED(status) && WEXITSTATUS(status) == 3, "system: exit status 3, found on PATH");
    status = system("/bin/popen exit 0");
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "system: by its path, exit status 0");
    status = system("no-such-program");
    check(WIFEXITED(status) && WEXITSTATUS(status) == 127, "system: no such program is 127, as sh");
    check(system("popen args | cat") == -1 && errno == ENOTSUP, "system: a pipe needs a shell: ENOTSUP");
    check(system("popen args $HOME") == -1 && errno == ENOTSUP, "system: a variable needs a shell: ENOTSUP");
    check(system("popen args 'open") == -1 && errno == EINVAL, "system: an unterminated quote: EINVAL");

    /* Words split as sh splits them. */
    FILE *in = popen("popen args 'a b'  \"c \\\"d\\\" $\"x  e\\ f '|'", "r");
    check(in == NULL && errno == ENOTSUP, "popen: $ inside double quotes needs a shell: ENOTSUP");
    in = popen("popen args 'a b'  \"c \\\"d\\\"\"  e\\ f '|' \"*\"", "r");
    check(in != NULL, "popen for reading");
    char line[256] = "";
    check(fgets(line, sizeof line, in) != NULL, "a line from the child");
    printf("child said: %s", line);
    check(strcmp(line, "[a b][c \"d\"][e f][|][*]\n") == 0, "the words as sh splits them");
    status = pclose(in);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pclose: its exit status");

    FILE *out = popen("popen count", "w");
    check(out != NULL, "popen for writing");
    for (int i = 0; i < 1000; i++)
        fputs("0123456789", out);
    status = pclose(out);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 10000 % 251, "pclose: the child read all 10000 bytes");
    check(popen("popen count", "rw") == NULL && errno == EINVAL, "popen mode rw: EINVAL");
    printf("popen done\n");
    return 0;
}
