//! The multi-turn replay: the returning conversations of a trace, run
//! through an engine with its own prefix cache, first alone and then with
//! the store behind that cache; each request's first-token logits must
//! agree between the two runs.

use std::time::Instant;

use strata_prefill::{KvCache, Model};

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

/// The replay's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Replay {
    pub(super) requests: usize,
    pub(super) prompt_tokens: u64,
    pub(super) block_tokens: usize,
    pub(super) engine_blocks: u64,
    /// Without the store: only the engine's own prefix cache.
    pub(super) alone_s: f64,
    pub(super) alone_hit_tokens: u64,
    /// With the store behind the engine's cache.
    pub(super) store_s: f64,
    pub(super) store_hit_tokens: u64,
    pub(super) store_engine_hit_tokens: u64,
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
pub(super) fn replay(srv: &mut Served, model: &Model, reqs: &[Vec<u64>], args: &TtftOptions) -> anyhow::Result<Replay> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
