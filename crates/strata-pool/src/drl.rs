//! The dirty-region log: which regions of a replicated volume may differ
//! between its replicas, and which regions each stale replica missed.
//!
//! Like md's write-intent bitmap, but kept in the metadata store (etcd in a
//! cluster) rather than on the members, so that whichever node takes a
//! volume over after its owner died reads it from the same place the
//! owner's lease lived.
//!
//! # Invariants
//!
//! - **Dirty before written.** A write does not reach any replica until
//!   every region it touches is dirty in the persisted log. So after the
//!   owner dies, every region where the in-sync replicas may disagree (a
//!   write that reached some of them, or that some lost in a crash before
//!   a flush) is dirty, and the next owner repairs exactly those.
//! - **Clean only when flushed everywhere.** A region leaves the dirty set
//!   only when no write to it is running and a flush of every in-sync
//!   replica, issued after its last write ended, has completed.
//! - **Missed before acknowledged.** When a replica leaves the in-sync set,
//!   it inherits the dirty set as missed, and every later write to one of
//!   its regions marks that region missed for it before the write
//!   completes; resync copies exactly its missed regions.
//!
//! # Cancellation
//!
//! [`DirtyRegionLog::begin`] may be dropped while it persists: the marks it
//! made stay wanted and the next persist saves them; its regions' in-flight
//! counts are released by the guard it had already built.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::regions::{RegionSet, RegionSetError, Regions};

pub use crate::placement::NodeId;

/// The persisted part of the log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrlState {
    /// Regions where in-sync replicas may differ.
    pub dirty: RegionSet,
    /// Per stale replica, the regions it must copy before it is in sync.
    pub missed: BTreeMap<NodeId, RegionSet>,
}

/// Version byte of [`DrlState::encode`].
pub const DRL_FORMAT: u8 = 1;

/// Version byte of [`DrlState::encode_stamped`].
pub const DRL_STAMPED_FORMAT: u8 = 2;

/// When a saved log was written: by which owner and at which of its
/// saves. Of two saved copies of one volume's log, the one with the
/// greater stamp is the later state (the order derives lexicographically,
/// tenure first).
///
/// Every save is a whole log, so the latest copy is the truth and an older
/// one is only stale: a node it says missed regions may have been filled
/// and put back in sync since (a union of copies would mark it missing
/// again, and could leave a chunk with too few readable nodes to open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Stamp {
    /// The epoch the saving owner took the volume over at: unique to one
    /// owner, and greater for every later one.
    pub tenure: u64,
    /// The number of the save within that owner's tenure, from 1.
    pub save: u64,
}

impl DrlState {
    /// Encodes the state:
    ///
    /// | size | field |
    /// |------|-------|
    /// | 1    | format, [`DRL_FORMAT`] |
    /// | var  | dirty [`RegionSet`] |
    /// | 4    | number of stale replicas `m` (u32 LE) |
    /// | m x (4 + var) | node id (u32 LE), its missed [`RegionSet`] |
    pub fn encode(&self, regions: Regions) -> Vec<u8> {
        let mut out = vec![DRL_FORMAT];
        self.encode_body(regions, &mut out);
        out
    }

    /// Encodes the state with the [`Stamp`] of the save that writes it:
    ///
    /// | size | field |
    /// |------|-------|
    /// | 1    | format, [`DRL_STAMPED_FORMAT`] |
    /// | 8    | tenure (u64 LE) |
    /// | 8    | save (u64 LE) |
    /// | var  | the fields after the format byte of [`encode`](Self::encode) |
    pub fn encode_stamped(&self, stamp: Stamp, regions: Regions) -> Vec<u8> {
        let mut out = vec![DRL_STAMPED_FORMAT];
        out.extend(stamp.tenure.to_le_bytes());
        out.extend(stamp.save.to_le_bytes());
        self.encode_body(regions, &mut out);
        out
    }

    fn encode_body(&self, regions: Regions, out: &mut Vec<u8>) {
        out.extend(self.dirty.encode(regions));
        out.extend((self.missed.len() as u32).to_le_bytes());
        for (node, set) in &self.missed {
            out.extend(node.0.to_le_bytes());
            out.extend(set.encode(regions));
        }
    }

    /// Decodes a state written by [`encode`](Self::encode) for a volume of
    /// `regions`.
    ///
    /// # Errors
    ///
    /// [`RegionSetError`] for a wrong format byte, a set encoded for
    /// another region count, a repeated node, trailing or missing bytes.
    pub fn decode(bytes: &[u8], regions: Regions) -> Result<DrlState, RegionSetError> {
        let (&format, rest) = bytes.split_first().ok_or(RegionSetError("empty log"))?;
        if format != DRL_FORMAT {
            return Err(RegionSetError("unknown log format"));
        }
        Self::decode_body(rest, regions)
    }

    /// Decodes a state written by [`encode_stamped`](Self::encode_stamped),
    /// or by [`encode`](Self::encode) (an older node's save, stamped
    /// [`Stamp::default`]: older than every stamped one).
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode), and for a stamp cut short.
    pub fn decode_stamped(bytes: &[u8], regions: Regions) -> Result<(Stamp, DrlState), RegionSetError> {
        let (&format, rest) = bytes.split_first().ok_or(RegionSetError("empty log"))?;
        match format {
            DRL_FORMAT => Ok((Stamp::default(), Self::decode_body(rest, regions)?)),
            DRL_STAMPED_FORMAT => {
                let u64_at = |at: usize| -> Result<u64, RegionSetError> {
                    let b = rest.get(at..at + 8).ok_or(RegionSetError("truncated stamp"))?;
                    Ok(u64::from_le_bytes(b.try_into().map_err(|_| RegionSetError("truncated stamp"))?))
                };
                let stamp = Stamp { tenure: u64_at(0)?, save: u64_at(8)? };
                Ok((stamp, Self::decode_body(&rest[16..], regions)?))
            }
            _ => Err(RegionSetError("unknown log format")),
        }
    }

    fn decode_body(mut rest: &[u8], regions: Regions) -> Result<DrlState, RegionSetError> {
        let set = |rest: &mut &[u8]| -> Result<RegionSet, RegionSetError> {
            let (s, n, used) = RegionSet::decode(rest)?;
            if n != regions.count() {
                return Err(RegionSetError("encoded for another volume size"));
            }
            *rest = &rest[used..];
            Ok(s)
        };
        let dirty = set(&mut rest)?;
        let u32_at = |rest: &mut &[u8]| -> Result<u32, RegionSetError> {
            let b: [u8; 4] = rest.get(..4).and_then(|b| b.try_into().ok()).ok_or(RegionSetError("truncated"))?;
            *rest = &rest[4..];
            Ok(u32::from_le_bytes(b))
        };
        let m = u32_at(&mut rest)?;
        let mut missed = BTreeMap::new();
        for _ in 0..m {
            let node = NodeId(u32_at(&mut rest)?);
            if missed.insert(node, set(&mut rest)?).is_some() {
                return Err(RegionSetError("a node appears twice"));
            }
        }
        if !rest.is_empty() {
            return Err(RegionSetError("trailing bytes"));
        }
        Ok(DrlState { dirty, missed })
    }
}

/// A boxed future of the log's store.
pub type SaveFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Where an owner keeps its log while the metadata store does not answer:
/// a note on every node that takes the volume's writes
/// ([`crate::Replica::save_note`]), which a new owner reads back from
/// every replica it reaches.
pub trait NoteSink: Send + Sync {
    /// Saves `note` on every node that takes the volume's writes, durably.
    /// `Err` when any of them did not take it.
    fn save_note(&self, note: Vec<u8>) -> SaveFuture<'_>;
}

/// Where the log is persisted (the metadata store, for a cluster).
pub trait DrlStore: Send + Sync {
    /// Replaces the persisted log with `state`, durably. Dropping the
    /// future leaves either the old or the new state persisted.
    fn save(&self, state: DrlState) -> SaveFuture<'_>;
}

/// The log could not be persisted: the write that needed it must fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the dirty-region log could not be saved: {0}")]
pub struct DrlError(pub String);

#[derive(Debug, Default)]
struct Inner {
    /// What must be persisted (a superset of what is).
    wanted: DrlState,
    /// Bumped at each change of `wanted`.
    wanted_version: u64,
    /// The `wanted_version` last saved.
    saved_version: u64,
    /// Writes running per region.
    inflight: HashMap<u64, u32>,
    /// Per region, the sequence number of the last write to start.
    last_write: HashMap<u64, u64>,
    seq: u64,
    /// The first sequence number of every write running: the oldest
    /// bounds [`DirtyRegionLog::flush_mark`].
    running: BTreeSet<u64>,
    /// Dirty regions a new owner has not yet made agree on every in-sync
    /// node ([`DirtyRegionLog::hold_for_repair`]): never cleaned.
    unrepaired: RegionSet,
    /// When a failed save was last logged (one a second at most: each
    /// fails a write, and a store that is down fails many).
    save_failure_logged: Option<std::time::Instant>,
}

impl Inner {
    /// True when dirty region `r` may be cleaned by a clean that took
    /// `seq` before its flush: no write runs there, none started after
    /// `seq`, and it is not waiting for a repair.
    fn cleanable(&self, r: u64, seq: u64) -> bool {
        !self.inflight.contains_key(&r)
            && self.last_write.get(&r).is_none_or(|&w| w <= seq)
            && !self.unrepaired.contains(r)
    }
}

/// The log of one replicated volume, held by its owner.
pub struct DirtyRegionLog {
    regions: Regions,
    inner: Mutex<Inner>,
    /// True while some node misses regions: reads and stripe updates skip
    /// the lock when it is false, which is almost always. Written under
    /// `inner`'s lock, before the membership that makes a missing node
    /// readable changes.
    missing: AtomicBool,
    /// How many regions `unrepaired` holds: the I/O path skips the lock
    /// when it is zero, which is always but for a while after a takeover.
    unrepaired: AtomicU64,
    /// One save at a time; later callers find their version saved.
    saving: tokio::sync::Mutex<()>,
    store: Arc<dyn DrlStore>,
}

impl std::fmt::Debug for DirtyRegionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtyRegionLog").field("regions", &self.regions).finish_non_exhaustive()
    }
}

/// A write in flight over some regions; dropping it ends the write.
#[derive(Debug)]
#[must_use]
pub struct WriteGuard {
    log: Arc<DirtyRegionLog>,
    regions: std::ops::Range<u64>,
    /// The write's first sequence number (none for a write of no region).
    first: Option<u64>,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let mut inner = self.log.lock();
        if let Some(first) = self.first {
            inner.running.remove(&first);
        }
        for r in self.regions.clone() {
            if let Some(n) = inner.inflight.get_mut(&r) {
                *n -= 1;
                if *n == 0 {
                    inner.inflight.remove(&r);
                }
            }
        }
    }
}

impl DirtyRegionLog {
    /// The log of a volume cut into `regions`, starting from `persisted`
    /// (what the store holds: after a takeover, what the old owner left).
    pub fn new(regions: Regions, persisted: DrlState, store: Arc<dyn DrlStore>) -> Arc<DirtyRegionLog> {
        let missing = persisted.missed.values().any(|s| !s.is_empty());
        Arc::new(DirtyRegionLog {
            regions,
            missing: AtomicBool::new(missing),
            unrepaired: AtomicU64::new(0),
            inner: Mutex::new(Inner { wanted: persisted, ..Inner::default() }),
            saving: tokio::sync::Mutex::new(()),
            store,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `missing` true to `inner` after a change of what nodes miss.
    fn note_missing(&self, inner: &Inner) {
        self.missing.store(inner.wanted.missed.values().any(|s| !s.is_empty()), Ordering::SeqCst);
    }

    /// How the volume is cut.
    pub fn regions(&self) -> Regions {
        self.regions
    }

    /// The regions that may differ between in-sync replicas.
    pub fn dirty(&self) -> RegionSet {
        self.lock().wanted.dirty.clone()
    }

    /// The regions `node` missed, if it is stale.
    pub fn missed(&self, node: NodeId) -> Option<RegionSet> {
        self.lock().wanted.missed.get(&node).cloned()
    }

    /// The whole state as it must be persisted.
    pub fn state(&self) -> DrlState {
        self.lock().wanted.clone()
    }

    /// Starts a write of `regions`, which replicas in `stale` will miss:
    /// marks them dirty (and missed for those), persists the log when that
    /// changed it, and counts the write as running until the guard drops.
    ///
    /// # Errors
    ///
    /// [`DrlError`] when the log could not be saved; the write must not
    /// be issued.
    pub async fn begin(
        self: &Arc<Self>,
        regions: std::ops::Range<u64>,
        stale: &[NodeId],
    ) -> Result<WriteGuard, DrlError> {
        let (version, first) = {
            let mut inner = self.lock();
            let mut changed = false;
            let first = (!regions.is_empty()).then_some(inner.seq + 1);
            if let Some(f) = first {
                inner.running.insert(f);
            }
            for r in regions.clone() {
                *inner.inflight.entry(r).or_insert(0) += 1;
                inner.seq += 1;
                let seq = inner.seq;
                inner.last_write.insert(r, seq);
                changed |= inner.wanted.dirty.insert(r);
                for &n in stale {
                    changed |= inner.wanted.missed.entry(n).or_default().insert(r);
                }
            }
            if changed {
                inner.wanted_version += 1;
                if !stale.is_empty() {
                    self.note_missing(&inner);
                }
            }
            (changed.then_some(inner.wanted_version), first)
        };
        let guard = WriteGuard { log: self.clone(), regions, first };
        if let Some(v) = version {
            self.persist(v).await?;
        }
        Ok(guard)
    }

    /// Records that `node` left the in-sync set: it missed every dirty
    /// region and `also` (the regions of the write it failed), and
    /// persists that.
    ///
    /// # Errors
    ///
    /// [`DrlError`] when the log could not be saved.
    pub async fn mark_stale(&self, node: NodeId, also: std::ops::Range<u64>) -> Result<(), DrlError> {
        let version = {
            let mut inner = self.lock();
            let dirty = inner.wanted.dirty.clone();
            let set = inner.wanted.missed.entry(node).or_default();
            let mut changed = set.union_with(&dirty);
            for r in also {
                changed |= set.insert(r);
            }
            if changed {
                inner.wanted_version += 1;
            }
            self.note_missing(&inner);
            inner.wanted_version
        };
        self.persist(version).await
    }

    /// True when `node` misses any of `regions`.
    pub fn misses(&self, node: NodeId, regions: std::ops::Range<u64>) -> bool {
        if !self.missing.load(Ordering::SeqCst) {
            return false;
        }
        let inner = self.lock();
        inner.wanted.missed.get(&node).is_some_and(|s| !s.is_empty() && regions.into_iter().any(|r| s.contains(r)))
    }

    /// The nodes of `nodes` that miss any of `regions`.
    pub fn missing_among(
        &self,
        nodes: &std::collections::BTreeSet<NodeId>,
        regions: std::ops::Range<u64>,
    ) -> Vec<NodeId> {
        if !self.missing.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let inner = self.lock();
        nodes
            .iter()
            .copied()
            .filter(|n| inner.wanted.missed.get(n).is_some_and(|s| regions.clone().any(|r| s.contains(r))))
            .collect()
    }

    /// Records that `node` misses `regions` (it joins chunks it never
    /// held), and persists that.
    ///
    /// # Errors
    ///
    /// [`DrlError`] when the log could not be saved.
    pub async fn mark_missing(&self, node: NodeId, regions: &RegionSet) -> Result<(), DrlError> {
        let version = {
            let mut inner = self.lock();
            if inner.wanted.missed.entry(node).or_default().union_with(regions) {
                inner.wanted_version += 1;
            }
            self.note_missing(&inner);
            inner.wanted_version
        };
        self.persist(version).await
    }

    /// Forgets what `node` missed (it is in sync again, or gone).
    pub fn forget(&self, node: NodeId) {
        let mut inner = self.lock();
        if inner.wanted.missed.remove(&node).is_some() {
            inner.wanted_version += 1;
            self.note_missing(&inner);
        }
    }

    /// Clears region `r` from what `node` missed (resync copied it).
    pub fn copied(&self, node: NodeId, r: u64) {
        let mut inner = self.lock();
        if inner.wanted.missed.get_mut(&node).is_some_and(|s| s.remove(r)) {
            inner.wanted_version += 1;
            self.note_missing(&inner);
        }
    }

    /// Marks `r` dirty again (a repair that could not finish).
    pub fn redirty(&self, r: u64) {
        let mut inner = self.lock();
        if inner.wanted.dirty.insert(r) {
            inner.wanted_version += 1;
        }
    }

    /// Holds every dirty region until [`repaired`](Self::repaired) says
    /// the in-sync nodes agree on it (a new owner serves while it makes
    /// them agree; the log must not forget a region meanwhile, or the next
    /// owner would leave it unequal), and returns them.
    pub fn hold_for_repair(&self) -> RegionSet {
        let mut inner = self.lock();
        inner.unrepaired = inner.wanted.dirty.clone();
        self.unrepaired.store(inner.unrepaired.len(), Ordering::SeqCst);
        inner.unrepaired.clone()
    }

    /// True when region `r` still waits for its repair after a takeover.
    pub fn needs_repair(&self, r: u64) -> bool {
        self.unrepaired.load(Ordering::Acquire) > 0 && self.lock().unrepaired.contains(r)
    }

    /// How many regions still wait for their repair.
    pub fn unrepaired(&self) -> u64 {
        self.unrepaired.load(Ordering::Acquire)
    }

    /// Region `r` agrees on every in-sync node: it may be cleaned, but
    /// only by a clean whose flush began after now (what the repair wrote
    /// must be durable first), so it counts as written now.
    pub fn repaired(&self, r: u64) {
        let mut inner = self.lock();
        if inner.unrepaired.remove(r) {
            inner.seq += 1;
            let seq = inner.seq;
            inner.last_write.insert(r, seq);
            self.unrepaired.store(inner.unrepaired.len(), Ordering::SeqCst);
        }
    }

    /// The write sequence now: compare with [`region_quiet_since`]
    /// (Self::region_quiet_since) to learn whether a region was written
    /// meanwhile.
    pub fn sequence(&self) -> u64 {
        self.lock().seq
    }

    /// The newest sequence number at or below which every write has
    /// ended: a flush issued after this call covers every write up to it,
    /// so a region whose writes are all at or below it is durable on each
    /// node that completes the flush. Take it, not
    /// [`sequence`](Self::sequence), before a flush whose completion
    /// cleans regions or tells what a restarted node kept: a write that
    /// began before `sequence` may still be on its way to a node and land
    /// there after the flush (the pool chaos test's stale parity).
    pub fn flush_mark(&self) -> u64 {
        let inner = self.lock();
        inner.running.first().map_or(inner.seq, |&oldest| oldest - 1)
    }

    /// True when no write to `r` is running and none started after `seq`.
    pub fn region_quiet_since(&self, r: u64, seq: u64) -> bool {
        let inner = self.lock();
        !inner.inflight.contains_key(&r) && inner.last_write.get(&r).is_none_or(|&w| w <= seq)
    }

    /// True when some dirty region stayed quiet since `seq` (and
    /// [`clean_flushed`](Self::clean_flushed) would clear it).
    pub fn has_quiet_dirty(&self, seq: u64) -> bool {
        let inner = self.lock();
        inner.wanted.dirty.iter().any(|r| inner.cleanable(r, seq))
    }

    /// Clears the dirty regions that stayed quiet since `seq`, which the
    /// caller took before a flush of every in-sync replica that has since
    /// completed, and persists the log when that changed it.
    ///
    /// # Errors
    ///
    /// [`DrlError`] when the log could not be saved (it stays dirty in the
    /// store, which is safe).
    pub async fn clean_flushed(&self, seq: u64) -> Result<u64, DrlError> {
        let (cleared, version) = {
            let mut inner = self.lock();
            let quiet: Vec<u64> = inner.wanted.dirty.iter().filter(|&r| inner.cleanable(r, seq)).collect();
            for r in &quiet {
                inner.wanted.dirty.remove(*r);
                inner.last_write.remove(r);
            }
            if !quiet.is_empty() {
                inner.wanted_version += 1;
            }
            (quiet.len() as u64, inner.wanted_version)
        };
        self.persist(version).await?;
        Ok(cleared)
    }

    /// Saves the log unless version `v` (or a later one) is saved already.
    ///
    /// # Errors
    ///
    /// [`DrlError`] from the store.
    pub async fn persist(&self, v: u64) -> Result<(), DrlError> {
        loop {
            if self.lock().saved_version >= v {
                return Ok(());
            }
            let _one = self.saving.lock().await;
            let (state, version) = {
                let inner = self.lock();
                if inner.saved_version >= v {
                    return Ok(());
                }
                (inner.wanted.clone(), inner.wanted_version)
            };
            if let Err(e) = self.store.save(state).await {
                let mut inner = self.lock();
                if inner.save_failure_logged.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
                    inner.save_failure_logged = Some(std::time::Instant::now());
                    tracing::warn!("the dirty-region log could not be saved (the write that needed it fails): {e}");
                }
                return Err(DrlError(e));
            }
            let mut inner = self.lock();
            inner.saved_version = inner.saved_version.max(version);
        }
    }

    /// Saves whatever changed since the last save.
    ///
    /// # Errors
    ///
    /// [`DrlError`] from the store.
    pub async fn sync(&self) -> Result<(), DrlError> {
        let v = self.lock().wanted_version;
        self.persist(v).await
    }
}

/// A [`DrlStore`] in memory, for tests: counts saves and can fail them.
#[derive(Debug, Default)]
pub struct MemDrlStore {
    /// The last saved state.
    pub saved: Mutex<Option<DrlState>>,
    /// Saves so far.
    pub saves: std::sync::atomic::AtomicU64,
    /// When set, saves fail.
    pub fail: std::sync::atomic::AtomicBool,
}

impl DrlStore for MemDrlStore {
    fn save(&self, state: DrlState) -> SaveFuture<'_> {
        Box::pin(async move {
            use std::sync::atomic::Ordering::SeqCst;
            tokio::task::yield_now().await;
            if self.fail.load(SeqCst) {
                return Err("injected failure".into());
            }
            *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
            self.saves.fetch_add(1, SeqCst);
            Ok(())
        })
    }
}

impl MemDrlStore {
    /// The last saved state (empty if none).
    pub fn saved(&self) -> DrlState {
        self.saved.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    fn log() -> (Arc<DirtyRegionLog>, Arc<MemDrlStore>) {
        let store = Arc::new(MemDrlStore::default());
        (DirtyRegionLog::new(Regions::for_volume(64 << 20, 64 << 20), DrlState::default(), store.clone()), store)
    }

    #[tokio::test]
    async fn a_region_is_dirty_in_the_store_before_the_write_may_start() {
        let (log, store) = log();
        let g = log.begin(3..5, &[]).await.unwrap();
        assert_eq!(store.saved().dirty.iter().collect::<Vec<_>>(), vec![3, 4]);
        // A second write to the same regions costs no save.
        let g2 = log.begin(3..4, &[]).await.unwrap();
        assert_eq!(store.saves.load(SeqCst), 1);
        drop((g, g2));
    }

    #[tokio::test]
    async fn a_region_held_for_repair_stays_dirty_until_a_clean_after_its_repair() {
        let store = Arc::new(MemDrlStore::default());
        let mut left = DrlState::default();
        left.dirty.insert(2);
        left.dirty.insert(5);
        let log = DirtyRegionLog::new(Regions::for_volume(64 << 20, 64 << 20), left, store.clone());
        assert_eq!(log.hold_for_repair().iter().collect::<Vec<_>>(), vec![2, 5]);
        assert_eq!(log.unrepaired(), 2);
        assert!(log.needs_repair(2) && !log.needs_repair(3));
        // Quiet, but not repaired: no clean forgets them.
        let before = log.sequence();
        assert!(!log.has_quiet_dirty(before));
        assert_eq!(log.clean_flushed(before).await.unwrap(), 0);
        // Repaired: a clean whose flush began before the repair ended may
        // not rely on it; one that began after may.
        log.repaired(2);
        assert!(!log.needs_repair(2));
        assert_eq!(log.unrepaired(), 1);
        assert_eq!(log.clean_flushed(before).await.unwrap(), 0);
        let after = log.sequence();
        assert_eq!(log.clean_flushed(after).await.unwrap(), 1);
        assert_eq!(store.saved().dirty.iter().collect::<Vec<_>>(), vec![5]);
        log.repaired(5);
        log.repaired(5);
        assert_eq!(log.unrepaired(), 0);
    }

    #[tokio::test]
    async fn a_failed_save_fails_the_write_and_a_later_one_saves_the_marks() {
        let (log, store) = log();
        store.fail.store(true, SeqCst);
        assert!(log.begin(7..8, &[]).await.is_err());
        store.fail.store(false, SeqCst);
        drop(log.begin(9..10, &[]).await.unwrap());
        assert_eq!(store.saved().dirty.iter().collect::<Vec<_>>(), vec![7, 9], "a mark is never dropped unsaved");
    }

    #[tokio::test]
    async fn cleaning_keeps_running_and_later_writes_dirty() {
        let (log, store) = log();
        let running = log.begin(1..2, &[]).await.unwrap();
        drop(log.begin(2..3, &[]).await.unwrap());
        let seq = log.sequence();
        drop(log.begin(3..4, &[]).await.unwrap()); // after the flush began
        assert_eq!(log.clean_flushed(seq).await.unwrap(), 1);
        assert_eq!(store.saved().dirty.iter().collect::<Vec<_>>(), vec![1, 3]);
        drop(running);
        assert_eq!(log.clean_flushed(log.sequence()).await.unwrap(), 2);
        assert!(store.saved().dirty.is_empty());
    }

    #[tokio::test]
    async fn the_flush_mark_stays_below_every_write_still_running() {
        let (log, store) = log();
        assert_eq!(log.flush_mark(), 0);
        let running = log.begin(1..3, &[]).await.unwrap(); // seqs 1 and 2
        drop(log.begin(5..6, &[]).await.unwrap()); // seq 3, ended
        assert_eq!(log.sequence(), 3);
        let mark = log.flush_mark();
        assert_eq!(mark, 0, "a write that began before the mark still runs");
        // It ends after the flush was sent: that flush may not hold it.
        drop(running);
        assert_eq!(log.clean_flushed(mark).await.unwrap(), 0);
        assert_eq!(store.saved().dirty.iter().collect::<Vec<_>>(), vec![1, 2, 5]);
        let mark = log.flush_mark();
        assert_eq!(mark, 3);
        assert_eq!(log.clean_flushed(mark).await.unwrap(), 3);
        // A write of no region takes no number and holds no mark back.
        let none = log.begin(4..4, &[]).await.unwrap();
        assert_eq!(log.flush_mark(), log.sequence());
        drop(none);
    }

    #[tokio::test]
    async fn a_stale_replica_misses_the_dirty_regions_and_every_later_write() {
        let (log, store) = log();
        let g = log.begin(4..5, &[]).await.unwrap();
        log.mark_stale(NodeId(9), 6..7).await.unwrap();
        drop(log.begin(8..9, &[NodeId(9)]).await.unwrap());
        assert_eq!(store.saved().missed[&NodeId(9)].iter().collect::<Vec<_>>(), vec![4, 6, 8]);
        log.copied(NodeId(9), 4);
        log.sync().await.unwrap();
        assert_eq!(store.saved().missed[&NodeId(9)].iter().collect::<Vec<_>>(), vec![6, 8]);
        log.forget(NodeId(9));
        log.sync().await.unwrap();
        assert!(store.saved().missed.is_empty());
        drop(g);
    }

    #[tokio::test]
    async fn a_dropped_begin_releases_its_regions() {
        let (log, _store) = log();
        let fut = log.begin(2..3, &[]);
        drop(fut); // never polled
        let mut fut = Box::pin(log.begin(5..6, &[]));
        // Polled once: marks made, save not finished (the store yields).
        let waker = std::task::Waker::noop();
        assert!(fut.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending());
        drop(fut);
        let seq = log.sequence();
        assert!(log.region_quiet_since(5, seq), "no write counted as running after the drop");
        assert_eq!(log.dirty().iter().collect::<Vec<_>>(), vec![5], "the mark stays wanted");
    }

    #[test]
    fn the_state_encoding_round_trips_and_refuses_damage() {
        let regions = Regions::for_volume(20 << 20, 64 << 20);
        let mut s = DrlState::default();
        s.dirty.insert(3);
        s.missed.insert(NodeId(7), [1, 19].into_iter().collect());
        s.missed.insert(NodeId(2), RegionSet::new());
        let bytes = s.encode(regions);
        assert_eq!(DrlState::decode(&bytes, regions).unwrap(), s);
        assert!(DrlState::decode(&bytes, Regions::for_volume(30 << 20, 64 << 20)).is_err(), "another size");
        assert!(DrlState::decode(&bytes[..bytes.len() - 1], regions).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(DrlState::decode(&extra, regions).is_err());
        let mut fmt = bytes.clone();
        fmt[0] = 3;
        assert!(DrlState::decode(&fmt, regions).is_err());
        assert!(DrlState::decode_stamped(&fmt, regions).is_err());
        // Stamped: 17 bytes ahead of the same body; unstamped reads as
        // the oldest stamp.
        let stamp = Stamp { tenure: 0x0102, save: 9 };
        let stamped = s.encode_stamped(stamp, regions);
        assert_eq!(stamped.len(), bytes.len() + 16);
        assert_eq!(stamped[..17], [2, 2, 1, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(stamped[17..], bytes[1..]);
        assert_eq!(DrlState::decode_stamped(&stamped, regions).unwrap(), (stamp, s.clone()));
        assert_eq!(DrlState::decode_stamped(&bytes, regions).unwrap(), (Stamp::default(), s));
        assert!(DrlState::decode(&stamped, regions).is_err(), "the old decoder refuses the new format");
        for cut in [1, 9, 16, 17] {
            assert!(DrlState::decode_stamped(&stamped[..cut], regions).is_err(), "cut at {cut}");
        }
        assert!(Stamp { tenure: 3, save: 1 } > Stamp { tenure: 2, save: 99 }, "a later owner's save is later");
    }
}
