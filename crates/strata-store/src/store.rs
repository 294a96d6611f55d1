//! [`Store`]: one node's drives pooled into thin volumes.
//!
//! The store keeps no volume records: the metadata store above supplies
//! each volume's id and size when it opens it. At open the store scans the
//! reverse maps of all drives and rebuilds every volume's forward map in
//! memory; extents that belong to volumes nobody opens stay allocated until
//! [`Store::retain_volumes`] or [`Store::delete_volume`] frees them.
//!
//! When two extents claim the same `(volume, logical extent)` after a crash
//! (a free committed on one drive, the re-allocation on another), the
//! higher allocation generation wins and the loser is freed.
//!
//! # Locks
//!
//! The crate's locks, in the order they may be taken (a holder of one
//! takes only those below it, and no std lock is held across an await):
//!
//! 1. `Store::registry` (std mutex): open volumes and recovered maps;
//! 2. `Volume::map` (tokio `RwLock`): data I/O reads, unmapping writes;
//! 3. forward-map slot claims (a CAS per logical extent, taken in
//!    ascending extent order, see `volume.rs`);
//! 4. `Drive::commit` (tokio mutex), held only by the drive's committer
//!    task;
//! 5. `Drive::state` (std mutex): free list, pending journal ops, commit
//!    tickets. A leaf: nothing is taken under it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::drive::{DriveClass, LoadedDrive};
use crate::io::{Backend, Engine, MemDisk, ZeroMethod};
use crate::shared::Shared;
use crate::volume::{Volume, decode_entry, encode_entry};
use crate::{DriveKind, DriveSpec, StoreConfig, StoreError};

/// The most extents one volume may have: its extent map lives in memory
/// (8 bytes an extent), so this bounds what opening one volume costs:
/// 2 GiB of map, 256 TiB of volume at the default 1 MiB extent. Well
/// below the 2^32 extents the on-disk format could address.
pub const MAX_VOLUME_EXTENTS: u64 = 1 << 28;

/// Space accounting of one drive.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriveStats {
    /// The drive's path, or `mem:SIZE`.
    pub path: String,
    /// `file`, `block-device` or `mem`.
    pub kind: &'static str,
    /// I/O path: `io_uring`, `thread` or `memory`.
    pub engine: &'static str,
    /// Bytes the format uses.
    pub capacity_bytes: u64,
    /// Extents in the data region.
    pub extents_total: u64,
    /// Extents owned by volumes.
    pub extents_allocated: u64,
    /// Extents ready to allocate.
    pub extents_free: u64,
    /// Extents freed but not yet reusable (waiting for a commit).
    pub extents_pending_free: u64,
    /// True for RAM drives: contents are lost on exit.
    pub volatile: bool,
    /// True after a commit failed; restart to recover.
    pub failed: bool,
}

/// Space accounting of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Extent size in bytes.
    pub extent_size: u32,
    /// Per drive, in configuration order.
    pub drives: Vec<DriveStats>,
    /// Sum of drive capacities.
    pub capacity_bytes: u64,
    /// Sum of extents.
    pub extents_total: u64,
    /// Sum of allocated extents.
    pub extents_allocated: u64,
    /// Sum of free extents (ready plus pending).
    pub extents_free: u64,
    /// True if any drive is volatile.
    pub volatile: bool,
}

/// One node's drives, pooled. Shared as `Arc<Store>`.
pub struct Store {
    shared: Arc<Shared>,
    registry: Mutex<Registry>,
}

/// The volumes a store knows. One lock for both maps, so that no code
/// path can take them in two orders.
#[derive(Default)]
struct Registry {
    open: HashMap<u64, Arc<Volume>>,
    /// Forward maps recovered at open for volumes not opened yet:
    /// volume id -> (logical extent, map entry).
    recovered: HashMap<u64, Vec<(u32, u64)>>,
}

impl Registry {
    /// Ids of volumes that are open or have extents, sorted.
    fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.recovered.keys().chain(self.open.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("drives", &self.shared.drives.len()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Maps updated by single insert/remove calls; poison carries no
    // half-done state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens a drive file or device, with `O_DIRECT` unless refused and
/// allowed to fall back. Returns the file and whether it is direct.
pub(crate) fn open_direct(path: &Path, create: bool, allow_buffered: bool) -> Result<File, StoreError> {
    let label = path.display().to_string();
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(create);
    match o.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            if !allow_buffered {
                return Err(StoreError::DirectIoUnsupported { path: path.to_owned() });
            }
            tracing::warn!(drive = %label, "O_DIRECT is not supported here; using buffered I/O with fdatasync (allow_buffered)");
            o.open(path).map_err(|e| StoreError::io(&label, "open", e))
        }
        Err(e) => Err(StoreError::io(&label, "open", e)),
    }
}

fn open_backend(spec: &DriveSpec, cfg: &StoreConfig) -> Result<(String, DriveClass, Backend, u64), StoreError> {
    let label = spec.label();
    match &spec.kind {
        DriveKind::Mem { size } => {
            tracing::warn!(drive = %label, "mem drive is VOLATILE: its contents are lost when the process exits");
            Ok((label, DriveClass::Mem, Backend::Mem(MemDisk::new(*size)), *size))
        }
        DriveKind::File { path, size } => {
            let exists = path.exists();
            if !exists && size.is_none() {
                return Err(StoreError::BadDriveSpec {
                    spec: label,
                    reason: "the file does not exist and no size was given".into(),
                });
            }
            let file = open_direct(path, !exists, cfg.allow_buffered)?;
            lock_drive(&file, &label)?;
            let mut len = file.metadata().map_err(|e| StoreError::io(&label, "stat", e))?.len();
            if let Some(size) = size {
                if len == 0 {
                    file.set_len(*size).map_err(|e| StoreError::io(&label, "set_len", e))?;
                    len = *size;
                } else if len != *size {
                    tracing::warn!(drive = %label, file_bytes = len, requested = size, "existing drive file keeps its size");
                }
            }
            probe_direct(&file, path, len)?;
            start_engine(label, DriveClass::File, file, ZeroMethod::PunchHole, len, cfg)
        }
        DriveKind::BlockDevice { path } => {
            let file = open_direct(path, false, cfg.allow_buffered)?;
            let is_blk = file.metadata().map(|m| m.file_type().is_block_device()).unwrap_or(false);
            if !is_blk {
                return Err(StoreError::BadDriveSpec { spec: label, reason: "not a block device".into() });
            }
            lock_drive(&file, &label)?;
            let len = crate::sys::block_device_size(&file).map_err(|e| StoreError::io(&label, "BLKGETSIZE64", e))?;
            start_engine(label, DriveClass::BlockDevice, file, ZeroMethod::BlkZeroOut, len, cfg)
        }
    }
}

/// How long a drive lock held by someone else is waited for. A process
/// killed with SIGKILL releases its lock only when the kernel has torn
/// down its io_uring, which happens asynchronously after the process is
/// gone; a restart right after a kill -9 must not fail because of that.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) fn lock_drive(file: &File, label: &str) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::BadConfig(format!(
                    "drive {label} is in use by another process (or listed twice)"
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::io(label, "lock", e)),
        }
    }
}

/// Some file systems accept `O_DIRECT` at open and refuse it at I/O time.
pub(crate) fn probe_direct(file: &File, path: &Path, len: u64) -> Result<(), StoreError> {
    use std::os::unix::fs::FileExt;
    if len < crate::format::BLOCK as u64 {
        return Ok(());
    }
    let mut b = strata_block::IoBuf::zeroed(crate::format::BLOCK);
    match file.read_exact_at(&mut b, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Err(StoreError::DirectIoUnsupported { path: path.to_owned() })
        }
        Err(e) => Err(StoreError::io(&path.display().to_string(), "read", e)),
        Ok(()) => Ok(()),
    }
}

fn start_engine(
    label: String,
    class: DriveClass,
    file: File,
    zero: ZeroMethod,
    len: u64,
    cfg: &StoreConfig,
) -> Result<(String, DriveClass, Backend, u64), StoreError> {
    let engine = Engine::start(Arc::new(file), zero, &label, cfg.use_io_uring)
        .map_err(|e| StoreError::io(&label, "start I/O thread", e))?;
    Ok((label, class, Backend::Engine(engine), len))
}

impl Store {
    /// Opens the store: formats blank drives, recovers formatted ones
    /// (newest checkpoint plus journal replay) and rebuilds the forward
    /// maps. Works inside or outside a tokio runtime; I/O at run time needs
    /// one.
    ///
    /// # Errors
    ///
    /// A bad configuration, a drive that cannot be opened, a drive with
    /// foreign data (see [`StoreConfig::force_format`]), a different extent
    /// size or an unknown format version, or corruption with no valid copy
    /// left. Each error names the drive.
    pub fn open(cfg: StoreConfig) -> Result<Arc<Store>, StoreError> {
        cfg.validate()?;
        let mut loaded = Vec::with_capacity(cfg.drives.len());
        for spec in &cfg.drives {
            let (label, class, backend, capacity) = open_backend(spec, &cfg)?;
            loaded.push(LoadedDrive::load(label, class, backend, capacity, cfg.extent_size, cfg.force_format)?);
        }
        Self::open_loaded(loaded)
    }

    /// Opens over already-loaded drives (tests pass simulated disks here).
    pub(crate) fn open_loaded(mut loaded: Vec<LoadedDrive>) -> Result<Arc<Store>, StoreError> {
        if loaded.len() > u16::MAX as usize - 1 {
            return Err(StoreError::BadConfig(format!("{} drives; at most 65534 are supported", loaded.len())));
        }
        let extent_size = loaded.first().map(|d| d.sb.extent_size).unwrap_or(crate::DEFAULT_EXTENT_SIZE);
        // Reconcile duplicate claims across drives: highest generation wins.
        let mut claims: HashMap<(u64, u32), (u64, usize, u64)> = HashMap::new();
        let mut losers = Vec::new();
        let mut max_gen = 0u64;
        for (d, ld) in loaded.iter().enumerate() {
            for (p, o) in ld.table.iter().enumerate() {
                let Some(o) = o else { continue };
                max_gen = max_gen.max(o.generation);
                let cand = (o.generation, d, p as u64);
                match claims.get_mut(&(o.volume, o.lext)) {
                    None => {
                        claims.insert((o.volume, o.lext), cand);
                    }
                    Some(cur) => {
                        if cand.0 > cur.0 {
                            losers.push((cur.1, cur.2));
                            *cur = cand;
                        } else {
                            losers.push((d, p as u64));
                        }
                    }
                }
            }
        }
        for (d, p) in losers {
            tracing::warn!(drive = %loaded[d].label, extent = p, "freeing an extent superseded by a newer allocation");
            loaded[d].table[p as usize] = None;
        }
        let mut recovered: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
        for ((vol, lext), (_, d, p)) in claims {
            recovered.entry(vol).or_default().push((lext, encode_entry(d, p)));
        }
        let drives = loaded.into_iter().map(|d| d.into_drive().map(Arc::new)).collect::<Result<Vec<_>, _>>()?;
        let shared = Arc::new(Shared::new(drives, extent_size, max_gen + 1));
        let registry = Mutex::new(Registry { open: HashMap::new(), recovered });
        Ok(Arc::new(Store { shared, registry }))
    }

    #[cfg(test)]
    pub(crate) fn shared_superblock(&self, drive: usize) -> crate::format::Superblock {
        self.shared.drives[drive].sb
    }

    /// Extent size in bytes.
    pub fn extent_size(&self) -> u32 {
        self.shared.extent_size
    }

    /// The largest volume this store opens: [`MAX_VOLUME_EXTENTS`]
    /// extents.
    pub fn max_volume_bytes(&self) -> u64 {
        MAX_VOLUME_EXTENTS * u64::from(self.shared.extent_size)
    }

    /// Opens volume `id` with `size_bytes` (a multiple of `block_size`,
    /// which is 512 or 4096). Its extents are those recovered for `id`;
    /// any beyond `size_bytes` are freed. Opening an open volume again
    /// with the same geometry returns the same volume.
    ///
    /// # Errors
    ///
    /// [`StoreError::BadVolume`] for a bad block size or size, or when the
    /// volume is open with another geometry.
    pub fn open_volume(&self, id: u64, size_bytes: u64, block_size: u32) -> Result<Arc<Volume>, StoreError> {
        let bad = |reason: String| StoreError::BadVolume { id, reason };
        if block_size != 512 && block_size != 4096 {
            return Err(bad(format!("block size {block_size} is not 512 or 4096")));
        }
        if !size_bytes.is_multiple_of(u64::from(block_size)) {
            return Err(bad(format!("size {size_bytes} is not a multiple of the block size {block_size}")));
        }
        let e = self.shared.extent_size();
        let n_ext =
            usize::try_from(size_bytes.div_ceil(e)).map_err(|_| bad(format!("size {size_bytes} is too large")))?;
        if n_ext as u64 > MAX_VOLUME_EXTENTS {
            return Err(bad(format!(
                "size {size_bytes} is more than this store's largest volume, {} ({MAX_VOLUME_EXTENTS} extents of \
                 {e} bytes: a volume's extent map is held in memory, 8 bytes an extent)",
                self.max_volume_bytes()
            )));
        }
        let mut reg = lock(&self.registry);
        if let Some(v) = reg.open.get(&id) {
            use strata_block::BlockDevice;
            let g = v.geometry();
            if g.block_size == block_size && g.size_bytes() == size_bytes {
                return Ok(v.clone());
            }
            return Err(bad(format!("already open with {} bytes of {}-byte blocks", g.size_bytes(), g.block_size)));
        }
        let entries = reg.recovered.remove(&id).unwrap_or_default();
        let map: Vec<AtomicU64> = (0..n_ext).map(|_| AtomicU64::new(0)).collect();
        for (lext, entry) in entries {
            match map.get(lext as usize) {
                Some(slot) => slot.store(entry, Ordering::Relaxed),
                None => {
                    // Past the end: the volume shrank before a crash, or
                    // the caller's size is smaller. No I/O can target it.
                    if let Some((d, p)) = decode_entry(entry) {
                        self.shared.drives[d].release(p);
                    }
                }
            }
        }
        // Bytes past the end inside the last extent read as zeros (a crash
        // may have come between a shrink recorded in the metadata and the
        // store's own zeroing); durable at the next commit.
        let tail = size_bytes % e;
        if tail != 0
            && let Some((d, p)) = map.last().and_then(|s| decode_entry(s.load(Ordering::Relaxed)))
        {
            let drive = &self.shared.drives[d];
            drive
                .backend
                .zero_sync(drive.offset(p, tail), e - tail)
                .map_err(|err| StoreError::io(&drive.label, "zero the tail of a volume", err))?;
        }
        let v = Arc::new(Volume::new(self.shared.clone(), id, size_bytes, block_size, map));
        reg.open.insert(id, v.clone());
        Ok(v)
    }

    /// Deletes volume `id`: unmaps and frees all its extents, durably.
    /// Open handles to it fail with
    /// [`BlockError::Gone`](strata_block::BlockError::Gone) afterwards.
    ///
    /// # Errors
    ///
    /// A commit failure.
    pub async fn delete_volume(&self, id: u64) -> Result<(), StoreError> {
        self.free_volume(id).await;
        self.shared.commit_all(false).await?;
        Ok(())
    }

    async fn free_volume(&self, id: u64) -> bool {
        let (open, entries) = {
            let mut reg = lock(&self.registry);
            (reg.open.remove(&id), reg.recovered.remove(&id))
        };
        let mut any = false;
        if let Some(v) = open {
            v.destroy().await;
            any = true;
        }
        for (_, entry) in entries.iter().flatten() {
            if let Some((d, p)) = decode_entry(*entry) {
                self.shared.drives[d].release(p);
                any = true;
            }
        }
        any
    }

    /// Frees, durably, the extents of every volume not in `ids` (orphans
    /// left by a crash between a metadata update and the store's), and
    /// deletes open volumes not listed. Returns the ids freed, sorted.
    ///
    /// # Errors
    ///
    /// A commit failure.
    pub async fn retain_volumes(&self, ids: &[u64]) -> Result<Vec<u64>, StoreError> {
        let keep: std::collections::HashSet<u64> = ids.iter().copied().collect();
        let mut victims = lock(&self.registry).ids();
        victims.retain(|id| !keep.contains(id));
        for &id in &victims {
            tracing::info!(volume = id, "freeing extents of a volume the metadata does not list");
            self.free_volume(id).await;
        }
        self.shared.commit_all(false).await?;
        Ok(victims)
    }

    /// Ids of volumes that have extents on the drives or are open.
    pub fn volume_ids(&self) -> Vec<u64> {
        lock(&self.registry).ids()
    }

    /// Space accounting per drive and in total.
    pub fn stats(&self) -> StoreStats {
        let drives: Vec<DriveStats> = self
            .shared
            .drives
            .iter()
            .map(|d| {
                let c = d.counts();
                DriveStats {
                    path: d.label.clone(),
                    kind: d.class.as_str(),
                    engine: d.backend.engine_name(),
                    capacity_bytes: d.sb.capacity,
                    extents_total: d.sb.extent_count,
                    extents_allocated: c.allocated,
                    extents_free: c.free,
                    extents_pending_free: c.freeing,
                    volatile: d.backend.volatile(),
                    failed: d.is_failed(),
                }
            })
            .collect();
        StoreStats {
            extent_size: self.shared.extent_size,
            capacity_bytes: drives.iter().map(|d| d.capacity_bytes).sum(),
            extents_total: drives.iter().map(|d| d.extents_total).sum(),
            extents_allocated: drives.iter().map(|d| d.extents_allocated).sum(),
            extents_free: drives.iter().map(|d| d.extents_free + d.extents_pending_free).sum(),
            volatile: drives.iter().any(|d| d.volatile),
            drives,
        }
    }

    /// Makes every completed write and every allocation, free and
    /// zeroing so far durable (a flush of every drive). Callers that
    /// record a larger volume size elsewhere (the metadata store) call it
    /// first, so that nothing the store dropped past the old end (frees
    /// at open, at a shrink) can come back inside the new one after a
    /// crash.
    ///
    /// # Errors
    ///
    /// A commit failure on any drive (all are tried).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: commits run on their drive's own task.
    pub async fn commit(&self) -> Result<(), StoreError> {
        self.shared.commit_all(false).await?;
        Ok(())
    }

    /// Makes everything durable and folds the journal into a checkpoint,
    /// so the next open replays nothing. Call on clean shutdown.
    ///
    /// # Errors
    ///
    /// A commit failure on any drive (all are tried).
    pub async fn flush_all(&self) -> Result<(), StoreError> {
        self.shared.commit_all(true).await?;
        Ok(())
    }
}
