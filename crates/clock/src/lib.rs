//! The base of VINO's time: every kernel decision that depends on time (lock deadlines, timers,
//! event waits, write-back rounds, graft clocks, file timestamps) reads a [`SharedClock`], so a
//! simulation can run the whole kernel on a [`ManualClock`] and reach every deadline on its own
//! time, with no host sleep. The seeded generator lives here too: crash models and simulations
//! draw from it.

#![forbid(unsafe_code)]

pub mod clock;
pub mod rng;

pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use rng::SplitMix64;
