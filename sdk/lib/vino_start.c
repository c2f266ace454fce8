/* Start-up code linked into every program `vino build` makes: it changes to the working
 * directory the runner gave (`vino run --cwd`, passed as PWD) before main runs.
 *
 * wasi-libc keeps the working directory inside the program (it resolves relative paths against
 * it and the preopened directories) and starts it at "/"; WASI has no call through which the
 * runner could set it. A PWD that names no directory the program may reach leaves it at "/". */
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void vino_enter_working_directory(void) {
    const char *dir = getenv("PWD");
    if (dir != NULL && dir[0] == '/' && dir[1] != '\0')
        (void)chdir(dir);
}
