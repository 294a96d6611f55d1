//! [`UndoDevice`]: the undo log's state machine over its two devices:
//! where records go in the ring and when it frees them, recovery of the
//! chain on open, and the order of the writes that keeps it correct
//! across a crash (see the [module docs](super) for the rules it keeps,
//! and `super::format` for the bytes).

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use strata_block::{
    BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, ReadData, UndoLog, UndoRecord, blocks_in,
    check_range,
};
use tokio::sync::Notify;

use super::format::{Header, MIN_BLOCK_SIZE, MIN_LOG_BLOCKS, RING_START, RecordHeader, UndoError, after, place};
use crate::owner::io_error;

/// How long a logged write waits for room in a full ring before failing.
pub const FULL_WAIT: Duration = Duration::from_secs(10);

/// Blocks read at a time when recovery checks a record's crc.
const CHECK_CHUNK_BLOCKS: u64 = 64;

/// Bytes of the ring mapped at once ahead of a record that needs
/// unmapped blocks (see "Write ordering"): one flush per this much of
/// the first lap after an open.
const PREMAP_BYTES: u64 = 8 << 20;

/// Bytes of zeros one premapping write carries.
const PREMAP_WRITE_BYTES: u64 = 1 << 20;

/// A live undo record where it lies in the ring, as
/// [`UndoDevice::ring_records`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingRecord {
    /// Log sequence number.
    pub lsn: u64,
    /// The update it belongs to.
    pub seq: u64,
    /// First data block it restores.
    pub lba: u64,
    /// Data blocks it restores.
    pub blocks: u64,
    /// Ring block holding its header.
    pub ring_block: u64,
}

/// A record of the chain, in memory.
#[derive(Debug, Clone, Copy)]
struct Entry {
    lsn: u64,
    block: u64,
    seq: u64,
    lba: u64,
    blocks: u64,
    targets: u64,
    forgotten: bool,
}

impl Entry {
    fn span(&self) -> u64 {
        self.blocks + 1
    }
}

/// Which ring blocks are durably mapped: written and flushed since the
/// log last deallocated them, so that a write over them lands in place.
#[derive(Debug, Clone)]
struct Mapped {
    words: Vec<u64>,
}

impl Mapped {
    /// No block of `0..blocks` mapped.
    fn none(blocks: u64) -> Mapped {
        Mapped { words: vec![0; blocks.div_ceil(64) as usize] }
    }

    fn get(&self, b: u64) -> bool {
        self.words.get((b / 64) as usize).is_some_and(|w| w >> (b % 64) & 1 == 1)
    }

    fn set(&mut self, blocks: std::ops::Range<u64>) {
        for b in blocks {
            if let Some(w) = self.words.get_mut((b / 64) as usize) {
                *w |= 1 << (b % 64);
            }
        }
    }

    fn all(&self, blocks: std::ops::Range<u64>) -> bool {
        blocks.into_iter().all(|b| self.get(b))
    }

    /// The runs of unmapped blocks in `blocks`.
    fn gaps(&self, blocks: std::ops::Range<u64>) -> Vec<std::ops::Range<u64>> {
        let mut out: Vec<std::ops::Range<u64>> = Vec::new();
        for b in blocks.filter(|&b| !self.get(b)) {
            match out.last_mut() {
                Some(r) if r.end == b => r.end = b + 1,
                _ => out.push(b..b + 1),
            }
        }
        out
    }
}

/// What [`State::allocate`] found.
enum Placed {
    /// Ring space taken for the record.
    At(Entry),
    /// The record goes at these blocks, some of them not durably mapped
    /// yet: map them first.
    Unmapped(std::ops::Range<u64>),
}

/// Everything that changes, under one short std mutex.
#[derive(Debug)]
struct State {
    ring_end: u64,
    /// Durable head of the chain (as in the header on disk).
    head_block: u64,
    head_lsn: u64,
    /// Block after the newest record, and the LSN the next one gets.
    cursor: u64,
    next_lsn: u64,
    /// The chain: LSNs `head_lsn..next_lsn`.
    entries: VecDeque<Entry>,
    /// LSNs whose record write has not completed.
    unwritten: BTreeSet<u64>,
    committed: u64,
    commit_lsn: u64,
    /// Logged writes between their ring allocation and their end.
    inflight: usize,
    failed: bool,
    /// Ring blocks a record may be written over.
    mapped: Mapped,
}

impl State {
    /// Takes ring space for a record of `span` blocks, if there is room
    /// and it is mapped.
    fn allocate(&mut self, seq: u64, targets: u64, lba: u64, blocks: u64) -> Option<Placed> {
        let span = blocks + 1;
        let block = place(self.ring_end, self.head_block, self.cursor, self.entries.is_empty(), span)?;
        if !self.mapped.all(block..block + span) {
            return Some(Placed::Unmapped(block..block + span));
        }
        let e = Entry { lsn: self.next_lsn, block, seq, lba, blocks, targets, forgotten: false };
        self.entries.push_back(e);
        self.unwritten.insert(e.lsn);
        self.cursor = after(self.ring_end, block, span);
        self.next_lsn += 1;
        self.inflight += 1;
        Some(Placed::At(e))
    }

    /// The header that makes the current state durable: the head moves
    /// past the longest prefix of forgotten records whose writes
    /// completed.
    fn header(&self, block_size: u32, committed: u64) -> Header {
        let (head_block, head_lsn) = self
            .entries
            .iter()
            .find(|e| !e.forgotten || self.unwritten.contains(&e.lsn))
            .map_or((self.cursor, self.next_lsn), |e| (e.block, e.lsn));
        Header { block_size, ring_end: self.ring_end, committed, commit_lsn: self.next_lsn, head_block, head_lsn }
    }

    /// Takes `h` as durable: frees the records before its head.
    fn apply(&mut self, h: &Header) {
        while self.entries.front().is_some_and(|e| e.lsn < h.head_lsn) {
            self.entries.pop_front();
        }
        self.head_block = h.head_block;
        self.head_lsn = h.head_lsn;
        self.committed = self.committed.max(h.committed);
        self.commit_lsn = h.commit_lsn;
        debug_assert_eq!(self.entries.len() as u64, self.next_lsn - self.head_lsn);
        debug_assert!(!self.entries.is_empty() || self.cursor == self.head_block);
    }
}

/// A shard's data device with a durable undo log on a second device.
///
/// Opened with [`UndoDevice::open`]; see the module docs for the format,
/// the write ordering and what survives a crash.
pub struct UndoDevice {
    data: Arc<dyn BlockDevice>,
    log: Arc<dyn BlockDevice>,
    block_size: u32,
    state: Mutex<State>,
    /// Woken when a record's write completes, ring space is freed, a
    /// logged write ends, or the device fails.
    progress: Notify,
    /// Serialises header writers (commit, roll back, discard) so that
    /// their headers land in order.
    ops: tokio::sync::Mutex<()>,
    /// One premapping of ring blocks at a time.
    mapping: tokio::sync::Mutex<()>,
    full_wait: Duration,
    /// This device, for the tasks that run its operations to the end.
    me: Weak<UndoDevice>,
}

impl std::fmt::Debug for UndoDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UndoDevice").field("state", &*self.state()).finish_non_exhaustive()
    }
}

/// Counts a logged write in flight from its ring allocation to its end.
struct InFlight<'a>(&'a UndoDevice);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.state().inflight -= 1;
        self.0.progress.notify_waiters();
    }
}

impl UndoDevice {
    /// Opens the undo log on `log` for the shard volume `data`: formats a
    /// log never written (all zeros), else recovers its live records, and
    /// erases whatever lies in the ring off the chain of records.
    ///
    /// # Errors
    ///
    /// [`UndoError`]: devices of different or too small block sizes, a log
    /// device too small, a header that is not an undo log's, of another
    /// version, corrupt or out of range, a live record outside `data`, or
    /// an I/O error.
    pub async fn open(data: Arc<dyn BlockDevice>, log: Arc<dyn BlockDevice>) -> Result<Arc<UndoDevice>, UndoError> {
        Self::open_with_wait(data, log, FULL_WAIT).await
    }

    async fn open_with_wait(
        data: Arc<dyn BlockDevice>,
        log: Arc<dyn BlockDevice>,
        full_wait: Duration,
    ) -> Result<Arc<UndoDevice>, UndoError> {
        let (dg, lg) = (data.geometry(), log.geometry());
        if dg.block_size != lg.block_size {
            return Err(UndoError::BlockSizeMismatch { data: dg.block_size, log: lg.block_size });
        }
        if lg.block_size < MIN_BLOCK_SIZE {
            return Err(UndoError::BlockSizeTooSmall { block_size: lg.block_size, min: MIN_BLOCK_SIZE });
        }
        if lg.num_blocks < MIN_LOG_BLOCKS {
            return Err(UndoError::LogTooSmall { blocks: lg.num_blocks, min: MIN_LOG_BLOCKS });
        }
        let (block0, r) = log.read(0, IoBuf::recycled(lg.block_size as usize)).await;
        r?;
        let state = if block0.iter().all(|&b| b == 0) {
            format(&*log, lg).await?
        } else {
            let h = Header::decode(&block0, lg)?;
            let state = recover(&*data, &*log, &h).await?;
            let live = state.entries.iter().filter(|e| !e.forgotten).count();
            tracing::info!(committed = h.committed, records = live, "undo log recovered");
            tracing::debug!(live = ?state.entries.iter().filter(|e| !e.forgotten).map(|e| (e.seq, e.lba, e.blocks)).collect::<Vec<_>>(),
                "undo records kept (seq, lba, blocks)");
            erase_off_chain(&*log, &state).await?;
            state
        };
        Ok(Arc::new_cyclic(|me| UndoDevice {
            data,
            log,
            block_size: lg.block_size,
            state: Mutex::new(state),
            progress: Notify::new(),
            ops: tokio::sync::Mutex::new(()),
            mapping: tokio::sync::Mutex::new(()),
            full_wait,
            me: me.clone(),
        }))
    }

    /// The live records (not forgotten, including those still being
    /// written), oldest first.
    pub fn ring_records(&self) -> Vec<RingRecord> {
        let s = self.state();
        s.entries
            .iter()
            .filter(|e| !e.forgotten)
            .map(|e| RingRecord { lsn: e.lsn, seq: e.seq, lba: e.lba, blocks: e.blocks, ring_block: e.block })
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent before anything
        // that can panic, so a poisoned lock holds a usable state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self) {
        self.state().failed = true;
        self.progress.notify_waiters();
    }

    /// Runs `work` on a task of its own and waits for it: a dropped
    /// caller leaves it running to the end (see "Cancel safety").
    async fn on_task<T, F>(&self, work: impl FnOnce(Arc<UndoDevice>) -> F) -> Result<T, BlockError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, BlockError>> + Send + 'static,
    {
        let me = self.me.upgrade().ok_or(BlockError::Gone)?;
        let rt = tokio::runtime::Handle::try_current().map_err(|e| io_error(format!("undo log needs tokio: {e}")))?;
        rt.spawn(work(me)).await.unwrap_or_else(|e| Err(io_error(format!("undo log task failed: {e}"))))
    }

    /// Waits for `ready` to hold on the state (checked under the lock),
    /// up to `deadline`; `Ok(None)` when the deadline passed.
    async fn wait_for<T>(
        &self,
        deadline: Option<tokio::time::Instant>,
        mut ready: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>, BlockError> {
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.state();
                if s.failed {
                    return Err(BlockError::Failed);
                }
                if let Some(v) = ready(&mut s) {
                    return Ok(Some(v));
                }
            }
            match deadline {
                Some(d) => {
                    if tokio::time::timeout_at(d, notified).await.is_err() {
                        return Ok(None);
                    }
                }
                None => notified.await,
            }
        }
    }

    async fn logged_write(&self, seq: u64, targets: u64, lba: u64, buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let _inflight = match self.append(seq, targets, lba, &buf).await {
            Ok(i) => i,
            Err(e) => return (buf, Err(e)),
        };
        self.data.write(lba, buf, false).await
    }

    /// Logs the bytes a write of `new` at `lba` overwrites, and returns
    /// once every record up to it has completed (the new bytes may then
    /// be written).
    async fn append(&self, seq: u64, targets: u64, lba: u64, new: &IoBuf) -> Result<InFlight<'_>, BlockError> {
        let dg = self.data.geometry();
        let blocks = blocks_in(dg, new.len())?;
        check_range(dg, lba, blocks)?;
        let capacity = self.state().ring_end - RING_START;
        if blocks >= capacity {
            return Err(io_error(format!(
                "a write of {blocks} blocks does not fit the undo log's ring of {capacity} blocks (one is its header)"
            )));
        }
        let bs = self.block_size as usize;
        let (old, r) = self.data.read(lba, IoBuf::recycled(new.len())).await;
        r?;
        let deadline = tokio::time::Instant::now() + self.full_wait;
        let entry = loop {
            let placed =
                self.wait_for(Some(deadline), |s| s.allocate(seq, targets, lba, blocks)).await?.ok_or_else(|| {
                    io_error(format!(
                        "undo log full: no room for a record of {} blocks after {:?}; commit or roll back to free it",
                        blocks + 1,
                        self.full_wait
                    ))
                })?;
            match placed {
                Placed::At(e) => break e,
                Placed::Unmapped(blocks) => self.premap(blocks).await?,
            }
        };
        let inflight = InFlight(self);
        // One buffer for the whole record, so that it is one write with
        // one completion; the copy of the old bytes is cheap beside it.
        let mut rec = IoBuf::recycled(bs + old.len());
        rec[..bs].fill(0);
        rec[bs..].copy_from_slice(&old);
        RecordHeader { lsn: entry.lsn, seq, lba, blocks, targets }.encode(&mut rec[..bs], &old);
        let (_, r) = self.log.write(entry.block, rec, false).await;
        if let Err(e) = r {
            // The chain now has a hole no later record can be ordered
            // after: refuse logged writes until recovery.
            self.fail();
            return Err(e);
        }
        self.state().unwritten.remove(&entry.lsn);
        self.progress.notify_waiters();
        self.wait_for(None, |s| s.unwritten.first().is_none_or(|&l| l > entry.lsn).then_some(())).await?;
        Ok(inflight)
    }

    /// Maps the ring blocks `need` and the window after them: writes zeros
    /// over the blocks of it not durably mapped (no record lies there:
    /// records are placed only on mapped blocks), flushes the log, and
    /// only then lets records go there (see "Write ordering").
    async fn premap(&self, need: std::ops::Range<u64>) -> Result<(), BlockError> {
        let _one = self.mapping.lock().await;
        let bs = u64::from(self.block_size);
        let gaps = {
            let s = self.state();
            let end = need.end.max(need.start + (PREMAP_BYTES / bs).max(1)).min(s.ring_end);
            s.mapped.gaps(need.start..end)
        };
        if gaps.is_empty() {
            return Ok(());
        }
        let per_write = (PREMAP_WRITE_BYTES / bs).max(1);
        for gap in &gaps {
            let mut at = gap.start;
            while at < gap.end {
                let n = (gap.end - at).min(per_write);
                let (_, r) = self.log.write(at, IoBuf::zeroed((n * bs) as usize), false).await;
                r?;
                at += n;
            }
        }
        self.log.flush().await?;
        let mut s = self.state();
        for gap in gaps {
            s.mapped.set(gap);
        }
        drop(s);
        self.progress.notify_waiters();
        Ok(())
    }

    /// Writes `h` to block 0 with FUA, then frees what it frees; a failed
    /// write fails the device (the header on disk is old or new).
    async fn write_header(&self, h: Header) -> Result<(), BlockError> {
        let mut buf = IoBuf::zeroed(self.block_size as usize);
        h.encode(&mut buf);
        let (_, r) = self.log.write(0, buf, true).await;
        if let Err(e) = r {
            self.fail();
            return Err(e);
        }
        self.state().apply(&h);
        self.progress.notify_waiters();
        Ok(())
    }

    async fn do_commit(&self, seq: u64) -> Result<(), BlockError> {
        let _ops = self.ops.lock().await;
        let h = {
            let mut s = self.state();
            if s.failed {
                return Err(BlockError::Failed);
            }
            let mark = s.committed.max(seq);
            let mut newly = 0;
            for e in s.entries.iter_mut().filter(|e| !e.forgotten && e.seq <= mark) {
                e.forgotten = true;
                newly += 1;
            }
            if newly == 0 && mark == s.committed {
                return Ok(());
            }
            s.header(self.block_size, mark)
        };
        self.write_header(h).await
    }

    /// Waits until no logged write is in flight, and returns the LSN the
    /// next one gets: the records before it are all the chain holds.
    async fn quiesce(&self) -> Result<u64, BlockError> {
        // Without a deadline the wait ends only with a value or an error.
        let end = self.wait_for(None, |s| (s.inflight == 0).then_some(s.next_lsn)).await?;
        end.ok_or(BlockError::Failed)
    }

    /// Forgets every record before LSN `end` and raises the mark to
    /// `mark`, durably.
    async fn forget_all(&self, end: u64, mark: u64) -> Result<(), BlockError> {
        let h = {
            let mut s = self.state();
            if s.failed {
                return Err(BlockError::Failed);
            }
            let mark = s.committed.max(mark);
            let mut any = false;
            for e in s.entries.iter_mut().filter(|e| e.lsn < end) {
                any = true;
                e.forgotten = true;
            }
            if !any && mark == s.committed {
                return Ok(());
            }
            s.header(self.block_size, mark)
        };
        self.write_header(h).await
    }

    /// Puts back the old bytes of every live record `undo` picks, newest
    /// first, flushes the data, then forgets every record and raises the
    /// mark to `mark` (durably).
    async fn do_roll_back(&self, undo: impl Fn(&Entry) -> bool, mark: u64) -> Result<u64, BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        let undo: Vec<Entry> = {
            let s = self.state();
            s.entries.iter().rev().filter(|e| e.lsn < end && !e.forgotten && undo(e)).copied().collect()
        };
        tracing::debug!(undo = ?undo.iter().map(|e| (e.seq, e.lba, e.blocks)).collect::<Vec<_>>(), mark,
            "rolling back these updates (seq, lba, blocks), newest first");
        for e in &undo {
            self.restore(e).await?;
        }
        if !undo.is_empty() {
            self.data.flush().await?;
        }
        self.forget_all(end, mark).await?;
        Ok(undo.len() as u64)
    }

    async fn do_records(&self, after: u64) -> Result<Vec<UndoRecord>, BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        let s = self.state();
        Ok(s.entries
            .iter()
            .filter(|e| e.lsn < end && !e.forgotten && e.seq > after)
            .map(|e| UndoRecord { seq: e.seq, lba: e.lba, blocks: e.blocks, targets: e.targets })
            .collect())
    }

    /// Puts back the old bytes of `e`, after checking its crc again (the
    /// log's media may have decayed since it was written or recovered).
    async fn restore(&self, e: &Entry) -> Result<(), BlockError> {
        let bs = self.block_size as usize;
        // The record lies in the ring, so its length fits the log device.
        let len = usize::try_from(e.span())
            .ok()
            .and_then(|n| n.checked_mul(bs))
            .ok_or_else(|| io_error(format!("undo record LSN {} of {} blocks is too large", e.lsn, e.blocks)))?;
        let (rec, r) = self.log.read(e.block, IoBuf::recycled(len)).await;
        r?;
        let valid = RecordHeader::decode(&rec[..bs]).is_some_and(|(h, stored, crc)| {
            h == RecordHeader { lsn: e.lsn, seq: e.seq, lba: e.lba, blocks: e.blocks, targets: e.targets }
                && crc32c::crc32c_append(crc, &rec[bs..]) == stored
        });
        if !valid {
            return Err(io_error(format!(
                "undo record LSN {} at log block {} no longer matches its crc; roll back cannot restore blocks {}+{}",
                e.lsn, e.block, e.lba, e.blocks
            )));
        }
        let (_, r) = self.data.write(e.lba, IoBuf::from_slice(&rec[bs..]), false).await;
        r
    }

    async fn do_discard(&self) -> Result<(), BlockError> {
        let _ops = self.ops.lock().await;
        let end = self.quiesce().await?;
        self.forget_all(end, 0).await
    }
}

/// Formats a log never written: erases the ring, then writes the header.
async fn format(log: &dyn BlockDevice, g: Geometry) -> Result<State, UndoError> {
    log.deallocate(vec![(RING_START, g.num_blocks - RING_START)]).await?;
    log.flush().await?;
    let h = Header {
        block_size: g.block_size,
        ring_end: g.num_blocks,
        committed: 0,
        commit_lsn: 1,
        head_block: RING_START,
        head_lsn: 1,
    };
    let mut buf = IoBuf::zeroed(g.block_size as usize);
    h.encode(&mut buf);
    let (_, r) = log.write(0, buf, true).await;
    r?;
    Ok(empty_state(&h))
}

fn empty_state(h: &Header) -> State {
    State {
        ring_end: h.ring_end,
        head_block: h.head_block,
        head_lsn: h.head_lsn,
        cursor: h.head_block,
        next_lsn: h.head_lsn,
        entries: VecDeque::new(),
        unwritten: BTreeSet::new(),
        committed: h.committed,
        commit_lsn: h.commit_lsn,
        inflight: 0,
        failed: false,
        mapped: Mapped::none(h.ring_end),
    }
}

/// Follows the chain of records from the header's head (see "Placement
/// and recovery").
async fn recover(data: &dyn BlockDevice, log: &dyn BlockDevice, h: &Header) -> Result<State, UndoError> {
    let mut s = empty_state(h);
    let bs = h.block_size as usize;
    let data_blocks = data.geometry().num_blocks;
    // Every record takes at least two ring blocks, and placement never
    // lets the chain overlap itself, so this bounds the walk twice over.
    for _ in RING_START..h.ring_end {
        let Some(found) = next_record(log, &s, bs).await? else { break };
        let (at, r) = found;
        if r.lba.checked_add(r.blocks).is_none_or(|end| end > data_blocks) {
            return Err(UndoError::RecordOutOfRange {
                lsn: r.lsn,
                lba: r.lba,
                blocks: r.blocks,
                num_blocks: data_blocks,
            });
        }
        let forgotten = r.seq <= h.committed && r.lsn < h.commit_lsn;
        s.entries.push_back(Entry {
            lsn: r.lsn,
            block: at,
            seq: r.seq,
            lba: r.lba,
            blocks: r.blocks,
            targets: r.targets,
            forgotten,
        });
        s.cursor = after(s.ring_end, at, r.blocks + 1);
        s.next_lsn += 1;
        // Read back after a restart: its mapping is durable.
        s.mapped.set(at..at + r.blocks + 1);
    }
    Ok(s)
}

/// The record that continues the chain in `s`, with its ring block: at
/// the cursor, else at the ring's start when it would not have fitted at
/// the cursor. `None` ends the chain.
async fn next_record(log: &dyn BlockDevice, s: &State, bs: usize) -> Result<Option<(u64, RecordHeader)>, UndoError> {
    let mut candidates = vec![s.cursor];
    if s.cursor != RING_START {
        candidates.push(RING_START);
    }
    for at in candidates {
        let (block, r) = log.read(at, IoBuf::recycled(bs)).await;
        r?;
        let Some((h, stored, crc)) = RecordHeader::decode(&block) else { continue };
        let placed = h.blocks.checked_add(1).and_then(|span| {
            place(s.ring_end, s.head_block, s.cursor, s.entries.is_empty(), span).filter(|&p| p == at)
        });
        if h.lsn != s.next_lsn || h.blocks == 0 || placed.is_none() {
            continue;
        }
        // The record lies inside the ring (placement checked it), so its
        // length is bounded by the log device.
        let mut crc = crc;
        let mut next = at + 1;
        let stop = at + 1 + h.blocks;
        while next < stop {
            let n = (stop - next).min(CHECK_CHUNK_BLOCKS);
            let (chunk, r) = log.read(next, IoBuf::recycled(n as usize * bs)).await;
            r?;
            crc = crc32c::crc32c_append(crc, &chunk);
            next += n;
        }
        // A record with the next LSN in the right place is the only one
        // that can be; a bad crc means it was torn.
        return Ok((crc == stored).then_some((at, h)));
    }
    Ok(None)
}

/// Deallocates every ring block off the chain, and flushes, so that no
/// record a crashed process left past the chain's end survives to be
/// taken for one with the same LSN later.
async fn erase_off_chain(log: &dyn BlockDevice, s: &State) -> Result<(), UndoError> {
    let (head, cursor, end) = (s.head_block, s.cursor, s.ring_end);
    let ranges: Vec<(u64, u64)> = if s.entries.is_empty() {
        vec![(RING_START, end - RING_START)]
    } else if cursor > head {
        vec![(cursor, end - cursor), (RING_START, head - RING_START)]
    } else {
        vec![(cursor, head - cursor)]
    };
    let ranges: Vec<(u64, u64)> = ranges.into_iter().filter(|&(_, n)| n > 0).collect();
    if !ranges.is_empty() {
        log.deallocate(ranges).await?;
        log.flush().await?;
    }
    Ok(())
}

impl BlockDevice for UndoDevice {
    fn geometry(&self) -> Geometry {
        self.data.geometry()
    }

    fn usage(&self) -> DeviceUsage {
        self.data.usage()
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.data.read(lba, buf)
    }

    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        self.data.read_data(lba, blocks)
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.data.write(lba, buf, fua)
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.data.write_zeroes(lba, blocks, deallocate)
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        self.data.deallocate(ranges)
    }

    /// Flushes the data device, then the log (records included).
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            self.data.flush().await?;
            self.log.flush().await
        })
    }
}

impl UndoLog for UndoDevice {
    fn write_logged(
        &self,
        seq: u64,
        targets: u64,
        lba: u64,
        buf: IoBuf,
    ) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            let Some(me) = self.me.upgrade() else { return (buf, Err(BlockError::Gone)) };
            let rt = match tokio::runtime::Handle::try_current() {
                Ok(rt) => rt,
                Err(e) => return (buf, Err(io_error(format!("undo log needs tokio: {e}")))),
            };
            // On a task of its own (see "Cancel safety"); a task that
            // panicked cannot hand the buffer back.
            rt.spawn(async move { me.logged_write(seq, targets, lba, buf).await })
                .await
                .unwrap_or_else(|e| (IoBuf::zeroed(0), Err(io_error(format!("undo log task failed: {e}")))))
        })
    }

    fn committed(&self) -> u64 {
        self.state().committed
    }

    fn commit(&self, seq: u64) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_commit(seq).await }))
    }

    fn roll_back(&self, after: u64) -> BlockFuture<'_, Result<u64, BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_roll_back(|e| e.seq > after, after).await }))
    }

    fn records(&self, after: u64) -> BlockFuture<'_, Result<Vec<UndoRecord>, BlockError>> {
        Box::pin(self.on_task(move |me| async move { me.do_records(after).await }))
    }

    fn roll_back_only(&self, undo: Vec<u64>, mark: u64) -> BlockFuture<'_, Result<u64, BlockError>> {
        let undo: BTreeSet<u64> = undo.into_iter().collect();
        Box::pin(self.on_task(move |me| async move { me.do_roll_back(|e| undo.contains(&e.seq), mark).await }))
    }

    fn discard(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.on_task(|me| async move { me.do_discard().await }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_block::MemDevice;

    const BS: u32 = 512;

    #[test]
    fn open_refuses_devices_that_cannot_hold_a_log() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let open = |data: MemDevice, log: MemDevice| rt.block_on(UndoDevice::open(Arc::new(data), Arc::new(log)));
        assert!(matches!(
            open(MemDevice::new(512, 8), MemDevice::new(4096, 8)),
            Err(UndoError::BlockSizeMismatch { data: 512, log: 4096 })
        ));
        assert!(matches!(
            open(MemDevice::new(32, 8), MemDevice::new(32, 8)),
            Err(UndoError::BlockSizeTooSmall { block_size: 32, min: 60 })
        ));
        assert!(matches!(
            open(MemDevice::new(512, 8), MemDevice::new(512, 2)),
            Err(UndoError::LogTooSmall { blocks: 2, min: 3 })
        ));
        assert!(open(MemDevice::new(512, 8), MemDevice::new(512, 3)).is_ok(), "three blocks is enough");
    }

    #[tokio::test]
    async fn a_full_ring_fails_the_write_after_the_wait_and_logs_nothing() {
        let data = Arc::new(MemDevice::new(BS, 8));
        let log = Arc::new(MemDevice::new(BS, 8));
        let dev = UndoDevice::open_with_wait(data.clone(), log.clone(), Duration::from_millis(50)).await.unwrap();
        // A ring of 7 blocks: one record of 6 data blocks fills it.
        let (_, r) = dev.write_logged(1, 0, 0, IoBuf::from_slice(&[1; 6 * 512])).await;
        r.unwrap();
        let before = dev.ring_records();
        let (_, r) = dev.write_logged(2, 0, 7, IoBuf::from_slice(&[2; 512])).await;
        let err = r.unwrap_err().to_string();
        assert!(err.contains("undo log full"), "{err}");
        assert_eq!(dev.ring_records(), before);
        let (b, r) = data.read(7, IoBuf::zeroed(512)).await;
        r.unwrap();
        assert!(b.iter().all(|&x| x == 0), "the data was not written");
        // A record larger than the whole ring fails at once.
        let (_, r) = dev.write_logged(3, 0, 0, IoBuf::from_slice(&[3; 7 * 512])).await;
        assert!(r.unwrap_err().to_string().contains("does not fit"));
        // After a commit frees the ring the write goes through.
        dev.commit(1).await.unwrap();
        let (_, r) = dev.write_logged(2, 0, 7, IoBuf::from_slice(&[2; 512])).await;
        r.unwrap();
    }
}
