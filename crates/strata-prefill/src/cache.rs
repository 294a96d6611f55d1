//! The attention keys and values of every layer, and their block format.
//!
//! Layer `l` holds `len` rows of `kv_dim` f32 keys (after the rotary
//! embedding) and as many rows of values, row `p` for the token at
//! position `p`. A prefill appends rows; [`KvCache::load_block`] appends
//! rows from stored bytes. Rows are only ever appended in position order,
//! so row `p` of every layer always belongs to the same token.
//!
//! # Block format
//!
//! A block is `tokens` consecutive positions, all layers:
//!
//! ```text
//! for l in 0..layers: K rows [start, start + tokens) then V rows, each
//!                     row kv_dim little-endian f32
//! ```
//!
//! `2 · layers · tokens · kv_dim · 4` bytes; nothing else, so a block's
//! size says how many tokens it holds and a block of another shape is
//! refused by its size. Integrity is the store's job (it checksums every
//! block).

use crate::Shape;

/// Why a block could not be loaded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlockError {
    /// The block's length is not `tokens` rows of this shape.
    #[error("a block of {tokens} tokens is {expected} bytes for this model, not {got}")]
    Size {
        /// Tokens the block should hold.
        tokens: usize,
        /// Its size for this model.
        expected: usize,
        /// The size it has.
        got: usize,
    },
}

/// Keys and values of every layer, for positions `0..len`.
#[derive(Debug, Clone, PartialEq)]
pub struct KvCache {
    kv_dim: usize,
    len: usize,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvCache {
    /// An empty cache for `shape`.
    pub fn new(shape: &Shape) -> KvCache {
        KvCache { kv_dim: shape.kv_dim(), len: 0, k: vec![Vec::new(); shape.layers], v: vec![Vec::new(); shape.layers] }
    }

    /// An empty cache for `shape` with room for `tokens` positions, as an
    /// engine allocates its KV pages before loading into them.
    pub fn with_capacity(shape: &Shape, tokens: usize) -> KvCache {
        let row = || Vec::with_capacity(tokens * shape.kv_dim());
        KvCache {
            kv_dim: shape.kv_dim(),
            len: 0,
            k: (0..shape.layers).map(|_| row()).collect(),
            v: (0..shape.layers).map(|_| row()).collect(),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of a block of `tokens` positions.
    pub fn block_bytes(&self, tokens: usize) -> usize {
        2 * self.k.len() * tokens * self.kv_dim * 4
    }

    /// Layer `l`'s keys and values, `len · kv_dim` each.
    pub(crate) fn layer(&self, l: usize) -> (&[f32], &[f32]) {
        (&self.k[l], &self.v[l])
    }

    /// Makes room for `tokens` more positions in every layer, so that a
    /// prefill appends without reallocating.
    pub(crate) fn reserve(&mut self, tokens: usize) {
        for r in self.k.iter_mut().chain(&mut self.v) {
            r.reserve(tokens * self.kv_dim);
        }
    }

    /// Appends one layer's rows for the positions a prefill is computing.
    /// The model appends every layer's rows, then calls [`Self::advance`].
    #[cfg(test)]
    pub(crate) fn push_rows(&mut self, l: usize, k: &[f32], v: &[f32]) {
        self.k[l].extend_from_slice(k);
        self.v[l].extend_from_slice(v);
    }

    /// Appends one layer's rows from rows of `src`, `stride` apart, whose
    /// keys start at column `k_at` and values at `v_at` (the product that
    /// computes Q, K and V side by side). The model appends every layer's
    /// rows, then calls [`Self::advance`].
    pub(crate) fn push_rows_strided(&mut self, l: usize, src: &[f32], stride: usize, k_at: usize, v_at: usize) {
        let w = self.kv_dim;
        for row in src.chunks_exact(stride) {
            self.k[l].extend_from_slice(&row[k_at..k_at + w]);
            self.v[l].extend_from_slice(&row[v_at..v_at + w]);
        }
    }

    /// Counts `n` appended positions once every layer has them.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
        debug_assert!(self.k.iter().chain(&self.v).all(|r| r.len() == self.len * self.kv_dim));
    }

    /// Keeps positions `0..n` (no-op when `n >= len`): an engine drops the
    /// last cached position when it must compute it again for its logits.
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        for r in self.k.iter_mut().chain(&mut self.v) {
            r.truncate(n * self.kv_dim);
        }
        self.len = n;
    }

    /// Positions `start..start + tokens` in the block format.
    ///
    /// # Panics
    ///
    /// When the range is not held.
    pub fn to_block(&self, start: usize, tokens: usize) -> Vec<u8> {
        assert!(start + tokens <= self.len, "block {start}+{tokens} past {} cached positions", self.len);
        let mut out = Vec::with_capacity(self.block_bytes(tokens));
        let rows = start * self.kv_dim..(start + tokens) * self.kv_dim;
        for (k, v) in self.k.iter().zip(&self.v) {
            for x in k[rows.clone()].iter().chain(&v[rows.clone()]) {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out
    }

    /// Appends a stored block of `tokens` positions: its bytes are copied
    /// into the tensors attention reads. On an error nothing is appended.
    pub fn load_block(&mut self, tokens: usize, block: &[u8]) -> Result<(), BlockError> {
        let expected = self.block_bytes(tokens);
        if block.len() != expected {
            return Err(BlockError::Size { tokens, expected, got: block.len() });
        }
        let per = tokens * self.kv_dim * 4;
        for (l, layer) in block.chunks_exact(2 * per).enumerate() {
            let (kb, vb) = layer.split_at(per);
            extend_le(&mut self.k[l], kb);
            extend_le(&mut self.v[l], vb);
        }
        self.len += tokens;
        Ok(())
    }

    /// True when positions `0..n` of both caches are bit-identical.
    pub fn prefix_equals(&self, other: &KvCache, n: usize) -> bool {
        let e = n * self.kv_dim;
        n <= self.len.min(other.len)
            && self.kv_dim == other.kv_dim
            && self
                .k
                .iter()
                .zip(&other.k)
                .chain(self.v.iter().zip(&other.v))
                .all(|(a, b)| a[..e].iter().map(|x| x.to_bits()).eq(b[..e].iter().map(|x| x.to_bits())))
    }
}

/// Appends little-endian f32s (`bytes.len()` is a multiple of 4).
fn extend_le(dst: &mut Vec<f32>, bytes: &[u8]) {
    let start = dst.len();
    dst.resize(start + bytes.len() / 4, 0.0);
    // A zip over exact chunks compiles to a vectorised copy.
    for (d, c) in dst[start..].iter_mut().zip(bytes.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(shape: &Shape, n: usize) -> KvCache {
        let mut c = KvCache::new(shape);
        for l in 0..shape.layers {
            let k: Vec<f32> = (0..n * shape.kv_dim()).map(|i| (i + 1000 * l) as f32).collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            c.push_rows(l, &k, &v);
        }
        c.advance(n);
        c
    }

    #[test]
    fn blocks_round_trip_and_their_size_is_pinned() {
        let s = Shape::preset("tiny").unwrap();
        let c = filled(&s, 8);
        let b0 = c.to_block(0, 4);
        // 2 layers x (K + V) x 4 tokens x 256 floats x 4 bytes.
        assert_eq!(b0.len(), 2 * 2 * 4 * 256 * 4);
        assert_eq!(b0.len(), c.block_bytes(4));
        let mut d = KvCache::new(&s);
        d.load_block(4, &b0).unwrap();
        d.load_block(4, &c.to_block(4, 4)).unwrap();
        assert_eq!(d, c);
        assert!(d.prefix_equals(&c, 8));
    }

    #[test]
    fn a_block_of_the_wrong_size_is_refused_and_loads_nothing() {
        let s = Shape::preset("tiny").unwrap();
        let c = filled(&s, 4);
        let mut d = KvCache::new(&s);
        let b = c.to_block(0, 4);
        let err = d.load_block(4, &b[..b.len() - 4]).unwrap_err();
        assert!(matches!(err, BlockError::Size { tokens: 4, .. }));
        assert!(d.is_empty() && d.layer(0).0.is_empty());
        // One flipped bit is caught by the comparison.
        let mut b2 = b.clone();
        b2[100] ^= 1;
        d.load_block(4, &b2).unwrap();
        assert!(!d.prefix_equals(&c, 4));
    }
}
