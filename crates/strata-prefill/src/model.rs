//! Llama's forward pass over a prompt (the prefill), on the CPU.
//!
//! The prompt is processed in chunks of [`Model::chunk`] tokens, as
//! inference engines do (chunked prefill): each chunk's queries attend to
//! every cached position before them and causally to each other, so the
//! result does not depend on the chunking, and a prefill after a loaded
//! prefix computes exactly what a whole prefill computes for those
//! positions. Memory stays `O(chunk · (width + context))`: attention is
//! computed per block of 64 queries over all keys, never as a full
//! `context × context` matrix.

use crate::gemm::{View, gemm, linear};
use crate::{KvCache, Shape};
use strata_rand::Rng;

const RMS_EPS: f32 = 1e-5;
const ROPE_THETA: f32 = 500_000.0;
/// Queries per attention block.
const QUERY_BLOCK: usize = 64;

struct Layer {
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    ffn_norm: Vec<f32>,
    w1: Vec<f32>,
    w3: Vec<f32>,
    w2: Vec<f32>,
}

/// A Llama-shaped model with random weights.
pub struct Model {
    shape: Shape,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    /// `1 / theta^(2j / head_dim)` for each rotated pair `j`.
    inv_freq: Vec<f32>,
    threads: usize,
    /// Tokens per prefill chunk.
    pub chunk: usize,
}

/// `n` weights uniform in `[-a, a]` from `rng`, where `a` keeps the
/// variance of a product with `fan_in` inputs near 1 (Kaiming-uniform).
fn matrix(rng: &mut Rng, n: usize, fan_in: usize) -> Vec<f32> {
    let a = (3.0 / fan_in as f32).sqrt();
    (0..n).map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a).collect()
}

impl Model {
    /// A model of `shape` with weights drawn from `seed`, computing on
    /// `threads` threads.
    pub fn random(shape: Shape, seed: u64, threads: usize) -> Result<Model, String> {
        shape.check()?;
        let mut rng = Rng::new(seed);
        let (d, q, kv, f) = (shape.hidden, shape.q_dim(), shape.kv_dim(), shape.ffn);
        let layers = (0..shape.layers)
            .map(|_| Layer {
                attn_norm: vec![1.0; d],
                wq: matrix(&mut rng, d * q, d),
                wk: matrix(&mut rng, d * kv, d),
                wv: matrix(&mut rng, d * kv, d),
                wo: matrix(&mut rng, q * d, q),
                ffn_norm: vec![1.0; d],
                w1: matrix(&mut rng, d * f, d),
                w3: matrix(&mut rng, d * f, d),
                w2: matrix(&mut rng, f * d, f),
            })
            .collect();
        let half = shape.head_dim / 2;
        let inv_freq = (0..half).map(|j| ROPE_THETA.powf(-(2.0 * j as f32) / shape.head_dim as f32)).collect();
        Ok(Model {
            shape,
            embed: matrix(&mut rng, shape.vocab * d, 1),
            layers,
            final_norm: vec![1.0; d],
            inv_freq,
            threads: threads.max(1),
            chunk: 2048,
        })
    }

    /// The model's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Runs the prefill of `tokens` at positions `cache.len()..`, appending
    /// their keys and values to `cache`, and returns the logits of the
    /// last token (from which the first generated token is sampled).
    /// Returns an empty vector for an empty prompt.
    pub fn prefill(&self, tokens: &[u32], cache: &mut KvCache) -> Vec<f32> {
        let mut last = Vec::new();
        for chunk in tokens.chunks(self.chunk.max(1)) {
            last = self.forward_chunk(chunk, cache);
        }
        if last.is_empty() {
            return last;
        }
        let d = self.shape.hidden;
        rms_norm(&mut last, &self.final_norm);
        let mut logits = vec![0f32; self.shape.vocab];
        // Tied head: logits = h · Eᵀ.
        gemm(1.0, View::dense(&last, 1, d), View::dense(&self.embed, self.shape.vocab, d).t(), 0.0, &mut logits, 0);
        logits
    }

    /// One chunk through every layer; returns the last position's hidden
    /// state.
    fn forward_chunk(&self, tokens: &[u32], cache: &mut KvCache) -> Vec<f32> {
        let s = &self.shape;
        let (n, d, qd, kvd, f) = (tokens.len(), s.hidden, s.q_dim(), s.kv_dim(), s.ffn);
        let past = cache.len();
        let mut x = Vec::with_capacity(n * d);
        for &t in tokens {
            let row = t as usize % s.vocab;
            x.extend_from_slice(&self.embed[row * d..(row + 1) * d]);
        }
        let (mut h, mut q, mut k, mut v) =
            (vec![0f32; n * d], vec![0f32; n * qd], vec![0f32; n * kvd], vec![0f32; n * kvd]);
        let (mut att, mut proj) = (vec![0f32; n * qd], vec![0f32; n * d]);
        let (mut g, mut u) = (vec![0f32; n * f], vec![0f32; n * f]);
        for (l, w) in self.layers.iter().enumerate() {
            h.copy_from_slice(&x);
            for row in h.chunks_mut(d) {
                rms_norm(row, &w.attn_norm);
            }
            linear(&h, n, View::dense(&w.wq, d, qd), &mut q, self.threads);
            linear(&h, n, View::dense(&w.wk, d, kvd), &mut k, self.threads);
            linear(&h, n, View::dense(&w.wv, d, kvd), &mut v, self.threads);
            self.rope(&mut q, qd, past);
            self.rope(&mut k, kvd, past);
            cache.push_rows(l, &k, &v);
            let (ck, cv) = cache.layer(l);
            self.attention(&q, ck, cv, past, n, &mut att);
            linear(&att, n, View::dense(&w.wo, qd, d), &mut proj, self.threads);
            add(&mut x, &proj);
            h.copy_from_slice(&x);
            for row in h.chunks_mut(d) {
                rms_norm(row, &w.ffn_norm);
            }
            linear(&h, n, View::dense(&w.w1, d, f), &mut g, self.threads);
            linear(&h, n, View::dense(&w.w3, d, f), &mut u, self.threads);
            for (gi, ui) in g.iter_mut().zip(&u) {
                *gi = *gi / (1.0 + (-*gi).exp()) * ui;
            }
            linear(&g, n, View::dense(&w.w2, f, d), &mut proj, self.threads);
            add(&mut x, &proj);
        }
        cache.advance(n);
        x.split_off((n - 1) * d)
    }

    /// Rotary position embedding, in place, on rows `width` wide (whole
    /// heads) for positions `past..`.
    fn rope(&self, rows: &mut [f32], width: usize, past: usize) {
        let half = self.shape.head_dim / 2;
        let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
        for (i, row) in rows.chunks_exact_mut(width).enumerate() {
            let pos = (past + i) as f32;
            for (j, f) in self.inv_freq.iter().enumerate() {
                (sin[j], cos[j]) = (pos * f).sin_cos();
            }
            for head in row.chunks_exact_mut(2 * half) {
                let (a, b) = head.split_at_mut(half);
                for j in 0..half {
                    let (x0, x1) = (a[j], b[j]);
                    a[j] = x0 * cos[j] - x1 * sin[j];
                    b[j] = x0 * sin[j] + x1 * cos[j];
                }
            }
        }
    }

    /// Causal attention of `n` queries at positions `past..past + n` over
    /// the cache's first `past + n` positions, into `out` (`n × q_dim`).
    fn attention(&self, q: &[f32], ck: &[f32], cv: &[f32], past: usize, n: usize, out: &mut [f32]) {
        let s = &self.shape;
        let (hd, qd, kvd) = (s.head_dim, s.q_dim(), s.kv_dim());
        let group = s.heads / s.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let threads = self.threads.min(s.heads).max(1);
        let head_out: Vec<(usize, Vec<f32>)> = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    sc.spawn(move || {
                        let mut done = Vec::new();
                        let mut scores = Vec::new();
                        for head in (t..s.heads).step_by(threads) {
                            let kvh = head / group;
                            let mut o = vec![0f32; n * hd];
                            for i0 in (0..n).step_by(QUERY_BLOCK) {
                                let r = QUERY_BLOCK.min(n - i0);
                                let keys = past + i0 + r;
                                scores.resize(r * keys, 0.0);
                                let qv = View { data: &q[i0 * qd + head * hd..], rows: r, cols: hd, rs: qd, cs: 1 };
                                let kt = View { data: &ck[kvh * hd..], rows: keys, cols: hd, rs: kvd, cs: 1 }.t();
                                gemm(scale, qv, kt, 0.0, &mut scores, keys);
                                for (i, row) in scores.chunks_mut(keys).enumerate() {
                                    softmax_causal(row, past + i0 + i + 1);
                                }
                                let vv = View { data: &cv[kvh * hd..], rows: keys, cols: hd, rs: kvd, cs: 1 };
                                gemm(1.0, View::dense(&scores, r, keys), vv, 0.0, &mut o[i0 * hd..], hd);
                            }
                            done.push((head, o));
                        }
                        done
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("attention worker panicked")).collect()
        });
        for (head, o) in head_out {
            for (i, row) in o.chunks_exact(hd).enumerate() {
                out[i * qd + head * hd..][..hd].copy_from_slice(row);
            }
        }
    }
}

/// Softmax over the first `valid` entries of `row`; the rest (future
/// positions) become 0.
fn softmax_causal(row: &mut [f32], valid: usize) {
    let (live, masked) = row.split_at_mut(valid);
    let max = live.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for x in live.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    let inv = 1.0 / sum;
    for x in live.iter_mut() {
        *x *= inv;
    }
    masked.fill(0.0);
}

fn rms_norm(x: &mut [f32], w: &[f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + RMS_EPS).sqrt();
    for (v, g) in x.iter_mut().zip(w) {
        *v *= inv * g;
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MICRO: Shape = Shape { layers: 2, hidden: 8, heads: 4, kv_heads: 2, head_dim: 4, ffn: 12, vocab: 50 };

    /// The forward pass written from the definition, one token and one
    /// dot product at a time.
    fn reference(m: &Model, tokens: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
        let s = m.shape;
        let (d, hd, qd, kvd, f) = (s.hidden, s.head_dim, s.q_dim(), s.kv_dim(), s.ffn);
        let matvec = |x: &[f32], w: &[f32], cols: usize| -> Vec<f32> {
            (0..cols).map(|j| x.iter().enumerate().map(|(i, xi)| xi * w[i * cols + j]).sum()).collect()
        };
        let mut xs: Vec<Vec<f32>> = tokens.iter().map(|&t| m.embed[t as usize % s.vocab * d..][..d].to_vec()).collect();
        let mut keys_out = Vec::new();
        for w in &m.layers {
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            let mut qs = Vec::new();
            for (p, x) in xs.iter().enumerate() {
                let mut h = x.clone();
                rms_norm(&mut h, &w.attn_norm);
                let (mut q, mut k) = (matvec(&h, &w.wq, qd), matvec(&h, &w.wk, kvd));
                m.rope(&mut q, qd, p);
                m.rope(&mut k, kvd, p);
                qs.push(q);
                ks.push(k);
                vs.push(matvec(&h, &w.wv, kvd));
            }
            keys_out.push(ks.concat());
            for (p, x) in xs.iter_mut().enumerate() {
                let mut att = vec![0f32; qd];
                for head in 0..s.heads {
                    let kvh = head / (s.heads / s.kv_heads);
                    let sc: Vec<f32> = (0..=p)
                        .map(|j| {
                            (0..hd).map(|i| qs[p][head * hd + i] * ks[j][kvh * hd + i]).sum::<f32>()
                                / (hd as f32).sqrt()
                        })
                        .collect();
                    let mx = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f32> = sc.iter().map(|v| (v - mx).exp()).collect();
                    let z: f32 = e.iter().sum();
                    for (j, ej) in e.iter().enumerate() {
                        for i in 0..hd {
                            att[head * hd + i] += ej / z * vs[j][kvh * hd + i];
                        }
                    }
                }
                add(x, &matvec(&att, &w.wo, d));
                let mut h = x.clone();
                rms_norm(&mut h, &w.ffn_norm);
                let (g, u) = (matvec(&h, &w.w1, f), matvec(&h, &w.w3, f));
                let a: Vec<f32> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
                add(x, &matvec(&a, &w.w2, d));
            }
        }
        let mut last = xs.pop().unwrap();
        rms_norm(&mut last, &m.final_norm);
        let logits = (0..s.vocab).map(|t| (0..d).map(|i| last[i] * m.embed[t * d + i]).sum()).collect();
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
