/*
 * vino_graft.h -- the VINO graft ABI for C (see docs/graft-abi.md).
 *
 * A graft is a core WebAssembly module: no WASI, no libc. Build one with vino_sdk::build_c (which
 * carries this header inside, so it works from any directory), or by hand with the system clang:
 *
 *     clang --target=wasm32 -O2 -nostdlib -ffreestanding -fvisibility=hidden \
 *           -Wl,--no-entry -Wl,--export-dynamic -Wl,--stack-first \
 *           -Wl,-z,stack-size=65536 -I sdk/include my_graft.c -o my_graft.wasm
 *
 * The contract, in brief:
 *
 *   exports  `memory`                 the graft's linear memory (the kernel caps it, 16 MiB default)
 *            one function per graftpoint, named after it with '.' -> '_'
 *                                      (`vas.pick_victim` -> `vas_pick_victim`): VINO_GRAFT(name)
 *            `vino_args`               (global i32) address of the 4096-byte, 16-aligned argument
 *                                      area where the kernel copies bulk arguments and reads bulk
 *                                      results; this header defines it for every graft
 *            `vino_ctl_<name>`         control functions the owner may call: VINO_CONTROL(name);
 *                                      i32/i64 parameters (at most 8) and an i32/i64 result
 *            any other global          a data symbol the owner locates by name and writes into
 *                                      (the thesis' "shared" hot list): VINO_SHARED
 *   imports  only from module "vino", and only what the graftpoint allows (declared below);
 *            anything else and the kernel refuses the module at load.
 *
 *   failure  a trap, running past the CPU budget or deadline, growing memory past the cap, a bad
 *            argument to a vino_* function or an invalid result aborts the invocation's
 *            transaction: every kernel change is undone and the kernel's default decides.
 *            Note: the graft's own linear memory is its business; it is not rolled back.
 *
 * Every invocation runs inside a transaction, so a graft may simply VINO_TRAP() when it finds
 * itself confused: the kernel's default policy is always a safe answer.
 */
#ifndef VINO_GRAFT_H
#define VINO_GRAFT_H

/* VINO_GRAFT_NATIVE: the same C built for the host, to measure a graft against itself unprotected
 * (`vino bench streams`); the attributes and imports fall away and libc supplies memcpy. */
#if !defined(__wasm32__) && !defined(VINO_GRAFT_NATIVE)
#error "vino_graft.h is for grafts: compile with clang --target=wasm32"
#endif

#ifdef __cplusplus
extern "C" {
#define VINO_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define VINO_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* ---- Fixed-width types (from clang's builtin macros: no libc headers needed). ---- */

typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __SIZE_TYPE__ size_t;
#ifndef UINT64_MAX
#define UINT64_MAX __UINT64_MAX__
#endif

#ifndef __cplusplus
#ifndef bool
#define bool _Bool
#define true 1
#define false 0
#endif
#endif

#ifndef NULL
#define NULL ((void *)0)
#endif

#ifndef VINO_GRAFT_NATIVE
VINO_STATIC_ASSERT(sizeof(uint64_t) == 8 && sizeof(void *) == 4, "wasm32 expected");
#endif

/* ---- Attributes. ---- */

/* Export the function that follows as the implementation of a graftpoint:
 *     VINO_GRAFT(vas_pick_victim) int32_t pick(int32_t n) { ... }
 * The name is macro-expanded first, so VINO_TOY (below) can rename it. */
#define VINO_STRINGIFY_(x) #x
#define VINO_STRINGIFY(x) VINO_STRINGIFY_(x)
#ifdef VINO_GRAFT_NATIVE
#define VINO_GRAFT(graftpoint)
#else
#define VINO_GRAFT(graftpoint) __attribute__((export_name(VINO_STRINGIFY(graftpoint))))
#endif

/* The toy kernel (vino-toykernel, for tests and demonstrations) has toy.pick_victim and
 * toy.compute_ra, which take and return exactly what vas.pick_victim and file.compute_ra do.
 * Building with -DVINO_TOY turns a graft written for the real graftpoint into one for the toy's,
 * names and exports included. */
#ifdef VINO_TOY
#define vas_pick_victim toy_pick_victim
#define file_compute_ra toy_compute_ra
#endif

/* Export a control function the owning process calls with call_control("<name>", args):
 *     VINO_CONTROL(hot_add) int32_t hot_add(uint64_t page) { ... }  -> export `vino_ctl_hot_add` */
#ifdef VINO_GRAFT_NATIVE
#define VINO_CONTROL(name)
#else
#define VINO_CONTROL(name) __attribute__((export_name("vino_ctl_" #name)))
#endif

/* Data the owner locates by name (an exported i32 global holding its address) and writes into. */
#define VINO_SHARED __attribute__((visibility("default"), used))

/* Declare a graft-callable kernel function imported from module "vino". */
#ifdef VINO_GRAFT_NATIVE
#define VINO_IMPORT(name)
#else
#define VINO_IMPORT(name) __attribute__((import_module("vino"), import_name(#name)))
#endif

/* Give up: the invocation aborts, its kernel changes are undone, the default decides. */
#define VINO_TRAP() __builtin_trap()

/* ---- The argument area. ---- */

/* 4096 bytes; a stream graft (file.stream) defines VINO_STREAM_ARGS before including this header
 * and gets the larger area its graftpoint needs (header, input chunk, output chunk); an
 * exec.verify graft defines VINO_EXEC_VERIFY_ARGS and gets 16 KiB (a chunk of the module); a
 * server graft (event.net.packet) defines VINO_NET_ARGS and gets 64 KiB (input, output,
 * actions). */
#ifdef VINO_STREAM_ARGS
#define VINO_ARG_BYTES (64 + 2 * (65536 + 4096))
#elif defined(VINO_EXEC_VERIFY_ARGS)
#define VINO_ARG_BYTES 16384
#elif defined(VINO_NET_ARGS)
#define VINO_ARG_BYTES 65536
#else
#define VINO_ARG_BYTES 4096
#endif

/* Weak so that every translation unit may include this header; exported because the kernel finds
 * the area through the `vino_args` global. */
__attribute__((weak, aligned(16), visibility("default"))) unsigned char vino_args[VINO_ARG_BYTES];

static inline void *vino_arg_area(void) { return (void *)vino_args; }

/* ---- Graft-callable imports. ---- */

/* Every graftpoint (vino_now_ns: all but file.stream, whose output must not depend on time). */
VINO_IMPORT(vino_now_ns) int64_t vino_now_ns(void);             /* monotonic nanoseconds */
VINO_IMPORT(vino_log) void vino_log(const char *ptr, int32_t len); /* <= 256 bytes kept */

/* The toy kernel's graftpoints only (toy.apply, toy.pick_victim, toy.compute_ra): the kernel's
 * refuse a graft that imports them. A key out of range aborts the transaction. */
VINO_IMPORT(vino_toy_get) int64_t vino_toy_get(int32_t key);             /* shared lock */
VINO_IMPORT(vino_toy_set) void vino_toy_set(int32_t key, int64_t value); /* exclusive, undone on abort */
VINO_IMPORT(vino_toy_call_inner) int64_t vino_toy_call_inner(int64_t arg); /* a graft in a nested transaction */

static inline void vino_log_str(const char *s) {
    int32_t n = 0;
    while (n < 256 && s[n] != 0)
        n++;
    vino_log(s, n);
}

/* ---- Graftpoints: signatures and typed views of the argument area. ----
 * Prototypes make the compiler check a graft's signature; define VINO_NO_GRAFTPOINT_PROTOTYPES
 * before including this header to give a function of that name another type. */

/* toy.apply: any result >= 0 is valid, a negative one is invalid. Default: returns arg. */
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int64_t toy_apply(int64_t arg);
#endif

/* vas.pick_victim (thesis 7.7.1): the argument area holds a page of n <= VINO_VICTIM_MAX candidate
 * page ids in LRU order (pages passed over before an earlier choice count as used at that
 * choice); the first call of an eviction gets the oldest, page[0] being the kernel's
 * own choice (the first page holds the 32 oldest, later ones up to 256). vino_victim_first() is the index of page[0] among all candidates offered in this
 * eviction (0 on the first call). Result: the index, counted over all candidates offered so far,
 * of the page to evict; or VINO_VICTIM_MORE to be called again with the next page (n == 0 when
 * every candidate was offered: choose among those seen, or return an invalid index to let the
 * kernel decide). Each page costs the graft's budget a little. Anything else is invalid.
 * Default: 0. (toy.pick_victim offers one page only.) */
#define VINO_VICTIM_MAX 256
#define VINO_VICTIM_MORE (-2)
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t vas_pick_victim(int32_t n);
#endif
static inline const uint64_t *vino_victim_pages(void) { return (const uint64_t *)vino_args; }
static inline uint64_t vino_victim_first(void) {
    return *(const uint64_t *)(vino_args + VINO_VICTIM_MAX * sizeof(uint64_t));
}
/* A vas.pick_victim graft may also say what should become of its pages:
 * vino_page_hint(page, hint) -> 0, -EINVAL (unknown hint, a page of program memory) or -ENOSPC
 * (more than VINO_HINTS_MAX hints in this call). KEEP: as if just used; COLD: to the cold end,
 * taken next; DROP: its frame given back now if clean and not in use (else as COLD). Hints apply
 * when the call commits, to the process's own pages still cached (others are ignored); a call
 * that fails afterwards has its hints dropped. */
#define VINO_HINT_KEEP 0
#define VINO_HINT_COLD 1
#define VINO_HINT_DROP 2
#define VINO_HINTS_MAX 64
VINO_IMPORT(vino_page_hint) int32_t vino_page_hint(uint64_t page, int32_t hint);
/* The same graft decides for the process's program memory when it is over its resident share:
 * its candidates are then its memory pages, id VINO_MEMORY_PAGE(index) (inactive pages oldest
 * first, then active ones oldest first), up to 256 in one page. */
#define VINO_MEMORY_OBJECT 0xFFFFFFFFull
#define VINO_MEMORY_PAGE(index) ((VINO_MEMORY_OBJECT << 32) | (uint64_t)(index))

/* vm.fault_around (thesis 2.2): a page of the process's program memory faulted (page, of pages
 * in all). Return VINO_FAULT_AROUND(first, count): count pages from first come in, the faulting
 * one among them, at most VINO_FAULT_AROUND_MAX, none past the end. Anything else is invalid.
 * Default: the page alone. */
#define VINO_FAULT_AROUND_MAX 32
#define VINO_FAULT_AROUND(first, count) ((int64_t)(((uint64_t)(first) << 32) | (uint64_t)(count)))
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int64_t vm_fault_around(int64_t page, int64_t pages);
#endif

/* file.compute_ra (thesis 7.7.2): called after each read of len bytes at offset. Write up to
 * VINO_RA_MAX_EXTENTS extents at the start of the argument area and return how many (0: no
 * read-ahead). Invalid: a count < 0 or > 16, an extent of length 0, an extent reaching past
 * file_size, more than VINO_RA_MAX_BYTES in all. Default: sequential detection + a cluster. */
struct vino_extent {
    uint64_t off;
    uint64_t len;
};
#define VINO_RA_MAX_EXTENTS 16
#define VINO_RA_MAX_BYTES (1u << 20)
#define VINO_BLOCK_SIZE 4096 /* block size of the kernel's cache; read-ahead is best aligned to it */
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t file_compute_ra(int64_t offset, int32_t len, int64_t file_size);
#endif
static inline struct vino_extent *vino_ra_extents(void) { return (struct vino_extent *)vino_args; }
/* file.compute_ra may also ask as it goes: vino_prefetch(offset, len) -> 0, -EINVAL (empty, or
 * past file_size), -ENOSPC (more than VINO_RA_MAX_EXTENTS requests or VINO_RA_MAX_BYTES in this
 * call). Requests are issued when the call commits, besides the extents it returns; a call that
 * fails afterwards (a trap, its budget, an invalid result) has its requests dropped unissued. */
VINO_IMPORT(vino_prefetch) int32_t vino_prefetch(int64_t offset, int64_t len);

/* cache.writeback (global, privileged; Seltzer et al. 1995, 3): called about once a second while
 * pages are dirty. The argument area holds n <= VINO_WRITEBACK_MAX dirty pages, oldest first,
 * with `write` zero. Set `write` on the pages to write now and return how many were set; a count
 * that does not match is invalid. Default: every page dirty for 30 s or more. */
#define VINO_WRITEBACK_MAX 128
struct vino_dirty_page {
    uint64_t object;  /* the file */
    uint64_t index;   /* block of the file */
    uint64_t age_ns;  /* dirty for this long */
    uint32_t write;   /* set to nonzero: write it now */
    uint32_t pad;
};
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t cache_writeback(int32_t n, int64_t now_ns);
#endif
static inline struct vino_dirty_page *vino_dirty_pages(void) { return (struct vino_dirty_page *)vino_args; }

/* file.block_buddy (per file, its creator; thesis 7.5, 7.7.7): called when block `index` of file
 * `ino` gets a device block. `prev` is the device block of file block index - 1 (0 for a hole or
 * index 0), `group` the cylinder group of the file's inode, `groups` and `per_group` the
 * geometry. Return a preferred device block (the allocator takes the first free one at or after
 * it, in its group, then the following groups) or 0 for no preference. No argument area.
 * Default: FFS placement, switching groups at the first indirect block. */
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int64_t file_block_buddy(int64_t ino, int64_t index, int64_t prev, int32_t group, int32_t groups, int64_t per_group);
#endif

/* disk.pick_request (global, privileged): the argument area holds n <= VINO_DISK_PICK_MAX waiting
 * requests in arrival order; `head` is the block after the last one dispatched. Return the index
 * of the request to serve next; anything else is invalid. Default: one-way elevator (C-LOOK). */
#define VINO_DISK_PICK_MAX 128
#define VINO_DISK_WRITE 1u /* flags bit 0 */
struct vino_disk_request {
    uint64_t block;   /* first 4096-byte block */
    uint32_t nblocks; /* length in blocks */
    uint32_t flags;   /* VINO_DISK_WRITE */
    uint64_t age_ns;  /* time waited so far */
};
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t disk_pick_request(int32_t n, int64_t head);
#endif
static inline const struct vino_disk_request *vino_disk_requests(void) {
    return (const struct vino_disk_request *)vino_args;
}

/* sched.pick_next (global, privileged) and sched.pick_thread (one per process, its own): the
 * argument area holds n <= VINO_SCHED_PICK_MAX runnable threads in the order they became runnable
 * (entry 0 has waited longest); `def` is the index the kernel would choose. Return the index of
 * the thread to run; anything else is invalid and the kernel's choice stands. pick_thread sees
 * only its own process's threads, on the turns the process's share gives it. A thread that has
 * waited past the starvation cap runs first whatever a graft says. Default: proportional share
 * (stride scheduling with per-user currencies); within a process, arrival order. */
#define VINO_SCHED_PICK_MAX 64
struct vino_sched_thread {
    uint64_t tid;
    uint64_t pid;
    uint32_t uid;
    uint32_t tickets;   /* the process's, in its user's currency */
    uint64_t waited_ns; /* since it became runnable */
};
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t sched_pick_next(int32_t n, int32_t def);
int32_t sched_pick_thread(int32_t n, int32_t def);
#endif
/* sched.pick_thread may give some of its process's tickets to another process of the same user:
 * vino_tickets_give(pid, tickets) -> 0, -EINVAL (none, too many, itself) or -ENOSPC (more than 8
 * gifts in this call). Made after the call commits, if pid is then the same user's and the giver
 * keeps at least one ticket; dropped if the call fails. */
VINO_IMPORT(vino_tickets_give) int32_t vino_tickets_give(int64_t pid, int32_t tickets);
static inline const struct vino_sched_thread *vino_sched_threads(void) {
    return (const struct vino_sched_thread *)vino_args;
}

/* event.timer (one per process, its own): called every period of the process's timer
 * (Process::timer_start; vino_timer_start from a VINO process) on a thread of the process, whose
 * CPU it uses. `count` is the firings so far, this one included; `late_ns` how late this one is
 * against its period's start. A negative result is invalid (the invocation aborts). Default:
 * nothing. */
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t event_timer(int64_t count, int64_t late_ns);
#endif

/* event.fs.{open,close,create,unlink,modify} (thesis 3.5, 7.4): one graftpoint per kind of file
 * event, in the process's own namespace, called asynchronously by a kernel thread for each event
 * that passes the process's filter (Process::event_filter) on a file the process may read and
 * reached: a named event needs the right to list its directory, a close or modify that the
 * process holds the file open or named its inode in the filter (see docs/graft-abi.md).
 * Arguments: the kind (VINO_EVENT_*), the file's inode, the directory holding the name (0 for
 * close and modify), the acting process, when it happened (vino_now_ns clock) and the length of
 * the name (create, unlink, open; 0 otherwise), which is at the start of the argument area,
 * NUL-terminated. Result: >= 0 commits; a negative result is invalid and aborts the invocation
 * (its deferred writes are dropped). Default: nothing. */
#define VINO_EVENT_OPEN 0
#define VINO_EVENT_CLOSE 1
#define VINO_EVENT_CREATE 2
#define VINO_EVENT_UNLINK 3
#define VINO_EVENT_MODIFY 4
#define VINO_EVENT_NAME_MAX 255
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t event_fs_open(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns, int32_t name_len);
int32_t event_fs_close(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns, int32_t name_len);
int32_t event_fs_create(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns, int32_t name_len);
int32_t event_fs_unlink(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns, int32_t name_len);
int32_t event_fs_modify(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns, int32_t name_len);
#endif
static inline const char *vino_event_name(void) { return (const char *)vino_args; }

/* Event graftpoints only: write to and force a file the graft's owning process has open for
 * writing. The arguments are checked at the call (-9 EBADF: not a descriptor open for writing;
 * -22 EINVAL: len < 0 or > 65536, offset < -1; -14 EFAULT: the buffer is outside the graft's
 * memory), but the effect is deferred to the invocation's commit: if the graft then traps or
 * returns an invalid result, the file is unchanged. vino_file_write returns len and writes at
 * `offset`, or at the end of the file (as it is at commit) for offset -1; vino_file_fsync
 * returns 0 and, at commit, after the writes before it, forces the file to the device. */
VINO_IMPORT(vino_file_write) int32_t vino_file_write(int32_t fd, int64_t offset, const void *ptr, int32_t len);
VINO_IMPORT(vino_file_fsync) int32_t vino_file_fsync(int32_t fd);

/* lock.grant (per file, its creator): called when a byte-range lock is released or downgraded, or
 * a request arrives that overlaps others waiting. The argument area holds n <= VINO_LOCK_GRANT_MAX
 * waiting requests in arrival order, then m locks held on the file. Return a bit mask of the
 * waiters to grant (bit i: entry i), granted in index order; a bit >= n, a negative result or a
 * waiter that conflicts with a held lock or an earlier granted one is invalid. 0 grants nothing
 * (the kernel steps in if no holder could ever release). Default: FIFO/reader priority. */
#define VINO_LOCK_GRANT_MAX 64
#define VINO_LOCK_WRITE 1u   /* flags bit 0: write lock */
#define VINO_LOCK_UPGRADE 2u /* flags bit 1: the waiter holds a read lock there and wants to write */
struct vino_lock {
    uint64_t owner;  /* process id */
    uint64_t start;  /* first byte */
    uint64_t end;    /* one past the last byte; UINT64_MAX: to infinity */
    uint32_t flags;  /* VINO_LOCK_WRITE, VINO_LOCK_UPGRADE */
    uint32_t age_us; /* waiters: microseconds waited (saturating); held locks: 0 */
};
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int64_t lock_grant(int32_t n, int32_t m);
#endif
static inline const struct vino_lock *vino_lock_entries(void) { return (const struct vino_lock *)vino_args; }
/* lock.grant may also reorder the file's queue: vino_lock_requeue(i, place) moves waiter i (as
 * offered) to the front (VINO_REQUEUE_FRONT) or the back (VINO_REQUEUE_BACK) -> 0, -EINVAL (no
 * such waiter, unknown place) or -ENOSPC (more than 64 moves in this call). Done when the call
 * commits, after its grants, to the waiter if it still waits; dropped if the call fails. */
#define VINO_REQUEUE_FRONT 0
#define VINO_REQUEUE_BACK 1
VINO_IMPORT(vino_lock_requeue) int32_t vino_lock_requeue(int32_t index, int32_t place);

/* dir.access (the directory's owner, for the tree under it; thesis 4.2's access control): asked
 * about every lookup, open and change of a name in a directory under the bound one, by any user,
 * after the permission bits allowed it. The name is in vino_args (name_len bytes, no NUL); dir
 * is the inode of the directory it is in; now_s the wall clock in seconds (time-of-day rules).
 * Return 0 to allow, anything else to refuse (EACCES). A trap or running past the budget
 * refuses too: the graft fails closed. It can only narrow what POSIX allows. */
#define VINO_ACCESS_LOOKUP 0  /* a walk looks the name up */
#define VINO_ACCESS_OPEN 1    /* the name is opened (an open's last name: no LOOKUP first); flags: VINO_OPEN_* */
#define VINO_ACCESS_CREATE 2  /* the name is made; flags: the file type's S_IFMT bits */
#define VINO_ACCESS_REMOVE 3  /* the name is removed (unlink, rmdir, a rename's old name) */
#define VINO_ACCESS_SETATTR 4 /* its attributes change; flags: VINO_SETATTR_* */
#define VINO_OPEN_READ 1
#define VINO_OPEN_WRITE 2
#define VINO_OPEN_CREATE 4
#define VINO_OPEN_TRUNCATE 8
#define VINO_OPEN_APPEND 16
#define VINO_SETATTR_MODE 1
#define VINO_SETATTR_OWNER 2
#define VINO_SETATTR_SIZE 4
#define VINO_SETATTR_TIMES 8
#define VINO_SETATTR_XATTR 16
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t dir_access(int32_t op, int32_t uid, int32_t gid, int32_t flags, int64_t dir, int32_t name_len, int64_t now_s);
#endif

/* dir.lookup (the process itself, for its own walks): asked about each name a walk of the process
 * looks up (in vino_args, name_len bytes; dir the directory's inode). Return 0 to look the name
 * up as it is, or n (1..4095) to look up instead the path written in the first n bytes of
 * vino_args (absolute, or relative to dir). The kernel walks it with the process's own
 * credentials and every check; its names are not redirected again. A failure redirects nothing. */
#define VINO_ROOT_INO 1
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t dir_lookup(int64_t dir, int32_t name_len);
#endif

/* file.stream (one per bound file or directory, the file's owner; thesis 4.2's stream graft): the
 * kernel keeps plain pages in its cache and calls the graft for each whole chunk of up to
 * VINO_STREAM_CHUNK plain bytes it writes back (op VINO_STREAM_ENCODE) and for each chunk it
 * reads on a miss (op VINO_STREAM_DECODE). Build with VINO_STREAM_ARGS defined (the area is
 * VINO_STREAM_ARG_BYTES). The argument area:
 *     [0, 24)    nonce: fresh random bytes for each chunk written, stored beside it (decode gets
 *                the ones the encode got)
 *     [24, 32)   chunk index in the file (u64)
 *     [32, 36)   plain_len (u32): encode, = in_len; decode, the length the graft must produce
 *     [36, 40)   op (u32), the same as the argument
 *     [40, 44)   flags (u32): VINO_STREAM_RAW_INPUT on a decode of a frame the peer's encoder
 *                left raw (a socket's layer: Process::socket_push); a graft that accepts raw
 *                bytes copies the input and answers plain_len, any other refuses
 *     [44, 64)   zero
 *     [64, ...)  the input, in_len bytes: vino_stream_in()
 *     [64 + VINO_STREAM_MAX_ENCODED, ...)   the output: vino_stream_out()
 * Encode returns n >= 0 encoded bytes (n <= in_len + VINO_STREAM_MAX_GROWTH), VINO_STREAM_RAW to
 * have the plain bytes stored as they are (a compressor that did not shrink them), or
 * VINO_STREAM_NEED_KEY. Decode returns plain_len, or VINO_STREAM_NEED_KEY. Any other result
 * (VINO_STREAM_FAILED for a bad tag, a corrupt chunk) fails the read or the write-back (EIO;
 * EACCES for NEED_KEY); so do a trap and running past the budget. There is no default: nothing
 * is ever stored or returned for a chunk the graft failed on. No clock: vino_now_ns is refused. */
#define VINO_STREAM_CHUNK 65536
#define VINO_STREAM_MAX_GROWTH 4096
#define VINO_STREAM_MAX_ENCODED (VINO_STREAM_CHUNK + VINO_STREAM_MAX_GROWTH)
#define VINO_STREAM_NONCE_BYTES 24
#define VINO_STREAM_HEADER 64
#define VINO_STREAM_ARG_BYTES (VINO_STREAM_HEADER + 2 * VINO_STREAM_MAX_ENCODED)
#define VINO_STREAM_ENCODE 0
#define VINO_STREAM_DECODE 1
#define VINO_STREAM_FAILED (-1)
#define VINO_STREAM_RAW (-2)
#define VINO_STREAM_NEED_KEY (-3)
#define VINO_STREAM_RAW_INPUT 1
struct vino_stream_header {
    uint8_t nonce[VINO_STREAM_NONCE_BYTES];
    uint64_t chunk;
    uint32_t plain_len;
    uint32_t op;
    uint32_t flags;
    uint8_t zero[20];
};
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t file_stream(int32_t op, int64_t chunk, int32_t in_len);
#endif
static inline const struct vino_stream_header *vino_stream_header(void) {
    return (const struct vino_stream_header *)vino_args;
}
static inline const uint8_t *vino_stream_nonce(void) { return vino_stream_header()->nonce; }
static inline uint32_t vino_stream_plain_len(void) { return vino_stream_header()->plain_len; }
static inline uint32_t vino_stream_flags(void) { return vino_stream_header()->flags; }
static inline uint8_t *vino_stream_in(void) { return vino_args + VINO_STREAM_HEADER; }
static inline uint8_t *vino_stream_out(void) { return vino_args + VINO_STREAM_HEADER + VINO_STREAM_MAX_ENCODED; }
VINO_STATIC_ASSERT(sizeof(struct vino_stream_header) == VINO_STREAM_HEADER, "the stream header is 64 bytes");
#ifdef VINO_STREAM_ARGS
VINO_STATIC_ASSERT(VINO_ARG_BYTES == VINO_STREAM_ARG_BYTES, "a stream graft's area holds both chunks");
#endif

VINO_STATIC_ASSERT((VINO_VICTIM_MAX + 1) * sizeof(uint64_t) <= VINO_ARG_BYTES, "victims fit");
VINO_STATIC_ASSERT(sizeof(struct vino_lock) == 32, "lock entries are 32 bytes");
VINO_STATIC_ASSERT(sizeof(struct vino_disk_request) == 24 && VINO_DISK_PICK_MAX * 24 <= VINO_ARG_BYTES, "disk requests fit");
VINO_STATIC_ASSERT(VINO_RA_MAX_EXTENTS * sizeof(struct vino_extent) <= VINO_ARG_BYTES, "extents fit");

/* ---- Freestanding memory helpers. ---- */
#ifdef VINO_GRAFT_NATIVE
void *memset(void *dst, int c, size_t n);
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
#else
/*
 * There is no libc, yet clang emits calls to memset/memcpy/memmove for struct copies and large
 * initialisations. Weak and hidden: a graft may bring its own, and they are never exported.
 * no_builtin keeps the optimiser from turning these loops back into calls to themselves. */

__attribute__((weak, visibility("hidden"), no_builtin)) void *memset(void *dst, int c, size_t n) {
    unsigned char *d = (unsigned char *)dst;
    while (n--)
        *d++ = (unsigned char)c;
    return dst;
}

__attribute__((weak, visibility("hidden"), no_builtin)) void *memcpy(void *dst, const void *src,
                                                                     size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    while (n--)
        *d++ = *s++;
    return dst;
}

__attribute__((weak, visibility("hidden"), no_builtin)) void *memmove(void *dst, const void *src,
                                                                      size_t n) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d < s) {
        while (n--)
            *d++ = *s++;
    } else {
        d += n;
        s += n;
        while (n--)
            *--d = *--s;
    }
    return dst;
}
#endif /* VINO_GRAFT_NATIVE */

/* net.congestion (the process itself, for its own TCP connections; Linux's tcp_congestion_ops,
 * open to every process): called on each congestion event of each of the process's connections
 * with the event, the time in microseconds, the bytes the event is about and the bytes in
 * flight. The area holds a struct vino_cc: the connection's numbers and the graft's own state
 * for it (all zero at VINO_CC_INIT), kept by the kernel between calls, and only when a call
 * succeeds. Return the new congestion window in bytes: at least 1 (a window below 536 bytes,
 * TCP's default segment, counts as 536), at most VINO_CC_MAX_WINDOW. Anything else, a trap or a call past its
 * budget: the built-in controller (CUBIC) decides that event, and the state stays as it was.
 *     VINO_CC_INIT      the graft meets the connection (first event after it was created, or
 *                       after this graft was bound)
 *     VINO_CC_ACK       len new bytes acknowledged; len 0: an ACK of nothing that changed whether
 *                       anything is in flight (idleness begins or ends)
 *     VINO_CC_DUP_ACK   a duplicate ACK, after VINO_CC_LOSS for the loss
 *     VINO_CC_LOSS      three duplicate ACKs inferred a loss
 *     VINO_CC_RTO       the retransmission timer fired
 *     VINO_CC_MSS       the segment size is now cc->mss (len too); now_us is 0
 *     VINO_CC_TX_START  the connection transmits again after being idle */
#define VINO_CC_INIT 0
#define VINO_CC_ACK 1
#define VINO_CC_DUP_ACK 2
#define VINO_CC_LOSS 3
#define VINO_CC_RTO 4
#define VINO_CC_MSS 5
#define VINO_CC_TX_START 6
#define VINO_CC_STATE_WORDS 16
#define VINO_CC_MAX_WINDOW (1ll << 30)
struct vino_cc {
    uint64_t cwnd;    /* the window in force before the event */
    uint64_t mss;     /* the segment size */
    uint64_t rwnd;    /* the largest window the peer advertised (at least 64 KiB) */
    uint64_t srtt_us; /* smoothed round-trip time; 0 before the first measurement */
    uint64_t reserved[2];
    uint64_t state[VINO_CC_STATE_WORDS]; /* the graft's own, for this connection */
};
static inline struct vino_cc *vino_cc(void) { return (struct vino_cc *)vino_args; }
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int64_t net_congestion(int32_t event, int64_t now_us, int64_t len, int64_t in_flight);
#endif

/* net.pick_packet: which packet goes next on the host link's way out, when root gave the link a
 * rate (without one, packets go out as they are sent). Two bindings: the link's (privileged;
 * candidates are each user's next packet, in the users' turn order; default: deficit round robin
 * weighted by the users' CPU tickets) and each user's own (net.pick_packet/user, any process of
 * the uid; candidates are the heads of the user's flows, a flow being one connection or one UDP
 * port's traffic to one peer, oldest head first; default: the oldest). A user's graft orders its
 * own packets only, within its share of the link; packets of one flow never change order. The
 * area holds n <= VINO_NET_PICK_MAX entries; `def` is 0. Return the index of the packet to send;
 * anything else, a trap or a call past its budget, and the default decides. A user's calls are
 * paid from its share of the stack's thread (5 ms in every 100 ms, with its congestion grafts);
 * past it, the default decides. */
#define VINO_NET_PICK_MAX 16
#define VINO_NET_KERNEL_UID 0xffffffffu
struct vino_net_packet {
    uint32_t len;       /* bytes of the IP packet */
    uint32_t waited_us; /* since it was queued */
    uint16_t src_port;
    uint16_t dst_port;
    uint8_t proto;      /* 6 TCP, 17 UDP, 0 without ports */
    uint8_t reserved[3];
    uint32_t uid;       /* its user (VINO_NET_KERNEL_UID: the kernel's own) */
    uint32_t backlog;   /* packets behind it in its flow (user) or its user's queue (link) */
};
static inline const struct vino_net_packet *vino_net_packets(void) {
    return (const struct vino_net_packet *)vino_args;
}
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t net_pick_packet(int32_t n, int32_t def);
#endif

/* event.net.packet (the process serving the port, Process::net_serve; Small 1998 3.5 and 4.2's
 * server in the kernel): called for each connection of the served port. Build with VINO_NET_ARGS
 * defined (the area is 64 KiB).
 *     VINO_NET_CONNECT  a new connection `conn`; the peer's IPv4 address (host order) and port at
 *                       the start of the area as two uint32_t. A negative result refuses it.
 *     VINO_NET_DATA     `len` (<= VINO_NET_IN) new bytes of `conn` at the start of the area; len 0:
 *                       the call asked for with VINO_NET_AGAIN.
 *     VINO_NET_CLOSE    `conn` ended: forget it (the result is ignored).
 * Answer with actions, written at vino_net_actions(), and return how many (<= VINO_NET_ACTIONS),
 * or'ed with VINO_NET_AGAIN to be called again (len 0) once they are done; negative: close the
 * connection. The bytes an action sends are written in the output region (vino_net_out(),
 * VINO_NET_OUT bytes) and named by offset and length there. A file is read and sent by the kernel
 * after the call, from the page cache, as the serving process (its permissions); ask
 * vino_net_stat(path, len) first: the size of a regular file the process may read, or -errno
 * (-2 ENOENT, -13 EACCES, -21 EISDIR). A call that fails, or an invalid answer, closes the
 * connection. */
#define VINO_NET_CONNECT 0
#define VINO_NET_DATA 1
#define VINO_NET_CLOSE 2
#define VINO_NET_IN 16384
#define VINO_NET_OUT_AT 16384
#define VINO_NET_OUT 32768
#define VINO_NET_ACTIONS_AT 49152
#define VINO_NET_ACTIONS 64
#define VINO_NET_AGAIN (1 << 16)
#define VINO_NET_SEND 1  /* a = offset in the output region, b = length */
#define VINO_NET_FILE 2  /* a, b = the path in the output region; offset, len: the range (len UINT64_MAX: to the end) */
#define VINO_NET_CLOSE_AFTER 3 /* close once everything before is sent */
struct vino_net_action {
    uint32_t kind;
    uint32_t a;
    uint32_t b;
    uint32_t reserved;
    uint64_t offset;
    uint64_t len;
};
static inline unsigned char *vino_net_in(void) { return (unsigned char *)vino_args; }
static inline char *vino_net_out(void) { return (char *)vino_args + VINO_NET_OUT_AT; }
static inline struct vino_net_action *vino_net_actions(void) {
    return (struct vino_net_action *)(vino_args + VINO_NET_ACTIONS_AT);
}
VINO_IMPORT(vino_net_stat) int64_t vino_net_stat(const char *path, int32_t len);
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t event_net_packet(int32_t event, int32_t conn, int32_t len);
#endif
#ifdef VINO_NET_ARGS
VINO_STATIC_ASSERT(VINO_ARG_BYTES == 65536, "a server graft's area is 64 KiB");
VINO_STATIC_ASSERT(sizeof(struct vino_net_action) == 32, "actions are 32 bytes");
#endif

/* exec.verify (global: privileged processes; `exec.verify/user`: any process of a user, for the
 * programs that user runs; Small 1998 4.2's executable fingerprints): a module about to run
 * streams through the graft. Build with VINO_EXEC_VERIFY_ARGS defined (the area is
 * VINO_EXEC_CHUNK bytes). Calls, one module's never interleaved with another's:
 *     op VINO_EXEC_BEGIN  len = the module's size in bytes; nothing in the area
 *     op VINO_EXEC_DATA   len <= VINO_EXEC_CHUNK bytes of the module at the start of vino_args,
 *                         in order
 *     op VINO_EXEC_END    the graft writes its 32-byte digest at the start of vino_args
 * Each call returns 0 (go on / allow) or 1 (deny; begin and data may deny early). Anything else,
 * a trap or a call past its budget refuses the program too, and counts as the graft's failure.
 * Default (nothing bound): every program runs. */
#define VINO_EXEC_BEGIN 0
#define VINO_EXEC_DATA 1
#define VINO_EXEC_END 2
#define VINO_EXEC_CHUNK 16384
#ifndef VINO_NO_GRAFTPOINT_PROTOTYPES
int32_t exec_verify(int32_t op, int32_t len);
#endif
#ifdef VINO_EXEC_VERIFY_ARGS
VINO_STATIC_ASSERT(VINO_ARG_BYTES == VINO_EXEC_CHUNK, "an exec.verify graft's area holds one chunk");
#endif

#ifdef __cplusplus
}
#endif

#endif /* VINO_GRAFT_H */
