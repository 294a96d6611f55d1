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
    /// Also replay the two tiers together: DRAM of each capacity and an
    /// SSD log of this many times it (0: skip).
    #[arg(long, default_value_t = 0)]
    ssd_ratio: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Reads the block chains of a trace.
pub(crate) fn load(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Vec<u64>>> {
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
    // The two tiers: the store's (S3-FIFO with its ghost sized for the
    // SSD, admitting blocks reused in DRAM or back from the ghost), then
    // LRU and S3-FIFO writing every block that leaves DRAM.
    let tiered: Vec<(u64, [sim::TieredReplay; 3])> = if args.ssd_ratio == 0 {
        Vec::new()
    } else {
        args.capacity
            .iter()
            .map(|&cap| {
                let ssd = cap * args.ssd_ratio;
                // The store's ghost, sized for its SSD tier.
                let ghost = strata_kv::store::ghost_factor_for(cap, ssd);
                let runs = [
                    sim::replay_tiered(&mut S3Fifo::with_shape(10, ghost), cap, ssd, false, &reqs),
                    sim::replay_tiered(&mut Lru::default(), cap, ssd, true, &reqs),
                    sim::replay_tiered(&mut S3Fifo::default(), cap, ssd, true, &reqs),
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
            "rows": rows.iter().map(|(c, s3, lru)| serde_json::json!({
                "capacity_blocks": c,
                "s3fifo_hit_rate": s3.hit_rate(),
                "lru_hit_rate": lru.hit_rate(),
                "s3fifo_stored": s3.stored,
                "lru_stored": lru.stored,
            })).collect::<Vec<_>>(),
            "tiered": tiered.iter().map(|(c, [store, lru, s3all])| serde_json::json!({
                "dram_blocks": c,
                "ssd_blocks": c * args.ssd_ratio,
                "store_hit_rate": store.total.hit_rate(),
                "store_ssd_hits": store.hits_ssd,
                "store_ssd_writes": store.ssd_writes,
                "lru_all_hit_rate": lru.total.hit_rate(),
                "lru_all_ssd_writes": lru.ssd_writes,
                "s3fifo_all_hit_rate": s3all.total.hit_rate(),
                "s3fifo_all_ssd_writes": s3all.ssd_writes,
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
    if !tiered.is_empty() {
        println!(
            "\nDRAM and an SSD log of {}x its blocks; hit rate (SSD writes, thousands of blocks):",
            args.ssd_ratio
        );
        println!("{:>10} {:>10} {:>20} {:>20} {:>20}", "dram", "ssd", "store (S3, reused)", "LRU, all", "S3-FIFO, all");
        for (cap, [store, lru, s3all]) in &tiered {
            let cell = |t: &sim::TieredReplay| {
                format!("{:.1}% ({:.0}k)", 100.0 * t.total.hit_rate(), t.ssd_writes as f64 / 1e3)
            };
            println!(
                "{:>10} {:>10} {:>20} {:>20} {:>20}",
                cap,
                cap * args.ssd_ratio,
                cell(store),
                cell(lru),
                cell(s3all)
            );
        }
    }
    Ok(())
}

/// `strata bench kv-tier` arguments.
#[derive(clap::Args, Debug)]
pub struct TierArgs {
    /// The SSD tier's file or device, PATH[:SIZE] (its contents are lost);
    /// `none` skips the SSD tier.
    #[arg(long, default_value = "./strata-data/kv/bench.log:2G")]
    ssd: String,
    /// Value size.
    #[arg(long, default_value = "1M", value_parser = strata_block::parse_size)]
    value: u64,
    /// Bytes of values to put and get in each tier.
    #[arg(long, default_value = "1G", value_parser = strata_block::parse_size)]
    total: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    qd: usize,
    /// Accept a file system without O_DIRECT (tmpfs).
    #[arg(long)]
    allow_buffered: bool,
    /// Also measure the pool tier on this volume (namespace 1; its
    /// contents are lost): a store with no SSD tier and 64 MiB of DRAM, so
    /// every block goes to the volume over NVMe/TCP and is read back from
    /// it (compare with `strata bench` on the same volume: bench/kv-tiers.sh).
    #[arg(long, value_name = "tcp://ADDR:PORT/NQN")]
    pool: Option<crate::kv_cmd::PoolSpec>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One phase's throughput and latency.
struct Phase {
    name: &'static str,
    bytes: u64,
    secs: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Runs `ops` (indices 0..n) with `qd` in flight; returns the phase.
async fn phase<F, Fut>(name: &'static str, n: u64, size: u64, qd: usize, op: F) -> anyhow::Result<Phase>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use futures_util::StreamExt;
    let start = std::time::Instant::now();
    let lat: Vec<u64> = futures_util::stream::iter(0..n)
        .map(|i| {
            let f = op(i);
            async move {
                let t = std::time::Instant::now();
                f.await.map(|()| t.elapsed().as_micros() as u64)
            }
        })
        .buffer_unordered(qd.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let secs = start.elapsed().as_secs_f64();
    let mut lat = lat;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1))).copied().unwrap_or(0) as f64
    };
    Ok(Phase { name, bytes: n * size, secs, p50_us: pct(0.50), p99_us: pct(0.99) })
}

fn fill(i: u64, size: u64) -> bytes::Bytes {
    let mut v = vec![0u8; size as usize];
    for (j, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(i * 0x9E37_79B9 + j as u64).to_le_bytes()[..c.len()]);
    }
    bytes::Bytes::from(v)
}

fn key(i: u64) -> Vec<u8> {
    format!("blk{i:09}").into_bytes()
}

/// The tiers `strata bench kv-tier` measures.
#[derive(Clone, Copy)]
enum Tier {
    Dram,
    Ssd,
    Pool,
}

impl Tier {
    /// Its name, and the names of its put and get phases.
    fn names(self) -> [&'static str; 3] {
        match self {
            Tier::Dram => ["dram", "dram put", "dram get"],
            Tier::Ssd => ["ssd", "ssd put", "ssd get"],
            Tier::Pool => ["pool", "pool put", "pool get"],
        }
    }
}

/// Puts `n` blocks, then (after a flush, so that what left DRAM is on the
/// drive) gets each back, checking its length.
async fn put_then_get(
    store: &std::sync::Arc<strata_kv::KvStore>,
    tier: Tier,
    n: u64,
    args: &TierArgs,
    values: &[bytes::Bytes],
) -> anyhow::Result<[Phase; 2]> {
    let [tier, put_name, get_name] = tier.names();
    let put = phase(put_name, n, args.value, args.qd, |i| {
        let (s, k, v) = (store.clone(), key(i), values[(i % values.len() as u64) as usize].clone());
        async move {
            s.put(b"", &k, v, strata_kv::PutOpts::default()).await?;
            Ok(())
        }
    })
    .await?;
    store.flush(false).await?;
    let get = phase(get_name, n, args.value, args.qd, |i| {
        let (s, k) = (store.clone(), key(i));
        async move {
            let got = s.get(b"", &k).await?.with_context(|| format!("a block is missing from the {tier} tier"))?;
            anyhow::ensure!(got.len() as u64 == args.value, "short value");
            Ok(())
        }
    })
    .await?;
    Ok([put, get])
}

/// A store over `tiers` with 64 MiB of DRAM (or four values), emptied,
/// so that nearly every block put goes down to them.
async fn below_dram(
    args: &TierArgs,
    tiers: strata_kv::Tiers,
    what: &str,
) -> anyhow::Result<std::sync::Arc<strata_kv::KvStore>> {
    use strata_kv::{Admit, KvConfig, KvStore};
    let dev_bytes = tiers.ssd.as_ref().or(tiers.pool.as_ref()).map_or(0, |d| d.geometry().size_bytes());
    anyhow::ensure!(
        args.total * 5 / 4 <= dev_bytes,
        "--total {} does not fit in {what} ({dev_bytes} bytes)",
        args.total
    );
    let seg = strata_kv::store::segment_size_for(dev_bytes).max(args.value * 2);
    let cfg = KvConfig { dram_bytes: (64 << 20).max(args.value * 4), admit: Admit::All, segment_bytes: seg };
    let store = KvStore::open_tiers(cfg, tiers, Box::new(strata_kv::store::unix_ms)).await?;
    store.clear();
    Ok(store)
}

/// Measures put and get through the store's API: DRAM tier, SSD tier, and
/// with `--pool` the pool tier.
pub fn tier(args: &TierArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(tier_run(args))
}

async fn tier_run(args: &TierArgs) -> anyhow::Result<()> {
    use std::sync::Arc;
    use strata_block::BlockDevice;
    use strata_kv::{Admit, KvConfig, KvStore};
    let n = (args.total / args.value.max(1)).max(1);
    let mut phases = Vec::new();
    // DRAM: room for everything.
    let dram = KvStore::open(
        KvConfig { dram_bytes: args.total * 2 + (64 << 20), admit: Admit::All, segment_bytes: 1 << 20 },
        None,
    )
    .await?;
    let values: Vec<bytes::Bytes> = (0..n.min(64)).map(|i| fill(i, args.value)).collect();
    phases.extend(put_then_get(&dram, Tier::Dram, n, args, &values).await?);
    drop(dram);
    // SSD: a DRAM tier of 64 MiB, so nearly every block is written down,
    // then read back from the drive.
    let (mut on_ssd, mut hits_ssd) = (0, 0);
    if args.ssd != "none" {
        let (path, size) = crate::kv_cmd::parse_ssd(&args.ssd)?;
        let dev = crate::kv_cmd::open_ssd(&path, size, args.allow_buffered)?;
        let tiers = strata_kv::Tiers { ssd: Some(dev as Arc<dyn BlockDevice>), ..Default::default() };
        let ssd = below_dram(args, tiers, "the SSD tier").await?;
        phases.extend(put_then_get(&ssd, Tier::Ssd, n, args, &values).await?);
        let st = ssd.stats();
        (on_ssd, hits_ssd) = (st.ssd_keys, st.hits_ssd);
    }
    // Pool: the same with the volume in the SSD tier's place.
    let mut on_pool = None;
    if let Some(t) = &args.pool {
        let dev = crate::kv_cmd::connect_pool(t, std::time::Duration::from_secs(5)).await?;
        let pool =
            below_dram(args, strata_kv::Tiers { pool: Some(dev), ..Default::default() }, "the pool volume").await?;
        phases.extend(put_then_get(&pool, Tier::Pool, n, args, &values).await?);
        let st = pool.stats();
        on_pool = Some((st.pool_keys, st.hits_pool));
    }
    if args.json {
        let rows: Vec<serde_json::Value> = phases
            .iter()
            .map(|p| {
                serde_json::json!({"phase": p.name, "bytes": p.bytes, "secs": p.secs,
                    "gb_per_s": p.bytes as f64 / p.secs / 1e9, "p50_us": p.p50_us, "p99_us": p.p99_us})
            })
            .collect();
        let v = serde_json::json!({"value_bytes": args.value, "qd": args.qd, "blocks": n,
            "blocks_on_ssd": on_ssd, "hits_ssd": hits_ssd,
            "blocks_on_pool": on_pool.map(|p| p.0), "hits_pool": on_pool.map(|p| p.1), "phases": rows});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{n} blocks of {} bytes, {} in flight; {on_ssd} were on the SSD tier, {} gets read from it",
        args.value, args.qd, hits_ssd
    );
    if let Some((keys, hits)) = on_pool {
        println!("{keys} were on the pool tier, {hits} gets read from it");
    }
    println!("{:<10} {:>10} {:>10} {:>10}", "phase", "GB/s", "p50 us", "p99 us");
    for p in &phases {
        println!("{:<10} {:>10.3} {:>10.0} {:>10.0}", p.name, p.bytes as f64 / p.secs / 1e9, p.p50_us, p.p99_us);
    }
    Ok(())
}
