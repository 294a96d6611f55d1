//! [`Volume`]: a thin block device over the store's drives.
//!
//! A volume owns its forward map: one `AtomicU64` per logical extent,
//! `0` for unmapped, otherwise `(drive + 1) << 48 | physical extent`.
//! Lookups are lock-free loads. The map sits inside a per-volume tokio
//! `RwLock`: data I/O holds a read guard for its whole duration, and
//! operations that unmap extents (deallocate, whole-extent write-zeroes,
//! shrink, delete) take the write guard, so that when an extent is handed
//! back to its drive no I/O that looked it up is still in flight.
//! Allocation serialises on a per-volume async mutex and re-checks the
//! entry under it.
//!
//! Invariant: a mapped extent reads as zeros or as data this volume wrote.
//! A new extent is zeroed (hole punch, `BLKZEROOUT`, memset) before its
//! mapping is installed, unless the first write covers it whole, in which
//! case the data goes in first. See `docs/durability.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use strata_block::{
    BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, ReadData, blocks_in, check_range,
};

use crate::StoreError;
use crate::format::Owner;
use crate::store::Shared;

const DRIVE_SHIFT: u32 = 48;
const EXTENT_MASK: u64 = (1 << DRIVE_SHIFT) - 1;

pub(crate) fn encode_entry(drive: usize, p: u64) -> u64 {
    ((drive as u64 + 1) << DRIVE_SHIFT) | p
}

pub(crate) fn decode_entry(e: u64) -> Option<(usize, u64)> {
    (e != 0).then(|| (((e >> DRIVE_SHIFT) - 1) as usize, e & EXTENT_MASK))
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
    alloc: tokio::sync::Mutex<()>,
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
            alloc: tokio::sync::Mutex::new(()),
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
    /// the cut-off tail of the last one, so growing again reads zeros.
    ///
    /// # Errors
    ///
    /// [`StoreError::BadVolume`] for a size that is not a whole number of
    /// blocks; a block error if zeroing the tail fails.
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
        let mut map = self.map.write().await;
        if new_ext < map.len() {
            for slot in map.drain(new_ext..) {
                self.unmap(slot.into_inner());
            }
        }
        let tail = size_bytes % e;
        if tail != 0
            && let Some((d, p)) = map.get(new_ext - 1).and_then(|s| decode_entry(s.load(Ordering::Acquire)))
        {
            let drive = &self.shared.drives[d];
            drive.backend.zero(drive.offset(p, tail), e - tail).await.map_err(|err| self.fail(err))?;
        }
        map.resize_with(new_ext, || AtomicU64::new(0));
        self.num_blocks.store(size_bytes / u64::from(self.block_size), Ordering::Release);
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
            let Some((d, p)) = decode_entry(map[pc.lext].load(Ordering::Acquire)) else {
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
            && let Some((d, p)) = decode_entry(map[pc.lext].load(Ordering::Acquire))
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

    async fn write_locked(&self, map: &[AtomicU64], lba: u64, mut buf: IoBuf) -> (IoBuf, Result<(), BlockError>) {
        let g = self.geometry_now();
        let blocks = match blocks_in(g, buf.len()).and_then(|b| check_range(g, lba, b).map(|_| b)) {
            Ok(b) => b,
            Err(e) => return (buf, Err(e)),
        };
        let start = lba * u64::from(self.block_size);
        let len = (blocks * u64::from(self.block_size)) as usize;
        let single = self.in_one_extent(start, len);
        // Reserve every extent the write needs before touching anything,
        // so that a full store fails the write with NoSpace and no change.
        let mut reserved: Vec<(usize, u64)> = Vec::new();
        let mut _alloc = None;
        if self.pieces(start, len).any(|pc| map[pc.lext].load(Ordering::Acquire) == 0) {
            _alloc = Some(self.alloc.lock().await);
            // Re-check under the allocation lock: another write may have
            // mapped some of them meanwhile; nobody can map them now.
            let need = self.pieces(start, len).filter(|pc| map[pc.lext].load(Ordering::Acquire) == 0).count();
            while reserved.len() < need {
                match self.shared.allocate().await {
                    Ok(x) => reserved.push(x),
                    Err(err) => {
                        self.unreserve(reserved);
                        return (buf, Err(err));
                    }
                }
            }
        }
        let r;
        (buf, r) = self.write_pieces(map, start, len, buf, single, &mut reserved).await;
        self.unreserve(reserved);
        (buf, r)
    }

    fn unreserve(&self, reserved: Vec<(usize, u64)>) {
        for (d, p) in reserved {
            self.shared.drives[d].untake(p);
        }
    }

    async fn write_pieces(
        &self,
        map: &[AtomicU64],
        start: u64,
        len: usize,
        mut buf: IoBuf,
        single: bool,
        reserved: &mut Vec<(usize, u64)>,
    ) -> (IoBuf, Result<(), BlockError>) {
        let e = self.extent_size();
        for pc in self.pieces(start, len) {
            let mut entry = map[pc.lext].load(Ordering::Acquire);
            if entry == 0 {
                let Some((d, p)) = reserved.pop() else {
                    // Unreachable: the reservation counted this piece under
                    // the allocation lock, which is still held.
                    return (buf, Err(BlockError::NoSpace));
                };
                let drive = &self.shared.drives[d];
                let whole = pc.off == 0 && pc.len as u64 == e;
                if whole {
                    // The data fills the extent: write it before the
                    // mapping exists, no zeroing needed.
                    let r;
                    (buf, r) = self.write_piece(drive, p, pc, buf, single).await;
                    if let Err(err) = r {
                        drive.untake(p);
                        return (buf, Err(BlockError::Io(err)));
                    }
                } else if let Err(err) = drive.backend.zero(drive.offset(p, 0), e).await {
                    drive.untake(p);
                    return (buf, Err(BlockError::Io(err)));
                }
                let owner = Owner { volume: self.id, lext: pc.lext as u32, generation: self.shared.next_generation() };
                entry = encode_entry(d, p);
                map[pc.lext].store(entry, Ordering::Release);
                drive.install(p, owner);
                self.allocated.fetch_add(1, Ordering::Relaxed);
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
