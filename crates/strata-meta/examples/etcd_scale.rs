//! What etcd sustains of a cluster's control plane, at a chosen scale: N
//! simulated nodes, each with a lease renewed every third of its TTL (as
//! `LeaseKeeper` does) and, every second, what a `strata node` reconcile
//! pass asks of etcd before it looks at any volume: its record put under
//! the lease, and a range over every node's record (`live_nodes`).
//! Reports the renewals' and the passes' latency percentiles, the
//! requests per second etcd answered against those asked, and leases
//! lost (a renewal answered after the lease ran out, or refused).
//!
//! ```text
//! bench/etcd-scale.sh                      # starts a private etcd
//! cargo run --release -p strata-meta --example etcd_scale -- \
//!     --etcd http://127.0.0.1:2379 --nodes 500 --ttl 10 --secs 30 --record-bytes 1024 [--no-pass]
//! ```
//!
//! One process plays every node, so on a small machine the load
//! generator and etcd share the cores: compare runs on one machine, and
//! read a figure as "at least this much etcd time per node".

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use strata_meta::etcd::{EtcdClient, EtcdConfig, KeyRange};

struct Args {
    etcd: String,
    nodes: usize,
    ttl: u64,
    secs: u64,
    record_bytes: usize,
    pass: bool,
}

fn args() -> Result<Args, String> {
    let mut a =
        Args { etcd: "http://127.0.0.1:2379".into(), nodes: 100, ttl: 10, secs: 30, record_bytes: 1024, pass: true };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-pass" {
            a.pass = false;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag} {v:?}: not a number"));
        match flag.as_str() {
            "--etcd" => a.etcd = value,
            "--nodes" => a.nodes = num(&value)? as usize,
            "--ttl" => a.ttl = num(&value)?.max(2),
            "--secs" => a.secs = num(&value)?,
            "--record-bytes" => a.record_bytes = num(&value)? as usize,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

/// Latencies in microseconds, and failures.
#[derive(Default)]
struct Tally {
    micros: std::sync::Mutex<Vec<u64>>,
    failed: AtomicU64,
}

impl Tally {
    fn record(&self, since: Instant) {
        let us = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.micros.lock().unwrap_or_else(|e| e.into_inner()).push(us);
    }

    fn report(&self, what: &str, secs: f64, asked_per_sec: f64) {
        let mut v = self.micros.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_unstable();
        let pct = |p: f64| v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0);
        println!(
            "{what:<10} {:>8.0}/s answered of {asked_per_sec:>8.0}/s asked; latency ms p50 {:.1} p99 {:.1} max {:.1}; failed {}",
            v.len() as f64 / secs,
            pct(0.50) as f64 / 1e3,
            pct(0.99) as f64 / 1e3,
            v.last().copied().unwrap_or(0) as f64 / 1e3,
            self.failed.load(Ordering::Relaxed)
        );
    }
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("etcd_scale: {e}");
            std::process::exit(2);
        }
    };
    let config = match EtcdConfig::from_urls(&a.etcd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcd_scale: --etcd: {e}");
            std::process::exit(2);
        }
    };
    let client = EtcdClient::new(config);
    let prefix = format!("/etcd-scale/{}/", std::process::id());
    let ttl = Duration::from_secs(a.ttl);
    let renew_every = ttl / 3;
    let (renewals, passes) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let lost = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs(a.secs);
    let mut tasks = Vec::new();
    for n in 0..a.nodes {
        let (client, prefix) = (client.clone(), prefix.clone());
        let (renewals, passes, lost) = (renewals.clone(), passes.clone(), lost.clone());
        let record = vec![b'x'; a.record_bytes];
        let pass = a.pass;
        tasks.push(tokio::spawn(async move {
            // Spread the nodes' starts over a second, as real nodes are.
            tokio::time::sleep(Duration::from_millis((n as u64 * 1000) / a.nodes.max(1) as u64)).await;
            let lease = match client.lease_grant(ttl).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("node {n}: lease grant: {e}");
                    lost.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            // The pass runs on a task of its own, as the reconcile loop
            // and `LeaseKeeper` do: a slow pass never delays a renewal.
            let pass = pass.then(|| {
                let (client, passes) = (client.clone(), passes.clone());
                let key = format!("{prefix}nodes/{n:05}");
                let all = KeyRange::prefix(format!("{prefix}nodes/"));
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    while Instant::now() < end {
                        tick.tick().await;
                        let sent = Instant::now();
                        let ok = client.put(key.as_bytes(), &record, Some(lease.id)).await.is_ok()
                            && client.range(&all).await.is_ok();
                        if ok {
                            passes.record(sent)
                        } else {
                            passes.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            });
            let mut renewed = Instant::now();
            while Instant::now() < end {
                tokio::time::sleep_until((renewed + renew_every).into()).await;
                let sent = Instant::now();
                match client.lease_keep_alive_once(lease.id).await {
                    Ok(Some(t)) if t > 0 && renewed.elapsed() < ttl => {
                        renewals.record(sent);
                        renewed = sent;
                    }
                    _ => {
                        renewals.failed.fetch_add(1, Ordering::Relaxed);
                        lost.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
            if let Some(p) = pass {
                let _ = p.await;
            }
            let _ = client.lease_revoke(lease.id).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let _ = client.delete(&KeyRange::prefix(prefix)).await;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} nodes, lease TTL {} s (renewed every {:.1} s), reconcile reads {}, records of {} bytes, {:.0} s",
        a.nodes,
        a.ttl,
        renew_every.as_secs_f64(),
        if a.pass { "every second" } else { "off" },
        a.record_bytes,
        secs
    );
    renewals.report("renewals", secs, a.nodes as f64 / renew_every.as_secs_f64());
    if a.pass {
        passes.report("passes", secs, a.nodes as f64);
    }
    println!("leases lost: {}", lost.load(Ordering::Relaxed));
}
