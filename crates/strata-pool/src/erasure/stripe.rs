//! Where the bytes of an erasure-coded volume live: pure arithmetic.
//!
//! The volume is cut into **stripes** of K strips of `strip` bytes. Stripe
//! `g` covers volume bytes `[g*K*strip, (g+1)*K*strip)`; its data strip
//! `d` holds the `d`-th `strip` bytes of it; it has M parity strips.
//! Every strip of stripe `g` sits at the same place on its node's shard
//! volume: bytes `[g*strip, (g+1)*strip)`. A shard volume is therefore
//! `strip` bytes per stripe, whichever position (data `d` or parity `j`) a
//! node holds, and the placement chunk of a stripe is the chunk of that
//! shard address (so a 64 MiB placement chunk holds 64 MiB of every
//! shard, K x 64 MiB of data).
//!
//! ```text
//! volume bytes:  | g0: d0 d1 d2 d3 | g1: d0 d1 d2 d3 | ...
//! shard d1:      | g0.d1 | g1.d1 | ...      (strip bytes per stripe)
//! shard p0:      | g0.p0 | g1.p0 | ...
//! ```

use std::ops::Range;

/// The stripe arithmetic of one volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripes {
    /// K.
    pub data: usize,
    /// M.
    pub parity: usize,
    /// Bytes per strip.
    pub strip: u64,
}

/// The part of an I/O inside one stripe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripePiece {
    /// The stripe.
    pub stripe: u64,
    /// Bytes of the stripe's data, `0..K*strip`.
    pub within: Range<u64>,
    /// Where those bytes are in the I/O's buffer.
    pub at: u64,
}

impl Stripes {
    /// Data bytes per stripe.
    pub fn stripe_bytes(&self) -> u64 {
        self.data as u64 * self.strip
    }

    /// Stripes of a volume of `size` bytes (the last may be partly
    /// beyond the end).
    pub fn count(&self, size: u64) -> u64 {
        size.div_ceil(self.stripe_bytes())
    }

    /// Bytes of each node's shard volume for a volume of `size` bytes.
    pub fn shard_bytes(&self, size: u64) -> u64 {
        self.count(size) * self.strip
    }

    /// The shard byte where stripe `g`'s strips sit.
    pub fn shard_offset(&self, g: u64) -> u64 {
        g * self.strip
    }

    /// The stripes touched by volume bytes `[offset, offset+len)`, in
    /// order.
    pub fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = StripePiece> + '_ {
        let sb = self.stripe_bytes();
        let end = offset + len;
        let first = offset / sb;
        let last = if len == 0 { first } else { (end - 1) / sb + 1 };
        (first..last).map(move |g| {
            let start = (g * sb).max(offset);
            let stop = ((g + 1) * sb).min(end);
            StripePiece { stripe: g, within: start - g * sb..stop - g * sb, at: start - offset }
        })
    }

    /// The data strips a piece of a stripe touches.
    pub fn strips_of(&self, within: &Range<u64>) -> Range<usize> {
        if within.is_empty() {
            return 0..0;
        }
        (within.start / self.strip) as usize..((within.end - 1) / self.strip) as usize + 1
    }

    /// The stripes whose strips sit in shard bytes `range`.
    pub fn stripes_in_shard_range(&self, range: Range<u64>) -> Range<u64> {
        range.start / self.strip..range.end.div_ceil(self.strip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_io_once_and_in_order() {
        let s = Stripes { data: 4, parity: 2, strip: 4096 };
        assert_eq!(s.stripe_bytes(), 16384);
        let pieces: Vec<_> = s.pieces(12288, 8192).collect();
        assert_eq!(
            pieces,
            vec![
                StripePiece { stripe: 0, within: 12288..16384, at: 0 },
                StripePiece { stripe: 1, within: 0..4096, at: 4096 },
            ]
        );
        assert_eq!(s.strips_of(&pieces[0].within), 3..4);
        assert_eq!(s.strips_of(&(4095..4097)), 0..2);
        assert_eq!(s.count(16385), 2);
        assert_eq!(s.shard_bytes(16385), 8192);
        assert_eq!(s.shard_offset(3), 12288);
        assert_eq!(s.stripes_in_shard_range(4096..12289), 1..4);
        // Odd K: a stripe is not a power of two.
        let s = Stripes { data: 3, parity: 1, strip: 512 };
        let total: u64 = s.pieces(1000, 5000).map(|p| p.within.end - p.within.start).sum();
        assert_eq!(total, 5000);
        assert!(s.pieces(1000, 5000).all(|p| p.within.end <= 1536));
    }
}
