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
/// - Only [`Shard::commit`] and [`Shard::roll_back`] and
///   [`Shard::discard_undo`] forget undo records; the committed mark
///   only grows.
pub trait Shard: Replica {
    /// Writes `data` (whole blocks) at `lba` as update `seq`, keeping the
    /// bytes it overwrites until `seq` is committed.
    fn write_logged(&self, epoch: u64, seq: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()>;

    /// The newest sequence number committed here (0 if none).
    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64>;

    /// Forgets the undo of every update up to `seq`: they are durable on
    /// every in-sync shard. Raises the committed mark to `seq`.
    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()>;

    /// Puts back what every update after `after` overwrote, newest first,
    /// forgets them, and raises the committed mark to `after`. Returns how
    /// many updates it undid.
    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64>;

    /// Forgets every undo record without applying it: the shard was stale
    /// and is about to be rewritten where it missed updates.
    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()>;
}
