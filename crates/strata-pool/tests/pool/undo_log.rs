//! The durable undo log of an erasure-coded shard ([`UndoDevice`]) on
//! in-memory devices: round trips, commits, reopening, a crash after every
//! write, a ring that wraps and fills, and logs of garbage.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, MemDevice, UndoLog};
use strata_pool::erasure::undo_log::{RingRecord, UndoDevice};
use tokio::sync::Semaphore;

const BS: u32 = 512;
const BSZ: usize = BS as usize;

fn mem(blocks: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(BS, blocks))
}

async fn open(data: &Arc<MemDevice>, log: &Arc<MemDevice>) -> Arc<UndoDevice> {
    UndoDevice::open(data.clone(), log.clone()).await.expect("open")
}

/// Every byte of a device.
async fn bytes(dev: &dyn BlockDevice) -> Vec<u8> {
    let g = dev.geometry();
    let (b, r) = dev.read(0, IoBuf::zeroed(g.size_bytes() as usize)).await;
    r.unwrap();
    b.to_vec()
}

/// A new device holding the same bytes (a disk image).
async fn copy(dev: &MemDevice) -> Arc<MemDevice> {
    let g = dev.geometry();
    let c = Arc::new(MemDevice::new(g.block_size, g.num_blocks));
    let (_, r) = c.write(0, IoBuf::from_slice(&bytes(dev).await), false).await;
    r.unwrap();
    c
}

/// The bytes update `seq` writes to `blocks` blocks: distinct per update
/// and per block.
fn update(seq: u64, blocks: u64) -> Vec<u8> {
    (0..blocks as usize * BSZ).map(|i| (seq as usize * 31 + i / BSZ * 7 + i % 5) as u8).collect()
}

/// A data device filled with bytes no update writes.
async fn data_with_pattern(blocks: u64) -> Arc<MemDevice> {
    let d = mem(blocks);
    let init: Vec<u8> = (0..blocks as usize * BSZ).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    let (_, r) = d.write(0, IoBuf::from_slice(&init), false).await;
    r.unwrap();
    d
}

/// An update: (seq, lba, blocks).
type Update = (u64, u64, u64);

/// The data after each update: `models[i]` is the data after updates
/// `1..=i` of `updates` (seq i is `updates[i - 1]`).
fn models(initial: &[u8], updates: &[Update]) -> Vec<Vec<u8>> {
    let mut out = vec![initial.to_vec()];
    for &(seq, lba, blocks) in updates {
        let mut next = out.last().unwrap().clone();
        let at = lba as usize * BSZ;
        next[at..at + blocks as usize * BSZ].copy_from_slice(&update(seq, blocks));
        out.push(next);
    }
    out
}

/// The seqs of `records`, in order.
fn seqs(records: &[RingRecord]) -> Vec<u64> {
    records.iter().map(|r| r.seq).collect()
}

/// Checks that `dev` holds live records of `live` seqs, drops it, reopens
/// the log on `devs`, and checks that the same records and `mark` are
/// there and that rolling back to the mark undoes them all and leaves
/// `want` in the data device.
async fn reopen_and_roll_back(
    dev: Arc<UndoDevice>,
    (data, log): (&Arc<MemDevice>, &Arc<MemDevice>),
    live: &[u64],
    mark: u64,
    want: &[u8],
) {
    let records = dev.ring_records();
    assert_eq!(seqs(&records), live);
    drop(dev);
    let dev = open(data, log).await;
    assert_eq!(dev.ring_records(), records, "reopened");
    assert_eq!(dev.committed(), mark);
    assert_eq!(dev.roll_back(mark).await.unwrap(), live.len() as u64);
    assert!(bytes(&**data).await == want, "data after rolling back to {mark}");
}

async fn write(dev: &UndoDevice, (seq, lba, blocks): Update) {
    let (_, r) = dev.write_logged(seq, 0, lba, IoBuf::from_slice(&update(seq, blocks))).await;
    r.unwrap();
}

/// A [`MemDevice`] that fails the way a process does:
/// - with a budget (shared with its siblings) it applies only the writes
///   (write, write-zeroes, deallocate) within it; later ones complete but
///   never happen: the process was killed after the budget's last write;
/// - with a gate, its first record write to the gated block waits until
///   the test releases it: a log write still in flight (the zeros the log
///   writes to map its ring ahead of records pass).
struct Faulty {
    inner: Arc<MemDevice>,
    budget: Option<Arc<AtomicU64>>,
    gate: Mutex<Option<(u64, Arc<Semaphore>)>>,
}

impl Faulty {
    fn dying(inner: &Arc<MemDevice>, budget: &Arc<AtomicU64>) -> Arc<Faulty> {
        Arc::new(Faulty { inner: inner.clone(), budget: Some(budget.clone()), gate: Mutex::new(None) })
    }

    /// A device whose first write to `block` waits for a permit of the
    /// returned semaphore.
    fn gated(inner: Arc<MemDevice>, block: u64) -> (Arc<Faulty>, Arc<Semaphore>) {
        let gate = Arc::new(Semaphore::new(0));
        (Arc::new(Faulty { inner, budget: None, gate: Mutex::new(Some((block, gate.clone()))) }), gate)
    }

    fn lives(&self) -> bool {
        self.budget.as_ref().is_none_or(|b| b.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok())
    }
}

impl BlockDevice for Faulty {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn usage(&self) -> DeviceUsage {
        self.inner.usage()
    }
    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.inner.read(lba, buf)
    }
    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let gate = {
            let mut g = self.gate.lock().unwrap();
            let record = buf.as_slice().iter().any(|&b| b != 0);
            if record && g.as_ref().is_some_and(|(block, _)| *block == lba) { g.take() } else { None }
        };
        Box::pin(async move {
            if let Some((_, g)) = gate {
                g.acquire().await.unwrap().forget();
            }
            if self.lives() { self.inner.write(lba, buf, fua).await } else { (buf, Ok(())) }
        })
    }
    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        if self.lives() {
            self.inner.write_zeroes(lba, blocks, deallocate)
        } else {
            Box::pin(std::future::ready(Ok(())))
        }
    }
    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        if self.lives() { self.inner.deallocate(ranges) } else { Box::pin(std::future::ready(Ok(()))) }
    }
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        self.inner.flush()
    }
}

#[tokio::test]
async fn roll_back_restores_the_bytes_before_every_update_newest_first() {
    let data = data_with_pattern(16).await;
    let log = mem(32);
    let initial = bytes(&*data).await;
    let dev = open(&data, &log).await;
    // Block 3 is written by updates 1 and 2: only the bytes before both
    // are right after the roll back.
    for u in [(1, 2, 2), (2, 3, 1), (3, 10, 3)] {
        write(&dev, u).await;
    }
    assert_ne!(bytes(&*data).await, initial);
    assert_eq!(dev.ring_records().len(), 3);
    assert_eq!(dev.roll_back(0).await.unwrap(), 3);
    assert_eq!(bytes(&*data).await, initial);
    assert!(dev.ring_records().is_empty());
    assert_eq!(dev.committed(), 0);
    // Nothing is left to undo.
    assert_eq!(dev.roll_back(0).await.unwrap(), 0);
}

#[tokio::test]
async fn roll_back_after_a_commit_undoes_only_later_updates() {
    let data = data_with_pattern(16).await;
    let log = mem(32);
    let updates = [(1, 0, 2), (2, 1, 2), (3, 1, 1), (4, 5, 1)];
    let model = models(&bytes(&*data).await, &updates);
    let dev = open(&data, &log).await;
    for u in updates {
        write(&dev, u).await;
    }
    dev.commit(2).await.unwrap();
    assert_eq!(dev.committed(), 2);
    assert_eq!(seqs(&dev.ring_records()), [3, 4]);
    assert_eq!(dev.roll_back(2).await.unwrap(), 2);
    assert_eq!(bytes(&*data).await, model[2]);
    // A roll back past the mark raises it.
    write(&dev, (5, 7, 1)).await;
    assert_eq!(dev.roll_back(9).await.unwrap(), 0);
    assert_eq!(dev.committed(), 9);
    assert!(dev.ring_records().is_empty(), "roll back forgets every record");
}

#[tokio::test]
async fn a_selective_roll_back_undoes_only_the_updates_named_and_forgets_the_rest_durably() {
    let data = data_with_pattern(16).await;
    let log = mem(64);
    // 2 and 4 overlap block 1; 3 is elsewhere; 5 overlaps nothing.
    let updates = [(1, 0, 2), (2, 1, 2), (3, 6, 1), (4, 1, 1), (5, 9, 1)];
    let model = models(&bytes(&*data).await, &updates);
    let dev = open(&data, &log).await;
    for u in updates {
        write(&dev, u).await;
    }
    dev.commit(1).await.unwrap();
    let recs: Vec<(u64, u64, u64)> = dev.records(1).await.unwrap().iter().map(|r| (r.seq, r.lba, r.blocks)).collect();
    assert_eq!(recs, [(2, 1, 2), (3, 6, 1), (4, 1, 1), (5, 9, 1)], "oldest first, after the mark");
    assert_eq!(dev.records(4).await.unwrap().len(), 1);
    // Undo 2 and the newer 4 over it (newest first); keep 3 and 5.
    assert_eq!(dev.roll_back_only(vec![4, 2], 5).await.unwrap(), 2);
    let mut want = model[1].clone();
    for (seq, lba, blocks) in [(3u64, 6u64, 1u64), (5, 9, 1)] {
        let at = lba as usize * BSZ;
        want[at..at + blocks as usize * BSZ].copy_from_slice(&update(seq, blocks));
    }
    assert!(bytes(&*data).await == want, "2 and 4 undone, 3 and 5 kept");
    assert_eq!(dev.committed(), 5);
    assert!(dev.ring_records().is_empty(), "every record is forgotten");
    drop(dev);
    let dev = open(&data, &log).await;
    assert_eq!((dev.committed(), dev.ring_records().len()), (5, 0), "durably");
    assert!(dev.records(0).await.unwrap().is_empty());
}

#[tokio::test]
async fn reopening_finds_the_same_records_and_mark() {
    let data = data_with_pattern(16).await;
    let log = mem(32);
    let updates = [(1, 0, 2), (2, 4, 1), (3, 1, 3), (4, 4, 2), (5, 9, 1)];
    let model = models(&bytes(&*data).await, &updates);
    let dev = open(&data, &log).await;
    for u in &updates[..3] {
        write(&dev, *u).await;
    }
    dev.commit(2).await.unwrap();
    for u in &updates[3..] {
        write(&dev, *u).await;
    }
    reopen_and_roll_back(dev, (&data, &log), &[3, 4, 5], 2, &model[2]).await;

    let dev = open(&data, &log).await;
    assert!(dev.ring_records().is_empty());
    assert_eq!(dev.committed(), 2);
    assert_eq!(bytes(&*data).await, model[2]);
}

#[tokio::test]
async fn a_record_forgotten_behind_a_live_one_stays_forgotten_after_reopening() {
    let data = data_with_pattern(16).await;
    let log = mem(32);
    let initial = bytes(&*data).await;
    let dev = open(&data, &log).await;
    // Concurrent updates append out of seq order: committing 1 leaves a
    // hole behind the record of 2, which the head cannot pass.
    write(&dev, (2, 0, 1)).await;
    write(&dev, (1, 1, 1)).await;
    write(&dev, (3, 2, 1)).await;
    dev.commit(1).await.unwrap();
    assert_eq!(seqs(&dev.ring_records()), [2, 3]);
    // An update at or below the mark logged after the commit stays live,
    // as in the in-memory reference.
    write(&dev, (1, 3, 1)).await;
    let live = dev.ring_records();
    assert_eq!(seqs(&live), [2, 3, 1]);
    drop(dev);

    let dev = open(&data, &log).await;
    assert_eq!(dev.ring_records(), live);
    assert_eq!(dev.committed(), 1);
    assert_eq!(dev.roll_back(1).await.unwrap(), 2);
    let after = bytes(&*data).await;
    assert_eq!(after[..BSZ], initial[..BSZ], "update 2 undone");
    assert_eq!(after[BSZ..2 * BSZ], update(1, 1)[..], "update 1 was committed");
    assert_eq!(after[2 * BSZ..3 * BSZ], initial[2 * BSZ..3 * BSZ], "update 3 undone");
    assert_eq!(after[3 * BSZ..4 * BSZ], update(1, 1)[..], "not rolled back: seq 1 <= 1");
}

/// A thin-provisioned device that loses what a store loses when its
/// process is killed (strata-store's behaviour under kill -9): a write
/// over a block whose mapping is durable lands in place and survives;
/// a write that maps a block (it was never written, or deallocated since
/// the last flush) and a deallocation are lost unless a flush follows.
/// `crash()` is the image a restart would find.
struct Thin {
    now: MemDevice,
    /// What a crash leaves.
    on_crash: MemDevice,
    /// Per block: (mapped now, mapping durable).
    map: Mutex<Vec<(bool, bool)>>,
}

impl Thin {
    fn new(blocks: u64) -> Arc<Thin> {
        Arc::new(Thin {
            now: MemDevice::new(BS, blocks),
            on_crash: MemDevice::new(BS, blocks),
            map: Mutex::new(vec![(false, false); blocks as usize]),
        })
    }

    /// A device holding `bytes`, flushed.
    async fn holding(bytes: &[u8]) -> Arc<Thin> {
        let t = Thin::new((bytes.len() / BSZ) as u64);
        let (_, r) = t.write(0, IoBuf::from_slice(bytes), false).await;
        r.unwrap();
        t.flush().await.unwrap();
        t
    }

    /// The disk image a restart after a kill -9 now finds.
    async fn crash(&self) -> Arc<MemDevice> {
        copy(&self.on_crash).await
    }

    async fn sync(&self) {
        let (_, r) = self.on_crash.write(0, IoBuf::from_slice(&bytes(&self.now).await), false).await;
        r.unwrap();
        for b in self.map.lock().unwrap().iter_mut() {
            b.1 = b.0;
        }
    }
}

impl BlockDevice for Thin {
    fn geometry(&self) -> Geometry {
        self.now.geometry()
    }
    fn usage(&self) -> DeviceUsage {
        self.now.usage()
    }
    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.now.read(lba, buf)
    }
    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            let in_place: Vec<bool> = {
                let mut m = self.map.lock().unwrap();
                let blocks = m.iter_mut().skip(lba as usize).take(buf.len() / BSZ);
                blocks.map(|b| std::mem::replace(&mut b.0, true) && b.1).collect()
            };
            for (i, &p) in in_place.iter().enumerate() {
                if p {
                    let (_, r) =
                        self.on_crash.write(lba + i as u64, IoBuf::from_slice(&buf[i * BSZ..][..BSZ]), false).await;
                    r.unwrap();
                }
            }
            let (buf, r) = self.now.write(lba, buf, false).await;
            if r.is_ok() && fua {
                self.sync().await;
            }
            (buf, r)
        })
    }
    fn write_zeroes(&self, lba: u64, blocks: u64, _deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.deallocate(vec![(lba, blocks)])
    }
    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            {
                let mut m = self.map.lock().unwrap();
                for &(lba, n) in &ranges {
                    for b in m.iter_mut().skip(lba as usize).take(n as usize) {
                        *b = (false, false);
                    }
                }
            }
            self.now.deallocate(ranges).await
        })
    }
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            self.sync().await;
            Ok(())
        })
    }
}

/// Logged writes on a thin store killed after each of them: every
/// record must survive with the bytes it covers. The ring's blocks are
/// unmapped when the log is formatted and, past the chain, when it is
/// reopened, so a record written there would be lost with the kill while
/// the new data bytes, written in place, stay.
#[tokio::test]
async fn a_kill_after_any_logged_write_on_a_thin_store_rolls_back_to_a_committed_state() {
    let initial = bytes(&*data_with_pattern(16).await).await;
    let updates = crash_updates();
    let model = models(&initial, &updates);
    assert_eq!(updates[7].0, 8);
    // Two lives: the second reopens the first's image after its last
    // write (the ring past the chain is erased again) and goes on.
    let (data, log) = (Thin::holding(&initial).await, Thin::new(64));
    let mut images = Vec::new();
    let dev = UndoDevice::open(data.clone(), log.clone()).await.unwrap();
    let mut committed = vec![0];
    for &u in &updates[..8] {
        write(&dev, u).await;
        if u.0 % 3 == 0 {
            dev.flush().await.unwrap();
            dev.commit(u.0 - 1).await.unwrap();
            committed.push(u.0 - 1);
        }
        images.push((data.crash().await, log.crash().await));
    }
    drop(dev);
    let (d1, l1) = images.last().unwrap().clone();
    let (data, log) = (Thin::holding(&bytes(&*d1).await).await, Thin::new(64));
    let (_, r) = log.write(0, IoBuf::from_slice(&bytes(&*l1).await), false).await;
    r.unwrap();
    log.flush().await.unwrap();
    let dev = UndoDevice::open(data.clone(), log.clone()).await.unwrap();
    let resumed = dev.committed();
    dev.roll_back(resumed).await.unwrap();
    for &u in &updates[8..] {
        write(&dev, u).await;
        if u.0 % 3 == 0 {
            dev.flush().await.unwrap();
            dev.commit(u.0 - 1).await.unwrap();
            committed.push(u.0 - 1);
        }
        images.push((data.crash().await, log.crash().await));
    }
    // The second life starts from the first's data at its mark (it
    // rolled back the rest), then applies updates 9..=16.
    let second = models(&model[resumed as usize], &updates[8..]);
    for (i, (d, l)) in images.iter().enumerate() {
        let (d, l) = (copy(d).await, copy(l).await);
        let dev = open(&d, &l).await;
        let mark = dev.committed();
        assert!(committed.contains(&mark), "kill after write {}: mark {mark} was never committed", i + 1);
        dev.roll_back(mark).await.unwrap();
        let want = if i < 8 { &model[mark as usize] } else { &second[mark.saturating_sub(8) as usize] };
        assert!(bytes(&*d).await == *want, "kill after write {}: data is not as at {mark}", i + 1);
    }
}

/// The updates of the crash test: writes of 1 or 2 blocks over a small
/// log, so that the ring wraps.
fn crash_updates() -> Vec<Update> {
    (1..=16).map(|seq| (seq, (seq * 5) % 14, 1 + seq % 2)).collect()
}

/// Runs the crash workload on `dev`; returns the marks it committed.
async fn crash_workload(dev: &UndoDevice) -> Vec<u64> {
    let mut committed = vec![0];
    for u in crash_updates() {
        write(dev, u).await;
        if u.0 % 3 == 0 {
            dev.commit(u.0 - 1).await.unwrap();
            committed.push(u.0 - 1);
        }
    }
    committed
}

#[tokio::test]
async fn a_crash_after_any_write_rolls_back_to_a_committed_state() {
    let initial = bytes(&*data_with_pattern(16).await).await;
    let model = models(&initial, &crash_updates());
    // How many writes the whole run makes (open included).
    let total = {
        let budget = Arc::new(AtomicU64::new(u64::MAX));
        let (data, log) = (data_with_pattern(16).await, mem(24));
        let dev = UndoDevice::open(Faulty::dying(&data, &budget), Faulty::dying(&log, &budget)).await.unwrap();
        crash_workload(&dev).await;
        u64::MAX - budget.load(SeqCst)
    };
    assert!(total > 30, "{total} writes");
    let mut last_mark = 0;
    for n in 0..=total {
        let budget = Arc::new(AtomicU64::new(n));
        let (data, log) = (data_with_pattern(16).await, mem(24));
        let dev = UndoDevice::open(Faulty::dying(&data, &budget), Faulty::dying(&log, &budget)).await.unwrap();
        let committed = crash_workload(&dev).await;
        drop(dev);

        let dev = open(&data, &log).await;
        let mark = dev.committed();
        assert!(committed.contains(&mark), "crash after {n} writes: mark {mark} was never committed");
        assert!(mark >= last_mark, "crash after {n} writes: mark {mark} went back from {last_mark}");
        last_mark = mark;
        dev.roll_back(mark).await.unwrap();
        assert!(bytes(&*data).await == model[mark as usize], "crash after {n} writes: data is not as at {mark}");
        drop(dev);
        let dev = open(&data, &log).await;
        assert!(dev.ring_records().is_empty(), "crash after {n} writes: the roll back was not durable");
        assert!(bytes(&*data).await == model[mark as usize]);
    }
    assert_eq!(last_mark, 14, "with no crash the last commit is there");
}

#[tokio::test]
async fn a_roll_back_cut_short_at_any_write_rolls_back_to_the_same_bytes() {
    let updates: Vec<Update> = (1..=6).map(|s| (s, s % 4, 1 + s % 3)).collect();
    let (data, log) = (data_with_pattern(16).await, mem(32));
    let model = models(&bytes(&*data).await, &updates);
    let dev = open(&data, &log).await;
    for u in &updates {
        write(&dev, *u).await;
    }
    dev.commit(2).await.unwrap();
    drop(dev);
    let mut n = 0;
    loop {
        let (data, log) = (copy(&data).await, copy(&log).await);
        let budget = Arc::new(AtomicU64::new(n));
        let dev = UndoDevice::open(Faulty::dying(&data, &budget), Faulty::dying(&log, &budget)).await.unwrap();
        assert_eq!(dev.roll_back(4).await.unwrap(), 2);
        drop(dev);
        let cut = budget.load(SeqCst) == 0;

        let dev = open(&data, &log).await;
        let undone = dev.roll_back(4).await.unwrap();
        assert!(bytes(&*data).await == model[4], "roll back cut after {n} writes");
        assert_eq!(dev.committed(), 4);
        assert!(dev.ring_records().is_empty());
        if !cut {
            assert_eq!(undone, 0, "the whole roll back was durable");
            break;
        }
        n += 1;
    }
    assert!(n > 3, "the roll back made {n} writes");
}

#[tokio::test]
async fn the_ring_wraps_many_times_and_reopens_with_exactly_the_live_records() {
    let (data, log) = (data_with_pattern(32).await, mem(16));
    let updates: Vec<Update> = (1..=200).map(|s| (s, (s * 7) % 30, 1 + s % 2)).collect();
    let model = models(&bytes(&*data).await, &updates);
    let dev = open(&data, &log).await;
    let mut laps = 0;
    let mut last_block = 0;
    for u in &updates {
        write(&dev, *u).await;
        let newest = *dev.ring_records().last().unwrap();
        if newest.ring_block < last_block {
            laps += 1;
        }
        last_block = newest.ring_block;
        // The last three updates stay uncommitted.
        if u.0 <= 198 {
            dev.commit(u.0 - 1).await.unwrap();
        }
    }
    assert!(laps >= 20, "{laps} laps of the ring");
    reopen_and_roll_back(dev, (&data, &log), &[198, 199, 200], 197, &model[197]).await;
}

#[tokio::test]
async fn a_full_ring_waits_until_a_commit_frees_room() {
    let (data, log) = (mem(32), mem(16));
    let dev = open(&data, &log).await;
    // A ring of 15 blocks holds three records of 4 data blocks.
    for seq in 1..=3 {
        write(&dev, (seq, seq * 4, 4)).await;
    }
    let waiting = tokio::spawn({
        let dev = dev.clone();
        async move { write(&dev, (4, 20, 4)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the fourth record has no room");
    assert!(bytes(&*data).await[20 * BSZ..24 * BSZ].iter().all(|&b| b == 0), "nor is its data written");
    dev.commit(1).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the commit freed room").unwrap();
    assert_eq!(bytes(&*data).await[20 * BSZ..24 * BSZ], update(4, 4)[..]);
    assert_eq!(seqs(&dev.ring_records()), [2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_logged_writes_and_commits_roll_back_exactly_the_uncommitted() {
    let data = data_with_pattern(48).await;
    let log = mem(64);
    let initial = bytes(&*data).await;
    let dev = open(&data, &log).await;
    // 40 updates, 8 at a time, each to its own block; each commits the
    // update ten before it once written. The ring holds 31 records, so
    // records are freed and reused while others are in flight, and
    // commits forget records whose writes are still running.
    let slots = Arc::new(Semaphore::new(8));
    let mut tasks = Vec::new();
    for seq in 1..=40u64 {
        let permit = slots.clone().acquire_owned().await.unwrap();
        let dev = dev.clone();
        tasks.push(tokio::spawn(async move {
            write(&dev, (seq, seq - 1, 1)).await;
            if seq > 10 {
                dev.commit(seq - 10).await.unwrap();
            }
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(dev.committed(), 30);
    // An update whose record was appended after a commit covering it
    // stays live (as in the in-memory reference), so only those above
    // the mark are known.
    let above: std::collections::BTreeSet<u64> = dev.ring_records().iter().map(|r| r.seq).filter(|&s| s > 30).collect();
    assert_eq!(above, (31..=40).collect());
    assert_eq!(dev.roll_back(30).await.unwrap(), 10);
    let after = bytes(&*data).await;
    for seq in 1..=40u64 {
        let at = (seq as usize - 1) * BSZ;
        let want = if seq <= 30 { update(seq, 1) } else { initial[at..at + BSZ].to_vec() };
        assert!(after[at..at + BSZ] == want[..], "block of update {seq}");
    }
}

#[tokio::test]
async fn new_bytes_wait_for_every_older_record() {
    let data = mem(16);
    let (log, gate) = Faulty::gated(mem(16), 1);
    let dev = UndoDevice::open(data.clone(), log.clone()).await.unwrap();
    // The record of update 1 (ring block 1) hangs; update 2's record
    // (block 3) lands, but its new bytes must wait for the older record.
    let first = tokio::spawn({
        let dev = dev.clone();
        async move { write(&dev, (1, 0, 1)).await }
    });
    while dev.ring_records().is_empty() {
        tokio::task::yield_now().await;
    }
    let second = tokio::spawn({
        let dev = dev.clone();
        async move { write(&dev, (2, 5, 1)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished());
    assert!(bytes(&*data).await.iter().all(|&b| b == 0), "no new bytes before their records are ordered");
    // A crash now: the chain stops before the missing record, and nothing
    // it does not cover was written.
    let (data_image, log_image) = (copy(&data).await, copy(&log.inner).await);
    let reopened = open(&data_image, &log_image).await;
    assert!(reopened.ring_records().is_empty());
    // The record of update 2 it left past the chain's end carries LSN 2,
    // which the reopened log hands out again: it must be gone by then.
    write(&reopened, (7, 0, 1)).await;
    drop(reopened);
    let reopened = open(&data_image, &log_image).await;
    assert_eq!(seqs(&reopened.ring_records()), [7]);
    drop(reopened);
    // Released, both complete.
    gate.add_permits(1);
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(seqs(&dev.ring_records()), [1, 2]);
    assert_eq!(bytes(&*data).await[5 * BSZ..6 * BSZ], update(2, 1)[..]);
}

#[tokio::test]
async fn a_dropped_logged_write_still_runs_to_the_end() {
    let data = mem(16);
    let (log, gate) = Faulty::gated(mem(16), 1);
    let dev = UndoDevice::open(data.clone(), log.clone()).await.unwrap();
    let fut = dev.write_logged(1, 0, 2, IoBuf::from_slice(&update(1, 1)));
    assert!(tokio::time::timeout(Duration::from_millis(20), fut).await.is_err(), "held at the gate, then dropped");
    gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(dev.ring_records().len(), 1);
    assert_eq!(bytes(&*data).await[2 * BSZ..3 * BSZ], update(1, 1)[..]);
    // Nothing stays reserved: a roll back (which waits for logged writes
    // in flight) completes and undoes it.
    assert_eq!(dev.roll_back(0).await.unwrap(), 1);
    assert!(bytes(&*data).await.iter().all(|&b| b == 0));
}

#[tokio::test]
async fn bad_requests_fail_and_log_nothing() {
    let (data, log) = (mem(16), mem(16));
    let dev = open(&data, &log).await;
    let log_before = bytes(&*log).await;
    let (_, r) = dev.write_logged(1, 0, 15, IoBuf::from_slice(&[1; 2 * BSZ])).await;
    assert!(matches!(r, Err(BlockError::OutOfRange { lba: 15, blocks: 2, num_blocks: 16 })), "{r:?}");
    let (_, r) = dev.write_logged(1, 0, 0, IoBuf::from_slice(&[1; 100])).await;
    assert!(matches!(r, Err(BlockError::BadBuffer { len: 100, .. })), "{r:?}");
    let (buf, r) = dev.write_logged(1, 0, u64::MAX, IoBuf::from_slice(&[1; BSZ])).await;
    assert!(matches!(r, Err(BlockError::OutOfRange { .. })));
    assert_eq!(buf.len(), BSZ, "the buffer comes back");
    assert!(dev.ring_records().is_empty());
    assert_eq!(bytes(&*log).await, log_before);
    assert!(bytes(&*data).await.iter().all(|&b| b == 0));
}

#[tokio::test]
async fn plain_io_goes_to_the_data_device_without_undo() {
    let (data, log) = (mem(16), mem(16));
    let dev = open(&data, &log).await;
    assert_eq!(dev.geometry(), data.geometry());
    let (_, r) = dev.write(3, IoBuf::from_slice(&[7; BSZ]), false).await;
    r.unwrap();
    dev.flush().await.unwrap();
    assert!(dev.ring_records().is_empty());
    assert_eq!(bytes(&*data).await[3 * BSZ..4 * BSZ], [7; BSZ]);
    let (b, r) = dev.read(3, IoBuf::zeroed(BSZ)).await;
    r.unwrap();
    assert_eq!(b[..], [7; BSZ]);
    dev.write_zeroes(3, 1, false).await.unwrap();
    assert!(bytes(&*data).await.iter().all(|&b| b == 0));
}

#[tokio::test]
async fn discard_forgets_every_record_and_keeps_the_mark() {
    let (data, log) = (mem(16), mem(16));
    let dev = open(&data, &log).await;
    write(&dev, (1, 0, 1)).await;
    dev.commit(1).await.unwrap();
    write(&dev, (2, 1, 1)).await;
    write(&dev, (3, 2, 1)).await;
    let after_writes = bytes(&*data).await;
    dev.discard().await.unwrap();
    assert!(dev.ring_records().is_empty());
    assert_eq!(dev.committed(), 1);
    assert_eq!(bytes(&*data).await, after_writes, "nothing applied");
    drop(dev);
    let dev = open(&data, &log).await;
    assert!(dev.ring_records().is_empty());
    assert_eq!(dev.committed(), 1);
    assert_eq!(dev.roll_back(0).await.unwrap(), 0);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A log holding live records (seqs 2..=5; seq 1 committed and freed),
/// its data device, and the live records.
async fn log_with_records() -> (Arc<MemDevice>, Arc<MemDevice>, Vec<RingRecord>) {
    let (data, log) = (mem(16), mem(16));
    let dev = open(&data, &log).await;
    for seq in 1..=5 {
        write(&dev, (seq, seq, 1 + seq % 2)).await;
        if seq == 2 {
            dev.commit(1).await.unwrap();
        }
    }
    let live = dev.ring_records();
    (data, log, live)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A log device of random bytes (not all zero in block 0) is refused
    /// with an error, without a panic.
    #[test]
    fn a_log_of_random_bytes_is_refused(
        bytes in proptest::collection::vec(any::<u8>(), 8 * BSZ),
        first in 1u8..=255,
    ) {
        let mut bytes = bytes;
        bytes[0] = first;
        runtime().block_on(async {
            let log = mem(8);
            let (_, r) = log.write(0, IoBuf::from_slice(&bytes), false).await;
            r.unwrap();
            prop_assert!(UndoDevice::open(mem(8), log).await.is_err());
            Ok(())
        })?;
    }

    /// A byte changed anywhere in the ring cuts the chain at the record
    /// it hits (or changes nothing in free blocks): the live records are
    /// a prefix of those written, never garbage, never a panic.
    #[test]
    fn a_changed_ring_byte_leaves_a_prefix_of_the_records(block in 1u64..16, at in 0usize..BSZ, flip in 1u8..=255) {
        runtime().block_on(async {
            let (data, log, live) = log_with_records().await;
            let (mut b, r) = log.read(block, IoBuf::zeroed(BSZ)).await;
            r.unwrap();
            b[at] ^= flip;
            let (_, r) = log.write(block, b, false).await;
            r.unwrap();
            let dev = open(&data, &log).await;
            let found = dev.ring_records();
            prop_assert!(found.len() <= live.len());
            prop_assert_eq!(&found[..], &live[..found.len()]);
            // A record's crc covers its header fields (bytes 0..44 of its
            // first block, as in the format table) and its old data.
            let hit = live.iter().position(|r| {
                (r.ring_block..=r.ring_block + r.blocks).contains(&block) && (block != r.ring_block || at < 44)
            });
            if let Some(i) = hit {
                prop_assert_eq!(found.len(), i, "the record hit and those after it are gone");
            }
            Ok(())
        })?;
    }
}
