//! The outcome of a run: counters, what went wrong, and the summary
//! table. Serializable, so that a soak run leaves a JSON file behind.
//!
//! Failures are kept as human-readable lines prefixed with the scenario
//! that saw them (`[kill9] volume 1 lba 4242: value not allowed ...`); at
//! most [`MAX_FAILURE_LINES`] are kept, the rest only counted, so a run
//! that loses every block still produces a readable report.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most failure lines kept in a report.
pub const MAX_FAILURE_LINES: usize = 200;
/// Most failure lines kept per scenario.
pub const MAX_LINES_PER_SCENARIO: u64 = 20;

/// Runs and failures of one scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioStats {
    /// Times it ran.
    pub runs: u64,
    /// Failures it saw.
    pub failures: u64,
}

/// What a run did and found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Seed of the run (replay with `--seed`).
    pub seed: u64,
    /// Whether strata ran with the tuning keys.
    pub tuning: bool,
    /// Wall-clock length of the run.
    pub duration_secs: f64,
    /// Rounds completed.
    pub rounds: u64,
    /// Operations issued by verified hosts and raw clients, by kind.
    pub operations: BTreeMap<String, u64>,
    /// Bytes of acknowledged writes.
    pub bytes_written: u64,
    /// Bytes read back and checked against the oracle.
    pub bytes_verified: u64,
    /// Faults injected, by kind (see `FaultKind::name`).
    pub faults: BTreeMap<String, u64>,
    /// Blocks whose durable (acknowledged and flushed, or FUA) value was
    /// wrong after a crash.
    pub blocks_lost: u64,
    /// Other reads the oracle rejected (torn, foreign, stale, garbage).
    pub wrong_reads: u64,
    /// Operations that did not finish within the watchdog.
    pub hangs: u64,
    /// Peak resident set of strata (max VmHWM over its runs), bytes.
    pub peak_rss_bytes: u64,
    /// The RSS limit the run was held to, if any.
    pub rss_limit_bytes: Option<u64>,
    /// Legitimate-host probes made while attackers ran.
    pub legit_probes: u64,
    /// Longest time a legitimate host took to connect and complete I/O
    /// while attackers ran, milliseconds (a failed probe counts as its
    /// deadline).
    pub legit_connect_max_ms: Option<u64>,
    /// The same, per attack window (the attacks running, joined by "and").
    pub legit_max_ms_by_attack: BTreeMap<String, u64>,
    /// Longest time of each step of a legitimate-host probe (`connect`,
    /// `write`, `read`), milliseconds.
    pub legit_step_max_ms: BTreeMap<String, u64>,
    /// Misbehaving connections opened (idle sockets, stalled readers,
    /// R2T-hoarding queues).
    pub attacker_connections: u64,
    /// Of those, how many strata closed (EOF or RST seen) in time.
    pub attacker_connections_closed: u64,
    /// Longest time strata took to close one, milliseconds (as observed;
    /// see `docs/chaos.md` for the resolution).
    pub attacker_close_max_ms: Option<u64>,
    /// Runs and failures per scenario.
    pub scenarios: BTreeMap<String, ScenarioStats>,
    /// What went wrong, one line each, prefixed with the scenario.
    pub failures: Vec<String>,
    /// Failure lines beyond [`MAX_FAILURE_LINES`], counted only.
    pub failures_dropped: u64,
    /// The run's work dir (strata's data, config and log).
    pub work_dir: String,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl Report {
    /// True when nothing went wrong: no loss, no wrong read, no hang, no
    /// failure of any scenario, RSS within the limit.
    pub fn is_clean(&self) -> bool {
        self.blocks_lost == 0
            && self.wrong_reads == 0
            && self.hangs == 0
            && self.failures.is_empty()
            && self.failures_dropped == 0
            && !self.rss_over_limit()
    }

    /// True when a limit was set and the peak RSS went over it.
    pub fn rss_over_limit(&self) -> bool {
        self.rss_limit_bytes.is_some_and(|l| self.peak_rss_bytes > l)
    }

    /// Records a failure seen by `scenario`.
    pub(crate) fn fail(&mut self, scenario: &str, msg: impl Into<String>) {
        let st = self.scenarios.entry(scenario.to_string()).or_default();
        st.failures += 1;
        if st.failures <= MAX_LINES_PER_SCENARIO && self.failures.len() < MAX_FAILURE_LINES {
            self.failures.push(format!("[{scenario}] {}", msg.into()));
        } else {
            self.failures_dropped += 1;
        }
    }

    /// Records one run of `scenario`.
    pub(crate) fn ran(&mut self, scenario: &str) {
        self.scenarios.entry(scenario.to_string()).or_default().runs += 1;
    }

    /// Counts `n` operations of `kind`.
    pub(crate) fn op(&mut self, kind: &str, n: u64) {
        *self.operations.entry(kind.to_string()).or_default() += n;
    }

    /// Counts `n` injected faults of `kind`.
    pub(crate) fn fault(&mut self, kind: &str, n: u64) {
        *self.faults.entry(kind.to_string()).or_default() += n;
    }

    /// Records how long a legitimate host took while `attacks` ran.
    pub(crate) fn legit_probe(&mut self, attacks: &str, took: Duration) {
        self.legit_probes += 1;
        let ms = took.as_millis() as u64;
        self.legit_connect_max_ms = Some(self.legit_connect_max_ms.map_or(ms, |m| m.max(ms)));
        let per = self.legit_max_ms_by_attack.entry(attacks.to_string()).or_default();
        *per = (*per).max(ms);
    }

    /// Records how long one step of a legitimate-host probe took.
    pub(crate) fn legit_step(&mut self, step: &str, took: Duration) {
        let ms = took.as_millis() as u64;
        let per = self.legit_step_max_ms.entry(step.to_string()).or_default();
        *per = (*per).max(ms);
    }

    /// Records attacker connections: `opened`, of which `closed` were
    /// closed by strata, the slowest after `slowest`.
    pub(crate) fn attackers(&mut self, opened: u64, closed: u64, slowest: Option<Duration>) {
        self.attacker_connections += opened;
        self.attacker_connections_closed += closed;
        if let Some(d) = slowest {
            let ms = d.as_millis() as u64;
            self.attacker_close_max_ms = Some(self.attacker_close_max_ms.map_or(ms, |m| m.max(ms)));
        }
    }

    /// The counter of `name` in `map`, 0 if absent.
    fn count(map: &BTreeMap<String, u64>, name: &str) -> u64 {
        map.get(name).copied().unwrap_or(0)
    }

    /// A human-readable summary: the counters, a table of scenarios and
    /// the failure lines.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let verdict = if self.is_clean() { "CLEAN" } else { "FAILED" };
        let _ = writeln!(
            s,
            "strata-chaos {verdict}: seed {}, {:.1} s, {} rounds, tuning {}",
            self.seed,
            self.duration_secs,
            self.rounds,
            if self.tuning { "on" } else { "off (--no-tuning)" }
        );
        let join = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                return "none".to_string();
            }
            m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(s, "  {:<22} {}", "operations", join(&self.operations));
        let _ = writeln!(s, "  {:<22} {}", "bytes written", mib(self.bytes_written));
        let _ = writeln!(s, "  {:<22} {}", "bytes verified", mib(self.bytes_verified));
        let _ = writeln!(s, "  {:<22} {}", "faults injected", join(&self.faults));
        let _ = writeln!(s, "  {:<22} {}", "kill -9", Self::count(&self.faults, "kill9"));
        let _ = writeln!(s, "  {:<22} {}", "resets", Self::count(&self.faults, "resets"));
        let _ = writeln!(s, "  {:<22} {}", "blocks lost", self.blocks_lost);
        let _ = writeln!(s, "  {:<22} {}", "wrong reads", self.wrong_reads);
        let _ = writeln!(s, "  {:<22} {}", "hangs", self.hangs);
        let limit = self.rss_limit_bytes.map_or(String::new(), |l| format!(" (limit {})", mib(l)));
        let over = if self.rss_over_limit() { " OVER LIMIT" } else { "" };
        let _ = writeln!(s, "  {:<22} {}{limit}{over}", "peak RSS", mib(self.peak_rss_bytes));
        let legit = match self.legit_connect_max_ms {
            Some(ms) => format!("max {ms} ms over {} probes", self.legit_probes),
            None => "no probes".into(),
        };
        let _ = writeln!(s, "  {:<22} {legit}", "legit host under attack");
        for (attacks, ms) in &self.legit_max_ms_by_attack {
            let _ = writeln!(s, "  {:<22}   {ms} ms during {attacks}", "");
        }
        if !self.legit_step_max_ms.is_empty() {
            let steps: Vec<String> = self.legit_step_max_ms.iter().map(|(k, v)| format!("{k} {v} ms")).collect();
            let _ = writeln!(s, "  {:<22}   slowest steps: {}", "", steps.join(", "));
        }
        let slowest = self.attacker_close_max_ms.map_or(String::new(), |ms| format!(", slowest {ms} ms"));
        let _ = writeln!(
            s,
            "  {:<22} {}/{} closed by strata{slowest}",
            "attacker connections", self.attacker_connections_closed, self.attacker_connections
        );
        let _ = writeln!(s, "  {:<22} {:>6} {:>8}", "scenario", "runs", "failures");
        for (name, st) in &self.scenarios {
            let mark = if st.failures > 0 { "  <- FAILED" } else { "" };
            let _ = writeln!(s, "  {:<22} {:>6} {:>8}{mark}", name, st.runs, st.failures);
        }
        if !self.failures.is_empty() {
            let dropped =
                if self.failures_dropped > 0 { format!(" (+{} more)", self.failures_dropped) } else { "".into() };
            let _ = writeln!(s, "  failures{dropped}:");
            for f in &self.failures {
                let _ = writeln!(s, "    - {f}");
            }
        }
        let _ = writeln!(s, "  work dir: {}", self.work_dir);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_report_is_clean_and_each_problem_dirties_it() {
        assert!(Report::default().is_clean());
        let dirty: [fn(&mut Report); 5] = [
            |r| r.blocks_lost = 1,
            |r| r.wrong_reads = 1,
            |r| r.hangs = 1,
            |r| r.fail("x", "y"),
            |r| {
                r.rss_limit_bytes = Some(10);
                r.peak_rss_bytes = 11
            },
        ];
        for f in dirty {
            let mut r = Report::default();
            f(&mut r);
            assert!(!r.is_clean(), "{r:?}");
        }
        let r = Report { rss_limit_bytes: Some(10), peak_rss_bytes: 10, ..Report::default() };
        assert!(r.is_clean());
    }

    #[test]
    fn failure_lines_are_capped_but_counted_and_every_scenario_shows() {
        let mut r = Report::default();
        for i in 0..1000 {
            r.fail("resets", format!("block {i}"));
        }
        r.fail("idle_sockets", "0/300 closed");
        let per = MAX_LINES_PER_SCENARIO as usize;
        assert_eq!(r.failures.len(), per + 1);
        assert_eq!(r.failures_dropped, (1000 - per) as u64);
        assert_eq!(r.scenarios["resets"].failures, 1000);
        assert!(r.failures[0].starts_with("[resets] block 0"));
        assert_eq!(r.failures.last().unwrap(), "[idle_sockets] 0/300 closed");
        for i in 0..20 {
            r.fail(&format!("s{i}"), "x".repeat(3));
            for _ in 0..20 {
                r.fail(&format!("s{i}"), "y");
            }
        }
        assert_eq!(r.failures.len(), MAX_FAILURE_LINES);
    }

    #[test]
    fn summary_names_failed_scenarios_and_json_round_trips() {
        let mut r = Report { seed: 7, ..Report::default() };
        r.ran("resets");
        r.fail("resets", "lost 3 blocks");
        r.fault("kill9", 2);
        r.legit_probe("idle_sockets", Duration::from_millis(40));
        r.legit_probe("idle_sockets", Duration::from_millis(20));
        r.attackers(10, 4, Some(Duration::from_millis(2500)));
        let s = r.summary();
        assert!(s.contains("FAILED") && s.contains("<- FAILED") && s.contains("lost 3 blocks"), "{s}");
        assert!(s.contains("max 40 ms over 2 probes") && s.contains("4/10 closed"), "{s}");
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
