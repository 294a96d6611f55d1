//! Acceptance gates and stop-loss.
//!
//! A [`Gate`] is a one-line rule on a metric of a finished workload, written
//! the way an operator says it: `p99_us <= 200`, `iops >= 100000`, or,
//! relative to a baseline report, `p99_us <= baseline * 1.10` ("no more than
//! 10 % above the baseline"). The grammar is
//!
//! ```text
//! gate      = metric op rhs
//! op        = "<=" | "<" | ">=" | ">"
//! rhs       = number | "baseline" [ "*" number ]
//! metric    = "iops" | "mbps" | "cpu_percent" | [ "read_" | "write_" ] latency
//! latency   = "min_us" | "mean_us" | "p50_us" | "p95_us" | "p99_us"
//!           | "p999_us" | "p9999_us" | "max_us"
//! ```
//!
//! Evaluation is two steps so that nothing can go wrong halfway through a
//! suite: [`Gate::resolve`] turns a gate and the matching baseline result (if
//! any) into a [`ResolvedGate`] with an absolute threshold *before* anything
//! runs (a relative gate without a baseline is an error then, not after ten
//! minutes of load), and [`ResolvedGate::check`] compares a finished result
//! with it, giving a [`GateVerdict`] for the report.
//!
//! [`StopLossMonitor`] watches the per-interval samples of a running
//! workload, through the engine's stop-loss hook, and aborts the run when a
//! gate is breached by more than `margin_pct` for at least `for`. Only
//! metrics the engine reports per interval can trip it: `iops`, `mbps`,
//! `p50_us` and `p99_us` come from the interval's [`Sample`]; the other
//! all-I/O latency fields (`p999_us`, `max_us`...) come from the histogram
//! the engine passes to the hook, which holds every I/O measured so far, so
//! for those the breach is of the running value. Gates on `read_*`,
//! `write_*` and `cpu_percent` are checked at the end only.
//!
//! Comparisons involving NaN fail, so a metric that could not be measured
//! never passes a gate.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::histogram::Histogram;
use crate::result::{LatencySummary, Sample, WorkloadResult};

/// Which I/Os a latency metric covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every I/O.
    All,
    /// Reads only.
    Read,
    /// Writes only.
    Write,
}

/// A field of [`LatencySummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyField {
    /// `min_us`.
    Min,
    /// `mean_us`.
    Mean,
    /// `p50_us`.
    P50,
    /// `p95_us`.
    P95,
    /// `p99_us`.
    P99,
    /// `p999_us`.
    P999,
    /// `p9999_us`.
    P9999,
    /// `max_us`.
    Max,
}

const LATENCY_FIELDS: [(LatencyField, &str); 8] = [
    (LatencyField::Min, "min_us"),
    (LatencyField::Mean, "mean_us"),
    (LatencyField::P50, "p50_us"),
    (LatencyField::P95, "p95_us"),
    (LatencyField::P99, "p99_us"),
    (LatencyField::P999, "p999_us"),
    (LatencyField::P9999, "p9999_us"),
    (LatencyField::Max, "max_us"),
];

impl LatencyField {
    fn name(self) -> &'static str {
        LATENCY_FIELDS.iter().find(|(f, _)| *f == self).map_or("?", |(_, n)| n)
    }

    fn of(self, l: &LatencySummary) -> f64 {
        match self {
            LatencyField::Min => l.min_us,
            LatencyField::Mean => l.mean_us,
            LatencyField::P50 => l.p50_us,
            LatencyField::P95 => l.p95_us,
            LatencyField::P99 => l.p99_us,
            LatencyField::P999 => l.p999_us,
            LatencyField::P9999 => l.p9999_us,
            LatencyField::Max => l.max_us,
        }
    }
}

/// What a gate measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// I/Os per second over the measured run.
    Iops,
    /// MB/s (10^6 bytes) over the measured run.
    Mbps,
    /// Client CPU, percent of one core.
    CpuPercent,
    /// A latency percentile, microseconds.
    Latency(Scope, LatencyField),
}

impl Metric {
    /// Every metric name a gate accepts, for error messages and docs.
    pub fn all_names() -> Vec<String> {
        let mut v = vec!["iops".to_string(), "mbps".to_string(), "cpu_percent".to_string()];
        for prefix in ["", "read_", "write_"] {
            v.extend(LATENCY_FIELDS.iter().map(|(_, n)| format!("{prefix}{n}")));
        }
        v
    }

    /// Parses a metric name; `None` when unknown.
    pub fn parse(name: &str) -> Option<Metric> {
        match name {
            "iops" => return Some(Metric::Iops),
            "mbps" => return Some(Metric::Mbps),
            "cpu_percent" => return Some(Metric::CpuPercent),
            _ => {}
        }
        let (scope, field) = if let Some(f) = name.strip_prefix("read_") {
            (Scope::Read, f)
        } else if let Some(f) = name.strip_prefix("write_") {
            (Scope::Write, f)
        } else {
            (Scope::All, name)
        };
        LATENCY_FIELDS.iter().find(|(_, n)| *n == field).map(|(f, _)| Metric::Latency(scope, *f))
    }

    /// The value of this metric in a finished result.
    pub fn of(&self, r: &WorkloadResult) -> f64 {
        match self {
            Metric::Iops => r.iops,
            Metric::Mbps => r.mbps,
            Metric::CpuPercent => r.cpu.percent,
            Metric::Latency(Scope::All, f) => f.of(&r.latency),
            Metric::Latency(Scope::Read, f) => f.of(&r.read_latency),
            Metric::Latency(Scope::Write, f) => f.of(&r.write_latency),
        }
    }

    /// The value of this metric while the run goes on, if the engine
    /// reports it per interval (see the module doc).
    pub fn live(&self, s: &Sample, h: &Histogram) -> Option<f64> {
        match self {
            Metric::Iops => Some(s.iops),
            Metric::Mbps => Some(s.mbps),
            Metric::Latency(Scope::All, LatencyField::P50) => Some(s.p50_us),
            Metric::Latency(Scope::All, LatencyField::P99) => Some(s.p99_us),
            Metric::Latency(Scope::All, f) => Some(f.of(&LatencySummary::of(h))),
            Metric::CpuPercent | Metric::Latency(..) => None,
        }
    }

    /// Whether the metric only covers reads or writes.
    pub fn scope(&self) -> Scope {
        match self {
            Metric::Latency(s, _) => *s,
            _ => Scope::All,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Metric::Iops => f.write_str("iops"),
            Metric::Mbps => f.write_str("mbps"),
            Metric::CpuPercent => f.write_str("cpu_percent"),
            Metric::Latency(Scope::All, l) => f.write_str(l.name()),
            Metric::Latency(Scope::Read, l) => write!(f, "read_{}", l.name()),
            Metric::Latency(Scope::Write, l) => write!(f, "write_{}", l.name()),
        }
    }
}

/// Comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<=`
    Le,
    /// `<`
    Lt,
    /// `>=`
    Ge,
    /// `>`
    Gt,
}

impl Op {
    /// Whether `actual op threshold` holds (false when either is NaN).
    pub fn holds(self, actual: f64, threshold: f64) -> bool {
        match self {
            Op::Le => actual <= threshold,
            Op::Lt => actual < threshold,
            Op::Ge => actual >= threshold,
            Op::Gt => actual > threshold,
        }
    }

    /// True for `<=` and `<`: the gate is an upper limit.
    pub fn is_upper_limit(self) -> bool {
        matches!(self, Op::Le | Op::Lt)
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Le => "<=",
            Op::Lt => "<",
            Op::Ge => ">=",
            Op::Gt => ">",
        }
    }
}

/// The right-hand side of a gate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// A fixed number.
    Absolute(f64),
    /// The same metric in the baseline report, times `factor`.
    Baseline {
        /// Multiplier (1.10 = 10 % above the baseline).
        factor: f64,
    },
}

/// Why a gate expression did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateParseError {
    /// No comparison operator.
    #[error("gate {gate:?}: no comparison; write METRIC <= VALUE, METRIC >= VALUE (or <, >)")]
    NoOperator {
        /// The gate as written.
        gate: String,
    },
    /// `==`, `!=` or `=`.
    #[error("gate {gate:?}: only <=, <, >= and > compare (a measured value never equals a limit exactly)")]
    UnsupportedOperator {
        /// The gate as written.
        gate: String,
    },
    /// Left side is not a metric.
    #[error("gate {gate:?}: unknown metric {metric:?}; known metrics: {known}")]
    UnknownMetric {
        /// The gate as written.
        gate: String,
        /// The left-hand side.
        metric: String,
        /// Comma-separated list of valid names.
        known: String,
    },
    /// Right side is neither a number nor `baseline [* factor]`.
    #[error("gate {gate:?}: {rhs:?} is not a non-negative number, \"baseline\" or \"baseline * FACTOR\"")]
    BadValue {
        /// The gate as written.
        gate: String,
        /// The right-hand side.
        rhs: String,
    },
}

/// One gate: `metric op threshold`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// What is measured.
    pub metric: Metric,
    /// How it is compared.
    pub op: Op,
    /// What it is compared with.
    pub threshold: Threshold,
}

fn parse_number(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() || s.starts_with('_') || s.ends_with('_') {
        return None;
    }
    let v: f64 = s.replace('_', "").parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

impl FromStr for Gate {
    type Err = GateParseError;

    fn from_str(text: &str) -> Result<Gate, GateParseError> {
        let gate = text.to_string();
        if ["==", "!=", "="].iter().any(|o| text.contains(o) && !text.contains("<=") && !text.contains(">=")) {
            return Err(GateParseError::UnsupportedOperator { gate });
        }
        let (pos, op, len) = [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
            .iter()
            .find_map(|(tok, op)| text.find(tok).map(|p| (p, *op, tok.len())))
            .ok_or_else(|| GateParseError::NoOperator { gate: gate.clone() })?;
        let lhs = text[..pos].trim();
        let rhs = text[pos + len..].trim();
        let metric = Metric::parse(lhs).ok_or_else(|| GateParseError::UnknownMetric {
            gate: gate.clone(),
            metric: lhs.to_string(),
            known: Metric::all_names().join(", "),
        })?;
        let bad = || GateParseError::BadValue { gate: gate.clone(), rhs: rhs.to_string() };
        let threshold = if let Some(rest) = rhs.strip_prefix("baseline") {
            let rest = rest.trim();
            let factor = if rest.is_empty() {
                1.0
            } else {
                parse_number(rest.strip_prefix('*').ok_or_else(bad)?).filter(|f| *f > 0.0).ok_or_else(bad)?
            };
            Threshold::Baseline { factor }
        } else {
            Threshold::Absolute(parse_number(rhs).ok_or_else(bad)?)
        };
        Ok(Gate { metric, op, threshold })
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.metric, self.op.as_str())?;
        match self.threshold {
            Threshold::Absolute(v) => write!(f, "{v}"),
            Threshold::Baseline { factor: 1.0 } => f.write_str("baseline"),
            Threshold::Baseline { factor } => write!(f, "baseline * {factor}"),
        }
    }
}

impl Serialize for Gate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Gate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Gate, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a gate could not be given a threshold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BaselineError {
    /// A relative gate, and no baseline report was given.
    #[error(
        "gate \"{gate}\" on workload {workload:?} compares with a baseline, but no baseline report was given (--baseline REPORT.json)"
    )]
    NoBaseline {
        /// The workload.
        workload: String,
        /// The gate.
        gate: String,
    },
    /// The baseline report has no result for this workload.
    #[error("gate \"{gate}\": the baseline report has no result for workload {workload:?}")]
    MissingWorkload {
        /// The workload.
        workload: String,
        /// The gate.
        gate: String,
    },
    /// The baseline value is not a finite number.
    #[error("gate \"{gate}\" on workload {workload:?}: the baseline's {metric} is {value}, which cannot be a limit")]
    BadBaselineValue {
        /// The workload.
        workload: String,
        /// The gate.
        gate: String,
        /// The metric.
        metric: String,
        /// The baseline's value.
        value: f64,
    },
}

/// A gate with its threshold worked out.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGate {
    /// The gate as written.
    pub gate: Gate,
    /// The absolute threshold.
    pub threshold: f64,
    /// The baseline's value of the metric, for relative gates.
    pub baseline: Option<f64>,
}

/// What the baseline report holds for a workload.
#[derive(Debug, Clone, Copy)]
pub enum BaselineLookup<'a> {
    /// No baseline report was given.
    NoReport,
    /// The baseline report has no result for the workload.
    Missing,
    /// The baseline's result.
    Found(&'a WorkloadResult),
}

impl Gate {
    /// Works out the absolute threshold, from the baseline's result for the
    /// same workload when the gate is relative.
    ///
    /// # Errors
    ///
    /// [`BaselineError`] when the gate is relative and the baseline is
    /// missing, lacks the workload, or holds a non-finite value. Absolute
    /// gates never fail.
    pub fn resolve(&self, workload: &str, baseline: BaselineLookup<'_>) -> Result<ResolvedGate, BaselineError> {
        match self.threshold {
            Threshold::Absolute(v) => Ok(ResolvedGate { gate: self.clone(), threshold: v, baseline: None }),
            Threshold::Baseline { factor } => {
                let b = match baseline {
                    BaselineLookup::Found(b) => b,
                    BaselineLookup::NoReport => {
                        return Err(BaselineError::NoBaseline { workload: workload.into(), gate: self.to_string() });
                    }
                    BaselineLookup::Missing => {
                        return Err(BaselineError::MissingWorkload {
                            workload: workload.into(),
                            gate: self.to_string(),
                        });
                    }
                };
                let value = self.metric.of(b);
                if !value.is_finite() {
                    return Err(BaselineError::BadBaselineValue {
                        workload: workload.into(),
                        gate: self.to_string(),
                        metric: self.metric.to_string(),
                        value,
                    });
                }
                Ok(ResolvedGate { gate: self.clone(), threshold: value * factor, baseline: Some(value) })
            }
        }
    }
}

/// The outcome of one gate on one workload, as stored in reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateVerdict {
    /// The gate as written.
    pub gate: String,
    /// The metric.
    pub metric: String,
    /// The operator.
    pub op: String,
    /// The absolute threshold compared with.
    #[serde(deserialize_with = "nan_if_null")]
    pub threshold: f64,
    /// The baseline's value, for relative gates.
    pub baseline: Option<f64>,
    /// The measured value (NaN when it could not be measured; JSON null).
    #[serde(deserialize_with = "nan_if_null")]
    pub actual: f64,
    /// Whether the gate held.
    pub passed: bool,
}

/// serde_json writes non-finite floats as `null`; read them back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl ResolvedGate {
    /// Compares a finished result with the gate.
    pub fn check(&self, r: &WorkloadResult) -> GateVerdict {
        let actual = self.gate.metric.of(r);
        GateVerdict {
            gate: self.gate.to_string(),
            metric: self.gate.metric.to_string(),
            op: self.gate.op.as_str().to_string(),
            threshold: self.threshold,
            baseline: self.baseline,
            actual,
            passed: self.gate.op.holds(actual, self.threshold),
        }
    }

    /// The value past which stop-loss counts a breach: the threshold moved
    /// `margin_pct` percent in the failing direction.
    fn stop_loss_limit(&self, margin_pct: f64) -> f64 {
        if self.gate.op.is_upper_limit() {
            self.threshold * (1.0 + margin_pct / 100.0)
        } else {
            (self.threshold * (1.0 - margin_pct / 100.0)).max(0.0)
        }
    }
}

/// When to abort a running workload: a gate breached by more than
/// `margin_pct` percent, continuously for at least `sustain`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopLoss {
    /// How far past the gate's threshold a value must be to count, in
    /// percent of the threshold (50 = p99 over 1.5x its limit, IOPS under
    /// half its floor).
    pub margin_pct: f64,
    /// How long the breach must last.
    #[serde(rename = "for", with = "duration_str")]
    pub sustain: Duration,
}

mod duration_str {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::units::format_duration(*d))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        crate::units::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// Watches per-interval samples and says when to abort (the engine's
/// stop-loss hook).
///
/// A breach starts at the beginning of the first interval whose value is
/// past the limit (the previous sample's `t_s`, or 0) and lasts while every
/// following interval is past it too; one interval inside the limit resets
/// it. The monitor fires once the breach has covered `sustain`.
#[derive(Debug, Clone)]
pub struct StopLossMonitor {
    rule: StopLoss,
    gates: Vec<(ResolvedGate, Option<f64>)>,
    prev_t_s: f64,
}

impl StopLossMonitor {
    /// A monitor for `gates` under `rule`.
    pub fn new(rule: StopLoss, gates: &[ResolvedGate]) -> StopLossMonitor {
        StopLossMonitor { rule, gates: gates.iter().map(|g| (g.clone(), None)).collect(), prev_t_s: 0.0 }
    }

    /// Feeds one interval; returns the reason to abort, if any.
    pub fn observe(&mut self, s: &Sample, h: &Histogram) -> Option<String> {
        let interval_start = self.prev_t_s;
        self.prev_t_s = s.t_s;
        let mut reason = None;
        for (g, since) in &mut self.gates {
            let Some(value) = g.gate.metric.live(s, h) else { continue };
            let limit = g.stop_loss_limit(self.rule.margin_pct);
            // NaN counts as a breach: nothing measurable is not a pass.
            let breached = !g.gate.op.holds(value, limit);
            if !breached {
                *since = None;
                continue;
            }
            let start = *since.get_or_insert(interval_start);
            let lasted = s.t_s - start;
            if reason.is_none() && lasted + 1e-9 >= self.rule.sustain.as_secs_f64() {
                reason = Some(format!(
                    "{} was {value:.1} for {lasted:.1} s, past {limit:.1} (gate \"{}\" with a {}% margin)",
                    g.gate.metric, g.gate, self.rule.margin_pct
                ));
            }
        }
        reason
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::result::CpuUsage;
    use crate::spec::WorkloadSpec;

    /// A finished result with the given headline numbers.
    pub(crate) fn result(iops: f64, p99_us: f64) -> WorkloadResult {
        let mut histogram = Histogram::new();
        histogram.record((p99_us * 1000.0) as u64);
        WorkloadResult {
            spec: WorkloadSpec::default(),
            duration_s: 10.0,
            ios: (iops * 10.0) as u64,
            bytes: (iops * 10.0) as u64 * 4096,
            iops,
            mbps: iops * 4096.0 / 1e6,
            latency: LatencySummary { p50_us: p99_us / 2.0, p99_us, max_us: p99_us * 2.0, ..Default::default() },
            read_latency: LatencySummary { p99_us, ..Default::default() },
            write_latency: LatencySummary::default(),
            histogram,
            timeseries: vec![],
            cpu: CpuUsage { user_s: 1.0, sys_s: 1.0, percent: 20.0 },
            errors: 0,
            verify_failures: 0,
            aborted: None,
            failovers: vec![],
        }
    }

    fn gate(s: &str) -> Gate {
        s.parse().unwrap()
    }

    #[test]
    fn gates_parse_every_form() {
        assert_eq!(
            gate("p99_us <= 200"),
            Gate {
                metric: Metric::Latency(Scope::All, LatencyField::P99),
                op: Op::Le,
                threshold: Threshold::Absolute(200.0)
            }
        );
        assert_eq!(gate("iops>=1e12").threshold, Threshold::Absolute(1e12));
        assert_eq!(gate("iops >= 100_000").threshold, Threshold::Absolute(100_000.0));
        assert_eq!(gate("mbps > baseline").threshold, Threshold::Baseline { factor: 1.0 });
        assert_eq!(gate("p99_us <= baseline * 1.10").threshold, Threshold::Baseline { factor: 1.10 });
        assert_eq!(gate("write_p9999_us < 5").metric, Metric::Latency(Scope::Write, LatencyField::P9999));
        for name in Metric::all_names() {
            let g = gate(&format!("{name} < 1"));
            assert_eq!(g.metric.to_string(), name);
            assert_eq!(gate(&g.to_string()), g, "display round trip of {name}");
        }
    }

    #[test]
    fn bad_gates_are_rejected_with_the_reason() {
        let err = |s: &str| s.parse::<Gate>().unwrap_err();
        assert!(matches!(err("p99_us 200"), GateParseError::NoOperator { .. }));
        assert!(matches!(err("p99_us == 200"), GateParseError::UnsupportedOperator { .. }));
        assert!(matches!(err("p98_us <= 200"), GateParseError::UnknownMetric { metric, .. } if metric == "p98_us"));
        assert!(matches!(err("iops >= lots"), GateParseError::BadValue { .. }));
        assert!(matches!(err("iops >= -5"), GateParseError::BadValue { .. }));
        assert!(matches!(err("iops >= baseline * 0"), GateParseError::BadValue { .. }));
        assert!(matches!(err("iops >= baseline + 5"), GateParseError::BadValue { .. }));
        assert!(matches!(err("iops >= NaN"), GateParseError::BadValue { .. }));
        assert!(err("p98_us <= 200").to_string().contains("p999_us"), "lists the known metrics");
    }

    #[test]
    fn a_met_gate_passes_and_a_breached_one_fails() {
        let r = result(150_000.0, 180.0);
        let check = |s: &str| gate(s).resolve("w", BaselineLookup::NoReport).unwrap().check(&r);
        let v = check("p99_us <= 200");
        assert!(v.passed);
        assert_eq!((v.actual, v.threshold, v.baseline), (180.0, 200.0, None));
        assert!(!check("p99_us <= 170").passed);
        assert!(check("iops >= 100000").passed);
        assert!(!check("iops >= 1e12").passed);
        assert!(!check("p99_us < 180").passed, "strict comparison at equality fails");
        assert!(check("p99_us <= 180").passed);
        assert!(check("cpu_percent < 25").passed);
    }

    #[test]
    fn relative_gates_compare_with_the_baseline_both_ways() {
        let base = result(100_000.0, 200.0);
        let resolve = |s: &str| gate(s).resolve("w", BaselineLookup::Found(&base)).unwrap();
        // Latency may grow by 10 %: 215 passes, 230 fails.
        let g = resolve("p99_us <= baseline * 1.10");
        assert!((g.threshold - 220.0).abs() < 1e-9);
        assert_eq!(g.baseline, Some(200.0));
        assert!(g.check(&result(100_000.0, 215.0)).passed);
        assert!(!g.check(&result(100_000.0, 230.0)).passed);
        // IOPS may drop by 10 %: 95k passes, 85k fails; more is fine.
        let g = resolve("iops >= baseline * 0.9");
        assert!(g.check(&result(95_000.0, 200.0)).passed);
        assert!(g.check(&result(200_000.0, 200.0)).passed);
        assert!(!g.check(&result(85_000.0, 200.0)).passed);
    }

    #[test]
    fn a_relative_gate_without_a_baseline_is_a_clear_error() {
        let g = gate("p99_us <= baseline * 1.1");
        let e = g.resolve("randread", BaselineLookup::NoReport).unwrap_err();
        assert!(matches!(&e, BaselineError::NoBaseline { workload, .. } if workload == "randread"));
        assert!(e.to_string().contains("--baseline"));
        let e = g.resolve("randread", BaselineLookup::Missing).unwrap_err();
        assert!(matches!(e, BaselineError::MissingWorkload { .. }));
        let mut nan = result(1.0, 1.0);
        nan.latency.p99_us = f64::NAN;
        assert!(matches!(
            g.resolve("randread", BaselineLookup::Found(&nan)),
            Err(BaselineError::BadBaselineValue { .. })
        ));
        // Absolute gates need no baseline.
        assert!(gate("p99_us <= 1").resolve("randread", BaselineLookup::NoReport).is_ok());
    }

    #[test]
    fn unmeasured_values_never_pass() {
        let mut r = result(1.0, 1.0);
        r.iops = f64::NAN;
        assert!(!gate("iops >= 0").resolve("w", BaselineLookup::NoReport).unwrap().check(&r).passed);
    }

    fn sample(t_s: f64, iops: f64, p99_us: f64) -> Sample {
        Sample { t_s, iops, mbps: iops * 4096.0 / 1e6, p99_us, p50_us: p99_us / 2.0 }
    }

    fn monitor(g: &str, margin_pct: f64, secs: u64) -> StopLossMonitor {
        let rule = StopLoss { margin_pct, sustain: Duration::from_secs(secs) };
        StopLossMonitor::new(rule, &[gate(g).resolve("w", BaselineLookup::NoReport).unwrap()])
    }

    /// Feeds one-second samples of p99; returns the index of the sample that
    /// fired, if any.
    fn feed(m: &mut StopLossMonitor, p99s: &[f64]) -> Option<usize> {
        let h = Histogram::new();
        p99s.iter().enumerate().find_map(|(i, &p)| m.observe(&sample(i as f64 + 1.0, 1000.0, p), &h).map(|_| i))
    }

    #[test]
    fn stop_loss_fires_only_after_the_breach_lasts_long_enough() {
        // Limit 200, margin 50 %: breach means p99 > 300; it must last 3 s.
        let mut m = monitor("p99_us <= 200", 50.0, 3);
        assert_eq!(feed(&mut m, &[310.0, 320.0]), None, "2 s of breach is not enough");
        let mut m = monitor("p99_us <= 200", 50.0, 3);
        assert_eq!(feed(&mut m, &[100.0, 310.0, 320.0, 330.0, 340.0]), Some(3), "fires at the end of the third second");
    }

    #[test]
    fn stop_loss_ignores_breaches_within_the_margin() {
        // 290 is past the gate (200) but within the 50 % margin.
        let mut m = monitor("p99_us <= 200", 50.0, 3);
        assert_eq!(feed(&mut m, &[290.0; 10]), None);
        // With no margin the same values fire.
        let mut m = monitor("p99_us <= 200", 0.0, 3);
        assert_eq!(feed(&mut m, &[290.0; 10]), Some(2));
    }

    #[test]
    fn stop_loss_resets_when_the_metric_recovers() {
        let mut m = monitor("p99_us <= 200", 50.0, 3);
        assert_eq!(feed(&mut m, &[400.0, 400.0, 100.0, 400.0, 400.0, 100.0, 400.0]), None);
    }

    #[test]
    fn stop_loss_on_a_floor_fires_when_the_value_drops_below_the_margin() {
        // iops >= 100k with 50 %: breach below 50k, for 2 s.
        let mut m = monitor("iops >= 100000", 50.0, 2);
        let h = Histogram::new();
        assert_eq!(m.observe(&sample(1.0, 60_000.0, 1.0), &h), None, "within the margin");
        assert_eq!(m.observe(&sample(2.0, 40_000.0, 1.0), &h), None, "1 s of breach");
        let reason = m.observe(&sample(3.0, 0.0, 1.0), &h).expect("a stall for 2 s fires");
        assert!(reason.starts_with("iops was 0.0") && reason.contains("margin"), "{reason}");
    }

    #[test]
    fn stop_loss_uses_sample_times_not_sample_counts() {
        // Half-second intervals: 3 s of breach takes six samples.
        let mut m = monitor("p99_us <= 200", 50.0, 3);
        let h = Histogram::new();
        let fired: Vec<bool> =
            (1..=8).map(|i| m.observe(&sample(f64::from(i) * 0.5, 1.0, 500.0), &h).is_some()).collect();
        assert_eq!(fired, [false, false, false, false, false, true, true, true]);
    }

    #[test]
    fn stop_loss_reads_other_percentiles_from_the_histogram() {
        let mut m = monitor("max_us <= 100", 0.0, 0);
        let mut h = Histogram::new();
        h.record(50_000);
        assert_eq!(m.observe(&sample(1.0, 1.0, 1.0), &h), None);
        h.record(500_000);
        assert!(m.observe(&sample(2.0, 1.0, 1.0), &h).is_some());
        // Metrics without a per-interval value never trip it.
        let mut m = monitor("read_p99_us <= 1", 0.0, 0);
        assert_eq!(m.observe(&sample(1.0, 1.0, 1e9), &h), None);
    }
}
