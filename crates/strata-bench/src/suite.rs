//! Suites: a TOML job file with a target, defaults, several workloads and
//! their gates, and the loop that runs them one after another.
//!
//! # Job file
//!
//! ```toml
//! name = "nightly"                                  # optional: file stem
//! target = "tcp://127.0.0.1:4420/nqn.2026-11.io.strata:default"
//! gates = ["p99_us <= baseline * 1.10"]             # every workload
//! stop_loss = { margin_pct = 50, for = "3s" }       # optional
//!
//! [defaults]                                        # any workload key
//! bs = "4k"
//! runtime = "10s"
//!
//! [[workload]]
//! name = "randread-4k"
//! rw = "randread"
//! iodepth = 32
//! gates = ["p99_us <= 200", "iops >= 100000"]       # added to the above
//! ```
//!
//! Workload keys (also valid in `[defaults]`, except `name` and `gates`)
//! are the command-line options' names: `target`, `nsid`, `rw`,
//! `rwmixread`, `bs`, `iodepth`, `jobs`, `runtime`, `size`, `ramp`, `rate`,
//! `verify`, `prefill`, `digests`, `span`, `seed`, `poll_us`, `disable_sqflow`, `failover` (the
//! last two are `--poll-us` and `--disable-sqflow`; a TOML key cannot
//! hold a dash comfortably). A value missing from both the
//! workload and `[defaults]` takes [`WorkloadSpec::default`]'s. Sizes are
//! integers (bytes) or strings with a binary suffix (`"4k"`), durations
//! are strings with a unit (`"10s"`): see [`crate::units`].
//!
//! Parsing is strict: unknown keys, unknown metrics, bad durations and
//! sizes are errors that point at the line (serde errors from `toml` carry
//! the position), and the checks that span fields (unique names, at least
//! one workload, a target, sane numbers) run before anything is sent to a
//! target. Relative gates are resolved against the baseline up front too
//! ([`Suite::resolve_gates`]), so a missing baseline fails in milliseconds,
//! not after the first workload.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::gate::{BaselineError, BaselineLookup, Gate, ResolvedGate, Scope, StopLoss, StopLossMonitor};
use crate::report::{Report, WorkloadReport};
use crate::result::WorkloadResult;
use crate::spec::{MAX_POLL_US, Pattern, TargetSpec, WorkloadSpec};
use crate::units::parse_duration;

/// Why a job file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuiteError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, or a value of the wrong type or form
    /// (the message shows the line).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with the position.
        message: String,
    },
    /// The file parsed but does not make sense.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the workload and key.
        message: String,
    },
    /// A relative gate cannot be resolved.
    #[error(transparent)]
    Baseline(#[from] BaselineError),
}

/// A size: an integer (bytes) or a string with a suffix.
#[derive(Debug, Clone, Copy)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size: bytes as an integer, or a string like \"4k\", \"1M\", \"2G\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v).map(Size).map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                strata_block::parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration string with a unit.
#[derive(Debug, Clone, Copy)]
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration string with a unit, like \"10s\", \"500ms\" or \"2m\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A target URI.
#[derive(Debug, Clone)]
struct Target(TargetSpec);

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        String::deserialize(d)?.parse().map(Target).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: Option<String>,
    target: Option<Target>,
    nsid: Option<u32>,
    rw: Option<Pattern>,
    rwmixread: Option<u8>,
    bs: Option<Size>,
    iodepth: Option<u32>,
    jobs: Option<u32>,
    runtime: Option<Dur>,
    size: Option<Size>,
    ramp: Option<Dur>,
    rate: Option<u64>,
    verify: Option<bool>,
    prefill: Option<bool>,
    digests: Option<bool>,
    span: Option<Size>,
    seed: Option<u64>,
    poll_us: Option<u64>,
    disable_sqflow: Option<bool>,
    failover: Option<Dur>,
    gates: Option<Vec<Gate>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    name: Option<String>,
    target: Option<Target>,
    #[serde(default)]
    gates: Vec<Gate>,
    stop_loss: Option<StopLoss>,
    #[serde(default)]
    defaults: RawWorkload,
    #[serde(default)]
    workload: Vec<RawWorkload>,
}

/// One workload of a suite.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteWorkload {
    /// What to run.
    pub spec: WorkloadSpec,
    /// The suite-wide gates followed by the workload's own.
    pub gates: Vec<Gate>,
}

/// A parsed, validated job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// Suite name.
    pub name: String,
    /// The job file's exact text (reports embed it).
    pub source: String,
    /// Stop-loss rule, if any.
    pub stop_loss: Option<StopLoss>,
    /// Workloads in file order.
    pub workloads: Vec<SuiteWorkload>,
}

/// Upper bounds that catch typos (an iodepth of 320000) before they turn
/// into a confusing failure at the target.
const MAX_IODEPTH: u32 = 65_535;
const MAX_JOBS: u32 = 1024;
const MAX_BS: u64 = 64 << 20;

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl Suite {
    /// Parses and validates a job file's text. `path` is used in messages
    /// and for the default suite name; `target_override` (from `--target`)
    /// replaces every target the file names.
    ///
    /// # Errors
    ///
    /// [`SuiteError::Parse`] for TOML syntax, unknown keys and malformed
    /// values; [`SuiteError::Invalid`] for everything checked across
    /// fields.
    pub fn parse(text: &str, path: &str, target_override: Option<&TargetSpec>) -> Result<Suite, SuiteError> {
        let raw: RawSuite =
            toml::from_str(text).map_err(|e| SuiteError::Parse { path: path.into(), message: e.to_string() })?;
        let invalid = |message: String| SuiteError::Invalid { path: path.into(), message };
        if raw.defaults.name.is_some() {
            return Err(invalid("[defaults] cannot set `name`: every [[workload]] needs its own".into()));
        }
        if raw.defaults.gates.is_some() {
            return Err(invalid("[defaults] cannot hold `gates`: put suite-wide gates at the top level".into()));
        }
        if raw.workload.is_empty() {
            return Err(invalid("no workloads: add at least one [[workload]] table".into()));
        }
        if let Some(sl) = &raw.stop_loss
            && !(sl.margin_pct.is_finite() && sl.margin_pct >= 0.0)
        {
            return Err(invalid(format!("stop_loss.margin_pct must be a number >= 0, not {}", sl.margin_pct)));
        }
        let name = match raw.name {
            Some(n) => n,
            None => Path::new(path).file_stem().map_or("suite".into(), |s| s.to_string_lossy().into_owned()),
        };
        let d = &raw.defaults;
        let mut workloads: Vec<SuiteWorkload> = Vec::new();
        for (i, w) in raw.workload.iter().enumerate() {
            let wname = w.name.clone().ok_or_else(|| invalid(format!("workload #{} has no `name`", i + 1)))?;
            let bad = |msg: String| invalid(format!("workload {wname:?}: {msg}"));
            if !valid_name(&wname) {
                return Err(bad("names are 1-64 letters, digits, '-', '_' or '.'".into()));
            }
            if workloads.iter().any(|o| o.spec.name == wname) {
                return Err(bad("a workload of that name already exists; names must be unique".into()));
            }
            let base = WorkloadSpec::default();
            let mut target = match (&w.target, &d.target, &raw.target, target_override) {
                (_, _, _, Some(t)) => t.clone(),
                (Some(t), ..) | (None, Some(t), ..) | (None, None, Some(t), _) => t.0.clone(),
                (None, None, None, None) => {
                    return Err(bad(
                        "no target: set target = \"tcp://ADDR:PORT/NQN\" in the job file or pass --target".into(),
                    ));
                }
            };
            if let Some(n) = w.nsid.or(d.nsid) {
                target.nsid = n;
            }
            let spec = WorkloadSpec {
                name: wname.clone(),
                target,
                rw: w.rw.or(d.rw).unwrap_or(base.rw),
                read_pct: w.rwmixread.or(d.rwmixread).unwrap_or(base.read_pct),
                bs: match w.bs.or(d.bs) {
                    None => base.bs,
                    Some(Size(b)) if b == 0 || b % 512 != 0 || b > MAX_BS => {
                        return Err(bad(format!("bs = {b} must be a multiple of 512 between 512 and 64M")));
                    }
                    // In range: checked against MAX_BS just above.
                    Some(Size(b)) => u32::try_from(b).map_err(|_| bad(format!("bs = {b} is too large")))?,
                },
                iodepth: w.iodepth.or(d.iodepth).unwrap_or(base.iodepth),
                jobs: w.jobs.or(d.jobs).unwrap_or(base.jobs),
                runtime: w.runtime.or(d.runtime).map(|x| x.0),
                size: w.size.or(d.size).map(|x| x.0),
                ramp: w.ramp.or(d.ramp).map_or(base.ramp, |x| x.0),
                rate_iops: w.rate.or(d.rate),
                verify: w.verify.or(d.verify).unwrap_or(base.verify),
                prefill: w.prefill.or(d.prefill).unwrap_or(base.prefill),
                span: w.span.or(d.span).map(|x| x.0),
                digests: w.digests.or(d.digests).unwrap_or(base.digests),
                seed: w.seed.or(d.seed).unwrap_or(base.seed),
                poll_us: w.poll_us.or(d.poll_us).unwrap_or(base.poll_us),
                disable_sqflow: w.disable_sqflow.or(d.disable_sqflow).unwrap_or(base.disable_sqflow),
                failover: w.failover.or(d.failover).map(|x| x.0),
            };
            let spec = WorkloadSpec {
                runtime: if spec.runtime.is_none() && spec.size.is_none() { base.runtime } else { spec.runtime },
                ..spec
            };
            check_spec(&spec).map_err(bad)?;
            let gates: Vec<Gate> = raw.gates.iter().chain(w.gates.iter().flatten()).cloned().collect();
            for g in &gates {
                let (reads, writes) = match spec.rw {
                    Pattern::Read | Pattern::RandRead => (true, false),
                    Pattern::Write | Pattern::RandWrite => (false, true),
                    Pattern::RandRw => (spec.read_pct > 0, spec.read_pct < 100),
                };
                match g.metric.scope() {
                    Scope::Read if !reads => return Err(bad(format!("gate \"{g}\" measures reads, but it does none"))),
                    Scope::Write if !writes => {
                        return Err(bad(format!("gate \"{g}\" measures writes, but it does none")));
                    }
                    _ => {}
                }
            }
            workloads.push(SuiteWorkload { spec, gates });
        }
        Ok(Suite { name, source: text.to_string(), stop_loss: raw.stop_loss, workloads })
    }

    /// Reads and parses a job file.
    ///
    /// # Errors
    ///
    /// As [`Suite::parse`], plus [`SuiteError::Io`].
    pub fn load(path: &Path, target_override: Option<&TargetSpec>) -> Result<Suite, SuiteError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Io { path: p.clone(), source })?;
        Suite::parse(&text, &p, target_override)
    }

    /// Works out every gate's threshold, per workload, against the
    /// baseline report.
    ///
    /// # Errors
    ///
    /// [`SuiteError::Baseline`] for the first relative gate that has no
    /// baseline value.
    pub fn resolve_gates(&self, baseline: Option<&Report>) -> Result<Vec<Vec<ResolvedGate>>, SuiteError> {
        self.workloads
            .iter()
            .map(|w| {
                let lookup = match baseline {
                    None => BaselineLookup::NoReport,
                    Some(b) => b.result(&w.spec.name).map_or(BaselineLookup::Missing, BaselineLookup::Found),
                };
                w.gates.iter().map(|g| g.resolve(&w.spec.name, lookup).map_err(SuiteError::from)).collect()
            })
            .collect()
    }
}

/// Checks the numbers of a spec (shared by job files and the command line).
///
/// # Errors
///
/// A message naming the offending key.
pub fn check_spec(s: &WorkloadSpec) -> Result<(), String> {
    if s.read_pct > 100 {
        return Err(format!("rwmixread = {} must be 0..=100", s.read_pct));
    }
    if s.bs == 0 || !s.bs.is_multiple_of(512) || u64::from(s.bs) > MAX_BS {
        return Err(format!("bs = {} must be a multiple of 512 between 512 and 64M", s.bs));
    }
    if !(1..=MAX_IODEPTH).contains(&s.iodepth) {
        return Err(format!("iodepth = {} must be 1..={MAX_IODEPTH}", s.iodepth));
    }
    if !(1..=MAX_JOBS).contains(&s.jobs) {
        return Err(format!("jobs = {} must be 1..={MAX_JOBS}", s.jobs));
    }
    if s.runtime.is_none() && s.size.is_none() {
        return Err("give runtime or size (or both: whichever comes first ends the run)".into());
    }
    if s.runtime == Some(Duration::ZERO) {
        return Err("runtime must be more than 0s".into());
    }
    if let Some(size) = s.size
        && (size == 0 || !size.is_multiple_of(u64::from(s.bs)))
    {
        return Err(format!("size = {size} must be a non-zero multiple of bs = {}", s.bs));
    }
    if s.rate_iops == Some(0) {
        return Err("rate must be more than 0 IOPS (leave it out for no limit)".into());
    }
    if let Some(span) = s.span
        && span < u64::from(s.bs)
    {
        return Err(format!("span = {span} is smaller than bs = {}", s.bs));
    }
    if s.poll_us > MAX_POLL_US {
        return Err(format!("poll_us = {} must be 0..={MAX_POLL_US} microseconds (0: no busy polling)", s.poll_us));
    }
    if s.failover == Some(Duration::ZERO) {
        return Err("failover must be more than 0s (leave it out to end the run at the first failure)".into());
    }
    Ok(())
}

/// Runs every workload of a suite in order, through `runner`, and returns
/// a report entry for each.
///
/// `runner` gets the spec and, when the suite has a stop-loss rule and the
/// workload gates, a [`StopLossMonitor`] to install as the engine's hook.
/// It returns the engine's result, or a message when the workload could
/// not run at all; a workload that fails does not stop the suite (the
/// report shows each one), but `runner` may refuse the remaining ones
/// (e.g. after Ctrl-C) by returning an error for them.
pub async fn run_suite<R>(suite: &Suite, gates: &[Vec<ResolvedGate>], mut runner: R) -> Vec<WorkloadReport>
where
    R: AsyncFnMut(&WorkloadSpec, Option<StopLossMonitor>) -> Result<WorkloadResult, String>,
{
    let mut out = Vec::with_capacity(suite.workloads.len());
    for (w, resolved) in suite.workloads.iter().zip(gates) {
        let monitor = suite.stop_loss.filter(|_| !resolved.is_empty()).map(|rule| StopLossMonitor::new(rule, resolved));
        let entry = match runner(&w.spec, monitor).await {
            Ok(result) => {
                let verdicts = resolved.iter().map(|g| g.check(&result)).collect();
                WorkloadReport::ran(&w.spec.name, result, verdicts)
            }
            Err(e) => WorkloadReport::failed(&w.spec.name, e),
        };
        out.push(entry);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::tests::result;
    use crate::result::Sample;

    const GOOD: &str = r#"
name = "nightly"
target = "tcp://127.0.0.1:4420/nqn.2026-11.io.strata:default"
gates = ["p99_us <= baseline * 1.10"]
stop_loss = { margin_pct = 50, for = "3s" }

[defaults]
bs = "4k"
runtime = "5s"
iodepth = 16

[[workload]]
name = "randread-4k"
rw = "randread"
jobs = 4
gates = ["iops >= 100000", "read_p99_us <= 200"]

[[workload]]
name = "seqwrite-128k"
rw = "write"
bs = "128k"
iodepth = 8
size = "1G"
runtime = "30s"
verify = true
span = 1073741824
"#;

    fn parse(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(text, "jobs/nightly.toml", None)
    }

    fn parse_err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_full_job_file_parses_with_defaults_applied() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.name, "nightly");
        assert_eq!(s.source, GOOD);
        assert_eq!(s.stop_loss, Some(StopLoss { margin_pct: 50.0, sustain: Duration::from_secs(3) }));
        let [a, b] = &s.workloads[..] else { panic!("two workloads") };
        assert_eq!((a.spec.rw, a.spec.bs, a.spec.iodepth, a.spec.jobs), (Pattern::RandRead, 4096, 16, 4));
        assert_eq!(a.spec.runtime, Some(Duration::from_secs(5)));
        assert_eq!(a.spec.target.to_string(), "tcp://127.0.0.1:4420/nqn.2026-11.io.strata:default");
        assert_eq!(a.gates.len(), 3, "suite-wide gate first, then the workload's");
        assert_eq!(a.gates[0].to_string(), "p99_us <= baseline * 1.1");
        assert_eq!((b.spec.rw, b.spec.bs, b.spec.iodepth), (Pattern::Write, 128 << 10, 8));
        assert_eq!((b.spec.size, b.spec.span, b.spec.verify), (Some(1 << 30), Some(1 << 30), true));
        assert_eq!(b.gates.len(), 1);
    }

    #[test]
    fn poll_us_and_disable_sqflow_come_from_defaults_and_workloads_override_them() {
        let text = GOOD
            .replace("iodepth = 16\n", "iodepth = 16\npoll_us = 100\ndisable_sqflow = true\n")
            .replace("span = 1073741824\n", "span = 1073741824\npoll_us = 0\ndisable_sqflow = false\n");
        let s = parse(&text).unwrap();
        let [a, b] = &s.workloads[..] else { panic!("two workloads") };
        assert_eq!((a.spec.poll_us, a.spec.disable_sqflow), (100, true), "from [defaults]");
        assert_eq!((b.spec.poll_us, b.spec.disable_sqflow), (0, false), "the workload's own values win");

        let text = GOOD.replace("jobs = 4\n", "jobs = 4\npoll_us = 250\ndisable_sqflow = true\n");
        let s = parse(&text).unwrap();
        let [a, b] = &s.workloads[..] else { panic!("two workloads") };
        assert_eq!((a.spec.poll_us, a.spec.disable_sqflow), (250, true));
        assert_eq!((b.spec.poll_us, b.spec.disable_sqflow), (0, false), "unset anywhere: off");

        let e = parse_err(&GOOD.replace("jobs = 4\n", "jobs = 4\npoll_us = 1000001\n"));
        assert!(e.contains("randread-4k") && e.contains("poll_us = 1000001"), "{e}");
        let e = parse_err(&GOOD.replace("jobs = 4\n", "jobs = 4\npoll_us = \"100us\"\n"));
        assert!(e.contains("poll_us") && e.contains("line"), "{e}");
        let e = parse_err(&GOOD.replace("jobs = 4\n", "jobs = 4\ndisable_sqflow = 1\n"));
        assert!(e.contains("disable_sqflow") && e.contains("line"), "{e}");
    }

    #[test]
    fn the_name_defaults_to_the_file_stem_and_target_can_be_overridden() {
        let text = "[[workload]]\nname = \"a\"\n";
        let t: TargetSpec = "tcp://[::1]:4421/nqn.x".parse().unwrap();
        let two = "tcp://[::1]:4421,[::1]:4422/nqn.x".parse::<TargetSpec>().unwrap_err();
        assert!(two.contains("one address, not 2"), "{two}");
        let s = Suite::parse(text, "dir/smoke.toml", Some(&t)).unwrap();
        assert_eq!(s.name, "smoke");
        assert_eq!(s.workloads[0].spec.target, t);
        assert_eq!(s.workloads[0].spec.runtime, WorkloadSpec::default().runtime);
        let e = Suite::parse(text, "smoke.toml", None).unwrap_err().to_string();
        assert!(e.contains("no target") && e.contains("--target"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_position() {
        let e = parse_err(&GOOD.replace("iodepth = 8", "io_depth = 8"));
        assert!(e.contains("unknown field `io_depth`") && e.contains("line"), "{e}");
        let e = parse_err(&GOOD.replace("name = \"nightly\"", "title = \"nightly\""));
        assert!(e.contains("unknown field `title`"), "{e}");
        let e = parse_err(&GOOD.replace("margin_pct = 50,", "margin = 50,"));
        assert!(e.contains("unknown field `margin`"), "{e}");
    }

    #[test]
    fn bad_metrics_and_gates_are_rejected() {
        let e = parse_err(&GOOD.replace("iops >= 100000", "iopz >= 100000"));
        assert!(e.contains("unknown metric \"iopz\""), "{e}");
        let e = parse_err(&GOOD.replace("iops >= 100000", "iops = 100000"));
        assert!(e.contains("only <=, <, >= and >"), "{e}");
        // A read gate on a write-only workload could never fail: refused.
        let e = parse_err(&GOOD.replace("verify = true", "verify = true\ngates = [\"read_p99_us <= 5\"]"));
        assert!(e.contains("seqwrite-128k") && e.contains("measures reads"), "{e}");
    }

    #[test]
    fn bad_durations_and_sizes_are_rejected() {
        let e = parse_err(&GOOD.replace("runtime = \"5s\"", "runtime = \"5\""));
        assert!(e.contains("has no unit"), "{e}");
        let e = parse_err(&GOOD.replace("runtime = \"5s\"", "runtime = 5"));
        assert!(e.contains("duration string"), "{e}");
        let e = parse_err(&GOOD.replace("for = \"3s\"", "for = \"3 weeks\""));
        assert!(e.contains("unknown unit"), "{e}");
        let e = parse_err(&GOOD.replace("bs = \"128k\"", "bs = \"128q\""));
        assert!(e.contains("unknown unit"), "{e}");
        let e = parse_err(&GOOD.replace("bs = \"128k\"", "bs = 1000"));
        assert!(e.contains("multiple of 512"), "{e}");
        let e = parse_err(&GOOD.replace("rw = \"write\"", "rw = \"sequential\""));
        assert!(e.contains("unknown variant `sequential`"), "{e}");
        let e = parse_err(&GOOD.replace("target = \"tcp://127.0.0.1:4420/", "target = \"127.0.0.1:4420/"));
        assert!(e.contains("expected tcp://ADDR:PORT"), "{e}");
    }

    #[test]
    fn cross_field_mistakes_are_rejected() {
        assert!(parse_err("target = \"tcp://1.2.3.4:1/n\"\n").contains("no workloads"));
        let e = parse_err(&GOOD.replace("name = \"seqwrite-128k\"", "name = \"randread-4k\""));
        assert!(e.contains("already exists"), "{e}");
        let e = parse_err(&GOOD.replace("name = \"seqwrite-128k\"", "name = \"a b\""));
        assert!(e.contains("names are"), "{e}");
        let e = parse_err(&GOOD.replace("name = \"seqwrite-128k\"\n", ""));
        assert!(e.contains("workload #2 has no `name`"), "{e}");
        let e = parse_err(&GOOD.replace("jobs = 4", "jobs = 0"));
        assert!(e.contains("jobs = 0"), "{e}");
        let e = parse_err(&GOOD.replace("runtime = \"30s\"", "runtime = \"0s\""));
        assert!(e.contains("more than 0s"), "{e}");
        let e = parse_err(&GOOD.replace("[defaults]", "[defaults]\nname = \"x\""));
        assert!(e.contains("[defaults] cannot set `name`"), "{e}");
        let e = parse_err(&GOOD.replace("margin_pct = 50", "margin_pct = -5"));
        assert!(e.contains("margin_pct"), "{e}");
        let e = parse_err("[[workload]\n");
        assert!(e.contains("nightly.toml"), "{e}");
    }

    #[test]
    fn relative_gates_need_a_baseline_with_the_workload() {
        let s = parse(GOOD).unwrap();
        let e = s.resolve_gates(None).unwrap_err();
        assert!(matches!(e, SuiteError::Baseline(BaselineError::NoBaseline { .. })), "{e}");
        let mut base = crate::report::tests::sample_report();
        let e = s.resolve_gates(Some(&base)).unwrap_err();
        assert!(matches!(e, SuiteError::Baseline(BaselineError::MissingWorkload { .. })), "{e}");
        for (w, r) in [("randread-4k", result(1e5, 100.0)), ("seqwrite-128k", result(1e3, 1000.0))] {
            base.push(WorkloadReport::ran(w, r, vec![]));
        }
        let g = s.resolve_gates(Some(&base)).unwrap();
        assert!((g[0][0].threshold - 110.0).abs() < 1e-9);
        assert!((g[1][0].threshold - 1100.0).abs() < 1e-9);
    }

    #[tokio::test]
    async fn run_suite_checks_gates_installs_stop_loss_and_keeps_going_after_a_failure() {
        let s = parse(&GOOD.replace("gates = [\"p99_us <= baseline * 1.10\"]\n", "")).unwrap();
        let gates = s.resolve_gates(None).unwrap();
        let mut seen = Vec::new();
        let out = run_suite(&s, &gates, async |spec: &WorkloadSpec, monitor: Option<StopLossMonitor>| {
            seen.push((spec.name.clone(), monitor.is_some()));
            if spec.name == "randread-4k" {
                // The engine would feed samples: IOPS collapse (1000 against
                // a floor of 100000) for 3 s.
                let mut m = monitor.expect("gated workload gets a monitor");
                let h = crate::Histogram::new();
                let mut aborted = None;
                for t in 1..=5 {
                    let s = Sample { t_s: f64::from(t), iops: 1e3, p99_us: 100.0, ..Default::default() };
                    if let Some(why) = m.observe(&s, &h) {
                        aborted = Some(why);
                        break;
                    }
                }
                let mut r = result(2e5, 150.0);
                r.aborted = aborted;
                Ok(r)
            } else {
                Err("connect refused".to_string())
            }
        })
        .await;
        assert_eq!(seen, [("randread-4k".to_string(), true), ("seqwrite-128k".to_string(), false)]);
        assert_eq!(out.len(), 2);
        assert!(out[0].result.as_ref().unwrap().aborted.as_deref().unwrap().starts_with("iops was 1000.0 for 3.0 s"));
        assert!(out[0].gates.iter().all(|g| g.passed), "gates held on the final numbers");
        assert!(!out[0].passed, "but the abort fails the workload");
        assert_eq!(out[1].error.as_deref(), Some("connect refused"));
        assert!(!out[1].passed);
    }

    #[tokio::test]
    async fn an_impossible_gate_fails_the_workload() {
        let text = "target = \"tcp://127.0.0.1:1/n\"\n[[workload]]\nname = \"w\"\ngates = [\"iops >= 1e12\"]\n";
        let s = parse(text).unwrap();
        let gates = s.resolve_gates(None).unwrap();
        let out = run_suite(&s, &gates, async |_: &WorkloadSpec, _| Ok(result(5e5, 100.0))).await;
        assert!(!out[0].passed && !out[0].gates[0].passed);
        assert_eq!(out[0].gates[0].actual, 5e5);
    }
}
