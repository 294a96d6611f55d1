//! [`KvStore`]: the tiered block store. DRAM first, then a log tier on a
//! local SSD; blocks move down when DRAM is full and back up when read.
//!
//! - **DRAM** holds values as shared [`Bytes`] (a get hands out the same
//!   bytes, no copy) under an S3-FIFO policy with a byte capacity that
//!   holds: a put first makes room, and fails with [`KvError::Full`] only
//!   when everything left is pinned or leased.
//! - **Demotion** is write-behind: a block leaving DRAM is appended to the
//!   SSD log's write buffer, under the lock, and written by the log's
//!   writer task. Only blocks that were read again while in DRAM (or came
//!   back after an eviction, or are pinned) are written: a block put once
//!   and never read leaves without wearing the drive ([`Admit::Reused`],
//!   the default; [`Admit::All`] writes every block).
//! - **Promotion**: a block read from SSD goes back into DRAM, and keeps
//!   its SSD copy, so that leaving DRAM again costs no write.
//! - **Backpressure**: a put waits while the log's sealed, unwritten
//!   buffers are over their bound, rather than queueing without end.
//! - **Recovery**: the SSD log is scanned at open and its records
//!   replayed oldest first (tombstones included), so the index and the
//!   byte counts are what they were at the last written record.
//!
//! Keys are `(namespace, key)`, stored as one byte string: the namespace's
//! length (one byte), the namespace, the key.
//!
//! Invariants, under the one lock:
//! - an entry has a DRAM value, an SSD location, or both;
//! - the DRAM policy holds exactly the keys with a DRAM value, and its
//!   byte count is their [`dram_size`];
//! - `ssd_live` is the sum of the record lengths of the SSD locations in
//!   the map, and every such location is current in the log;
//! - a key whose SSD record is superseded or deleted has a tombstone or a
//!   newer record after it in the log, so a restart does not bring the
//!   old value back.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use strata_block::BlockDevice;

use crate::format::Kind;
use crate::log::{Loc, LogDev, LogError, LogState};
use crate::policy::{Policy, S3Fifo};

/// Bytes charged to DRAM per entry beyond its key and value (the map
/// slot, the policy's queues).
pub const ENTRY_OVERHEAD: u64 = 96;

/// Values below this are copied out of the receive buffer they arrived
/// in, so that a small value does not keep a large buffer alive.
const COPY_SMALL_BELOW: usize = 16 << 10;

/// Which blocks leaving DRAM are written to the SSD tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admit {
    /// Blocks read again while in DRAM, returning blocks and pinned ones.
    #[default]
    Reused,
    /// Every block.
    All,
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

/// The store's settings.
#[derive(Debug, Clone)]
pub struct KvConfig {
    /// DRAM tier capacity in bytes (keys, values and [`ENTRY_OVERHEAD`]).
    pub dram_bytes: u64,
    /// SSD admission.
    pub admit: Admit,
    /// Segment size for a newly formatted SSD log.
    pub segment_bytes: u64,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig { dram_bytes: 1 << 30, admit: Admit::Reused, segment_bytes: 256 << 20 }
    }
}

/// Segment size for a log device of `bytes`: a sixteenth of it, between
/// 1 MiB and 256 MiB (which bounds the largest value the tier holds).
pub fn segment_size_for(bytes: u64) -> u64 {
    (bytes / 16).clamp(1 << 20, 256 << 20) >> 20 << 20
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The value cannot fit in the DRAM tier at all.
    #[error("value of {len} bytes is larger than the DRAM tier ({capacity} bytes)")]
    TooLarge {
        /// Value bytes.
        len: u64,
        /// DRAM capacity.
        capacity: u64,
    },
    /// DRAM is full of pinned or leased blocks.
    #[error("the DRAM tier is full of pinned or leased blocks ({used} of {capacity} bytes)")]
    Full {
        /// Bytes in use.
        used: u64,
        /// Capacity.
        capacity: u64,
    },
    /// A namespace name is longer than 255 bytes.
    #[error("namespace name is {0} bytes; at most 255")]
    BadNamespace(usize),
    /// The namespace's quota cannot take the value: it is larger than the
    /// quota, or the rest is pinned or leased.
    #[error(
        "namespace quota of {quota} bytes cannot take {need} more bytes ({used} in use, the rest pinned or leased)"
    )]
    Quota {
        /// Bytes asked for.
        need: u64,
        /// Bytes in use.
        used: u64,
        /// The quota.
        quota: u64,
    },
    /// The SSD log failed to open or to write.
    #[error(transparent)]
    Log(#[from] LogError),
}

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
}

#[derive(Debug)]
struct Entry {
    value: Option<Bytes>,
    ssd: Option<Loc>,
    expires_ms: u64,
    pin: Pin,
    lease_until_ms: u64,
    /// [`dram_size`] of its key and value, whichever tier holds it: what
    /// its namespace's quota is charged.
    size: u64,
    /// When it was stored, for its namespace's oldest-first order.
    stamp: u64,
}

impl Entry {
    fn new(size: u64) -> Entry {
        Entry { value: None, ssd: None, expires_ms: 0, pin: Pin::None, lease_until_ms: 0, size, stamp: 0 }
    }
}

/// A namespace's usage and quota.
#[derive(Debug, Default)]
struct NsState {
    /// Bytes of its entries in every tier ([`Entry::size`]).
    bytes: u64,
    keys: u64,
    /// 0: no quota.
    quota: u64,
    /// Keys oldest first, with their stamps; a slot whose stamp is not
    /// the entry's is stale and skipped.
    order: VecDeque<(Bytes, u64)>,
}

impl Entry {
    fn expired(&self, now: u64) -> bool {
        self.expires_ms != 0 && self.expires_ms <= now
    }
}

/// DRAM bytes charged for a key and value.
pub fn dram_size(key_len: usize, value_len: usize) -> u64 {
    (key_len + value_len) as u64 + ENTRY_OVERHEAD
}

/// Counters since start.
#[derive(Debug, Default)]
struct Counters {
    gets: AtomicU64,
    hits_dram: AtomicU64,
    hits_ssd: AtomicU64,
    misses: AtomicU64,
    puts: AtomicU64,
    evicted: AtomicU64,
    demoted: AtomicU64,
    demoted_bytes: AtomicU64,
    not_admitted: AtomicU64,
    dropped_ssd: AtomicU64,
    promoted: AtomicU64,
    corrupt: AtomicU64,
    expired: AtomicU64,
    quota_evicted: AtomicU64,
}

/// A snapshot of the store's state and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys in any tier.
    pub keys: u64,
    /// Keys with a DRAM copy.
    pub dram_keys: u64,
    /// DRAM bytes used.
    pub dram_used: u64,
    /// DRAM capacity.
    pub dram_capacity: u64,
    /// Keys with an SSD record.
    pub ssd_keys: u64,
    /// Bytes of live SSD records.
    pub ssd_live: u64,
    /// SSD log capacity (0: no SSD tier).
    pub ssd_capacity: u64,
    /// Gets.
    pub gets: u64,
    /// Gets answered from DRAM.
    pub hits_dram: u64,
    /// Gets answered from SSD.
    pub hits_ssd: u64,
    /// Gets that found nothing.
    pub misses: u64,
    /// Puts.
    pub puts: u64,
    /// Blocks that left DRAM.
    pub evicted: u64,
    /// Blocks written to SSD on leaving DRAM.
    pub demoted: u64,
    /// Bytes written to SSD by demotion.
    pub demoted_bytes: u64,
    /// Blocks that left DRAM without being written (not admitted).
    pub not_admitted: u64,
    /// SSD records dropped when their segment was reclaimed.
    pub dropped_ssd: u64,
    /// Blocks copied back into DRAM from SSD.
    pub promoted: u64,
    /// SSD records that failed their checks on read (answered as misses).
    pub corrupt: u64,
    /// Blocks found expired.
    pub expired: u64,
    /// Blocks deleted to keep a namespace within its quota.
    pub quota_evicted: u64,
}

struct Inner {
    map: HashMap<Bytes, Entry>,
    dram: S3Fifo<Bytes>,
    log: Option<LogState<Bytes>>,
    ssd_live: u64,
    ssd_keys: u64,
    ns: HashMap<Bytes, NsState>,
    next_stamp: u64,
}

impl Inner {
    /// Inserts an entry, charging its namespace; returns the one it
    /// replaced (whose charge is taken off).
    fn insert_entry(&mut self, k: Bytes, mut e: Entry) -> Option<Entry> {
        let old = self.take_entry(&k);
        self.next_stamp += 1;
        e.stamp = self.next_stamp;
        let st = self.ns.entry(Bytes::copy_from_slice(ns_of(&k))).or_default();
        st.bytes += e.size;
        st.keys += 1;
        st.order.push_back((k.clone(), e.stamp));
        if st.order.len() as u64 > st.keys * 2 + 64 {
            let map = &self.map;
            st.order.retain(|(k, stamp)| map.get(k).is_some_and(|e| e.stamp == *stamp));
        }
        self.map.insert(k, e);
        old
    }

    /// Removes an entry from the map and its namespace's charge (not from
    /// the DRAM policy or the log: the caller does that).
    fn take_entry(&mut self, k: &Bytes) -> Option<Entry> {
        let e = self.map.remove(k)?;
        if let Some(st) = self.ns.get_mut(ns_of(k)) {
            st.bytes -= e.size;
            st.keys -= 1;
        }
        Some(e)
    }
}

/// The tiered KV-block store. Cheap to share: wrap it in an [`Arc`].
pub struct KvStore {
    inner: Mutex<Inner>,
    log_dev: Option<Arc<LogDev>>,
    cfg: KvConfig,
    counters: Counters,
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
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
fn ns_of(k: &[u8]) -> &[u8] {
    let n = k.first().copied().unwrap_or(0) as usize;
    k.get(1..1 + n).unwrap_or(&[])
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    // Every mutation keeps the invariants between statements that cannot
    // panic on outside input; a poisoned lock is taken over as is.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl KvStore {
    /// Opens the store with a DRAM tier and, when `ssd` is given, an SSD
    /// log tier on that device (formatted when blank, recovered
    /// otherwise). Starts a task that writes out the log's buffer every
    /// 200 ms and syncs the device every second, so a block reaches the
    /// drive within about a second of leaving DRAM.
    ///
    /// # Errors
    ///
    /// The log device is too small or its I/O fails.
    pub async fn open(cfg: KvConfig, ssd: Option<Arc<dyn BlockDevice>>) -> Result<Arc<KvStore>, KvError> {
        Self::open_with_clock(cfg, ssd, Box::new(unix_ms)).await
    }

    /// [`KvStore::open`] with a clock of Unix milliseconds (tests).
    ///
    /// # Errors
    ///
    /// As [`KvStore::open`].
    pub async fn open_with_clock(
        cfg: KvConfig,
        ssd: Option<Arc<dyn BlockDevice>>,
        clock: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Arc<KvStore>, KvError> {
        let mut inner = Inner {
            map: HashMap::new(),
            dram: S3Fifo::default(),
            log: None,
            ssd_live: 0,
            ssd_keys: 0,
            ns: HashMap::new(),
            next_stamp: 0,
        };
        let mut log_dev = None;
        if let Some(dev) = ssd {
            let (mut log, found) = LogState::open(dev, cfg.segment_bytes).await?;
            let now = clock();
            for f in found {
                let old = match f.head.kind {
                    Kind::Put if f.head.expires_ms == 0 || f.head.expires_ms > now => {
                        log.track(f.key.clone(), f.loc);
                        let size = dram_size(f.key.len(), f.loc.value_len as usize);
                        let e = Entry { ssd: Some(f.loc), expires_ms: f.head.expires_ms, ..Entry::new(size) };
                        inner.ssd_live += f.loc.len();
                        inner.ssd_keys += 1;
                        inner.insert_entry(f.key, e)
                    }
                    _ => inner.take_entry(&f.key),
                };
                if let Some(loc) = old.and_then(|e| e.ssd) {
                    inner.ssd_live -= loc.len();
                    inner.ssd_keys -= 1;
                }
            }
            log_dev = Some(log.dev().clone());
            inner.log = Some(log);
        }
        let store = Arc::new(KvStore { inner: Mutex::new(inner), log_dev, cfg, counters: Counters::default(), clock });
        if store.log_dev.is_some() {
            tokio::spawn(writer_tick(Arc::downgrade(&store)));
        }
        Ok(store)
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

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
        if let Some(d) = &self.log_dev {
            d.ready().await;
        }
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let old = inner.map.get(&k);
        let live = old.filter(|e| !e.expired(now));
        match opts.only_if {
            Some(Presence::Absent) if live.is_some() => return Ok(false),
            Some(Presence::Present) if live.is_none() => return Ok(false),
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
            if let Some(loc) = old.ssd {
                self.forget_ssd(inner, &k, loc);
            }
        }
        inner.dram.insert(k.clone(), size);
        inner.insert_entry(k, Entry { value: Some(value), expires_ms, pin, ..Entry::new(size) });
        Ok(true)
    }

    /// Deletes namespace `ns`'s oldest blocks until a block of `size`
    /// bytes, replacing `except` of `old_size`, fits in its quota;
    /// soft-pinned ones go last, hard-pinned and leased ones stay.
    fn enforce_quota(
        &self,
        inner: &mut Inner,
        ns: &[u8],
        size: u64,
        old_size: u64,
        now: u64,
        except: &Bytes,
    ) -> Result<(), KvError> {
        let Some(st) = inner.ns.get(ns).filter(|st| st.quota > 0) else { return Ok(()) };
        let quota = st.quota;
        if size > quota {
            // Nothing to delete for: it can never fit.
            return Err(KvError::Quota { need: size, used: st.bytes, quota });
        }
        let need = size.saturating_sub(old_size);
        for soft_too in [false, true] {
            let mut kept = Vec::new();
            loop {
                let st = inner.ns.get_mut(ns).expect("checked above");
                if st.bytes + need <= quota {
                    break;
                }
                let Some((k, stamp)) = st.order.pop_front() else { break };
                let Some(e) = inner.map.get(&k).filter(|e| e.stamp == stamp) else { continue };
                if k == *except || e.pin == Pin::Hard || e.lease_until_ms > now || (!soft_too && e.pin == Pin::Soft) {
                    kept.push((k, stamp));
                    continue;
                }
                self.remove_entry(inner, &k);
                self.counters.quota_evicted.fetch_add(1, Ordering::Relaxed);
            }
            let st = inner.ns.get_mut(ns).expect("checked above");
            for slot in kept.into_iter().rev() {
                st.order.push_front(slot);
            }
            if st.bytes + need <= quota {
                return Ok(());
            }
        }
        let used = inner.ns.get(ns).map(|st| st.bytes).unwrap_or(0);
        Err(KvError::Quota { need, used, quota })
    }

    /// Sets namespace `ns`'s quota in bytes (0: none). Takes effect on the
    /// namespace's next put.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn set_quota(&self, ns: &[u8], bytes: u64) -> Result<(), KvError> {
        full_key(ns, b"")?;
        let mut g = lock(&self.inner);
        g.ns.entry(Bytes::copy_from_slice(ns)).or_default().quota = bytes;
        Ok(())
    }

    /// Namespace `ns`'s usage: `(keys, bytes, quota)`, bytes as its quota
    /// counts them (keys, values and [`ENTRY_OVERHEAD`], in any tier).
    pub fn namespace_usage(&self, ns: &[u8]) -> (u64, u64, u64) {
        let g = lock(&self.inner);
        g.ns.get(ns).map(|st| (st.keys, st.bytes, st.quota)).unwrap_or((0, 0, 0))
    }

    /// Drops `k`'s SSD record from the index, leaving a tombstone so a
    /// restart does not bring it back.
    fn forget_ssd(&self, inner: &mut Inner, k: &Bytes, loc: Loc) {
        inner.ssd_live -= loc.len();
        inner.ssd_keys -= 1;
        let Some(log) = inner.log.as_mut() else { return };
        if !log.is_current(loc) {
            return;
        }
        match log.append(k.clone(), k, &[], Kind::Delete, 0) {
            Ok((_, reclaimed)) => Self::reclaim(inner, &self.counters, reclaimed),
            Err(e) => tracing::warn!(error = %e, "KV log: tombstone not written"),
        }
    }

    /// Drops the SSD locations of reclaimed keys whose records are gone.
    fn reclaim(inner: &mut Inner, counters: &Counters, keys: Vec<Bytes>) {
        for k in keys {
            let Some(log) = inner.log.as_ref() else { return };
            let Some(e) = inner.map.get_mut(&k) else { continue };
            let Some(loc) = e.ssd.filter(|&l| !log.is_current(l)) else { continue };
            e.ssd = None;
            let gone = e.value.is_none();
            inner.ssd_live -= loc.len();
            inner.ssd_keys -= 1;
            counters.dropped_ssd.fetch_add(1, Ordering::Relaxed);
            if gone {
                inner.take_entry(&k);
            }
        }
    }

    /// Evicts from DRAM until `need` more bytes fit, demoting what is
    /// admitted. Soft pins go last; hard pins and leases stay.
    fn make_room(&self, inner: &mut Inner, need: u64, now: u64, except: Option<&Bytes>) -> Result<(), KvError> {
        let cap = self.cfg.dram_bytes;
        for soft_too in [false, true] {
            if inner.dram.used() + need <= cap {
                break;
            }
            let map = &inner.map;
            let evicted = inner.dram.evict(cap, need, &mut |k| {
                except == Some(k)
                    || map.get(k).is_some_and(|e| {
                        e.pin == Pin::Hard || e.lease_until_ms > now || (!soft_too && e.pin == Pin::Soft)
                    })
            });
            for ev in evicted {
                self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                self.demote(inner, ev.key, ev.reused, now);
            }
        }
        let used = inner.dram.used();
        if used + need > cap {
            return Err(KvError::Full { used, capacity: cap });
        }
        Ok(())
    }

    /// A block has left DRAM's policy: write it to SSD if admitted and
    /// not there already, else forget it.
    fn demote(&self, inner: &mut Inner, k: Bytes, reused: bool, now: u64) {
        let Some(e) = inner.map.get_mut(&k) else { return };
        let Some(value) = e.value.take() else { return };
        if e.expired(now) {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            let e = inner.take_entry(&k).expect("looked up above");
            if let Some(loc) = e.ssd {
                inner.ssd_live -= loc.len();
                inner.ssd_keys -= 1;
            }
            return;
        }
        if e.ssd.is_some() {
            return;
        }
        let admit = reused || self.cfg.admit == Admit::All || e.pin != Pin::None;
        let expires = e.expires_ms;
        let written = match inner.log.as_mut() {
            Some(log) if admit => match log.append(k.clone(), &k, &value, Kind::Put, expires) {
                Ok(r) => Some(r),
                Err(err) => {
                    tracing::debug!(error = %err, "KV block not demoted");
                    None
                }
            },
            _ => None,
        };
        match written {
            Some((loc, reclaimed)) => {
                self.counters.demoted.fetch_add(1, Ordering::Relaxed);
                self.counters.demoted_bytes.fetch_add(loc.len(), Ordering::Relaxed);
                if let Some(e) = inner.map.get_mut(&k) {
                    e.ssd = Some(loc);
                }
                inner.ssd_live += loc.len();
                inner.ssd_keys += 1;
                Self::reclaim(inner, &self.counters, reclaimed);
            }
            None => {
                self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
                inner.take_entry(&k);
            }
        }
    }

    /// The value of `key`, from DRAM or SSD (then copied back into DRAM).
    /// A damaged SSD record is a miss.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub async fn get(&self, ns: &[u8], key: &[u8]) -> Result<Option<Bytes>, KvError> {
        let k = full_key(ns, key)?;
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let got = self.get_full(&k, true).await;
        let c = match &got {
            Some((_, true)) => &self.counters.hits_dram,
            Some((_, false)) => &self.counters.hits_ssd,
            None => &self.counters.misses,
        };
        c.fetch_add(1, Ordering::Relaxed);
        Ok(got.map(|(v, _)| v))
    }

    /// Looks `k` up; `(value, from DRAM)`. `touch`: count it as a use.
    async fn get_full(&self, k: &Bytes, touch: bool) -> Option<(Bytes, bool)> {
        let now = self.now();
        let loc = {
            let mut g = lock(&self.inner);
            let inner = &mut *g;
            let e = inner.map.get(k)?;
            if e.expired(now) {
                self.remove_entry(inner, k);
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            if let Some(v) = &e.value {
                let v = v.clone();
                if touch {
                    inner.dram.touch(k);
                }
                return Some((v, true));
            }
            let loc = e.ssd?;
            if let Some(v) = inner.log.as_ref().and_then(|l| l.buffered(loc)) {
                return Some((v, false));
            }
            loc
        };
        let dev = self.log_dev.as_ref()?;
        let value = match dev.read(k, loc).await {
            Ok(Some(v)) => v,
            Ok(None) | Err(_) => {
                // Reclaimed under us, or damaged: a miss either way. If the
                // index still points there, the record is bad: drop it.
                let mut g = lock(&self.inner);
                let inner = &mut *g;
                if inner.map.get(k).is_some_and(|e| e.ssd == Some(loc) && e.value.is_none())
                    && inner.log.as_ref().is_some_and(|l| l.is_current(loc))
                {
                    self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(seg = loc.seg, off = loc.off, "KV record failed its checks; dropped");
                    self.remove_entry(inner, k);
                }
                return None;
            }
        };
        // Promote, if the entry is still the one read.
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let size = dram_size(k.len(), value.len());
        let same = inner.map.get(k).is_some_and(|e| e.ssd == Some(loc) && e.value.is_none());
        if same && size <= self.cfg.dram_bytes && self.make_room(inner, size, now, Some(k)).is_ok() {
            // make_room may have reclaimed the segment it came from.
            if let Some(e) = inner.map.get_mut(k).filter(|e| e.ssd == Some(loc)) {
                e.value = Some(value.clone());
                inner.dram.insert(k.clone(), size);
                inner.dram.touch(k);
                self.counters.promoted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some((value, false))
    }

    /// Removes `k` from every tier's index (tombstone on SSD).
    fn remove_entry(&self, inner: &mut Inner, k: &Bytes) -> bool {
        let Some(e) = inner.take_entry(k) else { return false };
        if e.value.is_some() {
            inner.dram.remove(k);
        }
        if let Some(loc) = e.ssd {
            self.forget_ssd(inner, k, loc);
        }
        true
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
        Ok(keys.iter().take_while(|k| g.map.get(*k).is_some_and(|e| !e.expired(now))).count())
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
        let loads = futures_util::future::join_all(keys.iter().map(|k| self.get_full(k, false)));
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

    /// Ends the leases of `keys`; returns how many were leased.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn release<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K]) -> Result<usize, KvError> {
        self.update(ns, keys, |e| std::mem::take(&mut e.lease_until_ms) != 0)
    }

    /// Sets the pin of `keys` (which must be present); returns how many
    /// were. A pinned block on SSD only is pinned once it is read back.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn pin<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K], pin: Pin) -> Result<usize, KvError> {
        self.update(ns, keys, |e| {
            e.pin = pin;
            true
        })
    }

    fn update<K: AsRef<[u8]>>(
        &self,
        ns: &[u8],
        keys: &[K],
        mut f: impl FnMut(&mut Entry) -> bool,
    ) -> Result<usize, KvError> {
        let keys = keys.iter().map(|k| full_key(ns, k.as_ref())).collect::<Result<Vec<_>, _>>()?;
        let mut g = lock(&self.inner);
        Ok(keys.iter().filter(|k| g.map.get_mut(*k).is_some_and(&mut f)).count())
    }

    /// Sets or clears (`0`) the expiry of `key`; false when absent.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn set_expiry(&self, ns: &[u8], key: &[u8], expires_ms: u64) -> Result<bool, KvError> {
        Ok(self.update(ns, &[key], |e| {
            e.expires_ms = expires_ms;
            true
        })? == 1)
    }

    /// The expiry of `key`: `None` when absent, `Some(0)` when it has none.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn expiry(&self, ns: &[u8], key: &[u8]) -> Result<Option<u64>, KvError> {
        let k = full_key(ns, key)?;
        let now = self.now();
        let g = lock(&self.inner);
        Ok(g.map.get(&k).filter(|e| !e.expired(now)).map(|e| e.expires_ms))
    }

    /// Deletes `key` from every tier; false when it was absent.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn delete(&self, ns: &[u8], key: &[u8]) -> Result<bool, KvError> {
        let k = full_key(ns, key)?;
        let mut g = lock(&self.inner);
        Ok(self.remove_entry(&mut g, &k))
    }

    /// Deletes every key of namespace `ns`; returns how many.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn delete_namespace(&self, ns: &[u8]) -> Result<u64, KvError> {
        full_key(ns, b"")?;
        let mut g = lock(&self.inner);
        let keys: Vec<Bytes> = g.map.keys().filter(|k| ns_of(k) == ns).cloned().collect();
        for k in &keys {
            self.remove_entry(&mut g, k);
        }
        Ok(keys.len() as u64)
    }

    /// Keys of namespace `ns` (every tier).
    pub fn namespace_len(&self, ns: &[u8]) -> u64 {
        self.namespace_usage(ns).0
    }

    /// Makes what has left DRAM durable on the SSD tier. With
    /// `demote_all`, every DRAM block not yet on SSD is written first, so
    /// that all of the store survives a restart.
    ///
    /// # Errors
    ///
    /// The SSD log failed.
    pub async fn flush(&self, demote_all: bool) -> Result<(), KvError> {
        let Some(dev) = self.log_dev.clone() else { return Ok(()) };
        if demote_all {
            let keys: Vec<Bytes> = {
                let g = lock(&self.inner);
                g.map.iter().filter(|(_, e)| e.value.is_some() && e.ssd.is_none()).map(|(k, _)| k.clone()).collect()
            };
            for k in keys {
                dev.ready().await;
                let mut g = lock(&self.inner);
                let inner = &mut *g;
                let Some(e) = inner.map.get(&k).filter(|e| e.ssd.is_none()) else { continue };
                let (Some(v), exp) = (e.value.clone(), e.expires_ms) else { continue };
                let Some(log) = inner.log.as_mut() else { break };
                let (loc, reclaimed) = log.append(k.clone(), &k, &v, Kind::Put, exp)?;
                if let Some(e) = inner.map.get_mut(&k) {
                    e.ssd = Some(loc);
                }
                inner.ssd_live += loc.len();
                inner.ssd_keys += 1;
                Self::reclaim(inner, &self.counters, reclaimed);
            }
        }
        let synced = match lock(&self.inner).log.as_mut() {
            Some(log) => {
                log.seal(false);
                log.request_sync()
            }
            None => return Ok(()),
        };
        synced.await.map_err(|_| LogError::Failed)??;
        Ok(())
    }

    /// Drops every key in every tier (tombstones on SSD).
    pub fn clear(&self) -> u64 {
        let mut g = lock(&self.inner);
        let keys: Vec<Bytes> = g.map.keys().cloned().collect();
        for k in &keys {
            self.remove_entry(&mut g, k);
        }
        keys.len() as u64
    }

    /// The store's state and counters.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let g = lock(&self.inner);
        Stats {
            keys: g.map.len() as u64,
            dram_keys: g.dram.len() as u64,
            dram_used: g.dram.used(),
            dram_capacity: self.cfg.dram_bytes,
            ssd_keys: g.ssd_keys,
            ssd_live: g.ssd_live,
            ssd_capacity: g.log.as_ref().map(|l| l.capacity()).unwrap_or(0),
            gets: r(&c.gets),
            hits_dram: r(&c.hits_dram),
            hits_ssd: r(&c.hits_ssd),
            misses: r(&c.misses),
            puts: r(&c.puts),
            evicted: r(&c.evicted),
            demoted: r(&c.demoted),
            demoted_bytes: r(&c.demoted_bytes),
            not_admitted: r(&c.not_admitted),
            dropped_ssd: r(&c.dropped_ssd),
            promoted: r(&c.promoted),
            corrupt: r(&c.corrupt),
            expired: r(&c.expired),
            quota_evicted: r(&c.quota_evicted),
        }
    }

    /// Checks the invariants of the module doc (tests).
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        let g = lock(&self.inner);
        let mut live = 0;
        let mut dram = 0;
        for (k, e) in &g.map {
            assert!(e.value.is_some() || e.ssd.is_some(), "an entry with no copy");
            assert_eq!(e.value.is_some(), g.dram.contains(k), "policy and values disagree");
            if let Some(v) = &e.value {
                dram += dram_size(k.len(), v.len());
            }
            if let Some(loc) = e.ssd {
                live += loc.len();
                assert!(g.log.as_ref().is_some_and(|l| l.is_current(loc)), "a stale SSD location");
            }
        }
        assert_eq!(g.dram.used(), dram);
        for (name, st) in &g.ns {
            let mine = g.map.iter().filter(|(k, _)| ns_of(k) == &name[..]);
            let (keys, bytes) = mine.fold((0, 0), |(n, b), (_, e)| (n + 1, b + e.size));
            assert_eq!((st.keys, st.bytes), (keys, bytes), "namespace accounting");
        }
        assert_eq!(g.ssd_live, live);
        assert_eq!(g.ssd_keys, g.map.values().filter(|e| e.ssd.is_some()).count() as u64);
    }
}

/// Writes the log's open buffer out every 200 ms and syncs every second,
/// while the store lives.
async fn writer_tick(store: Weak<KvStore>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut n = 0u64;
    loop {
        tick.tick().await;
        let synced = {
            let Some(s) = store.upgrade() else { return };
            let mut g = lock(&s.inner);
            let Some(log) = g.log.as_mut() else { return };
            log.seal(false);
            n += 1;
            n.is_multiple_of(5).then(|| log.request_sync())
        };
        if let Some(Ok(Err(e))) = match synced {
            Some(rx) => Some(rx.await),
            None => None,
        } {
            tracing::debug!(error = %e, "KV log sync failed");
        }
    }
}
