//! `strata bench kv-tier`: put and get throughput and latency through
//! the KV store's API, tier by tier: DRAM with room for everything, then
//! an SSD tier and a pool volume each below 64 MiB of DRAM, so that
//! nearly every block is written down to the device and read back from
//! it. Every get checks its value's length. Compare with fio on the same
//! file or volume: `bench/kv-tiers.sh`.

use anyhow::Context;

/// What [`kv_tier`] measures (the `strata bench kv-tier` options).
#[derive(Debug, Clone)]
pub struct TierOptions {
    /// The SSD tier's file or device, `PATH[:SIZE]` (its contents are lost);
    /// `none` skips the SSD tier.
    pub ssd: String,
    /// Value size, in bytes.
    pub value: u64,
    /// Bytes of values to put and get in each tier.
    pub total: u64,
    /// Requests in flight.
    pub qd: usize,
    /// Accept a file system without O_DIRECT (tmpfs).
    pub allow_buffered: bool,
    /// Also measure the pool tier on this volume (namespace 1; its
    /// contents are lost): a store with no SSD tier and 64 MiB of DRAM, so
    /// every block goes to the volume over NVMe/TCP and is read back from
    /// it.
    pub pool: Option<crate::PoolSpec>,
    /// Print JSON instead of the table.
    pub json: bool,
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
    args: &TierOptions,
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
    args: &TierOptions,
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
pub fn kv_tier(args: &TierOptions) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(tier_run(args))
}

async fn tier_run(args: &TierOptions) -> anyhow::Result<()> {
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
        let (path, size) = crate::tiers::parse_ssd(&args.ssd)?;
        let dev = crate::tiers::open_ssd(&path, size, args.allow_buffered)?;
        let tiers = strata_kv::Tiers { ssd: Some(dev as Arc<dyn BlockDevice>), ..Default::default() };
        let ssd = below_dram(args, tiers, "the SSD tier").await?;
        phases.extend(put_then_get(&ssd, Tier::Ssd, n, args, &values).await?);
        let st = ssd.stats();
        (on_ssd, hits_ssd) = (st.ssd_keys, st.hits_ssd);
    }
    // Pool: the same with the volume in the SSD tier's place.
    let mut on_pool = None;
    if let Some(t) = &args.pool {
        let dev = crate::tiers::connect_pool(t, std::time::Duration::from_secs(5)).await?;
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
