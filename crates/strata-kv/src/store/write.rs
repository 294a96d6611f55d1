//! Writes: put (into DRAM, making room by eviction first), delete,
//! clear, and flush (what has left DRAM made durable on the log tiers).
//!
//! A put is all or nothing: the old value stays until the new one is
//! sure to fit (quota and DRAM), so a put that fails changes nothing.
//! Before taking the lock, a put waits for the log tiers' writers to
//! catch up (backpressure): the SSD's for at most [`SSD_WRITE_WAIT`], the
//! pool's for at most [`POOL_WRITE_WAIT`]. A tier still behind after its
//! wait counts as stalled, and demotion skips it (counted) until its
//! writes move again.
//!
//! A put, delete or clear that makes a log record stale is acknowledged
//! (returns `Ok`) only once that record's invalidation is on the device
//! (the `durable` module); one that makes nothing stale waits for
//! nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::durable::Durability;
use super::error::KvError;
use super::index::{Entry, Inner, Pin, dram_size, full_key, lock, ns_of};
use super::kv_store::KvStore;
use super::tier::{PerTier, Tier};
use super::unsure::State;
use crate::format::{Kind, RecordMeta};
use crate::log::LogError;
use crate::policy::Policy;

/// The longest a put waits for the pool tier's writes to make room;
/// after it the pool counts as stalled (see [`KvStore::stats`]'s
/// `pool_skipped`).
pub const POOL_WRITE_WAIT: Duration = Duration::from_secs(1);

/// The longest a put waits for the SSD tier's writes to make room; after
/// it the SSD counts as stalled until a write completes (see
/// [`KvStore::stats`]'s `ssd_skipped` and `demote_dropped`). A drive
/// that is only slow never gets there: each of its writes frees room.
pub const SSD_WRITE_WAIT: Duration = Duration::from_secs(5);

/// Values below this are copied out of the buffer they arrived in, so
/// that DRAM holds what it counts: a value keeps its whole allocation
/// alive, and a server's receive buffer holds up to 64 KiB of requests
/// (`server::READ_CHUNK`) before it grows for one large value. Below 64
/// KiB a value is copied (a few microseconds); at or above it, what it
/// shares its buffer with is at most about its own size again (a read's
/// worth), and a buffer grown for it holds little else.
pub const COPY_SMALL_BELOW: usize = 64 << 10;

/// Options of a put.
#[derive(Debug, Clone, Copy, Default)]
pub struct PutOpts {
    /// Expiry, Unix milliseconds; 0: none.
    pub expires_ms: u64,
    /// Keep the old value's expiry instead (SET ... KEEPTTL).
    pub keep_ttl: bool,
    /// Pin the block in DRAM.
    pub pin: Pin,
    /// Store only if the key is absent or present (SET NX / XX), checked
    /// under the same lock as the store.
    pub only_if: Option<Presence>,
}

/// A condition on a key's presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// The key is not stored (or has expired).
    Absent,
    /// The key is stored.
    Present,
    /// The key is stored, with this version ([`KvStore::version`]): no
    /// write has happened since it was read.
    Version(u64),
}

impl KvStore {
    /// Stores `value` under `key` in namespace `ns`, in DRAM; blocks that
    /// leave DRAM to make room move down a tier. Returns false when
    /// `opts.only_if` did not hold (nothing was stored). A put that fails
    /// leaves the key's old value as it was, except with
    /// [`KvError::NotDurable`].
    ///
    /// # Errors
    ///
    /// The value is larger than DRAM, DRAM is full of pinned blocks, the
    /// namespace's quota cannot take it, or a bad namespace.
    /// [`KvError::NotDurable`]: the new value is stored, but a log tier
    /// could not make the old value's invalidation durable (a crash could
    /// bring it back): the put is not acknowledged.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for the log tiers' writers, nothing is
    /// stored; dropped later, the value is stored (the `durable` module).
    pub async fn put(&self, ns: &[u8], key: &[u8], value: Bytes, opts: PutOpts) -> Result<bool, KvError> {
        let k = full_key(ns, key)?;
        let size = dram_size(k.len(), value.len());
        if size > self.cfg.dram_bytes {
            return Err(KvError::TooLarge { len: value.len() as u64, capacity: self.cfg.dram_bytes });
        }
        let value = if value.len() < COPY_SMALL_BELOW { Bytes::copy_from_slice(&value) } else { value };
        self.ready().await;
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let pending = {
            let mut g = lock(&self.inner);
            let inner = &mut *g;
            let old = inner.map.get(&k);
            let live = old.filter(|e| !e.expired(now));
            match opts.only_if {
                Some(Presence::Absent) if live.is_some() => return Ok(false),
                Some(Presence::Present) if live.is_none() => return Ok(false),
                Some(Presence::Version(v)) if live.map(|e| e.version) != Some(v) => return Ok(false),
                _ => {}
            }
            let expires_ms = if opts.keep_ttl { live.map(|e| e.expires_ms).unwrap_or(0) } else { opts.expires_ms };
            // The old copy's bytes count as free, but it stays until the new
            // one is sure to fit, so that a put that fails changes nothing.
            let old_size = old.map(|e| e.size).unwrap_or(0);
            let old_dram = old.filter(|e| e.value.is_some()).map(|e| e.size).unwrap_or(0);
            self.enforce_quota(inner, ns, size, old_size, now, &k)?;
            self.make_room(inner, size.saturating_sub(old_dram), now, Some(&k))?;
            let mut pin = opts.pin;
            let mut d = Durability::default();
            if let Some(old) = inner.take_entry(&k) {
                if old.value.is_some() {
                    inner.dram.remove(&k);
                }
                pin = if pin == Pin::None { old.pin } else { pin };
                self.forget(inner, &k, &old, &mut d);
            }
            let version = inner.new_version();
            inner.dram.insert(k.clone(), size);
            inner.working_set.observe(crate::admit::key_hash(&k), size);
            inner.insert_entry(k.clone(), Entry { value: Some(value), version, expires_ms, pin, ..Entry::new(size) });
            self.invalidate(inner, &k, &mut d);
            self.request_if(inner, d)
        };
        self.settle(pending).await?;
        Ok(true)
    }

    /// Waits while the SSD tier's unwritten buffers are over their bound,
    /// for at most [`SSD_WRITE_WAIT`], and while the pool's are, for at
    /// most [`POOL_WRITE_WAIT`]: a stalled tier costs puts one wait, then
    /// blocks skip it until its writes move again.
    async fn ready(&self) {
        if let Some(d) = &self.devs[Tier::Ssd] {
            d.ready_within(SSD_WRITE_WAIT).await;
        }
        if let Some(d) = &self.devs[Tier::Pool] {
            d.ready_within(POOL_WRITE_WAIT).await;
        }
    }

    /// Deletes `key` from every tier; false when it was absent.
    ///
    /// # Errors
    ///
    /// A bad namespace; [`KvError::NotDurable`] as for [`KvStore::put`]
    /// (the key is deleted in memory).
    pub async fn delete(&self, ns: &[u8], key: &[u8]) -> Result<bool, KvError> {
        Ok(self.delete_many(ns, &[key]).await? == 1)
    }

    /// Deletes each of `keys` from every tier (one wait for all of their
    /// invalidations); returns how many were present.
    ///
    /// # Errors
    ///
    /// As [`KvStore::delete`].
    pub async fn delete_many<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K]) -> Result<u64, KvError> {
        self.delete_where(ns, keys, None).await
    }

    /// Deletes `key` only if its version is `version` ([`KvStore::version`]):
    /// no write came since it was read. False when it did, or the key is
    /// absent.
    ///
    /// # Errors
    ///
    /// As [`KvStore::delete`].
    pub async fn delete_version(&self, ns: &[u8], key: &[u8], version: u64) -> Result<bool, KvError> {
        Ok(self.delete_where(ns, &[key], Some(version)).await? == 1)
    }

    async fn delete_where<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K], version: Option<u64>) -> Result<u64, KvError> {
        let keys = keys.iter().map(|k| full_key(ns, k.as_ref())).collect::<Result<Vec<_>, _>>()?;
        let now = self.now();
        let (n, pending) = {
            let mut g = lock(&self.inner);
            let inner = &mut *g;
            let mut d = Durability::default();
            let mut n = 0;
            for k in &keys {
                if let Some(v) = version
                    && inner.map.get(k).filter(|e| !e.expired(now)).map(|e| e.version) != Some(v)
                {
                    continue;
                }
                // A peer's copy is forgotten here (it is the peer's to
                // delete); the next refresh brings it back only if the
                // peer writes it anew.
                let peer = version.is_none() && inner.peer_index.remove(k).is_some();
                let live = inner.map.get(k).is_some_and(|e| !e.expired(now));
                if (self.remove_entry(inner, k, &mut d) && live) || peer {
                    n += 1;
                }
                // Even a key found absent: a tombstone written for it
                // earlier (an eviction for its quota, an expiry) must be
                // durable before "absent" is acknowledged.
                self.invalidate(inner, k, &mut d);
            }
            (n, self.request_if(inner, d))
        };
        self.settle(pending).await?;
        Ok(n)
    }

    /// Drops every key in every tier without waiting for the deletion to
    /// be durable: it reaches the log tiers with their next sync (within
    /// about a second), and a crash before then may bring keys back.
    /// Returns how many keys there were. For benchmarks and tests; a
    /// caller that acknowledges the deletion to someone uses
    /// [`KvStore::delete_all`].
    pub fn clear(&self) -> u64 {
        let mut g = lock(&self.inner);
        let n = self.delete_prefix(&mut g, &Bytes::new(), &mut Durability::default());
        g.peer_index.clear();
        n
    }

    /// Drops every key in every tier (`FLUSHALL`); returns how many there
    /// were once the deletion is durable.
    ///
    /// # Errors
    ///
    /// [`KvError::NotDurable`] as for [`KvStore::put`] (every key is
    /// deleted in memory).
    pub async fn delete_all(&self) -> Result<u64, KvError> {
        let (n, pending) = {
            let mut g = lock(&self.inner);
            let mut d = Durability::default();
            let n = self.delete_prefix(&mut g, &Bytes::new(), &mut d);
            g.peer_index.clear();
            (n, self.request_if(&mut g, d))
        };
        self.settle(pending).await?;
        Ok(n)
    }

    /// Deletes every key whose internal key starts with `prefix` (a
    /// namespace's, or empty: every key), with one namespace tombstone
    /// per log tier that may hold one of them rather than a tombstone
    /// each; returns how many live keys there were. A paused tier owes
    /// each of its records a tombstone instead (the `durable` module).
    pub(super) fn delete_prefix(&self, inner: &mut Inner, prefix: &Bytes, d: &mut Durability) -> u64 {
        let now = self.now();
        let ns = (!prefix.is_empty()).then(|| ns_of(prefix).to_vec());
        let keys: Vec<Bytes> =
            inner.map.keys().filter(|k| ns.as_deref().is_none_or(|ns| ns_of(k) == ns)).cloned().collect();
        let mut held = PerTier::<Vec<(Bytes, u64)>>::default();
        let mut live = 0;
        for k in keys {
            let Some(e) = self.remove_untombstoned(inner, &k) else { continue };
            live += u64::from(!e.expired(now));
            for (t, loc) in e.locs.iter() {
                if loc.is_some_and(|l| inner.tiers[t].as_ref().is_some_and(|x| x.log.is_current(l))) {
                    held[t].push((k.clone(), e.version));
                }
            }
        }
        let version = inner.new_version();
        for t in Tier::ALL {
            let Some(tier) = inner.tiers[t].as_mut() else { continue };
            if held[t].is_empty() && !tier.unsure.any_under(prefix) {
                continue;
            }
            if self.devs[t].as_ref().is_some_and(|dev| dev.is_failed()) {
                for (k, v) in std::mem::take(&mut held[t]) {
                    tier.unsure.note_key(&k, v, State::Owed);
                }
                Self::need_failed(d, t);
            } else {
                self.append_tombstone(inner, t, prefix, Kind::DeletePrefix, version, d);
            }
        }
        live
    }

    /// Makes what has left DRAM durable on the log tiers. With
    /// `demote_all`, every DRAM block not yet in a log tier is written to
    /// it first, so that all of the store survives a restart.
    ///
    /// # Errors
    ///
    /// A log tier failed.
    pub async fn flush(&self, demote_all: bool) -> Result<(), KvError> {
        for t in Tier::ALL {
            let Some(dev) = self.devs[t].clone() else { continue };
            if demote_all {
                let keys: Vec<Bytes> = {
                    let g = lock(&self.inner);
                    g.map
                        .iter()
                        .filter(|(_, e)| e.value.is_some() && e.locs[t].is_none())
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                for k in keys {
                    dev.ready().await;
                    let mut g = lock(&self.inner);
                    let inner = &mut *g;
                    let Some(e) = inner.map.get(&k).filter(|e| e.locs[t].is_none()) else { continue };
                    let Some(v) = e.value.clone() else { continue };
                    let meta = RecordMeta { kind: Kind::Put, expires_ms: e.expires_ms, version: e.version };
                    self.write_copy(inner, t, &k, &v, meta)?;
                }
            }
            let Some((sync, failures, rx)) = self.request_periodic_sync(&mut lock(&self.inner), t) else { continue };
            let answer = rx.await.map_err(|_| LogError::Failed).and_then(|r| r);
            self.synced(&mut lock(&self.inner), t, sync, failures, answer.is_ok());
            answer?;
        }
        Ok(())
    }
}
