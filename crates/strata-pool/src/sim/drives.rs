//! The drives inside one node, filled the way the node store fills them.
//!
//! Placement chooses nodes; inside a node, `strata-store` takes every new
//! extent from the drive with the most free extents (ties to the highest
//! drive index; `crates/strata-store/src/store.rs`, `allocate`). So the
//! drives of a node are not hashed: they fill like water levels. This
//! module gives that process in closed form, so the simulator need not
//! take half a million extents one by one per node, and checks the closed
//! form against the step-by-step rule in its tests.
//!
//! Consequence used by the simulator: the first drive of a node runs out
//! only when every drive of the node is down to its last extent, i.e. at
//! `total - drives + 1` extents allocated ([`first_full_at`]), whatever
//! the drive sizes.

/// Extents allocated on each drive after `allocated` extents were taken
/// from drives of the given capacities (in extents), most free first.
/// `allocated` beyond the total fills every drive.
pub(crate) fn most_free_first(capacity: &[u64], allocated: u64) -> Vec<u64> {
    let total: u64 = capacity.iter().sum();
    if allocated >= total {
        return capacity.to_vec();
    }
    // Free level L: every drive keeps min(cap, L) free. taken(L) is the
    // allocation that brings all drives down to level L.
    let taken = |level: u64| -> u64 { capacity.iter().map(|&c| c.saturating_sub(level)).sum() };
    // The lowest level whose taken(level) <= allocated (taken is
    // non-increasing in level; taken(max cap) = 0).
    let (mut lo, mut hi) = (0u64, capacity.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if taken(mid) <= allocated { hi = mid } else { lo = mid + 1 }
    }
    let level = lo;
    let mut alloc: Vec<u64> = capacity.iter().map(|&c| c.saturating_sub(level)).collect();
    // The rest go one each to drives at the level, highest index first:
    // that is the store's tie-break among equally free drives.
    let mut rest = allocated - taken(level);
    for (i, &c) in capacity.iter().enumerate().rev() {
        if rest == 0 {
            break;
        }
        if c >= level && level > 0 {
            alloc[i] += 1;
            rest -= 1;
        }
    }
    alloc
}

/// The allocation (in extents) at which the first drive has no free
/// extent left: all but one extent on every other drive are taken by then.
pub(crate) fn first_full_at(capacity: &[u64]) -> u64 {
    let total: u64 = capacity.iter().sum();
    (total + 1).saturating_sub(capacity.len() as u64).min(total)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// strata-store's rule, one extent at a time: the drive with the most
    /// free extents, ties to the highest index (`Iterator::max` on
    /// `(free, index)`).
    fn step_by_step(capacity: &[u64], allocated: u64) -> Vec<u64> {
        let mut free = capacity.to_vec();
        for _ in 0..allocated {
            let best = (0..free.len()).map(|i| (free[i], i)).max();
            match best {
                Some((f, i)) if f > 0 => free[i] -= 1,
                _ => break,
            }
        }
        capacity.iter().zip(&free).map(|(c, f)| c - f).collect()
    }

    #[test]
    fn equal_drives_fill_evenly() {
        assert_eq!(most_free_first(&[10, 10, 10], 7), vec![2, 2, 3]);
        assert_eq!(most_free_first(&[10, 10, 10], 30), vec![10, 10, 10]);
        assert_eq!(most_free_first(&[10, 10, 10], 99), vec![10, 10, 10]);
        assert_eq!(first_full_at(&[10, 10, 10]), 28);
    }

    #[test]
    fn a_bigger_drive_takes_the_first_extents() {
        assert_eq!(most_free_first(&[4, 10], 5), vec![0, 5]);
        assert_eq!(most_free_first(&[4, 10], 8), vec![1, 7]);
        // 13 = all but one extent each: nothing is full yet.
        assert_eq!(first_full_at(&[4, 10]), 13);
        assert_eq!(most_free_first(&[4, 10], 12), vec![3, 9]);
    }

    proptest! {
        #[test]
        fn closed_form_matches_the_store_rule(capacity in proptest::collection::vec(0u64..40, 1..6), allocated in 0u64..250) {
            prop_assert_eq!(most_free_first(&capacity, allocated), step_by_step(&capacity, allocated));
        }

        #[test]
        fn the_first_drive_fills_at_the_predicted_allocation(capacity in proptest::collection::vec(1u64..40, 1..6)) {
            let at = first_full_at(&capacity);
            let full = |a: u64| step_by_step(&capacity, a).iter().zip(&capacity).any(|(x, c)| x == c);
            prop_assert!(full(at), "not full at {}", at);
            prop_assert!(at == 0 || !full(at - 1), "already full at {}", at - 1);
        }
    }
}
