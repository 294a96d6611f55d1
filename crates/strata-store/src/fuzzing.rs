//! Internals for the fuzz targets in `fuzz/` and for this crate's
//! corruption tests; not API. Compiled only under `cfg(fuzzing)` (which
//! `cargo fuzz` sets) or in tests, the way quinn-proto opens its internals
//! to its fuzzers.
//!
//! - [`format`] re-exports the on-disk codecs, which are crate-private.
//! - [`Image`] is a small drive built in-process: formatted on the
//!   simulated disk and changed through the store's own API (volumes
//!   written, deallocated and flushed, the store reopened), together with
//!   the reverse map of every state that was ever durable on the way.
//! - [`recover`] opens a copy of an image, damaged or not, as
//!   `Store::open` opens a drive, and returns what recovery made of it.
//!
//! The oracle for a damaged image: opening it either fails with a
//! [`StoreError`] or yields one of [`Image::durable`]. Anything else is
//! silently wrong data.

use std::sync::Arc;

use strata_block::{BlockDevice, IoBuf};

use crate::StoreError;
use crate::drive::{DriveClass, LoadedDrive};
use crate::io::Backend;
use crate::io::sim::SimDisk;
use crate::store::Store;

/// The on-disk codecs of the private `format` module.
pub mod format {
    pub use crate::format::{
        BLOCK, CK_ENTRIES_OFFSET, CK_HEADER_LEN, CheckpointHeader, ENTRY_LEN, FormatError, JE_LEN, JOURNAL_MAX_ENTRIES,
        JournalOp, JournalRead, MAX_EXTENTS, Owner, SB_LEN, SUPERBLOCK_COPIES, Superblock, checkpoint_crc,
        decode_entry, decode_journal_block, encode_entry, encode_journal_block, reseal,
    };
}

use format::{BLOCK, Owner, Superblock};

/// Extent size of image drives: small, so a 1 MiB drive has dozens.
pub const IMAGE_EXTENT_SIZE: u32 = 16 * 1024;
/// Size of an image drive in bytes.
pub const IMAGE_BYTES: usize = 1 << 20;
const IMAGE_BLOCKS_PER_EXTENT: u64 = IMAGE_EXTENT_SIZE as u64 / 4096;
/// Logical extents per volume; two volumes fit in an image drive.
const VOLUME_EXTENTS: u64 = 24;

/// A reverse map: the owner of each physical extent.
pub type Table = Vec<Option<Owner>>;

/// A drive image and the states it went through.
pub struct Image {
    /// The drive's durable bytes at the end.
    pub bytes: Vec<u8>,
    /// Its superblock.
    pub sb: Superblock,
    /// Every reverse map that was durable at some point, oldest first,
    /// without repeats in a row; the last is the final state.
    pub durable: Vec<Table>,
}

/// One metadata region of an image: where it is and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// `superblock`, `checkpoint` or `journal`.
    pub name: &'static str,
    /// Byte offset on the drive.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What opening an image gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The reverse map recovery read, before the store reconciled claims.
    pub table: Table,
    /// The reverse map read when the drive was opened again after the
    /// store had put it in service (which writes a fresh checkpoint).
    pub reopened: Table,
}

use strata_rand::Rng;

fn load(disk: &Arc<SimDisk>) -> Result<LoadedDrive, StoreError> {
    LoadedDrive::load(
        "image".into(),
        DriveClass::File,
        Backend::Sim(disk.handle()),
        disk.size(),
        IMAGE_EXTENT_SIZE,
        false,
    )
}

fn open(disk: &Arc<SimDisk>) -> Arc<Store> {
    // A fresh or intact image always opens; anything else is a bug here.
    Store::open_loaded(vec![load(disk).expect("an intact image opens")]).expect("an intact image opens")
}

impl Image {
    /// Formats an image drive and runs `commits` rounds on two volumes,
    /// each one or two writes or a deallocation followed by a flush (one
    /// journal record, or a checkpoint when the ring is full). With
    /// `reopen_every` > 0 the store is closed and opened again after that
    /// many rounds. Deterministic in `seed`.
    ///
    /// Runs on a thread of its own, so it may be called from inside a
    /// runtime too.
    ///
    /// # Panics
    ///
    /// When the store fails on the intact simulated disk (a bug).
    pub fn build(seed: u64, commits: usize, reopen_every: usize) -> Image {
        std::thread::scope(|s| {
            s.spawn(|| Image::build_here(seed, commits, reopen_every))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    fn build_here(seed: u64, commits: usize, reopen_every: usize) -> Image {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        let disk = Arc::new(SimDisk::new(IMAGE_BYTES as u64));
        let mut store = open(&disk);
        let mut head = vec![0u8; BLOCK];
        disk.read(0, &mut head).expect("the superblock is on the disk");
        let sb = Superblock::decode(&head).expect("a freshly formatted superblock decodes");
        let meta_len = usize::try_from(sb.data_offset).expect("metadata of a 1 MiB drive fits");
        let mut history = vec![disk.durable_image()[..meta_len].to_vec()];
        disk.record_history(meta_len);
        let mut rng = Rng::new(seed);
        let vol_bytes = VOLUME_EXTENTS * u64::from(IMAGE_EXTENT_SIZE);
        let store = rt.block_on(async {
            for round in 0..commits {
                if reopen_every > 0 && round > 0 && round % reopen_every == 0 {
                    drop(store);
                    store = open(&disk);
                }
                let id = 1 + rng.below(2);
                let v = store.open_volume(id, vol_bytes, 4096).expect("volume opens");
                let blocks = VOLUME_EXTENTS * IMAGE_BLOCKS_PER_EXTENT;
                for _ in 0..1 + rng.below(2) {
                    if rng.below(10) < 7 {
                        let lba = rng.below(blocks);
                        let data = IoBuf::from_slice(&[(round as u8) | 1; 4096]);
                        v.write(lba, data, false).await.1.expect("write on an intact disk");
                    } else {
                        let first = rng.below(VOLUME_EXTENTS) * IMAGE_BLOCKS_PER_EXTENT;
                        let n = (1 + rng.below(3)) * IMAGE_BLOCKS_PER_EXTENT;
                        let n = n.min(blocks - first);
                        v.deallocate(vec![(first, n)]).await.expect("deallocate on an intact disk");
                    }
                }
                v.flush().await.expect("flush on an intact disk");
            }
            store
        });
        drop(store);
        history.extend(disk.take_history());
        let mut durable: Vec<Table> = Vec::new();
        for prefix in history {
            let mut image = prefix;
            image.resize(IMAGE_BYTES, 0);
            let table = load(&Arc::new(SimDisk::from_image(image))).expect("every durable state recovers").table;
            if durable.last() != Some(&table) {
                durable.push(table);
            }
        }
        Image { bytes: disk.durable_image(), sb, durable }
    }

    /// The metadata regions: both superblock copies, both checkpoint
    /// slots and the journal ring.
    pub fn regions(&self) -> [Region; 3] {
        let sb = &self.sb;
        [
            Region { name: "superblock", offset: 0, len: 2 * BLOCK as u64 },
            Region { name: "checkpoint", offset: sb.ckpt_offset, len: 2 * sb.ckpt_slot_len },
            Region { name: "journal", offset: sb.journal_offset, len: sb.journal_blocks * BLOCK as u64 },
        ]
    }
}

/// Opens `bytes` as an image drive, puts it in service, and opens it
/// once more.
///
/// # Errors
///
/// Whatever [`StoreError`] opening the drive gives.
pub fn recover(bytes: Vec<u8>) -> Result<Recovered, StoreError> {
    let disk = Arc::new(SimDisk::from_image(bytes));
    let loaded = load(&disk)?;
    let table = loaded.table.clone();
    drop(Store::open_loaded(vec![loaded])?);
    let reopened = load(&disk)?.table;
    Ok(Recovered { table, reopened })
}

/// True when two extents of `table` claim the same logical extent (the
/// store keeps the newer and frees the other when it opens).
pub fn has_duplicate_claims(table: &[Option<Owner>]) -> bool {
    let mut claims: Vec<(u64, u32)> = table.iter().flatten().map(|o| (o.volume, o.lext)).collect();
    claims.sort_unstable();
    claims.windows(2).any(|w| w[0] == w[1])
}
