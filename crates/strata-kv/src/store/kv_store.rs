//! [`KvStore`]: what the store holds, and its read-only views (stats,
//! invariants, an entry's fields). Its operations are in the sibling
//! modules by job, each an `impl KvStore` block; this module imports
//! none of them.
//!
//! The index ([`Inner`]) is behind one std mutex, held for short spans
//! and never across an `.await`: device reads and writes happen outside
//! it, and each step that follows one checks the entry is still the
//! one it started from. Counters are atomics, bumped outside the lock.

use std::sync::{Arc, Mutex};

use super::config::KvConfig;
use super::error::KvError;
use super::index::{Entry, Inner, full_key, lock};
use super::peers::Peer;
use super::stats::{Counters, Stats};
use super::tier::PerTier;
use crate::log::LogDev;

/// The tiered KV-block store. Cheap to share: wrap it in an [`Arc`].
pub struct KvStore {
    pub(super) inner: Mutex<Inner>,
    /// The device side of each log tier.
    pub(super) devs: PerTier<Option<Arc<LogDev>>>,
    pub(super) peers: Vec<Peer>,
    pub(super) cfg: KvConfig,
    pub(super) counters: Counters,
    pub(super) clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl KvStore {
    pub(super) fn now(&self) -> u64 {
        (self.clock)()
    }

    /// `f` of the entry of `key` in namespace `ns`, when it is present
    /// and unexpired. No side effects: nothing is promoted, touched or
    /// deleted.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub(super) fn peek<T>(&self, ns: &[u8], key: &[u8], f: impl FnOnce(&Entry) -> T) -> Result<Option<T>, KvError> {
        let k = full_key(ns, key)?;
        let now = self.now();
        let g = lock(&self.inner);
        Ok(g.map.get(&k).filter(|e| !e.expired(now)).map(f))
    }

    /// The store's state and counters.
    pub fn stats(&self) -> Stats {
        let now = self.now();
        let g = lock(&self.inner);
        self.counters.snapshot(&g, self.cfg.dram_bytes, now)
    }

    /// Gets by where they were answered: bytes and latency
    /// ([`LOAD_SOURCES`](super::LOAD_SOURCES) order).
    pub fn loads(&self) -> Vec<super::LoadStats> {
        self.counters.loads()
    }

    /// Checks the invariants of the module doc (tests).
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        lock(&self.inner).check_invariants();
    }
}
