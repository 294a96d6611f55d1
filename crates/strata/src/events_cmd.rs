//! `strata events [--follow] [--json] [--last N] [--since SEQ]`: the
//! node's recent events, then (with `--follow`) each new one as it
//! happens, read from `GET /api/v1/events` (see `api_events`).

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use serde_json::Value;
use strata_events::Event;
use strata_events::sse::SseParser;

/// Arguments of `strata events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// API of the node (any node of a cluster sees its own events).
    #[arg(long, env = "STRATA_API", default_value = crate::DEFAULT_API)]
    pub api: String,
    /// Keep printing new events as they happen (until interrupted).
    #[arg(long, short)]
    pub follow: bool,
    /// One JSON object per line instead of a line for people.
    #[arg(long)]
    pub json: bool,
    /// How many of the newest events to print first.
    #[arg(long, default_value_t = 20)]
    pub last: u64,
    /// Print the events numbered after SEQ instead of the newest `--last`.
    #[arg(long)]
    pub since: Option<u64>,
}

/// Runs `strata events`.
pub fn main(args: EventsArgs) -> anyhow::Result<()> {
    let since = match args.since {
        Some(s) => s,
        None => {
            let head =
                crate::client::request(&args.api, "GET", &format!("/api/v1/events?since={}&limit=0", u64::MAX), None)?;
            let last = head.get("last_seq").and_then(Value::as_u64).context("the API's answer has no last_seq")?;
            last.saturating_sub(args.last)
        }
    };
    let mut out = std::io::stdout().lock();
    let mut cursor = since;
    loop {
        let page =
            crate::client::request(&args.api, "GET", &format!("/api/v1/events?since={cursor}&limit=1000"), None)?;
        let missed = page.get("missed").and_then(Value::as_u64).unwrap_or(0);
        if missed > 0 {
            writeln!(out, "({missed} older events are no longer kept)")?;
        }
        let events: Vec<Event> =
            serde_json::from_value(page.get("events").cloned().unwrap_or(Value::Null)).context("reading the events")?;
        if events.is_empty() {
            break;
        }
        for e in &events {
            print_event(&mut out, e, args.json)?;
            cursor = e.seq;
        }
    }
    if !args.follow {
        return Ok(());
    }
    out.flush()?;
    let mut sse = SseParser::default();
    let mut failed: Option<anyhow::Error> = None;
    crate::client::follow(&args.api, &format!("/api/v1/events?follow=1&since={cursor}"), |chunk| {
        for msg in sse.feed(chunk) {
            let r = match msg.event.as_str() {
                "missed" => writeln!(out, "(fell behind: {} events were not kept)", msg.data).map_err(Into::into),
                _ => serde_json::from_str::<Event>(&msg.data)
                    .map_err(anyhow::Error::from)
                    .and_then(|e| print_event(&mut out, &e, args.json)),
            };
            if let Err(e) = r.and_then(|()| out.flush().map_err(Into::into)) {
                failed = Some(e);
                return false;
            }
        }
        true
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One event, as a JSON line or a line for people.
fn print_event(out: &mut impl Write, e: &Event, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
        return Ok(());
    }
    let when = strata_bench::sysinfo::rfc3339(UNIX_EPOCH + Duration::from_millis(e.time_ms));
    let mut line = format!("{when}  {:<7}  {:<22}  {}", e.severity.name(), e.kind, e.message);
    if let Some(r) = &e.reason {
        line.push_str(&format!(" [{r}]"));
    }
    writeln!(out, "{line}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_prints_one_line_for_people() {
        let e = Event {
            seq: 7,
            time_ms: 1_765_000_000_123,
            kind: "host.refused".into(),
            severity: strata_events::Severity::Warning,
            message: "nqn.x from 10.0.0.2:5000 was refused (nqn.y)".into(),
            volume: None,
            host: Some("nqn.x".into()),
            node: None,
            drive: None,
            reason: Some("host not allowed".into()),
        };
        let mut out = Vec::new();
        print_event(&mut out, &e, false).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("2025-12-06T05:46:40.123Z  warning  host.refused"), "{line}");
        assert!(line.trim_end().ends_with("[host not allowed]"), "{line}");
        let mut out = Vec::new();
        print_event(&mut out, &e, true).unwrap();
        let back: Event = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, e);
    }
}
