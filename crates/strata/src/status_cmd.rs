//! `strata status [--json] [--api URL]`: the health of a node (or of the
//! cluster it belongs to) on one screen, and what needs the operator.
//! Exit status: 0 healthy, 1 something needs attention, 2 the node could
//! not be asked.
//!
//! The verdict is computed here from what the API reports ([`assess`]:
//! pure, tested on recorded answers): failed drives, drives past the fill
//! thresholds, degraded or down volumes, nodes down, the pool's own
//! warnings, recent warning and error events, and target counters that
//! only move when something is wrong (panics caught).

use std::process::ExitCode;

use serde::Serialize;
use serde_json::Value;

use crate::events_watch::{FILL_THRESHOLDS, fill_level};

/// Arguments of `strata status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// API of the node (on a cluster, any node).
    #[arg(long, env = "STRATA_API", default_value = crate::DEFAULT_API)]
    pub api: String,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Something that needs the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `warning` or `error`.
    pub severity: &'static str,
    /// What is wrong.
    pub what: String,
    /// What to do about it.
    pub fix: String,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `healthy` or `needs attention`.
    pub verdict: &'static str,
    /// A line per fact: version, nodes, volumes, drives, hosts.
    pub summary: Vec<String>,
    /// What needs the operator, worst first.
    pub problems: Vec<Problem>,
}

fn problem(severity: &'static str, what: String, fix: &str) -> Problem {
    Problem { severity, what, fix: fix.to_string() }
}

fn pct(used: u64, cap: u64) -> u64 {
    if cap == 0 { 0 } else { (u128::from(used) * 100 / u128::from(cap)) as u64 }
}

fn drive_problems(name: &str, used: u64, cap: u64, failed: bool, out: &mut Vec<Problem>) {
    if failed {
        out.push(problem(
            "error",
            format!("drive {name} failed and is out of service"),
            "replace or check the drive, then restart the node (see docs/operations.md, drive errors)",
        ));
    }
    let level = fill_level(used, cap);
    if level > 0 {
        let sev = if level >= FILL_THRESHOLDS[2] { "error" } else { "warning" };
        out.push(problem(
            sev,
            format!("drive {name} is {}% full", pct(used, cap)),
            "add drives or nodes, delete or shrink volumes, or trim unused blocks (fstrim on the hosts)",
        ));
    }
}

/// The report for a single node's `/api/v1/status` or a cluster's
/// `/api/v1/pool`, with the node's recent events.
pub fn assess(status: Option<&Value>, pool: Option<&Value>, volumes: usize, events: &[Value]) -> Report {
    let mut summary = Vec::new();
    let mut problems = Vec::new();
    let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    if let Some(s) = status {
        let drives = s.get("drives").and_then(Value::as_array).cloned().unwrap_or_default();
        summary.push(format!(
            "strata {} (single node): {} volumes, {} drives, {} of {} bytes allocated ({}%), {} controllers connected",
            s.get("version").and_then(Value::as_str).unwrap_or("?"),
            volumes,
            drives.len(),
            u(s, "allocated_bytes"),
            u(s, "capacity_bytes"),
            pct(u(s, "allocated_bytes"), u(s, "capacity_bytes")),
            u(s, "controllers"),
        ));
        let extent = u(s, "extent_size");
        for d in &drives {
            let name = d.get("path").and_then(Value::as_str).unwrap_or("?");
            let failed = d.get("failed").and_then(Value::as_bool).unwrap_or(false);
            drive_problems(
                name,
                u(d, "extents_allocated") * extent,
                u(d, "extents_total") * extent,
                failed,
                &mut problems,
            );
        }
        if let Some(t) = s.get("target")
            && u(t, "panics") > 0
        {
            problems.push(problem(
                "error",
                format!("{} panics were caught in connections or commands", u(t, "panics")),
                "a bug: collect the log around them and report it; the node kept serving",
            ));
        }
    }
    if let Some(p) = pool {
        let nodes = p.get("nodes").and_then(Value::as_array).cloned().unwrap_or_default();
        let vols = p.get("volumes").and_then(Value::as_array).cloned().unwrap_or_default();
        let up = nodes.iter().filter(|n| n.get("state").and_then(Value::as_str) == Some("up")).count();
        let healthy = vols.iter().filter(|v| v.get("state").and_then(Value::as_str) == Some("healthy")).count();
        summary.push(format!(
            "cluster (asked {}): {up} of {} nodes up, {healthy} of {} volumes healthy",
            p.get("node").and_then(Value::as_str).unwrap_or("?"),
            nodes.len(),
            vols.len()
        ));
        for n in &nodes {
            let name = n.get("name").and_then(Value::as_str).unwrap_or("?");
            if n.get("state").and_then(Value::as_str) != Some("up") {
                problems.push(problem(
                    "error",
                    format!("node {name} is down"),
                    "start it again (its data is rebuilt elsewhere after the rebuild grace), or remove it: strata node remove",
                ));
            }
            for d in n.get("drives").and_then(Value::as_array).into_iter().flatten() {
                let path = d.get("path").and_then(Value::as_str).unwrap_or("?");
                let failed = d.get("failed").and_then(Value::as_bool).unwrap_or(false);
                drive_problems(
                    &format!("{name}:{path}"),
                    u(d, "allocated_bytes"),
                    u(d, "capacity_bytes"),
                    failed,
                    &mut problems,
                );
            }
        }
        for v in &vols {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
            let state = v.get("state").and_then(Value::as_str).unwrap_or("unknown");
            let sev = match state {
                "healthy" | "resyncing" | "moving" => continue,
                "down" | "offline" => "error",
                _ => "warning",
            };
            problems.push(problem(
                sev,
                format!("volume {name} is {state}"),
                "see strata pool status: bring its nodes back, or let the rebuild finish",
            ));
        }
        for w in p.get("warnings").and_then(Value::as_array).into_iter().flatten() {
            if let Some(w) = w.as_str() {
                problems.push(problem("warning", w.to_string(), "add capacity or free space"));
            }
        }
    }
    let recent: Vec<&Value> = events
        .iter()
        .filter(|e| matches!(e.get("severity").and_then(Value::as_str), Some("warning" | "error")))
        .collect();
    if !recent.is_empty() {
        let last = recent.last().and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("");
        problems.push(problem(
            "warning",
            format!("{} warning or error events in the last 15 minutes; the latest: {last}", recent.len()),
            "strata events --last 50",
        ));
    }
    problems.sort_by_key(|p| if p.severity == "error" { 0 } else { 1 });
    Report { verdict: if problems.is_empty() { "healthy" } else { "needs attention" }, summary, problems }
}

fn gather(api: &str) -> anyhow::Result<Report> {
    let req = |path: &str| crate::client::request(api, "GET", path, None);
    // A single node answers /api/v1/status; a cluster node /api/v1/pool.
    let (status, pool) = match req("/api/v1/status") {
        Ok(s) => (Some(s), None),
        Err(_) => (None, Some(req("/api/v1/pool")?)),
    };
    let volumes = req("/api/v1/volumes").ok().and_then(|v| v.as_array().map(Vec::len)).unwrap_or(0);
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let head = req(&format!("/api/v1/events?since={}&limit=0", u64::MAX))?;
    let last = head.get("last_seq").and_then(Value::as_u64).unwrap_or(0);
    let page = req(&format!("/api/v1/events?since={}&limit=1000", last.saturating_sub(1000)))?;
    let events: Vec<Value> = page
        .get("events")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("time_ms").and_then(Value::as_u64).is_some_and(|t| t + 15 * 60 * 1000 >= now_ms))
        .cloned()
        .collect();
    Ok(assess(status.as_ref(), pool.as_ref(), volumes, &events))
}

/// Runs `strata status`.
pub fn main(args: StatusArgs) -> ExitCode {
    let report = match gather(&args.api) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        println!("{}: {}", args.api, report.verdict.to_uppercase());
        for s in &report.summary {
            println!("  {s}");
        }
        for p in &report.problems {
            println!("  {:<7} {}", p.severity, p.what);
            println!("          fix: {}", p.fix);
        }
    }
    if report.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_healthy_single_node_has_no_problems() {
        let s = json!({"version": "0.1.0", "capacity_bytes": 1000, "allocated_bytes": 100, "extent_size": 1,
            "controllers": 2, "drives": [{"path": "/d0", "extents_total": 1000, "extents_allocated": 100, "failed": false}],
            "target": {"panics": 0}});
        let r = assess(Some(&s), None, 3, &[]);
        assert_eq!(r.verdict, "healthy");
        assert!(r.summary[0].contains("3 volumes") && r.summary[0].contains("2 controllers"), "{:?}", r.summary);
    }

    #[test]
    fn full_and_failed_drives_panics_and_recent_warnings_need_attention_worst_first() {
        let s = json!({"version": "0.1.0", "extent_size": 1, "drives": [
            {"path": "/d0", "extents_total": 100, "extents_allocated": 91, "failed": false},
            {"path": "/d1", "extents_total": 100, "extents_allocated": 0, "failed": true}],
            "target": {"panics": 2}});
        let events =
            [json!({"severity": "info", "message": "a"}), json!({"severity": "warning", "message": "refused x"})];
        let r = assess(Some(&s), None, 0, &events);
        assert_eq!(r.verdict, "needs attention");
        let whats: Vec<&str> = r.problems.iter().map(|p| p.what.as_str()).collect();
        assert!(whats.iter().any(|w| w.contains("/d0 is 91% full")), "{whats:?}");
        assert!(whats.iter().any(|w| w.contains("/d1 failed")), "{whats:?}");
        assert!(whats.iter().any(|w| w.contains("2 panics")), "{whats:?}");
        assert!(whats.iter().any(|w| w.contains("1 warning or error events") && w.contains("refused x")), "{whats:?}");
        let first_warning = r.problems.iter().position(|p| p.severity == "warning").unwrap();
        assert!(r.problems[..first_warning].iter().all(|p| p.severity == "error"), "errors first");
        assert!(r.problems.iter().all(|p| !p.fix.is_empty()), "each says what to do");
    }

    #[test]
    fn a_cluster_with_a_node_down_and_a_degraded_volume_says_so() {
        let p = json!({"node": "a", "nodes": [
            {"name": "a", "state": "up", "drives": [{"path": "/d", "capacity_bytes": 100, "allocated_bytes": 96, "failed": false}]},
            {"name": "b", "state": "down", "drives": []}],
            "volumes": [{"name": "v1", "state": "degraded"}, {"name": "v2", "state": "healthy"}],
            "warnings": ["the pool is 85% full"]});
        let r = assess(None, Some(&p), 2, &[]);
        assert!(
            r.summary[0].contains("1 of 2 nodes up") && r.summary[0].contains("1 of 2 volumes healthy"),
            "{:?}",
            r.summary
        );
        let whats: Vec<&str> = r.problems.iter().map(|p| p.what.as_str()).collect();
        for w in ["node b is down", "volume v1 is degraded", "a:/d is 96% full", "the pool is 85% full"] {
            assert!(whats.iter().any(|x| x.contains(w)), "{w} missing from {whats:?}");
        }
    }
}
