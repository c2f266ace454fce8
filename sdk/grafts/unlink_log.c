/* unlink_log.c -- asynchronous bookkeeping on file unlink (Small 1998, 7.4.2 and 7.7.4), as a
 * graft for event.fs.unlink.
 *
 * The owner opens a log file for writing, tells the graft its descriptor (control function
 * log_set_fd), and sets its unlink filter to the files it watches. For each unlink that passes
 * the filter the graft appends a 64-byte record: who was unlinked (inode, directory, name), by
 * which process, and when. The write is transaction-protected: the kernel copies the record at
 * the call and writes it into the file only when the invocation commits.
 *
 * Record: {uint64_t inode, parent, pid, time_ns; char name[32]} (name cut at 31 bytes). */
#include "vino_graft.h"

struct unlink_record {
    uint64_t inode;
    uint64_t parent;
    uint64_t pid;
    uint64_t time_ns;
    char name[32];
};
VINO_STATIC_ASSERT(sizeof(struct unlink_record) == 64, "64-byte records");

static int32_t log_fd = -1;

VINO_CONTROL(log_set_fd) int32_t log_set_fd(int32_t fd) {
    log_fd = fd;
    return 0;
}

VINO_GRAFT(event_fs_unlink)
int32_t event_fs_unlink(int32_t kind, int64_t inode, int64_t parent, int64_t pid, int64_t time_ns,
                        int32_t name_len) {
    (void)kind;
    if (log_fd < 0)
        return 0; /* not set up yet: nothing to record */
    struct unlink_record r;
    memset(&r, 0, sizeof r);
    r.inode = (uint64_t)inode;
    r.parent = (uint64_t)parent;
    r.pid = (uint64_t)pid;
    r.time_ns = (uint64_t)time_ns;
    const char *name = vino_event_name();
    for (int32_t i = 0; i < name_len && i < (int32_t)sizeof r.name - 1; i++)
        r.name[i] = name[i];
    /* Append; a refused write makes the invocation invalid, which the kernel counts. */
    return vino_file_write(log_fd, -1, &r, sizeof r) == (int32_t)sizeof r ? 0 : -1;
}
