//! One node's copy of one volume, as the volume's owner sees it.
//!
//! A [`Replica`] is reached locally ([`LocalReplica`]: the node's own store
//! behind the same [`EpochFence`] the fabric uses) or over the internal
//! fabric ([`crate::fabric::FabricReplica`]). Every operation carries the
//! owner's epoch, and a replica refuses an epoch older than the newest it
//! has seen ([`ReplicaError::Stale`]).
//!
//! # Cancellation
//!
//! Dropping a replica future is allowed, with the [`BlockDevice`]
//! contract's consequences: a dropped write may still land. The
//! replicated volume never drops them (it runs each write to the end on a
//! task of its own), so replicas never diverge behind its back.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use strata_block::{BlockDevice, BlockError, EpochFence, IoBuf, NoteStore, Sender};

use crate::drl::NodeId;

/// Why a replica did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The replica has seen a newer epoch: the sender no longer owns the
    /// volume and must stop serving it.
    #[error("fenced: the replica has seen a newer epoch than {0}")]
    Stale(u64),
    /// The replica's thin pool is full; nothing was written there.
    #[error("no space on the replica")]
    NoSpace,
    /// The request does not fit the replica (a size disagreement): a bug
    /// or a resize in progress, not a failed replica.
    #[error("request outside the replica: {0}")]
    Invalid(String),
    /// The replica failed or cannot be reached: it must leave the in-sync
    /// set.
    #[error("replica unavailable: {0}")]
    Unavailable(String),
    /// The connection to the replica's node was made again since the
    /// replica last trusted it (link `generation`): the node may have
    /// restarted and lost writes it had not flushed. Nothing was sent. The
    /// owner marks what it may have lost (every dirty region) as missed,
    /// [`Replica::trust`]s the generation and tries again: a node that
    /// comes back is refilled, never ejected.
    #[error("replica reconnected (link generation {generation}): {reason}")]
    Reconnected {
        /// The link generation the replica now sits on.
        generation: u64,
        /// Why, for the log.
        reason: String,
    },
    /// The replica promised the volume's last owner to let no newer one in
    /// for this long: the sender (a new owner) waits and tries again.
    #[error("the replica keeps a promise to the last owner for {0:?} more")]
    Promised(std::time::Duration),
}

/// A fence's refusal in the replica's terms.
pub fn refused(r: strata_block::Refused) -> ReplicaError {
    match r {
        strata_block::Refused::Stale(s) => ReplicaError::Stale(s.offered),
        strata_block::Refused::Promised { left, .. } => ReplicaError::Promised(left),
    }
}

impl ReplicaError {
    /// True when the replica cannot take the request, so that it leaves
    /// the in-sync set (or stops catching up): it failed, or it keeps a
    /// promise to the volume's last owner. A takeover's fence flush waits
    /// a promise out; a node that missed that flush (down or frozen then)
    /// and came back still promised meets this owner's writes with it,
    /// and must not fail them.
    pub fn is_replica_fault(&self) -> bool {
        matches!(self, ReplicaError::Unavailable(_) | ReplicaError::Promised(_))
    }
}

/// A boxed replica future.
pub type ReplicaFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ReplicaError>> + Send + 'a>>;

/// One copy of a volume.
pub trait Replica: Send + Sync + Debug {
    /// The node that holds it.
    fn node(&self) -> NodeId;

    /// Trusts the replica's current connection again: called when a resync
    /// starts, after a reconnection made it fail (see
    /// [`crate::fabric::FabricReplica`]). Local replicas need nothing.
    fn rearm(&self) {}

    /// Trusts link `generation` (from [`ReplicaError::Reconnected`]),
    /// once the owner has recorded what the node may have lost. Unlike
    /// [`rearm`](Self::rearm) it trusts that generation only: a later
    /// reconnection is reported again. Local replicas need nothing.
    fn trust(&self, _generation: u64) {}

    /// Writes `data` (whole blocks) at `lba`; `fua` makes it durable first.
    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()>;

    /// Reads `buf.len()` bytes of blocks at `lba` into `buf`.
    fn read(&self, epoch: u64, lba: u64, buf: IoBuf) -> ReplicaFuture<'_, IoBuf>;

    /// Makes `blocks` blocks at `lba` read as zeros, releasing their space
    /// when `deallocate`.
    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()>;

    /// Makes every completed write durable. A flush with a newer epoch is
    /// admitted only after every command of older epochs has finished: the
    /// fence a new owner sends first.
    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()>;

    /// Asks the replica to let no owner newer than `epoch` in for
    /// `duration` ([`strata_block::EpochFence::promise`]): what lets an
    /// owner go on serving while the metadata store is out of reach.
    /// Replicas that take no part in promises grant it at once.
    fn promise(&self, epoch: u64, duration: std::time::Duration) -> ReplicaFuture<'_, ()> {
        let _ = (epoch, duration);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Has the replica's node keep `note` for the volume's owners (its
    /// dirty-region log, while the metadata store does not answer),
    /// durably, replacing the one before.
    ///
    /// # Errors
    ///
    /// [`ReplicaError::Invalid`] where the replica keeps no notes.
    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        let _ = (epoch, note);
        Box::pin(std::future::ready(Err(ReplicaError::Invalid("this replica keeps no notes".into()))))
    }

    /// The note the replica's node keeps for the volume (empty: none).
    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        let _ = epoch;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// The replica in this node's own store, behind its fence.
pub struct LocalReplica {
    node: NodeId,
    device: Arc<dyn BlockDevice>,
    fence: Arc<EpochFence>,
    /// Who this node is to the fence (its commands and the fabric's from
    /// the same node are one sender).
    sender: Sender,
    notes: Option<Arc<dyn NoteStore>>,
}

impl std::fmt::Debug for LocalReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalReplica").field("node", &self.node).field("epoch", &self.fence.epoch()).finish()
    }
}

impl LocalReplica {
    /// The copy on `device`, guarded by `fence` (the one the node's fabric
    /// namespace for this volume uses too).
    pub fn new(node: NodeId, device: Arc<dyn BlockDevice>, fence: Arc<EpochFence>) -> LocalReplica {
        LocalReplica { node, device, fence, sender: strata_block::ANONYMOUS, notes: None }
    }

    /// The same replica, whose commands come from `sender` (the node's
    /// fabric host NQN's [`strata_block::sender_id`]) and whose node keeps
    /// owners' notes in `notes`.
    pub fn on_node(mut self, sender: Sender, notes: Option<Arc<dyn NoteStore>>) -> LocalReplica {
        self.sender = sender;
        self.notes = notes;
        self
    }

    /// The fence.
    pub fn fence(&self) -> &Arc<EpochFence> {
        &self.fence
    }

    /// Admits a command at `epoch` from this node.
    pub(crate) async fn admit(&self, epoch: u64) -> Result<strata_block::FenceGuard, ReplicaError> {
        self.fence.admit(epoch, self.sender).await.map_err(refused)
    }
}

/// Maps a store error to the replica's terms.
pub fn from_block(e: BlockError) -> ReplicaError {
    match e {
        BlockError::NoSpace => ReplicaError::NoSpace,
        e @ (BlockError::OutOfRange { .. } | BlockError::BadBuffer { .. }) => ReplicaError::Invalid(e.to_string()),
        e => ReplicaError::Unavailable(e.to_string()),
    }
}

impl Replica for LocalReplica {
    fn node(&self) -> NodeId {
        self.node
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _admitted = self.admit(epoch).await?;
            let (_, r) = self.device.write(lba, IoBuf::from_slice(&data), fua).await;
            r.map_err(from_block)
        })
    }

    fn read(&self, epoch: u64, lba: u64, buf: IoBuf) -> ReplicaFuture<'_, IoBuf> {
        Box::pin(async move {
            let _admitted = self.admit(epoch).await?;
            let (buf, r) = self.device.read(lba, buf).await;
            r.map(|()| buf).map_err(from_block)
        })
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _admitted = self.admit(epoch).await?;
            self.device.write_zeroes(lba, blocks, deallocate).await.map_err(from_block)
        })
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _admitted = self.admit(epoch).await?;
            self.device.flush().await.map_err(from_block)
        })
    }

    fn promise(&self, epoch: u64, duration: std::time::Duration) -> ReplicaFuture<'_, ()> {
        Box::pin(std::future::ready(self.fence.promise(epoch, self.sender, duration).map_err(refused)))
    }

    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let notes = self.notes.as_ref().ok_or_else(|| ReplicaError::Invalid("this node keeps no notes".into()))?;
            let _admitted = self.admit(epoch).await?;
            notes.save(note).await.map_err(from_block)
        })
    }

    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        Box::pin(async move {
            let Some(notes) = &self.notes else { return Ok(Vec::new()) };
            let _admitted = self.admit(epoch).await?;
            notes.load().await.map_err(from_block)
        })
    }
}
