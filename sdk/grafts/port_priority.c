/* port_priority.c -- a user's own packet order (net.pick_packet/user): interactive ports first.
 *
 * A user whose bulk transfer fills its share of the link makes its own interactive traffic wait
 * behind it: a keystroke or a query's answer sits in the queue behind a megabyte of backup. The
 * kernel shares the link between users; within the user's share, this graft sends the packets of
 * the ports the owner named first (the higher priority first), then the rest, oldest first. A
 * packet that has waited VINO_AGE_US goes first whatever its priority, so no flow of the user's
 * starves. The owner names ports with set_port(port, priority) (at most 32; priority 0 forgets the
 * port); a packet's priority is its source or destination port's, whichever is higher. */
#include "vino_graft.h"

#define PORTS 32
#define AGE_US 200000

static uint32_t port_of[PORTS];
static int32_t priority_of[PORTS];

static int32_t priority(uint32_t port) {
    for (int32_t i = 0; i < PORTS; i++)
        if (port_of[i] == port && port != 0)
            return priority_of[i];
    return 0;
}

VINO_GRAFT(net_pick_packet) int32_t net_pick_packet(int32_t n, int32_t def) {
    const struct vino_net_packet *p = vino_net_packets();
    if (n <= 0 || n > VINO_NET_PICK_MAX)
        return def;
    int32_t best = 0, best_priority = -1;
    for (int32_t i = 0; i < n; i++) {
        if (p[i].waited_us >= AGE_US)
            return i; /* the oldest that has waited too long: entries come oldest first */
        int32_t a = priority(p[i].src_port), b = priority(p[i].dst_port);
        int32_t mine = a > b ? a : b;
        if (mine > best_priority) {
            best = i;
            best_priority = mine;
        }
    }
    return best;
}

/* Gives `port` a priority (0 forgets it); 0, or -1 when the table is full or the port is 0. */
VINO_CONTROL(set_port) int64_t set_port(int64_t port, int64_t prio) {
    if (port <= 0 || port > 65535)
        return -1;
    int32_t free_slot = -1;
    for (int32_t i = 0; i < PORTS; i++) {
        if (port_of[i] == (uint32_t)port) {
            if (prio == 0)
                port_of[i] = 0;
            else
                priority_of[i] = (int32_t)prio;
            return 0;
        }
        if (port_of[i] == 0 && free_slot < 0)
            free_slot = i;
    }
    if (prio == 0)
        return 0;
    if (free_slot < 0)
        return -1;
    port_of[free_slot] = (uint32_t)port;
    priority_of[free_slot] = (int32_t)prio;
    return 0;
}
