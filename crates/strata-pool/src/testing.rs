//! In-memory stand-ins for the metadata store and for replicas that fail,
//! for tests: this crate's own, and with the `test-utils` feature its
//! integration tests' and other crates'. Not in a release build.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, EpochFence, Geometry, IoBuf, MemDevice};

use crate::control::{Control, ControlError, ControlFuture, Membership};
use crate::drl::NodeId;
use crate::erasure::Shard;
use crate::layout::{Layout, NextLayout};
use crate::replica::{Replica, ReplicaError, ReplicaFuture};

/// A metadata store holding one volume's membership, with compare-and-set
/// on the epoch as etcd's transactions do.
#[derive(Debug)]
pub struct MemControl {
    /// The stored membership.
    pub stored: Mutex<Membership>,
    /// When set, every change fails as if the store were unreachable.
    pub unavailable: AtomicBool,
    /// The placement map epoch of the last move.
    pub map_epoch: AtomicU64,
    /// The move in progress, if any.
    pub next: Mutex<Option<NextLayout>>,
}

impl MemControl {
    /// A store holding `in_sync` at `epoch`.
    pub fn new(epoch: u64, in_sync: impl IntoIterator<Item = NodeId>) -> Arc<MemControl> {
        Arc::new(MemControl {
            stored: Mutex::new(Membership { epoch, in_sync: in_sync.into_iter().collect() }),
            unavailable: AtomicBool::new(false),
            map_epoch: AtomicU64::new(0),
            next: Mutex::new(None),
        })
    }

    /// The stored membership.
    pub fn get(&self) -> Membership {
        self.stored.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A takeover: bumps the epoch and returns the new membership.
    pub fn take_over(&self) -> Membership {
        let mut m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        m.epoch += 1;
        m.clone()
    }

    fn change(&self, from: &Membership, f: impl FnOnce(&mut BTreeSet<NodeId>)) -> Result<Membership, ControlError> {
        if self.unavailable.load(SeqCst) {
            return Err(ControlError::Unavailable("injected".into()));
        }
        let mut m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        if m.epoch != from.epoch {
            return Err(ControlError::NotOwner(format!("epoch is {}, not {}", m.epoch, from.epoch)));
        }
        f(&mut m.in_sync);
        m.epoch += 1;
        Ok(m.clone())
    }
}

impl Control for MemControl {
    fn leave(&self, from: &Membership, nodes: &[NodeId]) -> ControlFuture<'_, Membership> {
        let (from, nodes) = (from.clone(), nodes.to_vec());
        Box::pin(async move {
            // As with etcd: the request travels, the store commits, and
            // the answer travels back; a caller may vanish at either wait.
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| nodes.iter().for_each(|n| _ = s.remove(n)));
            tokio::task::yield_now().await;
            r
        })
    }

    fn rejoin(&self, from: &Membership, node: NodeId) -> ControlFuture<'_, Membership> {
        let from = from.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| _ = s.insert(node));
            tokio::task::yield_now().await;
            r
        })
    }

    fn begin_move(
        &self,
        from: &Membership,
        next: &NextLayout,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership> {
        let (from, next, in_sync) = (from.clone(), next.clone(), in_sync.clone());
        Box::pin(async move {
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| *s = in_sync);
            if r.is_ok() {
                *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
            }
            tokio::task::yield_now().await;
            r
        })
    }

    fn relayout(
        &self,
        from: &Membership,
        map_epoch: u64,
        _slots: &std::collections::BTreeMap<u32, Vec<NodeId>>,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership> {
        let (from, in_sync) = (from.clone(), in_sync.clone());
        Box::pin(async move {
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| *s = in_sync);
            if r.is_ok() {
                self.map_epoch.store(map_epoch, SeqCst);
                *self.next.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            tokio::task::yield_now().await;
            r
        })
    }
}

/// A layout from a fixed table: chunk `c` lives on `table[c % len]`.
#[derive(Debug)]
pub struct TableLayout {
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Replica lists, cycled over the chunks.
    pub table: Vec<Vec<NodeId>>,
}

impl Layout for TableLayout {
    fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    fn replicas(&self, chunk: u64) -> Vec<NodeId> {
        self.table[(chunk % self.table.len() as u64) as usize].clone()
    }
}

/// A replica (or shard) that fails on demand, freezes after a budget of
/// steps (an owner that died mid-operation), and counts what it is asked.
#[derive(Debug)]
pub struct Faulty<R: ?Sized = dyn Replica> {
    inner: Arc<R>,
    /// When set, every call fails with [`ReplicaError::Unavailable`].
    pub down: AtomicBool,
    /// When set, writes fail with [`ReplicaError::NoSpace`].
    pub full: AtomicBool,
    /// When set, writes and reads are refused with
    /// [`ReplicaError::Promised`]: the node still keeps a promise to the
    /// volume's last owner (it missed the takeover's fence flush).
    pub promised: AtomicBool,
    /// When set, every call waits (before reaching the replica) until it
    /// is cleared: a cut link, before the fabric's I/O timeout.
    pub hung: AtomicBool,
    /// When set, writes (logged or not, and write-zeroes) wait before
    /// reaching the replica until it is cleared, while every other call
    /// passes: a write still on its way when a flush overtakes it.
    pub held_writes: AtomicBool,
    /// Writes waiting on [`held_writes`](Self::held_writes).
    pub writes_held: AtomicU64,
    /// Reads served.
    pub reads: AtomicU64,
    /// Writes (and write-zeroes) served.
    pub writes: AtomicU64,
    /// Promises asked for.
    pub promises: AtomicU64,
    budget: OnceLock<Arc<AtomicU64>>,
    /// The link generation, as a [`crate::fabric::FabricReplica`] sees
    /// it: bumped by [`Faulty::restart`].
    generation: AtomicU64,
    /// The generation this handle trusts (0: the next one it meets).
    armed: AtomicU64,
}

impl Faulty<dyn Replica> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Replica>) -> Arc<Faulty> {
        Arc::new(Faulty::wrap(inner))
    }
}

impl Faulty<dyn Shard> {
    /// Wraps a shard.
    pub fn shard(inner: Arc<dyn Shard>) -> Arc<Faulty<dyn Shard>> {
        Arc::new(Faulty::wrap(inner))
    }
}

impl<R: ?Sized + Replica> Faulty<R> {
    fn wrap(inner: Arc<R>) -> Faulty<R> {
        Faulty {
            inner,
            down: AtomicBool::new(false),
            full: AtomicBool::new(false),
            promised: AtomicBool::new(false),
            hung: AtomicBool::new(false),
            held_writes: AtomicBool::new(false),
            writes_held: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            promises: AtomicU64::new(0),
            budget: OnceLock::new(),
            generation: AtomicU64::new(1),
            armed: AtomicU64::new(1),
        }
    }

    /// The node restarts, as its fabric link sees it: the connection is
    /// made again, and every call fails with
    /// [`ReplicaError::Reconnected`] (before reaching the replica) until
    /// the handle is re-armed or trusts the new generation. Its data stays
    /// (a RAM device loses nothing).
    pub fn restart(&self) {
        self.generation.fetch_add(1, SeqCst);
    }

    /// Shares `steps` with other replicas: every call takes one step
    /// before it reaches the replica and one after; when none are left
    /// the call never returns (before or after its effect), as if the
    /// owner died there.
    pub fn freeze_after(&self, steps: Arc<AtomicU64>) {
        _ = self.budget.set(steps);
    }

    async fn step(&self) {
        if let Some(b) = self.budget.get()
            && b.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    async fn enter(&self) -> Result<(), ReplicaError> {
        tokio::task::yield_now().await;
        self.step().await;
        while self.hung.load(SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        if self.down.load(SeqCst) {
            return Err(ReplicaError::Unavailable(format!("node {} is down (injected)", self.inner.node())));
        }
        let generation = self.generation.load(SeqCst);
        match self.armed.compare_exchange(0, generation, SeqCst, SeqCst) {
            Ok(_) => Ok(()),
            Err(armed) if armed == generation => Ok(()),
            Err(armed) => Err(ReplicaError::Reconnected {
                generation,
                reason: format!("node {}: generation {armed} -> {generation} (injected)", self.inner.node()),
            }),
        }
    }

    /// [`enter`](Self::enter) for a write: waits while writes are held.
    async fn enter_write(&self) -> Result<(), ReplicaError> {
        if self.held_writes.load(SeqCst) {
            self.writes_held.fetch_add(1, SeqCst);
            while self.held_writes.load(SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            self.writes_held.fetch_sub(1, SeqCst);
        }
        self.enter().await
    }

    async fn leave<T>(&self, r: Result<T, ReplicaError>) -> Result<T, ReplicaError> {
        self.step().await;
        r
    }
}

impl<R: ?Sized + Replica> Replica for Faulty<R> {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn rearm(&self) {
        self.armed.store(0, SeqCst);
        self.inner.rearm()
    }

    fn trust(&self, generation: u64) {
        self.armed.store(generation, SeqCst);
        self.inner.trust(generation)
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter_write().await?;
            if self.full.load(SeqCst) {
                return Err(ReplicaError::NoSpace);
            }
            if self.promised.load(SeqCst) {
                return Err(ReplicaError::Promised(std::time::Duration::from_millis(400)));
            }
            self.writes.fetch_add(1, SeqCst);
            self.leave(self.inner.write(epoch, lba, data, fua).await).await
        })
    }

    fn read(&self, epoch: u64, lba: u64, buf: IoBuf) -> ReplicaFuture<'_, IoBuf> {
        Box::pin(async move {
            self.enter().await?;
            if self.promised.load(SeqCst) {
                return Err(ReplicaError::Promised(std::time::Duration::from_millis(400)));
            }
            self.reads.fetch_add(1, SeqCst);
            self.leave(self.inner.read(epoch, lba, buf).await).await
        })
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter_write().await?;
            self.writes.fetch_add(1, SeqCst);
            self.leave(self.inner.write_zeroes(epoch, lba, blocks, deallocate).await).await
        })
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.flush(epoch).await).await
        })
    }

    fn promise(&self, epoch: u64, duration: std::time::Duration) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.promises.fetch_add(1, SeqCst);
            self.leave(self.inner.promise(epoch, duration).await).await
        })
    }

    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.save_note(epoch, note).await).await
        })
    }

    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.load_note(epoch).await).await
        })
    }
}

impl<R: ?Sized + Shard> Shard for Faulty<R> {
    fn write_logged(&self, epoch: u64, seq: u64, targets: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter_write().await?;
            if self.full.load(SeqCst) {
                return Err(ReplicaError::NoSpace);
            }
            self.writes.fetch_add(1, SeqCst);
            self.leave(self.inner.write_logged(epoch, seq, targets, lba, data).await).await
        })
    }

    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.committed(epoch).await).await
        })
    }

    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.commit(epoch, seq).await).await
        })
    }

    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.roll_back(epoch, after).await).await
        })
    }

    fn records(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, Vec<strata_block::UndoRecord>> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.records(epoch, after).await).await
        })
    }

    fn roll_back_only(&self, epoch: u64, undo: Vec<u64>, mark: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.roll_back_only(epoch, undo, mark).await).await
        })
    }

    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.leave(self.inner.discard_undo(epoch).await).await
        })
    }
}

/// What a [`MemShard`] keeps to undo.
#[derive(Debug, Default)]
struct Undo {
    /// (update, lba, the bytes it overwrote), oldest first.
    /// (seq, lba, old bytes, targets).
    records: Vec<(u64, u64, Bytes, u64)>,
    committed: u64,
}

/// A shard on a device in memory with its undo log beside it, behind an
/// epoch fence: the node side of [`Shard`] for tests. Each operation is
/// atomic (a RAM device does not tear).
pub struct MemShard {
    node: NodeId,
    device: Arc<dyn BlockDevice>,
    fence: Arc<EpochFence>,
    undo: Mutex<Undo>,
    notes: strata_block::MemNoteStore,
}

impl std::fmt::Debug for MemShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = self.undo();
        let records: Vec<(u64, u64)> = u.records.iter().map(|r| (r.0, r.1)).collect();
        f.debug_struct("MemShard")
            .field("node", &self.node)
            .field("committed", &u.committed)
            .field("records (seq, lba)", &records)
            .finish_non_exhaustive()
    }
}

impl MemShard {
    /// The shard of `node` on `device`.
    pub fn new(node: NodeId, device: Arc<dyn BlockDevice>, fence: Arc<EpochFence>) -> Arc<MemShard> {
        Arc::new(MemShard { node, device, fence, undo: Mutex::new(Undo::default()), notes: Default::default() })
    }

    fn undo(&self) -> std::sync::MutexGuard<'_, Undo> {
        self.undo.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raises the fence to `epoch`, as a node does when it reads the
    /// stored epoch.
    pub fn raise_fence(&self, epoch: u64) {
        self.fence.raise(epoch, None);
    }

    /// The sender every owner's commands come as (one per test: owners
    /// are told apart by epoch alone).
    const SENDER: strata_block::Sender = 1;

    /// Undo records kept.
    pub fn undo_records(&self) -> usize {
        self.undo().records.len()
    }

    async fn admit(&self, epoch: u64) -> Result<strata_block::FenceGuard, ReplicaError> {
        self.fence.admit(epoch, Self::SENDER).await.map_err(crate::replica::refused)
    }

    /// Puts back what the updates `undo` picks overwrote, newest first,
    /// forgets every record and raises the mark to `mark`.
    async fn undo_where(&self, undo: impl Fn(u64) -> bool, mark: u64) -> Result<u64, ReplicaError> {
        let records: Vec<(u64, u64, Bytes, u64)> = {
            let mut u = self.undo();
            u.committed = u.committed.max(mark);
            std::mem::take(&mut u.records)
        };
        let mut n = 0;
        for (seq, lba, old, _) in records.iter().rev() {
            if undo(*seq) {
                self.put(*lba, old).await?;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn put(&self, lba: u64, data: &[u8]) -> Result<(), ReplicaError> {
        let (_, r) = self.device.write(lba, IoBuf::from_slice(data), false).await;
        r.map_err(crate::replica::from_block)
    }
}

impl Replica for MemShard {
    fn node(&self) -> NodeId {
        self.node
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, _fua: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.put(lba, &data).await
        })
    }

    fn read(&self, epoch: u64, lba: u64, buf: IoBuf) -> ReplicaFuture<'_, IoBuf> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            let (buf, r) = self.device.read(lba, buf).await;
            r.map(|()| buf).map_err(crate::replica::from_block)
        })
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.device.write_zeroes(lba, blocks, deallocate).await.map_err(crate::replica::from_block)
        })
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            Ok(())
        })
    }

    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            strata_block::NoteStore::save(&self.notes, note).await.map_err(crate::replica::from_block)
        })
    }

    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            strata_block::NoteStore::load(&self.notes).await.map_err(crate::replica::from_block)
        })
    }
}

impl Shard for MemShard {
    fn write_logged(&self, epoch: u64, seq: u64, targets: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            let (old, r) = self.device.read(lba, IoBuf::zeroed(data.len())).await;
            r.map_err(crate::replica::from_block)?;
            self.undo().records.push((seq, lba, Bytes::copy_from_slice(&old), targets));
            self.put(lba, &data).await
        })
    }

    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            Ok(self.undo().committed)
        })
    }

    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            let mut u = self.undo();
            u.records.retain(|r| r.0 > seq);
            u.committed = u.committed.max(seq);
            Ok(())
        })
    }

    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo_where(|seq| seq > after, after).await
        })
    }

    fn records(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, Vec<strata_block::UndoRecord>> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            let bs = u64::from(self.device.geometry().block_size);
            let u = self.undo();
            Ok(u.records
                .iter()
                .filter(|r| r.0 > after)
                .map(|r| strata_block::UndoRecord { seq: r.0, lba: r.1, blocks: r.2.len() as u64 / bs, targets: r.3 })
                .collect())
        })
    }

    fn roll_back_only(&self, epoch: u64, undo: Vec<u64>, mark: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo_where(|seq| undo.contains(&seq), mark).await
        })
    }

    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo().records.clear();
            Ok(())
        })
    }
}

/// A RAM device that loses, at [`Volatile::crash`], every block written
/// since its last flush: a node killed -9 over a thin store, whose new
/// mappings are durable only at a flush (strata-store's behaviour).
pub struct Volatile {
    now: MemDevice,
    durable: MemDevice,
    unflushed: Mutex<BTreeSet<u64>>,
}

impl std::fmt::Debug for Volatile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volatile").field("unflushed", &self.unflushed()).finish_non_exhaustive()
    }
}

impl Volatile {
    /// A device of `blocks` blocks of `block_size` bytes, all zeros.
    pub fn new(block_size: u32, blocks: u64) -> Arc<Volatile> {
        Arc::new(Volatile {
            now: MemDevice::new(block_size, blocks),
            durable: MemDevice::new(block_size, blocks),
            unflushed: Mutex::new(BTreeSet::new()),
        })
    }

    fn touch(&self, lba: u64, blocks: u64) {
        self.unflushed.lock().unwrap_or_else(|e| e.into_inner()).extend(lba..lba + blocks);
    }

    /// Blocks written since the last flush.
    pub fn unflushed(&self) -> usize {
        self.unflushed.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Copies each unflushed block from `from` to `to`, and forgets it.
    async fn settle(&self, from: &MemDevice, to: &MemDevice) -> Result<(), BlockError> {
        let blocks = std::mem::take(&mut *self.unflushed.lock().unwrap_or_else(|e| e.into_inner()));
        let bs = from.geometry().block_size as usize;
        for lba in blocks {
            let (b, r) = from.read(lba, IoBuf::zeroed(bs)).await;
            r?;
            to.write(lba, b, false).await.1?;
        }
        Ok(())
    }

    /// The restart after a kill -9: every unflushed block reads as it did
    /// at the last flush.
    pub async fn crash(&self) {
        // RAM to RAM within range: cannot fail.
        let _ = self.settle(&self.durable, &self.now).await;
    }
}

impl BlockDevice for Volatile {
    fn geometry(&self) -> Geometry {
        self.now.geometry()
    }
    fn usage(&self) -> DeviceUsage {
        self.now.usage()
    }
    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.now.read(lba, buf)
    }
    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.touch(lba, (buf.len() / self.now.geometry().block_size as usize) as u64);
        Box::pin(async move {
            let (buf, r) = self.now.write(lba, buf, false).await;
            if r.is_ok() && fua {
                return (buf, self.settle(&self.now, &self.durable).await);
            }
            (buf, r)
        })
    }
    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.touch(lba, blocks);
        self.now.write_zeroes(lba, blocks, deallocate)
    }
    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        for &(lba, blocks) in &ranges {
            self.touch(lba, blocks);
        }
        self.now.deallocate(ranges)
    }
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.settle(&self.now, &self.durable))
    }
}
