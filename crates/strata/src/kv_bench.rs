//! `strata bench kv-trace`: hit rate against capacity on a prefix-cache
//! trace (the Mooncake conversation trace in `../shared/traces/`), for
//! the KV store's eviction policy (S3-FIFO) and LRU side by side.

use std::path::{Path, PathBuf};

use anyhow::Context;
use strata_kv::policy::{Lru, Policy, S3Fifo};
use strata_kv::sim;

/// `strata bench kv-trace` arguments.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// JSON lines with a `hash_ids` array of block ids per request.
    trace: PathBuf,
    /// Capacities to replay, in blocks (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000,8000,16000,32000")]
    capacity: Vec<u64>,
    /// Also replay S3-FIFO with these small-queue sizes, percent of the
    /// capacity (comma-separated; 0: adaptive).
    #[arg(long, value_delimiter = ',')]
    small_percent: Vec<u64>,
    /// Ghost queue length, in multiples of the keys cached (the store
    /// uses 1).
    #[arg(long, default_value_t = 1)]
    ghost: usize,
    /// Replay only the first N requests.
    #[arg(long)]
    requests: Option<usize>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Reads the block chains of a trace.
fn load(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Vec<u64>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?;
        let ids = v["hash_ids"]
            .as_array()
            .with_context(|| format!("{}:{}: no hash_ids array", path.display(), n + 1))?
            .iter()
            .map(|x| x.as_u64().with_context(|| format!("{}:{}: a hash id is not an integer", path.display(), n + 1)))
            .collect::<anyhow::Result<Vec<u64>>>()?;
        out.push(ids);
    }
    anyhow::ensure!(!out.is_empty(), "{}: no requests", path.display());
    Ok(out)
}

/// Runs the replay and prints the table (or JSON).
pub fn trace(args: &TraceArgs) -> anyhow::Result<()> {
    let reqs = load(&args.trace, args.requests)?;
    let ideal = sim::ideal(&reqs);
    let distinct = ideal.stored;
    let mut rows = Vec::new();
    for &cap in &args.capacity {
        let s3 = sim::replay(&mut S3Fifo::default() as &mut dyn Policy<u64>, cap, &reqs);
        let lru = sim::replay(&mut Lru::default(), cap, &reqs);
        rows.push((cap, s3, lru));
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
    if args.json {
        let v = serde_json::json!({
            "trace": args.trace.display().to_string(),
            "requests": ideal.requests,
            "blocks": ideal.blocks,
            "distinct_blocks": distinct,
            "ideal_hit_rate": ideal.hit_rate(),
            "rows": rows.iter().map(|(c, s3, lru)| serde_json::json!({
                "capacity_blocks": c,
                "s3fifo_hit_rate": s3.hit_rate(),
                "lru_hit_rate": lru.hit_rate(),
                "s3fifo_stored": s3.stored,
                "lru_stored": lru.stored,
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
    print!("{:>10} {:>8} {:>10} {:>8} {:>10}", "capacity", "% held", "S3-FIFO", "LRU", "S3/LRU");
    for (p, _) in &shapes {
        print!(" {:>9}", if *p == 0 { "adaptive".to_string() } else { format!("small{p}%") });
    }
    println!();
    for (i, (cap, s3, lru)) in rows.into_iter().enumerate() {
        let ratio = if lru.hits == 0 { f64::INFINITY } else { s3.hits as f64 / lru.hits as f64 };
        print!(
            "{:>10} {:>7.1}% {:>9.1}% {:>7.1}% {:>10.3}",
            cap,
            100.0 * cap as f64 / distinct as f64,
            100.0 * s3.hit_rate(),
            100.0 * lru.hit_rate(),
            ratio
        );
        for (_, runs) in &shapes {
            print!(" {:>8.1}%", 100.0 * runs[i].hit_rate());
        }
        println!();
    }
    Ok(())
}
