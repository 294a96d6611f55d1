//! strata's one seeded pseudo-random generator: SplitMix64.
//!
//! Every random choice of a replayable run comes from one [`Rng`] seeded
//! with the run's seed: the chaos suite's plan (what a host does next,
//! when a node is killed, which attack runs in which round), the pool
//! simulator's volumes and failures, the tests' random workloads and the
//! prefill model's weights. Tasks get their own stream with [`Rng::fork`],
//! taken in a fixed order by the task that spawns them, so that replaying
//! a seed replays the same plan and the same per-task choices.
//! (Interleavings between tasks still depend on timing: a replay is the
//! same experiment, not the same trace.)
//!
//! No `getrandom`, no OS entropy: the point is that a failing seed can be
//! run again. Secrets and identifiers come from `getrandom`, never from
//! here.
//!
//! ```
//! use strata_rand::Rng;
//! let (mut a, mut b) = (Rng::new(42), Rng::new(42));
//! assert_eq!(a.next_u64(), b.next_u64());
//! assert!(a.below(10) < 10);
//! ```

use std::time::Duration;

/// The SplitMix64 increment (the golden ratio in 64-bit fixed point):
/// `mix64` of a state advanced by it is the next draw.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 output function: a bijective 64-bit mixer. Also used on
/// its own as a hash: block filler from a block's identity, the pool's
/// placement draws (which pin its values).
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded pseudo-random number generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// A number in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-high: the bias is at most n / 2^64, irrelevant here.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration in `lo..hi`, at millisecond resolution.
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo_ms, hi_ms) = (lo.as_millis() as u64, hi.as_millis() as u64);
        Duration::from_millis(self.range(lo_ms, hi_ms.max(lo_ms)))
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }

    /// An independent generator for a child task. The child's sequence is
    /// fixed by this generator's state, so forks taken in the same order
    /// replay the same.
    pub fn fork(&mut self) -> Rng {
        Rng::new(mix64(self.next_u64() ^ 0x6a09_e667_f3bc_c909))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_forks() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let (mut fa, mut fb) = (a.fork(), b.fork());
        assert_eq!(fa.next_u64(), fb.next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn the_sequence_is_splitmix64() {
        // Pinned: a seed must replay the same run after any change here.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
    }

    #[test]
    fn bounded_draws_stay_in_range() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let x = r.range(5, 9);
            assert!((5..9).contains(&x));
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(9, 9), 9);
        let d = r.duration(Duration::from_millis(10), Duration::from_millis(20));
        assert!(d >= Duration::from_millis(10) && d < Duration::from_millis(20));
    }

    #[test]
    fn draws_cover_the_range() {
        let mut r = Rng::new(3);
        let mut seen = [false; 16];
        for _ in 0..1000 {
            seen[r.below(16) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let hits = (0..10_000).filter(|_| r.chance(25)).count();
        assert!((2000..3000).contains(&hits), "{hits}");
        for _ in 0..1000 {
            assert!((0.0..1.0).contains(&r.unit()));
        }
    }
}
