//! strata's chaos suite (being assembled; see the final crate doc).

pub mod block;
mod config;
mod error;
pub mod oracle;
pub mod process;
pub mod raw;
pub mod report;
pub mod rng;

pub use config::{ChaosConfig, FaultKind, Tuning};
pub use error::Error;
pub use report::Report;
