//! The [`BlockDevice`] trait: what a namespace needs from storage.
//!
//! Addresses are in logical blocks of [`Geometry::block_size`] bytes. All
//! buffers are [`IoBuf`]s passed by value and returned with the result, so
//! that an implementation may hand them to the kernel for the duration of
//! the I/O.

use std::future::Future;
use std::pin::Pin;

use crate::{IoBuf, ReadData};

/// A boxed future returned by [`BlockDevice`] methods; boxing keeps the
/// trait usable as `dyn BlockDevice`.
pub type BlockFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Size and shape of a block device. The block count may change while the
/// device is in use (a volume grows); the block size never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes (512 or 4096).
    pub block_size: u32,
    /// Number of logical blocks.
    pub num_blocks: u64,
}

impl Geometry {
    /// Capacity in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks.saturating_mul(u64::from(self.block_size))
    }
}

/// Space used by a thin device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceUsage {
    /// Bytes the device may grow to (its provisioned size).
    pub provisioned_bytes: u64,
    /// Bytes of backing storage currently allocated to it.
    pub allocated_bytes: u64,
}

/// Why a block I/O failed. Each variant maps to one NVMe status in the
/// target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// The range `lba..lba+blocks` is not inside the device.
    #[error("LBA range {lba}+{blocks} is outside the device ({num_blocks} blocks)")]
    OutOfRange {
        /// First block asked for.
        lba: u64,
        /// Number of blocks asked for.
        blocks: u64,
        /// Current size of the device in blocks.
        num_blocks: u64,
    },
    /// A buffer's length is not a whole number of blocks, or does not match
    /// the block count.
    #[error("buffer of {len} bytes does not match the request ({expected} bytes expected)")]
    BadBuffer {
        /// Length of the buffer passed.
        len: usize,
        /// Length the request needs.
        expected: u64,
    },
    /// Thin provisioning ran out of backing space; nothing was written.
    #[error("no space left on the backing drives")]
    NoSpace,
    /// An earlier write or flush failed with an unknown outcome; the device
    /// refuses writes until it is recovered (reopened).
    #[error("device is failed after an earlier I/O error; restart to recover")]
    Failed,
    /// The device has been deleted or shut down.
    #[error("device is gone")]
    Gone,
    /// The backing drive reported an I/O error.
    #[error("drive I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// This path to the device cannot reach what serves it now (a node
    /// that forwards a pool volume's I/O to its owner lost the owner):
    /// nothing is known to have failed, and the same command may succeed
    /// through another path or later through this one. A target answers
    /// it with a path status (ANA Transition), which makes a multipath
    /// host retry elsewhere instead of failing the I/O.
    #[error("this path cannot reach the device now: {0}")]
    PathUnavailable(String),
    /// The namespace's reservation keeps the host that sent the command
    /// out (a pool volume's owner said so to the path that forwarded it);
    /// a target answers Reservation Conflict.
    #[error("a reservation keeps this host out")]
    ReservationConflict,
}

/// Storage for one namespace.
///
/// Implementations MUST:
/// - complete a `read` of a range that was never written, or was
///   deallocated or write-zeroed since, with zeros;
/// - make every write that completed before a `flush` was issued durable by
///   the time that `flush` completes, and a write with `fua` durable before
///   it completes, including whatever allocation holds it;
/// - never return data written to another device, nor torn garbage, after a
///   crash; a block reads back either as before or as after an unflushed
///   write;
/// - fail requests outside `0..geometry().num_blocks` with
///   [`BlockError::OutOfRange`] without touching anything.
///
/// Callers MUST pass buffers whose length is `blocks * block_size` and need
/// not serialise requests: implementations take any number concurrently.
/// Overlapping concurrent writes land in an unspecified order, as on NVMe.
///
/// # Cancellation
///
/// Every method returns a future that the caller may drop at any await
/// point (its host went away, a deadline fired). Implementations MUST
/// then:
/// - keep work shared with other callers going: a flush dropped while
///   the group commit it joined is running MUST NOT take other writers'
///   data out of that commit; a later flush that completes still makes
///   durable every write that completed before it was issued. Shared work
///   runs on a task of its own or is restored by a drop guard;
/// - return what the call reserved: allocations, buffers, locks, leases;
///   no invariant may depend on a future running to completion;
/// - leave each block in the range of a dropped `write`, `write_zeroes`
///   or `deallocate` reading as before or as after the call, after a
///   crash too; never as anything else, and never inside another device.
///
/// Callers MUST know that a dropped write may still reach the media
/// after the drop (a submitted I/O cannot be recalled). Its range has an
/// unknown outcome until a later `flush` completes: that flush waits for
/// it, so from then on it can no longer overtake a newer write. A caller
/// that needs a dropped write ordered before its next write to the same
/// blocks flushes in between, or waits for the write instead of dropping
/// it (the target does: see its `docs/nvme-tcp.md`).
pub trait BlockDevice: Send + Sync {
    /// Current geometry.
    fn geometry(&self) -> Geometry;

    /// Space accounting.
    fn usage(&self) -> DeviceUsage;

    /// Reads `buf.len() / block_size` blocks starting at `lba` into `buf`.
    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)>;

    /// Reads `blocks` blocks starting at `lba`, lending them instead of
    /// copying when the device can (RAM); see [`crate::lend`] for what a
    /// caller holding lent data owes the device. The caller bounds
    /// `blocks` (the target by MDTS): the data is held in memory.
    ///
    /// The default reads into a recycled [`IoBuf`].
    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        Box::pin(async move {
            let g = self.geometry();
            check_range(g, lba, blocks)?;
            let len = usize::try_from(blocks.saturating_mul(u64::from(g.block_size)))
                .map_err(|_| BlockError::OutOfRange { lba, blocks, num_blocks: g.num_blocks })?;
            let (buf, r) = self.read(lba, IoBuf::recycled(len)).await;
            r.map(|()| ReadData::Owned(buf))
        })
    }

    /// Writes `buf` at `lba`; with `fua` the data is durable on completion.
    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)>;

    /// Makes `blocks` blocks at `lba` read as zeros. With `deallocate` the
    /// device may also release the space behind them.
    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>>;

    /// Releases the space behind each `(lba, blocks)` range; afterwards the
    /// ranges read as zeros.
    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>>;

    /// Makes every write completed before this call durable.
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>>;
}

/// Checks that `lba..lba+blocks` lies inside `geometry`. Shared by
/// implementations so that they all report ranges the same way.
pub fn check_range(geometry: Geometry, lba: u64, blocks: u64) -> Result<(), BlockError> {
    match lba.checked_add(blocks) {
        Some(end) if end <= geometry.num_blocks => Ok(()),
        _ => Err(BlockError::OutOfRange { lba, blocks, num_blocks: geometry.num_blocks }),
    }
}

/// Number of blocks in `len` bytes, or [`BlockError::BadBuffer`] when `len`
/// is not a whole, non-zero number of blocks.
pub fn blocks_in(geometry: Geometry, len: usize) -> Result<u64, BlockError> {
    let bs = geometry.block_size as usize;
    if len == 0 || !len.is_multiple_of(bs) {
        let expected = (len.div_ceil(bs).max(1) * bs) as u64;
        return Err(BlockError::BadBuffer { len, expected });
    }
    Ok((len / bs) as u64)
}
