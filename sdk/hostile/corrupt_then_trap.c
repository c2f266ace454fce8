/* corrupt_then_trap.c -- tests memory rollback: each call pushes a node on a list in the graft's
 * own memory and counts it, but a call with an odd argument traps half-way, after linking its
 * node and before counting it. Without rollback the list and the counter disagree from then on;
 * with it, the aborted call leaves no trace and `vino_ctl_check` finds them consistent. */
#include "vino_graft.h"

#define NODES 256

struct node {
    int64_t value;
    struct node *next;
};

static struct node pool[NODES];
static struct node *head;
static int32_t used;  /* nodes taken from the pool */
static int32_t count; /* nodes on the list, as the graft believes */

VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
    if (used == NODES)
        return 0;
    struct node *n = &pool[used++];
    n->value = arg;
    n->next = head;
    head = n;
    if (arg & 1)
        VINO_TRAP(); /* linked, not yet counted */
    count++;
    return arg;
}

/* The list's length if it matches the count and the pool, else -1. */
VINO_CONTROL(check) int32_t check(void) {
    int32_t length = 0;
    for (struct node *n = head; n; n = n->next)
        length++;
    return length == count && length == used ? length : -1;
}
