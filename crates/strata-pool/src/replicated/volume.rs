//! [`ReplicatedVolume`]: the volume, its data path (writes fanned out to
//! every in-sync replica, reads from one), the repair of what the last
//! owner left dirty, and the resync and fill of nodes that missed writes.
//! What it guarantees is in the [module docs](super).

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, check_range};

use crate::check::{CheckProgress, CheckReport};
use crate::control::{Control, Membership};
use crate::drl::{DirtyRegionLog, NodeId};
use crate::layout::{Layout, Moving};
use crate::owner::{Owner, io_error, is_zero, run_to_end, write_blocks};
use crate::replica::{Replica, ReplicaError};
use crate::volume::{OpenError, VolumeStats};

pub(super) struct Inner {
    pub(super) owner: Arc<Owner<dyn Replica>>,
}

impl std::ops::Deref for Inner {
    type Target = Owner<dyn Replica>;
    fn deref(&self) -> &Owner<dyn Replica> {
        &self.owner
    }
}

/// A replicated volume served by its owner.
#[derive(Clone)]
pub struct ReplicatedVolume {
    pub(super) inner: Arc<Inner>,
}

impl Debug for ReplicatedVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedVolume")
            .field("geometry", &self.inner.geometry)
            .field("membership", &*self.inner.membership())
            .finish_non_exhaustive()
    }
}

/// What a volume needs to open.
pub struct VolumeParts {
    /// Block size and count.
    pub geometry: Geometry,
    /// This node.
    pub local: NodeId,
    /// Placement of the chunks.
    pub layout: Arc<dyn Layout>,
    /// Every node that holds a chunk, reachable or not.
    pub replicas: Vec<Arc<dyn Replica>>,
    /// The membership this owner took the volume over at.
    pub membership: Membership,
    /// The dirty-region log, as persisted.
    pub drl: Arc<DirtyRegionLog>,
    /// The metadata store.
    pub control: Arc<dyn Control>,
    /// The move in progress, as the metadata store records it (its nodes'
    /// handles among `replicas`).
    pub moving: Option<Moving>,
}

/// Tries a region copy makes while writes go on before it holds them off.
const COPY_TRIES_UNLOCKED: u32 = 8;

/// Regions a resync or fill copies onto a node between two flushes of it;
/// only flushed regions are marked copied.
const COPY_FLUSH_REGIONS: usize = 16;

/// An operation fanned out to replicas.
#[derive(Clone)]
enum Op {
    Write { data: Bytes, fua: bool },
    Zeroes { deallocate: bool },
}

/// The part of an I/O inside one chunk.
struct Segment {
    lba: u64,
    blocks: u64,
    chunk: u64,
}

impl Inner {
    /// See [`ReplicatedVolume::clean`].
    async fn clean(self: &Arc<Self>, quiet_for: Duration) -> Result<u64, BlockError> {
        let Some((seq, _)) = self.clean_cutoff(quiet_for, || 0) else { return Ok(0) };
        self.owner.flush().await?;
        self.drl.clean_flushed(seq).await.map_err(|e| io_error(e.to_string()))
    }

    fn segments(&self, lba: u64, blocks: u64) -> Vec<Segment> {
        let per_chunk = self.layout().chunk_bytes() / self.bs();
        let mut out = Vec::with_capacity(1);
        let (mut lba, end) = (lba, lba + blocks);
        while lba < end {
            let chunk = lba / per_chunk;
            let stop = ((chunk + 1) * per_chunk).min(end);
            out.push(Segment { lba, blocks: stop - lba, chunk });
            lba = stop;
        }
        out
    }

    fn regions(&self, lba: u64, blocks: u64) -> std::ops::Range<u64> {
        self.drl.regions().touched(lba * self.bs(), blocks * self.bs())
    }

    /// Runs `op` on every replica that must take it and settles the
    /// outcome. Runs to the end (see the module docs).
    async fn fan_out(self: Arc<Self>, lba: u64, blocks: u64, op: Op) -> Result<(), BlockError> {
        self.repaired_before(lba, blocks).await?;
        // Again at the new epoch when a replica refused the old one that
        // this owner raised itself meanwhile (see `settle`).
        while self.clone().fan_out_once(lba, blocks, op.clone()).await? {}
        Ok(())
    }

    /// One try of [`Inner::fan_out`]; true when it must be tried again.
    async fn fan_out_once(self: Arc<Self>, lba: u64, blocks: u64, op: Op) -> Result<bool, BlockError> {
        self.serving().await?;
        let _io = self.gate.read().await;
        let m = self.membership().clone();
        let catching = self.catching_up().clone();
        let segments = self.segments(lba, blocks);
        let mut stale = BTreeSet::new();
        let mut sends = Vec::new();
        for (i, s) in segments.iter().enumerate() {
            let nodes = self.layout().replicas(s.chunk);
            let regions = self.regions(s.lba, s.blocks);
            if !nodes.iter().any(|&n| self.readable(&m, n, regions.clone())) {
                return Err(io_error(format!("chunk {} has no in-sync replica (replicas {nodes:?})", s.chunk)));
            }
            // Nodes joining the chunk in a move take its writes too.
            let mirrors = self.mirrors(s.chunk).into_iter().map(|(_, n)| n);
            for n in nodes.into_iter().chain(mirrors) {
                if m.in_sync.contains(&n) || catching.contains(&n) {
                    sends.push((i, n));
                } else {
                    stale.insert(n);
                }
            }
        }
        let regions = self.regions(lba, blocks);
        let stale: Vec<NodeId> = stale.into_iter().collect();
        let _running = self.drl.begin(regions.clone(), &stale).await.map_err(|e| io_error(e.to_string()))?;

        let bs = self.bs();
        let results = join_all(sends.iter().map(|&(i, n)| {
            let s = &segments[i];
            let op = op.clone();
            let this = &self;
            async move {
                let Some(r) = this.replica(n) else {
                    return Err(ReplicaError::Unavailable(format!("node {n} is not a replica of this volume")));
                };
                match op {
                    Op::Write { data, fua } => {
                        let from = ((s.lba - lba) * bs) as usize;
                        let piece = data.slice(from..from + (s.blocks * bs) as usize);
                        r.write(m.epoch, s.lba, piece, fua).await
                    }
                    Op::Zeroes { deallocate } => r.write_zeroes(m.epoch, s.lba, s.blocks, deallocate).await,
                }
            }
        }))
        .await;
        self.settle(&segments, &sends, results, &m, regions).await
    }

    /// Decides what a fanned-out operation did: drops failed replicas,
    /// and fails the operation when some chunk lost every in-sync copy.
    async fn settle(
        self: &Arc<Self>,
        segments: &[Segment],
        sends: &[(usize, NodeId)],
        results: Vec<Result<(), ReplicaError>>,
        m: &Membership,
        regions: std::ops::Range<u64>,
    ) -> Result<bool, BlockError> {
        let mut ok = vec![false; segments.len()];
        let mut failed = BTreeSet::new();
        let mut restarted = Vec::new();
        let mut outcome = Ok(());
        let mut again = false;
        for (&(i, n), r) in sends.iter().zip(results) {
            match r {
                // Nothing was sent: the node is marked missing what it
                // may have lost below, and the write goes again (writes
                // are idempotent) on its new connection.
                Err(ReplicaError::Reconnected { generation, .. }) => restarted.push((n, generation)),
                // A node that misses older writes of the segment does not
                // make it safe.
                Ok(()) => ok[i] |= self.readable(m, n, self.regions(segments[i].lba, segments[i].blocks)),
                // Deposed, unless this owner raised the epoch itself
                // meanwhile (a node's fence follows the stored epoch):
                // then the write goes again, whole, at the new epoch.
                Err(ReplicaError::Stale(_)) => again = true,
                Err(e) if e.is_replica_fault() => {
                    tracing::warn!(node = %n, error = %e, "replica failed an I/O");
                    failed.insert(n);
                }
                Err(ReplicaError::NoSpace) => outcome = Err(BlockError::NoSpace),
                Err(e) => {
                    tracing::warn!(node = %n, error = %e, "a replica refused a write (the write fails)");
                    outcome = Err(io_error(e.to_string()));
                }
            }
        }
        if !failed.is_empty() {
            let failed: Vec<NodeId> = failed.into_iter().collect();
            self.owner.leave(&failed, regions.clone()).await?;
        }
        let resend = !restarted.is_empty();
        for (n, generation) in restarted {
            self.owner.restarted(n, generation, 0..0).await?;
        }
        if resend && !again {
            return Ok(true);
        }
        if again {
            self.owner.refused(m.epoch).await?;
            return Ok(true);
        }
        if let Some(i) = ok.iter().position(|&done| !done) {
            outcome?;
            return Err(io_error(format!("every in-sync replica of chunk {} failed the write", segments[i].chunk)));
        }
        outcome.map(|()| false)
    }

    /// Repairs, first, the regions of `blocks` blocks at `lba` that the
    /// last owner left dirty and that are not repaired yet.
    async fn repaired_before(self: &Arc<Self>, lba: u64, blocks: u64) -> Result<(), BlockError> {
        if self.drl.unrepaired() == 0 {
            return Ok(());
        }
        self.owner.repaired_before(self.regions(lba, blocks), |r| self.repair_region(r)).await
    }

    /// Makes the in-sync replicas agree on dirty region `r`: copies it
    /// from the replica reads use (so that what a host may have read
    /// stays) to the other in-sync ones, and to nodes joining its chunk in
    /// a move; a node that fails the copy leaves.
    pub(super) async fn repair_region(self: &Arc<Self>, r: u64) -> Result<(), BlockError> {
        let bs = self.bs();
        let first_lba = self.drl.regions().bytes_of(r, self.geometry.size_bytes()).start / bs;
        let chunk = first_lba * bs / self.layout().chunk_bytes();
        let order = {
            let m = self.membership();
            self.layout().replicas(chunk).into_iter().filter(|n| m.in_sync.contains(n)).collect::<Vec<_>>()
        };
        let source = self.read_order(chunk, r..r + 1).first().copied();
        // Nodes joining the chunk in a move hold what they were filled
        // with: they must agree too.
        let joined =
            self.mirrors(chunk).into_iter().map(|(_, n)| n).filter(|&n| self.readable(&self.membership(), n, r..r + 1));
        let targets: Vec<NodeId> = order.into_iter().chain(joined).filter(|&n| Some(n) != source).collect();
        if targets.is_empty() {
            return Ok(());
        }
        let failed = self.copy_region(r, &targets, false).await?;
        if !failed.is_empty() {
            self.owner.leave(&failed, r..r + 1).await?;
        }
        Ok(())
    }

    /// The replicas of `chunk` that may answer reads of `regions`, in the
    /// order reads try them: the local one first, then placement order.
    pub(super) fn read_order(&self, chunk: u64, regions: std::ops::Range<u64>) -> Vec<NodeId> {
        let m = self.membership().clone();
        let mut nodes: Vec<NodeId> =
            self.layout().replicas(chunk).into_iter().filter(|&n| self.readable(&m, n, regions.clone())).collect();
        if let Some(p) = nodes.iter().position(|&n| n == self.local) {
            nodes[..=p].rotate_right(1);
        }
        nodes
    }

    /// Reads `buf.len()` bytes at `lba` within one chunk from an in-sync
    /// replica, dropping replicas that fail and trying the next.
    async fn read_segment(self: &Arc<Self>, chunk: u64, lba: u64, mut buf: IoBuf) -> Result<IoBuf, BlockError> {
        loop {
            self.serving().await?;
            let (epoch, local_in_sync) = {
                let m = self.membership();
                (m.epoch, m.in_sync.contains(&self.local))
            };
            let regions = self.regions(lba, buf.len() as u64 / self.bs());
            // The common case, without building the read order.
            let node = if local_in_sync
                && self.layout().holds(chunk, self.local)
                && !self.drl.misses(self.local, regions.clone())
            {
                self.local
            } else if let Some(&n) = self.read_order(chunk, regions).first() {
                n
            } else {
                return Err(io_error(format!("chunk {chunk} has no in-sync replica")));
            };
            let Some(r) = self.replica(node) else { return Err(io_error(format!("node {node} unknown"))) };
            let len = buf.len();
            match r.read(epoch, lba, buf).await {
                Ok(b) => return Ok(b),
                Err(ReplicaError::Stale(_)) => {
                    // Try again at the current epoch, unless deposed.
                    self.owner.refused(epoch).await?;
                    buf = IoBuf::recycled(len);
                }
                Err(ReplicaError::Reconnected { generation, .. }) => {
                    // Read elsewhere wherever it may have lost writes.
                    self.owner.restarted(node, generation, 0..0).await?;
                    buf = IoBuf::recycled(len);
                }
                Err(e) if e.is_replica_fault() => {
                    tracing::warn!(node = %node, error = %e, "replica failed a read; trying another");
                    let blocks = len as u64 / self.bs();
                    self.owner.leave(&[node], self.regions(lba, blocks)).await?;
                    buf = IoBuf::recycled(len);
                }
                Err(e) => return Err(io_error(e.to_string())),
            }
        }
    }

    async fn read(self: &Arc<Self>, lba: u64, mut buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let bs = self.bs();
        let blocks = buf.len() as u64 / bs;
        if let Err(e) = check_range(self.geometry, lba, blocks) {
            return (buf, Err(e));
        }
        if let Err(e) = self.repaired_before(lba, blocks).await {
            return (buf, Err(e));
        }
        let per_chunk = self.layout().chunk_bytes() / bs;
        if blocks > 0 && lba / per_chunk == (lba + blocks - 1) / per_chunk {
            let len = buf.len();
            return match self.read_segment(lba / per_chunk, lba, buf).await {
                Ok(b) => (b, Ok(())),
                Err(e) => (IoBuf::zeroed(len), Err(e)),
            };
        }
        let segments = self.segments(lba, blocks);
        for s in &segments {
            let piece = IoBuf::recycled((s.blocks * bs) as usize);
            match self.read_segment(s.chunk, s.lba, piece).await {
                Ok(p) => {
                    let at = ((s.lba - lba) * bs) as usize;
                    buf.as_mut_slice()[at..at + p.len()].copy_from_slice(&p);
                }
                Err(e) => return (buf, Err(e)),
            }
        }
        (buf, Ok(()))
    }

    /// Waits until no write to region `r` runs, and returns the write
    /// sequence then (to learn afterwards whether one started), with the
    /// volume's I/O held off when `exclusive` or after a few `tries`:
    /// writes that keep racing a copy or a check would starve it.
    pub(super) async fn quiet(
        &self,
        r: u64,
        tries: &mut u32,
        exclusive: bool,
    ) -> Result<(Option<tokio::sync::RwLockWriteGuard<'_, ()>>, u64), BlockError> {
        loop {
            *tries += 1;
            let held = if exclusive || *tries > COPY_TRIES_UNLOCKED { Some(self.all_io().await) } else { None };
            self.serving().await?;
            let seq = self.drl.sequence();
            if self.drl.region_quiet_since(r, seq) {
                return Ok((held, seq));
            }
            drop(held);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Copies region `r` from an in-sync replica to `targets`, retrying
    /// until no write raced the copy. Returns the targets that failed.
    /// A `paced` copy waits for the node's rebuild bandwidth.
    async fn copy_region(self: &Arc<Self>, r: u64, targets: &[NodeId], paced: bool) -> Result<Vec<NodeId>, BlockError> {
        let bs = self.bs();
        let size = self.geometry.size_bytes();
        let bytes = self.drl.regions().bytes_of(r, size);
        let (first, end) = (bytes.start / bs, bytes.end / bs);
        let chunk = first * bs / self.layout().chunk_bytes();
        const PIECE: u64 = 1 << 20;
        let mut tries = 0u32;
        'again: loop {
            let (_quiet, seq) = self.quiet(r, &mut tries, false).await?;
            let epoch = self.membership().epoch;
            let mut failed = Vec::new();
            let mut lba = first;
            while lba < end {
                let n = (PIECE / bs).min(end - lba);
                let data = self.read_segment(chunk, lba, IoBuf::recycled((n * bs) as usize)).await?;
                // Never-written (or zeroed) space stays thin on the target:
                // zeros are sent as a deallocate.
                let zero = is_zero(&data);
                let data = Bytes::from_owner(data);
                if paced && !zero {
                    self.pace(data.len() as u64).await;
                }
                for &t in targets {
                    if failed.contains(&t) {
                        continue;
                    }
                    let Some(rep) = self.replica(t) else { continue };
                    let sent = if zero {
                        rep.write_zeroes(epoch, lba, n, true).await
                    } else {
                        rep.write(epoch, lba, data.clone(), false).await
                    };
                    match sent {
                        Ok(()) => {}
                        Err(ReplicaError::Stale(_)) => {
                            // Again at the new epoch, unless deposed.
                            self.owner.refused(epoch).await?;
                            continue 'again;
                        }
                        Err(e) => {
                            tracing::warn!(node = %t, error = %e, region = r, "copy to a replica failed");
                            failed.push(t);
                        }
                    }
                }
                lba += n;
            }
            if !self.drl.region_quiet_since(r, seq) {
                continue 'again;
            }
            self.stats.regions_copied.fetch_add(1, Ordering::Relaxed);
            return Ok(failed);
        }
    }
}

impl ReplicatedVolume {
    /// Opens a volume this node has just taken over at `parts.membership`
    /// (whose epoch the metadata store already holds): fences every
    /// in-sync replica with a flush at that epoch (the old owner's writes
    /// are over once it completes), drops those that cannot be reached,
    /// and serves at once: every region the last owner left dirty is made
    /// to agree byte for byte on the in-sync replicas on a task of its
    /// own, and before the first read or write there, whichever comes
    /// first.
    ///
    /// # Errors
    ///
    /// [`OpenError::Unavailable`] when a chunk has no reachable in-sync
    /// replica; [`OpenError::Io`] when the metadata store fails or the
    /// volume was taken over again meanwhile.
    pub async fn open(parts: VolumeParts) -> Result<ReplicatedVolume, OpenError> {
        let VolumeParts { geometry, local, layout, replicas, membership, drl, control, moving } = parts;
        let span = geometry.size_bytes();
        let owner = Arc::new(Owner::new(geometry, local, layout, replicas, membership, drl, control, span, 1, moving));
        let inner = Arc::new(Inner { owner });
        let vol = ReplicatedVolume { inner };
        vol.inner.owner.list_unlisted_stale().await.map_err(OpenError::Io)?;
        vol.inner.owner.flush().await?;
        vol.inner.check_available()?;
        crate::owner::repair_in_background(
            &vol.inner,
            |i| &i.owner,
            |i: Arc<Inner>, r| async move { i.repair_region(r).await },
            |i: Arc<Inner>| async move { i.clean(Duration::ZERO).await },
        );
        Ok(vol)
    }

    /// Starts moving the volume as `mv` says (or retargets the move in
    /// progress); `added` are handles of the nodes new to it. The nodes
    /// that join chunks take writes at once and are filled by
    /// [`resync`](Self::resync) while every current copy keeps serving;
    /// [`finish_move`](crate::volume::PoolVolume::finish_move) then switches.
    ///
    /// # Errors
    ///
    /// The log or the metadata store failed, or this owner is fenced.
    pub async fn begin_move(&self, mv: Moving, added: Vec<Arc<dyn Replica>>) -> Result<(), BlockError> {
        self.inner.owner.begin_move(mv, added).await
    }

    crate::owner::owner_accessors!();

    /// Clears the dirty regions no write has touched for `quiet_for`,
    /// after a flush of every in-sync replica; returns how many. The owner
    /// runs this every second with
    /// [`CLEAN_AFTER`](crate::volume::CLEAN_AFTER); with nothing to clear
    /// it neither flushes nor writes the log.
    ///
    /// Each call takes a mark of the log's write sequence; a region is
    /// quiet for `quiet_for` when its last write came before the newest
    /// mark that old, so the delay is counted in calls as well as time.
    ///
    /// # Errors
    ///
    /// As a flush, or the log could not be saved.
    pub async fn clean(&self, quiet_for: Duration) -> Result<u64, BlockError> {
        self.inner.clean(quiet_for).await
    }

    /// Brings the stale replica on `node` back: every new write goes to it
    /// as well, each region it missed is copied from an in-sync replica,
    /// and once none is left it rejoins the in-sync set (epoch bump). It is
    /// never read from before that.
    ///
    /// # Errors
    ///
    /// When `node` fails during the resync (it stays stale, its missed
    /// regions recorded), the metadata store fails, or this owner is
    /// fenced.
    pub async fn resync(&self, node: NodeId) -> Result<(), BlockError> {
        let i = &self.inner;
        if i.membership().in_sync.contains(&node) {
            return self.copy_missed(node, false).await;
        }
        let Some(rep) = i.replica(node) else {
            return Err(io_error(format!("node {node} holds no chunk of this volume")));
        };
        rep.rearm();
        // A node that does not answer is not given writes: each would wait
        // for its link's I/O timeout (a cut link whose node record has not
        // expired yet looks alive to the cluster).
        let epoch = i.membership().epoch;
        rep.flush(epoch).await.map_err(|e| io_error(format!("node {node} does not answer: {e}")))?;
        i.catch_up(node, self.copy_missed(node, true)).await
    }

    /// Copies every region `node` missed onto it from a node that holds
    /// it; then it rejoins (`rejoin`: it was stale) or is read again there
    /// (it was in sync, filling the chunks it joined in a move). It takes
    /// every write meanwhile.
    async fn copy_missed(&self, node: NodeId, rejoin: bool) -> Result<(), BlockError> {
        let i = &self.inner;
        let bs = i.bs();
        let failed_write = || io_error(format!("node {node} failed a write while being copied to"));
        loop {
            let rep = i.replica(node).ok_or_else(|| io_error("replica vanished"))?;
            let missed: Vec<u64> = i.drl.missed(node).unwrap_or_default().iter().collect();
            for batch in missed.chunks(COPY_FLUSH_REGIONS) {
                for &r in batch {
                    i.owner.check_interrupt()?;
                    let first_lba = i.drl.regions().bytes_of(r, i.geometry.size_bytes()).start / bs;
                    let chunk = first_lba * bs / i.layout().chunk_bytes();
                    let joins = i.mirrors(chunk).iter().any(|&(_, n)| n == node);
                    if joins || i.layout().replicas(chunk).contains(&node) {
                        let failed = i.copy_region(r, &[node], true).await?;
                        if !failed.is_empty() {
                            i.owner.leave(&failed, r..r + 1).await?;
                        }
                        if !i.still_copying(node, rejoin) {
                            return Err(failed_write());
                        }
                    }
                }
                // Durable on the node before the log says it holds them:
                // a node killed before its next flush loses what it did
                // not flush, and a region marked copied is never copied
                // again.
                let epoch = i.membership().epoch;
                rep.flush(epoch)
                    .await
                    .map_err(|e| io_error(format!("node {node} failed a flush while being copied to: {e}")))?;
                if !i.still_copying(node, rejoin) {
                    return Err(failed_write());
                }
                for &r in batch {
                    i.drl.copied(node, r);
                }
            }
            if !rejoin {
                return i.owner.fill_done(node).await;
            }
            if i.caught_up(node, &*rep).await? {
                return Ok(());
            }
        }
    }
}

impl BlockDevice for ReplicatedVolume {
    fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    fn usage(&self) -> DeviceUsage {
        self.inner.usage()
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(self.inner.read(lba, buf))
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let blocks = match write_blocks(inner.geometry, lba, buf.len()) {
                Ok(blocks) => blocks,
                Err(e) => return (buf, Err(e)),
            };
            let data = Bytes::from_owner(buf);
            let work = inner.clone().fan_out(lba, blocks, Op::Write { data, fua });
            (IoBuf::zeroed(0), run_to_end(&inner.owner, work).await)
        })
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            check_range(inner.geometry, lba, blocks)?;
            run_to_end(&inner.owner, inner.clone().fan_out(lba, blocks, Op::Zeroes { deallocate })).await
        })
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            for &(lba, blocks) in &ranges {
                check_range(inner.geometry, lba, blocks)?;
            }
            let this = inner.clone();
            let work = async move {
                for (lba, blocks) in ranges {
                    this.clone().fan_out(lba, blocks, Op::Zeroes { deallocate: true }).await?;
                }
                Ok(())
            };
            run_to_end(&inner.owner, work).await
        })
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.inner.owner.flush())
    }
}

crate::owner::impl_pool_volume!(ReplicatedVolume);
