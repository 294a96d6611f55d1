//! `strata bench kv-trace`: hit rate against capacity on a prefix-cache
//! trace (the Mooncake conversation trace in `../shared/traces/`), for
//! the KV store's eviction policy (S3-FIFO) and LRU side by side, each
//! with a request's blocks used head first (as engines send them) and
//! tail first (a chain evicted from its tail), against Belady's MIN.
//!
//! It replays the trace through `strata_kv::sim` only: no store, no
//! device, no runtime.

use std::path::PathBuf;

use strata_kv::Admit;
use strata_kv::policy::{Lru, Policy, S3Fifo};
use strata_kv::sim;

/// What [`kv_trace`] replays (the `strata bench kv-trace` options).
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// JSON lines with a `hash_ids` array of block ids per request.
    pub trace: PathBuf,
    /// Capacities to replay, in blocks.
    pub capacity: Vec<u64>,
    /// Also replay S3-FIFO with these small-queue sizes, percent of the
    /// capacity (0: adaptive).
    pub small_percent: Vec<u64>,
    /// Ghost queue length, in multiples of the keys cached (the store
    /// uses 1).
    pub ghost: usize,
    /// Replay only the first N requests.
    pub requests: Option<usize>,
    /// Also replay the two tiers together: DRAM of each capacity and an
    /// SSD log of this many times it (0: skip).
    pub ssd_ratio: u64,
    /// Print JSON instead of the table.
    pub json: bool,
}

/// Runs the replay and prints the table (or JSON).
pub fn kv_trace(args: &TraceOptions) -> anyhow::Result<()> {
    let reqs = crate::trace_file::load(&args.trace, args.requests)?;
    let ideal = sim::ideal(&reqs);
    let distinct = ideal.stored;
    let mut rows = Vec::new();
    for &cap in &args.capacity {
        let s3 = sim::replay(&mut S3Fifo::default() as &mut dyn Policy<u64>, cap, &reqs);
        let lru = sim::replay(&mut Lru::default(), cap, &reqs);
        let s3_tail = sim::replay_in(&mut S3Fifo::default(), cap, &reqs, sim::Order::TailFirst);
        let lru_tail = sim::replay_in(&mut Lru::default(), cap, &reqs, sim::Order::TailFirst);
        let min = sim::replay_min(cap, &reqs);
        rows.push((cap, s3, lru, [s3_tail, lru_tail, min]));
    }
    let shapes: Vec<(u64, Vec<sim::Replay>)> = args
        .small_percent
        .iter()
        .map(|&p| {
            let runs = args
                .capacity
                .iter()
                .map(|&cap| {
                    let mut pol = if p == 0 { S3Fifo::adaptive(args.ghost) } else { S3Fifo::with_shape(p, args.ghost) };
                    sim::replay(&mut pol, cap, &reqs)
                })
                .collect();
            (p, runs)
        })
        .collect();
    // The two tiers: the store's (S3-FIFO with its ghost sized for the
    // SSD, admitting blocks reused in DRAM or back from the ghost), then
    // LRU and S3-FIFO writing every block that leaves DRAM.
    let tiered: Vec<(u64, [sim::TieredReplay; 4])> = if args.ssd_ratio == 0 {
        Vec::new()
    } else {
        args.capacity
            .iter()
            .map(|&cap| {
                let ssd = cap * args.ssd_ratio;
                // The store's ghost, sized for its SSD tier.
                let ghost = strata_kv::store::ghost_factor_for(cap, ssd);
                let runs = [
                    sim::replay_tiered(&mut S3Fifo::with_shape(10, ghost), cap, ssd, Admit::Reused, &reqs),
                    sim::replay_tiered(&mut Lru::default(), cap, ssd, Admit::All, &reqs),
                    sim::replay_tiered(&mut S3Fifo::default(), cap, ssd, Admit::All, &reqs),
                    sim::replay_tiered(&mut S3Fifo::with_shape(10, ghost), cap, ssd, Admit::Auto, &reqs),
                ];
                (cap, runs)
            })
            .collect()
    };
    if args.json {
        let v = serde_json::json!({
            "trace": args.trace.display().to_string(),
            "requests": ideal.requests,
            "blocks": ideal.blocks,
            "distinct_blocks": distinct,
            "ideal_hit_rate": ideal.hit_rate(),
            "rows": rows.iter().map(|(c, s3, lru, [s3_tail, lru_tail, min])| serde_json::json!({
                "capacity_blocks": c,
                "s3fifo_hit_rate": s3.hit_rate(),
                "lru_hit_rate": lru.hit_rate(),
                "s3fifo_tail_first_hit_rate": s3_tail.hit_rate(),
                "lru_tail_first_hit_rate": lru_tail.hit_rate(),
                "min_hit_rate": min.hit_rate(),
                "s3fifo_stored": s3.stored,
                "lru_stored": lru.stored,
            })).collect::<Vec<_>>(),
            "tiered": tiered.iter().map(|(c, [store, lru, s3all, auto])| serde_json::json!({
                "dram_blocks": c,
                "ssd_blocks": c * args.ssd_ratio,
                "store_hit_rate": store.total.hit_rate(),
                "store_ssd_hits": store.hits_ssd,
                "store_ssd_writes": store.ssd_writes,
                "lru_all_hit_rate": lru.total.hit_rate(),
                "lru_all_ssd_writes": lru.ssd_writes,
                "s3fifo_all_hit_rate": s3all.total.hit_rate(),
                "s3fifo_all_ssd_writes": s3all.ssd_writes,
                "store_auto_hit_rate": auto.total.hit_rate(),
                "store_auto_ssd_writes": auto.ssd_writes,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} requests, {} blocks asked for, {} distinct; hit rate with unbounded capacity {:.1}%",
        ideal.requests,
        ideal.blocks,
        distinct,
        100.0 * ideal.hit_rate()
    );
    println!("Hit rate; \"tail\": a request's blocks used tail first; /MIN: the share of Belady's MIN reached.");
    print!(
        "{:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>10}",
        "capacity", "% held", "MIN", "S3-FIFO", "LRU", "S3 tail", "LRU tail", "S3/MIN", "tail/MIN", "S3/LRU"
    );
    for (p, _) in &shapes {
        print!(" {:>9}", if *p == 0 { "adaptive".to_string() } else { format!("small{p}%") });
    }
    println!();
    for (i, (cap, s3, lru, [s3_tail, lru_tail, min])) in rows.into_iter().enumerate() {
        let ratio = if lru.hits == 0 { f64::INFINITY } else { s3.hits as f64 / lru.hits as f64 };
        let of_min = |r: &sim::Replay| if min.hits == 0 { 1.0 } else { r.hits as f64 / min.hits as f64 };
        print!(
            "{:>10} {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.2} {:>8.2} {:>10.3}",
            cap,
            100.0 * cap as f64 / distinct as f64,
            100.0 * min.hit_rate(),
            100.0 * s3.hit_rate(),
            100.0 * lru.hit_rate(),
            100.0 * s3_tail.hit_rate(),
            100.0 * lru_tail.hit_rate(),
            of_min(&s3),
            of_min(&s3_tail),
            ratio
        );
        for (_, runs) in &shapes {
            print!(" {:>8.1}%", 100.0 * runs[i].hit_rate());
        }
        println!();
    }
    if !tiered.is_empty() {
        println!(
            "\nDRAM and an SSD log of {}x its blocks; hit rate (SSD writes, thousands of blocks):",
            args.ssd_ratio
        );
        println!(
            "{:>10} {:>10} {:>20} {:>20} {:>20} {:>20}",
            "dram", "ssd", "store (S3, reused)", "LRU, all", "S3-FIFO, all", "store (S3, auto)"
        );
        for (cap, [store, lru, s3all, auto]) in &tiered {
            let cell = |t: &sim::TieredReplay| {
                format!("{:.1}% ({:.0}k)", 100.0 * t.total.hit_rate(), t.ssd_writes as f64 / 1e3)
            };
            println!(
                "{:>10} {:>10} {:>20} {:>20} {:>20} {:>20}",
                cap,
                cap * args.ssd_ratio,
                cell(store),
                cell(lru),
                cell(s3all),
                cell(auto)
            );
        }
    }
    Ok(())
}
