//! VINO benchmarks: the extension-technology study (experiments E2/E3) and
//! the timing and reporting helpers the project's benchmarks share.

pub mod exttech;
pub mod graftcost;
pub mod measure;
pub mod report;
pub mod wisconsin;
