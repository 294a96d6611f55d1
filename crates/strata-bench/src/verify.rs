//! The verify pattern: every logical block a verify run writes describes
//! itself, so that any later read can check every byte of it without
//! remembering what was written where.
//!
//! # Format
//!
//! One namespace block (at least [`MIN_BLOCK_BYTES`]), little-endian:
//!
//! | offset | length | field                                              |
//! |--------|--------|----------------------------------------------------|
//! | 0      | 8      | magic `STRATAvf`                                   |
//! | 8      | 8      | LBA the block was written to                       |
//! | 16     | 8      | seed of the run that wrote it                      |
//! | 24     | 8      | generation: the writing run's start time, ns       |
//! | 32     | rest   | 64-bit words `fill_word(key(lba, seed, gen), i)`   |
//!
//! A block checks out when the magic is there, the LBA field is the LBA
//! that was read, and every body byte is what the header's (LBA, seed,
//! generation) derive. That catches corruption anywhere in the block,
//! misdirected writes (the LBA field names another block), torn blocks
//! and never-written blocks (all zeros, reported as such). It does not
//! catch a lost overwrite whose older version was itself a valid pattern:
//! the check accepts any seed and generation, so that data written by one
//! run (before a target restart, say) can be verified by a later one.

/// Magic at the start of every verify block.
pub(crate) const MAGIC: [u8; 8] = *b"STRATAvf";
const MAGIC_OFFSET: usize = 0;
const MAGIC_LEN: usize = MAGIC.len();
const LBA_OFFSET: usize = MAGIC_OFFSET + MAGIC_LEN;
const LBA_LEN: usize = 8;
const SEED_OFFSET: usize = LBA_OFFSET + LBA_LEN;
const SEED_LEN: usize = 8;
const GEN_OFFSET: usize = SEED_OFFSET + SEED_LEN;
const GEN_LEN: usize = 8;
const BODY_OFFSET: usize = GEN_OFFSET + GEN_LEN;
/// Smallest block size the pattern supports (header plus some body).
pub(crate) const MIN_BLOCK_BYTES: usize = 64;

/// Who writes: the run's seed and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) seed: u64,
    pub(crate) generation: u64,
}

fn read_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

/// splitmix64's finaliser: a bijective mix of all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn key(lba: u64, s: Stamp) -> u64 {
    mix(lba ^ mix(s.seed ^ mix(s.generation)))
}

#[inline]
fn fill_word(key: u64, i: u64) -> u64 {
    mix(key.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
}

/// Fills `buf` (whole blocks of `block_bytes`) with the pattern of the
/// blocks from `first_lba` on.
pub(crate) fn fill(buf: &mut [u8], block_bytes: usize, first_lba: u64, s: Stamp) {
    for (i, block) in buf.chunks_exact_mut(block_bytes).enumerate() {
        let lba = first_lba + i as u64;
        block[MAGIC_OFFSET..MAGIC_OFFSET + MAGIC_LEN].copy_from_slice(&MAGIC);
        block[LBA_OFFSET..LBA_OFFSET + LBA_LEN].copy_from_slice(&lba.to_le_bytes());
        block[SEED_OFFSET..SEED_OFFSET + SEED_LEN].copy_from_slice(&s.seed.to_le_bytes());
        block[GEN_OFFSET..GEN_OFFSET + GEN_LEN].copy_from_slice(&s.generation.to_le_bytes());
        let k = key(lba, s);
        for (w, chunk) in block[BODY_OFFSET..].chunks_mut(8).enumerate() {
            let v = fill_word(k, w as u64).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// What a block read back holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockCheck {
    /// A valid pattern for this LBA.
    Valid,
    /// All zeros: never written (or deallocated).
    Zeros,
    /// Anything else; the text says what was expected and what was found.
    Mismatch(String),
}

/// Checks one block read from `lba`.
pub(crate) fn check_block(block: &[u8], lba: u64) -> BlockCheck {
    if block[..MAGIC_LEN] != MAGIC {
        if block.iter().all(|&b| b == 0) {
            return BlockCheck::Zeros;
        }
        return BlockCheck::Mismatch(format!(
            "expected the verify pattern of LBA {lba}, found no pattern header (first bytes {})",
            hex::encode(&block[..16])
        ));
    }
    let written_lba = read_u64(block, LBA_OFFSET);
    let s = Stamp { seed: read_u64(block, SEED_OFFSET), generation: read_u64(block, GEN_OFFSET) };
    if written_lba != lba {
        return BlockCheck::Mismatch(format!(
            "expected the verify pattern of LBA {lba}, found the pattern of LBA {written_lba} (seed {}, generation {})",
            s.seed, s.generation
        ));
    }
    let k = key(lba, s);
    for (w, chunk) in block[BODY_OFFSET..].chunks(8).enumerate() {
        let want = fill_word(k, w as u64).to_le_bytes();
        if chunk != &want[..chunk.len()] {
            let at = chunk.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0);
            let off = BODY_OFFSET + w * 8 + at;
            return BlockCheck::Mismatch(format!(
                "byte {off} of LBA {lba} is {:#04x}, expected {:#04x} (pattern of seed {}, generation {})",
                chunk[at], want[at], s.seed, s.generation
            ));
        }
    }
    BlockCheck::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Stamp = Stamp { seed: 1, generation: 2 };

    #[test]
    fn filled_blocks_check_out() {
        let mut b = vec![0u8; 4 * 512];
        fill(&mut b, 512, 100, S);
        for (i, block) in b.chunks(512).enumerate() {
            assert_eq!(check_block(block, 100 + i as u64), BlockCheck::Valid);
        }
        assert_eq!(&b[..8], b"STRATAvf");
    }

    #[test]
    fn every_corrupted_byte_is_found() {
        let mut b = vec![0u8; 512];
        fill(&mut b, 512, 7, S);
        for off in 0..512 {
            let mut c = b.clone();
            c[off] ^= 0x10;
            assert!(matches!(check_block(&c, 7), BlockCheck::Mismatch(_)), "flip at {off} not caught");
        }
        let BlockCheck::Mismatch(m) = ({
            let mut c = b.clone();
            c[300] ^= 1;
            check_block(&c, 7)
        }) else {
            panic!()
        };
        assert!(m.contains("byte 300 of LBA 7"), "{m}");
    }

    #[test]
    fn misdirected_and_unwritten_blocks_are_named() {
        let mut b = vec![0u8; 512];
        assert_eq!(check_block(&b, 3), BlockCheck::Zeros);
        fill(&mut b, 512, 4, S);
        let BlockCheck::Mismatch(m) = check_block(&b, 3) else { panic!() };
        assert!(m.contains("pattern of LBA 4"), "{m}");
    }
}
