//! The on-disk format of a strata drive: superblock, extent-table
//! checkpoints and the journal. Encoding and validation only; the I/O that
//! moves these bytes lives in [`crate::drive`].
//!
//! # Format
//!
//! All integers are little-endian. Offsets are bytes from the start of the
//! drive. `B` is [`BLOCK`] (4096), `E` the extent size, `N` the extent count.
//!
//! | region            | offset                    | length                   |
//! |-------------------|---------------------------|--------------------------|
//! | superblock copy 0 | 0                         | B                        |
//! | superblock copy 1 | B                         | B                        |
//! | checkpoint slot A | `ckpt_offset` (2B)        | `ckpt_slot_len`          |
//! | checkpoint slot B | `ckpt_offset + slot_len`  | `ckpt_slot_len`          |
//! | journal ring      | `journal_offset`          | `journal_blocks * B`     |
//! | data (extents)    | `data_offset` (E-aligned) | `N * E`                  |
//!
//! **Superblock** (both copies identical; the first valid one wins):
//!
//! | field          | offset | len | meaning                                   |
//! |----------------|--------|-----|-------------------------------------------|
//! | magic          | 0      | 8   | `STRATASB`                                |
//! | version        | 8      | 4   | [`FORMAT_VERSION`]                        |
//! | flags          | 12     | 4   | must be 0 (unknown flags are refused)     |
//! | uuid           | 16     | 16  | random drive id, stamped on every record  |
//! | capacity       | 32     | 8   | bytes of the drive the format uses        |
//! | extent_size    | 40     | 4   | `E`, a power of two                       |
//! | _unused        | 44     | 4   | zero                                      |
//! | extent_count   | 48     | 8   | `N`                                       |
//! | ckpt_offset    | 56     | 8   | start of checkpoint slot A                |
//! | ckpt_slot_len  | 64     | 8   | bytes per checkpoint slot                 |
//! | journal_offset | 72     | 8   | start of the journal ring                 |
//! | journal_blocks | 80     | 8   | ring length in blocks                     |
//! | data_offset    | 88     | 8   | start of extent 0                         |
//! | crc            | 96     | 4   | crc32c of bytes 0..96                     |
//!
//! **Checkpoint slot**: a header block, then `N` entries of
//! [`ENTRY_LEN`] bytes, one per physical extent (the reverse map).
//!
//! | header field | offset | len | meaning                                        |
//! |--------------|--------|-----|------------------------------------------------|
//! | magic        | 0      | 8   | `STRATACK`                                     |
//! | version      | 8      | 4   | [`FORMAT_VERSION`]                             |
//! | _unused      | 12     | 4   | zero                                           |
//! | uuid         | 16     | 16  | the drive's uuid                               |
//! | seq          | 32     | 8   | last journal seq folded in; <= [`MAX_SEQ`]     |
//! | extent_count | 40     | 8   | `N`                                            |
//! | crc          | 48     | 4   | crc32c of header 0..48 then all entry bytes    |
//!
//! | entry field | offset | len | meaning                                      |
//! |-------------|--------|-----|----------------------------------------------|
//! | volume      | 0      | 8   | owning volume id                             |
//! | lext        | 8      | 4   | logical extent index within the volume       |
//! | state       | 12     | 4   | 0 = free, 1 = owned                          |
//! | gen         | 16     | 8   | store-wide allocation generation             |
//!
//! **Journal block** (one [`BLOCK`] per record, at ring slot `seq % journal_blocks`):
//!
//! | field   | offset | len | meaning                                        |
//! |---------|--------|-----|------------------------------------------------|
//! | magic   | 0      | 8   | `STRATAJL`                                     |
//! | version | 8      | 4   | [`FORMAT_VERSION`]                             |
//! | count   | 12     | 4   | entries used, at most [`JOURNAL_MAX_ENTRIES`]  |
//! | uuid    | 16     | 16  | the drive's uuid                               |
//! | seq     | 32     | 8   | record sequence number                         |
//! | crc     | 40     | 4   | crc32c of the block with this field skipped    |
//! | _unused | 44     | 4   | zero                                           |
//! | entries | 48     | 32× | op u32 (1 set, 2 free), lext u32, extent u64, volume u64, gen u64 |
//!
//! # Compatibility rule
//!
//! Every structure carries the same [`FORMAT_VERSION`]. This build reads
//! exactly the versions it writes; a drive with a higher version is refused
//! with [`FormatError::UnsupportedVersion`] and never modified. A future
//! version that changes any field bumps the number and keeps a reader for
//! the old one. Fields that retire keep their slot, renamed `_unused`.
//!
//! Decoding is exact: every byte the encoder writes as zero (`_unused`
//! fields, the owner fields of a free entry or free op, journal bytes past
//! the last entry) must read as zero, so a structure that decodes
//! re-encodes to the same bytes, and a checksummed structure from a broken
//! or newer writer is refused rather than half understood.

use crc32c::{crc32c, crc32c_append};

/// Unit of metadata I/O and alignment of every region: 4 KiB.
pub const BLOCK: usize = 4096;
/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Offsets of the two superblock copies.
pub const SUPERBLOCK_COPIES: [u64; 2] = [0, BLOCK as u64];
/// Where checkpoint slot A starts on a freshly formatted drive.
pub const CKPT_AREA_OFFSET: u64 = 2 * BLOCK as u64;

// Superblock fields, each following the one before.
const SB_MAGIC: [u8; 8] = *b"STRATASB";
const SB_MAGIC_OFFSET: usize = 0;
const SB_MAGIC_LEN: usize = 8;
const SB_VERSION_OFFSET: usize = SB_MAGIC_OFFSET + SB_MAGIC_LEN;
const SB_VERSION_LEN: usize = 4;
const SB_FLAGS_OFFSET: usize = SB_VERSION_OFFSET + SB_VERSION_LEN;
const SB_FLAGS_LEN: usize = 4;
const SB_UUID_OFFSET: usize = SB_FLAGS_OFFSET + SB_FLAGS_LEN;
const SB_UUID_LEN: usize = 16;
const SB_CAPACITY_OFFSET: usize = SB_UUID_OFFSET + SB_UUID_LEN;
const SB_CAPACITY_LEN: usize = 8;
const SB_EXTENT_SIZE_OFFSET: usize = SB_CAPACITY_OFFSET + SB_CAPACITY_LEN;
const SB_EXTENT_SIZE_LEN: usize = 4;
const SB_UNUSED_OFFSET: usize = SB_EXTENT_SIZE_OFFSET + SB_EXTENT_SIZE_LEN;
const SB_UNUSED_LEN: usize = 4;
const SB_EXTENT_COUNT_OFFSET: usize = SB_UNUSED_OFFSET + SB_UNUSED_LEN;
const SB_EXTENT_COUNT_LEN: usize = 8;
const SB_CKPT_OFFSET_OFFSET: usize = SB_EXTENT_COUNT_OFFSET + SB_EXTENT_COUNT_LEN;
const SB_CKPT_OFFSET_LEN: usize = 8;
const SB_CKPT_SLOT_LEN_OFFSET: usize = SB_CKPT_OFFSET_OFFSET + SB_CKPT_OFFSET_LEN;
const SB_CKPT_SLOT_LEN_LEN: usize = 8;
const SB_JOURNAL_OFFSET_OFFSET: usize = SB_CKPT_SLOT_LEN_OFFSET + SB_CKPT_SLOT_LEN_LEN;
const SB_JOURNAL_OFFSET_LEN: usize = 8;
const SB_JOURNAL_BLOCKS_OFFSET: usize = SB_JOURNAL_OFFSET_OFFSET + SB_JOURNAL_OFFSET_LEN;
const SB_JOURNAL_BLOCKS_LEN: usize = 8;
const SB_DATA_OFFSET_OFFSET: usize = SB_JOURNAL_BLOCKS_OFFSET + SB_JOURNAL_BLOCKS_LEN;
const SB_DATA_OFFSET_LEN: usize = 8;
const SB_CRC_OFFSET: usize = SB_DATA_OFFSET_OFFSET + SB_DATA_OFFSET_LEN;
const SB_CRC_LEN: usize = 4;
/// Bytes of the superblock that carry fields; the rest of its block is zero.
pub const SB_LEN: usize = SB_CRC_OFFSET + SB_CRC_LEN;

// Checkpoint header fields.
const CK_MAGIC: [u8; 8] = *b"STRATACK";
const CK_MAGIC_OFFSET: usize = 0;
const CK_MAGIC_LEN: usize = 8;
const CK_VERSION_OFFSET: usize = CK_MAGIC_OFFSET + CK_MAGIC_LEN;
const CK_VERSION_LEN: usize = 4;
const CK_UNUSED_OFFSET: usize = CK_VERSION_OFFSET + CK_VERSION_LEN;
const CK_UNUSED_LEN: usize = 4;
const CK_UUID_OFFSET: usize = CK_UNUSED_OFFSET + CK_UNUSED_LEN;
const CK_UUID_LEN: usize = 16;
const CK_SEQ_OFFSET: usize = CK_UUID_OFFSET + CK_UUID_LEN;
const CK_SEQ_LEN: usize = 8;
const CK_EXTENT_COUNT_OFFSET: usize = CK_SEQ_OFFSET + CK_SEQ_LEN;
const CK_EXTENT_COUNT_LEN: usize = 8;
const CK_CRC_OFFSET: usize = CK_EXTENT_COUNT_OFFSET + CK_EXTENT_COUNT_LEN;
const CK_CRC_LEN: usize = 4;
/// Bytes of the checkpoint header that carry fields.
pub const CK_HEADER_LEN: usize = CK_CRC_OFFSET + CK_CRC_LEN;
/// Entries start one block into the slot.
pub const CK_ENTRIES_OFFSET: u64 = BLOCK as u64;

// Extent-table entry fields (checkpoint).
const ENT_VOLUME_OFFSET: usize = 0;
const ENT_VOLUME_LEN: usize = 8;
const ENT_LEXT_OFFSET: usize = ENT_VOLUME_OFFSET + ENT_VOLUME_LEN;
const ENT_LEXT_LEN: usize = 4;
const ENT_STATE_OFFSET: usize = ENT_LEXT_OFFSET + ENT_LEXT_LEN;
const ENT_STATE_LEN: usize = 4;
const ENT_GEN_OFFSET: usize = ENT_STATE_OFFSET + ENT_STATE_LEN;
const ENT_GEN_LEN: usize = 8;
/// Bytes per checkpoint entry.
pub const ENTRY_LEN: usize = ENT_GEN_OFFSET + ENT_GEN_LEN;
const ENT_STATE_FREE: u32 = 0;
const ENT_STATE_OWNED: u32 = 1;

// Journal block fields.
const JB_MAGIC: [u8; 8] = *b"STRATAJL";
const JB_MAGIC_OFFSET: usize = 0;
const JB_MAGIC_LEN: usize = 8;
const JB_VERSION_OFFSET: usize = JB_MAGIC_OFFSET + JB_MAGIC_LEN;
const JB_VERSION_LEN: usize = 4;
const JB_COUNT_OFFSET: usize = JB_VERSION_OFFSET + JB_VERSION_LEN;
const JB_COUNT_LEN: usize = 4;
const JB_UUID_OFFSET: usize = JB_COUNT_OFFSET + JB_COUNT_LEN;
const JB_UUID_LEN: usize = 16;
const JB_SEQ_OFFSET: usize = JB_UUID_OFFSET + JB_UUID_LEN;
const JB_SEQ_LEN: usize = 8;
const JB_CRC_OFFSET: usize = JB_SEQ_OFFSET + JB_SEQ_LEN;
const JB_CRC_LEN: usize = 4;
const JB_UNUSED_OFFSET: usize = JB_CRC_OFFSET + JB_CRC_LEN;
const JB_UNUSED_LEN: usize = 4;
const JB_ENTRIES_OFFSET: usize = JB_UNUSED_OFFSET + JB_UNUSED_LEN;

// Journal entry fields.
const JE_OP_OFFSET: usize = 0;
const JE_OP_LEN: usize = 4;
const JE_LEXT_OFFSET: usize = JE_OP_OFFSET + JE_OP_LEN;
const JE_LEXT_LEN: usize = 4;
const JE_EXTENT_OFFSET: usize = JE_LEXT_OFFSET + JE_LEXT_LEN;
const JE_EXTENT_LEN: usize = 8;
const JE_VOLUME_OFFSET: usize = JE_EXTENT_OFFSET + JE_EXTENT_LEN;
const JE_VOLUME_LEN: usize = 8;
const JE_GEN_OFFSET: usize = JE_VOLUME_OFFSET + JE_VOLUME_LEN;
const JE_GEN_LEN: usize = 8;
/// Bytes per journal entry.
pub const JE_LEN: usize = JE_GEN_OFFSET + JE_GEN_LEN;
const JE_OP_SET: u32 = 1;
const JE_OP_FREE: u32 = 2;
/// Entries that fit in one journal block.
pub const JOURNAL_MAX_ENTRIES: usize = (BLOCK - JB_ENTRIES_OFFSET) / JE_LEN;

/// Journal ring length bounds, in blocks.
const JOURNAL_MIN_BLOCKS: u64 = 16;
const JOURNAL_MAX_BLOCKS: u64 = 1024;
/// Upper bound accepted for a decoded journal length (4 GiB of ring).
const JOURNAL_BLOCKS_LIMIT: u64 = 1 << 20;
/// Upper bound on extents per drive: physical extent numbers must fit in
/// the 48 bits the volume forward map gives them.
pub const MAX_EXTENTS: u64 = 1 << 40;
/// Largest checkpoint seq accepted. Seqs grow by one per commit and by the
/// ring length plus one per open, so no drive comes near it; the bound
/// keeps recovery's `seq + 1` and `seq + journal_blocks + 1` from
/// overflowing on a checksummed header from a broken writer.
pub const MAX_SEQ: u64 = 1 << 62;

/// Why a persistent structure failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The magic is not ours.
    #[error("bad magic {0:02x?}")]
    BadMagic(Vec<u8>),
    /// Written by a newer format.
    #[error("unsupported format version {found}")]
    UnsupportedVersion {
        /// Version in the structure.
        found: u32,
    },
    /// Checksum mismatch: torn or corrupted.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadCrc {
        /// Stored checksum.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// A field holds an impossible value.
    #[error("field {field} has invalid value {value}")]
    BadField {
        /// Field name from the format table.
        field: &'static str,
        /// The value read.
        value: u64,
    },
    /// The structure belongs to another drive or an earlier format.
    #[error("uuid does not match the superblock")]
    ForeignUuid,
}

/// Reads a little-endian u32 at `off`. Callers pass offsets from the
/// constants above into buffers of at least [`BLOCK`] bytes.
fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn align_up(v: u64, a: u64) -> Option<u64> {
    Some(v.checked_add(a - 1)? / a * a)
}

/// The decoded superblock: the drive's identity and layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Random drive id.
    pub uuid: [u8; 16],
    /// Bytes the format uses.
    pub capacity: u64,
    /// Extent size in bytes.
    pub extent_size: u32,
    /// Number of extents in the data region.
    pub extent_count: u64,
    /// Offset of checkpoint slot A.
    pub ckpt_offset: u64,
    /// Length of each checkpoint slot.
    pub ckpt_slot_len: u64,
    /// Offset of the journal ring.
    pub journal_offset: u64,
    /// Journal ring length in blocks.
    pub journal_blocks: u64,
    /// Offset of extent 0.
    pub data_offset: u64,
}

/// Why a drive cannot be formatted: the bytes it would need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooSmall {
    /// Minimum capacity in bytes.
    pub needed: u64,
}

fn ckpt_slot_len(n: u64) -> Option<u64> {
    align_up(CK_ENTRIES_OFFSET.checked_add(n.checked_mul(ENTRY_LEN as u64)?)?, BLOCK as u64)
}

impl Superblock {
    /// The layout for a new drive of `capacity` bytes with `extent_size`
    /// extents (a power of two >= [`BLOCK`]).
    pub fn layout(uuid: [u8; 16], capacity: u64, extent_size: u32) -> Result<Superblock, TooSmall> {
        let e = u64::from(extent_size);
        // Size the metadata for as many extents as could fit at all; the
        // real count, after metadata, is no larger, so the slots fit it.
        let n0 = (capacity / e).min(MAX_EXTENTS);
        let slot = ckpt_slot_len(n0).ok_or(TooSmall { needed: u64::MAX })?;
        let journal_blocks = (n0 / 64).clamp(JOURNAL_MIN_BLOCKS, JOURNAL_MAX_BLOCKS);
        let journal_offset = CKPT_AREA_OFFSET + 2 * slot;
        let meta_end = journal_offset + journal_blocks * BLOCK as u64;
        let data_offset = align_up(meta_end, e).ok_or(TooSmall { needed: u64::MAX })?;
        let needed = data_offset + e;
        if capacity < needed {
            return Err(TooSmall { needed });
        }
        let extent_count = (capacity - data_offset) / e;
        Ok(Superblock {
            uuid,
            capacity,
            extent_size,
            extent_count,
            ckpt_offset: CKPT_AREA_OFFSET,
            ckpt_slot_len: slot,
            journal_offset,
            journal_blocks,
            data_offset,
        })
    }

    /// Offset of checkpoint slot `slot` (0 = A, 1 = B).
    pub fn ckpt_slot_offset(&self, slot: usize) -> u64 {
        self.ckpt_offset + self.ckpt_slot_len * slot as u64
    }

    /// Offset of the journal block that holds record `seq`.
    pub fn journal_block_offset(&self, seq: u64) -> u64 {
        self.journal_offset + (seq % self.journal_blocks) * BLOCK as u64
    }

    /// Offset of physical extent `p`.
    pub fn extent_offset(&self, p: u64) -> u64 {
        self.data_offset + p * u64::from(self.extent_size)
    }

    /// Encodes into `block` (at least [`BLOCK`] bytes, zeroed past the fields).
    pub fn encode(&self, block: &mut [u8]) {
        block[..BLOCK].fill(0);
        block[SB_MAGIC_OFFSET..SB_MAGIC_OFFSET + SB_MAGIC_LEN].copy_from_slice(&SB_MAGIC);
        put_u32(block, SB_VERSION_OFFSET, FORMAT_VERSION);
        put_u32(block, SB_FLAGS_OFFSET, 0);
        block[SB_UUID_OFFSET..SB_UUID_OFFSET + SB_UUID_LEN].copy_from_slice(&self.uuid);
        put_u64(block, SB_CAPACITY_OFFSET, self.capacity);
        put_u32(block, SB_EXTENT_SIZE_OFFSET, self.extent_size);
        put_u64(block, SB_EXTENT_COUNT_OFFSET, self.extent_count);
        put_u64(block, SB_CKPT_OFFSET_OFFSET, self.ckpt_offset);
        put_u64(block, SB_CKPT_SLOT_LEN_OFFSET, self.ckpt_slot_len);
        put_u64(block, SB_JOURNAL_OFFSET_OFFSET, self.journal_offset);
        put_u64(block, SB_JOURNAL_BLOCKS_OFFSET, self.journal_blocks);
        put_u64(block, SB_DATA_OFFSET_OFFSET, self.data_offset);
        put_u32(block, SB_CRC_OFFSET, crc32c(&block[..SB_CRC_OFFSET]));
    }

    /// True when `block` starts with the superblock magic (whatever else
    /// is wrong with it).
    pub fn has_magic(block: &[u8]) -> bool {
        block.len() >= SB_MAGIC_LEN && block[SB_MAGIC_OFFSET..SB_MAGIC_OFFSET + SB_MAGIC_LEN] == SB_MAGIC
    }

    /// Decodes and validates a superblock from a block of at least
    /// [`SB_LEN`] bytes. Never panics on bad bytes.
    pub fn decode(block: &[u8]) -> Result<Superblock, FormatError> {
        if block.len() < SB_LEN {
            return Err(FormatError::BadField { field: "length", value: block.len() as u64 });
        }
        if !Self::has_magic(block) {
            return Err(FormatError::BadMagic(block[..SB_MAGIC_LEN].to_vec()));
        }
        let stored = get_u32(block, SB_CRC_OFFSET);
        let computed = crc32c(&block[..SB_CRC_OFFSET]);
        if stored != computed {
            return Err(FormatError::BadCrc { stored, computed });
        }
        let version = get_u32(block, SB_VERSION_OFFSET);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion { found: version });
        }
        let flags = get_u32(block, SB_FLAGS_OFFSET);
        if flags != 0 {
            return Err(FormatError::BadField { field: "flags", value: u64::from(flags) });
        }
        let unused = get_u32(block, SB_UNUSED_OFFSET);
        if unused != 0 {
            return Err(FormatError::BadField { field: "_unused", value: u64::from(unused) });
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&block[SB_UUID_OFFSET..SB_UUID_OFFSET + SB_UUID_LEN]);
        let sb = Superblock {
            uuid,
            capacity: get_u64(block, SB_CAPACITY_OFFSET),
            extent_size: get_u32(block, SB_EXTENT_SIZE_OFFSET),
            extent_count: get_u64(block, SB_EXTENT_COUNT_OFFSET),
            ckpt_offset: get_u64(block, SB_CKPT_OFFSET_OFFSET),
            ckpt_slot_len: get_u64(block, SB_CKPT_SLOT_LEN_OFFSET),
            journal_offset: get_u64(block, SB_JOURNAL_OFFSET_OFFSET),
            journal_blocks: get_u64(block, SB_JOURNAL_BLOCKS_OFFSET),
            data_offset: get_u64(block, SB_DATA_OFFSET_OFFSET),
        };
        sb.check_layout()?;
        Ok(sb)
    }

    /// Checks that the regions are aligned, ordered, non-overlapping and
    /// inside `capacity`, with overflow-checked arithmetic.
    fn check_layout(&self) -> Result<(), FormatError> {
        let bad = |field: &'static str, value: u64| Err(FormatError::BadField { field, value });
        let e = u64::from(self.extent_size);
        if !self.extent_size.is_power_of_two() || self.extent_size < BLOCK as u32 {
            return bad("extent_size", e);
        }
        if self.extent_count == 0 || self.extent_count > MAX_EXTENTS {
            return bad("extent_count", self.extent_count);
        }
        let aligned = |v: u64| v.is_multiple_of(BLOCK as u64);
        if self.ckpt_offset < CKPT_AREA_OFFSET || !aligned(self.ckpt_offset) {
            return bad("ckpt_offset", self.ckpt_offset);
        }
        match ckpt_slot_len(self.extent_count) {
            Some(min) if self.ckpt_slot_len >= min && aligned(self.ckpt_slot_len) => {}
            _ => return bad("ckpt_slot_len", self.ckpt_slot_len),
        }
        let ckpt_end = self.ckpt_slot_len.checked_mul(2).and_then(|l| l.checked_add(self.ckpt_offset));
        match ckpt_end {
            Some(end) if self.journal_offset >= end && aligned(self.journal_offset) => {}
            _ => return bad("journal_offset", self.journal_offset),
        }
        if !(2..=JOURNAL_BLOCKS_LIMIT).contains(&self.journal_blocks) {
            return bad("journal_blocks", self.journal_blocks);
        }
        let journal_end = self.journal_offset.checked_add(self.journal_blocks * BLOCK as u64);
        match journal_end {
            Some(end) if self.data_offset >= end && self.data_offset.is_multiple_of(e) => {}
            _ => return bad("data_offset", self.data_offset),
        }
        let data_end = self.extent_count.checked_mul(e).and_then(|l| l.checked_add(self.data_offset));
        match data_end {
            Some(end) if end <= self.capacity => Ok(()),
            _ => bad("capacity", self.capacity),
        }
    }
}

/// Owner of a physical extent: the reverse-map value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Volume id.
    pub volume: u64,
    /// Logical extent index within the volume.
    pub lext: u32,
    /// Store-wide allocation generation; on recovery, when two extents
    /// claim the same `(volume, lext)`, the higher generation wins.
    pub generation: u64,
}

/// A checkpoint header, validated against the drive it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointHeader {
    /// Last journal seq folded in.
    pub seq: u64,
    /// The crc stored in the header, to compare once all entries are read.
    pub crc: u32,
}

impl CheckpointHeader {
    /// Encodes a header into `block` given the crc32c of all entry bytes
    /// (computed with [`checkpoint_crc`]).
    pub fn encode(
        block: &mut [u8],
        uuid: &[u8; 16],
        seq: u64,
        extent_count: u64,
        entries_crc_fn: impl FnOnce(u32) -> u32,
    ) {
        block[..BLOCK].fill(0);
        block[CK_MAGIC_OFFSET..CK_MAGIC_OFFSET + CK_MAGIC_LEN].copy_from_slice(&CK_MAGIC);
        put_u32(block, CK_VERSION_OFFSET, FORMAT_VERSION);
        block[CK_UUID_OFFSET..CK_UUID_OFFSET + CK_UUID_LEN].copy_from_slice(uuid);
        put_u64(block, CK_SEQ_OFFSET, seq);
        put_u64(block, CK_EXTENT_COUNT_OFFSET, extent_count);
        let crc = entries_crc_fn(crc32c(&block[..CK_CRC_OFFSET]));
        put_u32(block, CK_CRC_OFFSET, crc);
    }

    /// Decodes a header; the entries' crc is checked by the caller with
    /// [`checkpoint_crc`] seeded from [`CheckpointHeader::crc_seed`].
    pub fn decode(block: &[u8], uuid: &[u8; 16], extent_count: u64) -> Result<CheckpointHeader, FormatError> {
        if block.len() < CK_HEADER_LEN {
            return Err(FormatError::BadField { field: "length", value: block.len() as u64 });
        }
        if block[CK_MAGIC_OFFSET..CK_MAGIC_OFFSET + CK_MAGIC_LEN] != CK_MAGIC {
            return Err(FormatError::BadMagic(block[..CK_MAGIC_LEN].to_vec()));
        }
        let version = get_u32(block, CK_VERSION_OFFSET);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion { found: version });
        }
        let unused = get_u32(block, CK_UNUSED_OFFSET);
        if unused != 0 {
            return Err(FormatError::BadField { field: "checkpoint._unused", value: u64::from(unused) });
        }
        if block[CK_UUID_OFFSET..CK_UUID_OFFSET + CK_UUID_LEN] != uuid[..] {
            return Err(FormatError::ForeignUuid);
        }
        let n = get_u64(block, CK_EXTENT_COUNT_OFFSET);
        if n != extent_count {
            return Err(FormatError::BadField { field: "extent_count", value: n });
        }
        let seq = get_u64(block, CK_SEQ_OFFSET);
        if seq > MAX_SEQ {
            return Err(FormatError::BadField { field: "checkpoint.seq", value: seq });
        }
        Ok(CheckpointHeader { seq, crc: get_u32(block, CK_CRC_OFFSET) })
    }

    /// The crc of the header bytes, to be continued over the entries.
    pub fn crc_seed(block: &[u8]) -> u32 {
        crc32c(&block[..CK_CRC_OFFSET])
    }
}

/// Continues a checkpoint crc over entry bytes.
pub fn checkpoint_crc(crc: u32, entry_bytes: &[u8]) -> u32 {
    crc32c_append(crc, entry_bytes)
}

/// Encodes one extent-table entry into `out` ([`ENTRY_LEN`] bytes).
pub fn encode_entry(out: &mut [u8], owner: Option<Owner>) {
    out[..ENTRY_LEN].fill(0);
    if let Some(o) = owner {
        put_u64(out, ENT_VOLUME_OFFSET, o.volume);
        put_u32(out, ENT_LEXT_OFFSET, o.lext);
        put_u32(out, ENT_STATE_OFFSET, ENT_STATE_OWNED);
        put_u64(out, ENT_GEN_OFFSET, o.generation);
    }
}

/// Decodes one extent-table entry ([`ENTRY_LEN`] bytes). A free entry
/// must be all zero, as [`encode_entry`] writes it: anything else under a
/// valid checksum came from a broken or newer writer.
pub fn decode_entry(b: &[u8]) -> Result<Option<Owner>, FormatError> {
    if b.len() < ENTRY_LEN {
        return Err(FormatError::BadField { field: "entry.length", value: b.len() as u64 });
    }
    match get_u32(b, ENT_STATE_OFFSET) {
        ENT_STATE_FREE => {
            let fields = [
                ("entry.volume", get_u64(b, ENT_VOLUME_OFFSET)),
                ("entry.lext", u64::from(get_u32(b, ENT_LEXT_OFFSET))),
                ("entry.gen", get_u64(b, ENT_GEN_OFFSET)),
            ];
            match fields.into_iter().find(|&(_, v)| v != 0) {
                Some((field, value)) => Err(FormatError::BadField { field, value }),
                None => Ok(None),
            }
        }
        ENT_STATE_OWNED => Ok(Some(Owner {
            volume: get_u64(b, ENT_VOLUME_OFFSET),
            lext: get_u32(b, ENT_LEXT_OFFSET),
            generation: get_u64(b, ENT_GEN_OFFSET),
        })),
        s => Err(FormatError::BadField { field: "entry.state", value: u64::from(s) }),
    }
}

/// One reverse-map change, as journalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalOp {
    /// Extent `extent` now belongs to `owner`.
    Set {
        /// Physical extent.
        extent: u64,
        /// New owner.
        owner: Owner,
    },
    /// Extent `extent` is free.
    Free {
        /// Physical extent.
        extent: u64,
    },
}

/// Encodes a journal block holding `ops` (at most
/// [`JOURNAL_MAX_ENTRIES`]) into `block`.
pub fn encode_journal_block(block: &mut [u8], uuid: &[u8; 16], seq: u64, ops: &[JournalOp]) {
    debug_assert!(ops.len() <= JOURNAL_MAX_ENTRIES);
    block[..BLOCK].fill(0);
    block[JB_MAGIC_OFFSET..JB_MAGIC_OFFSET + JB_MAGIC_LEN].copy_from_slice(&JB_MAGIC);
    put_u32(block, JB_VERSION_OFFSET, FORMAT_VERSION);
    put_u32(block, JB_COUNT_OFFSET, ops.len() as u32);
    block[JB_UUID_OFFSET..JB_UUID_OFFSET + JB_UUID_LEN].copy_from_slice(uuid);
    put_u64(block, JB_SEQ_OFFSET, seq);
    for (i, op) in ops.iter().enumerate() {
        let e = &mut block[JB_ENTRIES_OFFSET + i * JE_LEN..][..JE_LEN];
        match *op {
            JournalOp::Set { extent, owner } => {
                put_u32(e, JE_OP_OFFSET, JE_OP_SET);
                put_u32(e, JE_LEXT_OFFSET, owner.lext);
                put_u64(e, JE_EXTENT_OFFSET, extent);
                put_u64(e, JE_VOLUME_OFFSET, owner.volume);
                put_u64(e, JE_GEN_OFFSET, owner.generation);
            }
            JournalOp::Free { extent } => {
                put_u32(e, JE_OP_OFFSET, JE_OP_FREE);
                put_u64(e, JE_EXTENT_OFFSET, extent);
            }
        }
    }
    let crc = journal_crc(block);
    put_u32(block, JB_CRC_OFFSET, crc);
}

fn journal_crc(block: &[u8]) -> u32 {
    crc32c_append(crc32c(&block[..JB_CRC_OFFSET]), &block[JB_CRC_OFFSET + JB_CRC_LEN..BLOCK])
}

/// What a journal slot held when replay read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalRead {
    /// The record with the expected seq.
    Record(Vec<JournalOp>),
    /// Not the expected record: the end of the journal. Normal after a
    /// crash (torn or never-written block) and after every clean run (a
    /// stale record from an earlier lap).
    End(String),
}

/// The seq of `block` if it is a journal record of this drive (magic,
/// checksum and uuid valid), whatever seq replay expects there: recovery
/// uses it to place the next seqs past every record on the disk.
pub fn journal_block_seq(block: &[u8], uuid: &[u8; 16]) -> Option<u64> {
    (block.len() >= BLOCK
        && block[JB_MAGIC_OFFSET..JB_MAGIC_OFFSET + JB_MAGIC_LEN] == JB_MAGIC
        && get_u32(block, JB_CRC_OFFSET) == journal_crc(block)
        && block[JB_UUID_OFFSET..JB_UUID_OFFSET + JB_UUID_LEN] == uuid[..])
        .then(|| get_u64(block, JB_SEQ_OFFSET))
}

/// Decodes the journal block expected to hold record `seq`. Blocks that
/// are not a valid record with that seq and uuid end replay
/// ([`JournalRead::End`]); a block with a valid checksum but impossible
/// content is an error, since it was written by a broken or newer writer.
pub fn decode_journal_block(
    block: &[u8],
    uuid: &[u8; 16],
    seq: u64,
    extent_count: u64,
) -> Result<JournalRead, FormatError> {
    if block.len() < BLOCK {
        return Ok(JournalRead::End(format!("short block of {} bytes", block.len())));
    }
    if block[JB_MAGIC_OFFSET..JB_MAGIC_OFFSET + JB_MAGIC_LEN] != JB_MAGIC {
        return Ok(JournalRead::End("no journal magic".into()));
    }
    let stored = get_u32(block, JB_CRC_OFFSET);
    let computed = journal_crc(block);
    if stored != computed {
        return Ok(JournalRead::End(format!("{}", FormatError::BadCrc { stored, computed })));
    }
    if block[JB_UUID_OFFSET..JB_UUID_OFFSET + JB_UUID_LEN] != uuid[..] {
        return Ok(JournalRead::End("record from an earlier format".into()));
    }
    let found = get_u64(block, JB_SEQ_OFFSET);
    if found != seq {
        return Ok(JournalRead::End(format!("seq {found} where {seq} was expected")));
    }
    let version = get_u32(block, JB_VERSION_OFFSET);
    if version != FORMAT_VERSION {
        return Err(FormatError::UnsupportedVersion { found: version });
    }
    let count = get_u32(block, JB_COUNT_OFFSET) as usize;
    if count > JOURNAL_MAX_ENTRIES {
        return Err(FormatError::BadField { field: "journal.count", value: count as u64 });
    }
    // Every byte the encoder leaves zero must be zero: the checksum says a
    // writer put them there, and this one never does.
    let unused = get_u32(block, JB_UNUSED_OFFSET);
    if unused != 0 {
        return Err(FormatError::BadField { field: "journal._unused", value: u64::from(unused) });
    }
    let entries_end = JB_ENTRIES_OFFSET + count * JE_LEN;
    if let Some(at) = block[entries_end..BLOCK].iter().position(|&b| b != 0) {
        return Err(FormatError::BadField { field: "journal.unused_entry_bytes", value: (entries_end + at) as u64 });
    }
    let mut ops = Vec::with_capacity(count);
    for i in 0..count {
        let e = &block[JB_ENTRIES_OFFSET + i * JE_LEN..][..JE_LEN];
        let extent = get_u64(e, JE_EXTENT_OFFSET);
        if extent >= extent_count {
            return Err(FormatError::BadField { field: "journal.extent", value: extent });
        }
        ops.push(match get_u32(e, JE_OP_OFFSET) {
            JE_OP_SET => JournalOp::Set {
                extent,
                owner: Owner {
                    volume: get_u64(e, JE_VOLUME_OFFSET),
                    lext: get_u32(e, JE_LEXT_OFFSET),
                    generation: get_u64(e, JE_GEN_OFFSET),
                },
            },
            JE_OP_FREE => {
                let fields = [
                    ("journal.free.lext", u64::from(get_u32(e, JE_LEXT_OFFSET))),
                    ("journal.free.volume", get_u64(e, JE_VOLUME_OFFSET)),
                    ("journal.free.gen", get_u64(e, JE_GEN_OFFSET)),
                ];
                if let Some((field, value)) = fields.into_iter().find(|&(_, v)| v != 0) {
                    return Err(FormatError::BadField { field, value });
                }
                JournalOp::Free { extent }
            }
            op => return Err(FormatError::BadField { field: "journal.op", value: u64::from(op) }),
        });
    }
    Ok(JournalRead::Record(ops))
}

/// Recomputes the checksum of a structure whose bytes were changed on
/// purpose, so that a test or fuzz target reaches the checks behind the
/// crc (what a broken or newer writer would produce). Each function takes
/// the structure's bytes as laid out on disk and never panics on short
/// input (it then does nothing).
#[cfg(any(test, fuzzing))]
pub mod reseal {
    use super::*;

    /// A superblock copy (at least [`SB_LEN`] bytes).
    pub fn superblock(block: &mut [u8]) {
        if block.len() >= SB_LEN {
            let crc = crc32c(&block[..SB_CRC_OFFSET]);
            put_u32(block, SB_CRC_OFFSET, crc);
        }
    }

    /// A checkpoint slot: its header block followed by `extent_count`
    /// entries (as many as `slot` holds, if fewer).
    pub fn checkpoint(slot: &mut [u8], extent_count: u64) {
        if slot.len() < BLOCK {
            return;
        }
        let entries = usize::try_from(extent_count).unwrap_or(usize::MAX).saturating_mul(ENTRY_LEN);
        let end = BLOCK.saturating_add(entries).min(slot.len());
        let crc = checkpoint_crc(CheckpointHeader::crc_seed(slot), &slot[BLOCK..end]);
        put_u32(slot, CK_CRC_OFFSET, crc);
    }

    /// A journal block ([`BLOCK`] bytes).
    pub fn journal_block(block: &mut [u8]) {
        if block.len() >= BLOCK {
            let crc = journal_crc(block);
            put_u32(block, JB_CRC_OFFSET, crc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: [u8; 16] = [7; 16];

    fn sb() -> Superblock {
        Superblock::layout(UUID, 64 << 20, 1 << 20).unwrap()
    }

    #[test]
    fn field_offsets_match_the_format_table() {
        assert_eq!(SB_VERSION_OFFSET, 8);
        assert_eq!(SB_UUID_OFFSET, 16);
        assert_eq!(SB_EXTENT_SIZE_OFFSET, 40);
        assert_eq!(SB_EXTENT_COUNT_OFFSET, 48);
        assert_eq!(SB_DATA_OFFSET_OFFSET, 88);
        assert_eq!(SB_CRC_OFFSET, 96);
        assert_eq!(SB_LEN, 100);
        assert_eq!(CK_SEQ_OFFSET, 32);
        assert_eq!(CK_CRC_OFFSET, 48);
        assert_eq!(ENTRY_LEN, 24);
        assert_eq!(JB_SEQ_OFFSET, 32);
        assert_eq!(JB_CRC_OFFSET, 40);
        assert_eq!(JB_ENTRIES_OFFSET, 48);
        assert_eq!(JE_LEN, 32);
        assert_eq!(JOURNAL_MAX_ENTRIES, 126);
    }

    #[test]
    fn layout_fits_regions_in_order() {
        let s = sb();
        assert_eq!(s.ckpt_offset, 8192);
        assert!(s.journal_offset >= s.ckpt_offset + 2 * s.ckpt_slot_len);
        assert!(s.data_offset >= s.journal_offset + s.journal_blocks * BLOCK as u64);
        assert_eq!(s.data_offset % (1 << 20), 0);
        assert_eq!(s.extent_count, 63);
        assert!(s.check_layout().is_ok());
        assert_eq!(Superblock::layout(UUID, 1 << 20, 1 << 20), Err(TooSmall { needed: 2 << 20 }));
    }

    #[test]
    fn superblock_round_trips() {
        let s = sb();
        let mut b = vec![0u8; BLOCK];
        s.encode(&mut b);
        assert_eq!(Superblock::decode(&b), Ok(s));
    }

    #[test]
    fn superblock_bad_magic_is_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        b[0] ^= 1;
        assert!(matches!(Superblock::decode(&b), Err(FormatError::BadMagic(_))));
    }

    #[test]
    fn superblock_bad_crc_is_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        b[SB_EXTENT_COUNT_OFFSET] ^= 1;
        assert!(matches!(Superblock::decode(&b), Err(FormatError::BadCrc { .. })));
    }

    #[test]
    fn superblock_newer_version_is_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        put_u32(&mut b, SB_VERSION_OFFSET, FORMAT_VERSION + 1);
        let c = crc32c(&b[..SB_CRC_OFFSET]);
        put_u32(&mut b, SB_CRC_OFFSET, c);
        assert_eq!(Superblock::decode(&b), Err(FormatError::UnsupportedVersion { found: 2 }));
    }

    #[test]
    fn superblock_unknown_flags_are_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        put_u32(&mut b, SB_FLAGS_OFFSET, 4);
        let c = crc32c(&b[..SB_CRC_OFFSET]);
        put_u32(&mut b, SB_CRC_OFFSET, c);
        assert!(matches!(Superblock::decode(&b), Err(FormatError::BadField { field: "flags", .. })));
    }

    #[test]
    fn superblock_with_overlapping_or_oversized_layout_is_rejected() {
        // Each corrupt-but-checksummed layout field is refused, never
        // trusted for an allocation or an offset.
        let cases: [(usize, u64, &str); 6] = [
            (SB_EXTENT_COUNT_OFFSET, u64::MAX, "extent_count"),
            (SB_CKPT_OFFSET_OFFSET, 0, "ckpt_offset"),
            (SB_CKPT_SLOT_LEN_OFFSET, 4096, "ckpt_slot_len"),
            (SB_JOURNAL_OFFSET_OFFSET, 8192, "journal_offset"),
            (SB_JOURNAL_BLOCKS_OFFSET, u64::MAX / 2, "journal_blocks"),
            (SB_CAPACITY_OFFSET, 4096, "capacity"),
        ];
        for (off, v, field) in cases {
            let mut b = vec![0u8; BLOCK];
            sb().encode(&mut b);
            put_u64(&mut b, off, v);
            let c = crc32c(&b[..SB_CRC_OFFSET]);
            put_u32(&mut b, SB_CRC_OFFSET, c);
            match Superblock::decode(&b) {
                Err(FormatError::BadField { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn short_superblock_is_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        assert!(Superblock::decode(&b[..50]).is_err());
    }

    fn ops() -> Vec<JournalOp> {
        vec![
            JournalOp::Set { extent: 3, owner: Owner { volume: 9, lext: 2, generation: 77 } },
            JournalOp::Free { extent: 5 },
        ]
    }

    #[test]
    fn journal_block_round_trips() {
        let mut b = vec![0u8; BLOCK];
        encode_journal_block(&mut b, &UUID, 42, &ops());
        assert_eq!(decode_journal_block(&b, &UUID, 42, 10), Ok(JournalRead::Record(ops())));
    }

    #[test]
    fn journal_block_with_other_seq_uuid_or_bad_crc_ends_replay() {
        let mut b = vec![0u8; BLOCK];
        encode_journal_block(&mut b, &UUID, 42, &ops());
        assert!(matches!(decode_journal_block(&b, &UUID, 43, 10), Ok(JournalRead::End(_))));
        assert!(matches!(decode_journal_block(&b, &[1; 16], 42, 10), Ok(JournalRead::End(_))));
        let mut torn = b.clone();
        torn[BLOCK - 1] ^= 0xff;
        assert!(matches!(decode_journal_block(&torn, &UUID, 42, 10), Ok(JournalRead::End(_))));
        let mut nomagic = b.clone();
        nomagic[0] = 0;
        assert!(matches!(decode_journal_block(&nomagic, &UUID, 42, 10), Ok(JournalRead::End(_))));
    }

    #[test]
    fn journal_block_with_checksummed_nonsense_is_an_error() {
        let mut b = vec![0u8; BLOCK];
        encode_journal_block(&mut b, &UUID, 1, &ops());
        // Extent beyond the drive.
        assert!(matches!(
            decode_journal_block(&b, &UUID, 1, 4),
            Err(FormatError::BadField { field: "journal.extent", value: 5 })
        ));
        let recrc = |b: &mut Vec<u8>| {
            let c = journal_crc(b);
            put_u32(b, JB_CRC_OFFSET, c);
        };
        let mut bad_op = b.clone();
        put_u32(&mut bad_op, JB_ENTRIES_OFFSET + JE_OP_OFFSET, 9);
        recrc(&mut bad_op);
        assert!(matches!(
            decode_journal_block(&bad_op, &UUID, 1, 10),
            Err(FormatError::BadField { field: "journal.op", .. })
        ));
        let mut bad_count = b.clone();
        put_u32(&mut bad_count, JB_COUNT_OFFSET, 1000);
        recrc(&mut bad_count);
        assert!(matches!(
            decode_journal_block(&bad_count, &UUID, 1, 10),
            Err(FormatError::BadField { field: "journal.count", .. })
        ));
        let mut newer = b.clone();
        put_u32(&mut newer, JB_VERSION_OFFSET, 2);
        recrc(&mut newer);
        assert_eq!(decode_journal_block(&newer, &UUID, 1, 10), Err(FormatError::UnsupportedVersion { found: 2 }));
    }

    // Regressions from the `store_format` fuzz target: each structure's
    // decoder accepted, under a valid checksum, bytes its encoder never
    // writes (reserved fields, free entries with an owner, bytes past the
    // last journal entry), so two different blocks decoded alike and
    // re-encoding changed the bytes. A broken or newer writer's blocks must
    // be refused, as unknown superblock flags already were.

    #[test]
    fn superblock_with_a_nonzero_reserved_field_is_rejected() {
        let mut b = vec![0u8; BLOCK];
        sb().encode(&mut b);
        put_u32(&mut b, SB_UNUSED_OFFSET, 0x27_0000);
        reseal::superblock(&mut b);
        assert_eq!(Superblock::decode(&b), Err(FormatError::BadField { field: "_unused", value: 0x27_0000 }));
    }

    #[test]
    fn checkpoint_header_with_a_nonzero_reserved_field_is_rejected() {
        let mut h = vec![0u8; BLOCK];
        CheckpointHeader::encode(&mut h, &UUID, 5, 3, |c| c);
        put_u32(&mut h, CK_UNUSED_OFFSET, 0x27_0000);
        assert_eq!(
            CheckpointHeader::decode(&h, &UUID, 3),
            Err(FormatError::BadField { field: "checkpoint._unused", value: 0x27_0000 })
        );
    }

    #[test]
    fn free_checkpoint_entry_with_an_owner_is_rejected() {
        for (off, field) in
            [(ENT_VOLUME_OFFSET, "entry.volume"), (ENT_LEXT_OFFSET, "entry.lext"), (ENT_GEN_OFFSET, "entry.gen")]
        {
            let mut e = vec![0u8; ENTRY_LEN];
            e[off] = 1;
            assert_eq!(decode_entry(&e), Err(FormatError::BadField { field, value: 1 }));
        }
        assert_eq!(decode_entry(&[0; ENTRY_LEN]), Ok(None));
        // Short input is an error too, not a panic.
        assert!(matches!(decode_entry(&[0; 8]), Err(FormatError::BadField { field: "entry.length", value: 8 })));
    }

    #[test]
    fn journal_block_with_bytes_its_encoder_never_writes_is_an_error() {
        let mut b = vec![0u8; BLOCK];
        encode_journal_block(&mut b, &UUID, 1, &ops());
        let cases: [(usize, &str); 5] = [
            (JB_UNUSED_OFFSET, "journal._unused"),
            (JB_ENTRIES_OFFSET + 2 * JE_LEN, "journal.unused_entry_bytes"),
            (BLOCK - 1, "journal.unused_entry_bytes"),
            // The second op is a free: only its op and extent may be set.
            (JB_ENTRIES_OFFSET + JE_LEN + JE_LEXT_OFFSET, "journal.free.lext"),
            (JB_ENTRIES_OFFSET + JE_LEN + JE_GEN_OFFSET, "journal.free.gen"),
        ];
        for (off, field) in cases {
            let mut bad = b.clone();
            bad[off] = 0x27;
            reseal::journal_block(&mut bad);
            match decode_journal_block(&bad, &UUID, 1, 10) {
                Err(FormatError::BadField { field: f, .. }) => assert_eq!(f, field, "byte {off}"),
                other => panic!("byte {off}: {other:?}"),
            }
        }
    }

    #[test]
    fn checkpoint_header_and_entries_round_trip() {
        let owners = [None, Some(Owner { volume: 1, lext: 4, generation: 3 }), None];
        let mut entries = vec![0u8; owners.len() * ENTRY_LEN];
        for (i, o) in owners.iter().enumerate() {
            encode_entry(&mut entries[i * ENTRY_LEN..], *o);
        }
        let mut h = vec![0u8; BLOCK];
        CheckpointHeader::encode(&mut h, &UUID, 5, 3, |c| checkpoint_crc(c, &entries));
        let hdr = CheckpointHeader::decode(&h, &UUID, 3).unwrap();
        assert_eq!(hdr.seq, 5);
        assert_eq!(checkpoint_crc(CheckpointHeader::crc_seed(&h), &entries), hdr.crc);
        for (i, o) in owners.iter().enumerate() {
            assert_eq!(decode_entry(&entries[i * ENTRY_LEN..]).unwrap(), *o);
        }
    }

    #[test]
    fn checkpoint_header_corruptions_are_rejected() {
        let mut h = vec![0u8; BLOCK];
        CheckpointHeader::encode(&mut h, &UUID, 5, 3, |c| c);
        let mut m = h.clone();
        m[1] = b'x';
        assert!(matches!(CheckpointHeader::decode(&m, &UUID, 3), Err(FormatError::BadMagic(_))));
        assert_eq!(CheckpointHeader::decode(&h, &[0; 16], 3), Err(FormatError::ForeignUuid));
        assert!(matches!(CheckpointHeader::decode(&h, &UUID, 4), Err(FormatError::BadField { .. })));
        let mut v = h.clone();
        put_u32(&mut v, CK_VERSION_OFFSET, 3);
        assert_eq!(CheckpointHeader::decode(&v, &UUID, 3), Err(FormatError::UnsupportedVersion { found: 3 }));
        let mut bad_state = vec![0u8; ENTRY_LEN];
        put_u32(&mut bad_state, ENT_STATE_OFFSET, 2);
        assert!(decode_entry(&bad_state).is_err());
    }
}
