//! [`MemDevice`]: a volatile in-memory block device for tests and examples.
//!
//! Its futures complete on first poll. It is not thin and not durable; the
//! node store's `mem:` drive is the volatile backend meant for benchmarks.

use std::sync::RwLock;

use crate::device::{blocks_in, check_range};
use crate::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf};

/// A fixed-size block device held in memory.
pub struct MemDevice {
    block_size: u32,
    data: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zeroed device of `num_blocks` blocks of `block_size` bytes.
    pub fn new(block_size: u32, num_blocks: u64) -> MemDevice {
        let len = usize::try_from(num_blocks * u64::from(block_size)).unwrap_or(usize::MAX);
        MemDevice { block_size, data: RwLock::new(vec![0; len]) }
    }

    /// Grows or shrinks the device; new blocks read as zeros.
    pub fn resize(&self, num_blocks: u64) {
        let len = usize::try_from(num_blocks * u64::from(self.block_size)).unwrap_or(usize::MAX);
        self.lock_write().resize(len, 0);
    }

    fn lock_write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave the bytes in a state
        // worse than a torn write, which the device contract allows.
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    fn byte_range(&self, lba: u64, blocks: u64) -> Result<std::ops::Range<usize>, BlockError> {
        check_range(self.geometry(), lba, blocks)?;
        let bs = self.block_size as usize;
        // In range of the Vec, so the products fit in usize.
        let start = lba as usize * bs;
        Ok(start..start + blocks as usize * bs)
    }

    fn do_read(&self, lba: u64, buf: &mut IoBuf) -> Result<(), BlockError> {
        let blocks = blocks_in(self.geometry(), buf.len())?;
        let range = self.byte_range(lba, blocks)?;
        buf.copy_from_slice(&self.lock_read()[range]);
        Ok(())
    }

    fn do_write(&self, lba: u64, buf: &IoBuf) -> Result<(), BlockError> {
        let blocks = blocks_in(self.geometry(), buf.len())?;
        let range = self.byte_range(lba, blocks)?;
        self.lock_write()[range].copy_from_slice(buf);
        Ok(())
    }

    fn zero(&self, lba: u64, blocks: u64) -> Result<(), BlockError> {
        let range = self.byte_range(lba, blocks)?;
        self.lock_write()[range].fill(0);
        Ok(())
    }
}

impl BlockDevice for MemDevice {
    fn geometry(&self) -> Geometry {
        let len = self.lock_read().len() as u64;
        Geometry { block_size: self.block_size, num_blocks: len / u64::from(self.block_size) }
    }

    fn usage(&self) -> DeviceUsage {
        let size = self.geometry().size_bytes();
        DeviceUsage { provisioned_bytes: size, allocated_bytes: size }
    }

    fn read(&self, lba: u64, mut buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let res = self.do_read(lba, &mut buf);
        Box::pin(std::future::ready((buf, res)))
    }

    fn write(&self, lba: u64, buf: IoBuf, _fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let res = self.do_write(lba, &buf);
        Box::pin(std::future::ready((buf, res)))
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, _deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(std::future::ready(self.zero(lba, blocks)))
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        let res = ranges.iter().try_for_each(|&(lba, blocks)| self.zero(lba, blocks));
        Box::pin(std::future::ready(res))
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::future::Future;

    /// Runs a future that completes on its first poll (MemDevice's do).
    pub(crate) fn now<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("MemDevice future was not ready"),
        }
    }

    #[test]
    fn out_of_range_is_refused() {
        let d = MemDevice::new(512, 8);
        let (_, r) = now(d.read(7, IoBuf::zeroed(1024)));
        assert!(matches!(r, Err(BlockError::OutOfRange { lba: 7, blocks: 2, num_blocks: 8 })));
        let (_, r) = now(d.write(u64::MAX, IoBuf::zeroed(512), false));
        assert!(matches!(r, Err(BlockError::OutOfRange { .. })));
    }

    #[test]
    fn partial_block_buffer_is_refused() {
        let d = MemDevice::new(512, 8);
        let (_, r) = now(d.write(0, IoBuf::zeroed(100), false));
        assert!(matches!(r, Err(BlockError::BadBuffer { len: 100, expected: 512 })));
    }

    #[test]
    fn deallocate_reads_zeros_and_resize_grows() {
        let d = MemDevice::new(512, 4);
        let (_, r) = now(d.write(0, IoBuf::from_slice(&[9; 2048]), false));
        r.unwrap();
        now(d.deallocate(vec![(1, 2)])).unwrap();
        let (b, r) = now(d.read(0, IoBuf::zeroed(2048)));
        r.unwrap();
        assert!(b[..512].iter().all(|&x| x == 9));
        assert!(b[512..1536].iter().all(|&x| x == 0));
        assert!(b[1536..].iter().all(|&x| x == 9));
        d.resize(6);
        assert_eq!(d.geometry().num_blocks, 6);
    }
}
