//! [`Volume`]: a thin block device over the store's drives.
//!
//! A volume owns its forward map: one `AtomicU64` per logical extent,
//! `0` for unmapped, [`CLAIMED`] while a write allocates it, otherwise
//! `(drive + 1) << 48 | physical extent`. Lookups are lock-free loads.
//! The map sits inside a per-volume tokio `RwLock`: data I/O holds a read
//! guard for its whole duration, and operations that unmap extents
//! (deallocate, whole-extent write-zeroes, shrink, delete) take the write
//! guard, so that when an extent is handed back to its drive no I/O that
//! looked it up is still running.
//!
//! Allocation is per logical extent: a write that finds an extent
//! unmapped claims its slot with a CAS (0 -> `CLAIMED`), reserves a
//! physical extent, zeroes it (or writes it whole) and installs the
//! mapping. Reads see a claimed slot as unmapped (zeros: the write has
//! not completed); writes to it wait for the claim to resolve. Claims are
//! taken in ascending extent order, so waiting writers cannot deadlock,
//! and first writes to different extents run in parallel.
//!
//! Invariants:
//! - a mapped extent reads as zeros or as data this volume wrote. A new
//!   extent is zeroed (hole punch, `BLKZEROOUT`, memset) before its
//!   mapping is installed, unless the first write covers it whole, in
//!   which case the data goes in first. See `docs/durability.md`;
//! - `map.len()` is the extent count of `num_blocks` whenever the map
//!   guard is free, and bytes past the end inside the last extent are
//!   zeros, so that growing exposes zeros;
//! - no slot is `CLAIMED` while the write guard is held.
//!
//! # Cancel safety
//!
//! Every operation may be dropped at any await point. A dropped write has
//! an unknown outcome for its range (each block as before or as written);
//! its claims are released and its reserved extents go back to the drive
//! (through the next commit if I/O to them may still be in flight). A
//! dropped flush leaves the commit it joined running. A dropped resize or
//! deallocate leaves a consistent map (each step completes under the
//! guard, in an order that is valid at every await).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use strata_block::{
    BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, ReadData, blocks_in, check_range,
};

use crate::StoreError;
use crate::format::Owner;
use crate::shared::Shared;

const DRIVE_SHIFT: u32 = 48;
const EXTENT_MASK: u64 = (1 << DRIVE_SHIFT) - 1;
/// The slot value of a logical extent a write is allocating. Mapped
/// entries have a drive field of at least 1, so this (drive field 0,
/// extent 1) is never one.
const CLAIMED: u64 = 1;

pub(crate) fn encode_entry(drive: usize, p: u64) -> u64 {
    ((drive as u64 + 1) << DRIVE_SHIFT) | p
}

/// The `(drive, physical extent)` of a mapped slot; `None` for unmapped
/// and claimed ones.
pub(crate) fn decode_entry(e: u64) -> Option<(usize, u64)> {
    (e >> DRIVE_SHIFT != 0).then(|| (((e >> DRIVE_SHIFT) - 1) as usize, e & EXTENT_MASK))
}

/// One piece of a request that falls inside a single extent.
#[derive(Debug, Clone, Copy)]
struct Piece {
    lext: usize,
    /// Offset within the extent.
    off: u64,
    /// Offset within the request's buffer.
    buf_off: usize,
    len: usize,
}

/// A thin volume. Shared as `Arc<Volume>`; obtained from
/// [`crate::Store::open_volume`].
pub struct Volume {
    id: u64,
    block_size: u32,
    num_blocks: AtomicU64,
    shared: Arc<Shared>,
    map: tokio::sync::RwLock<Vec<AtomicU64>>,
    /// Woken whenever a claim resolves (installed or released).
    claims_resolved: tokio::sync::Notify,
    allocated: AtomicU64,
    failed: AtomicBool,
    gone: AtomicBool,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").field("id", &self.id).field("geometry", &self.geometry()).finish()
    }
}

impl Volume {
    pub(crate) fn new(shared: Arc<Shared>, id: u64, size_bytes: u64, block_size: u32, map: Vec<AtomicU64>) -> Volume {
        let allocated = map.iter().filter(|e| e.load(Ordering::Relaxed) != 0).count() as u64;
        Volume {
            id,
            block_size,
            num_blocks: AtomicU64::new(size_bytes / u64::from(block_size)),
            shared,
            map: tokio::sync::RwLock::new(map),
            claims_resolved: tokio::sync::Notify::new(),
            allocated: AtomicU64::new(allocated),
            failed: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        }
    }

    /// The volume id given to [`crate::Store::open_volume`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes of drive space allocated to this volume.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed) * self.shared.extent_size()
    }

    /// True after a write or flush failed with an unknown outcome; the
    /// volume then refuses writes until the store is reopened.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn extent_size(&self) -> u64 {
        self.shared.extent_size()
    }

    /// True when `len` bytes at byte offset `start` lie in one extent.
    fn in_one_extent(&self, start: u64, len: usize) -> bool {
        let e = self.extent_size();
        e - start % e >= len as u64
    }

    fn geometry_now(&self) -> Geometry {
        Geometry { block_size: self.block_size, num_blocks: self.num_blocks.load(Ordering::Acquire) }
    }

    fn check_writable(&self) -> Result<(), BlockError> {
        if self.gone.load(Ordering::Acquire) {
            return Err(BlockError::Gone);
        }
        if self.is_failed() {
            return Err(BlockError::Failed);
        }
        Ok(())
    }

    fn fail(&self, e: std::io::Error) -> BlockError {
        self.failed.store(true, Ordering::Release);
        tracing::error!(volume = self.id, error = %e, "write failed with unknown outcome; volume refuses writes until restart");
        BlockError::Io(e)
    }

    /// Splits byte range `start..start+len` into per-extent pieces.
    fn pieces(&self, start: u64, len: usize) -> impl Iterator<Item = Piece> + use<> {
        let e = self.extent_size();
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let pos = start + done as u64;
            let off = pos % e;
            let n = ((e - off) as usize).min(len - done);
            let p = Piece { lext: (pos / e) as usize, off, buf_off: done, len: n };
            done += n;
            Some(p)
        })
    }

    /// Grows or shrinks the volume to `size_bytes` (a multiple of the
    /// block size). Shrinking frees the extents past the end and zeroes
    /// the cut-off tail of the last one, so growing again reads zeros;
    /// both are durable when this returns.
    ///
    /// # Errors
    ///
    /// [`StoreError::BadVolume`] for a size that is not a whole number of
    /// blocks; a block error if zeroing the tail or the commit fails.
    ///
    /// # Cancel safety
    ///
    /// The map and the size change together, with no await in between,
    /// after the tail is zeroed: a dropped shrink leaves the old size (with
    /// the range being cut reading old data or zeros) or the new one (its
    /// frees and zeroing durable at the next commit).
    pub async fn resize(&self, size_bytes: u64) -> Result<(), StoreError> {
        self.check_writable()?;
        if !size_bytes.is_multiple_of(u64::from(self.block_size)) {
            return Err(StoreError::BadVolume {
                id: self.id,
                reason: format!("size {size_bytes} is not a multiple of the block size {}", self.block_size),
            });
        }
        let e = self.extent_size();
        let new_ext = usize::try_from(size_bytes.div_ceil(e))
            .map_err(|_| StoreError::BadVolume { id: self.id, reason: format!("size {size_bytes} is too large") })?;
        {
            let mut map = self.map.write().await;
            let tail = size_bytes % e;
            if size_bytes < self.geometry_now().size_bytes()
                && tail != 0
                && let Some((d, p)) = map.get(new_ext - 1).and_then(|s| decode_entry(s.load(Ordering::Acquire)))
            {
                // Zero what will lie past the new end in the new last
                // extent while it is still inside the volume: if this is
                // dropped half way, the volume keeps its size and the
                // range being cut reads zeros or old data. A barrier
                // first: a write whose caller went away may still be in
                // flight there and must not land after the zeros.
                let drive = &self.shared.drives[d];
                drive.backend.sync().await.map_err(|err| self.fail(err))?;
                drive.backend.zero(drive.offset(p, tail), e - tail).await.map_err(|err| self.fail(err))?;
            }
            // No await from here until the map and the size agree again.
            if new_ext < map.len() {
                for slot in map.drain(new_ext..) {
                    self.unmap(slot.into_inner());
                }
            }
            map.resize_with(new_ext, || AtomicU64::new(0));
            self.num_blocks.store(size_bytes / u64::from(self.block_size), Ordering::Release);
        }
        self.shared.commit_all(false).await?;
        Ok(())
    }

    /// Hands a mapped extent back to its drive. Callers hold the write
    /// guard (or own the map), so no I/O to it is in flight.
    fn unmap(&self, entry: u64) {
        if let Some((d, p)) = decode_entry(entry) {
            self.shared.drives[d].release(p);
            self.allocated.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Unmaps every extent; used by delete. Marks the volume gone.
    pub(crate) async fn destroy(&self) {
        self.gone.store(true, Ordering::Release);
        let mut map = self.map.write().await;
        for slot in map.drain(..) {
            self.unmap(slot.into_inner());
        }
        self.num_blocks.store(0, Ordering::Release);
    }

    async fn do_read(&self, lba: u64, buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let map = self.map.read().await;
        let g = self.geometry_now();
        match blocks_in(g, buf.len()).and_then(|b| check_range(g, lba, b)) {
            Ok(()) => self.read_locked(&map, lba, buf).await,
            Err(e) => (buf, Err(e)),
        }
    }

    /// Reads a checked range into `buf` under the map guard.
    async fn read_locked(&self, map: &[AtomicU64], lba: u64, mut buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let start = lba * u64::from(self.block_size);
        let len = buf.len();
        let single = self.in_one_extent(start, len);
        for pc in self.pieces(start, len) {
            let Some((d, p)) = decode_entry(entry_at(map, pc.lext)) else {
                buf[pc.buf_off..pc.buf_off + pc.len].fill(0);
                continue;
            };
            let drive = &self.shared.drives[d];
            if single {
                return drive.backend.read(drive.offset(p, pc.off), buf).await.map_res();
            }
            let (tmp, r) = drive.backend.read(drive.offset(p, pc.off), IoBuf::recycled(pc.len)).await;
            if let Err(e) = r {
                return (buf, Err(BlockError::Io(e)));
            }
            buf[pc.buf_off..pc.buf_off + pc.len].copy_from_slice(&tmp);
        }
        (buf, Ok(()))
    }

    /// Reads `blocks` blocks at `lba`, lent by the drive when it can (a
    /// RAM drive, a range inside one mapped extent, no writer there).
    ///
    /// The lease outlives the map guard on purpose: the drive itself keeps
    /// lent bytes unchanged, and an extent freed meanwhile cannot be
    /// zeroed or written for its next owner until the lease ends.
    async fn do_read_data(&self, lba: u64, blocks: u64) -> Result<ReadData, BlockError> {
        let map = self.map.read().await;
        let g = self.geometry_now();
        check_range(g, lba, blocks)?;
        let len = usize::try_from(blocks * u64::from(self.block_size)).map_err(|_| BlockError::OutOfRange {
            lba,
            blocks,
            num_blocks: g.num_blocks,
        })?;
        let start = lba * u64::from(self.block_size);
        if self.in_one_extent(start, len)
            && let Some(pc) = self.pieces(start, len).next()
            && let Some((d, p)) = decode_entry(entry_at(&map, pc.lext))
        {
            let drive = &self.shared.drives[d];
            if let Some(lent) = drive.backend.lend(drive.offset(p, pc.off), len) {
                return Ok(ReadData::Lent(lent));
            }
        }
        let (buf, r) = self.read_locked(&map, lba, IoBuf::recycled(len)).await;
        r.map(|()| ReadData::Owned(buf))
    }

    async fn do_write(&self, lba: u64, buf: IoBuf, fua: bool) -> (IoBuf, Result<(), BlockError>) {
        if let Err(e) = self.check_writable() {
            return (buf, Err(e));
        }
        let (buf, r) = {
            let map = self.map.read().await;
            self.write_locked(&map, lba, buf).await
        };
        if r.is_err() || !fua {
            return (buf, r);
        }
        let r = self.do_flush().await;
        (buf, r)
    }

    async fn write_locked(&self, map: &[AtomicU64], lba: u64, buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let g = self.geometry_now();
        let blocks = match blocks_in(g, buf.len()).and_then(|b| check_range(g, lba, b).map(|_| b)) {
            Ok(b) => b,
            Err(e) => return (buf, Err(e)),
        };
        let start = lba * u64::from(self.block_size);
        let len = (blocks * u64::from(self.block_size)) as usize;
        // Claim every unmapped extent the write needs and reserve space for
        // each before touching anything, so that a full store fails the
        // write with NoSpace and no change.
        let mut claims = Claims { vol: self, map, items: Vec::new() };
        for pc in self.pieces(start, len) {
            let Some(slot) = map.get(pc.lext) else {
                return (buf, Err(BlockError::OutOfRange { lba, blocks, num_blocks: g.num_blocks }));
            };
            if self.claim(slot).await {
                claims.items.push(Claim { lext: pc.lext, extent: None, io_started: false });
            }
        }
        for c in &mut claims.items {
            match self.shared.allocate().await {
                Ok(x) => c.extent = Some(x),
                Err(err) => return (buf, Err(err)),
            }
        }
        self.write_pieces(map, start, len, buf, &mut claims).await
    }

    /// Waits until `slot` is not claimed by another write, then claims it
    /// if it is unmapped. Returns true when this call claimed it.
    ///
    /// Callers claim in ascending extent order: a write waits only for
    /// extents above every one it holds, so waits cannot form a cycle.
    async fn claim(&self, slot: &AtomicU64) -> bool {
        loop {
            let resolved = self.claims_resolved.notified();
            let mut resolved = std::pin::pin!(resolved);
            // Registered before the check: a resolution in between is not
            // missed.
            resolved.as_mut().enable();
            match slot.compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(CLAIMED) => resolved.await,
                Err(_) => return false,
            }
        }
    }

    async fn write_pieces(
        &self,
        map: &[AtomicU64],
        start: u64,
        len: usize,
        mut buf: IoBuf,
        claims: &mut Claims<'_>,
    ) -> (IoBuf, Result<(), BlockError>) {
        let e = self.extent_size();
        let single = self.in_one_extent(start, len);
        for pc in self.pieces(start, len) {
            let mut entry = entry_at(map, pc.lext);
            if entry == CLAIMED {
                let Some(claim) = claims.items.iter_mut().find(|c| c.lext == pc.lext) else {
                    // Unreachable: only this write's own claims stay
                    // claimed while it runs (claim() waited for others).
                    return (buf, Err(BlockError::Failed));
                };
                let Some((d, p)) = claim.extent else { return (buf, Err(BlockError::NoSpace)) };
                claim.io_started = true;
                let drive = &self.shared.drives[d];
                let whole = pc.off == 0 && pc.len as u64 == e;
                if whole {
                    // The data fills the extent: write it before the
                    // mapping exists, no zeroing needed.
                    let r;
                    (buf, r) = self.write_piece(drive, p, pc, buf, single).await;
                    if let Err(err) = r {
                        return (buf, Err(BlockError::Io(err)));
                    }
                } else if let Err(err) = drive.backend.zero(drive.offset(p, 0), e).await {
                    return (buf, Err(BlockError::Io(err)));
                }
                let owner = Owner { volume: self.id, lext: pc.lext as u32, generation: self.shared.next_generation() };
                entry = encode_entry(d, p);
                map[pc.lext].store(entry, Ordering::Release);
                drive.install(p, owner);
                claim.extent = None;
                self.allocated.fetch_add(1, Ordering::Relaxed);
                self.claims_resolved.notify_waiters();
                if whole {
                    continue;
                }
            }
            let Some((d, p)) = decode_entry(entry) else { continue };
            let drive = &self.shared.drives[d];
            if drive.is_failed() {
                return (buf, Err(BlockError::Failed));
            }
            let r;
            (buf, r) = self.write_piece(drive, p, pc, buf, single).await;
            if let Err(err) = r {
                return (buf, Err(self.fail(err)));
            }
        }
        (buf, Ok(()))
    }

    /// Writes one piece of `buf`: the buffer itself when the request is
    /// one piece, else a copy.
    async fn write_piece(
        &self,
        drive: &crate::drive::Drive,
        p: u64,
        pc: Piece,
        buf: IoBuf,
        single: bool,
    ) -> (IoBuf, std::io::Result<()>) {
        let at = drive.offset(p, pc.off);
        if single {
            return drive.backend.write(at, buf).await;
        }
        let tmp = IoBuf::from_slice(&buf[pc.buf_off..pc.buf_off + pc.len]);
        let (_, r) = drive.backend.write(at, tmp).await;
        (buf, r)
    }

    /// Zeroes (and with whole extents, unmaps) each range.
    async fn do_zero_ranges(&self, ranges: &[(u64, u64)]) -> Result<(), BlockError> {
        self.check_writable()?;
        let bs = u64::from(self.block_size);
        let e = self.extent_size();
        // Whole extents: unmap under the write guard.
        {
            let map = self.map.write().await;
            let g = self.geometry_now();
            for &(lba, blocks) in ranges {
                check_range(g, lba, blocks)?;
            }
            for &(lba, blocks) in ranges {
                let (start, end) = (lba * bs, (lba + blocks) * bs);
                let first = start.div_ceil(e);
                let last = end / e;
                for lext in first..last {
                    self.unmap(map[lext as usize].swap(0, Ordering::AcqRel));
                }
            }
        }
        // Partial extents: write zeros where mapped, under the read guard.
        let map = self.map.read().await;
        let g = self.geometry_now();
        for &(lba, blocks) in ranges {
            if check_range(g, lba, blocks).is_err() {
                // Shrunk in between; what is gone needs no zeroing.
                continue;
            }
            let (start, end) = (lba * bs, (lba + blocks) * bs);
            for pc in self.pieces(start, (end - start) as usize) {
                if pc.off == 0 && pc.len as u64 == e {
                    continue;
                }
                let Some((d, p)) = decode_entry(map[pc.lext].load(Ordering::Acquire)) else { continue };
                let drive = &self.shared.drives[d];
                drive.backend.zero(drive.offset(p, pc.off), pc.len as u64).await.map_err(|err| self.fail(err))?;
            }
        }
        Ok(())
    }

    async fn do_flush(&self) -> Result<(), BlockError> {
        if self.gone.load(Ordering::Acquire) {
            return Err(BlockError::Gone);
        }
        if self.is_failed() {
            return Err(BlockError::Failed);
        }
        self.shared.commit_all(false).await
    }
}

/// The slot value of logical extent `lext`; `0` (unmapped) past the end,
/// which the range checks done under the map guard rule out.
fn entry_at(map: &[AtomicU64], lext: usize) -> u64 {
    debug_assert!(lext < map.len(), "extent {lext} past the map ({})", map.len());
    map.get(lext).map_or(0, |s| s.load(Ordering::Acquire))
}

/// A logical extent a write claimed, with the physical extent reserved
/// for it until the mapping is installed (then `None`).
struct Claim {
    lext: usize,
    extent: Option<(usize, u64)>,
    /// Zeroing or data I/O to `extent` was issued (and may still be in
    /// flight if the write is dropped).
    io_started: bool,
}

/// The claims of one write. Dropping it (the write failed, or its future
/// was dropped) releases what was not installed: the slot goes back to
/// unmapped, the extent back to its drive, and waiting writers wake.
struct Claims<'a> {
    vol: &'a Volume,
    map: &'a [AtomicU64],
    items: Vec<Claim>,
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let mut released = false;
        for c in self.items.drain(..) {
            let Some((d, p)) = c.extent else {
                // Installed (the slot holds the mapping) or never reserved.
                if let Some(slot) = self.map.get(c.lext) {
                    released |= slot.compare_exchange(CLAIMED, 0, Ordering::AcqRel, Ordering::Acquire).is_ok();
                }
                continue;
            };
            if let Some(slot) = self.map.get(c.lext) {
                slot.store(0, Ordering::Release);
            }
            let drive = &self.vol.shared.drives[d];
            if c.io_started {
                drive.untake_after_io(p);
            } else {
                drive.untake(p);
            }
            released = true;
        }
        if released {
            self.vol.claims_resolved.notify_waiters();
        }
    }
}

trait MapRes {
    fn map_res(self) -> (IoBuf, Result<(), BlockError>);
}

impl MapRes for (IoBuf, std::io::Result<()>) {
    fn map_res(self) -> (IoBuf, Result<(), BlockError>) {
        (self.0, self.1.map_err(BlockError::Io))
    }
}

impl BlockDevice for Volume {
    fn geometry(&self) -> Geometry {
        self.geometry_now()
    }

    fn usage(&self) -> DeviceUsage {
        DeviceUsage { provisioned_bytes: self.geometry_now().size_bytes(), allocated_bytes: self.allocated_bytes() }
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(self.do_read(lba, buf))
    }

    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        Box::pin(self.do_read_data(lba, blocks))
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(self.do_write(lba, buf, fua))
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, _deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        // Whole extents are unmapped either way: an unmapped extent reads
        // as zeros, which is what Write Zeroes promises.
        Box::pin(async move { self.do_zero_ranges(&[(lba, blocks)]).await })
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move { self.do_zero_ranges(&ranges).await })
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(self.do_flush())
    }
}
