//! Causal attention of a chunk of queries over the cached keys and
//! values, as large matrix products in the layouts the GEMM library packs
//! fastest, with an online softmax over tiles of keys (as in
//! FlashAttention).
//!
//! `matrixmultiply` copies its operands into packed panels before each
//! product. That copy is a block copy only when A's columns and B's rows
//! are contiguous (A column-major, B row-major), and it is fast only when
//! the source is compact; any other layout is gathered one element at a
//! time. Attention as `Q · Kᵀ` and `P · V` over the cache's row-major
//! tokens spent as long packing as multiplying, so here:
//!
//! - The layer's keys are transposed once per chunk into `Kᵀ`, tile by
//!   tile: per KV head, each [`KEY_TILE`] keys are one `head_dim ×
//!   KEY_TILE` row-major block (a column-major `keys × head_dim` A), and
//!   the values are copied head by head (a dense `keys × head_dim` B),
//!   KV heads split over the threads. Both cost one pass over the cache
//!   per chunk, against `chunk / r` passes of packing.
//! - A block of `r` queries is transposed into `Qᵀ`, `head_dim × (group ·
//!   r)` per KV head: the queries of every query head that shares the KV
//!   head side by side (grouped-query attention becomes one wider product
//!   instead of `group` narrow ones).
//! - Per key tile: `Sᵀ = scale · K · Qᵀ` (`tile × group·r`, row-major, in
//!   L2), the online softmax down its columns ([`Kernels::softmax_tile`],
//!   vectorised across queries), then each head's output rows are scaled
//!   by the softmax's correction and `P · V` is added to them, `P` read as
//!   a column-major view of `Sᵀ`. After the last tile the rows are divided
//!   by the softmax's sums (`r × head_dim` divisions instead of
//!   `keys × r`).
//!
//! A chunk of one query block (the last token after a load, a short
//! prompt) skips the transposes and reads the cache in place: the
//! transposes would cost more than they save.
//!
//! Memory is `O(KEY_TILE · group · r)` per thread for `Sᵀ` plus one copy
//! of the layer's keys and values, never a `context × context` matrix.
//! Work is split by query block over scoped threads, longest blocks
//! first; each block writes only its own rows of the output and computes
//! them the same way whichever thread runs it, so the result does not
//! depend on the thread count.

use std::sync::Mutex;

use crate::Shape;
use crate::gemm::{View, gemm};
use crate::kernels::{Kernels, Tile};

/// Columns of `Sᵀ` a query block aims for (`group · r`): wide enough that
/// packing a key tile is small against the products that use it. On the
/// `tiny` model at 8k tokens, 64 ran 5-10% slower than 128; 256 was
/// within the noise of 128 and wastes more of the causal triangle.
const BLOCK_COLUMNS: usize = 128;

/// Keys per tile of the online softmax: the tile of `Sᵀ` (`KEY_TILE ·
/// BLOCK_COLUMNS` floats, 256 KiB) and the K and V panels it multiplies
/// stay in L2 however long the context (256 and 1024 were no faster).
const KEY_TILE: usize = 512;

/// The row stride of a tile of `Kᵀ`: [`KEY_TILE`] plus one cache line, so
/// that its `head_dim` rows, from each of which packing reads 16 floats
/// in turn, do not all map to the same few cache sets.
const KT_STRIDE: usize = KEY_TILE + 16;

/// Queries per block for `group` query heads per KV head:
/// `BLOCK_COLUMNS / group`, at least 8.
fn query_block(group: usize) -> usize {
    (BLOCK_COLUMNS / group.max(1)).max(8)
}

/// `&mut v[..len]`, growing `v` (zero-filled) only when it is shorter:
/// scratch keeps its largest size, so a hot path allocates and zeroes
/// nothing once a call of that size has run.
pub(crate) fn scratch(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// One thread's scratch, reused across blocks, layers and calls.
#[derive(Default)]
pub(crate) struct ThreadScratch {
    /// `Sᵀ` of the current tile.
    st: Vec<f32>,
    /// `Qᵀ` of the current block, every KV head.
    qt: Vec<f32>,
    /// Per column: the online softmax's running max, sum and rescale
    /// factor.
    state: Vec<f32>,
}

/// Scratch shared by a layer's attention: the keys and values in the
/// layouts above, rebuilt for each chunk.
#[derive(Default)]
pub(crate) struct Shared {
    kt: Vec<f32>,
    vh: Vec<f32>,
}

/// The inputs of one layer's attention over one chunk.
pub(crate) struct Chunk<'a> {
    /// Queries after the rotary embedding: row `i` (position `past + i`)
    /// starts at `i · q_stride`, `q_dim` wide.
    pub q: &'a [f32],
    pub q_stride: usize,
    /// The layer's cached keys and values, at least `past + n` rows of
    /// `kv_dim`.
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub past: usize,
    pub n: usize,
}

/// Where a block reads keys and values from.
#[derive(Clone, Copy)]
enum Keys<'a> {
    /// Transposed and by head ([`transpose_keys`], [`values_by_head`]),
    /// for `total` keys.
    Tiled { kt: &'a [f32], vh: &'a [f32], total: usize },
    /// The cache's rows in place.
    InPlace { k: &'a [f32], v: &'a [f32] },
}

impl<'a> Keys<'a> {
    /// Keys `j0..j0 + tk` of KV head `h` as a `tk × head_dim` matrix.
    /// A tile never crosses a multiple of [`KEY_TILE`].
    fn k(self, shape: &Shape, h: usize, j0: usize, tk: usize) -> View<'a> {
        let (hd, kvd) = (shape.head_dim, shape.kv_dim());
        match self {
            Keys::Tiled { kt, total, .. } => {
                let at = h * kt_head_len(total, hd) + (j0 / KEY_TILE) * hd * KT_STRIDE + j0 % KEY_TILE;
                View { data: &kt[at..], rows: tk, cols: hd, rs: 1, cs: KT_STRIDE }
            }
            Keys::InPlace { k, .. } => View { data: &k[j0 * kvd + h * hd..], rows: tk, cols: hd, rs: kvd, cs: 1 },
        }
    }

    /// Values `j0..j0 + tk` of KV head `h` as a `tk × head_dim` matrix.
    fn v(self, shape: &Shape, h: usize, j0: usize, tk: usize) -> View<'a> {
        let (hd, kvd) = (shape.head_dim, shape.kv_dim());
        match self {
            Keys::Tiled { vh, total, .. } => View::dense(&vh[(h * total + j0) * hd..], tk, hd),
            Keys::InPlace { v, .. } => View { data: &v[j0 * kvd + h * hd..], rows: tk, cols: hd, rs: kvd, cs: 1 },
        }
    }
}

/// Attention of `c`'s `n` queries into `out` (`n × q_dim`, dense), on at
/// most `scratch.len()` threads.
///
/// # Panics
///
/// When the slices are shorter than `c` says (a bug in this crate).
pub(crate) fn attention(
    shape: &Shape,
    kernels: Kernels,
    c: &Chunk<'_>,
    out: &mut [f32],
    shared: &mut Shared,
    scratch: &mut [ThreadScratch],
) {
    let (qd, kvd) = (shape.q_dim(), shape.kv_dim());
    let total = c.past + c.n;
    assert!(c.k.len() >= total * kvd && c.v.len() >= total * kvd, "cache shorter than the chunk");
    assert!(c.n == 0 || c.q.len() >= (c.n - 1) * c.q_stride + qd, "queries shorter than the chunk");
    assert_eq!(out.len(), c.n * qd);
    assert!(!scratch.is_empty(), "no thread scratch");
    if c.n == 0 {
        return;
    }
    let r = query_block(shape.heads / shape.kv_heads);
    let keys = if c.n <= r {
        Keys::InPlace { k: c.k, v: c.v }
    } else {
        let (kt, vh) = rearrange(c.k, c.v, total, shape, shared, scratch.len());
        Keys::Tiled { kt, vh, total }
    };
    // Longest blocks (the last, which see the most keys) first, so the
    // threads finish together.
    let blocks = Mutex::new(out.chunks_mut(r * qd).enumerate().rev());
    let threads = scratch.len().min(c.n.div_ceil(r));
    let work = |s: &mut ThreadScratch| {
        loop {
            // A poisoned lock means another worker panicked; the scope
            // re-raises that panic, so just stop taking work.
            let Some((b, rows)) = blocks.lock().ok().and_then(|mut it| it.next()) else {
                return;
            };
            block(shape, kernels, c, keys, b * r, rows, s);
        }
    };
    if threads <= 1 {
        work(&mut scratch[0]);
        return;
    }
    let work = &work;
    std::thread::scope(|sc| {
        for s in scratch.iter_mut().take(threads) {
            sc.spawn(move || work(s));
        }
    });
}

/// Floats of one KV head's `Kᵀ` for `keys` keys: whole tiles.
fn kt_head_len(keys: usize, hd: usize) -> usize {
    keys.div_ceil(KEY_TILE) * hd * KT_STRIDE
}

/// The first `keys` rows of `k` and `v` in the layouts attention reads,
/// in `shared`, KV heads split over up to `threads` scoped threads:
///
/// - `Kᵀ` tile by tile: tile `s` of KV head `h` (keys `s · KEY_TILE..`)
///   is a `head_dim × KEY_TILE` row-major matrix with row stride
///   [`KT_STRIDE`], at `h · kt_head_len + s · head_dim · KT_STRIDE`.
///   Packing a tile then reads one compact stretch of memory, not
///   `head_dim` rows a whole context apart (which missed the TLB on every
///   row and ran the packing at a third of the speed).
/// - `V` head by head: KV head `h`'s values are a dense `keys × head_dim`
///   matrix at `h · keys · head_dim`, so that a tile's panel is compact
///   too.
fn rearrange<'a>(
    k: &[f32],
    v: &[f32],
    keys: usize,
    shape: &Shape,
    shared: &'a mut Shared,
    threads: usize,
) -> (&'a [f32], &'a [f32]) {
    let (hd, kvd) = (shape.head_dim, shape.kv_dim());
    let per_head = kt_head_len(keys, hd);
    let kt = scratch(&mut shared.kt, shape.kv_heads * per_head);
    let vh = scratch(&mut shared.vh, keys * kvd);
    let heads = kt.chunks_exact_mut(per_head).zip(vh.chunks_exact_mut(keys * hd)).enumerate();
    let one = |(h, (kt, vh)): (usize, (&mut [f32], &mut [f32]))| {
        transpose_head(&k[h * hd..], keys, kvd, hd, kt);
        for (d, row) in vh.chunks_exact_mut(hd).zip(v[h * hd..].chunks(kvd)) {
            d.copy_from_slice(&row[..hd]);
        }
    };
    let threads = threads.clamp(1, shape.kv_heads);
    if threads == 1 {
        heads.for_each(one);
    } else {
        let mut parts: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, h) in heads.enumerate() {
            parts[i % threads].push(h);
        }
        std::thread::scope(|s| {
            for part in parts {
                s.spawn(move || part.into_iter().for_each(one));
            }
        });
    }
    (kt, vh)
}

/// One KV head's `Kᵀ` (see [`rearrange`]) from `k`, whose row `j` (row
/// stride `kvd`) starts with the head's `hd` keys.
fn transpose_head(k: &[f32], keys: usize, kvd: usize, hd: usize, kt: &mut [f32]) {
    // 16 keys at a time: their rows stay in L1 while each output row gets
    // 16 contiguous values. KEY_TILE is a multiple of 16, so a step never
    // crosses a tile.
    const STEP: usize = 16;
    for j0 in (0..keys).step_by(STEP) {
        let n = STEP.min(keys - j0);
        let base = (j0 / KEY_TILE) * hd * KT_STRIDE + j0 % KEY_TILE;
        for d in 0..hd {
            for (jj, x) in kt[base + d * KT_STRIDE..][..n].iter_mut().enumerate() {
                *x = k[(j0 + jj) * kvd + d];
            }
        }
    }
}

/// One query block: queries `i0..i0 + rows.len() / q_dim`, every head,
/// into `rows`.
fn block(
    shape: &Shape,
    kernels: Kernels,
    c: &Chunk<'_>,
    keys: Keys<'_>,
    i0: usize,
    rows: &mut [f32],
    s: &mut ThreadScratch,
) {
    let (hd, qd) = (shape.head_dim, shape.q_dim());
    let group = shape.heads / shape.kv_heads;
    let rb = rows.len() / qd;
    let w = group * rb;
    let scale = 1.0 / (hd as f32).sqrt();
    // Qᵀ: for KV head h, row d, column g·rb + i is query i of head
    // h·group + g.
    let qt = scratch(&mut s.qt, qd * rb);
    for i in 0..rb {
        let q = &c.q[(i0 + i) * c.q_stride..][..qd];
        for (head, qh) in q.chunks_exact(hd).enumerate() {
            let (h, g) = (head / group, head % group);
            let base = h * hd * w + g * rb + i;
            for (d, x) in qh.iter().enumerate() {
                qt[base + d * w] = *x;
            }
        }
    }
    let full = c.past + i0;
    let end = full + rb;
    let st = scratch(&mut s.st, KEY_TILE * w);
    let state = scratch(&mut s.state, 3 * w);
    for h in 0..shape.kv_heads {
        let qt = View::dense(&qt[h * hd * w..], hd, w);
        // Keys before `full` are visible to every query; the block's own
        // positions (the causal triangle) are the last `rb`, in the last
        // tile or split over the last two.
        for (n, j0) in (0..end).step_by(KEY_TILE).enumerate() {
            let tk = KEY_TILE.min(end - j0);
            let st = &mut st[..tk * w];
            gemm(scale, keys.k(shape, h, j0, tk), qt, 0.0, st, w);
            let visible = full.clamp(j0, j0 + tk) - j0;
            let tile = Tile { w, r: rb, full: visible, t0: j0.max(full) - full, first: n == 0 };
            kernels.softmax_tile(st, tile, state);
            let v = keys.v(shape, h, j0, tk);
            let alpha = &state[2 * w..];
            for g in 0..group {
                let at = (h * group + g) * hd;
                // The first tile writes the rows (beta = 0); later ones
                // rescale them to the new maxima and add.
                if n > 0 {
                    scale_rows(rows, qd, at, hd, &alpha[g * rb..(g + 1) * rb]);
                }
                let p = View { data: &st[g * rb..], rows: rb, cols: tk, rs: 1, cs: w };
                gemm(1.0, p, v, if n == 0 { 0.0 } else { 1.0 }, &mut rows[at..], qd);
            }
        }
        let l = &mut state[w..2 * w];
        for x in l.iter_mut() {
            *x = 1.0 / *x;
        }
        for g in 0..group {
            scale_rows(rows, qd, (h * group + g) * hd, hd, &l[g * rb..(g + 1) * rb]);
        }
    }
}

/// Multiplies columns `at..at + width` of row `i` of `rows` (row stride
/// `stride`) by `f[i]`.
fn scale_rows(rows: &mut [f32], stride: usize, at: usize, width: usize, f: &[f32]) {
    for (row, f) in rows.chunks_mut(stride).zip(f) {
        for o in &mut row[at..at + width] {
            *o *= f;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention from the definition, in f64, for the chunk's queries.
    fn reference(shape: &Shape, c: &Chunk<'_>) -> Vec<f64> {
        let (hd, qd, kvd) = (shape.head_dim, shape.q_dim(), shape.kv_dim());
        let group = shape.heads / shape.kv_heads;
        let mut out = vec![0f64; c.n * qd];
        for i in 0..c.n {
            for head in 0..shape.heads {
                let kvh = head / group;
                let q = &c.q[i * c.q_stride + head * hd..][..hd];
                let sc: Vec<f64> = (0..=c.past + i)
                    .map(|j| {
                        let k = &c.k[j * kvd + kvh * hd..][..hd];
                        q.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in sc.iter().enumerate() {
                    let p = (x - m).exp() / z;
                    for d in 0..hd {
                        out[i * qd + head * hd + d] += p * c.v[j * kvd + kvh * hd + d] as f64;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn tiled_and_in_place_attention_match_the_definition_across_tiles() {
        // Grouped heads, a context that spans several key tiles and a
        // ragged last tile and query block.
        let shape = Shape { layers: 1, hidden: 32, heads: 4, kv_heads: 2, head_dim: 8, ffn: 8, vocab: 8 };
        let (qd, kvd) = (shape.q_dim(), shape.kv_dim());
        for (past, n) in [(0, 1), (0, 70), (1100, 3), (1100, 150), (2 * KEY_TILE - 5, 80)] {
            let total = past + n;
            let val = |i: usize, f: f32| (i as f32 * f).sin() * 2.0;
            let q: Vec<f32> = (0..n * (qd + 3)).map(|i| val(i, 0.37)).collect();
            let k: Vec<f32> = (0..total * kvd).map(|i| val(i, 0.11)).collect();
            let v: Vec<f32> = (0..total * kvd).map(|i| val(i, 0.23)).collect();
            let c = Chunk { q: &q, q_stride: qd + 3, k: &k, v: &v, past, n };
            let want = reference(&shape, &c);
            let kernels = Kernels::detect();
            let mut outs = Vec::new();
            for threads in [1, 3] {
                let mut out = vec![0f32; n * qd];
                let mut scratch: Vec<ThreadScratch> = (0..threads).map(|_| ThreadScratch::default()).collect();
                attention(&shape, kernels, &c, &mut out, &mut Shared::default(), &mut scratch);
                for (i, (x, y)) in out.iter().zip(&want).enumerate() {
                    assert!((*x as f64 - y).abs() <= 1e-5 * (1.0 + y.abs()), "({past}, {n}) [{i}]: {x} vs {y}");
                }
                outs.push(out);
            }
            // The thread count changes nothing, to the bit.
            assert!(outs[0].iter().zip(&outs[1]).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
