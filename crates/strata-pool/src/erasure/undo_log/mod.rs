//! [`UndoDevice`]: the durable undo log of one node's shard of an
//! erasure-coded volume, on a device of its own beside the shard volume.
//!
//! It owns the on-disk format of the log, its recovery, and the order of
//! the writes that keep it correct across a crash. It leaves to the owner
//! (`super::volume`) which updates to commit or roll back, and to the
//! caller (the node's target) the epoch fence. It implements
//! [`strata_block::UndoLog`] with the semantics of the in-memory
//! reference, `crate::testing::MemShard`, but durably, and
//! [`BlockDevice`] for the plain reads and writes that keep no undo
//! (repair and rebuild). The design and the crash analysis of the whole
//! mechanism are in `docs/pool.md` ("Erasure coding").
//!
//! # Format
//!
//! The log device holds a header block and a ring of records; the layout,
//! the field tables and the compatibility rule are in `format.rs`.
//!
//! # Placement and recovery
//!
//! Records are appended at the **cursor**, the block after the newest
//! record. A record of `span` blocks goes at the cursor when
//! `cursor + span <= ring_end`, else at block 1 (the blocks it skips at
//! the end of the ring stay unused until the head passes them). It is
//! placed only where it overlaps no block of the chain from the durable
//! head; otherwise the writer waits (see "Full ring").
//!
//! Recovery starts at (`head_block`, `head_lsn`) and follows the chain:
//! the next record must carry the next LSN, pass its crc, and lie exactly
//! where the placement rule above would have put it (at the cursor, or at
//! block 1 when it would not have fitted at the cursor). The chain ends at
//! the first candidate that does not. A record left from an earlier lap
//! has an older LSN; a torn one fails its crc. Records past the end of
//! the chain (the crashed process had appended them, the record before
//! them never landed) are erased: open deallocates every ring block off
//! the chain and flushes the log before any new record is written, so an
//! old record can never carry an LSN the new process hands out again.
//!
//! # Forgetting
//!
//! [`UndoLog::commit`] forgets the records of updates up to the mark;
//! [`UndoLog::roll_back`] and [`UndoLog::discard`] forget every record. A
//! forgotten record still occupies its blocks until every older record is
//! forgotten too: the head only advances past a prefix of the chain, so a
//! forgotten record in the middle is a **hole** until then (its blocks are
//! not reused, and recovery walks through it). On disk, a record of the
//! chain is forgotten when `seq <= committed` and `lsn < commit_lsn`: a
//! record appended after the last header write stays live whatever its
//! seq, as it does in memory. Unlike the in-memory reference, a commit
//! forgets every update up to the committed mark, even when asked for a
//! lower `seq`: a mark says those updates are committed, and the header
//! holds one mark, not a history.
//!
//! # Write ordering (what survives a crash)
//!
//! Assumptions about the devices, from the [`BlockDevice`] contract: a
//! one-block write is atomic (a block reads back as before or as after,
//! never torn); a multi-block write may land in part; only a flush or FUA
//! makes a write durable. Beyond the contract, the log assumes that a
//! completed write over a block that is *durably mapped* (written and
//! flushed since it was last deallocated) survives a process crash: true
//! of a raw device (the page cache outlives the process) and of a
//! strata-store volume (it overwrites a mapped block in place). A write
//! to an unmapped block of a thin device is not: the store maps a new
//! extent for it, and that mapping is durable only at the next flush.
//!
//! - Records are written only over durably mapped ring blocks. The ring
//!   is deallocated at format and past the chain at every open, so each
//!   device tracks which ring blocks are mapped (the chain's blocks are,
//!   after an open): a record that would land on an unmapped block
//!   first *premaps* a window of `PREMAP_BYTES` from there (zeros over
//!   its unmapped blocks, no record lies there), flushes the log, and
//!   only then takes its place. Without this, kill -9 of a node could keep
//!   an overwrite of a data block (mapped, in place) and lose the record
//!   that restores it (a new mapping, not yet flushed): a roll back would
//!   leave the stripe inconsistent, and degraded reads would decode
//!   garbage. The cost is one flush per 8 MiB of the first lap after an
//!   open.
//! - A logged write reads the old bytes, writes the record (no FUA) and
//!   waits until it completes **and every older record has completed**,
//!   and only then writes the new bytes. So if the new bytes of an update
//!   landed, the chain from the head reaches its record: a process crash
//!   (kill -9) at any point leaves the old bytes or a record that restores
//!   them. The record is not written with FUA (a flush per write would
//!   halve the write rate): after a power cut the new bytes may be on the
//!   media and the record not. The owner covers that case by recomputing
//!   the parity of every dirty stripe after a takeover
//!   (`docs/pool.md`, "Erasure coding"); a host flush (`flush`, which
//!   flushes the log too) makes both durable.
//! - Commit, roll back and discard write the header with FUA before they
//!   complete, and free ring blocks only after that write completes, so
//!   the chain that recovery walks is never overwritten.
//! - Roll back writes the old bytes, newest record first, flushes the data
//!   device, then writes the header. A crash before the header write
//!   leaves the same records live, and rolling back again gives the same
//!   bytes.
//!
//! # Invariants (between calls)
//!
//! - `entries` is the chain from the durable head: LSNs
//!   `head_lsn..next_lsn`, contiguous, in ring order; its blocks (and the
//!   blocks skipped at the end of the ring) are exactly the ring blocks
//!   in use. An empty chain has `cursor == head_block`.
//! - A record is popped off the chain only after a header whose head is
//!   past it is durable, and only if its own write completed.
//! - The committed mark never goes down.
//! - After a log write or header write fails, the device is *failed*:
//!   logged writes, commits, roll backs and discards fail with
//!   [`BlockError::Failed`] until it is opened again.
//!
//! # Full ring
//!
//! A logged write that finds no room waits for a commit, roll back or
//! discard to free some, at most [`FULL_WAIT`], then fails with
//! [`BlockError::Io`] ("undo log full") having logged and written
//! nothing. A single write whose record is larger than the whole ring
//! fails at once.
//!
//! # Cancel safety
//!
//! Logged writes, commits, roll backs and discards run on a tokio task of
//! their own and go on to the end when their future is dropped, so no
//! dropped future leaves ring space reserved, a record half-ordered or a
//! header write racing the next one. The plain [`BlockDevice`] methods
//! pass straight to the data device and share its cancel safety.
//!
//! [`BlockDevice`]: strata_block::BlockDevice
//! [`UndoLog::commit`]: strata_block::UndoLog::commit
//! [`UndoLog::roll_back`]: strata_block::UndoLog::roll_back
//! [`UndoLog::discard`]: strata_block::UndoLog::discard
//! [`BlockError::Failed`]: strata_block::BlockError::Failed
//! [`BlockError::Io`]: strata_block::BlockError::Io

mod device;
mod format;

pub use device::{FULL_WAIT, RingRecord, UndoDevice};
pub use format::{FORMAT_VERSION, MIN_LOG_BLOCKS, UndoError};
