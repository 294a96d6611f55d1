//! One prompt length's measurement: the prompt's blocks loaded from one
//! tier of the store, its last token computed, and the result checked
//! against the recompute (keys and values bit-equal, logits within
//! [`LOGIT_TOLERANCE`]); the recompute's rate against the GEMM library's
//! own; and the median and range the replay reports.

use std::time::Instant;

use strata_prefill::{KvCache, Model};

use super::prompt::{LOGIT_TOLERANCE, max_rel_diff};
use super::served::Served;

/// One prompt length's measurements.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Row {
    pub(super) tokens: usize,
    pub(super) recompute_s: f64,
    /// The recompute's rate: the prefill's FLOPs ([`Shape::prefill_flops`](strata_prefill::Shape::prefill_flops))
    /// over its time, in GFLOP/s.
    pub(super) recompute_gflops: f64,
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

/// The median and range of a set of measurements.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    /// Of `xs` (NaN-free; the middle two averaged for an even count).
    pub(super) fn of(xs: &[f64]) -> Spread {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN };
        }
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Spread { median, min: v[0], max: v[n - 1] }
    }
}

/// Runs of the square product whose best time counts.
pub(super) const GEMM_REPS: usize = 3;

/// The GEMM library's rate on a square product, measured before and
/// after the prompts (the machine is shared; both are printed), and the
/// prefill's rate at each prompt length against the higher.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct GemmRate {
    pub(super) size: usize,
    pub(super) before_gflops: f64,
    pub(super) after_gflops: f64,
    /// Per prompt row: recompute GFLOP/s over the higher of the two.
    pub(super) prefill_fraction: Vec<f64>,
    /// Those fractions at 8k tokens and up, if any ran.
    pub(super) fraction_8k_up: Option<Spread>,
}

impl GemmRate {
    /// The rates of `rows` against the library's measurements; `None`
    /// when the measurement was skipped (`--gemm-size 0`).
    pub(super) fn of(size: usize, before: Option<f64>, after: Option<f64>, rows: &[Row]) -> Option<GemmRate> {
        let (before, after) = (before?, after?);
        let best = before.max(after);
        let prefill_fraction: Vec<f64> = rows.iter().map(|r| r.recompute_gflops / best).collect();
        let long: Vec<f64> =
            rows.iter().zip(&prefill_fraction).filter(|(r, _)| r.tokens >= 8192).map(|(_, f)| *f).collect();
        let fraction_8k_up = (!long.is_empty()).then(|| Spread::of(&long));
        Some(GemmRate { size, before_gflops: before, after_gflops: after, prefill_fraction, fraction_8k_up })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_range() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn the_prefill_is_rated_against_the_better_gemm_run() {
        let row = |tokens: usize, g: f64| Row { tokens, recompute_s: 1.0, recompute_gflops: g, tiers: vec![] };
        let rows = [row(4096, 50.0), row(8192, 80.0), row(16384, 90.0)];
        let g = GemmRate::of(2048, Some(100.0), Some(90.0), &rows).unwrap();
        assert_eq!(g.prefill_fraction, vec![0.5, 0.8, 0.9]);
        let long = g.fraction_8k_up.unwrap();
        assert!((long.median - 0.85).abs() < 1e-12 && long.min == 0.8 && long.max == 0.9);
        assert!(GemmRate::of(2048, None, Some(1.0), &rows).is_none());
        assert!(GemmRate::of(2048, Some(1.0), Some(1.0), &rows[..1]).unwrap().fraction_8k_up.is_none());
    }
}
