//! What to run: one workload against one target.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniform random reads.
    RandRead,
    /// Uniform random writes.
    RandWrite,
    /// Uniform random mix of reads and writes (`read_pct` reads).
    RandRw,
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "randrw" => Pattern::RandRw,
            _ => return Err(format!("unknown pattern {s:?}: use read, write, randread, randwrite or randrw")),
        })
    }
}

/// Where to send I/O: `tcp://ADDR:PORT/NQN` (IPv6 as `tcp://[::1]:4420/NQN`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSpec {
    /// Target address.
    pub addr: std::net::SocketAddr,
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace to use. Default: 1.
    #[serde(default = "one")]
    pub nsid: u32,
}

fn one() -> u32 {
    1
}

impl std::str::FromStr for TargetSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url: strata_host::TargetUrl = s.parse().map_err(|e| format!("target {e}"))?;
        match url.addrs[..] {
            [addr] => Ok(TargetSpec { addr, nqn: url.nqn, nsid: 1 }),
            _ => Err(format!("target {s:?}: one address, not {} (a benchmark runs one path)", url.addrs.len())),
        }
    }
}

impl std::fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tcp://{}/{}", self.addr, self.nqn)
    }
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Name (suite entries; "default" for a command-line run).
    pub name: String,
    /// Target.
    pub target: TargetSpec,
    /// Access pattern.
    pub rw: Pattern,
    /// Percentage of reads for `randrw` (0..=100). Default: 50.
    pub read_pct: u8,
    /// Block size in bytes (a multiple of the namespace block size).
    pub bs: u32,
    /// Outstanding I/Os per job.
    pub iodepth: u32,
    /// Jobs: each is one I/O queue (TCP connection) with `iodepth` I/Os.
    pub jobs: u32,
    /// Run for this long (after `ramp`), unless `size` ends it first.
    pub runtime: Option<Duration>,
    /// Stop after this many bytes in total.
    pub size: Option<u64>,
    /// Warm-up time not counted in the results. Default: none.
    pub ramp: Duration,
    /// Limit on total IOPS over all jobs. Default: none.
    pub rate_iops: Option<u64>,
    /// Write blocks that describe themselves (magic, LBA, seed,
    /// generation) and check every byte read back. A read never writes:
    /// every block it reads must hold the pattern of its LBA, and one that
    /// reads as zeros is a failure (it was never written, or it was lost).
    /// Blocks written by an earlier verify run (any seed or generation)
    /// are accepted, so a read-back after a target restart checks old
    /// data; run a verify write over the span first, or set `prefill`.
    pub verify: bool,
    /// Before a workload that reads, write the verify pattern over every
    /// block of the span (a sequential write, not measured), so a verify
    /// read of a fresh namespace has something to check. Absent from older
    /// reports, which read back as `false`.
    #[serde(default)]
    pub prefill: bool,
    /// Limit the I/O to the first `span` bytes of the namespace. Default:
    /// the whole namespace.
    pub span: Option<u64>,
    /// Header and data digests.
    pub digests: bool,
    /// Seed for random offsets (same seed, same offsets).
    pub seed: u64,
    /// Busy-poll the initiator: each job spins on its socket for up to
    /// this many microseconds waiting for completions before it sleeps
    /// (0, the default: never spin; at most [`MAX_POLL_US`]).
    ///
    /// A sleeping initiator costs the target a wake-up per batch of
    /// completions it sends, and on loopback the target's core pays for
    /// it (`sock_def_readable` was 8% of the server profile at QD 32).
    /// SPDK's `spdk_nvme_perf` never sleeps, so comparing with its figures
    /// needs this; it costs up to a whole client core per job.
    ///
    /// Absent from reports written before the option existed, which read
    /// back as 0 (they did not poll).
    #[serde(default)]
    pub poll_us: u64,
    /// Ask the target to disable SQ flow control (the Connect command's
    /// CATTR bit; nvme-cli's `--disable-sqflow`), which lets it complete
    /// a successful read with the C2HData SUCCESS flag instead of a
    /// separate CapsuleResp: one PDU less per read. Absent from older
    /// reports, which read back as `false`.
    #[serde(default)]
    pub disable_sqflow: bool,
    /// Ride through path failures as a multipath host does: a path error
    /// (ANA Transition or Inaccessible, a status without Do Not Retry), a
    /// lost connection or an I/O past the I/O timeout drops the
    /// connection, connects again to the best path discovery at the
    /// target's address lists (optimized first) and re-issues the I/Os
    /// that were in flight, counting their latency from their first
    /// submission. Only a path that stays lost this long fails the run.
    /// `None` (the default): the first failure ends the run. Absent from
    /// older reports.
    #[serde(default)]
    pub failover: Option<Duration>,
}

/// Largest [`WorkloadSpec::poll_us`]: one second. A longer spin is no
/// longer a latency measure but a typo.
pub const MAX_POLL_US: u64 = 1_000_000;

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            name: "default".into(),
            target: TargetSpec {
                addr: ([127, 0, 0, 1], 4420).into(),
                nqn: "nqn.2026-11.io.strata:default".into(),
                nsid: 1,
            },
            rw: Pattern::RandRead,
            read_pct: 50,
            bs: 4096,
            iodepth: 32,
            jobs: 1,
            runtime: Some(Duration::from_secs(10)),
            size: None,
            ramp: Duration::ZERO,
            rate_iops: None,
            verify: false,
            prefill: false,
            span: None,
            digests: false,
            seed: 0x5eed,
            poll_us: 0,
            disable_sqflow: false,
            failover: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec as reports before `poll_us` and `disable_sqflow` wrote it.
    const OLD_SPEC: &str = r#"{
        "name": "default",
        "target": {"addr": "127.0.0.1:4490", "nqn": "nqn.2026-11.io.strata:default", "nsid": 1},
        "rw": "randread", "read_pct": 50, "bs": 4096, "iodepth": 32, "jobs": 1,
        "runtime": {"secs": 5, "nanos": 0}, "size": null, "ramp": {"secs": 0, "nanos": 0},
        "rate_iops": null, "verify": false, "span": null, "digests": false, "seed": 24301
    }"#;

    #[test]
    fn a_spec_without_the_polling_and_sqflow_fields_reads_as_off() {
        let s: WorkloadSpec = serde_json::from_str(OLD_SPEC).expect("old spec");
        assert_eq!((s.poll_us, s.disable_sqflow), (0, false));
        assert_eq!((s.iodepth, s.seed, s.runtime), (32, 24301, Some(Duration::from_secs(5))));
    }

    #[test]
    fn the_polling_and_sqflow_fields_round_trip() {
        let s = WorkloadSpec { poll_us: 100, disable_sqflow: true, ..WorkloadSpec::default() };
        let json = serde_json::to_string(&s).expect("serializes");
        assert!(json.contains("\"poll_us\":100") && json.contains("\"disable_sqflow\":true"), "{json}");
        let back: WorkloadSpec = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, s);
    }
}
