//! `strata audit`: a node's tamper-evident audit log, through the API.

use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;

use crate::client;

/// `strata audit ...`.
#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Check the node's audit chain: an edited, removed, reordered or cut
    /// record is reported (exit 1).
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the last records; with --follow, keep printing new ones.
    Tail {
        /// How many of the last records to print first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: u64,
        /// Keep printing records as they are written.
        #[arg(short, long)]
        follow: bool,
        /// One JSON record per line.
        #[arg(long)]
        json: bool,
    },
}

fn print(r: &Value, json: bool) {
    if json {
        println!("{r}");
        return;
    }
    let ms = r["time_unix_ms"].as_u64().unwrap_or(0);
    println!(
        "{:>6} {}.{:03} {:<15} {:<8} {:<40} {} {}",
        r["seq"],
        ms / 1000,
        ms % 1000,
        r["kind"].as_str().unwrap_or(""),
        r["outcome"].as_str().unwrap_or(""),
        r["actor"].as_str().unwrap_or(""),
        r["object"].as_str().unwrap_or(""),
        r["detail"].as_str().unwrap_or(""),
    );
}

/// Runs `strata audit ...` against `api`; exit status 1 when verification
/// finds a problem.
pub fn main(api: &str, command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify { json } => {
            let r = client::request(api, "GET", "/api/v1/audit/verify", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if r["ok"] == true {
                println!(
                    "audit log intact: {} records, last {}, checkpoint {}",
                    r["records"], r["last"]["seq"], r["checkpoint"]["seq"]
                );
            } else {
                println!("audit log TAMPERED ({} records read):", r["records"]);
                for p in r["problems"].as_array().into_iter().flatten() {
                    println!("  {}", p.as_str().unwrap_or(""));
                }
            }
            anyhow::ensure!(r["ok"] == true, "the audit log does not verify");
            Ok(())
        }
        AuditCommand::Tail { lines, follow, json } => {
            // The last seq: what verify reports as the last record.
            let v = client::request(api, "GET", "/api/v1/audit/verify", None)?;
            let last = v["last"]["seq"].as_u64().unwrap_or(0);
            let mut since = last.saturating_sub(lines);
            loop {
                let page = client::request(api, "GET", &format!("/api/v1/audit?since={since}&limit=1000"), None)?;
                let records = page.as_array().cloned().unwrap_or_default();
                for r in &records {
                    print(r, json);
                    since = since.max(r["seq"].as_u64().unwrap_or(since));
                }
                if !follow {
                    return Ok(());
                }
                if records.is_empty() {
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
}
