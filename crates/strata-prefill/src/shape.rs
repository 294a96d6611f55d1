//! A model's dimensions and the arithmetic of its prefill.
//!
//! The FLOP count is the one the projection in `docs/kv.md` uses: two
//! FLOPs per multiply-add of every weight matrix per token, plus the
//! attention products (`Q·Kᵀ` and `P·V`), which for the token at position
//! `p` cost `4 · heads · head_dim · (p + 1)` per layer under a causal mask.
//! Norms, rotary embeddings and the softmax are left out (under 1% for
//! real shapes).

/// The dimensions of a Llama-shaped decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Decoder layers.
    pub layers: usize,
    /// Model width (embedding size).
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (fewer than `heads` with grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward inner width.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

/// Named shapes: `tiny` runs a 32k-token prefill in well under a minute on
/// two cores; the Llama 3 shapes are their published configurations, for
/// the projection (and for machines with the memory to run them).
pub const PRESETS: &[(&str, Shape)] = &[
    ("tiny", Shape { layers: 2, hidden: 256, heads: 4, kv_heads: 4, head_dim: 64, ffn: 704, vocab: 32_000 }),
    ("small", Shape { layers: 8, hidden: 512, heads: 8, kv_heads: 2, head_dim: 64, ffn: 1408, vocab: 32_000 }),
    (
        "llama-3.2-1b",
        Shape { layers: 16, hidden: 2048, heads: 32, kv_heads: 8, head_dim: 64, ffn: 8192, vocab: 128_256 },
    ),
    (
        "llama-3.1-8b",
        Shape { layers: 32, hidden: 4096, heads: 32, kv_heads: 8, head_dim: 128, ffn: 14_336, vocab: 128_256 },
    ),
    (
        "llama-3.1-70b",
        Shape { layers: 80, hidden: 8192, heads: 64, kv_heads: 8, head_dim: 128, ffn: 28_672, vocab: 128_256 },
    ),
];

impl Shape {
    /// The preset called `name`.
    pub fn preset(name: &str) -> Option<Shape> {
        PRESETS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
    }

    /// Width of the query projection.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of one token's keys (or values) in one layer.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Why the shape cannot be run, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let dims = [self.layers, self.hidden, self.heads, self.kv_heads, self.head_dim, self.ffn, self.vocab];
        if dims.contains(&0) {
            return Err("every dimension must be at least 1".into());
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!("{} query heads do not group over {} KV heads", self.heads, self.kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {} is odd: rotary embeddings rotate pairs", self.head_dim));
        }
        Ok(())
    }

    /// Weights per layer.
    pub fn layer_params(&self) -> u64 {
        let (d, q, kv, f) = (self.hidden as u64, self.q_dim() as u64, self.kv_dim() as u64, self.ffn as u64);
        d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d
    }

    /// All weights, with the LM head tied to the embedding.
    pub fn params(&self) -> u64 {
        self.layers as u64 * self.layer_params() + (self.vocab * self.hidden + self.hidden) as u64
    }

    /// Bytes of keys and values one token leaves in the cache, all layers,
    /// at `dtype_bytes` per element (2 for bf16, 4 for f32).
    pub fn kv_bytes_per_token(&self, dtype_bytes: usize) -> u64 {
        (2 * self.layers * self.kv_dim() * dtype_bytes) as u64
    }

    /// FLOPs to prefill `new` tokens after `past` cached ones, including
    /// the LM head on the last token.
    pub fn prefill_flops(&self, past: u64, new: u64) -> f64 {
        if new == 0 {
            return 0.0;
        }
        let (d, q, kv, f) = (self.hidden as f64, self.q_dim() as f64, self.kv_dim() as f64, self.ffn as f64);
        let linear = 2.0 * (d * q + 2.0 * d * kv + q * d + 3.0 * d * f);
        // Sum of (p + 1) for p in past..past + new.
        let (a, n) = (past as f64, new as f64);
        let positions = n * a + n * (n + 1.0) / 2.0;
        let attention = 4.0 * q * positions;
        self.layers as f64 * (linear * n + attention) + 2.0 * d * self.vocab as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_llama_70b_is_70b() {
        for (name, s) in PRESETS {
            s.check().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let l70 = Shape::preset("llama-3.1-70b").unwrap();
        // Published: 70.6 B parameters (untied head adds 1.05 B).
        let p = l70.params() as f64 + (l70.vocab * l70.hidden) as f64;
        assert!((p / 1e9 - 70.55).abs() < 0.1, "{p}");
        // bf16: 80 layers x 2 x 8 heads x 128 x 2 bytes = 320 KiB a token.
        assert_eq!(l70.kv_bytes_per_token(2), 327_680);
        let l8 = Shape::preset("llama-3.1-8b").unwrap();
        assert_eq!(l8.kv_bytes_per_token(2), 131_072);
    }

    #[test]
    fn flops_split_across_a_cached_prefix_add_up() {
        let s = Shape::preset("tiny").unwrap();
        let head = 2.0 * (s.hidden * s.vocab) as f64;
        let whole = s.prefill_flops(0, 1000);
        let split = s.prefill_flops(0, 600) + s.prefill_flops(600, 400) - head;
        assert!((whole - split).abs() / whole < 1e-12);
        assert_eq!(s.prefill_flops(5, 0), 0.0);
        // Quadratic attention: doubling the prompt more than doubles it.
        assert!(s.prefill_flops(0, 2000) > 2.0 * whole);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut s = Shape::preset("tiny").unwrap();
        s.kv_heads = 3;
        assert!(s.check().unwrap_err().contains("group"));
        s.kv_heads = 4;
        s.head_dim = 63;
        assert!(s.check().unwrap_err().contains("odd"));
        s.head_dim = 0;
        assert!(s.check().is_err());
    }
}
