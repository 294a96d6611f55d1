//! Where each job's next I/O goes: the seeded [`Rng`] for random
//! offsets, and the sources of (operation, LBA, block count) that the job loop
//! draws from.
//!
//! Offsets are chosen in units of the workload's block size `bs` (so every
//! I/O is aligned to `bs`), over the first `units * bs` bytes of the span.
//! Sequential patterns give each job its own contiguous region of the span
//! (`units / jobs` units; the last job also takes the remainder) and walk
//! it from its start, wrapping around at its end. Regions rather than
//! interleaving: each queue then streams through addresses nobody else
//! touches, which is what a sequential stream means to a target's
//! read-ahead and write coalescing, and the prefill of a verify run can
//! split the span the same way.

use strata_rand::Rng;

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// Read.
    Read,
    /// Write.
    Write,
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
        })
    }
}

/// One I/O to issue: direction, first LBA and block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NextIo {
    pub(crate) kind: OpKind,
    pub(crate) slba: u64,
    pub(crate) nlb: u32,
}

/// A stream of I/Os for one job.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// Uniform random `bs`-aligned I/Os over `units` units of
    /// `blocks_per_io` blocks; reads with probability `read_pct` %.
    Random { rng: Rng, units: u64, blocks_per_io: u32, read_pct: u8 },
    /// Consecutive I/Os of `chunk` blocks through `len` blocks from
    /// `start` (the last one shorter if `len` is not a multiple), wrapping
    /// around unless `once`.
    Seq { kind: OpKind, start: u64, len: u64, chunk: u32, pos: u64, once: bool },
}

impl Source {
    /// The next I/O, or `None` when a finite source is exhausted.
    #[inline]
    pub(crate) fn next_io(&mut self) -> Option<NextIo> {
        match self {
            Source::Random { rng, units, blocks_per_io, read_pct } => {
                let kind = match *read_pct {
                    100 => OpKind::Read,
                    0 => OpKind::Write,
                    p if rng.below(100) < u64::from(p) => OpKind::Read,
                    _ => OpKind::Write,
                };
                let unit = rng.below(*units);
                Some(NextIo { kind, slba: unit * u64::from(*blocks_per_io), nlb: *blocks_per_io })
            }
            Source::Seq { kind, start, len, chunk, pos, once } => {
                if *pos >= *len {
                    if *once || *len == 0 {
                        return None;
                    }
                    *pos = 0;
                }
                // `chunk` is a u32 and the minimum cannot exceed it.
                let nlb = (*len - *pos).min(u64::from(*chunk)) as u32;
                let io = NextIo { kind: *kind, slba: *start + *pos, nlb };
                *pos += u64::from(nlb);
                Some(io)
            }
        }
    }
}

/// The region of job `job` of `jobs` over `units` units: `(first unit,
/// unit count)`; the last job takes the remainder.
pub(crate) fn job_region(units: u64, jobs: u64, job: u64) -> (u64, u64) {
    let per = units / jobs;
    let start = job * per;
    let len = if job + 1 == jobs { units - start } else { per };
    (start, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_are_aligned_in_range_and_reproducible() {
        let mk = || Source::Random { rng: Rng::new(7), units: 100, blocks_per_io: 8, read_pct: 30 };
        let (mut a, mut b) = (mk(), mk());
        let mut reads = 0;
        for _ in 0..10_000 {
            let io = a.next_io().unwrap();
            assert_eq!(Some(io), b.next_io());
            assert_eq!(io.slba % 8, 0);
            assert!(io.slba < 800);
            reads += usize::from(io.kind == OpKind::Read);
        }
        assert!((2500..3500).contains(&reads), "{reads} reads of 10000 at 30%");
    }

    #[test]
    fn sequential_source_wraps_or_ends_with_a_short_tail() {
        let mut s = Source::Seq { kind: OpKind::Read, start: 10, len: 5, chunk: 2, pos: 0, once: true };
        let got: Vec<_> = std::iter::from_fn(|| s.next_io()).map(|io| (io.slba, io.nlb)).collect();
        assert_eq!(got, vec![(10, 2), (12, 2), (14, 1)]);
        let mut s = Source::Seq { kind: OpKind::Write, start: 0, len: 4, chunk: 2, pos: 0, once: false };
        let got: Vec<_> = (0..3).map(|_| s.next_io().unwrap().slba).collect();
        assert_eq!(got, vec![0, 2, 0]);
    }

    #[test]
    fn regions_cover_the_span_without_overlap() {
        assert_eq!(job_region(10, 3, 0), (0, 3));
        assert_eq!(job_region(10, 3, 1), (3, 3));
        assert_eq!(job_region(10, 3, 2), (6, 4));
    }
}
