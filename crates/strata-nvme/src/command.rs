//! The 64-byte submission queue entry and the fields of the admin and I/O
//! commands strata handles (NVMe Base 2.0 section 4.2, NVM Command Set 1.0).
//!
//! | offset | size | field                                        |
//! |--------|------|----------------------------------------------|
//! | 0      | 1    | OPC: opcode                                  |
//! | 1      | 1    | FUSE (bits 0-1), PSDT (bits 6-7)             |
//! | 2      | 2    | CID: command identifier                      |
//! | 4      | 4    | NSID (fabrics: byte 4 is FCTYPE)             |
//! | 8      | 4    | CDW2                                         |
//! | 12     | 4    | CDW3                                         |
//! | 16     | 8    | MPTR: metadata pointer                       |
//! | 24     | 16   | DPTR: data pointer, an SGL descriptor here   |
//! | 40     | 24   | CDW10 .. CDW15                               |
//!
//! NVMe over Fabrics always uses SGLs (PSDT = 01b or 10b). The SGL
//! descriptor in DPTR:
//!
//! | offset | size | field                                        |
//! |--------|------|----------------------------------------------|
//! | 0      | 8    | address (in-capsule: offset into the data)   |
//! | 8      | 4    | length                                       |
//! | 12     | 3    | reserved                                     |
//! | 15     | 1    | type (bits 4-7) and subtype (bits 0-3)       |
//!
//! [`Sqe`] is a 64-byte value with accessors; command decoders below read
//! the dwords of each command they concern and validate them, returning a
//! [`Status`] for the target to send when a field is invalid.

use crate::codec::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::status::Status;

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Offset of the opcode.
pub const OPCODE_OFFSET: usize = 0;
/// Offset of the flags byte (FUSE, PSDT).
pub const FLAGS_OFFSET: usize = OPCODE_OFFSET + 1;
/// Offset of the command identifier.
pub const CID_OFFSET: usize = FLAGS_OFFSET + 1;
/// Offset of the namespace identifier.
pub const NSID_OFFSET: usize = CID_OFFSET + 2;
/// Offset of the fabrics command type (overlays NSID byte 0).
pub const FCTYPE_OFFSET: usize = NSID_OFFSET;
/// Offset of command dword 2.
pub const CDW2_OFFSET: usize = NSID_OFFSET + 4;
/// Offset of command dword 3.
pub const CDW3_OFFSET: usize = CDW2_OFFSET + 4;
/// Offset of the metadata pointer.
pub const MPTR_OFFSET: usize = CDW3_OFFSET + 4;
/// Offset of the data pointer (SGL descriptor 1).
pub const DPTR_OFFSET: usize = MPTR_OFFSET + 8;
/// Offset of command dword 10.
pub const CDW10_OFFSET: usize = DPTR_OFFSET + 16;
/// Offset of command dword 14 (where a logged write's sequence number starts).
pub const CDW14_OFFSET: usize = CDW10_OFFSET + 16;

/// Offset of the SGL address within DPTR.
pub const SGL_ADDR_OFFSET: usize = 0;
/// Offset of the SGL length within DPTR.
pub const SGL_LENGTH_OFFSET: usize = SGL_ADDR_OFFSET + 8;
/// Offset of the SGL type/subtype byte within DPTR.
pub const SGL_TYPE_OFFSET: usize = SGL_LENGTH_OFFSET + 4 + 3;

/// SGL type byte for data carried in the command capsule: Data Block
/// descriptor (type 0) with subtype Offset (1).
pub const SGL_INCAPSULE_DATA: u8 = 0x01;
/// SGL type byte for data moved by the transport (R2T/H2CData, C2HData):
/// Transport SGL Data Block (type 5) with the transport-specific subtype
/// (0xA).
pub const SGL_TRANSPORT_DATA: u8 = 0x5A;

/// PSDT value for "SGLs used, metadata pointer to contiguous buffer".
pub const PSDT_SGL: u8 = 0x40;

/// An SGL descriptor (the DPTR of a fabrics command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SglDescriptor {
    /// Address; for in-capsule data, the offset from the start of the data.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Type (high nibble) and subtype (low nibble).
    pub sgl_type: u8,
}

/// A submission queue entry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_LEN]);

macro_rules! cdw_accessors {
    ($($get:ident, $set:ident, $n:expr;)*) => {$(
        #[doc = concat!("Command dword ", stringify!($n), ".")]
        pub fn $get(&self) -> u32 {
            get_u32(&self.0, CDW10_OFFSET + ($n - 10) * 4)
        }
        #[doc = concat!("Sets command dword ", stringify!($n), ".")]
        pub fn $set(&mut self, v: u32) {
            put_u32(&mut self.0, CDW10_OFFSET + ($n - 10) * 4, v)
        }
    )*};
}

impl Sqe {
    /// A zeroed entry with `opcode` and `cid`, PSDT set for SGLs.
    pub fn new(opcode: u8, cid: u16) -> Sqe {
        let mut s = Sqe([0; SQE_LEN]);
        s.0[OPCODE_OFFSET] = opcode;
        s.0[FLAGS_OFFSET] = PSDT_SGL;
        s.set_cid(cid);
        s
    }

    /// Reads an entry from exactly [`SQE_LEN`] bytes.
    pub fn from_bytes(b: &[u8; SQE_LEN]) -> Sqe {
        Sqe(*b)
    }

    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.0[OPCODE_OFFSET]
    }
    /// Flags byte (FUSE bits 0-1, PSDT bits 6-7).
    pub fn flags(&self) -> u8 {
        self.0[FLAGS_OFFSET]
    }
    /// Fused operation bits.
    pub fn fuse(&self) -> u8 {
        self.flags() & 0x3
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        get_u16(&self.0, CID_OFFSET)
    }
    /// Sets the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        put_u16(&mut self.0, CID_OFFSET, cid)
    }
    /// Namespace identifier.
    pub fn nsid(&self) -> u32 {
        get_u32(&self.0, NSID_OFFSET)
    }
    /// Sets the namespace identifier.
    pub fn set_nsid(&mut self, nsid: u32) {
        put_u32(&mut self.0, NSID_OFFSET, nsid)
    }
    /// Fabrics command type (meaningful when the opcode is
    /// [`crate::fabrics::FABRICS_OPCODE`]).
    pub fn fctype(&self) -> u8 {
        self.0[FCTYPE_OFFSET]
    }
    /// Sets the fabrics command type.
    pub fn set_fctype(&mut self, t: u8) {
        self.0[FCTYPE_OFFSET] = t
    }

    /// The SGL descriptor in DPTR.
    pub fn sgl(&self) -> SglDescriptor {
        let d = &self.0[DPTR_OFFSET..DPTR_OFFSET + 16];
        SglDescriptor {
            addr: get_u64(d, SGL_ADDR_OFFSET),
            length: get_u32(d, SGL_LENGTH_OFFSET),
            sgl_type: d[SGL_TYPE_OFFSET],
        }
    }

    /// Sets the SGL descriptor in DPTR.
    pub fn set_sgl(&mut self, sgl: SglDescriptor) {
        let d = &mut self.0[DPTR_OFFSET..DPTR_OFFSET + 16];
        d.fill(0);
        put_u64(d, SGL_ADDR_OFFSET, sgl.addr);
        put_u32(d, SGL_LENGTH_OFFSET, sgl.length);
        d[SGL_TYPE_OFFSET] = sgl.sgl_type;
    }

    cdw_accessors! {
        cdw10, set_cdw10, 10;
        cdw11, set_cdw11, 11;
        cdw12, set_cdw12, 12;
        cdw13, set_cdw13, 13;
        cdw14, set_cdw14, 14;
        cdw15, set_cdw15, 15;
    }

    /// The epoch of a [`fenced`] command (CDW2-CDW3).
    pub fn epoch(&self) -> u64 {
        get_u64(&self.0, CDW2_OFFSET)
    }
    /// Sets the epoch of a [`fenced`] command.
    pub fn set_epoch(&mut self, epoch: u64) {
        put_u64(&mut self.0, CDW2_OFFSET, epoch)
    }

    /// The update sequence number of a [`fenced::WRITE_LOGGED`]
    /// (CDW14-CDW15).
    pub fn update_seq(&self) -> u64 {
        get_u64(&self.0, CDW14_OFFSET)
    }
    /// Sets the update sequence number of a [`fenced::WRITE_LOGGED`].
    pub fn set_update_seq(&mut self, seq: u64) {
        put_u64(&mut self.0, CDW14_OFFSET, seq)
    }

    /// The stripe positions a [`fenced::WRITE_LOGGED`] update is sent to,
    /// one bit per position (CDW13; a stripe is at most 32 wide).
    pub fn update_targets(&self) -> u32 {
        self.cdw13()
    }
    /// Sets the stripe positions of a [`fenced::WRITE_LOGGED`].
    pub fn set_update_targets(&mut self, targets: u32) {
        self.set_cdw13(targets)
    }

    /// The 64-bit argument in CDW10-CDW11 ([`fenced::COMMIT`],
    /// [`fenced::ROLL_BACK`]).
    pub fn arg64(&self) -> u64 {
        get_u64(&self.0, CDW10_OFFSET)
    }
    /// Sets the 64-bit argument in CDW10-CDW11.
    pub fn set_arg64(&mut self, v: u64) {
        put_u64(&mut self.0, CDW10_OFFSET, v)
    }

    /// Bytes at `off..off+len` of the entry, for fields that do not fit the
    /// dword accessors (fabrics commands).
    pub fn bytes(&self) -> &[u8; SQE_LEN] {
        &self.0
    }

    /// Mutable bytes of the entry.
    pub fn bytes_mut(&mut self) -> &mut [u8; SQE_LEN] {
        &mut self.0
    }
}

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqe")
            .field("opcode", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &self.cid())
            .field("nsid", &self.nsid())
            .field("sgl", &self.sgl())
            .field("cdw10", &format_args!("{:#x}", self.cdw10()))
            .field("cdw11", &format_args!("{:#x}", self.cdw11()))
            .field("cdw12", &format_args!("{:#x}", self.cdw12()))
            .finish()
    }
}

/// Admin command opcodes (NVMe Base 2.0, figure 139).
pub mod admin {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set I/O opcodes (NVM Command Set 1.0, figure 18).
pub mod io {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Compare.
    pub const COMPARE: u8 = 0x05;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// strata's fenced I/O commands, for the internal fabric between storage
/// nodes. Opcodes 80h-FFh of the NVM command set are vendor specific; these
/// four mirror Flush, Write, Read and Write Zeroes field for field (the
/// direction bits of each opcode match its standard twin) and add the
/// sender's volume *epoch* in CDW2-CDW3 (bytes 8..16, little endian). A
/// replica refuses a command whose epoch is below the highest it has seen
/// with [`Status::STALE_EPOCH`]: an owner that lost its volume cannot
/// change it. See docs/pool.md.
pub mod fenced {
    /// Fenced Flush (no data).
    pub const FLUSH: u8 = 0x80;
    /// Fenced Write (host to controller).
    pub const WRITE: u8 = 0x81;
    /// Fenced Read (controller to host).
    pub const READ: u8 = 0x82;
    /// Fenced Write Zeroes (no data; CDW12 as Write Zeroes).
    pub const WRITE_ZEROES: u8 = 0x84;

    // The undo log of an erasure-coded shard (`strata_block::UndoLog`):
    // commands with no twin, admitted by the fence like the others.

    /// Logged Write (host to controller): a fenced Write whose overwritten
    /// bytes the shard keeps until committed; the update's sequence number
    /// in CDW14-CDW15 ([`super::Sqe::update_seq`]), the stripe positions
    /// it is sent to in CDW13 ([`super::Sqe::update_targets`]), kept with
    /// the record.
    pub const WRITE_LOGGED: u8 = 0x85;
    /// Commit (no data): forgets the undo of updates up to the sequence
    /// number in CDW10-CDW11 ([`super::Sqe::arg64`]).
    pub const COMMIT: u8 = 0x88;
    /// Roll Back (no data): undoes every update after the sequence number
    /// in CDW10-CDW11; the completion's result is how many it undid.
    pub const ROLL_BACK: u8 = 0x8C;
    /// Committed (no data): the completion's result is the shard's
    /// committed mark.
    pub const COMMITTED: u8 = 0x90;
    /// Discard Undo (no data): forgets every undo record.
    pub const DISCARD_UNDO: u8 = 0x94;
    /// Undo Records (controller to host): the shard's undo records of the
    /// updates after the sequence number in CDW10-CDW11, oldest first, as
    /// a list ([`encode_list`]) of (seq, lba, blocks, targets), in the blocks
    /// asked for (CDW12 as for Read).
    pub const UNDO_RECORDS: u8 = 0x8E;
    /// Roll Back Only (host to controller): puts back what the updates
    /// listed in the data ([`encode_list`] of sequence numbers) overwrote,
    /// newest first, forgets every record and raises the committed mark
    /// to CDW10-CDW11; the completion's result is how many records it
    /// undid.
    pub const ROLL_BACK_ONLY: u8 = 0x8D;
    /// The most items a list of [`UNDO_RECORDS`] or [`ROLL_BACK_ONLY`]
    /// holds: more than a shard's log keeps between two commits (2,048
    /// updates, each one record per shard).
    pub const MAX_LIST: usize = 16_384;
    /// Bytes of the item count before a list.
    pub const LIST_COUNT_LEN: usize = 4;

    /// True for the undo-log commands, which only a shard namespace takes.
    pub fn is_undo(opcode: u8) -> bool {
        matches!(opcode, WRITE_LOGGED | COMMIT | ROLL_BACK | COMMITTED | DISCARD_UNDO | UNDO_RECORDS | ROLL_BACK_ONLY)
    }

    /// A list of items of `width` little-endian u64s each (`values` holds
    /// them one after the other): the item count (u32 LE), the values,
    /// zeros to a multiple of `block` bytes. `None` for more than
    /// [`MAX_LIST`] items, a `values` that is not whole items, or a zero
    /// `width` or `block`.
    pub fn encode_list(values: &[u64], width: usize, block: usize) -> Option<Vec<u8>> {
        if width == 0 || block == 0 || !values.len().is_multiple_of(width) || values.len() / width > MAX_LIST {
            return None;
        }
        let count = u32::try_from(values.len() / width).ok()?;
        let len = LIST_COUNT_LEN + values.len() * 8;
        let mut out = Vec::with_capacity(len.div_ceil(block) * block);
        out.extend_from_slice(&count.to_le_bytes());
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.resize(len.div_ceil(block) * block, 0);
        Some(out)
    }

    /// The values of a list of `width`-u64 items laid out as
    /// [`encode_list`] does (the bytes after it are not read).
    ///
    /// # Errors
    ///
    /// A count over [`MAX_LIST`] or beyond the data, or a zero `width`,
    /// as text.
    pub fn decode_list(data: &[u8], width: usize) -> Result<Vec<u64>, &'static str> {
        if width == 0 {
            return Err("a list of items of no values");
        }
        let count: [u8; LIST_COUNT_LEN] =
            data.get(..LIST_COUNT_LEN).and_then(|b| b.try_into().ok()).ok_or("shorter than a list's count")?;
        let count = u32::from_le_bytes(count) as usize;
        if count > MAX_LIST {
            return Err("a list longer than the longest list");
        }
        let body = data.get(LIST_COUNT_LEN..LIST_COUNT_LEN + count * width * 8).ok_or("a list longer than its data")?;
        Ok(body.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect())
    }

    // What an owner keeps on its replicas' nodes so that it can serve
    // while the metadata store is out of reach (docs/pool.md, "I/O through
    // a metadata outage"). Admitted by the fence like the others; every
    // replica namespace takes them.

    /// Promise (no data): the replica promises the sender, the owner at
    /// the command's epoch, to let no newer owner in for the milliseconds
    /// in CDW10-CDW11 ([`super::Sqe::arg64`]). Refused with
    /// [`super::super::status::Status::STALE_EPOCH`] once a newer owner
    /// waits.
    pub const PROMISE: u8 = 0x98;
    /// Note Save (host to controller): the owner's note (its dirty-region
    /// log, while the metadata store does not answer) replaces the one the
    /// replica's node keeps for the volume, durably. The data is
    /// [`NOTE_LEN_LEN`] bytes of length (u32 LE), the note, then zeros to
    /// whole blocks.
    pub const NOTE_SAVE: u8 = 0x99;
    /// Note Load (controller to host): the note kept for the volume, laid
    /// out as for [`NOTE_SAVE`] (length 0: none), in the blocks asked for.
    pub const NOTE_LOAD: u8 = 0x9A;
    /// Bytes of the length before a note.
    pub const NOTE_LEN_LEN: usize = 4;
    /// The largest note: 512 KiB, the dirty-region log of a volume of
    /// 65,536 regions with the missed sets of dozens of nodes.
    pub const MAX_NOTE: usize = 512 << 10;

    /// True for the owner commands every replica namespace takes.
    pub fn is_owner(opcode: u8) -> bool {
        matches!(opcode, PROMISE | NOTE_SAVE | NOTE_LOAD)
    }

    /// A note laid out for [`NOTE_SAVE`]: length, note, zeros to a
    /// multiple of `block` bytes. `None` for a note over [`MAX_NOTE`].
    pub fn encode_note(note: &[u8], block: usize) -> Option<Vec<u8>> {
        if note.len() > MAX_NOTE || block == 0 {
            return None;
        }
        let len = u32::try_from(note.len()).ok()?;
        let mut out = Vec::with_capacity((NOTE_LEN_LEN + note.len()).div_ceil(block) * block);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(note);
        out.resize(out.len().div_ceil(block) * block, 0);
        Some(out)
    }

    /// The note in `data` laid out as [`encode_note`] does.
    ///
    /// # Errors
    ///
    /// A length beyond the data or over [`MAX_NOTE`], as text.
    pub fn decode_note(data: &[u8]) -> Result<&[u8], &'static str> {
        let len: [u8; NOTE_LEN_LEN] =
            data.get(..NOTE_LEN_LEN).and_then(|b| b.try_into().ok()).ok_or("shorter than a note's length")?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_NOTE {
            return Err("note longer than the largest note");
        }
        data.get(NOTE_LEN_LEN..NOTE_LEN_LEN + len).ok_or("note longer than its data")
    }

    /// The standard command a fenced opcode mirrors, or `None` when
    /// `opcode` is not a fenced command.
    pub fn standard(opcode: u8) -> Option<u8> {
        match opcode {
            FLUSH => Some(super::io::FLUSH),
            WRITE => Some(super::io::WRITE),
            READ => Some(super::io::READ),
            WRITE_ZEROES => Some(super::io::WRITE_ZEROES),
            _ => None,
        }
    }

    /// The fenced twin of a standard opcode, or `None` for commands the
    /// fabric does not carry.
    pub fn of(opcode: u8) -> Option<u8> {
        match opcode {
            super::io::FLUSH => Some(FLUSH),
            super::io::WRITE => Some(WRITE),
            super::io::READ => Some(READ),
            super::io::WRITE_ZEROES => Some(WRITE_ZEROES),
            _ => None,
        }
    }
}

/// True when `opcode` transfers data from host to controller (bits 0-1 of
/// the opcode are the data transfer direction: 01b host to controller).
pub fn is_host_to_controller(opcode: u8) -> bool {
    opcode & 0x3 == 0x1
}

/// True when `opcode` transfers data from controller to host (10b).
pub fn is_controller_to_host(opcode: u8) -> bool {
    opcode & 0x3 == 0x2
}

/// Fields of Read, Write and Compare (NVM Command Set 1.0, section 3.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWrite {
    /// Starting LBA (CDW10-11).
    pub slba: u64,
    /// Number of logical blocks, 1-based (CDW12 bits 0-15 hold it 0-based).
    pub nlb: u32,
    /// Force Unit Access (CDW12 bit 30).
    pub fua: bool,
    /// Limited Retry (CDW12 bit 31).
    pub limited_retry: bool,
}

impl ReadWrite {
    /// Decodes the fields of a Read, Write or Compare entry.
    pub fn decode(sqe: &Sqe) -> ReadWrite {
        let cdw12 = sqe.cdw12();
        ReadWrite {
            slba: u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32),
            nlb: (cdw12 & 0xffff) + 1,
            fua: cdw12 & (1 << 30) != 0,
            limited_retry: cdw12 & (1 << 31) != 0,
        }
    }

    /// Encodes these fields into `sqe`.
    ///
    /// # Panics
    ///
    /// Panics if `nlb` is 0 or above 65536 (a caller bug).
    pub fn encode(&self, sqe: &mut Sqe) {
        assert!((1..=65536).contains(&self.nlb), "nlb {} out of 1..=65536", self.nlb);
        sqe.set_cdw10(self.slba as u32);
        sqe.set_cdw11((self.slba >> 32) as u32);
        sqe.set_cdw12((self.nlb - 1) | (u32::from(self.fua) << 30) | (u32::from(self.limited_retry) << 31));
    }
}

/// Fields of Write Zeroes (NVM Command Set 1.0, section 3.2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteZeroes {
    /// Starting LBA.
    pub slba: u64,
    /// Number of logical blocks, 1-based.
    pub nlb: u32,
    /// Deallocate (CDW12 bit 25).
    pub deallocate: bool,
    /// Force Unit Access (CDW12 bit 30).
    pub fua: bool,
}

impl WriteZeroes {
    /// Decodes the fields of a Write Zeroes entry.
    pub fn decode(sqe: &Sqe) -> WriteZeroes {
        let rw = ReadWrite::decode(sqe);
        WriteZeroes { slba: rw.slba, nlb: rw.nlb, deallocate: sqe.cdw12() & (1 << 25) != 0, fua: rw.fua }
    }

    /// Encodes these fields into `sqe`.
    pub fn encode(&self, sqe: &mut Sqe) {
        ReadWrite { slba: self.slba, nlb: self.nlb, fua: self.fua, limited_retry: false }.encode(sqe);
        sqe.set_cdw12(sqe.cdw12() | (u32::from(self.deallocate) << 25));
    }
}

/// Length of one Dataset Management range.
pub const DSM_RANGE_LEN: usize = 16;
/// Most ranges one Dataset Management command may carry.
pub const DSM_MAX_RANGES: usize = 256;

/// Fields of Dataset Management (NVM Command Set 1.0, section 3.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetManagement {
    /// Number of ranges, 1-based (CDW10 bits 0-7 hold it 0-based).
    pub nr: usize,
    /// Attribute - Deallocate (CDW11 bit 2).
    pub deallocate: bool,
}

impl DatasetManagement {
    /// Decodes the fields of a Dataset Management entry.
    pub fn decode(sqe: &Sqe) -> DatasetManagement {
        DatasetManagement { nr: (sqe.cdw10() & 0xff) as usize + 1, deallocate: sqe.cdw11() & (1 << 2) != 0 }
    }

    /// Bytes of range data this command carries.
    pub fn data_len(&self) -> usize {
        self.nr * DSM_RANGE_LEN
    }
}

/// One Dataset Management range (figure 39): context attributes at 0,
/// length in logical blocks at 4, starting LBA at 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DsmRange {
    /// Context attributes.
    pub attributes: u32,
    /// Length in logical blocks.
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

impl DsmRange {
    /// Decodes the ranges in `data`; trailing bytes short of a whole range
    /// are ignored.
    pub fn decode_all(data: &[u8]) -> impl Iterator<Item = DsmRange> + '_ {
        data.chunks_exact(DSM_RANGE_LEN).map(|r| DsmRange {
            attributes: get_u32(r, 0),
            nlb: get_u32(r, 4),
            slba: get_u64(r, 8),
        })
    }

    /// Encodes this range.
    pub fn encode(&self) -> [u8; DSM_RANGE_LEN] {
        let mut b = [0u8; DSM_RANGE_LEN];
        put_u32(&mut b, 0, self.attributes);
        put_u32(&mut b, 4, self.nlb);
        put_u64(&mut b, 8, self.slba);
        b
    }
}

/// Fields of Identify (NVMe Base 2.0, section 5.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentifyCmd {
    /// Controller or Namespace Structure (CDW10 bits 0-7).
    pub cns: u8,
    /// Controller identifier (CDW10 bits 16-31).
    pub cntid: u16,
    /// Command set identifier (CDW11 bits 24-31).
    pub csi: u8,
}

impl IdentifyCmd {
    /// Decodes the fields of an Identify entry.
    pub fn decode(sqe: &Sqe) -> IdentifyCmd {
        IdentifyCmd { cns: sqe.cdw10() as u8, cntid: (sqe.cdw10() >> 16) as u16, csi: (sqe.cdw11() >> 24) as u8 }
    }
}

/// Fields of Get Log Page (NVMe Base 2.0, section 5.16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetLogPage {
    /// Log page identifier.
    pub lid: u8,
    /// Log specific field.
    pub lsp: u8,
    /// Retain Asynchronous Event.
    pub rae: bool,
    /// Bytes to return (NUMD + 1 dwords).
    pub len: usize,
    /// Byte offset into the log page (must be dword aligned).
    pub offset: u64,
}

impl GetLogPage {
    /// Decodes the fields of a Get Log Page entry.
    pub fn decode(sqe: &Sqe) -> GetLogPage {
        let cdw10 = sqe.cdw10();
        let numdl = cdw10 >> 16;
        let numdu = sqe.cdw11() & 0xffff;
        let numd = ((numdu << 16) | numdl) as usize + 1;
        GetLogPage {
            lid: cdw10 as u8,
            lsp: ((cdw10 >> 8) & 0x7f) as u8,
            rae: cdw10 & (1 << 15) != 0,
            len: numd * 4,
            offset: u64::from(sqe.cdw12()) | (u64::from(sqe.cdw13()) << 32),
        }
    }

    /// Encodes these fields into `sqe`.
    ///
    /// # Panics
    ///
    /// Panics if `len` is not a non-zero multiple of 4 (a caller bug).
    pub fn encode(&self, sqe: &mut Sqe) {
        assert!(self.len >= 4 && self.len.is_multiple_of(4), "log length {} is not whole dwords", self.len);
        let numd = (self.len / 4 - 1) as u32;
        sqe.set_cdw10(
            u32::from(self.lid) | (u32::from(self.lsp & 0x7f) << 8) | (u32::from(self.rae) << 15) | (numd << 16),
        );
        sqe.set_cdw11(numd >> 16);
        sqe.set_cdw12(self.offset as u32);
        sqe.set_cdw13((self.offset >> 32) as u32);
    }
}

/// Feature identifiers (NVMe Base 2.0, figure 271).
pub mod feature {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Host Identifier.
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// Fields common to Get Features and Set Features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeaturesCmd {
    /// Feature identifier (CDW10 bits 0-7).
    pub fid: u8,
    /// Get Features: select (CDW10 bits 8-10).
    pub sel: u8,
    /// Set Features: save (CDW10 bit 31).
    pub save: bool,
    /// Feature specific value (CDW11).
    pub value: u32,
}

impl FeaturesCmd {
    /// Decodes the fields of a Get or Set Features entry.
    pub fn decode(sqe: &Sqe) -> FeaturesCmd {
        let cdw10 = sqe.cdw10();
        FeaturesCmd {
            fid: cdw10 as u8,
            sel: ((cdw10 >> 8) & 0x7) as u8,
            save: cdw10 & (1 << 31) != 0,
            value: sqe.cdw11(),
        }
    }
}

/// The Temperature Threshold feature's CDW11 (Get and Set Features,
/// FID 04h): which threshold of which sensor, and for Set its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemperatureThreshold {
    /// TMPTH, bits 15:0: the threshold in kelvins.
    pub kelvins: u16,
    /// TMPSEL, bits 19:16: 0 the Composite Temperature, 1-8 Temperature
    /// Sensor 1-8, Fh every implemented sensor (Set Features).
    pub sensor: u8,
    /// THSEL, bits 21:20: false the over, true the under temperature
    /// threshold.
    pub under: bool,
}

impl TemperatureThreshold {
    /// TMPSEL: the Composite Temperature.
    pub const COMPOSITE: u8 = 0x0;
    /// TMPSEL: every implemented sensor.
    pub const ALL_SENSORS: u8 = 0xF;

    /// Decodes CDW11; `None` for a reserved THSEL (10b, 11b) or TMPSEL
    /// (9h-Eh).
    pub fn decode(cdw11: u32) -> Option<TemperatureThreshold> {
        let sensor = ((cdw11 >> 16) & 0xF) as u8;
        let under = match (cdw11 >> 20) & 0x3 {
            0 => false,
            1 => true,
            _ => return None,
        };
        if (9..Self::ALL_SENSORS).contains(&sensor) {
            return None;
        }
        Some(TemperatureThreshold { kelvins: cdw11 as u16, sensor, under })
    }

    /// Encodes CDW11.
    pub fn encode(&self) -> u32 {
        u32::from(self.kelvins) | (u32::from(self.sensor & 0xF) << 16) | (u32::from(self.under) << 20)
    }
}

/// Asynchronous event types (completion DW0 bits 0-2).
pub mod async_event {
    /// Notice.
    pub const TYPE_NOTICE: u8 = 0x2;
    /// Notice information: Namespace Attribute Changed.
    pub const INFO_NS_ATTR_CHANGED: u8 = 0x00;
    /// Notice information: Asymmetric Namespace Access Change.
    pub const INFO_ANA_CHANGE: u8 = 0x03;
    /// Notice information: Discovery Log Page Change (a discovery
    /// controller's log changed).
    pub const INFO_DISCOVERY_LOG_CHANGE: u8 = 0xF0;
    /// I/O Command Specific status (sent whatever the Asynchronous Event
    /// Configuration says).
    pub const TYPE_IO_COMMAND_SPECIFIC: u8 = 0x6;
    /// I/O command specific information: Reservation Log Page Available.
    pub const INFO_RESERVATION_LOG_AVAILABLE: u8 = 0x00;
    /// Asynchronous Event Configuration bit enabling namespace attribute
    /// notices.
    pub const CONFIG_NS_ATTR: u32 = 1 << 8;
    /// Asynchronous Event Configuration bit enabling ANA change notices.
    pub const CONFIG_ANA_CHANGE: u32 = 1 << 11;
    /// Asynchronous Event Configuration bit enabling Discovery Log Page
    /// Change notices (a discovery controller's).
    pub const CONFIG_DISCOVERY_LOG_CHANGE: u32 = 1 << 31;

    /// Completion DW0 for an event: type in bits 0-2, information in bits
    /// 8-15, log page identifier in bits 16-23.
    pub fn dw0(event_type: u8, info: u8, log_page: u8) -> u32 {
        u32::from(event_type & 0x7) | (u32::from(info) << 8) | (u32::from(log_page) << 16)
    }
}

/// Validates that a command with no data has a null or zero-length SGL.
pub fn sgl_is_empty(sqe: &Sqe) -> bool {
    sqe.sgl().length == 0
}

/// Checks the PSDT field says SGLs: fabrics commands must not use PRPs
/// (NVMe-oF 1.1 section 2.2).
pub fn check_psdt(sqe: &Sqe) -> Result<(), Status> {
    match sqe.flags() >> 6 {
        1 | 2 => Ok(()),
        _ => Err(Status::INVALID_FIELD),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_spec() {
        // struct nvme_common_command in include/linux/nvme.h.
        assert_eq!(OPCODE_OFFSET, 0);
        assert_eq!(FLAGS_OFFSET, 1);
        assert_eq!(CID_OFFSET, 2);
        assert_eq!(NSID_OFFSET, 4);
        assert_eq!(CDW2_OFFSET, 8);
        assert_eq!(MPTR_OFFSET, 16);
        assert_eq!(DPTR_OFFSET, 24);
        assert_eq!(CDW10_OFFSET, 40);
        assert_eq!(CDW10_OFFSET + 6 * 4, SQE_LEN);
        // struct nvme_sgl_desc: addr, length, rsvd[3], type.
        assert_eq!((SGL_ADDR_OFFSET, SGL_LENGTH_OFFSET, SGL_TYPE_OFFSET), (0, 8, 15));
    }

    #[test]
    fn sgl_lands_in_dptr() {
        let mut s = Sqe::new(io::WRITE, 7);
        s.set_sgl(SglDescriptor { addr: 0, length: 8192, sgl_type: SGL_TRANSPORT_DATA });
        assert_eq!(&s.0[32..36], &8192u32.to_le_bytes());
        assert_eq!(s.0[39], 0x5A);
        assert_eq!(s.sgl().length, 8192);
        assert!(check_psdt(&s).is_ok());
        s.0[FLAGS_OFFSET] = 0;
        assert_eq!(check_psdt(&s), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn undo_commands_carry_their_arguments_at_pinned_offsets() {
        assert_eq!(CDW14_OFFSET, 56);
        let mut sqe = Sqe::new(fenced::WRITE_LOGGED, 1);
        sqe.set_update_seq(0x1122_3344_5566_7788);
        sqe.set_arg64(0x0a0b_0c0d_0e0f_1011);
        assert_eq!(&sqe.bytes()[56..64], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&sqe.bytes()[40..48], &0x0a0b_0c0d_0e0f_1011u64.to_le_bytes());
        assert_eq!((sqe.cdw14(), sqe.cdw15()), (0x5566_7788, 0x1122_3344));
        sqe.set_update_targets(0x8000_0035);
        assert_eq!(&sqe.bytes()[52..56], &0x8000_0035u32.to_le_bytes());
        assert_eq!(sqe.update_targets(), 0x8000_0035);
        assert!(is_host_to_controller(fenced::WRITE_LOGGED));
        for op in [fenced::COMMIT, fenced::ROLL_BACK, fenced::COMMITTED, fenced::DISCARD_UNDO] {
            assert_eq!(op & 3, 0, "{op:#x} carries no data");
            assert!(fenced::is_undo(op));
            assert_eq!(fenced::standard(op), None);
        }
        assert!(!fenced::is_undo(fenced::WRITE));
    }

    #[test]
    fn undo_lists_have_their_data_direction_and_round_trip_at_pinned_offsets() {
        assert!(is_controller_to_host(fenced::UNDO_RECORDS));
        assert!(is_host_to_controller(fenced::ROLL_BACK_ONLY));
        let used = [0x80, 0x81, 0x82, 0x84, 0x85, 0x88, 0x8C, 0x90, 0x94, 0x98, 0x99, 0x9A];
        for op in [fenced::UNDO_RECORDS, fenced::ROLL_BACK_ONLY] {
            assert!(fenced::is_undo(op) && !fenced::is_owner(op) && fenced::standard(op).is_none());
            assert!(!used.contains(&op), "{op:#x} is taken");
        }
        // Two records of (seq, lba, blocks): count, then 48 bytes.
        let wire = fenced::encode_list(&[7, 100, 1, 9, 200, 32], 3, 512).unwrap();
        assert_eq!(wire.len(), 512);
        assert_eq!(&wire[..4], &2u32.to_le_bytes());
        assert_eq!(&wire[4..12], &7u64.to_le_bytes());
        assert_eq!(&wire[44..52], &32u64.to_le_bytes());
        assert!(wire[52..].iter().all(|&b| b == 0));
        assert_eq!(fenced::decode_list(&wire, 3), Ok(vec![7, 100, 1, 9, 200, 32]));
        assert_eq!(fenced::decode_list(&fenced::encode_list(&[], 1, 512).unwrap(), 1), Ok(vec![]));
        assert!(fenced::encode_list(&[1, 2], 3, 512).is_none(), "not whole items");
        assert!(fenced::encode_list(&vec![0; fenced::MAX_LIST + 1], 1, 4096).is_none());
        assert!(fenced::encode_list(&vec![0; fenced::MAX_LIST], 1, 4096).is_some());
        let mut long = wire.clone();
        long[..4].copy_from_slice(&30u32.to_le_bytes());
        assert!(fenced::decode_list(&long, 3).is_err(), "beyond the data");
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(fenced::decode_list(&long, 3).is_err(), "beyond the longest list");
        assert!(fenced::decode_list(&[1, 0], 1).is_err());
        assert!(fenced::decode_list(&wire, 0).is_err());
    }

    #[test]
    fn owner_commands_have_their_data_direction_and_notes_round_trip() {
        assert_eq!(fenced::PROMISE & 3, 0, "no data");
        assert!(is_host_to_controller(fenced::NOTE_SAVE));
        assert!(is_controller_to_host(fenced::NOTE_LOAD));
        for op in [fenced::PROMISE, fenced::NOTE_SAVE, fenced::NOTE_LOAD] {
            assert!(fenced::is_owner(op) && !fenced::is_undo(op) && fenced::standard(op).is_none());
        }
        let wire = fenced::encode_note(b"dirty", 512).unwrap();
        assert_eq!(wire.len(), 512);
        assert_eq!(&wire[..4], &5u32.to_le_bytes());
        assert_eq!(fenced::decode_note(&wire), Ok(&b"dirty"[..]));
        assert_eq!(fenced::decode_note(&fenced::encode_note(b"", 512).unwrap()), Ok(&b""[..]));
        assert!(fenced::encode_note(&vec![0; fenced::MAX_NOTE + 1], 512).is_none());
        let mut long = wire.clone();
        long[..4].copy_from_slice(&600u32.to_le_bytes());
        assert!(fenced::decode_note(&long).is_err(), "beyond the data");
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(fenced::decode_note(&long).is_err(), "beyond the largest note");
        assert!(fenced::decode_note(&[1, 0]).is_err());
    }

    #[test]
    fn fenced_commands_mirror_their_twins_and_carry_the_epoch_in_cdw2_3() {
        for op in [io::FLUSH, io::WRITE, io::READ, io::WRITE_ZEROES] {
            let f = fenced::of(op).unwrap();
            assert!(f >= 0x80, "vendor-specific range");
            assert_eq!(fenced::standard(f), Some(op));
            assert_eq!(f & 0x3, op & 0x3, "same data direction as the standard command");
        }
        assert_eq!(fenced::of(io::COMPARE), None);
        assert_eq!(fenced::standard(io::WRITE), None);
        let mut sqe = Sqe::new(fenced::WRITE, 9);
        sqe.set_epoch(0x0102_0304_0506_0708);
        assert_eq!(&sqe.bytes()[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(sqe.epoch(), 0x0102_0304_0506_0708);
        ReadWrite { slba: 5, nlb: 2, fua: true, limited_retry: false }.encode(&mut sqe);
        assert_eq!(sqe.epoch(), 0x0102_0304_0506_0708, "the read/write fields leave the epoch alone");
    }

    #[test]
    fn data_direction_follows_opcode_bits() {
        assert!(is_host_to_controller(io::WRITE));
        assert!(is_controller_to_host(io::READ));
        assert!(is_host_to_controller(io::COMPARE));
        assert!(is_host_to_controller(io::DATASET_MANAGEMENT));
        assert!(!is_host_to_controller(io::FLUSH) && !is_controller_to_host(io::FLUSH));
        assert!(is_controller_to_host(admin::IDENTIFY) && is_controller_to_host(admin::GET_LOG_PAGE));
    }

    #[test]
    fn dsm_ranges_decode() {
        let r = DsmRange { attributes: 1, nlb: 8, slba: 1 << 40 };
        let mut data = r.encode().to_vec();
        data.extend_from_slice(&[0; 5]);
        assert_eq!(DsmRange::decode_all(&data).collect::<Vec<_>>(), vec![r]);
        let mut s = Sqe::new(io::DATASET_MANAGEMENT, 1);
        s.set_cdw10(255);
        s.set_cdw11(4);
        let d = DatasetManagement::decode(&s);
        assert_eq!((d.nr, d.deallocate, d.data_len()), (256, true, 4096));
    }

    #[test]
    fn write_zeroes_flags() {
        let mut s = Sqe::new(io::WRITE_ZEROES, 1);
        let wz = WriteZeroes { slba: 10, nlb: 65536, deallocate: true, fua: true };
        wz.encode(&mut s);
        assert_eq!(s.cdw12(), 0xffff | (1 << 25) | (1 << 30));
        assert_eq!(WriteZeroes::decode(&s), wz);
    }

    proptest! {
        #[test]
        fn read_write_round_trip(slba: u64, nlb in 1u32..=65536, fua: bool, lr: bool) {
            let rw = ReadWrite { slba, nlb, fua, limited_retry: lr };
            let mut s = Sqe::new(io::READ, 3);
            rw.encode(&mut s);
            prop_assert_eq!(ReadWrite::decode(&s), rw);
        }

        #[test]
        fn get_log_page_round_trip(lid: u8, lsp in 0u8..0x80, rae: bool, dwords in 1usize..(1 << 20), offset: u64) {
            let g = GetLogPage { lid, lsp, rae, len: dwords * 4, offset };
            let mut s = Sqe::new(admin::GET_LOG_PAGE, 3);
            g.encode(&mut s);
            prop_assert_eq!(GetLogPage::decode(&s), g);
        }
    }

    /// Bit positions as in NVMe Base 2.0, Get/Set Features FID 04h
    /// (`NVME_TEMP_THRESH_MASK`, `NVME_TEMP_THRESH_SELECT_SHIFT` in
    /// libnvme): TMPTH 15:0, TMPSEL 19:16, THSEL 21:20.
    #[test]
    fn temperature_threshold_fields_sit_at_their_bits_and_reserved_selects_are_refused() {
        let t = TemperatureThreshold::decode(0x0011_0157).unwrap();
        assert_eq!(t, TemperatureThreshold { kelvins: 0x157, sensor: 1, under: true });
        assert_eq!(t.encode(), 0x0011_0157);
        assert_eq!(TemperatureThreshold::decode(0x000F_0000).unwrap().sensor, TemperatureThreshold::ALL_SENSORS);
        assert_eq!(TemperatureThreshold::decode(0), Some(TemperatureThreshold { kelvins: 0, sensor: 0, under: false }));
        assert_eq!(TemperatureThreshold::decode(0x0020_0000), None, "THSEL 10b");
        assert_eq!(TemperatureThreshold::decode(0x0030_0000), None, "THSEL 11b");
        for sensor in 9..15u32 {
            assert_eq!(TemperatureThreshold::decode(sensor << 16), None, "TMPSEL {sensor}");
        }
        // Bits above THSEL are reserved and ignored.
        assert_eq!(TemperatureThreshold::decode(0xFFC0_0001).unwrap().kelvins, 1);
    }
}
