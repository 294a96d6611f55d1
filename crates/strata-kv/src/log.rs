//! A log tier: records appended to a ring of segments on a block device
//! (a local SSD file, or a pool volume reached over NVMe/TCP), reclaimed a
//! whole segment at a time, oldest first.
//!
//! The bookkeeping ([`LogState`]: where the head is, which keys each
//! segment holds, the open write buffer) is plain data that the store
//! keeps under its own lock, so that the index and the log never disagree.
//! The I/O ([`LogDev`]) happens outside that lock: a writer task takes
//! sealed buffers in order and writes them with `O_DIRECT`; readers read
//! a record's aligned range and check it (magic, the segment's sequence,
//! the key, the CRC) before they trust a byte of it.
//!
//! Invariants:
//! - segments are filled in ring order, so sequences grow around the ring
//!   from the one after the head; the next segment to reclaim is always
//!   `head + 1`;
//! - up to [`WRITES_IN_FLIGHT`] sealed buffers are written at once and may
//!   land out of order; a sync covers every buffer sealed before it. A
//!   segment is reused a whole ring after it was written, long after its
//!   last write completed;
//! - a record's bytes are readable from the moment it is appended: from
//!   the open buffer (copied out under the lock) or, once sealed, from
//!   the device after its write completes ([`LogDev::read`] waits);
//! - a new write buffer is all zeros (a reused one is cleared): the bytes
//!   a buffer's records leave unfilled reach the drive, and must not
//!   parse as records;
//! - `inflight_bytes` bounds the memory of sealed, unwritten buffers:
//!   writers wait in [`LogDev::ready`] (backpressure), they do not queue
//!   without end;
//! - a failed write or sync pauses the log: appends are refused and the
//!   buffers already sealed are dropped unwritten, each noted as a lost
//!   [`Span`] whose records the store drops from its index, and
//!   [`LogDev::failures`] moves on (so the store can tell that a record
//!   it appended may not have landed). A probe rewrites the superblock
//!   with backoff until the device answers; the log then resumes in a
//!   fresh segment, so that the hole the failure left is the end of its
//!   segment (a recovery scan stops at a hole);
//! - syncs are numbered ([`LogState::request_sync`] seals the open buffer
//!   first): sync `n` answering `Ok` while [`LogDev::failures`] has not
//!   moved means every record appended before it was requested is on
//!   the device. Syncs queued together share one device flush (group
//!   commit).
//!
//! The format and its crash cases are in the `format` module.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use strata_block::{BlockDevice, IoBuf};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::format::{self, BLOCK, Kind, RecordHead, RecordMeta, Super};

/// The largest write buffer; records larger than it get a buffer of
/// their own size.
pub const MAX_WRITE_BUFFER: u64 = 4 << 20;

/// Sealed buffers written at once.
pub const WRITES_IN_FLIGHT: usize = 4;

/// Where a record lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Segment index.
    pub seg: u32,
    /// The segment's sequence when the record was written.
    pub seq: u64,
    /// Offset of the record within its segment.
    pub off: u64,
    /// Key length.
    pub key_len: u32,
    /// Value length.
    pub value_len: u64,
}

impl Loc {
    /// Whole record length.
    pub fn len(&self) -> u64 {
        format::record_len(self.key_len as usize, self.value_len as usize)
    }
}

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The record is larger than a segment can hold.
    #[error("a {len}-byte record does not fit in a {segment}-byte segment")]
    TooBig {
        /// Record length.
        len: u64,
        /// Segment size.
        segment: u64,
    },
    /// A write failed; the tier is paused until its device answers again.
    #[error("the log device failed; the tier is paused until the device answers again")]
    Failed,
    /// The device is too small for two segments.
    #[error("the device ({bytes} bytes) is too small for a log of {segment}-byte segments")]
    TooSmall {
        /// Device bytes.
        bytes: u64,
        /// Segment size asked for.
        segment: u64,
    },
    /// A device I/O failed.
    #[error("log device I/O: {0}")]
    Io(#[from] strata_block::BlockError),
}

struct OpenBuf {
    /// Offset within the head segment where the buffer starts (aligned).
    start: u64,
    data: IoBuf,
    /// Bytes filled.
    len: u64,
}

/// The bytes `[start, end)` of segment `seg` while it had sequence `seq`:
/// one sealed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Segment index.
    pub seg: u32,
    /// The segment's sequence.
    pub seq: u64,
    /// First byte, within the segment.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl Span {
    /// True when the record at `loc` lies in this span.
    pub fn holds(&self, loc: Loc) -> bool {
        loc.seg == self.seg && loc.seq == self.seq && loc.off >= self.start && loc.off < self.end
    }
}

/// The first wait of the probe that looks for a failed device's return;
/// it doubles up to [`PROBE_MAX_WAIT`].
const PROBE_FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between probes of a failed device.
const PROBE_MAX_WAIT: Duration = Duration::from_secs(5);

/// A write for the writer task.
enum Job {
    Write { dev_off: u64, buf: IoBuf, sync: bool, span: Span },
    Sync(oneshot::Sender<Result<(), LogError>>),
}

/// The log's bookkeeping, kept under the store's lock.
pub struct LogState<K> {
    sb: Super,
    seg_seq: Vec<u64>,
    seg_keys: Vec<Vec<K>>,
    head: u32,
    head_off: u64,
    next_seq: u64,
    buf: Option<OpenBuf>,
    wbuf: u64,
    /// The device's recovery count when this log last wrote: when it
    /// moves, the log resumes in a fresh segment.
    epoch: u64,
    /// Syncs requested so far (the last one's number).
    syncs: u64,
    dev: Arc<LogDev>,
    /// The writer task's queue; the task ends when the state is dropped.
    jobs: mpsc::UnboundedSender<Job>,
}

/// The log's device side, shared with the writer task and readers.
pub struct LogDev {
    dev: Arc<dyn BlockDevice>,
    sb: Super,
    /// Device ranges `[start, end)` sealed and not yet written.
    inflight: Mutex<VecDeque<(u64, u64)>>,
    inflight_bytes: AtomicU64,
    max_inflight: u64,
    written: Notify,
    failed: AtomicBool,
    /// Times the device came back after a failure.
    epoch: AtomicU64,
    /// Writes and syncs that failed.
    failures: AtomicU64,
    /// Sealed buffers that were not written (the device failed).
    lost: Mutex<Vec<Span>>,
    /// The unwritten buffers were over their bound for longer than a
    /// writer would wait ([`LogDev::ready_within`]); cleared by the next
    /// write that completes.
    stalled: AtomicBool,
    /// Written buffers of the usual size ([`LogDev::wbuf`]) kept for the
    /// next ones (at most [`SPARE_BUFFERS`]): a fresh multi-megabyte
    /// allocation faults in every page as records are copied into it,
    /// under the store's lock.
    spare: Mutex<Vec<IoBuf>>,
    /// The usual write buffer's size (0: a log that does not write). A
    /// segment's last buffer and one grown for a large record differ;
    /// they are not kept, so that they never crowd out the usual ones.
    wbuf: usize,
}

/// The value at `range` of a buffer a record was read into. The value is
/// promoted into DRAM, which counts its length: a value that would keep a
/// buffer much larger than itself alive (a small record, whose blocks
/// hold others too) is copied out, so that DRAM holds what it counts.
/// A large one keeps its buffer (its header and the block ends are a
/// sliver of it) and is not copied.
fn value_of(mut buf: IoBuf, range: std::ops::Range<usize>) -> Bytes {
    if buf.is_external() {
        // The caller's memory, to be read where it is: never copied out,
        // and nothing but the value left in it.
        let all = buf.as_mut_slice();
        all[..range.start].fill(0);
        all[range.end..].fill(0);
        return Bytes::from_owner(buf).slice(range);
    }
    let waste = buf.capacity() - range.len();
    if waste > range.len() / 8 {
        return Bytes::copy_from_slice(&buf.as_slice()[range]);
    }
    Bytes::from_owner(buf).slice(range)
}

/// Gives the buffer a read of so many bytes lands in, or `None` for a
/// fresh heap buffer ([`LogDev::read_in`]). A buffer of another length is
/// not used.
pub type Place<'a> = &'a (dyn Fn(usize) -> Option<IoBuf> + Sync);

/// Written buffers a log keeps for reuse.
const SPARE_BUFFERS: usize = 4;

/// A record found by the recovery scan.
#[derive(Debug)]
pub struct Found {
    /// Its key.
    pub key: Bytes,
    /// Where it is.
    pub loc: Loc,
    /// Its header.
    pub head: RecordHead,
    /// For an expiry record ([`Kind::Expiry`]), the version of the put
    /// it applies to; `None` for other kinds.
    pub applies_to: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain queue updates; a panic cannot leave one half done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LogDev {
    /// A device side that only reads (a peer's log).
    fn read_only(dev: Arc<dyn BlockDevice>, sb: Super) -> LogDev {
        LogDev {
            dev,
            sb,
            inflight: Mutex::new(VecDeque::new()),
            inflight_bytes: AtomicU64::new(0),
            max_inflight: 0,
            written: Notify::new(),
            failed: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            lost: Mutex::new(Vec::new()),
            stalled: AtomicBool::new(false),
            spare: Mutex::new(Vec::new()),
            wbuf: 0,
        }
    }

    /// Writes `bytes` at `dev_off` (both aligned) and waits; keeps the
    /// buffer as a spare.
    async fn write_at(&self, dev_off: u64, buf: IoBuf) -> Result<(), LogError> {
        let (buf, r) = self.dev.write(dev_off / BLOCK, buf, false).await;
        if buf.capacity() == self.wbuf {
            let mut spare = lock(&self.spare);
            if spare.len() < SPARE_BUFFERS {
                spare.push(buf);
            }
        }
        Ok(r?)
    }

    /// A zeroed buffer of `cap` bytes: a spare one when `cap` is the usual
    /// size, cleared, or a new one. Cleared, because a buffer's unfilled bytes
    /// reach the drive (the tail of its last block, the gaps between
    /// records): a spare's old records there would carry its segment's
    /// sequence if it held the same segment, and a restart's scan would
    /// find them again at offsets where they were never written.
    fn zeroed_buf(&self, cap: usize) -> IoBuf {
        let found = if cap == self.wbuf { lock(&self.spare).pop() } else { None };
        match found {
            Some(mut b) => {
                b.set_len(cap);
                b.as_mut_slice().fill(0);
                b
            }
            None => IoBuf::zeroed(cap),
        }
    }

    async fn read_at(&self, dev_off: u64, len: u64) -> Result<IoBuf, LogError> {
        self.read_at_in(dev_off, len, None).await
    }

    /// [`read_at`](Self::read_at) into a buffer `place` gives, when it
    /// gives one of `len` bytes.
    async fn read_at_in(&self, dev_off: u64, len: u64, place: Option<Place<'_>>) -> Result<IoBuf, LogError> {
        // Not a recycled buffer: those come in powers of two, and a value
        // promoted into DRAM keeps the buffer it was read into.
        let buf = place
            .and_then(|f| f(len as usize))
            .filter(|b| b.len() == len as usize)
            .unwrap_or_else(|| IoBuf::zeroed(len as usize));
        let (buf, r) = self.dev.read(dev_off / BLOCK, buf).await;
        r?;
        Ok(buf)
    }

    /// Waits until sealed buffers take less than their share of memory.
    pub async fn ready(&self) {
        loop {
            let notified = self.written.notified();
            if self.inflight_bytes.load(Ordering::Acquire) < self.max_inflight || self.is_failed() {
                return;
            }
            notified.await;
        }
    }

    /// Waits as [`LogDev::ready`] does, for at most `limit`. False when
    /// the buffers are still over their bound: the device is stalled, and
    /// until a write completes later callers are told so at once.
    pub async fn ready_within(&self, limit: Duration) -> bool {
        let over = || self.inflight_bytes.load(Ordering::Acquire) >= self.max_inflight && !self.is_failed();
        if self.is_stalled() && over() {
            return false;
        }
        if tokio::time::timeout(limit, self.ready()).await.is_ok() {
            return true;
        }
        if !self.stalled.swap(true, Ordering::AcqRel) {
            tracing::warn!(waited = ?limit, "KV log device is stalled; writers stop waiting for it");
        }
        false
    }

    /// True while the device is stalled (see [`LogDev::ready_within`]).
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }

    /// True while the device is failed (from a failed write until a probe
    /// finds it answering again).
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Times the device came back after a failure.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Writes and syncs that have failed since the log was opened. A
    /// record appended while this was `n` is on the device once a sync
    /// requested after it answers `Ok` with this still `n`.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Acquire)
    }

    /// Notes a failed write or sync whose outcome is unknown: the log
    /// pauses, and the first failure starts the probe.
    fn fail(self: &Arc<Self>, e: &LogError) {
        self.failures.fetch_add(1, Ordering::AcqRel);
        if !self.failed.swap(true, Ordering::AcqRel) {
            tracing::error!(error = %e, "KV log write failed; the tier pauses until the device answers");
            tokio::spawn(probe(Arc::downgrade(self)));
        }
    }

    /// Reads the value of the record at `loc`, whose key is `key`, once
    /// any write of its range has completed. `None`: the bytes there are
    /// not that record any more (the segment was reused) or are damaged.
    pub async fn read(&self, key: &[u8], loc: Loc) -> Result<Option<Bytes>, LogError> {
        self.read_in(key, loc, None).await
    }

    /// [`read`](Self::read), with the record's blocks read into a buffer
    /// `place` gives (the fast path's shared region), when it gives one:
    /// the value is then a slice of that buffer, read in place by
    /// `O_DIRECT`, and the bytes around it (the record's header, the
    /// neighbours sharing its first and last blocks) are zeroed.
    pub async fn read_in(&self, key: &[u8], loc: Loc, place: Option<Place<'_>>) -> Result<Option<Bytes>, LogError> {
        let start = self.sb.segment_start(loc.seg) + loc.off;
        let end = start + loc.len();
        loop {
            let notified = self.written.notified();
            let busy = lock(&self.inflight).iter().any(|&(s, e)| s < end && start < e);
            if !busy {
                break;
            }
            notified.await;
        }
        let a = start / BLOCK * BLOCK;
        let buf = self.read_at_in(a, format::align_up(end, BLOCK) - a, place).await?;
        let skip = (start - a) as usize;
        let rec = &buf[skip..skip + loc.len() as usize];
        let ok = format::decode_record_head(rec, loc.seq, loc.len())
            .is_some_and(|h| h.kind == Kind::Put && h.key_len == key.len() && h.value_len == loc.value_len)
            && &rec[format::REC_HEADER..format::REC_HEADER + key.len()] == key
            && format::record_crc_ok(rec);
        if !ok {
            return Ok(None);
        }
        let from = skip + format::REC_HEADER + key.len();
        let to = from + loc.value_len as usize;
        Ok(Some(value_of(buf, from..to)))
    }

    /// Writes one sealed buffer and retires it from the in-flight set. A
    /// buffer that is not written is noted as lost; the first failure
    /// starts the probe.
    async fn write_one(self: &Arc<Self>, dev_off: u64, buf: IoBuf, sync: bool, span: Span) {
        let len = buf.len() as u64;
        let mut r = if self.is_failed() { Err(LogError::Failed) } else { self.write_at(dev_off, buf).await };
        if r.is_ok() && sync {
            r = self.dev.flush().await.map_err(LogError::from);
        }
        match r {
            Ok(()) => self.stalled.store(false, Ordering::Release),
            Err(e) => {
                lock(&self.lost).push(span);
                self.fail(&e);
            }
        }
        let mut q = lock(&self.inflight);
        if let Some(i) = q.iter().position(|&(s, _)| s == dev_off) {
            q.remove(i);
        }
        drop(q);
        self.inflight_bytes.fetch_sub(len, Ordering::AcqRel);
        self.written.notify_waiters();
    }

    /// The writer task: sealed buffers, up to [`WRITES_IN_FLIGHT`] at
    /// once (a drive needs depth to reach its bandwidth). A sync waits
    /// for every write submitted before it, then flushes; the syncs and
    /// writes queued behind it by then join it (up to [`SYNC_BATCH`]
    /// writes), so that many clients each waiting for a small record to
    /// be durable cost one flush, not one each. A flush that fails counts
    /// as a failed write: the log pauses.
    ///
    /// Writes may land out of order. After a crash a scan stops at the
    /// first buffer that did not land (its blocks hold another sequence
    /// or a bad CRC), so records after such a gap are lost, never read
    /// wrong; what a completed sync covered has all landed.
    async fn run(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Job>) {
        use futures_util::StreamExt;
        let mut writes = futures_util::stream::FuturesUnordered::new();
        loop {
            let job = tokio::select! {
                job = rx.recv(), if writes.len() < WRITES_IN_FLIGHT => match job {
                    Some(job) => job,
                    None => break,
                },
                Some(()) = writes.next(), if !writes.is_empty() => continue,
            };
            match job {
                Job::Write { dev_off, buf, sync, span } => writes.push(self.write_one(dev_off, buf, sync, span)),
                Job::Sync(done) => {
                    let mut waiting = vec![done];
                    let mut joined = 0;
                    while joined < SYNC_BATCH {
                        match rx.try_recv() {
                            Ok(Job::Sync(d)) => waiting.push(d),
                            Ok(Job::Write { dev_off, buf, sync, span }) => {
                                writes.push(self.write_one(dev_off, buf, sync, span));
                                joined += 1;
                            }
                            Err(_) => break,
                        }
                    }
                    while writes.next().await.is_some() {}
                    let r = if self.is_failed() {
                        Err(LogError::Failed)
                    } else {
                        match self.dev.flush().await {
                            Ok(()) => Ok(()),
                            Err(e) => {
                                let e = LogError::from(e);
                                self.fail(&e);
                                Err(e)
                            }
                        }
                    };
                    for done in waiting {
                        let _ = done.send(match &r {
                            Ok(()) => Ok(()),
                            Err(_) => Err(LogError::Failed),
                        });
                    }
                }
            }
        }
        while writes.next().await.is_some() {}
    }
}

/// Writes a sync takes along from the queue behind it (see
/// [`LogDev::run`]).
const SYNC_BATCH: usize = 4 * WRITES_IN_FLIGHT;

/// Rewrites the superblock of a failed log device, with backoff, until
/// the write and a flush succeed; then the device is back (its epoch
/// moves on). Ends when the device is dropped.
async fn probe(dev: Weak<LogDev>) {
    let mut wait = PROBE_FIRST_WAIT;
    loop {
        tokio::time::sleep(wait).await;
        let Some(d) = dev.upgrade() else { return };
        let sb = IoBuf::from_slice(&d.sb.encode());
        let answered = match d.write_at(0, sb).await {
            Ok(()) => d.dev.flush().await.map_err(LogError::from),
            Err(e) => Err(e),
        };
        match answered {
            Ok(()) => {
                d.epoch.fetch_add(1, Ordering::AcqRel);
                d.failed.store(false, Ordering::Release);
                d.written.notify_waiters();
                tracing::info!("KV log device answers again; the tier resumes in a fresh segment");
                return;
            }
            Err(e) => tracing::debug!(error = %e, next = ?wait, "KV log device still failing"),
        }
        wait = (wait * 2).min(PROBE_MAX_WAIT);
    }
}

impl<K: Clone> LogState<K> {
    /// Opens the log on `dev`: reads its superblock (formatting the device
    /// when it has none of this version, with segments of
    /// `segment_bytes`), then scans every segment. Returns the state and
    /// the records found, oldest first: replaying them in order rebuilds
    /// the index. Starts the writer task on the current runtime.
    ///
    /// # Errors
    ///
    /// The device is too small, or an I/O error.
    pub async fn open(dev: Arc<dyn BlockDevice>, segment_bytes: u64) -> Result<(LogState<K>, Vec<Found>), LogError> {
        let size = dev.geometry().size_bytes();
        let (tx, rx) = mpsc::unbounded_channel();
        let probe = LogDev::read_only(dev.clone(), Super { log_id: 0, segment_bytes: 0, segments: 0 });
        let first = probe.read_at(0, BLOCK).await?;
        let sb = match Super::decode(&first).filter(|s| BLOCK + s.segment_bytes * s.segments <= size) {
            Some(sb) => {
                if sb.segment_bytes != segment_bytes {
                    tracing::info!(
                        on_device = sb.segment_bytes,
                        asked = segment_bytes,
                        "KV log keeps the segment size it was formatted with"
                    );
                }
                let version = format::superblock_version(&first).unwrap_or(format::VERSION);
                if version != format::VERSION {
                    // Read as it is; marked as this version before anything
                    // new is written, so that a build that reads only the
                    // old one formats it afresh rather than miss records
                    // of the new kinds (the format module's compatibility).
                    probe.write_at(0, IoBuf::from_slice(&sb.encode())).await?;
                    dev.flush().await?;
                    tracing::info!(from = version, to = format::VERSION, "KV log format upgraded in place");
                }
                sb
            }
            None => {
                if let Some(v) = format::superblock_version(&first) {
                    tracing::warn!(
                        found = v,
                        reads = ?(format::OLDEST_READ..=format::VERSION),
                        "KV log of a format version this build does not read; formatting it afresh (a cache: its blocks are lost)"
                    );
                }
                let segment_bytes = segment_bytes / BLOCK * BLOCK;
                let segments = size.saturating_sub(BLOCK) / segment_bytes.max(1);
                if segment_bytes < 2 * BLOCK || segments < 2 {
                    return Err(LogError::TooSmall { bytes: size, segment: segment_bytes });
                }
                let mut id = [0u8; 8];
                getrandom::fill(&mut id).map_err(|e| LogError::Io(std::io::Error::other(e.to_string()).into()))?;
                let sb = Super { log_id: u64::from_le_bytes(id) | 1, segment_bytes, segments };
                probe.write_at(0, IoBuf::from_slice(&sb.encode())).await?;
                dev.flush().await?;
                tracing::info!(segments, segment_bytes, "KV log formatted");
                sb
            }
        };
        let wbuf = (sb.segment_bytes / 4).clamp(BLOCK, MAX_WRITE_BUFFER) / BLOCK * BLOCK;
        let ldev =
            Arc::new(LogDev { sb, max_inflight: 2 * WRITES_IN_FLIGHT as u64 * wbuf, wbuf: wbuf as usize, ..probe });
        let n = sb.segments as u32;
        let mut seg_seq = vec![0u64; n as usize];
        for (i, s) in seg_seq.iter_mut().enumerate() {
            let h = ldev.read_at(sb.segment_start(i as u32), BLOCK).await?;
            *s = format::decode_segment_header(sb.log_id, &h).unwrap_or(0);
        }
        let mut order: Vec<u32> = (0..n).filter(|&i| seg_seq[i as usize] != 0).collect();
        order.sort_by_key(|&i| seg_seq[i as usize]);
        let seg_keys: Vec<Vec<K>> = (0..n).map(|_| Vec::new()).collect();
        // No segment yet: the head is "full" at the last one, so the first
        // append opens segment 0.
        let (mut head, mut head_off) = (n - 1, sb.segment_bytes);
        // Segments are scanned several at once (a drive needs depth), and
        // their records kept in segment order, oldest first.
        let scans = futures_util::stream::iter(order.iter().map(|&i| {
            let (ldev, seq) = (&ldev, seg_seq[i as usize]);
            async move {
                let mut found = Vec::new();
                let end = scan_segment(ldev, i, seq, BLOCK, &mut found, Scan::Heads).await?;
                Ok::<_, LogError>((i, end, found))
            }
        }));
        let mut scans = futures_util::StreamExt::buffered(scans, SCANS_AT_ONCE);
        let mut found = Vec::new();
        while let Some(scan) = futures_util::StreamExt::next(&mut scans).await {
            let (i, end, mut records) = scan?;
            found.append(&mut records);
            head = i;
            head_off = format::align_up(end, BLOCK);
        }
        drop(scans); // it borrows `ldev` and `seg_seq`, which move below
        let next_seq = order.last().map(|&i| seg_seq[i as usize] + 1).unwrap_or(1);
        tokio::spawn(ldev.clone().run(rx));
        let state = LogState {
            sb,
            seg_seq,
            seg_keys,
            head,
            head_off,
            next_seq,
            buf: None,
            wbuf,
            epoch: 0,
            syncs: 0,
            dev: ldev,
            jobs: tx,
        };
        Ok((state, found))
    }

    /// The device side, for reads, syncs and backpressure.
    pub fn dev(&self) -> &Arc<LogDev> {
        &self.dev
    }

    /// Bytes of the device the ring uses.
    pub fn capacity(&self) -> u64 {
        self.sb.segment_bytes * self.sb.segments
    }

    /// The largest record a segment holds.
    pub fn max_record(&self) -> u64 {
        self.sb.segment_bytes - BLOCK
    }

    /// Notes that the record of `key` at `loc` (found by the scan) lives
    /// in its segment, so that reclaiming the segment finds it.
    pub fn track(&mut self, key: K, loc: Loc) {
        self.seg_keys[loc.seg as usize].push(key);
    }

    /// True when the record at `loc` is still on the device (its segment
    /// has not been reused since).
    pub fn is_current(&self, loc: Loc) -> bool {
        self.seg_seq.get(loc.seg as usize) == Some(&loc.seq)
    }

    /// The value at `loc` when its record is still in the open buffer
    /// (copied); `None` when it is on the device or on its way there.
    pub fn buffered(&self, loc: Loc) -> Option<Bytes> {
        let b = self.buf.as_ref()?;
        if loc.seg != self.head || loc.seq != self.seg_seq[self.head as usize] || loc.off < b.start {
            return None;
        }
        let from = (loc.off - b.start) as usize + format::REC_HEADER + loc.key_len as usize;
        let to = from + loc.value_len as usize;
        (to as u64 <= b.len).then(|| Bytes::copy_from_slice(&b.data[from..to]))
    }

    /// Appends a record. Returns where it went and the keys of a segment
    /// reclaimed to make room (whose records are gone: the caller drops
    /// their locations).
    ///
    /// # Errors
    ///
    /// The record is larger than a segment, or the device failed.
    pub fn append(
        &mut self,
        key: K,
        raw_key: &[u8],
        value: &[u8],
        meta: RecordMeta,
    ) -> Result<(Loc, Vec<K>), LogError> {
        if self.dev.is_failed() {
            return Err(LogError::Failed);
        }
        let epoch = self.dev.epoch();
        if epoch != self.epoch {
            // Back after a failure: what was sealed since has a hole
            // before it, so start a new segment after it.
            self.epoch = epoch;
            self.seal(false);
            self.head_off = self.sb.segment_bytes;
        }
        let len = format::record_len(raw_key.len(), value.len());
        if len > self.max_record() {
            return Err(LogError::TooBig { len, segment: self.sb.segment_bytes });
        }
        let mut reclaimed = Vec::new();
        let mut pos = format::align_up(self.head_off, 8);
        if !self.fits(pos, len) {
            // A new buffer starts on a block boundary.
            pos = format::align_up(pos, BLOCK);
        }
        if pos + len > self.sb.segment_bytes {
            self.seal(true);
            self.head = (self.head + 1) % self.sb.segments as u32;
            reclaimed = std::mem::take(&mut self.seg_keys[self.head as usize]);
            let seq = self.next_seq;
            self.next_seq += 1;
            self.seg_seq[self.head as usize] = seq;
            let mut data = self.dev.zeroed_buf(self.wbuf.max(BLOCK) as usize);
            format::encode_segment_header(self.sb.log_id, seq, &mut data);
            self.buf = Some(OpenBuf { start: 0, data, len: BLOCK });
            pos = BLOCK;
        }
        if !self.fits(pos, len) {
            self.seal(false);
            pos = format::align_up(pos, BLOCK);
            let cap = format::align_up(len, BLOCK).max(self.wbuf).min(self.sb.segment_bytes - pos);
            self.buf = Some(OpenBuf { start: pos, data: self.dev.zeroed_buf(cap as usize), len: 0 });
        }
        let seq = self.seg_seq[self.head as usize];
        let b = self.buf.as_mut().expect("opened above");
        let at = (pos - b.start) as usize;
        format::encode_record(&mut b.data[at..at + len as usize], seq, raw_key, value, meta);
        b.len = pos - b.start + len;
        self.head_off = pos + len;
        let loc = Loc { seg: self.head, seq, off: pos, key_len: raw_key.len() as u32, value_len: value.len() as u64 };
        self.seg_keys[self.head as usize].push(key);
        Ok((loc, reclaimed))
    }

    fn fits(&self, pos: u64, len: u64) -> bool {
        self.buf.as_ref().is_some_and(|b| pos >= b.start && pos + len <= b.start + b.data.len() as u64)
    }

    /// Hands the open buffer to the writer (rounded up to whole blocks);
    /// the next record starts at the next block boundary. `sync`: make
    /// it durable once written.
    pub fn seal(&mut self, sync: bool) {
        let Some(mut b) = self.buf.take() else { return };
        if b.len == 0 {
            return;
        }
        let len = format::align_up(b.len, BLOCK);
        b.data.set_len(len as usize);
        self.head_off = b.start + len;
        let dev_off = self.sb.segment_start(self.head) + b.start;
        let span = Span { seg: self.head, seq: self.seg_seq[self.head as usize], start: b.start, end: b.start + len };
        lock(&self.dev.inflight).push_back((dev_off, dev_off + len));
        self.dev.inflight_bytes.fetch_add(len, Ordering::AcqRel);
        if self.jobs.send(Job::Write { dev_off, buf: b.data, sync, span }).is_err() {
            self.dev.failed.store(true, Ordering::Release);
        }
    }

    /// The spans whose writes failed since the last call, each with the
    /// keys of its segment (the caller drops the entries whose record
    /// lies in the span). Spans of segments reused since are left out.
    pub fn take_lost(&mut self) -> Vec<(Span, Vec<K>)> {
        let lost = std::mem::take(&mut *lock(&self.dev.lost));
        lost.into_iter()
            .filter(|s| self.seg_seq.get(s.seg as usize) == Some(&s.seq))
            .map(|s| (s, self.seg_keys[s.seg as usize].clone()))
            .collect()
    }

    /// Seals the open buffer and asks the writer to sync once everything
    /// sealed so far is written. Returns the sync's number and the
    /// channel its answer comes on (awaited outside the store's lock):
    /// `Ok` means every record appended before this call is on the
    /// device, unless [`LogDev::failures`] moved meanwhile.
    pub fn request_sync(&mut self) -> (u64, oneshot::Receiver<Result<(), LogError>>) {
        self.seal(false);
        self.syncs += 1;
        let (tx, rx) = oneshot::channel();
        if self.jobs.send(Job::Sync(tx)).is_err() {
            self.dev.failed.store(true, Ordering::Release);
        }
        (self.syncs, rx)
    }

    /// The number the next [`LogState::request_sync`] will have: a record
    /// appended now is covered by that sync and every later one.
    pub fn next_sync(&self) -> u64 {
        self.syncs + 1
    }
}

/// Another writer's log on a shared device, read only. Nothing here
/// writes: [`PeerLog::refresh`] reads what the writer has added since the
/// last look, and [`PeerLog::dev`] reads records, with the same checks
/// as a log's own reads (a record overwritten since it was found fails
/// its sequence check and is a miss).
pub struct PeerLog {
    dev: Arc<LogDev>,
    /// Each segment's sequence at the last look (0: none).
    seg_seq: Vec<u64>,
    /// Each segment's offset scanned up to at that sequence.
    scanned: Vec<u64>,
    /// The newest sequence at the last look: only that segment (the
    /// writer's head then) and segments reused since can have new records,
    /// besides the ones still settling.
    newest: u64,
    /// Looks left for each segment the writer has moved on from: its last
    /// buffers may still be landing (the writer has several writes in
    /// flight, and they land in any order), so a scan that stopped at a
    /// gap goes on from there for [`SETTLE_LOOKS`] more looks.
    settle: Vec<u8>,
}

/// Looks during which a segment the writer moved on from is still scanned
/// from where its scan stopped (see `PeerLog::settle`): at one look a
/// second, longer than a pool write in flight takes to land or time out.
/// A look at a segment with nothing new costs one block read.
const SETTLE_LOOKS: u8 = 10;

impl PeerLog {
    /// The log on `dev` as another writer formatted it; `None` while it
    /// has no valid superblock (the writer has not started yet).
    ///
    /// # Errors
    ///
    /// An I/O error.
    pub async fn open(dev: Arc<dyn BlockDevice>) -> Result<Option<PeerLog>, LogError> {
        let probe = LogDev::read_only(dev.clone(), Super { log_id: 0, segment_bytes: 0, segments: 0 });
        let first = probe.read_at(0, BLOCK).await?;
        let size = dev.geometry().size_bytes();
        let Some(sb) = Super::decode(&first).filter(|s| BLOCK + s.segment_bytes * s.segments <= size) else {
            return Ok(None);
        };
        let n = sb.segments as usize;
        Ok(Some(PeerLog {
            dev: Arc::new(LogDev::read_only(dev, sb)),
            seg_seq: vec![0; n],
            scanned: vec![0; n],
            newest: 0,
            settle: vec![0; n],
        }))
    }

    /// The device side, for reads.
    pub fn dev(&self) -> &Arc<LogDev> {
        &self.dev
    }

    /// The records written since the last call, oldest first: segments
    /// reused since are scanned from their start, the others from where
    /// the last scan stopped. Costs one block read per segment plus the
    /// new records. `None` when the writer has formatted its log afresh
    /// since [`PeerLog::open`] (open it again; what it held is gone).
    ///
    /// A read that fails part way ends the look with what was found
    /// before it; the next look goes on from there.
    ///
    /// # Errors
    ///
    /// An I/O error before anything was found (the next call starts
    /// where this one could not).
    pub async fn refresh(&mut self) -> Result<Option<Vec<Found>>, LogError> {
        let sb = self.dev.sb;
        if Super::decode(&self.dev.read_at(0, BLOCK).await?) != Some(sb) {
            return Ok(None);
        }
        let mut now = Vec::with_capacity(self.seg_seq.len());
        for i in 0..sb.segments as u32 {
            let h = self.dev.read_at(sb.segment_start(i), BLOCK).await?;
            now.push(format::decode_segment_header(sb.log_id, &h).unwrap_or(0));
        }
        let mut order: Vec<u32> = (0..sb.segments as u32).filter(|&i| now[i as usize] != 0).collect();
        order.sort_by_key(|&i| now[i as usize]);
        let mut found = Vec::new();
        for i in order {
            let (seq, at) = (now[i as usize], i as usize);
            if self.seg_seq[at] == seq && seq < self.newest {
                if self.settle[at] == 0 {
                    continue;
                }
                self.settle[at] -= 1;
            } else {
                self.settle[at] = SETTLE_LOOKS;
            }
            if self.seg_seq[at] != seq {
                self.seg_seq[at] = seq;
                self.scanned[at] = BLOCK;
            }
            match scan_segment(&self.dev, i, seq, self.scanned[at], &mut found, Scan::Whole).await {
                Ok(end) => self.scanned[at] = end,
                // What this look found stays found: the scan positions
                // before this segment moved with it.
                Err(e) if found.is_empty() => return Err(e),
                Err(_) => return Ok(Some(found)),
            }
            self.newest = self.newest.max(seq);
        }
        Ok(Some(found))
    }
}

/// How much of each record a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Every byte, checking each record's CRC: a peer's log, whose
    /// records may still be landing (a record whose value has not landed
    /// yet fails its check, and the next look finds it once it has).
    Whole,
    /// The header and key of a record above [`SKIP_VALUES_ABOVE`] bytes
    /// that the scan has not read anyway, its value left unread and
    /// unchecked; smaller records are read and checked whole. For a
    /// restart of the log's own writer, when nothing is in flight: a drive
    /// of large blocks is scanned at one block per record rather than
    /// read end to end (a 4 TB drive of 1 MiB blocks: 16 GB, not 4 TB).
    /// A damaged value is found when it is read (a miss, counted as
    /// corrupt), as it is for damage that happens after the scan.
    Heads,
}

/// Records larger than this have their values skipped by [`Scan::Heads`].
const SKIP_VALUES_ABOVE: u64 = 64 << 10;

/// Segments a restart scans at once.
const SCANS_AT_ONCE: usize = 8;

/// Reads the records of segment `i` (sequence `seq`) into `found`,
/// starting at offset `from` (a record boundary, or [`BLOCK`] for the
/// first record); returns the offset after the last one.
async fn scan_segment(
    dev: &LogDev,
    i: u32,
    seq: u64,
    from: u64,
    found: &mut Vec<Found>,
    scan: Scan,
) -> Result<u64, LogError> {
    let seg = dev.sb.segment_bytes;
    let base = dev.sb.segment_start(i);
    // A window of the segment read at once; records outside it are read
    // with a window of their own. It starts at one block (a look that
    // finds nothing new reads no more) and doubles with each record.
    let mut win = (0u64, IoBuf::zeroed(0));
    let mut ahead = BLOCK;
    let mut pos = from.max(BLOCK);
    let mut retried = false;
    loop {
        if pos + format::REC_HEADER as u64 > seg {
            return Ok(pos);
        }
        let head = {
            let b = window(dev, base, seg, &mut win, pos, format::REC_HEADER as u64, ahead).await?;
            format::decode_record_head(b, seq, seg - pos)
        };
        let rec = match head {
            Some(h)
                if scan == Scan::Heads
                    && h.total() > SKIP_VALUES_ABOVE
                    && pos + h.total() > win.0 + win.1.len() as u64 =>
            {
                // Large and not read yet: its header and key only, and
                // the next window small again (the next record may be
                // large too).
                ahead = BLOCK;
                let key_end = (format::REC_HEADER + h.key_len) as u64;
                let b = window(dev, base, seg, &mut win, pos, key_end, ahead).await?;
                Some((h, Bytes::copy_from_slice(&b[format::REC_HEADER..key_end as usize]), None))
            }
            Some(h) => {
                ahead = (ahead * 2).min(WINDOW);
                let b = window(dev, base, seg, &mut win, pos, h.total(), ahead).await?;
                format::record_crc_ok(b)
                    .then(|| (h, Bytes::copy_from_slice(&b[format::REC_HEADER..format::REC_HEADER + h.key_len])))
                    .filter(|(h, _)| h.kind != Kind::Expiry || h.value_len == format::EXPIRY_VALUE_LEN as u64)
                    .map(|(h, key)| {
                        let value = &b[format::REC_HEADER + h.key_len..];
                        (h, key, format::decode_expiry_target(value).filter(|_| h.kind == Kind::Expiry))
                    })
            }
            None => None,
        };
        match rec {
            Some((h, key, applies_to)) => {
                let loc = Loc { seg: i, seq, off: pos, key_len: h.key_len as u32, value_len: h.value_len };
                found.push(Found { key, loc, head: h, applies_to });
                pos = format::align_up(pos + h.total(), 8);
                retried = false;
            }
            None if !retried && !pos.is_multiple_of(BLOCK) => {
                pos = format::align_up(pos, BLOCK);
                retried = true;
            }
            None => return Ok(pos),
        }
    }
}

/// The most of a segment a scan reads at once.
const WINDOW: u64 = 8 << 20;

/// The bytes `[pos, pos + len)` of a segment, from the window when it
/// holds them, else after reading a new window of at least `ahead` bytes
/// from `pos`.
async fn window<'w>(
    dev: &LogDev,
    base: u64,
    seg: u64,
    win: &'w mut (u64, IoBuf),
    pos: u64,
    len: u64,
    ahead: u64,
) -> Result<&'w [u8], LogError> {
    let have = pos >= win.0 && pos + len <= win.0 + win.1.len() as u64;
    if !have {
        let start = pos / BLOCK * BLOCK;
        let want = format::align_up(pos + len, BLOCK).max(start + ahead).min(seg) - start;
        win.1 = dev.read_at(base + start, want).await?;
        win.0 = start;
    }
    let at = (pos - win.0) as usize;
    Ok(&win.1[at..at + len as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_written_buffer_is_reused_cleared() {
        let dev = Arc::new(strata_block::MemDevice::new(4096, 1024));
        let sb = Super { log_id: 1, segment_bytes: 1 << 20, segments: 3 };
        let ldev = LogDev { wbuf: 64 << 10, ..LogDev::read_only(dev, sb) };
        let mut dirty = IoBuf::zeroed(64 << 10);
        dirty.as_mut_slice().fill(0xA5);
        dirty.set_len(8192);
        let ptr = dirty.as_slice().as_ptr();
        ldev.write_at(0, dirty).await.unwrap();
        // Another size is a new buffer, and is not kept once written; the
        // usual size is the written buffer again, whole and zeroed.
        let odd = ldev.zeroed_buf(32 << 10);
        assert_ne!(odd.as_slice().as_ptr(), ptr);
        ldev.write_at(0, odd).await.unwrap();
        assert_eq!(lock(&ldev.spare).len(), 1, "a buffer of another size was kept");
        let again = ldev.zeroed_buf(64 << 10);
        assert_eq!(again.as_slice().as_ptr(), ptr);
        assert_eq!(again.len(), 64 << 10);
        assert!(again.as_slice().iter().all(|&b| b == 0), "a reused buffer kept old bytes");
        // At most SPARE_BUFFERS are kept.
        for _ in 0..SPARE_BUFFERS + 3 {
            ldev.write_at(0, IoBuf::zeroed(64 << 10)).await.unwrap();
        }
        assert_eq!(lock(&ldev.spare).len(), SPARE_BUFFERS);
    }

    #[test]
    fn a_value_keeps_its_read_buffer_only_when_it_fills_most_of_it() {
        // 1 MiB of value in 1 MiB and two blocks: kept, not copied.
        let big = IoBuf::zeroed((1 << 20) + 8192);
        let at = big.as_slice().as_ptr() as usize;
        let v = value_of(big, 100..100 + (1 << 20));
        assert_eq!(v.as_ptr() as usize, at + 100);
        assert_eq!(v.len(), 1 << 20);
        // 4 KiB in two blocks: copied out, the buffer freed.
        let mut small = IoBuf::zeroed(8192);
        small.as_mut_slice()[200..4296].fill(7);
        let at = small.as_slice().as_ptr() as usize;
        let v = value_of(small, 200..4296);
        assert_ne!(v.as_ptr() as usize, at + 200);
        assert!(v.len() == 4096 && v.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_value_read_into_the_callers_region_stays_there_alone() {
        use crate::shm::region::Region;
        let region = Region::new(4 * 4096).unwrap();
        // A small value, which a heap buffer would copy out: here kept in
        // place, and the header and neighbours around it zeroed.
        let mut buf = region.alloc_io(8192).unwrap();
        buf.as_mut_slice().fill(0xaa);
        let v = value_of(buf, 200..4296);
        let at = region.mapping().offset_of(&v).expect("in the region");
        assert_eq!(at % 4096, 200, "read in place, not copied");
        assert!(v.len() == 4096 && v.iter().all(|&b| b == 0xaa));
        let mut around = vec![1; 8192];
        region.mapping().copy_out(at - 200, 8192, &mut around).unwrap();
        assert!(around[..200].iter().all(|&b| b == 0) && around[4296..].iter().all(|&b| b == 0));
        assert_eq!(region.used(), 8192);
        drop(v);
        assert_eq!(region.used(), 0, "the extent goes back with the value");
    }
}
