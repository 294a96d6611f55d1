//! The volumes the simulator writes: sizes drawn log-uniformly between a
//! minimum and a maximum (many small volumes, a few huge ones), each thin
//! volume then written in full.
//!
//! Sizes come from the run's seed; they use the platform's `ln`/`exp`,
//! whose last bits may differ between C libraries. Sizes are rounded down
//! to whole 4 KiB blocks, so that rarely changes a size at all, and the
//! simulator's figures are statistics, not placement: nothing here needs
//! to agree bit for bit between machines.

use strata_rand::Rng;

/// Volume sizes are whole blocks of this many bytes.
const BLOCK_BYTES: u64 = 4096;

/// One volume to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Volume {
    /// Its id (chunks hash by it).
    pub(crate) id: u64,
    /// Bytes written: the whole volume.
    pub(crate) bytes: u64,
}

/// An endless, seeded sequence of volumes.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    rng: Rng,
    next_id: u64,
    ln_min: f64,
    ln_span: f64,
    min: u64,
    max: u64,
}

impl Workload {
    /// Sizes log-uniform in `[min, max]` bytes (`min <= max`, both at
    /// least one block; the options check that).
    pub(crate) fn new(rng: Rng, min: u64, max: u64) -> Workload {
        let ln_min = (min as f64).ln();
        Workload { rng, next_id: 1, ln_min, ln_span: (max as f64).ln() - ln_min, min, max }
    }
}

impl Iterator for Workload {
    type Item = Volume;

    fn next(&mut self) -> Option<Volume> {
        let raw = (self.ln_min + self.rng.unit() * self.ln_span).exp() as u64;
        let bytes = (raw / BLOCK_BYTES * BLOCK_BYTES).clamp(self.min, self.max);
        let id = self.next_id;
        self.next_id += 1;
        Some(Volume { id, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn sizes_are_log_uniform_within_bounds() {
        let w = Workload::new(Rng::new(3), 100 * GIB, 100 * 1024 * GIB);
        let sizes: Vec<u64> = w.take(20_000).map(|v| v.bytes).collect();
        assert!(sizes.iter().all(|&s| (100 * GIB..=100 * 1024 * GIB).contains(&s) && s % BLOCK_BYTES == 0));
        // Log-uniform over three decades: about a third in each.
        for (lo, hi) in [(100 * GIB, 1000 * GIB), (1000 * GIB, 10_000 * GIB), (10_000 * GIB, 102_400 * GIB)] {
            let share = sizes.iter().filter(|&&s| s >= lo && s < hi).count() as f64 / sizes.len() as f64;
            assert!((0.28..0.39).contains(&share), "[{lo}, {hi}): {share}");
        }
    }

    #[test]
    fn ids_count_up_from_one_and_a_seed_replays() {
        let a: Vec<Volume> = Workload::new(Rng::new(5), 8192, 1 << 40).take(3).collect();
        assert_eq!(a.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(a, Workload::new(Rng::new(5), 8192, 1 << 40).take(3).collect::<Vec<_>>());
        let fixed: Vec<u64> = Workload::new(Rng::new(5), 8192, 8192).take(3).map(|v| v.bytes).collect();
        assert_eq!(fixed, vec![8192; 3]);
    }
}
