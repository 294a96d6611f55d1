//! `GET /api/v1/stats/io`: the data path's cumulative counters per volume
//! and per host as JSON (the same numbers as `/metrics`), for the
//! dashboard and `strata top`, which take two snapshots and compute
//! rates and latency percentiles from the difference ([`Snapshot::rates`]).
//!
//! The math is here in Rust for `strata top` and the tests; the
//! dashboard's JavaScript twin is `quantile` in `dashboard/app.js`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_target::Target;
use strata_target::io_metrics::{IoMetrics, LATENCY_BOUNDS_NS};

/// One kind of command's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounters {
    /// Commands completed.
    pub commands: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Cumulative latency bucket counts: at or below each of
    /// `bounds_seconds`, then all (`+Inf`).
    pub buckets: Vec<u64>,
}

/// One volume's or host's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// The volume's name or the host's NQN.
    pub name: String,
    /// Commands in flight now.
    pub in_flight: u64,
    /// By kind: `read`, `write`, `flush`, `other`.
    pub ops: BTreeMap<String, OpCounters>,
}

/// What `GET /api/v1/stats/io` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// When it was taken, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// False when the node records no I/O metrics (`--no-io-metrics`).
    pub enabled: bool,
    /// The latency buckets' upper bounds, seconds.
    pub bounds_seconds: Vec<f64>,
    /// Per volume.
    pub volumes: Vec<Counters>,
    /// Per host NQN.
    pub hosts: Vec<Counters>,
}

fn counters(name: &str, m: &IoMetrics) -> Counters {
    let ops = m
        .snapshot()
        .iter()
        .map(|s| {
            (
                s.op.label().to_string(),
                OpCounters { commands: s.commands, bytes: s.bytes, buckets: s.latency.cumulative.to_vec() },
            )
        })
        .collect();
    Counters { name: name.to_string(), in_flight: m.in_flight(), ops }
}

/// The target's counters now.
pub fn snapshot(target: &Target) -> Snapshot {
    let reg = target.io_metrics();
    let time_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Snapshot {
        time_ms,
        enabled: reg.enabled(),
        bounds_seconds: LATENCY_BOUNDS_NS.iter().map(|&ns| ns as f64 / 1e9).collect(),
        volumes: reg.volumes().iter().map(|(n, m)| counters(n, m)).collect(),
        hosts: reg.hosts().iter().map(|(n, m)| counters(n, m)).collect(),
    }
}

/// The `q` quantile (0..1) of the latencies counted by the difference of
/// two cumulative bucket lists, in seconds, interpolated linearly inside
/// its bucket as Prometheus' `histogram_quantile` does (the first bucket
/// from 0; a quantile in `+Inf` is the last finite bound). `None` when
/// nothing was counted.
pub fn quantile(bounds: &[f64], before: &[u64], after: &[u64], q: f64) -> Option<f64> {
    let delta: Vec<u64> =
        after.iter().zip(before.iter().chain(std::iter::repeat(&0))).map(|(a, b)| a.saturating_sub(*b)).collect();
    let total = *delta.last()?;
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    for (i, &c) in delta.iter().enumerate() {
        if (c as f64) >= rank {
            let Some(&upper) = bounds.get(i) else { return bounds.last().copied() };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let below = if i == 0 { 0 } else { delta[i - 1] };
            let inside = c.saturating_sub(below);
            if inside == 0 {
                return Some(upper);
            }
            return Some(lower + (upper - lower) * (rank - below as f64) / inside as f64);
        }
    }
    bounds.last().copied()
}

/// Rates of one volume or host between two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rates {
    /// The volume's name or the host's NQN.
    pub name: String,
    /// Reads per second.
    pub read_iops: f64,
    /// Writes per second.
    pub write_iops: f64,
    /// Bytes read per second.
    pub read_bps: f64,
    /// Bytes written per second.
    pub write_bps: f64,
    /// Latency percentiles of reads and writes together, seconds.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// 99.9th percentile.
    pub p999: Option<f64>,
    /// Commands in flight at the second snapshot.
    pub in_flight: u64,
}

impl Snapshot {
    /// Rates of each volume (`hosts`: of each host) from `before` to
    /// this snapshot, busiest first. A name absent from `before` counts
    /// from zero.
    pub fn rates(&self, before: &Snapshot, hosts: bool) -> Vec<Rates> {
        let secs = (self.time_ms.saturating_sub(before.time_ms) as f64 / 1000.0).max(1e-3);
        let (now, then) = if hosts { (&self.hosts, &before.hosts) } else { (&self.volumes, &before.volumes) };
        let empty = OpCounters::default();
        let mut out: Vec<Rates> = now
            .iter()
            .map(|c| {
                let prev = then.iter().find(|p| p.name == c.name);
                let op = |name: &str| -> (&OpCounters, &OpCounters) {
                    let a = c.ops.get(name).unwrap_or(&empty);
                    let b = prev.and_then(|p| p.ops.get(name)).unwrap_or(&empty);
                    (b, a)
                };
                let ((rb, ra), (wb, wa)) = (op("read"), op("write"));
                let sum = |x: &[u64], y: &[u64]| -> Vec<u64> {
                    (0..x.len().max(y.len()))
                        .map(|i| x.get(i).copied().unwrap_or(0) + y.get(i).copied().unwrap_or(0))
                        .collect()
                };
                let (b, a) = (sum(&rb.buckets, &wb.buckets), sum(&ra.buckets, &wa.buckets));
                let per_sec = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                Rates {
                    name: c.name.clone(),
                    read_iops: per_sec(ra.commands, rb.commands),
                    write_iops: per_sec(wa.commands, wb.commands),
                    read_bps: per_sec(ra.bytes, rb.bytes),
                    write_bps: per_sec(wa.bytes, wb.bytes),
                    p50: quantile(&self.bounds_seconds, &b, &a, 0.5),
                    p99: quantile(&self.bounds_seconds, &b, &a, 0.99),
                    p999: quantile(&self.bounds_seconds, &b, &a, 0.999),
                    in_flight: c.in_flight,
                }
            })
            .collect();
        out.sort_by(|x, y| {
            (y.read_iops + y.write_iops).total_cmp(&(x.read_iops + x.write_iops)).then_with(|| x.name.cmp(&y.name))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: [f64; 3] = [0.001, 0.01, 0.1];

    #[test]
    fn quantiles_interpolate_inside_the_bucket_like_prometheus() {
        // 100 observations: 50 in (0, 1ms], 40 in (1, 10ms], 10 in (10, 100ms].
        let after = [50, 90, 100, 100];
        assert_eq!(quantile(&B, &[0; 4], &after, 0.5), Some(0.001));
        let p = quantile(&B, &[0; 4], &after, 0.7).unwrap();
        assert!((p - (0.001 + 0.009 * 20.0 / 40.0)).abs() < 1e-12, "{p}");
        let p = quantile(&B, &[0; 4], &after, 0.99).unwrap();
        assert!((p - (0.01 + 0.09 * 9.0 / 10.0)).abs() < 1e-12, "{p}");
        assert_eq!(quantile(&B, &[0; 4], &[0, 0, 0, 0], 0.5), None, "nothing counted");
        assert_eq!(quantile(&B, &[0; 4], &[0, 0, 0, 5], 0.5), Some(0.1), "+Inf: the last bound");
        // Only what changed between the snapshots counts.
        let p = quantile(&B, &[50, 90, 100, 100], &[50, 190, 200, 200], 0.5).unwrap();
        assert!((p - (0.001 + 0.009 * 50.0 / 100.0)).abs() < 1e-12, "{p}");
    }

    #[test]
    fn rates_come_from_the_difference_and_the_busiest_is_first() {
        let op = |commands: u64, bytes: u64, buckets: Vec<u64>| OpCounters { commands, bytes, buckets };
        let mk = |t: u64, a: u64, b: u64| Snapshot {
            time_ms: t,
            enabled: true,
            bounds_seconds: B.to_vec(),
            volumes: vec![
                Counters {
                    name: "a".into(),
                    in_flight: 1,
                    ops: [("read".to_string(), op(a, a * 4096, vec![a, a, a, a]))].into(),
                },
                Counters {
                    name: "b".into(),
                    in_flight: 0,
                    ops: [("write".to_string(), op(b, b * 131072, vec![0, b, b, b]))].into(),
                },
            ],
            hosts: vec![],
        };
        let (t0, t1) = (mk(1_000, 100, 10), mk(3_000, 300, 1010));
        let r = t1.rates(&t0, false);
        assert_eq!(r[0].name, "b", "busiest first");
        assert_eq!((r[0].write_iops, r[0].write_bps), (500.0, 500.0 * 131072.0));
        assert_eq!((r[1].read_iops, r[1].read_bps, r[1].in_flight), (100.0, 100.0 * 4096.0, 1));
        assert!(r[1].p99.unwrap() <= 0.001 && r[0].p50.unwrap() > 0.001);
    }
}
