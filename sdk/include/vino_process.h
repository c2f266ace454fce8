/* vino_process.h: what a program running as a VINO process (`vino run`) may ask of the kernel
 * beyond WASI: grafting its own objects from inside, modes and owners, and a null call. Build
 * with `vino build` (clang --target=wasm32-wasi), which puts this header on the include path.
 *
 * Graftpoints are named as the client libraries name them: "vas.pick_victim" (this process's
 * page eviction), "file.compute_ra/<fd>" (read-ahead of one of its open files: <fd> is the
 * program's own descriptor number), "lock.grant/<fd>", "file.block_buddy/<fd>",
 * "event.fs.unlink" and the other events. Each call returns 0 (or its result) on success and
 * a negative errno, as <errno.h> numbers it, on failure: -ENOENT no such graftpoint, -EPERM
 * not the caller's to graft, -EINVAL a module the graftpoint refuses, -EBADF a descriptor the
 * program does not have, -EFAULT a pointer outside its memory. */
#ifndef VINO_PROCESS_H
#define VINO_PROCESS_H

#include <stddef.h>
#include <stdint.h>

#define VINO_IMPORT(name) __attribute__((import_module("vino"), import_name(#name)))

/* Loads the graft `wasm` (`len` bytes, a module built with `vino graft build`) at `point`. */
VINO_IMPORT(graft_load)
int vino_graft_load(const char *point, size_t point_len, const void *wasm, size_t len);

/* Unloads the graft at `point`: the kernel's default decides again. */
VINO_IMPORT(graft_unload)
int vino_graft_unload(const char *point, size_t point_len);

/* Calls the control function `vino_ctl_<control>` of the graft at `point` with `nargs` (at most
 * 8) arguments; its result goes to `*result`. */
VINO_IMPORT(graft_call)
int vino_graft_call(const char *point, size_t point_len, const char *control, size_t control_len,
                    const int64_t *args, size_t nargs, int64_t *result);

/* Sets the mode (the low 12 bits of `mode`) or the owner (-1 leaves one as it is) of the file
 * open as `fd`, which WASI preview 1 cannot do; the kernel's permission rules apply. */
VINO_IMPORT(fd_chmod)
int vino_fd_chmod(int fd, unsigned mode);
VINO_IMPORT(fd_chown)
int vino_fd_chown(int fd, int uid, int gid);

/* The null system call: does nothing and returns 0. Timing a loop of it measures what crossing
 * from the program into the kernel and back costs. */
VINO_IMPORT(null)
int vino_null(void);

/* The process's timer: from now on, every `period_ns` (at least 1 ms) the kernel fires the
 * process's `event.timer` graft (load it first with vino_graft_load("event.timer", ...)) on a
 * thread of the process; starting it again changes the period. vino_timer_stop ends it (its
 * thread within 10 ms); so does the process's exit. */
VINO_IMPORT(timer_start)
int vino_timer_start(uint64_t period_ns);
VINO_IMPORT(timer_stop)
int vino_timer_stop(void);

#undef VINO_IMPORT
#endif
