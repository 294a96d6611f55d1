//! [`Unsure`]: one log tier's invalidations (tombstones, namespace
//! deletions) that are not yet known to be on its device. Plain data,
//! kept in the tier's [`LogTier`](super::tier::LogTier) under the store's
//! lock; the `durable` module decides when to write and wait.
//!
//! A key whose old record may still be on a log device, with nothing
//! durable there that deletes it, is *unsure* in that tier: a restart
//! would bring the old value back. Two ways to be unsure:
//!
//! - [`State::Appended`]: a tombstone for it is in the log, not yet
//!   known to have landed. It has landed once a sync requested after it
//!   answers `Ok` while the device's failure count stayed put; then the
//!   mark is dropped ([`Unsure::prune`]).
//! - [`State::Owed`]: no tombstone is on its way: the tier was paused
//!   when it was needed, or a failure may have lost it, or the key's own
//!   record was in a write whose outcome is unknown. The next change to
//!   the key that is acknowledged writes one first.
//!
//! Invariants:
//! - a key mark's version is the highest version of the key that may be
//!   on the device without a durable tombstone; a tombstone of that
//!   version deletes every older one too;
//! - a range mark covers every key under its prefix up to its version;
//!   adding one drops the key and range marks it covers;
//! - once the device's failure count moves past [`Unsure::seen_failures`],
//!   no mark is `Appended` until [`Unsure::settle_failures`] ran (every
//!   operation here that trusts `Appended` runs it first).

use std::collections::HashMap;

use bytes::Bytes;

/// Whether an invalidation is on its way to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Appended before sync number `sync` was requested.
    Appended {
        /// The first sync that covers it.
        sync: u64,
    },
    /// Still to be written.
    Owed,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    version: u64,
    state: State,
}

/// A namespace's deletion (or every key's: an empty prefix).
#[derive(Debug, Clone)]
pub(super) struct RangeMark {
    /// Internal keys starting with this are covered.
    pub(super) prefix: Bytes,
    /// Covered up to this version.
    pub(super) version: u64,
    /// On its way, or still to be written.
    pub(super) state: State,
}

/// What a change to one key must see to before it is acknowledged in
/// one tier ([`Unsure::need`]).
#[derive(Debug, Default)]
pub(super) struct Need {
    /// A sync must cover an invalidation already appended.
    pub(super) sync: bool,
    /// A tombstone of this version must be appended first.
    pub(super) key: Option<u64>,
    /// These namespace deletions must be appended again first.
    pub(super) ranges: Vec<RangeMark>,
}

impl Need {
    /// True when the change can be acknowledged without this tier.
    pub(super) fn is_empty(&self) -> bool {
        !self.sync && self.key.is_none() && self.ranges.is_empty()
    }
}

/// One tier's unsure keys and ranges (the module doc).
#[derive(Debug, Default)]
pub(super) struct Unsure {
    keys: HashMap<Bytes, Mark>,
    ranges: Vec<RangeMark>,
    /// The device's failure count when last settled.
    seen_failures: u64,
}

impl Unsure {
    /// True when nothing is unsure.
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty()
    }

    /// Marks `k` unsure up to `version`. A mark of a lower version is
    /// replaced (a tombstone deletes older versions too); one of a higher
    /// version keeps its state, since only its own tombstone covers it.
    pub(super) fn note_key(&mut self, k: &Bytes, version: u64, state: State) {
        match self.keys.get_mut(k) {
            Some(m) if m.version > version => {}
            Some(m) => *m = Mark { version, state },
            None => {
                self.keys.insert(k.clone(), Mark { version, state });
            }
        }
    }

    /// Marks every key under `prefix` unsure up to `version`, dropping
    /// the marks this one covers.
    pub(super) fn note_range(&mut self, prefix: &Bytes, version: u64, state: State) {
        self.keys.retain(|k, m| !(k.starts_with(prefix) && m.version <= version));
        self.ranges.retain(|r| !(r.prefix.starts_with(prefix) && r.version <= version));
        self.ranges.push(RangeMark { prefix: prefix.clone(), version, state });
    }

    /// True when some mark lies under `prefix`, or covers all of it.
    pub(super) fn any_under(&self, prefix: &[u8]) -> bool {
        self.keys.keys().any(|k| k.starts_with(prefix))
            || self.ranges.iter().any(|r| r.prefix.starts_with(prefix) || prefix.starts_with(&r.prefix))
    }

    /// What a change to `k` needs here.
    pub(super) fn need(&self, k: &[u8]) -> Need {
        let mut need = Need::default();
        if self.is_empty() {
            return need;
        }
        match self.keys.get(k) {
            Some(Mark { state: State::Appended { .. }, .. }) => need.sync = true,
            Some(Mark { version, state: State::Owed }) => need.key = Some(*version),
            None => {}
        }
        for r in self.ranges.iter().filter(|r| k.starts_with(&r.prefix)) {
            match r.state {
                State::Appended { .. } => need.sync = true,
                State::Owed => need.ranges.push(r.clone()),
            }
        }
        need
    }

    /// After the device's failure count moved to `failures`: nothing
    /// appended is trusted to have landed, so every `Appended` mark is
    /// `Owed`. Does nothing while the count stays.
    pub(super) fn settle_failures(&mut self, failures: u64) {
        if failures == self.seen_failures {
            return;
        }
        self.seen_failures = failures;
        for m in self.keys.values_mut() {
            m.state = State::Owed;
        }
        for r in &mut self.ranges {
            r.state = State::Owed;
        }
    }

    /// Sync number `sync` answered `Ok` with no failure since it was
    /// requested: what was appended before it is on the device.
    pub(super) fn prune(&mut self, sync: u64) {
        let landed = |s: State| matches!(s, State::Appended { sync: s } if s <= sync);
        self.keys.retain(|_, m| !landed(m.state));
        self.ranges.retain(|r| !landed(r.state));
    }

    /// Sync number `sync` failed: what was appended before it is owed.
    pub(super) fn fail(&mut self, sync: u64) {
        let covered = |s: State| matches!(s, State::Appended { sync: s } if s <= sync);
        for m in self.keys.values_mut().filter(|m| covered(m.state)) {
            m.state = State::Owed;
        }
        for r in self.ranges.iter_mut().filter(|r| covered(r.state)) {
            r.state = State::Owed;
        }
    }

    /// Keys and ranges marked.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.len() + self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn a_tombstone_is_trusted_only_after_a_sync_that_covers_it() {
        let mut u = Unsure::default();
        u.note_key(&b("\0k"), 3, State::Appended { sync: 2 });
        assert!(u.need(b"\0k").sync);
        u.prune(1);
        assert!(u.need(b"\0k").sync, "sync 1 was requested before the tombstone was appended");
        u.prune(2);
        assert!(u.need(b"\0k").is_empty() && u.is_empty());
    }

    #[test]
    fn a_failure_makes_every_appended_mark_owed() {
        let mut u = Unsure::default();
        u.note_key(&b("\0a"), 3, State::Appended { sync: 1 });
        u.note_range(&b("\x01n"), 9, State::Appended { sync: 1 });
        u.settle_failures(0);
        assert!(u.need(b"\0a").sync);
        u.settle_failures(1);
        assert_eq!(u.need(b"\0a").key, Some(3));
        assert_eq!(u.need(b"\x01nkey").ranges.len(), 1);
        assert!(u.need(b"\x02nx").is_empty(), "another namespace");
        // A failed sync owes only what it covered.
        let mut u = Unsure::default();
        u.note_key(&b("\0a"), 3, State::Appended { sync: 1 });
        u.note_key(&b("\0b"), 4, State::Appended { sync: 2 });
        u.fail(1);
        assert_eq!(u.need(b"\0a").key, Some(3));
        assert!(u.need(b"\0b").sync);
    }

    #[test]
    fn the_highest_version_decides_and_ranges_cover_what_they_delete() {
        let mut u = Unsure::default();
        u.note_key(&b("\0a"), 5, State::Owed);
        u.note_key(&b("\0a"), 4, State::Appended { sync: 1 });
        assert_eq!(u.need(b"\0a").key, Some(5), "a lower tombstone does not cover version 5");
        u.note_key(&b("\0a"), 6, State::Appended { sync: 1 });
        assert!(u.need(b"\0a").key.is_none());
        u.note_key(&b("\x01nk"), 2, State::Owed);
        assert!(u.any_under(b"\x01n") && !u.any_under(b"\x01m"));
        u.note_range(&b("\x01n"), 7, State::Appended { sync: 3 });
        assert_eq!(u.len(), 2, "the range replaced the key it covers");
        u.note_range(&Bytes::new(), 8, State::Appended { sync: 4 });
        assert_eq!(u.len(), 1, "deleting every key covers every mark");
        assert!(u.any_under(b"\x05other"), "the empty prefix covers every namespace");
    }
}
