//! The hashes placement is built on: a 64-bit mixer and the straw2 draw.
//!
//! # Invariant: bit-identical on every machine
//!
//! Every gateway and node computes placement on its own from the same map,
//! and they must agree to the last bit: a disagreement means two machines
//! look for a chunk in different places. So this module uses only integer
//! operations and the IEEE-754 basic operations (`+ - * /` and exact
//! integer-to-float conversions), which are correctly rounded on every
//! target Rust supports and which Rust never contracts into fused
//! multiply-adds. It calls no libm function: `f64::ln` and `f64::log2`
//! differ in their last bits between C libraries, which is why Ceph's
//! straw2 uses a fixed-point table instead. Golden values in the tests pin
//! the outputs, so an accidental change (which would move data in a live
//! cluster) fails CI.
//!
//! # The straw2 draw
//!
//! A node's score for a placement group is `log2(u) / weight`, where `u` in
//! (0, 1] comes from hashing the pair. `-log2(u) / weight` is exponentially
//! distributed with rate proportional to `weight`, so the highest score
//! (the shortest "time") wins with probability `weight / total`, and the
//! maximum over a set of nodes is distributed like one draw with the
//! summed weight. Changing one node's weight only changes the contests
//! that node takes part in: that is why straw2 moves no more than it must.
//!
//! Among nodes of equal weight the highest 64-bit draw wins outright (it
//! has the highest `u`); the logarithm is needed only to compare winners of
//! different weights. `placer.rs` relies on this to keep the logarithm out
//! of its inner loop.

/// Salt for placement-group keys, so that `pg_key(x)` and `node_key(x)`
/// differ for the same integer.
const PG_SALT: u64 = 0x7067_5f6b_6579_0001; // "pg_key" v1
/// Salt for node keys.
const NODE_SALT: u64 = 0x6e6f_6465_6b65_0001; // "nodeke" v1
/// Salt for volume keys (chunk to placement group).
const VOLUME_SALT: u64 = 0x766f_6c75_6d65_0001; // "volume" v1

/// `log2(e)`: converts a natural logarithm to base 2.
const LOG2_E: f64 = std::f64::consts::LOG2_E;
/// `sqrt(2)`: mantissas above it are halved so the series argument stays
/// small (|s| <= 0.1716).
const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// The SplitMix64 output function: a bijective 64-bit mixer with full
/// avalanche (every input bit flips each output bit with probability ~1/2).
pub(crate) use strata_rand::mix64;

/// The key of a placement group in every draw it takes part in.
pub(crate) const fn pg_key(pg: u32) -> u64 {
    mix64(pg as u64 ^ PG_SALT)
}

/// The key of a node (by its stable id) in every draw it takes part in.
pub(crate) const fn node_key(id: u32) -> u64 {
    mix64(id as u64 ^ NODE_SALT)
}

/// Where a volume's chunk 0 lands; the following chunks take the
/// following placement groups (see `chunk.rs`).
pub(crate) const fn volume_key(volume: u64) -> u64 {
    mix64(volume ^ VOLUME_SALT)
}

/// The 64 random bits of one (placement group, node) contest.
#[inline]
pub(crate) const fn draw(pg_key: u64, node_key: u64) -> u64 {
    mix64(pg_key ^ node_key)
}

/// `log2(u)` for `u = ((h >> 11) + 1) / 2^53`, a uniform value in (0, 1]
/// built from the top 53 bits of `h`; the result is in [-53, 0].
///
/// Computed from the exponent and a short atanh series of the mantissa
/// using only basic operations (see the module doc); absolute error below
/// 1e-10, which is far below the gap between any two scores that matter.
pub(crate) fn log2_unit(h: u64) -> f64 {
    let x = (h >> 11) + 1; // 1 ..= 2^53, never 0
    let top = 63 - x.leading_zeros(); // x in [2^top, 2^(top+1))
    // The bits below the leading one, left-aligned into a 52-bit fraction:
    // m = x / 2^top in [1, 2), exactly (x has at most 54 significant bits,
    // and only x = 2^53 has 54, whose fraction is 0).
    let frac = (x << x.leading_zeros() << 1) >> 12;
    let m = f64::from_bits((1023u64 << 52) | frac);
    f64::from(top) - 53.0 + log2_mantissa(m)
}

/// `log2(m)` for `m` in [1, 2), by the atanh series.
fn log2_mantissa(m: f64) -> f64 {
    let (m, exp) = if m > SQRT_2 { (m * 0.5, 1.0) } else { (m, 0.0) }; // exact halving
    // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0 + s2 * (1.0 / 11.0)))));
    exp + 2.0 * s * series * LOG2_E
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_LOG2_A: u64 = 13843855590797443611;
    const GOLDEN_LOG2_B: u64 = 13797431042916760576;

    /// The natural-log reference is allowed here: tests only compare.
    fn reference(h: u64) -> f64 {
        let u = ((h >> 11) + 1) as f64 / (1u64 << 53) as f64;
        u.log2()
    }

    #[test]
    fn log2_unit_matches_the_library_logarithm_closely() {
        let mut h = 1u64;
        for _ in 0..100_000 {
            h = mix64(h);
            let got = log2_unit(h);
            let want = reference(h);
            assert!((got - want).abs() < 1e-9, "h={h:#x}: {got} vs {want}");
        }
        assert_eq!(log2_unit(u64::MAX), 0.0, "u = 1 gives log2 = 0");
        assert!((log2_unit(0) + 53.0).abs() < 1e-12, "u = 2^-53 gives -53");
    }

    #[test]
    fn log2_unit_is_monotone_in_the_hash() {
        // Sorted inputs give sorted outputs: the straw2 contest depends on
        // the order of draws, so the approximation must not reorder them
        // beyond its tiny error.
        let mut hs: Vec<u64> = (0..50_000u64).map(mix64).collect();
        hs.sort_unstable();
        for w in hs.windows(2) {
            assert!(log2_unit(w[0]) <= log2_unit(w[1]) + 1e-12, "{:#x} {:#x}", w[0], w[1]);
        }
    }

    #[test]
    fn keys_are_pinned() {
        // Golden values: changing any of these moves every chunk of every
        // live cluster. Bump the map's algorithm version instead.
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
        assert_eq!(pg_key(0), mix64(PG_SALT));
        assert_eq!(draw(pg_key(1), node_key(2)), mix64(pg_key(1) ^ node_key(2)));
        assert_eq!(log2_unit(0x0123_4567_89ab_cdef).to_bits(), GOLDEN_LOG2_A);
        assert_eq!(log2_unit(0xfedc_ba98_7654_3210).to_bits(), GOLDEN_LOG2_B);
    }
}
