//! The store's on-disk decoders (crates/strata-store/src/format.rs):
//! superblock, checkpoint header, checkpoint entries, journal block and its
//! entries. The first input byte holds options: bit 0 recomputes the
//! structure's crc before decoding (so the checks behind it are reached),
//! bit 3 XORs the input over a valid encoding of each structure instead of
//! taking it as is (so near-valid structures are explored without a seed
//! corpus); otherwise bit 1 takes the uuid from the block itself, bit 2 the
//! seq and extent count, and bits 4-7 pick the extent count. The rest is
//! the block.
//!
//! Invariants: never panics, short input included; what decodes
//! re-encodes to the same bytes; a decoded superblock's regions lie in
//! order, block-aligned, inside its capacity, with room for every extent's
//! checkpoint entry; a decoded journal record holds at most
//! JOURNAL_MAX_ENTRIES ops, each on an extent below the drive's count; no
//! allocation above a fixed cap, whatever a length field claims.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use strata_store::fuzzing::format::{
    BLOCK, CK_HEADER_LEN, CheckpointHeader, ENTRY_LEN, JOURNAL_MAX_ENTRIES, JournalOp, JournalRead, MAX_EXTENTS, Owner,
    SB_LEN, Superblock, decode_entry, decode_journal_block, encode_entry, encode_journal_block, reseal,
};

/// The global allocator, recording the largest single allocation.
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the only addition is an atomic counter update.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's guarantees for `alloc` are passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// No decoder may allocate more than this at once (a block is 4 KiB).
const ALLOC_CAP: usize = 2 * BLOCK;

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn check_superblock(block: &[u8]) {
    let Ok(sb) = Superblock::decode(block) else { return };
    let (e, b) = (u128::from(sb.extent_size), BLOCK as u128);
    assert!(sb.extent_size.is_power_of_two() && e >= b, "{sb:?}");
    assert!((1..=MAX_EXTENTS).contains(&sb.extent_count), "{sb:?}");
    let n = u128::from(sb.extent_count);
    let slot = u128::from(sb.ckpt_slot_len);
    assert!(slot >= b + n * ENTRY_LEN as u128 && slot % b == 0, "{sb:?}");
    assert!(u128::from(sb.ckpt_offset) >= 2 * b && u128::from(sb.ckpt_offset) % b == 0, "{sb:?}");
    let journal = u128::from(sb.journal_offset);
    assert!(journal >= u128::from(sb.ckpt_offset) + 2 * slot && journal % b == 0, "{sb:?}");
    assert!(sb.journal_blocks >= 2, "{sb:?}");
    let data = u128::from(sb.data_offset);
    assert!(data >= journal + u128::from(sb.journal_blocks) * b && data % e == 0, "{sb:?}");
    assert!(data + n * e <= u128::from(sb.capacity), "{sb:?}");
    let mut out = vec![0u8; BLOCK];
    sb.encode(&mut out);
    assert_eq!(out[..SB_LEN], block[..SB_LEN], "a decoded superblock re-encodes to other bytes");
}

fn check_checkpoint(block: &[u8], uuid: &[u8; 16], extent_count: u64) {
    if let Ok(h) = CheckpointHeader::decode(block, uuid, extent_count) {
        let mut out = vec![0u8; BLOCK];
        CheckpointHeader::encode(&mut out, uuid, h.seq, extent_count, |_| h.crc);
        assert_eq!(
            out[..CK_HEADER_LEN],
            block[..CK_HEADER_LEN],
            "a decoded checkpoint header re-encodes to other bytes"
        );
    }
    for e in block.chunks_exact(ENTRY_LEN) {
        if let Ok(owner) = decode_entry(e) {
            let mut out = [0u8; ENTRY_LEN];
            encode_entry(&mut out, owner);
            assert_eq!(out, e, "a decoded checkpoint entry re-encodes to other bytes");
        }
    }
}

fn check_journal(block: &[u8], uuid: &[u8; 16], seq: u64, extent_count: u64) {
    if let Ok(JournalRead::Record(ops)) = decode_journal_block(block, uuid, seq, extent_count) {
        assert!(ops.len() <= JOURNAL_MAX_ENTRIES);
        for op in &ops {
            let (JournalOp::Set { extent, .. } | JournalOp::Free { extent }) = *op;
            assert!(extent < extent_count, "extent {extent} of {extent_count} in a decoded record");
        }
        let mut out = vec![0u8; BLOCK];
        encode_journal_block(&mut out, uuid, seq, &ops);
        assert_eq!(out[..], block[..BLOCK], "a decoded journal block re-encodes to other bytes");
    }
}

/// Valid encodings to XOR the input over, and the values they carry.
struct Templates {
    uuid: [u8; 16],
    seq: u64,
    extent_count: u64,
    superblock: Vec<u8>,
    checkpoint: Vec<u8>,
    journal: Vec<u8>,
}

fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let uuid = [7; 16];
        let sb = Superblock::layout(uuid, 1 << 30, 1 << 20).expect("1 GiB holds the format");
        let mut superblock = vec![0u8; BLOCK];
        sb.encode(&mut superblock);
        let mut checkpoint = vec![0u8; BLOCK];
        CheckpointHeader::encode(&mut checkpoint, &uuid, 5, sb.extent_count, |c| c);
        let mut journal = vec![0u8; BLOCK];
        let ops = [
            JournalOp::Set { extent: 3, owner: Owner { volume: 9, lext: 2, generation: 77 } },
            JournalOp::Free { extent: 5 },
        ];
        encode_journal_block(&mut journal, &uuid, 6, &ops);
        Templates { uuid, seq: 6, extent_count: sb.extent_count, superblock, checkpoint, journal }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&opts, raw)) = data.split_first() else { return };
    let t = templates();
    LARGEST.store(0, Ordering::Relaxed);
    // The raw bytes, short or long, must never panic a decoder.
    let _ = Superblock::decode(raw);
    let _ = CheckpointHeader::decode(raw, &[0; 16], 1);
    let _ = decode_journal_block(raw, &[0; 16], 0, 1);
    let _ = decode_entry(raw);
    // Then a whole block, zero-padded, alone or over a valid encoding.
    let mut input = vec![0u8; BLOCK];
    let n = raw.len().min(BLOCK);
    input[..n].copy_from_slice(&raw[..n]);
    let templated = opts & 8 != 0;
    let over = |template: &[u8]| -> Vec<u8> {
        if templated { template.iter().zip(&input).map(|(a, b)| a ^ b).collect() } else { input.clone() }
    };
    let (uuid, seq, extent_count) = if templated {
        (t.uuid, t.seq, t.extent_count)
    } else {
        let uuid = if opts & 2 != 0 { input[16..32].try_into().expect("16 bytes") } else { [7; 16] };
        let (seq, count) =
            if opts & 4 != 0 { (u64_at(&input, 32), u64_at(&input, 40)) } else { (1, 1 + u64::from(opts >> 4) * 5) };
        (uuid, seq, count)
    };
    let mut sb_block = over(&t.superblock);
    let ck_block = over(&t.checkpoint);
    let mut jb_block = over(&t.journal);
    if opts & 1 != 0 {
        reseal::superblock(&mut sb_block);
        reseal::journal_block(&mut jb_block);
    }
    check_superblock(&sb_block);
    check_checkpoint(&ck_block, &uuid, extent_count);
    check_journal(&jb_block, &uuid, seq, extent_count);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest <= ALLOC_CAP, "an allocation of {largest} bytes");
});
