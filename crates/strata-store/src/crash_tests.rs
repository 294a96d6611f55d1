//! Crash-consistency tests through the fault-injection seam
//! ([`crate::io::sim::SimDisk`]): randomized workloads over several volumes
//! and drives, power cuts that persist a random subset of unsynced
//! blocks, reopen, and an oracle that accepts for each block only the
//! values the durability contract allows. Per-volume patterns make any
//! cross-volume leak fail the oracle. Also journal/checkpoint corruption
//! and I/O-error cases.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use strata_block::{BlockDevice, BlockError};

use crate::drive::{DriveClass, LoadedDrive};
use crate::io::Backend;
use crate::io::sim::SimDisk;
use crate::tests::{BPE, BS, EXT, Rng, pattern, patterned, read, read_block, write};
use crate::{Store, StoreError, Volume};

fn open_sim(disks: &[Arc<SimDisk>]) -> Result<Arc<Store>, StoreError> {
    let loaded = disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            LoadedDrive::load(format!("sim{i}"), DriveClass::File, Backend::Sim(d.handle()), d.size(), EXT, false)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Store::open_loaded(loaded)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Val {
    Zero,
    Pat(u64),
}

impl Val {
    fn bytes(self, lba: u64) -> Vec<u8> {
        match self {
            Val::Zero => vec![0; BS],
            Val::Pat(t) => pattern(t, lba),
        }
    }
}

/// What a block may read as after a crash: its value at the last point it
/// was known durable, or any value written since.
#[derive(Debug, Clone)]
struct BlockModel {
    durable: Val,
    since: Vec<Val>,
}

impl BlockModel {
    fn latest(&self) -> Val {
        *self.since.last().unwrap_or(&self.durable)
    }
}

struct VolModel {
    id: u64,
    blocks: Vec<BlockModel>,
}

const VOL_BLOCKS: u64 = 24 * BPE;

fn new_models(ids: &[u64]) -> Vec<VolModel> {
    ids.iter()
        .map(|&id| VolModel { id, blocks: vec![BlockModel { durable: Val::Zero, since: vec![] }; VOL_BLOCKS as usize] })
        .collect()
}

fn open_vols(s: &Store, models: &[VolModel]) -> Vec<Arc<Volume>> {
    models.iter().map(|m| s.open_volume(m.id, VOL_BLOCKS * BS as u64, 4096).unwrap()).collect()
}

/// Runs `ops` random operations, keeping the model in step. Stops at the
/// first I/O error (the power cut), leaving the failed op's effects as
/// possible but not certain.
async fn workload(rng: &mut Rng, vols: &[Arc<Volume>], models: &mut [VolModel], tag: &mut u64, ops: usize) {
    for _ in 0..ops {
        let vi = rng.below(vols.len() as u64) as usize;
        let (v, m) = (&vols[vi], &mut models[vi]);
        let roll = rng.below(100);
        if roll < 50 {
            let blocks = 1 + rng.below(2 * BPE + 1);
            let lba = rng.below(VOL_BLOCKS - blocks + 1);
            let fua = rng.below(6) == 0;
            *tag += 1;
            let t = (m.id << 40) | *tag;
            match write(v, lba, patterned(t, lba, blocks), fua).await {
                Ok(()) => {
                    for b in lba..lba + blocks {
                        let bm = &mut m.blocks[b as usize];
                        if fua {
                            *bm = BlockModel { durable: Val::Pat(t), since: vec![] };
                        } else {
                            bm.since.push(Val::Pat(t));
                        }
                    }
                }
                Err(BlockError::NoSpace) => {
                    // Nothing changed: checked by the live reads below.
                }
                Err(_) => {
                    for b in lba..lba + blocks {
                        m.blocks[b as usize].since.push(Val::Pat(t));
                    }
                    return;
                }
            }
        } else if roll < 65 {
            if v.flush().await.is_err() {
                return;
            }
            for bm in &mut m.blocks {
                *bm = BlockModel { durable: bm.latest(), since: vec![] };
            }
        } else if roll < 80 {
            let blocks = 1 + rng.below(3 * BPE);
            let lba = rng.below(VOL_BLOCKS - blocks + 1);
            let r = if rng.below(2) == 0 {
                v.deallocate(vec![(lba, blocks)]).await
            } else {
                v.write_zeroes(lba, blocks, rng.below(2) == 0).await
            };
            for b in lba..lba + blocks {
                m.blocks[b as usize].since.push(Val::Zero);
            }
            if r.is_err() {
                return;
            }
        } else {
            let blocks = 1 + rng.below(2 * BPE);
            let lba = rng.below(VOL_BLOCKS - blocks + 1);
            let got = read(v, lba, blocks).await;
            for b in lba..lba + blocks {
                let want = m.blocks[b as usize].latest().bytes(b);
                let off = ((b - lba) as usize) * BS;
                assert!(
                    got[off..off + BS] == want[..],
                    "live read of vol {} block {b} differs from the last write",
                    m.id
                );
            }
        }
    }
}

/// After a crash: every block holds an allowed value; the model then
/// becomes what was read.
async fn verify_after_crash(vols: &[Arc<Volume>], models: &mut [VolModel], round: usize) {
    for (v, m) in vols.iter().zip(models.iter_mut()) {
        let all = read(v, 0, VOL_BLOCKS).await;
        for (b, bm) in m.blocks.iter_mut().enumerate() {
            let got = &all[b * BS..(b + 1) * BS];
            let allowed: Vec<Val> = std::iter::once(bm.durable).chain(bm.since.iter().copied()).collect();
            let hit = allowed.iter().find(|val| val.bytes(b as u64)[..] == *got);
            match hit {
                Some(&val) => *bm = BlockModel { durable: val, since: vec![] },
                None => panic!(
                    "round {round}: vol {} block {b} holds none of {allowed:?} (durable value lost, torn, or another volume's data)",
                    m.id
                ),
            }
        }
    }
}

async fn crash_cycles(seed: u64, disk_size: u64, ndisks: usize, rounds: usize) {
    let power = Arc::new(AtomicI64::new(-1));
    let disks: Vec<Arc<SimDisk>> =
        (0..ndisks).map(|_| Arc::new(SimDisk::with_power(disk_size, power.clone()))).collect();
    let mut rng = Rng::new(seed);
    let mut models = new_models(&[11, 22, 33]);
    let mut tag = 0u64;
    for round in 0..rounds {
        {
            let s = open_sim(&disks).unwrap();
            let vols = open_vols(&s, &models);
            if round > 0 {
                verify_after_crash(&vols, &mut models, round).await;
                // No leaks: every allocated extent belongs to a volume.
                let owned: u64 = vols.iter().map(|v| v.allocated_bytes() / u64::from(EXT)).sum();
                assert_eq!(s.stats().extents_allocated, owned, "round {round}: leaked or double-counted extents");
            }
            // Half the rounds cut the power after a random number of
            // mutating calls, which lands inside commits and allocations.
            if rng.below(2) == 0 {
                power.store(rng.below(150) as i64, Ordering::SeqCst);
            }
            let ops = 20 + rng.below(60) as usize;
            workload(&mut rng, &vols, &mut models, &mut tag, ops).await;
        }
        power.store(-1, Ordering::SeqCst);
        // Power cut: all, nothing, or a random subset of unsynced blocks.
        let mode = rng.below(3);
        let mut r2 = rng.fork();
        for d in &disks {
            d.crash(|_| match mode {
                0 => true,
                1 => false,
                _ => r2.below(2) == 0,
            });
        }
    }
}

#[tokio::test]
async fn random_workloads_survive_random_power_cuts() {
    for seed in 1..=6u64 {
        crash_cycles(seed * 7919, 1 << 20, 2, 12).await;
    }
}

#[tokio::test]
async fn random_workloads_on_full_drives_survive_power_cuts() {
    // Two 512 KiB drives hold fewer extents than the volumes want, so
    // NoSpace and reclaim-by-commit paths run.
    for seed in 1..=4u64 {
        crash_cycles(seed * 104_729, 512 << 10, 2, 10).await;
    }
}

#[tokio::test]
async fn journal_wraps_into_checkpoints_and_recovers() {
    // Many small commits on one drive: the 16-block ring fills several
    // times, so commits write checkpoints and replay crosses them.
    let disk = Arc::new(SimDisk::new(1 << 20));
    {
        let s = open_sim(std::slice::from_ref(&disk)).unwrap();
        let v = s.open_volume(1, 32 * u64::from(EXT), 4096).unwrap();
        for i in 0..100u64 {
            let lba = (i % 32) * BPE;
            if i % 3 == 2 {
                v.deallocate(vec![(lba, BPE)]).await.unwrap();
            } else {
                write(&v, lba, patterned(i, lba, 1), false).await.unwrap();
            }
            v.flush().await.unwrap();
        }
    }
    disk.crash(|_| false);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 32 * u64::from(EXT), 4096).unwrap();
    for e in 0..32u64 {
        // The last op on extent e was at the largest i with i % 32 == e.
        let last = (0..100u64).filter(|i| i % 32 == e).max().unwrap();
        let want = if last % 3 == 2 { vec![0; BS] } else { pattern(last, e * BPE) };
        assert_eq!(read_block(&v, e * BPE).await, want, "extent {e}");
    }
}

#[tokio::test]
async fn freed_extent_is_not_reused_before_its_free_is_durable() {
    // Regression guard for reuse-after-free: vol A deallocates an extent,
    // vol B gets it and writes, the power fails before A flushes. A must
    // not read B's data.
    let disk = Arc::new(SimDisk::new(512 << 10));
    let total;
    {
        let s = open_sim(std::slice::from_ref(&disk)).unwrap();
        total = s.stats().extents_total;
        let a = s.open_volume(1, total * u64::from(EXT), 4096).unwrap();
        let b = s.open_volume(2, u64::from(EXT), 4096).unwrap();
        for e in 0..total {
            write(&a, e * BPE, patterned(100 + e, e * BPE, BPE), false).await.unwrap();
        }
        a.flush().await.unwrap();
        assert_eq!(s.stats().extents_free, 0);
        a.deallocate(vec![(3 * BPE, BPE)]).await.unwrap();
        // The only extent B can get is A's freed one.
        write(&b, 0, patterned(999, 0, BPE), false).await.unwrap();
        assert_eq!(read_block(&a, 3 * BPE).await, vec![0; BS]);
    }
    // Every unsynced block reaches the media (B's data included), but no
    // commit happened after the deallocate.
    disk.crash(|_| true);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let a = s.open_volume(1, total * u64::from(EXT), 4096).unwrap();
    let b = s.open_volume(2, u64::from(EXT), 4096).unwrap();
    let got = read_block(&a, 3 * BPE).await;
    assert!(got == vec![0; BS] || got == pattern(103, 3 * BPE), "A reads foreign data after the crash");
    assert_ne!(got, pattern(999, 0));
    let gb = read_block(&b, 0).await;
    assert!(gb == vec![0; BS] || gb == pattern(999, 0));
}

#[tokio::test]
async fn write_error_fails_the_volume_until_reopen() {
    let disk = Arc::new(SimDisk::new(1 << 20));
    {
        let s = open_sim(std::slice::from_ref(&disk)).unwrap();
        let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
        write(&v, 0, patterned(1, 0, 1), true).await.unwrap();
        disk.set_fail_writes(true);
        assert!(matches!(write(&v, 0, patterned(2, 0, 1), false).await, Err(BlockError::Io(_))));
        disk.set_fail_writes(false);
        assert!(v.is_failed());
        assert!(matches!(write(&v, 0, patterned(3, 0, 1), false).await, Err(BlockError::Failed)));
        assert!(matches!(v.flush().await, Err(BlockError::Failed)));
        // Reads still work.
        read_block(&v, 0).await;
    }
    disk.crash(|_| false);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
    assert_eq!(read_block(&v, 0).await, pattern(1, 0));
    write(&v, 0, patterned(4, 0, 1), true).await.unwrap();
}

#[tokio::test]
async fn sync_error_fails_the_drive() {
    let disk = Arc::new(SimDisk::new(1 << 20));
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
    write(&v, 0, patterned(1, 0, 1), false).await.unwrap();
    disk.set_fail_syncs(true);
    assert!(matches!(v.flush().await, Err(BlockError::Io(_))));
    disk.set_fail_syncs(false);
    assert!(matches!(v.flush().await, Err(BlockError::Failed)));
    assert!(s.stats().drives[0].failed);
    // No new allocations on a failed drive.
    assert!(matches!(
        write(&v, 4 * BPE, patterned(1, 0, 1), false).await,
        Err(BlockError::NoSpace | BlockError::Failed)
    ));
}

// Checkpoint and journal corruption on the durable image.

async fn populated_disk() -> Arc<SimDisk> {
    let disk = Arc::new(SimDisk::new(1 << 20));
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
    write(&v, 0, patterned(1, 0, 1), false).await.unwrap();
    v.flush().await.unwrap();
    write(&v, BPE, patterned(2, BPE, 1), false).await.unwrap();
    v.flush().await.unwrap();
    disk
}

fn superblock(disk: &SimDisk) -> crate::format::Superblock {
    let mut b = vec![0u8; 4096];
    disk.read(0, &mut b).unwrap();
    crate::format::Superblock::decode(&b).unwrap()
}

/// The slot holding the newest checkpoint and its seq.
fn newest_slot(disk: &SimDisk, sb: &crate::format::Superblock) -> (usize, u64) {
    let mut best = (0, 0);
    for slot in 0..2 {
        let mut h = vec![0u8; 4096];
        disk.read(sb.ckpt_slot_offset(slot), &mut h).unwrap();
        if let Ok(hdr) = crate::format::CheckpointHeader::decode(&h, &sb.uuid, sb.extent_count)
            && hdr.seq >= best.1
        {
            best = (slot, hdr.seq);
        }
    }
    best
}

#[tokio::test]
async fn torn_journal_record_ends_replay_at_the_last_valid_one() {
    let disk = populated_disk().await;
    let sb = superblock(&disk);
    let (_, seq) = newest_slot(&disk, &sb);
    // Records seq+1 (extent 0) and seq+2 (extent 1) follow the checkpoint;
    // tear the second.
    disk.corrupt(sb.journal_block_offset(seq + 2) + 100, |b| b[0] ^= 0xff);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
    assert_eq!(read_block(&v, 0).await, pattern(1, 0));
    assert_eq!(read_block(&v, BPE).await, vec![0; BS], "the torn record's mapping is not applied");
    assert_eq!(s.stats().extents_allocated, 1);
}

#[tokio::test]
async fn checksummed_nonsense_in_the_journal_is_reported() {
    let disk = populated_disk().await;
    let sb = superblock(&disk);
    let (_, seq) = newest_slot(&disk, &sb);
    let mut blk = vec![0u8; 4096];
    let op = crate::format::JournalOp::Free { extent: 0 };
    crate::format::encode_journal_block(&mut blk, &sb.uuid, seq + 1, &[op]);
    // Extent number beyond the drive, with a valid crc.
    blk[48 + 8..48 + 16].copy_from_slice(&(sb.extent_count + 5).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&blk[..40]), &blk[44..]);
    blk[40..44].copy_from_slice(&crc.to_le_bytes());
    disk.corrupt(sb.journal_block_offset(seq + 1), |b| b[..4096].copy_from_slice(&blk));
    let e = open_sim(std::slice::from_ref(&disk)).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("journal.extent"), "{e}");
}

#[tokio::test]
async fn damaged_older_checkpoint_is_ignored() {
    let disk = populated_disk().await;
    let sb = superblock(&disk);
    let (newest, _) = newest_slot(&disk, &sb);
    disk.corrupt(sb.ckpt_slot_offset(1 - newest) + 4096 + 3, |b| b[0] ^= 0xff);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(1, 8 * u64::from(EXT), 4096).unwrap();
    assert_eq!(read_block(&v, 0).await, pattern(1, 0));
    assert_eq!(read_block(&v, BPE).await, pattern(2, BPE));
}

#[tokio::test]
async fn both_checkpoints_damaged_is_corruption() {
    let disk = populated_disk().await;
    let sb = superblock(&disk);
    for slot in 0..2 {
        disk.corrupt(sb.ckpt_slot_offset(slot) + 4096 + 3, |b| b[0] ^= 0xff);
    }
    let e = open_sim(std::slice::from_ref(&disk)).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("no valid extent-table checkpoint"), "{e}");
}

#[tokio::test]
async fn bad_checkpoint_magic_and_version_are_reported() {
    let disk = populated_disk().await;
    let sb = superblock(&disk);
    for slot in 0..2 {
        disk.corrupt(sb.ckpt_slot_offset(slot) + 8, |b| b[..4].copy_from_slice(&9u32.to_le_bytes()));
    }
    let e = open_sim(std::slice::from_ref(&disk)).unwrap_err();
    assert!(matches!(e, StoreError::UnsupportedVersion { what: "checkpoint", found: 9, .. }), "{e}");
    for slot in 0..2 {
        disk.corrupt(sb.ckpt_slot_offset(slot), |b| b[0] = b'X');
    }
    let e = open_sim(std::slice::from_ref(&disk)).unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
}

/// Vol A's extent is freed (durably) and handed to vol B, whose first
/// write covers one block, so the rest is zeroed; B flushes and the power
/// fails after `budget` more mutating calls, and only journal blocks reach
/// the media. Returns whether B's mapping survived; panics if B reads A's
/// old data.
async fn reuse_then_cut(budget: i64) -> bool {
    let power = Arc::new(AtomicI64::new(-1));
    let disk = Arc::new(SimDisk::with_power(512 << 10, power.clone()));
    let sb;
    {
        let s = open_sim(std::slice::from_ref(&disk)).unwrap();
        sb = s.shared_superblock(0);
        let total = s.stats().extents_total;
        let a = s.open_volume(1, total * u64::from(EXT), 4096).unwrap();
        let b = s.open_volume(2, u64::from(EXT), 4096).unwrap();
        for e in 0..total {
            write(&a, e * BPE, patterned(500 + e, e * BPE, BPE), false).await.unwrap();
        }
        a.flush().await.unwrap();
        a.deallocate(vec![(0, total * BPE)]).await.unwrap();
        a.flush().await.unwrap();
        power.store(budget, Ordering::SeqCst);
        if write(&b, 0, patterned(7, 0, 1), false).await.is_ok() {
            let _ = b.flush().await;
        }
    }
    power.store(-1, Ordering::SeqCst);
    let journal = sb.journal_offset / 4096..(sb.journal_offset / 4096 + sb.journal_blocks);
    disk.crash(|blk| journal.contains(&blk));
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let b = s.open_volume(2, u64::from(EXT), 4096).unwrap();
    let b0 = read_block(&b, 0).await;
    assert!(b0 == pattern(7, 0) || b0 == vec![0; BS], "budget {budget}: block 0 holds foreign data");
    assert_eq!(read(&b, 1, BPE - 1).await, vec![0; (BPE as usize - 1) * BS], "budget {budget}: B reads A's old data");
    b.allocated_bytes() > 0
}

#[tokio::test]
async fn mapping_is_never_durable_before_the_zeroing_under_it() {
    // Cuts at every call of: zero, data write, sync, journal write, sync.
    let mut survived = 0;
    for budget in 0..=5 {
        if reuse_then_cut(budget).await {
            survived += 1;
        }
    }
    assert!(survived > 0, "some cut must land after the journal write");
}

// Every field of the newest journal record and of each checkpoint slot,
// damaged a byte at a time, on an image built through the store's API with
// the history of its durable states (`crate::fuzzing`): the drive opens to
// a state that was durable, or refuses with an error; never anything else.

/// An image whose ring has wrapped into checkpoints, that was reopened, and
/// whose newest records are journal records after the newest checkpoint.
fn history_image() -> &'static crate::fuzzing::Image {
    static IMAGE: std::sync::OnceLock<crate::fuzzing::Image> = std::sync::OnceLock::new();
    IMAGE.get_or_init(|| crate::fuzzing::Image::build(11, 40, 17))
}

/// Fields of a journal block and of a checkpoint header as (name, offset,
/// length), from the format tables in `format.rs`.
const JOURNAL_FIELDS: [(&str, usize, usize); 8] = [
    ("magic", 0, 8),
    ("version", 8, 4),
    ("count", 12, 4),
    ("uuid", 16, 16),
    ("seq", 32, 8),
    ("crc", 40, 4),
    ("_unused", 44, 4),
    ("entries", 48, 4096 - 48),
];
const CHECKPOINT_FIELDS: [(&str, usize, usize); 7] = [
    ("magic", 0, 8),
    ("version", 8, 4),
    ("_unused", 12, 4),
    ("uuid", 16, 16),
    ("seq", 32, 8),
    ("extent_count", 40, 8),
    ("crc", 48, 4),
];

/// Offsets to flip within a field: every byte of a short field; the
/// first and last 32 bytes and one in the middle of a long one.
fn offsets(off: usize, len: usize) -> Vec<usize> {
    if len <= 64 {
        (off..off + len).collect()
    } else {
        (off..off + 32).chain([off + len / 2]).chain(off + len - 32..off + len).collect()
    }
}

/// Opens `img` with byte `at` flipped; checks the outcome is a durable
/// state or an error, and returns the state (or None for an error).
fn open_flipped(img: &crate::fuzzing::Image, at: u64, what: &str) -> Option<crate::fuzzing::Table> {
    let mut bytes = img.bytes.clone();
    bytes[at as usize] ^= 0x5a;
    match crate::fuzzing::recover(bytes) {
        Ok(r) => {
            assert!(img.durable.contains(&r.table), "{what}: recovered a state that was never durable");
            assert!(r.reopened == r.table, "{what}: a second open recovered another state");
            Some(r.table)
        }
        Err(e) => {
            assert!(matches!(e, StoreError::Corrupt { .. } | StoreError::UnsupportedVersion { .. }), "{what}: {e}");
            None
        }
    }
}

/// The slot of the newest valid checkpoint, and the seq of the newest
/// journal record that follows it.
fn newest(img: &crate::fuzzing::Image) -> (usize, u64) {
    use crate::format::{CheckpointHeader, JournalRead, decode_journal_block};
    let sb = &img.sb;
    let header = |slot: usize| {
        let off = sb.ckpt_slot_offset(slot) as usize;
        CheckpointHeader::decode(&img.bytes[off..off + 4096], &sb.uuid, sb.extent_count).ok()
    };
    let (slot, ckpt_seq) = match (header(0), header(1)) {
        (Some(a), Some(b)) if b.seq > a.seq => (1, b.seq),
        (Some(a), _) => (0, a.seq),
        (None, Some(b)) => (1, b.seq),
        (None, None) => panic!("the image has no valid checkpoint"),
    };
    let mut last = ckpt_seq;
    loop {
        let off = sb.journal_block_offset(last + 1) as usize;
        match decode_journal_block(&img.bytes[off..off + 4096], &sb.uuid, last + 1, sb.extent_count) {
            Ok(JournalRead::Record(_)) => last += 1,
            _ => break,
        }
    }
    assert!(last > ckpt_seq, "the image must end with journal records after its newest checkpoint");
    (slot, last)
}

#[test]
fn a_damaged_newest_journal_record_rolls_back_exactly_one_commit() {
    let img = history_image();
    let (_, last) = newest(img);
    let before_last = &img.durable[img.durable.len() - 2];
    let block = img.sb.journal_block_offset(last);
    for (field, off, len) in JOURNAL_FIELDS {
        for at in offsets(off, len) {
            let what = format!("journal record {last}, {field} byte {at}");
            // Every byte of a record is under its crc: replay ends before it.
            assert_eq!(open_flipped(img, block + at as u64, &what).as_ref(), Some(before_last), "{what}");
        }
    }
}

#[test]
fn a_damaged_checkpoint_slot_falls_back_to_a_durable_state() {
    let img = history_image();
    let (newest_slot, _) = newest(img);
    let last = img.durable.last();
    let sb = &img.sb;
    let entries = usize::try_from(sb.extent_count).unwrap() * crate::format::ENTRY_LEN;
    for slot in 0..2 {
        let base = sb.ckpt_slot_offset(slot);
        let fields = CHECKPOINT_FIELDS.iter().copied().chain([("entries", 4096, entries)]);
        for (field, off, len) in fields {
            for at in offsets(off, len) {
                let what = format!("checkpoint slot {slot}, {field} byte {at}");
                let got = open_flipped(img, base + at as u64, &what);
                if slot != newest_slot {
                    // The older checkpoint is not read past its header.
                    assert_eq!(got.as_ref(), last, "{what}");
                } else {
                    // The older checkpoint and what is left of the journal
                    // after it: an earlier state, never a newer one.
                    assert!(got.is_some_and(|t| Some(&t) != last), "{what}");
                }
            }
        }
    }
}

/// Regression (found by the `store_recovery` fuzz target): when the
/// newest checkpoint is damaged, recovery falls back to the older one and
/// replays only the records that follow it, so its last seq is below seqs
/// already on the disk. `LoadedDrive::into_drive` jumped to
/// `last_seq + journal_blocks + 1`, which could be the very seq of the
/// lost checkpoint, and the records that followed the lost checkpoint
/// became replayable again on the next open. If, in between, the store
/// handed one of their extents to another volume and that volume wrote to
/// it, the next open mapped the extent back to its old owner, who read the
/// other volume's data. Recovery now places the next seqs past the newest
/// valid record in the ring.
#[tokio::test]
async fn a_lost_newest_checkpoint_must_not_resurrect_its_records() {
    let img = history_image();
    let (slot, _) = newest(img);
    let mut bytes = img.bytes.clone();
    bytes[img.sb.ckpt_slot_offset(slot) as usize] ^= 0x5a;
    let recovered = crate::fuzzing::recover(bytes.clone()).unwrap().table;
    let last = img.durable.last().unwrap();
    // An extent the lost commits gave to (vol, lext), free after recovery.
    let (x, lost) = (0..last.len())
        .find_map(|p| Some((p, last[p].filter(|_| recovered[p].is_none())?)))
        .expect("the damaged checkpoint loses an allocation");
    let lowest_free = recovered.iter().position(Option::is_none).unwrap();
    assert_eq!(x, lowest_free, "premise: the next allocation takes extent {x}");
    let other = 3 - lost.volume;
    let unmapped = (0..24u32)
        .find(|&l| !recovered.iter().flatten().any(|o| o.volume == other && o.lext == l))
        .expect("the other volume has an unmapped extent");
    let vol_bytes = 24 * u64::from(EXT);
    let disk = Arc::new(SimDisk::from_image(bytes));
    {
        let s = open_sim(std::slice::from_ref(&disk)).unwrap();
        let v = s.open_volume(other, vol_bytes, 4096).unwrap();
        let lba = u64::from(unmapped) * BPE;
        write(&v, lba, patterned(99, lba, BPE), false).await.unwrap();
    }
    // A power cut that kept the unflushed data write.
    disk.crash(|_| true);
    let s = open_sim(std::slice::from_ref(&disk)).unwrap();
    let v = s.open_volume(lost.volume, vol_bytes, 4096).unwrap();
    let lba = u64::from(lost.lext) * BPE;
    let foreign: Vec<u8> = (0..BPE).flat_map(|i| pattern(99, u64::from(unmapped) * BPE + i)).collect();
    assert!(read(&v, lba, BPE).await != foreign, "volume {} reads volume {other}'s data", lost.volume);
}

/// Regression: a checkpoint header with a valid checksum and a seq near
/// `u64::MAX` (a broken writer) made recovery overflow `seq + 1` (a panic
/// in debug builds, a wrapped seq in release) instead of refusing it.
#[test]
fn a_checksummed_checkpoint_seq_near_the_top_is_refused() {
    let img = history_image();
    let (slot, _) = newest(img);
    let sb = &img.sb;
    let base = sb.ckpt_slot_offset(slot) as usize;
    let len = sb.ckpt_slot_len as usize;
    for seq in [u64::MAX, u64::MAX - sb.journal_blocks, crate::format::MAX_SEQ + 1] {
        let mut bytes = img.bytes.clone();
        bytes[base + 32..base + 40].copy_from_slice(&seq.to_le_bytes());
        crate::format::reseal::checkpoint(&mut bytes[base..base + len], sb.extent_count);
        // The damaged slot is refused; the other one is used.
        let r = crate::fuzzing::recover(bytes).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert!(img.durable.contains(&r.table), "seq {seq}");
    }
    let mut ok = vec![0u8; 4096];
    crate::format::CheckpointHeader::encode(&mut ok, &sb.uuid, crate::format::MAX_SEQ, sb.extent_count, |c| c);
    assert!(crate::format::CheckpointHeader::decode(&ok, &sb.uuid, sb.extent_count).is_ok());
}
