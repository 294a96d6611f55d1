//! Whole-drive recovery (strata-store): small drive images, built once
//! in-process through the store's own API on the simulated disk (format,
//! volumes written, deallocated and flushed, a reopen), damaged per the
//! input in their superblock, checkpoint or journal regions, then opened,
//! put in service and opened again.
//!
//! Invariants: never panics; never reads outside the drive (an I/O error
//! on the simulated disk means an unchecked offset); damage the checksums
//! can see ends in a `StoreError` or in a reverse map that was durable at
//! some point of the image's history, on the first open and on the next.
//! With `reseal`, the damaged structures get valid checksums again (a
//! broken or newer writer): then only the first two invariants hold.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_store::StoreError;
use strata_store::fuzzing::format::{BLOCK, reseal};
use strata_store::fuzzing::{Image, recover};

#[derive(Arbitrary, Debug)]
struct Damage {
    image: u8,
    reseal: bool,
    flips: Vec<Flip>,
}

#[derive(Arbitrary, Debug)]
struct Flip {
    region: u8,
    offset: u32,
    xor: u8,
}

/// At most this many flips per input, so that inputs stay small.
const MAX_FLIPS: usize = 16;

fn images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        vec![
            // A few records after the checkpoint written at the first open.
            Image::build(1, 6, 0),
            // The ring just wrapped: a checkpoint, then records.
            Image::build(2, 17, 0),
            // Several laps and a reopen: stale records of earlier laps.
            Image::build(11, 40, 17),
        ]
    })
}

fn reseal_all(img: &Image, bytes: &mut [u8]) {
    let sb = &img.sb;
    for copy in 0..2 {
        reseal::superblock(&mut bytes[copy * BLOCK..(copy + 1) * BLOCK]);
    }
    for slot in 0..2 {
        let off = sb.ckpt_slot_offset(slot) as usize;
        reseal::checkpoint(&mut bytes[off..off + sb.ckpt_slot_len as usize], sb.extent_count);
    }
    for i in 0..sb.journal_blocks as usize {
        let off = sb.journal_offset as usize + i * BLOCK;
        reseal::journal_block(&mut bytes[off..off + BLOCK]);
    }
}

fuzz_target!(|d: Damage| {
    let images = images();
    let img = &images[usize::from(d.image) % images.len()];
    let regions = img.regions();
    let mut bytes = img.bytes.clone();
    for f in d.flips.iter().take(MAX_FLIPS) {
        let r = regions[usize::from(f.region) % regions.len()];
        bytes[(r.offset + u64::from(f.offset) % r.len) as usize] ^= f.xor;
    }
    if d.reseal {
        reseal_all(img, &mut bytes);
    }
    match recover(bytes) {
        Ok(r) if !d.reseal => {
            assert!(img.durable.contains(&r.table), "recovered a reverse map that was never durable");
            assert!(r.reopened == r.table, "a second open recovered another reverse map");
        }
        Ok(_) => {}
        Err(e @ StoreError::Io { .. }) => panic!("recovery read outside the drive: {e}"),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
