//! One prompt length's measurement: the prompt's blocks loaded from one
//! tier of the store, its last token computed, and the result checked
//! against the recompute (keys and values bit-equal, logits within
//! [`LOGIT_TOLERANCE`]).

use std::time::Instant;

use strata_prefill::{KvCache, Model};

use super::prompt::{LOGIT_TOLERANCE, max_rel_diff};
use super::served::Served;

/// One prompt length's measurements.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Row {
    pub(super) tokens: usize,
    pub(super) recompute_s: f64,
    /// Per tier: seconds to first token, seconds spent fetching and
    /// copying, bytes fetched.
    pub(super) tiers: Vec<TierRow>,
}

/// One prompt loaded from one tier.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct TierRow {
    pub(super) tier: &'static str,
    pub(super) ttft_s: f64,
    pub(super) fetch_s: f64,
    pub(super) bytes: u64,
}

/// A recomputed prompt: its tokens and block keys, and the cache and
/// logits every load of it is checked against.
pub(super) struct Prompt {
    pub(super) tokens: Vec<u32>,
    pub(super) keys: Vec<String>,
    pub(super) cache: KvCache,
    pub(super) logits: Vec<f32>,
}

/// Loads every block of `p` from the store, computes the last token, and
/// checks the result against the recomputed one.
pub(super) fn load_prompt(
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
