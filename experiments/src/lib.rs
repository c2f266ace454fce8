//! VINO benchmarks: the extension-technology study (experiments E2/E3) and
//! the timing and reporting helpers the project's benchmarks share.

pub mod daemon;
pub mod e4_wisconsin;
pub mod e5_events;
pub mod e6_layout;
pub mod e7_gunzip;
pub mod e8_locks;
pub mod e9_linux;
pub mod exttech;
pub mod graftcost;
pub mod wisconsin;
