//! Data-path metrics for Prometheus: I/O counts, bytes, latency histograms,
//! errors by NVMe status and commands in flight, per volume and per host
//! ([`IoMetrics`]), and the table that hands them out ([`IoMetricsRegistry`]).
//!
//! This module owns the counters and how they are read back
//! ([`IoMetrics::snapshot`]); the text exposition belongs to the binary's
//! HTTP API, which reads snapshots at scrape time.
//!
//! Design choice: recording takes no lock and allocates nothing. A volume's
//! [`IoMetrics`] is resolved once, when its namespace is added (the
//! [`Namespace`](crate::Namespace) carries it), and a host's once, when its
//! controller is created; the I/O path then only does relaxed atomic adds
//! on an `Arc` it already holds. Histogram buckets are a fixed array of
//! `AtomicU64` (one non-cumulative count per bucket, made cumulative when
//! read), and errors are counted in a fixed table of status slots claimed
//! with a compare-and-swap. A registry built disabled hands out `None`, and
//! then nothing is recorded at all (the `--no-io-metrics` switch).
//!
//! Invariants: a snapshot's histogram count is the sum of its buckets (the
//! command count reported is that sum, so the two always agree); counters
//! only grow; an entry handed out stays the same `Arc` for the life of the
//! registry, so a namespace re-added under the same volume name keeps
//! counting.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_nvme::command::io;
use strata_nvme::status::Status;

pub use strata_metrics::{BUCKETS, HistogramSnapshot, LATENCY_BOUNDS_NS, LatencyHistogram};

/// Distinct NVMe statuses counted per volume or host; further ones are
/// counted under [`ErrorCount::code`] `None`.
const STATUS_SLOTS: usize = 16;

/// The kind of an I/O command, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Flush.
    Flush,
    /// Any other command on an I/O queue (Write Zeroes, Dataset
    /// Management, Compare, reservations, ...).
    Other,
}

impl IoOp {
    /// Every kind, in label order.
    pub const ALL: [IoOp; 4] = [IoOp::Read, IoOp::Write, IoOp::Flush, IoOp::Other];

    /// The kind of NVM opcode `opcode`.
    pub fn of(opcode: u8) -> IoOp {
        match opcode {
            io::READ => IoOp::Read,
            io::WRITE => IoOp::Write,
            io::FLUSH => IoOp::Flush,
            _ => IoOp::Other,
        }
    }

    /// The `op` label value.
    pub fn label(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Flush => "flush",
            IoOp::Other => "other",
        }
    }

    fn index(self) -> usize {
        match self {
            IoOp::Read => 0,
            IoOp::Write => 1,
            IoOp::Flush => 2,
            IoOp::Other => 3,
        }
    }
}

/// The counters of one kind of command.
#[derive(Debug, Default)]
struct OpStats {
    bytes: AtomicU64,
    latency: LatencyHistogram,
}

/// One kind of command read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSnapshot {
    /// The kind.
    pub op: IoOp,
    /// Commands completed, successful or not (the histogram's count).
    pub commands: u64,
    /// Data bytes moved by the successful ones.
    pub bytes: u64,
    /// Their latencies, from decoding to completion.
    pub latency: HistogramSnapshot,
}

/// Errors with one NVMe status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCount {
    /// The status as `SCT << 8 | SC` (the Linux kernel's `NVME_SC_*`
    /// value, without the DNR and More bits); `None` for those past the
    /// table's capacity.
    pub code: Option<u16>,
    /// Commands that completed with it.
    pub count: u64,
}

/// Error counts by status, in a fixed table: a slot holds a status key
/// (status code + 1, so that 0 means free) and its count.
#[derive(Debug, Default)]
struct ErrorTable {
    keys: [AtomicU32; STATUS_SLOTS],
    counts: [AtomicU64; STATUS_SLOTS],
    overflow: AtomicU64,
}

impl ErrorTable {
    fn count(&self, status: Status) {
        let key = u32::from(status.code()) + 1;
        for (k, c) in self.keys.iter().zip(&self.counts) {
            let seen = k.load(Relaxed);
            if seen == key {
                c.fetch_add(1, Relaxed);
                return;
            }
            if seen == 0 {
                match k.compare_exchange(0, key, Relaxed, Relaxed) {
                    Ok(_) => {
                        c.fetch_add(1, Relaxed);
                        return;
                    }
                    // Another thread claimed it with this same status.
                    Err(now) if now == key => {
                        c.fetch_add(1, Relaxed);
                        return;
                    }
                    Err(_) => {}
                }
            }
        }
        self.overflow.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> Vec<ErrorCount> {
        let mut out: Vec<ErrorCount> = self
            .keys
            .iter()
            .zip(&self.counts)
            .filter_map(|(k, c)| {
                let key = k.load(Relaxed);
                let code = u16::try_from(key.checked_sub(1)?).ok()?;
                Some(ErrorCount { code: Some(code), count: c.load(Relaxed) })
            })
            .collect();
        let overflow = self.overflow.load(Relaxed);
        if overflow > 0 {
            out.push(ErrorCount { code: None, count: overflow });
        }
        out
    }
}

/// The data-path counters of one volume or one host.
#[derive(Debug, Default)]
pub struct IoMetrics {
    ops: [OpStats; 4],
    errors: ErrorTable,
    in_flight: AtomicU64,
}

impl IoMetrics {
    /// Records one completed command of kind `op` that took `latency`;
    /// `bytes` counts only if `status` is success.
    pub fn record(&self, op: IoOp, bytes: u64, latency: Duration, status: Status) {
        let s = &self.ops[op.index()];
        s.latency.observe(latency);
        if status.is_success() {
            s.bytes.fetch_add(bytes, Relaxed);
        } else {
            self.errors.count(status);
        }
    }

    /// Counts a command as in flight until the guard is dropped.
    pub fn start(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self)
    }

    /// Commands in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }

    /// The counters of each kind of command, in [`IoOp::ALL`] order.
    pub fn snapshot(&self) -> [OpSnapshot; 4] {
        IoOp::ALL.map(|op| {
            let s = &self.ops[op.index()];
            let latency = s.latency.snapshot();
            OpSnapshot { op, commands: latency.count(), bytes: s.bytes.load(Relaxed), latency }
        })
    }

    /// Errors by status, in the order the statuses were first seen.
    pub fn errors(&self) -> Vec<ErrorCount> {
        self.errors.snapshot()
    }
}

/// A command counted in flight on an [`IoMetrics`] (see
/// [`IoMetrics::start`]); dropping it ends the count, also when the
/// command's future is cancelled.
#[derive(Debug)]
pub struct InFlight<'a>(&'a IoMetrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The [`IoMetrics`] of every volume and host, by name. Lookups take a
/// lock: they happen when a namespace is added or a controller created,
/// never per command.
#[derive(Debug)]
pub struct IoMetricsRegistry {
    enabled: bool,
    volumes: Mutex<BTreeMap<String, Arc<IoMetrics>>>,
    hosts: Mutex<BTreeMap<String, Arc<IoMetrics>>>,
}

impl Default for IoMetricsRegistry {
    fn default() -> Self {
        IoMetricsRegistry::new(true)
    }
}

impl IoMetricsRegistry {
    /// A registry that records (`enabled`) or hands out nothing.
    pub fn new(enabled: bool) -> IoMetricsRegistry {
        IoMetricsRegistry { enabled, volumes: Mutex::default(), hosts: Mutex::default() }
    }

    /// Whether metrics are recorded.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The metrics of volume `name` (created on first use); `None` when
    /// disabled.
    pub fn volume(&self, name: &str) -> Option<Arc<IoMetrics>> {
        self.entry(&self.volumes, name)
    }

    /// The metrics of host `hostnqn` (created on first use); `None` when
    /// disabled.
    pub fn host(&self, hostnqn: &str) -> Option<Arc<IoMetrics>> {
        self.entry(&self.hosts, hostnqn)
    }

    /// Forgets volume `name` (deleted): its series end.
    pub fn remove_volume(&self, name: &str) {
        self.volumes.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    /// Every volume's metrics, by name.
    pub fn volumes(&self) -> Vec<(String, Arc<IoMetrics>)> {
        Self::all(&self.volumes)
    }

    /// Every host's metrics, by NQN.
    pub fn hosts(&self) -> Vec<(String, Arc<IoMetrics>)> {
        Self::all(&self.hosts)
    }

    fn entry(&self, map: &Mutex<BTreeMap<String, Arc<IoMetrics>>>, name: &str) -> Option<Arc<IoMetrics>> {
        if !self.enabled {
            return None;
        }
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        Some(map.entry(name.to_string()).or_default().clone())
    }

    fn all(map: &Mutex<BTreeMap<String, Arc<IoMetrics>>>) -> Vec<(String, Arc<IoMetrics>)> {
        map.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_only_of_successes_and_errors_by_status() {
        let m = IoMetrics::default();
        m.record(IoOp::Write, 4096, Duration::from_micros(30), Status::SUCCESS);
        m.record(IoOp::Write, 4096, Duration::from_micros(30), Status::SUCCESS);
        m.record(IoOp::Write, 4096, Duration::from_micros(30), Status::WRITE_FAULT.dnr());
        m.record(IoOp::Read, 8192, Duration::from_micros(30), Status::LBA_OUT_OF_RANGE.dnr());
        m.record(IoOp::Read, 8192, Duration::from_micros(30), Status::LBA_OUT_OF_RANGE);
        m.record(IoOp::Flush, 0, Duration::from_micros(30), Status::SUCCESS);
        let s = m.snapshot();
        assert_eq!((s[1].op, s[1].commands, s[1].bytes), (IoOp::Write, 3, 8192));
        assert_eq!((s[0].commands, s[0].bytes), (2, 0));
        assert_eq!((s[2].commands, s[3].commands), (1, 0));
        let e = m.errors();
        assert_eq!(e.len(), 2, "the DNR bit does not make another status: {e:?}");
        assert_eq!(e[0], ErrorCount { code: Some(Status::WRITE_FAULT.code()), count: 1 });
        assert_eq!(e[1], ErrorCount { code: Some(Status::LBA_OUT_OF_RANGE.code()), count: 2 });
    }

    #[test]
    fn statuses_past_the_table_go_to_overflow() {
        let m = IoMetrics::default();
        for sc in 0..(STATUS_SLOTS as u8 + 3) {
            m.record(IoOp::Other, 0, Duration::ZERO, Status::new(1, sc));
        }
        let e = m.errors();
        assert_eq!(e.len(), STATUS_SLOTS + 1);
        assert_eq!(e[STATUS_SLOTS], ErrorCount { code: None, count: 3 });
    }

    #[test]
    fn in_flight_ends_with_the_guard() {
        let m = IoMetrics::default();
        let a = m.start();
        let b = m.start();
        assert_eq!(m.in_flight(), 2);
        drop(a);
        assert_eq!(m.in_flight(), 1);
        drop(b);
        assert_eq!(m.in_flight(), 0);
    }

    #[test]
    fn a_disabled_registry_hands_out_nothing_and_entries_are_shared() {
        assert!(IoMetricsRegistry::new(false).volume("v").is_none());
        assert!(IoMetricsRegistry::new(false).host("h").is_none());
        let r = IoMetricsRegistry::new(true);
        let a = r.volume("v").unwrap();
        let b = r.volume("v").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(r.volumes().len(), 1);
        assert!(r.hosts().is_empty());
        r.remove_volume("v");
        assert!(r.volumes().is_empty());
    }
}
