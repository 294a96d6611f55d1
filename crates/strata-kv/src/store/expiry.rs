//! Expiry (TTLs). An entry past its expiry is gone to every reader at
//! once; its room comes back when a read or an eviction finds it, or
//! when [`KvStore::expire_due`] (every 200 ms) takes it off the index's
//! expiry queue, soonest first. A queue item whose entry has since gone,
//! been rewritten or given another expiry is stale, and skipped.
//!
//! Expiry times are Unix milliseconds and persist across a restart: a
//! put's record carries its expiry, and a change of expiry while the key
//! has a log record appends an expiry record to that log (waited for
//! like a tombstone, the `durable` module), so a restart finds the
//! expiry last acknowledged. A key whose time has passed by the restart
//! is not recovered.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use super::durable::Durability;
use super::error::KvError;
use super::index::{full_key, lock};
use super::kv_store::KvStore;
use crate::format::{Kind, RecordMeta, encode_expiry_target};

/// Most expired entries one pass of [`KvStore::expire_due`] deletes (the
/// store's lock is held meanwhile).
pub const EXPIRE_BATCH: u64 = 10_000;

impl KvStore {
    /// Sets or clears (`0`) the expiry of `key`, in Unix milliseconds;
    /// false when absent. A time that has passed deletes the key (as
    /// Redis's `EXPIRE` with a time in the past does).
    ///
    /// # Errors
    ///
    /// A bad namespace; [`KvError::NotDurable`]: the expiry is set in
    /// memory, but a log tier holding the key could not record it (a
    /// restart would find the old one).
    pub async fn set_expiry(&self, ns: &[u8], key: &[u8], expires_ms: u64) -> Result<bool, KvError> {
        self.set_expiry_where(ns, key, expires_ms, None).await
    }

    /// [`KvStore::set_expiry`], only while `key`'s version is `version`
    /// ([`KvStore::version`]); false when another write came since.
    ///
    /// # Errors
    ///
    /// As [`KvStore::set_expiry`].
    pub async fn set_expiry_version(
        &self,
        ns: &[u8],
        key: &[u8],
        expires_ms: u64,
        version: u64,
    ) -> Result<bool, KvError> {
        self.set_expiry_where(ns, key, expires_ms, Some(version)).await
    }

    async fn set_expiry_where(
        &self,
        ns: &[u8],
        key: &[u8],
        expires_ms: u64,
        version: Option<u64>,
    ) -> Result<bool, KvError> {
        let k = full_key(ns, key)?;
        let now = self.now();
        let pending = {
            let mut g = lock(&self.inner);
            let inner = &mut *g;
            let Some(e) = inner.map.get_mut(&k).filter(|e| !e.expired(now)) else { return Ok(false) };
            if version.is_some_and(|v| v != e.version) {
                return Ok(false);
            }
            let mut d = Durability::default();
            if expires_ms != 0 && expires_ms <= now {
                self.remove_entry(inner, &k, &mut d);
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                self.invalidate(inner, &k, &mut d);
            } else {
                let old = std::mem::replace(&mut e.expires_ms, expires_ms);
                let (stamp, target, locs) = (e.stamp, e.version, e.locs);
                inner.note_expiry(old, expires_ms);
                if expires_ms != 0 {
                    inner.will_expire(&k, expires_ms, stamp);
                }
                // Each log's record of the key says its old expiry: an
                // expiry record, newer than it, says the new one.
                for (t, loc) in locs.iter() {
                    let Some(tier) = inner.tiers[t].as_mut().filter(|x| loc.is_some_and(|l| x.log.is_current(l)))
                    else {
                        continue;
                    };
                    inner.next_version += 1;
                    let meta = RecordMeta { kind: Kind::Expiry, expires_ms, version: inner.next_version };
                    match tier.log.append(k.clone(), &k, &encode_expiry_target(target), meta) {
                        Ok((_, reclaimed)) => {
                            self.need_sync(inner, t, &mut d);
                            Self::reclaim(inner, &self.counters, t, reclaimed);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, tier = t.name(), "KV log: expiry record not written");
                            Self::need_failed(&mut d, t);
                        }
                    }
                }
            }
            self.request_if(inner, d)
        };
        self.settle(pending).await?;
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
                self.remove_entry(inner, &k, &mut Durability::default());
                n += 1;
            }
        }
        self.counters.expired.fetch_add(n, Ordering::Relaxed);
        n
    }
}
