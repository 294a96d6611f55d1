//! The multi-turn replay: the returning conversations of a trace, run
//! through an engine with its own prefix cache, in alternating passes:
//! a control, in which the store is asked and contributes nothing, and
//! the store behind that cache. The store's DRAM is sized below the
//! replay's distinct blocks, so it evicts and serves part of its hits
//! from its SSD tier; each store pass starts from an empty store, and
//! every pass from an empty engine cache, so passes of a kind repeat the
//! same work and their spread is the machine's noise. Each request's
//! first-token logits must agree across all passes.

use std::time::Instant;

use anyhow::Context;
use strata_prefill::{KvCache, Model};

use super::measure::Spread;
use super::options::TtftOptions;
use super::prompt::{LOGIT_TOLERANCE, key_context, max_rel_diff, tokens};
use super::served::Served;

/// The requests the replay runs: the trace's returning conversations, up
/// to `limit` requests (see [`returning`]).
pub(super) fn load_trace(path: &str, limit: usize) -> anyhow::Result<Vec<Vec<u64>>> {
    Ok(returning(crate::trace_file::load(std::path::Path::new(path), None)?, limit))
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

/// One pass over the replayed requests.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Pass {
    /// `"control"` (the store is asked and holds nothing) or `"store"`.
    pub(super) kind: &'static str,
    pub(super) seconds: f64,
    /// CPU seconds the whole process (engine, store and its server) spent
    /// in the pass: unlike `seconds`, not stretched when other work on a
    /// shared machine takes the cores (but blind to time spent waiting
    /// for the SSD).
    pub(super) cpu_s: f64,
    /// Of `seconds`: looking up and loading from the store, computing,
    /// and storing new blocks (the engine's own cache is in none of them).
    pub(super) fetch_s: f64,
    pub(super) compute_s: f64,
    pub(super) put_s: f64,
    /// Prompt tokens found in the engine's own cache.
    pub(super) engine_hit_tokens: u64,
    /// Prompt tokens loaded from the store, by the tier that served them.
    pub(super) dram_hit_tokens: u64,
    pub(super) ssd_hit_tokens: u64,
    pub(super) pool_hit_tokens: u64,
    /// Blocks that left the store's DRAM during the pass.
    pub(super) store_evicted: u64,
}

/// The replay's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Replay {
    pub(super) requests: usize,
    /// Prompt tokens of one pass.
    pub(super) prompt_tokens: u64,
    pub(super) block_tokens: usize,
    pub(super) engine_blocks: u64,
    /// The store's DRAM during the replay, in blocks and bytes, and the
    /// replay's distinct blocks.
    pub(super) store_dram_blocks: u64,
    pub(super) store_dram_bytes: u64,
    pub(super) distinct_blocks: u64,
    /// Every pass, in the order run: control and store alternating.
    pub(super) passes: Vec<Pass>,
    /// The control passes' median seconds, and the prompt tokens the
    /// engine's own cache served in the first.
    pub(super) alone_s: f64,
    pub(super) alone_hit_tokens: u64,
    /// The store passes' median seconds, and the prompt tokens served from
    /// the engine's cache and the store together (and from the engine's
    /// alone) in the first.
    pub(super) store_s: f64,
    pub(super) store_hit_tokens: u64,
    pub(super) store_engine_hit_tokens: u64,
    /// Seconds per pass of each kind.
    pub(super) control_spread: Spread,
    pub(super) store_spread: Spread,
    /// Control seconds over store seconds: `median` is the ratio of the
    /// medians, `min` and `max` the range of the ratios of the passes run
    /// side by side.
    pub(super) speedup: Spread,
    /// The same in CPU seconds.
    pub(super) cpu_speedup: Spread,
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

/// Replays the trace `args.replay_passes` times each way, alternating:
/// a control pass, in which each request asks the store for its prefix
/// under keys that were never stored (the store contributes a lookup and
/// nothing else), then a pass with the store behind the engine's cache,
/// started from an empty store. Each request's first-token logits must
/// agree with the first control pass's.
pub(super) fn replay(srv: &mut Served, model: &Model, reqs: &[Vec<u64>], args: &TtftOptions) -> anyhow::Result<Replay> {
    let bt = args.replay_block_tokens;
    let vocab = model.shape().vocab;
    let prompts: Vec<Vec<u32>> =
        reqs.iter().map(|chain| chain.iter().flat_map(|&h| tokens(h + 1_000_003, bt, vocab)).collect()).collect();
    let store_ctx = key_context(&args.model, bt, "replay");
    let control_ctx = key_context(&args.model, bt, "replay-control");
    let store_keys: Vec<Vec<String>> = prompts.iter().map(|t| store_ctx.chain(t)).collect();
    let control_keys: Vec<Vec<String>> = prompts.iter().map(|t| control_ctx.chain(t)).collect();
    let distinct = store_keys.iter().flatten().collect::<std::collections::HashSet<_>>().len() as u64;
    let block_bytes = KvCache::new(model.shape()).block_bytes(bt) as u64;
    let mut reference: Vec<Vec<f32>> = Vec::with_capacity(reqs.len());
    let mut passes = Vec::new();
    let rounds = args.replay_passes.max(1);
    for round in 0..rounds {
        for with_store in [false, true] {
            let n = 2 * round + 1 + usize::from(with_store);
            eprintln!("replay pass {n} of {}: {} requests, {}", 2 * rounds, reqs.len(), kind(with_store));
            if with_store {
                // Every store pass starts from the same (empty) store.
                srv.store.clear();
            }
            let keys = if with_store { &store_keys } else { &control_keys };
            passes.push(pass(srv, model, &prompts, keys, with_store, args, &mut reference)?);
        }
    }
    let of = |kind: &str, f: fn(&Pass) -> f64| passes.iter().filter(|p| p.kind == kind).map(f).collect::<Vec<_>>();
    let (control, store) = (of("control", |p| p.seconds), of("store", |p| p.seconds));
    let (control_spread, store_spread) = (Spread::of(&control), Spread::of(&store));
    let cpu_speedup = speedup(&of("control", |p| p.cpu_s), &of("store", |p| p.cpu_s));
    let speedup = speedup(&control, &store);
    let first = |kind: &str| passes.iter().find(|p| p.kind == kind).cloned();
    let (c0, s0) = (first("control").context("no control pass")?, first("store").context("no store pass")?);
    Ok(Replay {
        requests: reqs.len(),
        prompt_tokens: prompts.iter().map(|p| p.len() as u64).sum(),
        block_tokens: bt,
        engine_blocks: args.replay_engine_blocks,
        store_dram_blocks: args.replay_store_blocks,
        store_dram_bytes: args.replay_store_blocks * block_bytes,
        distinct_blocks: distinct,
        alone_s: control_spread.median,
        alone_hit_tokens: c0.engine_hit_tokens,
        store_s: store_spread.median,
        store_hit_tokens: s0.engine_hit_tokens + s0.dram_hit_tokens + s0.ssd_hit_tokens + s0.pool_hit_tokens,
        store_engine_hit_tokens: s0.engine_hit_tokens,
        passes,
        control_spread,
        store_spread,
        speedup,
        cpu_speedup,
    })
}

/// `"store"` or `"control"`.
fn kind(with_store: bool) -> &'static str {
    if with_store { "store" } else { "control" }
}

/// One pass over `prompts` (with their block `keys`) through a fresh
/// engine cache, with the store behind it or as the control. The first
/// pass fills `reference` with each request's logits; later ones must
/// agree with it.
fn pass(
    srv: &mut Served,
    model: &Model,
    prompts: &[Vec<u32>],
    keys: &[Vec<String>],
    with_store: bool,
    args: &TtftOptions,
    reference: &mut Vec<Vec<f32>>,
) -> anyhow::Result<Pass> {
    let bt = args.replay_block_tokens;
    let kind = kind(with_store);
    let before = srv.store.stats();
    let cpu0 = process_cpu_s();
    let t0 = Instant::now();
    let mut engine = EngineCache::new(args.replay_engine_blocks);
    let mut pass = Pass {
        kind,
        seconds: 0.0,
        cpu_s: 0.0,
        fetch_s: 0.0,
        compute_s: 0.0,
        put_s: 0.0,
        engine_hit_tokens: 0,
        dram_hit_tokens: 0,
        ssd_hit_tokens: 0,
        pool_hit_tokens: 0,
        store_evicted: 0,
    };
    for (i, (toks, keys)) in prompts.iter().zip(keys).enumerate() {
        let mut cache = KvCache::with_capacity(model.shape(), toks.len());
        // The engine's own cache first, then the store for the rest of
        // the prefix.
        let mut have = 0;
        while have < keys.len() {
            match engine.hit(&keys[have]) {
                Some(b) => cache.load_block(bt, b)?,
                None => break,
            }
            have += 1;
        }
        let from_engine = have;
        pass.engine_hit_tokens += (from_engine * bt) as u64;
        let t1 = Instant::now();
        if have < keys.len() {
            let found = srv.lookup(&keys[have..])?;
            anyhow::ensure!(with_store || found == 0, "replay request {i}: the control's keys were found");
            srv.get_blocks(&keys[have..have + found], &mut cache, bt)?;
            have += found;
        }
        let t2 = Instant::now();
        let cached = (have * bt).min(toks.len() - 1);
        cache.truncate(cached);
        let logits = model.prefill(&toks[cached..], &mut cache);
        let t3 = Instant::now();
        pass.fetch_s += (t2 - t1).as_secs_f64();
        pass.compute_s += (t3 - t2).as_secs_f64();
        for (b, k) in keys.iter().enumerate().skip(from_engine) {
            engine.insert(k.clone(), cache.to_block(b * bt, bt));
        }
        if with_store && have < keys.len() {
            // Stored before the next request, and counted in its time.
            let t4 = Instant::now();
            srv.put_blocks(&keys[have..], &cache, bt, have)?;
            pass.put_s += t4.elapsed().as_secs_f64();
        }
        if reference.len() < prompts.len() {
            reference.push(logits);
        } else {
            let d = max_rel_diff(&logits, &reference[i]);
            anyhow::ensure!(d <= LOGIT_TOLERANCE, "replay request {i}: logits in a {kind} pass differ by {d}");
        }
    }
    pass.seconds = t0.elapsed().as_secs_f64();
    pass.cpu_s = process_cpu_s() - cpu0;
    let after = srv.store.stats();
    let tokens = |blocks: u64| blocks * bt as u64;
    pass.dram_hit_tokens = tokens(after.hits_dram.saturating_sub(before.hits_dram));
    pass.ssd_hit_tokens = tokens(after.hits_ssd.saturating_sub(before.hits_ssd));
    pass.pool_hit_tokens = tokens(after.hits_pool.saturating_sub(before.hits_pool));
    pass.store_evicted = after.evicted.saturating_sub(before.evicted);
    Ok(pass)
}

/// Control over store: the ratio of the medians, and the range of the
/// ratios of the passes run side by side.
fn speedup(control: &[f64], store: &[f64]) -> Spread {
    let ratios: Vec<f64> = control.iter().zip(store).map(|(c, s)| c / s).collect();
    Spread { median: Spread::of(control).median / Spread::of(store).median, ..Spread::of(&ratios) }
}

/// CPU seconds this process has used, all threads, live and exited
/// (`utime + stime` of `/proc/self/stat`, in the kernel's fixed 100 Hz
/// user-visible clock ticks); NaN where that file cannot be read, which
/// the report shows as such.
fn process_cpu_s() -> f64 {
    let ticks = || -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name, in parentheses, may hold spaces: fields are
        // counted after its closing one; utime and stime are the 14th
        // and 15th fields, the 12th and 13th after it.
        let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().skip(11);
        Some(f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?)
    };
    ticks().map_or(f64::NAN, |t| t as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speedup_is_the_ratio_of_medians_and_the_range_of_pairs() {
        let s = speedup(&[4.0, 6.0, 5.0], &[2.0, 2.0, 4.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.25, 3.0));
    }

    #[test]
    fn the_process_cpu_clock_moves_with_work() {
        let t0 = process_cpu_s();
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed().as_millis() < 60 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let t1 = process_cpu_s();
        assert!(t1 >= t0 + 0.02, "{t0} -> {t1}");
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
}
