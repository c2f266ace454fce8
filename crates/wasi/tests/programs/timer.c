/* timer MODULE: loads MODULE (an event.timer graft that counts its firings, read by its control
 * function `count`) from inside the program, starts the process's timer at 5 ms, sleeps 100 ms,
 * stops it, and prints the count and what each call returned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vino_process.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 3;
    char wasm[4096];
    size_t len = fread(wasm, 1, sizeof wasm, f);
    fclose(f);
    const char *point = "event.timer";
    printf("load %d\n", vino_graft_load(point, strlen(point), wasm, len));
    printf("too short %d\n", vino_timer_start(1000));
    printf("start %d\n", vino_timer_start(5000000));
    struct timespec nap = {0, 100000000};
    nanosleep(&nap, NULL);
    int64_t count = -1;
    int rc = vino_graft_call(point, strlen(point), "count", 5, NULL, 0, &count);
    printf("stop %d\n", vino_timer_stop());
    printf("count %d %lld\n", rc, (long long)count);
    return 0;
}
