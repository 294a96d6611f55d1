//! The prompts the benchmark prefills and the check every load passes:
//! deterministic token ids (the same seed gives the same prompt in every
//! run), the KV key context their blocks are stored under, and how far
//! logits after a load may be from a whole prefill's.

use strata_kv::key::KeyContext;

/// Deterministic token ids: `seed` picks the sequence.
pub(super) fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut rng = strata_rand::Rng::new(seed);
    (0..n).map(|_| rng.below(vocab as u64) as u32).collect()
}

pub(super) fn key_context(name: &str, page: usize, what: &str) -> KeyContext {
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
pub(super) fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f32::max)
}

/// Logits from a loaded prefix may differ from a whole prefill's only by
/// float rounding.
pub(super) const LOGIT_TOLERANCE: f32 = 1e-3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_and_differ_by_seed() {
        assert_eq!(tokens(5, 100, 32_000), tokens(5, 100, 32_000));
        assert_ne!(tokens(5, 100, 32_000), tokens(6, 100, 32_000));
        assert!(tokens(5, 1000, 7).iter().all(|&t| t < 7));
    }
}
