//! The log tiers as a type. A block leaving DRAM is written to the log
//! tiers, the local SSD and the pool volume; [`Tier`] names one, and
//! [`PerTier`] holds one value per tier (an entry's record locations,
//! the tiers' logs and devices, per-tier counters).
//!
//! Invariant: a tier is never a bare number. Per-tier state is a
//! [`PerTier`], indexed by [`Tier`] alone; the slot order is private to
//! this module.

use std::fmt;
use std::ops::{Index, IndexMut};

use bytes::Bytes;

use super::unsure::Unsure;
use crate::log::LogState;

/// A log tier: where a block leaving DRAM is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    /// The local SSD.
    Ssd,
    /// This store's region of the pool volume.
    Pool,
}

impl Tier {
    /// Every log tier, in the order a get reads them and demotion writes
    /// them: the SSD first.
    pub(super) const ALL: [Tier; 2] = [Tier::Ssd, Tier::Pool];

    /// The tier's name in logs and messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Tier::Ssd => "SSD",
            Tier::Pool => "pool",
        }
    }

    /// Its slot in a [`PerTier`].
    fn index(self) -> usize {
        match self {
            Tier::Ssd => 0,
            Tier::Pool => 1,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `T` per log tier, indexed by [`Tier`] only, so that a tier is
/// never a bare number.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PerTier<T>([T; 2]);

impl<T> PerTier<T> {
    /// Each tier with its value, in [`Tier::ALL`] order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Tier, &T)> {
        Tier::ALL.into_iter().zip(&self.0)
    }

    /// Each tier with its value, mutable, in [`Tier::ALL`] order.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (Tier, &mut T)> {
        Tier::ALL.into_iter().zip(&mut self.0)
    }
}

impl<T> Index<Tier> for PerTier<T> {
    type Output = T;
    fn index(&self, t: Tier) -> &T {
        &self.0[t.index()]
    }
}

impl<T> IndexMut<Tier> for PerTier<T> {
    fn index_mut(&mut self, t: Tier) -> &mut T {
        &mut self.0[t.index()]
    }
}

/// A log tier's bookkeeping.
pub(super) struct LogTier {
    pub(super) log: LogState<Bytes>,
    /// Bytes of the records the map points at.
    pub(super) live: u64,
    /// Entries with a record here.
    pub(super) keys: u64,
    /// Invalidations not yet known to be on the device.
    pub(super) unsure: Unsure,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_named_as_the_logs_and_messages_name_them() {
        assert_eq!(Tier::Ssd.to_string(), "SSD");
        assert_eq!(Tier::Pool.to_string(), "pool");
        assert_eq!(Tier::ALL, [Tier::Ssd, Tier::Pool]);
    }

    #[test]
    fn each_tier_has_its_own_slot() {
        let mut n = PerTier::<u64>::default();
        n[Tier::Pool] = 7;
        n[Tier::Ssd] += 1;
        assert_eq!((n[Tier::Ssd], n[Tier::Pool]), (1, 7));
        for (t, v) in n.iter_mut() {
            *v += u64::from(t == Tier::Pool);
        }
        assert_eq!(n.iter().map(|(t, v)| (t, *v)).collect::<Vec<_>>(), [(Tier::Ssd, 1), (Tier::Pool, 8)]);
    }
}
