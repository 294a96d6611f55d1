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
//! The log device is cut into blocks of the data device's block size.
//! Block 0 is the **log header**; blocks `1..ring_end` are a **ring** of
//! records. Integers are little-endian. Bytes past the fields of a block
//! are written as zeros and not read (room for later versions).
//!
//! Log header (block 0):
//!
//! | offset | size | field        | meaning                                                          |
//! |-------:|-----:|--------------|------------------------------------------------------------------|
//! | 0      | 8    | `magic`      | `b"STRUNDOL"`                                                    |
//! | 8      | 4    | `version`    | [`FORMAT_VERSION`]                                               |
//! | 12     | 4    | `block_size` | bytes per block, equal to both devices'                          |
//! | 16     | 8    | `ring_end`   | the ring is blocks `1..ring_end` (the log's size at format time) |
//! | 24     | 8    | `committed`  | the committed mark                                               |
//! | 32     | 8    | `commit_lsn` | the next LSN when the header was written (see "Forgetting")      |
//! | 40     | 8    | `head_block` | ring block where the chain of records starts                     |
//! | 48     | 8    | `head_lsn`   | LSN of the record the chain starts with                          |
//! | 56     | 4    | `crc`        | crc32c of bytes 0..56                                            |
//!
//! Record: one header block followed by `blocks` blocks of old data (the
//! bytes the logged write overwrote at `lba`). A record never wraps: it
//! lies inside `1..ring_end`.
//!
//! | offset | size | field    | meaning                                                     |
//! |-------:|-----:|----------|-------------------------------------------------------------|
//! | 0      | 8    | `magic`  | `b"STRUNDOR"`                                               |
//! | 8      | 8    | `lsn`    | log sequence number, one more than the previous record's    |
//! | 16     | 8    | `seq`    | the owner's update sequence number                          |
//! | 24     | 8    | `lba`    | first data block overwritten                                |
//! | 32     | 8    | `blocks` | number of old data blocks that follow (at least 1)          |
//! | 40     | 4    | `crc`    | crc32c of bytes 0..40 of this block, then of the old data   |
//!
//! Compatibility: a log whose `version` is not [`FORMAT_VERSION`] is
//! refused ([`UndoError::UnsupportedVersion`]); there is no older version
//! yet. An all-zero block 0 is a log never written, formatted on open.
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
//!   first *premaps* a window of [`PREMAP_BYTES`] from there (zeros over
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

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use strata_block::{
    BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, ReadData, UndoLog, UndoRecord, blocks_in,
    check_range,
};
use tokio::sync::Notify;

use crate::owner::io_error;

/// The log format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The smallest log: the header and a ring of two blocks (one record of
/// one block).
pub const MIN_LOG_BLOCKS: u64 = 3;

/// How long a logged write waits for room in a full ring before failing.
pub const FULL_WAIT: Duration = Duration::from_secs(10);

/// First block of the ring (block 0 is the header).
const RING_START: u64 = 1;

/// Blocks read at a time when recovery checks a record's crc.
const CHECK_CHUNK_BLOCKS: u64 = 64;

/// Bytes of the ring mapped at once ahead of a record that needs
/// unmapped blocks (see "Write ordering"): one flush per this much of
/// the first lap after an open.
const PREMAP_BYTES: u64 = 8 << 20;

/// Bytes of zeros one premapping write carries.
const PREMAP_WRITE_BYTES: u64 = 1 << 20;

/// Log header fields; offsets as in the module's format table.
mod header {
    pub const MAGIC: [u8; 8] = *b"STRUNDOL";
    pub const MAGIC_OFFSET: usize = 0;
    pub const MAGIC_LEN: usize = 8;
    pub const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC_LEN;
    pub const VERSION_LEN: usize = 4;
    pub const BLOCK_SIZE_OFFSET: usize = VERSION_OFFSET + VERSION_LEN;
    pub const BLOCK_SIZE_LEN: usize = 4;
    pub const RING_END_OFFSET: usize = BLOCK_SIZE_OFFSET + BLOCK_SIZE_LEN;
    pub const RING_END_LEN: usize = 8;
    pub const COMMITTED_OFFSET: usize = RING_END_OFFSET + RING_END_LEN;
    pub const COMMITTED_LEN: usize = 8;
    pub const COMMIT_LSN_OFFSET: usize = COMMITTED_OFFSET + COMMITTED_LEN;
    pub const COMMIT_LSN_LEN: usize = 8;
    pub const HEAD_BLOCK_OFFSET: usize = COMMIT_LSN_OFFSET + COMMIT_LSN_LEN;
    pub const HEAD_BLOCK_LEN: usize = 8;
    pub const HEAD_LSN_OFFSET: usize = HEAD_BLOCK_OFFSET + HEAD_BLOCK_LEN;
    pub const HEAD_LSN_LEN: usize = 8;
    pub const CRC_OFFSET: usize = HEAD_LSN_OFFSET + HEAD_LSN_LEN;
    pub const CRC_LEN: usize = 4;
    /// Bytes of the header that carry fields.
    pub const LEN: usize = CRC_OFFSET + CRC_LEN;
}

/// Record header fields; offsets as in the module's format table.
mod record {
    pub const MAGIC: [u8; 8] = *b"STRUNDOR";
    pub const MAGIC_OFFSET: usize = 0;
    pub const MAGIC_LEN: usize = 8;
    pub const LSN_OFFSET: usize = MAGIC_OFFSET + MAGIC_LEN;
    pub const LSN_LEN: usize = 8;
    pub const SEQ_OFFSET: usize = LSN_OFFSET + LSN_LEN;
    pub const SEQ_LEN: usize = 8;
    pub const LBA_OFFSET: usize = SEQ_OFFSET + SEQ_LEN;
    pub const LBA_LEN: usize = 8;
    pub const BLOCKS_OFFSET: usize = LBA_OFFSET + LBA_LEN;
    pub const BLOCKS_LEN: usize = 8;
    pub const CRC_OFFSET: usize = BLOCKS_OFFSET + BLOCKS_LEN;
    pub const CRC_LEN: usize = 4;
    /// Bytes of the record header block that carry fields.
    pub const LEN: usize = CRC_OFFSET + CRC_LEN;
}

/// The smallest block size that holds either header.
const MIN_BLOCK_SIZE: u32 = if header::LEN > record::LEN { header::LEN as u32 } else { record::LEN as u32 };

/// Why [`UndoDevice::open`] could not open a log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UndoError {
    /// The data and log devices have different block sizes.
    #[error("the data device has {data}-byte blocks but the log device has {log}-byte blocks")]
    BlockSizeMismatch {
        /// Block size of the data device.
        data: u32,
        /// Block size of the log device.
        log: u32,
    },
    /// Blocks too small to hold a header.
    #[error("{block_size}-byte blocks cannot hold an undo log header ({min} bytes)")]
    BlockSizeTooSmall {
        /// The devices' block size.
        block_size: u32,
        /// The smallest supported.
        min: u32,
    },
    /// The log device has too few blocks.
    #[error("a log device of {blocks} blocks is too small (at least {min})")]
    LogTooSmall {
        /// Blocks of the log device.
        blocks: u64,
        /// The fewest an undo log needs.
        min: u64,
    },
    /// Block 0 is neither zeros nor an undo log header.
    #[error("block 0 of the log device is not an undo log header (magic {found:02x?})")]
    NotAnUndoLog {
        /// The first eight bytes found.
        found: [u8; 8],
    },
    /// The log was written in a format this build does not read.
    #[error("undo log format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The header's crc does not match its bytes.
    #[error("undo log header crc is {stored:#010x} but its bytes give {computed:#010x}: the header is corrupt")]
    HeaderChecksum {
        /// crc stored in the header.
        stored: u32,
        /// crc of the header's bytes.
        computed: u32,
    },
    /// The header was written for another block size.
    #[error("the undo log header was written with {header}-byte blocks, the device has {device}-byte blocks")]
    HeaderBlockSize {
        /// Block size in the header.
        header: u32,
        /// Block size of the device.
        device: u32,
    },
    /// The log device is now smaller than the ring it was formatted with.
    #[error("the undo log ring ends at block {ring_end} but the log device has only {blocks} blocks")]
    LogShrunk {
        /// End of the ring, from the header.
        ring_end: u64,
        /// Blocks of the log device.
        blocks: u64,
    },
    /// A header field (with a valid crc) holds an impossible value.
    #[error("undo log header field {field} = {value} is out of range")]
    BadHeaderField {
        /// Name of the field, as in the format table.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A live record (with a valid crc) covers blocks outside the data
    /// device: the data device shrank, or belongs to another log.
    #[error("undo record LSN {lsn} covers blocks {lba}+{blocks}, outside the data device ({num_blocks} blocks)")]
    RecordOutOfRange {
        /// The record's LSN.
        lsn: u64,
        /// First block it restores.
        lba: u64,
        /// Blocks it restores.
        blocks: u64,
        /// Blocks of the data device.
        num_blocks: u64,
    },
    /// Reading or writing a device failed.
    #[error("undo log I/O failed: {0}")]
    Io(#[from] BlockError),
}

/// A live undo record where it lies in the ring, as
/// [`UndoDevice::ring_records`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingRecord {
    /// Log sequence number.
    pub lsn: u64,
    /// The update it belongs to.
    pub seq: u64,
    /// First data block it restores.
    pub lba: u64,
    /// Data blocks it restores.
    pub blocks: u64,
    /// Ring block holding its header.
    pub ring_block: u64,
}

fn le_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

fn le_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

/// The log header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    block_size: u32,
    ring_end: u64,
    committed: u64,
    commit_lsn: u64,
    head_block: u64,
    head_lsn: u64,
}

impl Header {
    /// Writes the header into `block` (at least [`header::LEN`] bytes,
    /// which [`MIN_BLOCK_SIZE`] ensures; bytes past the fields are left
    /// as they are).
    fn encode(&self, block: &mut [u8]) {
        use header::*;
        block[MAGIC_OFFSET..][..MAGIC_LEN].copy_from_slice(&MAGIC);
        block[VERSION_OFFSET..][..VERSION_LEN].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        block[BLOCK_SIZE_OFFSET..][..BLOCK_SIZE_LEN].copy_from_slice(&self.block_size.to_le_bytes());
        block[RING_END_OFFSET..][..RING_END_LEN].copy_from_slice(&self.ring_end.to_le_bytes());
        block[COMMITTED_OFFSET..][..COMMITTED_LEN].copy_from_slice(&self.committed.to_le_bytes());
        block[COMMIT_LSN_OFFSET..][..COMMIT_LSN_LEN].copy_from_slice(&self.commit_lsn.to_le_bytes());
        block[HEAD_BLOCK_OFFSET..][..HEAD_BLOCK_LEN].copy_from_slice(&self.head_block.to_le_bytes());
        block[HEAD_LSN_OFFSET..][..HEAD_LSN_LEN].copy_from_slice(&self.head_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&block[..CRC_OFFSET]);
        block[CRC_OFFSET..][..CRC_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads a header from block 0, checking its magic, version and crc,
    /// and that its fields fit a log device of `geometry`.
    fn decode(block: &[u8], geometry: Geometry) -> Result<Header, UndoError> {
        use header::*;
        let short = UndoError::BlockSizeTooSmall { block_size: geometry.block_size, min: MIN_BLOCK_SIZE };
        let magic: [u8; 8] =
            block.get(MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN).ok_or(short)?.try_into().unwrap_or([0; 8]);
        if magic != MAGIC {
            return Err(UndoError::NotAnUndoLog { found: magic });
        }
        let field = |off: usize| le_u64(block, off).unwrap_or(0);
        // The block holds at least MAGIC_LEN bytes; the rest are read with
        // checked getters, and a short block fails the crc below.
        let version = le_u32(block, VERSION_OFFSET).unwrap_or(0);
        if version != FORMAT_VERSION {
            return Err(UndoError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
        }
        let stored = le_u32(block, CRC_OFFSET).unwrap_or(0);
        let computed = crc32c::crc32c(block.get(..CRC_OFFSET).unwrap_or_default());
        if stored != computed {
            return Err(UndoError::HeaderChecksum { stored, computed });
        }
        let h = Header {
            block_size: le_u32(block, BLOCK_SIZE_OFFSET).unwrap_or(0),
            ring_end: field(RING_END_OFFSET),
            committed: field(COMMITTED_OFFSET),
            commit_lsn: field(COMMIT_LSN_OFFSET),
            head_block: field(HEAD_BLOCK_OFFSET),
            head_lsn: field(HEAD_LSN_OFFSET),
        };
        if h.block_size != geometry.block_size {
            return Err(UndoError::HeaderBlockSize { header: h.block_size, device: geometry.block_size });
        }
        if h.ring_end < MIN_LOG_BLOCKS {
            return Err(UndoError::BadHeaderField { field: "ring_end", value: h.ring_end });
        }
        if h.ring_end > geometry.num_blocks {
            return Err(UndoError::LogShrunk { ring_end: h.ring_end, blocks: geometry.num_blocks });
        }
        if !(RING_START..h.ring_end).contains(&h.head_block) {
            return Err(UndoError::BadHeaderField { field: "head_block", value: h.head_block });
        }
        if h.head_lsn == 0 {
            return Err(UndoError::BadHeaderField { field: "head_lsn", value: h.head_lsn });
        }
        Ok(h)
    }
}

/// A record header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordHeader {
    lsn: u64,
    seq: u64,
    lba: u64,
    blocks: u64,
}

impl RecordHeader {
    /// Writes the header into `block` (zeros past the fields, which the
    /// caller provides), with the crc of its fields and of `old`.
    fn encode(&self, block: &mut [u8], old: &[u8]) {
        use record::*;
        block[MAGIC_OFFSET..][..MAGIC_LEN].copy_from_slice(&MAGIC);
        block[LSN_OFFSET..][..LSN_LEN].copy_from_slice(&self.lsn.to_le_bytes());
        block[SEQ_OFFSET..][..SEQ_LEN].copy_from_slice(&self.seq.to_le_bytes());
        block[LBA_OFFSET..][..LBA_LEN].copy_from_slice(&self.lba.to_le_bytes());
        block[BLOCKS_OFFSET..][..BLOCKS_LEN].copy_from_slice(&self.blocks.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&block[..CRC_OFFSET]), old);
        block[CRC_OFFSET..][..CRC_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    /// The fields, the stored crc and the crc of the fields (to be
    /// extended over the old data), or `None` when `block` is not a
    /// record header.
    fn decode(block: &[u8]) -> Option<(RecordHeader, u32, u32)> {
        use record::*;
        if block.get(MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN)? != MAGIC {
            return None;
        }
        let h = RecordHeader {
            lsn: le_u64(block, LSN_OFFSET)?,
            seq: le_u64(block, SEQ_OFFSET)?,
            lba: le_u64(block, LBA_OFFSET)?,
            blocks: le_u64(block, BLOCKS_OFFSET)?,
        };
        let stored = le_u32(block, CRC_OFFSET)?;
        Some((h, stored, crc32c::crc32c(block.get(..CRC_OFFSET)?)))
    }
}

/// Where a record of `span` blocks goes in a ring `RING_START..end` whose
/// chain starts at `head` and ends at `cursor` (`empty` when the chain
/// holds no record), or `None` when it would overlap the chain.
///
/// A record goes at the cursor if it fits before the end of the ring,
/// else at the ring's start; recovery relies on this rule being the only
/// one.
fn place(end: u64, head: u64, cursor: u64, empty: bool, span: u64) -> Option<u64> {
    let at = if cursor.checked_add(span)? <= end { cursor } else { RING_START };
    let stop = at.checked_add(span)?;
    if empty {
        // The whole ring is free.
        return (stop <= end).then_some(at);
    }
    if cursor > head {
        // In use: head..cursor. Free: cursor..end and RING_START..head.
        (at == cursor || stop <= head).then_some(at)
    } else {
        // In use: head..end and RING_START..cursor (all of it when equal).
        (at == cursor && stop <= head).then_some(at)
    }
}

/// The block after a record at `at` of `span` blocks.
fn after(end: u64, at: u64, span: u64) -> u64 {
    let next = at + span;
    if next >= end { RING_START } else { next }
}

/// A record of the chain, in memory.
#[derive(Debug, Clone, Copy)]
struct Entry {
    lsn: u64,
    block: u64,
    seq: u64,
    lba: u64,
    blocks: u64,
    forgotten: bool,
}

impl Entry {
    fn span(&self) -> u64 {
        self.blocks + 1
    }
}

/// Which ring blocks are durably mapped: written and flushed since the
/// log last deallocated them, so that a write over them lands in place.
#[derive(Debug, Clone)]
struct Mapped {
    words: Vec<u64>,
}

impl Mapped {
    /// No block of `0..blocks` mapped.
    fn none(blocks: u64) -> Mapped {
        Mapped { words: vec![0; blocks.div_ceil(64) as usize] }
    }

    fn get(&self, b: u64) -> bool {
        self.words.get((b / 64) as usize).is_some_and(|w| w >> (b % 64) & 1 == 1)
    }

    fn set(&mut self, blocks: std::ops::Range<u64>) {
        for b in blocks {
            if let Some(w) = self.words.get_mut((b / 64) as usize) {
                *w |= 1 << (b % 64);
            }
        }
    }

    fn all(&self, blocks: std::ops::Range<u64>) -> bool {
        blocks.into_iter().all(|b| self.get(b))
    }

    /// The runs of unmapped blocks in `blocks`.
    fn gaps(&self, blocks: std::ops::Range<u64>) -> Vec<std::ops::Range<u64>> {
        let mut out: Vec<std::ops::Range<u64>> = Vec::new();
        for b in blocks.filter(|&b| !self.get(b)) {
            match out.last_mut() {
                Some(r) if r.end == b => r.end = b + 1,
                _ => out.push(b..b + 1),
            }
        }
        out
    }
}

/// What [`State::allocate`] found.
enum Placed {
    /// Ring space taken for the record.
    At(Entry),
    /// The record goes at these blocks, some of them not durably mapped
    /// yet: map them first.
    Unmapped(std::ops::Range<u64>),
}

/// Everything that changes, under one short std mutex.
#[derive(Debug)]
struct State {
    ring_end: u64,
    /// Durable head of the chain (as in the header on disk).
    head_block: u64,
    head_lsn: u64,
    /// Block after the newest record, and the LSN the next one gets.
    cursor: u64,
    next_lsn: u64,
    /// The chain: LSNs `head_lsn..next_lsn`.
    entries: VecDeque<Entry>,
    /// LSNs whose record write has not completed.
    unwritten: BTreeSet<u64>,
    committed: u64,
    commit_lsn: u64,
    /// Logged writes between their ring allocation and their end.
    inflight: usize,
    failed: bool,
    /// Ring blocks a record may be written over.
    mapped: Mapped,
}

impl State {
    /// Takes ring space for a record of `span` blocks, if there is room
    /// and it is mapped.
    fn allocate(&mut self, seq: u64, lba: u64, blocks: u64) -> Option<Placed> {
        let span = blocks + 1;
        let block = place(self.ring_end, self.head_block, self.cursor, self.entries.is_empty(), span)?;
        if !self.mapped.all(block..block + span) {
            return Some(Placed::Unmapped(block..block + span));
        }
        let e = Entry { lsn: self.next_lsn, block, seq, lba, blocks, forgotten: false };
        self.entries.push_back(e);
        self.unwritten.insert(e.lsn);
        self.cursor = after(self.ring_end, block, span);
        self.next_lsn += 1;
        self.inflight += 1;
        Some(Placed::At(e))
    }

    /// The header that makes the current state durable: the head moves
    /// past the longest prefix of forgotten records whose writes
    /// completed.
    fn header(&self, block_size: u32, committed: u64) -> Header {
        let (head_block, head_lsn) = self
            .entries
            .iter()
            .find(|e| !e.forgotten || self.unwritten.contains(&e.lsn))
            .map_or((self.cursor, self.next_lsn), |e| (e.block, e.lsn));
        Header { block_size, ring_end: self.ring_end, committed, commit_lsn: self.next_lsn, head_block, head_lsn }
    }

    /// Takes `h` as durable: frees the records before its head.
    fn apply(&mut self, h: &Header) {
        while self.entries.front().is_some_and(|e| e.lsn < h.head_lsn) {
            self.entries.pop_front();
        }
        self.head_block = h.head_block;
        self.head_lsn = h.head_lsn;
        self.committed = self.committed.max(h.committed);
        self.commit_lsn = h.commit_lsn;
        debug_assert_eq!(self.entries.len() as u64, self.next_lsn - self.head_lsn);
        debug_assert!(!self.entries.is_empty() || self.cursor == self.head_block);
    }
}

/// A shard's data device with a durable undo log on a second device.
///
/// Opened with [`UndoDevice::open`]; see the module docs for the format,
/// the write ordering and what survives a crash.
pub struct UndoDevice {
    data: Arc<dyn BlockDevice>,
    log: Arc<dyn BlockDevice>,
    block_size: u32,
    state: Mutex<State>,
    /// Woken when a record's write completes, ring space is freed, a
    /// logged write ends, or the device fails.
    progress: Notify,
    /// Serialises header writers (commit, roll back, discard) so that
    /// their headers land in order.
    ops: tokio::sync::Mutex<()>,
    /// One premapping of ring blocks at a time.
    mapping: tokio::sync::Mutex<()>,
    full_wait: Duration,
    /// This device, for the tasks that run its operations to the end.
    me: Weak<UndoDevice>,
}

impl std::fmt::Debug for UndoDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UndoDevice").field("state", &*self.state()).finish_non_exhaustive()
    }
}

/// Counts a logged write in flight from its ring allocation to its end.
struct InFlight<'a>(&'a UndoDevice);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.state().inflight -= 1;
        self.0.progress.notify_waiters();
    }
}

impl UndoDevice {
    /// Opens the undo log on `log` for the shard volume `data`: formats a
    /// log never written (all zeros), else recovers its live records, and
    /// erases whatever lies in the ring off the chain of records.
    ///
    /// # Errors
    ///
    /// [`UndoError`]: devices of different or too small block sizes, a log
    /// device too small, a header that is not an undo log's, of another
    /// version, corrupt or out of range, a live record outside `data`, or
    /// an I/O error.
    pub async fn open(data: Arc<dyn BlockDevice>, log: Arc<dyn BlockDevice>) -> Result<Arc<UndoDevice>, UndoError> {
        Self::open_with_wait(data, log, FULL_WAIT).await
    }

    async fn open_with_wait(
        data: Arc<dyn BlockDevice>,
        log: Arc<dyn BlockDevice>,
        full_wait: Duration,
    ) -> Result<Arc<UndoDevice>, UndoError> {
        let (dg, lg) = (data.geometry(), log.geometry());
        if dg.block_size != lg.block_size {
            return Err(UndoError::BlockSizeMismatch { data: dg.block_size, log: lg.block_size });
        }
        if lg.block_size < MIN_BLOCK_SIZE {
            return Err(UndoError::BlockSizeTooSmall { block_size: lg.block_size, min: MIN_BLOCK_SIZE });
        }
        if lg.num_blocks < MIN_LOG_BLOCKS {
            return Err(UndoError::LogTooSmall { blocks: lg.num_blocks, min: MIN_LOG_BLOCKS });
        }
        let (block0, r) = log.read(0, IoBuf::recycled(lg.block_size as usize)).await;
        r?;
        let state = if block0.iter().all(|&b| b == 0) {
            format(&*log, lg).await?
        } else {
            let h = Header::decode(&block0, lg)?;
            let state = recover(&*data, &*log, &h).await?;
            let live = state.entries.iter().filter(|e| !e.forgotten).count();
            tracing::info!(committed = h.committed, records = live, "undo log recovered");
            tracing::debug!(live = ?state.entries.iter().filter(|e| !e.forgotten).map(|e| (e.seq, e.lba, e.blocks)).collect::<Vec<_>>(),
                "undo records kept (seq, lba, blocks)");
            erase_off_chain(&*log, &state).await?;
            state
        };
        Ok(Arc::new_cyclic(|me| UndoDevice {
            data,
            log,
            block_size: lg.block_size,
            state: Mutex::new(state),
            progress: Notify::new(),
            ops: tokio::sync::Mutex::new(()),
            mapping: tokio::sync::Mutex::new(()),
            full_wait,
            me: me.clone(),
        }))
    }

    /// The live records (not forgotten, including those still being
    /// written), oldest first.
    pub fn ring_records(&self) -> Vec<RingRecord> {
        let s = self.state();
        s.entries
            .iter()
            .filter(|e| !e.forgotten)
            .map(|e| RingRecord { lsn: e.lsn, seq: e.seq, lba: e.lba, blocks: e.blocks, ring_block: e.block })
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent before anything
        // that can panic, so a poisoned lock holds a usable state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self) {
        self.state().failed = true;
        self.progress.notify_waiters();
    }

    /// Runs `work` on a task of its own and waits for it: a dropped
    /// caller leaves it running to the end (see "Cancel safety").
    async fn on_task<T, F>(&self, work: impl FnOnce(Arc<UndoDevice>) -> F) -> Result<T, BlockError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, BlockError>> + Send + 'static,
    {
        let me = self.me.upgrade().ok_or(BlockError::Gone)?;
        let rt = tokio::runtime::Handle::try_current().map_err(|e| io_error(format!("undo log needs tokio: {e}")))?;
        rt.spawn(work(me)).await.unwrap_or_else(|e| Err(io_error(format!("undo log task failed: {e}"))))
    }

    /// Waits for `ready` to hold on the state (checked under the lock),
    /// up to `deadline`; `Ok(None)` when the deadline passed.
    async fn wait_for<T>(
        &self,
        deadline: Option<tokio::time::Instant>,
        mut ready: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>, BlockError> {
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.state();
                if s.failed {
                    return Err(BlockError::Failed);
                }
                if let Some(v) = ready(&mut s) {
                    return Ok(Some(v));
                }
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, notified).await.is_err() {
                        return Ok(None);
                    }
                }
                None => notified.await,
            }
        }
    }

    async fn logged_write(&self, seq: u64, lba: u64, buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let _inflight = match self.append(seq, lba, &buf).await {
            Ok(i) => i,
            Err(e) => return (buf, Err(e)),
        };
        self.data.write(lba, buf, false).await
    }

    /// Logs the bytes a write of `new` at `lba` overwrites, and returns
    /// once every record up to it has completed (the new bytes may then
    /// be written).
    async fn append(&self, seq: u64, lba: u64, new: &IoBuf) -> Result<InFlight<'_>, BlockError> {
        let dg = self.data.geometry();
        let blocks = blocks_in(dg, new.len())?;
        check_range(dg, lba, blocks)?;
        let capacity = self.state().ring_end - RING_START;
        if blocks >= capacity {
            return Err(io_error(format!(
                "a write of {blocks} blocks does not fit the undo log's ring of {capacity} blocks (one is its header)"
            )));
        }
        let bs = self.block_size as usize;
        let (old, r) = self.data.read(lba, IoBuf::recycled(new.len())).await;
        r?;
        let deadline = tokio::time::Instant::now() + self.full_wait;
        let entry = loop {
            let placed = self.wait_for(Some(deadline), |s| s.allocate(seq, lba, blocks)).await?.ok_or_else(|| {
                io_error(format!(
                    "undo log full: no room for a record of {} blocks after {:?}; commit or roll back to free it",
                    blocks + 1,
                    self.full_wait
                ))
            })?;
            match placed {
                Placed::At(e) => break e,
                Placed::Unmapped(blocks) => self.premap(blocks).await?,
            }
        };
        let inflight = InFlight(self);
        // One buffer for the whole record, so that it is one write with
        // one completion; the copy of the old bytes is cheap beside it.
        let mut rec = IoBuf::recycled(bs + old.len());
        rec[..bs].fill(0);
        rec[bs..].copy_from_slice(&old);
        RecordHeader { lsn: entry.lsn, seq, lba, blocks }.encode(&mut rec[..bs], &old);
        let (_, r) = self.log.write(entry.block, rec, false).await;
        if let Err(e) = r {
            // The chain now has a hole no later record can be ordered
            // after: refuse logged writes until recovery.
            self.fail();
            return Err(e);
        }
        self.state().unwritten.remove(&entry.lsn);
        self.progress.notify_waiters();
        self.wait_for(None, |s| s.unwritten.first().is_none_or(|&l| l > entry.lsn).then_some(())).await?;
        Ok(inflight)
    }

    /// Maps the ring blocks `need` and the window after them: writes zeros
    /// over the blocks of it not durably mapped (no record lies there:
    /// records are placed only on mapped blocks), flushes the log, and
    /// only then lets records go there (see "Write ordering").
    async fn premap(&self, need: std::ops::Range<u64>) -> Result<(), BlockError> {
        let _one = self.mapping.lock().await;
        let bs = u64::from(self.block_size);
        let gaps = {
            let s = self.state();
            let end = need.end.max(need.start + (PREMAP_BYTES / bs).max(1)).min(s.ring_end);
            s.mapped.gaps(need.start..end)
        };
        if gaps.is_empty() {
            return Ok(());
        }
        let per_write = (PREMAP_WRITE_BYTES / bs).max(1);
        for gap in &gaps {
            let mut at = gap.start;
            while at < gap.end {
                let n = (gap.end - at).min(per_write);
                let (_, r) = self.log.write(at, IoBuf::zeroed((n * bs) as usize), false).await;
                r?;
                at += n;
            }
        }
        self.log.flush().await?;
        let mut s = self.state();
        for gap in gaps {
            s.mapped.set(gap);
        }
        drop(s);
        self.progress.notify_waiters();
        Ok(())
    }

    /// Writes `h` to block 0 with FUA, then frees what it frees; a failed
    /// write fails the device (the header on disk is old or new).
    async fn write_header(&self, h: Header) -> Result<(), BlockError> {
        let mut buf = IoBuf::zeroed(self.block_size as usize);
        h.encode(&mut buf);
        let (_, r) = self.log.write(0, buf, true).await;
        if let Err(e) = r {
            self.fail();
            return Err(e);
        }
        self.state().apply(&h);
        self.progress.notify_waiters();
        Ok(())
    }

    async fn do_commit(&self, seq: u64) -> Result<(), BlockError> {
        let _ops = self.ops.lock().await;
        let h = {
            let mut s = self.state();
            if s.failed {
                return Err(BlockError::Failed);
            }
            let mark = s.committed.max(seq);
            let mut newly = 0;
            for e in s.entries.iter_mut().filter(|e| !e.forgotten && e.seq <= mark) {
                e.forgotten = true;
                newly += 1;
            }
            if newly == 0 && mark == s.committed {
                return Ok(());
            }
            s.header(self.block_size, mark)
        };
        self.write_header(h).await
    }

    /// Waits until no logged write is in flight, and returns the LSN the
    /// next one gets: the records before it are all the chain holds.
    async fn quiesce(&self) -> Result<u64, BlockError> {
        // Without a deadline the wait ends only with a value or an error.
        let end = self.wait_for(None, |s| (s.inflight == 0).then_some(s.next_lsn)).await?;
        end.ok_or(BlockError::Failed)
    }

    /// Forgets every record before LSN `end` and raises the mark to
    /// `mark`, durably.
    async fn forget_all(&self, end: u64, mark: u64) -> Result<(), BlockError> {
        let h = {
            let mut s = self.state();
            if s.failed {
                return Err(BlockError::Failed);
            }
            let mark = s.committed.max(mark);
            let mut any = false;
            for e in s.entries.iter_mut().filter(|e| e.lsn < end) {
                any = true;
                e.forgotten = true;
            }
            if !any && mark == s.committed {
                return Ok(());
            }
            s.header(self.block_size, mark)
        };
        self.write_header(h).await
    }

    /// Puts back the old bytes of every live record `undo` picks, newest
    /// first, flushes the data, then forgets every record and raises the
    /// mark to `mark` (durably).
    async fn do_roll_back(&self, undo: impl Fn(&Entry) -> bool, mark: u64) -> Result<u64, BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        let undo: Vec<Entry> = {
            let s = self.state();
            s.entries.iter().rev().filter(|e| e.lsn < end && !e.forgotten && undo(e)).copied().collect()
        };
        tracing::debug!(undo = ?undo.iter().map(|e| (e.seq, e.lba, e.blocks)).collect::<Vec<_>>(), mark,
            "rolling back these updates (seq, lba, blocks), newest first");
        for e in &undo {
            self.restore(e).await?;
        }
        if !undo.is_empty() {
            self.data.flush().await?;
        }
        self.forget_all(end, mark).await?;
        Ok(undo.len() as u64)
    }

    async fn do_records(&self, after: u64) -> Result<Vec<UndoRecord>, BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        let s = self.state();
        Ok(s.entries
            .iter()
            .filter(|e| e.lsn < end && !e.forgotten && e.seq > after)
            .map(|e| UndoRecord { seq: e.seq, lba: e.lba, blocks: e.blocks })
            .collect())
    }

    /// Puts back the old bytes of `e`, after checking its crc again (the
    /// log's media may have decayed since it was written or recovered).
    async fn restore(&self, e: &Entry) -> Result<(), BlockError> {
        let bs = self.block_size as usize;
        // The record lies in the ring, so its length fits the log device.
        let len = usize::try_from(e.span())
            .ok()
            .and_then(|n| n.checked_mul(bs))
            .ok_or_else(|| io_error(format!("undo record LSN {} of {} blocks is too large", e.lsn, e.blocks)))?;
        let (rec, r) = self.log.read(e.block, IoBuf::recycled(len)).await;
        r?;
        let valid = RecordHeader::decode(&rec[..bs]).is_some_and(|(h, stored, crc)| {
            h == RecordHeader { lsn: e.lsn, seq: e.seq, lba: e.lba, blocks: e.blocks }
                && crc32c::crc32c_append(crc, &rec[bs..]) == stored
        });
        if !valid {
            return Err(io_error(format!(
                "undo record LSN {} at log block {} no longer matches its crc; roll back cannot restore blocks {}+{}",
                e.lsn, e.block, e.lba, e.blocks
            )));
        }
        let (_, r) = self.data.write(e.lba, IoBuf::from_slice(&rec[bs..]), false).await;
        r
    }

    async fn do_discard(&self) -> Result<(), BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        self.forget_all(end, 0).await
    }
}

/// Formats a log never written: erases the ring, then writes the header.
async fn format(log: &dyn BlockDevice, g: Geometry) -> Result<State, UndoError> {
    log.deallocate(vec![(RING_START, g.num_blocks - RING_START)]).await?;
    log.flush().await?;
    let h = Header {
        block_size: g.block_size,
        ring_end: g.num_blocks,
        committed: 0,
        commit_lsn: 1,
        head_block: RING_START,
        head_lsn: 1,
    };
    let mut buf = IoBuf::zeroed(g.block_size as usize);
    h.encode(&mut buf);
    let (_, r) = log.write(0, buf, true).await;
    r?;
    Ok(empty_state(&h))
}

fn empty_state(h: &Header) -> State {
    State {
        ring_end: h.ring_end,
        head_block: h.head_block,
        head_lsn: h.head_lsn,
        cursor: h.head_block,
        next_lsn: h.head_lsn,
        entries: VecDeque::new(),
        unwritten: BTreeSet::new(),
        committed: h.committed,
        commit_lsn: h.commit_lsn,
        inflight: 0,
        failed: false,
        mapped: Mapped::none(h.ring_end),
    }
}

/// Follows the chain of records from the header's head (see "Placement
/// and recovery").
async fn recover(data: &dyn BlockDevice, log: &dyn BlockDevice, h: &Header) -> Result<State, UndoError> {
    let mut s = empty_state(h);
    let bs = h.block_size as usize;
    let data_blocks = data.geometry().num_blocks;
    // Every record takes at least two ring blocks, and placement never
    // lets the chain overlap itself, so this bounds the walk twice over.
    for _ in RING_START..h.ring_end {
        let Some(found) = next_record(log, &s, bs).await? else { break };
        let (at, r) = found;
        if r.lba.checked_add(r.blocks).is_none_or(|end| end > data_blocks) {
            return Err(UndoError::RecordOutOfRange {
                lsn: r.lsn,
                lba: r.lba,
                blocks: r.blocks,
                num_blocks: data_blocks,
            });
        }
        let forgotten = r.seq <= h.committed && r.lsn < h.commit_lsn;
        s.entries.push_back(Entry { lsn: r.lsn, block: at, seq: r.seq, lba: r.lba, blocks: r.blocks, forgotten });
        s.cursor = after(s.ring_end, at, r.blocks + 1);
        s.next_lsn += 1;
        // Read back after a restart: its mapping is durable.
        s.mapped.set(at..at + r.blocks + 1);
    }
    Ok(s)
}

/// The record that continues the chain in `s`, with its ring block: at
/// the cursor, else at the ring's start when it would not have fitted at
/// the cursor. `None` ends the chain.
async fn next_record(log: &dyn BlockDevice, s: &State, bs: usize) -> Result<Option<(u64, RecordHeader)>, UndoError> {
    let mut candidates = vec![s.cursor];
    if s.cursor != RING_START {
        candidates.push(RING_START);
    }
    for at in candidates {
        let (block, r) = log.read(at, IoBuf::recycled(bs)).await;
        r?;
        let Some((h, stored, crc)) = RecordHeader::decode(&block) else { continue };
        let placed = h.blocks.checked_add(1).and_then(|span| {
            place(s.ring_end, s.head_block, s.cursor, s.entries.is_empty(), span).filter(|&p| p == at)
        });
        if h.lsn != s.next_lsn || h.blocks == 0 || placed.is_none() {
            continue;
        }
        // The record lies inside the ring (placement checked it), so its
        // length is bounded by the log device.
        let mut crc = crc;
        let mut next = at + 1;
        let stop = at + 1 + h.blocks;
        while next < stop {
            let n = (stop - next).min(CHECK_CHUNK_BLOCKS);
            let (chunk, r) = log.read(next, IoBuf::recycled(n as usize * bs)).await;
            r?;
            crc = crc32c::crc32c_append(crc, &chunk);
            next += n;
        }
        // A record with the next LSN in the right place is the only one
        // that can be; a bad crc means it was torn.
        return Ok((crc == stored).then_some((at, h)));
    }
    Ok(None)
}

/// Deallocates every ring block off the chain, and flushes, so that no
/// record a crashed process left past the chain's end survives to be
/// taken for one with the same LSN later.
async fn erase_off_chain(log: &dyn BlockDevice, s: &State) -> Result<(), UndoError> {
    let (head, cursor, end) = (s.head_block, s.cursor, s.ring_end);
    let ranges: Vec<(u64, u64)> = if s.entries.is_empty() {
        vec![(RING_START, end - RING_START)]
    } else if cursor > head {
        vec![(cursor, end - cursor), (RING_START, head - RING_START)]
    } else {
        vec![(cursor, head - cursor)]
    };
    let ranges: Vec<(u64, u64)> = ranges.into_iter().filter(|&(_, n)| n > 0).collect();
    if !ranges.is_empty() {
        log.deallocate(ranges).await?;
        log.flush().await?;
    }
    Ok(())
}

impl BlockDevice for UndoDevice {
    fn geometry(&self) -> Geometry {
        self.data.geometry()
    }

    fn usage(&self) -> DeviceUsage {
        self.data.usage()
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.data.read(lba, buf)
    }

    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        self.data.read_data(lba, blocks)
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.data.write(lba, buf, fua)
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.data.write_zeroes(lba, blocks, deallocate)
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        self.data.deallocate(ranges)
    }

    /// Flushes the data device, then the log (records included).
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            self.data.flush().await?;
            self.log.flush().await
        })
    }
}

impl UndoLog for UndoDevice {
    fn write_logged(&self, seq: u64, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            let Some(me) = self.me.upgrade() else { return (buf, Err(BlockError::Gone)) };
            let rt = match tokio::runtime::Handle::try_current() {
                Ok(rt) => rt,
                Err(e) => return (buf, Err(io_error(format!("undo log needs tokio: {e}")))),
            };
            // On a task of its own (see "Cancel safety"); a task that
            // panicked cannot hand the buffer back.
            rt.spawn(async move { me.logged_write(seq, lba, buf).await })
                .await
                .unwrap_or_else(|e| (IoBuf::zeroed(0), Err(io_error(format!("undo log task failed: {e}")))))
        })
    }

    fn committed(&self) -> u64 {
        self.state().committed
    }

    fn commit(&self, seq: u64) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_commit(seq).await }))
    }

    fn roll_back(&self, after: u64) -> BlockFuture<'_, Result<u64, BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_roll_back(|e| e.seq > after, after).await }))
    }

    fn records(&self, after: u64) -> BlockFuture<'_, Result<Vec<UndoRecord>, BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_records(after).await }))
    }

    fn roll_back_only(&self, undo: Vec<u64>, mark: u64) -> BlockFuture<'_, Result<u64, BlockError>> {
        let undo: BTreeSet<u64> = undo.into_iter().collect();
        Box::pin(self.on_task(move |me| async move { me.do_roll_back(|e| undo.contains(&e.seq), mark).await }))
    }

    fn discard(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.on_task(|me| async move { me.do_discard().await }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strata_block::MemDevice;

    const BS: u32 = 512;

    fn header() -> Header {
        Header { block_size: BS, ring_end: 16, committed: 7, commit_lsn: 9, head_block: 3, head_lsn: 5 }
    }

    fn encoded(h: &Header) -> Vec<u8> {
        let mut b = vec![0; BS as usize];
        h.encode(&mut b);
        b
    }

    fn geometry(num_blocks: u64) -> Geometry {
        Geometry { block_size: BS, num_blocks }
    }

    /// Re-seals a header edited in place, so that only the edited field
    /// is wrong.
    fn reseal(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[..header::CRC_OFFSET]);
        b[header::CRC_OFFSET..header::LEN].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn header_layout_matches_the_format_table() {
        use header::*;
        let offsets = [
            MAGIC_OFFSET,
            VERSION_OFFSET,
            BLOCK_SIZE_OFFSET,
            RING_END_OFFSET,
            COMMITTED_OFFSET,
            COMMIT_LSN_OFFSET,
            HEAD_BLOCK_OFFSET,
            HEAD_LSN_OFFSET,
            CRC_OFFSET,
        ];
        assert_eq!(offsets, [0, 8, 12, 16, 24, 32, 40, 48, 56]);
        assert_eq!(LEN, 60);
        let b = encoded(&header());
        assert_eq!(&b[0..8], b"STRUNDOL");
        assert_eq!(b[8..12], 1u32.to_le_bytes());
        assert_eq!(b[12..16], 512u32.to_le_bytes());
        assert_eq!(b[16..24], 16u64.to_le_bytes());
        assert_eq!(b[24..32], 7u64.to_le_bytes());
        assert_eq!(b[32..40], 9u64.to_le_bytes());
        assert_eq!(b[40..48], 3u64.to_le_bytes());
        assert_eq!(b[48..56], 5u64.to_le_bytes());
        assert_eq!(b[56..60], crc32c::crc32c(&b[..56]).to_le_bytes());
        assert!(b[60..].iter().all(|&x| x == 0));
    }

    #[test]
    fn record_layout_matches_the_format_table() {
        use record::*;
        let offsets = [MAGIC_OFFSET, LSN_OFFSET, SEQ_OFFSET, LBA_OFFSET, BLOCKS_OFFSET, CRC_OFFSET];
        assert_eq!(offsets, [0, 8, 16, 24, 32, 40]);
        assert_eq!(LEN, 44);
        assert_eq!(MIN_BLOCK_SIZE, 60);
        let old = vec![0xa5; 1024];
        let mut b = vec![0; BS as usize];
        RecordHeader { lsn: 11, seq: 12, lba: 13, blocks: 2 }.encode(&mut b, &old);
        assert_eq!(&b[0..8], b"STRUNDOR");
        assert_eq!(b[8..16], 11u64.to_le_bytes());
        assert_eq!(b[16..24], 12u64.to_le_bytes());
        assert_eq!(b[24..32], 13u64.to_le_bytes());
        assert_eq!(b[32..40], 2u64.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..40]), &old);
        assert_eq!(b[40..44], crc.to_le_bytes());
    }

    #[test]
    fn headers_round_trip() {
        assert_eq!(Header::decode(&encoded(&header()), geometry(16)).unwrap(), header());
        let old = vec![3; 512];
        let mut b = vec![0; BS as usize];
        let r = RecordHeader { lsn: 1, seq: 2, lba: 3, blocks: 1 };
        r.encode(&mut b, &old);
        let (back, stored, crc) = RecordHeader::decode(&b).unwrap();
        assert_eq!(back, r);
        assert_eq!(crc32c::crc32c_append(crc, &old), stored);
        // The crc covers the old data: other old bytes fail it.
        assert_ne!(crc32c::crc32c_append(crc, &[4; 512]), stored);
        assert!(RecordHeader::decode(&[0; 512]).is_none());
    }

    #[test]
    fn a_block_that_is_not_a_header_is_refused() {
        let mut b = encoded(&header());
        b[0] ^= 1;
        assert!(
            matches!(Header::decode(&b, geometry(16)), Err(UndoError::NotAnUndoLog { found }) if found[1..] == *b"TRUNDOL")
        );
    }

    #[test]
    fn another_format_version_is_refused() {
        let mut b = encoded(&header());
        b[header::VERSION_OFFSET] = 2;
        reseal(&mut b);
        assert!(matches!(
            Header::decode(&b, geometry(16)),
            Err(UndoError::UnsupportedVersion { found: 2, supported: 1 })
        ));
    }

    #[test]
    fn a_corrupt_header_fails_its_crc() {
        let mut b = encoded(&header());
        b[header::COMMITTED_OFFSET] ^= 0x80;
        assert!(matches!(Header::decode(&b, geometry(16)), Err(UndoError::HeaderChecksum { .. })));
    }

    #[test]
    fn a_header_of_another_block_size_is_refused() {
        let b = encoded(&Header { block_size: 4096, ..header() });
        assert!(matches!(
            Header::decode(&b, geometry(16)),
            Err(UndoError::HeaderBlockSize { header: 4096, device: 512 })
        ));
    }

    #[test]
    fn a_log_smaller_than_its_ring_is_refused() {
        let b = encoded(&header());
        assert!(matches!(Header::decode(&b, geometry(15)), Err(UndoError::LogShrunk { ring_end: 16, blocks: 15 })));
        // A log that grew keeps its ring.
        assert_eq!(Header::decode(&b, geometry(64)).unwrap().ring_end, 16);
    }

    #[test]
    fn header_fields_out_of_range_are_refused() {
        let cases: [(Header, &str, u64); 4] = [
            (Header { ring_end: 2, head_block: 1, ..header() }, "ring_end", 2),
            (Header { head_block: 0, ..header() }, "head_block", 0),
            (Header { head_block: 16, ..header() }, "head_block", 16),
            (Header { head_lsn: 0, ..header() }, "head_lsn", 0),
        ];
        for (h, field, value) in cases {
            let r = Header::decode(&encoded(&h), geometry(16));
            assert!(
                matches!(r, Err(UndoError::BadHeaderField { field: f, value: v }) if f == field && v == value),
                "{field}: {r:?}"
            );
        }
    }

    #[test]
    fn placement_never_overlaps_the_chain() {
        // Empty ring: at the cursor, or at the start when it does not fit.
        assert_eq!(place(16, 5, 5, true, 4), Some(5));
        assert_eq!(place(16, 14, 14, true, 4), Some(1));
        assert_eq!(place(16, 14, 14, true, 15), Some(1));
        assert_eq!(place(16, 1, 1, true, 16), None);
        // In use 3..10: after it, or skip to the start if 1..3 holds it.
        assert_eq!(place(16, 3, 10, false, 6), Some(10));
        assert_eq!(place(16, 3, 10, false, 2), Some(10));
        assert_eq!(place(16, 3, 12, false, 5), None);
        assert_eq!(place(16, 5, 12, false, 5), None);
        assert_eq!(place(16, 6, 12, false, 5), Some(1));
        // In use 10..16 and 1..4: only 4..10 is free.
        assert_eq!(place(16, 10, 4, false, 6), Some(4));
        assert_eq!(place(16, 10, 4, false, 7), None);
        // Full: head == cursor with records.
        assert_eq!(place(16, 7, 7, false, 1), None);
        assert_eq!(after(16, 12, 4), 1);
        assert_eq!(after(16, 11, 4), 15);
    }

    #[test]
    fn open_refuses_devices_that_cannot_hold_a_log() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let open = |data: MemDevice, log: MemDevice| rt.block_on(UndoDevice::open(Arc::new(data), Arc::new(log)));
        assert!(matches!(
            open(MemDevice::new(512, 8), MemDevice::new(4096, 8)),
            Err(UndoError::BlockSizeMismatch { data: 512, log: 4096 })
        ));
        assert!(matches!(
            open(MemDevice::new(32, 8), MemDevice::new(32, 8)),
            Err(UndoError::BlockSizeTooSmall { block_size: 32, min: 60 })
        ));
        assert!(matches!(
            open(MemDevice::new(512, 8), MemDevice::new(512, 2)),
            Err(UndoError::LogTooSmall { blocks: 2, min: 3 })
        ));
        assert!(open(MemDevice::new(512, 8), MemDevice::new(512, 3)).is_ok(), "three blocks is enough");
    }

    #[tokio::test]
    async fn a_full_ring_fails_the_write_after_the_wait_and_logs_nothing() {
        let data = Arc::new(MemDevice::new(BS, 8));
        let log = Arc::new(MemDevice::new(BS, 8));
        let dev = UndoDevice::open_with_wait(data.clone(), log.clone(), Duration::from_millis(50)).await.unwrap();
        // A ring of 7 blocks: one record of 6 data blocks fills it.
        let (_, r) = dev.write_logged(1, 0, IoBuf::from_slice(&[1; 6 * 512])).await;
        r.unwrap();
        let before = dev.ring_records();
        let (_, r) = dev.write_logged(2, 7, IoBuf::from_slice(&[2; 512])).await;
        let err = r.unwrap_err().to_string();
        assert!(err.contains("undo log full"), "{err}");
        assert_eq!(dev.ring_records(), before);
        let (b, r) = data.read(7, IoBuf::zeroed(512)).await;
        r.unwrap();
        assert!(b.iter().all(|&x| x == 0), "the data was not written");
        // A record larger than the whole ring fails at once.
        let (_, r) = dev.write_logged(3, 0, IoBuf::from_slice(&[3; 7 * 512])).await;
        assert!(r.unwrap_err().to_string().contains("does not fit"));
        // After a commit frees the ring the write goes through.
        dev.commit(1).await.unwrap();
        let (_, r) = dev.write_logged(2, 7, IoBuf::from_slice(&[2; 512])).await;
        r.unwrap();
    }

    proptest! {
        /// Any change to one byte of the header's fields is caught; the
        /// bytes past them are not read.
        #[test]
        fn one_changed_header_byte_is_refused_iff_it_is_a_field(at in 0usize..512, flip in 1u8..=255) {
            let mut b = encoded(&header());
            b[at] ^= flip;
            let r = Header::decode(&b, geometry(16));
            prop_assert_eq!(r.is_err(), at < header::LEN, "{:?}", r);
        }

        /// Random bytes never decode as a header or a record, and never
        /// panic the decoder.
        #[test]
        fn random_blocks_are_refused(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            prop_assert!(Header::decode(&b, geometry(16)).is_err());
            prop_assert!(RecordHeader::decode(&b).is_none());
        }
    }
}
