//! `strata bench`: a load generator that speaks NVMe/TCP through strata's
//! own initiator to any target (strata, the kernel's nvmet, SPDK), with
//! latency histograms, acceptance gates with stop-loss, and reports that
//! can be signed and verified later.
//!
//! Layout: [`spec`] says what to run, [`histogram`] records latencies,
//! [`result`] holds what a run measured.

mod cpu;
pub mod engine;
pub mod gate;
pub mod histogram;
pub mod html;
mod job;
mod pattern;
mod rate;
pub mod report;
pub mod result;
pub mod sign;
pub mod spec;
pub mod suite;
pub mod sysinfo;
pub mod units;
mod verify;

pub use engine::{BenchError, Progress, ProgressFn, RunOptions, StopLossFn, run};
pub use gate::{Gate, GateVerdict, StopLoss, StopLossMonitor};
pub use histogram::Histogram;
pub use report::{Report, WorkloadReport};
pub use result::{CpuUsage, LatencySummary, Sample, WorkloadResult};
pub use sign::{PublicKey, SecretKey};
pub use spec::{Pattern, TargetSpec, WorkloadSpec};
pub use suite::Suite;
pub use sysinfo::SystemInfo;
