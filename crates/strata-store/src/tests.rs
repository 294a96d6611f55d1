//! Store-level tests: thin semantics, space accounting, persistence over
//! real files (io_uring and thread engines), format refusal and
//! superblock corruption.

use std::path::Path;
use std::sync::Arc;

use strata_block::{BlockDevice, BlockError, IoBuf};

use crate::{DriveKind, DriveSpec, Store, StoreConfig, StoreError, Volume};

pub(crate) const BS: usize = 4096;
/// Small extents so that small drives have many of them.
pub(crate) const EXT: u32 = 16 * 1024;
pub(crate) const BPE: u64 = EXT as u64 / BS as u64;

pub(crate) use strata_rand::Rng;

/// Block content derived from `(tag, lba)`; every byte depends on both.
pub(crate) fn pattern(tag: u64, lba: u64) -> Vec<u8> {
    Rng::new(tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ lba.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)).bytes(BS)
}

pub(crate) fn patterned(tag: u64, lba: u64, blocks: u64) -> IoBuf {
    let mut v = Vec::with_capacity(blocks as usize * BS);
    for i in 0..blocks {
        v.extend(pattern(tag, lba + i));
    }
    IoBuf::from_slice(&v)
}

pub(crate) async fn write(v: &Volume, lba: u64, buf: IoBuf, fua: bool) -> Result<(), BlockError> {
    v.write(lba, buf, fua).await.1
}

pub(crate) async fn read(v: &Volume, lba: u64, blocks: u64) -> Vec<u8> {
    let (b, r) = v.read(lba, IoBuf::zeroed(blocks as usize * BS)).await;
    r.unwrap();
    b.to_vec()
}

pub(crate) async fn read_block(v: &Volume, lba: u64) -> Vec<u8> {
    read(v, lba, 1).await
}

fn mem_cfg(size: &str) -> StoreConfig {
    let mut c = StoreConfig::new(vec![format!("mem:{size}").parse().unwrap()]);
    c.extent_size = EXT;
    c
}

fn file_cfg(path: &Path, size: &str) -> StoreConfig {
    let mut c = StoreConfig::new(vec![format!("{}:{size}", path.display()).parse().unwrap()]);
    c.extent_size = EXT;
    c
}

fn zeros(blocks: u64) -> Vec<u8> {
    vec![0; blocks as usize * BS]
}

#[tokio::test]
async fn unwritten_blocks_read_as_zeros_and_allocate_nothing() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 1 << 20, 4096).unwrap();
    assert_eq!(read(&v, 0, 256).await, zeros(256));
    assert_eq!(v.usage().allocated_bytes, 0);
    assert_eq!(v.usage().provisioned_bytes, 1 << 20);
    assert_eq!(s.stats().extents_allocated, 0);
}

#[tokio::test]
async fn random_writes_across_extent_boundaries_read_back() {
    let s = Store::open(mem_cfg("8M")).unwrap();
    let v = s.open_volume(7, 2 << 20, 4096).unwrap();
    let n = v.geometry().num_blocks;
    let mut model = vec![zeros(1); n as usize];
    let mut rng = Rng::new(42);
    for i in 0..300u64 {
        let blocks = 1 + rng.below(2 * BPE + 2);
        let lba = rng.below(n - blocks);
        write(&v, lba, patterned(i, lba, blocks), false).await.unwrap();
        for b in 0..blocks {
            model[(lba + b) as usize] = pattern(i, lba + b);
        }
        if i % 50 == 0 {
            let blocks = 1 + rng.below(3 * BPE);
            let lba = rng.below(n - blocks);
            let got = read(&v, lba, blocks).await;
            assert_eq!(got, model[lba as usize..(lba + blocks) as usize].concat());
        }
    }
    assert_eq!(read(&v, 0, n).await, model.concat());
    let mapped = (0..n / BPE)
        .filter(|e| model[(e * BPE) as usize..((e + 1) * BPE) as usize].iter().any(|b| b.iter().any(|&x| x != 0)))
        .count() as u64;
    assert!(v.allocated_bytes() >= mapped * u64::from(EXT));
}

#[tokio::test]
async fn deallocate_whole_extents_returns_space_and_partial_ranges_read_zeros() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 1 << 20, 4096).unwrap();
    write(&v, 0, patterned(1, 0, 4 * BPE), false).await.unwrap();
    assert_eq!(v.allocated_bytes(), 4 * u64::from(EXT));
    let before = s.stats();
    // Whole extent 1, plus a partial range in extent 3.
    v.deallocate(vec![(BPE, BPE), (3 * BPE + 1, 2)]).await.unwrap();
    assert_eq!(v.allocated_bytes(), 3 * u64::from(EXT));
    let after = s.stats();
    assert_eq!(after.extents_allocated, before.extents_allocated - 1);
    assert_eq!(after.drives[0].extents_pending_free, 1);
    assert_eq!(read(&v, BPE, BPE).await, zeros(BPE));
    assert_eq!(read(&v, 3 * BPE + 1, 2).await, zeros(2));
    assert_eq!(read_block(&v, 3 * BPE).await, pattern(1, 3 * BPE));
    assert_eq!(read_block(&v, 3 * BPE + 3).await, pattern(1, 3 * BPE + 3));
    assert_eq!(read(&v, 0, BPE).await, patterned(1, 0, BPE).to_vec());
    v.flush().await.unwrap();
    let flushed = s.stats();
    assert_eq!(flushed.drives[0].extents_pending_free, 0);
    assert_eq!(flushed.drives[0].extents_free, before.drives[0].extents_free + 1);
}

#[tokio::test]
async fn write_zeroes_zeroes_and_frees_whole_extents() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 1 << 20, 4096).unwrap();
    write(&v, 0, patterned(2, 0, 3 * BPE), false).await.unwrap();
    v.write_zeroes(2, 2 * BPE, false).await.unwrap();
    assert_eq!(read_block(&v, 1).await, pattern(2, 1));
    assert_eq!(read(&v, 2, 2 * BPE).await, zeros(2 * BPE));
    assert_eq!(read_block(&v, 2 * BPE + 2).await, pattern(2, 2 * BPE + 2));
    // Extent 1 was covered whole.
    assert_eq!(v.allocated_bytes(), 2 * u64::from(EXT));
    v.write_zeroes(0, 3 * BPE, true).await.unwrap();
    assert_eq!(v.allocated_bytes(), 0);
    assert_eq!(read(&v, 0, 3 * BPE).await, zeros(3 * BPE));
}

#[tokio::test]
async fn resize_grows_and_shrink_frees_and_zeroes_the_tail() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 4 * u64::from(EXT), 4096).unwrap();
    write(&v, 0, patterned(3, 0, 4 * BPE), false).await.unwrap();
    assert_eq!(v.allocated_bytes(), 4 * u64::from(EXT));
    // Shrink to 1.5 extents: frees 2, keeps the half-cut one.
    let half = u64::from(EXT) + u64::from(EXT) / 2;
    v.resize(half).await.unwrap();
    assert_eq!(v.geometry().num_blocks, half / BS as u64);
    assert_eq!(v.allocated_bytes(), 2 * u64::from(EXT));
    assert!(matches!(write(&v, half / BS as u64, patterned(0, 0, 1), false).await, Err(BlockError::OutOfRange { .. })));
    v.resize(8 * u64::from(EXT)).await.unwrap();
    assert_eq!(v.geometry().num_blocks, 8 * BPE);
    assert_eq!(read(&v, 0, half / BS as u64).await, patterned(3, 0, half / BS as u64).to_vec());
    assert_eq!(read(&v, half / BS as u64, 8 * BPE - half / BS as u64).await, zeros(8 * BPE - half / BS as u64));
    write(&v, 7 * BPE, patterned(4, 7 * BPE, 1), false).await.unwrap();
    assert_eq!(read_block(&v, 7 * BPE).await, pattern(4, 7 * BPE));
    assert!(v.resize(4097).await.is_err());
}

#[tokio::test]
async fn delete_frees_everything_and_handles_go_away() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 1 << 20, 4096).unwrap();
    let w = s.open_volume(2, 1 << 20, 4096).unwrap();
    write(&v, 0, patterned(5, 0, 8 * BPE), false).await.unwrap();
    write(&w, 0, patterned(6, 0, BPE), false).await.unwrap();
    assert_eq!(s.stats().extents_allocated, 9);
    s.delete_volume(1).await.unwrap();
    let st = s.stats();
    assert_eq!(st.extents_allocated, 1);
    assert_eq!(st.drives[0].extents_pending_free, 0, "delete commits its frees");
    assert!(matches!(write(&v, 0, patterned(0, 0, 1), false).await, Err(BlockError::Gone)));
    assert_eq!(read(&w, 0, BPE).await, patterned(6, 0, BPE).to_vec());
    // A new volume with the same id starts empty.
    let v2 = s.open_volume(1, 1 << 20, 4096).unwrap();
    assert_eq!(read(&v2, 0, BPE).await, zeros(BPE));
}

#[tokio::test]
async fn out_of_range_and_bad_buffers_are_refused() {
    let s = Store::open(mem_cfg("4M")).unwrap();
    let v = s.open_volume(1, 64 * 4096, 4096).unwrap();
    assert!(matches!(write(&v, 64, patterned(0, 0, 1), false).await, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(write(&v, 63, patterned(0, 0, 2), false).await, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(write(&v, u64::MAX, patterned(0, 0, 1), false).await, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(v.read(64, IoBuf::zeroed(4096)).await.1, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(v.read(0, IoBuf::zeroed(100)).await.1, Err(BlockError::BadBuffer { .. })));
    assert!(matches!(v.deallocate(vec![(0, 1), (60, 10)]).await, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(v.write_zeroes(64, 1, true).await, Err(BlockError::OutOfRange { .. })));
    assert_eq!(v.allocated_bytes(), 0, "refused requests touch nothing");
    assert!(matches!(s.open_volume(2, 1000, 4096), Err(StoreError::BadVolume { .. })));
    assert!(matches!(s.open_volume(2, 4096, 1024), Err(StoreError::BadVolume { .. })));
    assert!(matches!(s.open_volume(1, 4096, 4096), Err(StoreError::BadVolume { .. })));
    assert!(Arc::ptr_eq(&s.open_volume(1, 64 * 4096, 4096).unwrap(), &v));
}

#[tokio::test]
async fn full_drive_fails_with_no_space_and_keeps_other_data() {
    let s = Store::open(mem_cfg("1M")).unwrap();
    let total = s.stats().extents_total;
    let a = s.open_volume(1, total * u64::from(EXT), 4096).unwrap();
    let b = s.open_volume(2, 4 * u64::from(EXT), 4096).unwrap();
    write(&b, 0, patterned(9, 0, 1), false).await.unwrap();
    for e in 0..total - 1 {
        write(&a, e * BPE, patterned(8, e * BPE, BPE), false).await.unwrap();
    }
    assert_eq!(s.stats().extents_free, 0);
    let r = write(&a, (total - 1) * BPE, patterned(8, 0, 1), false).await;
    assert!(matches!(r, Err(BlockError::NoSpace)), "{r:?}");
    assert!(matches!(write(&b, BPE, patterned(9, BPE, 1), false).await, Err(BlockError::NoSpace)));
    // Writes into mapped extents still work; nothing else changed.
    write(&a, 0, patterned(10, 0, 1), false).await.unwrap();
    assert_eq!(read_block(&b, 0).await, pattern(9, 0));
    assert_eq!(read_block(&a, BPE).await, pattern(8, BPE));
    assert_eq!(read_block(&a, (total - 1) * BPE).await, zeros(1));
    // Freeing space (not yet committed) lets the next allocation reclaim it.
    a.deallocate(vec![(BPE, BPE)]).await.unwrap();
    write(&b, BPE, patterned(9, BPE, 1), false).await.unwrap();
    assert_eq!(read_block(&b, BPE).await, pattern(9, BPE));
}

#[tokio::test]
async fn writes_spread_over_drives() {
    let mut c = mem_cfg("2M");
    c.drives.push("mem:2M".parse().unwrap());
    let s = Store::open(c).unwrap();
    let v = s.open_volume(1, 1 << 20, 4096).unwrap();
    write(&v, 0, patterned(1, 0, 8 * BPE), false).await.unwrap();
    let st = s.stats();
    assert_eq!(st.drives[0].extents_allocated, 4);
    assert_eq!(st.drives[1].extents_allocated, 4);
    assert!(st.volatile && st.drives[0].volatile);
    assert_eq!(st.drives[0].kind, "mem");
}

async fn persistence_round_trip(use_io_uring: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0.img");
    let mut cfg = file_cfg(&path, "4M");
    cfg.use_io_uring = use_io_uring;
    {
        let s = Store::open(cfg.clone()).unwrap();
        let st = s.stats();
        assert_eq!(st.drives[0].engine, if use_io_uring { "io_uring" } else { "thread" });
        assert!(!st.volatile);
        let v = s.open_volume(3, 1 << 20, 4096).unwrap();
        write(&v, 5, patterned(11, 5, 2 * BPE), false).await.unwrap();
        write(&v, 40, patterned(12, 40, 1), true).await.unwrap();
        v.flush().await.unwrap();
        v.deallocate(vec![(6, 2), (8, BPE)]).await.unwrap();
        v.flush().await.unwrap();
    }
    // A fresh process view: only the file remains.
    let cfg2 = StoreConfig { drives: vec![path.to_str().unwrap().parse().unwrap()], ..cfg };
    let s = Store::open(cfg2).unwrap();
    assert_eq!(s.volume_ids(), vec![3]);
    let v = s.open_volume(3, 1 << 20, 4096).unwrap();
    let mut expect = patterned(11, 5, 2 * BPE).to_vec();
    expect[BS..(3 + BPE as usize) * BS].fill(0);
    assert_eq!(read(&v, 5, 2 * BPE).await, expect);
    assert_eq!(read_block(&v, 40).await, pattern(12, 40));
    assert_eq!(read_block(&v, 4).await, zeros(1));
}

#[tokio::test]
async fn file_drive_persists_across_reopen_with_io_uring() {
    persistence_round_trip(true).await;
}

#[tokio::test]
async fn file_drive_persists_across_reopen_with_thread_engine() {
    persistence_round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_io_on_io_uring_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(&dir.path().join("d.img"), "16M")).unwrap();
    let v = s.open_volume(1, 8 << 20, 4096).unwrap();
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let v = v.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..32u64 {
                let lba = (t * 32 + i) * 2;
                write(&v, lba, patterned(t, lba, 2), i % 7 == 0).await.unwrap();
                if i % 5 == 0 {
                    v.flush().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for t in 0..8u64 {
        for i in 0..32u64 {
            let lba = (t * 32 + i) * 2;
            assert_eq!(read(&v, lba, 2).await, patterned(t, lba, 2).to_vec());
        }
    }
}

#[tokio::test]
async fn orphans_are_freed_by_retain_volumes_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    {
        let s = Store::open(file_cfg(&path, "4M")).unwrap();
        for id in [1u64, 2, 3] {
            let v = s.open_volume(id, 1 << 20, 4096).unwrap();
            write(&v, 0, patterned(id, 0, 2 * BPE), false).await.unwrap();
        }
        s.flush_all().await.unwrap();
    }
    let s = Store::open(file_cfg(&path, "4M")).unwrap();
    assert_eq!(s.stats().extents_allocated, 6);
    assert_eq!(s.volume_ids(), vec![1, 2, 3]);
    let v1 = s.open_volume(1, 1 << 20, 4096).unwrap();
    assert_eq!(s.retain_volumes(&[1, 3]).await.unwrap(), vec![2]);
    assert_eq!(s.stats().extents_allocated, 4);
    assert_eq!(read(&v1, 0, 2 * BPE).await, patterned(1, 0, 2 * BPE).to_vec());
    drop((v1, s));
    let s = Store::open(file_cfg(&path, "4M")).unwrap();
    assert_eq!(s.volume_ids(), vec![1, 3], "the free was durable");
    // Opening smaller than the recovered extents frees the excess.
    let v3 = s.open_volume(3, u64::from(EXT), 4096).unwrap();
    assert_eq!(v3.allocated_bytes(), u64::from(EXT));
    assert_eq!(s.stats().extents_allocated, 3);
}

#[tokio::test]
async fn reopen_with_another_extent_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    drop(Store::open(file_cfg(&path, "4M")).unwrap());
    let mut cfg = file_cfg(&path, "4M");
    cfg.extent_size = 1 << 20;
    let e = Store::open(cfg).unwrap_err();
    assert!(matches!(e, StoreError::ExtentSizeMismatch { on_disk: EXT, configured: 1048576, .. }), "{e}");
    assert!(e.to_string().contains("extent_size = 16384"));
}

#[test]
fn foreign_data_is_not_formatted_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    let mut junk = vec![0u8; 4 << 20];
    junk[..5].copy_from_slice(b"ext4!");
    std::fs::write(&path, &junk).unwrap();
    let e = Store::open(file_cfg(&path, "4M")).unwrap_err();
    assert!(matches!(e, StoreError::NotStrataDrive { .. }), "{e}");
    assert!(e.to_string().contains("force_format"));
    let mut cfg = file_cfg(&path, "4M");
    cfg.force_format = true;
    Store::open(cfg).unwrap();
    // Now it is ours and opens without force.
    Store::open(file_cfg(&path, "4M")).unwrap();
}

#[test]
fn zero_filled_existing_file_is_formatted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
    let s = Store::open(file_cfg(&path, "4M")).unwrap();
    assert_eq!(s.stats().drives[0].kind, "file");
}

#[test]
fn too_small_drive_is_refused() {
    let e = Store::open(mem_cfg("64K")).unwrap_err();
    assert!(matches!(e, StoreError::TooSmall { .. }), "{e}");
}

#[test]
fn same_file_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    let mut cfg = file_cfg(&path, "4M");
    cfg.drives.push(DriveSpec { kind: DriveKind::File { path: path.clone(), size: None } });
    let e = Store::open(cfg).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
}

#[test]
fn tmpfs_without_o_direct_says_so() {
    let Some(dir) = tempfile::tempdir_in("/dev/shm").ok() else { return };
    let path = dir.path().join("d.img");
    let e = match Store::open(file_cfg(&path, "4M")) {
        Err(e) => e,
        Ok(_) => return, // this /dev/shm supports O_DIRECT
    };
    assert!(matches!(e, StoreError::DirectIoUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("does not support O_DIRECT (tmpfs?)"));
    let mut cfg = file_cfg(&path, "4M");
    cfg.allow_buffered = true;
    Store::open(cfg).unwrap();
}

// Superblock corruption on a real file: one test per variant.

fn formatted_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    drop(Store::open(file_cfg(&path, "4M")).unwrap());
    (dir, path)
}

fn poke(path: &Path, off: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

fn existing(path: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(vec![DriveSpec { kind: DriveKind::File { path: path.to_owned(), size: None } }]);
    c.extent_size = EXT;
    c
}

#[test]
fn damaged_first_superblock_is_repaired_from_the_second() {
    let (_d, path) = formatted_file();
    poke(&path, 0, b"XXXX");
    Store::open(existing(&path)).unwrap();
    let head = std::fs::read(&path).unwrap();
    assert_eq!(&head[..8], b"STRATASB", "copy 0 was rewritten");
}

#[test]
fn bad_magic_in_both_superblocks_is_refused() {
    let (_d, path) = formatted_file();
    poke(&path, 0, b"XXXX");
    poke(&path, 4096, b"XXXX");
    assert!(matches!(Store::open(existing(&path)), Err(StoreError::NotStrataDrive { .. })));
}

#[test]
fn bad_crc_in_both_superblocks_is_corruption() {
    let (_d, path) = formatted_file();
    poke(&path, 50, &[0xff]);
    poke(&path, 4096 + 50, &[0xff]);
    let e = Store::open(existing(&path)).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}

#[test]
fn newer_format_version_is_refused() {
    let (_d, path) = formatted_file();
    for base in [0u64, 4096] {
        let mut sb = std::fs::read(&path).unwrap()[base as usize..base as usize + 4096].to_vec();
        sb[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&sb[..96]);
        sb[96..100].copy_from_slice(&crc.to_le_bytes());
        poke(&path, base, &sb);
    }
    let e = Store::open(existing(&path)).unwrap_err();
    assert!(matches!(e, StoreError::UnsupportedVersion { found: 2, supported: 1, .. }), "{e}");
}

#[test]
fn truncated_drive_file_is_refused() {
    let (_d, path) = formatted_file();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(2 << 20).unwrap();
    let e = Store::open(existing(&path)).unwrap_err();
    assert!(matches!(e, StoreError::TooSmall { actual: 2097152, needed: 4194304, .. }), "{e}");
    assert!(e.to_string().contains("truncated"));
}
