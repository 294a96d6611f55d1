//! Benchmark reports: what ran, where, what it measured and whether it met
//! its gates, as JSON that later runs can use as a baseline, plus the human
//! summary printed at the end of a run.
//!
//! # Format
//!
//! A report body is one JSON object (`serde_json` pretty-printed):
//!
//! | field          | meaning                                                      |
//! |----------------|--------------------------------------------------------------|
//! | `format`       | always [`REPORT_FORMAT`] (the magic)                          |
//! | `version`      | [`REPORT_VERSION`]; readers refuse newer versions             |
//! | `name`         | suite name, or `"run"` for a command-line run                  |
//! | `command_line` | argv of the `strata` process that wrote it                    |
//! | `job_file`     | `{path, contents}` of the suite's TOML file, or null           |
//! | `baseline`     | `{path, started_at, git_commit, signed_by}` or null            |
//! | `system`       | [`SystemInfo`]: version, commit, kernel, CPU, cores, hostname |
//! | `started_at`   | RFC 3339 UTC                                                  |
//! | `finished_at`  | RFC 3339 UTC                                                  |
//! | `stop_loss`    | `{margin_pct, for}` or null                                   |
//! | `workloads`    | one [`WorkloadReport`] per workload, in run order             |
//! | `passed`       | every workload ran to the end and met every gate              |
//!
//! Each workload holds the engine's [`WorkloadResult`] unchanged (spec, full
//! histogram, time series, CPU, errors, abort reason), the gate verdicts and
//! the error that kept it from running, if any. A signed report wraps this
//! body (see [`crate::sign`]).
//!
//! Compatibility rule: fields are only ever added within a version, and
//! readers ignore fields they do not know; removing or changing the meaning
//! of a field bumps [`REPORT_VERSION`].

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::gate::{GateVerdict, StopLoss};
use crate::result::{LatencySummary, WorkloadResult};
use crate::spec::Pattern;
use crate::sysinfo::SystemInfo;
use crate::units::format_size;

/// The `format` field of every report.
pub const REPORT_FORMAT: &str = "strata-bench-report";
/// The report version this code writes and the newest it reads.
pub const REPORT_VERSION: u32 = 1;

/// The job file a suite ran from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    /// Path as given on the command line.
    pub path: String,
    /// The exact contents.
    pub contents: String,
}

/// The report a suite was compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineRef {
    /// Path as given on the command line.
    pub path: String,
    /// When the baseline run started.
    pub started_at: String,
    /// The commit the baseline was measured with.
    pub git_commit: String,
    /// Hex public key that signed the baseline, if it was signed.
    pub signed_by: Option<String>,
}

/// One workload of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// Workload name.
    pub name: String,
    /// What the engine measured; `None` when the workload could not run.
    pub result: Option<WorkloadResult>,
    /// Why the workload could not run (connect failure, bad spec...).
    pub error: Option<String>,
    /// Gate verdicts, in job-file order; empty when it did not run.
    pub gates: Vec<GateVerdict>,
    /// Ran to the end (not aborted, no error) and met every gate.
    pub passed: bool,
}

impl WorkloadReport {
    /// A workload that ran, with its verdicts.
    pub fn ran(name: &str, result: WorkloadResult, gates: Vec<GateVerdict>) -> WorkloadReport {
        let passed = result.aborted.is_none()
            && result.errors == 0
            && result.verify_failures == 0
            && gates.iter().all(|g| g.passed);
        WorkloadReport { name: name.into(), result: Some(result), error: None, gates, passed }
    }

    /// A workload that could not run.
    pub fn failed(name: &str, error: String) -> WorkloadReport {
        WorkloadReport { name: name.into(), result: None, error: Some(error), gates: vec![], passed: false }
    }
}

/// A benchmark report (the body; see the module doc for the format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_FORMAT`].
    pub format: String,
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// Suite name, or "run".
    pub name: String,
    /// The exact command line.
    pub command_line: Vec<String>,
    /// The suite's job file.
    pub job_file: Option<JobFile>,
    /// The baseline compared with.
    pub baseline: Option<BaselineRef>,
    /// Where it ran.
    pub system: SystemInfo,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// The stop-loss rule in force.
    pub stop_loss: Option<StopLoss>,
    /// Workloads in run order.
    pub workloads: Vec<WorkloadReport>,
    /// Every workload passed.
    pub passed: bool,
}

/// Why bytes are not a report this version can read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("not a strata bench report: {0}")]
    Json(#[from] serde_json::Error),
    /// The `format` field is missing or wrong.
    #[error("not a strata bench report (format is {found:?}, expected {REPORT_FORMAT:?})")]
    WrongFormat {
        /// What the file says.
        found: Option<String>,
    },
    /// Written by a newer strata.
    #[error("report version {found} is newer than this strata reads ({REPORT_VERSION}); upgrade strata")]
    NewerVersion {
        /// What the file says.
        found: u32,
    },
}

#[derive(Deserialize)]
struct Probe {
    format: Option<String>,
    version: Option<u32>,
}

impl Report {
    /// A report with the given name and command line, started now on this
    /// machine, with no workloads yet.
    pub fn new(name: &str, command_line: Vec<String>, system: SystemInfo, started_at: String) -> Report {
        Report {
            format: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            name: name.into(),
            command_line,
            job_file: None,
            baseline: None,
            system,
            finished_at: started_at.clone(),
            started_at,
            stop_loss: None,
            workloads: vec![],
            passed: true,
        }
    }

    /// Adds a workload and updates `passed`.
    pub fn push(&mut self, w: WorkloadReport) {
        self.passed &= w.passed;
        self.workloads.push(w);
    }

    /// The result of the named workload, if it ran.
    pub fn result(&self, workload: &str) -> Option<&WorkloadResult> {
        self.workloads.iter().find(|w| w.name == workload).and_then(|w| w.result.as_ref())
    }

    /// The body bytes: pretty JSON with a final newline. These are the
    /// bytes a signature covers.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain data structs to a Vec cannot fail (no maps with
        // non-string keys, no I/O).
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Parses a report body.
    ///
    /// # Errors
    ///
    /// [`ReportError`] when the bytes are not JSON, not a report, or a
    /// report of a newer version.
    pub fn from_json(bytes: &[u8]) -> Result<Report, ReportError> {
        let probe: Probe = serde_json::from_slice(bytes)?;
        if probe.format.as_deref() != Some(REPORT_FORMAT) {
            return Err(ReportError::WrongFormat { found: probe.format });
        }
        match probe.version {
            Some(v) if v > REPORT_VERSION => Err(ReportError::NewerVersion { found: v }),
            _ => Ok(serde_json::from_slice(bytes)?),
        }
    }
}

/// The pattern as the command line and job files spell it.
pub fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::Read => "read",
        Pattern::Write => "write",
        Pattern::RandRead => "randread",
        Pattern::RandWrite => "randwrite",
        Pattern::RandRw => "randrw",
    }
}

fn latency_row(out: &mut String, label: &str, l: &LatencySummary) {
    let _ = writeln!(
        out,
        "  {label:<6}{:>9.1}{:>9.1}{:>9.1}{:>9.1}{:>9.1}{:>9.1}{:>9.1}{:>10.1}",
        l.min_us, l.mean_us, l.p50_us, l.p95_us, l.p99_us, l.p999_us, l.p9999_us, l.max_us
    );
}

/// The human summary of a report: per workload, throughput, latency
/// percentiles and CPU, then gate verdicts and the overall outcome.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for w in &report.workloads {
        let Some(r) = &w.result else {
            let _ = writeln!(out, "{}: did not run: {}", w.name, w.error.as_deref().unwrap_or("unknown error"));
            continue;
        };
        let s = &r.spec;
        let mix =
            if s.rw == crate::spec::Pattern::RandRw { format!(" rwmixread={}", s.read_pct) } else { String::new() };
        let _ = writeln!(
            out,
            "{}: {}{mix} bs={} iodepth={} jobs={} target={}{}{}{}{}{}",
            w.name,
            pattern_name(s.rw),
            format_size(u64::from(s.bs)),
            s.iodepth,
            s.jobs,
            s.target,
            if s.verify { " verify" } else { "" },
            if s.digests { " digests" } else { "" },
            if s.poll_us > 0 { format!(" poll-us={}", s.poll_us) } else { String::new() },
            if s.disable_sqflow { " disable-sqflow" } else { "" },
            s.failover.map(|d| format!(" failover={d:?}")).unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "  {:.1} s, {} I/Os: {:.0} IOPS, {:.1} MB/s, client CPU {:.1}% (user {:.2} s, sys {:.2} s)",
            r.duration_s, r.ios, r.iops, r.mbps, r.cpu.percent, r.cpu.user_s, r.cpu.sys_s
        );
        let _ = writeln!(
            out,
            "  {:<6}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>10}",
            "us", "min", "mean", "p50", "p95", "p99", "p99.9", "p99.99", "max"
        );
        latency_row(&mut out, "all", &r.latency);
        if r.read_latency != LatencySummary::default() && r.write_latency != LatencySummary::default() {
            latency_row(&mut out, "read", &r.read_latency);
            latency_row(&mut out, "write", &r.write_latency);
        }
        if r.errors > 0 || r.verify_failures > 0 {
            let _ = writeln!(out, "  I/O errors: {}, verify mismatches: {}", r.errors, r.verify_failures);
        }
        for f in &r.failovers {
            let _ = writeln!(
                out,
                "  failover at {:.1} s: now on {} after {:.0} ms ({})",
                f.at_s, f.path, f.reconnect_ms, f.cause
            );
        }
        if let Some(why) = &r.aborted {
            let _ = writeln!(out, "  ABORTED: {why}");
        }
        for g in &w.gates {
            let base = g.baseline.map(|b| format!(" (baseline {b:.1})")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  gate {:<32} {:>12.1} {} {:.1}{base}  {}",
                g.gate,
                g.actual,
                g.op,
                g.threshold,
                if g.passed { "pass" } else { "FAIL" }
            );
        }
    }
    let failed: Vec<&str> = report.workloads.iter().filter(|w| !w.passed).map(|w| w.name.as_str()).collect();
    if failed.is_empty() {
        let n = report.workloads.len();
        let _ = writeln!(out, "PASSED ({n} workload{})", if n == 1 { "" } else { "s" });
    } else {
        let _ = writeln!(out, "FAILED: {}", failed.join(", "));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gate::tests::result;
    use crate::gate::{BaselineLookup, Gate};
    use crate::result::Sample;

    /// A two-workload report: one that passed its gate, one that failed.
    pub(crate) fn sample_report() -> Report {
        let mut r = Report::new(
            "nightly",
            vec!["strata".into(), "bench".into(), "suite".into(), "job.toml".into()],
            SystemInfo::collect(),
            "2026-11-29T20:00:00.000Z".into(),
        );
        r.job_file = Some(JobFile { path: "job.toml".into(), contents: "target = \"tcp://...\"\n".into() });
        let mut a = result(120_000.0, 180.0);
        a.spec.name = "randread".into();
        for v in [50_000u64, 80_000, 120_000, 180_000, 900_000] {
            a.histogram.record(v);
        }
        a.timeseries =
            (1..=5).map(|t| Sample { t_s: f64::from(t), iops: 1e5 + f64::from(t), ..Default::default() }).collect();
        let g: Gate = "p99_us <= 200".parse().unwrap();
        let v = g.resolve("randread", BaselineLookup::NoReport).unwrap().check(&a);
        r.push(WorkloadReport::ran("randread", a, vec![v]));
        let mut b = result(10.0, 5000.0);
        b.spec.name = "write".into();
        b.aborted = Some("stop-loss: p99_us was 5000.0".into());
        r.push(WorkloadReport::ran("write", b, vec![]));
        r.finished_at = "2026-11-29T20:00:30.000Z".into();
        r
    }

    #[test]
    fn report_json_round_trips() {
        let r = sample_report();
        let back = Report::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.result("randread").unwrap().histogram.count(), 6);
        assert!(!back.passed, "an aborted workload fails the report");
        assert!(back.workloads[0].passed && !back.workloads[1].passed);
    }

    #[test]
    fn a_gate_on_an_unmeasured_value_round_trips() {
        // serde_json writes NaN as null; the verdict must still read back.
        let mut r = sample_report();
        r.workloads[0].gates[0].actual = f64::NAN;
        let back = Report::from_json(&r.to_json()).unwrap();
        assert!(back.workloads[0].gates[0].actual.is_nan());
    }

    #[test]
    fn foreign_and_newer_files_are_refused() {
        assert!(matches!(Report::from_json(b"{\"format\":\"fio\"}"), Err(ReportError::WrongFormat { .. })));
        assert!(matches!(Report::from_json(b"[1,2]"), Err(ReportError::Json(_))));
        assert!(matches!(Report::from_json(b"{\"format\""), Err(ReportError::Json(_))));
        let mut v: serde_json::Value = serde_json::from_slice(&sample_report().to_json()).unwrap();
        v["version"] = 2.into();
        let e = Report::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(matches!(e, ReportError::NewerVersion { found: 2 }), "{e}");
    }

    #[test]
    fn text_summary_shows_numbers_gates_and_outcome() {
        let t = render_text(&sample_report());
        assert!(t.contains("120000 IOPS"), "{t}");
        assert!(t.contains("p99.99"), "{t}");
        assert!(t.contains("gate p99_us <= 200"), "{t}");
        assert!(t.contains("ABORTED: stop-loss"), "{t}");
        assert!(t.trim_end().ends_with("FAILED: write"), "{t}");
    }
}
