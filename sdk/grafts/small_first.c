/* small_first.c -- the link's packet order (net.pick_packet, privileged): the smallest next
 * packet first, among the users' next packets.
 *
 * Small packets are acknowledgements, requests and keystrokes; sending them before a full-size
 * segment costs the bulk flow little and halves the wait of whoever waits on them (shortest job
 * first on the link). Under it the kernel no longer weighs users by their tickets, which is why
 * only a privileged process may bind it. A packet that has waited AGE_US goes first whatever its
 * size, so no user starves behind a stream of small packets. */
#include "vino_graft.h"

#define AGE_US 50000

VINO_GRAFT(net_pick_packet) int32_t net_pick_packet(int32_t n, int32_t def) {
    const struct vino_net_packet *p = vino_net_packets();
    if (n <= 0 || n > VINO_NET_PICK_MAX)
        return def;
    int32_t best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (p[i].waited_us >= AGE_US)
            return i;
        if (p[i].len < p[best].len)
            best = i;
    }
    return best;
}
