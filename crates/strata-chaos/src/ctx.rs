//! State shared by every task of a run: where strata listens, the oracle,
//! the report, id counters, and whether strata is being disrupted on
//! purpose (killed, restarted) so that connection failures are expected.
//!
//! The oracle and the report sit behind std mutexes that are only ever
//! held for a few statements, never across an `.await`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_host::{HostConfig, HostError};

use crate::block::{self, BLOCK_SIZE};
use crate::oracle::{Oracle, Violation, VolumeId};
use crate::report::Report;

/// A volume the harness does I/O on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRef {
    /// The harness's id (stamped into every block).
    pub id: VolumeId,
    /// strata's volume name.
    pub name: String,
    /// Its subsystem NQN (namespace 1).
    pub nqn: String,
}

impl VolumeRef {
    /// The volume `name` with strata's default NQN for it.
    pub fn new(id: VolumeId, name: &str) -> VolumeRef {
        VolumeRef { id, name: name.to_string(), nqn: format!("nqn.2026-11.io.strata:{name}") }
    }
}

/// Shared state of a run.
#[derive(Debug)]
pub struct Ctx {
    /// strata's NVMe/TCP I/O address.
    pub io: SocketAddr,
    /// Discovery controllers of a cluster, asked in turn where a volume is
    /// served (its owner moves); empty for a single node at `io`.
    discovery: Vec<SocketAddr>,
    oracle: Mutex<Oracle>,
    report: Mutex<Report>,
    /// Violations already reported, as (volume, LBA, what was read): a
    /// block that stays wrong is counted once, not at every verification.
    reported: Mutex<HashSet<(VolumeId, u64, String)>>,
    next_writer: AtomicU32,
    next_seq: AtomicU64,
    /// An operation not finished after this is a hang.
    pub watchdog: Duration,
    /// A legitimate host must get through within this under attack.
    pub legit_deadline: Duration,
    disrupted: AtomicBool,
    /// Bumped at every start and end of a disruption.
    disruption_era: AtomicU64,
    /// Operations each host (by name) completed with success.
    host_ops: Mutex<HashMap<String, u64>>,
    /// Whoever runs a Flush (or a FUA write, which commits too) holds it
    /// shared. A resetter may hold it exclusively for the instant between
    /// sending its Flush and resetting the connection, so that its Flush
    /// is the one running the group commit when the connection dies (with
    /// hosts flushing dozens of times a second, the commit is otherwise
    /// nearly always someone else's and the reset never lands inside it).
    /// The volume scenario holds it exclusively from a shrink until the
    /// kill -9 that follows, so that no Flush commits the shrink first.
    pub flush_gate: Arc<tokio::sync::RwLock<()>>,
}

impl Ctx {
    /// A context for strata at `io`.
    pub fn new(io: SocketAddr, watchdog: Duration, legit_deadline: Duration, report: Report) -> Ctx {
        Ctx {
            io,
            discovery: Vec::new(),
            oracle: Mutex::new(Oracle::new()),
            report: Mutex::new(report),
            reported: Mutex::new(HashSet::new()),
            next_writer: AtomicU32::new(1),
            next_seq: AtomicU64::new(1),
            watchdog,
            legit_deadline,
            disrupted: AtomicBool::new(false),
            disruption_era: AtomicU64::new(0),
            host_ops: Mutex::new(HashMap::new()),
            flush_gate: Arc::new(tokio::sync::RwLock::new(())),
        }
    }

    /// A context for a cluster: hosts ask these discovery controllers, in
    /// turn, where each volume is served, at every connect.
    pub fn with_discovery(mut self, discovery: Vec<SocketAddr>) -> Ctx {
        self.discovery = discovery;
        self
    }

    /// Where `nqn` is served now: `io` for a single node; for a cluster,
    /// the address the first discovery controller that answers lists it
    /// at.
    ///
    /// # Errors
    ///
    /// The last discovery error, or [`HostError::Io`] (not found) when no
    /// controller lists `nqn`.
    pub async fn target(&self, nqn: &str, cfg: &HostConfig) -> Result<SocketAddr, HostError> {
        self.targets(nqn, cfg).await.map(|all| all[0])
    }

    /// Every address the first discovery controller that lists `nqn`
    /// gives for it, in its order (a pool lists every node's path); at
    /// least one.
    ///
    /// # Errors
    ///
    /// As [`target`](Self::target).
    pub async fn targets(&self, nqn: &str, cfg: &HostConfig) -> Result<Vec<SocketAddr>, HostError> {
        let mut last = None;
        for &d in &self.discovery {
            match tokio::time::timeout(self.watchdog, strata_host::discover(d, cfg)).await {
                Ok(Ok(entries)) => {
                    let mut found: Vec<SocketAddr> =
                        entries.iter().filter(|e| e.subnqn == nqn).filter_map(|e| e.tcp_socket_addr()).collect();
                    found.dedup();
                    if !found.is_empty() {
                        return Ok(found);
                    }
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(HostError::Timeout { what: "discovery", after: self.watchdog }),
            }
        }
        match last {
            _ if self.discovery.is_empty() => Ok(vec![self.io]),
            Some(e) => Err(e),
            None => Err(HostError::Io {
                context: "resolving a volume through discovery",
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no discovery controller lists {nqn}"),
                ),
            }),
        }
    }

    /// A writer id not used before in this run.
    pub fn writer_id(&self) -> u32 {
        self.next_writer.fetch_add(1, Ordering::Relaxed)
    }

    /// A write sequence number not used before in this run.
    pub fn seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `f` on the oracle.
    pub fn oracle<R>(&self, f: impl FnOnce(&mut Oracle) -> R) -> R {
        f(&mut self.oracle.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `f` on the report.
    pub fn report<R>(&self, f: impl FnOnce(&mut Report) -> R) -> R {
        f(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A copy of the report as it stands.
    pub fn snapshot(&self) -> Report {
        self.report(|r| r.clone())
    }

    /// Records a failure seen by `scenario`, and prints it at once with
    /// the time of day (UTC, as strata's logs have it), so that it lines
    /// up with what the nodes logged.
    pub fn fail(&self, scenario: &str, msg: impl Into<String>) {
        let msg = msg.into();
        eprintln!("{} strata-chaos failure [{scenario}]: {msg}", time_of_day());
        self.report(|r| r.fail(scenario, msg));
    }

    /// Records an operation that did not finish within the watchdog.
    pub fn hang(&self, scenario: &str, what: impl std::fmt::Display) {
        let msg = format!("HANG: {what} did not finish within {:?}", self.watchdog);
        self.report(|r| {
            r.hangs += 1;
            r.fail(scenario, msg)
        });
    }

    /// Records a read the oracle rejected (and prints it at once, as
    /// [`Ctx::fail`] does). `after` names the restart the read follows
    /// ("kill -9", "clean restart"), if any: a block whose durable value
    /// was the suite's data then counts as lost. The same block read wrong
    /// the same way again is not counted again.
    pub fn violation(&self, scenario: &str, v: &Violation, after: Option<&str>) {
        let key = (v.volume, v.lba, v.got.clone());
        if !self.reported.lock().unwrap_or_else(|e| e.into_inner()).insert(key) {
            return;
        }
        let lost = after.is_some() && v.durable_written;
        let what = match (lost, after) {
            (true, Some(a)) => format!("LOST after {a}"),
            (false, Some(a)) => format!("WRONG READ after {a}"),
            _ => "WRONG READ".to_string(),
        };
        let msg = format!("{what}: {v}");
        eprintln!("{} strata-chaos failure [{scenario}]: {msg}", time_of_day());
        self.report(|r| {
            if lost {
                r.blocks_lost += 1;
            } else {
                r.wrong_reads += 1;
            }
            r.fail(scenario, msg)
        });
    }

    /// Counts an operation host `host` completed with success.
    pub fn host_done(&self, host: &str) {
        *self.host_ops.lock().unwrap_or_else(|e| e.into_inner()).entry(host.to_string()).or_default() += 1;
    }

    /// The operations each host completed with success so far, by name:
    /// a host whose count grows has no command stuck on a connection a
    /// fault broke (its workers share one, and it is replaced only once
    /// every worker on it ended).
    pub fn host_ops(&self) -> HashMap<String, u64> {
        self.host_ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Marks strata as being disrupted on purpose (or not any more).
    pub fn set_disrupted(&self, on: bool) {
        if self.disrupted.swap(on, Ordering::AcqRel) != on {
            self.disruption_era.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A count of disruptions begun and ended: an operation that saw it
    /// change overlapped a disruption, and an error it ends with (a
    /// connection the fault broke, whose end reached the host late) is
    /// expected even when the disruption is over.
    pub fn disruption_era(&self) -> u64 {
        self.disruption_era.load(Ordering::Acquire)
    }

    /// True while strata is being killed or restarted on purpose.
    pub fn disrupted(&self) -> bool {
        self.disrupted.load(Ordering::Acquire)
    }

    /// Checks every block of a read of `volume` at `slba` against the
    /// oracle (`after`: see [`Ctx::violation`]); returns the number of
    /// violations.
    pub fn check_blocks(&self, scenario: &str, volume: VolumeId, slba: u64, data: &[u8], after: Option<&str>) -> u64 {
        let mut bad = 0;
        for (i, b) in data.chunks(BLOCK_SIZE).enumerate() {
            let content = block::decode(b);
            let verdict = self.oracle(|o| o.check_read(volume, slba + i as u64, &content));
            if let Err(v) = verdict {
                self.violation(scenario, &v, after);
                bad += 1;
            }
        }
        self.report(|r| r.bytes_verified += data.len() as u64);
        bad
    }
}

/// The time of day, UTC, to the millisecond: `16:44:36.356Z`.
fn time_of_day() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (secs, ms) = (since.as_secs() % 86_400, since.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disruption_era_moves_at_each_start_and_end_only() {
        let addr: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let ctx = Ctx::new(addr, Duration::from_secs(1), Duration::from_secs(1), Report::default());
        let era = ctx.disruption_era();
        ctx.set_disrupted(false);
        assert_eq!(ctx.disruption_era(), era, "no disruption began");
        ctx.set_disrupted(true);
        ctx.set_disrupted(true);
        assert_eq!(ctx.disruption_era(), era + 1);
        ctx.set_disrupted(false);
        // An operation begun before the disruption, ending after it, saw
        // the era change.
        assert_eq!(ctx.disruption_era(), era + 2);
        assert!(!ctx.disrupted());
    }
}
