//! `strata top`: the busiest volumes and hosts of a node with their live
//! rates and latency percentiles, refreshed in place, from two snapshots
//! of `GET /api/v1/stats/io` at a time (see `io_stats`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::io_stats::{Rates, Snapshot};

/// Arguments of `strata top`.
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// API of the node.
    #[arg(long, env = "STRATA_API", default_value = crate::DEFAULT_API)]
    pub api: String,
    /// Time between refreshes.
    #[arg(long, default_value = "2s", value_parser = parse_dur)]
    pub interval: Duration,
    /// Stop after this many refreshes (default: run until interrupted).
    #[arg(long, short = 'n')]
    pub iterations: Option<u64>,
    /// Rows of each table.
    #[arg(long, default_value_t = 10)]
    pub rows: usize,
    /// Each refresh as one JSON object per line (volumes and hosts with
    /// their rates) instead of the tables.
    #[arg(long)]
    pub json: bool,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    let d = strata_block::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) { Err("at least 100ms".into()) } else { Ok(d) }
}

fn fetch(api: &str) -> anyhow::Result<Snapshot> {
    let v = crate::client::request(api, "GET", "/api/v1/stats/io", None)?;
    serde_json::from_value(v).context("reading /api/v1/stats/io")
}

/// Runs `strata top`.
pub fn main(args: TopArgs) -> anyhow::Result<()> {
    let tty = std::io::stdout().is_terminal() && !args.json;
    let mut before = fetch(&args.api)?;
    let mut shown = 0u64;
    loop {
        let next = Instant::now() + args.interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let now = fetch(&args.api)?;
        let (vols, hosts) = (now.rates(&before, false), now.rates(&before, true));
        let mut out = std::io::stdout().lock();
        if args.json {
            let line = serde_json::json!({ "time_ms": now.time_ms, "volumes": vols, "hosts": hosts });
            writeln!(out, "{line}")?;
        } else {
            let frame = render(&args, &now, &vols, &hosts);
            if tty {
                // Home and clear, then the frame: refreshed in place.
                write!(out, "\x1b[H\x1b[2J{frame}")?;
            } else {
                writeln!(out, "{frame}")?;
            }
        }
        out.flush()?;
        before = now;
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
}

fn ms(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.3}", s * 1e3))
}

fn table(title: &str, rows: &[Rates], max: usize) -> String {
    let mut t = format!(
        "{title:<28} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>4}\n",
        "READ IOPS", "WRITE IOPS", "READ MB/s", "WRITE MB/s", "p50 ms", "p99 ms", "p99.9 ms", "QD"
    );
    if rows.is_empty() {
        t.push_str("  (none yet)\n");
    }
    for r in rows.iter().take(max) {
        let chars: Vec<char> = r.name.chars().collect();
        let name = if chars.len() > 28 {
            format!("…{}", chars[chars.len() - 27..].iter().collect::<String>())
        } else {
            r.name.clone()
        };
        t.push_str(&format!(
            "{name:<28} {:>10.0} {:>10.0} {:>10.1} {:>10.1} {:>8} {:>8} {:>8} {:>4}\n",
            r.read_iops,
            r.write_iops,
            r.read_bps / 1e6,
            r.write_bps / 1e6,
            ms(r.p50),
            ms(r.p99),
            ms(r.p999),
            r.in_flight
        ));
    }
    if rows.len() > max {
        t.push_str(&format!("  ... {} more\n", rows.len() - max));
    }
    t
}

/// One screen: a header, the volumes' table, the hosts' table.
fn render(args: &TopArgs, now: &Snapshot, vols: &[Rates], hosts: &[Rates]) -> String {
    let when = strata_bench::sysinfo::rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(now.time_ms));
    let total = |rs: &[Rates]| rs.iter().map(|r| r.read_iops + r.write_iops).sum::<f64>();
    let mut s =
        format!("strata top  {}  every {:?}  {}  {:.0} IOPS in all\n", args.api, args.interval, when, total(vols));
    if !now.enabled {
        s.push_str("(this node records no I/O metrics: started with --no-io-metrics)\n");
    }
    s.push('\n');
    s.push_str(&table("VOLUME", vols, args.rows));
    s.push('\n');
    s.push_str(&table("HOST", hosts, args.rows));
    s
}
