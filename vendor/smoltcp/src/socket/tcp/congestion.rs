use crate::time::Instant;

use super::RttEstimator;

pub(super) mod no_control;

#[cfg(feature = "socket-tcp-cubic")]
pub(super) mod cubic;

#[cfg(feature = "socket-tcp-reno")]
pub(super) mod reno;

#[allow(unused_variables)]
pub(super) trait Controller {
    /// Returns the number of bytes that can be sent.
    fn window(&self) -> usize;

    /// Set the remote window size.
    fn set_remote_window(&mut self, remote_window: usize) {}

    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, rtt: &RttEstimator) {}

    /// Fired on each duplicate ack received, after `on_loss` has been called.
    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {}

    /// Fired on a retransmission timeout.
    fn on_rto(&mut self, now: Instant, in_flight: usize) {}

    /// Fired after an inferred loss via three duplicate acks.
    fn on_loss(&mut self, now: Instant, in_flight: usize) {}

    fn pre_transmit(&mut self, now: Instant) {}

    fn post_transmit(&mut self, now: Instant, len: usize) {}

    /// Set the maximum segment size.
    fn set_mss(&mut self, mss: usize) {}
}

// VINO addition: a controller from outside the crate (the kernel's `net.congestion`
// graftpoint). smoltcp's `Controller` trait is private and its choice a closed enum; this public
// trait is the same contract with the RTT estimator reduced to the smoothed RTT it exposes.

/// A congestion controller supplied by the socket's user ([`super::Socket::set_congestion_hook`]).
///
/// The socket calls it where it calls its built-in controllers, with the same arguments:
/// `len` and `in_flight` in bytes, `srtt_ms` the smoothed round-trip time (0 before the first
/// measurement).
#[allow(unused_variables)]
pub trait CongestionHook: Send + core::fmt::Debug {
    /// The congestion window: bytes that may be in flight.
    fn window(&self) -> usize;
    /// The peer advertised `remote_window` bytes.
    fn set_remote_window(&mut self, remote_window: usize) {}
    /// An ACK arrived acknowledging `len` new bytes (0: a segment that acknowledges nothing).
    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, srtt_ms: u32) {}
    /// A duplicate ACK arrived, after [`CongestionHook::on_loss`] was called for the loss.
    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {}
    /// The retransmission timer fired.
    fn on_rto(&mut self, now: Instant, in_flight: usize) {}
    /// Three duplicate ACKs inferred a loss.
    fn on_loss(&mut self, now: Instant, in_flight: usize) {}
    /// The socket is about to transmit.
    fn pre_transmit(&mut self, now: Instant) {}
    /// The socket transmitted a segment of `len` sequence numbers.
    fn post_transmit(&mut self, now: Instant, len: usize) {}
    /// The maximum segment size is now `mss`.
    fn set_mss(&mut self, mss: usize) {}
}

/// One of smoltcp's own controllers behind [`CongestionHook`]: what a hook falls back on.
#[derive(Debug)]
pub struct BuiltinController(AnyController);

impl BuiltinController {
    /// The controller `kind` names (`Hook` is not one: it gives no control).
    pub fn new(kind: super::CongestionControl) -> Self {
        let mut any = AnyController::None(no_control::NoControl);
        any.set(kind);
        BuiltinController(any)
    }
}

impl CongestionHook for BuiltinController {
    fn window(&self) -> usize {
        self.0.inner().window()
    }
    fn set_remote_window(&mut self, remote_window: usize) {
        self.0.inner_mut().set_remote_window(remote_window)
    }
    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, srtt_ms: u32) {
        // The built-ins read only the smoothed RTT of the estimator.
        let rtt = RttEstimator::with_smoothed(srtt_ms);
        self.0.inner_mut().on_ack(now, len, in_flight, &rtt)
    }
    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {
        self.0.inner_mut().on_dup_ack(now, len, in_flight)
    }
    fn on_rto(&mut self, now: Instant, in_flight: usize) {
        self.0.inner_mut().on_rto(now, in_flight)
    }
    fn on_loss(&mut self, now: Instant, in_flight: usize) {
        self.0.inner_mut().on_loss(now, in_flight)
    }
    fn pre_transmit(&mut self, now: Instant) {
        self.0.inner_mut().pre_transmit(now)
    }
    fn post_transmit(&mut self, now: Instant, len: usize) {
        self.0.inner_mut().post_transmit(now, len)
    }
    fn set_mss(&mut self, mss: usize) {
        self.0.inner_mut().set_mss(mss)
    }
}

/// A hook seen as a [`Controller`].
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub(super) struct Hooked(pub(super) alloc::boxed::Box<dyn CongestionHook>);

#[cfg(all(feature = "alloc", feature = "defmt"))]
impl defmt::Format for Hooked {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "Hooked")
    }
}

#[cfg(feature = "alloc")]
impl Controller for Hooked {
    fn window(&self) -> usize {
        self.0.window()
    }
    fn set_remote_window(&mut self, remote_window: usize) {
        self.0.set_remote_window(remote_window)
    }
    fn on_ack(&mut self, now: Instant, len: usize, in_flight: usize, rtt: &RttEstimator) {
        self.0.on_ack(now, len, in_flight, rtt.smoothed_rtt())
    }
    fn on_dup_ack(&mut self, now: Instant, len: usize, in_flight: usize) {
        self.0.on_dup_ack(now, len, in_flight)
    }
    fn on_rto(&mut self, now: Instant, in_flight: usize) {
        self.0.on_rto(now, in_flight)
    }
    fn on_loss(&mut self, now: Instant, in_flight: usize) {
        self.0.on_loss(now, in_flight)
    }
    fn pre_transmit(&mut self, now: Instant) {
        self.0.pre_transmit(now)
    }
    fn post_transmit(&mut self, now: Instant, len: usize) {
        self.0.post_transmit(now, len)
    }
    fn set_mss(&mut self, mss: usize) {
        self.0.set_mss(mss)
    }
}

#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) enum AnyController {
    None(no_control::NoControl),

    // VINO addition.
    #[cfg(feature = "alloc")]
    Hook(Hooked),

    #[cfg(feature = "socket-tcp-reno")]
    Reno(reno::Reno),

    #[cfg(feature = "socket-tcp-cubic")]
    Cubic(cubic::Cubic),
}

impl AnyController {
    /// Create a new congestion controller.
    /// `AnyController::new()` selects the best congestion controller based on the features.
    ///
    /// - If `socket-tcp-cubic` feature is enabled, it will use `Cubic`.
    /// - If `socket-tcp-reno` feature is enabled, it will use `Reno`.
    /// - If both `socket-tcp-cubic` and `socket-tcp-reno` features are enabled, it will use `Cubic`.
    ///    - `Cubic` is more efficient regarding throughput.
    ///    - `Reno` is more conservative and is suitable for low-power devices.
    /// - If no congestion controller is available, it will use `NoControl`.
    ///
    /// Users can also select a congestion controller manually by [`super::Socket::set_congestion_control()`]
    /// method at run-time.
    #[allow(unreachable_code)]
    #[inline]
    pub fn new() -> Self {
        #[cfg(feature = "socket-tcp-cubic")]
        {
            return AnyController::Cubic(cubic::Cubic::new());
        }

        #[cfg(feature = "socket-tcp-reno")]
        {
            return AnyController::Reno(reno::Reno::new());
        }

        AnyController::None(no_control::NoControl)
    }

    /// VINO addition: becomes the built-in controller `kind` names; `Hook` leaves it as it is.
    pub fn set(&mut self, kind: super::CongestionControl) {
        use super::CongestionControl;
        *self = match kind {
            CongestionControl::None => AnyController::None(no_control::NoControl),

            #[cfg(feature = "socket-tcp-reno")]
            CongestionControl::Reno => AnyController::Reno(reno::Reno::new()),

            #[cfg(feature = "socket-tcp-cubic")]
            CongestionControl::Cubic => AnyController::Cubic(cubic::Cubic::new()),

            #[cfg(feature = "alloc")]
            CongestionControl::Hook => return,
        }
    }

    #[inline]
    pub fn inner_mut(&mut self) -> &mut dyn Controller {
        match self {
            AnyController::None(n) => n,

            #[cfg(feature = "alloc")]
            AnyController::Hook(h) => h,

            #[cfg(feature = "socket-tcp-reno")]
            AnyController::Reno(r) => r,

            #[cfg(feature = "socket-tcp-cubic")]
            AnyController::Cubic(c) => c,
        }
    }

    #[inline]
    pub fn inner(&self) -> &dyn Controller {
        match self {
            AnyController::None(n) => n,

            #[cfg(feature = "alloc")]
            AnyController::Hook(h) => h,

            #[cfg(feature = "socket-tcp-reno")]
            AnyController::Reno(r) => r,

            #[cfg(feature = "socket-tcp-cubic")]
            AnyController::Cubic(c) => c,
        }
    }
}
