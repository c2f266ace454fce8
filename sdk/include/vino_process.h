/* vino_process.h: what a program running as a VINO process (`vino run`) may ask of the kernel
 * beyond WASI: grafting its own objects from inside, modes and owners, a null call, and the
 * process model (process ids, spawn and wait, pipes and FIFOs, signals). Programs reach the
 * last through POSIX calls (posix_spawn, waitpid, pipe, sigaction...) in the SDK's
 * compatibility layer rather than directly. Build
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

/* Binds the stream codec `wasm` (`len` bytes, a `file.stream` graft) to the empty regular file or
 * the directory at `path` (`path_len` bytes), relative to the preopened directory `dirfd`; a
 * `len` of 0 unbinds. Only the file's owner may (-EPERM); -EINVAL: not a codec, or the file
 * holds data. */
VINO_IMPORT(stream_bind)
int vino_stream_bind(int dirfd, const char *path, size_t path_len, const void *wasm, size_t len);

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

/* The process model. Signal numbers are Linux's (<signal.h>); a signal set is a 64-bit mask,
 * bit (sig - 1) for sig. Each call returns its result (>= 0) or a negative errno. */

/* This process's id; its parent's (0 when the parent is gone or it has none). */
VINO_IMPORT(getpid)
int vino_getpid(void);
VINO_IMPORT(getppid)
int vino_getppid(void);

/* One thing done in a spawned child before it starts, in order: 28 bytes, as the kernel reads
 * them. `path_ptr` is the address of the path in the program's memory (absolute: it resolves in
 * the parent's preopened directories), `oflag` a <fcntl.h> O_* set. */
struct vino_spawn_action {
    uint32_t kind; /* VINO_SPAWN_CLOSE, VINO_SPAWN_DUP2 or VINO_SPAWN_OPEN */
    uint32_t fd;
    uint32_t newfd;
    uint32_t oflag;
    uint32_t mode;
    uint32_t path_ptr;
    uint32_t path_len;
};
#define VINO_SPAWN_CLOSE 0 /* close(fd) */
#define VINO_SPAWN_DUP2 1  /* dup2(fd, newfd) */
#define VINO_SPAWN_OPEN 2  /* open(path, oflag, mode) placed at newfd */

/* A spawned child's signal state: with VINO_SPAWN_SETSIGMASK its mask is `sigmask` (else the
 * parent's), with VINO_SPAWN_SETSIGDEF the signals in `sigdefault` start at their default
 * action; VINO_SPAWN_SETPGROUP (process groups, sessions) is refused with -ENOTSUP. */
struct vino_spawn_attr {
    uint32_t flags;
    uint32_t pad;
    uint64_t sigmask;
    uint64_t sigdefault;
};
#define VINO_SPAWN_SETSIGMASK 1
#define VINO_SPAWN_SETSIGDEF 2
#define VINO_SPAWN_SETPGROUP 4

/* Starts the program whose module is open (for reading) as `module_fd`, as a child of this
 * process: its arguments and environment are NUL-terminated strings laid end to end (`argv_len`
 * and `envp_len` bytes in all). It inherits every open descriptor (the same open files: shared
 * offsets and pipe ends), then `actions` apply; `attr` may be NULL. Handled signals start at
 * their default action in the child, ignored ones stay ignored. Returns the child's pid;
 * -EAGAIN past the user's process limit, -ENOEXEC not a program, -EFBIG a module too large,
 * -EACCES no execute permission, -EBADF a bad descriptor. */
VINO_IMPORT(spawn)
int vino_spawn(int module_fd, const char *argv, size_t argv_len, const char *envp, size_t envp_len,
               const struct vino_spawn_action *actions, size_t nactions, const struct vino_spawn_attr *attr);

/* Waits for the child `pid` (-1: any) to end and reaps it: its pid, and a Linux wait status in
 * `*status` (exit code << 8, or the signal that killed it). With VINO_WAIT_NOHANG, 0 if none
 * has ended yet. -ECHILD no such child, -EINTR a handled signal arrived. */
#define VINO_WAIT_NOHANG 1
VINO_IMPORT(wait)
int vino_wait(int pid, int options, int *status);

/* A pipe (64 KiB; writes up to 4096 bytes are atomic): the read end in fds[0], the write end in
 * fds[1]. `fdflags` are WASI's fd flags (4 = non-blocking). */
VINO_IMPORT(pipe)
int vino_pipe(int fds[2], uint32_t fdflags);

/* Makes a FIFO at `path` (`path_len` bytes), relative to the preopened directory `dirfd`. */
VINO_IMPORT(mkfifo)
int vino_mkfifo(int dirfd, const char *path, size_t path_len, uint32_t mode);

/* Sends `sig` to the process `pid` (> 0; 0 checks only): -EPERM another user's, -ESRCH none,
 * -ENOTSUP a pid of 0 or below (process groups). */
VINO_IMPORT(kill)
int vino_kill(int pid, int sig);

/* Sets what `sig` does: VINO_SIG_DEFAULT, VINO_SIG_IGNORE or VINO_SIG_HANDLED (the kernel calls
 * the trampoline registered with vino_signal_trampoline, `trampoline(sig)`, at the program's
 * next safe point, with `sig` blocked while it runs); `flags` VINO_SA_RESTART resumes a blocking call it interrupts. Returns the old
 * disposition; -EINVAL for SIGKILL and SIGSTOP. VINO_SIG_QUERY changes nothing and returns the
 * disposition. */
#define VINO_SIG_QUERY (-1)
#define VINO_SIG_DEFAULT 0
#define VINO_SIG_IGNORE 1
#define VINO_SIG_HANDLED 2
#define VINO_SA_RESTART 1
VINO_IMPORT(sigaction)
int vino_sigaction(int sig, int disposition, int flags);

/* Registers the function the kernel calls to run a handled signal's handler (through the
 * program's function table, which `vino build` exports). Without one, a handled signal does
 * what it does by default. */
VINO_IMPORT(signal_trampoline)
int vino_signal_trampoline(void (*trampoline)(int sig));

/* Changes the blocked set (`how`: 0 block, 1 unblock, 2 set), the old one to `*old` unless
 * NULL; the pending set; waiting with `mask` until a handler has run (always -EINTR). */
VINO_IMPORT(sigprocmask)
int vino_sigprocmask(int how, uint64_t set, uint64_t *old);
VINO_IMPORT(sigpending)
int vino_sigpending(uint64_t *set);
VINO_IMPORT(sigsuspend)
int vino_sigsuspend(uint64_t mask);

/* ---- Files mapped into memory (the SDK's mmap, munmap and msync call these). ----
 * vino_mmap maps `len` bytes of the file open as `fd`, from `offset`, over the `len` bytes of
 * the program's memory at `addr` (both page-aligned, VINO_MEMORY_PAGE_SIZE; what was there goes).
 * VINO_MAP_SHARED: stores reach the file (written back when the kernel evicts the page, at
 * vino_msync, at vino_munmap and when the program ends) and the mapping sees the file's writes
 * by others; else the pages are the program's own copies from the first touch.
 * VINO_MAP_WRITABLE: the program may store (else a store traps). A touch of a mapped page wholly
 * past the end of the file (truncated meanwhile) traps. -ENOTSUP where the kernel does not page
 * program memory. vino_munmap ends a mapping (exactly as mapped); vino_msync writes back, and
 * with `durable` makes durable, what was stored through shared mappings in the range. */
#define VINO_MEMORY_PAGE_SIZE 4096u
#define VINO_MAP_SHARED 1u
#define VINO_MAP_WRITABLE 2u
VINO_IMPORT(mmap)
int vino_mmap(void *addr, size_t len, unsigned flags, int fd, uint64_t offset);
VINO_IMPORT(munmap)
int vino_munmap(void *addr, size_t len);
VINO_IMPORT(msync)
int vino_msync(void *addr, size_t len, unsigned durable);

/* Sockets: TCP and UDP over IPv4, on the kernel's network stack (the SDK's <sys/socket.h>
 * declares the POSIX calls over these; WASI's own sock_accept, sock_recv, sock_send and
 * sock_shutdown serve accept, recv, send and shutdown). Addresses are `struct sockaddr_in`.
 * Each returns 0 or a result, or a negative errno: -EAFNOSUPPORT not AF_INET,
 * -EADDRINUSE a port bound already (by anyone), -EACCES a port below 1024 for a user other
 * than root, -ENOBUFS the user's sockets or socket memory at its limit, -ECONNREFUSED nothing
 * listens there, -EINPROGRESS a non-blocking connect under way, -EINTR a handled signal came.
 * A socket is its process's: a spawned child does not inherit it.
 * vino_socket's `type` is SOCK_STREAM or SOCK_DGRAM, with SOCK_NONBLOCK or not; it returns
 * the descriptor. vino_sendto and vino_recvfrom return bytes; `addr` may be NULL for both. */
VINO_IMPORT(socket)
int vino_socket(int domain, int type);
VINO_IMPORT(bind)
int vino_bind(int fd, const void *addr, uint32_t addr_len);
VINO_IMPORT(listen)
int vino_listen(int fd, int backlog);
VINO_IMPORT(connect)
int vino_connect(int fd, const void *addr, uint32_t addr_len);
VINO_IMPORT(getsockname)
int vino_getsockname(int fd, void *addr, uint32_t *addr_len);
VINO_IMPORT(getpeername)
int vino_getpeername(int fd, void *addr, uint32_t *addr_len);
/* Stream layers on a connection (Small 1998's protocol objects): vino_socket_push puts the
 * stream graft `wasm` (a file.stream module: a compressor, an encryptor) on top of the
 * connection's layers and returns its depth (0 the lowest); what the program sends from then on
 * is framed and encoded by it, what it receives decoded. The peer pushes the same at the same
 * point of the stream. Control calls (an encryptor's key) go to the graftpoint
 * "net.stream/<fd>/<depth>" (vino_graft_call). vino_socket_pop takes the top layer off.
 * Errors: -ENOTCONN not a connection, -ENOBUFS four layers already or socket memory at its
 * limit, -EBUSY a send or receive under way (or, for a pop, half a frame received), -EINVAL
 * not a stream graft (push) or no layer (pop). Afterwards a receive fails -EPROTO for a
 * malformed or truncated stream and -EIO for a frame a layer refused (a forged one): the
 * connection is then of no more use. */
VINO_IMPORT(socket_push)
int vino_socket_push(int fd, const void *wasm, size_t len);
VINO_IMPORT(socket_pop)
int vino_socket_pop(int fd);
/* TCP_NODELAY (setsockopt's): with `on`, small segments go out at once instead of waiting for
 * the acknowledgement of what is in flight (Nagle's rule). Kept for a socket not connected yet;
 * a listener's connections inherit it. -ENOPROTOOPT for a UDP socket. */
VINO_IMPORT(socket_nodelay)
int vino_socket_nodelay(int fd, int on);
VINO_IMPORT(sendto)
int vino_sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t addr_len);
VINO_IMPORT(recvfrom)
int vino_recvfrom(int fd, void *buf, size_t len, int flags, void *addr, uint32_t *addr_len);

#undef VINO_IMPORT

#endif
