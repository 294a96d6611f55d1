//! Llama's forward pass over a prompt (the prefill), on the CPU.
//!
//! The prompt is processed in chunks of [`Model::chunk`] tokens, as
//! inference engines do (chunked prefill): each chunk's queries attend to
//! every cached position before them and causally to each other, so the
//! result does not depend on the chunking (up to float rounding), and a
//! prefill after a loaded prefix computes what a whole prefill computes
//! for those positions. Memory stays `O(chunk · (width + context))`:
//! attention works a block of queries at a time over all keys
//! ([`crate::attention`]), never on a `context × context` matrix.
//!
//! Where the time goes, and what keeps it in the matrix kernel:
//!
//! - Matrix products are few and large: Q, K and V come from one product
//!   with the weights side by side (`d × (q + 2·kv)`), the SwiGLU's gate
//!   and up projections from another (`d × 2f`), and the two products
//!   that feed the residual stream add into it (`beta = 1`), so there is
//!   no separate add pass.
//! - The element-wise work (RMSNorm, rotary embedding, softmax, SwiGLU)
//!   runs vectorised kernels ([`crate::kernels`]) with a polynomial `exp`.
//! - Every buffer a chunk needs lives in a workspace that the model keeps
//!   between calls, and the cache reserves the prompt's rows up front: a
//!   prefill allocates (and the kernel zeroes pages) only when it needs
//!   more room than any call before it.
//!
//! Determinism: the same model on the same machine gives the same bits
//! for the same input and chunking on every run, whatever the thread
//! count (threads split rows of each product and blocks of queries; each
//! output element is computed by the same code either way). The kernels
//! are picked once per model ([`Kernels::detect`]).

use std::sync::{Mutex, MutexGuard};

use crate::attention::{Chunk, Shared, ThreadScratch, attention, scratch};
use crate::gemm::{View, gemm, linear};
use crate::kernels::Kernels;
use crate::{KvCache, Shape};
use strata_rand::Rng;

const RMS_EPS: f32 = 1e-5;
const ROPE_THETA: f32 = 500_000.0;

/// One decoder layer's weights, row-major, input dimension first.
struct Layer {
    attn_norm: Vec<f32>,
    /// `[Wq | Wk | Wv]`: `d × (q_dim + 2·kv_dim)`.
    wqkv: Vec<f32>,
    wo: Vec<f32>,
    ffn_norm: Vec<f32>,
    /// `[W1 | W3]` (gate and up): `d × 2f`.
    w13: Vec<f32>,
    w2: Vec<f32>,
}

/// Buffers a prefill reuses from call to call (see [`scratch`]).
#[derive(Default)]
struct Workspace {
    /// The residual stream, `chunk × d`.
    x: Vec<f32>,
    /// Its normalised copy, `chunk × d`.
    h: Vec<f32>,
    /// Q, K and V side by side, `chunk × (q + 2·kv)`.
    qkv: Vec<f32>,
    /// Attention output, `chunk × q`.
    att: Vec<f32>,
    /// Gate and up side by side, `chunk × 2f`.
    gu: Vec<f32>,
    /// Rotary `cos` and `sin` of each position of the chunk, `chunk × head_dim/2`.
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Attention's keys and values, rearranged per chunk.
    shared: Shared,
    /// One per compute thread.
    threads: Vec<ThreadScratch>,
}

/// A Llama-shaped model with random weights.
///
/// One prefill runs at a time per model (its workspace is behind a lock);
/// each uses the model's threads.
pub struct Model {
    shape: Shape,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    /// `1 / theta^(2j / head_dim)` for each rotated pair `j`.
    inv_freq: Vec<f32>,
    threads: usize,
    kernels: Kernels,
    work: Mutex<Workspace>,
    /// Tokens per prefill chunk.
    pub chunk: usize,
}

/// `n` weights uniform in `[-a, a]` from `rng`, where `a` keeps the
/// variance of a product with `fan_in` inputs near 1 (Kaiming-uniform).
fn matrix(rng: &mut Rng, n: usize, fan_in: usize) -> Vec<f32> {
    let a = (3.0 / fan_in as f32).sqrt();
    (0..n).map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a).collect()
}

/// Row-major matrices with the same rows, side by side.
fn side_by_side(rows: usize, parts: &[&[f32]]) -> Vec<f32> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for r in 0..rows {
        for p in parts {
            let w = p.len() / rows;
            out.extend_from_slice(&p[r * w..(r + 1) * w]);
        }
    }
    out
}

impl Model {
    /// A model of `shape` with weights drawn from `seed`, computing on
    /// `threads` threads.
    pub fn random(shape: Shape, seed: u64, threads: usize) -> Result<Model, String> {
        shape.check()?;
        let mut rng = Rng::new(seed);
        let (d, q, kv, f) = (shape.hidden, shape.q_dim(), shape.kv_dim(), shape.ffn);
        let layers = (0..shape.layers)
            .map(|_| {
                // Drawn in Llama's order, then laid side by side.
                let wq = matrix(&mut rng, d * q, d);
                let wk = matrix(&mut rng, d * kv, d);
                let wv = matrix(&mut rng, d * kv, d);
                let wo = matrix(&mut rng, q * d, q);
                let w1 = matrix(&mut rng, d * f, d);
                let w3 = matrix(&mut rng, d * f, d);
                let w2 = matrix(&mut rng, f * d, f);
                Layer {
                    attn_norm: vec![1.0; d],
                    wqkv: side_by_side(d, &[&wq, &wk, &wv]),
                    wo,
                    ffn_norm: vec![1.0; d],
                    w13: side_by_side(d, &[&w1, &w3]),
                    w2,
                }
            })
            .collect();
        let half = shape.head_dim / 2;
        let inv_freq = (0..half).map(|j| ROPE_THETA.powf(-(2.0 * j as f32) / shape.head_dim as f32)).collect();
        let threads = threads.max(1);
        let work =
            Workspace { threads: (0..threads).map(|_| ThreadScratch::default()).collect(), ..Default::default() };
        Ok(Model {
            shape,
            embed: matrix(&mut rng, shape.vocab * d, 1),
            layers,
            final_norm: vec![1.0; d],
            inv_freq,
            threads,
            kernels: Kernels::detect(),
            work: Mutex::new(work),
            chunk: 2048,
        })
    }

    /// The model's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Threads a prefill computes on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Which build of the element-wise kernels runs: `"avx512"`,
    /// `"avx2+fma"` or `"baseline"`.
    pub fn kernels(&self) -> &'static str {
        self.kernels.name()
    }

    /// Runs the prefill of `tokens` at positions `cache.len()..`, appending
    /// their keys and values to `cache`, and returns the logits of the
    /// last token (from which the first generated token is sampled).
    /// Returns an empty vector for an empty prompt.
    pub fn prefill(&self, tokens: &[u32], cache: &mut KvCache) -> Vec<f32> {
        if tokens.is_empty() {
            return Vec::new();
        }
        // The workspace holds only scratch, rewritten before it is read:
        // one left by a panicked prefill is as good as a fresh one.
        let mut ws: MutexGuard<'_, Workspace> = self.work.lock().unwrap_or_else(|e| e.into_inner());
        cache.reserve(tokens.len());
        let mut last = Vec::new();
        for chunk in tokens.chunks(self.chunk.max(1)) {
            last = self.forward_chunk(chunk, cache, &mut ws);
        }
        let d = self.shape.hidden;
        let mut h = vec![0f32; d];
        self.kernels.rms_norm(&mut h, &last, &self.final_norm, RMS_EPS);
        let mut logits = vec![0f32; self.shape.vocab];
        // Tied head: logits = h · Eᵀ.
        gemm(1.0, View::dense(&h, 1, d), View::dense(&self.embed, self.shape.vocab, d).t(), 0.0, &mut logits, 0);
        logits
    }

    /// One chunk through every layer; returns the last position's hidden
    /// state.
    fn forward_chunk(&self, tokens: &[u32], cache: &mut KvCache, ws: &mut Workspace) -> Vec<f32> {
        let s = &self.shape;
        let (n, d, qd, kvd, f) = (tokens.len(), s.hidden, s.q_dim(), s.kv_dim(), s.ffn);
        let ld = qd + 2 * kvd;
        let half = s.head_dim / 2;
        let past = cache.len();
        let k = self.kernels;
        let Workspace { x, h, qkv, att, gu, cos, sin, shared, threads } = ws;
        let x = scratch(x, n * d);
        for (row, &t) in x.chunks_exact_mut(d).zip(tokens) {
            let e = t as usize % s.vocab;
            row.copy_from_slice(&self.embed[e * d..(e + 1) * d]);
        }
        let (h, qkv, att, gu) = (scratch(h, n * d), scratch(qkv, n * ld), scratch(att, n * qd), scratch(gu, n * 2 * f));
        let (cos, sin) = (scratch(cos, n * half), scratch(sin, n * half));
        // The rotary angles of the chunk's positions, shared by every layer.
        for (i, (c, sn)) in cos.chunks_exact_mut(half).zip(sin.chunks_exact_mut(half)).enumerate() {
            let pos = (past + i) as f32;
            for ((c, sn), fr) in c.iter_mut().zip(sn.iter_mut()).zip(&self.inv_freq) {
                (*sn, *c) = (pos * fr).sin_cos();
            }
        }
        for (l, w) in self.layers.iter().enumerate() {
            for (hr, xr) in h.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
                k.rms_norm(hr, xr, &w.attn_norm, RMS_EPS);
            }
            linear(View::dense(h, n, d), View::dense(&w.wqkv, d, ld), 0.0, qkv, ld, self.threads);
            // Q's heads then K's sit side by side in each row: one pass
            // rotates both.
            for (i, row) in qkv.chunks_exact_mut(ld).enumerate() {
                k.rope(&mut row[..qd + kvd], &cos[i * half..][..half], &sin[i * half..][..half]);
            }
            cache.push_rows_strided(l, qkv, ld, qd, qd + kvd);
            let (ck, cv) = cache.layer(l);
            let chunk = Chunk { q: qkv, q_stride: ld, k: ck, v: cv, past, n };
            attention(s, k, &chunk, att, shared, threads);
            // x += att · Wo
            linear(View::dense(att, n, qd), View::dense(&w.wo, qd, d), 1.0, x, d, self.threads);
            for (hr, xr) in h.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
                k.rms_norm(hr, xr, &w.ffn_norm, RMS_EPS);
            }
            linear(View::dense(h, n, d), View::dense(&w.w13, d, 2 * f), 0.0, gu, 2 * f, self.threads);
            for row in gu.chunks_exact_mut(2 * f) {
                let (g, u) = row.split_at_mut(f);
                k.swiglu(g, u);
            }
            // x += silu(g)·u · W2, reading the gate half of each row.
            let a = View { data: gu, rows: n, cols: f, rs: 2 * f, cs: 1 };
            linear(a, View::dense(&w.w2, f, d), 1.0, x, d, self.threads);
        }
        cache.advance(n);
        x[(n - 1) * d..].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MICRO: Shape = Shape { layers: 2, hidden: 8, heads: 4, kv_heads: 2, head_dim: 4, ffn: 12, vocab: 50 };

    /// The forward pass written from the definition, one token and one
    /// dot product at a time, in f64, with the weights read from the
    /// model's side-by-side matrices by column.
    fn reference(m: &Model, tokens: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
        let s = m.shape;
        let (d, hd, qd, kvd, f) = (s.hidden, s.head_dim, s.q_dim(), s.kv_dim(), s.ffn);
        // Columns at..at + cols of a row-major matrix `ld` wide.
        let matvec = |x: &[f64], w: &[f32], ld: usize, at: usize, cols: usize| -> Vec<f64> {
            (at..at + cols).map(|j| x.iter().enumerate().map(|(i, xi)| xi * w[i * ld + j] as f64).sum()).collect()
        };
        let norm = |x: &[f64], g: &[f32]| -> Vec<f64> {
            let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + RMS_EPS as f64).sqrt();
            x.iter().zip(g).map(|(v, g)| v * inv * *g as f64).collect()
        };
        let rope = |x: &mut [f64], p: usize| {
            for head in x.chunks_exact_mut(hd) {
                for j in 0..hd / 2 {
                    let (sn, c) = (p as f64 * m.inv_freq[j] as f64).sin_cos();
                    let (a, b) = (head[j], head[j + hd / 2]);
                    head[j] = a * c - b * sn;
                    head[j + hd / 2] = a * sn + b * c;
                }
            }
        };
        let ld = qd + 2 * kvd;
        let mut xs: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| m.embed[t as usize % s.vocab * d..][..d].iter().map(|&v| v as f64).collect())
            .collect();
        let mut keys_out = Vec::new();
        for w in &m.layers {
            let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
            for (p, x) in xs.iter().enumerate() {
                let h = norm(x, &w.attn_norm);
                let (mut q, mut k) = (matvec(&h, &w.wqkv, ld, 0, qd), matvec(&h, &w.wqkv, ld, qd, kvd));
                rope(&mut q, p);
                rope(&mut k, p);
                qs.push(q);
                ks.push(k);
                vs.push(matvec(&h, &w.wqkv, ld, qd + kvd, kvd));
            }
            keys_out.push(ks.concat().iter().map(|&v| v as f32).collect());
            for (p, x) in xs.iter_mut().enumerate() {
                let mut att = vec![0f64; qd];
                for head in 0..s.heads {
                    let kvh = head / (s.heads / s.kv_heads);
                    let sc: Vec<f64> = (0..=p)
                        .map(|j| {
                            (0..hd).map(|i| qs[p][head * hd + i] * ks[j][kvh * hd + i]).sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = sc.iter().map(|v| (v - mx).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for (j, ej) in e.iter().enumerate() {
                        for i in 0..hd {
                            att[head * hd + i] += ej / z * vs[j][kvh * hd + i];
                        }
                    }
                }
                for (a, b) in x.iter_mut().zip(matvec(&att, &w.wo, d, 0, d)) {
                    *a += b;
                }
                let h = norm(x, &w.ffn_norm);
                let (g, u) = (matvec(&h, &w.w13, 2 * f, 0, f), matvec(&h, &w.w13, 2 * f, f, f));
                let a: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
                for (a, b) in x.iter_mut().zip(matvec(&a, &w.w2, d, 0, d)) {
                    *a += b;
                }
            }
        }
        let last = norm(&xs.pop().unwrap(), &m.final_norm);
        let logits =
            (0..s.vocab).map(|t| (0..d).map(|i| last[i] * m.embed[t * d + i] as f64).sum::<f64>() as f32).collect();
        (logits, keys_out)
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs()))
    }

    #[test]
    fn the_prefill_computes_the_definition() {
        let m = Model::random(MICRO, 7, 1).unwrap();
        let tokens: Vec<u32> = (0..150).map(|i| (i * 7 + 3) % 61).collect();
        let mut cache = KvCache::new(&MICRO);
        let logits = m.prefill(&tokens, &mut cache);
        let (want, keys) = reference(&m, &tokens);
        assert!(close(&logits, &want), "logits differ");
        for (l, k) in keys.iter().enumerate() {
            assert!(close(cache.layer(l).0, k), "layer {l} keys differ");
        }
        // More than one query block (64) and a ragged last one were used.
        assert_eq!(cache.len(), 150);
    }

    #[test]
    fn a_prefill_gives_the_same_bits_every_run_and_on_any_thread_count() {
        // Long enough for several query blocks and two key tiles.
        let tokens: Vec<u32> = (0..700).map(|i| (i * 31 + 5) % 50).collect();
        let run = |threads: usize| {
            let mut m = Model::random(MICRO, 3, threads).unwrap();
            m.chunk = 300;
            let mut c = KvCache::new(&MICRO);
            let logits = m.prefill(&tokens, &mut c);
            // The same model again, its workspace now warm.
            let mut c2 = KvCache::new(&MICRO);
            let again = m.prefill(&tokens, &mut c2);
            assert!(c2.prefix_equals(&c, 700));
            assert!(logits.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()));
            (logits, c)
        };
        let (l1, c1) = run(1);
        let (l3, c3) = run(3);
        assert!(c3.prefix_equals(&c1, 700));
        assert!(l1.iter().zip(&l3).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn chunking_threads_and_a_loaded_prefix_give_the_same_answer() {
        let tokens: Vec<u32> = (0..300).map(|i| (i * 13 + 1) % 50).collect();
        let whole = Model::random(MICRO, 9, 1).unwrap();
        let mut c1 = KvCache::new(&MICRO);
        let l1 = whole.prefill(&tokens, &mut c1);
        let mut chunked = Model::random(MICRO, 9, 3).unwrap();
        chunked.chunk = 37;
        let mut c2 = KvCache::new(&MICRO);
        let l2 = chunked.prefill(&tokens, &mut c2);
        assert!(close(&l2, &l1) && c2.len() == 300);
        // A prefix loaded from blocks, then the rest computed: what an
        // engine does on a hit.
        let mut c3 = KvCache::new(&MICRO);
        for b in 0..4 {
            c3.load_block(64, &c1.to_block(b * 64, 64)).unwrap();
        }
        let l3 = whole.prefill(&tokens[256..], &mut c3);
        assert!(c3.prefix_equals(&c1, 256));
        assert!(close(&l3, &l1), "logits after a loaded prefix differ");
        // Different weights give different logits (the check can fail).
        let other = Model::random(MICRO, 10, 1).unwrap();
        let l4 = other.prefill(&tokens, &mut KvCache::new(&MICRO));
        assert!(!close(&l4, &l1));
    }
}
