//! What a run does: [`ChaosConfig`], the fault kinds it can inject, and
//! the strata settings ([`Tuning`]) it passes so that misbehaving hosts
//! are cut off within a short run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;

/// A kind of fault the suite injects. Each can be turned off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Connection resets (TCP RST) during Flush and during R2T transfers.
    Resets,
    /// kill -9 of strata under load, restart, verify.
    Kill9,
    /// Many sockets that connect and never speak.
    IdleSockets,
    /// Hosts that queue many reads and never read their socket.
    StalledReaders,
    /// Hosts that request R2Ts and never send the data.
    R2tHoarders,
    /// Hosts that connect and disconnect as fast as they can.
    ConnectFloods,
    /// Volume create, grow, shrink and delete under connected hosts.
    VolumeOps,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Resets,
        FaultKind::Kill9,
        FaultKind::IdleSockets,
        FaultKind::StalledReaders,
        FaultKind::R2tHoarders,
        FaultKind::ConnectFloods,
        FaultKind::VolumeOps,
    ];

    /// The name used by `--only` and as the key in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Resets => "resets",
            FaultKind::Kill9 => "kill9",
            FaultKind::IdleSockets => "idle_sockets",
            FaultKind::StalledReaders => "stalled_readers",
            FaultKind::R2tHoarders => "r2t_hoarders",
            FaultKind::ConnectFloods => "connect_floods",
            FaultKind::VolumeOps => "volume_ops",
        }
    }

    /// Parses a name (`-` and `_` are the same).
    pub fn parse(s: &str) -> Option<FaultKind> {
        let s = s.trim().replace('-', "_");
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// True for the kinds that are misbehaving hosts (run in an attack
    /// window with a legitimate host probing beside them).
    pub fn is_attack(self) -> bool {
        matches!(
            self,
            FaultKind::IdleSockets | FaultKind::StalledReaders | FaultKind::R2tHoarders | FaultKind::ConnectFloods
        )
    }
}

/// strata settings that bound what a misbehaving host can hold. They are
/// written to the config file strata is started with; strata refuses
/// unknown keys, so a strata that lacks them must be run with
/// [`ChaosConfig::tuning`] set to `None` (`--no-tuning`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// ICReq and Connect must arrive within this after accept. Default: 2 s.
    pub handshake_timeout: Duration,
    /// H2CData must follow an R2T within this. Default: 2 s.
    pub r2t_timeout: Duration,
    /// A host that stops reading is dropped after this long without send
    /// progress. Default: 3 s.
    pub send_timeout: Duration,
    /// Most connections that have not completed Connect. Default: 64.
    pub max_pending_connections: u32,
    /// Global bytes of command state and data buffers, in MiB. I/O
    /// queues prepay 11 KiB per entry from it, so it also decides how
    /// many queues can connect. Default: 256.
    pub io_buffer_budget_mib: u64,
    /// Most connections served at once. Default: 512.
    pub max_connections: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            handshake_timeout: Duration::from_secs(2),
            r2t_timeout: Duration::from_secs(2),
            send_timeout: Duration::from_secs(3),
            max_pending_connections: 64,
            io_buffer_budget_mib: 256,
            max_connections: 512,
        }
    }
}

fn toml_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("\"{}s\"", d.as_secs()) } else { format!("\"{}ms\"", d.as_millis()) }
}

impl Tuning {
    /// The settings as lines of strata's TOML config file.
    pub fn to_toml(&self) -> String {
        format!(
            "handshake_timeout = {}\nr2t_timeout = {}\nsend_timeout = {}\nmax_pending_connections = {}\n\
             io_buffer_budget = \"{}M\"\nmax_connections = {}\n",
            toml_duration(self.handshake_timeout),
            toml_duration(self.r2t_timeout),
            toml_duration(self.send_timeout),
            self.max_pending_connections,
            self.io_buffer_budget_mib,
            self.max_connections,
        )
    }

    /// The worst-case memory of a strata run with these settings, by the
    /// formula in `docs/operations.md`: the budget, 24 KiB per pending
    /// connection, 350 KiB per connection, 48 MiB per runtime thread (one
    /// per CPU, with the buffer pools) and 64 MiB for the process itself
    /// (code, metadata, drive engines).
    pub fn memory_bound_bytes(&self) -> u64 {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        (self.io_buffer_budget_mib << 20)
            + u64::from(self.max_pending_connections) * (24 << 10)
            + u64::from(self.max_connections) * (350 << 10)
            + threads * (48 << 20)
            + (64 << 20)
    }

    /// The longest time strata may take to cut off any attacker.
    pub fn longest(&self) -> Duration {
        self.handshake_timeout.max(self.r2t_timeout).max(self.send_timeout)
    }
}

/// Settings of one chaos run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `strata` binary to run.
    pub strata: PathBuf,
    /// Where strata's data dir, config and log go. Default (`None`): a
    /// fresh directory under the system temp dir, removed after a clean
    /// run and kept (its path is in the report) otherwise.
    pub work_dir: Option<PathBuf>,
    /// How long to keep starting rounds; the last round finishes after it.
    pub duration: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Fault kinds to inject. Default: all.
    pub faults: BTreeSet<FaultKind>,
    /// Fail the run when strata's peak RSS exceeds this. Default: none.
    pub rss_limit_bytes: Option<u64>,
    /// strata settings to pass; `None` omits them. Default: [`Tuning::default`].
    pub tuning: Option<Tuning>,
    /// Length of a round (load, faults, then verification). Default: 12 s.
    pub round: Duration,
    /// An operation not finished after this is a hang. Default: 30 s.
    pub watchdog: Duration,
    /// A legitimate host must connect and do I/O within this while
    /// attackers run. Default: 10 s.
    pub legit_deadline: Duration,
    /// How long after the relevant strata timeout an attacker must have
    /// been cut off. Default: 6 s.
    pub close_slack: Duration,
    /// Verified hosts running at once. Default: 3.
    pub hosts: u16,
    /// Print a progress line per round on stderr. Default: false.
    pub progress: bool,
}

impl ChaosConfig {
    /// A run of `strata` for `duration` with `seed` and every default.
    pub fn new(strata: impl Into<PathBuf>, duration: Duration, seed: u64) -> ChaosConfig {
        ChaosConfig {
            strata: strata.into(),
            work_dir: None,
            duration,
            seed,
            faults: FaultKind::ALL.into_iter().collect(),
            rss_limit_bytes: None,
            tuning: Some(Tuning::default()),
            round: Duration::from_secs(12),
            watchdog: Duration::from_secs(30),
            legit_deadline: Duration::from_secs(10),
            close_slack: Duration::from_secs(6),
            hosts: 3,
            progress: false,
        }
    }

    /// True when `kind` is turned on.
    pub fn enabled(&self, kind: FaultKind) -> bool {
        self.faults.contains(&kind)
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the bad setting.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Config(m.into()));
        if !self.strata.is_file() {
            return Err(Error::Config(format!("strata binary {} is not a file", self.strata.display())));
        }
        if self.duration.is_zero() {
            return bad("duration must be positive");
        }
        if self.round < Duration::from_secs(4) {
            return bad("a round must last at least 4 s");
        }
        if self.watchdog < Duration::from_secs(2) || self.legit_deadline < Duration::from_secs(1) {
            return bad("the watchdog must be at least 2 s and the legit-host deadline at least 1 s");
        }
        if self.hosts == 0 || self.hosts > 16 {
            return bad("hosts must be 1 to 16");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
        assert_eq!(FaultKind::parse("idle-sockets"), Some(FaultKind::IdleSockets));
        assert_eq!(FaultKind::parse("nope"), None);
    }

    #[test]
    fn tuning_is_flat_toml() {
        let t = Tuning::default().to_toml();
        assert!(t.contains("handshake_timeout = \"2s\"\n"), "{t}");
        assert!(t.contains("io_buffer_budget = \"256M\"\n"), "{t}");
        let t = Tuning { io_buffer_budget_mib: 64, ..Tuning::default() }.to_toml();
        assert!(t.contains("io_buffer_budget = \"64M\"\n"), "{t}");
        assert!(t.contains("max_pending_connections = 64\n"), "{t}");
        let t = Tuning { send_timeout: Duration::from_millis(1500), ..Tuning::default() }.to_toml();
        assert!(t.contains("send_timeout = \"1500ms\""), "{t}");
    }

    #[test]
    fn validation_names_the_setting() {
        let mut c = ChaosConfig::new("/nonexistent/strata", Duration::from_secs(1), 1);
        assert!(format!("{}", c.validate().unwrap_err()).contains("/nonexistent/strata"));
        c.strata = std::env::current_exe().unwrap();
        assert!(c.validate().is_ok());
        c.hosts = 0;
        assert!(format!("{}", c.validate().unwrap_err()).contains("hosts"));
    }
}
