//! Cancellation tests: every store future is dropped after 1, 2, ... N
//! polls, and the invariants and the durability promise are checked each
//! time.
//!
//! The disks run in the simulated disk's *deferred* mode, which behaves
//! like io_uring towards a caller that goes away: a write or zeroing is
//! submitted at its first poll and may land at any later moment, in any
//! order, until a sync (a barrier) lands everything. Between polls the
//! runtime runs other tasks (the drives' committers), so a drop can
//! happen in the middle of a group commit.
//!
//! What must hold after any drop (see `BlockDevice`'s cancellation
//! contract):
//! - a flush that completes makes durable every write that completed
//!   before it was issued, even when an earlier flush was dropped half
//!   way through the commit it joined;
//! - a dropped write, write-zeroes or deallocate leaves each block of its
//!   range as before or as after, never anything else, and never leaks
//!   into another volume, even if its I/O lands after the drop;
//! - every extent comes back: after a flush, free + allocated = total,
//!   with nothing left pending.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use strata_block::{BlockDevice, IoBuf};

use crate::drive::{DriveClass, LoadedDrive};
use crate::io::Backend;
use crate::io::sim::SimDisk;
use crate::tests::{BPE, BS, EXT, Rng, pattern, patterned, read, read_block, write};
use crate::{Store, Volume};

/// Polls `fut` up to `polls` times, letting the runtime run other tasks
/// between polls. Returns its output if it finished; otherwise drops it,
/// cancelling it at its `polls`-th await point.
async fn run_for<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(v) = step {
            return Some(v);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Drives on simulated disks in deferred mode.
struct Rig {
    disks: Vec<Arc<SimDisk>>,
    store: Arc<Store>,
}

impl Rig {
    fn new(ndisks: usize, disk_size: u64) -> Rig {
        let disks: Vec<Arc<SimDisk>> = (0..ndisks).map(|_| Arc::new(SimDisk::new(disk_size))).collect();
        let store = Self::open(&disks);
        Rig { disks, store }
    }

    fn open(disks: &[Arc<SimDisk>]) -> Arc<Store> {
        let loaded = disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                LoadedDrive::load(format!("sim{i}"), DriveClass::File, Backend::Sim(d.handle()), d.size(), EXT, false)
            })
            .collect::<Result<Vec<_>, _>>()
            .expect("load");
        let store = Store::open_loaded(loaded).expect("open");
        for d in disks {
            d.set_deferred(true);
        }
        store
    }

    /// Power cut (each unsynced block kept by `keep`), then a new store.
    fn crash_and_reopen(&mut self, mut keep: impl FnMut(u64) -> bool) {
        for d in &self.disks {
            d.set_deferred(false);
            d.crash(&mut keep);
        }
        self.store = Self::open(&self.disks);
    }

    fn vol(&self, id: u64, extents: u64) -> Arc<Volume> {
        self.store.open_volume(id, extents * u64::from(EXT), BS as u32).expect("volume")
    }

    /// Checks that no extent leaked: after a commit nothing is pending,
    /// and free + allocated covers every extent.
    async fn assert_no_leak(&self, vols: &[&Arc<Volume>], what: &str) {
        self.store.commit().await.expect("commit");
        let st = self.store.stats();
        for d in &st.drives {
            assert_eq!(d.extents_pending_free, 0, "{what}: extents left pending after a commit");
        }
        assert_eq!(st.extents_free + st.extents_allocated, st.extents_total, "{what}: extents leaked");
        let mapped: u64 = vols.iter().map(|v| v.allocated_bytes() / u64::from(EXT)).sum();
        assert_eq!(mapped, st.extents_allocated, "{what}: volumes map other than the drives count");
    }
}

/// Reads `blocks` blocks at `lba` and checks each is one of `allowed`
/// (tags; 0 stands for zeros).
async fn assert_blocks(v: &Volume, lba: u64, blocks: u64, allowed: &[u64], what: &str) {
    let data = read(v, lba, blocks).await;
    for (i, b) in data.chunks(BS).enumerate() {
        let l = lba + i as u64;
        let ok = allowed.iter().any(|&t| if t == 0 { b.iter().all(|&x| x == 0) } else { b == pattern(t, l) });
        assert!(ok, "{what}: block {l} is none of the allowed values {allowed:?}");
    }
}

/// Runs `case(n)` for n = 1, 2, ... until the operation under test
/// completes within n polls (`case` returns true then).
async fn for_each_drop_point<F, Fut>(mut case: F)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = bool>,
{
    for n in 1..2000 {
        if case(n).await {
            return;
        }
    }
    panic!("the operation never completed");
}

#[tokio::test]
async fn a_dropped_flush_never_loses_other_writers_data() {
    // Regression test for the bug where Drive::commit took the pending
    // journal ops out of the shared state and then awaited the sync: a
    // Flush dropped there (its connection reset) lost the journal entries
    // of every other writer, so a later successful Flush promised data
    // that read back as zeros after a crash.
    for_each_drop_point(|n| async move {
        let mut rig = Rig::new(2, 1 << 20);
        let a = rig.vol(1, 8);
        let b = rig.vol(2, 8);
        for e in 0..4 {
            write(&a, e * BPE + 1, patterned(1, e * BPE + 1, 2), false).await.unwrap();
        }
        let done = run_for(a.flush(), n).await;
        // Another host writes, then flushes to completion.
        write(&b, 3, patterned(2, 3, 1), false).await.unwrap();
        b.flush().await.unwrap();
        rig.crash_and_reopen(|_| false);
        let a = rig.vol(1, 8);
        let b = rig.vol(2, 8);
        for e in 0..4 {
            assert_blocks(&a, e * BPE + 1, 2, &[1], &format!("drop after {n} polls: volume 1 extent {e}")).await;
        }
        assert_blocks(&b, 3, 1, &[2], &format!("drop after {n} polls: volume 2")).await;
        done.is_some()
    })
    .await;
}

/// A write under test: where, and how big.
#[derive(Clone, Copy, Debug)]
enum WriteCase {
    /// Part of a new extent: the extent is zeroed first.
    PartialNew,
    /// A whole new extent: the data goes in before the mapping.
    WholeNew,
    /// Across a mapped extent and two new ones.
    Spanning,
    /// Partial, with FUA.
    Fua,
}

impl WriteCase {
    fn range(self) -> (u64, u64) {
        match self {
            WriteCase::PartialNew | WriteCase::Fua => (2 * BPE + 1, 2),
            WriteCase::WholeNew => (2 * BPE, BPE),
            WriteCase::Spanning => (BPE - 1, 2 * BPE + 2),
        }
    }
}

#[tokio::test]
async fn dropped_writes_leave_old_or_new_data_and_no_leak() {
    for case in [WriteCase::PartialNew, WriteCase::WholeNew, WriteCase::Spanning, WriteCase::Fua] {
        for_each_drop_point(|n| async move {
            let what = format!("{case:?} dropped after {n} polls");
            // One drive with few extents, so that the next owner of an
            // extent the dropped write held comes soon.
            let mut rig = Rig::new(1, 512 << 10);
            let v = rig.vol(1, 8);
            write(&v, 0, patterned(1, 0, 2 * BPE), false).await.unwrap();
            v.flush().await.unwrap();
            let (lba, blocks) = case.range();
            let done = run_for(v.write(lba, patterned(2, lba, blocks), matches!(case, WriteCase::Fua)), n).await;
            let finished_ok = matches!(&done, Some((_, Ok(()))));
            // Another volume takes every free extent at once: it must see
            // only its own data and zeros, even though the dropped write's
            // I/O may still be in flight to an extent it held.
            let total = rig.store.stats().extents_total;
            let w = rig.vol(2, total);
            let mut e = 0;
            loop {
                match write(&w, e * BPE + 1, patterned(3, e * BPE + 1, 1), false).await {
                    Ok(()) => e += 1,
                    Err(strata_block::BlockError::NoSpace) => break,
                    Err(err) => panic!("{what}: {err}"),
                }
            }
            for x in 0..e {
                assert_blocks(&w, x * BPE, BPE, &[0, 3], &format!("{what}: volume 2 extent {x}")).await;
            }
            assert_blocks(&v, lba, blocks, &[0, 1, 2], &what).await;
            w.flush().await.unwrap();
            for x in 0..e {
                assert_blocks(&w, x * BPE, BPE, &[0, 3], &format!("{what}: volume 2 extent {x}, flushed")).await;
            }
            rig.assert_no_leak(&[&v, &w], &what).await;
            let mut r = Rng::new(n as u64 * 31 + 7);
            rig.crash_and_reopen(|_| r.below(2) == 0);
            let v = rig.vol(1, 8);
            let allowed: &[u64] = if finished_ok { &[2] } else { &[0, 1, 2] };
            assert_blocks(&v, lba, blocks, allowed, &format!("{what}, after a crash")).await;
            assert_blocks(&v, 0, BPE - 1, &[1], &format!("{what}, after a crash: flushed data")).await;
            done.is_some()
        })
        .await;
    }
}

#[tokio::test]
async fn dropped_deallocates_and_write_zeroes_leave_old_or_zeros() {
    for whole in [false, true] {
        for_each_drop_point(|n| async move {
            let what = format!("deallocate (whole extents: {whole}) dropped after {n} polls");
            let mut rig = Rig::new(2, 1 << 20);
            let v = rig.vol(1, 8);
            write(&v, 0, patterned(1, 0, 4 * BPE), false).await.unwrap();
            v.flush().await.unwrap();
            let ranges = if whole { vec![(BPE, 2 * BPE)] } else { vec![(1, 2), (BPE + 3, 1)] };
            let done = run_for(v.deallocate(ranges.clone()), n).await;
            for &(lba, blocks) in &ranges {
                assert_blocks(&v, lba, blocks, &[0, 1], &what).await;
            }
            rig.assert_no_leak(&[&v], &what).await;
            v.flush().await.unwrap();
            rig.crash_and_reopen(|_| false);
            let v = rig.vol(1, 8);
            let allowed: &[u64] = if done.is_some() { &[0] } else { &[0, 1] };
            for &(lba, blocks) in &ranges {
                assert_blocks(&v, lba, blocks, allowed, &format!("{what}, after a crash")).await;
            }
            assert_blocks(&v, 0, 1, &[1], &format!("{what}: untouched block")).await;
            done.is_some()
        })
        .await;
    }
}

#[tokio::test]
async fn dropped_resizes_leave_a_consistent_volume() {
    for shrink_to in [3 * u64::from(EXT) / 2, 2 * u64::from(EXT)] {
        for_each_drop_point(|n| async move {
            let what = format!("shrink to {shrink_to} dropped after {n} polls");
            let mut rig = Rig::new(1, 1 << 20);
            let v = rig.vol(1, 4);
            write(&v, 0, patterned(1, 0, 4 * BPE), false).await.unwrap();
            v.flush().await.unwrap();
            let done = run_for(v.resize(shrink_to), n).await;
            let size = v.geometry().size_bytes();
            assert!(size == shrink_to || size == 4 * u64::from(EXT), "{what}: size {size}");
            // Reads inside the current size work; past it they are refused.
            let blocks = size / BS as u64;
            assert_blocks(&v, 0, blocks, &[1], &what).await;
            let (_, r) = v.read(blocks, IoBuf::zeroed(BS)).await;
            assert!(matches!(r, Err(strata_block::BlockError::OutOfRange { .. })), "{what}: read past the end");
            // The shrink is finished (or redone) and the volume grown
            // again: what was cut off reads as zeros, before and after a
            // crash.
            v.resize(shrink_to).await.unwrap();
            v.resize(4 * u64::from(EXT)).await.unwrap();
            let cut = shrink_to / BS as u64;
            assert_blocks(&v, cut, 4 * BPE - cut, &[0], &what).await;
            rig.assert_no_leak(&[&v], &what).await;
            rig.crash_and_reopen(|_| false);
            let v = rig.vol(1, 4);
            assert_blocks(&v, 0, cut, &[1], &format!("{what}, after a crash")).await;
            assert_blocks(&v, cut, 4 * BPE - cut, &[0], &format!("{what}, after a crash")).await;
            done.is_some()
        })
        .await;
    }
}

#[tokio::test]
async fn first_writes_to_different_extents_run_concurrently() {
    // Regression test: the allocation mutex was held across the zeroing
    // and data writes of a new extent, so first writes to a volume ran one
    // at a time.
    let rig = Rig::new(1, 1 << 20);
    let v = rig.vol(1, 8);
    let a = v.write(1, patterned(1, 1, 1), false);
    let b = v.write(BPE + 1, patterned(2, BPE + 1, 1), false);
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let poll = |f: std::pin::Pin<&mut _>| {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        std::future::Future::poll(f, &mut cx).is_ready()
    };
    assert!(!poll(a.as_mut()) && !poll(b.as_mut()));
    assert_eq!(rig.disks[0].in_flight(), 2, "both zeroings are in flight at once");
    while !poll(a.as_mut()) {}
    while !poll(b.as_mut()) {}
    assert_blocks(&v, 1, 1, &[1], "first write").await;
    assert_blocks(&v, BPE + 1, 1, &[2], "second write").await;
}

#[tokio::test]
async fn writes_to_an_extent_being_allocated_wait_for_it() {
    let rig = Rig::new(1, 1 << 20);
    let v = rig.vol(1, 8);
    // The first write allocates extent 0; the second (same extent, later)
    // must land after it, not on an unmapped or half-built extent.
    let first = v.write(0, patterned(1, 0, BPE), false);
    let second = v.write(2, patterned(2, 2, 1), false);
    let (r1, r2) = tokio::join!(first, second);
    r1.1.unwrap();
    r2.1.unwrap();
    assert_blocks(&v, 0, 2, &[1], "first write").await;
    assert_blocks(&v, 2, 1, &[2], "second write").await;
    assert_blocks(&v, 3, BPE - 3, &[1], "first write").await;
    rig.assert_no_leak(&[&v], "after both").await;
}

#[tokio::test]
async fn a_panicking_commit_fails_the_drive_instead_of_hanging_its_waiters() {
    let rig = Rig::new(1, 1 << 20);
    let v = rig.vol(1, 8);
    write(&v, 0, patterned(1, 0, 1), false).await.unwrap();
    rig.disks[0].set_panic_syncs(true);
    let r = tokio::time::timeout(Duration::from_secs(10), v.flush()).await.expect("the flush must not hang");
    assert!(r.is_err(), "a commit that panicked cannot report success");
    let r = tokio::time::timeout(Duration::from_secs(10), v.flush()).await.expect("later flushes must not hang");
    assert!(matches!(r, Err(strata_block::BlockError::Failed)), "{r:?}");
    assert!(rig.store.stats().drives[0].failed);
}

#[tokio::test]
async fn a_failed_shrink_leaves_reads_in_range() {
    // Regression test: Volume::resize drained the map and returned early
    // on a zeroing error before the size changed, so a read in the cut-off
    // range indexed past the map and panicked.
    let rig = Rig::new(1, 1 << 20);
    let v = rig.vol(1, 4);
    write(&v, 0, patterned(1, 0, 4 * BPE), false).await.unwrap();
    v.flush().await.unwrap();
    rig.disks[0].set_fail_writes(true);
    assert!(v.resize(3 * u64::from(EXT) / 2).await.is_err());
    rig.disks[0].set_fail_writes(false);
    let blocks = v.geometry().num_blocks;
    for lba in [0, blocks - 1, blocks, 3 * BPE, 4 * BPE - 1] {
        let (_, r) = v.read(lba, IoBuf::zeroed(BS)).await;
        assert!(r.is_ok() == (lba < blocks), "read at {lba} of {blocks}: {r:?}");
    }
    assert_eq!(read_block(&v, 0).await, pattern(1, 0));
}

#[test]
fn registry_lookups_and_opens_cannot_deadlock() {
    // Regression test for the lock-order inversion between open_volume
    // (volumes, then recovered) and volume_ids / retain_volumes (recovered,
    // then volumes).
    let rig = Rig::new(1, 1 << 20);
    let store = rig.store.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let opener = {
        let store = store.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for id in 0..2_000u64 {
                store.open_volume(id, u64::from(EXT), BS as u32).unwrap();
            }
            tx.send(()).unwrap();
        })
    };
    let lister = std::thread::spawn(move || {
        for _ in 0..2_000 {
            std::hint::black_box(store.volume_ids());
        }
        tx.send(()).unwrap();
    });
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(60)).expect("deadlock: a thread did not finish");
    }
    opener.join().unwrap();
    lister.join().unwrap();
}
