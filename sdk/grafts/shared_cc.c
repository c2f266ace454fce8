/* shared_cc.c -- one congestion window for all of a process's connections: the Congestion
 * Manager of RFC 3124, proposed in 2001 and shipped by no kernel. A per-socket controller lets
 * a program that opens eight connections take eight shares of a bottleneck, and makes each
 * connection learn the path alone. Here every connection's ACKs grow one window (Reno's rules,
 * applied to the sum), any connection's loss cuts it once a round trip, and each connection may
 * have in flight what the others leave of it. Only a graft can do this: one graft serves all of
 * its process's connections, so its memory sees them all.
 *
 * The kernel says when a connection starts (VINO_CC_INIT) but not when it ends; a connection
 * not heard from for two seconds no longer counts, and counts again when it is heard from. */
#include "vino_graft.h"

#define DEFAULT_MSS 1024
#define MAX_CONNS 64
#define FORGET_US 2000000
#define AGG_MAX (64ull << 20)

struct conn {
    uint64_t id; /* 0: free */
    uint64_t in_flight;
    int64_t seen_us;
};

static struct conn conns[MAX_CONNS];
static uint64_t next_id;
static uint64_t agg, ssthresh;
static int64_t recovering_until, latest_us;

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static bool live(const struct conn *c) { return c->id != 0 && latest_us - c->seen_us < FORGET_US; }

/* The connection's entry: found by id, else a new one in a slot nobody live holds, else in the
 * least recently seen one's. */
static struct conn *entry(uint64_t id) {
    struct conn *pick = NULL;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &conns[i];
        if (c->id == id)
            return c;
        if (pick == NULL || (live(pick) && (!live(c) || c->seen_us < pick->seen_us)))
            pick = c;
    }
    pick->id = id;
    pick->in_flight = 0;
    return pick;
}

/* Bytes the other live connections have in flight, and how many are live. */
static uint64_t others(const struct conn *me, uint64_t *count) {
    uint64_t sum = 0;
    *count = 0;
    for (int i = 0; i < MAX_CONNS; i++) {
        if (live(&conns[i])) {
            *count += 1;
            if (&conns[i] != me)
                sum += conns[i].in_flight;
        }
    }
    return sum;
}

/* A loss anywhere cuts the one window, once a round trip however many connections see it. */
static void cut(const struct vino_cc *cc, int64_t now, uint64_t total, uint64_t live_conns, bool timeout) {
    if (now < recovering_until)
        return;
    ssthresh = max64(total / 2, 2 * cc->mss);
    agg = timeout ? max64(cc->mss * live_conns, 2 * cc->mss) : ssthresh;
    recovering_until = now + (int64_t)max64(cc->srtt_us, 10000);
}

VINO_GRAFT(net_congestion) int64_t net_congestion(int32_t event, int64_t now_us, int64_t len, int64_t in_flight) {
    struct vino_cc *cc = vino_cc();
    if (now_us > latest_us)
        latest_us = now_us;
    if (event == VINO_CC_INIT) {
        cc->state[0] = ++next_id;
        if (agg == 0) {
            agg = 4 * DEFAULT_MSS;
            ssthresh = UINT64_MAX;
        }
    }
    struct conn *me = entry(cc->state[0]);
    me->seen_us = latest_us;
    if (event != VINO_CC_MSS && event != VINO_CC_INIT)
        me->in_flight = (uint64_t)in_flight;
    uint64_t live_conns;
    uint64_t rest = others(me, &live_conns);
    switch (event) {
    case VINO_CC_ACK:
        if (len > 0) {
            uint64_t inc = agg < ssthresh ? min64((uint64_t)len, cc->mss) : max64(cc->mss * cc->mss / agg, 1);
            agg = min64(agg + inc, AGG_MAX);
        }
        break;
    case VINO_CC_LOSS:
        cut(cc, now_us, rest + me->in_flight, live_conns, false);
        break;
    case VINO_CC_RTO:
        cut(cc, now_us, rest + me->in_flight, live_conns, true);
        break;
    default:
        break;
    }
    uint64_t window = agg > rest ? agg - rest : 0;
    return (int64_t)min64(max64(window, cc->mss), VINO_CC_MAX_WINDOW);
}

/* The shared window, and how many connections share it now. */
VINO_CONTROL(window) int64_t window(void) { return (int64_t)agg; }

VINO_CONTROL(connections) int64_t connections(void) {
    uint64_t n;
    others(NULL, &n);
    return (int64_t)n;
}
