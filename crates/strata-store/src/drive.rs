//! One drive: its format, its extent table, its journal and its free list.
//!
//! A [`Drive`] owns the reverse map of its extents (who owns physical
//! extent `P`). Volumes own the forward maps. The drive keeps three lists:
//!
//! - `free`: extents that may be handed out now;
//! - `pending`: journal ops (set-owner, free) not yet committed;
//! - `freeing`: extents freed in memory whose free op is in `pending`,
//!   and extents taken for a write that was abandoned (its future
//!   dropped) while its I/O may still be in flight. They become `free`
//!   only when a later commit is durable: its first sync is a barrier
//!   that waits for every I/O submitted before it, so neither an old
//!   owner's data nor a late write can reach the extent's next owner.
//!
//! [`Drive::commit`] is the group commit: it snapshots `pending`, runs
//! fdatasync (making the data and zeroing under new mappings durable),
//! writes the journal blocks (or a checkpoint, when the ring is full) and
//! runs fdatasync again. See `docs/durability.md` for the protocol and its
//! crash analysis.
//!
//! # Cancellation
//!
//! A commit is shared work: it carries the journal ops of every writer,
//! not only of the caller that asked for it. So it never runs in a
//! caller's future. [`Drive::commit`] takes a ticket and, if no committer
//! task is running, spawns one; the task runs commits until every ticket
//! is covered, whatever happens to the callers. A caller that stops
//! waiting loses nothing but its answer. A committer that panics marks
//! the drive failed instead of leaving waiters hanging.
//!
//! Opening is synchronous and uses the backend's blocking calls, so it
//! works inside or outside a tokio runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use strata_block::{BlockError, IoBuf};

use crate::StoreError;
use crate::format::{
    BLOCK, CK_ENTRIES_OFFSET, CheckpointHeader, ENTRY_LEN, FormatError, JOURNAL_MAX_ENTRIES, JournalOp, JournalRead,
    Owner, SUPERBLOCK_COPIES, Superblock, checkpoint_crc, decode_entry, decode_journal_block, encode_entry,
    encode_journal_block, journal_block_seq,
};
use crate::io::Backend;

/// Entries per checkpoint I/O chunk: 24 * 512 bytes is a multiple of
/// [`BLOCK`], so every chunk but the last is block-aligned in length.
const CK_CHUNK_ENTRIES: usize = 512 * 85;

/// What backs a drive, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveClass {
    /// A regular file.
    File,
    /// A block device.
    BlockDevice,
    /// Volatile RAM.
    Mem,
}

impl DriveClass {
    /// Lower-case name: `file`, `block-device` or `mem`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DriveClass::File => "file",
            DriveClass::BlockDevice => "block-device",
            DriveClass::Mem => "mem",
        }
    }
}

struct AllocState {
    free: Vec<u64>,
    pending: Vec<JournalOp>,
    freeing: Vec<u64>,
    allocated: u64,
    /// Commit tickets handed out.
    requested: u64,
    /// A caller asked for a checkpoint that no commit has started yet.
    checkpoint_wanted: bool,
    /// A committer task is running (or about to).
    committer_running: bool,
}

/// What the committer publishes to waiting callers.
#[derive(Debug, Clone, Default)]
struct CommitProgress {
    /// Every ticket up to this one is covered by a durable commit.
    completed: u64,
    /// The commit that failed, as kind and message (the drive is failed).
    failed: Option<(std::io::ErrorKind, String)>,
}

struct CommitState {
    /// The reverse map as of the last durable commit.
    durable: Vec<Option<Owner>>,
    /// Seq of the next journal record.
    next_seq: u64,
    /// Seq of the newest checkpoint; replay starts after it.
    ckpt_seq: u64,
    /// Slot (0/1) holding the newest checkpoint.
    ckpt_slot: usize,
}

/// A drive after its metadata was read (or formatted), before the store
/// reconciles it with the other drives.
pub(crate) struct LoadedDrive {
    pub(crate) label: String,
    pub(crate) class: DriveClass,
    pub(crate) backend: Backend,
    pub(crate) sb: Superblock,
    /// The recovered reverse map; the store may free duplicate claims.
    pub(crate) table: Vec<Option<Owner>>,
    /// The newest journal seq on the disk: the last one replayed, or a
    /// later one of a valid record the replay did not reach.
    last_seq: u64,
    ckpt_slot: usize,
}

/// A drive in service. Shared as `Arc<Drive>` so that its committer task
/// can outlive any caller.
pub(crate) struct Drive {
    pub(crate) label: String,
    pub(crate) class: DriveClass,
    pub(crate) backend: Backend,
    pub(crate) sb: Superblock,
    state: Mutex<AllocState>,
    /// Held by the committer task only.
    commit: tokio::sync::Mutex<CommitState>,
    progress: tokio::sync::watch::Sender<CommitProgress>,
    failed: AtomicBool,
}

fn random_uuid() -> Result<[u8; 16], StoreError> {
    let mut u = [0u8; 16];
    getrandom::fill(&mut u).map_err(|e| StoreError::io("getrandom", "read random drive uuid", e.into()))?;
    Ok(u)
}

fn fmt_err(label: &str, what: &'static str, e: FormatError) -> StoreError {
    match e {
        FormatError::UnsupportedVersion { found } => StoreError::UnsupportedVersion {
            path: label.to_owned(),
            what,
            found,
            supported: crate::format::FORMAT_VERSION,
        },
        e => StoreError::corrupt(label, format!("{what}: {e}")),
    }
}

/// Writes a checkpoint of `table` with `seq` into slot `slot`: entries
/// first, header last, so a torn checkpoint fails its crc. `write` does
/// one block-aligned write.
fn checkpoint_chunks(
    table: &[Option<Owner>],
    sb: &Superblock,
    seq: u64,
    slot: usize,
) -> (Vec<(u64, usize, usize)>, IoBuf) {
    let mut crc_scratch = [0u8; ENTRY_LEN];
    let mut header = IoBuf::zeroed(BLOCK);
    CheckpointHeader::encode(&mut header, &sb.uuid, seq, sb.extent_count, |mut c| {
        for o in table {
            encode_entry(&mut crc_scratch, *o);
            c = checkpoint_crc(c, &crc_scratch);
        }
        c
    });
    let base = sb.ckpt_slot_offset(slot) + CK_ENTRIES_OFFSET;
    let chunks = (0..table.len())
        .step_by(CK_CHUNK_ENTRIES)
        .map(|first| {
            let n = CK_CHUNK_ENTRIES.min(table.len() - first);
            (base + (first * ENTRY_LEN) as u64, first, n)
        })
        .collect();
    (chunks, header)
}

fn encode_chunk(table: &[Option<Owner>], first: usize, n: usize) -> IoBuf {
    let len = (n * ENTRY_LEN).div_ceil(BLOCK) * BLOCK;
    let mut buf = IoBuf::zeroed(len);
    for (i, o) in table[first..first + n].iter().enumerate() {
        encode_entry(&mut buf[i * ENTRY_LEN..], *o);
    }
    buf
}

/// A checkpoint read back: its seq and the reverse map.
type LoadedCheckpoint = (u64, Vec<Option<Owner>>);

fn apply(table: &mut [Option<Owner>], op: &JournalOp) {
    // Extents were range-checked on decode (replay) or come from our own
    // free list (run time), so indexing is in bounds.
    match *op {
        JournalOp::Set { extent, owner } => table[extent as usize] = Some(owner),
        JournalOp::Free { extent } => table[extent as usize] = None,
    }
}

impl LoadedDrive {
    /// Reads the superblock, formatting a blank drive; loads the newest
    /// valid checkpoint and replays the journal.
    pub(crate) fn load(
        label: String,
        class: DriveClass,
        backend: Backend,
        capacity: u64,
        extent_size: u32,
        force_format: bool,
    ) -> Result<LoadedDrive, StoreError> {
        let io = |op, e| StoreError::io(&label, op, e);
        let mut head = IoBuf::zeroed(2 * BLOCK);
        if capacity >= 2 * BLOCK as u64 {
            backend.read_sync(0, &mut head).map_err(|e| io("read superblock", e))?;
        }
        let copies = [&head[..BLOCK], &head[BLOCK..]];
        let any_magic = copies.iter().any(|c| Superblock::has_magic(c));
        let sb = if !any_magic {
            if head[..BLOCK].iter().any(|&b| b != 0) && !force_format {
                return Err(StoreError::NotStrataDrive { path: label });
            }
            None
        } else {
            let decoded: Vec<_> = copies.iter().map(|c| Superblock::decode(c)).collect();
            match decoded.iter().find_map(|d| d.as_ref().ok()) {
                Some(sb) => {
                    if decoded[0].is_err() {
                        tracing::warn!(drive = %label, error = ?decoded[0], "superblock copy 0 is damaged; repairing it from copy 1");
                        let mut b = IoBuf::zeroed(BLOCK);
                        sb.encode(&mut b);
                        backend.write_sync(SUPERBLOCK_COPIES[0], &b).map_err(|e| io("repair superblock", e))?;
                        backend.sync_sync().map_err(|e| io("fdatasync", e))?;
                    }
                    Some(*sb)
                }
                None if force_format => None,
                None => {
                    if let Some(Err(FormatError::UnsupportedVersion { found })) =
                        decoded.iter().find(|d| matches!(d, Err(FormatError::UnsupportedVersion { .. })))
                    {
                        return Err(fmt_err(&label, "superblock", FormatError::UnsupportedVersion { found: *found }));
                    }
                    let detail = format!(
                        "both superblock copies are invalid (copy 0: {}; copy 1: {})",
                        decoded[0].as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
                        decoded[1].as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
                    );
                    return Err(StoreError::corrupt(&label, detail));
                }
            }
        };
        match sb {
            None => Self::format(label, class, backend, capacity, extent_size),
            Some(sb) => {
                if sb.extent_size != extent_size {
                    return Err(StoreError::ExtentSizeMismatch {
                        path: label,
                        on_disk: sb.extent_size,
                        configured: extent_size,
                    });
                }
                if sb.capacity > capacity {
                    return Err(StoreError::TooSmall {
                        path: label,
                        actual: capacity,
                        needed: sb.capacity,
                        why: "its superblock records a larger drive (truncated file?)",
                    });
                }
                Self::recover(label, class, backend, sb)
            }
        }
    }

    fn format(
        label: String,
        class: DriveClass,
        backend: Backend,
        capacity: u64,
        extent_size: u32,
    ) -> Result<LoadedDrive, StoreError> {
        let sb = Superblock::layout(random_uuid()?, capacity, extent_size).map_err(|t| StoreError::TooSmall {
            path: label.clone(),
            actual: capacity,
            needed: t.needed,
            why: "the format needs room for its metadata and one extent",
        })?;
        tracing::info!(drive = %label, capacity, extent_size, extents = sb.extent_count, "formatting drive");
        let io = |op, e| StoreError::io(&label, op, e);
        let table = vec![None; sb.extent_count as usize];
        // Checkpoint A (seq 0, all free), then a blank header in slot B,
        // then the superblocks last: until they are durable the drive
        // still reads as blank and will be formatted again.
        write_checkpoint_sync(&backend, &sb, &table, 0, 0).map_err(|e| io("write checkpoint", e))?;
        backend.write_sync(sb.ckpt_slot_offset(1), &IoBuf::zeroed(BLOCK)).map_err(|e| io("write checkpoint", e))?;
        backend.sync_sync().map_err(|e| io("fdatasync", e))?;
        let mut b = IoBuf::zeroed(BLOCK);
        sb.encode(&mut b);
        for off in SUPERBLOCK_COPIES {
            backend.write_sync(off, &b).map_err(|e| io("write superblock", e))?;
        }
        backend.sync_sync().map_err(|e| io("fdatasync", e))?;
        Ok(LoadedDrive { label, class, backend, sb, table, last_seq: 0, ckpt_slot: 0 })
    }

    fn read_checkpoint(
        backend: &Backend,
        sb: &Superblock,
        slot: usize,
    ) -> std::io::Result<Result<LoadedCheckpoint, FormatError>> {
        let mut h = IoBuf::zeroed(BLOCK);
        backend.read_sync(sb.ckpt_slot_offset(slot), &mut h)?;
        let hdr = match CheckpointHeader::decode(&h, &sb.uuid, sb.extent_count) {
            Ok(hdr) => hdr,
            Err(e) => return Ok(Err(e)),
        };
        let mut crc = CheckpointHeader::crc_seed(&h);
        let n = sb.extent_count as usize;
        let mut table = Vec::with_capacity(n);
        let base = sb.ckpt_slot_offset(slot) + CK_ENTRIES_OFFSET;
        for first in (0..n).step_by(CK_CHUNK_ENTRIES) {
            let cnt = CK_CHUNK_ENTRIES.min(n - first);
            let mut buf = IoBuf::zeroed((cnt * ENTRY_LEN).div_ceil(BLOCK) * BLOCK);
            backend.read_sync(base + (first * ENTRY_LEN) as u64, &mut buf)?;
            let bytes = &buf[..cnt * ENTRY_LEN];
            crc = checkpoint_crc(crc, bytes);
            for e in bytes.chunks_exact(ENTRY_LEN) {
                match decode_entry(e) {
                    Ok(o) => table.push(o),
                    Err(e) => return Ok(Err(e)),
                }
            }
        }
        if crc != hdr.crc {
            return Ok(Err(FormatError::BadCrc { stored: hdr.crc, computed: crc }));
        }
        Ok(Ok((hdr.seq, table)))
    }

    fn recover(label: String, class: DriveClass, backend: Backend, sb: Superblock) -> Result<LoadedDrive, StoreError> {
        let io = |op, e| StoreError::io(&label, op, e);
        let a = Self::read_checkpoint(&backend, &sb, 0).map_err(|e| io("read checkpoint", e))?;
        let b = Self::read_checkpoint(&backend, &sb, 1).map_err(|e| io("read checkpoint", e))?;
        let (slot, (seq, mut table)) = match (a, b) {
            (Ok(a), Ok(b)) => {
                if b.0 > a.0 {
                    (1, b)
                } else {
                    (0, a)
                }
            }
            (Ok(a), Err(_)) => (0, a),
            (Err(_), Ok(b)) => (1, b),
            (Err(ea), Err(eb)) => {
                for e in [&ea, &eb] {
                    if let FormatError::UnsupportedVersion { found } = e {
                        return Err(fmt_err(&label, "checkpoint", FormatError::UnsupportedVersion { found: *found }));
                    }
                }
                return Err(StoreError::corrupt(
                    &label,
                    format!("no valid extent-table checkpoint (slot A: {ea}; slot B: {eb})"),
                ));
            }
        };
        // Replay: read the whole ring once, then follow consecutive seqs.
        let mut ring = IoBuf::zeroed(sb.journal_blocks as usize * BLOCK);
        backend.read_sync(sb.journal_offset, &mut ring).map_err(|e| io("read journal", e))?;
        let mut last = seq;
        let mut replayed = 0u64;
        loop {
            let next = last + 1;
            let idx = (next % sb.journal_blocks) as usize;
            let block = &ring[idx * BLOCK..(idx + 1) * BLOCK];
            match decode_journal_block(block, &sb.uuid, next, sb.extent_count) {
                Ok(JournalRead::Record(ops)) => {
                    for op in &ops {
                        apply(&mut table, op);
                    }
                    last = next;
                    replayed += 1;
                    if replayed >= sb.journal_blocks {
                        break;
                    }
                }
                Ok(JournalRead::End(why)) => {
                    tracing::debug!(drive = %label, seq = next, why, "journal replay ends");
                    break;
                }
                Err(e) => return Err(fmt_err(&label, "journal", e)),
            }
        }
        // The newest seq on the disk may lie past the replay: when the
        // newest checkpoint is damaged, replay starts at the older one and
        // stops before the records that followed the lost one. The next
        // seqs must pass those too, or a later replay would take them up
        // again (and map extents given away since to their old owners).
        let newest = ring
            .chunks_exact(BLOCK)
            .filter_map(|b| journal_block_seq(b, &sb.uuid))
            .filter(|&s| s <= crate::format::MAX_SEQ)
            .max()
            .unwrap_or(0)
            .max(last);
        tracing::info!(drive = %label, checkpoint_seq = seq, replayed, newest_seq = newest, "drive recovered");
        Ok(LoadedDrive { label, class, backend, sb, table, last_seq: newest, ckpt_slot: slot })
    }

    /// Puts the drive in service: writes the (possibly reconciled) table as
    /// a new checkpoint in the other slot, so that the journal restarts
    /// past every record on disk, and builds the free list.
    pub(crate) fn into_drive(self) -> Result<Drive, StoreError> {
        let LoadedDrive { label, class, backend, sb, table, last_seq, ckpt_slot, .. } = self;
        // Every record ever written has seq <= (checkpoint seq it followed)
        // + journal_blocks <= last_seq + journal_blocks, so jumping past
        // that makes stale records unreachable by the next replay.
        let seq = last_seq + sb.journal_blocks + 1;
        let slot = 1 - ckpt_slot;
        write_checkpoint_sync(&backend, &sb, &table, seq, slot)
            .map_err(|e| StoreError::io(&label, "write checkpoint", e))?;
        backend.sync_sync().map_err(|e| StoreError::io(&label, "fdatasync", e))?;
        let free: Vec<u64> = (0..table.len() as u64).rev().filter(|&p| table[p as usize].is_none()).collect();
        let allocated = table.len() as u64 - free.len() as u64;
        Ok(Drive {
            label,
            class,
            backend,
            sb,
            state: Mutex::new(AllocState {
                free,
                pending: Vec::new(),
                freeing: Vec::new(),
                allocated,
                requested: 0,
                checkpoint_wanted: false,
                committer_running: false,
            }),
            commit: tokio::sync::Mutex::new(CommitState {
                durable: table,
                next_seq: seq + 1,
                ckpt_seq: seq,
                ckpt_slot: slot,
            }),
            progress: tokio::sync::watch::Sender::new(CommitProgress::default()),
            failed: AtomicBool::new(false),
        })
    }
}

fn write_checkpoint_sync(
    backend: &Backend,
    sb: &Superblock,
    table: &[Option<Owner>],
    seq: u64,
    slot: usize,
) -> std::io::Result<()> {
    let (chunks, header) = checkpoint_chunks(table, sb, seq, slot);
    for (off, first, n) in chunks {
        backend.write_sync(off, &encode_chunk(table, first, n))?;
    }
    backend.sync_sync()?;
    backend.write_sync(sb.ckpt_slot_offset(slot), &header)
}

/// Extent counts of one drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DriveCounts {
    pub(crate) free: u64,
    pub(crate) freeing: u64,
    pub(crate) allocated: u64,
}

impl Drive {
    fn lock(&self) -> std::sync::MutexGuard<'_, AllocState> {
        // The state is a set of lists updated with single pushes/pops; a
        // panic elsewhere cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True once a commit failed; the drive takes no new allocations and
    /// its commits fail.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(crate) fn counts(&self) -> DriveCounts {
        let st = self.lock();
        DriveCounts { free: st.free.len() as u64, freeing: st.freeing.len() as u64, allocated: st.allocated }
    }

    /// Takes a free extent, if any.
    pub(crate) fn take_free(&self) -> Option<u64> {
        if self.is_failed() {
            return None;
        }
        self.lock().free.pop()
    }

    /// Gives back an extent taken with [`Drive::take_free`] but never
    /// installed, when no I/O to it can be in flight (none was issued, or
    /// it completed).
    pub(crate) fn untake(&self, p: u64) {
        self.lock().free.push(p);
    }

    /// Gives back an extent taken with [`Drive::take_free`] whose write or
    /// zeroing may still be in flight (its future was dropped): it is
    /// reused only after the next commit, whose first sync waits for that
    /// I/O.
    pub(crate) fn untake_after_io(&self, p: u64) {
        self.lock().freeing.push(p);
    }

    /// Records that `p` now belongs to `owner` (durable at the next commit).
    /// The caller has already made `p` read as zeros or hold the owner's data.
    pub(crate) fn install(&self, p: u64, owner: Owner) {
        let mut st = self.lock();
        st.pending.push(JournalOp::Set { extent: p, owner });
        st.allocated += 1;
    }

    /// Records that `p` is free. It is reused only after the commit that
    /// records this is durable. The caller guarantees no I/O to `p` is in
    /// flight or can start (it holds the owning volume's write guard).
    pub(crate) fn release(&self, p: u64) {
        let mut st = self.lock();
        st.pending.push(JournalOp::Free { extent: p });
        st.freeing.push(p);
        st.allocated = st.allocated.saturating_sub(1);
    }

    pub(crate) fn has_freeing(&self) -> bool {
        !self.lock().freeing.is_empty()
    }

    /// Group commit; with `checkpoint`, also folds everything into a new
    /// checkpoint so the next open replays nothing. Returns once a commit
    /// that started after this call is durable. Must be called within a
    /// tokio runtime (the commit runs on a task of its own).
    ///
    /// # Errors
    ///
    /// [`BlockError::Io`] when a sync or journal write fails (the drive
    /// then turns failed), [`BlockError::Failed`] afterwards.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the commit runs on the committer task; dropping this
    /// future only stops waiting for it.
    pub(crate) async fn commit(self: &Arc<Self>, checkpoint: bool) -> Result<(), BlockError> {
        let mut progress = self.progress.subscribe();
        let ticket = {
            let mut st = self.lock();
            if self.is_failed() {
                return Err(BlockError::Failed);
            }
            st.requested += 1;
            st.checkpoint_wanted |= checkpoint;
            if !st.committer_running {
                st.committer_running = true;
                tokio::spawn(self.clone().run_commits());
            }
            st.requested
        };
        let p = progress
            .wait_for(|p| p.completed >= ticket || p.failed.is_some())
            .await
            .map(|p| p.clone())
            .unwrap_or_default();
        match p.failed {
            _ if p.completed >= ticket => Ok(()),
            Some((kind, msg)) => Err(BlockError::Io(std::io::Error::new(kind, msg))),
            None => Err(BlockError::Failed),
        }
    }

    /// The committer: commits until every ticket handed out is covered,
    /// then exits (a later [`Drive::commit`] spawns it again).
    async fn run_commits(self: Arc<Self>) {
        /// Marks the drive failed if the committer unwinds, so that
        /// waiters get an error instead of waiting forever.
        struct OnPanic<'a>(&'a Drive);
        impl Drop for OnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.fail_commits(std::io::Error::other("the commit task panicked"));
                }
            }
        }
        let _guard = OnPanic(&self);
        let mut cs = self.commit.lock().await;
        loop {
            let (upto, ops, freeing, checkpoint) = {
                let mut st = self.lock();
                if self.progress.borrow().completed >= st.requested && !st.checkpoint_wanted {
                    st.committer_running = false;
                    return;
                }
                let checkpoint = std::mem::take(&mut st.checkpoint_wanted);
                (st.requested, std::mem::take(&mut st.pending), std::mem::take(&mut st.freeing), checkpoint)
            };
            match self.commit_locked(&mut cs, &ops, checkpoint).await {
                Ok(()) => {
                    self.lock().free.extend(freeing);
                    self.progress.send_modify(|p| p.completed = p.completed.max(upto));
                }
                Err(e) => {
                    tracing::error!(drive = %self.label, error = %e, "commit failed; drive refuses writes until restart");
                    self.fail_commits(e);
                    return;
                }
            }
        }
    }

    /// Turns the drive failed and tells every waiter.
    fn fail_commits(&self, e: std::io::Error) {
        self.failed.store(true, Ordering::Release);
        self.lock().committer_running = false;
        self.progress.send_modify(|p| {
            p.failed.get_or_insert((e.kind(), e.to_string()));
        });
    }

    async fn commit_locked(&self, cs: &mut CommitState, ops: &[JournalOp], checkpoint: bool) -> std::io::Result<()> {
        // Data and zeroing under the new mappings become durable first.
        self.backend.sync().await?;
        if ops.is_empty() && !checkpoint {
            return Ok(());
        }
        for op in ops {
            apply(&mut cs.durable, op);
        }
        let blocks = ops.len().div_ceil(JOURNAL_MAX_ENTRIES) as u64;
        let used = cs.next_seq - 1 - cs.ckpt_seq;
        if checkpoint || used + blocks > self.sb.journal_blocks {
            let seq = cs.next_seq;
            let slot = 1 - cs.ckpt_slot;
            self.write_checkpoint(&cs.durable, seq, slot).await?;
            cs.next_seq = seq + 1;
            cs.ckpt_seq = seq;
            cs.ckpt_slot = slot;
            return Ok(());
        }
        let mut block = IoBuf::zeroed(BLOCK);
        for chunk in ops.chunks(JOURNAL_MAX_ENTRIES) {
            encode_journal_block(&mut block, &self.sb.uuid, cs.next_seq, chunk);
            let (b, r) = self.backend.write(self.sb.journal_block_offset(cs.next_seq), block).await;
            r?;
            block = b;
            cs.next_seq += 1;
        }
        self.backend.sync().await
    }

    async fn write_checkpoint(&self, table: &[Option<Owner>], seq: u64, slot: usize) -> std::io::Result<()> {
        let (chunks, header) = checkpoint_chunks(table, &self.sb, seq, slot);
        for (off, first, n) in chunks {
            let (_, r) = self.backend.write(off, encode_chunk(table, first, n)).await;
            r?;
        }
        self.backend.sync().await?;
        let (_, r) = self.backend.write(self.sb.ckpt_slot_offset(slot), header).await;
        r?;
        self.backend.sync().await
    }

    /// Byte offset on the drive of `off` within extent `p`.
    pub(crate) fn offset(&self, p: u64, off: u64) -> u64 {
        self.sb.extent_offset(p) + off
    }
}
