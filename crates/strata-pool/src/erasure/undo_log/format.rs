//! The undo log's on-disk format: the log header (block 0) and the
//! records of the ring, their encoding, decoding and checksums, and the
//! one rule that places a record in the ring (recovery finds records by
//! it, so it is part of the format). No I/O: the device logic is
//! `super::device`'s.
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
//! | offset | size | field     | meaning                                                     |
//! |-------:|-----:|-----------|-------------------------------------------------------------|
//! | 0      | 8    | `magic`   | `b"STRUNDO2"`                                               |
//! | 8      | 8    | `lsn`     | log sequence number, one more than the previous record's    |
//! | 16     | 8    | `seq`     | the owner's update sequence number                          |
//! | 24     | 8    | `lba`     | first data block overwritten                                |
//! | 32     | 8    | `blocks`  | number of old data blocks that follow (at least 1)          |
//! | 40     | 8    | `targets` | the stripe positions the update was sent to (bit per position) |
//! | 48     | 4    | `crc`     | crc32c of bytes 0..48 of this block, then of the old data   |
//!
//! Compatibility: version 1 logs are read. Their records have the magic
//! `b"STRUNDOR"`, no `targets` (read as 0, unknown) and the `crc` at
//! offset 40, over bytes 0..40 and the old data; recovery reads either
//! kind of record in one chain, and the header is written as version 2 at
//! its next update. A log of a version above [`FORMAT_VERSION`] is
//! refused ([`UndoError::UnsupportedVersion`]). An all-zero block 0 is a
//! log never written, formatted on open.

use strata_block::{BlockError, Geometry};

/// The log format version this build writes (it reads this and
/// [`FORMAT_VERSION_1`]).
pub const FORMAT_VERSION: u32 = 2;

/// The first log format, whose records carry no `targets`.
pub const FORMAT_VERSION_1: u32 = 1;

/// The smallest log: the header and a ring of two blocks (one record of
/// one block).
pub const MIN_LOG_BLOCKS: u64 = 3;

/// First block of the ring (block 0 is the header).
pub(super) const RING_START: u64 = 1;

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
    pub const MAGIC: [u8; 8] = *b"STRUNDO2";
    /// The magic of a version 1 record (no `targets`, the crc at 40).
    pub const MAGIC_V1: [u8; 8] = *b"STRUNDOR";
    pub const CRC_OFFSET_V1: usize = TARGETS_OFFSET;
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
    pub const TARGETS_OFFSET: usize = BLOCKS_OFFSET + BLOCKS_LEN;
    pub const TARGETS_LEN: usize = 8;
    pub const CRC_OFFSET: usize = TARGETS_OFFSET + TARGETS_LEN;
    pub const CRC_LEN: usize = 4;
    /// Bytes of the record header block that carry fields.
    pub const LEN: usize = CRC_OFFSET + CRC_LEN;
}

/// The smallest block size that holds either header.
pub(super) const MIN_BLOCK_SIZE: u32 = if header::LEN > record::LEN { header::LEN as u32 } else { record::LEN as u32 };

/// Why [`UndoDevice::open`](super::UndoDevice::open) could not open a log.
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

fn le_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

fn le_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

/// The log header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) block_size: u32,
    pub(super) ring_end: u64,
    pub(super) committed: u64,
    pub(super) commit_lsn: u64,
    pub(super) head_block: u64,
    pub(super) head_lsn: u64,
}

impl Header {
    /// Writes the header into `block` (at least [`header::LEN`] bytes,
    /// which [`MIN_BLOCK_SIZE`] ensures; bytes past the fields are left
    /// as they are).
    pub(super) fn encode(&self, block: &mut [u8]) {
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
    pub(super) fn decode(block: &[u8], geometry: Geometry) -> Result<Header, UndoError> {
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
        if version != FORMAT_VERSION && version != FORMAT_VERSION_1 {
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
pub(super) struct RecordHeader {
    pub(super) lsn: u64,
    pub(super) seq: u64,
    pub(super) lba: u64,
    pub(super) blocks: u64,
    /// See [`strata_block::UndoRecord::targets`] (0 in a version 1
    /// record).
    pub(super) targets: u64,
}

impl RecordHeader {
    /// Writes the header into `block` (zeros past the fields, which the
    /// caller provides), with the crc of its fields and of `old`.
    pub(super) fn encode(&self, block: &mut [u8], old: &[u8]) {
        use record::*;
        block[MAGIC_OFFSET..][..MAGIC_LEN].copy_from_slice(&MAGIC);
        block[LSN_OFFSET..][..LSN_LEN].copy_from_slice(&self.lsn.to_le_bytes());
        block[SEQ_OFFSET..][..SEQ_LEN].copy_from_slice(&self.seq.to_le_bytes());
        block[LBA_OFFSET..][..LBA_LEN].copy_from_slice(&self.lba.to_le_bytes());
        block[BLOCKS_OFFSET..][..BLOCKS_LEN].copy_from_slice(&self.blocks.to_le_bytes());
        block[TARGETS_OFFSET..][..TARGETS_LEN].copy_from_slice(&self.targets.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&block[..CRC_OFFSET]), old);
        block[CRC_OFFSET..][..CRC_LEN].copy_from_slice(&crc.to_le_bytes());
    }

    /// The fields, the stored crc and the crc of the fields (to be
    /// extended over the old data), or `None` when `block` is not a
    /// record header (of either version).
    pub(super) fn decode(block: &[u8]) -> Option<(RecordHeader, u32, u32)> {
        use record::*;
        let magic = block.get(MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN)?;
        let (targets, crc_at) = if magic == MAGIC {
            (le_u64(block, TARGETS_OFFSET)?, CRC_OFFSET)
        } else if magic == MAGIC_V1 {
            (0, CRC_OFFSET_V1)
        } else {
            return None;
        };
        let h = RecordHeader {
            lsn: le_u64(block, LSN_OFFSET)?,
            seq: le_u64(block, SEQ_OFFSET)?,
            lba: le_u64(block, LBA_OFFSET)?,
            blocks: le_u64(block, BLOCKS_OFFSET)?,
            targets,
        };
        let stored = le_u32(block, crc_at)?;
        Some((h, stored, crc32c::crc32c(block.get(..crc_at)?)))
    }
}

/// Where a record of `span` blocks goes in a ring `RING_START..end` whose
/// chain starts at `head` and ends at `cursor` (`empty` when the chain
/// holds no record), or `None` when it would overlap the chain.
///
/// A record goes at the cursor if it fits before the end of the ring,
/// else at the ring's start; recovery relies on this rule being the only
/// one.
pub(super) fn place(end: u64, head: u64, cursor: u64, empty: bool, span: u64) -> Option<u64> {
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
pub(super) fn after(end: u64, at: u64, span: u64) -> u64 {
    let next = at + span;
    if next >= end { RING_START } else { next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        assert_eq!(b[8..12], 2u32.to_le_bytes());
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
        let offsets = [MAGIC_OFFSET, LSN_OFFSET, SEQ_OFFSET, LBA_OFFSET, BLOCKS_OFFSET, TARGETS_OFFSET, CRC_OFFSET];
        assert_eq!(offsets, [0, 8, 16, 24, 32, 40, 48]);
        assert_eq!(LEN, 52);
        assert_eq!(CRC_OFFSET_V1, 40);
        assert_eq!(MIN_BLOCK_SIZE, 60);
        let old = vec![0xa5; 1024];
        let mut b = vec![0; BS as usize];
        RecordHeader { lsn: 11, seq: 12, lba: 13, blocks: 2, targets: 0b110101 }.encode(&mut b, &old);
        assert_eq!(&b[0..8], b"STRUNDO2");
        assert_eq!(b[8..16], 11u64.to_le_bytes());
        assert_eq!(b[16..24], 12u64.to_le_bytes());
        assert_eq!(b[24..32], 13u64.to_le_bytes());
        assert_eq!(b[32..40], 2u64.to_le_bytes());
        assert_eq!(b[40..48], 0b110101u64.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..48]), &old);
        assert_eq!(b[48..52], crc.to_le_bytes());
        assert!(b[52..].iter().all(|&x| x == 0));
    }

    /// A record written by a version 1 build (as it wrote them) still
    /// decodes, with its targets unknown.
    #[test]
    fn a_version_1_record_decodes_with_no_targets() {
        let old = vec![0x5a; 512];
        let mut b = vec![0; BS as usize];
        b[0..8].copy_from_slice(b"STRUNDOR");
        for (at, v) in [(8, 11u64), (16, 12), (24, 13), (32, 1)] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..40]), &old);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
        let (h, stored, fields) = RecordHeader::decode(&b).unwrap();
        assert_eq!(h, RecordHeader { lsn: 11, seq: 12, lba: 13, blocks: 1, targets: 0 });
        assert_eq!(crc32c::crc32c_append(fields, &old), stored);
        // And a version 1 header opens.
        let mut hb = encoded(&header());
        hb[header::VERSION_OFFSET..][..4].copy_from_slice(&1u32.to_le_bytes());
        reseal(&mut hb);
        assert_eq!(Header::decode(&hb, geometry(16)).unwrap(), header());
    }

    #[test]
    fn headers_round_trip() {
        assert_eq!(Header::decode(&encoded(&header()), geometry(16)).unwrap(), header());
        let old = vec![3; 512];
        let mut b = vec![0; BS as usize];
        let r = RecordHeader { lsn: 1, seq: 2, lba: 3, blocks: 1, targets: 7 };
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
        b[header::VERSION_OFFSET] = 3;
        reseal(&mut b);
        assert!(matches!(
            Header::decode(&b, geometry(16)),
            Err(UndoError::UnsupportedVersion { found: 3, supported: 2 })
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
