//! The store's index: every entry under the one lock ([`Inner`]), its
//! namespace's usage, the queue of entries that expire, and the keys
//! found in the peers' logs; plus the key encoding and the DRAM charge
//! the accounting is made of.
//!
//! This module keeps the counts consistent with the map (a namespace's
//! bytes and keys, a log tier's live bytes and keys); the operations in
//! the sibling modules decide what to insert and remove, and write the
//! logs. [`Inner::check_invariants`] checks the invariants of the
//! `store` module doc.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::error::KvError;
use super::keyorder::KeyOrder;
use super::tier::{LogTier, PerTier, Tier};
use crate::log::Loc;
use crate::policy::{Policy, S3Fifo};

/// Bytes charged to DRAM per entry beyond its key and value (the map
/// slot, the policy's queues).
pub const ENTRY_OVERHEAD: u64 = 96;

/// DRAM bytes charged for a key and value.
pub fn dram_size(key_len: usize, value_len: usize) -> u64 {
    (key_len + value_len) as u64 + ENTRY_OVERHEAD
}

/// The internal key of `key` in namespace `ns`.
///
/// # Errors
///
/// `ns` is longer than 255 bytes.
pub fn full_key(ns: &[u8], key: &[u8]) -> Result<Bytes, KvError> {
    let n = u8::try_from(ns.len()).map_err(|_| KvError::BadNamespace(ns.len()))?;
    let mut v = Vec::with_capacity(1 + ns.len() + key.len());
    v.push(n);
    v.extend_from_slice(ns);
    v.extend_from_slice(key);
    Ok(Bytes::from(v))
}

/// The namespace part of an internal key.
pub(super) fn ns_of(k: &[u8]) -> &[u8] {
    let n = k.first().copied().unwrap_or(0) as usize;
    k.get(1..1 + n).unwrap_or(&[])
}

/// How a block is kept in DRAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pin {
    /// Not pinned.
    #[default]
    None,
    /// Evicted only when nothing unpinned is left.
    Soft,
    /// Never evicted from DRAM while pinned.
    Hard,
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) value: Option<Bytes>,
    /// Its record in each log tier.
    pub(super) locs: PerTier<Option<Loc>>,
    /// Its write stamp: what its log records carry.
    pub(super) version: u64,
    pub(super) expires_ms: u64,
    pub(super) pin: Pin,
    pub(super) lease_until_ms: u64,
    /// [`dram_size`] of its key and value, whichever tier holds it: what
    /// its namespace's quota is charged.
    pub(super) size: u64,
    /// When it was stored, for its namespace's oldest-first order.
    pub(super) stamp: u64,
}

impl Entry {
    pub(super) fn new(size: u64) -> Entry {
        Entry {
            value: None,
            locs: PerTier::default(),
            version: 0,
            expires_ms: 0,
            pin: Pin::None,
            lease_until_ms: 0,
            size,
            stamp: 0,
        }
    }

    pub(super) fn expired(&self, now: u64) -> bool {
        self.expires_ms != 0 && self.expires_ms <= now
    }

    /// True when some tier holds a copy.
    pub(super) fn has_copy(&self) -> bool {
        self.value.is_some() || self.locs.iter().any(|(_, l)| l.is_some())
    }
}

/// A namespace's usage and quota.
#[derive(Debug, Default)]
pub(super) struct NsState {
    /// Bytes of its entries in every tier ([`Entry::size`]).
    pub(super) bytes: u64,
    pub(super) keys: u64,
    /// 0: no quota.
    pub(super) quota: u64,
    /// Keys oldest first, with their stamps; a slot whose stamp is not
    /// the entry's is stale and skipped.
    pub(super) order: VecDeque<(Bytes, u64)>,
}

/// Where a peer's record of a key is.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerLoc {
    pub(super) peer: usize,
    pub(super) loc: Loc,
    pub(super) expires_ms: u64,
    /// The record's version in the peer's log (its expiry records name it).
    pub(super) version: u64,
}

impl PeerLoc {
    pub(super) fn expired(&self, now: u64) -> bool {
        self.expires_ms != 0 && self.expires_ms <= now
    }
}

pub(super) struct Inner {
    pub(super) map: HashMap<Bytes, Entry>,
    pub(super) dram: S3Fifo<Bytes>,
    pub(super) tiers: PerTier<Option<LogTier>>,
    pub(super) ns: HashMap<Bytes, NsState>,
    pub(super) next_stamp: u64,
    /// The next write stamp (above every version in the logs).
    pub(super) next_version: u64,
    /// Keys found in the peers' logs (not in `map`'s accounting: they are
    /// the peers' bytes).
    pub(super) peer_index: HashMap<Bytes, PeerLoc>,
    /// Entries with an expiry, soonest first: `(expires_ms, stamp, key)`.
    /// Stale items (the entry since gone, rewritten or given another
    /// expiry) are skipped when they come up.
    pub(super) expiring: BinaryHeap<Reverse<(u64, u64, Bytes)>>,
    /// The map's keys in `SCAN` order.
    pub(super) order: KeyOrder,
    /// Entries with an expiry, and the sum of their expiries (`INFO`'s
    /// `expires` and `avg_ttl`).
    pub(super) with_expiry: u64,
    pub(super) expiry_sum: u128,
    /// The distinct blocks stored since the store opened (estimated), for
    /// [`Admit::Auto`](super::Admit::Auto).
    pub(super) working_set: crate::admit::WorkingSet,
}

impl Inner {
    /// An empty index over the DRAM policy `dram`, with no log tier yet.
    pub(super) fn new(dram: S3Fifo<Bytes>) -> Inner {
        Inner {
            map: HashMap::new(),
            dram,
            tiers: PerTier::default(),
            ns: HashMap::new(),
            next_stamp: 0,
            next_version: 0,
            peer_index: HashMap::new(),
            expiring: BinaryHeap::new(),
            order: KeyOrder::default(),
            with_expiry: 0,
            expiry_sum: 0,
            working_set: crate::admit::WorkingSet::default(),
        }
    }

    /// Counts an entry's expiry changing from `old` to `new` (0: none).
    pub(super) fn note_expiry(&mut self, old: u64, new: u64) {
        if old != 0 {
            self.with_expiry -= 1;
            self.expiry_sum -= u128::from(old);
        }
        if new != 0 {
            self.with_expiry += 1;
            self.expiry_sum += u128::from(new);
        }
    }

    /// A new write stamp.
    pub(super) fn new_version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Counts a record of tier `t` that the map now points at.
    pub(super) fn add_loc(&mut self, t: Tier, loc: Loc) {
        if let Some(tier) = self.tiers[t].as_mut() {
            tier.live += loc.len();
            tier.keys += 1;
        }
    }

    /// Uncounts a record of tier `t` the map no longer points at.
    pub(super) fn sub_loc(&mut self, t: Tier, loc: Loc) {
        if let Some(tier) = self.tiers[t].as_mut() {
            tier.live -= loc.len();
            tier.keys -= 1;
        }
    }

    /// Inserts an entry, charging its namespace; returns the one it
    /// replaced (whose charge is taken off).
    pub(super) fn insert_entry(&mut self, k: Bytes, mut e: Entry) -> Option<Entry> {
        let old = self.take_entry(&k);
        self.next_stamp += 1;
        e.stamp = self.next_stamp;
        // Allocate the namespace's name only for its first key.
        if !self.ns.contains_key(ns_of(&k)) {
            self.ns.insert(Bytes::copy_from_slice(ns_of(&k)), NsState::default());
        }
        let st = self.ns.get_mut(ns_of(&k)).expect("inserted above");
        st.bytes += e.size;
        st.keys += 1;
        st.order.push_back((k.clone(), e.stamp));
        if st.order.len() as u64 > st.keys * 2 + 64 {
            let map = &self.map;
            st.order.retain(|(k, stamp)| map.get(k).is_some_and(|e| e.stamp == *stamp));
        }
        if e.expires_ms != 0 {
            self.will_expire(&k, e.expires_ms, e.stamp);
        }
        self.note_expiry(0, e.expires_ms);
        self.order.insert(&k);
        self.map.insert(k, e);
        old
    }

    /// Notes that the entry of `k` with `stamp` expires at `at`.
    pub(super) fn will_expire(&mut self, k: &Bytes, at: u64, stamp: u64) {
        self.expiring.push(Reverse((at, stamp, k.clone())));
        if self.expiring.len() > self.map.len() * 2 + 1024 {
            let map = &self.map;
            self.expiring
                .retain(|Reverse((at, stamp, k))| map.get(k).is_some_and(|e| e.stamp == *stamp && e.expires_ms == *at));
        }
    }

    /// Removes an entry from the map and its namespace's charge (not from
    /// the DRAM policy or the log: the caller does that).
    pub(super) fn take_entry(&mut self, k: &Bytes) -> Option<Entry> {
        let e = self.map.remove(k)?;
        if let Some(st) = self.ns.get_mut(ns_of(k)) {
            st.bytes -= e.size;
            st.keys -= 1;
        }
        self.note_expiry(e.expires_ms, 0);
        self.order.remove(k);
        Some(e)
    }

    /// Checks the invariants of the `store` module doc (tests).
    pub(super) fn check_invariants(&self) {
        let mut live = PerTier::<u64>::default();
        let mut keys = PerTier::<u64>::default();
        let mut dram = 0;
        for (k, e) in &self.map {
            assert!(e.has_copy(), "an entry with no copy");
            assert_eq!(e.value.is_some(), self.dram.contains(k), "policy and values disagree");
            assert!(e.version <= self.next_version, "a version from the future");
            if let Some(v) = &e.value {
                dram += dram_size(k.len(), v.len());
            }
            for (t, loc) in e.locs.iter() {
                let Some(loc) = *loc else { continue };
                live[t] += loc.len();
                keys[t] += 1;
                let tier = self.tiers[t].as_ref().expect("a location in a tier that is not there");
                assert!(tier.log.is_current(loc), "a stale {t} location");
            }
        }
        assert_eq!(self.dram.used(), dram);
        assert_eq!(self.order.len(), self.map.len(), "scan order and map disagree");
        let expiring = self.map.values().filter(|e| e.expires_ms != 0);
        let (n, sum) = expiring.fold((0u64, 0u128), |(n, s), e| (n + 1, s + u128::from(e.expires_ms)));
        assert_eq!((self.with_expiry, self.expiry_sum), (n, sum), "expiry accounting");
        for (name, st) in &self.ns {
            let mine = self.map.iter().filter(|(k, _)| ns_of(k) == &name[..]);
            let (keys, bytes) = mine.fold((0, 0), |(n, b), (_, e)| (n + 1, b + e.size));
            assert_eq!((st.keys, st.bytes), (keys, bytes), "namespace accounting");
        }
        for t in Tier::ALL {
            let counted = self.tiers[t].as_ref().map_or((0, 0), |x| (x.live, x.keys));
            assert_eq!(counted, (live[t], keys[t]), "{t} accounting");
        }
    }
}

/// Locks the index.
pub(super) fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // Every mutation keeps the invariants between statements that cannot
    // panic on outside input; a poisoned lock is taken over as is.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
