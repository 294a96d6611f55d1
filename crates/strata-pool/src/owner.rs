//! What every protected volume's owner keeps, whatever the protection:
//! the in-sync set and its changes in the metadata store, the fence that
//! stops a deposed owner, the dirty-region log, the nodes being caught up,
//! and writes that run to the end after their callers left.
//!
//! [`crate::replicated::ReplicatedVolume`] and
//! [`crate::erasure::ErasureVolume`] are this core plus their own data
//! path.
//!
//! # Availability invariants
//!
//! - **Never below the minimum.** No membership change this owner makes
//!   leaves a chunk with fewer in-sync nodes than the protection needs to
//!   serve it (`min_in_sync`: 1 copy for `rep:N`, K shards for `ec:K+M`).
//!   When nodes fail so that dropping them would do that, the owner keeps
//!   them in the in-sync set, fails the I/O and stops serving the volume
//!   ([`Owner::give_up`]): the nodes' drives still hold every
//!   acknowledged write, and the next takeover, once enough of them are
//!   back, fences them, rolls back or repairs what was in flight (the
//!   dirty regions) and serves again. Ejecting them instead would leave
//!   the in-sync set below what any owner can serve, for good.
//! - **A node that restarts is refilled, not ejected.** A replica whose
//!   link reconnected ([`ReplicaError::Reconnected`]) may have lost
//!   writes it had not flushed, all of them in dirty regions: the owner
//!   marks the dirty regions missed for it (persisted before anything is
//!   sent to it again), trusts the new connection, and the node stays in
//!   sync, filling those regions like a node that joined them in a move.
//!
//! # Lock order
//!
//! `gate` (async RwLock: I/O shared, membership additions exclusive) →
//! `change` (async mutex: one metadata update at a time) → the sync
//! mutexes (`membership`, `catching_up`, `clean_marks`), never held across
//! an await.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use strata_block::{BlockError, DeviceUsage, Geometry, check_range};

use crate::control::{Control, ControlError, Membership};
use crate::drl::{DirtyRegionLog, NodeId};
use crate::layout::{Layout, Moving, short_group};
use crate::replica::{Replica, ReplicaError};
use crate::volume::{OpenError, VolumeStats};

/// An I/O error with a message.
pub(crate) fn io_error(msg: impl Into<String>) -> BlockError {
    BlockError::Io(std::io::Error::other(msg.into()))
}

/// What an owner that stopped (fenced by a newer owner, or without the
/// promises that keep one out) answers: a path error, so that a multipath
/// host sends the command to the node that serves the volume now rather
/// than fail it.
pub(crate) fn not_serving() -> BlockError {
    BlockError::PathUnavailable("this node no longer serves the volume".into())
}

/// True when every byte of `b` is zero (what a rebuild sends as a
/// deallocate, keeping the target thin).
pub(crate) fn is_zero(b: &[u8]) -> bool {
    let (head, words, tail) = {
        // SAFETY: every bit pattern is a valid u64; align_to only splits
        // the slice at the first and last aligned word.
        unsafe { b.align_to::<u64>() }
    };
    head.iter().all(|&x| x == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&x| x == 0)
}

/// The blocks of a write of `len` bytes at `lba` to a volume of
/// `geometry`: whole blocks ([`BlockError::BadBuffer`] otherwise), all
/// inside the volume.
pub(crate) fn write_blocks(geometry: Geometry, lba: u64, len: usize) -> Result<u64, BlockError> {
    let bs = u64::from(geometry.block_size);
    if !(len as u64).is_multiple_of(bs) {
        return Err(BlockError::BadBuffer { len, expected: len as u64 / bs * bs });
    }
    let blocks = len as u64 / bs;
    check_range(geometry, lba, blocks)?;
    Ok(blocks)
}

/// Starts repairing, on a task of its own, every region the last owner
/// of `vol` left dirty (held in the log until repaired, see
/// [`DirtyRegionLog::hold_for_repair`]), with `repair`; I/O to a region
/// not yet repaired repairs it first ([`Owner::repaired_before`]). So a
/// takeover serves at once, whatever the number of dirty regions. Once
/// all are repaired, cleans the log with `clean` (the volume's own clean
/// with no quiet time: what it takes for a region to leave the log
/// differs between replicas and shards). A region that fails is tried
/// again later, and by the first I/O there; the task ends when the volume
/// is dropped or fenced.
pub(crate) fn repair_in_background<V, R, F, Fut, C, CFut>(
    vol: &Arc<V>,
    owner: fn(&V) -> &Arc<Owner<R>>,
    repair: F,
    clean: C,
) where
    V: Send + Sync + 'static,
    R: ?Sized + Replica + 'static,
    F: Fn(Arc<V>, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BlockError>> + Send,
    C: FnOnce(Arc<V>) -> CFut + Send + 'static,
    CFut: Future<Output = Result<u64, BlockError>> + Send,
{
    let pending = owner(vol).drl.hold_for_repair();
    if pending.is_empty() {
        return;
    }
    /// Ends the repair, whichever way its task returns.
    struct Running<R: ?Sized>(std::sync::Weak<Owner<R>>);
    impl<R: ?Sized> Drop for Running<R> {
        fn drop(&mut self) {
            if let Some(o) = self.0.upgrade() {
                o.repair_running.store(false, Ordering::Release);
                o.repair_ended.notify_waiters();
            }
        }
    }
    owner(vol).repair_running.store(true, Ordering::Release);
    let running = Running(Arc::downgrade(owner(vol)));
    let weak = Arc::downgrade(vol);
    tokio::spawn(async move {
        let _running = running;
        let began = Instant::now();
        tracing::info!(regions = pending.len(), "serving; repairing the regions the last owner may have left unequal");
        let mut wait = Duration::from_millis(500);
        loop {
            let mut failed = 0u64;
            for r in pending.iter() {
                let Some(v) = weak.upgrade() else { return };
                if owner(&v).is_fenced() {
                    return;
                }
                if let Err(e) = owner(&v).repaired_before(r..r + 1, |r| repair(v.clone(), r)).await {
                    if owner(&v).is_fenced() {
                        return;
                    }
                    if failed == 0 {
                        tracing::warn!(region = r, error = %e, "a region the last owner left dirty could not be repaired; trying again later");
                    }
                    failed += 1;
                }
            }
            let Some(v) = weak.upgrade() else { return };
            if failed == 0 {
                if let Err(e) = clean(v).await {
                    tracing::warn!(error = %e, "cleaning the log after the repair failed; it stays dirty");
                }
                tracing::info!(regions = pending.len(), took = ?began.elapsed(), "the regions the last owner left dirty agree again");
                return;
            }
            drop(v);
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    });
}

/// The owner's state of one volume; `R` is what its nodes hold (a
/// replica, a shard).
pub(crate) struct Owner<R: ?Sized> {
    pub(crate) geometry: Geometry,
    pub(crate) local: NodeId,
    /// Every node that holds a chunk, by id; grows when a move adds one.
    replicas: RwLock<HashMap<NodeId, Arc<R>>>,
    /// Where the chunks live; replaced whole when a move switches.
    layout: RwLock<Arc<dyn Layout>>,
    /// The move in progress (see [`Owner::begin_move`]).
    moving: RwLock<Option<Arc<Moving>>>,
    /// True while `moving` is set: the data path checks this first.
    moving_flag: AtomicBool,
    membership: Mutex<Membership>,
    /// Stale nodes being caught up: they get every new write too.
    catching_up: Mutex<BTreeSet<NodeId>>,
    pub(crate) drl: Arc<DirtyRegionLog>,
    control: Arc<dyn Control>,
    pub(crate) gate: tokio::sync::RwLock<()>,
    change: tokio::sync::Mutex<()>,
    fenced: AtomicBool,
    /// Writes running on their own tasks.
    running: AtomicUsize,
    /// Marks of the log's write sequence taken by [`Owner::clean_cutoff`].
    clean_marks: Mutex<VecDeque<(Instant, u64, u64)>>,
    pub(crate) stats: VolumeStats,
    /// The node's limit on rebuild and move bandwidth, once set.
    pub(crate) throttle: std::sync::OnceLock<Arc<crate::throttle::Throttle>>,
    /// Bytes each node holds (the volume, or a shard of it).
    span: u64,
    /// Chunks of the layout in that span.
    chunks: u64,
    /// The fewest in-sync nodes a chunk may have (see the module docs).
    min_in_sync: usize,
    /// Set when the owner stopped serving because nodes failed that it
    /// could not drop without going below [`Owner::min_in_sync`].
    gave_up: AtomicBool,
    /// The log's [flush mark](crate::drl::DirtyRegionLog::flush_mark)
    /// taken before the last flush that every writable node completed: a
    /// region with no write since holds nothing a restart could have lost.
    flushed_seq: std::sync::atomic::AtomicU64,
    /// How long the promises this owner asks of its replicas last, once
    /// it asks for them ([`Owner::keep_promises`]).
    promise_for: std::sync::OnceLock<Duration>,
    /// Nanoseconds after `born` until which the promises of every other
    /// in-sync node hold, so that this owner may serve; `u64::MAX` when it
    /// asks for none.
    serve_until: std::sync::atomic::AtomicU64,
    born: Instant,
    /// Set when this owner gives the volume up: it asks for no promise
    /// again.
    promises_ended: AtomicBool,
    /// Set when a fill running now should give way (a move of the volume
    /// waits to be retargeted): the next region it would copy, it stops.
    interrupt: AtomicBool,
    /// Regions the last owner left dirty are repaired while this one
    /// serves, each once, by whichever of the background repair and the
    /// first I/O there comes first ([`Owner::repaired_before`]): one lock
    /// per slot of regions.
    repair_locks: Vec<tokio::sync::Mutex<()>>,
    /// Woken after every round of promises and when the owner stops:
    /// I/O that found the promises lapsed waits for the next round
    /// ([`Owner::serving`]).
    renewed: tokio::sync::Notify,
    /// Turns true when the owner is fenced ([`Owner::fenced_signal`]).
    fenced_tx: tokio::sync::watch::Sender<bool>,
    /// True while the background repair after the takeover runs.
    repair_running: AtomicBool,
    /// Wakes [`Owner::repair_ended`]'s waiters.
    repair_ended: tokio::sync::Notify,
}

/// Slots of [`Owner::repair_locks`].
const REPAIR_LOCKS: usize = 64;

impl<R: ?Sized + Replica + 'static> Owner<R> {
    /// The volume's I/O held off: waits for every operation in flight
    /// (logged when that takes long, see [`crate::slow`]).
    pub(crate) async fn all_io(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        crate::slow::logged_if_slow("holding the volume's I/O off (waiting for what is in flight)", self.gate.write())
            .await
    }

    /// One change of the membership, the move or the log's stale nodes at
    /// a time (logged when the wait takes long).
    async fn one_change(&self) -> tokio::sync::MutexGuard<'_, ()> {
        crate::slow::logged_if_slow("waiting for the volume's change in progress", self.change.lock()).await
    }

    /// The core of a volume just taken over at `membership`; `span` is
    /// the bytes each node holds (the volume, or a shard of it), and no
    /// chunk may be left with fewer than `min_in_sync` in-sync nodes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        geometry: Geometry,
        local: NodeId,
        layout: Arc<dyn Layout>,
        replicas: Vec<Arc<R>>,
        membership: Membership,
        drl: Arc<DirtyRegionLog>,
        control: Arc<dyn Control>,
        span: u64,
        min_in_sync: usize,
        moving: Option<Moving>,
    ) -> Owner<R> {
        let chunks = span.div_ceil(layout.chunk_bytes().max(1));
        Owner {
            geometry,
            local,
            replicas: RwLock::new(replicas.into_iter().map(|r| (r.node(), r)).collect()),
            layout: RwLock::new(layout),
            moving_flag: AtomicBool::new(moving.is_some()),
            moving: RwLock::new(moving.map(Arc::new)),
            membership: Mutex::new(membership),
            catching_up: Mutex::new(BTreeSet::new()),
            drl,
            control,
            gate: tokio::sync::RwLock::new(()),
            change: tokio::sync::Mutex::new(()),
            fenced: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            clean_marks: Mutex::new(VecDeque::new()),
            stats: VolumeStats::default(),
            throttle: std::sync::OnceLock::new(),
            span,
            chunks,
            min_in_sync: min_in_sync.max(1),
            gave_up: AtomicBool::new(false),
            flushed_seq: std::sync::atomic::AtomicU64::new(0),
            promise_for: std::sync::OnceLock::new(),
            serve_until: std::sync::atomic::AtomicU64::new(u64::MAX),
            born: Instant::now(),
            promises_ended: AtomicBool::new(false),
            interrupt: AtomicBool::new(false),
            repair_locks: (0..REPAIR_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
            renewed: tokio::sync::Notify::new(),
            fenced_tx: tokio::sync::watch::Sender::new(false),
            repair_running: AtomicBool::new(false),
            repair_ended: tokio::sync::Notify::new(),
        }
    }

    /// Waits until the background repair after the takeover ended
    /// ([`repair_in_background`]): every region the last owner left dirty
    /// agrees again and the log is clean of them, or the owner is fenced.
    pub(crate) async fn repair_ended(&self) {
        loop {
            let ended = self.repair_ended.notified();
            if !self.repair_running.load(Ordering::Acquire) {
                return;
            }
            ended.await;
        }
    }

    /// Repairs (with `repair`) every region of `regions` that still waits
    /// for its repair after the takeover, before the caller touches it:
    /// a host never reads a block of a region its in-sync nodes may not
    /// agree on, so a block once read cannot flip when the node reads
    /// come from changes. Costs one atomic load once every region is
    /// repaired.
    ///
    /// A dropped caller leaves its region waiting: the next one repairs
    /// it again, whole.
    pub(crate) async fn repaired_before<F, Fut>(
        &self,
        regions: std::ops::Range<u64>,
        repair: F,
    ) -> Result<(), BlockError>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<(), BlockError>>,
    {
        if self.drl.unrepaired() == 0 {
            return Ok(());
        }
        for r in regions {
            if !self.drl.needs_repair(r) {
                continue;
            }
            let _one = self.repair_locks[(r % REPAIR_LOCKS as u64) as usize].lock().await;
            if self.drl.needs_repair(r) {
                repair(r).await?;
                self.drl.repaired(r);
            }
        }
        Ok(())
    }

    fn since_born(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// True while this owner may serve by its replicas' promises (always,
    /// when it asks for none).
    pub(crate) fn promised(&self) -> bool {
        let until = self.serve_until.load(Ordering::Acquire);
        until == u64::MAX || self.since_born() < until
    }

    /// Asks every writable node for a promise of `duration` at the current
    /// epoch ([`Replica::promise`]), and, when every other in-sync node
    /// gave one, lets this owner serve until `duration` after the requests
    /// left (by then each replica, which counts from when it got one, may
    /// let a newer owner in). A node that fails leaves the in-sync set (it
    /// needs the metadata store; while that is out of reach the owner can
    /// only stop, which it does when its last promises run out); one that
    /// restarted is refilled. Returns true when the promises hold.
    ///
    /// # Errors
    ///
    /// When the owner is fenced (a node has seen a newer owner).
    pub(crate) async fn renew_promises(self: &Arc<Self>, duration: Duration) -> Result<bool, BlockError> {
        let held = self.renew_promises_once(duration).await;
        self.renewed.notify_waiters();
        held
    }

    async fn renew_promises_once(self: &Arc<Self>, duration: Duration) -> Result<bool, BlockError> {
        if self.is_fenced() || self.promises_ended.load(Ordering::Acquire) {
            return Err(BlockError::Gone);
        }
        let sent = self.since_born();
        let m = self.membership().clone();
        let nodes: Vec<NodeId> = self.writable().into_iter().collect();
        let wait = duration / 2;
        let results = join_all(nodes.iter().map(|&n| async move {
            let Some(r) = self.replica(n) else { return Err(ReplicaError::Unavailable(format!("node {n} unknown"))) };
            match tokio::time::timeout(wait, r.promise(m.epoch, duration)).await {
                Ok(r) => r,
                Err(_) => Err(ReplicaError::Unavailable(format!("node {n} did not answer a promise in {wait:?}"))),
            }
        }))
        .await;
        let needed = |n: NodeId| n != self.local && m.in_sync.contains(&n);
        let (mut held, mut failed, mut refused) = (true, Vec::new(), false);
        for (&n, r) in nodes.iter().zip(results) {
            match r {
                Ok(()) => {}
                Err(ReplicaError::Stale(_)) => refused = true,
                Err(ReplicaError::Reconnected { generation, .. }) => {
                    self.restarted(n, generation, 0..0).await?;
                    held &= !needed(n);
                }
                Err(e) => {
                    if needed(n) {
                        tracing::warn!(node = %n, error = %e, "a node did not give its promise");
                        failed.push(n);
                    }
                }
            }
        }
        if refused {
            // Deposed, unless this owner raised the epoch itself meanwhile.
            self.refused(m.epoch).await?;
            return Ok(false);
        }
        // A node that gave no promise no longer counts once it is out of
        // the in-sync set: the promises of the others, given to this same
        // holder, still hold at the epoch that took it out. Serving on
        // them at once leaves no gap in which hosts see Namespace Not
        // Ready while a dead node's promise times out.
        if !failed.is_empty()
            && let Err(e) = self.leave(&failed, 0..0).await
        {
            tracing::warn!(nodes = ?failed, error = %e, "cannot take the nodes that gave no promise out of the in-sync set");
            held = false;
        }
        if held {
            let until = sent.saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            self.serve_until.fetch_max(until.min(u64::MAX - 1), Ordering::AcqRel);
        }
        Ok(held)
    }

    /// Asks the fill running now (a resync, a rebuild) to stop at its next
    /// region, so that a move waiting behind it can be retargeted; what it
    /// has not copied stays missed and is copied afterwards.
    pub(crate) fn interrupt_fill(&self) {
        self.interrupt.store(true, Ordering::Release);
    }

    /// Fails when a fill was asked to give way (once per ask).
    pub(crate) fn check_interrupt(&self) -> Result<(), BlockError> {
        if self.interrupt.swap(false, Ordering::AcqRel) {
            return Err(io_error("the fill gave way to a new placement of the volume"));
        }
        Ok(())
    }

    /// Gives the volume up: stops serving, and has every writable node end
    /// the promise it gave this owner, so that the next owner need not
    /// wait for it (a handover).
    pub(crate) async fn end_promises(&self) {
        self.promises_ended.store(true, Ordering::Release);
        self.serve_until.store(0, Ordering::Release);
        self.renewed.notify_waiters();
        let epoch = self.membership().epoch;
        let nodes: Vec<NodeId> = self.writable().into_iter().collect();
        join_all(nodes.iter().filter_map(|&n| self.replica(n)).map(|r| async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), r.promise(epoch, Duration::ZERO)).await;
        }))
        .await;
    }

    /// From now on this owner serves only while its replicas' promises of
    /// `duration` hold: asks for them at once (waiting for the answer) and
    /// then every third of `duration` on a task of its own, until the
    /// owner is fenced or dropped.
    pub(crate) async fn keep_promises(self: &Arc<Self>, duration: Duration) {
        if self.promise_for.set(duration).is_err() {
            return;
        }
        self.serve_until.store(0, Ordering::Release);
        if let Err(e) = self.renew_promises(duration).await {
            tracing::warn!(error = %e, "the first promises of the volume's replicas");
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(duration / 3).await;
                let Some(owner) = weak.upgrade() else { return };
                if owner.promises_ended.load(Ordering::Acquire) {
                    return;
                }
                match owner.renew_promises(duration).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!("the volume's replicas did not all renew their promises"),
                    Err(_) => return, // fenced: nothing more to serve
                }
            }
        });
    }

    /// The first chunk group (its nodes) that `in_sync` leaves with fewer
    /// than the minimum of in-sync nodes, if any.
    pub(crate) fn short_of(&self, in_sync: &BTreeSet<NodeId>) -> Option<Vec<NodeId>> {
        short_group(&*self.layout(), self.chunks, in_sync, self.min_in_sync)
    }

    /// The first region left with fewer than the minimum of readable
    /// nodes (in `in_sync`, not missing it) if `also` (a node and regions)
    /// were missed too, with its chunk's nodes. Only regions some node
    /// misses can fall short once [`Owner::short_of`] holds.
    pub(crate) fn short_region(
        &self,
        in_sync: &BTreeSet<NodeId>,
        also: Option<(NodeId, &crate::RegionSet)>,
    ) -> Option<(u64, Vec<NodeId>)> {
        let missed = self.drl.state().missed;
        let misses = |n: NodeId, r: u64| {
            missed.get(&n).is_some_and(|s| s.contains(r)) || also.is_some_and(|(a, s)| a == n && s.contains(r))
        };
        let mut candidates: BTreeSet<u64> =
            missed.iter().filter(|(n, _)| in_sync.contains(n)).flat_map(|(_, s)| s.iter()).collect();
        if let Some((_, s)) = also {
            candidates.extend(s.iter());
        }
        let (layout, regions) = (self.layout(), self.drl.regions());
        let chunk_bytes = layout.chunk_bytes().max(1);
        candidates.into_iter().find_map(|r| {
            let group = layout.replicas(regions.bytes_of(r, self.span).start / chunk_bytes);
            let readable = group.iter().filter(|&&n| in_sync.contains(&n) && !misses(n, r)).count();
            (readable < self.min_in_sync.min(group.len())).then_some((r, group))
        })
    }

    /// True once the owner stopped serving below the minimum (see
    /// [`Owner::give_up`]).
    pub(crate) fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Acquire)
    }

    /// Stops serving because dropping `failed` would leave `group` below
    /// the minimum: the nodes stay in sync, and the next takeover
    /// recovers the volume from their drives once enough are back.
    fn give_up(&self, failed: &[NodeId], group: &[NodeId]) -> BlockError {
        if !self.gave_up.swap(true, Ordering::AcqRel) {
            tracing::error!(
                nodes = ?failed,
                chunk_nodes = ?group,
                min_in_sync = self.min_in_sync,
                "nodes failed that cannot leave the in-sync set without leaving a chunk below the minimum: \
                 keeping them in sync and stopping the volume until enough of them are back"
            );
        }
        self.lose(&"too few in-sync nodes left to serve the volume")
    }

    pub(crate) fn membership(&self) -> MutexGuard<'_, Membership> {
        self.membership.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn catching_up(&self) -> MutexGuard<'_, BTreeSet<NodeId>> {
        self.catching_up.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// In-sync and catching-up nodes: those every write and flush goes to.
    pub(crate) fn writable(&self) -> BTreeSet<NodeId> {
        let mut nodes = self.membership().in_sync.clone();
        nodes.extend(self.catching_up().iter().copied());
        nodes
    }

    /// The nodes being caught up, each with the regions it still misses.
    pub(crate) fn resyncing(&self) -> Vec<(NodeId, u64)> {
        let nodes: Vec<NodeId> = self.catching_up().iter().copied().collect();
        nodes.into_iter().map(|n| (n, self.drl.missed(n).map_or(0, |s| s.len()))).collect()
    }

    pub(crate) fn bs(&self) -> u64 {
        u64::from(self.geometry.block_size)
    }

    /// Ok while this owner may serve: not fenced, and every other in-sync
    /// node's promise holds. Without the promises a newer owner may be
    /// serving already, so nothing may be served; but a round of them may
    /// be on its way (one that had to take a silent node out of the
    /// in-sync set first, or one that found a node reconnected), so the
    /// caller waits for the rounds of up to one promise's length before
    /// it is refused: hosts see a pause, not a path error, when
    /// a replica dies.
    pub(crate) async fn serving(&self) -> Result<(), BlockError> {
        if !self.fenced.load(Ordering::Acquire) && self.promised() {
            return Ok(());
        }
        let Some(&wait) = self.promise_for.get() else { return Err(not_serving()) };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let renewed = self.renewed.notified();
            tokio::pin!(renewed);
            renewed.as_mut().enable();
            if self.fenced.load(Ordering::Acquire) || self.promises_ended.load(Ordering::Acquire) {
                return Err(not_serving());
            }
            if self.promised() {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, renewed).await.is_err() {
                return Err(not_serving());
            }
        }
    }

    /// Turns true when this owner is fenced; closed (an error on
    /// `changed`) when it is dropped unfenced.
    pub(crate) fn fenced_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.fenced_tx.subscribe()
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    pub(crate) fn writes_running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// This owner lost the volume: stop serving it.
    pub(crate) fn lose(&self, why: &dyn std::fmt::Display) -> BlockError {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            tracing::warn!(%why, "volume fenced: this node no longer owns it; refusing I/O");
            self.renewed.notify_waiters();
            self.fenced_tx.send_replace(true);
        }
        not_serving()
    }

    /// The error a node's refusal of our epoch means: we are deposed.
    pub(crate) fn stale(&self, epoch: u64) -> BlockError {
        self.lose(&format!("a node refused epoch {epoch}"))
    }

    /// A node refused epoch `sent` as stale. That proves a newer owner
    /// only if no change of this owner's raised the epoch past `sent` (a
    /// node raises its fence to the stored epoch on its own, and an
    /// operation sent just before this owner took a failed node out can
    /// arrive after): waits for any change in progress, then compares.
    /// `Ok` means try again at the current epoch.
    pub(crate) async fn refused(&self, sent: u64) -> Result<(), BlockError> {
        let _one = self.one_change().await;
        if self.membership().epoch > sent { Ok(()) } else { Err(self.stale(sent)) }
    }

    /// The handle of `node`'s copy, if it holds one.
    pub(crate) fn replica(&self, node: NodeId) -> Option<Arc<R>> {
        self.replicas.read().unwrap_or_else(|e| e.into_inner()).get(&node).cloned()
    }

    /// Where the chunks live now.
    pub(crate) fn layout(&self) -> Arc<dyn Layout> {
        self.layout.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True when `node` may answer reads of `regions`: it is in sync and
    /// holds every write there. A node that joined a chunk in a move is
    /// in sync but misses that chunk's older writes until it is filled.
    pub(crate) fn readable(&self, m: &Membership, node: NodeId, regions: std::ops::Range<u64>) -> bool {
        m.in_sync.contains(&node) && !self.drl.misses(node, regions)
    }

    /// The membership as an I/O on `regions` sees it: in-sync nodes that
    /// miss some of them (being filled) count as catching up there: they
    /// take the writes and are never read.
    pub(crate) fn view(&self, regions: std::ops::Range<u64>) -> (Membership, BTreeSet<NodeId>) {
        let mut m = self.membership().clone();
        let mut catching = self.catching_up().clone();
        for n in self.drl.missing_among(&m.in_sync, regions) {
            m.in_sync.remove(&n);
            catching.insert(n);
        }
        (m, catching)
    }

    /// In-sync nodes still being filled with chunks they joined, each with
    /// the regions it misses.
    pub(crate) fn filling(&self) -> Vec<(NodeId, u64)> {
        let in_sync = self.membership().in_sync.clone();
        let missed = self.drl.state().missed;
        missed.into_iter().filter(|(n, s)| in_sync.contains(n) && !s.is_empty()).map(|(n, s)| (n, s.len())).collect()
    }

    /// The nodes that join `chunk` in the move in progress, each with the
    /// slot it takes (erasure coding) or its place in the next layout's
    /// list: they take every write of the chunk and are never read there
    /// before the switch. Empty when no move runs (one atomic load).
    pub(crate) fn mirrors(&self, chunk: u64) -> Vec<(usize, NodeId)> {
        if !self.moving_flag.load(Ordering::Acquire) {
            return Vec::new();
        }
        let Some(mv) = self.moving() else { return Vec::new() };
        let (now, next) = (self.layout().replicas(chunk), mv.next.replicas(chunk));
        next.into_iter()
            .enumerate()
            .filter(|(p, n)| if mv.positional { now.get(*p) != Some(n) } else { !now.contains(n) })
            .collect()
    }

    /// The move in progress, if any.
    pub(crate) fn moving(&self) -> Option<Arc<Moving>> {
        self.moving.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_moving(&self, mv: Option<Arc<Moving>>) {
        let mut m = self.moving.write().unwrap_or_else(|e| e.into_inner());
        self.moving_flag.store(mv.is_some(), Ordering::Release);
        *m = mv;
    }

    /// True when the move in progress can switch: every node that joins
    /// chunks is in sync and misses none of the regions it joins.
    pub(crate) fn move_filled(&self) -> bool {
        let Some(mv) = self.moving() else { return false };
        let in_sync = self.membership().in_sync.clone();
        mv.plan.joining.iter().all(|(n, regions)| {
            in_sync.contains(n) && self.drl.missed(*n).is_none_or(|m| regions.iter().all(|r| !m.contains(r)))
        })
    }

    /// Starts moving the volume to `mv.next` (or retargets a move in
    /// progress): the nodes that join chunks (`mv.plan.joining`) are
    /// marked missing them, persisted before the metadata store learns of
    /// the move; nodes new to the volume (`replicas`) enter the in-sync
    /// set. The volume stays placed by its current layout: every node that
    /// holds a chunk now keeps serving it, and stays in sync, until
    /// [`finish_move`](Self::finish_move) once the joining nodes are
    /// filled (no redundancy is given up for the move). I/O waits for the
    /// change.
    pub(crate) async fn begin_move(self: &Arc<Self>, mv: Moving, replicas: Vec<Arc<R>>) -> Result<(), BlockError> {
        // The fill that gave way to this move (if any) is over.
        self.interrupt.store(false, Ordering::Release);
        let this = self.clone();
        run_to_end(self, async move {
            // A node that joined a chunk (at the same slot) for the move
            // this one replaces has taken every write there since: what it
            // was filled with stands.
            let before = this.moving();
            let (regions, chunk_bytes) = (this.drl.regions(), this.layout().chunk_bytes().max(1));
            for (n, joins) in &mv.plan.joining {
                let fresh: crate::RegionSet = joins
                    .iter()
                    .filter(|&r| {
                        let chunk = regions.bytes_of(r, this.span).start / chunk_bytes;
                        let (now, next) = (this.layout().replicas(chunk), mv.next.replicas(chunk));
                        let was = before.as_ref().map(|b| b.next.replicas(chunk)).unwrap_or_default();
                        !next.iter().enumerate().any(|(p, m)| {
                            m == n && !now.contains(n) && if mv.positional { was.get(p) == Some(n) } else { was.contains(n) }
                        })
                    })
                    .collect();
                this.drl.mark_missing(*n, &fresh).await.map_err(|e| io_error(e.to_string()))?;
            }
            let _all = this.all_io().await;
            let _one = this.one_change().await;
            let current = this.membership().clone();
            // Nodes a retargeted move no longer needs, new to the volume
            // for the move it replaces, leave; every other in-sync node
            // stays.
            let now_holders: BTreeSet<NodeId> = self_holders(&*this.layout(), this.chunks);
            let mut in_sync: BTreeSet<NodeId> = current
                .in_sync
                .iter()
                .copied()
                .filter(|n| now_holders.contains(n) || mv.plan.holders.contains(n))
                .collect();
            {
                let mut held = this.replicas.write().unwrap_or_else(|e| e.into_inner());
                for r in replicas {
                    // A node new to the volume holds nothing yet: in sync
                    // for what it will be written, missing the rest. A
                    // handle this owner has already stays (it knows the
                    // connection that node's writes went over).
                    if let std::collections::hash_map::Entry::Vacant(e) = held.entry(r.node()) {
                        in_sync.insert(r.node());
                        e.insert(r);
                    }
                }
            }
            let m = match this.control.begin_move(&current, &mv.target, &in_sync).await {
                Ok(m) => m,
                Err(ControlError::NotOwner(why)) => return Err(this.lose(&why)),
                Err(e) => return Err(io_error(e.to_string())),
            };
            tracing::info!(map_epoch = mv.target.map_epoch, epoch = m.epoch, joining = ?mv.plan.joining.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                "moving the volume: the nodes joining chunks are filled while the current ones serve");
            *this.membership() = m;
            let gone: Vec<NodeId> = this
                .drl
                .state()
                .missed
                .keys()
                .copied()
                .filter(|n| !now_holders.contains(n) && !mv.plan.holders.contains(n))
                .collect();
            for n in gone {
                this.catching_up().remove(&n);
                this.drl.forget(n);
            }
            this.set_moving(Some(Arc::new(mv)));
            drop(_all);
            this.drl.sync().await.map_err(|e| io_error(e.to_string()))
        })
        .await
    }

    /// Ends the move in progress once every joining node is filled
    /// ([`move_filled`](Self::move_filled)): the volume is placed by the
    /// next layout, and nodes that hold nothing under it leave the
    /// in-sync set (their nodes free the space); nodes that keep some
    /// chunks free the ranges of those they left. Returns false (and does
    /// nothing) when there is no move or it is not filled yet. I/O waits
    /// for the switch.
    pub(crate) async fn finish_move(self: &Arc<Self>) -> Result<bool, BlockError> {
        let this = self.clone();
        run_to_end(self, async move {
            let _all = this.all_io().await;
            let _one = this.one_change().await;
            let Some(mv) = this.moving().filter(|_| this.move_filled()) else { return Ok(false) };
            let holders = &mv.plan.holders;
            let current = this.membership().clone();
            let in_sync: BTreeSet<NodeId> = current.in_sync.intersection(holders).copied().collect();
            if let Some(group) = short_group(&*mv.next, this.chunks, &in_sync, this.min_in_sync) {
                tracing::warn!(chunk_nodes = ?group, "not switching to the new placement: too few of its nodes in sync");
                return Ok(false);
            }
            let m = match this.control.relayout(&current, mv.target.map_epoch, &mv.target.slots, &in_sync).await {
                Ok(m) => m,
                Err(ControlError::NotOwner(why)) => return Err(this.lose(&why)),
                Err(e) => return Err(io_error(e.to_string())),
            };
            tracing::info!(map_epoch = mv.target.map_epoch, epoch = m.epoch, in_sync = ?m.in_sync,
                "volume moved to its new placement: every joining node is filled");
            let epoch = m.epoch;
            *this.membership() = m;
            *this.layout.write().unwrap_or_else(|e| e.into_inner()) = mv.next.clone();
            this.set_moving(None);
            let gone: Vec<NodeId> = this.drl.state().missed.keys().copied().filter(|n| !holders.contains(n)).collect();
            for n in gone {
                this.catching_up().remove(&n);
                this.drl.forget(n);
            }
            // Nodes that keep other chunks free the ones they left: nothing
            // reads or writes them there any more, and a later move that
            // brings a chunk back (under the change lock, held here) marks
            // it missing and fills it.
            drop(_all);
            let bs = u64::from(this.geometry.block_size);
            for (n, ranges) in &mv.plan.leaving {
                for range in ranges {
                    for r in this.drl.regions().touched(range.start, range.end - range.start) {
                        this.drl.copied(*n, r);
                    }
                }
                let Some(rep) = this.replica(*n) else { continue };
                for range in ranges {
                    let (lba, blocks) = (range.start / bs, (range.end - range.start) / bs);
                    if let Err(e) = rep.write_zeroes(epoch, lba, blocks, true).await {
                        tracing::warn!(node = %n, error = %e, "could not free the chunks a node left");
                        break;
                    }
                }
            }
            this.drl.sync().await.map_err(|e| io_error(e.to_string()))?;
            Ok(true)
        })
        .await
    }

    /// At open: a holder outside the in-sync set that the log does not
    /// list as stale misses every region the log holds dirty. The last
    /// owner took it out and died before its log said so (the save after
    /// a leave is what lists it, and no write was acknowledged without
    /// that save), so what it may lack is what was dirty then, all of it
    /// still dirty in the log. Listed, it is resynced like any stale node;
    /// unlisted, nothing would ever bring it back.
    pub(crate) async fn list_unlisted_stale(&self) -> Result<(), BlockError> {
        let in_sync = self.membership().in_sync.clone();
        let mut holders = self_holders(&*self.layout(), self.chunks);
        if let Some(mv) = self.moving() {
            holders.extend(mv.plan.holders.iter().copied());
        }
        let listed = self.drl.state().missed;
        for n in holders.into_iter().filter(|n| !in_sync.contains(n) && !listed.contains_key(n)) {
            tracing::warn!(node = %n, dirty = self.drl.dirty().len(),
                "a node out of the in-sync set that the log does not list as stale: it misses every dirty region");
            self.drl.mark_stale(n, 0..0).await.map_err(|e| io_error(e.to_string()))?;
        }
        Ok(())
    }

    /// Takes failed `nodes` out of the in-sync set and records what they
    /// missed (every dirty region, and `regions`).
    ///
    /// Runs to the end on a task of its own: once the store may have
    /// committed the change, this owner must learn its outcome, or its
    /// next change would carry a stale epoch and fence a healthy owner.
    pub(crate) async fn leave(
        self: &Arc<Self>,
        nodes: &[NodeId],
        regions: std::ops::Range<u64>,
    ) -> Result<(), BlockError> {
        let (this, nodes) = (self.clone(), nodes.to_vec());
        run_to_end(self, async move { this.leave_now(&nodes, regions).await }).await
    }

    async fn leave_now(&self, nodes: &[NodeId], regions: std::ops::Range<u64>) -> Result<(), BlockError> {
        let _one = self.one_change().await;
        let current = self.membership().clone();
        let leaving: Vec<NodeId> = nodes.iter().copied().filter(|n| current.in_sync.contains(n)).collect();
        if !leaving.is_empty() {
            let after: BTreeSet<NodeId> = current.in_sync.iter().copied().filter(|n| !leaving.contains(n)).collect();
            if let Some(group) = self.short_of(&after).or_else(|| self.short_region(&after, None).map(|(_, g)| g)) {
                return Err(self.give_up(&leaving, &group));
            }
            match self.control.leave(&current, &leaving).await {
                Ok(m) => {
                    tracing::warn!(nodes = ?leaving, epoch = m.epoch, "nodes left the in-sync set");
                    self.stats.replicas_dropped.fetch_add(leaving.len() as u64, Ordering::Relaxed);
                    *self.membership() = m;
                }
                Err(ControlError::NotOwner(why)) => return Err(self.lose(&why)),
                Err(e) => return Err(io_error(e.to_string())),
            }
        }
        for &n in nodes {
            self.catching_up().remove(&n);
            self.drl.mark_stale(n, regions.clone()).await.map_err(|e| io_error(e.to_string()))?;
        }
        Ok(())
    }

    /// `node`'s link reconnected at `generation` (it may have restarted):
    /// an in-sync node is marked missing every dirty region and
    /// `regions` (persisted), its new connection trusted, and it stays in
    /// sync, to be refilled; a node being caught up leaves, as for a
    /// failure (its resync starts again). The caller tries its operation
    /// again.
    ///
    /// Runs to the end on a task of its own, as `leave` does.
    pub(crate) async fn restarted(
        self: &Arc<Self>,
        node: NodeId,
        generation: u64,
        regions: std::ops::Range<u64>,
    ) -> Result<(), BlockError> {
        let this = self.clone();
        run_to_end(self, async move {
            let in_sync = this.membership().in_sync.contains(&node) && !this.catching_up().contains(&node);
            if !in_sync {
                return this.leave_now(&[node], regions).await;
            }
            let _one = this.one_change().await;
            // What it may have lost: the regions written since the last
            // flush it completed (every flush reaches every writable node),
            // and those of the operation it was sent.
            let flushed = this.flushed_seq.load(Ordering::Acquire);
            let mut lost: crate::RegionSet =
                this.drl.dirty().iter().filter(|&r| !this.drl.region_quiet_since(r, flushed)).collect();
            for r in regions {
                lost.insert(r);
            }
            let in_sync = this.membership().in_sync.clone();
            if let Some((_, group)) = this.short_region(&in_sync, Some((node, &lost))) {
                // Too few others hold what it may have lost. Its drive
                // holds every update up to the last commit (a commit
                // flushes it first, which is where its restart shows),
                // so it stays unmarked: the next takeover rolls back
                // what was in flight on every in-sync node, this one
                // included, and repairs the dirty regions.
                return Err(this.give_up(&[node], &group));
            }
            this.drl.mark_missing(node, &lost).await.map_err(|e| io_error(e.to_string()))?;
            if let Some(r) = this.replica(node) {
                r.trust(generation);
            }
            tracing::warn!(node = %node, generation, regions = lost.len(),
                "a node's link reconnected (it may have restarted): refilling the regions it may have lost");
            Ok(())
        })
        .await
    }

    /// Puts caught-up `node` back in the in-sync set (epoch bump). The
    /// caller holds the gate exclusively and has checked that the node
    /// misses nothing.
    pub(crate) async fn rejoin(&self, node: NodeId) -> Result<(), BlockError> {
        let _one = self.one_change().await;
        let current = self.membership().clone();
        match self.control.rejoin(&current, node).await {
            Ok(m) => {
                tracing::info!(node = %node, epoch = m.epoch, "node caught up and back in sync");
                *self.membership() = m;
            }
            Err(ControlError::NotOwner(why)) => return Err(self.lose(&why)),
            Err(e) => return Err(io_error(e.to_string())),
        }
        self.catching_up().remove(&node);
        self.drl.forget(node);
        self.drl.sync().await.map_err(|e| io_error(e.to_string()))
    }

    /// Ends the fill of in-sync `node` once it misses nothing: flushes it
    /// (what was copied is durable before the log says so) and saves the
    /// log without it. A region a write left it missing meanwhile keeps it
    /// filling.
    pub(crate) async fn fill_done(&self, node: NodeId) -> Result<(), BlockError> {
        let epoch = self.membership().epoch;
        let rep = self.replica(node).ok_or_else(|| io_error(format!("node {node} holds no chunk")))?;
        rep.flush(epoch).await.map_err(|e| io_error(format!("node {node} failed the flush after its fill: {e}")))?;
        if self.drl.missed(node).is_some_and(|s| s.is_empty()) && self.membership().in_sync.contains(&node) {
            self.drl.forget(node);
            tracing::info!(node = %node, "node filled with the chunks it joined");
        }
        self.drl.sync().await.map_err(|e| io_error(e.to_string()))
    }

    /// Runs `copy`, the catch-up of stale `node`, with the node taking
    /// every write from the start of it; if `copy` fails the node stops
    /// taking them (it stays stale, its missed regions recorded).
    pub(crate) async fn catch_up(
        &self,
        node: NodeId,
        copy: impl Future<Output = Result<(), BlockError>>,
    ) -> Result<(), BlockError> {
        {
            // Writes that began before see the node as stale and mark
            // what they write missed; those after send it the data.
            let _all = self.all_io().await;
            self.catching_up().insert(node);
        }
        let result = copy.await;
        if result.is_err() {
            self.catching_up().remove(&node);
        }
        result
    }

    /// True while `node` still takes every write during its copy: being
    /// caught up (`rejoin`: it was stale), else in sync (filling the
    /// chunks it joined in a move). False once a write failed on it.
    pub(crate) fn still_copying(&self, node: NodeId, rejoin: bool) -> bool {
        if rejoin { self.catching_up().contains(&node) } else { self.membership().in_sync.contains(&node) }
    }

    /// Ends the catch-up of stale `node` (`rep`) once every region it
    /// missed was copied and marked so: flushes it and the log, then,
    /// with the volume's I/O held off, puts it back in sync. False when a
    /// write left it missing regions meanwhile: copy again.
    pub(crate) async fn caught_up(&self, node: NodeId, rep: &R) -> Result<bool, BlockError> {
        let epoch = self.membership().epoch;
        rep.flush(epoch).await.map_err(|e| io_error(format!("node {node} failed the resync flush: {e}")))?;
        self.drl.sync().await.map_err(|e| io_error(e.to_string()))?;
        let _all = self.all_io().await;
        if self.drl.missed(node).is_some_and(|s| !s.is_empty()) {
            return Ok(false); // a write failed on it meanwhile, or raced
        }
        if !self.still_copying(node, true) {
            return Err(io_error(format!("node {node} failed a write during resync")));
        }
        self.rejoin(node).await?;
        Ok(true)
    }

    /// Checks, at open, that every chunk has the `min_in_sync` in-sync
    /// nodes it needs to be read (a replica; K shards), with none of them
    /// missing its regions.
    pub(crate) fn check_available(&self) -> Result<(), OpenError> {
        let chunks = self.span.div_ceil(self.layout().chunk_bytes());
        let m = self.membership().clone();
        let per_chunk = self.layout().chunk_bytes();
        for chunk in 0..chunks {
            let replicas = self.layout().replicas(chunk);
            let regions = self.drl.regions().touched(chunk * per_chunk, per_chunk);
            let readable = replicas.iter().filter(|&&n| self.readable(&m, n, regions.clone())).count();
            if readable < self.min_in_sync {
                let missing = self.drl.missing_among(&m.in_sync, regions.clone());
                let missing = replicas.iter().copied().filter(|n| missing.contains(n)).collect();
                let in_sync = m.in_sync.iter().copied().collect();
                return Err(OpenError::Unavailable {
                    chunk,
                    replicas,
                    readable,
                    needed: self.min_in_sync,
                    in_sync,
                    missing,
                });
            }
        }
        Ok(())
    }

    /// What the volume allocates, as its nodes last reported, and its
    /// size ([`BlockDevice::usage`](strata_block::BlockDevice::usage)).
    pub(crate) fn usage(&self) -> DeviceUsage {
        let allocated = self.stats.allocated_bytes.load(Ordering::Relaxed);
        DeviceUsage {
            provisioned_bytes: self.geometry.size_bytes(),
            allocated_bytes: allocated.min(self.geometry.size_bytes()),
        }
    }

    /// Waits for the rebuild bandwidth to allow `bytes` more.
    pub(crate) async fn pace(&self, bytes: u64) {
        if let Some(t) = self.throttle.get() {
            t.take(bytes).await;
        }
        self.stats.bytes_rebuilt.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Flushes every in-sync (and catching-up) node; failed ones leave,
    /// and one whose link reconnected is refilled and flushed again.
    pub(crate) async fn flush(self: &Arc<Self>) -> Result<(), BlockError> {
        loop {
            self.serving().await?;
            let seq = self.drl.flush_mark();
            let epoch = self.membership().epoch;
            let nodes: Vec<NodeId> = self.writable().into_iter().collect();
            let results = join_all(nodes.iter().map(|&n| async move {
                match self.replica(n) {
                    Some(r) => r.flush(epoch).await,
                    None => Err(ReplicaError::Unavailable(format!("node {n} unknown"))),
                }
            }))
            .await;
            if results.iter().any(|r| matches!(r, Err(ReplicaError::Stale(_)))) {
                self.refused(epoch).await?;
                continue;
            }
            // A replica that keeps a promise to the last owner lets this
            // (newer) one in once it ends: the fence flush of a takeover
            // waits it out, then goes again.
            if let Some(left) = results
                .iter()
                .filter_map(|r| match r {
                    Err(ReplicaError::Promised(left)) => Some(*left),
                    _ => None,
                })
                .max()
            {
                tracing::info!(?left, "a replica keeps a promise to the volume's last owner: waiting for it to end");
                tokio::time::sleep(left.min(strata_block::MAX_PROMISE) + Duration::from_millis(10)).await;
                continue;
            }
            let mut failed = Vec::new();
            let mut restarted = Vec::new();
            for (&n, r) in nodes.iter().zip(results) {
                match r {
                    Ok(()) => {}
                    Err(ReplicaError::Reconnected { generation, .. }) => restarted.push((n, generation)),
                    Err(e) => {
                        tracing::warn!(node = %n, error = %e, "node failed a flush");
                        failed.push(n);
                    }
                }
            }
            if !failed.is_empty() {
                // What they missed is the dirty set, which `leave` records.
                self.leave(&failed, 0..0).await?;
                if self.membership().in_sync.is_empty() {
                    return Err(io_error("every in-sync node failed the flush"));
                }
            }
            if restarted.is_empty() {
                // Every node still writable completed it.
                self.flushed_seq.fetch_max(seq, Ordering::AcqRel);
                return Ok(());
            }
            // What a restarted node may have lost is refilled; what it
            // took since must be flushed there too: again, on the new
            // connection.
            for (n, generation) in restarted {
                self.restarted(n, generation, 0..0).await?;
            }
        }
    }

    /// The log sequence before which a dirty region has been quiet for
    /// `quiet_for`, if there is one to clean.
    ///
    /// Each call takes a mark of the log's write sequence; a region is
    /// quiet for `quiet_for` when its last write came before the newest
    /// mark that old, so the delay is counted in calls as well as time.
    /// Each mark is the log's [flush mark](crate::drl::DirtyRegionLog::flush_mark)
    /// and what `also` returned just after it (the volume's own
    /// sequence, which its clean must also have reached); the cutoff is
    /// both.
    pub(crate) fn clean_cutoff(&self, quiet_for: Duration, also: impl FnOnce() -> u64) -> Option<(u64, u64)> {
        let now = Instant::now();
        let cutoff = {
            let mut marks = self.clean_marks.lock().unwrap_or_else(|e| e.into_inner());
            let seq = self.drl.flush_mark();
            marks.push_back((now, seq, also()));
            let mut cutoff = None;
            while let Some(&(at, seq, also)) = marks.front() {
                if now.duration_since(at) < quiet_for {
                    break;
                }
                cutoff = Some((seq, also));
                marks.pop_front();
            }
            cutoff
        };
        cutoff.filter(|&(seq, _)| self.drl.has_quiet_dirty(seq))
    }
}

impl<R: ?Sized + Replica + 'static> crate::drl::NoteSink for Owner<R> {
    fn save_note(&self, note: Vec<u8>) -> crate::drl::SaveFuture<'_> {
        Box::pin(async move {
            let epoch = self.membership().epoch;
            let nodes: Vec<NodeId> = self.writable().into_iter().collect();
            let results = join_all(nodes.iter().map(|&n| {
                let note = note.clone();
                async move {
                    match self.replica(n) {
                        Some(r) => r.save_note(epoch, note).await,
                        None => Err(ReplicaError::Unavailable(format!("node {n} unknown"))),
                    }
                }
            }))
            .await;
            for (n, r) in nodes.iter().zip(results) {
                r.map_err(|e| format!("node {n} did not keep the owner's note: {e}"))?;
            }
            Ok(())
        })
    }
}

/// `impl PoolVolume for $volume`, for a volume kind whose `inner` derefs
/// to an [`Owner`] held as `inner.owner`: the owner core's part, the same
/// for every kind, and the kind's own `clean`, `resync` and `check`
/// (its inherent methods of those names).
macro_rules! impl_pool_volume {
    ($volume:ty) => {
        impl crate::volume::PoolVolume for $volume {
            fn resyncing(&self) -> Vec<(NodeId, u64)> {
                self.inner.resyncing()
            }
            fn stats(&self) -> &VolumeStats {
                &self.inner.stats
            }
            fn drl(&self) -> &Arc<DirtyRegionLog> {
                &self.inner.drl
            }
            fn clean(&self, quiet_for: Duration) -> BlockFuture<'_, Result<u64, BlockError>> {
                Box::pin(<$volume>::clean(self, quiet_for))
            }
            fn resync(&self, node: NodeId) -> BlockFuture<'_, Result<(), BlockError>> {
                Box::pin(<$volume>::resync(self, node))
            }
            fn check<'a>(
                &'a self,
                repair: bool,
                progress: &'a CheckProgress,
            ) -> BlockFuture<'a, Result<CheckReport, BlockError>> {
                Box::pin(<$volume>::check(self, repair, progress))
            }
            fn filling(&self) -> Vec<(NodeId, u64)> {
                self.inner.filling()
            }
            fn set_throttle(&self, throttle: Arc<crate::throttle::Throttle>) {
                let _ = self.inner.throttle.set(throttle);
            }
            fn is_fenced(&self) -> bool {
                self.inner.is_fenced()
            }
            fn below_minimum(&self) -> bool {
                self.inner.gave_up()
            }
            fn moving_to(&self) -> Option<crate::layout::NextLayout> {
                self.inner.moving().map(|m| m.target.clone())
            }
            fn finish_move(&self) -> BlockFuture<'_, Result<bool, BlockError>> {
                Box::pin(self.inner.owner.finish_move())
            }
            fn keep_promises(&self, duration: Duration) -> BlockFuture<'_, ()> {
                Box::pin(self.inner.owner.keep_promises(duration))
            }
            fn promised(&self) -> bool {
                self.inner.owner.promised()
            }
            fn end_promises(&self) -> BlockFuture<'_, ()> {
                Box::pin(self.inner.owner.end_promises())
            }
            fn interrupt_fill(&self) {
                self.inner.owner.interrupt_fill()
            }
            fn writes_running(&self) -> usize {
                self.inner.writes_running()
            }
            fn epoch(&self) -> u64 {
                self.inner.membership().epoch
            }
            fn note_sink(&self) -> std::sync::Weak<dyn crate::drl::NoteSink> {
                let owner: Arc<dyn crate::drl::NoteSink> = self.inner.owner.clone();
                Arc::downgrade(&owner)
            }
            fn unrepaired(&self) -> u64 {
                self.inner.drl.unrepaired()
            }
            fn repair_ended(&self) -> BlockFuture<'_, ()> {
                Box::pin(self.inner.owner.repair_ended())
            }
            fn fenced_signal(&self) -> tokio::sync::watch::Receiver<bool> {
                self.inner.owner.fenced_signal()
            }
        }
    };
}
pub(crate) use impl_pool_volume;

/// The inherent accessors every volume kind offers, inside its `impl`
/// block (its `inner` derefs to an [`Owner`]).
macro_rules! owner_accessors {
    () => {
        /// The current membership.
        pub fn membership(&self) -> Membership {
            self.inner.membership().clone()
        }

        /// The volume's counters.
        pub fn stats(&self) -> &VolumeStats {
            &self.inner.stats
        }

        /// The dirty-region log.
        pub fn drl(&self) -> &Arc<DirtyRegionLog> {
            &self.inner.drl
        }

        /// Writes, write-zeroes and deallocates still running, including
        /// those whose callers left.
        pub fn writes_running(&self) -> usize {
            self.inner.writes_running()
        }

        /// True once this owner has been fenced.
        pub fn is_fenced(&self) -> bool {
            self.inner.is_fenced()
        }

        /// The stale nodes being caught up (replicas copied back, shards
        /// rebuilt), each with the regions it still misses.
        pub fn resyncing(&self) -> Vec<(NodeId, u64)> {
            self.inner.resyncing()
        }
    };
}
pub(crate) use owner_accessors;

/// Every node that holds one of the first `chunks` chunks of `layout`.
fn self_holders(layout: &dyn Layout, chunks: u64) -> BTreeSet<NodeId> {
    layout.groups(chunks).into_iter().flatten().collect()
}

/// Runs a change on a task of its own, counted in `running` until it ends,
/// and waits for it; the caller may leave, the change goes on.
pub(crate) async fn run_to_end<R: ?Sized + Send + Sync + 'static, T: Send + 'static>(
    owner: &Arc<Owner<R>>,
    work: impl Future<Output = Result<T, BlockError>> + Send + 'static,
) -> Result<T, BlockError> {
    struct Running<R: ?Sized>(Arc<Owner<R>>);
    impl<R: ?Sized> Drop for Running<R> {
        fn drop(&mut self) {
            self.0.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
    owner.running.fetch_add(1, Ordering::AcqRel);
    let running = Running(owner.clone());
    let task = tokio::spawn(async move {
        let _running = running;
        work.await
    });
    task.await.unwrap_or_else(|e| Err(io_error(format!("write task failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::is_zero;

    #[test]
    fn is_zero_sees_a_set_byte_anywhere_at_any_alignment() {
        let buf = vec![0u8; 4096 + 16];
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 63, 4096] {
                let s = &buf[start..start + len];
                assert!(is_zero(s));
                for at in [0, len / 2, len.saturating_sub(1)].into_iter().filter(|&at| at < len) {
                    let mut v = s.to_vec();
                    v[at] = 1;
                    assert!(!is_zero(&v), "start {start} len {len} byte {at}");
                }
            }
        }
    }
}
