//! The on-device format of a log tier (local SSD or pool volume).
//!
//! # Format
//!
//! All integers little-endian. The device is a superblock and a ring of
//! equal segments:
//!
//! ```text
//! offset 0                  superblock (4096 bytes)
//! 4096 + i * segment_bytes  segment i: header (4096 bytes), then records
//! ```
//!
//! Superblock:
//!
//! | offset | len | field |
//! |---|---|---|
//! | 0 | 8 | magic `STRATAKV` |
//! | 8 | 4 | version (3; 2 is read too) |
//! | 12 | 4 | CRC32C of bytes 16..64 |
//! | 16 | 8 | log id (random at format) |
//! | 24 | 8 | segment bytes |
//! | 32 | 8 | segment count |
//!
//! Segment header:
//!
//! | offset | len | field |
//! |---|---|---|
//! | 0 | 8 | magic `STKVSEG1` |
//! | 8 | 4 | version (3; 2 is read too) |
//! | 12 | 4 | CRC32C of bytes 16..64 |
//! | 16 | 8 | log id |
//! | 24 | 8 | sequence: higher is newer; 0 never appears |
//!
//! Record, at 8-byte aligned offsets after the header; a record never
//! crosses its segment's end:
//!
//! | offset | len | field |
//! |---|---|---|
//! | 0 | 4 | magic `KVR1` |
//! | 4 | 4 | CRC32C of bytes 8..end (header rest, key and value) |
//! | 8 | 8 | the segment's sequence when written |
//! | 16 | 1 | kind: 1 put, 2 delete, 3 delete a namespace, 4 expiry (below) |
//! | 17 | 3 | unused, zero |
//! | 20 | 4 | key length |
//! | 24 | 8 | value length |
//! | 32 | 8 | expiry, Unix milliseconds; 0: none |
//! | 40 | 8 | version: the store's write stamp for the key (below) |
//! | 48 | key length | key |
//! | .. | value length | value |
//!
//! A scan of a segment reads records from offset 4096 until one fails its
//! checks (magic, sequence, lengths, CRC). Where a write buffer ended the
//! next record starts at the next 4096-byte boundary, so a failed check
//! at an unaligned offset is retried once there. The sequence in each
//! record is what keeps a reused segment's older records (still on the
//! device past the new ones) from being read as current, and a torn
//! record fails its CRC: either way the scan ends, and what follows is a
//! miss, never wrong bytes.
//!
//! The version orders records of one key across logs (the SSD and the
//! pool tier): every put takes a new one, and a block written to both
//! logs carries the same one in each. At recovery the highest version of
//! a key wins, and each log's record with that version is a copy of it.
//!
//! The kinds:
//!
//! - **put** (1): the key's value, with its version and expiry.
//! - **delete** (2): a tombstone, no value. Its version is the one it
//!   deletes: it beats puts of that version and older.
//! - **delete a namespace** (3): the key field is a prefix of internal
//!   keys (a namespace's, `[name length, name]`, or empty for every key)
//!   and the version is the highest the store had given when the
//!   namespace was deleted: every put of a key under the prefix with that
//!   version or an older one is deleted. One record stands for any number
//!   of keys (`KV.DELNS`, `FLUSHALL`).
//! - **expiry** (4): the key's expiry changed (`EXPIRE`, `PERSIST`,
//!   `GETEX`) while a put of it was in this log. The value is 8 bytes,
//!   the version of the put it applies to; the version field is a fresh
//!   stamp that orders expiry records of one put; the expiry field is the
//!   new expiry (0: none). It applies only while that put is the key's
//!   newest.
//!
//! Records of one log are appended in the order the store made the
//! changes, so a tombstone, a namespace's deletion or an expiry record
//! lies after every record it covers: reclaiming segments oldest first
//! never drops one while what it covers is still on the device.
//!
//! Compatibility: a device with another magic is formatted afresh (it is
//! a cache). Version 2 (before kinds 3 and 4) is read as it is, and its
//! superblock is rewritten as version 3 when the log is opened, before
//! anything new is written, so that a build that reads version 2 only
//! formats it afresh rather than miss a namespace's deletion. A device of
//! any other version is formatted afresh with a warning naming it. The
//! version is bumped for any layout change (2 added the record version,
//! 3 the kinds 3 and 4).

/// Unit of device I/O and alignment of segment starts.
pub const BLOCK: u64 = 4096;

/// Superblock magic.
pub const SUPER_MAGIC: &[u8; 8] = b"STRATAKV";
/// Segment header magic.
pub const SEG_MAGIC: &[u8; 8] = b"STKVSEG1";
/// Record magic.
pub const REC_MAGIC: &[u8; 4] = b"KVR1";
/// Format version written.
pub const VERSION: u32 = 3;
/// The oldest format version read: the same layout without record
/// kinds 3 and 4.
pub const OLDEST_READ: u32 = 2;

/// True for a format version this build reads.
fn readable(version: u32) -> bool {
    (OLDEST_READ..=VERSION).contains(&version)
}

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const CRC_OFFSET: usize = VERSION_OFFSET + 4;
const ID_OFFSET: usize = CRC_OFFSET + 4;
const SUPER_SEG_BYTES_OFFSET: usize = ID_OFFSET + 8;
const SUPER_SEGS_OFFSET: usize = SUPER_SEG_BYTES_OFFSET + 8;
const SEG_SEQ_OFFSET: usize = ID_OFFSET + 8;
/// Bytes covered by the superblock's and a segment header's CRC end here.
const HEADER_END: usize = 64;

const REC_CRC_OFFSET: usize = 4;
const REC_SEQ_OFFSET: usize = REC_CRC_OFFSET + 4;
const REC_KIND_OFFSET: usize = REC_SEQ_OFFSET + 8;
const REC_KEY_LEN_OFFSET: usize = REC_KIND_OFFSET + 4;
const REC_VALUE_LEN_OFFSET: usize = REC_KEY_LEN_OFFSET + 4;
const REC_EXPIRES_OFFSET: usize = REC_VALUE_LEN_OFFSET + 8;
const REC_VERSION_OFFSET: usize = REC_EXPIRES_OFFSET + 8;
/// Bytes of a record before its key.
pub const REC_HEADER: usize = REC_VERSION_OFFSET + 8;

/// Longest key a record holds (a namespace prefix and the key).
pub const MAX_KEY: usize = 64 << 10;

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A log device's shape, from its superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Super {
    /// Random id written at format; segment headers must carry it.
    pub log_id: u64,
    /// Bytes per segment, a multiple of [`BLOCK`].
    pub segment_bytes: u64,
    /// Segments on the device.
    pub segments: u64,
}

impl Super {
    /// The 4096-byte superblock.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        b[..8].copy_from_slice(SUPER_MAGIC);
        b[VERSION_OFFSET..CRC_OFFSET].copy_from_slice(&VERSION.to_le_bytes());
        b[ID_OFFSET..ID_OFFSET + 8].copy_from_slice(&self.log_id.to_le_bytes());
        b[SUPER_SEG_BYTES_OFFSET..SUPER_SEGS_OFFSET].copy_from_slice(&self.segment_bytes.to_le_bytes());
        b[SUPER_SEGS_OFFSET..SUPER_SEGS_OFFSET + 8].copy_from_slice(&self.segments.to_le_bytes());
        let crc = crc32c::crc32c(&b[ID_OFFSET..HEADER_END]);
        b[CRC_OFFSET..ID_OFFSET].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a superblock; `None` when it is not one of a version this
    /// build reads ([`OLDEST_READ`] to [`VERSION`]).
    pub fn decode(b: &[u8]) -> Option<Super> {
        if superblock_version(b).is_none_or(|v| !readable(v))
            || le32(b, CRC_OFFSET) != crc32c::crc32c(&b[ID_OFFSET..HEADER_END])
        {
            return None;
        }
        let s = Super {
            log_id: le64(b, ID_OFFSET),
            segment_bytes: le64(b, SUPER_SEG_BYTES_OFFSET),
            segments: le64(b, SUPER_SEGS_OFFSET),
        };
        (s.segment_bytes >= 2 * BLOCK && s.segment_bytes.is_multiple_of(BLOCK) && s.segments > 0).then_some(s)
    }

    /// Device offset where segment `i` starts.
    pub fn segment_start(&self, i: u32) -> u64 {
        BLOCK + u64::from(i) * self.segment_bytes
    }
}

/// The format version a superblock claims (magic checked, nothing
/// else); `None` when `b` does not start with one.
pub fn superblock_version(b: &[u8]) -> Option<u32> {
    (b.len() >= HEADER_END && &b[..8] == SUPER_MAGIC).then(|| le32(b, VERSION_OFFSET))
}

/// A segment header for `seq`.
pub fn encode_segment_header(log_id: u64, seq: u64, out: &mut [u8]) {
    out[..BLOCK as usize].fill(0);
    out[..8].copy_from_slice(SEG_MAGIC);
    out[VERSION_OFFSET..CRC_OFFSET].copy_from_slice(&VERSION.to_le_bytes());
    out[ID_OFFSET..ID_OFFSET + 8].copy_from_slice(&log_id.to_le_bytes());
    out[SEG_SEQ_OFFSET..SEG_SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&out[ID_OFFSET..HEADER_END]);
    out[CRC_OFFSET..ID_OFFSET].copy_from_slice(&crc.to_le_bytes());
}

/// A segment header's sequence, when it is a valid header of `log_id`.
pub fn decode_segment_header(log_id: u64, b: &[u8]) -> Option<u64> {
    if b.len() < HEADER_END
        || &b[..8] != SEG_MAGIC
        || !readable(le32(b, VERSION_OFFSET))
        || le32(b, CRC_OFFSET) != crc32c::crc32c(&b[ID_OFFSET..HEADER_END])
        || le64(b, ID_OFFSET) != log_id
    {
        return None;
    }
    Some(le64(b, SEG_SEQ_OFFSET)).filter(|&s| s != 0)
}

/// What a record says (the module doc's kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value for the key.
    Put,
    /// The key was deleted, at the record's version and older.
    Delete,
    /// Every key under the record's key (a prefix) was deleted, at the
    /// record's version and older.
    DeletePrefix,
    /// The expiry of the put whose version the value holds changed.
    Expiry,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Put => 1,
            Kind::Delete => 2,
            Kind::DeletePrefix => 3,
            Kind::Expiry => 4,
        }
    }

    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::Put,
            2 => Kind::Delete,
            3 => Kind::DeletePrefix,
            4 => Kind::Expiry,
            _ => return None,
        })
    }
}

/// Length of an expiry record's value: the version it applies to.
pub const EXPIRY_VALUE_LEN: usize = 8;

/// An expiry record's value: the version of the put it applies to.
pub fn encode_expiry_target(version: u64) -> [u8; EXPIRY_VALUE_LEN] {
    version.to_le_bytes()
}

/// The version an expiry record's value names; `None` when it is not
/// [`EXPIRY_VALUE_LEN`] bytes.
pub fn decode_expiry_target(value: &[u8]) -> Option<u64> {
    (value.len() == EXPIRY_VALUE_LEN).then(|| le64(value, 0))
}

/// A record's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHead {
    /// The segment sequence it was written under.
    pub seq: u64,
    /// Put or delete.
    pub kind: Kind,
    /// Key bytes.
    pub key_len: usize,
    /// Value bytes.
    pub value_len: u64,
    /// Expiry in Unix milliseconds; 0: none.
    pub expires_ms: u64,
    /// The key's write stamp (see the module doc).
    pub version: u64,
}

impl RecordHead {
    /// Whole record length, header included.
    pub fn total(&self) -> u64 {
        REC_HEADER as u64 + self.key_len as u64 + self.value_len
    }
}

/// Length of a record with this key and value.
pub fn record_len(key_len: usize, value_len: usize) -> u64 {
    (REC_HEADER + key_len + value_len) as u64
}

/// What a record says about its key besides the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Put or delete.
    pub kind: Kind,
    /// Expiry in Unix milliseconds; 0: none.
    pub expires_ms: u64,
    /// The key's write stamp.
    pub version: u64,
}

/// Writes a record into `out`, which is exactly [`record_len`] long.
pub fn encode_record(out: &mut [u8], seq: u64, key: &[u8], value: &[u8], meta: RecordMeta) {
    let RecordMeta { kind, expires_ms, version } = meta;
    debug_assert_eq!(out.len() as u64, record_len(key.len(), value.len()));
    out[..4].copy_from_slice(REC_MAGIC);
    out[REC_SEQ_OFFSET..REC_KIND_OFFSET].copy_from_slice(&seq.to_le_bytes());
    out[REC_KIND_OFFSET..REC_KEY_LEN_OFFSET].copy_from_slice(&[kind.code(), 0, 0, 0]);
    out[REC_KEY_LEN_OFFSET..REC_VALUE_LEN_OFFSET].copy_from_slice(&(key.len() as u32).to_le_bytes());
    out[REC_VALUE_LEN_OFFSET..REC_EXPIRES_OFFSET].copy_from_slice(&(value.len() as u64).to_le_bytes());
    out[REC_EXPIRES_OFFSET..REC_VERSION_OFFSET].copy_from_slice(&expires_ms.to_le_bytes());
    out[REC_VERSION_OFFSET..REC_HEADER].copy_from_slice(&version.to_le_bytes());
    out[REC_HEADER..REC_HEADER + key.len()].copy_from_slice(key);
    out[REC_HEADER + key.len()..].copy_from_slice(value);
    let crc = crc32c::crc32c(&out[REC_SEQ_OFFSET..]);
    out[REC_CRC_OFFSET..REC_SEQ_OFFSET].copy_from_slice(&crc.to_le_bytes());
}

/// Reads a record header from the first [`REC_HEADER`] bytes of `b`,
/// checking what can be checked without the body: magic, sequence,
/// kind, and that the record fits in `room` bytes. `None`: no record.
pub fn decode_record_head(b: &[u8], seq: u64, room: u64) -> Option<RecordHead> {
    if b.len() < REC_HEADER || &b[..4] != REC_MAGIC || le64(b, REC_SEQ_OFFSET) != seq {
        return None;
    }
    let kind = Kind::from_code(b[REC_KIND_OFFSET])?;
    let h = RecordHead {
        seq,
        kind,
        key_len: le32(b, REC_KEY_LEN_OFFSET) as usize,
        value_len: le64(b, REC_VALUE_LEN_OFFSET),
        expires_ms: le64(b, REC_EXPIRES_OFFSET),
        version: le64(b, REC_VERSION_OFFSET),
    };
    (h.key_len <= MAX_KEY && h.value_len <= room && h.total() <= room).then_some(h)
}

/// Checks a whole record's CRC; `b` is exactly the record.
pub fn record_crc_ok(b: &[u8]) -> bool {
    b.len() >= REC_HEADER && le32(b, REC_CRC_OFFSET) == crc32c::crc32c(&b[REC_SEQ_OFFSET..])
}

/// Rounds `n` up to a multiple of `to` (a power of two).
pub fn align_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_pinned() {
        assert_eq!(REC_HEADER, 48);
        assert_eq!(HEADER_END, 64);
        assert_eq!(record_len(3, 5), 56);
    }

    #[test]
    fn records_round_trip_and_damage_is_caught() {
        let mut b = vec![0u8; record_len(3, 5) as usize];
        encode_record(&mut b, 7, b"key", b"value", RecordMeta { kind: Kind::Put, expires_ms: 99, version: 12 });
        let h = decode_record_head(&b, 7, 1 << 20).unwrap();
        assert_eq!((h.kind, h.key_len, h.value_len, h.expires_ms, h.version, h.total()), (Kind::Put, 3, 5, 99, 12, 56));
        assert!(record_crc_ok(&b));
        assert!(decode_record_head(&b, 8, 1 << 20).is_none(), "another sequence is not current");
        assert!(decode_record_head(&b, 7, 55).is_none(), "a record past the segment's end");
        for i in 8..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x20;
            assert!(!record_crc_ok(&d), "flip at {i} passed");
        }
    }

    #[test]
    fn every_kind_round_trips_and_an_unknown_kind_is_no_record() {
        for kind in [Kind::Put, Kind::Delete, Kind::DeletePrefix, Kind::Expiry] {
            let value = if kind == Kind::Expiry { &encode_expiry_target(41)[..] } else { &b""[..] };
            let mut b = vec![0u8; record_len(2, value.len()) as usize];
            encode_record(&mut b, 1, b"\x01a", value, RecordMeta { kind, expires_ms: 5, version: 42 });
            let h = decode_record_head(&b, 1, 1 << 20).unwrap();
            assert_eq!((h.kind, h.version, h.expires_ms), (kind, 42, 5));
            assert!(record_crc_ok(&b));
        }
        assert_eq!(decode_expiry_target(&encode_expiry_target(7)), Some(7));
        assert_eq!(decode_expiry_target(b"short"), None);
        let mut b = vec![0u8; record_len(1, 0) as usize];
        encode_record(&mut b, 1, b"k", b"", RecordMeta { kind: Kind::Put, expires_ms: 0, version: 1 });
        b[REC_KIND_OFFSET] = 9;
        assert!(decode_record_head(&b, 1, 1 << 20).is_none(), "kind 9 is not a record");
    }

    #[test]
    fn version_2_headers_are_read_and_other_versions_are_not() {
        let s = Super { log_id: 5, segment_bytes: 1 << 20, segments: 9 };
        let mut h = vec![0u8; BLOCK as usize];
        encode_segment_header(5, 3, &mut h);
        for (v, read) in [(1u32, false), (2, true), (3, true), (4, false)] {
            // The version is outside the CRC: a header of another version
            // is these bytes with that number.
            let mut sb = s.encode();
            sb[VERSION_OFFSET..CRC_OFFSET].copy_from_slice(&v.to_le_bytes());
            assert_eq!(superblock_version(&sb), Some(v));
            assert_eq!(Super::decode(&sb).is_some(), read, "superblock version {v}");
            let mut seg = h.clone();
            seg[VERSION_OFFSET..CRC_OFFSET].copy_from_slice(&v.to_le_bytes());
            assert_eq!(decode_segment_header(5, &seg).is_some(), read, "segment version {v}");
        }
        assert_eq!(superblock_version(&[0u8; 64]), None);
    }

    #[test]
    fn headers_round_trip_and_belong_to_their_log() {
        let s = Super { log_id: 5, segment_bytes: 1 << 20, segments: 9 };
        assert_eq!(Super::decode(&s.encode()), Some(s));
        let mut e = s.encode();
        e[30] ^= 1;
        assert_eq!(Super::decode(&e), None);
        let mut h = vec![0u8; BLOCK as usize];
        encode_segment_header(5, 3, &mut h);
        assert_eq!(decode_segment_header(5, &h), Some(3));
        assert_eq!(decode_segment_header(6, &h), None);
    }
}
