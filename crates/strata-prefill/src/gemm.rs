//! The one unsafe call: `matrixmultiply::sgemm` behind bounds checks.
//!
//! A matrix is a slice with a row stride and a column stride (both
//! non-negative here), so a transpose or a column block of a wider
//! matrix is a view, not a copy. [`gemm`] checks that the last element of
//! each view lies inside its slice and that the output view cannot alias
//! itself, then computes `C = alpha · A · B + beta · C`.

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

/// `out = x · w` for a dense `rows × w.rows` input, with the rows split
/// across `threads` scoped threads. `out` is `rows × w.cols`, dense.
pub(crate) fn linear(x: &[f32], rows: usize, w: View<'_>, out: &mut [f32], threads: usize) {
    let (k, n) = (w.rows, w.cols);
    assert_eq!(x.len(), rows * k);
    assert_eq!(out.len(), rows * n);
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 {
        gemm(1.0, View::dense(x, rows, k), w, 0.0, out, n);
        return;
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        for (xs, os) in x.chunks(per * k).zip(out.chunks_mut(per * n)) {
            s.spawn(move || gemm(1.0, View::dense(xs, xs.len() / k, k), w, 0.0, os, n));
        }
    });
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
        linear(&a, 5, bv, &mut c2, 3);
        assert_eq!(c, c2);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_view_past_its_slice_is_refused() {
        let a = vec![0f32; 10];
        let mut c = vec![0f32; 4];
        gemm(1.0, View::dense(&a, 2, 6), View::dense(&a, 6, 2), 0.0, &mut c, 2);
    }
}
