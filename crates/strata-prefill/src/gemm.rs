//! The one call into the GEMM library: `matrixmultiply::sgemm` behind
//! bounds checks, the row-split across threads the prefill uses, and the
//! library's own rate on a square product (the yardstick the benchmark
//! reports the prefill against).
//!
//! A matrix is a slice with a row stride and a column stride (both
//! non-negative here), so a transpose or a column block of a wider
//! matrix is a view, not a copy. [`gemm`] checks that the last element of
//! each view lies inside its slice and that the output view cannot alias
//! itself, then computes `C = alpha · A · B + beta · C`.
//!
//! `matrixmultiply` (0.3, AVX-512 / AVX2 kernels picked at run time) packs
//! both operands before multiplying; the packing is a block copy when A
//! is column-major and B row-major (unit row stride for A, unit column
//! stride for B), and an element-by-element gather otherwise. Callers
//! arrange their operands for the first case where it matters
//! (`attention`). Its `threading` feature is not used: the prefill splits
//! rows over scoped threads itself, and the benchmark measures the
//! library's square product the same way.

/// A read-only strided matrix view.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// A dense row-major `rows × cols` matrix.
    pub fn dense(data: &'a [f32], rows: usize, cols: usize) -> View<'a> {
        View { data, rows, cols, rs: cols, cs: 1 }
    }

    /// The transpose (no copy).
    pub fn t(self) -> View<'a> {
        View { data: self.data, rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs }
    }
}

/// Index one past the last element a `rows × cols` view with these strides
/// touches (0 for an empty view).
fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
}

/// `c = alpha · a · b + beta · c`, where `c` is `a.rows × b.cols` with row
/// stride `rsc` and unit column stride.
///
/// # Panics
///
/// On mismatched dimensions or a view that reaches past its slice: both
/// are bugs in this crate, never caused by input.
pub(crate) fn gemm(alpha: f32, a: View<'_>, b: View<'_>, beta: f32, c: &mut [f32], rsc: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions differ");
    assert!(extent(m, k, a.rs, a.cs) <= a.data.len(), "A view out of bounds");
    assert!(extent(k, n, b.rs, b.cs) <= b.data.len(), "B view out of bounds");
    assert!(extent(m, n, rsc, 1) <= c.len(), "C view out of bounds");
    // Distinct rows of C must not overlap (that would be a data race
    // inside the kernel, and a wrong answer).
    assert!(m <= 1 || rsc >= n, "C rows overlap");
    if m == 0 || n == 0 {
        return;
    }
    let s = |x: usize| isize::try_from(x).expect("stride fits isize");
    // SAFETY: the asserts above put every element sgemm reads from A and B
    // and writes to C inside the borrowed slices; C is borrowed mutably,
    // so it aliases neither A nor B, and its rows do not overlap.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            s(a.rs),
            s(a.cs),
            b.data.as_ptr(),
            s(b.rs),
            s(b.cs),
            beta,
            c.as_mut_ptr(),
            s(rsc),
            1,
        );
    }
}

impl<'a> View<'a> {
    /// Rows `start..start + rows` of this view.
    ///
    /// # Panics
    ///
    /// When the rows are not all in the view (a bug in this crate).
    pub fn rows(self, start: usize, rows: usize) -> View<'a> {
        assert!(start + rows <= self.rows, "rows {start}+{rows} of {}", self.rows);
        if rows == 0 {
            return View { data: &[], rows: 0, ..self };
        }
        View { data: &self.data[start * self.rs..], rows, ..self }
    }
}

/// `out = x · w + beta · out` with the rows of `x` (and of `out`, row
/// stride `rso`, unit column stride) split across `threads` scoped
/// threads. Each row's result does not depend on the split: a row of C
/// is computed by the same kernel over the same `k` blocks wherever it
/// falls.
pub(crate) fn linear(x: View<'_>, w: View<'_>, beta: f32, out: &mut [f32], rso: usize, threads: usize) {
    let (rows, n) = (x.rows, w.cols);
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 || rows == 0 {
        gemm(1.0, x, w, beta, out, rso);
        return;
    }
    let per = rows.div_ceil(threads);
    assert!(out.len() >= (rows - 1) * rso + n, "C view out of bounds");
    std::thread::scope(|s| {
        for (t, os) in out.chunks_mut(per * rso).enumerate() {
            let start = t * per;
            if start >= rows {
                break;
            }
            let xs = x.rows(start, per.min(rows - start));
            s.spawn(move || gemm(1.0, xs, w, beta, os, rso));
        }
    });
}

/// The GEMM library's rate on a dense `n × n × n` product on this
/// machine, in GFLOP/s (`2n³` FLOPs a product): the best of `reps` runs,
/// with rows split across `threads` threads as the prefill splits them.
/// The yardstick the prefill's own rate is reported against.
pub fn square_gemm_gflops(n: usize, threads: usize, reps: usize) -> f64 {
    // The values do not change the time (no denormals: each product is
    // n · 0.125); constants keep the setup cheap in a debug build.
    let (a, b) = (vec![0.5f32; n * n], vec![0.25f32; n * n]);
    let mut c = vec![0f32; n * n];
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t0 = std::time::Instant::now();
        linear(View::dense(&a, n, n), View::dense(&b, n, n), 0.0, &mut c, n, threads);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (n as f64).powi(3) / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: View<'_>, b: View<'_>) -> Vec<f32> {
        let mut c = vec![0f32; a.rows * b.cols];
        for i in 0..a.rows {
            for j in 0..b.cols {
                c[i * b.cols + j] =
                    (0..a.cols).map(|p| a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs]).sum();
            }
        }
        c
    }

    #[test]
    fn strided_products_match_the_definition() {
        let a: Vec<f32> = (0..35).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..42).map(|i| (i as f32 * 0.11).cos()).collect();
        // A: 5x7 dense; B: 7x6 dense, and B's transpose used as 6x7.
        let (av, bv) = (View::dense(&a, 5, 7), View::dense(&b, 7, 6));
        let mut c = vec![0f32; 30];
        gemm(1.0, av, bv, 0.0, &mut c, 6);
        for (x, y) in c.iter().zip(naive(av, bv)) {
            assert!((x - y).abs() < 1e-5);
        }
        let mut ct = vec![0f32; 36];
        gemm(1.0, bv.t(), bv, 0.0, &mut ct, 6);
        for (x, y) in ct.iter().zip(naive(bv.t(), bv)) {
            assert!((x - y).abs() < 1e-5);
        }
        // Threads split rows and agree with one thread exactly.
        let mut c2 = vec![0f32; 30];
        linear(av, bv, 0.0, &mut c2, 6, 3);
        assert_eq!(c, c2);
        // beta = 1 accumulates, and a strided input (columns 1..4 of A)
        // splits the same way.
        linear(av, bv, 1.0, &mut c2, 6, 2);
        assert!(c2.iter().zip(&c).all(|(x, y)| (x - 2.0 * y).abs() < 1e-5));
        let sub = View { data: &a[1..], rows: 5, cols: 4, rs: 7, cs: 1 };
        let b4 = View::dense(&b, 4, 6);
        let (mut one, mut two) = (vec![0f32; 30], vec![0f32; 30]);
        linear(sub, b4, 0.0, &mut one, 6, 1);
        linear(sub, b4, 0.0, &mut two, 6, 2);
        assert_eq!(one, two);
        for (x, y) in one.iter().zip(naive(sub, b4)) {
            assert!((x - y).abs() < 1e-5);
        }
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_view_past_its_slice_is_refused() {
        let a = vec![0f32; 10];
        let mut c = vec![0f32; 4];
        gemm(1.0, View::dense(&a, 2, 6), View::dense(&a, 6, 2), 0.0, &mut c, 2);
    }
}
