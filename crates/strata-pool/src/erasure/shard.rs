//! One node's shard of an erasure-coded volume, as the owner sees it.

use bytes::Bytes;

use crate::replica::{Replica, ReplicaFuture};

/// A node's shard volume: a [`Replica`] (plain reads, writes and flushes
/// at the owner's epoch, used by repair and rebuild) that also keeps an
/// **undo log** for updates in place.
///
/// Every update the owner makes to a stripe carries a sequence number,
/// increasing over the life of the volume. The node keeps what an update
/// overwrote until the owner *commits* it; a new owner *rolls back* every
/// update not committed anywhere, which brings every shard of every stripe
/// back to one consistent version (`docs/pool.md`, "Erasure coding").
///
/// # Contract
///
/// - [`Shard::write_logged`] keeps the bytes it overwrites durably before
///   the new bytes can land (a node that crashes between the two has the
///   old bytes and their copy, which rolls back to the same bytes).
/// - Only [`Shard::commit`], [`Shard::roll_back`],
///   [`Shard::roll_back_only`] and [`Shard::discard_undo`] forget undo
///   records; the committed mark only grows.
pub trait Shard: Replica {
    /// Writes `data` (whole blocks) at `lba` as update `seq`, keeping the
    /// bytes it overwrites until `seq` is committed, with `targets`: the
    /// stripe positions the update is sent to (see
    /// [`strata_block::UndoRecord::targets`]).
    fn write_logged(&self, epoch: u64, seq: u64, targets: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()>;

    /// The newest sequence number committed here (0 if none).
    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64>;

    /// Forgets the undo of every update up to `seq`: they are durable on
    /// every in-sync shard. Raises the committed mark to `seq`.
    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()>;

    /// Puts back what every update after `after` overwrote, newest first,
    /// forgets them, and raises the committed mark to `after`. Returns how
    /// many updates it undid.
    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64>;

    /// The undo records kept of the updates after `after`, oldest first.
    fn records(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, Vec<strata_block::UndoRecord>>;

    /// Puts back what the updates in `undo` overwrote, newest first,
    /// forgets every record (the other updates stay), and raises the
    /// committed mark to `mark`. Returns how many records it undid.
    fn roll_back_only(&self, epoch: u64, undo: Vec<u64>, mark: u64) -> ReplicaFuture<'_, u64>;

    /// Forgets every undo record without applying it: the shard was stale
    /// and is about to be rewritten where it missed updates.
    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()>;
}

/// The shard in this node's own store: its device and undo log behind
/// the fence its fabric namespace uses too.
pub struct LocalShard {
    replica: crate::replica::LocalReplica,
    undo: std::sync::Arc<dyn strata_block::UndoLog>,
}

impl std::fmt::Debug for LocalShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalShard").field("replica", &self.replica).field("committed", &self.undo.committed()).finish()
    }
}

impl LocalShard {
    /// The shard of `node` on `device` (the same blocks as `undo`'s),
    /// guarded by `fence`.
    pub fn new(
        node: crate::NodeId,
        device: std::sync::Arc<dyn strata_block::BlockDevice>,
        undo: std::sync::Arc<dyn strata_block::UndoLog>,
        fence: std::sync::Arc<strata_block::EpochFence>,
    ) -> LocalShard {
        LocalShard { replica: crate::replica::LocalReplica::new(node, device, fence), undo }
    }

    /// The same shard, on node `sender` keeping owners' notes in `notes`
    /// (see [`crate::LocalReplica::on_node`]).
    pub fn on_node(
        mut self,
        sender: strata_block::Sender,
        notes: Option<std::sync::Arc<dyn strata_block::NoteStore>>,
    ) -> LocalShard {
        self.replica = self.replica.on_node(sender, notes);
        self
    }

    async fn admit(&self, epoch: u64) -> Result<strata_block::FenceGuard, crate::ReplicaError> {
        self.replica.admit(epoch).await
    }
}

impl Replica for LocalShard {
    fn node(&self) -> crate::NodeId {
        self.replica.node()
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()> {
        self.replica.write(epoch, lba, data, fua)
    }

    fn read(&self, epoch: u64, lba: u64, buf: strata_block::IoBuf) -> ReplicaFuture<'_, strata_block::IoBuf> {
        self.replica.read(epoch, lba, buf)
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        self.replica.write_zeroes(epoch, lba, blocks, deallocate)
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        self.replica.flush(epoch)
    }

    fn promise(&self, epoch: u64, duration: std::time::Duration) -> ReplicaFuture<'_, ()> {
        self.replica.promise(epoch, duration)
    }

    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        self.replica.save_note(epoch, note)
    }

    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        self.replica.load_note(epoch)
    }
}

impl Shard for LocalShard {
    fn write_logged(&self, epoch: u64, seq: u64, targets: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            let (_, r) = self.undo.write_logged(seq, targets, lba, strata_block::IoBuf::from_slice(&data)).await;
            r.map_err(crate::replica::from_block)
        })
    }

    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            Ok(self.undo.committed())
        })
    }

    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo.commit(seq).await.map_err(crate::replica::from_block)
        })
    }

    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo.roll_back(after).await.map_err(crate::replica::from_block)
        })
    }

    fn records(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, Vec<strata_block::UndoRecord>> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo.records(after).await.map_err(crate::replica::from_block)
        })
    }

    fn roll_back_only(&self, epoch: u64, undo: Vec<u64>, mark: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo.roll_back_only(undo, mark).await.map_err(crate::replica::from_block)
        })
    }

    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let _in = self.admit(epoch).await?;
            self.undo.discard().await.map_err(crate::replica::from_block)
        })
    }
}
