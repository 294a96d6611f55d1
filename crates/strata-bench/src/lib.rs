//! `strata bench`: a load generator that speaks NVMe/TCP through strata's
//! own initiator to any target (strata, the kernel's nvmet, SPDK), with
//! latency histograms, acceptance gates with stop-loss, and reports that
//! can be signed and verified later.
//!
//! Layout: [`spec`] says what to run, [`histogram`] records latencies,
//! [`result`] holds what a run measured.

pub mod histogram;
pub mod result;
pub mod spec;

pub use histogram::Histogram;
pub use result::{CpuUsage, LatencySummary, Sample, WorkloadResult};
pub use spec::{Pattern, TargetSpec, WorkloadSpec};
