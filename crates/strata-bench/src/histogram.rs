//! A log-linear latency histogram (the HDR idea): every power of two is
//! split into 64 equal sub-buckets, so any recorded value is known to
//! within 1/64 (1.6 %) of itself, from 1 ns to `u64::MAX` ns, in a fixed
//! 3776 counters. Recording is an index computation and an increment: cheap
//! enough for the I/O path of a load generator. Histograms from several
//! jobs merge by adding counters.
//!
//! Bucket `i < 128` holds exactly the value `i`. For `v >= 128` with top bit
//! `m`, `shift = m - 6` and the bucket is `(shift + 1) * 64 + (v >> shift)
//! - 64`; its values are `[(64 + i % 64) << shift, (65 + i % 64) << shift)`.

use serde::{Deserialize, Serialize};

const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Number of buckets.
pub const BUCKETS: usize = (64 - SUB_BITS as usize) * SUB + SUB * 2 - SUB;

/// A latency histogram of nanosecond values.
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram").field("count", &self.total).field("min", &self.min).field("max", &self.max).finish()
    }
}

fn index(v: u64) -> usize {
    if v < (SUB as u64) * 2 {
        return v as usize;
    }
    let m = 63 - v.leading_zeros();
    let shift = m - SUB_BITS;
    ((shift as usize + 1) << SUB_BITS) + ((v >> shift) as usize - SUB)
}

/// Lowest value that lands in bucket `i`.
fn bucket_low(i: usize) -> u64 {
    if i < SUB * 2 {
        return i as u64;
    }
    let shift = (i >> SUB_BITS) - 1;
    ((SUB + i % SUB) as u64) << shift
}

/// Highest value that lands in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i + 1 >= BUCKETS { u64::MAX } else { bucket_low(i + 1) - 1 }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram { counts: vec![0; BUCKETS], total: 0, min: u64::MAX, max: 0, sum: 0 }
    }

    /// Records one value (nanoseconds).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.total += 1;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += u128::from(ns);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Smallest value, or 0 when empty.
    pub fn min(&self) -> u64 {
        if self.total == 0 { 0 } else { self.min }
    }

    /// Largest value, or 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Mean, or 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.sum as f64 / self.total as f64 }
    }

    /// The value at quantile `q` (0.0..=1.0): the highest value of the
    /// bucket holding the `ceil(q * count)`-th smallest value, capped at
    /// the maximum recorded; the minimum for `q <= 0`. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        if q <= 0.0 {
            return self.min;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(i).min(self.max).max(self.min);
            }
        }
        self.max
    }

    /// Non-empty buckets as `(low, high, count)`, ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, &c)| (bucket_low(i), bucket_high(i), c))
    }
}

/// The serialized form: summary fields plus the non-empty buckets.
#[derive(Serialize, Deserialize)]
struct Wire {
    count: u64,
    min_ns: u64,
    max_ns: u64,
    sum_ns: u128,
    /// `[low_ns, high_ns, count]` per non-empty bucket.
    buckets: Vec<(u64, u64, u64)>,
}

impl Serialize for Histogram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Wire {
            count: self.total,
            min_ns: self.min(),
            max_ns: self.max,
            sum_ns: self.sum,
            buckets: self.buckets().collect(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Histogram {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let mut h = Histogram::new();
        for (low, _, count) in w.buckets {
            h.counts[index(low)] += count;
            h.total += count;
        }
        if h.total != w.count {
            return Err(serde::de::Error::custom(format!(
                "histogram buckets add up to {}, count says {}",
                h.total, w.count
            )));
        }
        h.min = if w.count == 0 { u64::MAX } else { w.min_ns };
        h.max = w.max_ns;
        h.sum = w.sum_ns;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_cover_every_value_without_gaps() {
        assert_eq!(index(0), 0);
        assert_eq!(index(127), 127);
        assert_eq!(index(128), 128);
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        for i in 0..BUCKETS - 1 {
            assert_eq!(bucket_high(i) + 1, bucket_low(i + 1), "gap after bucket {i}");
            assert_eq!(index(bucket_low(i)), i);
            assert_eq!(index(bucket_high(i)), i);
        }
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000); // 1 us .. 10 ms
        }
        let within = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64 <= 1.0 / 64.0;
        assert!(within(h.quantile(0.5), 5_000_000), "{}", h.quantile(0.5));
        assert!(within(h.quantile(0.99), 9_900_000), "{}", h.quantile(0.99));
        assert_eq!(h.quantile(1.0), 10_000_000);
        assert_eq!(h.quantile(0.0), 1000);
        assert_eq!((h.min(), h.max(), h.count()), (1000, 10_000_000, 10_000));
        assert!((h.mean() - 5_000_500.0).abs() < 1.0);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let h = Histogram::new();
        assert_eq!((h.quantile(0.99), h.min(), h.max(), h.mean()), (0, 0, 0, 0.0));
    }

    #[test]
    fn corrupted_serialized_counts_are_rejected() {
        let mut h = Histogram::new();
        h.record(5);
        let mut v: serde_json::Value = serde_json::to_value(&h).unwrap();
        v["count"] = 2.into();
        assert!(serde_json::from_value::<Histogram>(v).is_err());
    }

    proptest! {
        #[test]
        fn every_value_lands_within_its_bucket(v: u64) {
            let i = index(v);
            prop_assert!(bucket_low(i) <= v && v <= bucket_high(i));
            // Relative width of a bucket is at most 1/64.
            if v >= 128 {
                prop_assert!((bucket_high(i) - bucket_low(i)) as f64 <= bucket_low(i) as f64 / 64.0);
            }
        }

        #[test]
        fn merge_and_serde_round_trip(a in proptest::collection::vec(any::<u32>(), 0..200), b in proptest::collection::vec(any::<u32>(), 0..200)) {
            let (mut ha, mut hb, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
            for &v in &a { ha.record(v.into()); all.record(v.into()); }
            for &v in &b { hb.record(v.into()); all.record(v.into()); }
            ha.merge(&hb);
            prop_assert!(ha == all);
            let back: Histogram = serde_json::from_str(&serde_json::to_string(&all).unwrap()).unwrap();
            prop_assert!(back == all);
        }
    }
}
