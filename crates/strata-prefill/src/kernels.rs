//! The prefill's element-wise work, vectorised: `exp`, attention's
//! online softmax, RMSNorm, SwiGLU and the rotary embedding.
//!
//! Each kernel is written once, as plain loops over slices that LLVM
//! vectorises (fixed-width accumulators where a sum is reduced, `max` and
//! selects instead of branches, [`exp`] a polynomial with no calls), and
//! instantiated three times: for AVX-512 (with AVX2 and FMA), for AVX2 +
//! FMA, and for the baseline of the target (x86-64: SSE2, no FMA). The
//! CPU's features are checked once, when a [`Kernels`] is made, and it
//! keeps its choice. The FMA builds fuse multiply-adds and the baseline
//! does not, so they differ in the last bits; one [`Kernels`] computes
//! the same bits on every call (the benchmark checks loaded keys and
//! values bit-for-bit against recomputed ones, and both come from here).
//!
//! This module and `gemm` hold the crate's `unsafe`: here, calling a
//! `#[target_feature]` function after detecting the feature. What
//! justified it, on the `tiny` model at 8k tokens on one core of an AMD
//! EPYC (Zen 4): the softmax passes took 0.25 s of a 1.6 s prefill
//! with the baseline build's 4 lanes, 0.12 s with AVX2 + FMA and 0.09 s
//! with AVX-512; before any of this, scalar `expf` calls took 15%.

/// `log2(e)`.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln(2)` split in two, so that `x - n·ln2` is exact for `|n| < 2^8`:
/// the high part has 9 significant bits.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 · 2^23`: adding it to a float of magnitude under `2^22` rounds to
/// the nearest integer, which then sits in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// [`exp`]'s input range: below, it returns `exp(EXP_MIN)` (about
/// `1.6e-38`, the smallest normal float's order); above, `exp(EXP_MAX)`.
pub(crate) const EXP_MIN: f32 = -87.0;
/// See [`EXP_MIN`].
pub(crate) const EXP_MAX: f32 = 88.0;
/// The largest relative error of [`exp`] against the exact value over
/// `[EXP_MIN, EXP_MAX]`, with or without FMA: 8.2e-8 is the worst the
/// tests have seen (a 2M-point grid and 1M random points, every build).
#[cfg(test)]
pub(crate) const EXP_MAX_REL_ERROR: f32 = 1e-7;

/// `a · b + c`, fused when `FMA` (one rounding) and separate otherwise.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `e^x` for `x` in `[EXP_MIN, EXP_MAX]` within [`EXP_MAX_REL_ERROR`];
/// clamped outside (NaN gives `exp(EXP_MAX)`). Branch-free and call-free,
/// so a loop over it vectorises: `x = n·ln2 + r` with `|r| ≤ ln2/2`,
/// `e^r = 1 + r + r²·p(r)` with `p` of degree 5 (Cephes' `expf`
/// coefficients), and `2^n` built in the exponent bits.
#[inline(always)]
fn exp<const FMA: bool>(x: f32) -> f32 {
    // Selects, not f32::max/min: they compile to one vminps/vmaxps; a
    // NaN compares false, so it takes EXP_MAX.
    let x = if x < EXP_MAX { x } else { EXP_MAX };
    let x = if x > EXP_MIN { x } else { EXP_MIN };
    let t = madd::<FMA>(x, LOG2E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let r = madd::<FMA>(n, -LN2_LO, madd::<FMA>(n, -LN2_HI, x));
    let mut p = 1.987_569_1e-4;
    p = madd::<FMA>(p, r, 1.398_2e-3);
    p = madd::<FMA>(p, r, 8.333_452e-3);
    p = madd::<FMA>(p, r, 4.166_579_6e-2);
    p = madd::<FMA>(p, r, 1.666_666_5e-1);
    p = madd::<FMA>(p, r, 0.5);
    let e = madd::<FMA>(p, r * r, r) + 1.0;
    // t's low mantissa bits hold n (|n| ≤ 127 here), so 2^n's exponent
    // field is n + 127, in 1..=254: a normal float.
    let n_bits = t.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    e * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// The columns of row `t` of a causal tile that see it, in head `g`'s
/// `r` columns: queries `t..r` (query `i` sits at the tile's row `i`).
#[inline(always)]
fn diag_cols(r: usize, t: usize, g: usize) -> std::ops::Range<usize> {
    g * r + t..(g + 1) * r
}

/// Calls `f(entries, columns)` for each visible run of a tile of `w`
/// columns whose rows from `full` on are rows `t0..` of the causal
/// triangle (see [`Kernels::softmax_tile`]), and `hidden` for each hidden
/// run. A run is contiguous, so `f` can zip it with per-column slices and
/// vectorise; the rows before `full` are the caller's, whole.
#[inline(always)]
fn for_diagonal(
    st: &mut [f32],
    w: usize,
    r: usize,
    (full, t0): (usize, usize),
    mut f: impl FnMut(&mut [f32], std::ops::Range<usize>),
    mut hidden: impl FnMut(&mut [f32]),
) {
    for (t, row) in (t0..).zip(st[full * w..].chunks_exact_mut(w)) {
        for g in 0..w / r {
            let c = diag_cols(r, t, g);
            hidden(&mut row[g * r..c.start]);
            f(&mut row[c.clone()], c);
        }
    }
}

/// Where a tile of transposed scores sits in its block (see
/// [`Kernels::softmax_tile`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tile {
    /// Columns: `groups · r`.
    pub w: usize,
    /// Queries per head in the block.
    pub r: usize,
    /// Leading rows visible to every query.
    pub full: usize,
    /// The causal triangle's row the rows after `full` start at.
    pub t0: usize,
    /// The block's first tile: it sets the running state.
    pub first: bool,
}

/// See [`Kernels::softmax_tile`].
#[inline(always)]
fn softmax_tile_impl<const FMA: bool>(st: &mut [f32], tile: Tile, state: &mut [f32]) {
    let Tile { w, r, full, t0, first } = tile;
    let (m, rest) = state.split_at_mut(w);
    let (l, alpha) = rest.split_at_mut(w);
    // The tile's column maxima, in `alpha` for now.
    alpha.fill(f32::NEG_INFINITY);
    for row in st[..full * w].chunks_exact(w) {
        // `max`, not a select: LLVM turns `if x > a { a = x }` into a
        // masked store, which is slow (half the pass's time on AMD).
        for (a, x) in alpha.iter_mut().zip(row) {
            *a = a.max(*x);
        }
    }
    for_diagonal(
        st,
        w,
        r,
        (full, t0),
        |xs, c| {
            for (a, x) in alpha[c].iter_mut().zip(xs) {
                *a = a.max(*x);
            }
        },
        |_| {},
    );
    for ((m, l), a) in m.iter_mut().zip(l.iter_mut()).zip(alpha.iter_mut()) {
        if first {
            (*m, *l, *a) = (*a, 0.0, 0.0);
        } else {
            let new = if *a > *m { *a } else { *m };
            *a = exp::<FMA>(*m - new);
            *m = new;
            *l *= *a;
        }
    }
    for row in st[..full * w].chunks_exact_mut(w) {
        for ((x, m), l) in row.iter_mut().zip(&*m).zip(l.iter_mut()) {
            *x = exp::<FMA>(*x - m);
            *l += *x;
        }
    }
    for_diagonal(
        st,
        w,
        r,
        (full, t0),
        |xs, c| {
            for ((x, m), l) in xs.iter_mut().zip(&m[c.clone()]).zip(&mut l[c]) {
                *x = exp::<FMA>(*x - m);
                *l += *x;
            }
        },
        |h| h.fill(0.0),
    );
}

/// See [`Kernels::rms_norm`].
#[inline(always)]
fn rms_norm_impl<const FMA: bool>(dst: &mut [f32], src: &[f32], w: &[f32], eps: f32) {
    // Sixteen independent partial sums: a vector register's worth (or
    // two), so the reduction vectorises in a fixed order.
    let mut acc = [0f32; 16];
    let chunks = src.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = madd::<FMA>(*x, *x, *a);
        }
    }
    for (a, x) in acc.iter_mut().zip(tail) {
        *a = madd::<FMA>(*x, *x, *a);
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    let inv = 1.0 / (acc[0] / src.len() as f32 + eps).sqrt();
    for ((d, s), g) in dst.iter_mut().zip(src).zip(w) {
        *d = s * (inv * g);
    }
}

/// See [`Kernels::swiglu`].
#[inline(always)]
fn swiglu_impl<const FMA: bool>(g: &mut [f32], u: &[f32]) {
    for (g, u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + exp::<FMA>(-*g)) * u;
    }
}

/// See [`Kernels::rope`].
#[inline(always)]
fn rope_impl<const FMA: bool>(row: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for head in row.chunks_exact_mut(2 * half) {
        let (a, b) = head.split_at_mut(half);
        for (((x0, x1), c), s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
            let (u, v) = (*x0, *x1);
            *x0 = madd::<FMA>(u, *c, -(v * s));
            *x1 = madd::<FMA>(u, *s, v * c);
        }
    }
}

/// `e^x` over a slice, in place (for tests and the scalar reference).
#[inline(always)]
#[cfg_attr(not(test), allow(dead_code))]
fn exp_slice_impl<const FMA: bool>(xs: &mut [f32]) {
    for x in xs {
        *x = exp::<FMA>(*x);
    }
}

/// Generates, for each kernel, its AVX-512 and AVX2 + FMA instantiations
/// and the method on [`Kernels`] that picks one of them or the baseline.
macro_rules! dispatch {
    ($( $(#[$doc:meta])* fn $name:ident / $avx:ident / $avx512:ident => $imp:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        $(
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[cfg_attr(not(test), allow(dead_code))]
            fn $avx($($arg: $ty),*) {
                $imp::<true>($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[cfg_attr(not(test), allow(dead_code))]
            fn $avx512($($arg: $ty),*) {
                $imp::<true>($($arg),*)
            }
        )*

        impl Kernels {
            $(
                $(#[$doc])*
                #[inline]
                #[cfg_attr(not(test), allow(dead_code))]
                pub(crate) fn $name(&self, $($arg: $ty),*) {
                    #[cfg(target_arch = "x86_64")]
                    if self.avx512 {
                        // SAFETY: `avx512` is true only when
                        // `Kernels::detect` found AVX-512F, AVX2 and FMA.
                        return unsafe { $avx512($($arg),*) };
                    }
                    #[cfg(target_arch = "x86_64")]
                    if self.avx2_fma {
                        // SAFETY: `avx2_fma` is true only when
                        // `Kernels::detect` found AVX2 and FMA on this CPU,
                        // which is all the target_feature function needs.
                        return unsafe { $avx($($arg),*) };
                    }
                    $imp::<false>($($arg),*)
                }
            )*
        }
    };
}

/// The kernels for this CPU: the widest instantiation it runs.
///
/// Invariant: `avx2_fma` is true only if the running CPU has AVX2 and
/// FMA, and `avx512` only if it has those and AVX-512F (the `unsafe`
/// calls above rely on it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernels {
    avx2_fma: bool,
    avx512: bool,
}

impl Kernels {
    /// The widest kernels this CPU runs.
    pub(crate) fn detect() -> Kernels {
        #[cfg(target_arch = "x86_64")]
        let avx2_fma = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        #[cfg(target_arch = "x86_64")]
        let avx512 = avx2_fma && std::arch::is_x86_feature_detected!("avx512f");
        #[cfg(not(target_arch = "x86_64"))]
        let (avx2_fma, avx512) = (false, false);
        Kernels { avx2_fma, avx512 }
    }

    /// The baseline kernels, whatever the CPU (tests compare the two).
    #[cfg(test)]
    pub(crate) fn baseline() -> Kernels {
        Kernels { avx2_fma: false, avx512: false }
    }

    /// Which instantiation runs: `"avx512"`, `"avx2+fma"` or `"baseline"`.
    pub(crate) fn name(&self) -> &'static str {
        match (self.avx512, self.avx2_fma) {
            (true, _) => "avx512",
            (false, true) => "avx2+fma",
            (false, false) => "baseline",
        }
    }
}

dispatch! {
    /// One tile of attention's online softmax (as in FlashAttention),
    /// down the columns of `st`: transposed scores, `rows × w`, row `j` a
    /// key, column `g·r + i` query `i` of the block's head `g`
    /// (`w = groups · r`; the geometry is in `tile`). Rows `..full` are
    /// visible to every query; the rows after them, if any, are rows
    /// `t0..` of the block's own `r` positions (the causal triangle, cut
    /// where a tile ends): row `full + t - t0` is visible to the columns
    /// with `i ≥ t`. A column
    /// with nothing visible yet (only when the `first` tile is all
    /// hidden to it) is not allowed: the tiles of a block start at key 0.
    ///
    /// `state` is `[m | l | alpha]`, `w` each: the running column maxima
    /// and sums of `exp(x − m)`, which the tile updates (the `first` tile
    /// sets them). Each visible entry becomes `exp(x − m)` with the new
    /// `m`, each hidden one 0; `alpha` gets the factor the columns' sums
    /// and outputs so far must be scaled by (0 for the `first` tile). The
    /// output of a column is `Σ exp(x − m) · v / l` once every tile ran.
    /// Requires `w` a multiple of `r`, `st.len()` a multiple of `w` with
    /// `t0 + rows − full ≤ r`, `state.len() == 3w`.
    fn softmax_tile / softmax_tile_avx2 / softmax_tile_avx512 => softmax_tile_impl(st: &mut [f32], tile: Tile, state: &mut [f32]);
    /// `dst = src / rms(src) · w`, where `rms` is the root mean square
    /// plus `eps` under the root (Llama's RMSNorm), for one row.
    fn rms_norm / rms_norm_avx2 / rms_norm_avx512 => rms_norm_impl(dst: &mut [f32], src: &[f32], w: &[f32], eps: f32);
    /// `g = silu(g) · u`, element-wise (Llama's SwiGLU).
    fn swiglu / swiglu_avx2 / swiglu_avx512 => swiglu_impl(g: &mut [f32], u: &[f32]);
    /// The rotary embedding of one row of whole heads, in place: each
    /// head's pair `(j, j + half)` is rotated by the angle whose `cos` and
    /// `sin` are `cos[j]`, `sin[j]` (`half = cos.len()`).
    fn rope / rope_avx2 / rope_avx512 => rope_impl(row: &mut [f32], cos: &[f32], sin: &[f32]);
    /// [`exp`] over a slice, in place.
    fn exp_slice / exp_slice_avx2 / exp_slice_avx512 => exp_slice_impl(xs: &mut [f32]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instantiation this CPU runs.
    fn variants() -> Vec<Kernels> {
        let best = Kernels::detect();
        let mut v = vec![best, Kernels::baseline()];
        if best.avx512 {
            v.push(Kernels { avx2_fma: true, avx512: false });
        }
        v
    }

    #[test]
    fn exp_is_within_its_stated_error_over_its_range() {
        // A 2M-point grid, 1M random points, and the ends and middle.
        let n = 2_000_000;
        let mut rng = strata_rand::Rng::new(7);
        let xs: Vec<f32> = (0..=n)
            .map(|i| EXP_MIN + (EXP_MAX - EXP_MIN) * i as f32 / n as f32)
            .chain((0..1_000_000).map(|_| EXP_MIN + (EXP_MAX - EXP_MIN) * rng.unit() as f32))
            .chain([EXP_MIN, EXP_MAX, 0.0, -0.0, 1.0, -1.0, f32::MIN_POSITIVE, -f32::MIN_POSITIVE])
            .filter(|x| (EXP_MIN..=EXP_MAX).contains(x))
            .collect();
        for k in variants() {
            let mut ys = xs.clone();
            k.exp_slice(&mut ys);
            let worst = xs
                .iter()
                .zip(&ys)
                .map(|(&x, &y)| {
                    let want = (x as f64).exp();
                    ((y as f64 - want) / want).abs()
                })
                .fold(0.0, f64::max);
            assert!(worst <= EXP_MAX_REL_ERROR as f64, "max relative error {worst:e} ({})", k.name());
            // The one sure thing: exp(0) is 1.
            let mut z = [0.0];
            k.exp_slice(&mut z);
            assert_eq!(z[0], 1.0);
        }
    }

    #[test]
    fn exp_clamps_outside_its_range_and_never_makes_nan_or_inf() {
        for k in variants() {
            let mut ys = [-1e30, -200.0, f32::NEG_INFINITY, -87.5, 100.0, f32::INFINITY, f32::NAN];
            k.exp_slice(&mut ys);
            let lo = (EXP_MIN as f64).exp() as f32;
            let hi = (EXP_MAX as f64).exp() as f32;
            for y in &ys[..4] {
                assert!((y / lo - 1.0).abs() < 1e-6, "{y}");
            }
            for y in &ys[4..] {
                assert!((y / hi - 1.0).abs() < 1e-6, "{y}");
            }
        }
    }

    /// Scores of a block of `groups` heads × `r` queries over `full + r`
    /// keys, transposed (the layout attention passes).
    fn scores(full: usize, r: usize, groups: usize) -> Vec<f32> {
        let w = groups * r;
        (0..(full + r) * w).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0).collect()
    }

    /// Runs the online softmax over `raw` in tiles of `tile` keys, then
    /// the causal tile, as attention does, and returns each column's
    /// weights (`exp(x − m) / l`, rescaled as later tiles raised `m`).
    fn tiled_softmax(k: Kernels, raw: &[f32], full: usize, r: usize, w: usize, tile: usize) -> Vec<f32> {
        let mut p = raw.to_vec();
        let mut state = vec![0f32; 3 * w];
        // Tiles of `tile` keys, as in attention: the causal rows may
        // start in one tile and end in the next.
        let rows = full + r;
        for (n, j0) in (0..rows).step_by(tile).enumerate() {
            let end = (j0 + tile).min(rows);
            let vis = full.clamp(j0, end) - j0;
            let t0 = j0.max(full) - full;
            k.softmax_tile(&mut p[j0 * w..end * w], Tile { w, r, full: vis, t0, first: n == 0 }, &mut state);
            // Rescale what earlier tiles produced, as attention rescales
            // its output.
            for row in p[..j0 * w].chunks_exact_mut(w) {
                for (x, a) in row.iter_mut().zip(&state[2 * w..]) {
                    *x *= a;
                }
            }
        }
        for row in p.chunks_exact_mut(w) {
            for (x, l) in row.iter_mut().zip(&state[w..2 * w]) {
                *x /= l;
            }
        }
        p
    }

    #[test]
    fn tiled_softmax_sums_to_one_hides_future_keys_and_matches_the_definition() {
        for k in variants() {
            for (full, r, groups, tile) in
                [(0, 1, 1, 4), (5, 4, 1, 2), (130, 8, 3, 64), (0, 64, 2, 16), (1000, 17, 1, 256), (1000, 16, 4, 1000)]
            {
                let w = groups * r;
                let raw = scores(full, r, groups);
                let p = tiled_softmax(k, &raw, full, r, w, tile);
                for c in 0..w {
                    let i = c % r;
                    let visible = full + i + 1;
                    let col: Vec<f32> = (0..full + r).map(|j| p[j * w + c]).collect();
                    assert!(col[visible..].iter().all(|&p| p == 0.0), "a future key got weight");
                    let sum: f32 = col.iter().sum();
                    assert!((sum - 1.0).abs() < 1e-5, "column {c} sums to {sum}");
                    // Against the definition, in f64.
                    let xs: Vec<f64> = (0..visible).map(|j| raw[j * w + c] as f64).collect();
                    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = xs.iter().map(|x| (x - m).exp()).sum();
                    for (j, x) in xs.iter().enumerate() {
                        let want = (x - m).exp() / z;
                        let got = col[j] as f64;
                        assert!((got - want).abs() <= 1e-6 + 1e-5 * want, "p[{j}][{c}] = {got}, want {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn rms_norm_matches_a_scalar_reference() {
        for k in variants() {
            for len in [1, 15, 16, 17, 256, 1000] {
                let x: Vec<f32> = (0..len).map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.3).collect();
                let w: Vec<f32> = (0..len).map(|i| 0.5 + (i % 5) as f32 * 0.25).collect();
                let mut got = vec![0f32; len];
                k.rms_norm(&mut got, &x, &w, 1e-5);
                let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / len as f64;
                let inv = 1.0 / (ms + 1e-5).sqrt();
                for i in 0..len {
                    let want = x[i] as f64 * inv * w[i] as f64;
                    assert!(
                        (got[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{len}: [{i}] {} vs {want}",
                        got[i]
                    );
                }
            }
        }
    }

    #[test]
    fn swiglu_and_rope_match_their_definitions() {
        for k in variants() {
            let g0: Vec<f32> = (0..203).map(|i| (i as f32 - 100.0) * 0.13).collect();
            let u: Vec<f32> = (0..203).map(|i| (i as f32 * 0.7).sin()).collect();
            let mut g = g0.clone();
            k.swiglu(&mut g, &u);
            for i in 0..g.len() {
                let x = g0[i] as f64;
                let want = x / (1.0 + (-x).exp()) * u[i] as f64;
                assert!((g[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "[{i}] {} vs {want}", g[i]);
            }
            // Two heads of width 8: pairs (j, j + 4) rotate.
            let (cos, sin): (Vec<f32>, Vec<f32>) =
                (0..4).map(|j| (j as f32 * 0.4).sin_cos()).map(|(s, c)| (c, s)).unzip();
            let x: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
            let mut y = x.clone();
            k.rope(&mut y, &cos, &sin);
            for h in 0..2 {
                for j in 0..4 {
                    let (a, b) = (x[h * 8 + j], x[h * 8 + j + 4]);
                    let want = (a * cos[j] - b * sin[j], a * sin[j] + b * cos[j]);
                    assert!((y[h * 8 + j] - want.0).abs() < 1e-5 && (y[h * 8 + j + 4] - want.1).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn each_build_gives_the_same_bits_every_time() {
        for k in variants() {
            let raw = scores(300, 16, 2);
            let (a, b) = (tiled_softmax(k, &raw, 300, 16, 32, 128), tiled_softmax(k, &raw, 300, 16, 32, 128));
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
}
