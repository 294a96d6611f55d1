//! [`KvStore`]: the tiered block store. DRAM first, then two log tiers: a
//! local SSD, and a pool volume reached over NVMe/TCP; blocks move down
//! when DRAM is full and back up when read.
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
//!   A block admitted to the log tiers is appended to each of them (SSD
//!   and pool) that lacks it: the pool is the tier other hosts can see,
//!   and one that outlives the SSD's ring, so a block reaches it when it
//!   leaves DRAM rather than when the SSD reclaims it (which would need
//!   a read of the segment back from the SSD first).
//! - **Promotion**: a block read from SSD or the pool goes back into
//!   DRAM, and keeps its log copies, so that leaving DRAM again costs no
//!   write. Reads try the SSD copy first; a pool read that takes longer
//!   than [`POOL_READ_DEADLINE`] is a miss.
//! - **Backpressure**: a put waits while the SSD log's sealed, unwritten
//!   buffers are over their bound, rather than queueing without end. It
//!   waits for the pool's at most [`POOL_WRITE_WAIT`]: a pool that stalls
//!   (a cut network) is skipped by demotion until its writes move again,
//!   so a remote volume never stalls the engine's puts for long.
//! - **Failed writes**: a log whose write fails pauses (appends refused),
//!   drops the records it could not write from the index, and resumes in
//!   a fresh segment once its device answers again (the `log` module).
//! - **Recovery**: both logs are scanned at open; for each key the
//!   record with the highest version wins (a tombstone deletes), and each
//!   log's copy with that version is indexed, so the index and the byte
//!   counts are what they were at the last written record. Of a large
//!   record the scan reads only the header and key; its CRC is checked
//!   when it is read, and a damaged one is then dropped like any record
//!   that fails its checks.
//!
//! Keys are `(namespace, key)`, stored as one byte string: the namespace's
//! length (one byte), the namespace, the key.
//!
//! Invariants, under the one lock:
//! - an entry has a DRAM value, a log location, or several;
//! - the DRAM policy holds exactly the keys with a DRAM value, and its
//!   byte count is their [`dram_size`];
//! - each log tier's `live` is the sum of the record lengths of its
//!   locations in the map, and every such location is current in its log;
//! - every location of an entry holds the entry's version;
//! - a key whose log record is superseded or deleted has a tombstone or a
//!   newer version in a log, so a restart does not bring the old value
//!   back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use strata_block::BlockDevice;
use tokio::sync::oneshot;

use crate::format::{Kind, RecordMeta};
use crate::log::{Found, Loc, LogDev, LogError, LogState, PeerLog};
use crate::policy::{Policy, S3Fifo};

/// Bytes charged to DRAM per entry beyond its key and value (the map
/// slot, the policy's queues).
pub const ENTRY_OVERHEAD: u64 = 96;

/// A log tier: where a block leaving DRAM is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// The local SSD.
    Ssd,
    /// This store's region of the pool volume.
    Pool,
}

impl Tier {
    /// Every log tier, in the order a get reads them and demotion writes
    /// them: the SSD first.
    const ALL: [Tier; 2] = [Tier::Ssd, Tier::Pool];

    /// The tier's name in logs and messages.
    fn name(self) -> &'static str {
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

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One `T` per log tier, indexed by [`Tier`] only, so that a tier is
/// never a bare number.
#[derive(Debug, Clone, Copy, Default)]
struct PerTier<T>([T; 2]);

impl<T> PerTier<T> {
    /// Each tier with its value, in [`Tier::ALL`] order.
    fn iter(&self) -> impl Iterator<Item = (Tier, &T)> {
        Tier::ALL.into_iter().zip(&self.0)
    }

    /// Each tier with its value, mutable, in [`Tier::ALL`] order.
    fn iter_mut(&mut self) -> impl Iterator<Item = (Tier, &mut T)> {
        Tier::ALL.into_iter().zip(&mut self.0)
    }
}

impl<T> std::ops::Index<Tier> for PerTier<T> {
    type Output = T;
    fn index(&self, t: Tier) -> &T {
        &self.0[t.index()]
    }
}

impl<T> std::ops::IndexMut<Tier> for PerTier<T> {
    fn index_mut(&mut self, t: Tier) -> &mut T {
        &mut self.0[t.index()]
    }
}

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

/// How often the logs of the other writers on a shared pool volume are
/// read for what they added.
pub const PEER_REFRESH: Duration = Duration::from_secs(1);

/// A get's next step ([`KvStore::get_full`]).
enum Copy {
    /// The answer: the value and where it came from, or a miss.
    Done(Option<(Bytes, Source)>),
    /// Read the copy at this location of this log tier.
    Read(Tier, Loc),
}

/// The devices of a store's log tiers.
#[derive(Default)]
pub struct Tiers {
    /// The local SSD tier.
    pub ssd: Option<Arc<dyn BlockDevice>>,
    /// This store's pool tier (its region of a shared pool volume).
    pub pool: Option<Arc<dyn BlockDevice>>,
    /// The regions the other stores sharing the pool volume write: read
    /// only, so that a lookup here sees the blocks they wrote.
    pub peers: Vec<Arc<dyn BlockDevice>>,
}

/// Where a peer's record of a key is.
#[derive(Debug, Clone, Copy)]
struct PeerLoc {
    peer: usize,
    loc: Loc,
    expires_ms: u64,
}

impl PeerLoc {
    fn expired(&self, now: u64) -> bool {
        self.expires_ms != 0 && self.expires_ms <= now
    }
}

/// A peer's log, as this store reads it.
struct Peer {
    dev: Arc<dyn BlockDevice>,
    /// Opened once the peer has formatted its log; held across a refresh.
    log: tokio::sync::Mutex<Option<PeerLog>>,
    /// Its device side for reads, without waiting for a refresh.
    reader: Mutex<Option<Arc<LogDev>>>,
}

/// A pool read slower than this is answered as a miss: recomputing a
/// block beats waiting on a stalled remote volume.
pub const POOL_READ_DEADLINE: Duration = Duration::from_secs(2);

/// Most expired entries one pass of [`KvStore::expire_due`] deletes (the
/// store's lock is held meanwhile).
pub const EXPIRE_BATCH: u64 = 10_000;

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

/// The DRAM policy's ghost length, in multiples of the keys DRAM holds,
/// for a log tier of `log_bytes` below `dram_bytes` of DRAM: 1 + 4x
/// their ratio, at most 16. A block that comes back from the ghost counts
/// as reused and is admitted to the log tiers when it leaves DRAM again;
/// a ghost that remembers as far back as the SSD reaches lets a block
/// that returns after leaving DRAM get there, where a ghost of DRAM's
/// size forgets it first (`strata bench kv-trace --ssd-ratio`, in
/// docs/kv.md: 4.7% to 10.9% hits at the smallest size measured).
pub fn ghost_factor_for(dram_bytes: u64, log_bytes: u64) -> usize {
    let ratio = log_bytes / dram_bytes.max(1);
    usize::try_from(ratio.saturating_mul(4).saturating_add(1)).unwrap_or(usize::MAX).clamp(1, 16)
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
    /// The key is stored, with this version ([`KvStore::version`]): no
    /// write has happened since it was read.
    Version(u64),
}

#[derive(Debug)]
struct Entry {
    value: Option<Bytes>,
    /// Its record in each log tier.
    locs: PerTier<Option<Loc>>,
    /// Its write stamp: what its log records carry.
    version: u64,
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
    hits_pool: AtomicU64,
    hits_peer: AtomicU64,
    misses: AtomicU64,
    puts: AtomicU64,
    evicted: AtomicU64,
    demoted: AtomicU64,
    demoted_bytes: AtomicU64,
    not_admitted: AtomicU64,
    dropped: PerTier<AtomicU64>,
    lost: PerTier<AtomicU64>,
    pool_skipped: AtomicU64,
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
    /// Keys with a pool record.
    pub pool_keys: u64,
    /// Bytes of live pool records.
    pub pool_live: u64,
    /// Pool log capacity (0: no pool tier).
    pub pool_capacity: u64,
    /// Gets.
    pub gets: u64,
    /// Gets answered from DRAM.
    pub hits_dram: u64,
    /// Gets answered from SSD.
    pub hits_ssd: u64,
    /// Gets answered from the pool.
    pub hits_pool: u64,
    /// Gets answered from another store's log on the shared pool volume.
    pub hits_peer: u64,
    /// Keys known from other stores' logs on the shared pool volume.
    pub peer_keys: u64,
    /// Gets that found nothing.
    pub misses: u64,
    /// Puts.
    pub puts: u64,
    /// Blocks that left DRAM.
    pub evicted: u64,
    /// Log records written on leaving DRAM (one per tier written).
    pub demoted: u64,
    /// Bytes written to the log tiers by demotion.
    pub demoted_bytes: u64,
    /// Blocks that left DRAM without being written (not admitted).
    pub not_admitted: u64,
    /// SSD records dropped when their segment was reclaimed.
    pub dropped_ssd: u64,
    /// Pool records dropped when their segment was reclaimed.
    pub dropped_pool: u64,
    /// SSD records dropped because their write failed.
    pub lost_ssd: u64,
    /// Pool records dropped because their write failed.
    pub lost_pool: u64,
    /// Blocks not written to the pool because its writes were stalled.
    pub pool_skipped: u64,
    /// Blocks copied back into DRAM from a log tier.
    pub promoted: u64,
    /// Log records that failed their checks on read (answered as misses).
    pub corrupt: u64,
    /// Blocks found expired.
    pub expired: u64,
    /// Blocks deleted to keep a namespace within its quota.
    pub quota_evicted: u64,
}

/// A log tier's bookkeeping.
struct LogTier {
    log: LogState<Bytes>,
    /// Bytes of the records the map points at.
    live: u64,
    /// Entries with a record here.
    keys: u64,
}

struct Inner {
    map: HashMap<Bytes, Entry>,
    dram: S3Fifo<Bytes>,
    tiers: PerTier<Option<LogTier>>,
    ns: HashMap<Bytes, NsState>,
    next_stamp: u64,
    /// The next write stamp (above every version in the logs).
    next_version: u64,
    /// Keys found in the peers' logs (not in `map`'s accounting: they are
    /// the peers' bytes).
    peer_index: HashMap<Bytes, PeerLoc>,
    /// Entries with an expiry, soonest first: `(expires_ms, stamp, key)`.
    /// Stale items (the entry since gone, rewritten or given another
    /// expiry) are skipped when they come up.
    expiring: BinaryHeap<Reverse<(u64, u64, Bytes)>>,
}

impl Entry {
    /// True when some tier holds a copy.
    fn has_copy(&self) -> bool {
        self.value.is_some() || self.locs.iter().any(|(_, l)| l.is_some())
    }
}

impl Inner {
    /// A new write stamp.
    fn new_version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Counts a record of tier `t` that the map now points at.
    fn add_loc(&mut self, t: Tier, loc: Loc) {
        if let Some(tier) = self.tiers[t].as_mut() {
            tier.live += loc.len();
            tier.keys += 1;
        }
    }

    /// Uncounts a record of tier `t` the map no longer points at.
    fn sub_loc(&mut self, t: Tier, loc: Loc) {
        if let Some(tier) = self.tiers[t].as_mut() {
            tier.live -= loc.len();
            tier.keys -= 1;
        }
    }

    /// Inserts an entry, charging its namespace; returns the one it
    /// replaced (whose charge is taken off).
    fn insert_entry(&mut self, k: Bytes, mut e: Entry) -> Option<Entry> {
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
        self.map.insert(k, e);
        old
    }

    /// Notes that the entry of `k` with `stamp` expires at `at`.
    fn will_expire(&mut self, k: &Bytes, at: u64, stamp: u64) {
        self.expiring.push(Reverse((at, stamp, k.clone())));
        if self.expiring.len() > self.map.len() * 2 + 1024 {
            let map = &self.map;
            self.expiring
                .retain(|Reverse((at, stamp, k))| map.get(k).is_some_and(|e| e.stamp == *stamp && e.expires_ms == *at));
        }
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
    /// The device side of each log tier.
    devs: PerTier<Option<Arc<LogDev>>>,
    peers: Vec<Peer>,
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
        Self::open_tiers(cfg, Tiers { ssd, ..Tiers::default() }, Box::new(unix_ms)).await
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
        Self::open_tiers(cfg, Tiers { ssd, ..Tiers::default() }, clock).await
    }

    /// [`KvStore::open`] with every tier: a log on `tiers.pool` too (a
    /// pool volume, usually `strata_host::RemoteNamespace`, or a region
    /// of one), with segments sized for it by [`segment_size_for`], and
    /// the other writers' regions of a shared pool volume, read every
    /// [`PEER_REFRESH`].
    ///
    /// # Errors
    ///
    /// As [`KvStore::open`], for either log device.
    pub async fn open_tiers(
        cfg: KvConfig,
        tiers: Tiers,
        clock: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Arc<KvStore>, KvError> {
        let Tiers { ssd, pool, peers } = tiers;
        let below = [&ssd, &pool].iter().filter_map(|d| d.as_ref()).map(|d| d.geometry().size_bytes()).max();
        let mut inner = Inner {
            map: HashMap::new(),
            dram: S3Fifo::with_shape(10, ghost_factor_for(cfg.dram_bytes, below.unwrap_or(0))),
            tiers: PerTier::default(),
            ns: HashMap::new(),
            next_stamp: 0,
            next_version: 0,
            peer_index: HashMap::new(),
            expiring: BinaryHeap::new(),
        };
        let mut devs = PerTier::default();
        let mut found = Vec::new();
        for (t, dev) in [(Tier::Ssd, ssd), (Tier::Pool, pool)] {
            let Some(dev) = dev else { continue };
            let seg = if t == Tier::Ssd { cfg.segment_bytes } else { segment_size_for(dev.geometry().size_bytes()) };
            let (log, f) = LogState::open(dev, seg).await?;
            devs[t] = Some(log.dev().clone());
            inner.tiers[t] = Some(LogTier { log, live: 0, keys: 0 });
            found.extend(f.into_iter().map(|f| (t, f)));
        }
        recover(&mut inner, found, clock());
        let peers = peers
            .into_iter()
            .map(|dev| Peer { dev, log: tokio::sync::Mutex::new(None), reader: Mutex::new(None) })
            .collect();
        let store =
            Arc::new(KvStore { inner: Mutex::new(inner), devs, peers, cfg, counters: Counters::default(), clock });
        tokio::spawn(tick(Arc::downgrade(&store)));
        if !store.peers.is_empty() {
            store.refresh_peers().await;
            tokio::spawn(peer_tick(Arc::downgrade(&store)));
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

    /// Drops the log records of `old` (an entry already out of the map)
    /// from the index, leaving tombstones so a restart does not bring it
    /// back. A tombstone carries the version it deletes.
    fn forget(&self, inner: &mut Inner, k: &Bytes, old: &Entry) {
        for (t, loc) in old.locs.iter() {
            let Some(loc) = *loc else { continue };
            inner.sub_loc(t, loc);
            let Some(tier) = inner.tiers[t].as_mut() else { continue };
            if !tier.log.is_current(loc) {
                continue;
            }
            let meta = RecordMeta { kind: Kind::Delete, expires_ms: 0, version: old.version };
            match tier.log.append(k.clone(), k, &[], meta) {
                Ok((_, reclaimed)) => Self::reclaim(inner, &self.counters, t, reclaimed),
                Err(e) => tracing::warn!(error = %e, tier = t.name(), "KV log: tombstone not written"),
            }
        }
    }

    /// Drops the tier-`t` locations of reclaimed keys whose records are
    /// gone, and the entries left with no copy.
    fn reclaim(inner: &mut Inner, counters: &Counters, t: Tier, keys: Vec<Bytes>) {
        let n = Self::drop_locs(inner, t, keys, |log, loc| !log.is_current(loc));
        counters.dropped[t].fetch_add(n, Ordering::Relaxed);
    }

    /// Drops tier `t`'s records whose writes failed from the index.
    fn drop_lost(inner: &mut Inner, counters: &Counters, t: Tier) {
        let Some(tier) = inner.tiers[t].as_mut() else { return };
        for (span, keys) in tier.log.take_lost() {
            let n = Self::drop_locs(inner, t, keys, |_, loc| span.holds(loc));
            if n > 0 {
                tracing::warn!(tier = t.name(), records = n, "KV records lost with a failed write");
            }
            counters.lost[t].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Drops the tier-`t` records of `keys` for which `gone` holds from
    /// the index, and the entries left with no copy; returns how many.
    fn drop_locs(inner: &mut Inner, t: Tier, keys: Vec<Bytes>, gone: impl Fn(&LogState<Bytes>, Loc) -> bool) -> u64 {
        let mut n = 0;
        for k in keys {
            let Some(tier) = inner.tiers[t].as_ref() else { break };
            let Some(e) = inner.map.get_mut(&k) else { continue };
            let Some(loc) = e.locs[t].filter(|&l| gone(&tier.log, l)) else { continue };
            e.locs[t] = None;
            let no_copy = !e.has_copy();
            inner.sub_loc(t, loc);
            n += 1;
            if no_copy {
                inner.take_entry(&k);
            }
        }
        n
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

    /// Appends `k`'s value to log tier `t` (when the store has it) and
    /// points the entry there; returns where it went.
    fn write_copy(
        &self,
        inner: &mut Inner,
        t: Tier,
        k: &Bytes,
        value: &[u8],
        meta: RecordMeta,
    ) -> Result<Option<Loc>, LogError> {
        let Some(tier) = inner.tiers[t].as_mut() else { return Ok(None) };
        let (loc, reclaimed) = tier.log.append(k.clone(), k, value, meta)?;
        if let Some(e) = inner.map.get_mut(k) {
            e.locs[t] = Some(loc);
        }
        inner.add_loc(t, loc);
        Self::reclaim(inner, &self.counters, t, reclaimed);
        Ok(Some(loc))
    }

    /// A block has left DRAM's policy: write it to each log tier that
    /// lacks it if admitted, and forget it if no tier holds it then.
    fn demote(&self, inner: &mut Inner, k: Bytes, reused: bool, now: u64) {
        let Some(e) = inner.map.get_mut(&k) else { return };
        let Some(value) = e.value.take() else { return };
        if e.expired(now) {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            let e = inner.take_entry(&k).expect("looked up above");
            for (t, loc) in e.locs.iter() {
                if let Some(loc) = *loc {
                    inner.sub_loc(t, loc);
                }
            }
            return;
        }
        let admit = reused || self.cfg.admit == Admit::All || e.pin != Pin::None;
        let (have, meta) = (e.locs, RecordMeta { kind: Kind::Put, expires_ms: e.expires_ms, version: e.version });
        for t in Tier::ALL {
            if have[t].is_some() || !admit {
                continue;
            }
            if t == Tier::Pool && self.devs[Tier::Pool].as_ref().is_some_and(|d| d.is_stalled()) {
                self.counters.pool_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.write_copy(inner, t, &k, &value, meta) {
                Ok(Some(loc)) => {
                    self.counters.demoted.fetch_add(1, Ordering::Relaxed);
                    self.counters.demoted_bytes.fetch_add(loc.len(), Ordering::Relaxed);
                }
                Ok(None) => {}
                Err(err) => tracing::debug!(error = %err, tier = t.name(), "KV block not demoted"),
            }
        }
        if inner.map.get(&k).is_some_and(|e| !e.has_copy()) {
            self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
            inner.take_entry(&k);
        }
    }

    /// The value of `key`, from DRAM or a log tier (then copied back
    /// into DRAM). A damaged record is a miss, or the next tier's copy.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub async fn get(&self, ns: &[u8], key: &[u8]) -> Result<Option<Bytes>, KvError> {
        let k = full_key(ns, key)?;
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let got = self.get_full(&k, true).await;
        let c = match &got {
            Some((_, Source::Dram)) => &self.counters.hits_dram,
            Some((_, Source::Log(Tier::Ssd))) => &self.counters.hits_ssd,
            Some((_, Source::Peer)) => &self.counters.hits_peer,
            Some((_, Source::Log(Tier::Pool))) => &self.counters.hits_pool,
            None => &self.counters.misses,
        };
        c.fetch_add(1, Ordering::Relaxed);
        Ok(got.map(|(v, _)| v))
    }

    /// Looks `k` up; `(value, where it was found)`. `touch`: count it as
    /// a use.
    async fn get_full(&self, k: &Bytes, touch: bool) -> Option<(Bytes, Source)> {
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
                Tier::Pool => tokio::time::timeout(POOL_READ_DEADLINE, dev.read(k, loc)).await.unwrap_or_else(|_| {
                    tracing::warn!(deadline = ?POOL_READ_DEADLINE, "KV pool read missed its deadline");
                    Err(LogError::Failed)
                }),
                Tier::Ssd => dev.read(k, loc).await,
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
            self.remove_entry(inner, k);
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
        let reader = self.peers.get(pl.peer)?.reader.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
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

    /// Reads what the peers added to their logs since the last look, and
    /// indexes it. Runs every [`PEER_REFRESH`]; public so that tests (and
    /// callers that just learnt of a peer's write) need not wait.
    pub async fn refresh_peers(&self) {
        for (p, peer) in self.peers.iter().enumerate() {
            let mut log = peer.log.lock().await;
            if log.is_none() {
                match PeerLog::open(peer.dev.clone()).await {
                    Ok(Some(l)) => {
                        *peer.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(l.dev().clone());
                        *log = Some(l);
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!(peer = p, error = %e, "KV peer log not readable");
                        continue;
                    }
                }
            }
            let Some(l) = log.as_mut() else { continue };
            let found = match l.refresh().await {
                Ok(Some(found)) => found,
                Ok(None) => {
                    // The peer formatted its log afresh: what it had is gone.
                    tracing::info!(peer = p, "KV peer log was formatted again");
                    *log = None;
                    *peer.reader.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    lock(&self.inner).peer_index.retain(|_, pl| pl.peer != p);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(peer = p, error = %e, "KV peer log refresh failed; trying again in a second");
                    continue;
                }
            };
            let now = self.now();
            let mut g = lock(&self.inner);
            for f in found {
                match f.head.kind {
                    Kind::Put if f.head.expires_ms == 0 || f.head.expires_ms > now => {
                        g.peer_index.insert(f.key, PeerLoc { peer: p, loc: f.loc, expires_ms: f.head.expires_ms });
                    }
                    _ => {
                        if g.peer_index.get(&f.key).is_some_and(|pl| pl.peer == p) {
                            g.peer_index.remove(&f.key);
                        }
                    }
                }
            }
        }
    }

    /// Removes `k` from every tier's index (tombstones in the logs).
    fn remove_entry(&self, inner: &mut Inner, k: &Bytes) -> bool {
        let Some(e) = inner.take_entry(k) else { return false };
        if e.value.is_some() {
            inner.dram.remove(k);
        }
        self.forget(inner, k, &e);
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

    /// The version of `key` (a stamp every write of it moves forward):
    /// `None` when absent. A value read after this call is that
    /// version's when a put with [`Presence::Version`] of it succeeds
    /// later.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn version(&self, ns: &[u8], key: &[u8]) -> Result<Option<u64>, KvError> {
        let k = full_key(ns, key)?;
        let now = self.now();
        let g = lock(&self.inner);
        Ok(g.map.get(&k).filter(|e| !e.expired(now)).map(|e| e.version))
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
        // A peer's copy is forgotten here (it is the peer's to delete);
        // the next refresh brings it back only if the peer writes it anew.
        let peer = g.peer_index.remove(&k).is_some();
        Ok(self.remove_entry(&mut g, &k) || peer)
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
        g.peer_index.retain(|k, _| ns_of(k) != ns);
        Ok(keys.len() as u64)
    }

    /// Keys of namespace `ns` (every tier).
    pub fn namespace_len(&self, ns: &[u8]) -> u64 {
        self.namespace_usage(ns).0
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
            ssd_keys: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.keys),
            ssd_live: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.live),
            ssd_capacity: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.log.capacity()),
            pool_keys: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.keys),
            pool_live: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.live),
            pool_capacity: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.log.capacity()),
            gets: r(&c.gets),
            hits_dram: r(&c.hits_dram),
            hits_ssd: r(&c.hits_ssd),
            hits_pool: r(&c.hits_pool),
            hits_peer: r(&c.hits_peer),
            peer_keys: g.peer_index.len() as u64,
            misses: r(&c.misses),
            puts: r(&c.puts),
            evicted: r(&c.evicted),
            demoted: r(&c.demoted),
            demoted_bytes: r(&c.demoted_bytes),
            not_admitted: r(&c.not_admitted),
            dropped_ssd: r(&c.dropped[Tier::Ssd]),
            dropped_pool: r(&c.dropped[Tier::Pool]),
            lost_ssd: r(&c.lost[Tier::Ssd]),
            lost_pool: r(&c.lost[Tier::Pool]),
            pool_skipped: r(&c.pool_skipped),
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
        let mut live = PerTier::<u64>::default();
        let mut keys = PerTier::<u64>::default();
        let mut dram = 0;
        for (k, e) in &g.map {
            assert!(e.has_copy(), "an entry with no copy");
            assert_eq!(e.value.is_some(), g.dram.contains(k), "policy and values disagree");
            assert!(e.version <= g.next_version, "a version from the future");
            if let Some(v) = &e.value {
                dram += dram_size(k.len(), v.len());
            }
            for (t, loc) in e.locs.iter() {
                let Some(loc) = *loc else { continue };
                live[t] += loc.len();
                keys[t] += 1;
                let tier = g.tiers[t].as_ref().expect("a location in a tier that is not there");
                assert!(tier.log.is_current(loc), "a stale {t} location");
            }
        }
        assert_eq!(g.dram.used(), dram);
        for (name, st) in &g.ns {
            let mine = g.map.iter().filter(|(k, _)| ns_of(k) == &name[..]);
            let (keys, bytes) = mine.fold((0, 0), |(n, b), (_, e)| (n + 1, b + e.size));
            assert_eq!((st.keys, st.bytes), (keys, bytes), "namespace accounting");
        }
        for t in Tier::ALL {
            let counted = g.tiers[t].as_ref().map_or((0, 0), |x| (x.live, x.keys));
            assert_eq!(counted, (live[t], keys[t]), "{t} accounting");
        }
    }
}

/// The newest record of a key across the logs.
struct Newest {
    version: u64,
    kind: Kind,
    expires_ms: u64,
    value_len: u64,
    locs: PerTier<Option<Loc>>,
}

/// Rebuilds the index from the records both logs' scans found (each
/// log's oldest first). Per key the highest version wins; at equal
/// versions a tombstone wins (it carries the version it deletes), and
/// puts are copies of one value, one per log. Entries are inserted oldest
/// version first, so a namespace's oldest-first order survives.
fn recover(inner: &mut Inner, found: Vec<(Tier, Found)>, now: u64) {
    let mut newest: HashMap<Bytes, Newest> = HashMap::new();
    for (t, f) in found {
        let h = f.head;
        inner.next_version = inner.next_version.max(h.version);
        let slot = newest.entry(f.key).or_insert(Newest {
            version: h.version,
            kind: h.kind,
            expires_ms: h.expires_ms,
            value_len: h.value_len,
            locs: PerTier::default(),
        });
        if h.version > slot.version || (h.version == slot.version && h.kind == Kind::Delete) {
            *slot = Newest {
                version: h.version,
                kind: h.kind,
                expires_ms: h.expires_ms,
                value_len: h.value_len,
                locs: PerTier::default(),
            };
        } else if h.version < slot.version || slot.kind == Kind::Delete {
            continue;
        }
        if h.kind == Kind::Put {
            slot.locs[t] = Some(f.loc);
        }
    }
    let mut live: Vec<(Bytes, Newest)> =
        newest.into_iter().filter(|(_, n)| n.kind == Kind::Put && (n.expires_ms == 0 || n.expires_ms > now)).collect();
    live.sort_unstable_by_key(|(_, n)| n.version);
    for (k, n) in live {
        for (t, loc) in n.locs.iter() {
            let Some(loc) = *loc else { continue };
            if let Some(tier) = inner.tiers[t].as_mut() {
                tier.log.track(k.clone(), loc);
            }
            inner.add_loc(t, loc);
        }
        let size = dram_size(k.len(), n.value_len as usize);
        let e = Entry { locs: n.locs, version: n.version, expires_ms: n.expires_ms, ..Entry::new(size) };
        inner.insert_entry(k, e);
    }
}

/// Every 200 ms, while the store lives: deletes what expired, writes each
/// log's open buffer out, drops the records of failed writes from the
/// index, and syncs every second. A tier's next sync is asked for only
/// once its last one has answered, so a slow device neither holds up the
/// other tier nor queues syncs.
async fn tick(store: Weak<KvStore>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut n = 0u64;
    let mut syncing: PerTier<Option<oneshot::Receiver<Result<(), LogError>>>> = PerTier::default();
    loop {
        tick.tick().await;
        n += 1;
        let Some(s) = store.upgrade() else { return };
        s.expire_due();
        let mut g = lock(&s.inner);
        for (t, pending) in syncing.iter_mut() {
            KvStore::drop_lost(&mut g, &s.counters, t);
            let Some(tier) = g.tiers[t].as_mut() else { continue };
            tier.log.seal(false);
            if let Some(rx) = pending {
                match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => continue,
                    Ok(Err(e)) => tracing::debug!(error = %e, tier = t.name(), "KV log sync failed"),
                    _ => {}
                }
                *pending = None;
            }
            if n.is_multiple_of(5) {
                *pending = Some(tier.log.request_sync());
            }
        }
    }
}

/// Reads the peers' logs every [`PEER_REFRESH`], while the store lives.
async fn peer_tick(store: Weak<KvStore>) {
    let mut tick = tokio::time::interval(PEER_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = store.upgrade() else { return };
        s.refresh_peers().await;
    }
}
