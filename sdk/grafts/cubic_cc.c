/* cubic_cc.c -- CUBIC (RFC 9438) for net.congestion: the cubic window curve after a loss, the
 * Reno-friendly estimate beside it, fast convergence, and the idle spells taken out of the
 * curve's time. The same arithmetic as the stack's built-in CUBIC, in the same order of floating
 * point operations, so on the same seeded link the two give the same window trace (a test
 * checks it). The state lives in the connection's block the kernel keeps. */
#include "vino_graft.h"

/* a * b + c is two roundings here, as in the built-in: no contraction into a fused one. */
#pragma clang fp contract(off)

#define DEFAULT_MSS 1024
#define BETA_CUBIC 0.7
#define C 0.4
#define ALPHA_CUBIC (3.0 * (1.0 - BETA_CUBIC) / (1.0 + BETA_CUBIC))

#define FAST_RECOVERY 1u
#define RTO_RECOVERY 2u
#define HAS_RECOVERY_START 4u
#define HAS_IDLE_START 8u

struct cubic {
    uint64_t w_max, cwnd, ssthresh, cwnd_prior, flags;
    int64_t recovery_start, idle_start; /* microseconds, when the flags say so */
    double k, w_est;
};
VINO_STATIC_ASSERT(sizeof(struct cubic) <= VINO_CC_STATE_WORDS * 8, "the state fits the block");

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t clamp(const struct vino_cc *cc, uint64_t w) { return max64(min64(w, cc->rwnd), cc->mss); }

/* A double to an unsigned integer as Rust's `as` does: NaN and negatives 0, saturating above. */
static uint64_t to_u64(double x) {
    if (!(x > 0.0))
        return 0;
    if (x >= 18446744073709551616.0)
        return UINT64_MAX;
    return (uint64_t)x;
}

static double bits_f64(uint64_t b) {
    union { uint64_t u; double d; } v = {.u = b};
    return v.d;
}

static uint64_t f64_bits(double d) {
    union { double d; uint64_t u; } v = {.d = d};
    return v.u;
}

/* Two exact halves of a double's product (Dekker), for a fused multiply-add without hardware. */
static void split(double a, double *hi, double *lo) {
    double t = 134217729.0 * a; /* 2^27 + 1 */
    *hi = t - (t - a);
    *lo = a - *hi;
}

/* a * b + c with one rounding, as `mul_add` (and the built-in) computes it: the product exact
 * as a double-double, then the sums error-free but for the last addition. */
static double fma_soft(double a, double b, double c) {
    double p = a * b, ah, al, bh, bl;
    split(a, &ah, &al);
    split(b, &bh, &bl);
    double e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    double s = p + c;
    double bb = s - p;
    double t = (p - (s - bb)) + (c - bb);
    return s + (t + e);
}

/* The built-in's cube root: a linear guess from the mantissa, the exponent divided by three,
 * one Newton step. */
static double cube_root(double a) {
    if (!(a >= 2.2250738585072014e-308 && a - a == 0.0))
        return 0.0;
    static const double pow2_rem_over_3[3] = {1.0, 1.2599210498948732, 1.5874010519681994};
    uint64_t bits = f64_bits(a);
    double m = bits_f64((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
    double cbrt_m = fma_soft(m, 0.2599, 0.7401);
    int64_t e = (int64_t)((bits >> 52) & 0x7FF) - 1023;
    int64_t q = e >= 0 ? e / 3 : -((-e + 2) / 3);
    int64_t r = e - 3 * q;
    double pow2q = bits_f64((uint64_t)(q + 1023) << 52);
    double x = cbrt_m * pow2q * pow2_rem_over_3[r];
    return (2.0 * x + a / (x * x)) / 3.0;
}

static void recompute_k(const struct vino_cc *cc, struct cubic *s) {
    double c_as_bytes = C * (double)cc->mss;
    double k3 = (double)s->w_max * (1.0 - BETA_CUBIC) / c_as_bytes;
    s->k = cube_root(k3);
}

/* RFC 9438 4.2: an idle spell does not count as time on the curve. */
static void absorb_idle(struct cubic *s, int64_t now) {
    if ((s->flags & HAS_IDLE_START) && (s->flags & HAS_RECOVERY_START) && now >= s->idle_start)
        s->recovery_start += now - s->idle_start;
    s->flags &= ~HAS_IDLE_START;
}

static void on_ack(const struct vino_cc *cc, struct cubic *s, int64_t now, uint64_t len, uint64_t in_flight) {
    uint64_t segment = min64(len, cc->mss);
    absorb_idle(s, now);
    if (in_flight == 0) {
        s->idle_start = now;
        s->flags |= HAS_IDLE_START;
    }
    if (len == 0)
        return;
    s->flags &= ~RTO_RECOVERY;
    if (s->flags & FAST_RECOVERY) {
        s->flags &= ~FAST_RECOVERY;
        s->cwnd = s->ssthresh;
        s->w_est = (double)s->cwnd;
        return;
    }
    if (s->cwnd < s->ssthresh) {
        s->cwnd = clamp(cc, add_sat(s->cwnd, segment));
        return;
    }
    if (!(s->flags & HAS_RECOVERY_START)) {
        s->w_max = s->cwnd;
        s->k = 0.0;
        s->w_est = (double)s->cwnd;
        s->recovery_start = now;
        s->flags |= HAS_RECOVERY_START;
    }
    int64_t t = now - s->recovery_start;
    if (t < 0)
        return;
    double c_as_bytes = C * (double)cc->mss;
    double d = (double)t / 1000000.0 - s->k;
    double w_cubic = c_as_bytes * (d * (d * d)) + (double)s->w_max;

    double alpha = s->w_est >= (double)s->cwnd_prior ? 1.0 : ALPHA_CUBIC;
    s->w_est += alpha * (double)cc->mss * (double)segment / (double)s->cwnd;
    if (w_cubic < s->w_est) {
        s->cwnd = clamp(cc, to_u64(s->w_est));
        return;
    }
    uint64_t srtt = max64(cc->srtt_us, 1000);
    double t_ahead = ((double)t + (double)srtt) / 1000000.0;
    double da = t_ahead - s->k;
    double raw = c_as_bytes * (da * (da * da)) + (double)s->w_max;
    double cap = 1.5 * (double)s->cwnd;
    double target = raw != raw ? cap : (raw < cap ? raw : cap);
    uint64_t ahead = to_u64(target);
    uint64_t increment = (ahead > s->cwnd ? ahead - s->cwnd : 0) * segment / s->cwnd;
    s->cwnd = clamp(cc, s->cwnd + increment);
}

static void on_loss(const struct vino_cc *cc, struct cubic *s, int64_t now, uint64_t in_flight) {
    s->flags &= ~HAS_IDLE_START;
    if (s->flags & FAST_RECOVERY)
        return;
    s->cwnd_prior = s->cwnd;
    /* RFC 9438 4.7, fast convergence: a loss below the last plateau lowers the plateau. */
    s->w_max = s->cwnd < s->w_max ? to_u64((double)s->cwnd * (1.0 + BETA_CUBIC) / 2.0) : s->cwnd;
    s->ssthresh = max64(to_u64((double)in_flight * BETA_CUBIC), 2 * cc->mss);
    s->cwnd = add_sat(min64(s->ssthresh, cc->rwnd), 3 * cc->mss);
    s->recovery_start = now;
    s->flags |= HAS_RECOVERY_START | FAST_RECOVERY;
    recompute_k(cc, s);
}

static void on_rto(const struct vino_cc *cc, struct cubic *s, uint64_t in_flight) {
    if (!(s->flags & RTO_RECOVERY)) {
        s->ssthresh = max64(to_u64((double)in_flight * BETA_CUBIC), 2 * cc->mss);
        s->flags |= RTO_RECOVERY;
    }
    s->cwnd = cc->mss;
    s->cwnd_prior = in_flight;
    /* RFC 9438 4.8: the plateau and K are set again when congestion avoidance starts. */
    s->flags &= ~(HAS_RECOVERY_START | FAST_RECOVERY | HAS_IDLE_START);
}

VINO_GRAFT(net_congestion) int64_t net_congestion(int32_t event, int64_t now_us, int64_t len, int64_t in_flight) {
    struct vino_cc *cc = vino_cc();
    struct cubic *s = (struct cubic *)cc->state;
    switch (event) {
    case VINO_CC_INIT:
        s->w_max = 2 * DEFAULT_MSS;
        s->cwnd = 2 * DEFAULT_MSS;
        s->ssthresh = UINT64_MAX;
        s->cwnd_prior = 2 * DEFAULT_MSS;
        s->flags = 0;
        s->w_est = (double)(2 * DEFAULT_MSS);
        recompute_k(cc, s);
        break;
    case VINO_CC_ACK:
        on_ack(cc, s, now_us, (uint64_t)len, (uint64_t)in_flight);
        break;
    case VINO_CC_DUP_ACK:
        if (s->flags & FAST_RECOVERY)
            s->cwnd = clamp(cc, add_sat(s->cwnd, (uint64_t)len));
        break;
    case VINO_CC_LOSS:
        on_loss(cc, s, now_us, (uint64_t)in_flight);
        break;
    case VINO_CC_RTO:
        on_rto(cc, s, (uint64_t)in_flight);
        break;
    case VINO_CC_MSS:
        recompute_k(cc, s);
        break;
    case VINO_CC_TX_START:
        absorb_idle(s, now_us);
        break;
    default:
        break;
    }
    return (int64_t)min64(s->cwnd, VINO_CC_MAX_WINDOW);
}
