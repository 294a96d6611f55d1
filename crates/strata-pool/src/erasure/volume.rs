//! An erasure-coded volume, as its owner serves it: a [`BlockDevice`]
//! whose stripes are K data and M parity strips on K+M nodes.
//!
//! # What the owner guarantees
//!
//! - A write completes when every in-sync shard its stripes touch has it,
//!   as an update in place with its undo kept ([`Shard::write_logged`]).
//!   A shard that fails leaves the in-sync set before the write completes
//!   (the owner core's `leave`, as for replicas). A stripe left with fewer
//!   than K in-sync shards fails the write.
//! - Flush and FUA make data durable on every in-sync shard *and commit
//!   it*: no later takeover rolls it back.
//! - Reads go to the data strip's shard when it is in sync, else decode
//!   the strip from K in-sync shards of its stripe.
//! - A new owner rolls back every update not committed anywhere, then
//!   recomputes the parity of every dirty stripe whose data strips are all
//!   in sync: every stripe is again one consistent version, so decoding it
//!   from any K shards gives the same bytes (no write hole).
//!
//! Updates to one stripe are serialised by a stripe lock; a write of many
//! stripes holds one stripe lock at a time, so writes never deadlock.
//!
//! # Cancellation
//!
//! As replicated volumes: writes run to the end on a task of their own;
//! reads and flushes change nothing but the commit mark and may be
//! dropped anywhere (a commit sent to some shards and not others is one
//! the next owner treats as made; see `docs/pool.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, check_range};

use super::codec::{Codec, xor_into};
use super::scrub;
use super::shard::Shard;
use super::stripe::{StripePiece, Stripes};
use crate::check::{CheckProgress, CheckReport, Difference};
use crate::control::{Control, Membership};
use crate::drl::{DirtyRegionLog, NodeId};
use crate::layout::{Layout, Moving};
use crate::owner::{Owner, io_error, is_zero, run_to_end, write_blocks};
use crate::replica::ReplicaError;
use crate::volume::{OpenError, VolumeStats};

/// Stripe locks: a stripe's updates, repairs and degraded reads hash to
/// one of these.
const STRIPE_LOCKS: usize = 1024;

/// The most whole stripes one update writes (a logged write of this many
/// strips per shard).
const WRITE_RUN_STRIPES: u64 = 32;

/// The most whole stripes one freeing update zeroes and deallocates: with
/// 4 KiB strips, 4 MiB of each shard, whole extents of the store.
const FREE_RUN_STRIPES: u64 = 1024;

/// Tries of a rebuild run whose reads raced updates before the run is read
/// with its stripes locked.
const REBUILD_TRIES_UNLOCKED: u32 = 8;

/// Stripe updates left uncommitted before a write commits what has ended
/// (between the owner's once-a-second commits and the host's flushes).
/// Each leaves at most one undo record (a strip and a header block) on
/// each shard until committed, so this bounds the undo log a shard needs:
/// 1,024 x 8 KiB, 8 MiB, against the 128 MiB a node gives each shard.
const COMMIT_STRIPES: u64 = 1024;

/// Stripes a rebuild decodes and writes at once, under their locks: 64
/// strips of 4 KiB, a 256 KiB read per source shard, short enough that a
/// host write to one of them waits little.
const REBUILD_RUN_STRIPES: u64 = 64;

/// Dirty-log regions a rebuild writes before the commit that must come
/// before it marks them done (a flush and a commit on every shard).
const REBUILD_COMMIT_REGIONS: usize = 16;

/// What an erasure-coded volume needs to open.
pub struct EcParts {
    /// Block size and count of the volume.
    pub geometry: Geometry,
    /// This node.
    pub local: NodeId,
    /// K, M and the strip size (a multiple of the block size).
    pub stripes: Stripes,
    /// Placement in shard space: `chunk_bytes` of every shard volume per
    /// chunk, and `replicas(chunk)[i]` holds shard `i` (data `0..K`, then
    /// parity).
    pub layout: Arc<dyn Layout>,
    /// Every node that holds a shard, reachable or not.
    pub shards: Vec<Arc<dyn Shard>>,
    /// The membership this owner took the volume over at.
    pub membership: Membership,
    /// The dirty-region log, over shard space (`Regions::for_volume` of
    /// [`Stripes::shard_bytes`] and the layout's chunk).
    pub drl: Arc<DirtyRegionLog>,
    /// The metadata store.
    pub control: Arc<dyn Control>,
    /// The move in progress, as the metadata store records it (its nodes'
    /// handles among `shards`).
    pub moving: Option<Moving>,
}

/// Update sequence numbers: handed out, running, committed.
#[derive(Debug)]
struct Seqs {
    next: u64,
    running: BTreeSet<u64>,
    committed: u64,
}

impl Seqs {
    /// Every update at or below this has ended.
    fn ended_through(&self) -> u64 {
        self.running.first().map_or(self.next - 1, |&s| s - 1)
    }
}

struct Inner {
    owner: Arc<Owner<dyn Shard>>,
    stripes: Stripes,
    codec: Codec,
    locks: Vec<tokio::sync::Mutex<()>>,
    seqs: Mutex<Seqs>,
    ended: tokio::sync::Notify,
    /// One commit at a time.
    committing: tokio::sync::Mutex<()>,
    /// Stripe updates begun since the last commit began.
    stripes_since_commit: std::sync::atomic::AtomicU64,
}

impl std::ops::Deref for Inner {
    type Target = Owner<dyn Shard>;
    fn deref(&self) -> &Owner<dyn Shard> {
        &self.owner
    }
}

/// A stripe's nodes as an update sees them: by slot, the membership for
/// its regions, the nodes being caught up there, and the nodes joining
/// its chunk's slots in a move.
#[derive(Clone, Copy)]
struct StripeView<'a> {
    slots: &'a [NodeId],
    m: &'a Membership,
    catching: &'a BTreeSet<NodeId>,
    mirrors: &'a [(usize, NodeId)],
}

/// Why a step on a stripe stopped.
enum Fault {
    /// This node failed: it leaves the in-sync set, and the step is tried
    /// again.
    Node(NodeId),
    /// This node's link reconnected at this generation: what it may have
    /// lost is marked missed, and the step is tried again.
    Restarted(NodeId, u64),
    /// A node refused the epoch: this owner is deposed, or raised the
    /// epoch itself meanwhile (then the step is tried again).
    Stale,
    /// The volume's I/O fails.
    Volume(BlockError),
}

/// What a step sent to several shards came back with.
struct Answers<T> {
    /// The answers of the shards that did it.
    done: Vec<T>,
    /// Shards that failed.
    failed: Vec<NodeId>,
    /// Shards whose link reconnected, with its generation.
    restarted: Vec<(NodeId, u64)>,
    /// Some shard refused the epoch.
    refused: bool,
    /// The first error that fails the I/O.
    error: Option<BlockError>,
}

impl<T> Answers<T> {
    fn sort(results: Vec<Result<T, Fault>>) -> Answers<T> {
        let mut a =
            Answers { done: Vec::new(), failed: Vec::new(), restarted: Vec::new(), refused: false, error: None };
        for r in results {
            match r {
                Ok(v) => a.done.push(v),
                Err(Fault::Node(n)) => a.failed.push(n),
                Err(Fault::Restarted(n, g)) => a.restarted.push((n, g)),
                Err(Fault::Stale) => a.refused = true,
                Err(Fault::Volume(e)) => a.error = a.error.or(Some(e)),
            }
        }
        a
    }
}

/// An erasure-coded volume served by its owner.
#[derive(Clone)]
pub struct ErasureVolume {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ErasureVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasureVolume")
            .field("geometry", &self.inner.geometry)
            .field("stripes", &self.inner.stripes)
            .field("membership", &*self.inner.membership())
            .finish_non_exhaustive()
    }
}

/// Marks an update ended when dropped.
struct Running<'a>(&'a Inner, u64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.seqs().running.remove(&self.1);
        self.0.ended.notify_waiters();
    }
}

impl Inner {
    fn seqs(&self) -> MutexGuard<'_, Seqs> {
        self.seqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin_update(&self) -> Running<'_> {
        let mut s = self.seqs();
        let seq = s.next;
        s.next += 1;
        s.running.insert(seq);
        Running(self, seq)
    }

    fn k(&self) -> usize {
        self.stripes.data
    }

    fn width(&self) -> usize {
        self.stripes.data + self.stripes.parity
    }

    fn strip(&self) -> usize {
        self.stripes.strip as usize
    }

    fn chunk_of(&self, g: u64) -> u64 {
        self.stripes.shard_offset(g) / self.layout().chunk_bytes()
    }

    /// The nodes of stripe `g`, shard `i` at index `i`.
    fn slots(&self, g: u64) -> Result<Vec<NodeId>, BlockError> {
        let chunk = self.chunk_of(g);
        let slots = self.layout().replicas(chunk);
        if slots.len() != self.width() {
            return Err(io_error(format!("chunk {chunk} is placed on {} nodes, not {}", slots.len(), self.width())));
        }
        Ok(slots)
    }

    /// The dirty-log regions of stripe `g`.
    fn regions_of(&self, g: u64) -> std::ops::Range<u64> {
        self.regions_of_run(&(g..g + 1))
    }

    /// The dirty-log regions of the stripes of `run` (inside one chunk).
    fn regions_of_run(&self, run: &std::ops::Range<u64>) -> std::ops::Range<u64> {
        self.drl.regions().touched(self.stripes.shard_offset(run.start), (run.end - run.start) * self.stripes.strip)
    }

    async fn lock(&self, g: u64) -> tokio::sync::MutexGuard<'_, ()> {
        self.locks[(g % STRIPE_LOCKS as u64) as usize].lock().await
    }

    fn judge(&self, node: NodeId, e: ReplicaError) -> Fault {
        match e {
            ReplicaError::Stale(_) => Fault::Stale,
            ReplicaError::NoSpace => Fault::Volume(BlockError::NoSpace),
            ReplicaError::Invalid(why) => Fault::Volume(io_error(why)),
            ReplicaError::Unavailable(why) => {
                tracing::warn!(node = %node, error = %why, "shard failed an I/O");
                Fault::Node(node)
            }
            ReplicaError::Reconnected { generation, .. } => Fault::Restarted(node, generation),
            // A shard that still keeps a promise to the last owner: a
            // takeover's fence flush waits it out; one that missed it
            // (down or frozen then) cannot take this owner's I/O, as if
            // failed.
            ReplicaError::Promised(left) => {
                tracing::warn!(node = %node, ?left, "shard keeps a promise to the volume's last owner");
                Fault::Node(node)
            }
        }
    }

    /// Settles the shards of `a` that failed (they leave) or reconnected
    /// (they are refilled) in an operation on dirty-log `regions`; true
    /// when any did.
    async fn settle_nodes<T>(&self, a: &Answers<T>, regions: std::ops::Range<u64>) -> Result<bool, BlockError> {
        if !a.failed.is_empty() {
            self.owner.leave(&a.failed, regions.clone()).await?;
        }
        for &(n, g) in &a.restarted {
            self.owner.restarted(n, g, regions.clone()).await?;
        }
        Ok(!a.failed.is_empty() || !a.restarted.is_empty())
    }

    /// Settles a fault met on stripe `g` by an operation sent at epoch
    /// `sent`: a failed node leaves (what it missed recorded), and the
    /// caller tries again.
    async fn settle(&self, g: u64, fault: Fault, sent: u64) -> Result<(), BlockError> {
        self.settle_in(self.regions_of(g), fault, sent).await
    }

    /// [`settle`](Self::settle) for an operation on dirty-log `regions`.
    async fn settle_in(&self, regions: std::ops::Range<u64>, fault: Fault, sent: u64) -> Result<(), BlockError> {
        match fault {
            Fault::Node(n) => self.owner.leave(&[n], regions).await,
            // Only reads (and the rebuild's writes to the node itself,
            // which misses what they carry) end up here: the node lost
            // nothing of `regions` that it did not lose anyway.
            Fault::Restarted(n, g) => self.owner.restarted(n, g, 0..0).await,
            Fault::Stale => self.owner.refused(sent).await,
            Fault::Volume(e) => Err(e),
        }
    }

    fn shard(&self, node: NodeId) -> Result<Arc<dyn Shard>, Fault> {
        self.replica(node).ok_or_else(|| Fault::Volume(io_error(format!("node {node} holds no shard of this volume"))))
    }

    /// Reads shard bytes `[offset, offset+len)` from `node`.
    async fn read_at(&self, node: NodeId, epoch: u64, offset: u64, len: usize) -> Result<IoBuf, Fault> {
        let shard = self.shard(node)?;
        shard.read(epoch, offset / self.bs(), IoBuf::recycled(len)).await.map_err(|e| self.judge(node, e))
    }

    /// The strips at positions `want` of stripe `g`, from in-sync shards:
    /// read where the shard is in sync, else decoded from K in-sync
    /// shards. The caller holds the stripe's lock.
    async fn strips(&self, g: u64, slots: &[NodeId], m: &Membership, want: &[usize]) -> Result<Vec<Vec<u8>>, Fault> {
        let k = self.k();
        let at = self.stripes.shard_offset(g);
        let strip = self.strip();
        let read = |pos: usize| {
            let node = slots[pos];
            async move { self.read_at(node, m.epoch, at, strip).await.map(|b| b.to_vec()) }
        };
        if want.iter().all(|&p| m.in_sync.contains(&slots[p])) {
            return join_all(want.iter().map(|&p| read(p))).await.into_iter().collect();
        }
        // Decode: the wanted in-sync positions first, then data, then parity.
        let mut sources: Vec<usize> = want.iter().copied().filter(|&p| m.in_sync.contains(&slots[p])).collect();
        sources.extend((0..self.width()).filter(|p| !want.contains(p) && m.in_sync.contains(&slots[*p])));
        if sources.len() < k {
            return Err(Fault::Volume(io_error(format!(
                "stripe {g} has {} of its {} shards in sync; {k} are needed",
                sources.len(),
                self.width()
            ))));
        }
        sources.truncate(k);
        let got: Vec<Vec<u8>> =
            join_all(sources.iter().map(|&p| read(p))).await.into_iter().collect::<Result<_, _>>()?;
        let mut shards: Vec<Option<&[u8]>> = vec![None; self.width()];
        for (&p, s) in sources.iter().zip(&got) {
            shards[p] = Some(s);
        }
        let data = self.codec.decode(&shards).map_err(|e| Fault::Volume(io_error(e.to_string())))?;
        let parity = if want.iter().any(|&p| p >= k) {
            self.codec.encode(&data).map_err(|e| Fault::Volume(io_error(e.to_string())))?
        } else {
            Vec::new()
        };
        Ok(want.iter().map(|&p| if p < k { data[p].clone() } else { parity[p - k].clone() }).collect())
    }

    /// The new contents of stripe `g` after writing `new` at `within`:
    /// `(position, strip)` for every strip that changes.
    async fn plan(
        &self,
        g: u64,
        within: &std::ops::Range<u64>,
        new: &[u8],
        view: StripeView<'_>,
    ) -> Result<Vec<(usize, Vec<u8>)>, Fault> {
        let StripeView { slots, m, catching, mirrors } = view;
        let (k, strip) = (self.k(), self.strip());
        let codec_err = |e: super::codec::CodecError| Fault::Volume(io_error(e.to_string()));
        let touched = self.stripes.strips_of(within);
        let put = |d: usize, old: &mut Vec<u8>| {
            // The part of `new` that falls in data strip `d`.
            let (lo, hi) = ((d * strip) as u64, ((d + 1) * strip) as u64);
            let (from, to) = (within.start.max(lo), within.end.min(hi));
            let src = (from - within.start) as usize..(to - within.start) as usize;
            old[(from - lo) as usize..(to - lo) as usize].copy_from_slice(&new[src]);
        };
        if within.start == 0 && within.end == self.stripes.stripe_bytes() {
            let data: Vec<&[u8]> = new.chunks(strip).collect();
            let parity = self.codec.encode(&data).map_err(codec_err)?;
            return Ok(data.into_iter().map(<[u8]>::to_vec).chain(parity).enumerate().collect());
        }
        let parity_pos = k..self.width();
        // A node joining a parity slot in a move takes that slot's new
        // parity: read-modify-write computes it only where the slot's
        // shard is in sync.
        let rmw = touched.clone().all(|d| m.in_sync.contains(&slots[d]))
            && parity_pos.clone().all(|p| !catching.contains(&slots[p]))
            && mirrors.iter().all(|&(p, _)| p < k || m.in_sync.contains(&slots[p]));
        if rmw {
            // Read-modify-write: old data of the touched strips and the
            // in-sync parity, and the parity of the change alone.
            let live_parity: Vec<usize> = parity_pos.filter(|&p| m.in_sync.contains(&slots[p])).collect();
            let want: Vec<usize> = touched.clone().chain(live_parity.iter().copied()).collect();
            let mut old = self.strips(g, slots, m, &want).await?;
            let mut out = Vec::with_capacity(want.len());
            let mut deltas = Vec::with_capacity(touched.len());
            for (i, d) in touched.clone().enumerate() {
                let mut strip_now = old[i].clone();
                put(d, &mut strip_now);
                xor_into(&mut old[i], &strip_now); // old ^ new: the change
                out.push((d, strip_now));
                deltas.push(d);
            }
            let changes: Vec<(usize, &[u8])> = deltas.iter().zip(&old).map(|(&d, c)| (d, c.as_slice())).collect();
            let pd = self.codec.parity_delta(&changes).map_err(codec_err)?;
            for (i, &p) in live_parity.iter().enumerate() {
                let mut par = old[touched.len() + i].clone();
                xor_into(&mut par, &pd[p - k]);
                out.push((p, par));
            }
            return Ok(out);
        }
        // Reconstruct-write: every data strip (decoded where its shard is
        // not in sync), the new bytes merged in, parity encoded afresh.
        let all: Vec<usize> = (0..k).collect();
        let mut data = self.strips(g, slots, m, &all).await?;
        for d in touched.clone() {
            put(d, &mut data[d]);
        }
        let parity = self.codec.encode(&data).map_err(codec_err)?;
        let mut out: Vec<(usize, Vec<u8>)> = touched.map(|d| (d, std::mem::take(&mut data[d]))).collect();
        out.extend(parity.into_iter().enumerate().map(|(j, p)| (k + j, p)));
        Ok(out)
    }

    /// The new contents of whole stripes written with `new` (their data,
    /// stripe after stripe): `(position, strips)` for every position, the
    /// strips of consecutive stripes one after the other, as they lie on
    /// the shard.
    fn plan_full(&self, new: &[u8]) -> Result<Vec<(usize, Vec<u8>)>, Fault> {
        let (k, strip, sb) = (self.k(), self.strip(), self.stripes.stripe_bytes() as usize);
        let n = new.len() / sb;
        if is_zero(new) {
            // Zeros encode to zeros: nothing to compute.
            return Ok((0..self.width()).map(|p| (p, vec![0; n * strip])).collect());
        }
        // Each data position's strips, one after the other, then the
        // parity of those runs in one encode (see `Codec::encode`).
        let mut out: Vec<Vec<u8>> = (0..k).map(|_| Vec::with_capacity(n * strip)).collect();
        for stripe in new.chunks(sb) {
            for (p, d) in stripe.chunks(strip).enumerate() {
                out[p].extend_from_slice(d);
            }
        }
        let parity = self.codec.encode(&out).map_err(|e| Fault::Volume(io_error(e.to_string())))?;
        out.extend(parity);
        Ok(out.into_iter().enumerate().collect())
    }

    /// Writes `new` at `within` of stripe `run.start` as one update, or,
    /// for a run of more than one stripe (consecutive, in one chunk),
    /// `new` over the whole stripes of the run: one logged write per shard
    /// for the run, its parity encoded without reading anything.
    ///
    /// The update's sequence number is taken under the locks of its
    /// stripes, so that a stripe's updates land in the order of their
    /// numbers: a commit up to `n` (every update up to `n` ended) then
    /// never leaves an older update of a stripe undone under a newer one
    /// it keeps, nor a newer one to roll back over an older one it keeps.
    /// Returns it.
    async fn write_run(
        &self,
        run: std::ops::Range<u64>,
        within: std::ops::Range<u64>,
        new: &[u8],
    ) -> Result<u64, BlockError> {
        let _stripes = self.lock_stripes(&run).await;
        let running = self.begin_update();
        self.update(&run, &within, new, running.1).await
    }

    /// Writes zeros over whole stripes `run` (`new`, all zero) as
    /// [`write_run`](Self::write_run) does, then frees their space on
    /// every shard: once the update is committed (no roll back can bring
    /// back what it overwrote), each shard deallocates the run, which
    /// reads as the zeros just written. The stripes stay locked
    /// throughout, so no later update can land in between and be freed.
    async fn zero_run(self: &Arc<Self>, run: std::ops::Range<u64>, new: &[u8]) -> Result<u64, BlockError> {
        let _stripes = self.lock_stripes(&run).await;
        let within = 0..new.len() as u64;
        let seq = {
            let running = self.begin_update();
            self.update(&run, &within, new, running.1).await?
        };
        self.commit_through(seq).await?;
        self.free_stripes(&run).await?;
        Ok(seq)
    }

    /// Deallocates the strips of `run` on every shard that takes writes.
    /// The caller holds the run's locks, and its content is zeros,
    /// committed.
    async fn free_stripes(&self, run: &std::ops::Range<u64>) -> Result<(), BlockError> {
        let lba = self.stripes.shard_offset(run.start) / self.bs();
        let blocks = (run.end - run.start) * self.stripes.strip / self.bs();
        let regions = self.regions_of_run(run);
        loop {
            self.serving().await?;
            let epoch = self.membership().epoch;
            let nodes: Vec<NodeId> = self.writable().into_iter().collect();
            let results = join_all(nodes.iter().map(|&n| async move {
                let shard = self.shard(n)?;
                shard.write_zeroes(epoch, lba, blocks, true).await.map_err(|e| self.judge(n, e))
            }))
            .await;
            let answers = Answers::sort(results);
            if let Some(e) = answers.error {
                return Err(e);
            }
            // A node that left or reconnected misses these stripes: it
            // is rebuilt there, zeros included.
            self.settle_nodes(&answers, regions.clone()).await?;
            if answers.refused {
                self.owner.refused(epoch).await?;
                continue;
            }
            return Ok(());
        }
    }

    /// The locks of `run`: one, or every stripe's in index order.
    async fn lock_stripes(&self, run: &std::ops::Range<u64>) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        if run.end - run.start == 1 { vec![self.lock(run.start).await] } else { self.lock_run(run).await }
    }

    /// The update `seq` of `run` (see [`write_run`](Self::write_run)),
    /// whose locks the caller holds.
    async fn update(
        &self,
        run: &std::ops::Range<u64>,
        within: &std::ops::Range<u64>,
        new: &[u8],
        seq: u64,
    ) -> Result<u64, BlockError> {
        let g = run.start;
        let whole = run.end - run.start > 1;
        let regions = self.regions_of_run(run);
        loop {
            self.serving().await?;
            let (m, catching) = self.view(regions.clone());
            let slots = self.slots(g)?;
            let live = slots.iter().filter(|n| m.in_sync.contains(n)).count();
            if live < self.k() {
                return Err(io_error(format!("stripe {g} has {live} of {} shards in sync", self.width())));
            }
            let mirrors = self.mirrors(self.chunk_of(g));
            let plan = if whole {
                self.plan_full(new)
            } else {
                let view = StripeView { slots: &slots, m: &m, catching: &catching, mirrors: &mirrors };
                self.plan(g, within, new, view).await
            };
            let plan = match plan {
                Ok(p) => p,
                Err(f) => {
                    self.settle_in(regions.clone(), f, m.epoch).await?;
                    continue;
                }
            };
            let lba = self.stripes.shard_offset(g) / self.bs();
            // Every record says which positions the update goes to, so
            // that a new owner can tell it missed one (see `missed_targets`).
            let targets = plan.iter().fold(0u64, |t, (p, _)| t | 1 << p);
            // Each strip to its slot's shard, and to a node joining that
            // slot in a move.
            let sends: Vec<(NodeId, Bytes)> = plan
                .into_iter()
                .flat_map(|(p, s)| {
                    let s = Bytes::from(s);
                    let joining = mirrors.iter().filter(move |&&(q, _)| q == p).map(|&(_, n)| n);
                    std::iter::once(slots[p]).chain(joining).map(move |n| (n, s.clone()))
                })
                .filter(|(n, _)| m.in_sync.contains(n) || catching.contains(n))
                .collect();
            let results = join_all(sends.iter().map(|(n, data)| async move {
                let shard = self.shard(*n)?;
                shard.write_logged(m.epoch, seq, targets, lba, data.clone()).await.map_err(|e| self.judge(*n, e))
            }))
            .await;
            let mut answers = Answers::sort(results);
            let outcome = answers.error.take().map_or(Ok(()), Err);
            if answers.refused {
                // Sent again whole at the new epoch: a shard that took it
                // keeps a second record of the same update, and rolling
                // back newest first still ends at the bytes before it.
                self.settle_nodes(&answers, regions.clone()).await?;
                self.owner.refused(m.epoch).await?;
                continue;
            }
            // A shard that failed left, one that reconnected misses these
            // stripes now (both marked before the write completes): the
            // update stands if K shards that hold it remain.
            if self.settle_nodes(&answers, regions.clone()).await? {
                let (now, _) = self.view(regions.clone());
                let live = slots.iter().filter(|n| now.in_sync.contains(n)).count();
                if live < self.k() {
                    return Err(io_error(format!("stripe {g} has {live} of {} shards in sync", self.width())));
                }
            }
            return outcome.map(|()| seq);
        }
    }

    /// Writes `data` at `lba` (whole blocks, in range) as one update.
    async fn write(self: Arc<Self>, lba: u64, data: Bytes, fua: bool) -> Result<(), BlockError> {
        self.write_or_free(lba, data, fua, false).await
    }

    /// [`write`](Self::write); with `free`, `data` is zeros and the space
    /// of the whole stripes it covers is freed on the shards
    /// ([`zero_run`](Self::zero_run)).
    async fn write_or_free(self: Arc<Self>, lba: u64, data: Bytes, fua: bool, free: bool) -> Result<(), BlockError> {
        self.serving().await?;
        if self.drl.unrepaired() > 0 {
            let pieces: Vec<StripePiece> = self.stripes.pieces(lba * self.bs(), data.len() as u64).collect();
            self.repaired_before(&pieces).await?;
        }
        let seq = {
            let _io = self.gate.read().await;
            let bs = self.bs();
            let pieces: Vec<StripePiece> = self.stripes.pieces(lba * bs, data.len() as u64).collect();
            let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else { return Ok(()) };
            let (first, last) = (first.stripe, last.stripe);
            let m = self.membership().clone();
            let catching = self.catching_up().clone();
            let mut stale = BTreeSet::new();
            let chunk_stripes = self.layout().chunk_bytes() / self.stripes.strip;
            let mut g = first;
            while g <= last {
                let joining = self.mirrors(self.chunk_of(g)).into_iter().map(|(_, n)| n);
                for n in self.slots(g)?.into_iter().chain(joining) {
                    if !m.in_sync.contains(&n) && !catching.contains(&n) {
                        stale.insert(n);
                    }
                }
                g = (g / chunk_stripes + 1) * chunk_stripes;
            }
            let stale: Vec<NodeId> = stale.into_iter().collect();
            let strip = self.stripes.strip;
            let regions = self.drl.regions().touched(self.stripes.shard_offset(first), (last - first + 1) * strip);
            self.stripes_since_commit.fetch_add(last - first + 1, Ordering::AcqRel);
            let _dirty = self.drl.begin(regions, &stale).await.map_err(|e| io_error(e.to_string()))?;
            let sb = self.stripes.stripe_bytes();
            let most = if free { FREE_RUN_STRIPES } else { WRITE_RUN_STRIPES };
            let results = join_all(self.runs(pieces, most).into_iter().map(|(run, within, at)| {
                let (at, len) = (at as usize, (within.end - within.start) as usize);
                let (this, data) = (&self, &data);
                async move {
                    let new = &data[at..at + len];
                    if free && within.start == 0 && within.end == (run.end - run.start) * sb {
                        this.zero_run(run, new).await
                    } else {
                        this.write_run(run, within, new).await
                    }
                }
            }))
            .await;
            results.into_iter().collect::<Result<Vec<u64>, _>>()?.into_iter().max().unwrap_or(0)
        };
        if fua {
            return self.commit_through(seq).await;
        }
        // Undo fills the shards' logs until committed: past the bound,
        // commit what has ended (without waiting for what has not: a
        // write blocked on a full log would never end).
        if self.stripes_since_commit.load(Ordering::Acquire) >= COMMIT_STRIPES {
            self.commit_ended().await?;
        }
        Ok(())
    }

    /// Reads volume bytes into `buf` (whole blocks, in range).
    async fn read(self: &Arc<Self>, lba: u64, mut buf: IoBuf) -> Result<IoBuf, BlockError> {
        let bs = self.bs();
        let offset = lba * bs;
        let pieces: Vec<StripePiece> = self.stripes.pieces(offset, buf.len() as u64).collect();
        self.repaired_before(&pieces).await?;
        let chunk_stripes = self.layout().chunk_bytes() / self.stripes.strip;
        // One chunk at a time: its shards are fixed.
        for group in pieces.chunk_by(|a, b| a.stripe / chunk_stripes == b.stripe / chunk_stripes) {
            self.read_group(group, buf.as_mut_slice()).await?;
        }
        Ok(buf)
    }

    /// Reads the pieces of one chunk: each data position's part is one
    /// contiguous range of its shard, read at once when the shard is in
    /// sync, else decoded stripe by stripe.
    async fn read_group(self: &Arc<Self>, group: &[StripePiece], out: &mut [u8]) -> Result<(), BlockError> {
        // Every data position at once; each answers the parts it holds.
        let answers = join_all((0..self.k()).map(|d| self.read_position(group, d))).await;
        for answer in answers {
            for (at, bytes) in answer? {
                out[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    /// The parts of `group` in data position `d`, each with where it goes
    /// in the group's buffer: one read of the shard when it is in sync,
    /// else each strip decoded.
    async fn read_position(
        self: &Arc<Self>,
        group: &[StripePiece],
        d: usize,
    ) -> Result<Vec<(usize, Vec<u8>)>, BlockError> {
        let strip = self.stripes.strip;
        let (lo, hi) = (d as u64 * strip, (d as u64 + 1) * strip);
        // (stripe, bytes of the strip, where in the buffer)
        let parts: Vec<(u64, std::ops::Range<u64>, usize)> = group
            .iter()
            .filter_map(|p| {
                let (from, to) = (p.within.start.max(lo), p.within.end.min(hi));
                (from < to).then(|| (p.stripe, from - lo..to - lo, (p.at + from - p.within.start) as usize))
            })
            .collect();
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else { return Ok(Vec::new()) };
        let start = self.stripes.shard_offset(first.0) + first.1.start;
        let end = self.stripes.shard_offset(last.0) + last.1.end;
        let (node, epoch, in_sync) = {
            let m = self.membership().clone();
            let node = self.slots(first.0)?[d];
            (node, m.epoch, self.readable(&m, node, self.drl.regions().touched(start, end - start)))
        };
        if in_sync {
            self.serving().await?;
            match self.read_at(node, epoch, start, (end - start) as usize).await {
                Ok(b) => {
                    return Ok(parts
                        .iter()
                        .map(|(g, r, at)| {
                            let from = (self.stripes.shard_offset(*g) + r.start - start) as usize;
                            (*at, b[from..from + (r.end - r.start) as usize].to_vec())
                        })
                        .collect());
                }
                Err(f) => self.settle(first.0, f, epoch).await?,
            }
        }
        // The parts lie in consecutive stripes of one chunk: decoded a
        // run of stripes at a time, one read per source shard.
        let mut out = Vec::with_capacity(parts.len());
        for run in parts.chunks(REBUILD_RUN_STRIPES as usize) {
            let (g0, g1) = (run[0].0, run[run.len() - 1].0);
            let strips = self.degraded_strips(g0..g1 + 1, d).await?;
            for (g, r, at) in run {
                let from = ((g - g0) * strip) as usize;
                out.push((*at, strips[from + r.start as usize..from + r.end as usize].to_vec()));
            }
        }
        Ok(out)
    }

    /// Strip `pos` of every stripe of `run` (consecutive, in one chunk),
    /// one after the other, from in-sync shards under the run's locks:
    /// read where `pos`'s shard is readable, else decoded from K in-sync
    /// shards, one read of the run per source.
    async fn degraded_strips(&self, run: std::ops::Range<u64>, pos: usize) -> Result<Vec<u8>, BlockError> {
        let _stripes = self.lock_stripes(&run).await;
        let (at, len) = (self.stripes.shard_offset(run.start), (run.end - run.start) as usize * self.strip());
        let regions = self.regions_of_run(&run);
        loop {
            self.serving().await?;
            let (m, _) = self.view(regions.clone());
            let slots = self.slots(run.start)?;
            let sources: Vec<usize> = if m.in_sync.contains(&slots[pos]) {
                vec![pos]
            } else {
                let live: Vec<usize> = (0..self.width()).filter(|&p| m.in_sync.contains(&slots[p])).collect();
                if live.len() < self.k() {
                    return Err(self.too_few(&run, live.len()));
                }
                live[..self.k()].to_vec()
            };
            let read = join_all(sources.iter().map(|&p| self.read_at(slots[p], m.epoch, at, len))).await;
            match read.into_iter().collect::<Result<Vec<IoBuf>, Fault>>() {
                Ok(got) if sources == [pos] => return Ok(got[0].to_vec()),
                Ok(got) => return self.decode_run(&sources, &got, pos),
                Err(f) => self.settle_in(regions.clone(), f, m.epoch).await?,
            }
        }
    }

    /// The error of a run of stripes with only `live` shards in sync.
    fn too_few(&self, run: &std::ops::Range<u64>, live: usize) -> BlockError {
        io_error(format!(
            "stripes {}..{} have {live} of their {} shards in sync; {} are needed",
            run.start,
            run.end,
            self.width(),
            self.k()
        ))
    }

    /// Strip `pos` of each stripe of a run, from the run's strips at
    /// positions `sources` (K of them, each the run's strips one after
    /// the other).
    ///
    /// The run decodes as one (the code works symbol by symbol): one setup
    /// of the decoder, which is most of what a decode costs, not one per
    /// stripe.
    fn decode_run(&self, sources: &[usize], got: &[IoBuf], pos: usize) -> Result<Vec<u8>, BlockError> {
        let k = self.k();
        let codec_err = |e: super::codec::CodecError| io_error(e.to_string());
        let mut have: Vec<Option<&[u8]>> = vec![None; self.width()];
        for (&p, b) in sources.iter().zip(got) {
            have[p] = Some(&b[..]);
        }
        let mut data = self.codec.decode(&have).map_err(codec_err)?;
        if pos < k {
            return Ok(data.swap_remove(pos));
        }
        let mut parity = self.codec.encode(&data).map_err(codec_err)?;
        Ok(parity.swap_remove(pos - k))
    }

    /// Makes every update up to `seq` durable on every in-sync shard and
    /// commits it: waits for the updates at or below it to end, flushes,
    /// and commits the newest sequence below which all have ended.
    async fn commit_through(self: &Arc<Self>, seq: u64) -> Result<(), BlockError> {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.seqs().ended_through() >= seq {
                break;
            }
            ended.await;
        }
        self.commit_ended().await
    }

    /// Commits every update below which all have ended: flushes every
    /// in-sync shard, then commits there.
    async fn commit_ended(self: &Arc<Self>) -> Result<(), BlockError> {
        let _one = self.committing.lock().await;
        let (through, committed) = {
            let s = self.seqs();
            (s.ended_through(), s.committed)
        };
        if through <= committed {
            return Ok(());
        }
        self.stripes_since_commit.store(0, Ordering::Release);
        self.owner.flush().await?;
        loop {
            let epoch = self.membership().epoch;
            let nodes: Vec<NodeId> = self.writable().into_iter().collect();
            let results = join_all(nodes.iter().map(|&n| async move {
                let shard = self.shard(n)?;
                shard.commit(epoch, through).await.map_err(|e| self.judge(n, e))
            }))
            .await;
            let answers = Answers::sort(results);
            if let Some(e) = answers.error {
                return Err(e);
            }
            // A shard that reconnected is marked and committed again on
            // its new connection (a commit is idempotent).
            let again = !answers.restarted.is_empty();
            self.settle_nodes(&answers, 0..0).await?;
            if !answers.refused && !again {
                break;
            }
            if answers.refused {
                self.owner.refused(epoch).await?;
            }
        }
        let mut s = self.seqs();
        s.committed = s.committed.max(through);
        Ok(())
    }

    /// See [`ErasureVolume::clean`]. A region leaves the dirty set only
    /// when every write there ended before the cutoff's flush mark *and*
    /// every update of those writes is committed. Flushed is not enough:
    /// a later takeover may still roll back an uncommitted update on the
    /// in-sync shards, while a node that left before keeps it, and a node
    /// that leaves is refilled only where the log was dirty (it would keep
    /// a strip of a version the others no longer hold).
    async fn clean(self: &Arc<Self>, quiet_for: Duration) -> Result<u64, BlockError> {
        // The update sequence after the flush mark: every update of the
        // writes up to the mark had its number by then.
        let cutoff = self.clean_cutoff(quiet_for, || self.seqs().next - 1);
        let through = self.seqs().ended_through();
        self.commit_through(through).await?;
        let Some((seq, updates)) = cutoff else { return Ok(0) };
        if self.seqs().committed < updates {
            // An older update still runs: a later clean.
            return Ok(0);
        }
        self.drl.clean_flushed(seq).await.map_err(|e| io_error(e.to_string()))
    }

    /// Brings every in-sync shard to one consistent version after a
    /// takeover (docs/pool.md, "The write hole, and the undo log"): takes
    /// the highest committed mark S, gathers the undo records of updates
    /// after S, keeps every update whose stripes are one codeword now (it
    /// reached every shard it wrote, so a write the last owner
    /// acknowledged survives), undoes every update of every stripe that
    /// is not (or cannot be told to be), with every newer update over
    /// those ([`scrub::to_undo`]), and forgets the rest. Returns the new
    /// committed mark.
    async fn roll_back(self: &Arc<Self>) -> Result<u64, BlockError> {
        loop {
            let m = self.membership().clone();
            let nodes: Vec<NodeId> = m.in_sync.iter().copied().collect();
            let marks = join_all(nodes.iter().map(|&n| async move {
                let shard = self.shard(n)?;
                shard.committed(m.epoch).await.map_err(|e| self.judge(n, e))
            }))
            .await;
            let mut marks = Answers::sort(marks);
            if self.settle_all(&mut marks, m.epoch).await? {
                continue;
            }
            let through = marks.done.iter().copied().max().unwrap_or(0);
            let lists = join_all(nodes.iter().map(|&n| async move {
                let shard = self.shard(n)?;
                shard.records(m.epoch, through).await.map(|r| (n, r)).map_err(|e| self.judge(n, e))
            }))
            .await;
            let mut lists = Answers::sort(lists);
            if self.settle_all(&mut lists, m.epoch).await? {
                continue;
            }
            // Each update after the mark and the stripes it wrote (the
            // same shard blocks on every shard it wrote). A shard that
            // missed the last commit may still hold records of committed
            // updates (durable on every shard: the commit came after the
            // flush). They are forgotten, never undone: an undo on that
            // shard alone would leave its stripes two versions, which
            // decode to garbage once only K are left.
            let mut updates: BTreeMap<u64, std::ops::Range<u64>> = BTreeMap::new();
            for r in lists.done.iter().flat_map(|(_, l)| l).filter(|r| r.seq > through) {
                let stripes = self.stripes_of_blocks(r.range());
                let e = updates.entry(r.seq).or_insert(stripes.clone());
                *e = e.start.min(stripes.start)..e.end.max(stripes.end);
            }
            let behind = marks.done.iter().any(|&mark| mark < through);
            let newest = match updates.keys().next_back() {
                Some(&newest) => newest,
                // Nothing to decide; a shard behind the mark still forgets
                // what it kept of committed updates and takes the mark.
                None if behind => through,
                None => return Ok(through),
            };
            let mut bad = match self.bad_stripes(updates.values().flat_map(Clone::clone).collect()).await {
                Ok(b) => b,
                Err(f) => {
                    self.settle_in(0..0, f, m.epoch).await?;
                    continue;
                }
            };
            bad.extend(self.missed_targets(&lists.done, through)?);
            let undo = scrub::to_undo(&updates, &bad);
            tracing::debug!(marks = ?marks.done, ?undo, stripes_not_whole = ?bad, "the roll back's plan");
            // What is kept must be durable before its undo is forgotten.
            self.owner.flush().await?;
            let list: Vec<u64> = undo.iter().copied().collect();
            let undone = join_all(nodes.iter().map(|&n| {
                let list = list.clone();
                async move {
                    let shard = self.shard(n)?;
                    shard.roll_back_only(m.epoch, list, newest).await.map_err(|e| self.judge(n, e))
                }
            }))
            .await;
            let mut undone = Answers::sort(undone);
            if self.settle_all(&mut undone, m.epoch).await? {
                continue;
            }
            tracing::info!(
                kept = updates.len() - undo.len(),
                undone = undo.len(),
                records_undone = undone.done.iter().sum::<u64>(),
                committed = through,
                stripes_not_whole = bad.len(),
                "the last owner's uncommitted updates: kept those whole on every shard, undid the others"
            );
            return Ok(newest);
        }
    }

    /// Settles what the shards of `a` answered at `epoch` (an error fails,
    /// a refusal learns the epoch, failed or restarted shards leave or
    /// are refilled); true when the caller must try again.
    async fn settle_all<T>(&self, a: &mut Answers<T>, epoch: u64) -> Result<bool, BlockError> {
        if let Some(e) = a.error.take() {
            return Err(e);
        }
        if a.refused {
            self.owner.refused(epoch).await?;
            return Ok(true);
        }
        self.settle_nodes(a, 0..0).await
    }

    /// The stripes whose blocks of a shard are `blocks`.
    fn stripes_of_blocks(&self, blocks: std::ops::Range<u64>) -> std::ops::Range<u64> {
        let bs = self.bs();
        let strip = self.stripes.strip;
        (blocks.start * bs / strip)..(blocks.end * bs).div_ceil(strip)
    }

    /// The stripes where an update after `through` did not reach every
    /// in-sync shard it was sent to, from each node's undo records
    /// (`held`): a record names the positions its update went to, and an
    /// in-sync shard at one of them without a record of it never took it.
    ///
    /// The strips at hand cannot always tell: with a node lost, K + 1
    /// strips check one equation, and a partial update can leave them one
    /// codeword of a stripe never written (three data strips changed by
    /// the same bytes and the parity not at all, under a code whose rows
    /// sum to zero, decode the lost strip as its old bytes changed by
    /// them too). Records of a build that kept no targets (0) are judged
    /// by the strips alone.
    fn missed_targets(
        &self,
        held: &[(NodeId, Vec<strata_block::UndoRecord>)],
        through: u64,
    ) -> Result<BTreeSet<u64>, BlockError> {
        let count = self.stripes.count(self.geometry.size_bytes());
        let mut updates: BTreeMap<u64, (u64, Vec<std::ops::Range<u64>>)> = BTreeMap::new();
        for r in held.iter().flat_map(|(_, l)| l).filter(|r| r.seq > through) {
            let u = updates.entry(r.seq).or_default();
            u.0 |= r.targets;
            u.1.push(self.stripes_of_blocks(r.range()));
        }
        // Which stripes each node holds a record of each update for, so
        // that a takeover with thousands of records looks each up once.
        let mut kept: std::collections::HashMap<(NodeId, u64), Vec<std::ops::Range<u64>>> =
            std::collections::HashMap::new();
        for (n, l) in held {
            for r in l.iter().filter(|r| r.seq > through) {
                kept.entry((*n, r.seq)).or_default().push(self.stripes_of_blocks(r.range()));
            }
        }
        let holds =
            |node: NodeId, seq: u64, g: u64| kept.get(&(node, seq)).is_some_and(|rs| rs.iter().any(|r| r.contains(&g)));
        let mut missed = BTreeSet::new();
        for (&seq, (targets, ranges)) in &updates {
            if *targets == 0 {
                continue;
            }
            let stripes: BTreeSet<u64> = ranges.iter().flat_map(Clone::clone).filter(|&g| g < count).collect();
            for g in stripes {
                let (m, _) = self.view(self.regions_of(g));
                let slots = self.slots(g)?;
                let lacking = slots
                    .iter()
                    .enumerate()
                    .filter(|&(p, n)| p < 64 && targets & (1 << p) != 0 && m.in_sync.contains(n))
                    .any(|(_, &n)| !holds(n, seq, g));
                if lacking {
                    missed.insert(g);
                }
            }
        }
        Ok(missed)
    }

    /// Of `stripes`, those whose in-sync strips are not one codeword, or
    /// are too few to tell.
    async fn bad_stripes(&self, stripes: BTreeSet<u64>) -> Result<BTreeSet<u64>, Fault> {
        let count = self.stripes.count(self.geometry.size_bytes());
        let mut bad = BTreeSet::new();
        let mut it = stripes.into_iter().filter(|&g| g < count).peekable();
        while let Some(first) = it.next() {
            // A run of consecutive stripes of one chunk.
            let mut run = first..first + 1;
            while let Some(&g) = it.peek() {
                if g != run.end
                    || self.chunk_of(g) != self.chunk_of(first)
                    || run.end - run.start >= REBUILD_RUN_STRIPES
                {
                    break;
                }
                run.end += 1;
                it.next();
            }
            let (runs, _) = self.read_run(&run).await?;
            let strip = self.strip();
            for (i, g) in run.enumerate() {
                let piece: Vec<Option<&[u8]>> =
                    runs.iter().map(|r| r.as_ref().map(|b| &b[i * strip..(i + 1) * strip])).collect();
                let verdict = scrub::judge(&self.codec, &piece).map_err(|e| Fault::Volume(io_error(e.to_string())))?;
                if verdict != scrub::Verdict::Consistent {
                    bad.insert(g);
                }
            }
        }
        Ok(bad)
    }

    /// The strips of `run` (consecutive stripes inside one chunk) from
    /// every shard in sync there, by position (`None` where it is not),
    /// with the nodes of the run's slots.
    async fn read_run(&self, run: &std::ops::Range<u64>) -> Result<(Vec<Option<IoBuf>>, Vec<NodeId>), Fault> {
        let (at, len) = (self.stripes.shard_offset(run.start), (run.end - run.start) as usize * self.strip());
        let (m, _) = self.view(self.regions_of_run(run));
        let slots = self.slots(run.start).map_err(Fault::Volume)?;
        let reads =
            join_all(slots.iter().map(|&n| {
                let m = &m;
                async move {
                    if m.in_sync.contains(&n) { self.read_at(n, m.epoch, at, len).await.map(Some) } else { Ok(None) }
                }
            }))
            .await;
        Ok((reads.into_iter().collect::<Result<Vec<_>, Fault>>()?, slots))
    }

    /// Recomputes the parity of the stripes of `run` (consecutive, inside
    /// one chunk) from their data strips, when all are in sync (after a
    /// roll-back they are consistent already; this covers a shard that
    /// lost its undo to a power cut): one read per data shard and one
    /// write per parity shard for the whole run, under its stripes' locks.
    async fn repair_run(&self, run: std::ops::Range<u64>) -> Result<(), BlockError> {
        let _stripes = self.lock_stripes(&run).await;
        let (at, len) = (self.stripes.shard_offset(run.start), (run.end - run.start) as usize * self.strip());
        let regions = self.regions_of_run(&run);
        loop {
            self.serving().await?;
            let (m, _) = self.view(regions.clone());
            let slots = self.slots(run.start)?;
            let k = self.k();
            if !slots[..k].iter().all(|n| m.in_sync.contains(n)) {
                return Ok(());
            }
            let read = join_all(slots[..k].iter().map(|&n| self.read_at(n, m.epoch, at, len))).await;
            let data = match read.into_iter().collect::<Result<Vec<IoBuf>, Fault>>() {
                Ok(d) => d,
                Err(f) => {
                    self.settle_in(regions.clone(), f, m.epoch).await?;
                    continue;
                }
            };
            // The code works symbol by symbol: the parity of each data
            // position's strips one after the other is each stripe's
            // parity one after the other.
            let data: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
            let parity = self.codec.encode(&data).map_err(|e| io_error(e.to_string()))?;
            let lba = at / self.bs();
            let mut fault = None;
            // Nodes joining a parity slot in a move, where already filled,
            // must agree too.
            let mirrors = self.mirrors(self.chunk_of(run.start));
            'parity: for (j, p) in parity.into_iter().enumerate() {
                let p = Bytes::from(p);
                let joining = mirrors.iter().filter(|&&(q, _)| q == k + j).map(|&(_, n)| n);
                for n in std::iter::once(slots[k + j]).chain(joining) {
                    if !m.in_sync.contains(&n) {
                        continue;
                    }
                    let r = match self.shard(n) {
                        Ok(s) => s.write(m.epoch, lba, p.clone(), false).await.map_err(|e| self.judge(n, e)),
                        Err(f) => Err(f),
                    };
                    if let Err(f) = r {
                        fault = Some(f);
                        break 'parity;
                    }
                }
            }
            match fault {
                None => return Ok(()),
                Some(f) => self.settle_in(regions.clone(), f, m.epoch).await?,
            }
        }
    }

    /// Checks the stripes of `run` (consecutive, inside one chunk) under
    /// their locks: reads every in-sync strip, judges each stripe (see
    /// [`scrub::judge`]) and, with `repair`, writes what is wrong: a
    /// located strip from the others, else the parity from the data.
    async fn check_run(
        &self,
        run: std::ops::Range<u64>,
        repair: bool,
        report: &mut CheckReport,
    ) -> Result<(), BlockError> {
        let _stripes = self.lock_stripes(&run).await;
        let strip = self.strip();
        let (at, len) = (self.stripes.shard_offset(run.start), (run.end - run.start) as usize * strip);
        let regions = self.regions_of_run(&run);
        let (k, width) = (self.k(), self.width());
        let data_bytes = (run.end - run.start) * (k * strip) as u64;
        loop {
            self.serving().await?;
            let (m, _) = self.view(regions.clone());
            let slots = self.slots(run.start)?;
            let at_hand: Vec<usize> = (0..width).filter(|&p| m.in_sync.contains(&slots[p])).collect();
            if at_hand.len() <= k {
                report.bytes_unchecked += data_bytes;
                return Ok(());
            }
            let read = join_all(at_hand.iter().map(|&p| self.read_at(slots[p], m.epoch, at, len))).await;
            let got = match read.into_iter().collect::<Result<Vec<IoBuf>, Fault>>() {
                Ok(d) => d,
                Err(f) => {
                    self.settle_in(regions.clone(), f, m.epoch).await?;
                    continue;
                }
            };
            let mut runs: Vec<Option<&[u8]>> = vec![None; width];
            for (&p, b) in at_hand.iter().zip(&got) {
                runs[p] = Some(&b[..]);
            }
            let internal = |e: super::codec::CodecError| io_error(e.to_string());
            report.bytes_checked += data_bytes;
            if scrub::judge(&self.codec, &runs).map_err(internal)? == scrub::Verdict::Consistent {
                return Ok(());
            }
            // Stripe by stripe, to say where and to write no more than
            // what is wrong.
            let mut writes: Vec<(usize, u64, Vec<u8>)> = Vec::new();
            let mut found = Vec::new();
            for (i, g) in run.clone().enumerate() {
                let piece: Vec<Option<&[u8]>> =
                    runs.iter().map(|r| r.map(|b| &b[i * strip..(i + 1) * strip])).collect();
                let verdict = scrub::judge(&self.codec, &piece).map_err(internal)?;
                let fixes: Vec<(usize, Vec<u8>)> = match &verdict {
                    scrub::Verdict::Consistent | scrub::Verdict::Unchecked => continue,
                    scrub::Verdict::Wrong { position, value } => vec![(*position, value.clone())],
                    scrub::Verdict::Inconsistent if (0..k).all(|p| piece[p].is_some()) => {
                        let data: Vec<&[u8]> = piece[..k].iter().flatten().copied().collect();
                        let parity = self.codec.encode(&data).map_err(internal)?;
                        parity.into_iter().enumerate().map(|(j, v)| (k + j, v)).collect()
                    }
                    scrub::Verdict::Inconsistent => Vec::new(),
                };
                let shard_lba = (at + (i * strip) as u64) / self.bs();
                for (p, v) in &fixes {
                    writes.push((*p, shard_lba, v.clone()));
                }
                found.push((g, verdict, !fixes.is_empty()));
            }
            let mut fault = None;
            if repair {
                'writes: for (p, lba, v) in &writes {
                    if !m.in_sync.contains(&slots[*p]) {
                        continue;
                    }
                    let v = Bytes::from(v.clone());
                    let r = match self.shard(slots[*p]) {
                        Ok(s) => s.write(m.epoch, *lba, v, false).await.map_err(|e| self.judge(slots[*p], e)),
                        Err(f) => Err(f),
                    };
                    if let Err(f) = r {
                        fault = Some(f);
                        break 'writes;
                    }
                }
            }
            if let Some(f) = fault {
                report.bytes_checked -= data_bytes;
                self.settle_in(regions.clone(), f, m.epoch).await?;
                continue;
            }
            let bs = self.bs();
            for (g, verdict, fixable) in found {
                let stripe_lba = g * (k * strip) as u64 / bs;
                let strip_blocks = strip as u64 / bs;
                let d = match verdict {
                    scrub::Verdict::Wrong { position, .. } if position < k => Difference {
                        lba: stripe_lba + position as u64 * strip_blocks,
                        blocks: strip_blocks,
                        wrong: vec![u64::from(slots[position].0)],
                        what: format!("stripe {g}: data strip {position} does not fit the other strips"),
                        repaired: repair,
                    },
                    scrub::Verdict::Wrong { position, .. } => Difference {
                        lba: stripe_lba,
                        blocks: k as u64 * strip_blocks,
                        wrong: vec![u64::from(slots[position].0)],
                        what: format!("stripe {g}: parity strip {} does not fit the data", position - k),
                        repaired: repair,
                    },
                    _ => Difference {
                        lba: stripe_lba,
                        blocks: k as u64 * strip_blocks,
                        wrong: Vec::new(),
                        what: if fixable {
                            format!(
                                "stripe {g}: its strips disagree and no one strip explains it; the parity is rewritten from the data"
                            )
                        } else {
                            format!(
                                "stripe {g}: its strips disagree, and a data strip is not in sync to rewrite the parity from"
                            )
                        },
                        repaired: repair && fixable,
                    },
                };
                report.add(d);
            }
            return Ok(());
        }
    }

    /// Decodes the strips `node` holds in `stripes` (a run inside
    /// dirty-log region `r`, so inside one chunk) from K other shards and
    /// writes them to `shard`: one read per source shard and one write for
    /// the whole run, at the node's rebuild pace. A shard that fails
    /// leaves the in-sync set and the run is tried again.
    ///
    /// The reads run without the stripe locks, so that foreground updates
    /// of the run wait only for the write: the run is read when no update
    /// of region `r` is running, and written under the locks of every
    /// stripe in it only if none started since and the membership is the
    /// one read under (no source left meanwhile); otherwise it is read
    /// again. After [`REBUILD_TRIES_UNLOCKED`] raced tries the locks are
    /// held across the read too, so that a busy region cannot starve the
    /// rebuild.
    async fn rebuild_region(
        &self,
        r: u64,
        stripes: std::ops::Range<u64>,
        node: NodeId,
        shard: &Arc<dyn Shard>,
    ) -> Result<(), BlockError> {
        // Decoding needs the parity the last owner may have left stale.
        self.owner.repaired_before(r..r + 1, |r| self.repair_region(r)).await?;
        let (first, n) = (stripes.start, stripes.end - stripes.start);
        let (k, strip) = (self.k(), self.strip());
        let (at, len) = (self.stripes.shard_offset(first), n as usize * strip);
        self.pace(len as u64).await;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let locked = tries > REBUILD_TRIES_UNLOCKED;
            let mut held = if locked { self.lock_run(&stripes).await } else { Vec::new() };
            self.serving().await?;
            let seq = self.drl.sequence();
            if !locked && !self.drl.region_quiet_since(r, seq) {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            }
            // Again each try: a move may have changed the slots.
            let slots = self.slots(first)?;
            let joins = self.mirrors(self.chunk_of(first)).into_iter().find(|&(_, n)| n == node).map(|(p, _)| p);
            let Some(pos) = slots.iter().position(|&s| s == node).or(joins) else { return Ok(()) };
            let (m, _) = self.view(self.regions_of(first));
            // A node joining a slot in a move is copied from the slot's
            // shard while that one is readable, else decoded like a
            // shard rebuilt in place.
            let mut sources: Vec<usize> = if slots[pos] != node && m.in_sync.contains(&slots[pos]) {
                vec![pos]
            } else {
                (0..self.width()).filter(|&p| p != pos && m.in_sync.contains(&slots[p])).collect()
            };
            if sources.len() < k && sources != [pos] {
                return Err(self.too_few(&stripes, sources.len()));
            }
            sources.truncate(k);
            let read = join_all(sources.iter().map(|&p| self.read_at(slots[p], m.epoch, at, len))).await;
            let got = match read.into_iter().collect::<Result<Vec<IoBuf>, Fault>>() {
                Ok(got) => got,
                Err(f) => {
                    drop(held);
                    self.settle(first, f, m.epoch).await?;
                    continue;
                }
            };
            let out = if sources == [pos] { got[0].to_vec() } else { self.decode_run(&sources, &got, pos)? };
            if !locked {
                held = self.lock_run(&stripes).await;
                if !self.drl.region_quiet_since(r, seq) || self.membership().epoch != m.epoch {
                    continue; // an update or a membership change raced the read
                }
            }
            let lba = at / self.bs();
            // Zeros stay thin on the shard: sent as a deallocate.
            let sent = if is_zero(&out) {
                shard.write_zeroes(m.epoch, lba, len as u64 / self.bs(), true).await
            } else {
                shard.write(m.epoch, lba, Bytes::from(out), false).await
            };
            drop(held);
            match sent {
                Ok(()) => return Ok(()),
                Err(e) => self.settle(first, self.judge(node, e), m.epoch).await?,
            }
        }
    }

    /// The locks of every stripe of `stripes`, each once, in index order:
    /// a writer holds one at a time, so this order cannot deadlock.
    async fn lock_run(&self, stripes: &std::ops::Range<u64>) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let locks: BTreeSet<usize> = stripes.clone().map(|g| (g % STRIPE_LOCKS as u64) as usize).collect();
        let mut held = Vec::with_capacity(locks.len());
        for l in locks {
            held.push(self.locks[l].lock().await);
        }
        held
    }

    /// The updates a write of `pieces` makes: each partial stripe alone,
    /// and consecutive whole stripes of one chunk together, up to `most`. Each is `(stripes, bytes within them, where
    /// they are in the write's buffer)`.
    fn runs(&self, pieces: Vec<StripePiece>, most: u64) -> Vec<(std::ops::Range<u64>, std::ops::Range<u64>, u64)> {
        let sb = self.stripes.stripe_bytes();
        let chunk_stripes = (self.layout().chunk_bytes() / self.stripes.strip).max(1);
        let mut runs: Vec<(std::ops::Range<u64>, std::ops::Range<u64>, u64)> = Vec::new();
        for p in pieces {
            let whole = p.within == (0..sb);
            if let Some((run, within, _)) = runs.last_mut() {
                let joins = whole
                    && within.start == 0
                    && within.end == (run.end - run.start) * sb
                    && run.end == p.stripe
                    && run.start / chunk_stripes == p.stripe / chunk_stripes
                    && run.end - run.start < most;
                if joins {
                    run.end += 1;
                    within.end += sb;
                    continue;
                }
            }
            runs.push((p.stripe..p.stripe + 1, p.within, p.at));
        }
        runs
    }

    /// Repairs, first, the regions of the stripes of `pieces` that the
    /// last owner left dirty and that are not repaired yet.
    async fn repaired_before(&self, pieces: &[StripePiece]) -> Result<(), BlockError> {
        let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else { return Ok(()) };
        if self.drl.unrepaired() == 0 {
            return Ok(());
        }
        let regions = self.regions_of(first.stripe).start..self.regions_of(last.stripe).end;
        self.owner.repaired_before(regions, |r| self.repair_region(r)).await
    }

    /// Makes dirty region `r` consistent: recomputes the parity of its
    /// stripes from their data strips (see [`repair_run`](Self::repair_run)).
    async fn repair_region(&self, r: u64) -> Result<(), BlockError> {
        let stripes = self.stripes_of_region(r);
        let mut g = stripes.start;
        while g < stripes.end {
            let run = g..(g + REBUILD_RUN_STRIPES).min(stripes.end);
            g = run.end;
            self.repair_run(run).await?;
        }
        self.stats.regions_copied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The stripes of dirty-log region `r` that exist.
    fn stripes_of_region(&self, r: u64) -> std::ops::Range<u64> {
        let size = self.stripes.shard_bytes(self.geometry.size_bytes());
        let bytes = self.drl.regions().bytes_of(r, size);
        let s = self.stripes.stripes_in_shard_range(bytes);
        s.start..s.end.min(self.stripes.count(self.geometry.size_bytes()))
    }
}

impl ErasureVolume {
    /// Opens a volume this node has just taken over at `parts.membership`:
    /// fences every in-sync shard with a flush at that epoch, rolls back
    /// (or forward) every update the last owner had not committed, and
    /// serves: the parity of the stripes the last owner left dirty is
    /// recomputed on a task of its own, and before the first read or
    /// write there, whichever comes first.
    ///
    /// # Errors
    ///
    /// [`OpenError::Unavailable`] when some chunk has fewer than K
    /// reachable in-sync shards; [`OpenError::Io`] when the metadata
    /// store fails, the geometry does not fit the stripes, or the volume
    /// was taken over again meanwhile.
    pub async fn open(parts: EcParts) -> Result<ErasureVolume, OpenError> {
        let EcParts { geometry, local, stripes, layout, shards, membership, drl, control, moving } = parts;
        let codec = Codec::new(stripes.data, stripes.parity, stripes.strip as usize)
            .map_err(|e| OpenError::Io(io_error(e.to_string())))?;
        let bs = u64::from(geometry.block_size);
        if !stripes.strip.is_multiple_of(bs) || !layout.chunk_bytes().is_multiple_of(stripes.strip) {
            return Err(OpenError::Io(io_error(format!(
                "strips of {} bytes do not fit {bs}-byte blocks and {}-byte chunks",
                stripes.strip,
                layout.chunk_bytes()
            ))));
        }
        let span = stripes.shard_bytes(geometry.size_bytes());
        let owner =
            Arc::new(Owner::new(geometry, local, layout, shards, membership, drl, control, span, stripes.data, moving));
        let inner = Arc::new(Inner {
            owner,
            stripes,
            codec,
            locks: (0..STRIPE_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
            seqs: Mutex::new(Seqs { next: 1, running: BTreeSet::new(), committed: 0 }),
            ended: tokio::sync::Notify::new(),
            committing: tokio::sync::Mutex::new(()),
            stripes_since_commit: std::sync::atomic::AtomicU64::new(0),
        });
        inner.owner.list_unlisted_stale().await.map_err(OpenError::Io)?;
        inner.owner.flush().await?;
        inner.check_available()?;
        let through = inner.roll_back().await?;
        inner.check_available()?;
        {
            // Updates after the last owner's newest are this one's.
            let mut s = inner.seqs();
            s.next = through + 1;
            s.committed = through;
        }
        crate::owner::repair_in_background(
            &inner,
            |i| &i.owner,
            |i: Arc<Inner>, r| async move { i.repair_region(r).await },
            |i: Arc<Inner>| async move { i.clean(Duration::ZERO).await },
        );
        Ok(ErasureVolume { inner })
    }

    /// Reads every shard of the volume, online, and reports the stripes
    /// whose strips disagree; with `repair`, makes them agree (see
    /// [`crate::check`]) and flushes what it wrote.
    ///
    /// # Errors
    ///
    /// The volume failed or this owner is fenced; what was found so far
    /// is lost with the error (run it again).
    pub async fn check(&self, repair: bool, progress: &CheckProgress) -> Result<CheckReport, BlockError> {
        let i = &self.inner;
        let mut report = CheckReport::default();
        let per_stripe = (i.k() * i.strip()) as u64;
        for r in 0..i.drl.regions().count() {
            // A region the last owner left dirty is made to agree first.
            i.owner.repaired_before(r..r + 1, |r| i.repair_region(r)).await?;
            let stripes = i.stripes_of_region(r);
            let mut g = stripes.start;
            while g < stripes.end {
                let run = g..(g + REBUILD_RUN_STRIPES).min(stripes.end);
                g = run.end;
                let bytes = (run.end - run.start) * per_stripe;
                i.check_run(run, repair, &mut report).await?;
                progress.advance(bytes);
            }
        }
        if report.repaired > 0 {
            i.owner.flush().await?;
        }
        Ok(report)
    }

    /// Starts moving the volume as `mv` says (or retargets the move in
    /// progress); `added` are handles of the nodes new to it. A node that
    /// joins a chunk's slot mirrors the slot's current shard (it takes
    /// every strip written there) and is filled by
    /// [`resync`](Self::resync), copied from that shard when it is
    /// readable, else decoded; every current shard keeps serving until
    /// [`finish_move`](crate::volume::PoolVolume::finish_move) switches.
    ///
    /// # Errors
    ///
    /// The log or the metadata store failed, or this owner is fenced.
    pub async fn begin_move(&self, mv: Moving, added: Vec<Arc<dyn Shard>>) -> Result<(), BlockError> {
        self.inner.owner.begin_move(mv, added).await
    }

    crate::owner::owner_accessors!();

    /// The stripe arithmetic.
    pub fn stripes(&self) -> Stripes {
        self.inner.stripes
    }

    /// The newest update committed (durable everywhere, never rolled
    /// back).
    pub fn committed(&self) -> u64 {
        self.inner.seqs().committed
    }

    /// Commits what has ended and clears the dirty regions no write has
    /// touched for `quiet_for` (as [`crate::ReplicatedVolume::clean`]);
    /// returns how many regions it cleared. The owner runs it every
    /// second, which bounds how much a takeover rolls back.
    ///
    /// # Errors
    ///
    /// As a flush, or the log could not be saved.
    pub async fn clean(&self, quiet_for: Duration) -> Result<u64, BlockError> {
        self.inner.clean(quiet_for).await
    }

    /// Brings the stale shards on `node` back: its old undo is dropped,
    /// every new write goes to it as well, each strip it holds in a region
    /// it missed is decoded from the in-sync shards and written, and once
    /// none is left it rejoins the in-sync set. It is never read before.
    ///
    /// # Errors
    ///
    /// When `node` fails meanwhile (it stays stale), a stripe has fewer
    /// than K in-sync shards, the metadata store fails, or this owner is
    /// fenced.
    pub async fn resync(&self, node: NodeId) -> Result<(), BlockError> {
        let i = &self.inner;
        let shard = i.replica(node).ok_or_else(|| io_error(format!("node {node} holds no shard of this volume")))?;
        if i.membership().in_sync.contains(&node) {
            // In sync, filling the chunks it joined in a move.
            return self.rebuild_missed(node, &shard, false).await;
        }
        shard.rearm();
        let epoch = i.membership().epoch;
        shard.discard_undo(epoch).await.map_err(|e| io_error(format!("node {node}: {e}")))?;
        i.catch_up(node, self.rebuild_missed(node, &shard, true)).await
    }

    /// Decodes every strip `node` holds in a region it missed onto it;
    /// then it rejoins (`rejoin`: it was stale) or is read again (it was
    /// in sync, filling).
    async fn rebuild_missed(&self, node: NodeId, shard: &Arc<dyn Shard>, rejoin: bool) -> Result<(), BlockError> {
        let i = &self.inner;
        loop {
            let missed: Vec<u64> = i.drl.missed(node).unwrap_or_default().iter().collect();
            for batch in missed.chunks(REBUILD_COMMIT_REGIONS) {
                for &r in batch {
                    i.owner.check_interrupt()?;
                    let stripes = i.stripes_of_region(r);
                    let mut g = stripes.start;
                    while g < stripes.end {
                        let run = g..(g + REBUILD_RUN_STRIPES).min(stripes.end);
                        g = run.end;
                        i.rebuild_region(r, run, node, shard).await?;
                        if !i.still_copying(node, rejoin) {
                            return Err(io_error(format!("node {node} failed a write during its rebuild")));
                        }
                    }
                }
                // The node's undo records of updates older than these
                // strips hold bytes from before they were rebuilt: commit
                // those updates (never to be rolled back) before the log
                // says the node holds the regions.
                let through = i.seqs().next - 1;
                i.commit_through(through).await?;
                // The strips must be durable on the node before the log
                // says it holds them (the commit flushes only when it has
                // something to commit): a node killed before its next
                // flush loses what it did not flush, and a region marked
                // copied is never rebuilt again.
                let epoch = i.membership().epoch;
                shard
                    .flush(epoch)
                    .await
                    .map_err(|e| io_error(format!("node {node} failed a flush during its rebuild: {e}")))?;
                if !i.still_copying(node, rejoin) {
                    return Err(io_error(format!("node {node} failed a write during its rebuild")));
                }
                for &r in batch {
                    i.stats.regions_copied.fetch_add(1, Ordering::Relaxed);
                    i.drl.copied(node, r);
                }
            }
            if !rejoin {
                return i.owner.fill_done(node).await;
            }
            if i.caught_up(node, &**shard).await? {
                return Ok(());
            }
        }
    }
}

/// Zeros for write-zeroes and deallocate, which an erasure-coded volume
/// writes as data (their parity is zero too).
static ZEROS: [u8; 16 << 20] = [0; 16 << 20];

impl BlockDevice for ErasureVolume {
    fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    fn usage(&self) -> DeviceUsage {
        self.inner.usage()
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            let bs = self.inner.bs();
            let blocks = buf.len() as u64 / bs;
            if let Err(e) = check_range(self.inner.geometry, lba, blocks) {
                return (buf, Err(e));
            }
            let len = buf.len();
            match self.inner.read(lba, buf).await {
                Ok(b) => (b, Ok(())),
                Err(e) => (IoBuf::zeroed(len), Err(e)),
            }
        })
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let inner = self.inner.clone();
        Box::pin(async move {
            if let Err(e) = write_blocks(inner.geometry, lba, buf.len()) {
                return (buf, Err(e));
            }
            let data = Bytes::from_owner(buf);
            let work = inner.clone().write(lba, data, fua);
            (IoBuf::zeroed(0), run_to_end(&inner.owner, work).await)
        })
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, _deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            check_range(inner.geometry, lba, blocks)?;
            let this = inner.clone();
            run_to_end(&inner.owner, async move { this.zero(lba, blocks).await }).await
        })
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            for &(lba, blocks) in &ranges {
                check_range(inner.geometry, lba, blocks)?;
            }
            let this = inner.clone();
            run_to_end(&inner.owner, async move {
                for (lba, blocks) in ranges {
                    this.zero(lba, blocks).await?;
                }
                Ok(())
            })
            .await
        })
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            self.inner.serving().await?;
            let through = self.inner.seqs().next - 1;
            self.inner.commit_through(through).await
        })
    }
}

impl Inner {
    /// Writes zeros over `blocks` blocks at `lba`, a bounded piece at a
    /// time.
    async fn zero(self: &Arc<Self>, lba: u64, blocks: u64) -> Result<(), BlockError> {
        let per = ZEROS.len() as u64 / self.bs();
        let (mut lba, end) = (lba, lba + blocks);
        while lba < end {
            let n = per.min(end - lba);
            let data = Bytes::from_static(&ZEROS[..(n * self.bs()) as usize]);
            self.clone().write_or_free(lba, data, false, true).await?;
            lba += n;
        }
        Ok(())
    }
}

crate::owner::impl_pool_volume!(ErasureVolume);
