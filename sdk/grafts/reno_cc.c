/* reno_cc.c -- TCP Reno (RFC 5681) for net.congestion: slow start, congestion avoidance, fast
 * recovery, and the timeout's loss window. The same arithmetic as the stack's built-in Reno,
 * step for step, so on the same seeded link the two give the same window trace (a test checks
 * it). Its state lives in the connection's block the kernel keeps, so one graft serves all of
 * the process's connections. */
#include "vino_graft.h"

#define DEFAULT_MSS 1024
#define FAST_RECOVERY 1u
#define RTO_RECOVERY 2u

struct reno {
    uint64_t cwnd;
    uint64_t ssthresh;
    uint64_t flags;
};

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/* The window a step of growth leaves: never past the peer's window, never below a segment. */
static uint64_t clamp(const struct vino_cc *cc, uint64_t w) { return max64(min64(w, cc->rwnd), cc->mss); }

static void on_ack(const struct vino_cc *cc, struct reno *r, uint64_t len) {
    if (len == 0)
        return;
    r->flags &= ~RTO_RECOVERY;
    if (r->flags & FAST_RECOVERY) {
        r->flags &= ~FAST_RECOVERY;
        r->cwnd = r->ssthresh;
        return;
    }
    uint64_t inc = r->cwnd < r->ssthresh ? min64(len, cc->mss) : max64(cc->mss * cc->mss / r->cwnd, 1);
    r->cwnd = clamp(cc, add_sat(r->cwnd, inc));
}

static void on_loss(const struct vino_cc *cc, struct reno *r, uint64_t in_flight) {
    if (r->flags & FAST_RECOVERY)
        return;
    r->ssthresh = max64(in_flight >> 1, 2 * cc->mss);
    r->cwnd = add_sat(min64(r->ssthresh, cc->rwnd), 3 * cc->mss);
    r->flags |= FAST_RECOVERY;
}

static void on_rto(const struct vino_cc *cc, struct reno *r, uint64_t in_flight) {
    if (!(r->flags & RTO_RECOVERY)) {
        r->ssthresh = max64(in_flight >> 1, 2 * cc->mss);
        r->flags |= RTO_RECOVERY;
    }
    r->cwnd = cc->mss;
    r->flags &= ~FAST_RECOVERY;
}

VINO_GRAFT(net_congestion) int64_t net_congestion(int32_t event, int64_t now_us, int64_t len, int64_t in_flight) {
    (void)now_us;
    struct vino_cc *cc = vino_cc();
    struct reno *r = (struct reno *)cc->state;
    switch (event) {
    case VINO_CC_INIT:
        r->cwnd = 2 * DEFAULT_MSS;
        r->ssthresh = UINT64_MAX;
        r->flags = 0;
        break;
    case VINO_CC_ACK:
        on_ack(cc, r, (uint64_t)len);
        break;
    case VINO_CC_DUP_ACK:
        if (r->flags & FAST_RECOVERY)
            r->cwnd = clamp(cc, add_sat(r->cwnd, (uint64_t)len));
        break;
    case VINO_CC_LOSS:
        on_loss(cc, r, (uint64_t)in_flight);
        break;
    case VINO_CC_RTO:
        on_rto(cc, r, (uint64_t)in_flight);
        break;
    default: /* VINO_CC_MSS, VINO_CC_TX_START: the window stands */
        break;
    }
    return (int64_t)min64(r->cwnd, VINO_CC_MAX_WINDOW);
}
