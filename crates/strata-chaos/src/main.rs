//! `strata-chaos`: the chaos suite's command line.
//!
//! ```text
//! strata-chaos run --strata PATH [--duration 30m] [--seed N] [--work-dir DIR]
//!                  [--report FILE.json] [--rss-limit-mb N] [--no-tuning]
//!                  [--only KIND,...] [--round 12s] [--watchdog 30s]
//!                  [--hosts N] [--quiet]
//! ```
//!
//! Prints a progress line per round and a summary table at the end.
//! Exit status: 0 clean, 1 on any loss, wrong read, hang, failed
//! scenario or RSS over the limit (or when the run could not be carried
//! out), 2 on a usage error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use strata_chaos::{ChaosConfig, Error, FaultKind};

const USAGE: &str = "usage: strata-chaos run --strata PATH [--duration 30m] [--seed N] [--work-dir DIR]
                        [--report FILE.json] [--rss-limit-mb N] [--no-tuning]
                        [--only KIND,...] [--round 12s] [--watchdog 30s] [--hosts N] [--quiet]

Runs `strata serve` and attacks it under verified load (see docs/chaos.md).
  --strata PATH       the strata binary
  --duration D        how long to keep starting rounds (default 30m; 90s, 1h30m, ...)
  --seed N            seed of every random choice (default: derived from the time, printed)
  --work-dir DIR      strata's data dir, config and log (default: a temp dir, kept if the run fails)
  --report FILE       write the report as JSON
  --rss-limit-mb N    fail when strata's peak RSS exceeds N MiB (default: the
                      worst case docs/operations.md gives for its settings)
  --no-tuning         do not pass handshake_timeout, r2t_timeout, send_timeout,
                      max_pending_connections, io_buffer_budget (for a strata without them)
  --only KINDS        only these faults: resets, kill9, idle_sockets, stalled_readers,
                      r2t_hoarders, connect_floods, volume_ops (comma-separated)
  --round D           length of a round (default 12s)
  --watchdog D        an operation slower than this is a hang (default 30s)
  --hosts N           verified hosts at once (default 3)
  --quiet             no progress lines
exit status: 0 clean, 1 failures found (or the run could not be carried out), 2 usage error";

/// Parsed command line.
#[derive(Debug)]
struct Args {
    cfg: ChaosConfig,
    report: Option<PathBuf>,
}

/// Parses `90` (seconds), `90s`, `500ms`, `30m`, `1h`, `1h30m`: the
/// project's one duration grammar, a bare number as seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    strata_block::parse_duration_or_secs(s).map_err(|e| e.to_string())
}

fn time_seed() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_secs() ^ u64::from(d.subsec_nanos()) << 20
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut it = argv.iter();
    match it.next().map(String::as_str) {
        Some("run") => {}
        Some("-h" | "--help" | "help") => return Err(String::new()),
        Some(other) => return Err(format!("unknown command {other:?}")),
        None => return Err("missing command".into()),
    }
    let mut strata = None;
    let mut duration = Duration::from_secs(30 * 60);
    let mut seed = None;
    let mut work_dir = None;
    let mut report = None;
    let mut rss = None;
    let mut tuning = true;
    let mut only: Option<Vec<FaultKind>> = None;
    let mut round = None;
    let mut watchdog = None;
    let mut hosts = None;
    let mut quiet = false;
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--strata" => strata = Some(PathBuf::from(value()?)),
            "--duration" => duration = parse_duration(&value()?)?,
            "--seed" => seed = Some(value()?.parse::<u64>().map_err(|_| "--seed needs a number".to_string())?),
            "--work-dir" => work_dir = Some(PathBuf::from(value()?)),
            "--report" => report = Some(PathBuf::from(value()?)),
            "--rss-limit-mb" => {
                let mb = value()?.parse::<u64>().map_err(|_| "--rss-limit-mb needs a number".to_string())?;
                rss = Some(mb << 20);
            }
            "--no-tuning" => tuning = false,
            "--only" => {
                let v = value()?;
                let kinds: Result<Vec<FaultKind>, String> = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|k| FaultKind::parse(k).ok_or_else(|| format!("unknown fault kind {k:?}")))
                    .collect();
                only = Some(kinds?);
            }
            "--round" => round = Some(parse_duration(&value()?)?),
            "--watchdog" => watchdog = Some(parse_duration(&value()?)?),
            "--hosts" => hosts = Some(value()?.parse::<u16>().map_err(|_| "--hosts needs a number".to_string())?),
            "--quiet" => quiet = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let strata = strata.ok_or("--strata PATH is required")?;
    let mut cfg = ChaosConfig::new(strata, duration, seed.unwrap_or_else(time_seed));
    cfg.work_dir = work_dir;
    if !tuning {
        cfg.tuning = None;
    }
    // Without --rss-limit-mb, the worst case docs/operations.md gives for
    // the settings strata runs with.
    cfg.rss_limit_bytes = rss.or_else(|| cfg.tuning.as_ref().map(|t| t.memory_bound_bytes()));
    if let Some(kinds) = only {
        cfg.faults = kinds.into_iter().collect();
    }
    if let Some(r) = round {
        cfg.round = r;
    }
    if let Some(w) = watchdog {
        cfg.watchdog = w;
    }
    if let Some(h) = hosts {
        cfg.hosts = h;
    }
    cfg.progress = !quiet;
    Ok(Args { cfg, report })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(msg) if msg.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("strata-chaos: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cfg = &args.cfg;
    eprintln!(
        "strata-chaos: seed {} (replay with --seed {}), duration {:?}, faults {}, tuning {}",
        cfg.seed,
        cfg.seed,
        cfg.duration,
        cfg.faults.iter().map(|k| k.name()).collect::<Vec<_>>().join(","),
        if cfg.tuning.is_some() { "on" } else { "off" }
    );
    let report = match strata_chaos::run(cfg) {
        Ok(r) => r,
        Err(e @ Error::Config(_)) => {
            eprintln!("strata-chaos: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("strata-chaos: the run could not be carried out: {e}");
            if e.to_string().contains("unknown field") && cfg.tuning.is_some() {
                eprintln!("strata-chaos: this strata does not know the tuning keys; run with --no-tuning");
            }
            return ExitCode::from(1);
        }
    };
    println!("{}", report.summary());
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("strata-chaos: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if report.is_clean() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        for bad in ["", "m", "10x", "1.5", "-3s", "1h30"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_command_line() {
        let a = args(
            "run --strata /x/strata --duration 2m --seed 7 --work-dir /tmp/w --report r.json --rss-limit-mb 512 \
             --no-tuning --only kill9,idle-sockets --round 20s --watchdog 15s --hosts 2 --quiet",
        )
        .unwrap();
        let c = &a.cfg;
        assert_eq!((c.duration, c.seed, c.hosts), (Duration::from_secs(120), 7, 2));
        assert_eq!(c.rss_limit_bytes, Some(512 << 20));
        assert!(c.tuning.is_none() && !c.progress);
        assert_eq!(c.faults.iter().copied().collect::<Vec<_>>(), vec![FaultKind::Kill9, FaultKind::IdleSockets]);
        assert_eq!((c.round, c.watchdog), (Duration::from_secs(20), Duration::from_secs(15)));
        assert_eq!(a.report, Some(PathBuf::from("r.json")));
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        assert!(args("run").unwrap_err().contains("--strata"));
        assert!(args("run --strata x --only bogus").unwrap_err().contains("bogus"));
        assert!(args("run --strata x --seed").unwrap_err().contains("needs a value"));
        assert!(args("run --strata x --frobnicate").unwrap_err().contains("--frobnicate"));
        assert!(args("walk").unwrap_err().contains("walk"));
        assert_eq!(args("--help").unwrap_err(), "");
    }
}
