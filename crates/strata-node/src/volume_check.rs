//! `strata volume check NAME [--repair]`: the volume's owner reads every
//! copy or shard of it, online, and reports where they differ (see
//! `strata_pool::check`). A check of a large volume takes long, so it
//! runs as a job on the owner: `POST /api/v1/volumes/NAME/check` starts
//! it, `GET` the same path follows it; another node passes both on to
//! the owner. The job lives in the owner's memory: a new owner (after a
//! takeover) has none until one is started there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use strata_pool::PoolVolume;
use strata_pool::check::{CheckProgress, CheckReport};

use crate::node::NodeError;

/// One check, running or ended.
struct Job {
    name: String,
    repair: bool,
    started: SystemTime,
    began: Instant,
    progress: Arc<CheckProgress>,
    /// `None` while it runs.
    outcome: Arc<Mutex<Option<Result<CheckReport, String>>>>,
}

impl Job {
    fn json(&self) -> Value {
        let (done, total) = self.progress.get();
        let outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (state, report, error) = match outcome {
            None => ("running", Value::Null, Value::Null),
            Some(Ok(r)) => ("done", json!(r), Value::Null),
            Some(Err(e)) => ("failed", Value::Null, json!(e)),
        };
        json!({
            "volume": self.name,
            "repair": self.repair,
            "state": state,
            "bytes_done": done,
            "bytes_total": total,
            "started_unix": self.started.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "elapsed_secs": self.began.elapsed().as_secs_f64(),
            "report": report,
            "error": error,
        })
    }

    fn running(&self) -> bool {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}

/// The checks this node ran as owner, by volume id (the last of each).
#[derive(Default)]
pub struct Checks {
    jobs: Mutex<HashMap<u64, Job>>,
}

impl Checks {
    /// Starts a check of volume `id` (`name`), served here as `vol`, on a
    /// task of its own; refused while one runs.
    ///
    /// # Errors
    ///
    /// [`NodeError::Conflict`] while a check of the volume runs.
    pub fn start(&self, id: u64, name: &str, vol: Arc<dyn PoolVolume>, repair: bool) -> Result<Value, NodeError> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.get(&id).is_some_and(Job::running) {
            return Err(NodeError::Conflict(format!(
                "a check of {name} is running already: follow it with strata volume check {name} --status"
            )));
        }
        let job = Job {
            name: name.to_string(),
            repair,
            started: SystemTime::now(),
            began: Instant::now(),
            progress: Arc::new(CheckProgress::new(vol.geometry().size_bytes())),
            outcome: Arc::new(Mutex::new(None)),
        };
        let (progress, outcome, name) = (job.progress.clone(), job.outcome.clone(), name.to_string());
        tokio::spawn(async move {
            tracing::info!(volume = %name, repair, "volume check started");
            let r = vol.check(repair, &progress).await;
            match &r {
                Ok(rep) => tracing::info!(volume = %name, differences = rep.differences, repaired = rep.repaired,
                    checked = rep.bytes_checked, unchecked = rep.bytes_unchecked, "volume check done"),
                Err(e) => tracing::warn!(volume = %name, "volume check failed: {e}"),
            }
            *outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.map_err(|e| e.to_string()));
        });
        let v = job.json();
        jobs.insert(id, job);
        Ok(v)
    }

    /// The last check of volume `id`, if this node ran one.
    pub fn get(&self, id: u64) -> Option<Value> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).get(&id).map(Job::json)
    }
}

/// A check's state for people: progress while it runs, the findings once
/// done.
pub fn render(v: &Value) -> String {
    use std::fmt::Write as _;
    let size = |k: &str| crate::human::approx_size(v[k].as_u64().unwrap_or(0));
    let mut out = String::new();
    let volume = v["volume"].as_str().unwrap_or("?");
    match v["state"].as_str() {
        Some("running") => {
            let (done, total) = (v["bytes_done"].as_u64().unwrap_or(0), v["bytes_total"].as_u64().unwrap_or(0));
            let percent = if total == 0 { 100.0 } else { done as f64 * 100.0 / total as f64 };
            let _ = write!(out, "checking {volume}: {} of {} ({percent:.0}%)", size("bytes_done"), size("bytes_total"));
        }
        Some("failed") => {
            let _ = write!(out, "the check of {volume} failed: {}", v["error"].as_str().unwrap_or("?"));
        }
        _ => {
            let r = &v["report"];
            let n = |k: &str| r[k].as_u64().unwrap_or(0);
            let secs = v["elapsed_secs"].as_f64().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "{volume}: {} compared, {} not comparable (too few copies or shards in sync), in {secs:.1} s",
                crate::human::approx_size(n("bytes_checked")),
                crate::human::approx_size(n("bytes_unchecked")),
            );
            if n("differences") == 0 {
                let _ = writeln!(out, "every copy and shard agrees");
            } else {
                let _ = writeln!(out, "{} ranges differ, {} repaired:", n("differences"), n("repaired"));
                for d in r["listed"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    let fixed = if d["repaired"] == true { "repaired" } else { "not repaired" };
                    let _ = writeln!(
                        out,
                        "  lba {}+{}: {} ({fixed})",
                        d["lba"],
                        d["blocks"],
                        d["what"].as_str().unwrap_or("?")
                    );
                }
                let more = n("differences").saturating_sub(r["listed"].as_array().map_or(0, |l| l.len() as u64));
                if more > 0 {
                    let _ = writeln!(out, "  and {more} more");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_reads_as_progress_then_as_findings() {
        let running =
            json!({"volume": "db", "state": "running", "bytes_done": 64u64 << 20, "bytes_total": 256u64 << 20});
        assert_eq!(render(&running), "checking db: 64.0 MiB of 256 MiB (25%)");
        let done = json!({"volume": "db", "state": "done", "elapsed_secs": 2.5, "report": {
            "bytes_checked": 256u64 << 20, "bytes_unchecked": 0, "differences": 2, "repaired": 1,
            "listed": [{"lba": 8, "blocks": 1, "wrong": [2], "what": "the copies on 2 differ from the others", "repaired": true}]}});
        let text = render(&done);
        assert!(text.starts_with("db: 256 MiB compared, 0 B not comparable"), "{text}");
        assert!(text.contains("2 ranges differ, 1 repaired:"), "{text}");
        assert!(text.contains("lba 8+1: the copies on 2 differ from the others (repaired)"), "{text}");
        assert!(text.contains("and 1 more"), "{text}");
        let clean = json!({"volume": "db", "state": "done", "report": {"differences": 0}});
        assert!(render(&clean).contains("every copy and shard agrees"));
        let failed = json!({"volume": "db", "state": "failed", "error": "fenced"});
        assert_eq!(render(&failed), "the check of db failed: fenced");
        // Nonsense renders, never panics.
        for v in [json!(null), json!({"state": 3}), json!({"report": []})] {
            let _ = render(&v);
        }
    }
}
