//! Self-describing block content: every block the suite writes says which
//! volume, LBA, writer and write (sequence number) it belongs to, and
//! carries a checksum over itself, so a read can tell exactly which write
//! it saw, or that it saw something no write produced.
//!
//! # Format
//!
//! | offset | size | field                                             |
//! |--------|------|---------------------------------------------------|
//! | 0      | 8    | magic `STRCHAOS`                                  |
//! | 8      | 4    | volume id (the harness's, not strata's)           |
//! | 12     | 4    | writer id                                         |
//! | 16     | 8    | LBA the block was written to                      |
//! | 24     | 8    | sequence number of the write (unique in a run)    |
//! | 32     | 4056 | filler derived from the fields above              |
//! | 4088   | 8    | checksum over bytes 0..4088                       |
//!
//! All integers little-endian. A block from another volume or LBA
//! (misplaced), a torn block (halves of two writes: the checksum fails),
//! poison or garbage all decode to something the oracle rejects; an
//! all-zero block decodes as [`Content::Zero`]. The filler makes a block
//! look like data (not mostly zeros) so that a store which compresses or
//! deduplicates zero runs is exercised the same way as with real data.

use strata_rand::mix64;

/// Block size the suite writes and reads (strata's default LBA format).
pub const BLOCK_SIZE: usize = 4096;
/// Offset of the magic.
pub const MAGIC_OFFSET: usize = 0;
/// Length of the magic.
pub const MAGIC_LEN: usize = 8;
/// Offset of the volume id.
pub const VOLUME_OFFSET: usize = MAGIC_OFFSET + MAGIC_LEN;
/// Offset of the writer id.
pub const WRITER_OFFSET: usize = VOLUME_OFFSET + 4;
/// Offset of the LBA.
pub const LBA_OFFSET: usize = WRITER_OFFSET + 4;
/// Offset of the sequence number.
pub const SEQ_OFFSET: usize = LBA_OFFSET + 8;
/// Offset of the filler.
pub const FILL_OFFSET: usize = SEQ_OFFSET + 8;
/// Offset of the checksum (the last 8 bytes).
pub const CHECKSUM_OFFSET: usize = BLOCK_SIZE - 8;

/// The magic at the start of every block the suite writes.
pub const MAGIC: [u8; MAGIC_LEN] = *b"STRCHAOS";

/// What a block says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// Harness volume id.
    pub volume: u32,
    /// Writer id.
    pub writer: u32,
    /// LBA the block was written to.
    pub lba: u64,
    /// Sequence number of the write.
    pub seq: u64,
}

/// A decoded block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Every byte is zero.
    Zero,
    /// A whole, untorn block written by the suite.
    Stamped(Stamp),
    /// Neither: torn, poison, garbage or someone else's bytes.
    Garbage(String),
}

impl std::fmt::Display for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Zero => write!(f, "zeros"),
            Content::Stamped(s) => {
                write!(f, "volume {} lba {} writer {} seq {}", s.volume, s.lba, s.writer, s.seq)
            }
            Content::Garbage(why) => write!(f, "garbage ({why})"),
        }
    }
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

/// Checksum of the first [`CHECKSUM_OFFSET`] bytes of a block.
fn checksum(b: &[u8]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for word in b[..CHECKSUM_OFFSET].chunks_exact(8) {
        h = mix64(h ^ u64_at(word, 0)).wrapping_add(0x9e37);
    }
    h
}

/// Writes the block of `stamp` into `out`, which is [`BLOCK_SIZE`] bytes.
///
/// # Panics
///
/// If `out` is not [`BLOCK_SIZE`] bytes (a harness bug).
pub fn encode_into(stamp: Stamp, out: &mut [u8]) {
    assert_eq!(out.len(), BLOCK_SIZE, "a block is {BLOCK_SIZE} bytes");
    out[MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN].copy_from_slice(&MAGIC);
    out[VOLUME_OFFSET..VOLUME_OFFSET + 4].copy_from_slice(&stamp.volume.to_le_bytes());
    out[WRITER_OFFSET..WRITER_OFFSET + 4].copy_from_slice(&stamp.writer.to_le_bytes());
    out[LBA_OFFSET..LBA_OFFSET + 8].copy_from_slice(&stamp.lba.to_le_bytes());
    out[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&stamp.seq.to_le_bytes());
    let seed = mix64(u64::from(stamp.volume) << 32 | u64::from(stamp.writer)) ^ mix64(stamp.lba) ^ stamp.seq;
    for (i, word) in out[FILL_OFFSET..CHECKSUM_OFFSET].chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&mix64(seed ^ i as u64).to_le_bytes());
    }
    let sum = checksum(out);
    out[CHECKSUM_OFFSET..].copy_from_slice(&sum.to_le_bytes());
}

/// The data of one write: `nblocks` blocks from `slba`, each stamped with
/// its own LBA and the write's volume, writer and sequence number.
pub fn encode_run(volume: u32, writer: u32, seq: u64, slba: u64, nblocks: u32) -> Vec<u8> {
    let mut data = vec![0u8; nblocks as usize * BLOCK_SIZE];
    for (i, block) in data.chunks_exact_mut(BLOCK_SIZE).enumerate() {
        encode_into(Stamp { volume, writer, lba: slba + i as u64, seq }, block);
    }
    data
}

/// Decodes one block. Never panics: a block of the wrong length is
/// garbage.
pub fn decode(b: &[u8]) -> Content {
    if b.len() != BLOCK_SIZE {
        return Content::Garbage(format!("{} bytes instead of {BLOCK_SIZE}", b.len()));
    }
    if b.iter().all(|&x| x == 0) {
        return Content::Zero;
    }
    if b[MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN] != MAGIC {
        let nonzero = b.iter().filter(|&&x| x != 0).count();
        return Content::Garbage(format!(
            "no magic; first bytes {:02x?}, {nonzero} non-zero bytes",
            &b[..16.min(b.len())]
        ));
    }
    let stored = u64_at(b, CHECKSUM_OFFSET);
    if checksum(b) != stored {
        // Say where it stops matching the block its header names: a torn
        // write shows as a clean cut at a sector or page boundary.
        let claimed = Stamp {
            volume: u32_at(b, VOLUME_OFFSET),
            writer: u32_at(b, WRITER_OFFSET),
            lba: u64_at(b, LBA_OFFSET),
            seq: u64_at(b, SEQ_OFFSET),
        };
        let mut expect = vec![0u8; BLOCK_SIZE];
        encode_into(claimed, &mut expect);
        let first_diff = b.iter().zip(&expect).position(|(x, y)| x != y).unwrap_or(BLOCK_SIZE);
        return Content::Garbage(format!(
            "checksum mismatch (torn?): header says volume {} lba {} writer {} seq {}, bytes differ from offset {first_diff}",
            claimed.volume, claimed.lba, claimed.writer, claimed.seq
        ));
    }
    Content::Stamped(Stamp {
        volume: u32_at(b, VOLUME_OFFSET),
        writer: u32_at(b, WRITER_OFFSET),
        lba: u64_at(b, LBA_OFFSET),
        seq: u64_at(b, SEQ_OFFSET),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_contiguous() {
        assert_eq!((VOLUME_OFFSET, WRITER_OFFSET, LBA_OFFSET, SEQ_OFFSET, FILL_OFFSET), (8, 12, 16, 24, 32));
        assert_eq!(CHECKSUM_OFFSET, 4088);
        assert_eq!((CHECKSUM_OFFSET - FILL_OFFSET) % 8, 0);
    }

    #[test]
    fn round_trip_per_block_of_a_run() {
        let data = encode_run(3, 7, 99, 1000, 4);
        for (i, b) in data.chunks(BLOCK_SIZE).enumerate() {
            assert_eq!(decode(b), Content::Stamped(Stamp { volume: 3, writer: 7, lba: 1000 + i as u64, seq: 99 }));
        }
    }

    #[test]
    fn zeros_are_zero_and_wrong_length_is_garbage() {
        assert_eq!(decode(&[0u8; BLOCK_SIZE]), Content::Zero);
        assert!(matches!(decode(&[0u8; 512]), Content::Garbage(_)));
        assert!(matches!(decode(&[]), Content::Garbage(_)));
    }

    #[test]
    fn torn_block_is_garbage_and_names_the_cut() {
        let a = encode_run(1, 1, 1, 5, 1);
        let b = encode_run(1, 1, 2, 5, 1);
        let mut torn = a.clone();
        torn[2048..].copy_from_slice(&b[2048..]);
        match decode(&torn) {
            Content::Garbage(why) => assert!(why.contains("offset 2048"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let a = encode_run(2, 4, 8, 16, 1);
        for off in [0, 9, 13, 17, 25, 100, 4000, 4090] {
            let mut c = a.clone();
            c[off] ^= 0x10;
            assert!(matches!(decode(&c), Content::Garbage(_)), "flip at {off} not caught");
        }
        let poison = vec![0xffu8; BLOCK_SIZE];
        assert!(matches!(decode(&poison), Content::Garbage(_)));
    }
}
