/* dir_hours.c -- a dir.access graft (Small 1998, 4.2: access control by the owner of a tree).
 *
 * The owner of a shared directory keeps it open for reading to everyone the permission bits let
 * in, but:
 *   - other users see no name that begins with '.' (lookups and opens of them are refused);
 *   - other users change the tree (open for writing, create, remove, change attributes) only
 *     between `policy.from_hour` and `policy.to_hour` (UTC; 0 and 24, the defaults, mean always);
 *   - a user in `policy.banned` (up to BANNED_MAX uids) may do nothing in it at all.
 * The owner sets `policy` through write-memory at the exported symbol, or with the control
 * functions. The owner's own calls always pass: it can never lock itself out.
 *
 * It can only refuse: the kernel asks it after the permission bits said yes. */
#include "vino_graft.h"

#define BANNED_MAX 16

VINO_SHARED struct {
    uint32_t owner; /* set with set_owner: its calls always pass */
    uint32_t from_hour, to_hour;
    uint32_t banned_count;
    uint32_t banned[BANNED_MAX];
} policy = {0, 0, 24, 0, {0}};

VINO_CONTROL(set_owner) int64_t set_owner(int64_t uid) { policy.owner = (uint32_t)uid; return 0; }

VINO_CONTROL(set_hours) int64_t set_hours(int64_t from, int64_t to) {
    if (from < 0 || to > 24 || from > to)
        return -1;
    policy.from_hour = (uint32_t)from;
    policy.to_hour = (uint32_t)to;
    return 0;
}

VINO_CONTROL(ban) int64_t ban(int64_t uid) {
    if (policy.banned_count >= BANNED_MAX)
        return -1;
    policy.banned[policy.banned_count++] = (uint32_t)uid;
    return 0;
}

static bool is_banned(uint32_t uid) {
    /* The owner writes this memory directly: never trust the count. */
    uint32_t n = policy.banned_count > BANNED_MAX ? BANNED_MAX : policy.banned_count;
    for (uint32_t i = 0; i < n; i++)
        if (policy.banned[i] == uid)
            return true;
    return false;
}

static bool changes(int32_t op, int32_t flags) {
    if (op == VINO_ACCESS_OPEN)
        return (flags & (VINO_OPEN_WRITE | VINO_OPEN_CREATE | VINO_OPEN_TRUNCATE | VINO_OPEN_APPEND)) != 0;
    return op == VINO_ACCESS_CREATE || op == VINO_ACCESS_REMOVE || op == VINO_ACCESS_SETATTR;
}

static bool in_hours(int64_t now_s) {
    uint32_t hour = (uint32_t)((now_s / 3600) % 24);
    return policy.from_hour <= hour && hour < policy.to_hour;
}

VINO_GRAFT(dir_access)
int32_t dir_access(int32_t op, int32_t uid, int32_t gid, int32_t flags, int64_t dir, int32_t name_len, int64_t now_s) {
    (void)gid;
    (void)dir;
    if ((uint32_t)uid == policy.owner)
        return 0;
    if (is_banned((uint32_t)uid))
        return 1;
    /* Any question about a hidden name: an open's last name is asked as the open alone. */
    if (name_len > 0 && vino_args[0] == '.' &&
        !(name_len == 1 || (name_len == 2 && vino_args[1] == '.')))
        return 1;
    if (changes(op, flags) && !in_hours(now_s))
        return 1;
    return 0;
}
