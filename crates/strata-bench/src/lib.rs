//! `strata bench`: a load generator that speaks NVMe/TCP through strata's
//! own initiator to any target (strata, the kernel's nvmet, SPDK), with
//! latency histograms, acceptance gates with stop-loss, and reports that
//! can be signed and verified later.
//!
//! Layout: [`spec`] says what to run and [`engine`] runs it (one task per
//! job driving its own queue, no task or channel per I/O); [`histogram`]
//! records latencies and [`result`] holds what a run measured; [`gate`]
//! and [`suite`] turn job files into verdicts with stop-loss; [`report`],
//! [`html`] and [`sign`] write, render, sign and verify reports;
//! [`sysinfo`] describes the machine a report came from.

mod cpu;
pub mod engine;
pub mod gate;
pub mod histogram;
pub mod html;
mod job;
mod paths;
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
pub use result::{CpuUsage, Failover, LatencySummary, Sample, WorkloadResult};
pub use sign::{PublicKey, SecretKey};
pub use spec::{Pattern, TargetSpec, WorkloadSpec};
pub use suite::Suite;
pub use sysinfo::SystemInfo;
