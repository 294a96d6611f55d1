//! Expiry (TTLs). An entry past its expiry is gone to every reader at
//! once; its room comes back when a read or an eviction finds it, or
//! when [`KvStore::expire_due`] (every 200 ms) takes it off the index's
//! expiry queue, soonest first. A queue item whose entry has since gone,
//! been rewritten or given another expiry is stale, and skipped.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use super::error::KvError;
use super::index::{full_key, lock};
use super::kv_store::KvStore;

/// Most expired entries one pass of [`KvStore::expire_due`] deletes (the
/// store's lock is held meanwhile).
pub const EXPIRE_BATCH: u64 = 10_000;

impl KvStore {
    /// Sets or clears (`0`) the expiry of `key`; false when absent.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn set_expiry(&self, ns: &[u8], key: &[u8], expires_ms: u64) -> Result<bool, KvError> {
        let k = full_key(ns, key)?;
        let mut g = lock(&self.inner);
        let Some(e) = g.map.get_mut(&k) else { return Ok(false) };
        e.expires_ms = expires_ms;
        let stamp = e.stamp;
        if expires_ms != 0 {
            g.will_expire(&k, expires_ms, stamp);
        }
        Ok(true)
    }

    /// The expiry of `key`: `None` when absent, `Some(0)` when it has none.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn expiry(&self, ns: &[u8], key: &[u8]) -> Result<Option<u64>, KvError> {
        self.peek(ns, key, |e| e.expires_ms)
    }

    /// Deletes the entries whose expiry has passed, up to
    /// [`EXPIRE_BATCH`] of them, soonest first; returns how many. Runs
    /// every 200 ms, so that expired blocks give their room back without
    /// waiting for a read or for eviction; public for tests.
    pub fn expire_due(&self) -> u64 {
        let now = self.now();
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let mut n = 0;
        while n < EXPIRE_BATCH {
            match inner.expiring.peek() {
                Some(Reverse((at, _, _))) if *at <= now => {}
                _ => break,
            }
            let Some(Reverse((at, stamp, k))) = inner.expiring.pop() else { break };
            if inner.map.get(&k).is_some_and(|e| e.stamp == stamp && e.expires_ms == at) {
                self.remove_entry(inner, &k);
                n += 1;
            }
        }
        self.counters.expired.fetch_add(n, Ordering::Relaxed);
        n
    }
}
