//! Latency histograms for hot paths: a fixed set of buckets kept as
//! relaxed atomics, so that recording takes no lock and allocates nothing
//! ([`LatencyHistogram::observe`]), read back as cumulative counts in the
//! shape Prometheus reports ([`HistogramSnapshot`]). The NVMe/TCP target's
//! per-volume and per-host I/O metrics and the KV store's per-tier load
//! latencies both use it, with the same buckets, so one dashboard reads
//! both.
//!
//! Invariant: a snapshot's count is the sum of its buckets, read once
//! each; counts only grow.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Upper bounds of the latency buckets, in nanoseconds (the last bucket,
/// `+Inf`, is implicit): fine enough for tens of microseconds, wide enough
/// for a stalled drive.
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets kept: one per bound and `+Inf`.
pub const BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// A latency histogram with the fixed [`LATENCY_BOUNDS_NS`] buckets.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket, not cumulative.
    buckets: [AtomicU64; BUCKETS],
    /// Sum of the observations, in nanoseconds.
    sum_ns: AtomicU64,
}

/// Index of the bucket that counts `ns`: the first bound at or above it.
fn bucket_of(ns: u64) -> usize {
    LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns)
}

impl LatencyHistogram {
    /// Counts one observation of `latency`.
    pub fn observe(&self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// The histogram as Prometheus reports it.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = [0u64; BUCKETS];
        let mut total = 0u64;
        for (c, b) in cumulative.iter_mut().zip(&self.buckets) {
            total = total.saturating_add(b.load(Relaxed));
            *c = total;
        }
        HistogramSnapshot { cumulative, sum_ns: self.sum_ns.load(Relaxed) }
    }
}

/// A histogram read back: cumulative bucket counts and the sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Observations at or below each bound of [`LATENCY_BOUNDS_NS`], then
    /// all of them (`+Inf`).
    pub cumulative: [u64; BUCKETS],
    /// Sum of the observations, in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.cumulative[BUCKETS - 1]
    }

    /// `(upper bound in seconds, cumulative count)` for each finite bound.
    pub fn buckets_seconds(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        LATENCY_BOUNDS_NS.iter().zip(&self.cumulative).map(|(&ns, &c)| (ns as f64 / 1e9, c))
    }

    /// The sum in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_are_inclusive_upper_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(10_000), 0, "le=10us holds exactly 10us");
        assert_eq!(bucket_of(10_001), 1);
        assert_eq!(bucket_of(20_000), 1);
        assert_eq!(bucket_of(999_999), 6);
        assert_eq!(bucket_of(1_000_000), 6);
        assert_eq!(bucket_of(10_000_000_000), BUCKETS - 2);
        assert_eq!(bucket_of(10_000_000_001), BUCKETS - 1, "+Inf");
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn histogram_is_cumulative_and_sums() {
        let h = LatencyHistogram::default();
        for us in [5, 15, 15, 700, 3_000_000] {
            h.observe(Duration::from_micros(us));
        }
        h.observe(Duration::from_secs(3600));
        let s = h.snapshot();
        assert_eq!(s.count(), 6);
        let b: Vec<(f64, u64)> = s.buckets_seconds().collect();
        assert_eq!(b[0], (0.00001, 1));
        assert_eq!(b[1], (0.00002, 3));
        assert_eq!(b[5].1, 3, "le=500us");
        assert_eq!(b[6].1, 4, "le=1ms");
        assert_eq!(b[17].1, 5, "le=5s");
        assert_eq!(b[18].1, 5, "le=10s: the hour is only in +Inf");
        assert!(s.cumulative.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(s.sum_ns, (5 + 15 + 15 + 700 + 3_000_000) * 1000 + 3600 * 1_000_000_000);
    }
}
