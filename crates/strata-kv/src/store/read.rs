//! Reads: get (DRAM, then the log tiers, then the peers' logs), with
//! promotion of what a log tier answered back into DRAM; and the reads
//! without side effects (exists, lookup, version) and prefetch.
//!
//! A read of a log tier runs without the index's lock; before it acts
//! on what it read (promote the value, or drop a damaged record from
//! the index) it checks under the lock that the entry still points at
//! the record it read. The SSD copy is tried first; a pool read slower
//! than [`POOL_READ_DEADLINE`] is a miss, as is a peer read that slow.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::durable::Durability;
use super::error::KvError;
use super::index::{Entry, Inner, dram_size, full_key, lock};
use super::kv_store::KvStore;
use super::tier::{PerTier, Tier};
use crate::log::{Loc, LogError, Place};
use crate::policy::Policy;

/// A pool read slower than this is answered as a miss: recomputing a
/// block beats waiting on a stalled remote volume.
pub const POOL_READ_DEADLINE: Duration = Duration::from_secs(2);

/// Where a get's value came from ([`KvStore::get_full`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// DRAM.
    Dram,
    /// This store's log on that tier.
    Log(Tier),
    /// Another store's log on the shared pool volume.
    Peer,
}

/// A get's next step ([`KvStore::get_full`]).
enum Copy {
    /// The answer: the value and where it came from, or a miss.
    Done(Option<(Bytes, Source)>),
    /// Read the copy at this location of this log tier.
    Read(Tier, Loc),
}

impl KvStore {
    /// The value of `key`, from DRAM or a log tier (then copied back
    /// into DRAM). A damaged record is a miss, or the next tier's copy.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub async fn get(&self, ns: &[u8], key: &[u8]) -> Result<Option<Bytes>, KvError> {
        let k = full_key(ns, key)?;
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let got = self.get_full(&k, true, None).await;
        self.count_get(got.as_ref().map(|(v, s)| (*s, v.len())), started);
        Ok(got.map(|(v, _)| v))
    }

    /// [`get`](Self::get), with a block that must be read from a log
    /// tier read into the buffer `place` gives when it gives one (the
    /// fast path's shared region: the block is then read there in place,
    /// promoted into DRAM as it lies, and a client copies it from there).
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub async fn get_placed(&self, ns: &[u8], key: &[u8], place: Place<'_>) -> Result<Option<Bytes>, KvError> {
        let k = full_key(ns, key)?;
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let got = self.get_full(&k, true, Some(place)).await;
        self.count_get(got.as_ref().map(|(v, s)| (*s, v.len())), started);
        Ok(got.map(|(v, _)| v))
    }

    /// Counts a get's outcome (where it was found and how many bytes)
    /// and its latency since `started`.
    fn count_get(&self, found: Option<(Source, usize)>, started: Instant) {
        let (c, i) = match found.map(|(s, _)| s) {
            Some(Source::Dram) => (&self.counters.hits_dram, 0),
            Some(Source::Log(Tier::Ssd)) => (&self.counters.hits_ssd, 1),
            Some(Source::Log(Tier::Pool)) => (&self.counters.hits_pool, 2),
            Some(Source::Peer) => (&self.counters.hits_peer, 3),
            None => (&self.counters.misses, 4),
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.counters.load_latency[i].observe(started.elapsed());
        let bytes = found.map_or(0, |(_, n)| n as u64);
        self.counters.load_bytes[i].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Looks `k` up; `(value, where it was found)`. `touch`: count it as
    /// a use. `place`: where a log tier's read lands ([`Place`]).
    async fn get_full(&self, k: &Bytes, touch: bool, place: Option<Place<'_>>) -> Option<(Bytes, Source)> {
        let now = self.now();
        let mut tried = PerTier::<bool>::default();
        loop {
            let next = {
                let mut g = lock(&self.inner);
                let inner = &mut *g;
                let expired = inner.map.get(k).map(|e| e.expired(now));
                expired.map(|expired| self.next_copy(inner, k, expired, touch, &tried))
            };
            let (t, loc) = match next {
                // Not here: perhaps in a peer's log.
                None => return self.get_peer(k, now).await.map(|v| (v, Source::Peer)),
                Some(Copy::Done(r)) => return r,
                Some(Copy::Read(t, loc)) => (t, loc),
            };
            tried[t] = true;
            let dev = self.devs[t].clone()?;
            let read = match t {
                Tier::Pool => {
                    tokio::time::timeout(POOL_READ_DEADLINE, dev.read_in(k, loc, place)).await.unwrap_or_else(|_| {
                        tracing::warn!(deadline = ?POOL_READ_DEADLINE, "KV pool read missed its deadline");
                        Err(LogError::Failed)
                    })
                }
                Tier::Ssd => dev.read_in(k, loc, place).await,
            };
            let value = match read {
                Ok(Some(v)) => v,
                Ok(None) | Err(_) => {
                    // Reclaimed under us, damaged, or (the pool) slow or
                    // unreachable: try the next copy. A record that fails
                    // its checks while the index still points at it is
                    // dropped, as is an SSD copy that cannot be read.
                    let damaged = matches!(read, Ok(None)) || t == Tier::Ssd;
                    let mut g = lock(&self.inner);
                    let inner = &mut *g;
                    if damaged
                        && inner.map.get(k).is_some_and(|e| e.locs[t] == Some(loc) && e.value.is_none())
                        && inner.tiers[t].as_ref().is_some_and(|x| x.log.is_current(loc))
                    {
                        self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            tier = t.name(),
                            seg = loc.seg,
                            off = loc.off,
                            "KV record failed its checks; dropped"
                        );
                        if let Some(e) = inner.map.get_mut(k) {
                            e.locs[t] = None;
                        }
                        inner.sub_loc(t, loc);
                        if inner.map.get(k).is_some_and(|e| !e.has_copy()) {
                            inner.take_entry(k);
                        }
                    }
                    continue;
                }
            };
            // Promote, if the entry is still the one read.
            let mut g = lock(&self.inner);
            let inner = &mut *g;
            let size = dram_size(k.len(), value.len());
            let same = inner.map.get(k).is_some_and(|e| e.locs[t] == Some(loc) && e.value.is_none());
            if same && size <= self.cfg.dram_bytes && self.make_room(inner, size, now, Some(k)).is_ok() {
                // make_room may have reclaimed the segment it came from.
                if let Some(e) = inner.map.get_mut(k).filter(|e| e.locs[t] == Some(loc)) {
                    e.value = Some(value.clone());
                    inner.dram.insert(k.clone(), size);
                    inner.dram.touch(k);
                    self.counters.promoted.fetch_add(1, Ordering::Relaxed);
                }
            }
            return Some((value, Source::Log(t)));
        }
    }

    /// What a get does next with the entry of `k` (in the map): answer
    /// now, or read the first copy in a log tier it has not tried.
    fn next_copy(&self, inner: &mut Inner, k: &Bytes, expired: bool, touch: bool, tried: &PerTier<bool>) -> Copy {
        if expired {
            self.remove_entry(inner, k, &mut Durability::default());
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            return Copy::Done(None);
        }
        let Some(e) = inner.map.get(k) else { return Copy::Done(None) };
        if let Some(v) = &e.value {
            let v = v.clone();
            if touch {
                inner.dram.touch(k);
            }
            return Copy::Done(Some((v, Source::Dram)));
        }
        let Some((t, loc)) = Tier::ALL.into_iter().find_map(|t| e.locs[t].filter(|_| !tried[t]).map(|l| (t, l))) else {
            return Copy::Done(None);
        };
        match inner.tiers[t].as_ref().and_then(|x| x.log.buffered(loc)) {
            Some(v) => Copy::Done(Some((v, Source::Log(t)))),
            None => Copy::Read(t, loc),
        }
    }

    /// Reads `k` from the peer log that has it, and keeps it in DRAM as a
    /// block of this store's own. A peer record overwritten since it was
    /// found is dropped from the peer index; a slow or failed read is a
    /// miss.
    async fn get_peer(&self, k: &Bytes, now: u64) -> Option<Bytes> {
        let pl = {
            let mut g = lock(&self.inner);
            let pl = *g.peer_index.get(k)?;
            if pl.expired(now) {
                g.peer_index.remove(k);
                return None;
            }
            pl
        };
        let reader = self.peers.get(pl.peer)?.reader()?;
        match tokio::time::timeout(POOL_READ_DEADLINE, reader.read(k, pl.loc)).await {
            Ok(Ok(Some(v))) => {
                self.adopt(k, v.clone(), pl.expires_ms, now);
                Some(v)
            }
            Ok(Ok(None)) => {
                let mut g = lock(&self.inner);
                if g.peer_index.get(k).is_some_and(|p| p.peer == pl.peer && p.loc == pl.loc) {
                    g.peer_index.remove(k);
                }
                None
            }
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Keeps a block read from a peer in DRAM, as if put here (its quota
    /// aside: a namespace's quota counts what this store was given).
    fn adopt(&self, k: &Bytes, v: Bytes, expires_ms: u64, now: u64) {
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let size = dram_size(k.len(), v.len());
        if inner.map.contains_key(k) || size > self.cfg.dram_bytes || self.make_room(inner, size, now, None).is_err() {
            return;
        }
        let version = inner.new_version();
        inner.dram.insert(k.clone(), size);
        inner.insert_entry(k.clone(), Entry { value: Some(v), version, expires_ms, ..Entry::new(size) });
    }

    /// True when `key` is in any tier (no side effects).
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn exists(&self, ns: &[u8], key: &[u8]) -> Result<bool, KvError> {
        Ok(self.lookup(ns, &[key])? == 1)
    }

    /// How many consecutive keys of `chain`, from the first, are in any
    /// tier. No side effects: nothing is promoted or counted as used.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn lookup<K: AsRef<[u8]>>(&self, ns: &[u8], chain: &[K]) -> Result<usize, KvError> {
        let keys = chain.iter().map(|k| full_key(ns, k.as_ref())).collect::<Result<Vec<_>, _>>()?;
        let now = self.now();
        let g = lock(&self.inner);
        let present = |k: &Bytes| {
            g.map.get(k).is_some_and(|e| !e.expired(now)) || g.peer_index.get(k).is_some_and(|p| !p.expired(now))
        };
        Ok(keys.iter().take_while(|k| present(k)).count())
    }

    /// Brings the consecutive present keys of `chain` into DRAM, reading
    /// from SSD in parallel, until the first missing one or `deadline`.
    /// Returns how many consecutive keys from the first are in DRAM.
    /// With `lease_ms`, those keys are also leased for that long.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub async fn prefetch<K: AsRef<[u8]>>(
        &self,
        ns: &[u8],
        chain: &[K],
        deadline: Duration,
        lease_ms: u64,
    ) -> Result<usize, KvError> {
        let n = self.lookup(ns, chain)?;
        let keys = chain[..n].iter().map(|k| full_key(ns, k.as_ref())).collect::<Result<Vec<_>, _>>()?;
        let loads = futures_util::future::join_all(keys.iter().map(|k| self.get_full(k, false, None)));
        let _ = tokio::time::timeout(deadline, loads).await;
        let now = self.now();
        let mut g = lock(&self.inner);
        let mut count = 0;
        for k in &keys {
            let Some(e) = g.map.get_mut(k).filter(|e| e.value.is_some() && !e.expired(now)) else { break };
            if lease_ms > 0 {
                e.lease_until_ms = e.lease_until_ms.max(now + lease_ms);
            }
            count += 1;
        }
        Ok(count)
    }

    /// The version of `key` (a stamp every write of it moves forward):
    /// `None` when absent. A value read after this call is that
    /// version's when a put with
    /// [`Presence::Version`](super::Presence::Version) of it succeeds
    /// later.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn version(&self, ns: &[u8], key: &[u8]) -> Result<Option<u64>, KvError> {
        self.peek(ns, key, |e| e.version)
    }
}
