//! Updates in place that can be undone: the node side of an
//! erasure-coded volume's shard.
//!
//! An erasure-coded stripe spans several nodes; an owner that dies half
//! way through updating one leaves some strips new and some old, and the
//! stripe no longer decodes (the RAID "write hole"). Each shard node
//! therefore keeps what every update overwrote until the owner *commits*
//! the update (it is durable on every shard), and a new owner *rolls
//! back* every update that was not committed anywhere. The design and the
//! crash analysis are in `docs/pool.md` ("Erasure coding").

use crate::{BlockError, BlockFuture, IoBuf};

/// A device whose writes can be logged for undo. Implemented beside a
/// [`crate::BlockDevice`] (the same blocks): plain writes through the
/// device keep no undo (repair and rebuild), logged writes do.
///
/// Implementations MUST:
/// - make the undo record of a logged write durable no later than its new
///   bytes: after any crash, either the old bytes are in place or a record
///   that restores them is (a flush makes both durable);
/// - keep every record of an update after the committed mark until
///   [`UndoLog::commit`], [`UndoLog::roll_back`] or
///   [`UndoLog::discard`] forgets it;
/// - make [`UndoLog::commit`] and [`UndoLog::roll_back`] durable before
///   they complete (their marks survive a crash), and never lower the
///   committed mark.
pub trait UndoLog: Send + Sync {
    /// Writes `buf` (whole blocks) at `lba` as update `seq`, first keeping
    /// the bytes it overwrites, and `targets` with them (see
    /// [`UndoRecord::targets`]).
    fn write_logged(
        &self,
        seq: u64,
        targets: u64,
        lba: u64,
        buf: IoBuf,
    ) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)>;

    /// The newest update committed here (0 if none).
    fn committed(&self) -> u64;

    /// Forgets the undo of every update up to `seq` and raises the
    /// committed mark to it.
    fn commit(&self, seq: u64) -> BlockFuture<'_, Result<(), BlockError>>;

    /// Puts back what every update after `after` overwrote, newest first,
    /// forgets those records, raises the committed mark to `after`, and
    /// returns how many updates it undid.
    fn roll_back(&self, after: u64) -> BlockFuture<'_, Result<u64, BlockError>>;

    /// Forgets every record without applying it (the shard is stale and
    /// about to be rewritten where it missed updates).
    fn discard(&self) -> BlockFuture<'_, Result<(), BlockError>>;

    /// The records kept of updates after `after`, oldest first: what a
    /// new owner looks at to tell the updates that reached every shard
    /// of their stripes (kept) from those that did not (undone).
    fn records(&self, after: u64) -> BlockFuture<'_, Result<Vec<UndoRecord>, BlockError>>;

    /// Puts back what the updates in `undo` overwrote, newest first,
    /// forgets every record (those of the other updates stay applied),
    /// raises the committed mark to `mark`, and returns how many records
    /// it undid. `undo` names updates after the committed mark; the
    /// caller includes every newer update that overlaps one of them (an
    /// older update is never undone under a newer one it kept).
    fn roll_back_only(&self, undo: Vec<u64>, mark: u64) -> BlockFuture<'_, Result<u64, BlockError>>;
}

/// A record an [`UndoLog`] keeps: update `seq` overwrote `blocks` blocks
/// at `lba`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UndoRecord {
    /// The owner's update sequence number.
    pub seq: u64,
    /// First block overwritten.
    pub lba: u64,
    /// Blocks overwritten.
    pub blocks: u64,
    /// The positions of its stripe the owner sent the update to (bit `p`
    /// for position `p`), so that a new owner can tell an update that
    /// missed an in-sync shard from one that reached all of them, even
    /// where the strips at hand would still decode; 0 when unknown (a
    /// record kept by a build that did not record them).
    pub targets: u64,
}

impl UndoRecord {
    /// Bytes of one record in a list on the wire: seq, lba, blocks and
    /// targets, each a little-endian u64.
    pub const WIRE_LEN: usize = 32;

    /// The blocks it overwrote.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.lba..self.lba.saturating_add(self.blocks)
    }
}
