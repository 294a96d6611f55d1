//! `strata bench ttft`: time to first token when the prefill is
//! recomputed, against loading the same KV blocks from each tier of the
//! KV store through its real client path (RESP over TCP into the tensors
//! attention reads), a multi-turn replay of a conversation trace with and
//! without the store, and a projection of both onto a stated GPU and
//! model shape (formula in `docs/kv.md`).
//!
//! The store runs in this process on its own runtime, behind the same
//! server `strata kv serve` runs; "restarting" it drops that runtime and
//! reopens the SSD file, as a new process would, so the SSD tier is
//! measured cold (DRAM empty, index rebuilt from the log).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use strata_block::BlockDevice;
use strata_kv::client::Client;
use strata_kv::key::KeyContext;
use strata_kv::{Admit, KvConfig, KvStore};
use strata_prefill::{KvCache, Model, PRESETS, Shape};

/// `strata bench ttft` arguments.
#[derive(clap::Args, Debug)]
pub struct TtftArgs {
    /// Model shape run on the CPU: tiny, small, llama-3.2-1b,
    /// llama-3.1-8b or llama-3.1-70b (random weights; the larger need
    /// their weights' memory in f32).
    #[arg(long, default_value = "tiny")]
    model: String,
    /// Prompt lengths in tokens (comma-separated; k = 1024).
    #[arg(long, value_delimiter = ',', default_value = "1k,2k,4k,8k,16k,32k", value_parser = parse_tokens)]
    prompts: Vec<usize>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 256)]
    block_tokens: usize,
    /// The SSD tier's file or block device, PATH[:SIZE] (`none`: DRAM only).
    #[arg(long, default_value = "./strata-data/bench/ttft-ssd.log:4G")]
    ssd: String,
    /// A pool tier, tcp://ADDR:PORT[,ADDR:PORT...]/NQN (a strata volume): measured last,
    /// with the SSD tier taken away so that every block comes from it.
    #[arg(long)]
    pool: Option<crate::kv_cmd::PoolSpec>,
    /// Allow an SSD file on a filesystem without O_DIRECT (tmpfs).
    #[arg(long)]
    allow_buffered: bool,
    /// Compute threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Connections a load fetches over at once (1: one MGET at a time).
    #[arg(long, default_value_t = 4)]
    load_lanes: usize,
    /// Conversation trace for the multi-turn replay (JSON lines with
    /// `hash_ids`); `none` skips the replay.
    #[arg(long, default_value = "../shared/traces/mooncake_conversation_trace.jsonl")]
    replay: String,
    /// Requests replayed (the trace's first N, in order).
    #[arg(long, default_value_t = 200)]
    replay_requests: usize,
    /// Tokens per trace block in the replay. The trace's blocks are 512
    /// tokens; fewer keep a CPU replay short and understate the store's
    /// gain (shorter prompts recompute faster).
    #[arg(long, default_value_t = 32)]
    replay_block_tokens: usize,
    /// Blocks the engine's own (GPU) prefix cache holds in the replay,
    /// with and without the store.
    #[arg(long, default_value_t = 64)]
    replay_engine_blocks: u64,
    /// Model shape for the GPU projection.
    #[arg(long, default_value = "llama-3.1-70b")]
    project_model: String,
    /// The projection's GPU: dense bf16 TFLOPS (H100 SXM: 989).
    #[arg(long, default_value_t = 989.0)]
    gpu_tflops: f64,
    /// The fraction of that rate a prefill sustains.
    #[arg(long, default_value_t = 0.5)]
    mfu: f64,
    /// Where the prefill runs: cpu (cuda needs a build with a CUDA
    /// backend, which this one does not have).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

fn parse_tokens(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1024),
        None => (s, 1),
    };
    let n: usize = num.trim().parse().map_err(|_| format!("{s:?}: expected a token count like 4096 or 4k"))?;
    match n.checked_mul(mul) {
        Some(v) if v >= 2 => Ok(v),
        _ => Err(format!("{s:?}: a prompt needs at least 2 tokens")),
    }
}

/// Deterministic token ids: `seed` picks the sequence.
fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

fn key_context(name: &str, page: usize, what: &str) -> KeyContext {
    KeyContext {
        model: format!("strata-bench-ttft/{name}"),
        revision: "seed-42".into(),
        dtype: "f32".into(),
        layout: "layer,kv,token,dim".into(),
        page_size: page as u32,
        tp_rank: 0,
        tp_size: 1,
        tags: vec![("run".into(), what.into())],
    }
}

/// Largest relative difference between two logit vectors.
fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f32::max)
}

/// Logits from a loaded prefix may differ from a whole prefill's only by
/// float rounding.
const LOGIT_TOLERANCE: f32 = 1e-3;

/// The store and its server on a runtime of their own, and a client.
struct Served {
    rt: tokio::runtime::Runtime,
    store: Arc<KvStore>,
    client: Client,
    /// The connections a load fetches over at once (`--load-lanes`):
    /// lane `l` of `n` fetches batches `l`, `l + n`, ..., so that round
    /// trips overlap with each other and with copying the blocks that
    /// came back into the cache.
    lanes: Vec<Arc<tokio::sync::Mutex<Client>>>,
}

/// Blocks per `MGET` (and `MSET`).
const BATCH_BLOCKS: usize = 16;

#[derive(Clone)]
struct StoreSpec {
    dram: u64,
    ssd: Option<(PathBuf, Option<u64>)>,
    pool: Option<crate::kv_cmd::PoolSpec>,
    allow_buffered: bool,
    load_lanes: usize,
}

impl Served {
    fn start(spec: &StoreSpec, wipe: bool) -> anyhow::Result<Served> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (store, client, lanes) = rt.block_on(async {
            let ssd: Option<Arc<dyn BlockDevice>> = match &spec.ssd {
                None => None,
                Some((path, size)) => Some(crate::kv_cmd::open_ssd(path, *size, spec.allow_buffered)?),
            };
            let pool: Option<Arc<dyn BlockDevice>> = match &spec.pool {
                None => None,
                Some(t) => Some(crate::kv_cmd::connect_pool(t, std::time::Duration::from_secs(30)).await?),
            };
            let seg = strata_kv::store::segment_size_for(ssd.as_ref().map(|d| d.geometry().size_bytes()).unwrap_or(0));
            let cfg = KvConfig { dram_bytes: spec.dram, admit: Admit::All, segment_bytes: seg };
            let tiers = strata_kv::Tiers { ssd, pool, peers: Vec::new() };
            let store = KvStore::open_tiers(cfg, tiers, Box::new(strata_kv::store::unix_ms))
                .await
                .context("opening the KV store")?;
            if wipe {
                store.clear();
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let cfg = strata_kv::server::ServerConfig::default();
            tokio::spawn(strata_kv::server::serve(store.clone(), listener, cfg, std::future::pending()));
            let client = Client::connect(addr).await.context("connecting to the KV server")?;
            let mut lanes = Vec::new();
            for _ in 0..spec.load_lanes {
                let c = Client::connect(addr).await.context("connecting to the KV server")?;
                lanes.push(Arc::new(tokio::sync::Mutex::new(c)));
            }
            anyhow::Ok((store, client, lanes))
        })?;
        Ok(Served { rt, store, client, lanes })
    }

    /// Writes every block to the SSD tier and stops, as `strata kv serve`
    /// does on SIGTERM; then starts again on the same file.
    fn restart(self, spec: &StoreSpec) -> anyhow::Result<Served> {
        let Served { rt, store, client, lanes } = self;
        drop((client, lanes));
        rt.block_on(store.flush(true)).context("flushing the store before the restart")?;
        drop(store);
        rt.shutdown_timeout(Duration::from_secs(5));
        Served::start(spec, false)
    }

    fn put_blocks(
        &mut self,
        keys: &[String],
        cache: &KvCache,
        block_tokens: usize,
        first: usize,
    ) -> anyhow::Result<()> {
        for (batch, names) in keys.chunks(BATCH_BLOCKS).enumerate() {
            let pairs: Vec<(&str, Vec<u8>)> = names
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    (k.as_str(), cache.to_block((first + batch * BATCH_BLOCKS + i) * block_tokens, block_tokens))
                })
                .collect();
            self.rt.block_on(self.client.mset(&pairs)).context("storing KV blocks")?;
        }
        Ok(())
    }

    /// Appends the blocks of `keys` to `cache`; returns the bytes moved.
    /// The batches of `MGET`s go out over every lane at once and are
    /// copied in order as they come back.
    fn get_blocks(&mut self, keys: &[String], cache: &mut KvCache, block_tokens: usize) -> anyhow::Result<u64> {
        let batches: Vec<&[String]> = keys.chunks(BATCH_BLOCKS).collect();
        let mut lanes = Vec::new();
        for (l, client) in self.lanes.iter().enumerate() {
            // Two batches ahead per lane at most: memory stays bounded.
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let mine: Vec<Vec<String>> = batches.iter().skip(l).step_by(self.lanes.len()).map(|b| b.to_vec()).collect();
            let client = client.clone();
            self.rt.spawn(async move {
                let mut c = client.lock().await;
                for names in mine {
                    let r = c.mget(&names).await;
                    let failed = r.is_err();
                    // A receiver gone (the load failed) or an error ends the lane.
                    if tx.send(r).await.is_err() || failed {
                        return;
                    }
                }
            });
            lanes.push(rx);
        }
        let mut bytes = 0;
        for i in 0..batches.len() {
            let values = self
                .rt
                .block_on(lanes[i % self.lanes.len()].recv())
                .context("a load connection stopped")?
                .context("loading KV blocks")?;
            for v in values {
                let v = v.context("a block found by the lookup was gone when loaded")?;
                cache.load_block(block_tokens, &v)?;
                bytes += v.len() as u64;
            }
        }
        Ok(bytes)
    }

    fn lookup(&mut self, keys: &[String]) -> anyhow::Result<usize> {
        Ok(self.rt.block_on(self.client.lookup(keys))?)
    }
}

/// One prompt length's measurements.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    tokens: usize,
    recompute_s: f64,
    /// Per tier: seconds to first token, seconds spent fetching and
    /// copying, bytes fetched.
    tiers: Vec<TierRow>,
}

#[derive(Debug, Clone, serde::Serialize)]
struct TierRow {
    tier: &'static str,
    ttft_s: f64,
    fetch_s: f64,
    bytes: u64,
}

struct Prompt {
    tokens: Vec<u32>,
    keys: Vec<String>,
    cache: KvCache,
    logits: Vec<f32>,
}

/// Loads every block of `p` from the store, computes the last token, and
/// checks the result against the recomputed one.
fn load_prompt(
    srv: &mut Served,
    model: &Model,
    p: &Prompt,
    block_tokens: usize,
    tier: &'static str,
) -> anyhow::Result<TierRow> {
    let t0 = Instant::now();
    let found = srv.lookup(&p.keys)?;
    anyhow::ensure!(found == p.keys.len(), "{tier}: the lookup found {found} of {} blocks", p.keys.len());
    let mut cache = KvCache::with_capacity(model.shape(), p.tokens.len());
    let bytes = srv.get_blocks(&p.keys, &mut cache, block_tokens)?;
    let fetch_s = t0.elapsed().as_secs_f64();
    // Every position is cached; the engine still computes the last one
    // to get the logits of the first new token.
    let n = p.tokens.len();
    cache.truncate(n - 1);
    let logits = model.prefill(&p.tokens[n - 1..], &mut cache);
    let ttft_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(cache.prefix_equals(&p.cache, n - 1), "{tier}: loaded keys/values differ from the recomputed ones");
    let d = max_rel_diff(&logits, &p.logits);
    anyhow::ensure!(d <= LOGIT_TOLERANCE, "{tier}: logits after loading differ from recompute by {d}");
    Ok(TierRow { tier, ttft_s, fetch_s, bytes })
}

/// Runs the benchmark and prints the tables (or JSON).
pub fn ttft(args: &TtftArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.device == "cpu",
        "--device {:?}: this build of strata computes on the CPU only (it has no CUDA backend); \
         the GPU projection it prints is the paper check",
        args.device
    );
    let names = || PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let shape =
        Shape::preset(&args.model).with_context(|| format!("--model {:?}: expected one of {}", args.model, names()))?;
    let project = Shape::preset(&args.project_model)
        .with_context(|| format!("--project-model {:?}: expected one of {}", args.project_model, names()))?;
    anyhow::ensure!(args.block_tokens >= 1 && args.replay_block_tokens >= 1, "block sizes must be at least 1 token");
    anyhow::ensure!((1..=64).contains(&args.load_lanes), "--load-lanes {}: expected 1 to 64", args.load_lanes);
    for &p in &args.prompts {
        anyhow::ensure!(
            p % args.block_tokens == 0,
            "prompt {p} is not a whole number of {}-token blocks",
            args.block_tokens
        );
    }
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let model = Model::random(shape, 42, threads).map_err(anyhow::Error::msg)?;
    let per_token = shape.kv_bytes_per_token(4);
    let bench_tokens: u64 = args.prompts.iter().map(|&p| p as u64).sum();
    let trace = if args.replay == "none" { None } else { Some(load_trace(&args.replay, args.replay_requests)?) };
    let replay_tokens: u64 = trace.iter().flatten().flatten().collect::<std::collections::HashSet<_>>().len() as u64
        * args.replay_block_tokens as u64;
    let need = (bench_tokens + replay_tokens) * per_token;
    let spec = StoreSpec {
        dram: need * 3 / 2 + (64 << 20),
        ssd: if args.ssd == "none" { None } else { Some(crate::kv_cmd::parse_ssd(&args.ssd)?) },
        pool: args.pool.clone(),
        allow_buffered: args.allow_buffered,
        load_lanes: args.load_lanes,
    };
    let mut srv = Served::start(&spec, true)?;
    let st = srv.store.stats();
    for (tier, present, cap) in
        [("SSD", spec.ssd.is_some(), st.ssd_capacity), ("pool", spec.pool.is_some(), st.pool_capacity)]
    {
        anyhow::ensure!(!present || need * 5 / 4 <= cap, "the {tier} tier holds {cap} bytes; this run stores {need}");
    }
    let mut prompts = Vec::new();
    let mut rows = Vec::new();
    for &n in &args.prompts {
        eprintln!("prompt of {n} tokens: recomputing the prefill");
        let toks = tokens(n as u64, n, shape.vocab);
        let mut cache = KvCache::new(&shape);
        let t0 = Instant::now();
        let logits = model.prefill(&toks, &mut cache);
        let recompute_s = t0.elapsed().as_secs_f64();
        let keys = key_context(&args.model, args.block_tokens, "prompts").chain(&toks);
        srv.put_blocks(&keys, &cache, args.block_tokens, 0)?;
        let p = Prompt { tokens: toks, keys, cache, logits };
        let dram = load_prompt(&mut srv, &model, &p, args.block_tokens, "dram")?;
        rows.push(Row { tokens: n, recompute_s, tiers: vec![dram] });
        prompts.push(p);
    }
    if spec.ssd.is_some() {
        eprintln!("restarting the store: DRAM empty, every block on the SSD tier");
        srv = srv.restart(&spec)?;
        let before = srv.store.stats();
        anyhow::ensure!(before.dram_keys == 0, "the restarted store holds {} blocks in DRAM", before.dram_keys);
        for (row, p) in rows.iter_mut().zip(&prompts) {
            row.tiers.push(load_prompt(&mut srv, &model, p, args.block_tokens, "ssd")?);
        }
        let read = srv.store.stats().hits_ssd - before.hits_ssd;
        let blocks: usize = prompts.iter().map(|p| p.keys.len()).sum();
        anyhow::ensure!(read as usize >= blocks, "only {read} of {blocks} blocks were read from the SSD tier");
    }
    if spec.pool.is_some() {
        eprintln!("restarting the store without its SSD tier: every block from the pool volume");
        let pool_only = StoreSpec { ssd: None, ..spec.clone() };
        srv = srv.restart(&pool_only)?;
        let before = srv.store.stats();
        for (row, p) in rows.iter_mut().zip(&prompts) {
            row.tiers.push(load_prompt(&mut srv, &model, p, args.block_tokens, "pool")?);
        }
        let read = srv.store.stats().hits_pool - before.hits_pool;
        let blocks: usize = prompts.iter().map(|p| p.keys.len()).sum();
        anyhow::ensure!(read as usize >= blocks, "only {read} of {blocks} blocks were read from the pool tier");
    }
    drop(prompts);
    let replay = match &trace {
        Some(reqs) => Some(replay(&mut srv, &model, reqs, args)?),
        None => None,
    };
    let proj = projection(&project, &rows, args);
    if args.json {
        let v = serde_json::json!({
            "model": args.model, "shape": format!("{shape:?}"), "threads": threads,
            "block_tokens": args.block_tokens, "kv_bytes_per_token": per_token,
            "prompts": rows, "replay": replay, "projection": proj,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_tables(args, &shape, threads, &rows, replay.as_ref(), &proj);
    Ok(())
}

fn load_trace(path: &str, limit: usize) -> anyhow::Result<Vec<Vec<u64>>> {
    Ok(returning(crate::kv_bench::load(std::path::Path::new(path), None)?, limit))
}

/// Up to `limit` requests of conversations that come back: requests are
/// grouped by their first two blocks (the first is a shared system prompt
/// in the Mooncake trace, the second starts the conversation), the first
/// conversations with two or more turns are taken whole, and their
/// requests are kept in trace order. A trace with no returning
/// conversation gives its first `limit` requests.
fn returning(reqs: Vec<Vec<u64>>, limit: usize) -> Vec<Vec<u64>> {
    let mut convs: Vec<Vec<usize>> = Vec::new();
    let mut by_head = std::collections::HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        let head = (r.first().copied(), r.get(1).copied());
        let c = *by_head.entry(head).or_insert_with(|| {
            convs.push(Vec::new());
            convs.len() - 1
        });
        convs[c].push(i);
    }
    let mut picked: Vec<usize> = Vec::new();
    for c in convs.iter().filter(|c| c.len() >= 2) {
        let room = limit - picked.len();
        picked.extend(c.iter().take(room));
        if picked.len() == limit {
            break;
        }
    }
    if picked.is_empty() {
        picked = (0..reqs.len().min(limit)).collect();
    }
    picked.sort_unstable();
    picked.into_iter().map(|i| reqs[i].clone()).collect()
}

/// The replay's outcome.
#[derive(Debug, Clone, serde::Serialize)]
struct Replay {
    requests: usize,
    prompt_tokens: u64,
    block_tokens: usize,
    engine_blocks: u64,
    /// Without the store: only the engine's own prefix cache.
    alone_s: f64,
    alone_hit_tokens: u64,
    /// With the store behind the engine's cache.
    store_s: f64,
    store_hit_tokens: u64,
    store_engine_hit_tokens: u64,
}

/// The engine's own prefix cache (GPU memory in a real deployment): LRU
/// over whole blocks.
struct EngineCache {
    lru: strata_kv::policy::Lru<String>,
    blocks: std::collections::HashMap<String, Vec<u8>>,
    capacity: u64,
}

impl EngineCache {
    fn new(capacity: u64) -> EngineCache {
        EngineCache { lru: Default::default(), blocks: Default::default(), capacity }
    }

    fn hit(&mut self, key: &String) -> Option<&Vec<u8>> {
        use strata_kv::policy::Policy;
        if self.lru.touch(key) { self.blocks.get(key) } else { None }
    }

    fn insert(&mut self, key: String, block: Vec<u8>) {
        use strata_kv::policy::Policy;
        if self.capacity == 0 || self.lru.contains(&key) {
            return;
        }
        for e in self.lru.evict(self.capacity, 1, &mut |_| false) {
            self.blocks.remove(&e.key);
        }
        self.lru.insert(key.clone(), 1);
        self.blocks.insert(key, block);
    }
}

/// Replays the trace twice with the same engine cache size: alone, then
/// with the store behind it. Each request's first-token logits must agree
/// between the two runs.
fn replay(srv: &mut Served, model: &Model, reqs: &[Vec<u64>], args: &TtftArgs) -> anyhow::Result<Replay> {
    let bt = args.replay_block_tokens;
    let vocab = model.shape().vocab;
    let prompt = |chain: &[u64]| -> Vec<u32> { chain.iter().flat_map(|&h| tokens(h + 1_000_003, bt, vocab)).collect() };
    let ctx = key_context(&args.model, bt, "replay");
    let mut out = Replay {
        requests: reqs.len(),
        prompt_tokens: 0,
        block_tokens: bt,
        engine_blocks: args.replay_engine_blocks,
        alone_s: 0.0,
        alone_hit_tokens: 0,
        store_s: 0.0,
        store_hit_tokens: 0,
        store_engine_hit_tokens: 0,
    };
    let mut reference: Vec<Vec<f32>> = Vec::with_capacity(reqs.len());
    for with_store in [false, true] {
        eprintln!("replaying {} requests {} the store", reqs.len(), if with_store { "with" } else { "without" });
        let mut engine = EngineCache::new(args.replay_engine_blocks);
        let t0 = Instant::now();
        for (i, chain) in reqs.iter().enumerate() {
            let toks = prompt(chain);
            let keys = ctx.chain(&toks);
            let mut cache = KvCache::with_capacity(model.shape(), toks.len());
            // The engine's own cache first, then the store for the rest
            // of the prefix.
            let mut have = 0;
            while have < keys.len() {
                match engine.hit(&keys[have]) {
                    Some(b) => cache.load_block(bt, b)?,
                    None => break,
                }
                have += 1;
            }
            let from_engine = have;
            if with_store && have < keys.len() {
                let found = srv.lookup(&keys[have..])?;
                srv.get_blocks(&keys[have..have + found], &mut cache, bt)?;
                have += found;
            }
            if with_store {
                out.store_engine_hit_tokens += (from_engine * bt) as u64;
                out.store_hit_tokens += (have * bt) as u64;
            } else {
                out.alone_hit_tokens += (have * bt) as u64;
                out.prompt_tokens += toks.len() as u64;
            }
            let cached = (have * bt).min(toks.len() - 1);
            cache.truncate(cached);
            let logits = model.prefill(&toks[cached..], &mut cache);
            for (b, k) in keys.iter().enumerate().skip(from_engine) {
                engine.insert(k.clone(), cache.to_block(b * bt, bt));
            }
            if with_store {
                // Stored before the next request, and counted in its time.
                if have < keys.len() {
                    srv.put_blocks(&keys[have..], &cache, bt, have)?;
                }
                let d = max_rel_diff(&logits, &reference[i]);
                anyhow::ensure!(d <= LOGIT_TOLERANCE, "replay request {i}: logits with the store differ by {d}");
            } else {
                reference.push(logits);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        if with_store { out.store_s = secs } else { out.alone_s = secs }
    }
    Ok(out)
}

/// One projected prompt length.
#[derive(Debug, Clone, serde::Serialize)]
struct Projected {
    tokens: usize,
    recompute_s: f64,
    /// Per measured tier: its bandwidth and the projected load time.
    tiers: Vec<(String, f64, f64)>,
    /// The load bandwidth (bytes/s) that makes loading 56x faster than
    /// recomputing (the seeds' claim); infinite when none can.
    bandwidth_for_56x: f64,
}

/// The projection: the GPU prefill rate against each tier's measured
/// bandwidth (formula in docs/kv.md).
fn projection(shape: &Shape, rows: &[Row], args: &TtftArgs) -> Vec<Projected> {
    let rate = args.gpu_tflops * 1e12 * args.mfu;
    let per_token = shape.kv_bytes_per_token(2) as f64;
    // Each tier's bandwidth as measured at the longest prompt.
    let bw: Vec<(String, f64)> = rows
        .last()
        .map(|r| r.tiers.iter().map(|t| (t.tier.to_string(), t.bytes as f64 / t.fetch_s)).collect())
        .unwrap_or_default();
    let mut lengths: Vec<usize> = rows.iter().map(|r| r.tokens).collect();
    for extra in [65_536, 131_072] {
        if !lengths.contains(&extra) {
            lengths.push(extra);
        }
    }
    lengths
        .into_iter()
        .map(|n| {
            let recompute_s = shape.prefill_flops(0, n as u64) / rate;
            let tail_s = shape.prefill_flops(n as u64 - 1, 1) / rate;
            let tiers = bw.iter().map(|(t, b)| (t.clone(), *b, per_token * n as f64 / b + tail_s)).collect();
            let budget = recompute_s / 56.0 - tail_s;
            let bandwidth_for_56x = if budget > 0.0 { per_token * n as f64 / budget } else { f64::INFINITY };
            Projected { tokens: n, recompute_s, tiers, bandwidth_for_56x }
        })
        .collect()
}

fn print_tables(
    args: &TtftArgs,
    shape: &Shape,
    threads: usize,
    rows: &[Row],
    replay: Option<&Replay>,
    proj: &[Projected],
) {
    println!(
        "model {} on the CPU ({threads} threads): {} layers, width {}, {} heads / {} KV heads, {} KiB of f32 KV a token; {}-token blocks",
        args.model,
        shape.layers,
        shape.hidden,
        shape.heads,
        shape.kv_heads,
        shape.kv_bytes_per_token(4) / 1024,
        args.block_tokens
    );
    println!("every load was checked: keys/values bit-equal to the recompute's, logits within {LOGIT_TOLERANCE}");
    let tiers: Vec<&str> = rows.first().map(|r| r.tiers.iter().map(|t| t.tier).collect()).unwrap_or_default();
    print!("{:>8} {:>12}", "tokens", "recompute s");
    for t in &tiers {
        print!(" {:>10} {:>8} {:>8}", format!("{t} s"), format!("{t} GB/s"), format!("{t} x"));
    }
    println!();
    for r in rows {
        print!("{:>8} {:>12.3}", r.tokens, r.recompute_s);
        for t in &r.tiers {
            print!(" {:>10.4} {:>8.2} {:>8.1}", t.ttft_s, t.bytes as f64 / t.fetch_s / 1e9, r.recompute_s / t.ttft_s);
        }
        println!();
    }
    if let Some(r) = replay {
        println!(
            "\nmulti-turn replay: {} requests, {} prompt tokens ({}-token blocks), engine cache of {} blocks",
            r.requests, r.prompt_tokens, r.block_tokens, r.engine_blocks
        );
        let pct = |h: u64| 100.0 * h as f64 / r.prompt_tokens.max(1) as f64;
        println!(
            "  without the store: {:.2} requests/s, {:.1}% of prompt tokens cached",
            r.requests as f64 / r.alone_s,
            pct(r.alone_hit_tokens)
        );
        println!(
            "  with the store:    {:.2} requests/s, {:.1}% cached ({:.1}% from the engine's cache)",
            r.requests as f64 / r.store_s,
            pct(r.store_hit_tokens),
            pct(r.store_engine_hit_tokens)
        );
        println!("  requests/s with/without: {:.2}x", r.alone_s / r.store_s);
    }
    println!(
        "\nprojection: {} in bf16 on a GPU at {} TFLOPS x {} MFU; load at each tier's bandwidth measured above (longest prompt)",
        args.project_model, args.gpu_tflops, args.mfu
    );
    println!("  TTFT_recompute = F(n) / R;  TTFT_load = n * kv_bytes_per_token / W + F(last token) / R  (docs/kv.md)");
    for p in proj {
        print!("{:>8} {:>10.3}s", p.tokens, p.recompute_s);
        for (t, w, s) in &p.tiers {
            print!("  {t} @ {:.2} GB/s: {:.3}s = {:.1}x", w / 1e9, s, p.recompute_s / s);
        }
        println!("  (56x needs {:.1} GB/s)", p.bandwidth_for_56x / 1e9);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_parse_with_k() {
        assert_eq!(parse_tokens("4k").unwrap(), 4096);
        assert_eq!(parse_tokens("300").unwrap(), 300);
        assert!(parse_tokens("1").is_err() && parse_tokens("x").is_err() && parse_tokens("k").is_err());
    }

    #[test]
    fn the_replay_takes_conversations_that_return_in_trace_order() {
        let r = |v: &[u64]| v.to_vec();
        // Conversations (0,1) and (0,3) return; (0,2) and the one-block
        // request do not.
        let reqs = vec![r(&[0, 1, 5]), r(&[0, 2]), r(&[0, 3]), r(&[9]), r(&[0, 1, 5, 6]), r(&[0, 3, 7]), r(&[0, 1, 8])];
        assert_eq!(
            returning(reqs.clone(), 10),
            vec![r(&[0, 1, 5]), r(&[0, 3]), r(&[0, 1, 5, 6]), r(&[0, 3, 7]), r(&[0, 1, 8])]
        );
        // The limit cuts the last conversation taken.
        assert_eq!(returning(reqs.clone(), 4), vec![r(&[0, 1, 5]), r(&[0, 3]), r(&[0, 1, 5, 6]), r(&[0, 1, 8])]);
        // Nothing returns: the first requests.
        assert_eq!(returning(vec![r(&[1]), r(&[2]), r(&[3])], 2), vec![r(&[1]), r(&[2])]);
    }

    #[test]
    fn prompts_are_deterministic_and_differ_by_seed() {
        assert_eq!(tokens(5, 100, 32_000), tokens(5, 100, 32_000));
        assert_ne!(tokens(5, 100, 32_000), tokens(6, 100, 32_000));
        assert!(tokens(5, 1000, 7).iter().all(|&t| t < 7));
    }
}
