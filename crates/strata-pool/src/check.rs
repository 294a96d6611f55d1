//! `strata volume check`: the owner reads every copy (`rep:N`) or every
//! shard (`ec:K+M`) of a volume, online, and reports where they differ;
//! with repair it makes them agree again. This module holds what both
//! kinds report and how far a check has come; the reading is the
//! volume's own ([`crate::PoolVolume::check`]).
//!
//! What a check compares, and what a repair trusts:
//!
//! - `rep:N`: every in-sync copy of each region, block for block. Where
//!   they differ, the value a strict majority holds is right; without one
//!   (two copies, or a three-way split) the first copy in read order is
//!   kept (the owner's own, if it has one), and the report says so.
//! - `ec:K+M`: every stripe's in-sync strips are one codeword, or not.
//!   With more than K+1 strips at hand, one wrong strip is located (the
//!   others agree without it) and rebuilt from them; otherwise, as after
//!   a takeover, the parity is recomputed from the data strips.
//!
//! A region or stripe with fewer than two copies, or K+1 strips, in sync
//! cannot be compared: it counts as unchecked. Writes go on during a
//! check; each region or run of stripes is compared with no write to it
//! running (a stripe's locks, a region's quiet check).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Differences listed in a report before the rest are only counted.
pub const MAX_LISTED: usize = 64;

/// Where a check found copies or shards that disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// First volume block of the range.
    pub lba: u64,
    /// Blocks in the range.
    pub blocks: u64,
    /// Nodes whose copy or strip was found wrong; empty when the check
    /// could not tell which.
    pub wrong: Vec<u64>,
    /// What differs, for people.
    pub what: String,
    /// Whether a repair made them agree.
    pub repaired: bool,
}

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Volume bytes whose copies or shards were compared.
    pub bytes_checked: u64,
    /// Volume bytes that could not be compared (too few in sync there).
    pub bytes_unchecked: u64,
    /// Ranges found to differ.
    pub differences: u64,
    /// Of those, ranges a repair made agree.
    pub repaired: u64,
    /// The first [`MAX_LISTED`] differences.
    pub listed: Vec<Difference>,
}

impl CheckReport {
    /// Counts difference `d`, listing it while there is room.
    pub fn add(&mut self, d: Difference) {
        self.differences += 1;
        if d.repaired {
            self.repaired += 1;
        }
        if self.listed.len() < MAX_LISTED {
            self.listed.push(d);
        }
    }

    /// True when every copy or shard compared agreed, or was made to.
    pub fn clean(&self) -> bool {
        self.differences == self.repaired
    }
}

/// How far a running check has come, read while it runs.
#[derive(Debug, Default)]
pub struct CheckProgress {
    total: AtomicU64,
    done: AtomicU64,
}

impl CheckProgress {
    /// A check of `total` volume bytes, none done.
    pub fn new(total: u64) -> CheckProgress {
        CheckProgress { total: AtomicU64::new(total), done: AtomicU64::new(0) }
    }

    /// Counts `bytes` more as done.
    pub fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// (bytes done, bytes in all).
    pub fn get(&self) -> (u64, u64) {
        (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed))
    }
}

/// Of `values` (one per copy, in read order), the index of the value
/// to keep and whether a strict majority holds it.
pub fn majority<T: PartialEq>(values: &[T]) -> (usize, bool) {
    let mut best = (0, 0);
    for (i, v) in values.iter().enumerate() {
        let count = values.iter().filter(|w| *w == v).count();
        if count > best.1 {
            best = (i, count);
        }
    }
    (best.0, best.1 * 2 > values.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_majority_wins_and_without_one_the_first_copy_is_kept() {
        assert_eq!(majority(&["a", "a", "b"]), (0, true));
        assert_eq!(majority(&["b", "a", "a"]), (1, true));
        assert_eq!(majority(&["a", "b"]), (0, false));
        assert_eq!(majority(&["a", "b", "c"]), (0, false));
        assert_eq!(majority(&["a"]), (0, true));
    }

    #[test]
    fn a_report_lists_the_first_differences_and_counts_the_rest() {
        let mut r = CheckReport::default();
        assert!(r.clean());
        for i in 0..(MAX_LISTED as u64 + 10) {
            r.add(Difference { lba: i, blocks: 1, wrong: vec![2], what: "copy".into(), repaired: i % 2 == 0 });
        }
        assert_eq!((r.differences, r.repaired, r.listed.len()), (MAX_LISTED as u64 + 10, 37, MAX_LISTED));
        assert!(!r.clean());
    }
}
