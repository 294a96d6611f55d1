//! Writes: put (into DRAM, making room by eviction first), delete,
//! clear, and flush (what has left DRAM made durable on the log tiers).
//!
//! A put is all or nothing: the old value stays until the new one is
//! sure to fit (quota and DRAM), so a put that fails changes nothing.
//! Before taking the lock, a put waits for the log tiers' writers to
//! catch up (backpressure), the pool's for at most [`POOL_WRITE_WAIT`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::error::KvError;
use super::index::{Entry, Pin, dram_size, full_key, lock};
use super::kv_store::KvStore;
use super::tier::Tier;
use crate::format::{Kind, RecordMeta};
use crate::log::LogError;
use crate::policy::Policy;

/// The longest a put waits for the pool tier's writes to make room;
/// after it the pool counts as stalled (see [`KvStore::stats`]'s
/// `pool_skipped`).
pub const POOL_WRITE_WAIT: Duration = Duration::from_secs(1);

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
    /// leaves the key's old value as it was.
    ///
    /// # Errors
    ///
    /// The value is larger than DRAM, DRAM is full of pinned blocks, the
    /// namespace's quota cannot take it, or a bad namespace.
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
        if let Some(old) = inner.take_entry(&k) {
            if old.value.is_some() {
                inner.dram.remove(&k);
            }
            pin = if pin == Pin::None { old.pin } else { pin };
            self.forget(inner, &k, &old);
        }
        let version = inner.new_version();
        inner.dram.insert(k.clone(), size);
        inner.insert_entry(k, Entry { value: Some(value), version, expires_ms, pin, ..Entry::new(size) });
        Ok(true)
    }

    /// Waits while the SSD tier's unwritten buffers are over their bound,
    /// and while the pool's are, for at most [`POOL_WRITE_WAIT`]: a slow
    /// or cut-off pool costs puts one wait, then blocks skip it until its
    /// writes move again.
    async fn ready(&self) {
        if let Some(d) = &self.devs[Tier::Ssd] {
            d.ready().await;
        }
        if let Some(d) = &self.devs[Tier::Pool] {
            d.ready_within(POOL_WRITE_WAIT).await;
        }
    }

    /// Deletes `key` from every tier; false when it was absent.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn delete(&self, ns: &[u8], key: &[u8]) -> Result<bool, KvError> {
        let k = full_key(ns, key)?;
        let mut g = lock(&self.inner);
        // A peer's copy is forgotten here (it is the peer's to delete);
        // the next refresh brings it back only if the peer writes it anew.
        let peer = g.peer_index.remove(&k).is_some();
        Ok(self.remove_entry(&mut g, &k) || peer)
    }

    /// Drops every key in every tier (tombstones on SSD).
    pub fn clear(&self) -> u64 {
        let mut g = lock(&self.inner);
        let keys: Vec<Bytes> = g.map.keys().cloned().collect();
        for k in &keys {
            self.remove_entry(&mut g, k);
        }
        g.peer_index.clear();
        keys.len() as u64
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
            let synced = match lock(&self.inner).tiers[t].as_mut() {
                Some(tier) => {
                    tier.log.seal(false);
                    tier.log.request_sync()
                }
                None => continue,
            };
            synced.await.map_err(|_| LogError::Failed)??;
        }
        Ok(())
    }
}
