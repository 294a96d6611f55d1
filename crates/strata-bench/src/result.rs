//! What a run measured.

use serde::{Deserialize, Serialize};

use crate::histogram::Histogram;
use crate::spec::WorkloadSpec;

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Minimum.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile.
    pub p9999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarises a histogram of nanosecond values.
    pub fn of(h: &Histogram) -> LatencySummary {
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            min_us: us(h.min()),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.quantile(0.50)),
            p95_us: us(h.quantile(0.95)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            p9999_us: us(h.quantile(0.9999)),
            max_us: us(h.max()),
        }
    }
}

/// One point of the time series (one per second by default).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the measured part of the run started (end of the
    /// interval).
    pub t_s: f64,
    /// I/Os per second in the interval.
    pub iops: f64,
    /// MB/s (10^6 bytes) in the interval.
    pub mbps: f64,
    /// 99th percentile latency in the interval, microseconds.
    pub p99_us: f64,
    /// Median latency in the interval, microseconds.
    pub p50_us: f64,
}

/// Client CPU used by the run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuUsage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// (user + sys) / wall time, in percent of one core.
    pub percent: f64,
}

/// Results of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResult {
    /// What ran.
    pub spec: WorkloadSpec,
    /// Measured wall time, seconds (excluding ramp).
    pub duration_s: f64,
    /// I/Os completed (measured part).
    pub ios: u64,
    /// Bytes moved (measured part).
    pub bytes: u64,
    /// ios / duration.
    pub iops: f64,
    /// bytes / duration, in MB/s (10^6).
    pub mbps: f64,
    /// Latency of all I/Os.
    pub latency: LatencySummary,
    /// Latency of reads only (empty when none).
    pub read_latency: LatencySummary,
    /// Latency of writes only (empty when none).
    pub write_latency: LatencySummary,
    /// Full histogram of all I/Os, nanoseconds.
    pub histogram: Histogram,
    /// Per-interval samples.
    pub timeseries: Vec<Sample>,
    /// Client CPU.
    pub cpu: CpuUsage,
    /// I/O errors (any error ends the run).
    pub errors: u64,
    /// Verify mismatches (any mismatch ends the run).
    pub verify_failures: u64,
    /// Why the run ended early, if it did (I/O error, verify mismatch,
    /// stop-loss).
    pub aborted: Option<String>,
    /// The path changes of a run with [`WorkloadSpec::failover`], in
    /// order. Absent from older reports.
    #[serde(default)]
    pub failovers: Vec<Failover>,
}

/// One change of path during a run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Failover {
    /// Seconds since the run connected when the failure was seen.
    pub at_s: f64,
    /// What failed.
    pub cause: String,
    /// The path the run goes on with (`ADDR:PORT`).
    pub path: String,
    /// From the failure to the new path's connection, milliseconds. The
    /// pause an I/O saw also shows in the latency figures: a re-issued
    /// I/O counts from its first submission.
    pub reconnect_ms: f64,
}
